//! gzip batches (`NAME.EXT.gz`), through the real binary: the content is the
//! decompressed bytes, every member in order, under the rules of EXT; the digest
//! is the file's own bytes; a stream that is not gzip or is corrupt is `bad_gzip`,
//! one cut short is still arriving, and content over `--file-bytes-max` is
//! `too_large` with memory flat.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use crate::support::{
    EVENT_COLUMNS, Site, dump, event, gzip, ingest_command, ingest_json, json_batch, parse_lines,
    query, rejected_whole, sha256_hex, write,
};

/// Three events of two flights, one of them invalid, as NDJSON lines.
fn lines() -> String {
    [
        event(
            "GZ1-20261201",
            "off_blocks",
            "2026-12-01T10:00:00Z",
            None,
            "{}",
        ),
        event(
            "GZ1-20261201",
            "on_blocks",
            "2026-12-01T11:30:00Z",
            None,
            "{}",
        ),
        event("GZ2-20261201", "takeoff", "2026-12-01T08:00:00", None, "{}"),
    ]
    .map(|line| line + "\n")
    .concat()
}

/// The database's event, quarantine and flight rows after ingesting `files` into
/// a new one: what a delivery leaves, whatever the files were called.
fn rows_after(files: &[(&str, &[u8])]) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let paths: Vec<_> = files
        .iter()
        .map(|(name, content)| write(dir.path(), name, content))
        .collect();
    let paths: Vec<&Path> = paths.iter().map(|p| p.as_path()).collect();
    let (code, lines) = ingest_json(&db, &paths);
    assert_eq!(code, 0, "{lines:?}");
    vec![
        dump(&db, "duty_event_all", EVENT_COLUMNS),
        dump(
            &db,
            "quarantine",
            &["record_index", "reason", "detail", "raw"],
        ),
        dump(&db, "flight_times", &[]),
    ]
}

#[test]
fn a_gzip_batch_leaves_what_its_content_leaves_and_is_known_by_its_own_bytes() {
    let ndjson = lines();
    let json = json_batch(&[
        event(
            "GZ3-20261201",
            "landing",
            "2026-12-01T12:00:00Z",
            Some(2),
            "{}",
        ),
        event(
            "GZ3-20261201",
            "off_blocks",
            "2026-12-01T09:00:00Z",
            None,
            "{}",
        ),
    ]);
    let plain = rows_after(&[("a.ndjson", ndjson.as_bytes()), ("b.json", json.as_bytes())]);
    assert_eq!(
        plain[1].len(),
        1,
        "the bad instant is quarantined: {plain:?}"
    );
    // The same content gzipped, in any case of extension, and as two members.
    let (first, second) = ndjson.split_at(ndjson.find('\n').expect("a line") + 1);
    let members = [gzip(first.as_bytes()), gzip(second.as_bytes())].concat();
    assert_eq!(
        rows_after(&[
            ("a.ndjson.gz", &gzip(ndjson.as_bytes())),
            ("b.JSON.GZ", &gzip(json.as_bytes())),
        ]),
        plain
    );
    assert_eq!(
        rows_after(&[
            ("a.jsonl.gz", &members),
            ("b.json.gz", &gzip(json.as_bytes()))
        ]),
        plain
    );

    // No limit at all (the largest --file-bytes-max) is a limit like any other.
    let dir = tempfile::tempdir().expect("temp dir");
    let gz = write(dir.path(), "a.ndjson.gz", gzip(ndjson.as_bytes()));
    let output = ingest_command(&dir.path().join("spoolite.db"))
        .args(["--json", "--file-bytes-max", &u64::MAX.to_string()])
        .arg(&gz)
        .output()
        .expect("run");
    let lines = parse_lines(&output);
    assert_eq!(output.status.code(), Some(0), "{lines:?}");
    assert_eq!(lines[0]["outcome"], "processed");

    // The inbox knows the file by its own bytes: dropped again it is a duplicate,
    // and its plain content is a batch of its own whose events are unchanged.
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("spoolite.db");
    let gz = write(dir.path(), "a.ndjson.gz", gzip(ndjson.as_bytes()));
    let again = write(dir.path(), "again.ndjson.gz", fs::read(&gz).expect("read"));
    let unzipped = write(dir.path(), "a.ndjson", &ndjson);
    let (code, lines) = ingest_json(&db, &[&gz, &again, &unzipped]);
    assert_eq!(code, 0, "{lines:?}");
    let outcomes: Vec<_> = lines
        .iter()
        .map(|l| {
            (
                l["outcome"].clone(),
                l["sha256"].clone(),
                l["unchanged"].clone(),
            )
        })
        .collect();
    let gz_digest = sha256_hex(fs::read(&gz).expect("read"));
    assert_eq!(
        outcomes,
        [
            ("processed".into(), gz_digest.clone().into(), 0.into()),
            (
                "skipped_duplicate".into(),
                gz_digest.clone().into(),
                serde_json::Value::Null
            ),
            ("processed".into(), sha256_hex(&ndjson).into(), 2.into()),
        ]
    );
    assert_eq!(
        query(
            &db,
            "SELECT file_name, batch_digest FROM ingest_inbox ORDER BY file_name"
        ),
        [
            ["a.ndjson".to_owned(), sha256_hex(&ndjson)],
            ["a.ndjson.gz".to_owned(), gz_digest],
        ]
    );
}

