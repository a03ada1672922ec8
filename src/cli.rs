//! The command line: commands, options and their environment variables, and the
//! site defaults file that one-shot commands read. The doc comments here are the
//! `--help` text.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Args, CommandFactory, Parser, Subcommand};

use crate::store::Db;

/// spoolite: ingests flight duty event batches from a spool directory into SQLite
/// or PostgreSQL, exactly once, however often a file arrives.
#[derive(Debug, Parser)]
#[command(version, propagate_version = true, after_help = SETTINGS_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// How settings reach a command, shown below `spoolite --help`.
const SETTINGS_HELP: &str = "Every option also reads its SPOOLITE_* variable (--db: SPOOLITE_DB); \
boolean ones take 1/0, true/false, yes/no, on/off, and an empty variable is unset. \
status, ingest and changes take every SPOOLITE_* variable that neither the command \
line nor the environment sets from /etc/default/spoolite, the site defaults file of \
a packaged host (SPOOLITE_DEFAULTS_FILE names another); run does not.";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch SPOOL/incoming/ and ingest every complete batch file until SIGTERM or
    /// SIGINT. Creates the spool folders and the database (PostgreSQL: its schema)
    /// when missing.
    Run(RunArgs),
    /// Ingest the named files once, without moving them; one outcome line per file,
    /// with the seconds it took (and a progress bar on a terminal). Exits 0 when
    /// every file was processed or skipped as a duplicate, 1 when any was rejected,
    /// 2 on an operating error. Reads the site defaults file (see `spoolite --help`).
    Ingest(IngestArgs),
    /// Show whether a daemon serves the spool, batches, events, quarantined records,
    /// the last ingest and the files waiting in incoming/ and lying in rejected/.
    /// Creates nothing. Exits 0 when a daemon serves the spool, 1 when it serves it
    /// but reports a database fault, 3 when the site exists but no daemon serves
    /// it, 2 when the spool or the database does not exist or cannot be read (what
    /// could be read is printed all the same).
    Status(StatusArgs),
    /// Print the change feed: one JSON line per row of duty_event_all whose
    /// change_seq is greater than --since, in change_seq order, with every column
    /// of the view (payload as a JSON object, retracted as a boolean). A row changed
    /// twice shows only its latest state, under its latest change_seq. Only reads
    /// the database, so an account that may read it but not write its folder can
    /// run it. Exits 0 at the end of the feed, at --limit, on SIGTERM or SIGINT and
    /// when stdout is closed; 2 when the database does not exist, cannot be read
    /// or has an older schema (the daemon upgrades it). Reads the site defaults
    /// file (see `spoolite --help`).
    Changes(ChangesArgs),
    /// Print the canonical forms and the idempotency key of one event.
    Key(KeyArgs),
    /// Copy a SQLite database (a workstation's) into a PostgreSQL database: every
    /// batch of the inbox (so files ingested before are still skipped), every event
    /// with its retracted flag, change_seq and times, and quarantine, in one
    /// transaction, with the counts of every table compared on both sides before it
    /// commits. The source is only read, in one read transaction (a daemon may go on
    /// writing it); the target's schema is created or upgraded, and its change_seq
    /// goes on above the copied ones. Exits 0 when copied, 1 when the target is
    /// refused (it holds rows, or batches or keys the source holds too), 2 on any
    /// other error (nothing is committed).
    CopyDb(CopyDbArgs),
}

impl Command {
    /// `--db` and `--db-password-file` of a command that takes them.
    pub fn database(&self) -> Option<(&Db, Option<&Path>)> {
        let (db, password_file) = match self {
            Command::Run(args) => (&args.db.db, &args.db.password_file),
            Command::Ingest(args) => (&args.db.db, &args.db.password_file),
            Command::Status(args) => (&args.db, &args.password_file),
            Command::Changes(args) => (&args.db, &args.password_file),
            Command::CopyDb(args) => (&args.to, &args.password_file),
            Command::Key(_) => return None,
        };
        Some((db, password_file.db_password_file.as_deref()))
    }
}

