//! One batch file into the database, in its steps: open it safely, one pass for its
//! digest and encoding, the whole-file rules, the inbox, then stream its records into
//! one store transaction and finish it once the file is proven unchanged. Moves no
//! files; the daemon and the `ingest` command decide what happens next.

use std::fs::{File, Metadata};
use std::io::{self, BufRead, BufReader, Read, Seek};
use std::ops::ControlFlow;

use flate2::read::MultiGzDecoder;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::batch::{
    BatchReader, Format, Header, Limits, LineOf, ReadError, Record, RejectReason, Rejection,
    Utf8Check, Utf8Verdict, preflight,
};
use crate::clock::{Clock, format_millis};
use crate::names;
use crate::spool::FileIdentity;
use crate::store::{Batch, Counts, Reasons, Store, StoreError};

/// The largest file ingested unless `--file-bytes-max` says otherwise: 2 GiB.
pub(crate) const FILE_BYTES_MAX_DEFAULT: u64 = 2 << 30;

/// Read buffer for every pass over a file. 64 KiB stays under glibc's mmap
/// threshold, so the buffer comes from the heap: a fresh 256 KiB mmap region made
/// the kernel's copy into it three times slower (a re-drop of a 171 MiB file took
/// 0.25 s instead of 0.165 s, the SHA-256 alone being 0.145 s).
const READ_BUFFER_BYTES: usize = 64 * 1024;

/// What happened to one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Processed {
        digest: String,
        counts: Counts,
        resent_batch_id: Option<String>,
        /// Quarantined events by reason code.
        reasons: Reasons,
    },
    SkippedDuplicate {
        digest: String,
    },
    /// `digest` is `None` only when the file could not be read to its end.
    Rejected {
        digest: Option<String>,
        rejection: Rejection,
    },
}

impl Outcome {
    /// The contract's outcome word.
    pub fn word(&self) -> &'static str {
        match self {
            Outcome::Processed { .. } => "processed",
            Outcome::SkippedDuplicate { .. } => "skipped_duplicate",
            Outcome::Rejected { .. } => "rejected",
        }
    }

    pub(crate) fn digest(&self) -> Option<&str> {
        match self {
            Outcome::Processed { digest, .. } | Outcome::SkippedDuplicate { digest } => {
                Some(digest)
            }
            Outcome::Rejected { digest, .. } => digest.as_deref(),
        }
    }
}

/// What `ingest_file` did, and the file it read as it stood when reading began
/// (the daemon moves it only if it still is that file; a processed file was that
/// file until its parse ended).
#[derive(Debug)]
pub(crate) struct Ingested {
    pub(crate) outcome: Outcome,
    pub(crate) opened: Metadata,
}

/// A fault that is not in the file: the file stays where it is and is tried again.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("read {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("{path} changed while it was being read")]
    Changed { path: String },
    #[error("stopped before the file was done; it stays where it is")]
    Stopped,
}

/// How far the ingest of one file has come, for a progress bar or a log line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the file parsed so far, out of `bytes_total`.
    pub(crate) bytes_done: u64,
    pub(crate) bytes_total: u64,
    /// Events read so far.
    pub(crate) events: u64,
}

/// How one file is ingested.
#[derive(Clone, Copy)]
pub struct Options<'a> {
    /// Files over this many bytes are rejected as `too_large`.
    pub file_bytes_max: u64,
    /// What one event may cost in memory (see `batch::Limits`).
    pub limits: Limits,
    /// Called as the file's events are read (every chunk of them), when given.
    pub progress: Option<&'a dyn Fn(Progress)>,
    /// Classify every event, then roll back instead of committing.
    pub dry_run: bool,
    /// Set from outside (a signal) to abandon the file; its transaction rolls back.
    pub stop: &'a AtomicBool,
    /// Where the time written into the inbox (`ingested_at`) and quarantine is read,
    /// when the batch begins: the caller's clock, so that the daemon's tests choose it.
    pub clock: &'a dyn Clock,
}

/// Records parsed per message from the reader thread, at most.
const RECORDS_PER_CHUNK: usize = 2048;
/// A chunk is sent once its records' text reaches this many bytes, so that large
/// events travel a few at a time.
const CHUNK_BYTES_MAX: usize = 512 * 1024;
/// Chunks parsed ahead of the writer, at most. With the chunk being parsed and the
/// one being written, at most four chunks are alive: four events at the
/// `--event-bytes-max` limit, whatever the file holds.
const CHUNKS_IN_FLIGHT: usize = 2;
/// How often the writer, waiting for the reader, looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

