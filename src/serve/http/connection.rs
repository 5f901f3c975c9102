//! One connection of the Streamable HTTP profile, from its `initialize` to its `DELETE`: the
//! JSON-RPC peer serving it (the one a WebSocket or stdio client gets), fed the messages the
//! client POSTs, and an actor that owns everything else and sorts the peer's messages onto the
//! connection's streams.
//!
//! Where a message goes, as the transport's RFD and the SDKs have it: a session's notifications
//! and requests go to that session's stream once it has one on this connection (a `session/new`
//! or `session/fork` result names it, or the client opened it), the answer to a request that
//! named a session (in `Acp-Session-Id` or its params) to the same stream, after the updates it
//! caused (a load's replay: the RFD puts a load's answer on the connection's stream, where it
//! can overtake the replay), and the rest (the answers to `session/new`, `fork` and `list` among
//! them) to the connection's own stream. A session without a stream of its own here has its
//! messages on the connection's stream, so a client that reads only that one misses nothing.
//!
//! The connection ends at `DELETE`; when nothing has read or posted for [`idle`] heartbeats; or
//! when more than [`BEHIND`] bytes wait for a client that does not read them. Its end only
//! detaches it from its sessions, whose turns go on.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::stream::{Gap, Reader, Shared, Stream};
use crate::serve::Server;
use crate::serve::auth::Grant;
use crate::serve::seat::Seat;
use crate::serve::socket::BEHIND;
use crate::session::Principal;

/// Heartbeats with no `GET` open and no `POST` after which a connection ends.
const IDLE_BEATS: u32 = 3;
/// Messages the client has posted that the peer has not read yet.
const INPUT: usize = 16;
/// Session streams a connection may have; past it a session's traffic stays on the
/// connection's stream, and a `GET` of one more is refused.
pub const STREAMS: usize = 64;

/// Where the answer to a posted request goes.
#[derive(Clone, Debug)]
pub enum Scope {
    Connection,
    Session(String),
}

/// What the routes ask of a connection's actor.
pub enum Command {
    /// The answer to the request with this id goes to `scope`.
    Route { key: String, scope: Scope },
    /// The answer to the request with this id (the `initialize`) is handed back, not streamed.
    Await { key: String, reply: oneshot::Sender<Vec<u8>> },
    /// A `GET`: the connection's stream, or `session`'s, from after `after` when given.
    Open { session: Option<String>, after: Option<String>, reply: oneshot::Sender<Result<Reader, Refused>> },
    /// A message that needs no route (a notification, an answer) was posted: the client is there.
    Heard,
    /// `DELETE`.
    End,
}

/// Why a `GET` gets no stream.
#[derive(Debug)]
pub enum Refused {
    /// The connection ended meanwhile.
    Gone,
    /// The stream cannot go on from the id the client gave: the reason.
    CannotResume(String),
    /// The connection has [`STREAMS`] session streams.
    TooMany,
}

/// What the routes hold of a connection.
#[derive(Clone)]
pub struct Handle {
    /// Whom it acts for: only requests for the same principal reach it.
    pub principal: Principal,
    pub commands: mpsc::Sender<Command>,
    /// Messages for the peer, one line each without its newline.
    pub input: mpsc::Sender<Vec<u8>>,
}

/// Starts a connection named `id` for `server`, let in by `grant`, holding `slot` while it lives.
pub fn start(server: &Server, id: String, slot: Seat, grant: Grant) -> Handle {
    let principal = grant.principal.clone();
    let (commands, received) = mpsc::channel(64);
    let (input, posted) = mpsc::channel(INPUT);
    let (peer_input, to_peer) = tokio::io::duplex(64 * 1024);
    let (peer_output, from_peer) = tokio::io::duplex(64 * 1024);
    let behind = tokio_util::sync::CancellationToken::new();
    let budget = crate::acp::rpc::Budget { bytes: BEHIND, exceeded: behind.clone() };
    tokio::spawn(crate::acp::serve_connection(
        to_peer,
        peer_output,
        server.sessions.clone(),
        Arc::clone(&server.hub),
        budget,
        principal.clone(),
    ));
    tokio::spawn(feed(posted, peer_input));
    let actor = Actor {
        id,
        input: input.clone(),
        connection: Stream::default(),
        sessions: HashMap::new(),
        routed: HashSet::new(),
        routes: HashMap::new(),
        waiters: HashMap::new(),
        resumes: 0,
        shared: Shared::default(),
    };
    let (server, heartbeat) = (server.clone(), server.limits.heartbeat);
    tokio::spawn(async move {
        let id = actor.id.clone();
        actor.run(received, from_peer, behind, heartbeat, grant).await;
        server.http.remove(&id);
        drop(slot);
    });
    Handle { principal, commands, input }
}

