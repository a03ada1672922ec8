//! spoolite-bench: one command that generates deterministic batch files and measures
//! spoolite side by side with the fair floor (the stand-alone `spoolite-perf-limit`,
//! built in the same run), a minimal insert loop of its own (the bench's floor),
//! SHA-256, the sqlite-utils upsert and a live daemon, times the analysts' queries
//! on a large database, then prints a Markdown table of every figure with its
//! baseline and target. See BENCHMARKS.md for how to read it, and
//! docs/bench-history/2026-11-to-2026-12-06.md (*Run it*, *What is measured, and
//! how*) for how to run each section and what it measures.

#![warn(clippy::unwrap_used)]

mod analyst;
mod backlog;
mod child;
mod daemon;
mod datasette;
mod fairfloor;
mod files;
mod formats;
mod generate;
mod idle;
mod latency;
mod machine;
mod peer;
mod postgres;
mod run;
mod station;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

/// Every fallible step of the bench returns this.
pub type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// A line on stderr saying what the run is doing.
pub fn progress(message: &str) {
    eprintln!("[spoolite-bench] {message}");
}

/// Measures spoolite's ingest (first ingest, re-drop, updates, growth, memory,
/// drop-to-visible latency) against the floor, SHA-256 and sqlite-utils, and the
/// daemon idle and working off a backlog.
#[derive(Debug, Parser)]
#[command(args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    child: Option<Hidden>,
    #[command(flatten)]
    options: Options,
}

/// The measured pieces, run by the bench in child processes of itself.
#[derive(Debug, Subcommand)]
enum Hidden {
    #[command(name = "__ingest", hide = true)]
    Ingest(child::ChildArgs),
    #[command(name = "__floor", hide = true)]
    Floor(child::ChildArgs),
    /// Writes one generated batch file, for profiling a section by hand (see
    /// docs/bench-history/2026-11-to-2026-12-06.md, *Growth: where the time goes*).
    #[command(name = "__generate", hide = true)]
    Generate(GenerateArgs),
}

/// Arguments of `__generate`: the events `offset .. offset + count` of the bench's
/// deterministic sequence, as the bench itself writes them.
#[derive(Debug, Args)]
struct GenerateArgs {
    #[arg(long, default_value_t = 0)]
    offset: u64,
    #[arg(long, default_value_t = 1_000_000)]
    count: u64,
    #[arg(long, default_value_t = 1)]
    revision: i64,
    /// Another crew on every event, as section 4's updates have.
    #[arg(long)]
    crew_changed: bool,
    #[arg(long, default_value_t = 0x5EED_0117)]
    seed: u64,
    /// The file to write; `.json` or `.ndjson` picks the layout.
    file: PathBuf,
}

fn generate(args: &GenerateArgs) -> BenchResult<()> {
    let layout = match args.file.extension().and_then(|e| e.to_str()) {
        Some("json") => generate::Layout::Json,
        Some("ndjson") => generate::Layout::Ndjson,
        _ => return Err("the file name must end in .json or .ndjson".into()),
    };
    let spec = generate::BatchSpec {
        offset: args.offset,
        count: args.count,
        revision: args.revision,
        crew_changed: args.crew_changed,
        batch_id: format!("generated-{}-{}", args.offset, args.count),
    };
    generate::write_batch_file(&args.file, args.seed, &spec, layout)?;
    Ok(())
}

