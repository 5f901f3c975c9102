//! A simulated editor for the tests: it answers the agent's `fs/*`, `terminal/*` and (scripted)
//! `session/request_permission` requests the way an ACP client does, and logs every request.
//!
//! Files are read from an overlay of unsaved buffers first, then from disk, cut to the requested
//! lines; writes go to disk.
//! Terminals run their command as a real local process. Permission requests take the next
//! scripted answer; with none scripted they are handed to the test like any other message.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, watch};

/// What runs as an `fs/*` request comes, given its method ([`Editor::before_fs`]).
pub type BeforeFs = Arc<dyn Fn(&str) + Send + Sync>;

/// What the simulated editor offers and how it answers.
#[derive(Clone, Default)]
pub struct Editor {
    pub fs: bool,
    pub terminal: bool,
    /// Advertises elicitation forms; the `elicitation/create` requests are handed to the test.
    pub forms: bool,
    /// Advertises plan operations (`clientCapabilities.plan`): `plan_update` and `plan_removed`.
    pub plans: bool,
    /// Unsaved buffers by absolute path, seen by `fs/read_text_file` instead of the disk.
    pub buffers: Arc<Mutex<HashMap<PathBuf, String>>>,
    /// Option ids to answer permission requests with, in order (`"cancelled"` answers cancelled).
    pub answers: Arc<Mutex<VecDeque<String>>>,
    /// Every request the agent sent, in order.
    pub log: Arc<Mutex<Vec<Value>>>,
    /// Delay before answering `fs/read_text_file`.
    pub read_delay: Duration,
    /// Most `fs/read_text_file` requests in flight at once.
    pub max_concurrent_reads: Arc<AtomicUsize>,
    /// Run with the method as an `fs/*` request comes, before the editor resolves its path: what
    /// a process running beside it may do to the disk between cairn's judgment and the editor's
    /// open.
    pub before_fs: Option<BeforeFs>,
    reads_in_flight: Arc<AtomicUsize>,
    terminals: Arc<Mutex<HashMap<String, Terminal>>>,
    /// The environment terminals start from (the editor's own, which holds whatever the
    /// editor was started with); `None` inherits the test's. A request's `env` is set on top.
    pub environment: Option<Vec<(String, String)>>,
}

