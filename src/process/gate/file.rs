//! What the gate reads of a program's file, as the kernel reads it: the `#!` line (interpreter
//! and its one optional argument), the ELF interpreter (`PT_INTERP`), the GNU build id (the
//! `NT_GNU_BUILD_ID` note the linker writes, which names one build of a program whatever is
//! appended to its file or changed in its data), whether two files hold the same bytes, and the
//! other names a file has by hard link in the directories searched. Only the first page of a
//! file is read per exec ([`head`]), and a note past it only when it is small and near.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::{DirEntryExt, FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The kernel's buffer for the `#!` line (`BINPRM_BUF_SIZE`).
const SHEBANG: usize = 256;
/// `PT_INTERP`, the program header naming the ELF interpreter.
const PT_INTERP: u32 = 3;
/// Longest interpreter path read.
const MAX_INTERPRETER: usize = 4096;
/// What is read of a candidate's start: the `#!` line, the ELF header and, normally, its program
/// headers and notes.
pub const HEAD: usize = 4096;
/// `PT_NOTE`, a program header of notes.
const PT_NOTE: u32 = 4;
/// `NT_GNU_BUILD_ID`, the note type of a build id.
const NT_GNU_BUILD_ID: u32 = 3;
/// Notes read past the head only when they end before this offset and are at most this long.
const NOTES_WITHIN: u64 = 64 * 1024;
const MAX_NOTES: usize = 4096;

/// The first [`HEAD`] bytes of `file` (fewer if it is shorter).
pub fn head(file: &File) -> Vec<u8> {
    let mut head = vec![0u8; HEAD];
    let mut filled = 0;
    while filled < HEAD {
        match file.read_at(&mut head[filled..], filled as u64) {
            Ok(0) | Err(_) => break,
            Ok(n) => filled += n,
        }
    }
    head.truncate(filled);
    head
}

/// The interpreter and its optional argument that the kernel takes from a `#!` line at the
/// start of `head`, parsed as `fs/binfmt_script.c` does: the line ends at a newline or at the
/// end of the 256-byte buffer; the interpreter is the first word (up to a space, tab or NUL);
/// the rest of the line, trimmed of spaces and tabs at both ends and cut at a NUL, is one
/// argument, spaces and all.
pub fn shebang(head: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let mut buf = [0u8; SHEBANG];
    let n = head.len().min(SHEBANG);
    buf[..n].copy_from_slice(&head[..n]);
    if !buf.starts_with(b"#!") {
        return None;
    }
    let spacetab = |b: u8| b == b' ' || b == b'\t';
    // The kernel looks for the newline with `strnchr`, which stops at a NUL.
    let end = match buf.iter().take_while(|b| **b != 0).position(|b| *b == b'\n') {
        Some(end) => end,
        None => {
            // Without a newline the kernel wants the interpreter's name ended inside the
            // buffer, and leaves out its last byte.
            let name = buf[2..].iter().position(|b| !spacetab(*b))? + 2;
            buf[name..].iter().position(|b| spacetab(*b) || *b == 0)?;
            SHEBANG - 1
        }
    };
    let mut end = end;
    while end > 2 && spacetab(buf[end - 1]) {
        end -= 1;
    }
    let line = &buf[2..end];
    let line = &line[line.iter().position(|b| !spacetab(*b))?..];
    let sep = line.iter().position(|b| spacetab(*b) || *b == 0);
    let name = line[..sep.unwrap_or(line.len())].to_vec();
    let argument = sep.filter(|at| line[*at] != 0).and_then(|at| {
        let rest = &line[at..];
        let rest = &rest[rest.iter().position(|b| !spacetab(*b))?..];
        Some(rest[..rest.iter().position(|b| *b == 0).unwrap_or(rest.len())].to_vec())
    });
    Some((name, argument))
}

/// The program headers of an ELF file of this machine's class and byte order: their bytes and
/// the size of one. The kernel takes at most a page of them.
fn program_headers(file: &File, head: &[u8]) -> Option<(Vec<u8>, usize)> {
    let native = if cfg!(target_endian = "little") { 1 } else { 2 };
    if head.len() < 64 || !head.starts_with(b"\x7fELF") || head[4] != 2 || head[5] != native {
        return None;
    }
    let (phoff, phentsize, phnum) = (u64_at(head, 32)?, usize::from(u16_at(head, 54)?), usize::from(u16_at(head, 56)?));
    if phentsize < 56 || phentsize * phnum > 4096 {
        return None;
    }
    let mut headers = vec![0u8; phentsize * phnum];
    match usize::try_from(phoff).ok().and_then(|at| head.get(at..at.checked_add(headers.len())?)) {
        Some(inside) => headers.copy_from_slice(inside),
        None => file.read_exact_at(&mut headers, phoff).ok()?,
    }
    Some((headers, phentsize))
}

