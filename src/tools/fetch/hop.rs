//! One `fetch` call, hop by hop: each request is made on a client of its own, built through
//! `net` (the process's one way to build one) with redirects off and the host pinned to the
//! addresses `target::resolve` judged; a redirect is judged before it is followed (its URL, then
//! its host against the rules, [`judge_hop`], then its addresses), at most
//! [`super::MAX_REDIRECTS`] of them. The whole call is bounded by `[fetch] timeout_secs`.
//!
//! Behind a proxy (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, as reqwest reads them, `NO_PROXY`
//! honoured), the proxy connects to the host and resolves its name itself: cairn still judges
//! the URL (an address written in it, `localhost`) and what the name resolves to here, and
//! refuses as without a proxy, but it cannot pin the address the proxy reaches; what the proxy
//! lets through is the proxy's policy. A name that only the proxy can resolve is not fetched.

use std::time::Duration;

use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE, LOCATION};
use tokio::time::Instant;

use super::target::{self, Target};
use super::{FetchArgs, Fetching, MAX_REDIRECTS, body};
use crate::permissions::{self, Decision, PermissionRequest};
use crate::tools::{ToolContext, ToolError, ToolOutcome};

/// What `fetch` asks for: pages, Markdown where a site offers it, text.
const ACCEPTED: &str =
    "text/html,application/xhtml+xml;q=0.9,text/markdown;q=0.9,text/plain;q=0.8,application/json;q=0.8,*/*;q=0.1";

pub(super) async fn fetch(args: &FetchArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
    let first = target::parse(&args.url)?;
    let settings = &ctx.fetch.settings;
    let deadline = Instant::now() + settings.timeout;
    let late = |url: &url::Url| {
        ToolError::Tell(format!(
            "{url} did not answer within {} s ([fetch] timeout_secs); try again later or another source",
            settings.timeout.as_secs()
        ))
    };
    // The hosts this call may reach: the one it was allowed, and those the rules allow.
    let mut allowed = vec![first.host.clone()];
    let mut visited: Vec<Target> = Vec::new();
    let mut target = first.clone();
    let response = loop {
        let addresses = tokio::time::timeout_at(deadline, target::resolve(&target, settings.allow_private))
            .await
            .map_err(|_| late(&target.url))??;
        let response =
            tokio::time::timeout_at(deadline, send(&target, &addresses)).await.map_err(|_| late(&target.url))??;
        if !response.status().is_redirection() {
            break response;
        }
        let Some(location) = response.headers().get(LOCATION).and_then(|value| value.to_str().ok()) else {
            return Err(ToolError::Tell(format!(
                "{} answered {} without saying where to go (no Location)",
                target.url,
                response.status()
            )));
        };
        let next = target::redirect(&target.url, location)?;
        if visited.len() == MAX_REDIRECTS {
            let chain: Vec<&str> = visited.iter().chain([&target]).map(|hop| hop.url.as_str()).collect();
            return Err(ToolError::Tell(format!(
                "stopped after {MAX_REDIRECTS} redirects ({} → {}); the page may redirect in a loop",
                chain.join(" → "),
                next.url
            )));
        }
        judge_hop(&ctx.fetch, &mut allowed, &target, &next)?;
        visited.push(std::mem::replace(&mut target, next));
    };
    let status = response.status();
    let declared = response.headers().get(CONTENT_TYPE).and_then(|value| value.to_str().ok()).map(str::to_owned);
    let length = response.headers().get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
    let read = body::Reading { url: &target.url, declared: declared.as_deref(), length, deadline };
    if !status.is_success() {
        let excerpt = body::excerpt(response, &read, ctx).await;
        let said = if excerpt.trim().is_empty() { String::new() } else { format!(":\n\n{excerpt}") };
        return Err(ToolError::Tell(format!("{} answered {status}{said}", target.url)));
    }
    let page = body::page(response, &read, ctx).await?;
    let redirected = (target.url != first.url).then_some(&first.url);
    Ok(body::outcome(&target.url, redirected, page, args.offset.unwrap_or(0)))
}

