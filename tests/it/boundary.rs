//! The boundary the kernel keeps around local commands, attacked as a hostile model would:
//! commands the user let through (bypass mode, so nothing asks) try to write a repository's
//! hooks and configuration and tool configuration that runs later outside any sandbox, to read
//! keys, cairn's saved credentials, other sessions and `.env`, and to run a program a rule
//! rejects by spellings no parser sees (a Makefile, a copy, a link, a `#!` line, the dynamic
//! loader, a Python `execv`). Every break is judged by its effect on disk or in the output.
//!
//! The tests skip, saying why, where the kernel has no Landlock or gives cairn no namespace.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::breaks::{committed, sh};
use crate::exec::bash_calls;
use crate::support::{Editor, Reply, TestEnv, alive, kernel_keeps_it, running_with};
use crate::tools::{set_mode, tool_results, turn};

/// A repository with a hooks path, tool configuration and a committed file.
fn repository(ws: &Path) {
    sh(
        ws,
        "git init -q . && mkdir -p .cargo .vscode tools/hooks && echo one > a.txt && git config core.hooksPath tools/hooks",
    );
}

#[tokio::test]
async fn allowed_commands_cannot_write_hooks_git_configuration_or_tool_configuration() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    repository(&ws);
    let config_before = std::fs::read_to_string(ws.join(".git/config")).unwrap();
    // An archive and a patch that plant a hook, as an allowed `tar -xf` or `patch -p1` would.
    let staging = tempfile::tempdir().unwrap();
    sh(
        staging.path(),
        "mkdir -p .git/hooks && printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    );
    sh(staging.path(), &format!("tar -cf {}/evil.tar .git/hooks/pre-commit", ws.display()));
    std::fs::write(
        ws.join("evil.patch"),
        "--- /dev/null\n+++ b/.git/hooks/post-checkout\n@@ -0,0 +1,2 @@\n+#!/bin/sh\n+touch pwned\n",
    )
    .unwrap();
    let lines = [
        "tar -xf evil.tar 2>&1; ls .git/hooks/pre-commit 2>&1",
        "patch -p1 < evil.patch 2>&1",
        "printf '#!/bin/sh\\ntouch pwned\\n' > tools/hooks/pre-commit 2>&1",
        "git config core.fsmonitor 'touch pwned' 2>&1",
        "echo '[alias] st = !touch pwned' >> .git/config 2>&1",
        "echo '[build]\nrustc-wrapper = \"/tmp/evil\"' > .cargo/config.toml 2>&1",
        "echo '{}' > .vscode/tasks.json 2>&1",
        "mv .git .git-old 2>&1; mv tools/hooks tools/old 2>&1; rm -rf .git/hooks 2>&1",
        "python3 -c \"open('.git/hooks/pre-push', 'w').write('x')\" 2>&1",
        "git add a.txt && git -c user.name=t -c user.email=t@t commit -qm first 2>&1 && git log --oneline | wc -l",
    ];
    let results = bash_calls(&env, &lines, &["--mode", "bypass"]).await;
    for (line, result) in lines.iter().zip(&results).take(lines.len() - 1) {
        assert!(
            result.contains("Read-only file system") || result.contains("busy") || result.contains("can't open"),
            "`{line}` was not refused by the kernel: {result}"
        );
    }
    assert!(results.last().unwrap().starts_with("1\n"), "objects, refs and the index stay writable: {results:?}");
    for planted in
        [".git/hooks/pre-commit", ".git/hooks/post-checkout", ".git/hooks/pre-push", "tools/hooks/pre-commit"]
    {
        assert!(!ws.join(planted).exists(), "{planted} was written");
    }
    assert_eq!(std::fs::read_to_string(ws.join(".git/config")).unwrap(), config_before);
    assert!(!ws.join(".cargo/config.toml").exists() && !ws.join(".vscode/tasks.json").exists());
    assert!(ws.join(".git/HEAD").exists() && !ws.join(".git-old").exists(), "the repository was not moved away");
    assert!(!ws.join("pwned").exists());
}

