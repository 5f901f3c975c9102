//! `cairn store migrate`: copies every session from one store to another (SQLite to
//! PostgreSQL, PostgreSQL to SQLite, or between two of a kind), through the store's own reads
//! and its import write, then the project rules and the bearer tokens.
//!
//! A session is the unit: its row (title, settings, owner, archived mark, parent and sub-agent
//! link), its visible messages with their parts and its file checkpoints with the contents they
//! name are read, then written in one `Write::ImportSession`, one transaction on the
//! destination; only one session is held in memory at a time. A session whose id the
//! destination already holds is skipped, so a migrate cut short (even by `kill -9`) is finished
//! by running it again. A session whose lease a live process or replica holds (a turn is
//! running in it) is not copied: it is named on stderr and the command exits 1 once the others
//! are copied, to be run again after that turn ends. Rewound messages, which nothing shows
//! again, stay behind, as in an export (the session's cost still counts them). Progress goes
//! to stderr, the summary to stdout (through `inspect`'s printer); a database is named without
//! its password (`PgTarget`'s display).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::store::pg::PgTarget;
use crate::store::{Archived, Carried, Listing, Store, StoreError, Write};
use crate::tools::checkpoint::{Blob, Capture, State};

/// The `cairn store` subcommands.
#[derive(clap::Subcommand)]
pub enum StoreCommand {
    /// Copy every session (with its messages, settings, owner, sub-agents and file checkpoints),
    /// the project rules and the bearer tokens from one store to another. Sessions the
    /// destination already holds are skipped, so running it again finishes an interrupted copy.
    Migrate {
        /// Where from: `sqlite:PATH`, `sqlite:` for the database in the data directory, or a
        /// `postgres://user:password@host:port/database` URL. Default: `sqlite:`.
        #[arg(long, value_name = "STORE")]
        from: Option<String>,
        /// Where to, in the same forms. Default: `[store] url` of config.toml.
        #[arg(long, value_name = "STORE")]
        to: Option<String>,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
    },
}

/// Why `cairn store migrate` failed; every one exits 1.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error(
        "`{0}` names no store; write sqlite:PATH, sqlite: (the database in the data directory) or postgres://user:password@host:port/database"
    )]
    Scheme(String),
    #[error("{0}")]
    BadUrl(String),
    #[error("there is no SQLite database at {0}; check the path given to --from")]
    NoSource(PathBuf),
    #[error("no destination: give --to, or set `[store] url` in config.toml")]
    NoDestination,
    #[error("--from and --to are the same store ({0}); give two different ones")]
    Same(String),
    #[error("the {side} store {at}: {source}")]
    Open { side: &'static str, at: String, source: Box<StoreError> },
    #[error("copying from {from} to {to}: {source}; what was copied stays, run the command again to copy the rest")]
    Copy { from: String, to: String, source: Box<StoreError> },
    #[error("{0} not copied: a turn is running in them (see above); run the migrate again once those turns have ended")]
    Running(String),
    #[error(transparent)]
    Print(#[from] super::InspectError),
}

/// A store as `--from` or `--to` names it.
#[derive(Clone, Debug)]
pub enum Location {
    Sqlite(PathBuf),
    Postgres { url: String, target: Box<PgTarget> },
}

impl Location {
    /// `sqlite:PATH` (a relative path from the current directory), `sqlite:` for `default`,
    /// or a `postgres://` / `postgresql://` URL.
    pub fn parse(text: &str, default: &Path) -> Result<Self, MigrateError> {
        if let Some(path) = text.strip_prefix("sqlite:") {
            // `sqlite:///abs/path` is read as `/abs/path`.
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Ok(Self::Sqlite(default.to_owned()));
            }
            let path = std::path::absolute(path).map_err(|_| MigrateError::Scheme(text.to_owned()))?;
            return Ok(Self::Sqlite(path));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            let target = PgTarget::parse(text).map_err(|err| MigrateError::BadUrl(err.to_string()))?;
            return Ok(Self::Postgres { url: text.to_owned(), target: Box::new(target) });
        }
        // Never echo what might be a URL with a password in it.
        let shown = match text.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://…"),
            None => crate::visible::line(text).into_owned(),
        };
        Err(MigrateError::Scheme(shown))
    }

    /// The same database file or server database: a file by its real path (one not made yet by
    /// its directory's), a database by its host, port, name and user.
    fn same_as(&self, other: &Location) -> bool {
        match (self, other) {
            (Location::Sqlite(a), Location::Sqlite(b)) => real(a) == real(b),
            (Location::Postgres { target: a, .. }, Location::Postgres { target: b, .. }) => {
                a.to_string() == b.to_string()
            }
            (Location::Sqlite(_), Location::Postgres { .. }) | (Location::Postgres { .. }, Location::Sqlite(_)) => {
                false
            }
        }
    }

    async fn open(
        &self,
        side: &'static str,
        (ttl, kept): (std::time::Duration, std::time::Duration),
    ) -> Result<Store, MigrateError> {
        let opened = match self {
            Location::Sqlite(path) => {
                if side == "source" && !path.is_file() {
                    return Err(MigrateError::NoSource(path.clone()));
                }
                let path = path.clone();
                tokio::task::spawn_blocking(move || Store::open(&path)).await.unwrap_or(Err(StoreError::Closed))
            }
            Location::Postgres { url, .. } => Store::open_postgres(url, ttl, kept).await,
        };
        opened.map_err(|source| MigrateError::Open { side, at: self.to_string(), source: Box::new(source) })
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            // Never the password.
            Location::Postgres { target, .. } => write!(f, "postgres://{target}"),
        }
    }
}

