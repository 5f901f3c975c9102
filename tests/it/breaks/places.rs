//! Guarded places and the sweep, attacked: a command that follows links out of the workspace
//! through the sweep, leaves configuration that runs code in a repository it made or nested,
//! redirects a repository to a directory it wrote, renames an old directory to `.git` or turns
//! a `.git` link elsewhere, writes through a `.git` link, renames the parent of a read-only
//! place away, exhausts the walk, hangs the next command's walk, or writes tool configuration the
//! guarded list does not name. Each is judged by what is left on disk, or by what the user's
//! own `git status` runs afterwards outside any sandbox.

use std::path::Path;
use std::time::Duration;

use super::{
    committed, kernel_keeps_it, outside, repository, sh, sh_out, supervise, supervise_as_nobody, supervise_at_home,
    supervise_for, user_runs_git_status,
};
use crate::exec::{bash_calls, run};
use crate::support::{Reply, TestEnv};

/// A command in a workspace that is no repository makes `.git` with `hooks` a link to a
/// directory outside: the sweep, run by the unconfined supervisor, deletes what is there.
#[tokio::test]
async fn the_sweep_deletes_nothing_outside_the_workspace_through_a_link_in_a_new_repository() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let victim = outside("sweep-hooks");
    std::fs::write(victim.path().join("precious.txt"), "keep me").unwrap();
    std::fs::create_dir_all(victim.path().join("dir")).unwrap();
    std::fs::write(victim.path().join("dir/inner.txt"), "keep me too").unwrap();
    let line = format!("mkdir .git && ln -s {} .git/hooks && echo linked", victim.path().display());
    let results = bash_calls(&env, &[&line], &["--mode", "bypass"]).await;
    assert!(results[0].contains("linked"), "{results:?}");
    assert!(victim.path().join("precious.txt").exists(), "the sweep deleted a file outside: {results:?}");
    assert!(victim.path().join("dir/inner.txt").exists(), "the sweep deleted a directory outside: {results:?}");
}

/// `.github` or `.hg` made as a link to another project: the sweep removes that project's
/// `workflows` and `hgrc`.
#[test]
fn the_sweep_deletes_nothing_outside_the_workspace_through_a_linked_parent() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let other = outside("sweep-parent");
    std::fs::create_dir_all(other.path().join("workflows")).unwrap();
    std::fs::write(other.path().join("workflows/ci.yml"), "on: push").unwrap();
    std::fs::create_dir_all(other.path().join(".hg")).unwrap();
    std::fs::write(other.path().join(".hg/hgrc"), "[ui]").unwrap();
    let script = format!("ln -s {0} .github && ln -s {0}/.hg .hg && echo linked", other.path().display());
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("linked"), "{}", output.stderr);
    assert!(other.path().join("workflows/ci.yml").exists(), "another project's workflows went: {}", output.stderr);
    assert!(other.path().join(".hg/hgrc").exists(), "another project's hgrc went: {}", output.stderr);
}

/// The same as an unprivileged user (a user namespace): the user's own files outside go.
#[test]
fn as_an_unprivileged_user_the_sweep_deletes_nothing_outside_the_workspace_either() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    sh(dir.path(), "chown -R 65534:65534 . && chmod 755 .");
    let outside = outside("sweep-nobody");
    let victim = outside.path();
    std::fs::write(victim.join("precious.txt"), "keep me").unwrap();
    sh(victim, "chown -R 65534:65534 . && chmod 755 .");
    // The victim is the user's, but outside the workspace: no command may write it.
    let script =
        format!("echo x > {0}/written 2>&1; mkdir .git && ln -s {0} .git/hooks && echo linked", victim.display());
    let Some(output) = supervise_as_nobody(&ws, &script, &[]) else { return };
    assert!(output.stdout.contains("linked") && !victim.join("written").exists(), "{}", output.stderr);
    assert!(victim.join("precious.txt").exists(), "the sweep deleted the user's file outside: {}", output.stderr);
}

/// The sweep keeps a repository a command made and takes its hooks, but not its configuration:
/// `core.fsmonitor` (or `core.hooksPath`) runs at the user's next `git status`.
#[test]
fn a_new_repository_keeps_no_configuration_that_runs_code() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let marker = dir.path().join("pwned-new-repository");
    let script = format!("git init -q . && git config core.fsmonitor 'touch {}; false' && echo made", marker.display());
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("made"), "{}", output.stderr);
    user_runs_git_status(&ws);
    assert!(!marker.exists(), "the new repository's fsmonitor ran outside the sandbox");
}

