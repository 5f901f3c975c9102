//! Finding guarded places on a real disk: repositories (directories, worktree files, hooks
//! paths), tool configuration, secrets at depth, what the walk skips, and what a policy shows.

use std::fs;
use std::path::Path;

use super::sweep::{before, sweep};
use super::*;

fn names(hidden: &[&str], visible: &[&str]) -> Names {
    let set = |patterns: &[&str]| {
        let mut set = globset::GlobSetBuilder::new();
        for pattern in patterns {
            set.add(globset::Glob::new(pattern).unwrap());
        }
        set.build().unwrap()
    };
    Names { hidden: set(hidden), visible: set(visible) }
}

fn touch(path: &Path) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, "x").unwrap();
}

#[test]
fn a_repository_keeps_its_objects_writable_and_its_hooks_config_and_info_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join(".git/config"));
    fs::create_dir_all(root.join(".git/objects")).unwrap();
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    let anchors: Vec<&PathBuf> = places.anchors.iter().filter(|path| path.starts_with(&root)).collect();
    assert_eq!(anchors, [&root, &root.join(".git")], "the root, and every directory above what is bound");
    assert!(places.anchors.contains(&root.parent().unwrap().to_path_buf()), "the root's own parent too");
    assert_eq!(places.read_only, [root.join(".git/config"), root.join(".git/hooks"), root.join(".git/info")]);
    assert_eq!(places.git_dirs, [root.join(".git")]);
    assert!(root.join(".git/hooks").is_dir(), "a missing hooks directory is made, to be bound read-only");
}

#[test]
fn a_directory_in_the_shape_of_a_git_directory_is_guarded_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join("mirror.git/HEAD"));
    touch(&root.join("mirror.git/config"));
    fs::create_dir_all(root.join("mirror.git/objects")).unwrap();
    fs::create_dir_all(root.join("mirror.git/refs")).unwrap();
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    for part in ["config", "hooks", "info"] {
        assert!(places.read_only.contains(&root.join("mirror.git").join(part)), "{part}: {places:?}");
    }
    assert_eq!(places.git_dirs, [root.join("mirror.git")]);
}

#[test]
fn secrets_are_hidden_at_depth_and_tool_configuration_is_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join(".env"));
    touch(&root.join("apps/web/.env.local"));
    touch(&root.join(".cargo/config.toml"));
    touch(&root.join("crates/x/.vscode/tasks.json"));
    touch(&root.join(".github/workflows/ci.yml"));
    touch(&root.join("mise.toml"));
    touch(&root.join("node_modules/pkg/.env"));
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    assert_eq!(places.hidden, [root.join(".env"), root.join("apps/web/.env.local")], "node_modules is not walked");
    assert_eq!(
        places.read_only,
        [root.join(".cargo"), root.join(".github/workflows"), root.join("crates/x/.vscode"), root.join("mise.toml")]
    );
}

/// A repository may commit `.env` as a link: the cover goes on where it leads only when that is
/// a file of the user's that is not a program; never on a directory or a system program.
#[test]
fn a_secret_name_that_is_a_link_covers_only_a_data_file() {
    let dir = tempfile::tempdir().unwrap();
    let shared = tempfile::tempdir().unwrap();
    let shared_env = fs::canonicalize(shared.path()).unwrap().join("shared.env");
    touch(&shared_env);
    let root = fs::canonicalize(dir.path()).unwrap().join("work");
    touch(&root.join("src/main.rs"));
    touch(&root.join("config/app.env"));
    let program = root.join("bin/tool");
    touch(&program);
    fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("/usr/bin/env", root.join(".env")).unwrap();
    std::os::unix::fs::symlink("src", root.join(".env.sources")).unwrap();
    std::os::unix::fs::symlink("bin/tool", root.join(".env.tool")).unwrap();
    std::os::unix::fs::symlink("config/app.env", root.join(".env.local")).unwrap();
    // A team's file kept outside the project, and a system file anyone reads.
    std::os::unix::fs::symlink(&shared_env, root.join(".env.shared")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", root.join(".env.host")).unwrap();
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    let mut expected = vec![root.join("config/app.env"), shared_env];
    expected.sort();
    assert_eq!(places.hidden, expected);
}

#[test]
fn a_policy_hides_more_names_and_shows_some_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join(".env.example"));
    touch(&root.join(".env"));
    touch(&root.join("keys/server.pem"));
    let places =
        find(std::slice::from_ref(&root), &[], &names(&["**/*.pem"], &[".env.example"]), true, &Home::default());
    assert_eq!(places.hidden, [root.join(".env"), root.join("keys/server.pem")]);
}

