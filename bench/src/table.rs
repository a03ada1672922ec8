//! The results table: one row per figure with its baseline, the ratio between them,
//! the target and PASS/MISS; plus the number formats the rows use.

use std::fmt::Write;

/// A target of the issue, on a ratio or a size.
#[derive(Debug, Clone, Copy)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    fn verdict(self, value: f64) -> &'static str {
        let met = match self {
            Target::AtMost(limit) => value <= limit,
            Target::AtLeast(limit) => value >= limit,
        };
        if met { "PASS" } else { "MISS" }
    }
}

/// A floor a figure is held against: the same events written by the least that
/// does the job, in `seconds`.
#[derive(Debug, Clone, Copy)]
pub struct Floor<'a> {
    pub seconds: f64,
    pub events: u64,
    /// The most the figure may take, in times the floor's time.
    pub limit: f64,
    /// What the baseline cell calls it: `psql COPY floor`.
    pub baseline: &'a str,
    /// What the ratio calls it: `the psql floor`.
    pub ratio: &'a str,
}

/// One line of the table.
#[derive(Debug, Clone, Default)]
pub struct Row {
    pub section: String,
    pub measure: String,
    pub value: String,
    pub baseline: String,
    pub ratio: String,
    pub target: String,
    pub result: String,
}

impl Row {
    /// A figure with nothing to compare against.
    pub fn info(section: &str, measure: &str, value: String, baseline: String) -> Row {
        Row {
            section: section.to_owned(),
            measure: measure.to_owned(),
            value,
            baseline,
            ..Row::default()
        }
    }

    /// Adds the compared value as shown, and the target it is held against.
    pub fn judged(
        mut self,
        compared: f64,
        shown: String,
        target: Target,
        target_text: &str,
    ) -> Row {
        self.ratio = shown;
        self.target = target_text.to_owned();
        self.result = target.verdict(compared).to_owned();
        self
    }

    /// Adds `ratio` as so many times `what` (`1.23× what`), held against `target`.
    pub fn times(self, ratio: f64, what: &str, target: Target, target_text: &str) -> Row {
        self.judged(ratio, format!("{ratio:.2}× {what}"), target, target_text)
    }

    /// A figure of `seconds` held against `floor`: the floor's time and rate as the
    /// baseline (`psql COPY floor 1.50 s = 2,000 ev/s`), the figure as so many times
    /// the floor's time, at most `floor.limit`.
    pub fn against_floor(
        section: &str,
        measure: &str,
        value: String,
        seconds: f64,
        floor: &Floor,
        target_text: &str,
    ) -> Row {
        let baseline = format!("{} {}", floor.baseline, timed(floor.events, floor.seconds));
        Row::info(section, measure, value, baseline).times(
            seconds / floor.seconds,
            floor.ratio,
            Target::AtMost(floor.limit),
            target_text,
        )
    }

    /// A row for a figure that could not be measured.
    pub fn skipped(section: &str, measure: &str, why: String) -> Row {
        Row {
            section: section.to_owned(),
            measure: measure.to_owned(),
            value: format!("not measured: {why}"),
            result: "SKIP".to_owned(),
            ..Row::default()
        }
    }
}

/// The rows as a Markdown table.
pub fn render(rows: &[Row]) -> String {
    let mut text = String::from(
        "| # | measure | spoolite | baseline | ratio | target | result |\n\
         |---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        let cells = [
            &row.section,
            &row.measure,
            &row.value,
            &row.baseline,
            &row.ratio,
            &row.target,
            &row.result,
        ];
        let cells: Vec<String> = cells.iter().map(|c| cell(c)).collect();
        // Writing to a String cannot fail.
        let _ = writeln!(text, "| {} |", cells.join(" | "));
    }
    text
}

fn cell(text: &str) -> String {
    if text.is_empty() {
        "—".to_owned()
    } else {
        text.replace('|', "\\|")
    }
}

/// `1,234,567`.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (n, digit) in digits.chars().enumerate() {
        if n > 0 && (digits.len() - n).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// Events per second, rounded.
pub fn rate(events: u64, seconds: f64) -> String {
    format!(
        "{} ev/s",
        thousands((events as f64 / seconds).round() as u64)
    )
}

/// Each of `runs`, as `seconds` shows it, in order, comma-separated.
pub fn seconds_list(runs: &[f64]) -> String {
    runs.iter()
        .map(|&s| seconds(s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Each of `rates` (events per second), rounded, in order, comma-separated:
/// `81,301, 21,774`.
pub fn rates_list(rates: &[f64]) -> String {
    rates
        .iter()
        .map(|r| thousands(r.round() as u64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A time and the events per second it makes: `12.3 s = 81,301 ev/s`.
pub fn timed(events: u64, seconds: f64) -> String {
    format!("{} = {}", self::seconds(seconds), rate(events, seconds))
}

/// Decimal megabytes per second.
pub fn throughput(bytes: u64, seconds: f64) -> String {
    format!("{:.1} MB/s", bytes as f64 / seconds / 1e6)
}

pub fn seconds(value: f64) -> String {
    if value < 1.0 {
        format!("{:.1} ms", value * 1e3)
    } else {
        format!("{value:.2} s")
    }
}

pub fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// An event count as people say it: 100k, 1M, 10M.
pub fn count(events: u64) -> String {
    match events {
        n if n >= 1_000_000 && n.is_multiple_of(1_000_000) => format!("{}M", n / 1_000_000),
        n if n >= 1_000_000 && n.is_multiple_of(100_000) => {
            format!("{}.{}M", n / 1_000_000, n / 100_000 % 10)
        }
        n if n >= 1000 && n.is_multiple_of(1000) => format!("{}k", n / 1000),
        n => thousands(n),
    }
}

/// The median of `values` (the mean of the two middle ones for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match n {
        0 => f64::NAN,
        n if !n.is_multiple_of(2) => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// The nearest-rank percentile `p` (0–100) of `values`.
pub fn percentile(values: &[f64], p: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_shows_the_ratio_against_what_and_judges_it() {
        let row = Row::info("P", "m", String::new(), String::new()).times(
            1.234,
            "the psql floor",
            Target::AtMost(1.5),
            "≤ 1.5× the psql floor",
        );
        assert_eq!(row.ratio, "1.23× the psql floor");
        assert_eq!(row.target, "≤ 1.5× the psql floor");
        assert_eq!(row.result, "PASS");
    }

    #[test]
    fn against_floor_shows_the_floor_timed_and_the_ratio_to_it() {
        let floor = Floor {
            seconds: 1.5,
            events: 3000,
            limit: 1.5,
            baseline: "psql COPY floor",
            ratio: "the psql floor",
        };
        let row = Row::against_floor("P", "m", String::new(), 3.0, &floor, "≤ 1.5×");
        assert_eq!(row.baseline, "psql COPY floor 1.50 s = 2,000 ev/s");
        assert_eq!(row.ratio, "2.00× the psql floor");
        assert_eq!(row.result, "MISS");
    }
}
