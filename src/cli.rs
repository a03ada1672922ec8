//! The command line: commands, options and their environment variables, and the
//! site defaults file that one-shot commands read. The doc comments here are the
//! `--help` text.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgAction, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::store::Db;

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
    /// change_seq_distinct, flight_times, crew_flight, crew_duty and crew_fdp (each
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
    /// `--db` and `--db-password-file` of a command that takes them.
    pub fn database(&self) -> Option<(&Db, Option<&Path>)> {
        let (db, password_file) = match self {
            Command::Run(args) => (&args.db.db, &args.db.password_file),
            Command::Ingest(args) => (&args.db.db, &args.db.password_file),
            Command::Status(args) => (&args.db, &args.password_file),
            Command::Changes(args) => (&args.db, &args.password_file),
            Command::Ftl(args) => (&args.db, &args.password_file),
            Command::CopyDb(args) => (&args.to, &args.password_file),
            Command::Check(args) => (&args.db, &args.password_file),
            Command::Key(_) | Command::Backup(_) => return None,
        };
        Some((db, password_file.db_password_file.as_deref()))
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
pub struct FtlArgs {
    /// The SQLite database file, or a PostgreSQL URI (postgres://…,
    /// postgresql://…); it must exist with the current schema (`spoolite run`
    /// creates and upgrades it) and is only read, so a role that may only read
    /// suffices. Without the option or its variable, the variable from the site
    /// defaults file (/etc/default/spoolite) applies.
    #[arg(
        long,
        global = true,
        env = "SPOOLITE_DB",
        default_value = "./spoolite.db",
        value_name = "FILE",
        value_parser = db_value_parser()
    )]
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
pub struct BackupArgs {
    /// The SQLite database file to copy; it must exist and is only read. Without
    /// the option or its variable, the variable from the site defaults file
    /// (/etc/default/spoolite) applies.
    #[arg(
        long,
        env = "SPOOLITE_DB",
        default_value = "./spoolite.db",
        value_name = "FILE",
        value_parser = db_value_parser()
    )]
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

pub use crate::units::parse_duration;

/// The site defaults file of a packaged host: the package's conffile, which the
/// unit reads as its `EnvironmentFile=`.
pub(crate) const DEFAULTS_FILE: &str = "/etc/default/spoolite";

/// The variable that names another defaults file (tests, a second site).
pub(crate) const DEFAULTS_FILE_VARIABLE: &str = "SPOOLITE_DEFAULTS_FILE";

/// The commands that read the defaults file: one-shot commands an operator types on
/// a packaged host. `run` does not: its unit hands it its environment.
const COMMANDS_READING_DEFAULTS: [&str; 6] =
    ["status", "ingest", "changes", "ftl", "backup", "check"];

/// What the defaults file gave, for `status` to say where its settings came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Defaults {
    /// The file read, when one was.
    pub(crate) file: Option<PathBuf>,
    /// The variables it set: those of the command that the environment left unset.
    pub(crate) applied: Vec<String>,
    /// What to warn of on stderr: a default file that exists but cannot be read, and
    /// each line of the file that is not used (`FILE:LINE: why`).
    pub warnings: Vec<String>,
    /// Why the command must not run: `SPOOLITE_DEFAULTS_FILE` names a file that
    /// cannot be read (exit 2).
    pub fatal: Option<String>,
}