enum Message {
    /// Records, and how many bytes of the file have been read so far.
    Records(Vec<Record>, u64),
    /// The end of the file: its header or why it is rejected.
    End(Result<Header, ReadError>),
}

/// The reader thread: parses the file's content and sends its records in chunks.
/// Stops early when the receiver is gone (the writer failed) or `stop` is set.
fn read_records(
    parsed: &Parsed,
    limits: Limits,
    stop: &AtomicBool,
    sender: crossbeam_channel::Sender<Message>,
) {
    let read = std::cell::Cell::new(0u64);
    let counting = CountingReader {
        inner: parsed.file,
        bytes: &read,
        stop,
    };
    if parsed.gzip {
        // The scan found the content within the limit; a file changed since is
        // caught once the parse has ended (`check_unchanged`), and read no further.
        let content = gunzip(counting).take(parsed.content_bytes_max.saturating_add(1));
        let input = BufReader::with_capacity(READ_BUFFER_BYTES, content);
        send_records(
            BatchReader::new(parsed.format, input, limits),
            &read,
            sender,
        );
    } else {
        let input = BufReader::with_capacity(READ_BUFFER_BYTES, counting);
        send_records(
            BatchReader::new(parsed.format, input, limits),
            &read,
            sender,
        );
    }
}

/// Sends `reader`'s records in chunks, each with how many bytes of the file were
/// read by then, and its end.
fn send_records<R: BufRead>(
    mut reader: BatchReader<R>,
    read: &std::cell::Cell<u64>,
    sender: crossbeam_channel::Sender<Message>,
) {
    let mut chunk = Vec::with_capacity(RECORDS_PER_CHUNK);
    let mut chunk_bytes = 0;
    let result = loop {
        match reader.next_record() {
            Ok(Some(record)) => {
                chunk_bytes += record.raw.len();
                chunk.push(record);
                if chunk.len() == RECORDS_PER_CHUNK || chunk_bytes >= CHUNK_BYTES_MAX {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(RECORDS_PER_CHUNK));
                    chunk_bytes = 0;
                    if sender.send(Message::Records(full, read.get())).is_err() {
                        return;
                    }
                }
            }
            Ok(None) => break Ok(reader.header()),
            Err(error) => break Err(error),
        }
    };
    drop(reader);
    if !chunk.is_empty() && sender.send(Message::Records(chunk, read.get())).is_err() {
        return;
    }
    let _ = sender.send(Message::End(result));
}

/// Ingests the file at `path` (the one-shot commands' entry).
pub fn ingest_file(
    store: &mut Store,
    path: &Path,
    options: Options,
) -> Result<Outcome, IngestError> {
    ingest(store, path, options).map(|ingested| ingested.outcome)
}

/// Ingests the file at `path`: open, one pass for the digest and the encoding, the
/// whole-file rules, the inbox, then stream, check the file is unchanged, finish.
pub(crate) fn ingest(
    store: &mut Store,
    path: &Path,
    options: Options,
) -> Result<Ingested, IngestError> {
    let read_error = |source| read_fault(path, source, options.stop);
    let mut file = open_no_follow(path).map_err(read_error)?;
    let opened = identity_before_reading(&file, options.stop)
        .map_err(read_error)?
        .ok_or_else(|| changed(path))?;
    let outcome = if opened.is_file() {
        ingest_opened(store, path, &mut file, &opened, options)?
    } else {
        let rejection = Rejection::new(RejectReason::UnsupportedType, "not a regular file");
        Outcome::Rejected {
            digest: None,
            rejection,
        }
    };
    Ok(Ingested { outcome, opened })
}

/// The file at `path` changed while it was read.
fn changed(path: &Path) -> IngestError {
    IngestError::Changed {
        path: path.display().to_string(),
    }
}