fn u16_at(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// Whether `head` starts an ELF file.
pub fn is_elf(head: &[u8]) -> bool {
    head.starts_with(b"\x7fELF")
}

/// The interpreter an ELF file of this machine's class and byte order names (`PT_INTERP`):
/// the kernel loads and starts it with the program's own arguments.
pub fn elf_interpreter(file: &File, head: &[u8]) -> Option<Vec<u8>> {
    let (headers, size) = program_headers(file, head)?;
    let interp = headers.chunks_exact(size).find(|h| u32_at(h, 0) == Some(PT_INTERP))?;
    let (offset, size) = (u64_at(interp, 8)?, usize::try_from(u64_at(interp, 32)?).ok()?);
    let mut path = vec![0u8; size.min(MAX_INTERPRETER)];
    file.read_exact_at(&mut path, offset).ok()?;
    // The kernel refuses a path that is not NUL-terminated within the header's size.
    let end = path.iter().position(|b| *b == 0)?;
    path.truncate(end);
    Some(path)
}

/// The GNU build id of an ELF file of this machine's class and byte order: the description of
/// its `NT_GNU_BUILD_ID` note ("GNU"), at least 8 bytes long. Notes are read from `head` when
/// they lie in it, else with one read when they are small and near the start.
pub fn build_id(file: &File, head: &[u8]) -> Option<Vec<u8>> {
    let (headers, size) = program_headers(file, head)?;
    for header in headers.chunks_exact(size).filter(|h| u32_at(h, 0) == Some(PT_NOTE)) {
        let (offset, length, align) = (u64_at(header, 8)?, u64_at(header, 32)?, u64_at(header, 48)?);
        let end = offset.checked_add(length)?;
        let length = usize::try_from(length).ok()?;
        let notes = match usize::try_from(offset).ok().and_then(|at| head.get(at..at.checked_add(length)?)) {
            Some(inside) => inside.to_vec(),
            None if end <= NOTES_WITHIN && length <= MAX_NOTES => {
                let mut notes = vec![0u8; length];
                file.read_exact_at(&mut notes, offset).ok()?;
                notes
            }
            None => continue,
        };
        if let Some(id) = gnu_build_id(&notes, if align == 8 { 8 } else { 4 }) {
            return Some(id);
        }
    }
    None
}

/// The build id among `notes` (each a name size, a description size and a type, then the name
/// and the description, each padded to `align`).
fn gnu_build_id(notes: &[u8], align: usize) -> Option<Vec<u8>> {
    let padded = |n: usize| n.checked_add(align - 1).map(|n| n / align * align);
    let mut at = 0;
    while at + 12 <= notes.len() {
        let (name_size, desc_size) =
            (usize::try_from(u32_at(notes, at)?).ok()?, usize::try_from(u32_at(notes, at + 4)?).ok()?);
        let kind = u32_at(notes, at + 8)?;
        let name_at = at + 12;
        let desc_at = name_at.checked_add(padded(name_size)?)?;
        let desc = notes.get(desc_at..desc_at.checked_add(desc_size)?)?;
        if kind == NT_GNU_BUILD_ID && notes.get(name_at..name_at + name_size) == Some(b"GNU\0") {
            return (8..=64).contains(&desc.len()).then(|| desc.to_vec());
        }
        at = desc_at.checked_add(padded(desc_size)?)?;
    }
    None
}

/// Whether two files hold the same bytes (their sizes already equal).
pub fn same_content(original: &File, candidate: &File) -> bool {
    let (mut a, mut b) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    let mut offset = 0u64;
    loop {
        let (Ok(n), Ok(m)) = (original.read_at(&mut a, offset), candidate.read_at(&mut b, offset)) else {
            return false;
        };
        if n != m || a[..n] != b[..m] {
            return false;
        }
        if n == 0 {
            return true;
        }
        offset += n as u64;
    }
}

/// The other names of the file at `path` (a program called `name`) by hard link: in `dirs`,
/// its own directory, and where a program keeps its helpers beside it (`../libexec/git-core`).
/// Found by inode number from the directory listing first, so a large directory costs one read.
pub fn other_links(path: &Path, name: &str, dirs: &[PathBuf]) -> Vec<PathBuf> {
    let Ok(meta) = std::fs::metadata(path) else { return Vec::new() };
    if meta.nlink() < 2 {
        return Vec::new();
    }
    let mut places: Vec<PathBuf> = dirs.to_vec();
    if let Some(dir) = path.parent() {
        places.push(dir.to_path_buf());
        if let Some(prefix) = dir.parent() {
            for lib in ["lib", "libexec"] {
                places.push(prefix.join(lib).join(name));
                places.push(prefix.join(lib).join(format!("{name}-core")));
            }
        }
    }
    let mut seen = HashSet::new();
    let mut found = Vec::new();
    for place in places {
        let Ok(real) = std::fs::canonicalize(&place) else { continue };
        if !seen.insert(real.clone()) {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&real) else { continue };
        for entry in entries.flatten() {
            if entry.ino() != meta.ino() {
                continue;
            }
            let link = entry.path();
            let same = std::fs::symlink_metadata(&link).is_ok_and(|m| m.is_file() && m.dev() == meta.dev());
            if same && link != path && !found.contains(&link) {
                found.push(link);
            }
        }
    }
    found
}
