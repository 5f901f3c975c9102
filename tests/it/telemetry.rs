//! OpenTelemetry export: with `OTEL_EXPORTER_OTLP_ENDPOINT` set, a turn is exported as spans
//! (turn > step > model request / tool call) under the client's trace, with the GenAI attributes
//! and without prompts or file contents unless `[telemetry] log_prompts` says so, and as metrics;
//! a model request's `traceparent` names its span. Without the variables nothing is sent; a
//! collector that is down or slow costs the turn nothing and holds the exit at most a bound.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::collector::{Collector, Span};
use crate::support::{Agent, Reply, TestEnv};

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";
/// What the file the model reads holds: never exported.
const SECRET_CONTENT: &str = "alpha-file-content-4711";
const PROMPT: &str = "read the notes please";
/// The longest an exit may take after stdin closes, flush included: the flush gives up after 2 s,
/// and the rest is slack for a loaded machine; far under what a collector holding a batch would
/// take without the bound ([`HELD`]).
const EXIT_BOUND: Duration = Duration::from_secs(8);
/// How long a slow collector holds a batch, and the export timeout it is given.
const HELD: Duration = Duration::from_secs(120);

/// An environment whose agents export to `url`, naming `protocol` (`None`: the default).
async fn exporting(url: &str, protocol: Option<&str>) -> TestEnv {
    let mut env = TestEnv::new().await;
    env.set_env("OTEL_EXPORTER_OTLP_ENDPOINT", url);
    if let Some(protocol) = protocol {
        env.set_env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
    }
    std::fs::write(env.workspace().join("notes.txt"), format!("{SECRET_CONTENT}\n")).unwrap();
    env
}

