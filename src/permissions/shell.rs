//! A conservative reading of a bash command line, for permission decisions: which simple
//! commands it runs (also inside `$(…)`, backquotes, `<(…)`, subshells, groups and control
//! structures), what each one's words are once quotes are removed, and which words the shell
//! would still expand at run time (`$VAR`, `~`, `{a,b}`, globs).
//!
//! It reads, it never runs anything. Where bash would reject the line (an unterminated quote, an
//! unbalanced parenthesis) the reading fails with a [`ParseError`] that says where; where a word
//! cannot be known before it runs, it is marked [`WordKind::Dynamic`]. Callers must treat
//! anything they cannot see as a reason to ask.
//!
//! Line continuations are skipped where bash removes them, and here-documents are read after
//! their line. Assignments are taken as bash takes them (`CC='rm -rf x' make` is one, `'CC'=x
//! make` runs `CC=x`); text bash may still evaluate as code is flagged ([`Script::latent`]).
//! Nesting and lookahead are bounded, so a hostile line stays cheap. `quoting` reads one word,
//! `compound` reserved words and here-documents.

use std::fmt;

/// Everything a command line runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Script {
    /// Every simple command, in the order they appear, nested ones included.
    pub commands: Vec<Command>,
    /// Uses more than lists and pipelines of simple commands: control structures, subshells,
    /// groups, function definitions, tests or arithmetic.
    pub compound: bool,
    /// Holds text that bash may still run as code without it appearing as a command here: a
    /// quoted `$(…)` or backquote (which `printf -v`, `declare`, `[[ -eq ]]` or arithmetic can
    /// evaluate), arithmetic on variables, `${x@P}`, `${!x}`, aliases.
    pub latent: bool,
}

/// One simple command: assignments, words and redirections.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Command {
    /// `NAME=value` words before the program.
    pub assignments: Vec<Word>,
    /// The program and its arguments.
    pub words: Vec<Word>,
    pub redirects: Vec<Redirect>,
    /// Runs inside a command or process substitution, a subshell or a group.
    pub nested: bool,
}

/// A word after quote removal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Word {
    /// The literal text, quotes removed; meaningful for `Literal` words only.
    pub text: String,
    pub kind: WordKind,
    /// Whether any quoting (quotes or backslashes) was used.
    pub quoted: bool,
}

/// What the shell still does to a word before the program sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WordKind {
    /// Nothing: the program gets `text`.
    Literal,
    /// Pathname expansion: the pattern, with quoted metacharacters escaped by `\`.
    Glob(String),
    /// Parameter, command, arithmetic, tilde or brace expansion: unknown until it runs.
    Dynamic,
}

/// A redirection: `>`, `>>`, `<`, `2>&1`, `&>`, `<<EOF`, `<<<`, …
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redirect {
    pub op: &'static str,
    /// The file, for redirections that open one; `None` for here-documents and here-strings,
    /// which feed the command text rather than a file, and for descriptor copies (`2>&1`).
    pub target: Option<Word>,
}

/// Why a command line cannot be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub why: &'static str,
    /// Character offset where the problem was found.
    pub at: usize,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, at character {}", self.why, self.at + 1)
    }
}

impl std::error::Error for ParseError {}

/// Reads a command line.
pub fn parse(line: &str) -> Result<Script, ParseError> {
    if let Some(at) = line.chars().position(|c| c == '\0') {
        return Err(ParseError { why: "the line holds a NUL character, which bash is never given", at });
    }
    let mut parser =
        Parser { chars: line.chars().collect(), pos: 0, depth: 0, script: Script::default(), heredocs: Vec::new() };
    parser.list(End::Eof)?;
    Ok(parser.script)
}

/// Where a list of commands ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    Eof,
    /// A `)` closing a subshell or a substitution.
    Paren,
    /// `;;`, `;&`, `;;&` or `esac`, inside a `case`.
    CaseItem,
}

/// What ended a command.
#[derive(PartialEq, Eq)]
enum Next {
    More,
    /// `esac` at a command's start inside a case item.
    Esac,
}

