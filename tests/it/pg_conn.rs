//! Connecting to PostgreSQL over TCP as a remote site does: `sslmode` (require,
//! verify-full with `sslrootcert`, disable), the password from a file
//! (`--db-password-file`, `SPOOLITE_DB_PASSWORD_FILE`) or the URI, and what each
//! mistake looks like. The server is the tests' own, with TLS on 127.0.0.1, a CA
//! and a certificate made by `openssl` for the name `db.spoolite.test`, and a
//! pg_hba.conf that takes TCP connections only over TLS with a SCRAM password.

use std::fs;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;

use crate::support::{
    Site, assert_unit_verifies, event, json_batch, off_blocks, spoolite, unit_copy, wait_until,
    write,
};
use crate::support_pg::{PgDb, Server};

/// The name the server's certificate is for; `hostaddr=127.0.0.1` beside it in
/// the URI, so that no name service is asked.
const CERT_HOST: &str = "db.spoolite.test";

/// The TLS server the tests of this file share (started when none runs).
static SHARED: Mutex<Weak<TlsServer>> = Mutex::new(Weak::new());

/// A server listening on 127.0.0.1 with TLS, and the files its certificate came
/// from: `ca.pem` (the CA that signed it) and `other-ca.pem` (one that did not).
pub(crate) struct TlsServer {
    server: Arc<Server>,
    certs: TempDir,
}

impl TlsServer {
    pub(crate) fn shared() -> Arc<TlsServer> {
        let mut shared = SHARED.lock().unwrap_or_else(|poison| poison.into_inner());
        if let Some(server) = shared.upgrade() {
            return server;
        }
        let server = Arc::new(TlsServer::start());
        *shared = Arc::downgrade(&server);
        server
    }

    fn start() -> TlsServer {
        let certs = make_certificates();
        let port = free_port();
        let dir = certs.path();
        let server = Server::own(&format!(
            "-c listen_addresses='127.0.0.1' -c port={port} -c ssl=on \
             -c ssl_cert_file='{}' -c ssl_key_file='{}' -c log_connections=on",
            dir.join("server.crt").display(),
            dir.join("server.key").display()
        ));
        // The socket keeps `trust` for the tests' superuser; TCP takes only TLS
        // with a SCRAM password (no `host` line: a plain connection has no entry).
        let hba = server.data_dir().join("pg_hba.conf");
        fs::write(
            &hba,
            "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
        )
        .expect("write pg_hba.conf");
        server.admin("SELECT pg_reload_conf()");
        let tls = TlsServer { server, certs };
        // The reload is the postmaster's, a moment later: wait until a plain TCP
        // connection meets the new rules.
        wait_until(
            Duration::from_secs(20),
            "pg_hba.conf to be reloaded",
            || {
                let plain = format!(
                    "postgresql://nobody:x@127.0.0.1:{port}/postgres?sslmode=disable&connect_timeout=5"
                );
                postgres::Client::connect(&plain, postgres::NoTls)
                    .err()
                    .and_then(|e| e.as_db_error().map(|db| db.message().to_owned()))
                    .is_some_and(|message| message.contains("no encryption"))
            },
        );
        tls
    }

    fn cert(&self, name: &str) -> PathBuf {
        self.certs.path().join(name)
    }

    /// A database on the server, owned by a role of its own that logs in with a
    /// password: `(database, role, password)`.
    pub(crate) fn database(&self) -> (PgDb, String, String) {
        let db = PgDb::on(self.server.clone());
        let role = format!("ingest_{}", db.name());
        // Distinctive, so that a grep of any output finds it if it leaked.
        let password = format!("Sesame-{}-q7Zp", db.name());
        self.server.admin(&format!(
            "CREATE ROLE {role} LOGIN PASSWORD '{password}'; \
             ALTER DATABASE {} OWNER TO {role}",
            db.name()
        ));
        (db, role, password)
    }

    /// A URI for `role` on `db` over TCP, with `params` (e.g. `sslmode=require`).
    pub(crate) fn uri(&self, db: &PgDb, role: &str, host: &str, params: &str) -> String {
        format!(
            "postgresql://{role}@{host}:{}/{}?hostaddr=127.0.0.1&{params}",
            self.server.port(),
            db.name()
        )
    }

