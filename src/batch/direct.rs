//! One event's text read straight into an `Event`, without a tree of values: the
//! five fields taken as they are met, strings borrowed from the text unless they
//! hold escapes, and the payload written in its canonical form from the tokens
//! (members written as they come, an object's members reordered only when its keys
//! were not already in order).
//!
//! It must agree with `json::parse` followed by `Event::from_parsed` on every text,
//! in what it accepts, what it refuses and the words it refuses with: that pair
//! stays as the reference the tests hold this one to. So the grammar below follows
//! `json::Parser` step for step, and the field rules run in `from_parsed`'s order,
//! after the whole text is read.

use super::event::{self, Event, FIELDS, Invalid, InvalidReason};
use super::json::{Cursor, JsonError, write_string};

/// Buffers kept from one event to the next, so that reading an event allocates
/// only what the event keeps.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// The decoded text of strings that hold escapes.
    decoded: String,
    /// The members of the objects being read, innermost last.
    members: Vec<Member>,
    /// Where each open object's members begin in `members`.
    open: Vec<usize>,
    /// The canonical payload being written.
    payload: String,
    /// Where the canonical text of values nobody keeps (an unknown field's, a
    /// second payload's) goes: they are written only to be checked.
    discard: String,
    /// A copy of an object's members while they are put in order.
    reorder: String,
    order: Vec<usize>,
}

impl Scratch {
    fn clear(&mut self) {
        self.decoded.clear();
        self.members.clear();
        self.open.clear();
        self.payload.clear();
        self.discard.clear();
    }
}

/// A string's text: a slice of the event's text when it holds no escape, else a
/// slice of `Scratch::decoded`.
#[derive(Debug, Clone, Copy)]
enum Span {
    Raw(usize, usize),
    Decoded(usize, usize),
}

/// One member of an object: its key, and where `"key":value` stands in the output.
#[derive(Debug, Clone, Copy)]
struct Member {
    key: Span,
    start: usize,
    end: usize,
}

/// What a top-level field's value is, as much as the field rules need.
#[derive(Debug, Clone, Copy)]
enum Slot {
    Null,
    Bool(bool),
    Number(usize, usize),
    Text(Span),
    Array,
    Object,
}

impl Slot {
    fn type_name(self) -> &'static str {
        match self {
            Slot::Null => "null",
            Slot::Bool(_) => "a boolean",
            Slot::Number(..) => "a number",
            Slot::Text(_) => "a string",
            Slot::Array => "an array",
            Slot::Object => "an object",
        }
    }
}

const PAYLOAD: usize = 4;
const RETRACTED: usize = 5;
const SLOT: usize = 6;

/// The place of `name` in `FIELDS`.
fn field_index(name: &str) -> Option<usize> {
    match name {
        "flight_id" => Some(0),
        "event_kind" => Some(1),
        "instant_utc" => Some(2),
        "source_revision" => Some(3),
        "payload" => Some(PAYLOAD),
        "retracted" => Some(RETRACTED),
        "slot" => Some(SLOT),
        _ => None,
    }
}

