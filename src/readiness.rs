//! When a file in incoming/ may be taken: the settle time, the wait for a file whose
//! content is still arriving, and the back-off after a fault. Pure: given what was
//! seen of a file and `now`, it says whether to take the file or how long to wait.
//! The daemon owns the clock and the I/O; this module owns the rules.

use std::time::{Duration, Instant};

/// The longest wait between two tries of a file or of the database.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// The first wait after a failed try.
pub(crate) const BACKOFF_FIRST: Duration = Duration::from_millis(250);

/// The site's timing rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rules {
    /// How long a file must stay unchanged, from the last change the daemon
    /// observed, before it is taken.
    pub(crate) settle: Duration,
    /// How long a file whose content is still arriving may stay unchanged before it
    /// is rejected instead of awaited.
    pub(crate) partial_timeout: Duration,
}

/// Why a file is not taken yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// It changed less than the settle time ago.
    Settling,
    /// Its content is a proper prefix of a batch: the rest may still come.
    StillArriving,
    /// A try failed; the next one waits.
    BackingOff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Readiness {
    Ready,
    Wait { why: Why, wake_in: Duration },
}

/// What the daemon remembers of one file in incoming/. `V` is the version seen
/// (size, modification time, inode…): any change to it counts as a change.
#[derive(Debug, Clone)]
pub(crate) struct Tracked<V> {
    version: V,
    /// When the daemon first saw the file (for its waiting age).
    pub(crate) first_seen: Instant,
    /// When the daemon last saw its version change.
    changed_at: Instant,
    /// Its content was found still arriving at this version.
    still_arriving: bool,
    pub(crate) retry: Backoff,
}

impl<V: PartialEq> Tracked<V> {
    pub(crate) fn new(version: V, now: Instant) -> Tracked<V> {
        Tracked {
            version,
            first_seen: now,
            changed_at: now,
            still_arriving: false,
            retry: Backoff::default(),
        }
    }

    /// A file a daemon before this one saw first at `first_seen` and last saw
    /// change at `changed_at` (as the state file told), now seen as `version`:
    /// when that is the version it saw, its settle time and partial timeout go on
    /// from then; otherwise the file changed meanwhile, now.
    pub(crate) fn remembered(
        version: V,
        seen: &V,
        first_seen: Instant,
        changed_at: Instant,
        now: Instant,
    ) -> Tracked<V> {
        let unchanged = version == *seen;
        Tracked {
            changed_at: if unchanged { changed_at } else { now },
            first_seen,
            ..Tracked::new(version, now)
        }
    }

    /// When the daemon last saw its version change.
    pub(crate) fn changed_at(&self) -> Instant {
        self.changed_at
    }

    /// Notes the version seen now; a change restarts the settle time and forgets
    /// that the content was found still arriving. Returns whether it changed.
    pub(crate) fn observe(&mut self, version: V, now: Instant) -> bool {
        if version == self.version {
            return false;
        }
        self.version = version;
        self.changed_at = now;
        self.still_arriving = false;
        true
    }

    pub(crate) fn version(&self) -> &V {
        &self.version
    }

    /// Whether the file may be taken now, and if not, for how long to wait.
    pub(crate) fn readiness(&self, rules: &Rules, now: Instant) -> Readiness {
        let still = now.saturating_duration_since(self.changed_at);
        let wait = |why, left: Duration| Readiness::Wait { why, wake_in: left };
        if let Some(left) = remaining(rules.settle, still) {
            return wait(Why::Settling, left);
        }
        if self.still_arriving
            && let Some(left) = remaining(rules.partial_timeout, still)
        {
            return wait(Why::StillArriving, left);
        }
        if let Some(left) = self.retry.waiting(now) {
            return wait(Why::BackingOff, left);
        }
        Readiness::Ready
    }

    /// The file's content was found still arriving. Returns true when it may wait
    /// for the rest (the partial timeout has not passed since its last change), false
    /// when it has waited long enough and is to be rejected.
    pub(crate) fn still_arriving(&mut self, rules: &Rules, now: Instant) -> bool {
        let still = now.saturating_duration_since(self.changed_at);
        if remaining(rules.partial_timeout, still).is_none() {
            return false;
        }
        self.still_arriving = true;
        true
    }

    #[cfg(test)]
    fn is_still_arriving(&self) -> bool {
        self.still_arriving
    }
}

impl Why {
    /// As the state file and `status --json` write it.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Why::Settling => "settling",
            Why::StillArriving => "still_arriving",
            Why::BackingOff => "backing_off",
        }
    }
}

/// `limit - elapsed`, when some of it is left.
fn remaining(limit: Duration, elapsed: Duration) -> Option<Duration> {
    limit.checked_sub(elapsed).filter(|left| !left.is_zero())
}

/// Bounded exponential back-off (250 ms doubling to 30 s) that counts its own
/// failures, and says when a failure should be logged: the first, then at most once
/// per 30 s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    logged_at: Option<Instant>,
    /// The last failure's text and how many failures in a row had that text.
    last_error: Option<String>,
    same_error: u32,
}

