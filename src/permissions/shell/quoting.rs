//! Words: one word up to an unquoted metacharacter, with its quotes and expansions: `'…'`,
//! `"…"`, `$'…'` (ANSI-C, decoded, so `$'\x72m'` reads as `rm`, and a NUL ends it as in bash:
//! `$'rm\0x'` is `rm` too), `$VAR`, `${…}`, `$(…)`, `$((…))`, backquotes, globs and brace
//! expansions. Substitutions are read as nested command lines, so the commands they run are
//! seen too.

use super::{End, LOOKAHEAD, ParseError, Parser, Word, WordKind, is_meta};

/// A word as it is read: its literal text, its glob pattern and what the shell will still do.
#[derive(Default)]
pub(super) struct WordBuilder {
    text: String,
    /// The text as a glob pattern: quoted metacharacters escaped.
    pattern: String,
    pub quoted: bool,
    pub dynamic: bool,
    pub glob: bool,
}

impl WordBuilder {
    pub fn push(&mut self, c: char) {
        self.text.push(c);
        self.pattern.push(c);
    }

    /// A character that came from inside quotes (or after a backslash): never special.
    pub fn push_quoted(&mut self, c: char) {
        self.text.push(c);
        if matches!(c, '*' | '?' | '[' | ']' | '{' | '}' | '\\') {
            self.pattern.push('\\');
        }
        self.pattern.push(c);
    }

    /// Quoted text that reads like code (`'$(rm x)'`, a backquote): a builtin that evaluates
    /// strings (`printf -v`, `declare`, arithmetic) may run it.
    pub fn latent(&self) -> bool {
        self.quoted && (self.text.contains("$(") || self.text.contains('`'))
    }

    pub fn build(self) -> Word {
        let kind = if self.dynamic {
            WordKind::Dynamic
        } else if self.glob {
            WordKind::Glob(self.pattern)
        } else {
            WordKind::Literal
        };
        Word { text: self.text, kind, quoted: self.quoted }
    }
}

