//! Images through `read`: a picture reaches a model that takes images in its API's shape and is
//! shown on the call's card, live and after a load; one over the cap is refused and the turn
//! goes on; a model without images is told what the file is; paths out of the workspace ask as
//! text reads do. Image prompts keep working after a load.

use base64::Engine as _;
use serde_json::{Value, json};

use crate::support::{Agent, Editor, Reply, TestEnv, updates};
use crate::tools::{call, tool_results, turn};

/// The first bytes of a PNG of `width`×`height`, and some more.
fn png(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
    bytes.extend(width.to_be_bytes());
    bytes.extend(height.to_be_bytes());
    bytes.extend([8, 6, 0, 0, 0, 0x1F, 0x15, 0xC4, 0x89]);
    bytes
}

fn jpeg(width: u16, height: u16) -> Vec<u8> {
    let mut bytes = vec![0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x4A, 0x46, 0xFF, 0xC0, 0x00, 0x11, 0x08];
    bytes.extend(height.to_be_bytes());
    bytes.extend(width.to_be_bytes());
    bytes.extend([3, 1, 0x22, 0, 0xFF, 0xD9]);
    bytes
}

fn gif(width: u16, height: u16) -> Vec<u8> {
    let mut bytes = b"GIF89a".to_vec();
    bytes.extend(width.to_le_bytes());
    bytes.extend(height.to_le_bytes());
    bytes.extend([0, 0, 0, 0x3B]);
    bytes
}

fn webp() -> Vec<u8> {
    let mut bytes = b"RIFF\x1a\0\0\0WEBPVP8X\x0a\0\0\0".to_vec();
    bytes.extend([0, 0, 0, 0, 3, 0, 0, 1, 0, 0]);
    bytes
}

fn base64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The ACP content block that shows an image on a call's card.
fn shown(mime_type: &str, bytes: &[u8]) -> Value {
    json!({"type": "content", "content": {"type": "image", "mimeType": mime_type, "data": base64(bytes)}})
}

/// The content of a call's last update.
fn card(updates: &[Value], id: &str) -> Value {
    call(updates, id).last().map(|update| update["content"].clone()).unwrap_or_default()
}

fn anthropic(env: &mut TestEnv) {
    let url = env.mock.url.clone();
    env.set_env("CAIRN_MODEL", "anthropic/claude-sonnet-4-5");
    env.set_env("ANTHROPIC_BASE_URL", &url);
    env.set_env("ANTHROPIC_API_KEY", "sk-ant-test");
}

async fn load(agent: &mut Agent, env: &TestEnv, session: &str) -> Vec<Value> {
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    updates(&replay, session).into_iter().cloned().collect()
}

#[tokio::test]
async fn anthropic_gets_a_read_image_as_an_image_block_of_its_tool_result_and_the_card_shows_it() {
    let mut env = TestEnv::new().await;
    anthropic(&mut env);
    let picture = png(2, 3);
    std::fs::write(env.workspace().join("shot.png"), &picture).unwrap();
    env.mock.push(Reply::anthropic_tool_call("toolu_1", "read", json!({"path": "shot.png"})));
    env.mock.push(Reply::anthropic("A tiny picture."));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "what is in shot.png?").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let result = &env.mock.requests()[1]["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(
        result["content"],
        json!([
            {"type": "text", "text": format!("shot.png: PNG image, 2×3, {} bytes (the image follows).", picture.len())},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": base64(&picture)}}
        ])
    );
    assert_eq!(card(&updates, "toolu_1"), json!([shown("image/png", &picture)]));
    assert_eq!(call(&updates, "toolu_1").last().unwrap()["status"], "completed");
}

#[tokio::test]
async fn openai_responses_gets_a_read_image_as_an_input_image_of_the_call_output() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai-responses/gpt-5");
    let picture = jpeg(640, 480);
    std::fs::write(env.workspace().join("photo.jpg"), &picture).unwrap();
    env.mock.push(Reply::responses_tool_call("call_1", "read", json!({"path": "photo.jpg"})));
    env.mock.push(Reply::responses("A photo."));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "look at photo.jpg").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let input = env.mock.requests()[1]["input"].as_array().unwrap().clone();
    let output = input.iter().find(|item| item["type"] == "function_call_output").unwrap();
    assert_eq!(
        output["output"],
        json!([
            {"type": "input_text", "text": format!("photo.jpg: JPEG image, 640×480, {} bytes (the image follows).", picture.len())},
            {"type": "input_image", "image_url": format!("data:image/jpeg;base64,{}", base64(&picture))}
        ])
    );
    assert_eq!(card(&updates, "call_1"), json!([shown("image/jpeg", &picture)]));
}