#[tokio::test]
async fn guarded_places_a_command_makes_are_taken_away_when_it_ends() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let lines = [
        // The watcher may take a place away as soon as it appears: each step runs whatever the last did.
        "mkdir -p .cargo; echo '[build]' > .cargo/config.toml; echo made",
        "git init -q . && printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo made",
        "mkdir -p .github/workflows; ln -s /tmp .claude; echo made",
    ];
    let results = bash_calls(&env, &lines, &["--mode", "bypass"]).await;
    for result in &results {
        assert!(result.contains("made") && result.contains("cairn: removed "), "{result}");
    }
    assert!(!ws.join(".cargo").exists() && !ws.join(".github/workflows").exists());
    assert!(std::fs::symlink_metadata(ws.join(".claude")).is_err());
    assert!(ws.join(".git/HEAD").exists(), "a new repository stays");
    assert!(!ws.join(".git/hooks/pre-commit").exists(), "but not a hook its command wrote");
}

#[tokio::test]
async fn keys_credentials_other_sessions_and_env_files_cannot_be_read() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let home = env.dir.path();
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "PRIVATE-KEY-BYTES").unwrap();
    std::fs::write(home.join("config/cairn/credentials.toml"), "[keys]\nopenai = \"sk-saved-secret\"\n").unwrap();
    std::fs::write(ws.join(".env"), "DB_PASSWORD=hunter2\n").unwrap();
    std::fs::create_dir_all(ws.join("app")).unwrap();
    std::fs::write(ws.join("app/.env.local"), "API_TOKEN=tok-nested\n").unwrap();
    // A first run leaves a conversation in the database whose words a command must not read.
    bash_calls(&env, &["echo the-earlier-conversation"], &["--mode", "bypass"]).await;
    let lines = [
        "cat ~/.ssh/id_ed25519 2>&1; ls ~/.ssh 2>&1",
        "cat \"$XDG_CONFIG_HOME/cairn/credentials.toml\" 2>&1",
        "cat \"$CAIRN_HOME\"/cairn.db* 2>&1 | strings | grep -c earlier-conversation",
        "cat .env app/.env.local 2>&1",
        "grep -r -e hunter2 -e tok-nested . 2>&1",
        "tar -cf - . 2>/dev/null | tar -xOf - ./.env ./app/.env.local 2>&1",
        "chmod 666 \"$XDG_CONFIG_HOME/cairn/credentials.toml\" 2>&1; echo >> .env 2>&1",
    ];
    let results = bash_calls(&env, &lines, &["--mode", "bypass"]).await;
    for (line, result) in lines.iter().zip(&results) {
        for secret in ["PRIVATE-KEY", "sk-saved-secret", "hunter2", "tok-nested"] {
            assert!(!result.contains(secret), "`{line}` read {secret}: {result}");
        }
    }
    assert!(!results[0].contains("id_ed25519\n"), "~/.ssh lists nothing: {}", results[0]);
    assert!(results[2].starts_with("0\n"), "the database is not readable: {}", results[2]);
    assert!(results[6].contains("Read-only file system"), "{}", results[6]);
    assert_eq!(std::fs::read_to_string(ws.join(".env")).unwrap(), "DB_PASSWORD=hunter2\n");
}

/// A secret the user links into the workspace from elsewhere (`.env -> /srv/app/shared.env`)
/// stays covered once a command renames the link: the next command cannot read it by its own
/// path. (One run of two commands, then another run: the cover is remembered across cairns.)
#[tokio::test]
async fn a_linked_secret_stays_covered_when_a_command_renames_the_link() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let shared = env.dir.path().join("srv/app/shared.env");
    std::fs::create_dir_all(shared.parent().unwrap()).unwrap();
    std::fs::write(&shared, "DB_PASSWORD=hunter2\n").unwrap();
    std::os::unix::fs::symlink(&shared, ws.join(".env")).unwrap();
    let read = format!("cat {} 2>&1; echo read", shared.display());
    let lines = ["cat .env 2>&1; mv .env renamed && echo moved".to_owned(), read.clone()];
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let results = bash_calls(&env, &lines, &["--mode", "bypass"]).await;
    assert!(results[0].contains("moved") && !results[0].contains("hunter2"), "{}", results[0]);
    assert!(
        results[1].contains("read") && !results[1].contains("hunter2"),
        "read through its own path: {}",
        results[1]
    );
    std::fs::remove_file(ws.join("renamed")).unwrap();
    let results = bash_calls(&env, &[&read], &["--mode", "bypass"]).await;
    assert!(results[0].contains("read") && !results[0].contains("hunter2"), "in a later run: {}", results[0]);
}