/// `.git/commondir` is writable: written, it sends git to another directory's `config` and
/// `hooks` (a copy the command made, with `core.fsmonitor`), for every later git command.
#[test]
fn a_git_directory_cannot_be_redirected_through_commondir() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let marker = dir.path().join("pwned-commondir");
    let script = format!(
        "mkdir .git/elsewhere && cp -r .git/objects .git/refs .git/HEAD .git/config .git/elsewhere/ && \
         git config -f .git/elsewhere/config core.fsmonitor 'touch {}; false' && \
         echo elsewhere > .git/commondir && echo redirected",
        marker.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("redirected"), "{}", output.stderr);
    let _ = std::fs::remove_file(&marker);
    user_runs_git_status(&ws);
    assert!(!marker.exists(), "the redirected configuration ran outside the sandbox");
}

/// A repository a command makes below the top of the root is neither bound nor swept; staged
/// in the outer repository, the outer `git status` runs its `core.fsmonitor`.
#[test]
fn a_repository_a_command_nests_runs_nothing_at_the_next_git_status() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let marker = dir.path().join("pwned-nested");
    let script = format!(
        "git init -q sub && echo s > sub/s && git -C sub add s && git -C sub -c user.name=t -c user.email=t@t commit -qm s \
         && git -C sub config core.fsmonitor 'touch {}; false' && git add sub 2>/dev/null && echo nested",
        marker.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("nested"), "{}", output.stderr);
    let _ = std::fs::remove_file(&marker);
    user_runs_git_status(&ws);
    assert!(!marker.exists(), "the nested repository's fsmonitor ran outside the sandbox");
}

/// A submodule's git directory (`.git/modules/sub`) has its `config` bound read-only but is no
/// anchor: renamed away and replaced by a copy, its configuration is the command's.
#[test]
fn a_submodule_git_directory_cannot_be_renamed_away_and_replaced() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let upstream = dir.path().join("upstream");
    std::fs::create_dir_all(&upstream).unwrap();
    sh(&upstream, "git init -q . && echo s > s && git add s && git -c user.name=t -c user.email=t@t commit -qm s");
    sh(
        &ws,
        &format!(
            "git -c protocol.file.allow=always submodule add -q {} sub && git -c user.name=t -c user.email=t@t commit -qm sub",
            upstream.display()
        ),
    );
    let marker = dir.path().join("pwned-submodule");
    let script = format!(
        "mv .git/modules/sub .git/modules/sub.old && cp -a .git/modules/sub.old .git/modules/sub && \
         git -C sub config core.fsmonitor 'touch {}; false' && echo replaced",
        marker.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(!output.stdout.contains("replaced"), "the submodule's git directory was replaced: {}", output.stderr);
    user_runs_git_status(&ws);
    assert!(!marker.exists(), "the replaced submodule configuration ran outside the sandbox");
}

/// `core.hooksPath = tools/hooks` is bound read-only, but `tools` can be renamed away and a new
/// `tools/hooks` made in its place.
#[test]
fn the_hooks_path_cannot_be_replaced_by_renaming_its_parent() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    sh(&ws, "mkdir -p tools/hooks && git config core.hooksPath tools/hooks");
    let marker = dir.path().join("pwned-hooks-path");
    let script = format!(
        "mv tools tools.old && mkdir -p tools/hooks && printf '#!/bin/sh\\ntouch {}\\n' > tools/hooks/pre-commit && \
         chmod +x tools/hooks/pre-commit && echo replaced",
        marker.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(!output.stdout.contains("replaced"), "the hooks directory was replaced: {}", output.stderr);
    sh(&ws, "echo two >> a.txt && git -c user.name=t -c user.email=t@t commit -qam two");
    assert!(!marker.exists(), "the planted hook ran outside the sandbox");
}

