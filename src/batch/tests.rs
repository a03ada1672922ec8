//! Reading whole batch files from bytes: one `check` line per case.

use super::*;

/// The records of a file as (index, key-or-reason), and its header.
type ReadAll = Result<(Vec<(u64, String)>, Header), (RejectReason, String)>;

/// What a file reads as: the records (index, and the event's key or the invalid
/// reason), then the header or the rejection code.
fn read_all(format: Format, bytes: &[u8]) -> ReadAll {
    read_all_with(format, bytes, Limits::default())
}

fn read_all_with(format: Format, bytes: &[u8], limits: Limits) -> ReadAll {
    let mut reader = BatchReader::new(format, bytes, limits);
    let mut records = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(record)) => {
                let what = match record.event {
                    Ok(event) => format!("{}@{:?}", event.flight_id(), event.revision()),
                    Err(invalid) => invalid.reason.code().to_owned(),
                };
                records.push((record.index, what));
            }
            Ok(None) => return Ok((records, reader.header())),
            Err(ReadError::Rejected(rejection)) => {
                return Err((rejection.reason, rejection.detail));
            }
            Err(ReadError::Io(error)) => panic!("io error from a slice: {error}"),
        }
    }
}

fn check(format: Format, bytes: &str, expected: &[&str]) {
    let got = read_all(format, bytes.as_bytes())
        .map(|(records, _)| records.into_iter().map(|(_, w)| w).collect::<Vec<_>>());
    assert_eq!(
        got.as_ref().map_err(|e| e.0),
        Ok(&expected.iter().map(|s| s.to_string()).collect::<Vec<_>>()),
        "input {bytes:?}"
    );
}

fn check_reject(format: Format, bytes: &[u8], reason: RejectReason) {
    match read_all(format, bytes) {
        Err((got, detail)) => {
            assert_eq!(
                got,
                reason,
                "input {:?}: {detail}",
                String::from_utf8_lossy(bytes)
            );
            assert!(!detail.is_empty());
        }
        Ok(records) => panic!(
            "input {:?} was accepted: {records:?}",
            String::from_utf8_lossy(bytes)
        ),
    }
}

const E1: &str =
    r#"{"flight_id":"A1","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z"}"#;
const E2: &str = r#"{"flight_id":"A2","event_kind":"landing","instant_utc":"2026-11-29T12:05:00Z","source_revision":4}"#;

