//! `.csv` batches (section *CSV batches*): RFC 4180 text whose header row decides
//! the shape. **Event rows** (the header has `event_kind`) are one event each;
//! **flight rows** (the header has `flight_id` and one or more of `off_blocks`,
//! `takeoff`, `landing`, `on_blocks`) are one event per non-empty time cell, in that
//! order, each with the row's text as its `raw`.
//!
//! The RFC 4180 work is csv-core's: its parser, fed the bytes as they come
//! (`read_row`), finds where each cell and record ends (quotes, doubled quotes, line
//! ends inside quoted cells) and unquotes the cells. spoolite keeps beside it the
//! record's exact text for `raw`, and holds at most `--event-bytes-max` bytes of a
//! record (and its cells): the rest of a longer one is walked through csv-core
//! without being kept, so memory does not grow with a record's length or the number
//! of rows.
//!
//! Where csv-core's own reading differs from the choices below, spoolite keeps its
//! choice, for the sender's sake: csv-core reads text after a closing quote into
//! the cell (`"ab"c` is `abc`), where spoolite makes the row `bad_row` rather than
//! store text the sender never wrote (it checks that each quoted cell, as written,
//! is its unquoted text between quotes with each quote doubled); csv-core ends a
//! record at a lone carriage return, where spoolite keeps it as text (it reads with
//! only the line feed ending records, and takes a carriage return before the line
//! feed off itself), so that a note holding one is not cut into rows that are each
//! wrong; and csv-core takes a cell cut by the end of the file inside its quotes as
//! if it were closed, where spoolite reports the file `truncated` (it gives csv-core
//! the missing line feed and sees whether it ends the record). csv-core also drops
//! a byte-order mark at the start of its input; spoolite drops one itself, and a
//! second is text, as it always was. csv-core, like spoolite, skips empty lines and
//! opens a quoted cell only at a cell's first character.
//!
//! Choices made where the contract is silent:
//! - Only a line feed ends a line (with the carriage return before it, if any); a
//!   carriage return anywhere else is text of its cell.
//! - A quote opens a quoted cell only as the cell's first character; elsewhere in an
//!   unquoted cell it is text (`O"Brien`). Text between a quoted cell's closing quote
//!   and the next comma or line end is no RFC 4180: the row is one invalid event,
//!   `bad_row`, like a row with the wrong number of cells.
//! - An empty line (nothing before its line end) is no row and is skipped, before
//!   the header too, as NDJSON skips blank lines: it holds nothing to drop. A file of
//!   nothing but a byte-order mark and empty lines is `empty` (still arriving until
//!   `--partial-timeout`). A line of spaces is a row of one cell (usually `bad_row`).
//! - A header row longer than `--event-bytes-max` is `bad_shape`.
//! - Header names are trimmed of Unicode whitespace and compared without regard to
//!   ASCII case, for the known names, the `payload.` prefix and duplicates alike:
//!   `payload.Tail` and `payload.tail` are one name twice (`bad_shape`). The member
//!   name of a `payload.NAME` column is NAME as written in the header. A column
//!   `payload.` with no NAME, one with an empty name, and `payload.crew` beside a
//!   `crew` or `crew_positioning` column (two writers of one member) are `bad_shape`.
//! - Event rows need `flight_id`, `event_kind` and `instant_utc` in the header; a
//!   header without one of them is `bad_shape`. A time column beside `event_kind`,
//!   and `instant_utc` or `retracted` in flight rows, are columns the shape does not
//!   have: `bad_shape`.
//! - A flight row without any time cell holds no event, yet is not dropped
//!   silently: it is one invalid event, `missing_field`, with the row as its raw
//!   (`flight_id` missing is reported first, as for an event).
//! - The checks of a row come in the order of a JSON event's: `flight_id`,
//!   `event_kind`, `instant_utc` present, then `source_revision`, `retracted`, then
//!   the forms of the identity fields and the slot. In flight rows each event of a
//!   row gets the row's own problem (a bad `source_revision` makes each invalid).
//! - A cell is absent only when it is empty; a cell of spaces goes to the field's
//!   rule (a `flight_id` of spaces is `bad_flight_id`). `source_revision` and
//!   `retracted` cells are trimmed of whitespace; `source_revision` is then an
//!   integer as JSON writes it (no `+`, no leading zero), `retracted` is `true` or
//!   `false` in any ASCII case (spreadsheets write `TRUE`).
//! - `payload.NAME` cells are taken exactly as written, surrounding spaces kept: the
//!   payload is the sender's data. Crew ids are trimmed (the contract says so); a
//!   `crew` and `crew_positioning` that leave no id write no `crew` member.
//! - Details name rows by the line they start on, counting lines from 1.

use std::collections::HashMap;
use std::io::{self, BufRead};

use csv_core::ReadFieldResult;

use super::event::{Event, Invalid, InvalidReason, invalid, revision_from_number};
use super::json::{self, Value};
use super::{
    Limits, ReadError, Record, RejectReason, bad_shape, reject, text_prefix, too_large, utf8,
};

/// The time columns of flight rows, in the order their events come.
const TIMES: [&str; 4] = ["off_blocks", "takeoff", "landing", "on_blocks"];

/// The names a header may hold, for details.
const NAMES: &str = "flight_id, event_kind, instant_utc, source_revision, retracted, slot, \
                     off_blocks, takeoff, landing, on_blocks, crew, crew_positioning or \
                     payload.NAME";

/// What a header column holds.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Column {
    FlightId,
    EventKind,
    InstantUtc,
    SourceRevision,
    Retracted,
    Slot,
    /// A time column of flight rows: its place in `TIMES`.
    Time(usize),
    Crew,
    CrewPositioning,
    /// `payload.NAME`: the payload's string member NAME, as written.
    Payload(String),
}

impl Column {
    /// The column a header name (trimmed) stands for, if any.
    fn named(name: &str) -> Option<Column> {
        let lower = name.to_ascii_lowercase();
        let column = match lower.as_str() {
            "flight_id" => Column::FlightId,
            "event_kind" => Column::EventKind,
            "instant_utc" => Column::InstantUtc,
            "source_revision" => Column::SourceRevision,
            "retracted" => Column::Retracted,
            "slot" => Column::Slot,
            "crew" => Column::Crew,
            "crew_positioning" => Column::CrewPositioning,
            _ => {
                if let Some(time) = TIMES.iter().position(|t| *t == lower) {
                    Column::Time(time)
                } else if lower.starts_with("payload.") {
                    // The prefix is ASCII, so byte 8 is a character boundary.
                    Column::Payload(name[8..].to_owned())
                } else {
                    return None;
                }
            }
        };
        Some(column)
    }
}

/// The two shapes of a CSV batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    Events,
    Flights,
}

/// The header row, read.
#[derive(Debug)]
struct Header {
    shape: Shape,
    columns: Vec<Column>,
}

