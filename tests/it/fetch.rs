//! `fetch` end to end: the model calls it, the real binary reads pages from a local server, and
//! what comes back is what the model is sent. The server is on 127.0.0.1, which `fetch` refuses
//! as loopback: the tests that read from it set `[fetch] allow_private = true`, and the ones
//! that attack it as a hostile model would leave it unset and check that nothing was reached.

use serde_json::{Value, json};

use crate::exec::run;
use crate::support::pages::Pages;
use crate::support::{Editor, Reply, TestEnv};
use crate::tools::{call, set_mode, turn};

const ALLOW_PRIVATE: &str = "[fetch]\nallow_private = true\n";

/// One `cairn exec` turn in which the model fetches each URL at once; each call's result.
async fn fetch_all(env: &TestEnv, urls: &[String], flags: &[&str]) -> Vec<String> {
    let calls: Vec<(String, Value)> =
        urls.iter().enumerate().map(|(n, url)| (format!("call_{n}"), json!({"url": url}))).collect();
    let calls: Vec<(&str, &str, Value)> = calls.iter().map(|(id, args)| (id.as_str(), "fetch", args.clone())).collect();
    env.mock.push(Reply::tool_calls(&calls));
    env.mock.push(Reply::text(&["Done."]));
    let cwd = env.cwd();
    let mut args = vec!["exec", "--cwd", &cwd];
    args.extend_from_slice(flags);
    args.push("read these");
    let (status, _, stderr) = run(env, &args, "").await;
    assert_eq!(status, Some(0), "{stderr}");
    let requests = env.mock.requests();
    let results = crate::exec::tool_results(requests.last().unwrap());
    results[results.len() - urls.len()..].to_vec()
}

fn expect(results: &[String], urls: &[String], wanted: &[&str]) {
    for ((result, url), wanted) in results.iter().zip(urls).zip(wanted) {
        assert!(result.contains(wanted), "{url}: expected {wanted:?} in {result}");
    }
}

#[tokio::test]
async fn pages_come_as_markdown_and_text_and_json_as_they_are() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(ALLOW_PRIVATE);
    let urls = [pages.url("/page"), pages.url("/text"), pages.url("/json")];
    let results = fetch_all(&env, &urls, &["--mode", "bypass"]).await;
    let page = &results[0];
    assert!(page.starts_with(&format!("[{}/page: text/html, ", pages.base)), "{page}");
    assert!(page.contains("as Markdown]"), "{page}");
    for markdown in ["# Fetch works", "**bold**", "[a link](https://example.test/more)", "- one", "```rust"] {
        assert!(page.contains(markdown), "{markdown} in {page}");
    }
    assert!(!page.contains("hidden") && !page.contains("<h1>"), "{page}");
    assert!(results[1].ends_with("plain *text* <b>kept</b>\n"), "{}", results[1]);
    assert!(results[2].ends_with("{\"answer\": 42, \"html\": \"<p>\"}"), "{}", results[2]);
}

#[tokio::test]
async fn hostile_urls_reach_nothing() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    // Every call fails, on purpose: the turn must not stop for it.
    env.write_config("[limits]\nconsecutive_errors = 0\n[limits.loop_detection]\nenabled = false\n");
    let port = pages.port;
    let attacks = [
        (pages.url("/page"), "loopback"),
        (format!("http://localhost:{port}/page"), "loopback"),
        (format!("http://LocalHost.:{port}/page"), "loopback"),
        (format!("http://[::1]:{port}/page"), "loopback"),
        (format!("http://0x7f000001:{port}/page"), "loopback"),
        (format!("http://2130706433:{port}/page"), "loopback"),
        (format!("http://127.1:{port}/page"), "loopback"),
        (format!("http://0177.0.0.1:{port}/page"), "loopback"),
        (format!("http://[::ffff:127.0.0.1]:{port}/page"), "loopback"),
        (format!("http://0.0.0.0:{port}/page"), "unspecified"),
        ("http://169.254.169.254/latest/meta-data".to_owned(), "metadata"),
        ("http://[fd00:ec2::254]/latest/meta-data".to_owned(), "metadata"),
        ("http://10.0.0.1/".to_owned(), "private network"),
        ("file:///etc/passwd".to_owned(), "is a file: URL"),
        (format!("ftp://127.0.0.1:{port}/"), "is a ftp: URL"),
        (format!("gopher://127.0.0.1:{port}/"), "is a gopher: URL"),
        (format!("http://user:secret@127.0.0.1:{port}/page"), "user name or password"),
    ];
    let urls: Vec<String> = attacks.iter().map(|(url, _)| url.clone()).collect();
    let wanted: Vec<&str> = attacks.iter().map(|(_, says)| *says).collect();
    let results = fetch_all(&env, &urls, &["--mode", "bypass"]).await;
    expect(&results, &urls, &wanted);
    assert_eq!(pages.requests(), 0, "nothing reached the server");
}

