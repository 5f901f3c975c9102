//! Path resolution and judgement on a real disk: `..`, links in and out, dangling links, loops,
//! protected places, globs and names that are not UTF-8.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::symlink;

use super::*;

fn project() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("project");
    std::fs::create_dir_all(root.join("src")).unwrap();
    (dir, root)
}

fn inside(relative: &str) -> Place {
    Place::Inside { relative: relative.to_owned() }
}

#[test]
fn relative_paths_resolve_against_cwd_and_dot_dot_cannot_hide() {
    let (_dir, root) = project();
    let workspace = Workspace::new(&root, &[]);
    assert_eq!(workspace.resolve("src/../src/lib.rs"), root.join("src/lib.rs"));
    assert_eq!(workspace.locate(&workspace.resolve("src/new/file.rs")).place, inside("src/new/file.rs"));
    assert_eq!(workspace.locate(&workspace.resolve("../outside.txt")).place, Place::Outside);
    assert_eq!(workspace.display(&root.join("src/lib.rs")), "src/lib.rs");
}

#[test]
fn a_symlink_pointing_out_is_outside_unless_its_target_is_a_root() {
    let (dir, root) = project();
    let secret = dir.path().join("secret");
    std::fs::create_dir_all(&secret).unwrap();
    symlink(&secret, root.join("link")).unwrap();
    let workspace = Workspace::new(&root, &[]);
    assert_eq!(workspace.locate(&workspace.resolve("link/passwords.txt")).place, Place::Outside);
    let extra = Workspace::new(&root, std::slice::from_ref(&secret));
    // Inside, relative to the root it lies in.
    assert_eq!(extra.locate(&extra.resolve("link/passwords.txt")).place, inside("passwords.txt"));
}

#[test]
fn a_dangling_symlink_is_followed_to_where_a_write_would_land() {
    let (dir, root) = project();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    symlink(elsewhere.join("new.txt"), root.join("dangling")).unwrap();
    symlink("src/later.rs", root.join("inner")).unwrap();
    let workspace = Workspace::new(&root, &[]);
    let located = workspace.locate(&root.join("dangling"));
    assert_eq!(located.place, Place::Outside);
    assert_eq!(located.real, Some(elsewhere.join("new.txt")));
    // Not even the directory exists: still followed.
    symlink("/nonexistent/dir/file", root.join("nowhere")).unwrap();
    assert_eq!(workspace.locate(&root.join("nowhere")).real, Some(PathBuf::from("/nonexistent/dir/file")));
    // A relative link that stays inside is inside, at its target.
    assert_eq!(workspace.locate(&root.join("inner")).place, inside("src/later.rs"));
}

#[test]
fn loops_and_names_that_are_not_utf8_cannot_be_judged() {
    let (_dir, root) = project();
    symlink(root.join("b"), root.join("a")).unwrap();
    symlink(root.join("a"), root.join("b")).unwrap();
    let workspace = Workspace::new(&root, &[]);
    let Place::Unknown(why) = workspace.locate(&root.join("a/x")).place else { panic!("a loop is unknown") };
    assert!(why.contains("symlink loop"), "{why}");
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    symlink(root.join(odd), root.join("odd")).unwrap();
    let Place::Unknown(why) = workspace.locate(&root.join("odd")).place else { panic!("not UTF-8 is unknown") };
    assert!(why.contains("not valid UTF-8"), "{why}");
}

#[test]
fn protected_places_say_why_whether_written_or_linked_to() {
    let (dir, root) = project();
    std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
    symlink(root.join(".git/hooks"), root.join("hooks")).unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let workspace = Workspace::new(&root, std::slice::from_ref(&data)).protecting([data.clone()]);
    for path in [".git/hooks/pre-commit", "hooks/pre-commit", "sub/.git/config", ".claude/settings.json", ".agents/x"] {
        let place = workspace.locate(&workspace.resolve(path)).place;
        assert!(matches!(place, Place::Protected { secret: false, .. }), "{path}: {place:?}");
    }
    for path in [".env", "config/.env.local", ".envrc"] {
        let place = workspace.locate(&workspace.resolve(path)).place;
        assert!(matches!(place, Place::Protected { secret: true, .. }), "{path}: {place:?}");
    }
    let place = workspace.locate(&data.join("cairn.db")).place;
    assert!(matches!(place, Place::Protected { why: PRIVATE, secret: true, .. }), "{place:?}");
    assert_eq!(workspace.locate(&workspace.resolve("src/git.rs")).place, inside("src/git.rs"));
}

