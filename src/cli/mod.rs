//! The command line: commands, options and their environment variables, and the
//! site defaults file that one-shot commands read. The doc comments here are the
//! `--help` text.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::store::Db;

mod defaults;
mod envfile;

pub use defaults::{Defaults, EnvironmentPlan};

/// spoolite: ingests flight duty event batches from a spool directory into SQLite
/// or PostgreSQL, exactly once, however often a file arrives.
#[derive(Debug, Parser)]
#[command(version, propagate_version = true, max_term_width = HELP_WIDTH, after_help = SETTINGS_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// How settings reach a command, shown below `spoolite --help`.
const SETTINGS_HELP: &str = "Every option also reads its SPOOLITE_* variable (--db: SPOOLITE_DB); \
boolean ones take 1/0, true/false, yes/no, on/off, and an empty variable is unset. \
status, ingest, changes, ftl, backup and check take every SPOOLITE_* variable that neither the command \
line nor the environment sets from /etc/default/spoolite, the site defaults file of \
a packaged host (SPOOLITE_DEFAULTS_FILE names another, which must exist); run reads \
only the file SPOOLITE_DEFAULTS_FILE names (its unit hands it /etc/default/spoolite) and \
logs what it took from it. A line of that file which cannot be used, and a SPOOLITE_* name no option has, \
are reported with their line number.";

/// The widest a line of `--help` gets, however wide the terminal.
const HELP_WIDTH: usize = 100;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch SPOOL/incoming/ and ingest every complete batch file.
    ///
    /// Runs until SIGTERM or SIGINT. Creates the spool folders and the database
    /// (PostgreSQL: its schema) when missing.
    Run(RunArgs),
    /// Ingest the named files once, without moving them.
    ///
    /// One outcome line per file, with the seconds it took (and a progress bar on a
    /// terminal). Exits 0 when every file was processed or skipped as a duplicate, 1
    /// when any was rejected, 2 on an operating error. Reads the site defaults file
    /// (see `spoolite --help`).
    Ingest(IngestArgs),
    /// Show whether a daemon serves the spool, the counts and what waits.
    ///
    /// Shows whether a daemon serves the spool, batches, events, quarantined records,
    /// the last ingest and the files waiting in incoming/ and lying in rejected/.
    /// Creates nothing. Exits 0 when a daemon serves the spool, 1 when it serves it
    /// but reports a database fault, 3 when the site exists but no daemon serves
    /// it, 2 when the spool or the database does not exist or cannot be read (what
    /// could be read is printed all the same).
    Status(StatusArgs),
    /// Print the change feed: one JSON line per row changed after --since.
    ///
    /// One JSON line per row of duty_event_all whose change_seq is greater than
    /// --since, in change_seq order, with every column of the view (payload as a
    /// JSON object, retracted as a boolean). A row changed twice shows only its
    /// latest state, under its latest change_seq. Only reads the database, so an
    /// account that may read it but not write its folder can run it. Exits 0 at the
    /// end of the feed, at --limit, on SIGTERM or SIGINT and when stdout is closed;
    /// 2 when the database does not exist, cannot be read or has an older schema
    /// (the daemon upgrades it). Reads the site defaults file (see `spoolite
    /// --help`).
    Changes(ChangesArgs),
    /// Judge crew flight time, duty, FDP and rest against the limits.
    ///
    /// Measures each crew member's block time (operating crew), duty (either role,
    /// EASA weighing standby and reserve), flight duty periods (FAA) and the time
    /// since the last qualifying rest, from the views crew_flight, crew_duty and
    /// crew_fdp, inside every window of one rule set at the instant --at
    /// (overlapping spans count each instant once), and prints, per crew member
    /// and window, the time used, the limit, the headroom and EXCEEDED where the
    /// time used is more than the limit: a table, least headroom first, or one
    /// JSON line each with --json. Crew members with nothing in any window are left
    /// out. `ftl plan` judges a planned future, `ftl explain` traces a window's
    /// minutes. Only reads the database, so an account that may read it but not
    /// write its folder can run it. Exits 0 when no limit is exceeded, 1 when any
    /// is, 2 when the database does not exist, cannot be read or has an older
    /// schema (the daemon upgrades it). Reads the site defaults file (see
    /// `spoolite --help`).
    Ftl(FtlArgs),
    /// Print the canonical forms and the idempotency key of one event.
    Key(KeyArgs),
    /// Copy a SQLite database into a PostgreSQL database, in one transaction.
    ///
    /// Copies a SQLite database (a workstation's) into a PostgreSQL database: every
    /// batch of the inbox (so files ingested before are still skipped), every event
    /// with its retracted flag, change_seq and times, and quarantine, in one
    /// transaction, with the counts of every table compared on both sides before it
    /// commits. The source is only read, in one read transaction (a daemon may go on
    /// writing it); the target's schema is created or upgraded, and its change_seq
    /// goes on above the copied ones. Exits 0 when copied, 1 when the target is
    /// refused (it holds rows, or batches or keys the source holds too), 2 on any
    /// other error (nothing is committed).
    CopyDb(CopyDbArgs),
    /// Write a consistent copy of a SQLite database to a new file.
    ///
    /// The copy holds exactly the batches committed at one moment (the daemon goes
    /// on committing meanwhile) and passes integrity_check before it gets its name:
    /// it is written as .FILE.spoolite-backup-tmp beside FILE (what a killed backup
    /// left there is replaced), fsynced and renamed. The database is only read, so
    /// an account that may read it can run it. A progress bar on a terminal, one
    /// summary line at the end. Exits 0 when the copy is in place; 2 when FILE
    /// exists (left as it is), the database is PostgreSQL (pg_dump, pg_basebackup)
    /// or cannot be read, or the copy fails (nothing is left at FILE). Reads the
    /// site defaults file (see `spoolite --help`).
    Backup(BackupArgs),
    /// Check the database's integrity and every invariant of the contract.
    ///
    /// One line per check with its result and what it found: integrity (SQLite's
    /// integrity_check; on PostgreSQL the schema version, its tables and views and
    /// the change_seq counter), inbox_counts, quarantine_counts, events_have_batch,
    /// change_seq_distinct, slots (at most one live row per slot, its highest
    /// revision), flight_times, crew_flight, crew_duty and crew_fdp (each
    /// against what the live events give), and data_quality (informational: the
    /// crew members with flights or duties that can make a figure wrong; never
    /// fails). Only reads the database (an analyst's
    /// read-only account suffices), one read snapshot per check, while a daemon
    /// goes on writing. Exits 0 when every
    /// check holds, 1 when any fails, 2 when the database does not exist, cannot be
    /// read or has an older schema. Reads the site defaults file (see `spoolite
    /// --help`).
    Check(CheckArgs),
}

