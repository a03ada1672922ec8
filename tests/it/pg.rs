//! The PostgreSQL schema and backend, on the throwaway server of `support_pg`.

use crate::support_pg::PgDb;

/// The PostgreSQL schema as `schema/postgres/` holds it.
const SCHEMA_1: &str = include_str!("../../schema/postgres/0001_initial.sql");

#[test]
fn the_postgres_schema_has_the_contract_tables_and_column_types() {
    let db = PgDb::new();
    db.client().batch_execute(SCHEMA_1).expect("apply schema 1");
    let columns = |table: &str| {
        db.query(&format!(
            "SELECT column_name::text, data_type::text FROM information_schema.columns
             WHERE table_name = '{table}' ORDER BY ordinal_position"
        ))
        .into_iter()
        .map(|row| format!("{} {}", row[0], row[1]))
        .collect::<Vec<_>>()
    };
    assert_eq!(
        columns("duty_event_all"),
        [
            "idempotency_key text",
            "flight_id text",
            "event_kind text",
            "instant_utc text",
            "source_revision bigint",
            "payload text",
            "retracted boolean",
            "batch_digest text",
            "first_seen_at text",
            "updated_at text",
            "change_seq bigint",
        ]
    );
    let mut live = columns("duty_event_all");
    live.retain(|column| column != "retracted boolean");
    assert_eq!(columns("duty_event"), live);
    assert_eq!(
        columns("ingest_inbox"),
        [
            "batch_digest text",
            "batch_id text",
            "file_name text",
            "ingested_at text",
            "events_total bigint",
            "inserted bigint",
            "updated bigint",
            "unchanged bigint",
            "stale bigint",
            "conflicts bigint",
            "invalid bigint",
        ]
    );
    assert_eq!(
        columns("quarantine"),
        [
            "batch_digest text",
            "file_name text",
            "record_index bigint",
            "reason text",
            "detail text",
            "raw text",
            "quarantined_at text",
        ]
    );
    assert_eq!(
        columns("flight_times"),
        [
            "flight_id text",
            "off_blocks_utc text",
            "takeoff_utc text",
            "landing_utc text",
            "on_blocks_utc text",
            "block_minutes numeric",
            "airborne_minutes numeric",
        ]
    );
    assert_eq!(columns("batch_summary")[..11], columns("ingest_inbox")[..]);
    // A key or a digest that is not 64 lowercase hex characters is refused.
    let mut client = db.client();
    let bad = client.batch_execute(
        "INSERT INTO ingest_inbox VALUES (repeat('A', 64), NULL, 'f', 't', 0, 0, 0, 0, 0, 0, 0)",
    );
    assert!(bad.is_err(), "an uppercase digest is refused");
    client
        .batch_execute(&format!(
            "INSERT INTO ingest_inbox VALUES ('{0}', NULL, 'f', 't', 1, 1, 0, 0, 0, 0, 0);
             INSERT INTO duty_event_data VALUES ('{0}', 'F', 'landing', '2026-11-29T10:05:00Z',
                 1, '{{}}', false, '{0}', 't', 't', 1)",
            "ab".repeat(32)
        ))
        .expect("a row of hex keys");
    // Counts that do not add up are refused.
    let bad = client.batch_execute(&format!(
        "INSERT INTO ingest_inbox VALUES ('{}', NULL, 'f', 't', 2, 1, 0, 0, 0, 0, 0)",
        "cd".repeat(32)
    ));
    assert!(bad.is_err(), "events_total is the sum of the outcomes");
    // The key look-up through the view is a primary-key search.
    let plan = db.query(&format!(
        "EXPLAIN SELECT * FROM duty_event_all WHERE idempotency_key = '{}'",
        "ab".repeat(32)
    ));
    assert!(
        plan.iter()
            .any(|line| line[0].contains("duty_event_data_pkey")),
        "{plan:?}"
    );
}
