//! `.csv` batches through the real binary (section *CSV batches*): event rows and
//! flight rows leave what the equivalent NDJSON batch leaves, gzipped or not; a bad
//! row or cell is quarantined with the row as its raw; a header of neither shape
//! rejects the file; an unended last row waits until the file is settled.

use std::path::Path;
use std::time::Duration;

use crate::support::{
    CONTENT_COLUMNS, Site, dump, gzip, ingest_json, query, rejected_whole, write,
};

/// Event rows: a byte-order mark, CRLF, names in any case, every column but slot.
const EVENT_ROWS: &str = "\u{feff}Flight_ID, event_kind ,instant_utc,source_revision,retracted,\
crew,crew_positioning,payload.tail,payload.remark\r\n\
BA0117-20261129,off_blocks,2026-11-29T10:05:00Z,1,,C1; C2,P1,G-XWBA,\"late, \"\"ATC\"\"\"\r\n\
BA0117-20261129,takeoff,2026-11-29T11:20:00+01:00,1,false,C1;C2,P1,G-XWBA,\r\n\
BA0117-20261129,landing,2026-11-29T12:50:00Z,2,TRUE,,,,\"two\r\nlines\"\r\n";

/// The same events as NDJSON.
const EVENT_LINES: &str = r#"{"flight_id":"BA0117-20261129","event_kind":"off_blocks","instant_utc":"2026-11-29T10:05:00Z","source_revision":1,"payload":{"crew":["C1","C2",{"id":"P1","role":"positioning"}],"tail":"G-XWBA","remark":"late, \"ATC\""}}
{"flight_id":"BA0117-20261129","event_kind":"takeoff","instant_utc":"2026-11-29T10:20:00Z","source_revision":1,"retracted":false,"payload":{"crew":["C1","C2",{"id":"P1","role":"positioning"}],"tail":"G-XWBA"}}
{"flight_id":"BA0117-20261129","event_kind":"landing","instant_utc":"2026-11-29T12:50:00Z","source_revision":2,"retracted":true,"payload":{"remark":"two\r\nlines"}}
"#;

/// Flight rows, the times in any column order; the last row has no line end
/// (`ingest` takes a file as it stands).
const FLIGHT_ROWS: &str = "flight_id,on_blocks,landing,takeoff,off_blocks,source_revision,crew,\
payload.tail\n\
LH0400-20261129,2026-11-29T16:25:00Z,2026-11-29T16:10:00Z,2026-11-29T08:20:00Z,\
2026-11-29T08:00:00Z,3,C7,D-ABYA\n\
LH0401-20261129,,,,2026-11-29T18:00:00Z,,,";

const FLIGHT_LINES: &str = r#"{"flight_id":"LH0400-20261129","event_kind":"off_blocks","instant_utc":"2026-11-29T08:00:00Z","source_revision":3,"payload":{"crew":["C7"],"tail":"D-ABYA"}}
{"flight_id":"LH0400-20261129","event_kind":"takeoff","instant_utc":"2026-11-29T08:20:00Z","source_revision":3,"payload":{"crew":["C7"],"tail":"D-ABYA"}}
{"flight_id":"LH0400-20261129","event_kind":"landing","instant_utc":"2026-11-29T16:10:00Z","source_revision":3,"payload":{"crew":["C7"],"tail":"D-ABYA"}}
{"flight_id":"LH0400-20261129","event_kind":"on_blocks","instant_utc":"2026-11-29T16:25:00Z","source_revision":3,"payload":{"crew":["C7"],"tail":"D-ABYA"}}
{"flight_id":"LH0401-20261129","event_kind":"off_blocks","instant_utc":"2026-11-29T18:00:00Z"}
"#;

/// The counts of each file's `ingest --json` line, and the event and flight rows
/// after ingesting `files` into a new database.
fn rows_after(files: &[(&str, &[u8])]) -> (Vec<Vec<serde_json::Value>>, Vec<Vec<String>>) {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let paths: Vec<_> = files
        .iter()
        .map(|(name, content)| write(dir.path(), name, content))
        .collect();
    let paths: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    let (code, lines) = ingest_json(&db, &paths);
    assert_eq!(code, 0, "{lines:?}");
    let counts = lines
        .iter()
        .map(|line| {
            ["outcome", "events_total", "inserted", "invalid"]
                .map(|field| line[field].clone())
                .to_vec()
        })
        .collect();
    let rows = vec![
        dump(&db, "duty_event_all", CONTENT_COLUMNS),
        dump(&db, "flight_times", &[]),
        dump(&db, "quarantine", &["record_index", "reason", "raw"]),
    ];
    (counts, rows)
}