impl Command {
    /// Hands `--db-password-file` to the database it is for (`Db::Postgres`'s
    /// target, which reads it at every connection); refused beside a SQLite
    /// `--db`, which has no password.
    pub fn attach_password_file(&mut self) -> Result<(), String> {
        let (db, password_file) = match self {
            Command::Run(args) => (&mut args.db.db, &args.db.password_file),
            Command::Ingest(args) => (&mut args.db.db, &args.db.password_file),
            Command::Status(args) => (&mut args.db, &args.password_file),
            Command::Changes(args) => (&mut args.db, &args.password_file),
            Command::Ftl(args) => (&mut args.db, &args.password_file),
            Command::CopyDb(args) => (&mut args.to, &args.password_file),
            Command::Check(args) => (&mut args.db, &args.password_file),
            Command::Key(_) | Command::Backup(_) => return Ok(()),
        };
        if let Some(file) = &password_file.db_password_file {
            *db = db.clone().with_password_file(file)?;
        }
        Ok(())
    }
}

#[derive(Debug, Args)]
pub struct DbArg {
    /// The SQLite database file (missing parent folders are created), or a
    /// PostgreSQL database as a libpq URI: postgres://… or postgresql://…, e.g.
    /// postgresql:///spoolite?host=/run/postgresql for a local socket folder, or
    /// postgresql://spoolite@db.example/spoolite?sslmode=verify-full for a server
    /// (sslmode disable, prefer, require, verify-ca or verify-full; add
    /// &sslrootcert=/etc/spoolite/db-ca.pem for a CA of the site's own).
    #[arg(long, env = "SPOOLITE_DB", default_value = DB, value_name = "FILE", value_parser = db())]
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
    #[arg(
        long,
        global = true,
        env = "SPOOLITE_DB_PASSWORD_FILE",
        value_name = "FILE"
    )]
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
    /// Files larger than this many bytes (a gzip file: its content, decompressed) are
    /// rejected as too_large.
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
            settled: false,
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
    /// Delete files from archive/ once they have been there longer than this (e.g.
    /// 400d; units ms, s, m, h, d), counted from their move into archive/ (the
    /// change time the move sets, not the modification time an upload may keep),
    /// at start and at each --rescan, at most 1,000 deletions and 10,000 files
    /// looked at per pass, one log line per pass that deleted any. Their inbox rows
    /// stay, so a re-drop of a deleted file is still skipped as a duplicate; a file
    /// still watched for a late writer (--partial-timeout) stays until its watch
    /// ends; rejected/ is never emptied. Unset: archive/ keeps every file.
    #[arg(long, env = "SPOOLITE_ARCHIVE_KEEP", value_parser = parse_duration, value_name = "DURATION")]
    pub archive_keep: Option<Duration>,
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
    #[arg(long, env = "SPOOLITE_DB", default_value = DB, value_name = "FILE", value_parser = db())]
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
    #[arg(long, env = "SPOOLITE_DB", default_value = DB, value_name = "FILE", value_parser = db())]
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
    /// committed later, within a moment of its commit (told by the file system on
    /// SQLite, by a notification on PostgreSQL; an idle follower does not poll),
    /// until SIGTERM, SIGINT or stdout is closed (each exits 0, within a second).
    /// Lines are flushed after each batch of rows.
    #[arg(long, env = "SPOOLITE_FOLLOW", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) follow: bool,
}