#[test]
fn a_worktree_file_protects_the_git_directory_it_names_and_its_common_directory() {
    let dir = tempfile::tempdir().unwrap();
    let base = fs::canonicalize(dir.path()).unwrap();
    let main = base.join("main");
    touch(&main.join(".git/config"));
    touch(&main.join(".git/worktrees/wt/HEAD"));
    fs::write(main.join(".git/worktrees/wt/commondir"), "../..\n").unwrap();
    let worktree = base.join("wt");
    fs::create_dir_all(&worktree).unwrap();
    fs::write(worktree.join(".git"), format!("gitdir: {}\n", main.join(".git/worktrees/wt").display())).unwrap();
    let places = find(std::slice::from_ref(&worktree), &[], &names(&[], &[]), true, &Home::default());
    assert!(places.read_only.contains(&worktree.join(".git")), "the pointer itself: {places:?}");
    assert!(places.read_only.contains(&main.join(".git/worktrees/wt/commondir")), "{places:?}");
    assert!(places.read_only.contains(&main.join(".git/config")), "the common directory's: {places:?}");
    assert!(!main.join(".git/hooks").exists(), "nothing is made outside the roots: {places:?}");
}

#[test]
fn the_hooks_path_a_configuration_names_is_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    fs::create_dir_all(root.join(".git")).unwrap();
    fs::write(root.join(".git/config"), "[core]\n\tbare = false\n[core \"x\"]\n[CORE]\n\thooksPath = tools/hooks\n")
        .unwrap();
    fs::create_dir_all(root.join("tools/hooks")).unwrap();
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    assert!(places.read_only.contains(&root.join("tools/hooks")), "{places:?}");
}

#[test]
fn a_link_that_would_cover_the_workspace_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    std::os::unix::fs::symlink(".", root.join(".vscode")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let outside = fs::canonicalize(outside.path()).unwrap();
    std::os::unix::fs::symlink(&outside, root.join(".zed")).unwrap();
    let places =
        find(std::slice::from_ref(&root), std::slice::from_ref(&root), &names(&[], &[]), true, &Home::default());
    assert_eq!(places.read_only, [outside], "a link is bound where it leads, unless that holds a root");
    assert!(places.hidden.is_empty(), "a hidden place holding the root is not hidden");
}

#[test]
fn read_only_roots_get_secrets_hidden_but_nothing_bound() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join(".env"));
    touch(&root.join(".git/config"));
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), false, &Home::default());
    assert_eq!(places, Places { hidden: vec![root.join(".env")], ..Places::default() });
}

#[test]
fn guarded_places_a_command_makes_are_taken_away_and_a_new_repository_keeps_no_hooks_or_code() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join(".vscode/settings.json"));
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    // What a command then makes:
    touch(&root.join(".cargo/config.toml"));
    std::os::unix::fs::symlink("/tmp/elsewhere", root.join(".claude")).unwrap();
    touch(&root.join(".github/workflows/ci.yml"));
    touch(&root.join(".git/hooks/pre-commit"));
    touch(&root.join(".git/hooks/pre-commit.sample"));
    fs::write(
        root.join(".git/config"),
        "[core]\n\tbare = false\n\tfsmonitor = \"touch pwned\"\n[remote \"origin\"]\n\turl = https://example.com/r.git\n[alias]\n\tst = !sh\n",
    )
    .unwrap();
    touch(&root.join("sub/.git/hooks/post-checkout"));
    let said = sweep(&noted);
    assert!(!root.join(".cargo").exists() && fs::symlink_metadata(root.join(".claude")).is_err());
    assert!(!root.join(".github/workflows").exists() && root.join(".github").exists());
    assert!(root.join(".vscode/settings.json").exists(), "what stood before stays");
    assert!(root.join(".git/hooks/pre-commit.sample").exists() && !root.join(".git/hooks/pre-commit").exists());
    assert!(!root.join("sub/.git/hooks/post-checkout").exists(), "a repository made deeper down too");
    let config = fs::read_to_string(root.join(".git/config")).unwrap();
    assert!(!config.contains("fsmonitor") && !config.contains("alias"), "{config}");
    assert!(config.contains("bare") && config.contains("[remote \"origin\"]"), "{config}");
    assert!(said.iter().any(|line| line.contains("core.fsmonitor, alias.st")), "{said:?}");
    assert!(sweep(&noted).is_empty(), "nothing left to take");
}

