//! The one-shot commands: `ingest`, `status` and `key`. Each returns its exit code.

use std::path::Path;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use crate::batch::Event;
use crate::cli::{Defaults, IngestArgs, KeyArgs, StatusArgs};
use crate::ingest::{self, Outcome};
use crate::report;
use crate::status;
use crate::store::Store;

/// Exit code when any file was rejected.
const EXIT_REJECTED: u8 = 1;
/// Exit code for an operating error (database, permissions, bad arguments).
const EXIT_ERROR: u8 = 2;

pub fn ingest(args: &IngestArgs) -> ExitCode {
    // A dry run opens the database read-only (or compares against an empty one in
    // memory when it does not exist yet): it creates, upgrades and locks nothing.
    let opened = match (args.dry_run, args.db.db.exists()) {
        (false, _) => Store::open(&args.db.db),
        (true, true) => Store::open_read_only(&args.db.db).and_then(|store| {
            store.require_current_schema(&args.db.db)?;
            Ok(store)
        }),
        (true, false) => Store::open_empty_in_memory(),
    };
    let mut store = match opened {
        Ok(store) => store,
        Err(error) => {
            eprintln!("spoolite: {error}");
            return ExitCode::from(EXIT_ERROR);
        }
    };
    let stop = AtomicBool::new(false);
    let options = ingest::Options {
        file_bytes_max: args.file_bytes_max.file_bytes_max,
        limits: args.event_bytes_max.limits(),
        progress: None,
        dry_run: args.dry_run,
        stop: &stop,
    };
    let mut code = 0;
    for path in &args.files {
        let file = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        match ingest_waiting_out_locks(&mut store, path, options) {
            Ok(outcome) => {
                if matches!(outcome, Outcome::Rejected { .. }) {
                    code = code.max(EXIT_REJECTED);
                }
                if args.json {
                    let mut line = report::outcome_json(&file, &outcome);
                    if args.dry_run {
                        line["dry_run"] = json!(true);
                    }
                    println!("{line}");
                } else {
                    let dry = if args.dry_run {
                        " (dry run: nothing written)"
                    } else {
                        ""
                    };
                    println!("{}{dry}", report::outcome_line(&file, &outcome));
                }
                if let Outcome::Processed {
                    resent_batch_id: Some(id),
                    ..
                } = &outcome
                {
                    log::warn!(
                        "{file}: batch_id {id:?} was ingested before with other bytes (a re-sent batch)"
                    );
                }
            }
            Err(error) => {
                eprintln!("spoolite: {}: {error}", path.display());
                code = EXIT_ERROR;
            }
        }
    }
    ExitCode::from(code)
}

/// How long `ingest` keeps trying a file while the database is locked (by the
/// daemon ingesting a large batch, or an analyst): a backfill script should wait
/// for a lock, not fail on it.
const LOCKED_WAIT_MAX: Duration = Duration::from_secs(120);

/// Ingests one file, trying again with back-off while the database is locked.
fn ingest_waiting_out_locks(
    store: &mut Store,
    path: &Path,
    options: ingest::Options,
) -> Result<Outcome, ingest::IngestError> {
    let started = Instant::now();
    let mut delay = Duration::from_millis(250);
    loop {
        match ingest::ingest_file(store, path, options) {
            Err(ingest::IngestError::Store(error))
                if error.is_busy() && started.elapsed() < LOCKED_WAIT_MAX =>
            {
                log::warn!("{}: {error}; trying again in {delay:?}", path.display());
                std::thread::sleep(delay);
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            result => return result,
        }
    }
}

/// `spoolite status`: prints what it could read (text or one JSON object), says on
/// stderr what it could not, and exits 0 (served), 3 (not served) or 2 (missing or
/// unreadable).
pub fn status(args: &StatusArgs, defaults: &Defaults) -> ExitCode {
    let mut status = status::gather(&args.spool, &args.db, SystemTime::now());
    if let (Some(file), false) = (&defaults.file, defaults.applied.is_empty()) {
        status.settings_from = Some(status::SettingsFrom {
            file: file.display().to_string(),
            variables: defaults.applied.clone(),
        });
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&status).expect("status serialises")
        );
    } else {
        print!("{}", status::render(&status));
    }
    if !status.unreadable.is_empty() {
        eprintln!(
            "spoolite: read status: {}; {}",
            status.unreadable.join("; "),
            status::advice(&status)
        );
    }
    ExitCode::from(status.exit_code())
}

pub fn key(args: &KeyArgs) -> ExitCode {
    match Event::identity(&args.flight_id, &args.event_kind, &args.instant) {
        Ok(event) => {
            println!("flight_id        {}", event.flight_id());
            println!("event_kind       {}", event.event_kind());
            println!("instant_utc      {}", event.instant_utc());
            println!("idempotency_key  {}", event.key_hex());
            ExitCode::SUCCESS
        }
        Err(invalid) => {
            eprintln!("spoolite: {}: {}", invalid.reason.code(), invalid.detail);
            ExitCode::from(EXIT_REJECTED)
        }
    }
}
