//! A git index read for one thing: the paths of its gitlinks (entries of mode `160000`, which
//! git takes for submodules and enters at `git status`). The sweep (`gitlinks.rs`) reads the
//! index of every repository it knows and cleans the repositories those paths hold.
//!
//! The reading errs on the side of more gitlinks, never fewer: whatever git would take for a
//! gitlink is one here too. Versions 2, 3 and 4 (v4's paths compressed against the previous
//! one's) are read with SHA-1's and SHA-256's object names alike (the repository's
//! configuration says which, and a command may have written it), and the gitlinks of every
//! reading that gets to the end are kept; the blocks an index entry offset table (`IEOT`, which
//! git reads on several threads instead of front to back) names are read as well, and a split
//! index's `link` names the shared index whose entries count too. A path is cut at its first
//! NUL, as git's system calls would cut it. An index no reading gets through is
//! [`Unread::Malformed`], and so is a gitlink path git itself never writes (`..`, `.`, an empty
//! part, a leading `/`, a `.git` part): git would follow `../elsewhere` out of the work tree to
//! run `git status` there. The checksum at the end is not checked: a wrong one only makes git
//! refuse the index, which runs nothing.

/// Why an index could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unread {
    #[error("it does not start as a git index does")]
    Header,
    #[error("it is of version {0}, which git does not read")]
    Version(u32),
    #[error("its entries do not fit in it as git reads them")]
    Malformed,
    #[error("it stages a submodule at `{0}`, a path git itself never writes")]
    Path(String),
}

/// What one index names.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Gitlinks {
    /// The paths of its gitlinks, relative to the work tree.
    pub paths: Vec<Vec<u8>>,
    /// The shared index a split index names (`sharedindex.<hex>` beside it).
    pub shared: Option<String>,
}

const SIGNATURE: &[u8] = b"DIRC";
/// The object names' sizes git knows (SHA-1, SHA-256).
const HASH_SIZES: [usize; 2] = [20, 32];
/// The stat fields, mode among them, before an entry's object name.
const STAT: usize = 40;
const GITLINK: u32 = 0o160_000;
const FILE_TYPE: u32 = 0o170_000;
const EXTENDED: u16 = 0x4000;
const NAME_MASK: u16 = 0x0fff;

/// The gitlinks of the index `bytes` (see the top).
pub fn gitlinks(bytes: &[u8]) -> Result<Gitlinks, Unread> {
    if bytes.len() < 12 || &bytes[..4] != SIGNATURE {
        return Err(Unread::Header);
    }
    let version = be32(bytes, 4).ok_or(Unread::Header)?;
    if !(2..=4).contains(&version) {
        return Err(Unread::Version(version));
    }
    let mut out = Gitlinks::default();
    let mut read_through = false;
    for hash in HASH_SIZES {
        if let Some(found) = reading(bytes, version, hash) {
            read_through = true;
            for path in found.paths {
                if !out.paths.contains(&path) {
                    out.paths.push(path);
                }
            }
            out.shared = out.shared.or(found.shared);
        }
    }
    if !read_through {
        return Err(Unread::Malformed);
    }
    if let Some(bad) = out.paths.iter().find(|path| !plain(path)) {
        return Err(Unread::Path(String::from_utf8_lossy(bad).into_owned()));
    }
    Ok(out)
}

/// The index read with object names of `hash` bytes; `None` where it does not fit.
fn reading(bytes: &[u8], version: u32, hash: usize) -> Option<Gitlinks> {
    let count = usize::try_from(be32(bytes, 8)?).ok()?;
    let end = bytes.len().checked_sub(hash)?;
    let mut out = Gitlinks::default();
    let after = entries(bytes, 12, count, version, hash, end, &mut out.paths)?;
    // The extensions, front to back: each a signature and a size.
    let mut at = after;
    while at + 8 <= end {
        let size = usize::try_from(be32(bytes, at + 4)?).ok()?;
        let data = bytes.get(at + 8..(at + 8).checked_add(size)?)?;
        if &bytes[at..at + 4] == b"link" {
            let name = data.get(..hash)?;
            if name.iter().any(|byte| *byte != 0) {
                out.shared = Some(crate::digest::hex(name));
            }
        }
        at += 8 + size;
    }
    // Git reads the blocks an offset table names instead, where its end-of-index entry says
    // where the extensions start.
    if let Some(table) = offset_table(bytes, hash, end) {
        for (offset, count) in table {
            entries(bytes, offset, count, version, hash, end, &mut out.paths)?;
        }
    }
    Some(out)
}

