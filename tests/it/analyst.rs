//! The analysts' plain queries: each written as an analyst writes it (no planner
//! hint), answered through the index its speed depends on, with the right rows.
//! The plans are SQLite's without statistics (spoolite runs no ANALYZE), the
//! same at a thousand rows as at ten million; BENCHMARKS.md times them at 10M.

use std::collections::BTreeMap;

use crate::support::{event, ingest_json, query, sha256_hex, write};

/// Flights of November 2026 (and one of October), each with six events; every
/// fifth flight's landing retracted by a second revision.
const FLIGHTS: usize = 60;

struct Built {
    _dir: tempfile::TempDir,
    db: std::path::PathBuf,
    /// Live events per kind.
    live: BTreeMap<String, usize>,
    /// Every stored row (retracted ones included).
    all: usize,
}

fn flight_id(n: usize) -> String {
    format!(
        "BA{n:04}-2026{:02}{:02}",
        if n == 0 { 10 } else { 11 },
        1 + n % 28
    )
}

fn day(n: usize) -> String {
    format!("2026-{:02}-{:02}", if n == 0 { 10 } else { 11 }, 1 + n % 28)
}

fn build() -> Built {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let mut lines = Vec::new();
    let mut live = BTreeMap::new();
    let mut all = 0;
    for n in 0..FLIGHTS {
        let (id, day) = (flight_id(n), day(n));
        let payload = format!(
            r#"{{"crew":["C{}","C{}"],"tail":"G-X{}"}}"#,
            n % 9,
            n % 7,
            n % 5
        );
        for (kind, time) in [
            ("duty_start", "08:00:00"),
            ("off_blocks", "09:00:00"),
            ("takeoff", "09:10:00"),
            ("landing", "11:00:00"),
            ("on_blocks", "11:10:00"),
            ("duty_end", "12:00:00"),
        ] {
            let at = format!("{day}T{time}Z");
            lines.push(event(&id, kind, &at, Some(1), &payload));
            all += 1;
            if kind == "landing" && n % 5 == 0 {
                lines.push(event(&id, kind, &at, Some(2), "{}").replacen(
                    '{',
                    r#"{"retracted":true,"#,
                    1,
                ));
            } else {
                *live.entry(kind.to_owned()).or_insert(0) += 1;
            }
        }
    }
    let file = write(dir.path(), "november.ndjson", lines.join("\n") + "\n");
    let (code, out) = ingest_json(&db, &[&file]);
    assert_eq!(code, 0, "{out:?}");
    Built {
        _dir: dir,
        db,
        live,
        all,
    }
}

/// The steps of the plan of `sql`.
fn plan(db: &std::path::Path, sql: &str) -> Vec<String> {
    query(db, &format!("EXPLAIN QUERY PLAN {sql}"))
        .into_iter()
        .map(|row| row[3].clone())
        .collect()
}

fn no_sort(plan: &[String]) -> bool {
    plan.iter().all(|step| !step.contains("TEMP B-TREE"))
}

#[test]
fn the_counts_read_one_index_and_equal_the_rows() {
    let b = build();
    let live: usize = b.live.values().sum();

    let sql = "SELECT count(*) FROM duty_event";
    assert_eq!(
        plan(&b.db, sql),
        ["SCAN e USING COVERING INDEX spoolite_event_kind_instant"]
    );
    assert_eq!(query(&b.db, sql), [[live.to_string()]]);

    // The whole table: SQLite counts the entries of its smallest index.
    let sql = "SELECT count(*) FROM duty_event_all";
    let steps = plan(&b.db, sql);
    assert!(
        steps.len() == 1 && steps[0].contains("COVERING INDEX"),
        "{steps:?}"
    );
    assert_eq!(query(&b.db, sql), [[b.all.to_string()]]);

    let sql = "SELECT event_kind, count(*) FROM duty_event GROUP BY event_kind";
    assert_eq!(
        plan(&b.db, sql),
        ["SCAN e USING COVERING INDEX spoolite_event_kind_instant"]
    );
    let want: Vec<Vec<String>> = b
        .live
        .iter()
        .map(|(kind, n)| vec![kind.clone(), n.to_string()])
        .collect();
    assert_eq!(query(&b.db, sql), want);

    // Datasette's facet, its own SQL.
    let sql = "SELECT event_kind AS value, count(*) AS count FROM (SELECT * FROM duty_event) \
               WHERE event_kind IS NOT NULL GROUP BY event_kind ORDER BY count DESC, value LIMIT 31";
    let steps = plan(&b.db, sql);
    assert_eq!(
        steps[0], "SCAN e USING COVERING INDEX spoolite_event_kind_instant",
        "{steps:?}"
    );
    assert!(
        steps[1..]
            .iter()
            .all(|s| s == "USE TEMP B-TREE FOR ORDER BY"),
        "only the groups are sorted: {steps:?}"
    );
    let mut want: Vec<(usize, String)> = b.live.iter().map(|(k, n)| (*n, k.clone())).collect();
    want.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let want: Vec<Vec<String>> = want
        .into_iter()
        .map(|(n, k)| vec![k, n.to_string()])
        .collect();
    assert_eq!(query(&b.db, sql), want);
}

