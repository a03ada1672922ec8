//! What a running daemon tells `spoolite status` that only it knows: when it first
//! saw the oldest file waiting in incoming/ (an upload may carry an old modification
//! time, so that is no measure of waiting) and whether the database is failing, since
//! when. Written into the daemon's own folder of the spool, `SPOOL/.spoolite/state.json`
//! (temp → fsync → rename), when a figure changes and at most once a second. The
//! folder is the daemon's because the spool root may not be: on a packaged host it
//! belongs to root, as the SFTP account's chroot.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The daemon's folder in the spool root.
pub(crate) const STATE_DIR: &str = ".spoolite";
/// Name of the state file in that folder.
pub(crate) const STATE_FILE: &str = "state.json";

/// Where the state file of the spool at `root` lies.
pub(crate) fn path(root: &Path) -> std::path::PathBuf {
    root.join(STATE_DIR).join(STATE_FILE)
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DaemonState {
    /// The daemon that wrote this.
    pub(crate) pid: u32,
    /// When the daemon started serving the spool.
    pub(crate) since: String,
    /// When this was written.
    pub(crate) written_at: String,
    /// Regular files in incoming/ at the daemon's last look, temp-named ones included.
    pub(crate) files_waiting: u64,
    /// When the daemon first saw the file that has waited longest, if any waits.
    pub(crate) oldest_waiting_seen_at: Option<String>,
    /// The database has failed every try since `since`.
    pub(crate) database_fault: Option<DatabaseFault>,
    /// The files of incoming/ the daemon has seen longest, oldest first, at most
    /// `WAITING_KEPT_MAX`: read back at the next start, so that their ages and
    /// `--partial-timeout` go on across a restart, and named by `status`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) waiting: Vec<WaitingFile>,
    /// The files archived within the last `--partial-timeout`, watched for a
    /// writer that writes on (the newest `ARCHIVED_KEPT_MAX`): the next daemon
    /// watches them for what is left of their time.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) archived_watched: Vec<ArchivedFile>,
}

/// At most this many watched archived files are kept in the state file: the
/// newest. A restart ends the watch of older ones.
pub(crate) const ARCHIVED_KEPT_MAX: usize = 1000;

/// An archived file under watch, as the daemon saw it when it was read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ArchivedFile {
    /// Its name in archive/ (a name that is not UTF-8 is not taken over).
    pub(crate) name: String,
    /// The digest of the bytes committed.
    pub(crate) sha256: String,
    /// When the watch ends.
    pub(crate) until: String,
    /// The file as it was read before its move.
    pub(crate) version: crate::spool::FileIdentity,
}

/// At most this many waiting files are kept in the state file: the oldest, whose
/// ages `status` and the metrics report. A younger file of a larger backlog starts
/// its age again after a restart.
pub(crate) const WAITING_KEPT_MAX: usize = 1000;

/// One file waiting in incoming/, as the daemon saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WaitingFile {
    /// Its name (each byte that is not UTF-8 as U+FFFD).
    pub(crate) name: String,
    /// Why it waits: `temp_name` (never taken under that name), `settling`,
    /// `still_arriving` (its content ends early), `backing_off` (a try failed) or
    /// `ready` (next in line, or held back by a database fault).
    pub(crate) state: String,
    /// When the daemon first saw it.
    pub(crate) first_seen_at: String,
    /// When the daemon last saw it change (settle and `--partial-timeout` count
    /// from here).
    pub(crate) changed_at: String,
    /// The version then seen: a file that changed while no daemon ran has its
    /// settle time begin again.
    pub(crate) version: crate::spool::FileIdentity,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DatabaseFault {
    /// When the first try of the failing run failed.
    pub(crate) since: String,
    /// The latest try's error.
    pub(crate) error: String,
    /// The latest try could not reach the server (PostgreSQL: no connection, or
    /// the connection was lost). Written only when true, so that a fault of a
    /// SQLite file reads as before.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) unreachable: bool,
}

/// Reads the state file of the spool at `root`; `None` when there is none.
pub(crate) fn read(root: &Path) -> io::Result<Option<DaemonState>> {
    match std::fs::read(path(root)) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes the state file of the spool at `root` atomically, making its folder when
/// missing.
pub(crate) fn write(root: &Path, state: &DaemonState) -> io::Result<()> {
    let mut text = serde_json::to_string_pretty(state).map_err(io::Error::other)?;
    text.push('\n');
    let dir = root.join(STATE_DIR);
    if !dir.is_dir() {
        std::fs::create_dir(&dir)?;
    }
    crate::spool::write_atomic(&dir, STATE_FILE, text.as_bytes())
}
