//! The index reader on indexes git wrote (versions 2, 3 and 4, SHA-256 names, a split index,
//! an offset table) and on ones a hostile command would write by hand.

use std::path::Path;

use super::super::gitlinks::tests::git;
use super::{Gitlinks, Unread, gitlinks};

/// A repository with a few files sharing prefixes (v4 compresses them) and `sub/mod`
/// staged as a gitlink, its index left in `version`; `init` is given to `git init`. From
/// version 3, a file added with intent to add (its entry has extended flags).
fn staged(dir: &Path, init: &[&str], version: &str) -> Vec<u8> {
    git(dir, &[&["init", "-q"], init].concat());
    for name in ["a/one.js", "a/two.js", "a/b/three.js", "z.txt", "later.txt"] {
        std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
        std::fs::write(dir.join(name), name).unwrap();
    }
    git(dir, &["add", "a", "z.txt"]);
    if version != "2" {
        git(dir, &["add", "-N", "later.txt"]);
    }
    let head = git(dir, &["hash-object", "-w", "z.txt"]);
    git(dir, &["update-index", "--add", "--cacheinfo", &format!("160000,{head},sub/mod")]);
    git(dir, &["update-index", "--index-version", version]);
    std::fs::read(dir.join(".git/index")).unwrap()
}

fn paths(found: &Gitlinks) -> Vec<String> {
    found.paths.iter().map(|path| String::from_utf8_lossy(path).into_owned()).collect()
}

#[test]
fn the_gitlinks_of_an_index_git_wrote_are_read_in_versions_two_three_and_four() {
    for version in ["2", "3", "4"] {
        let dir = tempfile::tempdir().unwrap();
        let bytes = staged(dir.path(), &[], version);
        assert_eq!(bytes[7], version.parse::<u8>().unwrap());
        assert_eq!(paths(&gitlinks(&bytes).unwrap()), ["sub/mod"], "version {version}");
    }
}

#[test]
fn sha256_names_are_read() {
    let dir = tempfile::tempdir().unwrap();
    staged(dir.path(), &["--object-format=sha256"], "4");
    let head = git(dir.path(), &["hash-object", "-w", "later.txt"]);
    git(dir.path(), &["update-index", "--add", "--cacheinfo", &format!("160000,{head},zz/last")]);
    for version in ["3", "4"] {
        git(dir.path(), &["update-index", "--index-version", version]);
        let bytes = std::fs::read(dir.path().join(".git/index")).unwrap();
        assert_eq!(paths(&gitlinks(&bytes).unwrap()), ["sub/mod", "zz/last"], "version {version}");
    }
}

/// A split index keeps most entries in a shared index beside it: the main one names it.
#[test]
fn a_split_index_names_its_shared_index_whose_gitlinks_count_too() {
    let dir = tempfile::tempdir().unwrap();
    staged(dir.path(), &[], "2");
    git(dir.path(), &["update-index", "--split-index"]);
    let bytes = std::fs::read(dir.path().join(".git/index")).unwrap();
    let main = gitlinks(&bytes).unwrap();
    let shared = main.shared.expect("the main index names its shared one");
    let shared = std::fs::read(dir.path().join(format!(".git/sharedindex.{shared}"))).unwrap();
    assert_eq!(paths(&gitlinks(&shared).unwrap()), ["sub/mod"]);
}

/// Git reads an index with an offset table on several threads, block by block.
#[test]
fn an_index_with_an_offset_table_is_read() {
    let dir = tempfile::tempdir().unwrap();
    for n in 0..2_000 {
        std::fs::create_dir_all(dir.path().join("many")).unwrap();
        std::fs::write(dir.path().join(format!("many/{n}")), "").unwrap();
    }
    staged(dir.path(), &[], "4");
    git(dir.path(), &["add", "many"]);
    let table =
        ["-c", "index.threads=4", "-c", "index.recordOffsetTable=true", "-c", "index.recordEndOfIndexEntries=true"];
    git(dir.path(), &[&table[..], &["update-index", "--index-version", "2"]].concat());
    let bytes = std::fs::read(dir.path().join(".git/index")).unwrap();
    assert!(bytes.windows(4).any(|window| window == b"IEOT"), "git wrote no offset table");
    assert_eq!(paths(&gitlinks(&bytes).unwrap()), ["sub/mod"]);
}

/// `bytes` with `from` replaced by `to` (of the same length), as a command would edit it.
fn edited(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    let at = bytes.windows(from.len()).position(|window| window == from).unwrap();
    [&bytes[..at], to, &bytes[at + from.len()..]].concat()
}

/// Git follows `../` in an index path out of the work tree and runs `git status` in the
/// repository there; it never writes such a path itself.
#[test]
fn a_gitlink_path_git_never_writes_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = staged(dir.path(), &[], "2");
    for (to, shown) in
        [(&b"../mods"[..], "../mods"), (b"/ub/mod", "/ub/mod"), (b".git/mo", ".git/mo"), (b"sub//od", "sub//od")]
    {
        let bad = edited(&bytes, b"sub/mod", to);
        assert_eq!(gitlinks(&bad), Err(Unread::Path(shown.to_owned())));
    }
    // A NUL cuts the path where git's system calls would.
    let cut = edited(&bytes, b"sub/mod", b"sub\0mod");
    assert_eq!(paths(&gitlinks(&cut).unwrap()), ["sub"]);
}

#[test]
fn a_truncated_or_foreign_index_is_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = staged(dir.path(), &[], "4");
    assert_eq!(gitlinks(&bytes[..bytes.len() / 2]), Err(Unread::Malformed));
    assert_eq!(gitlinks(b"PK\x03\x04 not an index"), Err(Unread::Header));
    assert_eq!(gitlinks(&edited(&bytes, b"DIRC\0\0\0\x04", b"DIRC\0\0\0\x05")), Err(Unread::Version(5)));
    // A count of entries that cannot fit is refused before anything is read.
    let mut many = bytes;
    many[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(gitlinks(&many), Err(Unread::Malformed));
    assert_eq!(gitlinks(b"DIRC\0\0\0\x02\0\0\0\0"), Err(Unread::Malformed), "no room for the checksum");
}
