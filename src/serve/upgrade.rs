//! The one route of `cairn serve`: `GET /acp` upgraded to a WebSocket (RFC 6455's handshake on
//! hyper, the socket then tokio-tungstenite's), naming the connection in `Acp-Connection-Id`.
//! Everything else is answered with a status and a line saying what to do: another path 404,
//! another method 405, a request that does not ask to upgrade 426, a request from a web page
//! 403 (any `Origin` header: browsers send one with every WebSocket handshake, programs do not;
//! a page the user visits could otherwise open a socket to this loopback port and drive the
//! agent, tools and all), and one past the connection cap 503.

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use super::listen::Slot;
use super::{Server, socket};

/// What every answer carries.
pub type Body = Full<Bytes>;

/// The header naming a connection, on the upgrade's answer.
const CONNECTION_HEADER: &str = "acp-connection-id";

fn text(status: StatusCode, why: &str) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(format!("{why}\n"))));
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

/// The answer to `request`; an upgrade starts serving the connection once hyper hands it over.
pub fn answer(request: Request<Incoming>, server: &Server) -> Response<Body> {
    if request.uri().path() != "/acp" {
        return text(StatusCode::NOT_FOUND, "cairn serve answers at /acp only");
    }
    let grant = match super::auth::grant(server, request.headers()) {
        Ok(grant) => grant,
        Err(refused) => return *refused,
    };
    if request.method() != Method::GET {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "/acp speaks ACP over WebSocket (GET with Upgrade: websocket); the HTTP profile is not served yet",
        );
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    let headers = request.headers();
    if let Some(origin) = headers.get(header::ORIGIN) {
        tracing::info!(origin = ?origin, "refused a connection from a web page");
        return text(
            StatusCode::FORBIDDEN,
            "cairn serve takes no connections from web pages (the request has an Origin header): a page could \
             drive the agent; connect from a program",
        );
    }
    let key = headers.get(header::SEC_WEBSOCKET_KEY).map(HeaderValue::as_bytes);
    let upgrading = lists(headers, header::CONNECTION, "upgrade") && lists(headers, header::UPGRADE, "websocket");
    let (Some(key), true) = (key, upgrading) else {
        let mut response = text(
            StatusCode::UPGRADE_REQUIRED,
            "/acp speaks ACP over WebSocket: send GET with Upgrade: websocket (the HTTP profile is not served yet)",
        );
        response.headers_mut().insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        return response;
    };
    if headers.get(header::SEC_WEBSOCKET_VERSION).and_then(|value| value.to_str().ok()) != Some("13") {
        let mut response = text(StatusCode::BAD_REQUEST, "only WebSocket version 13 is spoken here");
        response.headers_mut().insert(header::SEC_WEBSOCKET_VERSION, HeaderValue::from_static("13"));
        return response;
    }
    let Some(slot) = Slot::take(&server.open, server.limits.connections) else {
        let why = format!(
            "cairn serve has {} connections open, its limit (--max-connections); try again later",
            server.limits.connections
        );
        return text(StatusCode::SERVICE_UNAVAILABLE, &why);
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
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let out = response.headers_mut();
    out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    out.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    out.insert(CONNECTION_HEADER, named);
    response
}
