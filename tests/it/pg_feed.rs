//! The read side on PostgreSQL through the real binary: `spoolite changes` (the
//! same lines as on SQLite for the same files, its window, `--follow` and its
//! ends, an idle follower's CPU, a follower while two daemons write, a server
//! restart under a follower), `status`, `key` and `ingest --dry-run`, and the
//! README's read-only analyst role, whose statements are run as written there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use serde_json::{Value, json};
use tempfile::TempDir;

use crate::changes::{
    COLUMNS, Follower, assert_a_closed_stdout_ends_a_follower,
    assert_a_follower_stops_at_its_limit, assert_an_idle_follower_uses_no_cpu, assert_window,
    changes, feed_after, feed_rows, first_events, ingest_batch, landing_twice, max_seq,
    retractions, seq, takeoff, update_and_stale,
};
use crate::support::{
    CONTRACT_RELATIONS, Site, event, ingest_command, ingest_json, json_batch, query, spoolite,
    write,
};
use crate::support_pg::{PgDb, Server};

/// The longest any single wait of these tests may take.
const WAIT: Duration = Duration::from_secs(30);

/// The files of the feed fixture, in the order they are ingested: changes.rs's
/// (inserts, a payload with a number no float holds, an update, a stale and an
/// unchanged event, a re-drop, and retractions, one of a key never seen) with a
/// conflict, an invalid event, a payload with escapes and a fourth file.
fn fixture_files(dir: &Path) -> Vec<PathBuf> {
    let first = json_batch(&first_events(
        "{\"tail\":\"G-XWBA\",\"note\":\"tab\\there, \\\"quoted\\\", é\"}",
    ));
    let conflict = event(
        "BA0117-20261129",
        "on_blocks",
        "2026-11-29T12:05:00Z",
        Some(1),
        "{\"other\":true}",
    );
    let invalid = "{\"flight_id\":\"\"}".to_owned();
    let second = json_batch(
        &[
            &update_and_stale()[..],
            &[conflict],
            &landing_twice(),
            &[invalid],
        ]
        .concat(),
    );
    let third = json_batch(&retractions());
    let ndjson = [
        event(
            "BA0120-20261129",
            "duty_start",
            "2026-11-29T06:00:00Z",
            None,
            "{}",
        ),
        event(
            "BA0117-20261129",
            "on_blocks",
            "2026-11-29T12:05:00Z",
            Some(3),
            "{\"back\":1}",
        ),
    ]
    .join("\n")
        + "\n";
    vec![
        write(dir, "first.json", first),
        write(dir, "second.json", second),
        dir.join("first.json"),
        write(dir, "third.json", third),
        write(dir, "fourth.ndjson", ndjson),
    ]
}

/// Ingests `files` one at a time, in order, into `db` (each processed or skipped).
fn ingest_in_order(db: &Path, files: &[PathBuf]) {
    for file in files {
        let (code, lines) = ingest_json(db, &[file]);
        assert_eq!(code, 0, "{}: {lines:?}", file.display());
    }
}

/// A PostgreSQL database holding the fixture, and the folder of its files.
fn postgres_with_changes() -> (TempDir, PgDb) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = PgDb::new();
    ingest_in_order(Path::new(&db.uri()), &fixture_files(dir.path()));
    (dir, db)
}

fn uri_path(db: &PgDb) -> PathBuf {
    PathBuf::from(db.uri())
}

/// A line with its two times (which differ from run to run) checked for the
/// contract's form and replaced by `T`; every other byte as printed.
fn without_times(line: &str) -> String {
    let mut out = line.to_owned();
    for column in ["first_seen_at", "updated_at"] {
        let label = format!("\"{column}\":\"");
        let start = out
            .find(&label)
            .unwrap_or_else(|| panic!("{column} in {line}"))
            + label.len();
        let time = &out[start..start + 24];
        let bytes = time.as_bytes();
        assert!(
            bytes[10] == b'T'
                && bytes[19] == b'.'
                && bytes[23] == b'Z'
                && out[start + 24..].starts_with('"'),
            "{column} {time:?} is not UTC with three fraction digits: {line}"
        );
        out.replace_range(start..start + 24, "T");
    }
    out
}

