//! Compound commands and here-documents: reserved words (`if`, `for`, `case`, `function`, …),
//! `[[ … ]]`, `(( … ))`, array values, and the bodies of `<<` documents, whose substitutions
//! run when the delimiter is unquoted.

use super::quoting::WordBuilder;
use super::{
    Command, End, Ended, KEYWORDS_CLOSING, KEYWORDS_COMPOUND, Next, ParseError, Parser, Script, Word, is_blank_or_end,
    is_word_end,
};

/// What may follow `coproc NAME`: bash takes a name only before a compound command.
const COMPOUND_STARTS: [&str; 8] = ["{", "[[", "if", "while", "until", "for", "select", "case"];

impl Parser {
    /// Handles a reserved word at a command's start; `None` if `word` is not one.
    pub(super) fn keyword(&mut self, word: &str, end: End) -> Result<Option<Next>, ParseError> {
        if KEYWORDS_COMPOUND.contains(&word) || KEYWORDS_CLOSING.contains(&word) {
            self.script.compound = true;
            if word == "esac" && end == End::CaseItem {
                return Ok(Some(Next::Esac));
            }
            return Ok(Some(Next::More));
        }
        match word {
            "time" => {
                self.script.compound = true;
                self.skip_blanks();
                if self.starts_with("-p") && self.peek_at(2).is_none_or(is_blank_or_end) {
                    self.bump(2);
                }
                Ok(Some(Next::More))
            }
            "for" | "select" => {
                self.script.compound = true;
                self.skip_blanks();
                if self.starts_with("((") {
                    self.bump(2);
                    self.arithmetic()?;
                    return Ok(Some(Next::More));
                }
                // The loop's variable (assigned each round: `for PATH in /tmp`) and its words,
                // which are data, up to the separator before `do`.
                let mut variable = true;
                while !matches!(self.peek(), None | Some('\n' | ';' | '&' | '|' | ')')) {
                    let word = self.word()?;
                    if std::mem::take(&mut variable) {
                        self.assigned(word);
                    }
                    self.skip_blanks();
                    self.skip_comment();
                }
                Ok(Some(Next::More))
            }
            "coproc" => {
                // `coproc [NAME] command`: a NAME (set to the coprocess's descriptors) only before
                // a compound command; otherwise the next word is the program.
                self.script.compound = true;
                self.skip_blanks();
                if !matches!(self.peek(), None | Some('(' | '{')) {
                    let saved = (self.pos, self.script.commands.len(), self.script.latent);
                    let name = self.word()?;
                    self.skip_blanks();
                    if !name.quoted && !COMPOUND_STARTS.contains(&name.text.as_str()) && self.compound_ahead()? {
                        self.assigned(name);
                    } else {
                        (self.pos, self.script.latent) = (saved.0, saved.2);
                        self.script.commands.truncate(saved.1);
                    }
                }
                Ok(Some(Next::More))
            }
            "function" => {
                self.script.compound = true;
                self.skip_blanks();
                self.word()?;
                self.skip_blanks();
                if self.starts_with("()") {
                    self.bump(2);
                }
                Ok(Some(Next::More))
            }
            "[[" => {
                self.script.compound = true;
                self.deeper(Self::test)?;
                Ok(Some(Next::More))
            }
            "case" => {
                self.script.compound = true;
                self.deeper(Self::case)?;
                Ok(Some(Next::More))
            }
            _ => Ok(None),
        }
    }

    /// Whether a compound command starts here (looked at, not read).
    fn compound_ahead(&mut self) -> Result<bool, ParseError> {
        if self.peek() == Some('(') {
            return Ok(true);
        }
        if self.peek().is_none_or(super::is_meta) {
            return Ok(false);
        }
        let saved = (self.pos, self.script.commands.len(), self.script.latent);
        let word = self.word()?;
        (self.pos, self.script.latent) = (saved.0, saved.2);
        self.script.commands.truncate(saved.1);
        Ok(!word.quoted && COMPOUND_STARTS.contains(&word.text.as_str()))
    }

    /// A variable a keyword assigns (`for NAME`, `coproc NAME`), kept as an assignment so what
    /// it changes is seen.
    fn assigned(&mut self, name: Word) {
        let text = format!("{}=", name.text);
        let assignment = Word { text, kind: name.kind, quoted: false };
        self.script.commands.push(Command {
            assignments: vec![assignment],
            nested: self.depth > 0,
            ..Command::default()
        });
    }

    /// `case WORD in (pattern) list ;; … esac`, after `case`.
    fn case(&mut self) -> Result<(), ParseError> {
        self.skip_blanks();
        self.word()?;
        self.skip_space_and_newlines();
        let word_in = self.word()?;
        if word_in.text != "in" || word_in.quoted {
            return Err(self.error("expected `in` after `case WORD`"));
        }
        loop {
            self.skip_space_and_newlines();
            if self.peek().is_none() {
                return Err(self.error("a `case` is never closed with `esac`"));
            }
            let start = self.pos;
            if self.peek() != Some('(') {
                let word = self.word()?;
                if word.text == "esac" && !word.quoted {
                    return Ok(());
                }
                self.pos = start;
            } else {
                self.bump(1);
            }
            // Patterns separated by `|`, up to `)`.
            loop {
                self.skip_blanks();
                match self.peek() {
                    Some(')') => {
                        self.bump(1);
                        break;
                    }
                    Some('|') => self.bump(1),
                    None => return Err(self.error("a `case` pattern is never closed with `)`")),
                    Some(_) => {
                        self.word()?;
                    }
                }
            }
            let ended = self.list(End::CaseItem);
            match ended? {
                Ended::Esac => return Ok(()),
                Ended::Item => {}
                Ended::Eof | Ended::Paren => return Err(self.error("a `case` is never closed with `esac`")),
            }
        }
    }

