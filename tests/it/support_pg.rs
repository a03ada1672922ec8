//! A throwaway PostgreSQL server for the tests of this process, and a fresh
//! database on it per test.
//!
//! The server is made by `initdb` in a temporary folder (as the `postgres` user
//! when the tests run as root, since the server refuses to run as root), listens
//! on no TCP address, only on a unix socket in that folder, and is started with
//! `pg_ctl -w` (a bounded wait). It lives while any test holds a `PgDb`: the last
//! one dropped stops it (`pg_ctl stop -m immediate`) and removes the folder. A
//! missing server binary fails the test that needs it, saying what to install;
//! it is never a skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tempfile::TempDir;

use crate::support::{Daemon, Site, spoolite};

/// How long `pg_ctl` waits for the server to start or stop, in seconds.
const PG_CTL_WAIT_SECS: &str = "60";

/// The superuser `initdb` creates; tests connect as it (trust over the socket).
const SUPERUSER: &str = "spoolite_test";

/// The running server, shared by every test that holds a `PgDb`.
static SERVER: Mutex<Weak<Server>> = Mutex::new(Weak::new());

/// Numbers the databases made in this process.
static NEXT_DB: AtomicU64 = AtomicU64::new(0);

/// One test's database on the shared server. Dropping it drops the database (the
/// server, with everything in it, goes when the last `PgDb` does).
pub struct PgDb {
    server: Arc<Server>,
    name: String,
}

impl PgDb {
    /// A new, empty database on the test server (started now if none runs).
    pub fn new() -> PgDb {
        PgDb::on(Server::shared())
    }

    /// A new, empty database on `server`: a test's own server (`Server::own`),
    /// which it may stop and start again.
    pub fn on(server: Arc<Server>) -> PgDb {
        let name = format!(
            "spoolite_{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::SeqCst)
        );
        server.admin(&format!("CREATE DATABASE {name}"));
        PgDb { server, name }
    }

    /// The database's libpq URI, as a user passes it to `--db`: the socket folder
    /// in `host=`.
    pub fn uri(&self) -> String {
        format!(
            "postgresql:///{}?host={}&port={}&user={SUPERUSER}",
            self.name,
            self.server.socket_dir().display(),
            self.server.port
        )
    }

    /// The server this database is on.
    pub fn server(&self) -> &Arc<Server> {
        &self.server
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The folder the server's unix socket is in.
    pub fn socket_dir(&self) -> &Path {
        self.server.socket_dir()
    }

    /// A client connection to this database.
    pub fn client(&self) -> postgres::Client {
        postgres::Client::connect(&self.uri(), postgres::NoTls)
            .unwrap_or_else(|e| panic!("connect to {}: {e}", self.uri()))
    }

    /// The rows of `sql`, whose columns must all be text (cast them), in the
    /// order the query gives; NULL reads `NULL`.
    pub fn query(&self, sql: &str) -> Vec<Vec<String>> {
        self.client()
            .query(sql, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        row.get::<_, Option<String>>(i)
                            .unwrap_or_else(|| "NULL".to_owned())
                    })
                    .collect()
            })
            .collect()
    }

    /// Every row of `sql`'s result as text (`NULL` for null), sorted, so that two
    /// databases compare as wholes. Each column is cast to text by the server.
    pub fn rows(&self, sql: &str) -> Vec<String> {
        let mut client = self.client();
        let wrapped = format!("SELECT to_jsonb(r)::text FROM ({sql}) AS r");
        let mut rows: Vec<String> = client
            .query(&wrapped, &[])
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .iter()
            .map(|row| row.get::<_, String>(0))
            .collect();
        rows.sort();
        rows
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        // A test that failed while connected may still hold a session: FORCE.
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = self.server.try_admin(&drop) {
            eprintln!("test server: {drop}: {e}");
        }
    }
}