/// Projects share git settings through a tracked file the local configuration includes
/// (`git config include.path ../.gitconfig`); that file is writable to commands.
#[test]
fn a_file_the_repository_configuration_includes_is_read_only() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    sh(&ws, "echo '[alias]' > .gitconfig && git config --local include.path ../.gitconfig");
    let marker = dir.path().join("pwned-include");
    let script = format!("printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' > .gitconfig", marker.display());
    supervise(&ws, &script, &[]);
    user_runs_git_status(&ws);
    assert!(!marker.exists(), "configuration written into an included file ran outside the sandbox");
}

/// The walk reads at most 20,000 entries and goes depth first: a directory of 20,000 files
/// that the directory listing puts before `.git` and `.env` leaves the next command with
/// writable hooks and a readable `.env`.
#[test]
fn a_workspace_with_many_files_still_gets_its_hooks_read_only_and_secrets_hidden() {
    if !kernel_keeps_it() {
        return;
    }
    let (_dir, ws) = repository();
    std::fs::write(ws.join(".env"), "TOKEN=many-files-secret\n").unwrap();
    // What a command could make in one go; the listing order is the file system's.
    let mut made = 0;
    while made < 12 && !first_in_listing(&ws) {
        let fill = ws.join(format!("fill{made}"));
        std::fs::create_dir_all(&fill).unwrap();
        for n in 0..20_001 {
            std::fs::File::create(fill.join(n.to_string())).unwrap();
        }
        made += 1;
    }
    assert!(first_in_listing(&ws), "no fill directory came before .git and .env in the listing");
    let output = supervise(&ws, "cat .env; echo x > .git/hooks/pre-commit && echo hook-written", &[]);
    assert!(!output.stdout.contains("many-files-secret"), ".env was read: {}", output.stdout);
    assert!(!output.stdout.contains("hook-written"), "a hook was written: {}", output.stdout);
}

/// Whether a directory named `fill…` comes before both `.git` and `.env` in `ws`'s listing.
fn first_in_listing(ws: &Path) -> bool {
    for entry in std::fs::read_dir(ws).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("fill") {
            return true;
        }
        if name == ".git" || name == ".env" {
            return false;
        }
    }
    false
}

/// A workspace inside a writable place (`/tmp`, `[sandbox] writable`): the root is an anchor,
/// but its parent can be renamed, and a new directory with a planted hook put at its path.
#[test]
fn a_workspace_root_cannot_be_swapped_by_renaming_its_parent() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let parent = dir.path();
    let script = format!(
        "cd / && mv {p} {p}.moved && mkdir -p {ws} && cd {ws} && git init -q . && \
         printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo swapped",
        p = parent.display(),
        ws = ws.display()
    );
    let output = supervise(&ws, &script, &[]);
    let moved = parent.with_extension("moved");
    if moved.exists() {
        // Put the real workspace back so the temp dir cleans up.
        let _ = std::fs::remove_dir_all(parent);
        let _ = std::fs::rename(&moved, parent);
    }
    assert!(!output.stdout.contains("swapped"), "the workspace was swapped for another: {}", output.stderr);
}

/// A FIFO named `.git` blocks the walk of every later command: the supervisor reads it as a
/// `gitdir:` file before the command starts, and never gets an end of file.
#[test]
fn a_fifo_named_git_does_not_hang_the_next_command() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    supervise(&ws, "mkfifo sub/.git", &[]);
    let next = supervise_for(&ws, "echo next-command-ran", &[], Duration::from_secs(10));
    assert!(next.is_some_and(|output| output.stdout.contains("next-command-ran")), "the next command hung");
}

/// A `.git` file naming any directory makes the (unconfined) supervisor create `hooks/` and
/// `info/` in it before the next command: a write outside the workspace on the command's say.
#[test]
fn a_git_file_does_not_make_the_supervisor_write_outside_the_workspace() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("sub")).unwrap();
    let target = outside("gitfile");
    let script = format!("printf 'gitdir: {}\\n' > sub/.git", target.path().display());
    supervise(&ws, &script, &[]);
    supervise(&ws, "true", &[]);
    assert!(!target.path().join("hooks").exists(), "the supervisor made hooks/ outside the workspace");
    assert!(!target.path().join("info").exists(), "the supervisor made info/ outside the workspace");
}

