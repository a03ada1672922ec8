//! The spool directory: its three folders, the lock that keeps one daemon per spool,
//! listing what waits in incoming/, and moving a file to archive/ or rejected/ by
//! rename, never overwriting, with the directories fsynced after.

use std::ffi::CString;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Name of the lock file in the spool root.
pub const LOCK_FILE: &str = "spoolite.lock";

/// Suffix of the reason file written beside a rejected file.
pub const REASON_SUFFIX: &str = ".reason.json";

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
pub struct Spool {
    pub root: PathBuf,
    pub incoming: PathBuf,
    pub archive: PathBuf,
    pub rejected: PathBuf,
}

/// A regular file waiting in incoming/.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub name: String,
    pub size: u64,
    pub mtime: SystemTime,
}

/// What lies in incoming/: regular files, and entries that are never taken.
#[derive(Debug, Default)]
pub struct Listing {
    pub files: Vec<Waiting>,
    /// Subfolders, symbolic links, FIFOs, sockets, devices, and names that are not
    /// UTF-8.
    pub ignored: Vec<String>,
}

impl Spool {
    /// The spool at `root`, without touching the file system.
    pub fn at(root: &Path) -> Spool {
        Spool {
            root: root.to_owned(),
            incoming: root.join("incoming"),
            archive: root.join("archive"),
            rejected: root.join("rejected"),
        }
    }

    /// Creates what is missing and checks that the folders share one filesystem.
    pub fn create(root: &Path) -> Result<Spool, SpoolError> {
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
    pub fn lock(&self) -> Result<File, SpoolError> {
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
        match file.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
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
            Err(fs::TryLockError::Error(source)) => return Err(lock_error(source)),
        }
        file.set_len(0).map_err(lock_error)?;
        writeln!(file, "{}", std::process::id()).map_err(lock_error)?;
        Ok(file)
    }

    /// Removes the hidden temporary reason files that a crash in `write_atomic`
    /// can leave in rejected/. Called under the spool lock, so none is in use.
    pub fn remove_stale_temp_files(&self) -> io::Result<Vec<String>> {
        let mut removed = Vec::new();
        for entry in fs::read_dir(&self.rejected)? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.ends_with(".tmp") && name.contains(REASON_SUFFIX) {
                fs::remove_file(self.rejected.join(&name))?;
                removed.push(name);
            }
        }
        Ok(removed)
    }

    /// Lists incoming/ without following or opening anything.
    pub fn list_incoming(&self) -> io::Result<Listing> {
        let mut listing = Listing::default();
        for entry in fs::read_dir(&self.incoming)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                listing
                    .ignored
                    .push(entry.file_name().to_string_lossy().into_owned());
                continue;
            };
            // symlink_metadata: a link is reported as a link, never followed.
            let meta = match fs::symlink_metadata(entry.path()) {
                Ok(meta) => meta,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue, // moved meanwhile
                Err(e) => return Err(e),
            };
            if meta.file_type().is_file() {
                let mtime = meta.modified()?;
                listing.files.push(Waiting {
                    name,
                    size: meta.len(),
                    mtime,
                });
            } else {
                listing.ignored.push(name);
            }
        }
        Ok(listing)
    }

    /// Moves `name` from incoming/ into archive/; returns its final name there.
    pub fn archive(&self, name: &str) -> io::Result<String> {
        let final_name = move_no_replace(&self.incoming, name, &self.archive, |_| true)?;
        sync_dir(&self.archive)?;
        sync_dir(&self.incoming)?;
        Ok(final_name)
    }

    /// Writes the reason file, then moves `name` from incoming/ into rejected/;
    /// returns its final name there. `reason` is given the final name.
    ///
    /// A crash between the two steps leaves a reason file without its data file;
    /// when the same bytes (`digest`) are rejected again, that name is reused.
    pub fn reject(
        &self,
        name: &str,
        digest: Option<&str>,
        reason: impl Fn(&str) -> String,
    ) -> io::Result<String> {
        let rejected = &self.rejected;
        let free = |candidate: &str| {
            let reason_path = rejected.join(format!("{candidate}{REASON_SUFFIX}"));
            match fs::read(&reason_path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => true,
                Err(_) => false,
                Ok(bytes) => digest.is_some() && reason_digest(&bytes).as_deref() == digest,
            }
        };
        let final_name =
            move_no_replace_with(&self.incoming, name, rejected, free, |final_name| {
                write_atomic(
                    rejected,
                    &format!("{final_name}{REASON_SUFFIX}"),
                    reason(final_name).as_bytes(),
                )
            })?;
        sync_dir(rejected)?;
        sync_dir(&self.incoming)?;
        Ok(final_name)
    }
}

