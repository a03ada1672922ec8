//! The `spoolite` binary: parses the command line, sets up logging and signals,
//! runs the command and maps its result to an exit code.

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use spoolite::cli::{self, Command, RunArgs};
use spoolite::store::{self, Db};
use spoolite::{backup, changes, check, commands, copydb, daemon, ftl, logging};

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let environment: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let plan = cli::plan_environment(&args, &environment);
    for name in &plan.unset {
        // SAFETY: the first thing main does, before any thread is started.
        unsafe { std::env::remove_var(name) };
    }
    for (name, value) in &plan.set {
        // SAFETY: as above.
        unsafe { std::env::set_var(name, value) };
    }
    let cli = cli::parse_or_exit(&args, &plan.defaults);
    logging::init();
    if let Some(fatal) = &plan.defaults.fatal {
        eprintln!("spoolite: {fatal}");
        return ExitCode::from(2);
    }
    for warning in &plan.defaults.warnings {
        log::warn!("{warning}");
    }
    if let Err(message) = use_password_file(&cli.command) {
        eprintln!("spoolite: {message}");
        return ExitCode::from(2);
    }
    match &cli.command {
        Command::Run(args) => {
            say_defaults_applied(&plan.defaults);
            run(args)
        }
        Command::Ingest(args) => commands::ingest(args),
        Command::Status(args) => commands::status(args, &plan.defaults),
        Command::Changes(args) => changes::run(args),
        Command::Ftl(args) => ftl::command::run(args),
        Command::Key(args) => commands::key(args),
        Command::CopyDb(args) => copydb::run(args),
        Command::Backup(args) => backup::run(args),
        Command::Check(args) => check::run(args),
    }
}

/// Hands `--db-password-file` to the store, which reads it at every connection;
/// refuses it beside a SQLite `--db`, which has no password.
fn use_password_file(command: &Command) -> Result<(), String> {
    let Some((db, Some(password_file))) = command.database() else {
        return Ok(());
    };
    match db {
        Db::Postgres(_) => {
            store::postgres::use_password_file(password_file.to_owned());
            Ok(())
        }
        Db::Sqlite(path) => Err(format!(
            "--db-password-file {} (SPOOLITE_DB_PASSWORD_FILE) is for a PostgreSQL database, \
             but --db {} is a SQLite file, which has no password: leave the password file \
             out, or point --db at a postgresql:// URI",
            password_file.display(),
            path.display()
        )),
    }
}

/// Logs what the daemon took from the defaults file `SPOOLITE_DEFAULTS_FILE` named,
/// so that a site served from the current folder's defaults is never a surprise.
fn say_defaults_applied(defaults: &cli::Defaults) {
    let Some(file) = defaults.file() else {
        return;
    };
    if defaults.applied().is_empty() {
        log::warn!(
            "the defaults file {} sets none of run's settings that the environment leaves \
             unset: serving the command line's and the built-in defaults",
            file.display()
        );
    } else {
        log::info!(
            "settings {} from the defaults file {}",
            defaults.applied().join(", "),
            file.display()
        );
    }
}

fn run(args: &RunArgs) -> ExitCode {
    if args.settle.is_zero() {
        log::warn!(
            "--settle 0s: a file is taken the moment it is seen, so one that its sender \
             writes under its final name can be read before it is whole; give --settle \
             a few seconds (default 2s) unless every sender uploads under a temporary name"
        );
    }
    let config = daemon::Config {
        spool: args.spool.spool.clone(),
        db: args.db.db.clone(),
        settle: args.settle,
        partial_timeout: args.partial_timeout,
        rescan: args.rescan,
        file_bytes_max: args.file_bytes_max.file_bytes_max,
        limits: args.event_bytes_max.limits(),
        metrics_file: args.metrics_file.clone(),
        archive_keep: args.archive_keep,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let (doorbell, wake) = crossbeam_channel::bounded(1);
    if let Err(error) = watch_signals(stop.clone(), doorbell.clone()) {
        eprintln!("spoolite: install signal handlers: {error}");
        return ExitCode::from(2);
    }
    match daemon::run(config, stop, doorbell, wake) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            log::error!("{error}");
            ExitCode::from(2)
        }
    }
}

/// SIGTERM and SIGINT set `stop` and ring the doorbell, from a thread of their own.
fn watch_signals(
    stop: Arc<AtomicBool>,
    doorbell: crossbeam_channel::Sender<()>,
) -> std::io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            let name = signal_hook::low_level::signal_name(signal).unwrap_or("a signal");
            log::info!("{name}: finishing the current file, then stopping");
            stop.store(true, Ordering::SeqCst);
            // A wait on an analyst's lock gives up at once instead of after 5 s.
            spoolite::store::stop_waiting_for_locks();
            let _ = doorbell.try_send(());
        }
    });
    Ok(())
}
