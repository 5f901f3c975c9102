//! The JSON-RPC 2.0 client of one MCP connection, over any transport that moves whole messages
//! (a [`Link`]: a stdio server's lines in `lines.rs`, streamable HTTP in `http.rs`). One task
//! per connection owns the requests in flight (a map of id → reply) and reads everything the
//! server sends; [`Client`] handles send it requests and notifications. A request whose caller
//! stops waiting (its future dropped: a cancelled call, a start that timed out) is taken out of
//! the map and the server is sent `notifications/cancelled` with its id.
//!
//! What a server may ask of a client is answered as the MCP SDK's default client answered it:
//! `ping` with `{}`, `roots/list` with no roots, `elicitation/create` declined, anything else
//! (`sampling/createMessage` included) with -32601. `notifications/tools/list_changed` is passed
//! on; the server's log and progress notifications go to the log at debug, others are ignored.
//! An answer to an id never sent (or no longer awaited) is ignored; JSON that is no JSON-RPC
//! message is answered with -32600, as the SDK did. Nothing waits on the transport: a queue
//! to it that is full fails the request instead (the server is not reading).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// Messages waiting for the transport to take them; past this a request fails at once.
pub(super) const OUTBOUND: usize = 256;
/// Messages read from the transport and not yet handled; past this the transport waits.
pub(super) const INBOUND: usize = 64;

/// Why a request got no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum RpcError {
    /// The server answered with a JSON-RPC error.
    #[error("{message}")]
    Server { code: i64, message: String },
    /// The connection ended before the answer came.
    #[error("the connection closed")]
    Closed,
    /// The transport could not deliver the request or read its answer.
    #[error("{0}")]
    Transport(String),
}

/// The ends of a transport a connection uses.
pub(super) struct Link {
    pub outbound: mpsc::Sender<Outgoing>,
    pub inbound: mpsc::Receiver<Inbound>,
}

/// A message for the server, serialized.
pub(super) struct Outgoing {
    pub text: String,
    pub kind: Kind,
}

/// What an [`Outgoing`] message is.
pub(super) enum Kind {
    /// A request; `settled` is cancelled once it is answered or abandoned.
    Request { id: u64, method: String, settled: CancellationToken },
    /// A notification; `delivered`, when given, hears once the transport delivered it.
    Notification { method: String, delivered: Option<oneshot::Sender<Result<(), String>>> },
    /// The answer to a request of the server.
    Response,
}

/// What a transport hands the connection.
#[derive(Debug)]
pub(super) enum Inbound {
    Message(Value),
    /// Request `id` could not be delivered, or its answer not read.
    Failed {
        id: u64,
        why: String,
    },
}

/// A handle on the connection; cheap to clone. The connection ends when the last one is
/// dropped, its stop token is cancelled, or the transport ends.
#[derive(Clone)]
pub(super) struct Client {
    commands: mpsc::UnboundedSender<Command>,
    next_id: Arc<AtomicU64>,
    ended: CancellationToken,
}

enum Command {
    Request { id: u64, method: String, params: Value, reply: oneshot::Sender<Result<Value, RpcError>> },
    Notify { method: String, params: Value, delivered: oneshot::Sender<Result<(), String>> },
    Abandon(u64),
}

/// Starts the connection over `link`; `changed` hears `notifications/tools/list_changed`.
pub(super) fn start(server: &str, link: Link, changed: mpsc::Sender<()>, stop: CancellationToken) -> Client {
    let (commands_tx, commands) = mpsc::unbounded_channel();
    let ended = CancellationToken::new();
    let Link { outbound, inbound } = link;
    let actor = Actor { server: server.to_owned(), outbound, pending: HashMap::new(), changed };
    tokio::spawn(actor.run(commands, inbound, stop, ended.clone().drop_guard()));
    Client { commands: commands_tx, next_id: Arc::new(AtomicU64::new(0)), ended }
}

