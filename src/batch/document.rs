//! `.json` batches: one object whose `events` array is streamed element by element,
//! its other top-level fields before or after it. Every byte of the file runs through
//! the syntax machine, so the bytes alone decide whether the file is JSON, still
//! arriving or neither; what the file holds (its shape, its depth, `event_count`) is
//! judged only once it is complete JSON.

use std::collections::HashSet;
use std::io::BufRead;

use super::direct;
use super::event::{Event, Invalid};
use super::json::{self, Value};
use super::syntax::{Mark, Position, Syntax};
use super::{
    DEPTH_MAX, Header, Limits, ReadError, Record, RejectReason, bad_shape, event, not_json,
    parse_event, reject, text_prefix, too_large, truncated, utf8,
};

/// Marks are wanted for the batch object (depth 0), its keys and fields (1) and
/// the elements of `events` (2); deeper ones run without stopping.
const MARKS_BELOW: usize = 3;

const TOP_LEVEL_FIELDS: [&str; 4] = ["batch_id", "source_revision", "event_count", "events"];

/// What the bytes being copied out of the file are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Key,
    Field,
    Event,
}

/// The bytes of one shallow value, held up to the limit, and its full size.
struct Capture {
    bytes: Vec<u8>,
    size: u64,
    start: Position,
}

impl Capture {
    fn new(start: Position) -> Capture {
        Capture {
            bytes: Vec::new(),
            size: 0,
            start,
        }
    }

    fn extend(&mut self, chunk: &[u8], limit: usize) {
        self.size += chunk.len() as u64;
        let room = limit.saturating_sub(self.bytes.len()).min(chunk.len());
        self.bytes.extend_from_slice(&chunk[..room]);
    }
}

/// Reads a `.json` batch.
pub struct JsonReader<R> {
    input: R,
    limits: Limits,
    started: bool,
    syntax: Syntax,
    capture: Capture,
    capturing: Option<Part>,
    index: u64,
    /// The size of the last event, with some room to spare (see `begin`).
    last_event_bytes: usize,
    seen: HashSet<String>,
    /// The top-level key whose value comes next.
    key: String,
    in_events: bool,
    event_count: Option<u64>,
    header: Header,
    /// The first problem with what the file holds, reported once the file is
    /// complete JSON (until then it may still be arriving).
    problem: Option<ReadError>,
    done: bool,
    scratch: direct::Scratch,
}

/// The marks of an element of `events` beginning and ending.
const EVENT_START: Mark = Mark::Start {
    depth: 2,
    key: false,
};
const EVENT_END: Mark = Mark::End {
    depth: 2,
    key: false,
};

/// Reads the event object at the start of `buf`, when it ends within `buf`, is
/// within the limit, is UTF-8 and is JSON: its size, its text and what it holds.
/// Otherwise `None`, and the event takes the general path (which names places in
/// the file for what is wrong).
fn read_in_place(
    buf: &[u8],
    limits: Limits,
    scratch: &mut direct::Scratch,
) -> Option<(usize, String, Result<Event, Invalid>)> {
    let size = object_end(buf, limits.event_bytes_max)?;
    let text = std::str::from_utf8(&buf[..size]).ok()?;
    let event = match direct::parse_event(text, DEPTH_MAX - 2, scratch) {
        Ok(event) => Ok(event),
        Err(direct::Problem::Invalid(invalid)) => Err(invalid),
        Err(direct::Problem::Json(_)) => return None,
    };
    Some((size, text.to_owned(), event))
}

/// Where the object that `bytes` begins with would end, found by counting
/// brackets outside strings: only a guess at JSON, which the parser then
/// checks. `None` when it does not end within `bytes` or `max` bytes.
fn object_end(bytes: &[u8], max: usize) -> Option<usize> {
    let bytes = &bytes[..bytes.len().min(max)];
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => loop {
                i += 1;
                i += direct::plain_run(bytes.get(i..)?);
                match bytes.get(i) {
                    Some(b'"') => break,
                    // The escaped byte is stepped over by the `i += 1` above.
                    Some(b'\\') => i += 1,
                    // A control character (or the end): not JSON, or not here.
                    _ => return None,
                }
            },
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// What a JSON value is, from its first byte.
fn kind_of(first: u8) -> &'static str {
    match first {
        b'{' => "an object",
        b'[' => "an array",
        b'"' => "a string",
        b't' | b'f' => "a boolean",
        b'n' => "null",
        _ => "a number",
    }
}

impl<R: BufRead> JsonReader<R> {
    pub(super) fn new(input: R, limits: Limits) -> JsonReader<R> {
        JsonReader {
            input,
            limits,
            started: false,
            syntax: Syntax::new(Position::start(0), DEPTH_MAX, MARKS_BELOW),
            capture: Capture::new(Position::start(0)),
            capturing: None,
            index: 0,
            last_event_bytes: 0,
            seen: HashSet::new(),
            key: String::new(),
            in_events: false,
            event_count: None,
            header: Header::default(),
            problem: None,
            done: false,
            scratch: direct::Scratch::default(),
        }
    }

