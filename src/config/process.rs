//! What local processes get: the `[sandbox]` and `[tools]` tables of `config.toml` (whose
//! `image_max_bytes`, the cap on images `read` sends, goes to the turn's limits), and the
//! environment a child inherits (computed here because only `config` reads the environment),
//! together made into the `process::ProcessPolicy` the sessions run commands under.
//!
//! A child never sees a provider key (`OPENAI_API_KEY`, `ANTHROPIC_API_KEY`, every provider's
//! `api_key_env`) unless `[tools] env_passthrough` names it, nor any other variable holding a
//! key's value; its `PATH` loses empty and relative entries, so a planted `./cat` in the
//! workspace cannot shadow `cat`.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::ProviderConfig;
use crate::process::{ChildEnv, DEFAULT_PATH, ProcessPolicy, SandboxMode};

/// The keys of the built-in providers, and the secret a bridge shows `cairn serve`, removed
/// even when no provider names them.
const KNOWN_KEYS: [&str; 3] = ["OPENAI_API_KEY", "ANTHROPIC_API_KEY", "CAIRN_SERVE_TOKEN"];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileSandbox {
    mode: Option<SandboxMode>,
    network: Option<bool>,
    /// Whether commands run in a namespace of their own (guarded places read-only, secrets
    /// hidden, rejected programs covered); `false` leaves only Landlock and the exec check.
    namespace: Option<bool>,
    /// More places local commands may write under `workspace-write` (absolute, or `~/…`).
    #[serde(default)]
    writable: Vec<String>,
    /// More places hidden from local commands: absolute or `~/…` paths, or globs relative to
    /// the workspace (`secrets/**`).
    #[serde(default)]
    hidden: Vec<String>,
    /// Places hidden by default that local commands may read after all, written the same way
    /// (`~/.aws`, `.env.example`).
    #[serde(default)]
    visible: Vec<String>,
}

/// Sockets of programs outside the sandbox that act on what they are sent, as the user:
/// the container engines (whose API runs anything as root), the system bus (through which
/// systemd starts units) and systemd's own socket. Hidden wherever they exist; the user's own
/// services are found by [`services`].
const SYSTEM_SERVICES: &[&str] = &[
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd/containerd.sock",
    "/run/podman/podman.sock",
    "/run/dbus/system_bus_socket",
    "/var/run/dbus/system_bus_socket",
    "/run/systemd/private",
    "/run/screen",
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTools {
    /// Provider keys that local commands may see after all.
    #[serde(default)]
    env_passthrough: Vec<String>,
    /// The largest image file `read` sends to the model.
    image_max_bytes: Option<u64>,
}

impl FileTools {
    /// `image_max_bytes`, checked: an image cap of nothing would refuse every image.
    pub(super) fn image_max_bytes(&self) -> Result<u64, String> {
        match self.image_max_bytes {
            None => Ok(crate::images::DEFAULT_IMAGE_MAX_BYTES),
            Some(0) => Err(
                "[tools] image_max_bytes must be more than 0; leave it out for the default (3932160, which is 5 MiB once base64)"
                    .to_owned(),
            ),
            Some(bytes) if bytes > crate::images::TURN_IMAGE_BYTES => Err(format!(
                "[tools] image_max_bytes = {bytes} is more than one turn may read ({}, which is 20 MiB once \
                 base64, what one request carries); use at most that",
                crate::images::TURN_IMAGE_BYTES
            )),
            Some(bytes) => Ok(bytes),
        }
    }
}

/// What the process side of cairn needs to know about the environment.
pub(super) struct Environment<'a> {
    pub lookup: &'a dyn Fn(&str) -> Option<String>,
    /// Every variable, to find keys copied under other names (empty when only `lookup` is known).
    pub vars: &'a [(OsString, OsString)],
    pub home: Option<&'a Path>,
    /// The user cairn runs as (`/run/user/UID`, `/tmp/tmux-UID`).
    pub uid: u32,
}