/// One record as csv-core read it. Its first bytes (at most the limit and one more)
/// are in `CsvReader::held`, without the line end; its cells are kept only while it
/// is within the limit.
struct Row {
    /// The line the record starts on, from 1.
    line: u64,
    /// The byte offset in the file of its first byte.
    start: u64,
    /// Its length in bytes, without the line end.
    size: u64,
    /// Ended by a line feed (not by the end of the file).
    complete: bool,
    /// The end of the file came inside a quoted cell.
    open_quote: bool,
    /// The kept cells, unquoted, one after another.
    text: Vec<u8>,
    /// Where each kept cell ends in `text`, and whether text stood between its
    /// closing quote and the end of the cell.
    ends: Vec<(usize, bool)>,
    /// How many cells the record has.
    count: usize,
    /// The first cell (from 1) with text after its closing quote.
    stray: Option<usize>,
}

impl Row {
    /// The kept cells and their stray flags. The record's text is UTF-8 (`utf8`
    /// checked it), and so are they: csv-core leaves out only ASCII bytes (quotes,
    /// commas, the line end), each a whole character.
    fn cells(&self) -> impl Iterator<Item = (&str, bool)> {
        let text = std::str::from_utf8(&self.text)
            .expect("the cells of UTF-8 text less ASCII bytes are UTF-8");
        let mut from = 0;
        self.ends.iter().map(move |&(end, stray)| {
            let cell = &text[from..end];
            from = end;
            (cell, stray)
        })
    }
}

/// Whether `raw`, a cell as written, is `cell` quoted as RFC 4180 writes it: between
/// quotes, each quote doubled. csv-core reads text after a closing quote into the
/// cell (`"ab"c` is `abc`); a quoted cell that is not this form had such text.
fn quoted_as(raw: &[u8], cell: &[u8]) -> bool {
    let Some(inner) = raw
        .strip_prefix(b"\"")
        .and_then(|rest| rest.strip_suffix(b"\""))
    else {
        return false;
    };
    let mut at = 0;
    for &byte in cell {
        let want: &[u8] = if byte == b'"' { b"\"\"" } else { &[byte] };
        if !inner[at..].starts_with(want) {
            return false;
        }
        at += want.len();
    }
    at == inner.len()
}

/// The fields of one row, each `None` where its cell is empty (or the header has no
/// such column).
#[derive(Default)]
struct Fields<'a> {
    flight_id: Option<&'a str>,
    event_kind: Option<&'a str>,
    instant: Option<&'a str>,
    revision: Option<&'a str>,
    retracted: Option<&'a str>,
    slot: Option<&'a str>,
    times: [Option<&'a str>; 4],
    crew: Option<&'a str>,
    positioning: Option<&'a str>,
    payload: Vec<(&'a str, &'a str)>,
}

impl<'a> Fields<'a> {
    fn of(columns: &'a [Column], cells: &[&'a str]) -> Fields<'a> {
        let mut fields = Fields::default();
        for (column, &cell) in columns.iter().zip(cells) {
            if cell.is_empty() {
                continue;
            }
            let field = match column {
                Column::FlightId => &mut fields.flight_id,
                Column::EventKind => &mut fields.event_kind,
                Column::InstantUtc => &mut fields.instant,
                Column::SourceRevision => &mut fields.revision,
                Column::Retracted => &mut fields.retracted,
                Column::Slot => &mut fields.slot,
                Column::Time(time) => &mut fields.times[*time],
                Column::Crew => &mut fields.crew,
                Column::CrewPositioning => &mut fields.positioning,
                Column::Payload(name) => {
                    fields.payload.push((name, cell));
                    continue;
                }
            };
            *field = Some(cell);
        }
        fields
    }

    /// A required field's text, or `missing_field` worded as for a JSON event.
    fn required(field: Option<&'a str>, name: &str) -> Result<&'a str, Invalid> {
        field.ok_or_else(|| {
            invalid(
                InvalidReason::MissingField,
                format!("the field {name:?} is missing"),
            )
        })
    }

    /// The row's `source_revision`: an integer as JSON writes one, under JSON's rules.
    fn revision(&self) -> Result<Option<i64>, Invalid> {
        let Some(cell) = self.revision else {
            return Ok(None);
        };
        let text = cell.trim();
        let digits = text.strip_prefix('-').unwrap_or(text);
        let integer = !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit())
            && (digits == "0" || !digits.starts_with('0'));
        if !integer {
            return Err(invalid(
                InvalidReason::BadRevision,
                format!("source_revision must be an integer from 0 to 2^63-1, not {cell:?}"),
            ));
        }
        revision_from_number(text, "source_revision").map(Some)
    }

    /// The row's `retracted`: `true` or `false` (any ASCII case); absent is false.
    fn retracted(&self) -> Result<bool, Invalid> {
        let Some(cell) = self.retracted else {
            return Ok(false);
        };
        match cell.trim() {
            text if text.eq_ignore_ascii_case("true") => Ok(true),
            text if text.eq_ignore_ascii_case("false") => Ok(false),
            _ => Err(invalid(
                InvalidReason::WrongType,
                format!("retracted must be true or false, not {cell:?}"),
            )),
        }
    }

    /// The canonical payload: `crew` (operating crew as strings, then positioning
    /// crew as objects) and the `payload.NAME` members, written as the JSON path
    /// writes the same object.
    fn payload(&self) -> String {
        let mut crew: Vec<Value> = crew_ids(self.crew)
            .map(|id| Value::String(id.to_owned()))
            .collect();
        crew.extend(crew_ids(self.positioning).map(|id| {
            Value::Object(vec![
                ("id".to_owned(), Value::String(id.to_owned())),
                ("role".to_owned(), Value::String("positioning".to_owned())),
            ])
        }));
        let mut members = Vec::with_capacity(self.payload.len() + 1);
        if !crew.is_empty() {
            members.push(("crew".to_owned(), Value::Array(crew)));
        }
        for (name, text) in &self.payload {
            members.push(((*name).to_owned(), Value::String((*text).to_owned())));
        }
        let mut out = String::new();
        json::write_canonical(&Value::Object(members), &mut out);
        out
    }
}

/// The crew ids of a `crew` or `crew_positioning` cell: separated by `;`, each
/// trimmed, empty ones skipped.
fn crew_ids(cell: Option<&str>) -> impl Iterator<Item = &str> {
    cell.into_iter()
        .flat_map(|cell| cell.split(';'))
        .map(str::trim)
        .filter(|id| !id.is_empty())
}

/// What a flight row's events share, read once for all of them.
struct Shared {
    flight_id: String,
    revision: Option<i64>,
    payload: String,
    slot: Option<String>,
}

/// A flight row whose events are not all returned yet.
struct FlightRow {
    raw: String,
    /// What the row's events share, or the problem that makes each invalid.
    shared: Result<Shared, Invalid>,
    /// The row's non-empty time cells still to return: the kind's place in `TIMES`
    /// and the cell's text.
    times: std::vec::IntoIter<(usize, String)>,
}

