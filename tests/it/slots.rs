//! Slots (the contract's *Slots*), through the real binary on SQLite and on
//! PostgreSQL from one test body: within a slot the highest revision wins and
//! every other row reads retracted, with the displaced rows in the change feed; a
//! lower revision is stored retracted; an equal revision of another key is a
//! conflict; a key's slot never changes; `check` finds each slot settled; and the
//! event columns depend only on the set of files delivered.

use crate::pg_contract::Backend;
use crate::support::{COUNT_FIELDS, ingest_json, spoolite, write};

/// An off-blocks of FL1 at `time` (HH:MM) in slot `slot` with `revision`.
fn off_blocks(time: &str, slot: Option<&str>, revision: i64) -> String {
    let slot = slot
        .map(|s| format!(",\"slot\":\"{s}\""))
        .unwrap_or_default();
    format!(
        "{{\"flight_id\":\"FL1-20261201\",\"event_kind\":\"off_blocks\",\
         \"instant_utc\":\"2026-12-01T{time}:00Z\",\"source_revision\":{revision}{slot}}}\n"
    )
}

/// The event columns of `duty_event_all`, one line per row, sorted.
fn events(db: &Backend) -> Vec<String> {
    db.lines(
        "SELECT flight_id, event_kind, instant_utc, source_revision{t}, payload, \
         {retracted}{t}, coalesce(slot, '-') FROM duty_event_all",
    )
}

/// Ingests `files` (name, content) in order into `db`; returns each file's line.
fn deliver(db: &Backend, files: &[(&str, String)]) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut lines = Vec::new();
    for (name, content) in files {
        let path = write(dir.path(), name, content);
        let (code, mut got) = ingest_json(&db.db(), &[&path]);
        assert_eq!(code, 0, "{got:?}");
        lines.append(&mut got);
    }
    lines
}

/// A file's outcome counts (`COUNT_FIELDS` but `events_total`).
fn counts(line: &serde_json::Value) -> [u64; 6] {
    let [_, outcomes @ ..] = COUNT_FIELDS;
    outcomes.map(|name| {
        line[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in {line}"))
    })
}

/// `spoolite check` on `db`: exits 0 and its `slots` line holds.
fn assert_checks(db: &Backend) {
    let output = spoolite()
        .args(["check", "--db"])
        .arg(db.db())
        .output()
        .expect("check");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(
        text.lines()
            .any(|l| l.starts_with("ok") && l.split_whitespace().nth(1) == Some("slots")),
        "{text}"
    );
}

fn a_higher_revision_displaces_the_lower_which_the_feed_carries(db: &Backend) {
    let lines = deliver(
        db,
        &[
            ("a.ndjson", off_blocks("09:05", Some("1"), 1)),
            ("b.ndjson", off_blocks("09:07", Some("1"), 2)),
        ],
    );
    // The displacement is no outcome of the second file's events.
    assert_eq!(counts(&lines[1]), [1, 0, 0, 0, 0, 0]);
    assert_eq!(
        events(db),
        [
            "FL1-20261201|off_blocks|2026-12-01T09:05:00Z|1|{}|1|1",
            "FL1-20261201|off_blocks|2026-12-01T09:07:00Z|2|{}|0|1",
        ]
    );
    assert_eq!(
        db.lines("SELECT off_blocks_utc FROM flight_times"),
        ["2026-12-01T09:07:00Z"]
    );
    // The displaced row is written as the second batch's change: its change_seq
    // follows the winner's, its batch_digest is the second file's.
    assert_eq!(
        db.lines(
            "SELECT instant_utc, {retracted}{t}, change_seq{t}, \
             (CASE WHEN batch_digest = (SELECT batch_digest FROM ingest_inbox \
                                        WHERE file_name = 'b.ndjson') \
              THEN 'b' ELSE 'a' END) FROM duty_event_all"
        ),
        ["2026-12-01T09:05:00Z|1|3|b", "2026-12-01T09:07:00Z|0|2|b",]
    );
    let feed = spoolite()
        .args(["changes", "--since", "2", "--db"])
        .arg(db.db())
        .output()
        .expect("changes");
    let text = String::from_utf8_lossy(&feed.stdout);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("\"instant_utc\":\"2026-12-01T09:05:00Z\"")
            && text.contains("\"retracted\":true,\"slot\":\"1\""),
        "{text}"
    );
    assert_checks(db);
}

