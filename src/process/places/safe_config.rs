//! A new repository's configuration, written again with only the settings that run nothing:
//! what the sweep (`sweep.rs`) does to the `config` of every git directory a command made. The
//! file is read as bytes and parsed as git parses it (`workspace::gitconfig`); it is always
//! written anew from the settings kept, unless it is that text already (what `git init` and
//! `git clone` write), so whatever that reading and git's might disagree on goes with the rest.
//! Remotes are kept only on other machines (a repository on this one runs its own hooks when
//! git pushes to it), and `core.worktree` only where it leads inside a root. Reads and the
//! rewrite go through the directory opened beneath its root (`crate::beneath`).

use std::path::{Path, PathBuf};

use super::sweep::take;
use crate::beneath::Parent;
use crate::workspace::gitconfig;

/// The settings a repository a command made may keep: none of them runs a program.
const SAFE_SETTINGS: &[&str] = &[
    "core.repositoryformatversion",
    "core.filemode",
    "core.bare",
    "core.logallrefupdates",
    "core.ignorecase",
    "core.precomposeunicode",
    "core.symlinks",
    "core.autocrlf",
    "core.eol",
    "extensions.objectformat",
    "extensions.refstorage",
    "init.defaultbranch",
    "user.name",
    "user.email",
];

/// Settings of subsections kept likewise (`remote.origin.url`).
const SAFE_SUBSECTION_SETTINGS: &[(&str, &str)] = &[
    ("remote", "url"),
    ("remote", "fetch"),
    ("remote", "tagopt"),
    ("branch", "remote"),
    ("branch", "merge"),
    ("branch", "rebase"),
    ("submodule", "url"),
    ("submodule", "active"),
];

/// The largest configuration a new repository may keep; a larger one is removed.
const MAX_CONFIG: u64 = 64 * 1024;
/// How many dropped settings the sweep names; the rest are counted.
const SHOWN_SETTINGS: usize = 12;

/// Rewrites a new repository's configuration with only the settings that run nothing.
pub(super) fn safe_config(roots: &[PathBuf], config: &Path) -> Option<String> {
    std::fs::symlink_metadata(config).ok()?;
    // Read and written from its directory opened beneath the root, with no link followed: a
    // link swapped in for the file or a directory above it is not read or written through.
    let parent = match Parent::existing(roots, config) {
        Ok(parent) => parent,
        Err(err) => return Some(format!("{} was left as it is: {err}", config.display())),
    };
    // Read as bytes: a byte that is not UTF-8 must not make the sweep give up on the file.
    let bytes = match parent.read(MAX_CONFIG) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Some(take(roots, config, "a new repository's configuration must be a small file")),
        Err(_) => return Some(take(roots, config, "a new repository's configuration must be a file of its own")),
    };
    let text = String::from_utf8_lossy(&bytes);
    let entries = gitconfig::entries(&text);
    // A submodule's git directory names its working tree (`core.worktree`, relative to the git
    // directory): kept where it leads inside a root, as `git submodule add` writes it.
    let git_dir = config.parent().unwrap_or(config);
    let inside = |value: &str| {
        std::fs::canonicalize(git_dir.join(value)).is_ok_and(|dir| roots.iter().any(|root| dir.starts_with(root)))
    };
    let safe = |(section, key, value): &(String, String, Option<String>)| {
        let name = format!("{section}.{key}");
        let base = section.split_once('.').map(|(base, _)| base);
        if key == "url" && matches!(base, Some("remote" | "submodule")) {
            // A repository on this machine runs its own hooks when git pushes to it.
            return value.as_deref().is_some_and(network_url);
        }
        SAFE_SETTINGS.contains(&name.as_str())
            || base.is_some_and(|base| SAFE_SUBSECTION_SETTINGS.contains(&(base, key.as_str())))
            || (name == "core.worktree" && value.as_deref().is_some_and(inside))
    };
    let mut dropped: Vec<String> = Vec::new();
    for (section, key, _) in entries.iter().filter(|entry| !safe(entry)) {
        let name = format!("{section}.{key}");
        if !dropped.contains(&name) {
            dropped.push(name);
        }
    }
    // The file is always written again from what was read as safe, unless it is that text
    // already (as `git init` and `git clone` write it): whatever this reading of the file and
    // git's might disagree on is gone with the rest.
    let kept = safe_text(entries.iter().filter(|entry| safe(entry)));
    if kept.as_bytes() == bytes.as_slice() {
        return None;
    }
    let what = match dropped.len() {
        0 => "what it held beyond the settings it may keep".to_owned(),
        n if n > SHOWN_SETTINGS => {
            format!("the settings {} and {} more", dropped[..SHOWN_SETTINGS].join(", "), n - SHOWN_SETTINGS)
        }
        _ => format!("the settings {}", dropped.join(", ")),
    };
    // A new file renamed over the old one, within the directory opened: a link put in its
    // place is replaced, not followed.
    Some(match parent.rewrite(std::ffi::OsStr::new(".config.cairn-sweep"), kept.as_bytes()) {
        Ok(()) => {
            format!("removed from {} {what} of a repository the command made: they can run programs", config.display())
        }
        Err(err) => {
            take(roots, config, &format!("it held {what}, which can run programs, and could not be rewritten ({err})"))
        }
    })
}

/// Whether a remote's URL names another machine: `https://`, `http://`, `ssh://`, `git://`, or
/// scp's `host:path`. A path, `file://`, and the transports that run programs (`ext::`, `fd::`)
/// are not: git runs a local repository's hooks (`pre-receive`, `post-update`) as the user.
fn network_url(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    if ["https://", "http://", "ssh://", "git://", "git+ssh://", "ssh+git://"]
        .iter()
        .any(|scheme| lower.starts_with(scheme))
    {
        return true;
    }
    // scp's form: a host before the first colon, and no slash before it.
    match url.split_once(':') {
        Some((host, rest)) => {
            !host.is_empty()
                && !host.contains('/')
                && !host.starts_with('.')
                && !rest.starts_with("//")
                && !rest.starts_with(':')
        }
        None => false,
    }
}

/// A configuration file holding `entries` as `git config` writes them: quoted only where a
/// value needs it.
fn safe_text<'a>(entries: impl Iterator<Item = &'a (String, String, Option<String>)>) -> String {
    let mut out = String::new();
    let mut current = None;
    for (section, key, value) in entries {
        if current != Some(section) {
            match section.split_once('.') {
                Some((base, sub)) => out.push_str(&format!("[{base} \"{}\"]\n", sub.replace(['\\', '"'], ""))),
                None => out.push_str(&format!("[{section}]\n")),
            }
            current = Some(section);
        }
        let value = value.as_deref().unwrap_or("true");
        let plain =
            !value.is_empty() && value.chars().all(|c| c.is_ascii_alphanumeric() || "./:@_+-*~%=,^".contains(c));
        if plain {
            out.push_str(&format!("\t{key} = {value}\n"));
        } else {
            let value = value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").replace('\t', "\\t");
            out.push_str(&format!("\t{key} = \"{value}\"\n"));
        }
    }
    out
}