impl Defaults {
    /// The defaults file read, when one was.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The variables it set.
    pub fn applied(&self) -> &[String] {
        &self.applied
    }
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
    for (key, value) in environment {
        let key = key.to_string_lossy();
        if key.starts_with("SPOOLITE_") && value.is_empty() {
            plan.unset.push(key.into_owned());
        }
    }
    let named = environment
        .iter()
        .find(|(key, value)| key == DEFAULTS_FILE_VARIABLE && !value.is_empty())
        .map(|(_, value)| PathBuf::from(value));
    // `run` reads a defaults file only when one is named: its unit hands it
    // /etc/default/spoolite, and a daemon started by hand in a test folder must not
    // serve the packaged site's spool.
    let reads_defaults = |command: &str| {
        COMMANDS_READING_DEFAULTS.contains(&command) || (command == "run" && named.is_some())
    };
    let command = args.get(1).map(|a| a.to_string_lossy());
    let Some(command) = command.filter(|c| reads_defaults(c)) else {
        return plan;
    };
    let file = named
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULTS_FILE));
    let bytes = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) if named.is_some() => {
            plan.defaults.fatal = Some(format!(
                "read the defaults file {} (named by {DEFAULTS_FILE_VARIABLE}): {e}; \
                 name a file that exists, or unset {DEFAULTS_FILE_VARIABLE} to read {DEFAULTS_FILE}",
                file.display()
            ));
            return plan;
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return plan,
        Err(e) => {
            let warning = format!("read the defaults file {}: {e}", file.display());
            plan.defaults.warnings.push(warning);
            plan.defaults.file = Some(file);
            return plan;
        }
    };
    let is_set = |name: &str| {
        environment
            .iter()
            .any(|(key, value)| key == name && !value.is_empty())
    };
    let (values, warnings) = site_settings(&parse_environment_file(&bytes), &command);
    for warning in warnings {
        plan.defaults
            .warnings
            .push(format!("{}:{warning}", file.display()));
    }
    for (name, value) in values {
        if !value.is_empty() && !is_set(&name) {
            plan.defaults.applied.push(name.clone());
            plan.set.push((name, value));
        }
    }
    plan.defaults.file = Some(file);
    plan
}

/// The settings of `command` among a defaults file's entries (a later assignment of
/// a name wins), and what to warn of (`LINE: why`): each problem of the file, each
/// `SPOOLITE_*` name that no option of any command reads (a typo), and
/// `SPOOLITE_DEFAULTS_FILE`, which only the environment sets. Other names
/// (`RUST_LOG`) and the settings of other commands (the daemon's `SPOOLITE_SETTLE`)
/// are left to whoever reads them.
fn site_settings(entries: &[Entry], command: &str) -> (Vec<(String, String)>, Vec<String>) {
    let known = variables_of(None);
    let read = variables_of(Some(command));
    let mut values: Vec<(String, String)> = Vec::new();
    let mut warnings = Vec::new();
    for entry in entries {
        let (line, name, value) = match entry {
            Entry::Problem { line, why } => {
                warnings.push(format!("{line}: {why}"));
                continue;
            }
            Entry::Assignment { line, name, value } => (line, name, value),
        };
        if !name.starts_with("SPOOLITE_") {
            continue;
        }
        if name == DEFAULTS_FILE_VARIABLE {
            warnings.push(format!(
                "{line}: {name} names the defaults file, so only the environment sets it; ignored"
            ));
        } else if !known.contains(name) {
            warnings.push(format!(
                "{line}: {name} is no setting of spoolite (no option reads it: a typo?); ignored"
            ));
        } else if read.contains(name) {
            values.retain(|(known, _)| known != name);
            values.push((name.clone(), value.clone()));
        }
    }
    (values, warnings)
}

/// The variables of the options of the command `name`, or of every command.
fn variables_of(name: Option<&str>) -> Vec<String> {
    let command = Cli::command();
    command
        .get_subcommands()
        .filter(|sub| name.is_none_or(|name| sub.get_name() == name))
        .flat_map(|sub| sub.get_arguments())
        .filter_map(|arg| arg.get_env())
        .map(|env| env.to_string_lossy().into_owned())
        .collect()
}

/// One entry of an environment file, with the line (from 1) it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Entry {
    /// `NAME=value`, with the value as systemd reads it.
    Assignment {
        line: usize,
        name: String,
        value: String,
    },
    /// Text that systemd would not use (or would use by accident), and why.
    Problem { line: usize, why: String },
}