#[derive(Debug, Args)]
pub struct FtlArgs {
    /// The SQLite database file, or a PostgreSQL URI (postgres://…,
    /// postgresql://…); it must exist with the current schema (`spoolite run`
    /// creates and upgrades it) and is only read, so a role that may only read
    /// suffices. Without the option or its variable, the variable from the site
    /// defaults file (/etc/default/spoolite) applies.
    #[arg(long, global = true, env = "SPOOLITE_DB", default_value = DB, value_name = "FILE", value_parser = db())]
    pub(crate) db: Db,
    #[command(flatten)]
    pub(crate) password_file: DbPasswordFileArg,
    /// The instant T the windows end at, an RFC 3339 instant with an offset (e.g.
    /// 2026-12-01T12:00:00Z), taken to the millisecond; default now. Nothing after
    /// T counts, and an open duty counts up to T.
    #[arg(long, global = true, env = "SPOOLITE_AT", value_name = "INSTANT", value_parser = parse_at)]
    pub(crate) at: Option<crate::ftl::Micros>,
    /// The rule set: easa (ORO.FTL.210: flight time 28 days 100 h, calendar year
    /// 900 h, 12 calendar months 1,000 h; duty 7/14/28 days 60/110/190 h, home
    /// standby at 25 % and reserve not at all; ORO.FTL.235(d): at most 168 h
    /// between recurrent extended recovery rests of 36 h with two local nights)
    /// or faa (14 CFR 117.23: flight time 672 hours 100 h, 365 calendar days
    /// 1,000 h; flight duty period 168/672 hours 60/190 h; 117.25(b): 30
    /// consecutive hours free at most 138 h ago).
    #[arg(
        long,
        global = true,
        env = "SPOOLITE_RULES",
        value_enum,
        default_value = "easa",
        value_name = "RULES"
    )]
    pub(crate) rules: crate::ftl::Rules,
    /// Where calendar days, months and years begin and what a local night is:
    /// an IANA time zone name (Europe/Madrid, America/Chicago) or UTC, read from
    /// the time zone database built into spoolite (the workstation's own is not
    /// used). Windows of consecutive hours or days do not depend on it.
    #[arg(
        long,
        global = true,
        env = "SPOOLITE_TIME_ZONE",
        default_value = "UTC",
        value_name = "ZONE",
        value_parser = parse_time_zone
    )]
    pub(crate) time_zone: crate::ftl::TimeBase,
    /// Judge only this crew member (repeat the option for more): every window is
    /// printed, with zeros for a crew id without rows (and a warning naming it).
    /// The variable names one. `explain` takes exactly one.
    #[arg(long, global = true, env = "SPOOLITE_CREW", value_name = "ID")]
    pub(crate) crew: Vec<String>,
    /// Print one JSON line per crew member and window (or per line of `explain`)
    /// instead of the table.
    #[arg(long, global = true, env = "SPOOLITE_JSON", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) json: bool,
    #[command(subcommand)]
    pub(crate) action: Option<FtlAction>,
}