impl Backoff {
    /// The wait after the failures so far.
    pub(crate) fn delay(&self) -> Duration {
        let shift = self.failures.saturating_sub(1).min(16);
        BACKOFF_FIRST.saturating_mul(1 << shift).min(BACKOFF_MAX)
    }

    /// Records a failure; returns whether it should be logged now.
    pub(crate) fn fail(&mut self, now: Instant, error: &str) -> bool {
        self.failures += 1;
        if self.last_error.as_deref() == Some(error) {
            self.same_error += 1;
        } else {
            self.last_error = Some(error.to_owned());
            self.same_error = 1;
        }
        self.retry_at = Some(now + self.delay());
        let log = self
            .logged_at
            .is_none_or(|at| now.saturating_duration_since(at) >= BACKOFF_MAX);
        if log {
            self.logged_at = Some(now);
        }
        log
    }

    /// How long until the next try, when it must wait.
    pub(crate) fn waiting(&self, now: Instant) -> Option<Duration> {
        self.retry_at
            .and_then(|at| at.checked_duration_since(now))
            .filter(|d| !d.is_zero())
    }

    /// Failures since the last success.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// How many of the last failures in a row had the same error text.
    pub(crate) fn same_error(&self) -> u32 {
        self.same_error
    }

    /// Clears the back-off after a success; returns how many failures came before.
    pub(crate) fn recover(&mut self) -> u32 {
        std::mem::take(self).failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RULES: Rules = Rules {
        settle: Duration::from_secs(2),
        partial_timeout: Duration::from_secs(600),
    };

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn wait(why: Why, s: u64) -> Readiness {
        Readiness::Wait {
            why,
            wake_in: secs(s),
        }
    }

    #[test]
    fn a_file_is_taken_once_it_has_been_still_for_the_settle_time() {
        let t0 = Instant::now();
        let mut file = Tracked::new((10u64, 1u64), t0);
        assert_eq!(file.readiness(&RULES, t0), wait(Why::Settling, 2));
        assert_eq!(file.readiness(&RULES, t0 + secs(1)), wait(Why::Settling, 1));
        assert_eq!(file.readiness(&RULES, t0 + secs(2)), Readiness::Ready);
        // A change restarts the settle time from when it was seen.
        assert!(file.observe((20, 1), t0 + secs(5)));
        assert!(!file.observe((20, 1), t0 + secs(6)));
        assert_eq!(file.readiness(&RULES, t0 + secs(6)), wait(Why::Settling, 1));
        assert_eq!(file.readiness(&RULES, t0 + secs(7)), Readiness::Ready);
        // The first sight stays: the waiting age runs from it.
        assert_eq!(file.first_seen, t0);
    }

    #[test]
    fn a_file_still_arriving_waits_for_a_change_or_the_partial_timeout() {
        let t0 = Instant::now();
        let mut file = Tracked::new(1u8, t0);
        let taken = t0 + secs(2);
        assert!(file.still_arriving(&RULES, taken));
        assert_eq!(file.readiness(&RULES, taken), wait(Why::StillArriving, 598));
        assert_eq!(file.readiness(&RULES, t0 + secs(600)), Readiness::Ready);
        // Taken again at the timeout and still cut: it has waited long enough.
        assert!(!file.still_arriving(&RULES, t0 + secs(600)));
        // The rest arrives: the wait is forgotten, the settle time runs again.
        let mut file = Tracked::new(1u8, t0);
        assert!(file.still_arriving(&RULES, taken));
        assert!(file.observe(2, t0 + secs(10)));
        assert!(!file.is_still_arriving());
        assert_eq!(file.readiness(&RULES, t0 + secs(12)), Readiness::Ready);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_counts_its_own_failures_and_logs_once_per_interval() {
        let mut backoff = Backoff::default();
        let now = Instant::now();
        assert!(backoff.fail(now, "locked"));
        assert_eq!(backoff.delay(), Duration::from_millis(250));
        assert_eq!(backoff.waiting(now), Some(Duration::from_millis(250)));
        assert!(!backoff.fail(now, "locked"));
        assert_eq!(backoff.delay(), Duration::from_millis(500));
        assert_eq!(backoff.same_error(), 2);
        assert!(!backoff.fail(now, "disk full"));
        assert_eq!(backoff.same_error(), 1);
        for _ in 0..20 {
            backoff.fail(now, "disk full");
        }
        assert_eq!(backoff.delay(), BACKOFF_MAX);
        assert!(backoff.fail(now + BACKOFF_MAX, "disk full"));
        assert_eq!(backoff.failures(), 24);
        assert_eq!(backoff.recover(), 24);
        assert_eq!(backoff.waiting(now), None);
        assert_eq!(backoff.failures(), 0);
    }

    #[test]
    fn a_file_backing_off_waits_its_delay_after_settling() {
        let t0 = Instant::now();
        let mut file = Tracked::new(1u8, t0);
        file.retry.fail(t0 + secs(3), "permission denied");
        assert_eq!(
            file.readiness(&RULES, t0 + secs(3)),
            Readiness::Wait {
                why: Why::BackingOff,
                wake_in: Duration::from_millis(250)
            }
        );
        assert_eq!(
            file.readiness(&RULES, t0 + secs(3) + Duration::from_millis(250)),
            Readiness::Ready
        );
    }
}
