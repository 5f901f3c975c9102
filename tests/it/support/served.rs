//! `cairn serve` driven as its clients drive it: the real binary listening on a free loopback
//! port, and WebSocket clients (tokio-tungstenite) speaking JSON-RPC in text frames.

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::process::Child;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{PATIENCE, TestEnv};

/// One `cairn serve` process.
pub struct Server {
    pub child: Child,
    /// `ws://127.0.0.1:PORT/acp`.
    pub url: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `cairn serve --listen 127.0.0.1:0` in `env` and waits until it listens.
    pub async fn start(env: &TestEnv) -> Self {
        Self::start_with(env, &[]).await
    }

    /// [`Self::start`] with more arguments.
    pub async fn start_with(env: &TestEnv, args: &[&str]) -> Self {
        Self::start_on(env, "127.0.0.1:0", args).await
    }

    /// `cairn serve --listen LISTEN ARGS…`; `url` is what it says it listens on.
    pub async fn start_on(env: &TestEnv, listen: &str, args: &[&str]) -> Self {
        let mut command = env.command();
        command.args(["serve", "--listen", listen]).args(args);
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().expect("spawn cairn serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let (sink, mut pipe) = (Arc::clone(&stderr), child.stderr.take().unwrap());
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let started = tokio::time::Instant::now();
        let url = loop {
            let text = stderr.lock().unwrap().clone();
            if let Some(at) = text.find("listening on ") {
                let rest = &text[at + "listening on ".len()..];
                break rest.lines().next().unwrap().split(' ').next().unwrap().to_owned();
            }
            assert!(started.elapsed() < PATIENCE, "cairn serve did not start listening; stderr:\n{text}");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        };
        let said = stderr.lock().unwrap().clone();
        if let Some((_, rest)) = said.split_once("the secret kept in ") {
            let kept = rest.split(" as `Authorization").next().unwrap();
            let secret = std::fs::read_to_string(kept).unwrap().trim().to_owned();
            remember_secret(&url, secret);
        }
        Self { child, url, stderr }
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (up to ten seconds) until the server has said `text` on stderr; fails if it does not.
    pub async fn until_said(&self, text: &str) {
        for _ in 0..400 {
            if self.stderr().contains(text) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(25)).await;
        }
        panic!("cairn serve never said {text:?}; stderr:\n{}", self.stderr());
    }

    /// A new client, not yet initialized.
    pub async fn connect(&self) -> Client {
        self.try_connect()
            .await
            .unwrap_or_else(|err| panic!("connect to {}: {err}; stderr:\n{}", self.url, self.stderr()))
    }

    /// A new client, or why the server would not take it.
    pub async fn try_connect(&self) -> Result<Client, tokio_tungstenite::tungstenite::Error> {
        try_connect(&self.url).await
    }

    /// A client, initialized.
    pub async fn client(&self) -> Client {
        let mut client = self.connect().await;
        client.initialize().await;
        client
    }

    /// SIGTERM, then the exit status.
    pub async fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().expect("still running");
        std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
        tokio::time::timeout(PATIENCE, self.child.wait()).await.expect("cairn serve stops at SIGTERM").unwrap()
    }
}

/// The secrets of the servers started without `--auth`, by where they listen (`HOST:PORT` or a
/// socket's path): a client of one shows it, as `cairn acp --server` does.
static SECRETS: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());

fn place_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

fn remember_secret(url: &str, secret: String) {
    let mut secrets = SECRETS.lock().unwrap();
    secrets.retain(|(place, _)| place != place_of(url));
    secrets.push((place_of(url).to_owned(), secret));
}

/// The secret of the server without `--auth` listening at `url` (`ws://`, `http://` or a
/// socket's path), as a client on the same machine reads it from the server's data directory.
pub fn secret_for(url: &str) -> Option<String> {
    let secrets = SECRETS.lock().unwrap();
    secrets.iter().find(|(place, _)| place == place_of(url)).map(|(_, secret)| secret.clone())
}

