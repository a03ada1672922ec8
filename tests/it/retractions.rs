//! Retractions and the change feed through the real binary: every row of the
//! outcome table with `retracted`, tombstones in `duty_event_all` and not in
//! `duty_event`, flight_times on live rows only, `change_seq`'s laws, and the
//! upgrade of a schema 4 database. Judged by whole tables.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::Value;

use crate::pg_contract::Backend;
use crate::support::{
    COUNT_FIELDS, event, ingest_json, json_batch, query, sha256_hex, sqlite_schema_version, write,
};

/// A database in a temporary folder, with the batch files beside it.
struct Db {
    dir: tempfile::TempDir,
    path: PathBuf,
}

impl Db {
    fn new() -> Db {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("spoolite.db");
        Db { dir, path }
    }

    /// Ingests `content` as `name`; returns its `--json` line.
    fn ingest(&self, name: &str, content: &str) -> Value {
        let file = write(self.dir.path(), name, content);
        let (code, lines) = ingest_json(&self.path, &[&file]);
        assert_eq!(code, 0, "{name}: {lines:?}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        lines[0].clone()
    }

    /// Ingests `content` as `name`, which must be processed with `counts`
    /// (inserted, updated, unchanged, stale, conflicts, invalid).
    fn processed(&self, name: &str, content: &str, counts: [u64; 6]) {
        let line = self.ingest(name, content);
        assert_eq!(line["outcome"], "processed", "{line}");
        // COUNT_FIELDS without events_total.
        let got: Vec<u64> = COUNT_FIELDS[1..]
            .iter()
            .map(|field| line[field].as_u64().expect("a count"))
            .collect();
        assert_eq!(got, counts, "{name}: {line}");
    }

    /// duty_event_all as `instant|revision|retracted|payload` by key, with each
    /// row's change_seq.
    fn all(&self) -> BTreeMap<String, (String, i64)> {
        if !self.path.exists() {
            return BTreeMap::new();
        }
        query(
            &self.path,
            "SELECT idempotency_key, event_kind || ' ' || instant_utc || '|' || source_revision
                 || '|' || retracted || '|' || payload, change_seq FROM duty_event_all",
        )
        .into_iter()
        .map(|row| {
            let seq = row[2].parse().expect("change_seq is an integer");
            (row[0].clone(), (row[1].clone(), seq))
        })
        .collect()
    }

    /// The live events, `kind instant`, sorted.
    fn live(&self) -> Vec<String> {
        query(
            &self.path,
            "SELECT event_kind || ' ' || instant_utc FROM duty_event ORDER BY 1",
        )
        .into_iter()
        .map(|row| row[0].clone())
        .collect()
    }

    fn flight_times(&self) -> Vec<Vec<String>> {
        query(&self.path, "SELECT * FROM flight_times ORDER BY flight_id")
    }
}

const FLIGHT: &str = "BA0117-20261129";

/// An event of `FLIGHT`, retracted when `retracted`.
fn flight_event(kind: &str, instant: &str, revision: i64, retracted: bool) -> String {
    let text = event(FLIGHT, kind, instant, Some(revision), "{}");
    if !retracted {
        return text;
    }
    let open = text.strip_suffix('}').expect("an object");
    format!("{open},\"retracted\":true}}")
}

fn key(kind: &str, instant: &str) -> String {
    sha256_hex(format!("{FLIGHT}|{kind}|{instant}"))
}

/// Checks that exactly the keys `written` got new change_seqs, distinct and larger
/// than every one before, and that every other row kept its own.
fn assert_written(
    before: &BTreeMap<String, (String, i64)>,
    after: &BTreeMap<String, (String, i64)>,
    written: &[&str],
) {
    let max_before = before.values().map(|(_, seq)| *seq).max().unwrap_or(0);
    let mut seqs: Vec<i64> = Vec::new();
    for (key, (row, seq)) in after {
        if written.contains(&key.as_str()) {
            assert!(*seq > max_before, "{key} {row}: {seq} ≤ {max_before}");
            seqs.push(*seq);
        } else {
            assert_eq!(
                before.get(key),
                Some(&(row.clone(), *seq)),
                "{key} untouched"
            );
        }
    }
    assert_eq!(seqs.len(), written.len(), "every written key is stored");
    seqs.sort();
    seqs.dedup();
    assert_eq!(
        seqs.len(),
        written.len(),
        "distinct change_seqs within a file"
    );
}

/// flight_times of `FLIGHT` off blocks at 10:05 and landed at `landing`, nothing
/// else known.
fn landed_after_off_blocks(landing: &str) -> [[&str; 7]; 1] {
    [[
        FLIGHT,
        "2026-11-29T10:05:00Z",
        "NULL",
        landing,
        "NULL",
        "NULL",
        "NULL",
    ]]
}

#[test]
fn a_correction_retracts_the_wrong_event_and_flight_times_take_the_right_one() {
    let db = Db::new();
    let wrong = "2026-11-29T12:07:00Z";
    let right = "2026-11-29T12:05:00Z";
    let (k_wrong, k_right) = (key("landing", wrong), key("landing", right));
    let k_off = key("off_blocks", "2026-11-29T10:05:00Z");

    // The landing logged at 12:07 that was really at 12:05.
    db.processed(
        "day.json",
        &json_batch(&[
            flight_event("off_blocks", "2026-11-29T10:05:00Z", 1, false),
            flight_event("landing", wrong, 1, false),
        ]),
        [2, 0, 0, 0, 0, 0],
    );
    assert_eq!(db.flight_times(), landed_after_off_blocks(wrong));
    let before = db.all();

    // The correction: the right landing, and the wrong one again, retracted, at a
    // higher revision.
    let correction = json_batch(&[
        flight_event("landing", right, 1, false),
        flight_event("landing", wrong, 2, true),
    ]);
    db.processed("correction.json", &correction, [1, 1, 0, 0, 0, 0]);
    let after = db.all();
    assert_written(&before, &after, &[&k_wrong, &k_right]);
    assert_eq!(after[&k_wrong].0, format!("landing {wrong}|2|1|{{}}"));
    assert_eq!(after[&k_right].0, format!("landing {right}|1|0|{{}}"));
    assert_eq!(after.len(), 3, "the tombstone stays in duty_event_all");
    assert_eq!(
        db.live(),
        [
            "landing 2026-11-29T12:05:00Z",
            "off_blocks 2026-11-29T10:05:00Z"
        ]
    );
    assert_eq!(
        db.flight_times(),
        landed_after_off_blocks(right),
        "the retracted landing is not counted; the corrected one is"
    );
    // The retraction's change_seq is the latest of the key, and duty_event shows
    // change_seq for its live rows.
    assert_eq!(
        query(
            &db.path,
            &format!("SELECT change_seq FROM duty_event WHERE idempotency_key = '{k_right}'")
        )[0][0],
        after[&k_right].1.to_string()
    );

    // The correction again: a re-drop changes nothing, change_seq included.
    let line = db.ingest("correction.json", &correction);
    assert_eq!(line["outcome"], "skipped_duplicate");
    assert_eq!(db.all(), after);

    // A retraction at the stored revision is other content: a conflict, quarantined.
    let same_revision = json_batch(&[flight_event("landing", right, 1, true)]);
    db.processed("same-revision.json", &same_revision, [0, 0, 0, 0, 1, 0]);
    assert_eq!(db.all(), after, "a conflict touches no column");
    assert_eq!(
        query(
            &db.path,
            "SELECT file_name, record_index, reason FROM quarantine"
        ),
        [["same-revision.json", "0", "conflict"]]
    );
    // The tombstone again at its own revision: unchanged. A lower one: stale.
    db.processed(
        "tombstone-again.json",
        &json_batch(&[
            flight_event("landing", wrong, 2, true),
            flight_event("landing", wrong, 1, false),
        ]),
        [0, 0, 1, 1, 0, 0],
    );
    assert_eq!(db.all(), after);

    // A higher revision, not retracted, brings the wrong landing back: the last
    // landing is then 12:07 again.
    db.processed(
        "back.ndjson",
        &format!("{}\n", flight_event("landing", wrong, 3, false)),
        [0, 1, 0, 0, 0, 0],
    );
    let back = db.all();
    assert_written(&after, &back, &[&k_wrong]);
    assert_eq!(back[&k_wrong].0, format!("landing {wrong}|3|0|{{}}"));
    assert_eq!(db.flight_times(), landed_after_off_blocks(wrong));
    assert!(back.contains_key(&k_off));
}

#[test]
fn a_retraction_that_arrives_before_its_event_still_wins() {
    let db = Db::new();
    let takeoff = "2026-11-29T10:20:00Z";
    let k_takeoff = key("takeoff", takeoff);
    // The retraction of a key never seen is stored, retracted.
    db.processed(
        "retraction.json",
        &json_batch(&[flight_event("takeoff", takeoff, 2, true)]),
        [1, 0, 0, 0, 0, 0],
    );
    let stored = db.all();
    assert_eq!(stored[&k_takeoff].0, format!("takeoff {takeoff}|2|1|{{}}"));
    assert!(db.live().is_empty());
    assert!(
        db.flight_times().is_empty(),
        "no live flight event, no flight row"
    );
    // The original, with its lower revision, is stale and stays out.
    db.processed(
        "original.json",
        &json_batch(&[flight_event("takeoff", takeoff, 1, false)]),
        [0, 0, 0, 1, 0, 0],
    );
    assert_eq!(db.all(), stored);
    assert!(db.live().is_empty());
    assert!(db.flight_times().is_empty());
    // Either order gives the same tables.
    let other = Db::new();
    other.processed(
        "original.json",
        &json_batch(&[flight_event("takeoff", takeoff, 1, false)]),
        [1, 0, 0, 0, 0, 0],
    );
    assert_eq!(
        other.flight_times(),
        [[FLIGHT, "NULL", takeoff, "NULL", "NULL", "NULL", "NULL"]]
    );
    other.processed(
        "retraction.json",
        &json_batch(&[flight_event("takeoff", takeoff, 2, true)]),
        [0, 1, 0, 0, 0, 0],
    );
    let strip = |rows: BTreeMap<String, (String, i64)>| -> Vec<(String, String)> {
        rows.into_iter().map(|(key, (row, _))| (key, row)).collect()
    };
    assert_eq!(strip(other.all()), strip(db.all()));
    assert!(other.live().is_empty());
    assert!(other.flight_times().is_empty());
}

#[test]
fn status_counts_live_events_and_names_the_retracted_apart() {
    let db = Db::new();
    let (off, on) = ("2026-11-29T10:05:00Z", "2026-11-29T12:35:00Z");
    db.processed(
        "day.json",
        &json_batch(&[
            flight_event("off_blocks", off, 1, false),
            flight_event("on_blocks", on, 1, false),
        ]),
        [2, 0, 0, 0, 0, 0],
    );
    db.processed(
        "retraction.json",
        &json_batch(&[flight_event("on_blocks", on, 2, true)]),
        [0, 1, 0, 0, 0, 0],
    );
    let spool = db.dir.path().join("spool");
    for folder in ["incoming", "archive", "rejected"] {
        std::fs::create_dir_all(spool.join(folder)).expect("spool folder");
    }
    let output = crate::support::spoolite()
        .args(["status", "--json", "--spool"])
        .arg(&spool)
        .arg("--db")
        .arg(&db.path)
        .output()
        .expect("run status");
    let status: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("status JSON: {e}: {output:?}"));
    // `events` counts duty_event, the live rows; the tombstone is not one.
    assert_eq!(db.live().len(), 1);
    assert_eq!(status["events"], 1, "{status}");
    assert_eq!(status["retracted_events"], 1, "{status}");
}

