//! How outcomes are told to people and scripts: the one-line text form, the
//! `--json` line of `ingest`, and the `NAME.reason.json` of a rejected file.

use serde_json::{Map, Value, json};

use crate::ingest::Outcome;
use crate::store::Counts;

/// The digest as a line shows it: all 64 hex digits, so that it matches `sha256sum`
/// and `ingest_inbox.batch_digest` as it is; `-` when the file could not be read.
pub(crate) fn digest_text(digest: Option<&str>) -> &str {
    digest.unwrap_or("-")
}

fn counts_text(counts: &Counts) -> String {
    format!(
        "events={} inserted={} updated={} unchanged={} stale={} conflicts={} invalid={}",
        counts.events_total,
        counts.inserted,
        counts.updated,
        counts.unchanged,
        counts.stale,
        counts.conflicts,
        counts.invalid
    )
}

/// `processed a.json 1a2b3c4d…(64 hex) events=3 inserted=3 …`, or
/// `rejected b.json - truncated: the file ends …`.
pub(crate) fn outcome_line(file: &str, outcome: &Outcome) -> String {
    let word = outcome.word();
    let digest = digest_text(outcome.digest());
    match outcome {
        Outcome::Processed { counts, .. } => {
            format!("{word} {file} {digest} {}", counts_text(counts))
        }
        Outcome::SkippedDuplicate { .. } => format!("{word} {file} {digest}"),
        Outcome::Rejected { rejection, .. } => {
            format!(
                "{word} {file} {digest} {}: {}",
                rejection.reason.code(),
                rejection.detail
            )
        }
    }
}

/// The `ingest --json` object: `reason`/`detail` only when rejected, counts only
/// when processed.
pub(crate) fn outcome_json(file: &str, outcome: &Outcome) -> Value {
    let mut object = Map::new();
    object.insert("file".into(), json!(file));
    object.insert("outcome".into(), json!(outcome.word()));
    object.insert("sha256".into(), json!(outcome.digest()));
    match outcome {
        Outcome::Processed { counts, .. } => {
            if let Value::Object(counts) = json!(counts) {
                object.extend(counts);
            }
        }
        Outcome::SkippedDuplicate { .. } => {}
        Outcome::Rejected { rejection, .. } => {
            object.insert("reason".into(), json!(rejection.reason.code()));
            object.insert("detail".into(), json!(rejection.detail));
        }
    }
    Value::Object(object)
}

/// The content of `NAME.reason.json` for a file dropped as `file`.
pub(crate) fn reason_json(file: &str, outcome: &Outcome, rejected_at: &str) -> String {
    let Outcome::Rejected { digest, rejection } = outcome else {
        unreachable!("only rejected files get a reason file")
    };
    let value = json!({
        "file": file,
        "sha256": digest,
        "reason": rejection.reason.code(),
        "detail": rejection.detail,
        "rejected_at": rejected_at,
    });
    let mut text = serde_json::to_string_pretty(&value).expect("a JSON value serialises");
    text.push('\n');
    text
}
