//! Deterministic batch files for the benchmark: realistic flight duty events made
//! from a fixed seed, so every run and every format holds exactly the same events.
//!
//! Event `i` belongs to flight `i / 6` and is that flight's `i % 6`th kind, so any
//! range of indices can be generated on its own and ranges never share a key.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;

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
const WRITE_BUFFER_BYTES: usize = 1 << 20;

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
struct Generated<'f> {
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

/// splitmix64: small, fast and good enough to vary test data.
struct Random(u64);

impl Random {
    fn new(seed: u64, stream: u64) -> Random {
        Random(seed ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }
}

impl Flight {
    /// Flight number `j`: its id is unique for every `j`, the rest comes from `seed`.
    fn new(seed: u64, j: u64) -> Flight {
        let mut random = Random::new(seed, j);
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

impl Generated<'_> {
    fn crew(&self) -> impl Iterator<Item = u32> + '_ {
        let shift = if self.crew_changed { 1 } else { 0 };
        self.flight.crew.iter().map(move |c| (c + shift) % 100_000)
    }

    fn instant(&self) -> String {
        format_utc(self.flight.instants[self.kind])
    }

    /// The event as a batch file holds it (payload keys in the sender's order).
    fn write_event(&self, out: &mut impl Write) -> io::Result<()> {
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
    fn canonical_payload(&self) -> String {
        let crew: Vec<String> = self.crew().map(|c| format!(r#""C{c:05}""#)).collect();
        format!(
            r#"{{"crew":[{}],"tail":"{}"}}"#,
            crew.join(","),
            self.flight.tail
        )
    }

    /// A flat `duty_event` row with the key computed, for sqlite-utils.
    fn write_row(&self, out: &mut impl Write, digest: &str, now: &str) -> io::Result<()> {
        let instant = self.instant();
        let key =
            spoolite::batch::event::idempotency_key(&self.flight.id, KINDS[self.kind], &instant);
        let payload = serde_json::to_string(&self.canonical_payload()).map_err(io::Error::other)?;
        writeln!(
            out,
            r#"{{"idempotency_key":"{}","flight_id":"{}","event_kind":"{}","instant_utc":"{}","source_revision":{},"payload":{},"batch_digest":"{}","first_seen_at":"{}","updated_at":"{}"}}"#,
            hex::encode(key),
            self.flight.id,
            KINDS[self.kind],
            instant,
            self.revision,
            payload,
            digest,
            now,
            now
        )
    }
}

/// Calls `each` with every event of `spec`, in index order.
fn for_each_event(
    seed: u64,
    spec: &BatchSpec,
    mut each: impl FnMut(&Generated) -> io::Result<()>,
) -> io::Result<()> {
    let mut flight: Option<(u64, Flight)> = None;
    for i in spec.offset..spec.offset + spec.count {
        let j = i / KINDS.len() as u64;
        if flight.as_ref().is_none_or(|(number, _)| *number != j) {
            flight = Some((j, Flight::new(seed, j)));
        }
        let (_, current) = flight.as_ref().expect("the flight was just made");
        each(&Generated {
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

/// Writes the events of `spec` as flat NDJSON rows with their keys, the input
/// sqlite-utils needs to upsert the same rows.
pub fn write_rows_file(
    path: &Path,
    seed: u64,
    spec: &BatchSpec,
    digest: &str,
    now: &str,
) -> io::Result<u64> {
    let mut out = BufWriter::with_capacity(WRITE_BUFFER_BYTES, File::create(path)?);
    for_each_event(seed, spec, |event| event.write_row(&mut out, digest, now))?;
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
