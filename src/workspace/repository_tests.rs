//! A repository's hidden parts judged through `Workspace::locate` on a real disk: a `.git` link
//! or `gitdir:` file, a linked worktree's common directory, the hooks path in its spellings,
//! included files, an unreadable configuration, and what must not match (another case, a
//! sibling of the hooks directory, a hooks path at the top level).

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use super::super::{Place, Workspace};
use super::Home;

/// A workspace `ws` in a temporary directory, its home `home` beside it (no configuration).
fn setup() -> (tempfile::TempDir, PathBuf, Home) {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let home = Home { home: Some(dir.path().join("home")), xdg_config: None };
    std::fs::create_dir_all(dir.path().join("home")).unwrap();
    (dir, ws, home)
}

/// A minimal git directory at `dir` with `config` as its configuration.
fn git_dir(dir: &Path, config: &str) {
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::write(dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(dir.join("config"), config).unwrap();
}

fn why(ws: &Path, home: &Home, path: &str) -> Option<&'static str> {
    let workspace = Workspace::new(ws, &[]).with_home(home.clone());
    match workspace.locate(&workspace.resolve(path)).place {
        Place::Protected { why, secret: false, .. } => Some(why),
        Place::Inside { .. } => None,
        other => panic!("{path}: {other:?}"),
    }
}

fn protected(ws: &Path, home: &Home, path: &str) -> bool {
    why(ws, home, path).is_some()
}

#[test]
fn the_git_directory_a_dot_git_link_leads_to_is_protected_whole() {
    let (_dir, ws, home) = setup();
    git_dir(&ws.join("gitstore"), "[core]\n");
    symlink("gitstore", ws.join(".git")).unwrap();
    for path in ["gitstore/config", "gitstore/hooks/pre-commit", "gitstore/info/attributes", "gitstore/objects/x"] {
        let why = why(&ws, &home, path).unwrap_or_else(|| panic!("{path} is not protected"));
        assert!(why.contains("git directory"), "{path}: {why}");
    }
    assert!(protected(&ws, &home, "src/../gitstore/config"), "a `..` on the way");
    assert!(protected(&ws, &home, &ws.join("gitstore/config").to_string_lossy()), "an absolute path");
    assert!(!protected(&ws, &home, "gitstore.txt"), "a name beside it");
    assert!(!protected(&ws, &home, "GITSTORE/config"), "another case is another directory here");
}

#[test]
fn the_git_directory_a_gitdir_file_names_and_its_common_directory_are_protected() {
    let (_dir, ws, home) = setup();
    git_dir(&ws.join(".gitdata"), "[core]\n");
    std::fs::write(ws.join(".git"), format!("gitdir: {}\n", ws.join(".gitdata").display())).unwrap();
    assert!(protected(&ws, &home, ".gitdata/config"));
    assert!(protected(&ws, &home, ".gitdata/hooks/post-checkout"));
    // A linked worktree: its git directory names the main one in `commondir`, whose
    // configuration holds the hooks path.
    let wt = ws.join("wt");
    std::fs::create_dir_all(&wt).unwrap();
    git_dir(&ws.join("main-git"), "[core]\n\thooksPath = .githooks\n");
    let linked = ws.join("main-git/worktrees/wt");
    std::fs::create_dir_all(&linked).unwrap();
    std::fs::write(linked.join("commondir"), "../..\n").unwrap();
    std::fs::write(wt.join(".git"), "gitdir: ../main-git/worktrees/wt\n").unwrap();
    let workspace = Workspace::new(&wt, std::slice::from_ref(&ws)).with_home(home);
    for path in ["main-git/config", "main-git/worktrees/wt/HEAD", "wt/.githooks/pre-commit"] {
        let place = workspace.locate(&ws.join(path)).place;
        assert!(matches!(place, Place::Protected { .. }), "{path}: {place:?}");
    }
    let place = workspace.locate(&wt.join("src/lib.rs")).place;
    assert!(matches!(place, Place::Inside { .. }), "{place:?}");
}

