//! One flight duty event: the field rules, canonical forms and idempotency key of the
//! contract, as domain types with private fields. Pure functions, no I/O.

use std::borrow::Cow;

use sha2::{Digest, Sha256};

use super::json::{self, Value};

/// Why an event is invalid: a quarantine `reason` code and a sentence for `detail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub(crate) reason: InvalidReason,
    pub(crate) detail: String,
}

/// The quarantine reason codes of the contract (`conflict` is decided by the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InvalidReason {
    MissingField,
    UnknownField,
    DuplicateField,
    WrongType,
    BadFlightId,
    BadEventKind,
    BadInstant,
    BadRevision,
    NotObject,
    NotJson,
    TooDeep,
    TooLarge,
    BadSlot,
    /// A row of a CSV batch whose number of cells is not the header's.
    BadRow,
}

impl InvalidReason {
    pub(crate) fn code(self) -> &'static str {
        match self {
            InvalidReason::MissingField => "missing_field",
            InvalidReason::UnknownField => "unknown_field",
            InvalidReason::DuplicateField => "duplicate_field",
            InvalidReason::WrongType => "wrong_type",
            InvalidReason::BadFlightId => "bad_flight_id",
            InvalidReason::BadEventKind => "bad_event_kind",
            InvalidReason::BadInstant => "bad_instant",
            InvalidReason::BadRevision => "bad_revision",
            InvalidReason::NotObject => "not_object",
            InvalidReason::NotJson => "not_json",
            InvalidReason::TooDeep => "too_deep",
            InvalidReason::TooLarge => "too_large",
            InvalidReason::BadSlot => "bad_slot",
            InvalidReason::BadRow => "bad_row",
        }
    }
}

pub(crate) fn invalid(reason: InvalidReason, detail: impl Into<String>) -> Invalid {
    Invalid {
        reason,
        detail: detail.into(),
    }
}

/// `flight_id`: 1–64 printable ASCII characters other than `|`, trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlightId(String);

/// `text` without the Unicode whitespace around it. Most fields have none: when
/// both ends are printable ASCII, the text is its own trimmed form.
fn trim(text: &str) -> &str {
    match (text.as_bytes().first(), text.as_bytes().last()) {
        (Some(b'!'..=b'~'), Some(b'!'..=b'~')) => text,
        _ => text.trim(),
    }
}

