//! `cairn acp --server ADDR`: the process an editor spawns, as a thin bridge to a running
//! `cairn serve`, so that the sessions live in the server and an editor that quits or crashes
//! mid-turn only detaches; its next start loads the finished turn.
//!
//! Lines from stdin go to the server as text frames, the server's text frames come back as
//! lines on stdout (a line break inside one made a space), otherwise untouched: the bridge reads
//! no JSON, and refuses only what a frame cannot carry (a line over the limit, or not UTF-8). It connects before it touches stdin,
//! so when no server answers it can say so on stderr and leave stdin to cairn serving the editor
//! itself, as without `--server`. The end of stdin closes the socket (the server detaches the
//! client); a server that closes the connection ends the bridge with the server's reason on
//! stderr. Given a token (`CAIRN_SERVE_TOKEN`, for a server run with `--auth`), it sends it on
//! the handshake as `Authorization: Bearer`, and never logs it; without one, to a server on this
//! machine, it sends the secret a server without `--auth` keeps in the data directory
//! (`super::secret`), and never to another machine. A server that refuses either (401)
//! ends the bridge with an error, since serving the editor here instead would quietly split its
//! sessions between two places: only a server that does not answer is served around.

use std::path::PathBuf;

use futures::{FutureExt, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use super::socket::MAX_FRAME;

/// After stdin ends, how long answers still coming are passed on before the socket closes.
const DRAIN: std::time::Duration = std::time::Duration::from_millis(250);

/// Where the server is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `ws://HOST:PORT/PATH`, or `wss://` (`tls`).
    Url { address: String, url: String, tls: bool },
    /// A Unix socket's path; the endpoint is `/acp`.
    Socket(PathBuf),
}

impl Target {
    /// `ws://HOST:PORT[/PATH]` (the path `/acp` when none is given), a Unix socket's path, or
    /// `local` (the user's own socket).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text == super::LOCAL {
            return super::local_socket().map(Self::Socket);
        }
        for (scheme, tls, port) in [("ws", false, 80), ("wss", true, 443)] {
            let Some(rest) = text.strip_prefix(scheme).and_then(|rest| rest.strip_prefix("://")) else { continue };
            let (address, path) = rest.split_once('/').map_or((rest, ""), |(address, path)| (address, path));
            if address.is_empty() {
                return Err(format!("--server {text}: no host; give {scheme}://HOST:PORT/acp"));
            }
            let path = if path.is_empty() { "acp" } else { path };
            let url = format!("{scheme}://{address}/{path}");
            // A host without a port is at the scheme's.
            let address = if address.ends_with(']') || !address.contains(':') {
                format!("{address}:{port}")
            } else {
                address.to_owned()
            };
            return Ok(Self::Url { address, url, tls });
        }
        if text.contains("://") {
            return Err(format!("--server {text}: cairn connects to ws:// and wss:// URLs and Unix sockets"));
        }
        Ok(Self::Socket(PathBuf::from(text)))
    }

    fn describe(&self) -> String {
        match self {
            Self::Url { url, .. } => url.clone(),
            Self::Socket(path) => path.display().to_string(),
        }
    }
}

/// Any stream the WebSocket runs over.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Stream for T {}

type Socket = tokio_tungstenite::WebSocketStream<Box<dyn Stream>>;

/// Why no connection was made.
#[derive(Debug, thiserror::Error)]
pub enum NotConnected {
    /// Nothing answers at the address (or not in time): the editor may be served here.
    #[error("{0}")]
    NoAnswer(String),
    /// The server answered and refused this client: serving here would split its sessions.
    #[error("{0}")]
    Refused(String),
}

/// A connection to the server, made before stdin is touched.
pub struct Connected {
    socket: Socket,
    target: Target,
}

/// TLS to the server at `address` (`HOST:PORT`) over `stream`, its certificate checked against
/// the platform's roots as for the model providers. A server whose certificate fails the check
/// refuses rather than not answering: serving the editor here would split its sessions.
async fn tls_to(
    address: &str,
    stream: tokio::net::TcpStream,
) -> Result<tokio_rustls::client::TlsStream<tokio::net::TcpStream>, NotConnected> {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let refused = |why: String| NotConnected::Refused(format!("wss://{address}: {why}"));
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|err| refused(format!("{host} is not a host name TLS can check ({err})")))?;
    let connector = crate::net::websocket_tls().map_err(|err| refused(format!("TLS cannot be set up: {err}")))?;
    connector.connect(name, stream).await.map_err(|err| {
        refused(format!(
            "the TLS handshake failed ({err}); if the server's certificate is signed by your own authority, point \
             SSL_CERT_FILE at its certificate"
        ))
    })
}

/// How long connecting and the WebSocket handshake may take before the server counts as not
/// answering (and cairn serves the editor itself).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// What the bridge shows the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    /// A `cairn serve token create` secret (`CAIRN_SERVE_TOKEN`), for a server with `--auth`.
    Token(String),
    /// The secret a server without `--auth` keeps in the data directory (`super::secret`).
    Local(String),
}