/// Ingests `content` as `name` with `options` and asserts it is rejected for
/// `reason` (with a detail holding `detail`), leaving no trace.
fn rejected(site: &Path, name: &str, content: &[u8], options: &[&str], reason: &str, detail: &str) {
    let path = write(site, name, content);
    let line = rejected_whole(&site.join("spoolite.db"), &path, content, options, reason);
    let said = line["detail"].as_str().unwrap_or_default();
    assert!(said.contains(detail), "{name}: {said}");
}

#[test]
fn a_broken_gzip_file_is_rejected_with_a_reason_that_says_what_to_do() {
    let dir = tempfile::tempdir().expect("temp dir");
    let site = dir.path();
    let good = gzip(lines().as_bytes());
    // A database to leave untouched.
    let seed = write(site, "seed.ndjson", lines());
    assert_eq!(ingest_json(&site.join("spoolite.db"), &[&seed]).0, 0);

    let mut crc = good.clone();
    let at = crc.len() - 6;
    crc[at] ^= 0xff;
    // The first deflate block's type set to 3, which no stream uses.
    let mut data = good.clone();
    data[10] |= 0b110;
    let fix = "compress the batch again";
    rejected(
        site,
        "plain.ndjson.gz",
        b"{\"not\": \"gzip\"}\n",
        &[],
        "bad_gzip",
        "1f 8b",
    );
    rejected(site, "crc.ndjson.gz", &crc, &[], "bad_gzip", fix);
    rejected(site, "data.ndjson.gz", &data, &[], "bad_gzip", fix);
    let junk = [good.clone(), b"not another member at all".to_vec()].concat();
    rejected(site, "junk.ndjson.gz", &junk, &[], "bad_gzip", fix);
    // Cut short, or not begun: still arriving, so `ingest` rejects it as truncated.
    let arriving = "it may still be arriving";
    rejected(
        site,
        "cut.ndjson.gz",
        &good[..good.len() - 9],
        &[],
        "truncated",
        arriving,
    );
    rejected(
        site,
        "head.ndjson.gz",
        &good[..1],
        &[],
        "truncated",
        arriving,
    );
    rejected(site, "zero.ndjson.gz", b"", &[], "truncated", arriving);
    // The rules of the content's format, on the decompressed bytes.
    let latin1 = gzip(b"{\"flight_id\":\"GZ\xe9\"}\n");
    rejected(
        site,
        "latin1.ndjson.gz",
        &latin1,
        &[],
        "not_utf8",
        "line 1, byte 17",
    );
    rejected(
        site,
        "nothing.ndjson.gz",
        &gzip(b""),
        &[],
        "empty",
        "no bytes",
    );
    rejected(
        site,
        "prose.json.gz",
        &gzip(b"went off blocks"),
        &[],
        "not_json",
        "",
    );
    // Only a batch format may be gzipped.
    rejected(site, "batch.gz", &good, &[], "unsupported_type", ".gz");
    rejected(site, "batch.txt.gz", &good, &[], "unsupported_type", ".gz");
    rejected(
        site,
        "batch.ndjson.gz.gz",
        &gzip(&good),
        &[],
        "unsupported_type",
        ".gz",
    );
    // Content over the limit, however small the file.
    let limit = ["--file-bytes-max", "1000"];
    let big = gzip(&b"\n".repeat(100_000));
    assert!(big.len() < 1000);
    rejected(
        site,
        "big.ndjson.gz",
        &big,
        &limit,
        "too_large",
        "once decompressed",
    );
}

