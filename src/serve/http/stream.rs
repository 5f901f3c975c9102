//! One server-sent-events stream of a Streamable HTTP connection: the connection's own, or one
//! session's. Each event has an id, so a client whose `GET` dropped can open the stream again
//! with `Last-Event-ID` and get exactly what it had not read.
//!
//! Events wait here while no `GET` holds the stream ([`Stream::pending`]). Once handed to a
//! `GET`'s body they are remembered for a while (the last [`RING`] of them, at most
//! [`RING_BYTES`] together): bytes handed to a socket that
//! then broke may never have arrived, and a reopened stream resends what follows the last id the
//! client saw. Ids are `SESSION:SEQ` for a session's numbered updates (the `_meta.cairn.seq` of
//! the update, so the same id resumes on another connection through the server's record of the
//! stream) and `SESSION:SEQ.K` for the K-th other message since; the connection's own stream
//! numbers its events `1, 2, …`, a numbered update keeping its `SESSION:SEQ`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hyper::body::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// Events kept per stream after they were handed to a `GET`, for a client that reopens it.
pub const RING: usize = 256;
/// ...and at most so many bytes of them.
pub const RING_BYTES: usize = 256 * 1024;

/// An event as the client reads it.
#[derive(Clone)]
pub struct Event {
    pub id: String,
    /// The whole event: `id:`, `data:` and the blank line.
    pub frame: Bytes,
}

impl Event {
    pub fn new(id: String, message: &[u8]) -> Self {
        let mut frame = Vec::with_capacity(id.len() + message.len() + 16);
        frame.extend_from_slice(b"id: ");
        frame.extend_from_slice(id.as_bytes());
        frame.extend_from_slice(b"\ndata: ");
        frame.extend_from_slice(message);
        frame.extend_from_slice(b"\n\n");
        Self { id, frame: Bytes::from(frame) }
    }
}

/// How many bytes of events a `GET` may hold that its socket has not taken yet; the rest wait
/// here, where they count against the connection's budget and are let go with it.
pub const WINDOW: usize = 256 * 1024;

/// What a `GET` reads: the events handed to it. It gives back the count of every frame it takes
/// (its own, for the window, and its connection's, for the budget) and wakes the connection to
/// hand it more; it ends when `ended` is cancelled, its frames let go at once.
pub struct Reader {
    pub events: mpsc::UnboundedReceiver<Bytes>,
    pub own: Arc<AtomicUsize>,
    pub connection: Arc<AtomicUsize>,
    pub wake: Arc<tokio::sync::Notify>,
    pub ended: CancellationToken,
}

impl Reader {
    /// The next frame for the socket; `None` once the stream is let go.
    pub async fn next(&mut self) -> Option<Bytes> {
        let frame = tokio::select! {
            biased;
            () = self.ended.cancelled() => return None,
            frame = self.events.recv() => frame?,
        };
        self.own.fetch_sub(frame.len(), Ordering::AcqRel);
        self.connection.fetch_sub(frame.len(), Ordering::AcqRel);
        self.wake.notify_one();
        Some(frame)
    }
}

/// What every `GET` of a connection shares with it.
#[derive(Clone, Default)]
pub struct Shared {
    /// Bytes handed to the connection's `GET`s, old ones included, that their sockets have not
    /// taken yet.
    pub queued: Arc<AtomicUsize>,
    /// Woken when a `GET` took a frame.
    pub wake: Arc<tokio::sync::Notify>,
}

/// The `GET` holding a stream.
struct Out {
    events: mpsc::UnboundedSender<Bytes>,
    own: Arc<AtomicUsize>,
    connection: Arc<AtomicUsize>,
    ended: CancellationToken,
}

impl Out {
    /// Hands `frame` over; false if the `GET` is gone.
    fn send(&self, frame: Bytes) -> bool {
        let len = frame.len();
        self.own.fetch_add(len, Ordering::AcqRel);
        self.connection.fetch_add(len, Ordering::AcqRel);
        if self.events.send(frame).is_ok() {
            return true;
        }
        self.own.fetch_sub(len, Ordering::AcqRel);
        self.connection.fetch_sub(len, Ordering::AcqRel);
        false
    }

    fn is_open(&self) -> bool {
        !self.events.is_closed() && !self.ended.is_cancelled()
    }

    fn has_room(&self) -> bool {
        self.own.load(Ordering::Acquire) < WINDOW
    }
}

/// Why a stream cannot be reopened from where the client asks.
#[derive(Debug, PartialEq, Eq)]
pub enum Gap {
    /// The id is not among those remembered.
    Unknown,
}

