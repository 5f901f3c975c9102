//! A session's file checkpoints in its JSON lines export, and read back by an import.
//!
//! After the messages: one `"type": "blob"` line per content the checkpoints name (`hash` in
//! hex, `data` in base64), then one `"type": "checkpoint"` line per capture, oldest first
//! (`prompt_id`, `call_id`, `kind` `seen` or `made`, `restore`, `created_at`, and `files`: each
//! with `path`, or `path_base64` for a name that is not UTF-8, `state`, `hash`, `size`,
//! `executable`). A content larger than [`MAX_CARRIED`] is exported as not covered, so every line
//! stays within an import's line bound. An import checks every content against its hash and
//! every path for a plain relative one, and never takes a restore as pending: a file cannot make
//! cairn write files when the session is next opened.

use std::collections::HashMap;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::ids::{MessageId, iso8601};
use crate::store::{Carried, CheckpointInfo};
use crate::tools::checkpoint::{Blob, By, Capture, Digest, Entry, State};

/// The largest content an export carries; larger ones are exported as not covered.
pub const MAX_CARRIED: usize = 32 << 20;

#[derive(Serialize, Deserialize)]
pub(super) struct BlobLine {
    hash: String,
    data: String,
}

#[derive(Serialize, Deserialize)]
pub(super) struct CheckpointLine {
    prompt_id: Option<String>,
    call_id: Option<String>,
    kind: String,
    restore: Option<String>,
    created_at: Option<String>,
    files: Vec<FileLine>,
}

#[derive(Serialize, Deserialize)]
struct FileLine {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path_base64: Option<String>,
    state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hash: Option<String>,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    executable: bool,
}

/// The blob and checkpoint lines of a session's captures.
pub(super) fn export(
    captures: &[(CheckpointInfo, Vec<Entry>)],
    blobs: &HashMap<Digest, Vec<u8>>,
) -> Result<String, serde_json::Error> {
    let engine = base64::engine::general_purpose::STANDARD;
    let mut out = String::new();
    let carried = |hash: &Digest| blobs.get(hash).filter(|data| data.len() <= MAX_CARRIED);
    let mut sent = std::collections::HashSet::new();
    for entry in captures.iter().flat_map(|(_, entries)| entries) {
        if let Some(hash) = entry.state.hash()
            && let Some(data) = carried(&hash)
            && sent.insert(hash)
        {
            out.push_str(&serde_json::to_string(&Tagged {
                kind: "blob",
                line: BlobLine { hash: hash.to_hex(), data: engine.encode(data) },
            })?);
            out.push('\n');
        }
    }
    for (info, entries) in captures {
        let files = entries
            .iter()
            .map(|entry| {
                let state = match entry.state.hash() {
                    Some(hash) if carried(&hash).is_none() => State::Uncovered { size: entry.state.size() },
                    _ => entry.state,
                };
                let (kind, hash, size, executable) = state.columns();
                let (path, path_base64) = match entry.path.to_str() {
                    Some(path) => (Some(path.to_owned()), None),
                    None => (None, Some(engine.encode(entry.path.as_os_str().as_bytes()))),
                };
                FileLine {
                    path,
                    path_base64,
                    state: kind.to_owned(),
                    hash: hash.map(|hash| hash.to_hex()),
                    size,
                    executable,
                }
            })
            .collect();
        let line = CheckpointLine {
            prompt_id: info.prompt_id.as_ref().map(|id| id.as_str().to_owned()),
            call_id: info.call_id.clone(),
            kind: info.by.as_str().to_owned(),
            restore: info.restore.clone(),
            created_at: iso8601(info.created_at),
            files,
        };
        out.push_str(&serde_json::to_string(&Tagged { kind: "checkpoint", line })?);
        out.push('\n');
    }
    Ok(out)
}

#[derive(Serialize)]
struct Tagged<T> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    line: T,
}

/// A blob line read back: its content checked against its hash.
pub(super) fn blob(line: BlobLine) -> Result<Blob, String> {
    let hash = Digest::from_hex(&line.hash).ok_or_else(|| format!("hash: `{}` is not a SHA-256 in hex", line.hash))?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(&line.data)
        .map_err(|err| format!("data: not base64: {err}"))?;
    if Digest::of(&data) != hash {
        return Err(format!("data: its SHA-256 is not {}", line.hash));
    }
    Ok(Blob { hash, data })
}

/// A checkpoint line read back: paths plain and relative, states known.
pub(super) fn checkpoint(line: CheckpointLine) -> Result<Carried, String> {
    let by = By::parse(&line.kind).ok_or_else(|| format!("kind: `{}` is neither `seen` nor `made`", line.kind))?;
    let created_at = match &line.created_at {
        Some(text) => chrono::DateTime::parse_from_rfc3339(text)
            .map(|at| at.timestamp_millis())
            .map_err(|err| format!("created_at: `{text}` is not an ISO 8601 time: {err}"))?,
        None => 0,
    };
    let mut entries = Vec::with_capacity(line.files.len());
    for (at, file) in line.files.into_iter().enumerate() {
        let path = match (file.path, file.path_base64) {
            (Some(path), None) => PathBuf::from(path),
            (None, Some(encoded)) => {
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(&encoded)
                    .map_err(|err| format!("files[{at}].path_base64: not base64: {err}"))?;
                PathBuf::from(std::ffi::OsStr::from_bytes(&bytes))
            }
            _ => return Err(format!("files[{at}]: give one of path and path_base64")),
        };
        if path.as_os_str().is_empty() || !path.components().all(|part| matches!(part, std::path::Component::Normal(_)))
        {
            return Err(format!("files[{at}].path: `{}` is not a plain relative path", path.display()));
        }
        let hash = file.hash.as_deref().map(|text| Digest::from_hex(text).ok_or(text));
        let hash = match hash {
            Some(Ok(hash)) => Some(hash),
            Some(Err(text)) => return Err(format!("files[{at}].hash: `{text}` is not a SHA-256 in hex")),
            None => None,
        };
        let state = State::from_columns(&file.state, hash, file.size, file.executable).ok_or_else(|| {
            format!("files[{at}].state: `{}` is not file, link (both with a hash), missing or uncovered", file.state)
        })?;
        entries.push(Entry { path, state, stamp: 0 });
    }
    Ok(Carried {
        prompt: line.prompt_id.map(MessageId::from_string),
        capture: Capture { by, call_id: line.call_id, entries },
        restore: line.restore,
        created_at,
    })
}
