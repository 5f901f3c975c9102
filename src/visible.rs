//! A leaf: text made safe to print to a terminal. What cairn prints comes from models, tools,
//! MCP servers and imported files, and a terminal obeys the control characters in it: an OSC
//! sequence (`ESC ] 0 ; … BEL`) retitles the window or writes the clipboard, a CSI sequence
//! moves the cursor and repaints lines already printed, a carriage return overwrites one. Every
//! printer of plain text (`cairn exec`, `cairn sessions …`, `cairn doctor`, the errors `main`
//! prints) passes its text through [`text`] (line breaks and tabs kept) or [`line()`] (those
//! shown as `\n` and `\t` too), which show such characters as escapes instead: ESC as `\e`, CR
//! as `\r`, other C0 controls and DEL as `\x07`, C1 controls and the bidirectional overrides
//! (which reorder what is shown) as `\u{9b}`. Backslashes are left as they are: this is for
//! reading, not for parsing back. [`json`] does the same for JSON text without changing what it
//! encodes. [`human_size`] says a number of bytes as people read it.

use std::borrow::Cow;
use std::fmt::Write as _;

/// A size for people: `812 bytes`, `14.2 KiB`, `3.0 GiB`.
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// `text` for a terminal, keeping its line breaks and tabs.
pub fn text(text: &str) -> Cow<'_, str> {
    escape(text, |c| c == '\n' || c == '\t')
}

/// `text` for a terminal as one line: line breaks and tabs are shown as `\n` and `\t` too, so a
/// title or a name cannot forge a line of its own.
pub fn line(text: &str) -> Cow<'_, str> {
    escape(text, |_| false)
}

/// JSON text (one or more documents) for a terminal, encoding the same values: the characters
/// serde leaves raw inside strings (DEL, C1 controls, bidirectional overrides) as `\u` escapes.
/// Outside strings JSON holds only ASCII structure, which is left alone.
pub fn json(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| hidden(c) && c != '\n') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if hidden(c) && c != '\n' {
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Whether a terminal would act on `c` rather than show it.
fn hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape(text: &str, keep: impl Fn(char) -> bool) -> Cow<'_, str> {
    let shown = |c: char| !hidden(c) || keep(c);
    if text.chars().all(shown) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            _ if shown(c) => out.push(c),
            '\u{1b}' => out.push_str("\\e"),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\0'..='\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            _ => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_shown_and_text_is_kept() {
        let hostile = "a\u{1b}]0;pwned\u{7}b\u{1b}[2J\u{1b}[1A\rc\u{9b}31md\u{202e}e\u{7f}";
        assert_eq!(text(hostile), "a\\e]0;pwned\\x07b\\e[2J\\e[1A\\rc\\u{9b}31md\\u{202e}e\\x7f");
        assert_eq!(text("two\n\tlines — é 日本"), "two\n\tlines — é 日本");
        assert!(matches!(text("plain\n"), Cow::Borrowed(_)));
        assert_eq!(line("title\nforged\tline"), "title\\nforged\\tline");
        assert_eq!(line(r"C:\dir \e"), r"C:\dir \e", "backslashes stay");
    }

    #[test]
    fn json_keeps_its_values_and_hides_nothing() {
        let value = serde_json::json!({"title": "a\u{1b}]0;x\u{7}\u{9b}2J\u{202e}\u{7f}\n"});
        let encoded = value.to_string();
        let shown = json(&encoded);
        assert!(!shown.chars().any(|c| c.is_control()), "{shown}");
        assert_eq!(serde_json::from_str::<serde_json::Value>(&shown).unwrap(), value);
        let lines = format!("{encoded}\n{encoded}\n");
        assert_eq!(json(&lines).lines().count(), 2, "the newlines between documents stay");
    }
}
