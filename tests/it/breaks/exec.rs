//! The exec check, the process tree and what root keeps, attacked: a rejected subcommand run
//! by spellings the check does not resolve (git's dashed name, a path that is not UTF-8, a
//! changed copy, a `#!` line's argument), a program rejected whole copied through another hard
//! link, a process that hops from pid to pid past the kill, and, as root, the mount API that
//! Landlock does not cover.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::{committed, kernel_keeps_it, repository, running_as_root, sh, sh_out, supervise};
use crate::exec::bash_calls;
use crate::support::TestEnv;

/// A repository with a bare remote `origin`; the remote's path.
fn with_remote(dir: &Path, ws: &Path) -> PathBuf {
    let remote = dir.join("remote.git");
    sh(dir, &format!("git init -q --bare {}", remote.display()));
    sh(ws, &format!("git remote add origin {}", remote.display()));
    remote
}

/// The branches the remote has.
fn branches(remote: &Path) -> String {
    sh_out(remote, "git branch --format='%(refname:short)'")
}

/// Git runs the builtin its `argv[0]` names (`git-push`); the check matches the subcommand on
/// the arguments after it only.
#[test]
fn a_rejected_subcommand_is_refused_when_git_is_started_by_its_dashed_name() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let remote = with_remote(dir.path(), &ws);
    let output = supervise(&ws, "(exec -a git-push git origin HEAD:dashed) 2>&1", &["--reject", "git push"]);
    assert!(!branches(&remote).contains("dashed"), "git push ran: {}{}", output.stdout, output.stderr);
}

/// A relative path that is not UTF-8 is read as the empty path (the working directory, no
/// file), and the exec passes unjudged.
#[test]
fn a_rejected_subcommand_is_refused_through_a_path_that_is_not_utf8() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let remote = with_remote(dir.path(), &ws);
    let script =
        "ln -s \"$(command -v git)\" \"$(printf '\\377')\" && \"./$(printf '\\377')\" push origin HEAD:latin 2>&1";
    let output = supervise(&ws, script, &["--reject", "git push"]);
    assert!(!branches(&remote).contains("latin"), "git push ran: {}{}", output.stdout, output.stderr);
}

/// A copy is known by its content only when every byte is equal: one byte appended (an ELF
/// file runs the same) and it is a stranger. Programs rejected with a subcommand are not
/// covered, so their bytes are there to copy.
#[test]
fn a_rejected_subcommand_is_refused_from_a_changed_copy() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let remote = with_remote(dir.path(), &ws);
    let script = "cp \"$(command -v git)\" ./tool && printf '\\0' >> ./tool && ./tool push origin HEAD:copied 2>&1";
    let output = supervise(&ws, script, &["--reject", "git push"]);
    assert!(!branches(&remote).contains("copied"), "git push ran: {}{}", output.stdout, output.stderr);
}

/// `#!/usr/bin/git push`: the interpreter is judged without the argument its `#!` line gives
/// it, and the kernel passes the script's path (here `origin`, the remote) after it.
#[test]
fn a_rejected_subcommand_is_refused_from_a_shebang_argument() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let remote = with_remote(dir.path(), &ws);
    let script = "printf '#!%s push\\n' \"$(command -v git)\" > ../s && chmod +x ../s && ln -s ../s origin && \
                  python3 -c 'import os; os.execv(\"origin\", [\"origin\", \"HEAD:shebang\"])' 2>&1";
    let output = supervise(&ws, script, &["--reject", "git push"]);
    assert!(!branches(&remote).contains("shebang"), "git push ran: {}{}", output.stdout, output.stderr);
}

/// A program rejected whole is covered by an empty file at its path, but another hard link to
/// the same file (`perl` and `perl5.36.0`) still holds its bytes: copied with one byte more, it
/// is neither the file nor the same content, and runs.
#[test]
fn a_program_rejected_whole_cannot_be_copied_through_another_hard_link() {
    if !kernel_keeps_it() {
        return;
    }
    let Some((name, link)) = hard_linked_program() else {
        println!("skipped: no program in /usr/bin with a second hard link");
        return;
    };
    let (_dir, ws) = repository();
    let script = format!(
        "cp {} ./other && printf '\\0' >> ./other && ./other --version >/dev/null 2>&1 && echo RAN",
        link.display()
    );
    let output = supervise(&ws, &script, &["--reject", &name]);
    assert!(!output.stdout.contains("RAN"), "a changed copy of {name} ran from {}: {}", link.display(), output.stderr);
}

