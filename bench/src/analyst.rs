//! Section A: the queries analysts run, on a large database, each timed warm
//! through rusqlite (the SQLite bundled with spoolite) and through the system's
//! `sqlite3` command-line shell opened `-readonly`, with its `EXPLAIN QUERY PLAN`.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags};

use crate::BenchResult;

/// The README, whose `sql` blocks are timed as written.
const README: &str = include_str!("../../README.md");

/// Timed runs of a query after its warm-up run; of one whose warm-up took over
/// `SLOW_S`; of one whose warm-up took over `VERY_SLOW_S` (a full pass over 11M
/// rows can take a minute on a busy machine, on each engine).
const RUNS: usize = 5;
const SLOW_RUNS: usize = 3;
const SLOW_S: f64 = 1.0;
const VERY_SLOW_RUNS: usize = 1;
const VERY_SLOW_S: f64 = 10.0;

/// What the shell prints after each statement, so that its end can be seen.
const SENTINEL: &str = "@@spoolite-bench-done@@";

/// One query of the section.
#[derive(Debug, Clone)]
pub struct Query {
    pub name: String,
    pub sql: String,
    /// At most this many seconds; `None`: reported only.
    pub target_s: Option<f64>,
    /// The plan must look the row up through an index (SEARCH, no SCAN).
    pub needs_search: bool,
}

/// Values taken from the database so that every query finds rows.
#[derive(Debug, Clone)]
pub struct Samples {
    pub day: String,
    pub next_day: String,
    pub month: String,
    pub next_month: String,
    pub flight_id: String,
    pub key_hex: String,
    pub batch_digest: String,
}

impl Samples {
    /// The day, month and flight of the middle flight, the key of the middle row,
    /// the last batch ingested.
    pub fn take(conn: &Connection) -> BenchResult<Samples> {
        let (day, next_day, month, next_month, flight_id): (
            String,
            String,
            String,
            String,
            String,
        ) = conn.query_row(
            "SELECT substr(off_blocks_utc, 1, 10), date(substr(off_blocks_utc, 1, 10), '+1 day'),
                        substr(off_blocks_utc, 1, 7) || '-01',
                        date(substr(off_blocks_utc, 1, 7) || '-01', '+1 month'), flight_id
                 FROM spoolite_flight
                 WHERE off_blocks_utc IS NOT NULL AND ref >= (SELECT max(ref) / 2 FROM spoolite_flight)
                 ORDER BY ref LIMIT 1",
            [],
            |row| {
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    row.get(4)?,
                ))
            },
        )?;
        let key_hex = conn.query_row(
            "SELECT lower(hex(key)) FROM spoolite_event
             WHERE rowid >= (SELECT max(rowid) / 2 FROM spoolite_event) ORDER BY rowid LIMIT 1",
            [],
            |row| row.get(0),
        )?;
        let batch_digest = conn.query_row(
            "SELECT batch_digest FROM ingest_inbox ORDER BY batch_ref DESC LIMIT 1",
            [],
            |row| row.get(0),
        )?;
        Ok(Samples {
            day,
            next_day,
            month,
            next_month,
            flight_id,
            key_hex,
            batch_digest,
        })
    }
}

