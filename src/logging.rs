//! Logging: to stderr always (filtered by `CAIRN_LOG`), and to a log file when one is named,
//! by `--log-file` or by `log_file` in `config.toml`; the flag wins.
//!
//! Logging starts before the configuration is read (a bad config must be able to log), so the
//! file comes in two ways: `--log-file` is opened by [`init`], and the config's `log_file` by
//! [`use_config_file`] once the configuration is loaded, without reading it twice. Both feed
//! one file layer whose writer is set at most once; until then that layer is switched off, so
//! nothing is formatted for a file that does not exist. Log files are 0600: logs may quote
//! prompts. The telemetry exporter, when there is one, is a third layer with a filter of its
//! own (only `telemetry::TARGET`'s spans), which the two log layers never show.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The log file in use, once there is one, and who named it.
static FILE: OnceLock<(std::fs::File, PathBuf, Source)> = OnceLock::new();

/// Who named the log file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `--log-file`.
    Flag,
    /// `log_file` in `config.toml`.
    Config,
}

/// Logs to stderr, and to `flag_file` when given, and feeds `telemetry` its spans when given; a
/// log file that cannot be opened is refused, not silently left out. Call once, first thing.
pub fn init(flag_file: Option<&Path>, telemetry: Option<crate::telemetry::Layer>) -> Result<(), String> {
    use tracing_subscriber::filter::FilterExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _, filter, fmt};
    if let Some(path) = flag_file {
        let file = open_private(path).map_err(|err| format!("--log-file {}: cannot open it: {err}", path.display()))?;
        let _ = FILE.set((file, path.to_owned(), Source::Flag));
    }
    // Each log layer filters for itself, so the telemetry layer sees its spans whatever CAIRN_LOG
    // says, and the logs never show them.
    let filter = || {
        let filter = EnvFilter::try_from_env("CAIRN_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
        match format!("{}=off", crate::telemetry::TARGET).parse() {
            Ok(telemetry_off) => filter.add_directive(telemetry_off),
            Err(_) => filter,
        }
    };
    // Colour only for a person at a terminal: editors show stderr as text (or as error events),
    // where escape codes are noise; and never when NO_COLOR is set.
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    let stderr = fmt::layer().with_target(false).with_ansi(colour).with_writer(std::io::stderr).with_filter(filter());
    let file = fmt::layer()
        .with_target(false)
        .with_ansi(false)
        .with_writer(LateFile)
        .with_filter(filter().and(filter::filter_fn(|_| FILE.get().is_some())));
    tracing_subscriber::registry()
        .with(telemetry)
        .with(stderr)
        .with(file)
        .try_init()
        .map_err(|err| format!("cannot start logging: {err}"))
}

/// Also logs to `path`, the config's `log_file`, unless `--log-file` named a file already (the
/// flag wins). A file that cannot be opened is refused, naming the setting.
pub fn use_config_file(path: &Path) -> Result<(), String> {
    if FILE.get().is_some() {
        return Ok(());
    }
    let file = open_private(path)
        .map_err(|err| format!("log_file (config.toml) {}: cannot open it: {err}", path.display()))?;
    let _ = FILE.set((file, path.to_owned(), Source::Config));
    Ok(())
}

/// The file logs also go to, and who named it.
pub fn file() -> Option<(&'static Path, Source)> {
    FILE.get().map(|(_, path, source)| (path.as_path(), *source))
}

/// The file layer's writer: the log file once there is one (the layer is off before).
struct LateFile;

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LateFile {
    type Writer = Box<dyn std::io::Write + 'a>;

    fn make_writer(&'a self) -> Self::Writer {
        match FILE.get() {
            Some((file, ..)) => Box::new(file),
            None => Box::new(std::io::sink()),
        }
    }
}

/// Opens a log file for appending, readable by its owner only (a new file is created 0600 and an
/// existing regular file is tightened to 0600, whatever the umask): logs may quote prompts.
fn open_private(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let file = std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path)?;
    let metadata = file.metadata()?;
    if metadata.is_file() && metadata.permissions().mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}
