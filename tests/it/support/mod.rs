//! Test support: the real `cairn` binary driven over pipes, against a mock model server.
//!
//! [`TestEnv`] owns a temporary home (database, config, workspace) and a [`MockLlm`];
//! [`Agent`] is one `cairn` process speaking ACP on its stdin/stdout. Every stdout line must be
//! JSON: anything else fails the test, because stdout is the protocol.

pub mod collector;
pub mod dialects;
pub mod editor;
pub mod mock_llm;
pub mod node;
pub mod pages;
pub mod pinned;
pub mod prompt_cache;
pub mod python;
pub mod sdk;
pub mod served;
pub mod streamable;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};

pub use editor::Editor;
pub use mock_llm::{MockLlm, Reply};

/// How long any single expected message may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// A temporary cairn home and a mock model server.
pub struct TestEnv {
    pub dir: tempfile::TempDir,
    pub mock: MockLlm,
    env: Vec<(String, String)>,
}

impl TestEnv {
    pub async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        std::fs::create_dir_all(dir.path().join("config/cairn")).unwrap();
        let mock = MockLlm::start().await;
        Self { dir, mock, env: Vec::new() }
    }

    /// A workspace directory for `cwd`.
    pub fn workspace(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    pub fn cwd(&self) -> String {
        self.workspace().to_string_lossy().into_owned()
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn database(&self) -> PathBuf {
        self.home().join("cairn.db")
    }

    /// Writes `config.toml` where cairn looks for it.
    pub fn write_config(&self, toml: &str) {
        std::fs::write(self.dir.path().join("config/cairn/config.toml"), toml).unwrap();
    }

    /// Writes `toml` as `config.toml`, runs `cairn exec`, and answers its stderr, once the
    /// run failed at start for that file.
    pub async fn refused_config(&self, toml: &str) -> String {
        self.write_config(toml);
        let output = self.command().args(["exec", "hi"]).output().await.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert!(!output.status.success(), "{toml} was taken: {stderr}");
        stderr
    }

    /// Sets (or overrides) one environment variable of the agents started later.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.retain(|(k, _)| k != name);
        self.env.push((name.to_owned(), value.to_owned()));
    }

    /// A `cairn` command with this environment and nothing inherited that could change it.
    pub fn command(&self) -> Command {
        self.with_env(Command::new(env!("CARGO_BIN_EXE_cairn")))
    }

    /// [`Self::command`] started by a shell that first sets this umask.
    pub fn command_with_umask(&self, umask: &str) -> Command {
        let mut shell = Command::new("sh");
        shell.arg("-c").arg(format!("umask {umask} && exec \"$0\" \"$@\"")).arg(env!("CARGO_BIN_EXE_cairn"));
        self.with_env(shell)
    }

    /// `program` looked up in `PATH` as an editor would, with the built `cairn` first in it.
    pub fn command_on_path(&self, program: &str) -> Command {
        let built = std::path::Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap().to_path_buf();
        let path = std::env::join_paths(
            std::iter::once(built).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
        )
        .unwrap();
        let mut command = self.with_env(Command::new(program));
        command.env("PATH", path);
        command
    }

    /// The whole environment the agents get (nothing else is inherited), in the order it is set.
    pub fn agent_env(&self) -> Vec<(String, String)> {
        let path = |p: PathBuf| p.to_string_lossy().into_owned();
        let mut env = vec![
            ("PATH".to_owned(), std::env::var("PATH").unwrap_or_default()),
            ("HOME".to_owned(), path(self.dir.path().to_path_buf())),
            ("XDG_CONFIG_HOME".to_owned(), path(self.dir.path().join("config"))),
            ("XDG_DATA_HOME".to_owned(), path(self.dir.path().join("data"))),
            ("CAIRN_HOME".to_owned(), path(self.home())),
            ("CAIRN_MODEL".to_owned(), "openai/mock-model".to_owned()),
            ("OPENAI_BASE_URL".to_owned(), self.mock.url.clone()),
            ("OPENAI_API_KEY".to_owned(), "sk-test".to_owned()),
            ("CAIRN_LOG".to_owned(), "cairn=debug".to_owned()),
        ];
        for (name, value) in &self.env {
            env.retain(|(known, _)| known != name);
            env.push((name.clone(), value.clone()));
        }
        env
    }

    pub fn with_env(&self, mut command: Command) -> Command {
        command.env_clear().envs(self.agent_env()).current_dir(self.workspace());
        command
    }

    pub async fn spawn(&self) -> Agent {
        Agent::spawn(self.command(), Editor::default()).await
    }

    /// Spawns an agent and initializes it.
    pub async fn ready(&self) -> Agent {
        self.ready_with(Editor::default()).await
    }

    /// Spawns an agent whose client is `editor`, and initializes it with the editor's capabilities.
    pub async fn ready_with(&self, editor: Editor) -> Agent {
        let mut agent = Agent::spawn(self.command(), editor).await;
        agent.initialize().await;
        agent
    }
}