    pub(super) fn header(&self) -> Header {
        self.header.clone()
    }

    pub(super) fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        if self.done {
            return Ok(None);
        }
        if !self.started {
            self.started = true;
            let bom = super::skip_bom(&mut self.input)?;
            self.syntax = Syntax::new(Position::start(bom), DEPTH_MAX, MARKS_BELOW);
        }
        let limit = self.limits.event_bytes_max;
        loop {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
                return self.end_of_file().map(|()| None);
            }
            let (used, mark) = self.syntax.feed(buf).map_err(|e| not_json(&e))?;
            // An event object that lies whole in the buffer is read where it
            // stands, if it is JSON: then the syntax machine need not step
            // through it, nor its bytes be captured first.
            if mark == Some(EVENT_START)
                && self.in_events
                && self.problem.is_none()
                && self.syntax.too_deep_at().is_none()
                && buf[used - 1] == b'{'
                && let Some((size, raw, event)) =
                    read_in_place(&buf[used - 1..], self.limits, &mut self.scratch)
            {
                self.input.consume(used - 1 + size);
                let end = self.syntax.skip_value(&raw.as_bytes()[1..]);
                debug_assert_eq!(end, Some(EVENT_END));
                self.last_event_bytes = size + size / 8;
                let index = self.index;
                self.index += 1;
                return Ok(Some(Record { index, raw, event }));
            }
            if self.capturing.is_some() {
                self.capture.extend(&buf[..used], limit);
            }
            let last = used.checked_sub(1).map_or(0, |i| buf[i]);
            self.input.consume(used);
            if let Some(at) = self.syntax.too_deep_at()
                && self.problem.is_none()
            {
                self.fail(reject(
                    RejectReason::TooDeep,
                    format!(
                        "the file nests arrays and objects deeper than {DEPTH_MAX} levels at {at}"
                    ),
                ));
            }
            // Once the file is known bad (too deep, say), the mark that came with
            // the news is not acted on either.
            if let Some(mark) = mark
                && self.problem.is_none()
                && let Some(record) = self.on_mark(mark, last)?
            {
                return Ok(Some(record));
            }
        }
    }

    /// Remembers the first problem with what the file holds, and stops looking at
    /// anything but its syntax.
    fn fail(&mut self, problem: ReadError) {
        if self.problem.is_none() {
            self.problem = Some(problem);
        }
        self.syntax.stop_marks();
        self.capturing = None;
        self.capture = Capture::new(Position::start(0));
    }

    /// Acts on a mark; `last` is the byte just consumed (the first byte of a value
    /// that starts).
    fn on_mark(&mut self, mark: Mark, last: u8) -> Result<Option<Record>, ReadError> {
        match mark {
            Mark::Start { depth: 0, .. } if last != b'{' => {
                let what = kind_of(last);
                self.fail(bad_shape(format!("the file is {what}, not a batch object")));
            }
            Mark::Start {
                depth: 1,
                key: true,
            } => self.begin(Part::Key, last),
            Mark::End {
                depth: 1,
                key: true,
            } => self.top_key()?,
            Mark::Start {
                depth: 1,
                key: false,
            } => self.top_value_start(last),
            Mark::End {
                depth: 1,
                key: false,
            } if self.in_events => self.in_events = false,
            Mark::End {
                depth: 1,
                key: false,
            } => self.top_value_end()?,
            Mark::Start {
                depth: 2,
                key: false,
            } if self.in_events => {
                self.begin(Part::Event, last);
            }
            Mark::End {
                depth: 2,
                key: false,
            } if self.in_events => {
                return self.event().map(Some);
            }
            _ => {}
        }
        Ok(None)
    }

    fn begin(&mut self, part: Part, first: u8) {
        self.capturing = Some(part);
        self.capture = Capture::new(self.syntax.last_position());
        if part == Part::Event {
            // Events of one file tend to be of one size: room for the last one's
            // bytes saves growing the buffer step by step for each.
            let hint = self.last_event_bytes.min(self.limits.event_bytes_max);
            self.capture.bytes.reserve_exact(hint);
        }
        self.capture.extend(&[first], self.limits.event_bytes_max);
    }

    fn take_capture(&mut self) -> Capture {
        self.capturing = None;
        std::mem::replace(&mut self.capture, Capture::new(Position::start(0)))
    }

    /// Whether a captured top-level key or field is over the limit (and the file
    /// then `bad_shape`).
    fn over_limit(&mut self, capture: &Capture, what: &str) -> bool {
        let limit = self.limits.event_bytes_max;
        if capture.size <= limit as u64 {
            return false;
        }
        self.fail(bad_shape(format!(
            "{what} at {} is over {limit} bytes, the limit on any one value (--event-bytes-max)",
            capture.start
        )));
        true
    }

    /// A top-level key has been read.
    fn top_key(&mut self) -> Result<(), ReadError> {
        let capture = self.take_capture();
        if self.over_limit(&capture, "a top-level key") {
            return Ok(());
        }
        let text = utf8(capture.bytes, capture.start.byte)?;
        let key = match json::parse(&text, 1) {
            Ok(json::Parsed {
                value: Value::String(key),
                ..
            }) => key,
            _ => {
                self.fail(bad_shape(format!(
                    "the top-level key {text} at {} is not text (a \\u escape in it is half of a surrogate pair)",
                    capture.start
                )));
                return Ok(());
            }
        };
        if !TOP_LEVEL_FIELDS.contains(&key.as_str()) {
            self.fail(bad_shape(format!(
                "the top-level field {key:?} is not one of {}",
                TOP_LEVEL_FIELDS.join(", ")
            )));
        } else if !self.seen.insert(key.clone()) {
            self.fail(bad_shape(format!(
                "the top-level field {key:?} stands twice (again at {})",
                capture.start
            )));
        }
        self.key = key;
        Ok(())
    }

    fn top_value_start(&mut self, first: u8) {
        if self.key != "events" {
            self.begin(Part::Field, first);
        } else if first == b'[' {
            self.in_events = true;
        } else {
            let what = kind_of(first);
            self.fail(bad_shape(format!(
                "\"events\" must be an array, not {what}"
            )));
        }
    }

    /// A top-level field other than `events` has been read.
    fn top_value_end(&mut self) -> Result<(), ReadError> {
        let capture = self.take_capture();
        let key = std::mem::take(&mut self.key);
        if self.over_limit(&capture, &format!("the top-level field {key:?}")) {
            return Ok(());
        }
        let at = capture.start;
        let text = utf8(capture.bytes, at.byte)?;
        // Its syntax is known good and its depth within the limit: only a lone
        // surrogate can make it fail here.
        let problem = match json::parse(&text, DEPTH_MAX) {
            Ok(parsed) if parsed.duplicate.is_some() => bad_shape(format!(
                "the top-level field {key:?} at {at} has the key {:?} twice",
                parsed.duplicate.unwrap_or_default()
            )),
            Ok(parsed) => match self.header_field(&key, parsed.value) {
                Ok(()) => return Ok(()),
                Err(problem) => problem,
            },
            Err(error) => bad_shape(format!(
                "the top-level field {key:?} at {at} is not text: {}",
                error.message()
            )),
        };
        self.fail(problem);
        Ok(())
    }

    fn header_field(&mut self, key: &str, value: Value) -> Result<(), ReadError> {
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
            (_, value) => {
                self.event_count = event::parse_revision(&value, "event_count")
                    .map_err(|invalid| bad_shape(invalid.detail))?
                    .map(|n| n as u64);
            }
        }
        Ok(())
    }

    /// An element of `events` has been read: its record.
    fn event(&mut self) -> Result<Record, ReadError> {
        let capture = self.take_capture();
        let limits = self.limits;
        let start = capture.start;
        self.last_event_bytes = capture.bytes.len() + capture.bytes.len() / 8;
        let (raw, event) = if capture.size > limits.event_bytes_max as u64 {
            let raw = text_prefix(capture.bytes, limits.event_bytes_max, start.byte)?;
            (raw, Err(too_large(capture.size, limits)))
        } else {
            let raw = utf8(capture.bytes, start.byte)?;
            // The event object is level 3 of the file: the batch object and the
            // events array stand above it.
            let event = parse_event(&raw, DEPTH_MAX - 2, start, &mut self.scratch);
            (raw, event)
        };
        let index = self.index;
        self.index += 1;
        Ok(Record { index, raw, event })
    }

    /// The file's bytes are all read: still arriving, or what it holds decides.
    fn end_of_file(&mut self) -> Result<(), ReadError> {
        if let Err(place) = self.syntax.finish() {
            if !self.syntax.started() {
                // Decided where the contract is silent: whitespace alone is still
                // arriving like a 0-byte file, and is `empty` when it stays so.
                return Err(reject(
                    RejectReason::Empty,
                    "the file holds only whitespace; it may still be arriving",
                ));
            }
            let at = self.syntax.position();
            return Err(truncated(format!("the file ends {place} at {at}")));
        }
        if let Some(problem) = self.problem.take() {
            return Err(problem);
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
                    "event_count says {count} but the file holds {} {}",
                    self.index,
                    if self.index == 1 { "event" } else { "events" }
                ),
            ));
        }
        self.done = true;
        Ok(())
    }
}
