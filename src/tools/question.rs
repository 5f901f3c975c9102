//! `question`: the model asks the user something it cannot decide alone, with answers to choose
//! from, a typed answer, or both, and waits for the reply.
//!
//! How the question is shown is the editor's business ([`super::host::Questions::ask`]): a form where the client
//! takes elicitation, else the choices as the options of a permission question. With nobody to
//! ask (a headless run) the call fails with what the model should do instead. A reply is read
//! back into words the model acts on; declining and dismissing are answers too, not failures.
//! The call runs alone ([`Access::Other`]) and waits up to a day, the turn's clock stopped
//! meanwhile (`UserWait`).

use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::host::{Choice, Question, Reply};
use super::{Access, Tool, ToolContext, ToolError, ToolOutcome, Workspace};
use crate::history::{ToolContent, ToolKind};
use crate::permissions::PermissionRequest;

/// Most choices one question offers: more do not fit a form or a permission prompt.
const MAX_CHOICES: usize = 8;
/// How long a question waits for its answer: people take their time (the turn's own time limit
/// stops meanwhile).
const WAIT: Duration = Duration::from_secs(24 * 60 * 60);

pub struct AskUser;

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionArgs {
    /// The question, as the user will read it: one question, with the context needed to answer.
    pub question: String,
    /// Answers the user may pick from (at most 8); leave out to ask for a typed answer.
    #[serde(default)]
    #[schemars(length(max = 8))]
    pub options: Vec<QuestionOption>,
    /// Whether the user may type an answer of their own besides the options. Defaults to true.
    #[serde(default)]
    pub allow_other: Option<bool>,
}

#[derive(Clone, Debug, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct QuestionOption {
    /// A short answer, as shown on its button.
    pub label: String,
    /// What choosing it means, if the label does not say.
    #[serde(default)]
    pub description: Option<String>,
}

const NOBODY: &str = "Nobody can answer questions in this run: it has no user at hand (a headless or scripted run). \
     Do not ask again. Choose what is most reasonable yourself, say which assumption you made, and go on; \
     if you cannot go on without an answer, end your turn with the question in your reply.";

#[async_trait::async_trait]
impl Tool for AskUser {
    type Args = QuestionArgs;

    fn name(&self) -> &str {
        "question"
    }

    fn description(&self) -> &str {
        "Ask the user a question and wait for the answer. Use it when a decision is the user's to make \
         (a choice between approaches, a missing requirement), not for what you can find out yourself. \
         Offer `options` when the answers are known, and keep the question short and self-contained."
    }

    fn kind(&self) -> ToolKind {
        ToolKind::Other
    }

    fn parameters(&self) -> Value {
        super::schema_of::<QuestionArgs>()
    }

    fn parse(&self, input: &str) -> Result<QuestionArgs, ToolError> {
        let args: QuestionArgs = super::registry::parse_args(self.name(), input, &|| self.parameters())?;
        question(&args)?;
        Ok(args)
    }

    /// Runs alone among its turn's calls (sub-agents side by side may each ask one).
    fn access(&self, _args: &QuestionArgs) -> Access {
        Access::Other
    }

    fn title(&self, args: &QuestionArgs, _workspace: &Workspace) -> String {
        args.question.trim().to_owned()
    }

    fn permission(&self, _args: &QuestionArgs, _workspace: &Workspace) -> Option<PermissionRequest> {
        None
    }

    fn timeout(&self, _args: &QuestionArgs, _default: Duration) -> Duration {
        WAIT
    }

    async fn run(&self, args: &QuestionArgs, ctx: &ToolContext) -> Result<ToolOutcome, ToolError> {
        let Some(user) = ctx.host.questions() else {
            return Err(ToolError::Tell(NOBODY.to_owned()));
        };
        let question = question(args)?;
        let _waiting = ctx.user_wait.hold();
        let reply = user.ask(&ctx.call_id, &question).await.map_err(|err| ToolError::Tell(err.0))?;
        Ok(outcome(&question, &reply))
    }
}

/// The question the arguments ask; `Err` tells the model what to fix.
fn question(args: &QuestionArgs) -> Result<Question, ToolError> {
    let text = args.question.trim();
    if text.is_empty() {
        return Err(ToolError::Tell("`question` is empty: write the question the user should answer.".into()));
    }
    if args.options.len() > MAX_CHOICES {
        return Err(ToolError::Tell(format!(
            "{} options is too many: offer at most {MAX_CHOICES}, or ask for a typed answer.",
            args.options.len()
        )));
    }
    let mut choices: Vec<Choice> = Vec::with_capacity(args.options.len());
    for option in &args.options {
        let label = option.label.trim();
        if label.is_empty() {
            return Err(ToolError::Tell("An option has an empty `label`: give every option a short answer.".into()));
        }
        if choices.iter().any(|choice| choice.label == label) {
            return Err(ToolError::Tell(format!("The option `{label}` is offered twice: make every label distinct.")));
        }
        let description = option.description.as_deref().map(str::trim).filter(|d| !d.is_empty());
        choices.push(Choice { label: label.to_owned(), description: description.map(str::to_owned) });
    }
    let typed = args.allow_other.unwrap_or(true);
    if choices.is_empty() && !typed {
        return Err(ToolError::Tell(
            "With `allow_other` false the user needs `options` to pick from: add them, or allow a typed answer.".into(),
        ));
    }
    Ok(Question { text: text.to_owned(), choices, typed })
}

