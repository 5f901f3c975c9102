//! The actor of a session in a store shared by replicas: what other replicas show of it, and
//! the prompts it hands them.
//!
//! From the history it was read with, the actor follows the session's event log
//! ([`crate::store::Store::follow`]): every update another replica showed (its turn's chunks,
//! calls, notices, the sweeper's close of a dead replica's turn) goes to this replica's clients,
//! numbered by its `seq` so a load under way cuts it exactly (`loading`); a setting another
//! replica changed is put in effect here and shown as the session's options (`handing.rs`), in the
//! log's order against this replica's own changes (`Actor::mine`). Its own rows it skips:
//! its recorder showed them as they committed. A question another replica's turn asks, and its
//! close, go to the hub, whose clients may answer it (`session::asked`); so do the questions
//! still open where the follow starts, which the log hands it first.
//!
//! A prompt whose turn the lease refused (another replica runs a turn in the session) is handed
//! to that replica ([`super::super::handoff`]), and so are the commands of `handing.rs`; the
//! client's request waits for its answer, which is given once the log is forwarded up to where
//! the answer was written, so the client sees the whole turn before its end. A handed prompt
//! the client withdraws (`$/cancel_request`) is withdrawn where it was handed. A setting
//! stored here that the log could not take because another replica holds the lease (a turn
//! it started meanwhile, or one that refused this replica's own) is handed on to that replica
//! once committed (`handing.rs`). A session that closes answers what waits: a prompt
//! `cancelled`, anything else closed.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::{mpsc, watch};

use super::{Actor, Reply, Steering};
use crate::agent::StopReason;
use crate::history::Part;
use crate::ids::SessionId;
use crate::session::asked::Signal;
use crate::session::handoff::{Handed, Outcome};
use crate::session::{SessionError, SessionView, TurnEnd, Update};
use crate::settings::Setting;
use crate::store::Store;
use crate::store::pg::events::Event;

/// The longest a turn waits for the session's log to be forwarded before it starts, and a
/// resume for the rows it read to be shown here.
pub(crate) const CATCH_UP: std::time::Duration = std::time::Duration::from_secs(2);

/// Whether this process has warned of an event it cannot read: a replica of a newer version
/// logs every turn's rows in its own vocabulary, and one warning says what a line per row would.
static UNREADABLE_TOLD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The session's event log as this actor follows it.
pub(super) struct Followed {
    /// `None` once the store stopped following.
    events: Option<mpsc::Receiver<Event>>,
    /// This replica, whose rows are skipped.
    me: String,
    /// The `seq` of the last row received.
    logged: i64,
    /// The `seq` of the last row shown (or skipped as this replica's), for a turn about to
    /// start here to wait for ([`Actor::caught_up`]).
    forwarded: watch::Sender<i64>,
    /// The log's last `seq`, read with the session's settings just before the command being
    /// handled (a prompt that may start a turn at once): what that turn waits to be forwarded.
    pub(super) known_last: Option<i64>,
    /// Commands handed to the lease holder, by command, waiting for their answers.
    pub(super) handed: HashMap<i64, Waiting>,
    /// Prompts other replicas handed this one, by ticket: the command each came in.
    handed_here: HashMap<u64, i64>,
    /// Answers read before the log reached their `seq`: (seq, command, answer).
    early: Vec<(i64, i64, String)>,
    /// This replica's own settings changes, by option, in effect here and not committed yet.
    mine: HashMap<&'static str, Mine>,
    /// The `seq` of the last own settings change the log took, by option: another replica's
    /// row before it is older than what is in effect here.
    mine_logged: HashMap<&'static str, i64>,
    /// Told by the writer as each own settings change commits (option, number, `seq`).
    committed: (mpsc::UnboundedSender<Committed>, mpsc::UnboundedReceiver<Committed>),
    /// The number of the last own settings change (or title).
    numbered: u64,
    /// The number of the last own change of each option (and of the title, `"title"`): a
    /// change handed to the lease holder before it is older than what is in effect here.
    changed: HashMap<&'static str, u64>,
    /// This replica's own writes of the session's row (settings, title) queued and not
    /// committed yet: a turn about to start here reads the row again only after them
    /// (`handing.rs`), and need not wait for the writer when there are none.
    unstored: Arc<AtomicUsize>,
}

/// Counts an own write of the session's row as not committed until dropped, from the write's
/// callback (or with it, when the writer drops it unrun).
pub(super) struct Unstored(Arc<AtomicUsize>);

