//! Specs of whole sessions and project rules on both backends: an import is stored whole, with
//! its rollups, checkpoints and contents, or not at all; an export reads the parts as stored,
//! streamed text joined; a fork copies the visible messages under new ids; a project's rules
//! are kept once each, oldest first, until forgotten; and what `cairn store migrate` carries
//! besides: a row's owner and archived mark, tokens with their hashes and times.

use std::path::PathBuf;

use super::*;
use crate::history::{MessageMeta, Part};
use crate::history::{Role, Usage};
use crate::permissions::{Action, Permission, Rule, Scope};
use crate::tools::checkpoint::{Blob, By, Capture, State};

fn text(text: &str) -> Part {
    Part::Text { text: text.into() }
}

fn row_at(created_at: i64, updated_at: i64) -> SessionRow {
    let mut row = SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), created_at);
    row.updated_at = updated_at;
    row
}

fn import(row: &SessionRow, messages: Vec<Message>, checkpoints: Vec<Carried>, blobs: Vec<Blob>) -> Write {
    Write::ImportSession { row: Box::new(row.clone()), messages, checkpoints, blobs }
}

fn carried(path: &str, content: &str, created_at: i64) -> Carried {
    let state = State::File { hash: Digest::of(content.as_bytes()), size: content.len() as u64, executable: true };
    let entries = vec![Entry { path: PathBuf::from(path), state, stamp: 0 }];
    Carried {
        prompt: None,
        capture: Capture { by: By::Made, call_id: None, entries },
        restore: Some("#1".into()),
        created_at,
    }
}

on_both!(
    an_import_is_stored_whole_with_its_rollups_and_checkpoints_or_not_at_all,
    an_export_reads_the_parts_as_stored_with_streamed_text_joined,
    a_fork_copies_the_visible_messages_under_new_ids_and_names_its_parent,
    a_projects_rules_are_kept_once_oldest_first_until_forgotten,
    an_imported_row_keeps_its_owner_and_archive_and_a_copied_token_its_hash_and_times,
);

async fn an_import_is_stored_whole_with_its_rollups_and_checkpoints_or_not_at_all(pair: Pair) {
    let store = pair.a;
    let session = row_at(500, 1_000);
    let usage = Usage { input: 10, output: 5, ..Default::default() };
    let answer = MessageMeta { usage: Some(usage), cost: Some(0.25), ..MessageMeta::default() };
    let messages = vec![
        Message::new(Role::User, vec![text("hi")], MessageMeta::default()),
        Message::new(Role::Assistant, vec![text("hello"), text("again")], answer),
    ];
    let blobs = vec![Blob { hash: Digest::of(b"kept"), data: b"kept".to_vec() }];
    let write = import(&session, messages.clone(), vec![carried("x", "kept", 700)], blobs);
    store.commit(write).await.unwrap();
    assert_eq!(pair.b.messages(&session.id).await.unwrap(), messages);
    let stored = pair.b.session(&session.id).await.unwrap().unwrap();
    assert_eq!((stored.created_at, stored.updated_at), (500, 1_000), "the times are kept");
    assert!((stored.cost_usd - 0.25).abs() < 1e-9, "the cost is summed from the messages");
    let infos = pair.b.checkpoints(&session.id).await.unwrap();
    assert_eq!(infos.len(), 1);
    assert_eq!((infos[0].pending, infos[0].created_at, infos[0].restore.as_deref()), (false, 700, Some("#1")));
    assert_eq!(pair.b.file_blobs(vec![Digest::of(b"kept")]).await.unwrap().len(), 1);

    // A message id that is taken fails the whole import: no session is left half made.
    let clash = row_at(500, 1_000);
    assert!(store.commit(import(&clash, messages, Vec::new(), Vec::new())).await.is_err());
    assert_eq!(store.session(&clash.id).await.unwrap(), None);
    // So does a checkpoint naming content neither stored nor carried.
    let missing = row_at(500, 1_000);
    let hi = vec![Message::new(Role::User, vec![text("hi")], MessageMeta::default())];
    let err = store.commit(import(&missing, hi, vec![carried("y", "nowhere", 1)], Vec::new())).await.unwrap_err();
    assert!(err.to_string().contains("the content of y for the checkpoint was not stored"), "{err}");
    assert_eq!(store.session(&missing.id).await.unwrap(), None);
}

