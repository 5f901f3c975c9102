//! What ends a turn the model would go on with: the seven stop conditions, the step and idle
//! timeouts, loop detection's tiers, reminders sent once, and answers cut off inside a tool call.
//! Each limit is configured small and the model is scripted to run into it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::mock_llm::{delta, finish};
use crate::support::{Reply, TestEnv, text_of, updates, user_texts};

/// Runs one prompt; returns the stop reason (or the error) and the text the user saw.
async fn turn(env: &TestEnv, prompt: &str) -> (Value, String) {
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, prompt).await;
    let (response, notifications) = agent.response(id).await;
    let outcome = response.get("result").map_or_else(|| response["error"].clone(), |r| r["stopReason"].clone());
    (outcome, text_of(&updates(&notifications, &session), "agent_message_chunk"))
}

fn glob(id: &str, pattern: &str) -> Reply {
    Reply::tool_calls(&[(id, "glob", json!({"pattern": pattern}))])
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap().to_owned()).collect()
}

#[tokio::test]
async fn max_rounds_ends_the_turn_with_max_turn_requests_and_says_so() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nmax_rounds = 2\n");
    for n in 0..3 {
        env.mock.push(glob(&format!("c{n}"), &format!("*.{n}")));
    }
    let (stop, said) = turn(&env, "look around").await;
    assert_eq!(stop, "max_turn_requests");
    assert_eq!(env.mock.requests().len(), 2);
    assert!(said.contains("limit of 2 model requests") && said.contains("max_rounds"), "{said}");
}

#[tokio::test]
async fn the_total_timeout_interrupts_a_running_stream() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\ntimeout_secs = 1\n");
    env.mock.push(Reply::endless(Duration::from_millis(50)));
    let started = Instant::now();
    let (stop, said) = turn(&env, "talk forever").await;
    assert_eq!(stop, "max_turn_requests");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(said.contains("tick 0") && said.contains("limit of 1 s"), "{said}");
    assert_eq!(env.mock.dropped(), 1, "the HTTP stream was closed");
}

#[tokio::test]
async fn the_token_budget_is_checked_after_each_step() {
    let env = TestEnv::new().await;
    // Every mock step reports 12 prompt + 5 completion tokens.
    env.write_config("[limits]\ntoken_budget = 30\n");
    for n in 0..4 {
        env.mock.push(glob(&format!("c{n}"), &format!("*.{n}")));
    }
    let (stop, said) = turn(&env, "spend").await;
    assert_eq!(stop, "max_turn_requests");
    assert_eq!(env.mock.requests().len(), 2, "17 tokens after one step, 34 after two");
    assert!(said.contains("used 34 tokens, over its budget of 30"), "{said}");
}

#[tokio::test]
async fn consecutive_tool_errors_stop_the_turn() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nconsecutive_errors = 3\n");
    for n in 0..5 {
        env.mock.push(Reply::tool_calls(&[(&format!("c{n}"), "read", json!({"path": format!("missing{n}.txt")}))]));
    }
    let (stop, said) = turn(&env, "read things").await;
    assert_eq!(stop, "max_turn_requests");
    assert_eq!(env.mock.requests().len(), 3);
    assert!(said.contains("3 tool calls failed in a row"), "{said}");
}

#[tokio::test]
async fn stop_on_tool_and_stop_on_content_end_the_turn_naturally() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nstop_on_tool = \"glob\"\n");
    env.mock.push(glob("c1", "*.md"));
    env.mock.push(Reply::text(&["never asked"]));
    let (stop, said) = turn(&env, "find docs").await;
    assert_eq!(stop, "end_turn");
    assert_eq!(env.mock.requests().len(), 1, "the tool ran, then the turn ended");
    assert!(said.contains("after `glob` completed"), "{said}");

    let env = TestEnv::new().await;
    env.write_config("[limits]\nstop_on_content = \"^ALL DONE$\"\n");
    let mut events = vec![delta(json!({"content": "Checking once more.\nALL DONE\n"}))];
    events.push(delta(
        json!({"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "glob", "arguments": "{\"pattern\":\"*\"}"}}]}),
    ));
    events.extend(finish("tool_calls"));
    env.mock.push(Reply::Stream { events, delay: Duration::ZERO });
    env.mock.push(Reply::text(&["never asked"]));
    let (stop, said) = turn(&env, "finish up").await;
    assert_eq!(stop, "end_turn");
    assert_eq!(env.mock.requests().len(), 1);
    assert!(said.contains("matched `^ALL DONE$`"), "{said}");
}

#[tokio::test]
async fn a_bad_stop_pattern_is_a_config_error_that_names_it() {
    let env = TestEnv::new().await;
    let stderr = env.refused_config("[limits]\nstop_on_content = \"(oops\"\n").await;
    assert!(stderr.contains("stop_on_content") && stderr.contains("(oops"), "{stderr}");
}