#[test]
fn the_sweep_follows_no_link_out_of_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    touch(&elsewhere.path().join("workflows/keep.yml"));
    touch(&elsewhere.path().join("precious.txt"));
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    std::os::unix::fs::symlink(elsewhere.path(), root.join(".github")).unwrap();
    fs::create_dir_all(root.join(".git")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root.join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("precious.txt"), root.join(".git/config")).unwrap();
    let said = sweep(&noted);
    assert!(elsewhere.path().join("workflows/keep.yml").exists(), "{said:?}");
    assert!(elsewhere.path().join("precious.txt").exists(), "{said:?}");
    assert!(fs::symlink_metadata(root.join(".github")).is_err(), "the link it made is taken, itself: {said:?}");
    assert!(fs::symlink_metadata(root.join(".git/hooks")).is_err(), "the link itself is taken: {said:?}");
}

#[test]
fn a_redirect_made_in_a_known_git_directory_is_taken_away() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join(".git/config"));
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    let noted = before(std::slice::from_ref(&root), &places.git_dirs, &places.missing);
    fs::write(root.join(".git/commondir"), "elsewhere\n").unwrap();
    let said = sweep(&noted);
    assert!(!root.join(".git/commondir").exists(), "{said:?}");
    assert!(root.join(".git/config").exists(), "the repository itself stays");
}

#[test]
fn a_git_link_to_a_directory_is_guarded_where_it_leads() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join("store/config"));
    std::os::unix::fs::symlink("store", root.join(".git")).unwrap();
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    for part in ["config", "hooks", "info"] {
        assert!(places.read_only.contains(&root.join("store").join(part)), "{part}: {places:?}");
    }
    assert_eq!(places.git_dirs, vec![root.join("store")]);
    assert!(places.anchors.contains(&root.join("store")), "{places:?}");
}

#[test]
fn a_git_directory_put_in_place_of_another_is_new_whatever_its_age_and_one_left_alone_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join(".git/hooks/pre-commit"));
    touch(&root.join("kept/.git/hooks/pre-commit"));
    touch(&root.join("old/hooks/pre-commit"));
    touch(&root.join("older/hooks/post-checkout"));
    fs::create_dir_all(root.join("sub")).unwrap();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    // Renamed, so born before the command: over a `.git` that was there, and where none was.
    fs::rename(root.join(".git"), root.join("git.was")).unwrap();
    fs::rename(root.join("old"), root.join(".git")).unwrap();
    fs::rename(root.join("older"), root.join("sub/.git")).unwrap();
    let said = sweep(&noted);
    assert!(!root.join(".git/hooks/pre-commit").exists(), "{said:?}");
    assert!(!root.join("sub/.git/hooks/post-checkout").exists(), "{said:?}");
    assert!(root.join("kept/.git/hooks/pre-commit").exists(), "a repository left alone keeps its hooks: {said:?}");
}

/// A new repository's configuration is written again from the settings it may keep whatever
/// this reading of it makes of the rest: a byte that is not UTF-8 (the sweep gave up on the
/// file), a comment ending in a backslash or a byte order mark (git read `core.fsmonitor`
/// where the sweep saw nothing), and a link to another file put in its place (the sweep wrote
/// through it). What `git init` writes is left as it is.
#[test]
fn a_new_repositorys_configuration_keeps_only_safe_settings_however_it_is_spelt() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    let fresh = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n\tlogallrefupdates = true\n";
    let spellings: [(&str, &[u8]); 4] = [
        ("latin1", b"[core]\n\tfsmonitor = touch pwned\n# caf\xe9\n"),
        ("comment", b"[user]\n\tname = x ; \\\n[core] fsmonitor = \"touch pwned\"\n"),
        ("bom", b"\xef\xbb\xbf[core] fsmonitor = \"touch pwned\"\n"),
        ("init", fresh.as_bytes()),
    ];
    for (name, text) in spellings {
        fs::create_dir_all(root.join(name).join(".git")).unwrap();
        fs::write(root.join(name).join(".git/config"), text).unwrap();
    }
    let victim = root.join("victim");
    fs::write(&victim, "the user's own file\n").unwrap();
    fs::create_dir_all(root.join("linked/.git")).unwrap();
    std::os::unix::fs::symlink(&victim, root.join("linked/.git/config")).unwrap();
    let said = sweep(&noted);
    for name in ["latin1", "comment", "bom"] {
        let config = fs::read(root.join(name).join(".git/config")).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&config).contains("fsmonitor"), "{name}: {config:?} {said:?}");
    }
    assert_eq!(fs::read_to_string(root.join("init/.git/config")).unwrap(), fresh, "{said:?}");
    assert!(!said.iter().any(|line| line.contains("init/")), "nothing said of it: {said:?}");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "the user's own file\n", "nothing written through the link");
}