/// Writes the posted messages to the peer, a line each, until the connection ends.
async fn feed(mut posted: mpsc::Receiver<Vec<u8>>, mut peer: tokio::io::DuplexStream) {
    while let Some(mut line) = posted.recv().await {
        line.push(b'\n');
        if peer.write_all(&line).await.is_err() {
            break;
        }
    }
}

/// What waits for the answer to a request of the transport's own.
enum Waiter {
    Initialize(oneshot::Sender<Vec<u8>>),
    /// A `GET` of `session`'s stream resuming it after a number another connection saw.
    Resume {
        session: String,
        reply: oneshot::Sender<Result<Reader, Refused>>,
    },
}

struct Actor {
    id: String,
    input: mpsc::Sender<Vec<u8>>,
    connection: Stream,
    sessions: HashMap<String, Stream>,
    /// Sessions something was sent for on this connection.
    routed: HashSet<String>,
    routes: HashMap<String, Scope>,
    waiters: HashMap<String, Waiter>,
    resumes: u64,
    /// What the connection's `GET`s share with it.
    shared: Shared,
}

/// The parts of a message that say where it goes.
#[derive(Deserialize)]
struct Peek<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

#[derive(Deserialize, Default)]
struct Named {
    #[serde(rename = "sessionId", default)]
    session_id: Option<String>,
    #[serde(rename = "_meta", default)]
    meta: Option<Meta>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(default)]
    cairn: Option<CairnMeta>,
}

#[derive(Deserialize)]
struct CairnMeta {
    #[serde(default)]
    seq: Option<u64>,
}

fn named(raw: Option<&RawValue>) -> Named {
    raw.and_then(|raw| serde_json::from_str(raw.get()).ok()).unwrap_or_default()
}

/// A JSON-RPC id as a key: its JSON text, so `1` and `"1"` stay apart.
pub fn key(id: &RawValue) -> String {
    serde_json::from_str::<serde_json::Value>(id.get()).map_or_else(|_| id.get().to_owned(), |value| value.to_string())
}

impl Actor {
    async fn run(
        mut self,
        mut commands: mpsc::Receiver<Command>,
        from_peer: tokio::io::DuplexStream,
        behind: tokio_util::sync::CancellationToken,
        heartbeat: Duration,
        grant: Grant,
    ) {
        let mut lines = BufReader::new(from_peer);
        let mut line = Vec::new();
        let mut beats = tokio::time::interval_at(Instant::now() + heartbeat, heartbeat);
        let mut last_heard = Instant::now();
        let wake = Arc::clone(&self.shared.wake);
        // Why it ends, and whether its streams are let go at once (a cut-off) rather than after
        // what they hold.
        let (why, now) = loop {
            tokio::select! {
                biased;
                () = behind.cancelled() => break self.cut_off(too_far_behind()),
                command = commands.recv() => {
                    last_heard = Instant::now();
                    match command {
                        Some(Command::End) | None => {
                            tracing::debug!(connection = %self.id, "the client ended its connection");
                            break ("the client ended the connection".to_owned(), false);
                        }
                        Some(command) => self.command(command),
                    }
                }
                // A `GET` took a frame: hand the streams what waits, as their windows allow.
                () = wake.notified() => self.flush(),
                read = lines.read_until(b'\n', &mut line) => {
                    match read {
                        Ok(0) | Err(_) => break ("the connection's peer ended".to_owned(), false),
                        Ok(_) => {}
                    }
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    self.route(&line);
                    line.clear();
                    if self.behind() > BEHIND {
                        break self.cut_off(too_far_behind());
                    }
                }
                _ = beats.tick() => {
                    if !grant.still_good() {
                        break self.cut_off("the token it was opened with was revoked".to_owned());
                    }
                    let read = self.keep_alive();
                    if read {
                        last_heard = Instant::now();
                    } else if last_heard.elapsed() >= heartbeat * IDLE_BEATS {
                        break self.cut_off(format!("nothing read or posted for {:?}", last_heard.elapsed()));
                    }
                }
            }
        };
        self.connection.end(&why, now);
        for stream in self.sessions.values_mut() {
            stream.end(&why, now);
        }
        for (_, waiter) in self.waiters.drain() {
            if let Waiter::Resume { reply, .. } = waiter {
                let _ = reply.send(Err(Refused::Gone));
            }
        }
    }