async fn an_export_reads_the_parts_as_stored_with_streamed_text_joined(pair: Pair) {
    let store = pair.a;
    let id = new_session(&store);
    let answer = Message::new(Role::Assistant, vec![text("first")], MessageMeta::default());
    let message_id = answer.id.clone();
    store.submit(Write::InsertMessage { session_id: id.clone(), message: answer }, None);
    let part = text("He");
    store.submit(Write::OpenPart { session_id: id.clone(), message_id: message_id.clone(), index: 1, part }, None);
    for delta in ["llo", ", ", "world"] {
        store.submit(Write::AppendPart { message_id: message_id.clone(), index: 1, delta: delta.into() }, None);
        store.flush().await.unwrap();
    }
    let hidden = user("hidden");
    let from = hidden.id.clone();
    store.submit(Write::InsertMessage { session_id: id.clone(), message: hidden }, None);
    store.commit(Write::HideFrom { session_id: id.clone(), from }).await.unwrap();

    let exported = pair.b.stored_messages(&id).await.unwrap();
    assert_eq!(exported.len(), 1, "the visible messages only");
    assert_eq!((exported[0].id.as_str(), exported[0].role.as_str()), (message_id.as_str(), "assistant"));
    let parts: Vec<&str> = exported[0].parts.iter().map(|part| part.get()).collect();
    assert_eq!(parts, [r#"{"type":"text","text":"first"}"#, r#"{"type":"text","text":"Hello, world"}"#]);
    assert_eq!(exported[0].meta.get(), "{}");
}

async fn a_fork_copies_the_visible_messages_under_new_ids_and_names_its_parent(pair: Pair) {
    let store = pair.a;
    let parent = new_session(&store);
    let usage = Usage { input: 7, output: 3, ..Default::default() };
    let answer = Message::new(
        Role::Assistant,
        vec![text("a"), text("b")],
        MessageMeta { usage: Some(usage), cost: Some(0.5), ..MessageMeta::default() },
    );
    let (question, rewound) = (user("q"), user("rewound"));
    let from = rewound.id.clone();
    for message in [question, answer, rewound] {
        store.submit(Write::InsertMessage { session_id: parent.clone(), message }, None);
    }
    store.commit(Write::HideFrom { session_id: parent.clone(), from }).await.unwrap();
    let (kept, value) = crate::settings::Setting::Thought(crate::llm::catalog::ThoughtLevel::High).kept();
    store.commit(Write::SetSessionSetting { id: parent.clone(), kept, value: value.clone() }).await.unwrap();

    let fork = SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), now_ms());
    store.commit(Write::ForkSession { row: Box::new(fork.clone()), parent: parent.clone() }).await.unwrap();
    let (original, copied) = (store.messages(&parent).await.unwrap(), pair.b.messages(&fork.id).await.unwrap());
    assert_eq!(copied.len(), 2, "the visible messages only");
    for (copy, original) in copied.iter().zip(&original) {
        assert_ne!(copy.id, original.id, "new ids");
        assert_eq!((&copy.parts, &copy.meta, copy.role), (&original.parts, &original.meta, original.role));
    }
    let row = pair.b.session(&fork.id).await.unwrap().unwrap();
    assert_eq!(row.parent_id.as_ref(), Some(&parent));
    assert_eq!(row.thought_level, Some(value), "the parent's settings come along");
    assert!((row.cost_usd - 0.5).abs() < 1e-9, "rollups from the copied messages: {}", row.cost_usd);
    assert_eq!(store.messages(&parent).await.unwrap(), original, "the parent is untouched");
}

async fn a_projects_rules_are_kept_once_oldest_first_until_forgotten(pair: Pair) {
    let store = pair.a;
    let rules: Vec<Rule> = Permission::ALL
        .into_iter()
        .map(|permission| Rule::new(permission, "mcp__fx__*", Action::Deny, Scope::Project))
        .collect();
    for rule in &rules {
        let add = || Write::AddProjectRule { project: "/w".into(), rule: rule.clone() };
        store.commit(add()).await.unwrap();
        // Remembered twice, kept once.
        store.commit(add()).await.unwrap();
    }
    let other = Rule::new(Permission::Bash, "ls", Action::Allow, Scope::Project);
    store.commit(Write::AddProjectRule { project: "/elsewhere".into(), rule: other.clone() }).await.unwrap();
    assert_eq!(pair.b.project_rules("/w").await.unwrap(), rules);
    store.commit(Write::RemoveProjectRule { project: "/w".into(), rule: rules[1].clone() }).await.unwrap();
    let left = pair.b.project_rules("/w").await.unwrap();
    assert_eq!(left.len(), rules.len() - 1);
    assert!(!left.contains(&rules[1]));
    assert_eq!(pair.b.project_rules("/elsewhere").await.unwrap(), std::slice::from_ref(&other));
    assert!(pair.b.project_rules("/nowhere").await.unwrap().is_empty());
    let every = pair.b.all_project_rules().await.unwrap();
    let mut expected: Vec<(String, Rule)> = left.into_iter().map(|rule| ("/w".to_owned(), rule)).collect();
    expected.push(("/elsewhere".into(), other));
    assert_eq!(every, expected, "every project's rules, oldest first");
}

