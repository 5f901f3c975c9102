//! The secret of a `cairn serve` run without `--auth`, so that only the user who started it can
//! use it: any program on the machine can connect to a loopback port, and a sandboxed command
//! can reach the server's socket when it lies where commands may go. It is a file
//! (`serve-secret`, mode 0600) in a directory of the data directory's own in the runtime
//! directory, which other users cannot enter and the commands of every cairn find covered (a
//! cairn with another data directory would not hide this one's), or in the data directory
//! where there is no runtime directory, hidden from the commands of cairns that use it. Every
//! request must show it as `Authorization: Bearer`, as a token of `--auth` is shown. `cairn acp --server` reads it there by itself, for an address a running
//! server of its data directory noted it listens on.
//!
//! A new secret is made whenever a server starts while no other server of the data directory
//! runs (`serve-secret.holders` lists those running, by process id and start time), and servers
//! running together share one. So a secret a program caught while no server ran (listening on
//! the port the editor's bridge connects to, and taking what it showed) is worth nothing once
//! the server starts. Made whole or not at all (written aside, then renamed into place), under a
//! lock so that servers starting together agree on one.

use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The file's name in the data directory.
const FILE: &str = "serve-secret";
/// The servers sharing the secret now: one `PID START [ADDRESS]` line each, with where the
/// server listens once it does.
const HOLDERS: &str = "serve-secret.holders";
/// Taken while a server decides whether to make a new secret.
const LOCK: &str = "serve-secret.lock";
/// More than a secret and its line break; a bigger file is not cairn's.
const MOST: u64 = 256;
/// More than the holders' lines of any number of servers one machine runs.
const MOST_HOLDERS: u64 = 64 * 1024;

/// The directory that keeps the secret of servers using `data_dir`: one of its own in the
/// runtime directory, which every sandboxed command finds covered whatever cairn started it
/// (a cairn with another data directory hides only its own), else the data directory.
fn kept_in(data_dir: &Path) -> PathBuf {
    let runtime =
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from).filter(|dir| dir.is_absolute() && dir.is_dir());
    let Some(runtime) = runtime else { return data_dir.to_path_buf() };
    let digest = crate::digest::sha256(data_dir.as_os_str().as_encoded_bytes());
    let name = crate::digest::hex(&digest.as_ref()[..8]);
    runtime.join("cairn").join(format!("serve-{name}"))
}

/// Where the secret of servers using `data_dir` is kept.
pub fn path(data_dir: &Path) -> PathBuf {
    kept_in(data_dir).join(FILE)
}

/// The secret kept for `data_dir`, for a client of `address` (`IP:PORT` as a socket address
/// prints, or a socket's canonical path): only when a running server of the data directory
/// said it listens there, so a program listening where none of them does catches nothing.
pub fn read_for(data_dir: &Path, address: &str) -> Option<String> {
    read_in(&kept_in(data_dir), address)
}

fn read_in(dir: &Path, address: &str) -> Option<String> {
    let listening = live_holders(&dir.join(HOLDERS)).into_iter().any(|holder| holder.address == address);
    listening.then(|| read_at(&dir.join(FILE)).ok().flatten()).flatten()
}

/// Notes that this server listens at `address` (as [`read_for`] takes it).
pub(super) fn listening(data_dir: &Path, address: &str) -> Result<(), String> {
    listening_in(&kept_in(data_dir), address)
}

fn listening_in(data_dir: &Path, address: &str) -> Result<(), String> {
    let fail = |err: std::io::Error| format!("cannot note where the server listens in {}: {err}", data_dir.display());
    if address.contains('\n') {
        return Err(fail(std::io::Error::other("the address holds a line break")));
    }
    let me = me().ok_or_else(|| fail(std::io::Error::other("this process's start time is unknown")))?;
    with_holders(data_dir, fail, |holders| {
        holders.retain(|holder| (holder.pid, holder.start) != (me.pid, me.start));
        holders.push(Holder { address: address.to_owned(), ..me });
        Ok(())
    })
}

/// Runs `change` on the live holders of `data_dir`'s secret under its lock, then keeps what
/// it left: the one way the holders file is read and rewritten.
fn with_holders<T>(
    data_dir: &Path,
    fail: impl Fn(std::io::Error) -> String,
    change: impl FnOnce(&mut Vec<Holder>) -> Result<T, String>,
) -> Result<T, String> {
    let lock = private(&data_dir.join(LOCK)).map_err(&fail)?;
    lock.lock().map_err(&fail)?;
    let mut holders = live_holders(&data_dir.join(HOLDERS));
    let changed = change(&mut holders)?;
    crate::aside::replace(&data_dir.join(HOLDERS), lines(&holders).as_bytes()).map(drop).map_err(fail)?;
    Ok(changed)
}

/// A server sharing the secret.
struct Holder {
    pid: u32,
    start: u64,
    /// Where it listens; empty until it does.
    address: String,
}

fn lines(holders: &[Holder]) -> String {
    holders.iter().map(|holder| format!("{} {} {}\n", holder.pid, holder.start, holder.address)).collect()
}

/// The secret this server shows its clients: the one kept in `data_dir` while another server
/// of it runs, else a new one; why not, naming the file and what to do.
pub(super) fn take(data_dir: &Path) -> Result<String, String> {
    take_in(&kept_in(data_dir))
}

