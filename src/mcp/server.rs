//! One server's actor: it owns the connection (and, for a stdio server, the process), starts
//! it, lends calls a handle to the live connection, notices when it ends, restarts it for the
//! next call (at most [`MAX_RESTARTS`] times a session), refreshes its tools when the server
//! says they changed, and closes it when the session's servers stop. Its state goes to the
//! [`Board`]; calls run on the caller's task, so they never wait for one another.

use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, ClientRequest, Implementation, ListToolsRequest, PaginatedRequestParams,
};
use rmcp::service::{ClientInitializeError, NotificationContext, Peer, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpError;
use rmcp::{ClientHandler, RoleClient, ServiceExt as _};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::board::{Board, ServerState};
use super::config::{ServerConfig, Transport};
use super::content::{McpTool, read_tools};
use super::http;
use super::stdio::{Process, describe};

/// How many times a server that stopped is started again in one session.
pub const MAX_RESTARTS: u32 = 3;
/// How long a server that closed its end gets to exit (and finish its stderr) before its group
/// is killed; also what a server gets after cairn closes its stdin at shutdown.
const SETTLE: Duration = Duration::from_millis(500);
/// At most this many pages of `tools/list`.
const MAX_PAGES: usize = 100;
/// A notice about tools left out gives at most this many reasons (and the last one).
const REASONS_TOLD: usize = 10;

/// What every server of a session is started with.
pub(super) struct Launch {
    pub sandbox: super::Sandbox,
    pub startup_timeout: Duration,
    /// Resolves when the servers may start (see `Servers::start_after`).
    pub begin: futures::future::Shared<futures::future::BoxFuture<'static, ()>>,
}

/// What callers ask of the actor.
pub(super) enum Request {
    /// A handle to the live connection, restarting the server if it may be.
    Acquire(oneshot::Sender<Result<Connection, String>>),
    /// A call on connection `generation` found it closed; the answer says how it ended.
    Lost { generation: u64, reply: oneshot::Sender<String> },
}

/// A live connection, lent to one call.
#[derive(Clone)]
pub(super) struct Connection {
    pub peer: Peer<RoleClient>,
    pub generation: u64,
}

/// Starts the actor of server `index`; it runs until `stop` is cancelled.
pub(super) fn spawn(
    index: usize,
    config: ServerConfig,
    launch: std::sync::Arc<Launch>,
    board: Board,
    stop: CancellationToken,
) -> mpsc::Sender<Request> {
    let (requests_tx, requests) = mpsc::channel(64);
    let actor = Actor {
        index,
        config,
        launch,
        board,
        stop,
        requests,
        restarts: 0,
        generation: 0,
        tools: Vec::new(),
        failed: None,
    };
    tokio::spawn(actor.run());
    requests_tx
}

/// Why a start failed.
struct Failure {
    why: String,
    stderr: String,
}

/// A started connection.
struct Live {
    generation: u64,
    peer: Peer<RoleClient>,
    /// Ends the connection (and closes a stdio server's stdin).
    ct: CancellationToken,
    /// Cancelled when the connection's loop ended, for any reason.
    quit: CancellationToken,
    /// The server said its tools changed.
    changed: mpsc::Receiver<()>,
    process: Option<Process>,
}

enum Event {
    Quit,
    Changed,
}

impl Live {
    async fn next_event(&mut self) -> Event {
        tokio::select! {
            () = self.quit.cancelled() => Event::Quit,
            Some(()) = self.changed.recv() => Event::Changed,
        }
    }

    /// Ends the connection: a stdio server's stdin is closed and it gets [`SETTLE`] to exit
    /// before its group is killed. Returns how it ended and its stderr tail.
    async fn close(mut self) -> (Option<String>, String) {
        self.ct.cancel();
        let _ = tokio::time::timeout(SETTLE, self.quit.cancelled()).await;
        let Some(process) = self.process.as_mut() else { return (None, String::new()) };
        let status = process.settle(SETTLE).await;
        process.kill().await;
        (status.map(describe), process.stderr_tail())
    }
}

async fn next_event(live: &mut Option<Live>) -> Event {
    match live {
        Some(live) => live.next_event().await,
        None => std::future::pending().await,
    }
}

struct Actor {
    index: usize,
    config: ServerConfig,
    launch: std::sync::Arc<Launch>,
    board: Board,
    stop: CancellationToken,
    requests: mpsc::Receiver<Request>,
    restarts: u32,
    generation: u64,
    /// The tools last listed.
    tools: Vec<McpTool>,
    /// Why it is not running, and whether a call may restart it.
    failed: Option<(String, bool)>,
}

impl Actor {
    async fn run(mut self) {
        tokio::select! {
            biased;
            () = self.stop.cancelled() => return,
            () = self.launch.begin.clone() => {}
        }
        let mut live = match self.start().await {
            Ok(live) => Some(live),
            Err(_) if self.stop.is_cancelled() => None,
            Err(failure) => {
                self.board.notice(&self.config.name, self.told("failed to start", &failure));
                self.publish_failure(failure, false);
                None
            }
        };
        // How the last connection ended, by generation, for calls that find it closed.
        let mut ended: Option<(u64, String)> = None;
        loop {
            tokio::select! {
                biased;
                () = self.stop.cancelled() => break,
                request = self.requests.recv() => match request {
                    None => break,
                    Some(Request::Acquire(reply)) => {
                        if live.is_none() && self.may_restart() {
                            live = self.restart().await;
                        }
                        let answer = match &live {
                            Some(live) => Ok(Connection { peer: live.peer.clone(), generation: live.generation }),
                            None => Err(self.unavailable()),
                        };
                        let _ = reply.send(answer);
                    }
                    Some(Request::Lost { generation, reply }) => {
                        if let Some(current) = live.take_if(|live| live.generation == generation) {
                            ended = Some((generation, self.lost(current).await));
                        }
                        let why = match &ended {
                            Some((when, why)) if *when == generation => why.clone(),
                            _ => "the connection was closed".to_owned(),
                        };
                        let _ = reply.send(why);
                    }
                },
                event = next_event(&mut live) => match event {
                    Event::Quit => {
                        if let Some(current) = live.take() {
                            let generation = current.generation;
                            ended = Some((generation, self.lost(current).await));
                        }
                    }
                    Event::Changed => {
                        if let Some(current) = &live {
                            self.refresh(&current.peer.clone()).await;
                        }
                    }
                },
            }
        }
        if let Some(current) = live.take() {
            current.close().await;
        }
        self.board.set(self.index, ServerState::Stopped, self.restarts, None);
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    fn may_restart(&self) -> bool {
        self.failed.as_ref().is_some_and(|(_, retry)| *retry)
    }

    fn unavailable(&self) -> String {
        self.failed.as_ref().map_or_else(|| "it is not running".to_owned(), |(why, _)| why.clone())
    }

    /// The first start, raced against the session's end.
    async fn start(&mut self) -> Result<Live, Failure> {
        self.board.set(self.index, ServerState::Starting, self.restarts, None);
        let stop = self.stop.clone();
        let live = tokio::select! {
            started = self.connect() => started?,
            () = stop.cancelled() => return Err(Failure { why: "the session ended".to_owned(), stderr: String::new() }),
        };
        self.failed = None;
        self.board.set(
            self.index,
            ServerState::Ready { tools: self.tools.len() },
            self.restarts,
            Some(self.tools.clone()),
        );
        Ok(live)
    }

    async fn restart(&mut self) -> Option<Live> {
        self.restarts += 1;
        tracing::info!(server = self.name(), restart = self.restarts, "restarting MCP server");
        match self.start().await {
            Ok(live) => Some(live),
            Err(mut failure) => {
                failure.why = format!("restart {} of {MAX_RESTARTS} failed: {}", self.restarts, failure.why);
                let retry = self.restarts < MAX_RESTARTS;
                if !retry {
                    failure.why.push_str("; that was the last restart this session");
                }
                self.board.notice(&self.config.name, self.told("could not be restarted", &failure));
                self.publish_failure(failure, retry);
                None
            }
        }
    }

    /// The connection ended by itself: records why, and whether a call may restart it.
    async fn lost(&mut self, live: Live) -> String {
        let is_stdio = live.process.is_some();
        let (status, stderr) = live.close().await;
        let what = match (status, is_stdio) {
            (Some(status), _) => format!("it {status}"),
            (None, true) => "it closed its stdout".to_owned(),
            (None, false) => "the connection was lost".to_owned(),
        };
        let retry = self.restarts < MAX_RESTARTS;
        let why = if retry {
            format!("{what}; the next call restarts it ({} of {MAX_RESTARTS} restarts used)", self.restarts)
        } else {
            format!(
                "{what}; it was restarted {MAX_RESTARTS} times, the most in one session, so it stays stopped until the session ends"
            )
        };
        let failure = Failure { why: why.clone(), stderr: stderr.clone() };
        self.board.notice(&self.config.name, self.told("stopped", &failure));
        self.publish_failure(failure, retry);
        with_stderr(why, &stderr)
    }

    fn publish_failure(&mut self, failure: Failure, retry: bool) {
        self.failed = Some((failure.why.clone(), retry));
        let state = ServerState::Failed { why: failure.why, stderr: failure.stderr, restarts_on_call: retry };
        self.board.set(self.index, state, self.restarts, None);
    }

    fn told(&self, what: &str, failure: &Failure) -> String {
        with_stderr(format!("MCP server `{}` {what}: {}", self.name(), failure.why), &failure.stderr)
    }

    /// Lists the tools again; stopping the session's servers abandons it.
    async fn refresh(&mut self, peer: &Peer<RoleClient>) {
        let stop = self.stop.clone();
        let listed = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            listed = tokio::time::timeout(self.launch.startup_timeout, list_tools(self.name(), peer)) => listed,
        };
        match listed {
            Ok(Ok((tools, skipped))) => {
                self.skipped(&skipped);
                self.tools = tools;
                let state = ServerState::Ready { tools: self.tools.len() };
                self.board.set(self.index, state, self.restarts, Some(self.tools.clone()));
            }
            Ok(Err(why)) => tracing::warn!(server = self.name(), "{why}"),
            Err(_) => tracing::warn!(server = self.name(), "listing its changed tools timed out"),
        }
    }

    /// Tells why tools were left out: the first [`REASONS_TOLD`] reasons and how many more.
    fn skipped(&self, skipped: &[String]) {
        if skipped.is_empty() {
            return;
        }
        let mut told = skipped.iter().take(REASONS_TOLD).cloned().collect::<Vec<_>>().join("; ");
        if let Some(more) = skipped.len().checked_sub(REASONS_TOLD).filter(|more| *more > 0) {
            told.push_str(&format!("; and {more} more"));
            if let Some(last) = skipped.last() {
                told.push_str(&format!(", the last: {last}"));
            }
        }
        self.board.notice(self.name(), format!("MCP server `{}`: {told}", self.name()));
    }

    /// Starts the server and lists its tools, within the startup timeout.
    async fn connect(&mut self) -> Result<Live, Failure> {
        self.generation += 1;
        let ct = self.stop.child_token();
        let (changed_tx, changed) = mpsc::channel(1);
        let handler = Handler { changed: changed_tx };
        let timeout = self.launch.startup_timeout;
        let name = self.config.name.clone();
        let waited = format!("it did not finish the MCP handshake and tool list within {} s", timeout.as_secs_f64());
        let (service, listed, process) = match &self.config.transport {
            Transport::Stdio { command, args, env, sandboxed } => 'stdio: {
                let (mut process, pipes) = Process::spawn(&name, command, args, env, &self.launch.sandbox, *sandboxed)
                    .map_err(|why| Failure { why, stderr: String::new() })?;
                // A line over the limit is dropped unread, and the answer it held never comes:
                // that fails the start at once rather than at the timeout.
                let long_line = process.long_line();
                let handshake = tokio::time::timeout(timeout, handshake(&name, handler, pipes, ct.clone()));
                tokio::pin!(handshake);
                let started = tokio::select! {
                    started = &mut handshake => started.map_err(|_| waited),
                    () = long_line => {
                        // Polled on, the connection reads (and drops) the rest of the line, whose
                        // size is then told.
                        let told = process.long_line_told(SETTLE);
                        tokio::pin!(told);
                        tokio::select! {
                            why = &mut told => Err(why),
                            _ = &mut handshake => Err(told.await),
                        }
                    }
                };
                let mut why = match started {
                    Ok(Ok((service, listed))) => break 'stdio (service, listed, Some(process)),
                    Ok(Err(why)) => match process.settle(SETTLE).await {
                        Some(status) => format!("it {} before it finished the MCP handshake", describe(status)),
                        None => why,
                    },
                    Err(why) => why,
                };
                process.kill().await;
                if let Some(line) = process.garbage() {
                    why.push_str(&format!("; it wrote to stdout what is not JSON-RPC: `{line}`"));
                }
                let stderr = process.stderr_tail();
                if *sandboxed && crate::process::ProcessPolicy::reads_as_refused(&stderr) {
                    why.push_str(&format!(
                        "; it ran in cairn's sandbox, which lets it write only the workspace, the temp dirs and \
                         [sandbox] writable: add the directory it needs (a cache such as ~/.npm) there, or set \
                         sandbox = false in [mcp_servers.{name}]"
                    ));
                }
                return Err(Failure { why, stderr });
            }
            Transport::Http { url, headers } => {
                let transport = http::transport(url, headers).map_err(|why| Failure { why, stderr: String::new() })?;
                match tokio::time::timeout(timeout, handshake(&name, handler, transport, ct.clone())).await {
                    Ok(Ok((service, listed))) => (service, listed, None),
                    Ok(Err(why)) => return Err(Failure { why, stderr: String::new() }),
                    Err(_) => return Err(Failure { why: waited, stderr: String::new() }),
                }
            }
        };
        let (tools, skipped) = listed;
        self.skipped(&skipped);
        self.tools = tools;
        let peer = service.peer().clone();
        let quit = CancellationToken::new();
        let ended = quit.clone();
        tokio::spawn(async move {
            let _ = service.waiting().await;
            ended.cancel();
        });
        Ok(Live { generation: self.generation, peer, ct, quit, changed, process })
    }
}

