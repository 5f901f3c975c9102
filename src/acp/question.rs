//! A `question` as the editor shows it, and the editor's reply read back.
//!
//! A client that advertised elicitation forms gets `elicitation/create` (sent and read through
//! `form`, as every form cairn asks): a form on the question's
//! tool call, with the choices as a single-select field (`answer`) and, when a typed answer is
//! allowed, a free-text field (`other`; a question without choices has only `answer`, as text).
//! Any other client gets the choices as the options of a `session/request_permission` on the
//! call's card, plus one to decline; a question that needs typing cannot be asked that way, and
//! the model is told to ask in its reply instead. A reply that names an option the question did
//! not offer, or a field of the wrong type, is refused with what the editor sent.

use agent_client_protocol_schema::v1 as acp;

use super::form::{self, Filled};
use crate::tools::host::{HostError, Question, Reply};

/// The form field holding the choice (or the typed answer, for a question without choices).
const ANSWER: &str = "answer";
/// The form field for a typed answer beside the choices.
const OTHER: &str = "other";
/// The permission option that declines to answer, and its name.
const DECLINE: &str = "decline";
const DECLINE_NAME: &str = "Don't answer";
/// The longest typed answer kept; the rest is cut, saying so.
const MAX_ANSWER: usize = 64 * 1024;
/// How much of an unexpected value an error quotes.
const MAX_QUOTED: usize = 200;

/// The `elicitation/create` form for `question`, on the card of `call_id`.
pub fn form(session: &acp::SessionId, call_id: &str, question: &Question) -> acp::CreateElicitationRequest {
    let schema = if question.choices.is_empty() {
        acp::ElicitationSchema::new().property(ANSWER, acp::StringPropertySchema::new().title("Answer"), true)
    } else {
        let options: Vec<acp::EnumOption> = question
            .choices
            .iter()
            .map(|choice| acp::EnumOption::new(&choice.label, &choice.label).description(choice.description.clone()))
            .collect();
        let choices = acp::StringPropertySchema::new().title("Answer").one_of(options);
        let schema = acp::ElicitationSchema::new().property(ANSWER, choices, !question.typed);
        if question.typed {
            let other = acp::StringPropertySchema::new()
                .title("Something else")
                .description("Type an answer of your own instead.".to_owned());
            schema.property(OTHER, other, false)
        } else {
            schema
        }
    };
    let scope = acp::ElicitationSessionScope::new(session.clone()).tool_call_id(acp::ToolCallId::new(call_id));
    acp::CreateElicitationRequest::new(acp::ElicitationFormMode::new(scope, schema), question.text.clone())
}

/// The reply in the editor's answer to [`form`].
pub fn form_reply(question: &Question, response: acp::CreateElicitationResponse) -> Result<Reply, HostError> {
    let content = match form::filled(response, false)? {
        Filled::Accepted(content) => content,
        Filled::Declined => return Ok(Reply::Declined),
        Filled::Cancelled => return Ok(Reply::Dismissed),
    };
    let field = |name: &str| -> Result<Option<String>, HostError> {
        let text = form::text(&content, name, false)?;
        Ok(text.map(|text| form::clip(&text, MAX_ANSWER, " [the answer was cut at 64 KiB]")))
    };
    let answer = field(ANSWER)?;
    if question.choices.is_empty() {
        return Ok(Reply::Answered { choice: None, text: answer });
    }
    let text = if question.typed { field(OTHER)? } else { None };
    let choice = match answer {
        Some(answer) if question.choices.iter().any(|choice| choice.label == answer) => Some(answer),
        Some(answer) => {
            let offered: Vec<&str> = question.choices.iter().map(|choice| choice.label.as_str()).collect();
            return Err(HostError(format!(
                "the editor answered `{}`, which is not one of the choices offered ({})",
                form::clip(&answer, MAX_QUOTED, "…"),
                offered.join(", ")
            )));
        }
        None => None,
    };
    Ok(Reply::Answered { choice, text })
}