/// What the model and the editor are told about the reply.
fn outcome(question: &Question, reply: &Reply) -> ToolOutcome {
    let (output, shown) = match reply {
        Reply::Answered { choice, text } => {
            let answer = match (choice, text) {
                (Some(choice), Some(text)) => format!("{choice} — {text}"),
                (Some(answer), None) | (None, Some(answer)) => answer.clone(),
                (None, None) => String::new(),
            };
            if answer.is_empty() {
                ("The user answered without choosing or typing anything.".to_owned(), "(no answer)".to_owned())
            } else {
                (format!("The user answered: {answer}"), answer)
            }
        }
        Reply::Declined => (
            "The user declined to answer. Do not ask the same question again: go on with your best judgement, \
             or stop and say what you need."
                .to_owned(),
            "(declined)".to_owned(),
        ),
        Reply::Dismissed => (
            "The user dismissed the question without answering. Do not ask it again unprompted.".to_owned(),
            "(dismissed)".to_owned(),
        ),
    };
    let content = vec![ToolContent::Text { text: format!("{}\n→ {shown}", question.text) }];
    ToolOutcome { output, content, ..ToolOutcome::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(json: &str) -> Result<QuestionArgs, ToolError> {
        AskUser.parse(json)
    }

    #[test]
    fn a_question_needs_text_distinct_labels_and_something_to_answer_with() {
        let empty = args(r#"{"question": "  "}"#).unwrap_err();
        assert!(empty.to_string().contains("`question` is empty"), "{empty}");
        let twice = args(r#"{"question": "Which?", "options": [{"label": "a"}, {"label": " a "}]}"#).unwrap_err();
        assert!(twice.to_string().contains("`a` is offered twice"), "{twice}");
        let blank = args(r#"{"question": "Which?", "options": [{"label": ""}]}"#).unwrap_err();
        assert!(blank.to_string().contains("empty `label`"), "{blank}");
        let nothing = args(r#"{"question": "Which?", "allow_other": false}"#).unwrap_err();
        assert!(nothing.to_string().contains("needs `options`"), "{nothing}");
        let many: Vec<String> = (0..9).map(|i| format!(r#"{{"label": "o{i}"}}"#)).collect();
        let many = args(&format!(r#"{{"question": "Which?", "options": [{}]}}"#, many.join(","))).unwrap_err();
        assert!(many.to_string().contains("at most 8"), "{many}");
        let unknown = args(r#"{"question": "Which?", "choices": ["a"]}"#).unwrap_err();
        assert!(unknown.to_string().contains("choices"), "{unknown}");
    }

    #[test]
    fn a_question_keeps_its_choices_in_order_trimmed() {
        let parsed = args(
            r#"{"question": " Which database? ", "options": [{"label": " SQLite ", "description": "embedded"}, {"label": "Postgres", "description": " "}], "allow_other": false}"#,
        )
        .unwrap();
        let asked = question(&parsed).unwrap();
        assert_eq!(asked.text, "Which database?");
        assert_eq!(
            asked.choices,
            [
                Choice { label: "SQLite".into(), description: Some("embedded".into()) },
                Choice { label: "Postgres".into(), description: None },
            ]
        );
        assert!(!asked.typed);
        assert!(question(&args(r#"{"question": "Name?"}"#).unwrap()).unwrap().typed);
    }

    #[test]
    fn every_reply_becomes_words_the_model_acts_on() {
        let asked = Question { text: "Which?".into(), choices: Vec::new(), typed: true };
        let both = Reply::Answered { choice: Some("SQLite".into()), text: Some("in memory".into()) };
        assert_eq!(outcome(&asked, &both).output, "The user answered: SQLite — in memory");
        assert_eq!(outcome(&asked, &both).content, [ToolContent::Text { text: "Which?\n→ SQLite — in memory".into() }]);
        let none = Reply::Answered { choice: None, text: None };
        assert!(outcome(&asked, &none).output.contains("without choosing or typing"));
        assert!(outcome(&asked, &Reply::Declined).output.starts_with("The user declined to answer."));
        assert!(outcome(&asked, &Reply::Dismissed).output.starts_with("The user dismissed the question"));
        assert!(!outcome(&asked, &Reply::Declined).failed);
    }
}
