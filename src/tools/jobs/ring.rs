//! A job's output as cairn keeps it: at most a byte cap of the newest output (stdout and stderr
//! as they arrived), the oldest whole lines dropped first, and a read mark, so that each read
//! returns what the job printed since the last one and says how much of that was dropped
//! unread. Memory stays at the cap however much the job prints.

use std::collections::VecDeque;

/// The kept output and the read mark.
#[derive(Debug)]
pub struct Ring {
    cap: usize,
    kept: VecDeque<u8>,
    /// The offset of `kept[0]` in everything the job printed.
    start: u64,
    /// The offset of the first byte not read yet.
    read: u64,
    /// What was dropped before it was read, since the last read.
    dropped: Dropped,
}

/// Output dropped unread: whole lines (a cut line counts as one), and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Dropped {
    pub lines: u64,
    pub bytes: u64,
}

/// What a read returns.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unread {
    pub text: String,
    pub dropped: Dropped,
}

impl Ring {
    pub fn new(cap: usize) -> Self {
        Self { cap: cap.max(1), kept: VecDeque::new(), start: 0, read: 0, dropped: Dropped::default() }
    }

    /// Everything the job printed so far, in bytes.
    pub fn total(&self) -> u64 {
        self.start + self.kept.len() as u64
    }

    /// Adds output; when over the cap, drops the oldest lines (at least the excess, up to the
    /// end of the line it falls in, when that line ends within what is kept).
    pub fn push(&mut self, bytes: &[u8]) {
        if bytes.len() >= self.cap {
            // Whatever is kept goes, and the start of this piece too.
            let skipped = bytes.len() - self.cap;
            self.drop_front(self.kept.len());
            self.count_dropped(&bytes[..skipped], self.start);
            self.start += skipped as u64;
            self.kept.extend(&bytes[skipped..]);
            self.trim_to_line();
            return;
        }
        self.kept.extend(bytes);
        if self.kept.len() > self.cap {
            let excess = self.kept.len() - self.cap;
            let cut = self.kept.range(excess..).position(|&b| b == b'\n').map_or(excess, |at| excess + at + 1);
            self.drop_front(cut);
        }
    }

    /// After a piece bigger than the cap: what is kept starts at a line's start, if one ends
    /// in its first half.
    fn trim_to_line(&mut self) {
        let half = self.kept.len() / 2;
        if let Some(at) = self.kept.range(..half).position(|&b| b == b'\n') {
            self.drop_front(at + 1);
        }
    }

    fn drop_front(&mut self, n: usize) {
        let n = n.min(self.kept.len());
        let gone: Vec<u8> = self.kept.drain(..n).collect();
        self.count_dropped(&gone, self.start);
        self.start += n as u64;
    }

    /// Counts what of `gone` (starting at offset `at`) was not read yet.
    fn count_dropped(&mut self, gone: &[u8], at: u64) {
        let unread_from = usize::try_from(self.read.saturating_sub(at)).unwrap_or(usize::MAX).min(gone.len());
        let unread = &gone[unread_from..];
        if unread.is_empty() {
            return;
        }
        let mut lines = memchr::memchr_iter(b'\n', unread).count() as u64;
        if unread.last() != Some(&b'\n') {
            lines += 1;
        }
        self.dropped.lines += lines;
        self.dropped.bytes += unread.len() as u64;
        self.read = self.read.max(at + gone.len() as u64);
    }

    /// What was printed since the last read, without reading it.
    pub fn peek(&self) -> Unread {
        let (text, _) = self.unread_text();
        Unread { text, dropped: self.dropped }
    }

    /// What was printed since the last read; it is read now. A character cut by the end of
    /// what arrived so far is left for the next read.
    pub fn take(&mut self) -> Unread {
        let (text, through) = self.unread_text();
        let unread = Unread { text, dropped: self.dropped };
        self.read = through;
        self.dropped = Dropped::default();
        unread
    }

