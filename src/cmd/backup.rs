//! `spoolite backup --to FILE`: a consistent copy of a live SQLite database. The
//! database work is `store::backup`; this is the command around it: FILE refused
//! when it exists, the copy written under a temporary name beside it (what a
//! killed backup left there is replaced), fsynced, renamed into place without
//! replacing anything and its folder fsynced; a progress bar on a terminal, one
//! summary line, the exit code.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use crate::cli::BackupArgs;
use crate::store::Db;
use crate::store::backup::{self, BackupProgress};

/// Exit code for every refusal and error: FILE exists, a PostgreSQL `--db`, the
/// source unreadable, the copy failing its check. Nothing is left at FILE.
const EXIT_ERROR: u8 = 2;

/// What the temporary name adds to FILE's name (after a leading dot).
const TEMP_SUFFIX: &str = ".spoolite-backup-tmp";

/// The files SQLite may keep beside a database (a killed backup's copy has them).
const SIDE_FILES: [&str; 3] = ["-journal", "-wal", "-shm"];

pub fn run(args: &BackupArgs) -> ExitCode {
    match back_up(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("spoolite: {message}");
            ExitCode::from(EXIT_ERROR)
        }
    }
}

fn back_up(args: &BackupArgs) -> Result<(), String> {
    let source = match &args.db {
        Db::Sqlite(path) => path,
        Db::Postgres(target) => {
            return Err(format!(
                "backup copies a SQLite file, and --db {} is a PostgreSQL database: back it up \
                 with the server's own tools, pg_dump (one database, a logical copy) or \
                 pg_basebackup (the whole cluster, with point-in-time recovery from its WAL \
                 archive)",
                target.name()
            ));
        }
    };
    let target = &args.to;
    if target.symlink_metadata().is_ok() {
        return Err(format!(
            "backup to {}: the file exists and is left as it is; a backup never replaces a \
             file: name a new one (e.g. with the date in it) or remove the old one first",
            target.display()
        ));
    }
    let temp = temp_path(target)
        .ok_or_else(|| format!("backup to {}: name a file, not a folder", target.display()))?;
    let folder = folder_of(target);
    if !folder.is_dir() {
        return Err(format!(
            "backup to {}: the folder {} does not exist; create it first",
            target.display(),
            folder.display()
        ));
    }
    remove_leftovers(&temp)?;
    let bar = std::io::stderr().is_terminal().then(progress_bar);
    let report = |progress: BackupProgress| {
        if let Some(bar) = &bar {
            bar.set_length(progress.pages_total * progress.page_bytes);
            bar.set_position(progress.pages_done * progress.page_bytes);
        }
    };
    let started = Instant::now();
    let copied = backup::sqlite_to_file(source, &temp, &report);
    if let Some(bar) = &bar {
        bar.finish_and_clear();
    }
    let placed = copied
        .map_err(|error| error.to_string())
        .and_then(|copied| place(&temp, target).map(|bytes| (copied, bytes)));
    let (copied, bytes) = match placed {
        Ok(placed) => placed,
        Err(message) => {
            // What is left of the copy goes; a removal that fails is left to the
            // next backup, which replaces it.
            let _ = remove_leftovers(&temp);
            return Err(message);
        }
    };
    println!(
        "backed up {} into {}: {} batches, {bytes} bytes ({:.1} MiB, {} pages) in {:.2}s; \
         integrity_check ok",
        source.display(),
        target.display(),
        copied.batches,
        bytes as f64 / (1024.0 * 1024.0),
        copied.pages,
        started.elapsed().as_secs_f64(),
    );
    Ok(())
}

/// `DIR/.NAME.spoolite-backup-tmp` for `DIR/NAME`: hidden, beside FILE (so the
/// rename stays in one file system), and named after it (so a backup to another
/// file does not touch it).
pub(crate) fn temp_path(target: &Path) -> Option<PathBuf> {
    let name = target.file_name()?;
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(TEMP_SUFFIX);
    Some(target.with_file_name(temp))
}

/// Removes the temporary copy a killed backup left, and SQLite's files beside it
/// (a journal left beside a new copy would be rolled back into it).
fn remove_leftovers(temp: &Path) -> Result<(), String> {
    let mut paths = vec![temp.to_owned()];
    for side in SIDE_FILES {
        let mut path = temp.as_os_str().to_owned();
        path.push(side);
        paths.push(PathBuf::from(path));
    }
    for path in paths {
        match std::fs::remove_file(&path) {
            Ok(()) => log::info!(
                "removed {}, left by a backup that did not finish",
                path.display()
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("remove {}: {e}", path.display())),
        }
    }
    Ok(())
}

/// Makes the copy durable and gives it its name: fsync, rename (never over a file
/// that appeared meanwhile), fsync of the folder. Returns its size.
fn place(temp: &Path, target: &Path) -> Result<u64, String> {
    let file = std::fs::File::open(temp).map_err(|e| format!("open {}: {e}", temp.display()))?;
    file.sync_all()
        .map_err(|e| format!("fsync {}: {e}", temp.display()))?;
    let bytes = file
        .metadata()
        .map_err(|e| format!("stat {}: {e}", temp.display()))?
        .len();
    drop(file);
    crate::spool::rename_no_replace(temp, target).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            format!(
                "backup to {}: a file of that name appeared during the copy; it is left as \
                 it is and the copy removed",
                target.display()
            )
        } else {
            format!("rename {} to {}: {e}", temp.display(), target.display())
        }
    })?;
    let folder = folder_of(target);
    crate::spool::sync_dir(folder).map_err(|e| format!("fsync {}: {e}", folder.display()))?;
    Ok(bytes)
}

/// The folder FILE is in (`.` for a bare name).
fn folder_of(target: &Path) -> &Path {
    target
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Bytes copied of the database's.
fn progress_bar() -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(0);
    let style = indicatif::ProgressStyle::with_template(
        "backup [{bar:20}] {binary_bytes}/{binary_total_bytes}  {binary_bytes_per_sec}  {eta} left",
    )
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_temporary_name_is_hidden_beside_the_file() {
        assert_eq!(
            temp_path(Path::new("/var/backups/spoolite-2026-12-02.db")),
            Some(PathBuf::from(
                "/var/backups/.spoolite-2026-12-02.db.spoolite-backup-tmp"
            ))
        );
        assert_eq!(
            temp_path(Path::new("copy.db")),
            Some(PathBuf::from(".copy.db.spoolite-backup-tmp"))
        );
        assert_eq!(temp_path(Path::new("/")), None);
    }
}
