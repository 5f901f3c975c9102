//! `/acp`, the one endpoint of `cairn serve`, and its Streamable HTTP profile (the transport
//! RFD's routing table): `POST` sends one JSON-RPC message (`initialize` is answered 200 with
//! the result and the `Acp-Connection-Id` naming the new connection; anything else 202 at
//! once), `GET` with `Accept: text/event-stream` opens the connection's event stream or, with
//! `Acp-Session-Id`, a session's, and `DELETE` ends the connection. A `GET` that asks to upgrade
//! becomes a WebSocket (`upgrade`).
//!
//! Requests the profile does not take are answered with its statuses and a line saying what to
//! do: 400 (not one JSON-RPC object, an id neither a string nor a number, no connection id, a
//! session-scoped method without `Acp-Session-Id` or naming another session than its params),
//! 404 (an unknown connection or session, another principal's included), 406 (a `GET` that
//! takes no event stream), 408 (a body slower than a minute), 409 (a stream that cannot go on
//! from the `Last-Event-ID` given), 413 (over 64 MiB; over 1 MiB for a POST naming no
//! connection, which can only be an `initialize`), 415 (not JSON), 501 (a batch), 503 (at the
//! connection cap, or at a connection's cap of session streams). The connection a POST names is
//! looked up before its body is read. Requests from web pages (any `Origin`
//! header) are refused as for the WebSocket. Ending a connection, by `DELETE` or otherwise, only
//! detaches it from its sessions: their turns go on.

mod connection;
mod stream;

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;