/// The `session/request_permission` that offers `question`'s choices on the card of `call_id`,
/// for a client without elicitation forms; `Err` when the question needs a typed answer.
pub fn as_permission(
    session: &acp::SessionId,
    call_id: &str,
    question: &Question,
) -> Result<acp::RequestPermissionRequest, HostError> {
    if question.choices.is_empty() {
        return Err(HostError(
            "this editor cannot take a typed answer (it offers no elicitation forms). Ask the question in your \
             reply instead and end your turn; the user answers with their next prompt."
                .to_owned(),
        ));
    }
    let mut options: Vec<acp::PermissionOption> = question
        .choices
        .iter()
        .enumerate()
        .map(|(index, choice)| {
            let name = format!("{}. {}", index + 1, choice.label);
            acp::PermissionOption::new(format!("choice_{index}"), name, acp::PermissionOptionKind::AllowOnce)
        })
        .collect();
    options.push(acp::PermissionOption::new(DECLINE, DECLINE_NAME, acp::PermissionOptionKind::RejectOnce));
    let fields = acp::ToolCallUpdateFields::new()
        .title(question.text.clone())
        .content(vec![acp::ToolCallContent::from(spelled_out(question))]);
    let card = acp::ToolCallUpdate::new(call_id.to_owned(), fields);
    Ok(acp::RequestPermissionRequest::new(session.clone(), card, options))
}

/// The question, its numbered answers and what the options mean, as the card's text: some
/// clients name permission options by their kind (every answer an "Accept", and only the last
/// one can be picked), so the card itself says which option is which.
fn spelled_out(question: &Question) -> String {
    use std::fmt::Write as _;
    let mut text = question.text.clone();
    text.push('\n');
    for (index, choice) in question.choices.iter().enumerate() {
        let _ = write!(text, "\n{}. {}", index + 1, choice.label);
        if let Some(description) = choice.description.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
            let _ = write!(text, " — {description}");
        }
    }
    let _ = write!(
        text,
        "\n\nAnswer with the option of the same number, or \"{DECLINE_NAME}\" to leave the choice to \
         the agent (if the editor cannot pick an option by its number, choose \"{DECLINE_NAME}\" and \
         give your answer in your next message)."
    );
    text
}