#[test]
fn a_plain_instant_range_of_one_kind_is_an_index_search_in_time_order() {
    let b = build();
    let sql = "SELECT substr(instant_utc, 1, 10) AS day, count(*) FROM duty_event \
               WHERE event_kind = 'landing' AND instant_utc >= '2026-11-01' \
               AND instant_utc < '2026-12-01' GROUP BY day";
    let steps = plan(&b.db, sql);
    assert_eq!(
        steps[0],
        "SEARCH e USING COVERING INDEX spoolite_event_kind_instant \
         (event_kind=? AND instant_utc>? AND instant_utc<?)",
        "{steps:?}"
    );
    let mut want: BTreeMap<String, usize> = BTreeMap::new();
    for n in (1..FLIGHTS).filter(|n| n % 5 != 0) {
        *want.entry(day(n)).or_insert(0) += 1;
    }
    let want: Vec<Vec<String>> = want
        .into_iter()
        .map(|(d, n)| vec![d, n.to_string()])
        .collect();
    assert_eq!(query(&b.db, sql), want);

    // In time order through the index: no sort.
    let sql = "SELECT flight_id, instant_utc FROM duty_event WHERE event_kind = 'takeoff' \
               AND instant_utc >= '2026-11-01' ORDER BY instant_utc LIMIT 101";
    let steps = plan(&b.db, sql);
    assert!(
        steps[0].starts_with(
            "SEARCH e USING INDEX spoolite_event_kind_instant (event_kind=? AND instant_utc>?)"
        ) && no_sort(&steps),
        "{steps:?}"
    );
    let got: Vec<String> = query(&b.db, sql)
        .into_iter()
        .map(|r| r[1].clone())
        .collect();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(got, sorted);
    assert_eq!(got.len(), FLIGHTS - 1);
}

#[test]
fn block_hours_per_tail_written_plainly_read_the_month_only() {
    let b = build();
    // The README's form: the month's off-blocks events, each joined to its flight.
    // Both are read from an index (schema 10): the events' payload and flight id
    // from the live off-blocks' own, each flight's off-blocks and minutes from the
    // one on its id (SQLite reads the flight's row only for a column beyond them).
    // (Written with the month on f.off_blocks_utc instead, SQLite 3.40 carries both
    // bounds over to the event's index, but the SQLite bundled here only the lower
    // one: a range from the month to the end of the data.)
    let sql = "SELECT json_extract(d.payload, '$.tail') AS tail, \
               round(sum(f.block_minutes) / 60, 1) AS block_hours \
               FROM duty_event AS d JOIN flight_times AS f ON f.flight_id = d.flight_id \
               AND f.off_blocks_utc = d.instant_utc \
               WHERE d.event_kind = 'off_blocks' AND d.instant_utc >= '2026-11-01' \
               AND d.instant_utc < '2026-12-01' GROUP BY tail ORDER BY tail";
    let steps = plan(&b.db, sql);
    assert_eq!(
        steps[..2],
        [
            "SEARCH e USING COVERING INDEX spoolite_event_off_blocks \
             (event_kind=? AND instant_utc>? AND instant_utc<?)",
            "SEARCH spoolite_flight USING INDEX spoolite_flight_block \
             (flight_id=? AND off_blocks_utc=?)",
        ],
        "{steps:?}"
    );
    // 130 block minutes a flight (09:00 to 11:10); November's flights are 1..FLIGHTS.
    let mut want: BTreeMap<String, f64> = BTreeMap::new();
    for n in 1..FLIGHTS {
        *want.entry(format!("G-X{}", n % 5)).or_insert(0.0) += 130.0 / 60.0;
    }
    let want: Vec<Vec<String>> = want
        .into_iter()
        .map(|(t, h)| vec![t, ((h * 10.0).round() / 10.0).to_string()])
        .collect();
    assert_eq!(query(&b.db, sql), want);
}

#[test]
fn pages_sorted_by_updated_at_or_change_seq_and_a_flight_or_a_key_are_index_reads() {
    let b = build();
    for (sql, index) in [
        (
            "SELECT * FROM duty_event ORDER BY updated_at DESC LIMIT 101",
            "SCAN e USING INDEX spoolite_event_updated_at",
        ),
        (
            "SELECT * FROM duty_event_all ORDER BY updated_at DESC LIMIT 101",
            "SCAN e USING INDEX spoolite_event_updated_at",
        ),
        (
            "SELECT * FROM duty_event ORDER BY change_seq DESC LIMIT 101",
            "SCAN e USING INDEX spoolite_event_change_seq",
        ),
        (
            "SELECT * FROM duty_event_all ORDER BY change_seq DESC LIMIT 101",
            "SCAN e USING INDEX spoolite_event_change_seq",
        ),
    ] {
        let steps = plan(&b.db, sql);
        assert!(steps[0] == index && no_sort(&steps), "{sql}: {steps:?}");
        assert_eq!(query(&b.db, sql).len(), 101);
    }

    let id = flight_id(7);
    let sql =
        format!("SELECT event_kind FROM duty_event WHERE flight_id = '{id}' ORDER BY instant_utc");
    let steps = plan(&b.db, &sql);
    assert_eq!(
        steps[0], "SEARCH e USING COVERING INDEX spoolite_event_flight (flight_id=?)",
        "{steps:?}"
    );
    assert_eq!(
        query(&b.db, &sql),
        [
            ["duty_start"],
            ["off_blocks"],
            ["takeoff"],
            ["landing"],
            ["on_blocks"],
            ["duty_end"]
        ]
    );

    let at = format!("{}T09:00:00Z", day(7));
    let key = sha256_hex(format!("{id}|off_blocks|{at}"));
    for view in ["duty_event", "duty_event_all"] {
        let sql =
            format!("SELECT flight_id, instant_utc FROM {view} WHERE idempotency_key = '{key}'");
        let steps = plan(&b.db, &sql);
        assert_eq!(
            steps[0], "SEARCH e USING INDEX spoolite_event_key (<expr>=?)",
            "{steps:?}"
        );
        assert_eq!(query(&b.db, &sql), [[id.clone(), at.clone()]]);
    }
}
