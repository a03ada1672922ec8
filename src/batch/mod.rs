//! Batch files: bytes in, typed records out. Reads `.json` and `.ndjson`/`.jsonl`
//! batches as a stream (memory does not grow with the number of events), validates
//! every event and decides whole-file rejections. Does no I/O of its own: it reads
//! whatever `BufRead` it is given.

pub mod event;
pub mod json;

use std::collections::HashSet;
use std::io::{self, BufRead};

pub use event::{Event, Invalid, InvalidReason};

/// How deep objects and arrays may nest in a batch file (or an NDJSON line).
pub const DEPTH_MAX: usize = 128;

/// The largest top-level field other than `events` (`batch_id`, say), in bytes.
const HEADER_FIELD_BYTES_MAX: usize = 1 << 20;

/// The two batch formats, chosen by extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Ndjson,
}

impl Format {
    /// The format for a file name, matching the extension without regard to case.
    pub fn from_name(name: &str) -> Option<Format> {
        let (_, extension) = name.rsplit_once('.')?;
        match extension.to_ascii_lowercase().as_str() {
            "json" => Some(Format::Json),
            "ndjson" | "jsonl" => Some(Format::Ndjson),
            _ => None,
        }
    }
}

/// The stable codes for a whole-file rejection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    NotJson,
    NotUtf8,
    Truncated,
    Empty,
    TooLarge,
    TooDeep,
    UnsupportedType,
    BadShape,
    CountMismatch,
}

impl RejectReason {
    pub fn code(self) -> &'static str {
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
        }
    }

    /// A file with this problem may simply not be fully written yet: the daemon
    /// leaves it in incoming/ until `--partial-timeout` has passed without change.
    pub fn may_still_arrive(self) -> bool {
        matches!(self, RejectReason::Truncated | RejectReason::Empty)
    }
}

/// Why a whole file cannot be ingested, in words a person can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub reason: RejectReason,
    pub detail: String,
}

impl Rejection {
    pub fn new(reason: RejectReason, detail: impl Into<String>) -> Rejection {
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

fn reject(reason: RejectReason, detail: impl Into<String>) -> ReadError {
    ReadError::Rejected(Rejection::new(reason, detail))
}

/// One event of a file, valid or not, with its 0-based position and its text exactly
/// as it stood in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub index: u64,
    pub raw: String,
    pub event: Result<Event, Invalid>,
}

/// The file-level fields of a batch, known once the whole file is read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    pub batch_id: Option<String>,
    pub source_revision: Option<i64>,
}

/// The limits on what one file may make spoolite hold in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// An event (or any one JSON value of a file, a `batch_id` included) longer than
    /// this many bytes is `too_large`; no more of it than this is ever held.
    pub event_bytes_max: usize,
}

/// `--event-bytes-max` unless told otherwise: 16 MiB.
pub const EVENT_BYTES_MAX_DEFAULT: usize = 16 * 1024 * 1024;

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            event_bytes_max: EVENT_BYTES_MAX_DEFAULT,
        }
    }
}

/// Reads the records of one batch file, one at a time.
pub enum BatchReader<R> {
    Json(JsonReader<R>),
    Ndjson(NdjsonReader<R>),
}

impl<R: BufRead> BatchReader<R> {
    pub fn new(format: Format, input: R, limits: Limits) -> BatchReader<R> {
        let _ = limits;
        match format {
            Format::Json => BatchReader::Json(JsonReader::new(input)),
            Format::Ndjson => BatchReader::Ndjson(NdjsonReader::new(input)),
        }
    }

    /// The next record, or `None` at a well-formed end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        match self {
            BatchReader::Json(reader) => reader.next_record(),
            BatchReader::Ndjson(reader) => reader.next_record(),
        }
    }

    /// The file-level fields; complete only after `next_record` returned `None`.
    pub fn header(&self) -> Header {
        match self {
            BatchReader::Json(reader) => reader.header.clone(),
            BatchReader::Ndjson(_) => Header::default(),
        }
    }
}

