//! One server's actor: it owns the connection (and, for a stdio server, the process), starts
//! it, lends calls a handle to the live connection, notices when it ends, restarts it for the
//! next call (at most [`MAX_RESTARTS`] times a session), refreshes its tools when the server
//! says they changed, and closes it when the session's servers stop. Its state goes to the
//! [`Board`]; calls run on the caller's task, so they never wait for one another.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::board::{Board, ServerState};
use super::config::{ServerConfig, Transport};
use super::content::McpTool;
use super::rpc::Client;
use super::stdio::{Process, describe};
use super::{http, lines, protocol, rpc};

/// How many times a server that stopped is started again in one session.
pub const MAX_RESTARTS: u32 = 3;
/// How long a server that closed its end gets to exit (and finish its stderr) before its group
/// is killed; also what a server gets after cairn closes its stdin at shutdown.
const SETTLE: Duration = Duration::from_millis(500);
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
    /// A call on connection `generation` found it closed (or its transport failed, `cause`);
    /// the answer says how it ended.
    Lost { generation: u64, cause: Option<String>, reply: oneshot::Sender<String> },
}

/// A live connection, lent to one call.
#[derive(Clone)]
pub(super) struct Connection {
    pub client: Client,
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
    client: Client,
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
                            Some(live) => Ok(Connection { client: live.client.clone(), generation: live.generation }),
                            None => Err(self.unavailable()),
                        };
                        let _ = reply.send(answer);
                    }
                    Some(Request::Lost { generation, cause, reply }) => {
                        if let Some(current) = live.take_if(|live| live.generation == generation) {
                            ended = Some((generation, self.lost(current, cause).await));
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
                            ended = Some((generation, self.lost(current, None).await));
                        }
                    }
                    Event::Changed => {
                        if let Some(current) = &live {
                            self.refresh(&current.client.clone()).await;
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
    async fn lost(&mut self, live: Live, cause: Option<String>) -> String {
        let is_stdio = live.process.is_some();
        let (status, stderr) = live.close().await;
        let what = match (status, is_stdio, cause) {
            (Some(status), _, _) => format!("it {status}"),
            (None, true, _) => "it closed its stdout".to_owned(),
            (None, false, Some(cause)) => format!("the connection was lost: {cause}"),
            (None, false, None) => "the connection was lost".to_owned(),
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
    async fn refresh(&mut self, client: &Client) {
        let stop = self.stop.clone();
        let listed = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            listed = tokio::time::timeout(self.launch.startup_timeout, protocol::list_tools(self.name(), client)) => listed,
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
        let timeout = self.launch.startup_timeout;
        let name = self.config.name.clone();
        let waited = format!("it did not finish the MCP handshake and tool list within {} s", timeout.as_secs_f64());
        let (client, listed, process) = match &self.config.transport {
            Transport::Stdio { command, args, env, sandboxed } => 'stdio: {
                let (mut process, (stdout, stdin)) =
                    Process::spawn(&name, command, args, env, &self.launch.sandbox, *sandboxed)
                        .await
                        .map_err(|why| Failure { why, stderr: String::new() })?;
                let client = rpc::start(&name, lines::link(&name, stdout, stdin), changed_tx, ct.clone());
                // A line over the limit is dropped unread, and the answer it held never comes:
                // that fails the start at once rather than at the timeout.
                let long_line = process.long_line();
                let handshake = tokio::time::timeout(timeout, protocol::start(&name, &client));
                tokio::pin!(handshake);
                let started = tokio::select! {
                    started = &mut handshake => started.map_err(|_| waited),
                    () = long_line => {
                        // The connection's reader goes on dropping the rest of the line, whose
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
                    Ok(Ok(listed)) => break 'stdio (client.clone(), listed, Some(process)),
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
                let link = http::link(&name, url, headers).map_err(|why| Failure { why, stderr: String::new() })?;
                let client = rpc::start(&name, link, changed_tx, ct.clone());
                match tokio::time::timeout(timeout, protocol::start(&name, &client)).await {
                    Ok(Ok(listed)) => (client, listed, None),
                    Ok(Err(why)) => return Err(Failure { why, stderr: String::new() }),
                    Err(_) => return Err(Failure { why: waited, stderr: String::new() }),
                }
            }
        };
        let (tools, skipped) = listed;
        self.skipped(&skipped);
        self.tools = tools;
        let quit = client.ended();
        Ok(Live { generation: self.generation, client, ct, quit, changed, process })
    }
}

fn with_stderr(text: String, stderr: &str) -> String {
    if stderr.is_empty() { text } else { format!("{text}\nIts stderr ends with:\n{stderr}") }
}