/// Reads `count` entries from `at`, adding the gitlinks' paths to `paths`; where they end.
fn entries(
    bytes: &[u8],
    mut at: usize,
    count: usize,
    version: u32,
    hash: usize,
    end: usize,
    paths: &mut Vec<Vec<u8>>,
) -> Option<usize> {
    // Each entry takes at least its fixed part: a count that cannot fit is refused first.
    if count > end.saturating_sub(at) / (STAT + hash + 2) {
        return None;
    }
    // The previous entry's name (v4 names are made from it), kept in one buffer; at a block's
    // start a v4 entry strips nothing, whatever it says.
    let mut name: Vec<u8> = Vec::new();
    let mut first = true;
    for _ in 0..count {
        let mode = be32(bytes, at + 24)?;
        let flags_at = at + STAT + hash;
        let flags = u16::from_be_bytes(bytes.get(flags_at..flags_at + 2)?.try_into().ok()?);
        let name_at = if flags & EXTENDED != 0 { flags_at + 4 } else { flags_at + 2 };
        let length = usize::from(flags & NAME_MASK);
        let gitlink = mode & FILE_TYPE == GITLINK;
        let next = if version == 4 {
            let (strip, suffix_at) = varint(bytes, name_at, end)?;
            let kept = if first { 0 } else { name.len().checked_sub(strip)? };
            let suffix_len = if length == usize::from(NAME_MASK) {
                bytes.get(suffix_at..end)?.iter().position(|byte| *byte == 0)?
            } else {
                length.checked_sub(kept)?
            };
            name.truncate(kept);
            name.extend_from_slice(bytes.get(suffix_at..suffix_at + suffix_len)?);
            suffix_at + suffix_len + 1
        } else {
            let length = if length == usize::from(NAME_MASK) {
                bytes.get(name_at..end)?.iter().position(|byte| *byte == 0)?
            } else {
                length
            };
            let own = bytes.get(name_at..name_at + length)?;
            if gitlink {
                name.clear();
                name.extend_from_slice(own);
            }
            // Padded with NULs to a multiple of eight bytes, one NUL at least.
            at + ((name_at - at + length + 8) & !7)
        };
        if next > end {
            return None;
        }
        if gitlink {
            let cut = name.iter().position(|byte| *byte == 0).unwrap_or(name.len());
            paths.push(name[..cut].to_vec());
        }
        first = false;
        at = next;
    }
    Some(at)
}

/// The blocks of entries (offset, count) an `IEOT` names, found from the `EOIE` entry at the
/// end; `None` where there is none.
fn offset_table(bytes: &[u8], hash: usize, end: usize) -> Option<Vec<(usize, usize)>> {
    let eoie = end.checked_sub(8 + 4 + hash)?;
    if bytes.get(eoie..eoie + 4)? != b"EOIE" || usize::try_from(be32(bytes, eoie + 4)?).ok()? != 4 + hash {
        return None;
    }
    let mut at = usize::try_from(be32(bytes, eoie + 8)?).ok()?;
    while at + 8 <= end {
        let size = usize::try_from(be32(bytes, at + 4)?).ok()?;
        if bytes.get(at..at + 4)? == b"IEOT" {
            let data = bytes.get(at + 12..(at + 8).checked_add(size)?)?;
            return Some(
                data.chunks_exact(8)
                    .filter_map(|pair| {
                        Some((usize::try_from(be32(pair, 0)?).ok()?, usize::try_from(be32(pair, 4)?).ok()?))
                    })
                    .collect(),
            );
        }
        at = at.checked_add(8 + size)?;
    }
    None
}

/// Git's varint of v4 paths (each continuation adds one before shifting); the value and where
/// it ends.
fn varint(bytes: &[u8], mut at: usize, end: usize) -> Option<(usize, usize)> {
    let mut value: usize = 0;
    loop {
        if at >= end {
            return None;
        }
        let byte = bytes[at];
        at += 1;
        value = value.checked_add(usize::from(byte & 0x7f))?;
        if byte & 0x80 == 0 {
            return Some((value, at));
        }
        value = value.checked_add(1)?.checked_mul(128)?;
    }
}

fn be32(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// Whether `path` is one git writes: relative, no empty, `.` or `..` part, no `.git` part.
pub fn plain(path: &[u8]) -> bool {
    !path.is_empty()
        && path
            .split(|byte| *byte == b'/')
            .all(|part| !part.is_empty() && part != b"." && part != b".." && !part.eq_ignore_ascii_case(b".git"))
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
