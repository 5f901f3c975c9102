//! One function per [`Write`]: what each does inside a batch's transaction, each in its own
//! savepoint, its result kept for its callback.

use rusqlite::Connection;

use super::held::Held;
use super::lease::{self, LastTurn};
use super::stream::Streams;
use super::tx::Db;
use super::{StoreError, TitleBy, Write, checkpoints, listing, rows, tokens, transfer};
use crate::history::{Message, Part};
use crate::ids::{MessageId, SessionId};

/// A batch being applied: the connection, the leases and streaming parts it changes, and each
/// write's result so far.
pub(super) struct Batch<'a> {
    pub db: &'a Db,
    pub held: &'a mut Held,
    pub streams: &'a mut Streams,
    pub now: i64,
    pub results: Vec<Result<(), StoreError>>,
}

impl Batch<'_> {
    /// Applies the batch's write number `job`.
    pub fn apply(&mut self, job: usize, write: &Write) {
        let now = self.now;
        let result = match write {
            Write::InsertSession(row) => self.db.savepoint(|conn| rows::insert_session(conn, row)),
            Write::SetSessionTitle { id, title, by } => self.set_title(id, title, *by),
            Write::SetSessionSetting { id, kept, value } => {
                self.db.savepoint(|conn| rows::set_session_setting(conn, id, *kept, value, now))
            }
            Write::AddSessionRule { id, rule } => self.db.savepoint(|conn| rows::add_session_rule(conn, id, rule)),
            Write::AddProjectRule { project, rule } => {
                self.db.savepoint(|conn| rows::add_project_rule(conn, project, rule, now))
            }
            Write::TakeLease { session_id, last, prompt, title, command: _ } => {
                self.take_lease(session_id, last, prompt.as_ref(), title.as_deref())
            }
            Write::ReleaseLease { session_id } => self.held.give_back(self.db, session_id, now),
            Write::FinalizeOrphans { session_id } => self.finalize_orphans(session_id),
            Write::InsertMessage { session_id, message } => {
                self.db.savepoint(|conn| rows::insert_message(conn, session_id, message, now))
            }
            Write::SetMessageMeta { message_id, meta } => {
                self.db.savepoint(|conn| rows::set_message_meta(conn, message_id, meta, now))
            }
            Write::FinishMessage { session_id, message_id, meta } => {
                self.db.savepoint(|conn| rows::finish_message(conn, session_id, message_id, meta, now))
            }
            Write::PutPart { session_id, message_id, index, part } => {
                self.db.savepoint(|conn| rows::upsert_part(conn, session_id, message_id, *index, part, now))
            }
            Write::OpenPart { session_id, message_id, index, part } => {
                self.open_part(session_id, message_id, *index, part)
            }
            Write::AppendPart { message_id, index, delta } => {
                if self.streams.append(message_id, *index, delta, job) {
                    // Answered when the part's text is written, at the end of the batch.
                    return;
                }
                let detail = format!("chunk for part {index} of {message_id}, which is not open");
                Err(StoreError::Sqlite { path: self.db.path().to_owned(), detail })
            }
            Write::ClosePart { message_id, index } => self.close_part(message_id, *index),
            Write::DeleteSession { id } => self.delete_session(id, false),
            Write::DeleteUnprompted { id } => self.delete_session(id, true),
            Write::PutBlobs(blobs) => self.db.savepoint(|conn| checkpoints::put_blobs(conn, blobs)),
            Write::PutCheckpoints { session_id, prompt, captures, restore } => self.db.savepoint(|conn| {
                checkpoints::put_checkpoints(conn, session_id, prompt.as_ref(), captures, restore.as_deref(), now)
            }),
            Write::FinishRestore { session_id } => {
                self.db.savepoint(|conn| checkpoints::finish_restore(conn, session_id))
            }
            Write::TrimCheckpoints { session_id, session_bytes, total_bytes } => {
                self.db.savepoint(|conn| checkpoints::trim(conn, session_id, *session_bytes, *total_bytes))
            }
            Write::HideFrom { session_id, from } => {
                self.unless_leased(session_id, |conn| rows::hide_from(conn, session_id, from, now))
            }
            Write::SetArchived { id, archived } => {
                self.db.savepoint(|conn| listing::set_archived(conn, id, *archived, now))
            }
            Write::SetSessionRules { id, rules } => {
                self.db.savepoint(|conn| rows::set_session_rules(conn, id, rules, now))
            }
            Write::RemoveProjectRule { project, rule } => {
                self.db.savepoint(|conn| rows::remove_project_rule(conn, project, rule))
            }
            Write::ForkSession { row, parent } => self.db.savepoint(|conn| rows::fork_session(conn, row, parent, now)),
            Write::ImportSession { row, messages, checkpoints: carried, blobs } => self.db.savepoint(|conn| {
                transfer::import_session(conn, row, messages)?;
                checkpoints::import(conn, &row.id, carried, blobs)
            }),
            Write::AddToken { id, principal, hash } => {
                self.db.savepoint(|conn| tokens::insert(conn, id, principal, hash, now))
            }
            Write::CopyToken { row, hash } => self.db.savepoint(|conn| tokens::copy(conn, row, hash)),
            Write::RevokeToken { id } => match tokens::exists(&self.db.conn, id) {
                Ok(true) => self.db.savepoint(|conn| tokens::revoke(conn, id, now)),
                Ok(false) => Err(StoreError::UnknownToken(id.clone())),
                Err(err) => Err(self.db.error(&err)),
            },
            Write::Barrier | Write::Show { .. } => Ok(()),
        };
        self.results[job] = result;
    }

    /// Writes the text the batch appended to parts still open; each chunk's result is its part's.
    pub fn write_streams(&mut self) {
        let db = self.db;
        for (jobs, result) in self.streams.write_pending(|write| db.savepoint(write)) {
            self.answer(jobs, &result);
        }
    }

    fn answer(&mut self, jobs: Vec<usize>, result: &Result<(), StoreError>) {
        for job in jobs {
            if self.results[job].is_ok() {
                self.results[job].clone_from(result);
            }
        }
    }

    /// See [`Write::TakeLease`].
    fn take_lease(
        &mut self,
        session_id: &SessionId,
        last: &LastTurn,
        prompt: Option<&Message>,
        title: Option<&str>,
    ) -> Result<(), StoreError> {
        let (db, now) = (self.db, self.now);
        match lease::check(&db.conn, self.held.me(), session_id, last, now) {
            Ok(Ok(())) => {}
            Ok(Err(refused)) => return Err(refused),
            Err(err) => return Err(db.error(&err)),
        }
        let me = self.held.me();
        db.savepoint(|conn| {
            lease::take(conn, me, session_id, now)?;
            if let Some(prompt) = prompt {
                rows::insert_message(conn, session_id, prompt, now)?;
            }
            if let Some(title) = title {
                rows::set_first_title(conn, session_id, title, now)?;
            }
            Ok(())
        })?;
        self.held.taken(session_id);
        Ok(())
    }

    /// See [`Write::FinalizeOrphans`]: nothing changes while a live process holds the lease.
    fn finalize_orphans(&self, session: &SessionId) -> Result<(), StoreError> {
        if self.held.holds(session) {
            return Ok(());
        }
        match lease::held_elsewhere(&self.db.conn, self.held.me(), session, self.now) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => self.db.savepoint(|conn| rows::finalize_orphans(conn, session, self.now)),
            Err(err) => Err(self.db.error(&err)),
        }
    }

    /// Writes the part's row as it starts; its text grows with `AppendPart`.
    fn open_part(
        &mut self,
        session_id: &SessionId,
        message_id: &MessageId,
        index: u32,
        part: &Part,
    ) -> Result<(), StoreError> {
        self.streams.open(session_id, message_id, index);
        self.db.savepoint(|conn| rows::upsert_part(conn, session_id, message_id, index, part, self.now))
    }

    /// Writes what the part has pending and ends it; its chunks in this batch share the result.
    fn close_part(&mut self, message_id: &MessageId, index: u32) -> Result<(), StoreError> {
        let db = self.db;
        let Some((jobs, result)) = self.streams.close(message_id, index, |write| db.savepoint(write)) else {
            return Ok(());
        };
        self.answer(jobs, &result);
        result
    }

    /// See [`Write::SetSessionTitle`].
    fn set_title(&mut self, id: &SessionId, title: &str, by: TitleBy) -> Result<(), StoreError> {
        let client = by == TitleBy::Client;
        let mut changed = false;
        self.db.savepoint(|conn| {
            changed = rows::set_session_title(conn, id, title, client, self.now)?;
            Ok(())
        })?;
        if changed || client { Ok(()) } else { Err(StoreError::TitleKept(id.clone())) }
    }

    /// See [`Write::DeleteSession`], and [`Write::DeleteUnprompted`] when `only_unprompted`.
    fn delete_session(&mut self, id: &SessionId, only_unprompted: bool) -> Result<(), StoreError> {
        let mut deleted = true;
        let result = self.unless_leased(id, |conn| {
            if only_unprompted {
                deleted = rows::delete_unprompted_session(conn, id)?;
                Ok(())
            } else {
                rows::delete_session(conn, id)
            }
        });
        match result {
            Ok(()) => {}
            // Another live process is using it: it stays, as asked.
            Err(StoreError::Leased(_)) if only_unprompted => return Ok(()),
            Err(err) => return Err(err),
        }
        if deleted {
            self.streams.forget_session(id);
            self.held.deleted(id);
        }
        Ok(())
    }

    /// Runs `write` unless another live process holds the lease of `session` or of a sub-agent
    /// session below it.
    fn unless_leased(
        &self,
        session: &SessionId,
        write: impl FnOnce(&Connection) -> rusqlite::Result<()>,
    ) -> Result<(), StoreError> {
        match lease::held_below(&self.db.conn, self.held.me(), session, self.now) {
            Ok(Some(holder)) => Err(StoreError::Leased(Box::new(holder))),
            Ok(None) => self.db.savepoint(write),
            Err(err) => Err(self.db.error(&err)),
        }
    }
}
