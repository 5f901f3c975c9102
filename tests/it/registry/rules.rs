//! The ACP Registry's rules for an entry directory (`<id>/agent.json` and `<id>/icon.svg`),
//! written here from what the registry's build enforces, so that they run offline.
//!
//! Read from `agentclientprotocol/registry` on GitHub: the build script
//! `.github/workflows/build_registry.py` at commit `9dd1b9d994db3e72683c7e958957a6fec09f98e1`
//! and the schema `agent.schema.json` at `172d5034b0aa7f91b24622ce4ee4459414e0e07e`, the newest
//! versions seen. Nothing of them is copied here; the wording of every message is ours. The
//! registry's CI runs the script with `jsonschema` installed and URL checks on. What it checks,
//! and what this module does with each:
//!
//! - the schema (draft-07, no `format` checks, as `jsonschema.validate` runs it): required
//!   fields, the `id` and `version` patterns, the known distribution kinds and platforms, no
//!   unknown fields in a distribution or a platform's target: all checked here;
//! - `id` equal to the directory's name; `version` whose first three dot-separated parts are
//!   digits; `archive` and `cmd` on every platform; no installer archives (`.deb`, `.dmg`, …):
//!   checked;
//! - builds for darwin, linux and windows: only a warning in the registry's build (an error in
//!   its January 2026 version), so a warning here;
//! - the version in a GitHub release URL (`/download/v1.2.3/`) equal to `version`, and no
//!   `/latest/`: checked;
//! - each archive URL answering over the network: needs the network, so only the part the script
//!   decides before any request is checked: `https`, and a host that is neither this machine nor
//!   a private address (the script also resolves the name); a bare file name fails here, as there;
//! - `npx` and `uvx` packages (their versions, their existence on npm and PyPI): cairn publishes
//!   none, so such a distribution is reported as unchecked, an error, until checks are added;
//! - `icon.svg` present, without `<!--`, well-formed XML whose root is `<svg>`, 16×16 by its
//!   `width`/`height` (units dropped) or else its `viewBox`, every `fill` and `stroke` (as
//!   attributes, in `style`, in a `<style>` element) `currentColor`, `none` or `inherit`, and
//!   `currentColor` used somewhere: checked;
//! - no other entry with the same `id`: a whole-registry check, not made here;
//! - the auth check of the registry's CI (started, the agent offers an `agent` or `terminal` auth
//!   method): not a rule of the entry's files; `tests/it/editors.rs` starts the entry's command
//!   and runs its terminal login method.
//!
//! The script stops at an entry's first failing stage; this reports every problem it finds.

use std::net::IpAddr;
use std::path::Path;

use serde_json::{Map, Value};

/// The platforms a binary distribution may name.
const PLATFORMS: [&str; 6] =
    ["darwin-aarch64", "darwin-x86_64", "linux-aarch64", "linux-x86_64", "windows-aarch64", "windows-x86_64"];

/// Operating systems the registry wants a build for (a warning when one is missing).
const OS_FAMILIES: [&str; 3] = ["darwin", "linux", "windows"];

/// Archive formats the registry refuses: installers, not archives.
const INSTALLERS: [&str; 6] = [".dmg", ".pkg", ".deb", ".rpm", ".msi", ".appimage"];

/// Values a `fill` or `stroke` may have: the icon takes the client's colour.
const UNCOLOURED: [&str; 3] = ["currentcolor", "none", "inherit"];

/// What the registry's build would say about one entry directory.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Any of these fails the registry's build.
    pub errors: Vec<String>,
    /// Printed by the build, which goes on.
    pub warnings: Vec<String>,
}

/// Checks the entry in `dir`, whose name is the registry's directory name for it.
pub fn check(dir: &Path) -> Verdict {
    let mut verdict = Verdict::default();
    let name = dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    match std::fs::read_to_string(dir.join("agent.json")) {
        Err(err) => verdict.errors.push(format!("cannot read agent.json: {err}")),
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Err(err) => verdict.errors.push(format!("agent.json is not JSON: {err}")),
            Ok(entry) => {
                schema(&entry, &mut verdict.errors);
                script(&entry, &name, &mut verdict);
            }
        },
    }
    match std::fs::read_to_string(dir.join("icon.svg")) {
        Err(err) => verdict.errors.push(format!("icon.svg is required: {err}")),
        Ok(svg) => icon(&svg, &mut verdict.errors),
    }
    verdict
}