/// Reads a `.csv` batch: event rows or flight rows.
pub struct CsvReader<R> {
    input: R,
    limits: Limits,
    started: bool,
    header: Option<Header>,
    /// csv-core's parser, which finds where records and cells end and unquotes them.
    parser: csv_core::Reader,
    /// The first bytes of the record being read (at most the limit and one more).
    held: Vec<u8>,
    /// The byte offset in the file of the next record.
    offset: u64,
    /// The line the next record starts on, from 1.
    line: u64,
    index: u64,
    pending: Option<FlightRow>,
}

impl<R: BufRead> CsvReader<R> {
    pub fn new(input: R, limits: Limits) -> CsvReader<R> {
        CsvReader {
            input,
            limits,
            started: false,
            header: None,
            parser: parser(),
            held: Vec::new(),
            offset: 0,
            line: 1,
            index: 0,
            pending: None,
        }
    }

    /// The next record, or `None` at the end of the file.
    pub fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        if let Some(record) = self.next_of_flight_row() {
            return Ok(Some(record));
        }
        if !self.started {
            self.started = true;
            self.offset += super::skip_bom(&mut self.input)?;
        }
        if self.header.is_none() {
            self.header = Some(self.read_header()?);
        }
        loop {
            // No more cells are kept than tell whether the row has the header's number.
            let keep = self.header.as_ref().map_or(0, |h| h.columns.len()) + 1;
            let Some(row) = self.read_row(keep)? else {
                return Ok(None);
            };
            self.check_end(&row, "the last row")?;
            if row.size == 0 {
                continue;
            }
            return self.record_of(row).map(Some);
        }
    }

    /// The header row: the first line that is not empty.
    fn read_header(&mut self) -> Result<Header, ReadError> {
        loop {
            let Some(row) = self.read_row(usize::MAX)? else {
                return Err(reject(
                    RejectReason::Empty,
                    "the file holds no header row: it is empty but for a byte-order mark or \
                     empty lines",
                ));
            };
            self.check_end(&row, "the header row")?;
            if row.size == 0 {
                continue;
            }
            if row.size > self.limits.event_bytes_max as u64 {
                return Err(bad_shape(format!(
                    "the header row (line {}) is {} bytes, over the limit of {} bytes \
                     (--event-bytes-max); is the file CSV?",
                    row.line, row.size, self.limits.event_bytes_max
                )));
            }
            utf8(std::mem::take(&mut self.held), row.start)?;
            return header(row.cells(), row.line);
        }
    }

    /// A record without a line end at the end of the file: inside a quoted cell it
    /// is cut (`truncated`); else it may still be arriving, until the file is
    /// settled and taken as it stands.
    fn check_end(&self, row: &Row, what: &str) -> Result<(), ReadError> {
        if row.complete {
            return Ok(());
        }
        if row.open_quote {
            return Err(reject(
                RejectReason::Truncated,
                format!(
                    "{what} (from line {}) ends inside a quoted cell, with no closing quote; \
                     it may still be arriving",
                    row.line
                ),
            ));
        }
        if !self.limits.settled {
            return Err(reject(
                RejectReason::Unended,
                format!(
                    "{what} (from line {}) has no line end; it may still be arriving",
                    row.line
                ),
            ));
        }
        Ok(())
    }

    /// The first record of a row that is not empty; a flight row's further events
    /// wait in `pending`.
    fn record_of(&mut self, row: Row) -> Result<Record, ReadError> {
        let held = std::mem::take(&mut self.held);
        if row.size > self.limits.event_bytes_max as u64 {
            let raw = text_prefix(held, self.limits.event_bytes_max, row.start)?;
            return Ok(self.record(raw, Err(too_large(row.size, self.limits))));
        }
        let raw = utf8(held, row.start)?;
        let header = self.header.as_ref().expect("the header is read first");
        let width = header.columns.len();
        let count = row.count;
        let cells: Vec<&str> = row.cells().map(|(cell, _)| cell).collect();
        if let Some(column) = row.stray {
            let problem = invalid(
                InvalidReason::BadRow,
                format!(
                    "the row on line {} is not RFC 4180 CSV: its cell {column} has text after \
                     the closing quote (a quote inside a quoted cell is written twice)",
                    row.line
                ),
            );
            return Ok(self.record(raw, Err(problem)));
        }
        if count != width {
            let problem = invalid(
                InvalidReason::BadRow,
                format!(
                    "the row on line {} has {count} cells where the header has {width} columns",
                    row.line
                ),
            );
            return Ok(self.record(raw, Err(problem)));
        }
        let fields = Fields::of(&header.columns, &cells);
        match header.shape {
            Shape::Events => {
                let event = event_of(&fields);
                drop(cells);
                Ok(self.record(raw, event))
            }
            Shape::Flights => {
                let shared = shared_of(&fields);
                let times: Vec<(usize, String)> = (0..TIMES.len())
                    .filter_map(|t| fields.times[t].map(|time| (t, time.to_owned())))
                    .collect();
                if times.is_empty() {
                    let problem = shared.err().unwrap_or_else(|| no_time(&header.columns));
                    drop(cells);
                    return Ok(self.record(raw, Err(problem)));
                }
                drop(cells);
                self.pending = Some(FlightRow {
                    raw,
                    shared,
                    times: times.into_iter(),
                });
                Ok(self
                    .next_of_flight_row()
                    .expect("a flight row with a time has an event"))
            }
        }
    }

    /// The next event of the flight row being read, if any is left.
    fn next_of_flight_row(&mut self) -> Option<Record> {
        let row = self.pending.as_mut()?;
        let (time, instant) = row.times.next()?;
        let last = row.times.len() == 0;
        let event = match &row.shared {
            Ok(shared) => Event::from_fields(
                &shared.flight_id,
                TIMES[time],
                &instant,
                shared.revision,
                &shared.payload,
                false,
                shared.slot.as_deref(),
            ),
            Err(problem) => Err(problem.clone()),
        };
        let raw = if last {
            let row = self.pending.take().expect("the row is pending");
            row.raw
        } else {
            row.raw.clone()
        };
        Some(self.record(raw, event))
    }

    fn record(&mut self, raw: String, event: Result<Event, Invalid>) -> Record {
        let index = self.index;
        self.index += 1;
        Record { index, raw, event }
    }

    /// Reads the next record (`None` at the end of the file) through csv-core,
    /// keeping at most the limit and one byte more of its text (a carriage return
    /// that may end the line) and, while it is within that, at most `keep` of its
    /// cells. A longer record is walked to its end without keeping its bytes.
    fn read_row(&mut self, keep: usize) -> io::Result<Option<Row>> {
        self.held.clear();
        let room = self.limits.event_bytes_max.saturating_add(1);
        // Empty lines hold no record: skip them, counting their lines.
        loop {
            let chunk = self.input.fill_buf()?;
            if chunk.is_empty() {
                return Ok(None);
            }
            let blank = chunk.iter().take_while(|&&b| b == b'\n').count();
            if blank == 0 {
                break;
            }
            self.input.consume(blank);
            self.offset += blank as u64;
            self.line += blank as u64;
        }
        let mut row = Row {
            line: self.line,
            start: self.offset,
            size: 0,
            complete: true,
            open_quote: false,
            text: Vec::new(),
            ends: Vec::new(),
            count: 0,
            stray: None,
        };
        // The unquoted cells go to `row.text[..filled]`, grown up to `room + 1`
        // bytes (more than a record within the limit unquotes to); the cells of a
        // longer record go to `scratch` and are dropped.
        let mut filled = 0usize;
        let mut scratch = [0u8; 256];
        // Where the cell being read starts, in the record's text and in `filled`.
        let mut cell_start = 0u64;
        let mut cell_out = 0usize;
        let mut last = 0u8;
        loop {
            let over = row.size > room as u64;
            let chunk = self.input.fill_buf()?;
            if chunk.is_empty() {
                // The file ends without a line end: give csv-core the one it lacks.
                // It ends the record as the end of the file would, unless a quoted
                // cell is open (then the line feed is text of it, and the record
                // is cut).
                let mut spare = [0u8; 1];
                let (result, _, _) = self.parser.read_field(b"\n", &mut spare);
                row.open_quote = !matches!(result, ReadFieldResult::Field { .. });
                row.complete = false;
                break;
            }
            if !over && filled == row.text.len() {
                let grown = (row.text.len() * 2).max(64).min(room.saturating_add(1));
                row.text.resize(grown, 0);
            }
            let output = if over {
                &mut scratch[..]
            } else {
                &mut row.text[filled..]
            };
            let (result, nin, nout) = self.parser.read_field(chunk, output);
            let consumed = &chunk[..nin];
            self.line += consumed.iter().filter(|&&b| b == b'\n').count() as u64;
            let ends = matches!(
                result,
                ReadFieldResult::Field { record_end: true } | ReadFieldResult::End
            );
            // The line feed that ends the record is no part of it.
            let body = match consumed.split_last() {
                Some((b'\n', body)) if ends => body,
                _ => consumed,
            };
            if !over {
                filled += nout;
                let take = body.len().min(room - self.held.len());
                self.held.extend_from_slice(&body[..take]);
            }
            if let Some(&byte) = body.last() {
                last = byte;
            }
            row.size += body.len() as u64;
            self.input.consume(nin);
            self.offset += nin as u64;
            if ends {
                break;
            }
            if result == (ReadFieldResult::Field { record_end: false }) {
                // The comma after the cell is no part of it.
                let end = row.size - 1;
                self.end_cell(&mut row, cell_start..end, cell_out, &mut filled, keep);
                cell_start = row.size;
                cell_out = filled;
            }
        }
        // A carriage return before the line end (or the end of the file) is no part
        // of the record, nor of its last cell: outside quotes, csv-core read it as
        // text of that cell.
        if last == b'\r' && !row.open_quote {
            row.size -= 1;
            self.held.truncate(row.size.min(room as u64) as usize);
            if filled > cell_out {
                filled -= 1;
            }
        }
        let end = row.size;
        self.end_cell(&mut row, cell_start..end, cell_out, &mut filled, keep);
        row.text.truncate(filled);
        Ok(Some(row))
    }

    /// Ends a cell of `row`: its text as written is `raw` in the record, and
    /// unquoted it is `row.text[out..filled]`. Cells are kept only while the record
    /// is within the limit, and no more than `keep` of them.
    fn end_cell(
        &self,
        row: &mut Row,
        raw: std::ops::Range<u64>,
        out: usize,
        filled: &mut usize,
        keep: usize,
    ) {
        row.count += 1;
        if row.size > self.limits.event_bytes_max.saturating_add(1) as u64 {
            return;
        }
        let written = &self.held[raw.start as usize..raw.end as usize];
        let stray = written.first() == Some(&b'"') && !quoted_as(written, &row.text[out..*filled]);
        if stray && row.stray.is_none() {
            row.stray = Some(row.count);
        }
        if row.ends.len() < keep {
            row.ends.push((*filled, stray));
        } else {
            *filled = out;
        }
    }
}

