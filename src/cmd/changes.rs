//! `spoolite changes`: the change feed as JSON lines on stdout, from a read-only
//! connection to a SQLite file or a PostgreSQL database; with `--follow`, a loop
//! that waits (SQLite: on a file-system notification of the database's files, or a
//! one-second timer, for missed events; PostgreSQL: on the notification a commit
//! sends to the feed's connection), looks whether anything was committed, and
//! prints what was, until SIGTERM, SIGINT or a closed stdout.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use notify::{RecursiveMode, Watcher};

use crate::cli::ChangesArgs;
use crate::store::ChangeFeed;
use crate::store::changes::{Change, PAGE_ROWS, PageError};
use crate::store::{Db, FaultClass, MissingFile, StoreError, require_file};

/// Exit code for an operating error (a missing, unreadable or older database).
const EXIT_ERROR: u8 = 2;

/// How often a follower looks for commits when nothing told it of one: a
/// connection or a watch can end without a word. Between two such looks an idle
/// follower does not wake at all.
const QUIET_LOOK: Duration = Duration::from_secs(10);

/// How often a follower of a SQLite file that could not be watched (no
/// permission, inotify limits) looks for commits.
const UNWATCHED_LOOK: Duration = Duration::from_secs(1);

/// After a notification, when the look found nothing new, it looks again after
/// each of these waits (about 100 ms in all): a writer appends its commit to the
/// WAL (the notification) a moment before it publishes it in the shared-memory
/// index, which no notification reports.
const RECHECK_WAITS: [Duration; 4] = [
    Duration::from_millis(2),
    Duration::from_millis(8),
    Duration::from_millis(30),
    Duration::from_millis(60),
];

/// The least time between two looks, so that a large batch being written (a
/// notification per WAL write) costs a follower a few hundred looks a second at
/// most.
const LOOK_GAP_MIN: Duration = Duration::from_millis(2);

/// While a PostgreSQL follower's database cannot be reached (the server stopped
/// or restarting), it tries again after a wait that doubles from the first to the
/// second of these.
const RETRY_WAITS: (Duration, Duration) = (Duration::from_millis(250), Duration::from_secs(5));

/// How long a stop (SIGTERM, SIGINT) waits for the loop to finish the line it is
/// writing before the process exits anyway: a write blocked on a reader that does
/// not read must not keep it alive.
const STOP_GRACE: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
enum ChangesError {
    #[error(transparent)]
    File(#[from] MissingFile),
    #[error(
        "database {0} holds no spoolite tables yet; start `spoolite run` (or run \
         `spoolite ingest`) once, or point --db at the site's database"
    )]
    NoSchema(PathBuf),
    #[error(
        "database {path} has schema version {found}, older than this spoolite's ({known}); \
         the change feed only reads, so the daemon must upgrade it first: start \
         `spoolite run` (or run `spoolite ingest`) once with this spoolite"
    )]
    OlderSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("{0}")]
    Store(StoreError),
    #[error("write to stdout: {0}")]
    Write(io::Error),
    #[error(
        "read change {change_seq} (key {key}): its payload is not a JSON object: {payload:.80}"
    )]
    BadPayload {
        change_seq: i64,
        key: String,
        payload: String,
    },
}

/// Why printing stopped before the end of a page.
enum Halt {
    /// SIGTERM or SIGINT.
    Stopped,
    /// stdout is closed (EPIPE): the reader is done, which is a normal end.
    Closed,
    Error(ChangesError),
}

impl From<ChangesError> for Halt {
    fn from(error: ChangesError) -> Halt {
        Halt::Error(error)
    }
}

impl From<StoreError> for Halt {
    fn from(error: StoreError) -> Halt {
        Halt::Error(ChangesError::Store(error))
    }
}

/// A write error: a closed stdout ends the command normally.
fn write_halt(error: io::Error) -> Halt {
    if error.kind() == io::ErrorKind::BrokenPipe {
        Halt::Closed
    } else {
        Halt::Error(ChangesError::Write(error))
    }
}

/// What to print, from the command line.
#[derive(Debug, Clone, Copy)]
struct Options {
    since: i64,
    limit: Option<u64>,
    follow: bool,
}