/// The process policy (with the direct launcher; `main` picks the supervisor). `own`: cairn's
/// configuration and data directories, never visible to a local command.
pub(super) fn policy(
    sandbox: FileSandbox,
    tools: &FileTools,
    providers: &BTreeMap<String, ProviderConfig>,
    env: &Environment<'_>,
    own: &[PathBuf],
) -> Result<Arc<ProcessPolicy>, String> {
    let mut writable = vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")];
    let services = services(env);
    let service_dirs = service_dirs(env);
    // A `TMPDIR` inside a service's place (the runtime directory) would leave that place
    // uncovered and writable: commands use `/tmp` instead.
    let mut temp_moved = false;
    if let Some(tmp) = (env.lookup)("TMPDIR").map(PathBuf::from).filter(|tmp| tmp.is_absolute()) {
        match services.iter().any(|place| tmp.starts_with(place)) {
            true => temp_moved = true,
            false => writable.push(tmp),
        }
    }
    for given in &sandbox.writable {
        match place(given, env.home) {
            Place::Path(path) => {
                for on_path in programs_within(&path, (env.lookup)("PATH").as_deref()) {
                    tracing::warn!(
                        "[sandbox] writable `{given}` holds {}, which is on PATH: a command can put programs there                          that your shell then runs outside the sandbox",
                        on_path.display()
                    );
                }
                writable.push(path);
            }
            Place::Names(_) => {
                return Err(format!("[sandbox] writable: `{given}` must be an absolute path (or start with ~/)"));
            }
        }
    }
    let (mut hidden, mut hidden_names) = (Vec::new(), Vec::new());
    hidden.extend(super::hidden::home_secrets(env.home, env.lookup));
    // A place commands may write stays theirs, wherever it lies (a `TMPDIR` in the runtime
    // directory).
    hidden.extend(services.into_iter().filter(|place| !writable.iter().any(|dir| dir.starts_with(place))));
    for given in &sandbox.hidden {
        match place(given, env.home) {
            Place::Path(path) => hidden.push(path),
            Place::Names(glob) => hidden_names.push(checked_glob("hidden", glob)?),
        }
    }
    let (mut visible, mut visible_names) = (Vec::new(), Vec::new());
    for given in &sandbox.visible {
        match place(given, env.home) {
            Place::Path(path) => {
                hidden.retain(|hidden| *hidden != path);
                visible.push(path);
            }
            Place::Names(glob) => visible_names.push(checked_glob("visible", glob)?),
        }
    }
    Ok(Arc::new(ProcessPolicy {
        sandbox: sandbox.mode.unwrap_or(SandboxMode::WorkspaceWrite),
        network: sandbox.network.unwrap_or(true),
        namespace: sandbox.namespace.unwrap_or(true),
        writable,
        own: own.to_vec(),
        hidden_names,
        visible_names,
        // Only those covered themselves: one inside a covered place (a `TMPDIR` in the runtime
        // directory) is out of sight already.
        service_dirs: service_dirs
            .into_iter()
            .filter(|dir| hidden.contains(dir) && !hidden.iter().any(|place| place != dir && dir.starts_with(place)))
            .collect(),
        hidden,
        visible,
        sockets_before: Some(std::time::SystemTime::now()),
        env: {
            let mut child = child_env(providers, &tools.env_passthrough, env);
            if temp_moved {
                child.set.push(("TMPDIR".into(), "/tmp".into()));
            }
            child
        },
        ..ProcessPolicy::default()
    }))
}

/// The directories of `path` (the user's `PATH`) that lie within `place`: a writable place
/// holding one (`~/.bun` for `~/.bun/bin`, `~/go` for `~/go/bin`) lets a command plant the
/// programs the user runs.
fn programs_within(place: &Path, path: Option<&str>) -> Vec<PathBuf> {
    let entries = path.map(std::env::split_paths).into_iter().flatten();
    entries.filter(|dir| dir.is_absolute() && dir.starts_with(place)).collect()
}

