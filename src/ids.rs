//! Identifiers that sort by creation time: `<prefix>_<14 hex stamp><12 base62 random>`.
//!
//! The stamp is `(unix_ms << 12) | counter`, forced to grow strictly within a process, so
//! lexicographic order is insertion order; the random tail keeps two processes that share one
//! database from colliding. Sessions (`ses_`), messages (`msg_`) and parts (`prt_`) use it.
//! [`now_ms`] is the clock of the stamps and of the times the store keeps; [`iso8601`] prints one.
//! [`random_hex`] gives unguessable names. [`LeaseHolder`] names the process holding a session, what a refused turn is told in every
//! layer (its wording is the store's, beside the lease).

use std::fmt;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

static LAST_STAMP: AtomicU64 = AtomicU64::new(0);
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Milliseconds since the Unix epoch, the unit of every `*_at` column.
pub fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)).unwrap_or(0)
}

/// A stored time (`*_at`) as ISO 8601 in UTC with milliseconds, as ACP's `updatedAt` is written.
pub fn iso8601(ms: i64) -> Option<String> {
    chrono::DateTime::from_timestamp_millis(ms).map(|at| at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
}

/// Who holds a session another process asked for: what its error names.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseHolder {
    pub session: SessionId,
    pub pid: u32,
    pub host: String,
    /// When it took the lease (Unix ms).
    pub since: i64,
    /// Its last heartbeat (Unix ms).
    pub heartbeat: i64,
}

/// `N` bytes from the system's secure random source, as hex; `None` when it gives none. For
/// names nobody can guess or plant in advance.
pub fn random_hex<const N: usize>() -> Option<String> {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new().fill(&mut bytes).ok()?;
    Some(crate::digest::hex(&bytes))
}

/// A fresh id with the given prefix, greater than every id this process made before.
pub fn new_id(prefix: &str) -> String {
    let now = u64::try_from(now_ms()).unwrap_or(0) << 12;
    let mut last = LAST_STAMP.load(Ordering::Relaxed);
    let stamp = loop {
        let next = now.max(last + 1);
        match LAST_STAMP.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => break next,
            Err(seen) => last = seen,
        }
    };
    // `RandomState` is seeded from the OS once per process and varies per instance, which is
    // all the randomness a collision-avoiding tail needs.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(stamp);
    hasher.write_u64(SEQUENCE.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    let mut random = hasher.finish();
    let mut id = String::with_capacity(prefix.len() + 27);
    id.push_str(prefix);
    id.push('_');
    id.push_str(&format!("{stamp:014x}"));
    for _ in 0..12 {
        id.push(char::from(BASE62[(random % 62) as usize]));
        random /= 62;
    }
    id
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Arc<str>);

        impl $name {
            /// A new, time-ordered id.
            pub fn generate() -> Self {
                Self(new_id($prefix).into())
            }

            /// Wraps an id received from a client or read from the store.
            pub fn from_string(id: impl Into<Arc<str>>) -> Self {
                Self(id.into())
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

id_type!(
    /// Identifies a session; it is also the ACP `sessionId`.
    SessionId,
    "ses"
);
id_type!(
    /// Identifies a message; it is also the ACP `messageId` of its chunks.
    MessageId,
    "msg"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_names_are_as_long_as_asked_and_unlike() {
        let (one, two) = (random_hex::<16>().unwrap(), random_hex::<16>().unwrap());
        assert_ne!(one, two);
        assert_eq!(one.len(), 32, "{one}");
        assert!(one.bytes().all(|b| b.is_ascii_hexdigit()), "{one}");
        assert_eq!(random_hex::<8>().unwrap().len(), 16);
    }

    #[test]
    fn ids_sort_in_creation_order_and_never_repeat() {
        let ids: Vec<String> = (0..10_000).map(|_| new_id("msg")).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(ids, sorted);
        assert!(ids.iter().all(|id| id.len() == 30 && id.starts_with("msg_")));
    }
}