/// A path with its symlinks resolved, as far as it exists.
fn real(path: &Path) -> PathBuf {
    if let Ok(real) = path.canonicalize() {
        return real;
    }
    match (path.parent().and_then(|dir| dir.canonicalize().ok()), path.file_name()) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => path.to_owned(),
    }
}

/// What a migrate did.
#[derive(Debug, Default, serde::Serialize)]
struct Summary {
    copied: usize,
    skipped: usize,
    running: usize,
    rules: usize,
    tokens: usize,
}

/// Runs `cairn store migrate`: `database` is the data directory's SQLite file (`sqlite:`, and
/// `--from`'s default), `configured` the `[store] url` that `--to` defaults to, and `shared`
/// how a PostgreSQL store is opened: its leases' time to live and how long its event log's rows
/// are kept (`[store] lease_ttl_secs`, `events_kept_secs`).
pub async fn run(
    command: StoreCommand,
    database: &Path,
    configured: Option<String>,
    shared: (std::time::Duration, std::time::Duration),
) -> Result<(), MigrateError> {
    let StoreCommand::Migrate { from, to, json } = command;
    let from = Location::parse(from.as_deref().unwrap_or("sqlite:"), database)?;
    let to = Location::parse(&to.or(configured).ok_or(MigrateError::NoDestination)?, database)?;
    if from.same_as(&to) {
        return Err(MigrateError::Same(from.to_string()));
    }
    let source = from.open("source", shared).await?;
    let destination = match to.open("destination", shared).await {
        Ok(store) => store,
        Err(err) => {
            source.shutdown().await;
            return Err(err);
        }
    };
    let copied = copy(&source, &destination).await;
    source.shutdown().await;
    destination.shutdown().await;
    let summary = copied.map_err(|source| MigrateError::Copy {
        from: from.to_string(),
        to: to.to_string(),
        source: Box::new(source),
    })?;
    let line = if json {
        serde_json::to_string(&summary).map_err(super::InspectError::from)?
    } else {
        format!(
            "copied {} from {from} to {to}, skipped {} (already there); {} and {} copied",
            super::sessions(summary.copied),
            summary.skipped,
            count(summary.rules, "project rule"),
            count(summary.tokens, "token"),
        )
    };
    super::print(&format!("{line}\n"))?;
    if summary.running > 0 {
        return Err(MigrateError::Running(super::sessions(summary.running)));
    }
    Ok(())
}

/// "1 token", "2 tokens".
fn count(count: usize, what: &str) -> String {
    if count == 1 { format!("1 {what}") } else { format!("{count} {what}s") }
}

/// Every session in, then the project rules and the tokens, each session in a transaction.
async fn copy(source: &Store, destination: &Store) -> Result<Summary, StoreError> {
    let mut summary = Summary::default();
    let total = count_sessions(source).await?;
    let mut cursor = None;
    let mut seen = 0;
    loop {
        let page = source.list_sessions(everything(), cursor.take(), PAGE).await?;
        for row in page.sessions {
            seen += 1;
            match copy_session(source, destination, row.id.clone()).await? {
                Copied::Yes => summary.copied += 1,
                Copied::AlreadyThere => summary.skipped += 1,
                Copied::Running(why) => {
                    summary.running += 1;
                    say(&format!("cairn: not copied: {why}"));
                }
            }
            if seen % PROGRESS_EVERY == 0 {
                say(&progress(&summary, total));
            }
        }
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    if seen % PROGRESS_EVERY != 0 || seen == 0 {
        say(&progress(&summary, total));
    }
    let kept = destination.all_project_rules().await?;
    for (project, rule) in source.all_project_rules().await? {
        // A row this version cannot read is not guessed at, nor copied; one already kept stays.
        if rule.stands_for().is_none() && !kept.iter().any(|(at, had)| *at == project && *had == rule) {
            destination.commit(Write::AddProjectRule { project, rule }).await?;
            summary.rules += 1;
        }
    }
    let there: std::collections::HashSet<String> = destination.tokens().await?.into_iter().map(|row| row.id).collect();
    for (row, hash) in source.tokens_with_hashes().await? {
        summary.tokens += usize::from(!there.contains(&row.id));
        destination.commit(Write::CopyToken { row, hash }).await?;
    }
    Ok(summary)
}

/// `cairn: copied 120/340 sessions`, with those skipped and not copied when there are any.
fn progress(summary: &Summary, total: usize) -> String {
    let mut line = format!("cairn: copied {}/{total} sessions", summary.copied);
    if summary.skipped > 0 {
        line.push_str(&format!(", skipped {} (already there)", summary.skipped));
    }
    if summary.running > 0 {
        line.push_str(&format!(", {} not copied (a turn is running)", summary.running));
    }
    line
}

/// Sessions listed per page.
const PAGE: usize = 200;

/// How many sessions between two lines of progress.
const PROGRESS_EVERY: usize = 100;

/// Every session: sub-agents', never-prompted and archived ones too, of every owner.
fn everything() -> Listing {
    Listing { subagents: true, unprompted: true, archived: Archived::Include, ..Listing::default() }
}

async fn count_sessions(store: &Store) -> Result<usize, StoreError> {
    let (mut total, mut cursor) = (0, None);
    loop {
        let page = store.list_sessions(everything(), cursor.take(), PAGE).await?;
        total += page.sessions.len();
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => return Ok(total),
        }
    }
}