impl Target {
    /// Where the server is, as a server without `--auth` notes where it listens beside its
    /// secret (`super::secret::read_for`): a loopback address given as such, or a socket's
    /// canonical path. `None` for any other server, which is never shown the local secret.
    /// Not a name such as `localhost`: it may lead to `::1` while the server listens on
    /// 127.0.0.1, and any program may listen on the other address's port.
    pub fn local_address(&self) -> Option<String> {
        match self {
            Self::Socket(path) => std::fs::canonicalize(path).ok().map(|path| path.to_string_lossy().into_owned()),
            Self::Url { address, .. } => {
                let address = address.parse::<std::net::SocketAddr>().ok()?;
                address.ip().is_loopback().then(|| address.to_string())
            }
        }
    }
}

/// Connects to the server at `target`, showing `credential` if given; the error says why none
/// answered, or why the one that did refused.
pub async fn connect(target: Target, credential: Option<Credential>) -> Result<Connected, NotConnected> {
    let described = target.describe();
    tokio::time::timeout(CONNECT_TIMEOUT, connect_now(target, credential)).await.unwrap_or_else(|_| {
        Err(NotConnected::NoAnswer(format!("{described}: no answer within {} s", CONNECT_TIMEOUT.as_secs())))
    })
}

async fn connect_now(target: Target, credential: Option<Credential>) -> Result<Connected, NotConnected> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let no_answer = |err: &dyn std::fmt::Display| NotConnected::NoAnswer(format!("{}: {err}", target.describe()));
    let (stream, url): (Box<dyn Stream>, String) = match &target {
        Target::Url { address, url, tls } => {
            let stream = tokio::net::TcpStream::connect(address.as_str()).await.map_err(|err| no_answer(&err))?;
            let _ = stream.set_nodelay(true);
            if *tls { (Box::new(tls_to(address, stream).await?), url.clone()) } else { (Box::new(stream), url.clone()) }
        }
        Target::Socket(path) => {
            let stream = tokio::net::UnixStream::connect(path).await.map_err(|err| no_answer(&err))?;
            (Box::new(stream), "ws://localhost/acp".to_owned())
        }
    };
    let config = WebSocketConfig::default().max_message_size(Some(MAX_FRAME)).max_frame_size(Some(MAX_FRAME));
    let mut request = url.into_client_request().map_err(|err| no_answer(&err))?;
    let token = matches!(credential, Some(Credential::Token(_)));
    if let Some(Credential::Token(secret) | Credential::Local(secret)) = credential {
        let value = hyper::header::HeaderValue::from_str(&format!("Bearer {secret}")).map_err(|_| {
            NotConnected::Refused(
                "CAIRN_SERVE_TOKEN holds characters no header can carry; set it to the secret \
                 `cairn serve token create` printed"
                    .to_owned(),
            )
        })?;
        request.headers_mut().insert(hyper::header::AUTHORIZATION, value);
    }
    match tokio_tungstenite::client_async_with_config(request, stream, Some(config)).await {
        Ok((socket, _)) => Ok(Connected { socket, target }),
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => {
            let status = response.status();
            let said = response.body().as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            let said = crate::visible::line(said.trim()).into_owned();
            let why = if status == hyper::StatusCode::UNAUTHORIZED && token {
                format!(
                    "the server at {} refused the token (401: {said}); set CAIRN_SERVE_TOKEN to a secret of \
                     `cairn serve token create` on that server that is not revoked",
                    target.describe()
                )
            } else if status == hyper::StatusCode::UNAUTHORIZED {
                format!(
                    "the server at {} asks for its secret (401: {said}); a server without --auth keeps it in \
                     the file serve-secret it names at start, which this cairn finds by its own data directory: run \
                     both with the same one (CAIRN_HOME), or set CAIRN_SERVE_TOKEN to the secret (or to a token of \
                     a server with --auth)",
                    target.describe()
                )
            } else {
                format!("the server at {} refused the connection ({status}: {said})", target.describe())
            };
            Err(NotConnected::Refused(why))
        }
        Err(err) => Err(no_answer(&err)),
    }
}

