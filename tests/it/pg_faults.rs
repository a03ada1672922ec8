//! Many writers and faults against PostgreSQL, through the real binary and a real
//! server: two daemons fed the same files at once (same keys or not), kill -9
//! cycles, the server stopped while files arrive, connections terminated at random
//! moments (COMMIT included), a statement timeout, and a COMMIT whose
//! acknowledgement is lost. Each ends with every file archived once, one inbox row
//! per digest, and whole tables equal to a clean delivery of the committed files
//! one at a time, in the order they committed.
//!
//! Commit order: `ingest_inbox.ingested_at` is taken when a file's transaction
//! begins, before it waits for the apply lock, and the inbox has no serial column,
//! so the inbox does not tell commit order. The servers here keep commit times
//! (`track_commit_timestamp`): an inbox row is written in its batch's transaction,
//! so `pg_xact_commit_timestamp(xmin)` orders the batches as they committed (the
//! apply lock is held to the commit, so those times are strictly ordered), and the
//! tests check that `change_seq` ranges follow that order.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use crate::support::{
    Daemon, Rng, Site, event, ingest_command, names, sha256_hex, spoolite, wait_until, write,
};
use crate::support_pg::{PgDb, Server, start_daemon};

const SETTLE: &str = "100ms";

/// Server options that keep each transaction's commit time.
const COMMIT_TIMES: &str = "-c track_commit_timestamp=on";

/// The server this file's tests share that keeps commit times.
static TIMED: Mutex<Weak<Server>> = Mutex::new(Weak::new());

fn timed_server() -> Arc<Server> {
    let mut shared = TIMED.lock().unwrap_or_else(|poison| poison.into_inner());
    if let Some(server) = shared.upgrade() {
        return server;
    }
    let server = Server::own(COMMIT_TIMES);
    *shared = Arc::downgrade(&server);
    server
}

// ---------------------------------------------------------------------------------
// Daemons, files, logs
// ---------------------------------------------------------------------------------

/// SIGTERM, and the daemon exits 0.
fn stop(mut daemon: Daemon) {
    daemon.signal(libc::SIGTERM);
    let status = daemon.wait_exit(Duration::from_secs(20), "the daemon to stop");
    assert_eq!(status.code(), Some(0), "{}", daemon.log());
}

/// Waits until the daemon has created the schema.
fn wait_schema(daemon: &mut Daemon, db: &PgDb) {
    daemon.wait(Duration::from_secs(20), "the schema created", || {
        db.query("SELECT (to_regclass('spoolite_change_seq') IS NOT NULL)::text") == [["true"]]
    });
}

/// Lines of `log` reporting `word` (`processed`, `skipped_duplicate`, `rejected`)
/// for the file `name`.
fn outcome_lines(log: &str, word: &str, name: &str) -> usize {
    let needle = format!("] {word} {name} ");
    log.lines().filter(|line| line.contains(&needle)).count()
}

/// A batch file: its name and bytes.
#[derive(Debug, Clone)]
struct File {
    name: String,
    content: Vec<u8>,
}

impl File {
    fn new(name: String, content: impl Into<Vec<u8>>) -> File {
        File {
            name,
            content: content.into(),
        }
    }

    fn digest(&self) -> String {
        sha256_hex(&self.content)
    }

    /// The same bytes under another name.
    fn renamed(&self, name: String) -> File {
        File::new(name, self.content.clone())
    }
}

/// Drops `file` into `site`'s incoming/ by rename, as an upload does.
fn drop_file(site: &Site, file: &File) {
    site.drop_file(&file.name, &file.content);
}

/// Writes every file under a temporary name into every site, then renames them
/// all in at once, file by file, each into one site right after the other.
fn drop_at_once(sites: &[&Site], files: &[File]) {
    let temp = |file: &File| format!(".{}.tmp", file.name);
    for site in sites {
        fs::create_dir_all(site.incoming()).expect("mkdir incoming");
        for file in files {
            write(&site.incoming(), &temp(file), &file.content);
        }
    }
    for file in files {
        for site in sites {
            fs::rename(
                site.incoming().join(temp(file)),
                site.incoming().join(&file.name),
            )
            .expect("rename into incoming/");
        }
    }
}

/// The digests of the data files in `dir` (reason files and hidden ones left
/// out), sorted, with repeats.
fn digests_in(dir: &Path) -> Vec<String> {
    let mut digests: Vec<String> = names(dir)
        .into_iter()
        .filter(|name| !name.ends_with(".reason.json") && !name.starts_with('.'))
        .map(|name| sha256_hex(fs::read(dir.join(&name)).expect("read")))
        .collect();
    digests.sort();
    digests
}

fn sorted_digests<'a>(files: impl IntoIterator<Item = &'a File>) -> Vec<String> {
    let mut digests: Vec<String> = files.into_iter().map(File::digest).collect();
    digests.sort();
    digests
}

/// An invalid event (a flight id with `|`): quarantined.
const INVALID: &str = "{\"flight_id\":\"BAD|ID\",\"event_kind\":\"takeoff\",\"instant_utc\":\"2026-12-01T10:00:00Z\"}";

