//! One page of a text's lines, read from a stream: what `read` returns costs what it shows.
//!
//! [`page`] skips to the first wanted line counting newlines, keeps at most a few KiB of each
//! returned line, stops at the line limit or the byte cap, then counts what is left only within a
//! budget, so the total is known for ordinary files and honestly unknown for huge ones. Memory is
//! bounded by the reader's buffer and the page itself, whatever the file: a 2 GB single line costs
//! the same as a short one. Lines follow `str::lines`: split at `\n`, a `\r` before it dropped, a
//! last line without `\n` counted; invalid UTF-8 is shown replaced, never an error.

use std::io::{self, BufRead};

/// Lines returned when the model gives no limit.
pub const DEFAULT_LINES: u32 = 2_000;
/// The most a page holds, whatever the limit.
pub const MAX_PAGE_BYTES: usize = 200 * 1024;
/// Longer lines are cut, so one minified line cannot fill the context.
pub const MAX_LINE_CHARS: usize = 2_000;
/// Bytes of a line kept to show it: enough for `MAX_LINE_CHARS` characters of up to 4 bytes,
/// plus a character split at the end.
const KEEP_LINE_BYTES: usize = 4 * MAX_LINE_CHARS + 4;
/// How far past the page the rest of the lines are counted to give a total. 16 MiB take a few
/// milliseconds from the page cache; beyond, "the file goes on" is said instead.
const COUNT_BUDGET: u64 = 16 << 20;

/// Where the reader starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// At the file's first line: lines before `first` are skipped.
    FileStart,
    /// At line `first` already (an editor returned just that slice).
    AtFirst,
}

/// How many lines the text has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Total {
    Known(u64),
    /// More lines follow than were counted.
    GoesOn,
}

/// The lines read, numbered and ready for the model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    /// `{number:>6}\t{line}\n` for each line returned.
    pub text: String,
    /// The number of the last line returned (`first - 1` if none).
    pub last: u64,
    pub total: Total,
}

#[derive(Debug)]
pub enum PageError {
    /// The text ends before `first`; it has this many lines.
    PastEnd(u64),
    Io(io::Error),
    Cancelled,
}

impl From<io::Error> for PageError {
    fn from(err: io::Error) -> Self {
        PageError::Io(err)
    }
}

/// Reads lines `first..first + limit` of `reader` (numbers from 1), within the caps above.
/// `stop` is asked between buffers; when it says so, reading ends with [`PageError::Cancelled`].
pub fn page(
    mut reader: impl BufRead,
    first: u64,
    limit: u64,
    start: Start,
    stop: &dyn Fn() -> bool,
) -> Result<Page, PageError> {
    let first = first.max(1);
    let limit = limit.max(1);
    // The number of the line the reader is in, and whether some of its bytes were consumed.
    let mut number = match start {
        Start::FileStart => 1,
        Start::AtFirst => first,
    };
    let mut partial = false;
    while number < first {
        if stop() {
            return Err(PageError::Cancelled);
        }
        let buffer = reader.fill_buf()?;
        let Some(&end) = buffer.last() else {
            return Err(PageError::PastEnd(number - 1 + u64::from(partial)));
        };
        let wanted = first - number;
        let (used, newlines) = skip_lines(buffer, wanted);
        partial = newlines < wanted && end != b'\n';
        number += newlines;
        reader.consume(used);
    }

    let mut text = String::new();
    let mut last = first - 1;
    let mut line = Vec::with_capacity(256);
    let mut length = 0usize;
    loop {
        if stop() {
            return Err(PageError::Cancelled);
        }
        let buffer = reader.fill_buf()?;
        let newline = memchr::memchr(b'\n', buffer);
        let at_end = buffer.is_empty();
        let used = newline.map_or(buffer.len(), |at| at + 1);
        keep(&mut line, &buffer[..newline.unwrap_or(buffer.len())], &mut length);
        reader.consume(used);
        let is_last = number - first + 1 == limit;
        // The last line of the page need not be read to its end once it is cut anyway.
        let give_up = newline.is_none() && !at_end && is_last && length > line.len();
        if newline.is_none() && !give_up && !(at_end && length > 0) {
            if at_end {
                return ended(text, first, last, number - 1);
            }
            continue;
        }
        let entry = format!("{number:>6}\t{}\n", show(&line, length, newline.is_some()));
        let full = text.len() + entry.len() > MAX_PAGE_BYTES;
        if !full {
            text.push_str(&entry);
            last = number;
        }
        line.clear();
        length = 0;
        if give_up {
            partial = true;
            break;
        }
        number += 1;
        if at_end {
            return ended(text, first, last, number - 1);
        }
        if full || is_last {
            partial = false;
            break;
        }
    }

    // Count the rest within the budget; `number` is the line the reader is in.
    let mut counted = 0u64;
    loop {
        if stop() {
            return Err(PageError::Cancelled);
        }
        let buffer = reader.fill_buf()?;
        let Some(&end) = buffer.last() else {
            return Ok(Page { text, last, total: Total::Known(number - 1 + u64::from(partial)) });
        };
        if counted >= COUNT_BUDGET {
            return Ok(Page { text, last, total: Total::GoesOn });
        }
        let used = buffer.len();
        number += memchr::memchr_iter(b'\n', buffer).count() as u64;
        partial = end != b'\n';
        counted += used as u64;
        reader.consume(used);
    }
}

