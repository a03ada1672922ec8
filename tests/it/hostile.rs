//! Hostile files through the real daemon, one after another: a billion-laughs XML
//! (a DOCTYPE of nested entities), a 200 MiB `.xml` of one text node, a 200 MiB
//! `.csv` whose one row is one quoted cell, a CSV row with the wrong number of
//! cells, a bad slot; a valid file after each still goes in, and the daemon's
//! memory stays flat (peak RSS at most 128 MiB). And a `.xml`, a `.xml.gz` and a
//! `.csv` cut short wait in incoming/ while young, then are `truncated`, while a
//! valid file dropped after them goes in.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use crate::faults::peak_rss_bytes;
use crate::support::{Daemon, Site, gzip, query};

/// How much the big files hold: far over `--event-bytes-max` (16 MiB by default)
/// and over what the daemon may hold in memory.
const BIG: u64 = 200 << 20;

/// An AIDX notification of one leg of flight `number` of BA with its actual off
/// blocks: one event, `BA{number:04}-20261201-LHR`.
fn aidx(number: u32) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<IATA_AIDX_FlightLegNotifRQ xmlns="http://www.iata.org/IATA/2007/00"
    TimeStamp="2026-12-01T12:00:00Z" Version="16.1">
  <FlightLeg>
    <LegIdentifier>
      <Airline>BA</Airline>
      <FlightNumber>{number}</FlightNumber>
      <DepartureAirport>LHR</DepartureAirport>
      <ArrivalAirport>JFK</ArrivalAirport>
      <OriginDate>2026-12-01</OriginDate>
    </LegIdentifier>
    <LegData>
      <OperationTime OperationQualifier="OFB" TimeType="ACT">2026-12-01T10:05:00Z</OperationTime>
    </LegData>
  </FlightLeg>
</IATA_AIDX_FlightLegNotifRQ>
"#
    )
}

/// The header of the CSV files here: event rows with a slot and a payload column.
const CSV_HEADER: &str = "flight_id,event_kind,instant_utc,slot,payload.note\n";

/// One valid event row of flight `flight`.
fn csv_row(flight: &str) -> String {
    format!("{flight}-20261201,off_blocks,2026-12-01T10:05:00Z,1,fine\n")
}

/// A `.csv` batch of one valid event row.
fn csv(flight: &str) -> String {
    format!("{CSV_HEADER}{}", csv_row(flight))
}

/// The billion laughs: ten levels of entities, each ten of the one below, whose
/// expansion would be 10^9 `lol`s (3 GB).
fn billion_laughs() -> String {
    let mut doctype = String::from("<!DOCTYPE lolz [\n  <!ENTITY lol \"lol\">\n");
    for level in 1..=9 {
        let below = if level == 1 {
            "lol".to_owned()
        } else {
            format!("lol{}", level - 1)
        };
        let refs = format!("&{below};").repeat(10);
        doctype.push_str(&format!("  <!ENTITY lol{level} \"{refs}\">\n"));
    }
    doctype.push_str("]>\n");
    format!("<?xml version=\"1.0\"?>\n{doctype}<lolz>&lol9;</lolz>\n")
}

/// Drops `head`, `count` bytes of `fill`, then `tail` as `name`, written a MiB at a
/// time under a temp name and then renamed, as an upload does: the test never holds
/// the file.
fn drop_big(site: &Site, name: &str, head: &str, fill: u8, count: u64, tail: &str) {
    let temp = site.incoming().join(format!(".{name}.tmp"));
    let mut file = std::io::BufWriter::new(fs::File::create(&temp).expect("create"));
    file.write_all(head.as_bytes()).expect("write");
    let block = vec![fill; 1 << 20];
    let mut left = count;
    while left > 0 {
        let n = left.min(block.len() as u64) as usize;
        file.write_all(&block[..n]).expect("write");
        left -= n as u64;
    }
    file.write_all(tail.as_bytes()).expect("write");
    file.into_inner().expect("flush").sync_all().expect("sync");
    fs::rename(&temp, site.incoming().join(name)).expect("rename into incoming/");
}

/// The reason code in rejected/NAME.reason.json.
fn reason(site: &Site, name: &str) -> String {
    reason_and_detail(site, name).0
}

/// The reason code and detail in rejected/NAME.reason.json.
fn reason_and_detail(site: &Site, name: &str) -> (String, String) {
    let path = site.rejected().join(format!("{name}.reason.json"));
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let value: serde_json::Value = serde_json::from_str(&text).expect("reason JSON");
    assert_eq!(value["file"], name, "{text}");
    assert!(
        value["detail"]
            .as_str()
            .is_some_and(|d| !d.trim().is_empty()),
        "{text}"
    );
    let code = value["reason"].as_str().expect("a reason code").to_owned();
    (
        code,
        value["detail"].as_str().unwrap_or_default().to_owned(),
    )
}

