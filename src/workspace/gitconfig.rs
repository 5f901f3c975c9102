//! Just enough of git's configuration syntax to find what the sandbox keeps read-only and the
//! file tools ask before changing: the `core.hooksPath` git will use and every file the
//! configuration includes. Read as git reads
//! it: sections and subsections (`[core]`, `[includeIf "gitdir:…"]`), keys without case, a key
//! alone on a line (true), values with `"…"` quoting and backslash escapes, `;` and `#` comments
//! outside quotes, a value continued by a trailing backslash, and `include.path` /
//! `includeIf.*.path` followed (every `includeIf`, whatever its condition: it may hold). The
//! system, global and repository files (and `config.worktree`, and the files `GIT_CONFIG_SYSTEM`
//! and `GIT_CONFIG_GLOBAL` name, besides the usual ones) are read in git's order, the last
//! `hooksPath` winning.
//! Bounded: a file over [`MAX_FILE`] or an include chain deeper than [`MAX_DEPTH`] is not read,
//! and is named in [`Found::unreadable`], as is any file that exists but cannot be read.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The largest configuration file read.
const MAX_FILE: u64 = 1024 * 1024;
/// Includes followed, deepest (git stops at 10).
const MAX_DEPTH: usize = 10;

/// What a repository's configuration says that matters here.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Found {
    /// The last `core.hooksPath`, as written.
    pub hooks_path: Option<String>,
    /// Every file read (the repository's own and what it includes), resolved.
    pub files: Vec<PathBuf>,
    /// Every file an `include.path` or `includeIf.*.path` names, absolute, whether it exists or
    /// not (a file made later is read by the next git command).
    pub includes: Vec<PathBuf>,
    /// The first file that exists but could not be read whole, and why: what it says is unknown.
    pub unreadable: Option<String>,
}

/// Reads the configuration git uses in the repository whose git directory is `git_dir`: the
/// system file, the user's global files (`home`, `xdg_config`), then `git_dir/config`.
pub fn read(git_dir: &Path, home: Option<&Path>, xdg_config: Option<&Path>) -> Found {
    read_with(git_dir, home, xdg_config, &|name| std::env::var_os(name))
}

/// [`read`], with the variables that name other configuration files (`GIT_CONFIG_SYSTEM`,
/// `GIT_CONFIG_GLOBAL`) read through `lookup`. Their files are read as well as the usual ones,
/// not instead, in git's order (system, global, the repository's, its `config.worktree`), so the
/// last hooks path is the one git uses, or one more place is guarded.
fn read_with(
    git_dir: &Path,
    home: Option<&Path>,
    xdg_config: Option<&Path>,
    lookup: &dyn Fn(&str) -> Option<std::ffi::OsString>,
) -> Found {
    let named = |variable: &str| lookup(variable).map(PathBuf::from).filter(|path| path.is_absolute());
    let mut found = Found::default();
    let mut files = vec![PathBuf::from("/etc/gitconfig")];
    files.extend(named("GIT_CONFIG_SYSTEM"));
    // Git's `$XDG_CONFIG_HOME/git/config`, or `~/.config/git/config` where that is unset (most
    // systems) or empty.
    let xdg_config = xdg_config.filter(|dir| dir.is_absolute()).map(Path::to_path_buf);
    files.extend(xdg_config.or_else(|| home.map(|home| home.join(".config"))).map(|dir| dir.join("git/config")));
    files.extend(home.map(|home| home.join(".gitconfig")));
    files.extend(named("GIT_CONFIG_GLOBAL"));
    files.push(git_dir.join("config"));
    files.push(git_dir.join("config.worktree"));
    for file in files {
        read_file(&file, home, 0, &mut found);
    }
    for (name, value) in environment(lookup) {
        let Some((section, key)) = split_name(&name) else { continue };
        // An include from the command line must be absolute (git refuses a relative one).
        setting(&section, &key, value, None, home, 0, &mut found);
    }
    found
}

