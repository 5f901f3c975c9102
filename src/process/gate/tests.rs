//! The exec gate's judgement, without a kernel filter in the loop: each notice points into this
//! test's own memory and working directory, as the filter's would point into the caller's. A
//! rejected program is refused by identity, by content, by name, as a `#!` interpreter, through
//! the dynamic loader and as a multi-call applet; subcommand rules read the arguments.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;

use super::*;

/// A notice for `execve(path, argv)` from this process.
struct Exec {
    _strings: Vec<CString>,
    path: CString,
    argv: Vec<*const libc::c_char>,
}

impl Exec {
    fn new(path: &str, argv: &[&str]) -> Self {
        let strings: Vec<CString> = argv.iter().map(|a| CString::new(*a).unwrap()).collect();
        let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(std::ptr::null());
        Exec { _strings: strings, path: CString::new(path).unwrap(), argv: pointers }
    }

    fn notice(&self) -> Notice {
        let args = [self.path.as_ptr() as u64, self.argv.as_ptr() as u64, 0, 0, 0, 0];
        Notice { pid: std::process::id(), call: Call::Execve, args }
    }
}

fn gate(rules: &[&[&str]]) -> Gate {
    let rules: Vec<Vec<String>> = rules.iter().map(|words| words.iter().map(|w| (*w).to_owned()).collect()).collect();
    let mut gate = Gate::new(&rules, std::env::var_os("PATH").as_deref());
    // The command's own exec, which always passes.
    assert_eq!(gate.judge(&Exec::new("/bin/true", &["true"]).notice()), Judgement::Pass);
    gate
}

fn rejected(judgement: &Judgement) -> bool {
    matches!(judgement, Judgement::Reject { .. })
}

fn rm_path() -> String {
    std::fs::canonicalize("/bin/rm").unwrap().display().to_string()
}

#[test]
fn the_program_is_refused_by_its_path_and_through_links() {
    let mut gate = gate(&[&["rm"]]);
    assert!(rejected(&gate.judge(&Exec::new(&rm_path(), &["rm", "-rf", "x"]).notice())));
    assert!(rejected(&gate.judge(&Exec::new("/bin/rm", &["rm"]).notice())), "/bin may be a link to /usr/bin");
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("innocent");
    std::os::unix::fs::symlink(rm_path(), &link).unwrap();
    assert!(rejected(&gate.judge(&Exec::new(link.to_str().unwrap(), &["innocent"]).notice())));
    assert_eq!(gate.judge(&Exec::new("/bin/cat", &["cat"]).notice()), Judgement::Pass);
    assert_eq!(gate.stubs(None), [PathBuf::from(rm_path())], "a program rejected whole is covered");
}

#[test]
fn a_copy_under_another_name_and_a_script_under_the_name_are_refused() {
    let mut gate = gate(&[&["rm"]]);
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tidy");
    std::fs::copy(rm_path(), &copy).unwrap();
    assert!(rejected(&gate.judge(&Exec::new(copy.to_str().unwrap(), &["tidy"]).notice())));
    let script = dir.path().join("rm");
    std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(rejected(&gate.judge(&Exec::new(script.to_str().unwrap(), &["rm"]).notice())));
}

#[test]
fn a_script_whose_interpreter_is_rejected_is_refused() {
    let mut gate = gate(&[&["rm"]]);
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("clean");
    std::fs::write(&script, format!("#!{} -rf\n", rm_path())).unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert!(rejected(&gate.judge(&Exec::new(script.to_str().unwrap(), &["clean", "/x"]).notice())));
}

#[test]
fn the_dynamic_loader_and_multi_call_binaries_do_not_hide_the_program() {
    let mut gate = gate(&[&["rm"]]);
    let loader = ["/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tidy");
    std::fs::copy(rm_path(), &copy).unwrap();
    let exec = Exec::new(loader, &["ld.so", "--library-path", "/x", copy.to_str().unwrap(), "-rf", "y"]);
    assert!(rejected(&gate.judge(&exec.notice())));
    let busybox = dir.path().join("busybox");
    std::fs::copy("/bin/true", &busybox).unwrap();
    assert!(rejected(&gate.judge(&Exec::new(busybox.to_str().unwrap(), &["busybox", "rm", "-rf", "y"]).notice())));
    assert_eq!(gate.judge(&Exec::new(busybox.to_str().unwrap(), &["busybox", "ls"]).notice()), Judgement::Pass);
}

#[test]
fn a_subcommand_rule_reads_the_arguments_past_options() {
    let Ok(git) = std::fs::canonicalize("/usr/bin/git") else { return };
    let git = git.to_str().unwrap().to_owned();
    let mut gate = gate(&[&["git", "push"]]);
    assert!(rejected(&gate.judge(&Exec::new(&git, &["git", "-C", "repo", "push", "origin"]).notice())));
    assert_eq!(gate.judge(&Exec::new(&git, &["git", "status"]).notice()), Judgement::Pass);
    assert!(gate.stubs(None).is_empty(), "git itself stays: only `git push` is rejected");
}

#[test]
fn execveat_of_a_descriptor_is_judged_by_the_file_it_holds() {
    use std::os::fd::AsRawFd;
    let mut gate = gate(&[&["rm"]]);
    let file = std::fs::File::open(rm_path()).unwrap();
    let exec = Exec::new("", &["x"]);
    let args = [
        file.as_raw_fd() as u64,
        exec.path.as_ptr() as u64,
        exec.argv.as_ptr() as u64,
        0,
        libc::AT_EMPTY_PATH as u64,
        0,
    ];
    let notice = Notice { pid: std::process::id(), call: Call::Execveat, args };
    assert!(rejected(&gate.judge(&notice)));
}

#[test]
fn a_relative_path_resolves_from_the_callers_working_directory() {
    let mut gate = gate(&[&["rm"]]);
    let cwd = std::env::current_dir().unwrap();
    let Some(relative) = pathdiff(&cwd) else { return };
    assert!(rejected(&gate.judge(&Exec::new(&relative, &["rm"]).notice())), "{relative}");
}

/// `/usr/bin/rm` written relative to `cwd` with `..`s.
fn pathdiff(cwd: &Path) -> Option<String> {
    let ups = cwd.components().count().checked_sub(1)?;
    Some(format!("{}{}", "../".repeat(ups), rm_path().trim_start_matches('/')))
}
