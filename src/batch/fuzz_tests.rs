//! The `.csv` and `.xml` (AIDX) readers against hostile bytes: arbitrary bytes,
//! text made of the formats' own punctuation, and valid files of each shape cut at
//! any point, with bytes flipped, inserted, removed or repeated, quotes and tags
//! left unbalanced. Whatever the bytes, and whatever `--event-bytes-max`:
//!
//! - reading ends, in records then `None` or a rejection, within one call more
//!   than the file has bytes (and a few to spare), and never panics;
//! - no record's `raw` is longer than `--event-bytes-max`;
//! - records count from 0 without gaps;
//! - a rejection's reason is one the format documents, a `truncated` one says the
//!   file may still be arriving, and a CSV file is `truncated` for want of a line
//!   end only while it is not settled;
//! - a file read whole, a byte at a time or in small pieces reads the same (the
//!   daemon's reads, and a gzip stream's, come in pieces of any size);
//! - a settled file reads as the same file not yet settled, but for an unended
//!   last row (CSV), and AIDX does not care.
//!
//! Every case runs in memory: the whole file takes a few seconds in a debug build.

use proptest::prelude::*;
use proptest::sample::Index;

use std::io;

use super::*;

/// Event rows using every rule of the format: a byte-order mark, CRLF, names in
/// any case, quoted cells with commas, doubled quotes and a line feed, a slot,
/// crew, a payload column, an empty line, and a last row ended by its line feed.
const CSV_EVENTS: &str = "\u{feff}Flight_ID, event_kind ,instant_utc,source_revision,retracted,\
slot,crew,crew_positioning,payload.remark\r\n\
BA0117-20261129,off_blocks,2026-11-29T10:05:00Z,1,,S1,C1; C2,P1,\"late, \"\"ATC\"\"\"\r\n\
\r\n\
BA0117-20261129,takeoff,2026-11-29T11:20:00+01:00,1,false,S1,C1;C2,P1,é\r\n\
BA0117-20261129,landing,2026-11-29T12:50:00Z,2,TRUE,,,,\"two\nlines\"\n";

/// Flight rows: every time column, in another order, a slot and a payload column.
const CSV_FLIGHTS: &str = "flight_id,on_blocks,landing,takeoff,off_blocks,source_revision,\
slot,crew,payload.tail\n\
LH0400-20261129,2026-11-29T16:25:00Z,2026-11-29T16:10:00Z,2026-11-29T08:20:00Z,\
2026-11-29T08:00:00Z,3,1,C7,\"D-AB\"\"YA\"\n\
LH0401-20261129,,,,2026-11-29T18:00:00Z,,,,\n";

/// An AIDX notification with what a sender may write around the legs: a
/// declaration, a comment, a processing instruction, a prefixed namespace, an
/// extension in another namespace, CDATA, entity and character references, a nil
/// time, a time of no interest, and text that is not ASCII.
const AIDX: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!-- sent by the ops system -->
<a:IATA_AIDX_FlightLegNotifRQ xmlns:a="http://www.iata.org/IATA/2007/00"
    xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
    TimeStamp="2026-11-29T12:00:00Z" Version="16.1">
  <?route lhr?>
  <a:Originator CompanyShortName="LHR &amp; co">Zürich</a:Originator>
  <a:FlightLeg>
    <a:LegIdentifier>
      <a:Airline CodeContext="3">B&#65;</a:Airline>
      <a:FlightNumber><![CDATA[117]]></a:FlightNumber>
      <a:DepartureAirport>LHR</a:DepartureAirport>
      <a:ArrivalAirport>JFK</a:ArrivalAirport>
      <a:OriginDate>2026-11-29</a:OriginDate>
      <a:RepeatNumber>2</a:RepeatNumber>
    </a:LegIdentifier>
    <a:LegData>
      <a:OperationTime OperationQualifier="OFB" TimeType="ACT">2026-11-29T10:05:00Z</a:OperationTime>
      <a:OperationTime OperationQualifier="TKO" TimeType="EST">2026-11-29T10:15:00Z</a:OperationTime>
      <a:OperationTime OperationQualifier="TKO" TimeType="ACT">2026-11-29T11:20:00+01:00</a:OperationTime>
      <a:OperationTime OperationQualifier="TDN" TimeType="ACT" xsi:nil="true"/>
      <a:AircraftInfo><a:Registration>G-STBA</a:Registration></a:AircraftInfo>
      <a:TPA_Extension><x:Gate xmlns:x="urn:example">B&lt;7</x:Gate></a:TPA_Extension>
    </a:LegData>
  </a:FlightLeg>
  <a:FlightLeg>
    <a:LegIdentifier>
      <a:Airline>BA</a:Airline>
      <a:FlightNumber>0117</a:FlightNumber>
      <a:DepartureAirport>JFK</a:DepartureAirport>
      <a:OriginDate>2026-11-29</a:OriginDate>
    </a:LegIdentifier>
    <a:LegData>
      <a:OperationTime OperationQualifier="ONB" TimeType="ACT">2026-11-29T24:00:00-08:00</a:OperationTime>
    </a:LegData>
  </a:FlightLeg>