#[test]
fn a_higher_revision_in_a_slot_displaces_the_lower_on_sqlite() {
    a_higher_revision_displaces_the_lower_which_the_feed_carries(&Backend::sqlite());
}

#[test]
fn a_higher_revision_in_a_slot_displaces_the_lower_on_postgres() {
    a_higher_revision_displaces_the_lower_which_the_feed_carries(&Backend::postgres());
}

fn lower_stored_retracted_equal_conflicts(db: &Backend) {
    let lines = deliver(
        db,
        &[
            ("a.ndjson", off_blocks("09:07", Some("1"), 5)),
            (
                "b.ndjson",
                off_blocks("09:05", Some("1"), 3) + &off_blocks("09:06", Some("1"), 5),
            ),
            // In one file: the first of two keys with one revision holds it (and
            // the other's time, a later landing, is not the flight's).
            (
                "c.ndjson",
                off_blocks("10:00", Some("2"), 1)
                    + &off_blocks("10:01", Some("2"), 1)
                    + &off_blocks("12:00", Some("3"), 1).replace("off_blocks", "landing")
                    + &off_blocks("12:05", Some("3"), 1).replace("off_blocks", "landing"),
            ),
        ],
    );
    assert_eq!(counts(&lines[1]), [1, 0, 0, 0, 1, 0]);
    assert_eq!(counts(&lines[2]), [2, 0, 0, 0, 2, 0]);
    assert_eq!(
        db.lines("SELECT off_blocks_utc, landing_utc FROM flight_times"),
        ["2026-12-01T09:07:00Z|2026-12-01T12:00:00Z"]
    );
    assert_eq!(
        events(db),
        [
            "FL1-20261201|landing|2026-12-01T12:00:00Z|1|{}|0|3",
            "FL1-20261201|off_blocks|2026-12-01T09:05:00Z|3|{}|1|1",
            "FL1-20261201|off_blocks|2026-12-01T09:07:00Z|5|{}|0|1",
            "FL1-20261201|off_blocks|2026-12-01T10:00:00Z|1|{}|0|2",
        ]
    );
    assert_eq!(
        db.lines("SELECT file_name, record_index{t}, reason FROM quarantine"),
        [
            "b.ndjson|1|conflict",
            "c.ndjson|1|conflict",
            "c.ndjson|3|conflict"
        ]
    );
    assert_checks(db);
}

#[test]
fn a_lower_revision_is_stored_retracted_an_equal_one_conflicts_on_sqlite() {
    lower_stored_retracted_equal_conflicts(&Backend::sqlite());
}

#[test]
fn a_lower_revision_is_stored_retracted_an_equal_one_conflicts_on_postgres() {
    lower_stored_retracted_equal_conflicts(&Backend::postgres());
}

fn slot_never_changes_and_a_resent_displaced_event_is_unchanged(db: &Backend) {
    let lines = deliver(
        db,
        &[
            ("a.ndjson", off_blocks("09:05", Some("1"), 1)),
            ("b.ndjson", off_blocks("09:07", Some("1"), 2)),
            // The displaced event again, as sent (other bytes: a new file).
            ("c.ndjson", off_blocks("09:05", Some("1"), 1) + "\n"),
            // The same key without its slot, and with another.
            (
                "d.ndjson",
                off_blocks("09:05", None, 9) + &off_blocks("09:05", Some("2"), 9),
            ),
        ],
    );
    assert_eq!(counts(&lines[2]), [0, 0, 1, 0, 0, 0]);
    assert_eq!(counts(&lines[3]), [0, 0, 0, 0, 0, 2]);
    assert_eq!(
        db.lines("SELECT record_index{t}, reason FROM quarantine"),
        ["0|slot_changed", "1|slot_changed"]
    );
    assert_eq!(
        db.lines("SELECT instant_utc, slot FROM duty_event"),
        ["2026-12-01T09:07:00Z|1"]
    );
    assert_checks(db);
}

#[test]
fn a_keys_slot_never_changes_on_sqlite() {
    slot_never_changes_and_a_resent_displaced_event_is_unchanged(&Backend::sqlite());
}

