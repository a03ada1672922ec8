//! The `spoolite` binary: applies the environment plan (empty `SPOOLITE_*`
//! variables unset, the site defaults file's settings set), parses the command
//! line, sets up logging and hands the command to `cmd`.

use std::ffi::OsString;
use std::process::ExitCode;

use spoolite::{cli, cmd, logging};

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
    logging::init();
    // What the defaults file holds that cannot be used is told before the command
    // line is parsed, which may stop at a bad value from it.
    if let Some(fatal) = &plan.defaults.fatal {
        eprintln!("spoolite: {fatal}");
        return ExitCode::from(2);
    }
    for warning in &plan.defaults.warnings {
        log::warn!("{warning}");
    }
    let cli = cli::parse_or_exit(&args, &plan.defaults);
    cmd::run(cli.command, &plan.defaults)
}
