//! PostgreSQL's side of `ftl`: the rows of `crew_flight` and `crew_duty` that can
//! overlap a span, in one read-only REPEATABLE READ transaction (one snapshot for
//! both views). A role with SELECT on the views suffices.

use postgres::fallible_iterator::FallibleIterator;
use postgres::types::ToSql;

use super::PgStore;
use crate::store::crew_hours::{CrewRow, CrewSpan};
use crate::store::{PgTarget, StoreError};

/// Operating crew's flights whose block time may overlap the span (`$1` the
/// span's start, `$2` its end).
const FLIGHTS_SQL: &str = "SELECT crew_id, role, off_blocks_utc, on_blocks_utc FROM crew_flight \
     WHERE role = 'operating' AND rtrim(off_blocks_utc, 'Z') < $2 \
     AND rtrim(on_blocks_utc, 'Z') > $1";

/// Duties that may overlap the span: begun before its end, and not ended before
/// its start (an open one, whenever it began).
const DUTIES_SQL: &str = "SELECT crew_id, duty_start_utc, duty_end_utc FROM crew_duty \
     WHERE rtrim(duty_start_utc, 'Z') < $2 \
     AND (duty_end_utc IS NULL OR rtrim(duty_end_utc, 'Z') > $1)";

/// Only the crew named in `$3`, an array of ids.
const NAMED: &str = " AND crew_id = ANY($3)";

/// A connection to a spoolite PostgreSQL database, for `ftl`.
pub struct PgCrewHours {
    store: PgStore,
}

impl PgCrewHours {
    pub fn open(target: &PgTarget) -> Result<PgCrewHours, StoreError> {
        Ok(PgCrewHours {
            store: PgStore::connect(target, false)?,
        })
    }

    pub fn schema_version(&mut self) -> Result<i64, StoreError> {
        self.store.schema_version()
    }

    pub fn has_views(&mut self) -> Result<bool, StoreError> {
        let row = self.store.client.query_one(
            "SELECT to_regclass('crew_flight') IS NOT NULL AND to_regclass('crew_duty') IS NOT NULL",
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
        let sql = |base: &str| match crew.is_empty() {
            true => base.to_owned(),
            false => format!("{base}{NAMED}"),
        };
        let crew = crew.to_vec();
        if !crew.is_empty() {
            params.push(&crew);
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
                off_blocks_utc: row.try_get(2)?,
                on_blocks_utc: row.try_get(3)?,
            });
        }
        drop(rows);
        let mut rows = tx.query_raw(&sql(DUTIES_SQL), params.iter().copied())?;
        while let Some(row) = rows.next()? {
            duties(CrewRow::Duty {
                crew_id: row.try_get(0)?,
                duty_start_utc: row.try_get(1)?,
                duty_end_utc: row.try_get(2)?,
            });
        }
        drop(rows);
        tx.commit()?;
        Ok(())
    }
}
