//! The answers a permission question offers and what each remembers: allow once, one "always
//! allow" (kept in the session or the project, as `[permissions] remember` says), reject, and
//! "always reject". An answer counts only if the question offered it: an id it did not offer
//! (an "always" of the other scope, an old client's id, anything made up) is a rejection, so no
//! answer can store a rule the user was not shown.

use crate::permissions::{self, Rule, Scope};
use crate::tools::host::{OptionKind, PermissionOption};

/// An answer a question offers, by its option id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Choice {
    AllowOnce,
    AllowSession,
    AllowProject,
    RejectOnce,
    RejectAlways,
}

impl Choice {
    const ALL: [Choice; 5] =
        [Choice::AllowOnce, Choice::AllowSession, Choice::AllowProject, Choice::RejectOnce, Choice::RejectAlways];

    fn id(self) -> &'static str {
        match self {
            Choice::AllowOnce => "allow_once",
            Choice::AllowSession => "allow_session",
            Choice::AllowProject => "allow_project",
            Choice::RejectOnce => "reject_once",
            Choice::RejectAlways => "reject_always",
        }
    }

    /// The answer `id` names, if the question offered it.
    pub(super) fn offered(id: &str, options: &[PermissionOption]) -> Option<Choice> {
        options
            .iter()
            .any(|option| option.id == id)
            .then(|| Choice::ALL.into_iter().find(|choice| choice.id() == id))
            .flatten()
    }

    fn offer(self, label: String) -> PermissionOption {
        let kind = match self {
            Choice::AllowOnce => OptionKind::AllowOnce,
            Choice::AllowSession | Choice::AllowProject => OptionKind::AllowAlways,
            Choice::RejectOnce => OptionKind::RejectOnce,
            Choice::RejectAlways => OptionKind::RejectAlways,
        };
        PermissionOption { id: self.id().into(), label, kind }
    }
}

/// Where `remember` keeps an "always allow": its answer and the words for it.
fn always(remember: Scope) -> (Choice, &'static str) {
    match remember {
        Scope::Project => (Choice::AllowProject, "in this project"),
        // A headless run has nobody to ask; were it asked, its answer would be the session's.
        Scope::Session | Scope::Run => (Choice::AllowSession, "in this session"),
    }
}

/// The choices of a question: "always" ones only for the rules that may be remembered, each
/// labelled with the rule's own description (the same words `/permissions` lists), and one
/// "always allow", kept where `remember` says (two options of the same kind would show alike in
/// clients that name options by kind).
pub(super) fn options(allow: Option<&Rule>, deny: Option<&Rule>, remember: Scope) -> Vec<PermissionOption> {
    let mut options = vec![Choice::AllowOnce.offer("Allow once".into())];
    if let Some(rule) = allow {
        let (choice, place) = always(remember);
        options.push(choice.offer(format!("Always allow {} {place}", permissions::describe_rule(rule))));
    }
    options.push(Choice::RejectOnce.offer("Reject".into()));
    if let Some(rule) = deny {
        options.push(Choice::RejectAlways.offer(format!("Always reject {}", permissions::describe_rule(rule))));
    }
    options
}

