//! OpenAI's prompt cache: a session's requests carry `prompt_cache_key` (its id), so the
//! provider routes them to the same cache, as Codex does. Titles are keyed apart (a title has no
//! prefix to share). Only OpenAI's own server gets the key unasked: a provider elsewhere (the
//! built-in ones pointed at another server, as the mock is, or one of the user's) gets it only
//! when its table says so, since a strict server refuses fields it does not know. The cached
//! tokens the provider reports reach the client's usage.

use serde_json::{Value, json};

use crate::support::{Agent, Reply, TestEnv};

/// The built-in providers told to send the key to the mock.
const OPTED_IN: &str =
    "[providers.openai]\nprompt_cache_key = true\n[providers.openai-responses]\nprompt_cache_key = true\n";

async fn two_prompts(env: &TestEnv) -> (Agent, String) {
    env.mock.push(Reply::text(&["one"])).push(Reply::text(&["two"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    for text in ["first", "second"] {
        let id = agent.prompt(&session, text).await;
        agent.response(id).await;
    }
    (agent, session)
}

fn keys(env: &TestEnv) -> Vec<Option<String>> {
    env.mock.requests().iter().map(|body| body["prompt_cache_key"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn every_request_of_a_session_names_the_session_as_its_cache_key() {
    let env = TestEnv::new().await;
    env.write_config(OPTED_IN);
    let (_agent, session) = two_prompts(&env).await;
    assert_eq!(keys(&env), vec![Some(session.clone()), Some(session)]);
    for title in env.mock.title_requests() {
        assert_eq!(title.get("prompt_cache_key"), None, "a title shares no prefix with the session");
    }
}

#[tokio::test]
async fn the_responses_api_carries_the_key_too() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_MODEL", "openai-responses/mock-model");
    env.write_config(OPTED_IN);
    env.mock.push(Reply::responses("hello"));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let id = agent.prompt(&session, "hi").await;
    agent.response(id).await;
    assert_eq!(keys(&env), vec![Some(session)]);
}

#[tokio::test]
async fn a_provider_of_the_users_own_sends_the_key_only_when_its_table_says_so() {
    for (setting, expected) in [("", false), ("prompt_cache_key = true\n", true), ("prompt_cache_key = false\n", false)]
    {
        let mut env = TestEnv::new().await;
        let url = env.mock.url.clone();
        env.write_config(&format!("[providers.local]\nbase_url = \"{url}\"\nmodels = [\"m\"]\n{setting}"));
        env.set_env("CAIRN_MODEL", "local/m");
        let (_agent, session) = two_prompts(&env).await;
        let sent = keys(&env);
        assert_eq!(sent.len(), 2, "{setting:?}");
        for key in sent {
            assert_eq!(key, expected.then(|| session.clone()), "{setting:?}");
        }
    }
}

#[tokio::test]
async fn a_built_in_provider_pointed_at_another_server_sends_it_only_when_told() {
    for (config, sent) in [("", false), (OPTED_IN, true), ("[providers.openai]\nprompt_cache_key = false\n", false)] {
        let env = TestEnv::new().await;
        env.write_config(config);
        let (_agent, session) = two_prompts(&env).await;
        assert_eq!(keys(&env), vec![sent.then(|| session.clone()); 2], "{config:?}");
    }
}

#[tokio::test]
async fn the_cached_tokens_the_provider_reports_reach_the_clients_usage() {
    let env = TestEnv::new().await;
    env.write_config(OPTED_IN);
    env.mock.model_prompt_cache();
    env.mock.push(Reply::text(&["one"])).push(Reply::text(&["two"]));
    let mut agent = env.ready().await;
    let session = agent.new_session(&env.cwd()).await;
    let mut usages: Vec<Value> = Vec::new();
    for text in ["first", "second"] {
        let id = agent.prompt(&session, text).await;
        usages.push(agent.response(id).await.0["result"]["usage"].clone());
    }
    let charged = env.mock.cache_charges();
    assert_eq!(charged.len(), 2);
    assert_eq!(charged[0].cached, 0, "nothing is cached before the first request");
    assert!(charged[1].cached > 0, "the second request starts with the first one: {charged:?}");
    for (usage, charged) in usages.iter().zip(&charged) {
        assert_eq!(usage["cachedReadTokens"].as_u64().unwrap_or(0), charged.cached, "{usage}");
        assert_eq!(usage["inputTokens"], json!(charged.prompt - charged.cached), "{usage}");
    }
}
