//! What a body is taken for, how it is decoded and converted, and how its text is paged.

use super::*;

#[test]
fn the_type_decides_unless_the_first_bytes_say_binary() {
    let html = b"<!doctype html><p>x";
    assert_eq!(kind(Some("text/html; charset=utf-8"), html), Kind::Html);
    assert_eq!(kind(Some("application/xhtml+xml"), html), Kind::Html);
    assert_eq!(kind(Some("text/plain"), html), Kind::Text, "plain text is kept as it is");
    assert_eq!(kind(Some("application/json"), b"{\"a\": 1}"), Kind::Text);
    assert_eq!(kind(Some("application/vnd.api+json"), b"{}"), Kind::Text);
    assert_eq!(kind(Some("image/svg+xml"), b"<svg/>"), Kind::Text);
    assert_eq!(kind(Some("text/x-rust"), b"fn main() {}"), Kind::Text);
    assert_eq!(kind(None, html), Kind::Html);
    assert_eq!(kind(Some("application/octet-stream"), b"just words\n"), Kind::Text);
    // A header that lies about HTML does not make a PDF or an image read as text.
    for (head, says) in [
        (&b"%PDF-1.7\n%\xe2\xe3"[..], "a PDF document"),
        (b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10\0\0\0\x08", "an image (PNG image, 16\u{d7}8)"),
        (b"PK\x03\x04rest", "a ZIP archive"),
        (b"<html>\0\0\0", "NUL bytes"),
    ] {
        match kind(Some("text/html"), head) {
            Kind::Binary(what) => assert!(what.contains(says), "{what}"),
            other => panic!("{says}: {other:?}"),
        }
    }
    // A declared binary type is never read as text.
    for declared in ["application/pdf", "application/zip", "video/mp4", "image/avif", "font/woff2"] {
        assert!(matches!(kind(Some(declared), b"<html>"), Kind::Binary(_)), "{declared}");
    }
    assert!(matches!(kind(Some("application/octet-stream"), b"\x01\x02\x03"), Kind::Binary(_)));
    assert_eq!(kind(Some("text/plain"), b"\xff\xfeh\0i\0"), Kind::Text, "UTF-16 holds NUL bytes");
}

#[test]
fn text_is_decoded_from_what_it_declares_or_what_it_is() {
    assert_eq!(decode(b"caf\xe9", Some(Cow::Borrowed("iso-8859-1")), false), "café");
    assert_eq!(decode(b"caf\xe9", None, false), "café", "not UTF-8: windows-1252, as browsers do");
    assert_eq!(decode("café".as_bytes(), None, false), "café");
    assert_eq!(decode(b"\xe4\xbd\xa0\xe5", None, true), "你\u{fffd}", "a character cut at the end is still UTF-8");
    assert_eq!(decode(b"caf\xc3", None, false), "caf\u{c3}", "unless nothing was cut");
    assert_eq!(decode(b"\xff\xfeh\0i\0", None, false), "hi");
    assert_eq!(decode(b"\x82\xa0", Some(Cow::Borrowed("shift_jis")), false), "あ");
    assert_eq!(decode(b"x", Some(Cow::Borrowed("no-such-charset")), false), "x");
    assert_eq!(charset("text/html; Charset=\"ISO-8859-1\"").as_deref(), Some("ISO-8859-1"));
    assert_eq!(charset("text/html"), None);
    let page = b"<html><head><meta http-equiv=\"Content-Type\" content=\"text/html; charset=windows-1251\">";
    assert_eq!(meta_charset(page).as_deref(), Some("windows-1251"));
    assert_eq!(meta_charset(b"<meta charset='koi8-r'>").as_deref(), Some("koi8-r"));
    let (text, _) = convert(&Kind::Html, b"<meta charset=\"koi8-r\"><p>\xf0\xd2\xc9\xd7\xc5\xd4</p>", None, false);
    assert_eq!(text.trim(), "Привет");
}

#[test]
fn html_becomes_markdown_and_text_stays_as_it_is() {
    let page = b"<html><head><title>T</title><script>var x = '<p>no</p>';</script></head><body>\
                 <h1 id=\"top\">Title</h1><p>Some <b>bold</b> and <a href=\"https://x.test/y\">a link</a>.</p>\
                 <ul><li>one<li>two</ul><pre><code class=\"language-rust\">fn main() {}\n</code></pre>\
                 <table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table></body></html>";
    let (markdown, dropped) = convert(&Kind::Html, page, None, false);
    assert_eq!(dropped, 0);
    for expected in ["# Title", "**bold**", "[a link](https://x.test/y)", "- one", "- two", "```rust", "| a | b |"] {
        assert!(markdown.contains(expected), "{expected} in {markdown}");
    }
    assert!(!markdown.contains("no</p>") && !markdown.contains("var x"), "{markdown}");
    assert!(!markdown.contains("<a id"), "no anchors: {markdown}");
    let json = b"{\"a\": [1, 2], \"b\": \"<p>\"}";
    assert_eq!(convert(&Kind::Text, json, None, false).0.as_bytes(), json);
}

fn page_of(text: &str) -> Page {
    Page { text: text.to_owned(), said: "text/plain, 1 KiB".into(), notes: Vec::new() }
}

#[test]
fn long_text_comes_a_page_at_a_time() {
    let url = Url::parse("https://example.test/a").unwrap();
    let short = outcome(&url, None, page_of("hello"), 0);
    assert_eq!(short.output, "[https://example.test/a: text/plain, 1 KiB]\n\nhello");
    assert_eq!(
        short.content,
        [crate::history::ToolContent::Text { text: "[https://example.test/a: text/plain, 1 KiB]".into() }]
    );

    let text: String = "é".repeat(PAGE_CHARS + 10);
    let first = outcome(&url, None, page_of(&text), 0);
    let head = format!("characters 0–{PAGE_CHARS} of {}, fetch again with \"offset\": {PAGE_CHARS}", PAGE_CHARS + 10);
    assert!(first.output.contains(&head), "{}", &first.output[..200]);
    assert!(first.output.chars().count() < crate::history::SNIP_OVER);
    let rest = outcome(&url, None, page_of(&text), PAGE_CHARS as u64);
    assert!(rest.output.contains(&format!("characters {PAGE_CHARS}–{} of", PAGE_CHARS + 10)), "{}", rest.output);
    assert!(!rest.output.contains("fetch again"));
    assert!(rest.output.ends_with(&"é".repeat(10)));
    let past = outcome(&url, None, page_of("abc"), 99);
    assert!(past.output.contains("Offset 99 is past the end of the text (3 characters)"), "{}", past.output);

    let from = Url::parse("http://example.test/").unwrap();
    let mut noted = page_of("x");
    noted.notes.push("only the first 2 MiB were read".into());
    let said = outcome(&url, Some(&from), noted, 0).output;
    assert!(
        said.starts_with(
            "[https://example.test/a (redirected from http://example.test/): text/plain, 1 KiB; only the first 2 MiB were read]"
        ),
        "{said}"
    );
}