/// Carries stdin to the server and the server to stdout until either ends.
pub async fn run(connected: Connected) {
    let Connected { socket, target } = connected;
    let (mut to_server, from_server) = socket.split();
    let stdio = crate::acp::stdio::Stdio::open();
    let restore = stdio.restorer();
    let (input, output) = (stdio.input, stdio.output);

    // Lines of the bridge's own for the editor (a line it could not pass on), between the
    // server's.
    let (tell, mut told) = tokio::sync::mpsc::unbounded_channel::<String>();
    let upward = async move {
        use crate::acp::framing::{Line, read_line};
        let mut lines = BufReader::with_capacity(64 * 1024, input);
        let mut line = Vec::new();
        loop {
            match read_line(&mut lines, &mut line, MAX_FRAME).await {
                Ok(Line::Complete) => {}
                Ok(Line::TooLong) => {
                    // As cairn on stdio answers a line over its limit.
                    let why = format!("line longer than {MAX_FRAME} bytes ({} MiB); it was skipped", MAX_FRAME >> 20);
                    let _ = tell.send(crate::acp::rpc::parse_error_line(&why));
                    continue;
                }
                Ok(Line::Eof) | Err(_) => break,
            }
            while matches!(line.last(), Some(b'\r')) {
                line.pop();
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            // A text frame must be UTF-8: a line that is not is refused here as cairn refuses it
            // on stdio, never changed into another message.
            let text = match String::from_utf8(std::mem::take(&mut line)) {
                Ok(text) => text,
                Err(err) => {
                    let why = format!("invalid JSON ({}); send one JSON-RPC message per line", err.utf8_error());
                    let _ = tell.send(crate::acp::rpc::parse_error_line(&why));
                    continue;
                }
            };
            if to_server.send(Message::Text(text.into())).await.is_err() {
                break;
            }
        }
        // The editor is gone (or closed stdin): after a moment for the answers to what it sent
        // last (as cairn on stdio lets running requests finish), the server detaches it.
        tokio::time::sleep(DRAIN).await;
        let _ = to_server.close().await;
    };

    let downward = async move {
        let mut from_server = std::pin::pin!(from_server.peekable());
        let mut output = tokio::io::BufWriter::with_capacity(64 * 1024, output);
        let mut closed_why = None;
        loop {
            let frame = tokio::select! {
                frame = from_server.next() => frame,
                Some(line) = told.recv() => Some(Ok(Message::Text(line.into()))),
            };
            let Some(frame) = frame else { break };
            match frame {
                Ok(Message::Text(text)) => {
                    // One frame, one line: a line break in it (JSON has none outside whitespace)
                    // could otherwise put a line that is not the server's message on stdout.
                    let line = super::one_line(&text);
                    if output.write_all(&line).await.is_err() || output.write_all(b"\n").await.is_err() {
                        break;
                    }
                    // Flushed once nothing more is ready, so a burst costs one write.
                    let more = from_server.as_mut().peek().now_or_never().is_some();
                    if !more && output.flush().await.is_err() {
                        break;
                    }
                }
                Ok(Message::Close(frame)) => {
                    closed_why = frame.map(|frame| frame.reason.to_string()).filter(|why| !why.is_empty());
                    break;
                }
                Ok(_) => {}
                Err(err) => {
                    closed_why = Some(err.to_string());
                    break;
                }
            }
        }
        let _ = output.flush().await;
        closed_why
    };

    // The server ending the connection ends the bridge (the editor sees its stdout close); the
    // end of stdin closes the socket, and what the server still sends meanwhile is passed on.
    let (mut downward, mut upward) = (std::pin::pin!(downward), std::pin::pin!(upward));
    let closed_why = tokio::select! {
        closed_why = &mut downward => closed_why,
        () = &mut upward => tokio::time::timeout(DRAIN, &mut downward).await.unwrap_or(None),
    };
    if let Some(why) = closed_why {
        super::say(&format!("cairn: the server at {} closed the connection: {why}", target.describe()));
    }
    restore.restore();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_socket_or_a_loopback_address_given_as_one_is_shown_the_local_secret() {
        for local in ["ws://127.0.0.1:7420/acp", "ws://[::1]:7420", "wss://127.0.0.2:9/acp"] {
            assert!(Target::parse(local).unwrap().local_address().is_some(), "{local}");
        }
        for other in ["ws://localhost:7420/acp", "ws://10.0.0.1:7420", "ws://127.0.0.1.example.com:7420", "ws://host"] {
            assert_eq!(Target::parse(other).unwrap().local_address(), None, "{other}");
        }
    }

    #[test]
    fn a_target_is_a_ws_or_wss_url_with_the_schemes_port_by_default_or_a_socket() {
        let url = |text: &str| match Target::parse(text).unwrap() {
            Target::Url { address, url, tls } => (address, url, tls),
            Target::Socket(path) => panic!("{text} taken as the socket {}", path.display()),
        };
        assert_eq!(url("ws://127.0.0.1:7420"), ("127.0.0.1:7420".into(), "ws://127.0.0.1:7420/acp".into(), false));
        assert_eq!(
            url("wss://agent.example/acp"),
            ("agent.example:443".into(), "wss://agent.example/acp".into(), true)
        );
        assert_eq!(url("ws://[::1]/x"), ("[::1]:80".into(), "ws://[::1]/x".into(), false));
        assert!(matches!(Target::parse("/run/user/1/cairn.sock"), Ok(Target::Socket(_))));
        let wrong = Target::parse("http://127.0.0.1:7420/acp").err().unwrap();
        assert!(wrong.contains("wss://"), "{wrong}");
        assert!(Target::parse("wss:///acp").is_err());
    }
}