impl Client {
    /// Sends request `method` and waits for its result. Dropping the future abandons it.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (reply, answer) = oneshot::channel();
        let command = Command::Request { id, method: method.to_owned(), params, reply };
        self.commands.send(command).map_err(|_| RpcError::Closed)?;
        let mut waiting = Waiting { commands: &self.commands, id: Some(id) };
        let result = answer.await.unwrap_or(Err(RpcError::Closed));
        waiting.id = None;
        result
    }

    /// Sends notification `method` and waits until the transport delivered it.
    pub async fn notify(&self, method: &str, params: Value) -> Result<(), RpcError> {
        let (delivered, heard) = oneshot::channel();
        let command = Command::Notify { method: method.to_owned(), params, delivered };
        self.commands.send(command).map_err(|_| RpcError::Closed)?;
        match heard.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(why)) => Err(RpcError::Transport(why)),
            Err(_) => Err(RpcError::Closed),
        }
    }

    /// Cancelled once the connection ended, for whatever reason.
    pub fn ended(&self) -> CancellationToken {
        self.ended.clone()
    }
}

/// A request being waited for: dropped while armed, it abandons the request.
struct Waiting<'a> {
    commands: &'a mpsc::UnboundedSender<Command>,
    id: Option<u64>,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let _ = self.commands.send(Command::Abandon(id));
        }
    }
}

struct Pending {
    reply: oneshot::Sender<Result<Value, RpcError>>,
    settled: CancellationToken,
}

struct Actor {
    server: String,
    outbound: mpsc::Sender<Outgoing>,
    pending: HashMap<u64, Pending>,
    changed: mpsc::Sender<()>,
}

impl Actor {
    async fn run(
        mut self,
        mut commands: mpsc::UnboundedReceiver<Command>,
        mut inbound: mpsc::Receiver<Inbound>,
        stop: CancellationToken,
        _ended: tokio_util::sync::DropGuard,
    ) {
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                received = inbound.recv() => match received {
                    Some(Inbound::Message(message)) => self.receive(message),
                    Some(Inbound::Failed { id, why }) => self.settle(id, Err(RpcError::Transport(why))),
                    None => break,
                },
                command = commands.recv() => match command {
                    Some(command) => self.command(command),
                    None => break,
                },
            }
        }
        for (_, pending) in self.pending.drain() {
            pending.settled.cancel();
            let _ = pending.reply.send(Err(RpcError::Closed));
        }
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Request { id, method, params, reply } => {
                let text = message(Some(id), &method, params);
                let settled = CancellationToken::new();
                let kind = Kind::Request { id, method, settled: settled.clone() };
                match self.send(Outgoing { text, kind }) {
                    Ok(()) => {
                        self.pending.insert(id, Pending { reply, settled });
                    }
                    Err(error) => {
                        let _ = reply.send(Err(error));
                    }
                }
            }
            Command::Notify { method, params, delivered } => {
                let text = message(None, &method, params);
                let (tell, told) = oneshot::channel();
                let kind = Kind::Notification { method, delivered: Some(tell) };
                match self.send(Outgoing { text, kind }) {
                    Ok(()) => {
                        tokio::spawn(async move {
                            let _ = delivered.send(told.await.unwrap_or_else(|_| Err("the connection closed".into())));
                        });
                    }
                    Err(error) => {
                        let _ = delivered.send(Err(error.to_string()));
                    }
                }
            }
            Command::Abandon(id) => {
                if let Some(pending) = self.pending.remove(&id) {
                    pending.settled.cancel();
                    let params = json!({"requestId": id, "reason": "the client no longer waits for it"});
                    let text = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params});
                    let kind = Kind::Notification { method: "notifications/cancelled".to_owned(), delivered: None };
                    let _ = self.send(Outgoing { text: text.to_string(), kind });
                }
            }
        }
    }

    fn send(&self, message: Outgoing) -> Result<(), RpcError> {
        self.outbound.try_send(message).map_err(|err| match err {
            mpsc::error::TrySendError::Full(_) => RpcError::Transport(format!(
                "the server is not reading what cairn sends ({OUTBOUND} messages are waiting)"
            )),
            mpsc::error::TrySendError::Closed(_) => RpcError::Closed,
        })
    }

    fn settle(&mut self, id: u64, result: Result<Value, RpcError>) {
        match self.pending.remove(&id) {
            Some(pending) => {
                pending.settled.cancel();
                let _ = pending.reply.send(result);
            }
            None => tracing::debug!(server = %self.server, id, "an answer to a request not awaited, ignored"),
        }
    }

    /// One message from the server (a batch is taken apart).
    fn receive(&mut self, message: Value) {
        let Value::Object(mut message) = message else {
            if let Value::Array(batch) = message {
                batch.into_iter().for_each(|message| self.receive(message));
            } else {
                self.invalid("a JSON value that is not an object");
            }
            return;
        };
        let id = message.remove("id").filter(|id| !id.is_null());
        let method = message.get("method").and_then(Value::as_str).map(str::to_owned);
        let params = message.remove("params").unwrap_or(Value::Null);
        match (method, id) {
            (Some(method), Some(id)) => self.request(id, &method, &params),
            (Some(method), None) => self.notification(&method, &params),
            (None, Some(id)) if message.contains_key("result") || message.contains_key("error") => {
                let Some(number) = id.as_u64().or_else(|| id.as_str().and_then(|id| id.parse().ok())) else {
                    tracing::debug!(server = %self.server, %id, "an answer to an id cairn never sends, ignored");
                    return;
                };
                let result = match message.remove("error") {
                    Some(error) if !error.is_null() => Err(server_error(&error)),
                    _ => Ok(message.remove("result").unwrap_or(Value::Null)),
                };
                self.settle(number, result);
            }
            (None, _) => self.invalid("an object that is no request, notification or answer"),
        }
    }

    /// Answers a request of the server.
    fn request(&mut self, id: Value, method: &str, params: &Value) {
        let answer = match method {
            "ping" => Ok(json!({})),
            "roots/list" => Ok(json!({"roots": []})),
            "elicitation/create" => Ok(json!({"action": "decline"})),
            _ => Err(json!({"code": -32601, "message": format!("Method not found: {method}")})),
        };
        tracing::debug!(server = %self.server, method, %params, "a request of the server");
        let text = match answer {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        if self.send(Outgoing { text: text.to_string(), kind: Kind::Response }).is_err() {
            tracing::debug!(server = %self.server, method, "the answer to the server's request was dropped");
        }
    }

    fn notification(&mut self, method: &str, params: &Value) {
        match method {
            "notifications/tools/list_changed" => {
                let _ = self.changed.try_send(());
            }
            "notifications/message" | "notifications/progress" => {
                tracing::debug!(target: "cairn::mcp::server", server = %self.server, method, %params);
            }
            _ => tracing::trace!(server = %self.server, method, "a notification ignored"),
        }
    }

    fn invalid(&mut self, what: &str) {
        tracing::debug!(server = %self.server, "the server sent {what}");
        let error = json!({"code": -32600, "message": "Invalid request"});
        let text = json!({"jsonrpc": "2.0", "id": null, "error": error}).to_string();
        let _ = self.send(Outgoing { text, kind: Kind::Response });
    }
}

