//! Reading whole batch files from bytes: one `check` line per case.

use super::*;

/// The records of a file as (index, key-or-reason), and its header.
type ReadAll = Result<(Vec<(u64, String)>, Header), (RejectReason, String)>;

/// What a file reads as: the records (index, and the event's key or the invalid
/// reason), then the header or the rejection code.
fn read_all(format: Format, bytes: &[u8]) -> ReadAll {
    let mut reader = BatchReader::new(format, bytes, Limits::default());
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
        ("", Truncated),
        ("   ", Truncated),
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
    assert_eq!(Format::from_name("a.csv"), None);
    assert_eq!(Format::from_name("json"), None);
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

/// Reader throughput, by hand (no timed assertion): reads the file named by
/// `SPOOLITE_PARSE_FILE` (write one with `spoolite-bench __generate FILE`) and prints
/// events per second. `SPOOLITE_PARSE_FILE=/tmp/b.json cargo test --release --lib
/// parse_speed -- --ignored --nocapture`
#[test]
#[ignore]
fn parse_speed() {
    let Ok(path) = std::env::var("SPOOLITE_PARSE_FILE") else {
        return;
    };
    let format = Format::from_name(&path).expect("a .json or .ndjson file");
    for _ in 0..3 {
        let file = std::fs::File::open(&path).expect("open");
        let input = std::io::BufReader::with_capacity(64 * 1024, file);
        let started = std::time::Instant::now();
        let mut reader = BatchReader::new(format, input, Limits::default());
        let mut events = 0u64;
        while let Some(record) = reader.next_record().expect("a good file") {
            events += u64::from(record.event.is_ok());
        }
        let seconds = started.elapsed().as_secs_f64();
        println!(
            "{path}: {events} events in {seconds:.2} s ({:.0} events/s)",
            events as f64 / seconds
        );
    }
}