#[derive(Debug, Args)]
pub struct DbArg {
    /// The SQLite database file (missing parent folders are created), or a
    /// PostgreSQL database as a libpq URI: postgres://… or postgresql://…, e.g.
    /// postgresql:///spoolite?host=/run/postgresql for a local socket folder, or
    /// postgresql://spoolite@db.example/spoolite?sslmode=verify-full&sslrootcert=/etc/spoolite/db-ca.pem
    /// (sslmode disable, prefer, require, verify-ca or verify-full).
    #[arg(
        long,
        env = "SPOOLITE_DB",
        default_value = "./spoolite.db",
        value_name = "FILE",
        value_parser = db_value_parser()
    )]
    pub db: Db,
    #[command(flatten)]
    pub(crate) password_file: DbPasswordFileArg,
}

#[derive(Debug, Args)]
pub(crate) struct DbPasswordFileArg {
    /// A file whose one line (the line end dropped) is the PostgreSQL password, when
    /// the URI holds none: e.g. a systemd credential (LoadCredential=). Read at
    /// every connection; the password is never logged or shown. Only with a
    /// PostgreSQL --db.
    #[arg(long, env = "SPOOLITE_DB_PASSWORD_FILE", value_name = "FILE")]
    pub(crate) db_password_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct SpoolArg {
    /// The spool directory holding incoming/, archive/ and rejected/.
    #[arg(
        long,
        env = "SPOOLITE_SPOOL",
        default_value = "./spool",
        value_name = "DIR"
    )]
    pub spool: PathBuf,
}

#[derive(Debug, Args)]
pub struct FileBytesMaxArg {
    /// Files larger than this many bytes are rejected as too_large.
    #[arg(long, env = "SPOOLITE_FILE_BYTES_MAX", default_value_t = crate::ingest::FILE_BYTES_MAX_DEFAULT, value_name = "BYTES")]
    pub file_bytes_max: u64,
}

#[derive(Debug, Args)]
pub struct EventBytesMaxArg {
    /// An event longer than this many bytes is quarantined as too_large, keeping its
    /// first BYTES as raw; no more of it is ever held in memory.
    #[arg(long, env = "SPOOLITE_EVENT_BYTES_MAX", default_value_t = crate::batch::EVENT_BYTES_MAX_DEFAULT, value_name = "BYTES")]
    pub(crate) event_bytes_max: usize,
}