/// One stream of events.
#[derive(Default)]
pub struct Stream {
    /// The session it carries (`None`: the connection's own).
    session: Option<String>,
    /// The number of the last numbered update routed here, and of other messages since.
    seq: u64,
    since: u64,
    /// Events not yet handed to a `GET`, and their bytes.
    pending: VecDeque<Event>,
    pending_bytes: usize,
    /// Events handed to a `GET`, the latest [`RING`] within [`RING_BYTES`], and their bytes.
    sent: VecDeque<Event>,
    sent_bytes: usize,
    out: Option<Out>,
}

impl Stream {
    pub fn of_session(session: String) -> Self {
        Self { session: Some(session), ..Self::default() }
    }

    /// Whether nothing was ever routed here.
    pub fn is_fresh(&self) -> bool {
        self.seq == 0 && self.since == 0 && self.pending.is_empty() && self.sent.is_empty()
    }

    /// Whether a `GET` holds it.
    pub fn is_read(&self) -> bool {
        self.out.as_ref().is_some_and(Out::is_open)
    }

    /// Bytes waiting here for the client (what `GET`s hold is counted by the connection).
    pub fn behind(&self) -> usize {
        self.pending_bytes
    }

    /// `message` (one JSON-RPC message) as this stream's next event; `numbered` is its session
    /// and number when it is a session's numbered update.
    pub fn push(&mut self, message: &[u8], numbered: Option<(&str, u64)>) {
        let id = match (&self.session, numbered) {
            (Some(session), Some((_, seq))) => {
                (self.seq, self.since) = (seq, 0);
                format!("{session}:{seq}")
            }
            (Some(session), None) => {
                self.since += 1;
                format!("{session}:{}.{}", self.seq, self.since)
            }
            // A session's update on the connection's stream: its id resumes it anywhere.
            (None, Some((session, seq))) => format!("{session}:{seq}"),
            (None, None) => {
                self.since += 1;
                self.since.to_string()
            }
        };
        let event = Event::new(id, message);
        self.pending_bytes += event.frame.len();
        self.pending.push_back(event);
        self.flush();
    }

    /// Hands the `GET` what waits, while its window has room.
    pub fn flush(&mut self) {
        let Some(out) = &self.out else { return };
        if !out.is_open() {
            self.out = None;
            return;
        }
        while out.has_room() {
            let Some(event) = self.pending.pop_front() else { return };
            if !out.send(event.frame.clone()) {
                self.pending.push_front(event);
                self.out = None;
                return;
            }
            self.pending_bytes -= event.frame.len();
            self.sent_bytes += event.frame.len();
            self.sent.push_back(event);
            // The ring stays whole: an event too big to keep takes the older ones with it, and
            // a reopening from before it is refused rather than given a gap.
            while self.sent.len() > RING || self.sent_bytes > RING_BYTES {
                let Some(old) = self.sent.pop_front() else { break };
                self.sent_bytes -= old.frame.len();
            }
        }
    }

    /// A `GET` takes the stream from here on (one that held it before is let go, its frames
    /// with it): first what followed `after` among the events remembered, when given, then what
    /// is pending.
    pub fn open(&mut self, after: Option<&str>, shared: &Shared) -> Result<Reader, Gap> {
        if let Some(after) = after {
            let at = self.sent.iter().rposition(|event| event.id == after).ok_or(Gap::Unknown)?;
            for event in self.sent.drain(at + 1..).rev() {
                self.sent_bytes -= event.frame.len();
                self.pending_bytes += event.frame.len();
                self.pending.push_front(event);
            }
        }
        if let Some(old) = self.out.take() {
            old.ended.cancel();
        }
        let (events, receiver) = mpsc::unbounded_channel();
        let (own, ended) = (Arc::new(AtomicUsize::new(0)), CancellationToken::new());
        self.out =
            Some(Out { events, own: Arc::clone(&own), connection: Arc::clone(&shared.queued), ended: ended.clone() });
        self.flush();
        Ok(Reader {
            events: receiver,
            own,
            connection: Arc::clone(&shared.queued),
            wake: Arc::clone(&shared.wake),
            ended,
        })
    }

    /// A comment that keeps a quiet stream's socket and the proxies on its way open; tells
    /// whether a `GET` still holds the stream.
    pub fn keep_alive(&mut self) -> bool {
        match &self.out {
            Some(out) if out.is_open() => {
                if out.has_room() {
                    out.send(Bytes::from_static(b": keep-alive\n\n"));
                }
                true
            }
            _ => {
                self.out = None;
                false
            }
        }
    }

