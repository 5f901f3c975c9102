//! A value built from some paths and used again for a moment: what resolving a list of
//! directories gives (every component's `lstat`, their links read, their ancestors' identities)
//! costs hundreds of system calls, and a burst of sessions starting would pay it once each for
//! the same directories. A value is built again once [`REUSED_FOR`] passed, or for other inputs,
//! so a directory re-linked meanwhile is seen at most that late.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How long a value built for the same inputs is used again.
pub const REUSED_FOR: Duration = Duration::from_secs(1);

/// The last value built, with its inputs and when it was built.
pub struct Recent<K, V> {
    last: Mutex<Option<(K, Instant, Arc<V>)>>,
}

impl<K: PartialEq, V> Recent<K, V> {
    pub const fn new() -> Self {
        Self { last: Mutex::new(None) }
    }

    /// The value for `key`: the last one built, if built for the same key less than
    /// [`REUSED_FOR`] ago, else `build`'s (callers meanwhile wait for it rather than build
    /// their own).
    pub fn get(&self, key: K, build: impl FnOnce() -> V) -> Arc<V> {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((built_for, at, value)) = last.as_ref()
            && *built_for == key
            && at.elapsed() < REUSED_FOR
        {
            return Arc::clone(value);
        }
        let value = Arc::new(build());
        *last = Some((key, Instant::now(), Arc::clone(&value)));
        value
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_is_used_again_for_the_same_inputs_and_built_again_for_others_or_later() {
        let recent: Recent<&str, usize> = Recent::new();
        let mut built = 0;
        let mut build = |n: usize| {
            built += 1;
            n
        };
        assert_eq!(*recent.get("a", || build(1)), 1);
        assert_eq!(*recent.get("a", || build(2)), 1, "the same inputs, just now: used again");
        assert_eq!(*recent.get("b", || build(3)), 3, "other inputs: built");
        std::thread::sleep(REUSED_FOR + Duration::from_millis(50));
        assert_eq!(*recent.get("b", || build(4)), 4, "later: built again");
        assert_eq!(built, 3);
    }
}
