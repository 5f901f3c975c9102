//! `web_search` through a search endpoint of the user's (`[search] url`): a SearXNG instance or
//! Brave's API answers, the model gets numbered results; the query leaves the machine only when
//! the endpoint's host is allowed (it asks like a fetch from that host); a model whose provider
//! searches the web itself gets that search instead, and without an endpoint there is no tool.

use serde_json::{Value, json};

use crate::exec::run;
use crate::support::pages::Pages;
use crate::support::{Reply, TestEnv};

/// One `cairn exec` turn in which the model searches with `args` (`flags` added); the call's
/// result as the model was sent it, and the tools the first request offered.
async fn search(env: &TestEnv, args: Value, flags: &[&str]) -> (String, Vec<Value>) {
    env.mock.push(Reply::tool_calls(&[("call_1", "web_search", args)]));
    env.mock.push(Reply::text(&["Done."]));
    let cwd = env.cwd();
    let mut argv = vec!["exec", "--cwd", &cwd];
    argv.extend_from_slice(flags);
    argv.push("look it up");
    let (status, _, stderr) = run(env, &argv, "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let requests = env.mock.requests();
    let result = requests.last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|message| message["role"] == "tool")
        .map(|message| message["content"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    (result, requests[0]["tools"].as_array().cloned().unwrap_or_default())
}

fn offers_function(tools: &[Value]) -> bool {
    tools.iter().any(|tool| tool["function"]["name"] == "web_search" || tool["name"] == "web_search")
}

#[tokio::test]
async fn a_searxng_instance_answers_and_the_model_gets_numbered_results() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(&format!("[search]\nurl = \"{}\"\n", pages.url("/searx")));
    let (result, tools) = search(&env, json!({"query": "rust & \"let chains\""}), &["--mode", "bypass"]).await;
    assert!(offers_function(&tools), "{tools:?}");
    assert!(result.starts_with("2 results for \"rust & \"let chains\"\" from 127.0.0.1"), "{result}");
    assert!(
        result.contains("1. One about rust & \"let chains\"\n   https://one.example/\n   the first hit"),
        "{result}"
    );
    assert!(result.contains("2. Two\n   https://two.example/"), "{result}");
    assert!(!result.contains("javascript:"), "{result}");
}

#[tokio::test]
async fn braves_api_gets_the_key_from_the_named_variable_and_says_when_it_is_missing() {
    let (mut env, pages) = (TestEnv::new().await, Pages::start().await);
    let config =
        format!("[search]\nurl = \"{}\"\napi = \"brave\"\napi_key_env = \"BRAVE_API_KEY\"\n", pages.url("/brave"));
    env.write_config(&config);
    let (result, _) = search(&env, json!({"query": "rust"}), &["--mode", "bypass"]).await;
    assert!(result.contains("Brave's search API needs a key and BRAVE_API_KEY is not set"), "{result}");
    assert_eq!(pages.requests(), 0, "nothing was sent without the key");
    env.set_env("BRAVE_API_KEY", "brave-key");
    let (result, _) = search(&env, json!({"query": "rust", "count": 3}), &["--mode", "bypass"]).await;
    assert!(result.contains("1. Brave: rust (3)\n   https://brave.example/\n   found"), "{result}");
}

#[tokio::test]
async fn an_instance_without_json_output_is_named_with_the_fix() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(&format!("[search]\nurl = \"{}\"\n", pages.url("/searx-off")));
    let (result, _) = search(&env, json!({"query": "rust"}), &["--mode", "bypass"]).await;
    assert!(result.contains("answered 403 Forbidden"), "{result}");
    assert!(result.contains("add `json` to `search.formats`"), "{result}");
}

#[tokio::test]
async fn the_query_leaves_the_machine_only_when_the_endpoints_host_is_allowed() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(&format!("[search]\nurl = \"{}\"\n", pages.url("/searx")));
    // Nobody to ask in a headless run: refused, and the endpoint never hears the query.
    let (result, _) = search(&env, json!({"query": "my secret project"}), &[]).await;
    assert!(result.contains("Permission denied") || result.contains("not allowed"), "{result}");
    assert_eq!(pages.requests(), 0);
    // Another host's rule does not cover it; its own does.
    let (result, _) = search(&env, json!({"query": "rust"}), &["--allow", "fetch:example.com"]).await;
    assert_eq!(pages.requests(), 0, "{result}");
    let (result, _) = search(&env, json!({"query": "rust"}), &["--allow", "fetch:127.0.0.1"]).await;
    assert!(result.contains("One about rust"), "{result}");
    // A rejection holds even in bypass.
    let before = pages.requests();
    let (result, _) = search(&env, json!({"query": "rust"}), &["--mode", "bypass", "--deny", "fetch:127.0.0.1"]).await;
    assert!(!result.contains("One about rust"), "{result}");
    assert_eq!(pages.requests(), before);
}

#[tokio::test]
async fn the_endpoint_is_left_out_where_the_provider_searches_and_absent_without_one() {
    let (mut env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(&format!("[search]\nurl = \"{}\"\n", pages.url("/searx")));
    env.set_env("CAIRN_MODEL", "openai-responses/gpt-5");
    env.mock.push(Reply::responses("hi"));
    let cwd = env.cwd();
    let (status, _, stderr) = run(&env, &["exec", "--cwd", &cwd, "hello"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let tools = env.mock.requests()[0]["tools"].as_array().cloned().unwrap();
    assert!(tools.contains(&json!({"type": "web_search"})), "{tools:?}");
    assert!(!offers_function(&tools), "one web_search, the provider's: {tools:?}");

    let env = TestEnv::new().await;
    env.mock.push(Reply::text(&["hi"]));
    let cwd = env.cwd();
    let (status, _, stderr) = run(&env, &["exec", "--cwd", &cwd, "hello"], "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let tools = env.mock.requests()[0]["tools"].as_array().cloned().unwrap();
    assert!(!offers_function(&tools), "no endpoint, no provider search: no tool");
}

#[tokio::test]
async fn a_redirect_from_the_endpoint_is_not_followed_so_the_query_and_key_go_nowhere_else() {
    let (mut env, pages) = (TestEnv::new().await, Pages::start().await);
    let to_brave = pages.url("/redirect?to=/brave");
    env.write_config(&format!("[search]\nurl = \"{to_brave}\"\napi = \"brave\"\napi_key_env = \"BRAVE_API_KEY\"\n"));
    env.set_env("BRAVE_API_KEY", "brave-key");
    let (result, _) = search(&env, json!({"query": "rust"}), &["--mode", "bypass"]).await;
    assert!(result.contains("a redirect, which is not followed"), "{result}");
    assert_eq!(pages.requests(), 1, "only the endpoint itself was asked");
}
