//! The Agent Client Protocol edge: the only module that knows JSON-RPC or ACP wire types.
//!
//! `rpc` frames and routes messages, `handlers` implements the methods, `convert` maps between
//! cairn's types and the wire's. [`serve`] wires them to stdin and stdout, [`serve_connection`]
//! to one client of `cairn serve` (whose transport gives it lines in and takes lines out).

mod auth;
mod client;
mod convert;
mod form;
pub(crate) mod framing;
mod handlers;
pub mod headless;
mod opening;
mod question;
pub mod rpc;
mod served;
mod sink;
pub(crate) mod stdio;

use std::sync::Arc;

use crate::config::Config;
use crate::session::{Hub, Principal, Registry};
use crate::store::Store;

/// Serves ACP on stdin/stdout until stdin closes. `setup` loads the configuration and opens the
/// store, or says why they are unusable (then every session method answers with that); it runs
/// on its own thread while the client is already answered.
pub async fn serve(setup: impl FnOnce() -> Result<(Store, Arc<Config>), String> + Send + 'static) {
    let stdio = stdio::Stdio::open();
    let restore = stdio.restorer();
    rpc::serve(stdio.input, stdio.output, move |peer| {
        let sink = Arc::new(sink::WireSink::new(peer));
        let for_sessions = Arc::clone(&sink);
        let sessions = opening::Opening::start(
            move || setup().map(|(store, config)| Registry::new(store, config, for_sessions)),
            |sessions| {
                crate::llm::http::prepare();
                sessions.warm_default_model();
            },
        );
        handlers::Agent::new(sink, sessions, None)
    })
    .await;
    restore.restore();
}

/// Serves one client of `cairn serve` on `input`/`output` (one JSON-RPC message per line, as on
/// stdio) until its input ends, with the server's `sessions`, whose sink is `hub`. The end of
/// the input only detaches the client. Past its `budget` the client is to be cut off. It acts
/// for `principal`: a named one sees only the sessions it owns.
pub async fn serve_connection<R, W>(
    input: R,
    output: W,
    sessions: Registry,
    hub: Arc<Hub>,
    budget: rpc::Budget,
    principal: Principal,
) where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    rpc::serve_within(input, output, Some(budget), move |peer| {
        let sink = Arc::new(sink::WireSink::new(peer));
        let viewer = hub.viewer(Arc::clone(&sink) as Arc<dyn crate::session::UpdateSink>);
        let served = served::Served { hub, viewer, principal };
        handlers::Agent::new(sink, opening::Opening::ready(sessions), Some(served))
    })
    .await;
}
