//! `.xml` IATA AIDX batches through the real binary (section *AIDX batches*): a
//! message leaves what the equivalent NDJSON batch leaves; a file that is not XML,
//! or not an AIDX notification, is rejected whole; a leg without its identifiers
//! quarantines each of its actual times; a gzipped message goes in like the plain.

use std::path::Path;

use crate::support::{
    CONTENT_COLUMNS, dump, event, gzip, ingest_json, query, rejected_whole, write,
};

/// The sample message: two legs of BA117A, six actual times.
fn sample() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/aidx/two_legs.xml");
    std::fs::read_to_string(path).expect("read the sample")
}

/// The sample's events as NDJSON: what an ops system would send as JSON for them.
fn sample_as_ndjson() -> String {
    // 2026-12-01T12:00:00Z in milliseconds since 1970.
    let revision = Some(1_796_126_400_000);
    let first = r#"{"arrival_airport":"JFK","departure_airport":"LHR","registration":"G-STBA","repeat_number":"1"}"#;
    let second = r#"{"arrival_airport":"SFO","departure_airport":"JFK","registration":"G-STBA","repeat_number":"1"}"#;
    [
        (
            "BA0117A-20261201-LHR",
            "off_blocks",
            "2026-12-01T10:05:00Z",
            first,
        ),
        (
            "BA0117A-20261201-LHR",
            "takeoff",
            "2026-12-01T10:21:00Z",
            first,
        ),
        (
            "BA0117A-20261201-LHR",
            "landing",
            "2026-12-01T22:40:00Z",
            first,
        ),
        (
            "BA0117A-20261201-LHR",
            "on_blocks",
            "2026-12-01T22:52:00Z",
            first,
        ),
        (
            "BA0117A-20261201-JFK",
            "off_blocks",
            "2026-12-02T00:10:00Z",
            second,
        ),
        (
            "BA0117A-20261201-JFK",
            "takeoff",
            "2026-12-02T00:30:00Z",
            second,
        ),
    ]
    .map(|(flight, kind, instant, payload)| {
        let line = event(flight, kind, instant, revision, payload);
        // The slot, as the AIDX reader gives it.
        let line = line.strip_suffix('}').expect("an object");
        format!("{line},\"slot\":\"1\"}}\n")
    })
    .concat()
}

/// The events and flight times a new database holds after ingesting `name`.
fn rows_after(name: &str, content: &[u8]) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let path = write(dir.path(), name, content);
    let (code, lines) = ingest_json(&db, &[&path]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["outcome"], "processed", "{lines:?}");
    assert_eq!(lines[0]["invalid"], 0, "{lines:?}");
    vec![
        dump(&db, "duty_event_all", CONTENT_COLUMNS),
        dump(&db, "flight_times", &[]),
    ]
}

#[test]
fn an_aidx_message_leaves_what_the_equivalent_ndjson_batch_leaves() {
    let xml = sample();
    let from_xml = rows_after("lhr.xml", xml.as_bytes());
    assert_eq!(from_xml[0].len(), 6, "{from_xml:?}");
    assert_eq!(
        from_xml,
        rows_after("lhr.ndjson", sample_as_ndjson().as_bytes())
    );
    // Gzipped, and with its extension in capitals, the same.
    assert_eq!(rows_after("lhr.XML.gz", &gzip(xml.as_bytes())), from_xml);
}

#[test]
fn a_file_that_is_not_an_aidx_notification_is_rejected_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let seed = write(dir.path(), "seed.xml", sample());
    assert_eq!(ingest_json(&db, &[&seed]).0, 0);
    let cases: [(&str, String, &str, &str); 5] = [
        ("prose.xml", "went off blocks at ten".to_owned(), "not_xml", "not well-formed XML"),
        (
            "dtd.xml",
            sample().replacen("<!--", "<!DOCTYPE x [<!ENTITY a \"b\">]><!--", 1),
            "not_xml",
            "DOCTYPE",
        ),
        (
            "other.xml",
            sample().replace("http://www.iata.org/IATA/2007/00", "urn:example:flights"),
            "bad_shape",
            "urn:example:flights",
        ),
        (
            "failed.xml",
            r#"<IATA_AIDX_FlightLegRS xmlns="http://www.iata.org/IATA/2007/00"><Errors><Error>no</Error></Errors></IATA_AIDX_FlightLegRS>"#.to_owned(),
            "bad_shape",
            "Errors",
        ),
        (
            "cut.xml",
            sample()[..1500].to_owned(),
            "truncated",
            "it may still be arriving",
        ),
    ];
    for (name, content, reason, detail) in cases {
        let path = write(dir.path(), name, &content);
        let line = rejected_whole(&db, &path, content.as_bytes(), &[], reason);
        let said = line["detail"].as_str().unwrap_or_default();
        assert!(said.contains(detail), "{name}: {said}");
    }
}

