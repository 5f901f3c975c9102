//! The streamable HTTP client against servers scripted in the test's process, each answering
//! one way: answers on event streams, with stray answers and requests cairn does not know
//! before them; streams that end before the answer (taken up again when the server gave event
//! ids); an event over the size limit; a notification answered with garbage; a session id
//! cairn cannot send back; a session that expires; a GET stream that says the tools changed.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use cairn::mcp::{McpError, McpSettings, ServerConfig, ServerState};
use serde_json::{Value, json};

use super::{Session, start_with};

/// A request the server received.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    headers: HeaderMap,
    body: Value,
}

impl Seen {
    fn rpc_method(&self) -> &str {
        self.body["method"].as_str().unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }
}

type Script = dyn Fn(&Seen, &[Seen]) -> Response + Send + Sync;

#[derive(Clone)]
struct Server {
    seen: Arc<Mutex<Vec<Seen>>>,
    script: Arc<Script>,
}

impl Server {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves `script` (given each request and those before it) at `/mcp`; the URL and the log.
async fn serve(script: impl Fn(&Seen, &[Seen]) -> Response + Send + Sync + 'static) -> (String, Server) {
    let server = Server { seen: Arc::default(), script: Arc::new(script) };
    let app = Router::new().route("/mcp", any(handle)).with_state(server.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{address}/mcp"), server)
}

async fn handle(State(server): State<Server>, method: Method, headers: HeaderMap, body: Bytes) -> Response {
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let seen = Seen { method, headers, body };
    let before = server.seen.lock().unwrap().clone();
    let response = (server.script)(&seen, &before);
    server.seen.lock().unwrap().push(seen);
    response
}

fn json_body(value: &Value) -> Response {
    ([(header::CONTENT_TYPE, "application/json")], value.to_string()).into_response()
}

/// An event stream of these events, each given as its lines.
fn events(events: &[String]) -> Response {
    let body: String = events.iter().map(|event| format!("{event}\n\n")).collect();
    ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
}

fn data(message: &Value) -> String {
    format!("data: {message}")
}

fn result(request: &Seen, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": request.body["id"], "result": result})
}

/// What a plain server answers: `initialize`, a list of `tools`, 202 to the rest but GETs (405).
fn plain(request: &Seen, tools: &[&str]) -> Response {
    match request.rpc_method() {
        _ if request.method == Method::GET => StatusCode::METHOD_NOT_ALLOWED.into_response(),
        "initialize" => json_body(&result(
            request,
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "s", "version": "1"}}),
        )),
        "tools/list" => {
            let tools: Vec<Value> =
                tools.iter().map(|name| json!({"name": name, "inputSchema": {"type": "object"}})).collect();
            json_body(&result(request, json!({"tools": tools})))
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}

fn text(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

fn http_session(url: String) -> Session {
    start_with(
        vec![ServerConfig::http("web", url, Vec::new())],
        McpSettings { startup_timeout: Duration::from_secs(10) },
    )
}

/// Waits for `check`, up to 30 s (a loaded CI machine; a pass returns at once).
async fn eventually(what: &str, check: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn stray_answers_and_requests_cairn_does_not_know_do_not_disturb_a_call() {
    let (url, server) = serve(|request, _| match request.rpc_method() {
        "tools/call" => events(&[
            data(&json!({"jsonrpc": "2.0", "id": 9999, "result": text("not yours")})),
            data(&json!({"jsonrpc": "2.0", "id": "s1", "method": "weird/method", "params": {}})),
            data(&json!({"jsonrpc": "2.0", "id": "s2", "method": "ping"})),
            data(&json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})),
            "data: this is no JSON".to_owned(),
            data(&result(request, text("yours"))),
        ]),
        _ => plain(request, &["echo"]),
    })
    .await;
    let session = http_session(url);
    session.ready().await;
    assert_eq!(session.call("web", "echo", json!({})).await.unwrap().model_text(), "yours");
    let answered = |id: &str| server.seen().into_iter().find(|seen| seen.body["id"] == id).map(|seen| seen.body);
    eventually("both requests answered", || answered("s1").is_some() && answered("s2").is_some()).await;
    assert_eq!(answered("s1").unwrap()["error"]["code"], -32601);
    assert_eq!(answered("s2").unwrap()["result"], json!({}));
    assert_eq!(session.state("web"), ServerState::Ready { tools: 1 });
}

#[tokio::test]
async fn a_stream_that_ends_before_the_answer_fails_the_call_unless_its_event_ids_let_it_resume() {
    let (url, server) = serve(|request, before| match request.rpc_method() {
        "tools/call" if request.body["params"]["name"] == "cut" => {
            events(&[data(&json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {}}))])
        }
        "tools/call" => events(&["id: e1\nretry: 10\ndata:".to_owned()]),
        _ if request.method == Method::GET && request.header("last-event-id") == Some("e1") => {
            let call = before.iter().rfind(|seen| seen.rpc_method() == "tools/call").unwrap();
            events(&[format!("id: e2\n{}", data(&result(call, text("resumed"))))])
        }
        _ => plain(request, &["cut", "resumable"]),
    })
    .await;
    let session = http_session(url);
    session.ready().await;
    let err = session.call("web", "cut", json!({})).await.unwrap_err();
    let McpError::Crashed { why, .. } = &err else { panic!("{err}") };
    assert!(why.contains("its event stream ended before it answered"), "{why}");
    let resumed = session.call("web", "resumable", json!({})).await.unwrap();
    assert_eq!(resumed.model_text(), "resumed");
    let get = server.seen().into_iter().rfind(|seen| seen.method == Method::GET).unwrap();
    assert_eq!(get.header("accept"), Some("text/event-stream"));
}

