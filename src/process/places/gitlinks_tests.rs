//! The repositories a command stages as submodules where the sweep's walk does not look, on a
//! real disk with the user's git: below a `node_modules` that stood unchanged, named only in
//! `.gitmodules`, nested in a repository the walk never saw, renamed into place, and the
//! indexes a hostile command writes by hand.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::super::survey::CLOCK_LAG;
use super::super::sweep::{before, sweep};

pub(in crate::process::places) fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// A project as it stood before the session: a repository whose `node_modules` (ignored, so
/// the walk before never read it) holds `pkg`, an old directory; aged past the clock's lag.
fn project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap().join("ws");
    fs::create_dir_all(root.join("node_modules/pkg")).unwrap();
    fs::write(root.join("node_modules/pkg/index.js"), "module.exports = 1\n").unwrap();
    fs::write(root.join(".gitignore"), "node_modules/\n").unwrap();
    git(&root, &["init", "-q"]);
    git(&root, &["add", "."]);
    git(&root, &["commit", "-qm", "one"]);
    std::thread::sleep(CLOCK_LAG + std::time::Duration::from_secs(1));
    (dir, root)
}

/// What the command does in `dir`: a repository with a commit and a setting that runs a
/// program at `git status`.
fn planted(dir: &Path) -> String {
    git(dir, &["init", "-q"]);
    git(dir, &["commit", "-q", "--allow-empty", "-m", "s"]);
    git(dir, &["config", "core.fsmonitor", "touch pwned; false"]);
    git(dir, &["rev-parse", "HEAD"])
}

/// Stages the repository at `path` (below `tree`) as a gitlink of `tree`'s index.
fn stage(tree: &Path, path: &str, head: &str) {
    git(tree, &["update-index", "--add", "--cacheinfo", &format!("160000,{head},{path}")]);
}

fn has_fsmonitor(git_dir: &Path) -> bool {
    fs::read_to_string(git_dir.join("config")).unwrap_or_default().contains("fsmonitor")
}

fn note(root: &Path) -> super::super::sweep::Before {
    before(&[root.to_path_buf()], &[root.join(".git")], &[])
}

/// The walk after the command never looks below a `node_modules` that stood unchanged and
/// that the walk before skipped; the user's index names the repository made there.
#[test]
fn a_repository_the_command_stages_as_a_submodule_where_the_walk_does_not_look_is_cleaned() {
    let (_dir, root) = project();
    let noted = note(&root);
    let head = planted(&root.join("node_modules/pkg"));
    stage(&root, "node_modules/pkg", &head);
    let said = sweep(&noted);
    assert!(!has_fsmonitor(&root.join("node_modules/pkg/.git")), "{said:?}");
    assert!(said.iter().any(|line| line.contains("core.fsmonitor")), "{said:?}");
}

#[test]
fn a_repository_named_only_in_gitmodules_is_cleaned() {
    let (_dir, root) = project();
    let noted = note(&root);
    planted(&root.join("node_modules/pkg"));
    fs::write(root.join(".gitmodules"), "[submodule \"p\"]\n\tpath = node_modules/pkg\n\turl = https://x.invalid/p\n")
        .unwrap();
    let said = sweep(&noted);
    assert!(!has_fsmonitor(&root.join("node_modules/pkg/.git")), "{said:?}");
}

/// A repository of the user's the walk never saw (unchanged, its settings its own) stages
/// one the command made inside it: git enters both at the user's `git status`.
#[test]
fn a_repository_staged_in_a_nested_repository_the_walk_never_saw_is_cleaned() {
    let (_dir, root) = project();
    let theirs = root.join("node_modules/pkg");
    fs::create_dir_all(theirs.join("lib")).unwrap();
    git(&theirs, &["init", "-q"]);
    git(&theirs, &["config", "core.pager", "less"]);
    git(&theirs, &["commit", "-q", "--allow-empty", "-m", "theirs"]);
    let theirs_head = git(&theirs, &["rev-parse", "HEAD"]);
    stage(&root, "node_modules/pkg", &theirs_head);
    std::thread::sleep(CLOCK_LAG + std::time::Duration::from_secs(1));
    let noted = note(&root);
    fs::create_dir(theirs.join("lib/inner")).unwrap();
    let head = planted(&theirs.join("lib/inner"));
    stage(&theirs, "lib/inner", &head);
    let said = sweep(&noted);
    assert!(!has_fsmonitor(&theirs.join("lib/inner/.git")), "{said:?}");
    let config = fs::read_to_string(theirs.join(".git/config")).unwrap();
    assert!(config.contains("pager"), "the user's own repository was left as it was: {said:?}");
}

