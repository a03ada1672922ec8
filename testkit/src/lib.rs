//! spoolite-testkit: what spoolite's tests (`tests/it`) and its benchmark
//! (`bench/`, `spoolite-bench`) both need, written once:
//!
//! - [`pg`]: a throwaway PostgreSQL server made by `initdb` in a folder of its own,
//!   listening on a unix socket there and on no TCP address, run as the `postgres`
//!   OS user when the caller is root, stopped and removed at the end.
//!
//! It knows spoolite only from the outside: it does not depend on the `spoolite`
//! library. Errors are returned as sentences (`String`), for the bench to report
//! and the tests to panic with.

#![warn(clippy::unwrap_used)]

pub mod pg;