/// The settings the environment gives, in git's order: `GIT_CONFIG_COUNT` pairs, then
/// `GIT_CONFIG_PARAMETERS`. Each as `(name, value)`, the name as written (`core.hooksPath`).
/// Where git would stop at a malformed variable (and run nothing), what came before is kept.
fn environment(lookup: &dyn Fn(&str) -> Option<std::ffi::OsString>) -> Vec<(String, Option<String>)> {
    let text = |name: &str| lookup(name).map(|value| value.to_string_lossy().into_owned());
    let mut out = Vec::new();
    let count = text("GIT_CONFIG_COUNT").and_then(|count| count.trim().parse::<usize>().ok()).unwrap_or(0);
    for n in 0..count {
        // git stops at a missing key or value; so does this (and a huge count costs nothing).
        let (Some(key), Some(value)) = (text(&format!("GIT_CONFIG_KEY_{n}")), text(&format!("GIT_CONFIG_VALUE_{n}")))
        else {
            break;
        };
        out.push((key, Some(value)));
    }
    if let Some(parameters) = text("GIT_CONFIG_PARAMETERS") {
        out.extend(parameters_of(&parameters));
    }
    out
}

/// `GIT_CONFIG_PARAMETERS` read as git reads it: shell-quoted items separated by blanks, each
/// either `'name=value'` (a name alone: true) or `'name'='value'` (`'name'=`: true).
fn parameters_of(text: &str) -> Vec<(String, Option<String>)> {
    let mut out = Vec::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let Some((name, after)) = dequote(rest) else { break };
        if let Some(after) = after.strip_prefix('=') {
            if after.starts_with('\'') {
                let Some((value, after)) = dequote(after) else { break };
                if !after.is_empty() && !after.starts_with(char::is_whitespace) {
                    break;
                }
                out.push((name, Some(value)));
                rest = after.trim_start();
            } else if after.is_empty() || after.starts_with(char::is_whitespace) {
                out.push((name, None));
                rest = after.trim_start();
            } else {
                break;
            }
        } else if after.is_empty() || after.starts_with(char::is_whitespace) {
            match name.split_once('=') {
                Some((name, value)) => out.push((name.trim().to_owned(), Some(value.to_owned()))),
                None => out.push((name.trim().to_owned(), None)),
            }
            rest = after.trim_start();
        } else {
            break;
        }
    }
    out
}

/// One single-quoted word at the start of `text` (`'\''` and `'\!'` standing for `'` and `!`
/// between quoted parts); the word and what follows it.
fn dequote(text: &str) -> Option<(String, &str)> {
    let mut rest = text.strip_prefix('\'')?;
    let mut word = String::new();
    loop {
        let end = rest.find('\'')?;
        word.push_str(&rest[..end]);
        rest = &rest[end + 1..];
        let mut chars = rest.chars();
        match (chars.next(), chars.next(), chars.next()) {
            (Some('\\'), Some(c @ ('\'' | '!')), Some('\'')) => {
                word.push(c);
                rest = &rest[3..];
            }
            _ => return Some((word, rest)),
        }
    }
}

/// `section.sub.key` → (`section.sub`, `key`), section and key lower-cased as in [`entries`].
fn split_name(name: &str) -> Option<(String, String)> {
    let (section, key) = name.rsplit_once('.')?;
    let section = match section.split_once('.') {
        Some((base, sub)) => format!("{}.{sub}", base.to_ascii_lowercase()),
        None => section.to_ascii_lowercase(),
    };
    Some((section, key.to_ascii_lowercase()))
}

fn read_file(file: &Path, home: Option<&Path>, depth: usize, found: &mut Found) {
    let unreadable = |found: &mut Found, why: String| {
        found.unreadable.get_or_insert_with(|| format!("{}: {why}", file.display()));
    };
    if depth > MAX_DEPTH {
        unreadable(found, format!("includes nest deeper than {MAX_DEPTH}"));
        return;
    }
    if found.files.iter().any(|known| known == file) {
        return;
    }
    // Only a regular file, and not a huge one: a FIFO or `/dev/zero` named by an include
    // would block or fill memory.
    let meta = match std::fs::metadata(file) {
        Ok(meta) => meta,
        Err(err) if matches!(err.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => return,
        Err(err) => return unreadable(found, err.to_string()),
    };
    if !meta.is_file() {
        return unreadable(found, "not a regular file".into());
    }
    if meta.len() > MAX_FILE {
        return unreadable(found, format!("larger than {MAX_FILE} bytes"));
    }
    let text = match std::fs::read(file) {
        Ok(text) => text,
        Err(err) => return unreadable(found, err.to_string()),
    };
    found.files.push(std::fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf()));
    let text = String::from_utf8_lossy(&text);
    let base = file.parent().unwrap_or(Path::new("/"));
    for (section, key, value) in entries(&text) {
        setting(&section, &key, value, Some(base), home, depth, found);
    }
}

