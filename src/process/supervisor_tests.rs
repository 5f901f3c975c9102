//! The supervisor's arguments as cairn writes and the supervisor reads them: the policy carried
//! whole, only workspace-write given writable places, and malformed lines refused.

use super::*;

#[test]
fn the_arguments_carry_the_policy_and_only_workspace_write_has_writable_places() {
    let policy = ProcessPolicy {
        network: false,
        hidden: vec![PathBuf::from("/home/u/.ssh")],
        hidden_names: vec!["*.pem".into()],
        visible_names: vec![".env.example".into()],
        visible: vec![PathBuf::from("/run/docker.sock")],
        service_dirs: vec![PathBuf::from("/tmp/tmux-1000")],
        sockets_before: Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_250)),
        ..ProcessPolicy::default()
    };
    let roots = [PathBuf::from("/work/project")];
    let rejected = [vec!["git".to_owned(), "push".to_owned()]];
    let confinement = Confinement { roots: &roots, rejected: &rejected, rules: Some(Path::new("/data/rules/1-2-3")) };
    let script = [OsStr::new("-c"), OsStr::new("ls -- x")];
    let watched = (Watched::Fd(7), Some(8));
    let args = arguments(&policy, confinement, Some(Kind::User), watched, true, OsStr::new("bash"), &script);
    let spec = parse(args.into_iter().skip(1)).unwrap();
    assert_eq!(
        spec,
        Spec {
            mode: Some(SandboxMode::WorkspaceWrite),
            network: false,
            namespace: Some(Kind::User),
            roots: vec![PathBuf::from("/work/project")],
            writable: vec![PathBuf::from("/tmp")],
            own: Vec::new(),
            running_lock: None,
            hidden: vec![PathBuf::from("/home/u/.ssh")],
            hidden_names: vec!["*.pem".into()],
            visible_names: vec![".env.example".into()],
            visible: vec![PathBuf::from("/run/docker.sock")],
            service_dirs: vec![PathBuf::from("/tmp/tmux-1000")],
            sockets_before: Some(std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_250)),
            rejected: vec![vec!["git".into(), "push".into()]],
            rules: Some(PathBuf::from("/data/rules/1-2-3")),
            watched: Watched::Fd(7),
            lasting: true,
            inotify: Some(8),
            program: "bash".into(),
            args: vec!["-c".into(), "ls -- x".into()],
        }
    );
    let read_only = ProcessPolicy { sandbox: SandboxMode::ReadOnly, ..ProcessPolicy::default() };
    let confinement = Confinement { roots: &roots, rejected: &[], rules: None };
    let args = arguments(&read_only, confinement, None, (Watched::Stdin, None), false, OsStr::new("true"), &[]);
    let spec = parse(args.into_iter().skip(1)).unwrap();
    assert!(spec.writable.is_empty() && spec.network && spec.namespace.is_none() && spec.inotify.is_none());
    assert_eq!(spec.watched, Watched::Stdin);
    let args = arguments(&read_only, confinement, None, (Watched::Nothing, None), false, OsStr::new("true"), &[]);
    assert_eq!(parse(args.into_iter().skip(1)).unwrap().watched, Watched::Nothing);
    let args = arguments(
        &read_only,
        confinement,
        None,
        (Watched::Pid { pid: 42, started: 7, namespace: 9 }, None),
        false,
        OsStr::new("true"),
        &[],
    );
    assert_eq!(parse(args.into_iter().skip(1)).unwrap().watched, Watched::Pid { pid: 42, started: 7, namespace: 9 });
    assert!(parse(["off".into(), "network".into(), "bash".into()].into_iter()).is_err());
    assert!(parse(["off".into(), "network".into(), "--bogus".into(), "x".into(), "--".into()].into_iter()).is_err());
}
