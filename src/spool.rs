//! The spool directory: its three folders, the lock that keeps one daemon per spool,
//! listing what waits in incoming/, and moving a file to archive/ or rejected/ by
//! rename, never overwriting, with the directories fsynced after.
//!
//! Names never stop a file: a name need not be UTF-8, a name taken gets a counter
//! before its extension, and a name too long for the filesystem (with its counter,
//! or with `.reason.json` beside it in rejected/) is cut to fit. A file is moved
//! only while it is still the file that was read (`FileIdentity`).

use std::ffi::{CString, OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::names;

/// Name of the lock file in the spool root.
pub(crate) const LOCK_FILE: &str = "spoolite.lock";

/// Suffix of the reason file written beside a rejected file.
pub(crate) const REASON_SUFFIX: &str = ".reason.json";

#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    #[error("create spool folder {path}: {source}")]
    Create { path: PathBuf, source: io::Error },
    #[error(
        "spool folders {a} and {b} lie on different filesystems; a move must be an atomic \
         rename, so put incoming/, archive/ and rejected/ on one filesystem"
    )]
    CrossDevice { a: PathBuf, b: PathBuf },
    #[error("spool {spool} is already served by spoolite pid {pid} (lock {lock})")]
    Locked {
        spool: PathBuf,
        pid: String,
        lock: PathBuf,
    },
    #[error("lock spool {lock}: {source}")]
    Lock { lock: PathBuf, source: io::Error },
}

#[derive(Debug, Clone)]
pub(crate) struct Spool {
    pub(crate) root: PathBuf,
    pub(crate) incoming: PathBuf,
    pub(crate) archive: PathBuf,
    pub(crate) rejected: PathBuf,
}

/// A regular file waiting in incoming/.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// The name as it is on disk (not necessarily UTF-8), to open and move it by.
    pub(crate) name: OsString,
    pub(crate) size: u64,
    pub(crate) mtime: SystemTime,
    /// What the listing saw; a move compares it with the file as it is then.
    pub(crate) identity: FileIdentity,
}

/// What lies in incoming/: regular files, and entries that are never taken.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    pub(crate) files: Vec<Waiting>,
    /// Subfolders, symbolic links, FIFOs, sockets and devices, each with its kind
    /// ("a folder", "a FIFO", …).
    pub(crate) ignored: Vec<(OsString, &'static str)>,
}

/// What an entry that is not a regular file is, as a log line names it.
fn kind_of(file_type: fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if file_type.is_dir() {
        "a folder"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else if file_type.is_fifo() {
        "a FIFO"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_char_device() {
        "a character device"
    } else {
        "an entry of an unknown kind"
    }
}

/// Which file a name stood for, and which version of it: a rewrite in place changes
/// the size, the times or at least the change time (ctime), which no one can set
/// back; a replacement by rename changes the inode.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct FileIdentity {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    pub(crate) mtime_s: i64,
    pub(crate) mtime_ns: i64,
    pub(crate) ctime_s: i64,
    pub(crate) ctime_ns: i64,
}

impl FileIdentity {
    /// Whether the file was written to since `earlier` was seen: its size or
    /// modification time differ. The change time is left out, since a rename
    /// (the daemon's own move) changes it.
    pub(crate) fn written_since(&self, earlier: &FileIdentity) -> bool {
        (self.size, self.mtime_s, self.mtime_ns)
            != (earlier.size, earlier.mtime_s, earlier.mtime_ns)
    }

    pub(crate) fn of(meta: &fs::Metadata) -> FileIdentity {
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_s: meta.mtime(),
            mtime_ns: meta.mtime_nsec(),
            ctime_s: meta.ctime(),
            ctime_ns: meta.ctime_nsec(),
        }
    }
}

/// Why a file was not moved out of incoming/.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MoveError {
    /// The file is no longer the one that was read (rewritten, appended, replaced):
    /// nothing was moved, and it is to be taken again.
    #[error("the file changed after it was read")]
    Changed,
    #[error("{0}")]
    Io(#[from] io::Error),
}

/// How many names one move may look at before it gives up: numbered names are
/// tried one by one up to `NAME_TRIES_LINEAR`, then found by halving, so this is
/// only reached when the folder keeps changing under us.
pub(crate) const NAME_TRIES_MAX: u32 = 4096;

/// Counters tried one by one before the search halves: a hole left by a deleted
/// file is filled, and an orphaned reason file is found again.
const NAME_TRIES_LINEAR: u32 = 1000;

/// Reason files are small; one bigger than this is not ours to reuse.
const REASON_BYTES_MAX: u64 = 1 << 20;

impl Spool {
    /// The spool at `root`, without touching the file system.
    pub(crate) fn at(root: &Path) -> Spool {
        Spool {
            root: root.to_owned(),
            incoming: root.join("incoming"),
            archive: root.join("archive"),
            rejected: root.join("rejected"),
        }
    }

