//! The mock model server's prompt cache, modelled on OpenAI's: a request's prefix is cached in
//! 128-token steps once it reaches 1,024 tokens, and a later request reads what it shares with
//! the last request of the same `prompt_cache_key`. Requests without a key share no cache (at
//! scale, OpenAI routes those by a hash of their start and promises nothing). Tokens are counted
//! as 4 bytes of the request's JSON each. When it is on ([`super::MockLlm::model_prompt_cache`]),
//! the usage each answer reports is what this cache makes of its request.

use std::collections::HashMap;

use serde_json::{Value, json};

/// The smallest prefix OpenAI caches, and the steps it caches in.
const SMALLEST: u64 = 1_024;
const STEP: u64 = 128;

/// The last request's prefix material per cache key, and what each request was charged.
#[derive(Default)]
pub struct PromptCache {
    last: HashMap<String, String>,
    charged: Vec<Charged>,
}

/// The prompt tokens of one request and how many of them were read from the cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Charged {
    pub prompt: u64,
    pub cached: u64,
}

impl PromptCache {
    /// Charges `body`'s prompt: its tokens, and those it shares with the last request of its key.
    pub fn charge(&mut self, body: &Value) -> Charged {
        let material = material(body);
        let prompt = (material.len() as u64).div_ceil(4);
        let cached = match body.get("prompt_cache_key").and_then(Value::as_str) {
            Some(key) => {
                let shared = self.last.get(key).map_or(0, |last| shared_prefix(last, &material));
                self.last.insert(key.to_owned(), material);
                let tokens = shared as u64 / 4;
                if tokens < SMALLEST { 0 } else { tokens / STEP * STEP }
            }
            None => 0,
        };
        let charged = Charged { prompt, cached };
        self.charged.push(charged);
        charged
    }

    /// Every request's charge so far.
    pub fn charged(&self) -> Vec<Charged> {
        self.charged.clone()
    }
}

/// What the cache sees of a request, in the order the model reads it: tools, instructions,
/// then the conversation (Chat Completions' `messages`, Responses' `input`).
fn material(body: &Value) -> String {
    let mut material = body.get("tools").map(Value::to_string).unwrap_or_default();
    for field in ["instructions", "messages", "input"] {
        if let Some(Value::Array(items)) = body.get(field) {
            for item in items {
                material.push_str(&item.to_string());
            }
        } else if let Some(value) = body.get(field) {
            material.push_str(&value.to_string());
        }
    }
    material
}

fn shared_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// `event` with its usage (a Chat Completions usage chunk, or a Responses `response.completed`)
/// replaced by `charged`; other events as they are.
pub fn with_usage(event: String, charged: Charged) -> String {
    let Ok(mut value) = serde_json::from_str::<Value>(&event) else { return event };
    if value.get("usage").is_some_and(|usage| !usage.is_null()) {
        value["usage"] = json!({"prompt_tokens": charged.prompt, "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": charged.cached}});
    } else if value["type"] == "response.completed" {
        value["response"]["usage"] = json!({"input_tokens": charged.prompt, "output_tokens": 5,
            "input_tokens_details": {"cached_tokens": charged.cached}});
    } else {
        return event;
    }
    value.to_string()
}