/// `ingest` of a regular file, opened as `opened` says.
fn ingest_opened(
    store: &mut Store,
    path: &Path,
    file: &mut File,
    opened: &Metadata,
    options: Options,
) -> Result<Outcome, IngestError> {
    let name = names::base_name(path);
    let read_error = |source| read_fault(path, source, options.stop);
    // One pass digests the file and checks its encoding: a re-drop costs that pass
    // alone, and a new file one more, the parse.
    let Scanned {
        digest,
        bytes,
        utf8,
    } = scan_file(file, options.stop).map_err(read_error)?;
    #[cfg(test)]
    tests::after_the_digest_pass(path);
    let rejected = |rejection| {
        Ok(Outcome::Rejected {
            digest: Some(digest.clone()),
            rejection,
        })
    };
    if bytes != opened.len() {
        return Err(changed(path));
    }
    let format = match preflight(&name, bytes, options.file_bytes_max) {
        Ok(format) => format,
        Err(rejection) => return rejected(rejection),
    };
    if store.contains_batch(&digest)? {
        return Ok(Outcome::SkippedDuplicate { digest });
    }
    // A gzip file's content is its decompressed bytes: one more pass reads them
    // for their size and encoding, in bounded memory whatever they come to.
    let gzip = crate::batch::is_gzip(&name);
    let utf8 = match gzip {
        false => utf8,
        true => {
            match gunzip_scan(file, options.file_bytes_max, options.stop).map_err(read_error)? {
                Ok(utf8) => utf8,
                Err(rejection) => return rejected(rejection),
            }
        }
    };
    // A new file: is its content UTF-8 throughout? (A committed one's was.)
    if let Some(rejection) = not_utf8(file, utf8, gzip, options.stop).map_err(read_error)? {
        return rejected(rejection);
    }
    file.rewind().map_err(read_error)?;
    let parsed = Parsed {
        file,
        opened,
        format,
        gzip,
        content_bytes_max: options.file_bytes_max,
        bytes,
    };
    match stream(store, parsed, &digest, &name, options)? {
        Ok(outcome) => Ok(outcome),
        Err(rejection) => rejected(rejection),
    }
}

/// Why a file is rejected whose content is not UTF-8 throughout, if it is not: a
/// bad byte's line is found by reading the content again from its start.
fn not_utf8(
    file: &mut File,
    utf8: Utf8Check,
    gzip: bool,
    stop: &AtomicBool,
) -> io::Result<Option<Rejection>> {
    match utf8.finish() {
        Utf8Verdict::Utf8 => Ok(None),
        Utf8Verdict::Cut(rejection) => Ok(Some(rejection)),
        Utf8Verdict::InvalidAt(at) => {
            file.rewind()?;
            let line = match gzip {
                false => find_line(&mut *file, LineOf::new(at), stop)?,
                true => find_line(gunzip(file), LineOf::new(at), stop)?,
            };
            Ok(Some(line.not_utf8()))
        }
    }
}

/// The decompressed bytes of the gzip file `input` (every member, in order).
fn gunzip<R: Read>(input: R) -> MultiGzDecoder<BufReader<R>> {
    MultiGzDecoder::new(BufReader::with_capacity(READ_BUFFER_BYTES, input))
}

/// The two bytes every gzip stream begins with.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// One pass over a gzip file's decompressed bytes for their encoding; or why the
/// file is rejected: a stream cut short (still arriving), one that is not gzip or
/// is corrupt (`bad_gzip`), more than `content_bytes_max` bytes (`too_large`, found
/// before more are read), or no bytes at all (`empty`). Memory holds one buffer.
fn gunzip_scan(
    file: &mut File,
    content_bytes_max: u64,
    stop: &AtomicBool,
) -> io::Result<Result<Utf8Check, Rejection>> {
    // A file that does not begin as gzip does is no gzip stream cut short.
    file.rewind()?;
    let mut magic = Vec::with_capacity(GZIP_MAGIC.len());
    (&mut *file)
        .take(GZIP_MAGIC.len() as u64)
        .read_to_end(&mut magic)?;
    if !GZIP_MAGIC.starts_with(&magic) {
        return Ok(Err(crate::batch::bad_gzip("it does not begin with 1f 8b")));
    }
    file.rewind()?;
    let mut utf8 = Utf8Check::default();
    let mut bytes = 0u64;
    let mut too_large = false;
    let read = each_chunk(gunzip(&mut *file), stop, |chunk| {
        bytes += chunk.len() as u64;
        too_large = bytes > content_bytes_max;
        if too_large {
            return ControlFlow::Break(());
        }
        utf8.feed(chunk);
        ControlFlow::Continue(())
    });
    if let Err(error) = read {
        return match crate::batch::gzip_fault(&error) {
            Some(rejection) => Ok(Err(rejection)),
            None => Err(error),
        };
    }
    if too_large {
        return Ok(Err(crate::batch::gzip_too_large(content_bytes_max)));
    }
    if bytes == 0 {
        return Ok(Err(Rejection::new(
            crate::batch::RejectReason::Empty,
            "the gzip stream holds no bytes",
        )));
    }
    Ok(Ok(utf8))
}

