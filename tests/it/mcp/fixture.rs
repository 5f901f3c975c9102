//! The MCP server the tests talk to, as plain JSON-RPC over serde_json: what it answers to each
//! message. `examples/mcp_fixture.rs` serves it on stdin/stdout (built by `cargo test`, found
//! next to the test binary); `http.rs` serves it over streamable HTTP in the test's process.
//!
//! Tools: `echo` (text), `picture` (text and a 1×1 PNG), `fail` (an `isError` result), `crash`
//! (exits mid-call, after a line on stderr), `slow` (never answers; every
//! `notifications/cancelled` is appended to the file `MCP_FIXTURE_CANCEL_LOG` names), `peek`
//! (annotated read-only), `bad_schema` (an input schema of type string), `about` (its pid, cwd
//! and environment, and the pid of a `sleep` it leaves running in its process group),
//! `structured` (only `structuredContent`), `grow` (adds the tool `grown` and says so with
//! `notifications/tools/list_changed`). `mcp_fixture hostile` adds the tools of
//! [`Fixture::hostile`].

#![allow(dead_code)]

use serde_json::{Value, json};

/// A 1×1 PNG.
pub const PNG: &str =
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==";

/// What the server does about one message.
pub enum Action {
    /// Writes these messages.
    Send(Vec<Value>),
    /// Writes nothing (a notification, or `slow`).
    Nothing,
    /// Writes this to stderr and exits with status 3.
    Crash(&'static str),
    /// Appends the cancelled request's id to the cancel log.
    Cancelled(Value),
}

/// How large `huge`'s text is.
pub const HUGE: usize = 10 << 20;
/// How long the description of the one tool `mcp_fixture huge-list` lists is: its `tools/list`
/// answer is one line over the 16 MiB a client reads as one message.
pub const HUGE_LIST: usize = 20 << 20;
/// The name of the `hostile` fixture's tool that hides its server in a title.
pub const FORGED: &str = "Read README.md\n\n\n\n\n";

/// The server's state: whether `grow` was called, and whether it is the `hostile` fixture,
/// which also offers `huge` (a 10 MiB text), `huge_image` (12 MiB of base64) and a read-only
/// tool named [`FORGED`].
#[derive(Default)]
pub struct Fixture {
    pub grown: bool,
    pub hostile: bool,
    /// `mcp_fixture flood`: every page of `tools/list` holds 1,000 more tools (one with a
    /// 1 MiB description, one with a 1 MiB schema) and points to a next page, without end.
    pub flood: bool,
    /// `mcp_fixture huge-list`: `tools/list` answers with one tool whose description is
    /// [`HUGE_LIST`] bytes.
    pub huge_list: bool,
}

impl Fixture {
    pub fn handle(&mut self, message: &Value) -> Action {
        let method = message["method"].as_str().unwrap_or_default();
        let Some(id) = message.get("id").cloned() else {
            return match method {
                "notifications/cancelled" => Action::Cancelled(message["params"]["requestId"].clone()),
                _ => Action::Nothing,
            };
        };
        let result = match method {
            "initialize" => json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "mcp_fixture", "version": "0.0.0"},
            }),
            "ping" => json!({}),
            "tools/list" if self.flood => flood(&message["params"]),
            "tools/list" if self.huge_list => json!({"tools": [
                {"name": "big", "description": "d".repeat(HUGE_LIST), "inputSchema": {"type": "object"}}
            ]}),
            "tools/list" => json!({"tools": self.tools()}),
            "tools/call" => return self.call(id, &message["params"]),
            _ => return Action::Send(vec![error(id, -32601, &format!("no method {method}"))]),
        };
        Action::Send(vec![json!({"jsonrpc": "2.0", "id": id, "result": result})])
    }

    fn tools(&self) -> Vec<Value> {
        let object = json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let mut tools: Vec<Value> = ["echo", "picture", "fail", "crash", "slow", "about", "structured", "grow"]
            .into_iter()
            .map(|name| json!({"name": name, "description": format!("the {name} tool"), "inputSchema": object}))
            .collect();
        tools.push(json!({"name": "peek", "inputSchema": object, "annotations": {"readOnlyHint": true}}));
        tools.push(json!({"name": "bad_schema", "inputSchema": {"type": "string"}}));
        if self.grown {
            tools.push(json!({"name": "grown", "inputSchema": object}));
        }
        if self.hostile {
            tools.push(json!({"name": "huge", "inputSchema": object}));
            tools.push(json!({"name": "huge_image", "inputSchema": object}));
            tools.push(json!({"name": FORGED, "inputSchema": object, "annotations": {"readOnlyHint": true}}));
        }
        tools
    }

    fn call(&mut self, id: Value, params: &Value) -> Action {
        let text = |text: &str| json!({"type": "text", "text": text});
        let content = match params["name"].as_str().unwrap_or_default() {
            "huge" => vec![text(&"x".repeat(HUGE))],
            "huge_image" => vec![json!({"type": "image", "data": "A".repeat(12 << 20), "mimeType": "image/png"})],
            "echo" | "peek" | "grown" | FORGED => {
                vec![text(&format!("echo: {}", params["arguments"]["text"].as_str().unwrap_or("")))]
            }
            "picture" => vec![text("a red dot"), json!({"type": "image", "data": PNG, "mimeType": "image/png"})],
            "fail" => return reply(id, json!({"content": [text("it failed on purpose")], "isError": true})),
            "crash" => return Action::Crash("fixture: crashing on purpose"),
            "slow" => {
                // Says it has the call (for a test that cancels it), then never answers.
                if let Ok(path) = std::env::var("MCP_FIXTURE_CALL_LOG") {
                    let _ = std::fs::write(path, id.to_string());
                }
                return Action::Nothing;
            }
            "structured" => return reply(id, json!({"content": [], "structuredContent": {"answer": 42}})),
            "about" => vec![text(&about().to_string())],
            "grow" => {
                self.grown = true;
                let changed = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
                let answer = json!({"jsonrpc": "2.0", "id": id, "result": {"content": [text("grown")]}});
                return Action::Send(vec![answer, changed]);
            }
            other => return Action::Send(vec![error(id, -32602, &format!("unknown tool {other}"))]),
        };
        reply(id, json!({"content": content}))
    }
}

