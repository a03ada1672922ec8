//! Section A: the queries analysts run, on a large database, each timed warm
//! through rusqlite (the SQLite bundled with spoolite) and through the system's
//! `sqlite3` command-line shell opened `-readonly`, with its `EXPLAIN QUERY PLAN`,
//! and on PostgreSQL (the same rows, `copy-db`'d) through the `postgres` crate.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

use rusqlite::{Connection, OpenFlags};

use crate::BenchResult;

/// The pages whose `sql` blocks are timed as written: the README and the analysts'
/// guide, each by the name its rows carry.
const PAGES: [(&str, &str); 2] = [
    ("README", include_str!("../../README.md")),
    ("docs/analysing.md", include_str!("../../docs/analysing.md")),
];

/// Timed runs of a query after its warm-up run (the issue's median of 5), and of
/// one whose warm-up took over `VERY_SLOW_S` (a target missed tenfold: a full pass
/// over 10M rows can take a minute on a busy machine, on each engine).
const RUNS: usize = 5;
const VERY_SLOW_RUNS: usize = 1;
const VERY_SLOW_S: f64 = 10.0;

/// What the shell prints after each statement, so that its end can be seen.
const SENTINEL: &str = "@@spoolite-bench-done@@";

/// What a query's plan must show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanCheck {
    /// Nothing: the time alone is judged.
    Any,
    /// The rows are looked up through an index (SEARCH, no SCAN).
    Search,
    /// The rows come in the index's order: SEARCH, and no TEMP B-TREE for the
    /// ORDER BY.
    IndexOrder,
}

/// How a query is run on PostgreSQL.
#[derive(Debug, Clone)]
pub enum Pg {
    /// The same text.
    Same,
    /// PostgreSQL's form of it (`json_extract(p, '$.tail')` is `p::jsonb ->> 'tail'`).
    Form(String),
    /// Not run there, and why.
    NotRun(&'static str),
}

/// One query of the section.
#[derive(Debug, Clone)]
pub struct Query {
    pub name: String,
    pub sql: String,
    /// At most this many seconds; `None`: the plan alone is judged (or nothing).
    pub target_s: Option<f64>,
    pub check: PlanCheck,
    pub pg: Pg,
}

impl Query {
    /// The text PostgreSQL runs, if it runs one.
    pub fn pg_sql(&self) -> Option<&str> {
        match &self.pg {
            Pg::Same => Some(&self.sql),
            Pg::Form(sql) => Some(sql),
            Pg::NotRun(_) => None,
        }
    }

    /// Whether `plan` (SQLite's) shows what the query's check asks for.
    pub fn plan_ok(&self, plan: &[String]) -> bool {
        match self.check {
            PlanCheck::Any => true,
            PlanCheck::Search => searches(plan),
            PlanCheck::IndexOrder => {
                searches(plan) && !plan.iter().any(|step| step.contains("TEMP B-TREE"))
            }
        }
    }