/// A request (with `id`) or notification, `params` left out when null.
fn message(id: Option<u64>, method: &str, params: Value) -> String {
    let mut message = Map::new();
    message.insert("jsonrpc".to_owned(), json!("2.0"));
    if let Some(id) = id {
        message.insert("id".to_owned(), json!(id));
    }
    message.insert("method".to_owned(), json!(method));
    if !params.is_null() {
        message.insert("params".to_owned(), params);
    }
    Value::Object(message).to_string()
}

/// A JSON-RPC error object, read leniently.
fn server_error(error: &Value) -> RpcError {
    let empty = Map::new();
    let error = error.as_object().unwrap_or(&empty);
    let code = error.get("code").and_then(Value::as_i64).unwrap_or(-32603);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("(no message)").to_owned();
    RpcError::Server { code, message }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A connection over channels the test holds as the server.
    fn connect() -> (Client, mpsc::Receiver<Outgoing>, mpsc::Sender<Inbound>, mpsc::Receiver<()>) {
        let (outbound, sent) = mpsc::channel(OUTBOUND);
        let (server, inbound) = mpsc::channel(INBOUND);
        let (changed_tx, changed) = mpsc::channel(1);
        let client = start("test", Link { outbound, inbound }, changed_tx, CancellationToken::new());
        (client, sent, server, changed)
    }

    async fn next(sent: &mut mpsc::Receiver<Outgoing>) -> Value {
        let message = tokio::time::timeout(Duration::from_secs(5), sent.recv()).await.unwrap().unwrap();
        serde_json::from_str(&message.text).unwrap()
    }

    #[tokio::test]
    async fn answers_find_their_requests_and_stray_answers_are_ignored() {
        let (client, mut sent, server, _changed) = connect();
        let asking = tokio::spawn({
            let client = client.clone();
            async move { client.request("tools/list", json!({})).await }
        });
        let request = next(&mut sent).await;
        assert_eq!((request["method"].as_str(), request["jsonrpc"].as_str()), (Some("tools/list"), Some("2.0")));
        let id = request["id"].clone();
        server.send(Inbound::Message(json!({"jsonrpc": "2.0", "id": 999, "result": {"stray": true}}))).await.unwrap();
        server.send(Inbound::Message(json!({"jsonrpc": "2.0", "id": "not-ours", "result": {}}))).await.unwrap();
        server.send(Inbound::Message(json!({"jsonrpc": "2.0", "id": id, "result": {"tools": []}}))).await.unwrap();
        assert_eq!(asking.await.unwrap(), Ok(json!({"tools": []})));
        let asking = tokio::spawn({
            let client = client.clone();
            async move { client.request("tools/call", json!({})).await }
        });
        let id = next(&mut sent).await["id"].clone();
        let error = json!({"code": -32602, "message": "unknown tool"});
        server.send(Inbound::Message(json!({"jsonrpc": "2.0", "id": id, "error": error}))).await.unwrap();
        assert_eq!(asking.await.unwrap(), Err(RpcError::Server { code: -32602, message: "unknown tool".into() }));
    }

    #[tokio::test]
    async fn the_servers_requests_are_answered_as_the_sdk_did_and_unknown_ones_refused() {
        let (_client, mut sent, server, mut changed) = connect();
        let asks = [
            ("ping", "/result", json!({})),
            ("roots/list", "/result/roots", json!([])),
            ("elicitation/create", "/result/action", json!("decline")),
            ("sampling/createMessage", "/error/code", json!(-32601)),
            ("weird/thing", "/error/message", json!("Method not found: weird/thing")),
        ];
        for (at, (method, pointer, expected)) in asks.into_iter().enumerate() {
            server.send(Inbound::Message(json!({"jsonrpc": "2.0", "id": at, "method": method}))).await.unwrap();
            let answer = next(&mut sent).await;
            assert_eq!(answer["id"], at, "{answer}");
            assert_eq!(answer.pointer(pointer), Some(&expected), "{method}: {answer}");
        }
        server.send(Inbound::Message(json!({"jsonrpc": "2.0", "method": "notifications/message"}))).await.unwrap();
        let changed_note = json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"});
        server.send(Inbound::Message(json!([changed_note]))).await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), changed.recv()).await.unwrap().unwrap();
        server.send(Inbound::Message(json!({"jsonrpc": "2.0", "what": 1}))).await.unwrap();
        let answer = next(&mut sent).await;
        assert_eq!((answer["id"].clone(), answer["error"]["code"].clone()), (Value::Null, json!(-32600)));
    }

    #[tokio::test]
    async fn a_request_given_up_is_cancelled_once_and_its_late_answer_ignored() {
        let (client, mut sent, server, _changed) = connect();
        let asking = client.request("tools/call", json!({"name": "slow"}));
        let request = tokio::select! {
            _ = asking => panic!("answered"),
            request = next(&mut sent) => request,
        };
        let cancelled = next(&mut sent).await;
        assert_eq!(cancelled["method"], "notifications/cancelled");
        assert_eq!(cancelled["params"]["requestId"], request["id"]);
        server.send(Inbound::Message(json!({"jsonrpc": "2.0", "id": request["id"], "result": {}}))).await.unwrap();
        server.send(Inbound::Failed { id: 12345, why: "nothing".into() }).await.unwrap();
        let ping = client.request("ping", json!({}));
        let answered = async {
            let id = next(&mut sent).await["id"].clone();
            server.send(Inbound::Message(json!({"jsonrpc": "2.0", "id": id, "result": {}}))).await.unwrap();
        };
        let (result, ()) = tokio::join!(ping, answered);
        assert_eq!(result, Ok(json!({})));
        assert!(sent.try_recv().is_err(), "nothing more was sent");
    }

    #[tokio::test]
    async fn the_transport_ending_fails_what_waits() {
        let (client, mut sent, server, _changed) = connect();
        let asking = tokio::spawn({
            let client = client.clone();
            async move { client.request("tools/call", json!({})).await }
        });
        let _ = next(&mut sent).await;
        drop(server);
        assert_eq!(asking.await.unwrap(), Err(RpcError::Closed));
        client.ended().cancelled().await;
        assert_eq!(client.request("ping", json!({})).await, Err(RpcError::Closed));
    }
}