    fn skip_space_and_newlines(&mut self) {
        loop {
            self.skip_blanks();
            self.skip_comment();
            if self.peek() == Some('\n') {
                self.bump(1);
            } else {
                return;
            }
        }
    }

    /// `[[ … ]]`, after `[[`: words and operators up to `]]`. Its arithmetic comparisons
    /// evaluate what variables hold, so the line is marked latent.
    fn test(&mut self) -> Result<(), ParseError> {
        self.script.latent = true;
        loop {
            self.skip_blanks();
            match self.peek() {
                None => return Err(self.error("a `[[` is never closed with `]]`")),
                Some(']') if self.peek_at(1) == Some(']') && self.peek_at(2).is_none_or(is_word_end) => {
                    self.bump(2);
                    return Ok(());
                }
                Some('<' | '>' | '(' | ')' | '&' | '|' | '!' | '\n') => self.bump(1),
                Some(';') => return Err(self.error("unexpected `;` inside `[[ … ]]`")),
                Some(_) => {
                    self.word()?;
                }
            }
        }
    }

    /// `(( … ))` or `$(( … ))`, after the opening `((`: up to the matching `))`. Arithmetic
    /// evaluates what variables hold (array subscripts included), so the line is marked latent.
    pub(super) fn arithmetic(&mut self) -> Result<(), ParseError> {
        self.deeper(Self::arithmetic_body)
    }

    fn arithmetic_body(&mut self) -> Result<(), ParseError> {
        self.script.latent = true;
        let mut open = 0usize;
        loop {
            match self.peek() {
                None => return Err(self.error("a `((` is never closed with `))`")),
                Some('(') => {
                    open += 1;
                    self.bump(1);
                }
                Some(')') if open == 0 => {
                    if self.peek_at(1) != Some(')') {
                        return Err(self.error("a `((` is closed by a single `)`"));
                    }
                    self.bump(2);
                    return Ok(());
                }
                Some(')') => {
                    open -= 1;
                    self.bump(1);
                }
                Some('$' | '`' | '"' | '\\') => self.expansion_or_literal_quote()?,
                Some(_) => self.bump(1),
            }
        }
    }

    /// `name=( … )`, after the `(`: array elements up to `)`.
    pub(super) fn array(&mut self) -> Result<(), ParseError> {
        self.deeper(Self::array_body)
    }

    fn array_body(&mut self) -> Result<(), ParseError> {
        loop {
            self.skip_space_and_newlines();
            match self.peek() {
                None => return Err(self.error("an array assignment is never closed with `)`")),
                Some(')') => {
                    self.bump(1);
                    return Ok(());
                }
                Some(_) => {
                    self.word()?;
                }
            }
        }
    }

    /// The bodies of pending here-documents, after a newline. With an unquoted delimiter, a
    /// line ending in a backslash continues on the next (before the delimiter is looked for,
    /// as bash does), and the body is expanded like a double-quoted string: its substitutions
    /// run. With a quoted delimiter, the body is read as written.
    pub(super) fn heredoc_bodies(&mut self) -> Result<(), ParseError> {
        for heredoc in std::mem::take(&mut self.heredocs) {
            let mut body = String::new();
            // bash warns and ends a document at the end of the input.
            while self.raw().is_some() {
                let mut line = String::new();
                loop {
                    while let Some(c) = self.raw().filter(|c| *c != '\n') {
                        line.push(c);
                        self.pos += 1;
                    }
                    let ended = self.raw() == Some('\n');
                    if ended {
                        self.pos += 1;
                    }
                    let backslashes = line.chars().rev().take_while(|c| *c == '\\').count();
                    if heredoc.expands && ended && backslashes % 2 == 1 {
                        line.pop();
                        continue;
                    }
                    break;
                }
                let shown = if heredoc.strip_tabs { line.trim_start_matches('\t') } else { &line };
                if shown == heredoc.delimiter {
                    break;
                }
                body.push_str(shown);
                body.push('\n');
            }
            if heredoc.expands && (body.contains('$') || body.contains('`')) {
                let mut parser = Parser {
                    chars: body.chars().collect(),
                    pos: 0,
                    depth: self.depth,
                    script: Script::default(),
                    heredocs: Vec::new(),
                };
                parser.deeper(Self::double_quoted_text)?;
                self.absorb(parser.script);
            }
        }
        Ok(())
    }

    /// Reads a here-document body as the inside of double quotes, for its substitutions.
    fn double_quoted_text(&mut self) -> Result<(), ParseError> {
        let mut sink = WordBuilder::default();
        while let Some(c) = self.peek() {
            match c {
                '\\' => self.bump(2),
                // `$'` and `$"` mean nothing special here: what follows is still expanded.
                '$' if matches!(self.peek_at(1), Some('\'' | '"')) => self.bump(1),
                '$' | '`' => self.expansion_or_quote(&mut sink)?,
                _ => self.bump(1),
            }
        }
        Ok(())
    }
}