/// Where the user's own services listen, for a command to reach them and have them act outside
/// the sandbox: the runtime directory (the session bus, which starts any program through
/// `systemd-run --user`; editors' servers, such as Neovim's and Emacs', which run what they are
/// sent; cairn's own socket; the gpg and ssh agents; Wayland), the ssh agent and session bus
/// wherever their variables put them, and in the temp directories the terminal multiplexers'
/// sockets (which type into the user's shells), X11's, and Emacs' and Neovim's when there is
/// no runtime directory. Abstract sockets are refused by the Landlock scope instead.
fn services(env: &Environment<'_>) -> Vec<PathBuf> {
    let absolute = |name: &str| (env.lookup)(name).map(PathBuf::from).filter(|path| path.is_absolute());
    let mut found: Vec<PathBuf> = SYSTEM_SERVICES.iter().map(PathBuf::from).collect();
    found.extend(absolute("XDG_RUNTIME_DIR"));
    found.push(PathBuf::from(format!("/run/user/{}", env.uid)));
    for name in SOCKET_VARIABLES {
        found.extend((env.lookup)(name).and_then(|value| socket_path(&value)));
    }
    found.extend((env.lookup)("DBUS_SESSION_BUS_ADDRESS").iter().flat_map(|address| bus_paths(address)));
    let user = (env.lookup)("USER").or_else(|| (env.lookup)("LOGNAME")).filter(|user| !user.contains('/'));
    let uid = env.uid;
    let mut names = vec![
        format!("tmux-{uid}"),
        format!("zellij-{uid}"),
        format!("emacs{uid}"),
        ".X11-unix".to_owned(),
        "screens".to_owned(),
    ];
    names.extend(user.map(|user| format!("nvim.{user}")));
    // cairn's directories where a cairn with no `CAIRN_HOME` keeps them: another cairn's
    // server secret and conversations, when this one was given directories of its own.
    let data = absolute("XDG_DATA_HOME").or_else(|| env.home.map(|home| home.join(".local/share")));
    let config = absolute("XDG_CONFIG_HOME").or_else(|| env.home.map(|home| home.join(".config")));
    found.extend([data, config].into_iter().flatten().map(|dir| dir.join("cairn")));
    let temps = [Some(PathBuf::from("/tmp")), absolute("TMPDIR"), absolute("TMUX_TMPDIR")];
    for temp in temps.into_iter().flatten() {
        found.extend(names.iter().map(|name| temp.join(name)));
    }
    found
}

/// The directories of [`services`] that the user's multiplexers and editors make for their
/// sockets when they are missing (tmux's in `$TMUX_TMPDIR` or `/tmp`; Zellij's, Emacs' and
/// Neovim's in `/tmp` or `$TMPDIR`), private to the user. Made before a command starts, they
/// are covered in its namespace, so a server the user starts while the command runs puts its
/// socket out of the command's sight; made later by the server, they would not be. Not
/// `.X11-unix` or `screens`: those are shared by every user of the machine.
fn service_dirs(env: &Environment<'_>) -> Vec<PathBuf> {
    let absolute = |name: &str| (env.lookup)(name).map(PathBuf::from).filter(|path| path.is_absolute());
    let user = (env.lookup)("USER").or_else(|| (env.lookup)("LOGNAME")).filter(|user| !user.contains('/'));
    let uid = env.uid;
    let mut found = vec![absolute("TMUX_TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp")).join(format!("tmux-{uid}"))];
    let mut names = vec![format!("zellij-{uid}"), format!("emacs{uid}")];
    names.extend(user.map(|user| format!("nvim.{user}")));
    for temp in [Some(PathBuf::from("/tmp")), absolute("TMPDIR")].into_iter().flatten() {
        found.extend(names.iter().map(|name| temp.join(name)));
    }
    found
}

/// Variables that name a socket of a program acting for whoever connects: an agent's, a
/// terminal multiplexer's or editor's server (`TMUX` is `SOCKET,PID,PANE`), a container
/// engine's (`unix://…`), an editor's IPC.
const SOCKET_VARIABLES: &[&str] = &[
    "SSH_AUTH_SOCK",
    "TMUX",
    "NVIM",
    "NVIM_LISTEN_ADDRESS",
    "DOCKER_HOST",
    "CONTAINER_HOST",
    "VSCODE_IPC_HOOK",
    "VSCODE_IPC_HOOK_CLI",
    "KITTY_LISTEN_ON",
    "EMACS_SOCKET_NAME",
    "SWAYSOCK",
    "I3SOCK",
    "GPG_AGENT_INFO",
];

