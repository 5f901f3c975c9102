//! Elicitation forms, the one way cairn has the user fill something in through the editor:
//! sending a form to a client that announced them (`elicitation/create`) and reading back what
//! it answered, the action first, then each text field. Used for the `question` tool
//! (`question`) and for an API key typed into the editor (`auth`).
//!
//! A client that announced forms but answers `elicitation/create` with method-not-found gets
//! `None`, so the caller can fall back to its other way. For a secret form nothing of the answer
//! is ever quoted back, not even in an error about its shape.

use std::collections::BTreeMap;

use agent_client_protocol_schema::v1 as acp;

use super::client::{decode, host_error};
use super::rpc::Peer;
use crate::tools::host::HostError;

/// How much of an unexpected value an error quotes.
const MAX_QUOTED: usize = 200;

/// What the user did with a form.
#[derive(Debug)]
pub enum Filled {
    /// Submitted it, with these fields.
    Accepted(BTreeMap<String, acp::ElicitationContentValue>),
    /// Said no.
    Declined,
    /// Closed it without an answer.
    Cancelled,
}

/// Sends `request` and waits for the answer: `Ok(None)` when the client does not serve forms
/// after all. `secret`: the form asks for something never to be quoted.
pub async fn send(
    peer: &Peer,
    request: &acp::CreateElicitationRequest,
    secret: bool,
) -> Result<Option<acp::CreateElicitationResponse>, HostError> {
    let method = acp::CLIENT_METHOD_NAMES.elicitation_create;
    match peer.request(method, request).await {
        Ok(response) if secret => {
            let response = if response.is_null() { serde_json::json!({}) } else { response };
            let read = serde_json::from_value(response);
            read.map(Some).map_err(|_| HostError(format!("the editor's answer to {method} could not be read")))
        }
        Ok(response) => decode(method, response).map(Some),
        // A client that announced forms but does not serve them still has the other ways.
        Err(err) if err.code == acp::ErrorCode::MethodNotFound => {
            tracing::debug!("the client announced elicitation forms but does not serve {method}");
            Ok(None)
        }
        Err(err) => Err(host_error(method, &err)),
    }
}

/// The action of `response`, with the fields when the form was submitted.
pub fn filled(response: acp::CreateElicitationResponse, secret: bool) -> Result<Filled, HostError> {
    match response.action {
        acp::ElicitationAction::Accept(accepted) => Ok(Filled::Accepted(accepted.content.unwrap_or_default())),
        acp::ElicitationAction::Decline => Ok(Filled::Declined),
        acp::ElicitationAction::Cancel => Ok(Filled::Cancelled),
        _ if secret => Err(HostError("the editor answered the form with an unknown action".to_owned())),
        other => {
            let shown = clip(&serde_json::to_string(&other).unwrap_or_default(), MAX_QUOTED, "…");
            Err(HostError(format!("the editor answered with an unknown action: {shown}")))
        }
    }
}

/// The text field `name` of a submitted form, trimmed; `None` when it is missing or blank, an
/// error naming the field when it is not text (quoting what came, unless `secret`).
pub fn text(
    content: &BTreeMap<String, acp::ElicitationContentValue>,
    name: &str,
    secret: bool,
) -> Result<Option<String>, HostError> {
    match content.get(name) {
        None => Ok(None),
        Some(acp::ElicitationContentValue::String(text)) => {
            let text = text.trim();
            Ok((!text.is_empty()).then(|| text.to_owned()))
        }
        Some(_) if secret => {
            Err(HostError(format!("the editor answered the field `{name}` with something other than text")))
        }
        Some(value) => {
            let shown = clip(&serde_json::to_string(value).unwrap_or_default(), MAX_QUOTED, "…");
            Err(HostError(format!("the editor answered the field `{name}` with {shown}, where text was asked")))
        }
    }
}

/// `text` cut to at most `max` bytes on a character boundary, with `more` after a cut.
pub fn clip(text: &str, max: usize, more: &str) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    format!("{}{more}", &text[..text.floor_char_boundary(max)])
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answered(content: serde_json::Value) -> acp::CreateElicitationResponse {
        serde_json::from_value(json!({"action": "accept", "content": content})).unwrap()
    }

    #[test]
    fn a_secret_forms_odd_answer_is_refused_without_quoting_it() {
        let Filled::Accepted(content) = filled(answered(json!({"key": 123456})), true).unwrap() else {
            panic!("accepted")
        };
        let err = text(&content, "key", true).unwrap_err();
        assert!(!err.0.contains("123456") && err.0.contains("`key`"), "{err}");
        let err = text(&content, "key", false).unwrap_err();
        assert!(err.0.contains("123456"), "an ordinary form says what came: {err}");

        let odd = serde_json::from_value(json!({"action": "submit", "key": "sk-secret"})).unwrap();
        let err = filled(odd, true).unwrap_err();
        assert!(!err.0.contains("sk-secret") && err.0.contains("unknown action"), "{err}");
    }

    #[test]
    fn blank_fields_are_no_answer_and_text_is_trimmed() {
        let Filled::Accepted(content) = filled(answered(json!({"a": "  x  ", "b": "   "})), false).unwrap() else {
            panic!("accepted")
        };
        assert_eq!(text(&content, "a", false).unwrap().as_deref(), Some("x"));
        assert_eq!(text(&content, "b", false).unwrap(), None);
        assert_eq!(text(&content, "c", false).unwrap(), None);
        let declined = serde_json::from_value(json!({"action": "decline"})).unwrap();
        assert!(matches!(filled(declined, true).unwrap(), Filled::Declined));
        let cancelled = serde_json::from_value(json!({"action": "cancel"})).unwrap();
        assert!(matches!(filled(cancelled, true).unwrap(), Filled::Cancelled));
    }
}
