//! One connection of `cairn serve` as the handlers see it: the server's hub, the connection's
//! view in it, and whom it acts for ([`Principal`]). A connection views each session it opens,
//! prompts or changes the settings of; a request that finds its session does not exist leaves
//! it unviewed, and a settings change reaches the other connections viewing the session.

use std::sync::Arc;

use agent_client_protocol_schema::v1 as acp;

use super::convert::session_error;
use crate::ids::SessionId;
use crate::session::{Hub, Principal, SessionError, Viewer};

/// One connection of a server: the server's hub, this connection's view in it, and whom the
/// connection acts for.
pub struct Served {
    pub hub: Arc<Hub>,
    pub viewer: Viewer,
    pub principal: Principal,
}

impl Served {
    /// This connection sees `session`'s updates from now on.
    pub(super) fn view(&self, session: &SessionId) {
        self.hub.attach(session, &self.viewer);
    }

    /// This connection prompts `session`: it views it, and the turn uses its files and terminals.
    pub(super) fn drive(&self, session: &SessionId) {
        self.hub.drive(session, &self.viewer);
    }

    /// The answer of a request naming `session`: on a server, a connection does not view a
    /// session the request found not to exist.
    pub(super) fn found<T>(
        served: Option<&Served>,
        session: &SessionId,
        result: Result<T, SessionError>,
    ) -> Result<T, acp::Error> {
        if let (Some(served), Err(SessionError::NotFound(_))) = (served, &result) {
            served.hub.unview(session, &served.viewer);
        }
        result.map_err(|err| session_error(&err))
    }

    /// What a settings change on `session` leaves: [`Self::found`], and the other connections
    /// viewing the session see the change (shown by the session's actor instead where replicas
    /// share the store).
    pub(super) fn after_change(
        served: Option<&Served>,
        session: &SessionId,
        changed: Result<crate::session::SessionView, SessionError>,
    ) -> Result<crate::session::SessionView, acp::Error> {
        let view = Self::found(served, session, changed)?;
        // Replicas sharing a store: the session's actor showed them already, in the order of
        // the session's log (an own change here may be followed by another replica's).
        if let Some(served) = served.filter(|served| !served.hub.numbers_by_log()) {
            let update = crate::session::Update::Options(Box::new(view.clone()));
            served.hub.send_to_others(session, update, &served.viewer);
        }
        Ok(view)
    }
}