/// The socket's path in one of [`SOCKET_VARIABLES`]' values, when absolute.
fn socket_path(value: &str) -> Option<PathBuf> {
    let value = value.strip_prefix("unix://").or_else(|| value.strip_prefix("unix:")).unwrap_or(value);
    let path = PathBuf::from(value.split([',', ':']).next()?);
    path.is_absolute().then_some(path)
}

/// The socket paths of a D-Bus address (`unix:path=/run/user/1000/bus;unix:path=…`).
fn bus_paths(address: &str) -> Vec<PathBuf> {
    address
        .split(';')
        .filter_map(|one| one.strip_prefix("unix:"))
        .flat_map(|keys| keys.split(','))
        .filter_map(|key| key.strip_prefix("path="))
        .map(PathBuf::from)
        .filter(|path| path.is_absolute())
        .collect()
}

/// A `[sandbox]` entry: a path (absolute, or `~/…`), or a glob relative to the workspace.
enum Place<'a> {
    Path(PathBuf),
    Names(&'a str),
}

fn place<'a>(given: &'a str, home: Option<&Path>) -> Place<'a> {
    match (given.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => Place::Path(home.join(rest)),
        _ if given.starts_with('/') => Place::Path(PathBuf::from(given)),
        _ => Place::Names(given),
    }
}

fn checked_glob(setting: &str, glob: &str) -> Result<String, String> {
    if glob.is_empty() || glob.starts_with('~') {
        return Err(format!(
            "[sandbox] {setting}: `{glob}` is neither an absolute path, `~/…`, nor a pattern inside the workspace"
        ));
    }
    globset::Glob::new(glob)
        .map(|_| glob.to_owned())
        .map_err(|err| format!("[sandbox] {setting}: `{glob}` is not a valid pattern: {err}"))
}

fn child_env(providers: &BTreeMap<String, ProviderConfig>, passthrough: &[String], env: &Environment<'_>) -> ChildEnv {
    let passed = |name: &str| passthrough.iter().any(|allowed| allowed == name);
    let names: BTreeSet<&str> = KNOWN_KEYS
        .into_iter()
        .chain(providers.values().filter_map(|provider| provider.api_key_env.as_deref()))
        .filter(|name| !passed(name))
        .collect();
    let secrets: BTreeSet<String> =
        names.iter().filter_map(|name| (env.lookup)(name)).filter(|secret| !secret.is_empty()).collect();
    let mut remove: Vec<OsString> = names.iter().map(OsString::from).collect();
    for (name, value) in env.vars {
        let copy = value.to_str().is_some_and(|value| secrets.contains(value));
        if copy && !name.to_str().is_some_and(passed) && !remove.contains(name) {
            remove.push(name.clone());
        }
    }
    let path = (env.lookup)("PATH").unwrap_or_default();
    let kept: Vec<&str> = path.split(':').filter(|entry| entry.starts_with('/')).collect();
    let path = if kept.is_empty() { DEFAULT_PATH.to_owned() } else { kept.join(":") };
    let mut set = git_settings(env);
    // As root a command may not give files to other owners (the seccomp filter refuses it), and
    // GNU tar extracting as root gives each file its archive's owner, then fails: it is told
    // not to.
    if env.uid == 0 {
        let given = (env.lookup)("TAR_OPTIONS").filter(|given| !given.trim().is_empty());
        let options = given.map_or_else(|| "--no-same-owner".to_owned(), |given| format!("{given} --no-same-owner"));
        set.push(("TAR_OPTIONS".into(), options.into()));
    }
    ChildEnv { remove, path: Some(path.into()), set }
}