/// A csv-core parser for spoolite's CSV: only a line feed ends a record (a carriage
/// return before it is taken off by `read_row`), and the byte-order mark is
/// `skip_bom`'s to take, once.
fn parser() -> csv_core::Reader {
    let mut parser = csv_core::ReaderBuilder::new()
        .terminator(csv_core::Terminator::Any(b'\n'))
        .build();
    // csv-core drops a byte-order mark at the start of its first input; an empty
    // line first (which it skips) leaves a second mark after spoolite's as text.
    parser.read_field(b"\n", &mut [0u8]);
    parser
}

/// The event of an event row.
fn event_of(fields: &Fields) -> Result<Event, Invalid> {
    let flight_id = Fields::required(fields.flight_id, "flight_id")?;
    let event_kind = Fields::required(fields.event_kind, "event_kind")?;
    let instant = Fields::required(fields.instant, "instant_utc")?;
    let revision = fields.revision()?;
    let retracted = fields.retracted()?;
    Event::from_fields(
        flight_id,
        event_kind,
        instant,
        revision,
        &fields.payload(),
        retracted,
        fields.slot,
    )
}

/// What the events of a flight row share.
fn shared_of(fields: &Fields) -> Result<Shared, Invalid> {
    let flight_id = Fields::required(fields.flight_id, "flight_id")?;
    Ok(Shared {
        flight_id: flight_id.to_owned(),
        revision: fields.revision()?,
        payload: fields.payload(),
        slot: fields.slot.map(str::to_owned),
    })
}

/// The problem of a flight row without any time: it holds no event.
fn no_time(columns: &[Column]) -> Invalid {
    let times: Vec<&str> = columns
        .iter()
        .filter_map(|column| match column {
            Column::Time(time) => Some(TIMES[*time]),
            _ => None,
        })
        .collect();
    invalid(
        InvalidReason::MissingField,
        format!(
            "the row has no time in {}, so it holds no event",
            times.join(" or ")
        ),
    )
}