/// One `cairn` process speaking ACP.
pub struct Agent {
    pub child: Child,
    /// The simulated editor answering the agent's requests.
    pub editor: Editor,
    stdin: Option<mpsc::UnboundedSender<Vec<u8>>>,
    lines: mpsc::UnboundedReceiver<Value>,
    /// Whether the agent's stdout is being read (see [`Agent::stop_reading`]).
    reading: watch::Sender<bool>,
    stderr: Arc<Mutex<String>>,
    next_id: i64,
}

impl Agent {
    pub async fn spawn(mut command: Command, editor: Editor) -> Self {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let mut child = command.spawn().expect("spawn cairn");
        let stdout = child.stdout.take().unwrap();
        let stderr_pipe = child.stderr.take().unwrap();
        let mut pipe: ChildStdin = child.stdin.take().unwrap();
        let (stdin, mut to_write) = mpsc::unbounded_channel::<Vec<u8>>();
        tokio::spawn(async move {
            while let Some(bytes) = to_write.recv().await {
                if pipe.write_all(&bytes).await.is_err() || pipe.flush().await.is_err() {
                    break;
                }
            }
        });
        let (tx, lines) = mpsc::unbounded_channel();
        // Weak, so closing the test's stdin really closes the pipe.
        let (serving, reply) = (editor.clone(), stdin.downgrade());
        let (reading, mut read) = watch::channel(true);
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            loop {
                if read.wait_for(|reading| *reading).await.is_err() {
                    break;
                }
                let Ok(Some(line)) = reader.next_line().await else { break };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|err| panic!("stdout carried a non-JSON line ({err}): {line}"));
                if let Some(reply) = reply.upgrade()
                    && serving.handle(&value, &reply)
                {
                    continue;
                }
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        tokio::spawn(async move {
            let mut pipe = stderr_pipe;
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Self { child, editor, stdin: Some(stdin), lines, reading, stderr, next_id: 1 }
    }

    /// Stops reading the agent's stdout, as a client that hangs does: once the pipe (and the
    /// few KiB the reader holds) are full, the agent's writes block.
    pub fn stop_reading(&self) {
        self.reading.send_replace(false);
    }

    /// Reads the agent's stdout again.
    pub fn resume_reading(&self) {
        self.reading.send_replace(true);
    }

    /// What the agent wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Writes one raw line (a newline is added).
    pub async fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_ref().expect("stdin is open");
        stdin.send(format!("{line}\n").into_bytes()).expect("the stdin writer is running");
    }

    /// Writes raw bytes, as they are.
    pub async fn send_bytes(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_ref().expect("stdin is open");
        stdin.send(bytes.to_vec()).expect("the stdin writer is running");
    }

    /// Answers a request the agent sent to the client.
    pub async fn respond(&mut self, id: &Value, result: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "result": result})).await;
    }

    pub async fn send(&mut self, message: Value) {
        self.send_raw(&message.to_string()).await;
    }

    /// Sends a request and returns its id.
    pub async fn request(&mut self, method: &str, params: Value) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})).await;
        id
    }

    pub async fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params})).await;
    }

    /// The next message from the agent.
    pub async fn recv(&mut self) -> Value {
        match tokio::time::timeout(PATIENCE, self.lines.recv()).await {
            Ok(Some(value)) => value,
            Ok(None) => panic!("cairn closed stdout; stderr:\n{}", self.stderr()),
            Err(_) => panic!("no message from cairn within {PATIENCE:?}; stderr:\n{}", self.stderr()),
        }
    }

    /// The next message, if one arrives within `wait`.
    pub async fn try_recv(&mut self, wait: Duration) -> Option<Value> {
        tokio::time::timeout(wait, self.lines.recv()).await.ok().flatten()
    }

    /// Reads until the response to `id`; returns it with the notifications seen on the way.
    pub async fn response(&mut self, id: i64) -> (Value, Vec<Value>) {
        let mut notifications = Vec::new();
        loop {
            let message = self.recv().await;
            if message.get("id") == Some(&json!(id)) && message.get("method").is_none() {
                return (message, notifications);
            }
            notifications.push(message);
        }
    }

    /// Reads until every id in `ids` is answered, whatever the order; returns the responses in
    /// the order of `ids`, and the notifications seen on the way.
    pub async fn responses(&mut self, ids: &[i64]) -> (Vec<Value>, Vec<Value>) {
        let mut answers: Vec<Option<Value>> = vec![None; ids.len()];
        let mut notifications = Vec::new();
        while answers.iter().any(Option::is_none) {
            let message = self.recv().await;
            let slot =
                ids.iter().position(|id| message.get("method").is_none() && message.get("id") == Some(&json!(id)));
            match slot {
                Some(at) => answers[at] = Some(message),
                None => notifications.push(message),
            }
        }
        (answers.into_iter().flatten().collect(), notifications)
    }

    /// Calls a method and returns its result; panics on an error response.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        let (response, _) = self.response(id).await;
        match response.get("result") {
            Some(result) => result.clone(),
            None => panic!("{method} failed: {response}"),
        }
    }

    /// Calls a method expecting an error; returns the error object.
    pub async fn call_err(&mut self, method: &str, params: Value) -> Value {
        let id = self.request(method, params).await;
        let (response, _) = self.response(id).await;
        response.get("error").cloned().unwrap_or_else(|| panic!("{method} should have failed: {response}"))
    }

    pub async fn initialize(&mut self) -> Value {
        let capabilities = self.editor.capabilities();
        self.call("initialize", json!({"protocolVersion": 1, "clientCapabilities": capabilities})).await
    }

    pub async fn new_session(&mut self, cwd: &str) -> String {
        let result = self.call("session/new", json!({"cwd": cwd, "mcpServers": []})).await;
        result["sessionId"].as_str().unwrap().to_owned()
    }

    /// Sends a text prompt and returns the request id.
    pub async fn prompt(&mut self, session: &str, text: &str) -> i64 {
        self.request("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})).await
    }

    /// Reads until the next `agent_message_chunk` and returns its text.
    pub async fn next_chunk(&mut self) -> String {
        loop {
            let message = self.recv().await;
            let update = &message["params"]["update"];
            if update["sessionUpdate"] == "agent_message_chunk" {
                return update["content"]["text"].as_str().unwrap_or_default().to_owned();
            }
        }
    }

    /// Reads on until an agent message chunk says `said` (what a session tells of a prompt it
    /// queued or steered).
    pub async fn until_said(&mut self, said: &str) {
        loop {
            let message = self.recv().await;
            let update = &message["params"]["update"];
            if update["sessionUpdate"] == "agent_message_chunk"
                && update["content"]["text"].as_str().is_some_and(|text| text.contains(said))
            {
                return;
            }
        }
    }

    /// Answers the permission question `question` with "allow once".
    pub async fn allow_once(&mut self, question: &Value) {
        self.respond(&question["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;
    }

    /// Closes stdin, as an editor does when it is done.
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Waits for the process to exit and returns how long that took.
    pub async fn wait_exit(&mut self) -> (std::process::ExitStatus, Duration) {
        let started = std::time::Instant::now();
        let status = tokio::time::timeout(PATIENCE, self.child.wait()).await.expect("cairn did not exit").unwrap();
        (status, started.elapsed())
    }

    pub async fn kill9(&mut self) {
        self.child.start_kill().unwrap();
        let _ = self.child.wait().await;
    }
}

/// The `session/update` payloads among `messages` for one session.
pub fn updates<'a>(messages: &'a [Value], session: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .filter(|m| m["method"] == "session/update" && m["params"]["sessionId"] == session)
        .map(|m| &m["params"]["update"])
        .collect()
}

/// The concatenated text of the updates of one kind (`agent_message_chunk`, …).
pub fn text_of(updates: &[&Value], kind: &str) -> String {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .map(|u| u["content"]["text"].as_str().unwrap_or_default())
        .collect()
}

/// `(messageId, text)` of each message of one kind, chunks joined, in order of first appearance.
pub fn messages_of(updates: &[&Value], kind: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for update in updates.iter().filter(|u| u["sessionUpdate"] == kind) {
        let id = update["messageId"].as_str().unwrap_or_default().to_owned();
        let text = update["content"]["text"].as_str().unwrap_or_default();
        match out.iter_mut().find(|(seen, _)| *seen == id) {
            Some((_, all)) => all.push_str(text),
            None => out.push((id, text.to_owned())),
        }
    }
    out
}

/// The text of each user-role message of a chat completions request, in order.
pub fn user_texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].as_str().map_or_else(|| m["content"].to_string(), str::to_owned))
        .collect()
}

