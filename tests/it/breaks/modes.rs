//! A file's mode and owner, which Landlock does not cover, attacked: a command run as root made
//! a root binary setuid and gave a root-only file to another user (who then wrote it). The
//! seccomp filter refuses setting the setuid or setgid bit and giving a file to another owner;
//! plain `chmod` work in the workspace goes on.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use super::{kernel_keeps_it, outside, sh, sh_out, supervise, supervise_as_nobody};

/// A copy of `/bin/true` at `path`, mode 755.
fn binary(path: &Path) {
    std::fs::copy("/bin/true", path).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

#[test]
fn a_command_cannot_set_the_setuid_or_setgid_bit_on_a_file_in_the_workspace_or_outside() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let away = outside("modes-setuid");
    let (inside, system) = (ws.join("tool"), away.path().join("rootbin"));
    binary(&inside);
    binary(&system);
    // chmod (fchmodat), install (fchmod), and a file made with the bits (openat, creat's kin).
    let script = format!(
        "chmod 4755 tool; chmod g+s tool; chmod 4755 {system}; install -m 4755 /bin/true installed; \
         perl -e 'use Fcntl; sysopen(my $f, \"made\", O_CREAT | O_WRONLY, 06755) or die \"made: $!\"'; \
         ls -l; echo done",
        system = system.display()
    );
    let output = supervise(&ws, &script, &[]);
    let said = format!("{}{}", output.stdout, output.stderr);
    assert!(said.contains("done"), "{said}");
    assert_eq!(mode(&inside), 0o755, "{said}");
    assert_eq!(mode(&system), 0o755, "a file outside the workspace was made setuid: {said}");
    for made in ["installed", "made"] {
        let path = ws.join(made);
        assert!(!path.exists() || mode(&path) & 0o6000 == 0, "{made} is {:o}: {said}", mode(&path));
    }
}

#[test]
fn a_command_cannot_give_a_file_to_another_owner_or_group() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let away = outside("modes-chown");
    let (inside, system) = (ws.join("notes"), away.path().join("shadowish"));
    std::fs::write(&inside, "mine\n").unwrap();
    std::fs::write(&system, "root-only\n").unwrap();
    std::fs::set_permissions(&system, std::fs::Permissions::from_mode(0o600)).unwrap();
    let owner = |path: &Path| {
        let meta = std::fs::metadata(path).unwrap();
        (meta.uid(), meta.gid())
    };
    let (before_inside, before_system) = (owner(&inside), owner(&system));
    let script = format!(
        "chown 4242 notes; chgrp 4242 notes; chown 4242:4242 {system}; chown -h 4242 notes; echo done",
        system = system.display()
    );
    let output = supervise(&ws, &script, &[]);
    let said = format!("{}{}", output.stdout, output.stderr);
    assert!(said.contains("done"), "{said}");
    assert_eq!(owner(&inside), before_inside, "{said}");
    assert_eq!(owner(&system), before_system, "a file outside the workspace was given away: {said}");
}

