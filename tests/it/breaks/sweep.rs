//! The sweep after a command, attacked where its walk does not look: a repository made after
//! enough files to spend the walk's budget, one made deeper than the walk goes or inside a
//! directory it skips, and a bare one (a directory with git's own shape, no `.git`). Each is
//! judged by what the user's own git runs afterwards, outside any sandbox. And the walk before
//! a command, flooded by the command before it.

use super::{kernel_keeps_it, outside, sh, sh_out, supervise, user_runs_git_status};

/// A hook that touches `marker` and a configuration that runs a program (`core.fsmonitor` at
/// `git status`, `core.sshCommand` at `git ls-remote ssh://…`) planted in the git directory
/// `git_dir` (relative to the command's directory).
fn plant(git_dir: &str, marker: &std::path::Path) -> String {
    format!(
        "printf '#!/bin/sh\\ntouch {m}\\n' > {g}/hooks/pre-commit && chmod +x {g}/hooks/pre-commit && \
         git config -f {g}/config core.fsmonitor 'touch {m}; false' && \
         git config -f {g}/config core.sshCommand 'touch {m}; false'",
        g = git_dir,
        m = marker.display()
    )
}

/// What the user's git does next in the repository at `dir`: status, a commit, a fetch.
fn user_runs_git(dir: &std::path::Path) -> String {
    sh_out(
        dir,
        "git status --short; git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x; \
         git ls-remote ssh://nowhere.invalid/x",
    )
}

/// 20,100 files in one directory spend the walk's budget before it reaches the directory the
/// command then made a repository in.
#[test]
fn a_repository_made_after_enough_files_to_spend_the_walk_keeps_no_hook_or_setting() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let marker = dir.path().join("pwned-budget");
    let script = format!(
        "mkdir a && (cd a && seq 1 20100 | xargs touch) && mkdir b && git init -q b/z && {} && echo planted",
        plant("b/z/.git", &marker)
    );
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("planted"), "{}", output.stderr);
    let git = user_runs_git(&ws.join("b/z"));
    assert!(!marker.exists(), "the planted hook or setting ran outside the sandbox: {git}\n{}", output.stderr);
}

/// Deeper than the walk's four levels, and inside `node_modules` and `target`, which it skips.
#[test]
fn a_repository_made_deep_or_in_a_skipped_directory_keeps_no_hook_or_setting() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("node_modules/left-pad")).unwrap();
    std::fs::create_dir_all(ws.join("target/debug")).unwrap();
    // Below directories that stood unchanged and that the walk before did not read, a repository
    // is found only while an allowance lasts (`survey.rs`); these are made where it always is.
    for (place, name) in [("a/b/c/d/e/f", "deep"), ("node_modules/x", "modules"), ("target/y", "target")] {
        let marker = dir.path().join(format!("pwned-{name}"));
        let script = format!("git init -q {place} && {} && echo planted", plant(&format!("{place}/.git"), &marker));
        let output = supervise(&ws, &script, &[]);
        assert!(output.stdout.contains("planted"), "{place}: {}", output.stderr);
        let git = user_runs_git(&ws.join(place));
        assert!(!marker.exists(), "{place}: the planted hook or setting ran outside: {git}\n{}", output.stderr);
    }
}

/// A directory turned into a bare repository (`HEAD`, `objects/`, `refs/`, `config`): git takes
/// it for one when the user runs it there.
#[test]
fn a_bare_repository_a_command_makes_keeps_no_hook_or_setting() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("plain")).unwrap();
    let marker = dir.path().join("pwned-bare");
    let script = format!("git init -q --bare plain && {} && echo planted", plant("plain", &marker));
    let output = supervise(&ws, &script, &[]);
    assert!(output.stdout.contains("planted"), "{}", output.stderr);
    let git = sh_out(&ws.join("plain"), "git ls-remote ssh://nowhere.invalid/x; git log");
    assert!(!marker.exists(), "the bare repository's setting ran outside the sandbox: {git}\n{}", output.stderr);
}