/// Every query of the section, the README's included.
pub fn queries(s: &Samples) -> Vec<Query> {
    let q = |name: &str, sql: String, target_s: Option<f64>| Query {
        name: name.to_owned(),
        sql,
        target_s,
        needs_search: false,
    };
    let mut all = vec![
        q(
            &format!("flight_times, one day of off_blocks_utc ({})", s.day),
            format!(
                "SELECT * FROM flight_times WHERE off_blocks_utc >= '{}' AND off_blocks_utc < '{}'",
                s.day, s.next_day
            ),
            Some(0.050),
        ),
        q(
            "flight_times, one flight",
            format!(
                "SELECT * FROM flight_times WHERE flight_id = '{}'",
                s.flight_id
            ),
            Some(0.005),
        ),
        q(
            "flight_times, the whole view streamed",
            "SELECT * FROM flight_times".to_owned(),
            Some(10.0),
        ),
        q(
            &format!("block minutes per day over a month ({})", &s.month[..7]),
            format!(
                "SELECT substr(off_blocks_utc, 1, 10) AS day, round(sum(block_minutes)) AS block_minutes, \
                 count(*) AS flights FROM flight_times \
                 WHERE off_blocks_utc >= '{}' AND off_blocks_utc < '{}' GROUP BY day ORDER BY day",
                s.month, s.next_month
            ),
            Some(0.200),
        ),
    ];
    for (n, sql) in readme_statements().into_iter().enumerate() {
        let title = sql
            .lines()
            .next()
            .and_then(|line| line.trim().strip_prefix("--"))
            .map(|t| t.trim().trim_end_matches('.').to_owned())
            .unwrap_or_else(|| {
                if sql.contains("k.key = x'") {
                    "a row by its key".to_owned()
                } else {
                    format!("statement {}", n + 1)
                }
            });
        all.push(q(&format!("README: {title}"), sql, Some(1.0)));
    }
    all.push(Query {
        needs_search: true,
        ..q(
            "duty_event by idempotency_key (64 lowercase hex)",
            format!(
                "SELECT * FROM duty_event WHERE idempotency_key = '{}'",
                s.key_hex
            ),
            Some(0.005),
        )
    });
    all.push(q(
        "latest changes",
        "SELECT * FROM duty_event_all ORDER BY change_seq DESC LIMIT 10".to_owned(),
        Some(0.010),
    ));
    all.push(q(
        "batch_summary for one file",
        format!(
            "SELECT * FROM batch_summary WHERE batch_digest = '{}'",
            s.batch_digest
        ),
        Some(0.010),
    ));
    all.push(q(
        "count(*) of duty_event",
        "SELECT count(*) FROM duty_event".to_owned(),
        None,
    ));
    all.push(q(
        "duty_event by event_kind",
        "SELECT event_kind, count(*) FROM duty_event GROUP BY event_kind".to_owned(),
        None,
    ));
    all
}

/// The statements of the README's `sql` blocks, split as the README test splits
/// them (at `;` ending a line).
pub fn readme_statements() -> Vec<String> {
    let mut statements = Vec::new();
    let mut rest = README;
    while let Some(start) = rest.find("```sql\n") {
        let block = &rest[start + "```sql\n".len()..];
        let Some(end) = block.find("```") else { break };
        statements.extend(
            block[..end]
                .split(";\n")
                .map(|sql| sql.trim().trim_end_matches(';').trim())
                .filter(|sql| !sql.is_empty())
                .map(str::to_owned),
        );
        rest = &block[end + 3..];
    }
    statements
}

/// One query timed on one engine.
#[derive(Debug, Clone)]
pub struct Timed {
    pub median_s: f64,
    pub runs: usize,
    pub plan: Vec<String>,
}

/// Opens `db` read-only with SQLite's defaults, as an analyst's program would.
pub fn open(db: &Path) -> BenchResult<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Ok(Connection::open_with_flags(db, flags)?)
}

/// Prepares and steps `sql` to its end, reading every column of every row; returns
/// the rows.
fn run_once(conn: &Connection, sql: &str) -> BenchResult<u64> {
    let mut statement = conn.prepare(sql)?;
    let columns = statement.column_count();
    let mut rows = statement.query([])?;
    let mut count = 0u64;
    let mut bytes = 0usize;
    while let Some(row) = rows.next()? {
        for i in 0..columns {
            bytes += match row.get_ref(i)? {
                rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => t.len(),
                _ => 1,
            };
        }
        count += 1;
    }
    std::hint::black_box(bytes);
    Ok(count)
}

/// `sql` through rusqlite: one warm-up run, then the median of the timed runs; the
/// rows it returns; its plan.
pub fn time_rusqlite(conn: &Connection, sql: &str) -> BenchResult<(Timed, u64)> {
    let started = Instant::now();
    let rows = run_once(conn, sql)?;
    let runs = runs_after(started.elapsed().as_secs_f64());
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        run_once(conn, sql)?;
        times.push(started.elapsed().as_secs_f64());
    }
    Ok((
        Timed {
            median_s: crate::table::median(&times),
            runs,
            plan: plan_rusqlite(conn, sql)?,
        },
        rows,
    ))
}

fn runs_after(warm_up_s: f64) -> usize {
    if warm_up_s > VERY_SLOW_S {
        VERY_SLOW_RUNS
    } else if warm_up_s > SLOW_S {
        SLOW_RUNS
    } else {
        RUNS
    }
}

