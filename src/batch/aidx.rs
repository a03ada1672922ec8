//! `.xml` batches: one IATA AIDX message (IATA RP 1797a, namespace
//! `http://www.iata.org/IATA/2007/00`), read as a stream (section *AIDX batches*).
//!
//! The message is an `IATA_AIDX_FlightLegNotifRQ`, or an `IATA_AIDX_FlightLegRS`
//! holding `Success`. Its `FlightLeg`s are read one at a time; of each, what the
//! contract needs is held until the leg closes, then the leg's actual times come out
//! as records, in document order:
//!
//! ```text
//! FlightLeg
//!   LegIdentifier/Airline, FlightNumber, OperationalSuffix, DepartureAirport,
//!                 ArrivalAirport, OriginDate, RepeatNumber
//!   LegData/OperationTime[@TimeType="ACT"][@OperationQualifier=OFB|TKO|TDN|ONB]
//!   LegData/AircraftInfo/Registration
//! ```
//!
//! These paths follow the AIDX 16.1–22.1 schemas and implementation guides, and
//! public AIDX samples read while writing this reader: legs whose `LegIdentifier`
//! holds `Airline CodeContext="3"`, `FlightNumber`, `DepartureAirport`,
//! `ArrivalAirport`, `OriginDate`, `RepeatNumber CurrentInd="true"`; `LegData`
//! holding `OperationTime OperationQualifier=".." CodeContext="9750"
//! RepeatIndex=".." TimeType=".."` (some `xsi:nil="true"`), then `AircraftInfo`
//! with `AircraftType` and `Registration`, and `CodeShareInfo` with an `Airline`
//! and `FlightNumber` of its own (which is no identifier of the leg: only the
//! paths above are read). Elements are matched by namespace URI and local name,
//! whatever prefix the file gives them; elements of other namespaces (a
//! `TPA_Extension`'s content) and every other element are passed over.
//!
//! Choices made where the contract is silent:
//! - `FlightNumber` is 1 to 4 digits (leading zeros beyond the fourth digit
//!   dropped): `117` and `0117` are both `0117`. A number with anything else, or
//!   over 9999, makes the leg's actual times invalid, `bad_flight_id`; so does an
//!   `OriginDate` that is not a real date `YYYY-MM-DD` (an xs:date zone after it,
//!   `Z` or `±hh:mm`, is allowed and does not change the date).
//! - Identifier codes are taken as sent, trimmed; an identifier element that is
//!   empty, blank or `xsi:nil` is absent (`missing_field` for the four required).
//!   An element's text is its whole text content (XPath's string value).
//! - An identifier element, or `Registration`, given twice in one leg makes the
//!   leg's actual times invalid, `duplicate_field`: neither value is picked.
//! - `payload.repeat_number` is the slot: the leg's `RepeatNumber`, or `"1"`
//!   when it has none. `arrival_airport` and `registration` are left out when the
//!   leg does not give them.
//! - `TimeType` and `OperationQualifier` are matched exactly (the code sets are
//!   upper case). An actual time with `xsi:nil` gives no event; one with no text
//!   at all is an event with a `bad_instant`.
//! - `record_index` counts the records: the actual times of the four qualifiers
//!   that are not nil, in document order (an `ACT` time of another qualifier is
//!   no record, so indexes have no gaps, as in the other formats).
//! - The root's `TimeStamp` without an offset is read as UTC (the sender's clock
//!   orders its own messages either way); `T24:00:00` is midnight of the next day;
//!   a TimeStamp that is no xs:dateTime, or before 1970, rejects the file as
//!   `bad_shape` (every event's revision would be wrong).
//! - An `IATA_AIDX_FlightLegRS` must give `Success` before its first `FlightLeg`,
//!   as the schema orders them; `Errors` in it is `bad_shape`.
//! - An XML declaration naming an encoding other than UTF-8 (or US-ASCII, a part
//!   of it) is `not_xml`: the file was checked to be UTF-8, so the declaration
//!   says something else than the bytes do.
//! - Limits, so that memory does not grow with the file: any one piece of XML
//!   (a text, a tag with its attributes, a comment) longer than
//!   `--event-bytes-max` rejects the file as `too_large` (it cannot be skipped
//!   without losing track of the document); elements nested deeper than 128
//!   levels reject it as `too_deep`; a `FlightLeg` holds at most
//!   `--event-bytes-max` bytes of the texts it needs, beyond which the text that
//!   does not fit is cut and its event (or, for an identifier, every event of the
//!   leg) is invalid, `too_large`; and a `FlightLeg` with more than 64 actual
//!   times rejects the file as `bad_shape`.
//! - Places in details are `line L` (counted from 1) with the `byte offset B`
//!   from the start of the file (0-based), at the start of the markup concerned.

use std::borrow::Cow;
use std::cell::Cell;
use std::collections::VecDeque;
use std::io::{self, BufRead};

use quick_xml::NsReader;
use quick_xml::events::{BytesStart, Event as XmlEvent};
use quick_xml::name::ResolveResult;

use super::event::{self, Event, Invalid, InvalidReason, invalid};
use super::json::{self, Value};
use super::{DEPTH_MAX, Limits, ReadError, Record, RejectReason, reject};

/// The AIDX namespace.
const AIDX_NS: &str = "http://www.iata.org/IATA/2007/00";
/// The namespace of `xsi:nil`.
const XSI_NS: &[u8] = b"http://www.w3.org/2001/XMLSchema-instance";
/// The attributes read: the root's revision, and an `OperationTime`'s kind.
const ATTRIBUTES: [&str; 3] = ["TimeStamp", "TimeType", "OperationQualifier"];
/// How many actual times one `FlightLeg` may hold.
const TIMES_PER_LEG_MAX: usize = 64;

/// The message kinds the contract takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Message {
    NotifRq,
    Rs,
}

impl Message {
    fn name(self) -> &'static str {
        match self {
            Message::NotifRq => "IATA_AIDX_FlightLegNotifRQ",
            Message::Rs => "IATA_AIDX_FlightLegRS",
        }
    }
}

/// The leg fields read from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Airline,
    FlightNumber,
    OperationalSuffix,
    DepartureAirport,
    ArrivalAirport,
    OriginDate,
    RepeatNumber,
    Registration,
}

impl Field {
    const IDENTIFIER: [Field; 7] = [
        Field::Airline,
        Field::FlightNumber,
        Field::OperationalSuffix,
        Field::DepartureAirport,
        Field::ArrivalAirport,
        Field::OriginDate,
        Field::RepeatNumber,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::Airline => "Airline",
            Field::FlightNumber => "FlightNumber",
            Field::OperationalSuffix => "OperationalSuffix",
            Field::DepartureAirport => "DepartureAirport",
            Field::ArrivalAirport => "ArrivalAirport",
            Field::OriginDate => "OriginDate",
            Field::RepeatNumber => "RepeatNumber",
            Field::Registration => "Registration",
        }
    }
}

/// What an open element is, as far as this reader cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    FlightLeg,
    LegIdentifier,
    LegData,
    AircraftInfo,
    Field(Field),
    /// An actual time of one of the four qualifiers (the event kind).
    Time(&'static str),
    Other,
}

/// Where a piece of markup starts in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct At {
    line: u64,
    byte: u64,
}