#[test]
fn the_feed_prints_the_same_lines_from_sqlite_and_postgres() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = fixture_files(dir.path());
    let sqlite = dir.path().join("spoolite.db");
    let postgres = PgDb::new();
    let mut outputs = Vec::new();
    for db in [sqlite.clone(), uri_path(&postgres)] {
        ingest_in_order(&db, &files);
        let (code, lines, stdout, stderr) = changes(&db, &[]);
        assert_eq!(code, 0, "{}: {stderr}", db.display());
        assert!(stderr.is_empty(), "{stderr}");
        assert_eq!(lines.len(), 6, "the fixture changes six keys: {stdout}");
        outputs.push(stdout);
    }
    // Both backends number a database's changes 1, 2, 3, … in commit order, a
    // file's rows in key order (the contract fixes only the order): the lines are
    // the same bytes but for the times spoolite wrote.
    let lines = |stdout: &str| stdout.lines().map(without_times).collect::<Vec<_>>();
    assert_eq!(lines(&outputs[1]), lines(&outputs[0]));
    // And each PostgreSQL line is its row of duty_event_all, every column.
    let (_, printed, _, _) = changes(&uri_path(&postgres), &[]);
    assert_eq!(printed, feed_rows(&postgres, ""));
    let sqlite_rows = query(
        &sqlite,
        "SELECT change_seq FROM duty_event_all ORDER BY change_seq",
    );
    let seqs: Vec<i64> = printed.iter().map(seq).collect();
    assert_eq!(
        seqs,
        sqlite_rows
            .iter()
            .map(|row| row[0].parse::<i64>().expect("seq"))
            .collect::<Vec<_>>()
    );
    assert!(COLUMNS.split(", ").all(|c| printed[0].get(c).is_some()));
}

#[test]
fn since_and_limit_pick_a_window_of_the_postgres_feed() {
    let (_dir, db) = postgres_with_changes();
    let all = feed_rows(&db, "");
    let last = seq(all.last().expect("rows"));
    for (since, limit) in [(0, 1), (0, 100), (1, 2), (3, 1), (last - 1, 5), (last, 5)] {
        assert_window(&uri_path(&db), &all, since, limit);
    }
    let (code, lines, _, stderr) = changes(&uri_path(&db), &["--since", &last.to_string()]);
    assert_eq!((code, lines.len()), (0, 0), "{stderr}");
}

#[test]
fn a_postgres_database_without_the_schema_or_a_server_is_an_error_with_exit_2() {
    let empty = PgDb::new();
    let (code, lines, _, stderr) = changes(&uri_path(&empty), &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(lines.is_empty());
    assert!(
        stderr.contains("holds no spoolite tables yet") && stderr.contains("spoolite run"),
        "{stderr}"
    );
    assert!(
        empty.query("SELECT to_regclass('spoolite_schema')::text") == [["NULL"]],
        "changes created nothing"
    );
    // A socket folder with no server in it: no follower starts on nothing.
    let nowhere = tempfile::tempdir().expect("temp dir");
    let uri = format!(
        "postgresql:///spoolite?host={}&user=nobody",
        nowhere.path().display()
    );
    for args in [&[][..], &["--follow"][..]] {
        let (code, _, _, stderr) = changes(Path::new(&uri), args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stderr.contains("connect"), "{stderr}");
    }
}

#[test]
fn a_postgres_follower_prints_each_later_commit_within_moments_and_ends_at_a_signal() {
    let (dir, db) = postgres_with_changes();
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut follower = Follower::caught_up(&db, &[]);
        assert_eq!(follower.seen, feed_rows(&db, ""));
        // A read every 200 ms: each commit is printed well within a second.
        for round in 0..3u32 {
            follower.assert_follows_a_commit(
                dir.path(),
                &db,
                &format!("follow-{signal}-{round}.json"),
                (&format!("FW{signal}-1"), &format!("FW{signal}-2")),
                round,
                Duration::from_millis(800),
            );
        }
        follower.stop_with(signal);
        assert!(follower.rest().is_empty());
    }
}

#[test]
fn a_postgres_follower_with_a_limit_stops_at_the_limit_and_a_closed_stdout_ends_one() {
    let (dir, db) = postgres_with_changes();
    assert_a_follower_stops_at_its_limit(dir.path(), &db, 8);
    // A reader that goes away ends an idle follower, with exit 0 and no message.
    assert_a_closed_stdout_ends_a_follower(&uri_path(&db), || {}, "");
}

#[test]
fn an_idle_postgres_follower_uses_no_cpu() {
    let (_dir, db) = postgres_with_changes();
    assert_an_idle_follower_uses_no_cpu(&db);
}