/// Reads the header row's cells (found on line `line`): its columns and shape.
fn header<'a>(
    cells: impl Iterator<Item = (&'a str, bool)>,
    line: u64,
) -> Result<Header, ReadError> {
    let mut columns = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (i, (cell, stray)) in cells.enumerate() {
        let number = i + 1;
        if stray {
            return Err(bad_shape(format!(
                "the header row (line {line}) is not RFC 4180 CSV: its column {number} has text \
                 after the closing quote (a quote inside a quoted name is written twice)"
            )));
        }
        let name = cell.trim();
        if name.is_empty() {
            return Err(bad_shape(format!(
                "the header's column {number} has no name (a comma too many at the end of the \
                 header row?); remove it, or name it as one of {NAMES}"
            )));
        }
        let Some(column) = Column::named(name) else {
            return Err(bad_shape(format!(
                "the header has the column {name:?}, which is none of {NAMES}; name it \
                 payload.{name} to keep it in each event's payload"
            )));
        };
        if matches!(&column, Column::Payload(member) if member.trim().is_empty()) {
            return Err(bad_shape(format!(
                "the header's column {number}, {name:?}, names no payload member after \
                 \"payload.\"; write the member's name after the dot"
            )));
        }
        if let Some(first) = seen.insert(name.to_ascii_lowercase(), number) {
            return Err(bad_shape(format!(
                "the header names the column {name:?} twice (columns {first} and {number}; \
                 names are matched without regard to case); keep one"
            )));
        }
        columns.push(column);
    }
    let has = |wanted: &Column| columns.contains(wanted);
    if (has(&Column::Crew) || has(&Column::CrewPositioning))
        && let Some(Column::Payload(member)) = columns
            .iter()
            .find(|c| matches!(c, Column::Payload(m) if m == "crew"))
    {
        return Err(bad_shape(format!(
            "the header has both payload.{member} and crew or crew_positioning, which all \
             write the payload's crew member; keep only crew and crew_positioning"
        )));
    }
    let times = columns.iter().any(|c| matches!(c, Column::Time(_)));
    let shape = if has(&Column::EventKind) {
        for required in [Column::FlightId, Column::InstantUtc] {
            if !has(&required) {
                let name = if required == Column::FlightId {
                    "flight_id"
                } else {
                    "instant_utc"
                };
                return Err(bad_shape(format!(
                    "the header has event_kind, so each row is an event, but no {name} \
                     column, which every event needs; add it"
                )));
            }
        }
        if let Some(Column::Time(time)) = columns.iter().find(|c| matches!(c, Column::Time(_))) {
            return Err(bad_shape(format!(
                "the header has event_kind, so each row is an event with its time in \
                 instant_utc, and then also the flight-row column {}; send event rows and \
                 flight rows in separate files",
                TIMES[*time]
            )));
        }
        Shape::Events
    } else if has(&Column::FlightId) && times {
        for (column, name) in [
            (Column::InstantUtc, "instant_utc"),
            (Column::Retracted, "retracted"),
        ] {
            if has(&column) {
                return Err(bad_shape(format!(
                    "the header has flight_id and time columns but no event_kind, so each row \
                     is a flight, and flight rows have no {name} column; send such events as \
                     event rows (with event_kind) in a file of their own"
                )));
            }
        }
        Shape::Flights
    } else {
        return Err(bad_shape(
            "the header has neither event_kind (for event rows: flight_id, event_kind, \
             instant_utc) nor flight_id with one of off_blocks, takeoff, landing, on_blocks \
             (for flight rows); name the columns so",
        ));
    };
    Ok(Header { shape, columns })
}

#[cfg(test)]
mod tests {
    use std::io::BufReader;

    use super::*;

    const SETTLED: Limits = Limits {
        event_bytes_max: super::super::EVENT_BYTES_MAX_DEFAULT,
        settled: true,
    };
    const ARRIVING: Limits = Limits {
        settled: false,
        ..SETTLED
    };

    /// Every record of `text`, or the file's rejection (reason code, detail), read
    /// through buffers of several sizes, which must all agree.
    fn outcome(text: &[u8], limits: Limits) -> Result<Vec<Record>, (&'static str, String)> {
        let read = |capacity: usize| {
            let mut reader = CsvReader::new(BufReader::with_capacity(capacity, text), limits);
            super::super::read_to_end(|| reader.next_record())
                .map_err(|r| (r.reason.code(), r.detail))
        };
        let whole = read(1 << 16);
        for capacity in [1, 2, 3, 5, 64] {
            assert_eq!(read(capacity), whole, "buffer of {capacity} bytes");
        }
        whole
    }

    /// The records of a settled file that is not rejected.
    fn records(text: &str) -> Vec<Record> {
        outcome(text.as_bytes(), SETTLED).unwrap_or_else(|e| panic!("{text:?}: {e:?}"))
    }

    /// The rejection of `text`.
    fn rejection(text: &str, limits: Limits) -> (&'static str, String) {
        match outcome(text.as_bytes(), limits) {
            Ok(records) => panic!("{text:?} was read: {records:?}"),
            Err(rejection) => rejection,
        }
    }

    fn event(record: &Record) -> &Event {
        record
            .event
            .as_ref()
            .unwrap_or_else(|e| panic!("{:?}: {e:?}", record.raw))
    }

    /// The reason code and detail of an invalid record.
    fn problem(record: &Record) -> (&'static str, &str) {
        match &record.event {
            Ok(event) => panic!("{:?} is valid: {event:?}", record.raw),
            Err(invalid) => (invalid.reason.code(), invalid.detail.as_str()),
        }
    }

    /// The event the JSON path makes of `text`.
    fn json(text: &str) -> Event {
        Event::parse(text, 128).unwrap_or_else(|e| panic!("{text}: {e:?}"))
    }