#[test]
fn a_gzip_file_cut_short_waits_for_the_rest_and_a_bomb_costs_only_itself() {
    const LIMIT: u64 = 256 << 20;
    let site = Site::new();
    let mut daemon = site.spawn(site.run_command().args([
        "--settle",
        "0ms",
        "--partial-timeout",
        "60s",
        "--file-bytes-max",
        &LIMIT.to_string(),
    ]));
    daemon.wait_serving(&site);
    // Uploaded under its final name, the first half first: it waits.
    let whole = gzip(lines().as_bytes());
    let path = site.incoming().join("late.ndjson.gz");
    fs::write(&path, &whole[..whole.len() / 2]).expect("write");
    // A gigabyte of newlines in a file of a megabyte: rejected at the limit, with
    // memory flat, while the cut file (older, so looked at first) waits.
    let mut bomb = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let block = vec![b'\n'; 1 << 20];
    for _ in 0..1024 {
        bomb.write_all(&block).expect("compress");
    }
    let bomb = bomb.finish().expect("compress");
    site.drop_file("bomb.ndjson.gz", &bomb);
    daemon.wait(Duration::from_secs(60), "the bomb rejected", || {
        site.rejected_names().contains(&"bomb.ndjson.gz".to_owned())
    });
    assert_eq!(site.waiting(), ["late.ndjson.gz"]);
    // The rest arrives: the file goes in whole.
    fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .and_then(|mut file| file.write_all(&whole[whole.len() / 2..]))
        .expect("append");
    daemon.wait(Duration::from_secs(30), "late.ndjson.gz archived", || {
        site.archived() == ["late.ndjson.gz"]
    });
    assert_eq!(query(&site.db, "SELECT count(*) FROM duty_event"), [["2"]]);
    let reason = fs::read_to_string(site.rejected().join("bomb.ndjson.gz.reason.json"))
        .expect("reason file");
    assert!(reason.contains("\"too_large\""), "{reason}");
    let peak = crate::faults::peak_rss_bytes(daemon.pid());
    assert!(
        peak <= 128 << 20,
        "peak RSS {} MiB over 128 MiB",
        peak >> 20
    );
}

#[test]
fn every_sample_batch_in_packaging_examples_goes_in() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/examples");
    let mut samples: Vec<_> = fs::read_dir(&examples)
        .expect("list packaging/examples")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| spoolite::batch::Format::from_name(&path.to_string_lossy()).is_some())
        .collect();
    samples.sort();
    assert!(
        samples.iter().any(|p| p.to_string_lossy().ends_with(".gz")),
        "a gzip sample: {samples:?}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let paths: Vec<&Path> = samples.iter().map(|p| p.as_path()).collect();
    let (code, lines) = ingest_json(&dir.path().join("spoolite.db"), &paths);
    assert_eq!(code, 0, "{lines:?}");
    for line in &lines {
        assert_eq!(line["outcome"], "processed", "{line}");
        assert_eq!(line["invalid"], 0, "{line}");
    }
}
