//! Deterministic batch files: realistic flight duty events made from a fixed seed,
//! so every run and every format holds exactly the same events. The benchmark's
//! files are made here (and `spoolite-bench __generate` writes one by hand).
//!
//! Event `i` belongs to flight `i / 6` and is that flight's `i % 6`th kind, so any
//! range of indices can be generated on its own and ranges never share a key.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::Rng;

/// The six event kinds the analyst views understand, in the order a duty has them.
pub const KINDS: [&str; 6] = [
    "duty_start",
    "off_blocks",
    "takeoff",
    "landing",
    "on_blocks",
    "duty_end",
];

/// Airline designators with the registration prefix of their fleet.
const AIRLINES: [(&str, &str); 12] = [
    ("BA", "G-"),
    ("LH", "D-"),
    ("AF", "F-"),
    ("KL", "PH-"),
    ("IB", "EC-"),
    ("AZ", "I-"),
    ("SK", "SE-"),
    ("EI", "EI-"),
    ("LX", "HB-"),
    ("OS", "OE-"),
    ("TP", "CS-"),
    ("AY", "OH-"),
];

/// Flight numbers per airline per day; together with `AIRLINES` this fixes how many
/// flights one day holds: 3,000, about the day of a large airline group, so that
/// the analyst section's "one day" and "one month" are the sizes an ops team
/// queries (10M events are then a year and a half of flights).
const FLIGHT_NUMBERS: u64 = 250;

/// Days from 1970-01-01 to 2026-01-01, the first day flights are generated for.
const FIRST_DAY: i64 = 20454;

/// Write buffer for generated files.
pub const WRITE_BUFFER_BYTES: usize = 1 << 20;

/// Which events a batch holds and in which version.
#[derive(Debug, Clone)]
pub struct BatchSpec {
    /// Index of the first event.
    pub offset: u64,
    pub count: u64,
    pub revision: i64,
    /// A newer version of an event has a different crew.
    pub crew_changed: bool,
    /// Written as the `.json` file's `batch_id`; distinct ids make distinct bytes.
    pub batch_id: String,
}

/// The batch file formats spoolite reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    Json,
    Ndjson,
}

/// One generated event, in canonical form already.
pub struct Event<'f> {
    flight: &'f Flight,
    kind: usize,
    revision: i64,
    crew_changed: bool,
}

/// A flight and its six instants (seconds since the Unix epoch).
struct Flight {
    id: String,
    tail: String,
    crew: Vec<u32>,
    instants: [i64; 6],
}

impl Flight {
    /// Flight number `j`: its id is unique for every `j`, the rest comes from `seed`.
    fn new(seed: u64, j: u64) -> Flight {
        let mut random = Rng::stream(seed, j);
        let airlines = AIRLINES.len() as u64;
        let (designator, prefix) = AIRLINES[(j % airlines) as usize];
        let number = (j / airlines) % FLIGHT_NUMBERS + 1;
        let day = FIRST_DAY + (j / (airlines * FLIGHT_NUMBERS)) as i64;
        let (year, month, date) = civil_from_days(day);
        let id = format!("{designator}{number:04}-{year:04}{month:02}{date:02}");
        let tail = (0..4).fold(prefix.to_owned(), |mut tail, _| {
            tail.push(char::from(b'A' + random.below(26) as u8));
            tail
        });
        let crew = (0..2 + random.below(3))
            .map(|_| random.below(100_000) as u32)
            .collect();
        let off_blocks = day * 86_400 + 300 * random.below(288) as i64;
        let takeoff = off_blocks + 60 * (8 + random.below(18) as i64);
        let landing = takeoff + 60 * (45 + random.below(600) as i64);
        let on_blocks = landing + 60 * (3 + random.below(13) as i64);
        let instants = [
            off_blocks - 3600,
            off_blocks,
            takeoff,
            landing,
            on_blocks,
            on_blocks + 1800,
        ];
        Flight {
            id,
            tail,
            crew,
            instants,
        }
    }
}