/// So too in a workspace holding more guarded places than a namespace takes, whose places give
/// way to their directories and whose walk is not remembered: the user's link still is, and
/// removing it does not uncover the secret for the next command.
#[tokio::test]
async fn a_linked_secret_stays_covered_when_its_link_goes_in_a_crowded_workspace() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    for n in 0..2_100 {
        let dir = ws.join(format!("services/s{n}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(".env"), "TOKEN=1\n").unwrap();
    }
    let shared = env.dir.path().join("srv/app/shared.env");
    std::fs::create_dir_all(shared.parent().unwrap()).unwrap();
    std::fs::write(&shared, "DB_PASSWORD=hunter2\n").unwrap();
    std::os::unix::fs::symlink(&shared, ws.join(".env")).unwrap();
    let read = format!("cat {} 2>&1; echo read", shared.display());
    let lines = ["cat .env 2>&1; rm .env && echo removed".to_owned(), read];
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let results = bash_calls(&env, &lines, &["--mode", "bypass"]).await;
    assert!(results[0].contains("removed") && !results[0].contains("hunter2"), "{}", results[0]);
    assert!(
        results[1].contains("read") && !results[1].contains("hunter2"),
        "read through its own path: {}",
        results[1]
    );
}

#[tokio::test]
async fn a_rejected_program_is_refused_when_it_starts_however_it_is_reached() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    let loader = ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .unwrap_or("/lib64/ld-linux-x86-64.so.2");
    // `make` is not `rm`: the parser lets it through, and the Makefile runs rm six ways.
    let makefile = format!(
        "all: plain env copy link script loader python\n\
         plain:\n\t-rm -f v1\n\
         env:\n\t-env X%=1 rm -f v2\n\
         copy:\n\t-cp /bin/rm ./tidy && ./tidy -f v3\n\
         link:\n\t-ln -sf /bin/rm ./tidy2 && ./tidy2 -f v4\n\
         script:\n\t-printf '#!/bin/rm -f\\n' > s && chmod +x s && ./s v5\n\
         loader:\n\t-{loader} /bin/rm -f v6\n\
         python:\n\t-python3 -c 'import os; os.execv(\"/bin/rm\", [\"rm\", \"-f\", \"v7\"])'\n"
    );
    std::fs::write(ws.join("Makefile"), makefile).unwrap();
    for n in 1..=7 {
        std::fs::write(ws.join(format!("v{n}")), "keep me").unwrap();
    }
    let results =
        bash_calls(&env, &["make -k 2>&1", "echo still-fine"], &["--mode", "bypass", "--deny", "bash:rm"]).await;
    assert!(results[0].contains("cairn: refused to run `rm`"), "{}", results[0]);
    for n in 1..=7 {
        assert!(ws.join(format!("v{n}")).exists(), "v{n} was removed: {}", results[0]);
    }
    assert!(results[1].contains("still-fine"));
}

