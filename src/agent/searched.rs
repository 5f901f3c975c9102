//! A web search the model's provider ran itself, as a card: a hosted `web_search` call (kind
//! fetch) started when the provider announces the search and brought up to date when its
//! results are in, with the queries in its title and input and the pages found in its content.
//! It is stored and replayed like any call; it is never run here nor sent back to the model.

use super::Turn;
use super::events::AgentEvent;
use super::state::Streaming;
use crate::history::{CallState, Part, ToolContent, ToolKind, ToolPart};
use crate::llm::search::WebSearch;

/// The name the card goes by.
pub const NAME: &str = "web_search";

/// How many of a search's sources its card lists.
const SOURCES_SHOWN: usize = 20;

/// Starts the search's card, or brings it up to date.
pub fn searched(turn: &mut Turn<'_>, s: &mut Streaming, search: WebSearch) {
    super::steps::close_part(turn, s);
    let known = s
        .message
        .parts
        .iter()
        .position(|part| matches!(part, Part::Tool(tool) if tool.hosted && tool.call_id == search.id));
    let index = known.unwrap_or_else(|| {
        let mut tool = ToolPart::new(search.id.clone(), NAME.to_owned());
        tool.hosted = true;
        tool.kind = ToolKind::Fetch;
        s.message.parts.push(Part::Tool(tool));
        s.message.parts.len() - 1
    });
    let Some(Part::Tool(tool)) = s.message.parts.get_mut(index) else { return };
    describe(tool, &search);
    let part = Part::Tool(tool.clone());
    let index = u32::try_from(index).unwrap_or(u32::MAX);
    turn.recorder.record(AgentEvent::PartUpdated { message: s.message.id.clone(), index, part });
}

/// The card of `search`: its state, title, input and what it found.
fn describe(tool: &mut ToolPart, search: &WebSearch) {
    if tool.state == CallState::New {
        let _ = tool.state.advance(CallState::Running);
    }
    tool.title = match search.queries.as_slice() {
        [] => "Search the web".to_owned(),
        [query] => format!("Search the web: {query}"),
        [query, rest @ ..] => format!("Search the web: {query} (and {} more)", rest.len()),
    };
    tool.input = serde_json::json!({ "queries": search.queries }).to_string();
    if !search.done {
        return;
    }
    let mut text = String::new();
    for query in &search.queries {
        text.push_str(&format!("Searched for: {query}\n"));
    }
    for (n, source) in search.sources.iter().take(SOURCES_SHOWN).enumerate() {
        let title = source.title.as_deref().unwrap_or(&source.url);
        text.push_str(&format!("{}. [{title}]({})\n", n + 1, source.url));
    }
    if search.sources.len() > SOURCES_SHOWN {
        text.push_str(&format!("… and {} more\n", search.sources.len() - SOURCES_SHOWN));
    }
    let (state, output) = match &search.error {
        Some(error) => (CallState::Failed, format!("The search failed: {error}")),
        None if text.is_empty() => (CallState::Succeeded, "The search found nothing to list.".to_owned()),
        None => (CallState::Succeeded, text.trim_end().to_owned()),
    };
    // The provider said it finished: a search already ended stays as it ended.
    if tool.state.advance(state).is_ok() {
        tool.content = vec![ToolContent::Text { text: output.clone() }];
        tool.output = Some(output);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::search::Source;

    #[test]
    fn a_search_runs_until_its_results_are_in_then_lists_them() {
        let mut tool = ToolPart::new("ws_1".into(), NAME.into());
        let mut search = WebSearch { id: "ws_1".into(), ..WebSearch::default() };
        describe(&mut tool, &search);
        assert_eq!((tool.state, tool.title.as_str()), (CallState::Running, "Search the web"));
        search.queries = vec!["rust 2024 edition".into(), "let chains".into()];
        search.sources =
            vec![Source { url: "https://doc.rust-lang.org/edition-guide/".into(), title: Some("Guide".into()) }];
        search.done = true;
        describe(&mut tool, &search);
        assert_eq!(tool.state, CallState::Succeeded);
        assert_eq!(tool.title, "Search the web: rust 2024 edition (and 1 more)");
        assert_eq!(
            tool.output.as_deref(),
            Some(
                "Searched for: rust 2024 edition\nSearched for: let chains\n1. [Guide](https://doc.rust-lang.org/edition-guide/)"
            )
        );
        assert!(tool.input.contains("let chains"));
    }

    #[test]
    fn a_failed_search_says_why() {
        let mut tool = ToolPart::new("ws_2".into(), NAME.into());
        let search = WebSearch {
            id: "ws_2".into(),
            done: true,
            error: Some("max_uses_exceeded".into()),
            ..WebSearch::default()
        };
        describe(&mut tool, &search);
        assert_eq!(tool.state, CallState::Failed);
        assert_eq!(tool.output.as_deref(), Some("The search failed: max_uses_exceeded"));
    }
}
