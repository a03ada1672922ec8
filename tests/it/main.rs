//! The one integration-test binary: drives the real `spoolite` binary in temporary
//! folders and compares whole tables.

mod aidx;
mod analyst;
mod archive_keep;
mod backup;
mod changes;
mod check;
mod cli;
mod copydb;
mod crew;
mod csv;
mod daemon;
mod datasette;
mod docs;
mod faults;
mod flight_case;
mod fold;
mod ftl;
mod gzip;
mod hostile;
mod ingest;
mod names;
mod ops;
mod pg;
mod pg_conn;
mod pg_contract;
mod pg_faults;
mod pg_feed;
mod retractions;
mod silent;
mod slots;
mod support;
mod support_pg;
mod times;
mod workspace;
mod writer;
