//! The JSON lines of `cairn sessions export --format jsonl`, and reading them back for `cairn
//! sessions import`.
//!
//! The first line is the session (`"type": "session"`: id, title, cwd, model, mode, reasoning
//! level, cost, parent, sub-agent, rules, times in ISO 8601, and `"version": 1` of this
//! format); then one line per visible message (`"type": "message"`: id, role, `meta` and
//! `parts` exactly as the database stores them). Nothing is rendered or shortened: the export
//! is lossless, and an import of it holds the same messages. The session's file checkpoints
//! follow (`carried`). Reading checks every line against
//! this version's types and names the line and field it cannot read. An import never takes the
//! session's mode or rules: a file grants no permission.
//!
//! An import reads line by line within bounds: a line of at most [`MAX_LINE`] bytes and a file
//! of at most [`MAX_FILE`], so a file that is not an export (`/dev/zero`, one endless line)
//! fails as soon as it passes a bound, holding at most one line.

use std::collections::HashSet;
use std::io::BufRead;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::agent::prompt::ClientPrompt;
use crate::history::{Message, MessageMeta, Part, Role};
use crate::ids::{MessageId, SessionId, iso8601};
use crate::permissions::Rule;
use crate::store::{SessionRow, StoredMessage};

/// The version of this format, in the session line.
pub const VERSION: u32 = 1;
/// The longest line an import reads: a message with a dozen full-size screenshots in base64
/// fits several times over.
pub const MAX_LINE: usize = 64 << 20;
/// The largest file an import reads; the messages it holds are kept in memory until stored.
pub const MAX_FILE: u64 = 1 << 30;

#[derive(Serialize)]
struct SessionOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    version: u32,
    id: &'a str,
    title: Option<&'a str>,
    cwd: &'a str,
    model: &'a str,
    mode: Option<&'a str>,
    thought_level: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_prompt: Option<&'a ClientPrompt>,
    cost_usd: f64,
    parent_id: Option<&'a str>,
    subagent: Option<&'a str>,
    rules: &'a [Rule],
    created_at: Option<String>,
    updated_at: Option<String>,
}

#[derive(Serialize)]
struct MessageOut<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    role: &'a str,
    meta: &'a RawValue,
    parts: &'a [Box<RawValue>],
}

/// The session line, then one line per message, then the file checkpoints.
pub fn export(
    row: &SessionRow,
    messages: &[StoredMessage],
    checkpoints: &[(crate::store::CheckpointInfo, Vec<crate::tools::checkpoint::Entry>)],
    contents: &std::collections::HashMap<crate::tools::checkpoint::Digest, Vec<u8>>,
) -> Result<String, serde_json::Error> {
    let session = SessionOut {
        kind: "session",
        version: VERSION,
        id: row.id.as_str(),
        title: row.title.as_deref(),
        cwd: &row.cwd,
        model: &row.model,
        mode: row.mode.as_deref(),
        thought_level: row.thought_level.as_deref(),
        system_prompt: row.system_prompt.as_ref(),
        cost_usd: row.cost_usd,
        parent_id: row.parent_id.as_ref().map(SessionId::as_str),
        subagent: row.subagent.as_deref(),
        rules: &row.rules,
        created_at: iso8601(row.created_at),
        updated_at: iso8601(row.updated_at),
    };
    let mut out = serde_json::to_string(&session)?;
    out.push('\n');
    for message in messages {
        let line = MessageOut {
            kind: "message",
            id: &message.id,
            role: &message.role,
            meta: &message.meta,
            parts: &message.parts,
        };
        out.push_str(&serde_json::to_string(&line)?);
        out.push('\n');
    }
    out.push_str(&super::carried::export(checkpoints, contents)?);
    Ok(out)
}

