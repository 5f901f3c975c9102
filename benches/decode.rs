//! Provider-layer costs, without the network: `cargo bench --bench decode`.
//!
//! Decoder throughput (SSE events per second) for each API on a long answer streamed one small
//! delta per event, and the time to write a request body for a 100-message conversation, which
//! every model step pays.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout, clippy::print_stderr)]

use std::time::{Duration, Instant};

use serde_json::json;

use cairn::history::view::Seen;
use cairn::history::{Message, MessageMeta, Part, Role};
use cairn::llm::sse::{Decode, Encode, decode_transcript};
use cairn::llm::{ModelRequest, anthropic, openai_chat, openai_responses};

const EVENTS: usize = 200_000;

fn chat_transcript() -> String {
    let delta = json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": "word "}, "finish_reason": null}]});
    let mut text = format!("data: {delta}\n\n").repeat(EVENTS);
    let finish = json!({"id": "c", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]});
    text.push_str(&format!("data: {finish}\n\ndata: [DONE]\n\n"));
    text
}

fn anthropic_transcript() -> String {
    let frame = |name: &str, data: serde_json::Value| format!("event: {name}\ndata: {data}\n\n");
    let mut text = frame("message_start", json!({"type": "message_start", "message": {"usage": {"input_tokens": 10}}}));
    text.push_str(&frame(
        "content_block_start",
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    text.push_str(
        &frame(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "word "}}),
        )
        .repeat(EVENTS),
    );
    text.push_str(&frame("content_block_stop", json!({"type": "content_block_stop", "index": 0})));
    text.push_str(&frame(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
    ));
    text.push_str(&frame("message_stop", json!({"type": "message_stop"})));
    text
}

fn responses_transcript() -> String {
    let frame = |data: serde_json::Value| format!("event: {}\ndata: {data}\n\n", data["type"].as_str().unwrap());
    let mut text =
        frame(json!({"type": "response.output_text.delta", "item_id": "m", "delta": "word "})).repeat(EVENTS);
    text.push_str(&frame(json!({"type": "response.completed", "response": {"status": "completed"}})));
    text
}

async fn throughput<D: Decode>(name: &str, transcript: &str, decoder: impl Fn() -> D) {
    let mut rates = Vec::new();
    for _ in 0..5 {
        let started = Instant::now();
        let events = decode_transcript(transcript, decoder()).await;
        let took = started.elapsed();
        assert!(events.iter().all(Result::is_ok) && events.len() > EVENTS);
        rates.push(EVENTS as f64 / took.as_secs_f64());
    }
    rates.sort_by(f64::total_cmp);
    println!("| {name} decoder | {:.0} events/s | best {:.0} events/s | ≥ 500,000 events/s |", rates[2], rates[4]);
}

fn conversation() -> Vec<Message> {
    let mut messages = Vec::new();
    for i in 0..50 {
        messages.push(Message::new(
            Role::User,
            vec![Part::Text { text: format!("question {i} ").repeat(30) }],
            MessageMeta::default(),
        ));
        messages.push(Message::new(
            Role::Assistant,
            vec![
                Part::Reasoning { text: "thinking ".repeat(40), signature: Some("sig".repeat(30)) },
                Part::Text { text: format!("answer {i} ").repeat(60) },
            ],
            MessageMeta::default(),
        ));
    }
    messages
}

fn build(name: &str, request: &ModelRequest<'_>, body: Encode) {
    let mut times: Vec<Duration> = (0..200)
        .map(|_| {
            let started = Instant::now();
            let bytes = body(request).unwrap();
            std::hint::black_box(bytes);
            started.elapsed()
        })
        .collect();
    times.sort();
    println!(
        "| {name} request for 100 messages (build + serialize) | {:.0} µs | p90 {:.0} µs | — |",
        times[100].as_secs_f64() * 1e6,
        times[180].as_secs_f64() * 1e6
    );
}

#[tokio::main]
async fn main() {
    println!("| figure | median | other | target |");
    println!("|---|---|---|---|");
    throughput("OpenAI Chat", &chat_transcript(), openai_chat::Decoder::default).await;
    throughput("Anthropic Messages", &anthropic_transcript(), anthropic::Decoder::default).await;
    throughput("OpenAI Responses", &responses_transcript(), openai_responses::Decoder::default).await;
    let messages = conversation();
    let system = "system prompt ".repeat(200);
    let registry = cairn::tools::Registry::builtin();
    let request = ModelRequest {
        model: "m",
        system: &system,
        messages: messages.iter().map(Seen::whole).collect(),
        tools: registry.specs().iter().map(|spec| &**spec).collect(),
        max_output: 16_000,
        thought: None,
        images: true,
        trace: None,
        cache_key: Some("ses_bench"),
        web_search: false,
    };
    build("OpenAI Chat", &request, openai_chat::encode);
    build("Anthropic Messages", &request, anthropic::encode);
    build("OpenAI Responses", &request, openai_responses::encode);
}