/// The entries of an environment file, read as systemd reads an `EnvironmentFile=`
/// (its `parse_env_file_internal` state machine, then its check of each name):
/// lines starting with `#` or `;` are comments; whitespace around the name and
/// before the value is dropped; an unquoted value keeps its inner whitespace and
/// quotes, loses its trailing whitespace, and takes `\` as an escape of the next
/// character (`\` at a line's end continues the value on the next line); a value in
/// single quotes is taken verbatim, one in double quotes with `\` escaping `"`,
/// `\`, `` ` ``, `$` and a line end, and either may span lines; quoted and unquoted
/// parts next to each other join. Where systemd drops a line without a word (no
/// `=`, a name such as `export SPOOLITE_DB`, text that is not UTF-8), this says so
/// in an `Entry::Problem`, as it does of a quote that is never closed (systemd
/// takes the rest of the file as the value).
pub(crate) fn parse_environment_file(bytes: &[u8]) -> Vec<Entry> {
    let mut parser = EnvironmentParser::default();
    for &byte in bytes {
        parser.feed(byte);
    }
    parser.finish()
}

/// Where `EnvironmentParser` is within an entry: systemd's states.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum EnvState {
    #[default]
    PreKey,
    Key,
    PreValue,
    Value,
    ValueEscape,
    SingleQuote,
    DoubleQuote,
    DoubleQuoteEscape,
    Comment,
    CommentEscape,
}

/// The environment file's reader, fed one byte at a time.
#[derive(Debug)]
struct EnvironmentParser {
    state: EnvState,
    /// The line of the byte being read.
    line: usize,
    /// The line the entry being read starts on.
    entry_line: usize,
    /// The line of the quote last opened.
    quote_line: usize,
    name: Vec<u8>,
    /// Where the name's trailing whitespace begins, if it has some.
    name_end: Option<usize>,
    value: Vec<u8>,
    /// Where an unquoted value's trailing whitespace begins, if it has some.
    value_end: Option<usize>,
    entries: Vec<Entry>,
}

impl Default for EnvironmentParser {
    fn default() -> Self {
        EnvironmentParser {
            state: EnvState::PreKey,
            line: 1,
            entry_line: 1,
            quote_line: 1,
            name: Vec::new(),
            name_end: None,
            value: Vec::new(),
            value_end: None,
            entries: Vec::new(),
        }
    }
}

/// systemd's `WHITESPACE` and `NEWLINE`.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_line_end(byte: u8) -> bool {
    matches!(byte, b'\n' | b'\r')
}

impl EnvironmentParser {
    fn feed(&mut self, byte: u8) {
        use EnvState::*;
        match self.state {
            PreKey if byte == b'#' || byte == b';' => self.state = Comment,
            PreKey if !is_space(byte) => {
                self.state = Key;
                self.entry_line = self.line;
                self.name_end = None;
                self.name.push(byte);
            }
            PreKey => {}
            Key if is_line_end(byte) => {
                self.state = PreKey;
                self.no_equals_sign();
            }
            Key if byte == b'=' => {
                self.state = PreValue;
                self.value_end = None;
            }
            Key => {
                track_trailing_space(&mut self.name_end, self.name.len(), byte);
                self.name.push(byte);
            }
            PreValue if is_line_end(byte) => {
                self.state = PreKey;
                self.push();
            }
            PreValue => self.pre_value(byte),
            Value if is_line_end(byte) => {
                self.state = PreKey;
                self.chomp_value();
                self.push();
            }
            Value if byte == b'\\' => {
                self.state = ValueEscape;
                self.value_end = None;
            }
            Value => {
                track_trailing_space(&mut self.value_end, self.value.len(), byte);
                self.value.push(byte);
            }
            ValueEscape => {
                self.state = Value;
                // An escaped line end continues the value on the next line.
                if !is_line_end(byte) {
                    self.value.push(byte);
                }
            }
            SingleQuote if byte == b'\'' => self.state = PreValue,
            SingleQuote => self.value.push(byte),
            DoubleQuote if byte == b'"' => self.state = PreValue,
            DoubleQuote if byte == b'\\' => self.state = DoubleQuoteEscape,
            DoubleQuote => self.value.push(byte),
            DoubleQuoteEscape => {
                self.state = DoubleQuote;
                if b"\"\\`$".contains(&byte) {
                    self.value.push(byte);
                } else if byte != b'\n' {
                    self.value.extend([b'\\', byte]);
                }
            }
            Comment if byte == b'\\' => self.state = CommentEscape,
            Comment if is_line_end(byte) => self.state = PreKey,
            Comment => {}
            CommentEscape if is_line_end(byte) => self.state = PreKey,
            CommentEscape => self.state = Comment,
        }
        if byte == b'\n' {
            self.line += 1;
        }
    }