#[tokio::test]
async fn binary_bodies_are_refused_whatever_their_type_says_and_text_is_decoded() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(ALLOW_PRIVATE);
    let urls: Vec<String> =
        ["/pdf", "/lying", "/nul", "/latin1", "/undeclared", "/missing"].iter().map(|path| pages.url(path)).collect();
    let results = fetch_all(&env, &urls, &["--mode", "bypass"]).await;
    expect(
        &results,
        &urls,
        &["is a PDF document", "is a PDF document", "NUL bytes", "café crème", "naïve café", "answered 404 Not Found"],
    );
    assert!(results[0].contains("download it with a command"), "{}", results[0]);
    assert!(results[5].contains("No such page"), "the error page is quoted: {}", results[5]);
}

#[tokio::test]
async fn a_huge_body_is_read_to_its_cap_and_the_rest_is_never_downloaded() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(ALLOW_PRIVATE);
    let urls = [pages.url("/huge")];
    let results = fetch_all(&env, &urls, &["--mode", "bypass"]).await;
    assert!(results[0].contains("only the first 2.0 MiB were read"), "{}", &results[0][..300]);
    assert!(results[0].contains("fetch again with \"offset\": 16000"), "{}", &results[0][..300]);
    let sent = pages.sent();
    assert!(sent < 16 * 1024 * 1024, "the server sent {sent} bytes of 64 MiB before the connection was dropped");
}

#[tokio::test]
async fn a_slow_server_is_cut_off_at_the_time_limit() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config("[fetch]\nallow_private = true\ntimeout_secs = 2\n");
    let urls = [pages.url("/slow"), pages.url("/stall")];
    let started = std::time::Instant::now();
    let results = fetch_all(&env, &urls, &["--mode", "bypass"]).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    expect(&results, &urls, &["early part", "did not answer within 2 s"]);
    assert!(results[0].contains("still sending when the time ran out"), "{}", results[0]);
}

#[tokio::test]
async fn redirects_are_followed_by_hand_each_hop_judged_anew() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(ALLOW_PRIVATE);
    let port = pages.port;
    let to_localhost = pages.url(&format!("/redirect?to=http://localhost:{port}/page"));
    let urls = [
        pages.url("/redirect?to=/page"),
        pages.url("/loop"),
        pages.url("/metadata"),
        pages.url("/file"),
        to_localhost.clone(),
    ];
    let results = fetch_all(&env, &urls, &["--mode", "bypass", "--deny", "fetch:localhost"]).await;
    expect(
        &results,
        &urls,
        &[
            "# Fetch works",
            "stopped after 5 redirects",
            "169.254.169.254 is a cloud metadata service's address",
            "is a file: URL",
            "a remembered rule rejects fetches from `localhost`",
        ],
    );
    assert!(results[0].contains(&format!("(redirected from {}/redirect?to=/page)", pages.base)), "{}", results[0]);
    assert!(!results[2].contains("allow_private"), "nothing lifts a metadata address: {}", results[2]);

    // In ask mode a redirect to a host no rule allows is left to the model, whose own call to it
    // would be asked about.
    let results = fetch_all(&env, &[to_localhost], &["--allow", "fetch:127.0.0.1"]).await;
    assert!(results[0].contains("a host this call was not allowed to reach"), "{}", results[0]);
    assert!(results[0].contains("fetch that URL itself"), "{}", results[0]);
}