/// `spoolite changes`: exits 0 when every row was printed, `--limit` was reached,
/// a signal came or stdout was closed; 2 on an operating error.
pub fn run(args: &ChangesArgs) -> ExitCode {
    let stop = Arc::new(AtomicBool::new(false));
    let (doorbell, wake) = crossbeam_channel::bounded(1);
    if let Err(error) = watch_signals(stop.clone(), doorbell.clone()) {
        eprintln!("spoolite: install signal handlers: {error}");
        return ExitCode::from(EXIT_ERROR);
    }
    if args.follow {
        watch_stdout(stop.clone(), doorbell.clone());
    }
    let options = Options {
        since: args.since,
        limit: args.limit,
        follow: args.follow,
    };
    match print_changes(&args.db, options, &stop, doorbell, &wake) {
        Ok(()) | Err(Halt::Stopped | Halt::Closed) => ExitCode::SUCCESS,
        Err(Halt::Error(error)) => {
            eprintln!("spoolite: {error}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

/// SIGTERM and SIGINT stop the command (`stop_within_grace`).
fn watch_signals(stop: Arc<AtomicBool>, doorbell: Sender<()>) -> io::Result<()> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT])?;
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            let name = signal_hook::low_level::signal_name(signal).unwrap_or("a signal");
            stop_within_grace(&stop, &doorbell, name);
        }
    });
    Ok(())
}

/// A follower's reader going away (stdout a pipe or socket whose other end is
/// closed: POLLERR, POLLHUP) stops it (`stop_within_grace`), even while it waits
/// for a commit: a thread waits in poll(2) for that, and costs nothing meanwhile.
/// Stdout that cannot close (a file) never wakes it.
fn watch_stdout(stop: Arc<AtomicBool>, doorbell: Sender<()>) {
    std::thread::spawn(move || {
        let mut fd = libc::pollfd {
            fd: libc::STDOUT_FILENO,
            events: 0,
            revents: 0,
        };
        loop {
            // SAFETY: one pollfd that lives across the call.
            let ready = unsafe { libc::poll(&raw mut fd, 1, -1) };
            if ready > 0 && fd.revents & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                stop_within_grace(&stop, &doorbell, "stdout closed");
                return;
            }
            if ready < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return;
            }
        }
    });
}

/// Sets `stop` and rings the doorbell, which ends the loop at its next look or
/// wait; if the loop has not ended the process within `STOP_GRACE` (a write
/// blocked on a full pipe, a wait on a PostgreSQL connection), it exits 0 anyway:
/// the command only reads, so there is nothing to finish.
fn stop_within_grace(stop: &AtomicBool, doorbell: &Sender<()>, why: &str) {
    log::debug!("{why}: stopping");
    stop.store(true, Ordering::SeqCst);
    crate::store::stop_waiting_for_locks();
    let _ = doorbell.try_send(());
    std::thread::sleep(STOP_GRACE);
    std::process::exit(0);
}

/// Opens the feed, prints what is committed after `options.since` and, when
/// following, what is committed later, until a stop.
fn print_changes(
    db: &Db,
    options: Options,
    stop: &AtomicBool,
    doorbell: Sender<()>,
    wake: &Receiver<()>,
) -> Result<(), Halt> {
    // A PostgreSQL database is not a file: the connection says whether it exists.
    if let Some(path) = db.file() {
        require_file(path).map_err(ChangesError::from)?;
    }
    let mut feed = Some(open_feed(db)?);
    // The watch is in place before the first read, so no commit falls between them.
    let watcher = match db.file() {
        Some(path) if options.follow => Some(watch_database(path, doorbell)),
        _ => None,
    };
    let mut printer = Printer {
        out: BufWriter::new(io::stdout().lock()),
        after: options.since,
        left: options.limit,
    };
    let mut waits = Waits {
        quiet: match watcher {
            Some(None) => UNWATCHED_LOOK,
            _ => QUIET_LOOK,
        },
        rechecks: &[],
        lost: None,
    };
    let mut seen_version = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Err(Halt::Stopped);
        }
        let last_look = Instant::now();
        let looked = look_reopening(db, &mut feed, &mut seen_version, &mut printer, stop);
        match looked {
            Ok(()) => waits.answered(),
            // A follower outlasts a lock held past the busy timeout (a recovery
            // after a crash of the daemon): the next look tries again.
            Err(Halt::Error(ChangesError::Store(error))) if options.follow && error.is_busy() => {
                log::warn!("read the change feed: {error}; trying again");
            }
            // ... and a PostgreSQL server that stops, restarts or drops the
            // connection: it connects again, with a growing wait.
            Err(Halt::Error(ChangesError::Store(error)))
                if options.follow && !db.is_file() && passes(&error) =>
            {
                feed = None;
                waits.lost(&error);
            }
            Err(halt) => return Err(halt),
        }
        if !options.follow || printer.left == Some(0) {
            return Ok(());
        }
        match feed.as_mut() {
            Some(feed) if waits.lost.is_none() => waits.wait_for_commit(feed, wake, last_look)?,
            _ => waits.wait(wake, last_look),
        }
    }
}

