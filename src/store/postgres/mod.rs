//! The PostgreSQL backend: a database many spoolite writers share
//! (`--db postgres://…` or `postgresql://…`, libpq's URI form, `host=` a socket
//! folder included). Connecting applies the numbered migrations in
//! `schema/postgres/` under an advisory lock and records them in `spoolite_schema`;
//! `batch` is one file's transaction, deciding outcomes through the same
//! `store::fold` as SQLite.

mod batch;
pub(crate) mod changes;
pub(crate) mod check;
mod connect;
pub(crate) mod copy_text;
pub(crate) mod crew;
pub mod crew_hours;

use std::path::PathBuf;

use postgres::Client;

pub(crate) use batch::Batch;
/// One row of COPY's text format (the benchmark's floor writes the same rows).
pub use copy_text::row as copy_row;

use crate::store::common::Totals;
use crate::store::db::PgTarget;
use crate::store::error::StoreError;

/// The migrations, in order; `spoolite_schema` holds one row per version applied.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../schema/postgres/0001_initial.sql"),
    include_str!("../../../schema/postgres/0002_flight_id_case.sql"),
    include_str!("../../../schema/postgres/0003_crew.sql"),
    include_str!("../../../schema/postgres/0004_analyst_speed.sql"),
    include_str!("../../../schema/postgres/0005_crew_model.sql"),
    include_str!("../../../schema/postgres/0006_change_notify.sql"),
    include_str!("../../../schema/postgres/0007_slots.sql"),
    include_str!("../../../schema/postgres/0008_writers_side_by_side.sql"),
];

/// The schema version after whose SQL the crew rows of the events already stored
/// are built by the code each batch runs (`crew::keep`), in the migrations'
/// transaction. Schema 5 creates the crew tables as that code writes them (the
/// crew model of schema 11 on SQLite) and leaves them empty, so the rows are
/// built at 5; schema 4 gave the events the names that code reads. A later
/// migration that changes what that code reads or writes moves this to itself.
const CREW_VERSION: i64 = 5;

/// The schema version this spoolite writes: every migration applied.
pub(crate) const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The advisory lock the migrations are applied under (any constant works; this
/// one is "spoolite" in ASCII), so that writers starting together apply each once.
const MIGRATION_LOCK: i64 = 0x73_70_6f_6f_6c_69_74_65;

/// The next number the sequence of `change_seq` numbers gives, as it stands
/// (taking none): a scalar subquery. Batches number their rows from that
/// sequence (schema 8); `check` and `copy-db` hold it against the counter.
pub(crate) const SEQUENCE_NEXT: &str =
    "(SELECT CASE WHEN is_called THEN last_value + 1 ELSE last_value END
      FROM spoolite_change_seq_next)";

/// A connection to a spoolite PostgreSQL database.
pub struct PgStore {
    pub(in crate::store) client: Client,
    /// Cancels a batch's wait for a lock when the process stops.
    canceller: connect::Canceller,
    /// The URI without its password, to name the database in messages.
    name: String,
}

impl PgStore {
    /// Connects to write: the schema is created or brought up to date first.
    pub fn connect_writer(target: &PgTarget) -> Result<PgStore, StoreError> {
        let mut store = PgStore::connect(target)?;
        store.migrate()?;
        Ok(store)
    }

    /// Connects to read: nothing is created or upgraded (a role that may only
    /// read suffices), and a newer schema is refused.
    pub fn connect_reader(target: &PgTarget) -> Result<PgStore, StoreError> {
        let mut store = PgStore::connect(target)?;
        let found = store.schema_version()?;
        store.refuse_newer(found)?;
        Ok(store)
    }

    fn connect(target: &PgTarget) -> Result<PgStore, StoreError> {
        let (client, canceller) = connect::connect(target)?;
        Ok(PgStore {
            client,
            canceller,
            name: target.name(),
        })
    }

    fn path(&self) -> PathBuf {
        PathBuf::from(&self.name)
    }