#[test]
fn a_leg_without_its_airline_quarantines_each_of_its_actual_times() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    // The second leg loses its Airline.
    let xml = sample().replacen(
        "<Airline CodeContext=\"3\">BA</Airline>\n      <FlightNumber>117</FlightNumber>\n      <OperationalSuffix>A</OperationalSuffix>\n      <DepartureAirport CodeContext=\"3\">JFK",
        "<FlightNumber>117</FlightNumber>\n      <OperationalSuffix>A</OperationalSuffix>\n      <DepartureAirport CodeContext=\"3\">JFK",
        1,
    );
    assert_ne!(xml, sample());
    let path = write(dir.path(), "no-airline.xml", &xml);
    let (code, lines) = ingest_json(&db, &[&path]);
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines[0]["inserted"], 4, "{lines:?}");
    assert_eq!(lines[0]["invalid"], 2, "{lines:?}");
    let quarantined = query(
        &db,
        "SELECT record_index, reason, raw FROM quarantine ORDER BY record_index",
    );
    assert_eq!(
        quarantined,
        [
            ["4", "missing_field", "2026-12-01T19:10:00-05:00"],
            ["5", "missing_field", "2026-12-01T19:30:00-05:00"],
        ]
    );
    let detail = query(&db, "SELECT detail FROM quarantine LIMIT 1");
    assert!(detail[0][0].contains("no Airline"), "{detail:?}");
}

/// A message of one leg with actual off-blocks `off` (HH:MM, UTC) at `stamp`.
fn correction(stamp: &str, off: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?>\n\
         <IATA_AIDX_FlightLegNotifRQ xmlns=\"http://www.iata.org/IATA/2007/00\" \
         TimeStamp=\"{stamp}\" Version=\"16.1\">\n\
         <FlightLeg><LegIdentifier><Airline>BA</Airline><FlightNumber>117</FlightNumber>\
         <DepartureAirport>LHR</DepartureAirport><ArrivalAirport>JFK</ArrivalAirport>\
         <OriginDate>2026-12-01</OriginDate></LegIdentifier>\
         <LegData><OperationTime OperationQualifier=\"OFB\" TimeType=\"ACT\">\
         2026-12-01T{off}:00Z</OperationTime></LegData></FlightLeg>\n\
         </IATA_AIDX_FlightLegNotifRQ>\n"
    )
}

#[test]
fn a_later_message_with_a_corrected_actual_time_replaces_the_earlier_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    // Sent out of order: the correction first, the first report after it.
    for (name, stamp, off) in [
        ("b.xml", "2026-12-01T10:20:00Z", "10:07"),
        ("a.xml", "2026-12-01T10:10:00Z", "10:05"),
    ] {
        let path = write(dir.path(), name, correction(stamp, off));
        let (code, lines) = ingest_json(&db, &[&path]);
        assert_eq!(code, 0, "{lines:?}");
        assert_eq!(lines[0]["inserted"], 1, "{lines:?}");
    }
    assert_eq!(
        query(
            &db,
            "SELECT instant_utc, retracted, slot FROM duty_event_all ORDER BY instant_utc"
        ),
        [
            ["2026-12-01T10:05:00Z", "1", "1"],
            ["2026-12-01T10:07:00Z", "0", "1"]
        ]
    );
    assert_eq!(
        query(&db, "SELECT flight_id, off_blocks_utc FROM flight_times"),
        [["BA0117-20261201-LHR", "2026-12-01T10:07:00Z"]]
    );
}