/// Runs a turn with one `read` call and an answer, on the client's trace; answers the agent.
async fn traced_turn(env: &TestEnv) -> Agent {
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "notes.txt"}))]));
    env.mock.push(Reply::text(&["Read it."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let meta = json!({"traceparent": format!("00-{TRACE_ID}-{CLIENT_SPAN}-01")});
    let prompt = json!([{"type": "text", "text": PROMPT}]);
    let id = agent.request("session/prompt", json!({"sessionId": session, "prompt": prompt, "_meta": meta})).await;
    let (answer, _) = agent.response(id).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    agent
}

/// Closes stdin and waits for the exit; answers how long it took.
async fn exit(agent: &mut Agent) -> Duration {
    agent.close_stdin();
    let (status, took) = agent.wait_exit().await;
    assert!(status.success(), "{status}; stderr:\n{}", agent.stderr());
    took
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|span| span.name == name || span.name.starts_with(&format!("{name} "))).collect()
}

#[tokio::test]
async fn a_turn_is_exported_as_spans_under_the_clients_trace_with_metrics() {
    let collector = Collector::start().await;
    let env = exporting(&collector.url, Some("http/protobuf")).await;
    let mut agent = traced_turn(&env).await;
    assert!(exit(&mut agent).await < EXIT_BOUND);

    let spans = collector.spans();
    let turns = named(&spans, "invoke_agent");
    assert_eq!(turns.len(), 1, "{spans:#?}");
    let turn = turns[0];
    assert_eq!(
        (turn.trace_id.as_str(), turn.parent_id.as_str()),
        (TRACE_ID, CLIENT_SPAN),
        "the client's span is its parent"
    );
    assert_eq!(turn.attr("gen_ai.operation.name").as_deref(), Some("invoke_agent"));
    assert_eq!(turn.attr("cairn.turn.stop").as_deref(), Some("end_turn"));
    assert_eq!(turn.attr("cairn.turn.steps").as_deref(), Some("2"));

    let steps = named(&spans, "step");
    assert_eq!(steps.len(), 2, "a step with the call, then the answer");
    assert!(steps.iter().all(|step| step.parent_id == turn.span_id && step.trace_id == TRACE_ID));
    let chats = named(&spans, "chat");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    for chat in &chats {
        assert!(steps.iter().any(|step| step.span_id == chat.parent_id), "a request is a step's child");
        assert_eq!(chat.name, "chat mock-model");
        assert_eq!(chat.attr("gen_ai.request.model").as_deref(), Some("mock-model"));
        for counted in ["gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "cairn.time_to_first_token"] {
            assert!(chat.attr(counted).is_some(), "{counted} on {chat:#?}");
        }
    }
    let tools = named(&spans, "execute_tool");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    let tool = tools[0];
    assert_eq!(tool.name, "execute_tool read");
    assert!(steps.iter().any(|step| step.span_id == tool.parent_id), "a call is a step's child");
    assert_eq!(tool.attr("gen_ai.tool.name").as_deref(), Some("read"));
    assert_eq!(tool.attr("gen_ai.tool.call.id").as_deref(), Some("c1"));
    assert_eq!(tool.attr("cairn.permission.decision").as_deref(), Some("allow"));
    assert_eq!(tool.attr("cairn.tool.outcome").as_deref(), Some("success"));

    // Each model request's traceparent names its own exported span.
    let mut sent: Vec<String> = env
        .mock
        .request_headers()
        .iter()
        .map(|headers| headers.get("traceparent").unwrap().to_str().unwrap().split('-').nth(2).unwrap().to_owned())
        .collect();
    let mut ids: Vec<String> = chats.iter().map(|chat| chat.span_id.clone()).collect();
    sent.sort();
    ids.sort();
    assert_eq!(sent, ids);

    // Neither the prompt nor what the tool read leaves the machine.
    for request in collector.received() {
        assert_eq!(request.content_type, "application/x-protobuf");
        let body = String::from_utf8_lossy(&request.body);
        assert!(!body.contains(SECRET_CONTENT) && !body.contains(PROMPT), "{body}");
    }
    assert!(turn.attr("gen_ai.input.messages").is_none());
    assert!(
        collector.resource().contains(&("service.name".to_owned(), "cairn".to_owned())),
        "{:?}",
        collector.resource()
    );

    let metrics = collector.metrics();
    for metric in [
        "cairn.tokens",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.duration",
        "cairn.model.time_to_first_token",
        "cairn.tool.calls",
        "cairn.tool.duration",
        "cairn.turn.duration",
    ] {
        assert!(metrics.iter().any(|(name, _)| name == metric), "{metric} missing from {metrics:?}");
    }
    let calls = metrics.iter().find(|(name, _)| name == "cairn.tool.calls").unwrap();
    for expected in
        [("gen_ai.tool.name", "read"), ("cairn.permission.decision", "allow"), ("cairn.tool.outcome", "success")]
    {
        assert!(calls.1.contains(&(expected.0.to_owned(), expected.1.to_owned())), "{expected:?} in {calls:?}");
    }
    let tokens = metrics.iter().find(|(name, _)| name == "cairn.tokens").unwrap();
    for kind in ["input", "output", "cache_read", "cache_write"] {
        assert!(tokens.1.contains(&("cairn.token.kind".to_owned(), kind.to_owned())), "{kind} in {tokens:?}");
    }
}

#[tokio::test]
async fn the_prompt_is_exported_only_with_log_prompts() {
    let collector = Collector::start().await;
    let env = exporting(&collector.url, Some("http/protobuf")).await;
    env.write_config("[telemetry]\nlog_prompts = true\n");
    let mut agent = traced_turn(&env).await;
    exit(&mut agent).await;
    let spans = collector.spans();
    let turn = named(&spans, "invoke_agent")[0];
    let messages: Value = serde_json::from_str(&turn.attr("gen_ai.input.messages").expect("the prompt")).unwrap();
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["parts"][0]["content"], PROMPT);
    let bodies: String = collector.received().iter().map(|r| String::from_utf8_lossy(&r.body).into_owned()).collect();
    assert!(!bodies.contains(SECRET_CONTENT), "file contents stay out even so");
}