/// The reply in the editor's answer to [`as_permission`].
pub fn permission_reply(question: &Question, response: acp::RequestPermissionResponse) -> Result<Reply, HostError> {
    let selected = match response.outcome {
        acp::RequestPermissionOutcome::Selected(selected) => selected.option_id.0.to_string(),
        acp::RequestPermissionOutcome::Cancelled => return Ok(Reply::Dismissed),
        _ => return Ok(Reply::Dismissed),
    };
    if selected == DECLINE {
        return Ok(Reply::Declined);
    }
    let chosen = selected
        .strip_prefix("choice_")
        .and_then(|index| index.parse::<usize>().ok())
        .and_then(|index| question.choices.get(index));
    match chosen {
        Some(choice) => Ok(Reply::Answered { choice: Some(choice.label.clone()), text: None }),
        None => Err(HostError(format!(
            "the editor answered with the option `{selected}`, which the question did not offer"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::tools::host::Choice;

    fn which(typed: bool) -> Question {
        let choice = |label: &str| Choice { label: label.into(), description: None };
        Question { text: "Which database?".into(), choices: vec![choice("SQLite"), choice("Postgres")], typed }
    }

    fn session() -> acp::SessionId {
        acp::SessionId::new("ses_1")
    }

    fn answered(content: Value) -> acp::CreateElicitationResponse {
        serde_json::from_value(json!({"action": "accept", "content": content})).unwrap()
    }

    #[test]
    fn the_form_offers_the_choices_and_a_typed_answer_on_the_calls_card() {
        let request = serde_json::to_value(form(&session(), "call_1", &which(true))).unwrap();
        assert_eq!(request["mode"], "form");
        assert_eq!(request["sessionId"], "ses_1");
        assert_eq!(request["toolCallId"], "call_1");
        assert_eq!(request["message"], "Which database?");
        let schema = &request["requestedSchema"];
        assert_eq!(schema["properties"]["answer"]["oneOf"][1], json!({"const": "Postgres", "title": "Postgres"}));
        assert_eq!(schema["properties"]["other"]["type"], "string");
        assert_eq!(schema.get("required"), None, "either field may answer");

        let only_choices = serde_json::to_value(form(&session(), "call_1", &which(false))).unwrap();
        assert_eq!(only_choices["requestedSchema"]["required"], json!(["answer"]));
        assert_eq!(only_choices["requestedSchema"]["properties"].get("other"), None);

        let typed = Question { text: "Name?".into(), choices: Vec::new(), typed: true };
        let typed = serde_json::to_value(form(&session(), "call_1", &typed)).unwrap();
        assert_eq!(typed["requestedSchema"]["properties"]["answer"], json!({"type": "string", "title": "Answer"}));
    }

    #[test]
    fn a_form_reply_is_a_choice_a_typed_answer_a_refusal_or_an_error_naming_what_came() {
        let question = which(true);
        let both = form_reply(&question, answered(json!({"answer": "SQLite", "other": " in memory "}))).unwrap();
        assert_eq!(both, Reply::Answered { choice: Some("SQLite".into()), text: Some("in memory".into()) });
        let declined = serde_json::from_value(json!({"action": "decline"})).unwrap();
        assert_eq!(form_reply(&question, declined).unwrap(), Reply::Declined);
        let cancelled = serde_json::from_value(json!({"action": "cancel"})).unwrap();
        assert_eq!(form_reply(&question, cancelled).unwrap(), Reply::Dismissed);

        let unknown = form_reply(&question, answered(json!({"answer": "MySQL"}))).unwrap_err();
        assert!(unknown.0.contains("`MySQL`, which is not one of the choices offered (SQLite, Postgres)"), "{unknown}");
        let number = form_reply(&question, answered(json!({"answer": 3}))).unwrap_err();
        assert!(number.0.contains("field `answer` with 3"), "{number}");
        let odd = serde_json::from_value(json!({"action": "later"})).unwrap();
        assert!(form_reply(&question, odd).unwrap_err().0.contains("unknown action"));
    }

    #[test]
    fn a_huge_reply_is_cut_with_a_note_and_an_unknown_one_quoted_short() {
        let question = which(true);
        let typed = "é".repeat(40 * 1024);
        let Reply::Answered { text: Some(text), .. } =
            form_reply(&question, answered(json!({"other": typed}))).unwrap()
        else {
            panic!("a typed answer")
        };
        assert!(text.len() < 64 * 1024 + 64, "{}", text.len());
        assert!(text.ends_with(" [the answer was cut at 64 KiB]"));
        let unknown = form_reply(&question, answered(json!({"answer": "x".repeat(10_000)}))).unwrap_err();
        assert!(unknown.0.len() < 400, "{}", unknown.0.len());
    }

    #[test]
    fn without_forms_the_choices_become_permission_options_and_typing_is_refused() {
        let question = which(true);
        let request = serde_json::to_value(as_permission(&session(), "call_1", &question).unwrap()).unwrap();
        let ids: Vec<&str> =
            request["options"].as_array().unwrap().iter().map(|o| o["optionId"].as_str().unwrap()).collect();
        assert_eq!(ids, ["choice_0", "choice_1", "decline"]);
        let names: Vec<&str> =
            request["options"].as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["1. SQLite", "2. Postgres", "Don't answer"]);
        assert_eq!(request["toolCall"]["toolCallId"], "call_1");
        let shown = request["toolCall"]["content"][0]["content"]["text"].as_str().unwrap();
        assert!(shown.starts_with("Which database?\n\n1. SQLite\n2. Postgres\n\n"), "{shown}");
        assert!(shown.contains("\"Don't answer\" to leave the choice to the agent"), "{shown}");
        let pick = |id: &str| {
            let response = serde_json::from_value(json!({"outcome": {"outcome": "selected", "optionId": id}})).unwrap();
            permission_reply(&question, response)
        };
        assert_eq!(pick("choice_1").unwrap(), Reply::Answered { choice: Some("Postgres".into()), text: None });
        assert_eq!(pick("decline").unwrap(), Reply::Declined);
        assert!(pick("choice_7").unwrap_err().0.contains("`choice_7`, which the question did not offer"));
        assert!(pick("allow_once").is_err());

        let typed = Question { text: "Name?".into(), choices: Vec::new(), typed: true };
        let refused = as_permission(&session(), "call_1", &typed).unwrap_err();
        assert!(refused.0.contains("cannot take a typed answer"), "{refused}");
    }
}
