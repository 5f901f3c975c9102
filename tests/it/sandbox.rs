//! The process side of the trust boundary: local commands get no provider keys and no relative
//! `PATH` entries, die with cairn (whatever they started), and run in the Landlock sandbox —
//! writes inside the workspace and the temp dirs only, TCP refused when `network = false`.
//!
//! Commands run in `bypass` mode, so permissions never interfere. The sandbox tests skip, with
//! the reason printed, where the kernel has no Landlock.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::{Agent, Reply, TestEnv, alive, running_with};
use crate::tools::{set_mode, tool_results, turn};

/// Runs `command` as the model's one `bash` call in a new bypass session; the output the model got.
async fn bash(env: &TestEnv, command: &str) -> String {
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["done"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let before = env.mock.requests().len();
    let (response, _) = turn(&mut agent, &session, "run it").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    finish(&mut agent).await;
    tool_results(env, before + 1)[0]["content"].as_str().unwrap().to_owned()
}

async fn finish(agent: &mut Agent) {
    agent.close_stdin();
    agent.wait_exit().await;
}

/// A directory outside every place the sandbox allows: not under `/tmp` (where the test's own
/// temp dirs are, and where a checkout may be), removed when dropped. `None` (the test skips)
/// where no such place can be made.
fn outside(name: &str) -> Option<tempfile::TempDir> {
    let allowed = |dir: &std::path::Path| ["/tmp", "/dev/shm"].iter().any(|a| dir.starts_with(a));
    let bases = [PathBuf::from(env!("CARGO_TARGET_TMPDIR")), PathBuf::from("/var/tmp")];
    let made = bases
        .iter()
        .filter_map(|base| base.canonicalize().ok())
        .filter(|base| !allowed(base))
        .find_map(|base| tempfile::Builder::new().prefix(&format!("cairn-sandbox-{name}-")).tempdir_in(base).ok());
    if made.is_none() {
        println!("skipped: no directory outside /tmp to write to ({bases:?})");
    }
    made
}

fn landlock(what: &str) -> bool {
    let support = cairn::process::landlock_support();
    let there = match what {
        "network" => support.network,
        "signals" => support.signals,
        _ => support.filesystem,
    };
    if !there {
        println!("skipped: this kernel's Landlock cannot restrict the {what} ({support:?})");
    }
    there
}

#[tokio::test]
async fn commands_never_see_the_provider_keys_unless_passed_through() {
    let mut env = TestEnv::new().await;
    env.set_env("KEY_COPY", "sk-test");
    let output = bash(&env, "printenv OPENAI_API_KEY; echo \"[$OPENAI_API_KEY][$KEY_COPY]\"").await;
    assert_eq!(output, "[][]\n\n[exit status 0]", "the key and a copy of it under another name are gone");
    let mut store = Vec::new();
    for file in ["cairn.db", "cairn.db-wal"] {
        store.extend(std::fs::read(env.home().join(file)).unwrap_or_default());
    }
    assert!(!store.is_empty());
    assert!(!store.windows(7).any(|bytes| bytes == b"sk-test"), "the key is nowhere in the database");

    env.write_config("[tools]\nenv_passthrough = [\"OPENAI_API_KEY\"]\n");
    let output = bash(&env, "printenv OPENAI_API_KEY; echo \"[$OPENAI_API_KEY][$KEY_COPY]\"").await;
    assert_eq!(output, "sk-test\n[sk-test][sk-test]\n\n[exit status 0]", "named in env_passthrough, it is passed");
}

#[tokio::test]
async fn a_program_planted_in_the_workspace_cannot_shadow_a_command() {
    let mut env = TestEnv::new().await;
    let planted = env.workspace().join("cat");
    std::fs::write(&planted, "#!/bin/sh\necho planted\n").unwrap();
    std::fs::set_permissions(&planted, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    env.set_env("PATH", &format!(".::{}", std::env::var("PATH").unwrap()));
    let output = bash(&env, "echo real | cat; echo \"$PATH\" | tr ':' '\\n' | grep -v '^/' | wc -l").await;
    assert_eq!(output, "real\n0\n\n[exit status 0]", "no empty or relative entry is left in PATH");
}

#[tokio::test]
async fn a_command_holds_no_descriptor_of_cairn_or_its_supervisor() {
    let env = TestEnv::new().await;
    // What the program started holds besides its stdio (bash execs `ls` in its place, and `ls`
    // adds the one it reads the directory with): the supervisor's inotify instance (cairn passes
    // it a copy) or its seccomp listener would let it read the guarded places' events or answer
    // its own exec checks, and what the editor (here the test harness: cargo's jobserver pipe)
    // let cairn inherit would reach into the editor.
    std::fs::create_dir_all(env.workspace().join(".vscode")).unwrap();
    let listing = bash(&env, "ls -l /proc/self/fd").await;
    let held: Vec<&str> = listing
        .lines()
        .filter(|line| line.contains(" -> "))
        .filter_map(|line| line.split(" -> ").next()?.rsplit(' ').next())
        .collect();
    assert!(!listing.contains("inotify") && !listing.contains("seccomp"), "{listing}");
    assert_eq!(held, ["0", "1", "2", "3"], "{listing}");
}

#[tokio::test]
async fn kill_9_of_cairn_kills_every_process_a_running_command_started() {
    let env = TestEnv::new().await;
    // Found from outside by their arguments: inside, a command has a PID namespace of its own.
    let command = "sleep 60.1 & setsid sleep 60.2 & (exec sleep 60.3)";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    agent.prompt(&session, "go").await;
    let started = Instant::now();
    let running = loop {
        let running: Vec<String> =
            ["60.1", "60.2", "60.3"].iter().flat_map(|arg| running_with(&["sleep", arg])).collect();
        if running.len() == 3 {
            break running;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the command did not start: {running:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    agent.kill9().await;
    let killed = Instant::now();
    while running.iter().any(|pid| alive(pid)) && killed.elapsed() < Duration::from_secs(2) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left: Vec<&String> = running.iter().filter(|pid| alive(pid)).collect();
    assert!(left.is_empty(), "background, setsid'd and foreground sleeps die with cairn; alive: {left:?}");
}

#[tokio::test]
async fn workspace_write_allows_the_workspace_and_refuses_outside() {
    if !landlock("filesystem") {
        return;
    }
    let env = TestEnv::new().await;
    let Some(outside) = outside("ww") else { return };
    let outside = outside.path();
    let command = format!("touch {}/x; echo \"outside=$?\"; touch inside.txt; echo \"inside=$?\"", outside.display());
    let output = bash(&env, &command).await;
    // Landlock refuses the write, or, in the namespace, the mount outside is read-only.
    let refused = ["Permission denied", "Read-only file system"];
    assert!(refused.iter().any(|why| output.contains(why)) && output.contains("outside=1"), "{output}");
    assert!(output.contains("inside=0"), "{output}");
    assert!(!outside.join("x").exists());
    assert!(env.workspace().join("inside.txt").exists());
    let refused = bash(&env, &format!("touch {}/y", outside.display())).await;
    assert!(
        refused.contains("[exit status 1]\n[cairn's sandbox (workspace-write) lets local commands write only"),
        "{refused}"
    );
}

#[tokio::test]
async fn symlinks_proc_paths_and_renames_do_not_lead_out() {
    if !landlock("filesystem") {
        return;
    }
    let env = TestEnv::new().await;
    let Some(out) = outside("links") else { return };
    let out = out.path();
    let command = format!(
        "{{ ln -s {out} link; echo x > link/a; ln -s {out} /tmp/link-$$; echo x > /tmp/link-$$/b; \
         echo x > /proc/self/root{out}/c; echo x > d; mv d {out}/d; rm /tmp/link-$$; ls {out} | wc -l; }} 2>&1",
        out = out.display()
    );
    let output = bash(&env, &command).await;
    let refused = output.matches("Permission denied").count() + output.matches("Read-only file system").count();
    assert_eq!(refused, 4, "{output}");
    assert!(output.ends_with("0\n\n[exit status 0]"), "nothing was written outside: {output}");
}

#[tokio::test]
async fn a_command_cannot_signal_its_supervisor_or_cairn() {
    if !landlock("signals") {
        return;
    }
    let env = TestEnv::new().await;
    // The command waits for the pids this test sees of its supervisor and of cairn.
    let targets = env.workspace().join("targets");
    let command = format!(
        "while [ ! -s {t} ]; do sleep 0.02; done; read s c < {t}; kill -0 $s; echo \"supervisor=$?\"; kill -0 $c; echo \"cairn=$?\"",
        t = targets.display()
    );
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["done"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let cairn = agent.child.id().unwrap().to_string();
    let id = agent.prompt(&session, "run it").await;
    let started = Instant::now();
    let supervisor = loop {
        let found = std::fs::read_dir("/proc").unwrap().flatten().find_map(|entry| {
            let pid = entry.file_name().to_str()?.to_owned();
            let line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            (line.windows(11).any(|w| w == b"__supervise") && pid != cairn).then_some(pid)
        });
        if let Some(pid) = found {
            break pid;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "no supervisor started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    std::fs::write(&targets, format!("{supervisor} {cairn}\n")).unwrap();
    agent.response(id).await;
    let output = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(output.contains("supervisor=1") && output.contains("cairn=1"), "{output}");
}

#[tokio::test]
async fn read_only_refuses_writes_even_in_the_workspace() {
    if !landlock("filesystem") {
        return;
    }
    let env = TestEnv::new().await;
    env.write_config("[sandbox]\nmode = \"read-only\"\n");
    let command = "{ cat /etc/hostname > /dev/null && echo read; touch inside.txt; echo \"inside=$?\"; } 2>&1";
    let output = bash(&env, command).await;
    assert!(output.starts_with("read\n") && output.contains("inside=1"), "{output}");
    assert!(!env.workspace().join("inside.txt").exists());
}

#[tokio::test]
async fn off_allows_writing_anywhere_the_user_may() {
    let env = TestEnv::new().await;
    env.write_config("[sandbox]\nmode = \"off\"\n");
    let Some(outside) = outside("off") else { return };
    let outside = outside.path();
    let output = bash(&env, &format!("touch {}/x; echo \"outside=$?\"", outside.display())).await;
    assert!(output.contains("outside=0"), "{output}");
    assert!(outside.join("x").exists());
}

#[tokio::test]
async fn network_false_refuses_tcp_and_true_allows_it() {
    if !landlock("network") {
        return;
    }
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let env = TestEnv::new().await;
    env.write_config("[sandbox]\nnetwork = false\n");
    let output = bash(&env, &connect).await;
    assert!(!output.contains("connected") && output.contains("Permission denied"), "{output}");

    env.write_config("[sandbox]\nnetwork = true\n");
    let output = bash(&env, &connect).await;
    assert!(output.starts_with("connected"), "{output}");
}

#[tokio::test]
async fn git_does_not_run_the_config_of_a_bare_repository_the_model_wrote() {
    // Files any edit can write: git would take the workspace for a bare repository and run
    // its fsmonitor command at `git status`.
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    let config =
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\tfsmonitor = \"touch pwned; false\"\n";
    std::fs::write(ws.join("config"), config).unwrap();
    std::fs::create_dir_all(ws.join("objects")).unwrap();
    std::fs::create_dir_all(ws.join("refs/heads")).unwrap();
    let output = bash(&env, "git status 2>&1; true").await;
    assert!(output.contains("safe.bareRepository"), "{output}");
    assert!(!ws.join("pwned").exists(), "the planted command did not run");
}

/// git corrects a misspelt command inside its own process, where the exec check sees only the
/// misspelling: commands get `help.autocorrect=never`, after the user's own settings.
#[tokio::test]
async fn git_is_told_not_to_run_the_command_a_misspelling_resembles() {
    let env = TestEnv::new().await;
    let output = bash(&env, "git config --get help.autocorrect; git config --get safe.bareRepository").await;
    assert!(output.starts_with("never\nexplicit\n"), "{output}");
}

#[tokio::test]
async fn a_command_runs_in_its_own_session_without_the_terminal_cairn_has() {
    // Sharing cairn's session would give it cairn's controlling terminal, where TIOCSTI can push
    // keystrokes into the user's shell, outside the sandbox.
    let env = TestEnv::new().await;
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": "cut -d' ' -f6 /proc/$$/stat"}))]));
    env.mock.push(Reply::text(&["done"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let cairn = agent.child.id().unwrap();
    let own = std::fs::read_to_string(format!("/proc/{cairn}/stat")).unwrap();
    let own_session = own.rsplit(')').next().unwrap().split_whitespace().nth(3).unwrap().to_owned();
    turn(&mut agent, &session, "run it").await;
    let output = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    let command_session = output.lines().next().unwrap().trim().to_owned();
    assert_ne!(command_session, own_session, "{output}");
}

/// A command reaches none of the user's own services that would act for it outside the
/// sandbox: the runtime directory's sockets (the session bus, which starts programs through
/// systemd; editors' servers; cairn's own), the ssh agent's, a terminal multiplexer's, any
/// socket in the temp directories older than cairn (a database's) and an abstract socket
/// (X11's, a bus's) are all refused; the sockets a command makes for itself still work.
#[tokio::test]
async fn a_command_cannot_reach_the_users_own_services_through_their_sockets() {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::{SocketAddr, UnixListener};
    if cairn::process::namespace_support().is_none() || !landlock("signals") {
        println!("skipped: needs a namespace and Landlock's scopes");
        return;
    }
    if std::process::Command::new("python3").arg("-V").output().is_err() {
        println!("skipped: no python3 to connect with");
        return;
    }
    let mut env = TestEnv::new().await;
    let (run, agent, multiplexer) =
        (env.dir.path().join("run"), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // A database of the user's, listening where no setting names it.
    let database = tempfile::tempdir().unwrap();
    let tmux = multiplexer.path().join(format!("tmux-{}", cairn::process::current_uid()));
    for dir in [&run, &tmux] {
        std::fs::create_dir_all(dir).unwrap();
    }
    let tag = std::process::id();
    let abstract_name = format!("cairn-test-bus-{tag}");
    let _listening = [
        UnixListener::bind(run.join("bus")).unwrap(),
        UnixListener::bind(agent.path().join("agent.1")).unwrap(),
        UnixListener::bind(tmux.join("default")).unwrap(),
        UnixListener::bind(database.path().join(".s.PGSQL.5432")).unwrap(),
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(abstract_name.as_bytes()).unwrap()).unwrap(),
    ];
    env.set_env("XDG_RUNTIME_DIR", run.to_str().unwrap());
    env.set_env("SSH_AUTH_SOCK", agent.path().join("agent.1").to_str().unwrap());
    env.set_env("TMUX_TMPDIR", multiplexer.path().to_str().unwrap());
    let script = format!(
        r#"import socket
def reach(name, address, listen=False):
    if listen:
        own = socket.socket(socket.AF_UNIX); own.bind(address); own.listen(); keep.append(own)
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(address); print(name + ": connected")
    except OSError as e:
        print(name + ": refused")
keep = []
reach("bus", "{bus}")
reach("agent", "{agent}")
reach("tmux", "{tmux}")
reach("database", "{database}")
reach("abstract", "\0{abstract_name}")
reach("own", "/tmp/cairn-own-{tag}.sock", True)
reach("own abstract", "\0cairn-own-{tag}", True)
"#,
        bus = run.join("bus").display(),
        agent = agent.path().join("agent.1").display(),
        tmux = tmux.join("default").display(),
        database = database.path().join(".s.PGSQL.5432").display(),
    );
    std::fs::write(env.workspace().join("reach.py"), script).unwrap();
    let output = bash(&env, "python3 reach.py 2>&1; rm -f /tmp/cairn-own-*.sock").await;
    for refused in ["bus", "agent", "tmux", "database", "abstract"] {
        assert!(output.lines().any(|line| line == format!("{refused}: refused")), "{refused}: {output}");
    }
    assert!(output.contains("own: connected") && output.contains("own abstract: connected"), "{output}");
}

#[tokio::test]
async fn a_multiplexer_the_user_starts_while_a_command_runs_is_out_of_its_reach() {
    use std::os::unix::fs::PermissionsExt as _;
    use std::os::unix::net::UnixListener;
    if cairn::process::namespace_support().is_none() {
        println!("skipped: needs a namespace");
        return;
    }
    if std::process::Command::new("python3").arg("-V").output().is_err() {
        println!("skipped: no python3 to connect with");
        return;
    }
    let mut env = TestEnv::new().await;
    // No tmux runs yet: its directory does not exist when the command starts.
    let multiplexer = tempfile::tempdir().unwrap();
    let tmux = multiplexer.path().join(format!("tmux-{}", cairn::process::current_uid()));
    env.set_env("TMUX_TMPDIR", multiplexer.path().to_str().unwrap());
    let socket = tmux.join("default");
    let script = format!(
        "import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect('{}'); print('tmux: connected')\nexcept OSError:\n    print('tmux: refused')\n",
        socket.display()
    );
    std::fs::write(env.workspace().join("reach.py"), script).unwrap();
    // The command waits (as a background job would) until the user has started tmux.
    let command =
        "touch started; for _ in $(seq 600); do [ -e ready ] && break; sleep 0.05; done; python3 reach.py 2>&1";
    let workspace = env.workspace();
    let user = async {
        while !workspace.join("started").exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The user's tmux makes its directory if it is missing, then listens in it.
        std::fs::create_dir_all(&tmux).unwrap();
        let listening = UnixListener::bind(&socket).unwrap();
        std::fs::write(workspace.join("ready"), "").unwrap();
        listening
    };
    let (output, _listening) = tokio::join!(bash(&env, command), user);
    assert!(output.lines().any(|line| line == "tmux: refused"), "{output}");
    let mode = std::fs::metadata(&tmux).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "made as tmux makes it, or tmux would refuse it");
}