/// What an import reads of the session line. Its mode and rules are not taken: a file must not
/// grant permissions.
#[derive(Debug, Deserialize)]
pub struct SessionIn {
    pub version: u32,
    pub id: String,
    pub title: Option<String>,
    pub cwd: String,
    pub model: String,
    pub thought_level: Option<String>,
    /// The editor's instructions the session was given, if any.
    #[serde(default)]
    pub system_prompt: Option<ClientPrompt>,
    pub created_at: String,
    pub updated_at: String,
}

/// A line's `type`, read first so that the line itself is read with the path of any error.
#[derive(Deserialize)]
struct Kind {
    #[serde(rename = "type")]
    kind: String,
}

enum Line {
    Session(SessionIn),
    Message(MessageIn),
    Blob(super::carried::BlobLine),
    Checkpoint(super::carried::CheckpointLine),
}

#[derive(Deserialize)]
struct MessageIn {
    id: String,
    role: Role,
    #[serde(default)]
    meta: MessageMeta,
    parts: Vec<Part>,
}

/// A file read back: the session as a row (not yet stored), its messages, and its file
/// checkpoints with their contents.
#[derive(Debug)]
pub struct Imported {
    pub row: SessionRow,
    pub messages: Vec<Message>,
    pub checkpoints: Vec<crate::store::Carried>,
    pub blobs: Vec<crate::tools::checkpoint::Blob>,
}

/// Why an export could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// Line (1-based) and what is wrong with it.
    Line(usize, String),
    /// The file could not be read.
    Io(std::io::Error),
}

/// How much an import reads.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub line: usize,
    pub file: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self { line: MAX_LINE, file: MAX_FILE }
    }
}

/// Reads an export; an error names the line (1-based) and what is wrong with it.
pub fn parse(reader: impl BufRead, bounds: Bounds) -> Result<Imported, ReadError> {
    let mut session = None;
    let mut messages: Vec<Message> = Vec::new();
    let mut ids = HashSet::new();
    let (mut checkpoints, mut blobs) = (Vec::new(), Vec::new());
    let mut lines = Lines { reader, bounds, line: Vec::new(), read: 0, number: 0 };
    while let Some((number, line)) = lines.next()? {
        let at = |why: String| ReadError::Line(number, why);
        if line.trim().is_empty() {
            continue;
        }
        let read = read_line(line).map_err(at)?;
        match (read, &session) {
            (Line::Session(read), None) => {
                if read.version != VERSION {
                    let why = format!("format version {} is not {VERSION}, the one this cairn reads", read.version);
                    return Err(at(why));
                }
                session = Some(row(read).map_err(at)?);
            }
            (Line::Session(_), Some(_)) => {
                return Err(at("a second session line; export one session a file".into()));
            }
            (Line::Message(_), None) => {
                return Err(at("a message before the session line; the file must start with it".into()));
            }
            (Line::Message(read), Some(_)) => {
                if !ids.insert(read.id.clone()) {
                    return Err(at(format!("message {} appears twice", read.id)));
                }
                let id = MessageId::from_string(read.id);
                messages.push(Message { id, role: read.role, parts: read.parts, meta: read.meta });
            }
            (Line::Blob(_) | Line::Checkpoint(_), None) => {
                return Err(at("a checkpoint before the session line; the file must start with it".into()));
            }
            (Line::Blob(read), Some(_)) => blobs.push(super::carried::blob(read).map_err(at)?),
            (Line::Checkpoint(read), Some(_)) => checkpoints.push(super::carried::checkpoint(read).map_err(at)?),
        }
    }
    match session {
        Some(row) => Ok(Imported { row, messages, checkpoints, blobs }),
        None => {
            Err(ReadError::Line(1, "no session line: this is not a `cairn sessions export --format jsonl` file".into()))
        }
    }
}

/// The lines of a file, each read whole only while within the bounds.
struct Lines<R> {
    reader: R,
    bounds: Bounds,
    /// The line being read, without its newline.
    line: Vec<u8>,
    /// Bytes read of the file so far.
    read: u64,
    /// The number of the last line returned (1-based).
    number: usize,
}

