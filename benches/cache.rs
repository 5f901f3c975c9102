//! The share of a session's prompt tokens OpenAI's prompt cache serves, over a 20-turn session
//! (each turn a `read` of a file and an answer, so the history grows by a tool call and its
//! output as it does in real work): `cargo bench --bench cache`. The mock model server models the
//! cache (`tests/it/support/prompt_cache.rs`: OpenAI's 1,024-token minimum and 128-token steps,
//! one cache per `prompt_cache_key`, none without one), so the figure says how much of each
//! request starts with the bytes of the one before: what the key and a stable prefix earn.
//! Nothing here asserts: the numbers go to BENCHMARKS.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use serde_json::json;
use support::prompt_cache::Charged;
use support::{Reply, TestEnv};

const TURNS: usize = 20;

/// Runs the session against a fresh mock (`config` written first) and answers each request's
/// charge.
async fn session(config: &str) -> Vec<Charged> {
    let env = TestEnv::new().await;
    env.write_config(config);
    std::fs::write(env.workspace().join("notes.txt"), "a line of notes\n".repeat(40)).unwrap();
    env.mock.model_prompt_cache();
    for turn in 0..TURNS {
        let call = format!("call_{turn}");
        env.mock.push(Reply::tool_calls(&[(&call, "read", json!({"path": "notes.txt"}))]));
        env.mock.push(Reply::text(&["Read it; ", "the notes say what they say."]));
    }
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for turn in 0..TURNS {
        let id = agent.prompt(&session, &format!("Turn {turn}: read notes.txt and tell me about it.")).await;
        agent.response(id).await;
    }
    env.mock.cache_charges()
}

fn row(name: &str, charged: &[Charged]) {
    let prompt: u64 = charged.iter().map(|c| c.prompt).sum();
    let cached: u64 = charged.iter().map(|c| c.cached).sum();
    let later = &charged[1..];
    let hits = later.iter().filter(|c| c.cached * 10 >= c.prompt * 9).count();
    println!(
        "| {name} | {} | {prompt} | {cached} | {:.1} % | {hits} of {} |",
        charged.len(),
        100.0 * cached as f64 / prompt as f64,
        later.len()
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    println!("| provider | requests | prompt tokens | cached | share | later requests ≥ 90 % cached |");
    println!("|---|---|---|---|---|---|");
    row("`openai`, key sent (the session id)", &session("[providers.openai]\nprompt_cache_key = true\n").await);
    row("`openai`, no key", &session("[providers.openai]\nprompt_cache_key = false\n").await);
}