</a:IATA_AIDX_FlightLegNotifRQ>
"#;

/// The detail every rejection that may still be arriving ends with.
const ARRIVING: &str = "; it may still be arriving";

/// The whole-file reasons each format documents.
fn documented(format: Format) -> &'static [RejectReason] {
    use RejectReason::*;
    match format {
        // The module doc of csv.rs and `RejectReason::Unended`.
        Format::Csv => &[Empty, Truncated, Unended, NotUtf8, BadShape],
        // The module doc of aidx.rs: not well-formed or a DOCTYPE, cut, a piece of
        // XML over the limit, nested too deep, no AIDX notification.
        Format::Aidx => &[NotXml, Truncated, TooLarge, TooDeep, BadShape],
        Format::Json | Format::Ndjson => unreachable!("only CSV and AIDX here"),
    }
}

/// How a file read: its records, then the end (`None` at a well-formed end).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    records: Vec<Record>,
    rejection: Option<Rejection>,
}

/// `bytes` handed out in pieces of `size` bytes, the first piece included (a
/// file's start split across reads reads as it does whole: `batch::Head`).
struct Pieces<'a> {
    bytes: &'a [u8],
    at: usize,
    size: usize,
}

impl io::Read for Pieces<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        super::read_buffered(self, out)
    }
}

impl BufRead for Pieces<'_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        let end = (self.at / self.size + 1) * self.size;
        Ok(&self.bytes[self.at..end.min(self.bytes.len())])
    }

    fn consume(&mut self, n: usize) {
        self.at += n;
    }
}

/// A piece size that reads any file here at once.
const WHOLE: usize = 1 << 20;

/// Reads `bytes` in pieces of `size` bytes, checking each record and the
/// rejection as it comes; a panic fails the case.
fn read(
    format: Format,
    bytes: &[u8],
    limits: Limits,
    size: usize,
) -> Result<Outcome, TestCaseError> {
    let input = Pieces { bytes, at: 0, size };
    let mut reader = BatchReader::new(format, input, limits);
    let mut records: Vec<Record> = Vec::new();
    // One call per record and one for the end; a record takes at least one byte.
    for _ in 0..bytes.len() + 4 {
        let next = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| reader.next_record()))
            .map_err(|panic| {
                let message = panic_message(&*panic);
                TestCaseError::fail(format!("{format:?}: panicked: {message}"))
            })?;
        match next {
            Ok(Some(record)) => {
                prop_assert_eq!(
                    record.index,
                    records.len() as u64,
                    "{:?}: record indexes count from 0 without gaps",
                    format
                );
                prop_assert!(
                    record.raw.len() <= limits.event_bytes_max,
                    "{:?}: raw of {} bytes over --event-bytes-max {}",
                    format,
                    record.raw.len(),
                    limits.event_bytes_max
                );
                if let Err(invalid) = &record.event {
                    prop_assert!(!invalid.detail.is_empty(), "an invalid event says why");
                }
                records.push(record);
            }
            Ok(None) => {
                return Ok(Outcome {
                    records,
                    rejection: None,
                });
            }
            Err(ReadError::Rejected(rejection)) => {
                check_rejection(format, bytes, limits, &rejection)?;
                return Ok(Outcome {
                    records,
                    rejection: Some(rejection),
                });
            }
            Err(ReadError::Io(error)) => {
                return Err(TestCaseError::fail(format!(
                    "{format:?}: an I/O error reading memory: {error}"
                )));
            }
        }
    }
    Err(TestCaseError::fail(format!(
        "{format:?}: no end after {} calls on {} bytes",
        bytes.len() + 4,
        bytes.len()
    )))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

