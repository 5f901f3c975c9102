//! Paths on a real disk: links followed as the kernel does, names that are not UTF-8,
//! protected names.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;
use std::path::PathBuf;

use crate::permissions::*;
use crate::workspace::Workspace;

// ---------------------------------------------------------------------------------------------
// Paths on a real disk.
// ---------------------------------------------------------------------------------------------

/// `dir/project` (the workspace, with `a.txt`) and `dir/secret/key` next to it.
pub(super) fn disk() -> (tempfile::TempDir, PathBuf, Workspace) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("project");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "a").unwrap();
    std::fs::create_dir_all(dir.path().join("secret")).unwrap();
    std::fs::write(dir.path().join("secret/key"), "SECRET").unwrap();
    let workspace = Workspace::new(&root, &[]);
    (dir, root, workspace)
}

fn on_disk(workspace: &Workspace, approved_lines: &[&str], line: &str) -> Decision {
    let mut rules = Vec::new();
    for approved in approved_lines {
        let request = PermissionRequest::for_command(approved, workspace);
        rules.push(rule_for(&request, Action::Allow, Scope::Session, &rules).expect("a rule is offered"));
    }
    decide(&PermissionRequest::for_command(line, workspace), Mode::Ask, &rules)
}

#[test]
fn dot_dot_after_a_symlink_is_resolved_as_the_kernel_does() {
    let (_dir, root, workspace) = disk();
    // `ln -s . d` is a command an `ln` rule allows: both its arguments are inside.
    assert_eq!(on_disk(&workspace, &["ln -s a.txt b.txt"], "ln -s . d"), Decision::Allow);
    symlink(".", root.join("d")).unwrap();
    // bash: d → project, `..` → its parent, so these read and write `dir/secret`.
    let found: Vec<String> = [
        ("cat a.txt", "cat d/../secret/key"),
        ("cat a.txt", "cat d/../secret/*"),
        ("cp a.txt b.txt", "cp a.txt d/../secret/planted"),
    ]
    .into_iter()
    .map(|(approved, line)| (approved, line, on_disk(&workspace, &[approved], line)))
    .filter(|(_, _, decision)| !matches!(decision, Decision::Ask(_)))
    .map(|(approved, line, decision)| format!("{line} after {approved}: {decision:?}"))
    .collect();
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn a_name_that_is_not_utf8_cannot_be_judged() {
    let (dir, root, workspace) = disk();
    symlink(dir.path().join("secret/key"), root.join(std::ffi::OsStr::from_bytes(b"\xff"))).unwrap();
    // bash's `$'\xff'` is the byte 0xff, not `ÿ`; a glob's match is bytes, not lossy text:
    // neither can be judged as a name.
    let found: Vec<String> = ["cat $'\\xff'", "cat *"]
        .into_iter()
        .map(|line| (line, on_disk(&workspace, &["cat a.txt"], line)))
        .filter(|(_, decision)| !matches!(decision, Decision::Ask(_)))
        .map(|(line, decision)| format!("{line}: {decision:?}"))
        .collect();
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn protected_names_are_compared_without_case() {
    // On a case-insensitive disk (macOS, Windows) `.GIT/hooks/pre-commit` is git's hook and
    // `.ENV` the secrets file.
    let (_dir, root, workspace) = disk();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    let found =
        edits_not_asked(&workspace, &root, &[".GIT/hooks/pre-commit", ".Git/config", ".ENV", ".Claude/settings.json"]);
    assert!(found.is_empty(), "{found:#?}");
}

#[test]
fn configuration_that_tools_run_as_code_is_protected() {
    // A program rule for `cargo test`, `npm test`, `make test`, `git commit` runs what these
    // files say, so writing them asks even in accept-edits.
    let (_dir, root, workspace) = disk();
    let found = edits_not_asked(
        &workspace,
        &root,
        &[
            ".cargo/config.toml",
            ".husky/pre-commit",
            ".npmrc",
            ".vscode/tasks.json",
            "rust-toolchain.toml",
            ".zed/settings.json",
        ],
    );
    assert!(found.is_empty(), "{found:#?}");
}

/// The names under `root` that accept-edits writes without asking.
fn edits_not_asked(workspace: &Workspace, root: &std::path::Path, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|name| {
            let request = PermissionRequest::for_path(Permission::Edit, workspace, &root.join(name));
            (name, decide(&request, Mode::AcceptEdits, &[]))
        })
        .filter(|(_, decision)| !matches!(decision, Decision::Ask(_)))
        .map(|(name, decision)| format!("{name}: {decision:?}"))
        .collect()
}