fn utf8(bytes: Vec<u8>, offset: u64) -> Result<String, ReadError> {
    String::from_utf8(bytes).map_err(|e| {
        let at = offset + e.utf8_error().valid_up_to() as u64;
        reject(
            RejectReason::NotUtf8,
            format!("the file is not UTF-8: invalid byte at offset {at}"),
        )
    })
}

/// Skips a UTF-8 byte-order mark at the start of `input`, if there is one.
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

/// Reads NDJSON: one event per line, blank lines ignored, CRLF allowed.
pub struct NdjsonReader<R> {
    input: R,
    line: Vec<u8>,
    offset: u64,
    index: u64,
    started: bool,
}

impl<R: BufRead> NdjsonReader<R> {
    fn new(input: R) -> NdjsonReader<R> {
        NdjsonReader {
            input,
            line: Vec::new(),
            offset: 0,
            index: 0,
            started: false,
        }
    }

    fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        if !self.started {
            self.started = true;
            self.offset += skip_bom(&mut self.input)?;
        }
        loop {
            self.line.clear();
            let read = self.input.read_until(b'\n', &mut self.line)?;
            if read == 0 {
                if self.index == 0 {
                    return Err(reject(
                        RejectReason::Empty,
                        "the file holds no events, only blank lines",
                    ));
                }
                return Ok(None);
            }
            let line_offset = self.offset;
            self.offset += read as u64;
            let complete = self.line.last() == Some(&b'\n');
            let mut end = self.line.len();
            if complete {
                end -= 1;
                if end > 0 && self.line[end - 1] == b'\r' {
                    end -= 1;
                }
            }
            self.line.truncate(end);
            if self.line.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r')) {
                continue;
            }
            let raw = utf8(std::mem::take(&mut self.line), line_offset)?;
            let event = Event::parse(&raw, DEPTH_MAX);
            if !complete
                && let Err(Invalid {
                    reason: InvalidReason::NotJson,
                    ..
                }) = event
            {
                return Err(reject(
                    RejectReason::Truncated,
                    format!(
                        "the last line (event {}) has no final newline and is not complete JSON",
                        self.index
                    ),
                ));
            }
            let index = self.index;
            self.index += 1;
            return Ok(Some(Record { index, raw, event }));
        }
    }
}

/// Where a `.json` reader stands in the top-level object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JsonState {
    Start,
    /// Inside the `events` array, before the first element.
    EventsStart,
    /// Inside the `events` array, after an element.
    EventsNext,
    Done,
}

/// Reads a `.json` batch: one object whose `events` array is streamed element by
/// element; the other top-level fields may stand before or after it.
pub struct JsonReader<R> {
    input: R,
    offset: u64,
    state: JsonState,
    index: u64,
    seen: HashSet<String>,
    event_count: Option<u64>,
    header: Header,
    buf: Vec<u8>,
}

impl<R: BufRead> JsonReader<R> {
    fn new(input: R) -> JsonReader<R> {
        JsonReader {
            input,
            offset: 0,
            state: JsonState::Start,
            index: 0,
            seen: HashSet::new(),
            event_count: None,
            header: Header::default(),
            buf: Vec::new(),
        }
    }

    fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        loop {
            match self.state {
                JsonState::Start => {
                    self.offset += skip_bom(&mut self.input)?;
                    self.skip_whitespace()?;
                    match self.peek()? {
                        None => return Err(truncated("the file holds only whitespace")),
                        Some(b'{') => self.bump(),
                        Some(_) => return Err(self.classify_non_object()),
                    }
                    self.members(true)?;
                }
                JsonState::EventsStart | JsonState::EventsNext => {
                    self.skip_whitespace()?;
                    let first = self.state == JsonState::EventsStart;
                    match self.peek()? {
                        None => return Err(truncated("the file ends inside the events array")),
                        Some(b']') => {
                            self.bump();
                            self.members(false)?;
                            continue;
                        }
                        Some(b',') if !first => {
                            self.bump();
                            self.skip_whitespace()?;
                        }
                        Some(_) if first => {}
                        Some(_) => return Err(self.syntax("expected ',' or ']' after an event")),
                    }
                    return self.element().map(Some);
                }
                JsonState::Done => return Ok(None),
            }
        }
    }

    /// Reads one element of `events` as a record.
    fn element(&mut self) -> Result<Record, ReadError> {
        let start = self.offset;
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        self.capture_value(&mut buf, 2)?;
        let raw = utf8(buf, start)?;
        // The event object is level 3 of the file: the batch object and the events
        // array stand above it.
        let event = match json::parse(&raw, DEPTH_MAX - 2) {
            Ok(parsed) => Event::from_parsed(parsed),
            Err(json::JsonError::TooDeep) => return Err(too_deep()),
            Err(error) => {
                return Err(reject(
                    RejectReason::NotJson,
                    format!("event {} (byte {start}) is not JSON: {error}", self.index),
                ));
            }
        };
        let index = self.index;
        self.index += 1;
        self.state = JsonState::EventsNext;
        Ok(Record { index, raw, event })
    }

    /// Reads top-level members until the `events` array opens or the object closes.
    /// `first` says that no member has been read yet.
    fn members(&mut self, mut first: bool) -> Result<(), ReadError> {
        loop {
            self.skip_whitespace()?;
            match self.peek()? {
                None => return Err(truncated("the file ends inside the batch object")),
                Some(b'}') => {
                    self.bump();
                    return self.finish();
                }
                Some(b',') if !first => {
                    self.bump();
                    self.skip_whitespace()?;
                }
                Some(_) if first => {}
                Some(_) => return Err(self.syntax("expected ',' or '}' in the batch object")),
            }
            first = false;
            let key = self.key()?;
            if !self.seen.insert(key.clone()) {
                return Err(reject(
                    RejectReason::BadShape,
                    format!("the top-level field {key:?} stands twice"),
                ));
            }
            self.skip_whitespace()?;
            match self.peek()? {
                None => return Err(truncated("the file ends after a top-level key")),
                Some(b':') => self.bump(),
                Some(_) => return Err(self.syntax("expected ':' after a key")),
            }
            self.skip_whitespace()?;
            if key == "events" {
                match self.peek()? {
                    None => return Err(truncated("the file ends before the events array")),
                    Some(b'[') => {
                        self.bump();
                        self.state = JsonState::EventsStart;
                        return Ok(());
                    }
                    Some(_) => {
                        let value = self.header_value()?;
                        let what = value.type_name();
                        return Err(reject(
                            RejectReason::BadShape,
                            format!("\"events\" must be an array, not {what}"),
                        ));
                    }
                }
            }
            let value = self.header_value()?;
            self.header_field(&key, value)?;
        }
    }

    fn header_field(&mut self, key: &str, value: json::Value) -> Result<(), ReadError> {
        use json::Value;
        match (key, value) {
            ("batch_id", Value::Null) => {}
            ("batch_id", Value::String(id)) => self.header.batch_id = Some(id),
            ("batch_id", other) => {
                return Err(bad_shape(format!(
                    "\"batch_id\" must be a string, not {}",
                    other.type_name()
                )));
            }
            ("source_revision", value) => {
                self.header.source_revision =
                    event::parse_revision(&value, "the file's source_revision")
                        .map_err(|invalid| bad_shape(invalid.detail))?;
            }
            ("event_count", value) => {
                self.event_count = event::parse_revision(&value, "event_count")
                    .map_err(|invalid| bad_shape(invalid.detail))?
                    .map(|n| n as u64);
            }
            (other, _) => {
                return Err(bad_shape(format!(
                    "the top-level field {other:?} is not one of batch_id, source_revision, event_count, events"
                )));
            }
        }
        Ok(())
    }

    /// After the closing brace: only whitespace may follow, `events` must have been
    /// present and `event_count` must match.
    fn finish(&mut self) -> Result<(), ReadError> {
        self.skip_whitespace()?;
        if self.peek()?.is_some() {
            return Err(self.syntax("unexpected text after the batch object"));
        }
        if !self.seen.contains("events") {
            return Err(bad_shape("the batch object has no \"events\" array"));
        }
        if let Some(count) = self.event_count
            && count != self.index
        {
            return Err(reject(
                RejectReason::CountMismatch,
                format!(
                    "event_count says {count} but the file holds {} events",
                    self.index
                ),
            ));
        }
        self.state = JsonState::Done;
        Ok(())
    }

    /// Reads a top-level key (a JSON string).
    fn key(&mut self) -> Result<String, ReadError> {
        match self.peek()? {
            Some(b'"') => {}
            None => return Err(truncated("the file ends inside the batch object")),
            Some(_) => return Err(self.syntax("expected a string key in the batch object")),
        }
        let value = self.header_value()?;
        match value {
            json::Value::String(key) => Ok(key),
            _ => unreachable!("a value that starts with a quote is a string"),
        }
    }

    /// Reads a small top-level value (not `events`) whole.
    fn header_value(&mut self) -> Result<json::Value, ReadError> {
        let start = self.offset;
        let mut buf = Vec::new();
        self.capture_value(&mut buf, 1)?;
        if buf.len() > HEADER_FIELD_BYTES_MAX {
            return Err(bad_shape(format!(
                "a top-level field at byte {start} is over 1 MiB"
            )));
        }
        let text = utf8(buf, start)?;
        match json::parse(&text, DEPTH_MAX - 1) {
            Ok(parsed) if parsed.duplicate.is_some() => Err(bad_shape(format!(
                "a top-level field at byte {start} has a duplicate key {:?}",
                parsed.duplicate.unwrap_or_default()
            ))),
            Ok(parsed) => Ok(parsed.value),
            Err(json::JsonError::TooDeep) => Err(too_deep()),
            Err(error) => Err(reject(
                RejectReason::NotJson,
                format!("not JSON at byte {start}: {error}"),
            )),
        }
    }

    /// The top-level value is not an object: a valid JSON value of another kind is
    /// `bad_shape`, anything else `not_json` or `truncated`.
    fn classify_non_object(&mut self) -> ReadError {
        let mut buf = Vec::new();
        let start = self.offset;
        if let Err(error) = self.capture_value(&mut buf, 0) {
            return error;
        }
        let text = match utf8(buf, start) {
            Ok(text) => text,
            Err(error) => return error,
        };
        match json::parse(&text, DEPTH_MAX) {
            Ok(parsed) => {
                if let Err(error) = self.skip_whitespace() {
                    return error;
                }
                match self.peek() {
                    Ok(None) => bad_shape(format!(
                        "the file is {}, not a batch object",
                        parsed.value.type_name()
                    )),
                    Ok(Some(_)) => self.syntax("unexpected text after the top-level value"),
                    Err(error) => ReadError::Io(error),
                }
            }
            Err(json::JsonError::Eof) => truncated("the file ends inside its JSON value"),
            Err(json::JsonError::TooDeep) => too_deep(),
            Err(error) => reject(
                RejectReason::NotJson,
                format!("the file is not JSON: {error}"),
            ),
        }
    }

    fn peek(&mut self) -> io::Result<Option<u8>> {
        Ok(self.input.fill_buf()?.first().copied())
    }

    fn bump(&mut self) {
        self.input.consume(1);
        self.offset += 1;
    }

    fn syntax(&self, message: &str) -> ReadError {
        reject(
            RejectReason::NotJson,
            format!("the file is not JSON: {message} at byte {}", self.offset),
        )
    }

    fn skip_whitespace(&mut self) -> Result<(), ReadError> {
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            let n = buf
                .iter()
                .take_while(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
                .count();
            let all = n == buf.len();
            self.input.consume(n);
            self.offset += n as u64;
            if !all {
                return Ok(());
            }
        }
    }

    /// Copies the bytes of one JSON value into `out`, following strings and brackets
    /// but leaving the full grammar to `json::parse`. `depth` is the nesting level of
    /// the value's container. Stops at the end of the file as `truncated`.
    fn capture_value(&mut self, out: &mut Vec<u8>, depth: usize) -> Result<(), ReadError> {
        let mut scanner = Scanner::new(depth);
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
                if scanner.scalar_started() {
                    return Ok(()); // a number or literal ended by the end of the file
                }
                return Err(truncated("the file ends inside a JSON value"));
            }
            let (used, done) = scanner.scan(buf).map_err(|problem| match problem {
                ScanProblem::TooDeep => too_deep(),
                ScanProblem::Mismatch(at) => reject(
                    RejectReason::NotJson,
                    format!(
                        "the file is not JSON: mismatched bracket at byte {}",
                        self.offset + at as u64
                    ),
                ),
            })?;
            out.extend_from_slice(&buf[..used]);
            self.input.consume(used);
            self.offset += used as u64;
            if done {
                return Ok(());
            }
        }
    }
}