    /// `uri` with `sslmode=MODE` (`verify-ca`, `verify-full`) against the CA
    /// certificate in `ca`.
    pub(crate) fn checked_uri(
        &self,
        db: &PgDb,
        role: &str,
        host: &str,
        mode: &str,
        ca: &Path,
    ) -> String {
        let params = format!("sslmode={mode}&sslrootcert={}", ca.display());
        self.uri(db, role, host, &params)
    }
}

/// A port nobody listens on now (the kernel's pick for 127.0.0.1:0).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl (apt-get install openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA, a server certificate it signed for `CERT_HOST`, and a second CA that
/// signed nothing, in a folder the server's user can read; the key is readable by
/// that user alone (the server refuses it otherwise).
fn make_certificates() -> TempDir {
    let certs = tempfile::tempdir().expect("temp dir for certificates");
    let dir = certs.path();
    fs::set_permissions(dir, fs::Permissions::from_mode(0o755)).expect("chmod");
    let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];
    for (name, subject) in [("ca", "spoolite test CA"), ("other-ca", "another CA")] {
        let (key_file, cert_file) = (format!("{name}.key"), format!("{name}.pem"));
        let subject = format!("/CN={subject}");
        let mut args = vec!["req", "-x509", "-nodes", "-days", "3"];
        args.extend(key);
        args.extend(["-keyout", &key_file, "-out", &cert_file, "-subj", &subject]);
        args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
        args.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
        openssl(dir, &args);
    }
    let subject = format!("/CN={CERT_HOST}");
    let mut args = vec![
        "req",
        "-nodes",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ];
    args.extend(key);
    args.extend(["-subj", &subject]);
    openssl(dir, &args);
    write(
        dir,
        "server.ext",
        format!(
            "subjectAltName=DNS:{CERT_HOST}\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        ),
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "3",
            "-extfile",
            "server.ext",
            "-out",
            "server.crt",
        ],
    );
    for file in ["ca.pem", "other-ca.pem", "server.crt"] {
        fs::set_permissions(dir.join(file), fs::Permissions::from_mode(0o644)).expect("chmod");
    }
    let server_key = dir.join("server.key");
    fs::set_permissions(&server_key, fs::Permissions::from_mode(0o600)).expect("chmod key");
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        let status = Command::new("chown")
            .arg("postgres:postgres")
            .arg(&server_key)
            .status()
            .expect("run chown");
        assert!(status.success(), "chown the server key to postgres");
    }
    certs
}

/// A batch of two events of one flight.
fn batch() -> String {
    json_batch(&[
        off_blocks(1, "{\"gate\":\"A1\"}"),
        event(
            "BA0117-20261129",
            "takeoff",
            "2026-11-29T10:20:00Z",
            Some(1),
            "{}",
        ),
    ])
}

/// `spoolite ingest --json --db URI FILE` with `extra` arguments.
fn ingest(uri: &str, file: &Path, configure: impl FnOnce(&mut Command)) -> Output {
    let mut command = spoolite();
    command.args(["ingest", "--json", "--db", uri]);
    configure(&mut command);
    command.arg(file).output().expect("run spoolite ingest")
}