/// Git settings for every child, added after any the user passes the same way: git will not
/// treat a directory the model wrote (`HEAD`, `config` with `core.fsmonitor`, `objects/`) as
/// a bare repository found by itself, which would run that config's commands at `git status`;
/// and it will not run the command a misspelt one is close to (`help.autocorrect`), which
/// happens inside git where the exec check does not see it.
fn git_settings(env: &Environment<'_>) -> Vec<(OsString, OsString)> {
    let Ok(count) = (env.lookup)("GIT_CONFIG_COUNT").unwrap_or_else(|| "0".to_owned()).parse::<u32>() else {
        return Vec::new();
    };
    let settings = [("safe.bareRepository", "explicit"), ("help.autocorrect", "never")];
    let Some(total) = count.checked_add(settings.len() as u32) else { return Vec::new() };
    let mut set: Vec<(OsString, OsString)> = Vec::new();
    for (index, (key, value)) in (count..).zip(settings) {
        set.push((format!("GIT_CONFIG_KEY_{index}").into(), key.into()));
        set.push((format!("GIT_CONFIG_VALUE_{index}").into(), value.into()));
    }
    set.push(("GIT_CONFIG_COUNT".into(), total.to_string().into()));
    set
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Api;

    fn provider(key_env: &str) -> ProviderConfig {
        ProviderConfig {
            api: Api::OpenaiChat,
            base_url: String::new(),
            api_key_env: Some(key_env.to_owned()),
            api_key: None,
            models: Vec::new(),
            discover_models: false,
            prompt_cache_key: false,
        }
    }

    fn env_of(vars: &[(&str, &str)], passthrough: &[&str]) -> ChildEnv {
        let vars: Vec<(OsString, OsString)> = vars.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect();
        let lookup = |name: &str| vars.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.to_str()).map(str::to_owned);
        let providers = BTreeMap::from([("local".to_owned(), provider("LOCAL_TOKEN"))]);
        let passthrough: Vec<String> = passthrough.iter().map(|name| (*name).to_owned()).collect();
        child_env(&providers, &passthrough, &Environment { lookup: &lookup, vars: &vars, home: None, uid: 1000 })
    }

    #[test]
    fn keys_and_their_copies_are_removed_unless_passed_through() {
        let vars = [
            ("OPENAI_API_KEY", "sk-1"),
            ("LOCAL_TOKEN", "tok-local"),
            ("COPY", "sk-1"),
            ("OTHER", "fine"),
            ("EMPTY", ""),
            ("ANTHROPIC_API_KEY", ""),
        ];
        let env = env_of(&vars, &[]);
        let mut removed: Vec<&str> = env.remove.iter().filter_map(|name| name.to_str()).collect();
        removed.sort_unstable();
        assert_eq!(removed, ["ANTHROPIC_API_KEY", "CAIRN_SERVE_TOKEN", "COPY", "LOCAL_TOKEN", "OPENAI_API_KEY"]);

        let env = env_of(&vars, &["OPENAI_API_KEY"]);
        let removed: Vec<&str> = env.remove.iter().filter_map(|name| name.to_str()).collect();
        assert!(!removed.contains(&"OPENAI_API_KEY") && !removed.contains(&"COPY"), "{removed:?}");
        assert!(removed.contains(&"LOCAL_TOKEN"));
    }

    #[test]
    fn git_is_told_to_refuse_bare_repositories_it_finds_by_itself_and_not_to_autocorrect() {
        let env = env_of(&[], &[]);
        let set: Vec<(&str, &str)> = env.set.iter().map(|(k, v)| (k.to_str().unwrap(), v.to_str().unwrap())).collect();
        assert_eq!(
            set,
            [
                ("GIT_CONFIG_KEY_0", "safe.bareRepository"),
                ("GIT_CONFIG_VALUE_0", "explicit"),
                ("GIT_CONFIG_KEY_1", "help.autocorrect"),
                ("GIT_CONFIG_VALUE_1", "never"),
                ("GIT_CONFIG_COUNT", "2")
            ]
        );
        let env = env_of(&[("GIT_CONFIG_COUNT", "2")], &[]);
        assert_eq!(env.set[0].0.to_str(), Some("GIT_CONFIG_KEY_2"), "after the user's own settings");
        assert_eq!(env.set[2].0.to_str(), Some("GIT_CONFIG_KEY_3"));
        assert_eq!(env.set.last().map(|(k, v)| (k.to_str(), v.to_str())), Some((Some("GIT_CONFIG_COUNT"), Some("4"))));
        assert!(env_of(&[("GIT_CONFIG_COUNT", "x")], &[]).set.is_empty(), "git refuses a bad count itself");
    }

    fn sandbox_of(text: &str, home: Option<&Path>) -> Result<Arc<ProcessPolicy>, String> {
        let sandbox: FileSandbox = toml::from_str(text).unwrap();
        let lookup = |_: &str| None;
        let env = Environment { lookup: &lookup, vars: &[], home, uid: 1000 };
        policy(sandbox, &FileTools::default(), &BTreeMap::new(), &env, &[PathBuf::from("/data/cairn")])
    }

    #[test]
    fn keys_and_credentials_in_home_are_hidden_unless_made_visible() {
        let home = Path::new("/home/u");
        let policy = sandbox_of("", Some(home)).unwrap();
        for secret in [
            ".ssh",
            ".aws",
            ".gnupg",
            ".config/gh",
            ".netrc",
            ".docker/config.json",
            ".kube",
            ".mozilla",
            ".npmrc",
            ".vault-token",
        ] {
            assert!(policy.hidden.contains(&home.join(secret)), "{secret}");
        }
        assert_eq!(policy.own, [PathBuf::from("/data/cairn")]);
        let policy = sandbox_of(
            "hidden = [\"/srv/keys\", \"secrets/**\"]\nvisible = [\"~/.aws\", \".env.example\"]",
            Some(home),
        )
        .unwrap();
        assert!(policy.hidden.contains(&PathBuf::from("/srv/keys")));
        assert!(!policy.hidden.contains(&home.join(".aws")));
        assert_eq!(policy.hidden_names, ["secrets/**"]);
        assert_eq!(policy.visible_names, [".env.example"]);
        let err = sandbox_of("hidden = [\"[z-a\"]", Some(home)).unwrap_err();
        assert!(err.contains("[sandbox] hidden") && err.contains("[z-a"), "{err}");
        let err = sandbox_of("writable = [\"relative\"]", Some(home)).unwrap_err();
        assert!(err.contains("absolute"), "{err}");
    }

    #[test]
    fn the_users_own_services_are_hidden_where_their_variables_and_names_put_them() {
        let vars = [
            ("XDG_RUNTIME_DIR", "/run/user/1000"),
            ("SSH_AUTH_SOCK", "/tmp/ssh-AbC/agent.7"),
            ("DBUS_SESSION_BUS_ADDRESS", "unix:guid=1,path=/run/bus-x;tcp:host=h;unix:abstract=/q"),
            ("TMUX_TMPDIR", "/run/user/1000/tmux"),
            ("TMPDIR", "/run/user/1000/tmp"),
            ("USER", "ann"),
        ];
        let lookup = |name: &str| vars.iter().find(|(known, _)| *known == name).map(|(_, value)| (*value).to_owned());
        let sandbox: FileSandbox = toml::from_str("visible = [\"/run/docker.sock\"]").unwrap();
        let env = Environment { lookup: &lookup, vars: &[], home: None, uid: 1000 };
        let policy = policy(sandbox, &FileTools::default(), &BTreeMap::new(), &env, &[]).unwrap();
        assert!(policy.hidden.contains(&PathBuf::from("/run/user/1000")), "though TMPDIR is in it");
        assert!(!policy.writable.contains(&PathBuf::from("/run/user/1000/tmp")));
        assert!(policy.env.set.contains(&("TMPDIR".into(), "/tmp".into())), "commands use /tmp instead");
        for hidden in [
            "/run/user/1000/tmux/tmux-1000",
            "/tmp/ssh-AbC/agent.7",
            "/run/bus-x",
            "/tmp/tmux-1000",
            "/tmp/tmux-1000",
            "/tmp/nvim.ann",
            "/tmp/emacs1000",
            "/tmp/.X11-unix",
            "/run/dbus/system_bus_socket",
            "/run/systemd/private",
        ] {
            assert!(policy.hidden.contains(&PathBuf::from(hidden)), "{hidden}");
        }
        assert!(!policy.hidden.contains(&PathBuf::from("/run/docker.sock")), "made visible");
        // Those the servers make themselves are made first, where a server would look for
        // them, unless they lie in a covered place already (tmux's is in the runtime dir).
        let made: Vec<&str> = policy.service_dirs.iter().filter_map(|dir| dir.to_str()).collect();
        assert_eq!(made, ["/tmp/zellij-1000", "/tmp/emacs1000", "/tmp/nvim.ann"]);
        let env = Environment { lookup: &|_: &str| None, vars: &[], home: Some(Path::new("/home/ann")), uid: 1000 };
        let policy = super::policy(FileSandbox::default(), &FileTools::default(), &BTreeMap::new(), &env, &[]).unwrap();
        for default in ["/home/ann/.local/share/cairn", "/home/ann/.config/cairn"] {
            assert!(policy.hidden.contains(&PathBuf::from(default)), "another cairn's {default}");
        }
        let made: Vec<&str> = policy.service_dirs.iter().filter_map(|dir| dir.to_str()).collect();
        assert_eq!(made, ["/tmp/tmux-1000", "/tmp/zellij-1000", "/tmp/emacs1000"], "never `.X11-unix`, shared");
        assert!(!policy.hidden.iter().any(|path| path.to_str().is_some_and(|path| path.contains("abstract"))));
        assert_eq!(bus_paths("unix:path=relative"), Vec::<PathBuf>::new());
        assert_eq!(socket_path("/tmp/tmux-1000/work,123,0"), Some(PathBuf::from("/tmp/tmux-1000/work")));
        assert_eq!(socket_path("unix:///run/user/1000/docker.sock"), Some(PathBuf::from("/run/user/1000/docker.sock")));
        assert_eq!(socket_path("unix:/tmp/kitty-x"), Some(PathBuf::from("/tmp/kitty-x")));
        assert_eq!(socket_path("tcp://127.0.0.1:2375"), None);
        assert_eq!(socket_path("relative"), None);
    }

    #[test]
    fn a_writable_place_holding_a_directory_on_path_is_named() {
        let path = "/usr/bin:/home/u/.bun/bin:/home/u/go/bin:relative";
        assert_eq!(programs_within(Path::new("/home/u/.bun"), Some(path)), [PathBuf::from("/home/u/.bun/bin")]);
        assert_eq!(programs_within(Path::new("/home/u/.cache"), Some(path)), Vec::<PathBuf>::new());
        assert_eq!(programs_within(Path::new("/home/u/.bun"), None), Vec::<PathBuf>::new());
    }

    #[test]
    fn roots_tar_keeps_no_archives_owners() {
        let vars: Vec<(OsString, OsString)> = vec![("TAR_OPTIONS".into(), "--warning=no-timestamp".into())];
        let lookup = |name: &str| vars.iter().find(|(k, _)| k == name).and_then(|(_, v)| v.to_str()).map(str::to_owned);
        let as_uid =
            |uid| child_env(&BTreeMap::new(), &[], &Environment { lookup: &lookup, vars: &vars, home: None, uid });
        let tar = |env: ChildEnv| env.set.into_iter().find(|(name, _)| name == "TAR_OPTIONS").map(|(_, value)| value);
        assert_eq!(tar(as_uid(0)), Some("--warning=no-timestamp --no-same-owner".into()), "the user's options kept");
        assert_eq!(tar(as_uid(1000)), None, "tar keeps no owners but root's");
    }

    #[test]
    fn path_keeps_only_absolute_entries() {
        let env = env_of(&[("PATH", ".:/usr/bin::bin:/bin:")], &[]);
        assert_eq!(env.path.as_deref(), Some("/usr/bin:/bin".as_ref()));
        let env = env_of(&[("PATH", "./x:")], &[]);
        assert_eq!(env.path.as_deref(), Some(DEFAULT_PATH.as_ref()), "nothing usable left: the default");
        let env = env_of(&[], &[]);
        assert_eq!(env.path.as_deref(), Some(DEFAULT_PATH.as_ref()), "bash's own default would end with `.`");
    }
}
