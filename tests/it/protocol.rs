//! The JSON-RPC peer and `initialize`: negotiation, capabilities, and every kind of bad input.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Reply, TestEnv};

fn error_code(response: &Value) -> i64 {
    response["error"]["code"].as_i64().unwrap_or_else(|| panic!("not an error: {response}"))
}

fn message(response: &Value) -> &str {
    response["error"]["message"].as_str().unwrap()
}

#[tokio::test]
async fn initialize_answers_version_1_whatever_is_asked_and_advertises_what_works() {
    let env = TestEnv::new().await;
    for asked in [1, 2, 65535] {
        let mut agent = env.spawn().await;
        let result = agent
            .call("initialize", json!({"protocolVersion": asked, "clientCapabilities": {}, "clientInfo": {"name": "t", "version": "1"}}))
            .await;
        assert_eq!(
            result,
            json!({
                "protocolVersion": 1,
                "agentCapabilities": {
                    "loadSession": true,
                    "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
                    "mcpCapabilities": {"http": true, "sse": false},
                    "sessionCapabilities": {
                        "list": {}, "delete": {}, "resume": {}, "close": {}, "fork": {}, "additionalDirectories": {},
                        "systemPrompt": {"mode": {"override": {}}}, "title": {}, "status": {}, "archive": {}
                    },
                    "auth": {"logout": {}}
                },
                "authMethods": [
                    {
                        "id": "environment",
                        "name": "Use API keys from the environment",
                        "description": "OPENAI_API_KEY, ANTHROPIC_API_KEY or a provider's api_key_env, set where the editor starts cairn"
                    }
                ],
                "agentInfo": {"name": "cairn", "title": "cairn", "version": env!("CARGO_PKG_VERSION")},
                "_meta": {"steering": {"supported": true}}
            }),
            "asked for version {asked}"
        );
    }
}

#[tokio::test]
async fn malformed_json_gets_a_parse_error_with_a_null_id_and_the_agent_carries_on() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    for line in ["{not json", "{\"jsonrpc\":\"2.0\",\"id\":1,", "\u{1b}[A"] {
        agent.send_raw(line).await;
        let response = agent.recv().await;
        assert_eq!(response["id"], Value::Null, "{line}: {response}");
        assert_eq!(error_code(&response), -32700);
        assert!(message(&response).contains("invalid JSON"), "{response}");
    }
    let result = agent.call("session/list", json!({})).await;
    assert_eq!(result, json!({"sessions": []}));
}

#[tokio::test]
async fn invalid_utf8_and_blank_lines_do_not_break_the_stream() {
    use tokio::io::AsyncWriteExt;
    let env = TestEnv::new().await;
    let mut command = env.command();
    command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"\n   \n\xff\xfe{}\n{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"session/list\"}\n").await.unwrap();
    drop(stdin);
    let output = child.wait_with_output().await.unwrap();
    let lines: Vec<Value> =
        String::from_utf8(output.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!((lines[0]["id"].clone(), error_code(&lines[0])), (Value::Null, -32700));
    assert_eq!(lines[1], json!({"jsonrpc": "2.0", "id": 7, "result": {"sessions": []}}));
}

#[tokio::test]
async fn messages_that_are_not_requests_get_invalid_request() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let cases = [
        (json!([1, 2, 3]), Value::Null),
        (json!("hello"), Value::Null),
        (json!({"jsonrpc": "1.0", "id": 3, "method": "session/list"}), json!(3)),
        (json!({"id": 4, "method": "session/list"}), json!(4)),
        (json!({"jsonrpc": "2.0", "id": 5}), json!(5)),
        (json!({"jsonrpc": "2.0", "id": 6, "method": 42}), json!(6)),
        (json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "session/list"}), Value::Null),
        (json!({"jsonrpc": "2.0", "method": 42}), Value::Null),
    ];
    for (sent, id) in cases {
        agent.send(sent.clone()).await;
        let response = agent.recv().await;
        assert_eq!(response["id"], id, "{sent}: {response}");
        assert_eq!(error_code(&response), -32600, "{sent}: {response}");
    }
}