/// The `EXPLAIN QUERY PLAN` of `sql`, one line per step, indented by depth.
fn plan_rusqlite(conn: &Connection, sql: &str) -> BenchResult<Vec<String>> {
    let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
    let steps: Vec<(i64, i64, String)> = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(3)?)))?
        .collect::<Result<_, _>>()?;
    let mut depth: HashMap<i64, usize> = HashMap::new();
    let mut lines = Vec::new();
    for (id, parent, detail) in steps {
        let d = depth.get(&parent).map_or(0, |d| d + 1);
        depth.insert(id, d);
        lines.push(format!("{}{detail}", "  ".repeat(d)));
    }
    Ok(lines)
}

/// The system's `sqlite3` shell on the database, kept open across the queries
/// (warm, like an analyst's session); its errors go to a file.
pub struct Shell {
    child: Child,
    input: BufWriter<ChildStdin>,
    output: BufReader<ChildStdout>,
    pub version: String,
}

impl Shell {
    pub fn open(db: &Path, errors: &Path) -> BenchResult<Shell> {
        let version = Command::new("sqlite3")
            .arg("--version")
            .output()
            .map_err(|e| format!("no sqlite3 shell: {e}"))?;
        let version = String::from_utf8_lossy(&version.stdout)
            .split_whitespace()
            .next()
            .unwrap_or("?")
            .to_owned();
        let mut child = Command::new("sqlite3")
            .arg("-readonly")
            .arg(db)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(File::create(errors)?)
            .spawn()
            .map_err(|e| format!("start sqlite3: {e}"))?;
        let input = BufWriter::new(child.stdin.take().ok_or("sqlite3 has no stdin")?);
        let output = BufReader::new(child.stdout.take().ok_or("sqlite3 has no stdout")?);
        Ok(Shell {
            child,
            input,
            output,
            version,
        })
    }

    /// Sends `commands`, then the sentinel; returns what the shell printed before it.
    fn exchange(&mut self, commands: &str) -> BenchResult<Vec<String>> {
        write!(
            self.input,
            "{commands}\n.output stdout\n.print {SENTINEL}\n"
        )?;
        self.input.flush()?;
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            if self.output.read_line(&mut line)? == 0 {
                return Err("sqlite3 ended before the statement did".into());
            }
            let line = line.trim_end();
            if line == SENTINEL {
                return Ok(lines);
            }
            lines.push(line.to_owned());
        }
    }

    /// `sql` with its output to /dev/null: one warm-up run, then the median of the
    /// timed runs (each from sending it to reading the sentinel after it); its plan.
    pub fn time(&mut self, sql: &str) -> BenchResult<Timed> {
        let statement = format!(".output /dev/null\n{sql};");
        let started = Instant::now();
        self.exchange(&statement)?;
        let runs = runs_after(started.elapsed().as_secs_f64());
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let started = Instant::now();
            self.exchange(&statement)?;
            times.push(started.elapsed().as_secs_f64());
        }
        let plan = self
            .exchange(&format!(".output stdout\nEXPLAIN QUERY PLAN {sql};"))?
            .into_iter()
            .filter(|line| line != "QUERY PLAN")
            .map(|line| {
                let depth = line.find(|c: char| c.is_alphabetic()).unwrap_or(0) / 3;
                let step = line.trim_start_matches(['|', '`', '-', ' ']);
                format!("{}{step}", "  ".repeat(depth.saturating_sub(1)))
            })
            .collect();
        Ok(Timed {
            median_s: crate::table::median(&times),
            runs,
            plan,
        })
    }

    pub fn close(mut self) -> BenchResult<()> {
        writeln!(self.input, ".quit")?;
        self.input.flush()?;
        drop(self.input);
        let status = self.child.wait()?;
        if !status.success() {
            return Err(format!("sqlite3 exited with {status}").into());
        }
        Ok(())
    }
}

/// Whether the plan looks rows up through an index and scans nothing.
pub fn searches(plan: &[String]) -> bool {
    plan.iter()
        .any(|step| step.trim_start().starts_with("SEARCH"))
        && !plan
            .iter()
            .any(|step| step.trim_start().starts_with("SCAN"))
}

/// The plan on one line.
pub fn one_line(plan: &[String]) -> String {
    plan.iter()
        .map(|step| step.trim())
        .collect::<Vec<_>>()
        .join(" · ")
}