/// What ended a list.
#[derive(PartialEq, Eq)]
enum Ended {
    Eof,
    Paren,
    /// `;;`, `;&` or `;;&`: the next case item follows.
    Item,
    Esac,
}

struct Heredoc {
    delimiter: String,
    /// A quoted delimiter turns expansion in the body off.
    expands: bool,
    strip_tabs: bool,
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
    /// Nesting inside substitutions, subshells and groups.
    depth: usize,
    script: Script,
    /// Here-documents whose bodies start after the next newline.
    heredocs: Vec<Heredoc>,
}

/// How deep substitutions, expansions and compound commands may nest before a line is
/// refused as unreadable.
const MAX_NESTING: usize = 64;
/// How far a `[` or `{` looks ahead for its closing character.
const LOOKAHEAD: usize = 256;

const KEYWORDS_COMPOUND: [&str; 9] = ["if", "then", "else", "elif", "do", "while", "until", "!", "{"];
const KEYWORDS_CLOSING: [&str; 4] = ["fi", "done", "esac", "}"];

impl Parser {
    /// The index of the first character at or after `i` that no line continuation (`\` and a
    /// newline, which bash removes before it reads words) hides.
    fn join(&self, mut i: usize) -> usize {
        while self.chars.get(i) == Some(&'\\') && self.chars.get(i + 1) == Some(&'\n') {
            i += 2;
        }
        i
    }

    /// The next character, line continuations skipped.
    fn peek(&self) -> Option<char> {
        self.chars.get(self.join(self.pos)).copied()
    }

    fn peek_at(&self, ahead: usize) -> Option<char> {
        let mut i = self.join(self.pos);
        for _ in 0..ahead {
            i = self.join(i + 1);
        }
        self.chars.get(i).copied()
    }

    /// Consumes `n` characters, and the line continuations before them.
    fn bump(&mut self, n: usize) {
        for _ in 0..n {
            self.pos = self.join(self.pos) + 1;
        }
    }