fn check_rejection(
    format: Format,
    bytes: &[u8],
    limits: Limits,
    rejection: &Rejection,
) -> Result<(), TestCaseError> {
    let reason = rejection.reason;
    prop_assert!(
        documented(format).contains(&reason),
        "{:?}: undocumented reason {:?}: {}",
        format,
        reason,
        rejection.detail
    );
    prop_assert!(!rejection.detail.trim().is_empty(), "a rejection says why");
    if matches!(reason, RejectReason::Truncated | RejectReason::Unended) {
        prop_assert!(
            rejection.detail.ends_with(ARRIVING),
            "{:?}: {:?} detail {:?}",
            format,
            reason,
            rejection.detail
        );
    }
    if format == Format::Csv {
        prop_assert!(
            !(reason == RejectReason::Unended && limits.settled),
            "a settled CSV file is taken as it stands: {}",
            rejection.detail
        );
        prop_assert!(
            !(reason == RejectReason::Unended && bytes.ends_with(b"\n")),
            "a CSV file ending in a line feed has its line end: {}",
            rejection.detail
        );
        prop_assert!(
            !(reason == RejectReason::NotUtf8 && std::str::from_utf8(bytes).is_ok()),
            "a UTF-8 file is not not_utf8: {}",
            rejection.detail
        );
    }
    Ok(())
}

/// Reads `bytes` as `format` with `event_bytes_max`, settled and not, whole and in
/// pieces, and checks that the readings agree.
fn check(format: Format, bytes: &[u8], event_bytes_max: usize) -> Result<(), TestCaseError> {
    let limits = |settled| Limits {
        event_bytes_max,
        settled,
    };
    let arriving = read(format, bytes, limits(false), WHOLE)?;
    let settled = read(format, bytes, limits(true), WHOLE)?;
    for size in [1, 7] {
        let pieces = read(format, bytes, limits(false), size)?;
        prop_assert_eq!(
            &pieces,
            &arriving,
            "{:?} read in pieces of {} bytes",
            format,
            size
        );
    }
    match format {
        Format::Csv => {
            // Not settled, the same records up to where an unended last row stops it.
            prop_assert!(
                settled.records.starts_with(&arriving.records),
                "settled CSV {:?} does not begin with the unsettled reading {:?}",
                settled,
                arriving
            );
            if arriving != settled {
                prop_assert_eq!(
                    arriving.rejection.as_ref().map(|r| r.reason),
                    Some(RejectReason::Unended),
                    "settled {:?}",
                    settled
                );
            }
        }
        _ => prop_assert_eq!(&settled, &arriving, "AIDX does not care for settled"),
    }
    Ok(())
}

/// The strongest and the weakest `--event-bytes-max` worth trying: from 1 byte
/// (smaller than any row or tag) through the size of the samples to the default.
fn event_bytes_max() -> impl Strategy<Value = usize> {
    prop_oneof![
        1usize..=12,
        12usize..=160,
        160usize..=2048,
        Just(EVENT_BYTES_MAX_DEFAULT),
    ]
}

/// One change to a file.
#[derive(Debug, Clone)]
enum Mutation {
    /// The file ends here.
    Cut(Index),
    /// A byte is XORed with a non-zero mask.
    Flip(Index, u8),
    /// A piece is inserted here.
    Insert(Index, Vec<u8>),
    /// Up to this many bytes are removed from here.
    Remove(Index, usize),
    /// Up to this many bytes from here are written twice.
    Repeat(Index, usize),
}