#[tokio::test]
async fn rules_name_hosts_and_wildcards_cover_subdomains_only() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    let port = pages.port;
    // Past the permission, `docs.localhost` meets the address check; `evillocalhost` never
    // gets that far. Neither is looked up: a loopback name is refused by its name.
    let urls = [format!("http://docs.localhost:{port}/"), format!("http://evillocalhost:{port}/")];
    let results = fetch_all(&env, &urls, &["--allow", "fetch:*.localhost"]).await;
    expect(&results, &urls, &["a loopback name", "there is nobody to ask"]);
    assert!(results[1].contains("`evillocalhost`"), "{}", results[1]);

    env.write_config(ALLOW_PRIVATE);
    let urls = [pages.url("/page")];
    let results = fetch_all(&env, &urls, &["--mode", "bypass", "--deny", "fetch:127.0.0.1"]).await;
    expect(&results, &urls, &["a remembered rule rejects fetches from `127.0.0.1`"]);
    assert_eq!(pages.requests(), 0);

    for (rule, says) in [("fetch:https://docs.rs", "is a URL, not a host"), ("fetch:docs.*", "`*` may only")] {
        let (status, _, stderr) = run(&env, &["exec", "--allow", rule, "hello"], "").await;
        assert_eq!(status, Some(2), "{rule}: {stderr}");
        assert!(stderr.contains(says), "{rule}: {stderr}");
    }
}

#[tokio::test]
async fn ask_mode_asks_naming_the_host_and_remembers_it_and_no_mode_but_bypass_lets_it_through() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(ALLOW_PRIVATE);
    let fetch = |id: &str, url: String| Reply::tool_calls(&[(id, "fetch", json!({"url": url}))]);
    env.mock.push(fetch("c1", pages.url("/page"))).push(Reply::text(&["ok"]));
    env.mock.push(fetch("c2", pages.url("/text"))).push(Reply::text(&["ok"]));
    let localhost = format!("http://localhost:{}/page", pages.port);
    env.mock.push(fetch("c3", localhost.clone())).push(Reply::text(&["ok"]));
    env.mock.push(fetch("c4", localhost)).push(Reply::text(&["ok"]));
    let editor = Editor::default();
    editor.answer(&["allow_session", "reject_once", "reject_once"]);
    let mut agent = env.ready_with(editor).await;
    let session = agent.new_session(&env.cwd()).await;

    let (_, updates) = turn(&mut agent, &session, "read the docs").await;
    let asked = agent.editor.requests("session/request_permission");
    assert_eq!(asked.len(), 1);
    let card = &asked[0]["params"]["toolCall"];
    assert_eq!(card["kind"], "fetch");
    assert_eq!(card["title"], format!("Fetch {}/page", pages.base));
    let said = card["content"].to_string();
    assert!(said.contains("fetching reads `127.0.0.1` over the network"), "{said}");
    let labels: Vec<&str> =
        asked[0]["params"]["options"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert!(labels.contains(&"Always allow fetches from `127.0.0.1` in this session"), "{labels:?}");
    assert!(labels.contains(&"Always reject fetches from `127.0.0.1`"), "{labels:?}");
    let done = call(&updates, "c1");
    assert_eq!(done.last().unwrap()["status"], "completed");
    assert_eq!(done[0]["kind"], "fetch");

    turn(&mut agent, &session, "and the text").await;
    assert_eq!(agent.editor.requests("session/request_permission").len(), 1, "the host is allowed now");

    for (mode, asked) in [("accept-edits", 2), ("read-only", 3)] {
        set_mode(&mut agent, &session, mode).await;
        let (_, updates) = turn(&mut agent, &session, "another host").await;
        assert_eq!(agent.editor.requests("session/request_permission").len(), asked, "{mode} asks");
        assert_eq!(call(&updates, &format!("c{}", asked + 1)).last().unwrap()["status"], "failed");
    }
    assert_eq!(pages.requests(), 2, "only the allowed calls reached the server");
}

#[tokio::test]
async fn a_page_nested_too_deep_keeps_its_text_and_says_what_it_lost() {
    let (env, pages) = (TestEnv::new().await, Pages::start().await);
    env.write_config(ALLOW_PRIVATE);
    pages.put("/deep", format!("{}the deepest words{}", "<div>".repeat(100_000), "</div>".repeat(100_000)));
    let urls = [pages.url("/deep")];
    let started = std::time::Instant::now();
    let results = fetch_all(&env, &urls, &["--mode", "bypass"]).await;
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "{:?}", started.elapsed());
    expect(&results, &urls, &["the deepest words"]);
    assert!(
        results[0].contains("nests deeper than 256 elements; 199488 tags below that depth were dropped"),
        "{}",
        results[0]
    );
}