/// The seventh pass's 01: root's `chmod 666` of a root-only file outside opened it to every
/// user; an ACL (`setxattr`), new times and a user's `chmod 777` of a directory of their own
/// outside went through likewise, Landlock having no right for any of them.
#[test]
fn a_command_cannot_change_the_mode_acl_or_times_of_anything_outside_the_writable_places() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let away = outside("modes-outside");
    let (secret, home) = (away.path().join("shadowish"), away.path().join("home"));
    std::fs::write(&secret, "root-only\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::create_dir(&home).unwrap();
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let stamp = |path: &Path| std::fs::metadata(path).unwrap().mtime();
    let acl = |path: &Path| {
        sh_out(path.parent().unwrap(), &format!("python3 -c 'import os; print(os.listxattr(\"{}\"))'", path.display()))
    };
    let (secret_time, acl_before, device_time) = (stamp(&secret), acl(&secret), stamp(Path::new("/dev/full")));
    // An ACL granting user 65534 read, in the kernel's own binary form, set by setxattr(2).
    let script = format!(
        "chmod 666 {secret}; chmod 777 {home}; touch -m -d 2001-01-01 {secret} /dev/full; \
         python3 -c 'import os, struct, sys
entries = [(1, 6, 0xFFFFFFFF), (2, 4, 65534), (4, 0, 0xFFFFFFFF), (0x10, 4, 0xFFFFFFFF), (0x20, 0, 0xFFFFFFFF)]
value = struct.pack(\"<I\", 2) + b\"\".join(struct.pack(\"<HHI\", *e) for e in entries)
for name, v in ((\"system.posix_acl_access\", value), (\"user.planted\", b\"x\")):
    try:
        os.setxattr(sys.argv[1], name, v)
        print(name, \"set\")
    except OSError as err:
        print(name, err)
' {secret}; \
         chmod 644 inside-made 2>/dev/null; echo x > made; chmod 600 made; touch -d 2001-01-01 made; echo done",
        secret = secret.display(),
        home = home.display()
    );
    let output = supervise(&ws, &script, &[]);
    let said = format!("{}{}", output.stdout, output.stderr);
    assert!(said.contains("done"), "{said}");
    assert_eq!(mode(&secret), 0o600, "a root-only file outside was opened to everyone: {said}");
    assert_eq!(mode(&home), 0o700, "a directory outside was opened to everyone: {said}");
    assert_eq!(stamp(&secret), secret_time, "a file outside got new times: {said}");
    // The machine's devices are written as anywhere, but their nodes stay as they are.
    assert_eq!(stamp(Path::new("/dev/full")), device_time, "a device node got new times: {said}");
    assert_eq!(acl(&secret), acl_before, "a file outside got an ACL or an attribute: {said}");
    assert!(!said.contains("posix_acl_access set") && !said.contains("planted set"), "{said}");
    // In the workspace all of it still works.
    assert_eq!(mode(&ws.join("made")), 0o600, "{said}");
    assert!(stamp(&ws.join("made")) < 1_000_000_000 + 10 * 365 * 86_400, "{said}");
}

/// The ninth pass's B1: the command's own `/proc` was mounted writable after the rest turned
/// read-only, and a mode set there holds for the whole machine: root's command made
/// `/proc/buddyinfo` world-writable (`/proc/sysrq-trigger` would let anyone reboot it).
#[test]
fn a_command_cannot_change_the_mode_of_a_proc_file() {
    if !kernel_keeps_it() || !super::running_as_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let proc_mode = || std::fs::metadata("/proc/buddyinfo").map(|meta| meta.mode() & 0o7777).ok();
    let before = proc_mode();
    let output = supervise(&ws, "chmod 604 /proc/buddyinfo; stat -c %a /proc/buddyinfo; echo done", &[]);
    let said = format!("{}{}", output.stdout, output.stderr);
    if let Some(before) = before {
        // Put back at once, whatever happened: the mode is the machine's.
        let _ = std::fs::set_permissions("/proc/buddyinfo", std::fs::Permissions::from_mode(before));
    }
    assert!(said.contains("done"), "{said}");
    assert!(!output.stdout.contains("604"), "a /proc file's mode changed: {said}");
}

/// The same for a user other than root (a user namespace): the user's own home stays as it was.
#[test]
fn as_an_unprivileged_user_a_command_cannot_open_the_users_own_directories_outside_to_everyone() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    sh(dir.path(), "chown -R 65534:65534 . && chmod 755 .");
    let away = outside("modes-nobody");
    let home = away.path().join("home");
    std::fs::create_dir(&home).unwrap();
    sh(away.path(), "chown -R 65534:65534 home && chmod 700 home && chmod 755 .");
    let script =
        format!("chmod 777 {0}; touch -m -d 2001-01-01 {0}; echo x > made; chmod 600 made; echo done", home.display());
    let Some(output) = supervise_as_nobody(&ws, &script, &[]) else { return };
    let said = format!("{}{}", output.stdout, output.stderr);
    assert!(said.contains("done"), "{said}");
    assert_eq!(mode(&home), 0o700, "the user's directory outside was opened to everyone: {said}");
    assert_eq!(mode(&ws.join("made")), 0o600, "{said}");
}

#[test]
fn plain_mode_and_owner_changes_in_the_workspace_still_work() {
    if !kernel_keeps_it() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let script = "set -e; echo 'echo hi' > run.sh; chmod +x run.sh; ./run.sh; echo x > data; chmod 644 data; \
                  chmod 600 data; mkdir shared; chmod 1777 shared; chown \"$(id -u):$(id -g)\" data; \
                  install -m 755 run.sh bin.sh; mkdir -p from/sub; echo y > from/sub/f; chmod 750 from/sub; \
                  cp -a from to; tar -cf a.tar from; mkdir out; tar -xf a.tar -C out; touch -d 2020-01-01 data; \
                  echo all-done";
    let output = supervise(&ws, script, &[]);
    let said = format!("{}{}", output.stdout, output.stderr);
    assert!(said.contains("hi") && said.contains("all-done"), "{said}");
    assert_eq!(mode(&ws.join("run.sh")) & 0o111, 0o111, "{said}");
    assert_eq!(mode(&ws.join("data")), 0o600, "{said}");
    assert_eq!(mode(&ws.join("shared")), 0o1777, "{said}");
    assert_eq!(mode(&ws.join("bin.sh")), 0o755, "{said}");
    assert_eq!(mode(&ws.join("to/sub")), 0o750, "{said}");
    assert_eq!(mode(&ws.join("out/from/sub")), 0o750, "{said}");
}

/// The eighth pass's B3: the namespace was a slave of the machine's, so a mount made there while
/// a command ran (a disk, a container's layers; here a tmpfs under a shared mount) reached the
/// command writable, and its root-only file was opened to everyone.
#[test]
fn a_mount_made_outside_while_a_command_runs_does_not_reach_it() {
    if !kernel_keeps_it() || !super::running_as_root() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let away = outside("modes-later-mount");
    let share = away.path().join("share");
    std::fs::create_dir_all(share.join("new")).unwrap();
    sh(away.path(), "mount --bind share share && mount --make-shared share");
    let file = share.join("new/file");
    let script = format!(
        "for i in $(seq 100); do [ -e {f} ] && break; sleep 0.05; done; chmod 666 {f}; echo done",
        f = file.display()
    );
    let command = std::thread::spawn(move || supervise(&ws, &script, &[]));
    std::thread::sleep(std::time::Duration::from_millis(500));
    sh(&share, "mount -t tmpfs none new && echo root-only > new/file && chmod 600 new/file");
    let output = command.join().unwrap();
    let changed = mode(&file);
    sh(away.path(), "umount share/new; umount share");
    let said = format!("{}{}", output.stdout, output.stderr);
    assert!(said.contains("done"), "{said}");
    assert_eq!(changed, 0o600, "a mount made outside reached the command writable: {said}");
}
