//! A throwaway PostgreSQL server for the tests of this process, and a fresh
//! database on it per test.
//!
//! The server is the test kit's (`spoolite_testkit::pg`): made by `initdb` in a
//! temporary folder (as the `postgres` user when the tests run as root, since the
//! server refuses to run as root), listening on no TCP address, only on a unix
//! socket in that folder, and started with `pg_ctl -w` (a bounded wait). It lives
//! while any test holds a `PgDb`: the last one dropped stops it (`pg_ctl stop -m
//! immediate`) and removes the folder. A missing server binary fails the test
//! that needs it, saying what to install; it is never a skip.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use spoolite_testkit::pg;

use crate::support::{Daemon, Site, spoolite};

/// How long `pg_ctl` waits for the server to start or stop, in seconds.
const PG_CTL_WAIT_SECS: u32 = 60;

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
        self.server.0.uri(&self.name)
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

/// A PostgreSQL server in a temporary folder (the test kit's, `spoolite_testkit::pg`):
/// `data/` holds the cluster, the folder itself the socket and `server.log`.
/// Its methods panic on failure, naming what failed.
pub struct Server(pg::Server);

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
        let config = pg::Config {
            superuser: SUPERUSER.to_owned(),
            place: pg::Place::Temp {
                prefix: "spoolite-pg-".to_owned(),
            },
            settings: format!("-c max_connections=100 -c shared_buffers=16MB {extra}"),
            wait_secs: PG_CTL_WAIT_SECS,
        };
        match pg::Server::start(config) {
            Ok(server) => Server(server),
            Err(message) => panic!(
                "the PostgreSQL tests need a server of their own: {message}\n(.ci/run \
                 installs PostgreSQL; as root, the tests need an OS user `postgres`)"
            ),
        }
    }

    /// Starts the (stopped) server again, with the options it first had; waits
    /// until it accepts connections.
    pub fn start_again(&self) {
        self.0
            .start_again()
            .unwrap_or_else(|message| panic!("{message}"));
    }

    /// Stops the server (`pg_ctl stop -m mode`: `fast` ends every session,
    /// `immediate` is a crash), waiting until it is down.
    pub fn stop(&self, mode: &str) {
        self.0
            .stop(mode)
            .unwrap_or_else(|message| panic!("test server: {message}"));
    }

    /// The cluster's folder (`postgresql.conf`, `pg_hba.conf`), owned by the
    /// postgres user when the tests run as root.
    pub fn data_dir(&self) -> PathBuf {
        self.0.data_dir()
    }

    /// The folder the server's unix socket is in.
    pub fn socket_dir(&self) -> &Path {
        self.0.socket_dir()
    }

    /// The port it listens on (TCP, when `listen_addresses` has an address), which
    /// also names its socket.
    pub fn port(&self) -> u16 {
        self.0.port()
    }

    /// The server's log (`server.log` in its folder).
    pub fn log(&self) -> String {
        self.0.log()
    }

    /// Runs one statement in the `postgres` database, as the superuser.
    pub fn try_admin(&self, sql: &str) -> Result<(), postgres::Error> {
        self.0.admin(sql)
    }

    pub fn admin(&self, sql: &str) {
        self.try_admin(sql)
            .unwrap_or_else(|e| panic!("test server: {sql}: {e}"));
    }
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