#[test]
fn a_postgres_follower_outlasts_a_server_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::own("");
    let db = PgDb::on(server.clone());
    ingest_batch(
        dir.path(),
        &uri_path(&db),
        "before.json",
        &[takeoff("RS1", 1, 1)],
    );
    let mut follower = Follower::on(&uri_path(&db), &[]);
    follower.read_through(1, "the row already committed");
    server.stop("fast");
    // Down for a few of the follower's reads.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(follower.child.try_wait().expect("try_wait").is_none());
    server.start_again();
    ingest_batch(
        dir.path(),
        &uri_path(&db),
        "after.json",
        &[takeoff("RS1", 1, 2), takeoff("RS2", 1, 1)],
    );
    let lines = follower.read_through(3, "the rows committed after the restart");
    assert_eq!(lines, feed_after(&db, 1));
    follower.signal(libc::SIGTERM);
    assert!(follower.wait_exit(WAIT, "the follower to stop").success());
}

/// `count` daemons, each on a spool of its own, writing into `uri`, serving.
fn daemons_on(uri: &str, count: usize) -> (Vec<Site>, Vec<crate::support::Daemon>) {
    let sites: Vec<Site> = (0..count)
        .map(|_| {
            let mut site = Site::new();
            site.db = PathBuf::from(uri);
            site
        })
        .collect();
    let daemons = sites
        .iter()
        .map(|site| {
            let mut daemon = site.spawn(
                site.run_command()
                    .args(["--settle", "50ms", "--rescan", "1s"]),
            );
            daemon.wait_serving(site);
            daemon
        })
        .collect();
    (sites, daemons)
}

/// The last of the `seen` lines of each key is its row as it stands, every
/// column; returns the rows, in key order.
fn last_lines_are_the_rows(seen: &[Value], db: &PgDb) -> Vec<Value> {
    let mut last_line: BTreeMap<String, Value> = BTreeMap::new();
    for line in seen {
        let key = line["idempotency_key"].as_str().expect("key").to_owned();
        last_line.insert(key, line.clone());
    }
    let mut rows: Vec<Value> = feed_rows(db, "");
    rows.sort_by(|a, b| {
        a["idempotency_key"]
            .as_str()
            .cmp(&b["idempotency_key"].as_str())
    });
    assert_eq!(last_line.into_values().collect::<Vec<_>>(), rows);
    rows
}

/// A batch of spool `spool`'s file `file`: events on keys that the other spool's
/// files share, each with a revision no other file gives that key.
fn overlapping_batch(spool: i64, file: i64) -> String {
    let events: Vec<String> = (0..4)
        .map(|j| {
            let key = (file * 3 + j) % 24;
            event(
                &format!("OV{key:02}-20261201"),
                "landing",
                "2026-12-01T12:00:00Z",
                Some(file * 2 + spool),
                &format!("{{\"spool\":{spool},\"file\":{file}}}"),
            )
        })
        .collect();
    json_batch(&events)
}

#[test]
fn a_follower_of_two_daemons_never_goes_back_and_ends_with_the_final_state() {
    let db = PgDb::new();
    let uri = db.uri();
    // The schema exists before the follower starts.
    let dir = tempfile::tempdir().expect("temp dir");
    ingest_batch(
        dir.path(),
        Path::new(&uri),
        "seed.json",
        &[takeoff("SEED", 1, 1)],
    );
    let mut follower = Follower::on(Path::new(&uri), &[]);
    follower.read_through(1, "the seed row");
    let (sites, mut daemons) = daemons_on(&uri, 2);
    // Three waves of ten files a spool, each dropped at once into both spools;
    // the follower has read each wave's rows before the next wave rewrites them.
    const FILES: i64 = 30;
    for wave in 0..3 {
        for file in wave * 10..wave * 10 + 10 {
            for (spool, site) in sites.iter().enumerate() {
                site.drop_file(
                    &format!("s{spool}-{file:02}.json"),
                    overlapping_batch(spool as i64, file),
                );
            }
        }
        for (daemon, site) in daemons.iter_mut().zip(&sites) {
            daemon.wait(WAIT, "the wave archived", || {
                site.archived().len() == (wave as usize + 1) * 10
            });
        }
        follower.read_through(max_seq(&db), "the wave's last change");
    }
    assert_eq!(
        db.query("SELECT count(*)::text FROM ingest_inbox"),
        [[(2 * FILES + 1).to_string()]]
    );
    let seen = follower.seen.clone();
    // Never a change_seq lower than (or equal to) one seen before.
    for pair in seen.windows(2) {
        assert!(
            seq(&pair[1]) > seq(&pair[0]),
            "{} after {}",
            seq(&pair[1]),
            seq(&pair[0])
        );
    }
    let rows = last_lines_are_the_rows(&seen, &db);
    assert_eq!(rows.len(), 25, "24 shared keys and the seed");
    // And the follower saw more than the final state: each wave rewrote keys.
    assert!(seen.len() > rows.len(), "{} lines", seen.len());
    for daemon in &mut daemons {
        daemon.signal(libc::SIGTERM);
        assert!(daemon.wait_exit(WAIT, "the daemon to stop").success());
    }
    follower.signal(libc::SIGTERM);
    assert!(follower.wait_exit(WAIT, "the follower to stop").success());
}