/// One setting read from a file in `base` (`None`: from the environment, where an include must
/// be absolute).
fn setting(
    section: &str,
    key: &str,
    value: Option<String>,
    base: Option<&Path>,
    home: Option<&Path>,
    depth: usize,
    found: &mut Found,
) {
    let include = key == "path" && (section == "include" || section.starts_with("includeif."));
    if include && let Some(value) = value {
        let Some(path) = expand(&value, home).or_else(|| Some(base?.join(&value))) else { return };
        found.includes.push(path.clone());
        read_file(&path, home, depth + 1, found);
    } else if section == "core" && key == "hookspath" {
        found.hooks_path = value;
    }
}

/// `~/…` made absolute.
fn expand(path: &str, home: Option<&Path>) -> Option<PathBuf> {
    if path.starts_with('/') {
        return Some(PathBuf::from(path));
    }
    Some(home?.join(path.strip_prefix("~/")?))
}

/// Each `(section, key, value)` of a configuration text: section names lower-cased, with a
/// subsection after a dot as written (`includeif.gitdir:~/work/`), keys lower-cased, values
/// unquoted (`None` for a key alone on its line).
pub fn entries(text: &str) -> Vec<(String, String, Option<String>)> {
    let mut out = Vec::new();
    let mut section = String::new();
    // Git skips a UTF-8 byte order mark at the start of a file.
    let mut lines = text.strip_prefix('\u{feff}').unwrap_or(text).lines();
    while let Some(line) = lines.next() {
        let mut rest = line.trim_start();
        if rest.starts_with('[') {
            let Some(end) = header_end(rest) else { continue };
            section = header(&rest[1..end]);
            rest = rest[end + 1..].trim_start();
        }
        if rest.is_empty() || rest.starts_with(['#', ';']) {
            continue;
        }
        let name_end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(rest.len());
        let key = rest[..name_end].to_ascii_lowercase();
        let after = rest[name_end..].trim_start();
        let value = after.strip_prefix('=').map(|raw| value(raw, &mut lines));
        if !key.is_empty() {
            out.push((section.clone(), key, value));
        }
    }
    out
}

/// Where a `[…]` header ends, quotes respected.
fn header_end(line: &str) -> Option<usize> {
    let mut quoted = false;
    let mut escaped = false;
    for (at, c) in line.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => quoted = !quoted,
            ']' if !quoted => return Some(at),
            _ => {}
        }
    }
    None
}

/// `core`, `includeIf "gitdir:x"` or the old `core.sub` form → `core`, `includeif.gitdir:x`.
fn header(inside: &str) -> String {
    let inside = inside.trim();
    match inside.split_once(char::is_whitespace) {
        Some((name, sub)) => format!("{}.{}", name.to_ascii_lowercase(), sub.trim().trim_matches('"')),
        None => inside.to_ascii_lowercase(),
    }
}