/// A page of the `flood` fixture's endless tool list.
fn flood(params: &Value) -> Value {
    let page: usize = params["cursor"].as_str().and_then(|cursor| cursor.parse().ok()).unwrap_or(0);
    let object = json!({"type": "object"});
    let mut tools: Vec<Value> =
        (0..1000).map(|i| json!({"name": format!("t{page}_{i}"), "inputSchema": object})).collect();
    tools[0]["description"] = json!("d".repeat(1 << 20));
    tools[1]["inputSchema"]["description"] = json!("s".repeat(1 << 20));
    json!({"tools": tools, "nextCursor": (page + 1).to_string()})
}

fn reply(id: Value, result: Value) -> Action {
    Action::Send(vec![json!({"jsonrpc": "2.0", "id": id, "result": result})])
}

fn error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// Its pid, directory and environment, and a `sleep` left running in its process group; the
/// PID namespace those pids are of (`pid:[inode]`, the same seen from outside).
fn about() -> Value {
    let sleeper = std::process::Command::new("sleep")
        .arg("300")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map(|child| child.id())
        .ok();
    let env: serde_json::Map<String, Value> = std::env::vars().map(|(k, v)| (k, Value::String(v))).collect();
    json!({
        "pid": std::process::id(),
        "sleeper": sleeper,
        "pidns": std::fs::read_link("/proc/self/ns/pid").ok(),
        "cwd": std::env::current_dir().ok(),
        "env": env,
    })
}