/// The event of `key` (0…) at `revision`, with a payload that differs with
/// `variant` (so that two files may conflict) and a retraction when asked.
fn keyed_event(key: u64, revision: u64, variant: u64, retracted: bool) -> String {
    let kinds = ["off_blocks", "takeoff", "landing", "on_blocks"];
    let text = event(
        &format!("PG{:04}-20261201", key / 4),
        kinds[(key % 4) as usize],
        &format!(
            "2026-12-01T{:02}:{:02}:{:02}Z",
            key / 3600 % 24,
            key / 60 % 60,
            key % 60
        ),
        Some(revision as i64),
        // A crew that differs between variants: a correction moves the minutes.
        &format!(
            "{{\"crew\":[\"C{variant}\",\"K{}\"],\"k\":{key},\"v\":{variant}}}",
            key % 3
        ),
    );
    if retracted {
        format!("{},\"retracted\":true}}", &text[..text.len() - 1])
    } else {
        text
    }
}

/// `lines` as a file named `stem` + `.ndjson`, or as a `.json` document with a
/// `batch_id` when `json`.
fn batch_file(stem: &str, lines: &[String], json: bool) -> File {
    if json {
        File::new(
            format!("{stem}.json"),
            format!(
                "{{\"batch_id\":\"{stem}\",\"events\":[\n{}\n]}}\n",
                lines.join(",\n")
            ),
        )
    } else {
        File::new(format!("{stem}.ndjson"), lines.join("\n") + "\n")
    }
}

/// A stream of files over a shared pool of keys: revisions rise and fall, some
/// payloads differ at the same revision (conflicts), some events are retractions
/// or invalid; every `big_every`th file holds `BIG_EVENTS` keys of its own.
const BIG_EVENTS: u64 = 3000;

fn stream_files(rng: &mut Rng, prefix: &str, count: usize, big_every: usize) -> Vec<File> {
    const POOL: u64 = 400;
    (0..count)
        .map(|f| {
            let lines: Vec<String> = if f % big_every == big_every / 2 {
                let base = 10_000 + f as u64 * 10_000;
                (0..BIG_EVENTS)
                    .map(|i| keyed_event(base + i, 1, 0, false))
                    .collect()
            } else {
                let mut lines: Vec<String> = (0..rng.between(5, 80))
                    .map(|_| {
                        let key = rng.next() % POOL;
                        let revision = rng.between(0, 5);
                        let variant = u64::from(rng.between(0, 9) == 0);
                        keyed_event(key, revision, variant, rng.between(0, 14) == 0)
                    })
                    .collect();
                if f % 5 == 2 {
                    lines.insert(lines.len() / 2, INVALID.to_owned());
                }
                lines
            };
            batch_file(&format!("{prefix}{f:03}"), &lines, f % 2 == 0)
        })
        .collect()
}

// ---------------------------------------------------------------------------------
// Commit order and the clean delivery
// ---------------------------------------------------------------------------------

/// The inbox rows as `(digest, file_name)`, in the order their batches committed
/// (the server must keep commit times: `COMMIT_TIMES`).
fn commit_order(db: &PgDb) -> Vec<(String, String)> {
    let rows = db.query(
        "SELECT batch_digest, file_name, pg_xact_commit_timestamp(xmin)::text
         FROM ingest_inbox ORDER BY pg_xact_commit_timestamp(xmin), batch_digest",
    );
    for pair in rows.windows(2) {
        assert!(
            pair[0][2] != "NULL" && pair[0][2] < pair[1][2],
            "batches commit one at a time, each at a time of its own: {pair:?}"
        );
    }
    rows.into_iter()
        .map(|row| (row[0].clone(), row[1].clone()))
        .collect()
}

/// Every committed change_seq is larger than every one committed before it: the
/// batches' change_seq ranges follow `order`, and the counter is past them all.
fn assert_change_seq_follows(db: &PgDb, order: &[(String, String)]) {
    let ranges: BTreeMap<String, (i64, i64)> = db
        .query(
            "SELECT batch_digest, min(change_seq)::text, max(change_seq)::text
             FROM duty_event_all GROUP BY batch_digest",
        )
        .into_iter()
        .map(|row| {
            let number = |text: &str| text.parse::<i64>().expect("a number");
            (row[0].clone(), (number(&row[1]), number(&row[2])))
        })
        .collect();
    let mut last = 0;
    for (digest, name) in order {
        if let Some(&(low, high)) = ranges.get(digest) {
            assert!(
                low > last,
                "{name}'s change_seq {low}…{high} after {last}: {order:?}"
            );
            last = high;
        }
    }
    assert_eq!(
        db.query(
            "SELECT (next_seq > coalesce((SELECT max(change_seq) FROM spoolite_event), 0))::text
             FROM spoolite_change_seq"
        ),
        [["true"]]
    );
}

/// A fresh database on `server` into which one `spoolite ingest` has written the
/// batches of `order` one at a time, in that order, each under its inbox name.
fn clean_delivery(server: &Arc<Server>, order: &[(String, String)], files: &[File]) -> PgDb {
    let content: BTreeMap<String, &[u8]> = files
        .iter()
        .map(|file| (file.digest(), file.content.as_slice()))
        .collect();
    let db = PgDb::on(server.clone());
    let dir = tempfile::tempdir().expect("temp dir");
    let paths: Vec<PathBuf> = order
        .iter()
        .enumerate()
        .map(|(at, (digest, name))| {
            let folder = dir.path().join(format!("{at:04}"));
            fs::create_dir(&folder).expect("mkdir");
            let bytes = content
                .get(digest)
                .unwrap_or_else(|| panic!("{name}: a digest no file dropped has"));
            write(&folder, name, bytes)
        })
        .collect();
    let output = ingest_command(Path::new(&db.uri()))
        .arg("--json")
        .args(&paths)
        .output()
        .expect("run spoolite ingest");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = crate::support::parse_lines(&output);
    assert_eq!(lines.len(), order.len());
    for line in &lines {
        assert_eq!(line["outcome"], "processed", "{line}");
    }
    db
}

