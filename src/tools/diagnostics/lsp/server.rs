//! One language server and the task that owns it: the process, started as an MCP stdio server
//! is ([`crate::process::ProcessPolicy::spawn_server`]: under the supervisor and the sandbox,
//! with the children's environment, dying with cairn, `kill -9` included) in the workspace
//! root, and everything said to it. The task sends `initialize` at once and `initialized` when
//! it is answered; a document's text goes as `textDocument/didOpen` the first time and as a
//! full `textDocument/didChange` (the next version) with `textDocument/didSave` after, and an
//! [`Ask::Sync`] is answered with the first `publishDiagnostics` for that document not older
//! than the version sent, or, from a server that offers LSP 3.17's pull, with its answer to
//! `textDocument/diagnostic` if that comes first (a server may publish only what changed, so
//! an edit that changes nothing would wait in vain), though not while the server says it is
//! still loading (rust-analyzer's `experimental/serverStatus`): then the documents waited for
//! are asked again once it is done. A text already sent and answered is answered from memory
//! (by a server that offers pull, asked again: what it said may be old by now). What the
//! server asks is answered so it never waits on cairn: `workspace/configuration` with nulls,
//! progress and registrations with null, anything else with MethodNotFound.
//!
//! A server that exits, sends what is not LSP, or does not read its input within
//! [`WRITE_BOUND`] is gone for the session: it is killed and every later ask is answered with
//! why (it is not started again). At [`Ask::Close`] it is sent `shutdown` and `exit`, given
//! [`CLOSE_STEP`] for each, then killed; when the last sender goes, it is killed at once.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, BufReader};
use tokio::process::ChildStdin;
use tokio::sync::{mpsc, oneshot, watch};

use super::framing;
use super::report::{diagnostic, language, same_uri};
use crate::process::{Confinement, Local, ProcessPolicy};
use crate::tools::diagnostics::parse::Diagnostic;

/// How long a write to the server may wait for it to read.
pub const WRITE_BOUND: Duration = Duration::from_secs(5);
/// How long a closing server gets to answer `shutdown`, then to exit after `exit`.
pub const CLOSE_STEP: Duration = Duration::from_secs(2);
/// The most diagnostics of one document kept.
pub const MOST_KEPT: usize = super::super::run::MOST_KEPT;
/// The most bytes of a server's last stderr line said when it exits.
const MOST_SAID: usize = 300;

/// How to start one server.
pub struct Start {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The workspace root it serves, its directory.
    pub root: PathBuf,
    pub policy: Arc<ProcessPolicy>,
    pub roots: Vec<PathBuf>,
    pub rejected: Vec<Vec<String>>,
    /// The session's rules as they change, followed by the server's exec gate.
    pub rulebook: Option<Arc<crate::process::Rulebook>>,
}

/// What the server's task is asked.
pub enum Ask {
    /// The document `uri` holds `text` now; `reply`, when given, gets its diagnostics.
    Sync { uri: String, text: String, reply: Option<oneshot::Sender<Reported>> },
    /// Shut down, then answer.
    Close(oneshot::Sender<()>),
}

/// A server's answer about one document.
#[derive(Debug)]
pub enum Reported {
    /// Its errors and warnings.
    Found(Vec<Diagnostic>),
    /// The server is gone for the session: why, as "exited (…)".
    Gone(String),
}

/// What the reader of the server's stdout passes on.
enum Incoming {
    Message(Value),
    /// Not LSP: why.
    Broken(String),
    Ended,
}

/// One document as the server has it.
struct Doc {
    version: i64,
    /// The text last sent, hashed.
    hash: u64,
    /// The diagnostics published for `version`, once they are.
    published: Option<Vec<Diagnostic>>,
}

/// Starts the task owning the server; it starts the process at once.
pub fn spawn(start: Start) -> mpsc::UnboundedSender<Ask> {
    let (asks, rx) = mpsc::unbounded_channel();
    tokio::spawn(own(start, rx));
    asks
}

async fn own(start: Start, mut asks: mpsc::UnboundedReceiver<Ask>) {
    let why = match Server::start(&start).await {
        Ok(mut server) => {
            let why = server.serve(&mut asks).await;
            server.local.stop().await;
            why
        }
        Err(why) => Some(why),
    };
    // Gone: every later ask hears why, until the session lets go.
    let Some(why) = why else { return };
    while let Some(ask) = asks.recv().await {
        match ask {
            Ask::Sync { reply, .. } => {
                if let Some(reply) = reply {
                    let _ = reply.send(Reported::Gone(why.clone()));
                }
            }
            Ask::Close(done) => {
                let _ = done.send(());
                return;
            }
        }
    }
}

