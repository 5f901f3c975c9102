//! Pictures through `read`: a PNG, JPEG, GIF or WebP file goes to the model as an image.
//!
//! A file is an image by its first bytes (its magic number), whatever its name says. Images are
//! always read from the local disk, because the editor's `fs/read_text_file` carries text only;
//! the path is the one `read` resolved and the permission judged, so the workspace boundary is
//! the same as for text. A model that accepts images gets the file whole, base64, beside a line
//! naming it; a file over the cap (`[tools] image_max_bytes`) or with a side over
//! [`MAX_SIDE`] pixels is refused with what to do instead (nothing is resized: that would need an
//! image codec in the binary). A model that does not accept images is told what the file is
//! (format, dimensions from the header, size) and that it cannot view it.
//!
//! Whether the model accepts images, the cap, and what the turn's calls have read so far come
//! with the call ([`Images`], `ToolContext::images`): one turn's calls, its sub-agents' included,
//! read at most [`TURN_IMAGES`] images and [`TURN_IMAGE_BYTES`] (`crate::images`); an image past
//! that is not sent, and the model is told to work from those already read.

use std::io::Read as _;
use std::path::Path;

use base64::Engine as _;

use super::fs::{cannot_read, open_regular};
use super::page::human_size;
use super::{ToolContext, ToolError, ToolOutcome, blocking};
use crate::history::ToolImage;
use crate::images::{DEFAULT_IMAGE_MAX_BYTES, TURN_IMAGE_BYTES, TURN_IMAGES};

/// The longest side an image may have; Anthropic refuses larger ones.
pub const MAX_SIDE: u32 = 8_000;
/// How much of a file is enough to tell an image by its first bytes.
const MAGIC: u64 = 32;
/// How much of an image is read for its dimensions when the image itself is not sent (a JPEG's
/// frame header comes after its metadata, which is usually smaller than this).
const HEADER_PROBE: u64 = 64 * 1024;

/// What the model in use does with images a tool returns.
#[derive(Clone, Debug)]
pub struct Images {
    /// The model accepts images.
    pub accepted: bool,
    /// The largest image file it is sent, in bytes (`[tools] image_max_bytes`).
    pub max_bytes: u64,
    /// What the turn's calls have read so far (shared by its calls and its sub-agents').
    pub read: std::sync::Arc<ImagesRead>,
}

/// The images a turn's calls have read: how many, and their bytes.
#[derive(Debug, Default)]
pub struct ImagesRead {
    bytes: std::sync::atomic::AtomicU64,
    count: std::sync::atomic::AtomicU64,
}

impl ImagesRead {
    /// The image bytes read so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Images {
    pub fn new(accepted: bool, max_bytes: u64) -> Self {
        Self { accepted, max_bytes, read: std::sync::Arc::default() }
    }

    /// Counts one more image of `size` bytes read in this turn until the returned reservation
    /// is dropped unkept; `None` (counting nothing) when that would pass [`TURN_IMAGES`] or
    /// [`TURN_IMAGE_BYTES`].
    fn reserve(&self, size: u64) -> Option<Reserved> {
        use std::sync::atomic::Ordering;
        let fits = |limit: u64, add: u64| move |now: u64| (now + add <= limit).then_some(now + add);
        self.read.count.fetch_update(Ordering::AcqRel, Ordering::Acquire, fits(TURN_IMAGES, 1)).ok()?;
        if self.read.bytes.fetch_update(Ordering::AcqRel, Ordering::Acquire, fits(TURN_IMAGE_BYTES, size)).is_err() {
            self.read.count.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Reserved { read: std::sync::Arc::clone(&self.read), size, kept: false })
    }
}

/// An image counted for the turn: given back when dropped, unless the image was sent.
struct Reserved {
    read: std::sync::Arc<ImagesRead>,
    size: u64,
    kept: bool,
}

