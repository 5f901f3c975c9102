//! A page's nesting, bounded before it is parsed: [`flatten`] drops the tags of elements nested
//! deeper than [`MAX_DEPTH`] (their text stays), so that no page can make the conversion slow.
//!
//! The HTML parser checks scopes by walking its stack of open elements, once or more per tag: a
//! page of 2 MiB of `<div>` (400,000 levels) would take it hours, and a few hundred KiB, tens of
//! seconds (measured: 50,000 levels, 12 s). Walking the page once here, keeping a stack of the
//! elements as the parser would open them, costs a bounded amount per tag.
//!
//! The stack here must never be much shallower than the parser's, or a page could slip deep
//! nesting past it; being deeper only costs a sloppy page some markup past the bound. So it
//! follows the parser's tokenizer exactly (tags, attributes with their quotes, comments, raw
//! text) and its tree building only where that closes elements for certain: an end tag closes
//! what it names when only elements with implied ends stand above it (and a formatting or
//! ordinary element only when it is the current one), `<p>` is closed by the blocks that close
//! it, `<li>`, `<dd>`, `<option>` and table cells by their own kind. Whatever it is unsure of,
//! it keeps open. Raw text (`<script>`, `<style>`, `<textarea>`…) is skipped only where the
//! parser reads it as such: not inside SVG or MathML, not inside a `<select>`.

use std::borrow::Cow;
use std::ops::Range;

/// The deepest nesting kept.
pub const MAX_DEPTH: usize = 256;
/// How far down the stack an end tag looks for what it names, past elements with implied ends.
const LOOK: usize = 64;

/// A page with its deep markup dropped.
pub struct Flattened<'a> {
    pub html: Cow<'a, str>,
    /// How many tags were dropped.
    pub dropped: usize,
}

/// `html` with every tag of an element deeper than `max` (and its end tag) left out.
pub fn flatten(html: &str, max: usize) -> Flattened<'_> {
    let mut walk = Walk { html, stack: Vec::new(), kept: 0, selects: 0, drop: Vec::new(), max };
    walk.run();
    let dropped = walk.drop.len();
    if dropped == 0 {
        return Flattened { html: Cow::Borrowed(html), dropped };
    }
    let mut out = String::with_capacity(html.len());
    let mut at = 0;
    for range in &walk.drop {
        out.push_str(&html[at..range.start]);
        at = range.end;
    }
    out.push_str(&html[at..]);
    Flattened { html: Cow::Owned(out), dropped }
}

/// An element the parser would have open.
struct Open<'a> {
    name: &'a str,
    /// Its tags are passed on to the parser.
    kept: bool,
    /// An SVG or MathML element.
    foreign: bool,
}

struct Walk<'a> {
    html: &'a str,
    stack: Vec<Open<'a>>,
    /// How many elements of the stack are kept.
    kept: usize,
    /// How many `<select>` elements are open.
    selects: usize,
    drop: Vec<Range<usize>>,
    max: usize,
}

/// Elements that never have content.
const VOID: &[&str] = &[
    "area", "base", "basefont", "bgsound", "br", "col", "embed", "frame", "hr", "image", "img", "input", "keygen",
    "link", "meta", "param", "source", "track", "wbr",
];
/// Elements whose content is text up to their end tag.
const RAW: &[&str] = &["script", "style", "textarea", "title", "xmp", "iframe", "noembed", "noframes", "noscript"];
/// Elements whose end the parser implies; an end tag closes them on its way down.
const IMPLIED: &[&str] = &[
    "dd", "dt", "li", "optgroup", "option", "p", "rb", "rp", "rt", "rtc", "caption", "colgroup", "tbody", "td",
    "tfoot", "th", "thead", "tr",
];
/// The implied ones that do not bound a scope: what closing a `<p>` passes.
const IMPLIED_IN_SCOPE: &[&str] = &["dd", "dt", "li", "optgroup", "option", "p", "rb", "rp", "rt", "rtc"];
/// Elements the parser closes by scope when their end tag comes (not formatting, not ordinary).
const SPECIAL: &[&str] = &[
    "address",
    "applet",
    "article",
    "aside",
    "blockquote",
    "button",
    "caption",
    "center",
    "colgroup",
    "dd",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "li",
    "listing",
    "main",
    "marquee",
    "menu",
    "nav",
    "object",
    "ol",
    "p",
    "pre",
    "search",
    "section",
    "select",
    "summary",
    "table",
    "tbody",
    "td",
    "template",
    "tfoot",
    "th",
    "thead",
    "tr",
    "ul",
];
/// Start tags that close an open `<p>`.
const CLOSES_P: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "center",
    "details",
    "dialog",
    "dir",
    "div",
    "dl",
    "dd",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "li",
    "listing",
    "main",
    "menu",
    "nav",
    "ol",
    "p",
    "pre",
    "search",
    "section",
    "summary",
    "table",
    "ul",
    "xmp",
];
/// HTML start tags that end foreign content.
const BREAKOUT: &[&str] = &[
    "b",
    "big",
    "blockquote",
    "body",
    "br",
    "center",
    "code",
    "dd",
    "div",
    "dl",
    "dt",
    "em",
    "embed",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "head",
    "hr",
    "i",
    "img",
    "li",
    "listing",
    "menu",
    "meta",
    "nobr",
    "ol",
    "p",
    "pre",
    "ruby",
    "s",
    "small",
    "span",
    "strong",
    "strike",
    "sub",
    "sup",
    "table",
    "tt",
    "u",
    "ul",
    "var",
    "font",
];
/// Foreign elements whose content is HTML.
const INTEGRATION: &[&str] = &["foreignobject", "desc", "title", "mi", "mo", "mn", "ms", "mtext", "annotation-xml"];
/// Elements the parser opens once, whatever the page repeats.
const DOCUMENT: &[&str] = &["html", "head", "body"];

