//! The web search a model's provider runs itself (OpenAI Responses' `web_search`, Anthropic's
//! server-side search): offered only to models that have it, shown as a `fetch` card with the
//! query and the pages found, the pages the answer cites listed at its end, all of it stored and
//! replayed by `session/load`, and never sent back to the model as a call of its own; the
//! official Rust client reads it all with its own types.

use serde_json::{Value, json};

use crate::support::{Agent, Reply, TestEnv, text_of, updates};

const FOUND: [(&str, &str); 2] = [("https://blog.rust-lang.org/", "Rust Blog"), ("https://doc.rust-lang.org/", "Docs")];
const SOURCES: &str = "\n\nSources:\n- [Rust Blog](https://blog.rust-lang.org/)";

fn anthropic(env: &mut TestEnv) {
    let url = env.mock.url.clone();
    env.set_env("CAIRN_MODEL", "anthropic/claude-sonnet-4-5");
    env.set_env("ANTHROPIC_BASE_URL", &url);
    env.set_env("ANTHROPIC_API_KEY", "sk-ant-test");
}

async fn turn(agent: &mut Agent, session: &str, text: &str) -> Vec<Value> {
    let id = agent.prompt(session, text).await;
    let (response, messages) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    updates(&messages, session).into_iter().cloned().collect()
}

async fn load(agent: &mut Agent, env: &TestEnv, session: &str) -> Vec<Value> {
    let id = agent.request("session/load", json!({"sessionId": session, "cwd": env.cwd(), "mcpServers": []})).await;
    let (_, replay) = agent.response(id).await;
    updates(&replay, session).into_iter().cloned().collect()
}

/// The search's card as the client last saw it, with the statuses it went through.
fn card(updates: &[Value], id: &str) -> (Value, Vec<String>) {
    let mut card = json!({});
    let mut statuses = Vec::new();
    for update in updates.iter().filter(|u| u["toolCallId"] == id) {
        for (key, value) in update.as_object().unwrap() {
            card[key] = value.clone();
        }
        if let Some(status) = update["status"].as_str() {
            statuses.push(status.to_owned());
        }
    }
    (card, statuses)
}

/// Checks what the client saw of a search for `query` with id `id`, then the answer (a replay
/// goes on with what the session said later).
fn saw_search(updates: &[Value], id: &str, query: &str) {
    let (card, statuses) = card(updates, id);
    assert_eq!(card["kind"], "fetch", "{card}");
    assert_eq!(card["title"], format!("Search the web: {query}"), "{card}");
    assert_eq!(statuses.last().map(String::as_str), Some("completed"), "{statuses:?}");
    let shown = card["content"][0]["content"]["text"].as_str().unwrap_or_default();
    assert!(shown.contains(&format!("Searched for: {query}")), "{shown}");
    for (url, _) in FOUND {
        assert!(shown.contains(url), "{shown}");
    }
    let refs: Vec<&Value> = updates.iter().collect();
    let said = text_of(&refs, "agent_message_chunk");
    assert!(said.starts_with(&format!("Rust 1.88 is out.{SOURCES}")), "{said}");
}

#[tokio::test]
async fn openai_responses_searches_the_web_itself_and_the_card_and_sources_survive_a_load() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai-responses/gpt-5");
    env.mock.push(Reply::responses_web_search("rust release", &FOUND, "Rust 1.88 is out."));
    env.mock.push(Reply::responses("Noted."));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    saw_search(&turn(&mut agent, &session, "What is new in Rust?").await, "ws_1", "rust release");
    turn(&mut agent, &session, "Thanks").await;
    let requests = env.mock.requests();
    assert!(
        requests[0]["tools"].as_array().unwrap().contains(&json!({"type": "web_search"})),
        "{}",
        requests[0]["tools"]
    );
    assert_eq!(requests[0]["include"], json!(["web_search_call.action.sources"]));
    // The next request sends the answer with its sources, and nothing of the search.
    let input = requests[1]["input"].as_array().unwrap();
    assert!(input.iter().all(|item| item["type"] != "web_search_call" && item["type"] != "function_call"), "{input:?}");
    assert_eq!(input[1]["content"][0]["text"], format!("Rust 1.88 is out.{SOURCES}"));
    let mut again = env.ready().await;
    saw_search(&load(&mut again, &env, &session).await, "ws_1", "rust release");
}

