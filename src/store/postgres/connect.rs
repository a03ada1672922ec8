//! Connecting to a PostgreSQL database from the `--db` URI as libpq would. The
//! `postgres` crate reads most of libpq's URI, but not `sslmode=verify-ca` or
//! `verify-full` nor `sslrootcert`: those are taken out of the URI here and applied
//! with OpenSSL (`postgres-openssl`). The password is the URI's, or else the
//! content of the password file (`--db-password-file`, read at every connection,
//! so a rotated credential is picked up by the next one). Every message names the
//! database by its redacted URI and says what to do; none holds the password.

use std::path::{Path, PathBuf};
use std::time::Duration;

use openssl::ssl::{SslConnector, SslMethod, SslVerifyMode};
use openssl::x509::X509;
use openssl::x509::store::X509StoreBuilder;
use postgres::config::{Host, SslMode};
use postgres::{CancelToken, Client, Config, NoTls};
use postgres_openssl::MakeTlsConnector;

use crate::store::db::{PgTarget, redacted};
use crate::store::error::{StoreError, with_causes};

/// The socket folder a URI without a host connects to, as Debian's libpq does.
const DEFAULT_SOCKET_DIR: &str = "/run/postgresql";

/// How long to wait for a server that does not answer (libpq waits forever), unless
/// the URI says `connect_timeout=`: a daemon must get back to its back-off.
const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(10);

/// What `pg_stat_activity` shows for spoolite's sessions, unless the URI says
/// `application_name=`.
const APPLICATION_NAME: &str = "spoolite";

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No TLS.
    Disable,
    /// TLS when the server offers it (libpq's default).
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, and the server's certificate chains to `sslrootcert`.
    VerifyCa,
    /// As `VerifyCa`, and the certificate is for the host the URI names.
    VerifyFull,
}

impl Mode {
    fn parse(value: &str) -> Result<Mode, String> {
        Ok(match value {
            "disable" => Mode::Disable,
            "prefer" => Mode::Prefer,
            "require" => Mode::Require,
            "verify-ca" => Mode::VerifyCa,
            "verify-full" => Mode::VerifyFull,
            other => {
                return Err(format!(
                    "sslmode={other:?} is not one of disable, prefer, require, verify-ca, \
                     verify-full"
                ));
            }
        })
    }
}

/// libpq's `sslrootcert`: the CA certificates (PEM) a server's certificate must
/// chain to, or `system`, the machine's trusted ones.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RootCert {
    File(PathBuf),
    System,
}

/// The `--db` URI split into what the `postgres` crate reads and the TLS settings
/// applied here.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    /// The URI without `sslmode` and `sslrootcert`.
    uri: String,
    mode: Mode,
    root_cert: Option<RootCert>,
}