    /// The unread text and the offset it reaches.
    fn unread_text(&self) -> (String, u64) {
        let from = usize::try_from(self.read.saturating_sub(self.start)).unwrap_or(usize::MAX).min(self.kept.len());
        let bytes: Vec<u8> = self.kept.range(from..).copied().collect();
        // A multi-byte character still arriving (at most 3 bytes of it) waits for the rest.
        let whole = match std::str::from_utf8(&bytes) {
            Err(err) if err.error_len().is_none() && bytes.len() - err.valid_up_to() < 4 => err.valid_up_to(),
            _ => bytes.len(),
        };
        let through = self.start + (from + whole) as u64;
        (String::from_utf8_lossy(&bytes[..whole]).into_owned(), through)
    }
}

impl Dropped {
    /// The note a read carries when output was dropped unread; `None` when nothing was.
    pub fn note(&self, cap: usize) -> Option<String> {
        (self.bytes > 0).then(|| {
            let lines = if self.lines == 1 { "line" } else { "lines" };
            format!(
                "[{} {lines} ({} bytes) of output were dropped before this read: cairn keeps the last {} KiB of a \
                 job's output; read more often, or make the command quieter]",
                self.lines,
                self.bytes,
                cap / 1024
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_read_returns_what_came_since_the_last() {
        let mut ring = Ring::new(100);
        ring.push(b"one\ntw");
        assert_eq!(ring.peek().text, "one\ntw");
        assert_eq!(ring.take().text, "one\ntw");
        ring.push(b"o\nthree\n");
        assert_eq!(ring.take(), Unread { text: "o\nthree\n".into(), dropped: Dropped::default() });
        assert_eq!(ring.take().text, "");
    }

    #[test]
    fn the_oldest_lines_go_first_and_are_counted_when_unread() {
        let mut ring = Ring::new(10);
        ring.push(b"aaaa\nbbbb\n");
        ring.push(b"cc\n");
        // `aaaa\n` went whole: the cut falls at a line's end.
        let read = ring.take();
        assert_eq!(read.text, "bbbb\ncc\n");
        assert_eq!(read.dropped, Dropped { lines: 1, bytes: 5 });
        ring.push(b"dddddd\n");
        let read = ring.take();
        assert_eq!(read.text, "dddddd\n");
        assert_eq!(read.dropped, Dropped::default(), "what was dropped had been read");
        assert!(read.dropped.note(10).is_none());
    }

    #[test]
    fn a_flood_keeps_memory_at_the_cap_and_counts_every_line() {
        let mut ring = Ring::new(1024);
        let line = b"y\n".repeat(4096);
        for _ in 0..1000 {
            ring.push(&line);
            assert!(ring.kept.len() <= 1024);
        }
        let read = ring.take();
        assert!(read.text.len() <= 1024 && read.text.starts_with("y\n"), "{}", read.text.len());
        let seen = read.text.matches('\n').count() as u64;
        assert_eq!(read.dropped.lines + seen, 4096 * 1000);
        assert_eq!(read.dropped.bytes + read.text.len() as u64, 8192 * 1000);
        assert!(read.dropped.note(1024).unwrap().contains("dropped before this read"));
    }

    #[test]
    fn a_line_longer_than_the_cap_is_cut_and_counted_once() {
        let mut ring = Ring::new(8);
        ring.push(&[b'x'; 20]);
        let read = ring.take();
        assert_eq!(read.text, "xxxxxxxx");
        assert_eq!(read.dropped, Dropped { lines: 1, bytes: 12 });
    }

    #[test]
    fn a_character_still_arriving_waits_for_its_rest() {
        let mut ring = Ring::new(100);
        let snow = "a❄".as_bytes();
        ring.push(&snow[..2]);
        assert_eq!(ring.take().text, "a");
        ring.push(&snow[2..]);
        assert_eq!(ring.take().text, "❄");
    }
}
