//! `spoolite ingest` end to end: idempotency keys, canonical forms, every outcome of
//! the contract's table, re-delivery, order independence, bad whole files and
//! transactions that fail half-way, each judged by whole tables of the real database.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{SystemTime, UNIX_EPOCH};

use proptest::prelude::*;
use serde_json::Value;
use tempfile::TempDir;

use crate::pg_contract::Backend;
use crate::support::{
    COUNT_FIELDS, EVENT_COLUMNS, dump, event, ingest_command, ingest_json, json_batch, off_blocks,
    parse_lines, query, sha256_hex, snapshot, spoolite, sqlite_schema_version, write,
};

/// A database in a temporary folder, with the batch files beside it.
struct Site {
    dir: TempDir,
    db: PathBuf,
}

impl Site {
    fn new() -> Site {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join("spoolite.db");
        Site { dir, db }
    }

    fn file(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        write(self.dir.path(), name, content)
    }

    fn ingest(&self, files: &[&Path]) -> (i32, Vec<Value>) {
        ingest_json(&self.db, files)
    }

    /// Writes and ingests one file that must be processed; returns its `--json` line.
    fn processed(&self, name: &str, content: &str) -> Value {
        let path = self.file(name, content);
        let (code, lines) = self.ingest(&[&path]);
        assert_eq!(code, 0, "{name}: {lines:?}");
        assert_eq!(lines.len(), 1, "{name}: {lines:?}");
        assert_eq!(lines[0]["outcome"], "processed", "{name}: {}", lines[0]);
        assert_eq!(lines[0]["file"], name);
        assert_eq!(lines[0]["sha256"], sha256_hex(content), "{name}");
        lines[0].clone()
    }

    /// Runs SQL of the test's own (a trigger, say) on the database.
    fn execute(&self, sql: &str) {
        let conn = rusqlite::Connection::open(&self.db).expect("open db");
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
}

/// `[events_total, inserted, updated, unchanged, stale, conflicts, invalid]` of a
/// processed file's `--json` line.
fn counts(line: &Value) -> [u64; 7] {
    COUNT_FIELDS.map(|field| {
        line[field]
            .as_u64()
            .unwrap_or_else(|| panic!("no {field} in {line}"))
    })
}

/// Milliseconds since the epoch, as spoolite's clock (the same system clock) counts them.
fn now_millis() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since.as_millis()).expect("millis fit")
}

