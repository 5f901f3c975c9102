//! The policy's own choices: which launcher and sandbox a start gets, and what they say.

use super::*;

#[test]
fn modes_round_trip_through_their_ids() {
    for mode in [SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly, SandboxMode::Off] {
        assert_eq!(SandboxMode::parse(mode.id()), Some(mode));
    }
    assert_eq!(SandboxMode::parse("none"), None);
}

#[tokio::test]
async fn a_direct_child_gets_the_cleaned_environment() {
    let dir = tempfile::tempdir().unwrap();
    let policy = ProcessPolicy {
        env: ChildEnv { remove: vec!["HOME".into()], path: Some("/usr/bin:/bin".into()), set: Vec::new() },
        ..ProcessPolicy::default()
    };
    let script = OsStr::new("echo \"[$HOME][$PATH]\"");
    let mut local = policy
        .spawn(OsStr::new("bash"), &[OsStr::new("-c"), script], dir.path(), Confinement::default())
        .await
        .unwrap();
    let mut stdout = local.take_stdout().unwrap();
    let mut out = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stdout, &mut out).await.unwrap();
    assert!(local.wait().await.unwrap().success());
    assert_eq!(out, "[][/usr/bin:/bin]\n");
}

/// Where a started process may change a directory's entries, which decides whether the
/// editor's file calls wait for it: the roots and writable places its sandbox keeps it to, or
/// anywhere when nothing keeps it.
#[test]
fn a_process_reaches_its_sandboxs_writable_places_or_anywhere_without_one() {
    use super::running::Reach;
    let roots = [PathBuf::from("/work/project")];
    let supervised = |sandbox| ProcessPolicy {
        sandbox,
        writable: vec![PathBuf::from("/var/cache/builds")],
        launcher: Launcher::Supervisor(PathBuf::from("/proc/self/exe")),
        ..ProcessPolicy::default()
    };
    assert_eq!(ProcessPolicy::default().reach(&roots), Reach::Anywhere, "the direct launcher confines nothing");
    assert_eq!(supervised(SandboxMode::Off).reach(&roots), Reach::Anywhere);
    if !landlock_support().filesystem {
        assert_eq!(supervised(SandboxMode::WorkspaceWrite).reach(&roots), Reach::Anywhere, "no Landlock");
        return;
    }
    let Reach::Beneath(places) = supervised(SandboxMode::WorkspaceWrite).reach(&roots) else {
        panic!("a sandboxed process reaches only its places");
    };
    assert!(places.contains(&roots[0]) && places.contains(&PathBuf::from("/var/cache/builds")), "{places:?}");
    let Reach::Beneath(places) = supervised(SandboxMode::ReadOnly).reach(&roots) else { panic!("read-only") };
    assert!(!places.contains(&roots[0]), "a read-only process writes no root: {places:?}");
    assert!(places.iter().all(|place| place.starts_with("/dev")), "only the devices: {places:?}");
}