/// The `sha256` recorded in a reason file.
fn reason_digest(bytes: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    value.get("sha256")?.as_str().map(str::to_owned)
}

/// Whether a name is one that uploads use while a file is being written.
pub fn is_temp_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    name.starts_with('.')
        || name.ends_with('~')
        || [".tmp", ".part", ".partial", ".filepart"]
            .iter()
            .any(|ext| lower.ends_with(ext))
}

/// `a.json`, `a.1.json`, `a.2.json`, …: the `n`th name to try for `name`.
pub fn numbered_name(name: &str, n: u32) -> String {
    if n == 0 {
        return name.to_owned();
    }
    match name.rsplit_once('.') {
        Some((stem, extension)) if !stem.is_empty() => format!("{stem}.{n}.{extension}"),
        _ => format!("{name}.{n}"),
    }
}

fn move_no_replace(
    from: &Path,
    name: &str,
    to: &Path,
    free: impl Fn(&str) -> bool,
) -> io::Result<String> {
    move_no_replace_with(from, name, to, free, |_| Ok(()))
}

/// Renames `from/name` to the first free numbered name in `to`, calling `before`
/// with that name first. The rename refuses to replace (RENAME_NOREPLACE), so a
/// name taken meanwhile is skipped, never overwritten.
fn move_no_replace_with(
    from: &Path,
    name: &str,
    to: &Path,
    free: impl Fn(&str) -> bool,
    before: impl Fn(&str) -> io::Result<()>,
) -> io::Result<String> {
    let source = from.join(name);
    for n in 0..u32::MAX {
        let candidate = numbered_name(name, n);
        let target = to.join(&candidate);
        if target.symlink_metadata().is_ok() || !free(&candidate) {
            continue;
        }
        before(&candidate)?;
        match rename_no_replace(&source, &target) {
            Ok(()) => return Ok(candidate),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::other("no free name"))
}

fn rename_no_replace(source: &Path, target: &Path) -> io::Result<()> {
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

/// Writes `dir/name` through a temporary file: write, fsync, rename, fsync dir.
/// The file is readable by all (0644, whatever the umask): the folder it lies in
/// decides who may read it, and node_exporter must read the metrics file.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = File::create(&temp)?;
    file.set_permissions(fs::Permissions::from_mode(0o644))?;
    file.write_all(bytes)?;
    file.sync_all()?;
    drop(file);
    fs::rename(&temp, dir.join(name))?;
    sync_dir(dir)
}

/// Makes a rename into or out of `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names() {
        for name in [
            ".a.json",
            "a.json.tmp",
            "a.json.PART",
            "a.partial",
            "a.filepart",
            "a.json~",
        ] {
            assert!(is_temp_name(name), "{name}");
        }
        for name in ["a.json", "a.ndjson", "part.json", "a.tmp.json"] {
            assert!(!is_temp_name(name), "{name}");
        }
    }

    #[test]
    fn numbered_names() {
        assert_eq!(numbered_name("a.json", 0), "a.json");
        assert_eq!(
            numbered_name("a.json", 1),
            "a.json".replace(".json", ".1.json")
        );
        assert_eq!(numbered_name("a.b.json", 2), "a.b.2.json");
        assert_eq!(numbered_name("noext", 1), "noext.1");
        assert_eq!(numbered_name(".hidden", 1), ".hidden.1");
    }

    #[test]
    fn moves_never_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let spool = Spool::create(dir.path()).unwrap();
        for content in ["one", "two", "three"] {
            fs::write(spool.incoming.join("a.json"), content).unwrap();
            spool.archive("a.json").unwrap();
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
        fs::write(spool.incoming.join("b.json"), "x").unwrap();
        fs::write(spool.rejected.join("b.json.reason.json"), "not ours").unwrap();
        let reason = |final_name: &str| format!("reason for {final_name}");
        let name = spool.reject("b.json", Some("d1"), reason).unwrap();
        assert_eq!(name, "b.1.json");
        let read = |name: &str| fs::read_to_string(spool.rejected.join(name)).unwrap();
        assert_eq!(read("b.1.json.reason.json"), "reason for b.1.json");
        assert_eq!(read("b.json.reason.json"), "not ours");
        // A reason file orphaned by a crash, for the same bytes, is taken over.
        fs::write(spool.incoming.join("c.json"), "y").unwrap();
        fs::write(
            spool.rejected.join("c.json.reason.json"),
            r#"{"sha256":"d2"}"#,
        )
        .unwrap();
        let name = spool
            .reject("c.json", Some("d2"), |_| "fresh".to_owned())
            .unwrap();
        assert_eq!(name, "c.json");
        assert_eq!(read("c.json.reason.json"), "fresh");
    }
}