    /// After the `=` and between a value's quoted and unquoted parts.
    fn pre_value(&mut self, byte: u8) {
        match byte {
            b'\'' => {
                self.state = EnvState::SingleQuote;
                self.quote_line = self.line;
            }
            b'"' => {
                self.state = EnvState::DoubleQuote;
                self.quote_line = self.line;
            }
            b'\\' => self.state = EnvState::ValueEscape,
            byte if !is_space(byte) => {
                self.state = EnvState::Value;
                self.value.push(byte);
            }
            _ => {}
        }
    }

    fn chomp_value(&mut self) {
        if let Some(end) = self.value_end.take() {
            self.value.truncate(end);
        }
    }

    /// A line with no `=`, which systemd drops.
    fn no_equals_sign(&mut self) {
        let text = String::from_utf8_lossy(&self.name).into_owned();
        self.name.clear();
        let why = format!("{text:?} is not NAME=value (it has no '='); ignored");
        self.problem(self.entry_line, why);
    }

    fn problem(&mut self, line: usize, why: String) {
        self.entries.push(Entry::Problem { line, why });
    }

    /// The entry read, checked as systemd checks it: UTF-8, a name of letters,
    /// digits and `_` not starting with a digit (and, for `set_var`, no NUL).
    fn push(&mut self) {
        if let Some(end) = self.name_end.take() {
            self.name.truncate(end);
        }
        let name = std::mem::take(&mut self.name);
        let value = std::mem::take(&mut self.value);
        let line = self.entry_line;
        let Ok(name) = String::from_utf8(name) else {
            return self.problem(line, "the name is not UTF-8; ignored".to_owned());
        };
        if let Some(why) = bad_name(&name) {
            return self.problem(line, why);
        }
        let Ok(value) = String::from_utf8(value) else {
            return self.problem(line, format!("the value of {name} is not UTF-8; ignored"));
        };
        if value.contains('\0') {
            return self.problem(line, format!("the value of {name} holds a NUL; ignored"));
        }
        self.entries.push(Entry::Assignment { line, name, value });
    }

    fn finish(mut self) -> Vec<Entry> {
        use EnvState::*;
        match self.state {
            Key => self.no_equals_sign(),
            Value => {
                self.chomp_value();
                self.push();
            }
            PreValue | ValueEscape => self.push(),
            SingleQuote | DoubleQuote | DoubleQuoteEscape => {
                let name = String::from_utf8_lossy(&self.name).into_owned();
                let why = format!(
                    "the quote opened on this line is never closed, so the value of {name} \
                     runs to the end of the file"
                );
                self.problem(self.quote_line, why);
                self.push();
            }
            PreKey | Comment | CommentEscape => {}
        }
        self.entries
    }
}

/// Keeps `end` at the start of the whitespace that ends the text so far.
fn track_trailing_space(end: &mut Option<usize>, length: usize, byte: u8) {
    if !is_space(byte) {
        *end = None;
    } else if end.is_none() {
        *end = Some(length);
    }
}

