//! Compaction with a tiny configured window: automatic at the threshold and after a context
//! overflow, manual with `/compact`, the summarizer's fallback ladder, failure that leaves the
//! session usable, and rewinding past a compaction bringing the summarized history back.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::mock_llm::delta;
use crate::support::{Agent, Reply, TestEnv, text_of, updates};

/// The session model has a 2,000-token window; the threshold is 2,000 − min(500, 500) = 1,500.
/// Summaries come from a model with the default (large) window.
const TINY: &str = "[models.\"openai/mock-model\"]\ncontext_window = 2000\nmax_output = 500\n\
[compaction]\nreserve_tokens = 500\nmodel = \"openai/summarizer\"\n[limits]\nretry_base_ms = 10\n";

/// An answer whose usage says the context now holds `prompt_tokens` (+5 output).
fn answer_using(text: &str, prompt_tokens: u64) -> Reply {
    let events = vec![
        delta(json!({"content": text})),
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            .to_string(),
        json!({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5}})
            .to_string(),
        "[DONE]".to_owned(),
    ];
    Reply::Stream { events, delay: Duration::ZERO }
}

async fn say(agent: &mut Agent, session: &str, text: &str) -> (Value, Vec<Value>) {
    let id = agent.prompt(session, text).await;
    let (response, notifications) = agent.response(id).await;
    let shown = updates(&notifications, session).into_iter().cloned().collect();
    (response["result"]["stopReason"].clone(), shown)
}

/// Role and text of each message of a chat request after the system prompt.
fn conversation(request: &Value) -> Vec<(String, String)> {
    request["messages"].as_array().unwrap()[1..]
        .iter()
        .map(|m| (m["role"].as_str().unwrap().to_owned(), m["content"].as_str().unwrap_or_default().to_owned()))
        .collect()
}

fn is_summary_request(request: &Value) -> bool {
    request["messages"][0]["content"].as_str().is_some_and(|s| s.starts_with("You compact the conversation"))
}

#[tokio::test]
async fn the_context_reaching_the_threshold_compacts_before_the_next_request() {
    let env = TestEnv::new().await;
    env.write_config(TINY);
    env.mock.push(answer_using("a1", 100)).push(answer_using("a2", 200)).push(answer_using("a3", 1_600));
    env.mock.push(Reply::text(&["## Goal\nthe user counts"]));
    env.mock.push(answer_using("a4", 600));
    let mut agent = env.spawn().await;
    agent
        .call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"session": {"compaction": {}}}}))
        .await;
    let session = agent.new_session(&env.cwd()).await;
    // Two long turns (about 600 tokens each), then one that brings the context to the threshold.
    let long = |what: &str| format!("{what} {}", "lorem ipsum ".repeat(200));
    for text in [long("one"), long("two"), "three".to_owned()] {
        say(&mut agent, &session, &text).await;
    }
    let (stop, shown) = say(&mut agent, &session, "four").await;
    assert_eq!(stop, "end_turn");
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 5);
    assert!(is_summary_request(&requests[3]), "the summary request comes first");
    assert_eq!(requests[3]["model"], "summarizer");
    let transcript = requests[3]["messages"][1]["content"].as_str().unwrap();
    assert!(transcript.contains("User: one lorem") && transcript.contains("Assistant: a2"), "{transcript}");
    assert!(!transcript.contains("three"), "the kept tail is not summarized: {transcript}");
    let summary = "[Conversation Summary — older messages compacted]\n\n## Goal\nthe user counts";
    let expected: Vec<(String, String)> = [("user", summary), ("user", "three"), ("assistant", "a3"), ("user", "four")]
        .map(|(r, t)| (r.into(), t.into()))
        .into();
    assert_eq!(conversation(&requests[4]), expected);

    let kinds: Vec<&str> = shown.iter().map(|u| u["sessionUpdate"].as_str().unwrap()).collect();
    let at =
        |kind: &str| kinds.iter().position(|k| *k == kind).unwrap_or_else(|| panic!("{kind} missing from {kinds:?}"));
    assert!(at("compaction_update") < at("compaction_summary_chunk"));
    assert_eq!(shown[at("compaction_summary_chunk")]["content"]["text"], "## Goal\nthe user counts");
    let completed =
        shown.iter().find(|u| u["sessionUpdate"] == "compaction_update" && u["status"] == "completed").unwrap();
    assert_eq!(completed["compactionId"], shown[at("compaction_update")]["compactionId"]);
    let usage = shown.iter().find(|u| u["sessionUpdate"] == "usage_update").unwrap();
    assert!(usage["used"].as_u64().unwrap() < 1_500, "{usage}");
}

