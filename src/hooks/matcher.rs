//! Which hooks an event runs: a group's `matcher` against what the event is about (a tool's
//! name, a session start's source, a compaction's trigger, a notification's type).
//!
//! A tool is matched by its cairn name and by the name Claude Code gives the same tool
//! ([`claude_name`]: `bash` is `Bash`, `fetch` is `WebFetch`, …; an MCP tool is
//! `mcp__<server>__<tool>` in both), so a project's Claude Code hooks apply unchanged. A matcher
//! is read as Claude Code reads it: empty or `*` matches everything; letters, digits, `_` and
//! `|` are exact names (`Edit|Write`); anything else is a regular expression that must match
//! the whole name (`mcp__github__.*`, `Notebook.*`). A regular expression that does not compile
//! matches nothing, and says so.

use grep_matcher::Matcher as _;
use grep_regex::RegexMatcherBuilder;

/// Claude Code's name for a cairn tool, where it has one.
pub fn claude_name(tool: &str) -> Option<&'static str> {
    Some(match tool {
        "bash" => "Bash",
        "read" => "Read",
        "write" => "Write",
        "edit" => "Edit",
        "glob" => "Glob",
        "grep" => "Grep",
        "fetch" => "WebFetch",
        "web_search" => "WebSearch",
        "task" => "Task",
        "todo" => "TodoWrite",
        "question" => "AskUserQuestion",
        "exit_plan" => "ExitPlanMode",
        "job_output" => "BashOutput",
        "job_kill" => "KillShell",
        _ => return None,
    })
}

/// Whether `matcher` matches any of `names`; `Err` says why a matcher cannot be read.
pub fn matches(matcher: &str, names: &[&str]) -> Result<bool, String> {
    let matcher = matcher.trim();
    if matcher.is_empty() || matcher == "*" {
        return Ok(true);
    }
    if matcher.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|') {
        return Ok(matcher.split('|').any(|alternative| names.contains(&alternative)));
    }
    let regex = RegexMatcherBuilder::new()
        .build(&format!("^(?:{matcher})$"))
        .map_err(|err| format!("the matcher `{matcher}` is not a valid regular expression: {err}"))?;
    Ok(names.iter().any(|name| regex.is_match(name.as_bytes()).unwrap_or(false)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool(name: &str) -> Vec<&str> {
        std::iter::once(name).chain(claude_name(name)).collect()
    }

    #[test]
    fn a_matcher_names_a_tool_by_either_name() {
        assert!(matches("Bash", &tool("bash")).unwrap());
        assert!(matches("bash", &tool("bash")).unwrap());
        assert!(matches("Edit|Write", &tool("write")).unwrap());
        assert!(!matches("Edit|Write", &tool("read")).unwrap());
        assert!(matches("WebFetch", &tool("fetch")).unwrap());
        assert!(!matches("Bas", &tool("bash")).unwrap(), "exact names, not prefixes");
    }

    #[test]
    fn a_hostile_matcher_is_neither_slow_nor_a_match_for_everything_by_accident() {
        let long = format!("{}!", "a".repeat(50_000));
        let started = std::time::Instant::now();
        assert!(!matches("(a+)+$x", &[long.as_str()]).unwrap());
        assert!(!matches("(a|aa)*b", &[long.as_str()]).unwrap());
        assert!(matches("a{1000}{1000}{1000}", &["a"]).is_err(), "too big to build: an error, not a hang");
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        // `Bash|` is `Bash` or the empty name, which no tool has; `.*` inside a word is a regex.
        assert!(!matches("Bash|", &tool("read")).unwrap());
        assert!(!matches("|", &tool("read")).unwrap());
    }

    #[test]
    fn everything_patterns_and_mcp_tools() {
        assert!(matches("", &tool("grep")).unwrap());
        assert!(matches("*", &tool("grep")).unwrap());
        assert!(matches(".*", &tool("grep")).unwrap());
        assert!(matches("mcp__github__.*", &["mcp__github__create_issue"]).unwrap());
        assert!(!matches("mcp__github__.*", &["mcp__gitlab__x"]).unwrap());
        assert!(!matches("Read.*", &["xRead"]).unwrap(), "the whole name must match");
        assert!(matches("Notebook(", &["x"]).unwrap_err().contains("not a valid regular expression"));
    }
}
