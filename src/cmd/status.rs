//! `spoolite status`: what `status::gather` found, as text or one JSON object.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::SystemTime;

use crate::cli::{Defaults, StatusArgs};
use crate::status;

/// `spoolite status`: prints what it could read (text or one JSON object), says on
/// stderr what it could not, and exits 0 (served), 1 (served, the database
/// failing), 3 (not served) or 2 (missing or
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
        // Wrapped only for a person at a terminal: a pipe gets each value whole.
        let columns = std::io::stdout().is_terminal().then_some(status::COLUMNS);
        print!("{}", status::render(&status, columns));
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