#[tokio::test]
async fn loop_detection_warns_once_then_takes_the_tool_away_then_stops() {
    let env = TestEnv::new().await;
    for n in 0..8 {
        env.mock.push(Reply::tool_calls(&[(&format!("c{n}"), "grep", json!({"pattern": "fixme", "path": "."}))]));
    }
    let (stop, said) = turn(&env, "find the fixmes").await;
    let requests = env.mock.requests();
    assert_eq!(stop, "max_turn_requests");
    assert_eq!(requests.len(), 8);
    assert!(said.contains("`grep` was called 8 times"), "{said}");
    let warned = |n: usize, what: &str| user_texts(&requests[n]).iter().any(|t| t.contains(what));
    // The warning follows the third call, once; the cooldown follows the fifth.
    assert!(!warned(2, "System Notice"));
    assert!(warned(3, "[System Notice — Warning] You have called grep 3 times"));
    assert!(!warned(4, "System Notice"), "a reminder is sent once");
    assert!(warned(5, "[System Notice — Loop] You have called grep 5 times"));
    for (n, request) in requests.iter().enumerate() {
        let offered = tool_names(request).contains(&"grep".to_owned());
        assert_eq!(offered, !(5..8).contains(&n), "grep offered in request {n}");
    }
}

#[tokio::test]
async fn paging_through_a_file_is_not_a_loop() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("big.txt"), "line\n".repeat(100)).unwrap();
    for n in 0..9 {
        env.mock.push(Reply::tool_calls(&[(
            &format!("c{n}"),
            "read",
            json!({"path": "big.txt", "offset": n * 10 + 1, "limit": 10}),
        )]));
    }
    env.mock.push(Reply::text(&["read it all"]));
    let (stop, said) = turn(&env, "read big.txt").await;
    assert_eq!(stop, "end_turn");
    assert_eq!(said, "read it all");
    assert!(env.mock.requests().iter().all(|r| user_texts(r).iter().all(|t| !t.contains("System Notice"))));
}

#[tokio::test]
async fn a_stream_that_trickles_past_the_step_timeout_ends_with_a_clear_error() {
    let env = TestEnv::new().await;
    env.write_config("[limits]\nstep_timeout_secs = 1\n");
    env.mock.push(Reply::endless(Duration::from_millis(100)));
    let (error, said) = turn(&env, "go").await;
    assert!(said.contains("tick 0"), "{said}");
    let message = error["message"].as_str().unwrap_or_default();
    assert!(message.contains("longer than 1 s") && message.contains("step_timeout_secs"), "{error}");
}

/// A tool call whose arguments stop mid-string, as when the output limit cuts the answer.
fn cut_off_call(id: &str) -> Reply {
    let mut events = vec![delta(json!({"tool_calls": [{"index": 0, "id": id, "type": "function",
        "function": {"name": "write", "arguments": "{\"path\":\"big.txt\",\"content\":\"aaaa"}}]}))];
    events.extend(finish("length"));
    Reply::Stream { events, delay: Duration::ZERO }
}

#[tokio::test]
async fn an_answer_cut_off_inside_a_tool_call_gets_two_continuations() {
    let env = TestEnv::new().await;
    for n in 0..3 {
        env.mock.push(cut_off_call(&format!("c{n}")));
    }
    let (stop, _) = turn(&env, "write a big file").await;
    let requests = env.mock.requests();
    assert_eq!(stop, "max_tokens");
    assert_eq!(requests.len(), 3, "the first answer and two continuations");
    for request in &requests[1..] {
        assert!(user_texts(request).iter().any(|t| t.contains("cut off at the output-token limit")), "{request}");
    }
    assert!(!env.workspace().join("big.txt").exists(), "a cut-off call never runs");
}

#[tokio::test]
async fn a_reminder_queued_by_a_tool_reaches_the_next_request_only() {
    let env = TestEnv::new().await;
    let items = json!({"items": [
        {"content": "parse", "status": "in_progress"},
        {"content": "print", "status": "in_progress"}
    ]});
    env.mock.push(Reply::tool_calls(&[("c1", "todo", items)]));
    env.mock.push(glob("c2", "*.rs"));
    env.mock.push(Reply::text(&["done"]));
    let (stop, _) = turn(&env, "plan it").await;
    assert_eq!(stop, "end_turn");
    let requests = env.mock.requests();
    let reminded =
        |n: usize| user_texts(&requests[n]).iter().any(|t| t.contains("2 todo items are in_progress at once"));
    assert!(!reminded(0));
    assert!(reminded(1), "injected at the next inference");
    assert!(!reminded(2), "and then cleared");
}