/// The file a new batch is parsed from, and what the digest pass found it to be.
struct Parsed<'a> {
    /// Rewound to its start.
    file: &'a File,
    /// Its `fstat` before the digest pass.
    opened: &'a Metadata,
    format: Format,
    /// The file is gzip: its content is the decompressed stream, which the scan
    /// found to hold at most `content_bytes_max` bytes.
    gzip: bool,
    content_bytes_max: u64,
    /// The bytes the digest pass read.
    bytes: u64,
}

/// Streams the records of a new batch into one store transaction and finishes it:
/// the outcome, or why the whole file is rejected. Parsing runs on a thread of its
/// own while this one writes to the database; the bounded channel keeps memory flat
/// whatever the size of the file. Once the parse has ended, and before anything
/// is decided from it, the open file must still be the one digested
/// (`check_unchanged`).
fn stream(
    store: &mut Store,
    parsed: Parsed,
    digest: &str,
    name: &str,
    options: Options,
) -> Result<Result<Outcome, Rejection>, IngestError> {
    let begun = if options.dry_run {
        store.begin_dry_run(digest)
    } else {
        store.begin(digest, name, &format_millis(options.clock.wall()))
    };
    let Some(mut batch) = begun.map_err(|error| store_error(error, options.stop))? else {
        return Ok(Ok(Outcome::SkippedDuplicate {
            digest: digest.to_owned(),
        }));
    };
    let header = stage_records(&mut batch, &parsed, name, options)?;
    // The reader thread has ended: every byte the events came from has been read.
    check_unchanged(parsed.file, parsed.opened, name, options.stop)?;
    let header = match header {
        Ok(header) => header,
        Err(rejection) => return Ok(Err(rejection)),
    };
    let finished = batch
        .finish(&header, options.stop)
        .map_err(|error| store_error(error, options.stop))?;
    if !options.dry_run {
        store.after_commit(&finished.counts);
    }
    finished.case_variants.log(&names::escaped(name));
    let resent_batch_id = if finished.resent {
        header.batch_id
    } else {
        None
    };
    Ok(Ok(Outcome::Processed {
        digest: digest.to_owned(),
        counts: finished.counts,
        resent_batch_id,
        reasons: finished.reasons,
    }))
}

/// A store error as `ingest` reports it: `Stopped` when the process is stopping.
fn store_error(error: StoreError, stop: &AtomicBool) -> IngestError {
    match error {
        StoreError::Stopped => IngestError::Stopped,
        _ if stop.load(Ordering::Relaxed) => IngestError::Stopped,
        error => IngestError::Store(error),
    }
}

/// Parses the file on a reader thread and stages its records into `batch` chunk by
/// chunk, as they come; the file's header at its end, or why it is rejected.
fn stage_records(
    batch: &mut Batch<'_>,
    parsed: &Parsed,
    name: &str,
    options: Options,
) -> Result<Result<Header, Rejection>, IngestError> {
    let (sender, receiver) = crossbeam_channel::bounded(CHUNKS_IN_FLIGHT);
    let mut events = 0u64;
    std::thread::scope(|scope| {
        scope.spawn(|| read_records(parsed, options.limits, options.stop, sender));
        // Owned here, so that an early return drops it and a reader blocked on a
        // full channel ends instead of being waited for forever.
        let receiver = receiver;
        loop {
            let (chunk, read) = match next_message(&receiver, name, options.stop)? {
                Message::Records(chunk, read) => (chunk, read),
                Message::End(result) => return end_of_file(result, name, options.stop),
            };
            batch
                .stage(&chunk)
                .map_err(|error| store_error(error, options.stop))?;
            events += chunk.len() as u64;
            if let Some(progress) = options.progress {
                progress(Progress {
                    bytes_done: read.min(parsed.bytes),
                    bytes_total: parsed.bytes,
                    events,
                });
            }
        }
    })
}

/// The reader thread's next message, looking at the stop flag while it waits.
fn next_message(
    receiver: &crossbeam_channel::Receiver<Message>,
    name: &str,
    stop: &AtomicBool,
) -> Result<Message, IngestError> {
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(IngestError::Stopped);
        }
        match receiver.recv_timeout(STOP_POLL) {
            Ok(message) => return Ok(message),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                let gone = io::Error::other("the reader thread ended before the file did");
                return Err(read_fault(Path::new(name), gone, stop));
            }
        }
    }
}

