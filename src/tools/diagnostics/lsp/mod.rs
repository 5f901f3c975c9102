//! The language servers of a session, asked for an edited file's diagnostics when no checker
//! of `[checks]` covers it. [`Lsp`] is the session's handle on the task that owns them (held
//! by the session's actor, lent to every turn, a sub-agent's included): it finds each server's
//! program on `PATH` once per session (a built-in server whose program is missing is as if
//! there were none; a server of the user's that cannot start is said), starts a server on the
//! first edit of a file it covers, once per session and workspace root, and stops them all at
//! [`Lsp::close`] (or kills them when the last handle goes). Each server is a task of its own
//! (`server.rs`) speaking LSP's framing (`framing.rs`); what its messages say is read in
//! `report.rs`.
//!
//! [`Lsp::sync`] gives a server a document's text as it is now and waits for its diagnostics at
//! most `[lsp] wait_ms`, or until the call is cancelled; a server that does not answer in time
//! is [`Answer::Silent`] for that edit and is not killed (its answer may come for the next).

mod framing;
mod report;
mod server;

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use super::parse::Diagnostic;
use crate::config::{LspServer, LspSettings};
use crate::tools::ToolContext;
use server::{Ask, Reported};

/// How long a closing session waits for its servers to shut down, all at once, before it
/// kills them.
const CLOSE_BOUND: Duration = Duration::from_secs(5);

/// A session's language servers, as its turns' tools and its actor reach them. Cheap to clone;
/// when the last clone goes, every server is killed.
#[derive(Clone)]
pub struct Lsp {
    requests: Option<mpsc::UnboundedSender<Request>>,
    settings: Arc<LspSettings>,
}

/// What a server said of a document, as an edit's check takes it.
#[derive(Debug)]
pub enum Answer {
    /// No server runs for it here (none found for the file, or `[lsp]` is off).
    NoServer,
    Found(Vec<Diagnostic>),
    /// It did not report within `[lsp] wait_ms`.
    Silent,
    /// It is gone for the session: why ("exited (…)", "could not be started (…)").
    Gone(String),
    Cancelled,
}

/// A request to the session's task.
enum Request {
    Sync(Box<Sync>),
    Close(oneshot::Sender<()>),
}

/// A document's text for the server covering it.
struct Sync {
    server: LspServer,
    start: Place,
    uri: String,
    text: String,
    reply: Option<oneshot::Sender<Reported>>,
}

/// Where a server would start: the root it serves and how the call's commands start.
struct Place {
    root: PathBuf,
    policy: Arc<crate::process::ProcessPolicy>,
    roots: Vec<PathBuf>,
    rejected: Vec<Vec<String>>,
    rulebook: Option<Arc<crate::process::Rulebook>>,
}

impl Lsp {
    /// The session's servers, none started yet.
    pub fn start(settings: LspSettings) -> Self {
        let (requests, rx) = mpsc::unbounded_channel();
        tokio::spawn(own(rx));
        Self { requests: Some(requests), settings: Arc::new(settings) }
    }

    /// No servers at all (tests, benches).
    pub fn none() -> Self {
        Self { requests: None, settings: Arc::new(LspSettings { enabled: false, ..LspSettings::default() }) }
    }

    /// The server configured for a file named `file`, if `[lsp]` is on.
    pub fn server_for(&self, file: &Path) -> Option<LspServer> {
        self.requests.as_ref()?;
        self.settings.for_file(file).cloned()
    }

    /// How long one wait for a server may take.
    pub fn wait(&self) -> Duration {
        match &self.requests {
            Some(_) if self.settings.enabled => self.settings.wait,
            Some(_) | None => Duration::ZERO,
        }
    }

    /// Gives `server` the text of `target` (a final target inside `root`) as it is now; with
    /// `wait`, waits for the diagnostics it publishes for it (at most `[lsp] wait_ms`).
    pub async fn sync(
        &self,
        ctx: &ToolContext,
        server: &LspServer,
        (root, target): (&Path, &Path),
        text: String,
        wait: bool,
    ) -> Answer {
        let Some(requests) = &self.requests else { return Answer::NoServer };
        let start = Place {
            root: root.to_path_buf(),
            policy: Arc::clone(&ctx.process),
            roots: ctx.workspace.roots().to_vec(),
            rejected: ctx.rejected.clone(),
            rulebook: ctx.rulebook.clone(),
        };
        let (reply, answer) = if wait {
            let (reply, answer) = oneshot::channel();
            (Some(reply), Some(answer))
        } else {
            (None, None)
        };
        let request = Request::Sync(Box::new(Sync { server: server.clone(), start, uri: uri(target), text, reply }));
        if requests.send(request).is_err() {
            return Answer::Gone("stopped with the session".to_owned());
        }
        let Some(answer) = answer else { return Answer::Silent };
        tokio::select! {
            answer = tokio::time::timeout(self.settings.wait, answer) => match answer {
                Ok(Ok(Reported::Found(found))) => Answer::Found(found),
                Ok(Ok(Reported::Gone(why))) => Answer::Gone(why),
                // The task dropped it: the program is not there (a built-in server not installed).
                Ok(Err(_)) => Answer::NoServer,
                Err(_) => Answer::Silent,
            },
            () = ctx.cancel.cancelled() => Answer::Cancelled,
        }
    }

