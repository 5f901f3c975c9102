//! The sessions while the store opens: set up on a blocking thread from the moment the process
//! starts, so `initialize` (which needs neither the database nor the configuration) is answered
//! at once. The first method that needs the sessions waits for the setup to finish; it runs in the
//! reader's synchronous part, which keeps wire order (a prompt right behind a `session/resume`
//! still finds the session attached) at the cost of not reading further input for those few
//! milliseconds. Once the sessions are published, the same thread goes on to build what a first
//! prompt would otherwise build on its path (the model providers' HTTP client, a connection to
//! the default model's provider).

use std::sync::{Mutex, OnceLock, mpsc};

use crate::session::Registry;

/// The sessions, or why they could not be set up (bad configuration, unusable database), once
/// known.
pub struct Opening {
    ready: OnceLock<Result<Registry, String>>,
    pending: Mutex<Option<mpsc::Receiver<Result<Registry, String>>>>,
}

impl Opening {
    /// Starts `setup` on a blocking thread of the runtime (which may spawn tasks), and `then` on
    /// the same thread once the sessions are published, if they could be set up.
    pub fn start(
        setup: impl FnOnce() -> Result<Registry, String> + Send + 'static,
        then: impl FnOnce(&Registry) + Send + 'static,
    ) -> Self {
        let (done, pending) = mpsc::sync_channel(1);
        tokio::task::spawn_blocking(move || {
            let sessions = setup();
            let ready = sessions.as_ref().ok().cloned();
            if let Err(why) = &sessions {
                tracing::error!("{why}");
            }
            let _ = done.send(sessions);
            if let Some(sessions) = ready {
                then(&sessions);
            }
        });
        Self { ready: OnceLock::new(), pending: Mutex::new(Some(pending)) }
    }

    /// Sessions set up already (a server's, shared by its connections).
    pub fn ready(sessions: Registry) -> Self {
        Self { ready: OnceLock::from(Ok(sessions)), pending: Mutex::new(None) }
    }

    /// The sessions, waiting for the setup if it is still running.
    pub fn get(&self) -> &Result<Registry, String> {
        self.ready.get_or_init(|| {
            let pending = self.pending.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            pending.and_then(|pending| pending.recv().ok()).unwrap_or_else(|| {
                Err("cairn could not set up its sessions (the setup thread stopped); see the log above".to_owned())
            })
        })
    }
}
