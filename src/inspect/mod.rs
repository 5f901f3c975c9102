//! `cairn sessions …`: the stored sessions from the command line. `list` (in `exec`), `show`
//! (the conversation as plain text, calls whose file changes are kept marked), `export`
//! (Markdown, or lossless JSON lines with the file checkpoints: `carried`), `import` (a JSON
//! lines export back into the store), `rm` and `prune` (removing sessions as
//! `session/delete` does, through `Write::DeleteSession`, refused the same way while another
//! process runs a turn in one). An unknown session, or a file that cannot be imported, exits 2.
//!
//! `cairn store migrate` (`migrate`) copies every session from one store to another.
//!
//! Everything is read before anything is written, so an unknown session prints nothing and an
//! export to a file replaces that file only once the whole export is written. With `exec` and
//! `acp::rpc`, this is code that writes stdout: only in these commands.

mod carried;
mod jsonl;
pub mod migrate;
mod render;

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::ids::{SessionId, iso8601, now_ms};
use crate::session::SessionError;
use crate::store::{Archived, Listing, SessionRow, Store, StoreError, Write};

pub use jsonl::VERSION as JSONL_VERSION;

/// The `cairn sessions` subcommands.
#[derive(clap::Subcommand)]
pub enum SessionsCommand {
    /// List stored sessions, most recent first.
    List {
        /// Only sessions whose working directory is this (absolute) path.
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// One JSON object per line instead of a table.
        #[arg(long)]
        json: bool,
        /// Only the archived sessions (`session/archive`), which are otherwise left out.
        #[arg(long)]
        archived: bool,
    },
    /// Print a session's conversation as the editor showed it (rewound messages left out).
    Show {
        /// The session's id (`cairn sessions list` shows them).
        id: String,
    },
    /// Write a session out: a Markdown transcript, or JSON lines holding every stored message
    /// as it is stored (what `cairn sessions import` reads back).
    Export {
        /// The session's id.
        id: String,
        #[arg(long, value_enum, default_value_t = Format::Markdown)]
        format: Format,
        /// Write to this file (created 0600) instead of stdout; it is replaced only once the
        /// whole export is written.
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Store a session from a `--format jsonl` export: under its own id when that is free,
    /// else under new ids. Its mode and remembered permission rules are not imported.
    Import {
        /// The export file.
        file: PathBuf,
    },
    /// Remove a session, with its sub-agents' sessions (forks stay).
    Rm {
        /// The session's id.
        id: String,
    },
    /// Remove the sessions not updated for a while (with their sub-agents' sessions).
    Prune {
        /// How long: a whole number of hours, days or weeks, e.g. 12h, 30d, 4w.
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        older_than: Age,
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
}

/// What `export` writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A readable transcript.
    Markdown,
    /// The session, then one JSON object per stored message (lossless).
    Jsonl,
}

/// A span of time given as `Nh`, `Nd` or `Nw`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Age {
    pub text: String,
    pub ms: i64,
}

/// `12h`, `30d`, `4w`; anything else is refused, saying what is accepted.
pub fn parse_age(text: &str) -> Result<Age, String> {
    let refuse = || format!("`{text}` is not an age; write a whole number of hours, days or weeks, e.g. 12h, 30d, 4w");
    let Some((cut, unit)) = text.char_indices().last() else { return Err(refuse()) };
    let hour: i64 = 3_600_000;
    let unit = match unit {
        'h' => hour,
        'd' => 24 * hour,
        'w' => 7 * 24 * hour,
        _ => return Err(refuse()),
    };
    let count: u64 = text[..cut].parse().map_err(|_| refuse())?;
    if count < 1 {
        return Err(format!("`{text}` would remove every session; give an age of at least 1h"));
    }
    let ms = i64::try_from(count)
        .ok()
        .and_then(|count| count.checked_mul(unit))
        .ok_or_else(|| format!("`{text}` is longer than cairn can count"))?;
    Ok(Age { text: text.to_owned(), ms })
}

/// Why a `cairn sessions` command failed.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("session {0} not found; `cairn sessions list` shows the stored sessions")]
    UnknownSession(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("cannot resolve --cwd: {0}")]
    Cwd(std::io::Error),
    #[error("cannot write {path}: {source}; nothing was changed there")]
    Output { path: PathBuf, source: std::io::Error },
    #[error("cannot read {path}: {source}")]
    Input { path: PathBuf, source: std::io::Error },
    #[error("{path} line {line}: {why}; nothing was imported")]
    Import { path: PathBuf, line: usize, why: String },
    #[error("cannot encode the export: {0}")]
    Encode(#[from] serde_json::Error),
    #[error(
        "{kept} of the sessions to prune were kept, in use by another cairn process (see above); run prune again later"
    )]
    PruneIncomplete { kept: usize },
}