fn is(name: &str, list: &[&str]) -> bool {
    list.iter().any(|entry| entry.eq_ignore_ascii_case(name))
}

impl<'a> Walk<'a> {
    fn run(&mut self) {
        let bytes = self.html.as_bytes();
        let mut at = 0;
        while let Some(found) = memchr::memchr(b'<', &bytes[at..]) {
            let start = at + found;
            let next = bytes.get(start + 1).copied();
            at = match next {
                Some(b'!') if bytes[start..].starts_with(b"<!--") => match comment_end(bytes, start + 4) {
                    Some(end) => end,
                    None => return,
                },
                Some(b'!' | b'?') => match memchr::memchr(b'>', &bytes[start..]) {
                    Some(end) => start + end + 1,
                    None => return,
                },
                Some(b'/') => match bytes.get(start + 2) {
                    Some(c) if c.is_ascii_alphabetic() => match tag(bytes, start + 2) {
                        Some((name, end, _)) => {
                            self.end_tag(&self.html[name], start..end);
                            end
                        }
                        None => return,
                    },
                    Some(b'>') => start + 3,
                    Some(_) => match memchr::memchr(b'>', &bytes[start..]) {
                        Some(end) => start + end + 1,
                        None => return,
                    },
                    None => return,
                },
                Some(c) if c.is_ascii_alphabetic() => match tag(bytes, start + 1) {
                    Some((name, end, self_closing)) => {
                        match self.start_tag(&self.html[name.clone()], start..end, self_closing) {
                            Some(Text::Raw) => match raw_end(bytes, end, &self.html[name]) {
                                Some(end) => end,
                                None => return,
                            },
                            Some(Text::Plain) => return,
                            None => end,
                        }
                    }
                    None => return,
                },
                _ => start + 1,
            };
        }
    }

    /// Opens an element; says whether raw text follows.
    fn start_tag(&mut self, name: &'a str, range: Range<usize>, self_closing: bool) -> Option<Text> {
        if is(name, DOCUMENT) || is(name, VOID) {
            return None;
        }
        let foreign_child =
            self.stack.last().is_some_and(|top| top.foreign && !is(top.name, INTEGRATION)) && !is(name, BREAKOUT);
        if foreign_child && self_closing {
            return None;
        }
        let foreign = foreign_child || name.eq_ignore_ascii_case("svg") || name.eq_ignore_ascii_case("math");
        if !foreign {
            if is(name, CLOSES_P) {
                self.close_through(IMPLIED_IN_SCOPE, "p");
            }
            self.close_family(name);
        }
        let raw = !foreign && self.selects == 0 && is(name, RAW);
        let plaintext = !foreign && self.selects == 0 && name.eq_ignore_ascii_case("plaintext");
        // Raw text holds no element, so its element is kept whatever the depth: the parser
        // must read its text as text, as this walk does.
        let kept = self.kept < self.max || raw || plaintext;
        if !kept {
            self.drop.push(range);
        }
        self.push(Open { name, kept, foreign });
        if plaintext {
            Some(Text::Plain)
        } else if raw {
            Some(Text::Raw)
        } else {
            None
        }
    }

    fn end_tag(&mut self, name: &'a str, range: Range<usize>) {
        if is(name, DOCUMENT) || name.eq_ignore_ascii_case("br") {
            return;
        }
        let closed = if is(name, SPECIAL) {
            self.close_through(IMPLIED, name)
        } else {
            match self.stack.last() {
                Some(top) if top.name.eq_ignore_ascii_case(name) => self.pop(),
                Some(_) | None => None,
            }
        };
        if closed == Some(false) {
            self.drop.push(range);
        }
    }

    /// Closes the nearest `name` when only elements of `passing` stand above it (at most
    /// [`LOOK`] of them); returns whether its tags were kept, `None` when nothing was closed.
    fn close_through(&mut self, passing: &[&str], name: &str) -> Option<bool> {
        let depth = self
            .stack
            .iter()
            .rev()
            .take(LOOK)
            .position(|open| open.name.eq_ignore_ascii_case(name) || !is(open.name, passing))
            .filter(|&at| self.stack[self.stack.len() - 1 - at].name.eq_ignore_ascii_case(name))?;
        for _ in 0..depth {
            self.pop();
        }
        self.pop()
    }

