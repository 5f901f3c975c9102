//! `fetch`: a web page as readable text. HTML becomes Markdown (`body`, with its nesting
//! bounded first in `depth`), plain text and JSON come as they are, and anything else (a PDF,
//! an archive, an image) is refused with what it is.
//!
//! A call is judged by the host it names (`fetch:HOST` rules, [`crate::permissions::host`]):
//! it asks in every mode but bypass unless a rule allows that host. Each hop goes only where
//! `target` allows: `http` or `https`, no credentials, an address that is not this machine's,
//! a private network's or a metadata service's after the name is resolved (`address`), the
//! connection pinned to exactly the addresses judged. Redirects are followed here, at most
//! [`MAX_REDIRECTS`], each judged anew: its URL, its addresses, and its host against the rules
//! (`hop`), a host the call was not allowed to reach being left to the model to fetch itself.
//! What is read is capped (`body::MAX_BYTES`) and so is the whole call (`[fetch]
//! timeout_secs`); the text comes a page of [`PAGE_CHARS`] characters at a time.

mod address;
mod body;
mod depth;
mod hop;
mod target;

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::history::ToolKind;
use crate::permissions::{Mode, PermissionRequest, Rule};

/// The most redirects one call follows.
pub const MAX_REDIRECTS: usize = 5;
/// The characters of text one call returns: with its header, less than a tool result may be
/// before it is cut to its head and tail.
pub const PAGE_CHARS: usize = 16_000;
const _: () = assert!(PAGE_CHARS + 2_000 <= crate::history::SNIP_OVER);

pub struct Fetch;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FetchArgs {
    /// The http:// or https:// URL to read
    pub url: String,
    /// Character to start from, for a text longer than one result (the result says where the next part starts)
    #[serde(default)]
    pub offset: Option<u64>,
}

/// What a `fetch` call needs beyond its arguments: the settings, and the mode and rules its
/// redirects are judged under (the turn's, as when the call was judged).
#[derive(Clone, Debug)]
pub struct Fetching {
    pub settings: crate::config::Fetch,
    pub mode: Mode,
    /// The turn's `fetch` rules.
    pub rules: Vec<Rule>,
}

impl Default for Fetching {
    fn default() -> Self {
        Self { settings: crate::config::Fetch::default(), mode: Mode::Ask, rules: Vec::new() }
    }
}

#[async_trait::async_trait]
impl Tool for Fetch {
    type Args = FetchArgs;

    fn name(&self) -> &str {
        "fetch"
    }

    fn description(&self) -> &str {
        "Read a web page (http:// or https://) as text: HTML comes as Markdown, plain text and JSON as they are. \
         PDFs, images and other binary files are not read. Long pages come in parts: the result says which offset \
         reads on. Pages on this machine or a private network are refused."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Fetch
    }

    fn parameters(&self) -> Value {
        super::schema_of::<FetchArgs>()
    }

    fn access(&self, _args: &FetchArgs) -> Access {
        Access::ReadOnly
    }

    fn title(&self, args: &FetchArgs, _workspace: &Workspace) -> String {
        match args.offset {
            Some(offset) if offset > 0 => format!("Fetch {} (from character {offset})", args.url.trim()),
            Some(_) | None => format!("Fetch {}", args.url.trim()),
        }
    }

    /// The host the URL names; none for a URL that is not fetched at all (the call then says
    /// why without reaching anything).
    fn permission(&self, args: &FetchArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        let target = target::parse(&args.url).ok()?;
        PermissionRequest::for_host(&target.host)
    }

    /// The call keeps its own time limit (`[fetch] timeout_secs`, at most 300 s), and says
    /// what it read by then.
    fn timeout(&self, _args: &FetchArgs, default: Duration) -> Duration {
        default.max(Duration::from_secs(crate::config::MAX_FETCH_SECS + 5))
    }

    async fn run(&self, args: &FetchArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        hop::fetch(args, ctx).await
    }
}

#[cfg(test)]
mod tests;