#[derive(Debug, Clone, Args)]
pub struct Options {
    /// Events in the main batch file (first ingest, floor, re-drop, updates, growth,
    /// peer).
    #[arg(long, default_value_t = 1_000_000, value_name = "COUNT")]
    pub events: u64,
    /// Folder for generated files, databases, logs and results.md.
    #[arg(long, default_value = "target/bench", value_name = "DIR")]
    pub out: PathBuf,
    /// Rows already in the database for the growth figure, ingested as files of
    /// --events each; 0 skips the growth figure.
    #[arg(long, default_value_t = 10_000_000, value_name = "COUNT")]
    pub growth_base: u64,
    /// The largest file of the memory-flatness series (--events/10, --events, this),
    /// e.g. 5000000; without it the series stops at --events.
    #[arg(long, value_name = "COUNT")]
    pub events_max: Option<u64>,
    /// Files dropped one by one into the running daemon for the latency figure.
    #[arg(long, default_value_t = 200, value_name = "COUNT")]
    pub latency_files: u64,
    /// Events in each latency file.
    #[arg(long, default_value_t = 100, value_name = "COUNT")]
    pub latency_events: u64,
    /// The daemon's --settle during the latency run.
    #[arg(long, default_value = "0ms", value_name = "DURATION")]
    pub settle: String,
    /// The spoolite binary run as the daemon; default: the one beside this binary
    /// (build both with `cargo build --release --workspace`).
    #[arg(long, value_name = "PATH")]
    pub spoolite: Option<PathBuf>,
    /// The measured window of the idle daemon (section 8), in seconds.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub idle_seconds: u64,
    /// One-event files in the backlog (section 9), put into a stopped daemon's
    /// incoming/ before it starts.
    #[arg(long, default_value_t = 20_000, value_name = "COUNT")]
    pub backlog_files: u64,
    /// The smaller backlog the large one's files/s is compared with.
    #[arg(long, default_value_t = 1000, value_name = "COUNT")]
    pub backlog_compare: u64,
    /// The first and the last this many files of the large backlog are compared.
    #[arg(long, default_value_t = 1000, value_name = "COUNT")]
    pub backlog_window: u64,
    /// Leave out the sqlite-utils peer (it needs python3 and PyPI).
    #[arg(long)]
    pub skip_peer: bool,
    /// Run only these sections (by number: 0 to 9, F, M, A, P; repeatable or comma-separated),
    /// e.g. `--only 8,9` for the idle daemon and the backlog, which need no generated
    /// batch files. The other sections are left out of the table.
    #[arg(long, value_delimiter = ',', value_name = "SECTION")]
    pub only: Vec<String>,
    /// How often the .ndjson first ingest and the floors (interleaved), and the
    /// re-drop and the SHA-256 pass, are repeated; the median counts.
    #[arg(long, default_value_t = 3, value_name = "COUNT")]
    pub repeat: u32,
    /// The fair floor's source (a copy is built under the build's target/perf-floor);
    /// default: `../shared/perf-floor` from the workspace root, looked for beside
    /// that root and each folder above it.
    #[arg(long, value_name = "DIR")]
    pub perf_floor: Option<PathBuf>,
    /// Rows of the database the analyst queries (section A) run on. Default: the
    /// growth section's database (--growth-base + --events rows) when section 5 ran,
    /// else one of --growth-base rows built for section A.
    #[arg(long, value_name = "COUNT")]
    pub analyst_rows: Option<u64>,
    /// An existing spoolite SQLite database for section A instead of one it builds
    /// (e.g. one a run cut short left in OUT/db/analyst/): it is copied, with its
    /// WAL, into the section's folder, so the file named is never written, and its
    /// rows are counted. Its events must be the bench's generated ones (the
    /// Datasette part's live files follow on from them).
    #[arg(long, value_name = "FILE", conflicts_with = "analyst_rows")]
    pub analyst_db: Option<PathBuf>,
    /// Leave out section A's PostgreSQL column (its `copy-db` of a large database
    /// takes a long time).
    #[arg(long)]
    pub analyst_skip_pg: bool,
    /// Seed of the generated events.
    #[arg(long, default_value_t = 0x5EED_0117, value_name = "NUMBER")]
    pub seed: u64,
    /// A run for CI that only proves the bench still works: 10k events (3k for
    /// PostgreSQL), growth base 20k, 20 latency files, no peer, one repeat, a 3 s idle
    /// window, backlogs of 300 and 100 files (windows of 100). Overrides those
    /// options. The fair floor is run when a build of it is there already, and is
    /// noted as not run when it is not, or when its source cannot be found.
    #[arg(long)]
    pub smoke: bool,
}

impl Options {
    /// The options with `--smoke` applied.
    fn resolved(mut self) -> Options {
        if self.smoke {
            self.events = 10_000;
            self.growth_base = 20_000;
            self.events_max = None;
            self.latency_files = 20;
            self.skip_peer = true;
            self.repeat = 1;
            self.idle_seconds = 3;
            self.backlog_files = 300;
            self.backlog_compare = 100;
            self.backlog_window = 100;
        }
        self
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.child {
        Some(Hidden::Ingest(args)) => child::ingest(args).map(|()| ExitCode::SUCCESS),
        Some(Hidden::Floor(args)) => child::floor(args).map(|()| ExitCode::SUCCESS),
        Some(Hidden::Generate(args)) => generate(args).map(|()| ExitCode::SUCCESS),
        None => run::bench(cli.options.resolved()),
    };
    result.unwrap_or_else(|error| {
        eprintln!("spoolite-bench: {error}");
        ExitCode::from(2)
    })
}