/// Tool configuration that runs code and that the guarded list misses: lefthook's
/// `lefthook-local.yml` (merged into any lefthook setup, hooks installed by `lefthook install`
/// run it at the next commit) and a dev container's `.devcontainer.json` (whose
/// `initializeCommand` runs on the host when the editor reopens the folder in a container).
#[test]
fn tool_configuration_lefthook_and_dev_containers_read_is_guarded() {
    if !kernel_keeps_it() {
        return;
    }
    let (_dir, ws) = repository();
    let script = "printf 'pre-commit:\\n  commands:\\n    x:\\n      run: touch pwned\\n' > lefthook-local.yml; \
                  mkdir -p .lefthook/pre-commit && echo 'touch pwned' > .lefthook/pre-commit/x.sh; \
                  echo '{\"initializeCommand\": \"touch pwned\"}' > .devcontainer.json; true";
    let output = supervise(&ws, script, &[]);
    for planted in ["lefthook-local.yml", ".lefthook/pre-commit/x.sh", ".devcontainer.json"] {
        assert!(!ws.join(planted).exists(), "{planted} was written and kept: {}", output.stderr);
    }
}

/// End to end, nothing asked: in accept-edits mode with `make` remembered as allowed, the model
/// writes a Makefile (an edit inside the workspace, let through) and runs `make`, whose recipe
/// redirects the repository through `commondir`. The user's next `git status` runs its code.
#[tokio::test]
async fn accept_edits_and_an_allowed_make_do_not_reach_code_outside_the_sandbox() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    committed(&ws);
    let marker = env.dir.path().join("pwned-accept-edits");
    let makefile = format!(
        "all:\n\tmkdir -p .git/elsewhere && cp -r .git/objects .git/refs .git/HEAD .git/config .git/elsewhere/\n\
         \tgit config -f .git/elsewhere/config core.fsmonitor 'touch {}; false'\n\techo elsewhere > .git/commondir\n",
        marker.display()
    );
    env.mock.push(Reply::tool_calls(&[
        ("call_0", "write", serde_json::json!({"path": "Makefile", "content": makefile})),
        ("call_1", "bash", serde_json::json!({"command": "make"})),
    ]));
    env.mock.push(Reply::text(&["Done."]));
    let cwd = env.cwd();
    let (status, _, stderr) =
        run(&env, &["exec", "--cwd", &cwd, "--mode", "accept-edits", "--allow", "bash:make", "go"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    assert!(ws.join("Makefile").exists(), "the edit was let through: {stderr}");
    let _ = std::fs::remove_file(&marker);
    user_runs_git_status(&ws);
    assert!(!marker.exists(), "code the model wrote ran outside the sandbox, nothing asked");
}

/// Git reads `hooksPath = tools/hooks ; shared` as `tools/hooks` (a comment ends the value);
/// the walk's own reading keeps the comment, finds no such directory and binds nothing.
#[test]
fn a_hooks_path_followed_by_a_comment_is_still_read_only() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    sh(&ws, "mkdir -p tools/hooks && printf '[core]\\n\\thooksPath = tools/hooks ; shared\\n' >> .git/config");
    let marker = dir.path().join("pwned-comment");
    let script = format!(
        "printf '#!/bin/sh\\ntouch {}\\n' > tools/hooks/pre-commit && chmod +x tools/hooks/pre-commit",
        marker.display()
    );
    supervise(&ws, &script, &[]);
    sh(&ws, "echo two >> a.txt && git -c user.name=t -c user.email=t@t commit -qam two");
    assert!(!marker.exists(), "the planted hook ran outside the sandbox");
}

/// A relative `core.hooksPath` in the user's global configuration (one hooks directory per
/// repository, `.githooks`) is never read: that directory stays writable.
#[test]
fn a_hooks_path_from_the_global_configuration_is_read_only() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(home.join(".gitconfig"), "[core]\n\thooksPath = .githooks\n").unwrap();
    std::fs::create_dir_all(ws.join(".githooks")).unwrap();
    let marker = dir.path().join("pwned-global");
    let script = format!(
        "printf '#!/bin/sh\\ntouch {}\\n' > .githooks/pre-commit && chmod +x .githooks/pre-commit",
        marker.display()
    );
    supervise_at_home(&ws, &script, &home);
    let commit = format!("HOME={} git -c user.name=t -c user.email=t@t commit -qam two --allow-empty", home.display());
    sh(&ws, &commit);
    assert!(!marker.exists(), "the planted hook ran outside the sandbox");
}