/// The constraints of `agent.schema.json`.
fn schema(entry: &Value, errors: &mut Vec<String>) {
    let Some(entry) = entry.as_object() else {
        errors.push("schema: the entry is not an object".to_owned());
        return;
    };
    for field in ["id", "name", "version", "description", "distribution"] {
        if !entry.contains_key(field) {
            errors.push(format!("schema: `{field}` is required"));
        }
    }
    if let Some(id) = string(entry, "id", "", errors) {
        let mut chars = id.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
        if !first_ok || !chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
            errors.push(format!("schema: `id` {id:?} is not a lowercase letter then lowercase letters, digits, `-`"));
        }
    }
    for field in ["name", "description"] {
        if string(entry, field, "", errors).is_some_and(str::is_empty) {
            errors.push(format!("schema: `{field}` is empty"));
        }
    }
    if let Some(version) = string(entry, "version", "", errors) {
        let parts: Vec<&str> = version.splitn(3, '.').collect();
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        let third = parts.get(2).map(|part| part.split(|c: char| !c.is_ascii_digit()).next().unwrap_or(""));
        if parts.len() < 3 || !digits(parts[0]) || !digits(parts[1]) || !third.is_some_and(digits) {
            errors.push(format!("schema: `version` {version:?} does not start with N.N.N"));
        }
    }
    for field in ["repository", "website", "license", "license_url", "icon"] {
        string(entry, field, "", errors);
    }
    if let Some(authors) = entry.get("authors") {
        strings(authors, "authors", errors);
    }
    let Some(distribution) = entry.get("distribution") else { return };
    let Some(distribution) = object(distribution, "distribution", errors) else { return };
    if distribution.is_empty() {
        errors.push("schema: `distribution` names no way to install".to_owned());
    }
    for (kind, value) in distribution {
        let at = format!("distribution.{kind}");
        match kind.as_str() {
            "binary" => binary(value, &at, errors),
            "npx" | "uvx" => target(value, &at, &["package", "args", "env"], &["package"], errors),
            _ => errors.push(format!("schema: `{at}` is not a distribution kind (binary, npx, uvx)")),
        }
    }
}

fn binary(value: &Value, at: &str, errors: &mut Vec<String>) {
    let Some(platforms) = object(value, at, errors) else { return };
    if platforms.is_empty() {
        errors.push(format!("schema: `{at}` names no platform"));
    }
    for (platform, value) in platforms {
        if !PLATFORMS.contains(&platform.as_str()) {
            errors.push(format!("schema: `{at}.{platform}` is not a platform ({})", PLATFORMS.join(", ")));
        }
        let fields = ["archive", "sha256", "cmd", "args", "env"];
        target(value, &format!("{at}.{platform}"), &fields, &["archive", "cmd"], errors);
    }
}

/// One platform's target or one package distribution: known fields, the required ones, types.
fn target(value: &Value, at: &str, fields: &[&str], required: &[&str], errors: &mut Vec<String>) {
    let Some(target) = object(value, at, errors) else { return };
    for field in required {
        if !target.contains_key(*field) {
            errors.push(format!("schema: `{at}.{field}` is required"));
        }
    }
    for (field, value) in target {
        let here = format!("{at}.{field}");
        match field.as_str() {
            _ if !fields.contains(&field.as_str()) => errors.push(format!("schema: `{here}` is not a known field")),
            "args" => strings(value, &here, errors),
            "env" => {
                if let Some(env) = object(value, &here, errors) {
                    for (name, value) in env {
                        if !value.is_string() {
                            errors.push(format!("schema: `{here}.{name}` is not a string"));
                        }
                    }
                }
            }
            _ => {
                let Some(text) = string(target, field, &format!("{at}."), errors) else { continue };
                if field == "package" && text.is_empty() {
                    errors.push(format!("schema: `{here}` is empty"));
                }
                if field == "sha256" && !(text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit())) {
                    errors.push(format!("schema: `{here}` is not 64 hex digits"));
                }
            }
        }
    }
}

/// `object[field]` as a string, when present; an error when it is there but no string.
fn string<'a>(object: &'a Map<String, Value>, field: &str, prefix: &str, errors: &mut Vec<String>) -> Option<&'a str> {
    let value = object.get(field)?;
    let text = value.as_str();
    if text.is_none() {
        errors.push(format!("schema: `{prefix}{field}` is not a string"));
    }
    text
}

