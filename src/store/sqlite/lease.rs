//! Session leases: a session's history is written by one process at a time.
//!
//! The process running a turn holds its session's lease, a row of `session_leases` naming it
//! (a random token, pid, host, boot id, pid namespace and the process's start time) and the
//! take (a fresh id each time). The writer thread takes the lease in the same transaction as
//! the turn's first write, refreshes every lease it holds each [`HEARTBEAT_EVERY`] and releases
//! it when the turn ends or the store shuts down. Another process's claim is refused while the
//! holder lives. A holder that died does not lock the session: when it ran on our host, boot and
//! pid namespace, its pid means a process here, and its lease lapses as soon as that pid is gone
//! (or belongs to a process that started at another time: a reused pid); otherwise (another
//! host, a container, `unshare --pid`, a flatpak, a `/proc` that is not our namespace's) a pid
//! says nothing here and the lease lapses once its heartbeat is older than [`STALE_AFTER`].
//! Released rows stay, so the next holder learns which take came last.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
pub use crate::ids::LeaseHolder;
use crate::ids::{SessionId, iso8601, new_id};

/// How often a holder refreshes its leases while it holds any.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// How old a heartbeat may be before its lease lapses, for a holder whose pid cannot be looked
/// up here. Six heartbeats: a holder busy with a long write is not mistaken for a dead one.
pub const STALE_AFTER: Duration = Duration::from_secs(30);

/// A process as a lease holder. Each process makes one, with a fresh token.
#[derive(Clone, Debug)]
pub struct Holder {
    /// Random, so a later process that gets the same pid is not taken for this one.
    pub token: String,
    pub pid: u32,
    /// The host name, as `/proc/sys/kernel/hostname` has it.
    pub host: String,
    /// `<boot id>/<start time in clock ticks>` of this process, read from `/proc/self/stat` when
    /// the pid written there is this process's. `None` otherwise (no `/proc`, or the `/proc` of
    /// another pid namespace, where that file describes another process): then no pid is looked
    /// up in `/proc`, and leases are judged by their heartbeat alone.
    pub started: Option<String>,
    /// This boot's id (`/proc/sys/kernel/random/boot_id`).
    pub boot: Option<String>,
    /// This process's pid namespace, as `readlink /proc/self/ns/pid` has it (`pid:[4026531836]`).
    pub pid_ns: Option<String>,
}

impl Holder {
    /// The running process.
    pub fn this_process() -> Self {
        let pid = std::process::id();
        let read = |path: &str| {
            std::fs::read_to_string(path).ok().map(|text| text.trim().to_owned()).filter(|text| !text.is_empty())
        };
        let host = read("/proc/sys/kernel/hostname").unwrap_or_else(|| "unknown".into());
        let boot = read("/proc/sys/kernel/random/boot_id");
        let pid_ns = std::fs::read_link("/proc/self/ns/pid").ok().map(|link| link.to_string_lossy().into_owned());
        let started = match (&boot, std::fs::read_to_string("/proc/self/stat")) {
            (Some(boot), Ok(stat)) => {
                Stat::parse(&stat).filter(|stat| stat.pid == pid).map(|stat| format!("{boot}/{}", stat.start))
            }
            _ => None,
        };
        Self { token: new_id("proc"), pid, host, started, boot, pid_ns }
    }

    /// Another holder on this host: this process under another token (for tests).
    #[cfg(test)]
    pub fn sibling(&self) -> Self {
        Self { token: new_id("proc"), ..self.clone() }
    }

    /// A holder on another host (for tests).
    #[cfg(test)]
    pub fn remote(host: &str, pid: u32) -> Self {
        Self { token: new_id("proc"), pid, host: host.to_owned(), started: None, boot: None, pid_ns: None }
    }

    /// What our `/proc` says about `pid`: its start time, or that it is gone (a zombie is gone).
    /// `None` when it cannot tell.
    fn look_up(&self, pid: u32) -> Option<Seen> {
        let boot = self.boot.as_deref()?;
        let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(Seen::Gone),
            Err(_) => return None,
        };
        let stat = Stat::parse(&stat).filter(|stat| stat.pid == pid)?;
        if matches!(stat.state, "Z" | "X" | "x") {
            return Some(Seen::Gone);
        }
        Some(Seen::Running(format!("{boot}/{}", stat.start)))
    }

    /// Whether a pid in `lease` names a process in our `/proc`: the holder wrote its boot and
    /// namespace (an older cairn did not), they and its host are ours, and our `/proc` is our
    /// namespace's (we found ourselves in it).
    fn shares_pids_with(&self, lease: &Row) -> bool {
        let described = lease.take_token.as_deref() == Some(lease.token.as_str());
        described
            && self.started.is_some()
            && lease.host == self.host
            && self.boot.is_some()
            && lease.boot == self.boot
            && self.pid_ns.is_some()
            && lease.pid_ns == self.pid_ns
    }

    /// Whether the process that holds `lease` may still be running its turn.
    fn thinks_alive(&self, lease: &Row, now: i64) -> bool {
        self.judge(lease, now, |pid| self.look_up(pid))
    }

    /// [`Self::thinks_alive`], with `look_up` for what `/proc` says about a pid.
    fn judge(&self, lease: &Row, now: i64, look_up: impl FnOnce(u32) -> Option<Seen>) -> bool {
        let fresh =
            now.saturating_sub(lease.heartbeat_at) <= i64::try_from(STALE_AFTER.as_millis()).unwrap_or(i64::MAX);
        if !self.shares_pids_with(lease) {
            return fresh;
        }
        match (look_up(lease.pid), &lease.started) {
            (Some(Seen::Gone), _) => false,
            (Some(Seen::Running(started)), Some(then)) => started == *then,
            // A pid that runs, but the holder could not say when it started: a reused pid
            // cannot be told from the holder.
            (Some(Seen::Running(_)), None) | (None, _) => fresh,
        }
    }
}

