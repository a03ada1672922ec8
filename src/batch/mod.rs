//! Batch files: bytes in, typed records out. Reads `.json` and `.ndjson`/`.jsonl`
//! batches as a stream (memory does not grow with the number of events), validates
//! every event and decides whole-file rejections. Does no I/O of its own: it reads
//! whatever `BufRead` it is given.
//!
//! `syntax` decides, from JSON syntax alone, whether a file (or an NDJSON file's
//! unterminated last line) is complete, still arriving (a proper prefix of some JSON
//! text) or never JSON; `document` reads `.json`, `ndjson` the line formats; `direct`
//! reads one event's text straight into its fields and canonical payload; `json`
//! parses one value in memory into a tree (top-level fields, and the reference
//! `direct` is tested against); `event` holds the field rules.
//!
//! Choices made where the contract is silent:
//! - A `.json` file of whitespace alone (after an optional byte-order mark) is
//!   `empty`, like a 0-byte file: it may still be arriving, and says so.
//! - An escaped lone surrogate in a top-level key or field (`batch_id`) makes the
//!   file `bad_shape`: the file is JSON by the grammar, but the field is no text.
//! - Places in details are `line L, character C (byte offset B)`: lines and
//!   characters count from 1 (a byte-order mark is no character), the byte offset
//!   from 0 at the first byte of the file.
//! - A `.json` file's first problem with what it holds (`bad_shape`, `too_deep`) is
//!   reported only once the whole file is JSON; a syntax error after it wins, as
//!   does the file being still cut.
//! - Any one value of a `.json` file (an event, a top-level key or field) is held
//!   up to `--event-bytes-max`; an NDJSON line likewise. Brackets are followed one
//!   bit a level up to `syntax::NESTING_FOLLOWED_MAX` levels, beyond which a file
//!   is `too_deep` at once.

mod aidx;
mod csv;
mod direct;
mod document;
pub mod event;
pub(crate) mod json;
mod ndjson;
mod preflight;
pub(crate) mod syntax;

use std::io::{self, BufRead};

pub(crate) use document::JsonReader;
pub(crate) use event::{Event, Invalid, InvalidReason};
pub(crate) use ndjson::NdjsonReader;
pub(crate) use preflight::{
    LineOf, Utf8Check, Utf8Verdict, bad_gzip, gzip_fault, gzip_too_large, preflight,
};
use syntax::Position;

/// How deep objects and arrays may nest in a batch file (or an NDJSON line).
pub(crate) const DEPTH_MAX: usize = 128;

/// The batch formats, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Ndjson,
    /// `.csv`: event rows or flight rows (section *CSV batches*).
    Csv,
    /// `.xml`: an IATA AIDX flight-leg message (section *AIDX batches*).
    Aidx,
}

impl Format {
    /// The format for a file name, matching the extension without regard to case;
    /// for a gzip file (`NAME.EXT.gz`), the format of its content.
    pub fn from_name(name: &str) -> Option<Format> {
        let (stem, extension) = name.rsplit_once('.')?;
        match extension.to_ascii_lowercase().as_str() {
            "json" => Some(Format::Json),
            "ndjson" | "jsonl" => Some(Format::Ndjson),
            "csv" => Some(Format::Csv),
            "xml" => Some(Format::Aidx),
            "gz" if !is_gzip(stem) => Format::from_name(stem),
            _ => None,
        }
    }
}

/// Whether a file name ends in `.gz` (any case): its content is the gzip stream's
/// decompressed bytes.
pub fn is_gzip(name: &str) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(_, extension)| extension.eq_ignore_ascii_case("gz"))
}

/// The stable codes for a whole-file rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RejectReason {
    NotJson,
    NotUtf8,
    Truncated,
    Empty,
    TooLarge,
    TooDeep,
    UnsupportedType,
    BadShape,
    CountMismatch,
    BadGzip,
    NotXml,
    /// A `.csv` file whose last record has no line end (and does not end inside a
    /// quoted cell): still arriving, and once the file is settled (it has not
    /// changed for `--partial-timeout`) taken as it stands. Its code is `truncated`.
    Unended,
}