#[test]
fn a_csv_batch_leaves_what_the_same_events_as_ndjson_leave() {
    let ndjson = rows_after(&[
        ("events.ndjson", EVENT_LINES.as_bytes()),
        ("flights.ndjson", FLIGHT_LINES.as_bytes()),
    ]);
    let (counts, rows) = &ndjson;
    assert_eq!(rows[0].len(), 8, "{rows:?}");
    assert!(rows[2].is_empty(), "nothing quarantined: {rows:?}");
    assert_eq!(counts[0][1], 3);
    assert_eq!(counts[1][1], 5);
    assert_eq!(
        rows_after(&[
            ("events.csv", EVENT_ROWS.as_bytes()),
            ("flights.CSV", FLIGHT_ROWS.as_bytes()),
        ]),
        ndjson
    );
    // Gzipped, the same.
    assert_eq!(
        rows_after(&[
            ("events.csv.gz", &gzip(EVENT_ROWS.as_bytes())),
            ("flights.Csv.GZ", &gzip(FLIGHT_ROWS.as_bytes())),
        ]),
        ndjson
    );
}

#[test]
fn bad_rows_and_cells_are_quarantined_with_the_row_as_raw() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let events = write(
        dir.path(),
        "events.csv",
        "flight_id,event_kind,instant_utc,source_revision,payload.note\n\
         Q1,landing,2026-11-29T10:05:00Z\n\
         Q1,landing,2026-11-29T10:05:00,1,x\n\
         \"Q2\",\"landing\",2026-11-29T10:05:00Z,1,\"two\nlines\"\n\
         Q3,,2026-11-29T10:05:00Z,1,\n\
         Q4,landing,2026-11-29T10:05:00Z,1.5,\n",
    );
    let flights = write(
        dir.path(),
        "flights.csv",
        "flight_id,off_blocks,on_blocks\n\
         Q5,2026-11-29T10:05:00Z,soon\n\
         Q6,,\n",
    );
    let (code, lines) = ingest_json(&db, &[&events, &flights]);
    assert_eq!(code, 0, "{lines:?}");
    let counts: Vec<_> = lines
        .iter()
        .map(|l| {
            (
                l["events_total"].clone(),
                l["inserted"].clone(),
                l["invalid"].clone(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [
            (5.into(), 1.into(), 4.into()),
            (3.into(), 1.into(), 2.into())
        ]
    );
    let quarantined = query(
        &db,
        "SELECT file_name, record_index, reason, raw FROM quarantine \
         ORDER BY file_name, record_index",
    );
    let row = |file: &str, index: &str, reason: &str, raw: &str| {
        [file, index, reason, raw].map(str::to_owned).to_vec()
    };
    assert_eq!(
        quarantined,
        [
            row(
                "events.csv",
                "0",
                "bad_row",
                "Q1,landing,2026-11-29T10:05:00Z"
            ),
            row(
                "events.csv",
                "1",
                "bad_instant",
                "Q1,landing,2026-11-29T10:05:00,1,x"
            ),
            row(
                "events.csv",
                "3",
                "missing_field",
                "Q3,,2026-11-29T10:05:00Z,1,"
            ),
            row(
                "events.csv",
                "4",
                "bad_revision",
                "Q4,landing,2026-11-29T10:05:00Z,1.5,"
            ),
            row(
                "flights.csv",
                "1",
                "bad_instant",
                "Q5,2026-11-29T10:05:00Z,soon"
            ),
            row("flights.csv", "2", "missing_field", "Q6,,"),
        ]
    );
    assert_eq!(
        query(
            &db,
            "SELECT flight_id, event_kind, payload FROM duty_event ORDER BY flight_id"
        ),
        [
            ["Q2", "landing", r#"{"note":"two\nlines"}"#],
            ["Q5", "off_blocks", "{}"],
        ]
    );
}

#[test]
fn a_csv_file_of_no_known_shape_or_cut_inside_a_quote_is_rejected_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let site = dir.path();
    let db = site.join("spoolite.db");
    let seed = write(site, "seed.csv", FLIGHT_ROWS);
    assert_eq!(ingest_json(&db, &[&seed]).0, 0);
    let cases: [(&str, &str, &str, &str); 6] = [
        (
            "tail.csv",
            "flight_id,off_blocks,tail\nR1,2026-11-29T10:05:00Z,G-XWBA\n",
            "bad_shape",
            "name it payload.tail",
        ),
        (
            "twice.csv",
            "flight_id,off_blocks,Off_Blocks\nR1,2026-11-29T10:05:00Z,\n",
            "bad_shape",
            "twice",
        ),
        (
            "neither.csv",
            "flight_id,instant_utc\nR1,2026-11-29T10:05:00Z\n",
            "bad_shape",
            "neither event_kind",
        ),
        (
            "no_instant.csv",
            "flight_id,event_kind\nR1,landing\n",
            "bad_shape",
            "no instant_utc column",
        ),
        (
            "cut.csv",
            "flight_id,off_blocks,payload.note\nR1,2026-11-29T10:05:00Z,\"half",
            "truncated",
            "ends inside a quoted cell",
        ),
        ("blank.csv", "\u{feff}\r\n\n", "empty", "no header row"),
    ];
    for (name, content, reason, detail) in cases {
        let path = write(site, name, content);
        let line = rejected_whole(&db, &path, content.as_bytes(), &[], reason);
        let said = line["detail"].as_str().unwrap_or_default();
        assert!(said.contains(detail), "{name}: {said}");
    }
}

#[test]
fn an_unended_last_row_waits_for_its_line_end_until_the_partial_timeout() {
    let site = Site::new();
    let mut daemon =
        site.spawn(
            site.run_command()
                .args(["--settle", "0ms", "--partial-timeout", "3s"]),
        );
    daemon.wait_serving(&site);
    // The whole file arrives but for the last line end: after the partial timeout
    // it goes in as it stands, its last row included.
    site.drop_file("flights.csv", FLIGHT_ROWS);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(site.waiting(), ["flights.csv"], "{}", daemon.log());
    daemon.wait(Duration::from_secs(30), "flights.csv archived", || {
        site.archived() == ["flights.csv"]
    });
    assert_eq!(
        query(&site.db, "SELECT count(*) FROM duty_event"),
        [["5"]],
        "{}",
        daemon.log()
    );
    // A file cut inside a quoted cell waits as long, then is rejected as truncated.
    site.drop_file(
        "cut.csv",
        "flight_id,off_blocks,payload.note\nR1,2026-11-29T10:05:00Z,\"half",
    );
    daemon.wait(Duration::from_secs(30), "cut.csv rejected", || {
        site.rejected_names().contains(&"cut.csv".to_owned())
    });
    let reason =
        std::fs::read_to_string(site.rejected().join("cut.csv.reason.json")).expect("reason file");
    assert!(reason.contains("\"truncated\""), "{reason}");
    assert_eq!(query(&site.db, "SELECT count(*) FROM duty_event"), [["5"]]);
}

#[test]
fn a_flight_row_with_a_slot_replaces_its_earlier_times_without_a_retraction() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    for (name, content) in [
        (
            "first.csv",
            "flight_id,off_blocks,on_blocks,source_revision,slot\r\n\
             LH0400-20261201,2026-12-01T10:05:00Z,2026-12-01T18:00:00Z,1,A\r\n",
        ),
        (
            "corrected.csv",
            "flight_id,off_blocks,on_blocks,source_revision,slot\r\n\
             LH0400-20261201,2026-12-01T10:07:00Z,2026-12-01T18:00:00Z,2,A\r\n",
        ),
    ] {
        let path = write(dir.path(), name, content);
        let (code, lines) = ingest_json(&db, &[&path]);
        assert_eq!(code, 0, "{lines:?}");
    }
    // The on-blocks came again unchanged at a higher revision: updated, live.
    assert_eq!(
        query(
            &db,
            "SELECT event_kind, instant_utc, source_revision, retracted, slot \
             FROM duty_event_all ORDER BY event_kind, instant_utc"
        ),
        [
            ["off_blocks", "2026-12-01T10:05:00Z", "1", "1", "A"],
            ["off_blocks", "2026-12-01T10:07:00Z", "2", "0", "A"],
            ["on_blocks", "2026-12-01T18:00:00Z", "2", "0", "A"],
        ]
    );
    assert_eq!(
        query(
            &db,
            "SELECT off_blocks_utc, block_minutes FROM flight_times"
        ),
        [["2026-12-01T10:07:00Z", "473"]]
    );
}
