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

#[test]
fn the_command_for_a_smaller_copy_quotes_a_path_the_shell_would_split() {
    assert!(smaller_copy("docs/a.png").contains("`magick docs/a.png -resize"));
    assert!(smaller_copy("my shot's.png").contains(r"`magick 'my shot'\''s.png' -resize"));
}

fn context(dir: &Path, images: Images) -> ToolContext {
    ToolContext {
        workspace: super::super::Workspace::new(dir, &[]),
        host: std::sync::Arc::new(super::super::NoEditor),
        cancel: tokio_util::sync::CancellationToken::new(),
        progress: None,
        process: std::sync::Arc::default(),
        rejected: Vec::new(),
        rulebook: None,
        caller: None,
        call_id: "call_test".into(),
        user_wait: super::super::host::UserWait::default(),
        images,
        read_rejections: Vec::new(),
        judged: None,
        trace: None,
        fetch: super::super::Fetching::default(),
        jobs: super::super::Jobs::none(),
        lsp: super::super::Lsp::none(),
        checks: std::sync::Arc::default(),
    }
}

async fn run(ctx: &ToolContext, path: &str) -> Result<ToolOutcome, ToolError> {
    let input = serde_json::json!({ "path": path }).to_string();
    super::super::Registry::builtin().parse("read", &input)?.run(ctx).await
}

#[tokio::test]
async fn read_sends_an_image_whole_to_a_model_that_takes_images() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = png(2, 3);
    bytes.extend([0u8; 40]);
    // Named as text: the bytes decide.
    std::fs::write(dir.path().join("shot.txt"), &bytes).unwrap();
    std::fs::write(dir.path().join("notes.png"), "not a picture\n").unwrap();
    let ctx = context(dir.path(), Images::new(true, 1024));
    let outcome = run(&ctx, "shot.txt").await.unwrap();
    assert_eq!(outcome.output, "shot.txt: PNG image, 2×3, 73 bytes (the image follows).");
    let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(outcome.images, [ToolImage { mime_type: "image/png".into(), data }]);
    let text = run(&ctx, "notes.png").await.unwrap();
    assert_eq!((text.output.as_str(), text.images.len()), ("     1\tnot a picture\n", 0), "a text file stays text");
}

#[tokio::test]
async fn an_image_over_the_cap_or_too_wide_is_refused_saying_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let mut big = gif(10, 10);
    big.resize(2_000, 0);
    std::fs::write(dir.path().join("big.gif"), &big).unwrap();
    std::fs::write(dir.path().join("wide.png"), png(9_000, 10)).unwrap();
    let ctx = context(dir.path(), Images::new(true, 1_000));
    let refused = run(&ctx, "big.gif").await.unwrap_err().to_string();
    for said in
        ["big.gif is a GIF image, 10×10, 2.0 KiB", "images over 1000 bytes", "[tools] image_max_bytes", "magick"]
    {
        assert!(refused.contains(said), "{said}: {refused}");
    }
    let wide = run(&ctx, "wide.png").await.unwrap_err().to_string();
    assert!(wide.contains("9000×10 PNG image") && wide.contains("over 8000 pixels"), "{wide}");
    assert_eq!(std::fs::read(dir.path().join("big.gif")).unwrap(), big, "nothing is changed");
}

#[tokio::test]
async fn a_model_without_images_is_told_what_the_file_is() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("photo.jpg"), jpeg(1920, 1080, 200)).unwrap();
    // Sparse: the size without the disk space.
    std::fs::File::options().write(true).open(dir.path().join("photo.jpg")).unwrap().set_len(10_000_000).unwrap();
    let ctx = context(dir.path(), Images::new(false, 1_000));
    let outcome = run(&ctx, "photo.jpg").await.unwrap();
    assert!(outcome.images.is_empty());
    assert!(outcome.output.starts_with("photo.jpg is a JPEG image, 1920×1080, 9.5 MiB."), "{}", outcome.output);
    assert!(outcome.output.contains("does not accept images"), "{}", outcome.output);
}

#[tokio::test]
async fn an_image_whose_header_cannot_be_read_is_not_sent() {
    let dir = tempfile::tempdir().unwrap();
    let mut cut = png(2, 3);
    cut.truncate(12);
    std::fs::write(dir.path().join("cut.png"), &cut).unwrap();
    let ctx = context(dir.path(), Images::new(true, 1024));
    let refused = run(&ctx, "cut.png").await.unwrap_err();
    assert!(refused.to_string().contains("its size in pixels cannot be read from its header"), "{refused}");
    assert!(refused.to_string().contains("magick cut.png -resize"), "{refused}");
}

#[tokio::test]
async fn a_jpeg_whose_frame_comes_after_long_metadata_is_measured_from_the_whole_file() {
    let dir = tempfile::tempdir().unwrap();
    // Two metadata segments (each at most 64 KiB) before the frame: past the header cairn probes.
    let mut photo = jpeg(30, 20, 60_000);
    let mut second = vec![0xFF, 0xE2];
    second.extend(60_002u16.to_be_bytes());
    second.extend(std::iter::repeat_n(0xCD, 60_000));
    photo.splice(2..2, second);
    std::fs::write(dir.path().join("photo.jpg"), photo).unwrap();
    let ctx = context(dir.path(), Images::new(true, 1024 * 1024));
    let outcome = run(&ctx, "photo.jpg").await.unwrap();
    assert!(outcome.output.contains("JPEG image, 30×20"), "{}", outcome.output);
}

#[tokio::test]
async fn a_turn_reads_a_bounded_amount_of_images_and_the_model_is_told_when_it_is_spent() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("shot.png"), png(2, 3)).unwrap();
    let images = Images::new(true, 1024);
    images.read.bytes.store(super::TURN_IMAGE_BYTES - 10, std::sync::atomic::Ordering::Release);
    let ctx = context(dir.path(), images.clone());
    let refused = run(&ctx, "shot.png").await.unwrap_err();
    assert!(refused.to_string().contains("this turn's calls have already read 15.0 MiB of images"), "{refused}");
    assert_eq!(images.read.bytes(), super::TURN_IMAGE_BYTES - 10, "nothing counted");
    assert_eq!(images.read.count.load(std::sync::atomic::Ordering::Acquire), 0, "nothing counted");

    images.read.bytes.store(0, std::sync::atomic::Ordering::Release);
    let sent = run(&ctx, "shot.png").await.unwrap();
    assert_eq!(sent.images.len(), 1);
    assert_eq!(images.read.bytes(), png(2, 3).len() as u64, "counted once read");

    // An image refused after its bytes were counted (its header is cut) gives them back.
    let mut cut = png(2, 3);
    cut.truncate(12);
    std::fs::write(dir.path().join("cut.png"), &cut).unwrap();
    run(&ctx, "cut.png").await.unwrap_err();
    assert_eq!(images.read.bytes(), png(2, 3).len() as u64, "only what was sent");

    // At most TURN_IMAGES images a turn, however small.
    images.read.count.store(super::TURN_IMAGES, std::sync::atomic::Ordering::Release);
    let refused = run(&ctx, "shot.png").await.unwrap_err();
    assert!(refused.to_string().contains("at most 20 images"), "{refused}");
}