fn strings(value: &Value, at: &str, errors: &mut Vec<String>) {
    if !value.as_array().is_some_and(|items| items.iter().all(Value::is_string)) {
        errors.push(format!("schema: `{at}` is not a list of strings"));
    }
}

fn object<'a>(value: &'a Value, at: &str, errors: &mut Vec<String>) -> Option<&'a Map<String, Value>> {
    let object = value.as_object();
    if object.is_none() {
        errors.push(format!("schema: `{at}` is not an object"));
    }
    object
}

/// The build script's own checks beyond the schema, the icon aside.
fn script(entry: &Value, directory: &str, verdict: &mut Verdict) {
    let errors = &mut verdict.errors;
    if let Some(id) = entry["id"].as_str().filter(|id| *id != directory) {
        errors.push(format!("`id` {id:?} is not the directory's name {directory:?}"));
    }
    let version = entry["version"].as_str();
    let parts: Vec<&str> = version.map(|version| version.split('.').collect()).unwrap_or_default();
    let digits = |part: &&str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
    if let Some(version) = version.filter(|_| parts.len() < 3 || !parts[..3].iter().all(digits)) {
        errors.push(format!("`version` {version:?} is not N.N.N: its first three parts are not all digits"));
    }
    let version = version.unwrap_or_default();
    for kind in ["npx", "uvx"] {
        if entry["distribution"].get(kind).is_some() {
            errors
                .push(format!("an `{kind}` distribution: these rules do not check one yet (its version, its package)"));
        }
    }
    let Some(platforms) = entry["distribution"]["binary"].as_object() else { return };
    let families: Vec<&str> =
        platforms.keys().filter(|p| PLATFORMS.contains(&p.as_str())).filter_map(|p| p.split('-').next()).collect();
    let missing: Vec<&str> = OS_FAMILIES.into_iter().filter(|os| !families.contains(os)).collect();
    if !missing.is_empty() {
        verdict.warnings.push(format!("no binary build for {}", missing.join(", ")));
    }
    for (platform, target) in platforms {
        let Some(archive) = target["archive"].as_str() else { continue };
        let lower = archive.to_lowercase();
        if let Some(installer) = INSTALLERS.iter().find(|ext| lower.ends_with(*ext)) {
            errors.push(format!("{platform}: an `{installer}` installer is not an archive the registry takes"));
        }
        if archive.contains("/latest/") {
            errors.push(format!("{platform}: the archive URL names `/latest/`, not a version"));
        } else if let Some(named) = release_version(archive).filter(|named| named != version) {
            errors.push(format!("{platform}: the archive URL names version {named}, the entry {version}"));
        }
        if let Err(why) = public_https(archive) {
            errors.push(format!("{platform}: the archive {archive:?} is not a public https URL ({why})"));
        }
    }
}

/// The version a release URL names (`…/download/v1.2/…` gives `1.2.0`): the first
/// `/download/` or `/releases/` followed by an optional `v`, digits and dots, and a `/`.
fn release_version(url: &str) -> Option<String> {
    let starts = url.match_indices("/download/").chain(url.match_indices("/releases/"));
    let mut starts: Vec<(usize, &str)> = starts.collect();
    starts.sort_unstable();
    starts.into_iter().find_map(|(at, marker)| {
        let rest = &url[at + marker.len()..];
        let rest = rest.strip_prefix('v').unwrap_or(rest);
        let end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
        if end == 0 || !rest[end..].starts_with('/') {
            return None;
        }
        let mut parts: Vec<&str> = rest[..end].split('.').collect();
        parts.resize(parts.len().max(3), "0");
        Some(parts[..3].join("."))
    })
}

/// What the registry decides about a URL before it requests it: `https`, a host, and not this
/// machine or a private network (the registry also resolves names; an address is judged here).
fn public_https(url: &str) -> Result<(), String> {
    let parsed = url::Url::parse(url).map_err(|err| err.to_string())?;
    if parsed.scheme() != "https" {
        return Err(format!("scheme {:?}", parsed.scheme()));
    }
    let host = match parsed.host() {
        None => return Err("no host".to_owned()),
        Some(url::Host::Domain(name)) => name.to_lowercase(),
        Some(url::Host::Ipv4(address)) => return public_address(IpAddr::V4(address)),
        Some(url::Host::Ipv6(address)) => return public_address(IpAddr::V6(address)),
    };
    if host == "localhost" || host == "localhost.localdomain" || host.ends_with(".localhost") {
        return Err(format!("host {host}"));
    }
    Ok(())
}

