//! Whose each session is, known in memory so that a served request is checked when it is read,
//! in wire order, without a read of the database (`cairn serve --auth`).
//!
//! Both backends keep one: loaded from the sessions that have an owner when the store opens,
//! then kept up to date as writes are queued: a session stored with an owner is noted, and one
//! stored with a parent (a fork, a sub-agent's session) and no owner takes its parent's, here
//! and in the row. An entry is never removed: a deleted session's is harmless, since it names
//! no session any more (ids are never reused). A session another process (or replica) creates
//! with an owner after this one opened the store is unknown here, so its principal is refused it
//! here (the check fails closed) until this process restarts, or, on PostgreSQL, until this
//! replica reads the session's row (a listing, a load): rows read are noted too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::Write;
use crate::ids::SessionId;

pub(super) struct Owners(Mutex<HashMap<SessionId, Arc<str>>>);

impl Owners {
    pub fn new(owned: HashMap<SessionId, Arc<str>>) -> Self {
        Self(Mutex::new(owned))
    }

    /// Notes the owner a row read from the database names.
    pub fn learn(&self, id: &SessionId, owner: Option<&str>) {
        if let Some(owner) = owner {
            let mut owners = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if owners.get(id).is_none_or(|known| **known != *owner) {
                owners.insert(id.clone(), Arc::from(owner));
            }
        }
    }

    /// The principal owning `id`, if it has one.
    pub fn of(&self, id: &SessionId) -> Option<Arc<str>> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(id).cloned()
    }

    /// Notes the owner of the session `write` stores, if any, giving a child its parent's.
    pub fn note(&self, write: &mut Write) {
        let (row, parent) = match write {
            Write::InsertSession(row) => {
                let parent = row.parent_id.clone();
                (row, parent)
            }
            Write::ForkSession { row, parent } => (row, Some(parent.clone())),
            // An export's sessions belong to the local user; a migrated one keeps its owner.
            Write::ImportSession { row, .. } => {
                let parent = row.parent_id.clone();
                (row, parent)
            }
            Write::SetSessionTitle { .. }
            | Write::SetSessionSetting { .. }
            | Write::AddSessionRule { .. }
            | Write::AddProjectRule { .. }
            | Write::TakeLease { .. }
            | Write::ReleaseLease { .. }
            | Write::FinalizeOrphans { .. }
            | Write::InsertMessage { .. }
            | Write::SetMessageMeta { .. }
            | Write::FinishMessage { .. }
            | Write::PutPart { .. }
            | Write::OpenPart { .. }
            | Write::AppendPart { .. }
            | Write::ClosePart { .. }
            | Write::DeleteSession { .. }
            | Write::DeleteUnprompted { .. }
            | Write::HideFrom { .. }
            | Write::PutBlobs(_)
            | Write::PutCheckpoints { .. }
            | Write::FinishRestore { .. }
            | Write::TrimCheckpoints { .. }
            | Write::SetArchived { .. }
            | Write::SetSessionRules { .. }
            | Write::RemoveProjectRule { .. }
            | Write::AddToken { .. }
            | Write::CopyToken { .. }
            | Write::RevokeToken { .. }
            | Write::Show { .. }
            | Write::Barrier => return,
        };
        let mut owners = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if row.owner.is_none() {
            row.owner = parent.and_then(|parent| owners.get(&parent)).map(|owner| owner.to_string());
        }
        if let Some(owner) = &row.owner {
            owners.insert(row.id.clone(), Arc::from(owner.as_str()));
        }
    }
}
