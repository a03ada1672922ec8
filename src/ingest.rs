//! One batch file into the database, in its steps: open it safely, digest it, the
//! whole-file rules, the inbox, then stream its records into one store transaction
//! and finish it. Moves no files; the daemon and the `ingest` command decide what
//! happens next.

use std::fs::{File, Metadata};
use std::io::{self, BufReader, Read, Seek};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::batch::{
    BatchReader, Format, Header, Limits, ReadError, Record, RejectReason, Rejection, Utf8Check,
    preflight,
};
use crate::clock::now_utc;
use crate::names;
use crate::store::{Counts, Reasons, Store, StoreError};

/// The largest file ingested unless `--file-bytes-max` says otherwise: 2 GiB.
pub const FILE_BYTES_MAX_DEFAULT: u64 = 2 << 30;

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

    pub fn digest(&self) -> Option<&str> {
        match self {
            Outcome::Processed { digest, .. } | Outcome::SkippedDuplicate { digest } => {
                Some(digest)
            }
            Outcome::Rejected { digest, .. } => digest.as_deref(),
        }
    }
}

/// What `ingest_file` did, and the file it read as it stood when reading began
/// (the daemon moves it only if it still is that file).
#[derive(Debug)]
pub struct Ingested {
    pub outcome: Outcome,
    pub opened: Metadata,
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
    pub bytes_done: u64,
    pub bytes_total: u64,
    /// Events read so far.
    pub events: u64,
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
    /// The end of the file: its header or why it is rejected, and the digest and
    /// length of the bytes the reader saw.
    End {
        result: Result<Header, ReadError>,
        digest: String,
        bytes: u64,
    },
}

/// The reader thread: parses `file` and sends its records in chunks. Stops early
/// when the receiver is gone (the writer failed) or `stop` is set.
fn read_records(
    file: File,
    format: Format,
    limits: Limits,
    stop: &AtomicBool,
    sender: crossbeam_channel::Sender<Message>,
) {
    let read = std::cell::Cell::new(0u64);
    let mut hashing = HashingReader {
        inner: file,
        hasher: Sha256::new(),
        bytes: &read,
        stop,
    };
    let mut reader = BatchReader::new(
        format,
        BufReader::with_capacity(READ_BUFFER_BYTES, &mut hashing),
        limits,
    );
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
    let result = result.and_then(|header| {
        // Whatever the reader left unread (only whitespace can remain) still counts.
        io::copy(&mut hashing, &mut io::sink())?;
        Ok(header)
    });
    if !chunk.is_empty() && sender.send(Message::Records(chunk, read.get())).is_err() {
        return;
    }
    let digest = hex::encode(hashing.hasher.finalize());
    let _ = sender.send(Message::End {
        result,
        digest,
        bytes: read.get(),
    });
}

/// Ingests the file at `path` (the one-shot commands' entry).
pub fn ingest_file(
    store: &mut Store,
    path: &Path,
    options: Options,
) -> Result<Outcome, IngestError> {
    ingest(store, path, options).map(|ingested| ingested.outcome)
}

/// Ingests the file at `path`: open, digest, the whole-file rules, the inbox, then
/// stream and finish.
pub fn ingest(store: &mut Store, path: &Path, options: Options) -> Result<Ingested, IngestError> {
    let name = names::base_name(path);
    let read_error = |source| read_fault(path, source, options.stop);
    let mut file = open_no_follow(path).map_err(read_error)?;
    let opened = file.metadata().map_err(read_error)?;
    let done = |outcome| {
        Ok(Ingested {
            outcome,
            opened: opened.clone(),
        })
    };
    if !opened.is_file() {
        let rejection = Rejection::new(RejectReason::UnsupportedType, "not a regular file");
        return done(Outcome::Rejected {
            digest: None,
            rejection,
        });
    }
    // The first pass only digests, so that a re-drop costs one SHA-256 of the file.
    let (digest, bytes) = digest_file(&mut file, options.stop).map_err(read_error)?;
    let rejected = |rejection| {
        done(Outcome::Rejected {
            digest: Some(digest.clone()),
            rejection,
        })
    };
    if bytes != opened.len() {
        return Err(IngestError::Changed {
            path: path.display().to_string(),
        });
    }
    let format = match preflight(&name, bytes, options.file_bytes_max) {
        Ok(format) => format,
        Err(rejection) => return rejected(rejection),
    };
    if store.contains_batch(&digest)? {
        return done(Outcome::SkippedDuplicate { digest });
    }
    // A new file: is it UTF-8 throughout? (A committed one was.)
    file.rewind().map_err(read_error)?;
    if let Some(rejection) = check_file_utf8(&mut file, options.stop).map_err(read_error)? {
        return rejected(rejection);
    }
    file.rewind().map_err(read_error)?;
    let outcome = match stream(store, file, format, &digest, &name, bytes, options)? {
        Ok(outcome) => outcome,
        Err(rejection) => return rejected(rejection),
    };
    done(outcome)
}