fn text(output: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The outcome of the one file of a successful `ingest --json`.
fn outcome(output: &Output) -> String {
    let (stdout, stderr) = text(output);
    assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
    let line: Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    line["outcome"].as_str().expect("an outcome").to_owned()
}

/// How many batches the database holds (0 when spoolite never made its schema).
fn batches(db: &PgDb) -> i64 {
    if db.query("SELECT (to_regclass('ingest_inbox') IS NULL)::text") == [["true"]] {
        return 0;
    }
    db.query("SELECT count(*)::text FROM ingest_inbox")[0][0]
        .parse()
        .expect("a count")
}

/// A file holding `content` in the test's folder.
fn password_file(dir: &Path, content: &str) -> PathBuf {
    write(dir, "db-password", content)
}

/// Asserts that an `ingest` failed as an operating error (exit 2), ingested
/// nothing, and said each of `expected` on stderr; returns stderr.
fn refused(output: &Output, db: &PgDb, expected: &[&str]) -> String {
    let (stdout, stderr) = text(output);
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert_eq!(stdout, "", "no outcome line");
    for words in expected {
        assert!(stderr.contains(words), "stderr lacks {words:?}: {stderr}");
    }
    assert_eq!(batches(db), 0, "nothing ingested");
    stderr
}

#[test]
fn require_encrypts_and_verify_full_checks_the_ca_and_the_name() {
    let tls = TlsServer::shared();
    let (db, role, password) = tls.database();
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = password_file(dir.path(), &format!("{password}\n"));
    let file = write(dir.path(), "day1.json", batch());
    let with_password = |command: &mut Command| {
        command.arg("--db-password-file").arg(&secret);
    };

    // require: encrypted, no certificate checked (the CA is not given).
    let require = tls.uri(&db, &role, "127.0.0.1", "sslmode=require");
    assert_eq!(
        outcome(&ingest(&require, &file, with_password)),
        "processed"
    );
    // The server logged that session as TLS.
    let log = tls.server.log();
    let session = log
        .lines()
        .rfind(|line| line.contains("connection authorized") && line.contains(&role))
        .unwrap_or_else(|| panic!("no session of {role} in the server log:\n{log}"));
    assert!(session.contains("SSL enabled"), "{session}");

    // verify-full with the CA that signed the certificate and its name.
    let ca = tls.cert("ca.pem");
    let verify_full = |host: &str, ca: &Path| tls.checked_uri(&db, &role, host, "verify-full", ca);
    let good = verify_full(CERT_HOST, &ca);
    assert_eq!(
        outcome(&ingest(&good, &file, with_password)),
        "skipped_duplicate"
    );
    // verify-ca checks the chain but not the name.
    let verify_ca = tls.checked_uri(&db, &role, "other.spoolite.test", "verify-ca", &ca);
    assert_eq!(
        outcome(&ingest(&verify_ca, &file, with_password)),
        "skipped_duplicate"
    );
    assert_eq!(batches(&db), 1);
}

#[test]
fn verify_full_refuses_a_wrong_ca_a_wrong_name_and_a_missing_ca_file() {
    let tls = TlsServer::shared();
    let (db, role, password) = tls.database();
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = password_file(dir.path(), &password);
    let file = write(dir.path(), "day1.json", batch());
    let with_password = |command: &mut Command| {
        command.arg("--db-password-file").arg(&secret);
    };
    let verify_full = |host: &str, ca: &Path| tls.checked_uri(&db, &role, host, "verify-full", ca);

    let wrong_ca = verify_full(CERT_HOST, &tls.cert("other-ca.pem"));
    let output = ingest(&wrong_ca, &file, with_password);
    refused(
        &output,
        &db,
        &[
            &format!("connect to PostgreSQL database {wrong_ca}"),
            "certificate verify failed",
            "does not verify against the CA in sslrootcert=",
            "point sslrootcert at the CA that signed it",
        ],
    );

    // The right CA, but the certificate is not for the name connected to.
    let wrong_name = verify_full("other.spoolite.test", &tls.cert("ca.pem"));
    let output = ingest(&wrong_name, &file, with_password);
    refused(
        &output,
        &db,
        &[
            &format!("connect to PostgreSQL database {wrong_name}"),
            "hostname mismatch",
            "not for the host the URI names",
        ],
    );

    // require with a CA file checks the chain too, as libpq does.
    let require_wrong_ca = tls.uri(
        &db,
        &role,
        CERT_HOST,
        &format!(
            "sslmode=require&sslrootcert={}",
            tls.cert("other-ca.pem").display()
        ),
    );
    let output = ingest(&require_wrong_ca, &file, with_password);
    refused(&output, &db, &["certificate verify failed"]);

    let missing = dir.path().join("no-such-ca.pem");
    let no_ca_file = verify_full(CERT_HOST, &missing);
    let output = ingest(&no_ca_file, &file, with_password);
    refused(
        &output,
        &db,
        &[&format!(
            "read the CA file sslrootcert={}: No such file or directory",
            missing.display()
        )],
    );

    let no_ca = tls.uri(&db, &role, CERT_HOST, "sslmode=verify-full");
    let output = ingest(&no_ca, &file, with_password);
    refused(&output, &db, &["need sslrootcert=FILE"]);

    // A plain connection to a server that takes TCP only over TLS.
    let disable = tls.uri(&db, &role, "127.0.0.1", "sslmode=disable");
    let output = ingest(&disable, &file, with_password);
    refused(
        &output,
        &db,
        &[
            "no encryption",
            "the server takes this connection only encrypted: use sslmode=require",
        ],
    );
}

#[test]
fn a_daemon_that_cannot_verify_the_server_keeps_the_file_in_incoming() {
    let tls = TlsServer::shared();
    let (db, role, password) = tls.database();
    let mut site = Site::new();
    let secret = password_file(site.dir.path(), &password);
    site.db = PathBuf::from(tls.uri(
        &db,
        &role,
        CERT_HOST,
        &format!(
            "sslmode=verify-full&sslrootcert={}",
            tls.cert("other-ca.pem").display()
        ),
    ));
    let mut daemon = site.spawn(
        site.run_command()
            .args(["--settle", "100ms"])
            .env("SPOOLITE_DB_PASSWORD_FILE", &secret),
    );
    daemon.wait_serving(&site);
    site.drop_file("day1.json", batch());
    // The daemon tried the file, met the fault and says so in its state.
    let mut status = Value::Null;
    daemon.wait(
        Duration::from_secs(20),
        "status to report the database fault",
        || {
            let output = site
                .status_command()
                .arg("--json")
                .arg("--db-password-file")
                .arg(&secret)
                .output()
                .expect("run status");
            status = serde_json::from_slice(&output.stdout).unwrap_or(Value::Null);
            status["database_fault"]["error"]
                .as_str()
                .is_some_and(|error| error.contains("certificate verify failed"))
        },
    );
    assert_eq!(status["incoming_waiting"], 1, "{status}");
    assert_eq!(site.waiting(), ["day1.json"]);
    assert!(site.archived().is_empty() && site.rejected_names().is_empty());
    assert_eq!(batches(&db), 0);
    let log = daemon.log();
    assert!(
        log.contains("point sslrootcert at the CA that signed it"),
        "{log}"
    );
    assert!(!log.contains(&password) && !status.to_string().contains(&password));
}

#[test]
fn a_password_file_works_for_every_command_and_never_shows() {
    let tls = TlsServer::shared();
    let (db, role, password) = tls.database();
    let mut site = Site::new();
    let dir = site.dir.path().to_owned();
    let secret = password_file(&dir, &format!("{password}\n"));
    let uri = tls.uri(&db, &role, "127.0.0.1", "sslmode=require");
    site.db = PathBuf::from(&uri);
    let mut outputs = String::new();
    let mut keep = |output: &Output| {
        let (stdout, stderr) = text(output);
        outputs.push_str(&stdout);
        outputs.push_str(&stderr);
    };

    // ingest with the option.
    let file = write(&dir, "day1.json", batch());
    let output = ingest(&uri, &file, |command| {
        command.arg("--db-password-file").arg(&secret);
    });
    keep(&output);
    assert_eq!(outcome(&output), "processed");

    // The daemon, with the variable (as a systemd unit sets it), and its metrics.
    let metrics = dir.join("spoolite.prom");
    let mut daemon = site.spawn(
        site.run_command()
            .args(["--settle", "100ms", "--metrics-file"])
            .arg(&metrics)
            .env("SPOOLITE_DB_PASSWORD_FILE", &secret),
    );
    daemon.wait_serving(&site);
    site.drop_file("day2.json", batch().replace("A1", "A2"));
    daemon.wait(Duration::from_secs(20), "day2.json archived", || {
        site.archived() == ["day2.json"]
    });
    // The daemon's session is encrypted, as the server sees it.
    let encrypted = db.query(&format!(
        "SELECT s.ssl::text FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid)
         WHERE a.usename = '{role}' AND a.application_name = 'spoolite'"
    ));
    assert_eq!(encrypted, [["true"]]);

    // status, with the variable from the site defaults file.
    let defaults = write(
        &dir,
        "defaults",
        format!("SPOOLITE_DB_PASSWORD_FILE={}\n", secret.display()),
    );
    for json in [false, true] {
        let mut command = site.status_command();
        command.env("SPOOLITE_DEFAULTS_FILE", &defaults);
        if json {
            command.arg("--json");
        }
        let output = command.output().expect("run status");
        keep(&output);
        let (stdout, stderr) = text(&output);
        assert_eq!(output.status.code(), Some(0), "{stdout}{stderr}");
        if json {
            let status: Value = serde_json::from_str(&stdout).expect("status JSON");
            assert_eq!(status["batches"], 2, "{status}");
            assert_eq!(status["unreadable"], serde_json::json!([]), "{status}");
        }
    }
    assert_eq!(batches(&db), 2);

    // A password in the URI works too, and is shown as ***.
    let in_uri = uri.replacen(&format!("{role}@"), &format!("{role}:{password}@"), 1);
    let output = ingest(&in_uri, &file, |_| {});
    keep(&output);
    assert_eq!(outcome(&output), "skipped_duplicate");
    let output = spoolite()
        .args(["status", "--json", "--spool"])
        .arg(&site.spool)
        .args(["--db", &in_uri])
        .output()
        .expect("run status");
    keep(&output);
    let status: Value = serde_json::from_slice(&output.stdout).expect("status JSON");
    assert_eq!(
        status["db"],
        uri.replacen(&format!("{role}@"), &format!("{role}:***@"), 1)
    );
    assert_eq!(status["batches"], 2, "{status}");

    daemon.signal(libc::SIGTERM);
    daemon.wait_exit(Duration::from_secs(20), "the daemon to stop");
    outputs.push_str(&daemon.log());
    outputs.push_str(&fs::read_to_string(&metrics).expect("read metrics"));
    outputs.push_str(
        &fs::read_to_string(site.spool.join(".spoolite/state.json")).expect("read state"),
    );
    assert!(outputs.contains("processed"), "{outputs}");
    assert!(
        !outputs.contains(&password),
        "the password shows in an output:\n{outputs}"
    );
}

#[test]
fn a_wrong_or_missing_password_is_a_clear_error() {
    let tls = TlsServer::shared();
    let (db, role, password) = tls.database();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = write(dir.path(), "day1.json", batch());
    let uri = tls.uri(&db, &role, "127.0.0.1", "sslmode=require");

    let wrong = password_file(dir.path(), "not-the-password-Xy9\n");
    let output = ingest(&uri, &file, |command| {
        command.env("SPOOLITE_DB_PASSWORD_FILE", &wrong);
    });
    let stderr = refused(
        &output,
        &db,
        &[
            &format!("connect to PostgreSQL database {uri}"),
            "password authentication failed",
            "check the password",
        ],
    );
    assert!(!stderr.contains("not-the-password-Xy9") && !stderr.contains(&password));

    let output = ingest(&uri, &file, |_| {});
    refused(
        &output,
        &db,
        &[
            "password missing",
            "give it in a file named by --db-password-file",
        ],
    );

    let missing = dir.path().join("no-such-password");
    let output = ingest(&uri, &file, |command| {
        command.arg("--db-password-file").arg(&missing);
    });
    refused(
        &output,
        &db,
        &[&format!("read the password file {}", missing.display())],
    );
}

#[test]
fn a_password_file_beside_a_sqlite_database_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let secret = password_file(dir.path(), "s3cret\n");
    let file = write(dir.path(), "day1.json", batch());
    let db = dir.path().join("spoolite.db");
    let output = spoolite()
        .arg("ingest")
        .arg("--db")
        .arg(&db)
        .arg("--db-password-file")
        .arg(&secret)
        .arg(&file)
        .output()
        .expect("run ingest");
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("is for a PostgreSQL database")
            && stderr.contains(&format!("--db {} is a SQLite file", db.display())),
        "{stderr}"
    );
    assert!(!db.exists(), "nothing created");
}

#[test]
fn the_documented_drop_in_for_postgresql_verifies_with_the_unit() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let guide = fs::read_to_string(repo.join("docs/operating.md")).expect("read the guide");
    let section = &guide[guide
        .find("### A PostgreSQL database")
        .expect("the section")..];
    let start = section.find("```ini\n").expect("an ini block") + "```ini\n".len();
    let drop_in = &section[start..start + section[start..].find("```").expect("its end")];
    for line in [
        "LoadCredential=db-password:/etc/spoolite/db-password",
        "Environment=SPOOLITE_DB_PASSWORD_FILE=%d/db-password",
        "PrivateNetwork=no",
        "RestrictAddressFamilies=AF_INET AF_INET6",
    ] {
        assert!(
            drop_in.lines().any(|l| l == line),
            "the drop-in lacks {line}"
        );
    }
    // The unit with the drop-in beside it, as systemd reads it (see
    // support::assert_unit_verifies): no line about it may say anything.
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = unit_copy(dir.path());
    fs::create_dir(dir.path().join("spoolite.service.d")).expect("mkdir drop-in folder");
    write(
        &dir.path().join("spoolite.service.d"),
        "postgresql.conf",
        drop_in,
    );
    assert_unit_verifies(&copy);
}