#[test]
fn retracted_is_true_or_false_and_nothing_else() {
    let db = Db::new();
    let base = event(FLIGHT, "landing", "2026-11-29T12:05:00Z", Some(1), "{}");
    let open = base.strip_suffix('}').expect("an object");
    let events = [
        format!("{open},\"retracted\":1}}"),
        format!("{open},\"retracted\":\"true\"}}"),
        format!("{open},\"retracted\":[]}}"),
        format!("{open},\"retracted\":null}}"),
    ];
    db.processed("kinds.json", &json_batch(&events), [1, 0, 0, 0, 0, 3]);
    let quarantined = query(
        &db.path,
        "SELECT record_index, reason, detail FROM quarantine ORDER BY record_index",
    );
    let reasons: Vec<[&str; 2]> = quarantined
        .iter()
        .map(|row| [row[0].as_str(), row[1].as_str()])
        .collect();
    assert_eq!(
        reasons,
        [
            ["0", "wrong_type"],
            ["1", "wrong_type"],
            ["2", "wrong_type"]
        ]
    );
    assert!(
        quarantined
            .iter()
            .all(|row| row[2].contains("retracted must be true or false")),
        "{quarantined:?}"
    );
    // null means absent: a live event.
    assert_eq!(db.live(), ["landing 2026-11-29T12:05:00Z"]);
}