#[test]
fn key_needs_no_database_when_the_site_names_postgres() {
    let run = |db: Option<&str>| -> Output {
        let mut command = spoolite();
        command.args([
            "key",
            " BA0117-20261129 ",
            "OFF_BLOCKS",
            "2026-11-29T11:05:00+01:00",
        ]);
        if let Some(db) = db {
            command.env("SPOOLITE_DB", db);
        }
        command.output().expect("run spoolite key")
    };
    let plain = run(None);
    let on_postgres = run(Some(
        "postgresql:///nowhere?host=/nonexistent-socket-folder",
    ));
    assert!(plain.status.success(), "{plain:?}");
    assert_eq!(on_postgres.status.code(), Some(0), "{on_postgres:?}");
    assert_eq!(on_postgres.stdout, plain.stdout);
    let text = String::from_utf8_lossy(&plain.stdout);
    assert!(text.contains("2026-11-29T10:05:00Z"), "{text}");
}

#[test]
fn a_dry_run_on_a_postgres_database_without_the_schema_compares_against_an_empty_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = PgDb::new();
    let files = fixture_files(dir.path());
    let output = ingest_command(&uri_path(&db))
        .args(["--dry-run", "--json"])
        .arg(&files[1])
        .output()
        .expect("dry run");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let line: Value = serde_json::from_slice(&output.stdout).expect("one JSON line");
    // second.json alone: four new keys (one of them twice) and one invalid event.
    assert_eq!(
        (
            &line["outcome"],
            &line["inserted"],
            &line["unchanged"],
            &line["invalid"]
        ),
        (&json!("processed"), &json!(4), &json!(1), &json!(1)),
        "{line}"
    );
    assert_eq!(
        db.query("SELECT to_regclass('spoolite_schema')::text"),
        [["NULL"]],
        "a dry run creates nothing"
    );
}

/// `spoolite status` of an empty spool and `db`, as text and as JSON.
fn status_of(db: &Path) -> (i32, String, Value) {
    let spool = tempfile::tempdir().expect("temp dir");
    for folder in ["incoming", "archive", "rejected"] {
        std::fs::create_dir(spool.path().join(folder)).expect("spool folder");
    }
    let run = |json: bool| {
        let mut command = spoolite();
        command.args(["status", "--spool"]).arg(spool.path());
        command.arg("--db").arg(db);
        if json {
            command.arg("--json");
        }
        command.output().expect("status")
    };
    let text = run(false);
    let json = run(true);
    assert_eq!(text.status.code(), json.status.code());
    let figures = serde_json::from_slice(&json.stdout)
        .unwrap_or_else(|e| panic!("status JSON: {e}: {json:?}"));
    (
        text.status.code().expect("exit code"),
        String::from_utf8_lossy(&text.stdout).into_owned(),
        figures,
    )
}