/// Reads a time spoolite wrote (`YYYY-MM-DDTHH:MM:SS.fffZ`: the contract gives the
/// times spoolite writes itself exactly three fraction digits, so that they sort as
/// text) as milliseconds since the epoch.
fn utc_millis(text: &str) -> i64 {
    let utc = text
        .strip_suffix('Z')
        .unwrap_or_else(|| panic!("{text:?} does not end in Z"));
    let (whole, fraction) = utc.split_once('.').unwrap_or((utc, ""));
    assert_eq!(whole.len(), 19, "{text:?} is not YYYY-MM-DDTHH:MM:SS");
    assert!(
        fraction.len() == 3 && fraction.bytes().all(|b| b.is_ascii_digit()),
        "{text:?} does not have exactly three fraction digits"
    );
    let number = |from: usize, to: usize| {
        whole[from..to]
            .parse::<i64>()
            .unwrap_or_else(|_| panic!("{text:?}"))
    };
    let (year, month, day) = (number(0, 4), number(5, 7), number(8, 10));
    let (hour, minute, second) = (number(11, 13), number(14, 16), number(17, 19));
    let millis: i64 = format!("{fraction:0<3}")[..3].parse().expect("digits");
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    seconds * 1000 + millis
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (H. Hinnant's
/// `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Asserts that spoolite wrote `at` between `from` and `to` (milliseconds).
fn assert_written_between(at: &str, from: i64, to: i64, what: &str) {
    let millis = utc_millis(at);
    assert!(
        from <= millis && millis <= to,
        "{what} = {at} is not within the run ({from}..={to} ms)"
    );
}

// ---------------------------------------------------------------------------------
// 1. Key vectors

/// An event as written in a file, how spoolite must canonicalise it, and its key.
struct KeyVector {
    written: [&'static str; 3],
    canonical: [&'static str; 3],
    key: &'static str,
}

/// Each key is SHA-256 over `flight_id|event_kind|instant_utc` in canonical form;
/// recompute any of them in a shell, e.g.
/// `printf 'BA0117-20261129|off_blocks|2026-11-29T10:05:00Z' | sha256sum`.
const KEY_VECTORS: &[KeyVector] = &[
    KeyVector {
        written: ["BA0117-20261129", "off_blocks", "2026-11-29T10:05:00Z"],
        canonical: ["BA0117-20261129", "off_blocks", "2026-11-29T10:05:00Z"],
        key: "1276aa28ba94f266883cf55721ebc9de537703db7c402d6f62949d87cd224fdb",
    },
    // printf 'BA0117-20261129|landing|2026-11-29T21:47:12.5Z' | sha256sum
    KeyVector {
        written: [
            " BA0117-20261129 ",
            "LANDING",
            "2026-11-29T22:47:12.500+01:00",
        ],
        canonical: ["BA0117-20261129", "landing", "2026-11-29T21:47:12.5Z"],
        key: "ae3c3342ec647103d4fcf19bdb940989824dfc5cb1817eacdbdbd2e2da61175d",
    },
    // printf 'EZY8421-20270102|duty_start|2027-01-01T23:30:00Z' | sha256sum
    KeyVector {
        written: [
            "EZY8421-20270102",
            "Duty_Start",
            "2027-01-02T01:30:00+02:00",
        ],
        canonical: ["EZY8421-20270102", "duty_start", "2027-01-01T23:30:00Z"],
        key: "8c3989397752509430578f7b2a49c9bb9f284c4ec143ccf559286dd83ec0b6fd",
    },
    // Unicode whitespace (an em space, a no-break space) is trimmed too.
    // printf 'LH400-20261130|takeoff|2026-11-30T08:00:00.12Z' | sha256sum
    KeyVector {
        written: [
            "\u{2003}LH400-20261130\u{a0}",
            " TakeOff ",
            "2026-11-30T09:00:00.120+01:00",
        ],
        canonical: ["LH400-20261130", "takeoff", "2026-11-30T08:00:00.12Z"],
        key: "e4517b1ff113f6e4c930760f7bddd9af3645a46531c7d5a40bd5d58b1dc4dc46",
    },
    // printf 'LH400-20261130|takeoff|2026-11-30T08:00:00.123456789Z' | sha256sum
    KeyVector {
        written: [
            "LH400-20261130",
            "takeoff",
            "2026-11-30t08:00:00.123456789z",
        ],
        canonical: [
            "LH400-20261130",
            "takeoff",
            "2026-11-30T08:00:00.123456789Z",
        ],
        key: "9307887e97fbbcd42e9b8fd51cb168751480c4263f4ee87ef256edbafdfb79c2",
    },
];

/// One batch of the key vectors' events as written.
pub(crate) fn key_vectors_batch() -> String {
    let events: Vec<String> = KEY_VECTORS
        .iter()
        .map(|vector| {
            let [flight, kind, instant] = vector.written.map(|text| Value::from(text).to_string());
            format!("{{\"flight_id\":{flight},\"event_kind\":{kind},\"instant_utc\":{instant}}}")
        })
        .collect();
    json_batch(&events)
}

#[test]
fn keys_are_sha256_of_the_canonical_forms() {
    for vector in KEY_VECTORS {
        let [flight, kind, instant] = vector.canonical;
        assert_eq!(
            sha256_hex(format!("{flight}|{kind}|{instant}")),
            vector.key,
            "the vector itself"
        );
        let output = spoolite()
            .arg("key")
            .args(vector.written)
            .output()
            .expect("run spoolite key");
        assert_eq!(output.status.code(), Some(0), "{:?}", vector.written);
        let expected = format!(
            "flight_id        {flight}\nevent_kind       {kind}\ninstant_utc      {instant}\nidempotency_key  {}\n",
            vector.key
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout),
            expected,
            "spoolite key {:?}",
            vector.written
        );
    }

    let site = Site::new();
    let line = site.processed("vectors.json", &key_vectors_batch());
    assert_eq!(counts(&line), [5, 5, 0, 0, 0, 0, 0]);
    let mut expected: Vec<String> = KEY_VECTORS
        .iter()
        .map(|vector| {
            let [flight, kind, instant] = vector.canonical;
            format!("{}|{flight}|{kind}|{instant}|0|{{}}", vector.key)
        })
        .collect();
    expected.sort();
    assert_eq!(dump(&site.db, "duty_event", EVENT_COLUMNS), expected);
}

// ---------------------------------------------------------------------------------
// 2. Canonicalisation

/// Files of one event whose instant and payload are written four ways (the first
/// canonical), in the order they are ingested: (name, content).
pub(crate) fn one_instant_files() -> Vec<(&'static str, String)> {
    // The payload with its keys in order, as it is stored.
    let ordered = r#"{"crew":["C123","C456"],"tail":"G-XWBA"}"#;
    let forms = [
        (
            "zulu.json",
            "2026-11-29T10:05:00Z",
            r#"{"tail":"G-XWBA","crew":["C123","C456"]}"#,
        ),
        ("plus-one.json", "2026-11-29T11:05:00+01:00", ordered),
        (
            "fraction.json",
            "2026-11-29T10:05:00.000Z",
            r#"{ "tail" : "G-XWBA" , "crew" : [ "C123" , "C456" ] }"#,
        ),
        ("minus-zero.ndjson", "2026-11-29T10:05:00-00:00", ordered),
    ];
    forms
        .into_iter()
        .map(|(name, instant, payload)| {
            let event = event(" BA0117-20261129", "Off_Blocks ", instant, Some(3), payload);
            let content = if name.ends_with(".ndjson") {
                format!("{event}\n")
            } else {
                json_batch(&[event])
            };
            (name, content)
        })
        .collect()
}

#[test]
fn one_instant_written_three_ways_is_one_event() {
    let site = Site::new();
    let key = "1276aa28ba94f266883cf55721ebc9de537703db7c402d6f62949d87cd224fdb";
    for (i, (name, content)) in one_instant_files().into_iter().enumerate() {
        let line = site.processed(name, &content);
        let expected = if i == 0 {
            [1, 1, 0, 0, 0, 0, 0]
        } else {
            [1, 0, 0, 1, 0, 0, 0]
        };
        assert_eq!(counts(&line), expected, "{name}");
        assert_eq!(
            dump(&site.db, "duty_event", EVENT_COLUMNS),
            [format!(
                "{key}|BA0117-20261129|off_blocks|2026-11-29T10:05:00Z|3|{{\"crew\":[\"C123\",\"C456\"],\"tail\":\"G-XWBA\"}}"
            )],
            "after {name}"
        );
    }
    assert!(dump(&site.db, "quarantine", &[]).is_empty());
}

/// Events that each break one rule (but the fifth), with odd spacing inside them:
/// `raw` must keep it exactly.
pub(crate) const BROKEN_EVENTS: [&str; 11] = [
    r#"{"flight_id":"BA0117-20261129","event_kind":"off_blocks","instant_utc":"2026-11-29T10:05:00"}"#,
    r#"{ "flight_id" : "BA0117|20261129", "event_kind":"off_blocks", "instant_utc":"2026-11-29T10:05:00Z" }"#,
    r#"{"flight_id":"BA0117-20261129","event_kind":"takeoff","instant_utc":"2026-11-29T10:25:00Z","gate":"A7"}"#,
    r#"{"flight_id":"BA0117-20261129","event_kind":"landing","instant_utc":"2026-11-29T12:05:00Z","source_revision":"3"}"#,
    r#"{"flight_id":"BA0117-20261129","event_kind":"on_blocks","instant_utc":"2026-11-29T12:15:00Z"}"#,
    r#"{"flight_id":"BA0117-20261129","event_kind":"on_blocks","flight_id":"BA0118-20261129","instant_utc":"2026-11-29T12:15:00Z"}"#,
    r#"{"flight_id":"BA0117-20261129","event_kind":"Off Blocks","instant_utc":"2026-11-29T10:05:00Z"}"#,
    r#"{"flight_id":"BA0117-20261129","event_kind":"off_blocks","instant_utc":"2026-11-29 10:05:00Z"}"#,
    r#"{"flight_id":"BA0117-20261129","event_kind":"off_blocks","instant_utc":"2026-11-29T10:05:00Z","source_revision":3.0}"#,
    r#"["BA0117-20261129","off_blocks","2026-11-29T10:05:00Z"]"#,
    r#"{"flight_id":"BA0117-20261129","instant_utc":"2026-11-29T10:05:00Z"}"#,
];

/// The `.json` batch of `BROKEN_EVENTS`.
pub(crate) fn broken_batch() -> String {
    format!("{{\"events\": [\n  {}\n]}}\n", BROKEN_EVENTS.join(",\n  "))
}

/// An NDJSON file with a good line, a blank one, and lines that are not JSON, nest
/// too deep and are no object: its lines (without the blank one) and its content.
pub(crate) fn broken_lines() -> ([String; 4], String) {
    let deep = format!(
        "{{\"flight_id\":\"X1\",\"event_kind\":\"x\",\"instant_utc\":\"2026-11-29T10:05:00Z\",\"payload\":{{\"a\":{}1{}}}}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    let lines = [
        r#"{"flight_id":"X1","event_kind":"x","instant_utc":"2026-11-29T10:05:00Z"}"#.to_owned(),
        "{not json".to_owned(),
        deep,
        "42".to_owned(),
    ];
    let content = format!("{}\n\n{}\n", lines[..2].join("\n"), lines[2..].join("\n"));
    (lines, content)
}

#[test]
fn each_broken_rule_is_an_invalid_event_with_its_own_reason() {
    let site = Site::new();
    let events = BROKEN_EVENTS;
    let reasons = [
        (0, "bad_instant"),
        (1, "bad_flight_id"),
        (2, "unknown_field"),
        (3, "wrong_type"),
        (5, "duplicate_field"),
        (6, "bad_event_kind"),
        (7, "bad_instant"),
        (8, "bad_revision"),
        (9, "not_object"),
        (10, "missing_field"),
    ];
    let content = broken_batch();
    let line = site.processed("broken.json", &content);
    assert_eq!(counts(&line), [11, 1, 0, 0, 0, 0, 10]);
    let digest = sha256_hex(&content);
    let expected: Vec<Vec<String>> = reasons
        .iter()
        .map(|&(index, reason)| {
            [
                digest.as_str(),
                "broken.json",
                &index.to_string(),
                reason,
                events[index],
            ]
            .map(str::to_owned)
            .to_vec()
        })
        .collect();
    let stored = query(
        &site.db,
        "SELECT batch_digest, file_name, record_index, reason, raw FROM quarantine ORDER BY record_index",
    );
    assert_eq!(stored, expected);
    assert_no_empty_details(&site.db);
    assert_eq!(
        dump(
            &site.db,
            "duty_event",
            &["flight_id", "event_kind", "instant_utc"]
        ),
        ["BA0117-20261129|on_blocks|2026-11-29T12:15:00Z"]
    );

    // In NDJSON a line that is not JSON, or nests too deep, is an invalid event too.
    let (lines, content) = broken_lines();
    let line = site.processed("lines.ndjson", &content);
    assert_eq!(counts(&line), [4, 1, 0, 0, 0, 0, 3]);
    let digest = sha256_hex(&content);
    let expected: Vec<Vec<String>> = [(1, "not_json"), (2, "too_deep"), (3, "not_object")]
        .iter()
        .map(|&(index, reason)| {
            [
                digest.as_str(),
                "lines.ndjson",
                &index.to_string(),
                reason,
                &lines[index],
            ]
            .map(str::to_owned)
            .to_vec()
        })
        .collect();
    let stored = query(
        &site.db,
        &format!(
            "SELECT batch_digest, file_name, record_index, reason, raw FROM quarantine WHERE batch_digest = '{digest}' ORDER BY record_index"
        ),
    );
    assert_eq!(stored, expected);
}

/// What one event of the edge-rule table must become.
enum Expect {
    /// Stored as `flight_id|event_kind|instant_utc|source_revision|payload`.
    Stored(&'static str),
    /// Quarantined with this reason.
    Invalid(&'static str),
}

/// The contract's edge rules, one event each: every event has a flight of its own, so
/// no two meet.
const EDGE_CASES: &[(&str, Expect)] = &[
    (
        r#"{"flight_id":"E01","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","payload":{"a":1,"a":2}}"#,
        Expect::Invalid("duplicate_field"),
    ),
    (
        r#"{"flight_id":"E02","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","payload":{"n":123456789012345678901234567890,"f":1.0,"e":1E+2,"s":"\u00e9\/\"","z":-0}}"#,
        Expect::Stored(
            r#"E02|x|2026-01-01T00:00:00Z|0|{"e":1E+2,"f":1.0,"n":123456789012345678901234567890,"s":"é/\"","z":-0}"#,
        ),
    ),
    (
        r#"{"flight_id":"E03","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","payload":{"b":{"d":1,"c":2},"a":[{"y":1,"x":2}],"é":1,"z":"\u0001"}}"#,
        Expect::Stored(
            r#"E03|x|2026-01-01T00:00:00Z|0|{"a":[{"x":2,"y":1}],"b":{"c":2,"d":1},"z":"\u0001","é":1}"#,
        ),
    ),
    (
        r#"{"flight_id":"E04","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","source_revision":9223372036854775807}"#,
        Expect::Stored("E04|x|2026-01-01T00:00:00Z|9223372036854775807|{}"),
    ),
    (
        r#"{"flight_id":"E05","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","source_revision":9223372036854775808}"#,
        Expect::Invalid("bad_revision"),
    ),
    (
        r#"{"flight_id":"E06","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","source_revision":-1}"#,
        Expect::Invalid("bad_revision"),
    ),
    (
        r#"{"flight_id":"E07","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","source_revision":3e0}"#,
        Expect::Invalid("bad_revision"),
    ),
    (
        r#"{"flight_id":"E08","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","payload":null,"source_revision":null}"#,
        Expect::Stored("E08|x|2026-01-01T00:00:00Z|0|{}"),
    ),
    (
        r#"{"flight_id":"E09","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z","payload":[1]}"#,
        Expect::Invalid("wrong_type"),
    ),
    (
        r#"{"flight_id":9,"event_kind":"x","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Invalid("wrong_type"),
    ),
    (
        r#"{"flight_id":"E10","event_kind":"x","instant_utc":"2026-06-30T23:59:60Z"}"#,
        Expect::Invalid("bad_instant"),
    ),
    (
        r#"{"flight_id":"E11","event_kind":"x","instant_utc":"0000-01-01T00:00:00Z"}"#,
        Expect::Invalid("bad_instant"),
    ),
    (
        r#"{"flight_id":"E12","event_kind":"x","instant_utc":"9999-12-31T23:59:59-01:00"}"#,
        Expect::Invalid("bad_instant"),
    ),
    (
        r#"{"flight_id":"E13","event_kind":"x","instant_utc":"0001-01-01T00:30:00+01:00"}"#,
        Expect::Invalid("bad_instant"),
    ),
    (
        r#"{"flight_id":"E14","event_kind":"x","instant_utc":"2026-01-01T00:00:00.1234567890Z"}"#,
        Expect::Invalid("bad_instant"),
    ),
    (
        r#"{"flight_id":"E15","event_kind":"x","instant_utc":"2026-01-01T00:00:00.120000000Z"}"#,
        Expect::Stored("E15|x|2026-01-01T00:00:00.12Z|0|{}"),
    ),
    (
        r#"{"flight_id":"E16","event_kind":"x","instant_utc":"2026-02-30T00:00:00Z"}"#,
        Expect::Invalid("bad_instant"),
    ),
    (
        r#"{"flight_id":"E17","event_kind":"x","instant_utc":"2026-01-01"}"#,
        Expect::Invalid("bad_instant"),
    ),
    (
        r#"{"flight_id":"E18","event_kind":"x","instant_utc":" 2026-01-01T01:00:00+01:00\t"}"#,
        Expect::Stored("E18|x|2026-01-01T00:00:00Z|0|{}"),
    ),
    (
        r#"{"flight_id":"E19","event_kind":" TAKEOFF\t","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Stored("E19|takeoff|2026-01-01T00:00:00Z|0|{}"),
    ),
    (
        r#"{"flight_id":"E20","event_kind":"kaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Stored("E20|kaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa|2026-01-01T00:00:00Z|0|{}"),
    ),
    (
        r#"{"flight_id":"E21","event_kind":"kaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Invalid("bad_event_kind"),
    ),
    (
        r#"{"flight_id":"E22","event_kind":"9x","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Invalid("bad_event_kind"),
    ),
    (
        r#"{"flight_id":"E23AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Stored(
            "E23AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA|x|2026-01-01T00:00:00Z|0|{}",
        ),
    ),
    (
        r#"{"flight_id":"E24AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Invalid("bad_flight_id"),
    ),
    (
        r#"{"flight_id":"E25é","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Invalid("bad_flight_id"),
    ),
    (
        r#"{"flight_id":"E26 X","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Invalid("bad_flight_id"),
    ),
    (
        r#"{"flight_id":"   ","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Invalid("bad_flight_id"),
    ),
    (
        r#"{"flight_id":"E27~!","event_kind":"x","instant_utc":"2026-01-01T00:00:00Z"}"#,
        Expect::Stored("E27~!|x|2026-01-01T00:00:00Z|0|{}"),
    ),
    (
        r#"{"flight_id":"E28","event_kind":"x","instant_utc":"9999-12-31T23:59:59.999999999Z"}"#,
        Expect::Stored("E28|x|9999-12-31T23:59:59.999999999Z|0|{}"),
    ),
    (
        r#"{"flight_id":"E29","event_kind":"x","instant_utc":"0000-12-31T23:30:00-01:00"}"#,
        Expect::Stored("E29|x|0001-01-01T00:30:00Z|0|{}"),
    ),
    (
        r#"{"flight_id":"E30","event_kind":"x","instant_utc":"9999-12-31T00:00:00-23:59"}"#,
        Expect::Stored("E30|x|9999-12-31T23:59:00Z|0|{}"),
    ),
];

/// The edge cases, one NDJSON line each. CRLF line ends are allowed; `raw` is the
/// event without them.
pub(crate) fn edges_ndjson() -> String {
    EDGE_CASES
        .iter()
        .map(|(text, _)| format!("{text}\r\n"))
        .collect()
}

#[test]
fn edge_rules_decide_each_event() {
    let site = Site::new();
    let content = edges_ndjson();
    let line = site.processed("edges.ndjson", &content);
    let invalid = EDGE_CASES
        .iter()
        .filter(|(_, expect)| matches!(expect, Expect::Invalid(_)))
        .count() as u64;
    let total = EDGE_CASES.len() as u64;
    assert_eq!(counts(&line), [total, total - invalid, 0, 0, 0, 0, invalid]);

    let mut stored = Vec::new();
    let mut quarantined = Vec::new();
    for (index, (text, expect)) in EDGE_CASES.iter().enumerate() {
        match expect {
            Expect::Stored(row) => {
                let identity: Vec<&str> = row.splitn(4, '|').take(3).collect();
                stored.push(format!("{}|{row}", sha256_hex(identity.join("|"))));
            }
            Expect::Invalid(reason) => quarantined.push(format!("{index}|{reason}|{text}")),
        }
    }
    stored.sort();
    quarantined.sort();
    assert_eq!(dump(&site.db, "duty_event", EVENT_COLUMNS), stored);
    assert_eq!(
        dump(&site.db, "quarantine", &["record_index", "reason", "raw"]),
        quarantined
    );
    assert_no_empty_details(&site.db);
}

fn assert_no_empty_details(db: &Path) {
    let empty = query(
        db,
        "SELECT record_index, reason FROM quarantine WHERE trim(detail) = ''",
    );
    assert!(
        empty.is_empty(),
        "quarantine rows without a detail: {empty:?}"
    );
}

// ---------------------------------------------------------------------------------
// 3. The outcome table

/// What the test expects the database to hold, step by step: duty_event by key (every
/// column), quarantine and the inbox.
struct Ledger {
    site: Site,
    events: BTreeMap<String, Vec<String>>,
    quarantine: Vec<Vec<String>>,
    inbox: Vec<Vec<String>>,
}

/// The event columns of a row a step inserts or replaces: key, flight_id, event_kind,
/// instant_utc, source_revision, payload.
type Row = [&'static str; 6];

const DUTY_EVENT_ALL: &str = "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision, payload, \
     batch_digest, first_seen_at, updated_at FROM duty_event";
const QUARANTINE_ALL: &str =
    "SELECT batch_digest, file_name, record_index, reason, raw FROM quarantine";
const INBOX_ALL: &str = "SELECT batch_digest, batch_id, file_name, events_total, inserted, updated, unchanged, \
     stale, conflicts, invalid, ingested_at FROM ingest_inbox";

fn duty_events(db: &Path) -> BTreeMap<String, Vec<String>> {
    query(db, DUTY_EVENT_ALL)
        .into_iter()
        .map(|row| (row[0].clone(), row))
        .collect()
}

fn sorted(mut rows: Vec<Vec<String>>) -> Vec<Vec<String>> {
    rows.sort();
    rows
}

impl Ledger {
    fn new() -> Ledger {
        Ledger {
            site: Site::new(),
            events: BTreeMap::new(),
            quarantine: Vec::new(),
            inbox: Vec::new(),
        }
    }

    /// Ingests `content` as `name` and checks the counts, then the whole of each table:
    /// exactly the rows of `writes` are new or replaced (by this batch, at this time, the
    /// first sighting kept), every other row is untouched to the last column, and
    /// quarantine gained exactly `quarantined` (record_index and reason; raw is the
    /// event's text in `content`).
    fn deliver(
        &mut self,
        name: &str,
        content: &str,
        expected: [u64; 7],
        writes: &[Row],
        quarantined: &[(u64, &str)],
    ) {
        let before = now_millis();
        let line = self.site.processed(name, content);
        let after = now_millis();
        assert_eq!(counts(&line), expected, "counts of {name}");
        let digest = sha256_hex(content);
        let db = &self.site.db;

        let actual = duty_events(db);
        for row in writes {
            let key = row[0];
            let stored = actual
                .get(key)
                .unwrap_or_else(|| panic!("{name} did not write {key}"));
            assert_written_between(&stored[8], before, after, "updated_at");
            let first_seen = match self.events.get(key) {
                Some(old) => old[7].clone(),
                None => {
                    assert_written_between(&stored[7], before, after, "first_seen_at");
                    stored[7].clone()
                }
            };
            let mut expected: Vec<String> = row.iter().map(|&text| text.to_owned()).collect();
            expected.extend([digest.clone(), first_seen, stored[8].clone()]);
            self.events.insert(key.to_owned(), expected);
        }
        assert_eq!(actual, self.events, "duty_event after {name}");

        let raws = raw_events(content);
        for &(index, reason) in quarantined {
            let raw = raws[index as usize].clone();
            self.quarantine.push(vec![
                digest.clone(),
                name.to_owned(),
                index.to_string(),
                reason.to_owned(),
                raw,
            ]);
        }
        self.quarantine.sort();
        assert_eq!(
            sorted(query(db, QUARANTINE_ALL)),
            self.quarantine,
            "quarantine after {name}"
        );
        assert_no_empty_details(db);

        let batch_id: Option<String> = serde_json::from_str::<Value>(content)
            .ok()
            .and_then(|batch| batch["batch_id"].as_str().map(str::to_owned));
        let mut row = vec![
            digest.clone(),
            batch_id.unwrap_or_else(|| "NULL".to_owned()),
            name.to_owned(),
        ];
        row.extend(expected.iter().map(u64::to_string));
        let stored = query(db, &format!("{INBOX_ALL} WHERE batch_digest = '{digest}'"));
        let ingested_at = &stored
            .first()
            .unwrap_or_else(|| panic!("no inbox row for {name}"))[10];
        assert_written_between(ingested_at, before, after, "ingested_at");
        row.push(ingested_at.clone());
        self.inbox.push(row);
        self.inbox.sort();
        assert_eq!(
            sorted(query(db, INBOX_ALL)),
            self.inbox,
            "ingest_inbox after {name}"
        );
    }
}

/// The events of a `.json` batch as their exact texts, when each stands on a line of
/// its own (as `json_batch` writes them).
fn raw_events(content: &str) -> Vec<String> {
    let inner = content
        .strip_prefix("{\"events\":[")
        .and_then(|rest| rest.strip_suffix("]}"));
    inner
        .map(|events| events.split(",\n").map(str::to_owned).collect())
        .unwrap_or_default()
}

const K_OFF: &str = "1276aa28ba94f266883cf55721ebc9de537703db7c402d6f62949d87cd224fdb";
const K_LANDING: &str = "ae3c3342ec647103d4fcf19bdb940989824dfc5cb1817eacdbdbd2e2da61175d";
const K_DUTY: &str = "8c3989397752509430578f7b2a49c9bb9f284c4ec143ccf559286dd83ec0b6fd";

fn duty_start(revision: i64, payload: &str) -> String {
    event(
        "EZY8421-20270102",
        "duty_start",
        "2027-01-01T23:30:00Z",
        Some(revision),
        payload,
    )
}

#[test]
fn every_outcome_of_the_table_changes_exactly_what_it_says() {
    let mut ledger = Ledger::new();
    let off = |revision, payload| {
        [
            K_OFF,
            "BA0117-20261129",
            "off_blocks",
            "2026-11-29T10:05:00Z",
            revision,
            payload,
        ]
    };

    // none → inserted. The landing event has no revision of its own: the file's applies.
    let landing = r#"{"flight_id":"BA0117-20261129","event_kind":"landing","instant_utc":"2026-11-29T21:47:12.5Z","source_revision":null}"#;
    let first = format!(
        "{{\"batch_id\":\"ops-1\",\"source_revision\":4,\"events\":[{},\n{landing}]}}",
        off_blocks(2, r#"{"tail":"G-XWBA"}"#)
    );
    let landing_row = [
        K_LANDING,
        "BA0117-20261129",
        "landing",
        "2026-11-29T21:47:12.5Z",
        "4",
        "{}",
    ];
    ledger.deliver(
        "a.json",
        &first,
        [2, 2, 0, 0, 0, 0, 0],
        &[off("2", r#"{"tail":"G-XWBA"}"#), landing_row],
        &[],
    );

    // revision > r → updated: the incoming row, first_seen_at kept.
    let content = json_batch(&[off_blocks(3, r#"{"tail":"G-XWBB"}"#)]);
    ledger.deliver(
        "b.json",
        &content,
        [1, 0, 1, 0, 0, 0, 0],
        &[off("3", r#"{"tail":"G-XWBB"}"#)],
        &[],
    );

    // revision < r → stale: nothing changes, updated_at and batch_digest included.
    let content = json_batch(&[off_blocks(1, r#"{"tail":"G-OLD"}"#)]);
    ledger.deliver("c.json", &content, [1, 0, 0, 0, 1, 0, 0], &[], &[]);

    // revision = r, same canonical payload (written otherwise) → unchanged.
    let content = json_batch(&[off_blocks(3, r#"{ "tail" : "G-XWBB" }"#)]);
    ledger.deliver("d.json", &content, [1, 0, 0, 1, 0, 0, 0], &[], &[]);

    // revision = r, different payload → conflict: row unchanged, event quarantined.
    let content = json_batch(&[off_blocks(3, r#"{"tail":"G-XWBC"}"#)]);
    ledger.deliver(
        "e.json",
        &content,
        [1, 0, 0, 0, 0, 1, 0],
        &[],
        &[(0, "conflict")],
    );

    // Several versions of keys in one file, interleaved, are applied in file order.
    let content = json_batch(&[
        duty_start(1, r#"{"v":1}"#),  // inserted
        off_blocks(2, r#"{"v":2}"#),  // stale (3 is stored)
        duty_start(3, r#"{"v":3}"#),  // updated
        duty_start(2, r#"{"v":2}"#),  // stale
        off_blocks(4, r#"{"v":4}"#),  // updated
        duty_start(3, r#"{"v":3}"#),  // unchanged
        duty_start(3, r#"{"v":33}"#), // conflict with the file's own revision 3
        off_blocks(4, r#"{"v":44}"#), // conflict
        duty_start(5, r#"{"v":5}"#),  // updated
        duty_start(4, r#"{"v":4}"#),  // stale
    ]);
    let duty = [
        K_DUTY,
        "EZY8421-20270102",
        "duty_start",
        "2027-01-01T23:30:00Z",
        "5",
        r#"{"v":5}"#,
    ];
    ledger.deliver(
        "f.json",
        &content,
        [10, 1, 3, 1, 3, 2, 0],
        &[duty, off("4", r#"{"v":4}"#)],
        &[(6, "conflict"), (7, "conflict")],
    );

    // Versions already stored, sent again in a new file (other bytes, so not a
    // duplicate batch), are unchanged or stale and touch nothing.
    let content = json_batch(&[
        duty_start(5, r#"{"v":5}"#),
        off_blocks(4, r#"{"v":4}"#),
        duty_start(1, r#"{"v":1}"#),
    ]);
    ledger.deliver("g.json", &content, [3, 0, 0, 2, 1, 0, 0], &[], &[]);
}

#[test]
fn versions_of_one_key_in_one_file_collapse_in_file_order() {
    let first = off_blocks(1, r#"{"v":"first"}"#);
    let second = off_blocks(1, r#"{"v":"second"}"#);
    for (events, winner, loser) in [
        ([&first, &second], "first", &second),
        ([&second, &first], "second", &first),
    ] {
        let site = Site::new();
        let content = json_batch(&[events[0].clone(), events[1].clone()]);
        let line = site.processed("pair.json", &content);
        assert_eq!(counts(&line), [2, 1, 0, 0, 0, 1, 0]);
        assert_eq!(
            dump(&site.db, "duty_event", EVENT_COLUMNS),
            [format!(
                "{K_OFF}|BA0117-20261129|off_blocks|2026-11-29T10:05:00Z|1|{{\"v\":\"{winner}\"}}"
            )]
        );
        assert_eq!(
            dump(&site.db, "quarantine", &["record_index", "reason", "raw"]),
            [format!("1|conflict|{loser}")]
        );
    }
}

// ---------------------------------------------------------------------------------
// 4. Re-delivery

#[test]
fn a_file_delivered_again_changes_nothing() {
    let site = Site::new();
    let first = json_batch(&[
        off_blocks(1, r#"{"tail":"G-XWBA"}"#),
        off_blocks(1, r#"{"tail":"G-XWBZ"}"#),
        duty_start(2, "{}"),
        r#"{"flight_id":"BA0117-20261129"}"#.to_owned(),
    ]);
    site.processed("first.json", &first);
    site.processed(
        "second.json",
        &json_batch(&[off_blocks(2, r#"{"tail":"G-XWBB"}"#)]),
    );
    let before = snapshot(&site.db);
    assert_eq!(before[1].len(), 2, "two inbox rows");
    assert_eq!(
        before[2].len(),
        2,
        "a conflict and an invalid event in quarantine"
    );

    let again = site.file("first.json", &first);
    let renamed = site.file("first-resent.JSON", &first);
    let (code, lines) = site.ingest(&[&again, &renamed, &again]);
    assert_eq!(code, 0, "{lines:?}");
    let names = ["first.json", "first-resent.JSON", "first.json"];
    assert_eq!(lines.len(), names.len());
    for (line, name) in lines.iter().zip(names) {
        let expected = serde_json::json!({"file": name, "outcome": "skipped_duplicate", "sha256": sha256_hex(&first)});
        assert_eq!(*line, expected);
    }
    assert_eq!(snapshot(&site.db), before, "every table, every column");
    let inbox = query(
        &site.db,
        &format!(
            "SELECT file_name FROM ingest_inbox WHERE batch_digest = '{}'",
            sha256_hex(&first)
        ),
    );
    assert_eq!(inbox, [["first.json"]]);
}

#[test]
fn a_dry_run_reports_the_outcomes_and_writes_nothing() {
    let site = Site::new();
    site.processed("seed.json", &json_batch(&[off_blocks(1, "{}")]));
    let content = json_batch(&[
        off_blocks(2, r#"{"tail":"G-XWBB"}"#),
        duty_start(1, "{}"),
        r#"{"flight_id":"BAD"}"#.to_owned(),
    ]);
    let path = site.file("trial.json", &content);
    let before = snapshot(&site.db);
    let output = ingest_command(&site.db)
        .arg("--json")
        .arg("--dry-run")
        .arg(&path)
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(0));
    let lines = parse_lines(&output);
    assert_eq!(lines.len(), 1);
    assert_eq!(lines[0]["outcome"], "processed");
    assert_eq!(counts(&lines[0]), [3, 1, 1, 0, 0, 0, 1]);
    assert_eq!(snapshot(&site.db), before, "a dry run wrote");

    // The real run after it finds the file new and agrees on every count.
    let line = site.processed("trial.json", &content);
    assert_eq!(counts(&line), [3, 1, 1, 0, 0, 0, 1]);
}

// ---------------------------------------------------------------------------------
// 5. Order and duplication of conflict-free files do not matter

/// Identities the property draws from: canonical flight_id, event_kind and instant, and
/// ways of writing that same instant.
const POOL: [(&str, &str, &str, [&str; 3]); 11] = [
    (
        "BA0117-20261129",
        "off_blocks",
        "2026-11-29T10:05:00Z",
        [
            "2026-11-29T10:05:00Z",
            "2026-11-29T11:05:00+01:00",
            "2026-11-29T10:05:00.000Z",
        ],
    ),
    (
        "BA0117-20261129",
        "on_blocks",
        "2026-11-29T21:47:12.5Z",
        [
            "2026-11-29T21:47:12.5Z",
            "2026-11-29T21:47:12.500Z",
            "2026-11-29T16:47:12.5-05:00",
        ],
    ),
    (
        "EZY8421-20270102",
        "duty_start",
        "2027-01-01T23:30:00Z",
        [
            "2027-01-01T23:30:00Z",
            "2027-01-02T01:30:00+02:00",
            "2027-01-01t23:30:00z",
        ],
    ),
    // A return to ramp: a second off-blocks of BA0117, later than the first, whose
    // crew counts only once the first is retracted.
    (
        "BA0117-20261129",
        "off_blocks",
        "2026-11-29T10:40:00Z",
        [
            "2026-11-29T10:40:00Z",
            "2026-11-29T05:40:00-05:00",
            "2026-11-29T10:40:00.0Z",
        ],
    ),
    // Two ends of the duty EZY8421: one after its start, one before it (alone, it
    // leaves the duty open).
    (
        "EZY8421-20270102",
        "duty_end",
        "2027-01-02T09:10:00.25Z",
        [
            "2027-01-02T09:10:00.25Z",
            "2027-01-02T10:10:00.250+01:00",
            "2027-01-02T09:10:00.2500Z",
        ],
    ),
    (
        "EZY8421-20270102",
        "duty_end",
        "2027-01-01T22:00:00Z",
        [
            "2027-01-01T22:00:00Z",
            "2027-01-01T23:00:00+01:00",
            "2027-01-01T22:00:00.00Z",
        ],
    ),
    (
        "LH400-20261130",
        "takeoff",
        "2026-11-30T08:00:00Z",
        [
            "2026-11-30T08:00:00Z",
            "2026-11-30T08:00:00-00:00",
            "2026-11-30T09:00:00+01:00",
        ],
    ),
    // A second on-blocks of BA0117, later than the first: flight_times takes the
    // last live one, so retracting either changes what it shows.
    (
        "BA0117-20261129",
        "on_blocks",
        "2026-11-29T21:50:00Z",
        [
            "2026-11-29T21:50:00Z",
            "2026-11-29T22:50:00+01:00",
            "2026-11-29T21:50:00.0Z",
        ],
    ),
    // The crew system's assignment of BA0117: while live, its crew is the flight's
    // (its payload choice differs from the off-blocks' as any two identities' do).
    (
        "BA0117-20261129",
        "crew_assignment",
        "2026-11-29T08:00:00Z",
        [
            "2026-11-29T08:00:00Z",
            "2026-11-29T09:00:00+01:00",
            "2026-11-29T08:00:00.000Z",
        ],
    ),
    // A sector of another flight id inside the duty EZY8421: the duty's flight
    // duty period ends at its on-blocks while it is live and has block time, with
    // the duty otherwise; its crew decides whose period it is.
    (
        "EZY8422-20270102",
        "off_blocks",
        "2027-01-02T01:00:00Z",
        [
            "2027-01-02T01:00:00Z",
            "2027-01-02T03:00:00+02:00",
            "2027-01-02T01:00:00.0Z",
        ],
    ),
    (
        "EZY8422-20270102",
        "on_blocks",
        "2027-01-02T03:15:00Z",
        [
            "2027-01-02T03:15:00Z",
            "2027-01-02T04:15:00+01:00",
            "2027-01-02T03:15:00.00Z",
        ],
    ),
];

/// Revisions drawn: 0 to 3.
const REVISIONS: usize = 4;

/// For each identity and revision, which of three payloads it carries in every file:
/// that is what makes a scenario conflict-free.
type PayloadChoice = [[u8; REVISIONS]; POOL.len()];

/// For each identity and revision, whether it is a retraction in every file: part
/// of the content, like the payload.
type RetractChoice = [[bool; REVISIONS]; POOL.len()];

#[derive(Debug, Clone)]
struct GenEvent {
    identity: usize,
    instant_form: usize,
    padded_flight: bool,
    upper_kind: bool,
    revision: Option<i64>,
    payload_form: usize,
    /// Written without a UTC offset, so it is quarantined as `bad_instant`.
    invalid: bool,
    /// When not a retraction, written `"retracted": false` rather than left out.
    explicit_live: bool,
}

#[derive(Debug, Clone)]
struct GenFile {
    ndjson: bool,
    file_revision: Option<i64>,
    events: Vec<GenEvent>,
}

#[derive(Debug, Clone)]
pub(crate) struct Scenario {
    choice: PayloadChoice,
    retract: RetractChoice,
    files: Vec<GenFile>,
    /// Indices into `files`: each file at least once, some again, in any order.
    deliveries: Vec<usize>,
    /// Deliveries before this index go to one run of spoolite, the rest to another.
    split: usize,
}

/// Payload `choice`, canonical (form 0) or written otherwise. Its crew differ from
/// choice to choice (a corrected crew list moves the minutes): choice 1 names a
/// cabin crew member, choice 2 a positioning one and, on a duty's start, an
/// airport standby.
fn payload_text(choice: u8, form: usize) -> String {
    let second = match (choice, form) {
        (1, 0) => r#"{"function":"cabin_crew","id":"C3"}"#.to_owned(),
        (1, _) => r#"{"id":"C3","function":"cabin_crew"}"#.to_owned(),
        (2, 0) => r#"{"id":"C2","role":"positioning"}"#.to_owned(),
        (2, 1) => r#"{"role":"positioning","id":"C2"}"#.to_owned(),
        (2, _) => r#"{ "role" : "positioning" , "id" : "C2" }"#.to_owned(),
        _ => format!(r#""C{choice}""#),
    };
    let duty_type = match choice {
        2 => r#","duty_type":"airport_standby""#,
        _ => "",
    };
    match form {
        0 => format!(r#"{{"crew":["C1",{second}]{duty_type},"tail":"G-XW{choice}"}}"#),
        1 => format!(r#"{{"tail":"G-XW{choice}","crew":["C1",{second}]{duty_type}}}"#),
        _ => {
            format!(r#"{{ "tail" : "G-XW{choice}" ,  "crew" : [ "C1" , {second} ] {duty_type} }}"#)
        }
    }
}

impl GenEvent {
    fn effective_revision(&self, file: &GenFile) -> i64 {
        self.revision
            .or(if file.ndjson {
                None
            } else {
                file.file_revision
            })
            .unwrap_or(0)
    }

    fn text(&self, file: &GenFile, choice: &PayloadChoice, retract: &RetractChoice) -> String {
        let (flight, kind, _, instants) = POOL[self.identity];
        let flight = if self.padded_flight {
            format!(" {flight}\u{a0}")
        } else {
            flight.to_owned()
        };
        let kind = if self.upper_kind {
            kind.to_ascii_uppercase()
        } else {
            kind.to_owned()
        };
        let mut instant = instants[self.instant_form].to_owned();
        if self.invalid {
            instant.truncate(19);
        }
        let revision = self.effective_revision(file) as usize;
        let payload = payload_text(choice[self.identity][revision], self.payload_form);
        let text = event(&flight, &kind, &instant, self.revision, &payload);
        let text = text.strip_suffix('}').expect("an object");
        match (retract[self.identity][revision], self.explicit_live) {
            (true, _) => format!("{text},\"retracted\":true}}"),
            (false, true) => format!("{text},\"retracted\":false}}"),
            (false, false) => format!("{text}}}"),
        }
    }
}

impl GenFile {
    fn name(&self, index: usize) -> String {
        format!("f{index}.{}", if self.ndjson { "ndjson" } else { "json" })
    }

    fn text(&self, choice: &PayloadChoice, retract: &RetractChoice) -> String {
        let events: Vec<String> = self
            .events
            .iter()
            .map(|event| event.text(self, choice, retract))
            .collect();
        if self.ndjson {
            return events.iter().map(|event| format!("{event}\n")).collect();
        }
        let revision = self
            .file_revision
            .map(|r| format!("\"source_revision\":{r},"))
            .unwrap_or_default();
        format!("{{{revision}\"events\":[{}]}}", events.join(","))
    }
}

prop_compose! {
    fn gen_event()(
        identity in 0..POOL.len(),
        instant_form in 0..3usize,
        padded_flight in any::<bool>(),
        upper_kind in any::<bool>(),
        revision in prop::option::of(0..REVISIONS as i64),
        payload_form in 0..3usize,
        invalid in prop::bool::weighted(0.1),
        explicit_live in any::<bool>(),
    ) -> GenEvent {
        GenEvent {
            identity,
            instant_form,
            padded_flight,
            upper_kind,
            revision,
            payload_form,
            invalid,
            explicit_live,
        }
    }
}

fn gen_file() -> impl Strategy<Value = GenFile> {
    (
        any::<bool>(),
        prop::option::of(0..REVISIONS as i64),
        prop::collection::vec(gen_event(), 0..6),
    )
        .prop_map(|(ndjson, file_revision, events)| {
            // An NDJSON file needs an event: an empty one is rejected as `empty`.
            GenFile {
                ndjson: ndjson && !events.is_empty(),
                file_revision,
                events,
            }
        })
}

pub(crate) fn scenario() -> impl Strategy<Value = Scenario> {
    let choice = prop::array::uniform11(prop::array::uniform4(0..3u8));
    let retract = prop::array::uniform11(prop::array::uniform4(prop::bool::weighted(0.3)));
    (choice, retract, prop::collection::vec(gen_file(), 1..=4)).prop_flat_map(
        |(choice, retract, files)| {
            let count = files.len();
            let deliveries = prop::collection::vec(0..count, 0..=count)
                .prop_map(move |again| (0..count).chain(again).collect::<Vec<usize>>())
                .prop_shuffle();
            (Just(choice), Just(files), deliveries, 0..=2 * count).prop_map(
                move |(choice, files, deliveries, split)| {
                    let split = split.min(deliveries.len());
                    Scenario {
                        choice,
                        retract,
                        files,
                        deliveries,
                        split,
                    }
                },
            )
        },
    )
}

/// duty_event_all's event columns as the contract defines them for conflict-free
/// files: for each key, the row of its highest revision, retracted or not. Computed
/// without spoolite.
fn expected_events(scenario: &Scenario) -> Vec<String> {
    let mut highest: BTreeMap<usize, i64> = BTreeMap::new();
    for file in &scenario.files {
        for event in file.events.iter().filter(|event| !event.invalid) {
            let revision = event.effective_revision(file);
            let entry = highest.entry(event.identity).or_insert(revision);
            *entry = (*entry).max(revision);
        }
    }
    let mut rows: Vec<String> = highest
        .into_iter()
        .map(|(identity, revision)| {
            let (flight, kind, instant, _) = POOL[identity];
            let key = sha256_hex(format!("{flight}|{kind}|{instant}"));
            let payload = payload_text(scenario.choice[identity][revision as usize], 0);
            let retracted = u8::from(scenario.retract[identity][revision as usize]);
            format!("{key}|{flight}|{kind}|{instant}|{revision}|{payload}|{retracted}")
        })
        .collect();
    rows.sort();
    rows
}

/// flight_times as the contract defines it, computed from `duty_event`'s live rows
/// on every read (as SQLite's schema 2 view did, and PostgreSQL's view does), in
/// the backend's own arithmetic, sorted like `Backend::lines`: what the view must
/// equal.
fn flight_times_from_live_rows(db: &Backend) -> Vec<String> {
    let sql = match db {
        Backend::Sqlite { .. } => {
            "WITH per_flight AS (
                 SELECT flight_id,
                        min(CASE WHEN event_kind = 'off_blocks' THEN rtrim(instant_utc, 'Z') END) AS off_blocks,
                        min(CASE WHEN event_kind = 'takeoff' THEN rtrim(instant_utc, 'Z') END) AS takeoff,
                        max(CASE WHEN event_kind = 'landing' THEN rtrim(instant_utc, 'Z') END) AS landing,
                        max(CASE WHEN event_kind = 'on_blocks' THEN rtrim(instant_utc, 'Z') END) AS on_blocks
                 FROM duty_event
                 WHERE event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
                 GROUP BY flight_id)
             SELECT flight_id, off_blocks || 'Z', takeoff || 'Z', landing || 'Z', on_blocks || 'Z',
                    round((julianday(on_blocks) - julianday(off_blocks)) * 1440, 2),
                    round((julianday(landing) - julianday(takeoff)) * 1440, 2)
             FROM per_flight"
        }
        Backend::Postgres(_) => {
            "WITH per_flight AS (
                 SELECT flight_id,
                        min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'off_blocks') AS off_blocks,
                        min(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'takeoff') AS takeoff,
                        max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'landing') AS landing,
                        max(rtrim(instant_utc, 'Z')) FILTER (WHERE event_kind = 'on_blocks') AS on_blocks
                 FROM duty_event
                 WHERE event_kind IN ('off_blocks', 'takeoff', 'landing', 'on_blocks')
                 GROUP BY flight_id)
             SELECT flight_id, off_blocks || 'Z', takeoff || 'Z', landing || 'Z', on_blocks || 'Z',
                    round(extract(epoch FROM (on_blocks || 'Z')::timestamptz
                                             - (off_blocks || 'Z')::timestamptz) / 60, 2)::text,
                    round(extract(epoch FROM (landing || 'Z')::timestamptz
                                             - (takeoff || 'Z')::timestamptz) / 60, 2)::text
             FROM per_flight"
        }
    };
    db.lines(sql)
}

/// `flight_times` as its view reads, sorted like `Backend::lines`.
fn flight_times(db: &Backend) -> Vec<String> {
    db.lines(
        "SELECT flight_id, off_blocks_utc, takeoff_utc, landing_utc, on_blocks_utc,
                block_minutes{t}, airborne_minutes{t}
         FROM flight_times",
    )
}

/// Checks every inbox row of `db` against the files: one row per distinct digest, its
/// counts summing to its events, its quarantine rows numbering conflicts + invalid.
fn assert_counts_reconcile(db: &Backend, scenario: &Scenario, texts: &[String]) {
    let mut files: BTreeMap<String, &GenFile> = BTreeMap::new();
    for (file, text) in scenario.files.iter().zip(texts) {
        files.insert(sha256_hex(text), file);
    }
    let rows = db.rows(
        "SELECT batch_digest, events_total{t}, inserted{t}, updated{t}, unchanged{t}, stale{t},
             conflicts{t}, invalid{t},
             (SELECT count(*) FROM quarantine WHERE quarantine.batch_digest = ingest_inbox.batch_digest){t}
         FROM ingest_inbox",
    );
    let digests: BTreeSet<&String> = rows.iter().map(|row| &row[0]).collect();
    assert_eq!(
        digests,
        files.keys().collect(),
        "one inbox row per distinct file"
    );
    for row in &rows {
        let numbers: Vec<u64> = row[1..]
            .iter()
            .map(|n| n.parse().expect("a count"))
            .collect();
        let [
            total,
            inserted,
            updated,
            unchanged,
            stale,
            conflicts,
            invalid,
            quarantined,
        ] = numbers[..]
        else {
            unreachable!("nine columns")
        };
        assert_eq!(
            total,
            inserted + updated + unchanged + stale + conflicts + invalid,
            "{row:?}"
        );
        assert_eq!(quarantined, conflicts + invalid, "{row:?}");
        let file = files[&row[0]];
        assert_eq!(total, file.events.len() as u64, "{row:?}");
        assert_eq!(
            invalid,
            file.events.iter().filter(|event| event.invalid).count() as u64,
            "{row:?}"
        );
        assert_eq!(conflicts, 0, "conflict-free files: {row:?}");
    }
    let miscounted = db.rows(
        "SELECT batch_digest, rows_last_written{t} FROM batch_summary AS b WHERE rows_last_written
             <> (SELECT count(*) FROM duty_event_all AS d WHERE d.batch_digest = b.batch_digest)",
    );
    assert!(
        miscounted.is_empty(),
        "rows_last_written is the count of the rows each batch last wrote: {miscounted:?}"
    );
    let orphans =
        db.rows("SELECT batch_digest FROM quarantine EXCEPT SELECT batch_digest FROM ingest_inbox");
    assert!(
        orphans.is_empty(),
        "quarantine rows without an inbox row: {orphans:?}"
    );
}

/// Delivers the scenario's files as drawn into one empty database and each once, in
/// order, into another (both of either backend); both must hold the expected events
/// and reconcile their counts.
pub(crate) fn check_order_and_repetition(scenario: &Scenario, drawn: &Backend, other: &Backend) {
    let dir = tempfile::tempdir().expect("temp dir");
    let texts: Vec<String> = scenario
        .files
        .iter()
        .map(|file| file.text(&scenario.choice, &scenario.retract))
        .collect();
    let paths: Vec<PathBuf> = scenario
        .files
        .iter()
        .zip(&texts)
        .enumerate()
        .map(|(i, (file, text))| write(dir.path(), &file.name(i), text))
        .collect();

    // As drawn: shuffled, repeated, in two runs of spoolite.
    let delivered: Vec<&Path> = scenario
        .deliveries
        .iter()
        .map(|&i| paths[i].as_path())
        .collect();
    let (first, second) = delivered.split_at(scenario.split);
    let mut lines = Vec::new();
    for run in [first, second].into_iter().filter(|run| !run.is_empty()) {
        let (code, run_lines) = ingest_json(&drawn.db(), run);
        assert_eq!(code, 0, "{run_lines:?}");
        lines.extend(run_lines);
    }
    assert_eq!(lines.len(), delivered.len());
    let mut seen = HashSet::new();
    for (&i, line) in scenario.deliveries.iter().zip(&lines) {
        let digest = sha256_hex(&texts[i]);
        let outcome = if seen.insert(digest.clone()) {
            "processed"
        } else {
            "skipped_duplicate"
        };
        assert_eq!(line["outcome"], outcome, "{line}");
        assert_eq!(line["sha256"], digest);
    }

    // Each file once, in file order, into another database.
    let in_order: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
    let (code, other_lines) = ingest_json(&other.db(), &in_order);
    assert_eq!(code, 0, "{other_lines:?}");

    let expected = expected_events(scenario);
    let live: Vec<String> = expected
        .iter()
        .filter_map(|row| row.strip_suffix("|0").map(str::to_owned))
        .collect();
    for (db, what) in [(drawn, "as drawn"), (other, "in order")] {
        assert_eq!(
            db.lines(
                "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision{t},
                        payload, {retracted}{t}
                 FROM duty_event_all"
            ),
            expected,
            "{what}"
        );
        assert_eq!(
            db.lines(
                "SELECT idempotency_key, flight_id, event_kind, instant_utc, source_revision{t},
                        payload
                 FROM duty_event"
            ),
            live,
            "{what}"
        );
        assert_eq!(flight_times(db), flight_times_from_live_rows(db), "{what}");
    }
    assert_eq!(
        flight_times(drawn),
        flight_times(other),
        "flight_times as drawn and in order"
    );
    for db in [drawn, other] {
        assert_eq!(
            crate::crew::crew_views(db),
            crate::crew::crew_from_live_rows(db),
            "the crew views as the contract defines them from the live events"
        );
    }
    assert_eq!(
        crate::crew::crew_views(drawn),
        crate::crew::crew_views(other),
        "the crew views as drawn and in order"
    );
    assert_counts_reconcile(drawn, scenario, &texts);
    assert_counts_reconcile(other, scenario, &texts);
}

proptest! {
    // Each case runs the binary up to three times: keep the count modest.
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn order_and_repetition_of_conflict_free_files_do_not_matter(scenario in scenario()) {
        check_order_and_repetition(&scenario, &Backend::sqlite(), &Backend::sqlite());
    }
}

// ---------------------------------------------------------------------------------
// 6. Bad whole files

/// Ingests `content` as `name` (with `options`) into `site`'s database and expects the
/// file rejected for `reason`, exit code 1, and every table exactly as before.
fn check_rejected(site: &Site, name: &str, content: &[u8], options: &[&str], reason: &str) {
    let path = site.file(name, content);
    crate::support::rejected_whole(&site.db, &path, content, options, reason);
}

/// A whole file that must be rejected: its name, its bytes, the options it is
/// ingested with, and its reason.
pub(crate) struct BadFile {
    pub name: &'static str,
    pub content: Vec<u8>,
    pub options: &'static [&'static str],
    pub reason: &'static str,
}

/// The seed file, every kind of bad whole file (made of events that would insert,
/// update and quarantine if any of them were written), and the good file of those
/// events, processed after them.
pub(crate) fn bad_whole_files() -> (String, Vec<BadFile>, String) {
    let seed = json_batch(&[off_blocks(1, "{}")]);
    let events = [
        off_blocks(2, r#"{"tail":"G-XWBB"}"#),
        duty_start(1, "{}"),
        r#"{"flight_id":"BAD"}"#.to_owned(),
    ];
    let good = json_batch(&events);
    let good_lines: String = events.iter().map(|event| format!("{event}\n")).collect();
    let body = events.join(",");
    let deep = format!(
        "{{\"events\":[{body},{}{}]}}",
        "[".repeat(200),
        "]".repeat(200)
    );
    let latin1 = [
        b"{\"events\":[".as_slice(),
        events[0].as_bytes(),
        b",{\"flight_id\":\"Z\xfcrich\"}]}",
    ]
    .concat();
    let latin1_lines = [good_lines.as_bytes(), b"{\"flight_id\":\"Z\xfcrich\"}\n"].concat();
    let cut_char = [
        good.as_bytes().strip_suffix(b"]}").expect("batch"),
        b",\"\xc3",
    ]
    .concat();

    let bad = |name, content: &[u8], reason| BadFile {
        name,
        content: content.to_vec(),
        options: &[],
        reason,
    };
    // The good file's events with `before` and `after` around them.
    let around = |name, before: &str, after: &str, reason| {
        bad(name, format!("{before}{body}{after}").as_bytes(), reason)
    };
    let files = vec![
        bad("empty.json", b"", "empty"),
        bad("empty.ndjson", b"", "empty"),
        bad("blank.ndjson", b"\n  \r\n\n", "empty"),
        bad("latin1.json", &latin1, "not_utf8"),
        bad("latin1.ndjson", &latin1_lines, "not_utf8"),
        bad(
            "prose.json",
            b"flight BA0117 went off blocks at 10:05",
            "not_json",
        ),
        bad(
            "trailing.json",
            format!("{good}\n{good}").as_bytes(),
            "not_json",
        ),
        bad("cut.json", &good.as_bytes()[..good.len() - 2], "truncated"),
        bad("cut-char.json", &cut_char, "truncated"),
        bad(
            "cut.ndjson",
            &good_lines.as_bytes()[..good_lines.len() - 8],
            "truncated",
        ),
        around(
            "top-field.json",
            r#"{"events":["#,
            r#"],"note":1}"#,
            "bad_shape",
        ),
        bad("events-object.json", br#"{"events":{"0":{}}}"#, "bad_shape"),
        around(
            "events-twice.json",
            r#"{"events":["#,
            r#"],"events":[]}"#,
            "bad_shape",
        ),
        around("top-array.json", "[", "]", "bad_shape"),
        around(
            "batch-id.json",
            r#"{"batch_id":7,"events":["#,
            "]}",
            "bad_shape",
        ),
        around(
            "file-rev.json",
            r#"{"source_revision":3.0,"events":["#,
            "]}",
            "bad_shape",
        ),
        around(
            "count.json",
            r#"{"event_count":4,"events":["#,
            "]}",
            "count_mismatch",
        ),
        around(
            "count-after.json",
            r#"{"events":["#,
            r#"],"event_count":2}"#,
            "count_mismatch",
        ),
        bad("batch.txt", good.as_bytes(), "unsupported_type"),
        bad("batch", good.as_bytes(), "unsupported_type"),
        bad("batch.json.txt", good.as_bytes(), "unsupported_type"),
        bad("deep.json", deep.as_bytes(), "too_deep"),
        BadFile {
            options: &["--file-bytes-max", "10"],
            ..bad("big.json", good.as_bytes(), "too_large")
        },
    ];
    (seed, files, good)
}

#[test]
fn bad_whole_files_are_rejected_with_their_reason_and_leave_no_trace() {
    let site = Site::new();
    let (seed, files, good) = bad_whole_files();
    site.processed("seed.json", &seed);
    for file in &files {
        check_rejected(&site, file.name, &file.content, file.options, file.reason);
    }

    // None of those left an inbox row: the same bytes as a good file are still new.
    let line = site.processed("good.json", &good);
    assert_eq!(counts(&line), [3, 1, 1, 0, 0, 0, 1]);
}

/// duty_event holds the rows of `off_blocks(1, "{}")` and `duty_start(1, "{}")` and
/// nothing else.
fn assert_off_blocks_and_duty_start_only(db: &Path) {
    assert_eq!(
        dump(db, "duty_event", EVENT_COLUMNS),
        [
            format!("{K_OFF}|BA0117-20261129|off_blocks|2026-11-29T10:05:00Z|1|{{}}"),
            format!("{K_DUTY}|EZY8421-20270102|duty_start|2027-01-01T23:30:00Z|1|{{}}"),
        ]
    );
}

#[test]
fn a_bad_file_among_good_ones_stops_only_itself() {
    let site = Site::new();
    let good = site.file("good.json", json_batch(&[off_blocks(1, "{}")]));
    let bad = site.file("bad.json", "{\"events\":[");
    let later = site.file("later.ndjson", format!("{}\n", duty_start(1, "{}")));
    let (code, lines) = site.ingest(&[&good, &bad, &later]);
    assert_eq!(code, 1, "{lines:?}");
    let outcomes: Vec<(&str, &str)> = lines
        .iter()
        .map(|line| {
            (
                line["file"].as_str().unwrap_or(""),
                line["outcome"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        outcomes,
        [
            ("good.json", "processed"),
            ("bad.json", "rejected"),
            ("later.ndjson", "processed")
        ]
    );
    assert_eq!(lines[1]["reason"], "truncated");
    assert_eq!(counts(&lines[0]), [1, 1, 0, 0, 0, 0, 0]);
    assert_off_blocks_and_duty_start_only(&site.db);
    assert_eq!(
        dump(&site.db, "ingest_inbox", &["file_name"]),
        ["good.json", "later.ndjson"]
    );
}

// ---------------------------------------------------------------------------------
// 6b. Parse edges: event limits, lone surrogates, files still arriving

/// The longest prefix of `text` of at most `max` bytes that ends on a character
/// boundary.
fn char_prefix(text: &str, max: usize) -> &str {
    let end = (0..=max.min(text.len()))
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    &text[..end]
}

/// An off_blocks event of exactly `size` bytes or one more, whose payload string of
/// `é`s puts a character across most cuts.
fn big_off_blocks(size: usize) -> String {
    let empty = off_blocks(3, r#"{"note":""}"#);
    let fill = "\u{e9}".repeat((size - empty.len()) / 2);
    off_blocks(3, &format!("{{\"note\":\"{fill}\"}}"))
}

/// The (record_index, reason, raw, detail) of every quarantine row of `digest`.
fn quarantined(db: &Path, digest: &str) -> Vec<Vec<String>> {
    query(
        db,
        &format!(
            "SELECT record_index, reason, raw, detail FROM quarantine WHERE batch_digest = '{digest}' ORDER BY record_index"
        ),
    )
}

#[test]
fn an_event_over_event_bytes_max_is_quarantined_too_large_and_the_rest_processed() {
    let big = big_off_blocks(5001);
    assert!(big.len() >= 5000, "{}", big.len());
    let raw = char_prefix(&big, 1000);
    assert!(raw.len() == 999 || raw.len() == 1000);
    let events = [duty_start(1, "{}"), big.clone(), landing_event()];
    let files = [
        ("big.json", json_batch(&events)),
        (
            "big.ndjson",
            events.iter().map(|e| format!("{e}\n")).collect(),
        ),
        (
            "big-crlf.ndjson",
            events.iter().map(|e| format!("{e}\r\n")).collect(),
        ),
    ];
    for (name, content) in files {
        let site = Site::new();
        let path = site.file(name, &content);
        let output = ingest_command(&site.db)
            .args(["--json", "--event-bytes-max", "1000"])
            .arg(&path)
            .output()
            .expect("run");
        let lines = parse_lines(&output);
        assert_eq!(output.status.code(), Some(0), "{name}: {lines:?}");
        assert_eq!(lines[0]["outcome"], "processed", "{name}: {}", lines[0]);
        assert_eq!(counts(&lines[0]), [3, 2, 0, 0, 0, 0, 1], "{name}");
        let rows = quarantined(&site.db, &sha256_hex(&content));
        assert_eq!(rows.len(), 1, "{name}: {rows:?}");
        assert_eq!(rows[0][..3], ["1", "too_large", raw], "{name}");
        assert!(
            rows[0][3].contains("--event-bytes-max") && rows[0][3].contains(&big.len().to_string()),
            "{name}: {}",
            rows[0][3]
        );
        assert_eq!(
            dump(&site.db, "duty_event", &["event_kind"]),
            ["duty_start", "landing"],
            "{name}"
        );
        // Under the default limit the same event is an event like any other.
        let other = Site::new();
        let line = other.processed(name, &content);
        assert_eq!(counts(&line), [3, 3, 0, 0, 0, 0, 0], "{name}");
    }
    // The same limit bounds any one value of a .json file: a batch_id over it
    // rejects the file as bad_shape.
    let site = Site::new();
    site.processed("seed.json", &json_batch(&[duty_start(1, "{}")]));
    let long_id = format!("{{\"batch_id\":\"{}\",\"events\":[]}}", "B".repeat(5000));
    check_rejected(
        &site,
        "long-id.json",
        long_id.as_bytes(),
        &["--event-bytes-max", "1000"],
        "bad_shape",
    );
}

fn landing_event() -> String {
    event(
        "BA0117-20261129",
        "landing",
        "2026-11-29T12:05:00Z",
        Some(1),
        "{}",
    )
}

#[test]
fn a_lone_surrogate_quarantines_its_event_and_not_the_json_batch() {
    let site = Site::new();
    let lone = r#"{"flight_id":"BA0117-20261129","event_kind":"takeoff","instant_utc":"2026-11-29T10:25:00Z","payload":{"note":"\ud800"}}"#;
    let content = json_batch(&[duty_start(1, "{}"), lone.to_owned(), landing_event()]);
    let line = site.processed("lone.json", &content);
    assert_eq!(counts(&line), [3, 2, 0, 0, 0, 0, 1]);
    let rows = quarantined(&site.db, &sha256_hex(&content));
    assert_eq!(rows[0][..3], ["1", "not_json", lone]);
    assert!(
        rows[0][3].contains("line 2, character ") && rows[0][3].contains("surrogate"),
        "{}",
        rows[0][3]
    );
    // In batch_id the file is JSON, but its batch_id is no text.
    check_rejected(
        &site,
        "lone-id.json",
        br#"{"batch_id":"B\udbff","events":[]}"#,
        &[],
        "bad_shape",
    );
}

#[test]
fn a_file_that_json_can_still_complete_is_truncated_one_that_it_cannot_not_json() {
    let site = Site::new();
    site.processed("seed.json", &json_batch(&[off_blocks(1, "{}")]));
    let deep = "[".repeat(200);
    let truncated: [(&str, String); 7] = [
        ("nul.json", r#"{"batch_id": nul"#.to_owned()),
        ("tru.json", r#"{"events":[tru"#.to_owned()),
        ("minus.json", r#"{"events":[{"a":1,"":-"#.to_owned()),
        ("shape.json", r#"{"extra":1,"events":["#.to_owned()),
        ("deep.json", format!("{{\"events\":[{deep}")),
        ("deep.ndjson", format!("{}\n{deep}", duty_start(1, "{}"))),
        (
            "cut.ndjson",
            format!("{}\n{{\"flight_id\":\"BA\r", duty_start(1, "{}")),
        ),
    ];
    for (name, content) in &truncated {
        check_rejected(&site, name, content.as_bytes(), &[], "truncated");
    }
    let not_json = [
        ("comma.json", ","),
        ("quote.json", r#"{"events":[{"note":"he said "hi"}}]}"#),
        ("brackets.json", r#"{"events":[{"a":[1}]}"#),
    ];
    for (name, content) in not_json {
        check_rejected(&site, name, content.as_bytes(), &[], "not_json");
    }
    let output = ingest_command(&site.db)
        .arg("--json")
        .arg(site.file("where.json", "{\"events\":[\n  {\"a\":1 \"b\":2}\n]}"))
        .output()
        .expect("run");
    assert_eq!(
        parse_lines(&output)[0]["detail"],
        "the file is not JSON at line 2, character 10 (byte offset 21): expected ',' or '}' in an object"
    );

    // An unterminated last NDJSON line that no continuation makes JSON is an
    // invalid event, and its file is processed; a \r ending it is not raw.
    let content = format!("{}\n{{\"flight_id\" x\r", duty_start(1, "{}"));
    let line = site.processed("bad-last.ndjson", &content);
    assert_eq!(counts(&line), [2, 1, 0, 0, 0, 0, 1]);
    let rows = quarantined(&site.db, &sha256_hex(&content));
    assert_eq!(rows[0][..3], ["1", "not_json", "{\"flight_id\" x"]);
    assert_eq!(
        rows[0][3],
        format!(
            "the event is not JSON at line 2, character 14 (byte offset {}): expected ':' after an object key",
            duty_start(1, "{}").len() + 1 + 13
        )
    );
}

// ---------------------------------------------------------------------------------
// 7. A transaction that fails half-way

/// An NDJSON file of `count` events: one invalid (index 1), one that updates the
/// seed's off_blocks row (index 2), the flight `special` at `special_at`, and new
/// flights elsewhere.
fn many_events(count: usize, special: &str, special_at: usize) -> String {
    let mut text = String::new();
    for i in 0..count {
        let line = match i {
            1 => r#"{"flight_id":"BA0117-20261129","event_kind":"off_blocks"}"#.to_owned(),
            2 => off_blocks(2, r#"{"tail":"G-XWBB"}"#),
            _ if i == special_at => {
                event(special, "takeoff", "2026-11-29T10:25:00Z", Some(1), "{}")
            }
            _ => event(
                &format!("F{i:06}-20261129"),
                "takeoff",
                "2026-11-29T10:25:00Z",
                Some(1),
                r#"{"n":1}"#,
            ),
        };
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// `output` is that of an operating error (exit 2) whose stderr names each of
/// `mentions`, which processed no file and left the tables as `before`.
fn assert_failed_without_trace(
    site: &Site,
    output: &Output,
    before: &[Vec<String>],
    mentions: &[&str],
) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        output.status.code(),
        Some(2),
        "an operating error: {stderr}"
    );
    assert!(
        mentions.iter().all(|mention| stderr.contains(mention)),
        "{stderr}"
    );
    let lines = parse_lines(output);
    assert!(
        lines.iter().all(|line| line["outcome"] != "processed"),
        "{lines:?}"
    );
    assert_eq!(snapshot(&site.db), before, "the failed file left a trace");
}

#[test]
fn a_database_error_in_the_middle_of_a_file_leaves_no_trace() {
    let site = Site::new();
    site.processed("seed.json", &json_batch(&[off_blocks(1, "{}")]));
    let poisoned_text = many_events(1000, "POISON", 500);
    let poisoned = site.file("poisoned.ndjson", &poisoned_text);
    // A trigger of the test's own makes the insert of one row (the POISON flight's
    // event) fail inside the file's transaction, after its invalid event was
    // quarantined, the file's flights numbered and hundreds of rows written whether
    // events are applied in file order (POISON is event 500) or in key order (its
    // key starts 544e…, about a third of the way).
    site.execute(
        "CREATE TRIGGER poison BEFORE INSERT ON spoolite_event
         WHEN NEW.flight_id = 'POISON'
         BEGIN SELECT RAISE(ABORT, 'forced failure'); END;",
    );
    let before = snapshot(&site.db);

    let output = ingest_command(&site.db)
        .arg("--json")
        .arg(&poisoned)
        .output()
        .expect("run");
    assert_failed_without_trace(
        &site,
        &output,
        &before,
        &["forced failure", "poisoned.ndjson"],
    );

    // The next file of the same run still goes in.
    let next_text = json_batch(&[duty_start(1, "{}")]);
    let next = site.file("next.json", &next_text);
    let output = ingest_command(&site.db)
        .arg("--json")
        .arg(&poisoned)
        .arg(&next)
        .output()
        .expect("run");
    assert_eq!(output.status.code(), Some(2));
    let lines = parse_lines(&output);
    let next_line = lines
        .iter()
        .find(|line| line["file"] == "next.json")
        .expect("a line for next.json");
    assert_eq!(next_line["outcome"], "processed");
    assert_eq!(counts(next_line), [1, 1, 0, 0, 0, 0, 0]);
    assert_off_blocks_and_duty_start_only(&site.db);
    assert_eq!(
        dump(&site.db, "ingest_inbox", &["file_name"]),
        ["next.json", "seed.json"]
    );
    assert!(dump(&site.db, "quarantine", &[]).is_empty());

    // Once the fault is gone the file goes in whole: it was never recorded.
    site.execute("DROP TRIGGER poison;");
    let line = site.processed("poisoned.ndjson", &poisoned_text);
    assert_eq!(counts(&line), [1000, 998, 1, 0, 0, 0, 1]);
    assert_eq!(dump(&site.db, "duty_event", &[]).len(), 1000);
    assert_eq!(
        dump(&site.db, "quarantine", &["record_index", "reason"]),
        ["1|missing_field"]
    );
}

#[test]
fn a_write_refused_by_the_file_size_limit_leaves_no_trace() {
    let site = Site::new();
    site.processed("seed.json", &json_batch(&[off_blocks(1, "{}")]));
    let big_text = many_events(5000, "BA0999-20261129", 2500);
    let big = site.file("big.ndjson", &big_text);
    let before = snapshot(&site.db);

    // RLIMIT_FSIZE of 256 blocks of 512 bytes (POSIX sh): the WAL and staging the
    // thousands of events outgrow it, and a write past it fails with EFBIG (SIGXFSZ is
    // ignored, so spoolite sees the error instead of being killed).
    let output = Command::new("sh")
        .env_clear()
        .arg("-c")
        .arg(r#"trap '' XFSZ; ulimit -f 256 && exec "$0" "$@""#)
        .arg(env!("CARGO_BIN_EXE_spoolite"))
        .arg("ingest")
        .arg("--db")
        .arg(&site.db)
        .arg("--json")
        .arg(&big)
        .output()
        .expect("run sh");
    assert_failed_without_trace(&site, &output, &before, &["big.ndjson"]);

    let line = site.processed("big.ndjson", &big_text);
    assert_eq!(counts(&line), [5000, 4998, 1, 0, 0, 0, 1]);
}

#[test]
fn ingest_waits_out_an_analysts_lock_instead_of_failing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let first = write(
        dir.path(),
        "first.json",
        json_batch(&[event("LK1", "takeoff", "2026-11-29T10:00:00Z", None, "{}")]),
    );
    let (code, _) = ingest_json(&db, &[&first]);
    assert_eq!(code, 0);
    // An analyst holds the write lock for longer than one busy timeout (5 s).
    let locked = std::sync::Arc::new(std::sync::Barrier::new(2));
    let analyst = {
        let db = db.clone();
        let locked = locked.clone();
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(&db).expect("analyst opens");
            conn.execute_batch("BEGIN EXCLUSIVE")
                .expect("analyst locks");
            locked.wait();
            std::thread::sleep(std::time::Duration::from_secs(7));
            conn.execute_batch("ROLLBACK").expect("analyst releases");
        })
    };
    locked.wait();
    let second = write(
        dir.path(),
        "second.json",
        json_batch(&[event("LK2", "landing", "2026-11-29T12:00:00Z", None, "{}")]),
    );
    let started = std::time::Instant::now();
    let (code, lines) = ingest_json(&db, &[&second]);
    analyst.join().expect("analyst thread");
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "processed");
    assert_eq!(lines[0]["inserted"], 1);
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(6),
        "it waited for the release"
    );
    assert_eq!(dump(&db, "duty_event", &["flight_id"]), ["LK1", "LK2"]);
}

#[test]
fn a_schema_2_database_keeps_its_rows_when_the_key_becomes_binary() {
    let site = Site::new();
    // A database as spoolite left it before schema 3: duty_event a table keyed by the
    // hex key, with one batch's row in it.
    {
        let conn = rusqlite::Connection::open(&site.db).expect("create db");
        conn.execute_batch(include_str!("../../schema/0001_initial.sql"))
            .expect("schema 1");
        conn.execute_batch(include_str!("../../schema/0002_analyst_views.sql"))
            .expect("schema 2");
        let digest = "d".repeat(64);
        conn.execute_batch(&format!(
            "INSERT INTO ingest_inbox VALUES ('{digest}', 'old', 'old.json',
                 '2026-11-29T12:00:00Z', 1, 1, 0, 0, 0, 0, 0);
             INSERT INTO duty_event VALUES ('{K_OFF}', 'BA0117-20261129', 'off_blocks',
                 '2026-11-29T10:05:00Z', 1, '{{}}', '{digest}',
                 '2026-11-29T12:00:00Z', '2026-11-29T12:00:00Z');
             PRAGMA user_version = 2;"
        ))
        .expect("schema 2 rows");
    }
    let old_rows = dump(&site.db, "duty_event", EVENT_COLUMNS);

    // A dry run opens read-only and cannot upgrade: it says so and changes nothing.
    let probe = site.file("probe.json", json_batch(&[duty_start(1, "{}")]));
    let output = ingest_command(&site.db)
        .args(["--json", "--dry-run"])
        .arg(&probe)
        .output()
        .expect("run ingest --dry-run");
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!(
            "has schema version 2, older than this spoolite's ({})",
            sqlite_schema_version()
        )),
        "{stderr}"
    );
    assert_eq!(query(&site.db, "PRAGMA user_version"), [["2"]]);

    // The same event again (unchanged) and a new one: the upgraded database tells
    // them apart by key exactly as before.
    site.processed(
        "new.json",
        &json_batch(&[off_blocks(1, "{}"), duty_start(1, "{}")]),
    );
    assert_eq!(
        query(&site.db, "PRAGMA user_version"),
        [[sqlite_schema_version().to_string()]]
    );
    assert_eq!(
        query(
            &site.db,
            "SELECT type, name FROM sqlite_schema
             WHERE (name LIKE 'duty_event%' OR name LIKE 'spoolite_event%'
                OR name LIKE '%flight%') AND name NOT LIKE '%crew%' ORDER BY name"
        ),
        [
            ["view", "duty_event"],
            ["view", "duty_event_all"],
            ["view", "flight_times"],
            ["table", "spoolite_event"],
            ["index", "spoolite_event_batch"],
            ["index", "spoolite_event_change_seq"],
            ["index", "spoolite_event_flight"],
            ["index", "spoolite_event_key"],
            ["index", "spoolite_event_kind_instant"],
            ["index", "spoolite_event_off_blocks"],
            ["index", "spoolite_event_updated_at"],
            ["table", "spoolite_flight"],
            ["index", "spoolite_flight_block"],
            ["index", "spoolite_flight_id_lower"],
            ["index", "spoolite_flight_off_blocks"],
            ["index", "sqlite_autoindex_spoolite_flight_1"],
        ]
    );
    // The old flight was numbered by the upgrade, the new one by the ingest after it.
    assert_eq!(
        query(
            &site.db,
            "SELECT ref, flight_id FROM spoolite_flight ORDER BY ref"
        ),
        [["1", "BA0117-20261129"], ["2", "EZY8421-20270102"]]
    );
    assert_eq!(
        query(
            &site.db,
            "SELECT events_total, inserted, unchanged FROM ingest_inbox WHERE file_name = 'new.json'"
        ),
        [["2", "1", "1"]]
    );
    let rows = dump(&site.db, "duty_event", EVENT_COLUMNS);
    assert_eq!(rows.len(), 2, "{rows:?}");
    assert!(rows.contains(&old_rows[0]), "{rows:?} keeps {old_rows:?}");
    assert_eq!(
        query(
            &site.db,
            &format!(
                "SELECT batch_digest, first_seen_at FROM duty_event WHERE idempotency_key = '{K_OFF}'"
            )
        ),
        [["d".repeat(64), "2026-11-29T12:00:00.000Z".to_owned()]],
        "the old row is untouched but for schema 4's three fraction digits"
    );
    assert_eq!(
        query(
            &site.db,
            &format!("SELECT count(*) FROM duty_event WHERE idempotency_key = '{K_DUTY}'")
        ),
        [["1"]]
    );
}

/// The digest pass only validates UTF-8; the line of a bad byte is found by reading
/// the file again. Past several read buffers, the detail still names the line.
#[test]
fn a_bad_byte_far_into_a_file_is_named_by_its_line_and_byte() {
    let site = Site::new();
    let line = event(
        "BA0117-20261129",
        "off_blocks",
        "2026-11-29T10:05:00Z",
        Some(1),
        r#"{"tail":"G-XWBA"}"#,
    );
    let lines = 3000;
    let mut content = format!("{line}\n").repeat(lines).into_bytes();
    content.extend_from_slice(b"{\"flight_id\":\"Z\xfcrich\"}\n");
    let at = content.len() - 8;
    assert_eq!(content[at], 0xfc);
    let path = site.file("far.ndjson", &content);
    let (code, outcomes) = site.ingest(&[&path]);
    assert_eq!(code, 1, "{outcomes:?}");
    assert_eq!(outcomes[0]["reason"], "not_utf8", "{outcomes:?}");
    assert_eq!(outcomes[0]["sha256"], sha256_hex(&content), "{outcomes:?}");
    let detail = outcomes[0]["detail"].as_str().expect("detail");
    assert!(
        detail.contains(&format!(
            "line {}, byte 16 of the line (byte offset {at})",
            lines + 1
        )),
        "{detail}"
    );
}

/// Runs `command` (a `spoolite ingest`) with `stdin` on its standard input; returns
/// the exit code, stdout and the lines of stderr that are messages (not log lines).
fn ingest_messages(command: &mut Command, stdin: &str) -> (i32, String, Vec<String>) {
    use std::io::Write as _;
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run spoolite ingest");
    let mut input = child.stdin.take().expect("stdin");
    // The command may exit without reading: a closed pipe is no failure here.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    let output = child.wait_with_output().expect("wait for spoolite ingest");
    let messages = String::from_utf8_lossy(&output.stderr)
        .lines()
        .filter(|line| line.starts_with("spoolite: "))
        .map(str::to_owned)
        .collect();
    (
        output.status.code().expect("exit code"),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        messages,
    )
}

#[test]
fn an_argument_that_names_no_batch_file_is_an_operating_error_that_says_what_to_do() {
    let site = Site::new();
    let good = site.file("good.json", json_batch(&[off_blocks(1, "{}")]));
    let folder = site.dir.path().join("day1");
    std::fs::create_dir(&folder).expect("mkdir");
    let link = site.dir.path().join("latest.json");
    std::os::unix::fs::symlink(&good, &link).expect("symlink");
    let fifo = site.dir.path().join("pipe.ndjson");
    let c_fifo = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_fifo.as_ptr(), 0o644) }, 0, "mkfifo");
    let stdin = "standard input and pipes are not read, since a batch's format comes from \
                 its file name: save the input to a file (e.g. batch.ndjson) and name that file";
    let cases = [
        ("-".to_owned(), stdin.to_owned()),
        ("/dev/stdin".to_owned(), stdin.to_owned()),
        (
            folder.display().to_string(),
            format!(
                "a folder is not a batch file: name the files in it (e.g. {}/*.json)",
                folder.display()
            ),
        ),
        (
            link.display().to_string(),
            format!(
                "a symbolic link is not followed: name the file it points to ({})",
                good.display()
            ),
        ),
        (
            fifo.display().to_string(),
            "a FIFO is not a batch file: name a regular file".to_owned(),
        ),
    ];
    for (argument, why) in &cases {
        for json in [false, true] {
            let mut command = ingest_command(&site.db);
            if json {
                command.arg("--json");
            }
            // The good file is named too: nothing is ingested while an argument is wrong.
            command.arg(&good).arg(argument);
            let (code, stdout, messages) = ingest_messages(&mut command, "{\"events\":[]}\n");
            assert_eq!(code, 2, "{argument}: {stdout}{messages:?}");
            assert_eq!(
                messages,
                [format!("spoolite: ingest {argument}: {why}")],
                "{argument}"
            );
            assert_eq!(stdout, "", "{argument}: no outcome line");
            assert!(!site.db.exists(), "{argument}: no database is created");
        }
    }
}

#[test]
fn a_missing_file_is_named_once_and_the_others_are_ingested() {
    let site = Site::new();
    let good = site.file("good.json", json_batch(&[off_blocks(1, "{}")]));
    let missing = site.dir.path().join("gone.json");
    let mut command = ingest_command(&site.db);
    command.arg(&missing).arg(&good);
    let (code, stdout, messages) = ingest_messages(&mut command, "");
    assert_eq!(code, 2, "{stdout}{messages:?}");
    assert_eq!(
        messages,
        [format!(
            "spoolite: read {}: No such file or directory (os error 2)",
            missing.display()
        )]
    );
    assert!(stdout.starts_with("processed good.json "), "{stdout}");
}

#[test]
fn an_ingest_json_line_carries_the_time_taken_like_the_text_line() {
    let site = Site::new();
    let events: Vec<String> = (0..2000)
        .map(|i| {
            event(
                &format!("BA{i:04}-20261129"),
                "off_blocks",
                "2026-11-29T10:05:00Z",
                Some(1),
                "{}",
            )
        })
        .collect();
    let big = site.file("big.json", json_batch(&events));
    let bad = site.file("bad.xls", "a,b\n");
    let started = std::time::Instant::now();
    let output = ingest_command(&site.db)
        .arg("--json")
        .args([&big, &big, &bad])
        .output()
        .expect("run spoolite ingest");
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let lines = parse_lines(&output);
    assert_eq!(output.status.code(), Some(1), "{lines:?}");
    let outcomes: Vec<&str> = lines
        .iter()
        .map(|l| l["outcome"].as_str().unwrap_or("?"))
        .collect();
    assert_eq!(outcomes, ["processed", "skipped_duplicate", "rejected"]);
    let durations: Vec<u64> = lines
        .iter()
        .map(|line| {
            line["duration_ms"]
                .as_u64()
                .unwrap_or_else(|| panic!("{line}"))
        })
        .collect();
    // Every line has its own; together they fit in the command's run time.
    assert!(
        durations.iter().sum::<u64>() <= elapsed_ms,
        "{durations:?} in {elapsed_ms} ms"
    );
}