/// Streams the records of a new batch into one store transaction and finishes it:
/// the outcome, or why the whole file is rejected. Parsing runs on a thread of its
/// own while this one writes to SQLite; the bounded channel keeps memory flat
/// whatever the size of the file.
fn stream(
    store: &mut Store,
    file: File,
    format: Format,
    digest: &str,
    name: &str,
    bytes: u64,
    options: Options,
) -> Result<Result<Outcome, Rejection>, IngestError> {
    let stopped = |error: StoreError| match error {
        StoreError::Stopped => IngestError::Stopped,
        _ if options.stop.load(Ordering::Relaxed) => IngestError::Stopped,
        error => IngestError::Store(error),
    };
    let begun = if options.dry_run {
        store.begin_dry_run(digest)
    } else {
        store.begin(digest, name, &now_utc())
    };
    let Some(mut batch) = begun.map_err(stopped)? else {
        return Ok(Ok(Outcome::SkippedDuplicate {
            digest: digest.to_owned(),
        }));
    };
    let (sender, receiver) = crossbeam_channel::bounded(CHUNKS_IN_FLIGHT);
    let mut events = 0u64;
    let header = std::thread::scope(|scope| {
        scope.spawn(|| read_records(file, format, options.limits, options.stop, sender));
        // Owned here, so that an early return drops it and a reader blocked on a
        // full channel ends instead of being waited for forever.
        let receiver = receiver;
        loop {
            if options.stop.load(Ordering::Relaxed) {
                return Err(IngestError::Stopped);
            }
            let message = match receiver.recv_timeout(STOP_POLL) {
                Ok(message) => message,
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => continue,
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                    let gone = io::Error::other("the reader thread ended before the file did");
                    return Err(read_fault(Path::new(name), gone, options.stop));
                }
            };
            let (chunk, read) = match message {
                Message::Records(chunk, read) => (chunk, read),
                Message::End {
                    result,
                    digest: read_digest,
                    bytes: read_bytes,
                } => {
                    let header = match result {
                        Ok(header) => header,
                        Err(ReadError::Io(source)) => {
                            return Err(read_fault(Path::new(name), source, options.stop));
                        }
                        Err(ReadError::Rejected(rejection)) => return Ok(Err(rejection)),
                    };
                    if read_digest != digest || read_bytes != bytes {
                        return Err(IngestError::Changed {
                            path: name.to_owned(),
                        });
                    }
                    return Ok(Ok(header));
                }
            };
            batch.stage(&chunk).map_err(stopped)?;
            events += chunk.len() as u64;
            if let Some(progress) = options.progress {
                progress(Progress {
                    bytes_done: read.min(bytes),
                    bytes_total: bytes,
                    events,
                });
            }
        }
    })?;
    let header = match header {
        Ok(header) => header,
        Err(rejection) => return Ok(Err(rejection)),
    };
    let finished = batch.finish(&header, options.stop).map_err(stopped)?;
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

/// Why a file is rejected whose value the database refused as too big
/// (`FaultClass::InFile`), after `tries` tries with that error.
pub fn refused_by_database(error: &StoreError, tries: u32) -> Rejection {
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
pub fn open_no_follow(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

/// Calls `each` with successive chunks of `file` from where it stands to its end;
/// gives up when `stop` is set.
fn for_each_chunk(
    file: &mut File,
    stop: &AtomicBool,
    mut each: impl FnMut(&[u8]),
) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(io::Error::other("stopping"));
        }
        match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => each(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The SHA-256 (lowercase hex) and length of a file.
fn digest_file(file: &mut File, stop: &AtomicBool) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    for_each_chunk(file, stop, |chunk| {
        hasher.update(chunk);
        bytes += chunk.len() as u64;
    })?;
    Ok((hex::encode(hasher.finalize()), bytes))
}

/// Whether a file is UTF-8 throughout; if not, why it is rejected (`batch::Utf8Check`
/// holds the rule).
fn check_file_utf8(file: &mut File, stop: &AtomicBool) -> io::Result<Option<Rejection>> {
    let mut check = Utf8Check::default();
    for_each_chunk(file, stop, |chunk| check.feed(chunk))?;
    Ok(check.finish())
}

/// Hashes what passes through it, so the second pass proves it read the bytes the
/// first pass digested; counts them for progress; gives up when `stop` is set.
struct HashingReader<'a> {
    inner: File,
    hasher: Sha256,
    bytes: &'a std::cell::Cell<u64>,
    stop: &'a AtomicBool,
}

impl Read for HashingReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(io::Error::other("stopping"));
        }
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}