#[test]
fn status_names_a_postgres_database_and_says_when_it_cannot_be_read() {
    let (_dir, db) = postgres_with_changes();
    let (code, text, figures) = status_of(&uri_path(&db));
    // Not served (no daemon holds the spool), everything read.
    assert_eq!(code, 3, "{text}");
    assert_eq!(
        (
            &figures["db_exists"],
            &figures["batches"],
            &figures["events"]
        ),
        (&json!(true), &json!(4), &json!(5)),
        "{figures}"
    );
    assert_eq!(figures["wal_bytes"], Value::Null, "no WAL file to measure");
    // The database's size is the server's figure (which autovacuum may move a
    // little between the two looks).
    let told = figures["database_bytes"].as_f64().expect("database_bytes");
    let size: f64 = db.query("SELECT pg_database_size(current_database())::text")[0][0]
        .parse()
        .expect("a size");
    assert!(
        told > 0.0 && (told - size).abs() <= size * 0.05,
        "database_bytes {told} against pg_database_size {size}"
    );
    assert_eq!(
        text.lines()
            .find(|line| line.starts_with("database size"))
            .map(|line| line.contains(&format!("{told} bytes"))),
        Some(true),
        "{text}"
    );
    assert!(
        !text.lines().any(|line| line.starts_with("wal")),
        "PostgreSQL keeps its own WAL: {text}"
    );
    let line = text.lines().next().expect("a first line");
    assert!(
        line.starts_with("database") && line.contains(db.name()) && !line.contains('('),
        "{text}"
    );
    // A socket folder with no server in it.
    let nowhere = tempfile::tempdir().expect("temp dir");
    let uri = format!("postgresql:///spoolite?host={}", nowhere.path().display());
    let (code, text, figures) = status_of(Path::new(&uri));
    assert_eq!(code, 2, "{text}");
    assert_eq!(figures["db_exists"], false, "{figures}");
    assert_eq!(figures["batches"], Value::Null, "{figures}");
    assert!(text.contains("(cannot be read)"), "{text}");
}

// ---------------------------------------------------------------------------------
// The read-only analyst role

/// The SQL block of the operator's guide's "Analysts on PostgreSQL", as written there
/// (fenced `plpgsql`: the guides' `sql` blocks are the SQLite queries tests/it/docs.rs
/// runs).
fn readme_grants() -> String {
    let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operating.md"))
        .expect("read docs/operating.md");
    let section = guide
        .split("\n### Analysts on PostgreSQL\n")
        .nth(1)
        .expect("docs/operating.md has ### Analysts on PostgreSQL");
    let block = section
        .split("```plpgsql\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("the section has a ```plpgsql block");
    assert!(
        !section[..section.find("```plpgsql").expect("block")].contains("\n#"),
        "the block is in the section"
    );
    block.to_owned()
}

/// The libpq URI of database `spoolite` on `server`, connecting as `user`.
fn uri_as(server: &Server, user: &str) -> String {
    format!(
        "postgresql:///spoolite?host={}&user={user}",
        server.socket_dir().display()
    )
}

/// Every table and view of schema `public`, as the server lists them: name, type
/// (`BASE TABLE`, `VIEW`) and whether rows may be inserted into it at all (a view
/// with aggregates may not, whoever asks).
fn public_relations(client: &mut postgres::Client) -> Vec<(String, String, bool)> {
    client
        .query(
            "SELECT table_name::text, table_type::text, is_insertable_into = 'YES'
             FROM information_schema.tables
             WHERE table_schema = 'public' ORDER BY table_name",
            &[],
        )
        .expect("list tables")
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2)))
        .collect()
}

/// The SQLSTATE of `sql` run by `client`, which must fail.
fn refusal(client: &mut postgres::Client, sql: &str) -> String {
    match client.batch_execute(sql) {
        Ok(()) => panic!("{sql}: allowed"),
        Err(error) => error
            .code()
            .map(|code| code.code().to_owned())
            .unwrap_or_else(|| format!("no SQLSTATE: {error}")),
    }
}