    /// Ends the connection for `why`, told to whoever started the server; its streams are let
    /// go at once.
    fn cut_off(&self, why: String) -> (String, bool) {
        tracing::info!(connection = %self.id, "ending an HTTP connection: {why}");
        (why, true)
    }

    /// Bytes waiting for the client: in its streams, and held by its `GET`s (old ones included)
    /// that their sockets have not taken.
    fn behind(&self) -> usize {
        let waiting = self.connection.behind() + self.sessions.values().map(Stream::behind).sum::<usize>();
        waiting + self.shared.queued.load(std::sync::atomic::Ordering::Acquire)
    }

    fn flush(&mut self) {
        self.connection.flush();
        for stream in self.sessions.values_mut() {
            stream.flush();
        }
    }

    /// Keeps the open streams alive; whether any is open.
    fn keep_alive(&mut self) -> bool {
        let mut read = self.connection.is_read() && self.connection.keep_alive();
        for stream in self.sessions.values_mut() {
            read |= stream.is_read() && stream.keep_alive();
        }
        read
    }

    fn command(&mut self, command: Command) {
        match command {
            Command::Route { key, scope } => {
                self.routes.insert(key, scope);
            }
            Command::Await { key, reply } => {
                self.waiters.insert(key, Waiter::Initialize(reply));
            }
            Command::Open { session: None, after, reply } => {
                let opened = self.connection.open(after.as_deref(), &self.shared).map_err(|Gap::Unknown| {
                    Refused::CannotResume(format!(
                        "event {} is not among the last {} of this stream; call session/load",
                        after.as_deref().unwrap_or_default(),
                        super::stream::RING
                    ))
                });
                let _ = reply.send(opened);
            }
            Command::Open { session: Some(session), after, reply } => self.open_session(session, after, reply),
            Command::Heard | Command::End => {}
        }
    }

