//! Models that take no images: a session that showed images to one model and switches to a
//! model without them goes on, each image sent as a one-line placeholder (never its bytes) in
//! every API's shape, and switching back sends the images again; an image prompt to such a
//! model, sent or steered into a running turn, is answered, with a notice saying the image was
//! left out, and is kept in the history.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::{Agent, Reply, TestEnv, text_of, updates};
use crate::tools::turn;

/// A PNG's first bytes: enough for `read` to know it.
fn png() -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    bytes.extend(2u32.to_be_bytes());
    bytes.extend(3u32.to_be_bytes());
    bytes.extend([8, 6, 0, 0, 0, 0x1F, 0x15, 0xC4, 0x89]);
    bytes
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The line the tests' image (a 33-byte PNG) becomes for `model`.
fn placeholder(mime_type: &str, model: &str) -> String {
    format!("[image omitted: {mime_type}, 33 bytes — {model} does not take images]")
}

/// Asserts that the request carries no image: no base64 of any kind, not the picture's bytes.
fn assert_no_image(request: &Value, picture: &[u8]) {
    let sent = request.to_string();
    assert!(!sent.contains("base64") && !sent.contains(&base64(picture)), "an image was sent: {sent}");
}

async fn switch(agent: &mut Agent, session: &str, model: &str) {
    let params = json!({"sessionId": session, "configId": "model", "value": model});
    let result = agent.call("session/set_config_option", params).await;
    assert_eq!(result["configOptions"][0]["currentValue"], model);
}

#[tokio::test]
async fn anthropic_after_a_switch_to_a_text_only_model_gets_the_read_image_as_a_line_and_back_again() {
    let mut env = TestEnv::new().await;
    let url = env.mock.url.clone();
    env.set_env("CAIRN_MODEL", "anthropic/claude-sonnet-4-5");
    env.set_env("ANTHROPIC_BASE_URL", &url);
    env.set_env("ANTHROPIC_API_KEY", "sk-ant-test");
    env.write_config("[providers.anthropic]\nmodels = [\"claude-sonnet-4-5\", \"claude-3-5-haiku\"]\n");
    let picture = png();
    std::fs::write(env.workspace().join("shot.png"), &picture).unwrap();
    env.mock.push(Reply::anthropic_tool_call("toolu_1", "read", json!({"path": "shot.png"})));
    env.mock.push(Reply::anthropic("A tiny picture."));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "what is in shot.png?").await;
    assert_eq!(env.mock.requests()[1]["messages"][2]["content"][0]["content"][1]["type"], "image");

    // Claude 3.5 Haiku takes no images.
    switch(&mut agent, &session, "anthropic/claude-3-5-haiku").await;
    env.mock.push(Reply::anthropic("It was a picture."));
    let (response, _) = turn(&mut agent, &session, "and what was it?").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "the session is not stuck");
    let sent = &env.mock.requests()[2];
    assert_eq!(sent["model"], "claude-3-5-haiku");
    assert_eq!(
        sent["messages"][2]["content"][0]["content"],
        format!(
            "shot.png: PNG image, 2×3, {} bytes (the image follows).\n{}",
            picture.len(),
            placeholder("image/png", "claude-3-5-haiku")
        )
    );
    assert_no_image(sent, &picture);

    // The history kept the image: a model that takes images sees it again.
    switch(&mut agent, &session, "anthropic/claude-sonnet-4-5").await;
    env.mock.push(Reply::anthropic("Still a tiny picture."));
    turn(&mut agent, &session, "look again").await;
    assert_eq!(
        env.mock.requests()[3]["messages"][2]["content"][0]["content"][1],
        json!({"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64(&picture)}})
    );
}

#[tokio::test]
async fn chat_after_a_switch_to_a_text_only_model_gets_the_read_image_in_the_tool_message_and_back_again() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    // The mock's own model is one nobody describes: it takes no images.
    env.write_config("[providers.openai]\nmodels = [\"gpt-4o\", \"mock-model\"]\n");
    let picture = png();
    std::fs::write(env.workspace().join("shot.png"), &picture).unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "shot.png"}))]));
    env.mock.push(Reply::text(&["A tiny picture."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "what is in shot.png?").await;
    let url = format!("data:image/png;base64,{}", base64(&picture));
    assert!(env.mock.requests()[1].to_string().contains(&url));

    switch(&mut agent, &session, "openai/mock-model").await;
    env.mock.push(Reply::text(&["It was a picture."]));
    let (response, _) = turn(&mut agent, &session, "and what was it?").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "the session is not stuck");
    let sent = env.mock.requests()[2].clone();
    let roles: Vec<&str> = sent["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "assistant", "user"], "no message of images");
    assert_eq!(
        sent["messages"][3]["content"],
        format!(
            "shot.png: PNG image, 2×3, {} bytes (the image follows).\n{}",
            picture.len(),
            placeholder("image/png", "mock-model")
        )
    );
    assert_no_image(&sent, &picture);

    switch(&mut agent, &session, "openai/gpt-4o").await;
    env.mock.push(Reply::text(&["Still a tiny picture."]));
    turn(&mut agent, &session, "look again").await;
    assert!(env.mock.requests()[3].to_string().contains(&url), "the image is sent again");
}

#[tokio::test]
async fn an_image_prompt_to_a_text_only_model_is_answered_with_a_notice_and_kept() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai-responses/mock-text");
    let picture = png();
    env.mock.push(Reply::responses("I cannot see it."));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let image = json!({"type": "image", "mimeType": "image/png", "data": base64(&picture)});
    let prompt = json!([{"type": "text", "text": "what is this?"}, image]);
    let id = agent.request("session/prompt", json!({"sessionId": session, "prompt": prompt})).await;
    let (response, notifications) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let sent = env.mock.requests()[0].clone();
    assert_eq!(
        sent["input"][0]["content"],
        json!([
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_text", "text": placeholder("image/png", "mock-text")}
        ])
    );
    assert_no_image(&sent, &picture);
    let said = text_of(&updates(&notifications, &session), "agent_message_chunk");
    assert!(
        said.contains("openai-responses/mock-text cannot see images, so the image in this prompt was left out"),
        "the user is told why: {said}"
    );
    assert!(said.contains("images = true"), "and what to set if the model does take images: {said}");

    // Nothing is lost: the prompt is replayed with its image.
    agent.close_stdin();
    agent.wait_exit().await;
    let mut agent = env.ready().await;
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    let replayed: Vec<&Value> = updates(&replay, &session)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "user_message_chunk")
        .map(|u| &u["content"])
        .collect();
    assert_eq!(replayed, [&prompt[0], &image]);
}

