//! The integration tests: one binary that drives the real `cairn` over pipes.
//!
//! Each module reads as a spec of one area; `support` holds the process harness and the mock
//! model server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

mod support;

mod acp_120;
mod backpressure;
mod boundary;
mod breaks;
mod bridge;
mod cancel;
mod checkpoint_attacks;
mod checkpoints;
mod commands;
mod compaction;
mod conformance;
mod custom_commands;
mod diagnostics;
mod durability;
mod editor_files;
mod editors;
mod escapes;
mod exec;
mod fetch;
mod git_places;
mod headless;
mod hidden;
mod hook_attacks;
mod hooks;
mod hostile;
mod images;
mod inspect;
mod jobs;
mod lease;
mod limits;
mod login;
mod login_form;
mod lsp;
mod mcp;
mod models;
mod notices;
mod official_client;
mod permissions;
mod plan_mode;
mod prompt;
mod prompt_cache;
mod protocol;
mod provider;
mod question;
mod reattach;
mod registry;
mod roots;
mod sandbox;
mod scripted;
mod search_endpoint;
mod serve;
mod sessions;
mod stdio;
mod steer;
mod store_migrate;
mod subagent_sessions;
mod subagents;
mod system_prompt;
mod telemetry;
mod text_only;
mod tidy;
mod tls;
mod tools;
mod trace;
mod trust;
mod unprompted;
mod web_search;