impl RejectReason {
    pub(crate) fn code(self) -> &'static str {
        match self {
            RejectReason::NotJson => "not_json",
            RejectReason::NotUtf8 => "not_utf8",
            RejectReason::Truncated => "truncated",
            RejectReason::Empty => "empty",
            RejectReason::TooLarge => "too_large",
            RejectReason::TooDeep => "too_deep",
            RejectReason::UnsupportedType => "unsupported_type",
            RejectReason::BadShape => "bad_shape",
            RejectReason::CountMismatch => "count_mismatch",
            RejectReason::BadGzip => "bad_gzip",
            RejectReason::NotXml => "not_xml",
            RejectReason::Unended => "truncated",
        }
    }

    /// A file with this problem may simply not be fully written yet: the daemon
    /// leaves it in incoming/ until `--partial-timeout` has passed without change.
    pub(crate) fn may_still_arrive(self) -> bool {
        matches!(
            self,
            RejectReason::Truncated | RejectReason::Empty | RejectReason::Unended
        )
    }
}

/// Why a whole file cannot be ingested, in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub(crate) reason: RejectReason,
    pub detail: String,
}

impl Rejection {
    pub(crate) fn new(reason: RejectReason, detail: impl Into<String>) -> Rejection {
        Rejection {
            reason,
            detail: detail.into(),
        }
    }
}

/// What stops reading a file: the file itself is bad, or reading it failed.
#[derive(Debug)]
pub enum ReadError {
    Rejected(Rejection),
    Io(io::Error),
}

impl From<io::Error> for ReadError {
    fn from(error: io::Error) -> ReadError {
        ReadError::Io(error)
    }
}

/// Every record `next` hands out until the end, or the rejection that ends the
/// file; reading memory does not fail otherwise (the unit tests' readers).
#[cfg(test)]
fn read_to_end(
    mut next: impl FnMut() -> Result<Option<Record>, ReadError>,
) -> Result<Vec<Record>, Rejection> {
    let mut records = Vec::new();
    loop {
        match next() {
            Ok(Some(record)) => records.push(record),
            Ok(None) => return Ok(records),
            Err(ReadError::Rejected(rejection)) => return Err(rejection),
            Err(ReadError::Io(error)) => panic!("reading memory failed: {error}"),
        }
    }
}

/// `Read::read` of a reader that is a `BufRead`: what `fill_buf` holds, consumed.
fn read_buffered(reader: &mut impl BufRead, out: &mut [u8]) -> io::Result<usize> {
    let n = {
        let held = reader.fill_buf()?;
        let n = held.len().min(out.len());
        out[..n].copy_from_slice(&held[..n]);
        n
    };
    reader.consume(n);
    Ok(n)
}

fn reject(reason: RejectReason, detail: impl Into<String>) -> ReadError {
    ReadError::Rejected(Rejection::new(reason, detail))
}

/// One event of a file, valid or not, with its 0-based position and its text exactly
/// as it stood in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub(crate) index: u64,
    pub(crate) raw: String,
    pub event: Result<Event, Invalid>,
}

/// The file-level fields of a batch, known once the whole file is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    pub(crate) batch_id: Option<String>,
    pub source_revision: Option<i64>,
}

/// The limits on what one file may make spoolite hold in memory, and whether the
/// file is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// An event (or any one JSON value of a file, a `batch_id` included; a CSV
    /// record; an AIDX element's text) longer than this many bytes is
    /// `too_large`; no more of it than this is ever held.
    pub(crate) event_bytes_max: usize,
    /// The file is taken as it stands: a `.csv` file whose last record has no
    /// line end is read with that record (`RejectReason::Unended` otherwise).
    /// The daemon sets it once such a file has not changed for
    /// `--partial-timeout`; `spoolite ingest` always.
    pub(crate) settled: bool,
}

