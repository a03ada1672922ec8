//! The peer: `sqlite-utils upsert --pk idempotency_key`, the tool analysts reach for,
//! installed in a throwaway venv and fed the same rows with their keys precomputed.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rusqlite::Connection;

use crate::BenchResult;
use crate::child::{self, Measured};

/// Schema 1, the naive layout both spoolite and the peer started from: the peer
/// writes into the same table definition, indexes included.
const SCHEMA: &str = include_str!("../../schema/0001_initial.sql");

/// Creates (or reuses) `OUT/venv` with sqlite-utils; returns its `sqlite-utils`
/// executable, or why there is none.
pub fn install(out: &Path) -> Result<PathBuf, String> {
    let venv = out.join("venv");
    let exe = venv.join("bin").join("sqlite-utils");
    if exe.exists() {
        return Ok(exe);
    }
    let log = out.join("venv-install.log");
    run_logged(
        Command::new("python3").arg("-m").arg("venv").arg(&venv),
        &log,
    )
    .map_err(|e| format!("python3 -m venv failed ({e}); see {}", log.display()))?;
    let pip = venv.join("bin").join("pip");
    run_logged(
        Command::new(&pip).args(["install", "--disable-pip-version-check", "sqlite-utils"]),
        &log,
    )
    .map_err(|e| {
        format!(
            "pip install sqlite-utils failed ({e}); see {}",
            log.display()
        )
    })?;
    Ok(exe)
}

/// The installed version, for the report.
pub fn version(exe: &Path) -> String {
    Command::new(exe)
        .arg("--version")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "sqlite-utils (version unknown)".into())
}

fn run_logged(command: &mut Command, log: &Path) -> BenchResult<()> {
    let file = File::options().create(true).append(true).open(log)?;
    let status = command
        .stdout(Stdio::from(file.try_clone()?))
        .stderr(Stdio::from(file))
        .status()?;
    if !status.success() {
        return Err(format!("{status}").into());
    }
    Ok(())
}

/// A database with schema 1 and the file-level settings spoolite uses (16 KiB
/// pages, WAL); per-connection settings are sqlite-utils' own.
pub fn create_db(path: &Path) -> BenchResult<()> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "page_size", 16384)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.execute_batch(SCHEMA)?;
    Ok(())
}

/// Times `sqlite-utils upsert DB duty_event ROWS --nl --pk idempotency_key`.
pub fn upsert(exe: &Path, db: &Path, rows: &Path) -> BenchResult<Measured> {
    let mut command = Command::new(exe);
    command
        .arg("upsert")
        .arg(db)
        .arg("duty_event")
        .arg(rows)
        .args(["--nl", "--pk", "idempotency_key"]);
    child::measure(command)
}

/// Rows in the peer's `duty_event`.
pub fn rows_in(db: &Path) -> BenchResult<u64> {
    let conn = Connection::open(db)?;
    let rows: i64 = conn.query_row("SELECT count(*) FROM duty_event", [], |row| row.get(0))?;
    Ok(u64::try_from(rows)?)
}