/// Whether a redirect from `from` may go to `next`: a host the call may already reach, or one
/// the rules allow under the turn's mode. A host the user would be asked about is not followed:
/// the model is told to fetch it itself, and that call is asked about.
fn judge_hop(fetching: &Fetching, allowed: &mut Vec<String>, from: &Target, next: &Target) -> Result<(), ToolError> {
    if allowed.contains(&next.host) {
        return Ok(());
    }
    let Some(request) = PermissionRequest::for_host(&next.host) else {
        return Err(ToolError::Tell(format!("{} redirects to {}, which names no host", from.url, next.url)));
    };
    match permissions::decide(&request, fetching.mode, &fetching.rules) {
        Decision::Allow => {
            allowed.push(next.host.clone());
            Ok(())
        }
        Decision::Deny(why) => {
            Err(ToolError::Tell(format!("{} redirects to {}, which was not followed: {why}", from.url, next.url)))
        }
        Decision::Ask(_) => Err(ToolError::Tell(format!(
            "{} redirects to {}, on `{}`, a host this call was not allowed to reach, so it was not followed; \
             to read it, fetch that URL itself (the user may be asked)",
            from.url, next.url, next.host
        ))),
    }
}

/// Sends the request for `target` to exactly `addresses`.
async fn send(target: &Target, addresses: &[std::net::SocketAddr]) -> Result<reqwest::Response, ToolError> {
    if target.url.scheme() == "https" {
        // The roots are read at the first handshake; read them off the async threads.
        let _ = tokio::task::spawn_blocking(crate::net::load_roots).await;
    }
    let mut builder = crate::net::client_builder()
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(Duration::from_secs(10))
        .user_agent(concat!("cairn/", env!("CARGO_PKG_VERSION"), " (fetch tool)"));
    if let Some(url::Host::Domain(name)) = target.url.host() {
        builder = builder.resolve_to_addrs(name, addresses);
    }
    let client =
        builder.build().map_err(|err| ToolError::Tell(format!("cannot fetch {}: {}", target.url, why(&err))))?;
    client
        .get(target.url.clone())
        .header(ACCEPT, ACCEPTED)
        .send()
        .await
        .map_err(|err| ToolError::Tell(format!("cannot fetch {}: {}", target.url, why(&err))))
}

/// An error with its causes, which reqwest's own message leaves out ("connection refused",
/// "certificate not trusted").
pub(super) fn why(err: &(dyn std::error::Error + 'static)) -> String {
    let mut said = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_said = cause.to_string();
        if !said.contains(&cause_said) {
            said = format!("{said}: {cause_said}");
        }
        source = cause.source();
    }
    said
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::{Action, Mode, Permission, Rule, Scope};

    fn target(url: &str) -> Target {
        target::parse(url).unwrap()
    }

    fn fetching(mode: Mode, rules: &[(&str, Action)]) -> Fetching {
        let rules = rules
            .iter()
            .map(|(pattern, action)| Rule::new(Permission::Fetch, pattern, *action, Scope::Session))
            .collect();
        Fetching { mode, rules, ..Fetching::default() }
    }

    #[test]
    fn a_redirect_to_another_host_is_followed_only_where_a_rule_or_bypass_allows_it() {
        let from = target("https://docs.example.test/a");
        let same = target("https://docs.example.test/b");
        let other = target("https://api.example.test/c");
        let evil = target("https://evilexample.test/");
        let rules = fetching(Mode::Ask, &[("*.example.test", Action::Allow)]);
        let mut allowed = vec![from.host.clone()];
        assert!(judge_hop(&fetching(Mode::Ask, &[]), &mut allowed, &from, &same).is_ok(), "the same host");
        assert!(judge_hop(&rules, &mut allowed, &from, &other).is_ok());
        assert!(allowed.contains(&other.host));
        let Err(ToolError::Tell(why)) = judge_hop(&rules, &mut allowed, &from, &evil) else { panic!() };
        assert!(why.contains("not allowed to reach") && why.contains("fetch that URL itself"), "{why}");
        for mode in [Mode::AcceptEdits, Mode::ReadOnly] {
            let mut allowed = vec![from.host.clone()];
            assert!(judge_hop(&fetching(mode, &[]), &mut allowed, &from, &other).is_err(), "{mode:?}");
        }
        let mut allowed = vec![from.host.clone()];
        assert!(judge_hop(&fetching(Mode::Bypass, &[]), &mut allowed, &from, &evil).is_ok());
    }

    #[test]
    fn a_rejected_host_is_never_reached_by_a_redirect_even_in_bypass() {
        let from = target("https://docs.example.test/a");
        let evil = target("https://evil.test/");
        let bypass = fetching(Mode::Bypass, &[("evil.test", Action::Deny)]);
        let mut allowed = vec![from.host.clone()];
        let Err(ToolError::Tell(why)) = judge_hop(&bypass, &mut allowed, &from, &evil) else { panic!() };
        assert!(why.contains("a remembered rule rejects fetches from `evil.test`"), "{why}");
    }
}