/// What reading the text found, before the field rules judge it.
enum Read {
    /// The text is one JSON value that is not an object: its type.
    NotObject(&'static str),
    Object {
        /// The first value of each known field, in `FIELDS` order.
        fields: [Option<Slot>; 7],
        /// The first key that is not a known field.
        unknown: Option<Span>,
    },
}

/// Why an event cannot be had: its text is not JSON (the caller says where), or
/// it breaks a field rule.
#[derive(Debug)]
pub(crate) enum Problem {
    Json(JsonError),
    Invalid(Invalid),
}

impl From<JsonError> for Problem {
    fn from(error: JsonError) -> Problem {
        Problem::Json(error)
    }
}

impl From<Invalid> for Problem {
    fn from(invalid: Invalid) -> Problem {
        Problem::Invalid(invalid)
    }
}

/// Reads `text` as one event; `depth_max` is how many levels may nest, the event
/// object being level 1. Long because it is one pass over the event's fields with
/// each field's rule inline: the per-event hot path, one dispatch per field.
pub(crate) fn parse_event(
    text: &str,
    depth_max: usize,
    scratch: &mut Scratch,
) -> Result<Event, Problem> {
    scratch.clear();
    let mut parser = Parser {
        text,
        cursor: Cursor::new(text),
        depth_max,
        duplicate: None,
        s: scratch,
    };
    let read = parser.document()?;
    let duplicate = parser.duplicate.take();
    let s = parser.s;
    let (fields, unknown) = match read {
        Read::NotObject(what) => {
            return Err(invalid(
                InvalidReason::NotObject,
                format!("the event is {what}, not an object"),
            ));
        }
        Read::Object { fields, unknown } => (fields, unknown),
    };
    if let Some(path) = duplicate {
        return Err(invalid(
            InvalidReason::DuplicateField,
            format!("the field {path:?} stands more than once"),
        ));
    }
    if let Some(name) = unknown {
        let name = span_text(text, &s.decoded, name);
        return Err(invalid(
            InvalidReason::UnknownField,
            format!("the field {name:?} is not one of {}", FIELDS.join(", ")),
        ));
    }
    let field_text = |i: usize| -> Result<&str, Problem> {
        let name = FIELDS[i];
        match fields[i] {
            None => Err(invalid(
                InvalidReason::MissingField,
                format!("the field {name:?} is missing"),
            )),
            Some(Slot::Text(span)) => Ok(span_text(text, &s.decoded, span)),
            Some(other) => Err(invalid(
                InvalidReason::WrongType,
                format!("{name} must be a string, not {}", other.type_name()),
            )),
        }
    };
    let (flight_id, event_kind, instant) = (field_text(0)?, field_text(1)?, field_text(2)?);
    let revision = match fields[3] {
        None | Some(Slot::Null) => None,
        Some(Slot::Number(a, b)) => {
            Some(event::revision_from_number(&text[a..b], "source_revision")?)
        }
        Some(other) => {
            return Err(invalid(
                InvalidReason::WrongType,
                format!(
                    "source_revision must be an integer, not {}",
                    other.type_name()
                ),
            ));
        }
    };
    let payload = match fields[PAYLOAD] {
        None | Some(Slot::Null) => "{}",
        Some(Slot::Object) => s.payload.as_str(),
        Some(other) => {
            return Err(invalid(
                InvalidReason::WrongType,
                format!("payload must be an object, not {}", other.type_name()),
            ));
        }
    };
    let retracted = match fields[RETRACTED] {
        None | Some(Slot::Null) => false,
        Some(Slot::Bool(retracted)) => retracted,
        Some(other) => {
            return Err(invalid(
                InvalidReason::WrongType,
                format!("retracted must be true or false, not {}", other.type_name()),
            ));
        }
    };
    let slot = match fields[SLOT] {
        None => None,
        Some(Slot::Text(span)) => Some(span_text(text, &s.decoded, span)),
        Some(other) => {
            return Err(invalid(
                InvalidReason::WrongType,
                format!("slot must be a string, not {}", other.type_name()),
            ));
        }
    };
    Ok(Event::from_fields(
        flight_id, event_kind, instant, revision, payload, retracted, slot,
    )?)
}

fn invalid(reason: InvalidReason, detail: String) -> Problem {
    Problem::Invalid(Invalid { reason, detail })
}

fn span_text<'a>(text: &'a str, decoded: &'a str, span: Span) -> &'a str {
    match span {
        Span::Raw(a, b) => &text[a..b],
        Span::Decoded(a, b) => &decoded[a..b],
    }
}

struct Parser<'t, 's> {
    text: &'t str,
    cursor: Cursor<'t>,
    depth_max: usize,
    /// The first duplicate key met, with its path (see `json::Parsed::duplicate`).
    duplicate: Option<String>,
    s: &'s mut Scratch,
}

impl<'t> std::ops::Deref for Parser<'t, '_> {
    type Target = Cursor<'t>;
    fn deref(&self) -> &Cursor<'t> {
        &self.cursor
    }
}

impl std::ops::DerefMut for Parser<'_, '_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.cursor
    }
}

impl Parser<'_, '_> {
    fn key_text(&self, span: Span) -> &str {
        span_text(self.text, &self.s.decoded, span)
    }

    /// The whole text: one value with optional whitespace around it.
    fn document(&mut self) -> Result<Read, JsonError> {
        self.skip_whitespace();
        let read = match self.peek() {
            Some(b'{') => self.event_object()?,
            first => {
                let mut sink = std::mem::take(&mut self.s.discard);
                let result = self.value(0, &mut sink);
                self.s.discard = sink;
                result?;
                Read::NotObject(match first {
                    Some(b'[') => "an array",
                    Some(b'"') => "a string",
                    Some(b't' | b'f') => "a boolean",
                    Some(b'n') => "null",
                    _ => "a number",
                })
            }
        };
        self.skip_whitespace();
        if self.pos != self.bytes.len() {
            return Err(self.syntax("unexpected text after the value"));
        }
        Ok(read)
    }