#[test]
fn the_readme_analyst_role_reads_every_table_and_view_and_writes_none() {
    let grants = readme_grants();
    let dir = tempfile::tempdir().expect("temp dir");
    let files = fixture_files(dir.path());
    // Grants run before the first ingest (the tables are then a later migration's,
    // covered by the default privileges) and after it.
    for grants_first in [true, false] {
        // Roles belong to the whole server: a server of this test's own.
        let server = Server::own("");
        server.admin("CREATE ROLE spoolite LOGIN");
        server.admin("CREATE DATABASE spoolite OWNER spoolite");
        let mut admin =
            postgres::Client::connect(&uri_as(&server, "spoolite_test"), postgres::NoTls)
                .expect("connect as the superuser");
        let writer = PathBuf::from(uri_as(&server, "spoolite"));
        if grants_first {
            admin.batch_execute(&grants).expect("the README's grants");
            ingest_in_order(&writer, &files);
        } else {
            ingest_in_order(&writer, &files);
            admin.batch_execute(&grants).expect("the README's grants");
        }
        let relations = public_relations(&mut admin);
        let names: Vec<&str> = relations.iter().map(|(name, ..)| name.as_str()).collect();
        for contract in CONTRACT_RELATIONS {
            assert!(names.contains(&contract), "{contract} in {names:?}");
        }
        let mut alice = postgres::Client::connect(&uri_as(&server, "alice"), postgres::NoTls)
            .expect("connect as alice");
        for (name, kind, insertable) in &relations {
            let mine: i64 = alice
                .query_one(&format!("SELECT count(*) FROM {name}"), &[])
                .unwrap_or_else(|e| panic!("alice reads {name}: {e}"))
                .get(0);
            let all: i64 = admin
                .query_one(&format!("SELECT count(*) FROM {name}"), &[])
                .expect("count")
                .get(0);
            assert_eq!(mine, all, "{name}");
            let column: String = admin
                .query_one(
                    "SELECT column_name::text FROM information_schema.columns
                     WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position
                     LIMIT 1",
                    &[name],
                )
                .expect("a column")
                .get(0);
            let mut writes = vec![
                format!("INSERT INTO {name} DEFAULT VALUES"),
                format!("UPDATE {name} SET {column} = {column}"),
                format!("DELETE FROM {name}"),
            ];
            if kind == "BASE TABLE" {
                writes.push(format!("TRUNCATE {name}"));
            }
            for sql in writes {
                // Refused for want of the privilege, or, where nobody may write
                // (a view of aggregates), at all.
                let code = refusal(&mut alice, &sql);
                if *insertable {
                    assert_eq!(code, "42501", "{sql}");
                }
            }
        }
        assert_eq!(
            refusal(&mut alice, "CREATE TABLE public.mine (x int)"),
            "42501"
        );
        // The commands an analyst runs work as alice and read what the writer wrote.
        let as_alice = PathBuf::from(uri_as(&server, "alice"));
        let (code, lines, stdout, stderr) = changes(&as_alice, &[]);
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(lines.len(), 6, "{stdout}");
        assert_eq!(stdout, changes(&writer, &[]).2);
        let status = spoolite()
            .args(["status", "--json", "--spool"])
            .arg(dir.path())
            .arg("--db")
            .arg(&as_alice)
            .output()
            .expect("status");
        let figures: Value = serde_json::from_slice(&status.stdout)
            .unwrap_or_else(|e| panic!("status JSON: {e}: {status:?}"));
        assert_eq!(
            (
                &figures["batches"],
                &figures["events"],
                &figures["quarantined"]
            ),
            (&json!(4), &json!(5), &json!(2)),
            "{figures}"
        );
        assert_eq!(figures["db_exists"], true, "{figures}");
        assert!(
            !figures["unreadable"].to_string().contains("database"),
            "{figures}"
        );
        let dry = ingest_command(&as_alice)
            .args(["--dry-run", "--json"])
            .arg(write(
                dir.path(),
                "dry.json",
                json_batch(&[takeoff("DRY1", 1, 1)]),
            ))
            .output()
            .expect("dry run");
        assert_eq!(dry.status.code(), Some(0), "{dry:?}");
        let line: Value = serde_json::from_slice(&dry.stdout).expect("one JSON line");
        assert_eq!(line["inserted"], 1, "{line}");
        let mut follower = Follower::on(&as_alice, &[]);
        follower.read_through(seq(&lines[5]), "the rows as alice");
        ingest_batch(dir.path(), &writer, "later.json", &[takeoff("LATE", 1, 1)]);
        let later = follower.next_within(WAIT, "a later commit, as alice");
        assert_eq!(later["flight_id"], "LATE");
        follower.signal(libc::SIGTERM);
        assert!(follower.wait_exit(WAIT, "the follower to stop").success());
    }
}