#[tokio::test]
async fn a_later_request_carries_the_answer_and_its_sources_but_not_the_search() {
    let mut env = TestEnv::new().await;
    anthropic(&mut env);
    env.mock.push(Reply::anthropic_web_search("rust release", &FOUND, "Rust 1.88 is out."));
    env.mock.push(Reply::anthropic("Noted."));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let live = turn(&mut agent, &session, "What is new in Rust?").await;
    saw_search(&live, "srvtoolu_1", "rust release");
    turn(&mut agent, &session, "Thanks").await;
    let requests = env.mock.requests();
    let tools = requests[0]["tools"].as_array().unwrap();
    assert!(tools.contains(&json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 5})), "{tools:?}");
    let said = &requests[1]["messages"][1];
    assert_eq!(said["role"], "assistant");
    assert_eq!(said["content"], json!([{"type": "text", "text": format!("Rust 1.88 is out.{SOURCES}")}]));
    let mut again = env.ready().await;
    saw_search(&load(&mut again, &env, &session).await, "srvtoolu_1", "rust release");
}

#[tokio::test]
async fn the_search_is_offered_only_where_the_provider_has_one_and_the_user_did_not_turn_it_off() {
    for (model, config, offered) in [
        ("openai-responses/gpt-5", "", true),
        ("openai-responses/gpt-5", "[search]\nprovider = false\n", false),
        // Chat Completions has no such tool, whatever the model.
        ("openai/gpt-5", "", false),
        ("openai/mock-model", "[models.\"openai/mock-model\"]\nweb_search = true\n", false),
        // A model nobody describes has none, unless the file says it does.
        ("openai-responses/mock-model", "", false),
        ("openai-responses/mock-model", "[models.\"openai-responses/mock-model\"]\nweb_search = true\n", true),
    ] {
        let mut env = TestEnv::new().await;
        env.set_env("CAIRN_MODEL", model);
        env.write_config(config);
        let chat = model.starts_with("openai/");
        env.mock.push(if chat { Reply::text(&["hi"]) } else { Reply::responses("hi") });
        let mut agent = env.ready().await;
        let session = agent.new_session(&env.cwd()).await;
        turn(&mut agent, &session, "hello").await;
        let body = &env.mock.requests()[0];
        let hosted = body["tools"].as_array().unwrap().iter().any(|tool| tool["type"] == "web_search");
        assert_eq!(hosted, offered, "{model} with {config:?}: {}", body["tools"]);
        assert_eq!(body.get("include").is_some(), offered, "{model} with {config:?}");
    }
}

#[tokio::test]
async fn the_official_client_reads_the_search_card_and_the_sources_live_and_on_a_load() {
    use crate::support::sdk;
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai-responses/gpt-5");
    env.mock.push(Reply::responses_web_search("rust release", &FOUND, "Rust 1.88 is out."));
    let script = json!({"initialize": {"protocolVersion": 1, "clientCapabilities": {}}, "steps": [
        {"new": {"cwd": env.cwd(), "mcpServers": []}},
        {"prompt": {"sessionId": "$session", "prompt": [{"type": "text", "text": "What is new in Rust?"}]}},
        {"load": {"sessionId": "$session", "cwd": env.cwd(), "mcpServers": []}},
    ]});
    let transcript = sdk::run(&env, &script, &["acp"]).await;
    // The SDK parsed every update with its own types; what it saw is what cairn meant.
    for step in [1, 2] {
        let seen = sdk::updates(&transcript["steps"][step]);
        saw_search(&seen, "ws_1", "rust release");
    }
}