struct Server {
    local: Local,
    stdin: ChildStdin,
    incoming: mpsc::Receiver<Incoming>,
    stderr: watch::Receiver<String>,
    root: String,
    next_id: i64,
    /// The id of `initialize` until it is answered.
    initializing: Option<i64>,
    /// Whether the server answers `textDocument/diagnostic` (LSP 3.17's pull): a server that
    /// publishes only what changed (rust-analyzer) is asked after each change.
    pull: bool,
    /// The `textDocument/diagnostic` requests in flight: the document and its version.
    pulls: HashMap<i64, (String, i64)>,
    /// The server said it is still loading (rust-analyzer's `experimental/serverStatus` not
    /// quiescent): what it answers a pull now is not its analysis, and the documents waited
    /// for are asked again once it says it is done.
    loading: bool,
    /// Asks that came before `initialize` was answered.
    queued: Vec<Ask>,
    docs: HashMap<String, Doc>,
    waiting: Vec<(String, oneshot::Sender<Reported>)>,
}

impl Server {
    async fn start(start: &Start) -> Result<Self, String> {
        let args: Vec<&OsStr> = start.args.iter().map(OsStr::new).collect();
        let confinement = Confinement {
            roots: &start.roots,
            rejected: &start.rejected,
            rules: start.rulebook.as_deref().map(crate::process::Rulebook::path),
        };
        let mut local = start
            .policy
            .spawn_server(start.program.as_os_str(), &args, &[], &start.root, confinement)
            .await
            .map_err(|err| format!("could not be started ({err})"))?;
        let (Some(stdin), Some(stdout), Some(stderr)) = (local.take_stdin(), local.take_stdout(), local.take_stderr())
        else {
            local.stop().await;
            return Err("could not be started (no pipes)".to_owned());
        };
        // One message waits while the next is read: each may be up to 16 MiB of JSON, several
        // times that as a `Value`, so a server flooding large messages holds little memory.
        let (tx, incoming) = mpsc::channel(1);
        tokio::spawn(async move {
            let mut stdout = BufReader::new(stdout);
            loop {
                let next = match framing::read(&mut stdout).await {
                    Ok(Some(message)) => Incoming::Message(message),
                    Ok(None) => Incoming::Ended,
                    Err(framing::FrameError::Io(_)) => Incoming::Ended,
                    Err(err) => Incoming::Broken(err.to_string()),
                };
                let last = !matches!(next, Incoming::Message(_));
                if tx.send(next).await.is_err() || last {
                    return;
                }
            }
        });
        let (said, stderr_rx) = watch::channel(String::new());
        tokio::spawn(first_and_last(stderr, said));
        let root = super::uri(&start.root);
        let mut server = Server {
            local,
            stdin,
            incoming,
            stderr: stderr_rx,
            root,
            next_id: 1,
            initializing: None,
            pull: false,
            pulls: HashMap::new(),
            loading: false,
            queued: Vec::new(),
            docs: HashMap::new(),
            waiting: Vec::new(),
        };
        let name = start.root.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let params = json!({
            "processId": null,
            "clientInfo": {"name": "cairn", "version": env!("CARGO_PKG_VERSION")},
            "rootUri": server.root,
            "rootPath": start.root,
            "workspaceFolders": [{"uri": server.root, "name": name}],
            "capabilities": {
                "textDocument": {
                    "synchronization": {"didSave": true, "dynamicRegistration": false},
                    "publishDiagnostics": {"relatedInformation": false, "versionSupport": true},
                    "diagnostic": {"dynamicRegistration": false, "relatedDocumentSupport": false},
                },
                "workspace": {"configuration": true, "workspaceFolders": true},
                "window": {"workDoneProgress": true},
                "experimental": {"serverStatusNotification": true},
            },
        });
        let id = server.request("initialize", params).await?;
        server.initializing = Some(id);
        Ok(server)
    }

    /// Serves until the server is gone (`Some(why)`), or closed or let go (`None`).
    async fn serve(&mut self, asks: &mut mpsc::UnboundedReceiver<Ask>) -> Option<String> {
        let why = loop {
            let step = tokio::select! {
                ask = asks.recv() => match ask {
                    None => return None,
                    Some(Ask::Close(done)) => {
                        self.shut().await;
                        let _ = done.send(());
                        return None;
                    }
                    Some(ask) if self.initializing.is_some() => {
                        self.queued.push(ask);
                        Ok(())
                    }
                    Some(Ask::Sync { uri, text, reply }) => self.sync(uri, &text, reply).await,
                },
                incoming = self.incoming.recv() => match incoming {
                    Some(Incoming::Message(message)) => self.take(message).await,
                    Some(Incoming::Broken(why)) => Err(format!("sent what is not LSP: {why}")),
                    Some(Incoming::Ended) | None => Err(self.ended().await),
                },
            };
            if let Err(why) = step {
                break why;
            }
        };
        for (_, reply) in self.waiting.drain(..) {
            let _ = reply.send(Reported::Gone(why.clone()));
        }
        for ask in self.queued.drain(..) {
            match ask {
                Ask::Sync { reply: Some(reply), .. } => drop(reply.send(Reported::Gone(why.clone()))),
                Ask::Sync { reply: None, .. } => {}
                Ask::Close(done) => drop(done.send(())),
            }
        }
        Some(why)
    }

