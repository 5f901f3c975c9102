//! Whether a project's hooks may run: asked once per file content, remembered per hash.
//!
//! Hooks in a project's `.claude/settings.json` or `.claude/settings.local.json` are code the
//! repository brings. The first time one of a file's hooks would run, the user is asked (a
//! permission question naming the file, its SHA-256 and the commands); the answer, trust or
//! refusal, is kept in `hooks-trust.json` in cairn's data directory (0600) against the file's
//! path and hash, so an edited file asks again and a refused one is not asked about again.
//! Without anyone to ask (a headless run) a project's hooks do not run, and nothing is kept.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::history::{ToolContent, ToolKind, ToolPart};
use crate::tools::host::{OptionKind, PermissionAnswer, PermissionOption, Permissions};

const TRUST: &str = "trust";
const REFUSE: &str = "refuse";

/// The file of remembered answers.
#[derive(Clone, Debug)]
pub struct TrustFile(pub PathBuf);

#[derive(Debug, Default, Serialize, Deserialize)]
struct Answers {
    #[serde(default)]
    files: Vec<Answer>,
}

/// One remembered answer.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Answer {
    path: String,
    sha256: String,
    trusted: bool,
}

impl TrustFile {
    /// In cairn's data directory.
    pub fn in_dir(data_dir: &Path) -> Self {
        Self(data_dir.join("hooks-trust.json"))
    }

    fn read(&self) -> Answers {
        match std::fs::read_to_string(&self.0) {
            Ok(text) => serde_json::from_str(&text).unwrap_or_else(|err| {
                tracing::warn!(file = %self.0.display(), %err, "the hooks' trust file cannot be read; asking again");
                Answers::default()
            }),
            Err(_) => Answers::default(),
        }
    }

    /// The answer given for `path` with this content, if any.
    pub fn answer(&self, path: &Path, hash: &str) -> Option<bool> {
        let path = path.to_string_lossy();
        self.read()
            .files
            .iter()
            .find(|answer| answer.path == path && answer.sha256 == hash)
            .map(|answer| answer.trusted)
    }

    /// Keeps the answer for `path` with this content (replacing what was kept for that path).
    pub fn remember(&self, path: &Path, hash: &str, trusted: bool) -> std::io::Result<()> {
        let mut answers = self.read();
        let path = path.to_string_lossy().into_owned();
        answers.files.retain(|answer| answer.path != path);
        answers.files.push(Answer { path, sha256: hash.to_owned(), trusted });
        let text = serde_json::to_string_pretty(&answers).map_err(std::io::Error::other)?;
        let dir = self.0.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        crate::aside::replace(&self.0, text.as_bytes()).map(drop)
    }
}

/// The SHA-256 of a file's bytes, in hex.
pub fn hash(bytes: &[u8]) -> String {
    crate::digest::sha256_hex(bytes)
}

/// Asks the user whether the hooks of `path` (content `hash`, running `commands`) may run.
/// `None` when the question was withdrawn or could not be asked.
pub async fn ask(asker: &dyn Permissions, path: &Path, hash: &str, commands: &[String]) -> Option<bool> {
    let short: String = hash.chars().take(12).collect();
    let mut card = ToolPart::new(format!("hooks-{short}"), "hooks".to_owned());
    card.kind = ToolKind::Execute;
    card.title = format!("Run the hooks of {}?", path.display());
    let listed: Vec<String> = commands.iter().map(|command| format!("- {command}")).collect();
    let text = format!(
        "This project's {} (sha256 {hash}) asks cairn to run these commands when their events happen:\n{}\n\n\
         They run in the sandbox with your files. cairn remembers your answer for this exact content; an edit asks \
         again.",
        path.display(),
        listed.join("\n")
    );
    card.input = serde_json::json!({ "file": path.to_string_lossy(), "sha256": hash }).to_string();
    card.content = vec![ToolContent::Text { text }];
    let options = [
        PermissionOption { id: TRUST.into(), label: "Trust and run these hooks".into(), kind: OptionKind::AllowAlways },
        PermissionOption { id: REFUSE.into(), label: "Do not run them".into(), kind: OptionKind::RejectAlways },
    ];
    match asker.request_permission(&card, &options).await {
        Ok(PermissionAnswer::Selected(id)) => Some(id == TRUST),
        Ok(PermissionAnswer::Cancelled) => None,
        Err(err) => {
            tracing::warn!(%err, "asking about a project's hooks failed; they do not run");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_holds_for_one_content_of_one_file() {
        let dir = std::env::temp_dir().join(format!("cairn-trust-{}", std::process::id()));
        let trust = TrustFile::in_dir(&dir);
        let file = Path::new("/project/.claude/settings.json");
        assert_eq!(trust.answer(file, "aa"), None);
        trust.remember(file, "aa", true).unwrap();
        trust.remember(Path::new("/other/.claude/settings.json"), "bb", false).unwrap();
        assert_eq!(trust.answer(file, "aa"), Some(true));
        assert_eq!(trust.answer(file, "ab"), None, "an edited file asks again");
        trust.remember(file, "ab", false).unwrap();
        assert_eq!((trust.answer(file, "ab"), trust.answer(file, "aa")), (Some(false), None));
        assert_eq!(trust.answer(Path::new("/other/.claude/settings.json"), "bb"), Some(false));
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&trust.0).unwrap().permissions().mode() & 0o777, 0o600);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_planted_where_the_answers_were_once_written_aside_is_not_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "mine").unwrap();
        // The name this file was written under before, fixed by the process id.
        std::os::unix::fs::symlink(&victim, dir.path().join(format!(".hooks-trust.{}.tmp", std::process::id())))
            .unwrap();
        let trust = TrustFile::in_dir(dir.path());
        trust.remember(Path::new("/project/.claude/settings.json"), "aa", true).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "mine");
        assert_eq!(trust.answer(Path::new("/project/.claude/settings.json"), "aa"), Some(true));
    }
}
