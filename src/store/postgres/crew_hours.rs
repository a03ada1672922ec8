//! PostgreSQL's side of `ftl`: the rows of `crew_flight`, `crew_duty` and
//! `crew_fdp` that can overlap a span, in one read-only REPEATABLE READ transaction (one snapshot for
//! both views). A role with SELECT on the views suffices.

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;

use super::PgStore;
use crate::store::common::{CrewRow, CrewSpan, EventRef, ExplainRow, ExplainRows};
use crate::store::db::PgTarget;
use crate::store::error::StoreError;

/// Operating crew's flights whose block time may overlap the span (`$1` the
/// span's start, `$2` its end), and those without block time begun in it, from
/// the crew flight rows behind `crew_flight` in one pass.
const FLIGHTS_SQL: &str = "SELECT crew_id, role, function, off_blocks_utc, on_blocks_utc, \
     block_minutes IS NOT NULL FROM spoolite_crew_flight \
     WHERE role = 'operating' AND rtrim(off_blocks_utc, 'Z') < $2 \
     AND (rtrim(on_blocks_utc, 'Z') > $1 \
          OR (block_minutes IS NULL AND rtrim(off_blocks_utc, 'Z') > $1))";

/// Duties that may overlap the span: begun before its end, and not ended before
/// its start (an open one, whenever it began).
const DUTIES_SQL: &str = "SELECT crew_id, function, duty_type, duty_start_utc, duty_end_utc \
     FROM crew_duty WHERE rtrim(duty_start_utc, 'Z') < $2 \
     AND (duty_end_utc IS NULL OR rtrim(duty_end_utc, 'Z') > $1)";

/// Flight duty periods that may overlap the span, as `DUTIES_SQL`.
const FDPS_SQL: &str = "SELECT crew_id, function, fdp_start_utc, fdp_end_utc FROM crew_fdp \
     WHERE rtrim(fdp_start_utc, 'Z') < $2 \
     AND (fdp_end_utc IS NULL OR rtrim(fdp_end_utc, 'Z') > $1)";

/// Only the crew named in `$3`, an array of ids.
const NAMED: &str = " AND crew_id = ANY($3)";

/// One crew member's rows for `ftl explain` (`$3` the crew id), as `ftl`'s reads
/// bound them: flights with block time (every role), duties, periods.
/// The flights have no upper bound: a period's last flight may come after T.
const EXPLAIN_FLIGHTS_SQL: &str = "SELECT flight_id, role, function, '', off_blocks_utc, \
     on_blocks_utc FROM crew_flight WHERE crew_id = $3 AND rtrim(on_blocks_utc, 'Z') > $1 \
     AND $2::text IS NOT NULL";
const EXPLAIN_DUTIES_SQL: &str = "SELECT duty_id, role, function, duty_type, duty_start_utc, \
     duty_end_utc FROM crew_duty WHERE crew_id = $3 AND rtrim(duty_start_utc, 'Z') < $2 \
     AND (duty_end_utc IS NULL OR rtrim(duty_end_utc, 'Z') > $1)";
const EXPLAIN_FDPS_SQL: &str = "SELECT duty_id, '', function, '', fdp_start_utc, fdp_end_utc \
     FROM crew_fdp WHERE crew_id = $3 AND rtrim(fdp_start_utc, 'Z') < $2 \
     AND (fdp_end_utc IS NULL OR rtrim(fdp_end_utc, 'Z') > $1)";

/// A live event by its flight, kind and instant, with its batch's file name.
const EVENT_SQL: &str = "SELECT d.idempotency_key, d.event_kind, d.instant_utc, \
     d.source_revision, d.batch_digest, i.file_name \
     FROM duty_event AS d JOIN ingest_inbox AS i ON i.batch_digest = d.batch_digest \
     WHERE d.flight_id = $1 AND d.event_kind = $2 AND d.instant_utc = $3";

/// A connection to a spoolite PostgreSQL database, for `ftl`.
pub struct PgCrewHours {
    store: PgStore,
}

impl PgCrewHours {
    pub fn open(target: &PgTarget) -> Result<PgCrewHours, StoreError> {
        Ok(PgCrewHours {
            store: PgStore::connect_reader(target)?,
        })
    }

    pub fn schema_version(&mut self) -> Result<i64, StoreError> {
        self.store.schema_version()
    }

