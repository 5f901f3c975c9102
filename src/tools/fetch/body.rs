//! A response's body as text: what it is ([`kind`], from its `Content-Type` and its first
//! bytes), read as a stream up to [`MAX_BYTES`] (the rest is never downloaded: the connection is
//! dropped), decoded from its character set (declared, or sniffed as a browser would), and, for
//! HTML, converted to Markdown on a blocking thread (`mdka`, after `depth::flatten`). The text
//! reaches the model a page of [`PAGE_CHARS`] characters at a time ([`outcome`]).
//!
//! The first bytes win over a `Content-Type` that lies in one direction only: a body that starts
//! like a PDF, an image, an archive or holds NUL bytes is refused whatever the header says; a
//! body declared binary is never read as text. A body with no type, or `application/octet-
//! stream`, is read as HTML or text when its start looks like one.

use std::borrow::Cow;

use tokio::time::Instant;
use url::Url;

use super::PAGE_CHARS;
use super::depth::{MAX_DEPTH, flatten};
use crate::tools::image::{describe, dimensions, sniff};
use crate::tools::{ToolContext, ToolError, ToolOutcome, blocking};
use crate::visible::human_size;

/// The most of a body that is read.
pub const MAX_BYTES: usize = 2 * 1024 * 1024;
/// The most of an error's body that is read, to quote its start.
const ERROR_BYTES: usize = 64 * 1024;
/// How much of an error's body is quoted.
const ERROR_CHARS: usize = 2_000;
/// How much of a body tells what it is.
const SNIFF: usize = 1024;

/// The response being read.
pub struct Reading<'a> {
    pub url: &'a Url,
    /// `Content-Type`, as sent.
    pub declared: Option<&'a str>,
    /// `Content-Length`, when sent.
    pub length: Option<u64>,
    /// When the call's time is up.
    pub deadline: Instant,
}

/// What a body is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    Html,
    Text,
    /// Not read: what it is, in a few words.
    Binary(String),
}

/// A body read and made text.
pub struct Page {
    pub text: String,
    /// What it was, as the result says it: `text/html, 1.2 MiB, as Markdown`.
    pub said: String,
    /// What the reader should know: the body was cut, the server stalled, markup was dropped.
    pub notes: Vec<String>,
}

/// The body as text, or why it is not read.
pub async fn page(response: reqwest::Response, read: &Reading<'_>, ctx: &ToolContext) -> Result<Page, ToolError> {
    let mut body = Body::new(response);
    body.fill(SNIFF, MAX_BYTES, read.deadline).await.map_err(|err| cannot_read(read.url, &err))?;
    let kind = kind(read.declared, &body.bytes);
    if let Kind::Binary(what) = &kind {
        return Err(ToolError::Tell(format!(
            "{} is {what}, which fetch does not read: it reads web pages, text and JSON. To get the file, download \
             it with a command (which asks first).",
            read.url
        )));
    }
    body.fill(MAX_BYTES, MAX_BYTES, read.deadline).await.map_err(|err| cannot_read(read.url, &err))?;
    let mut notes = Vec::new();
    let size = human_size(body.bytes.len() as u64);
    if body.cut {
        let total = read.length.map(|total| format!(" of {}", human_size(total))).unwrap_or_default();
        notes.push(format!("only the first {}{total} were read", human_size(MAX_BYTES as u64)));
    }
    if body.stalled {
        notes.push(format!("the server was still sending when the time ran out; {size} had arrived"));
    }
    if let Some(broke) = &body.broke {
        notes.push(format!("the connection broke after {size}: {broke}"));
    }
    let declared = read.declared.map(essence).unwrap_or_else(|| "no type".to_owned());
    let charset = read.declared.and_then(charset);
    let (html, cut) = (kind == Kind::Html, body.cut || body.stalled || body.broke.is_some());
    let bytes = std::mem::take(&mut body.bytes);
    drop(body);
    let (text, dropped) = blocking(ctx, move |_| Ok(convert(&kind, &bytes, charset.as_deref(), cut))).await?;
    if dropped > 0 {
        notes.push(format!(
            "the page nests deeper than {MAX_DEPTH} elements; {dropped} tags below that depth were dropped, their text kept"
        ));
    }
    let said = if html { format!("{declared}, {size}, as Markdown") } else { format!("{declared}, {size}") };
    Ok(Page { text, said, notes })
}

/// The start of an error's body, as text (empty when it is not text or cannot be read).
pub async fn excerpt(response: reqwest::Response, read: &Reading<'_>, ctx: &ToolContext) -> String {
    let mut body = Body::new(response);
    if body.fill(ERROR_BYTES, ERROR_BYTES, read.deadline).await.is_err() {
        return String::new();
    }
    let kind = kind(read.declared, &body.bytes);
    let charset = read.declared.and_then(charset);
    let (bytes, cut) = (std::mem::take(&mut body.bytes), body.cut);
    drop(body);
    let converted = blocking(ctx, move |_| Ok(convert(&kind, &bytes, charset.as_deref(), cut))).await;
    let text = converted.map(|(text, _)| text).unwrap_or_default();
    let cut: String = text.trim().chars().take(ERROR_CHARS).collect();
    if cut.len() < text.trim().len() { format!("{cut}…") } else { cut }
}

