//! The exec gate's judgement, without a kernel filter in the loop: each notice points into this
//! test's own memory and working directory, as the filter's would point into the caller's. A
//! rejected program is refused by identity, by content, by build id, by name, as a `#!`
//! interpreter (with the vector the kernel builds), through the dynamic loader and as a
//! multi-call applet; subcommand rules read the arguments whole, as git reads them. Then the
//! pieces: the `#!` line, the build id note, git's command word and closeness.

use std::ffi::CString;
use std::os::unix::fs::PermissionsExt;

use super::*;

mod pieces;

/// A notice for `execve(path, argv)` from this process.
struct Exec {
    _strings: Vec<CString>,
    path: CString,
    argv: Vec<*const libc::c_char>,
}

impl Exec {
    fn new(path: &str, argv: &[&str]) -> Self {
        Self::bytes(path.as_bytes(), &argv.iter().map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>())
    }

    fn bytes(path: &[u8], argv: &[Vec<u8>]) -> Self {
        let strings: Vec<CString> = argv.iter().map(|a| CString::new(a.clone()).unwrap()).collect();
        let mut pointers: Vec<*const libc::c_char> = strings.iter().map(|s| s.as_ptr()).collect();
        pointers.push(std::ptr::null());
        Exec { _strings: strings, path: CString::new(path).unwrap(), argv: pointers }
    }

    fn notice(&self) -> Notice {
        let args = [self.path.as_ptr() as u64, self.argv.as_ptr() as u64, 0, 0, 0, 0];
        Notice { pid: std::process::id(), call: Call::Execve, args }
    }
}

/// The gate as the supervisor runs it: absolute paths resolved from its own root.
fn gate(rules: &[&[&str]]) -> Gate {
    let mut gate = unfixed(rules);
    gate.fix_root();
    gate
}