/// Mercurial 6.1 and later read `.hg/hgrc-not-shared` in every repository, and the `hgrc` of
/// the repository `.hg/sharedpath` names: both run hooks as `.hg/hgrc` does. Existing ones are
/// read-only; one a command makes is taken away.
#[test]
fn mercurials_other_configuration_files_are_guarded_as_its_hgrc_is() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join(".hg/hgrc"));
    touch(&root.join(".hg/hgrc-not-shared"));
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    assert!(places.read_only.contains(&root.join(".hg/hgrc-not-shared")), "{:?}", places.read_only);
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    touch(&root.join(".hg/sharedpath"));
    let said = sweep(&noted);
    assert!(!root.join(".hg/sharedpath").exists(), "{said:?}");
}

/// A guarded place a command reaches through a link it made (`.hg` renamed away and linked
/// back, then `.hg/hgrc` written; a `tools` link where `core.hooksPath` names `tools/hooks`)
/// goes with that link; a link the user had before the command is theirs, and stays.
#[test]
fn a_guarded_place_made_through_a_new_link_goes_with_the_link_and_an_old_link_stays() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    fs::create_dir_all(root.join(".hg")).unwrap();
    fs::create_dir_all(root.join("theirs")).unwrap();
    std::os::unix::fs::symlink("theirs", root.join(".github")).unwrap();
    // Older than the command by more than the clock's lag.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    fs::rename(root.join(".hg"), root.join("hgdata")).unwrap();
    std::os::unix::fs::symlink("hgdata", root.join(".hg")).unwrap();
    touch(&root.join(".hg/hgrc"));
    touch(&root.join(".github/workflows/ci.yml"));
    let said = sweep(&noted);
    assert!(fs::symlink_metadata(root.join(".hg")).is_err(), "the new link went: {said:?}");
    assert!(root.join("hgdata/hgrc").exists(), "nothing beyond it was touched");
    assert!(fs::symlink_metadata(root.join(".github")).is_ok(), "the user's link stays: {said:?}");
    assert!(said.iter().any(|line| line.contains(".github/workflows") && line.contains("left as it is")), "{said:?}");
}

/// In a repository that stood, a submodule's git directory the command made under
/// `.git/modules/` keeps no hook (it ran at the user's `git submodule update`), and a stopped
/// rebase loses the `exec` lines the command queued (they ran at `git rebase --continue`).
#[test]
fn a_submodule_and_a_stopped_rebase_the_command_left_in_a_repository_run_nothing_later() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let git = root.join(".git");
    touch(&git.join("config"));
    let noted = before(std::slice::from_ref(&root), std::slice::from_ref(&git), &[]);
    touch(&git.join("modules/evil/HEAD"));
    touch(&git.join("modules/evil/hooks/post-checkout"));
    fs::write(git.join("modules/evil/config"), "[core]\n\tworktree = ../../../evil\n\tfsmonitor = touch pwned\n")
        .unwrap();
    fs::create_dir_all(root.join("evil")).unwrap();
    touch(&git.join("rebase-merge/git-rebase-todo"));
    fs::write(git.join("rebase-merge/git-rebase-todo"), "break\nexec touch pwned\n").unwrap();
    let said = sweep(&noted);
    assert!(!git.join("modules/evil/hooks/post-checkout").exists(), "{said:?}");
    let config = fs::read_to_string(git.join("modules/evil/config")).unwrap();
    assert_eq!(config, "[core]\n\tworktree = ../../../evil\n", "its working tree inside the workspace is kept");
    assert_eq!(fs::read_to_string(git.join("rebase-merge/git-rebase-todo")).unwrap(), "break\n", "{said:?}");
}