#[tokio::test]
async fn the_default_protocol_is_protobuf_and_a_service_name_is_kept() {
    let collector = Collector::start().await;
    let mut env = exporting(&collector.url, None).await;
    env.set_env("OTEL_SERVICE_NAME", "team-agent");
    let mut agent = traced_turn(&env).await;
    exit(&mut agent).await;
    let received = collector.received();
    for path in ["/v1/traces", "/v1/metrics"] {
        let request = received.iter().find(|request| request.path == path).unwrap_or_else(|| panic!("no {path}"));
        assert_eq!(request.content_type, "application/x-protobuf");
    }
    assert!(collector.resource().contains(&("service.name".to_owned(), "team-agent".to_owned())));
    assert_eq!(named(&collector.spans(), "invoke_agent").len(), 1);
}

#[tokio::test]
async fn without_an_endpoint_or_with_the_sdk_disabled_nothing_is_sent() {
    let collector = Collector::start().await;
    // Disabled: the endpoint is there, and still no connection is made.
    let mut env = exporting(&collector.url, Some("http/protobuf")).await;
    env.set_env("OTEL_SDK_DISABLED", "true");
    let mut agent = traced_turn(&env).await;
    exit(&mut agent).await;
    // Headers and a protocol but no endpoint: nothing is built, no default endpoint is tried.
    let mut env = TestEnv::new().await;
    env.set_env("OTEL_EXPORTER_OTLP_HEADERS", "x-team=1");
    env.set_env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
    std::fs::write(env.workspace().join("notes.txt"), "x\n").unwrap();
    let mut agent = traced_turn(&env).await;
    exit(&mut agent).await;
    assert!(!agent.stderr().contains("telemetry"), "{}", agent.stderr());
    assert_eq!(collector.connections(), 0);
}

#[tokio::test]
async fn grpc_and_json_are_refused_with_one_line_and_nothing_is_sent() {
    let collector = Collector::start().await;
    for protocol in ["grpc", "http/json"] {
        let env = exporting(&collector.url, Some(protocol)).await;
        let mut agent = traced_turn(&env).await;
        exit(&mut agent).await;
        let variable = format!("OTEL_EXPORTER_OTLP_PROTOCOL={protocol}");
        let said: Vec<String> =
            agent.stderr().lines().filter(|line| line.contains(&variable)).map(str::to_owned).collect();
        assert_eq!(said.len(), 2, "one line per signal: {said:?}");
        assert!(said[0].contains("set it to http/protobuf or unset it"), "{}", said[0]);
    }
    assert_eq!(collector.connections(), 0);
}

#[tokio::test]
async fn a_collector_that_is_down_costs_the_turn_nothing_and_warns_once() {
    let env = exporting(&Collector::down().await, Some("http/protobuf")).await;
    let started = Instant::now();
    let mut agent = traced_turn(&env).await;
    let turn = started.elapsed();
    let took = exit(&mut agent).await;
    assert!(took < EXIT_BOUND, "exit took {took:?}");
    assert!(turn < EXIT_BOUND, "the turn took {turn:?}");
    let warnings = agent.stderr().matches("telemetry export failed").count();
    assert_eq!(warnings, 1, "one warning per outage:\n{}", agent.stderr());
}

#[tokio::test]
async fn a_collector_that_never_answers_holds_the_exit_at_most_the_bound() {
    let collector = Collector::slow(HELD).await;
    let mut env = exporting(&collector.url, Some("http/protobuf")).await;
    env.set_env("OTEL_EXPORTER_OTLP_TIMEOUT", &HELD.as_millis().to_string());
    let mut agent = traced_turn(&env).await;
    let took = exit(&mut agent).await;
    assert!(took < EXIT_BOUND, "exit took {took:?}");
    assert!(!collector.received().is_empty(), "the flush was tried");
}

#[tokio::test]
async fn a_traces_collector_that_never_answers_costs_the_metrics_nothing() {
    let slow = Collector::slow(HELD).await;
    let fine = Collector::start().await;
    let mut env = TestEnv::new().await;
    env.set_env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &format!("{}/v1/traces", slow.url));
    env.set_env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", &format!("{}/v1/metrics", fine.url));
    env.set_env("OTEL_EXPORTER_OTLP_TIMEOUT", &HELD.as_millis().to_string());
    std::fs::write(env.workspace().join("notes.txt"), format!("{SECRET_CONTENT}\n")).unwrap();
    let mut agent = traced_turn(&env).await;
    let took = exit(&mut agent).await;
    assert!(took < EXIT_BOUND, "exit took {took:?}");
    assert!(!slow.received().is_empty(), "the traces' flush was tried");
    assert!(!fine.metrics().is_empty(), "the metrics were flushed beside the held traces");
}