/// The page of a text that ended at line `total`: past its end if it has no line at `first`.
fn ended(text: String, first: u64, last: u64, total: u64) -> Result<Page, PageError> {
    if last < first && first > 1 {
        return Err(PageError::PastEnd(total));
    }
    Ok(Page { text, last, total: Total::Known(total) })
}

/// Consumes up to `wanted` whole lines of `buffer`: (bytes used, lines ended).
fn skip_lines(buffer: &[u8], wanted: u64) -> (usize, u64) {
    let mut ended = 0u64;
    for at in memchr::memchr_iter(b'\n', buffer) {
        ended += 1;
        if ended == wanted {
            return (at + 1, ended);
        }
    }
    (buffer.len(), ended)
}

/// Appends what is still worth keeping of a line's next bytes.
fn keep(line: &mut Vec<u8>, bytes: &[u8], seen: &mut usize) {
    let room = KEEP_LINE_BYTES.saturating_sub(line.len());
    line.extend_from_slice(&bytes[..bytes.len().min(room)]);
    *seen = seen.saturating_add(bytes.len());
}

/// A line as shown: `\r` before its `\n` dropped, invalid UTF-8 replaced, cut if too long.
fn show(kept: &[u8], length: usize, had_newline: bool) -> String {
    let truncated = length > kept.len();
    let kept = if had_newline && !truncated { kept.strip_suffix(b"\r").unwrap_or(kept) } else { kept };
    let text = String::from_utf8_lossy(kept);
    if truncated || text.chars().count() > MAX_LINE_CHARS {
        text.chars().take(MAX_LINE_CHARS).chain(" [line cut]".chars()).collect()
    } else {
        text.into_owned()
    }
}

/// A size for people (kept in `visible`, which every printer may use).
pub use crate::visible::human_size;

#[cfg(test)]
mod tests {
    use super::*;

    /// What `read` did when it loaded the whole file: the reference the streaming page must match.
    fn whole(bytes: &[u8], first: u64, limit: u64) -> Result<(String, u64, u64), u64> {
        let text = String::from_utf8_lossy(bytes);
        let total = text.lines().count() as u64;
        if first > total.max(1) {
            return Err(total);
        }
        let mut out = String::new();
        let mut last = first - 1;
        for (number, line) in text.lines().enumerate().skip((first - 1) as usize).take(limit as usize) {
            let line: String = if line.chars().count() > MAX_LINE_CHARS {
                line.chars().take(MAX_LINE_CHARS).chain(" [line cut]".chars()).collect()
            } else {
                line.to_owned()
            };
            out.push_str(&format!("{:>6}\t{line}\n", number + 1));
            last = number as u64 + 1;
        }
        Ok((out, last, total))
    }

    fn streamed(bytes: &[u8], first: u64, limit: u64, capacity: usize) -> Result<(String, u64, u64), u64> {
        let reader = io::BufReader::with_capacity(capacity, bytes);
        match page(reader, first, limit, Start::FileStart, &|| false) {
            Ok(Page { text, last, total: Total::Known(total) }) => Ok((text, last, total)),
            Ok(page) => panic!("a short text has a known total: {page:?}"),
            Err(PageError::PastEnd(total)) => Err(total),
            Err(err) => panic!("{err:?}"),
        }
    }