use http_body_util::{BodyExt, Limited, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{self, HeaderMap, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::session::Principal;

use self::connection::{Command, Handle, Refused, Scope};
use super::Server;
use super::auth::Grant;
use super::upgrade::{self, Body, text};

/// The header naming a connection.
pub const CONNECTION_HEADER: &str = "acp-connection-id";
/// The header naming the session a request is about.
const SESSION_HEADER: &str = "acp-session-id";
/// How long `initialize` may take to be answered.
const INITIALIZE_TIME: Duration = Duration::from_secs(30);
/// How long a POST's body may take to arrive.
const BODY_TIME: Duration = Duration::from_secs(60);
/// The largest `initialize`: what a POST without a connection may send.
const INITIALIZE_MOST: usize = 1024 * 1024;
/// No session id is longer; a longer one names no session.
const MAX_SESSION_ID: usize = 128;

/// The methods about one session whose `POST` must name it in `Acp-Session-Id` (those of the
/// SDKs).
const SESSION_SCOPED: [&str; 5] =
    ["session/prompt", "session/cancel", "session/set_mode", "session/set_config_option", "session/close"];

/// The Streamable HTTP connections open now, by id.
#[derive(Default)]
pub struct Connections {
    open: Mutex<HashMap<String, Handle>>,
}

impl Connections {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Handle>> {
        self.open.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn get(&self, id: &str) -> Option<Handle> {
        self.lock().get(id).cloned()
    }

    fn remove(&self, id: &str) {
        self.lock().remove(id);
    }
}

/// The answer to any request.
pub async fn answer(request: Request<Incoming>, server: &Server) -> Response<Body> {
    let version = request.version();
    if request.uri().path() != "/acp" {
        return unread(text(StatusCode::NOT_FOUND, "cairn serve answers at /acp only"), version);
    }
    let grant = match super::auth::grant(server, request.headers()) {
        Ok(grant) => grant,
        Err(refused) => return unread(*refused, version),
    };
    if let Some(origin) = request.headers().get(header::ORIGIN) {
        tracing::info!(origin = ?origin, "refused a request from a web page");
        let why = "cairn serve takes no requests from web pages (the request has an Origin header): a page could \
                   drive the agent; connect from a program";
        return unread(text(StatusCode::FORBIDDEN, why), version);
    }
    match *request.method() {
        Method::POST => post(request, server, grant).await,
        Method::GET if upgrade::asks_to_upgrade(request.headers()) => upgrade::answer(request, server, grant),
        Method::GET => events(request.headers(), server, &grant.principal).await,
        Method::DELETE => delete(request.headers(), server, &grant.principal).await,
        _ => {
            let mut response = text(
                StatusCode::METHOD_NOT_ALLOWED,
                "/acp takes POST (a JSON-RPC message), GET (an event stream, or Upgrade: websocket) and DELETE",
            );
            response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, POST, DELETE"));
            unread(response, version)
        }
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|value| value.to_str().ok()).map(str::trim).filter(|value| !value.is_empty())
}

/// The connection a request for `principal` names, or the status and reason saying it does not
/// (another principal's connection is, to it, one that does not exist).
fn connection_of(
    headers: &HeaderMap,
    server: &Server,
    principal: &Principal,
) -> Result<(String, Handle), (StatusCode, String)> {
    let Some(id) = header(headers, CONNECTION_HEADER) else {
        let why =
            "no Acp-Connection-Id header: POST initialize first, then send the id it answers with on every request";
        return Err((StatusCode::BAD_REQUEST, why.to_owned()));
    };
    match server.http.get(id).filter(|handle| handle.principal == *principal) {
        Some(handle) => Ok((id.to_owned(), handle)),
        None => Err((
            StatusCode::NOT_FOUND,
            format!("no connection {id}: it ended or never was; POST initialize to open a new one"),
        )),
    }
}

/// Whether `session` exists on this server for `principal` (another's session does not).
async fn session_exists(server: &Server, principal: &Principal, session: &str) -> bool {
    if session.len() > MAX_SESSION_ID {
        return false;
    }
    let id = crate::ids::SessionId::from_string(session.to_owned());
    let store = server.sessions.store();
    principal.sees(store, &id) && matches!(store.session(&id).await, Ok(Some(_)))
}

fn unknown_session(session: &str) -> Response<Body> {
    text(StatusCode::NOT_FOUND, &format!("no session {session}; session/list shows the sessions there are"))
}

/// The parts of a posted message the transport looks at.
#[derive(Deserialize)]
struct Posted<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct About {
    #[serde(rename = "sessionId")]
    session_id: Option<String>,
}

async fn post(request: Request<Incoming>, server: &Server, grant: Grant) -> Response<Body> {
    let json = header(request.headers(), header::CONTENT_TYPE.as_str())
        .and_then(|value| value.split(';').next())
        .is_some_and(|kind| kind.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        let why = "POST one JSON-RPC message with Content-Type: application/json";
        return unread(text(StatusCode::UNSUPPORTED_MEDIA_TYPE, why), request.version());
    }
    let (parts, body) = request.into_parts();
    // The connection is looked up before its body is read; a POST naming none can only be an
    // `initialize`, which is small.
    let connection = match header(&parts.headers, CONNECTION_HEADER) {
        Some(_) => match connection_of(&parts.headers, server, &grant.principal) {
            Ok(found) => Some(found),
            Err((status, why)) => return unread(text(status, &why), parts.version),
        },
        None => None,
    };
    let most = if connection.is_some() { super::socket::MAX_FRAME } else { INITIALIZE_MOST };
    let read = tokio::time::timeout(BODY_TIME, Limited::new(body, most).collect()).await;
    let Ok(read) = read else {
        let why = format!("the body did not arrive within {BODY_TIME:?}");
        return unread(text(StatusCode::REQUEST_TIMEOUT, &why), parts.version);
    };
    let body = match read {
        Ok(body) => body.to_bytes(),
        Err(err) if err.is::<http_body_util::LengthLimitError>() => {
            let why = match connection {
                Some(_) => format!("a message is at most {} MiB; send a smaller one", super::socket::MAX_FRAME >> 20),
                None => format!(
                    "a POST without Acp-Connection-Id is an initialize, at most {} KiB; POST initialize first",
                    INITIALIZE_MOST >> 10
                ),
            };
            return unread(text(StatusCode::PAYLOAD_TOO_LARGE, &why), parts.version);
        }
        Err(err) => return text(StatusCode::BAD_REQUEST, &format!("the body could not be read: {err}")),
    };
    match body.iter().find(|byte| !byte.is_ascii_whitespace()) {
        Some(b'{') => {}
        Some(b'[') => {
            return text(StatusCode::NOT_IMPLEMENTED, "batches are not taken; POST one JSON-RPC message at a time");
        }
        _ => return text(StatusCode::BAD_REQUEST, "the body is not a JSON-RPC message (a JSON object)"),
    }
    let posted: Posted = match serde_json::from_slice(&body) {
        Ok(posted) => posted,
        Err(err) => return text(StatusCode::BAD_REQUEST, &format!("the body is not JSON: {err}")),
    };
    // The peer answers an id of another kind with a null id, which no route could be found by.
    if posted
        .id
        .is_some_and(|id| !matches!(id.get().trim_start().as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9' | b'n')))
    {
        return text(StatusCode::BAD_REQUEST, "a JSON-RPC id is a string or a number");
    }
    let line = super::one_line(&String::from_utf8_lossy(&body));
    let key = posted.id.map(connection::key);
    let Some((id, handle)) = connection else {
        if let (Some(key), Some("initialize")) = (&key, posted.method.as_deref()) {
            return initialize(server, key.clone(), line, grant).await;
        }
        let why =
            "no Acp-Connection-Id header: POST initialize first, then send the id it answers with on every request";
        return text(StatusCode::BAD_REQUEST, why);
    };
    let named = header(&parts.headers, SESSION_HEADER);
    // Every POST tells the connection its client is there: a routed request, or `Heard`.
    let mut routed = false;
    if let Some(method) = posted.method.as_deref() {
        // Parsed as the handlers parse it (a duplicate key is refused), so that the header and
        // the params cannot name two sessions.
        let params = posted.params.filter(|raw| raw.get().trim() != "null");
        let about = match params.map(|raw| serde_json::from_str::<About>(raw.get())).transpose() {
            Ok(about) => about,
            Err(err) => {
                return text(
                    StatusCode::BAD_REQUEST,
                    &format!("the params are not a JSON object as {method} takes: {err}"),
                );
            }
        };
        let in_params = about.and_then(|about| about.session_id);
        if SESSION_SCOPED.contains(&method) && named.is_none() {
            let why = format!("{method} is about one session: name it in the Acp-Session-Id header");
            return text(StatusCode::BAD_REQUEST, &why);
        }
        if let (Some(named), Some(in_params)) = (named, &in_params)
            && named != in_params
        {
            let why = format!("Acp-Session-Id names {named} but the message is about {in_params}; send one session");
            return text(StatusCode::BAD_REQUEST, &why);
        }
        if let Some(named) = named
            && !session_exists(server, &grant.principal, named).await
        {
            return unknown_session(named);
        }
        if let Some(key) = key {
            // The answer follows what the request named: on a session's stream (when it has one
            // here) it comes after the updates it caused, a load's replay included.
            let scope = match named.or(in_params.as_deref()) {
                Some(session) if session.len() <= MAX_SESSION_ID => Scope::Session(session.to_owned()),
                _ => Scope::Connection,
            };
            if handle.commands.send(Command::Route { key, scope }).await.is_err() {
                return ended(&id);
            }
            routed = true;
        }
    }
    if !routed && handle.commands.send(Command::Heard).await.is_err() {
        return ended(&id);
    }
    if handle.input.send(line).await.is_err() {
        return ended(&id);
    }
    let mut response = Response::new(upgrade::empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}

/// An answer given before the request's body was read whole: over HTTP/1.1 the socket cannot
/// carry another request (the rest of the body is still on it), so the client is told not to
/// reuse it rather than find it closed under its next request.
fn unread(mut response: Response<Body>, version: hyper::Version) -> Response<Body> {
    if version < hyper::Version::HTTP_2 {
        response.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

fn ended(id: &str) -> Response<Body> {
    text(StatusCode::NOT_FOUND, &format!("connection {id} has ended; POST initialize to open a new one"))
}

/// A new connection for `grant`, answered with the result of its `initialize` and its id.
async fn initialize(server: &Server, key: String, line: Vec<u8>, grant: Grant) -> Response<Body> {
    let slot = match super::seat::take(server, &grant.principal) {
        Ok(seat) => seat,
        Err(why) => return text(StatusCode::SERVICE_UNAVAILABLE, &why),
    };
    // A connection's id is all a request needs to be taken as the connection's: 128 random bits.
    let Some(id) = crate::ids::random_hex::<16>().map(|hex| format!("conn_{hex}")) else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "no random numbers available to name the connection");
    };
    let handle = connection::start(server, id.clone(), slot, grant);
    server.http.lock().insert(id.clone(), handle.clone());
    let (reply, answer) = tokio::sync::oneshot::channel();
    let asked = async {
        handle.commands.send(Command::Await { key, reply }).await.ok()?;
        handle.input.send(line).await.ok()?;
        tokio::time::timeout(INITIALIZE_TIME, answer).await.ok()?.ok()
    };
    let Some(answer) = asked.await else {
        server.http.remove(&id);
        let _ = handle.commands.send(Command::End).await;
        let why = format!("initialize was not answered within {INITIALIZE_TIME:?}");
        return text(StatusCode::GATEWAY_TIMEOUT, &why);
    };
    #[derive(Deserialize)]
    struct Answered {
        error: Option<serde::de::IgnoredAny>,
    }
    // An `initialize` refused (its error is the body) opens no connection.
    let refused = serde_json::from_slice::<Answered>(&answer).map_or(true, |answered| answered.error.is_some());
    let mut response = Response::new(upgrade::full(answer));
    let out = response.headers_mut();
    out.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if refused {
        server.http.remove(&id);
        let _ = handle.commands.send(Command::End).await;
        return response;
    }
    tracing::debug!(connection = %id, "a client connected over HTTP");
    if let Ok(named) = HeaderValue::from_str(&id) {
        out.insert(CONNECTION_HEADER, named);
    }
    response
}

/// A `GET` of an event stream.
async fn events(headers: &HeaderMap, server: &Server, principal: &Principal) -> Response<Body> {
    let takes_events = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .any(|kind| kind.split(';').next().is_some_and(|kind| kind.trim().eq_ignore_ascii_case("text/event-stream")));
    if !takes_events {
        return text(
            StatusCode::NOT_ACCEPTABLE,
            "GET /acp is an event stream (send Accept: text/event-stream) or a WebSocket (send Upgrade: websocket)",
        );
    }
    let (id, handle) = match connection_of(headers, server, principal) {
        Ok(found) => found,
        Err((status, why)) => return text(status, &why),
    };
    let session = header(headers, SESSION_HEADER).map(str::to_owned);
    if let Some(session) = &session
        && !session_exists(server, principal, session).await
    {
        return unknown_session(session);
    }
    let after = header(headers, "last-event-id").map(str::to_owned);
    let (reply, opened) = tokio::sync::oneshot::channel();
    if handle.commands.send(Command::Open { session, after, reply }).await.is_err() {
        return ended(&id);
    }
    let reader = match opened.await {
        Ok(Ok(reader)) => reader,
        Ok(Err(Refused::CannotResume(why))) => return text(StatusCode::CONFLICT, &why),
        Ok(Err(Refused::TooMany)) => {
            let why = format!(
                "this connection has {} session streams, its limit; read more sessions on another connection",
                connection::STREAMS
            );
            return text(StatusCode::SERVICE_UNAVAILABLE, &why);
        }
        Ok(Err(Refused::Gone)) | Err(_) => return ended(&id),
    };
    let frames = futures::stream::unfold(reader, |mut reader| async move {
        let frame = reader.next().await?;
        Some((Ok::<_, Infallible>(Frame::data(frame)), reader))
    });
    let mut response = Response::new(BodyExt::boxed_unsync(StreamBody::new(frames)));
    let out = response.headers_mut();
    out.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    out.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// `DELETE`: the connection ends; its sessions go on.
async fn delete(headers: &HeaderMap, server: &Server, principal: &Principal) -> Response<Body> {
    let (id, handle) = match connection_of(headers, server, principal) {
        Ok(found) => found,
        Err((status, why)) => return text(status, &why),
    };
    // Gone for every request from this answer on, though its actor winds down after.
    server.http.remove(&id);
    let _ = handle.commands.send(Command::End).await;
    let mut response = Response::new(upgrade::empty());
    *response.status_mut() = StatusCode::ACCEPTED;
    response
}