impl Parser {
    /// One word, up to an unquoted metacharacter.
    pub(super) fn word(&mut self) -> Result<Word, ParseError> {
        let mut word = WordBuilder::default();
        self.pos = self.join(self.pos);
        let start = self.pos;
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | ')' => break,
                // An array value, a function definition, or a syntax error: the command decides.
                '(' => break,
                '<' | '>' if self.peek_at(1) == Some('(') => {
                    self.bump(2);
                    self.nested(End::Paren)?;
                    word.dynamic = true;
                }
                '<' | '>' => break,
                '#' if self.pos == start => break,
                '\\' => {
                    word.quoted = true;
                    if let Some(next) = self.peek_at(1) {
                        word.push_quoted(next);
                    }
                    self.bump(2);
                }
                '\'' | '"' | '$' | '`' => self.expansion_or_quote(&mut word)?,
                '~' if self.pos == start => {
                    word.dynamic = true;
                    word.push(c);
                    self.bump(1);
                }
                '*' | '?' => {
                    word.glob = true;
                    word.push(c);
                    self.bump(1);
                }
                '[' => {
                    match self.closes_ahead(']') {
                        Some(true) => word.glob = true,
                        Some(false) => {}
                        // Too far to look: a pattern this reading does not follow.
                        None => word.dynamic = true,
                    }
                    word.push(c);
                    self.bump(1);
                }
                '{' => {
                    if !word.dynamic && self.brace_expansion_ahead() {
                        word.dynamic = true;
                    }
                    word.push(c);
                    self.bump(1);
                }
                _ => {
                    word.push(c);
                    self.bump(1);
                }
            }
        }
        if self.pos == start {
            return Err(self.error("unexpected character"));
        }
        if word.latent() {
            self.script.latent = true;
        }
        Ok(word.build())
    }

    /// Whether `close` comes before the end of the word; `None` past [`LOOKAHEAD`] characters.
    fn closes_ahead(&self, close: char) -> Option<bool> {
        let mut i = self.join(self.pos);
        for _ in 0..LOOKAHEAD {
            i = self.join(i + 1);
            match self.chars.get(i) {
                None => return Some(false),
                Some(c) if is_meta(*c) => return Some(false),
                Some(c) if *c == close => return Some(true),
                Some(_) => {}
            }
        }
        None
    }

    /// Whether an unquoted `{` here opens a brace expansion (`{a,b}`, `{'/x',y}`, `{1..3}`):
    /// quotes inside the braces do not stop one. Past [`LOOKAHEAD`] characters, assume it does.
    fn brace_expansion_ahead(&self) -> bool {
        let mut depth = 0usize;
        let mut range = false;
        let mut previous = '{';
        let mut quote: Option<char> = None;
        let mut i = self.join(self.pos);
        for _ in 0..LOOKAHEAD {
            let Some(c) = self.chars.get(i).copied() else { return false };
            i = self.join(i + 1);
            if let Some(open) = quote {
                if c == open {
                    quote = None;
                } else if c == '\\' && open == '"' {
                    i = self.join(i + 1);
                }
                continue;
            }
            match c {
                '\'' | '"' => quote = Some(c),
                '\\' => i = self.join(i + 1),
                '{' => depth += 1,
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        return range;
                    }
                }
                ',' if depth == 1 => return true,
                '.' if depth == 1 && previous == '.' => range = true,
                c if is_meta(c) => return false,
                _ => {}
            }
            previous = c;
        }
        true
    }

    /// A quote or an expansion starting at the current character (`'`, `"`, `$` or a backquote).
    pub(super) fn expansion_or_quote(&mut self, word: &mut WordBuilder) -> Result<(), ParseError> {
        match self.peek() {
            Some('\'') => {
                word.quoted = true;
                self.bump(1);
                // Inside single quotes nothing is special, a line continuation neither.
                loop {
                    match self.raw() {
                        None => return Err(self.error("a single quote is never closed")),
                        Some('\'') => {
                            self.pos += 1;
                            return Ok(());
                        }
                        Some(c) => {
                            word.push_quoted(c);
                            self.pos += 1;
                        }
                    }
                }
            }
            Some('"') => {
                self.bump(1);
                self.double_quoted(word)
            }
            Some('`') => {
                self.backquoted()?;
                word.dynamic = true;
                Ok(())
            }
            Some('$') => self.dollar(word),
            Some('\\') => {
                word.quoted = true;
                if let Some(next) = self.peek_at(1) {
                    word.push_quoted(next);
                }
                self.bump(2);
                Ok(())
            }
            _ => {
                self.bump(1);
                Ok(())
            }
        }
    }

    /// The inside of `"…"`, after the opening quote.
    fn double_quoted(&mut self, word: &mut WordBuilder) -> Result<(), ParseError> {
        word.quoted = true;
        loop {
            match self.peek() {
                None => return Err(self.error("a double quote is never closed")),
                Some('"') => {
                    self.bump(1);
                    return Ok(());
                }
                Some('\\') => {
                    match self.peek_at(1) {
                        Some('\n') => {}
                        Some(next @ ('$' | '`' | '"' | '\\')) => word.push_quoted(next),
                        Some(next) => {
                            word.push_quoted('\\');
                            word.push_quoted(next);
                        }
                        None => return Err(self.error("a double quote is never closed")),
                    }
                    self.bump(2);
                }
                Some('$') if matches!(self.peek_at(1), Some('\'' | '"')) => {
                    // `$'` and `$"` are not special inside double quotes.
                    word.push_quoted('$');
                    self.bump(1);
                }
                Some('$' | '`') => {
                    let mut inner = WordBuilder::default();
                    self.expansion_or_quote(&mut inner)?;
                    if inner.dynamic {
                        word.dynamic = true;
                    }
                    for c in inner.text.chars() {
                        word.push_quoted(c);
                    }
                }
                Some(c) => {
                    word.push_quoted(c);
                    self.bump(1);
                }
            }
        }
    }

    /// `$…` at the current character.
    fn dollar(&mut self, word: &mut WordBuilder) -> Result<(), ParseError> {
        match self.peek_at(1) {
            Some('\'') => {
                self.bump(2);
                self.ansi_c(word)
            }
            Some('"') => {
                self.bump(1);
                self.expansion_or_quote(word)
            }
            Some('(') if self.peek_at(2) == Some('(') => {
                self.bump(3);
                self.arithmetic()?;
                word.dynamic = true;
                Ok(())
            }
            Some('(') => {
                self.bump(2);
                self.nested(End::Paren)?;
                word.dynamic = true;
                Ok(())
            }
            Some('{') => {
                self.bump(2);
                self.parameter()?;
                word.dynamic = true;
                Ok(())
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                self.bump(1);
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
                    self.bump(1);
                }
                word.dynamic = true;
                Ok(())
            }
            Some(c) if c.is_ascii_digit() || matches!(c, '@' | '*' | '#' | '?' | '$' | '!' | '-') => {
                self.bump(2);
                word.dynamic = true;
                Ok(())
            }
            _ => {
                word.push('$');
                self.bump(1);
                Ok(())
            }
        }
    }

    /// `${…}`, after `${`: up to the matching `}`, reading nested quotes and substitutions.
    /// Indirection (`${!x}`) and prompt expansion (`${x@P}`) may run what a variable holds.
    fn parameter(&mut self) -> Result<(), ParseError> {
        self.deeper(Self::parameter_body)
    }

    fn parameter_body(&mut self) -> Result<(), ParseError> {
        if self.peek() == Some('!') {
            self.script.latent = true;
        }
        let mut open = 0usize;
        loop {
            if self.peek() == Some('@') && self.peek_at(1) == Some('P') {
                self.script.latent = true;
            }
            match self.peek() {
                None => return Err(self.error("a `${` is never closed")),
                Some('}') if open == 0 => {
                    self.bump(1);
                    return Ok(());
                }
                Some('}') => {
                    open -= 1;
                    self.bump(1);
                }
                Some('{') => {
                    open += 1;
                    self.bump(1);
                }
                Some('"' | '$' | '`' | '\\') => self.expansion_or_literal_quote()?,
                Some(_) => self.bump(1),
            }
        }
    }

    /// Inside `${…}` and `$((…))`, an expansion, a double-quoted part or an escape. A single
    /// quote is read as an ordinary character (within double quotes it is one, and `$(…)`
    /// inside it still runs), and so is the `$` of `$'`: reading more substitutions than bash
    /// runs is safe, fewer is not.
    pub(super) fn expansion_or_literal_quote(&mut self) -> Result<(), ParseError> {
        if self.peek() == Some('$') && matches!(self.peek_at(1), Some('\'' | '"')) {
            self.bump(1);
            return Ok(());
        }
        let mut sink = WordBuilder::default();
        self.expansion_or_quote(&mut sink)
    }

    /// A backquoted command substitution: its text (with `\``, `\\` and `\$` unescaped) is read
    /// as a nested command line.
    fn backquoted(&mut self) -> Result<(), ParseError> {
        if self.depth >= super::MAX_NESTING {
            return Err(self.error("substitutions are nested too deeply to be checked"));
        }
        self.pos = self.join(self.pos);
        let start = self.pos;
        self.bump(1);
        let mut inner = String::new();
        loop {
            match self.peek() {
                None => {
                    self.pos = start;
                    return Err(self.error("a backquote is never closed"));
                }
                Some('`') => {
                    self.bump(1);
                    break;
                }
                Some('\\') if matches!(self.peek_at(1), Some('`' | '\\' | '$')) => {
                    inner.extend(self.peek_at(1));
                    self.bump(2);
                }
                Some(c) => {
                    inner.push(c);
                    self.bump(1);
                }
            }
        }
        let mut nested = Parser {
            chars: inner.chars().collect(),
            pos: 0,
            depth: self.depth + 1,
            script: Default::default(),
            heredocs: Vec::new(),
        };
        nested.list(End::Eof).map_err(|err| ParseError { why: err.why, at: start })?;
        self.absorb(nested.script);
        Ok(())
    }

    /// `$'…'`, after `$'`: backslash escapes decoded. An escape that yields a byte rather than
    /// a character (`\xff`, `\377`) makes the word unknown: a name that is not UTF-8 cannot be
    /// judged. A NUL (`\0`, `\x00`, `\u0000`) ends the quote's text, as in bash: `$'rm\0x'` is
    /// `rm`, and the word goes on after the closing quote.
    fn ansi_c(&mut self, word: &mut WordBuilder) -> Result<(), ParseError> {
        word.quoted = true;
        let mut ended = false;
        loop {
            match self.raw() {
                None => return Err(self.error("a `$'` quote is never closed")),
                Some('\'') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some('\\') => {
                    self.pos += 1;
                    match self.escape() {
                        Some(_) if ended => {}
                        Some('\0') => ended = true,
                        Some(c) => word.push_quoted(c),
                        // `\c…`, bytes past ASCII and the like: not worth guessing at.
                        None => word.dynamic = true,
                    }
                }
                Some(c) => {
                    if !ended {
                        word.push_quoted(c);
                    }
                    self.pos += 1;
                }
            }
        }
    }

    /// One escape of `$'…'`, after its backslash, read as written (no continuations).
    fn escape(&mut self) -> Option<char> {
        let c = self.raw()?;
        self.pos += 1;
        let simple = match c {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(c),
            _ => None,
        };
        if simple.is_some() {
            return simple;
        }
        let (radix, most, byte) = match c {
            'x' => (16, 2, true),
            'u' => (16, 4, false),
            'U' => (16, 8, false),
            '0'..='7' => {
                self.pos -= 1;
                (8, 3, true)
            }
            _ => return None,
        };
        let digits: String = self.chars[self.pos..].iter().take(most).take_while(|d| d.is_digit(radix)).collect();
        if digits.is_empty() {
            return None;
        }
        self.pos += digits.len();
        let value = u32::from_str_radix(&digits, radix).ok()?;
        // bash keeps the low byte of `\nnn` and `\xHH`: `\457` is `/`. Past ASCII it is a
        // raw byte, not a character.
        let value = if byte { value & 0xff } else { value };
        if byte && value >= 0x80 {
            return None;
        }
        char::from_u32(value)
    }
}
