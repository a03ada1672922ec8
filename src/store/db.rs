//! Which database `--db` names, decided once from its text: a SQLite file or a
//! PostgreSQL URI. Every command and the daemon take a `Db`; the store's openers
//! (`Store::open`, `open_read_only`, `open_for_dry_run`, `ChangeFeed::open`) match
//! on it to pick the backend, and nothing asks what the text was.

use std::ffi::OsStr;
use std::fmt;
use std::path::{Path, PathBuf};

/// A SQLite file a read-only command (`changes`, `ftl`) needs and cannot find or
/// look at: its own error, since SQLite would only say "unable to open".
#[derive(Debug, thiserror::Error)]
pub enum MissingFile {
    #[error(
        "database {0}: does not exist; start `spoolite run` once, or point --db at the site's database"
    )]
    Missing(PathBuf),
    #[error("database {path}: {source}")]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The SQLite file at `path` exists and can be looked at.
pub fn require_file(path: &Path) -> Result<(), MissingFile> {
    std::fs::metadata(path)
        .map(drop)
        .map_err(|error| match error.kind() {
            std::io::ErrorKind::NotFound => MissingFile::Missing(path.to_owned()),
            _ => MissingFile::Unreadable {
                path: path.to_owned(),
                source: error,
            },
        })
}

/// The database a command reads or writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Db {
    /// A SQLite file (or where one is to be created).
    Sqlite(PathBuf),
    /// A PostgreSQL database many writers share.
    Postgres(PgTarget),
}

/// A PostgreSQL database as libpq names it: `postgres://…` or `postgresql://…`
/// (`host=` a socket folder included), and the file holding its password when
/// the URI holds none (`--db-password-file`). Its text may hold a password, so
/// it is shown only through `name`.
#[derive(Clone, PartialEq, Eq)]
pub struct PgTarget {
    uri: String,
    password_file: Option<PathBuf>,
}

impl PgTarget {
    /// The URI as given, password included: for the connection only.
    pub(crate) fn uri(&self) -> &str {
        &self.uri
    }

    /// The file whose one line is the password of every connection to this
    /// database, read at each connection.
    pub(crate) fn password_file(&self) -> Option<&Path> {
        self.password_file.as_deref()
    }

    /// The URI with any password in it replaced, for logs and messages.
    pub(crate) fn name(&self) -> String {
        redacted(&self.uri)
    }
}

impl fmt::Debug for PgTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PgTarget").field(&self.name()).finish()
    }
}

impl Db {
    /// Reads `--db`: a `postgres://` or `postgresql://` URI (any case) names a
    /// PostgreSQL database; anything else is a SQLite file's path.
    pub fn parse(text: &OsStr) -> Db {
        let lossy = text.to_string_lossy();
        let lower = lossy.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            // A URI with bytes that are not UTF-8 is still meant for a server
            // (which refuses it, by name), never a SQLite file under `postgres:`.
            return Db::Postgres(PgTarget {
                uri: lossy.into_owned(),
                password_file: None,
            });
        }
        Db::Sqlite(PathBuf::from(text))
    }

    /// The database as logs and messages name it: a path, or a URI without its
    /// password.
    pub(crate) fn name(&self) -> String {
        match self {
            Db::Sqlite(path) => path.display().to_string(),
            Db::Postgres(target) => target.name(),
        }
    }

    /// The SQLite file, or `None` for a database on a server (which is no file
    /// that exists or not, and keeps no WAL beside it).
    pub(crate) fn file(&self) -> Option<&Path> {
        match self {
            Db::Sqlite(path) => Some(path),
            Db::Postgres(_) => None,
        }
    }

    /// The database with the file of its password (`--db-password-file`);
    /// refused beside a SQLite file, which has no password.
    pub fn with_password_file(self, password_file: &Path) -> Result<Db, String> {
        match self {
            Db::Postgres(target) => Ok(Db::Postgres(PgTarget {
                password_file: Some(password_file.to_owned()),
                ..target
            })),
            Db::Sqlite(path) => Err(format!(
                "--db-password-file {} (SPOOLITE_DB_PASSWORD_FILE) is for a PostgreSQL \
                 database, but --db {} is a SQLite file, which has no password: leave the \
                 password file out, or point --db at a postgresql:// URI",
                password_file.display(),
                path.display()
            )),
        }
    }

    /// Whether the database is one file, with its WAL beside it.
    pub(crate) fn is_file(&self) -> bool {
        self.file().is_some()
    }
}

impl fmt::Display for Db {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// The URI with any password in it replaced, for logs and error messages.
pub(crate) fn redacted(uri: &str) -> String {
    let mut out = uri.to_owned();
    // postgresql://user:password@host/…
    if let Some(scheme_end) = out.find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = out[authority_start..]
            .find(['/', '?'])
            .map_or(out.len(), |at| authority_start + at);
        if let Some(at) = out[authority_start..authority_end].rfind('@') {
            let userinfo = &out[authority_start..authority_start + at];
            if let Some(colon) = userinfo.find(':') {
                let start = authority_start + colon + 1;
                out.replace_range(start..authority_start + at, "***");
            }
        }
    }
    // …?password=secret&…
    if let Some(query) = out.find('?') {
        let (head, tail) = out.split_at(query + 1);
        let params: Vec<String> = tail
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("password") => {
                    format!("{name}=***")
                }
                _ => param.to_owned(),
            })
            .collect();
        out = format!("{head}{}", params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_postgres_uri_in_any_case_is_postgres_and_anything_else_a_file() {
        for uri in [
            "postgres://h/db",
            "PostgreSQL:///db?host=/tmp",
            "postgresql://u@h/d",
        ] {
            assert!(!Db::parse(OsStr::new(uri)).is_file(), "{uri}");
        }
        for path in [
            "./postgres.db",
            "postgres:/x",
            "spoolite.db",
            "/var/lib/postgres://x",
        ] {
            assert_eq!(
                Db::parse(OsStr::new(path)),
                Db::Sqlite(PathBuf::from(path)),
                "{path}"
            );
        }
    }

    #[test]
    fn a_password_never_shows_in_the_name_debug_or_display() {
        let db = Db::parse(OsStr::new("postgresql://spoolite:s3cret@h/db"));
        for shown in [db.name(), format!("{db}"), format!("{db:?}")] {
            assert!(!shown.contains("s3cret"), "{shown}");
        }
    }

    #[test]
    fn a_password_never_reaches_a_message() {
        assert_eq!(
            redacted("postgresql://ops:s3cret@db.example/spoolite?sslmode=require"),
            "postgresql://ops:***@db.example/spoolite?sslmode=require"
        );
        assert_eq!(
            redacted("postgres:///spoolite?host=/run/pg&password=s3cret&user=ops"),
            "postgres:///spoolite?host=/run/pg&password=***&user=ops"
        );
        assert_eq!(
            redacted("postgresql://ops@db/spoolite"),
            "postgresql://ops@db/spoolite"
        );
    }
}