/// What the reader thread found at the end of the file: its header, why it is
/// rejected, or a read that failed.
fn end_of_file(
    result: Result<Header, ReadError>,
    name: &str,
    stop: &AtomicBool,
) -> Result<Result<Header, Rejection>, IngestError> {
    match result {
        Ok(header) => Ok(Ok(header)),
        Err(ReadError::Io(source)) => Err(read_fault(Path::new(name), source, stop)),
        Err(ReadError::Rejected(rejection)) => Ok(Err(rejection)),
    }
}

/// Why a file is rejected whose value the database refused as too big
/// (`FaultClass::InFile`), after `tries` tries with that error.
pub(crate) fn refused_by_database(error: &StoreError, tries: u32) -> Rejection {
    let times = if tries == 1 {
        "once".to_owned()
    } else {
        format!("{tries} times")
    };
    Rejection::new(
        RejectReason::TooLarge,
        format!(
            "the database refused this file {times} ({error}); an event or value in it is \
             too big to store: lower --event-bytes-max or split the file"
        ),
    )
}

/// A read that failed: `Stopped` when it failed because the process is stopping.
fn read_fault(path: &Path, source: io::Error, stop: &AtomicBool) -> IngestError {
    if stop.load(Ordering::Relaxed) {
        return IngestError::Stopped;
    }
    IngestError::Read {
        path: path.display().to_string(),
        source,
    }
}

/// Opens a file for reading without following a symbolic link and without blocking
/// on a FIFO, so that no entry of incoming/ can make spoolite hang.
pub(crate) fn open_no_follow(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// What the digest pass found: the SHA-256 (lowercase hex) and length of the bytes
/// it read, and whether they are UTF-8.
struct Scanned {
    digest: String,
    bytes: u64,
    utf8: Utf8Check,
}

/// The one pass over a file before the inbox is asked: its digest, its length and
/// its encoding, from where it stands to its end; gives up when `stop` is set.
fn scan_file(file: &mut File, stop: &AtomicBool) -> io::Result<Scanned> {
    let mut hasher = Sha256::new();
    let mut utf8 = Utf8Check::default();
    let mut bytes = 0u64;
    each_chunk(file, stop, |chunk| {
        hasher.update(chunk);
        utf8.feed(chunk);
        bytes += chunk.len() as u64;
        ControlFlow::Continue(())
    })?;
    Ok(Scanned {
        digest: hex::encode(hasher.finalize()),
        bytes,
        utf8,
    })
}

/// Feeds `line` the file from where it stands until it has seen the bad byte: the
/// second read a file rejected as `not_utf8` costs, so that the digest pass need not
/// count lines.
fn find_line(file: impl Read, mut line: LineOf, stop: &AtomicBool) -> io::Result<LineOf> {
    each_chunk(file, stop, |chunk| {
        line.feed(chunk);
        match line.done() {
            true => ControlFlow::Break(()),
            false => ControlFlow::Continue(()),
        }
    })?;
    Ok(line)
}

/// Reads `input` to its end (or until `each` breaks) a buffer at a time, handing
/// `each` every chunk; gives up when `stop` is set.
fn each_chunk(
    mut input: impl Read,
    stop: &AtomicBool,
    mut each: impl FnMut(&[u8]) -> ControlFlow<()>,
) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(io::Error::other("stopping"));
        }
        match input.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                if each(&buf[..n]).is_break() {
                    return Ok(());
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

// Why an identity check stands in for a second SHA-256 of the parse pass.
//
// The parse reads the file a second time, and what it commits must be the bytes the
// digest pass hashed. Hashing the parse's bytes again proved that for any writer;
// instead, the open file's identity (`FileIdentity`: device, inode, size,
// modification and change times, to the nanosecond) is taken by `fstat` before the
// digest pass and again, on the same descriptor, once the parse has read its last
// byte (`check_unchanged`), before the commit. Reads through one descriptor read
// one inode, so a replacement by rename cannot mix files; a write into the inode
// (`write`, `truncate`, `fallocate`, a clone or copy range, `utimensat` setting the
// modification time back) sets its change time to the current time, which no user
// can choose. So when both `fstat`s agree, nothing wrote the file in between,
// except in the cases below, which the second hash caught and this check does not:
//
// - A write in the same clock tick as the change before the first `fstat`. The
//   kernel stamps from a coarse clock (one timer tick, 1 to 10 ms; before Linux
//   6.13's multigrain timestamps, even on a filesystem that keeps nanoseconds, as
//   ext4, XFS, Btrfs and tmpfs do), truncated to the filesystem's granularity
//   (a second on ext4 with 128-byte inodes): a second write in that tick or second
//   leaves the change time as it was. `identity_before_reading` closes this: it
//   takes the identity only once the coarse clock, read before the `fstat`, has
//   passed the change time's granule, so any later write gets a later time.
// - Writes through a shared writable memory map into a page that is already dirty:
//   the times are updated when a clean page is first written, not on every store.
//   No SFTP server writes so; a program that maps a file in incoming/ and keeps
//   storing into its dirty pages is caught neither here nor before the move.
// - A filesystem that does not report the inode as it is (a network filesystem's
//   cached attributes, a FUSE filesystem), or a write to the block device beneath
//   it. incoming/ is a local folder on the same filesystem as archive/.
//
// The check before the move (`spool::Spool::archive`) compares the same identity
// with the file at its name, and rests on the same reasoning.

/// How many nanoseconds a change time may be cut down to by its filesystem, at most:
/// the largest power of ten, up to a second, that divides its nanoseconds. A
/// filesystem that keeps nanoseconds gives 1 for nine files in ten; one that keeps
/// seconds always gives a second.
fn change_time_granule_ns(ctime_ns: i64) -> i64 {
    let mut granule = 1;
    while granule < 1_000_000_000 && ctime_ns % (granule * 10) == 0 {
        granule *= 10;
    }
    granule
}

/// How long `identity_before_reading` waits for a file's change time to pass, at
/// most: a change time granule of a second, and a tick.
const CHANGE_TIME_WAIT_MAX: Duration = Duration::from_millis(1100);

/// The clock the kernel stamps file times from, in nanoseconds since the epoch.
fn coarse_clock_ns() -> io::Result<i128> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut now) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(i128::from(now.tv_sec) * 1_000_000_000 + i128::from(now.tv_nsec))
}