/// The result: a line saying what was read and which part this is, then the part.
pub fn outcome(url: &Url, redirected: Option<&Url>, page: Page, offset: u64) -> ToolOutcome {
    let total = page.text.chars().count() as u64;
    let from = offset.min(total);
    let part: String = page.text.chars().skip(from as usize).take(PAGE_CHARS).collect();
    let to = from + part.chars().count() as u64;
    let mut head = format!("[{url}");
    if let Some(first) = redirected {
        head.push_str(&format!(" (redirected from {first})"));
    }
    head.push_str(&format!(": {}", page.said));
    if total == 0 {
        head.push_str("; no text");
    } else if from > 0 || to < total {
        head.push_str(&format!("; characters {from}–{to} of {total}"));
        if to < total {
            head.push_str(&format!(", fetch again with \"offset\": {to} for the rest"));
        }
    }
    for note in &page.notes {
        head.push_str("; ");
        head.push_str(note);
    }
    head.push(']');
    let shown = head.clone();
    let output = if part.is_empty() && offset > 0 {
        format!("{head}\n\nOffset {offset} is past the end of the text ({total} characters).")
    } else {
        format!("{head}\n\n{part}")
    };
    ToolOutcome { output, content: vec![crate::history::ToolContent::Text { text: shown }], ..ToolOutcome::default() }
}

/// A body read as it streams, never past what was asked for.
struct Body {
    response: reqwest::Response,
    bytes: Vec<u8>,
    /// More was sent than was read.
    cut: bool,
    /// The time ran out while it was still coming.
    stalled: bool,
    /// The connection failed after some of it arrived.
    broke: Option<String>,
    done: bool,
}

impl Body {
    fn new(response: reqwest::Response) -> Self {
        Self { response, bytes: Vec::new(), cut: false, stalled: false, broke: None, done: false }
    }

    /// Reads until `want` bytes are held (more may be, up to `cap`), the body ends or the time is
    /// up. Past `cap` nothing is kept, and whether more came is noted. A failure before anything
    /// arrived is an error; after, a note.
    async fn fill(&mut self, want: usize, cap: usize, deadline: Instant) -> Result<(), reqwest::Error> {
        while !self.done && self.bytes.len() < want {
            match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Err(_) => {
                    self.stalled = true;
                    self.done = true;
                }
                Ok(Ok(Some(chunk))) => {
                    let room = cap.saturating_sub(self.bytes.len());
                    if chunk.len() > room {
                        self.bytes.extend_from_slice(&chunk[..room]);
                        self.cut = true;
                        self.done = true;
                    } else {
                        self.bytes.extend_from_slice(&chunk);
                    }
                }
                Ok(Ok(None)) => self.done = true,
                Ok(Err(err)) if self.bytes.is_empty() => return Err(err),
                Ok(Err(err)) => {
                    self.broke = Some(super::hop::why(&err));
                    self.done = true;
                }
            }
        }
        if !self.done && self.bytes.len() >= cap {
            // Full: one more chunk tells whether the body went on; the rest is left unread.
            self.cut = match tokio::time::timeout_at(deadline, self.response.chunk()).await {
                Ok(Ok(Some(chunk))) => !chunk.is_empty(),
                Ok(Ok(None)) => false,
                Ok(Err(_)) | Err(_) => true,
            };
            self.done = true;
        }
        Ok(())
    }
}

fn cannot_read(url: &Url, err: &reqwest::Error) -> ToolError {
    ToolError::Tell(format!("cannot read {url}: {}", super::hop::why(err)))
}

/// What the body is, from its declared type and its first bytes.
pub fn kind(declared: Option<&str>, head: &[u8]) -> Kind {
    if let Some(what) = binary(head) {
        return Kind::Binary(what);
    }
    let essence = declared.map(essence).unwrap_or_default();
    let (top, sub) = essence.split_once('/').unwrap_or((essence.as_str(), ""));
    let textual_application = [
        "json",
        "xml",
        "javascript",
        "ecmascript",
        "x-javascript",
        "toml",
        "yaml",
        "x-yaml",
        "x-sh",
        "sql",
        "graphql",
        "x-ndjson",
        "x-www-form-urlencoded",
        "csv",
        "markdown",
    ];
    match (top, sub) {
        ("text", "html") | ("application", "xhtml+xml") => Kind::Html,
        ("text", _) => Kind::Text,
        ("application" | "image", sub)
            if textual_application.contains(&sub) || sub.ends_with("+json") || sub.ends_with("+xml") =>
        {
            Kind::Text
        }
        ("", _) | ("application", "octet-stream") | ("binary", _) | ("unknown", _) => sniffed(head)
            .unwrap_or_else(|| Kind::Binary(format!("a file of an unknown kind ({})", declared.unwrap_or("no type")))),
        _ => Kind::Binary(format!("a file of type {essence}")),
    }
}