#[tokio::test]
async fn an_image_steered_into_a_turn_of_a_text_only_model_is_a_placeholder_with_a_notice() {
    let env = TestEnv::new().await;
    env.write_config("[session]\nbusy_prompt = \"steer\"\n");
    env.mock.push(Reply::tool_calls(&[("c1", "write", json!({"path": "a.txt", "content": "x\n"}))]));
    env.mock.push(Reply::text(&["Wrote it; the picture did not reach me."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    // The turn is held at the write's permission question while the image prompt arrives.
    let first = agent.prompt(&session, "write a.txt").await;
    let question = loop {
        let message = agent.recv().await;
        if message["method"] == "session/request_permission" {
            break message;
        }
    };
    let picture = png();
    let prompt = json!([{"type": "image", "mimeType": "image/png", "data": base64(&picture)}]);
    let second = agent.request("session/prompt", json!({"sessionId": session, "prompt": prompt})).await;
    loop {
        let message = agent.recv().await;
        let said = message["params"]["update"]["content"]["text"].as_str().unwrap_or_default();
        if said.contains("joins the running turn") {
            break;
        }
    }
    agent.respond(&question["id"], json!({"outcome": {"outcome": "selected", "optionId": "allow_once"}})).await;

    let (answers, notifications) = agent.responses(&[first, second]).await;
    assert_eq!(answers[0]["result"]["stopReason"], "end_turn");
    let said = text_of(&updates(&notifications, &session), "agent_message_chunk");
    assert!(said.contains("openai/mock-model cannot see images, so the image in this prompt was left out"), "{said}");
    let sent = env.mock.requests()[1].clone();
    assert_eq!(sent["messages"][4], json!({"role": "user", "content": placeholder("image/png", "mock-model")}));
    assert_no_image(&sent, &picture);
}
