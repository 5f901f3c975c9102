//! What servers send, read from the JSON of the wire (so an odd tool or block is skipped, not
//! the whole answer): the tools a server lists ([`McpTool`], with the checks on their schemas,
//! at most [`MAX_TOOLS`] a server with descriptions and schemas of bounded size)
//! and the result of a call ([`CallOutcome`]), with what the model and the editor get of it,
//! bounded like a command's output.

use serde_json::{Map, Value};

use super::config::qualified;
use crate::history::ToolContent;

/// A tool of a ready server.
#[derive(Clone, Debug, PartialEq)]
pub struct McpTool {
    pub server: String,
    /// The server's own name for it.
    pub name: String,
    /// The name the model calls it by ([`qualified`]).
    pub qualified: String,
    pub description: String,
    /// A JSON Schema of `"type": "object"`.
    pub input_schema: Value,
    /// The server says the tool does not change anything (`readOnlyHint`). A hint from the
    /// server, not a guarantee.
    pub read_only: bool,
}

/// At most this many tools of one server are offered (each is in every request to the model).
pub const MAX_TOOLS: usize = 200;
/// A tool's description is cut at this many characters.
pub const MAX_DESCRIPTION: usize = 2048;
/// A tool whose input schema is larger than this (as JSON) is left out.
pub const MAX_SCHEMA: usize = 32 * 1024;
/// A server's listing is read until this many tools, offered or left out, were seen.
const MAX_LISTED: usize = 1000;

/// Reads one page of `tools/list`: the tools, and a notice for each tool left out. Whether
/// the listing is full: no further page is worth reading.
pub(super) fn read_tools(server: &str, page: &Value, tools: &mut Vec<McpTool>, skipped: &mut Vec<String>) -> bool {
    let Some(listed) = page.get("tools").and_then(Value::as_array) else {
        skipped.push("its tool list has no `tools` array".to_owned());
        return false;
    };
    for tool in listed {
        if tools.len() >= MAX_TOOLS {
            skipped.push(format!("it lists more than {MAX_TOOLS} tools; only its first {MAX_TOOLS} are offered"));
            return true;
        }
        if tools.len() + skipped.len() >= MAX_LISTED {
            return true;
        }
        match read_tool(server, tool) {
            Ok(tool) => tools.push(tool),
            Err(why) => skipped.push(why),
        }
    }
    false
}

fn read_tool(server: &str, tool: &Value) -> Result<McpTool, String> {
    let name = tool.get("name").and_then(Value::as_str).filter(|name| !name.is_empty());
    let Some(name) = name else { return Err("a tool without a name was left out".to_owned()) };
    let shown: String = name.chars().take(100).collect();
    let schema = match tool.get("inputSchema") {
        Some(Value::Object(schema)) => schema.clone(),
        Some(other) => return Err(format!("tool `{shown}` was left out: its input schema is {}", shape(other))),
        None => return Err(format!("tool `{shown}` was left out: it has no input schema")),
    };
    let size = Value::Object(schema.clone()).to_string().len();
    if size > MAX_SCHEMA {
        return Err(format!(
            "tool `{shown}` was left out: its input schema is larger than {} KiB ({} KiB)",
            MAX_SCHEMA / 1024,
            size / 1024
        ));
    }
    let schema = object_schema(schema).map_err(|why| format!("tool `{shown}` was left out: {why}"))?;
    let description = tool.get("description").and_then(Value::as_str).unwrap_or_default();
    let description = match description.char_indices().nth(MAX_DESCRIPTION) {
        Some((end, _)) => format!("{}…", description.get(..end).unwrap_or_default()),
        None => description.to_owned(),
    };
    let read_only = tool.pointer("/annotations/readOnlyHint").and_then(Value::as_bool).unwrap_or(false);
    Ok(McpTool {
        server: server.to_owned(),
        name: name.to_owned(),
        qualified: qualified(server, name),
        description,
        input_schema: Value::Object(schema),
        read_only,
    })
}