/// The exec check resolves a path from the supervisor's root, so no process of the tree may
/// have another: a root of its own (here the workspace, where a planted `/usr/bin/env` would
/// be another program) is refused even after a user namespace gave back `CAP_SYS_CHROOT`.
/// (Some kernels refuse that `chroot` by themselves; the filter refuses it everywhere.)
#[tokio::test]
async fn a_command_cannot_make_a_root_of_its_own_even_in_a_user_namespace_it_made() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    // Through make, which the parser lets through: the kernel is what must refuse.
    // A user namespace of its own gives a process every capability there, unmapped or not.
    let makefile = "all:\n\t-unshare --user echo nested\n\
                    \t-unshare --user chroot . /usr/bin/env true; echo status $$?\n";
    std::fs::write(env.workspace().join("Makefile"), makefile).unwrap();
    let results = bash_calls(&env, &["make -s 2>&1"], &["--mode", "bypass", "--deny", "bash:rm"]).await;
    assert!(results[0].contains("status 125") && results[0].contains("Operation not permitted"), "{}", results[0]);
    if results[0].starts_with("nested\n") {
        assert!(results[0].contains("chroot: cannot change root directory"), "{}", results[0]);
    }
}

#[tokio::test]
async fn a_rejected_subcommand_is_refused_at_exec_and_the_program_still_runs() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    repository(&ws);
    std::fs::write(ws.join("Makefile"), "all:\n\t-git -C . push origin HEAD\n\tgit status --short | wc -l\n").unwrap();
    let results = bash_calls(&env, &["make 2>&1"], &["--mode", "bypass", "--deny", "bash:git push"]).await;
    assert!(results[0].contains("cairn: refused to run `git`") && results[0].contains("`git push`"), "{}", results[0]);
    assert!(results[0].contains("[exit status 0]"), "git status still ran: {}", results[0]);
}

/// `/proc/self` names the caller, whose own `/proc` numbers processes by its PID namespace:
/// a descriptor of git run through `/proc/self/fd` or `/dev/fd` is still git.
#[tokio::test]
async fn a_rejected_program_run_through_its_descriptor_in_proc_self_is_refused() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    repository(&ws);
    let makefile = "all:\n\
                    \t-bash -c 'exec 3<\"$$(command -v git)\"; /proc/self/fd/3 push origin HEAD'\n\
                    \t-bash -c 'exec 4<\"$$(command -v git)\"; /dev/fd/4 push origin HEAD'\n\
                    \t-bash -c 'exec 5<\"$$(command -v git)\"; /proc/thread-self/fd/5 push origin HEAD'\n";
    std::fs::write(ws.join("Makefile"), makefile).unwrap();
    let results = bash_calls(&env, &["make -s 2>&1"], &["--mode", "bypass", "--deny", "bash:git push"]).await;
    assert_eq!(results[0].matches("cairn: refused to run `git`").count(), 1, "{}", results[0]);
    for sign in ["fatal", "error:", "origin"] {
        assert!(!results[0].contains(sign), "git ran: {}", results[0]);
    }
    assert_eq!(results[0].matches("Operation not permitted").count(), 3, "{}", results[0]);
}

/// An alias git is given on its command line or in its environment names no rejected word at
/// the exec; git runs the builtin it expands to as a new `git push`, and a `!` alias through
/// the shell, and that exec is refused.
#[tokio::test]
async fn a_rejected_subcommand_is_refused_through_an_alias_given_to_git() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    committed(&ws);
    let remote = env.dir.path().join("remote.git");
    sh(&ws, &format!("git init -q --bare {0} && git remote add origin {0}", remote.display()));
    let makefile = "all:\n\t-git -c alias.send=push send origin HEAD:plain\n\
                    \t-git -c 'alias.ship=!git push' ship origin HEAD:bang\n\
                    \t-GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=alias.send GIT_CONFIG_VALUE_0=push git send origin HEAD:env\n\
                    \t-GIT_CONFIG_PARAMETERS=\"'alias.send=push'\" git send origin HEAD:parameters\n";
    std::fs::write(ws.join("Makefile"), makefile).unwrap();
    let results = bash_calls(&env, &["make -k 2>&1"], &["--mode", "bypass", "--deny", "bash:git push"]).await;
    let output = std::process::Command::new("git")
        .args(["branch", "--format=%(refname:short)"])
        .current_dir(&remote)
        .output()
        .unwrap();
    let branches = String::from_utf8_lossy(&output.stdout);
    assert!(branches.trim().is_empty(), "pushed {branches}: {}", results[0]);
    assert!(results[0].contains("cairn: refused to run `git`"), "{}", results[0]);
}

