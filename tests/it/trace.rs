//! W3C trace context from the client's `_meta`: a prompt's `traceparent` and `tracestate` reach
//! every model request its turn makes (each with a parent id of its own) and its log lines; a
//! prompt without one sends none, and an invalid one is ignored without failing anything.

use std::time::Duration;

use axum::http::HeaderMap;
use serde_json::{Value, json};

use crate::support::{Agent, PATIENCE, Reply, TestEnv};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
const STATE: &str = "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7";

fn traceparent(trace_id: &str, flags: &str) -> String {
    format!("00-{trace_id}-{CLIENT_SPAN}-{flags}")
}

/// Sends a prompt whose params carry `meta` as `_meta`.
async fn prompt_with(agent: &mut Agent, session: &str, text: &str, meta: Value) -> i64 {
    let prompt = json!([{"type": "text", "text": text}]);
    agent.request("session/prompt", json!({"sessionId": session, "prompt": prompt, "_meta": meta})).await
}

async fn turn_with(agent: &mut Agent, session: &str, text: &str, meta: Value) -> Value {
    let id = prompt_with(agent, session, text, meta).await;
    agent.response(id).await.0
}

/// A header's value as text; `None` when absent.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|value| value.to_str().unwrap())
}

/// Checks that `headers` carry the trace `trace_id` with `flags` and the client's state, under a
/// parent id of the request's own; answers that parent id.
fn child_of(headers: &HeaderMap, trace_id: &str, flags: &str) -> String {
    let parent = header(headers, "traceparent").unwrap_or_else(|| panic!("no traceparent in {headers:?}"));
    let fields: Vec<&str> = parent.split('-').collect();
    assert_eq!(fields.len(), 4, "{parent}");
    assert_eq!((fields[0], fields[1], fields[3]), ("00", trace_id, flags), "{parent}");
    assert_eq!(fields[2].len(), 16, "{parent}");
    assert!(fields[2].bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)), "{parent}");
    assert_ne!(fields[2], CLIENT_SPAN, "a model request is a span of its own, not the client's");
    assert_ne!(fields[2], "0000000000000000");
    fields[2].to_owned()
}

fn untraced(headers: &HeaderMap) -> bool {
    !headers.contains_key("traceparent") && !headers.contains_key("tracestate")
}

/// The title request's headers, once the mock got it.
async fn title_headers(env: &TestEnv) -> HeaderMap {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(headers) = env.mock.title_headers().pop() {
            return headers;
        }
        assert!(tokio::time::Instant::now() < deadline, "no title request");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until stderr has a line containing both `a` and `b`, and answers it.
async fn logged(agent: &Agent, a: &str, b: &str) -> String {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(line) = agent.stderr().lines().find(|line| line.contains(a) && line.contains(b)) {
            return line.to_owned();
        }
        assert!(tokio::time::Instant::now() < deadline, "no line with {a} and {b} on stderr:\n{}", agent.stderr());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_prompts_trace_reaches_every_model_request_of_its_turn_and_its_log_lines() {
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("notes.txt"), "alpha\n").unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "notes.txt"}))]));
    env.mock.push(Reply::text(&["Read it."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;

    let meta = json!({"traceparent": traceparent(TRACE_ID, "01"), "tracestate": STATE, "baggage": "user=someone"});
    let answer = turn_with(&mut agent, &session, "read the notes", meta).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");

    let mut sent = env.mock.request_headers();
    assert_eq!(sent.len(), 2, "a step with a tool call, then the answer");
    sent.push(title_headers(&env).await);
    let mut parents = Vec::new();
    for headers in &sent {
        parents.push(child_of(headers, TRACE_ID, "01"));
        assert_eq!(header(headers, "tracestate"), Some(STATE), "passed on as it came");
        assert!(!headers.contains_key("baggage"), "baggage stays with the client");
    }
    parents.sort();
    parents.dedup();
    assert_eq!(parents.len(), 3, "each request has a parent id of its own");

    // The request's log lines, and its turn's, carry the client's trace id and span.
    for what in ["session/prompt", "turn state"] {
        let line = logged(&agent, TRACE_ID, what).await;
        assert!(line.contains(&format!("trace_id={TRACE_ID}")) && line.contains(CLIENT_SPAN), "{line}");
    }

    // The next prompt, without a context, sends none: nothing is left over from the last.
    env.mock.push(Reply::text(&["Plain."]));
    let answer = turn_with(&mut agent, &session, "again", json!({})).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let sent = env.mock.request_headers();
    assert!(untraced(&sent[2]), "{:?}", sent[2]);
}

#[tokio::test]
async fn a_prompt_without_a_trace_context_sends_no_trace_headers() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Hi."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hello").await;
    assert_eq!(agent.response(id).await.0["result"]["stopReason"], "end_turn");
    assert!(untraced(&env.mock.request_headers()[0]));
    assert!(untraced(&title_headers(&env).await));
    assert!(!agent.stderr().contains("trace_id="), "no span claims a trace:\n{}", agent.stderr());
}

