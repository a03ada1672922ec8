//! One batch file into the database: open it safely, digest it, skip it when the
//! inbox already has it, otherwise stream its records into one store transaction.
//! Moves no files; the daemon and the `ingest` command decide what happens next.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use sha2::{Digest, Sha256};

use crate::batch::{
    BatchReader, Format, Header, Limits, ReadError, Record, RejectReason, Rejection,
};
use crate::clock::now_utc;
use crate::store::{Counts, Store, StoreError};

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

/// Records parsed per message from the reader thread.
const RECORDS_PER_CHUNK: usize = 1024;
/// Chunks parsed ahead of the writer, at most.
const CHUNKS_IN_FLIGHT: usize = 4;

enum Message {
    Records(Vec<Record>),
    /// The end of the file: its header or why it is rejected, and the digest and
    /// length of the bytes the reader saw.
    End {
        result: Result<Header, ReadError>,
        digest: String,
        bytes: u64,
    },
}

/// The reader thread: parses `file` and sends its records in chunks. Stops early
/// when the receiver is gone (the writer failed).
fn read_records(
    file: File,
    format: Format,
    limits: Limits,
    sender: crossbeam_channel::Sender<Message>,
) {
    let mut hashing = HashingReader {
        inner: file,
        hasher: Sha256::new(),
        bytes: 0,
    };
    let mut reader = BatchReader::new(
        format,
        BufReader::with_capacity(READ_BUFFER_BYTES, &mut hashing),
        limits,
    );
    let mut chunk = Vec::with_capacity(RECORDS_PER_CHUNK);
    let result = loop {
        match reader.next_record() {
            Ok(Some(record)) => {
                chunk.push(record);
                if chunk.len() == RECORDS_PER_CHUNK {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(RECORDS_PER_CHUNK));
                    if sender.send(Message::Records(full)).is_err() {
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
    if !chunk.is_empty() && sender.send(Message::Records(chunk)).is_err() {
        return;
    }
    let digest = hex::encode(hashing.hasher.finalize());
    let _ = sender.send(Message::End {
        result,
        digest,
        bytes: hashing.bytes,
    });
}

/// Ingests the file at `path`.
pub fn ingest_file(
    store: &mut Store,
    path: &Path,
    options: Options,
) -> Result<Outcome, IngestError> {
    let file_bytes_max = options.file_bytes_max;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let read_error = |source| IngestError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut file = open_no_follow(path).map_err(read_error)?;
    let meta = file.metadata().map_err(read_error)?;
    if !meta.is_file() {
        let rejection = Rejection::new(RejectReason::UnsupportedType, "not a regular file");
        return Ok(Outcome::Rejected {
            digest: None,
            rejection,
        });
    }
    let size = meta.len();
    // The first pass only digests, so that a re-drop costs one SHA-256 of the file.
    let (digest, bytes) = digest_file(&mut file).map_err(read_error)?;
    let rejected = |rejection| {
        Ok(Outcome::Rejected {
            digest: Some(digest.clone()),
            rejection,
        })
    };

    let Some(format) = Format::from_name(&name) else {
        return rejected(Rejection::new(
            RejectReason::UnsupportedType,
            format!("{name:?} does not end in .json, .ndjson or .jsonl"),
        ));
    };
    if size > file_bytes_max {
        return rejected(Rejection::new(
            RejectReason::TooLarge,
            format!(
                "the file is {size} bytes, over the limit of {file_bytes_max} (--file-bytes-max)"
            ),
        ));
    }
    if bytes == 0 {
        return rejected(Rejection::new(
            RejectReason::Empty,
            "the file is empty (0 bytes)",
        ));
    }
    if store.contains_batch(&digest)? {
        return Ok(Outcome::SkippedDuplicate { digest });
    }
    // A new file: is it UTF-8 throughout? (A committed one was.)
    file.rewind().map_err(read_error)?;
    let utf8 = check_file_utf8(&mut file).map_err(read_error)?;
    if let Utf8::InvalidAt(offset) = utf8 {
        return rejected(Rejection::new(
            RejectReason::NotUtf8,
            format!(
                "the file is not UTF-8: invalid byte at offset {offset}; save it as UTF-8 and drop it again"
            ),
        ));
    }
    if utf8 == Utf8::CutAtEnd {
        return rejected(Rejection::new(
            RejectReason::Truncated,
            "the file ends inside a UTF-8 character; it may still be arriving",
        ));
    }

    file.rewind().map_err(read_error)?;
    let Some(mut batch) = store.begin(&digest, &name, &now_utc(), options.dry_run)? else {
        return Ok(Outcome::SkippedDuplicate { digest });
    };
    // Parsing runs on a thread of its own while this one writes to SQLite; the
    // bounded channel keeps memory flat whatever the size of the file.
    let (sender, receiver) = crossbeam_channel::bounded(CHUNKS_IN_FLIGHT);
    let header = std::thread::scope(|scope| {
        scope.spawn(|| read_records(file, format, options.limits, sender));
        // Owned here, so that an early return drops it and a reader blocked on a
        // full channel ends instead of being waited for forever.
        let receiver = receiver;
        for message in &receiver {
            let chunk = match message {
                Message::Records(chunk) => chunk,
                Message::End {
                    result,
                    digest: read_digest,
                    bytes: read_bytes,
                } => {
                    let header = match result {
                        Ok(header) => header,
                        Err(ReadError::Io(source)) => return Err(read_error(source)),
                        Err(ReadError::Rejected(rejection)) => return Ok(Err(rejection)),
                    };
                    if read_digest != digest || read_bytes != bytes {
                        return Err(IngestError::Changed {
                            path: path.display().to_string(),
                        });
                    }
                    return Ok(Ok(header));
                }
            };
            batch.stage(&chunk)?;
            if options.stop.load(Ordering::Relaxed) {
                return Err(IngestError::Stopped);
            }
        }
        unreachable!("the reader thread always ends with Message::End")
    })?;
    let header = match header {
        Ok(header) => header,
        Err(rejection) => return rejected(rejection),
    };
    let (counts, resent) = match batch.finish(&header, options.stop) {
        Err(StoreError::Stopped) => return Err(IngestError::Stopped),
        result => result?,
    };
    let resent_batch_id = if resent { header.batch_id } else { None };
    Ok(Outcome::Processed {
        digest,
        counts,
        resent_batch_id,
    })
}

/// Opens a file for reading without following a symbolic link and without blocking
/// on a FIFO, so that no entry of incoming/ can make spoolite hang.
pub fn open_no_follow(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Utf8 {
    Valid,
    InvalidAt(u64),
    /// Valid but for an incomplete character at the very end.
    CutAtEnd,
}

/// Calls `each` with successive chunks of `file` from where it stands to its end.
fn for_each_chunk(file: &mut File, mut each: impl FnMut(&[u8])) -> io::Result<()> {
    let mut buf = vec![0u8; READ_BUFFER_BYTES];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => each(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// The SHA-256 (lowercase hex) and length of a file.
fn digest_file(file: &mut File) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    for_each_chunk(file, |chunk| {
        hasher.update(chunk);
        bytes += chunk.len() as u64;
    })?;
    Ok((hex::encode(hasher.finalize()), bytes))
}

/// Whether a file is UTF-8 throughout, and where it is not.
fn check_file_utf8(file: &mut File) -> io::Result<Utf8> {
    let mut utf8 = Utf8::Valid;
    let mut offset = 0u64;
    // Up to 3 bytes of a character cut by the end of the previous chunk.
    let mut carry: Vec<u8> = Vec::with_capacity(4);
    for_each_chunk(file, |chunk| {
        if utf8 == Utf8::Valid {
            utf8 = check_utf8(&mut carry, chunk, offset);
        }
        offset += chunk.len() as u64;
    })?;
    if utf8 == Utf8::Valid && !carry.is_empty() {
        utf8 = Utf8::CutAtEnd;
    }
    Ok(utf8)
}

/// Validates `chunk` (which starts at `offset` in the file) after the `carry` left
/// by the previous chunk; leaves in `carry` an incomplete character at its end.
fn check_utf8(carry: &mut Vec<u8>, chunk: &[u8], offset: u64) -> Utf8 {
    let mut chunk = chunk;
    let mut offset = offset;
    while !carry.is_empty() && !chunk.is_empty() {
        carry.push(chunk[0]);
        chunk = &chunk[1..];
        offset += 1;
        match std::str::from_utf8(carry) {
            Ok(_) => carry.clear(),
            Err(e) if e.error_len().is_some() => {
                return Utf8::InvalidAt(offset - carry.len() as u64);
            }
            Err(_) => {}
        }
    }
    match std::str::from_utf8(chunk) {
        Ok(_) => Utf8::Valid,
        Err(e) => match e.error_len() {
            Some(_) => Utf8::InvalidAt(offset + e.valid_up_to() as u64),
            None => {
                carry.extend_from_slice(&chunk[e.valid_up_to()..]);
                Utf8::Valid
            }
        },
    }
}

/// Hashes what passes through it, so the second pass proves it read the bytes the
/// first pass digested.
struct HashingReader {
    inner: File,
    hasher: Sha256,
    bytes: u64,
}

impl Read for HashingReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_across_chunks() {
        let text = "aé😀b".as_bytes();
        for split in 0..text.len() {
            let mut carry = Vec::new();
            assert_eq!(check_utf8(&mut carry, &text[..split], 0), Utf8::Valid);
            assert_eq!(
                check_utf8(&mut carry, &text[split..], split as u64),
                Utf8::Valid,
                "split {split}"
            );
            assert!(carry.is_empty());
        }
        let mut carry = Vec::new();
        assert_eq!(check_utf8(&mut carry, b"ab\xf0\x9f", 0), Utf8::Valid);
        assert_eq!(carry, b"\xf0\x9f");
        assert_eq!(check_utf8(&mut carry, b"x", 4), Utf8::InvalidAt(2));
        let mut carry = Vec::new();
        assert_eq!(
            check_utf8(&mut carry, b"abc\xffdef", 10),
            Utf8::InvalidAt(13)
        );
    }
}
