//! Specs of listings on both backends: newest first with ties broken by id, filtered by
//! directory, sessions never prompted and archived ones left out unless asked for (an
//! unarchived one back in its place), pages full and whole, and a cursor that is not one of
//! ours refused by name.

use super::*;
use crate::history::Role;
use crate::history::{MessageMeta, Part};

fn row(updated_at: i64) -> SessionRow {
    SessionRow::new(SessionId::generate(), "/w".into(), "openai/m".into(), updated_at)
}

/// A session holding one prompt, updated at `at`, in `cwd`.
async fn prompted_in(store: &Store, at: i64, cwd: &str) -> SessionId {
    let mut session = row(at);
    session.cwd = cwd.into();
    let messages = vec![Message::new(Role::User, vec![Part::Text { text: "hi".into() }], MessageMeta::default())];
    let write =
        Write::ImportSession { row: Box::new(session.clone()), messages, checkpoints: Vec::new(), blobs: Vec::new() };
    store.commit(write).await.unwrap();
    session.id
}

async fn prompted(store: &Store, at: i64) -> SessionId {
    prompted_in(store, at, "/w").await
}

/// A session never prompted, updated at `at`.
async fn unprompted(store: &Store, at: i64) -> SessionId {
    let session = row(at);
    store.commit(Write::InsertSession(Box::new(session.clone()))).await.unwrap();
    session.id
}

async fn ids(store: &Store, listing: Listing) -> Vec<SessionId> {
    store.list_sessions(listing, None, 50).await.unwrap().sessions.into_iter().map(|row| row.id).collect()
}

/// Every page of `listing`, `size` rows at a time: the ids, and each page's size.
async fn all_pages(store: &Store, listing: &Listing, size: usize) -> (Vec<SessionId>, Vec<usize>) {
    let (mut seen, mut sizes, mut cursor) = (Vec::new(), Vec::new(), None);
    loop {
        let page = store.list_sessions(listing.clone(), cursor.take(), size).await.unwrap();
        sizes.push(page.sessions.len());
        seen.extend(page.sessions.into_iter().map(|row| row.id));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return (seen, sizes),
        }
    }
}

on_both!(
    sessions_page_newest_first_filter_by_cwd_and_refuse_a_cursor_not_ours,
    a_listing_leaves_out_the_sessions_without_a_message_unless_asked_for_them,
    an_archived_session_is_listed_only_when_asked_for_and_comes_back_in_its_place,
    pages_are_full_and_whole_with_sessions_never_prompted_between_their_rows,
);

async fn sessions_page_newest_first_filter_by_cwd_and_refuse_a_cursor_not_ours(pair: Pair) {
    let store = pair.a;
    let mut made = Vec::new();
    for i in 0..7 {
        let cwd = if i % 2 == 0 { "/a" } else { "/b" };
        made.push(prompted_in(&store, 1_000 + i64::from(i / 2), cwd).await);
    }
    let (seen, _) = all_pages(&pair.b, &Listing::default(), 3).await;
    // Newest first; ties on the time broken by the id, the greater first.
    let mut expected: Vec<(i64, SessionId)> =
        made.iter().enumerate().map(|(i, id)| (1_000 + (i as i64) / 2, id.clone())).collect();
    expected.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.as_str().cmp(a.1.as_str())));
    assert_eq!(seen, expected.into_iter().map(|(_, id)| id).collect::<Vec<_>>(), "nothing twice, none missing");
    let only_b = store.list_sessions(Listing { cwd: Some("/b".into()), ..Listing::default() }, None, 50).await;
    assert_eq!(only_b.unwrap().sessions.len(), 3);
    for bad in ["ses_x", "12.msg_x", "x.ses_y", ""] {
        let refused = store.list_sessions(Listing::default(), Some(bad.into()), 3).await.unwrap_err();
        assert_eq!(refused, StoreError::InvalidCursor(bad.into()));
        assert!(refused.to_string().contains("nextCursor"), "{refused}");
    }
}

async fn a_listing_leaves_out_the_sessions_without_a_message_unless_asked_for_them(pair: Pair) {
    let store = pair.a;
    let empty = unprompted(&store, 1_000).await;
    let asked = prompted(&store, 1_001).await;
    // Rewound to the start: nothing visible, but it was prompted, and stays listed.
    let rewound = prompted(&store, 1_002).await;
    let from = store.messages(&rewound).await.unwrap()[0].id.clone();
    store.commit(Write::HideFrom { session_id: rewound.clone(), from }).await.unwrap();
    assert!(store.messages(&rewound).await.unwrap().is_empty());

    let shown = ids(&store, Listing::default()).await;
    assert_eq!(shown.len(), 2);
    assert!(shown.contains(&rewound) && shown.contains(&asked), "{shown:?}");
    let all = ids(&store, Listing { unprompted: true, ..Listing::default() }).await;
    assert_eq!(all.len(), 3);
    assert!(all.contains(&empty));
}

async fn an_archived_session_is_listed_only_when_asked_for_and_comes_back_in_its_place(pair: Pair) {
    let store = pair.a;
    let old = prompted(&store, 1_000).await;
    let new = prompted(&store, 2_000).await;
    let archive = |archived: bool| Write::SetArchived { id: old.clone(), archived };
    store.commit(archive(true)).await.unwrap();
    let first = store.session(&old).await.unwrap().unwrap().archived_at.expect("archived");
    store.commit(archive(true)).await.unwrap();
    assert_eq!(store.session(&old).await.unwrap().unwrap().archived_at, Some(first), "archived once");

    let of = |archived| Listing { archived, ..Listing::default() };
    assert_eq!(ids(&store, Listing::default()).await, std::slice::from_ref(&new));
    assert_eq!(ids(&store, of(Archived::Only)).await, std::slice::from_ref(&old));
    assert_eq!(ids(&store, of(Archived::Include)).await, [new.clone(), old.clone()]);
    store.commit(archive(false)).await.unwrap();
    assert_eq!(ids(&store, Listing::default()).await, [new, old.clone()]);
    assert_eq!(store.session(&old).await.unwrap().unwrap().updated_at, 1_000, "its place in the list");
    store.commit(Write::SetArchived { id: SessionId::from_string("ses_gone"), archived: true }).await.unwrap();
}

async fn pages_are_full_and_whole_with_sessions_never_prompted_between_their_rows(pair: Pair) {
    let store = pair.a;
    let mut shown = Vec::new();
    for i in 0..10 {
        // Ties on the time too, between the two kinds: the cursor's id breaks them.
        let at = 1_000 + i / 3;
        unprompted(&store, at).await;
        shown.push((at, prompted(&store, at).await));
        unprompted(&store, at).await;
    }
    shown.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| b.1.as_str().cmp(a.1.as_str())));
    let shown: Vec<SessionId> = shown.into_iter().map(|(_, id)| id).collect();
    let (seen, sizes) = all_pages(&store, &Listing::default(), 3).await;
    assert_eq!(sizes, [3, 3, 3, 1], "no page comes back short for the rows left out");
    assert_eq!(seen, shown, "newest first, every prompted session once, no other");
}