/// `core.hooksPath` given only in the environment (`GIT_CONFIG_COUNT`, as an editor or a shell
/// profile may set it for every git) was never read: that directory stayed writable.
#[test]
fn a_hooks_path_from_the_environment_is_read_only() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    std::fs::create_dir_all(ws.join("tools/hooks")).unwrap();
    let env =
        [("GIT_CONFIG_COUNT", "1"), ("GIT_CONFIG_KEY_0", "core.hooksPath"), ("GIT_CONFIG_VALUE_0", "tools/hooks")];
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
    command.envs(env);
    let marker = dir.path().join("pwned-environment");
    let hook = "tools/hooks/pre-commit";
    let script = format!("printf '#!/bin/sh\\ntouch {}\\n' > {hook} && chmod +x {hook}", marker.display());
    let kind = if super::running_as_root() { "mount" } else { "user" };
    super::run_supervisor(command, kind, &ws, &script, &[], Duration::from_secs(60));
    let commit = "git -c user.name=t -c user.email=t@t commit -qam two --allow-empty";
    let output = std::process::Command::new("sh").args(["-c", commit]).envs(env).current_dir(&ws).status().unwrap();
    assert!(output.success() && !marker.exists(), "the planted hook ran outside the sandbox");
}

/// A file replaced by rename outside the namespace (git writes `config` through `config.lock`,
/// editors and cairn's own edit tools save through a temporary file) loses its bind in the
/// namespace: a command still running could then write `.git/config` and read the new `.env`
/// until the supervisor's watcher binds or covers it again. The watcher acts on its inotify
/// event, so a command that tries in the instant between (the watcher's wake-up) can still get
/// through; what this spec holds
/// the boundary to is that the place is guarded again once the watcher had its turn, here
/// two seconds after the save, which no loaded machine takes.
#[test]
fn a_place_replaced_outside_while_a_command_runs_stays_guarded() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    std::fs::write(ws.join(".env"), "TOKEN=old\n").unwrap();
    let marker = dir.path().join("pwned-replaced");
    let script = format!(
        "while [ ! -e saved ]; do sleep 0.05; done; sleep 2; \
         for i in $(seq 100); do printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' >> .git/config 2>/dev/null \
         && break; sleep 0.05; done; for i in $(seq 100); do grep -q . .env 2>/dev/null && cat .env && break; sleep 0.05; done",
        marker.display()
    );
    let dir_path = dir.path().to_path_buf();
    let user = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(1000));
        // What the user does meanwhile: a git setting, and a save of .env.
        let ws = dir_path.join("ws");
        sh(
            &ws,
            "git config user.name someone && printf 'TOKEN=new-secret\\n' > .env.tmp && mv .env.tmp .env && touch saved",
        );
    });
    let output = supervise(&ws, &script, &[]);
    user.join().unwrap();
    assert!(!output.stdout.contains("new-secret"), "the saved .env was read: {}", output.stdout);
    user_runs_git_status(&ws);
    assert!(!marker.exists(), "configuration written while the command ran runs outside the sandbox");
}

/// Longer than the sweep allows file times to lag the clock: what was made before this is old
/// by its birth time.
const AGED: Duration = Duration::from_secs(3);

/// The sweep judged a repository new by its birth time, which a rename keeps: a directory that
/// stood before the command, filled with a git directory and a hook, then renamed to `.git`,
/// kept its hook, which ran at the user's next commit.
#[test]
fn a_repository_renamed_from_an_old_directory_is_new_and_keeps_no_hooks() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("old")).unwrap();
    std::thread::sleep(AGED);
    let marker = dir.path().join("pwned-renamed-hook");
    let script = format!(
        "git init -q n && cp -r n/.git/. old/ && rm -rf n && printf '#!/bin/sh\\ntouch {}\\n' > old/hooks/pre-commit && \
         chmod +x old/hooks/pre-commit && mv old .git && echo planted",
        marker.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("planted"), "{}", output.stderr);
    sh(&ws, "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x");
    assert!(!marker.exists(), "the hook of a renamed repository ran outside the sandbox: {}", output.stderr);
}