/// One event of a generated file: which of a few keys, its revision, whether it
/// retracts, and which payload.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Gen {
    key: u8,
    revision: i64,
    retracted: bool,
    payload: u8,
}

fn gen_file() -> impl Strategy<Value = Vec<Gen>> {
    prop::collection::vec(
        (0..4u8, 0..4i64, prop::bool::weighted(0.3), 0..2u8).prop_map(
            |(key, revision, retracted, payload)| Gen {
                key,
                revision,
                retracted,
                payload,
            },
        ),
        0..6,
    )
}

fn gen_text(number: usize, events: &[Gen]) -> String {
    let events: Vec<String> = events
        .iter()
        .map(|e| {
            let text = event(
                &format!("FL{}-20270101", e.key),
                "landing",
                "2027-01-01T10:00:00Z",
                Some(e.revision),
                &format!("{{\"p\":{}}}", e.payload),
            );
            let open = text.strip_suffix('}').expect("an object");
            format!("{open},\"retracted\":{}}}", e.retracted)
        })
        .collect();
    format!(
        "{{\"batch_id\":\"f{number}\",\"events\":[{}]}}",
        events.join(",\n")
    )
}

/// The keys a file writes, by the contract's table applied in file order onto
/// `stored` (key → revision, retracted, payload), which it updates.
fn written_keys(stored: &mut BTreeMap<u8, (i64, bool, u8)>, events: &[Gen]) -> Vec<String> {
    let mut written = Vec::new();
    for e in events {
        let wins = match stored.get(&e.key) {
            None => true,
            Some((revision, ..)) => e.revision > *revision,
        };
        if wins {
            stored.insert(e.key, (e.revision, e.retracted, e.payload));
            let key = sha256_hex(format!("FL{}-20270101|landing|2027-01-01T10:00:00Z", e.key));
            if !written.contains(&key) {
                written.push(key);
            }
        }
    }
    written
}