/// A `*.code-workspace` file (its tasks and settings run when the user opens it) the command
/// made at the top of a root is taken away; the user's own stays.
#[test]
fn a_code_workspace_file_the_command_made_is_taken_and_the_users_stays() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join("team.code-workspace"));
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    touch(&root.join("evil.code-workspace"));
    let said = sweep(&noted);
    assert!(!root.join("evil.code-workspace").exists(), "{said:?}");
    assert!(root.join("team.code-workspace").exists());
}

/// A guarded place the command made that cannot be removed (directories nested deeper than the
/// removal goes) is moved aside under a name nobody reads: gone from its place all the same.
#[test]
fn a_guarded_place_too_deep_to_remove_is_moved_aside() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    let deep: PathBuf = std::iter::once(".cargo".to_owned()).chain((0..300).map(|_| "d".to_owned())).collect();
    fs::create_dir_all(root.join(&deep)).unwrap();
    touch(&root.join(".cargo/config.toml"));
    let said = sweep(&noted);
    assert!(fs::symlink_metadata(root.join(".cargo")).is_err(), "{said:?}");
    assert!(said.iter().any(|line| line.contains("aside")), "{said:?}");
}

/// A new repository's remote on this machine would run that repository's hooks at the user's
/// `git push`: only a remote on another machine is kept.
#[test]
fn a_new_repository_keeps_only_remotes_on_other_machines() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    let remotes = [
        ("a", "https://github.com/o/r.git", true),
        ("b", "git@github.com:o/r.git", true),
        ("c", "ssh://host/r", true),
        ("d", "/tmp/evil.git", false),
        ("e", "file:///tmp/evil.git", false),
        ("f", "../evil.git", false),
        ("g", "ext::sh -c touch% pwned", false),
    ];
    let mut config = String::from("[core]\n\tbare = false\n");
    for (name, url, _) in remotes {
        config.push_str(&format!("[remote \"{name}\"]\n\turl = {url}\n"));
    }
    fs::create_dir_all(root.join(".git")).unwrap();
    fs::write(root.join(".git/config"), &config).unwrap();
    let said = sweep(&noted);
    let kept = fs::read_to_string(root.join(".git/config")).unwrap();
    for (name, url, stays) in remotes {
        assert_eq!(kept.contains(url), stays, "remote {name} {url}: {kept} {said:?}");
    }
}

/// Git takes a directory for a repository with a `HEAD` and a `commondir`, or with `objects`
/// and `refs` that are executable files: the user's `src/` so made keeps no pager.
#[test]
fn a_directory_git_takes_for_a_repository_by_commondir_or_files_is_one() {
    use super::survey::Shape;
    let dir = tempfile::tempdir().unwrap();
    let kind_of = |path: &Path| fs::symlink_metadata(path).unwrap().file_type();
    touch(&dir.path().join("HEAD"));
    touch(&dir.path().join("commondir"));
    touch(&dir.path().join("objects"));
    touch(&dir.path().join("refs"));
    let mut by_commondir = Shape::default();
    by_commondir.note(std::ffi::OsStr::new("HEAD"), kind_of(&dir.path().join("HEAD")));
    by_commondir.note(std::ffi::OsStr::new("commondir"), kind_of(&dir.path().join("commondir")));
    assert!(by_commondir.git_dir());
    let mut by_files = Shape::default();
    for name in ["HEAD", "objects", "refs"] {
        by_files.note(std::ffi::OsStr::new(name), kind_of(&dir.path().join(name)));
    }
    assert!(by_files.git_dir());
}

/// Guarded places a command made below the top of a root (`src/.hg/hgrc` ran its hook at the
/// user's `hg status` there; a nested `.cargo/` at `cargo build` in it) are taken away; the
/// user's own stay, and so do the files dependencies ship (`vendor/`, `node_modules/`).
#[test]
fn guarded_places_a_command_made_below_the_top_of_a_root_are_taken() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    touch(&root.join("crates/mine/.cargo/config.toml"));
    fs::create_dir_all(root.join("src/.hg")).unwrap();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    touch(&root.join("src/.hg/hgrc"));
    touch(&root.join("crates/x/.cargo/config.toml"));
    touch(&root.join("crates/mine/sibling.txt"));
    touch(&root.join("vendor/dep/rust-toolchain.toml"));
    let said = sweep(&noted);
    assert!(!root.join("src/.hg/hgrc").exists(), "{said:?}");
    assert!(!root.join("crates/x/.cargo").exists(), "{said:?}");
    assert!(root.join("crates/mine/.cargo/config.toml").exists(), "the user's own stays: {said:?}");
    assert!(root.join("vendor/dep/rust-toolchain.toml").exists(), "a dependency's stays: {said:?}");
}

