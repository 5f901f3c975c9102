//! `fetch` as the turn sees it: its card, the request its permission is judged on, and the
//! calls refused before anything is reached.

use serde_json::json;

use crate::history::ToolKind;
use crate::permissions::{Permission, Subject};
use crate::tools::{Registry, ToolError, Workspace};

fn parsed(input: serde_json::Value) -> crate::tools::Invocation {
    Registry::builtin().parse("fetch", &input.to_string()).unwrap()
}

#[test]
fn a_fetch_is_judged_by_its_host_and_shown_with_its_url() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path(), &[]);
    let call = parsed(json!({"url": "https://Doc.Rust-Lang.org./std/#x"}));
    assert_eq!(call.kind(), ToolKind::Fetch);
    assert_eq!(call.title(&workspace), "Fetch https://Doc.Rust-Lang.org./std/#x");
    assert!(call.locations(&workspace).is_empty());
    let request = call.permission(&workspace).unwrap();
    assert_eq!(request.permission, Permission::Fetch);
    assert_eq!(request.target, "doc.rust-lang.org");
    assert_eq!(request.subject, Subject::Host { host: "doc.rust-lang.org".into() });
    let paged = parsed(json!({"url": "https://docs.rs/", "offset": 16000}));
    assert_eq!(paged.title(&workspace), "Fetch https://docs.rs/ (from character 16000)");
    assert!(Registry::builtin().names().any(|name| name == "fetch"));
}

#[tokio::test]
async fn a_url_that_is_not_fetched_needs_no_permission_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new(dir.path(), &[]);
    let ctx = crate::tools::tests::context(dir.path());
    for (url, says) in [
        ("file:///etc/passwd", "file: URL"),
        ("ftp://example.com/", "ftp: URL"),
        ("gopher://example.com/", "gopher: URL"),
        ("http://user:secret@example.com/", "user name or password"),
        ("not a url", "is not a URL"),
    ] {
        let call = parsed(json!({"url": url}));
        assert_eq!(call.permission(&workspace), None, "{url}");
        match call.run(&ctx).await {
            Err(ToolError::Tell(why)) => assert!(why.contains(says), "{url}: {why}"),
            other => panic!("{url}: {other:?}"),
        }
    }
    for url in ["http://127.0.0.1:9/", "http://[::1]:9/", "http://2130706433:9/", "http://localhost:9/"] {
        match parsed(json!({"url": url})).run(&ctx).await {
            Err(ToolError::Tell(why)) => assert!(why.contains("loopback"), "{url}: {why}"),
            other => panic!("{url}: {other:?}"),
        }
    }
}
