//! Compound commands and here-documents: reserved words (`if`, `for`, `case`, `function`, …),
//! `[[ … ]]`, `(( … ))`, array values, and the bodies of `<<` documents, whose substitutions
//! run when the delimiter is unquoted.

use super::quoting::WordBuilder;
use super::{
    End, Ended, KEYWORDS_CLOSING, KEYWORDS_COMPOUND, Next, ParseError, Parser, Script, is_blank_or_end, is_word_end,
};

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
                    self.pos += 2;
                }
                Ok(Some(Next::More))
            }
            "for" | "select" => {
                self.script.compound = true;
                self.skip_blanks();
                if self.starts_with("((") {
                    self.pos += 2;
                    self.arithmetic()?;
                    return Ok(Some(Next::More));
                }
                // The loop's variable and words are data, up to the separator before `do`.
                while !matches!(self.peek(), None | Some('\n' | ';' | '&' | '|' | ')')) {
                    self.word()?;
                    self.skip_blanks();
                    self.skip_comment();
                }
                Ok(Some(Next::More))
            }
            "function" => {
                self.script.compound = true;
                self.skip_blanks();
                self.word()?;
                self.skip_blanks();
                if self.starts_with("()") {
                    self.pos += 2;
                }
                Ok(Some(Next::More))
            }
            "[[" => {
                self.script.compound = true;
                self.test()?;
                Ok(Some(Next::More))
            }
            "case" => {
                self.script.compound = true;
                self.case()?;
                Ok(Some(Next::More))
            }
            _ => Ok(None),
        }
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
                self.pos += 1;
            }
            // Patterns separated by `|`, up to `)`.
            loop {
                self.skip_blanks();
                match self.peek() {
                    Some(')') => {
                        self.pos += 1;
                        break;
                    }
                    Some('|') => self.pos += 1,
                    None => return Err(self.error("a `case` pattern is never closed with `)`")),
                    Some(_) => {
                        self.word()?;
                    }
                }
            }
            self.depth += 1;
            let ended = self.list(End::CaseItem);
            self.depth -= 1;
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
                self.pos += 1;
            } else {
                return;
            }
        }
    }

    /// `[[ … ]]`, after `[[`: words and operators up to `]]`.
    fn test(&mut self) -> Result<(), ParseError> {
        loop {
            self.skip_blanks();
            match self.peek() {
                None => return Err(self.error("a `[[` is never closed with `]]`")),
                Some(']') if self.peek_at(1) == Some(']') && self.peek_at(2).is_none_or(is_word_end) => {
                    self.pos += 2;
                    return Ok(());
                }
                Some('<' | '>' | '(' | ')' | '&' | '|' | '!' | '\n') => self.pos += 1,
                Some(';') => return Err(self.error("unexpected `;` inside `[[ … ]]`")),
                Some(_) => {
                    self.word()?;
                }
            }
        }
    }

    /// `(( … ))` or `$(( … ))`, after the opening `((`: up to the matching `))`.
    pub(super) fn arithmetic(&mut self) -> Result<(), ParseError> {
        let mut open = 0usize;
        loop {
            match self.peek() {
                None => return Err(self.error("a `((` is never closed with `))`")),
                Some('(') => {
                    open += 1;
                    self.pos += 1;
                }
                Some(')') if open == 0 => {
                    if self.peek_at(1) != Some(')') {
                        return Err(self.error("a `((` is closed by a single `)`"));
                    }
                    self.pos += 2;
                    return Ok(());
                }
                Some(')') => {
                    open -= 1;
                    self.pos += 1;
                }
                Some('$' | '`' | '\'' | '"' | '\\') => {
                    let mut sink = WordBuilder::default();
                    self.expansion_or_quote(&mut sink)?;
                }
                Some(_) => self.pos += 1,
            }
        }
    }

    /// `name=( … )`, after the `(`: array elements up to `)`.
    pub(super) fn array(&mut self) -> Result<(), ParseError> {
        loop {
            self.skip_space_and_newlines();
            match self.peek() {
                None => return Err(self.error("an array assignment is never closed with `)`")),
                Some(')') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(_) => {
                    self.word()?;
                }
            }
        }
    }

    /// The bodies of pending here-documents, after a newline.
    pub(super) fn heredoc_bodies(&mut self) -> Result<(), ParseError> {
        for heredoc in std::mem::take(&mut self.heredocs) {
            loop {
                if self.peek().is_none() {
                    // bash warns and ends the document at the end of input.
                    return Ok(());
                }
                let start = self.pos;
                while self.peek().is_some_and(|c| c != '\n') {
                    self.pos += 1;
                }
                let line: String = self.chars[start..self.pos].iter().collect();
                if self.peek() == Some('\n') {
                    self.pos += 1;
                }
                let line = if heredoc.strip_tabs { line.trim_start_matches('\t') } else { &line };
                if line == heredoc.delimiter {
                    break;
                }
                if heredoc.expands && (line.contains("$(") || line.contains('`')) {
                    // The body is expanded like a double-quoted string: its substitutions run.
                    let mut body = Parser {
                        chars: line.chars().collect(),
                        pos: 0,
                        depth: self.depth + 1,
                        script: Script::default(),
                        heredocs: Vec::new(),
                    };
                    body.double_quoted_text()?;
                    self.absorb(body.script);
                }
            }
        }
        Ok(())
    }

    /// Reads a here-document line as the inside of double quotes, for its substitutions.
    fn double_quoted_text(&mut self) -> Result<(), ParseError> {
        let mut sink = WordBuilder::default();
        while let Some(c) = self.peek() {
            match c {
                '\\' => self.pos += 2,
                '$' | '`' => self.expansion_or_quote(&mut sink)?,
                _ => self.pos += 1,
            }
        }
        Ok(())
    }
}
