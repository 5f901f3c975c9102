//! The workspace root is checked: no way of opening a session (new, load, resume, fork, a stored
//! or imported session's directory, `cairn exec` with `--cwd` or in its own directory) makes the
//! whole disk, the home directory or an ancestor of it, `~/.config`, the places of keys and
//! credentials, where the user's programs live (`~/.local/bin`, `~/.cargo`, git's and systemd's
//! configuration), the system's directories, or cairn's own configuration and data the
//! workspace, where accept-edits writes without asking and commands may write. The same check
//! refuses `additionalDirectories` (see `permissions.rs`). Spellings that hide a directory (`..`,
//! a trailing slash, a symlink, a bind mount) are judged where they lead.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{Value, json};

use crate::support::{Agent, Reply, TestEnv};

/// Every directory that must not be a workspace in `env`, each with a hostile spelling or two.
fn refused_roots(env: &TestEnv) -> Vec<String> {
    let home = env.dir.path().to_path_buf();
    let work = env.workspace();
    std::fs::create_dir_all(home.join(".config")).unwrap();
    std::fs::create_dir_all(env.home().join("inside-data")).unwrap();
    let programs = [".local/bin", "bin", ".cargo", ".config/git", ".config/systemd/user", ".local/share/systemd/user"];
    let more = [".local/lib/python3.12/site-packages", ".bashrc.d", ".pyenv/versions"];
    for dir in [".ssh/keys", ".aws", ".gnupg"].into_iter().chain(programs).chain(more) {
        std::fs::create_dir_all(home.join(dir)).unwrap();
    }
    let link = work.join("home-link");
    if !link.exists() {
        std::os::unix::fs::symlink(&home, &link).unwrap();
    }
    let text = |path: PathBuf| path.to_string_lossy().into_owned();
    vec![
        "/".to_owned(),
        format!("{}/..", work.display()),
        format!("{}/", home.display()),
        text(home.clone()),
        text(home.parent().unwrap().to_path_buf()),
        text(link),
        format!("{}/home-link/work/..", work.display()),
        text(home.join(".config")),
        // XDG_CONFIG_HOME, and cairn's configuration directory in it.
        text(home.join("config")),
        text(home.join("config/cairn")),
        // CAIRN_HOME (the database), and a directory inside it.
        text(env.home()),
        text(env.home().join("inside-data")),
        // Keys and credentials, hidden from commands: neither a root nor inside one.
        text(home.join(".ssh")),
        text(home.join(".ssh/keys")),
        text(home.join(".aws")),
        text(home.join(".gnupg")),
        // Where the user's programs and what runs them live.
        text(home.join(".local/bin")),
        text(home.join("bin")),
        text(home.join(".cargo")),
        text(home.join(".config/git")),
        text(home.join(".config/systemd/user")),
        text(home.join(".local/share/systemd/user")),
        text(home.join(".local/lib/python3.12/site-packages")),
        text(home.join(".bashrc.d")),
        text(home.join(".pyenv/versions")),
        // The system's.
        "/etc".to_owned(),
        "/var/spool".to_owned(),
        "/var".to_owned(),
        "/usr/bin".to_owned(),
        "/usr".to_owned(),
        "/usr/local/lib".to_owned(),
        // The kernel's views of devices, processes and its settings, and the system's state.
        "/dev".to_owned(),
        "/proc/self".to_owned(),
        "/sys/kernel".to_owned(),
        "/run".to_owned(),
        "/var/lib".to_owned(),
        "/usr/share".to_owned(),
    ]
}

/// The error says which directory, and what to do instead.
fn assert_refused(error: &Value, dir: &str) {
    assert_eq!(error["code"], -32602, "{dir}: {error}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("cannot be a workspace"), "{dir}: {message}");
    assert!(message.contains("open a project directory instead"), "{dir}: {message}");
    let named = dir.trim_end_matches('/');
    assert!(message.contains(if named.is_empty() { "/" } else { named }), "names {dir}: {message}");
}

#[tokio::test]
async fn session_new_refuses_the_disk_the_home_directory_and_cairns_own_directories() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    for dir in refused_roots(&env) {
        let error = agent.call_err("session/new", json!({"cwd": dir, "mcpServers": []})).await;
        assert_refused(&error, &dir);
    }
    // A project inside the home directory is what a workspace is.
    let sub = env.workspace().join("crate");
    std::fs::create_dir_all(&sub).unwrap();
    for good in [env.cwd(), format!("{}/", sub.display())] {
        agent.call("session/new", json!({"cwd": good, "mcpServers": []})).await;
    }
    assert!(env.mock.requests().is_empty());
}

#[tokio::test]
async fn load_resume_and_fork_refuse_such_a_cwd_too() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for dir in ["/".to_owned(), env.dir.path().to_string_lossy().into_owned()] {
        for method in ["session/load", "session/resume", "session/fork"] {
            let error = agent.call_err(method, json!({"sessionId": session, "cwd": dir, "mcpServers": []})).await;
            assert_refused(&error, &dir);
        }
    }
}