/// The schema of a tool's arguments, which must describe an object (what model APIs take);
/// one that says nothing of its type is taken as an object schema.
fn object_schema(mut schema: Map<String, Value>) -> Result<Map<String, Value>, String> {
    match schema.get("type") {
        None => {
            schema.insert("type".to_owned(), Value::String("object".to_owned()));
            Ok(schema)
        }
        Some(Value::String(kind)) if kind == "object" => Ok(schema),
        Some(other) => Err(format!("its input schema has type {other}, not \"object\"")),
    }
}

fn shape(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// At most this many bytes of a result's text reach the model (or one text block the editor),
/// as much as a command's output: its first and last halves, the middle left out.
pub const MAX_TEXT: usize = 200 * 1024;
/// A larger image (its base64 data) is named, not shown: no API would take it.
pub const MAX_IMAGE: usize = crate::images::IMAGE_BASE64_MAX as usize;
/// At most this many bytes of a result's blocks reach the editor.
const MAX_SHOWN: usize = 6 << 20;

/// `text` if it holds at most `max` bytes, else its start and end with a line in between that
/// says how much was left out.
fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let half = max / 2;
    let mut head = half;
    while !text.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = text.len() - half;
    while !text.is_char_boundary(tail) {
        tail += 1;
    }
    let (start, end) = (text.get(..head).unwrap_or_default(), text.get(tail..).unwrap_or_default());
    format!("{start}\n[… {} bytes of the result left out …]\n{end}", tail - head)
}

/// The result of a tool call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CallOutcome {
    pub blocks: Vec<Block>,
    /// `structuredContent`, when the server sent it.
    pub structured: Option<Value>,
    /// The server says the call failed (`isError`); the blocks say why.
    pub is_error: bool,
}

/// One content block of a result.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    Text(String),
    /// Base64 data.
    Image {
        data: String,
        mime_type: String,
    },
    Audio {
        data: String,
        mime_type: String,
    },
    /// A resource, linked or embedded; `text` is the embedded text, `bytes` the size of
    /// embedded binary data.
    Resource {
        uri: String,
        name: Option<String>,
        mime_type: Option<String>,
        text: Option<String>,
        bytes: Option<usize>,
    },
    /// A block of a type this version does not know.
    Other(String),
}

impl CallOutcome {
    /// Reads a `tools/call` result.
    pub(super) fn read(result: &Value) -> Self {
        let blocks =
            result.get("content").and_then(Value::as_array).map(|blocks| blocks.iter().map(read_block).collect());
        Self {
            blocks: blocks.unwrap_or_default(),
            structured: result.get("structuredContent").filter(|value| !value.is_null()).cloned(),
            is_error: result.get("isError").and_then(Value::as_bool).unwrap_or(false),
        }
    }

    /// What the model is told, at most [`MAX_TEXT`] bytes (its start and its end). Images and
    /// audio become a line saying what was left out (the tool output the model gets is text);
    /// structured content is given as JSON when no text block carries it already.
    pub fn model_text(&self) -> String {
        let mut parts: Vec<String> = self.blocks.iter().map(Block::model_text).collect();
        if let Some(structured) = self.structured_shown() {
            parts.push(structured.to_string());
        }
        if parts.is_empty() {
            return "(the tool returned no content)".to_owned();
        }
        cut(&parts.join("\n"), MAX_TEXT)
    }

    /// What the editor shows: a content per block (images as images, audio as a line naming
    /// it), and the structured content as JSON; texts cut like the model's, an image larger
    /// than [`MAX_IMAGE`] named instead of shown, and blocks past [`MAX_SHOWN`] bytes in all
    /// left out with a line that says so.
    pub fn editor_content(&self) -> Vec<ToolContent> {
        let mut content: Vec<ToolContent> = self.blocks.iter().map(Block::editor_content).collect();
        if let Some(structured) = self.structured_shown() {
            let text = serde_json::to_string_pretty(structured).unwrap_or_else(|_| structured.to_string());
            content.push(ToolContent::Text { text: cut(&format!("```json\n{text}\n```"), MAX_TEXT) });
        }
        let mut shown = 0;
        let mut kept = Vec::with_capacity(content.len());
        let total = content.len();
        for (position, block) in content.into_iter().enumerate() {
            let size = match &block {
                ToolContent::Text { text } => text.len(),
                ToolContent::Image { data, .. } => data.len(),
                _ => 0,
            };
            if shown + size > MAX_SHOWN {
                let text = format!("[{} more blocks of the result left out: too large to show]", total - position);
                kept.push(ToolContent::Text { text });
                break;
            }
            shown += size;
            kept.push(block);
        }
        kept
    }