#[tokio::test]
async fn a_context_length_refusal_compacts_once_and_retries_once() {
    let env = TestEnv::new().await;
    env.write_config(TINY);
    env.mock.push(answer_using("a1", 600)).push(answer_using("a2", 1_200));
    env.mock.push(Reply::status(400, "This model's maximum context length is 2000 tokens"));
    env.mock.push(Reply::text(&["the summary"]));
    env.mock.push(answer_using("a3", 300));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    say(&mut agent, &session, "one").await;
    say(&mut agent, &session, "two").await;
    let (stop, shown) = say(&mut agent, &session, "three").await;
    assert_eq!(env.mock.requests()[2]["messages"].as_array().unwrap().len(), 6, "the refused request held it all");
    assert_eq!(stop, "end_turn");
    let requests = env.mock.requests();
    assert!(is_summary_request(&requests[3]));
    assert_eq!(conversation(&requests[4]).last().unwrap().1, "three");
    let said = text_of(&shown.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(said.contains("Compacted the conversation: summarized") && said.ends_with("a3"), "{said}");
}

#[tokio::test]
async fn manual_compact_keeps_no_tail_and_rewinding_past_it_brings_the_history_back() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["a1"])).push(Reply::text(&["a2"]));
    env.mock.push(Reply::text(&["SUMMARY of one and two"]));
    env.mock.push(Reply::text(&["a3"])).push(Reply::text(&["a4"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    say(&mut agent, &session, "one").await;
    say(&mut agent, &session, "two").await;
    let (stop, shown) = say(&mut agent, &session, "/compact keep the API names").await;
    assert_eq!(stop, "end_turn");
    let note = text_of(&shown.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(note.starts_with("Compacted the conversation: summarized 4 earlier messages"), "{note}");
    let requests = env.mock.requests();
    let asked = requests[2]["messages"][1]["content"].as_str().unwrap();
    assert!(asked.contains("User: two") && asked.ends_with("The user asks the summary to keep: keep the API names"));
    assert_eq!(requests[2]["model"], "gpt-5-mini", "the provider's small model summarizes by default");

    say(&mut agent, &session, "three").await;
    let requests = env.mock.requests();
    let summary = "[Conversation Summary — older messages compacted]\n\nSUMMARY of one and two".to_owned();
    assert_eq!(conversation(&requests[3]), [("user".into(), summary), ("user".into(), "three".into())]);

    // Rewinding the turn after the compaction and the one before it hides the marker too.
    say(&mut agent, &session, "/rewind 2").await;
    say(&mut agent, &session, "four").await;
    let requests = env.mock.requests();
    let back: Vec<String> = conversation(&requests[4]).into_iter().map(|(_, t)| t).collect();
    assert_eq!(back, ["one", "a1", "four"]);
}

#[tokio::test]
async fn a_reload_shows_the_compaction_where_it_happened() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["a1"])).push(Reply::text(&["the summary"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    say(&mut agent, &session, "one").await;
    say(&mut agent, &session, "/compact").await;
    agent.close_stdin();
    agent.wait_exit().await;
    let mut agent = env.spawn().await;
    agent
        .call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"session": {"compaction": {}}}}))
        .await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, notifications) = agent.response(id).await;
    let replayed = updates(&notifications, &session);
    let kinds: Vec<&str> = replayed.iter().map(|u| u["sessionUpdate"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..4],
        ["user_message_chunk", "agent_message_chunk", "compaction_summary_chunk", "compaction_update"],
        "{kinds:?}"
    );
    assert_eq!(replayed[2]["content"]["text"], "the summary");
    assert_eq!(replayed[3]["status"], "completed");
}

