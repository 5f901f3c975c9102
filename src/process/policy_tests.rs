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