impl InspectError {
    /// The process's exit status: 2 for a mistake in how cairn was called (an unknown session,
    /// a file that is not an export), 1 for the rest.
    pub fn exit_code(&self) -> u8 {
        match self {
            InspectError::UnknownSession(_) | InspectError::Import { .. } | InspectError::Input { .. } => 2,
            InspectError::Store(_)
            | InspectError::Session(_)
            | InspectError::Cwd(_)
            | InspectError::Output { .. }
            | InspectError::Encode(_)
            | InspectError::PruneIncomplete { .. } => 1,
        }
    }
}

/// Runs one `cairn sessions` command, then shuts the store down.
pub async fn run(store: Store, command: SessionsCommand) -> Result<(), InspectError> {
    let result = match command {
        SessionsCommand::List { cwd, json, archived } => list(store.clone(), cwd, json, archived).await,
        SessionsCommand::Show { id } => show(&store, id).await,
        SessionsCommand::Export { id, format, output } => export(&store, id, format, output.as_deref()).await,
        SessionsCommand::Import { file } => import(&store, &file).await,
        SessionsCommand::Rm { id } => remove(&store, id).await,
        SessionsCommand::Prune { older_than, dry_run } => prune(&store, &older_than, dry_run).await,
    };
    store.shutdown().await;
    result
}

async fn list(store: Store, cwd: Option<PathBuf>, json: bool, archived: bool) -> Result<(), InspectError> {
    // One spelling per directory, as sessions store it: `/w/` is `/w`.
    let cwd = cwd.map(std::path::absolute).transpose().map_err(InspectError::Cwd)?;
    let cwd = cwd.map(|cwd| cwd.components().collect::<PathBuf>().to_string_lossy().into_owned());
    let archived = if archived { Archived::Only } else { Archived::Exclude };
    Ok(crate::exec::list_sessions(store, Listing { cwd, archived, ..Listing::default() }, json).await?)
}

/// The stored session `id`, or the error naming `cairn sessions list`.
async fn find(store: &Store, id: String) -> Result<SessionRow, InspectError> {
    match store.session(&SessionId::from_string(id.clone())).await? {
        Some(row) => Ok(row),
        None => Err(InspectError::UnknownSession(id)),
    }
}

async fn show(store: &Store, id: String) -> Result<(), InspectError> {
    let row = find(store, id).await?;
    let messages = store.messages(&row.id).await?;
    // The calls whose file changes a checkpoint keeps, with how many files they changed.
    let mut changed = std::collections::HashMap::new();
    for info in store.checkpoints(&row.id).await? {
        // An empty capture after a call only marks it finished.
        if let (crate::tools::checkpoint::By::Made, Some(call), 1..) = (info.by, info.call_id, info.files) {
            *changed.entry(call).or_insert(0) += info.files;
        }
    }
    print(&render::plain(&row, &messages, &changed))
}

async fn export(store: &Store, id: String, format: Format, output: Option<&Path>) -> Result<(), InspectError> {
    let row = find(store, id).await?;
    // Either one shows no control character raw, in a file too (it is read with `cat`): the
    // Markdown shows them as escapes, the JSON lines as `\u` escapes of the same values.
    let text = match format {
        Format::Markdown => crate::visible::text(&render::markdown(&row, &store.messages(&row.id).await?)).into_owned(),
        Format::Jsonl => {
            let (checkpoints, contents) = store.checkpoints_with_contents(&row.id).await?;
            let text = jsonl::export(&row, &store.stored_messages(&row.id).await?, &checkpoints, &contents)?;
            crate::visible::json(&text).into_owned()
        }
    };
    match output {
        None => print(&text),
        Some(path) => crate::aside::replace(path, text.as_bytes())
            .map(drop)
            .map_err(|source| InspectError::Output { path: path.to_owned(), source }),
    }
}

