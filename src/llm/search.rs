//! Web searches a provider runs itself (OpenAI Responses' `web_search`, Anthropic's server-side
//! `web_search`), as the decoders report them: a [`WebSearch`] per search, announced when it
//! starts and again when it ends with its queries and sources, and the pages the answer cites.
//!
//! Neither citation format reaches an editor (ACP text has no annotations), so each decoder keeps
//! the cited pages ([`Cited`]) and ends the answer's text with a "Sources" list of them, once per
//! page: the list is part of the stored answer, shown with it and sent back with it.

/// One search the provider ran: `done` once its results are in (`error` when it failed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebSearch {
    /// The provider's id of the search, unique within the answer.
    pub id: String,
    /// What was searched for (a search may also open a page or look within one).
    pub queries: Vec<String>,
    /// The pages the search found.
    pub sources: Vec<Source>,
    pub done: bool,
    pub error: Option<String>,
}

/// A page a search found or an answer cites.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub url: String,
    pub title: Option<String>,
}

/// The pages an answer cites, in the order first cited, each once.
#[derive(Debug, Default)]
pub struct Cited(Vec<Source>);

impl Cited {
    /// Notes a citation of `url`; a later title fills in a missing one.
    pub fn note(&mut self, url: &str, title: Option<&str>) {
        if url.is_empty() {
            return;
        }
        let title = title.map(str::trim).filter(|title| !title.is_empty()).map(str::to_owned);
        match self.0.iter_mut().find(|known| known.url == url) {
            Some(known) => {
                if known.title.is_none() {
                    known.title = title;
                }
            }
            None => self.0.push(Source { url: url.to_owned(), title }),
        }
    }

    /// The text that ends an answer citing these pages: a blank line and a Markdown list;
    /// `None` when nothing was cited. Taking it empties the list.
    pub fn take_footer(&mut self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let mut footer = String::from("\n\nSources:");
        for source in self.0.drain(..) {
            let title = source.title.as_deref().unwrap_or(&source.url);
            footer.push_str(&format!("\n- [{}]({})", markdown_text(title), source.url.replace(' ', "%20")));
        }
        Some(footer)
    }
}

/// `text` safe inside a Markdown link's brackets: on one line, its brackets escaped.
fn markdown_text(text: &str) -> String {
    let line: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    line.replace('\\', "\\\\").replace('[', "\\[").replace(']', "\\]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_page_is_listed_once_in_the_order_first_cited() {
        let mut cited = Cited::default();
        cited.note("https://a.example/x", None);
        cited.note("https://b.example/", Some("  B [beta]\n page "));
        cited.note("https://a.example/x", Some("A"));
        cited.note("", Some("nothing"));
        assert_eq!(
            cited.take_footer().as_deref(),
            Some("\n\nSources:\n- [A](https://a.example/x)\n- [B \\[beta\\] page](https://b.example/)")
        );
        assert_eq!(cited.take_footer(), None, "taken once");
    }
}