#[tokio::test]
async fn an_invalid_trace_context_is_ignored_and_the_prompt_still_works() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let invalid = [
        json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", "tracestate": STATE}),
        json!({"traceparent": "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"}),
        json!({"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}),
        json!({"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}),
        json!({"traceparent": "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}),
        json!({"traceparent": format!("{}\r\nx-injected: yes", traceparent(TRACE_ID, "01"))}),
        json!({"traceparent": format!("01-{TRACE_ID}-{CLIENT_SPAN}-01-\r\nx-injected: yes")}),
        json!({"traceparent": 42, "tracestate": STATE}),
    ];
    for meta in &invalid {
        env.mock.push(Reply::text(&["Fine."]));
        let answer = turn_with(&mut agent, &session, "hello", meta.clone()).await;
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{meta}: {answer}");
    }
    let sent = env.mock.request_headers();
    assert_eq!(sent.len(), invalid.len());
    for (headers, meta) in sent.iter().zip(&invalid) {
        assert!(untraced(headers) && !headers.contains_key("x-injected"), "{meta}: {headers:?}");
    }
    logged(&agent, "ignoring an invalid trace context field", "traceparent").await;
    let stderr = agent.stderr();
    assert_eq!(stderr.matches("ignoring an invalid trace context field").count(), 1, "said once:\n{stderr}");
    assert!(!stderr.contains("trace_id="), "nothing invalid is put on a log line as a trace:\n{stderr}");

    // A valid traceparent with a tracestate that is not: the traceparent alone goes on.
    let too_long = format!("k={}", "v".repeat(520));
    let too_many: Vec<String> = (0..33).map(|i| format!("k{i}=v")).collect();
    let states = [too_long, too_many.join(","), "a=1\r\nx-injected: yes".to_owned(), "a=1,a=2".to_owned()];
    for state in &states {
        env.mock.push(Reply::text(&["Fine."]));
        let meta = json!({"traceparent": traceparent(TRACE_ID, "00"), "tracestate": state});
        let answer = turn_with(&mut agent, &session, "hello", meta).await;
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{state}: {answer}");
        let sent = env.mock.request_headers();
        let headers = sent.last().unwrap();
        child_of(headers, TRACE_ID, "00");
        assert!(!headers.contains_key("tracestate") && !headers.contains_key("x-injected"), "{state}: {headers:?}");
    }
}

#[tokio::test]
async fn the_anthropic_and_responses_apis_carry_the_trace_too() {
    for model in ["anthropic/claude-sonnet-4-5", "openai-responses/mock-model"] {
        let mut env = TestEnv::new().await;
        let url = env.mock.url.clone();
        env.set_env("CAIRN_MODEL", model);
        env.set_env("ANTHROPIC_BASE_URL", &url);
        env.set_env("ANTHROPIC_API_KEY", "sk-ant-test");
        let reply = if model.starts_with("anthropic") { Reply::anthropic("Hi.") } else { Reply::responses("Hi.") };
        env.mock.push(reply);
        let mut agent = env.ready().await;
        let session = agent.new_session(&env.cwd()).await;
        let meta = json!({"traceparent": traceparent(TRACE_ID, "01"), "tracestate": STATE});
        let answer = turn_with(&mut agent, &session, "hello", meta).await;
        assert_eq!(answer["result"]["stopReason"], "end_turn", "{model}: {answer}");
        let sent = env.mock.request_headers();
        child_of(&sent[0], TRACE_ID, "01");
        assert_eq!(header(&sent[0], "tracestate"), Some(STATE), "{model}");
    }
}

/// Sends `text` with `meta` and reads on until the permission question that holds its turn.
async fn held_turn(agent: &mut Agent, session: &str, text: &str, meta: Value) -> (i64, Value) {
    let prompt = prompt_with(agent, session, text, meta).await;
    loop {
        let message = agent.recv().await;
        if message["method"] == "session/request_permission" {
            return (prompt, message);
        }
    }
}

/// Sends `text` with `meta` while a turn is held, and reads on until the session says what it
/// did with it.
async fn busy_prompt(agent: &mut Agent, session: &str, text: &str, meta: Value, said: &str) -> i64 {
    let prompt = prompt_with(agent, session, text, meta).await;
    agent.until_said(said).await;
    prompt
}

fn write(id: &str, path: &str) -> Reply {
    Reply::tool_calls(&[(id, "write", json!({"path": path, "content": "x\n"}))])
}

const OTHER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";

#[tokio::test]
async fn a_queued_prompt_runs_on_its_own_trace_and_a_steered_one_leaves_the_turns_alone() {
    // Queued: the second prompt's turn is its own, on its own trace.
    let env = TestEnv::new().await;
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Wrote it."])).push(Reply::text(&["Second."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let first_meta = json!({"traceparent": traceparent(TRACE_ID, "01")});
    let (first, question) = held_turn(&mut agent, &session, "write a.txt", first_meta).await;
    let second_meta = json!({"traceparent": traceparent(OTHER_TRACE, "00"), "tracestate": STATE});
    let second = busy_prompt(&mut agent, &session, "then say hi", second_meta, "queued").await;
    agent.allow_once(&question).await;
    let (answers, _) = agent.responses(&[first, second]).await;
    assert!(answers.iter().all(|answer| answer["result"]["stopReason"] == "end_turn"), "{answers:?}");
    let sent = env.mock.request_headers();
    assert_eq!(sent.len(), 3);
    for headers in &sent[..2] {
        child_of(headers, TRACE_ID, "01");
        assert_eq!(header(headers, "tracestate"), None);
    }
    child_of(&sent[2], OTHER_TRACE, "00");
    assert_eq!(header(&sent[2], "tracestate"), Some(STATE));

    // Steered: the prompt joins the running turn, whose requests stay on the turn's trace.
    let env = TestEnv::new().await;
    env.write_config("[session]\nbusy_prompt = \"steer\"\n");
    env.mock.push(write("c1", "a.txt")).push(Reply::text(&["Wrote it, and hi."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let first_meta = json!({"traceparent": traceparent(TRACE_ID, "01")});
    let (first, question) = held_turn(&mut agent, &session, "write a.txt", first_meta).await;
    let second_meta = json!({"traceparent": traceparent(OTHER_TRACE, "00")});
    let second = busy_prompt(&mut agent, &session, "then say hi", second_meta, "joins the running turn").await;
    agent.allow_once(&question).await;
    let (answers, _) = agent.responses(&[first, second]).await;
    assert!(answers.iter().all(|answer| answer["result"]["stopReason"] == "end_turn"), "{answers:?}");
    let sent = env.mock.request_headers();
    assert_eq!(sent.len(), 2, "one turn");
    for headers in &sent {
        child_of(headers, TRACE_ID, "01");
    }
}

#[tokio::test]
async fn a_summary_made_in_a_turn_carries_the_turns_trace() {
    let env = TestEnv::new().await;
    // A 2,000-token window whose threshold the third answer's usage passes.
    env.write_config(
        "[models.\"openai/mock-model\"]\ncontext_window = 2000\nmax_output = 500\n\
         [compaction]\nreserve_tokens = 500\nmodel = \"openai/summarizer\"\n",
    );
    // An answer whose usage says the context holds `tokens`.
    let using = |text: &str, tokens: u64| {
        let mut events = Reply::text(&[text]).events();
        let usage = json!({"id": "c", "object": "chat.completion.chunk", "choices": [],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 5}});
        events[2] = usage.to_string();
        Reply::Stream { events, delay: Duration::ZERO }
    };
    env.mock.push(using("a1", 100)).push(using("a2", 200)).push(using("a3", 1_600));
    env.mock.push(Reply::text(&["## Goal\nthe user counts"])).push(using("a4", 600));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for text in ["one", "two", "three"] {
        let id = agent.prompt(&session, text).await;
        assert_eq!(agent.response(id).await.0["result"]["stopReason"], "end_turn");
    }
    let meta = json!({"traceparent": traceparent(TRACE_ID, "01")});
    let answer = turn_with(&mut agent, &session, "four", meta).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let bodies = env.mock.requests();
    let summary = bodies.iter().position(|body| {
        body["messages"][0]["content"].as_str().is_some_and(|text| text.starts_with("You compact the conversation"))
    });
    let summary = summary.unwrap_or_else(|| panic!("no summary request: {bodies:?}"));
    assert_eq!(summary, 3, "the fourth prompt's turn compacts first");
    let sent = env.mock.request_headers();
    assert!(sent[..3].iter().all(untraced), "the first prompts came without a trace");
    assert_eq!(sent.len(), 5);
    for headers in &sent[3..] {
        child_of(headers, TRACE_ID, "01");
    }
}

/// A sub-agent's model requests are part of the prompt's trace too.
#[tokio::test]
async fn a_sub_agents_model_requests_carry_the_prompts_trace() {
    let env = TestEnv::new().await;
    let task = json!({"description": "look", "prompt": "CHILD-T: look around"});
    env.mock.push(Reply::tool_calls(&[("t1", "task", task)])).push(Reply::text(&["Done."]));
    env.mock.route("CHILD-T", Reply::text(&["Looked."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let meta = json!({"traceparent": traceparent(TRACE_ID, "01")});
    let answer = turn_with(&mut agent, &session, "PARENT: delegate", meta).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let requests = env.mock.requests();
    let headers = env.mock.request_headers();
    let child = requests
        .iter()
        .position(|r| r.to_string().contains("CHILD-T: look around") && r["messages"].as_array().unwrap().len() == 2);
    let child = child.expect("the sub-agent's request");
    child_of(&headers[child], TRACE_ID, "01");
}