struct Terminal {
    output: Arc<Mutex<String>>,
    exit: watch::Receiver<Option<Option<i32>>>,
    kill: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Editor {
    pub fn with_fs() -> Self {
        Self { fs: true, ..Self::default() }
    }

    pub fn with_terminal() -> Self {
        Self { terminal: true, ..Self::default() }
    }

    pub fn with_forms() -> Self {
        Self { forms: true, ..Self::default() }
    }

    pub fn with_plans() -> Self {
        Self { plans: true, ..Self::default() }
    }

    /// Queues answers to the next permission requests.
    pub fn answer(&self, options: &[&str]) -> &Self {
        self.answers.lock().unwrap().extend(options.iter().map(|o| (*o).to_owned()));
        self
    }

    pub fn requests(&self, method: &str) -> Vec<Value> {
        self.log.lock().unwrap().iter().filter(|r| r["method"] == method).cloned().collect()
    }

    /// The methods of every request the agent sent, in order.
    pub fn methods(&self) -> Vec<String> {
        self.log.lock().unwrap().iter().map(|r| r["method"].as_str().unwrap_or_default().to_owned()).collect()
    }

    /// The `clientCapabilities` to announce at `initialize`.
    pub fn capabilities(&self) -> Value {
        let mut capabilities =
            json!({"fs": {"readTextFile": self.fs, "writeTextFile": self.fs}, "terminal": self.terminal});
        if self.forms {
            capabilities["elicitation"] = json!({"form": {}});
        }
        if self.plans {
            capabilities["plan"] = json!({});
        }
        capabilities
    }

    /// Takes a message the agent sent; `true` if the editor answered it (on `reply`).
    pub fn handle(&self, message: &Value, reply: &mpsc::UnboundedSender<Vec<u8>>) -> bool {
        let (Some(method), Some(id)) = (message["method"].as_str(), message.get("id")) else { return false };
        let handled = match method {
            "fs/read_text_file" | "fs/write_text_file" => self.fs,
            "terminal/create" | "terminal/output" | "terminal/wait_for_exit" | "terminal/kill" | "terminal/release" => {
                self.terminal
            }
            "session/request_permission" => !self.answers.lock().unwrap().is_empty(),
            _ => false,
        };
        if !handled {
            if method.starts_with("fs/") || method.starts_with("terminal/") {
                panic!("the agent called {method}, which the client did not advertise");
            }
            return false;
        }
        self.log.lock().unwrap().push(message.clone());
        let editor = self.clone();
        let reply = reply.clone();
        let (id, method, params) = (id.clone(), method.to_owned(), message["params"].clone());
        tokio::spawn(async move {
            let answer = match editor.serve(&method, &params).await {
                Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
                Err(message) => json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32002, "message": message}}),
            };
            let _ = reply.send(format!("{answer}\n").into_bytes());
        });
        true
    }

    async fn serve(&self, method: &str, params: &Value) -> Result<Value, String> {
        let path = PathBuf::from(params["path"].as_str().unwrap_or_default());
        let terminal = params["terminalId"].as_str().unwrap_or_default().to_owned();
        if method.starts_with("fs/")
            && let Some(before) = &self.before_fs
        {
            before(method);
        }
        match method {
            "fs/read_text_file" => {
                let now = self.reads_in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                self.max_concurrent_reads.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(self.read_delay).await;
                self.reads_in_flight.fetch_sub(1, Ordering::SeqCst);
                let buffered = self.buffers.lock().unwrap().get(&path).cloned();
                let content = match buffered {
                    Some(content) => content,
                    None => std::fs::read_to_string(&path).map_err(|err| err.to_string())?,
                };
                // `line` (1-based) and `limit` cut out a slice of whole lines, as ACP says.
                let skip = params["line"].as_u64().map_or(0, |line| line.saturating_sub(1) as usize);
                let take = params["limit"].as_u64().map_or(usize::MAX, |limit| limit as usize);
                let content: String = content.split_inclusive('\n').skip(skip).take(take).collect();
                Ok(json!({"content": content}))
            }
            "fs/write_text_file" => {
                std::fs::write(&path, params["content"].as_str().unwrap_or_default()).map_err(|e| e.to_string())?;
                Ok(json!({}))
            }
            "terminal/create" => Ok(json!({"terminalId": self.create_terminal(params)})),
            "terminal/output" => {
                let terminals = self.terminals.lock().unwrap();
                let t = terminals.get(&terminal).ok_or("unknown terminal")?;
                let output = t.output.lock().unwrap().clone();
                let exit = (*t.exit.borrow()).map(|code| json!({"exitCode": code}));
                Ok(json!({"output": output, "truncated": false, "exitStatus": exit}))
            }
            "terminal/wait_for_exit" => {
                let exit = self.terminals.lock().unwrap().get(&terminal).map(|t| t.exit.clone());
                let mut exit = exit.ok_or("unknown terminal")?;
                let code = exit.wait_for(Option::is_some).await.map_err(|e| e.to_string())?.flatten();
                Ok(match code {
                    Some(code) => json!({"exitCode": code}),
                    None => json!({"signal": "SIGKILL"}),
                })
            }
            "terminal/kill" | "terminal/release" => {
                if let Some(t) = self.terminals.lock().unwrap().get_mut(&terminal)
                    && let Some(kill) = t.kill.take()
                {
                    let _ = kill.send(());
                }
                if method == "terminal/release" {
                    self.terminals.lock().unwrap().remove(&terminal);
                }
                Ok(json!({}))
            }
            "session/request_permission" => {
                let answer = self.answers.lock().unwrap().pop_front().unwrap_or_default();
                Ok(if answer == "cancelled" {
                    json!({"outcome": {"outcome": "cancelled"}})
                } else {
                    json!({"outcome": {"outcome": "selected", "optionId": answer}})
                })
            }
            _ => Err(format!("unexpected {method}")),
        }
    }

    fn create_terminal(&self, params: &Value) -> String {
        let id = format!("term-{}", self.log.lock().unwrap().len());
        let args: Vec<String> =
            params["args"].as_array().into_iter().flatten().filter_map(|a| a.as_str().map(str::to_owned)).collect();
        let mut command = tokio::process::Command::new(params["command"].as_str().unwrap_or("false"));
        if let Some(environment) = &self.environment {
            command.env_clear().envs(environment.iter().cloned());
        }
        for var in params["env"].as_array().into_iter().flatten() {
            command.env(var["name"].as_str().unwrap_or_default(), var["value"].as_str().unwrap_or_default());
        }
        let mut child = command
            .args(&args)
            .current_dir(params["cwd"].as_str().unwrap_or("/"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn the terminal's command");
        let output = Arc::new(Mutex::new(String::new()));
        let (exit_tx, exit) = watch::channel(None);
        let (kill, killed) = tokio::sync::oneshot::channel();
        let sink = Arc::clone(&output);
        let mut stdout = child.stdout.take().unwrap();
        // Shown as it comes, as an editor's terminal shows it.
        tokio::spawn(async move {
            let mut buf = [0u8; 8192];
            while let Ok(n) = stdout.read(&mut buf).await
                && n > 0
            {
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let sink = Arc::clone(&output);
        tokio::spawn(async move {
            tokio::select! {
                status = child.wait() => {
                    // Give the output reader a moment to finish.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    let _ = exit_tx.send(Some(status.ok().and_then(|s| s.code())));
                }
                _ = killed => {
                    let _ = child.kill().await;
                    sink.lock().unwrap().push_str("[killed]");
                    let _ = exit_tx.send(Some(None));
                }
            }
        });
        self.terminals.lock().unwrap().insert(id.clone(), Terminal { output, exit, kill: Some(kill) });
        id
    }
}