impl Event<'_> {
    pub fn flight_id(&self) -> &str {
        &self.flight.id
    }

    /// One of `KINDS`.
    pub fn event_kind(&self) -> &'static str {
        KINDS[self.kind]
    }

    pub fn revision(&self) -> i64 {
        self.revision
    }

    fn crew(&self) -> impl Iterator<Item = u32> + '_ {
        let shift = if self.crew_changed { 1 } else { 0 };
        self.flight.crew.iter().map(move |c| (c + shift) % 100_000)
    }

    /// `instant_utc` in canonical form.
    pub fn instant(&self) -> String {
        format_utc(self.flight.instants[self.kind])
    }

    /// The event as a batch file holds it (payload keys in the sender's order).
    pub fn write_event(&self, out: &mut impl Write) -> io::Result<()> {
        write!(
            out,
            r#"{{"flight_id":"{}","event_kind":"{}","instant_utc":"{}","source_revision":{},"payload":{{"tail":"{}","crew":["#,
            self.flight.id,
            KINDS[self.kind],
            self.instant(),
            self.revision,
            self.flight.tail
        )?;
        for (n, member) in self.crew().enumerate() {
            let comma = if n == 0 { "" } else { "," };
            write!(out, r#"{comma}"C{member:05}""#)?;
        }
        out.write_all(b"]}}")
    }

    /// The payload in spoolite's canonical form: compact, keys sorted.
    pub fn canonical_payload(&self) -> String {
        let crew: Vec<String> = self.crew().map(|c| format!(r#""C{c:05}""#)).collect();
        format!(
            r#"{{"crew":[{}],"tail":"{}"}}"#,
            crew.join(","),
            self.flight.tail
        )
    }
}

/// Calls `each` with every event of `spec`, in index order.
pub fn for_each_event(
    seed: u64,
    spec: &BatchSpec,
    mut each: impl FnMut(&Event) -> io::Result<()>,
) -> io::Result<()> {
    let mut flight: Option<(u64, Flight)> = None;
    for i in spec.offset..spec.offset + spec.count {
        let j = i / KINDS.len() as u64;
        if flight.as_ref().is_none_or(|(number, _)| *number != j) {
            flight = Some((j, Flight::new(seed, j)));
        }
        let (_, current) = flight.as_ref().expect("the flight was just made");
        each(&Event {
            flight: current,
            kind: (i % KINDS.len() as u64) as usize,
            revision: spec.revision,
            crew_changed: spec.crew_changed,
        })?;
    }
    Ok(())
}

/// Writes `spec` as a batch in `layout` to `out`.
pub fn write_batch(
    out: &mut impl Write,
    seed: u64,
    spec: &BatchSpec,
    layout: Layout,
) -> io::Result<()> {
    match layout {
        Layout::Json => {
            write!(
                out,
                r#"{{"batch_id":"{}","event_count":{},"events":["#,
                spec.batch_id, spec.count
            )?;
            let mut first = true;
            for_each_event(seed, spec, |event| {
                out.write_all(if first { b"\n" } else { b",\n" })?;
                first = false;
                event.write_event(out)
            })?;
            out.write_all(b"\n]}\n")
        }
        Layout::Ndjson => for_each_event(seed, spec, |event| {
            event.write_event(out)?;
            out.write_all(b"\n")
        }),
    }
}

/// Writes `spec` as a batch file at `path`; returns its size in bytes.
pub fn write_batch_file(
    path: &Path,
    seed: u64,
    spec: &BatchSpec,
    layout: Layout,
) -> io::Result<u64> {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, File::create(path)?);
    write_batch(&mut out, seed, spec, layout)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(std::fs::metadata(path)?.len())
}

/// `YYYY-MM-DDTHH:MM:SSZ` for seconds since the Unix epoch.
fn format_utc(seconds: i64) -> String {
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    let second_of_day = seconds.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        second_of_day / 3600,
        second_of_day / 60 % 60,
        second_of_day % 60
    )
}

/// The civil date of a day counted from 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * month_index + 2) / 5 + 1) as u32;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(spec: &BatchSpec, layout: Layout) -> String {
        let mut out = Vec::new();
        write_batch(&mut out, 0x5EED_0117, spec, layout).expect("write");
        String::from_utf8(out).expect("UTF-8")
    }

    /// The benchmark's figures are comparable across runs and commits only while
    /// its files hold the same bytes: these are the bench's own seed's.
    #[test]
    fn the_files_are_the_same_on_every_run() {
        let spec = BatchSpec {
            offset: 5,
            count: 3,
            revision: 2,
            crew_changed: false,
            batch_id: "generated-5-3".into(),
        };
        assert_eq!(
            batch(&spec, Layout::Json),
            r#"{"batch_id":"generated-5-3","event_count":3,"events":[
{"flight_id":"BA0001-20260101","event_kind":"duty_end","instant_utc":"2026-01-01T13:38:00Z","source_revision":2,"payload":{"tail":"G-CETV","crew":["C52021","C77924","C15326"]}},
{"flight_id":"LH0001-20260101","event_kind":"duty_start","instant_utc":"2026-01-01T20:50:00Z","source_revision":2,"payload":{"tail":"D-HQPM","crew":["C56882","C11677"]}},
{"flight_id":"LH0001-20260101","event_kind":"off_blocks","instant_utc":"2026-01-01T21:50:00Z","source_revision":2,"payload":{"tail":"D-HQPM","crew":["C56882","C11677"]}}
]}
"#
        );
        let ndjson = batch(&spec, Layout::Ndjson);
        assert_eq!(ndjson.lines().count(), 3);
        assert!(batch(&spec, Layout::Json).contains(ndjson.lines().next().expect("a line")));
    }

    #[test]
    fn a_newer_version_changes_the_crew_and_the_canonical_payload_sorts_keys() {
        let spec = BatchSpec {
            offset: 0,
            count: 1,
            revision: 1,
            crew_changed: true,
            batch_id: String::new(),
        };
        let mut seen = Vec::new();
        for_each_event(0x5EED_0117, &spec, |event| {
            seen.push((
                event.flight_id().to_owned(),
                event.event_kind(),
                event.instant(),
                event.canonical_payload(),
            ));
            Ok(())
        })
        .expect("generate");
        assert_eq!(
            seen,
            [(
                "BA0001-20260101".to_owned(),
                "duty_start",
                "2026-01-01T06:10:00Z".to_owned(),
                r#"{"crew":["C52022","C77925","C15327"],"tail":"G-CETV"}"#.to_owned()
            )]
        );
    }
}