#[test]
fn globs_expand_as_bash_would_and_too_many_matches_are_refused() {
    let (_dir, root) = project();
    for name in ["a.rs", "b.rs", ".hidden.rs", "src/c.rs"] {
        std::fs::write(root.join(name), "").unwrap();
    }
    let workspace = Workspace::new(&root, &[]);
    let mut found = workspace.expand("*.rs").unwrap();
    found.sort();
    assert_eq!(found, [root.join("a.rs"), root.join("b.rs")]);
    assert_eq!(workspace.expand(".*.rs").unwrap(), [root.join(".hidden.rs")]);
    assert_eq!(workspace.expand("s?c/*.rs").unwrap(), [root.join("src/c.rs")]);
    assert_eq!(workspace.expand("nothing*").unwrap(), Vec::<PathBuf>::new());
    for n in 0..300 {
        std::fs::write(root.join(format!("f{n}")), "").unwrap();
    }
    assert!(workspace.expand("f*").unwrap_err().contains("more than"));
}

#[test]
fn a_project_reaches_up_to_its_repository_and_no_further() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let repo = home.join("code/repo");
    let app = repo.join("crates/app");
    let loose = dir.path().join("tmp/a/b");
    std::fs::create_dir_all(&app).unwrap();
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    std::fs::create_dir_all(&loose).unwrap();
    std::fs::create_dir_all(home.join(".git")).unwrap();
    assert_eq!(project_dirs(&app, Some(&home)), [repo.clone(), repo.join("crates"), app.clone()]);
    assert_eq!(project_dirs(&repo, Some(&home)), vec![repo.clone()]);
    assert_eq!(project_dirs(&loose, Some(&home)), vec![loose.clone()], "no repository: the workspace alone");
    let below_home = home.join("notes/2025");
    std::fs::create_dir_all(&below_home).unwrap();
    assert_eq!(
        project_dirs(&below_home, Some(&home)),
        vec![below_home.clone()],
        "a repository at ~ is not a project's"
    );
    assert_eq!(project_dirs(&loose, None), vec![loose]);
}

/// Another user made `.git` (and instructions beside it) in the shared temporary directory
/// above a scratch workspace: git would refuse that repository, and so does the project.
#[test]
fn a_repository_another_user_owns_above_the_workspace_is_not_the_projects() {
    use std::os::unix::fs::MetadataExt as _;
    // Only root can make a directory another user owns (the suite's CI runs as root).
    if super::own_uid() != Some(0) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("shared");
    let scratch = shared.join("scratch/work");
    std::fs::create_dir_all(shared.join(".git")).unwrap();
    std::fs::create_dir_all(&scratch).unwrap();
    assert_eq!(project_dirs(&scratch, None), [shared.clone(), shared.join("scratch"), scratch.clone()], "ours");
    for planted in [shared.clone(), shared.join(".git")] {
        std::os::unix::fs::chown(&planted, Some(4242), Some(4242)).unwrap();
        assert_eq!(std::fs::metadata(&planted).unwrap().uid(), 4242);
        assert_eq!(project_dirs(&scratch, None), vec![scratch.clone()], "{} is not ours", planted.display());
        std::os::unix::fs::chown(&planted, Some(0), Some(0)).unwrap();
    }
}

/// A command made `.git` in the shared temporary directory itself: every scratch workspace
/// below it would take its instructions and agents. A directory anyone may write is no
/// project's root, whoever owns it.
#[test]
fn a_repository_in_a_directory_anyone_may_write_is_not_the_projects() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("tmp");
    let scratch = shared.join("scratch");
    std::fs::create_dir_all(shared.join(".git")).unwrap();
    std::fs::create_dir_all(&scratch).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    assert_eq!(project_dirs(&scratch, None), vec![scratch.clone()]);
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(project_dirs(&scratch, None), [shared, scratch], "the same, private, is a project");
}

fn secret(place: &Place) -> bool {
    matches!(place, Place::Protected { secret: true, .. })
}