    /// The next character as written, where continuations are not removed (inside single
    /// quotes, `$'…'`, comments and quoted here-documents).
    fn raw(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    /// Reads one level deeper into substitutions, expansions and compound commands; refused past
    /// [`MAX_NESTING`] so a hostile line cannot exhaust the stack.
    fn deeper<T>(&mut self, read: impl FnOnce(&mut Self) -> Result<T, ParseError>) -> Result<T, ParseError> {
        if self.depth >= MAX_NESTING {
            return Err(self.error("substitutions are nested too deeply to be checked"));
        }
        self.depth += 1;
        let result = read(self);
        self.depth -= 1;
        result
    }

    fn starts_with(&self, text: &str) -> bool {
        text.chars().enumerate().all(|(i, c)| self.peek_at(i) == Some(c))
    }

    fn error(&self, why: &'static str) -> ParseError {
        ParseError { why, at: self.pos.min(self.chars.len()) }
    }

    fn skip_blanks(&mut self) {
        while let Some(' ' | '\t') = self.peek() {
            self.bump(1);
        }
    }

    /// A comment runs to the end of its line; a backslash at its end continues nothing.
    fn skip_comment(&mut self) {
        if self.peek() == Some('#') {
            self.pos = self.join(self.pos);
            while self.raw().is_some_and(|c| c != '\n') {
                self.pos += 1;
            }
        }
    }

    /// A list of pipelines until `end`.
    fn list(&mut self, end: End) -> Result<Ended, ParseError> {
        loop {
            self.skip_blanks();
            self.skip_comment();
            let Some(c) = self.peek() else {
                return match end {
                    // bash ends a here-document still open at the end of the input there.
                    End::Eof => Ok(Ended::Eof),
                    End::Paren => Err(self.error("a `(` or `$(` is never closed")),
                    End::CaseItem => Err(self.error("a `case` is never closed with `esac`")),
                };
            };
            match c {
                '\n' => {
                    self.bump(1);
                    self.heredoc_bodies()?;
                }
                ')' if end == End::Paren => {
                    self.bump(1);
                    return Ok(Ended::Paren);
                }
                ')' => return Err(self.error("unexpected `)`")),
                ';' if end == End::CaseItem && self.peek_at(1) == Some(';') => {
                    self.bump(2);
                    if self.peek() == Some('&') {
                        self.bump(1);
                    }
                    return Ok(Ended::Item);
                }
                ';' if end == End::CaseItem && self.peek_at(1) == Some('&') => {
                    self.bump(2);
                    return Ok(Ended::Item);
                }
                ';' if self.peek_at(1) == Some(';') => return Err(self.error("unexpected `;;` outside a `case`")),
                ';' => self.bump(1),
                '&' if self.peek_at(1) == Some('>') => {
                    if self.command(end)? == Next::Esac {
                        return Ok(Ended::Esac);
                    }
                }
                '&' | '|' => {
                    self.bump(1);
                    if matches!(self.peek(), Some('&' | '|')) {
                        self.bump(1);
                    }
                }
                _ => {
                    if self.command(end)? == Next::Esac {
                        return Ok(Ended::Esac);
                    }
                }
            }
        }
    }

    /// One simple command, or the keyword or opening of a compound one.
    fn command(&mut self, end: End) -> Result<Next, ParseError> {
        let mut command = Command { nested: self.depth > 0, ..Command::default() };
        loop {
            self.skip_blanks();
            let at_start = command.words.is_empty() && command.assignments.is_empty();
            match self.peek() {
                None | Some('\n' | ';' | '|' | ')') => break,
                Some('&') if self.peek_at(1) != Some('>') => break,
                Some('#') => {
                    self.skip_comment();
                    break;
                }
                Some('(') if at_start && self.peek_at(1) == Some('(') => {
                    self.script.compound = true;
                    self.bump(2);
                    self.arithmetic()?;
                }
                Some('(') if at_start => {
                    self.script.compound = true;
                    self.bump(1);
                    self.nested(End::Paren)?;
                }
                Some('(') if command.words.len() == 1 && command.assignments.is_empty() => {
                    // `name () { …; }`: a function definition.
                    self.bump(1);
                    self.skip_blanks();
                    if self.peek() != Some(')') {
                        return Err(self.error("expected `)` in a function definition"));
                    }
                    self.bump(1);
                    self.script.compound = true;
                    command.words.clear();
                }
                Some('(') => return Err(self.error("unexpected `(`")),
                Some('<' | '>') if self.peek_at(1) != Some('(') => {
                    let redirect = self.redirect(None)?;
                    command.redirects.push(redirect);
                }
                Some('&') => {
                    let redirect = self.redirect(None)?;
                    command.redirects.push(redirect);
                }
                Some(_) => {
                    let start = self.join(self.pos);
                    let word = self.word()?;
                    let assignment =
                        is_assignment(&word.text) && (!word.quoted || self.unquoted_name(start, &word.text));
                    if matches!(self.peek(), Some('<' | '>'))
                        && self.peek_at(1) != Some('(')
                        && !word.quoted
                        && is_descriptor(&word.text)
                    {
                        let redirect = self.redirect(Some(word))?;
                        command.redirects.push(redirect);
                        continue;
                    }
                    if at_start && !word.quoted {
                        match self.keyword(&word.text, end)? {
                            Some(next) => {
                                if next == Next::Esac {
                                    self.push(command);
                                    return Ok(Next::Esac);
                                }
                                continue;
                            }
                            None if assignment => {
                                if word.text.ends_with('=') && self.peek() == Some('(') {
                                    self.bump(1);
                                    self.array()?;
                                }
                                command.assignments.push(word);
                                continue;
                            }
                            None => {}
                        }
                    } else if command.words.is_empty() && assignment {
                        if word.text.ends_with('=') && self.peek() == Some('(') {
                            self.bump(1);
                            self.array()?;
                        }
                        command.assignments.push(word);
                        continue;
                    }
                    command.words.push(word);
                }
            }
        }
        self.push(command);
        Ok(Next::More)
    }

    /// Whether a quoted word's name part (up to its `=`) is written unquoted at `start`, as
    /// bash requires of an assignment: `CC='rm -rf x' make` is one, `'CC'=x make` runs `CC=x`.
    fn unquoted_name(&self, start: usize, text: &str) -> bool {
        let Some(eq) = text.find('=') else { return false };
        let mut at = start;
        text[..=eq].chars().all(|c| {
            at = self.join(at);
            let same = self.chars.get(at) == Some(&c);
            at += 1;
            same
        })
    }

    fn push(&mut self, command: Command) {
        if !command.words.is_empty() || !command.assignments.is_empty() || !command.redirects.is_empty() {
            self.script.commands.push(command);
        }
    }

    /// A list nested one level deeper (subshell, command or process substitution).
    fn nested(&mut self, end: End) -> Result<(), ParseError> {
        self.deeper(|parser| {
            // A here-document declared outside is read after the outer line's newline, not after
            // one inside the substitution (bash reads the whole substitution first).
            let outer = std::mem::take(&mut parser.heredocs);
            let result = parser.list(end);
            let inner = std::mem::replace(&mut parser.heredocs, outer);
            parser.heredocs.extend(inner);
            result.map(|_| ())
        })
    }

    /// A redirection operator and its target; `fd` is a descriptor word such as `2` or `{fd}`.
    fn redirect(&mut self, _fd: Option<Word>) -> Result<Redirect, ParseError> {
        const OPS: [&str; 13] = ["&>>", "<<<", "<<-", "&>", ">>", ">|", "<<", "<&", ">&", "<>", "<", ">", "&"];
        let Some(op) = OPS.into_iter().find(|op| self.starts_with(op)) else {
            return Err(self.error("unexpected redirection"));
        };
        if op == "&" {
            return Err(self.error("unexpected `&`"));
        }
        self.bump(op.chars().count());
        self.skip_blanks();
        if matches!(self.peek(), None | Some('\n' | ';' | '|' | '&' | '(' | ')' | '<' | '>')) {
            return Err(self.error("a redirection has no target"));
        }
        let target = self.word()?;
        match op {
            "<<" | "<<-" => {
                self.heredocs.push(Heredoc {
                    delimiter: target.text,
                    expands: !target.quoted,
                    strip_tabs: op == "<<-",
                });
                Ok(Redirect { op, target: None })
            }
            "<<<" => Ok(Redirect { op, target: None }),
            "<&" | ">&" if target.kind == WordKind::Literal && is_descriptor_copy(&target.text) => {
                Ok(Redirect { op, target: None })
            }
            _ => Ok(Redirect { op, target: Some(target) }),
        }
    }

    fn absorb(&mut self, script: Script) {
        self.script.compound |= script.compound;
        self.script.latent |= script.latent;
        self.script.commands.extend(script.commands.into_iter().map(|mut c| {
            c.nested = true;
            c
        }));
    }
}

mod compound;
mod quoting;

fn is_blank_or_end(c: char) -> bool {
    c == ' ' || c == '\t' || c == '\n' || c == ';'
}

fn is_word_end(c: char) -> bool {
    is_meta(c)
}

/// Characters that end an unquoted word.
fn is_meta(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|' | '(' | ')' | '<' | '>')
}

/// `2`, `10` or `{fd}` right before a redirection operator.
fn is_descriptor(text: &str) -> bool {
    let name = text.strip_prefix('{').and_then(|t| t.strip_suffix('}'));
    (!text.is_empty() && text.chars().all(|c| c.is_ascii_digit()))
        || name.is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// The target of `>&` / `<&` that copies or closes a descriptor rather than naming a file.
fn is_descriptor_copy(text: &str) -> bool {
    text == "-" || text.trim_end_matches('-').chars().all(|c| c.is_ascii_digit()) && !text.is_empty()
}

/// `NAME=…`, `NAME+=…` or `NAME[index]=…`.
pub fn is_assignment(text: &str) -> bool {
    let Some(eq) = text.find('=') else { return false };
    let name = text[..eq].trim_end_matches('+');
    let name = match name.find('[') {
        Some(open) if name.ends_with(']') => &name[..open],
        Some(_) => return false,
        None => name,
    };
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests;
