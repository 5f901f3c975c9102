//! `GET /acp` upgraded to a WebSocket (RFC 6455's handshake on hyper, the socket then
//! tokio-tungstenite's), naming the connection in `Acp-Connection-Id`; a handshake of another
//! version is answered 400, and one past the connection cap 503. Also the bodies every answer of
//! `/acp` is made of. (Requests from web pages are refused before they come here, by `http`:
//! browsers send an `Origin` header with every WebSocket handshake, programs do not, and a page
//! the user visits could otherwise open a socket to this loopback port and drive the agent,
//! tools and all.)

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use super::auth::Grant;
use super::{Server, socket};

/// What every answer carries: a whole body, or an event stream.
pub type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::convert::Infallible>;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

pub fn empty() -> Body {
    full(Bytes::new())
}

/// An answer with `status` and a line saying why, and what to do.
pub fn text(status: StatusCode, why: &str) -> Response<Body> {
    let mut response = Response::new(full(format!("{why}\n")));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// Whether `name` lists `token` (comma-separated, any case), as `Connection: keep-alive, Upgrade`.
fn lists(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|part| part.trim().eq_ignore_ascii_case(token))
}

/// Whether a request asks to become a WebSocket (`Connection: upgrade`, `Upgrade: websocket`).
pub fn asks_to_upgrade(headers: &HeaderMap) -> bool {
    lists(headers, header::CONNECTION, "upgrade") && lists(headers, header::UPGRADE, "websocket")
}

/// The answer to a `GET` that asks to upgrade, let in for `grant`; the upgrade starts serving
/// the connection once hyper hands it over.
pub fn answer(request: Request<Incoming>, server: &Server, grant: Grant) -> Response<Body> {
    let headers = request.headers();
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY).map(HeaderValue::as_bytes) else {
        return text(StatusCode::BAD_REQUEST, "a WebSocket handshake needs a Sec-WebSocket-Key header");
    };
    if headers.get(header::SEC_WEBSOCKET_VERSION).and_then(|value| value.to_str().ok()) != Some("13") {
        let mut response = text(StatusCode::BAD_REQUEST, "only WebSocket version 13 is spoken here");
        response.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        return response;
    }
    let slot = match super::seat::take(server, &grant.principal) {
        Ok(seat) => seat,
        Err(why) => return text(StatusCode::SERVICE_UNAVAILABLE, &why),
    };
    let accept = derive_accept_key(key);
    let connection = crate::ids::new_id("conn");
    let (Ok(accept), Ok(named)) = (HeaderValue::from_str(&accept), HeaderValue::from_str(&connection)) else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "cairn could not name the connection");
    };
    tracing::debug!(%connection, "a client connected");
    let (server, heartbeat) = (server.clone(), server.limits.heartbeat);
    tokio::spawn(async move {
        let upgraded = match hyper::upgrade::on(request).await {
            Ok(upgraded) => upgraded,
            Err(err) => return tracing::debug!(%connection, %err, "the upgrade did not complete"),
        };
        let config = WebSocketConfig::default()
            .max_message_size(Some(socket::MAX_FRAME))
            .max_frame_size(Some(socket::MAX_FRAME));
        let socket =
            tokio_tungstenite::WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, Some(config))
                .await;
        socket::serve(socket, server.sessions, server.hub, connection, heartbeat, grant).await;
        drop(slot);
    });
    let mut response = Response::new(empty());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let out = response.headers_mut();
    out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    out.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    out.insert(super::http::CONNECTION_HEADER, named);
    response
}
