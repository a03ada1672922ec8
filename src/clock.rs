//! Time as spoolite writes it, and the clock the daemon and `ingest` read it from.
//!
//! Every time spoolite writes itself (`ingested_at`, `first_seen_at`, `updated_at`,
//! `quarantined_at`, `rejected_at`, `last_ingest_at`, …) is UTC with exactly three
//! fraction digits, `2026-12-01T09:43:49.150Z`, so that as text they sort in time
//! order.

use std::time::{Instant, SystemTime};

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` for a time (milliseconds, truncated).
pub fn format_millis(time: SystemTime) -> String {
    let millis = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(since) => i64::try_from(since.as_millis()).unwrap_or(i64::MAX),
        Err(before) => -i64::try_from(before.duration().as_millis()).unwrap_or(i64::MAX),
    };
    let ts = jiff::Timestamp::from_millisecond(millis).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    let utc = jiff::tz::Offset::UTC.to_datetime(ts);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        utc.year(),
        utc.month(),
        utc.day(),
        utc.hour(),
        utc.minute(),
        utc.second(),
        utc.subsec_nanosecond() / 1_000_000
    )
}

/// The time `format_millis` wrote (any RFC 3339 instant is read); `None` when the
/// text is not one.
pub(crate) fn parse_millis(text: &str) -> Option<SystemTime> {
    let ts: jiff::Timestamp = text.parse().ok()?;
    let millis = ts.as_millisecond();
    let since = std::time::Duration::from_millis(millis.unsigned_abs());
    if millis >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(since)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(since)
    }
}

/// The current time as spoolite writes it, from the real clock: for the benchmark
/// and the tests, since the product reads the time from the `Clock` it is given.
pub fn now_utc() -> String {
    format_millis(SystemTime::now())
}

/// Where the daemon and `ingest` read the time, so that tests can drive them with
/// chosen instants instead of sleeping: a test clock moves both times together, by
/// hours if it likes, when the test says so.
pub trait Clock {
    /// Monotonic time, for settle, timeouts and back-off.
    fn now(&self) -> Instant;
    /// Wall-clock time, for what is written down.
    fn wall(&self) -> SystemTime;
}

/// A clock's two times read together, to turn an instant of the one into the
/// other's (a state file holds wall times; the daemon waits on monotonic ones).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reading {
    pub(crate) now: Instant,
    pub(crate) wall: SystemTime,
}

impl Reading {
    pub(crate) fn of(clock: &dyn Clock) -> Reading {
        Reading {
            now: clock.now(),
            wall: clock.wall(),
        }
    }

    /// The wall time of the monotonic instant `at`.
    pub(crate) fn wall_of(&self, at: Instant) -> SystemTime {
        match at.checked_duration_since(self.now) {
            Some(ahead) => self.wall + ahead,
            None => self.wall.checked_sub(self.now - at).unwrap_or(self.wall),
        }
    }

    /// The monotonic instant of the wall time `then` (`now` where the monotonic
    /// clock cannot go back that far).
    pub(crate) fn instant_of(&self, then: SystemTime) -> Instant {
        match then.duration_since(self.wall) {
            Ok(ahead) => self.now + ahead,
            Err(behind) => self.now.checked_sub(behind.duration()).unwrap_or(self.now),
        }
    }
}

/// The real clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> SystemTime {
        SystemTime::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn three_fraction_digits_always() {
        let at = |ms: u64| format_millis(SystemTime::UNIX_EPOCH + Duration::from_millis(ms));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_764_582_229_150), "2025-12-01T09:43:49.150Z");
        assert_eq!(at(1_764_582_229_152), "2025-12-01T09:43:49.152Z");
        assert!(at(1_764_582_229_150) < at(1_764_582_229_152));
        assert_eq!(now_utc().len(), "2026-12-01T09:43:49.150Z".len());
    }

    #[test]
    fn a_reading_turns_instants_into_wall_times_and_back() {
        let reading = Reading {
            now: Instant::now() + Duration::from_secs(100),
            wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
        };
        for offset in [-40_i64, 0, 25] {
            let shift = Duration::from_secs(offset.unsigned_abs());
            let (at, wall) = if offset < 0 {
                (reading.now - shift, reading.wall - shift)
            } else {
                (reading.now + shift, reading.wall + shift)
            };
            assert_eq!(reading.wall_of(at), wall, "{offset}");
            assert_eq!(reading.instant_of(wall), at, "{offset}");
        }
    }

    #[test]
    fn what_format_millis_writes_reads_back() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_764_582_229_150);
        assert_eq!(parse_millis(&format_millis(at)), Some(at));
        assert_eq!(parse_millis("not a time"), None);
    }
}
