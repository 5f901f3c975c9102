//! The Agent Client Protocol edge: the only module that knows JSON-RPC or ACP wire types.
//!
//! `rpc` frames and routes messages, `handlers` implements the methods, `convert` maps between
//! cairn's types and the wire's. [`serve`] wires them to stdin and stdout.

mod client;
mod convert;
mod handlers;
pub mod rpc;

use std::sync::Arc;

use crate::config::Config;
use crate::session::Registry;
use crate::store::Store;

/// Serves ACP on stdin/stdout until stdin closes. `setup` is the store and configuration, or a
/// message saying why they are unusable; in that case every session method answers with it.
pub async fn serve(setup: Result<(Store, Arc<Config>), String>) {
    let stdin = tokio::io::stdin();
    let stdout = tokio::io::stdout();
    rpc::serve(stdin, stdout, move |peer| {
        let sink = Arc::new(handlers::WireSink::new(peer));
        let sessions = setup.map(|(store, config)| Registry::new(store, config, sink.clone()));
        handlers::Agent::new(sink, sessions)
    })
    .await;
}
