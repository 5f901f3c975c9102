//! Conformance with the official Rust ACP client (`agent-client-protocol`): it spawns `cairn`,
//! and drives initialize → new → prompt → load through its own typed API, and a session with an
//! MCP server of its own.

use std::sync::{Arc, Mutex};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, InitializeRequest, LoadSessionRequest, NewSessionRequest, PromptRequest, SessionNotification,
    SessionUpdate, StopReason, TextContent,
};
use agent_client_protocol::{AcpAgent, AcpAgentConfig, Agent};

use crate::support::{Reply, TestEnv};

/// cairn as the official client starts it, against this test's mock model.
fn cairn_for(env: &TestEnv) -> AcpAgentConfig {
    AcpAgentConfig::new(env!("CARGO_BIN_EXE_cairn")).envs([
        ("CAIRN_HOME", env.home().to_string_lossy().into_owned()),
        ("XDG_CONFIG_HOME", env.dir.path().join("config").to_string_lossy().into_owned()),
        ("CAIRN_MODEL", "openai/mock-model".to_owned()),
        ("OPENAI_BASE_URL", env.mock.url.clone()),
        ("OPENAI_API_KEY", "sk-test".to_owned()),
    ])
}

#[tokio::test]
async fn the_official_client_drives_initialize_new_prompt_and_load() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Hello ", "from ", "cairn."]));
    let config = cairn_for(&env);
    let seen: Arc<Mutex<Vec<SessionUpdate>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let cwd = env.workspace();

    let (stop, live, replayed) = agent_client_protocol::Client
        .v1()
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                sink.lock().unwrap().push(notification.update);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(AcpAgent::new(config), |connection: ConnectionTo<Agent>| async move {
            let init = connection.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
            assert_eq!(init.protocol_version, ProtocolVersion::V1);
            assert!(init.agent_capabilities.load_session);

            let session = connection.send_request(NewSessionRequest::new(cwd.clone())).block_task().await?;
            let prompt =
                PromptRequest::new(session.session_id.clone(), vec![ContentBlock::Text(TextContent::new("Say hello"))]);
            let response = connection.send_request(prompt).block_task().await?;
            let live = std::mem::take(&mut *seen.lock().unwrap());

            connection.send_request(LoadSessionRequest::new(session.session_id, cwd)).block_task().await?;
            let replayed = std::mem::take(&mut *seen.lock().unwrap());
            Ok((response.stop_reason, live, replayed))
        })
        .await
        .expect("the official client completes its session");

    assert_eq!(stop, StopReason::EndTurn);
    let text = |updates: &[SessionUpdate]| -> (String, Vec<String>) {
        let mut text = String::new();
        let mut ids = Vec::new();
        for update in updates {
            if let SessionUpdate::AgentMessageChunk(chunk) = update {
                if let ContentBlock::Text(content) = &chunk.content {
                    text.push_str(&content.text);
                }
                ids.extend(chunk.message_id.as_ref().map(|id| id.0.to_string()));
            }
        }
        ids.dedup();
        (text, ids)
    };
    let (live_text, live_ids) = text(&live);
    let (replayed_text, replayed_ids) = text(&replayed);
    assert_eq!(live_text, "Hello from cairn.");
    assert_eq!(replayed_text, live_text);
    assert_eq!(replayed_ids, live_ids);
    // The model-written title may arrive at any point after the first turn.
    let first = replayed.iter().find(|u| !matches!(u, SessionUpdate::SessionInfoUpdate(_)));
    assert!(matches!(first, Some(SessionUpdate::UserMessageChunk(_))), "{replayed:?}");
}