/// A program of `/usr/bin` (with `--version`) that has another name there by hard link.
fn hard_linked_program() -> Option<(String, PathBuf)> {
    let mut seen: std::collections::HashMap<(u64, u64), PathBuf> = std::collections::HashMap::new();
    for candidate in ["perl", "python3", "gzip", "git"] {
        let path = Path::new("/usr/bin").join(candidate);
        let Ok(meta) = std::fs::metadata(&path) else { continue };
        if meta.nlink() > 1 && meta.is_file() {
            seen.insert((meta.dev(), meta.ino()), path);
        }
    }
    for entry in std::fs::read_dir("/usr/bin").ok()?.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if let Some(original) = seen.get(&(meta.dev(), meta.ino()))
            && original != &entry.path()
        {
            let name = original.file_name()?.to_string_lossy().into_owned();
            return Some((name, entry.path()));
        }
    }
    None
}

/// A process that forks and lets its parent exit, again and again, is never where the kill
/// looks: it outlives the supervisor, then writes a guarded place after the sweep.
#[tokio::test]
async fn a_process_hopping_from_pid_to_pid_does_not_outlive_its_command() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    // Four of them, hopping before the command ends; they stop 3 s later.
    let hopper = "for k in 1 2 3 4; do perl -MPOSIX -e '$end = time + 3; while (time < $end) { my $p = fork; \
                  POSIX::_exit(0) if $p } sleep 2; mkdir \".cargo\"; open(my $f, \">\", \".cargo/config.toml\"); \
                  print $f \"[build]\\n\"' >/dev/null 2>&1 & done; sleep 0.5; echo started";
    let results = bash_calls(&env, &[hopper], &["--mode", "bypass"]).await;
    assert!(results[0].contains("started"), "{results:?}");
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(8) && !ws.join(".cargo/config.toml").exists() {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(!ws.join(".cargo/config.toml").exists(), "a process of the command outlived it and wrote .cargo/");
}

/// Root in a mount namespace keeps `CAP_SYS_ADMIN`: `mount_setattr` (which Landlock does not
/// check) clears the read-only flag of `.git/hooks`.
#[test]
fn as_root_a_command_cannot_make_a_read_only_place_writable_again() {
    if !kernel_keeps_it() || !running_as_root() {
        println!("skipped: needs root");
        return;
    }
    let (_dir, ws) = repository();
    // mount_setattr(AT_FDCWD, path, AT_RECURSIVE, {attr_clr: MOUNT_ATTR_RDONLY}, 32)
    let script = "perl -e 'my ($p, $a) = (\".git/hooks\", pack(\"QQQQ\", 0, 1, 0, 0)); syscall(442, -100, $p, 0x8000, $a, 32)' && \
                  echo x > .git/hooks/pre-commit && echo hook-written";
    let output = supervise(&ws, script, &[]);
    assert!(!ws.join(".git/hooks/pre-commit").exists(), "a hook was written: {}{}", output.stdout, output.stderr);
}

/// Root in a mount namespace keeps `CAP_SYS_ADMIN`: `open_tree(OPEN_TREE_CLONE)` of the
/// workspace without its submounts shows what the covers hide.
#[test]
fn as_root_a_command_cannot_read_what_a_cover_hides() {
    if !kernel_keeps_it() || !running_as_root() {
        println!("skipped: needs root");
        return;
    }
    let (_dir, ws) = repository();
    std::fs::write(ws.join(".env"), "TOKEN=under-the-cover\n").unwrap();
    // open_tree(AT_FDCWD, ".", OPEN_TREE_CLONE), then read .env below the detached copy.
    let script = "perl -e 'my $p = \".\"; my $fd = syscall(428, -100, $p, 1); open(my $f, \"<\", \"/proc/self/fd/$fd/.env\") or die; print <$f>'";
    let output = supervise(&ws, script, &[]);
    assert!(!output.stdout.contains("under-the-cover"), ".env was read: {}", output.stdout);
}

