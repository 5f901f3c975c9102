//! A web server for `fetch`, on 127.0.0.1 (which `fetch` refuses unless `[fetch] allow_private`
//! is set): pages, text and JSON, bodies that lie about their type, other character sets, a body
//! without end, a server that stalls, and redirects (to a page, in a loop, to a metadata
//! address, to a file), a SearXNG instance and Brave's search API answering queries, and pages
//! put there by the caller ([`Pages::put`]: the benchmark's). It
//! counts the requests and the body bytes it sent.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt as _;

/// The page `/page` serves.
pub const PAGE: &str = "<!doctype html><html><head><title>Docs</title><script>var hidden = 1;</script></head>\
    <body><nav><a href=\"/\">Home</a></nav><h1>Fetch works</h1><p>Some <b>bold</b> text and \
    <a href=\"https://example.test/more\">a link</a>.</p><ul><li>one</li><li>two</li></ul>\
    <pre><code class=\"language-rust\">fn main() {}\n</code></pre></body></html>";

#[derive(Default)]
struct Counts {
    requests: AtomicUsize,
    sent: AtomicUsize,
    /// Pages put by the caller, by path, served as HTML.
    put: std::sync::Mutex<std::collections::HashMap<String, Bytes>>,
}

pub struct Pages {
    /// `http://127.0.0.1:PORT`, without a trailing slash.
    pub base: String,
    pub port: u16,
    counts: Arc<Counts>,
}

impl Pages {
    pub async fn start() -> Self {
        let counts = Arc::new(Counts::default());
        let app = Router::new()
            .route("/page", get(|| async { html(PAGE) }))
            .route("/text", get(|| async { typed("text/plain; charset=utf-8", "plain *text* <b>kept</b>\n") }))
            .route("/json", get(|| async { typed("application/json", "{\"answer\": 42, \"html\": \"<p>\"}") }))
            .route("/pdf", get(|| async { typed("application/pdf", "%PDF-1.7\n%\u{e2}\u{e3}\n1 0 obj") }))
            .route("/lying", get(|| async { typed("text/html", "%PDF-1.7\n1 0 obj <<>> endobj") }))
            .route("/nul", get(|| async { typed("text/html", "<html>\0\0\0\u{1}binary") }))
            .route("/latin1", get(|| async { bytes("text/html; charset=iso-8859-1", b"<p>caf\xe9 cr\xe8me</p>") }))
            .route("/undeclared", get(|| async { bytes("text/plain", b"na\xefve caf\xe9\n") }))
            .route("/huge", get(huge))
            .route("/slow", get(slow))
            .route("/stall", get(stall))
            .route("/missing", get(|| async { (StatusCode::NOT_FOUND, html("<h1>No such page</h1>")) }))
            .route("/redirect", get(redirect))
            .route("/searx", get(searx))
            .route("/searx-off", get(|| async { (StatusCode::FORBIDDEN, html("<h1>403 Forbidden</h1>")) }))
            .route("/brave", get(brave))
            .route("/loop", get(|| async { moved("/loop") }))
            .route("/metadata", get(|| async { moved("http://169.254.169.254/latest/meta-data") }))
            .route("/file", get(|| async { moved("file:///etc/passwd") }))
            .fallback(put_page)
            .layer(axum::middleware::from_fn_with_state(Arc::clone(&counts), count))
            .with_state(Arc::clone(&counts));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the page server");
        let port = listener.local_addr().expect("page server address").port();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { base: format!("http://127.0.0.1:{port}"), port, counts }
    }

    /// `path` on this server.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Serves `html` at `path` from now on.
    pub fn put(&self, path: &str, html: String) {
        self.counts.put.lock().unwrap().insert(path.to_owned(), Bytes::from(html));
    }

    /// Requests served so far.
    pub fn requests(&self) -> usize {
        self.counts.requests.load(Ordering::SeqCst)
    }