    /// Sends the document's text if the server does not have it, and waits for its diagnostics.
    async fn sync(&mut self, uri: String, text: &str, reply: Option<oneshot::Sender<Reported>>) -> Result<(), String> {
        self.waiting.retain(|(_, reply)| !reply.is_closed());
        let hash = {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            text.hash(&mut hasher);
            hasher.finish()
        };
        match self.docs.get_mut(&uri) {
            Some(doc) if doc.hash == hash => {
                // What a server that offers pull said is what it said then: another file's change
                // may have changed it since, so it is asked again (one round trip). A server that
                // publishes publishes such a change itself.
                if let Some(published) = doc.published.as_ref().filter(|_| !self.pull) {
                    if let Some(reply) = reply {
                        let _ = reply.send(Reported::Found(published.clone()));
                    }
                    return Ok(());
                }
            }
            Some(doc) => {
                doc.version += 1;
                doc.hash = hash;
                doc.published = None;
                let (version, document) = (doc.version, json!({"uri": uri, "version": doc.version}));
                let changes = json!([{"text": text}]);
                self.notify("textDocument/didChange", json!({"textDocument": document, "contentChanges": changes}))
                    .await?;
                self.notify("textDocument/didSave", json!({"textDocument": {"uri": uri}})).await?;
                tracing::debug!(%uri, version, "sent a document's change to its language server");
            }
            None => {
                self.docs.insert(uri.clone(), Doc { version: 1, hash, published: None });
                let document = json!({"uri": uri, "languageId": language(&uri), "version": 1, "text": text});
                self.notify("textDocument/didOpen", json!({"textDocument": document})).await?;
            }
        }
        if let Some(reply) = reply {
            if self.pull && !self.loading {
                self.ask_for(&uri).await?;
            }
            self.waiting.push((uri, reply));
        }
        Ok(())
    }

    /// Pulls a document's diagnostics.
    async fn ask_for(&mut self, uri: &str) -> Result<(), String> {
        let version = self.docs.get(uri).map_or(0, |doc| doc.version);
        let id = self.request("textDocument/diagnostic", json!({"textDocument": {"uri": uri}})).await?;
        self.pulls.insert(id, (uri.to_owned(), version));
        Ok(())
    }

    /// Takes one message of the server's.
    async fn take(&mut self, message: Value) -> Result<(), String> {
        let method = message.get("method").and_then(Value::as_str);
        match (message.get("id"), method) {
            (Some(id), Some(method)) => self.answer(id.clone(), method, &message["params"]).await,
            (Some(id), None) => {
                if let Some((uri, version)) = id.as_i64().and_then(|id| self.pulls.remove(&id)) {
                    // A report other than a full one (an error while the server loads, say)
                    // leaves the wait to a publish, or to the wait's bound.
                    let result = &message["result"];
                    if result["kind"] == "full" && !self.loading {
                        self.found(uri, Some(version), &result["items"]);
                    }
                    return Ok(());
                }
                if self.initializing.is_some() && id.as_i64() == self.initializing {
                    if let Some(error) = message.get("error") {
                        let said = error["message"].as_str().unwrap_or("no message");
                        return Err(format!("refused to initialize ({})", super::super::cut(said, MOST_SAID)));
                    }
                    self.initializing = None;
                    self.pull = message["result"]["capabilities"]["diagnosticProvider"].is_object();
                    self.notify("initialized", json!({})).await?;
                    for ask in std::mem::take(&mut self.queued) {
                        match ask {
                            Ask::Sync { uri, text, reply } => self.sync(uri, &text, reply).await?,
                            Ask::Close(done) => drop(done.send(())),
                        }
                    }
                }
                Ok(())
            }
            (None, Some("textDocument/publishDiagnostics")) => {
                let params = &message["params"];
                if let Some(uri) = params["uri"].as_str().map(same_uri) {
                    self.found(uri, params["version"].as_i64(), &params["diagnostics"]);
                }
                Ok(())
            }
            (None, Some("experimental/serverStatus")) => {
                let was = std::mem::replace(&mut self.loading, message["params"]["quiescent"] == false);
                if was && !self.loading && self.pull {
                    let mut waited: Vec<String> = self.waiting.iter().map(|(uri, _)| uri.clone()).collect();
                    waited.dedup();
                    for uri in waited {
                        self.ask_for(&uri).await?;
                    }
                }
                Ok(())
            }
            (None, Some(_) | None) => Ok(()),
        }
    }