/// Takes `sslmode` and `sslrootcert` out of the URI's query (the last of each
/// wins, as in libpq).
fn split(uri: &str) -> Result<Target, String> {
    let mut target = Target {
        uri: uri.to_owned(),
        mode: Mode::Prefer,
        root_cert: None,
    };
    let Some((head, query)) = uri.split_once('?') else {
        return Ok(target);
    };
    let mut kept = Vec::new();
    for param in query.split('&') {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        match key {
            "sslmode" => target.mode = Mode::parse(&percent_decoded(value)?)?,
            "sslrootcert" => {
                let value = percent_decoded(value)?;
                target.root_cert = Some(match value.as_str() {
                    "system" => RootCert::System,
                    "" => return Err("sslrootcert= names no file".to_owned()),
                    path => RootCert::File(PathBuf::from(path)),
                });
            }
            _ => kept.push(param),
        }
    }
    target.uri = if kept.is_empty() {
        head.to_owned()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    Ok(target)
}

/// A URI component with its `%XX` escapes decoded.
fn percent_decoded(text: &str) -> Result<String, String> {
    let bad = || format!("{text:?} has a bad %-escape");
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = text.get(at + 1..at + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// The password a password file holds: its one line, without the line end.
fn password_from(path: &Path) -> Result<Vec<u8>, String> {
    let mut bytes = std::fs::read(path).map_err(|e| {
        format!(
            "read the password file {} (--db-password-file, SPOOLITE_DB_PASSWORD_FILE): {e}; \
             it must be readable by the user spoolite runs as (under systemd, hand it over \
             with LoadCredential=)",
            path.display()
        )
    })?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    if bytes.is_empty() {
        return Err(format!(
            "the password file {} is empty; write the password into it",
            path.display()
        ));
    }
    if bytes.contains(&b'\n') {
        return Err(format!(
            "the password file {} holds more than one line; it must hold the password \
             alone, on one line",
            path.display()
        ));
    }
    Ok(bytes)
}

/// How a request to cancel a connection's statement reaches the server: over a
/// connection of its own, with the TLS the connection was made with.
#[derive(Clone)]
pub(super) enum Canceller {
    Plain,
    Tls(MakeTlsConnector),
}

impl Canceller {
    /// Asks the server to cancel the statement `token`'s connection runs, if
    /// it still runs one (a request that comes when none runs is ignored).
    pub(super) fn cancel(&self, token: &CancelToken) -> Result<(), postgres::Error> {
        match self {
            Canceller::Plain => token.cancel_query(NoTls),
            Canceller::Tls(tls) => token.cancel_query(tls.clone()),
        }
    }
}

/// Opens a connection to the database `uri` names (see the module's comment),
/// and says how to cancel its statements.
pub(super) fn connect(db: &PgTarget) -> Result<(Client, Canceller), StoreError> {
    let uri = db.uri();
    let name = redacted(uri);
    let problem = |problem: String| StoreError::PgConnection {
        db: name.clone(),
        problem,
    };
    let target = split(uri).map_err(problem)?;
    let mut config: Config = target
        .uri
        .parse()
        .map_err(|e: postgres::Error| problem(format!("read the URI: {e}")))?;
    if config.get_hosts().is_empty() && config.get_hostaddrs().is_empty() {
        config.host_path(DEFAULT_SOCKET_DIR);
    }
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(CONNECT_TIMEOUT_DEFAULT);
    }
    if config.get_application_name().is_none() {
        config.application_name(APPLICATION_NAME);
    }
    if config.get_password().is_none()
        && let Some(file) = db.password_file()
    {
        config.password(password_from(file).map_err(problem)?);
    }
    // libpq uses no TLS over a unix socket, whatever sslmode says.
    let sockets_only = config
        .get_hosts()
        .iter()
        .all(|host| matches!(host, Host::Unix(_)))
        && config.get_hostaddrs().is_empty();
    let connected = if sockets_only || target.mode == Mode::Disable {
        config.ssl_mode(SslMode::Disable);
        config
            .connect(NoTls)
            .map(|client| (client, Canceller::Plain))
    } else {
        config.ssl_mode(match target.mode {
            Mode::Prefer => SslMode::Prefer,
            _ => SslMode::Require,
        });
        let tls = tls_connector(&target).map_err(problem)?;
        (config.connect(tls.clone())).map(|client| (client, Canceller::Tls(tls)))
    };
    connected.map_err(|source| match hint(&source, &target) {
        Some(hint) => problem(format!("{}; {hint}", with_causes(&source))),
        None => StoreError::PgConnect {
            db: redacted(uri),
            source,
        },
    })
}

/// The OpenSSL connector for `target`'s sslmode. As in libpq, a certificate is
/// checked against `sslrootcert` whenever one is given (so `require` with
/// `sslrootcert` checks the chain, as `verify-ca` does), and only against it:
/// the machine's trusted CAs count only with `sslrootcert=system`.
fn tls_connector(target: &Target) -> Result<MakeTlsConnector, String> {
    let tls_error = |e: openssl::error::ErrorStack| format!("set up TLS: {e}");
    let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(tls_error)?;
    let verify = matches!(target.mode, Mode::VerifyCa | Mode::VerifyFull);
    match (&target.root_cert, verify) {
        (None, false) => builder.set_verify(SslVerifyMode::NONE),
        (None, true) => {
            return Err(
                "sslmode=verify-ca and verify-full need sslrootcert=FILE, the CA certificate \
                 (PEM) that signed the server's certificate, or sslrootcert=system for the \
                 machine's trusted CAs; add it to the URI"
                    .to_owned(),
            );
        }
        // `SslConnector::builder` trusts the machine's CAs already.
        (Some(RootCert::System), _) => {}
        (Some(RootCert::File(path)), _) => {
            let mut store = X509StoreBuilder::new().map_err(tls_error)?;
            for certificate in ca_certificates(path)? {
                store.add_cert(certificate).map_err(tls_error)?;
            }
            builder.set_cert_store(store.build());
        }
    }
    let mut connector = MakeTlsConnector::new(builder.build());
    if target.mode != Mode::VerifyFull {
        connector.set_callback(|config, _host| {
            config.set_verify_hostname(false);
            Ok(())
        });
    }
    Ok(connector)
}

/// The certificates of the CA file `sslrootcert` names.
fn ca_certificates(path: &Path) -> Result<Vec<X509>, String> {
    let pem = std::fs::read(path).map_err(|e| {
        format!(
            "read the CA file sslrootcert={}: {e}; point sslrootcert at the CA certificate \
             (PEM) that signed the server's certificate, readable by the user spoolite runs as",
            path.display()
        )
    })?;
    let certificates = X509::stack_from_pem(&pem).unwrap_or_default();
    if certificates.is_empty() {
        return Err(format!(
            "the CA file sslrootcert={} holds no PEM certificate (-----BEGIN CERTIFICATE-----); \
             point sslrootcert at the CA certificate that signed the server's certificate",
            path.display()
        ));
    }
    Ok(certificates)
}

/// What the operator can do about a failed connection, when the failure says.
fn hint(error: &postgres::Error, target: &Target) -> Option<String> {
    let text = with_causes(error);
    if let Some(db_error) = error.as_db_error() {
        let code = db_error.code().code();
        if code == "28P01" {
            return Some(
                "check the password: the one in the URI, or the content of the file \
                 --db-password-file (SPOOLITE_DB_PASSWORD_FILE) names"
                    .to_owned(),
            );
        }
        if code == "28000" && db_error.message().contains("no encryption") {
            return Some(
                "the server takes this connection only encrypted: use sslmode=require, or \
                 sslmode=verify-full with sslrootcert=FILE"
                    .to_owned(),
            );
        }
        return None;
    }
    if text.contains("password missing") {
        return Some(
            "the server asks for a password: give it in a file named by --db-password-file \
             (SPOOLITE_DB_PASSWORD_FILE), or in the URI"
                .to_owned(),
        );
    }
    if !text.starts_with("error performing TLS handshake") {
        return None;
    }
    if text.contains("server does not support TLS") {
        return Some(
            "the server does not offer TLS (ssl = off in its configuration): turn ssl on, or \
             use sslmode=disable on a network where nobody can listen"
                .to_owned(),
        );
    }
    if text.contains("hostname mismatch") || text.contains("IP address mismatch") {
        return Some(
            "the server's certificate is not for the host the URI names: connect by a name \
             the certificate holds (or hostaddr=IP beside host=NAME), or have its \
             certificate issued for this name"
                .to_owned(),
        );
    }
    let root = match &target.root_cert {
        Some(RootCert::File(path)) => format!("the CA in sslrootcert={}", path.display()),
        Some(RootCert::System) | None => "the machine's trusted CAs".to_owned(),
    };
    Some(format!(
        "the server's certificate does not verify against {root}: point sslrootcert at the \
         CA that signed it"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(uri: &str, mode: Mode, root_cert: Option<RootCert>) -> Target {
        Target {
            uri: uri.to_owned(),
            mode,
            root_cert,
        }
    }

    #[test]
    fn tls_settings_leave_the_uri_and_the_rest_stays() {
        assert_eq!(
            split("postgresql://ops@db.example/spoolite"),
            Ok(target(
                "postgresql://ops@db.example/spoolite",
                Mode::Prefer,
                None
            ))
        );
        assert_eq!(
            split(
                "postgresql://db.example/spoolite?sslmode=verify-full&sslrootcert=/etc/ssl/my%20ca.pem&user=ops"
            ),
            Ok(target(
                "postgresql://db.example/spoolite?user=ops",
                Mode::VerifyFull,
                Some(RootCert::File(PathBuf::from("/etc/ssl/my ca.pem")))
            ))
        );
        assert_eq!(
            split("postgres:///spoolite?sslmode=disable&sslmode=require&sslrootcert=system"),
            Ok(target(
                "postgres:///spoolite",
                Mode::Require,
                Some(RootCert::System)
            ))
        );
        assert!(
            split("postgres://h/db?sslmode=allow")
                .unwrap_err()
                .contains("not one of disable")
        );
        assert!(
            split("postgres://h/db?sslrootcert=%zz")
                .unwrap_err()
                .contains("bad %-escape")
        );
    }

    #[test]
    fn a_password_file_holds_one_line() {
        let dir = tempfile::tempdir().expect("temp dir");
        let check = |content: &str| {
            let path = dir.path().join("password");
            std::fs::write(&path, content).expect("write");
            password_from(&path).map(|p| String::from_utf8(p).expect("text"))
        };
        assert_eq!(check("s3cret\n"), Ok("s3cret".to_owned()));
        assert_eq!(check("s3cret\r\n"), Ok("s3cret".to_owned()));
        assert_eq!(check("s3cret"), Ok("s3cret".to_owned()));
        assert_eq!(check(" sp ace \n"), Ok(" sp ace ".to_owned()));
        assert!(check("\n").unwrap_err().contains("is empty"));
        assert!(
            check("one\ntwo\n")
                .unwrap_err()
                .contains("more than one line")
        );
        let missing = password_from(&dir.path().join("nothing")).unwrap_err();
        assert!(missing.contains("nothing") && missing.contains("LoadCredential="));
        // No message holds the password.
        assert!(!check("one\ns3cret\n").unwrap_err().contains("s3cret"));
    }
}