/// How long a follower waits before its next look.
struct Waits {
    /// The wait when nothing tells of a commit: `QUIET_LOOK`, or `UNWATCHED_LOOK`
    /// for a SQLite file without a watch.
    quiet: Duration,
    /// The looks still to make after a notification that found nothing new.
    rechecks: &'static [Duration],
    /// Since when, and how long to wait before the next try, while a follower's
    /// PostgreSQL database cannot be reached.
    lost: Option<(Instant, Duration)>,
}

impl Waits {
    /// A look worked: a database that could not be reached answers again.
    fn answered(&mut self) {
        if let Some((since, _)) = self.lost.take() {
            log::info!(
                "read the change feed: the database answers again, after {:.1}s",
                since.elapsed().as_secs_f64()
            );
        }
    }

    /// A look failed with a passing fault of the server: the wait grows.
    fn lost(&mut self, error: &StoreError) {
        self.lost = Some(match self.lost {
            None => {
                log::warn!("read the change feed: {error}; connecting again");
                (Instant::now(), RETRY_WAITS.0)
            }
            Some((since, wait)) => (since, (wait * 2).min(RETRY_WAITS.1)),
        });
    }

    /// PostgreSQL: waits for a commit's notification on the feed's connection,
    /// `QUIET_LOOK` at most. SQLite, whose commits are told through its files:
    /// `wait`.
    fn wait_for_commit(
        &mut self,
        feed: &mut ChangeFeed,
        wake: &Receiver<()>,
        last_look: Instant,
    ) -> Result<(), Halt> {
        match feed.wait_for_commit(QUIET_LOOK) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => {
                self.wait(wake, last_look);
                Ok(())
            }
            // The next look meets the fault and says what it is.
            Err(error) if passes(&error) => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Waits for a notification of the database's files (SQLite) or a stop, or
    /// the next timer: a recheck, `quiet`, or a retry of a lost PostgreSQL server.
    fn wait(&mut self, wake: &Receiver<()>, last_look: Instant) {
        let (wait, rest) = match self.lost {
            Some((_, retry)) => (retry, &[][..]),
            None => self
                .rechecks
                .split_first()
                .map_or((self.quiet, &[][..]), |(first, rest)| (*first, rest)),
        };
        self.rechecks = rest;
        match wake.recv_timeout(wait) {
            Ok(()) => {
                self.rechecks = &RECHECK_WAITS;
                // Notifications come with every write of a large batch: look at
                // most once per `LOOK_GAP_MIN`.
                if let Some(gap) = LOOK_GAP_MIN.checked_sub(last_look.elapsed()) {
                    std::thread::sleep(gap);
                }
            }
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {}
        }
    }
}

/// Opens the feed of `db`, naming an older schema as the feed's own error.
fn open_feed(db: &Db) -> Result<ChangeFeed, Halt> {
    ChangeFeed::open(db).map_err(|error| match error {
        StoreError::OlderSchema { path, found: 0, .. } => Halt::Error(ChangesError::NoSchema(path)),
        StoreError::OlderSchema { path, found, known } => {
            Halt::Error(ChangesError::OlderSchema { path, found, known })
        }
        other => Halt::from(other),
    })
}

/// A PostgreSQL fault a follower waits out (the server unreachable or
/// restarting, a dropped connection): the contract's passing faults.
fn passes(error: &StoreError) -> bool {
    matches!(error.class(), FaultClass::Database { .. })
        && !matches!(
            error,
            StoreError::OlderSchema { .. } | StoreError::NewerSchema { .. }
        )
}

/// `look`, on the feed in `slot`, opening it first when it is not open (after a
/// lost connection); the feed stays in `slot` whatever the look returns.
fn look_reopening(
    db: &Db,
    slot: &mut Option<ChangeFeed>,
    seen_version: &mut Option<i64>,
    printer: &mut Printer<impl Write>,
    stop: &AtomicBool,
) -> Result<(), Halt> {
    let mut feed = match slot.take() {
        Some(feed) => feed,
        None => {
            *seen_version = None;
            open_feed(db)?
        }
    };
    let looked = look(&mut feed, seen_version, printer, stop);
    *slot = Some(feed);
    looked
}

/// Prints every row committed since the last look: on SQLite only when `PRAGMA
/// data_version` says something was (the first look always reads); on PostgreSQL
/// at every look.
fn look(
    feed: &mut ChangeFeed,
    seen_version: &mut Option<i64>,
    printer: &mut Printer<impl Write>,
    stop: &AtomicBool,
) -> Result<(), Halt> {
    let version = feed.data_version()?;
    if version.is_some() && *seen_version == version {
        return Ok(());
    }
    // Noted before reading: a commit during the read moves it again, and the next
    // look reads what that commit added. A read that fails is tried again.
    *seen_version = version;
    let printed = printer.print_all(feed, stop);
    if printed.is_err() {
        *seen_version = None;
    }
    printed
}

/// Where lines go, after which `change_seq`, and how many more may be printed.
struct Printer<W: Write> {
    out: BufWriter<W>,
    after: i64,
    left: Option<u64>,
}

impl<W: Write> Printer<W> {
    /// Prints the rows after `after`, page by page, up to the end of the feed or
    /// the limit, flushing after each page.
    fn print_all(&mut self, feed: &mut ChangeFeed, stop: &AtomicBool) -> Result<(), Halt> {
        loop {
            let want = self.left.map_or(PAGE_ROWS, |left| {
                usize::try_from(left).unwrap_or(usize::MAX).min(PAGE_ROWS)
            });
            if want == 0 {
                return Ok(());
            }
            let printed = feed
                .page(self.after, want, |change| {
                    if stop.load(Ordering::Relaxed) {
                        return Err(Halt::Stopped);
                    }
                    write_line(&mut self.out, &change)?;
                    self.after = change.change_seq;
                    self.left = self.left.map(|left| left - 1);
                    Ok(())
                })
                .map_err(|error| match error {
                    PageError::Store(error) => Halt::from(error),
                    PageError::Sink(halt) => halt,
                });
            // What was written is whole lines: flush it even when a stop came.
            let flushed = self.out.flush().map_err(write_halt);
            let printed = printed?;
            flushed?;
            if printed < want {
                return Ok(());
            }
        }
    }
}

/// Writes one change as a JSON line: the columns of `duty_event_all` in its order,
/// `payload` as the object it is (its canonical text as stored, so every number
/// stays exactly as written), `retracted` a boolean.
fn write_line(out: &mut impl Write, change: &Change) -> Result<(), Halt> {
    if !is_json_object(&change.payload) {
        return Err(Halt::Error(ChangesError::BadPayload {
            change_seq: change.change_seq,
            key: change.idempotency_key.clone(),
            payload: change.payload.clone(),
        }));
    }
    write_fields(out, change).map_err(write_halt)
}

fn write_fields(out: &mut impl Write, change: &Change) -> io::Result<()> {
    out.write_all(b"{\"idempotency_key\":")?;
    serde_json::to_writer(&mut *out, &change.idempotency_key)?;
    out.write_all(b",\"flight_id\":")?;
    serde_json::to_writer(&mut *out, &change.flight_id)?;
    out.write_all(b",\"event_kind\":")?;
    serde_json::to_writer(&mut *out, &change.event_kind)?;
    out.write_all(b",\"instant_utc\":")?;
    serde_json::to_writer(&mut *out, &change.instant_utc)?;
    write!(out, ",\"source_revision\":{}", change.source_revision)?;
    out.write_all(b",\"payload\":")?;
    out.write_all(change.payload.as_bytes())?;
    write!(out, ",\"retracted\":{}", change.retracted)?;
    out.write_all(b",\"slot\":")?;
    serde_json::to_writer(&mut *out, &change.slot)?;
    out.write_all(b",\"batch_digest\":")?;
    serde_json::to_writer(&mut *out, &change.batch_digest)?;
    out.write_all(b",\"first_seen_at\":")?;
    serde_json::to_writer(&mut *out, &change.first_seen_at)?;
    out.write_all(b",\"updated_at\":")?;
    serde_json::to_writer(&mut *out, &change.updated_at)?;
    writeln!(out, ",\"change_seq\":{}}}", change.change_seq)
}

/// Whether `text` is one JSON object (checked without building it, so that no
/// number is rounded on the way).
fn is_json_object(text: &str) -> bool {
    text.trim_start().starts_with('{')
        && serde_json::from_str::<serde::de::IgnoredAny>(text).is_ok()
}

/// Rings `doorbell` on every event that can mean a commit: a write, create or
/// rename of the database file or its `-wal` beside it (the watch is on their
/// folder, since SQLite may create the `-wal` anew), and on lost events. Reads,
/// including this process's own, do not ring. Without a watch (no permission,
/// inotify limits) the follower looks once a second.
fn watch_database(db: &Path, doorbell: Sender<()>) -> Option<notify::RecommendedWatcher> {
    // Writes land in the link's target, and that target's folder is what to watch.
    let db = std::fs::canonicalize(db).unwrap_or_else(|_| db.to_owned());
    let folder = match db.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = db.file_name().map(|n| n.to_owned()).unwrap_or_default();
    let mut wal = name.clone();
    wal.push("-wal");
    let watched = [name, wal];
    let result = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let ring = match &event {
            Err(_) => true,
            Ok(event) => {
                event.need_rescan()
                    || (crate::watch::can_make_ready(&event.kind)
                        && event.paths.iter().any(|path| {
                            path.file_name()
                                .is_some_and(|n| watched.iter().any(|w| w == n))
                        }))
            }
        };
        if ring {
            // A full channel means a look is already due: nothing is lost.
            let _ = doorbell.try_send(());
        }
    })
    .and_then(|mut watcher| {
        watcher.watch(&folder, RecursiveMode::NonRecursive)?;
        Ok(watcher)
    });
    match result {
        Ok(watcher) => Some(watcher),
        Err(error) => {
            log::warn!(
                "watch {}: {error}; looking for new changes once a second",
                folder.display()
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(payload: &str, retracted: bool) -> Change {
        Change {
            idempotency_key: "ab".repeat(32),
            flight_id: "BA0117-20261129".to_owned(),
            event_kind: "off_blocks".to_owned(),
            instant_utc: "2026-11-29T10:05:00Z".to_owned(),
            source_revision: 3,
            payload: payload.to_owned(),
            retracted,
            slot: None,
            batch_digest: Some("cd".repeat(32)),
            first_seen_at: "2026-12-01T09:43:49.150Z".to_owned(),
            updated_at: "2026-12-01T09:43:49.150Z".to_owned(),
            change_seq: 7,
        }
    }

    fn line(change: &Change) -> String {
        let mut out = Vec::new();
        assert!(write_line(&mut out, change).is_ok());
        String::from_utf8(out).expect("utf-8")
    }

    #[test]
    fn a_line_holds_every_column_in_order_with_the_payload_as_written() {
        let big = r#"{"crew":["C1"],"n":123456789012345678901234567890,"x":1.50}"#;
        let text = line(&change(big, true));
        assert_eq!(
            text,
            format!(
                "{{\"idempotency_key\":\"{}\",\"flight_id\":\"BA0117-20261129\",\
                 \"event_kind\":\"off_blocks\",\"instant_utc\":\"2026-11-29T10:05:00Z\",\
                 \"source_revision\":3,\"payload\":{big},\"retracted\":true,\"slot\":null,\
                 \"batch_digest\":\"{}\",\"first_seen_at\":\"2026-12-01T09:43:49.150Z\",\
                 \"updated_at\":\"2026-12-01T09:43:49.150Z\",\"change_seq\":7}}\n",
                "ab".repeat(32),
                "cd".repeat(32)
            )
        );
        let value: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(value["retracted"], serde_json::json!(true));
        assert!(value["payload"].is_object());
    }

    #[test]
    fn a_payload_that_is_not_an_object_is_an_error_not_a_line() {
        for payload in ["[1]", "\"text\"", "{\"a\":", ""] {
            let mut out = Vec::new();
            assert!(
                matches!(
                    write_line(&mut out, &change(payload, false)),
                    Err(Halt::Error(ChangesError::BadPayload { .. }))
                ),
                "{payload:?}"
            );
            assert!(out.is_empty());
        }
    }

    #[test]
    fn a_closed_pipe_ends_the_command_normally() {
        let broken = io::Error::from(io::ErrorKind::BrokenPipe);
        assert!(matches!(write_halt(broken), Halt::Closed));
        let full = io::Error::from(io::ErrorKind::StorageFull);
        assert!(matches!(write_halt(full), Halt::Error(_)));
    }
}