/// What `spoolite ftl` does besides judging the stored past at T.
#[derive(Debug, Subcommand)]
pub enum FtlAction {
    /// Judge a planned future on top of the stored past: may these crew members
    /// fly this?
    ///
    /// FILE (`-`: standard input) holds NDJSON lines, each one planned item of one
    /// crew member: {"crew_id", "kind": "duty", "start", "end", "duty_type"} or
    /// {"crew_id", "kind": "flight", "off_blocks", "on_blocks"}, with optional
    /// "role" (operating, positioning) and "function" (flight_crew, cabin_crew).
    /// The stored past is cut at --at (default now); every item must start at or
    /// after it. For each crew member named and each window of the rule set, it
    /// prints the largest use at any instant from --at to the end of their last
    /// planned item (a rest window: at each planned duty's start under faa, its
    /// end under easa), the earliest instant it occurs, the limit and the
    /// headroom, least headroom first. Exits 0 when the plan exceeds nothing, 1
    /// when it exceeds anything, 2 on an operating error (a line that is not such
    /// an item is named, and nothing is judged). Only reads the database.
    Plan(FtlPlanArgs),
    /// Show where one crew member's window's minutes come from.
    ///
    /// The flights, duties or flight duty periods behind the window at --at, each
    /// with the events, revisions, batches and files that set its start and end.
    /// One line per item that puts minutes into the window, in start order; they
    /// add up to the window's used minutes in `spoolite ftl` (an instant covered
    /// twice is listed once, under the item of the highest weight, then the one
    /// that started first). A rest window shows the free span that ends the last
    /// qualifying rest. Exits 0, or 2 on an operating error.
    Explain(FtlExplainArgs),
}

#[derive(Debug, Args)]
pub struct FtlPlanArgs {
    /// The plan: an NDJSON file, or `-` for standard input.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
}

#[derive(Debug, Args)]
pub struct FtlExplainArgs {
    /// The window, as `ftl --json` names it (28d, calendar_year, 168h, …).
    #[arg(long, value_name = "WINDOW")]
    pub(crate) window: String,
    /// The measure (flight_time, duty, fdp, rest), needed where two measures of
    /// the rule set share the window's name (easa 28d, faa 672h).
    #[arg(long, value_name = "MEASURE")]
    pub(crate) measure: Option<String>,
}

/// `--time-zone`: an IANA name the built-in time zone database holds.
fn parse_time_zone(text: &str) -> Result<crate::ftl::TimeBase, String> {
    crate::ftl::TimeBase::named(text).map_err(|error| error.to_string())
}

