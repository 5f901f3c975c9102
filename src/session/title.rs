//! Session titles written by a model after the first turn.
//!
//! The first prompt's first line is the title at once; when the first turn ends, a small model
//! (`title_model` in config.toml, else the session's own) is asked for a better one in the
//! background. Its answer replaces the title in the store and reaches the editor as a
//! `session_info_update`; any failure leaves the first-line title and never touches the turn.
//! A title the client set (`session/set_title`) stands: the store writes the model's only while
//! no client has titled the session, checked in the writer's transaction (so also when the
//! client's title came while the model was still writing, or from another process), and the
//! update is sent only when the model's title was written.
//! The request carries the client's trace context of the turn's prompt, if it came with one.

use std::time::Duration;

use tracing::Instrument as _;

use super::Update;
use super::actor::Services;
use crate::history::view::Seen;
use crate::history::{Message, MessageMeta, Part, Role};
use crate::llm::{self, ModelRequest};
use crate::store::{SessionRow, StoreError, TitleBy, Write};
use crate::trace::TraceContext;

/// The instruction that asks for a title; mock servers recognize title requests by it.
pub const INSTRUCTION: &str = "You write short titles for coding conversations. Reply with the title only: at most six words, no quotes, no trailing period.";

const DEADLINE: Duration = Duration::from_secs(20);
const MAX_CHARS: usize = 80;

/// Asks for a title in the background, on `trace` (the prompt's, see [`crate::trace`]): its
/// request carries it, and its log lines show it.
pub fn spawn(services: &Services, row: &SessionRow, prompt: String, trace: Option<TraceContext>) {
    let config = std::sync::Arc::clone(&services.config);
    let model = config.title_model.clone().unwrap_or_else(|| row.model.clone());
    let (store, sink, id) = (services.store.clone(), std::sync::Arc::clone(&services.sink), row.id.clone());
    let span = crate::trace::span(trace.as_ref());
    let asked = async move {
        let written = write_title(&config, &model, prompt, trace.as_ref());
        let title = match tokio::time::timeout(DEADLINE, written).await {
            Ok(Ok(title)) => title,
            Ok(Err(why)) => {
                return tracing::info!(session = %id, %why, "no model-written title; keeping the first line");
            }
            Err(_) => return tracing::info!(session = %id, "the title model took too long; keeping the first line"),
        };
        let update = Update::Title(title.clone());
        let shown = id.clone();
        store.submit(
            Write::SetSessionTitle { id, title, by: TitleBy::Model },
            Some(Box::new(move |result| match result {
                Ok(()) => sink.send(&shown, update),
                Err(StoreError::TitleKept(_)) => {
                    tracing::info!(session = %shown, "the client titled the session meanwhile; its title stands");
                }
                Err(err) => tracing::warn!(session = %shown, %err, "the model-written title could not be stored"),
            })),
        );
    };
    services.background.spawn(asked.instrument(span));
}

async fn write_title(
    config: &crate::config::Config,
    model: &str,
    prompt: String,
    trace: Option<&TraceContext>,
) -> Result<String, String> {
    let resolved = llm::resolve(config, model).map_err(|err| err.to_string())?;
    let prompt: String = prompt.chars().take(4_000).collect();
    let message = Message::new(Role::User, vec![Part::Text { text: prompt }], MessageMeta::default());
    let request = ModelRequest {
        model: &resolved.model,
        system: INSTRUCTION,
        messages: vec![Seen::whole(&message)],
        tools: Vec::new(),
        max_output: 64,
        thought: None,
        images: llm::catalog::info(config, model).images,
        trace,
        cache_key: None,
        web_search: false,
    };
    let reply = llm::reply(resolved.provider.as_ref(), &request).await.map_err(|err| err.to_string())?;
    clean(&reply.text).ok_or_else(|| "the model's title was empty".to_owned())
}

/// A session title from the first line of a prompt's text, at most 80 characters: the title
/// until a model writes one.
pub(super) fn first_line(parts: &[Part]) -> Option<String> {
    let text = parts.iter().find_map(|part| match part {
        Part::Text { text } => text.lines().map(str::trim).find(|line| !line.is_empty()),
        _ => None,
    })?;
    let mut title: String = text.chars().take(80).collect();
    if text.chars().count() > 80 {
        title.pop();
        title.push('…');
    }
    Some(title)
}

/// The text of a prompt, for the title writer.
pub(super) fn prompt_text(parts: &[Part]) -> String {
    crate::history::texts(parts).collect::<Vec<_>>().join("\n")
}

/// The first non-empty line, without quotes or a final period, at most 80 characters.
fn clean(text: &str) -> Option<String> {
    let line = text.lines().map(str::trim).find(|line| !line.is_empty())?;
    let line = line.trim_matches(|c| matches!(c, '"' | '\'' | '`' | '*' | '#')).trim().trim_end_matches('.');
    let title: String = line.chars().take(MAX_CHARS).collect();
    (!title.is_empty()).then_some(title)
}

#[cfg(test)]
mod tests {
    #[test]
    fn titles_are_one_clean_line() {
        assert_eq!(super::clean("\n  \"Fix the login test.\"\nmore").as_deref(), Some("Fix the login test"));
        assert_eq!(super::clean("# Refactor the store"), Some("Refactor the store".to_owned()));
        assert_eq!(super::clean("   \n"), None);
    }
}