    /// Creates what is missing and checks that the folders share one filesystem.
    pub(crate) fn create(root: &Path) -> Result<Spool, SpoolError> {
        let spool = Spool::at(root);
        for dir in [&spool.incoming, &spool.archive, &spool.rejected] {
            fs::create_dir_all(dir).map_err(|source| SpoolError::Create {
                path: dir.clone(),
                source,
            })?;
        }
        let device = |dir: &PathBuf| {
            fs::metadata(dir)
                .map(|m| m.dev())
                .map_err(|source| SpoolError::Create {
                    path: dir.clone(),
                    source,
                })
        };
        let incoming = device(&spool.incoming)?;
        for dir in [&spool.archive, &spool.rejected] {
            if device(dir)? != incoming {
                return Err(SpoolError::CrossDevice {
                    a: spool.incoming.clone(),
                    b: dir.clone(),
                });
            }
        }
        Ok(spool)
    }

    /// Takes the spool's lock for the life of the returned file, writing our pid
    /// into it so that a second daemon can name us.
    pub(crate) fn lock(&self) -> Result<File, SpoolError> {
        let path = self.root.join(LOCK_FILE);
        let lock_error = |source| SpoolError::Lock {
            lock: path.clone(),
            source,
        };
        let mut file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(lock_error)?;
        match lock_exclusive(&file) {
            Ok(true) => {}
            Ok(false) => {
                let mut pid = String::new();
                let _ = file.read_to_string(&mut pid);
                let pid = if pid.trim().is_empty() {
                    "unknown".to_owned()
                } else {
                    pid.trim().to_owned()
                };
                return Err(SpoolError::Locked {
                    spool: self.root.clone(),
                    pid,
                    lock: path,
                });
            }
            Err(source) => return Err(lock_error(source)),
        }
        file.set_len(0).map_err(lock_error)?;
        writeln!(file, "{}", std::process::id()).map_err(lock_error)?;
        Ok(file)
    }

    /// Removes the hidden temporary reason files that a crash in `write_atomic` or
    /// `write_reason_file` can leave in rejected/. Called under the spool lock, so none is in use.
    pub(crate) fn remove_stale_temp_files(&self) -> io::Result<Vec<String>> {
        let mut removed = Vec::new();
        for entry in fs::read_dir(&self.rejected)? {
            let name = entry?.file_name();
            let bytes = name.as_bytes();
            if bytes.starts_with(b".") && bytes.ends_with(b".tmp") && contains_reason_suffix(bytes)
            {
                fs::remove_file(self.rejected.join(&name))?;
                removed.push(names::lossy(&name));
            }
        }
        Ok(removed)
    }