impl std::fmt::Display for At {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {} (byte offset {})", self.line, self.byte)
    }
}

/// The text of an element being collected, held up to `room` bytes.
struct Capture {
    text: String,
    /// Its full size in bytes, of which `text` holds at most `room`.
    size: u64,
    room: usize,
}

impl Capture {
    fn push(&mut self, piece: &str) {
        self.size += piece.len() as u64;
        let left = self.room.saturating_sub(self.text.len());
        if piece.len() <= left {
            self.text.push_str(piece);
        } else {
            let mut end = left;
            while !piece.is_char_boundary(end) {
                end -= 1;
            }
            self.text.push_str(&piece[..end]);
        }
    }

    fn over(&self) -> bool {
        self.size > self.text.len() as u64
    }
}

/// One actual time of a leg, waiting for the leg to close.
struct Time {
    kind: &'static str,
    text: String,
    /// Its full size, when it was too large to hold whole.
    over: Option<u64>,
}

/// The leg being read.
struct Leg {
    at: At,
    fields: [Option<String>; 8],
    /// A problem that makes every actual time of the leg invalid.
    problem: Option<Invalid>,
    times: Vec<Time>,
    /// The bytes of text the leg holds.
    held: usize,
}

/// Lets no one piece of markup grow past `cap` bytes (the reader holds each
/// piece whole), and knows the line the piece being read starts on. Reads
/// through a buffer of its own, so that newlines are counted only when a line is
/// asked for (a leg's start, a message), in one pass over what was not counted
/// yet, or once per buffer.
struct Guard<R> {
    inner: R,
    cap: usize,
    /// Bytes consumed since `reset`.
    used: usize,
    buffer: Box<[u8]>,
    /// The consumed part of `buffer`, and its filled part.
    at: usize,
    filled: usize,
    /// Newlines before `buffer`.
    lines: u64,
    /// Newlines in `buffer` before `counted`.
    counted: Cell<(usize, u64)>,
    /// Where the piece being read starts in `buffer`, or (once the buffer moved
    /// past it) its line.
    piece: Piece,
    /// The underlying input reached its end.
    eof: bool,
    /// `cap` was reached.
    tripped: bool,
}

#[derive(Debug, Clone, Copy)]
enum Piece {
    At(usize),
    Line(u64),
}

/// The size of `Guard`'s buffer.
const GUARD_BUFFER_BYTES: usize = 64 << 10;

impl<R: BufRead> Guard<R> {
    fn new(inner: R, cap: usize) -> Guard<R> {
        Guard {
            inner,
            cap,
            used: 0,
            buffer: vec![0; GUARD_BUFFER_BYTES].into_boxed_slice(),
            at: 0,
            filled: 0,
            lines: 0,
            counted: Cell::new((0, 0)),
            piece: Piece::At(0),
            eof: false,
            tripped: false,
        }
    }

    /// A piece of markup starts at the next byte.
    fn start_piece(&mut self) {
        self.used = 0;
        self.piece = Piece::At(self.at);
    }

    /// The line (from 1) the piece being read starts on.
    fn line(&self) -> u64 {
        match self.piece {
            Piece::Line(line) => line,
            Piece::At(at) => self.lines + self.newlines_before(at) + 1,
        }
    }

    /// The newlines in `buffer` before `at`, counted on from `counted` (`at`
    /// only moves forward within a buffer).
    fn newlines_before(&self, at: usize) -> u64 {
        let (from, before) = match self.counted.get() {
            (from, before) if from <= at => (from, before),
            _ => (0, 0),
        };
        let more = memchr::memchr_iter(b'\n', &self.buffer[from..at]).count() as u64;
        self.counted.set((at, before + more));
        before + more
    }
}

impl<R: BufRead> io::Read for Guard<R> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        super::read_buffered(self, out)
    }
}

impl<R: BufRead> BufRead for Guard<R> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.at == self.filled {
            // Counted before the read overwrites the buffer, kept only once it
            // succeeded: a read that fails (or is interrupted and tried again)
            // leaves the counts as they were.
            let piece = Piece::Line(self.line());
            let newlines = self.newlines_before(self.filled);
            let filled = self.inner.read(&mut self.buffer)?;
            self.piece = piece;
            self.lines += newlines;
            self.filled = filled;
            self.at = 0;
            self.counted.set((0, 0));
        }
        if self.filled == 0 {
            self.eof = true;
            return Ok(&[]);
        }
        let left = self.cap - self.used.min(self.cap);
        if left == 0 {
            self.tripped = true;
            return Err(io::Error::other("a piece of XML over --event-bytes-max"));
        }
        let n = (self.filled - self.at).min(left);
        Ok(&self.buffer[self.at..self.at + n])
    }

    fn consume(&mut self, amount: usize) {
        self.used += amount;
        self.at = (self.at + amount).min(self.filled);
    }
}

/// Reads one AIDX message: one record per actual time.
pub struct AidxReader<R> {
    xml: NsReader<Guard<R>>,
    limits: Limits,
    buf: Vec<u8>,
    started: bool,
    /// The byte-order mark skipped at the start, if any (quick-xml counts from
    /// after it).
    bom: u64,
    /// Where the markup being read starts (its line: `Guard::line`).
    piece_byte: u64,
    /// The records of the last leg read, not yet handed out.
    ready: VecDeque<Record>,
    index: u64,
    /// The message's `TimeStamp` in milliseconds since 1970 (0 when absent).
    revision: i64,
    message: Option<Message>,
    /// An `IATA_AIDX_FlightLegRS` said `Success`.
    success: bool,
    /// The root element has closed.
    after_root: bool,
    done: bool,
    /// The open elements.
    stack: Vec<Place>,
    leg: Option<Leg>,
    capture: Option<Capture>,
}

/// Namespace of an element, owned, so the reader can be borrowed again.
enum Ns {
    Aidx,
    Other(String),
    None,
}

impl<R: BufRead> AidxReader<R> {
    pub fn new(input: R, limits: Limits) -> AidxReader<R> {
        // Room for the markup around a text of the limit's size.
        let guard = Guard::new(input, limits.event_bytes_max.saturating_add(64));
        let mut xml = NsReader::from_reader(guard);
        let config = xml.config_mut();
        config.check_end_names = true;
        config.check_comments = true;
        config.expand_empty_elements = false;
        AidxReader {
            xml,
            limits,
            buf: Vec::new(),
            started: false,
            bom: 0,
            piece_byte: 0,
            ready: VecDeque::new(),
            index: 0,
            revision: 0,
            message: None,
            success: false,
            after_root: false,
            done: false,
            stack: Vec::new(),
            leg: None,
            capture: None,
        }
    }

