//! Telling images by their first bytes and reading their dimensions from the header.

use super::*;

/// The first bytes of a PNG of `width`×`height`: signature, then the IHDR chunk.
pub fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    bytes.extend(width.to_be_bytes());
    bytes.extend(height.to_be_bytes());
    bytes.extend([8, 6, 0, 0, 0, 0, 0, 0, 0]);
    bytes
}

fn gif(width: u16, height: u16) -> Vec<u8> {
    let mut bytes = b"GIF89a".to_vec();
    bytes.extend(width.to_le_bytes());
    bytes.extend(height.to_le_bytes());
    bytes.extend([0, 0, 0]);
    bytes
}

fn webp(chunk: &[u8; 4], body: &[u8]) -> Vec<u8> {
    let mut bytes = b"RIFF\0\0\0\0WEBP".to_vec();
    bytes.extend(chunk);
    bytes.extend((body.len() as u32).to_le_bytes());
    bytes.extend(body);
    bytes
}

/// A JPEG whose frame header comes after an APP1 segment of `metadata` bytes.
fn jpeg(width: u16, height: u16, metadata: usize) -> Vec<u8> {
    let mut bytes = vec![0xFF, 0xD8, 0xFF, 0xE1];
    bytes.extend(u16::try_from(metadata + 2).unwrap().to_be_bytes());
    bytes.extend(std::iter::repeat_n(0xAB, metadata));
    // Fill bytes before the next marker are allowed.
    bytes.extend([0xFF, 0xFF, 0xC2, 0x00, 0x11, 0x08]);
    bytes.extend(height.to_be_bytes());
    bytes.extend(width.to_be_bytes());
    bytes.extend([3, 1, 0x22, 0]);
    bytes
}

#[test]
fn images_are_told_by_their_magic_bytes_not_their_names() {
    assert_eq!(sniff(&png(1, 1)), Some(Format::Png));
    assert_eq!(sniff(&jpeg(1, 1, 4)), Some(Format::Jpeg));
    assert_eq!(sniff(b"GIF87a\x01\0\x01\0"), Some(Format::Gif));
    assert_eq!(sniff(&gif(1, 1)), Some(Format::Gif));
    assert_eq!(sniff(&webp(b"VP8X", &[0; 10])), Some(Format::Webp));
    for not_an_image in
        [&b"hello, world"[..], b"", b"\x89PN", b"RIFF\0\0\0\0WAVEfmt ", b"GIF90a", b"\xFF\xD8", b"%PDF-1.7"]
    {
        assert_eq!(sniff(not_an_image), None, "{not_an_image:?}");
    }
    let mime: Vec<&str> = [Format::Png, Format::Jpeg, Format::Gif, Format::Webp].map(Format::mime_type).to_vec();
    assert_eq!(mime, ["image/png", "image/jpeg", "image/gif", "image/webp"]);
}

#[test]
fn dimensions_come_from_each_formats_header() {
    assert_eq!(dimensions(Format::Png, &png(640, 480)), Some((640, 480)));
    assert_eq!(dimensions(Format::Gif, &gif(300, 20)), Some((300, 20)));
    assert_eq!(dimensions(Format::Jpeg, &jpeg(1920, 1080, 4000)), Some((1920, 1080)));
    // Lossy: frame tag (3 bytes), start code, then 14-bit width and height with scaling bits.
    let lossy = webp(b"VP8 ", &[0x50, 0x02, 0x00, 0x9D, 0x01, 0x2A, 0x80, 0x02, 0xE0, 0xC1]);
    assert_eq!(dimensions(Format::Webp, &lossy), Some((640, 480)));
    // Lossless: signature, then (width - 1) and (height - 1) in 14 bits each.
    let bits: u32 = 99 | (49 << 14);
    let mut lossless = vec![0x2F];
    lossless.extend(bits.to_le_bytes());
    assert_eq!(dimensions(Format::Webp, &webp(b"VP8L", &lossless)), Some((100, 50)));
    // Extended: flags, reserved, then (width - 1) and (height - 1) in 24 bits each.
    let extended = [0, 0, 0, 0, 0x3F, 0x1F, 0, 0x3F, 0x1F, 0];
    assert_eq!(dimensions(Format::Webp, &webp(b"VP8X", &extended)), Some((8_000, 8_000)));
}

#[test]
fn a_header_cut_short_or_not_understood_has_no_dimensions() {
    assert_eq!(dimensions(Format::Png, &png(640, 480)[..20]), None);
    assert_eq!(dimensions(Format::Jpeg, &jpeg(10, 10, 4000)[..2000]), None, "the frame is past the bytes read");
    assert_eq!(dimensions(Format::Jpeg, &[0xFF, 0xD8, 0xFF, 0xDA, 0, 2]), None, "scan data before any frame");
    assert_eq!(dimensions(Format::Jpeg, &[0xFF, 0xD8, 0x00, 0x00]), None, "not a marker");
    assert_eq!(dimensions(Format::Webp, &webp(b"ALPH", &[0; 10])), None);
    assert_eq!(describe(Format::Png, Some((2, 3)), 2048), "PNG image, 2×3, 2.0 KiB");
    assert_eq!(describe(Format::Webp, None, 100), "WebP image, 100 bytes");
}