#[test]
fn json_batches() {
    use Format::Json;
    check(
        Json,
        &format!(r#"{{"events":[{E1},{E2}]}}"#),
        &["A1@None", "A2@Some(4)"],
    );
    check(
        Json,
        &format!("\u{feff} {{ \"batch_id\" : \"b\", \"events\" : [ {E1} ] }} \n"),
        &["A1@None"],
    );
    check(Json, r#"{"events":[]}"#, &[]);
    check(
        Json,
        &format!(r#"{{"events":[{E1}], "event_count": 1, "source_revision": null}}"#),
        &["A1@None"],
    );
    check(
        Json,
        &format!(r#"{{"events":[{E1}, 7, {{"flight_id":"x"}}]}}"#),
        &["A1@None", "not_object", "missing_field"],
    );
    check(
        Json,
        &format!(r#"{{"events":[{E1}, {{"flight_id":"A1","flight_id":"A1"}}]}}"#),
        &["A1@None", "duplicate_field"],
    );
    check(
        Json,
        r#"{"events":[{"s":"a ] } \" [ {"}]}"#,
        &["unknown_field"],
    );
}

#[test]
fn json_header_fields_before_or_after_events() {
    let text = format!(r#"{{"events":[{E1}],"batch_id":"B-7","source_revision":9}}"#);
    let (_, header) = read_all(Format::Json, text.as_bytes()).unwrap();
    assert_eq!(
        header,
        Header {
            batch_id: Some("B-7".into()),
            source_revision: Some(9)
        }
    );
}

#[test]
fn json_rejections() {
    use Format::Json;
    use RejectReason::*;
    let cases: &[(&str, RejectReason)] = &[
        ("", Empty),
        ("   ", Empty),
        ("\u{feff} \n", Empty),
        (r#"{"events":["#, Truncated),
        (r#"{"events":[{"flight_id":"A1""#, Truncated),
        (r#"{"events":[]"#, Truncated),
        (r#"[1,2"#, Truncated),
        ("hello", NotJson),
        (r#"{"events":[]} x"#, NotJson),
        (r#"{"events":[{"a":1]}]}"#, NotJson),
        (r#"{"events":[{"a":01}]}"#, NotJson),
        (r#"{"events":[] "batch_id":"x"}"#, NotJson),
        ("[1,2]", BadShape),
        ("42", BadShape),
        (r#"{"batch_id":"x"}"#, BadShape),
        (r#"{"events":{}}"#, BadShape),
        (r#"{"events":[],"extra":1}"#, BadShape),
        (r#"{"events":[],"events":[]}"#, BadShape),
        (r#"{"batch_id":7,"events":[]}"#, BadShape),
        (r#"{"source_revision":-1,"events":[]}"#, BadShape),
        (r#"{"source_revision":1.0,"events":[]}"#, BadShape),
        (r#"{"event_count":2,"events":[]}"#, CountMismatch),
    ];
    for (text, reason) in cases {
        check_reject(Json, text.as_bytes(), *reason);
    }
    check_reject(
        Json,
        format!(r#"{{"events":[{E1}],"event_count":2}}"#).as_bytes(),
        CountMismatch,
    );
    check_reject(Json, b"{\"events\":[{\"flight_id\":\"\xff\"}]}", NotUtf8);
}

#[test]
fn json_depth_is_counted_over_the_whole_file() {
    // The batch object is level 1, events level 2, the event level 3.
    let at = |levels: usize| {
        let inner = levels - 3;
        format!(
            r#"{{"events":[{{"flight_id":"A1","event_kind":"x","instant_utc":"2026-11-29T10:05:00Z","payload":{}1{}}}]}}"#,
            "{\"a\":".repeat(inner),
            "}".repeat(inner)
        )
    };
    check(Format::Json, &at(128), &["A1@None"]);
    check_reject(Format::Json, at(129).as_bytes(), RejectReason::TooDeep);
}

#[test]
fn ndjson_batches() {
    use Format::Ndjson;
    check(Ndjson, &format!("{E1}\n{E2}\n"), &["A1@None", "A2@Some(4)"]);
    check(
        Ndjson,
        &format!("\u{feff}{E1}\r\n\r\n  \n{E2}"),
        &["A1@None", "A2@Some(4)"],
    );
    check(
        Ndjson,
        &format!("{E1}\nnot json\n[1]\n{E2}\n"),
        &["A1@None", "not_json", "not_object", "A2@Some(4)"],
    );
    let deep = format!("{}{}\n", "[".repeat(129), "]".repeat(129));
    check(Ndjson, &format!("{deep}{E1}\n"), &["too_deep", "A1@None"]);
}

#[test]
fn ndjson_record_index_counts_non_blank_lines() {
    let text = format!("\n{E1}\n\nbad\n{E2}\n");
    let (records, _) = read_all(Format::Ndjson, text.as_bytes()).unwrap();
    let indexes: Vec<u64> = records.iter().map(|(i, _)| *i).collect();
    assert_eq!(indexes, [0, 1, 2]);
}

#[test]
fn ndjson_rejections() {
    use Format::Ndjson;
    use RejectReason::*;
    check_reject(Ndjson, b"", Empty);
    check_reject(Ndjson, b"\n \r\n\n", Empty);
    check_reject(
        Ndjson,
        format!("{E1}\n{{\"flight_id\":\"A").as_bytes(),
        Truncated,
    );
    check_reject(Ndjson, &[E1.as_bytes(), b"\n\xff\n"].concat(), NotUtf8);
}

#[test]
fn raw_text_is_kept_exactly() {
    let text = format!("{{\"events\":[ {E1} ,\n  {{ \"x\" : 1 }} ]}}");
    let mut reader = BatchReader::new(Format::Json, text.as_bytes(), Limits::default());
    let first = reader.next_record().unwrap().unwrap();
    let second = reader.next_record().unwrap().unwrap();
    assert_eq!(first.raw, E1);
    assert_eq!(second.raw, "{ \"x\" : 1 }");
    assert!(reader.next_record().unwrap().is_none());
}

#[test]
fn formats_by_extension() {
    assert_eq!(Format::from_name("a.JSON"), Some(Format::Json));
    assert_eq!(Format::from_name("a.b.NdJson"), Some(Format::Ndjson));
    assert_eq!(Format::from_name("a.jsonl"), Some(Format::Ndjson));
    assert_eq!(Format::from_name("a.CSV"), Some(Format::Csv));
    assert_eq!(Format::from_name("a.Xml"), Some(Format::Aidx));
    assert_eq!(Format::from_name("a.txt"), None);
    assert_eq!(Format::from_name("json"), None);
    // gzip: the format of the content.
    assert_eq!(Format::from_name("a.ndjson.gz"), Some(Format::Ndjson));
    assert_eq!(Format::from_name("a.JSON.Gz"), Some(Format::Json));
    assert_eq!(Format::from_name("a.gz"), None);
    assert_eq!(Format::from_name("a.csv.gz"), Some(Format::Csv));
    assert_eq!(Format::from_name("a.json.gz.gz"), None);
    assert!(super::is_gzip("a.ndjson.GZ") && !super::is_gzip("a.ndjson"));
}

mod never_panics {
    //! Whatever the bytes, reading a batch ends in records or a rejection: never a
    //! panic, never a hang.

    use super::*;
    use proptest::prelude::*;

    /// Drains a reader; the result does not matter, only that it ends.
    fn drain(format: Format, bytes: &[u8]) {
        let mut reader = BatchReader::new(format, bytes, Limits::default());
        for _ in 0..=bytes.len() + 1 {
            match reader.next_record() {
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return,
            }
        }
        panic!("the reader did not end on {} bytes", bytes.len());
    }

    /// Bytes that look like batch files: JSON punctuation, quotes, escapes, digits,
    /// field names, multi-byte characters and newlines.
    fn batchish() -> impl Strategy<Value = Vec<u8>> {
        let pieces = prop::sample::select(vec![
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            "\"",
            "\\",
            "\\u",
            "\\ud83d",
            "0",
            "-1",
            "1e5",
            "2.5",
            "true",
            "null",
            " ",
            "\n",
            "\r\n",
            "\u{feff}",
            "é",
            "\"events\"",
            "\"flight_id\"",
            "\"instant_utc\"",
            "\"2026-11-29T10:05:00Z\"",
            "\"payload\"",
            "\u{0}",
            "\u{1f600}",
        ]);
        prop::collection::vec(pieces, 0..64).prop_map(|parts| parts.concat().into_bytes())
    }

    proptest! {
        #[test]
        fn random_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            drain(Format::Json, &bytes);
            drain(Format::Ndjson, &bytes);
        }

        #[test]
        fn batch_like_text(bytes in batchish()) {
            drain(Format::Json, &bytes);
            drain(Format::Ndjson, &bytes);
            let wrapped = [b"{\"events\":[".as_slice(), &bytes, b"]}"].concat();
            drain(Format::Json, &wrapped);
        }
    }
}

// ---------------------------------------------------------------------------------
// Still arriving: a question of JSON syntax alone.

/// A `.json` batch using every part of JSON's grammar: a byte-order mark, escapes,
/// multi-byte characters, numbers with fractions and exponents, literals, nesting,
/// CRLF whitespace.
const RICH_JSON: &str = concat!(
    "\u{feff}{\"batch_id\":\"B-\\u00e9\\\"x\\\\ \u{1f600}\",\"source_revision\":7,\r\n",
    " \"events\" : [ ",
    r#"{"flight_id":"A1","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z"},"#,
    "\r\n  ",
    r#"{"flight_id":"A3","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00.5+01:00","source_revision":12,"#,
    r#""payload":{"n":-1.25e+10,"m":0,"k":3E-2,"t":true,"f":false,"z":null,"#,
    "\"s\":\"tab\\t \u{e9} \\ud83d\\ude00 \\u00E9 \\/\",\"deep\":[[{\"a\":[]}],[]],\"e\":{}}}",
    " ],\"event_count\":2}\r\n"
);

/// NDJSON lines with the same variety, blank lines and CRLF among them.
const RICH_NDJSON: &str = concat!(
    "\u{feff}",
    r#"{"flight_id":"A1","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00Z"}"#,
    "\r\n\r\n  \n",
    r#"{"flight_id":"A3","event_kind":"takeoff","instant_utc":"2026-11-29T10:05:00.5+01:00","source_revision":12,"#,
    r#""payload":{"n":-1.25e+10,"m":0,"k":3E-2,"t":true,"f":false,"z":null,"#,
    "\"s\":\"tab\\t \u{e9} \\ud83d\\ude00 \\u00E9 \\/\",\"deep\":[[{\"a\":[]}],[]],\"e\":{}}}\n",
    r#"{"flight_id":"A2","event_kind":"landing","instant_utc":"2026-11-29T12:05:00Z","source_revision":4}"#,
);

/// Only whitespace, or (part of) a byte-order mark and whitespace.
fn holds_only_whitespace(bytes: &[u8]) -> bool {
    let bom = b"\xEF\xBB\xBF";
    let after_bom = (0..=3)
        .rev()
        .find(|&n| bytes.len() >= n && bytes[..n] == bom[..n])
        .map_or(bytes, |n| &bytes[n..]);
    after_bom
        .iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\r' | b'\n'))
}

#[test]
fn every_cut_of_a_json_file_is_still_arriving() {
    let files = [
        RICH_JSON.to_owned(),
        "{\r\n \"events\" : [ ]\r\n}\r\n".to_owned(),
        format!("{{\"events\":[{E1},{E2}],\"batch_id\":null}}"),
    ];
    for file in &files {
        let bytes = file.as_bytes();
        let end = file.rfind('}').expect("an object") + 1;
        for cut in 0..bytes.len() {
            let prefix = &bytes[..cut];
            let got = read_all(Format::Json, prefix);
            let text = String::from_utf8_lossy(prefix);
            match got {
                Err((reason, detail)) if cut < end => {
                    let want = if holds_only_whitespace(prefix) {
                        RejectReason::Empty
                    } else {
                        RejectReason::Truncated
                    };
                    assert_eq!(reason, want, "cut at {cut}: {text:?}: {detail}");
                    assert!(detail.contains("still be arriving"), "{detail}");
                }
                Ok(_) if cut >= end => {}
                other => panic!("cut at {cut}: {text:?}: {other:?}"),
            }
        }
        assert!(read_all(Format::Json, bytes).is_ok(), "{file}");
    }
}

/// What a cut NDJSON file must read as: still arriving when its last line has no
/// newline and is a proper prefix of its line, otherwise processed.
fn expected_ndjson_cut(full: &[u8], cut: usize) -> Result<(), RejectReason> {
    let prefix = &full[..cut];
    let line_start = prefix
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let line_end = full[line_start..]
        .iter()
        .position(|&b| b == b'\n')
        .map_or(full.len(), |i| line_start + i);
    let strip = |line: &[u8]| line.strip_suffix(b"\r").unwrap_or(line).to_vec();
    let cut_line = strip(&prefix[line_start..]);
    let whole_line = strip(&full[line_start..line_end]);
    if holds_only_whitespace(prefix) {
        Err(RejectReason::Empty)
    } else if holds_only_whitespace(&cut_line) || cut_line == whole_line {
        Ok(())
    } else {
        Err(RejectReason::Truncated)
    }
}

#[test]
fn every_cut_of_an_ndjson_file_inside_a_line_is_still_arriving() {
    let files = [RICH_NDJSON.to_owned(), format!("{RICH_NDJSON}\r\n")];
    for file in &files {
        let bytes = file.as_bytes();
        for cut in 0..=bytes.len() {
            let prefix = &bytes[..cut];
            let got = read_all(Format::Ndjson, prefix)
                .map(|_| ())
                .map_err(|e| e.0);
            assert_eq!(
                got,
                expected_ndjson_cut(bytes, cut),
                "cut at {cut}: {:?}",
                String::from_utf8_lossy(prefix)
            );
        }
    }
}

#[test]
fn bytes_that_no_continuation_makes_json_are_not_json_at_once() {
    use RejectReason::*;
    let deep_open = format!("{{\"events\":[{}", "[".repeat(200));
    let deep = format!("{{\"events\":[{}{}]}}", "[".repeat(200), "]".repeat(200));
    let cases: &[(&str, RejectReason)] = &[
        (",", NotJson),
        (r#"{"events":[{"note":"he said "hi"}}]}"#, NotJson),
        (r#"{"events":[}"#, NotJson),
        (r#"{"events":[{"a":[1}]}"#, NotJson),
        ("[1}", NotJson),
        (r#"{"events":[{"a":nulx"#, NotJson),
        (r#"{"events":[{"a":-x"#, NotJson),
        (r#"{"events":[{"a":1.e5}]}"#, NotJson),
        (r#"{"events":["\x"]}"#, NotJson),
        ("{\"events\":[\"a\u{1}\"]}", NotJson),
        (r#"{"events":["\u12g4"]}"#, NotJson),
        (r#"{"events":[]}}"#, NotJson),
        (r#"{"events":[]]"#, NotJson),
        (r#"{"events" 1"#, NotJson),
        (r#"{"events":[],}"#, NotJson),
        (r#"{"events":[1,]"#, NotJson),
        ("{,", NotJson),
        ("{'events':[]}", NotJson),
        (r#"{"extra":1,"events":[]} x"#, NotJson),
        ("{\"events\":[]}\u{a0}", NotJson),
        // Proper prefixes of some JSON text: still arriving, whatever the complete
        // text would hold.
        (r#"{"batch_id": nul"#, Truncated),
        (r#"{"events":[tru"#, Truncated),
        (r#"{"events":[fals"#, Truncated),
        (r#"{"events":[{"a":1,"":-"#, Truncated),
        (r#"{"events":[{"a":1e"#, Truncated),
        (r#"{"events":[{"a":1E+"#, Truncated),
        (r#"{"events":[{"a":0."#, Truncated),
        (r#"{"events":[{"a":"\u12"#, Truncated),
        (r#"{"events":[{"a":"\"#, Truncated),
        (r#"{"events":[{"a""#, Truncated),
        (r#"{"events":[{"a"#, Truncated),
        (r#"{"extra":1,"events":["#, Truncated),
        (r#"{"events":{"#, Truncated),
        (r#"{"events":[],"batch_id":7"#, Truncated),
        ("[1,2", Truncated),
        ("\"a batch", Truncated),
        ("-", Truncated),
        (&deep_open, Truncated),
        (&deep, TooDeep),
    ];
    for (text, reason) in cases {
        check_reject(Format::Json, text.as_bytes(), *reason);
    }
}

#[test]
fn an_unterminated_last_ndjson_line_waits_only_while_json_can_still_come() {
    use Format::Ndjson;
    use RejectReason::Truncated;
    let deep_open = "[".repeat(200);
    let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
    check_reject(Ndjson, format!("{E1}\n{{\"a\":tru").as_bytes(), Truncated);
    check_reject(Ndjson, format!("{E1}\n{deep_open}").as_bytes(), Truncated);
    check_reject(Ndjson, format!("{E1}\n{{\"a\":\"x\r").as_bytes(), Truncated);
    check_reject(
        Ndjson,
        format!("{E1}\n{{\"a\":\"\u{e9}").as_bytes(),
        Truncated,
    );
    check_reject(
        Ndjson,
        &[E1.as_bytes(), b"\n{\"a\":\"\xc3"].concat(),
        Truncated,
    );
    check(
        Ndjson,
        &format!("{E1}\n{{\"a\" x"),
        &["A1@None", "not_json"],
    );
    check(Ndjson, &format!("{E1}\n,"), &["A1@None", "not_json"]);
    check(Ndjson, &format!("{E1}\n{deep}"), &["A1@None", "too_deep"]);
    check(Ndjson, &format!("{E1}\n12"), &["A1@None", "not_object"]);
    check(Ndjson, &format!("{E1}\n{E2}\r"), &["A1@None", "A2@Some(4)"]);
}

#[test]
fn what_a_file_holds_is_judged_only_once_it_is_complete() {
    use RejectReason::*;
    let cases: &[(&str, RejectReason)] = &[
        (r#"{"extra":1,"events":[]}"#, BadShape),
        (r#"{"extra":1,"events":["#, Truncated),
        (r#"[1,2]"#, BadShape),
        (r#"[1,2"#, Truncated),
        (r#"{"events":[],"events":[]}"#, BadShape),
        (r#"{"events":[],"events":["#, Truncated),
        (r#"{"event_count":3,"events":[]}"#, CountMismatch),
        (r#"{"event_count":3,"events":[]"#, Truncated),
        (r#"{"batch_id":7,"events":[]}"#, BadShape),
        (r#"{"batch_id":7,"events":[] x"#, NotJson),
    ];
    for (text, reason) in cases {
        check_reject(Format::Json, text.as_bytes(), *reason);
    }
}

// ---------------------------------------------------------------------------------
// Details a person can act on.

fn rejection_detail(format: Format, text: &str) -> String {
    match read_all(format, text.as_bytes()) {
        Err((_, detail)) => detail,
        Ok(records) => panic!("{text:?} was accepted: {records:?}"),
    }
}

/// The records of a file, raw text and event or invalid detail included.
fn records(format: Format, bytes: &[u8], limits: Limits) -> Vec<Record> {
    let mut reader = BatchReader::new(format, bytes, limits);
    let mut records = Vec::new();
    loop {
        match reader.next_record() {
            Ok(Some(record)) => records.push(record),
            Ok(None) => return records,
            Err(ReadError::Rejected(rejection)) => panic!("rejected: {rejection:?}"),
            Err(ReadError::Io(error)) => panic!("io error from a slice: {error}"),
        }
    }
}

fn invalid_detail(record: &Record) -> (&'static str, &str) {
    match &record.event {
        Err(invalid) => (invalid.reason.code(), invalid.detail.as_str()),
        Ok(event) => panic!("record {} is valid: {event:?}", record.index),
    }
}

#[test]
fn parse_details_name_line_character_and_byte_offset() {
    assert_eq!(
        rejection_detail(Format::Json, "{\"events\":[\n  {\"a\":1 \"b\":2}\n]}"),
        "the file is not JSON at line 2, character 10 (byte offset 21): expected ',' or '}' in an object"
    );
    // Characters, not bytes: é is two bytes. The byte-order mark is no character.
    assert_eq!(
        rejection_detail(Format::Json, "\u{feff}{\"events\":[{\"\u{e9}\":1 x}]}"),
        "the file is not JSON at line 1, character 19 (byte offset 22): expected ',' or '}' in an object"
    );
    assert_eq!(
        rejection_detail(Format::Json, "{\"events\":[\r\n{\"a\":\"x"),
        "the file ends inside a string at line 2, character 8 (byte offset 20); it may still be arriving"
    );
    assert!(
        rejection_detail(Format::Ndjson, &format!("{E1}\n{{\"a\":[1,"))
            .contains("ends inside an array at line 2, character 9 (byte offset ")
    );
    assert!(
        rejection_detail(Format::Json, &format!("{{\"events\":[{}", "[".repeat(130)))
            .contains("ends inside an array at line 1")
    );
    let deep = format!("{{\"events\":[\n{}{}]}}", "[".repeat(130), "]".repeat(130));
    assert_eq!(
        rejection_detail(Format::Json, &deep),
        "the file nests arrays and objects deeper than 128 levels at line 2, character 127 (byte offset 138)"
    );

    let text = format!("{E1}\n\n  *not json\n{{\"a\":\n");
    let got = records(Format::Ndjson, text.as_bytes(), Limits::default());
    let second_line = E1.len() as u64 + 2;
    assert_eq!(
        invalid_detail(&got[1]),
        (
            "not_json",
            format!(
                "the event is not JSON at line 3, character 3 (byte offset {}): expected a JSON value",
                second_line + 2
            )
            .as_str()
        )
    );
    assert_eq!(
        invalid_detail(&got[2]),
        (
            "not_json",
            format!(
                "the event is not JSON at line 4, character 6 (byte offset {}): the text ends before the JSON value does",
                second_line + 12 + 5
            )
            .as_str()
        )
    );
    let deep_line = format!("{E1}\n{}{}\n", "[".repeat(129), "]".repeat(129));
    let got = records(Format::Ndjson, deep_line.as_bytes(), Limits::default());
    assert_eq!(
        invalid_detail(&got[1]),
        (
            "too_deep",
            format!(
                "the event nests arrays and objects deeper than 128 levels at line 2, character 129 (byte offset {})",
                E1.len() + 1 + 128
            )
            .as_str()
        )
    );
}

#[test]
fn details_quote_what_the_sender_wrote_and_count_in_words() {
    let event =
        r#"{"flight_id":"A1","event_kind":" Take Off ","instant_utc":"2026-11-29T10:05:00Z"}"#;
    let want = (
        "bad_event_kind",
        r#"event_kind " Take Off " must be a letter then up to 31 letters, digits or '_'"#,
    );
    let ndjson = format!("{event}\n");
    let got = records(Format::Ndjson, ndjson.as_bytes(), Limits::default());
    assert_eq!(invalid_detail(&got[0]), want);
    let json = format!("{{\"events\":[{event}]}}");
    let got = records(Format::Json, json.as_bytes(), Limits::default());
    assert_eq!(invalid_detail(&got[0]), want);

    assert_eq!(
        rejection_detail(
            Format::Json,
            &format!(r#"{{"events":[{E1}],"event_count":2}}"#)
        ),
        "event_count says 2 but the file holds 1 event"
    );
    assert_eq!(
        rejection_detail(
            Format::Json,
            &format!(r#"{{"events":[{E1},{E2}],"event_count":1}}"#)
        ),
        "event_count says 1 but the file holds 2 events"
    );
}

// ---------------------------------------------------------------------------------
// Lone surrogates and line ends.

#[test]
fn a_lone_surrogate_makes_its_event_not_json_and_not_the_file() {
    let lone = [
        r#"{"flight_id":"A\ud800","event_kind":"x","instant_utc":"2026-11-29T10:05:00Z"}"#,
        r#"{"flight_id":"A9","event_kind":"x","instant_utc":"2026-11-29T10:05:00Z","payload":{"s":"\ud800\u0041"}}"#,
        r#"{"flight_id":"A9","event_kind":"x","instant_utc":"2026-11-29T10:05:00Z","payload":{"\udc00":1}}"#,
    ];
    let json = format!("{{\"events\":[{E1},\n{}, {E2}]}}", lone.join(",\n"));
    let got = records(Format::Json, json.as_bytes(), Limits::default());
    let reasons: Vec<_> = got
        .iter()
        .map(|r| r.event.as_ref().map_or_else(|e| e.reason.code(), |_| "ok"))
        .collect();
    assert_eq!(reasons, ["ok", "not_json", "not_json", "not_json", "ok"]);
    assert_eq!(got[1].raw, lone[0]);
    let (_, detail) = invalid_detail(&got[1]);
    assert!(
        detail.starts_with("the event is not JSON at line 2, character 16 (byte offset "),
        "{detail}"
    );
    assert!(detail.contains("surrogate"), "{detail}");

    let lines = format!("{E1}\n{}\n{E2}\n", lone.join("\n"));
    let got = records(Format::Ndjson, lines.as_bytes(), Limits::default());
    assert_eq!(got.len(), 5);
    assert!((1..4).all(|i| invalid_detail(&got[i]).0 == "not_json"));

    // In a top-level field the file is JSON but its batch_id is no text: bad_shape.
    for text in [
        r#"{"batch_id":"B\ud800","events":[]}"#,
        r#"{"events":[],"batch_id":"\udfff"}"#,
        r#"{"\ud800":1,"events":[]}"#,
    ] {
        check_reject(Format::Json, text.as_bytes(), RejectReason::BadShape);
    }
}

#[test]
fn a_carriage_return_that_ends_a_line_is_not_raw() {
    let text = format!("{E1}\r\n{E2}\r");
    let got = records(Format::Ndjson, text.as_bytes(), Limits::default());
    let raws: Vec<&str> = got.iter().map(|r| r.raw.as_str()).collect();
    assert_eq!(raws, [E1, E2]);
    // A carriage return inside a line is the line's own.
    let text = format!("{E1} \r \n");
    let got = records(Format::Ndjson, text.as_bytes(), Limits::default());
    assert_eq!(got[0].raw, format!("{E1} \r "));
}

// ---------------------------------------------------------------------------------
// --event-bytes-max.

/// An event of about `size` bytes whose payload string is made of `é`s, so that a
/// cut at any byte may fall inside a character.
fn big_event(flight: &str, size: usize) -> String {
    let head = format!(
        r#"{{"flight_id":"{flight}","event_kind":"x","instant_utc":"2026-11-29T10:05:00Z","payload":{{"s":""#
    );
    let fill = "\u{e9}".repeat(size.saturating_sub(head.len() + 3) / 2);
    format!("{head}{fill}\"}}}}")
}

fn limit(bytes: usize) -> Limits {
    Limits {
        event_bytes_max: bytes,
        settled: false,
    }
}

/// Checks a `too_large` record: raw is the event's first bytes, at most `max` and at
/// most a character short of it, and the detail names the size and the option.
fn assert_too_large(record: &Record, event: &str, max: usize) {
    let (reason, detail) = invalid_detail(record);
    assert_eq!(reason, "too_large", "{detail}");
    assert!(
        detail.contains(&format!("is {} bytes", event.len()))
            && detail.contains(&format!("limit of {max} bytes"))
            && detail.contains("--event-bytes-max"),
        "{detail}"
    );
    assert!(
        record.raw.len() <= max && record.raw.len() + 4 > max,
        "{}",
        record.raw.len()
    );
    assert!(event.starts_with(&record.raw));
}

#[test]
fn an_event_longer_than_the_limit_is_too_large_and_the_rest_is_read() {
    for max in [1000, 1001, 1002] {
        let big = big_event("BIG", 5000);
        let json = format!("{{\"events\":[{E1},\n{big},{E2}],\"event_count\":3}}");
        let got = records(Format::Json, json.as_bytes(), limit(max));
        assert_eq!(got.len(), 3);
        assert_eq!(got.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 1, 2]);
        assert!(got[0].event.is_ok() && got[2].event.is_ok());
        assert_too_large(&got[1], &big, max);

        for end in ["\n", "\r\n"] {
            let lines = format!("{E1}{end}{big}{end}{E2}{end}");
            let got = records(Format::Ndjson, lines.as_bytes(), limit(max));
            assert_eq!(got.len(), 3);
            assert!(got[0].event.is_ok() && got[2].event.is_ok());
            assert_too_large(&got[1], &big, max);
        }
    }
}

#[test]
fn an_event_at_the_limit_is_parsed_normally() {
    let event = big_event("EDGE", 300);
    for format in [Format::Json, Format::Ndjson] {
        let text = match format {
            Format::Json => format!("{{\"events\":[{event}]}}"),
            Format::Ndjson => format!("{event}\r\n"),
            Format::Csv | Format::Aidx => unreachable!("JSON events only"),
        };
        let at = records(format, text.as_bytes(), limit(event.len()));
        assert!(at[0].event.is_ok(), "{format:?}: {:?}", at[0].event);
        assert_eq!(at[0].raw, event);
        let over = records(format, text.as_bytes(), limit(event.len() - 1));
        assert_too_large(&over[0], &event, event.len() - 1);
    }
    // An unterminated last line, too.
    let at = records(Format::Ndjson, event.as_bytes(), limit(event.len()));
    assert!(at[0].event.is_ok());
}

#[test]
fn the_rest_of_a_too_large_json_event_still_decides_the_file() {
    use RejectReason::*;
    let big = big_event("BIG", 5000);
    let open = &big[..big.len() - 2];
    let cases = [
        (format!("{{\"events\":[{open}}} x]}}"), NotJson),
        (format!("{{\"events\":[{open}"), Truncated),
        (
            format!(
                "{{\"events\":[{open},\"d\":{}{}}}}}]}}",
                "[".repeat(200),
                "]".repeat(200)
            ),
            TooDeep,
        ),
        (
            format!("{{\"events\":[{big}],\"event_count\":2}}"),
            CountMismatch,
        ),
    ];
    for (text, reason) in cases {
        match read_all_with(Format::Json, text.as_bytes(), limit(1000)) {
            Err((got, detail)) => assert_eq!(got, reason, "{detail}"),
            Ok(records) => panic!("accepted: {records:?}"),
        }
    }
}

#[test]
fn a_top_level_value_longer_than_the_limit_is_bad_shape() {
    let long = "x".repeat(5000);
    for text in [
        format!("{{\"batch_id\":\"{long}\",\"events\":[]}}"),
        format!("{{\"events\":[],\"batch_id\":\"{long}\"}}"),
        format!("{{\"{long}\":1,\"events\":[]}}"),
        format!("{{\"events\":[],\"event_count\":{}}}", "1".repeat(5000)),
    ] {
        match read_all_with(Format::Json, text.as_bytes(), limit(1000)) {
            Err((RejectReason::BadShape, detail)) => assert!(
                detail.contains("over 1000 bytes") && detail.contains("--event-bytes-max"),
                "{detail}"
            ),
            other => panic!("{other:?}"),
        }
    }
    // Still arriving while it is cut.
    let cut = format!("{{\"batch_id\":\"{long}");
    check_reject(Format::Json, cut.as_bytes(), RejectReason::Truncated);
}

#[test]
fn a_long_ndjson_line_is_skipped_to_its_newline() {
    use Format::Ndjson;
    let big = big_event("BIG", 5000);
    let open = &big[..big.len() - 2];
    // An unterminated long last line: still arriving while JSON can follow.
    check_reject(
        Ndjson,
        format!("{E1}\n{open}").as_bytes(),
        RejectReason::Truncated,
    );
    let got = records(Ndjson, format!("{E1}\n{big}").as_bytes(), limit(1000));
    assert_too_large(&got[1], &big, 1000);
    let got = records(Ndjson, format!("{E1}\n{big}\r").as_bytes(), limit(1000));
    assert_too_large(&got[1], &big, 1000);
    let got = records(Ndjson, format!("{E1}\n{open} x").as_bytes(), limit(1000));
    assert_eq!(invalid_detail(&got[1]).0, "too_large");
    // A long blank line is a blank line.
    let blank = " ".repeat(5000);
    let got = records(
        Ndjson,
        format!("{blank}\n{E1}\n{blank}").as_bytes(),
        limit(1000),
    );
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].index, 0);
}

/// A `BufRead` that makes up a huge input without holding it: `head`, then `fill`
/// repeated `count` times, then `tail`.
struct Generated {
    head: Vec<u8>,
    fill: u8,
    count: u64,
    tail: Vec<u8>,
    chunk: Vec<u8>,
    at: usize,
}

impl Generated {
    fn new(head: &str, fill: u8, count: u64, tail: &str) -> Generated {
        Generated {
            head: head.as_bytes().to_vec(),
            fill,
            count,
            tail: tail.as_bytes().to_vec(),
            chunk: Vec::new(),
            at: 0,
        }
    }
}

impl std::io::Read for Generated {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let n = {
            let buf = self.fill_buf()?;
            let n = buf.len().min(out.len());
            out[..n].copy_from_slice(&buf[..n]);
            n
        };
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for Generated {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        if self.at == self.chunk.len() {
            self.at = 0;
            self.chunk = if !self.head.is_empty() {
                std::mem::take(&mut self.head)
            } else if self.count > 0 {
                let n = self.count.min(64 * 1024);
                self.count -= n;
                vec![self.fill; n as usize]
            } else {
                std::mem::take(&mut self.tail)
            };
        }
        Ok(&self.chunk[self.at..])
    }

    fn consume(&mut self, n: usize) {
        self.at += n;
    }
}

#[test]
fn huge_values_are_never_held_whole() {
    const HUGE: u64 = 64 << 20;
    let max = 1 << 20;
    let head = r#"{"flight_id":"BIG","event_kind":"x","instant_utc":"2026-11-29T10:05:00Z","payload":{"s":""#;
    let tail = format!("\"}}}}\n{E1}\n");
    let input = Generated::new(head, b'a', HUGE, &tail);
    let mut reader = BatchReader::new(Format::Ndjson, input, limit(max));
    let first = reader.next_record().expect("read").expect("a record");
    assert_eq!(first.raw.len(), max);
    assert_eq!(invalid_detail(&first).0, "too_large");
    assert!(
        reader
            .next_record()
            .expect("read")
            .expect("E1")
            .event
            .is_ok()
    );

    let head = format!("{{\"events\":[{E1},{head}");
    let tail = format!("\"}}}},{E2}],\"batch_id\":\"b\"}}");
    let input = Generated::new(&head, b'a', HUGE, &tail);
    let mut reader = BatchReader::new(Format::Json, input, limit(max));
    assert!(
        reader
            .next_record()
            .expect("read")
            .expect("E1")
            .event
            .is_ok()
    );
    let big = reader.next_record().expect("read").expect("big");
    assert_eq!(big.raw.len(), max);
    assert_eq!(invalid_detail(&big).0, "too_large");
    assert!(
        reader
            .next_record()
            .expect("read")
            .expect("E2")
            .event
            .is_ok()
    );
    assert!(reader.next_record().expect("read").is_none());
    assert_eq!(reader.header().batch_id.as_deref(), Some("b"));

    let input = Generated::new("{\"batch_id\":\"", b'a', HUGE, "\",\"events\":[]}");
    let mut reader = BatchReader::new(Format::Json, input, limit(max));
    match reader.next_record() {
        Err(ReadError::Rejected(rejection)) => {
            assert_eq!(
                rejection.reason,
                RejectReason::BadShape,
                "{}",
                rejection.detail
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_event_too_deep_yields_no_record_before_the_rejection() {
    let deep = format!(
        r#"{{"flight_id":"A9","event_kind":"x","instant_utc":"2026-11-29T10:05:00Z","payload":{{"a":{}1{}}}}}"#,
        "[".repeat(130),
        "]".repeat(130)
    );
    let text = format!("{{\"events\":[{E1},{deep},{E2}]}}");
    let mut reader = BatchReader::new(Format::Json, text.as_bytes(), Limits::default());
    assert!(reader.next_record().expect("E1").is_some());
    match reader.next_record() {
        Err(ReadError::Rejected(rejection)) => {
            assert_eq!(
                rejection.reason,
                RejectReason::TooDeep,
                "{}",
                rejection.detail
            );
        }
        other => panic!("{other:?}"),
    }
}

// ---------------------------------------------------------------------------------
// The direct reader of events against the tree of `json` and `Event::from_parsed`.

mod direct_agrees_with_the_tree {
    //! `direct::parse_event` reads an event without a tree of values; the reference
    //! is `json::parse` then `Event::from_parsed`. On every text both must give the
    //! same event (canonical payload included) or the same refusal, word for word.

    use super::super::direct::{self, Scratch};
    use super::*;
    use proptest::prelude::*;

    /// What the reference makes of `text`.
    fn reference(text: &str, depth_max: usize) -> Result<Event, String> {
        match json::parse(text, depth_max) {
            Ok(parsed) => Event::from_parsed(parsed).map_err(|e| format!("{e:?}")),
            Err(error) => Err(format!("json {error:?}")),
        }
    }

    fn direct(text: &str, depth_max: usize, scratch: &mut Scratch) -> Result<Event, String> {
        direct::parse_event(text, depth_max, scratch).map_err(|problem| match problem {
            direct::Problem::Json(error) => format!("json {error:?}"),
            direct::Problem::Invalid(invalid) => format!("{invalid:?}"),
        })
    }

    fn agree(text: &str, depth_max: usize, scratch: &mut Scratch) -> Result<(), TestCaseError> {
        prop_assert_eq!(
            direct(text, depth_max, scratch),
            reference(text, depth_max),
            "text {:?}",
            text
        );
        Ok(())
    }

    /// JSON strings: plain, escaped, non-ASCII, control escapes, surrogate pairs
    /// and lone halves, keys that sort in surprising orders.
    fn string() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "a",
            "b",
            "Z",
            "z",
            "é",
            "\u{1f600}",
            "\u{7f}",
            "\\\"",
            "\\\\",
            "\\/",
            "\\n",
            "\\t",
            "\\b",
            "\\f",
            "\\r",
            "\\u0001",
            "\\u001F",
            "\\u00e9",
            "\\u007f",
            "\\ud83d\\ude00",
            "\\ud800",
            "\\udc00",
            " ",
            ".",
            "payload",
            "flight_id",
            "~",
            "\u{a0}",
        ]);
        prop::collection::vec(pieces, 0..4).prop_map(|parts| format!("\"{}\"", parts.concat()))
    }

    fn number() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "0",
            "-0",
            "1",
            "3",
            "-1",
            "1.50",
            "1E+5",
            "3e0",
            "3.0",
            "2.5e-3",
            "9223372036854775807",
            "9223372036854775808",
            "123456789012345678901234567890",
        ])
        .prop_map(str::to_owned)
    }

    /// JSON values nested a few levels, with whitespace, duplicate keys (few key
    /// choices) and objects big enough to take the sorted duplicate search.
    fn value() -> impl Strategy<Value = String> {
        let leaf = prop_oneof![
            string(),
            number(),
            prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_owned),
        ];
        leaf.prop_recursive(4, 64, 20, |inner| {
            let key = prop_oneof![
                string(),
                prop::sample::select(vec!["\"a\"", "\"b\"", "\"\"", "\"a\\u0062\""])
                    .prop_map(str::to_owned),
            ];
            let space = prop::sample::select(vec!["", " ", "\n", "\t ", "\r\n"]);
            prop_oneof![
                prop::collection::vec((inner.clone(), space.clone()), 0..5).prop_map(|items| {
                    let items: Vec<String> = items
                        .into_iter()
                        .map(|(v, s)| format!("{s}{v}{s}"))
                        .collect();
                    format!("[{}]", items.join(","))
                }),
                prop::collection::vec((key, inner, space), 0..20).prop_map(|members| {
                    let members: Vec<String> = members
                        .into_iter()
                        .map(|(k, v, s)| format!("{s}{k}{s}:{s}{v}"))
                        .collect();
                    format!("{{{}}}", members.join(","))
                }),
            ]
        })
    }

    /// Event texts: the five fields in any order, sometimes missing, doubled,
    /// mistyped or joined by others.
    pub(super) fn event_text() -> impl Strategy<Value = String> {
        let flight = prop::sample::select(vec![
            "\"BA0117-20261129\"",
            "\" BA1 \"",
            "\"B|A\"",
            "\"\"",
            "\"BA\\u0031\"",
            "7",
            "null",
        ]);
        let kind = prop::sample::select(vec![
            "\"takeoff\"",
            "\" Off_Blocks \"",
            "\"take off\"",
            "\"1x\"",
            "[]",
        ]);
        let instant = prop::sample::select(vec![
            "\"2026-11-29T10:05:00Z\"",
            "\"2026-11-29t11:05:00+01:00\"",
            "\"2026-11-29T10:05:00.120Z\"",
            "\"2026-11-29T10:05:00\"",
            "\"2025-02-29T00:00:00Z\"",
            "\"0000-12-31T23:30:00-01:00\"",
            "\"2026-11-29T10:05:00\\u005a\"",
            "{}",
        ]);
        let field = prop_oneof![
            flight.prop_map(|v| format!("\"flight_id\":{v}")),
            kind.prop_map(|v| format!("\"event_kind\":{v}")),
            instant.prop_map(|v| format!("\"instant_utc\":{v}")),
            number().prop_map(|v| format!("\"source_revision\":{v}")),
            value().prop_map(|v| format!("\"payload\":{v}")),
            value().prop_map(|v| format!("\"payload\":{v}")),
            (string(), value()).prop_map(|(k, v)| format!("{k}:{v}")),
        ];
        let base = [
            "\"flight_id\":\"BA1\"",
            "\"event_kind\":\"takeoff\"",
            "\"instant_utc\":\"2026-11-29T10:05:00Z\"",
        ];
        (
            prop::collection::vec(field, 0..4),
            prop::collection::vec(0usize..3, 0..4),
            any::<bool>(),
        )
            .prop_map(move |(fields, keep, spaced)| {
                let mut all: Vec<String> = keep.iter().map(|&i| base[i].to_owned()).collect();
                all.extend(fields);
                let sep = if spaced { " , " } else { "," };
                format!("{{{}}}", all.join(sep))
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn on_events(text in event_text()) {
            agree(&text, 128, &mut Scratch::default())?;
        }

        #[test]
        fn on_any_value(text in value()) {
            agree(&text, 128, &mut Scratch::default())?;
            agree(&format!("{{\"payload\":{text}}}"), 3, &mut Scratch::default())?;
        }

        /// Every cut of an event, and the event with a byte changed: the same
        /// refusals at the same offsets. One scratch for all, as a reader keeps it.
        #[test]
        fn on_cut_and_damaged_events(text in event_text(), at in any::<prop::sample::Index>(),
                                     byte in prop::sample::select(b"{}[],:\"\\ 0-eu".to_vec())) {
            let mut scratch = Scratch::default();
            let bytes = text.as_bytes();
            for cut in (0..bytes.len()).filter(|&c| text.is_char_boundary(c)) {
                agree(&text[..cut], 128, &mut scratch)?;
            }
            let i = at.index(bytes.len());
            if text.is_char_boundary(i) && text.is_char_boundary(i + 1) {
                let damaged = format!("{}{}{}", &text[..i], byte as char, &text[i + 1..]);
                agree(&damaged, 128, &mut scratch)?;
            }
        }
    }

    #[test]
    fn on_examples() {
        let mut scratch = Scratch::default();
        let deep = |n: usize| {
            format!(
                "{{\"flight_id\":\"A\",\"event_kind\":\"x\",\"instant_utc\":\"2026-11-29T10:05:00Z\",\"payload\":{}1{}}}",
                "{\"a\":[".repeat(n),
                "]}".repeat(n)
            )
        };
        let many: String = (0..40).rev().map(|i| format!("\"k{i}\":{i},")).collect();
        for text in [
            RICH_NDJSON.lines().nth(3).unwrap_or_default().to_owned(),
            E1.to_owned(),
            E2.to_owned(),
            format!("{{\"payload\":{{{many}\"k7\":1}},\"x\":{{\"\":{{\"a\":1,\"a\":2}}}}}}"),
            format!("{{\"payload\":{{{many}\"k7\":1,\"k3\":2}}}}"),
            "{\"\":{\"\":{\"b\":1,\"b\":1}}}".to_owned(),
            "{\"a\":[{\"b\":{\"c\":1,\"c\":2}}],\"a\":1}".to_owned(),
            deep(63),
            deep(64),
            "[1,2".to_owned(),
            " 7 ".to_owned(),
            "{} x".to_owned(),
            "".to_owned(),
        ] {
            for depth_max in [1, 2, 126, 128] {
                agree(&text, depth_max, &mut scratch)
                    .map_err(|e| e.to_string())
                    .expect("agree");
            }
        }
    }
}

mod events_read_in_place_agree_with_the_syntax_machine {
    //! A `.json` reader reads an event that lies whole in its buffer in place; one
    //! that does not (here: every event, the input coming a byte at a time) is
    //! stepped through by the syntax machine and parsed after. Both ways must give
    //! the same records and the same end, details and places included.

    use super::direct_agrees_with_the_tree::event_text;
    use super::*;
    use proptest::prelude::*;

    /// A `BufRead` that hands out at most `step` bytes at a time.
    struct Trickle<'a> {
        bytes: &'a [u8],
        step: usize,
    }

    impl std::io::Read for Trickle<'_> {
        fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
            let n = out.len().min(self.step).min(self.bytes.len());
            out[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes = &self.bytes[n..];
            Ok(n)
        }
    }

    impl BufRead for Trickle<'_> {
        fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
            Ok(&self.bytes[..self.step.min(self.bytes.len())])
        }
        fn consume(&mut self, n: usize) {
            self.bytes = &self.bytes[n..];
        }
    }

    /// Everything a reader gives: its records, then its header or rejection.
    fn read(input: impl BufRead, limits: Limits) -> (Vec<Record>, Result<Header, Rejection>) {
        let mut reader = BatchReader::new(Format::Json, input, limits);
        let mut records = Vec::new();
        loop {
            match reader.next_record() {
                Ok(Some(record)) => records.push(record),
                Ok(None) => return (records, Ok(reader.header())),
                Err(ReadError::Rejected(rejection)) => return (records, Err(rejection)),
                Err(ReadError::Io(error)) => panic!("io error from a slice: {error}"),
            }
        }
    }

    fn agree(text: &str, limits: Limits) -> Result<(), TestCaseError> {
        let whole = read(text.as_bytes(), limits);
        let trickled = read(
            Trickle {
                bytes: text.as_bytes(),
                step: 1,
            },
            limits,
        );
        prop_assert_eq!(whole, trickled, "text {:?}", text);
        Ok(())
    }

    fn batch() -> impl Strategy<Value = String> {
        let element = prop_oneof![
            4 => event_text(),
            1 => prop::sample::select(vec!["7", "[{}]", "\"x\"", "{\"a\":\"\\ud800\"}", "{\"a\":1 x}",
                "{\"a\":\"\u{e9}\"}", "{\"a\":[1,]}"]).prop_map(str::to_owned),
        ];
        let space = prop::sample::select(vec!["", " ", "\n", "\r\n  ", "\t"]);
        (prop::collection::vec((element, space), 0..6), any::<bool>()).prop_map(
            |(events, count)| {
                let events: Vec<String> = events
                    .into_iter()
                    .map(|(e, s)| format!("{s}{e}{s}"))
                    .collect();
                let count = if count {
                    format!(",\"event_count\":{}", events.len())
                } else {
                    String::new()
                };
                format!(
                    "{{\"batch_id\":\"b\",\n\"events\":[{}]{count}}}\n",
                    events.join(",")
                )
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        #[test]
        fn on_batches(text in batch(), max in prop::sample::select(vec![60usize, 150, 16 << 20])) {
            agree(&text, limit(max))?;
            // And cut short anywhere: still arriving the same way.
            let cut = text.len() / 2;
            if text.is_char_boundary(cut) {
                agree(&text[..cut], Limits::default())?;
            }
        }
    }

    #[test]
    fn on_examples() {
        for text in [
            RICH_JSON,
            &format!("{{\"events\":[{E1},\n{E2},{{\"x\":\"\u{1f600}\"}}]}}\n  x"),
        ] {
            agree(text, Limits::default())
                .map_err(|e| e.to_string())
                .expect("agree");
        }
    }
}