/// A repository made before the command (in an earlier one, outside the workspace) keeps its
/// birth time when renamed into place; its directory's entries changed all the same. With
/// `found`, `node_modules` changes too, so the walk after finds it, and cannot tell it from the
/// user's by its birth; the index stages it all the same.
fn renamed_into_place(found: bool) {
    let (dir, root) = project();
    let early = dir.path().join("early");
    fs::create_dir_all(&early).unwrap();
    let head = planted(&early);
    std::thread::sleep(CLOCK_LAG + std::time::Duration::from_secs(1));
    let noted = note(&root);
    fs::rename(early.join(".git"), root.join("node_modules/pkg/.git")).unwrap();
    if found {
        fs::write(root.join("node_modules/.package-lock.json"), "{}").unwrap();
    }
    stage(&root, "node_modules/pkg", &head);
    let said = sweep(&noted);
    assert!(!has_fsmonitor(&root.join("node_modules/pkg/.git")), "found by the walk: {found}, {said:?}");
}

#[test]
fn a_repository_made_before_the_command_and_renamed_into_place_is_cleaned() {
    renamed_into_place(false);
    renamed_into_place(true);
}

/// Git follows `../` in an index path out of the work tree; git never writes one, so an index
/// the command wrote with one is moved aside. One that stood unreadable before is left.
#[test]
fn an_index_the_command_wrote_that_cannot_be_read_is_moved_aside_and_an_old_one_is_left() {
    let (dir, root) = project();
    let outside = dir.path().join("cd");
    fs::create_dir_all(&outside).unwrap();
    let noted = note(&root);
    let head = planted(&outside);
    fs::create_dir_all(root.join("ab/cd")).unwrap();
    stage(&root, "ab/cd", &head);
    let index = root.join(".git/index");
    let bytes = fs::read(&index).unwrap();
    let at = bytes.windows(6).position(|window| window == b"ab/cd\0").unwrap();
    let edited = [&bytes[..at], b"../cd\0", &bytes[at + 6..]].concat();
    fs::write(&index, edited).unwrap();
    let said = sweep(&noted);
    assert!(!index.exists(), "{said:?}");
    assert!(said.iter().any(|line| line.contains("moved the index")), "{said:?}");

    let (_other, root) = project();
    fs::write(root.join(".git/index"), "not an index").unwrap();
    std::thread::sleep(CLOCK_LAG + std::time::Duration::from_secs(1));
    let noted = note(&root);
    assert!(sweep(&noted).is_empty());
    assert!(root.join(".git/index").exists());
}

/// A `.git` file the command made that leads to the user's own git directory: the sweep
/// cleaned that directory as the command's, taking the user's hooks and settings.
#[test]
fn a_git_file_leading_to_the_users_git_directory_is_taken_and_the_users_repository_kept() {
    let (_dir, root) = project();
    fs::write(root.join(".git/hooks/pre-commit"), "#!/bin/sh\nexit 0\n").unwrap();
    git(&root, &["config", "core.pager", "less"]);
    std::thread::sleep(CLOCK_LAG + std::time::Duration::from_secs(1));
    let noted = note(&root);
    fs::create_dir_all(root.join("x")).unwrap();
    fs::write(root.join("x/.git"), "gitdir: ../.git\n").unwrap();
    let said = sweep(&noted);
    assert!(root.join(".git/hooks/pre-commit").exists(), "{said:?}");
    assert!(fs::read_to_string(root.join(".git/config")).unwrap().contains("pager"), "{said:?}");
    assert!(!root.join("x/.git").exists(), "{said:?}");
}

/// Submodules nested past the depth the sweep follows: the index it did not read, which the
/// command wrote, goes, so git enters nothing below it.
#[test]
fn past_the_nesting_the_sweep_follows_an_index_the_command_wrote_goes() {
    let (_dir, root) = project();
    let noted = note(&root);
    // A chain of repositories, each staging the next, the last one with the planted setting.
    let chain: Vec<PathBuf> =
        (0..=super::MAX_NESTING).map(|n| root.join("node_modules/pkg").join("n/".repeat(n + 1))).collect();
    fs::create_dir_all(chain.last().unwrap()).unwrap();
    let head = planted(chain.last().unwrap());
    for outer in chain[..chain.len() - 1].iter().rev() {
        git(outer, &["init", "-q"]);
        stage(outer, "n", &head);
    }
    stage(&root, "node_modules/pkg/n", &head);
    let said = sweep(&noted);
    let last = chain.last().unwrap();
    let before_last = &chain[chain.len() - 2];
    assert!(
        !has_fsmonitor(&last.join(".git")) || !before_last.join(".git/index").exists(),
        "the last repository kept its setting and the one staging it its index: {said:?}"
    );
    assert!(said.iter().any(|line| line.contains("moved the index")), "{said:?}");
}