impl EventBytesMaxArg {
    pub fn limits(&self) -> crate::batch::Limits {
        crate::batch::Limits {
            event_bytes_max: self.event_bytes_max,
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub spool: SpoolArg,
    #[command(flatten)]
    pub db: DbArg,
    /// How long a file's size and modification time must stay still before it is
    /// taken, counted from the last change spoolite observed (e.g. 300ms, 2s).
    #[arg(long, env = "SPOOLITE_SETTLE", default_value = "2s", value_parser = parse_duration, value_name = "DURATION")]
    pub settle: Duration,
    /// How long a file whose content is cut short (truncated JSON, empty) may stay
    /// unchanged before it is rejected instead of awaited.
    #[arg(long, env = "SPOOLITE_PARTIAL_TIMEOUT", default_value = "10m", value_parser = parse_duration, value_name = "DURATION")]
    pub partial_timeout: Duration,
    /// How often incoming/ is listed even when no file-system event arrives.
    #[arg(long, env = "SPOOLITE_RESCAN", default_value = "30s", value_parser = parse_duration, value_name = "DURATION")]
    pub rescan: Duration,
    #[command(flatten)]
    pub file_bytes_max: FileBytesMaxArg,
    #[command(flatten)]
    pub event_bytes_max: EventBytesMaxArg,
    /// Write Prometheus text-format metrics to this file (for node_exporter's
    /// textfile collector) after every file and every rescan.
    #[arg(long, env = "SPOOLITE_METRICS_FILE", value_name = "PATH")]
    pub metrics_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct IngestArgs {
    #[command(flatten)]
    pub(crate) db: DbArg,
    /// Print one JSON object per file instead of a line of text.
    #[arg(long, env = "SPOOLITE_JSON", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) json: bool,
    /// Validate and classify each file against the database, writing nothing.
    #[arg(long, env = "SPOOLITE_DRY_RUN", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) dry_run: bool,
    #[command(flatten)]
    pub(crate) file_bytes_max: FileBytesMaxArg,
    #[command(flatten)]
    pub(crate) event_bytes_max: EventBytesMaxArg,
    /// The batch files to ingest.
    #[arg(required = true, value_name = "FILE")]
    pub(crate) files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The spool directory holding incoming/, archive/ and rejected/; it must exist
    /// (`spoolite run` creates it). Without the option or its variable, the
    /// variable from the site defaults file (/etc/default/spoolite) applies.
    #[arg(
        long,
        env = "SPOOLITE_SPOOL",
        default_value = "./spool",
        value_name = "DIR"
    )]
    pub(crate) spool: PathBuf,
    /// The SQLite database file, or a PostgreSQL URI (postgres://…,
    /// postgresql://…); it must exist (`spoolite run` creates a SQLite file and a
    /// PostgreSQL schema) and is only read. Without the option or its variable, the variable from the site
    /// defaults file (/etc/default/spoolite) applies.
    #[arg(
        long,
        env = "SPOOLITE_DB",
        default_value = "./spoolite.db",
        value_name = "FILE",
        value_parser = db_value_parser()
    )]
    pub(crate) db: Db,
    #[command(flatten)]
    pub(crate) password_file: DbPasswordFileArg,
    /// Print one JSON object instead of text.
    #[arg(long, env = "SPOOLITE_JSON", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) json: bool,
}

#[derive(Debug, Args)]
pub struct ChangesArgs {
    /// The SQLite database file, or a PostgreSQL URI (postgres://…,
    /// postgresql://…); it must exist with the current schema (`spoolite run`
    /// creates and upgrades it) and is only read, so a role that may only read
    /// suffices. Without the option or its variable, the variable from the site
    /// defaults file (/etc/default/spoolite) applies.
    #[arg(
        long,
        env = "SPOOLITE_DB",
        default_value = "./spoolite.db",
        value_name = "FILE",
        value_parser = db_value_parser()
    )]
    pub(crate) db: Db,
    #[command(flatten)]
    pub(crate) password_file: DbPasswordFileArg,
    /// Print only the rows whose change_seq is greater than N: the last change_seq
    /// a downstream job has handled. 0 prints every row.
    #[arg(long, env = "SPOOLITE_SINCE", default_value_t = 0, value_parser = clap::value_parser!(i64).range(0..), value_name = "N")]
    pub(crate) since: i64,
    /// Stop after printing N lines (with --follow too, as soon as the N-th is
    /// printed).
    #[arg(long, env = "SPOOLITE_LIMIT", value_name = "N")]
    pub(crate) limit: Option<u64>,
    /// After the rows already committed, keep printing the rows of every batch
    /// committed later, within a moment of its commit (PostgreSQL: read every
    /// 200 ms), until SIGTERM, SIGINT or stdout is closed (each exits 0). Lines are
    /// flushed after each batch of rows.
    #[arg(long, env = "SPOOLITE_FOLLOW", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) follow: bool,
}