/// `--at`: an RFC 3339 instant with an offset, to the millisecond.
fn parse_at(text: &str) -> Result<crate::ftl::Micros, String> {
    let at = crate::ftl::time::parse_instant(text.trim()).ok_or_else(|| {
        format!("{text:?} is not an RFC 3339 instant with an offset, like 2026-12-01T12:00:00Z")
    })?;
    // Truncated to the millisecond, the precision `at` is printed with, so the
    // output names exactly the T it was computed for.
    Ok(at.div_euclid(1000) * 1000)
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The SQLite database file, or a PostgreSQL URI (postgres://…,
    /// postgresql://…); it must exist with the current schema and is only read.
    /// Without the option or its variable, the variable from the site defaults
    /// file (/etc/default/spoolite) applies.
    #[arg(long, env = "SPOOLITE_DB", default_value = DB, value_name = "FILE", value_parser = db())]
    pub(crate) db: Db,
    #[command(flatten)]
    pub(crate) password_file: DbPasswordFileArg,
    /// Print one JSON object per check (check, ok, detail) instead of a line of
    /// text.
    #[arg(long, env = "SPOOLITE_JSON", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) json: bool,
    /// SQLite: check the integrity with PRAGMA quick_check (every page, row and
    /// b-tree, not each index entry against its row), which takes time linear in
    /// the database's size: at 10M rows about a tenth of integrity_check's time.
    /// PostgreSQL: no difference.
    #[arg(long, env = "SPOOLITE_QUICK", action = ArgAction::SetTrue, value_parser = parse_switch)]
    pub(crate) quick: bool,
    /// How many checks run at once, each on its own read-only connection (the
    /// longest first; the lines still come in their order). 2 takes both cores of
    /// a 2-core workstation for the length of the check; 1 leaves a running
    /// daemon all but one.
    #[arg(long, env = "SPOOLITE_JOBS", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64), value_name = "N")]
    pub(crate) jobs: u16,
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
    #[arg(long, env = "SPOOLITE_TO", value_name = "URI", value_parser = db())]
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
pub struct BackupArgs {
    /// The SQLite database file to copy; it must exist and is only read. Without
    /// the option or its variable, the variable from the site defaults file
    /// (/etc/default/spoolite) applies.
    #[arg(long, env = "SPOOLITE_DB", default_value = DB, value_name = "FILE", value_parser = db())]
    pub(crate) db: Db,
    /// The new file to write the copy to; a file of that name is never replaced.
    #[arg(long, env = "SPOOLITE_TO", value_name = "FILE")]
    pub(crate) to: PathBuf,
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

/// Works out, from the command line and the environment, which empty `SPOOLITE_*`
/// variables to remove and which ones the defaults file fills in (for the commands
/// that read it). Reads the defaults file; changes nothing.
pub fn plan_environment(
    args: &[OsString],
    environment: &[(OsString, OsString)],
) -> EnvironmentPlan {
    defaults::plan_environment(args, environment, &Cli::command())
}

/// Where `--db` points without the option or its variable.
const DB: &str = "./spoolite.db";

/// `--db` (and `copy-db --to`) read once into a `Db`: which backend is decided
/// here, at the edge, and never again.
fn db() -> impl TypedValueParser<Value = Db> {
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

pub use crate::units::parse_duration;

/// The command line's definition as `--help` shows it: each option's variable
/// reads `[env: SPOOLITE_SPOOL]` while unset and `[env: SPOOLITE_SPOOL=/srv/spool]`
/// once set (by the environment or the defaults file), never `SPOOLITE_SPOOL=`,
/// which reads as "set to nothing"; a PostgreSQL URI, which may hold a password,
/// is never shown.
pub fn command() -> clap::Command {
    Cli::command().mut_subcommands(|sub| sub.mut_args(show_env_value_when_set))
}

fn show_env_value_when_set(arg: clap::Arg) -> clap::Arg {
    let Some(variable) = arg.get_env() else {
        return arg;
    };
    let shown = std::env::var_os(variable)
        .is_some_and(|value| !value.is_empty() && matches!(Db::parse(&value), Db::Sqlite(_)));
    arg.hide_env_values(!shown)
}

/// Parses the command line, or prints why it cannot and exits: 2 for a usage
/// error, 0 for `--help` and `--version`. An invalid value that came from a
/// variable (of the environment or of the defaults file) is named with its
/// variable, since the command line the operator sees does not hold it.
pub fn parse_or_exit(args: &[OsString], defaults: &Defaults) -> Cli {
    let mut command = command();
    let parsed = command
        .try_get_matches_from_mut(args)
        .and_then(|matches| Cli::from_arg_matches(&matches))
        .map_err(|error| error.format(&mut command));
    match parsed {
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
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