async fn import(store: &Store, file: &Path) -> Result<(), InspectError> {
    let input = |source| InspectError::Input { path: file.to_owned(), source };
    let reader = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(file).map_err(input)?);
    let jsonl::Imported { mut row, mut messages, mut checkpoints, blobs } =
        jsonl::parse(reader, jsonl::Bounds::default()).map_err(|err| match err {
            jsonl::ReadError::Line(line, why) => InspectError::Import { path: file.to_owned(), line, why },
            jsonl::ReadError::Io(source) => input(source),
        })?;
    let original = row.id.clone();
    if store.session(&row.id).await?.is_some() {
        row.id = SessionId::generate();
        let old: Vec<_> = messages.iter().map(|message| message.id.clone()).collect();
        messages = crate::history::with_new_ids(messages);
        // The checkpoints name the prompts they were taken in by their new ids too.
        let renamed: std::collections::HashMap<_, _> =
            old.into_iter().zip(messages.iter().map(|message| message.id.clone())).collect();
        for checkpoint in &mut checkpoints {
            checkpoint.prompt = checkpoint.prompt.take().and_then(|prompt| renamed.get(&prompt).cloned());
        }
    }
    let (id, count) = (row.id.clone(), messages.len());
    store.commit(Write::ImportSession { row: Box::new(row), messages, checkpoints, blobs }).await?;
    if id == original {
        print(&format!("imported {id} ({count} messages)\n"))
    } else {
        print(&format!("imported {original} as {id} ({count} messages; {original} is already stored)\n"))
    }
}

async fn remove(store: &Store, id: String) -> Result<(), InspectError> {
    let row = find(store, id).await?;
    // The writer refuses while another live process holds the lease of the session or of one of
    // its sub-agents, as it does for `session/delete`.
    store.commit(Write::DeleteSession { id: row.id.clone() }).await?;
    print(&format!("removed {}\n", row.id))
}

async fn prune(store: &Store, age: &Age, dry_run: bool) -> Result<(), InspectError> {
    let cutoff = now_ms().saturating_sub(age.ms);
    let since = iso8601(cutoff).unwrap_or_default();
    let mut old = Vec::new();
    let mut cursor = None;
    loop {
        // Never-prompted sessions too: those a process killed left behind are removed here;
        // and archived ones, which are as old as they are.
        let listing = Listing { unprompted: true, archived: Archived::Include, ..Listing::default() };
        let page = store.list_sessions(listing, cursor.take(), 200).await?;
        old.extend(page.sessions.into_iter().filter(|row| row.updated_at < cutoff));
        match page.next_cursor {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    let mut out = String::new();
    let line = |row: &SessionRow| {
        let title = crate::visible::line(row.title.as_deref().unwrap_or("(untitled)"));
        let id = crate::visible::line(row.id.as_str());
        format!("{id}  {}  {title}\n", iso8601(row.updated_at).unwrap_or_default())
    };
    if dry_run {
        for row in &old {
            out.push_str(&format!("would remove {}", line(row)));
        }
        out.push_str(&format!("{} not updated since {since} would be removed\n", sessions(old.len())));
        return print(&out);
    }
    let mut kept = 0;
    let mut removed = 0;
    for row in &old {
        match store.commit(Write::DeleteSession { id: row.id.clone() }).await {
            Ok(()) => removed += 1,
            Err(StoreError::Leased(holder)) => {
                kept += 1;
                let kept = format!("cairn: kept {}: {holder}", row.id);
                let _ = writeln!(std::io::stderr().lock(), "{}", crate::visible::line(&kept));
            }
            Err(err) => return Err(err.into()),
        }
    }
    print(&format!("removed {} not updated since {since}\n", sessions(removed)))?;
    if kept > 0 { Err(InspectError::PruneIncomplete { kept }) } else { Ok(()) }
}

/// "1 session", "2 sessions".
pub(crate) fn sessions(count: usize) -> String {
    if count == 1 { "1 session".to_owned() } else { format!("{count} sessions") }
}

/// Writes `text` to stdout, its control characters shown as escapes; a reader that went away
/// (`| head`) is not an error.
fn print(text: &str) -> Result<(), InspectError> {
    let text = crate::visible::text(text);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(InspectError::Output { path: PathBuf::from("stdout"), source: err })
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_whole_hours_days_or_weeks() {
        assert_eq!(parse_age("12h").unwrap().ms, 12 * 3_600_000);
        assert_eq!(parse_age("30d").unwrap().ms, 30 * 86_400_000);
        assert_eq!(parse_age("2w").unwrap().ms, 14 * 86_400_000);
        for bad in ["", "30", "d", "30m", "1.5d", "-3d", "30 d", "3é", "30D"] {
            assert!(parse_age(bad).unwrap_err().contains("12h, 30d, 4w"), "{bad}");
        }
        assert!(parse_age("0d").unwrap_err().contains("at least 1h"));
        assert!(parse_age("99999999999999999w").is_err());
    }
}