/// The gate before its root is fixed: every path resolved as the caller sees it.
fn unfixed(rules: &[&[&str]]) -> Gate {
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

/// The `git` on the `PATH`, if there is one.
fn git() -> Option<String> {
    let path = std::env::var_os("PATH")?;
    let found = std::env::split_paths(&path).map(|dir| dir.join("git")).find(|path| path.is_file())?;
    Some(std::fs::canonicalize(found).ok()?.to_str()?.to_owned())
}

fn script(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.to_str().unwrap().to_owned()
}

#[test]
fn git_started_by_a_dashed_name_runs_that_subcommand() {
    let Some(git) = git() else { return };
    let mut gate = gate(&[&["git", "push"]]);
    assert!(rejected(&gate.judge(&Exec::new(&git, &["git-push", "origin"]).notice())), "argv[0] git-push");
    assert!(rejected(&gate.judge(&Exec::new(&git, &["/x/git-push", "origin"]).notice())), "its base name");
    assert_eq!(gate.judge(&Exec::new(&git, &["git-status"]).notice()), Judgement::Pass);
    let dir = tempfile::tempdir().unwrap();
    let helper = script(dir.path(), "git-push", "#!/bin/sh\n");
    assert!(rejected(&gate.judge(&Exec::new(&helper, &["helper", "origin"]).notice())), "a file so named");
}

#[test]
fn a_shebang_argument_and_the_script_path_are_in_the_vector_judged() {
    let Some(git) = git() else { return };
    let mut gate = gate(&[&["git", "push"]]);
    let dir = tempfile::tempdir().unwrap();
    let push = script(dir.path(), "s", &format!("#!{git} push\n"));
    assert!(rejected(&gate.judge(&Exec::new(&push, &["s", "origin"]).notice())), "the #! argument");
    let status = script(dir.path(), "t", &format!("#!{git} status\n"));
    assert_eq!(gate.judge(&Exec::new(&status, &["t"]).notice()), Judgement::Pass);
    let nested = script(dir.path(), "outer", &format!("#!{push}\n"));
    assert!(rejected(&gate.judge(&Exec::new(&nested, &["outer"]).notice())), "a #! script as interpreter");
}

#[test]
fn a_changed_copy_is_known_by_its_build_id_and_a_path_as_bytes() {
    let file = std::fs::File::open(rm_path()).unwrap();
    if file::build_id(&file, &file::head(&file)).is_none() {
        // This system's rm has no build id: nothing to compare.
        return;
    }
    let mut gate = gate(&[&["rm"]]);
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tidy");
    let mut bytes = std::fs::read(rm_path()).unwrap();
    bytes.push(0);
    std::fs::write(&copy, bytes).unwrap();
    assert!(rejected(&gate.judge(&Exec::new(copy.to_str().unwrap(), &["tidy"]).notice())), "one byte appended");
    let odd = dir.path().join(OsStr::from_bytes(b"\xff"));
    std::os::unix::fs::symlink(&copy, &odd).unwrap();
    let path = odd.as_os_str().as_bytes();
    assert!(rejected(&gate.judge(&Exec::bytes(path, &[b"\xff".to_vec()]).notice())), "a name that is not UTF-8");
}

#[test]
fn arguments_that_cannot_be_read_whole_refuse_a_program_with_subcommand_rules() {
    let Some(git) = git() else { return };
    let mut gate = gate(&[&["git", "push"]]);
    let long = "a".repeat(200 * 1024);
    let judged = gate.judge(&Exec::new(&git, &["git", "-c", &format!("x.y={long}"), "status"]).notice());
    assert!(matches!(&judged, Judgement::Reject { why, .. } if why.contains("longer")), "{judged:?}");
    let mut many = vec!["git".to_owned()];
    for _ in 0..300 {
        many.extend(["-c".to_owned(), "x.y=1".to_owned()]);
    }
    many.extend(["push".to_owned(), "a".repeat(5000)]);
    let mut many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(rejected(&gate.judge(&Exec::new(&git, &many).notice())), "past 256 arguments of 4 KiB");
    many.pop();
    *many.last_mut().unwrap() = "status";
    assert_eq!(gate.judge(&Exec::new(&git, &many).notice()), Judgement::Pass);
}

#[test]
fn a_word_git_would_correct_to_a_rejected_subcommand_is_that_subcommand() {
    let Some(git) = git() else { return };
    let mut gate = gate(&[&["git", "push"]]);
    for word in ["psuh", "pus", "puhs", "pushh"] {
        let exec = Exec::new(&git, &["git", "-c", "help.autocorrect=immediate", word, "origin"]);
        assert!(rejected(&gate.judge(&exec.notice())), "{word}");
    }
    for word in ["pull", "status", "stash", "log"] {
        assert_eq!(gate.judge(&Exec::new(&git, &["git", word]).notice()), Judgement::Pass, "{word}");
    }
}

#[test]
fn other_hard_links_of_a_program_rejected_whole_are_covered() {
    let dir = tempfile::tempdir().unwrap();
    let tool = script(dir.path(), "tool", "#!/bin/sh\n");
    std::fs::hard_link(&tool, dir.path().join("tool-1.0")).unwrap();
    let rules = vec![vec!["tool".to_owned()]];
    let gate = Gate::new(&rules, Some(dir.path().as_os_str()));
    let mut stubs = gate.stubs(None);
    stubs.sort();
    let real = std::fs::canonicalize(dir.path()).unwrap();
    assert_eq!(stubs, [real.join("tool"), real.join("tool-1.0")]);
}

#[test]
fn the_fixed_root_and_the_callers_view_judge_alike_even_through_proc_and_dot_dot() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::os::unix::fs::symlink(rm_path(), d.join("innocent")).unwrap();
    std::os::unix::fs::symlink("innocent", d.join("relative")).unwrap();
    std::fs::copy(rm_path(), d.join("tidy")).unwrap();
    let held = std::fs::File::open(rm_path()).unwrap();
    // `/proc/self` is the caller, not the supervisor: its descriptor holds rm, and only a
    // magic link leads there, which the one-call resolution refuses to follow.
    let magic = format!("/proc/self/fd/{}", held.as_raw_fd());
    std::os::unix::fs::symlink(&magic, d.join("held")).unwrap();
    let up = format!("/../../..{}", rm_path());
    let paths: Vec<(String, bool)> = vec![
        (rm_path(), true),
        (up, true),
        (d.join("innocent").display().to_string(), true),
        (d.join("relative").display().to_string(), true),
        (d.join("tidy").display().to_string(), true),
        (magic, true),
        (d.join("held").display().to_string(), true),
        (format!("{}/.", d.display()), false),
        (d.join("missing").display().to_string(), false),
        ("/bin/cat".to_owned(), false),
    ];
    let (mut fixed, mut caller) = (gate(&[&["rm"]]), unfixed(&[&["rm"]]));
    for (path, refused) in &paths {
        let exec = Exec::new(path, &["x"]);
        assert_eq!(rejected(&fixed.judge(&exec.notice())), *refused, "{path}");
        assert_eq!(rejected(&caller.judge(&exec.notice())), *refused, "{path}, as the caller sees it");
    }
}