    /// Lists incoming/ without following or opening anything.
    pub(crate) fn list_incoming(&self) -> io::Result<Listing> {
        let mut listing = Listing::default();
        for entry in fs::read_dir(&self.incoming)? {
            let entry = entry?;
            // symlink_metadata: a link is reported as a link, never followed.
            let meta = match fs::symlink_metadata(entry.path()) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // moved meanwhile
                Err(e) => return Err(e),
            };
            if meta.file_type().is_file() {
                listing.files.push(Waiting {
                    name: entry.file_name(),
                    size: meta.len(),
                    mtime: meta.modified()?,
                    identity: FileIdentity::of(&meta),
                });
            } else {
                listing
                    .ignored
                    .push((entry.file_name(), kind_of(meta.file_type())));
            }
        }
        Ok(listing)
    }

    /// Moves `name` from incoming/ into archive/, if it is still the file `read`
    /// describes; returns its final name there.
    pub(crate) fn archive(&self, name: &OsStr, read: &FileIdentity) -> Result<OsString, MoveError> {
        self.check_unchanged(name, read)?;
        let room = names::name_bytes_max(&self.archive);
        let archive = &self.archive;
        let taken = |candidate: &OsStr| exists(&archive.join(candidate));
        let final_name = move_to_free_name(
            &self.incoming,
            name,
            archive,
            room,
            taken,
            |_| Ok(()),
            |_| {},
        )?;
        sync_dir(archive)?;
        sync_dir(&self.incoming)?;
        Ok(final_name)
    }

    /// Writes the reason file, then moves `name` from incoming/ into rejected/, if
    /// it is still the file `read` describes; returns its final name there, as
    /// recorded. `reason` is given that final name.
    ///
    /// A crash between the two steps leaves a reason file without its data file;
    /// when the same bytes (`digest`) are rejected again, that name is reused.
    pub(crate) fn reject(
        &self,
        name: &OsStr,
        read: &FileIdentity,
        digest: Option<&str>,
        reason: impl Fn(&str) -> String,
    ) -> Result<String, MoveError> {
        self.check_unchanged(name, read)?;
        let rejected = &self.rejected;
        // The reason file's name is the longest: the data file's name leaves room.
        let room = names::name_bytes_max(rejected).saturating_sub(REASON_SUFFIX.len());
        let taken = |candidate: &OsStr| {
            Ok(exists(&rejected.join(candidate))?
                || !reason_name_free(&rejected.join(reason_name(candidate)), digest)?)
        };
        let write_reason = |candidate: &OsStr| {
            let text = reason(&names::lossy(candidate));
            write_reason_file(rejected, &reason_name(candidate), text.as_bytes())
        };
        // The name was taken between our look and the rename: our reason file
        // would describe someone else's file.
        let unwrite_reason = |candidate: &OsStr| {
            let _ = fs::remove_file(rejected.join(reason_name(candidate)));
        };
        let final_name = move_to_free_name(
            &self.incoming,
            name,
            rejected,
            room,
            taken,
            write_reason,
            unwrite_reason,
        )?;
        sync_dir(rejected)?;
        sync_dir(&self.incoming)?;
        Ok(names::lossy(&final_name))
    }

    /// Moves `name` from archive/ back into incoming/ (under that name, or a
    /// numbered one when incoming/ has it), to be taken again: a file that changed
    /// after it was archived. Returns its name in incoming/.
    pub(crate) fn unarchive(&self, name: &OsStr) -> io::Result<OsString> {
        let room = names::name_bytes_max(&self.incoming);
        let incoming = &self.incoming;
        let taken = |candidate: &OsStr| exists(&incoming.join(candidate));
        let back = move_to_free_name(
            &self.archive,
            name,
            incoming,
            room,
            taken,
            |_| Ok(()),
            |_| {},
        )?;
        sync_dir(incoming)?;
        sync_dir(&self.archive)?;
        Ok(back)
    }

    /// `MoveError::Changed` unless incoming/`name` is still the file `read`
    /// describes: archive/ must only ever hold bytes whose digest is in the inbox.
    fn check_unchanged(&self, name: &OsStr, read: &FileIdentity) -> Result<(), MoveError> {
        let now = fs::symlink_metadata(self.incoming.join(name))?;
        if FileIdentity::of(&now) == *read {
            Ok(())
        } else {
            Err(MoveError::Changed)
        }
    }
}

fn contains_reason_suffix(bytes: &[u8]) -> bool {
    bytes
        .windows(REASON_SUFFIX.len())
        .any(|window| window == REASON_SUFFIX.as_bytes())
}

/// `<name>.reason.json`.
fn reason_name(name: &OsStr) -> OsString {
    let mut reason = name.to_owned();
    reason.push(REASON_SUFFIX);
    reason
}

/// Whether anything lies at `path` (a dangling link included). An error other than
/// "not found" is returned, never taken for an answer, so that no search for a name
/// goes on over an error that every name would meet (ENAMETOOLONG, EACCES).
fn exists(path: &Path) -> io::Result<bool> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether a reason file may be written at `path`: nothing is there, or a reason
/// file for the same bytes (`digest`) that a crash left without its data file.
fn reason_name_free(path: &Path, digest: Option<&str>) -> io::Result<bool> {
    let meta = match fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
        Err(e) => return Err(e),
    };
    if !meta.is_file() || meta.len() > REASON_BYTES_MAX || digest.is_none() {
        return Ok(false);
    }
    // Unreadable or not JSON: someone else's file, which we leave alone.
    let Ok(bytes) = fs::read(path) else {
        return Ok(false);
    };
    Ok(reason_digest(&bytes).as_deref() == digest)
}

/// The `sha256` recorded in a reason file.
fn reason_digest(bytes: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    value.get("sha256")?.as_str().map(str::to_owned)
}

