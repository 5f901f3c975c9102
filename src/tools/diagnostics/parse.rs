//! One line of a checker's output read as a diagnostic, in the short forms checkers print:
//! `path:line:col: severity[code]: message` (cargo `--message-format short`, gcc, clang),
//! `path:line: severity: message` (mypy), `path(line,col): severity CODE: message` (tsc
//! `--pretty false`), `path:line:col - severity: message` (pyright) and
//! `path:line:col: message [Severity/rule]` (eslint `-f unix`). Errors and warnings count;
//! notes, help and anything else are not diagnostics. A line that is none of these is `None`.

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn word(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

/// One diagnostic as a checker printed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// The path as printed: relative to the checker's directory, or absolute.
    pub path: String,
    pub line: u32,
    pub column: Option<u32>,
    pub severity: Severity,
    /// The checker's code for it (`E0308`, `TS2322`, an eslint rule).
    pub code: Option<String>,
    pub message: String,
}

/// The diagnostic `text` (one line) states, if it states one.
pub fn line(text: &str) -> Option<Diagnostic> {
    let text = text.trim();
    // Both readings: a message may hold `(1,2):` after a `path:line:col:` location.
    [tsc(text), colons(text)].into_iter().flatten().find_map(|(path, line, column, rest)| {
        let (severity, code, message) = judged(rest)?;
        if path.is_empty() || message.is_empty() {
            return None;
        }
        Some(Diagnostic { path: path.to_owned(), line, column, severity, code, message: message.to_owned() })
    })
}

/// `path(line,col): rest`.
fn tsc(text: &str) -> Option<(&str, u32, Option<u32>, &str)> {
    let open = text.find('(')?;
    let close = open + text[open..].find("):")?;
    let (line, column) = text[open + 1..close].split_once(',')?;
    let line = line.parse().ok()?;
    let column = column.parse().ok()?;
    Some((&text[..open], line, Some(column), &text[close + 2..]))
}

/// `path:line[:col]: rest` or `path:line:col - rest`, the path being everything before the
/// first `:line` that is so followed (a path may hold colons).
fn colons(text: &str) -> Option<(&str, u32, Option<u32>, &str)> {
    for (at, _) in text.match_indices(':').filter(|(at, _)| *at > 0) {
        let Some((line, after)) = number(&text[at + 1..]) else { continue };
        let (column, after) = match after.strip_prefix(':').and_then(number) {
            Some((column, after)) => (Some(column), after),
            None => (None, after),
        };
        if let Some(rest) = after.strip_prefix(':').or_else(|| after.strip_prefix(" -")) {
            return Some((&text[..at], line, column, rest));
        }
    }
    None
}

/// The decimal number `text` starts with, and what follows it.
fn number(text: &str) -> Option<(u32, &str)> {
    let end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let value = text[..end].parse().ok()?;
    Some((value, &text[end..]))
}

/// Severity, code and message of what follows the location.
fn judged(rest: &str) -> Option<(Severity, Option<String>, &str)> {
    let rest = rest.trim_start();
    for (word, severity) in
        [("fatal error", Severity::Error), ("error", Severity::Error), ("warning", Severity::Warning)]
    {
        let Some(after) = strip_word(rest, word) else { continue };
        // `error[E0308]: …`
        if let Some(bracketed) = after.strip_prefix('[') {
            let (code, message) = bracketed.split_once("]:")?;
            return Some((severity, Some(code.to_owned()), message.trim()));
        }
        if let Some(message) = after.strip_prefix(':') {
            return Some((severity, None, message.trim()));
        }
        // `error TS2322: …`
        let (code, message) = after.trim_start().split_once(':')?;
        if code.is_empty() || code.contains(char::is_whitespace) {
            return None;
        }
        return Some((severity, Some(code.to_owned()), message.trim()));
    }
    eslint(rest)
}

/// `message [Error/rule]`.
fn eslint(rest: &str) -> Option<(Severity, Option<String>, &str)> {
    let body = rest.strip_suffix(']')?;
    let open = body.rfind('[')?;
    let (kind, rule) = match body[open + 1..].split_once('/') {
        Some((kind, rule)) => (kind, Some(rule.to_owned())),
        None => (&body[open + 1..], None),
    };
    let severity = match kind.to_ascii_lowercase().as_str() {
        "error" => Severity::Error,
        "warning" => Severity::Warning,
        _ => return None,
    };
    Some((severity, rule, body[..open].trim()))
}