/// The `fstat` of the open file, taken once its change time is in the past at its
/// filesystem's granularity (see the reasoning above): then any later write into
/// the file changes its identity. Waits while the file changed within the current
/// tick or granule; `None` when it kept changing for `CHANGE_TIME_WAIT_MAX`. A
/// change time more than a second ahead of the clock (the clock was set back) is
/// taken as it is: a later write gets an earlier time, which differs all the same.
fn identity_before_reading(file: &File, stop: &AtomicBool) -> io::Result<Option<Metadata>> {
    // The system's clocks, not `Options::clock`: this waits for the kernel's clock,
    // the one that stamps the file, and only for as long as a tick or a granule.
    let started = std::time::Instant::now();
    loop {
        let clock = coarse_clock_ns()?;
        let meta = file.metadata()?;
        let ctime = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
        let passed = ctime + i128::from(change_time_granule_ns(meta.ctime_nsec()));
        if clock >= passed || ctime > clock + 1_000_000_000 {
            return Ok(Some(meta));
        }
        if started.elapsed() >= CHANGE_TIME_WAIT_MAX {
            return Ok(None);
        }
        if stop.load(Ordering::Relaxed) {
            return Err(io::Error::other("stopping"));
        }
        let wait = u64::try_from(passed - clock).unwrap_or(u64::MAX);
        std::thread::sleep(Duration::from_nanos(wait).clamp(Duration::from_millis(1), STOP_POLL));
    }
}

/// `IngestError::Changed` unless the open `file` is still the version `opened`
/// describes (see the reasoning above): nothing wrote it while it was read twice.
fn check_unchanged(
    file: &File,
    opened: &Metadata,
    name: &str,
    stop: &AtomicBool,
) -> Result<(), IngestError> {
    let now = file
        .metadata()
        .map_err(|source| read_fault(Path::new(name), source, stop))?;
    if FileIdentity::of(&now) == FileIdentity::of(opened) {
        Ok(())
    } else {
        Err(IngestError::Changed {
            path: name.to_owned(),
        })
    }
}

/// Counts the bytes that pass through it, for progress; gives up when `stop` is set.
struct CountingReader<'a> {
    inner: &'a File,
    bytes: &'a std::cell::Cell<u64>,
    stop: &'a AtomicBool,
}

