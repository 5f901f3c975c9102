//! cairn is an AI coding agent that editors launch as an Agent Client Protocol (ACP) subprocess.
//!
//! Bird's-eye view: an editor writes JSON-RPC lines to our stdin; [`acp`] parses them and calls
//! into [`session`], where one actor per session owns that session's history and runs at most one
//! turn at a time. A turn is the explicit state machine in [`agent`]: it samples a model through an
//! [`llm::Provider`], relays every chunk as an [`agent::AgentEvent`], and the session's recorder
//! commits each chunk to the [`store`] before the matching `session/update` is written to stdout.
//! `cairn exec` drives the same session machinery headless ([`exec`]).
//!
//! Boundaries: only `acp` knows JSON-RPC or ACP wire types, only `store` contains SQL, and
//! `agent`/`llm` import neither. `ARCHITECTURE.md` lists the invariants.

pub mod acp;
pub mod agent;
mod aside;
pub mod backlog;
mod beneath;
pub mod config;
pub mod digest;
pub mod doctor;
pub mod exec;
pub mod history;
pub mod hooks;
pub mod ids;
pub mod images;
pub mod inspect;
pub mod llm;
pub mod logging;
pub mod login;
pub mod mcp;
pub mod net;
pub mod permissions;
pub mod pgurl;
pub mod process;
pub mod serve;
pub mod session;
pub mod settings;
pub mod store;
pub mod telemetry;
pub mod tools;
pub mod trace;
pub mod visible;
pub mod workspace;