/// What the "always" options mean, for the question's card: some clients show options by their
/// kind alone ("Always accept"), so the card says what would be remembered, and where.
pub(super) fn meaning(allow: Option<&Rule>, deny: Option<&Rule>, remember: Scope) -> Option<String> {
    let mut lines = Vec::new();
    if let Some(rule) = allow {
        let what = permissions::describe_rule(rule);
        let line = match always(remember) {
            (Choice::AllowProject, place) => format!(
                "\"Always allow\" means: always allow {what} {place}, in every session in this directory. \
                 /permissions lists and revokes it."
            ),
            (_, place) => format!(
                "\"Always allow\" means: always allow {what} {place}. /permissions lists it; \
                 `/permissions project <n>` keeps it for every session in this project, `revoke <n>` forgets it."
            ),
        };
        lines.push(line);
    }
    if let Some(rule) = deny {
        let what = permissions::describe_rule(rule);
        lines.push(format!("\"Always reject\" means: always reject {what} in this session, in every mode."));
    }
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The rule an answer stores: `allow` (made for the session) kept where the answer says, or
/// `deny`; none for a one-time answer.
pub(super) fn remembered(choice: Choice, allow: Option<Rule>, deny: Option<Rule>) -> Option<Rule> {
    match choice {
        Choice::AllowOnce | Choice::RejectOnce => None,
        Choice::AllowSession => {
            allow.map(|rule| Rule::new(rule.permission, &rule.pattern, rule.action, Scope::Session))
        }
        Choice::AllowProject => {
            allow.map(|rule| Rule::new(rule.permission, &rule.pattern, rule.action, Scope::Project))
        }
        Choice::RejectAlways => deny,
    }
}

/// Whether an answer lets the call run.
pub(super) fn allows(choice: Choice) -> bool {
    match choice {
        Choice::AllowOnce | Choice::AllowSession | Choice::AllowProject => true,
        Choice::RejectOnce | Choice::RejectAlways => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::{Action, Permission};

    fn rule(action: Action) -> Rule {
        Rule::new(Permission::Bash, "cargo test", action, Scope::Session)
    }

    fn ids(options: &[PermissionOption]) -> Vec<&str> {
        options.iter().map(|option| &*option.id).collect()
    }

    #[test]
    fn one_always_allow_is_offered_where_the_user_keeps_them() {
        let (allow, deny) = (rule(Action::Allow), rule(Action::Deny));
        let session = options(Some(&allow), Some(&deny), Scope::Session);
        assert_eq!(ids(&session), ["allow_once", "allow_session", "reject_once", "reject_always"]);
        assert_eq!(session[1].label, "Always allow `cargo test` on files in this workspace in this session");
        let project = options(Some(&allow), Some(&deny), Scope::Project);
        assert_eq!(ids(&project), ["allow_once", "allow_project", "reject_once", "reject_always"]);
        assert_eq!(project[1].label, "Always allow `cargo test` on files in this workspace in this project");
        assert_eq!(ids(&options(None, None, Scope::Project)), ["allow_once", "reject_once"]);

        let said = meaning(Some(&allow), Some(&deny), Scope::Session).unwrap();
        assert!(
            said.starts_with(
                "\"Always allow\" means: always allow `cargo test` on files in this workspace in this session."
            ),
            "{said}"
        );
        assert!(said.contains("`/permissions project <n>`"), "{said}");
        assert!(said.contains("\"Always reject\" means: always reject `cargo test`, however it is run"), "{said}");
        let said = meaning(Some(&allow), None, Scope::Project).unwrap();
        assert!(said.contains("in this project, in every session in this directory"), "{said}");
        assert_eq!(meaning(None, None, Scope::Session), None);
    }

    #[test]
    fn an_answer_the_question_did_not_offer_is_no_answer() {
        let allow = rule(Action::Allow);
        let session = options(Some(&allow), None, Scope::Session);
        assert_eq!(Choice::offered("allow_session", &session), Some(Choice::AllowSession));
        for never in ["allow_project", "reject_always", "allow_always", "", "ALLOW_ONCE", "allow_session "] {
            assert_eq!(Choice::offered(never, &session), None, "{never:?}");
        }
        let project = options(Some(&allow), None, Scope::Project);
        assert_eq!(Choice::offered("allow_session", &project), None, "not the other scope either");
        assert_eq!(Choice::offered("allow_project", &project), Some(Choice::AllowProject));
        let without = options(None, None, Scope::Session);
        assert_eq!(Choice::offered("allow_session", &without), None, "no always where no rule may cover the call");
    }

    #[test]
    fn each_answer_stores_exactly_what_it_said() {
        let (allow, deny) = (rule(Action::Allow), rule(Action::Deny));
        let stored = |choice| remembered(choice, Some(allow.clone()), Some(deny.clone()));
        assert_eq!(stored(Choice::AllowSession).map(|r| r.source), Some(Scope::Session));
        assert_eq!(stored(Choice::AllowProject).map(|r| r.source), Some(Scope::Project));
        assert_eq!(stored(Choice::RejectAlways).map(|r| r.action), Some(Action::Deny));
        assert_eq!(stored(Choice::AllowOnce), None);
        assert_eq!(stored(Choice::RejectOnce), None);
        assert!(allows(Choice::AllowProject) && !allows(Choice::RejectAlways));
    }
}