fn apply(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for mutation in mutations {
        let len = bytes.len();
        match mutation {
            Mutation::Cut(at) => bytes.truncate(at.index(len + 1)),
            Mutation::Flip(at, mask) if len > 0 => bytes[at.index(len)] ^= mask,
            Mutation::Flip(..) => {}
            Mutation::Insert(at, piece) => {
                let at = at.index(len + 1);
                bytes.splice(at..at, piece.iter().copied());
            }
            Mutation::Remove(at, n) => {
                let at = at.index(len + 1);
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::Repeat(at, n) => {
                let at = at.index(len + 1);
                let piece = bytes[at..(at + n).min(len)].to_vec();
                bytes.splice(at..at, piece);
            }
        }
    }
    bytes
}

/// Pieces of CSV that unbalance quotes, end or split rows and break characters.
const CSV_PIECES: &[&[u8]] = &[
    b"\"",
    b"\"\"",
    b",",
    b",,,,,,,,,,,,",
    b"\n",
    b"\r",
    b"\r\n",
    b"\"x\"y",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    "é€😀".as_bytes(),
    b"2026-11-29T10:05:00Z",
    b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    b"flight_id,event_kind,instant_utc\n",
    b"flight_id,off_blocks,takeoff,landing,on_blocks\n",
    b"F1,1,2,3,4\n",
    b"\x00",
];

/// Pieces of XML that unbalance tags, quotes, references and sections, declare
/// what AIDX has none of, or open elements the reader looks for.
const XML_PIECES: &[&[u8]] = &[
    b"<",
    b">",
    b"</",
    b"/>",
    b"\"",
    b"'",
    b"=",
    b"&",
    b"&amp;",
    b"&lol;",
    b"&#0;",
    b"&#x110000;",
    b"&#xD800;",
    b"<![CDATA[",
    b"]]>",
    b"<!--",
    b"-->",
    b"<?",
    b"?>",
    b"<!DOCTYPE a [<!ENTITY lol \"lol\"><!ENTITY lol2 \"&lol;&lol;\">]>",
    b"<?xml version=\"1.0\" encoding=\"UTF-16\"?>",
    b" xmlns:p=\"urn:p\"",
    b" xmlns=\"\"",
    b"p:",
    b" xsi:nil=\"true\"",
    b"<a:FlightLeg>",
    b"</a:FlightLeg>",
    b"<a:LegData>",
    b"<a:OperationTime OperationQualifier=\"ONB\" TimeType=\"ACT\">",
    b"</a:OperationTime>",
    b"<a:Airline>",
    b"<a:IATA_AIDX_FlightLegRS xmlns:a=\"http://www.iata.org/IATA/2007/00\">",
    b"<a:Success/>",
    b"<a:Errors/>",
    b"2026-11-29T10:05:00Z",
    b"\xef\xbb\xbf",
    b"\xff",
    b"\xc3",
    "é€😀".as_bytes(),
    b"\x00",
    b"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
];

fn piece(pieces: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(pieces).prop_map(<[u8]>::to_vec),
        1 => prop::collection::vec(any::<u8>(), 1..8),
    ]
}

fn mutation(pieces: &'static [&'static [u8]]) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        1 => any::<Index>().prop_map(Mutation::Cut),
        3 => (any::<Index>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip(at, mask)),
        4 => (any::<Index>(), piece(pieces)).prop_map(|(at, p)| Mutation::Insert(at, p)),
        2 => (any::<Index>(), 1usize..64).prop_map(|(at, n)| Mutation::Remove(at, n)),
        1 => (any::<Index>(), 1usize..256).prop_map(|(at, n)| Mutation::Repeat(at, n)),
    ]
}

/// A sample damaged by one to six changes.
fn damaged(
    sample: &'static str,
    pieces: &'static [&'static [u8]],
) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(mutation(pieces), 1..=6)
        .prop_map(move |mutations| apply(sample.as_bytes().to_vec(), &mutations))
}

/// Text made of the format's own pieces, in any order.
fn soup(pieces: &'static [&'static [u8]]) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(piece(pieces), 0..48).prop_map(|parts| parts.concat())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 2048,
        max_global_rejects: 2048,
        ..ProptestConfig::default()
    })]

    #[test]
    fn arbitrary_bytes(
        bytes in prop::collection::vec(any::<u8>(), 0..512),
        max in event_bytes_max(),
    ) {
        check(Format::Csv, &bytes, max)?;
        check(Format::Aidx, &bytes, max)?;
    }

    #[test]
    fn csv_punctuation(bytes in soup(CSV_PIECES), max in event_bytes_max()) {
        check(Format::Csv, &bytes, max)?;
    }

    #[test]
    fn xml_punctuation(bytes in soup(XML_PIECES), max in event_bytes_max()) {
        check(Format::Aidx, &bytes, max)?;
    }

    #[test]
    fn damaged_event_rows(bytes in damaged(CSV_EVENTS, CSV_PIECES), max in event_bytes_max()) {
        check(Format::Csv, &bytes, max)?;
    }

    #[test]
    fn damaged_flight_rows(bytes in damaged(CSV_FLIGHTS, CSV_PIECES), max in event_bytes_max()) {
        check(Format::Csv, &bytes, max)?;
    }

    #[test]
    fn damaged_aidx_message(bytes in damaged(AIDX, XML_PIECES), max in event_bytes_max()) {
        check(Format::Aidx, &bytes, max)?;
    }
}

