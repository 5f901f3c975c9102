//! The sweep's walk on a real disk: a repository made after files that spend the walk's budget,
//! deeper than it goes or where it skips, below directories left unchanged, a bare one, and the
//! links and FIFOs a command puts where the walk expects directories or files.

use std::fs;
use std::path::{Path, PathBuf};

use super::sweep::{before, sweep};
use super::{MAX_ENTRIES, survey::CLOCK_LAG};

fn touch(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, "x").unwrap();
}

fn workspace() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    (dir, root)
}

/// A git directory at `git_dir` with a hook and a setting that runs a program, as a command
/// would make it; with `bare`, in git's own shape (no `.git` above it).
fn plant(git_dir: &Path, bare: bool) {
    touch(&git_dir.join("hooks/pre-commit"));
    if bare {
        fs::write(git_dir.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        fs::create_dir_all(git_dir.join("objects")).unwrap();
        fs::create_dir_all(git_dir.join("refs")).unwrap();
    }
    fs::write(git_dir.join("config"), "[core]\n\tbare = true\n\tpager = \"touch pwned\"\n").unwrap();
}

/// Whether the hook and the setting [`plant`] made are gone.
fn swept(git_dir: &Path) -> bool {
    let config = fs::read_to_string(git_dir.join("config")).unwrap_or_default();
    !git_dir.join("hooks/pre-commit").exists() && !config.contains("pager")
}

/// What stood before is old to the sweep once the clock has moved past its allowed lag.
fn age() {
    std::thread::sleep(CLOCK_LAG + std::time::Duration::from_secs(1));
}

#[test]
fn a_repository_made_after_files_that_spend_the_walks_budget_keeps_no_hook_or_setting() {
    let (_dir, root) = workspace();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    let many = root.join("a");
    fs::create_dir(&many).unwrap();
    for n in 0..MAX_ENTRIES + 100 {
        fs::File::create(many.join(n.to_string())).unwrap();
    }
    plant(&root.join("b/z/.git"), false);
    let said = sweep(&noted);
    assert!(swept(&root.join("b/z/.git")), "{said:?}");
}

#[test]
fn a_repository_made_deeper_than_the_walk_goes_or_where_it_skips_keeps_no_hook_or_setting() {
    let (_dir, root) = workspace();
    fs::create_dir_all(root.join("node_modules/left-pad")).unwrap();
    fs::create_dir_all(root.join("target/debug")).unwrap();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    let made = ["a/b/c/d/e/f/g/.git", "node_modules/x/.git", "target/debug/y/.git", "vendor/v/.git"];
    for place in made {
        plant(&root.join(place), false);
    }
    let said = sweep(&noted);
    for place in made {
        assert!(swept(&root.join(place)), "{place}: {said:?}");
    }
}

#[test]
fn a_repository_made_below_directories_that_stood_unchanged_keeps_no_hook_or_setting() {
    let (_dir, root) = workspace();
    fs::create_dir_all(root.join("a/b/c/d/e")).unwrap();
    fs::create_dir_all(root.join("node_modules/p/q")).unwrap();
    touch(&root.join("kept/.git/hooks/pre-commit"));
    // The user's files, which the walk after need not read again.
    for n in 0..50 {
        touch(&root.join(format!("kept/src/{n}.rs")));
    }
    age();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    // Only the directory each is made in changes; those above it stand as they stood.
    let made = ["a/b/c/d/e/new/.git", "node_modules/p/q/new/.git"];
    for place in made {
        plant(&root.join(place), false);
    }
    let said = sweep(&noted);
    for place in made {
        assert!(swept(&root.join(place)), "{place}: {said:?}");
    }
    assert!(root.join("kept/.git/hooks/pre-commit").exists(), "a repository left alone keeps its hook: {said:?}");
}

#[test]
fn a_bare_repository_the_command_makes_is_swept_and_one_that_stood_before_is_left() {
    let (_dir, root) = workspace();
    plant(&root.join("old.git"), true);
    fs::create_dir_all(root.join("plain")).unwrap();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    plant(&root.join("plain"), true);
    plant(&root.join("n/o/p/q/r/deep"), true);
    let said = sweep(&noted);
    assert!(swept(&root.join("plain")), "a directory given git's shape: {said:?}");
    assert!(swept(&root.join("n/o/p/q/r/deep")), "{said:?}");
    assert!(!swept(&root.join("old.git")), "the user's bare repository stays as it was: {said:?}");
    assert!(root.join("plain/objects").is_dir() && root.join("plain/HEAD").is_file(), "the repository stays");
}

#[test]
fn a_fifo_named_head_blocks_nothing_and_still_makes_a_git_directory() {
    let (_dir, root) = workspace();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    let dir = root.join("x");
    plant(&dir, true);
    fs::remove_file(dir.join("HEAD")).unwrap();
    let status = std::process::Command::new("mkfifo").arg(dir.join("HEAD")).status().unwrap();
    assert!(status.success());
    let said = sweep(&noted);
    assert!(swept(&dir), "{said:?}");
}

#[test]
fn the_walk_after_follows_no_link_to_a_directory_outside() {
    let (_dir, root) = workspace();
    let (_elsewhere, outside) = workspace();
    plant(&outside.join("repo/.git"), false);
    plant(&outside.join("bare"), true);
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
    std::os::unix::fs::symlink(outside.join("bare"), root.join("bare")).unwrap();
    fs::create_dir_all(root.join("a")).unwrap();
    std::os::unix::fs::symlink(outside.join("repo/.git"), root.join("a/.git")).unwrap();
    // A bare shape whose parts lead outside: `hooks` and `config` links are taken, not followed.
    fs::create_dir_all(root.join("b/objects")).unwrap();
    fs::create_dir_all(root.join("b/refs")).unwrap();
    fs::write(root.join("b/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::os::unix::fs::symlink(outside.join("bare/hooks"), root.join("b/hooks")).unwrap();
    std::os::unix::fs::symlink(outside.join("bare/config"), root.join("b/config")).unwrap();
    let said = sweep(&noted);
    assert!(!swept(&outside.join("repo/.git")) && !swept(&outside.join("bare")), "{said:?}");
    assert!(fs::symlink_metadata(root.join("a/.git")).is_err(), "a new `.git` link is taken: {said:?}");
    assert!(fs::symlink_metadata(root.join("b/hooks")).is_err(), "{said:?}");
    assert!(fs::symlink_metadata(root.join("b/config")).is_err(), "{said:?}");
}

/// A bare shape built over two commands beyond the walk's reach: the first made it with a safe
/// configuration, the second rewrote that configuration (its birth time stays old, its change
/// time does not) and added a hook. The second command's are taken.
#[test]
fn a_bare_shape_beyond_the_walks_reach_whose_configuration_a_command_rewrote_is_swept() {
    let (_dir, root) = workspace();
    let lib = root.join("a/b/c/lib");
    fs::create_dir_all(lib.join("objects")).unwrap();
    fs::create_dir_all(lib.join("refs")).unwrap();
    fs::create_dir_all(lib.join("hooks")).unwrap();
    fs::write(lib.join("HEAD"), "ref: refs/heads/main\n").unwrap();
    fs::write(lib.join("config"), "[core]\n\tbare = true\n").unwrap();
    age();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    plant(&lib, false);
    let said = sweep(&noted);
    assert!(swept(&lib), "{said:?}");
}
