//! spoolite: ingests flight duty event batches from a spool directory into SQLite
//! or PostgreSQL, exactly once. See ARCHITECTURE.md for the map.
//!
//! Data flow: `watch` → `daemon` (one step per file) → `spool` (claim, archive,
//! reject) → `ingest` (digest, inbox check) → `batch` (parse, canonicalise) →
//! `store` (SQLite or PostgreSQL).

#![warn(clippy::unwrap_used)]

pub mod batch;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod crew;
pub mod daemon;
pub mod ftl;
pub mod ingest;
pub mod logging;
pub mod metrics;
pub mod names;
pub mod readiness;
pub mod report;
pub mod service;
pub(crate) mod sizes;
pub mod spool;
pub mod state;
pub mod status;
pub mod store;
pub mod units;
pub mod watch;
