//! The store's write vocabulary: every change the rest of cairn queues ([`Write`]), the same
//! for both backends, each applied whole in its batch's transaction or not at all.

use super::{Carried, LastTurn, SessionRow, TokenRow};
use crate::history::{Message, MessageMeta, Part};
use crate::ids::{MessageId, SessionId};
use crate::permissions::Rule;

/// One queued change. Streaming text goes through `OpenPart`/`AppendPart`/`ClosePart` so a chunk
/// costs an append in memory; a batch appends each part's new text to it once, never rewriting
/// what is stored.
#[derive(Debug)]
pub enum Write {
    InsertSession(Box<SessionRow>),
    /// A client's title, noted as the client's in the session's metadata (`title_by`), or a
    /// model's, refused with [`StoreError::TitleKept`] once a client has titled the session.
    SetSessionTitle {
        id: SessionId,
        title: String,
        by: TitleBy,
    },
    /// One of the session's settings (`crate::settings`), where the setting says it is kept.
    SetSessionSetting {
        id: SessionId,
        kept: crate::settings::Kept,
        value: String,
    },
    /// Remembers a rule for this session only.
    AddSessionRule {
        id: SessionId,
        rule: Rule,
    },
    /// Remembers a rule for every session in `project` (a working directory).
    AddProjectRule {
        project: String,
        rule: Rule,
    },
    /// The first write of a turn (or of a command that changes the history): takes the session's
    /// lease for this process and inserts `prompt`, setting `title` if the session has none, in
    /// one savepoint. Refused, writing nothing, with [`StoreError::Leased`] while another live
    /// process holds the lease, and with [`StoreError::LeaseMoved`] if the session's last turn is
    /// not the one `last` names (the caller's copy of the history is out of date). `command`:
    /// the command another replica handed, which the turn runs (a store shared by replicas);
    /// refused with [`StoreError::CommandAnswered`] unless this replica still has it taken and
    /// unanswered, checked in the take's own transaction (nothing answered `cancelled` by
    /// another replica's sweeper while this one stalled ever runs).
    TakeLease {
        session_id: SessionId,
        last: LastTurn,
        prompt: Option<Message>,
        title: Option<String>,
        command: Option<i64>,
    },
    /// Gives the session's lease back if this process holds it (the turn ended). A release that
    /// fails (the database busy, a failed commit) is tried again with every later batch until it
    /// is committed; the lease is refreshed meanwhile, as it is still held.
    ReleaseLease {
        session_id: SessionId,
    },
    /// Ends the session's tool calls that a crash left unfinished, as they are stored when this
    /// write runs (a call finished meanwhile stays as it is), unless a live process holds the
    /// session's lease, this one included: then they are its running calls, and nothing changes.
    FinalizeOrphans {
        session_id: SessionId,
    },
    /// Inserts a message with the parts it already has.
    InsertMessage {
        session_id: SessionId,
        message: Message,
    },
    SetMessageMeta {
        message_id: MessageId,
        meta: MessageMeta,
    },
    /// Sets a finished message's metadata and adds its usage and cost to the session's totals,
    /// in one transaction.
    FinishMessage {
        session_id: SessionId,
        message_id: MessageId,
        meta: MessageMeta,
    },
    /// Inserts or replaces one part of a message.
    PutPart {
        session_id: SessionId,
        message_id: MessageId,
        index: u32,
        part: Part,
    },
    /// Starts a text or reasoning part that will grow by `AppendPart`.
    OpenPart {
        session_id: SessionId,
        message_id: MessageId,
        index: u32,
        part: Part,
    },
    AppendPart {
        message_id: MessageId,
        index: u32,
        delta: String,
    },
    /// Writes the part's last text and ends it.
    ClosePart {
        message_id: MessageId,
        index: u32,
    },
    /// Removes a session's rows, and those of the sub-agents it started; forks stay. Refused with
    /// [`StoreError::Leased`] while another live process holds one of their leases.
    DeleteSession {
        id: SessionId,
    },
    /// [`Write::DeleteSession`] of a session that holds no message (one never prompted),
    /// checked in the same transaction: a session that holds one by then stays, and so does one
    /// whose lease another live process holds (neither is an error), or one that is gone.
    DeleteUnprompted {
        id: SessionId,
    },
    /// Stores file contents for checkpoints (those not stored yet).
    PutBlobs(Vec<crate::tools::checkpoint::Blob>),
    /// Stores captures of a session's files, taken in `prompt`'s turn (none for a restore), in
    /// one savepoint; with `restore`, the last is a restore recorded before it is applied
    /// (pending until [`Write::FinishRestore`]). Refused if a content they name is not stored.
    PutCheckpoints {
        session_id: SessionId,
        prompt: Option<MessageId>,
        captures: Vec<crate::tools::checkpoint::Capture>,
        restore: Option<String>,
    },
    /// The session's pending restore was applied to its end.
    FinishRestore {
        session_id: SessionId,
    },
    /// Keeps checkpoints within their size limits, the oldest dropped first: the session's,
    /// then everyone's.
    TrimCheckpoints {
        session_id: SessionId,
        session_bytes: u64,
        total_bytes: u64,
    },
    /// Hides `from` and every later message of the session (rewind); nothing is deleted. Refused
    /// with [`StoreError::Leased`] while another live process holds the session's lease.
    HideFrom {
        session_id: SessionId,
        from: MessageId,
    },
    /// Archives a session (`session/archive`) or brings it back: listings leave an archived one
    /// out unless asked for it; nothing else changes. A session that is gone changes nothing.
    SetArchived {
        id: SessionId,
        archived: bool,
    },
    /// Replaces the session's remembered rules (a revoke).
    SetSessionRules {
        id: SessionId,
        rules: Vec<Rule>,
    },
    /// Forgets a project-scope rule.
    RemoveProjectRule {
        project: String,
        rule: Rule,
    },
    /// Creates `row` as a copy of `parent`'s visible messages (new ids, parts verbatim), records
    /// the parent and the fork point, and recomputes the rollups from the copied messages.
    ForkSession {
        row: Box<SessionRow>,
        parent: SessionId,
    },
    /// Creates `row` with `messages` (ids and parts as given) in one savepoint, its rollups
    /// computed from them (the row's cost kept when larger) and its times, owner and archived
    /// mark kept (`cairn sessions import`, `cairn store migrate`).
    ImportSession {
        row: Box<SessionRow>,
        messages: Vec<Message>,
        /// Its file checkpoints, and the contents they name.
        checkpoints: Vec<Carried>,
        blobs: Vec<crate::tools::checkpoint::Blob>,
    },
    /// Stores a bearer token of `cairn serve --auth`: its public id, its principal and the
    /// SHA-256 of its secret (never the secret).
    AddToken {
        id: String,
        principal: String,
        hash: [u8; 32],
    },
    /// Stores a token as another store keeps it (`cairn store migrate`): id, principal, hash and
    /// times, revoked or not. A token whose id or hash is already stored changes nothing.
    CopyToken {
        row: TokenRow,
        hash: [u8; 32],
    },
    /// Revokes a token (it stays listed); refused with [`StoreError::UnknownToken`] if there is
    /// no such token. Revoking one already revoked changes nothing.
    RevokeToken {
        id: String,
    },
    /// Changes nothing; its callback runs once everything queued before it is committed.
    Barrier,
    /// Changes nothing but carries what it shows into the session's event log (with
    /// [`Store::submit_shown`]), for the clients of other replicas: a question asked of them, a
    /// note for them (a prompt queued).
    Show {
        session_id: SessionId,
    },
}

/// Who wrote a session's title: a client's stands; a model's replaces only one no client gave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TitleBy {
    Client,
    Model,
}