type Service = RunningService<RoleClient, Handler>;

/// The MCP handshake over `transport`, then the tool list.
async fn handshake<T, E, A>(
    name: &str,
    handler: Handler,
    transport: T,
    ct: CancellationToken,
) -> Result<(Service, (Vec<McpTool>, Vec<String>)), String>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let service = handler.serve_with_ct(transport, ct).await.map_err(|err| {
        let why = match &err {
            ClientInitializeError::TransportError { error, .. } => chain(error.error.as_ref()),
            other => chain(other),
        };
        format!("the MCP handshake failed: {why}")
    })?;
    let offers_tools = service.peer().peer_info().is_none_or(|info| info.capabilities.tools.is_some());
    let listed = if offers_tools { list_tools(name, service.peer()).await? } else { (Vec::new(), Vec::new()) };
    Ok((service, listed))
}

/// Every page of `tools/list`, read leniently: a tool that cannot be offered is left out with
/// a reason instead of failing the list.
async fn list_tools(name: &str, peer: &Peer<RoleClient>) -> Result<(Vec<McpTool>, Vec<String>), String> {
    let (mut tools, mut skipped) = (Vec::new(), Vec::new());
    let mut cursor = None;
    for _ in 0..MAX_PAGES {
        let params = PaginatedRequestParams::default().with_cursor(cursor.take());
        let request = ClientRequest::ListToolsRequest(ListToolsRequest::with_param(params));
        let result = peer.send_request(request).await.map_err(|err| format!("listing its tools failed: {err}"))?;
        let page = serde_json::to_value(&result).map_err(|err| format!("its tool list cannot be read: {err}"))?;
        let full = read_tools(name, &page, &mut tools, &mut skipped);
        cursor = page.get("nextCursor").and_then(serde_json::Value::as_str).map(str::to_owned);
        if full || cursor.is_none() {
            break;
        }
    }
    Ok((tools, skipped))
}

/// An error and its sources, each said once.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(err) = next {
        let text = err.to_string();
        let text = text.trim_end_matches([':', ' ']);
        if !parts.last().is_some_and(|last| last.contains(text)) {
            parts.push(text.to_owned());
        }
        // The HTTP transport's client errors do not give their cause as a source.
        next = match err.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
            Some(StreamableHttpError::Client(inner)) => Some(inner),
            _ => err.source(),
        };
    }
    parts.join(": ")
}

fn with_stderr(text: String, stderr: &str) -> String {
    if stderr.is_empty() { text } else { format!("{text}\nIts stderr ends with:\n{stderr}") }
}

/// cairn's side of a connection: it says who it is and hears that the tools changed.
struct Handler {
    changed: mpsc::Sender<()>,
}

impl ClientHandler for Handler {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.changed.try_send(());
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(ClientCapabilities::default(), Implementation::new("cairn", env!("CARGO_PKG_VERSION")))
    }
}