    /// What the parser closes for certain when `name` opens right after one of its kind.
    fn close_family(&mut self, name: &str) {
        let families: &[&[&str]] = match name.to_ascii_lowercase().as_str() {
            "li" => &[&["li"]],
            "dd" | "dt" => &[&["dd", "dt"]],
            "option" | "optgroup" => &[&["option"]],
            "td" | "th" => &[&["td", "th"]],
            "tr" => &[&["td", "th"], &["tr"]],
            "tbody" | "thead" | "tfoot" => &[&["td", "th"], &["tr"], &["tbody", "thead", "tfoot"]],
            _ => &[],
        };
        for family in families {
            if self.stack.last().is_some_and(|top| is(top.name, family)) {
                self.pop();
            }
        }
    }

    fn push(&mut self, open: Open<'a>) {
        self.kept += usize::from(open.kept);
        self.selects += usize::from(open.name.eq_ignore_ascii_case("select"));
        self.stack.push(open);
    }

    /// Closes the current element; whether its tags were kept.
    fn pop(&mut self) -> Option<bool> {
        let open = self.stack.pop()?;
        self.kept -= usize::from(open.kept);
        self.selects -= usize::from(open.name.eq_ignore_ascii_case("select"));
        Some(open.kept)
    }
}

/// What follows a start tag.
enum Text {
    /// Text up to the element's end tag.
    Raw,
    /// Text to the end of the page.
    Plain,
}

/// A tag whose name starts at `at`: the name's range, where the tag ends (after its `>`), and
/// whether it closes itself (`/>`); `None` when the page ends inside it, where the parser drops
/// it. Attributes are read as the tokenizer reads them: a value is quoted only right after `=`.
fn tag(bytes: &[u8], at: usize) -> Option<(Range<usize>, usize, bool)> {
    #[derive(Clone, Copy)]
    enum In {
        BeforeName,
        Name,
        AfterName,
        BeforeValue,
        Quoted(u8),
        Unquoted,
        Slash,
    }
    let space = |b: u8| matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ');
    let name_end = at + bytes[at..].iter().position(|&b| space(b) || b == b'/' || b == b'>')?;
    let mut state = In::BeforeName;
    for (i, &b) in bytes.iter().enumerate().skip(name_end) {
        state = match (state, b) {
            (In::Quoted(quote), b) if b == quote => In::BeforeName,
            (In::Quoted(quote), _) => In::Quoted(quote),
            (In::Unquoted, b) if space(b) => In::BeforeName,
            (In::Slash, b'>') => return Some((at..name_end, i + 1, true)),
            (_, b'>') => return Some((at..name_end, i + 1, false)),
            (In::Unquoted, _) => In::Unquoted,
            (In::BeforeValue, b'"' | b'\'') => In::Quoted(b),
            (In::BeforeValue, b) if space(b) => In::BeforeValue,
            (In::BeforeValue, _) => In::Unquoted,
            (In::Name | In::AfterName, b'=') => In::BeforeValue,
            (In::Name | In::AfterName, b) if space(b) => In::AfterName,
            (In::BeforeName | In::Slash, b) if space(b) => In::BeforeName,
            (In::BeforeName | In::Name | In::AfterName | In::Slash, b'/') => In::Slash,
            (In::BeforeName | In::Name | In::AfterName | In::Slash, _) => In::Name,
        };
    }
    None
}

/// Where a comment opened before `at` ends: at the first `-->` or `--!>`, or at once for
/// `<!-->` and `<!--->`, as the tokenizer ends it; `None` when the page ends first.
fn comment_end(bytes: &[u8], at: usize) -> Option<usize> {
    if bytes[at..].starts_with(b">") {
        return Some(at + 1);
    }
    if bytes[at..].starts_with(b"->") {
        return Some(at + 2);
    }
    let mut i = at;
    while let Some(found) = memchr::memchr(b'-', &bytes[i..]) {
        let dash = i + found;
        if bytes[dash..].starts_with(b"-->") {
            return Some(dash + 3);
        }
        if bytes[dash..].starts_with(b"--!>") {
            return Some(dash + 4);
        }
        i = dash + 1;
    }
    None
}

/// Where the raw text of `name`, starting at `at`, ends: at the first `</name`, whatever
/// follows it (the tokenizer ends it there or later: this walk never reads markup as text).
fn raw_end(bytes: &[u8], at: usize, name: &str) -> Option<usize> {
    let mut i = at;
    while let Some(found) = memchr::memmem::find(&bytes[i..], b"</") {
        let start = i + found;
        let named =
            bytes.get(start + 2..start + 2 + name.len()).is_some_and(|b| b.eq_ignore_ascii_case(name.as_bytes()));
        if named {
            return Some(start);
        }
        i = start + 2;
    }
    None
}

#[cfg(test)]
#[path = "depth_tests.rs"]
mod tests;