/// A value as git's parser reads it, from `first` (its line after the `=`) on: quotes removed,
/// escapes resolved, blanks around it dropped, a backslash ending a line outside a comment
/// going on with the next of `lines`, and a `#` or `;` outside quotes ending it at its line's
/// end, whatever follows on that line (a backslash included: it continues nothing there).
fn value<'a>(first: &'a str, lines: &mut std::str::Lines<'a>) -> String {
    let mut out = String::new();
    let mut quoted = false;
    // Where trailing blanks begin, to drop them at the end.
    let mut blanks: Option<usize> = None;
    let mut chars = first.chars();
    while let Some(c) = chars.next() {
        if c.is_whitespace() && !quoted {
            blanks.get_or_insert(out.len());
            if !out.is_empty() {
                out.push(c);
            }
            continue;
        }
        if !quoted && (c == '#' || c == ';') {
            break;
        }
        blanks = None;
        match c {
            '\\' => match chars.next() {
                Some('t') => out.push('\t'),
                Some('n') => out.push('\n'),
                Some('b') => out.push('\u{8}'),
                Some(other) => out.push(other),
                None => match lines.next() {
                    Some(next) => chars = next.chars(),
                    None => break,
                },
            },
            '"' => quoted = !quoted,
            c => out.push(c),
        }
    }
    if let Some(at) = blanks {
        out.truncate(at);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_of(text: &str, wanted: &str) -> Option<Option<String>> {
        entries(text).into_iter().rev().find(|(section, key, _)| format!("{section}.{key}") == wanted).map(|e| e.2)
    }

    #[test]
    fn values_are_read_as_git_reads_them() {
        let text = "[core]\n\thooksPath = tools/hooks ; shared\n";
        assert_eq!(value_of(text, "core.hookspath"), Some(Some("tools/hooks".into())));
        let text = "[CORE] HooksPath=\"a ; b\" # c\n";
        assert_eq!(value_of(text, "core.hookspath"), Some(Some("a ; b".into())), "a header and a key on one line");
        let text = "[core]\n\thooksPath = a\\\nb\n";
        assert_eq!(value_of(text, "core.hookspath"), Some(Some("ab".into())), "continued on the next line");
        let text = "[core]\n\tbare\n";
        assert_eq!(value_of(text, "core.bare"), Some(None));
        let text = "[includeIf \"gitdir:~/work/\"]\n\tpath = work.inc\n";
        assert_eq!(value_of(text, "includeif.gitdir:~/work/.path"), Some(Some("work.inc".into())));
        let text = "[core]\n\thooksPath = a \"b  c\" \\\n d  \n";
        assert_eq!(value_of(text, "core.hookspath"), Some(Some("a b  c  d".into())), "blanks kept inside");
    }

    /// Two spellings a hostile command used to hide `core.fsmonitor` from the sweep while git
    /// read it: a backslash inside a comment (git's comment runs to the line's end, so the
    /// backslash continues nothing) and a byte order mark before the first line (git skips it).
    #[test]
    fn a_setting_after_a_comment_ending_in_a_backslash_or_a_byte_order_mark_is_read() {
        let text = "[user]\n\tname = x ; \\\n[core] fsmonitor = \"touch pwned\"\n";
        assert_eq!(value_of(text, "user.name"), Some(Some("x".into())));
        assert_eq!(value_of(text, "core.fsmonitor"), Some(Some("touch pwned".into())), "{:?}", entries(text));
        let text = "\u{feff}[core] fsmonitor = \"touch pwned\"\n";
        assert_eq!(value_of(text, "core.fsmonitor"), Some(Some("touch pwned".into())), "{:?}", entries(text));
    }

    /// Git reads `$XDG_CONFIG_HOME/git/config`, and `~/.config/git/config` where that variable
    /// is unset, as it is on most systems: a hooks path there is the user's too.
    #[test]
    fn the_users_config_under_dot_config_is_read_when_xdg_config_home_is_unset() {
        let dir = tempfile::tempdir().unwrap();
        let (home, git) = (dir.path().join("home"), dir.path().join("ws/.git"));
        std::fs::create_dir_all(home.join(".config/git")).unwrap();
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(home.join(".config/git/config"), "[core]\n\thooksPath = from-dot-config\n").unwrap();
        assert_eq!(read(&git, Some(&home), None).hooks_path.as_deref(), Some("from-dot-config"));
        let xdg = dir.path().join("xdg");
        std::fs::create_dir_all(xdg.join("git")).unwrap();
        std::fs::write(xdg.join("git/config"), "[core]\n\thooksPath = from-xdg\n").unwrap();
        assert_eq!(read(&git, Some(&home), Some(&xdg)).hooks_path.as_deref(), Some("from-xdg"));
        assert_eq!(read(&git, Some(&home), Some(Path::new(""))).hooks_path.as_deref(), Some("from-dot-config"));
    }

    #[test]
    fn includes_are_followed_and_the_last_hooks_path_wins() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "[core]\n\thooksPath = first\n[include]\n\tpath = ../common.inc\n").unwrap();
        std::fs::write(dir.path().join("common.inc"), "[core]\n\thooksPath = second\n").unwrap();
        let home = dir.path().join("home");
        std::fs::create_dir_all(&home).unwrap();
        std::fs::write(home.join(".gitconfig"), "[core]\n\thooksPath = global\n").unwrap();
        let found = read(&git, Some(&home), None);
        assert_eq!(found.hooks_path.as_deref(), Some("second"));
        assert!(found.files.iter().any(|file| file.ends_with("common.inc")), "{found:?}");
        assert!(found.files.iter().any(|file| file.ends_with(".gitconfig")), "{found:?}");
    }

    #[test]
    fn a_hooks_path_in_config_worktree_or_a_file_git_config_global_names_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "[core]\n\thooksPath = local\n").unwrap();
        std::fs::write(git.join("config.worktree"), "[core]\n\thooksPath = worktree\n").unwrap();
        assert_eq!(read(&git, None, None).hooks_path.as_deref(), Some("worktree"), "git reads it last");
        std::fs::remove_file(git.join("config")).unwrap();
        std::fs::remove_file(git.join("config.worktree")).unwrap();
        let global = dir.path().join("elsewhere.gitconfig");
        std::fs::write(&global, "[core]\n\thooksPath = global\n").unwrap();
        let lookup = |name: &str| (name == "GIT_CONFIG_GLOBAL").then(|| global.clone().into_os_string());
        let found = read_with(&git, None, None, &lookup);
        assert_eq!(found.hooks_path.as_deref(), Some("global"));
        assert!(found.files.contains(&global), "{found:?}");
    }

    #[test]
    fn settings_in_the_environment_come_after_the_files_count_pairs_before_git_c_parameters() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "[core]\n\thooksPath = local\n").unwrap();
        let inc = dir.path().join("env.inc");
        std::fs::write(&inc, "[alias]\n").unwrap();
        let vars = |pairs: Vec<(&'static str, String)>| {
            move |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone().into())
        };
        let count = vars(vec![
            ("GIT_CONFIG_COUNT", "2".into()),
            ("GIT_CONFIG_KEY_0", "Core.HooksPath".into()),
            ("GIT_CONFIG_VALUE_0", "from-count".into()),
            ("GIT_CONFIG_KEY_1", "include.path".into()),
            ("GIT_CONFIG_VALUE_1", inc.display().to_string()),
        ]);
        let found = read_with(&git, None, None, &count);
        assert_eq!(found.hooks_path.as_deref(), Some("from-count"), "after the repository's file");
        assert!(found.files.contains(&inc), "an absolute include from the environment is read: {found:?}");
        let both = vars(vec![
            ("GIT_CONFIG_COUNT", "1".into()),
            ("GIT_CONFIG_KEY_0", "core.hooksPath".into()),
            ("GIT_CONFIG_VALUE_0", "from-count".into()),
            ("GIT_CONFIG_PARAMETERS", "'core.bare'='true' 'core.hookspath'='it'\\''s' 'user.name'=".into()),
        ]);
        assert_eq!(read_with(&git, None, None, &both).hooks_path.as_deref(), Some("it's"), "git -c comes last");
        let old = vars(vec![("GIT_CONFIG_PARAMETERS", "'core.hooksPath=old style' 'core.bare'".into())]);
        assert_eq!(read_with(&git, None, None, &old).hooks_path.as_deref(), Some("old style"));
        let short = vars(vec![("GIT_CONFIG_COUNT", "5".into()), ("GIT_CONFIG_KEY_0", "core.hooksPath".into())]);
        assert_eq!(read_with(&git, None, None, &short).hooks_path.as_deref(), Some("local"), "git stops at a gap");
    }

    #[test]
    fn an_include_of_a_fifo_or_a_device_is_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        std::fs::write(git.join("config"), "[include]\n\tpath = /dev/zero\n").unwrap();
        let found = read(&git, None, None);
        assert!(!found.files.iter().any(|file| file.starts_with("/dev")), "{found:?}");
        assert!(found.unreadable.as_deref().is_some_and(|why| why.contains("/dev/zero")), "{found:?}");
    }
}