/// duty_event_all of either backend as `kind instant|revision|retracted|payload` by
/// key, with each row's change_seq; empty before the schema exists.
fn all_rows(db: &Backend) -> BTreeMap<String, (String, i64)> {
    if !db.has_schema() {
        return BTreeMap::new();
    }
    db.rows(
        "SELECT idempotency_key, event_kind || ' ' || instant_utc || '|' || source_revision{t}
             || '|' || {retracted}{t} || '|' || payload, change_seq{t} FROM duty_event_all",
    )
    .into_iter()
    .map(|row| {
        let seq = row[2].parse().expect("change_seq is an integer");
        (row[0].clone(), (row[1].clone(), seq))
    })
    .collect()
}

/// Delivers generated files (each at its first delivery, again at a re-drop) into
/// `db`, an empty database of either backend, checking change_seq's laws after each.
pub(crate) fn check_change_seq_laws(files: &[Vec<Gen>], deliveries: &[usize], db: &Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    let texts: Vec<String> = files
        .iter()
        .enumerate()
        .map(|(i, events)| gen_text(i, events))
        .collect();
    let mut stored = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for &i in deliveries {
        let before = all_rows(db);
        let file = write(dir.path(), &format!("f{i}.json"), &texts[i]);
        let (code, lines) = ingest_json(&db.db(), &[&file]);
        assert_eq!(code, 0, "f{i}.json: {lines:?}");
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0];
        let after = all_rows(db);
        if !seen.insert(i) {
            assert_eq!(line["outcome"], "skipped_duplicate");
            assert_eq!(after, before, "a re-drop changes nothing");
            continue;
        }
        assert_eq!(line["outcome"], "processed", "{line}");
        let written = written_keys(&mut stored, &files[i]);
        let written: Vec<&str> = written.iter().map(String::as_str).collect();
        assert_written(&before, &after, &written);
        // The rows a follower reads after the old maximum are exactly these.
        let after_max = db.rows(&format!(
            "SELECT idempotency_key FROM duty_event_all WHERE change_seq > {}
             ORDER BY change_seq",
            before.values().map(|(_, seq)| *seq).max().unwrap_or(0)
        ));
        assert_eq!(after_max.len(), written.len());
        let miscounted = db.rows(
            "SELECT file_name, rows_last_written{t} FROM batch_summary AS b WHERE rows_last_written
                 <> (SELECT count(*) FROM duty_event_all AS d WHERE d.batch_digest = b.batch_digest)",
        );
        assert!(miscounted.is_empty(), "rows_last_written: {miscounted:?}");
    }
    // The stored rows are the table's winners, retracted or not.
    let live: Vec<String> = stored
        .iter()
        .filter(|(_, (_, retracted, _))| !retracted)
        .map(|(key, _)| format!("landing 2027-01-01T10:00:00Z FL{key}"))
        .collect();
    let got: Vec<String> = db
        .rows(
            "SELECT event_kind || ' ' || instant_utc || ' ' || substr(flight_id, 1, 3)
             FROM duty_event ORDER BY flight_id",
        )
        .into_iter()
        .map(|row| row[0].clone())
        .collect();
    assert_eq!(got, live);
    let max_seq: i64 = db.rows("SELECT coalesce(max(change_seq), 0){t} FROM duty_event_all")[0][0]
        .parse()
        .expect("a number");
    assert!(max_seq >= stored.len() as i64);
}