#[derive(Debug, Args)]
pub struct CopyDbArgs {
    /// The SQLite database file to copy, at the current schema (an older one is
    /// refused: `spoolite run` or `spoolite ingest` upgrades it).
    #[arg(long, env = "SPOOLITE_FROM", value_name = "FILE")]
    pub(crate) from: PathBuf,
    /// The PostgreSQL database to copy into, a libpq URI (postgres://… or
    /// postgresql://…, as --db takes it). It must hold no rows yet, unless
    /// --into-non-empty.
    #[arg(long, env = "SPOOLITE_TO", value_name = "URI", value_parser = db_value_parser())]
    pub(crate) to: Db,
    #[command(flatten)]
    pub(crate) password_file: DbPasswordFileArg,
    /// Copy into a database that already holds rows (another workstation's copy,
    /// a daemon's batches), adding the source's batches to them. A batch digest or
    /// an idempotency key both databases hold is refused and nothing is copied; the
    /// copied change_seq values are raised above the target's, keeping their order.
    #[arg(long, env = "SPOOLITE_INTO_NON_EMPTY", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) into_non_empty: bool,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The flight, e.g. BA0117-20261129.
    pub(crate) flight_id: String,
    /// The event kind, e.g. off_blocks.
    pub(crate) event_kind: String,
    /// The RFC 3339 instant with an offset, e.g. 2026-11-29T10:05:00Z.
    pub(crate) instant: String,
}

/// `--db` (and `copy-db --to`) read once into a `Db`: which backend is decided
/// here, at the edge, and never again.
fn db_value_parser() -> impl TypedValueParser<Value = Db> {
    clap::builder::OsStringValueParser::new().map(|text| Db::parse(&text))
}

/// The words a switch (`--json`, `--follow`, …) takes from its variable: those of
/// clap's `BoolishValueParser`, in any case, with an error that lists them.
fn parse_switch(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" | "y" | "t" => Ok(true),
        "0" | "false" | "no" | "off" | "n" | "f" => Ok(false),
        _ => Err(format!(
            "{text:?} is not a yes or a no: use 1, true, yes or on, or 0, false, no or off"
        )),
    }
}

/// Reads a duration with a unit: `300ms`, `2s`, `10m`, `1h`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 300ms, 2s, 10m or 1h"))?;
    let millis = match unit.trim() {
        "ms" => Some(value),
        "s" => value.checked_mul(1000),
        "m" | "min" => value.checked_mul(60_000),
        "h" => value.checked_mul(3_600_000),
        "" => return Err(format!("{text:?} needs a unit: ms, s, m or h")),
        other => {
            return Err(format!(
                "{other:?} is not a unit of time: use ms, s, m or h"
            ));
        }
    };
    millis
        .map(Duration::from_millis)
        .ok_or_else(|| format!("{text:?} is too long"))
}

/// The site defaults file of a packaged host: the package's conffile, which the
/// unit reads as its `EnvironmentFile=`.
pub(crate) const DEFAULTS_FILE: &str = "/etc/default/spoolite";

/// The variable that names another defaults file (tests, a second site).
pub(crate) const DEFAULTS_FILE_VARIABLE: &str = "SPOOLITE_DEFAULTS_FILE";

/// The commands that read the defaults file: one-shot commands an operator types on
/// a packaged host. `run` does not: its unit hands it its environment.
const COMMANDS_READING_DEFAULTS: [&str; 3] = ["status", "ingest", "changes"];

/// What the defaults file gave, for `status` to say where its settings came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Defaults {
    /// The file read, when one was.
    pub(crate) file: Option<PathBuf>,
    /// The variables it set (the environment set none of them).
    pub(crate) applied: Vec<String>,
    /// Why the file could not be read, when it exists but could not be.
    pub error: Option<String>,
}

/// What to change in the environment before clap reads it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct EnvironmentPlan {
    /// `SPOOLITE_*` variables set to the empty string: an empty value means unset.
    pub unset: Vec<String>,
    /// Variables to set from the defaults file.
    pub set: Vec<(String, String)>,
    pub defaults: Defaults,
}