/// The reading of a sample, which must go through.
fn whole(format: Format, sample: &str) -> Vec<Record> {
    let limits = Limits {
        settled: false,
        ..Limits::default()
    };
    let outcome = read(format, sample.as_bytes(), limits, WHOLE).expect("checks hold");
    assert_eq!(outcome.rejection, None, "{sample}");
    outcome.records
}

#[test]
fn the_samples_read_as_they_should() {
    let events = whole(Format::Csv, CSV_EVENTS);
    assert_eq!(events.len(), 3);
    assert!(events.iter().all(|r| r.event.is_ok()), "{events:?}");
    let flights = whole(Format::Csv, CSV_FLIGHTS);
    assert_eq!(flights.len(), 5);
    assert!(flights.iter().all(|r| r.event.is_ok()), "{flights:?}");
    let times = whole(Format::Aidx, AIDX);
    assert_eq!(times.len(), 3);
    assert!(times.iter().all(|r| r.event.is_ok()), "{times:?}");
    for (format, sample) in [
        (Format::Csv, CSV_EVENTS),
        (Format::Csv, CSV_FLIGHTS),
        (Format::Aidx, AIDX),
    ] {
        for max in [1, 16, 64, 256, EVENT_BYTES_MAX_DEFAULT] {
            check(format, sample.as_bytes(), max).unwrap_or_else(|e| panic!("{max}: {e}"));
        }
    }
}

/// Every cut of a sample at a character (a cut inside one is the preflight's:
/// still arriving), read as not settled: records the whole file has, in its order,
/// then the end the cut allows.
fn cuts(format: Format, sample: &str, expect: impl Fn(&str, &Outcome)) {
    let full = whole(format, sample);
    for cut in (0..=sample.len()).filter(|&i| sample.is_char_boundary(i)) {
        let text = &sample[..cut];
        let limits = Limits {
            settled: false,
            ..Limits::default()
        };
        let outcome = read(format, text.as_bytes(), limits, WHOLE)
            .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        assert!(
            full.starts_with(&outcome.records),
            "cut at {cut}: records the whole file does not have: {outcome:?}"
        );
        expect(text, &outcome);
    }
}

#[test]
fn a_csv_file_cut_anywhere_inside_a_row_is_still_arriving() {
    for sample in [CSV_EVENTS, CSV_FLIGHTS] {
        cuts(Format::Csv, sample, |text, outcome| {
            let reason = outcome.rejection.as_ref().map(|r| r.reason);
            let body = text.trim_start_matches('\u{feff}');
            if body.is_empty() || body.bytes().all(|b| b == b'\n' || b == b'\r') {
                // Nothing but a byte-order mark and line ends (an unended "\r" is
                // a row still arriving).
                assert!(
                    matches!(reason, Some(RejectReason::Empty | RejectReason::Unended)),
                    "{text:?}: {outcome:?}"
                );
            } else if text.ends_with('\n') {
                // Ended by a line feed: whole, unless the line feed is in a quoted cell.
                let rejection = outcome.rejection.as_ref();
                assert!(
                    rejection.is_none_or(|r| r.reason == RejectReason::Truncated
                        && r.detail.contains("ends inside a quoted cell")),
                    "{text:?}: {outcome:?}"
                );
            } else {
                assert!(
                    matches!(
                        reason,
                        Some(RejectReason::Unended | RejectReason::Truncated)
                    ),
                    "{text:?}: {outcome:?}"
                );
            }
        });
    }
}