/// Starts `spoolite run` on `site` into `uri` (`--settle 100ms`, then `extra`)
/// and waits until it serves the spool.
pub fn start_daemon(site: &Site, uri: &str, extra: &[&str]) -> Daemon {
    let mut command = spoolite();
    command
        .args(["run", "--settle", "100ms", "--spool"])
        .arg(&site.spool)
        .args(["--db", uri])
        .args(extra);
    let mut daemon = site.spawn(&mut command);
    daemon.wait_serving(site);
    daemon
}

/// A PostgreSQL server in a temporary folder: `data/` holds the cluster, the
/// folder itself the socket and `server.log`.
pub struct Server {
    dir: TempDir,
    bin: PathBuf,
    /// The `-o` options the server was started with, to start it again.
    options: String,
    /// The port (`-c port=N` among the options, else 5432), which names the socket too.
    port: u16,
}

impl Server {
    /// The server the tests share, started when none runs.
    fn shared() -> Arc<Server> {
        let mut shared = SERVER.lock().unwrap_or_else(|poison| poison.into_inner());
        if let Some(server) = shared.upgrade() {
            return server;
        }
        let server = Arc::new(Server::start(""));
        *shared = Arc::downgrade(&server);
        server
    }

    /// A server of the calling test's own, so that it may stop it and start it
    /// again, started with `extra` added to its `-o` options (e.g.
    /// `-c listen_addresses='127.0.0.1' -c port=N`). Stopped and removed when the
    /// last `PgDb` on it and the returned handle are dropped.
    pub fn own(extra: &str) -> Arc<Server> {
        Arc::new(Server::start(extra))
    }

    fn start(extra: &str) -> Server {
        let bin = server_bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("spoolite-pg-")
            .tempdir()
            .expect("temp dir for the test server");
        let as_postgres = running_as_root();
        if as_postgres {
            // The server refuses to run as root: the folder is the postgres user's.
            let status = Command::new("chown")
                .args(["postgres:postgres"])
                .arg(dir.path())
                .status()
                .expect("run chown");
            assert!(
                status.success(),
                "chown {} to the postgres user failed; the test server needs an OS \
                 user `postgres` when the tests run as root",
                dir.path().display()
            );
        }
        let data = dir.path().join("data");
        let mut initdb = pg_command(&bin, "initdb", as_postgres);
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", SUPERUSER, "-A", "trust", "-E", "UTF8", "--locale=C"])
            // The cluster is thrown away with the test process: initdb need not
            // wait for its files to reach the disk. The server itself keeps fsync.
            .arg("--no-sync");
        if let Err(message) = run(&mut initdb, "initdb") {
            panic!("{message}");
        }
        let options = format!(
            "-c listen_addresses='' -c unix_socket_directories='{}' -c max_connections=100 \
             -c shared_buffers=16MB {extra}",
            dir.path().display()
        );
        let port = extra
            .split_whitespace()
            .find_map(|option| option.strip_prefix("port=")?.parse().ok())
            .unwrap_or(5432);
        let server = Server {
            dir,
            bin,
            options,
            port,
        };
        server.start_again();
        server
    }