    /// The event object (level 1): its members' values kept as slots, the payload
    /// written canonically.
    fn event_object(&mut self) -> Result<Read, JsonError> {
        if 1 > self.depth_max {
            return Err(JsonError::TooDeep { offset: self.pos });
        }
        self.pos += 1;
        let mut fields: [Option<Slot>; 7] = [None; 7];
        let mut unknown = None;
        self.s.open.push(0);
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Read::Object { fields, unknown });
        }
        // A key can stand twice only if a known field repeats or two unknown
        // keys are met; otherwise the search for duplicates is skipped.
        let mut repeated = false;
        let mut unknowns = 0;
        loop {
            let key = self.object_key()?;
            self.s.members.push(Member {
                key,
                start: 0,
                end: 0,
            });
            let known = field_index(self.key_text(key));
            if known.is_none() && unknown.is_none() {
                unknown = Some(key);
            }
            let keep_payload = known == Some(PAYLOAD) && fields[PAYLOAD].is_none();
            let slot = self.field_value(keep_payload)?;
            match known {
                Some(i) if fields[i].is_none() => fields[i] = Some(slot),
                Some(_) => repeated = true,
                None => unknowns += 1,
            }
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    if repeated || unknowns > 1 {
                        self.note_duplicate(0);
                    }
                    return Ok(Read::Object { fields, unknown });
                }
                _ => return Err(self.syntax("expected ',' or '}' in an object")),
            }
        }
    }

    /// The value of a top-level field, as a slot. An object is written out
    /// canonically: into the payload when `keep_payload`, else only to be checked.
    fn field_value(&mut self, keep_payload: bool) -> Result<Slot, JsonError> {
        match self.peek() {
            Some(b'"') => return self.string().map(Slot::Text),
            Some(b'-' | b'0'..=b'9') => {
                let start = self.pos;
                self.skip_number()?;
                return Ok(Slot::Number(start, self.pos));
            }
            _ => {}
        }
        let mut sink = if keep_payload {
            std::mem::take(&mut self.s.payload)
        } else {
            std::mem::take(&mut self.s.discard)
        };
        let slot = match self.peek() {
            Some(b'{') => Slot::Object,
            Some(b'[') => Slot::Array,
            Some(b'n') => Slot::Null,
            Some(b't') => Slot::Bool(true),
            _ => Slot::Bool(false),
        };
        let result = self.value(1, &mut sink);
        if keep_payload {
            self.s.payload = sink;
        } else {
            sink.clear();
            self.s.discard = sink;
        }
        result.map(|()| slot)
    }

    /// Whether `key`, about to join the open object whose members begin at `base`,
    /// comes after its last key in byte order (so the object needs no reordering).
    fn follows_in_order(&self, base: usize, key: Span) -> bool {
        match self.s.members.len().checked_sub(1) {
            Some(last) if last >= base => {
                self.key_text(self.s.members[last].key).as_bytes() < self.key_text(key).as_bytes()
            }
            _ => true,
        }
    }

    /// Reads a value nested `depth` levels deep, writing it canonically to `out`.
    fn value(&mut self, depth: usize, out: &mut String) -> Result<(), JsonError> {
        match self.peek() {
            None => Err(self.eof()),
            Some(b'{') => self.object(depth + 1, out),
            Some(b'[') => self.array(depth + 1, out),
            Some(b'"') => {
                let span = self.string()?;
                self.write_string(span, out);
                Ok(())
            }
            Some(b't') => self.literal("true", out),
            Some(b'f') => self.literal("false", out),
            Some(b'n') => self.literal("null", out),
            Some(b'-' | b'0'..=b'9') => {
                let start = self.pos;
                self.skip_number()?;
                // Numbers are kept exactly as written.
                out.push_str(&self.text[start..self.pos]);
                Ok(())
            }
            Some(_) => Err(self.syntax("expected a JSON value")),
        }
    }

    fn write_string(&self, span: Span, out: &mut String) {
        match span {
            // Text between quotes without escapes has no quote, backslash or
            // control character: it is already in the canonical form.
            Span::Raw(a, b) => {
                out.push('"');
                out.push_str(&self.text[a..b]);
                out.push('"');
            }
            Span::Decoded(a, b) => write_string(&self.s.decoded[a..b], out),
        }
    }

    fn literal(&mut self, word: &'static str, out: &mut String) -> Result<(), JsonError> {
        for &expected in word.as_bytes() {
            match self.peek() {
                Some(b) if b == expected => self.pos += 1,
                _ => return Err(self.syntax("expected true, false or null")),
            }
        }
        out.push_str(word);
        Ok(())
    }

    /// An object's next key and the `:` after it, the whitespace around them
    /// skipped.
    fn object_key(&mut self) -> Result<Span, JsonError> {
        self.skip_whitespace();
        if self.peek() != Some(b'"') {
            return Err(self.syntax("expected a string key in an object"));
        }
        let key = self.string()?;
        self.skip_whitespace();
        self.expect(b':', "expected ':' after an object key")?;
        self.skip_whitespace();
        Ok(key)
    }

    /// A string, borrowed from the text when it holds no escape.
    fn string(&mut self) -> Result<Span, JsonError> {
        self.pos += 1; // the opening quote
        let start = self.pos;
        self.run();
        match self.peek() {
            Some(b'"') => {
                self.pos += 1;
                Ok(Span::Raw(start, self.pos - 1))
            }
            Some(b'\\') => self.escaped_string(start),
            None => Err(self.eof()),
            Some(_) => Err(self.syntax("control character in a string")),
        }
    }

    /// Steps over plain string content: up to a quote, a backslash, a control
    /// character or the end.
    fn run(&mut self) {
        self.pos += plain_run(&self.bytes[self.pos..]);
    }

    /// The rest of a string that holds an escape (at `self.pos`), decoded into
    /// `Scratch::decoded`; its content began at `start`.
    fn escaped_string(&mut self, start: usize) -> Result<Span, JsonError> {
        let mut out = std::mem::take(&mut self.s.decoded);
        let from = out.len();
        out.push_str(&self.text[start..self.pos]);
        let result = self.decode_rest(&mut out);
        let to = out.len();
        self.s.decoded = out;
        result.map(|()| Span::Decoded(from, to))
    }

    fn decode_rest(&mut self, out: &mut String) -> Result<(), JsonError> {
        loop {
            match self.peek() {
                None => return Err(self.eof()),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(out)?;
                }
                Some(_) => return Err(self.syntax("control character in a string")),
            }
            let run_start = self.pos;
            self.run();
            // The run stops only at ASCII bytes, so it is whole characters.
            out.push_str(&self.text[run_start..self.pos]);
        }
    }

    fn array(&mut self, depth: usize, out: &mut String) -> Result<(), JsonError> {
        if depth > self.depth_max {
            return Err(JsonError::TooDeep { offset: self.pos });
        }
        self.pos += 1;
        out.push('[');
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            out.push(']');
            return Ok(());
        }
        loop {
            self.skip_whitespace();
            self.value(depth, out)?;
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    out.push(',');
                }
                Some(b']') => {
                    self.pos += 1;
                    out.push(']');
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or ']' in an array")),
            }
        }
    }

    fn object(&mut self, depth: usize, out: &mut String) -> Result<(), JsonError> {
        if depth > self.depth_max {
            return Err(JsonError::TooDeep { offset: self.pos });
        }
        self.pos += 1;
        out.push('{');
        let body = out.len();
        let base = self.s.members.len();
        self.s.open.push(base);
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            out.push('}');
            self.s.open.pop();
            return Ok(());
        }
        let mut sorted = true;
        loop {
            let key = self.object_key()?;
            sorted &= self.follows_in_order(base, key);
            let start = out.len();
            self.write_string(key, out);
            out.push(':');
            // Pushed before its value is read, so that the path of a duplicate
            // inside the value can name it.
            self.s.members.push(Member { key, start, end: 0 });
            self.value(depth, out)?;
            if let Some(member) = self.s.members.last_mut() {
                member.end = out.len();
            }
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    out.push(',');
                }
                Some(b'}') => {
                    self.pos += 1;
                    // Keys in strictly increasing order cannot repeat; sorting
                    // the others shows whether any does.
                    if !sorted && self.reorder(base, body, out) {
                        self.note_duplicate(base);
                    }
                    out.push('}');
                    self.s.members.truncate(base);
                    self.s.open.pop();
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or '}' in an object")),
            }
        }
    }

    /// Rewrites the members of the object whose members begin at `base` (written
    /// from `body` on in `out`) in the order of their keys' UTF-8 bytes; returns
    /// whether a key stands twice.
    fn reorder(&mut self, base: usize, body: usize, out: &mut String) -> bool {
        let mut order = std::mem::take(&mut self.s.order);
        order.clear();
        order.extend(base..self.s.members.len());
        order.sort_by(|&a, &b| {
            let (a, b) = (self.s.members[a].key, self.s.members[b].key);
            self.key_text(a).cmp(self.key_text(b))
        });
        let repeats = order.windows(2).any(|pair| {
            let (a, b) = (self.s.members[pair[0]].key, self.s.members[pair[1]].key);
            self.key_text(a) == self.key_text(b)
        });
        let mut copy = std::mem::take(&mut self.s.reorder);
        copy.clear();
        copy.push_str(&out[body..]);
        out.truncate(body);
        for (n, &i) in order.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            let member = self.s.members[i];
            out.push_str(&copy[member.start - body..member.end - body]);
        }
        self.s.reorder = copy;
        self.s.order = order;
        repeats
    }

    /// Records the first duplicate key of the object whose members begin at
    /// `base`, if it has one and none was met before (as `json::first_duplicate`
    /// picks it: the first repeated key in file order for small objects, the
    /// least repeated key for large ones).
    fn note_duplicate(&mut self, base: usize) {
        if self.duplicate.is_some() {
            return;
        }
        let members = &self.s.members[base..];
        let key = |i: usize| self.key_text(members[i].key);
        let found = if members.len() <= 16 {
            (0..members.len()).find(|&i| (0..i).any(|j| key(j) == key(i)))
        } else {
            let mut sorted: Vec<usize> = (0..members.len()).collect();
            sorted.sort_by(|&a, &b| key(a).cmp(key(b)));
            sorted
                .windows(2)
                .find(|pair| key(pair[0]) == key(pair[1]))
                .map(|pair| pair[0])
        };
        if let Some(i) = found {
            let mut path = self.path();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(key(i));
            self.duplicate = Some(path);
        }
    }

    /// The path of the innermost open object: the key of the member each open
    /// object is reading, joined by dots (as `json::Parser` builds it).
    fn path(&self) -> String {
        let mut path = String::new();
        for pair in self.s.open.windows(2) {
            let member = self.s.members[pair[1] - 1];
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(self.key_text(member.key));
        }
        path
    }
}