/// Why `name` is not a variable name systemd sets, if it is not.
fn bad_name(name: &str) -> Option<String> {
    let valid = name.bytes().next().is_some_and(|b| !b.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if valid {
        return None;
    }
    if let Some(rest) = name
        .strip_prefix("export")
        .filter(|r| r.starts_with([' ', '\t']))
    {
        let rest = rest.trim_start();
        return Some(format!(
            "{name:?} is not a variable name: an EnvironmentFile= takes no `export`, \
             write {rest}=… alone; ignored"
        ));
    }
    Some(format!(
        "{name:?} is not a variable name (letters, digits and _, not starting with a \
         digit); ignored"
    ))
}

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
    fn durations() {
        assert_eq!(parse_duration("300ms"), Ok(Duration::from_millis(300)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(
            parse_duration("400d"),
            Ok(Duration::from_secs(400 * 86_400))
        );
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

    /// Reads `text` as an environment file and compares its entries: `(line, name,
    /// value)` for an assignment, `(line, "!", why)` for a problem.
    fn check(text: &[u8], expected: &[(usize, &str, &str)]) {
        let entries: Vec<(usize, String, String)> = parse_environment_file(text)
            .into_iter()
            .map(|entry| match entry {
                Entry::Assignment { line, name, value } => (line, name, value),
                Entry::Problem { line, why } => (line, "!".to_owned(), why),
            })
            .collect();
        let expected: Vec<(usize, String, String)> = expected
            .iter()
            .map(|(line, name, value)| (*line, (*name).to_owned(), (*value).to_owned()))
            .collect();
        assert_eq!(entries, expected, "{:?}", String::from_utf8_lossy(text));
    }

    #[test]
    fn environment_files_read_as_systemd_reads_them() {
        // Comments, blank lines, whitespace around the name and before the value.
        check(
            b"# comment\n; also a comment\n\n  A = 1\n\tB=\n",
            &[(4, "A", "1"), (5, "B", "")],
        );
        // Unquoted: inner whitespace and quotes kept, trailing whitespace dropped,
        // `\` escapes the next character, and at a line's end continues the value.
        check(
            b"A=x  y \t\nB=it's \"so\"\nC=a\\ b\\\\ \nD=one\\\ntwo\nE=last",
            &[
                (1, "A", "x  y"),
                (2, "B", "it's \"so\""),
                (3, "C", "a b\\"),
                (4, "D", "onetwo"),
                (6, "E", "last"),
            ],
        );
        // Single quotes verbatim, double quotes with the shell's escapes; either may
        // span lines, and quoted and unquoted parts join.
        check(
            b"A='x\\y \"z\" '\nB=\"a\\\"b\\\\c\\$d\\e\"\nC=\"l1\nl2\"\nD=\"con\\\ntinued\"\nE=\"x\" y\nF=\n",
            &[
                (1, "A", "x\\y \"z\" "),
                (2, "B", "a\"b\\c$d\\e"),
                (3, "C", "l1\nl2"),
                (5, "D", "continued"),
                (7, "E", "xy"),
                (8, "F", ""),
            ],
        );
        // CRLF line ends; a comment ending in `\` does not swallow the next line.
        check(b"A=b\r\n# c \\\nC=d\r\n", &[(1, "A", "b"), (3, "C", "d")]);
    }

    #[test]
    fn what_systemd_drops_is_reported_with_its_line() {
        check(
            b"export SPOOLITE_DB=/x\njunk\n1BAD=x\n=x\nA B=1\nOK=\xff\n\xffK=1\nN=\"a\\\nb",
            &[
                (
                    1,
                    "!",
                    "\"export SPOOLITE_DB\" is not a variable name: an EnvironmentFile= takes \
                     no `export`, write SPOOLITE_DB=… alone; ignored",
                ),
                (
                    2,
                    "!",
                    "\"junk\" is not NAME=value (it has no '='); ignored",
                ),
                (
                    3,
                    "!",
                    "\"1BAD\" is not a variable name (letters, digits and _, not starting with \
                     a digit); ignored",
                ),
                (4, "!", "\"=x\" is not NAME=value (it has no '='); ignored"),
                (
                    5,
                    "!",
                    "\"A B\" is not a variable name (letters, digits and _, not starting with \
                     a digit); ignored",
                ),
                (6, "!", "the value of OK is not UTF-8; ignored"),
                (7, "!", "the name is not UTF-8; ignored"),
                (
                    8,
                    "!",
                    "the quote opened on this line is never closed, so the value of N runs to \
                     the end of the file",
                ),
                (8, "N", "ab"),
            ],
        );
        // A last line without `=` and without a line end.
        check(
            b"A=1\nlast",
            &[
                (1, "A", "1"),
                (
                    2,
                    "!",
                    "\"last\" is not NAME=value (it has no '='); ignored",
                ),
            ],
        );
    }

    #[test]
    fn a_defaults_file_sets_the_commands_own_variables_and_reports_the_rest() {
        let text = b"SPOOLITE_DB=/a\nSPOOLITE_BOGUS=1\nSPOOLITE_SETTLE=5s\nRUST_LOG=debug\n\
                     SPOOLITE_DEFAULTS_FILE=/other\nSPOOLITE_DB=/b\nSPOOLITE_JSON=\n";
        let (values, warnings) = site_settings(&parse_environment_file(text), "status");
        // A later assignment wins; the daemon's SPOOLITE_SETTLE and RUST_LOG are not
        // status's to take, nor to warn of.
        assert_eq!(
            values,
            [("SPOOLITE_DB", "/b"), ("SPOOLITE_JSON", "")]
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
        );
        assert_eq!(
            warnings,
            [
                "2: SPOOLITE_BOGUS is no setting of spoolite (no option reads it: a typo?); ignored",
                "5: SPOOLITE_DEFAULTS_FILE names the defaults file, so only the environment sets \
                 it; ignored",
            ]
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
            "SPOOLITE_SPOOL=/srv/spool\nSPOOLITE_DB=/srv/db\nSPOOLITE_JSON=yes\nRUST_LOG=debug\n\
             SPOOLITE_TYPO=1\n",
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
        assert_eq!(
            plan.defaults.warnings,
            [format!(
                "{file_text}:5: SPOOLITE_TYPO is no setting of spoolite (no option reads it: a \
                 typo?); ignored"
            )]
        );
        assert_eq!(plan.defaults.fatal, None);
        // `key` needs no site.
        let plan = plan_environment(&os(&["spoolite", "key"]), &environment);
        assert!(plan.set.is_empty() && plan.defaults == Defaults::default());
        assert_eq!(plan.unset, ["SPOOLITE_JSON"]);
        // `run` takes its environment from its unit, and a file only when one is
        // named: then the settings it has an option for.
        let plan = plan_environment(&os(&["spoolite", "run"]), &environment);
        assert_eq!(plan.defaults.applied, ["SPOOLITE_SPOOL"]);
        assert_eq!(plan.defaults.file.as_deref(), Some(file.as_path()));
        let unnamed: Vec<_> = environment
            .iter()
            .filter(|(key, _)| key != DEFAULTS_FILE_VARIABLE)
            .cloned()
            .collect();
        let plan = plan_environment(&os(&["spoolite", "run"]), &unnamed);
        assert!(plan.set.is_empty() && plan.defaults == Defaults::default());
        // `changes` reads the site's database like `status` does, and only what it
        // has an option for.
        let unset = env(&[("SPOOLITE_DEFAULTS_FILE", &file_text)]);
        let plan = plan_environment(&os(&["spoolite", "changes", "--follow"]), &unset);
        assert_eq!(plan.defaults.applied, ["SPOOLITE_DB"]);
        // A file named that does not exist stops the command; the packaged one
        // missing does not.
        let missing = env(&[("SPOOLITE_DEFAULTS_FILE", "/nonexistent/spoolite")]);
        let plan = plan_environment(&os(&["spoolite", "ingest"]), &missing);
        assert_eq!(
            plan.defaults.fatal.as_deref(),
            Some(
                "read the defaults file /nonexistent/spoolite (named by SPOOLITE_DEFAULTS_FILE): \
                 No such file or directory (os error 2); name a file that exists, or unset \
                 SPOOLITE_DEFAULTS_FILE to read /etc/default/spoolite"
            )
        );
        assert!(plan.set.is_empty() && plan.defaults.applied.is_empty());
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