impl FlightId {
    pub fn parse(text: &str) -> Result<FlightId, Invalid> {
        flight_id_form(text).map(|form| FlightId(form.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The canonical form of a `flight_id`, a slice of `text`, or why it is invalid.
fn flight_id_form(text: &str) -> Result<&str, Invalid> {
    {
        let trimmed = trim(text);
        // The common case in one pass over the bytes; anything else takes the
        // checks below, which say what is wrong.
        if (1..=64).contains(&trimmed.len())
            && trimmed
                .bytes()
                .all(|b| (b'!'..=b'~').contains(&b) && b != b'|')
        {
            return Ok(trimmed);
        }
        let len = trimmed.len();
        if len == 0 || len > 64 {
            let why = format!("flight_id must be 1 to 64 characters after trimming, not {len}");
            return Err(invalid(InvalidReason::BadFlightId, why));
        }
        if let Some(c) = trimmed
            .chars()
            .find(|&c| !('!'..='~').contains(&c) || c == '|')
        {
            let why =
                format!("flight_id may hold only printable ASCII other than '|', and holds {c:?}");
            return Err(invalid(InvalidReason::BadFlightId, why));
        }
        Ok(trimmed)
    }
}

/// The canonical form of a `slot` (1–64 printable ASCII characters after
/// trimming), a slice of `text`, or why it is invalid.
fn slot_form(text: &str) -> Result<&str, Invalid> {
    let trimmed = trim(text);
    let len = trimmed.len();
    if len == 0 || len > 64 {
        let why = format!("slot must be 1 to 64 characters after trimming, not {len}");
        return Err(invalid(InvalidReason::BadSlot, why));
    }
    if let Some(c) = trimmed.chars().find(|c| !('!'..='~').contains(c)) {
        let why = format!("slot may hold only printable ASCII, and holds {c:?}");
        return Err(invalid(InvalidReason::BadSlot, why));
    }
    Ok(trimmed)
}

/// `event_kind`: `[a-z][a-z0-9_]{0,31}` after trimming and ASCII-lowercasing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventKind(String);

impl EventKind {
    pub fn parse(text: &str) -> Result<EventKind, Invalid> {
        event_kind_form(text).map(|form| EventKind(form.into_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn is_event_kind(bytes: &[u8]) -> bool {
    matches!(bytes.first(), Some(b'a'..=b'z'))
        && bytes.len() <= 32
        && bytes
            .iter()
            .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'_'))
}

/// The canonical form of an `event_kind` (a slice of `text` when it is already
/// lowercase), or why it is invalid.
fn event_kind_form(text: &str) -> Result<Cow<'_, str>, Invalid> {
    let trimmed = trim(text);
    if is_event_kind(trimmed.as_bytes()) {
        return Ok(Cow::Borrowed(trimmed));
    }
    let kind = trimmed.to_ascii_lowercase();
    if !is_event_kind(kind.as_bytes()) {
        // Quoted as sent: the sender looks for what they wrote, not its lowercase.
        let why =
            format!("event_kind {text:?} must be a letter then up to 31 letters, digits or '_'");
        return Err(invalid(InvalidReason::BadEventKind, why));
    }
    Ok(Cow::Owned(kind))
}

/// `instant_utc`: an RFC 3339 instant with an explicit offset, held in its canonical
/// UTC form `YYYY-MM-DDTHH:MM:SS[.fraction]Z`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instant(String);

impl Instant {
    pub fn parse(text: &str) -> Result<Instant, Invalid> {
        instant_form(text).map(|form| Instant(form.into_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The canonical form of an `instant_utc` (a slice of `text` when it is already
/// canonical), or why it is invalid.
fn instant_form(text: &str) -> Result<Cow<'_, str>, Invalid> {
    let text = trim(text);
    if is_canonical_utc(text) {
        return Ok(Cow::Borrowed(text));
    }
    parse_rfc3339(text).map(Cow::Owned).map_err(|why| {
        invalid(
            InvalidReason::BadInstant,
            format!("instant_utc {text:?} {why}"),
        )
    })
}

/// Whether `text` is already an instant in the canonical form without a fraction,
/// `YYYY-MM-DDTHH:MM:SSZ` of a real date and time in years 0001–9999: then it is
/// its own canonical text, with nothing to convert (most instants are written so).
fn is_canonical_utc(text: &str) -> bool {
    let b = text.as_bytes();
    if b.len() != 20
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'Z'
    {
        return false;
    }
    let number = |at: usize, len: usize| -> Option<i32> {
        b[at..at + len].iter().try_fold(0, |n, &d| {
            d.is_ascii_digit().then(|| n * 10 + i32::from(d - b'0'))
        })
    };
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        number(0, 4),
        number(5, 2),
        number(8, 2),
        number(11, 2),
        number(14, 2),
        number(17, 2),
    ) else {
        return false;
    };
    year >= 1
        && (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour <= 23
        && minute <= 59
        && second <= 59
}

/// Reads the contract's RFC 3339 subset and returns the canonical UTC text, or what
/// is wrong as the end of a sentence. Long because it is the grammar written out
/// in order, field by field, each with its own message: straight-line code.
fn parse_rfc3339(text: &str) -> Result<String, String> {
    const SHAPE: &str = "is not an RFC 3339 instant like 2026-11-29T10:05:00Z";
    let b = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| -> Option<i32> {
        let part = b.get(range)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0, |n, d| n * 10 + i32::from(d - b'0')))
    };
    let shape_ok = b.len() >= 19
        && b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't')
        && b[13] == b':'
        && b[16] == b':';
    if !shape_ok {
        return Err(SHAPE.to_owned());
    }
    let (Some(year), Some(month), Some(day), Some(hour), Some(minute), Some(second)) = (
        digits(0..4),
        digits(5..7),
        digits(8..10),
        digits(11..13),
        digits(14..16),
        digits(17..19),
    ) else {
        return Err(SHAPE.to_owned());
    };
    let mut pos = 19;
    let mut nanos = 0i32;
    if b.get(pos) == Some(&b'.') {
        let start = pos + 1;
        let end = start + b[start..].iter().take_while(|c| c.is_ascii_digit()).count();
        let count = end - start;
        if count == 0 {
            return Err(SHAPE.to_owned());
        }
        if count > 9 {
            return Err("has more than 9 fraction digits".to_owned());
        }
        let fraction = digits(start..end).expect("checked digits");
        nanos = fraction * 10i32.pow(9 - count as u32);
        pos = end;
    }
    let offset_seconds = match &b[pos..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let (Some(h), Some(m)) = (digits(pos + 1..pos + 3), digits(pos + 4..pos + 6)) else {
                return Err(SHAPE.to_owned());
            };
            let _ = (h1, h2, m1, m2);
            if h > 23 || m > 59 {
                return Err("has an offset beyond ±23:59".to_owned());
            }
            let seconds = h * 3600 + m * 60;
            if *sign == b'-' { -seconds } else { seconds }
        }
        [] => return Err("has no UTC offset (add Z or ±hh:mm)".to_owned()),
        _ => return Err(SHAPE.to_owned()),
    };
    if second == 60 {
        return Err("is a leap second, which UTC instants here cannot hold".to_owned());
    }
    let real = (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && hour <= 23
        && minute <= 59
        && second <= 59;
    if !real {
        return Err("is not a real date and time".to_owned());
    }
    // Whole seconds since 1970 in integers of our own: jiff's Timestamp stops a day
    // short of 9999-12-31 and would refuse late instants that are still in range.
    let local_seconds = days_from_civil(i64::from(year), month, day) * 86_400
        + i64::from(hour * 3600 + minute * 60 + second);
    let utc_seconds = local_seconds - i64::from(offset_seconds);
    if !(UTC_SECONDS_MIN..=UTC_SECONDS_MAX).contains(&utc_seconds) {
        return Err("is outside the years 0001 to 9999 once converted to UTC".to_owned());
    }
    Ok(format_utc_seconds(utc_seconds, nanos))
}

/// 0001-01-01T00:00:00Z, in seconds since 1970-01-01T00:00:00Z.
const UTC_SECONDS_MIN: i64 = -62_135_596_800;
/// 9999-12-31T23:59:59Z, in seconds since 1970-01-01T00:00:00Z (any fraction of
/// that last second is in range too).
const UTC_SECONDS_MAX: i64 = 253_402_300_799;

fn is_leap_year(year: i32) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// The days of `month` (1–12) in `year` of the proleptic Gregorian calendar.
pub(crate) fn days_in_month(year: i32, month: i32) -> i32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard
/// Hinnant's `days_from_civil`, exact for every year, 0 and negative ones included).
pub(crate) fn days_from_civil(year: i64, month: i32, day: i32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_from_march = i64::from((month + 9) % 12);
    let day_of_year = (153 * month_from_march + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date (year, month, day) of a count of days from 1970-01-01, the inverse of
/// `days_from_civil` (Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// The canonical text of an instant given as seconds since 1970 (UTC) and nanoseconds.
fn format_utc_seconds(seconds: i64, nanos: i32) -> String {
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let of_day = seconds.rem_euclid(86_400);
    let mut out = format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60
    );
    push_fraction(nanos, &mut out);
    out.push('Z');
    out
}

/// `.fraction` without trailing zeros, or nothing when `nanos` is zero.
fn push_fraction(nanos: i32, out: &mut String) {
    if nanos != 0 {
        let fraction = format!("{nanos:09}");
        out.push('.');
        out.push_str(fraction.trim_end_matches('0'));
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fraction]Z`, the fraction only when not zero and without
/// trailing zeros. Used for event instants and for the times spoolite writes.
pub fn format_utc(utc: jiff::civil::DateTime) -> String {
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        utc.year(),
        utc.month(),
        utc.day(),
        utc.hour(),
        utc.minute(),
        utc.second()
    );
    push_fraction(utc.subsec_nanosecond(), &mut out);
    out.push('Z');
    out
}

/// Whether the canonical instant `instant` comes before `other` in time: without
/// its `Z`, `format_utc`'s text sorts in time order (a fraction sorts after the
/// whole second it follows).
pub(crate) fn before(instant: &str, other: &str) -> bool {
    instant.trim_end_matches('Z') < other.trim_end_matches('Z')
}

/// A source revision: an integer from 0 to 2^63−1.
pub(crate) fn parse_revision(value: &Value, field: &str) -> Result<Option<i64>, Invalid> {
    match value {
        Value::Null => Ok(None),
        Value::Number(text) => revision_from_number(text, field).map(Some),
        other => Err(invalid(
            InvalidReason::WrongType,
            format!("{field} must be an integer, not {}", other.type_name()),
        )),
    }
}

/// A source revision from a JSON number as written (`field` names it in the detail).
pub(crate) fn revision_from_number(text: &str, field: &str) -> Result<i64, Invalid> {
    let integer = !text.contains(['.', 'e', 'E']);
    match text.parse::<i64>() {
        Ok(n) if integer && n >= 0 => Ok(n),
        _ => Err(invalid(
            InvalidReason::BadRevision,
            format!("{field} must be an integer from 0 to 2^63-1, not {text}"),
        )),
    }
}

/// The SHA-256 of `{flight_id}|{event_kind}|{instant_utc}`, the identity of an event.
pub fn idempotency_key(flight_id: &str, event_kind: &str, instant_utc: &str) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(flight_id.as_bytes());
    hasher.update(b"|");
    hasher.update(event_kind.as_bytes());
    hasher.update(b"|");
    hasher.update(instant_utc.as_bytes());
    hasher.finalize().into()
}

/// The fields an event may hold, in the contract's order; any other makes it invalid.
pub(crate) const FIELDS: [&str; 7] = [
    "flight_id",
    "event_kind",
    "instant_utc",
    "source_revision",
    "payload",
    "retracted",
    "slot",
];

/// A valid event in canonical form. `revision` is `None` when the event has none of
/// its own, so that the file's `source_revision` (which may come after the events in
/// a `.json` file) can stand in for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    key: [u8; 32],
    /// The canonical flight_id, event_kind, instant_utc and payload one after the
    /// other: one allocation per event, not four.
    text: String,
    /// Where flight_id, event_kind and instant_utc end in `text`.
    ends: [usize; 3],
    revision: Option<i64>,
    retracted: bool,
    /// The canonical `slot`, if the event has one (section *Slots*).
    slot: Option<Box<str>>,
}

impl Event {
    pub fn key(&self) -> &[u8; 32] {
        &self.key
    }
    pub(crate) fn key_hex(&self) -> String {
        hex::encode(self.key)
    }
    pub fn flight_id(&self) -> &str {
        &self.text[..self.ends[0]]
    }
    pub fn event_kind(&self) -> &str {
        &self.text[self.ends[0]..self.ends[1]]
    }
    pub fn instant_utc(&self) -> &str {
        &self.text[self.ends[1]..self.ends[2]]
    }
    pub fn revision(&self) -> Option<i64> {
        self.revision
    }
    pub fn payload(&self) -> &str {
        &self.text[self.ends[2]..]
    }
    /// Whether the event retracts its key (`"retracted": true`).
    pub fn retracted(&self) -> bool {
        self.retracted
    }
    /// The event's slot, if it has one.
    pub fn slot(&self) -> Option<&str> {
        self.slot.as_deref()
    }

    /// Builds an event from its three identity fields given as text (`spoolite key`).
    pub(crate) fn identity(
        flight_id: &str,
        event_kind: &str,
        instant: &str,
    ) -> Result<Event, Invalid> {
        Event::from_fields(flight_id, event_kind, instant, None, "{}", false, None)
    }

    /// Builds an event from its fields as read (text not yet trimmed or checked),
    /// checking the identity fields in the contract's order, then the slot.
    /// `payload` is canonical already.
    pub(crate) fn from_fields(
        flight_id: &str,
        event_kind: &str,
        instant: &str,
        revision: Option<i64>,
        payload: &str,
        retracted: bool,
        slot: Option<&str>,
    ) -> Result<Event, Invalid> {
        let flight_id = flight_id_form(flight_id)?;
        let event_kind = event_kind_form(event_kind)?;
        let instant = instant_form(instant)?;
        let slot = slot.map(slot_form).transpose()?.map(Box::from);
        let key = idempotency_key(flight_id, &event_kind, &instant);
        let parts = [flight_id, &event_kind, &instant, payload];
        let mut text = String::with_capacity(parts.iter().map(|part| part.len()).sum());
        let mut ends = [0; 3];
        for (i, part) in parts.into_iter().enumerate() {
            text.push_str(part);
            if let Some(end) = ends.get_mut(i) {
                *end = text.len();
            }
        }
        Ok(Event {
            key,
            text,
            ends,
            revision,
            retracted,
            slot,
        })
    }

    /// Validates one parsed JSON value as an event.
    pub fn from_parsed(parsed: json::Parsed) -> Result<Event, Invalid> {
        let Value::Object(members) = parsed.value else {
            let what = parsed.value.type_name();
            return Err(invalid(
                InvalidReason::NotObject,
                format!("the event is {what}, not an object"),
            ));
        };
        if let Some(path) = parsed.duplicate {
            return Err(invalid(
                InvalidReason::DuplicateField,
                format!("the field {path:?} stands more than once"),
            ));
        }
        if let Some((name, _)) = members.iter().find(|(k, _)| !FIELDS.contains(&k.as_str())) {
            return Err(invalid(
                InvalidReason::UnknownField,
                format!("the field {name:?} is not one of {}", FIELDS.join(", ")),
            ));
        }
        let field = |name: &str| members.iter().find(|(k, _)| k == name).map(|(_, v)| v);
        let text = |name: &str| -> Result<&str, Invalid> {
            match field(name) {
                None => Err(invalid(
                    InvalidReason::MissingField,
                    format!("the field {name:?} is missing"),
                )),
                Some(Value::String(s)) => Ok(s),
                Some(other) => Err(invalid(
                    InvalidReason::WrongType,
                    format!("{name} must be a string, not {}", other.type_name()),
                )),
            }
        };
        let (flight_id, event_kind, instant) = (
            text("flight_id")?,
            text("event_kind")?,
            text("instant_utc")?,
        );
        let revision = match field("source_revision") {
            None => None,
            Some(value) => parse_revision(value, "source_revision")?,
        };
        let payload = canonical_payload(field("payload"))?;
        let retracted = match field("retracted") {
            None | Some(Value::Null) => false,
            Some(Value::Bool(retracted)) => *retracted,
            Some(other) => {
                return Err(invalid(
                    InvalidReason::WrongType,
                    format!("retracted must be true or false, not {}", other.type_name()),
                ));
            }
        };
        let slot = match field("slot") {
            None => None,
            Some(Value::String(slot)) => Some(slot.as_str()),
            Some(other) => {
                return Err(invalid(
                    InvalidReason::WrongType,
                    format!("slot must be a string, not {}", other.type_name()),
                ));
            }
        };
        Event::from_fields(
            flight_id, event_kind, instant, revision, &payload, retracted, slot,
        )
    }

    /// Parses and validates the text of one event on its own; a problem's place is
    /// given as a byte offset into `text`. `depth_max` is how many levels may nest
    /// inside it, the event object being level 1. (The batch reader gives places in
    /// the file instead, see `batch::parse_event`.)
    pub fn parse(text: &str, depth_max: usize) -> Result<Event, Invalid> {
        match json::parse(text, depth_max) {
            Ok(parsed) => Event::from_parsed(parsed),
            Err(error) => Err(not_parsed(
                &error,
                &format!("byte {} of the event", error.offset()),
            )),
        }
    }
}

/// The invalid event for a text that `json::parse` refused; `at` says where, in
/// words (`line 3, character 5 (byte offset 80)`).
pub(crate) fn not_parsed(error: &json::JsonError, at: &str) -> Invalid {
    match error {
        json::JsonError::TooDeep { .. } => invalid(
            InvalidReason::TooDeep,
            format!("the event nests arrays and objects deeper than 128 levels at {at}"),
        ),
        error => invalid(
            InvalidReason::NotJson,
            format!("the event is not JSON at {at}: {}", error.message()),
        ),
    }
}

/// The canonical text of an event's `payload` (`None` or null: `{}`).
fn canonical_payload(payload: Option<&Value>) -> Result<String, Invalid> {
    match payload {
        None | Some(Value::Null) => Ok("{}".to_owned()),
        Some(value @ Value::Object(_)) => {
            let mut out = String::new();
            json::write_canonical(value, &mut out);
            Ok(out)
        }
        Some(other) => Err(invalid(
            InvalidReason::WrongType,
            format!("payload must be an object, not {}", other.type_name()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_instant(input: &str, expected: Result<&str, &str>) {
        let got = Instant::parse(input).map(|i| i.0).map_err(|e| e.detail);
        match (got, expected) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "input {input:?}"),
            (Err(got), Err(want)) => assert!(got.contains(want), "input {input:?}: {got}"),
            (got, want) => panic!("input {input:?}: got {got:?}, want {want:?}"),
        }
    }

    #[test]
    fn instants() {
        check_instant("2026-11-29T10:05:00Z", Ok("2026-11-29T10:05:00Z"));
        check_instant("2026-11-29t11:05:00+01:00", Ok("2026-11-29T10:05:00Z"));
        check_instant("2026-11-29T10:05:00.000z", Ok("2026-11-29T10:05:00Z"));
        check_instant(
            "2026-11-29T10:05:00.120-00:00",
            Ok("2026-11-29T10:05:00.12Z"),
        );
        check_instant(
            " 2026-11-29T10:05:00.123456789Z\u{a0}",
            Ok("2026-11-29T10:05:00.123456789Z"),
        );
        check_instant("2026-11-29T00:30:00+01:00", Ok("2026-11-28T23:30:00Z"));
        check_instant("2024-02-29T00:00:00Z", Ok("2024-02-29T00:00:00Z"));
        check_instant("2026-11-29T10:05:00", Err("no UTC offset"));
        check_instant("2026-11-29 10:05:00Z", Err("not an RFC 3339 instant"));
        check_instant("2026-11-29T10:05:60Z", Err("leap second"));
        check_instant(
            "2026-11-29T10:05:00.1234567891Z",
            Err("more than 9 fraction digits"),
        );
        check_instant("2025-02-29T00:00:00Z", Err("not a real date"));
        check_instant("0001-01-01T00:30:00+01:00", Err("outside the years"));
        check_instant("9999-12-31T23:30:00-01:00", Err("outside the years"));
        check_instant("0000-06-01T00:00:00Z", Err("outside the years"));
        check_instant("2026-11-29T10:05:00+01", Err("not an RFC 3339 instant"));
        check_instant("2026-11-29T10:05:00+24:00", Err("beyond"));
        check_instant("2026-11-29T10:05:00.Z", Err("not an RFC 3339 instant"));
    }

    /// The first and last UTC instants of years 0001–9999, spelled with every sign of
    /// offset, and one step past each end.
    #[test]
    fn instants_over_the_whole_range() {
        let first = Ok("0001-01-01T00:00:00Z");
        check_instant("0001-01-01T00:00:00Z", first);
        check_instant("0001-01-01T00:00:00z", first);
        check_instant("0001-01-01T00:00:00-00:00", first);
        check_instant("0001-01-01T00:00:00+00:00", first);
        check_instant("0001-01-01T01:00:00+01:00", first);
        check_instant("0001-01-01T23:59:00+23:59", first);
        check_instant("0000-12-31T23:00:00-01:00", first);
        check_instant("0000-12-31T00:01:00-23:59", first);
        check_instant("0000-12-31T23:30:00-01:00", Ok("0001-01-01T00:30:00Z"));
        check_instant("0000-02-29T12:00:00-23:59", Err("outside the years"));
        let last = Ok("9999-12-31T23:59:59.999999999Z");
        check_instant("9999-12-31T23:59:59.999999999Z", last);
        check_instant("9999-12-31T23:59:59.999999999-00:00", last);
        check_instant("9999-12-31T23:59:59.999999999+00:00", last);
        check_instant("9999-12-31T22:59:59.999999999-01:00", last);
        check_instant("9999-12-31T00:00:59.999999999-23:59", last);
        check_instant(
            "10000-01-01T00:59:59.999999999+01:00",
            Err("not an RFC 3339"),
        );
        check_instant("9999-12-31T23:59:59Z", Ok("9999-12-31T23:59:59Z"));
        check_instant("9999-12-30T22:00:01Z", Ok("9999-12-30T22:00:01Z"));
        check_instant("9999-12-31T23:59:59+23:59", Ok("9999-12-31T00:00:59Z"));
        // One past each end.
        check_instant("0000-12-31T23:59:59.999999999Z", Err("outside the years"));
        check_instant("0000-12-31T23:59:59-00:00", Err("outside the years"));
        check_instant("0001-01-01T00:00:00+00:01", Err("outside the years"));
        check_instant("0001-01-01T00:59:59+01:00", Err("outside the years"));
        check_instant("0000-12-31T22:59:59-01:00", Err("outside the years"));
        check_instant("9999-12-31T23:59:59-00:01", Err("outside the years"));
        check_instant("9999-12-31T23:00:00-01:00", Err("outside the years"));
        check_instant("9999-12-31T00:01:00-23:59", Err("outside the years"));
        // Leap years and the validation the range change must keep.
        check_instant("2000-02-29T00:00:00Z", Ok("2000-02-29T00:00:00Z"));
        check_instant("1900-02-29T00:00:00Z", Err("not a real date"));
        check_instant("2026-13-01T00:00:00Z", Err("not a real date"));
        check_instant("2026-04-31T00:00:00Z", Err("not a real date"));
        check_instant("2026-01-01T24:00:00Z", Err("not a real date"));
        check_instant("2026-01-01T23:60:00Z", Err("not a real date"));
        check_instant("2026-01-00T00:00:00Z", Err("not a real date"));
        check_instant("1970-01-01T00:00:00+23:59", Ok("1969-12-31T00:01:00Z"));
        check_instant("2026-11-29T10:05:00.5+05:30", Ok("2026-11-29T04:35:00.5Z"));
    }

    /// Every day of a few centuries round-trips through the calendar arithmetic.
    #[test]
    fn civil_days_round_trip() {
        let mut days = days_from_civil(1, 1, 1);
        assert_eq!(days * 86_400, UTC_SECONDS_MIN);
        assert_eq!(
            days_from_civil(9999, 12, 31) * 86_400 + 86_399,
            UTC_SECONDS_MAX
        );
        for year in [
            0, 1, 2, 1899, 1900, 1969, 1970, 2000, 2024, 2100, 9998, 9999,
        ] {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    let count = days_from_civil(i64::from(year), month, day);
                    let back = civil_from_days(count);
                    assert_eq!(back, (i64::from(year), i64::from(month), i64::from(day)));
                    if year > 0 {
                        days = count;
                    }
                }
            }
        }
        assert_eq!(days, days_from_civil(9999, 12, 31));
    }

    mod canonical_instants {
        //! The fast path for instants already in canonical form against the
        //! general conversion: whatever it takes, the conversion gives back
        //! unchanged; what it leaves, the conversion still judges.

        use super::super::*;
        use proptest::prelude::*;

        fn check(text: &str) -> Result<(), TestCaseError> {
            let general = parse_rfc3339(text);
            if is_canonical_utc(text) {
                prop_assert_eq!(general, Ok(text.to_owned()), "{:?}", text);
            } else if let Ok(canonical) = &general
                && !text.contains('.')
            {
                // Left to the general path: only texts it rewrites (or with a
                // fraction, which the fast path does not take).
                prop_assert!(canonical != text, "{:?} was left to the slow path", text);
            }
            Ok(())
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(5000))]

            #[test]
            fn agree_on_near_canonical_texts(
                year in 0u32..10000, month in 0u32..14, day in 0u32..33, hour in 0u32..26,
                minute in 0u32..62, second in 0u32..62,
                t in prop::sample::select(vec!["T", "t", " "]),
                tail in prop::sample::select(vec!["Z", "z", "", "+00:00", "-00:00", ".0Z", ".5Z", "+01:00", "ZZ"]),
            ) {
                check(&format!("{year:04}-{month:02}-{day:02}{t}{hour:02}:{minute:02}:{second:02}{tail}"))?;
            }

            #[test]
            fn agree_on_any_twenty_bytes(text in "[0-9:TZ+-]{20}") {
                check(&text)?;
            }
        }

        #[test]
        fn edges() {
            for text in [
                "0001-01-01T00:00:00Z",
                "0000-01-01T00:00:00Z",
                "9999-12-31T23:59:59Z",
                "2024-02-29T00:00:00Z",
                "2025-02-29T00:00:00Z",
                "1900-02-29T00:00:00Z",
                "2000-02-29T00:00:00Z",
                "2026-11-29T10:05:60Z",
                "2026-11-29T24:00:00Z",
            ] {
                check(text).map_err(|e| e.to_string()).expect("agree");
            }
            assert!(is_canonical_utc("2026-11-29T10:05:00Z"));
            assert!(!is_canonical_utc("2026-11-29T10:05:00z"));
        }
    }

    #[test]
    fn flight_ids_and_kinds() {
        assert_eq!(
            FlightId::parse("  BA0117-20261129\t").unwrap().as_str(),
            "BA0117-20261129"
        );
        assert!(FlightId::parse("BA|117").is_err());
        assert!(FlightId::parse("BA 117").is_err());
        assert!(FlightId::parse("").is_err());
        assert!(FlightId::parse(&"x".repeat(64)).is_ok());
        assert!(FlightId::parse(&"x".repeat(65)).is_err());
        assert!(FlightId::parse("BAé").is_err());
        assert_eq!(
            EventKind::parse(" Off_Blocks ").unwrap().as_str(),
            "off_blocks"
        );
        assert!(EventKind::parse("1takeoff").is_err());
        assert!(EventKind::parse("take-off").is_err());
        assert!(EventKind::parse(&format!("a{}", "b".repeat(31))).is_ok());
        assert!(EventKind::parse(&format!("a{}", "b".repeat(32))).is_err());
    }

    fn check_invalid(text: &str, reason: InvalidReason, detail_part: &str) {
        let error = Event::parse(text, 128).expect_err(text);
        assert_eq!(error.reason, reason, "{text}: {}", error.detail);
        assert!(
            error.detail.contains(detail_part),
            "{text}: {}",
            error.detail
        );
    }

    #[test]
    fn invalid_events() {
        use InvalidReason::*;
        let base =
            r#""flight_id":"BA1","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z""#;
        check_invalid(&format!("{{{base},\"extra\":1}}"), UnknownField, "extra");
        check_invalid(
            &format!("{{{base},\"flight_id\":\"BA1\"}}"),
            DuplicateField,
            "flight_id",
        );
        check_invalid(
            &format!("{{{base},\"payload\":{{\"a\":1,\"a\":2}}}}"),
            DuplicateField,
            "payload.a",
        );
        check_invalid(
            r#"{"flight_id":"BA1","event_kind":"takeoff"}"#,
            MissingField,
            "instant_utc",
        );
        check_invalid(
            &format!("{{{base},\"source_revision\":\"3\"}}"),
            WrongType,
            "source_revision",
        );
        check_invalid(
            &format!("{{{base},\"source_revision\":3.0}}"),
            BadRevision,
            "3.0",
        );
        check_invalid(
            &format!("{{{base},\"source_revision\":3e0}}"),
            BadRevision,
            "3e0",
        );
        check_invalid(
            &format!("{{{base},\"source_revision\":-1}}"),
            BadRevision,
            "-1",
        );
        check_invalid(
            &format!("{{{base},\"source_revision\":9223372036854775808}}"),
            BadRevision,
            "2^63",
        );
        check_invalid(&format!("{{{base},\"payload\":[1]}}"), WrongType, "payload");
        check_invalid(
            r#"{"flight_id":7,"event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z"}"#,
            WrongType,
            "flight_id",
        );
        check_invalid(
            r#"{"flight_id":null,"event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z"}"#,
            WrongType,
            "flight_id",
        );
        check_invalid(
            r#"{"flight_id":"B|A","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z"}"#,
            BadFlightId,
            "'|'",
        );
        check_invalid(
            r#"{"flight_id":"BA1","event_kind":"take off","instant_utc":"2026-11-29T10:05:00Z"}"#,
            BadEventKind,
            "take off",
        );
        check_invalid(
            r#"{"flight_id":"BA1","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00"}"#,
            BadInstant,
            "offset",
        );
        check_invalid("[1,2]", NotObject, "an array");
        check_invalid("{\"flight_id\": ", NotJson, "ends before");
        check_invalid(
            &format!(
                "{{{base},\"payload\":{}1{}}}",
                "[".repeat(128),
                "]".repeat(128)
            ),
            TooDeep,
            "128",
        );
    }

    #[test]
    fn valid_event_canonical_forms() {
        let event = Event::parse(
            r#"{"flight_id":" BA0117-20261129 ","event_kind":"OFF_BLOCKS","instant_utc":"2026-11-29T11:05:00+01:00",
                "source_revision":3,"payload":{"tail":"G-XWBA","crew":["C123","C456"]}}"#,
            128,
        )
        .unwrap();
        assert_eq!(event.flight_id(), "BA0117-20261129");
        assert_eq!(event.event_kind(), "off_blocks");
        assert_eq!(event.instant_utc(), "2026-11-29T10:05:00Z");
        assert_eq!(event.revision(), Some(3));
        assert_eq!(
            event.payload(),
            r#"{"crew":["C123","C456"],"tail":"G-XWBA"}"#
        );
        // printf 'BA0117-20261129|off_blocks|2026-11-29T10:05:00Z' | sha256sum
        assert_eq!(
            event.key_hex(),
            "1276aa28ba94f266883cf55721ebc9de537703db7c402d6f62949d87cd224fdb"
        );
    }
}
