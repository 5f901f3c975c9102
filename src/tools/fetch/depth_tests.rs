//! The nesting bound: pages within it pass unchanged, deep ones lose their deep tags and keep
//! their text, and pages built to make the walk shallower than the parser's stack still reach
//! the parser no deeper than a small multiple of the bound (measured by parsing them).

use super::*;

/// The deepest element of `html` as the parser builds it.
fn parsed_depth(html: &str) -> usize {
    let document = scraper::Html::parse_document(html);
    let (mut depth, mut deepest) = (0usize, 0usize);
    for edge in document.tree.root().traverse() {
        match edge {
            ego_tree::iter::Edge::Open(_) => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            ego_tree::iter::Edge::Close(_) => depth -= 1,
        }
    }
    deepest
}

#[test]
fn a_page_within_the_bound_passes_unchanged() {
    let sloppy = "<!doctype html><html><head><title>t < u</title><script>if (a<b) { x = '<div>'; }</script>\
                  <style>p > a {}</style></head><body><!-- <div> --><p>one<p>two<ul><li>a<li>b</ul>\
                  <table><tr><td>1<td>2<tr><td>3</table><dl><dt>t<dd>d<dt>u</dl><select><option>x<option>y\
                  </select><svg><path d='M0 0'/><g><circle r=1 /></g></svg><img src=x alt='>'><br></body></html>";
    let page = sloppy.repeat(500);
    let flat = flatten(&page, MAX_DEPTH);
    assert_eq!(flat.dropped, 0);
    assert!(matches!(flat.html, Cow::Borrowed(_)));
}

#[test]
fn a_deep_page_keeps_its_text_and_loses_the_deep_tags() {
    let page = format!("<body>{}deep text{}<p>after</p></body>", "<div>".repeat(1_000), "</div>".repeat(1_000));
    let flat = flatten(&page, MAX_DEPTH);
    assert_eq!(flat.dropped, 2 * (1_000 - MAX_DEPTH));
    assert_eq!(flat.html.matches("<div>").count(), MAX_DEPTH);
    assert_eq!(flat.html.matches("</div>").count(), MAX_DEPTH);
    assert!(flat.html.contains("deep text") && flat.html.contains("<p>after</p>"));
    assert!(parsed_depth(&flat.html) <= MAX_DEPTH + 4);
}

#[test]
fn the_tokenizer_is_followed_where_it_differs_from_a_naive_reading() {
    // A quote inside an attribute name opens nothing; `>` ends the tag.
    let names = format!("<div a\"b>{}", "<div>".repeat(600));
    // A quoted value hides `>`; an unquoted one does not quote.
    let values = format!("<div title='a>b' x=a\"b>{}", "<div>".repeat(600));
    // `<!-->` ends its comment at once.
    let comment = format!("<!-->{}", "<div>".repeat(600));
    // Raw text ends at its end tag, whatever its case.
    let raw = format!("<script>x</SCRIPT >{}", "<div>".repeat(600));
    // `<div/>` opens a div in HTML.
    let slash = "<div/>".repeat(600);
    for page in [names, values, comment, raw, slash] {
        let flat = flatten(&page, MAX_DEPTH);
        assert!(flat.dropped > 0, "{}", &page[..40]);
        assert!(parsed_depth(&flat.html) <= MAX_DEPTH + 4, "{}", &page[..40]);
    }
}

/// Pages written to open elements the walk would think closed. Each is parsed after
/// flattening; none may come out much deeper than the bound.
#[test]
fn pages_built_to_outrun_the_walk_stay_shallow() {
    let n = 4_000;
    let attacks = [
        "<div>".repeat(n),
        "<div/>".repeat(n),
        "<blockquote>".repeat(n),
        "<ul><li>".repeat(n),
        "<li><dd>".repeat(n),
        "<optgroup><option>".repeat(n),
        "<rt>".repeat(n),
        "<b><div></b>".repeat(n),
        "<div><table></div>".repeat(n),
        "<a><table>".repeat(n),
        "<p><b>x</p>".repeat(n),
        "<b><p>x</b>".repeat(n),
        "<span><p></span>".repeat(n),
        "<table><td><div></td>".repeat(n),
        "<i x=1><i x=2><i x=3><i x=4><p>".repeat(n / 4),
        format!("<svg><foreignObject>{}", "<div/>".repeat(n)),
        format!("<svg><foreignObject>{}", "<path/>".repeat(n)),
        format!("<svg><title>{}", "<div>".repeat(n)),
        format!("<svg><desc><style>{}", "<div>".repeat(n)),
        format!("<math><mi><style>{}", "<div>".repeat(n)),
        format!("<select><iframe>{}", "<div>".repeat(n)),
        format!("<select><textarea>{}", "<div>".repeat(n)),
        format!("<template>{}", "<div>".repeat(n)),
        format!("<frameset><iframe>{}", "<div>".repeat(n)),
        "<svg><p>".repeat(n),
        "<math><mtext><b>".repeat(n),
        "<table><caption><div>".repeat(n),
        "<object><p>".repeat(n),
        "<button><p>".repeat(n),
        "<dl><dt><p>".repeat(n),
        "<noscript><div>".repeat(n),
        "<h1><h2>".repeat(n),
        "<form><div>".repeat(n),
        "<tr><div>".repeat(n),
        "<colgroup><col><div>".repeat(n),
    ];
    let mut deep = Vec::new();
    for page in &attacks {
        let flat = flatten(page, MAX_DEPTH);
        let depth = parsed_depth(&flat.html);
        if depth > 3 * MAX_DEPTH {
            deep.push(format!("{}…: {depth} deep", &page[..page.len().min(40)]));
        }
    }
    assert!(deep.is_empty(), "{deep:#?}");
}

#[test]
fn an_unfinished_tag_or_comment_ends_the_walk() {
    for page in ["<div title='never closed", "<!-- never closed <div>", "<div", "</div", "<script>x"] {
        let flat = flatten(page, 1);
        assert_eq!(flat.dropped, 0, "{page}");
    }
}
