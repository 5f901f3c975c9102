//! A stored conversation as people read it: plain text for `cairn sessions show`, Markdown for
//! `cairn sessions export`. Both show what the editor showed, in order: prompts, answers,
//! reasoning (marked), tool calls with their title, kind, state and output (shortened: the
//! whole output is in the JSON lines export), notices, compaction markers and how a message
//! ended when it did not end well. Titles, names and header values are shown on one line
//! ([`crate::visible::line`]); the printer shows the control characters left in the rest.

use std::fmt::Write as _;

use crate::history::{Finish, Message, Part, Role, ToolContent, ToolKind, ToolPart};
use crate::ids::iso8601;
use crate::session::compaction_note;
use crate::store::SessionRow;
use crate::visible::line;

/// How much of a tool's output `show` prints: lines, and characters of each line.
const SHOW_LINES: usize = 8;
const SHOW_WIDTH: usize = 160;
/// How much of a tool's output the Markdown export keeps.
const MARKDOWN_LINES: usize = 40;
const MARKDOWN_WIDTH: usize = 400;

/// The session's header and conversation as plain text; a call in `changed` is marked with
/// the number of files whose change a checkpoint keeps.
pub fn plain(row: &SessionRow, messages: &[Message], changed: &std::collections::HashMap<String, u64>) -> String {
    let mut out = String::new();
    for (label, value) in header(row, messages) {
        let _ = writeln!(out, "{label:<9}{value}");
    }
    for message in messages {
        out.push('\n');
        let _ = match (message.role, &message.meta.model) {
            (Role::User, _) => writeln!(out, "user:"),
            (Role::Assistant, Some(model)) => writeln!(out, "assistant ({}):", line(model)),
            (Role::Assistant, None) => writeln!(out, "assistant:"),
        };
        for part in &message.parts {
            plain_part(&mut out, part);
            if let Part::Tool(tool) = part
                && let Some(files) = changed.get(&tool.call_id)
            {
                let _ = writeln!(out, "    [checkpoint: {files} file changes kept; /rewind puts them back]");
            }
        }
        if let Some(ending) = ending(message) {
            indented(&mut out, "  ", &format!("[{ending}]"));
        }
    }
    out
}

fn plain_part(out: &mut String, part: &Part) {
    match part {
        Part::Text { text } => indented(out, "  ", text),
        Part::Reasoning { text, .. } => indented(out, "  ", &format!("[reasoning] {text}")),
        Part::RedactedReasoning { .. } => indented(out, "  ", "[reasoning, redacted by the provider]"),
        Part::Notice { text } => indented(out, "  ", &format!("[notice] {text}")),
        Part::Compaction(compaction) => indented(out, "  ", &format!("[compaction] {}", compaction_note(compaction))),
        Part::Tool(tool) => {
            indented(out, "  ", &format!("[tool] {}", tool_line(tool)));
            let (lines, rest) = shorten(&tool_output(tool), SHOW_LINES, SHOW_WIDTH);
            for line in lines {
                let _ = writeln!(out, "    | {line}");
            }
            if let Some(rest) = rest {
                let _ = writeln!(out, "    | {rest}");
            }
        }
        Part::Image { .. } | Part::ResourceLink { .. } | Part::Resource { .. } | Part::BlobResource { .. } => {
            indented(out, "  ", &attachment(part));
        }
    }
}

/// The session's header and conversation as a Markdown document.
pub fn markdown(row: &SessionRow, messages: &[Message]) -> String {
    let mut out = String::new();
    let title = row.title.clone().unwrap_or_else(|| format!("Session {}", row.id));
    let _ = writeln!(out, "# {}\n", line(title.trim()));
    for (label, value) in header(row, messages) {
        let mut label = label.to_owned();
        label[..1].make_ascii_uppercase();
        let _ = writeln!(out, "- **{label}:** {value}");
    }
    out.push('\n');
    for message in messages {
        // Every part ends with a blank line, as does the header.
        let _ = match (message.role, &message.meta.model) {
            (Role::User, _) => writeln!(out, "## User\n"),
            (Role::Assistant, Some(model)) => writeln!(out, "## Assistant ({})\n", line(model)),
            (Role::Assistant, None) => writeln!(out, "## Assistant\n"),
        };
        for part in &message.parts {
            markdown_part(&mut out, part);
        }
        if let Some(ending) = ending(message) {
            let _ = writeln!(out, "*[{ending}]*\n");
        }
    }
    out
}