/// What `cairn store migrate` carries besides the messages: an imported row keeps its owner,
/// archived mark, parent, sub-agent, a client's title and a cost larger than its messages'; a copied token keeps its hash, principal and times,
/// revoked or not, and copying one already stored changes nothing.
async fn an_imported_row_keeps_its_owner_and_archive_and_a_copied_token_its_hash_and_times(pair: Pair) {
    let store = pair.a;
    let mut session = row_at(500, 1_000);
    (session.owner, session.archived_at, session.subagent) = (Some("alice".into()), Some(900), Some("task".into()));
    // What it cost beyond its messages' (a rewound session's) is kept too.
    (session.parent_id, session.cost_usd) = (Some(SessionId::generate()), 3.5);
    (session.title, session.title_by_client) = (Some("the client's".into()), true);
    store.commit(import(&session, Vec::new(), Vec::new(), Vec::new())).await.unwrap();
    let stored = pair.b.session(&session.id).await.unwrap().unwrap();
    assert_eq!(stored, session);
    let model = Write::SetSessionTitle { id: session.id.clone(), title: "the model's".into(), by: TitleBy::Model };
    assert_eq!(store.commit(model).await, Err(StoreError::TitleKept(session.id.clone())), "the client's title stands");

    let row = |id: &str, created_at, revoked_at| TokenRow {
        id: id.into(),
        principal: "alice".into(),
        created_at,
        revoked_at,
    };
    let (live, revoked) = (row("tok_live", 42, None), row("tok_gone", 43, Some(99)));
    store.commit(Write::CopyToken { row: live.clone(), hash: [1; 32] }).await.unwrap();
    store.commit(Write::CopyToken { row: revoked.clone(), hash: [2; 32] }).await.unwrap();
    let again = TokenRow { principal: "mallory".into(), ..live.clone() };
    store.commit(Write::CopyToken { row: again, hash: [3; 32] }).await.unwrap();
    store.commit(Write::CopyToken { row: row("tok_other", 44, None), hash: [1; 32] }).await.unwrap();
    assert_eq!(pair.b.tokens_with_hashes().await.unwrap(), [(live.clone(), [1; 32]), (revoked, [2; 32])]);
    let check = pair.b.token_check().unwrap();
    assert_eq!(check.find(&[1; 32]).unwrap(), Some(live));
    assert!(check.find(&[2; 32]).unwrap().unwrap().revoked_at.is_some());
}

/// A project rule row this version cannot read (a newer cairn's permission, a damaged action)
/// stands in as an unreadable rule, never guessed, and revoking the stand-in removes that row
/// only. SQLite's twin is `sqlite::tests`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_unreadable_project_rule_stands_in_until_its_own_row_is_revoked() {
    let (pair, url) = postgres_with_url().await;
    let kept = Rule::new(Permission::Tool, "mcp__github__*", Action::Allow, Scope::Project);
    pair.a.commit(Write::AddProjectRule { project: "/w".into(), rule: kept.clone() }).await.unwrap();
    let raw = pg::PgTarget::parse(&url).unwrap().connect().await.unwrap();
    raw.batch_execute(
        "ALTER TABLE permission_rules DROP CONSTRAINT permission_rules_permission_check,
                                      DROP CONSTRAINT permission_rules_action_check;
         INSERT INTO permission_rules (project, permission, pattern, action, created_at) VALUES
           ('/w', 'mcp', 'x', 'allow', 0), ('/w', 'bash', 'y', 'maybe', 0)",
    )
    .await
    .unwrap();
    let rules = pair.b.project_rules("/w").await.unwrap();
    assert_eq!(rules.len(), 3, "{rules:?}");
    assert_eq!(rules[0], kept);
    assert!(crate::permissions::describe_rule(&rules[1]).starts_with("an unreadable rule"), "{rules:?}");
    pair.a.commit(Write::RemoveProjectRule { project: "/w".into(), rule: rules[1].clone() }).await.unwrap();
    assert_eq!(pair.b.project_rules("/w").await.unwrap(), [kept, rules[2].clone()], "the other row stays");
}