/// How many bytes `bytes` begins with that are neither a quote, a backslash nor a
/// control character: string content needing no escape. Most of an event's bytes
/// are such content, so it is looked at eight bytes at a time.
pub(crate) fn plain_run(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // The high bit of each byte of the result is set where `word`'s byte is below
    // `n` (for n <= 0x80); the lowest such byte is the first one, exactly.
    let below = |word: u64, n: u8| word.wrapping_sub(ONES * u64::from(n)) & !word & HIGHS;
    let mut done = 0;
    for chunk in bytes.chunks_exact(8) {
        let mut word_bytes = [0u8; 8];
        word_bytes.copy_from_slice(chunk);
        let word = u64::from_le_bytes(word_bytes);
        let stops = below(word ^ (ONES * u64::from(b'"')), 1)
            | below(word ^ (ONES * u64::from(b'\\')), 1)
            | below(word, 0x20);
        if stops != 0 {
            return done + stops.trailing_zeros() as usize / 8;
        }
        done += 8;
    }
    done + bytes[done..]
        .iter()
        .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
        .unwrap_or(bytes.len() - done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Eight bytes at a time finds what one at a time finds.
        #[test]
        fn plain_run_stops_where_a_byte_loop_does(
            bytes in prop::collection::vec(
                prop_oneof![Just(b'"'), Just(b'\\'), 0u8..0x21, 0x21u8..=0xff, Just(0x7f), Just(0x80)],
                0..40,
            ),
            at in 0usize..40,
        ) {
            let mut plain = vec![b'a'; at];
            plain.extend(&bytes);
            let naive = plain
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(plain.len());
            prop_assert_eq!(plain_run(&plain), naive);
        }
    }
}