#[test]
fn the_hooks_path_is_protected_relative_absolute_from_home_and_through_a_link() {
    let (dir, ws, home) = setup();
    git_dir(&ws.join(".git"), "[core]\n\thooksPath = .githooks\n");
    std::fs::create_dir_all(ws.join(".githooks")).unwrap();
    let why = why(&ws, &home, ".githooks/pre-commit").expect("the hooks path is not protected");
    assert!(why.contains("core.hooksPath"), "{why}");
    assert!(protected(&ws, &home, "sub/../.githooks/lib/common.sh"), "all of it, `..` on the way");
    assert!(!protected(&ws, &home, ".GITHOOKS/pre-commit"), "another case is another directory here");
    assert!(!protected(&ws, &home, ".githooks-old/pre-commit"), "a name that starts the same");
    symlink(".githooks", ws.join("hooks-link")).unwrap();
    assert!(protected(&ws, &home, "hooks-link/pre-commit"), "a link into it");

    std::fs::write(ws.join(".git/config"), format!("[core]\n\thooksPath = {}\n", ws.join("abs").display())).unwrap();
    assert!(protected(&ws, &home, "abs/pre-push"), "an absolute hooks path");
    assert!(!protected(&ws, &home, ".githooks/pre-commit"), "the last hooks path wins");

    symlink(&ws, dir.path().join("home/ws")).unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = ~/ws/tilde\n").unwrap();
    assert!(protected(&ws, &home, "tilde/pre-commit"), "a hooks path under `~/`");

    std::fs::write(dir.path().join("home/.gitconfig"), "[core]\n\thooksPath = global-hooks\n").unwrap();
    std::fs::write(ws.join(".git/config"), "[core]\n").unwrap();
    assert!(protected(&ws, &home, "global-hooks/pre-commit"), "the user's global hooks path, per repository");
}

#[test]
fn a_hooks_path_at_the_top_level_protects_only_the_files_directly_in_it() {
    let (_dir, ws, home) = setup();
    git_dir(&ws.join(".git"), "[core]\n\thooksPath = .\n");
    assert!(protected(&ws, &home, "pre-commit"));
    assert!(protected(&ws, &home, "README.md"), "any file there may be named as a hook one day");
    assert!(!protected(&ws, &home, "src/main.rs"), "the rest of the repository stays editable");
    std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = ..\n").unwrap();
    assert!(!protected(&ws, &home, "pre-commit"), "above the top level, nothing in the repository");
    // The workspace is a directory of the repository, and the hooks path names it.
    std::fs::write(ws.join(".git/config"), "[core]\n\thooksPath = sub\n").unwrap();
    let sub = ws.join("sub");
    std::fs::create_dir_all(sub.join("src")).unwrap();
    let workspace = Workspace::new(&sub, &[]).with_home(home);
    let place = |path: &str| workspace.locate(&sub.join(path)).place;
    assert!(matches!(place("pre-commit"), Place::Protected { .. }), "{:?}", place("pre-commit"));
    assert!(matches!(place("src/lib.rs"), Place::Inside { .. }), "{:?}", place("src/lib.rs"));
}

#[test]
fn a_nested_repository_the_path_passes_through_is_judged_too() {
    let (_dir, ws, home) = setup();
    let nested = ws.join("vendor/lib");
    git_dir(&nested.join("store"), "[core]\n\thooksPath = hooks\n");
    std::fs::create_dir_all(&nested).unwrap();
    symlink("store", nested.join(".git")).unwrap();
    assert!(protected(&ws, &home, "vendor/lib/store/config"));
    assert!(protected(&ws, &home, "vendor/lib/hooks/pre-commit"));
    assert!(!protected(&ws, &home, "vendor/lib/src/lib.rs"));
}

#[test]
fn a_file_the_configuration_includes_is_protected_whether_or_not_it_exists() {
    let (_dir, ws, home) = setup();
    git_dir(
        &ws.join(".git"),
        "[include]\n\tpath = ../.gitconfig.local\n[includeIf \"onbranch:main\"]\n\tpath = ../branch.inc\n",
    );
    let why = why(&ws, &home, ".gitconfig.local").expect("an include that does not exist yet");
    assert!(why.contains("includes"), "{why}");
    std::fs::write(ws.join("branch.inc"), "[core]\n").unwrap();
    assert!(protected(&ws, &home, "branch.inc"), "an includeIf, whatever its condition");
    assert!(!protected(&ws, &home, "other.inc"));
}

#[test]
fn a_configuration_that_cannot_be_read_protects_the_whole_repository() {
    let (_dir, ws, home) = setup();
    git_dir(&ws.join(".git"), "[include]\n\tpath = ../dir.inc\n");
    std::fs::create_dir_all(ws.join("dir.inc")).unwrap();
    let why = why(&ws, &home, "src/main.rs").expect("an unreadable include must ask");
    assert!(why.contains("cannot be read"), "{why}");
}

#[test]
fn a_plain_repository_leaves_its_files_editable() {
    let (_dir, ws, home) = setup();
    git_dir(&ws.join(".git"), "[core]\n\tbare = false\n");
    assert!(!protected(&ws, &home, "src/main.rs"));
    assert!(!protected(&ws, &home, "hooks/pre-commit"), "no hooks path: only `.git/hooks` counts");
    assert!(protected(&ws, &home, ".git/objects/x"), "as before, by name");
}