/// The walk that finds secrets and repositories reads a bounded number of entries, and a
/// command decides how many lie in its way: one that made 21,000 files left the next command's
/// walk short of a `.env` and a nested repository's hooks it had found before. What a walk
/// found stays found (kept in cairn's data directory, which commands do not see).
#[test]
fn a_command_that_floods_the_workspace_does_not_uncover_what_was_found_before() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ws, data) = (dir.path().join("ws"), dir.path().join("data"));
    std::fs::create_dir_all(ws.join("app/server/config")).unwrap();
    std::fs::write(ws.join("app/server/config/.env.production"), "DB_PASSWORD=DEEP_SECRET\n").unwrap();
    std::fs::create_dir_all(ws.join("libs/deep/core")).unwrap();
    sh(&ws.join("libs/deep/core"), "git init -q .");
    let own = ["--own", data.to_str().unwrap()];
    let read =
        "cat app/server/config/.env.production; echo x > libs/deep/core/.git/hooks/pre-commit && echo hook-written";
    let first = supervise(&ws, &format!("{read}; mkdir flood && cd flood && seq 1 21000 | xargs touch"), &own);
    assert!(!first.stdout.contains("DEEP_SECRET") && !first.stdout.contains("hook-written"), "{}", first.stdout);
    let second = supervise(&ws, read, &own);
    assert!(!second.stdout.contains("DEEP_SECRET"), "the flood uncovered the secret: {}", second.stdout);
    assert!(!second.stdout.contains("hook-written"), "the flood freed the hooks: {}", second.stdout);
    assert!(!ws.join("libs/deep/core/.git/hooks/pre-commit").exists());
}

/// A scratch workspace with no repository of its own, in a directory commands may write: the
/// command makes a repository above it, where git run in the workspace finds it, with a
/// setting that runs a program. The sweep cleans it as any repository the command made.
#[test]
fn a_repository_a_command_makes_above_the_workspace_runs_nothing_at_the_users_git() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (above, ws) = (dir.path().join("scratch"), dir.path().join("scratch/work"));
    std::fs::create_dir_all(&ws).unwrap();
    let marker = outside("above-ran");
    let ran = marker.path().join("ran");
    let plant =
        format!("git init -q .. && git -C .. config core.fsmonitor 'touch {}; false' && echo planted", ran.display());
    let output = supervise(&ws, &plant, &[]);
    assert!(output.stdout.contains("planted"), "{}{}", output.stdout, output.stderr);
    user_runs_git_status(&ws);
    assert!(!ran.exists(), "the repository the command made above the workspace ran its fsmonitor outside");
    assert!(above.join(".git").exists(), "the repository stays, without what runs code");
}

/// The seventh pass's 14: a command made 10,000 `.env` files, and every later command started
/// in a minute, its namespace taking a mount for each and one for each directory above. Now
/// the directory holding them is covered whole, and a root that itself holds more than a
/// namespace takes refuses the command plainly instead of starting it slowly.
#[test]
fn a_command_that_makes_thousands_of_secrets_slows_no_later_command_and_uncovers_none() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(ws.join("app")).unwrap();
    std::fs::write(ws.join("app/.env"), "API_KEY=APP_SECRET\n").unwrap();
    let flood =
        "mkdir flood && cd flood && for i in $(seq 1 3000); do mkdir d$i && echo K=FLOOD_SECRET > d$i/.env; done";
    let first = supervise(&ws, &format!("{flood}; echo made"), &[]);
    assert!(first.stdout.contains("made"), "{}{}", first.stdout, first.stderr);
    let second = supervise(&ws, "cat app/.env flood/d7/.env; ls flood | wc -l; echo ran", &[]);
    assert!(second.stdout.contains("ran"), "the next command did not run: {}{}", second.stdout, second.stderr);
    assert!(!second.stdout.contains("SECRET"), "a secret was uncovered: {}", second.stdout);
    let third = supervise(&ws, "for i in $(seq 1 4100); do echo K=ROOT_SECRET > .env.$i; done; echo made", &[]);
    assert!(third.stdout.contains("made"), "{}{}", third.stdout, third.stderr);
    let refused = supervise(&ws, "cat .env.1; echo ran", &[]);
    assert!(!refused.stdout.contains("ran") && !refused.stdout.contains("ROOT_SECRET"), "{}", refused.stdout);
    assert!(refused.stderr.contains("[sandbox] visible"), "the refusal says what to do: {}", refused.stderr);
}