#[tokio::test]
async fn unknown_methods_are_not_found_and_string_ids_are_echoed() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    for method in ["session/teleport", "_zed.dev/workspace/buffers", "session/set_model"] {
        agent.send(json!({"jsonrpc": "2.0", "id": "req-7", "method": method, "params": {}})).await;
        let response = agent.recv().await;
        assert_eq!(response["id"], "req-7");
        assert_eq!(error_code(&response), -32601, "{method}");
        assert!(message(&response).contains(method), "{response}");
    }
}

#[tokio::test]
async fn bad_params_are_invalid_params_naming_the_field() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    let file = env.workspace().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let file = file.to_string_lossy().into_owned();
    let session = agent.new_session(&env.cwd()).await;
    let cases = [
        ("session/new", json!({"cwd": "/nonexistent/cairn-dir"}), "/nonexistent/cairn-dir"),
        ("session/new", json!({"cwd": file}), "is not a directory"),
        ("session/load", json!({"sessionId": session, "cwd": "/nonexistent/cairn-dir"}), "/nonexistent/cairn-dir"),
        ("session/resume", json!({"sessionId": session, "cwd": file}), "is not a directory"),
        ("session/fork", json!({"sessionId": session, "cwd": "/nonexistent/cairn-dir"}), "/nonexistent/cairn-dir"),
        ("session/new", json!({}), "cwd"),
        ("session/new", json!({"cwd": 5}), "cwd"),
        ("session/new", json!({"cwd": "relative/dir"}), "absolute"),
        ("session/prompt", json!({"sessionId": "ses_x"}), "prompt"),
        ("session/prompt", json!({"sessionId": "ses_x", "prompt": [{"type": "text"}]}), "text"),
        ("session/prompt", json!({"sessionId": "ses_x", "prompt": []}), "at least one"),
        ("session/load", json!({"sessionId": 12, "cwd": "/"}), "sessionId"),
        ("session/list", json!({"cursor": "garbage"}), "cursor"),
        ("initialize", json!({"protocolVersion": "1.0.0"}), "protocolVersion"),
        ("session/set_config_option", json!({"sessionId": "ses_x", "configId": "colour", "value": "red"}), "colour"),
    ];
    for (method, params, named) in cases {
        let error = agent.call_err(method, params.clone()).await;
        assert_eq!(error["code"], -32602, "{method} {params}: {error}");
        assert!(error["message"].as_str().unwrap().contains(named), "{method} {params}: {error}");
    }
}

#[tokio::test]
async fn notifications_are_never_answered() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    agent.notify("_zed.dev/something", json!({"x": 1})).await;
    agent.notify("session/cancel", json!({"sessionId": "ses_unknown"})).await;
    agent.notify("session/cancel", json!({"nonsense": true})).await;
    agent.notify("some/unknown_notification", json!({})).await;
    agent.send(json!({"jsonrpc": "2.0", "id": 99, "result": {"stray": true}})).await;
    agent.send(json!({"jsonrpc": "2.0", "id": 98, "error": {"code": -1, "message": "stray"}})).await;
    let id = agent.request("session/list", json!({})).await;
    let next = agent.recv().await;
    assert_eq!(next["id"], id, "the first message after the notifications must answer the request: {next}");
}

#[tokio::test]
async fn cancel_request_aborts_the_named_request_with_32800() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(20)));
    env.mock.push(Reply::text(&["still fine"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "go on forever").await;
    agent.next_chunk().await;
    agent.notify("$/cancel_request", json!({"requestId": id})).await;
    let (response, _) = agent.response(id).await;
    assert_eq!(error_code(&response), -32800, "{response}");
    env.mock.wait_dropped(1, Duration::from_secs(2)).await;

    let id = agent.prompt(&session, "and now?").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
}

#[tokio::test]
async fn stdin_eof_cancels_the_running_turn_flushes_and_exits_within_a_second() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(10)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    agent.prompt(&session, "stream until I leave").await;
    let mut seen = String::new();
    while seen.len() < 40 {
        seen.push_str(&agent.next_chunk().await);
    }
    agent.close_stdin();
    let (status, took) = agent.wait_exit().await;
    assert!(status.success(), "{status}");
    assert!(took < Duration::from_secs(1), "exit took {took:?}");
    env.mock.wait_dropped(1, Duration::from_secs(1)).await;

    let mut agent = env.ready().await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    let replayed: String = replay
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .map(|m| m["params"]["update"]["content"]["text"].as_str().unwrap())
        .collect();
    assert!(replayed.starts_with(&seen), "replayed {replayed:?} does not hold what was shown {seen:?}");
}

