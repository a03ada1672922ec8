//! The command line: commands, options and their environment variables. The doc
//! comments here are the `--help` text.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

/// spoolite: ingests flight duty event batches from a spool directory into SQLite,
/// exactly once, however often a file arrives.
#[derive(Debug, Parser)]
#[command(version, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Watch SPOOL/incoming/ and ingest every complete batch file until SIGTERM or
    /// SIGINT. Creates the spool folders and the database when missing.
    Run(RunArgs),
    /// Ingest the named files once, without moving them; one outcome line per file.
    /// Exits 0 when every file was processed or skipped as a duplicate, 1 when any
    /// was rejected, 2 on an operating error.
    Ingest(IngestArgs),
    /// Show whether a daemon serves the spool, batches, events, quarantined records,
    /// the last ingest and the files waiting in incoming/ and lying in rejected/.
    /// Creates nothing. Exits 0 when a daemon serves the spool, 3 when the site
    /// exists but no daemon serves it, 2 when the spool or the database does not
    /// exist or cannot be read (what could be read is printed all the same).
    Status(StatusArgs),
    /// Print the canonical forms and the idempotency key of one event.
    Key(KeyArgs),
}

#[derive(Debug, Args)]
pub struct DbArg {
    /// The SQLite database file; missing parent folders are created.
    #[arg(
        long,
        env = "SPOOLITE_DB",
        default_value = "./spoolite.db",
        value_name = "FILE"
    )]
    pub db: PathBuf,
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
    pub event_bytes_max: usize,
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
    pub db: DbArg,
    /// Print one JSON object per file instead of a line of text.
    #[arg(long, env = "SPOOLITE_JSON")]
    pub json: bool,
    /// Validate and classify each file against the database, writing nothing.
    #[arg(long, env = "SPOOLITE_DRY_RUN")]
    pub dry_run: bool,
    #[command(flatten)]
    pub file_bytes_max: FileBytesMaxArg,
    #[command(flatten)]
    pub event_bytes_max: EventBytesMaxArg,
    /// The batch files to ingest.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The spool directory holding incoming/, archive/ and rejected/; it must exist
    /// (`spoolite run` creates it).
    #[arg(
        long,
        env = "SPOOLITE_SPOOL",
        default_value = "./spool",
        value_name = "DIR"
    )]
    pub spool: PathBuf,
    /// The SQLite database file; it must exist (`spoolite run` creates it) and is
    /// only read.
    #[arg(
        long,
        env = "SPOOLITE_DB",
        default_value = "./spoolite.db",
        value_name = "FILE"
    )]
    pub db: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long, env = "SPOOLITE_JSON")]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct KeyArgs {
    /// The flight, e.g. BA0117-20261129.
    pub flight_id: String,
    /// The event kind, e.g. off_blocks.
    pub event_kind: String,
    /// The RFC 3339 instant with an offset, e.g. 2026-11-29T10:05:00Z.
    pub instant: String,
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

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