#[test]
fn a_keys_slot_never_changes_on_postgres() {
    slot_never_changes_and_a_resent_displaced_event_is_unchanged(&Backend::postgres());
}

/// The files of `the_event_columns_depend_only_on_the_set_of_files_delivered`.
fn order_files() -> Vec<(&'static str, String)> {
    vec![
        ("a.ndjson", off_blocks("09:05", Some("1"), 1)),
        ("b.ndjson", off_blocks("09:07", Some("1"), 3)),
        ("c.ndjson", off_blocks("09:06", Some("1"), 2)),
        // An explicit retraction wins its slot and leaves it with no live event.
        (
            "d.ndjson",
            "{\"flight_id\":\"FL2-20261201\",\"event_kind\":\"landing\",\
             \"instant_utc\":\"2026-12-01T11:00:00Z\",\"source_revision\":1,\"slot\":\"1\"}\n\
             {\"flight_id\":\"FL2-20261201\",\"event_kind\":\"landing\",\
             \"instant_utc\":\"2026-12-01T11:02:00Z\",\"source_revision\":2,\"slot\":\"1\",\
             \"retracted\":true}\n"
                .to_owned(),
        ),
    ]
}

#[test]
fn the_event_columns_depend_only_on_the_set_of_files_delivered() {
    let files = order_files();
    let mut seen = Vec::new();
    for (order, db) in [
        ([0, 1, 2, 3], Backend::sqlite()),
        ([3, 2, 1, 0], Backend::sqlite()),
        ([2, 0, 3, 1], Backend::sqlite()),
        ([1, 3, 0, 2], Backend::postgres()),
    ] {
        let ordered: Vec<_> = order.iter().map(|&i| files[i].clone()).collect();
        deliver(&db, &ordered);
        seen.push((
            events(&db),
            db.lines("SELECT flight_id, off_blocks_utc, landing_utc FROM flight_times"),
        ));
    }
    for other in &seen[1..] {
        assert_eq!(&seen[0], other);
    }
    assert_eq!(
        seen[0].0,
        [
            "FL1-20261201|off_blocks|2026-12-01T09:05:00Z|1|{}|1|1",
            "FL1-20261201|off_blocks|2026-12-01T09:06:00Z|2|{}|1|1",
            "FL1-20261201|off_blocks|2026-12-01T09:07:00Z|3|{}|0|1",
            "FL2-20261201|landing|2026-12-01T11:00:00Z|1|{}|1|1",
            "FL2-20261201|landing|2026-12-01T11:02:00Z|2|{}|1|1",
        ]
    );
}

#[test]
fn check_names_a_slot_with_two_live_rows() {
    let db = Backend::sqlite();
    deliver(
        &db,
        &[
            ("a.ndjson", off_blocks("09:05", Some("1"), 1)),
            ("b.ndjson", off_blocks("09:07", Some("1"), 2)),
        ],
    );
    rusqlite::Connection::open(db.db())
        .expect("open")
        .execute_batch("UPDATE spoolite_event SET retracted = 0, displaced = 0")
        .expect("tamper");
    let output = spoolite()
        .args(["check", "--db"])
        .arg(db.db())
        .output()
        .expect("check");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(!output.status.success(), "{text}");
    let line = text
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some("slots"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.starts_with("FAIL") && line.contains("1 slot with a live row other than the highest revision: FL1-20261201 off_blocks slot 1"),
        "{line}"
    );
}

/// The keys of the property test: (flight, slot, instant), over two flights so
/// that a file may hold a flight's events in more than one run. Key `k` sends
/// revisions `k`, `k + KEYS`, `k + 2 * KEYS` only, so no two keys of a slot ever
/// send one revision (which would be a conflict, an outcome that depends on
/// order).
const KEYS: [(&str, &str, &str); 5] = [
    ("FL1-20261201", "1", "09:05"),
    ("FL1-20261201", "1", "09:06"),
    ("FL2-20261201", "1", "09:07"),
    ("FL1-20261201", "2", "10:00"),
    ("FL2-20261201", "1", "09:08"),
];

/// Whether event (key, round) is a retraction, and its payload.
fn version_of(key: usize, round: usize) -> (bool, String) {
    (
        (key + round).is_multiple_of(3),
        format!("{{\"round\":{round},\"tail\":\"D-AI{key}\"}}"),
    )
}