enum Copied {
    Yes,
    AlreadyThere,
    /// Its lease is held: why, as the store says it.
    Running(String),
}

/// Copies one session in one write, unless the destination holds its id or a turn runs in it.
async fn copy_session(source: &Store, destination: &Store, id: crate::ids::SessionId) -> Result<Copied, StoreError> {
    if destination.session(&id).await?.is_some() {
        return Ok(Copied::AlreadyThere);
    }
    if let Some(holder) = source.held_elsewhere(&id).await? {
        return Ok(Copied::Running(holder.to_string()));
    }
    // Gone since it was listed (removed meanwhile): nothing to copy.
    let Some(row) = source.session(&id).await? else { return Ok(Copied::AlreadyThere) };
    let messages = source.messages(&id).await?;
    let (captures, mut contents) = source.checkpoints_with_contents(&id).await?;
    // A turn that started while this was read may have left half of it: not copied either.
    if let Some(holder) = source.held_elsewhere(&id).await? {
        return Ok(Copied::Running(holder.to_string()));
    }
    let mut blobs = Vec::new();
    let checkpoints = captures
        .into_iter()
        .map(|(info, mut entries)| {
            for entry in &mut entries {
                if let Some(hash) = entry.state.hash() {
                    match contents.remove(&hash) {
                        Some(data) => blobs.push(Blob { hash, data }),
                        // Named by an earlier entry (already taken), or not stored at all.
                        None if blobs.iter().any(|blob: &Blob| blob.hash == hash) => {}
                        None => entry.state = State::Uncovered { size: entry.state.size() },
                    }
                }
            }
            Carried {
                prompt: info.prompt_id,
                capture: Capture { by: info.by, call_id: info.call_id, entries },
                restore: info.restore,
                created_at: info.created_at,
            }
        })
        .collect();
    destination.commit(Write::ImportSession { row: Box::new(row), messages, checkpoints, blobs }).await?;
    Ok(Copied::Yes)
}

/// A line on stderr, its control characters shown as escapes.
fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{}", crate::visible::line(line));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_named_by_sqlite_or_a_postgres_url_and_nothing_else() {
        let default = Path::new("/data/cairn.db");
        assert!(matches!(Location::parse("sqlite:", default), Ok(Location::Sqlite(path)) if path == default));
        assert!(
            matches!(Location::parse("sqlite:/x/y.db", default), Ok(Location::Sqlite(path)) if path == Path::new("/x/y.db"))
        );
        assert!(
            matches!(Location::parse("sqlite:///x/y.db", default), Ok(Location::Sqlite(path)) if path == Path::new("/x/y.db"))
        );
        let pg = Location::parse("postgresql://me:secret@db:5433/cairn", default).unwrap();
        assert_eq!(pg.to_string(), "postgres://me@db:5433/cairn");
        let refused = Location::parse("mysql://me:secret@db/cairn", default).unwrap_err().to_string();
        assert!(refused.contains("mysql://…") && !refused.contains("secret"), "{refused}");
        assert!(Location::parse("/x/y.db", default).is_err());
    }

    #[test]
    fn the_same_database_twice_is_recognised() {
        let default = Path::new("/data/cairn.db");
        let a = Location::parse("postgres://me:one@db:5432/cairn", default).unwrap();
        let b = Location::parse("postgres://me:two@db/cairn", default).unwrap();
        assert!(a.same_as(&b));
        let file = Location::parse("sqlite:/tmp/../tmp/x.db", default).unwrap();
        assert!(file.same_as(&Location::parse("sqlite:/tmp/x.db", default).unwrap()));
        assert!(!file.same_as(&a));
    }
}