fn markdown_part(out: &mut String, part: &Part) {
    match part {
        Part::Text { text } => {
            let _ = writeln!(out, "{}\n", text.trim_end());
        }
        Part::Reasoning { text, .. } => {
            let _ = writeln!(out, "<details><summary>Reasoning</summary>\n\n{}\n\n</details>\n", text.trim_end());
        }
        Part::RedactedReasoning { .. } => out.push_str("*[reasoning, redacted by the provider]*\n\n"),
        Part::Notice { text } => {
            let _ = writeln!(out, "> **Notice:** {}\n", text.trim_end().replace('\n', "\n> "));
        }
        Part::Compaction(compaction) => {
            let _ = writeln!(out, "---\n\n*{}*\n", compaction_note(compaction));
            if !compaction.summary.is_empty() {
                let summary = compaction.summary.trim_end();
                let _ = writeln!(out, "<details><summary>Summary</summary>\n\n{summary}\n\n</details>\n");
            }
        }
        Part::Tool(tool) => {
            let _ = writeln!(out, "**Tool call** `{}`: {}\n", line(&tool.name), tool_line(tool));
            if !tool.input.trim().is_empty() {
                let input = serde_json::from_str::<serde_json::Value>(&tool.input)
                    .ok()
                    .and_then(|value| serde_json::to_string_pretty(&value).ok())
                    .unwrap_or_else(|| tool.input.clone());
                fenced(out, "json", &input);
            }
            let (lines, rest) = shorten(&tool_output(tool), MARKDOWN_LINES, MARKDOWN_WIDTH);
            if !lines.is_empty() {
                let mut text = lines.join("\n");
                if let Some(rest) = rest {
                    text.push('\n');
                    text.push_str(&rest);
                }
                fenced(out, "text", &text);
            }
        }
        Part::Resource { uri, text, .. } => {
            let _ = writeln!(out, "*[resource: {uri}]*\n");
            let (lines, rest) = shorten(text, MARKDOWN_LINES, MARKDOWN_WIDTH);
            let mut text = lines.join("\n");
            if let Some(rest) = rest {
                text.push('\n');
                text.push_str(&rest);
            }
            fenced(out, "", &text);
        }
        Part::Image { .. } | Part::ResourceLink { .. } | Part::BlobResource { .. } => {
            let _ = writeln!(out, "*{}*\n", attachment(part));
        }
    }
}

/// Label and value of each header line.
fn header(row: &SessionRow, messages: &[Message]) -> Vec<(&'static str, String)> {
    let time = |ms: i64| iso8601(ms).unwrap_or_else(|| ms.to_string());
    let mut lines = vec![
        ("session", line(row.id.as_str()).into_owned()),
        ("title", line(row.title.as_deref().unwrap_or("(untitled)")).into_owned()),
        ("cwd", line(&row.cwd).into_owned()),
        ("model", line(&row.model).into_owned()),
        ("created", time(row.created_at)),
        ("updated", time(row.updated_at)),
        ("cost", format!("${:.4}", row.cost_usd)),
        ("messages", messages.len().to_string()),
    ];
    if let (Some(parent), Some(agent)) = (&row.parent_id, &row.subagent) {
        lines.push(("subagent", format!("{}, started by {}", line(agent), line(parent.as_str()))));
    } else if let Some(parent) = &row.parent_id {
        lines.push(("forked", format!("from {}", line(parent.as_str()))));
    }
    lines
}

/// How a message ended, when that is worth saying (an error, a cut, a refusal).
fn ending(message: &Message) -> Option<String> {
    match message.meta.finish? {
        Finish::EndTurn | Finish::ToolUse => None,
        Finish::MaxTokens => Some("stopped: the model hit its output limit".to_owned()),
        Finish::Refusal => Some("the model refused".to_owned()),
        Finish::Interrupted => Some("interrupted".to_owned()),
        Finish::Error => Some(format!("error: {}", message.meta.error.as_deref().unwrap_or("unknown"))),
    }
}

/// `title (name, kind, state)`.
fn tool_line(tool: &ToolPart) -> String {
    let kind = match tool.kind {
        ToolKind::Read => "read",
        ToolKind::Edit => "edit",
        ToolKind::Search => "search",
        ToolKind::Execute => "execute",
        ToolKind::Think => "think",
        ToolKind::Fetch => "fetch",
        ToolKind::SwitchMode => "switch_mode",
        ToolKind::Other => "other",
    };
    let title = if tool.title.is_empty() { &tool.name } else { &tool.title };
    format!("{} ({}, {kind}, {})", line(title), line(&tool.name), tool.state.as_str())
}