    pub fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        if !self.started {
            self.started = true;
            self.bom = super::skip_bom(&mut self.xml.get_mut().inner)?;
        }
        loop {
            if let Some(record) = self.ready.pop_front() {
                return Ok(Some(record));
            }
            if self.done {
                return Ok(None);
            }
            self.step()?;
        }
    }

    /// Where the piece of markup being read starts.
    fn at(&self) -> At {
        At {
            line: self.xml.get_ref().line(),
            byte: self.piece_byte,
        }
    }

    /// Reads and handles one piece of XML.
    fn step(&mut self) -> Result<(), ReadError> {
        self.piece_byte = self.bom + self.xml.buffer_position();
        self.xml.get_mut().start_piece();
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        let result = match self.xml.read_event_into(&mut buf) {
            Ok(event) => self.handle(event),
            Err(error) => Err(self.xml_error(error)),
        };
        self.buf = buf;
        result
    }

    fn handle(&mut self, event: XmlEvent<'_>) -> Result<(), ReadError> {
        match event {
            XmlEvent::Start(start) => self.start(&start, false),
            XmlEvent::Empty(start) => self.start(&start, true),
            XmlEvent::End(_) => self.end(),
            // Text inside an element that is neither a field nor a time is not
            // read (ingest checks a file's UTF-8 whole before it parses).
            XmlEvent::Text(_) | XmlEvent::CData(_)
                if self.capture.is_none() && !self.stack.is_empty() =>
            {
                Ok(())
            }
            XmlEvent::Text(text) => {
                let text = text.xml10_content().map_err(|e| self.not_xml(e))?;
                self.text(&text)
            }
            XmlEvent::CData(data) => {
                let text = data.xml10_content().map_err(|e| self.not_xml(e))?;
                self.text(&text)
            }
            XmlEvent::GeneralRef(reference) => {
                let name = reference.decode().map_err(|e| self.not_xml(e))?;
                let c = match reference.resolve_char_ref() {
                    Ok(Some(c)) => c,
                    Ok(None) => match &*name {
                        "lt" => '<',
                        "gt" => '>',
                        "amp" => '&',
                        "apos" => '\'',
                        "quot" => '"',
                        _ => {
                            return Err(self.not_xml(format!(
                                "the entity &{name}; is not defined (XML without a DOCTYPE \
                                 has only &lt; &gt; &amp; &apos; &quot;)"
                            )));
                        }
                    },
                    Err(e) => return Err(self.not_xml(e)),
                };
                self.text(c.encode_utf8(&mut [0; 4]))
            }
            XmlEvent::Decl(decl) => {
                if let Some(encoding) = decl.encoding() {
                    let encoding = encoding.map_err(|e| self.not_xml(e))?;
                    let name = String::from_utf8_lossy(&encoding);
                    let utf8 = ["utf-8", "utf8", "us-ascii", "ascii"]
                        .iter()
                        .any(|n| name.eq_ignore_ascii_case(n));
                    if !utf8 {
                        return Err(self.not_xml(format!(
                            "the XML declaration names the encoding {name:?}, but AIDX batches \
                             are read as UTF-8: save the file as UTF-8 and declare \
                             encoding=\"UTF-8\""
                        )));
                    }
                }
                Ok(())
            }
            XmlEvent::DocType(_) => Err(self.doctype()),
            XmlEvent::PI(_) | XmlEvent::Comment(_) => Ok(()),
            XmlEvent::Eof => self.eof(),
        }
    }

    /// A start tag (`empty`: one that closes itself).
    fn start(&mut self, start: &BytesStart<'_>, empty: bool) -> Result<(), ReadError> {
        // An end tag needs no namespace: quick-xml checks it names its start tag.
        let ns = ns_of(self.xml.resolve_element(start.name()).0).map_err(|prefix| {
            self.not_xml(format!("the namespace prefix {prefix:?} is not declared"))
        })?;
        let local = start.local_name().into_inner();
        let local = match std::str::from_utf8(local) {
            Ok(local) => Cow::Borrowed(local),
            Err(_) => String::from_utf8_lossy(local),
        };
        // Every attribute is checked (duplicates, quoting, entities), as XML asks;
        // the unprefixed ones read are kept (`ATTRIBUTES`).
        let mut nil = false;
        let mut kept: [Option<Cow<'_, str>>; ATTRIBUTES.len()] = Default::default();
        for attribute in start.attributes() {
            let attribute = attribute.map_err(|e| self.not_xml(e))?;
            let value = attribute.unescape_value().map_err(|e| self.not_xml(e))?;
            // An attribute without a prefix is in no namespace (XML Namespaces 6.2).
            if attribute.key.prefix().is_none() {
                let name = attribute.key.local_name().into_inner();
                if let Some(at) = ATTRIBUTES.iter().position(|n| n.as_bytes() == name) {
                    kept[at] = Some(value);
                }
                continue;
            }
            let (ns, name) = self.xml.resolve_attribute(attribute.key);
            match ns {
                ResolveResult::Bound(ns) if ns.as_ref() == XSI_NS => {
                    if name.as_ref() == b"nil" {
                        nil = matches!(value.trim(), "true" | "1");
                    }
                }
                ResolveResult::Unknown(prefix) => {
                    let prefix = String::from_utf8_lossy(&prefix).into_owned();
                    return Err(
                        self.not_xml(format!("the namespace prefix {prefix:?} is not declared"))
                    );
                }
                ResolveResult::Unbound | ResolveResult::Bound(_) => {}
            }
        }
        let attribute = |name: &str| {
            let at = ATTRIBUTES.iter().position(|n| *n == name);
            at.and_then(|at| kept[at].as_deref())
        };
        if self.after_root {
            return Err(self.not_xml(format!(
                "the element {local} stands after the root element has closed"
            )));
        }
        if self.stack.len() >= DEPTH_MAX {
            return Err(reject(
                RejectReason::TooDeep,
                format!(
                    "the file nests elements deeper than {DEPTH_MAX} levels at {}",
                    self.at()
                ),
            ));
        }
        let aidx = matches!(ns, Ns::Aidx);
        let place = match self.stack.last() {
            None => self.root(ns, &local, attribute("TimeStamp"))?,
            Some(parent) if !aidx => {
                let _ = parent;
                Place::Other
            }
            Some(Place::Root) => match &*local {
                "FlightLeg" => {
                    if self.message == Some(Message::Rs) && !self.success {
                        return Err(super::bad_shape(format!(
                            "the IATA_AIDX_FlightLegRS gives a FlightLeg at {} before any \
                             Success: only a response holding Success carries flight legs",
                            self.at()
                        )));
                    }
                    self.leg = Some(Leg {
                        at: self.at(),
                        fields: Default::default(),
                        problem: None,
                        times: Vec::new(),
                        held: 0,
                    });
                    Place::FlightLeg
                }
                "Success" => {
                    self.success = true;
                    Place::Other
                }
                "Errors" if self.message == Some(Message::Rs) => {
                    return Err(super::bad_shape(format!(
                        "the IATA_AIDX_FlightLegRS holds Errors at {}, not Success: it \
                         reports a failure and carries no flight legs",
                        self.at()
                    )));
                }
                _ => Place::Other,
            },
            Some(Place::FlightLeg) => match &*local {
                "LegIdentifier" => Place::LegIdentifier,
                "LegData" => Place::LegData,
                _ => Place::Other,
            },
            Some(Place::LegIdentifier) => Field::IDENTIFIER
                .into_iter()
                .find(|field| field.name() == local)
                .map_or(Place::Other, Place::Field),
            Some(Place::LegData) => match &*local {
                "AircraftInfo" => Place::AircraftInfo,
                "OperationTime" => {
                    self.time(attribute("TimeType"), attribute("OperationQualifier"), nil)?
                }
                _ => Place::Other,
            },
            Some(Place::AircraftInfo) if local == "Registration" => {
                Place::Field(Field::Registration)
            }
            Some(_) => Place::Other,
        };
        // The text of a field (unless nil) or an actual time is collected.
        let collect = match place {
            Place::Field(_) => !nil,
            Place::Time(_) => true,
            _ => false,
        };
        if collect {
            let held = self.leg.as_ref().map_or(0, |leg| leg.held);
            self.capture = Some(Capture {
                text: String::new(),
                size: 0,
                room: self.limits.event_bytes_max.saturating_sub(held),
            });
        }
        self.stack.push(place);
        if empty {
            self.end()?;
        }
        Ok(())
    }

    /// The root element: which message, and its revision.
    fn root(&mut self, ns: Ns, local: &str, timestamp: Option<&str>) -> Result<Place, ReadError> {
        let message = match local {
            "IATA_AIDX_FlightLegNotifRQ" => Some(Message::NotifRq),
            "IATA_AIDX_FlightLegRS" => Some(Message::Rs),
            _ => None,
        };
        let message = match (ns, message) {
            (Ns::Aidx, Some(message)) => message,
            (Ns::Aidx, None) => {
                return Err(super::bad_shape(format!(
                    "the root element is {local}, not IATA_AIDX_FlightLegNotifRQ or \
                     IATA_AIDX_FlightLegRS: spoolite reads AIDX flight-leg notifications"
                )));
            }
            (Ns::Other(other), _) => {
                return Err(super::bad_shape(format!(
                    "the root element {local} is in the namespace {other:?}, not the AIDX \
                     namespace {AIDX_NS:?}"
                )));
            }
            (Ns::None, _) => {
                return Err(super::bad_shape(format!(
                    "the root element {local} is in no namespace: an AIDX message declares \
                     xmlns=\"{AIDX_NS}\""
                )));
            }
        };
        self.message = Some(message);
        if let Some(timestamp) = timestamp {
            self.revision = revision(timestamp).map_err(|why| {
                super::bad_shape(format!(
                    "the {} TimeStamp {timestamp:?} at {} {why}",
                    message.name(),
                    self.at()
                ))
            })?;
        }
        Ok(Place::Root)
    }

    /// An `OperationTime` of a leg's `LegData`: an actual time of the four
    /// qualifiers becomes a record, anything else is passed over.
    fn time(
        &mut self,
        time_type: Option<&str>,
        qualifier: Option<&str>,
        nil: bool,
    ) -> Result<Place, ReadError> {
        let kind = match qualifier {
            Some("OFB") => "off_blocks",
            Some("TKO") => "takeoff",
            Some("TDN") => "landing",
            Some("ONB") => "on_blocks",
            _ => return Ok(Place::Other),
        };
        if time_type != Some("ACT") || nil {
            return Ok(Place::Other);
        }
        let leg = self.leg.as_ref().expect("LegData stands in a FlightLeg");
        if leg.times.len() >= TIMES_PER_LEG_MAX {
            return Err(super::bad_shape(format!(
                "the FlightLeg at {} has more than {TIMES_PER_LEG_MAX} actual times (the one \
                 at {} is one too many): AIDX gives one per milestone",
                leg.at,
                self.at()
            )));
        }
        Ok(Place::Time(kind))
    }

    fn text(&mut self, text: &str) -> Result<(), ReadError> {
        if let Some(capture) = &mut self.capture {
            capture.push(text);
        } else if self.stack.is_empty() && !text.trim().is_empty() {
            let where_ = if self.after_root { "after" } else { "before" };
            return Err(self.not_xml(format!(
                "text stands {where_} the root element, where XML allows none"
            )));
        }
        Ok(())
    }

    fn end(&mut self) -> Result<(), ReadError> {
        let place = self.stack.pop().expect("quick-xml checks end tags");
        match place {
            Place::Field(field) => {
                let capture = self.capture.take();
                let leg = self.leg.as_mut().expect("fields stand in a FlightLeg");
                let index = field as usize;
                if leg.fields[index].is_some() {
                    leg.problem.get_or_insert_with(|| {
                        invalid(
                            InvalidReason::DuplicateField,
                            format!(
                                "the FlightLeg at {} gives {} more than once",
                                leg.at,
                                field.name()
                            ),
                        )
                    });
                }
                let Some(capture) = capture else {
                    return Ok(()); // nil: absent
                };
                if capture.over() {
                    leg.problem.get_or_insert_with(|| {
                        invalid(
                            InvalidReason::TooLarge,
                            format!(
                                "the FlightLeg at {} gives a {} of {} bytes, more than the leg \
                                 may hold (--event-bytes-max, {} bytes)",
                                leg.at,
                                field.name(),
                                capture.size,
                                self.limits.event_bytes_max
                            ),
                        )
                    });
                }
                leg.held += capture.text.len();
                let value = capture.text.trim();
                if !value.is_empty() {
                    leg.fields[index] = Some(value.to_owned());
                }
            }
            Place::Time(kind) => {
                let capture = self.capture.take().expect("an actual time is collected");
                let leg = self.leg.as_mut().expect("times stand in a FlightLeg");
                leg.held += capture.text.len();
                let over = capture.over().then_some(capture.size);
                leg.times.push(Time {
                    kind,
                    text: capture.text,
                    over,
                });
            }
            Place::FlightLeg => {
                let leg = self.leg.take().expect("a FlightLeg is open");
                self.records(leg);
            }
            Place::Root => {
                if self.message == Some(Message::Rs) && !self.success {
                    return Err(super::bad_shape(
                        "the IATA_AIDX_FlightLegRS holds no Success: only a response that \
                         reports success carries flight legs",
                    ));
                }
                self.after_root = true;
            }
            _ => {}
        }
        Ok(())
    }

    /// The end of the input.
    fn eof(&mut self) -> Result<(), ReadError> {
        if self.after_root {
            self.done = true;
            return Ok(());
        }
        let detail = match self.stack.first() {
            None => "the file ends before its root element begins".to_owned(),
            Some(_) => format!(
                "the file ends at {} before its root element {} closes",
                self.at(),
                self.message.map_or("", Message::name)
            ),
        };
        Err(super::truncated(detail))
    }

    /// The records of a leg that has closed, in document order.
    fn records(&mut self, leg: Leg) {
        let identity = leg_identity(&leg);
        for time in leg.times {
            let event = match (&identity, time.over) {
                (Err(invalid), _) => Err(invalid.clone()),
                (Ok(_), Some(size)) => Err(invalid(
                    InvalidReason::TooLarge,
                    format!(
                        "the actual time is {size} bytes, more than its leg may hold \
                         (--event-bytes-max, {} bytes); raw holds its first bytes only",
                        self.limits.event_bytes_max
                    ),
                )),
                (Ok((flight_id, payload, slot)), None) => Event::from_fields(
                    flight_id,
                    time.kind,
                    &midnight(time.text.trim()),
                    Some(self.revision),
                    payload,
                    false,
                    Some(slot),
                ),
            };
            self.ready.push_back(Record {
                index: self.index,
                raw: time.text,
                event,
            });
            self.index += 1;
        }
    }

    fn doctype(&self) -> ReadError {
        reject(
            RejectReason::NotXml,
            format!(
                "the file has a DOCTYPE at {}: AIDX messages have none, and spoolite reads no \
                 DTD; remove it",
                self.at()
            ),
        )
    }

    fn not_xml(&self, why: impl std::fmt::Display) -> ReadError {
        reject(
            RejectReason::NotXml,
            format!("the file is not well-formed XML at {}: {why}", self.at()),
        )
    }

    /// The rejection for an error of the XML reader.
    fn xml_error(&self, error: quick_xml::Error) -> ReadError {
        use quick_xml::errors::{IllFormedError, SyntaxError};
        let guard = self.xml.get_ref();
        match error {
            quick_xml::Error::Io(_) if guard.tripped => reject(
                RejectReason::TooLarge,
                format!(
                    "a piece of XML that begins at {} is longer than --event-bytes-max ({} \
                     bytes); no AIDX text is that long",
                    self.at(),
                    self.limits.event_bytes_max
                ),
            ),
            quick_xml::Error::Io(e) => ReadError::Io(io::Error::new(e.kind(), e.to_string())),
            quick_xml::Error::Syntax(SyntaxError::UnclosedDoctype) => self.doctype(),
            quick_xml::Error::Syntax(
                SyntaxError::UnclosedPIOrXmlDecl
                | SyntaxError::UnclosedComment
                | SyntaxError::UnclosedCData
                | SyntaxError::UnclosedTag,
            ) => super::truncated(format!(
                "the file ends inside the markup that begins at {}",
                self.at()
            )),
            // `<!` or `&name` cut by the end of the file.
            quick_xml::Error::Syntax(SyntaxError::InvalidBangMarkup)
            | quick_xml::Error::IllFormed(IllFormedError::UnclosedReference)
                if guard.eof =>
            {
                super::truncated(format!(
                    "the file ends inside the markup that begins at {}",
                    self.at()
                ))
            }
            error => self.not_xml(error),
        }
    }
}