    /// Body bytes of `/huge` sent so far.
    pub fn sent(&self) -> usize {
        self.counts.sent.load(Ordering::SeqCst)
    }
}

async fn count(
    State(counts): State<Arc<Counts>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    counts.requests.fetch_add(1, Ordering::SeqCst);
    next.run(request).await
}

async fn put_page(State(counts): State<Arc<Counts>>, uri: axum::http::Uri) -> Response {
    match counts.put.lock().unwrap().get(uri.path()).cloned() {
        Some(body) => ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

fn html(text: &'static str) -> Response {
    typed("text/html; charset=utf-8", text)
}

fn typed(content_type: &'static str, text: &'static str) -> Response {
    ([(header::CONTENT_TYPE, content_type)], text).into_response()
}

fn bytes(content_type: &'static str, body: &'static [u8]) -> Response {
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

fn moved(to: &str) -> Response {
    (StatusCode::FOUND, [(header::LOCATION, to.to_owned())]).into_response()
}

async fn redirect(Query(query): Query<std::collections::HashMap<String, String>>) -> Response {
    moved(query.get("to").map_or("/page", String::as_str))
}

/// A SearXNG instance's JSON answer to `q` (with `format=json`): two results naming the query,
/// and one the tool must skip (no http URL).
async fn searx(Query(query): Query<std::collections::HashMap<String, String>>) -> Response {
    if query.get("format").map(String::as_str) != Some("json") {
        return (StatusCode::FORBIDDEN, "json only").into_response();
    }
    let q = query.get("q").cloned().unwrap_or_default();
    axum::Json(serde_json::json!({"query": q, "results": [
        {"url": "https://one.example/", "title": format!("One about {q}"), "content": "the <b>first</b> hit"},
        {"url": "javascript:alert(1)", "title": "skipped"},
        {"url": "https://two.example/", "title": "Two", "content": "the second"}]}))
    .into_response()
}

/// Brave's search API: the key in `X-Subscription-Token` must be `brave-key`.
async fn brave(
    headers: axum::http::HeaderMap,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> Response {
    if headers.get("x-subscription-token").and_then(|v| v.to_str().ok()) != Some("brave-key") {
        return (StatusCode::UNAUTHORIZED, "bad key").into_response();
    }
    let (q, count) = (query.get("q").cloned().unwrap_or_default(), query.get("count").cloned().unwrap_or_default());
    axum::Json(serde_json::json!({"web": {"results": [
        {"url": "https://brave.example/", "title": format!("Brave: {q} ({count})"), "description": "found"}]}}))
    .into_response()
}

/// 64 MiB of text, 64 KiB at a time, counting what leaves.
async fn huge(State(counts): State<Arc<Counts>>) -> Response {
    let chunk = Bytes::from("<p>".to_owned() + &"lorem ipsum ".repeat(64 * 1024 / 12) + "</p>\n");
    let stream = futures::stream::iter(0..1_024).map(move |_| {
        counts.sent.fetch_add(chunk.len(), Ordering::SeqCst);
        Ok::<_, std::convert::Infallible>(chunk.clone())
    });
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(header::CONTENT_TYPE, "text/html".parse().unwrap());
    response
}

/// A page that starts, then stops sending for a minute.
async fn slow() -> Response {
    let first = futures::stream::once(async { Ok::<_, std::convert::Infallible>(Bytes::from("<p>early part</p>")) });
    let then = futures::stream::once(async {
        tokio::time::sleep(Duration::from_secs(60)).await;
        Ok(Bytes::from("<p>late part</p>"))
    });
    let mut response = Response::new(Body::from_stream(first.chain(then)));
    response.headers_mut().insert(header::CONTENT_TYPE, "text/html".parse().unwrap());
    response
}

/// No answer for a minute.
async fn stall() -> Response {
    tokio::time::sleep(Duration::from_secs(60)).await;
    html("<p>too late</p>")
}