    /// Shuts every server down (`shutdown`, `exit`), killing those still there after a short
    /// bound; later edits start none.
    pub async fn close(&self) {
        let Some(requests) = &self.requests else { return };
        let (done, closed) = oneshot::channel();
        if requests.send(Request::Close(done)).is_ok() {
            let _ = closed.await;
        }
    }
}

/// The session's task: the servers by name and root, and the programs looked up on `PATH`.
async fn own(mut requests: mpsc::UnboundedReceiver<Request>) {
    let mut servers: HashMap<(String, PathBuf), mpsc::UnboundedSender<Ask>> = HashMap::new();
    let mut found: HashMap<String, Option<PathBuf>> = HashMap::new();
    while let Some(request) = requests.recv().await {
        match request {
            Request::Sync(sync) => {
                let Sync { server, start, uri, text, reply } = *sync;
                let key = (server.name.clone(), start.root.clone());
                let asks = match servers.get(&key) {
                    Some(asks) => asks,
                    None => {
                        let Some((program, args)) = server.command.split_first() else { continue };
                        let path = start.policy.env.path.as_deref().unwrap_or_default();
                        let located = found.entry(program.clone()).or_insert_with(|| locate(program, path)).clone();
                        let program = match located {
                            Some(program) => program,
                            // A built-in server not installed: as if there were none.
                            None if server.builtin => continue,
                            None => {
                                if let Some(reply) = reply {
                                    let why = format!("could not be started (`{program}` is not on PATH)");
                                    let _ = reply.send(Reported::Gone(why));
                                }
                                continue;
                            }
                        };
                        tracing::debug!(server = %server.name, root = %start.root.display(), "starting a language server");
                        let asks = server::spawn(server::Start {
                            program,
                            args: args.to_vec(),
                            root: start.root,
                            policy: start.policy,
                            roots: start.roots,
                            rejected: start.rejected,
                            rulebook: start.rulebook,
                        });
                        servers.entry(key).or_insert(asks)
                    }
                };
                let _ = asks.send(Ask::Sync { uri, text, reply });
            }
            Request::Close(done) => {
                let closing: Vec<_> = servers
                    .drain()
                    .filter_map(|(_, asks)| {
                        let (done, closed) = oneshot::channel();
                        asks.send(Ask::Close(done)).ok().map(|()| closed)
                    })
                    .collect();
                let _ = tokio::time::timeout(CLOSE_BOUND, futures::future::join_all(closing)).await;
                let _ = done.send(());
                // Later asks find no server and start none.
                requests.close();
            }
        }
    }
}

/// `program` as found on `path` (an executable file), or as given when it names a path. A
/// relative entry of `path` (`.`, an empty one, `node_modules/.bin`) is passed over: it names
/// whatever directory cairn runs in, and the server starts in the workspace root, so a program
/// a repository planted there would be taken for the server.
fn locate(program: &str, path: &std::ffi::OsStr) -> Option<PathBuf> {
    let executable = |candidate: &Path| {
        std::fs::metadata(candidate).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        let given = PathBuf::from(program);
        return executable(&given).then_some(given);
    }
    std::env::split_paths(path)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| executable(candidate))
}

/// The `file://` URI of an absolute path.
pub(super) fn uri(path: &Path) -> String {
    url::Url::from_file_path(path).map_or_else(|()| format!("file://{}", path.display()), String::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_program_is_found_on_the_path_only_when_it_can_run() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::fs::write(bin.join("server"), "#!/bin/sh\n").unwrap();
        std::fs::write(bin.join("plain"), "").unwrap();
        std::fs::set_permissions(bin.join("server"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([Path::new("/nonexistent"), &bin]).unwrap();
        assert_eq!(locate("server", &path), Some(bin.join("server")));
        assert_eq!(locate("plain", &path), None, "not executable");
        assert_eq!(locate("missing", &path), None);
        let absolute = bin.join("server").display().to_string();
        assert_eq!(locate(&absolute, &path), Some(bin.join("server")));
    }

    #[test]
    fn a_relative_path_entry_finds_nothing() {
        // `.`, an empty entry or `node_modules/.bin` on PATH name the directory cairn (or the
        // server, started in the workspace root) runs in: a program a repository planted there
        // must not be taken for the server.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(dir.path().join("server"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let up = std::env::current_dir().unwrap().components().count();
        let relative = Path::new(&"../".repeat(up)).join(dir.path().strip_prefix("/").unwrap());
        assert!(relative.join("server").is_file(), "the relative entry names the directory");
        let path = std::env::join_paths([relative.as_path(), Path::new("/nonexistent")]).unwrap();
        assert_eq!(locate("server", &path), None);
        assert_eq!(locate("server", std::ffi::OsStr::new(":/nonexistent")), None);
    }

    #[test]
    fn a_path_becomes_a_file_uri_with_odd_characters_escaped() {
        assert_eq!(uri(Path::new("/w/src/lib.rs")), "file:///w/src/lib.rs");
        assert_eq!(uri(Path::new("/w/it's a #1.rs")), "file:///w/it's%20a%20%231.rs");
    }
}