    /// The diagnostics of a document, published or pulled (of `version`, when known): kept for
    /// it and given to whoever waits for it, unless they are of an older version.
    fn found(&mut self, uri: String, version: Option<i64>, items: &Value) {
        let Some(doc) = self.docs.get_mut(&uri) else { return };
        if version.is_some_and(|version| version < doc.version) {
            return;
        }
        let found: Vec<Diagnostic> =
            items.as_array().map(|all| all.iter().filter_map(diagnostic).take(MOST_KEPT).collect()).unwrap_or_default();
        for (_, reply) in self.waiting.extract_if(.., |(waits, _)| *waits == uri) {
            let _ = reply.send(Reported::Found(found.clone()));
        }
        doc.published = Some(found);
    }

    /// Answers a request of the server's.
    async fn answer(&mut self, id: Value, method: &str, params: &Value) -> Result<(), String> {
        let result = match method {
            "workspace/configuration" => {
                let asked = params["items"].as_array().map_or(0, Vec::len);
                Ok(Value::Array(vec![Value::Null; asked]))
            }
            "window/workDoneProgress/create"
            | "client/registerCapability"
            | "client/unregisterCapability"
            | "window/showMessageRequest" => Ok(Value::Null),
            _ => Err(json!({"code": -32601, "message": format!("cairn does not handle {method}")})),
        };
        let message = match result {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error}),
        };
        self.send(&message).await
    }

    async fn request(&mut self, method: &str, params: Value) -> Result<i64, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await?;
        Ok(id)
    }

    async fn notify(&mut self, method: &str, params: Value) -> Result<(), String> {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params})).await
    }

    async fn send(&mut self, message: &Value) -> Result<(), String> {
        match tokio::time::timeout(WRITE_BOUND, framing::write(&mut self.stdin, message)).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(_)) => Err(self.ended().await),
            Err(_) => Err(format!("did not read its input within {} s", WRITE_BOUND.as_secs())),
        }
    }

    /// Why a server whose output ended is gone: its exit status and what it said on stderr.
    async fn ended(&mut self) -> String {
        let status = tokio::time::timeout(CLOSE_STEP, self.local.wait()).await;
        let status = match status {
            Ok(Ok(status)) => status.to_string(),
            Ok(Err(_)) | Err(_) => "its output closed".to_owned(),
        };
        // Its last words come through another pipe, read by another task: wait until that pipe
        // has ended (its reader then lets go of the sender), not for a moment that a loaded
        // machine may not give it.
        let mut said = self.stderr.clone();
        let _ = tokio::time::timeout(CLOSE_STEP, async { while said.changed().await.is_ok() {} }).await;
        let said = said.borrow().clone();
        if said.is_empty() { format!("exited ({status})") } else { format!("exited ({status}: {said})") }
    }

    /// `shutdown`, then `exit`, each given [`CLOSE_STEP`]; the caller kills what is left.
    async fn shut(&mut self) {
        let Ok(id) = self.request("shutdown", Value::Null).await else { return };
        let answered = tokio::time::timeout(CLOSE_STEP, async {
            while let Some(Incoming::Message(message)) = self.incoming.recv().await {
                if message.get("method").is_none() && message["id"].as_i64() == Some(id) {
                    return true;
                }
            }
            false
        })
        .await;
        if matches!(answered, Ok(true)) && self.notify("exit", Value::Null).await.is_ok() {
            let _ = tokio::time::timeout(CLOSE_STEP, self.local.wait()).await;
        }
    }
}

/// Keeps the first and the last line of a server's stderr that are not blank, each cut at
/// [`MOST_SAID`] bytes, as "first … last": a program that cannot start says why first, a
/// crash last.
async fn first_and_last(mut stderr: tokio::process::ChildStderr, said: watch::Sender<String>) {
    let mut buf = vec![0u8; 8192];
    let mut line = Vec::new();
    let mut first = None;
    loop {
        let n = match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        for byte in &buf[..n] {
            if *byte == b'\n' {
                keep(&mut line, &mut first, &said);
            } else if line.len() < MOST_SAID * 4 {
                line.push(*byte);
            }
        }
    }
    keep(&mut line, &mut first, &said);
}

fn keep(line: &mut Vec<u8>, first: &mut Option<String>, said: &watch::Sender<String>) {
    let text = String::from_utf8_lossy(line);
    let text = super::super::cut(text.trim(), MOST_SAID).to_owned();
    line.clear();
    if text.is_empty() {
        return;
    }
    match first {
        None => {
            said.send_replace(text.clone());
            *first = Some(text);
        }
        Some(first) => {
            said.send_replace(format!("{first} … {text}"));
        }
    }
}