#[tokio::test]
async fn stderr_is_plain_text_when_it_is_not_a_terminal() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Hi."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hello").await;
    agent.response(id).await;
    agent.close_stdin();
    agent.wait_exit().await;
    let stderr = agent.stderr();
    assert!(stderr.contains("turn state"), "the debug log was written: {stderr}");
    assert!(!stderr.contains('\u{1b}'), "no escape codes for an editor to show raw: {stderr:?}");
}

#[tokio::test]
async fn a_request_reusing_a_running_requests_id_is_refused() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::endless(Duration::from_millis(20)));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": "go"}]});
    agent.send(json!({"jsonrpc": "2.0", "id": 77, "method": "session/prompt", "params": prompt})).await;
    agent.next_chunk().await;
    agent.send(json!({"jsonrpc": "2.0", "id": 77, "method": "session/list", "params": {}})).await;
    let refused = loop {
        let message = agent.recv().await;
        if message.get("id").is_some() {
            break message;
        }
    };
    assert_eq!(refused["id"], 77);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    agent.notify("session/cancel", json!({"sessionId": session})).await;
    let answered = loop {
        let message = agent.recv().await;
        if message.get("id").is_some() {
            break message;
        }
    };
    assert_eq!(answered["id"], 77);
    assert_eq!(answered["result"]["stopReason"], "cancelled", "the running prompt keeps its id: {answered}");
}

#[tokio::test]
async fn request_ids_come_back_exactly_as_sent() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let env = TestEnv::new().await;
    let mut command = env.command();
    command.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).kill_on_drop(true);
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for id in ["18446744073709551616", "123456789012345678901234567890", "-0.0", "3"] {
        let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"initialize","params":{{"protocolVersion":1}}}}"#);
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), lines.next_line()).await.unwrap().unwrap().unwrap();
        assert!(answer.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result""#)), "{id}: {answer}");
    }
}

#[tokio::test]
async fn wrong_settings_are_refused_naming_the_setting() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/");
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert!(error["message"].as_str().unwrap().contains("CAIRN_MODEL: `openai/` is not `provider/model`"), "{error}");

    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_HOME", "relative/home");
    let mut agent = env.ready().await;
    let error = agent.call_err("session/new", json!({"cwd": env.cwd(), "mcpServers": []})).await;
    assert!(error["message"].as_str().unwrap().contains("CAIRN_HOME: `relative/home` is relative"), "{error}");

    let env = TestEnv::new().await;
    let mut command = env.command();
    command.arg("--log-file").arg("/nonexistent/dir/cairn.log").stdin(std::process::Stdio::null());
    let output = command.output().await.unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--log-file /nonexistent/dir/cairn.log: cannot open it"), "{stderr}");
}

/// `initialize` needs neither the database nor the configuration, so it does not wait for them:
/// here another process holds the database locked, and the editor's handshake is answered all
/// the same; the first session waits for the lock instead.
#[tokio::test]
async fn initialize_is_answered_while_the_database_is_still_opening() {
    let env = TestEnv::new().await;
    let mut agent = env.ready().await;
    agent.new_session(&env.cwd()).await;
    agent.close_stdin();
    agent.wait_exit().await;

    let lock = rusqlite::Connection::open(env.database()).unwrap();
    lock.execute_batch("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; SELECT count(*) FROM sessions;").unwrap();
    let mut agent = env.spawn().await;
    let answer = agent.initialize().await;
    assert_eq!(answer["protocolVersion"], 1, "{answer}");
    assert!(!agent.stderr().contains("database"), "the store's wait showed up first: {}", agent.stderr());
    // Within the store's 5 s busy wait, let go: the session it was waiting for opens.
    lock.execute_batch("COMMIT; PRAGMA locking_mode = NORMAL; SELECT count(*) FROM sessions;").unwrap();
    drop(lock);
    let session = agent.new_session(&env.cwd()).await;
    assert!(!session.is_empty());
}