impl<R: BufRead> Lines<R> {
    /// The next line as text, with its number; `None` at the end of the file.
    fn next(&mut self) -> Result<Option<(usize, &str)>, ReadError> {
        self.line.clear();
        self.number += 1;
        let number = self.number;
        loop {
            let available = match self.reader.fill_buf() {
                Ok(available) => available,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(ReadError::Io(err)),
            };
            if available.is_empty() {
                if self.line.is_empty() {
                    return Ok(None);
                }
                break;
            }
            let newline = memchr::memchr(b'\n', available);
            let body = available.get(..newline.unwrap_or(available.len())).unwrap_or_default();
            if self.line.len() + body.len() > self.bounds.line {
                return Err(ReadError::Line(
                    number,
                    format!(
                        "longer than {}, the longest line an import reads; this is not a `cairn sessions export --format jsonl` file",
                        size(self.bounds.line as u64)
                    ),
                ));
            }
            self.line.extend_from_slice(body);
            let taken = newline.map_or(body.len(), |at| at + 1);
            self.reader.consume(taken);
            self.read += taken as u64;
            if self.read > self.bounds.file {
                return Err(ReadError::Line(
                    number,
                    format!("the file goes on past {}, the most an import reads", size(self.bounds.file)),
                ));
            }
            if newline.is_some() {
                break;
            }
        }
        match std::str::from_utf8(&self.line) {
            Ok(text) => Ok(Some((number, text))),
            Err(err) => Err(ReadError::Line(number, format!("not UTF-8 text (from byte {})", err.valid_up_to()))),
        }
    }
}

/// `64 MiB`, `1 GiB`, or bytes.
fn size(bytes: u64) -> String {
    match bytes {
        _ if bytes >= 1 << 30 && bytes.is_multiple_of(1 << 30) => format!("{} GiB", bytes >> 30),
        _ if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) => format!("{} MiB", bytes >> 20),
        _ => format!("{bytes} bytes"),
    }
}

/// One line, by its `type`.
fn read_line(line: &str) -> Result<Line, String> {
    fn read<T: serde::de::DeserializeOwned>(line: &str) -> Result<T, String> {
        let mut reader = serde_json::Deserializer::from_str(line);
        serde_path_to_error::deserialize(&mut reader).map_err(|err| {
            let at = err.path().to_string();
            let why = err.into_inner();
            if at == "." { why.to_string() } else { format!("{at}: {why}") }
        })
    }
    let Kind { kind } = read(line)?;
    match kind.as_str() {
        "session" => read(line).map(Line::Session),
        "message" => read(line).map(Line::Message),
        "blob" => read(line).map(Line::Blob),
        "checkpoint" => read(line).map(Line::Checkpoint),
        other => Err(format!("type: `{other}` is not `session`, `message`, `blob` or `checkpoint`")),
    }
}