impl Reserved {
    /// The image is sent, `size` bytes of it: they stay counted.
    fn keep(mut self, size: u64) {
        use std::sync::atomic::Ordering;
        if size < self.size {
            self.read.bytes.fetch_sub(self.size - size, Ordering::AcqRel);
        }
        self.kept = true;
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        if !self.kept {
            self.read.bytes.fetch_sub(self.size, std::sync::atomic::Ordering::AcqRel);
            self.read.count.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

impl Default for Images {
    fn default() -> Self {
        Self::new(false, DEFAULT_IMAGE_MAX_BYTES)
    }
}

/// The image formats every API takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Png,
    Jpeg,
    Gif,
    Webp,
}

impl Format {
    pub fn mime_type(self) -> &'static str {
        match self {
            Format::Png => "image/png",
            Format::Jpeg => "image/jpeg",
            Format::Gif => "image/gif",
            Format::Webp => "image/webp",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Png => "PNG",
            Format::Jpeg => "JPEG",
            Format::Gif => "GIF",
            Format::Webp => "WebP",
        }
    }
}

/// The format of a file that starts with `head`, if it is one of the images models take.
pub fn sniff(head: &[u8]) -> Option<Format> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some(Format::Png)
    } else if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        Some(Format::Jpeg)
    } else if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        Some(Format::Gif)
    } else if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        Some(Format::Webp)
    } else {
        None
    }
}

/// Width and height in pixels, read from the header in `bytes` (the file's start); `None` when
/// the header is not there or not understood.
pub fn dimensions(format: Format, bytes: &[u8]) -> Option<(u32, u32)> {
    let be16 = |at: usize| Some(u32::from(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?])));
    let le16 = |at: usize| Some(u32::from(u16::from_le_bytes([*bytes.get(at)?, *bytes.get(at + 1)?])));
    let le24 = |at: usize| Some(u32::from_le_bytes([*bytes.get(at)?, *bytes.get(at + 1)?, *bytes.get(at + 2)?, 0]));
    let be32 = |at: usize| Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?));
    match format {
        Format::Png if bytes.get(12..16)? == b"IHDR" => Some((be32(16)?, be32(20)?)),
        Format::Png => None,
        Format::Gif => Some((le16(6)?, le16(8)?)),
        Format::Webp => match bytes.get(12..16)? {
            // Lossy: a key frame's start code, then 14-bit width and height.
            b"VP8 " if bytes.get(23..26)? == [0x9D, 0x01, 0x2A] => Some((le16(26)? & 0x3FFF, le16(28)? & 0x3FFF)),
            // Lossless: a signature byte, then 14 bits each of width - 1 and height - 1.
            b"VP8L" if *bytes.get(20)? == 0x2F => {
                let bits = u32::from_le_bytes(bytes.get(21..25)?.try_into().ok()?);
                Some(((bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1))
            }
            // Extended: 24 bits each of width - 1 and height - 1.
            b"VP8X" => Some((le24(24)? + 1, le24(27)? + 1)),
            _ => None,
        },
        Format::Jpeg => jpeg_dimensions(bytes, &be16),
    }
}

/// A JPEG's size, from its first start-of-frame segment (the segments before it are skipped by
/// their lengths).
fn jpeg_dimensions(bytes: &[u8], be16: &dyn Fn(usize) -> Option<u32>) -> Option<(u32, u32)> {
    let mut at = 2;
    loop {
        if *bytes.get(at)? != 0xFF {
            return None;
        }
        let marker = *bytes.get(at + 1)?;
        match marker {
            // Fill bytes before a marker.
            0xFF => at += 1,
            // Markers without a segment.
            0x01 | 0xD0..=0xD7 => at += 2,
            // The image data or its end came before any frame.
            0xD9 | 0xDA => return None,
            // Start of frame (but DHT, JPG and DAC share the range): length, precision, height, width.
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => return Some((be16(at + 7)?, be16(at + 5)?)),
            _ => at += 2 + usize::try_from(be16(at + 2)?).ok()?,
        }
    }
}

/// What the file is, in a few words: `PNG image, 640×480, 12.3 KiB`.
pub fn describe(format: Format, dimensions: Option<(u32, u32)>, size: u64) -> String {
    match dimensions {
        Some((width, height)) => format!("{} image, {width}×{height}, {}", format.name(), human_size(size)),
        None => format!("{} image, {}", format.name(), human_size(size)),
    }
}

