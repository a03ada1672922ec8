//! The real binary decides outcomes exactly as the pure fold (`spoolite::store::fold`)
//! says, in a dry run and in a real ingest alike: counts, stored rows and conflict
//! rows, for files holding several versions of a few keys.

use std::collections::BTreeMap;

use proptest::prelude::*;
use spoolite::store::fold::{Content, Counts, KeyFold, Outcome, Version, conflict_detail};

use crate::support::{Site, dump, event, ingest_command, parse_lines, write};

/// One event of a generated file: which of a few keys, its revision, its payload.
#[derive(Debug, Clone, Copy)]
struct Gen {
    key: u8,
    revision: i64,
    payload: u8,
}

fn flight(key: u8) -> String {
    format!("FL{key}-20270101")
}

fn payload(choice: u8) -> String {
    format!("{{\"p\":{choice}}}")
}

/// A batch file of `events`; its `batch_id` makes every file's bytes its own.
fn file_text(number: usize, events: &[Gen]) -> String {
    let events: Vec<String> = events
        .iter()
        .map(|e| {
            event(
                &flight(e.key),
                "landing",
                "2027-01-01T10:00:00Z",
                Some(e.revision),
                &payload(e.payload),
            )
        })
        .collect();
    format!(
        "{{\"batch_id\":\"f{number}\",\"events\":[{}]}}",
        events.join(",\n")
    )
}

/// What the fold says one file does to `stored` (key → revision, payload): its
/// counts, and its conflicts as quarantine rows `name|record_index|conflict|detail`.
fn fold_file(
    stored: &mut BTreeMap<u8, (i64, String)>,
    name: &str,
    events: &[Gen],
) -> (Counts, Vec<String>) {
    let mut counts = Counts::default();
    let mut conflicts = Vec::new();
    let mut by_key: BTreeMap<u8, Vec<(usize, Gen)>> = BTreeMap::new();
    for (index, e) in events.iter().enumerate() {
        by_key.entry(e.key).or_default().push((index, *e));
    }
    let mut fold = KeyFold::new();
    for (key, versions) in by_key {
        fold.start(stored.get(&key).map(|(revision, payload)| Version {
            revision: *revision,
            content: Content::live(payload),
        }));
        for (index, e) in versions {
            let text = payload(e.payload);
            let incoming = Version {
                revision: e.revision,
                content: Content::live(&text),
            };
            let outcome = fold.offer(incoming);
            if outcome == Outcome::Conflict {
                conflicts.push(format!(
                    "{name}|{index}|conflict|{}",
                    conflict_detail(incoming)
                ));
            }
            counts.count(outcome);
            counts.events_total += 1;
        }
        if let Some(winner) = fold.winner() {
            stored.insert(key, (winner.revision, winner.content.payload.to_owned()));
        }
    }
    (counts, conflicts)
}

fn counts_of(line: &serde_json::Value) -> Counts {
    let count = |name: &str| {
        line[name]
            .as_u64()
            .unwrap_or_else(|| panic!("{name} in {line}"))
    };
    Counts {
        events_total: count("events_total"),
        inserted: count("inserted"),
        updated: count("updated"),
        unchanged: count("unchanged"),
        stale: count("stale"),
        conflicts: count("conflicts"),
        invalid: count("invalid"),
    }
}

/// `spoolite ingest --json [--dry-run] FILE`: the counts of its one line.
fn ingest_counts(site: &Site, path: &std::path::Path, dry_run: bool) -> Counts {
    let mut command = ingest_command(&site.db);
    command.arg("--json");
    if dry_run {
        command.arg("--dry-run");
    }
    let output = command.arg(path).output().expect("run spoolite ingest");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let lines = parse_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "processed", "{lines:?}");
    counts_of(&lines[0])
}

/// Ingests `files` one by one, each after a dry run of it, and checks every count
/// and table against the fold; returns each file's counts.
fn check(files: &[Vec<Gen>]) -> Vec<Counts> {
    let site = Site::new();
    let mut per_file = Vec::new();
    let mut stored = BTreeMap::new();
    let mut quarantine = Vec::new();
    for (number, events) in files.iter().enumerate() {
        let name = format!("f{number}.json");
        let path = write(site.dir.path(), &name, file_text(number, events));
        let (expected, conflicts) = fold_file(&mut stored, &name, events);
        quarantine.extend(conflicts);
        // A dry run first (against an empty database in memory before the first
        // file), then the real ingest: the same counts from the same fold.
        assert_eq!(
            ingest_counts(&site, &path, true),
            expected,
            "dry run of {name}"
        );
        assert_eq!(
            ingest_counts(&site, &path, false),
            expected,
            "ingest of {name}"
        );
        let rows: Vec<String> = stored
            .iter()
            .map(|(key, (revision, payload))| format!("{}|{revision}|{payload}", flight(*key)))
            .collect();
        let mut got = dump(
            &site.db,
            "duty_event",
            &["flight_id", "source_revision", "payload"],
        );
        got.sort();
        assert_eq!(got, rows, "duty_event after {name}");
        let mut got = dump(
            &site.db,
            "quarantine",
            &["file_name", "record_index", "reason", "detail"],
        );
        got.sort();
        quarantine.sort();
        assert_eq!(got, quarantine, "quarantine after {name}");
        per_file.push(expected);
    }
    per_file
}

/// Counts written `[events_total, inserted, updated, unchanged, stale, conflicts,
/// invalid]`.
fn counts(c: [u64; 7]) -> Counts {
    Counts {
        events_total: c[0],
        inserted: c[1],
        updated: c[2],
        unchanged: c[3],
        stale: c[4],
        conflicts: c[5],
        invalid: c[6],
    }
}

#[test]
fn insert_update_stale_conflict_unchanged_within_one_file() {
    let e = |key, revision, payload| Gen {
        key,
        revision,
        payload,
    };
    let per_file = check(&[
        // Key 0: inserted, updated, stale, conflict (with the file's own revision 2),
        // unchanged; key 1: inserted.
        vec![
            e(0, 1, 0),
            e(0, 2, 1),
            e(1, 1, 0),
            e(0, 1, 2),
            e(0, 2, 2),
            e(0, 2, 1),
        ],
        // Key 0: unchanged, updated; key 1: conflict, stale; key 2: inserted.
        vec![e(0, 2, 1), e(1, 1, 1), e(0, 3, 0), e(1, 0, 0), e(2, 5, 0)],
    ]);
    assert_eq!(
        per_file,
        [counts([6, 2, 1, 1, 1, 1, 0]), counts([5, 1, 1, 1, 1, 1, 0])]
    );
}

fn gen_event() -> impl Strategy<Value = Gen> {
    (0u8..3, 0i64..4, 0u8..2).prop_map(|(key, revision, payload)| Gen {
        key,
        revision,
        payload,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn the_binary_decides_as_the_fold(
        files in prop::collection::vec(prop::collection::vec(gen_event(), 1..8), 1..4)
    ) {
        check(&files);
    }
}