/// A new client of the server at `url`, not yet initialized (for tasks that own no [`Server`]).
#[allow(dead_code, reason = "used by benches/serve.rs")]
pub async fn connect(url: &str) -> Client {
    try_connect(url).await.unwrap_or_else(|err| panic!("connect to {url}: {err}"))
}

async fn try_connect(url: &str) -> Result<Client, tokio_tungstenite::tungstenite::Error> {
    try_connect_with(url, secret_for(url).as_deref()).await
}

/// A new client showing `secret` as `Authorization: Bearer` (for `cairn serve --auth`), or why
/// the server would not take it.
pub async fn try_connect_with(
    url: &str,
    secret: Option<&str>,
) -> Result<Client, tokio_tungstenite::tungstenite::Error> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request()?;
    if let Some(secret) = secret {
        request.headers_mut().insert("authorization", format!("Bearer {secret}").parse().unwrap());
    }
    let (socket, response) = tokio_tungstenite::connect_async(request).await?;
    let connection = response
        .headers()
        .get("acp-connection-id")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    Ok(Client { socket, connection, next_id: 1 })
}

/// A client whose socket takes in little (a 4 KiB receive buffer), as a client on a slow link
/// does: once it stops reading, what the server sends waits in the server.
pub async fn connect_narrow(url: &str) -> Client {
    let address = url.trim_start_matches("ws://").split('/').next().unwrap().parse().unwrap();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(address).await.unwrap();
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut request = url.into_client_request().unwrap();
    if let Some(secret) = secret_for(url) {
        request.headers_mut().insert("authorization", format!("Bearer {secret}").parse().unwrap());
    }
    let (socket, _) = tokio_tungstenite::client_async(request, MaybeTlsStream::Plain(stream)).await.unwrap();
    Client { socket, connection: String::new(), next_id: 1 }
}

/// One WebSocket client.
pub struct Client {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The `Acp-Connection-Id` the upgrade answered with.
    pub connection: String,
    next_id: i64,
}

impl Client {
    pub async fn send(&mut self, message: Value) {
        self.socket.send(Message::Text(message.to_string().into())).await.expect("send a frame");
    }

    pub async fn send_frame(&mut self, frame: Message) {
        self.socket.send(frame).await.expect("send a frame");
    }

    pub async fn try_send_frame(&mut self, frame: Message) -> Result<(), tokio_tungstenite::tungstenite::Error> {
        self.socket.send(frame).await
    }

    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    /// The next JSON-RPC message, `None` once the server closed the connection.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.socket.next()).await.expect("a frame within PATIENCE");
            match frame {
                Some(Ok(Message::Text(text))) => {
                    return Some(serde_json::from_str(&text).unwrap_or_else(|err| panic!("not JSON ({err}): {text}")));
                }
                Some(Ok(Message::Binary(_))) => panic!("the server sent a binary frame"),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    }

    /// The next frame as it came, `None` once the connection ended without a close frame.
    pub async fn next_frame(&mut self) -> Option<Message> {
        let frame = tokio::time::timeout(PATIENCE, self.socket.next()).await.expect("a frame within PATIENCE");
        frame.and_then(Result::ok)
    }

    pub async fn recv(&mut self) -> Value {
        self.next().await.expect("the server closed the connection")
    }

    /// Reads until the response to `id`: it, and what came before it.
    pub async fn response(&mut self, id: i64) -> (Value, Vec<Value>) {
        let mut before = Vec::new();
        loop {
            let message = self.recv().await;
            if message.get("method").is_none() && message["id"] == id {
                return (message, before);
            }
            before.push(message);
        }
    }

    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        let (response, _) = self.response(id).await;
        assert!(response.get("error").is_none(), "{method} failed: {response}");
        response["result"].clone()
    }

    pub async fn initialize(&mut self) -> Value {
        self.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {}})).await
    }

    pub async fn new_session(&mut self, cwd: &str) -> String {
        let result = self.call("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
        result["sessionId"].as_str().unwrap().to_owned()
    }

    pub async fn prompt(&mut self, session: &str, text: &str) -> i64 {
        self.request("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})).await
    }

    /// Goes away without a word, as a crashed client does.
    pub fn drop_connection(self) {
        drop(self.socket);
    }
}