/// `read` of `path` when it holds an image: `None` when it does not (or does not exist), so the
/// text reader handles it as before.
pub(super) async fn read(ctx: &ToolContext, path: &Path, shown: &str) -> Result<Option<ToolOutcome>, ToolError> {
    let (path, shown, images) = (path.to_owned(), shown.to_owned(), ctx.images.clone());
    let roots = ctx.workspace.roots().to_vec();
    blocking(ctx, move |_| {
        let Some((file, size)) = open_regular(&roots, &path, &shown)? else { return Ok(None) };
        let mut head = Vec::new();
        (&file).take(MAGIC).read_to_end(&mut head).map_err(|err| cannot_read(&shown, &err))?;
        let Some(format) = sniff(&head) else { return Ok(None) };
        (&file).take(HEADER_PROBE).read_to_end(&mut head).map_err(|err| cannot_read(&shown, &err))?;
        let found = dimensions(format, &head);
        if !images.accepted {
            let output = format!(
                "{shown} is a {}. The model in use does not accept images, so the picture cannot be shown to it; \
                 ask the user what it shows if that matters. (If the model does take images, set `images = true` \
                 under its [models.\"provider/model\"] table in config.toml.)",
                describe(format, found, size)
            );
            return Ok(Some(ToolOutcome { output, ..ToolOutcome::default() }));
        }
        if size > images.max_bytes {
            return Err(too_large(&shown, format, found, size, images.max_bytes));
        }
        let Some(reserved) = images.reserve(size) else {
            return Err(ToolError::Tell(format!(
                "{shown} is not sent: this turn's calls have already read {} of images, and one turn reads at most \
                 {TURN_IMAGES} images and {}. Work from the images already read; more can be read after the next \
                 prompt.",
                human_size(images.read.bytes()),
                human_size(TURN_IMAGE_BYTES)
            )));
        };
        let mut bytes = head;
        let rest = (images.max_bytes + 1).saturating_sub(bytes.len() as u64);
        (&file).take(rest).read_to_end(&mut bytes).map_err(|err| cannot_read(&shown, &err))?;
        let size = bytes.len() as u64;
        if size > images.max_bytes {
            // It grew since it was measured.
            return Err(too_large(&shown, format, found, size, images.max_bytes));
        }
        // A JPEG's frame may come after more metadata than the header read holds.
        let found = found.or_else(|| dimensions(format, &bytes));
        let Some((width, height)) = found else {
            // A header cairn cannot read is likely one the model's API cannot either, and a
            // refused image would be sent again with every later request.
            return Err(ToolError::Tell(format!(
                "{shown} starts like a {} image, but its size in pixels cannot be read from its header: it may \
                 be damaged or of an unusual kind, and is not sent to the model. {}",
                format.name(),
                smaller_copy(&shown)
            )));
        };
        if width.max(height) > MAX_SIDE {
            return Err(ToolError::Tell(format!(
                "{shown} is a {width}×{height} {} image; images with a side over {MAX_SIDE} pixels are not sent to \
                 the model. {}",
                format.name(),
                smaller_copy(&shown)
            )));
        }
        let output = format!("{shown}: {} (the image follows).", describe(format, found, size));
        reserved.keep(size);
        let data = base64::engine::general_purpose::STANDARD.encode(&bytes);
        let image = ToolImage { mime_type: format.mime_type().to_owned(), data };
        Ok(Some(ToolOutcome { output, images: vec![image], ..ToolOutcome::default() }))
    })
    .await
}

fn too_large(shown: &str, format: Format, found: Option<(u32, u32)>, size: u64, cap: u64) -> ToolError {
    ToolError::Tell(format!(
        "{shown} is a {}; images over {} are not sent to the model ([tools] image_max_bytes in config.toml). {}",
        describe(format, found, size),
        human_size(cap),
        smaller_copy(shown)
    ))
}

/// What to do with an image too large to send.
fn smaller_copy(shown: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._/-+,@".contains(c);
    let path = if shown.chars().all(plain) { shown.to_owned() } else { format!("'{}'", shown.replace('\'', r"'\''")) };
    format!(
        "Make a smaller copy and read that instead, e.g. with ImageMagick: \
         `magick {path} -resize '1568x1568>' -quality 85 smaller.jpg`."
    )
}

#[cfg(test)]
#[path = "image_tests.rs"]
mod tests;