/// The contract's tables, every column but the times spoolite writes (they differ
/// from run to run), `change_seq` as its rank (the numbers a counter's, the order
/// the contract's), each in a stated order.
fn tables(db: &PgDb) -> Vec<Vec<Vec<String>>> {
    [
        "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision::text,
                payload, retracted::text, batch_digest,
                (dense_rank() OVER (ORDER BY change_seq))::text
         FROM duty_event_all ORDER BY change_seq",
        "SELECT batch_digest, batch_id, file_name, events_total::text, inserted::text,
                updated::text, unchanged::text, stale::text, conflicts::text, invalid::text
         FROM ingest_inbox ORDER BY batch_digest",
        "SELECT batch_digest, file_name, record_index::text, reason, detail, raw
         FROM quarantine ORDER BY batch_digest, record_index",
        "SELECT batch_digest, events_total::text, rows_last_written::text, quarantined::text
         FROM batch_summary ORDER BY batch_digest",
        "SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc,
                block_minutes::text, airborne_minutes::text
         FROM flight_times ORDER BY flight_id",
        "SELECT crew_id, role, flight_id, off_blocks_utc, on_blocks_utc, block_minutes::text
         FROM crew_flight ORDER BY flight_id, crew_id",
    ]
    .iter()
    .map(|sql| db.query(sql))
    .collect()
}

/// The end state every test here asks for: one inbox row per distinct digest of
/// `files`, `change_seq` in commit order, and every table equal to a clean
/// delivery of the committed batches in commit order. Returns the inbox sums
/// (`inserted, updated, unchanged, stale, conflicts, invalid`).
fn assert_as_one_clean_delivery(server: &Arc<Server>, db: &PgDb, files: &[File]) -> Vec<u64> {
    let order = commit_order(db);
    let mut distinct = sorted_digests(files);
    distinct.dedup();
    let mut inbox: Vec<String> = order.iter().map(|(digest, _)| digest.clone()).collect();
    inbox.sort();
    assert_eq!(inbox, distinct, "one inbox row per digest dropped");
    assert_change_seq_follows(db, &order);
    let clean = clean_delivery(server, &order, files);
    let (got, want) = (tables(db), tables(&clean));
    let names = [
        "duty_event_all",
        "ingest_inbox",
        "quarantine",
        "batch_summary",
    ];
    for ((got, want), name) in got
        .iter()
        .zip(&want)
        .zip(names.iter().chain(&["flight_times", "crew_flight"]))
    {
        assert_eq!(got, want, "{name} differs from the clean delivery");
    }
    db.query(
        "SELECT sum(inserted)::text, sum(updated)::text, sum(unchanged)::text,
                sum(stale)::text, sum(conflicts)::text, sum(invalid)::text
         FROM ingest_inbox",
    )[0]
    .iter()
    .map(|n| n.parse().unwrap_or(0))
    .collect()
}

// ---------------------------------------------------------------------------------
// Two daemons, one database
// ---------------------------------------------------------------------------------

/// Two sites whose daemons serve one database of the timed server at once. Both
/// start on an empty database: the migrations are applied once.
fn two_daemons_on_one_database() -> (Arc<Server>, PgDb, [Site; 2], [Daemon; 2]) {
    let server = timed_server();
    let db = PgDb::on(server.clone());
    let uri = db.uri();
    let (a, b) = (Site::new(), Site::new());
    let mut first = start_daemon(&a, &uri, &[]);
    let second = start_daemon(&b, &uri, &[]);
    wait_schema(&mut first, &db);
    (server, db, [a, b], [first, second])
}

/// Stops both daemons (see `stop`); returns the logs of their sites.
fn stop_both(daemons: [Daemon; 2], sites: [&Site; 2]) -> [String; 2] {
    for daemon in daemons {
        stop(daemon);
    }
    sites.map(Site::log)
}

/// Fifty files of keys of their own (some `.json` with a `batch_id`, some with an
/// invalid event).
fn disjoint_files() -> Vec<File> {
    (0..50_u64)
        .map(|f| {
            let mut lines: Vec<String> = (0..30)
                .map(|i| keyed_event(100_000 + f * 100 + i, f % 4, 0, i % 17 == 3))
                .collect();
            if f % 5 == 1 {
                lines.push(INVALID.to_owned());
            }
            batch_file(&format!("same{f:02}"), &lines, f % 3 == 0)
        })
        .collect()
}