/// A link the command made to a repository outside the workspace (one it made in `/tmp`, with
/// an fsmonitor) is taken: the user's `git status` through it ran that repository's code. A
/// link to a directory that holds no repository, one inside the workspace, or one among the
/// dependencies (`npm link` to the user's checkout elsewhere), stays.
#[test]
fn a_link_the_command_made_to_a_repository_outside_is_taken() {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap().join("ws");
    let outside = root.parent().unwrap().join("elsewhere");
    fs::create_dir_all(root.join("src")).unwrap();
    fs::create_dir_all(outside.join("repo/.git")).unwrap();
    fs::create_dir_all(outside.join("plain")).unwrap();
    let noted = before(std::slice::from_ref(&root), &[], &[]);
    std::os::unix::fs::symlink(outside.join("repo"), root.join("src/generated")).unwrap();
    std::os::unix::fs::symlink(outside.join("plain"), root.join("src/data")).unwrap();
    std::os::unix::fs::symlink(root.join("src"), root.join("src-link")).unwrap();
    fs::create_dir_all(root.join("node_modules")).unwrap();
    std::os::unix::fs::symlink(outside.join("repo"), root.join("node_modules/mylib")).unwrap();
    let said = sweep(&noted);
    assert!(fs::symlink_metadata(root.join("node_modules/mylib")).is_ok(), "npm link's stays: {said:?}");
    assert!(fs::symlink_metadata(root.join("src/generated")).is_err(), "{said:?}");
    assert!(outside.join("repo/.git").exists(), "what it led to stays");
    assert!(fs::symlink_metadata(root.join("src/data")).is_ok() && fs::symlink_metadata(root.join("src-link")).is_ok());
}

#[test]
fn a_hidden_name_another_user_planted_as_a_link_covers_nothing_and_the_users_own_link_is_followed() {
    let dir = tempfile::tempdir().unwrap();
    let (target, own, planted) = (dir.path().join("target"), dir.path().join("own"), dir.path().join("planted"));
    std::fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, &own).unwrap();
    std::os::unix::fs::symlink("/usr", &planted).unwrap();
    let hide = vec![own, planted.clone()];
    let mut expected = vec![target.canonicalize().unwrap()];
    if super::super::namespace::current_uid() == 0 {
        // Only root can give a link to another user here.
        std::os::unix::fs::lchown(&planted, Some(4242), Some(4242)).unwrap();
    } else {
        expected.push(PathBuf::from("/usr"));
    }
    let places = find(&[], &hide, &Names::default(), true, &Home::default());
    assert_eq!(places.hidden, expected);
}

/// The seventh pass's 06b: `secrets -> ~/private/app` kept the `.env` files there readable, the
/// walk never going through a link.
#[test]
fn secrets_in_a_directory_a_link_leads_to_outside_are_covered_where_they_lie() {
    let dir = tempfile::tempdir().unwrap();
    let private = tempfile::tempdir().unwrap();
    let private = fs::canonicalize(private.path()).unwrap();
    touch(&private.join("app/.env"));
    touch(&private.join("app/deploy/.env.production"));
    touch(&private.join("app/readme.txt"));
    let root = fs::canonicalize(dir.path()).unwrap().join("work");
    touch(&root.join("src/main.rs"));
    std::os::unix::fs::symlink(private.join("app"), root.join("secrets")).unwrap();
    // A second link to the same place, a loop back into the project and one to its parent.
    std::os::unix::fs::symlink(private.join("app"), root.join("src/again")).unwrap();
    std::os::unix::fs::symlink("..", root.join("src/up")).unwrap();
    std::os::unix::fs::symlink(dir.path(), private.join("app/back")).unwrap();
    // What is bound read-only there is not the project's: only secrets are covered.
    touch(&private.join("app/.git/config"));
    touch(&private.join("app/.vscode/settings.json"));
    let places = find(std::slice::from_ref(&root), &[], &names(&[], &[]), true, &Home::default());
    let mut expected = vec![private.join("app/.env"), private.join("app/deploy/.env.production")];
    expected.sort();
    assert_eq!(places.hidden, expected);
    assert!(places.read_only.is_empty() && places.git_dirs.is_empty(), "{places:?}");
}