/// What `/proc` says about a pid.
#[derive(Debug)]
enum Seen {
    Running(String),
    Gone,
}

/// The fields of a `/proc/<pid>/stat` line that leases read.
struct Stat<'a> {
    pid: u32,
    state: &'a str,
    /// Clock ticks after boot.
    start: &'a str,
}

impl<'a> Stat<'a> {
    /// `pid (comm) state …`: the command may hold spaces and parentheses, so fields are counted
    /// from the last `)`. The state is field 3, the start time field 22.
    fn parse(stat: &'a str) -> Option<Self> {
        let (head, rest) = stat.rsplit_once(')')?;
        let pid = head.split_once(" (")?.0.trim().parse().ok()?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        Some(Self { pid, state: fields.first()?, start: fields.get(19)? })
    }
}

impl std::fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let since = iso8601(self.since).unwrap_or_else(|| self.since.to_string());
        write!(
            f,
            "session {} is in use by another cairn process (pid {} on host {}), running a turn since {since}; \
             wait for that turn to end, or cancel it there, then try again (session/load still shows the \
             conversation meanwhile). If that process has died, its lease lapses by itself: at once when it \
             ran on this host in this pid namespace, {} s after its last heartbeat otherwise",
            self.session,
            self.pid,
            self.host,
            STALE_AFTER.as_secs()
        )
    }
}

/// Which take of a session's lease a caller's copy of its history ends with.
#[derive(Clone, Debug, PartialEq)]
pub enum LastTurn {
    /// This process's latest (or nobody's: the session never had a lease). In a process one
    /// piece of work takes a session's lease (its actor, or the `task` call running a
    /// sub-agent), so another take by this process cannot come unnoticed.
    Ours,
    /// The take with this mark, as [`last_turn`] read it (`None`: the session never had a
    /// lease). Every take has a fresh mark, so another turn by the same holder changes it.
    By(Option<String>),
}

/// One lease row.
struct Row {
    token: String,
    pid: u32,
    host: String,
    started: Option<String>,
    taken_at: i64,
    heartbeat_at: i64,
    released_at: Option<i64>,
    boot: Option<String>,
    pid_ns: Option<String>,
    take_id: Option<String>,
    take_token: Option<String>,
}

impl Row {
    /// What tells this take from every other: the holder's token and the take's id (an older
    /// cairn writes no take id; its token still tells its takes from other processes').
    fn mark(&self) -> String {
        format!("{}/{}", self.token, self.take_id.as_deref().unwrap_or_default())
    }
}

/// A session's lease row.
pub(super) const READ: &str =
    "SELECT token, pid, host, started, taken_at, heartbeat_at, released_at, boot, pid_ns, take_id, take_token
         FROM session_leases WHERE session_id = ?1";

fn read(conn: &Connection, session: &SessionId) -> rusqlite::Result<Option<Row>> {
    conn.prepare_cached(READ)?
        .query_row([session.as_str()], |row| {
            Ok(Row {
                token: row.get(0)?,
                pid: row.get(1)?,
                host: row.get(2)?,
                started: row.get(3)?,
                taken_at: row.get(4)?,
                heartbeat_at: row.get(5)?,
                released_at: row.get(6)?,
                boot: row.get(7)?,
                pid_ns: row.get(8)?,
                take_id: row.get(9)?,
                take_token: row.get(10)?,
            })
        })
        .optional()
}

/// The holder of `session` if it is another process that is alive.
pub fn held_elsewhere(
    conn: &Connection,
    me: &Holder,
    session: &SessionId,
    now: i64,
) -> rusqlite::Result<Option<LeaseHolder>> {
    Ok(read(conn, session)?.and_then(|row| holder_elsewhere(&row, me, session, now)))
}