/// The same over two commands: the first makes a directory that is no repository yet (no
/// `refs/`, so not a git directory's shape either), its configuration running code
/// (`core.fsmonitor`); a later one completes it and renames it to `.git`.
#[test]
fn a_directory_one_command_made_and_a_later_one_renamed_to_git_keeps_no_configuration_that_runs_code() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let marker = dir.path().join("pwned-renamed-config");
    let script = format!(
        "git init -q n && mkdir old && cp -r n/.git/. old/ && rm -rf n old/refs && \
         git config -f old/config core.fsmonitor 'touch {}; false' && echo made",
        marker.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("made"), "{}", output.stderr);
    std::thread::sleep(AGED);
    let output = supervise(&ws, "mkdir old/refs && mv old .git && echo renamed", &[]);
    assert!(output.stdout.contains("renamed"), "{}", output.stderr);
    user_runs_git_status(&ws);
    assert!(!marker.exists(), "the renamed directory's fsmonitor ran outside the sandbox: {}", output.stderr);
}

/// A workspace whose `.git` is a link to its git directory (as Android's `repo` lays out its
/// checkouts): the walk took the link for no repository, and a command wrote its hooks and
/// configuration.
#[test]
fn hooks_and_configuration_through_a_git_symlink_are_read_only() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    sh(&ws, "mv .git gitstore && ln -s gitstore .git");
    let hook = dir.path().join("pwned-symlinked-hook");
    let fsmonitor = dir.path().join("pwned-symlinked-config");
    let script = format!(
        "printf '#!/bin/sh\\ntouch {}\\n' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit && echo hook-written; \
         git config core.fsmonitor 'touch {}; false' && echo config-written; true",
        hook.display(),
        fsmonitor.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(!output.stdout.contains("hook-written"), "a hook was written through the link: {}", output.stdout);
    assert!(!output.stdout.contains("config-written"), "git config wrote through the link: {}", output.stdout);
    user_runs_git_status(&ws);
    sh(&ws, "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x");
    assert!(!hook.exists(), "the planted hook ran outside the sandbox");
    assert!(!fsmonitor.exists(), "the planted fsmonitor ran outside the sandbox");
}

/// The link itself is no mount: a command turns `.git` to a copy of the git directory with a
/// hook of its own. That copy is a repository the command made.
#[test]
fn a_git_symlink_turned_to_another_directory_leads_to_no_hook() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    sh(&ws, "mv .git gitstore && ln -s gitstore .git");
    let marker = dir.path().join("pwned-retargeted");
    let script = format!(
        "cp -r gitstore other && printf '#!/bin/sh\\ntouch {0}\\n' > other/hooks/pre-commit && \
         chmod +x other/hooks/pre-commit && git config -f other/config core.fsmonitor 'touch {0}; false' && \
         ln -sfn other .git && echo turned",
        marker.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("turned"), "{}", output.stderr);
    user_runs_git_status(&ws);
    sh_out(&ws, "git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x");
    assert!(!marker.exists(), "the hook behind the turned link ran outside the sandbox: {}", output.stderr);
    assert!(ws.join("gitstore/HEAD").exists(), "the user's git directory stays");
}

/// A repository's configuration names a hooks directory and an included file that are not there
/// yet: no mount covers what does not exist, so what a command makes there is taken away after it.
#[test]
fn a_hooks_directory_and_an_include_the_configuration_names_but_lacks_are_taken_away_once_made() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    committed(&ws);
    sh(&ws, "git config core.hooksPath .githooks && git config include.path ../team.gitconfig");
    let (hook, fsmonitor) = (dir.path().join("pwned-hooks-path"), dir.path().join("pwned-include"));
    // Each step on its own: the watcher may take a place away as soon as it appears.
    let script = format!(
        "mkdir -p .githooks; printf '#!/bin/sh\\ntouch {}\\n' > .githooks/pre-commit; chmod +x .githooks/pre-commit; \
         printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' > team.gitconfig; sleep 1; echo ran",
        hook.display(),
        fsmonitor.display()
    );
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("ran"), "{}", output.stderr);
    sh_out(&ws, "git status --short; git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x");
    assert!(!hook.exists(), "the hook the command made in core.hooksPath ran outside: {}", output.stderr);
    assert!(!fsmonitor.exists(), "the included file the command made ran its fsmonitor outside: {}", output.stderr);
    assert!(!ws.join(".githooks").exists() && !ws.join("team.gitconfig").exists(), "{}", output.stderr);
}
