//! Times that sort: what spoolite writes carries three fraction digits (and a schema
//! 3 database is rewritten so), and instants are ordered by time, not text, in the
//! views, the index and status.

use std::fs;

use crate::support::*;

#[test]
fn times_written_by_spoolite_and_instants_sort_in_time_order() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    // A schema 3 database as an older spoolite left it: times without trailing zeros.
    {
        let conn = rusqlite::Connection::open(&db).expect("create db");
        for migration in [
            include_str!("../../schema/0001_initial.sql"),
            include_str!("../../schema/0002_analyst_views.sql"),
            include_str!("../../schema/0003_binary_key.sql"),
        ] {
            conn.execute_batch(migration).expect("old schema");
        }
        conn.execute_batch(&format!(
            "INSERT INTO ingest_inbox VALUES ('{a}', NULL, 'a.json', '2026-12-01T09:43:49.15Z',
                 0, 0, 0, 0, 0, 0, 0);
             INSERT INTO ingest_inbox VALUES ('{b}', NULL, 'b.json', '2026-12-01T09:43:49.152Z',
                 0, 0, 0, 0, 0, 0, 0);
             INSERT INTO ingest_inbox VALUES ('{c}', NULL, 'c.json', '2026-12-01T09:43:49Z',
                 0, 0, 0, 0, 0, 0, 0);
             PRAGMA user_version = 3;",
            a = "a".repeat(64),
            b = "b".repeat(64),
            c = "c".repeat(64),
        ))
        .expect("old rows");
    }
    // Two landings of one flight in the same second, and a takeoff.
    let events = [
        event("OR1", "takeoff", "2026-11-29T09:00:00Z", None, "{}"),
        event("OR1", "landing", "2026-11-29T10:05:00.5Z", None, "{}"),
        event("OR1", "landing", "2026-11-29T10:05:00Z", None, "{}"),
    ];
    let file = write(dir.path(), "order.json", json_batch(&events));
    let (code, lines) = ingest_json(&db, &[&file]);
    assert_eq!(code, 0, "{lines:?}");

    // The migration gave every stored time three digits; new ones have them too.
    assert_eq!(
        query(
            &db,
            "SELECT file_name, ingested_at FROM ingest_inbox WHERE file_name <> 'order.json'
             ORDER BY ingested_at"
        ),
        [
            ["c.json", "2026-12-01T09:43:49.000Z"],
            ["a.json", "2026-12-01T09:43:49.150Z"],
            ["b.json", "2026-12-01T09:43:49.152Z"],
        ]
    );
    for (table, column) in [
        ("ingest_inbox", "ingested_at"),
        ("duty_event", "first_seen_at"),
        ("duty_event", "updated_at"),
    ] {
        let lengths = query(
            &db,
            &format!("SELECT DISTINCT length({column}) FROM {table}"),
        );
        assert_eq!(lengths, [["24"]], "{table}.{column}");
    }

    // Ordered by time through the expression the README gives, and its index.
    assert_eq!(
        query(
            &db,
            "SELECT instant_utc FROM duty_event WHERE event_kind = 'landing'
             ORDER BY rtrim(instant_utc, 'Z')"
        ),
        [["2026-11-29T10:05:00Z"], ["2026-11-29T10:05:00.5Z"]]
    );
    // A plain range of one kind is a search of the live rows' index.
    let plan = query(
        &db,
        "EXPLAIN QUERY PLAN SELECT * FROM duty_event
         WHERE event_kind = 'landing' AND instant_utc >= '2026-11-29T10'",
    );
    assert!(
        plan.iter()
            .any(|row| row[3].contains("SEARCH e USING INDEX spoolite_event_kind_instant")),
        "{plan:?}"
    );
    // flight_times takes the last landing by time, not by text.
    assert_eq!(
        query(
            &db,
            "SELECT landing_utc FROM flight_times WHERE flight_id = 'OR1'"
        ),
        [["2026-11-29T10:05:00.5Z"]]
    );

    // status's last ingest is the latest by time.
    let spool = dir.path().join("spool");
    for sub in ["incoming", "archive", "rejected"] {
        fs::create_dir_all(spool.join(sub)).expect("mkdir");
    }
    let output = spoolite()
        .args(["status", "--json", "--db"])
        .arg(&db)
        .arg("--spool")
        .arg(&spool)
        .output()
        .expect("run status");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let latest = query(
        &db,
        "SELECT ingested_at FROM ingest_inbox WHERE file_name = 'order.json'",
    );
    assert_eq!(status["last_ingest_at"], latest[0][0].as_str());
}

#[test]
fn an_upload_with_a_two_day_old_mtime_has_waited_only_since_the_daemon_saw_it() {
    let site = Site::new();
    let mut daemon = site.spawn(site.run_command().args(["--settle", "0ms"]));
    daemon.wait_serving(&site);
    // `cp f incoming/x.json.part; touch -d '2 days ago' incoming/x.json.part`
    let upload = write(&site.incoming(), "x.json.part", "{\"events\":[");
    let two_days_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 86_400);
    fs::File::options()
        .write(true)
        .open(&upload)
        .and_then(|f| f.set_modified(two_days_ago))
        .expect("age the upload");
    let seen = std::time::Instant::now();
    let state = site.spool.join(".spoolite").join("state.json");
    daemon.wait(
        std::time::Duration::from_secs(20),
        "the state file to show it",
        || fs::read_to_string(&state).is_ok_and(|t| t.contains("\"files_waiting\": 1")),
    );
    let output = site
        .status_command()
        .arg("--json")
        .output()
        .expect("status");
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let status: serde_json::Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(status["served_by"]["pid"], daemon.pid());
    assert_eq!(status["incoming_waiting"], 1);
    let age = status["oldest_waiting_age_s"].as_f64().expect("an age");
    assert!(
        age <= seen.elapsed().as_secs_f64() + 1.0,
        "waited {age} s by status, counted from the modification time"
    );
}