    /// The target as the table shows it.
    pub fn target_text(&self) -> String {
        let plan = match self.check {
            PlanCheck::Any => None,
            PlanCheck::Search => Some("SEARCH"),
            PlanCheck::IndexOrder => Some("SEARCH in index order (no TEMP B-TREE)"),
        };
        let time = self
            .target_s
            .map(|limit| format!("≤ {}", crate::table::seconds(limit)));
        [plan.map(str::to_owned), time]
            .into_iter()
            .flatten()
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Values taken from the database so that every query finds rows.
#[derive(Debug, Clone)]
pub struct Samples {
    pub month: String,
    pub next_month: String,
    pub flight_id: String,
    pub key_hex: String,
}

impl Samples {
    /// The month and flight of the middle flight, the key of the middle row.
    pub fn take(conn: &Connection) -> BenchResult<Samples> {
        let (month, next_month, flight_id): (String, String, String) = conn.query_row(
            "SELECT substr(off_blocks_utc, 1, 7) || '-01',
                    date(substr(off_blocks_utc, 1, 7) || '-01', '+1 month'), flight_id
             FROM spoolite_flight
             WHERE off_blocks_utc IS NOT NULL AND ref >= (SELECT max(ref) / 2 FROM spoolite_flight)
             ORDER BY ref LIMIT 1",
            [],
            |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
        )?;
        let key_hex = conn.query_row(
            "SELECT lower(hex(key)) FROM spoolite_event
             WHERE rowid >= (SELECT max(rowid) / 2 FROM spoolite_event) ORDER BY rowid LIMIT 1",
            [],
            |row| row.get(0),
        )?;
        Ok(Samples {
            month,
            next_month,
            flight_id,
            key_hex,
        })
    }
}

/// The block hours query of the issue, with `tail` read by `tail` (SQLite's
/// `json_extract` or PostgreSQL's `->>`).
fn block_hours(s: &Samples, tail: &str) -> String {
    format!(
        "SELECT {tail} AS tail, round(sum(f.block_minutes) / 60, 1) AS block_hours \
         FROM flight_times AS f JOIN duty_event AS d ON d.flight_id = f.flight_id \
         AND d.event_kind = 'off_blocks' AND d.instant_utc = f.off_blocks_utc \
         WHERE f.off_blocks_utc >= '{}' AND f.off_blocks_utc < '{}' GROUP BY tail",
        s.month, s.next_month
    )
}

/// The same join written as the analysts' guide (docs/analysing.md) writes it: the
/// month's off-blocks events, each joined to its flight (every SQLite here plans the
/// month as one range of the live off-blocks events' index; with the month on
/// `f.off_blocks_utc` the bundled SQLite keeps only its lower bound).
fn block_hours_from_events(s: &Samples, tail: &str) -> String {
    format!(
        "SELECT {tail} AS tail, round(sum(f.block_minutes) / 60, 1) AS block_hours \
         FROM duty_event AS d JOIN flight_times AS f ON f.flight_id = d.flight_id \
         AND f.off_blocks_utc = d.instant_utc \
         WHERE d.event_kind = 'off_blocks' AND d.instant_utc >= '{}' AND d.instant_utc < '{}' \
         GROUP BY tail",
        s.month, s.next_month
    )
}

/// Datasette's facet SQL on `event_kind`, over `from`.
fn facet(from: &str) -> String {
    format!(
        "SELECT event_kind AS value, count(*) AS count FROM {from} \
         WHERE event_kind IS NOT NULL GROUP BY event_kind ORDER BY count DESC, value LIMIT 31"
    )
}

/// The issue's queries, each written the plain way with its target, then every
/// statement of the `sql` blocks of the README and the analysts' guide (≤ 1 s each).
pub fn queries(s: &Samples) -> Vec<Query> {
    let q = |name: &str, sql: String, target_s: Option<f64>, check: PlanCheck| Query {
        name: name.to_owned(),
        sql,
        target_s,
        check,
        pg: Pg::Same,
    };
    let month = &s.month[..7];
    let range = format!(
        "instant_utc >= '{}' AND instant_utc < '{}'",
        s.month, s.next_month
    );
    let mut all = vec![
        q(
            "count(*) of duty_event",
            "SELECT count(*) FROM duty_event".to_owned(),
            Some(1.0),
            PlanCheck::Any,
        ),
        q(
            "count(*) of duty_event_all",
            "SELECT count(*) FROM duty_event_all".to_owned(),
            Some(1.0),
            PlanCheck::Any,
        ),
        q(
            "duty_event GROUP BY event_kind",
            "SELECT event_kind, count(*) FROM duty_event GROUP BY event_kind".to_owned(),
            Some(1.0),
            PlanCheck::Any,
        ),
        Query {
            // PostgreSQL before 16 wants a name for the subquery.
            pg: Pg::Form(facet("(SELECT * FROM duty_event) AS t")),
            ..q(
                "Datasette's facet SQL on event_kind",
                facet("(SELECT * FROM duty_event)"),
                Some(1.0),
                PlanCheck::Any,
            )
        },
        q(
            &format!("landings per day of {month}, a plain instant_utc range"),
            format!(
                "SELECT substr(instant_utc, 1, 10) AS day, count(*) FROM duty_event \
                 WHERE event_kind = 'landing' AND {range} GROUP BY day"
            ),
            Some(0.200),
            PlanCheck::Search,
        ),
        q(
            &format!("landings of {month} ORDER BY instant_utc LIMIT 101"),
            format!(
                "SELECT * FROM duty_event WHERE event_kind = 'landing' AND {range} \
                 ORDER BY instant_utc LIMIT 101"
            ),
            None,
            PlanCheck::IndexOrder,
        ),
        Query {
            pg: Pg::Form(block_hours(s, "d.payload::jsonb ->> 'tail'")),
            ..q(
                &format!("block hours per tail in {month}, the plain join"),
                block_hours(s, "json_extract(d.payload, '$.tail')"),
                Some(1.0),
                PlanCheck::Any,
            )
        },
        Query {
            pg: Pg::Form(block_hours_from_events(s, "d.payload::jsonb ->> 'tail'")),
            ..q(
                &format!("block hours per tail in {month}, the guide's join"),
                block_hours_from_events(s, "json_extract(d.payload, '$.tail')"),
                Some(1.0),
                PlanCheck::Any,
            )
        },
        q(
            "duty_event ORDER BY updated_at DESC LIMIT 101",
            "SELECT * FROM duty_event ORDER BY updated_at DESC LIMIT 101".to_owned(),
            Some(0.100),
            PlanCheck::Any,
        ),
        q(
            "duty_event ORDER BY change_seq DESC LIMIT 101",
            "SELECT * FROM duty_event ORDER BY change_seq DESC LIMIT 101".to_owned(),
            Some(0.100),
            PlanCheck::Any,
        ),
        q(
            "one flight's events",
            format!(
                "SELECT * FROM duty_event WHERE flight_id = '{}'",
                s.flight_id
            ),
            Some(0.010),
            PlanCheck::Any,
        ),
        q(
            "a row by key (idempotency_key, 64 lowercase hex)",
            format!(
                "SELECT * FROM duty_event WHERE idempotency_key = '{}'",
                s.key_hex
            ),
            Some(0.005),
            PlanCheck::Search,
        ),
    ];
    for (page, n, sql) in page_statements() {
        let title = sql
            .lines()
            .next()
            .and_then(|line| line.trim().strip_prefix("--"))
            .map(|t| t.trim().trim_end_matches('.').to_owned())
            .unwrap_or_else(|| format!("statement {}", n + 1));
        all.push(Query {
            pg: Pg::NotRun("the README and the analysts' guide show SQLite's SQL"),
            ..q(&format!("{page}: {title}"), sql, Some(1.0), PlanCheck::Any)
        });
    }
    all
}

/// The statements of the `sql` blocks of `PAGES`, in order: (page, the statement's
/// number on its page from 0, statement). A statement an earlier one already gave
/// (the same SQL once its comment lines are left out) is timed once, under the
/// first page's name.
fn page_statements() -> Vec<(&'static str, usize, String)> {
    statements_of(&PAGES)
}

/// `page_statements` of `pages`.
fn statements_of(pages: &[(&'static str, &str)]) -> Vec<(&'static str, usize, String)> {
    let mut statements = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for &(page, text) in pages {
        for (n, sql) in sql_statements(text).into_iter().enumerate() {
            if seen.insert(without_comments(&sql)) {
                statements.push((page, n, sql));
            }
        }
    }
    statements
}

/// The statements of the `sql` blocks of `text`, split as the docs test splits
/// them (at `;` ending a line).
fn sql_statements(text: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut rest = text;
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

/// `sql` without its whole-line comments, its words separated by single spaces.
fn without_comments(sql: &str) -> String {
    sql.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ")
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

/// `sql` on PostgreSQL with the server's defaults, as `psql` runs it (the simple
/// query protocol, every value as text): one warm-up run, then the median of the
/// timed runs; its `EXPLAIN` plan.
pub fn time_pg(client: &mut postgres::Client, sql: &str) -> BenchResult<Timed> {
    let started = Instant::now();
    run_pg(client, sql)?;
    let runs = runs_after(started.elapsed().as_secs_f64());
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs {
        let started = Instant::now();
        run_pg(client, sql)?;
        times.push(started.elapsed().as_secs_f64());
    }
    Ok(Timed {
        median_s: crate::table::median(&times),
        runs,
        plan: plan_pg(client, sql)?,
    })
}

/// Runs `sql` and reads every value of every row; returns the rows.
fn run_pg(client: &mut postgres::Client, sql: &str) -> BenchResult<u64> {
    let mut rows = 0u64;
    let mut bytes = 0usize;
    for message in client.simple_query(sql).map_err(pg_error)? {
        if let postgres::SimpleQueryMessage::Row(row) = message {
            for i in 0..row.len() {
                bytes += row.get(i).map_or(1, str::len);
            }
            rows += 1;
        }
    }
    std::hint::black_box(bytes);
    Ok(rows)
}

/// The `EXPLAIN` of `sql`, one line per plan node (costs left out), indented by
/// depth.
fn plan_pg(client: &mut postgres::Client, sql: &str) -> BenchResult<Vec<String>> {
    let mut lines = Vec::new();
    for message in client
        .simple_query(&format!("EXPLAIN (COSTS OFF) {sql}"))
        .map_err(pg_error)?
    {
        if let postgres::SimpleQueryMessage::Row(row) = message {
            let line = row.get(0).unwrap_or("");
            let step = line.trim_start().trim_start_matches("->").trim();
            let depth = line.find("->").map_or(0, |at| at / 6 + 1);
            // Node lines only: the conditions below each node make the line long.
            if line.contains("->") || lines.is_empty() {
                lines.push(format!("{}{step}", "  ".repeat(depth)));
            }
        }
    }
    Ok(lines)
}

/// The server's message, not the client's "db error".
fn pg_error(error: postgres::Error) -> String {
    match error.as_db_error() {
        Some(db) => format!("PostgreSQL: {}: {}", db.code().code(), db.message()),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Samples {
        Samples {
            month: "2026-11-01".into(),
            next_month: "2026-12-01".into(),
            flight_id: "BA0117-20261129".into(),
            key_hex: "ab".repeat(32),
        }
    }

    fn plan(steps: &[&str]) -> Vec<String> {
        steps.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn index_order_asks_for_a_search_and_no_temp_b_tree() {
        let all = queries(&samples());
        let ordered = all
            .iter()
            .find(|q| q.check == PlanCheck::IndexOrder)
            .expect("the ORDER BY instant_utc query");
        assert!(ordered.plan_ok(&plan(&[
            "SEARCH e USING INDEX spoolite_event_kind_instant (event_kind=? AND instant_utc>?)"
        ])));
        assert!(!ordered.plan_ok(&plan(&[
            "SEARCH e USING INDEX spoolite_event_kind_instant (event_kind=?)",
            "USE TEMP B-TREE FOR ORDER BY"
        ])));
        assert!(!ordered.plan_ok(&plan(&["SCAN e"])));
        assert_eq!(
            ordered.target_text(),
            "SEARCH in index order (no TEMP B-TREE)"
        );
    }

    #[test]
    fn the_issue_queries_are_written_plainly_with_their_targets() {
        let all = queries(&samples());
        let find = |start: &str| {
            all.iter()
                .find(|q| q.sql.starts_with(start))
                .unwrap_or_else(|| panic!("no query starting {start:?}"))
        };
        assert_eq!(
            find("SELECT count(*) FROM duty_event_all").target_s,
            Some(1.0)
        );
        let landings = find("SELECT substr(instant_utc, 1, 10) AS day");
        assert_eq!(landings.target_s, Some(0.2));
        assert_eq!(landings.check, PlanCheck::Search);
        assert!(
            landings.sql.contains(
                "instant_utc >= '2026-11-01' AND instant_utc < '2026-12-01' GROUP BY day"
            )
        );
        let join = find("SELECT json_extract(d.payload, '$.tail')");
        assert!(
            join.sql
                .contains("FROM flight_times AS f JOIN duty_event AS d")
        );
        assert!(
            join.pg_sql()
                .is_some_and(|sql| sql.starts_with("SELECT d.payload::jsonb ->> 'tail' AS tail"))
        );
        let facet = find("SELECT event_kind AS value");
        assert!(facet.sql.contains("FROM (SELECT * FROM duty_event) WHERE"));
        assert!(
            facet
                .pg_sql()
                .is_some_and(|sql| sql.contains(") AS t WHERE"))
        );
        let of_a_page = |q: &Query| PAGES.iter().any(|(page, _)| q.name.starts_with(page));
        for q in &all {
            assert!(!q.sql.contains("CROSS JOIN") || of_a_page(q));
            assert!(!q.sql.contains("INDEXED BY"), "{}", q.name);
        }
        // Every statement of the README and the analysts' guide is timed, once, on
        // SQLite only.
        let timed: Vec<&Query> = all.iter().filter(|q| of_a_page(q)).collect();
        assert_eq!(timed.len(), page_statements().len());
        assert!(timed.iter().all(|q| q.pg_sql().is_none()), "{timed:?}");
        for (page, text) in PAGES {
            let written = sql_statements(text);
            assert!(
                written.iter().all(|sql| {
                    let sql = without_comments(sql);
                    timed.iter().any(|q| without_comments(&q.sql) == sql)
                }),
                "{page}: a statement is not timed"
            );
        }
        assert!(
            !sql_statements(PAGES[1].1).is_empty(),
            "the analysts' guide has SQL"
        );
    }

    #[test]
    fn a_statement_two_pages_give_is_timed_once_under_the_first() {
        let first = "Intro.\n\n```sql\n-- Each kind.\n\
                     SELECT event_kind, count(*) FROM duty_event GROUP BY event_kind;\n```\n";
        let second = "```sql\n-- Counts.\nSELECT count(*) FROM duty_event;\n\
                      SELECT event_kind, count(*)\n  FROM duty_event GROUP BY event_kind;\n```\n\
                      \n```console\n$ spoolite status\n```\n";
        assert_eq!(
            statements_of(&[("first", first), ("second", second)]),
            [
                (
                    "first",
                    0,
                    "-- Each kind.\nSELECT event_kind, count(*) FROM duty_event GROUP BY event_kind"
                        .to_owned()
                ),
                (
                    "second",
                    0,
                    "-- Counts.\nSELECT count(*) FROM duty_event".to_owned()
                ),
            ]
        );
        let statements = page_statements();
        for (i, (page, _, sql)) in statements.iter().enumerate() {
            assert!(
                statements[..i]
                    .iter()
                    .all(|(_, _, earlier)| without_comments(earlier) != without_comments(sql)),
                "{page}: timed twice: {sql}"
            );
        }
    }
}