#[test]
fn a_settled_file_is_read_once_and_a_fresh_one_at_every_exec() {
    let mut gate = gate(&[&["rm"]]);
    let elsewhere = tempfile::tempdir().unwrap();
    gate.writes_only_beneath([elsewhere.path().to_path_buf()].into_iter());
    for _ in 0..3 {
        assert!(rejected(&gate.judge(&Exec::new(&rm_path(), &["rm"]).notice())));
        assert_eq!(gate.judge(&Exec::new("/bin/cat", &["cat"]).notice()), Judgement::Pass);
    }
    assert_eq!(gate.seen.len(), 2, "rm and cat, each kept once");
    // A script the command has just written is read anew each time: rewritten with the same
    // size within the clock's tick, it could keep its key.
    let dir = tempfile::tempdir().unwrap();
    let path = script(dir.path(), "build", "#!/bin/cat\n");
    assert_eq!(gate.judge(&Exec::new(&path, &["build"]).notice()), Judgement::Pass);
    std::fs::write(&path, format!("#!{}\n", rm_path())).unwrap();
    assert!(rejected(&gate.judge(&Exec::new(&path, &["build"]).notice())));
    assert_eq!(gate.seen.len(), 2);
}

#[test]
fn only_a_file_the_tree_cannot_write_is_kept() {
    let (writable, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let path = script(writable.path(), "tool", "#!/bin/cat\n");
    let unwritable = |gate: &Gate, path: &str| {
        let target = gate.reach(&Caller { pid: std::process::id() }, Start::Cwd, path.as_bytes()).ok().unwrap();
        facts::unwritable(&target.meta, || target.named().map(Path::to_path_buf), gate.me, gate.writable.as_deref())
    };
    let mut gate = gate(&[&["rm"]]);
    assert!(!unwritable(&gate, &path), "without Landlock, the user's own file can be written");
    gate.writes_only_beneath([writable.path().to_path_buf()].into_iter());
    assert!(!unwritable(&gate, &path), "beneath a writable place");
    assert!(unwritable(&gate, &rm_path()), "a system program outside every writable place");
    gate.writes_only_beneath([other.path().to_path_buf()].into_iter());
    assert!(unwritable(&gate, &path), "outside every writable place");
    // A second name in a writable place would let the tree write it.
    std::fs::hard_link(&path, other.path().join("alias")).unwrap();
    assert!(!unwritable(&gate, &path), "a second name");
}

/// A directory more than a page deep beneath `place`: the kernel cannot say where a file in it
/// lies (`readlink` of its descriptor fails with `ENAMETOOLONG`).
fn too_deep(place: &Path) -> File {
    let mut dir = File::open(place).unwrap();
    for i in 0..24 {
        let next = format!("/proc/self/fd/{}/{}", dir.as_raw_fd(), format!("d{i:02}").repeat(67));
        std::fs::create_dir(&next).unwrap();
        dir = File::open(&next).unwrap();
    }
    dir
}

#[test]
fn a_file_the_kernel_cannot_name_is_never_kept() {
    let place = tempfile::tempdir().unwrap();
    let deep = too_deep(place.path());
    let path = script(Path::new(&format!("/proc/self/fd/{}", deep.as_raw_fd())), "tool", "#!/bin/cat\n");
    let mut gate = gate(&[&["rm"]]);
    gate.writes_only_beneath([place.path().to_path_buf()].into_iter());
    let target = gate.reach(&Caller { pid: std::process::id() }, Start::Cwd, path.as_bytes()).ok().unwrap();
    assert!(std::fs::read_link(format!("/proc/self/fd/{}", target.file.as_raw_fd())).is_err(), "too deep to name");
    let unwritable =
        facts::unwritable(&target.meta, || target.named().map(Path::to_path_buf), gate.me, gate.writable.as_deref());
    assert!(!unwritable, "{path} lies beneath the writable place, but is judged unwritable");
}

#[test]
#[allow(unsafe_code)]
fn a_file_rewritten_through_a_mapping_made_before_it_was_judged_is_judged_anew() {
    let place = tempfile::tempdir().unwrap();
    let deep = too_deep(place.path());
    let size = 4096;
    let innocent = format!("{:<size$}", "#!/bin/cat\n");
    let path = script(Path::new(&format!("/proc/self/fd/{}", deep.as_raw_fd())), "tool", &innocent);
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
    // SAFETY: a shared mapping of the file's one page, written only through the slice below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    // SAFETY: `map` is `size` bytes, mapped until the end of the test.
    let bytes = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), size) };
    bytes.copy_from_slice(innocent.as_bytes()); // the write fault moves the times, now
    drop(file);
    std::thread::sleep(std::time::Duration::from_millis(3200));
    let mut gate = gate(&[&["rm"]]);
    gate.writes_only_beneath([place.path().to_path_buf()].into_iter());
    let before = std::fs::metadata(&path).unwrap();
    assert_eq!(gate.judge(&Exec::new(&path, &["tool"]).notice()), Judgement::Pass);
    let evil = format!("{:<size$}", format!("#!{}\n", rm_path()));
    bytes.copy_from_slice(evil.as_bytes()); // no fault: no time moves
    let after = std::fs::metadata(&path).unwrap();
    assert_eq!(
        (before.ctime(), before.ctime_nsec(), before.mtime_nsec()),
        (after.ctime(), after.ctime_nsec(), after.mtime_nsec())
    );
    assert!(std::fs::read_to_string(&path).unwrap().starts_with(&format!("#!{}", rm_path())));
    let judged = gate.judge(&Exec::new(&path, &["tool"]).notice());
    // SAFETY: unmapped once, after its last use.
    unsafe { libc::munmap(map, size) };
    assert!(rejected(&judged), "a script that now runs rm: {judged:?}");
}

#[test]
fn a_writable_place_that_is_a_file_is_never_kept() {
    // `[sandbox] writable` takes any absolute path; Landlock lets the tree write a file named
    // there, but only the directories above a file are compared.
    let dir = tempfile::tempdir().unwrap();
    let path = script(dir.path(), "tool", "#!/bin/cat\n");
    let mut gate = gate(&[&["rm"]]);
    gate.writes_only_beneath([PathBuf::from(&path)].into_iter());
    let target = gate.reach(&Caller { pid: std::process::id() }, Start::Cwd, path.as_bytes()).ok().unwrap();
    let unwritable =
        facts::unwritable(&target.meta, || target.named().map(Path::to_path_buf), gate.me, gate.writable.as_deref());
    assert!(!unwritable, "{path} is itself a writable place");
}