#[tokio::test]
async fn every_format_reaches_a_chat_model_in_a_user_message_after_the_tool_messages() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    let files = [
        ("a.png", "image/png", png(1, 1)),
        // The bytes decide, not the name.
        ("b.dat", "image/jpeg", jpeg(1, 1)),
        ("c.gif", "image/gif", gif(1, 1)),
        ("d.webp", "image/webp", webp()),
    ];
    for (name, _, bytes) in &files {
        std::fs::write(env.workspace().join(name), bytes).unwrap();
    }
    let calls: Vec<(String, &str, Value)> =
        files.iter().enumerate().map(|(i, (name, _, _))| (format!("c{i}"), "read", json!({"path": name}))).collect();
    let calls: Vec<(&str, &str, Value)> =
        calls.iter().map(|(id, name, args)| (id.as_str(), *name, args.clone())).collect();
    env.mock.push(Reply::tool_calls(&calls));
    env.mock.push(Reply::text(&["Four pictures."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "look at them").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");

    let sent = env.mock.requests()[1]["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = sent.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool", "tool", "tool", "user"]);
    let mut expected = Vec::new();
    for (i, (_, mime, bytes)) in files.iter().enumerate() {
        expected.push(json!({"type": "text", "text": format!("The image returned by the `read` call c{i}:")}));
        expected
            .push(json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{}", base64(bytes))}}));
        assert_eq!(card(&updates, &format!("c{i}")), json!([shown(mime, bytes)]), "{mime}");
    }
    assert_eq!(sent[7]["content"], Value::Array(expected));
    assert!(tool_results(&env, 1)[1]["content"].as_str().unwrap().starts_with("b.dat: JPEG image, 1×1"));
}

#[tokio::test]
async fn an_image_over_the_cap_is_refused_with_what_to_do_and_the_turn_goes_on() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    env.write_config("[tools]\nimage_max_bytes = 100\n");
    let mut picture = png(4000, 3000);
    picture.resize(500, 7);
    std::fs::write(env.workspace().join("big.png"), &picture).unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "big.png"}))]));
    env.mock.push(Reply::text(&["I will make it smaller."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "look at big.png").await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "the turn goes on");
    let told = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    for said in ["big.png is a PNG image, 4000×3000, 500 bytes", "images over 100 bytes", "image_max_bytes", "magick"]
    {
        assert!(told.contains(said), "{said}: {told}");
    }
    assert!(!env.mock.requests()[1].to_string().contains("image_url"), "no image is sent");
    let last = call(&updates, "c1").last().unwrap().to_string();
    assert!(last.contains("failed") && last.contains("images over 100 bytes"), "{last}");
    assert_eq!(std::fs::read(env.workspace().join("big.png")).unwrap(), picture, "nothing is lost");
}

#[tokio::test]
async fn a_model_without_images_is_told_what_the_picture_is() {
    // The test model is one nobody describes: it takes no images unless configured.
    let env = TestEnv::new().await;
    std::fs::write(env.workspace().join("shot.png"), png(800, 600)).unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "shot.png"}))]));
    env.mock.push(Reply::text(&["I cannot see it."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "look").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let told = tool_results(&env, 1)[0]["content"].as_str().unwrap().to_owned();
    assert!(told.starts_with("shot.png is a PNG image, 800×600, 33 bytes."), "{told}");
    assert!(told.contains("does not accept images") && told.contains("images = true"), "{told}");
    assert!(!env.mock.requests()[1].to_string().contains("image_url"));
    assert_eq!(call(&updates, "c1").last().unwrap()["status"], "completed");

    // Configured as taking images, the same model is sent the picture.
    env.write_config("[models.\"openai/mock-model\"]\nimages = true\n");
    env.mock.push(Reply::tool_calls(&[("c2", "read", json!({"path": "shot.png"}))]));
    env.mock.push(Reply::text(&["Now I see it."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "look again").await;
    assert!(env.mock.requests()[3].to_string().contains("data:image/png;base64,"));
}

#[tokio::test]
async fn images_out_of_the_workspace_through_a_symlink_or_dotdot_ask_like_text_reads_and_stay_unsent() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    let outside = env.dir.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.png"), png(5, 5)).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.png"), env.workspace().join("innocent.png")).unwrap();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "read", json!({"path": "innocent.png"})),
        ("c2", "read", json!({"path": "../outside/secret.png"})),
    ]));
    env.mock.push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["reject_once", "reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;
    let (response, updates) = turn(&mut agent, &session, "go").await;
    assert_eq!(response["result"]["stopReason"], "end_turn");
    let asked = agent.editor.requests("session/request_permission");
    let questions: Vec<&str> = asked.iter().map(|r| r["params"]["toolCall"]["toolCallId"].as_str().unwrap()).collect();
    assert_eq!(questions, ["c1", "c2"], "both land outside the workspace, so both ask");
    let target = outside.join("secret.png").display().to_string();
    assert!(asked[0].to_string().contains(&target), "the question names the link's target: {}", asked[0]);
    assert!(!env.mock.requests()[1].to_string().contains("image_url"), "nothing of the image is sent");
    for id in ["c1", "c2"] {
        let card = call(&updates, id).last().unwrap().to_string();
        assert!(card.contains("failed") && !card.contains("\"image\""), "{card}");
    }
}