/// `--event-bytes-max` unless told otherwise: 16 MiB.
pub(crate) const EVENT_BYTES_MAX_DEFAULT: usize = 16 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            event_bytes_max: EVENT_BYTES_MAX_DEFAULT,
            settled: false,
        }
    }
}

/// Reads the records of one batch file, one at a time.
// One reader per file, on the reader thread's stack: the size of the larger variant
// costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum BatchReader<R> {
    Json(JsonReader<Head<R>>),
    Ndjson(NdjsonReader<Head<R>>),
    Csv(csv::CsvReader<Head<R>>),
    Aidx(aidx::AidxReader<Head<R>>),
}

impl<R: BufRead> BatchReader<R> {
    pub fn new(format: Format, input: R, limits: Limits) -> BatchReader<R> {
        let input = Head::new(input);
        match format {
            Format::Json => BatchReader::Json(JsonReader::new(input, limits)),
            Format::Ndjson => BatchReader::Ndjson(NdjsonReader::new(input, limits)),
            Format::Csv => BatchReader::Csv(csv::CsvReader::new(input, limits)),
            Format::Aidx => BatchReader::Aidx(aidx::AidxReader::new(input, limits)),
        }
    }

    /// The next record, or `None` at a well-formed end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        match self {
            BatchReader::Json(reader) => reader.next_record(),
            BatchReader::Ndjson(reader) => reader.next_record(),
            BatchReader::Csv(reader) => reader.next_record(),
            BatchReader::Aidx(reader) => reader.next_record(),
        }
    }

    /// The file-level fields; complete only after `next_record` returned `None`.
    pub fn header(&self) -> Header {
        match self {
            BatchReader::Json(reader) => reader.header(),
            BatchReader::Ndjson(_) | BatchReader::Csv(_) | BatchReader::Aidx(_) => {
                Header::default()
            }
        }
    }
}

/// A file's input with its first `HEAD_BYTES` bytes read ahead and handed out in
/// one piece: whatever sizes the input comes in, the start of a file (a
/// byte-order mark, or two) is seen whole, so a file reads alike however it is
/// cut into reads. A read error there is kept and returned at the first read.
pub struct Head<R> {
    head: [u8; HEAD_BYTES],
    start: usize,
    end: usize,
    error: Option<io::Error>,
    inner: R,
}

/// Two byte-order marks and two bytes more.
const HEAD_BYTES: usize = 8;

impl<R: BufRead> Head<R> {
    fn new(mut inner: R) -> Head<R> {
        let mut head = [0; HEAD_BYTES];
        let mut end = 0;
        let mut error = None;
        while end < HEAD_BYTES {
            match inner.fill_buf() {
                Ok([]) => break,
                Ok(buf) => {
                    let take = buf.len().min(HEAD_BYTES - end);
                    head[end..end + take].copy_from_slice(&buf[..take]);
                    inner.consume(take);
                    end += take;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    error = Some(e);
                    break;
                }
            }
        }
        Head {
            head,
            start: 0,
            end,
            error,
            inner,
        }
    }
}

impl<R: BufRead> io::Read for Head<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        read_buffered(self, out)
    }
}

impl<R: BufRead> BufRead for Head<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if let Some(error) = self.error.take() {
            return Err(error);
        }
        if self.start < self.end {
            return Ok(&self.head[self.start..self.end]);
        }
        self.inner.fill_buf()
    }

    fn consume(&mut self, amount: usize) {
        let from_head = amount.min(self.end - self.start);
        self.start += from_head;
        if amount > from_head {
            self.inner.consume(amount - from_head);
        }
    }
}

