//! SHA-256 digests and bytes spelled as lowercase hex: the one spelling that names on disk (a
//! walk's remembered places, a server's secret directory), hook trust records, prompt-cache
//! keys and random names share. A leaf: it imports nothing of cairn, so any module may use it.

use std::fmt::Write as _;

/// `bytes` as lowercase hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

/// The SHA-256 digest of `bytes`.
pub fn sha256(bytes: &[u8]) -> ring::digest::Digest {
    ring::digest::digest(&ring::digest::SHA256, bytes)
}

/// The SHA-256 digest of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(sha256(bytes).as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_and_bytes_are_spelled_in_lowercase_hex() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(hex(&[0, 0x0f, 0xa0, 0xff]), "000fa0ff");
        assert_eq!(hex(&[]), "");
    }
}