impl Drop for Unstored {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Release);
    }
}

/// An own settings change not committed yet: its number, and another replica's change of the
/// same option read meanwhile (`seq`, setting), which may come before or after it in the log.
struct Mine {
    number: u64,
    meanwhile: Option<(i64, Setting)>,
}

/// An own settings change committed: its option, number, and `seq` if the log took it.
pub(super) struct Committed(&'static str, u64, Option<i64>);

/// What the actor's follow brings next: a row of the log (`None` once it ends), or the commit
/// of an own settings change.
pub(super) enum Next {
    Row(Option<Event>),
    Committed(Committed),
}

/// Tells the actor that an own settings change committed (see [`Actor::mine`]).
pub(super) struct MineTold {
    /// `None` when nothing is followed.
    told: Option<mpsc::UnboundedSender<Committed>>,
    option: &'static str,
    number: u64,
}

impl MineTold {
    /// The change committed, as row `seq` of the log if it took it.
    pub(super) fn committed(self, seq: Option<i64>) {
        if let Some(told) = self.told {
            let _ = told.send(Committed(self.option, self.number, seq));
        }
    }
}

impl Followed {
    /// Follows `id` from `logged` on a store that logs events; `None` on one that does not.
    pub(super) fn start(store: &Store, id: &SessionId, logged: i64) -> Option<Self> {
        let me = store.replica()?.to_owned();
        let events = store.follow(id, logged)?;
        Some(Self {
            events: Some(events),
            me,
            logged,
            forwarded: watch::Sender::new(logged),
            known_last: None,
            handed: HashMap::new(),
            handed_here: HashMap::new(),
            early: Vec::new(),
            mine: HashMap::new(),
            mine_logged: HashMap::new(),
            committed: mpsc::unbounded_channel(),
            numbered: 0,
            changed: HashMap::new(),
            unstored: Arc::new(AtomicUsize::new(0)),
        })
    }
}

/// A command handed to the lease holder, as its client waits for the answer.
pub(super) enum Waiting {
    /// A prompt, by the ticket its client may withdraw it with.
    Prompt { ticket: u64, reply: Reply<TurnEnd> },
    /// A setting, put in effect here too once the holder took it, unless an own change of its
    /// option (numbered after `after`, see [`Actor::mine`]) was made here since.
    Set { setting: Setting, reply: Reply<SessionView>, after: u64 },
    /// A title, likewise.
    Title { title: String, reply: Reply<SessionView>, after: u64 },
    /// A `_session/steering` prompt.
    Steer { reply: Reply<Steering> },
}

/// The next row of the followed log or commit of an own settings change; never, when nothing
/// is followed.
pub(super) async fn next(followed: &mut Option<Followed>) -> Next {
    let Some(followed) = followed.as_mut() else { return std::future::pending().await };
    let row = async {
        match followed.events.as_mut() {
            Some(events) => events.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        biased;
        Some(committed) = followed.committed.1.recv() => Next::Committed(committed),
        event = row => Next::Row(event),
    }
}

impl Actor {
    /// An own write of the session's row is about to be queued: what to drop in its callback,
    /// once it has committed. `None` when nothing is followed.
    pub(super) fn unstored(&self) -> Option<Unstored> {
        let followed = self.remote.as_ref()?;
        followed.unstored.fetch_add(1, Ordering::AcqRel);
        Some(Unstored(Arc::clone(&followed.unstored)))
    }

    /// Whether an own write of the session's row is queued and not committed yet.
    pub(super) fn storing_row(&self) -> bool {
        self.remote.as_ref().is_some_and(|followed| followed.unstored.load(Ordering::Acquire) > 0)
    }

    /// A row of the session's log: shown to this replica's clients unless it is this replica's.
    /// Or an own settings change committed ([`Self::mine_committed`]).
    pub(super) fn followed(&mut self, next: Next) {
        let event = match next {
            Next::Row(event) => event,
            Next::Committed(Committed(option, number, seq)) => return self.mine_committed(option, number, seq),
        };
        let Some(followed) = self.remote.as_mut() else { return };
        let Some(event) = event else {
            // The store is shutting down: nothing more comes; what waits is answered at close.
            tracing::debug!(session = %self.row.id, "the session's event log is no longer followed");
            followed.events = None;
            // Nothing more will be forwarded: no turn waits for it.
            followed.forwarded.send_replace(i64::MAX);
            self.services.sink.elsewhere(&self.row.id, crate::session::asked::Elsewhere::Unfollowed);
            return;
        };
        if event.seq <= followed.logged {
            // A question still open where the follow started (asked before the history this
            // actor was read with): put to this replica's clients like one asked now.
            if event.origin != followed.me
                && let Some(signal) = Signal::read(&event.body)
            {
                self.services.sink.elsewhere(&self.row.id, signal.into());
            }
            return;
        }
        followed.logged = event.seq;
        if event.origin.is_empty() {
            // The sweeper's: the turn another replica ran is closed, its questions with it.
            self.services.sink.elsewhere(&self.row.id, crate::session::asked::Elsewhere::TurnClosed);
        }
        if event.origin != followed.me {
            if let Some(signal) = Signal::read(&event.body) {
                self.services.sink.elsewhere(&self.row.id, signal.into());
            } else if let Some(setting) = crate::session::handoff::setting_of_event(&event.body) {
                self.set_elsewhere(event.seq, setting);
            } else if let Some(update) = Update::from_event(&event.body) {
                // The session is titled (by another replica's first prompt, its client or its
                // model): a prompt here is not its first.
                if let Update::Title(title) = &update {
                    self.row.title = Some(title.clone());
                }
                self.services.sink.send_logged(&self.row.id, event.seq, update);
            } else if !UNREADABLE_TOLD.swap(true, Ordering::Relaxed) {
                tracing::warn!(session = %self.row.id, seq = event.seq, "an event this cairn cannot read was skipped (and any more will be, told only at debug level); are all replicas the same version?");
            } else {
                tracing::debug!(session = %self.row.id, seq = event.seq, "an event this cairn cannot read was skipped");
            }
        }
        if let Some(followed) = self.remote.as_ref() {
            followed.forwarded.send_replace(event.seq);
        }
        self.deliver_answers();
    }

    /// The `seq` of the last row of the session's log shown here, as it moves on; `None` on a
    /// store that logs nothing.
    pub(super) fn forwarded(&self) -> Option<watch::Receiver<i64>> {
        self.remote.as_ref().map(|followed| followed.forwarded.subscribe())
    }

    /// What a turn about to run here waits for first: this replica's clients shown every row
    /// the session's log holds now (the end of another replica's turn that just released the
    /// lease), so the new turn's updates come after it. `None` on a store that logs nothing.
    /// Never longer than [`CATCH_UP`]: a follower that stalled does not hold the turn.
    pub(super) fn caught_up(&mut self) -> Option<impl Future<Output = ()> + Send + 'static> {
        let followed = self.remote.as_mut()?;
        let (mut forwarded, known) = (followed.forwarded.subscribe(), followed.known_last.take());
        let (store, session) = (self.services.store.clone(), self.row.id.clone());
        Some(async move {
            let last = match known {
                Some(last) => last,
                None => match store.last_logged(&session).await {
                    Ok(last) => last,
                    Err(_) => return,
                },
            };
            if tokio::time::timeout(CATCH_UP, forwarded.wait_for(|seq| *seq >= last)).await.is_err() {
                tracing::warn!(%session, "the session's log was not forwarded in time; the turn starts anyway");
            }
        })
    }

    /// Notes an own change of `option`, in effect here and about to be stored: until it
    /// commits, another replica's change of that option read from the log is held, put in
    /// effect only if the log has it after this one (else this replica's clients would be left
    /// shown, and this replica left in, an older change than the one stored last). What to
    /// tell once it commits (nothing when nothing is followed).
    pub(super) fn mine(&mut self, option: &'static str) -> MineTold {
        let number = self.changed_here(option);
        let Some(followed) = self.remote.as_mut() else { return MineTold { told: None, option, number: 0 } };
        let meanwhile = followed.mine.remove(option).and_then(|mine| mine.meanwhile);
        followed.mine.insert(option, Mine { number, meanwhile });
        MineTold { told: Some(followed.committed.0.clone()), option, number }
    }

    /// Numbers an own change of `option` (or `"title"`) made here, in effect from now on.
    pub(super) fn changed_here(&mut self, option: &'static str) -> u64 {
        let Some(followed) = self.remote.as_mut() else { return 0 };
        followed.numbered += 1;
        followed.changed.insert(option, followed.numbered);
        followed.numbered
    }

    /// The number the next own change is compared with: one handed now is older than any
    /// numbered after this.
    pub(super) fn numbered(&self) -> u64 {
        self.remote.as_ref().map_or(0, |followed| followed.numbered)
    }

    /// Whether an own change of `option` (or `"title"`) was made here after number `after`.
    fn changed_since(&self, option: &'static str, after: u64) -> bool {
        self.remote.as_ref().and_then(|followed| followed.changed.get(option)).is_some_and(|number| *number > after)
    }

    /// An own change of `option` committed (row `seq` of the log if it took it): unless a
    /// later own change still waits, this replica's clients are shown it, and then another
    /// replica's change of it held meanwhile is put in effect if the log has it later.
    ///
    /// Shown here, by the actor, not by the request's handler once answered: the actor forwards
    /// the log's rows too, so this replica's clients see the own change and another replica's
    /// later one in the log's order, and are left shown the one stored last.
    fn mine_committed(&mut self, option: &'static str, number: u64, seq: Option<i64>) {
        let Some(followed) = self.remote.as_mut() else { return };
        if let Some(seq) = seq {
            let last = followed.mine_logged.entry(option).or_insert(seq);
            *last = (*last).max(seq);
        }
        if followed.mine.get(option).is_none_or(|mine| mine.number != number) {
            return;
        }
        let meanwhile = followed.mine.remove(option).and_then(|mine| mine.meanwhile);
        self.show_options(seq, option == Setting::MODE);
        if let Some((seq, setting)) = meanwhile {
            self.set_elsewhere(seq, setting);
        }
    }

    /// Shows this replica's clients the session's options as they are now (and its mode, to
    /// the clients that follow the older modes API, with `mode`), numbered as row `seq` of the
    /// log where it has one.
    pub(super) fn show_options(&self, seq: Option<i64>, mode: bool) {
        let sink = &self.services.sink;
        if mode {
            sink.send(&self.row.id, Update::Mode(*self.mode.borrow()));
        }
        let options = Update::Options(Box::new(self.view()));
        match seq {
            Some(seq) => sink.send_logged(&self.row.id, seq, options),
            None => sink.send(&self.row.id, options),
        }
    }

    /// Whether another replica's change `setting`, row `seq` of the log, waits for an own
    /// change of its option to commit (held until then), or comes before the own change the
    /// log took last (older than what is in effect here: left).
    pub(super) fn mine_first(&mut self, seq: i64, setting: &Setting) -> bool {
        let Some(followed) = self.remote.as_mut() else { return false };
        let option = setting.option();
        if let Some(mine) = followed.mine.get_mut(option) {
            mine.meanwhile = Some((seq, setting.clone()));
            return true;
        }
        followed.mine_logged.get(option).is_some_and(|mine| *mine > seq)
    }

    /// Another replica's answer to command `command`, written when the log was at `seq`.
    pub(super) fn answered(&mut self, command: i64, seq: i64, body: String) {
        let Some(followed) = self.remote.as_mut() else { return };
        followed.early.push((seq, command, body));
        self.deliver_answers();
    }

    /// Answers the handed commands whose answers the log has caught up with.
    fn deliver_answers(&mut self) {
        let Some(followed) = self.remote.as_mut() else { return };
        let logged = followed.logged;
        let (due, early): (Vec<_>, Vec<_>) = followed.early.drain(..).partition(|(seq, ..)| *seq <= logged);
        followed.early = early;
        let due: Vec<_> = due
            .into_iter()
            .filter_map(|(seq, command, body)| followed.handed.remove(&command).map(|waiting| (seq, waiting, body)))
            .collect();
        for (seq, waiting, body) in due {
            let outcome = Outcome::read(&body);
            match waiting {
                Waiting::Prompt { reply, .. } => {
                    let _ = reply.send(outcome.answer(&self.row.id));
                }
                // A change made here since is the one in effect, and stored after this one.
                // The holder took it: this replica's clients are shown it here, in the log's
                // order (see `mine_committed`), where the answer was written.
                Waiting::Set { setting, reply, after } => {
                    let outcome = outcome.done(&self.row.id);
                    let view = outcome.map(|()| match self.changed_since(setting.option(), after) {
                        true => self.view(),
                        false => {
                            let view = self.set_as_handed(setting.clone());
                            self.show_options(Some(seq), setting.option() == Setting::MODE);
                            view
                        }
                    });
                    let _ = reply.send(view);
                }
                Waiting::Title { title, reply, after } => {
                    let outcome = outcome.done(&self.row.id);
                    let _ = reply.send(outcome.map(|()| match self.changed_since("title", after) {
                        true => self.view(),
                        false => self.title_as_handed(title),
                    }));
                }
                Waiting::Steer { reply } => {
                    let _ = reply.send(outcome.steering(&self.row.id));
                }
            }
        }
    }

    /// `$/cancel_request` of a prompt handed to the lease holder: withdrawn there too (its
    /// client is answered by the request's cancellation). Answers whether `ticket` was one.
    pub(super) fn withdraw_handed(&mut self, ticket: u64) -> bool {
        let Some(followed) = self.remote.as_mut() else { return false };
        let withdrawn = followed.handed.iter().find_map(|(command, waiting)| match waiting {
            Waiting::Prompt { ticket: handed, .. } if *handed == ticket => Some(*command),
            Waiting::Prompt { .. } | Waiting::Set { .. } | Waiting::Title { .. } | Waiting::Steer { .. } => None,
        });
        let Some(command) = withdrawn else { return false };
        followed.handed.remove(&command);
        let (store, session) = (self.services.store.clone(), self.row.id.clone());
        tokio::spawn(async move {
            if let Some(Err(err)) = store.send_command(&session, Handed::Withdraw { command }.json()).await {
                tracing::warn!(%session, command, %err, "a withdrawn prompt could not be withdrawn where it was handed");
            }
        });
        true
    }

    /// Hands a prompt the lease refused to the replica holding it; its answer comes later
    /// ([`Self::answered`]). Where the store shares no inbox, or cannot take the command, the
    /// client is answered now: `refused` or the store's error.
    pub(super) async fn hand_off(
        &mut self,
        ticket: u64,
        parts: Vec<Part>,
        reply: Reply<TurnEnd>,
        refused: SessionError,
    ) {
        let Some(followed) = self.remote.as_mut() else {
            let _ = reply.send(Err(refused));
            return;
        };
        match self.services.store.send_command(&self.row.id, Handed::Prompt { parts }.json()).await {
            Some(Ok(command)) => {
                tracing::info!(session = %self.row.id, command, "a prompt was handed to the replica running the session's turn");
                followed.handed.insert(command, Waiting::Prompt { ticket, reply });
            }
            Some(Err(err)) => {
                let _ = reply.send(Err(err.into()));
            }
            None => {
                let _ = reply.send(Err(refused));
            }
        }
    }

    /// Notes that the prompt of `ticket` came in command `handed`, if another replica handed it.
    pub(super) fn handed_here(&mut self, ticket: u64, handed: Option<i64>) {
        if let (Some(followed), Some(command)) = (self.remote.as_mut(), handed) {
            followed.handed_here.insert(ticket, command);
        }
    }

    /// The command the prompt of `ticket`, about to run, came in, if another replica handed it.
    pub(super) fn run_handed(&mut self, ticket: u64) -> Option<i64> {
        self.remote.as_mut()?.handed_here.remove(&ticket)
    }

    /// Forgets the prompts handed here that will never run (withdrawn, cancelled in the queue).
    pub(super) fn forget_handed(&mut self) {
        if let Some(followed) = self.remote.as_mut() {
            followed.handed_here.clear();
        }
    }

    /// The actor stops: the questions other replicas' turns put to this replica's clients
    /// through its follow are withdrawn (it reads no close of theirs from now on).
    pub(super) fn unfollow(&mut self) {
        if self.remote.take().is_some() {
            self.services.sink.elsewhere(&self.row.id, crate::session::asked::Elsewhere::Unfollowed);
        }
    }

    /// The session closes: the prompts handed away are answered cancelled here (their turns go
    /// on where they run), the other commands closed.
    pub(super) fn drop_handed(&mut self) {
        let Some(followed) = self.remote.as_mut() else { return };
        let closed = || SessionError::Closed(self.row.id.clone());
        for (_, waiting) in followed.handed.drain() {
            match waiting {
                Waiting::Prompt { reply, .. } => {
                    let _ = reply.send(Ok(StopReason::Cancelled.into()));
                }
                Waiting::Set { reply, .. } | Waiting::Title { reply, .. } => {
                    let _ = reply.send(Err(closed()));
                }
                Waiting::Steer { reply } => {
                    let _ = reply.send(Err(closed()));
                }
            }
        }
    }
}