    /// Starts the (stopped) server again, with the options it first had; waits
    /// until it accepts connections.
    pub fn start_again(&self) {
        let mut start = pg_command(&self.bin, "pg_ctl", running_as_root());
        start
            .args(["start", "-w", "-t", PG_CTL_WAIT_SECS, "-D"])
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.dir.path().join("server.log"))
            .args(["-o", &self.options]);
        if let Err(message) = run(&mut start, "pg_ctl start") {
            let log =
                std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
            panic!("{message}\nserver.log:\n{log}");
        }
    }

    /// Stops the server (`pg_ctl stop -m mode`: `fast` ends every session,
    /// `immediate` is a crash), waiting until it is down.
    pub fn stop(&self, mode: &str) {
        let mut stop = pg_command(&self.bin, "pg_ctl", running_as_root());
        stop.args(["stop", "-w", "-t", PG_CTL_WAIT_SECS, "-m", mode, "-D"])
            .arg(self.data_dir());
        if let Err(message) = run(&mut stop, "pg_ctl stop") {
            panic!("test server: {message}");
        }
    }

    /// The cluster's folder (`postgresql.conf`, `pg_hba.conf`), owned by the
    /// postgres user when the tests run as root.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// The folder the server's unix socket is in.
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The port it listens on (TCP, when `listen_addresses` has an address), which
    /// also names its socket.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log (`server.log` in its folder).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn admin_uri(&self) -> String {
        format!(
            "postgresql:///postgres?host={}&port={}&user={SUPERUSER}",
            self.socket_dir().display(),
            self.port
        )
    }

    /// Runs one statement in the `postgres` database, as the superuser.
    pub fn try_admin(&self, sql: &str) -> Result<(), postgres::Error> {
        let mut client = postgres::Client::connect(&self.admin_uri(), postgres::NoTls)?;
        client.batch_execute(sql)
    }

    pub fn admin(&self, sql: &str) {
        self.try_admin(sql)
            .unwrap_or_else(|e| panic!("test server: {sql}: {e}"));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let mut stop = pg_command(&self.bin, "pg_ctl", running_as_root());
        stop.args([
            "stop",
            "-w",
            "-t",
            PG_CTL_WAIT_SECS,
            "-m",
            "immediate",
            "-D",
        ])
        .arg(self.data_dir());
        // A server the test stopped itself is already down.
        if let Err(message) = run(&mut stop, "pg_ctl stop") {
            eprintln!("test server: {message}");
        }
        // The TempDir removes the folder (root may remove the postgres user's files).
    }
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The folder holding `initdb`, `pg_ctl` and `postgres`: the one on PATH, else
/// the newest of Debian's `/usr/lib/postgresql/*/bin`. None found fails the test.
fn server_bin_dir() -> PathBuf {
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|name| dir.join(name).is_file())
    };
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if has_all(&dir) {
                return dir;
            }
        }
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_all(bin))
        .collect();
    debian.sort();
    match debian.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "the PostgreSQL tests need a PostgreSQL server (initdb, pg_ctl, postgres) on \
             PATH or in /usr/lib/postgresql/VERSION/bin; install it, e.g. \
             `apt-get install postgresql` (.ci/run does)"
        ),
    }
}

/// `program` from `bin`, run as the postgres user when `as_postgres`.
fn pg_command(bin: &Path, program: &str, as_postgres: bool) -> Command {
    let program = bin.join(program);
    if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command, what: &str) -> Result<Output, String> {
    let output = command
        .output()
        .map_err(|e| format!("{what}: cannot run {command:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(output)
}

#[test]
fn a_test_may_stop_its_own_server_and_start_it_again() {
    let db = PgDb::on(Server::own(""));
    db.client()
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .expect("write");
    db.server().stop("fast");
    assert!(
        postgres::Client::connect(&db.uri(), postgres::NoTls).is_err(),
        "a stopped server refuses connections"
    );
    db.server().start_again();
    assert_eq!(db.rows("SELECT x FROM t"), ["{\"x\": 1}"]);
}

#[test]
fn the_test_server_gives_each_test_a_database_of_its_own() {
    let first = PgDb::new();
    let second = PgDb::new();
    assert_ne!(first.name(), second.name());
    first
        .client()
        .batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .expect("write the first database");
    assert_eq!(first.rows("SELECT x FROM t"), ["{\"x\": 1}"]);
    let missing = second.client().query("SELECT x FROM t", &[]);
    assert!(missing.is_err(), "the second database is empty");
    // No TCP: only the socket in the server's folder.
    let listen: String = first
        .client()
        .query_one("SHOW listen_addresses", &[])
        .expect("show")
        .get(0);
    assert_eq!(listen, "");
}