    fn structured_shown(&self) -> Option<&Value> {
        let has_text = self.blocks.iter().any(|block| matches!(block, Block::Text(_)));
        self.structured.as_ref().filter(|_| !has_text)
    }
}

impl Block {
    fn model_text(&self) -> String {
        match self {
            Block::Text(text) => text.clone(),
            Block::Image { data, mime_type } | Block::Audio { data, mime_type } => {
                let what = if matches!(self, Block::Image { .. }) { "image" } else { "audio" };
                format!(
                    "[{what} ({mime_type}, {} bytes) returned by the tool; it is shown to the user, not to you]",
                    decoded_len(data)
                )
            }
            Block::Resource { uri, text: Some(text), .. } => format!("[resource {uri}]\n{text}"),
            Block::Resource { uri, name, mime_type, text: None, bytes } => {
                let mut line = format!("[resource {uri}");
                if let Some(name) = name {
                    line.push_str(&format!(" \"{name}\""));
                }
                if let Some(mime_type) = mime_type {
                    line.push_str(&format!(", {mime_type}"));
                }
                if let Some(bytes) = bytes {
                    line.push_str(&format!(", {bytes} bytes of binary data not shown"));
                }
                line.push(']');
                line
            }
            Block::Other(kind) => format!("[content of type `{kind}` left out]"),
        }
    }

    fn editor_content(&self) -> ToolContent {
        match self {
            Block::Image { data, mime_type } if data.len() > MAX_IMAGE => ToolContent::Text {
                text: format!("[image: {mime_type}, {}, too large to show]", size(decoded_len(data))),
            },
            Block::Image { data, mime_type } => ToolContent::Image { mime_type: mime_type.clone(), data: data.clone() },
            Block::Audio { data, mime_type } => {
                ToolContent::Text { text: format!("[audio: {mime_type}, {}]", size(decoded_len(data))) }
            }
            other => ToolContent::Text { text: cut(&other.model_text(), MAX_TEXT) },
        }
    }
}

fn read_block(block: &Value) -> Block {
    let text = |key: &str| block.get(key).and_then(Value::as_str).map(str::to_owned);
    let kind = text("type").unwrap_or_default();
    match kind.as_str() {
        "text" => Block::Text(text("text").unwrap_or_default()),
        "image" | "audio" => {
            let (data, mime_type) = (text("data").unwrap_or_default(), text("mimeType").unwrap_or_default());
            if kind == "image" { Block::Image { data, mime_type } } else { Block::Audio { data, mime_type } }
        }
        "resource_link" => Block::Resource {
            uri: text("uri").unwrap_or_default(),
            name: text("name"),
            mime_type: text("mimeType"),
            text: None,
            bytes: None,
        },
        "resource" => {
            let resource = block.get("resource");
            let field = |key: &str| resource.and_then(|r| r.get(key)).and_then(Value::as_str);
            Block::Resource {
                uri: field("uri").unwrap_or_default().to_owned(),
                name: None,
                mime_type: field("mimeType").map(str::to_owned),
                text: field("text").map(str::to_owned),
                bytes: field("blob").map(decoded_len),
            }
        }
        _ => Block::Other(kind),
    }
}

/// The size of base64 data once decoded.
fn decoded_len(data: &str) -> usize {
    let data = data.trim_end();
    let padding = data.bytes().rev().take_while(|b| *b == b'=').count();
    (data.len() / 4 * 3 + (data.len() % 4).saturating_sub(1)).saturating_sub(padding)
}