#[tokio::test]
async fn the_official_client_passes_an_mcp_server_whose_tool_the_model_calls() {
    use agent_client_protocol::v1::schema::{McpServer, McpServerStdio, SetSessionModeRequest, ToolCallStatus};

    let env = TestEnv::new().await;
    env.mock
        .push(Reply::tool_calls(&[("c1", "mcp__fx__echo", serde_json::json!({"text": "through the SDK"}))]))
        .push(Reply::text(&["Echoed."]));
    let config = cairn_for(&env);
    let seen: Arc<Mutex<Vec<SessionUpdate>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let cwd = env.workspace();
    let server = McpServer::Stdio(McpServerStdio::new("fx", crate::mcp::fixture_exe()));

    let stop = agent_client_protocol::Client
        .v1()
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                sink.lock().unwrap().push(notification.update);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(AcpAgent::new(config), |connection: ConnectionTo<Agent>| async move {
            connection.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
            let session =
                connection.send_request(NewSessionRequest::new(cwd).mcp_servers(vec![server])).block_task().await?;
            let bypass = SetSessionModeRequest::new(session.session_id.clone(), "bypass");
            connection.send_request(bypass).block_task().await?;
            let prompt = PromptRequest::new(session.session_id, vec![ContentBlock::Text(TextContent::new("echo"))]);
            Ok(connection.send_request(prompt).block_task().await?.stop_reason)
        })
        .await
        .expect("the official client completes its session");

    assert_eq!(stop, StopReason::EndTurn);
    let updates = seen.lock().unwrap().clone();
    let finished = updates.iter().rev().find_map(|update| match update {
        SessionUpdate::ToolCallUpdate(update) if update.tool_call_id.0.as_ref() == "c1" => update.fields.status,
        _ => None,
    });
    assert_eq!(finished, Some(ToolCallStatus::Completed), "{updates:?}");
    let result = env.mock.requests()[1]["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").cloned();
    assert_eq!(result.unwrap()["content"], "echo: through the SDK");
}

/// The official client as an editor that `[serve] url`-style launches `cairn acp --server`: its
/// whole session (initialize, new, prompt, load) goes through the bridge to a running
/// `cairn serve`, whose database holds it; the bridge's own (empty) one is never used.
#[tokio::test]
async fn the_official_client_drives_a_served_session_through_the_bridge() {
    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["Served ", "remotely."]));
    let server = crate::support::served::Server::start(&env).await;
    let elsewhere = env.dir.path().join("bridge-home");
    let config = cairn_for(&env)
        .args(["acp", "--server", server.url.as_str()])
        .envs([("CAIRN_HOME", elsewhere.to_string_lossy().into_owned())]);
    let seen: Arc<Mutex<Vec<SessionUpdate>>> = Arc::default();
    let sink = Arc::clone(&seen);
    let cwd = env.workspace();
    let (session, stop) = agent_client_protocol::Client
        .v1()
        .on_receive_notification(
            async move |notification: SessionNotification, _cx| {
                sink.lock().unwrap().push(notification.update);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(AcpAgent::new(config), |connection: ConnectionTo<Agent>| async move {
            connection.send_request(InitializeRequest::new(ProtocolVersion::V1)).block_task().await?;
            let session = connection.send_request(NewSessionRequest::new(cwd.clone())).block_task().await?;
            let prompt =
                PromptRequest::new(session.session_id.clone(), vec![ContentBlock::Text(TextContent::new("Hi"))]);
            let response = connection.send_request(prompt).block_task().await?;
            connection.send_request(LoadSessionRequest::new(session.session_id.clone(), cwd)).block_task().await?;
            Ok((session.session_id.0.to_string(), response.stop_reason))
        })
        .await
        .expect("the official client completes its session through the bridge");
    assert_eq!(stop, StopReason::EndTurn);
    let chunks: String = seen
        .lock()
        .unwrap()
        .iter()
        .filter_map(|update| match update {
            SessionUpdate::AgentMessageChunk(chunk) => match &chunk.content {
                ContentBlock::Text(content) => Some(content.text.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    assert_eq!(chunks, "Served remotely.Served remotely.", "live, then replayed by the load");
    let mut client = server.client().await;
    let listed = client.call("session/list", serde_json::json!({})).await;
    assert_eq!(listed["sessions"][0]["sessionId"], session.as_str(), "the server holds it: {listed}");
    assert!(!elsewhere.join("cairn.db").exists(), "the bridge opened no database of its own");
}