#[test]
fn two_daemons_fed_the_same_files_at_once_commit_each_once() {
    let (server, db, [a, b], daemons) = two_daemons_on_one_database();
    let files = disjoint_files();
    drop_at_once(&[&a, &b], &files);
    let archived = |site: &Site, count: usize| site.archived().len() == count;
    wait_until(Duration::from_secs(30), "both spools archived", || {
        archived(&a, 50) && archived(&b, 50)
    });
    // Re-drops: ten files again into one spool, five of them into both at once.
    let again: Vec<File> = files
        .iter()
        .step_by(5)
        .map(|file| file.renamed(format!("again-{}", file.name)))
        .collect();
    drop_at_once(&[&a], &again[5..]);
    drop_at_once(&[&a, &b], &again[..5]);
    wait_until(Duration::from_secs(30), "the re-drops archived", || {
        archived(&a, 60) && archived(&b, 55)
    });
    let logs = stop_both(daemons, [&a, &b]);
    let across = |word: &str, name: &str| -> usize {
        logs.iter().map(|log| outcome_lines(log, word, name)).sum()
    };
    for file in &files {
        assert_eq!(
            (
                across("processed", &file.name),
                across("skipped_duplicate", &file.name)
            ),
            (1, 1),
            "{}: one processed, one skipped_duplicate across both logs",
            file.name
        );
    }
    for (at, file) in again.iter().enumerate() {
        let drops = if at < 5 { 2 } else { 1 };
        assert_eq!(
            (
                across("processed", &file.name),
                across("skipped_duplicate", &file.name)
            ),
            (0, drops),
            "{}",
            file.name
        );
    }
    for site in [&a, &b] {
        assert_eq!(site.rejected_names(), Vec::<String>::new());
        assert_eq!(site.waiting(), Vec::<String>::new());
    }
    assert_eq!(
        digests_in(&a.archive()),
        sorted_digests(files.iter().chain(&again))
    );
    assert_eq!(
        digests_in(&b.archive()),
        sorted_digests(files.iter().chain(&again[..5]))
    );
    let sums = assert_as_one_clean_delivery(&server, &db, &files);
    assert_eq!(sums, [1500, 0, 0, 0, 0, 10], "inserted … invalid");
}