    #[test]
    fn an_event_row_is_the_event_its_json_is() {
        let text = "flight_id,event_kind,instant_utc,source_revision,retracted,slot,crew,\
                    crew_positioning,payload.tail,payload.Gate\n\
                    BA0117-20261129 , Landing,2026-11-29T11:05:00+01:00,3,true, s1 ,C1; C2;;,\
                    C9,G-XWBA, B 7\n\
                    BA0117-20261129,off_blocks,2026-11-29T09:05:00Z,,,,,,,\n";
        let got = records(text);
        assert_eq!(got.len(), 2);
        assert_eq!(
            *event(&got[0]),
            json(
                r#"{"flight_id":"BA0117-20261129","event_kind":"landing",
                "instant_utc":"2026-11-29T10:05:00Z","source_revision":3,"retracted":true,
                "slot":"s1","payload":{"tail":"G-XWBA","Gate":" B 7",
                "crew":["C1","C2",{"role":"positioning","id":"C9"}]}}"#
            )
        );
        assert_eq!(
            event(&got[0]).payload(),
            r#"{"Gate":" B 7","crew":["C1","C2",{"id":"C9","role":"positioning"}],"tail":"G-XWBA"}"#
        );
        // Empty cells are absent fields.
        assert_eq!(
            *event(&got[1]),
            json(
                r#"{"flight_id":"BA0117-20261129","event_kind":"off_blocks",
                "instant_utc":"2026-11-29T09:05:00Z"}"#
            )
        );
        assert_eq!(event(&got[1]).revision(), None);
        assert_eq!(event(&got[1]).payload(), "{}");
        assert_eq!(
            got.iter()
                .map(|r| (r.index, r.raw.as_str()))
                .collect::<Vec<_>>(),
            [
                (
                    0,
                    "BA0117-20261129 , Landing,2026-11-29T11:05:00+01:00,3,true, s1 ,C1; C2;;,\
                     C9,G-XWBA, B 7"
                ),
                (1, "BA0117-20261129,off_blocks,2026-11-29T09:05:00Z,,,,,,,"),
            ]
        );
    }

    #[test]
    fn positioning_crew_alone_and_crew_cells_of_separators_only() {
        let text = "flight_id,event_kind,instant_utc,crew,crew_positioning\n\
                    F1,duty_start,2026-11-29T09:05:00Z,,P1 ; P2\n\
                    F1,duty_end,2026-11-29T19:05:00Z, ; ;,;\n";
        let got = records(text);
        assert_eq!(
            event(&got[0]).payload(),
            r#"{"crew":[{"id":"P1","role":"positioning"},{"id":"P2","role":"positioning"}]}"#
        );
        assert_eq!(event(&got[1]).payload(), "{}");
    }

    #[test]
    fn a_flight_row_is_one_event_per_time_in_the_order_of_a_flight() {
        // The header's order of time columns does not matter, nor the case and
        // spaces of its names.
        let text = "Flight_ID , ON_BLOCKS,takeoff, Off_Blocks,landing,source_revision,slot,crew,\
                    payload.tail\r\n\
                    BA0117-20261129,2026-11-29T12:00:00Z,2026-11-29T10:15:00Z,\
                    2026-11-29T10:05:00+00:00,,7,leg1,C1;C2,G-XWBA\r\n\
                    BA0118-20261129,,,2026-11-29T14:00:00Z,,,,,\r\n";
        let got = records(text);
        let first = "BA0117-20261129,2026-11-29T12:00:00Z,2026-11-29T10:15:00Z,\
                     2026-11-29T10:05:00+00:00,,7,leg1,C1;C2,G-XWBA";
        let second = "BA0118-20261129,,,2026-11-29T14:00:00Z,,,,,";
        assert_eq!(
            got.iter()
                .map(|r| (r.index, r.raw.as_str()))
                .collect::<Vec<_>>(),
            [(0, first), (1, first), (2, first), (3, second)]
        );
        let expected = |kind: &str, instant: &str| {
            json(&format!(
                r#"{{"flight_id":"BA0117-20261129","event_kind":"{kind}",
                "instant_utc":"{instant}","source_revision":7,"slot":"leg1",
                "payload":{{"crew":["C1","C2"],"tail":"G-XWBA"}}}}"#
            ))
        };
        assert_eq!(
            *event(&got[0]),
            expected("off_blocks", "2026-11-29T10:05:00Z")
        );
        assert_eq!(*event(&got[1]), expected("takeoff", "2026-11-29T10:15:00Z"));
        assert_eq!(
            *event(&got[2]),
            expected("on_blocks", "2026-11-29T12:00:00Z")
        );
        assert_eq!(
            *event(&got[3]),
            json(
                r#"{"flight_id":"BA0118-20261129","event_kind":"off_blocks",
                "instant_utc":"2026-11-29T14:00:00Z"}"#
            )
        );
    }

    #[test]
    fn a_flight_row_without_a_time_or_a_flight_is_not_dropped_silently() {
        let text = "flight_id,off_blocks,on_blocks,source_revision\n\
                    F1,,,1\n\
                    ,2026-11-29T10:05:00Z,2026-11-29T12:00:00Z,1\n\
                    F2,2026-11-29T10:05:00Z,2026-11-29T12:00:00Z,x\n\
                    F3,2026-11-29T10:05:00,,\n\
                    F4,2026-11-29T10:05:00Z,,\n";
        let got = records(text);
        let problems: Vec<_> = got[..got.len() - 1].iter().map(problem).collect();
        assert_eq!(
            problems,
            [
                (
                    "missing_field",
                    "the row has no time in off_blocks or on_blocks, so it holds no event"
                ),
                ("missing_field", "the field \"flight_id\" is missing"),
                ("missing_field", "the field \"flight_id\" is missing"),
                (
                    "bad_revision",
                    "source_revision must be an integer from 0 to 2^63-1, not \"x\""
                ),
                (
                    "bad_revision",
                    "source_revision must be an integer from 0 to 2^63-1, not \"x\""
                ),
                (
                    "bad_instant",
                    problem(&Record {
                        index: 0,
                        raw: String::new(),
                        event: Event::parse(
                            r#"{"flight_id":"F3","event_kind":"off_blocks",
                            "instant_utc":"2026-11-29T10:05:00"}"#,
                            128
                        )
                    })
                    .1
                ),
            ]
        );
        assert_eq!(
            got.iter().map(|r| r.index).collect::<Vec<_>>(),
            [0, 1, 2, 3, 4, 5, 6]
        );
        assert_eq!(event(&got[6]).flight_id(), "F4");
    }

    #[test]
    fn cells_of_revision_and_retracted() {
        let row = |revision: &str, retracted: &str| {
            let text = format!(
                "flight_id,event_kind,instant_utc,source_revision,retracted\n\
                 F1,landing,2026-11-29T10:05:00Z,\"{revision}\",\"{retracted}\"\n"
            );
            records(&text).remove(0).event
        };
        let revision = |text: &str| row(text, "").map(|e| e.revision());
        assert_eq!(revision(" 3 "), Ok(Some(3)));
        assert_eq!(revision("0"), Ok(Some(0)));
        assert_eq!(revision("9223372036854775807"), Ok(Some(i64::MAX)));
        for bad in [
            "+3",
            "03",
            "3.0",
            "3e0",
            "-1",
            "x",
            " ",
            "9223372036854775808",
        ] {
            let got = revision(bad).expect_err(bad);
            assert_eq!(got.reason, InvalidReason::BadRevision, "{bad}: {got:?}");
        }
        let retracted = |text: &str| row("", text).map(|e| e.retracted());
        assert_eq!(retracted("true"), Ok(true));
        assert_eq!(retracted(" TRUE"), Ok(true));
        assert_eq!(retracted("False"), Ok(false));
        assert_eq!(retracted(""), Ok(false));
        let got = retracted("yes").expect_err("yes");
        assert_eq!(got.reason, InvalidReason::WrongType);
        assert_eq!(got.detail, "retracted must be true or false, not \"yes\"");
    }

    #[test]
    fn fields_are_checked_in_the_order_of_a_json_event() {
        let text = "flight_id,event_kind,instant_utc,source_revision,retracted,slot\n\
                    ,,,x,maybe,\n\
                    F1,,,x,maybe,\n\
                    F1,landing,,x,maybe,\n\
                    F1,landing,2026-11-29T10:05:00Z,x,maybe,\n\
                    F1,landing,2026-11-29T10:05:00Z,1,maybe,\n\
                    F|1,landing,2026-11-29T10:05:00Z,1,false,\n\
                    F1,landing,2026-11-29T10:05:00Z,1,false, \n\
                    \" \",landing,2026-11-29T10:05:00Z,1,false,\n";
        let got = records(text);
        let codes: Vec<_> = got.iter().map(|r| problem(r).0).collect();
        assert_eq!(
            codes,
            [
                "missing_field",
                "missing_field",
                "missing_field",
                "bad_revision",
                "wrong_type",
                "bad_flight_id",
                "bad_slot",
                "bad_flight_id",
            ]
        );
        assert!(problem(&got[1]).1.contains("\"event_kind\""));
        assert!(problem(&got[2]).1.contains("\"instant_utc\""));
    }

    #[test]
    fn a_byte_order_mark_crlf_and_quoted_cells() {
        let text = "\u{feff}flight_id,event_kind,instant_utc,payload.note\r\n\
                    \"F1\",\"landing\",2026-11-29T10:05:00Z,\"a, b \"\"c\"\"\r\nline 2\nline 3\"\r\n\
                    F2,landing,2026-11-29T10:05:00Z,\"\"\r\n\
                    F3,landing,2026-11-29T10:05:00Z,say \"hi\"\r\n\
                    F4,landing,2026-11-29T10:05:00Z,a\rb\r\n";
        let got = records(text);
        assert_eq!(got.len(), 4);
        assert_eq!(
            got[0].raw,
            "\"F1\",\"landing\",2026-11-29T10:05:00Z,\"a, b \"\"c\"\"\r\nline 2\nline 3\""
        );
        assert_eq!(
            *event(&got[0]),
            json(
                r#"{"flight_id":"F1","event_kind":"landing","instant_utc":"2026-11-29T10:05:00Z",
                "payload":{"note":"a, b \"c\"\r\nline 2\nline 3"}}"#
            )
        );
        // A quoted empty cell is empty; a quote inside an unquoted cell is text; so
        // is a carriage return that ends no line.
        assert_eq!(event(&got[1]).payload(), "{}");
        assert_eq!(event(&got[2]).payload(), r#"{"note":"say \"hi\""}"#);
        assert_eq!(event(&got[3]).payload(), r#"{"note":"a\rb"}"#);
        assert_eq!(got[3].raw, "F4,landing,2026-11-29T10:05:00Z,a\rb");
    }

    #[test]
    fn empty_lines_are_skipped_and_a_line_of_spaces_is_a_row() {
        let text = "\n\r\nflight_id,event_kind,instant_utc\n\n\
                    F1,landing,2026-11-29T10:05:00Z\n\r\n  \n\
                    F2,landing,2026-11-29T10:05:00Z\n\n";
        let got = records(text);
        assert_eq!(got.len(), 3);
        assert_eq!(event(&got[0]).flight_id(), "F1");
        assert_eq!(
            problem(&got[1]),
            (
                "bad_row",
                "the row on line 7 has 1 cells where the header has 3 columns"
            )
        );
        assert_eq!(got[1].raw, "  ");
        assert_eq!(event(&got[2]).flight_id(), "F2");
        assert_eq!(got[2].index, 2);
    }

    #[test]
    fn a_row_of_the_wrong_width_or_with_text_after_a_quote_is_bad_row() {
        let text = "flight_id,event_kind,instant_utc\n\
                    F1,landing\n\
                    F1,landing,2026-11-29T10:05:00Z,\n\
                    F1,\"land\"ing,2026-11-29T10:05:00Z\n\
                    ,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,,\n\
                    \"F1\nF1\",landing\n\
                    F1,landing,2026-11-29T10:05:00Z\n";
        let got = records(text);
        let problems: Vec<_> = got[..5].iter().map(problem).collect();
        assert_eq!(
            problems,
            [
                (
                    "bad_row",
                    "the row on line 2 has 2 cells where the header has 3 columns"
                ),
                (
                    "bad_row",
                    "the row on line 3 has 4 cells where the header has 3 columns"
                ),
                (
                    "bad_row",
                    "the row on line 4 is not RFC 4180 CSV: its cell 2 has text after the \
                     closing quote (a quote inside a quoted cell is written twice)"
                ),
                (
                    "bad_row",
                    "the row on line 5 has 39 cells where the header has 3 columns"
                ),
                (
                    "bad_row",
                    "the row on line 6 has 2 cells where the header has 3 columns"
                ),
            ]
        );
        assert_eq!(got[4].raw, "\"F1\nF1\",landing");
        assert_eq!(got[5].index, 5);
        assert!(got[5].event.is_ok());
    }

    #[test]
    fn a_header_of_neither_shape_or_with_a_stray_column_is_bad_shape() {
        let cases = [
            ("flight_id,event_kind,instant_utc,tail", "payload.tail"),
            ("flight_id,event_kind,instant_utc,", "column 4 has no name"),
            (
                "flight_id,event_kind,instant_utc,FLIGHT_ID ",
                "\"FLIGHT_ID\" twice",
            ),
            (
                "flight_id,event_kind,instant_utc,payload.Tail,payload.tail",
                "columns 4 and 5",
            ),
            (
                "flight_id,event_kind,instant_utc,payload.",
                "names no payload member",
            ),
            (
                "flight_id,event_kind,instant_utc,crew,payload.crew",
                "payload.crew",
            ),
            (
                "flight_id,event_kind,instant_utc,crew_positioning,payload.crew",
                "payload.crew",
            ),
            ("flight_id,event_kind", "no instant_utc column"),
            ("event_kind,instant_utc", "no flight_id column"),
            (
                "flight_id,event_kind,instant_utc,landing",
                "flight-row column landing",
            ),
            ("flight_id,off_blocks,instant_utc", "no instant_utc column"),
            ("flight_id,off_blocks,retracted", "no retracted column"),
            ("flight_id,instant_utc", "neither event_kind"),
            ("off_blocks,takeoff", "neither event_kind"),
            ("flight_id,\"event\"_kind,instant_utc", "not RFC 4180"),
        ];
        for (header, detail) in cases {
            let text = format!("{header}\nF1,landing,2026-11-29T10:05:00Z\n");
            let (code, said) = rejection(&text, SETTLED);
            assert_eq!(code, "bad_shape", "{header}: {said}");
            assert!(said.contains(detail), "{header}: {said}");
        }
        // A payload.crew column on its own is a payload member like any other.
        let text = "flight_id,event_kind,instant_utc,payload.crew\nF1,x,2026-11-29T10:05:00Z,C1\n";
        assert_eq!(event(&records(text)[0]).payload(), r#"{"crew":"C1"}"#);
    }

    #[test]
    fn a_file_with_no_header_row_is_empty_and_one_with_no_rows_has_no_events() {
        for text in ["\u{feff}", "\n", "\r\n\n", "\u{feff}\n\n"] {
            let (code, detail) = rejection(text, SETTLED);
            assert_eq!(code, "empty", "{text:?}: {detail}");
        }
        assert!(records("flight_id,off_blocks\n").is_empty());
        assert!(records("flight_id,off_blocks\n\n").is_empty());
        // A header without a line end is read as it stands once the file is settled.
        assert!(records("flight_id,off_blocks").is_empty());
    }

    #[test]
    fn an_unended_last_record_waits_until_settled_unless_it_is_cut_inside_quotes() {
        let header = "flight_id,event_kind,instant_utc,payload.note\n";
        let row = "F1,landing,2026-11-29T10:05:00Z,\"a\nb\"";
        let text = format!("{header}{row}");
        let (code, detail) = rejection(&text, ARRIVING);
        assert_eq!(code, "truncated");
        assert_eq!(
            detail,
            "the last row (from line 2) has no line end; it may still be arriving"
        );
        let got = records(&text);
        assert_eq!(got[0].raw, row);
        assert!(got[0].event.is_ok());
        // A carriage return at the end of the file is no part of the record.
        let got = records(&format!("{text}\r"));
        assert_eq!(got[0].raw, row);
        assert_eq!(rejection(&format!("{text}\r"), ARRIVING).0, "truncated");
        // Even an empty last line waits: its line feed may be on its way.
        assert_eq!(rejection(&format!("{text}\n\r"), ARRIVING).0, "truncated");
        assert_eq!(records(&format!("{text}\n\r")).len(), 1);
        // The header alone.
        let (code, detail) = rejection("flight_id,off_blocks", ARRIVING);
        assert_eq!(code, "truncated");
        assert!(detail.starts_with("the header row"), "{detail}");
        // Inside a quoted cell (an escaped quote too), the file is cut, settled or not.
        for cut in [
            "F1,landing,\"2026",
            "F1,landing,2026-11-29T10:05:00Z,\"a\"\"",
        ] {
            for limits in [SETTLED, ARRIVING] {
                let (code, detail) = rejection(&format!("{header}{cut}"), limits);
                assert_eq!(code, "truncated", "{cut}");
                assert_eq!(
                    detail,
                    "the last row (from line 2) ends inside a quoted cell, with no closing \
                     quote; it may still be arriving"
                );
            }
        }
        let (code, _) = rejection("flight_id,\"off_blocks", SETTLED);
        assert_eq!(code, "truncated");
        // A rejection is the reader's last word, whatever came before it; an
        // unended row is never taken for a complete one.
        let mut reader = CsvReader::new(text.as_bytes(), ARRIVING);
        assert!(matches!(
            reader.next_record(),
            Err(ReadError::Rejected(r)) if r.reason == RejectReason::Unended
        ));
    }

    #[test]
    fn a_record_longer_than_the_limit_is_too_large_and_reading_goes_on() {
        let header = "flight_id,off_blocks,takeoff,payload.note\n";
        let short = "F1,2026-11-29T10:05:00Z,2026-11-29T10:15:00Z,ok";
        // A long quoted cell of multi-byte characters, over several lines.
        let long = format!(
            "F2,2026-11-29T10:05:00Z,2026-11-29T10:15:00Z,\"{}\"",
            "\u{e9}\n\"\"".repeat(100)
        );
        let text = format!("{header}{short}\r\n{long}\r\n{short}\n");
        for max in [short.len(), 100, 101, 102] {
            let limits = Limits {
                event_bytes_max: max,
                settled: true,
            };
            let got = outcome(text.as_bytes(), limits).expect("read");
            assert_eq!(got.len(), 5, "{max}");
            assert_eq!(
                got.iter().map(|r| r.index).collect::<Vec<_>>(),
                [0, 1, 2, 3, 4]
            );
            let (code, detail) = problem(&got[2]);
            assert_eq!(code, "too_large");
            assert!(
                detail.contains(&format!("is {} bytes", long.len()))
                    && detail.contains(&format!("limit of {max} bytes")),
                "{detail}"
            );
            assert!(got[2].raw.len() <= max && got[2].raw.len() + 4 > max);
            assert!(long.starts_with(&got[2].raw));
            for i in [0, 1, 3, 4] {
                assert_eq!(got[i].raw, short);
                assert!(got[i].event.is_ok());
            }
        }
        // At the limit, a record is read.
        let limits = Limits {
            event_bytes_max: long.len(),
            settled: true,
        };
        let got = outcome(text.as_bytes(), limits).expect("read");
        assert_eq!(got.len(), 6);
        assert_eq!(got[2].raw, long);
        // A header over the limit is no header spoolite reads.
        let limits = Limits {
            event_bytes_max: 10,
            settled: true,
        };
        let (code, detail) = outcome(text.as_bytes(), limits).expect_err("too long");
        assert_eq!(code, "bad_shape", "{detail}");
    }

    #[test]
    fn where_csv_core_reads_otherwise_spoolite_keeps_its_choices() {
        let header = "flight_id,event_kind,instant_utc,payload.note\r\n";
        let text = format!(
            "{header}F1,landing,2026-11-29T10:05:00Z,\"a\"\"\"\r\n\
             F2,landing,2026-11-29T10:05:00Z,\"a\"b\"\r\n\
             F3,landing,2026-11-29T10:05:00Z,\"a\"\r\r\n"
        );
        let got = records(&text);
        assert_eq!(event(&got[0]).payload(), r#"{"note":"a\""}"#);
        // Text after the closing quote, even text that ends in a quote.
        assert_eq!(problem(&got[1]).0, "bad_row");
        assert_eq!(got[1].raw, "F2,landing,2026-11-29T10:05:00Z,\"a\"b\"");
        // Only the carriage return before the line feed is the line end's.
        assert_eq!(problem(&got[2]).0, "bad_row");
        assert_eq!(got[2].raw, "F3,landing,2026-11-29T10:05:00Z,\"a\"\r");
        // A second byte-order mark is text of the first header name.
        let (code, _) = rejection(&format!("\u{feff}\u{feff}{header}"), SETTLED);
        assert_eq!(code, "bad_shape");
        // A record over the limit cut inside a quoted cell is cut all the same.
        let limits = Limits {
            event_bytes_max: 60,
            settled: true,
        };
        let cut = format!(
            "{header}F1,landing,2026-11-29T10:05:00Z,\"{}",
            "x\n".repeat(40)
        );
        let (code, _) = outcome(cut.as_bytes(), limits).expect_err("cut");
        assert_eq!(code, "truncated");
        let whole = format!("{cut}\"\n");
        let got = outcome(whole.as_bytes(), limits).expect("read");
        assert_eq!(problem(&got[0]).0, "too_large");
    }

    #[test]
    fn bytes_that_are_not_utf8_reject_the_file_without_a_panic() {
        let text = b"flight_id,off_blocks\nF\xff,2026-11-29T10:05:00Z\n";
        let (code, detail) = outcome(text, SETTLED).expect_err("not UTF-8");
        assert_eq!(code, "not_utf8");
        assert!(detail.contains("byte offset 22"), "{detail}");
        let (code, _) = outcome(b"flight_id,\xffoff_blocks\n", SETTLED).expect_err("not UTF-8");
        assert_eq!(code, "not_utf8");
    }
}