fn public_address(address: IpAddr) -> Result<(), String> {
    let local = match address {
        IpAddr::V4(v4) => v4.is_private() || v4.is_link_local() || v4.is_broadcast(),
        IpAddr::V6(v6) => v6.is_unique_local() || v6.is_unicast_link_local(),
    };
    if local || address.is_loopback() || address.is_multicast() || address.is_unspecified() {
        return Err(format!("address {address}"));
    }
    Ok(())
}

/// The icon rules.
fn icon(svg: &str, errors: &mut Vec<String>) {
    if svg.contains("<!--") {
        errors.push("icon.svg has a comment (`<!--`), which breaks the registry's MDX pages".to_owned());
    }
    let options = roxmltree::ParsingOptions { allow_dtd: true, ..roxmltree::ParsingOptions::default() };
    let document = match roxmltree::Document::parse_with_options(svg, options) {
        Ok(document) => document,
        Err(err) => return errors.push(format!("icon.svg is not well-formed XML: {err}")),
    };
    let root = document.root_element();
    if root.tag_name().name() != "svg" {
        return errors.push(format!("icon.svg's root is <{}>, not <svg>", root.tag_name().name()));
    }
    let length = |name: &str| {
        let text = root.attribute(name)?.trim();
        text.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%').parse::<f64>().ok()
    };
    let size = match (length("width"), length("height")) {
        (Some(width), Some(height)) => Some((width, height)),
        _ => root.attribute("viewBox").and_then(|viewbox| {
            let parts: Vec<&str> = viewbox.split_whitespace().collect();
            let [_, _, width, height] = parts[..] else { return None };
            Some((width.parse().ok()?, height.parse().ok()?))
        }),
    };
    let Some((width, height)) = size else {
        return errors.push("icon.svg has neither width and height nor a viewBox".to_owned());
    };
    if width != height {
        errors.push(format!("icon.svg is not square: {width}×{height}"));
    }
    if width != 16.0 || height != 16.0 {
        errors.push(format!("icon.svg is {width}×{height}, not 16×16"));
    }
    // Every paint the icon names, shown as written, with its value.
    let mut paints: Vec<(String, &str)> = Vec::new();
    for node in root.descendants().filter(roxmltree::Node::is_element) {
        for name in ["fill", "stroke"] {
            if let Some(value) = node.attribute(name) {
                paints.push((format!("{name}=\"{value}\""), value));
            }
        }
        for declaration in node.attribute("style").unwrap_or_default().split(';') {
            if let Some((name, value)) = declaration.split_once(':') {
                let name = name.trim().to_lowercase();
                if name == "fill" || name == "stroke" {
                    paints.push((format!("style=\"{name}: {}\"", value.trim()), value));
                }
            }
        }
        if node.tag_name().name() == "style" {
            for (name, value) in css_paint(node.text().unwrap_or_default()) {
                paints.push((format!("{name}: {value} in a <style>"), value));
            }
        }
    }
    let mut uses_current_colour = false;
    for (shown, value) in paints {
        let value = value.trim().to_lowercase();
        uses_current_colour |= value == "currentcolor";
        if !UNCOLOURED.contains(&value.as_str()) {
            errors.push(format!("icon.svg paints with a colour of its own: {shown}"));
        }
    }
    if !uses_current_colour {
        errors.push("icon.svg never uses currentColor, so it cannot take the client's colour".to_owned());
    }
}

/// Every `fill: X` and `stroke: X` in a style sheet: the property as a whole word, and the value
/// up to `;`, `}` or white space.
fn css_paint(css: &str) -> Vec<(&'static str, &str)> {
    let lower = css.to_ascii_lowercase();
    let mut found = Vec::new();
    for property in ["fill", "stroke"] {
        for (at, _) in lower.match_indices(property) {
            let word_start = css[..at].chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
            let after = css[at + property.len()..].trim_start();
            let Some(value) = after.strip_prefix(':').filter(|_| word_start) else { continue };
            let value = value.trim_start();
            let end = value.find(|c: char| c == ';' || c == '}' || c.is_whitespace()).unwrap_or(value.len());
            if end > 0 {
                found.push((property, &value[..end]));
            }
        }
    }
    found
}