#[test]
fn two_daemons_on_overlapping_keys_end_as_the_files_applied_one_at_a_time_in_commit_order() {
    let (server, db, [a, b], daemons) = two_daemons_on_one_database();
    // Thirty files over one pool of keys (one big one); files 8…21 go into both
    // spools at once, 0…7 only into a, 22…29 only into b.
    let files = stream_files(&mut Rng(0x0b1e), "mix", 30, 40);
    drop_at_once(&[&a], &files[..8]);
    drop_at_once(&[&a, &b], &files[8..22]);
    drop_at_once(&[&b], &files[22..]);
    wait_until(Duration::from_secs(40), "both spools archived", || {
        a.archived().len() == 22 && b.archived().len() == 22
    });
    let logs = stop_both(daemons, [&a, &b]);
    for (at, file) in files.iter().enumerate() {
        let across = |word: &str| -> usize {
            logs.iter()
                .map(|log| outcome_lines(log, word, &file.name))
                .sum()
        };
        let skipped = usize::from((8..22).contains(&at));
        assert_eq!(
            (across("processed"), across("skipped_duplicate")),
            (1, skipped),
            "{}",
            file.name
        );
    }
    for site in [&a, &b] {
        assert_eq!(site.rejected_names(), Vec::<String>::new());
    }
    let sums = assert_as_one_clean_delivery(&server, &db, &files);
    // The files met each other's keys: every outcome but `unchanged` is there.
    let [inserted, updated, _, stale, conflicts, invalid] = sums[..] else {
        panic!("six sums")
    };
    assert!(
        inserted > 0 && updated > 0 && stale > 0 && conflicts > 0 && invalid > 0,
        "{sums:?}"
    );
    // Flights the two daemons both wrote have crew rows, equal to the clean
    // delivery's (above): no recomputation of one writer read a flight older than
    // the other's commit.
    assert!(
        !db.query("SELECT crew_id FROM crew_flight LIMIT 1")
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------
// kill -9 at random moments
// ---------------------------------------------------------------------------------

/// Whether process `pid` holds a file of `dir` open.
fn holds_a_file_in(pid: i32, dir: &Path) -> bool {
    let Ok(entries) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    entries
        .filter_map(Result::ok)
        .any(|entry| fs::read_link(entry.path()).is_ok_and(|target| target.starts_with(dir)))
}

#[test]
fn kill_9_cycles_against_postgres_lose_nothing_and_count_nothing_twice() {
    let cycles: usize = std::env::var("SPOOLITE_PG_CRASH_CYCLES")
        .ok()
        .map(|v| v.parse().expect("SPOOLITE_PG_CRASH_CYCLES is a number"))
        .unwrap_or(8);
    let seed: u64 = std::env::var("SPOOLITE_PG_CRASH_SEED")
        .ok()
        .map(|v| v.parse().expect("SPOOLITE_PG_CRASH_SEED is a number"))
        .unwrap_or(0x9c7a);
    eprintln!("PostgreSQL crash test: {cycles} cycles, seed {seed}");
    let mut rng = Rng(seed);
    let server = timed_server();
    let db = PgDb::on(server.clone());
    let uri = db.uri();
    let originals = stream_files(&mut rng, "k", 28, 14);
    // The originals, six re-drops under other names, and three bad files.
    let mut drops: Vec<File> = originals.clone();
    for j in 0..6 {
        let original = &originals[rng.between(0, originals.len() as u64 - 1) as usize];
        let at = rng.between(0, drops.len() as u64) as usize;
        drops.insert(at, original.renamed(format!("again{j}-{}", original.name)));
    }
    let bad = [
        File::new("bad.json".to_owned(), "not JSON at all\n"),
        File::new("shape.json".to_owned(), "{\"events\":[],\"extra\":1}\n"),
        File::new("bad.xls".to_owned(), "flight_id,event_kind\n"),
    ];
    for (at, file) in bad.iter().enumerate() {
        drops.insert(8 + at * 10, file.clone());
    }
    let site = Site::new();
    fs::create_dir_all(site.incoming()).expect("mkdir incoming");
    let incoming = fs::canonicalize(site.incoming()).expect("canonical incoming/");
    let per_cycle = drops.len().div_ceil(cycles);
    let mut next = 0;
    let mut mid_file = 0;
    for cycle in 0..cycles {
        let mut command = spoolite();
        command
            .args(["run", "--settle", SETTLE, "--spool"])
            .arg(&site.spool)
            .args(["--db", &uri]);
        let mut daemon = site.spawn(&mut command);
        let end = (next + per_cycle).min(drops.len());
        while next < end {
            drop_file(&site, &drops[next]);
            next += 1;
        }
        if cycle % 2 == 0 {
            std::thread::sleep(Duration::from_millis(rng.between(100, 700)));
        } else {
            // A moment counted from when the daemon opens a file: parsing, COPY,
            // the apply, COMMIT, the move.
            let deadline = Instant::now() + Duration::from_secs(2);
            while Instant::now() < deadline && !holds_a_file_in(daemon.pid(), &incoming) {
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis(rng.between(0, 80)));
        }
        daemon.assert_running("the kill");
        if holds_a_file_in(daemon.pid(), &incoming) {
            mid_file += 1;
        }
        daemon.kill_hard();
    }
    while next < drops.len() {
        drop_file(&site, &drops[next]);
        next += 1;
    }
    eprintln!(
        "{mid_file} of {cycles} kills landed while a file was open; {} files waiting \
         before the last start",
        site.waiting().len()
    );
    let mut daemon = start_daemon(&site, &uri, &[]);
    daemon.wait(Duration::from_secs(60), "incoming/ empty", || {
        site.waiting().is_empty()
    });
    stop(daemon);
    let good: Vec<&File> = drops
        .iter()
        .filter(|f| !f.name.starts_with("bad") && f.name != "shape.json")
        .collect();
    assert_eq!(
        digests_in(&site.archive()),
        sorted_digests(good.iter().copied())
    );
    assert_eq!(digests_in(&site.rejected()), sorted_digests(&bad));
    assert_as_one_clean_delivery(&server, &db, &originals);
}

// ---------------------------------------------------------------------------------
// The server stopped while files arrive
// ---------------------------------------------------------------------------------

/// The value of the metric `name` (a sample with no labels) in the metrics file.
fn metric(path: &Path, name: &str) -> Option<f64> {
    let text = fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .and_then(|value| value.parse().ok())
}

/// `spoolite status --json` of the site; its exit code and object.
fn status(site: &Site, uri: &str) -> (i32, Value) {
    let output = spoolite()
        .args(["status", "--json", "--spool"])
        .arg(&site.spool)
        .args(["--db", uri])
        .output()
        .expect("run spoolite status");
    let value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("status JSON: {e}: {output:?}"));
    (output.status.code().expect("exit code"), value)
}

/// `spoolite status` of the site, its text.
fn status_text(site: &Site, uri: &str) -> String {
    let output = spoolite()
        .args(["status", "--spool"])
        .arg(&site.spool)
        .args(["--db", uri])
        .output()
        .expect("run spoolite status");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The metrics file of the site's daemon, and the path as `--metrics-file` takes it.
fn metrics_file(site: &Site) -> (PathBuf, String) {
    let metrics = site.dir.path().join("spoolite.prom");
    let arg = metrics.to_str().expect("UTF-8 path").to_owned();
    (metrics, arg)
}

/// How long the server is down.
const OUTAGE: Duration = Duration::from_secs(20);

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs_f64()
}

#[test]
fn the_server_stopped_for_20_s_while_files_arrive_holds_them_back_and_they_go_in_once_it_is_back() {
    let server = Server::own(COMMIT_TIMES);
    let db = PgDb::on(server.clone());
    let uri = db.uri();
    let site = Site::new();
    let (metrics, metrics_arg) = metrics_file(&site);
    let mut daemon = start_daemon(&site, &uri, &["--metrics-file", &metrics_arg]);
    let files: Vec<File> = (0..13_u64)
        .map(|f| {
            let lines: Vec<String> = (0..20)
                .map(|i| keyed_event(200_000 + f * 100 + i, 1, 0, false))
                .collect();
            batch_file(&format!("out{f:02}"), &lines, f % 2 == 0)
        })
        .collect();
    for file in &files[..3] {
        drop_file(&site, file);
    }
    daemon.wait(Duration::from_secs(20), "the first files archived", || {
        site.archived().len() == 3
    });
    let stopped_at = unix_now();
    server.stop("fast");
    // Ten files over 20 s; the daemon's state said as it was all along.
    let mut seen_unreachable = false;
    let outage = Instant::now();
    let mut waiting = files[3..].iter();
    let mut dropped = 0;
    while outage.elapsed() < OUTAGE {
        // A file every 2 s, from the start of the outage.
        if outage.elapsed() >= OUTAGE * dropped / 10
            && let Some(file) = waiting.next()
        {
            drop_file(&site, file);
            dropped += 1;
        }
        {
            daemon.assert_running("the outage");
            assert_eq!(site.rejected_names(), Vec::<String>::new());
            if !seen_unreachable {
                let (code, value) = status(&site, &uri);
                if let Some(fault) = value["database_fault"].as_object() {
                    assert_eq!(code, 2, "status cannot read the database: {value}");
                    assert_eq!(fault["unreachable"], true, "{value}");
                    let since_text = fault["since"].as_str().expect("since");
                    assert!(
                        since_text.ends_with('Z') && since_text.len() == 24,
                        "{value}"
                    );
                    // The metrics file is written at most once a second: it may
                    // name the fault a moment after the state file status reads.
                    let failing_since = || {
                        metric(
                            &metrics,
                            "spoolite_database_failing_since_timestamp_seconds",
                        )
                        .filter(|since| *since > 0.0)
                    };
                    wait_until(
                        Duration::from_secs(10),
                        "the metrics file names the fault",
                        || failing_since().is_some(),
                    );
                    let since = failing_since().expect("the metric");
                    assert!(
                        since >= stopped_at - 0.01 && since <= unix_now(),
                        "failing since {since}, stopped at {stopped_at}"
                    );
                    assert_eq!(metric(&metrics, "spoolite_database_up"), Some(0.0));
                    assert_eq!(metric(&metrics, "spoolite_database_unreachable"), Some(1.0));
                    let text = status_text(&site, &uri);
                    assert!(
                        text.contains(&format!("unreachable since {since_text}")),
                        "{text}"
                    );
                    seen_unreachable = true;
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    assert_eq!(dropped, 10);
    assert!(
        seen_unreachable,
        "status never said the database is unreachable"
    );
    assert_eq!(
        site.archived().len(),
        3,
        "nothing went in while the server was down"
    );
    let down = outage.elapsed();
    server.start_again();
    let back = Instant::now();
    daemon.wait(Duration::from_secs(40), "every file archived", || {
        site.archived().len() == files.len()
    });
    let took = back.elapsed();
    eprintln!(
        "the server stopped for {:?}; every file in {took:?} after it was back",
        down
    );
    assert!(
        took <= Duration::from_millis(30_000 + 100 + 2_000),
        "in {took:?}: more than the 30 s back-off cap and the settle time"
    );
    daemon.wait(Duration::from_secs(10), "the fault cleared", || {
        metric(&metrics, "spoolite_database_up") == Some(1.0)
            && status(&site, &uri).1["database_fault"].is_null()
    });
    assert_eq!(
        metric(
            &metrics,
            "spoolite_database_failing_since_timestamp_seconds"
        ),
        Some(0.0)
    );
    stop(daemon);
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    assert_eq!(digests_in(&site.archive()), sorted_digests(&files));
    assert!(
        site.log().contains("database usable again"),
        "{}",
        site.log()
    );
    assert_as_one_clean_delivery(&server, &db, &files);
}

// ---------------------------------------------------------------------------------
// Connections terminated, statements timed out, a COMMIT unacknowledged
// ---------------------------------------------------------------------------------

/// Sets its flag when dropped.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What the terminating thread did.
#[derive(Debug, Default)]
struct Kills {
    total: usize,
    /// Kills of a backend that showed `COMMIT` as its running statement.
    during_commit: usize,
}

/// Terminates the daemon's connection (every client backend of the database but
/// its own) until `stop`: after each kill, once another file has been archived
/// (so that the daemon's back-off stays short), it waits for a busy backend and
/// then, in turn, kills it at a random moment up to 150 ms later, or hunts for its
/// `COMMIT` (polling) for up to 400 ms and kills it then.
fn terminate_until(uri: &str, archive: &Path, stop: &AtomicBool, seed: u64) -> Kills {
    let mut rng = Rng(seed);
    let mut client = postgres::Client::connect(uri, postgres::NoTls).expect("connect");
    let busy = client
        .prepare(
            "SELECT pid, coalesce(query, '') FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND backend_type = 'client backend'
               AND state IN ('active', 'idle in transaction')",
        )
        .expect("prepare");
    let mut kills = Kills::default();
    let mut archived_at_kill = usize::MAX;
    while !stop.load(Ordering::Relaxed) {
        let archived = names(archive).len();
        if archived_at_kill != usize::MAX && archived <= archived_at_kill {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let hunt = kills.total % 2 == 1;
        let deadline = Instant::now() + Duration::from_millis(400);
        let mut target = None;
        while target.is_none() && Instant::now() < deadline && !stop.load(Ordering::Relaxed) {
            let rows = client.query(&busy, &[]).expect("pg_stat_activity");
            target = rows
                .iter()
                .map(|row| (row.get::<_, i32>(0), row.get::<_, String>(1)))
                .find(|(_, query)| !hunt || query == "COMMIT");
        }
        let Some((pid, query)) = target else {
            continue;
        };
        if !hunt {
            std::thread::sleep(Duration::from_millis(rng.between(0, 150)));
        }
        client
            .execute("SELECT pg_terminate_backend($1)", &[&pid])
            .expect("terminate");
        kills.total += 1;
        kills.during_commit += usize::from(query == "COMMIT");
        archived_at_kill = names(archive).len();
    }
    kills
}

#[test]
fn connections_terminated_at_random_moments_and_a_statement_timeout_double_nothing_and_lose_nothing()
 {
    let server = timed_server();
    let db = PgDb::on(server.clone());
    let uri = db.uri();
    let site = Site::new();
    fs::create_dir_all(site.incoming()).expect("mkdir incoming");
    let originals = stream_files(&mut Rng(0x7e57), "t", 24, 12);
    let again: Vec<File> = originals
        .iter()
        .step_by(6)
        .map(|file| file.renamed(format!("again-{}", file.name)))
        .collect();
    let mut daemon = start_daemon(&site, &uri, &[]);
    wait_schema(&mut daemon, &db);
    let stop_killing = AtomicBool::new(false);
    let kills = std::thread::scope(|scope| {
        let killer = scope.spawn(|| terminate_until(&uri, &site.archive(), &stop_killing, 0xdead));
        // Set however this thread leaves the scope, a failed assertion included,
        // so that the killer ends and the scope can.
        let _stop = StopOnDrop(&stop_killing);
        for (at, file) in originals.iter().enumerate() {
            drop_file(&site, file);
            if at % 6 == 5 {
                drop_file(&site, &again[at / 6]);
            }
            std::thread::sleep(Duration::from_millis(150));
        }
        let all = originals.len() + again.len();
        daemon.wait(Duration::from_secs(60), "every file archived", || {
            site.archived().len() == all
        });
        stop_killing.store(true, Ordering::Relaxed);
        killer.join().expect("the killer thread")
    });
    eprintln!(
        "{} connections terminated, {} while the backend showed COMMIT",
        kills.total, kills.during_commit
    );
    assert!(kills.total >= 8, "{kills:?}");

    // A statement timeout of 1 ms on the database for a while: a new connection
    // takes it up; once it is lifted, a new connection drops it.
    let timeout = batch_file(
        "timeout",
        &(0..6000)
            .map(|i| keyed_event(900_000 + i, 1, 0, false))
            .collect::<Vec<_>>(),
        false,
    );
    let mut admin = db.client();
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} SET statement_timeout = '1ms'",
            db.name()
        ))
        .expect("set a statement timeout");
    admin
        .execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE datname = current_database() AND pid <> pg_backend_pid()
               AND backend_type = 'client backend'",
            &[],
        )
        .expect("terminate");
    drop_file(&site, &timeout);
    // The back-off logs a fault once per 30 s; the state file has the latest.
    daemon.wait(Duration::from_secs(20), "a statement timeout met", || {
        status(&site, &uri).1["database_fault"]["error"]
            .as_str()
            .is_some_and(|error| error.contains("canceling statement due to statement timeout"))
    });
    assert_eq!(site.waiting(), std::slice::from_ref(&timeout.name));
    admin
        .batch_execute(&format!(
            "ALTER DATABASE {} RESET statement_timeout",
            db.name()
        ))
        .expect("lift the statement timeout");
    daemon.wait(
        Duration::from_secs(20),
        "the timed-out file archived",
        || site.waiting().is_empty(),
    );
    stop(daemon);

    assert_eq!(site.rejected_names(), Vec::<String>::new());
    let mut everything: Vec<File> = originals.clone();
    everything.extend(again.iter().cloned());
    everything.push(timeout.clone());
    assert_eq!(digests_in(&site.archive()), sorted_digests(&everything));
    // Each file logged once as what it was: a batch committed (even one whose
    // COMMIT went unacknowledged) is `processed`, never a duplicate of itself.
    let log = site.log();
    for file in originals.iter().chain([&timeout]) {
        assert_eq!(
            (
                outcome_lines(&log, "processed", &file.name),
                outcome_lines(&log, "skipped_duplicate", &file.name)
            ),
            (1, 0),
            "{}",
            file.name
        );
    }
    for file in &again {
        assert_eq!(
            (
                outcome_lines(&log, "processed", &file.name),
                outcome_lines(&log, "skipped_duplicate", &file.name)
            ),
            (0, 1),
            "{}",
            file.name
        );
    }
    eprintln!(
        "COMMITs in doubt settled: {} committed, {} not",
        log.matches("was carried out though the connection").count(),
        log.matches("had not happened; this try committed it")
            .count()
    );
    let mut delivered = originals;
    delivered.push(timeout);
    assert_as_one_clean_delivery(&server, &db, &delivered);
}

/// Waits until commits on `server` wait for the synchronous standby (the setting
/// is taken up by every process in its own time): a probe write in the `postgres`
/// database, terminated once it is seen waiting, until one waits.
fn wait_until_commits_wait_for_the_standby(server: &Arc<Server>, db: &PgDb) {
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no commit waited for the synchronous standby"
        );
        let probe = {
            let server = server.clone();
            std::thread::spawn(move || {
                server.try_admin(
                    "CREATE TABLE IF NOT EXISTS probe (x int); INSERT INTO probe VALUES (1)",
                )
            })
        };
        let looked = Instant::now();
        let mut waiting = Vec::new();
        while waiting.is_empty()
            && !probe.is_finished()
            && looked.elapsed() < Duration::from_secs(2)
        {
            waiting = db.query(
                "SELECT pid::text FROM pg_stat_activity
                 WHERE datname = 'postgres' AND wait_event = 'SyncRep'",
            );
        }
        if let Some(row) = waiting.first() {
            db.query(&format!("SELECT pg_terminate_backend({})::text", row[0]));
        }
        let _ = probe.join().expect("the probe thread");
        if !waiting.is_empty() {
            return;
        }
    }
}