/// The events of `crew_files`: for each of six crew members and three days, a
/// duty and four flights, each flight crewed by the member and the next one (so
/// a period of one member holds flights that other files carry), every
/// on-blocks in slot 1, and a later revision of each on-blocks, a quarter of an
/// hour on, which displaces the first.
fn crossing_crew_events() -> Vec<String> {
    let mut events = Vec::new();
    for member in 0..6 {
        for day in 1..=3 {
            let date = format!("2026-12-0{day}");
            let duty = format!("DUTY-C{member}-2026120{day}");
            let crew = format!("{{\"crew\":[\"C{member}\"]}}");
            events.push(event(
                &duty,
                "duty_start",
                &format!("{date}T06:00:00Z"),
                Some(1),
                &crew,
            ));
            events.push(event(
                &duty,
                "duty_end",
                &format!("{date}T18:00:00Z"),
                Some(1),
                "{}",
            ));
            for leg in 0..4 {
                let flight = format!("F{member}{day}{leg}-2026120{day}");
                let crew = format!("{{\"crew\":[\"C{member}\",\"C{}\"]}}", (member + 1) % 6);
                let hour = 7 + 2 * leg;
                events.push(event(
                    &flight,
                    "off_blocks",
                    &format!("{date}T{hour:02}:00:00Z"),
                    Some(1),
                    &crew,
                ));
                for (revision, minute) in [(1, 30), (2, 45)] {
                    let on_blocks = event(
                        &flight,
                        "on_blocks",
                        &format!("{date}T{:02}:{minute}:00Z", hour + 1),
                        Some(revision),
                        &crew,
                    );
                    let open = on_blocks.strip_suffix('}').expect("an object");
                    events.push(format!("{open},\"slot\":\"1\"}}"));
                }
            }
        }
    }
    events
}

/// `crossing_crew_events` shared out into `CROSSING_FILES` files, an event to
/// each file in turn: a duty's and a flight's events, and a slot's revisions,
/// lie in different files. Then two files of `WIDE_FLIGHTS` flights, each a
/// landing in slot 1, the second a later revision of each at another time: each
/// locks every flight at once and numbers its rows as it writes them.
fn crossing_crew_files() -> Vec<(String, String)> {
    let mut files = vec![Vec::new(); CROSSING_FILES];
    for (at, event) in crossing_crew_events().into_iter().enumerate() {
        files[at % CROSSING_FILES].push(event);
    }
    for (revision, minute) in [(1, 10), (2, 20)] {
        files.push(
            (0..WIDE_FLIGHTS)
                .map(|n| {
                    let landing = event(
                        &format!("W{n:03}-20261201"),
                        "landing",
                        &format!("2026-12-01T12:{minute}:00Z"),
                        Some(revision),
                        "{}",
                    );
                    let open = landing.strip_suffix('}').expect("an object");
                    format!("{open},\"slot\":\"1\"}}")
                })
                .collect(),
        );
    }
    files
        .iter()
        .enumerate()
        .map(|(at, events)| (format!("x{at:02}.json"), json_batch(events)))
        .collect()
}

const CROSSING_FILES: usize = 24;
/// More flights than a batch locks one by one.
const WIDE_FLIGHTS: usize = 300;

/// What a batch's content leaves in the tables analysts read, whoever wrote it
/// and when: every event's content, the flights' times and the crew rows.
fn content_tables(db: &PgDb) -> Vec<Vec<Vec<String>>> {
    [
        "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision::text,
                payload, retracted::text, coalesce(slot, '')
         FROM duty_event_all ORDER BY idempotency_key",
        "SELECT * FROM flight_times ORDER BY flight_id",
        "SELECT * FROM crew_flight ORDER BY flight_id, crew_id, role",
        "SELECT * FROM crew_duty ORDER BY duty_id, crew_id, role",
        "SELECT * FROM crew_fdp ORDER BY duty_id, crew_id",
    ]
    .iter()
    .map(|sql| db.query(&format!("SELECT row_to_json(r)::text FROM ({sql}) AS r")))
    .map(|rows| rows.into_iter().map(|row| row.to_vec()).collect())
    .collect()
}

/// Every row version a transaction commits, as (key, change_seq), noted at its
/// commit by a deferred trigger (which reads the row as the transaction leaves
/// it: a row numbered again before the commit is noted once).
const NOTE_COMMITTED: &str = "
    CREATE TABLE test_committed (key text, change_seq bigint, PRIMARY KEY (key, change_seq));
    CREATE FUNCTION test_note_committed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO test_committed SELECT key, change_seq FROM spoolite_event
        WHERE key = NEW.key ON CONFLICT DO NOTHING;
        RETURN NULL;
    END $$;
    CREATE CONSTRAINT TRIGGER test_note_committed AFTER INSERT OR UPDATE ON spoolite_event
        DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_note_committed()";

