//! Server-sent events as a streamable HTTP server sends them, parsed from the body's chunks as
//! they come, an event at most a given number of bytes (its lines as sent, so a server cannot
//! make cairn hold more than that however it splits or pads them). Lines end with `\n`, `\r\n`
//! or `\r`; `data`, `id`, `event` and `retry` are read, comments and other fields skipped; an
//! event is dispatched at a blank line when it has data. What follows the last blank line when
//! the stream ends is dropped, as the format says.

use std::collections::VecDeque;

/// One event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Event {
    /// Its `data` lines joined with `\n`.
    pub data: String,
    /// The stream's last event id, as of this event.
    pub id: Option<String>,
}

/// The event being read was larger than the limit.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("the server sent an event of more than {limit} bytes")]
pub(super) struct TooLarge {
    pub limit: usize,
}

/// The parser's state between chunks.
#[derive(Debug)]
pub(super) struct Parser {
    limit: usize,
    /// The line being read, without its end.
    line: Vec<u8>,
    /// The last chunk ended with `\r`: a `\n` that starts the next one ends nothing.
    after_cr: bool,
    /// Bytes of the event being read so far, line ends included.
    size: usize,
    data: Option<String>,
    last_id: Option<String>,
    /// `retry:` in milliseconds, the last one given.
    pub retry: Option<u64>,
    ready: VecDeque<Event>,
}

impl Parser {
    pub fn new(limit: usize) -> Self {
        Self {
            limit,
            line: Vec::new(),
            after_cr: false,
            size: 0,
            data: None,
            last_id: None,
            retry: None,
            ready: VecDeque::new(),
        }
    }

    /// A parser for the stream taken up again: the last id and `retry` kept, nothing half read.
    pub fn resumed(&self) -> Self {
        Self { last_id: self.last_id.clone(), retry: self.retry, ..Self::new(self.limit) }
    }

    /// The last event id seen, to resume the stream from.
    pub fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Takes a chunk of the body.
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<(), TooLarge> {
        if self.after_cr {
            self.after_cr = false;
            if let Some(rest) = chunk.strip_prefix(b"\n") {
                chunk = rest;
            }
        }
        while !chunk.is_empty() {
            let end = memchr::memchr2(b'\n', b'\r', chunk);
            let piece = chunk.get(..end.unwrap_or(chunk.len())).unwrap_or_default();
            self.size += piece.len();
            if self.size > self.limit {
                return Err(TooLarge { limit: self.limit });
            }
            self.line.extend_from_slice(piece);
            let Some(at) = end else { break };
            let mut next = at + 1;
            if chunk.get(at) == Some(&b'\r') {
                match chunk.get(next) {
                    Some(b'\n') => next += 1,
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            self.size += 1;
            self.end_line();
            chunk = chunk.get(next..).unwrap_or_default();
        }
        Ok(())
    }

    /// The next event read whole.
    pub fn next_event(&mut self) -> Option<Event> {
        self.ready.pop_front()
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                self.ready.push_back(Event { data, id: self.last_id.clone() });
            }
            self.size = 0;
            return;
        }
        if line.first() == Some(&b':') {
            return;
        }
        let (field, value) = match memchr::memchr(b':', &line) {
            Some(at) => {
                let value = line.get(at + 1..).unwrap_or_default();
                (line.get(..at).unwrap_or_default(), value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (&line[..], &b""[..]),
        };
        let value = String::from_utf8_lossy(value);
        match field {
            b"data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            },
            b"id" if !value.contains('\0') => self.last_id = Some(value.into_owned()),
            b"retry" => {
                if let Ok(retry) = value.parse() {
                    self.retry = Some(retry);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(chunks: &[&[u8]], limit: usize) -> Result<Vec<Event>, TooLarge> {
        let mut parser = Parser::new(limit);
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk)?;
            out.extend(std::iter::from_fn(|| parser.next_event()));
        }
        Ok(out)
    }

    fn event(data: &str, id: Option<&str>) -> Event {
        Event { data: data.into(), id: id.map(str::to_owned) }
    }

    #[test]
    fn events_are_read_across_chunks_and_line_ends() {
        let body: &[&[u8]] = &[
            b": comment\nid: 1\nevent: message\ndata: {\"a\"",
            b":1}\r",
            b"\n\r\ndata:x\rdata: y\r\r",
            b"\nid: 2\n\n",
        ];
        assert_eq!(events(body, 1000).unwrap(), [event("{\"a\":1}", Some("1")), event("x\ny", Some("1"))]);
        let mut parser = Parser::new(1000);
        parser.push(b"id: 7\nretry: 2500\n\ndata: cut off").unwrap();
        assert_eq!(parser.next_event(), None, "an event without data, then one never ended");
        assert_eq!((parser.last_id(), parser.retry), (Some("7"), Some(2500)));
    }

    #[test]
    fn an_event_larger_than_the_limit_is_refused_however_it_is_split() {
        let big = format!("data: {}\n\n", "x".repeat(100));
        assert_eq!(events(&[big.as_bytes()], 100), Err(TooLarge { limit: 100 }));
        let lines = "data: x\n".repeat(20);
        assert!(events(&[lines.as_bytes()], 100).is_err(), "many small lines count together");
        let pieces: Vec<&[u8]> = big.as_bytes().chunks(3).collect();
        assert!(events(&pieces, 100).is_err());
        assert_eq!(events(&[big.as_bytes(), big.as_bytes()], 200).unwrap().len(), 2, "each event has the limit");
    }
}
