//! One WebSocket client of `cairn serve`: its text frames, one JSON-RPC message each, turned
//! into the lines the JSON-RPC peer reads, and the peer's lines sent back as text frames, so a
//! served client gets the same wire order, the same byte-counted outgoing queue and the same
//! JSON, byte for byte, as an editor on stdio.
//!
//! A frame's message is one line: the raw line breaks JSON allows between tokens are spaces to
//! it (inside a JSON string a line break is always escaped, so no text changes). The first binary
//! frame is answered with an error; all are ignored. A frame over [`MAX_FRAME`] closes the
//! connection with the WebSocket's "message too big" status and a reason. The connection is
//! pinged every heartbeat; one that sent nothing (a pong included) for two is closed, and so is
//! one whose token was revoked since (1008, "the token was revoked"). The frames of the lines
//! read from the peer together go out in one write. The pipes between the socket and the peer
//! are small and bounded: a client that stops reading fills them, and the peer's queue holds
//! the rest, counted. A session's turn never waits for one client, so a
//! client more than [`BEHIND`] bytes behind is cut off (status 1013 and the reason, when the
//! socket still takes them) and detached; it can reconnect and load the session.

use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use super::auth::Grant;
use crate::session::{Hub, Registry};

/// The largest message a client may send in one frame.
pub const MAX_FRAME: usize = 64 * 1024 * 1024;
/// How far behind a session's stream a client may fall before it is disconnected: bytes
/// queued for it beyond what the socket holds.
pub const BEHIND: usize = 16 * 1024 * 1024;
/// How long the reason for cutting a client off may take to reach it.
const LAST_WORD: Duration = Duration::from_millis(200);
/// Bytes in flight in each direction between the socket and the peer.
const PIPE: usize = 64 * 1024;

/// The socket of an upgraded connection.
pub type WebSocket = tokio_tungstenite::WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Serves one upgraded connection for `grant`'s principal until either side ends it, or its
/// token is found revoked at a heartbeat; the client's sessions go on.
pub async fn serve(
    socket: WebSocket,
    sessions: Registry,
    hub: Arc<Hub>,
    connection: String,
    heartbeat: Duration,
    grant: Grant,
) {
    let principal = grant.principal.clone();
    let (mut to_client, mut from_client) = socket.split();
    let (mut input, peer_input) = tokio::io::duplex(PIPE);
    let (peer_output, output) = tokio::io::duplex(PIPE);
    // Frames of our own (a refusal, pings, a close: a few at most), sent between the peer's lines.
    let (refuse, mut refusals) = tokio::sync::mpsc::unbounded_channel::<Message>();
    let behind = tokio_util::sync::CancellationToken::new();

    let cut_off = behind.clone();
    let reading = async move {
        let mut pings = tokio::time::interval_at(Instant::now() + heartbeat, heartbeat);
        let mut heard = Instant::now();
        let mut told_binary = false;
        loop {
            let frame = tokio::select! {
                frame = from_client.next() => frame,
                () = cut_off.cancelled() => break,
                _ = pings.tick() => {
                    if !grant.still_good() {
                        tracing::info!(%connection, "a client's token was revoked; disconnecting it");
                        let _ = refuse.send(close(CloseCode::Policy, "the token was revoked".to_owned()));
                        break;
                    }
                    if heard.elapsed() >= heartbeat * 2 {
                        tracing::info!(%connection, "a client answered no ping for {:?}; disconnecting it", heard.elapsed());
                        let _ = refuse.send(close(CloseCode::Away, "no answer to pings".to_owned()));
                        break;
                    }
                    let _ = refuse.send(Message::Ping(Default::default()));
                    continue;
                }
            };
            heard = Instant::now();
            let Some(frame) = frame else { break };
            let frame = match frame {
                Ok(frame) => frame,
                Err(err) => {
                    tracing::debug!(%connection, %err, "the WebSocket failed");
                    if is_too_big(&err) {
                        let reason = format!("a frame was over {} MiB; send smaller messages", MAX_FRAME >> 20);
                        tracing::info!(%connection, "{reason}; closing the connection");
                        let _ = refuse.send(close(CloseCode::Size, reason));
                    }
                    break;
                }
            };
            match frame {
                Message::Text(text) => {
                    let mut line = super::one_line(&text);
                    line.push(b'\n');
                    if input.write_all(&line).await.is_err() {
                        break;
                    }
                }
                // Told once; the rest are dropped unanswered, so a flood of them queues nothing.
                Message::Binary(_) if !told_binary => {
                    told_binary = true;
                    let why = "binary frames are ignored; send each JSON-RPC message as one text frame";
                    let _ = refuse.send(Message::Text(crate::acp::rpc::refusal_line(why).into()));
                }
                Message::Binary(_) => {}
                Message::Close(_) => break,
                // Answered by the socket itself; a raw frame is never read.
                Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
            }
        }
        // The end of the peer's input: it detaches this client and winds down.
        drop(input);
    };

    let cut_off = behind.clone();
    let writing = async move {
        let mut lines = BufReader::new(output);
        // A line being read is kept here across the other branches: `read_until` appends what it
        // read before another branch won, and the next call goes on from there.
        let mut line = Vec::new();
        loop {
            tokio::select! {
                biased;
                // A client this far behind is not read for any more: whatever frame was being
                // sent is dropped with the connection.
                () = cut_off.cancelled() => {
                    let reason = format!(
                        "this client fell more than {} MiB behind; reconnect and load the session",
                        BEHIND >> 20
                    );
                    let _ = tokio::time::timeout(LAST_WORD, to_client.send(close(CloseCode::Again, reason))).await;
                    return;
                }
                Some(refusal) = refusals.recv() => {
                    let closing = matches!(refusal, Message::Close(_));
                    if to_client.send(refusal).await.is_err() || closing {
                        break;
                    }
                }
                read = lines.read_until(b'\n', &mut line) => {
                    match read {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {}
                    }
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    // The peer writes JSON, which serde_json writes as UTF-8; a line that is not
                    // is dropped, and the frames fed before it still go out.
                    let Ok(text) = String::from_utf8(std::mem::take(&mut line)) else {
                        if to_client.flush().await.is_err() {
                            break;
                        }
                        continue;
                    };
                    // Frames whose lines were read already go out with this one, in one write:
                    // the socket is flushed at the last line read.
                    let frame = Message::Text(text.into());
                    let more = memchr::memchr(b'\n', lines.buffer()).is_some();
                    let sending = async {
                        if more { to_client.feed(frame).await } else { to_client.send(frame).await }
                    };
                    let sent = tokio::select! {
                        sent = sending => sent.is_ok(),
                        () = cut_off.cancelled() => continue,
                    };
                    if !sent {
                        break;
                    }
                }
            }
        }
        let _ = to_client.close().await;
    };

    let budget = crate::acp::rpc::Budget { bytes: BEHIND, exceeded: behind };
    let serving = crate::acp::serve_connection(peer_input, peer_output, sessions, hub, budget, principal);
    tokio::join!(reading, writing, serving);
}

fn close(code: CloseCode, reason: String) -> Message {
    Message::Close(Some(CloseFrame { code, reason: reason.into() }))
}

/// Whether the socket failed on a message over the limit.
fn is_too_big(err: &tokio_tungstenite::tungstenite::Error) -> bool {
    matches!(err, tokio_tungstenite::tungstenite::Error::Capacity(_))
}