/// The namespace of an element, or the undeclared prefix it uses.
fn ns_of(ns: ResolveResult<'_>) -> Result<Ns, String> {
    match ns {
        ResolveResult::Bound(ns) if ns.as_ref() == AIDX_NS.as_bytes() => Ok(Ns::Aidx),
        ResolveResult::Bound(ns) => {
            Ok(Ns::Other(String::from_utf8_lossy(ns.as_ref()).into_owned()))
        }
        ResolveResult::Unbound => Ok(Ns::None),
        ResolveResult::Unknown(prefix) => Err(String::from_utf8_lossy(&prefix).into_owned()),
    }
}

/// A leg's flight_id, canonical payload and slot, or why its actual times are
/// invalid.
fn leg_identity(leg: &Leg) -> Result<(String, String, String), Invalid> {
    if let Some(problem) = &leg.problem {
        return Err(problem.clone());
    }
    let field = |f: Field| leg.fields[f as usize].as_deref();
    let missing: Vec<&str> = [
        Field::Airline,
        Field::FlightNumber,
        Field::OriginDate,
        Field::DepartureAirport,
    ]
    .into_iter()
    .filter(|&f| field(f).is_none())
    .map(Field::name)
    .collect();
    if !missing.is_empty() {
        return Err(invalid(
            InvalidReason::MissingField,
            format!(
                "the FlightLeg at {} has no {} in its LegIdentifier",
                leg.at,
                missing.join(", ")
            ),
        ));
    }
    let (Some(airline), Some(number), Some(date), Some(departure)) = (
        field(Field::Airline),
        field(Field::FlightNumber),
        field(Field::OriginDate),
        field(Field::DepartureAirport),
    ) else {
        unreachable!("checked above");
    };
    let number = flight_number(number).ok_or_else(|| {
        invalid(
            InvalidReason::BadFlightId,
            format!(
                "the FlightLeg at {} has the FlightNumber {number:?}, not 1 to 4 digits",
                leg.at
            ),
        )
    })?;
    let date = origin_date(date).ok_or_else(|| {
        invalid(
            InvalidReason::BadFlightId,
            format!(
                "the FlightLeg at {} has the OriginDate {date:?}, not a date like 2026-11-29",
                leg.at
            ),
        )
    })?;
    let suffix = field(Field::OperationalSuffix).unwrap_or("");
    let flight_id = format!("{airline}{number}{suffix}-{date}-{departure}");
    let slot = field(Field::RepeatNumber).unwrap_or("1").to_owned();
    let mut members = vec![(
        "departure_airport".to_owned(),
        Value::String(departure.to_owned()),
    )];
    if let Some(arrival) = field(Field::ArrivalAirport) {
        members.push((
            "arrival_airport".to_owned(),
            Value::String(arrival.to_owned()),
        ));
    }
    if let Some(registration) = field(Field::Registration) {
        members.push((
            "registration".to_owned(),
            Value::String(registration.to_owned()),
        ));
    }
    members.push(("repeat_number".to_owned(), Value::String(slot.clone())));
    let mut payload = String::new();
    json::write_canonical(&Value::Object(members), &mut payload);
    Ok((flight_id, payload, slot))
}

