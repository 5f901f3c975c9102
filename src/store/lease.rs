//! Session leases: a session's history is written by one process at a time.
//!
//! The process running a turn holds its session's lease, a row of `session_leases` naming it
//! (a random token, pid, host, and the process's start time). The writer thread takes the lease
//! in the same transaction as the turn's first write, refreshes every lease it holds each
//! [`HEARTBEAT_EVERY`] and releases it when the turn ends or the store shuts down. Another
//! process's claim is refused while the holder lives; a holder that died does not lock the
//! session: on the same host it lapses as soon as its pid is gone (or belongs to a process that
//! started at another time: a reused pid), and from another host once its heartbeat is older
//! than [`STALE_AFTER`]. Released rows stay, so the next holder learns whose turn came last.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};

use super::StoreError;
use crate::ids::{SessionId, iso8601, new_id};

/// How often a holder refreshes its leases while it holds any.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(5);

/// How old a heartbeat from another host may be before its lease lapses. Six heartbeats: a
/// holder busy with a long write is not mistaken for a dead one.
pub const STALE_AFTER: Duration = Duration::from_secs(30);

/// A process as a lease holder. Each process makes one, with a fresh token.
#[derive(Clone, Debug)]
pub struct Holder {
    /// Random, so a later process that gets the same pid is not taken for this one.
    pub token: String,
    pub pid: u32,
    /// The host name, as `/proc/sys/kernel/hostname` has it.
    pub host: String,
    /// `<boot id>/<start time in clock ticks>` of this process; `None` without `/proc`, in which
    /// case leases are judged by their heartbeat alone, as from another host.
    pub started: Option<String>,
    /// This boot's id, to read other processes' start times with.
    boot: Option<String>,
}

impl Holder {
    /// The running process.
    pub fn this_process() -> Self {
        let pid = std::process::id();
        let read = |path: &str| std::fs::read_to_string(path).ok().map(|text| text.trim().to_owned());
        let host =
            read("/proc/sys/kernel/hostname").filter(|host| !host.is_empty()).unwrap_or_else(|| "unknown".into());
        let boot = read("/proc/sys/kernel/random/boot_id");
        let mut holder = Self { token: new_id("proc"), pid, host, started: None, boot };
        holder.started = holder.start_of(pid).and_then(|seen| match seen {
            Seen::Running(started) => Some(started),
            Seen::Gone => None,
        });
        holder
    }

    /// Another holder on this host: this process under another token (for tests).
    #[cfg(test)]
    pub fn sibling(&self) -> Self {
        Self { token: new_id("proc"), ..self.clone() }
    }

    /// A holder on another host (for tests).
    #[cfg(test)]
    pub fn remote(host: &str, pid: u32) -> Self {
        Self { token: new_id("proc"), pid, host: host.to_owned(), started: None, boot: None }
    }

    /// What `/proc` says about `pid`: its start time, or that it is gone (a zombie is gone).
    /// `None` when `/proc` cannot tell.
    fn start_of(&self, pid: u32) -> Option<Seen> {
        let boot = self.boot.as_deref()?;
        let stat = match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Ok(stat) => stat,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Some(Seen::Gone),
            Err(_) => return None,
        };
        // `pid (comm) state …`: the command may hold spaces and parentheses, so fields are
        // counted from the last `)`. The state is field 3, the start time field 22.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        if matches!(fields.first(), Some(&("Z" | "X" | "x"))) {
            return Some(Seen::Gone);
        }
        Some(Seen::Running(format!("{boot}/{}", fields.get(19)?)))
    }

    /// Whether the process that holds `lease` may still be running its turn.
    fn thinks_alive(&self, lease: &Row, now: i64) -> bool {
        if lease.host == self.host
            && self.started.is_some()
            && let Some(seen) = self.start_of(lease.pid)
        {
            return match (seen, &lease.started) {
                (Seen::Gone, _) => false,
                (Seen::Running(started), Some(then)) => started == *then,
                (Seen::Running(_), None) => true,
            };
        }
        now.saturating_sub(lease.heartbeat_at) <= i64::try_from(STALE_AFTER.as_millis()).unwrap_or(i64::MAX)
    }
}

enum Seen {
    Running(String),
    Gone,
}