#[tokio::test]
async fn sigterm_flushes_what_the_turn_exported() {
    let collector = Collector::start().await;
    let env = exporting(&collector.url, Some("http/protobuf")).await;
    let mut agent = traced_turn(&env).await;
    let pid = i32::try_from(agent.child.id().unwrap()).unwrap();
    let sent = std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(sent.success());
    let (status, took) = agent.wait_exit().await;
    assert!(took < EXIT_BOUND, "{took:?}");
    assert_eq!(status.code(), Some(143), "{status}");
    assert_eq!(named(&collector.spans(), "invoke_agent").len(), 1, "the turn was flushed");
}

#[tokio::test]
async fn the_official_rust_client_drives_a_traced_turn() {
    let collector = Collector::start().await;
    let env = exporting(&collector.url, Some("http/protobuf")).await;
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "notes.txt"}))]));
    env.mock.push(Reply::text(&["Read it."]));
    let meta = json!({"traceparent": format!("00-{TRACE_ID}-{CLIENT_SPAN}-01")});
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": PROMPT}], "_meta": meta}},
    ]});
    let transcript = crate::support::sdk::run(&env, &script, &["acp"]).await;
    assert_eq!(transcript["steps"][1]["response"]["stopReason"], "end_turn", "{transcript}");
    let spans = collector.spans();
    let turn = named(&spans, "invoke_agent");
    assert_eq!(turn.len(), 1, "{spans:#?}");
    assert_eq!((turn[0].trace_id.as_str(), turn[0].parent_id.as_str()), (TRACE_ID, CLIENT_SPAN));
    assert_eq!(named(&spans, "execute_tool").len(), 1);
}