/// Four daemons apply side by side (each waits only for the writers of its own
/// flights, and for the short last step before each commit), with crew members
/// who fly and sit duties in every spool's files and slots corrected from
/// another spool, while a follower reads the feed: it sees every row version
/// committed exactly once, in commit order, and ends with every row as it
/// stands; the crew rows and periods are those `check` computes from the live
/// events, and every table is what the same files ingested one at a time leave.
#[test]
fn four_daemons_of_crossing_crews_give_a_follower_every_change_once() {
    let db = PgDb::new();
    let uri = db.uri();
    let dir = tempfile::tempdir().expect("temp dir");
    ingest_batch(
        dir.path(),
        Path::new(&uri),
        "seed.json",
        &[takeoff("SEED", 1, 1)],
    );
    db.client()
        .batch_execute(NOTE_COMMITTED)
        .expect("the commit notes");
    let mut follower = Follower::on(Path::new(&uri), &[]);
    follower.read_through(1, "the seed row");
    let (sites, mut daemons) = daemons_on(&uri, 4);
    let files = crossing_crew_files();
    for (at, (name, content)) in files.iter().enumerate() {
        sites[at % sites.len()].drop_file(name, content);
    }
    for (at, (daemon, site)) in daemons.iter_mut().zip(&sites).enumerate() {
        let dropped = (at..files.len()).step_by(sites.len()).count();
        daemon.wait(WAIT, "every file archived", || {
            site.archived().len() == dropped
        });
    }
    assert_eq!(
        db.query("SELECT count(*)::text FROM ingest_inbox"),
        [[(files.len() + 1).to_string()]]
    );
    let last = max_seq(&db);
    follower.read_through(last, "the last change");
    // Every row version committed, each once and in order: none skipped, none
    // twice.
    let numbers: Vec<i64> = follower.seen.iter().map(seq).collect();
    assert!(
        numbers.windows(2).all(|pair| pair[0] < pair[1]),
        "{numbers:?}"
    );
    let seen: Vec<Vec<String>> = follower.seen[1..]
        .iter()
        .map(|line| {
            vec![
                line["idempotency_key"].as_str().expect("key").to_owned(),
                seq(line).to_string(),
            ]
        })
        .collect();
    let committed =
        db.query("SELECT key, change_seq::text FROM test_committed AS c ORDER BY c.change_seq");
    assert_eq!(seen, committed);
    assert_eq!(
        db.query("SELECT (next_seq > (SELECT max(change_seq) FROM spoolite_event))::text FROM spoolite_change_seq"),
        [["true"]]
    );
    let rows = last_lines_are_the_rows(&follower.seen, &db);
    // 18 duties, 72 flights of two crew members, each with an off-blocks and
    // two on-blocks, the wide files' two landings of each flight, and the seed.
    assert_eq!(rows.len(), 18 * 2 + 72 * 3 + 2 * WIDE_FLIGHTS + 1);
    assert_eq!(
        db.query(
            "SELECT count(*)::text FROM duty_event
             WHERE event_kind = 'landing' AND instant_utc LIKE '%12:20:00Z'"
        ),
        [[WIDE_FLIGHTS.to_string()]],
        "the later revision of each wide landing reads as sent"
    );
    let checked = spoolite()
        .args(["check", "--db", &uri])
        .output()
        .expect("spoolite check");
    assert_eq!(checked.status.code(), Some(0), "{checked:?}");
    assert_eq!(
        db.query(
            "SELECT count(*)::text, count(DISTINCT crew_id)::text,
                    count(*) FILTER (WHERE fdp_end_utc LIKE '%:45:00Z')::text
             FROM crew_fdp"
        ),
        [["18", "6", "18"]],
        "every duty's period ends at the corrected on-blocks of its last flight"
    );
    // The same files, one at a time, in reverse order, into a database of its own.
    let serial = PgDb::new();
    let serial_uri = serial.uri();
    ingest_batch(
        dir.path(),
        Path::new(&serial_uri),
        "seed.json",
        &[takeoff("SEED", 1, 1)],
    );
    for (name, content) in files.iter().rev() {
        let file = write(dir.path(), name, content);
        let (code, lines) = ingest_json(Path::new(&serial_uri), &[&file]);
        assert_eq!(code, 0, "{lines:?}");
    }
    assert_eq!(content_tables(&db), content_tables(&serial));
    for daemon in &mut daemons {
        daemon.signal(libc::SIGTERM);
        assert!(daemon.wait_exit(WAIT, "the daemon to stop").success());
    }
    follower.signal(libc::SIGTERM);
    assert!(follower.wait_exit(WAIT, "the follower to stop").success());
}