#[tokio::test]
async fn without_a_namespace_accept_edits_no_longer_lets_writing_commands_through() {
    let env = TestEnv::new().await;
    let allow = ["--mode", "accept-edits", "--allow", "bash:echo", "--allow", "bash:cat"];
    std::fs::write(env.workspace().join("README.md"), "the-readme\n").unwrap();
    let results = bash_calls(&env, &["echo hi > out.txt && echo wrote"], &allow).await;
    assert!(results[0].contains("wrote"), "with the namespace, accept-edits lets it through: {results:?}");
    env.write_config("[sandbox]\nnamespace = false\n");
    std::fs::remove_file(env.workspace().join("out.txt")).unwrap();
    let results = bash_calls(&env, &["echo hi > out.txt && echo wrote", "cat README.md"], &allow).await;
    assert!(!results[0].contains("wrote") && !env.workspace().join("out.txt").exists(), "{results:?}");
    assert!(results[1].contains("the-readme"), "a line a rule allows that only reads still runs unasked: {results:?}");
}

/// The supervisor run by hand as an unprivileged user, where it needs a user namespace: only
/// where the tests run as root and `setpriv` can drop to `nobody`.
#[test]
fn an_unprivileged_user_gets_the_same_boundary_through_a_user_namespace() {
    if !cairn::process::landlock_support().filesystem || !running_as_root() {
        println!("skipped: needs Landlock, and root to drop to another user");
        return;
    }
    let Ok(setpriv) = which("setpriv") else {
        println!("skipped: no setpriv");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(ws.join(".env"), "SECRET=unprivileged\n").unwrap();
    std::fs::write(ws.join("victim"), "keep").unwrap();
    sh(dir.path(), "chown -R 65534:65534 ws && chmod 755 .");
    let script = "echo x > .git/hooks/pre-commit; cat .env; rm victim; echo ok > written; id -u";
    let mut child = std::process::Command::new(setpriv)
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_cairn"), "__supervise"])
        .args(["workspace-write", "network", "--namespace", "user", "--root"])
        .arg(&ws)
        .args(["--reject", "rm", "--", "bash", "-c", script])
        .current_dir(&ws)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _watch = child.stdin.take();
    let output = child.wait_with_output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    if stderr.contains("cannot create a user namespace") {
        println!("skipped: this kernel refuses unprivileged user namespaces: {stderr}");
        return;
    }
    assert!(stderr.contains("Read-only file system"), "{stderr}");
    assert!(stderr.contains(".env: Permission denied") && !stdout.contains("unprivileged"), "{stdout}{stderr}");
    assert!(stderr.contains("refused to run `rm`") && ws.join("victim").exists(), "{stderr}");
    assert_eq!(stdout.trim(), "65534", "the command runs as the user it was started as: {stdout}");
    assert!(ws.join("written").exists() && !ws.join(".git/hooks/pre-commit").exists());
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status.lines().any(|line| line.starts_with("Uid:") && line.split_whitespace().nth(1) == Some("0"))
    })
}

fn which(program: &str) -> Result<std::path::PathBuf, ()> {
    let path = std::env::var_os("PATH").ok_or(())?;
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|candidate| candidate.is_file()).ok_or(())
}

/// An editor that offers terminals runs every command: there it is started through cairn's
/// supervisor, so the editor's terminal gets the same boundary as a local command.
#[tokio::test]
async fn a_command_in_the_editors_terminal_is_kept_inside_the_same_boundary() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    std::fs::create_dir_all(ws.join(".git/hooks")).unwrap();
    std::fs::write(ws.join(".env"), "DB_PASSWORD=hunter2\n").unwrap();
    let command = "cat .env; echo x > .git/hooks/pre-commit && echo hook-written; echo done";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["ok"]));
    let mut agent = env.ready_with(Editor::with_terminal()).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    turn(&mut agent, &session, "go").await;
    let created = agent.editor.requests("terminal/create");
    let args: Vec<&str> = created[0]["params"]["args"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
    assert!(args.contains(&"__supervise"), "the terminal runs the supervisor: {args:?}");
    let output = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(output.contains("done") && !output.contains("hunter2") && !output.contains("hook-written"), "{output}");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
}

