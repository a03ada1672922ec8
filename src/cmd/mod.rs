//! The commands, a file each: what `spoolite COMMAND` does with its parsed
//! arguments, and the exit code it ends with. They stand on the library's
//! stages (`daemon`, `ingest`, `status`, `store`, `ftl`) and print; nothing
//! below imports them.

mod backup;
mod changes;
mod check;
mod copy_db;
mod ftl;
mod ingest;
mod key;
mod run;
mod status;

use std::process::ExitCode;

use crate::cli::{Command, Defaults};

/// Runs `command`, once `main` has set up the environment (`defaults` says what
/// the site defaults file gave) and logging.
pub fn run(mut command: Command, defaults: &Defaults) -> ExitCode {
    if let Err(message) = command.attach_password_file() {
        eprintln!("spoolite: {message}");
        return ExitCode::from(2);
    }
    match &command {
        Command::Run(args) => run::run(args, defaults),
        Command::Ingest(args) => ingest::ingest(args),
        Command::Status(args) => status::status(args, defaults),
        Command::Changes(args) => changes::run(args),
        Command::Ftl(args) => ftl::run(args),
        Command::Key(args) => key::key(args),
        Command::CopyDb(args) => copy_db::run(args),
        Command::Backup(args) => backup::run(args),
        Command::Check(args) => check::run(args),
    }
}