#[tokio::test]
async fn a_transcript_too_big_for_the_summarizer_is_summarized_in_pieces_then_with_the_middle_dropped() {
    let env = TestEnv::new().await;
    // The summarizer takes about 1,000 tokens of transcript (4,000 characters) per request.
    env.write_config(
        "[compaction]\nmodel = \"openai/small\"\nsummary_max_tokens = 256\n[models.\"openai/small\"]\ncontext_window = 1200\nmax_output = 200\n",
    );
    let big = |n: usize| format!("{n}:{}", "word ".repeat(500));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for n in 0..3 {
        env.mock.push(Reply::text(&["ok"]));
        say(&mut agent, &session, &big(n)).await;
    }
    for n in 0..3 {
        env.mock.push(Reply::text(&[&format!("summary {n}")]));
    }
    let (_, shown) = say(&mut agent, &session, "/compact").await;
    let requests = env.mock.requests();
    let summaries: Vec<&Value> = requests.iter().filter(|r| is_summary_request(r)).collect();
    assert_eq!(summaries.len(), 3, "one request per piece");
    assert_eq!(summaries[0]["model"], "small");
    let second = summaries[1]["messages"][1]["content"].as_str().unwrap();
    assert!(second.starts_with("Previous summary:\nsummary 0"), "a rolling summary: {second}");
    let note = text_of(&shown.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(note.contains("in parts"), "{note}");

    // Ten more big turns: too many pieces, so the middle is dropped and one request is made.
    for n in 3..13 {
        env.mock.push(Reply::text(&["ok"]));
        say(&mut agent, &session, &big(n)).await;
    }
    env.mock.push(Reply::text(&["short summary"]));
    let (_, shown) = say(&mut agent, &session, "/compact").await;
    let requests = env.mock.requests();
    let last = requests.last().unwrap();
    assert!(is_summary_request(last));
    let asked = last["messages"][1]["content"].as_str().unwrap();
    assert!(asked.starts_with("Previous summary:\nsummary 2"), "the prior summary is folded in");
    assert!(asked.contains("parts of the conversation dropped to fit"), "{asked}");
    let note = text_of(&shown.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(note.contains("the middle was too long"), "{note}");
}

#[tokio::test]
async fn a_failed_compaction_says_so_and_leaves_the_session_usable() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nretry_base_ms = 10\n");
    env.mock.push(Reply::text(&["a1"]));
    for _ in 0..3 {
        env.mock.push(Reply::status(503, "summarizer down"));
    }
    env.mock.push(Reply::text(&["still here"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    say(&mut agent, &session, "one").await;
    let (stop, shown) = say(&mut agent, &session, "/compact").await;
    assert_eq!(stop, "end_turn");
    let note = text_of(&shown.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(note.starts_with("Compaction failed (the summarizer failed:") && note.contains("stays usable"), "{note}");
    let (_, shown) = say(&mut agent, &session, "two").await;
    assert_eq!(text_of(&shown.iter().collect::<Vec<_>>(), "agent_message_chunk"), "still here");
    let requests = env.mock.requests();
    let back: Vec<String> = conversation(requests.last().unwrap()).into_iter().map(|(_, t)| t).collect();
    assert_eq!(back, ["one", "a1", "two"], "nothing was summarized");
}

#[tokio::test]
async fn old_tool_outputs_are_pruned_first_when_that_frees_enough() {
    let env = TestEnv::new().await;
    env.write_config(TINY);
    std::fs::write(env.workspace().join("big.txt"), "a long line of the file\n".repeat(500)).unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "big.txt"}))]));
    env.mock.push(answer_using("read it", 300)).push(answer_using("a2", 400)).push(answer_using("a3", 1_600));
    env.mock.push(answer_using("a4", 500));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for text in ["read big.txt", "two", "three"] {
        say(&mut agent, &session, text).await;
    }
    let (_, shown) = say(&mut agent, &session, "four").await;
    let requests = env.mock.requests();
    assert_eq!(requests.len(), 5, "no summary request");
    assert!(requests.iter().all(|r| !is_summary_request(r)));
    let tool_result = requests[4]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap();
    assert!(tool_result["content"].as_str().unwrap().starts_with("<output pruned, about"), "{tool_result}");
    let note = text_of(&shown.iter().collect::<Vec<_>>(), "agent_message_chunk");
    assert!(note.starts_with("Compacted the conversation: pruned old tool outputs"), "{note}");
}

#[tokio::test]
async fn clients_with_compaction_updates_see_the_compaction_fail_and_its_note_kept() {
    let env = TestEnv::new().await;
    env.write_config("[compaction]\nretries = 0\n");
    env.mock.push(Reply::text(&["a1"])).push(Reply::status(400, "bad summary request"));
    let mut agent = env.spawn().await;
    agent
        .call("initialize", json!({"protocolVersion": 1, "clientCapabilities": {"session": {"compaction": {}}}}))
        .await;
    let session = agent.new_session(&env.cwd()).await;
    say(&mut agent, &session, "one").await;
    let (_, shown) = say(&mut agent, &session, "/compact").await;
    let updates: Vec<&Value> = shown.iter().filter(|u| u["sessionUpdate"] == "compaction_update").collect();
    assert_eq!(updates.len(), 2, "{shown:?}");
    assert_eq!(updates[0]["status"], "in_progress");
    assert!(updates[0].get("error").is_none(), "no null error while it runs");
    assert_eq!(updates[1]["status"], "failed");
    assert!(updates[1]["error"].as_str().unwrap().contains("bad summary request"), "{}", updates[1]);
    // The failure belongs to the conversation: its note is stored, named by its message.
    let notes: Vec<&Value> = shown.iter().filter(|u| u["sessionUpdate"] == "agent_message_chunk").collect();
    assert_eq!(notes.len(), 1, "{shown:?}");
    assert!(notes[0]["content"]["text"].as_str().unwrap().starts_with("Compaction failed"), "{}", notes[0]);
    assert!(notes[0]["messageId"].is_string(), "{}", notes[0]);
}
