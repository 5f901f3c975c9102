//! A connection's place on the server: one of `--max-connections` (WebSocket and Streamable HTTP
//! together), and with `--auth` also one of its principal's `--max-connections-per-token`, so
//! that one token cannot take every place. Held while the connection lives; let go when dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::Server;
use super::listen::Slot;
use crate::session::Principal;

/// How many connections each principal holds now.
#[derive(Default)]
pub struct Seats(Mutex<HashMap<Arc<str>, usize>>);

impl Seats {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, usize>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One connection's place.
pub struct Seat {
    _slot: Slot,
    principal: Option<(Arc<Seats>, Arc<str>)>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        let Some((seats, name)) = &self.principal else { return };
        let mut held = seats.lock();
        if let Some(count) = held.get_mut(name) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                held.remove(name);
            }
        }
    }
}

/// A place for a new connection of `principal`, or why there is none (for a 503).
pub fn take(server: &Server, principal: &Principal) -> Result<Seat, String> {
    let limits = &server.limits;
    let Some(slot) = Slot::take(&server.open, limits.connections) else {
        return Err(format!(
            "cairn serve has {} connections open, its limit (--max-connections); try again later",
            limits.connections
        ));
    };
    let principal = match principal {
        Principal::Local => None,
        Principal::Named(name) => {
            let mut held = server.seats.lock();
            let count = held.entry(Arc::clone(name)).or_insert(0);
            if *count >= limits.per_principal {
                return Err(format!(
                    "this token's principal {name} has {} connections open, its limit \
                     (--max-connections-per-token); close one or try again later",
                    limits.per_principal
                ));
            }
            *count += 1;
            Some((Arc::clone(&server.seats), Arc::clone(name)))
        }
    };
    Ok(Seat { _slot: slot, principal })
}