#[tokio::test]
async fn a_sub_agents_turn_is_a_child_of_its_task_call() {
    let collector = Collector::start().await;
    let env = exporting(&collector.url, Some("http/protobuf")).await;
    env.mock.push(Reply::tool_calls(&[(
        "t1",
        "task",
        json!({"description": "read", "prompt": "CHILD-A: read notes.txt"}),
    )]));
    env.mock.push(Reply::text(&["Done."]));
    env.mock.route("CHILD-A", Reply::tool_calls(&[("k1", "read", json!({"path": "notes.txt"}))]));
    env.mock.route("CHILD-A", Reply::text(&["It says something."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    // On the client's trace, which the child's turn must not take as its parent.
    let meta = json!({"traceparent": format!("00-{TRACE_ID}-{CLIENT_SPAN}-01")});
    let prompt = json!([{"type": "text", "text": "PARENT: delegate"}]);
    let id = agent.request("session/prompt", json!({"sessionId": session, "prompt": prompt, "_meta": meta})).await;
    assert_eq!(agent.response(id).await.0["result"]["stopReason"], "end_turn");
    exit(&mut agent).await;

    let spans = collector.spans();
    let task = named(&spans, "execute_tool task");
    assert_eq!(task.len(), 1, "{spans:#?}");
    let turns = named(&spans, "invoke_agent");
    assert_eq!(turns.len(), 2, "{spans:#?}");
    let child = turns.iter().find(|turn| turn.parent_id == task[0].span_id).expect("the child's turn under the call");
    assert_eq!(child.trace_id, task[0].trace_id);
    let read = named(&spans, "execute_tool read");
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].trace_id, task[0].trace_id, "the child's calls are on the same trace");
}

#[tokio::test]
async fn a_collector_redirecting_elsewhere_is_not_followed_with_the_headers() {
    let elsewhere = Collector::start().await;
    let collector = Collector::redirecting(&elsewhere.url).await;
    let mut env = exporting(&collector.url, Some("http/protobuf")).await;
    env.set_env("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=otlp-key-0042");
    let mut agent = traced_turn(&env).await;
    exit(&mut agent).await;
    assert!(!collector.received().is_empty(), "the export was tried");
    assert_eq!(elsewhere.connections(), 0, "the key went to another host: {:?}", elsewhere.received());
    assert_eq!(agent.stderr().matches("telemetry export failed").count(), 1, "{}", agent.stderr());
}

#[tokio::test]
async fn a_tool_name_the_model_made_up_is_not_exported() {
    // A model can spell anything as a call's name, what it just read included.
    const MADE_UP: &str = "sk-made-up-name-9931";
    let collector = Collector::start().await;
    let env = exporting(&collector.url, Some("http/protobuf")).await;
    env.mock.push(Reply::tool_calls(&[("c1", MADE_UP, json!({}))]));
    env.mock.push(Reply::text(&["Sorry."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "go").await;
    assert_eq!(agent.response(id).await.0["result"]["stopReason"], "end_turn");
    exit(&mut agent).await;

    let spans = collector.spans();
    let tools = named(&spans, "execute_tool");
    assert_eq!(tools.len(), 1, "{tools:#?}");
    assert_eq!(tools[0].attr("gen_ai.tool.name").as_deref(), Some("unknown"));
    assert_eq!(tools[0].attr("cairn.tool.outcome").as_deref(), Some("not_run"));
    for request in collector.received() {
        assert!(!String::from_utf8_lossy(&request.body).contains(MADE_UP), "{} carries the name", request.path);
    }
}

#[tokio::test]
async fn with_log_prompts_a_sub_agents_prompt_the_model_wrote_is_not_exported() {
    let collector = Collector::start().await;
    let env = exporting(&collector.url, Some("http/protobuf")).await;
    env.write_config("[telemetry]\nlog_prompts = true\n");
    // The model writes the task's prompt, and may quote there what it read.
    env.mock.push(Reply::tool_calls(&[("t1", "task", json!({"description": "d", "prompt": "CHILD-A: it says 0042"}))]));
    env.mock.push(Reply::text(&["Done."]));
    env.mock.route("CHILD-A", Reply::text(&["Fine."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "PARENT: delegate").await;
    assert_eq!(agent.response(id).await.0["result"]["stopReason"], "end_turn");
    exit(&mut agent).await;

    let spans = collector.spans();
    let turns = named(&spans, "invoke_agent");
    assert_eq!(turns.len(), 2, "{spans:#?}");
    let prompts: Vec<String> = turns.iter().filter_map(|turn| turn.attr("gen_ai.input.messages")).collect();
    assert_eq!(prompts.len(), 1, "the user's prompt only: {prompts:?}");
    assert!(prompts[0].contains("PARENT: delegate"), "{prompts:?}");
    for request in collector.received() {
        assert!(!String::from_utf8_lossy(&request.body).contains("it says 0042"), "{}", request.path);
    }
}

#[tokio::test]
async fn a_collector_failure_is_logged_without_the_urls_credentials() {
    // The credentials hold letters: a log line's time (`31.004267Z`) once held "0042".
    let down = Collector::down().await;
    let with_password = down.replacen("http://", "http://team:pw-s3cr3t@", 1);
    let env = exporting(&format!("{with_password}?key=q-s3cr3t"), Some("http/protobuf")).await;
    let mut agent = traced_turn(&env).await;
    exit(&mut agent).await;
    let stderr = agent.stderr();
    assert_eq!(stderr.matches("telemetry export failed").count(), 1, "{stderr}");
    assert!(!stderr.contains("s3cr3t"), "{stderr}");
    // An endpoint that is no URL is refused, and its credentials are not shown either.
    let env = exporting("http://team:pw-s3cr3t@bad host:4318", Some("http/protobuf")).await;
    let mut agent = traced_turn(&env).await;
    exit(&mut agent).await;
    let stderr = agent.stderr();
    assert!(stderr.contains("cannot export traces"), "{stderr}");
    assert!(!stderr.contains("s3cr3t"), "{stderr}");
}