fn take_in(data_dir: &Path) -> Result<String, String> {
    let at = data_dir.join(FILE);
    let shown = at.display();
    let fail = |err: std::io::Error| format!("cannot keep the server's secret in {shown}: {err}");
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(data_dir).map_err(fail)?;
    with_holders(data_dir, fail, |holders| {
        let kept = match holders.is_empty() {
            true => None,
            false => read_at(&at).map_err(|err| format!("cannot read {shown}: {err}"))?,
        };
        let secret = match kept {
            Some(secret) => secret,
            None => {
                let secret = super::auth::new_secret().map_err(|err| err.to_string())?;
                crate::aside::replace(&at, format!("{secret}\n").as_bytes()).map(drop).map_err(fail)?;
                holders.clear();
                secret
            }
        };
        holders.extend(me());
        Ok(secret)
    })
}

/// The secret at `at`: `None` when there is no file; an error when it is not cairn's.
fn read_at(at: &Path) -> std::io::Result<Option<String>> {
    let mut file = match std::fs::File::open(at) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err),
    };
    if file.metadata()?.permissions().mode() & 0o077 != 0 {
        // Others could have read it: it is no secret any more.
        return Err(std::io::Error::other(
            "others may read it, so it is no secret; remove it, and the next start makes a new one",
        ));
    }
    let mut text = String::new();
    std::io::Read::take(&mut file, MOST).read_to_string(&mut text)?;
    let secret = text.trim_end_matches('\n');
    if !super::auth::shaped(secret) {
        return Err(std::io::Error::other(
            "it does not hold a secret cairn made; remove it, and the next start makes a new one",
        ));
    }
    Ok(Some(secret.to_owned()))
}

/// The servers listed at `at` that still run (the same process, not one that took its id).
fn live_holders(at: &Path) -> Vec<Holder> {
    let mut text = String::new();
    if let Ok(file) = std::fs::File::open(at) {
        let _ = std::io::Read::take(file, MOST_HOLDERS).read_to_string(&mut text);
    }
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(3, ' ');
            let (pid, start) = (fields.next()?.parse().ok()?, fields.next()?.parse().ok()?);
            Some(Holder { pid, start, address: fields.next().unwrap_or_default().to_owned() })
        })
        .filter(|holder| started(holder.pid) == Some(holder.start))
        .collect()
}

/// This process, as a holder not listening yet.
fn me() -> Option<Holder> {
    let pid = std::process::id();
    Some(Holder { pid, start: started(pid)?, address: String::new() })
}

/// When process `pid` started (clock ticks after boot, from `/proc/PID/stat`), if it runs.
fn started(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command's name, in parentheses, may hold spaces: count the fields after it.
    let (_, rest) = stat.rsplit_once(") ")?;
    rest.split(' ').nth(19)?.parse().ok()
}

/// A file at `at` opened for writing, 0600, made if missing.
fn private(at: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().write(true).create(true).truncate(false).mode(0o600).open(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path_in(dir: &Path) -> PathBuf {
        dir.join(FILE)
    }

    #[test]
    fn a_secret_is_private_shared_while_a_holder_runs_and_new_once_none_does() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let secret = take_in(&data).unwrap();
        assert!(super::super::auth::shaped(&secret), "{secret}");
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path_in(&data)), 0o600);
        assert_eq!(mode(&data), 0o700);
        assert_eq!(read_at(&path_in(&data)).ok().flatten().as_deref(), Some(secret.as_str()));
        // This process holds it: a server starting beside it shares it.
        assert_eq!(take_in(&data).unwrap(), secret);
        let holders = std::fs::read_to_string(data.join(HOLDERS)).unwrap();
        assert_eq!(holders.lines().count(), 2, "{holders}");
        std::fs::write(data.join(HOLDERS), holders.lines().next().unwrap()).unwrap();
        // Only servers gone, or a process that took a listed id since: a new secret.
        assert_eq!(read_in(&data, "127.0.0.1:7420"), None, "nobody said it listens there");
        listening_in(&data, "127.0.0.1:7420").unwrap();
        assert_eq!(read_in(&data, "127.0.0.1:7420").as_deref(), Some(secret.as_str()));
        assert_eq!(read_in(&data, "127.0.0.1:7421"), None, "another port");
        std::fs::write(data.join(HOLDERS), format!("999999999 1 127.0.0.1:7420\n{} 1\n", std::process::id())).unwrap();
        assert_eq!(read_in(&data, "127.0.0.1:7420"), None, "its server is gone");
        let fresh = take_in(&data).unwrap();
        assert_ne!(fresh, secret);
        assert_eq!(read_at(&path_in(&data)).ok().flatten().as_deref(), Some(fresh.as_str()));
        let names: Vec<String> =
            std::fs::read_dir(&data).unwrap().map(|entry| entry.unwrap().file_name().into_string().unwrap()).collect();
        assert!(names.iter().all(|name| !name.starts_with('.')), "nothing left aside: {names:?}");
    }

    #[test]
    fn a_file_not_cairns_or_readable_by_others_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        take_in(&data).unwrap();
        std::fs::set_permissions(path_in(&data), std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = take_in(&data).unwrap_err();
        assert!(err.contains("serve-secret") && err.contains("others may read it"), "{err}");
        assert_eq!(read_at(&path_in(&data)).ok().flatten(), None);
        std::fs::write(path_in(&data), "hunter2\n").unwrap();
        std::fs::set_permissions(path_in(&data), std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = take_in(&data).unwrap_err();
        assert!(err.contains("remove it"), "{err}");
        assert_eq!(read_at(&path_in(&data)).ok().flatten(), None);
    }
}