/// Registries and clients such as acpx launch `<agent> acp`; it is the same server.
#[tokio::test]
async fn cairn_acp_serves_the_protocol_like_no_command() {
    let env = TestEnv::new().await;
    let mut command = env.command();
    command.arg("acp");
    let mut agent = crate::support::Agent::spawn(command, crate::support::Editor::default()).await;
    assert_eq!(agent.initialize().await["protocolVersion"], 1);
    let session = agent.new_session(&env.cwd()).await;
    env.mock.push(Reply::text(&["Hi from acp"]));
    let id = agent.prompt(&session, "hello").await;
    let (response, updates) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    assert_eq!(
        crate::support::text_of(&crate::support::updates(&updates, &session), "agent_message_chunk"),
        "Hi from acp"
    );
}

/// Drives cairn over raw pipes through a session and a prompt, then EOF; returns every stdout
/// line as written.
async fn raw_stdout_of_a_session(env: &TestEnv) -> Vec<String> {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut child = env
        .command()
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut lines = Vec::new();
    let mut ask = async |line: Value, id: i64, lines: &mut Vec<String>| -> Value {
        stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
        loop {
            let line = stdout.next_line().await.unwrap().expect("cairn closed stdout early");
            lines.push(line.clone());
            if let Ok(value) = serde_json::from_str::<Value>(&line)
                && value["id"] == id
            {
                return value;
            }
        }
    };
    ask(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}), 1, &mut lines)
        .await;
    let new =
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": env.cwd(), "mcpServers": []}});
    let created = ask(new, 2, &mut lines).await;
    if let Some(session) = created["result"]["sessionId"].as_str() {
        let prompt = json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": "hello"}]}});
        ask(prompt, 3, &mut lines).await;
    }
    stdin.write_all(b"this is not json\n").await.unwrap();
    drop(stdin);
    while let Some(line) = stdout.next_line().await.unwrap() {
        lines.push(line);
    }
    child.wait().await.unwrap();
    lines
}

fn assert_only_json_rpc(lines: &[String], case: &str) {
    assert!(!lines.is_empty(), "{case}: nothing on stdout");
    for line in lines {
        let value: Value = serde_json::from_str(line).unwrap_or_else(|err| panic!("{case}: not JSON ({err}): {line}"));
        assert_eq!(value["jsonrpc"], "2.0", "{case}: not JSON-RPC: {line}");
        assert!(
            value.get("method").is_some() || value.get("id").is_some(),
            "{case}: neither a call nor an answer: {line}"
        );
    }
}

/// What an ACP registry checks: whatever goes wrong, and however loud the logs, stdout carries
/// JSON-RPC and nothing else.
#[tokio::test]
async fn stdout_carries_only_json_rpc_whatever_goes_wrong() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "trace");
    env.write_config("this is = = not toml [");
    assert_only_json_rpc(&raw_stdout_of_a_session(&env).await, "a garbage config.toml");

    env.write_config("");
    env.set_env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1");
    assert_only_json_rpc(&raw_stdout_of_a_session(&env).await, "a model server that is not there");

    env.set_env("OPENAI_BASE_URL", &env.mock.url.clone());
    env.mock.push(Reply::status(500, "<html><title>Bad Gateway</title></html>"));
    env.mock.push(Reply::status(500, "<html><title>Bad Gateway</title></html>"));
    env.mock.push(Reply::status(500, "<html><title>Bad Gateway</title></html>"));
    assert_only_json_rpc(&raw_stdout_of_a_session(&env).await, "a model server failing");

    env.set_env("CAIRN_HOME", "relative/home");
    assert_only_json_rpc(&raw_stdout_of_a_session(&env).await, "an unusable CAIRN_HOME");
}