/// The eighth pass's B7: the cover a flood got was remembered, so `src/` stayed empty for every
/// later command after the flood was gone.
#[test]
fn a_flood_leaves_no_cover_behind_once_it_is_gone() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ws, data) = (dir.path().join("ws"), dir.path().join("data"));
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    let own = ["--own", data.to_str().unwrap()];
    let flood = "cd src && for i in $(seq 1 2100); do mkdir d$i && echo K=1 > d$i/.env; done; echo made";
    assert!(supervise(&ws, flood, &own).stdout.contains("made"));
    let flooded = supervise(&ws, "ls src | wc -l; echo ran", &own);
    assert!(flooded.stdout.contains("ran"), "{}{}", flooded.stdout, flooded.stderr);
    sh(&ws, "rm -rf src/d*");
    let after = supervise(&ws, "cat src/main.rs", &own);
    assert!(after.stdout.contains("fn main"), "src stayed covered: {}{}", after.stdout, after.stderr);
}

/// The eighth pass's B8: a secret covered where a link in the workspace leads was not
/// remembered, so a flood that cut the next walk short uncovered it.
#[test]
fn a_flood_does_not_uncover_a_secret_a_link_leads_to() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ws, data) = (dir.path().join("ws"), dir.path().join("data"));
    let away = outside("linked-secret");
    std::fs::create_dir_all(away.path().join("private")).unwrap();
    std::fs::write(away.path().join("private/.env"), "API_KEY=LINKED_SECRET\n").unwrap();
    std::fs::create_dir_all(ws.join("a/b")).unwrap();
    std::os::unix::fs::symlink(away.path().join("private"), ws.join("a/b/secrets")).unwrap();
    let own = ["--own", data.to_str().unwrap()];
    let read = "cat a/b/secrets/.env; echo read";
    let first = supervise(&ws, &format!("{read}; mkdir flood && cd flood && seq 1 21000 | xargs touch"), &own);
    assert!(first.stdout.contains("read") && !first.stdout.contains("LINKED_SECRET"), "{}", first.stdout);
    // Not for one walk only (the ninth pass's B2: the memory was written again without it).
    for _ in 0..2 {
        let after = supervise(&ws, read, &own);
        assert!(after.stdout.contains("read"), "{}{}", after.stdout, after.stderr);
        assert!(!after.stdout.contains("LINKED_SECRET"), "the flood uncovered the linked secret: {}", after.stdout);
    }
}

/// The tenth pass's B4: a command linked `app/.env -> ../src/main.rs`; the next took the link
/// away, and every later command still found `src/main.rs` covered: the memory kept the target
/// without the link that led to it.
#[test]
fn a_link_a_command_plants_and_takes_away_leaves_no_cover_behind() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ws, data) = (dir.path().join("ws"), dir.path().join("data"));
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(ws.join("app")).unwrap();
    std::fs::write(ws.join("src/main.rs"), "fn main() {}\n").unwrap();
    let own = ["--own", data.to_str().unwrap()];
    assert!(supervise(&ws, "ln -s ../src/main.rs app/.env && echo planted", &own).stdout.contains("planted"));
    let covered = supervise(&ws, "cat src/main.rs; rm app/.env; echo removed", &own);
    assert!(covered.stdout.contains("removed") && !covered.stdout.contains("fn main"), "{}", covered.stdout);
    for _ in 0..2 {
        let after = supervise(&ws, "cat src/main.rs", &own);
        assert!(after.stdout.contains("fn main"), "the link's cover stayed: {}{}", after.stdout, after.stderr);
    }
}