#[tokio::test]
async fn an_event_larger_than_the_limit_fails_the_call_naming_the_limit() {
    let (url, _server) = serve(|request, _| match request.rpc_method() {
        "tools/call" => events(&[data(&result(request, text(&"x".repeat(17 << 20))))]),
        _ => plain(request, &["big"]),
    })
    .await;
    let session = http_session(url);
    session.ready().await;
    let err = session.call("web", "big", json!({})).await.unwrap_err();
    assert!(err.to_string().contains(&format!("an event of more than {} bytes", 16 << 20)), "{err}");
}

#[tokio::test]
async fn notifications_answered_with_garbage_are_taken_as_delivered() {
    let (url, _server) = serve(|request, _| match request.rpc_method() {
        "notifications/initialized" => ([(header::CONTENT_TYPE, "text/html")], "<html>welcome!</html>").into_response(),
        "notifications/cancelled" => ([(header::CONTENT_TYPE, "application/json")], "{not json").into_response(),
        "tools/call" => json_body(&result(request, text("fine"))),
        _ => plain(request, &["echo"]),
    })
    .await;
    let session = http_session(url);
    session.ready().await;
    assert_eq!(session.state("web"), ServerState::Ready { tools: 1 });
    assert_eq!(session.call("web", "echo", json!({})).await.unwrap().model_text(), "fine");
}

#[tokio::test]
async fn a_session_id_with_control_characters_fails_the_start_and_is_never_sent_back() {
    let (url, server) = serve(|request, _| {
        let mut response = plain(request, &["echo"]);
        if request.rpc_method() == "initialize" {
            response.headers_mut().insert("mcp-session-id", HeaderValue::from_bytes(b"abc\tdef").unwrap());
        }
        response
    })
    .await;
    let session = http_session(url);
    session.ready().await;
    let ServerState::Failed { why, .. } = session.state("web") else { panic!("{:?}", session.servers.status()) };
    assert!(why.starts_with("the MCP handshake failed: the server's session id (Mcp-Session-Id)"), "{why}");
    assert!(why.contains("visible ASCII"), "{why}");
    assert!(server.seen().iter().all(|seen| seen.header("mcp-session-id").is_none()));
}

#[tokio::test]
async fn an_expired_session_is_started_again_and_the_call_goes_through() {
    let (url, server) = serve(|request, before| {
        let sessions = before.iter().filter(|seen| seen.rpc_method() == "initialize").count();
        let current = format!("s{sessions}");
        if request.rpc_method() == "initialize" {
            let mut response = plain(request, &["echo"]);
            let id = HeaderValue::from_str(&format!("s{}", sessions + 1)).unwrap();
            response.headers_mut().insert("mcp-session-id", id);
            return response;
        }
        if request.method == Method::DELETE {
            return StatusCode::OK.into_response();
        }
        if request.header("mcp-session-id") != Some(current.as_str()) {
            return StatusCode::NOT_FOUND.into_response();
        }
        match request.rpc_method() {
            // The first session ends at the first call.
            "tools/call" if sessions == 1 => StatusCode::NOT_FOUND.into_response(),
            "tools/call" => json_body(&result(request, text("again"))),
            _ => plain(request, &["echo"]),
        }
    })
    .await;
    let session = http_session(url);
    session.ready().await;
    assert_eq!(session.call("web", "echo", json!({})).await.unwrap().model_text(), "again");
    let seen = server.seen();
    let methods: Vec<&str> = seen.iter().filter(|seen| seen.method == Method::POST).map(Seen::rpc_method).collect();
    assert_eq!(
        methods,
        [
            "initialize",
            "notifications/initialized",
            "tools/list",
            "tools/call",
            "initialize",
            "notifications/initialized",
            "tools/call"
        ]
    );
    let last = seen.iter().rfind(|seen| seen.rpc_method() == "tools/call").unwrap();
    assert_eq!((last.header("mcp-session-id"), last.header("mcp-protocol-version")), (Some("s2"), Some("2025-06-18")));
    assert!(seen[0].header("mcp-protocol-version").is_none(), "not before the version is agreed");
    session.servers.shutdown().await;
    eventually("the session is deleted", || {
        server.seen().iter().any(|seen| seen.method == Method::DELETE && seen.header("mcp-session-id") == Some("s2"))
    })
    .await;
}

#[tokio::test]
async fn the_get_stream_tells_that_the_tools_changed() {
    let (url, _server) = serve(|request, before| {
        let gets = before.iter().filter(|seen| seen.method == Method::GET).count();
        let get = request.method == Method::GET;
        match request.rpc_method() {
            _ if get && gets == 0 => {
                events(&[data(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}))])
            }
            "tools/list" if gets > 0 => plain(request, &["echo", "grown"]),
            _ => plain(request, &["echo"]),
        }
    })
    .await;
    let session = http_session(url);
    session.ready().await;
    let servers = session.servers.clone();
    eventually("the new tool is offered", move || servers.tools().iter().any(|tool| tool.name == "grown")).await;
}