/// A FlightNumber as 4 digits (or `None`): 1 to 4 digits, leading zeros beyond
/// those allowed.
fn flight_number(text: &str) -> Option<String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let digits = text.trim_start_matches('0');
    (digits.len() <= 4).then(|| format!("{digits:0>4}"))
}

/// An OriginDate (xs:date, `YYYY-MM-DD` with an optional zone) as `YYYYMMDD`.
fn origin_date(text: &str) -> Option<String> {
    let b = text.as_bytes();
    if b.len() < 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    // `get`: a character may straddle byte 10 (the text is not checked yet).
    let (Some(day), Some(zone)) = (text.get(..10), text.get(10..)) else {
        return None;
    };
    let zone_ok = zone.is_empty()
        || zone == "Z"
        || (zone.len() == 6
            && matches!(zone.as_bytes()[0], b'+' | b'-')
            && zone.as_bytes()[3] == b':'
            && zone
                .bytes()
                .enumerate()
                .all(|(i, c)| i == 0 || i == 3 || c.is_ascii_digit()));
    let date = civil_date(day)?;
    zone_ok.then(|| format!("{:04}{:02}{:02}", date.0, date.1, date.2))
}

/// `YYYY-MM-DD` as a real date of years 0001–9999.
fn civil_date(text: &str) -> Option<(i32, i32, i32)> {
    let b = text.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let number = |range: std::ops::Range<usize>| -> Option<i32> {
        let part = text.get(range)?;
        part.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| part.parse().ok())
            .flatten()
    };
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let real = year >= 1
        && (1..=12).contains(&month)
        && (1..=event::days_in_month(year, month)).contains(&day);
    real.then_some((year, month, day))
}

/// An XML dateTime at `T24:00:00` (with any fraction of zeros) written as 00:00
/// of the next day, the offset kept; any other text as it is.
fn midnight(text: &str) -> Cow<'_, str> {
    let b = text.as_bytes();
    // `get`: a character may straddle byte 19 (the text is not checked yet).
    if b.len() < 19 || !matches!(b[10], b'T' | b't') || text.get(11..19) != Some("24:00:00") {
        return Cow::Borrowed(text);
    }
    let mut rest = &text[19..];
    if let Some(fraction) = rest.strip_prefix('.') {
        let zeros = fraction.bytes().take_while(|&c| c == b'0').count();
        if zeros == 0 || fraction[zeros..].starts_with(|c: char| c.is_ascii_digit()) {
            return Cow::Borrowed(text);
        }
        rest = &fraction[zeros..];
    }
    let Some((year, month, day)) = civil_date(&text[..10]) else {
        return Cow::Borrowed(text);
    };
    let (year, month, day) =
        event::civil_from_days(event::days_from_civil(i64::from(year), month, day) + 1);
    Cow::Owned(format!("{year:04}-{month:02}-{day:02}T00:00:00{rest}"))
}

