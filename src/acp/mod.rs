//! The Agent Client Protocol edge: the only module that knows JSON-RPC or ACP wire types.
//!
//! `rpc` frames and routes messages, `handlers` implements the methods, `convert` maps between
//! cairn's types and the wire's. [`serve`] wires them to stdin and stdout.

mod auth;
mod client;
mod convert;
mod handlers;
pub mod headless;
mod opening;
mod question;
pub mod rpc;
mod stdio;

use std::sync::Arc;

use crate::config::Config;
use crate::session::Registry;
use crate::store::Store;

/// Serves ACP on stdin/stdout until stdin closes. `setup` loads the configuration and opens the
/// store, or says why they are unusable (then every session method answers with that); it runs
/// on its own thread while the client is already answered.
pub async fn serve(setup: impl FnOnce() -> Result<(Store, Arc<Config>), String> + Send + 'static) {
    let stdio = stdio::Stdio::open();
    let restore = stdio.restorer();
    rpc::serve(stdio.input, stdio.output, move |peer| {
        let sink = Arc::new(handlers::WireSink::new(peer));
        let for_sessions = Arc::clone(&sink);
        let sessions = opening::Opening::start(
            move || setup().map(|(store, config)| Registry::new(store, config, for_sessions)),
            |sessions| {
                crate::llm::http::prepare();
                sessions.warm_default_model();
            },
        );
        handlers::Agent::new(sink, sessions)
    })
    .await;
    restore.restore();
}