/// One event of the property test as an NDJSON line.
fn versioned(key: usize, round: usize) -> String {
    let (flight, slot, time) = KEYS[key];
    let (retracted, payload) = version_of(key, round);
    format!(
        "{{\"flight_id\":\"{flight}\",\"event_kind\":\"off_blocks\",\
         \"instant_utc\":\"2026-12-01T{time}:00Z\",\"source_revision\":{},\
         \"slot\":\"{slot}\",\"payload\":{payload},\"retracted\":{retracted}}}\n",
        key + round * KEYS.len()
    )
}

/// The event columns the contract gives for the files' events, computed without
/// spoolite: each key's highest revision as sent; within a slot only the highest
/// revision reads as sent, the others read retracted.
fn expected(files: &[Vec<(usize, usize)>]) -> Vec<String> {
    let mut top = [None::<usize>; KEYS.len()];
    for &(key, round) in files.iter().flatten() {
        top[key] = top[key].max(Some(round));
    }
    let revision = |key: usize, round: usize| key + round * KEYS.len();
    let mut rows: Vec<String> = (0..KEYS.len())
        .filter_map(|key| top[key].map(|round| (key, round)))
        .map(|(key, round)| {
            let (flight, slot, time) = KEYS[key];
            let wins = (0..KEYS.len())
                .filter(|&other| KEYS[other].0 == flight && KEYS[other].1 == slot)
                .filter_map(|other| top[other].map(|r| revision(other, r)))
                .max()
                == Some(revision(key, round));
            let (retracted, payload) = version_of(key, round);
            format!(
                "{flight}|off_blocks|2026-12-01T{time}:00Z|{}|{payload}|{}|{slot}",
                revision(key, round),
                u8::from(retracted || !wins)
            )
        })
        .collect();
    rows.sort();
    rows
}

proptest::proptest! {
    // Each case runs the binary once per delivery: keep the count modest.
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 16, ..Default::default() })]

    #[test]
    fn any_order_and_repetition_of_slotted_files_leaves_the_same_event_columns(
        files in proptest::collection::vec(
            proptest::collection::vec((0..KEYS.len(), 0..3usize), 1..5), 1..4),
        again in proptest::collection::vec(0..3usize, 0..3),
        seed in proptest::prelude::any::<u64>(),
    ) {
        let named: Vec<(String, String)> = files
            .iter()
            .enumerate()
            .map(|(i, events)| {
                (format!("f{i}.ndjson"), events.iter().map(|&(k, r)| versioned(k, r)).collect())
            })
            .collect();
        // Every file once and some again, in an order drawn from the seed.
        let mut deliveries: Vec<usize> = (0..files.len())
            .chain(again.iter().filter(|&&i| i < files.len()).copied())
            .collect();
        let mut state = seed | 1;
        for i in (1..deliveries.len()).rev() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            deliveries.swap(i, (state % (i as u64 + 1)) as usize);
        }
        let want = expected(&files);
        for order in [deliveries, (0..files.len()).collect()] {
            let db = Backend::sqlite();
            let ordered: Vec<(&str, String)> = order
                .iter()
                .map(|&i| (named[i].0.as_str(), named[i].1.clone()))
                .collect();
            deliver(&db, &ordered);
            proptest::prop_assert_eq!(&events(&db), &want);
            // Each flight's first live off-blocks, as flight_times reads it.
            let mut first_live: Vec<String> = Vec::new();
            for flight in ["FL1-20261201", "FL2-20261201"] {
                let live = want
                    .iter()
                    .map(|row| row.split('|').collect::<Vec<_>>())
                    .filter(|columns| columns[0] == flight)
                    .map(|columns| (columns[5] == "0", columns[2].to_owned()))
                    .collect::<Vec<_>>();
                if let Some(first) = live.iter().filter(|(on, _)| *on).map(|(_, t)| t).min() {
                    first_live.push(format!("{flight}|{first}"));
                }
            }
            proptest::prop_assert_eq!(
                db.lines(
                    "SELECT flight_id, off_blocks_utc FROM flight_times \
                     WHERE off_blocks_utc IS NOT NULL"
                ),
                first_live
            );
            assert_checks(&db);
        }
    }
}