/// The message's `TimeStamp` as milliseconds since 1970, or what is wrong with it
/// as the end of a sentence. Without an offset it is read as UTC.
fn revision(text: &str) -> Result<i64, String> {
    let text = midnight(text.trim());
    let b = text.as_bytes();
    let has_offset = matches!(b.last(), Some(b'Z' | b'z'))
        || (b.len() > 19 && matches!(b[b.len() - 6], b'+' | b'-') && b[b.len() - 3] == b':');
    let with_offset = if has_offset {
        text.into_owned()
    } else {
        format!("{text}Z")
    };
    let instant = event::Instant::parse(&with_offset).map_err(|_| {
        "is not an xs:dateTime like 2026-11-29T10:05:00Z; correct the message's TimeStamp"
            .to_owned()
    })?;
    // The canonical form: YYYY-MM-DDTHH:MM:SS[.fraction]Z.
    let utc = instant.as_str();
    let number = |range: std::ops::Range<usize>| -> i64 { utc[range].parse().unwrap_or(0) };
    let days = event::days_from_civil(number(0..4), number(5..7) as i32, number(8..10) as i32);
    let seconds = days * 86_400 + number(11..13) * 3600 + number(14..16) * 60 + number(17..19);
    let millis = match utc[19..].strip_prefix('.') {
        Some(fraction) => {
            let digits: String = fraction
                .chars()
                .filter(char::is_ascii_digit)
                .take(3)
                .collect();
            format!("{digits:0<3}").parse().unwrap_or(0)
        }
        None => 0,
    };
    let revision = seconds * 1000 + millis;
    if revision < 0 {
        return Err(
            "is before 1970, so it gives no source revision; correct the message's TimeStamp"
                .to_owned(),
        );
    }
    Ok(revision)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every record of `xml`, or the file's rejection (reason code and detail).
    fn read_with(xml: &str, limits: Limits) -> Result<Vec<Record>, (&'static str, String)> {
        let mut reader = AidxReader::new(xml.as_bytes(), limits);
        super::super::read_to_end(|| reader.next_record()).map_err(|r| (r.reason.code(), r.detail))
    }

    fn read(xml: &str) -> Result<Vec<Record>, (&'static str, String)> {
        read_with(xml, Limits::default())
    }

    fn rejected(xml: &str, code: &str, detail: &str) {
        match read(xml) {
            Err((got, said)) => {
                assert_eq!(got, code, "{said}");
                assert!(said.contains(detail), "{said}");
            }
            Ok(records) => panic!("read {} records of {xml}", records.len()),
        }
    }

    /// Two legs of BA117 (LHR–JFK with a suffix; the JFK–SFO leg of a multi-leg
    /// flight), with actual, estimated, scheduled and nil times.
    const NOTIF: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<IATA_AIDX_FlightLegNotifRQ xmlns="http://www.iata.org/IATA/2007/00"
    xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
    TimeStamp="2026-11-29T12:00:00.250+01:00" Version="16.1"
    TransactionIdentifier="T-1" SequenceNumber="7">
  <Originator CompanyShortName="LHR"/>
  <FlightLeg>
    <LegIdentifier>
      <Airline CodeContext="3">BA</Airline>
      <FlightNumber>117</FlightNumber>
      <OperationalSuffix>A</OperationalSuffix>
      <DepartureAirport CodeContext="3">LHR</DepartureAirport>
      <ArrivalAirport CodeContext="3">JFK</ArrivalAirport>
      <OriginDate>2026-11-29</OriginDate>
    </LegIdentifier>
    <LegData>
      <OperationTime OperationQualifier="OFB" CodeContext="9750" TimeType="SCT">2026-11-29T10:00:00Z</OperationTime>
      <OperationTime OperationQualifier="OFB" CodeContext="9750" TimeType="EST">2026-11-29T10:03:00Z</OperationTime>
      <OperationTime OperationQualifier="OFB" CodeContext="9750" RepeatIndex="3" TimeType="ACT">2026-11-29T11:05:00+01:00</OperationTime>
      <OperationTime OperationQualifier="TKO" CodeContext="9750" TimeType="ACT">2026-11-29T10:20:00Z</OperationTime>
      <OperationTime OperationQualifier="TDN" CodeContext="9750" TimeType="ACT" xsi:nil="true"/>
      <OperationTime OperationQualifier="AIB" CodeContext="9750" TimeType="ACT">2026-11-29T18:20:00Z</OperationTime>
      <AircraftInfo><AircraftType>77W</AircraftType><Registration>G-STBA</Registration></AircraftInfo>
      <CodeShareInfo><Airline>AA</Airline><FlightNumber>6135</FlightNumber></CodeShareInfo>
    </LegData>
  </FlightLeg>
  <FlightLeg>
    <LegIdentifier>
      <Airline>BA</Airline>
      <FlightNumber>0117</FlightNumber>
      <DepartureAirport>JFK</DepartureAirport>
      <ArrivalAirport>SFO</ArrivalAirport>
      <OriginDate>2026-11-29</OriginDate>
      <RepeatNumber>2</RepeatNumber>
    </LegIdentifier>
    <LegData>
      <OperationTime OperationQualifier="ONB" TimeType="ACT">2026-11-29T24:00:00-08:00</OperationTime>
      <OperationTime OperationQualifier="TDN" TimeType="ACT">2026-11-30T07:50:00Z</OperationTime>
    </LegData>
  </FlightLeg>
</IATA_AIDX_FlightLegNotifRQ>
"#;

    fn valid(record: &Record) -> &Event {
        record.event.as_ref().unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn a_notification_gives_one_event_per_actual_time() {
        let records = read(NOTIF).expect("read");
        let summary: Vec<_> = records
            .iter()
            .map(|r| {
                let e = valid(r);
                (
                    r.index,
                    e.flight_id().to_owned(),
                    e.event_kind().to_owned(),
                    e.instant_utc().to_owned(),
                    e.slot().map(str::to_owned),
                )
            })
            .collect();
        let first = "BA0117A-20261129-LHR";
        let second = "BA0117-20261129-JFK";
        let one = Some("1".to_owned());
        let two = Some("2".to_owned());
        assert_eq!(
            summary,
            [
                (
                    0,
                    first.into(),
                    "off_blocks".into(),
                    "2026-11-29T10:05:00Z".into(),
                    one.clone()
                ),
                (
                    1,
                    first.into(),
                    "takeoff".into(),
                    "2026-11-29T10:20:00Z".into(),
                    one
                ),
                (
                    2,
                    second.into(),
                    "on_blocks".into(),
                    "2026-11-30T08:00:00Z".into(),
                    two.clone()
                ),
                (
                    3,
                    second.into(),
                    "landing".into(),
                    "2026-11-30T07:50:00Z".into(),
                    two
                ),
            ]
        );
        // 2026-11-29T11:00:00.25Z
        let revision = 1_795_950_000_250;
        assert!(
            records
                .iter()
                .all(|r| valid(r).revision() == Some(revision))
        );
        assert_eq!(records[0].raw, "2026-11-29T11:05:00+01:00");
        assert_eq!(records[2].raw, "2026-11-29T24:00:00-08:00");
        // The payload is what a JSON batch stores for the same object.
        let json = Event::parse(
            r#"{"flight_id":"BA0117A-20261129-LHR","event_kind":"takeoff",
                "instant_utc":"2026-11-29T10:20:00Z","slot":"1",
                "payload":{"repeat_number":"1","registration":"G-STBA",
                           "departure_airport":"LHR","arrival_airport":"JFK"}}"#,
            128,
        )
        .expect("event");
        assert_eq!(valid(&records[1]).payload(), json.payload());
        assert_eq!(valid(&records[1]).key(), json.key());
        assert_eq!(
            valid(&records[2]).payload(),
            r#"{"arrival_airport":"SFO","departure_airport":"JFK","repeat_number":"2"}"#
        );
    }

    #[test]
    fn prefixes_do_not_matter_only_namespaces() {
        // Every element of the message under the prefix `a` instead.
        let prefixed = NOTIF
            .replace("xmlns=\"http", "xmlns:a=\"http")
            .replace("</", "\u{1}")
            .replace('<', "<a:")
            .replace("<a:?", "<?")
            .replace('\u{1}', "</a:");
        assert!(prefixed.contains("<a:DepartureAirport"), "{prefixed}");
        assert_eq!(
            read(&prefixed).expect("prefixed"),
            read(NOTIF).expect("default")
        );
        // The AIDX names in another namespace are not the leg's: no identifier.
        let other = NOTIF.replace(
            "<Airline CodeContext=\"3\">BA</Airline>",
            "<x:Airline xmlns:x=\"urn:other\">BA</x:Airline>",
        );
        let records = read(&other).expect("read");
        assert_eq!(
            records[0].event.as_ref().unwrap_err().reason,
            InvalidReason::MissingField
        );
    }

    #[test]
    fn a_response_needs_success() {
        let legs = &NOTIF[NOTIF.find("<FlightLeg>").unwrap()..NOTIF.find("</IATA").unwrap()];
        let head = r#"<IATA_AIDX_FlightLegRS xmlns="http://www.iata.org/IATA/2007/00"
            xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" TimeStamp="2026-11-29T11:00:00Z">"#;
        let ok = format!("{head}<Success/>{legs}</IATA_AIDX_FlightLegRS>");
        let records = read(&ok).expect("read");
        assert_eq!(records.len(), 4);
        assert_eq!(valid(&records[0]).revision(), Some(1_795_950_000_000));
        rejected(
            &format!("{head}{legs}</IATA_AIDX_FlightLegRS>"),
            "bad_shape",
            "before any Success",
        );
        rejected(
            &format!("{head}</IATA_AIDX_FlightLegRS>"),
            "bad_shape",
            "no Success",
        );
        rejected(
            &format!("{head}<Errors><Error>x</Error></Errors></IATA_AIDX_FlightLegRS>"),
            "bad_shape",
            "Errors",
        );
    }

    #[test]
    fn another_root_or_namespace_is_bad_shape() {
        rejected(
            &NOTIF.replace("http://www.iata.org/IATA/2007/00", "urn:other"),
            "bad_shape",
            "\"urn:other\"",
        );
        rejected(
            "<IATA_AIDX_FlightLegNotifRQ/>",
            "bad_shape",
            "in no namespace",
        );
        rejected(
            r#"<IATA_AIDX_FlightLegRQ xmlns="http://www.iata.org/IATA/2007/00"/>"#,
            "bad_shape",
            "IATA_AIDX_FlightLegRQ",
        );
        rejected(
            &NOTIF.replace("2026-11-29T12:00:00.250+01:00", "yesterday"),
            "bad_shape",
            "TimeStamp \"yesterday\" at line 2",
        );
    }

    #[test]
    fn what_is_not_xml_is_rejected_and_what_is_cut_may_still_arrive() {
        rejected("went off blocks at ten", "not_xml", "before the root");
        rejected(
            &NOTIF.replace(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>",
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><!DOCTYPE x [<!ENTITY a \"b\">]>",
            ),
            "not_xml",
            "DOCTYPE at line 1",
        );
        rejected(
            &NOTIF.replace("</LegData>", "</LegDat>"),
            "not_xml",
            "LegDat",
        );
        rejected(
            &NOTIF.replace("<FlightNumber>117", "<FlightNumber>&x;117"),
            "not_xml",
            "&x;",
        );
        rejected(
            &NOTIF.replace("encoding=\"UTF-8\"", "encoding=\"ISO-8859-1\""),
            "not_xml",
            "ISO-8859-1",
        );
        rejected(&format!("{NOTIF}<again/>"), "not_xml", "after the root");
        rejected(
            &NOTIF.replace("Version=\"16.1\"", "Version=\"16.1\" Version=\"17.1\""),
            "not_xml",
            "line 2",
        );
        let arriving = "; it may still be arriving";
        for cut in [10, 100, 400, 1000, NOTIF.len() - 40, NOTIF.len() - 3] {
            let (code, detail) = read(&NOTIF[..cut]).expect_err("cut");
            assert_eq!(code, "truncated", "{cut}: {detail}");
            assert!(detail.ends_with(arriving), "{detail}");
        }
        rejected("   ", "truncated", "before its root element begins");
        rejected(
            "<IATA_AIDX_FlightLegNotifRQ xmlns=\"http://www.iata.org/IATA/2007/00\"><!",
            "truncated",
            arriving,
        );
        rejected(
            "<IATA_AIDX_FlightLegNotifRQ xmlns=\"http://www.iata.org/IATA/2007/00\">&am",
            "truncated",
            arriving,
        );
    }

    /// Input whose every other read is interrupted, as a signal interrupts a
    /// `read(2)`.
    struct Interrupting<'a> {
        data: &'a [u8],
        reads: usize,
    }

    impl<'a> Interrupting<'a> {
        fn new(data: &'a [u8]) -> Interrupting<'a> {
            Interrupting { data, reads: 0 }
        }
    }

    impl io::Read for Interrupting<'_> {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            self.reads += 1;
            if self.reads.is_multiple_of(2) {
                return Err(io::ErrorKind::Interrupted.into());
            }
            self.data.read(out)
        }
    }

    impl BufRead for Interrupting<'_> {
        fn fill_buf(&mut self) -> io::Result<&[u8]> {
            Ok(self.data)
        }

        fn consume(&mut self, amount: usize) {
            self.data = &self.data[amount..];
        }
    }

    /// Lines are counted across the reader's buffer: in a message of many legs,
    /// each leg without an Airline names the line it starts on, and markup that
    /// is not XML far down names its own.
    #[test]
    fn lines_are_named_right_far_into_a_large_file() {
        let mut xml =
            "<IATA_AIDX_FlightLegNotifRQ xmlns=\"http://www.iata.org/IATA/2007/00\">\n".to_owned();
        let mut starts = Vec::new();
        for leg in 0..300 {
            // Legs of several sizes, most of each its start tag, so that buffer
            // ends fall inside FlightLeg tags.
            let padding = "\n".repeat(leg % 5) + &" ".repeat(400 + leg * 7 % 61);
            starts.push(xml.lines().count() + 1);
            xml.push_str(&format!(
                "<FlightLeg{padding}><LegIdentifier><FlightNumber>{leg}</FlightNumber>\
                 <DepartureAirport>LHR</DepartureAirport>\n<OriginDate>2026-11-29</OriginDate>\
                 </LegIdentifier>\n<LegData><OperationTime OperationQualifier=\"OFB\" \
                 TimeType=\"ACT\">2026-11-29T10:05:00Z</OperationTime></LegData></FlightLeg>\n"
            ));
        }
        assert!(xml.len() > 3 * GUARD_BUFFER_BYTES);
        let whole = format!("{xml}</IATA_AIDX_FlightLegNotifRQ>\n");
        let records = read(&whole).expect("read");
        assert_eq!(records.len(), starts.len());
        for (record, line) in records.iter().zip(&starts) {
            let detail = &record.event.as_ref().unwrap_err().detail;
            assert!(
                detail.contains(&format!("FlightLeg at line {line} ")),
                "{detail}"
            );
        }
        // A read interrupted now and then (EINTR) is tried again and counts no
        // line twice.
        let mut reader = AidxReader::new(Interrupting::new(whole.as_bytes()), Limits::default());
        let mut again = Vec::new();
        while let Some(record) = reader.next_record().expect("read") {
            again.push(record);
        }
        assert_eq!(again, records);
        let line = xml.lines().count() + 1;
        let (code, detail) = read(&format!("{xml}<a></b>")).expect_err("not XML");
        assert_eq!(code, "not_xml");
        assert!(detail.contains(&format!("at line {line} ")), "{detail}");
    }

    #[test]
    fn a_leg_without_its_identifiers_makes_each_actual_time_invalid() {
        let records =
            read(&NOTIF.replace("<Airline CodeContext=\"3\">BA</Airline>", "")).expect("read");
        assert_eq!(records.len(), 4);
        for record in &records[..2] {
            let invalid = record.event.as_ref().unwrap_err();
            assert_eq!(invalid.reason, InvalidReason::MissingField);
            assert!(
                invalid.detail.contains("FlightLeg at line 7")
                    && invalid.detail.contains("no Airline"),
                "{}",
                invalid.detail
            );
        }
        assert_eq!(records[0].raw, "2026-11-29T11:05:00+01:00");
        assert!(records[2].event.is_ok());
        let nil = NOTIF.replace(
            "<OriginDate>2026-11-29</OriginDate>\n    </LegIdentifier>",
            "<OriginDate xsi:nil=\"true\"/>\n    </LegIdentifier>",
        );
        let records = read(&nil).expect("read");
        assert!(
            records[0]
                .event
                .as_ref()
                .unwrap_err()
                .detail
                .contains("no OriginDate")
        );
        let bad_number = NOTIF.replace("<FlightNumber>117<", "<FlightNumber>11X<");
        let records = read(&bad_number).expect("read");
        assert_eq!(
            records[0].event.as_ref().unwrap_err().reason,
            InvalidReason::BadFlightId
        );
        let twice = NOTIF.replace(
            "<Registration>G-STBA</Registration>",
            "<Registration>G-STBA</Registration><Registration>G-STBB</Registration>",
        );
        let records = read(&twice).expect("read");
        assert_eq!(
            records[0].event.as_ref().unwrap_err().reason,
            InvalidReason::DuplicateField
        );
        let local = NOTIF.replace(
            "2026-11-29T10:20:00Z</OperationTime>",
            "2026-11-29T10:20:00</OperationTime>",
        );
        let records = read(&local).expect("read");
        assert_eq!(
            records[1].event.as_ref().unwrap_err().reason,
            InvalidReason::BadInstant
        );
    }

    #[test]
    fn fields_and_times() {
        assert_eq!(flight_number("7").as_deref(), Some("0007"));
        assert_eq!(flight_number("00117").as_deref(), Some("0117"));
        assert_eq!(flight_number("9999").as_deref(), Some("9999"));
        assert_eq!(flight_number("10000"), None);
        assert_eq!(flight_number("12a"), None);
        assert_eq!(flight_number(""), None);
        assert_eq!(origin_date("2026-11-29").as_deref(), Some("20261129"));
        assert_eq!(origin_date("2026-11-29+01:00").as_deref(), Some("20261129"));
        assert_eq!(origin_date("2026-02-30"), None);
        assert_eq!(origin_date("29/11/2026"), None);
        assert_eq!(midnight("2026-12-31T24:00:00Z"), "2027-01-01T00:00:00Z");
        assert_eq!(
            midnight("2024-02-28T24:00:00.000+05:00"),
            "2024-02-29T00:00:00+05:00"
        );
        assert_eq!(midnight("2026-12-31T24:00:00.5Z"), "2026-12-31T24:00:00.5Z");
        assert_eq!(midnight("2026-12-31T23:00:00Z"), "2026-12-31T23:00:00Z");
        assert_eq!(revision("1970-01-01T00:00:01.5Z"), Ok(1500));
        assert_eq!(revision("1970-01-01T01:00:00"), Ok(3_600_000));
        assert_eq!(
            revision("1970-01-01T00:00:00+01:00").map_err(|_| ()),
            Err(())
        );
        assert_eq!(revision("1969-12-31T24:00:00Z"), Ok(0));
        // No TimeStamp: revision 0.
        let records =
            read(&NOTIF.replace("TimeStamp=\"2026-11-29T12:00:00.250+01:00\"", "")).expect("read");
        assert_eq!(valid(&records[0]).revision(), Some(0));
    }

    #[test]
    fn limits_hold_memory_flat() {
        let limits = Limits {
            event_bytes_max: 200,
            settled: true,
        };
        // A text longer than the limit rejects the file.
        let long = NOTIF.replace(
            "<Originator CompanyShortName=\"LHR\"/>",
            &format!("<Originator>{}</Originator>", "x".repeat(1000)),
        );
        let (code, detail) = read_with(&long, limits).expect_err("too long");
        assert_eq!(code, "too_large", "{detail}");
        assert!(detail.contains("line 6"), "{detail}");
        // A leg's texts over the limit in all: the time that does not fit is cut.
        let split = "&#x30;".repeat(300);
        let records = read_with(
            &NOTIF.replace(">2026-11-29T10:20:00Z<", &format!(">{split}<")),
            limits,
        )
        .expect("read");
        let invalid = records[1].event.as_ref().unwrap_err();
        assert_eq!(
            invalid.reason,
            InvalidReason::TooLarge,
            "{}",
            invalid.detail
        );
        assert!(records[1].raw.len() < 200);
        // Too deep, and too many times.
        let deep = format!("{}{}", "<x>".repeat(200), "</x>".repeat(200));
        rejected(
            &NOTIF.replace("<Originator CompanyShortName=\"LHR\"/>", &deep),
            "too_deep",
            "128",
        );
        let many = "<OperationTime OperationQualifier=\"TKO\" TimeType=\"ACT\">2026-11-29T10:20:00Z</OperationTime>".repeat(65);
        rejected(
            &NOTIF.replace("<LegData>", &format!("<LegData>{many}")),
            "bad_shape",
            "more than 64",
        );
    }
}