fn size(bytes: usize) -> String {
    crate::visible::human_size(bytes as u64)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn tools_with_unusable_schemas_are_left_out_with_a_reason() {
        let page = json!({"tools": [
            {"name": "ok", "description": "fine", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
            {"name": "untyped", "inputSchema": {"properties": {}}},
            {"name": "scalar", "inputSchema": {"type": "string"}},
            {"name": "number", "inputSchema": 42},
            {"name": "none"},
            {"inputSchema": {"type": "object"}},
        ]});
        let (mut tools, mut skipped) = (Vec::new(), Vec::new());
        read_tools("srv", &page, &mut tools, &mut skipped);
        let names: Vec<&str> = tools.iter().map(|tool| tool.qualified.as_str()).collect();
        assert_eq!(names, ["mcp__srv__ok", "mcp__srv__untyped"]);
        assert!(tools[0].read_only && !tools[1].read_only);
        assert_eq!(tools[1].input_schema["type"], "object");
        assert_eq!(skipped.len(), 4, "{skipped:?}");
        assert!(skipped[0].contains("`scalar`") && skipped[0].contains("\"string\""), "{}", skipped[0]);
        assert!(skipped[1].contains("a number"), "{}", skipped[1]);
    }

    #[test]
    fn results_become_text_for_the_model_and_content_for_the_editor() {
        let result = json!({"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inside"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"},
            {"type": "hologram"},
        ], "structuredContent": {"n": 1}, "isError": true});
        let outcome = CallOutcome::read(&result);
        assert!(outcome.is_error);
        let text = outcome.model_text();
        assert!(text.starts_with("hello\n[image (image/png, 8 bytes)"), "{text}");
        assert!(text.contains("[resource file:///a.txt]\ninside") && text.contains("[resource file:///b \"b\"]"));
        assert!(
            text.ends_with("[content of type `hologram` left out]"),
            "structured content rides on the text: {text}"
        );
        let editor = outcome.editor_content();
        assert_eq!(editor.len(), 5);
        assert_eq!(editor[1], ToolContent::Image { mime_type: "image/png".into(), data: "iVBORw0KGgo=".into() });

        let structured_only = CallOutcome::read(&json!({"content": [], "structuredContent": {"n": 1}}));
        assert_eq!(structured_only.model_text(), "{\"n\":1}");
        assert_eq!(structured_only.editor_content().len(), 1);
        assert_eq!(CallOutcome::read(&json!({"content": []})).model_text(), "(the tool returned no content)");
    }

    #[test]
    fn large_results_are_cut_at_their_middle_and_large_images_named() {
        let text = format!("{}{}", "é".repeat(MAX_TEXT), "end");
        let outcome = CallOutcome::read(&json!({"content": [{"type": "text", "text": text}]}));
        let told = outcome.model_text();
        assert!(told.len() <= MAX_TEXT + 100, "{}", told.len());
        assert!(told.starts_with('é') && told.ends_with("éend") && told.contains("bytes of the result left out"));
        let image = json!({"type": "image", "data": "A".repeat(MAX_IMAGE + 4), "mimeType": "image/png"});
        let shown = CallOutcome::read(&json!({"content": [image]})).editor_content();
        assert!(matches!(&shown[..], [ToolContent::Text { text }] if text.contains("too large to show")), "{shown:?}");
        let many: Vec<Value> = (0..100).map(|_| json!({"type": "text", "text": "x".repeat(MAX_TEXT)})).collect();
        let shown = CallOutcome::read(&json!({"content": many})).editor_content();
        let bytes: usize = shown.iter().map(|c| if let ToolContent::Text { text } = c { text.len() } else { 0 }).sum();
        assert!(bytes <= MAX_SHOWN + 100, "{bytes}");
        assert!(matches!(shown.last(), Some(ToolContent::Text { text }) if text.contains("more blocks")));
    }

    #[test]
    fn base64_sizes_are_those_of_the_decoded_data() {
        for (data, len) in [("", 0), ("QQ==", 1), ("QUI=", 2), ("QUJD", 3), ("QUJDRA==", 4), ("QUJDRA", 4)] {
            assert_eq!(decoded_len(data), len, "{data}");
        }
    }
}