/// Stores a session whose directory is `cwd` the way an import does, as a file could say anything.
async fn import_session(env: &TestEnv, cwd: &str) -> String {
    let id = "ses_01JROOTSIMPORTED00000000";
    let line = json!({
        "type": "session", "version": 1, "id": id, "title": "planted", "cwd": cwd, "model": "openai/mock-model",
        "created_at": "2025-01-02T03:04:05.678Z", "updated_at": "2025-01-02T03:04:06.000Z",
    });
    let message = json!({"type": "message", "id": "msg_1", "role": "user", "meta": {},
        "parts": [{"type": "text", "text": "hi"}]});
    let file = env.dir.path().join("planted.jsonl");
    std::fs::write(&file, format!("{line}\n{message}\n")).unwrap();
    let output =
        env.command().args(["sessions", "import", file.to_str().unwrap()]).stdin(Stdio::null()).output().await.unwrap();
    assert!(output.status.success(), "the import itself goes on: {}", String::from_utf8_lossy(&output.stderr));
    id.to_owned()
}

#[tokio::test]
async fn a_stored_sessions_directory_is_checked_again_whenever_it_is_used() {
    let env = TestEnv::new().await;
    let home = env.dir.path().to_string_lossy().into_owned();
    let session = import_session(&env, &home).await;
    env.mock.push(Reply::text(&["never"]));
    let mut agent = env.ready().await;
    let cwd = env.cwd();
    for (method, params) in [
        ("session/load", json!({"sessionId": session, "cwd": cwd, "mcpServers": []})),
        ("session/resume", json!({"sessionId": session, "cwd": cwd, "mcpServers": []})),
        ("session/fork", json!({"sessionId": session, "cwd": cwd, "mcpServers": []})),
        ("session/prompt", json!({"sessionId": session, "prompt": [{"type": "text", "text": "write ~/.profile"}]})),
        ("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})),
    ] {
        let error = agent.call_err(method, params).await;
        assert_refused(&error, &home);
        assert!(error["message"].as_str().unwrap().contains(&session), "names the session: {error}");
    }
    assert!(env.mock.requests().is_empty(), "no turn ran in the home directory");

    let (status, _, stderr) = exec(&env, &["exec", "--session", &session, "write ~/.profile"], None).await;
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("cannot be a workspace") && stderr.contains(&home), "{stderr}");
    let (status, _, stderr) = exec(&env, &["exec", "--continue", "go on"], Some(Path::new(&home))).await;
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("cannot be a workspace"), "{stderr}");
    assert!(env.mock.requests().is_empty());
    // The session can still be shown and removed.
    let (status, _, stderr) = exec(&env, &["sessions", "rm", &session], None).await;
    assert_eq!(status, Some(0), "{stderr}");
}

/// A session opened through a link works where the link led when the session went live: a
/// command that re-points the link (here at the home directory) does not move the next turn's
/// root there, nor the file tools' writes; nor do additional directories given through links
/// move where commands may write.
#[tokio::test]
async fn a_session_opened_through_a_link_keeps_working_where_the_link_led() {
    let env = TestEnv::new().await;
    let (project, home) = (env.workspace().canonicalize().unwrap(), env.dir.path().canonicalize().unwrap());
    // Outside every place commands may write, as the user's own directories are.
    let (extra, elsewhere) = (crate::breaks::outside("extra"), crate::breaks::outside("elsewhere"));
    // Where commands may write (the temporary directory), as a link to a project often lies.
    let links = tempfile::tempdir().unwrap();
    let (link, extra_link) = (links.path().join("proj"), links.path().join("extra"));
    std::os::unix::fs::symlink(&project, &link).unwrap();
    std::os::unix::fs::symlink(extra.path(), &extra_link).unwrap();
    let mut agent = env.ready().await;
    let params = json!({"cwd": link, "mcpServers": [], "additionalDirectories": [extra_link]});
    let session = agent.call("session/new", params).await["sessionId"].as_str().unwrap().to_owned();
    crate::tools::set_mode(&mut agent, &session, "bypass").await;
    let relink = format!(
        "ln -sfn {} {} && ln -sfn {} {} && echo relinked",
        home.display(),
        link.display(),
        elsewhere.path().display(),
        extra_link.display()
    );
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": relink}))])).push(Reply::text(&["ok"]));
    crate::tools::turn(&mut agent, &session, "relink").await;
    assert_eq!(std::fs::read_link(&link).unwrap(), home, "the command re-pointed the link");
    let write = json!({"path": ".bashrc", "content": "PWNED\n"});
    let probe = format!("touch {}/probe; touch {}/kept", extra_link.display(), extra.path().display());
    env.mock.push(Reply::tool_calls(&[("c2", "write", write), ("c3", "bash", json!({"command": probe}))]));
    env.mock.push(Reply::text(&["ok"]));
    crate::tools::turn(&mut agent, &session, "write").await;
    assert!(!home.join(".bashrc").exists(), "the write followed the re-pointed link into the home directory");
    assert_eq!(std::fs::read_to_string(project.join(".bashrc")).unwrap(), "PWNED\n");
    assert!(!elsewhere.path().join("probe").exists(), "a command wrote where a re-pointed directory leads");
    assert!(extra.path().join("kept").exists(), "the additional directory stays writable");
}