impl Read for CountingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(io::Error::other("stopping"));
        }
        let n = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::{Cell, RefCell};
    use std::io::Write;

    /// What a test does to the file between the digest pass and the parse.
    type Hook = Box<dyn FnOnce(&Path)>;

    thread_local! {
        /// Run by `ingest` on this thread between the digest pass and the parse.
        static AFTER_THE_DIGEST_PASS: RefCell<Option<Hook>> =
            const { RefCell::new(None) };
    }

    pub(super) fn after_the_digest_pass(path: &Path) {
        if let Some(hook) = AFTER_THE_DIGEST_PASS.with(|hook| hook.borrow_mut().take()) {
            hook(path);
        }
    }

    const BATCH: &str = concat!(
        r#"{"flight_id":"BA0117-20261129","event_kind":"off_blocks","instant_utc":"2026-11-29T10:05:00Z","payload":{"tail":"G-XWBA"}}"#,
        "\n",
        r#"{"flight_id":"BA0117-20261129","event_kind":"landing","instant_utc":"2026-11-29T12:05:00Z","payload":{"tail":"G-XWBA"}}"#,
        "\n",
    );

    fn sha256(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    /// Overwrites `path` from its start with `content` of the same length, without
    /// truncating or replacing it, and sets its modification time back to what it
    /// was, as an SFTP client that preserves times would.
    fn rewrite_in_place(path: &Path, content: &str) {
        let before = std::fs::metadata(path)
            .expect("stat")
            .modified()
            .expect("mtime");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open for rewrite");
        assert_eq!(file.metadata().expect("stat").len(), content.len() as u64);
        file.write_all(content.as_bytes()).expect("rewrite");
        file.set_modified(before)
            .expect("set the modification time back");
    }

    fn ingest_with(
        store: &mut Store,
        path: &Path,
        progress: Option<&dyn Fn(Progress)>,
    ) -> Result<Outcome, IngestError> {
        let stop = AtomicBool::new(false);
        let options = Options {
            file_bytes_max: FILE_BYTES_MAX_DEFAULT,
            limits: Limits::default(),
            progress,
            dry_run: false,
            stop: &stop,
            clock: &crate::clock::SystemClock,
        };
        ingest_file(store, path, options)
    }

    struct Site {
        _dir: tempfile::TempDir,
        store: Store,
        path: std::path::PathBuf,
    }

    fn site() -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = crate::store::Db::Sqlite(dir.path().join("spoolite.db"));
        let store = Store::open(&db).expect("open the store");
        let path = dir.path().join("batch.ndjson");
        std::fs::write(&path, BATCH).expect("write the batch");
        Site {
            _dir: dir,
            store,
            path,
        }
    }

    fn rewritten() -> String {
        let rewritten = BATCH.replacen("G-XWBA", "G-XWBB", 1);
        assert_eq!(rewritten.len(), BATCH.len());
        rewritten
    }

    #[test]
    fn a_file_rewritten_in_place_after_its_parse_is_not_committed_under_its_first_digest() {
        let mut site = site();
        let path = site.path.clone();
        let done = Cell::new(false);
        // A file this small is sent in one chunk once the parse has read its end:
        // the rewrite lands after every byte was parsed and before the commit.
        let rewrite = |_: Progress| {
            if !done.replace(true) {
                rewrite_in_place(&path, &rewritten());
            }
        };
        match ingest_with(&mut site.store, &site.path, Some(&rewrite)) {
            Err(IngestError::Changed { .. }) => {}
            other => panic!("expected Changed, got {other:?}"),
        }
        assert!(done.get(), "the rewrite ran");
        assert!(
            !site
                .store
                .contains_batch(&sha256(BATCH.as_bytes()))
                .expect("inbox")
        );
        assert_eq!(site.store.totals().expect("totals").batches, 0);
        // Taken again, the file goes in with the digest of what it now holds.
        let digest = match ingest_with(&mut site.store, &site.path, None) {
            Ok(Outcome::Processed { digest, .. }) => digest,
            other => panic!("expected Processed, got {other:?}"),
        };
        assert_eq!(digest, sha256(rewritten().as_bytes()));
        assert_eq!(site.store.totals().expect("totals").batches, 1);
    }

    #[test]
    fn a_file_rewritten_in_place_between_the_digest_and_the_parse_is_not_committed() {
        let mut site = site();
        AFTER_THE_DIGEST_PASS.with(|hook| {
            *hook.borrow_mut() = Some(Box::new(|path: &Path| {
                rewrite_in_place(path, &rewritten());
            }));
        });
        let result = ingest_with(&mut site.store, &site.path, None);
        assert!(
            AFTER_THE_DIGEST_PASS.with(|hook| hook.borrow().is_none()),
            "the rewrite ran"
        );
        match result {
            Err(IngestError::Changed { .. }) => {}
            other => panic!("expected Changed, got {other:?}"),
        }
        assert_eq!(site.store.totals().expect("totals").batches, 0);
    }

    #[test]
    fn a_file_appended_to_while_it_is_parsed_is_not_committed() {
        let mut site = site();
        let path = site.path.clone();
        let done = Cell::new(false);
        let append = |_: Progress| {
            if !done.replace(true) {
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .open(&path)
                    .expect("open to append");
                file.write_all(BATCH.as_bytes()).expect("append");
            }
        };
        match ingest_with(&mut site.store, &site.path, Some(&append)) {
            Err(IngestError::Changed { .. }) => {}
            other => panic!("expected Changed, got {other:?}"),
        }
        assert_eq!(site.store.totals().expect("totals").batches, 0);
    }

    #[test]
    fn an_unchanged_file_is_committed_under_its_digest() {
        let mut site = site();
        match ingest_with(&mut site.store, &site.path, None) {
            Ok(Outcome::Processed { digest, counts, .. }) => {
                assert_eq!(digest, sha256(BATCH.as_bytes()));
                assert_eq!(counts.inserted, 2);
            }
            other => panic!("expected Processed, got {other:?}"),
        }
    }

    #[test]
    fn the_change_time_granule_is_the_largest_power_of_ten_that_divides_it() {
        assert_eq!(change_time_granule_ns(123_456_789), 1);
        assert_eq!(change_time_granule_ns(123_456_780), 10);
        assert_eq!(change_time_granule_ns(123_000_000), 1_000_000);
        assert_eq!(change_time_granule_ns(500_000_000), 100_000_000);
        assert_eq!(change_time_granule_ns(0), 1_000_000_000);
    }

    #[test]
    fn a_file_just_changed_is_taken_only_once_the_clock_has_passed_its_change_time() {
        let site = site();
        let file = open_no_follow(&site.path).expect("open");
        let stop = AtomicBool::new(false);
        let meta = identity_before_reading(&file, &stop)
            .expect("fstat")
            .expect("the file is still");
        let ctime = i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec());
        let granule = i128::from(change_time_granule_ns(meta.ctime_nsec()));
        assert!(coarse_clock_ns().expect("clock") >= ctime + granule);
    }

    mod gzip_never_retries {
        //! Whatever a `.gz` file holds, the scan of its content ends in the content or
        //! a rejection the file earns: never a read fault, which would have the
        //! daemon try the file again and again.

        use super::*;
        use proptest::prelude::*;

        /// The scan of `bytes` as a gzip file, under a limit of `limit` bytes.
        fn scan(bytes: &[u8], limit: u64) -> io::Result<Result<Utf8Check, Rejection>> {
            let mut file = tempfile::tempfile().expect("temp file");
            file.write_all(bytes).expect("write");
            gunzip_scan(&mut file, limit, &AtomicBool::new(false))
        }

        /// A gzip stream of `content`.
        fn gzip(content: &[u8]) -> Vec<u8> {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(content).expect("compress");
            encoder.finish().expect("compress")
        }

        fn earned(result: io::Result<Result<Utf8Check, Rejection>>) -> Result<(), String> {
            use crate::batch::RejectReason::*;
            match result {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(rejection))
                    if matches!(rejection.reason, Truncated | BadGzip | Empty | TooLarge) =>
                {
                    Ok(())
                }
                Ok(Err(rejection)) => Err(format!("rejected as {:?}", rejection.reason)),
                Err(error) => Err(format!("a read fault: {error} ({:?})", error.kind())),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(500))]

            #[test]
            fn any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
                prop_assert_eq!(earned(scan(&bytes, 1 << 20)), Ok(()));
            }

            #[test]
            fn a_sound_stream_cut_or_with_one_byte_changed(
                content in prop::collection::vec(any::<u8>(), 0..400),
                at in any::<prop::sample::Index>(),
                flip in 1u8..=255,
                cut in any::<bool>(),
            ) {
                let mut bytes = gzip(&content);
                let at = at.index(bytes.len());
                if cut {
                    bytes.truncate(at);
                } else {
                    bytes[at] ^= flip;
                }
                prop_assert_eq!(earned(scan(&bytes, 300)), Ok(()));
            }
        }
    }
}
