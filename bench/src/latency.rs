//! Drop-to-visible latency: small files renamed one by one into the incoming/ folder
//! of a running `spoolite run`, each timed from its rename until a separate
//! connection (read-only on SQLite) sees its inbox row. The database is a SQLite
//! file of the run's own, or a PostgreSQL database (section P).

use std::ffi::OsStr;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, OptionalExtension};
use sha2::{Digest, Sha256};

use crate::BenchResult;
use crate::daemon::Daemon;
use crate::generate::{self, BatchSpec, Layout};
use crate::table::{self, Row, Target};

/// How often the reader looks for the inbox row.
const POLL_INTERVAL: Duration = Duration::from_millis(1);
/// The longest wait for one file, or for the daemon to start.
const WAIT_MAX: Duration = Duration::from_secs(30);
/// Events of the latency files start here, far from every other file's events.
const LATENCY_OFFSET: u64 = 500_000_000;
/// The pause after a file is visible before the next is dropped that makes each a
/// lone file: longer than the daemon's 50 ms between two listings that rings
/// cause (`daemon::RING_LISTING_GAP`), which a file dropped sooner waits out.
pub const LONE_FILE_PAUSE: Duration = Duration::from_millis(100);

/// The target: a file visible at most this long after the settle, median.
const OVER_SETTLE_MAX_S: f64 = 0.050;

/// `row`, the median of a latency run `over` seconds beyond its settle, judged
/// against the target.
pub fn judged_over_settle(row: Row, over: f64) -> Row {
    row.judged(
        over,
        format!("settle + {}", table::seconds(over)),
        Target::AtMost(OVER_SETTLE_MAX_S),
        "≤ settle + 50 ms",
    )
}

/// What the latency run needs.
pub struct Plan<'a> {
    pub spoolite: &'a Path,
    pub dir: &'a Path,
    pub seed: u64,
    pub files: u64,
    pub events_per_file: u64,
    pub settle: &'a str,
    /// A PostgreSQL URI (an empty database the daemon puts its schema into); `None`:
    /// `latency.db` in `dir`.
    pub postgres: Option<&'a str>,
    /// How long after a file is visible the next one is dropped: zero drops them
    /// back to back (a stream: each waits for the daemon's next listing, at most
    /// 50 ms after the last one), `LONE_FILE_PAUSE` makes each a lone file.
    pub pause: Duration,
}

/// The look-up of one file's inbox row (SQLite reads `$1` as the first parameter).
const INBOX_ROW: &str = "SELECT 1 FROM ingest_inbox WHERE batch_digest = $1";

/// The separate connection that looks for each file's inbox row.
enum Reader {
    Sqlite(Connection),
    Postgres(postgres::Client, postgres::Statement),
}

impl Reader {
    fn has_batch(&mut self, digest: &str) -> BenchResult<bool> {
        Ok(match self {
            Reader::Sqlite(conn) => conn
                .prepare_cached(INBOX_ROW)?
                .query_row([digest], |_| Ok(()))
                .optional()?
                .is_some(),
            Reader::Postgres(client, query) => client.query_opt(&*query, &[&digest])?.is_some(),
        })
    }
}

/// Runs the latency measurement; returns one latency per file, in seconds, the
/// first (warm-up) file left out.
pub fn measure(plan: &Plan) -> BenchResult<Vec<f64>> {
    if plan.dir.exists() {
        std::fs::remove_dir_all(plan.dir)?;
    }
    std::fs::create_dir_all(plan.dir)?;
    let spool = plan.dir.join("spool");
    let db = match plan.postgres {
        Some(uri) => PathBuf::from(uri),
        None => plan.dir.join("latency.db"),
    };
    let daemon = start(plan, &spool, &db)?;
    let mut reader = wait_ready(&db, plan.postgres)?;
    let incoming = spool.join("incoming");
    let mut latencies = Vec::new();
    for number in 0..=plan.files {
        let latency = drop_one(plan, &incoming, &mut reader, number)?;
        if number > 0 {
            latencies.push(latency.as_secs_f64());
        }
        sleep(plan.pause);
    }
    drop(reader);
    daemon.stop()?;
    Ok(latencies)
}

fn start(plan: &Plan, spool: &Path, db: &Path) -> BenchResult<Daemon> {
    let args: [&OsStr; 8] = [
        "--spool".as_ref(),
        spool.as_os_str(),
        "--db".as_ref(),
        db.as_os_str(),
        "--settle".as_ref(),
        plan.settle.as_ref(),
        "--rescan".as_ref(),
        "30s".as_ref(),
    ];
    Daemon::start(plan.spoolite, args, &plan.dir.join("daemon.log"))
}

/// The reader, once the daemon has created the database and its schema.
fn wait_ready(db: &Path, postgres: Option<&str>) -> BenchResult<Reader> {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        let reader = match postgres {
            Some(uri) => postgres::Client::connect(uri, postgres::NoTls)
                .ok()
                .and_then(|mut client| {
                    let query = client.prepare(INBOX_ROW).ok()?;
                    Some(Reader::Postgres(client, query))
                }),
            None => open_reader(db).ok().map(Reader::Sqlite),
        };
        if let Some(mut reader) = reader
            && reader.has_batch("").is_ok()
        {
            return Ok(reader);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the daemon did not create {} within {WAIT_MAX:?}",
                db.display()
            )
            .into());
        }
        sleep(Duration::from_millis(10));
    }
}

fn open_reader(db: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(db, flags)?;
    conn.busy_timeout(Duration::from_secs(1))?;
    Ok(conn)
}

/// Writes file `number` under a temporary name, renames it into incoming/ and
/// returns the time until its inbox row is visible.
fn drop_one(
    plan: &Plan,
    incoming: &Path,
    reader: &mut Reader,
    number: u64,
) -> BenchResult<Duration> {
    let spec = BatchSpec {
        offset: LATENCY_OFFSET + number * plan.events_per_file,
        count: plan.events_per_file,
        revision: 1,
        crew_changed: false,
        batch_id: format!("latency-{number:04}"),
    };
    let mut bytes = Vec::new();
    generate::write_batch(&mut bytes, plan.seed, &spec, Layout::Json)?;
    let digest = hex::encode(Sha256::digest(&bytes));
    let name = format!("latency-{number:04}.json");
    let temporary: PathBuf = incoming.join(format!("{name}.tmp"));
    File::create(&temporary)?.write_all(&bytes)?;
    std::fs::rename(&temporary, incoming.join(&name))?;
    let renamed = Instant::now();
    wait_visible(reader, &digest, &name)?;
    Ok(renamed.elapsed())
}

fn wait_visible(reader: &mut Reader, digest: &str, name: &str) -> BenchResult<()> {
    let deadline = Instant::now() + WAIT_MAX;
    loop {
        if reader.has_batch(digest)? {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(
                format!("{name} was not visible after {WAIT_MAX:?}; see daemon.log").into(),
            );
        }
        sleep(POLL_INTERVAL);
    }
}