/// The row an imported session is stored as: a session of its own (no parent), in the default
/// mode, without remembered rules; its cost is computed again from its messages.
fn row(read: SessionIn) -> Result<SessionRow, String> {
    let time = |field: &str, text: &str| {
        chrono::DateTime::parse_from_rfc3339(text)
            .map(|at| at.timestamp_millis())
            .map_err(|err| format!("{field}: `{text}` is not an ISO 8601 time: {err}"))
    };
    let created_at = time("created_at", &read.created_at)?;
    let updated_at = time("updated_at", &read.updated_at)?;
    if !read.id.starts_with("ses_") {
        return Err(format!("id: `{}` is not a session id (ses_…)", read.id));
    }
    let mut row = SessionRow::new(SessionId::from_string(read.id), read.cwd, read.model, created_at);
    row.title = read.title;
    row.thought_level = read.thought_level;
    row.system_prompt = read.system_prompt;
    row.updated_at = updated_at;
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(value: serde_json::Value) -> String {
        format!("{value}\n")
    }

    fn session() -> String {
        line(serde_json::json!({
            "type": "session", "version": 1, "id": "ses_1", "title": "T", "cwd": "/w", "model": "openai/m",
            "mode": "bypass", "rules": [{"permission": "bash", "pattern": "*", "action": "allow", "source": "session"}],
            "created_at": "2025-01-02T03:04:05.678Z", "updated_at": "2025-01-02T03:04:06.000Z",
        }))
    }

    #[test]
    fn an_import_keeps_the_messages_and_grants_no_permission() {
        let text = session()
            + &line(serde_json::json!({"type": "message", "id": "msg_1", "role": "user", "meta": {},
                "parts": [{"type": "text", "text": "hi"}]}));
        let imported = parse(text.as_bytes(), Bounds::default()).unwrap();
        assert_eq!(imported.row.created_at, 1_735_787_045_678);
        assert_eq!((imported.row.mode.as_deref(), imported.row.rules.len()), (None, 0));
        assert_eq!(imported.messages[0].parts, [Part::Text { text: "hi".into() }]);
    }

    /// The line and reason of a refused import.
    fn refused(reader: impl BufRead, bounds: Bounds) -> (usize, String) {
        match parse(reader, bounds) {
            Err(ReadError::Line(number, why)) => (number, why),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_line_it_cannot_read_is_named_with_the_field() {
        let bad = session()
            + &line(serde_json::json!({"type": "message", "id": "msg_1", "role": "user",
                "parts": [{"type": "text", "text": "ok"}, {"type": "hologram"}]}));
        let (number, why) = refused(bad.as_bytes(), Bounds::default());
        assert_eq!(number, 2);
        assert!(why.contains("parts[1]") && why.contains("hologram"), "{why}");
        let twice = session()
            + &line(serde_json::json!({"type": "message", "id": "msg_1", "role": "user", "parts": []})).repeat(2);
        assert_eq!(refused(twice.as_bytes(), Bounds::default()), (3, "message msg_1 appears twice".to_owned()));
        assert_eq!(refused(&b""[..], Bounds::default()).0, 1);
        assert!(refused(session().repeat(2).as_bytes(), Bounds::default()).1.contains("second session line"));
        let not_text = [session().as_bytes(), b"\xff\xfe\n"].concat();
        assert_eq!(refused(&not_text[..], Bounds::default()), (2, "not UTF-8 text (from byte 0)".to_owned()));
    }

    #[test]
    fn a_line_past_its_bound_is_refused_with_its_number_before_more_is_read() {
        let message = line(serde_json::json!({"type": "message", "id": "msg_1", "role": "user",
            "parts": [{"type": "text", "text": "x".repeat(2000)}]}));
        let bounds = Bounds { line: 1024, file: 1 << 20 };
        let text = session() + &message;
        let (number, why) = refused(text.as_bytes(), bounds);
        assert_eq!(number, 2);
        assert!(why.starts_with("longer than 1024 bytes, the longest line an import reads"), "{why}");
        // An endless line without a newline (`/dev/zero`) ends at the bound, the real one too.
        let endless = std::io::BufReader::new(std::io::repeat(0));
        let (number, why) = refused(endless, Bounds::default());
        assert_eq!(number, 1);
        assert!(why.starts_with("longer than 64 MiB, the longest line an import reads"), "{why}");
    }

    #[test]
    fn a_file_past_its_bound_is_refused_naming_where_it_stopped() {
        let message = |n: usize| {
            line(serde_json::json!({"type": "message", "id": format!("msg_{n}"), "role": "user",
                "parts": [{"type": "text", "text": "hello"}]}))
        };
        let text: String = std::iter::once(session()).chain((1..=100).map(message)).collect();
        let fits = Bounds { line: 1024, file: text.len() as u64 };
        assert_eq!(parse(text.as_bytes(), fits).unwrap().messages.len(), 100);
        let short = Bounds { line: 1024, file: text.len() as u64 - 1 };
        let (number, why) = refused(text.as_bytes(), short);
        assert_eq!(number, 101, "the last line passes the bound");
        assert_eq!(why, format!("the file goes on past {} bytes, the most an import reads", text.len() - 1));
    }
}