/// Runs `cairn` with `args` in `dir` (the workspace when `None`); returns (status, stdout, stderr).
async fn exec(env: &TestEnv, args: &[&str], dir: Option<&Path>) -> (Option<i32>, String, String) {
    let mut command = env.command();
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let output = command.args(args).stdin(Stdio::null()).output().await.unwrap();
    (output.status.code(), String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap())
}

#[tokio::test]
async fn cairn_exec_refuses_them_as_cwd_and_as_its_own_directory() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["never"]));
    for dir in refused_roots(&env) {
        let (status, stdout, stderr) = exec(&env, &["exec", "--cwd", &dir, "write ~/.ssh/authorized_keys"], None).await;
        assert_eq!(status, Some(2), "{dir}: {stderr}");
        assert!(stdout.is_empty(), "{stdout}");
        assert!(stderr.contains("cannot be a workspace") && stderr.contains("open a project directory"), "{stderr}");
    }
    for dir in [Path::new("/"), env.dir.path()] {
        let (status, _, stderr) = exec(&env, &["exec", "write ~/.profile"], Some(dir)).await;
        assert_eq!(status, Some(2), "{}: {stderr}", dir.display());
        assert!(stderr.contains(&dir.display().to_string()), "{stderr}");
    }
    assert!(env.mock.requests().is_empty(), "no turn ran");
    let (status, _, stderr) = exec(&env, &["sessions", "list", "--json"], None).await;
    assert_eq!(status, Some(0), "{stderr}");
}

#[tokio::test]
async fn a_project_in_the_home_directory_still_opens_and_works() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["fine"]));
    let mut agent: Agent = env.ready().await;
    let session = agent.new_session(&format!("{}/", env.cwd())).await;
    let (response, _) = crate::tools::turn(&mut agent, &session, "hello").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
}

#[tokio::test]
async fn the_xdg_config_home_is_refused_even_when_cairns_file_lives_elsewhere() {
    let mut env = TestEnv::new().await;
    let elsewhere = env.dir.path().join("etc/cairn.toml");
    std::fs::create_dir_all(elsewhere.parent().unwrap()).unwrap();
    std::fs::write(&elsewhere, "").unwrap();
    env.set_env("CAIRN_CONFIG", &elsewhere.to_string_lossy());
    let xdg = env.dir.path().join("config").to_string_lossy().into_owned();
    let etc = env.dir.path().join("etc").to_string_lossy().into_owned();
    let mut agent = env.ready().await;
    for (dir, says) in [(&xdg, "XDG_CONFIG_HOME"), (&etc, "cairn's configuration")] {
        let error = agent.call_err("session/new", json!({"cwd": dir, "mcpServers": []})).await;
        assert_refused(&error, dir);
        assert!(error["message"].as_str().unwrap().contains(says), "{error}");
    }
}

/// `cairn exec` run by `sh` in a user and mount namespace of its own, where `script` first binds
/// a directory somewhere else (`$1` is cairn); `None` where the kernel gives no such namespace.
async fn exec_after_binding(env: &TestEnv, script: &str) -> Option<(Option<i32>, String)> {
    let probe = tokio::process::Command::new("unshare").args(["-Urm", "true"]).status().await;
    if !probe.is_ok_and(|status| status.success()) {
        return None;
    }
    let mut shell = env.with_env(tokio::process::Command::new("unshare"));
    shell.args(["-Urm", "sh", "-c", script, "sh", env!("CARGO_BIN_EXE_cairn")]).current_dir(env.workspace());
    let output = shell.stdin(Stdio::null()).output().await.unwrap();
    Some((output.status.code(), String::from_utf8(output.stderr).unwrap()))
}

#[tokio::test]
async fn the_home_directory_bound_elsewhere_is_still_the_home_directory() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["never"]));
    let home = env.dir.path().display().to_string();
    let parent = env.dir.path().parent().unwrap().display().to_string();
    let elsewhere = tempfile::tempdir().unwrap();
    let at = elsewhere.path().join("bound");
    std::fs::create_dir_all(&at).unwrap();
    let at = at.display().to_string();
    for (bound, says) in [(&home, "it is your home directory"), (&parent, "it contains your home directory")] {
        let script = format!("mount --bind '{bound}' '{at}' && cd '{at}' && exec \"$1\" exec 'write ~/.profile'");
        let Some((status, stderr)) = exec_after_binding(&env, &script).await else {
            eprintln!("no user and mount namespace here: the bind mount cannot be made");
            return;
        };
        assert_eq!(status, Some(2), "{bound}: {stderr}");
        assert!(stderr.contains("cannot be a workspace") && stderr.contains(says), "{bound}: {stderr}");
        assert!(stderr.contains("under another name"), "{stderr}");
    }
    assert!(env.mock.requests().is_empty(), "no turn ran");
}