    pub fn has_views(&mut self) -> Result<bool, StoreError> {
        let row = self.store.client.query_one(
            "SELECT to_regclass('crew_flight') IS NOT NULL AND to_regclass('crew_duty') IS NOT NULL
                 AND to_regclass('crew_fdp') IS NOT NULL",
            &[],
        )?;
        Ok(row.get(0))
    }

    pub fn read(
        &mut self,
        span: &CrewSpan,
        crew: &[String],
        mut flights: impl FnMut(CrewRow<'_>),
        mut duties: impl FnMut(CrewRow<'_>),
    ) -> Result<(), StoreError> {
        let mut params: Vec<&(dyn ToSql + Sync)> = vec![&span.after, &span.before];
        let mut duty_params: Vec<&(dyn ToSql + Sync)> = vec![&span.duties_after, &span.before];
        let sql = |base: &str| match crew.is_empty() {
            true => base.to_owned(),
            false => format!("{base}{NAMED}"),
        };
        let crew = crew.to_vec();
        if !crew.is_empty() {
            params.push(&crew);
            duty_params.push(&crew);
        }
        let mut tx = self
            .store
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()?;
        let mut rows = tx.query_raw(&sql(FLIGHTS_SQL), params.iter().copied())?;
        while let Some(row) = rows.next()? {
            flights(CrewRow::Flight {
                crew_id: row.try_get(0)?,
                role: row.try_get(1)?,
                function: row.try_get(2)?,
                off_blocks_utc: row.try_get(3)?,
                on_blocks_utc: row.try_get(4)?,
                block_time: row.try_get(5)?,
            });
        }
        drop(rows);
        let mut rows = tx.query_raw(&sql(DUTIES_SQL), duty_params.iter().copied())?;
        while let Some(row) = rows.next()? {
            duties(CrewRow::Duty {
                crew_id: row.try_get(0)?,
                function: row.try_get(1)?,
                duty_type: row.try_get(2)?,
                duty_start_utc: row.try_get(3)?,
                duty_end_utc: row.try_get(4)?,
            });
        }
        drop(rows);
        if span.fdps {
            let mut rows = tx.query_raw(&sql(FDPS_SQL), duty_params.iter().copied())?;
            while let Some(row) = rows.next()? {
                duties(CrewRow::Fdp {
                    crew_id: row.try_get(0)?,
                    function: row.try_get(1)?,
                    fdp_start_utc: row.try_get(2)?,
                    fdp_end_utc: row.try_get(3)?,
                });
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// One crew member's rows for `ftl explain`, in one read-only REPEATABLE READ
    /// transaction.
    pub fn explain_rows(
        &mut self,
        span: &CrewSpan,
        crew_id: &str,
    ) -> Result<ExplainRows, StoreError> {
        let mut tx = self
            .store
            .client
            .build_transaction()
            .isolation_level(postgres::IsolationLevel::RepeatableRead)
            .read_only(true)
            .start()?;
        let mut read = |sql: &str| -> Result<Vec<ExplainRow>, StoreError> {
            let rows = tx.query(sql, &[&span.after, &span.before, &crew_id])?;
            rows.iter().map(ExplainRow::read).collect()
        };
        let rows = ExplainRows {
            flights: read(EXPLAIN_FLIGHTS_SQL)?,
            duties: read(EXPLAIN_DUTIES_SQL)?,
            fdps: read(EXPLAIN_FDPS_SQL)?,
        };
        tx.commit()?;
        Ok(rows)
    }

    pub fn case_twins(&mut self, crew_id: &str) -> Result<Vec<String>, StoreError> {
        let rows = self.store.client.query(
            "SELECT crew_id FROM spoolite_crew_duty WHERE lower(crew_id) = lower($1)
             UNION SELECT crew_id FROM spoolite_crew_flight WHERE lower(crew_id) = lower($1)
             ORDER BY 1 LIMIT 5",
            &[&crew_id],
        )?;
        Ok(rows.iter().map(|row| row.get(0)).collect())
    }

    pub fn event(
        &mut self,
        flight_id: &str,
        event_kind: &str,
        instant_utc: &str,
    ) -> Result<Option<EventRef>, StoreError> {
        let rows = self
            .store
            .client
            .query(EVENT_SQL, &[&flight_id, &event_kind, &instant_utc])?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        EventRef::read(row).map(Some)
    }
}