/// Whether the kernel gives cairn what keeps the boundary around commands (Landlock and a
/// namespace); says why not, for the tests that attack it to skip.
pub fn kernel_keeps_it() -> bool {
    let landlock = cairn::process::landlock_support();
    let namespace = cairn::process::namespace_support();
    if !landlock.filesystem || namespace.is_none() {
        println!("skipped: Landlock {landlock:?}, namespace {namespace:?}");
        return false;
    }
    true
}

/// A figure of `/proc/PID/status` in KiB (`field` with its colon: `VmRSS:`, `VmHWM:`); `None`
/// when the process or the field is not there.
pub fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix(field))?.split_whitespace().next()?.parse().ok()
}

/// Whether a process still runs (a zombie awaiting its reaper does not).
pub fn alive(pid: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .is_ok_and(|status| !status.lines().any(|line| line.starts_with("State:") && line.contains('Z')))
}

/// The pids (as the tests see them; a command in its own PID namespace knows them by others) of the processes whose arguments are exactly `args`.
pub fn running_with(args: &[&str]) -> Vec<String> {
    let wanted: Vec<u8> = args.iter().flat_map(|arg| arg.bytes().chain([0])).collect();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str().map(str::to_owned))
        .filter(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        .filter(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|line| line == wanted) && alive(pid))
        .collect()
}

/// Stores a session of `messages` alternating questions and long answers straight through the
/// store (no model), as a benchmark of loading a long session needs; returns its id.
#[allow(dead_code, reason = "used by the benches that share this module")]
pub async fn seed_long_session(env: &TestEnv, messages: usize) -> cairn::ids::SessionId {
    use cairn::history::{Message, MessageMeta, Part, Role};
    use cairn::store::{SessionRow, Store, Write};
    let id = cairn::ids::SessionId::generate();
    let store = Store::open(&env.database()).unwrap();
    let row = SessionRow::new(id.clone(), env.cwd(), "openai/mock-model".into(), cairn::ids::now_ms());
    store.commit(Write::InsertSession(Box::new(row))).await.unwrap();
    for i in 0..messages {
        let (role, text) = if i % 2 == 0 {
            (Role::User, format!("question {i}"))
        } else {
            (Role::Assistant, format!("answer {i} ").repeat(20))
        };
        let message = Message::new(role, vec![Part::Text { text }], MessageMeta::default());
        store.submit(Write::InsertMessage { session_id: id.clone(), message }, None);
    }
    store.shutdown().await;
    id
}