fn holder_elsewhere(row: &Row, me: &Holder, session: &SessionId, now: i64) -> Option<LeaseHolder> {
    let live = row.released_at.is_none() && row.token != me.token && me.thinks_alive(row, now);
    live.then(|| LeaseHolder {
        session: session.clone(),
        pid: row.pid,
        host: row.host.clone(),
        since: row.taken_at,
        heartbeat: row.heartbeat_at,
    })
}

/// The leases held on a session and on the sub-agents below it.
pub(super) const HELD_BELOW: &str = "WITH RECURSIVE down(id) AS (
           SELECT ?1 UNION SELECT s.id FROM sessions s JOIN down ON s.parent_id = down.id WHERE s.subagent IS NOT NULL
         )
         SELECT l.session_id FROM session_leases l JOIN down ON l.session_id = down.id WHERE l.released_at IS NULL";

/// The first live holder elsewhere of `session` or of a sub-agent session below it (what a
/// delete would remove).
pub fn held_below(
    conn: &Connection,
    me: &Holder,
    session: &SessionId,
    now: i64,
) -> rusqlite::Result<Option<LeaseHolder>> {
    let mut stmt = conn.prepare_cached(HELD_BELOW)?;
    let held =
        stmt.query_map([session.as_str()], |row| row.get::<_, String>(0))?.collect::<rusqlite::Result<Vec<_>>>()?;
    for id in held {
        if let Some(holder) = held_elsewhere(conn, me, &SessionId::from_string(id), now)? {
            return Ok(Some(holder));
        }
    }
    Ok(None)
}

/// Whether `me` may take the lease of `session` for a history that ends with `last`: refused
/// with [`StoreError::Leased`] while another live process holds it, with
/// [`StoreError::LeaseMoved`] if another take came after `last`.
pub fn check(
    conn: &Connection,
    me: &Holder,
    session: &SessionId,
    last: &LastTurn,
    now: i64,
) -> rusqlite::Result<Result<(), StoreError>> {
    let row = read(conn, session)?;
    if let Some(holder) = row.as_ref().and_then(|row| holder_elsewhere(row, me, session, now)) {
        return Ok(Err(StoreError::Leased(Box::new(holder))));
    }
    let current = match last {
        LastTurn::Ours => row.as_ref().is_none_or(|row| row.token == me.token),
        LastTurn::By(mark) => row.as_ref().map(Row::mark) == *mark,
    };
    Ok(if current {
        Ok(())
    } else {
        Err(StoreError::LeaseMoved { session: session.clone(), last: row.as_ref().map(Row::mark) })
    })
}

/// Takes a session's lease, or takes it again.
pub(super) const TAKE: &str =
    "INSERT INTO session_leases (session_id, token, pid, host, started, taken_at, heartbeat_at, released_at,
                                     boot, pid_ns, take_id, take_token)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, NULL, ?7, ?8, ?9, ?2)
         ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, pid = excluded.pid, host = excluded.host,
           started = excluded.started, taken_at = excluded.taken_at, heartbeat_at = excluded.heartbeat_at,
           released_at = NULL, boot = excluded.boot, pid_ns = excluded.pid_ns, take_id = excluded.take_id,
           take_token = excluded.take_token";

/// Takes (or renews) the lease of `session` for `me`, as a new take; [`check`] first.
pub fn take(conn: &Connection, me: &Holder, session: &SessionId, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(TAKE)?.execute(params![
        session.as_str(),
        me.token,
        me.pid,
        me.host,
        me.started,
        now,
        me.boot,
        me.pid_ns,
        new_id("take")
    ])?;
    Ok(())
}

/// Refreshes every lease a holder holds.
pub(super) const BEAT: &str = "UPDATE session_leases SET heartbeat_at = ?2 WHERE token = ?1 AND released_at IS NULL";

/// Refreshes every lease `me` holds.
pub fn beat(conn: &Connection, me: &Holder, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(BEAT)?.execute(params![me.token, now])?;
    Ok(())
}

/// Gives one session's lease back.
pub(super) const RELEASE: &str =
    "UPDATE session_leases SET released_at = ?3 WHERE session_id = ?1 AND token = ?2 AND released_at IS NULL";

/// Gives back the lease of `session` if `me` holds it.
pub fn release(conn: &Connection, me: &Holder, session: &SessionId, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(RELEASE)?.execute(params![session.as_str(), me.token, now])?;
    Ok(())
}

/// Gives back every lease `me` holds (shutdown).
pub fn release_all(conn: &Connection, me: &Holder, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE session_leases SET released_at = ?2 WHERE token = ?1 AND released_at IS NULL")?
        .execute(params![me.token, now])?;
    Ok(())
}

/// The mark of the session's last take, released or not (for [`LastTurn::By`]).
pub fn last_turn(conn: &Connection, session: &SessionId) -> rusqlite::Result<Option<String>> {
    Ok(read(conn, session)?.map(|row| row.mark()))
}

#[cfg(test)]
#[path = "lease_lapse_tests.rs"]
mod lapse_tests;