/// Skips a UTF-8 byte-order mark at the start of `input`, if there is one; returns
/// how many bytes it skipped.
fn skip_bom(input: &mut impl BufRead) -> io::Result<u64> {
    let mut bom = [0u8; 3];
    let mut seen = 0;
    while seen < 3 {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        let take = (3 - seen).min(buf.len());
        bom[seen..seen + take].copy_from_slice(&buf[..take]);
        if bom[..seen + take] != [0xEF, 0xBB, 0xBF][..seen + take] {
            // Not a BOM; nothing has been consumed unless a BOM prefix was, which
            // can only be cut by the end of the file.
            return Ok(0);
        }
        input.consume(take);
        seen += take;
    }
    Ok(seen as u64)
}

/// `bytes` as text, or the file's `not_utf8` rejection (`start` is the file offset
/// of the first byte).
fn utf8(bytes: Vec<u8>, start: u64) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|e| not_utf8(start + e.utf8_error().valid_up_to() as u64))
}

fn not_utf8(at: u64) -> ReadError {
    reject(
        RejectReason::NotUtf8,
        format!("the file is not UTF-8: invalid byte at byte offset {at}"),
    )
}

/// The first `max` bytes of `bytes` cut back to a character boundary, as text: the
/// `raw` of an event that is too large.
fn text_prefix(mut bytes: Vec<u8>, max: usize, start: u64) -> Result<String, ReadError> {
    bytes.truncate(max);
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text),
        // Only a character cut by the limit itself may be dropped.
        Err(e) if e.utf8_error().error_len().is_none() => {
            let valid = e.utf8_error().valid_up_to();
            let mut bytes = e.into_bytes();
            bytes.truncate(valid);
            utf8(bytes, start)
        }
        Err(e) => Err(not_utf8(start + e.utf8_error().valid_up_to() as u64)),
    }
}

/// The invalid event for a text longer than `--event-bytes-max`.
fn too_large(size: u64, limits: Limits) -> Invalid {
    Invalid {
        reason: InvalidReason::TooLarge,
        detail: format!(
            "the event is {size} bytes, over the limit of {} bytes (--event-bytes-max); raw holds its first bytes only",
            limits.event_bytes_max
        ),
    }
}

/// Parses and validates the text of one event that starts at `start` in its file,
/// naming places in the file. `depth_max` is how many levels may nest inside it.
fn parse_event(
    raw: &str,
    depth_max: usize,
    start: Position,
    scratch: &mut direct::Scratch,
) -> Result<Event, Invalid> {
    match direct::parse_event(raw, depth_max, scratch) {
        Ok(event) => Ok(event),
        Err(direct::Problem::Invalid(invalid)) => Err(invalid),
        Err(direct::Problem::Json(error)) => {
            // Offsets fall on characters (errors stand at ASCII bytes or a lead
            // byte); flooring keeps a surprise from becoming a panic.
            let offset = (0..=error.offset().min(raw.len()))
                .rev()
                .find(|&i| raw.is_char_boundary(i))
                .unwrap_or(0);
            let at = start.advance(&raw[..offset]);
            Err(event::not_parsed(&error, &at.to_string()))
        }
    }
}

/// The file is a proper prefix of some JSON text.
fn truncated(detail: String) -> ReadError {
    reject(
        RejectReason::Truncated,
        format!("{detail}; it may still be arriving"),
    )
}

fn not_json(error: &syntax::SyntaxError) -> ReadError {
    if error.too_deep_to_follow {
        return reject(
            RejectReason::TooDeep,
            format!(
                "the file nests arrays and objects deeper than {} levels at {}",
                syntax::NESTING_FOLLOWED_MAX,
                error.at
            ),
        );
    }
    reject(
        RejectReason::NotJson,
        format!("the file is not JSON at {}: {}", error.at, error.message),
    )
}

fn bad_shape(detail: impl Into<String>) -> ReadError {
    reject(RejectReason::BadShape, detail)
}

#[cfg(test)]
mod fuzz_tests;
#[cfg(test)]
mod tests;
