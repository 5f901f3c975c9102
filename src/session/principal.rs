//! Who a served connection acts for, and so which sessions it may touch: the local user (no
//! `--auth`: stdio, `exec`, and a server without tokens), who sees every session; or the named
//! principal of a `cairn serve --auth` token, who sees only the sessions it owns. A session it
//! does not own is, to it, a session that does not exist.

use std::sync::Arc;

use crate::ids::SessionId;
use crate::store::Store;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Principal {
    /// The user running cairn: every session.
    Local,
    /// A token's principal: the sessions it created, their forks and sub-agents.
    Named(Arc<str>),
}

impl Principal {
    /// The owner its new sessions are stored with.
    pub fn owner(&self) -> Option<String> {
        match self {
            Self::Local => None,
            Self::Named(name) => Some(name.to_string()),
        }
    }

    /// Whether it may touch session `id` (which may not exist). Read from memory, never the
    /// database, so a request is checked as it is read, in wire order.
    pub fn sees(&self, store: &Store, id: &SessionId) -> bool {
        match self {
            Self::Local => true,
            Self::Named(name) => store.owner(id).is_some_and(|owner| owner == *name),
        }
    }
}