fn modified(path: &Path) -> SystemTime {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn is_in(dir: &Path, name: &str) -> bool {
    dir.join(name).exists()
}

/// Waits until `name` has left incoming/ for archive/ (with its reason file if it
/// went to rejected/); returns whether it was archived, and how long it took.
fn settled(daemon: &mut Daemon, site: &Site, name: &str, limit: Duration) -> (bool, Duration) {
    let start = Instant::now();
    let reason_file = format!("{name}.reason.json");
    daemon.wait(limit, &format!("{name} archived or rejected"), || {
        is_in(&site.archive(), name)
            || (is_in(&site.rejected(), name) && is_in(&site.rejected(), &reason_file))
    });
    (is_in(&site.archive(), name), start.elapsed())
}

/// Drops a valid file and waits for it in archive/.
fn goes_in(daemon: &mut Daemon, site: &Site, name: &str, content: &str) {
    site.drop_file(name, content);
    let (archived, _) = settled(daemon, site, name, Duration::from_secs(30));
    assert!(archived, "{name} was rejected: {}", reason(site, name));
}

#[test]
fn hostile_files_cost_only_themselves_and_memory_stays_flat() {
    let site = Site::new();
    let mut daemon = site.spawn(site.run_command().args([
        "--settle",
        "0ms",
        "--file-bytes-max",
        &(1u64 << 30).to_string(),
    ]));
    daemon.wait_serving(&site);

    // The billion laughs: not_xml at its DOCTYPE, nothing expanded.
    site.drop_file("laughs.xml", billion_laughs());
    let (archived, took) = settled(&mut daemon, &site, "laughs.xml", Duration::from_secs(20));
    assert!(!archived, "the billion laughs went in");
    let (code, detail) = reason_and_detail(&site, "laughs.xml");
    assert_eq!(code, "not_xml", "{detail}");
    assert!(detail.contains("DOCTYPE"), "{detail}");
    assert!(took < Duration::from_secs(10), "rejected after {took:?}");
    goes_in(&mut daemon, &site, "after-laughs.xml", &aidx(1));

    // One text node of 200 MiB: a piece of XML over --event-bytes-max.
    drop_big(
        &site,
        "giant-text.xml",
        "<?xml version=\"1.0\"?>\n<IATA_AIDX_FlightLegNotifRQ \
         xmlns=\"http://www.iata.org/IATA/2007/00\" TimeStamp=\"2026-12-01T12:00:00Z\">\
         <Originator>",
        b'x',
        BIG,
        "</Originator></IATA_AIDX_FlightLegNotifRQ>\n",
    );
    let (archived, took) = settled(
        &mut daemon,
        &site,
        "giant-text.xml",
        Duration::from_secs(60),
    );
    assert!(!archived, "a 200 MiB text node went in");
    let (code, detail) = reason_and_detail(&site, "giant-text.xml");
    assert_eq!(code, "too_large", "{detail}");
    assert!(detail.contains("--event-bytes-max"), "{detail}");
    eprintln!("giant-text.xml rejected in {took:?}");
    goes_in(&mut daemon, &site, "after-giant-text.xml", &aidx(2));

    // One row that is one quoted cell of 200 MiB, then a valid row: one too_large
    // event, and the row after it read.
    drop_big(
        &site,
        "giant-cell.csv",
        &format!("{CSV_HEADER}\""),
        b'x',
        BIG,
        &format!("\"\n{}", csv_row("HC1")),
    );
    let (archived, took) = settled(
        &mut daemon,
        &site,
        "giant-cell.csv",
        Duration::from_secs(60),
    );
    assert!(
        archived,
        "giant-cell.csv: {}",
        reason(&site, "giant-cell.csv")
    );
    eprintln!("giant-cell.csv archived in {took:?}");
    goes_in(&mut daemon, &site, "after-giant-cell.csv", &csv("HC2"));

    // A row with a cell too many, and a slot of 65 characters, each beside a valid row.
    site.drop_file(
        "wrong-cells.csv",
        format!(
            "{CSV_HEADER}HC3-20261201,off_blocks,2026-12-01T10:05:00Z,1,fine,extra\n{}",
            csv_row("HC4")
        ),
    );
    let (archived, _) = settled(
        &mut daemon,
        &site,
        "wrong-cells.csv",
        Duration::from_secs(30),
    );
    assert!(
        archived,
        "wrong-cells.csv: {}",
        reason(&site, "wrong-cells.csv")
    );
    goes_in(&mut daemon, &site, "after-wrong-cells.csv", &csv("HC5"));
    site.drop_file(
        "bad-slot.csv",
        format!(
            "{CSV_HEADER}HC6-20261201,off_blocks,2026-12-01T10:05:00Z,{},fine\n{}",
            "s".repeat(65),
            csv_row("HC7")
        ),
    );
    let (archived, _) = settled(&mut daemon, &site, "bad-slot.csv", Duration::from_secs(30));
    assert!(archived, "bad-slot.csv: {}", reason(&site, "bad-slot.csv"));
    goes_in(&mut daemon, &site, "after-bad-slot.csv", &csv("HC8"));

    // Where everything went.
    assert!(site.waiting().is_empty(), "{:?}", site.waiting());
    assert_eq!(
        site.rejected_names(),
        [
            "giant-text.xml",
            "giant-text.xml.reason.json",
            "laughs.xml",
            "laughs.xml.reason.json"
        ]
    );
    assert_eq!(
        site.archived(),
        [
            "after-bad-slot.csv",
            "after-giant-cell.csv",
            "after-giant-text.xml",
            "after-laughs.xml",
            "after-wrong-cells.csv",
            "bad-slot.csv",
            "giant-cell.csv",
            "wrong-cells.csv",
        ]
    );
    assert_eq!(
        query(
            &site.db,
            "SELECT file_name, record_index, reason, length(CAST(raw AS BLOB)) <= 16777216
             FROM quarantine ORDER BY file_name"
        ),
        [
            ["bad-slot.csv", "0", "bad_slot", "1"],
            ["giant-cell.csv", "0", "too_large", "1"],
            ["wrong-cells.csv", "0", "bad_row", "1"],
        ]
    );
    assert_eq!(
        query(
            &site.db,
            "SELECT flight_id FROM duty_event ORDER BY flight_id"
        ),
        [
            ["BA0001-20261201-LHR"],
            ["BA0002-20261201-LHR"],
            ["HC1-20261201"],
            ["HC2-20261201"],
            ["HC4-20261201"],
            ["HC5-20261201"],
            ["HC7-20261201"],
            ["HC8-20261201"],
        ]
    );
    let peak = peak_rss_bytes(daemon.pid());
    eprintln!("peak RSS {} MiB", peak >> 20);
    assert!(
        peak <= 128 << 20,
        "peak RSS {} MiB over 128 MiB",
        peak >> 20
    );
}

#[test]
fn files_cut_short_wait_while_young_then_are_truncated_and_hold_nothing_back() {
    const PARTIAL: Duration = Duration::from_secs(2);
    let site = Site::new();
    let mut daemon =
        site.spawn(
            site.run_command()
                .args(["--settle", "0ms", "--partial-timeout", "2s"]),
        );
    daemon.wait_serving(&site);
    let message = aidx(3);
    let compressed = gzip(aidx(4).as_bytes());
    let cuts = [
        // In the middle of the message, inside the leg.
        ("cut.xml", message.as_bytes()[..message.len() / 2].to_vec()),
        // A gzip stream cut in the middle.
        ("cut.xml.gz", compressed[..compressed.len() / 2].to_vec()),
        // Inside a quoted cell.
        (
            "cut.csv",
            format!("{CSV_HEADER}HC9-20261201,off_blocks,2026-12-01T10:05:00Z,1,\"half")
                .into_bytes(),
        ),
    ];
    for (name, content) in &cuts {
        site.drop_file(name, content);
    }
    let last_written = cuts
        .iter()
        .map(|(name, _)| modified(&site.incoming().join(name)))
        .max()
        .expect("cut files");
    // A valid file dropped after them goes in while they wait.
    goes_in(&mut daemon, &site, "after-cuts.xml", &aidx(5));
    let young = SystemTime::now() < last_written + PARTIAL;
    if young {
        assert_eq!(
            site.waiting(),
            ["cut.csv", "cut.xml", "cut.xml.gz"],
            "young cut files are still arriving"
        );
    }
    eprintln!("cut files seen waiting while young: {young}");
    // Each is rejected once it has not changed for --partial-timeout, by the
    // daemon's own clock (rejected_at in its reason file).
    for (name, _) in &cuts {
        let (archived, _) = settled(&mut daemon, &site, name, Duration::from_secs(30));
        assert!(!archived, "{name} went in");
        assert_eq!(reason(&site, name), "truncated", "{name}");
        let text = fs::read_to_string(site.rejected().join(format!("{name}.reason.json")))
            .expect("reason file");
        let value: serde_json::Value = serde_json::from_str(&text).expect("reason JSON");
        let rejected_at: jiff::Timestamp = value["rejected_at"]
            .as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("rejected_at in {text}"));
        let written = jiff::Timestamp::try_from(modified(&site.rejected().join(name)))
            .expect("an mtime jiff can hold");
        let waited = rejected_at.duration_since(written);
        // rejected_at is in whole milliseconds.
        assert!(
            waited
                >= jiff::SignedDuration::try_from(PARTIAL).expect("2 s")
                    - jiff::SignedDuration::from_millis(1),
            "{name} was rejected {waited:?} after it was last written: {text}"
        );
    }
    assert_eq!(site.archived(), ["after-cuts.xml"]);
    assert!(site.waiting().is_empty(), "{:?}", site.waiting());
    assert_eq!(
        query(&site.db, "SELECT flight_id FROM duty_event"),
        [["BA0005-20261201-LHR"]]
    );
}