/// Works out, from the command line and the environment, which empty `SPOOLITE_*`
/// variables to remove and which ones the defaults file fills in (for the commands
/// that read it). Reads the defaults file; changes nothing.
pub fn plan_environment(
    args: &[OsString],
    environment: &[(OsString, OsString)],
) -> EnvironmentPlan {
    let mut plan = EnvironmentPlan::default();
    let is_set = |name: &str| {
        environment
            .iter()
            .any(|(key, value)| key == name && !value.is_empty())
    };
    for (key, value) in environment {
        let key = key.to_string_lossy();
        if key.starts_with("SPOOLITE_") && value.is_empty() {
            plan.unset.push(key.into_owned());
        }
    }
    let command = args.get(1).map(|a| a.to_string_lossy());
    if !command.is_some_and(|c| COMMANDS_READING_DEFAULTS.contains(&c.as_ref())) {
        return plan;
    }
    let file = environment
        .iter()
        .find(|(key, value)| key == DEFAULTS_FILE_VARIABLE && !value.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULTS_FILE), |(_, v)| PathBuf::from(v));
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return plan,
        Err(e) => {
            plan.defaults.error = Some(format!("read defaults {}: {e}", file.display()));
            plan.defaults.file = Some(file);
            return plan;
        }
    };
    for (key, value) in parse_environment_file(&text) {
        let ours = key.starts_with("SPOOLITE_") && key != DEFAULTS_FILE_VARIABLE;
        if ours && !value.is_empty() && !is_set(&key) {
            plan.defaults.applied.push(key.clone());
            plan.set.push((key, value));
        }
    }
    plan.defaults.file = Some(file);
    plan
}

/// The `KEY=value` assignments of an environment file, read as systemd reads an
/// `EnvironmentFile=`: blank lines and lines starting with `#` or `;` are
/// comments, whitespace around the key and before the value is dropped, a value
/// wholly in single or double quotes loses them (`\` escapes inside double
/// quotes), and a line without `=` or with a bad key is ignored. A later
/// assignment of a key wins.
pub(crate) fn parse_environment_file(text: &str) -> Vec<(String, String)> {
    let mut assignments: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let valid_key = key
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid_key {
            continue;
        }
        let value = unquote(value.trim());
        assignments.retain(|(k, _)| k != key);
        assignments.push((key.to_owned(), value));
    }
    assignments
}

/// A value without its surrounding quotes, if it has a matching pair.
fn unquote(value: &str) -> String {
    let quoted = |q: char| value.len() >= 2 && value.starts_with(q) && value.ends_with(q);
    if quoted('\'') {
        return value[1..value.len() - 1].to_owned();
    }
    if quoted('"') {
        let mut out = String::new();
        let mut chars = value[1..value.len() - 1].chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => out.extend(chars.next()),
                c => out.push(c),
            }
        }
        return out;
    }
    value.to_owned()
}

/// Parses the command line, or prints why it cannot and exits: 2 for a usage
/// error, 0 for `--help` and `--version`. An invalid value that came from a
/// variable (of the environment or of the defaults file) is named with its
/// variable, since the command line the operator sees does not hold it.
pub fn parse_or_exit(args: &[OsString], defaults: &Defaults) -> Cli {
    match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(error) => match explain_environment_error(&error, args, defaults) {
            Some(text) => {
                eprint!("{text}");
                std::process::exit(2)
            }
            None => error.exit(),
        },
    }
}

