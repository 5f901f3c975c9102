//! Loop detection: noticing that the model keeps making the same tool call.
//!
//! The guard sees every call of a turn (it starts empty with each user prompt) and compares the
//! latest call of each step with the recent calls of the same tool. Two calls are similar when
//! their arguments are equal, or when they have the same keys and at least half of the values
//! agree. Calls that differ only in pagination (`offset`, `page`, `cursor`, …) are progress, not a
//! loop, and never count. The [`Verdict`] escalates in three tiers the configuration sets.

use serde_json::{Map, Value};

use crate::config::LoopLimits;

/// Argument names that page through a result; changing only these is progress.
const PAGINATION: &[&str] = &[
    "offset",
    "limit",
    "page",
    "start_line",
    "end_line",
    "cursor",
    "after",
    "before",
    "next_page_token",
    "page_token",
    "skip",
];

/// What the guard thinks after a step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Fine,
    /// Tell the model it is repeating itself.
    Warn {
        tool: String,
        count: u32,
    },
    /// Tell it more firmly and take the tool away for a few requests.
    Cooldown {
        tool: String,
        count: u32,
    },
    /// End the turn.
    Stop {
        tool: String,
        count: u32,
    },
}

/// The calls of one turn, newest last.
#[derive(Debug, Default)]
pub struct LoopGuard {
    calls: Vec<(String, Value)>,
    /// The highest tier already acted on per tool, so each tier fires once.
    acted: Vec<(String, u32)>,
}

impl LoopGuard {
    /// Adds a step's calls (name and parsed arguments) and says what to do about them.
    pub fn observe(&mut self, limits: LoopLimits, step: impl IntoIterator<Item = (String, Value)>) -> Verdict {
        if limits.window == 0 {
            return Verdict::Fine;
        }
        let mut verdict = Verdict::Fine;
        for (name, args) in step {
            self.calls.push((name.clone(), args));
            let start = self.calls.len().saturating_sub(limits.window);
            let recent = &self.calls[start..];
            let Some((_, latest)) = recent.last() else { continue };
            let count = recent.iter().filter(|(other, args)| *other == name && similar(latest, args)).count();
            let count = u32::try_from(count).unwrap_or(u32::MAX);
            let tier = tier(limits, count);
            let acted = self.acted.iter().find(|(tool, _)| *tool == name).map_or(0, |(_, tier)| *tier);
            if tier > acted {
                self.acted.retain(|(tool, _)| *tool != name);
                self.acted.push((name.clone(), tier));
                let found = match tier {
                    3 => Verdict::Stop { tool: name, count },
                    2 => Verdict::Cooldown { tool: name, count },
                    _ => Verdict::Warn { tool: name, count },
                };
                if rank(&found) > rank(&verdict) {
                    verdict = found;
                }
            }
        }
        verdict
    }
}

/// 0 = fine, 1 = warn, 2 = cooldown, 3 = stop.
fn tier(limits: LoopLimits, count: u32) -> u32 {
    let reached = |limit: u32| limit > 0 && count >= limit;
    if reached(limits.stop) {
        3
    } else if reached(limits.cooldown) {
        2
    } else if reached(limits.warn) {
        1
    } else {
        0
    }
}

fn rank(verdict: &Verdict) -> u8 {
    match verdict {
        Verdict::Fine => 0,
        Verdict::Warn { .. } => 1,
        Verdict::Cooldown { .. } => 2,
        Verdict::Stop { .. } => 3,
    }
}

/// Whether two argument sets of one tool amount to the same call.
fn similar(a: &Value, b: &Value) -> bool {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else { return a == b };
    if a == b {
        return true;
    }
    if without_pagination(a) == without_pagination(b) {
        // Only the page moved: that is reading on, not looping.
        return false;
    }
    if a.len() != b.len() || !a.keys().all(|key| b.contains_key(key)) {
        return false;
    }
    let equal = a.iter().filter(|(key, value)| b.get(*key) == Some(*value)).count();
    equal * 2 >= a.len()
}

fn without_pagination(args: &Map<String, Value>) -> Map<String, Value> {
    args.iter().filter(|(key, _)| !PAGINATION.contains(&key.as_str())).map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(name: &str, args: Value) -> Vec<(String, Value)> {
        vec![(name.to_owned(), args)]
    }

    #[test]
    fn tiers_fire_once_each_at_three_five_and_eight() {
        let mut guard = LoopGuard::default();
        let verdicts: Vec<Verdict> = (0..8)
            .map(|_| guard.observe(LoopLimits::default(), call("grep", json!({"pattern": "todo", "path": "src"}))))
            .collect();
        let grep = "grep".to_owned();
        assert_eq!(verdicts[..2], [Verdict::Fine, Verdict::Fine]);
        assert_eq!(verdicts[2], Verdict::Warn { tool: grep.clone(), count: 3 });
        assert_eq!(verdicts[3], Verdict::Fine, "a tier fires once");
        assert_eq!(verdicts[4], Verdict::Cooldown { tool: grep.clone(), count: 5 });
        assert_eq!(verdicts[7], Verdict::Stop { tool: grep, count: 8 });
    }

    #[test]
    fn paging_through_a_file_is_not_a_loop() {
        let mut guard = LoopGuard::default();
        for offset in 0..20 {
            let verdict = guard.observe(
                LoopLimits::default(),
                call("read", json!({"path": "big.txt", "offset": offset * 100, "limit": 100})),
            );
            assert_eq!(verdict, Verdict::Fine, "offset {offset}");
        }
    }

    #[test]
    fn similar_means_same_keys_and_half_the_values() {
        assert!(similar(&json!({"pattern": "a", "path": "x"}), &json!({"pattern": "a", "path": "y"})));
        assert!(!similar(&json!({"pattern": "a", "path": "x"}), &json!({"pattern": "b", "path": "y"})));
        assert!(!similar(&json!({"pattern": "a"}), &json!({"pattern": "a", "path": "y"})));
        let mut guard = LoopGuard::default();
        for n in 0..10 {
            let verdict = guard.observe(LoopLimits::default(), call("bash", json!({"command": format!("echo {n}")})));
            assert_eq!(verdict, Verdict::Fine);
        }
    }

    #[test]
    fn only_the_window_counts_and_off_means_off() {
        let limits = LoopLimits { window: 2, ..LoopLimits::default() };
        let mut guard = LoopGuard::default();
        for _ in 0..10 {
            assert_eq!(guard.observe(limits, call("glob", json!({"pattern": "*"}))), Verdict::Fine);
        }
        let mut guard = LoopGuard::default();
        for _ in 0..10 {
            assert_eq!(guard.observe(LoopLimits::OFF, call("glob", json!({"pattern": "*"}))), Verdict::Fine);
        }
    }
}
