//! The fixture over streamable HTTP, served in the test's process: each POSTed request is
//! answered with one JSON body, notifications with 202; there is no stream to GET.

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;

use super::fixture::{Action, Fixture};

/// Serves the fixture at `http://127.0.0.1:<port>/mcp`; returns that URL.
pub async fn serve() -> String {
    let app = Router::new().route("/mcp", post(answer).get(|| async { StatusCode::METHOD_NOT_ALLOWED }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{address}/mcp")
}

/// A server that answers 404 to everything; returns a URL on it.
pub async fn not_found() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, Router::new()).await;
    });
    format!("http://{address}/mcp")
}

/// A URL where nothing listens.
pub async fn refused() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{address}/mcp")
}

async fn answer(body: String) -> Response {
    let Ok(message) = serde_json::from_str::<Value>(&body) else { return StatusCode::BAD_REQUEST.into_response() };
    // Stateless: what `grow` changes is not kept between requests.
    match Fixture::default().handle(&message) {
        Action::Send(messages) if message.get("id").is_some() => {
            ([(header::CONTENT_TYPE, "application/json")], messages[0].to_string()).into_response()
        }
        _ => StatusCode::ACCEPTED.into_response(),
    }
}
