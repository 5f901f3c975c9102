//! What a `fetch` costs, end to end: `cargo bench --bench fetch`.
//!
//! Drives the real binary over pipes against the integration tests' mock model server (which
//! answers at once) and their page server on 127.0.0.1 (`[fetch] allow_private = true`), in
//! bypass mode so nothing asks. Each sample is one prompt: a model step calling `fetch`, the
//! page read and converted, its first part sent back, a step answering. Pages: a 1 KB page (the
//! floor: HTTP, a client per hop, the turn), a 1 MB documentation-like page (headings, prose,
//! lists, code, tables), and two hostile 2 MiB pages (nested `<div>`s; `<li><dd>` pairs, which
//! the parser nests without any closing), which the nesting bound keeps from taking the parser
//! minutes. Prints median, p90 and max, and the peak RSS of an agent that fetched only that page.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

#[path = "../tests/it/support/mod.rs"]
#[allow(dead_code)]
mod support;

use std::time::{Duration, Instant};

use serde_json::json;

use support::pages::Pages;
use support::{Agent, Reply, TestEnv};

const SAMPLES: usize = 20;

fn stats(name: &str, mut samples: Vec<Duration>, peak_mb: f64) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "| {name} | {:.2} ms | {:.2} ms | {:.2} ms | {} | {peak_mb:.1} MB |",
        ms(at(0.5)),
        ms(at(0.9)),
        ms(samples[samples.len() - 1]),
        samples.len()
    );
}

/// A documentation page of about `size` bytes.
fn docs(size: usize) -> String {
    let mut page = String::from(
        "<!doctype html><html><head><title>Docs</title><style>body{margin:0}</style>\
         <script>window.x = 1;</script></head><body><nav><a href=\"/\">Home</a></nav><main>",
    );
    let mut n = 0;
    while page.len() < size {
        n += 1;
        page.push_str(&format!(
            "<h2 id=\"s{n}\">Section {n}</h2><p>Some <b>bold</b> and <i>italic</i> text with \
             <a href=\"https://example.com/{n}\">a link</a> and <code>code()</code>. {}</p><ul>{}</ul>\
             <pre><code class=\"language-rust\">fn main() {{\n    println!(\"{n}\");\n}}\n</code></pre>\
             <table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>",
            "lorem ipsum dolor sit amet ".repeat(8),
            (0..5).map(|i| format!("<li>item {i} <em>em</em></li>")).collect::<String>()
        ));
    }
    page.push_str("</main></body></html>");
    page
}

async fn timed_fetch(agent: &mut Agent, env: &TestEnv, session: &str, url: &str, round: usize) -> Duration {
    env.mock.push(Reply::tool_calls(&[(&format!("f{round}"), "fetch", json!({"url": url}))]));
    env.mock.push(Reply::text(&["done"]));
    let started = Instant::now();
    let id = agent.prompt(session, "read it").await;
    let (response, _) = agent.response(id).await;
    assert_eq!(response["result"]["stopReason"], "end_turn", "{response}");
    let elapsed = started.elapsed();
    let sent = env.mock.requests();
    let result = sent.last().unwrap()["messages"].as_array().unwrap().iter().rev().find(|m| m["role"] == "tool");
    let result = result.unwrap()["content"].as_str().unwrap_or_default().to_owned();
    assert!(result.starts_with(&format!("[{url}")), "{}", &result[..result.len().min(300)]);
    elapsed
}

#[tokio::main]
async fn main() {
    let mut env = TestEnv::new().await;
    env.set_env("CAIRN_LOG", "warn");
    env.write_config("[fetch]\nallow_private = true\n");
    let pages = Pages::start().await;
    pages.put("/small", docs(1_000));
    pages.put("/docs", docs(1_000_000));
    pages.put("/deep", "<div>".repeat(2 * 1024 * 1024 / 5));
    pages.put("/li-dd", "<li><dd>".repeat(2 * 1024 * 1024 / 8));
    println!("| figure | median | p90 | max | samples | agent's peak RSS |");
    println!("|---|---|---|---|---|---|");
    for (name, path, samples) in [
        ("`fetch` of a 1 KB page, prompt → answer", "/small", SAMPLES),
        ("`fetch` of a 1 MB HTML page → Markdown, prompt → answer", "/docs", SAMPLES),
        ("`fetch` of 2 MiB of nested `<div>` (hostile)", "/deep", 5),
        ("`fetch` of 2 MiB of `<li><dd>` (hostile)", "/li-dd", 5),
    ] {
        // A fresh agent per page, so its peak RSS is this page's.
        let mut agent = env.ready().await;
        let session = agent.new_session(&env.cwd()).await;
        agent.call("session/set_mode", json!({"sessionId": session, "modeId": "bypass"})).await;
        let url = pages.url(path);
        let mut times = Vec::new();
        for round in 0..samples + 2 {
            let took = timed_fetch(&mut agent, &env, &session, &url, round).await;
            if round >= 2 {
                times.push(took);
            }
        }
        let peak = support::status_kib(agent.child.id().unwrap(), "VmHWM:").unwrap_or(0) as f64 / 1024.0;
        stats(name, times, peak);
        agent.close_stdin();
        agent.wait_exit().await;
    }
}