#[test]
fn a_commit_whose_acknowledgement_is_lost_is_settled_by_the_inbox_and_counted_once() {
    // A synchronous standby that never comes: a COMMIT is written and flushed,
    // then waits for it; terminated then, the session ends with its transaction
    // committed and the client told nothing. That is a COMMIT in doubt, on cue.
    let server = Server::own("");
    let db = PgDb::on(server.clone());
    let uri = db.uri();
    let site = Site::new();
    let (metrics, metrics_arg) = metrics_file(&site);
    let mut daemon = start_daemon(&site, &uri, &["--metrics-file", &metrics_arg]);
    let first = batch_file("first", &[keyed_event(1, 1, 0, false)], true);
    drop_file(&site, &first);
    daemon.wait(Duration::from_secs(20), "first.json archived", || {
        site.archived() == ["first.json"]
    });
    let standby = |setting: &str| {
        server.admin(&format!("ALTER SYSTEM {setting}"));
        server.admin("SELECT pg_reload_conf()");
    };
    standby("SET synchronous_standby_names = 'nobody'");
    wait_until_commits_wait_for_the_standby(&server, &db);
    let lines: Vec<String> = (2..502).map(|key| keyed_event(key, 1, 0, false)).collect();
    let doubted = batch_file("doubted", &lines, true);
    drop_file(&site, &doubted);
    let waiting = || {
        db.query(
            "SELECT pid::text FROM pg_stat_activity
             WHERE datname = current_database() AND wait_event = 'SyncRep'",
        )
    };
    let mut pid = Vec::new();
    daemon.wait(
        Duration::from_secs(20),
        "the COMMIT waiting for the standby",
        || {
            pid = waiting();
            !pid.is_empty()
        },
    );
    db.query(&format!("SELECT pg_terminate_backend({})::text", pid[0][0]));
    standby("RESET synchronous_standby_names");
    daemon.wait(Duration::from_secs(20), "doubted.json archived", || {
        site.archived() == ["doubted.json", "first.json"]
    });
    daemon.wait(Duration::from_secs(10), "the metrics written", || {
        fs::read_to_string(&metrics)
            .is_ok_and(|text| text.contains("spoolite_files_total{outcome=\"processed\"} 2\n"))
    });
    stop(daemon);
    let log = site.log();
    assert!(log.contains("during the COMMIT of this batch"), "{log}");
    assert!(
        log.contains("doubted.json: the COMMIT of its batch was carried out though the connection"),
        "{log}"
    );
    assert_eq!(outcome_lines(&log, "processed", "doubted.json"), 1, "{log}");
    assert_eq!(
        outcome_lines(&log, "skipped_duplicate", "doubted.json"),
        0,
        "{log}"
    );
    let text = fs::read_to_string(&metrics).expect("metrics");
    assert!(
        text.contains("spoolite_files_total{outcome=\"skipped_duplicate\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("spoolite_events_total{outcome=\"inserted\"} 501\n"),
        "{text}"
    );
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    assert_eq!(
        db.query("SELECT file_name, inserted::text FROM ingest_inbox ORDER BY file_name"),
        [["doubted.json", "500"], ["first.json", "1"]]
    );
    assert_eq!(
        db.query("SELECT count(*)::text, count(DISTINCT change_seq)::text FROM duty_event_all"),
        [["501", "501"]]
    );
}

#[test]
fn a_server_that_answers_but_refuses_the_database_is_failing_not_unreachable() {
    let db = PgDb::new();
    // The server is up; the database the URI names is not there.
    let uri = db.uri().replacen(db.name(), "no_such_database", 1);
    let site = Site::new();
    let (metrics, metrics_arg) = metrics_file(&site);
    let mut daemon = start_daemon(&site, &uri, &["--metrics-file", &metrics_arg]);
    let file = batch_file("refused", &[keyed_event(900_001, 1, 0, false)], false);
    drop_file(&site, &file);
    let mut fault = Value::Null;
    daemon.wait(Duration::from_secs(20), "status to show the fault", || {
        fault = status(&site, &uri).1["database_fault"].clone();
        fault.is_object()
    });
    assert_eq!(fault.get("unreachable"), None, "{fault}");
    assert!(
        fault["error"]
            .as_str()
            .is_some_and(|e| e.contains("no_such_database")),
        "{fault}"
    );
    daemon.wait(
        Duration::from_secs(10),
        "the metrics to show the fault",
        || metric(&metrics, "spoolite_database_up") == Some(0.0),
    );
    assert_eq!(metric(&metrics, "spoolite_database_unreachable"), Some(0.0));
    let text = status_text(&site, &uri);
    assert!(text.contains("failing since"), "{text}");
    assert!(!text.contains("unreachable"), "{text}");
    assert_eq!(site.rejected_names(), Vec::<String>::new());
    stop(daemon);
}

#[test]
fn an_idle_daemon_tells_an_outage_and_its_end_without_a_file_waiting() {
    let server = Server::own("");
    let db = PgDb::on(server.clone());
    let uri = db.uri();
    let site = Site::new();
    let (metrics, metrics_arg) = metrics_file(&site);
    // A listing a second, so that the look at the server comes soon.
    let mut daemon = start_daemon(
        &site,
        &uri,
        &["--rescan", "1s", "--metrics-file", &metrics_arg],
    );
    wait_schema(&mut daemon, &db);
    daemon.wait(
        Duration::from_secs(10),
        "the metrics to say the database is up",
        || metric(&metrics, "spoolite_database_up") == Some(1.0),
    );

    server.stop("fast");
    let mut fault = Value::Null;
    daemon.wait(Duration::from_secs(15), "status to tell the outage", || {
        fault = status(&site, &uri).1["database_fault"].clone();
        fault.is_object()
    });
    assert_eq!(fault["unreachable"], true, "{fault}");
    daemon.wait(
        Duration::from_secs(10),
        "the metrics to tell the outage",
        || metric(&metrics, "spoolite_database_unreachable") == Some(1.0),
    );
    assert_eq!(metric(&metrics, "spoolite_database_up"), Some(0.0));

    server.start_again();
    // Back-offs double while the server is down; 40 s covers them.
    daemon.wait(
        Duration::from_secs(40),
        "the metrics to tell the end",
        || metric(&metrics, "spoolite_database_up") == Some(1.0),
    );
    let (code, value) = status(&site, &uri);
    assert_eq!(value["database_fault"], Value::Null, "{value}");
    assert_eq!(code, 0, "{value}");
    stop(daemon);
}