fn truncated(detail: &str) -> ReadError {
    reject(
        RejectReason::Truncated,
        format!("{detail}; it may still be arriving"),
    )
}

fn too_deep() -> ReadError {
    reject(
        RejectReason::TooDeep,
        "the file nests arrays and objects deeper than 128 levels",
    )
}

fn bad_shape(detail: impl Into<String>) -> ReadError {
    reject(RejectReason::BadShape, detail)
}

enum ScanProblem {
    TooDeep,
    Mismatch(usize),
}

/// Finds where one JSON value ends in a stream of chunks: tracks strings, escapes
/// and a stack of open brackets (at most `DEPTH_MAX` deep).
struct Scanner {
    base_depth: usize,
    stack: Vec<u8>,
    in_string: bool,
    escaped: bool,
    started: bool,
    scalar: bool,
}

impl Scanner {
    fn new(base_depth: usize) -> Scanner {
        Scanner {
            base_depth,
            stack: Vec::new(),
            in_string: false,
            escaped: false,
            started: false,
            scalar: false,
        }
    }

    fn scalar_started(&self) -> bool {
        self.scalar
    }

    /// Scans `buf`; returns how many bytes belong to the value and whether it ended.
    fn scan(&mut self, buf: &[u8]) -> Result<(usize, bool), ScanProblem> {
        for (i, &b) in buf.iter().enumerate() {
            if !self.started {
                self.started = true;
                match b {
                    b'{' | b'[' => {}
                    b'"' => {
                        self.in_string = true;
                        continue;
                    }
                    _ => self.scalar = true,
                }
            }
            if self.scalar {
                if matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') {
                    return Ok((i, true));
                }
                continue;
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if b == b'\\' {
                    self.escaped = true;
                } else if b == b'"' {
                    self.in_string = false;
                    if self.stack.is_empty() {
                        return Ok((i + 1, true));
                    }
                }
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    if self.base_depth + self.stack.len() + 1 > DEPTH_MAX {
                        return Err(ScanProblem::TooDeep);
                    }
                    self.stack.push(if b == b'{' { b'}' } else { b']' });
                }
                b'}' | b']' => {
                    if self.stack.pop() != Some(b) {
                        return Err(ScanProblem::Mismatch(i));
                    }
                    if self.stack.is_empty() {
                        return Ok((i + 1, true));
                    }
                }
                _ => {}
            }
        }
        Ok((buf.len(), false))
    }
}

#[cfg(test)]
mod tests;