/// What a body's start says it is, whatever its declared type, when it is not text: a PDF, an
/// image, an archive, or bytes that no text holds.
fn binary(head: &[u8]) -> Option<String> {
    if let Some(format) = sniff(head) {
        let size = head.len() as u64;
        let described = describe(format, dimensions(format, head), size);
        let described = described.rsplit_once(", ").map_or(described.as_str(), |(what, _)| what).to_owned();
        return Some(format!("an image ({described}); fetch does not pass images to the model yet"));
    }
    let signatures: [(&[u8], &str); 8] = [
        (b"%PDF-", "a PDF document"),
        (b"PK\x03\x04", "a ZIP archive (or an Office document)"),
        (b"\x1f\x8b", "a gzip archive"),
        (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
        (b"\xfd7zXZ\x00", "an xz archive"),
        (b"\x7fELF", "a program (ELF)"),
        (b"\x00asm", "a WebAssembly module"),
        (b"\x28\xb5\x2f\xfd", "a zstd archive"),
    ];
    if let Some((_, what)) = signatures.iter().find(|(magic, _)| head.starts_with(magic)) {
        return Some((*what).to_owned());
    }
    let utf16 = head.starts_with(b"\xff\xfe") || head.starts_with(b"\xfe\xff");
    (!utf16 && head.contains(&0)).then(|| "binary data (it holds NUL bytes)".to_owned())
}

/// HTML or text, by a body's start, for a body whose type says nothing.
fn sniffed(head: &[u8]) -> Option<Kind> {
    let start = String::from_utf8_lossy(&head[..head.len().min(SNIFF)]).trim_start().to_ascii_lowercase();
    if start.starts_with("<!doctype html") || start.starts_with("<html") {
        return Some(Kind::Html);
    }
    let texty = |b: &u8| !b.is_ascii_control() || matches!(b, b'\t' | b'\n' | b'\r' | b'\x0c');
    head.iter().all(texty).then_some(Kind::Text)
}

/// `text/html; charset=utf-8` as `text/html`.
fn essence(declared: &str) -> String {
    declared.split(';').next().unwrap_or_default().trim().to_ascii_lowercase()
}

/// The `charset` a `Content-Type` declares.
fn charset(declared: &str) -> Option<String> {
    declared.split(';').skip(1).find_map(|param| {
        let (name, value) = param.split_once('=')?;
        name.trim().eq_ignore_ascii_case("charset").then(|| value.trim().trim_matches(['"', '\'']).to_owned())
    })
}

/// The body as text (HTML as Markdown), and how many tags its nesting cost; `cut`: the body
/// goes on past `bytes`.
fn convert(kind: &Kind, bytes: &[u8], charset: Option<&str>, cut: bool) -> (String, usize) {
    match kind {
        Kind::Html => {
            let charset = charset.map(Cow::Borrowed).or_else(|| meta_charset(bytes).map(Cow::Owned));
            let text = decode(bytes, charset, cut);
            let flat = flatten(&text, MAX_DEPTH);
            let mut options = mdka::ConversionOptions::for_mode(mdka::ConversionMode::Balanced);
            options.preserve_ids = false;
            (mdka::html_to_markdown_with(&flat.html, &options), flat.dropped)
        }
        Kind::Text => (decode(bytes, charset.map(Cow::Borrowed), cut), 0),
        Kind::Binary(_) => (String::new(), 0),
    }
}

/// `bytes` decoded: a byte-order mark wins, then the declared character set, then UTF-8 when
/// the bytes are UTF-8 (a character `cut` at the end of what was read included), else
/// windows-1252, as browsers read pages that declare nothing.
fn decode(bytes: &[u8], charset: Option<Cow<'_, str>>, cut: bool) -> String {
    let declared = charset.and_then(|label| encoding_rs::Encoding::for_label(label.trim().as_bytes()));
    let encoding = declared.unwrap_or_else(|| match std::str::from_utf8(bytes) {
        Ok(_) => encoding_rs::UTF_8,
        Err(err) if cut && err.error_len().is_none() => encoding_rs::UTF_8,
        Err(_) => encoding_rs::WINDOWS_1252,
    });
    encoding.decode(bytes).0.into_owned()
}

/// The character set an HTML page declares in a `<meta>` within its first KiB.
fn meta_charset(bytes: &[u8]) -> Option<String> {
    let head = String::from_utf8_lossy(&bytes[..bytes.len().min(SNIFF)]).to_ascii_lowercase();
    let at = head.find("<meta")?;
    let after = &head[at..];
    let value = &after[after.find("charset=")? + "charset=".len()..];
    let value = value.trim_start_matches(['"', '\'', ' ']);
    let end =
        value.find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | ':' | '.'))).unwrap_or(value.len());
    (end > 0).then(|| value[..end].to_owned())
}

#[cfg(test)]
#[path = "body_tests.rs"]
mod tests;