    #[test]
    fn a_streamed_page_matches_the_whole_text_at_every_offset_and_buffer_size() {
        let long = "é".repeat(MAX_LINE_CHARS + 3);
        let exact = "𝄞".repeat(MAX_LINE_CHARS);
        let texts: Vec<Vec<u8>> = vec![
            b"".to_vec(),
            b"\n".to_vec(),
            b"one".to_vec(),
            b"one\ntwo\nthree\n".to_vec(),
            b"one\r\ntwo\r\n\r\nlast\r".to_vec(),
            b"\n\n\nx".to_vec(),
            b"bad \xff\xfe utf-8\n\xc3\n\xe2\x82".to_vec(),
            format!("short\n{long}\n{exact}\r\n{long}").into_bytes(),
        ];
        for bytes in &texts {
            let lines = String::from_utf8_lossy(bytes).lines().count() as u64;
            for capacity in [1, 2, 3, 7, 64, 8192] {
                for first in 1..=lines + 2 {
                    for limit in 1..=lines + 1 {
                        let shown = String::from_utf8_lossy(bytes);
                        assert_eq!(
                            streamed(bytes, first, limit, capacity),
                            whole(bytes, first, limit),
                            "{shown:.40?} from {first}, {limit} lines, buffers of {capacity}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_huge_line_costs_a_few_kib_and_the_rest_is_counted_within_a_budget() {
        let huge = vec![b'x'; 3 * COUNT_BUDGET as usize];
        let page = page(io::BufReader::new(&huge[..]), 1, 1, Start::FileStart, &|| false).unwrap();
        assert_eq!(page.total, Total::GoesOn, "one line of 48 MiB: the last line wanted is not read to its end");
        assert!(page.text.ends_with(" [line cut]\n") && page.text.len() < 3 * MAX_LINE_CHARS, "{}", page.text.len());
        let whole = super::page(io::BufReader::new(&huge[..]), 1, 5, Start::FileStart, &|| false).unwrap();
        assert_eq!((whole.text, whole.total), (page.text, Total::Known(1)), "more lines wanted: it is read through");
        let mut many = b"a\n".repeat(COUNT_BUDGET as usize);
        many.extend_from_slice(b"end");
        let page = super::page(io::BufReader::new(&many[..]), 2, 2, Start::FileStart, &|| false).unwrap();
        assert_eq!((page.text.as_str(), page.total), ("     2\ta\n     3\ta\n", Total::GoesOn));
        let page = super::page(io::BufReader::new(&many[..]), COUNT_BUDGET - 1, 5, Start::FileStart, &|| false);
        let page = page.unwrap();
        assert_eq!(page.total, Total::Known(COUNT_BUDGET + 1), "near the end the total is known again");
        assert_eq!(page.last, COUNT_BUDGET + 1);
    }

    #[test]
    fn pages_stop_at_the_byte_cap_and_when_told_to() {
        let line = format!("{}\n", "y".repeat(1000));
        let text = line.repeat(500);
        let page = page(text.as_bytes(), 1, 500, Start::FileStart, &|| false).unwrap();
        assert!(page.text.len() <= MAX_PAGE_BYTES && page.last == 203, "{}", page.last);
        assert_eq!(page.total, Total::Known(500));
        let stopped = super::page(text.as_bytes(), 1, 5, Start::FileStart, &|| true);
        assert!(matches!(stopped, Err(PageError::Cancelled)));
    }

    #[test]
    fn a_slice_from_the_editor_is_numbered_from_its_first_line() {
        let page = page(&b"ten\neleven\n"[..], 10, 5, Start::AtFirst, &|| false).unwrap();
        assert_eq!(page.text, "    10\tten\n    11\televen\n");
        assert_eq!((page.last, page.total), (11, Total::Known(11)));
        assert!(matches!(super::page(&b""[..], 10, 5, Start::AtFirst, &|| false), Err(PageError::PastEnd(9))));
    }

    #[test]
    fn sizes_read_like_a_person_wrote_them() {
        assert_eq!(human_size(812), "812 bytes");
        assert_eq!(human_size(14_540), "14.2 KiB");
        assert_eq!(human_size(3 << 30), "3.0 GiB");
    }
}