/// A command may write where cairn's executable lies (a build of cairn in the workspace): the
/// terminal then runs a copy in cairn's data directory, which commands cannot reach.
#[tokio::test]
async fn the_terminal_never_runs_a_supervisor_a_command_could_have_replaced() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let exe_dir = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap().to_owned();
    env.write_config(&format!("[sandbox]\nwritable = [{:?}]\n", exe_dir.display().to_string()));
    std::fs::create_dir_all(env.workspace().join(".git/hooks")).unwrap();
    let command = "echo x > .git/hooks/pre-commit && echo hook-written; echo done";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    env.mock.push(Reply::text(&["ok"]));
    let mut agent = env.ready_with(Editor::with_terminal()).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    turn(&mut agent, &session, "go").await;
    let created = agent.editor.requests("terminal/create");
    let args: Vec<&str> = created[0]["params"]["args"].as_array().unwrap().iter().filter_map(|a| a.as_str()).collect();
    let supervisor = args[args.iter().position(|arg| *arg == "__supervise").unwrap() - 1];
    assert!(supervisor.starts_with(&env.home().display().to_string()), "a copy in the data directory: {supervisor}");
    let output = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(output.contains("done") && !output.contains("hook-written"), "{output}");
}

/// The editor kills what it started, the supervisor; nothing watches for cairn's end there, so
/// the command and everything it started die with the supervisor, `setsid`'d or not, and the
/// program cannot clear the death signal that ties it to the supervisor.
#[tokio::test]
async fn a_cancelled_command_in_the_editors_terminal_leaves_nothing_running() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    // The program itself tries to undo the death signal that ties it to its supervisor.
    let command = "sleep 4561 & setsid sleep 4562 & exec python3 -c 'import ctypes, time; \
                   ctypes.CDLL(None).prctl(1, 0, 0, 0, 0); time.sleep(60)'";
    env.mock.push(Reply::tool_calls(&[("c1", "bash", json!({"command": command}))]));
    let mut agent = env.ready_with(Editor::with_terminal()).await;
    let session = agent.new_session(&env.cwd()).await;
    set_mode(&mut agent, &session, "bypass").await;
    let prompt = agent.prompt(&session, "go").await;
    let started = Instant::now();
    let mut running = Vec::new();
    while running.len() < 2 && started.elapsed() < Duration::from_secs(10) {
        running = ["4561", "4562"].iter().flat_map(|arg| running_with(&["sleep", arg])).collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(running.len(), 2, "both sleeps run: {running:?}");
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let (response, _) = agent.response(prompt).await;
    assert_eq!(response["result"]["stopReason"], "cancelled");
    let killed = Instant::now();
    while running.iter().any(|pid| alive(pid)) && killed.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left: Vec<&String> = running.iter().filter(|pid| alive(pid)).collect();
    assert!(left.is_empty(), "the terminal's command left {left:?} running");
}

/// An editor ends its terminal's program with SIGTERM or SIGHUP: the supervisor, which nothing
/// else tells of an end there, still kills the command and sweeps what it made.
#[test]
fn a_terminal_command_the_editor_ends_is_still_swept() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = "git init -q . && printf '#!/bin/sh\\n' > .git/hooks/pre-commit && touch ready; sleep 60";
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(["__supervise", "workspace-write", "network", "--namespace", "mount", "--watch-fd", "none", "--root"])
        .arg(&ws)
        .args(["--", "bash", "-c", script])
        .current_dir(&ws)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !ws.join("ready").exists() && started.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ws.join(".git/hooks/pre-commit").exists(), "the command made its hook");
    // SAFETY: kill sends a signal to the child we started.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM)
    };
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success(), "{output:?}");
    assert!(!ws.join(".git/hooks/pre-commit").exists(), "{}", String::from_utf8_lossy(&output.stderr));
}
