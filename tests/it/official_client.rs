//! Conformance with the official Rust ACP client (`agent-client-protocol`, built by the suite from
//! `tests/conformance/rust-sdk/`): it spawns `cairn` and drives initialize → new → prompt → load
//! through its own typed API, a session with an MCP server of its own, a served session through
//! the bridge, and a session whose turn another replica of a shared store runs. The SDK parses
//! every update, so one it rejects fails the test.

use serde_json::{Value, json};

use crate::support::sdk::{self, agent_text, updates};
use crate::support::served::Server;
use crate::support::{Reply, TestEnv};

fn initialize() -> Value {
    json!({"protocolVersion": 1, "clientCapabilities": {}})
}

#[tokio::test]
async fn the_official_client_drives_initialize_new_prompt_and_load() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Hello ", "from ", "cairn."]));
    let script = json!({"initialize": initialize(), "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "Say hello"}]}},
        {"load": {"sessionId": "$session", "cwd": env.cwd(), "mcpServers": []}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;

    assert_eq!(transcript["initialize"]["protocolVersion"], 1);
    assert_eq!(transcript["initialize"]["agentCapabilities"]["loadSession"], true);
    let steps = &transcript["steps"];
    assert_eq!(steps[1]["response"]["stopReason"], "end_turn");
    let (live, replayed) = (updates(&steps[1]), updates(&steps[2]));
    assert_eq!(agent_text(&live), "Hello from cairn.");
    assert_eq!(agent_text(&replayed), agent_text(&live));
    let ids = |updates: &[Value]| -> Vec<Value> {
        let mut ids: Vec<Value> = updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
            .map(|u| u["messageId"].clone())
            .collect();
        ids.dedup();
        ids
    };
    assert_eq!(ids(&replayed), ids(&live));
    assert!(ids(&live).iter().all(Value::is_string), "{live:?}");
    // The model-written title may arrive at any point after the first turn.
    let first = replayed.iter().find(|u| u["sessionUpdate"] != "session_info_update");
    assert_eq!(first.map(|u| &u["sessionUpdate"]), Some(&json!("user_message_chunk")), "{replayed:?}");
}

#[tokio::test]
async fn the_official_client_passes_an_mcp_server_whose_tool_the_model_calls() {
    let env = TestEnv::new().await;
    env.mock
        .push(Reply::tool_calls(&[("c1", "mcp__fx__echo", json!({"text": "through the SDK"}))]))
        .push(Reply::text(&["Echoed."]));
    let server = json!({"name": "fx", "command": crate::mcp::fixture_exe(), "args": [], "env": []});
    let script = json!({"initialize": initialize(), "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": [server]}},
        {"set_mode": {"sessionId": "$session", "modeId": "bypass"}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "echo"}]}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;

    assert_eq!(transcript["steps"][2]["response"]["stopReason"], "end_turn");
    let updates = updates(&transcript["steps"][2]);
    let finished = updates.iter().rev().find(|u| u["sessionUpdate"] == "tool_call_update" && u["toolCallId"] == "c1");
    assert_eq!(finished.map(|u| &u["status"]), Some(&json!("completed")), "{updates:?}");
    let result = env.mock.requests()[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").cloned();
    assert_eq!(result.unwrap()["content"], "echo: through the SDK");
}

/// The official client as an editor that `[serve] url`-style launches `cairn acp --server`: its
/// whole session (initialize, new, prompt, load) goes through the bridge to a running
/// `cairn serve`, whose database holds it; the bridge's own (empty) one is never used.
#[tokio::test]
async fn the_official_client_drives_a_served_session_through_the_bridge() {
    let mut env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Served ", "remotely."]));
    let server = crate::support::served::Server::start(&env).await;
    let elsewhere = env.dir.path().join("bridge-home");
    env.set_env("CAIRN_HOME", &elsewhere.to_string_lossy());
    // Another data directory holds no secret of the server's: the bridge is given it.
    env.set_env("CAIRN_SERVE_TOKEN", &crate::support::served::secret_for(&server.url).unwrap());
    let script = json!({"initialize": initialize(), "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "Hi"}]}},
        {"load": {"sessionId": "$session", "cwd": env.cwd(), "mcpServers": []}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp", "--server", server.url.as_str()]).await;

    let steps = &transcript["steps"];
    assert_eq!(steps[1]["response"]["stopReason"], "end_turn");
    assert_eq!(agent_text(&updates(&steps[1])), "Served remotely.", "live");
    assert_eq!(agent_text(&updates(&steps[2])), "Served remotely.", "replayed by the load");
    let session = steps[0]["response"]["sessionId"].clone();
    let mut client = server.client().await;
    let listed = client.call("session/list", json!({})).await;
    assert_eq!(listed["sessions"][0]["sessionId"], session, "the server holds it: {listed}");
    assert!(!elsewhere.join("cairn.db").exists(), "the bridge opened no database of its own");
}

/// The official client through the bridge to replica B of two sharing one PostgreSQL database:
/// it loads a session whose turn replica A is running, sees the rest of that turn live, and its
/// prompt, handed to A, is answered after its own turn, which it sees whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_on_one_replica_follows_and_prompts_a_session_another_replica_runs() {
    let mut env = TestEnv::new().await;
    let url = crate::serve::postgres::fixture::database().await;
    env.write_config(&format!("[store]\nurl = \"{url}\"\n"));
    let (a, b) = (Server::start(&env).await, Server::start(&env).await);
    let (first, release) = Reply::text(&["first ", "answer"]).held(1);
    env.mock.push(first).push(Reply::text(&["second ", "answer"]));
    let mut on_a = a.client().await;
    let session = on_a.new_session(&env.cwd()).await;
    let one = on_a.prompt(&session, "one").await;
    // A's turn has begun streaming when the client loads it.
    let mut seen = Vec::new();
    while crate::support::text_of(&crate::support::updates(&seen, &session), "agent_message_chunk").is_empty() {
        seen.push(on_a.recv().await);
    }
    env.set_env("CAIRN_HOME", &env.dir.path().join("bridge-home").to_string_lossy());
    env.set_env("CAIRN_SERVE_TOKEN", &crate::support::served::secret_for(&b.url).unwrap());
    let script = json!({"initialize": initialize(), "steps": [
        {"load": {"sessionId": session, "cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": session, "prompt": [{"type": "text", "text": "two"}]}},
    ]});

    // A's turn is released once A has taken the prompt b handed it, so the prompt queues there.
    let released = async {
        b.until_said("handed to the replica running the session's turn").await;
        a.until_said("a command handed by another replica").await;
        release.notify_one();
    };
    let bridge = ["acp", "--server", b.url.as_str()];
    let (transcript, ()) = tokio::join!(sdk::run(&env, &script, &bridge), released);

    let (answer, _) = on_a.response(one).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let steps = &transcript["steps"];
    assert_eq!(steps[1]["response"]["stopReason"], "end_turn", "{transcript}");
    let (loaded, prompted) = (updates(&steps[0]), updates(&steps[1]));
    // A note for the moment (no message id, never replayed) tells b's client where its prompt
    // stands on a, as a's own clients are told; the rest is the stored messages' chunks.
    let (stored, notes): (Vec<Value>, Vec<Value>) =
        prompted.iter().cloned().partition(|update| update.get("messageId").is_some());
    assert!(agent_text(&notes).contains("queued behind 1 turn"), "told it queued on a: {prompted:?}");
    let seen = format!("{}{}", agent_text(&loaded), agent_text(&stored));
    assert_eq!(seen, "first answersecond answer", "each chunk once, in order: {loaded:?} {prompted:?}");
    assert!(agent_text(&stored).ends_with("second answer"), "the answer came after its turn: {prompted:?}");
    let asked = env.mock.requests();
    assert_eq!(asked.len(), 2, "each prompt ran once");
    assert!(asked[1].to_string().contains("two"), "a ran the prompt b was sent");
    assert!(a.stderr().contains("a command handed by another replica"), "a ran it: {}", a.stderr());
}