/// The text of a parse error whose invalid value came from a variable rather than
/// the command line: clap's message with the variable's name after the option's.
/// `None` when the value was on the command line, or the error is of another kind.
pub(crate) fn explain_environment_error(
    error: &clap::Error,
    args: &[OsString],
    defaults: &Defaults,
) -> Option<String> {
    if !matches!(
        error.kind(),
        ErrorKind::InvalidValue | ErrorKind::ValueValidation
    ) {
        return None;
    }
    let Some(ContextValue::String(shown)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = shown.strip_prefix("--")?.split([' ', '=']).next()?;
    let on_command_line = args.iter().skip(1).any(|arg| {
        let arg = arg.to_string_lossy();
        arg.strip_prefix("--")
            .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
    });
    if on_command_line {
        return None;
    }
    let variable = env_name_of(long)?;
    let source = match (&defaults.file, defaults.applied.contains(&variable)) {
        (Some(file), true) => format!("from {variable} in {}", file.display()),
        _ => format!("from the environment variable {variable}"),
    };
    let text = error.render().to_string();
    let option = format!("'{shown}'");
    Some(text.replacen(&option, &format!("{option} ({source})"), 1))
}

/// The environment variable of the option `--long`, in whichever command has it.
fn env_name_of(long: &str) -> Option<String> {
    let command = Cli::command();
    command
        .get_subcommands()
        .flat_map(|sub| sub.get_arguments())
        .find(|arg| arg.get_long() == Some(long))
        .and_then(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5").unwrap_err().contains("needs a unit"));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("-5s").is_err());
    }

    fn os(items: &[&str]) -> Vec<OsString> {
        items.iter().map(OsString::from).collect()
    }

    fn env(items: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        items
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn environment_files_read_as_systemd_reads_them() {
        let text = "# comment\n; also a comment\n\nSPOOLITE_SPOOL=/var/spool/spoolite\n  \
                    SPOOLITE_DB = \"/var/lib/spoolite/my db.db\"\nSPOOLITE_SETTLE='5s'\n\
                    not an assignment\n1BAD=x\nSPOOLITE_JSON=\"a\\\"b\"\nSPOOLITE_SETTLE=3s\n";
        assert_eq!(
            parse_environment_file(text),
            [
                ("SPOOLITE_SPOOL", "/var/spool/spoolite"),
                ("SPOOLITE_DB", "/var/lib/spoolite/my db.db"),
                ("SPOOLITE_JSON", "a\"b"),
                ("SPOOLITE_SETTLE", "3s"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
    }

    #[test]
    fn switches_from_the_environment_take_yes_and_no_words_and_list_them() {
        for word in ["1", "true", "YES", "On", "y", "t"] {
            assert_eq!(parse_switch(word), Ok(true), "{word}");
        }
        for word in ["0", "False", "no", "OFF", "n", "f"] {
            assert_eq!(parse_switch(word), Ok(false), "{word}");
        }
        assert_eq!(
            parse_switch("maybe"),
            Err(
                "\"maybe\" is not a yes or a no: use 1, true, yes or on, or 0, false, no or off"
                    .to_owned()
            )
        );
    }

    #[test]
    fn the_defaults_file_fills_in_what_the_environment_leaves_unset() {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("spoolite");
        std::fs::write(
            &file,
            "SPOOLITE_SPOOL=/srv/spool\nSPOOLITE_DB=/srv/db\nSPOOLITE_JSON=yes\nRUST_LOG=debug\n",
        )
        .expect("write defaults");
        let file_text = file.to_string_lossy().into_owned();
        let environment = env(&[
            ("SPOOLITE_DEFAULTS_FILE", &file_text),
            ("SPOOLITE_DB", "/mine.db"),
            ("SPOOLITE_JSON", ""),
        ]);
        let plan = plan_environment(&os(&["spoolite", "status"]), &environment);
        assert_eq!(plan.unset, ["SPOOLITE_JSON"]);
        assert_eq!(
            plan.set,
            [("SPOOLITE_SPOOL", "/srv/spool"), ("SPOOLITE_JSON", "yes")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(plan.defaults.applied, ["SPOOLITE_SPOOL", "SPOOLITE_JSON"]);
        assert_eq!(plan.defaults.file.as_deref(), Some(file.as_path()));
        // `run` takes its environment from its unit; `key` needs no site.
        for command in ["run", "key"] {
            let plan = plan_environment(&os(&["spoolite", command]), &environment);
            assert!(
                plan.set.is_empty() && plan.defaults.file.is_none(),
                "{command}"
            );
            assert_eq!(plan.unset, ["SPOOLITE_JSON"]);
        }
        // `changes` reads the site's database like `status` does.
        let plan = plan_environment(&os(&["spoolite", "changes", "--follow"]), &environment);
        assert_eq!(plan.defaults.applied, ["SPOOLITE_SPOOL", "SPOOLITE_JSON"]);
        let missing = env(&[("SPOOLITE_DEFAULTS_FILE", "/nonexistent/spoolite")]);
        let plan = plan_environment(&os(&["spoolite", "ingest"]), &missing);
        assert_eq!(plan, EnvironmentPlan::default());
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
