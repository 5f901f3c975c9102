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

/// What a `GET` reads: the events handed to it, and the bytes of them not yet taken by its
/// socket (counted against the connection's budget).
pub struct Reader {
    pub events: mpsc::UnboundedReceiver<Bytes>,
    pub queued: Arc<AtomicUsize>,
}

/// The `GET` holding a stream.
struct Out {
    events: mpsc::UnboundedSender<Bytes>,
    queued: Arc<AtomicUsize>,
}

impl Out {
    /// Hands `frame` over; false if the `GET` is gone.
    fn send(&self, frame: Bytes) -> bool {
        let len = frame.len();
        self.queued.fetch_add(len, Ordering::AcqRel);
        if self.events.send(frame).is_ok() {
            return true;
        }
        self.queued.fetch_sub(len, Ordering::AcqRel);
        false
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
        self.out.as_ref().is_some_and(|out| !out.events.is_closed())
    }

    /// Bytes waiting for the client: not yet handed over, or handed and not yet on its socket.
    pub fn behind(&self) -> usize {
        self.pending_bytes + self.out.as_ref().map_or(0, |out| out.queued.load(Ordering::Acquire))
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
        match &self.out {
            Some(out) if out.send(event.frame.clone()) => self.remember(event),
            _ => {
                self.out = None;
                self.pending_bytes += event.frame.len();
                self.pending.push_back(event);
            }
        }
    }

    fn remember(&mut self, event: Event) {
        self.sent_bytes += event.frame.len();
        self.sent.push_back(event);
        while self.sent.len() > RING || (self.sent_bytes > RING_BYTES && self.sent.len() > 1) {
            if let Some(old) = self.sent.pop_front() {
                self.sent_bytes -= old.frame.len();
            }
        }
    }

    /// A `GET` takes the stream from here on (one that held it before is let go): first what
    /// followed `after` among the events remembered, when given, then what is pending.
    pub fn open(&mut self, after: Option<&str>) -> Result<Reader, Gap> {
        let resend = match after {
            None => 0,
            Some(after) => {
                let at = self.sent.iter().rposition(|event| event.id == after).ok_or(Gap::Unknown)?;
                self.sent.len() - at - 1
            }
        };
        let (events, receiver) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let out = Out { events, queued: Arc::clone(&queued) };
        for event in self.sent.iter().skip(self.sent.len() - resend) {
            out.send(event.frame.clone());
        }
        self.pending_bytes = 0;
        for event in std::mem::take(&mut self.pending) {
            out.send(event.frame.clone());
            self.remember(event);
        }
        self.out = Some(out);
        Ok(Reader { events: receiver, queued })
    }

    /// A comment that keeps a quiet stream's socket and the proxies on its way open; tells
    /// whether a `GET` still holds the stream.
    pub fn keep_alive(&mut self) -> bool {
        if self.out.as_ref().is_some_and(|out| out.send(Bytes::from_static(b": keep-alive\n\n"))) {
            return true;
        }
        self.out = None;
        false
    }

    /// Lets the `GET` go, with a last comment saying why.
    pub fn end(&mut self, why: &str) {
        if let Some(out) = self.out.take() {
            out.send(Bytes::from(format!(": {why}\n\n")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(reader: &mut Reader) -> Vec<String> {
        let mut seen = Vec::new();
        while let Ok(frame) = reader.events.try_recv() {
            reader.queued.fetch_sub(frame.len(), Ordering::AcqRel);
            seen.push(String::from_utf8_lossy(&frame).into_owned());
        }
        seen
    }

    #[test]
    fn a_sessions_events_are_named_by_the_updates_number_and_what_followed_it() {
        let mut stream = Stream::of_session("s1".into());
        stream.push(br#"{"n":1}"#, Some(("s1", 7)));
        stream.push(br#"{"n":2}"#, None);
        stream.push(br#"{"n":3}"#, Some(("s1", 8)));
        let mut reader = stream.open(None).unwrap();
        assert_eq!(
            drain(&mut reader),
            ["id: s1:7\ndata: {\"n\":1}\n\n", "id: s1:7.1\ndata: {\"n\":2}\n\n", "id: s1:8\ndata: {\"n\":3}\n\n"]
        );
        assert_eq!(stream.behind(), 0);
    }

    #[test]
    fn a_reopened_stream_resends_what_followed_the_last_id_seen_then_what_waited() {
        let mut stream = Stream::default();
        let mut first = stream.open(None).unwrap();
        stream.push(b"a", None);
        stream.push(b"b", None);
        stream.push(b"c", None);
        drain(&mut first);
        drop(first);
        stream.push(b"d", None);
        assert!(!stream.is_read());
        let mut again = stream.open(Some("1")).unwrap();
        let seen: Vec<String> = drain(&mut again);
        assert_eq!(seen, ["id: 2\ndata: b\n\n", "id: 3\ndata: c\n\n", "id: 4\ndata: d\n\n"]);
        assert_eq!(stream.open(Some("nothing like it")).err(), Some(Gap::Unknown));
    }

    #[test]
    fn what_is_remembered_is_bounded_in_count_and_bytes() {
        let mut stream = Stream::default();
        let mut reader = stream.open(None).unwrap();
        for _ in 0..RING + 10 {
            stream.push(b"small", None);
        }
        drain(&mut reader);
        assert_eq!(stream.sent.len(), RING);
        assert_eq!(stream.open(Some("10")).err(), Some(Gap::Unknown), "forgotten");
        let mut reader = stream.open(Some("11")).unwrap();
        assert_eq!(drain(&mut reader).len(), RING - 1);
        let big = vec![b'x'; RING_BYTES / 4];
        for _ in 0..8 {
            stream.push(&big, None);
        }
        drain(&mut reader);
        assert!(stream.sent_bytes <= RING_BYTES && stream.sent.len() < 8, "{}", stream.sent.len());
    }

    #[test]
    fn what_waits_for_a_reader_counts_until_its_socket_takes_it() {
        let mut stream = Stream::default();
        stream.push(&[b'x'; 100], None);
        assert!(stream.behind() > 100);
        let mut reader = stream.open(None).unwrap();
        assert!(stream.behind() > 100, "handed but not yet taken");
        drain(&mut reader);
        assert_eq!(stream.behind(), 0);
    }
}