/// Up to four generated files, and their deliveries: each at least once, some
/// again, in any order.
pub(crate) fn files_and_deliveries() -> impl Strategy<Value = (Vec<Vec<Gen>>, Vec<usize>)> {
    prop::collection::vec(gen_file(), 1..=4).prop_flat_map(|files| {
        let count = files.len();
        let deliveries = prop::collection::vec(0..count, 0..=count)
            .prop_map(move |again| (0..count).chain(again).collect::<Vec<usize>>())
            .prop_shuffle();
        (Just(files), deliveries)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    /// change_seq is set on inserted and updated rows only, larger for every later
    /// commit, distinct within a file, untouched by re-drops, stale, unchanged and
    /// conflicting events.
    #[test]
    fn change_seq_follows_the_laws_over_random_files_and_re_drops(
        (files, deliveries) in files_and_deliveries()
    ) {
        check_change_seq_laws(&files, &deliveries, &Backend::sqlite());
    }
}

/// The two files of `schema_4_database`'s batches.
fn schema_4_files() -> (String, String) {
    let day = json_batch(&[
        flight_event("off_blocks", "2026-11-29T10:05:00Z", 1, false),
        flight_event("landing", "2026-11-29T12:05:00Z", 1, false),
        flight_event("on_blocks", "2026-11-29T12:15:00.5Z", 1, false),
    ]);
    let fix = json_batch(&[event(
        FLIGHT,
        "landing",
        "2026-11-29T12:05:00Z",
        Some(2),
        "{\"fix\":1}",
    )]);
    (day, fix)
}

/// Builds a database as spoolite left it at schema 4, from the migration files
/// themselves, holding `schema_4_files`: one flight with three events, and a later
/// batch that updated one of them.
fn schema_4_database(path: &Path) {
    let conn = rusqlite::Connection::open(path).expect("create db");
    for migration in [
        include_str!("../../schema/0001_initial.sql"),
        include_str!("../../schema/0002_analyst_views.sql"),
        include_str!("../../schema/0003_binary_key.sql"),
        include_str!("../../schema/0004_times_sort.sql"),
    ] {
        conn.execute_batch(migration).expect("old schema");
    }
    let (day, fix) = schema_4_files();
    let (a, b) = (sha256_hex(&day), sha256_hex(&fix));
    let off = key("off_blocks", "2026-11-29T10:05:00Z");
    let landing = key("landing", "2026-11-29T12:05:00Z");
    let on = key("on_blocks", "2026-11-29T12:15:00.5Z");
    conn.execute_batch(&format!(
        "INSERT INTO ingest_inbox VALUES ('{a}', 'day', 'day.json', '2026-11-29T13:00:00.000Z',
             3, 3, 0, 0, 0, 0, 0);
         INSERT INTO ingest_inbox VALUES ('{b}', NULL, 'fix.json', '2026-11-29T14:00:00.000Z',
             1, 0, 1, 0, 0, 0, 0);
         INSERT INTO flight (flight_id) VALUES ('{FLIGHT}');
         INSERT INTO duty_event_data VALUES (x'{off}', 1, 'off_blocks', '2026-11-29T10:05:00Z',
             1, '{{}}', '{a}', '2026-11-29T13:00:00.000Z', '2026-11-29T13:00:00.000Z');
         INSERT INTO duty_event_data VALUES (x'{landing}', 1, 'landing', '2026-11-29T12:05:00Z',
             2, '{{\"fix\":1}}', '{b}', '2026-11-29T13:00:00.000Z', '2026-11-29T14:00:00.000Z');
         INSERT INTO duty_event_data VALUES (x'{on}', 1, 'on_blocks', '2026-11-29T12:15:00.5Z',
             1, '{{}}', '{a}', '2026-11-29T13:00:00.000Z', '2026-11-29T13:00:00.000Z');
         PRAGMA user_version = 4;"
    ))
    .expect("schema 4 rows");
}

#[test]
fn a_schema_4_database_keeps_every_row_and_gains_retracted_and_change_seq() {
    let db = Db::new();
    schema_4_database(&db.path);
    let columns = "idempotency_key, flight_id, event_kind, instant_utc, source_revision, payload, \
                   batch_digest, first_seen_at, updated_at";
    let old = query(
        &db.path,
        &format!("SELECT {columns} FROM duty_event ORDER BY idempotency_key"),
    );
    let old_inbox = query(&db.path, "SELECT * FROM ingest_inbox ORDER BY batch_digest");

    // A new batch: the upgrade runs first, then the batch.
    db.processed(
        "new.json",
        &json_batch(&[
            flight_event("takeoff", "2026-11-29T10:20:00Z", 1, false),
            flight_event("landing", "2026-11-29T12:05:00Z", 3, true),
        ]),
        [1, 1, 0, 0, 0, 0],
    );
    assert_eq!(
        query(&db.path, "PRAGMA user_version"),
        [[sqlite_schema_version().to_string()]]
    );
    // Every old row and inbox row is kept, column for column; the landing is the
    // one the new batch retracted.
    let landing = key("landing", "2026-11-29T12:05:00Z");
    let kept = query(
        &db.path,
        &format!(
            "SELECT {columns} FROM duty_event_all WHERE idempotency_key <> '{landing}'
             AND event_kind <> 'takeoff' ORDER BY idempotency_key"
        ),
    );
    let old_kept: Vec<Vec<String>> = old
        .iter()
        .filter(|row| row[0] != landing)
        .cloned()
        .collect();
    assert_eq!(kept, old_kept);
    let inbox = query(
        &db.path,
        "SELECT batch_digest, batch_id, file_name, ingested_at, events_total, inserted, updated,
             unchanged, stale, conflicts, invalid FROM ingest_inbox
         WHERE file_name <> 'new.json' ORDER BY batch_digest",
    );
    assert_eq!(inbox, old_inbox);
    // Old rows are live and numbered in the order they were last written; the new
    // batch's rows come after them.
    let seqs = query(
        &db.path,
        "SELECT event_kind, retracted, change_seq FROM duty_event_all ORDER BY change_seq",
    );
    // The landing was 3 (written last, at 14:00) until the new batch gave it and
    // the takeoff 4 and 5, in key order.
    assert_eq!(
        seqs[..2],
        [["off_blocks", "0", "1"], ["on_blocks", "0", "2"]]
    );
    let mut new_rows: Vec<Vec<String>> = seqs[2..].to_vec();
    new_rows.sort();
    let mut numbers: Vec<&str> = new_rows.iter().map(|row| row[2].as_str()).collect();
    numbers.sort();
    assert_eq!(numbers, ["4", "5"]);
    let kinds: Vec<[&str; 2]> = new_rows
        .iter()
        .map(|row| [row[0].as_str(), row[1].as_str()])
        .collect();
    assert_eq!(kinds, [["landing", "1"], ["takeoff", "0"]]);
    // flight_times was computed by the upgrade from the old rows and kept by the
    // new batch: the landing is retracted now.
    assert_eq!(
        db.flight_times(),
        [[
            FLIGHT,
            "2026-11-29T10:05:00Z",
            "2026-11-29T10:20:00Z",
            "NULL",
            "2026-11-29T12:15:00.5Z",
            "130.01",
            "NULL"
        ]]
    );
    // The files ingested before the upgrade still skip when re-dropped.
    let all = db.all();
    let (day, fix) = schema_4_files();
    for (name, content) in [("day.json", day), ("fix.json", fix)] {
        let line = db.ingest(name, &content);
        assert_eq!(line["outcome"], "skipped_duplicate", "{line}");
    }
    assert_eq!(db.all(), all);
    let batch_summary = query(
        &db.path,
        "SELECT file_name, rows_last_written FROM batch_summary ORDER BY ingested_at",
    );
    assert_eq!(
        batch_summary,
        [["day.json", "2"], ["fix.json", "0"], ["new.json", "2"]]
            .map(|row| row.map(str::to_owned))
            .to_vec()
    );
}