#[tokio::test]
async fn a_read_image_is_replayed_on_load_and_sent_again_by_a_new_process() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    let picture = gif(3, 3);
    std::fs::write(env.workspace().join("anim.gif"), &picture).unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "anim.gif"}))]));
    env.mock.push(Reply::text(&["A GIF."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    turn(&mut agent, &session, "look").await;
    agent.close_stdin();
    agent.wait_exit().await;

    let mut agent = env.ready().await;
    let replay = load(&mut agent, &env, &session).await;
    assert_eq!(card(&replay, "c1"), json!([shown("image/gif", &picture)]), "the card shows the image again");
    env.mock.push(Reply::text(&["Still a GIF."]));
    turn(&mut agent, &session, "and again?").await;
    let sent = env.mock.requests()[2].to_string();
    assert!(sent.contains(&format!("data:image/gif;base64,{}", base64(&picture))), "{sent}");
}

#[tokio::test]
async fn an_image_prompt_is_replayed_on_load_and_still_sent_by_a_new_process() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    let picture = png(1, 1);
    env.mock.push(Reply::text(&["A dot."]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let image = json!({"type": "image", "mimeType": "image/png", "data": base64(&picture)});
    let prompt = json!([{"type": "text", "text": "what is this?"}, image]);
    let result = agent.call("session/prompt", json!({"sessionId": session, "prompt": prompt})).await;
    assert_eq!(result["stopReason"], "end_turn");
    agent.close_stdin();
    agent.wait_exit().await;

    let mut agent = env.ready().await;
    let replay = load(&mut agent, &env, &session).await;
    let replayed: Vec<&Value> =
        replay.iter().filter(|u| u["sessionUpdate"] == "user_message_chunk").map(|u| &u["content"]).collect();
    assert_eq!(replayed, [&prompt[0], &image]);
    env.mock.push(Reply::text(&["Still a dot."]));
    turn(&mut agent, &session, "and now?").await;
    let url = format!("data:image/png;base64,{}", base64(&picture));
    assert_eq!(
        env.mock.requests()[1]["messages"][1]["content"][1],
        json!({"type": "image_url", "image_url": {"url": url}})
    );
}

#[tokio::test]
async fn an_editor_that_reads_files_is_not_asked_for_an_image_which_is_read_from_the_disk() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    let picture = webp();
    std::fs::write(env.workspace().join("logo.webp"), &picture).unwrap();
    std::fs::write(env.workspace().join("notes.txt"), "from the disk\n").unwrap();
    env.mock.push(Reply::tool_calls(&[
        ("c1", "read", json!({"path": "logo.webp"})),
        ("c2", "read", json!({"path": "notes.txt"})),
    ]));
    env.mock.push(Reply::text(&["ok"]));
    let mut agent = env.ready_with(Editor::with_fs()).await;
    let session = agent.new_session(&env.cwd()).await;
    let (_, updates) = turn(&mut agent, &session, "look").await;
    let asked: Vec<String> = agent
        .editor
        .requests("fs/read_text_file")
        .iter()
        .map(|r| r["params"]["path"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(asked, [env.workspace().join("notes.txt").display().to_string()], "text still goes through the editor");
    assert_eq!(card(&updates, "c1"), json!([shown("image/webp", &picture)]));
    assert!(env.mock.requests()[1].to_string().contains(&base64(&picture)));
}

#[tokio::test]
async fn exports_name_a_read_image_in_markdown_and_keep_it_through_jsonl_and_import() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai/gpt-4o");
    let mut picture = png(64, 64);
    picture.resize(3_000, 1);
    std::fs::write(env.workspace().join("chart.png"), &picture).unwrap();
    env.mock.push(Reply::tool_calls(&[("c1", "read", json!({"path": "chart.png"}))]));
    env.mock.push(Reply::text(&["A chart."]));
    let cwd = env.cwd();
    let run = |args: Vec<String>| {
        let mut command = env.command();
        command.args(args).stdin(std::process::Stdio::null());
        async move {
            let output = command.output().await.unwrap();
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            String::from_utf8(output.stdout).unwrap()
        }
    };
    let args = |list: &[&str]| list.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();
    let ran = run(args(&["exec", "--json", "--cwd", &cwd, "look at chart.png"])).await;
    let session =
        serde_json::from_str::<Value>(ran.lines().last().unwrap()).unwrap()["sessionId"].as_str().unwrap().to_owned();

    let markdown = run(args(&["sessions", "export", &session])).await;
    assert!(markdown.contains("[image: image/png, 2.9 KiB]"), "{markdown}");
    assert!(!markdown.contains(&base64(&picture)), "the Markdown names the image, without its data");

    let jsonl = run(args(&["sessions", "export", &session, "--format", "jsonl"])).await;
    assert!(jsonl.contains(&base64(&picture)), "the lossless export holds the image");
    let file = env.dir.path().join("export.jsonl");
    std::fs::write(&file, &jsonl).unwrap();
    let imported = run(args(&["sessions", "import", file.to_str().unwrap()])).await;
    let copy = imported.split_whitespace().nth(3).unwrap().to_owned();
    let again = run(args(&["sessions", "export", &copy, "--format", "jsonl"])).await;
    assert!(again.contains(&format!("\"images\":[{{\"mime_type\":\"image/png\",\"data\":\"{}\"}}]", base64(&picture))));
}
