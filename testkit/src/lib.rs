//! spoolite-testkit: what spoolite's tests (`tests/it`) and its benchmark
//! (`bench/`, `spoolite-bench`) both need, written once:
//!
//! - [`pg`]: a throwaway PostgreSQL server made by `initdb` in a folder of its own,
//!   listening on a unix socket there and on no TCP address, run as the `postgres`
//!   OS user when the caller is root, stopped and removed at the end;
//! - [`process`]: a `spoolite run` process with its stderr in a log file, bounded
//!   waits for a state (a log line, the spool's lock naming it, its exit), SIGTERM
//!   with a bounded wait, its CPU time from /proc;
//! - [`generate`]: deterministic batch files of realistic flight duty events;
//! - [`Rng`]: the splitmix64 generator behind both the generated files and the
//!   tests' randomised runs.
//!
//! It knows spoolite only from the outside (its command line, its log lines, the
//! batch file formats): it does not depend on the `spoolite` library. Errors are
//! returned as sentences (`String`), for the bench to report and the tests to
//! panic with.

#![warn(clippy::unwrap_used)]

pub mod generate;
pub mod pg;
pub mod process;
mod rng;

pub use rng::Rng;

/// The counts of a processed file, in the order of its `--json` line and of the
/// inbox's columns (the contract's outcome counts).
pub const COUNT_FIELDS: [&str; 7] = [
    "events_total",
    "inserted",
    "updated",
    "unchanged",
    "stale",
    "conflicts",
    "invalid",
];
