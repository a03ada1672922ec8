//! Section F's files: the same flights' movements written as a site sends them in
//! each format, so that the formats' ingest rates compare on equal events. Each
//! flight gives four events (off-blocks, takeoff, landing, on-blocks):
//!
//! - `formats-plain.ndjson`: NDJSON without a slot (the baseline);
//! - `formats-slotted.ndjson`: the same with `"slot":"1"` on every event;
//! - `formats.csv`: one CSV flight row per flight, slot 1;
//! - `formats.xml`: one AIDX message, one `FlightLeg` per flight (its slot the
//!   leg's `RepeatNumber`, 1), with an estimated time beside each actual one, as
//!   an airport's messages hold.
//!
//! Streams straight to the files: memory does not grow with the count.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

/// The file names, in the order `write_all` writes them.
pub const NAMES: [&str; 4] = [
    "formats-plain.ndjson",
    "formats-slotted.ndjson",
    "formats.csv",
    "formats.xml",
];

/// One flight's four times, minutes after 2026-01-01T00:00Z spread over a year.
fn times(flight: u64) -> [String; 4] {
    let base = (flight * 7) % (365 * 24 * 60);
    [0, 15, 95, 104].map(|offset| {
        let minutes = base + offset;
        let day = minutes / (24 * 60);
        let (month, day_of_month) = month_day(day);
        format!(
            "2026-{month:02}-{day_of_month:02}T{:02}:{:02}:00Z",
            (minutes / 60) % 24,
            minutes % 60
        )
    })
}

/// The month and day of day `day` (from 0) of 2026.
fn month_day(mut day: u64) -> (u64, u64) {
    const DAYS: [u64; 12] = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    for (month, &length) in DAYS.iter().enumerate() {
        if day < length {
            return (month as u64 + 1, day + 1);
        }
        day -= length;
    }
    (12, 31)
}

/// The flight id of flight `n` as the CSV and NDJSON files name it: the one the
/// AIDX leg gives (airline, number, origin date, departure airport).
fn flight_id(n: u64) -> (String, String, u64, String) {
    let airline = ["BA", "LH", "AF", "KL"][(n % 4) as usize].to_owned();
    let number = 1 + (n / 4) % 9999;
    let date = format!("2026{:02}{:02}", 1 + (n / 40_000) % 12, 1 + (n / 4) % 28);
    let airport = ["LHR", "FRA", "CDG", "AMS", "JFK"][(n % 5) as usize].to_owned();
    let id = format!("{airline}{number:04}-{date}-{airport}");
    (id, airline, number, format!("{date}|{airport}"))
}

const KINDS: [&str; 4] = ["off_blocks", "takeoff", "landing", "on_blocks"];
const QUALIFIERS: [&str; 4] = ["OFB", "TKO", "TDN", "ONB"];

/// Writes the four files of `flights` flights into `dir`; returns their sizes in
/// bytes, in `NAMES` order.
pub fn write_all(dir: &Path, flights: u64) -> std::io::Result<[u64; 4]> {
    let open = |name: &str| File::create(dir.join(name)).map(BufWriter::new);
    let mut plain = open(NAMES[0])?;
    let mut slotted = open(NAMES[1])?;
    let mut csv = open(NAMES[2])?;
    let mut xml = open(NAMES[3])?;
    writeln!(
        csv,
        "flight_id,off_blocks,takeoff,landing,on_blocks,source_revision,slot,payload.tail"
    )?;
    writeln!(
        xml,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <IATA_AIDX_FlightLegNotifRQ xmlns=\"http://www.iata.org/IATA/2007/00\" \
         TimeStamp=\"2026-12-01T12:00:00Z\" Version=\"16.1\">"
    )?;
    for n in 0..flights {
        let (id, airline, number, date_airport) = flight_id(n);
        let (date, airport) = date_airport.split_once('|').expect("a date and an airport");
        let times = times(n);
        let tail = format!("D-A{:03}", n % 1000);
        for (kind, time) in KINDS.iter().zip(&times) {
            let event = format!(
                "{{\"flight_id\":\"{id}\",\"event_kind\":\"{kind}\",\"instant_utc\":\"{time}\",\
                 \"source_revision\":1,\"payload\":{{\"tail\":\"{tail}\"}}"
            );
            writeln!(plain, "{event}}}")?;
            writeln!(slotted, "{event},\"slot\":\"1\"}}")?;
        }
        writeln!(
            csv,
            "{id},{},{},{},{},1,1,{tail}",
            times[0], times[1], times[2], times[3]
        )?;
        write!(
            xml,
            "<FlightLeg><LegIdentifier><Airline>{airline}</Airline>\
             <FlightNumber>{number}</FlightNumber><DepartureAirport>{airport}</DepartureAirport>\
             <ArrivalAirport>XXX</ArrivalAirport>\
             <OriginDate>{}-{}-{}</OriginDate></LegIdentifier><LegData>",
            &date[..4],
            &date[4..6],
            &date[6..]
        )?;
        for (qualifier, time) in QUALIFIERS.iter().zip(&times) {
            write!(
                xml,
                "<OperationTime OperationQualifier=\"{qualifier}\" TimeType=\"EST\">{time}\
                 </OperationTime><OperationTime OperationQualifier=\"{qualifier}\" \
                 TimeType=\"ACT\">{time}</OperationTime>"
            )?;
        }
        writeln!(
            xml,
            "<AircraftInfo><Registration>{tail}</Registration></AircraftInfo></LegData></FlightLeg>"
        )?;
    }
    writeln!(xml, "</IATA_AIDX_FlightLegNotifRQ>")?;
    for out in [&mut plain, &mut slotted, &mut csv, &mut xml] {
        out.flush()?;
    }
    let mut sizes = [0; 4];
    for (size, name) in sizes.iter_mut().zip(NAMES) {
        *size = std::fs::metadata(dir.join(name))?.len();
    }
    Ok(sizes)
}

/// The least time, of `rounds` reads, that spoolite's batch reader takes to read
/// the file at `path` into records (in this process, on one thread, from the page
/// cache): the parse a first ingest does beside its writes.
pub fn read_alone(path: &Path, rounds: u32) -> std::io::Result<f64> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    let format = spoolite::batch::Format::from_name(&name)
        .ok_or_else(|| std::io::Error::other(format!("no batch format for {name}")))?;
    let mut least = f64::INFINITY;
    for _ in 0..rounds.max(1) {
        let started = std::time::Instant::now();
        let input = std::io::BufReader::with_capacity(1 << 20, File::open(path)?);
        let mut reader =
            spoolite::batch::BatchReader::new(format, input, spoolite::batch::Limits::default());
        while reader
            .next_record()
            .map_err(|e| std::io::Error::other(format!("read {name}: {e:?}")))?
            .is_some()
        {}
        least = least.min(started.elapsed().as_secs_f64());
    }
    Ok(least)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flight_ids_parts_make_its_id() {
        let (id, airline, number, date_airport) = flight_id(5);
        assert_eq!(
            id,
            format!("{airline}{number:04}-{}", date_airport.replace('|', "-"))
        );
    }
}