/// What the editor was shown as a call's result: its content, else the output the model got;
/// then a line per image the model was sent.
fn tool_output(tool: &ToolPart) -> String {
    let images = tool
        .images
        .iter()
        .map(|image| format!("[image: {}, {}]", image.mime_type, crate::visible::human_size(image.size() as u64)));
    let text = shown_output(tool);
    std::iter::once(text).filter(|text| !text.is_empty()).chain(images).collect::<Vec<_>>().join("\n")
}

fn shown_output(tool: &ToolPart) -> String {
    let mut shown = Vec::new();
    for content in &tool.content {
        match content {
            ToolContent::Text { text } => shown.push(text.clone()),
            ToolContent::Diff { path, old_text: None, new_text } => {
                shown.push(format!("new file {path} ({} lines)", new_text.lines().count()));
            }
            ToolContent::Diff { path, old_text: Some(old), new_text } => {
                let (before, after) = (old.lines().count(), new_text.lines().count());
                shown.push(format!("changed {path} ({before} → {after} lines)"));
            }
            ToolContent::Terminal { .. } => {}
            ToolContent::Image { mime_type, .. } => shown.push(format!("[image {mime_type}]")),
            ToolContent::Session { session_id } => shown.push(format!("[sub-agent session {session_id}]")),
        }
    }
    if shown.is_empty() {
        return tool.output.clone().unwrap_or_default();
    }
    shown.join("\n")
}

/// A prompt's attachment in one line.
fn attachment(part: &Part) -> String {
    match part {
        Part::Image { mime_type, uri, .. } => match uri {
            Some(uri) => format!("[image {mime_type}: {uri}]"),
            None => format!("[image {mime_type}]"),
        },
        Part::ResourceLink { uri, .. } => format!("[link: {uri}]"),
        Part::Resource { uri, text, .. } => format!("[resource: {uri}, {} lines]", text.lines().count()),
        Part::BlobResource { uri, .. } => format!("[resource: {uri}, binary]"),
        Part::Text { .. }
        | Part::Reasoning { .. }
        | Part::RedactedReasoning { .. }
        | Part::Notice { .. }
        | Part::Tool(_)
        | Part::Compaction(_) => String::new(),
    }
}

/// `text` with every line after `indent`.
fn indented(out: &mut String, indent: &str, text: &str) {
    for line in text.trim_end().lines() {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "{indent}{line}");
        }
    }
}

/// At most `max_lines` lines of `text`, each cut at `width` characters, and a note saying what
/// was left out.
pub fn shorten(text: &str, max_lines: usize, width: usize) -> (Vec<String>, Option<String>) {
    let text = text.trim_end();
    if text.is_empty() {
        return (Vec::new(), None);
    }
    let total = text.lines().count();
    let lines = text
        .lines()
        .take(max_lines)
        .map(|line| match line.char_indices().nth(width) {
            Some((cut, _)) => format!("{}…", &line[..cut]),
            None => line.to_owned(),
        })
        .collect();
    let rest = (total > max_lines).then(|| format!("… {} more lines", total - max_lines));
    (lines, rest)
}

/// `text` in a fenced code block whose fence is longer than any run of backticks inside.
fn fenced(out: &mut String, language: &str, text: &str) {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    let _ = writeln!(out, "{fence}{language}\n{}\n{fence}\n", text.trim_end());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_outputs_are_cut_in_lines_and_width_and_say_how_much_is_left() {
        let text: String = (0..20).map(|n| format!("line {n} {}\n", "x".repeat(300))).collect();
        let (lines, rest) = shorten(&text, 3, 10);
        assert_eq!(lines, ["line 0 xxx…", "line 1 xxx…", "line 2 xxx…"]);
        assert_eq!(rest.as_deref(), Some("… 17 more lines"));
        assert_eq!(shorten("é\n", 3, 1), (vec!["é".to_owned()], None), "cut on characters, not bytes");
        assert_eq!(shorten("  \n", 3, 10), (Vec::new(), None));
    }

    #[test]
    fn a_fence_outlasts_the_backticks_it_holds() {
        let mut out = String::new();
        fenced(&mut out, "text", "a ```` b");
        assert!(out.starts_with("`````text\n") && out.ends_with("\n`````\n\n"), "{out}");
    }
}