    /// Lets the `GET` go: after a last comment saying why, or at once (`now`), what it holds let
    /// go with it.
    pub fn end(&mut self, why: &str, now: bool) {
        if let Some(out) = self.out.take() {
            if now {
                out.ended.cancel();
            } else {
                out.send(Bytes::from(format!(": {why}\n\n")));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `reader`'s socket takes, all of it: frames as they come, the stream handing over
    /// what waited as the window frees.
    fn drain(stream: &mut Stream, reader: &mut Reader) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            let mut took = false;
            while let Ok(frame) = reader.events.try_recv() {
                reader.own.fetch_sub(frame.len(), Ordering::AcqRel);
                reader.connection.fetch_sub(frame.len(), Ordering::AcqRel);
                seen.push(String::from_utf8_lossy(&frame).into_owned());
                took = true;
            }
            if !took {
                return seen;
            }
            stream.flush();
        }
    }

    #[test]
    fn a_sessions_events_are_named_by_the_updates_number_and_what_followed_it() {
        let shared = Shared::default();
        let mut stream = Stream::of_session("s1".into());
        stream.push(br#"{"n":1}"#, Some(("s1", 7)));
        stream.push(br#"{"n":2}"#, None);
        stream.push(br#"{"n":3}"#, Some(("s1", 8)));
        let mut reader = stream.open(None, &shared).unwrap();
        assert_eq!(
            drain(&mut stream, &mut reader),
            ["id: s1:7\ndata: {\"n\":1}\n\n", "id: s1:7.1\ndata: {\"n\":2}\n\n", "id: s1:8\ndata: {\"n\":3}\n\n"]
        );
        assert_eq!(stream.behind(), 0);
        assert_eq!(shared.queued.load(Ordering::Acquire), 0);
    }

    #[test]
    fn a_reopened_stream_resends_what_followed_the_last_id_seen_then_what_waited() {
        let shared = Shared::default();
        let mut stream = Stream::default();
        let mut first = stream.open(None, &shared).unwrap();
        stream.push(b"a", None);
        stream.push(b"b", None);
        stream.push(b"c", None);
        drain(&mut stream, &mut first);
        drop(first);
        stream.push(b"d", None);
        assert!(!stream.is_read());
        let mut again = stream.open(Some("1"), &shared).unwrap();
        let seen: Vec<String> = drain(&mut stream, &mut again);
        assert_eq!(seen, ["id: 2\ndata: b\n\n", "id: 3\ndata: c\n\n", "id: 4\ndata: d\n\n"]);
        // Reopened again from the same id: the same events, each once.
        let mut third = stream.open(Some("1"), &shared).unwrap();
        assert_eq!(drain(&mut stream, &mut third), seen);
        assert_eq!(stream.open(Some("nothing like it"), &shared).err(), Some(Gap::Unknown));
    }

    #[test]
    fn what_is_remembered_is_bounded_in_count_and_bytes_and_a_big_event_takes_the_older_with_it() {
        let shared = Shared::default();
        let mut stream = Stream::default();
        let mut reader = stream.open(None, &shared).unwrap();
        for _ in 0..RING + 10 {
            stream.push(b"small", None);
        }
        drain(&mut stream, &mut reader);
        assert_eq!(stream.sent.len(), RING);
        assert_eq!(stream.open(Some("10"), &shared).err(), Some(Gap::Unknown), "forgotten");
        let mut reader = stream.open(Some("11"), &shared).unwrap();
        assert_eq!(drain(&mut stream, &mut reader).len(), RING - 1);
        stream.push(&vec![b'x'; RING_BYTES + 1], None);
        drain(&mut stream, &mut reader);
        assert!(stream.sent.is_empty() && stream.sent_bytes == 0, "nothing older than a gap is kept");
        let last = (RING + 11).to_string();
        assert_eq!(stream.open(Some(&last), &shared).err(), Some(Gap::Unknown));
    }

    #[test]
    fn a_reader_is_handed_a_window_and_the_rest_waits_counted() {
        let shared = Shared::default();
        let mut stream = Stream::default();
        let reader = stream.open(None, &shared).unwrap();
        for _ in 0..64 {
            stream.push(&[b'x'; 16 * 1024], None);
        }
        let held = shared.queued.load(Ordering::Acquire);
        assert!((WINDOW..WINDOW + 17 * 1024).contains(&held), "{held}");
        assert!(stream.behind() >= 64 * 16 * 1024 - held, "the rest waits here");
        // A reader let go for another lets its frames go with it.
        let mut again = stream.open(None, &shared).unwrap();
        assert!(reader.ended.is_cancelled());
        drop(reader);
        let seen = drain(&mut stream, &mut again);
        assert_eq!(stream.behind(), 0);
        assert!(!seen.is_empty());
    }
}