/// Whether a name is one that uploads use while a file is being written.
pub(crate) fn is_temp_name(name: &OsStr) -> bool {
    let bytes = name.as_bytes();
    let ends_with = |suffix: &[u8]| {
        bytes.len() >= suffix.len()
            && bytes[bytes.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    };
    bytes.starts_with(b".")
        || bytes.ends_with(b"~")
        || [&b".tmp"[..], b".part", b".partial", b".filepart"]
            .into_iter()
            .any(ends_with)
}

/// Renames `from/name` to the first free numbered name in `to` that fits in
/// `room` bytes, calling `before` with that name first (and `undo` when the rename
/// then finds the name taken); returns the name as recorded. The rename refuses
/// to replace (RENAME_NOREPLACE), so a name taken meanwhile is skipped, never
/// overwritten. At most `NAME_TRIES_MAX` names are looked at, and any error but
/// "taken" ends the search.
fn move_to_free_name(
    from: &Path,
    name: &OsStr,
    to: &Path,
    room: usize,
    taken: impl Fn(&OsStr) -> io::Result<bool>,
    before: impl Fn(&OsStr) -> io::Result<()>,
    undo: impl Fn(&OsStr),
) -> io::Result<OsString> {
    let source = from.join(name);
    let no_free_name = |why: String| {
        io::Error::other(format!(
            "find a free name for {} in {}: {why}",
            names::escaped(&names::lossy(name)),
            to.display()
        ))
    };
    let mut tries = 0;
    let mut probe = |n: u32| -> io::Result<(bool, OsString)> {
        tries += 1;
        if tries > NAME_TRIES_MAX {
            return Err(no_free_name(format!("none after {NAME_TRIES_MAX} tries")));
        }
        let candidate = names::numbered(name, n, room)
            .ok_or_else(|| no_free_name(format!("no name fits in {room} bytes")))?;
        Ok((taken(&candidate)?, candidate))
    };
    loop {
        let candidate = first_free(&mut probe)?
            .ok_or_else(|| no_free_name("every counter is taken".to_owned()))?;
        before(&candidate)?;
        match rename_no_replace(&source, &to.join(&candidate)) {
            Ok(()) => return Ok(candidate),
            // Taken since we looked; the next search counts against the same tries.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => undo(&candidate),
            Err(e) => return Err(e),
        }
    }
}

/// The first free candidate: counters one by one up to `NAME_TRIES_LINEAR`, then
/// (a folder with that many copies of one name) doubling until a free one, then
/// halving back to the first free after the last taken, so that ten thousand
/// copies cost tens of looks, not ten thousand. `None` when every counter is taken.
fn first_free(
    probe: &mut impl FnMut(u32) -> io::Result<(bool, OsString)>,
) -> io::Result<Option<OsString>> {
    for n in 0..NAME_TRIES_LINEAR {
        let (taken, candidate) = probe(n)?;
        if !taken {
            return Ok(Some(candidate));
        }
    }
    let mut low = NAME_TRIES_LINEAR - 1; // taken
    let mut step = NAME_TRIES_LINEAR;
    let (mut high, mut free) = loop {
        let high = low.saturating_add(step);
        if high == low {
            return Ok(None);
        }
        let (taken, candidate) = probe(high)?;
        if !taken {
            break (high, candidate);
        }
        low = high;
        step = step.saturating_mul(2);
    };
    while high - low > 1 {
        let middle = low + (high - low) / 2;
        let (taken, candidate) = probe(middle)?;
        if taken {
            low = middle;
        } else {
            (high, free) = (middle, candidate);
        }
    }
    Ok(Some(free))
}

/// Renames `source` to `target` unless `target` exists (`AlreadyExists`).
pub(crate) fn rename_no_replace(source: &Path, target: &Path) -> io::Result<()> {
    let c = |p: &Path| CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other);
    let (source_c, target_c) = (c(source)?, c(target)?);
    // SAFETY: both are valid NUL-terminated paths; AT_FDCWD resolves them as given.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            source_c.as_ptr(),
            libc::AT_FDCWD,
            target_c.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EINVAL) || error.raw_os_error() == Some(libc::ENOSYS) {
        // The filesystem cannot refuse a replace; the spool lock means no other
        // spoolite moves files here, so look first and rename.
        if target.symlink_metadata().is_ok() {
            return Err(io::ErrorKind::AlreadyExists.into());
        }
        return fs::rename(source, target);
    }
    Err(error)
}

/// How long a starting daemon waits out `spoolite status` looking at the lock.
const LOCK_READERS_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes the exclusive lock on the spool's lock file: true when taken, false when a
/// daemon holds it. `spoolite status` holds a shared lock for an instant to see
/// whether a daemon serves the spool; that is waited out, a daemon is not.
fn lock_exclusive(file: &File) -> io::Result<bool> {
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(fs::TryLockError::Error(error)) => return Err(error),
            Err(fs::TryLockError::WouldBlock) => {}
        }
        // A shared lock is had only while no daemon holds the exclusive one.
        match file.try_lock_shared() {
            Ok(()) => file.unlock()?,
            Err(fs::TryLockError::WouldBlock) => return Ok(false),
            Err(fs::TryLockError::Error(error)) => return Err(error),
        }
        if started.elapsed() >= LOCK_READERS_WAIT_MAX {
            return Ok(false);
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// Writes `dir/name` through a temporary file: write, fsync, rename, fsync dir.
/// The file is readable by all (0644, whatever the umask): the folder it lies in
/// decides who may read it, and node_exporter must read the metrics file.
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let temp = format!(".{name}.{}.tmp", std::process::id());
    write_through(dir, OsStr::new(name), OsStr::new(&temp), bytes)
}