/// `text` after `word` (ASCII, any case) when `word` is all of its first word.
fn strip_word<'a>(text: &'a str, word: &str) -> Option<&'a str> {
    let head = text.get(..word.len())?;
    let after = &text[word.len()..];
    let whole = after.chars().next().is_none_or(|c| !c.is_ascii_alphanumeric());
    (head.eq_ignore_ascii_case(word) && whole).then_some(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (String, u32, Option<u32>, Severity, Option<String>, String) {
        let d = line(text).unwrap_or_else(|| panic!("not read: {text}"));
        (d.path, d.line, d.column, d.severity, d.code, d.message)
    }

    #[test]
    fn cargo_gcc_and_clang_short_lines() {
        assert_eq!(
            read("src/lib.rs:12:5: error[E0308]: mismatched types"),
            ("src/lib.rs".into(), 12, Some(5), Severity::Error, Some("E0308".into()), "mismatched types".into())
        );
        assert_eq!(
            read("src/lib.rs:1:5: warning: unused import: `std::fs`"),
            ("src/lib.rs".into(), 1, Some(5), Severity::Warning, None, "unused import: `std::fs`".into())
        );
        assert_eq!(read("a.c:3:10: fatal error: x.h: No such file").3, Severity::Error);
        assert_eq!(read("a.c:3:10: fatal error: x.h: No such file").5, "x.h: No such file");
    }

    #[test]
    fn mypy_tsc_pyright_and_eslint_lines() {
        assert_eq!(
            read("pkg/a.py:7: error: Name \"x\" is not defined  [name-defined]"),
            ("pkg/a.py".into(), 7, None, Severity::Error, None, "Name \"x\" is not defined  [name-defined]".into())
        );
        assert_eq!(
            read("src/a.ts(3,5): error TS2322: Type 'string' is not assignable to type 'number'."),
            (
                "src/a.ts".into(),
                3,
                Some(5),
                Severity::Error,
                Some("TS2322".into()),
                "Type 'string' is not assignable to type 'number'.".into()
            )
        );
        assert_eq!(
            read("  /w/a.py:4:9 - error: \"y\" is not defined (reportUndefinedVariable)"),
            (
                "/w/a.py".into(),
                4,
                Some(9),
                Severity::Error,
                None,
                "\"y\" is not defined (reportUndefinedVariable)".into()
            )
        );
        assert_eq!(
            read("/w/a.js:1:10: Missing semicolon. [Warning/semi]"),
            ("/w/a.js".into(), 1, Some(10), Severity::Warning, Some("semi".into()), "Missing semicolon.".into())
        );
    }

    #[test]
    fn paths_with_colons_and_odd_words() {
        assert_eq!(read("C:/x/a.c:2:1: error: boom").0, "C:/x/a.c");
        assert_eq!(read("dir:odd/a.c:2:1: Error: boom").3, Severity::Error);
        assert!(line("a.rs:1:1: errors: not a severity").is_none());
        assert_eq!(
            read("pkg/a.py:3: error: Slice index x[f(1,2):] must be an integer").5,
            "Slice index x[f(1,2):] must be an integer",
            "a `(1,2):` in the message is not a tsc location"
        );
    }

    #[test]
    fn notes_help_and_garbage_are_not_diagnostics() {
        for text in [
            "",
            "   Compiling cairn v0.1.0",
            "error: could not compile `cairn` (lib) due to 1 previous error",
            "src/lib.rs:3:1: note: in this macro",
            "src/lib.rs:3:1: help: remove it",
            "src/lib.rs:3:1: error:",
            "src/lib.rs: error: no line",
            "\u{1b}[31m\u{0}\u{fffd}",
            "a.ts(1,x): error TS1: no",
            "a.js:1:1: something [Info/rule]",
        ] {
            assert_eq!(line(text), None, "{text:?}");
        }
    }
}