/// Root can mark a guarded place it made immutable: the sweep cannot take it away.
#[test]
fn as_root_a_command_cannot_keep_a_guarded_place_it_made() {
    if !kernel_keeps_it() || !running_as_root() || sh_out(Path::new("/"), "command -v chattr").is_empty() {
        println!("skipped: needs root and chattr");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let output =
        supervise(&ws, "mkdir .cargo && echo '[build]' > .cargo/config.toml && chattr +i .cargo/config.toml", &[]);
    let kept = ws.join(".cargo/config.toml").exists();
    let _ = sh_out(&ws, "chattr -i .cargo/config.toml");
    assert!(!kept, "the command kept .cargo/config.toml: {}", output.stderr);
}

/// The check reads at most 256 arguments of 4,096 bytes and judges what it read: an argument it
/// cannot read whole ends the list early, so `push` after it is never seen. End to end: a
/// Makefile (the parser sees only `make`) pushes past `--deny "bash:git push"`.
#[tokio::test]
async fn a_rejected_subcommand_is_refused_after_an_argument_too_long_to_read() {
    if !kernel_keeps_it() {
        return;
    }
    let env = TestEnv::new().await;
    let ws = env.workspace();
    committed(&ws);
    let remote = with_remote(env.dir.path(), &ws);
    let long = "a".repeat(5000);
    std::fs::write(ws.join("Makefile"), format!("all:\n\t-git -c x.y={long} push origin HEAD:long\n")).unwrap();
    let results = bash_calls(&env, &["make 2>&1"], &["--mode", "bypass", "--deny", "bash:git push"]).await;
    let tail = &results[0][results[0].len().saturating_sub(200)..];
    assert!(!branches(&remote).contains("long"), "git push ran: …{tail}");
}

/// 130 `-c` options put `push` past the 256 arguments the check reads.
#[test]
fn a_rejected_subcommand_is_refused_after_many_arguments() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let remote = with_remote(dir.path(), &ws);
    let script = "git $(for i in $(seq 130); do printf -- '-c x.y=1 '; done) push origin HEAD:many 2>&1";
    let output = supervise(&ws, script, &["--reject", "git push"]);
    assert!(!branches(&remote).contains("many"), "git push ran: {}{}", output.stdout, output.stderr);
}

/// `help.autocorrect` makes git run the command a misspelt word is closest to: `psuh` is not
/// `push` to the check, and is to git.
#[test]
fn a_rejected_subcommand_is_refused_when_git_corrects_a_misspelling() {
    if !kernel_keeps_it() {
        return;
    }
    let (dir, ws) = repository();
    let remote = with_remote(dir.path(), &ws);
    let script = "git -c help.autocorrect=immediate psuh origin HEAD:corrected 2>&1";
    let output = supervise(&ws, script, &["--reject", "git push"]);
    assert!(!branches(&remote).contains("corrected"), "git push ran: {}{}", output.stdout, output.stderr);
}

/// With `mode = "off"` the rejected program is still covered, but nothing keeps root from
/// unmounting the cover; a copy with one byte more then runs.
#[test]
fn with_the_sandbox_off_a_program_rejected_whole_still_cannot_be_copied_and_run() {
    if !kernel_keeps_it() || !running_as_root() {
        println!("skipped: needs root");
        return;
    }
    let (dir, ws) = repository();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "keep me").unwrap();
    let rm = sh_out(Path::new("/"), "readlink -f \"$(command -v rm)\"");
    let script = format!(
        "umount {rm} 2>&1; cp {rm} ./other && printf '\\0' >> ./other && ./other {} && echo REMOVED",
        victim.display(),
        rm = rm.trim()
    );
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_cairn"));
    command
        .args(["__supervise", "off", "network", "--namespace", "mount", "--root"])
        .arg(&ws)
        .args(["--reject", "rm", "--", "bash", "-c", &script])
        .current_dir(&ws)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    let _watch = child.stdin.take();
    let output = child.wait_with_output().unwrap();
    assert!(victim.exists(), "rm ran: {}", String::from_utf8_lossy(&output.stdout));
}
