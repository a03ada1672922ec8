//! `spoolite run`: the daemon, until SIGTERM or SIGINT.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::cli::{Defaults, RunArgs};
use crate::daemon;

/// Serves the spool: says what it took from a defaults file, installs the signal
/// handlers and runs the daemon's loop.
pub(super) fn run(args: &RunArgs, defaults: &Defaults) -> ExitCode {
    say_defaults_applied(defaults);
    serve(args)
}

/// Logs what the daemon took from the defaults file `SPOOLITE_DEFAULTS_FILE` named,
/// so that a site served from the current folder's defaults is never a surprise.
fn say_defaults_applied(defaults: &Defaults) {
    let Some(file) = &defaults.file else {
        return;
    };
    if defaults.applied.is_empty() {
        log::warn!(
            "the defaults file {} sets none of run's settings that the environment and \
             the command line leave unset: serving theirs and the built-in defaults",
            file.display()
        );
    } else {
        log::info!(
            "settings {} from the defaults file {}",
            defaults.applied.join(", "),
            file.display()
        );
    }
}

fn serve(args: &RunArgs) -> ExitCode {
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
            crate::store::stop_waiting_for_locks();
            let _ = doorbell.try_send(());
        }
    });
    Ok(())
}