/// `[sandbox] hidden` patterns make places secret to the file tools as the sandbox hides them
/// from commands: relative to the root, without case, as written and where a link leads;
/// `visible` takes a file back (without case too), but not from under a hidden directory.
#[test]
fn what_hidden_patterns_match_is_secret_however_it_is_reached() {
    let (_dir, root) = project();
    std::fs::create_dir_all(root.join("secrets/shared")).unwrap();
    std::fs::create_dir_all(root.join("vault/deep")).unwrap();
    std::fs::write(root.join("secrets/prod.yaml"), "db: hunter2").unwrap();
    std::fs::write(root.join("secrets/shared/readme.md"), "ok").unwrap();
    std::fs::write(root.join("secrets/public.md"), "ok").unwrap();
    symlink("secrets/prod.yaml", root.join("notes.txt")).unwrap();
    symlink("secrets", root.join("config")).unwrap();
    symlink(root.join("secrets/later.yaml"), root.join("dangling")).unwrap();
    symlink(root.join("secrets"), root.join("src/up")).unwrap();
    let names = ["secrets/**".to_owned(), "*.pem".to_owned(), "vault".to_owned()];
    let visible = ["secrets/Public.md", "secrets/shared/**", "vault/deep/open.txt", ".env.example"].map(String::from);
    let workspace = Workspace::new(&root, &[]).hiding(&[], &names, &visible);
    let absolute = root.join("secrets/prod.yaml");
    for path in [
        "secrets/prod.yaml",
        "SECRETS/Prod.YAML",
        "./src/../secrets/prod.yaml",
        absolute.to_str().unwrap(),
        "notes.txt",
        "config/prod.yaml",
        "dangling",
        "src/up/prod.yaml",
        "keys/server.pem",
        "src/deep/TLS.PEM",
        // Under a hidden directory (`secrets/shared` matches `secrets/**`, `vault` itself), as
        // the sandbox covers that directory whole.
        "secrets/shared/readme.md",
        "vault/deep/open.txt",
        "vault",
        ".env",
    ] {
        let place = workspace.locate(&workspace.resolve(path)).place;
        assert!(secret(&place), "{path}: {place:?}");
    }
    // A hostile `..` past the root does not reach the project's name for it.
    let spelled = format!("../{}/secrets/prod.yaml", root.file_name().unwrap().to_str().unwrap());
    assert!(secret(&workspace.locate(&workspace.resolve(&spelled)).place), "{spelled}");
    for path in ["secrets/public.md", "src/main.rs", "secrets"] {
        let place = workspace.locate(&workspace.resolve(path)).place;
        assert!(matches!(place, Place::Inside { .. }), "{path}: {place:?}");
    }
    // A secret name made visible stays protected from edits, but may be read.
    let place = workspace.locate(&workspace.resolve(".env.example")).place;
    assert!(matches!(place, Place::Protected { secret: false, .. }), "{place:?}");
    assert!(workspace.hides(&root.join("notes.txt")) && workspace.hides(&root.join("config/prod.yaml")));
    assert!(!workspace.hides(&root.join("src/main.rs")) && !workspace.hides(&root.join("secrets/public.md")));
    // Without the patterns, nothing of it is secret.
    let plain = Workspace::new(&root, &[]);
    assert_eq!(plain.locate(&root.join("notes.txt")).place, inside("secrets/prod.yaml"));
    assert!(!plain.hides(&root.join("secrets/prod.yaml")));
}

/// Absolute hidden places are secret inside the workspace, however reached (through a link,
/// through the root's own link); outside it they stay outside (asked anyway); one that holds a
/// root hides nothing, as the sandbox leaves it uncovered.
#[test]
fn hidden_absolute_places_are_secret_inside_and_never_hide_the_workspace() {
    let (dir, root) = project();
    std::fs::create_dir_all(root.join("keys")).unwrap();
    std::fs::write(root.join("keys/id"), "KEY").unwrap();
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("token"), "T").unwrap();
    symlink(root.join("keys"), root.join("src/k")).unwrap();
    symlink(outside.join("token"), root.join("token")).unwrap();
    symlink(&root, dir.path().join("alias")).unwrap();
    // Named through a link to the project: judged where it leads too.
    let hidden = [dir.path().join("alias/keys"), outside, dir.path().to_owned()];
    let workspace = Workspace::new(&root, &[]).hiding(&hidden, &[], &[]);
    for path in ["keys/id", "KEYS/../keys/id", "src/k/id"] {
        let place = workspace.locate(&workspace.resolve(path)).place;
        assert!(secret(&place), "{path}: {place:?}");
    }
    assert_eq!(workspace.locate(&root.join("token")).place, Place::Outside);
    assert_eq!(
        workspace.locate(&root.join("src/lib.rs")).place,
        inside("src/lib.rs"),
        "the root's parent hides nothing"
    );
    assert!(workspace.hides(&root.join("src/k/id")) && !workspace.hides(&root.join("src/lib.rs")));
}

/// A link in a protected directory that leads to a secret is secret: the first protected name
/// on the way (`.vscode`) does not make it readable.
#[test]
fn a_secret_reached_through_a_protected_directory_stays_secret() {
    let (_dir, root) = project();
    std::fs::create_dir_all(root.join(".vscode")).unwrap();
    std::fs::write(root.join(".env"), "API_KEY=1").unwrap();
    symlink("../.env", root.join(".vscode/settings.local")).unwrap();
    let workspace = Workspace::new(&root, &[]);
    for path in [".vscode/settings.local", ".vscode/.env"] {
        let place = workspace.locate(&workspace.resolve(path)).place;
        assert!(secret(&place), "{path}: {place:?}");
    }
}
