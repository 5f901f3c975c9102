//! The pieces the gate reads with: the `#!` line as the kernel parses it, the ELF interpreter,
//! the GNU build id note, git's command word and its idea of a close misspelling.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::FileExt as _;

use super::super::file::{build_id, elf_interpreter, head, shebang};
use super::super::git::{command_word, distance, similar};

fn parsed(line: &[u8]) -> Option<(String, Option<String>)> {
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
    shebang(line).map(|(name, arg)| (text(name), arg.map(text)))
}

#[test]
fn a_shebang_line_is_read_as_the_kernel_reads_it() {
    let some = |name: &str, arg: Option<&str>| Some((name.to_owned(), arg.map(str::to_owned)));
    assert_eq!(parsed(b"#!/bin/sh\necho"), some("/bin/sh", None));
    assert_eq!(parsed(b"#! /usr/bin/git push \t\n"), some("/usr/bin/git", Some("push")));
    assert_eq!(parsed(b"#!/usr/bin/env  -S git  push\n"), some("/usr/bin/env", Some("-S git  push")), "one word");
    assert_eq!(parsed(b"#!/usr/bin/git push"), some("/usr/bin/git", Some("push")), "no newline at the end");
    assert_eq!(parsed(b"#!/usr/bin/git\x0bx push\n"), some("/usr/bin/git\x0bx", Some("push")), "only space and tab");
    assert_eq!(parsed(b"#!/usr/bin/git pu\0sh\n"), some("/usr/bin/git", Some("pu")), "cut at a NUL");
    assert_eq!(parsed(b"#!/usr/bin/git\0 push\n"), some("/usr/bin/git", None), "a NUL ends the name and the line");
    assert_eq!(parsed(b"#!/usr/bin/git push\0\n"), some("/usr/bin/git", Some("push")), "no newline before the NUL");
    assert_eq!(parsed(b"#!git push\n"), some("git", Some("push")), "relative: from the working directory");
    assert_eq!(parsed(b"#!/usr/bin/git\r\n"), some("/usr/bin/git\r", None), "a carriage return is part of it");
    assert_eq!(parsed(b"#!   \n"), None);
    assert_eq!(parsed(b"echo\n"), None);
    assert_eq!(parsed(b" #!/bin/sh\n"), None, "only at the very start");
    let mut long = b"#!/".to_vec();
    long.extend(std::iter::repeat_n(b'a', 300));
    assert_eq!(parsed(&long), None, "an interpreter cut by the buffer is refused by the kernel");
    let mut long = b"#!/bin/git ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 300));
    assert_eq!(parsed(&long).unwrap().1.unwrap().len(), 255 - 11, "the argument is cut, the last byte left out");
    let mut far = b"#!/bin/git".to_vec();
    far.extend(std::iter::repeat_n(b' ', 300));
    far.extend(b"push\n");
    assert_eq!(parsed(&far), some("/bin/git", None), "what lies past the buffer is not read");
}

#[test]
fn the_elf_interpreter_is_read_from_the_program_headers() {
    let file = File::open("/bin/sh").unwrap();
    let interp = elf_interpreter(&file, &head(&file)).map(|path| String::from_utf8(path).unwrap());
    assert!(interp.as_deref().is_some_and(|path| path.contains("ld-")), "{interp:?}");
    assert_eq!(elf_interpreter(&file, b"#!/bin/sh\n"), None);
}

/// An ELF file of this machine with one `PT_NOTE` header at `at`, holding `notes`.
fn elf(at: u64, notes: &[u8], align: u64) -> tempfile::NamedTempFile {
    let mut bytes = vec![0u8; 64 + 56];
    bytes[..4].copy_from_slice(b"\x7fELF");
    bytes[4] = 2;
    bytes[5] = if cfg!(target_endian = "little") { 1 } else { 2 };
    bytes[32..40].copy_from_slice(&64u64.to_ne_bytes());
    bytes[54..56].copy_from_slice(&56u16.to_ne_bytes());
    bytes[56..58].copy_from_slice(&1u16.to_ne_bytes());
    let header = &mut bytes[64..];
    header[..4].copy_from_slice(&4u32.to_ne_bytes());
    header[8..16].copy_from_slice(&at.to_ne_bytes());
    header[32..40].copy_from_slice(&(notes.len() as u64).to_ne_bytes());
    header[48..56].copy_from_slice(&align.to_ne_bytes());
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(&bytes).unwrap();
    file.as_file().write_all_at(notes, at).unwrap();
    file
}

/// A note: its name and description, each padded to four bytes.
fn note(kind: u32, name: &[u8], desc: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend((name.len() as u32).to_ne_bytes());
    out.extend((desc.len() as u32).to_ne_bytes());
    out.extend(kind.to_ne_bytes());
    for part in [name, desc] {
        out.extend(part);
        out.resize(out.len().div_ceil(4) * 4, 0);
    }
    out
}

fn id_of(file: &tempfile::NamedTempFile) -> Option<Vec<u8>> {
    build_id(file.as_file(), &head(file.as_file()))
}

#[test]
fn the_build_id_is_read_from_the_notes_near_the_start() {
    let id = b"0123456789abcdefghij".to_vec();
    let notes = [note(5, b"GNU\0", &[1; 16]), note(3, b"XYZ\0", &[2; 20]), note(3, b"GNU\0", &id)].concat();
    assert_eq!(id_of(&elf(0x200, &notes, 4)), Some(id.clone()), "after a property note and another vendor's");
    assert_eq!(id_of(&elf(0x3000, &notes, 4)), Some(id.clone()), "past the head, read once");
    assert_eq!(id_of(&elf(2 * 1024 * 1024, &notes, 4)), None, "far into the file: not read");
    assert_eq!(id_of(&elf(0x200, &note(3, b"GNU\0", b"tiny"), 4)), None, "too short to name a build");
    let mut cut = note(3, b"GNU\0", &id);
    cut.truncate(20);
    assert_eq!(id_of(&elf(0x200, &cut, 4)), None, "a note cut short");
    let file = File::open("/bin/sh").unwrap();
    let mut copy = tempfile::NamedTempFile::new().unwrap();
    let mut bytes = std::fs::read("/bin/sh").unwrap();
    bytes.extend(b"appended");
    copy.write_all(&bytes).unwrap();
    assert_eq!(id_of(&copy), build_id(&file, &head(&file)), "a copy with bytes appended keeps it");
}

#[test]
fn gits_command_word_is_past_its_own_options() {
    let words = |list: &[&str]| list.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    let args = words(&["-C", "x", "-c", "a=b", "--no-pager", "--git-dir=y", "psuh", "origin"]);
    assert_eq!(command_word(&args), Some((6, "psuh")));
    assert_eq!(command_word(&words(&["--config-env", "a.b=V", "push"])), Some((2, "push")));
    assert_eq!(command_word(&words(&["--version", "push"])), None);
    assert_eq!(command_word(&words(&["-c", "a=b"])), None);
}

#[test]
fn closeness_is_gits_own() {
    assert_eq!(distance(b"psuh", b"push"), 0, "a swap is free");
    assert_eq!(distance(b"pus", b"push"), 1, "an insertion");
    assert_eq!(distance(b"pash", b"push"), 2, "a substitution");
    assert_eq!(distance(b"pushh", b"push"), 3, "a deletion");
    assert_eq!(distance(b"pull", b"push"), 4);
    for close in ["psuh", "pu", "", "pushh", "pash", "ush"] {
        assert!(similar(close, "push"), "{close}");
    }
    for far in ["status", "fetch", "send", "pushall", "xyz"] {
        assert!(!similar(far, "push"), "{far}");
    }
}