#[test]
fn an_aidx_message_cut_anywhere_before_its_root_closes_is_still_arriving() {
    let closed = AIDX.rfind('>').expect("the root's end tag") + 1;
    cuts(Format::Aidx, AIDX, |text, outcome| {
        if text.len() >= closed {
            assert_eq!(outcome.rejection, None, "{text:?}");
            return;
        }
        let rejection = outcome
            .rejection
            .as_ref()
            .unwrap_or_else(|| panic!("cut at {}: read as whole: {outcome:?}", text.len()));
        assert_eq!(
            rejection.reason,
            RejectReason::Truncated,
            "cut at {} ({:?}): {}",
            text.len(),
            text.chars()
                .rev()
                .take(40)
                .collect::<String>()
                .chars()
                .rev()
                .collect::<String>(),
            rejection.detail
        );
    });
}

// ---------------------------------------------------------------------------------
// What the cases above found once, each mended since (a character over a time
// text's byte 19, a byte-order mark's first bytes split across reads, a second
// mark before an AIDX message).

/// Every record of `bytes`, or the rejection, read through a buffer of `capacity`
/// bytes.
fn read_through(
    format: Format,
    bytes: &[u8],
    capacity: usize,
) -> Result<Vec<Record>, (RejectReason, String)> {
    let input = std::io::BufReader::with_capacity(capacity, bytes);
    let mut reader = BatchReader::new(format, input, Limits::default());
    super::read_to_end(|| reader.next_record()).map_err(|r| (r.reason, r.detail))
}

/// `aidx::midnight` sliced a time text at bytes 11..19 once its byte 10 was `T`;
/// a character over byte 19 panicked there, for the root's `TimeStamp` (read at the
/// root) and for an actual time (read when its leg closes), and `spoolite ingest`
/// exits 101.
#[test]
fn a_time_with_a_character_over_its_nineteenth_byte_is_no_panic() {
    let odd = "2026-11-29T00:00:0éZ";
    let stamp = AIDX.replace("2026-11-29T12:00:00Z", odd);
    match read_through(Format::Aidx, stamp.as_bytes(), 1 << 16) {
        Err((reason, detail)) => assert_eq!(reason, RejectReason::BadShape, "{detail}"),
        Ok(records) => panic!("read: {records:?}"),
    }
    let time = AIDX.replace("2026-11-29T10:05:00Z", odd);
    let records = read_through(Format::Aidx, time.as_bytes(), 1 << 16).expect("read");
    let invalid = records[0].event.as_ref().expect_err("no instant");
    assert_eq!(
        invalid.reason,
        InvalidReason::BadInstant,
        "{}",
        invalid.detail
    );
}

/// `skip_bom` consumes the first bytes of a file while they match a byte-order
/// mark; handed out one or two at a time with the third not matching, they were
/// lost (a file starting with U+FF01, bytes EF BC 81, lost its EF). `Head` hands
/// the start of every file out whole. The four formats share it.
#[test]
fn a_byte_order_mark_prefix_split_across_reads_is_kept() {
    let csv = "\u{ff01}flight_id,event_kind,instant_utc\n";
    let ndjson = "\u{ff01}\n";
    let json = "\u{ff01}";
    let aidx = "\u{ff01}<a/>";
    for (format, text) in [
        (Format::Csv, csv),
        (Format::Ndjson, ndjson),
        (Format::Json, json),
        (Format::Aidx, aidx),
    ] {
        let whole = read_through(format, text.as_bytes(), 1 << 16);
        for capacity in [1, 2] {
            assert_eq!(
                read_through(format, text.as_bytes(), capacity),
                whole,
                "{format:?} through a buffer of {capacity} bytes"
            );
        }
    }
}

/// Past the byte-order mark `skip_bom` takes, quick-xml drops a second one only
/// when its first read holds all three bytes: a message after two marks went in
/// when read whole and was `not_xml` in small pieces, before `Head`.
#[test]
fn a_second_byte_order_mark_reads_alike_whole_or_in_pieces() {
    let twice = format!("\u{feff}\u{feff}{AIDX}");
    let whole = read_through(Format::Aidx, twice.as_bytes(), 1 << 16);
    for capacity in [1, 2, 4] {
        assert_eq!(
            read_through(Format::Aidx, twice.as_bytes(), capacity)
                .as_ref()
                .map(Vec::len),
            whole.as_ref().map(Vec::len),
            "through a buffer of {capacity} bytes"
        );
    }
}