    fn refuse_newer(&self, found: i64) -> Result<(), StoreError> {
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: self.path(),
                found,
                known: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// The newest version in `spoolite_schema` (0 before the first migration).
    pub fn schema_version(&mut self) -> Result<i64, StoreError> {
        schema_version(&mut self.client)
    }

    /// Applies the migrations the database lacks, in one transaction, under the
    /// migration lock.
    fn migrate(&mut self) -> Result<(), StoreError> {
        if self.schema_version()? == SCHEMA_VERSION {
            return Ok(());
        }
        let mut tx = self.client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
        let found = schema_version(&mut tx)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::NewerSchema {
                path: PathBuf::from(&self.name),
                found,
                known: SCHEMA_VERSION,
            });
        }
        for version in found + 1..=SCHEMA_VERSION {
            tx.batch_execute(MIGRATIONS[version as usize - 1])?;
            if version == CREW_VERSION {
                crew::keep(&mut tx, crew::Scope::All)?;
            }
            tx.execute(
                "INSERT INTO spoolite_schema (version) VALUES ($1)",
                &[&(version as i32)],
            )?;
        }
        tx.commit()?;
        log::info!(
            "database {}: schema version {SCHEMA_VERSION} (was {found})",
            self.name
        );
        Ok(())
    }

    /// Refuses a database whose schema is older than this spoolite's.
    pub fn require_current_schema(&mut self) -> Result<(), StoreError> {
        let found = self.schema_version()?;
        if found < SCHEMA_VERSION {
            return Err(StoreError::OlderSchema {
                path: self.path(),
                found,
                known: SCHEMA_VERSION,
            });
        }
        Ok(())
    }

    /// One round trip to the server on the open connection.
    pub fn probe(&mut self) -> Result<(), StoreError> {
        self.client.simple_query("SELECT 1")?;
        Ok(())
    }

    pub fn contains_batch(&mut self, digest: &str) -> Result<bool, StoreError> {
        Ok(self
            .client
            .query_opt(
                "SELECT 1 FROM ingest_inbox WHERE batch_digest = $1",
                &[&digest],
            )?
            .is_some())
    }

    pub fn flight_quality(&mut self) -> Result<crate::store::common::FlightQuality, StoreError> {
        let row = self.client.query_one(
            "SELECT count(*) FILTER (WHERE on_blocks_utc IS NULL
                        AND rtrim(off_blocks_utc, 'Z') < to_char(now() AT TIME ZONE 'UTC'
                            - interval '1 day', 'YYYY-MM-DD\"T\"HH24:MI:SS') COLLATE \"C\"),
                    count(*) FILTER (WHERE rtrim(on_blocks_utc, 'Z') < rtrim(off_blocks_utc, 'Z'))
             FROM spoolite_flight WHERE off_blocks_utc IS NOT NULL",
            &[],
        )?;
        let count = |at: usize| row.get::<_, i64>(at).max(0) as u64;
        Ok(crate::store::common::FlightQuality {
            flights_open: count(0),
            flights_negative_block: count(1),
        })
    }

    pub fn totals(&mut self) -> Result<Totals, StoreError> {
        if self.schema_version()? == 0 {
            return Ok(Totals::default());
        }
        let row = self.client.query_one(
            "SELECT (SELECT count(*) FROM ingest_inbox),
                    (SELECT count(*) FROM duty_event),
                    (SELECT count(*) FROM quarantine),
                    (SELECT max(ingested_at) FROM ingest_inbox),
                    (SELECT count(*) FROM duty_event_all WHERE retracted),
                    pg_database_size(current_database())",
            &[],
        )?;
        Ok(Totals {
            batches: row.get::<_, i64>(0) as u64,
            events: row.get::<_, i64>(1) as u64,
            quarantined: row.get::<_, i64>(2) as u64,
            last_ingest_at: row.get(3),
            retracted_events: row.get::<_, i64>(4) as u64,
            database_bytes: Some(row.get::<_, i64>(5).unsigned_abs()),
        })
    }

    /// Starts the transaction of one batch file (see `batch::begin`); `None` when
    /// the inbox already holds its digest.
    pub(crate) fn begin(
        &mut self,
        digest: &str,
        file_name: &str,
        now: &str,
    ) -> Result<Option<Batch<'_>>, StoreError> {
        batch::begin(
            &mut self.client,
            digest,
            Box::new(batch::Write::new(file_name, now, self.canceller.clone())),
        )
    }

    /// Whether the transaction `xid` committed (`batch::commit_status`).
    pub fn commit_status(
        &mut self,
        xid: &str,
    ) -> Result<crate::store::error::CommitStatus, StoreError> {
        batch::commit_status(&mut self.client, xid)
    }

    /// Once a batch that changed `changed` rows has committed: when it changed
    /// at least `ANALYZE_ROWS_MIN` rows and at least `ANALYZE_SHARE_MIN` of the
    /// rows the event table held by its statistics (`worth_analysing`), analyses
    /// the tables batches write (`ANALYZE_WRITTEN`), so that the files after a
    /// load are planned with them. Best effort: a lock it would wait for longer
    /// than `ANALYZE_LOCK_WAIT` (autovacuum's, say), or any other failure, is
    /// logged and left to autovacuum; the batch stands committed either way.
    pub fn after_commit(&mut self, changed: u64) {
        // A station's file asks the server nothing.
        if changed < ANALYZE_ROWS_MIN {
            return;
        }
        match analyse_if_worth(&mut self.client, changed) {
            Ok(true) => log::info!(
                "analysed the tables after a batch of {changed} changed rows: their \
                 statistics are the planner's for the files that follow"
            ),
            Ok(false) => {}
            Err(error) => log::warn!(
                "could not analyse the tables after a batch of {changed} changed rows \
                 ({error}); autovacuum will"
            ),
        }
    }

    /// A dry run: the same staging and fold, rolled back, writing nothing.
    pub fn begin_dry_run(&mut self, digest: &str) -> Result<Option<Batch<'_>>, StoreError> {
        batch::begin(&mut self.client, digest, Box::new(batch::DryRun))
    }
}