    /// A `GET` of `session`'s stream; one resuming from a number this connection never sent is
    /// resumed from the server's record of the session's stream.
    fn open_session(
        &mut self,
        session: String,
        after: Option<String>,
        reply: oneshot::Sender<Result<Reader, Refused>>,
    ) {
        if !self.sessions.contains_key(&session) && self.sessions.len() >= STREAMS {
            let _ = reply.send(Err(Refused::TooMany));
            return;
        }
        let fresh = self.sessions.get(&session).is_none_or(Stream::is_fresh) && !self.routed.contains(&session);
        let from_elsewhere = after.as_deref().and_then(|after| seq_after(after, &session));
        if let (true, Some(seq)) = (fresh, from_elsewhere) {
            self.sessions.entry(session.clone()).or_insert_with(|| Stream::of_session(session.clone()));
            self.resumes += 1;
            // A client sending a request with this id (it knows its connection's) only confuses
            // its own connection.
            let id = format!("cairn-http-resume-{}-{}", self.id, self.resumes);
            let request = serde_json::json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": "_cairn/stream/resume",
                "params": { "sessionId": session, "afterSeq": seq },
            });
            self.waiters.insert(serde_json::Value::String(id).to_string(), Waiter::Resume { session, reply });
            let input = self.input.clone();
            tokio::spawn(async move { input.send(request.to_string().into_bytes()).await });
            return;
        }
        let stream = self.sessions.entry(session.clone()).or_insert_with(|| Stream::of_session(session.clone()));
        let opened = stream.open(after.as_deref(), &self.shared).map_err(|Gap::Unknown| {
            Refused::CannotResume(format!(
                "event {} is not among the last {} this connection sent for session {session}; open a new \
                 connection and resume there, or call session/load",
                after.as_deref().unwrap_or_default(),
                super::stream::RING
            ))
        });
        let _ = reply.send(opened);
    }

    /// Sends one message of the peer's where it goes.
    fn route(&mut self, message: &[u8]) {
        let Ok(peek) = serde_json::from_slice::<Peek>(message) else {
            // The peer writes only JSON-RPC; anything else is still the client's to see.
            return self.connection.push(message, None);
        };
        let key = peek.id.map(key);
        if peek.method.is_none() {
            if let Some(waiter) = key.as_ref().and_then(|key| self.waiters.remove(key)) {
                return self.answered(waiter, message, peek.result.is_some());
            }
            let scope = key.and_then(|key| self.routes.remove(&key)).unwrap_or(Scope::Connection);
            if let Some(made) = named(peek.result).session_id {
                // A new session's stream opens here; its answer is on the connection's stream,
                // where the client waits for it.
                self.routed.insert(made.clone());
                if self.sessions.len() < STREAMS {
                    self.sessions.entry(made.clone()).or_insert_with(|| Stream::of_session(made));
                }
                return self.connection.push(message, None);
            }
            match scope {
                Scope::Session(session) if self.sessions.contains_key(&session) => {
                    if let Some(stream) = self.sessions.get_mut(&session) {
                        stream.push(message, None);
                    }
                }
                Scope::Session(_) | Scope::Connection => self.connection.push(message, None),
            }
            return;
        }
        let about = named(peek.params);
        let seq = about.meta.and_then(|meta| meta.cairn).and_then(|cairn| cairn.seq);
        match about.session_id {
            Some(session) => {
                let numbered = seq.map(|seq| (session.as_str(), seq));
                match self.sessions.get_mut(&session) {
                    Some(stream) => stream.push(message, numbered),
                    None => self.connection.push(message, numbered),
                }
                self.routed.insert(session);
            }
            None => self.connection.push(message, None),
        }
    }

    fn answered(&mut self, waiter: Waiter, message: &[u8], ok: bool) {
        match waiter {
            Waiter::Initialize(reply) => {
                let _ = reply.send(message.to_vec());
            }
            Waiter::Resume { session, reply } => {
                if !ok {
                    #[derive(Deserialize)]
                    struct Failed {
                        error: Option<ErrorText>,
                    }
                    #[derive(Deserialize)]
                    struct ErrorText {
                        message: String,
                    }
                    let why = serde_json::from_slice::<Failed>(message)
                        .ok()
                        .and_then(|failed| failed.error)
                        .map_or_else(|| "the stream cannot be resumed".to_owned(), |error| error.message);
                    if self.sessions.get(&session).is_some_and(Stream::is_fresh) {
                        self.sessions.remove(&session);
                    }
                    let _ = reply.send(Err(Refused::CannotResume(why)));
                    return;
                }
                let opened = match self.sessions.get_mut(&session) {
                    Some(stream) => stream.open(None, &self.shared).map_err(|Gap::Unknown| Refused::Gone),
                    None => Err(Refused::Gone),
                };
                let _ = reply.send(opened);
            }
        }
    }
}

/// The update number in an event id `SESSION:SEQ` or `SESSION:SEQ.K` of `session`.
fn seq_after(id: &str, session: &str) -> Option<u64> {
    let rest = id.strip_prefix(session)?.strip_prefix(':')?;
    rest.split('.').next()?.parse().ok()
}

fn too_far_behind() -> String {
    format!(
        "this client fell more than {} MiB behind; open a new connection and resume with Last-Event-ID, or call session/load",
        BEHIND >> 20
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_id_gives_the_update_number_of_its_own_session_only() {
        assert_eq!(seq_after("s1:7", "s1"), Some(7));
        assert_eq!(seq_after("s1:7.3", "s1"), Some(7));
        assert_eq!(seq_after("s10:7", "s1"), None);
        assert_eq!(seq_after("s1:", "s1"), None);
        assert_eq!(seq_after("12", "s1"), None);
    }

    #[test]
    fn ids_are_keyed_by_their_json() {
        let number: Box<RawValue> = serde_json::from_str("1").unwrap();
        let text: Box<RawValue> = serde_json::from_str(r#""1""#).unwrap();
        let spaced: Box<RawValue> = serde_json::from_str(r#" "a" "#).unwrap();
        assert_ne!(key(&number), key(&text));
        assert_eq!(key(&spaced), r#""a""#);
    }
}