/// Who holds a session another process asked for: what its error names.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseHolder {
    pub session: SessionId,
    pub pid: u32,
    pub host: String,
    /// When it took the lease (Unix ms).
    pub since: i64,
    /// Its last heartbeat (Unix ms).
    pub heartbeat: i64,
}

impl std::fmt::Display for LeaseHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let since = iso8601(self.since).unwrap_or_else(|| self.since.to_string());
        write!(
            f,
            "session {} is in use by another cairn process (pid {} on host {}), running a turn since {since}; \
             wait for that turn to end, or cancel it there, then try again (session/load still shows the \
             conversation meanwhile). If that process has died, its lease lapses by itself: at once on \
             the same host, {} s after its last heartbeat from another",
            self.session,
            self.pid,
            self.host,
            STALE_AFTER.as_secs()
        )
    }
}

/// Whose turn a caller's copy of a session's history ends with.
#[derive(Clone, Debug, PartialEq)]
pub enum LastTurn {
    /// This process's (or nobody's: the session never had a lease).
    Ours,
    /// The holder with this token (`None`: the session never had a lease).
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
}

fn read(conn: &Connection, session: &SessionId) -> rusqlite::Result<Option<Row>> {
    conn.prepare_cached(
        "SELECT token, pid, host, started, taken_at, heartbeat_at, released_at FROM session_leases WHERE session_id = ?1",
    )?
    .query_row([session.as_str()], |row| {
        Ok(Row {
            token: row.get(0)?,
            pid: row.get(1)?,
            host: row.get(2)?,
            started: row.get(3)?,
            taken_at: row.get(4)?,
            heartbeat_at: row.get(5)?,
            released_at: row.get(6)?,
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

/// The first live holder elsewhere of `session` or of a sub-agent session below it (what a
/// delete would remove).
pub fn held_below(
    conn: &Connection,
    me: &Holder,
    session: &SessionId,
    now: i64,
) -> rusqlite::Result<Option<LeaseHolder>> {
    let mut stmt = conn.prepare_cached(
        "WITH RECURSIVE down(id) AS (
           SELECT ?1 UNION SELECT s.id FROM sessions s JOIN down ON s.parent_id = down.id WHERE s.subagent IS NOT NULL
         )
         SELECT l.session_id FROM session_leases l JOIN down ON l.session_id = down.id WHERE l.released_at IS NULL",
    )?;
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
/// [`StoreError::LeaseMoved`] if someone else's turn came after `last`.
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
    let seen = row.map(|row| row.token);
    let current = match last {
        LastTurn::Ours => seen.as_ref().is_none_or(|token| *token == me.token),
        LastTurn::By(token) => seen == *token,
    };
    Ok(if current { Ok(()) } else { Err(StoreError::LeaseMoved { session: session.clone(), last: seen }) })
}

/// Takes (or renews) the lease of `session` for `me`; [`check`] first.
pub fn take(conn: &Connection, me: &Holder, session: &SessionId, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO session_leases (session_id, token, pid, host, started, taken_at, heartbeat_at, released_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, NULL)
         ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, pid = excluded.pid, host = excluded.host,
           started = excluded.started, taken_at = excluded.taken_at, heartbeat_at = excluded.heartbeat_at,
           released_at = NULL",
    )?
    .execute(params![session.as_str(), me.token, me.pid, me.host, me.started, now])?;
    Ok(())
}

/// Refreshes every lease `me` holds.
pub fn beat(conn: &Connection, me: &Holder, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE session_leases SET heartbeat_at = ?2 WHERE token = ?1 AND released_at IS NULL")?
        .execute(params![me.token, now])?;
    Ok(())
}

/// Gives back the lease of `session` if `me` holds it.
pub fn release(conn: &Connection, me: &Holder, session: &SessionId, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "UPDATE session_leases SET released_at = ?3 WHERE session_id = ?1 AND token = ?2 AND released_at IS NULL",
    )?
    .execute(params![session.as_str(), me.token, now])?;
    Ok(())
}

/// Gives back every lease `me` holds (shutdown).
pub fn release_all(conn: &Connection, me: &Holder, now: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("UPDATE session_leases SET released_at = ?2 WHERE token = ?1 AND released_at IS NULL")?
        .execute(params![me.token, now])?;
    Ok(())
}

/// The token of the session's last holder, released or not.
pub fn last_token(conn: &Connection, session: &SessionId) -> rusqlite::Result<Option<String>> {
    Ok(read(conn, session)?.map(|row| row.token))
}
