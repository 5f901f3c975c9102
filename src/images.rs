//! A leaf: the image budget, the numbers that must agree about how much image data one image,
//! one turn's tool calls and one request may carry. `read` caps each image file
//! (`tools::image`, `[tools] image_max_bytes`, checked by `config`) and counts what a turn's
//! calls read against the turn's budget; an MCP result's larger images are named, not shown
//! (`mcp::content`); each request carries the newest images up to the request's budget and
//! sends older ones as a line each (`history::view`). A step's images must always fit one
//! request, or the step would lose the images it just read: the assertions below keep the
//! numbers from drifting apart.

/// How long `bytes` bytes are once base64 (what an API is sent and counts).
pub const fn base64_len(bytes: u64) -> u64 {
    bytes.div_ceil(3) * 4
}

/// The largest image, base64, any of the APIs takes: Anthropic refuses one over 5 MiB, the
/// strictest limit of the three.
pub const IMAGE_BASE64_MAX: u64 = 5 << 20;
/// The default of `[tools] image_max_bytes`, the largest image file `read` sends: the largest
/// file whose base64 form is [`IMAGE_BASE64_MAX`].
pub const DEFAULT_IMAGE_MAX_BYTES: u64 = IMAGE_BASE64_MAX / 4 * 3;

/// The most image bytes the tool calls of one turn (its sub-agents' included) read: what a turn
/// adds to the history, and holds in memory, stays bounded however many images the model asks
/// for. Also the largest `[tools] image_max_bytes` may be.
pub const TURN_IMAGE_BYTES: u64 = 15 * 1024 * 1024;
/// The most images the tool calls of one turn read.
pub const TURN_IMAGES: u64 = 20;

/// At most this many images go with one request, the newest: APIs refuse requests with many
/// more (Anthropic: 100, and smaller images past 20), and a refused request would be sent again
/// with every prompt.
pub const REQUEST_IMAGES: usize = 20;
/// At most this much image data (base64) goes with one request: Anthropic refuses requests over
/// 32 MB.
pub const REQUEST_IMAGE_BYTES: usize = 20 * 1024 * 1024;

// One step's images fit one request: a turn reads no more images, nor bytes once base64, than
// one request carries.
const _: () = assert!(TURN_IMAGES as usize <= REQUEST_IMAGES);
const _: () = assert!(base64_len(TURN_IMAGE_BYTES) <= REQUEST_IMAGE_BYTES as u64);
// An image of the default cap is one every API takes, and one a turn can read.
const _: () = assert!(base64_len(DEFAULT_IMAGE_MAX_BYTES) <= IMAGE_BASE64_MAX);
const _: () = assert!(DEFAULT_IMAGE_MAX_BYTES <= TURN_IMAGE_BYTES);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_len_is_the_length_of_the_encoded_text() {
        use base64::Engine as _;
        for n in 0..10u64 {
            let text = base64::engine::general_purpose::STANDARD.encode(vec![0u8; n as usize]);
            assert_eq!(base64_len(n), text.len() as u64, "{n} bytes");
        }
        assert_eq!(base64_len(DEFAULT_IMAGE_MAX_BYTES), IMAGE_BASE64_MAX, "the default cap is the API's limit");
    }
}