/// Writes a reason file as `write_atomic` does, under a temporary name of fixed
/// length: the reason file's own name may already be as long as the filesystem
/// allows. The name still starts with `.`, holds `.reason.json` and ends in
/// `.tmp`, so `remove_stale_temp_files` finds it after a crash.
fn write_reason_file(dir: &Path, name: &OsStr, bytes: &[u8]) -> io::Result<()> {
    let temp = format!(".spoolite-{}{REASON_SUFFIX}.tmp", std::process::id());
    write_through(dir, name, OsStr::new(&temp), bytes)
}

fn write_through(dir: &Path, name: &OsStr, temp: &OsStr, bytes: &[u8]) -> io::Result<()> {
    let temp = dir.join(temp);
    let mut file = File::create(&temp)?;
    file.set_permissions(fs::Permissions::from_mode(0o644))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temp, dir.join(name))?;
    sync_dir(dir)
}

/// Makes a rename into or out of `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_status_looking_at_the_lock_is_waited_out_and_a_daemon_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::create(dir.path()).unwrap();
        // A reader (status) holds a shared lock for a moment: the daemon starts.
        let reader = File::open(spool.root.join(LOCK_FILE))
            .or_else(|_| File::create(spool.root.join(LOCK_FILE)))
            .unwrap();
        reader.lock_shared().unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            drop(reader);
        });
        let held = spool.lock().expect("waits out the reader");
        release.join().unwrap();
        // A second daemon is refused at once, naming the first.
        let started = std::time::Instant::now();
        match spool.lock() {
            Err(SpoolError::Locked { pid, .. }) => {
                assert_eq!(pid, std::process::id().to_string());
            }
            other => panic!("expected Locked, got {other:?}"),
        }
        assert!(started.elapsed() < std::time::Duration::from_millis(500));
        drop(held);
    }

    use super::*;
    use std::os::unix::ffi::OsStringExt;
    use std::time::{Duration, Instant};

    fn os(bytes: &[u8]) -> &OsStr {
        OsStr::from_bytes(bytes)
    }

    /// A spool in a fresh temporary folder: in /dev/shm when there is one, since
    /// the tests below move thousands of files and each move fsyncs twice.
    fn temp_spool() -> (tempfile::TempDir, Spool) {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm).unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let spool = Spool::create(dir.path()).unwrap();
        (dir, spool)
    }

    /// Drops `content` as incoming/`name`; returns its identity, as a listing sees it.
    fn drop_file(spool: &Spool, name: &OsStr, content: &[u8]) -> FileIdentity {
        let path = spool.incoming.join(name);
        fs::write(&path, content).unwrap();
        FileIdentity::of(&fs::symlink_metadata(&path).unwrap())
    }

    fn reason_text(final_name: &str) -> String {
        format!("reason for {final_name}")
    }

    #[test]
    fn temp_names() {
        for name in [
            &b".a.json"[..],
            b"a.json.tmp",
            b"a.json.PART",
            b"a.partial",
            b"a.filepart",
            b"a.json~",
            b"\xff.json.tmp",
            b".\xff",
        ] {
            assert!(is_temp_name(os(name)), "{:?}", os(name));
        }
        for name in [
            &b"a.json"[..],
            b"a.ndjson",
            b"part.json",
            b"a.tmp.json",
            b"\xff.json",
            b"tmp",
        ] {
            assert!(!is_temp_name(os(name)), "{:?}", os(name));
        }
    }

    #[test]
    fn moves_never_overwrite() {
        let (_dir, spool) = temp_spool();
        let a = OsStr::new("a.json");
        for content in ["one", "two", "three"] {
            let read = drop_file(&spool, a, content.as_bytes());
            spool.archive(a, &read).unwrap();
        }
        for (name, content) in [
            ("a.json", "one"),
            ("a.1.json", "two"),
            ("a.2.json", "three"),
        ] {
            assert_eq!(
                fs::read_to_string(spool.archive.join(name)).unwrap(),
                content
            );
        }
        // A reason file left by someone else is never overwritten.
        let b = OsStr::new("b.json");
        let read = drop_file(&spool, b, b"x");
        fs::write(spool.rejected.join("b.json.reason.json"), "not ours").unwrap();
        let name = spool.reject(b, &read, Some("d1"), reason_text).unwrap();
        assert_eq!(name, "b.1.json");
        let read_back = |name: &str| fs::read_to_string(spool.rejected.join(name)).unwrap();
        assert_eq!(read_back("b.1.json.reason.json"), "reason for b.1.json");
        assert_eq!(read_back("b.json.reason.json"), "not ours");
        // A reason file orphaned by a crash, for the same bytes, is taken over.
        let c = OsStr::new("c.json");
        let read = drop_file(&spool, c, b"y");
        fs::write(
            spool.rejected.join("c.json.reason.json"),
            r#"{"sha256":"d2"}"#,
        )
        .unwrap();
        let name = spool
            .reject(c, &read, Some("d2"), |_| "fresh".to_owned())
            .unwrap();
        assert_eq!(name, "c.json");
        assert_eq!(read_back("c.json.reason.json"), "fresh");
    }

    /// Names of `len` bytes in several shapes: no extension, a plain stem, a dotted
    /// stem, stems of 2-, 3- and 4-byte characters (so a cut meets them), and bytes
    /// that are not UTF-8. None starts with `.` (those are never taken).
    fn shaped_names(len: usize) -> Vec<Vec<u8>> {
        let fill = |unit: &[u8], extension: &[u8]| -> Option<Vec<u8>> {
            let stem_len = len.checked_sub(extension.len())?;
            if stem_len == 0 {
                return None;
            }
            let mut stem = b"n".to_vec();
            while stem.len() + unit.len() <= stem_len {
                stem.extend_from_slice(unit);
            }
            stem.resize(stem_len, b'x');
            stem.extend_from_slice(extension);
            Some(stem)
        };
        [
            fill(b"a", b""),
            fill(b"a", b".json"),
            fill(b"a.b", b".ndjson"),
            fill("é".as_bytes(), b".json"),
            fill("日".as_bytes(), b".json"),
            fill("😀".as_bytes(), b".jsonl"),
            fill(b"\xff\xe2\x82", b".json"),
            fill(b"\xef\xbf\xbd\xc3", b""),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// Whether `moved` is `dropped` numbered and cut as `names::numbered` does it
    /// for some counter.
    fn is_numbered_form(dropped: &[u8], moved: &[u8], room: usize) -> bool {
        (0..10_000)
            .any(|n| names::numbered(os(dropped), n, room).is_some_and(|c| c.as_bytes() == moved))
    }

    #[test]
    fn names_of_every_length_are_archived_and_rejected_again_and_again_within_name_max() {
        let (_dir, spool) = temp_spool();
        let copies = 3;
        let mut dropped_count = 0;
        for len in 1..=NAME_BYTES {
            for name in shaped_names(len) {
                let name = os(&name);
                for copy in 0..copies {
                    let content = format!("{len} {:?} {copy}", name.as_bytes());
                    let read = drop_file(&spool, name, content.as_bytes());
                    spool.archive(name, &read).unwrap();
                    let read = drop_file(&spool, name, content.as_bytes());
                    spool.reject(name, &read, None, reason_text).unwrap();
                    dropped_count += 1;
                }
            }
        }
        // What lies in the folders: every copy, each under a name that fits,
        // each rejected one beside its reason file, which fits too.
        let entries = |dir: &Path| -> Vec<OsString> {
            fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect()
        };
        let archived = entries(&spool.archive);
        assert_eq!(archived.len(), dropped_count);
        let rejected = entries(&spool.rejected);
        assert_eq!(rejected.len(), dropped_count * 2);
        for name in archived.iter().chain(&rejected) {
            assert!(name.len() <= NAME_BYTES, "{name:?} is {} bytes", name.len());
        }
        for name in &rejected {
            if name.as_bytes().ends_with(REASON_SUFFIX.as_bytes()) {
                continue;
            }
            let reason = fs::read_to_string(spool.rejected.join(reason_name(name))).unwrap();
            assert_eq!(reason, reason_text(&names::lossy(name)));
        }
        // Each moved name is its dropped name, numbered and cut by the rule: read
        // each file back to find which name it was dropped as.
        for (dir, names, room) in [
            (&spool.archive, &archived, NAME_BYTES),
            (&spool.rejected, &rejected, NAME_BYTES - REASON_SUFFIX.len()),
        ] {
            for moved in names.iter() {
                if dir == &spool.rejected && moved.as_bytes().ends_with(REASON_SUFFIX.as_bytes()) {
                    continue;
                }
                let content = fs::read_to_string(dir.join(moved)).unwrap();
                let (_, rest) = content.split_once(' ').unwrap();
                let (bytes, _) = rest.rsplit_once(' ').unwrap();
                let dropped: Vec<u8> = serde_json::from_str(bytes).unwrap();
                assert!(
                    is_numbered_form(&dropped, moved.as_bytes(), room),
                    "{moved:?} is not a numbered form of {:?}",
                    os(&dropped)
                );
            }
        }
    }

    const NAME_BYTES: usize = names::NAME_BYTES_MAX;

    #[test]
    fn a_name_that_is_not_utf8_is_listed_moved_and_recorded_with_u_fffd() {
        let (_dir, spool) = temp_spool();
        let name = os(b"caf\xe9.json");
        drop_file(&spool, name, b"{}");
        let listing = spool.list_incoming().unwrap();
        assert!(listing.ignored.is_empty(), "{:?}", listing.ignored);
        assert_eq!(listing.files.len(), 1);
        let waiting = &listing.files[0];
        assert_eq!(waiting.name, name);
        let moved = spool.archive(name, &waiting.identity).unwrap();
        assert_eq!(moved, name);
        assert_eq!(names::lossy(&moved), "caf\u{fffd}.json");
        assert!(spool.archive.join(name).is_file());
        let read = drop_file(&spool, name, b"x");
        assert_eq!(
            spool.reject(name, &read, None, reason_text).unwrap(),
            "caf\u{fffd}.json"
        );
        assert_eq!(
            fs::read_to_string(spool.rejected.join(reason_name(name))).unwrap(),
            "reason for caf\u{fffd}.json"
        );
    }

    /// Rewrites incoming/`name` in place: same inode, same size, the old
    /// modification time put back (as an SFTP client preserving times does).
    fn rewrite_in_place(spool: &Spool, name: &OsStr, content: &[u8]) {
        let path = spool.incoming.join(name);
        let mtime = fs::metadata(&path).unwrap().modified().unwrap();
        let mut file = fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all(content).unwrap();
        file.set_modified(mtime).unwrap();
    }

    #[test]
    fn a_file_changed_after_it_was_read_is_not_moved() {
        let (_dir, spool) = temp_spool();
        let name = OsStr::new("a.json");
        type Change = fn(&Spool, &OsStr);
        let changes: [(&str, Change); 3] = [
            ("rewritten in place", |spool, name| {
                rewrite_in_place(spool, name, b"BBBB")
            }),
            ("appended", |spool, name| {
                let path = spool.incoming.join(name);
                let mut file = fs::OpenOptions::new().append(true).open(path).unwrap();
                file.write_all(b"more").unwrap();
            }),
            ("replaced by rename", |spool, name| {
                fs::write(spool.incoming.join("other"), b"AAAA").unwrap();
                fs::rename(spool.incoming.join("other"), spool.incoming.join(name)).unwrap();
            }),
        ];
        for (what, change) in changes {
            let read = drop_file(&spool, name, b"AAAA");
            // A change within the same clock tick as the write would leave the
            // times equal; the size or inode still tells for two of the three.
            std::thread::sleep(Duration::from_millis(20));
            change(&spool, name);
            let archived = spool.archive(name, &read);
            assert!(
                matches!(archived, Err(MoveError::Changed)),
                "{what}: {archived:?}"
            );
            let rejected = spool.reject(name, &read, None, reason_text);
            assert!(
                matches!(rejected, Err(MoveError::Changed)),
                "{what}: {rejected:?}"
            );
            assert!(spool.incoming.join(name).is_file(), "{what}");
            assert_eq!(fs::read_dir(&spool.archive).unwrap().count(), 0, "{what}");
            assert_eq!(fs::read_dir(&spool.rejected).unwrap().count(), 0, "{what}");
        }
        // Unchanged since it was read: moved.
        let read = FileIdentity::of(&fs::symlink_metadata(spool.incoming.join(name)).unwrap());
        assert_eq!(spool.archive(name, &read).unwrap(), "a.json");
        // Gone: an I/O error, nothing moved.
        assert!(matches!(
            spool.archive(name, &read),
            Err(MoveError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
    }

    #[test]
    fn a_name_too_long_for_the_filesystem_is_an_error_at_once_never_a_loop() {
        let (_dir, spool) = temp_spool();
        // As if pathconf had said 400: every candidate is too long for the
        // filesystem, and the first look says so.
        let name = OsString::from_vec([b"n".repeat(250), b".json".to_vec()].concat());
        let looks = std::cell::Cell::new(0);
        for (dir, with_reason) in [(&spool.archive, false), (&spool.rejected, true)] {
            fs::write(spool.incoming.join(&name), b"x").unwrap();
            fs::write(dir.join(&name), b"taken").unwrap();
            let started = Instant::now();
            let taken = |candidate: &OsStr| {
                looks.set(looks.get() + 1);
                Ok(exists(&dir.join(candidate))?
                    || (with_reason && !reason_name_free(&dir.join(reason_name(candidate)), None)?))
            };
            let result =
                move_to_free_name(&spool.incoming, &name, dir, 400, taken, |_| Ok(()), |_| {});
            let error = result.expect_err("no name fits");
            assert_eq!(error.raw_os_error(), Some(libc::ENAMETOOLONG), "{error}");
            assert!(looks.get() <= 2, "{} looks", looks.get());
            assert!(started.elapsed() < Duration::from_secs(1));
            looks.set(0);
        }
        // Through the public API, with the real limit: moved, under names that fit.
        for copy in 0..3 {
            let read = drop_file(&spool, &name, format!("{copy}").as_bytes());
            let moved = spool.reject(&name, &read, None, reason_text).unwrap();
            assert!(moved.len() + REASON_SUFFIX.len() <= NAME_BYTES, "{moved}");
            let read = drop_file(&spool, &name, format!("{copy}").as_bytes());
            let moved = spool.archive(&name, &read).unwrap();
            assert!(moved.len() <= NAME_BYTES, "{moved:?}");
        }
    }

    #[test]
    fn the_search_for_a_free_name_is_bounded_and_fast_past_a_thousand_copies() {
        // 123 456 copies: found with the one-by-one stretch, then tens of looks.
        let mut looks = 0;
        let mut probe = |n: u32| -> io::Result<(bool, OsString)> {
            looks += 1;
            Ok((n < 123_456, OsString::from(n.to_string())))
        };
        assert_eq!(first_free(&mut probe).unwrap().unwrap(), "123456");
        assert!(looks < NAME_TRIES_LINEAR + 64, "{looks} looks");
        // Every name taken: an error that says so, after at most NAME_TRIES_MAX.
        let (_dir, spool) = temp_spool();
        fs::write(spool.incoming.join("a.json"), b"x").unwrap();
        let looks = std::cell::Cell::new(0u32);
        let always_taken = |_: &OsStr| {
            looks.set(looks.get() + 1);
            Ok(true)
        };
        let name = OsStr::new("a.json");
        let error = move_to_free_name(
            &spool.incoming,
            name,
            &spool.archive,
            NAME_BYTES,
            always_taken,
            |_| Ok(()),
            |_| {},
        )
        .expect_err("every name is taken");
        assert!(error.to_string().contains("find a free name"), "{error}");
        assert!(looks.get() <= NAME_TRIES_MAX, "{} looks", looks.get());
        assert!(spool.incoming.join(name).is_file());
    }

    #[test]
    fn a_name_taken_between_the_look_and_the_rename_is_skipped_and_left_as_it_was() {
        let (_dir, spool) = temp_spool();
        let name = OsStr::new("r.json");
        fs::write(spool.incoming.join(name), b"ours").unwrap();
        fs::write(spool.rejected.join(name), b"theirs").unwrap();
        let undone = std::cell::RefCell::new(Vec::new());
        let move_with_lies = |lies: u32| {
            // The look says "free" for r.json `lies` times, as if it were created
            // just after each look.
            let lies = std::cell::Cell::new(lies);
            let taken = |candidate: &OsStr| {
                if candidate == name && lies.get() > 0 {
                    lies.set(lies.get() - 1);
                    return Ok(false);
                }
                exists(&spool.rejected.join(candidate))
            };
            move_to_free_name(
                &spool.incoming,
                name,
                &spool.rejected,
                NAME_BYTES,
                taken,
                |_| Ok(()),
                |candidate| undone.borrow_mut().push(candidate.to_owned()),
            )
        };
        // Taken at every try: the search ends, bounded, and says why.
        let error = move_with_lies(u32::MAX).expect_err("never free");
        assert!(error.to_string().contains("tries"), "{error}");
        assert_eq!(undone.borrow().len(), NAME_TRIES_MAX as usize);
        undone.borrow_mut().clear();
        // Once: the next name.
        assert_eq!(move_with_lies(1).unwrap(), "r.1.json");
        assert_eq!(*undone.borrow(), [name]);
        assert_eq!(fs::read(spool.rejected.join(name)).unwrap(), b"theirs");
        assert_eq!(fs::read(spool.rejected.join("r.1.json")).unwrap(), b"ours");
    }

    #[test]
    fn names_past_the_one_by_one_stretch_are_found_by_halving() {
        let (_dir, spool) = temp_spool();
        let name = OsStr::new("a.json");
        for n in 0..NAME_TRIES_LINEAR + 7 {
            let taken = names::numbered(name, n, NAME_BYTES).unwrap();
            fs::write(spool.archive.join(taken), b"").unwrap();
        }
        let read = drop_file(&spool, name, b"x");
        let moved = spool.archive(name, &read).unwrap();
        assert_eq!(
            moved,
            OsString::from(format!("a.{}.json", NAME_TRIES_LINEAR + 7))
        );
    }

    #[test]
    fn stale_temporary_reason_files_are_removed_whatever_their_name() {
        let (_dir, spool) = temp_spool();
        for name in [
            &b".spoolite-1.reason.json.tmp"[..],
            b".\xff.reason.json.1.tmp",
        ] {
            fs::write(spool.rejected.join(os(name)), b"").unwrap();
        }
        fs::write(spool.rejected.join("a.json.reason.json"), b"").unwrap();
        let mut removed = spool.remove_stale_temp_files().unwrap();
        removed.sort();
        assert_eq!(
            removed,
            [".spoolite-1.reason.json.tmp", ".\u{fffd}.reason.json.1.tmp"]
        );
        assert_eq!(fs::read_dir(&spool.rejected).unwrap().count(), 1);
    }
}