/// The newest version in `spoolite_schema`, 0 when the table does not exist.
fn schema_version(client: &mut impl postgres::GenericClient) -> Result<i64, StoreError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('spoolite_schema') IS NOT NULL", &[])?
        .get(0);
    if !exists {
        return Ok(0);
    }
    let version: Option<i32> = client
        .query_one("SELECT max(version) FROM spoolite_schema", &[])?
        .get(0);
    Ok(i64::from(version.unwrap_or(0)))
}

impl crate::store::rows::Columns for postgres::Row {
    fn column<T: crate::store::rows::ColumnValue>(&self, at: usize) -> Result<T, StoreError> {
        Ok(self.try_get(at)?)
    }
}

/// A batch that changed at least `ANALYZE_ROWS_MIN` rows, and at least
/// `ANALYZE_SHARE_MIN` of the rows the event table held by its statistics,
/// analyses the tables batches write once it has committed
/// (`PgStore::after_commit`). Their statistics are then stale, and autovacuum's
/// next look may be a minute away: meanwhile the planner read the crew tables of a
/// database just loaded with 1M events as if they were empty, and each station's
/// file after the load cost 7.7× what it cost into an empty database, against
/// 1.6× once analysed. A smaller batch leaves the statistics to autovacuum.
const ANALYZE_ROWS_MIN: u64 = 10_000;
const ANALYZE_SHARE_MIN: f64 = 0.1;
/// The longest the analysis waits for a table's lock (autovacuum's, a manual
/// `VACUUM`'s) before it gives up.
const ANALYZE_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);
/// The tables a batch writes but the inbox and quarantine (whose plans are
/// look-ups by key however many rows they hold).
const ANALYZE_WRITTEN: &str = "ANALYZE spoolite_event, spoolite_flight, spoolite_flight_id,
    spoolite_crew_flight, spoolite_crew_duty, spoolite_crew_fdp";

/// Analyses the tables batches write when a batch that changed `changed` rows
/// is `worth_analysing`; whether it did.
fn analyse_if_worth(client: &mut Client, changed: u64) -> Result<bool, postgres::Error> {
    let rows: f32 = client
        .query_one(
            "SELECT reltuples FROM pg_class WHERE oid = 'spoolite_event'::regclass",
            &[],
        )?
        .get(0);
    if !worth_analysing(changed, rows) {
        return Ok(false);
    }
    let mut tx = client.transaction()?;
    tx.batch_execute(&format!(
        "SET LOCAL lock_timeout = {}; {ANALYZE_WRITTEN}",
        ANALYZE_LOCK_WAIT.as_millis()
    ))?;
    tx.commit()?;
    Ok(true)
}

/// Whether a batch that changed `changed` rows analyses the tables, the event
/// table holding `rows` by its statistics: -1 for a table never analysed (nor
/// vacuumed) from PostgreSQL 14 on, 0 on PostgreSQL 13, where an empty table
/// reads the same.
fn worth_analysing(changed: u64, rows: f32) -> bool {
    changed >= ANALYZE_ROWS_MIN && changed as f64 >= ANALYZE_SHARE_MIN * f64::from(rows.max(0.0))
}

#[cfg(test)]
mod tests {
    use super::worth_analysing;

    #[test]
    fn a_batch_analyses_after_a_load_of_a_tenth_of_the_table_or_more() {
        // Never analysed: -1 from PostgreSQL 14 on, 0 on 13.
        assert!(worth_analysing(10_000, -1.0));
        assert!(worth_analysing(10_000, 0.0));
        // A tenth of the table, or more.
        assert!(worth_analysing(100_000, 1_000_000.0));
        assert!(worth_analysing(1_000_000, 1_000_000.0));
        // Less than a tenth: autovacuum's.
        assert!(!worth_analysing(99_999, 1_000_000.0));
        // Fewer than 10,000 rows, whatever the table.
        assert!(!worth_analysing(9_999, -1.0));
        assert!(!worth_analysing(9_999, 0.0));
    }
}
