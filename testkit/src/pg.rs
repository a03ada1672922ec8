//! A throwaway PostgreSQL server.
//!
//! `Server::start` makes a cluster with `initdb` in `DIR/data` (as the `postgres`
//! OS user when the caller runs as root, since the server refuses to run as root;
//! the folder is then that user's), and starts it with `pg_ctl -w` (a bounded
//! wait) listening on no TCP address, only on a unix socket in `DIR`, its log in
//! `DIR/server.log`. The caller may stop it (`-m fast` or `immediate`) and start it
//! again. Dropped, a running server is stopped `-m immediate` and `DIR` removed.
//!
//! The server's programs are looked for on `PATH`, then in Debian's
//! `/usr/lib/postgresql/VERSION/bin`; none found is an error saying what to
//! install. Every program the other user runs is the installation's own, and
//! `DIR` is checked to be writable by that user before `initdb` runs, so nothing
//! of the caller's tree (a private checkout, its `target/`) needs to be reachable
//! by it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

/// The port the server listens on (and names its socket after) unless a `port=`
/// setting says otherwise.
pub const DEFAULT_PORT: u16 = 5432;

/// The longest unix socket path (`sun_path` holds 108 bytes with its NUL).
const SOCKET_PATH_MAX: usize = 107;

/// Where the server's folder is.
#[derive(Debug, Clone)]
pub enum Place {
    /// A new folder `PREFIX…` (mode 0755) in the temporary folder (`$TMPDIR`), or,
    /// when the postgres user cannot reach that one (a `$TMPDIR` inside a private
    /// checkout, say), in `/tmp` or else `/var/tmp`, which every user may reach;
    /// `Server::moved` then says why.
    Temp { prefix: String },
    /// `dir`, made afresh: a server an earlier run left there is stopped and the
    /// folder removed first. Refused (before `initdb` runs) when its socket path
    /// would be too long or, as root, the `postgres` user cannot write it (a
    /// folder above it is closed to that user); then, with `or_temp`, the server
    /// goes into a new folder as `Temp { prefix: or_temp }` does instead, and
    /// `Server::moved` says why.
    At {
        dir: PathBuf,
        or_temp: Option<String>,
    },
}

/// How to make and start a server.
#[derive(Debug, Clone)]
pub struct Config {
    /// The superuser `initdb` makes; clients connect as it, trusted, over the
    /// socket.
    pub superuser: String,
    pub place: Place,
    /// Settings after the socket's own (`-c listen_addresses='' -c
    /// unix_socket_directories='DIR'`), as `pg_ctl -o` takes them, e.g.
    /// `-c shared_buffers=16MB -c port=5433`; empty: the server's defaults.
    pub settings: String,
    /// How long `pg_ctl` waits for the server to start or stop, in seconds.
    pub wait_secs: u32,
}

/// A server made by `initdb` and started by `pg_ctl`; see the module's text.
pub struct Server {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    superuser: String,
    /// The `-o` options it was started with, to start it again.
    options: String,
    /// The `port=` among the settings, else `DEFAULT_PORT`; it names the socket too.
    port: u16,
    wait_secs: String,
    running: AtomicBool,
    /// Why the server is not in the folder asked for, when it is not.
    moved: Option<String>,
}

impl Server {
    /// Makes the cluster and starts the server; waits until it accepts connections.
    pub fn start(config: Config) -> Result<Server, String> {
        let bin = server_bin_dir()?;
        let as_postgres = running_as_root();
        let mut moved = None;
        let dir = match &config.place {
            Place::Temp { prefix } => {
                let (dir, why) = temp_dir_in(&temp_roots(), prefix, as_postgres)?;
                moved = why;
                dir
            }
            Place::At { dir, or_temp } => {
                let dir = std::path::absolute(dir)
                    .map_err(|e| format!("the absolute path of {}: {e}", dir.display()))?;
                match (prepare_dir(&bin, &dir, as_postgres), or_temp) {
                    (Ok(()), _) => dir,
                    (Err(why), None) => return Err(why),
                    (Err(why), Some(prefix)) => {
                        let (other, also) = temp_dir_in(&temp_roots(), prefix, as_postgres)
                            .map_err(|e| format!("{why}; and {e}"))?;
                        moved = Some(match also {
                            Some(also) => format!("{why}; {also}"),
                            None => why,
                        });
                        other
                    }
                }
            }
        };
        let options = format!(
            "-c listen_addresses='' -c unix_socket_directories='{}' {}",
            dir.display(),
            config.settings
        )
        .trim_end()
        .to_owned();
        let port = config
            .settings
            .split_whitespace()
            .find_map(|option| option.strip_prefix("port=")?.parse().ok())
            .unwrap_or(DEFAULT_PORT);
        // From here on, dropping the server removes the folder.
        let server = Server {
            dir,
            bin,
            as_postgres,
            superuser: config.superuser,
            options,
            port,
            wait_secs: config.wait_secs.to_string(),
            running: AtomicBool::new(false),
            moved,
        };
        let mut initdb = server.command("initdb");
        initdb
            .arg("-D")
            .arg(server.data_dir())
            .args(["-U", &server.superuser, "-A", "trust", "-E", "UTF8"])
            .arg("--locale=C")
            // The cluster is thrown away at the end: initdb need not wait for its
            // files to reach the disk. The server itself keeps fsync on.
            .arg("--no-sync");
        run(&mut initdb, "initdb")?;
        server.start_again()?;
        Ok(server)
    }

    /// Starts the (stopped) server, with the options it first had; waits until it
    /// accepts connections. A failure carries the server's log.
    pub fn start_again(&self) -> Result<(), String> {
        let mut start = self.command("pg_ctl");
        start
            .args(["start", "-w", "-t", &self.wait_secs, "-D"])
            .arg(self.data_dir())
            .arg("-l")
            .arg(self.log_path())
            .args(["-o", &self.options]);
        run(&mut start, "pg_ctl start")
            .map_err(|message| format!("{message}\nserver.log:\n{}", self.log()))?;
        self.running.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Stops the server (`pg_ctl stop -m mode`: `fast` ends every session,
    /// `immediate` is a crash), waiting until it is down.
    pub fn stop(&self, mode: &str) -> Result<(), String> {
        let mut stop = self.command("pg_ctl");
        stop.args(["stop", "-w", "-t", &self.wait_secs, "-m", mode, "-D"])
            .arg(self.data_dir());
        run(&mut stop, "pg_ctl stop")?;
        self.running.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Stops the server `-m fast` and removes its folder; an error when either
    /// fails (the drop then still stops it `-m immediate`).
    pub fn shut_down(self) -> Result<(), String> {
        self.stop("fast")?;
        std::fs::remove_dir_all(&self.dir)
            .map_err(|e| format!("remove {}: {e}", self.dir.display()))
    }

    /// The server's folder, which holds its unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The cluster's folder (`postgresql.conf`, `pg_hba.conf`), owned by the
    /// postgres user when the caller runs as root.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The port it listens on (TCP, when `listen_addresses` has an address), which
    /// also names its socket.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Why the server is not in the folder asked for (`Place::At`), or not in the
    /// temporary folder (`Place::Temp`), when it is not.
    pub fn moved(&self) -> Option<&str> {
        self.moved.as_deref()
    }

    pub fn superuser(&self) -> &str {
        &self.superuser
    }

    fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The server's log (empty when it cannot be read).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The folder of `initdb`, `pg_ctl` and `postgres`.
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// `psql` beside the server's programs (where that folder is a symlink farm,
    /// the folder `initdb` really is in), else `psql` from PATH.
    pub fn psql(&self) -> PathBuf {
        let real = std::fs::canonicalize(self.bin.join("initdb"))
            .ok()
            .and_then(|initdb| initdb.parent().map(Path::to_owned));
        [Some(self.bin.clone()), real]
            .into_iter()
            .flatten()
            .map(|dir| dir.join("psql"))
            .find(|psql| psql.is_file())
            .unwrap_or_else(|| PathBuf::from("psql"))
    }

    /// The libpq URI of database `name` as the superuser, as a user passes it to
    /// `--db`: the socket folder in `host=`.
    pub fn uri(&self, name: &str) -> String {
        format!(
            "postgresql:///{name}?host={}&port={}&user={}",
            self.dir.display(),
            self.port,
            self.superuser
        )
    }

    /// A connection to database `name` as the superuser.
    pub fn connect(&self, name: &str) -> Result<postgres::Client, postgres::Error> {
        postgres::Client::connect(&self.uri(name), postgres::NoTls)
    }

    /// Runs `sql` (one or more statements) in the `postgres` database.
    pub fn admin(&self, sql: &str) -> Result<(), postgres::Error> {
        self.connect("postgres")?.batch_execute(sql)
    }

    /// A new, empty database `name`.
    pub fn create_db(&self, name: &str) -> Result<(), String> {
        let sql = format!("CREATE DATABASE {name}");
        self.admin(&sql).map_err(|e| format!("{sql}: {e}"))
    }

    /// Drops database `name` if there is one, ending any session still in it.
    pub fn drop_db(&self, name: &str) -> Result<(), String> {
        let sql = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
        self.admin(&sql).map_err(|e| format!("{sql}: {e}"))
    }

    /// `program` of the server's installation, run as the postgres user when the
    /// caller runs as root.
    pub fn command(&self, program: &str) -> Command {
        pg_command(&self.bin, program, self.as_postgres)
    }
}

impl Drop for Server {
    /// A running server is stopped at once (`-m immediate`); the folder is removed
    /// (root may remove the postgres user's files).
    fn drop(&mut self) {
        if self.running.load(Ordering::SeqCst)
            && let Err(message) = self.stop("immediate")
        {
            eprintln!("PostgreSQL server in {}: {message}", self.dir.display());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The folders a temporary server folder is made in, in order: the temporary
/// folder, then `/tmp` and `/var/tmp`.
fn temp_roots() -> Vec<PathBuf> {
    let mut roots = vec![std::env::temp_dir()];
    for root in ["/tmp", "/var/tmp"] {
        let root = PathBuf::from(root);
        if !roots.contains(&root) {
            roots.push(root);
        }
    }
    roots
}

/// A new folder `PREFIX…`, mode 0755, in the first of `roots` where it can be
/// made with a socket path short enough and, as root, be handed to the postgres
/// user (who must be able to reach it: nothing of a private checkout is used).
/// Returns it and, when it is not in the first root, why the others were refused.
fn temp_dir_in(
    roots: &[PathBuf],
    prefix: &str,
    as_postgres: bool,
) -> Result<(PathBuf, Option<String>), String> {
    use std::os::unix::fs::PermissionsExt;
    let mut refused = Vec::new();
    for root in roots {
        let dir = match tempfile::Builder::new().prefix(prefix).tempdir_in(root) {
            Ok(dir) => dir.keep(),
            Err(e) => {
                refused.push(format!("no folder can be made in {}: {e}", root.display()));
                continue;
            }
        };
        let usable = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("chmod 0755 {}: {e}", dir.display()))
            .and_then(|()| check_socket_path(&dir))
            .and_then(|()| hand_over(&dir, as_postgres));
        match usable {
            Ok(()) => return Ok((dir, (!refused.is_empty()).then(|| refused.join("; ")))),
            Err(why) => {
                let _ = std::fs::remove_dir_all(&dir);
                refused.push(why);
            }
        }
    }
    Err(format!(
        "no folder for the PostgreSQL server: {}",
        refused.join("; ")
    ))
}

/// Fails when the server's socket in `dir` would have too long a path.
fn check_socket_path(dir: &Path) -> Result<(), String> {
    let socket = dir.join(format!(".s.PGSQL.{DEFAULT_PORT}"));
    if socket.as_os_str().len() > SOCKET_PATH_MAX {
        return Err(format!(
            "the socket path {} is longer than {SOCKET_PATH_MAX} bytes",
            socket.display()
        ));
    }
    Ok(())
}

/// Makes `dir` an empty folder the server may use: any server a killed run left
/// there stopped, the old folder removed, the socket path short enough, and the
/// folder handed to the postgres user when the caller runs as root.
fn prepare_dir(bin: &Path, dir: &Path, as_postgres: bool) -> Result<(), String> {
    check_socket_path(dir)?;
    if dir.join("data").join("postmaster.pid").exists() {
        let mut stop = pg_command(bin, "pg_ctl", as_postgres);
        stop.args(["stop", "-w", "-m", "immediate", "-D"])
            .arg(dir.join("data"));
        let _ = run(&mut stop, "pg_ctl stop (a server an earlier run left)");
    }
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| format!("remove {}: {e}", dir.display()))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    if let Err(why) = hand_over(dir, as_postgres) {
        let _ = std::fs::remove_dir_all(dir);
        return Err(why);
    }
    Ok(())
}

/// As root: gives `dir` to the postgres user and checks that it can write there
/// (a folder above it may be closed to it: a private checkout, say).
fn hand_over(dir: &Path, as_postgres: bool) -> Result<(), String> {
    if !as_postgres {
        return Ok(());
    }
    let mut chown = Command::new("chown");
    chown.arg("postgres:postgres").arg(dir);
    run(
        &mut chown,
        "chown to the postgres user (a server run by root needs an OS user `postgres`)",
    )?;
    let mut writable = Command::new("runuser");
    writable
        .args(["-u", "postgres", "--", "test", "-w"])
        .arg(dir);
    if run(&mut writable, "test -w").is_err() {
        return Err(format!(
            "the postgres user cannot write {} (a folder above it is closed to it)",
            dir.display()
        ));
    }
    Ok(())
}

fn running_as_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The folder holding `initdb`, `pg_ctl` and `postgres`: the one on PATH, else
/// the newest of Debian's `/usr/lib/postgresql/*/bin`.
pub fn server_bin_dir() -> Result<PathBuf, String> {
    let has_all = |dir: &Path| {
        ["initdb", "pg_ctl", "postgres"]
            .iter()
            .all(|name| dir.join(name).is_file())
    };
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .unwrap_or_default();
    if let Some(dir) = on_path.into_iter().find(|dir| has_all(dir)) {
        return Ok(dir);
    }
    let mut debian: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_all(bin))
        .collect();
    debian.sort();
    debian.pop().map(|(_, bin)| bin).ok_or_else(|| {
        "no PostgreSQL server (initdb, pg_ctl, postgres) on PATH or in \
         /usr/lib/postgresql/VERSION/bin; install it, e.g. `apt-get install postgresql`"
            .to_owned()
    })
}

/// `program` from `bin`, run as the postgres user when `as_postgres`.
fn pg_command(bin: &Path, program: &str, as_postgres: bool) -> Command {
    let program = bin.join(program);
    if as_postgres {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Runs `command` to its end (stdin null); a failure to start or an exit status
/// other than 0 is an error holding its output.
fn run(command: &mut Command, what: &str) -> Result<Output, String> {
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{what}: cannot run {command:?}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(place: Place) -> Config {
        Config {
            superuser: "spoolite_testkit".into(),
            place,
            settings: String::new(),
            wait_secs: 60,
        }
    }

    #[test]
    fn a_server_in_a_folder_of_its_own_stops_starts_again_and_goes_with_its_folder() {
        let server = Server::start(config(Place::Temp {
            prefix: "spoolite-testkit-pg-".into(),
        }))
        .expect("start");
        let dir = server.socket_dir().to_owned();
        server.create_db("kit").expect("create");
        let mut client = server.connect("kit").expect("connect");
        client
            .batch_execute("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
            .expect("write");
        let listen: String = client
            .query_one("SHOW listen_addresses", &[])
            .expect("show")
            .get(0);
        assert_eq!(listen, "", "no TCP");
        drop(client);
        server.stop("fast").expect("stop");
        assert!(server.connect("kit").is_err(), "a stopped server refuses");
        server.start_again().expect("start again");
        let x: i32 = server
            .connect("kit")
            .expect("connect again")
            .query_one("SELECT x FROM t", &[])
            .expect("read")
            .get(0);
        assert_eq!(x, 1);
        server.drop_db("kit").expect("drop");
        drop(server);
        assert!(!dir.exists(), "{} is removed", dir.display());
    }

    #[test]
    fn a_named_folder_is_made_afresh_and_removed_by_shut_down() {
        let parent = tempfile::Builder::new()
            .prefix("spoolite-testkit-at-")
            .tempdir()
            .expect("temp dir");
        let dir = parent.path().join("pg");
        std::fs::create_dir_all(dir.join("old")).expect("an old folder");
        let server = Server::start(config(Place::At {
            dir: dir.clone(),
            or_temp: None,
        }))
        .expect("start");
        assert!(!dir.join("old").exists(), "the old folder is gone");
        assert_eq!(server.moved(), None);
        assert!(
            server
                .uri("postgres")
                .contains(&format!("host={}", dir.display()))
        );
        server.shut_down().expect("shut down");
        assert!(!dir.exists());
    }

    #[test]
    fn a_named_folder_the_postgres_user_cannot_reach_is_refused_or_replaced() {
        if !running_as_root() {
            return;
        }
        // A folder closed to every other user, as a private checkout is.
        let private = tempfile::tempdir().expect("temp dir");
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))
                .expect("chmod 0700");
        }
        let wanted = private.path().join("pg");
        let error = match Server::start(config(Place::At {
            dir: wanted.clone(),
            or_temp: None,
        })) {
            Ok(_) => panic!("started in a folder the postgres user cannot reach"),
            Err(error) => error,
        };
        assert!(error.contains("cannot write"), "{error}");
        assert!(!wanted.exists());
        // With a temporary folder to fall back on, the server is there, and says why.
        let server = Server::start(config(Place::At {
            dir: wanted.clone(),
            or_temp: Some("spoolite-testkit-or-".into()),
        }))
        .expect("start in a temporary folder");
        let other = server.socket_dir().to_owned();
        assert!(!other.starts_with(private.path()), "{}", other.display());
        assert!(
            server
                .moved()
                .is_some_and(|why| why.contains("cannot write"))
        );
        drop(server);
        assert!(!other.exists() && !wanted.exists());
    }

    #[test]
    fn a_temporary_folder_the_postgres_user_cannot_reach_gives_way_to_the_next() {
        use std::os::unix::fs::PermissionsExt;
        // A $TMPDIR closed to every other user, as one in a private checkout is.
        let private = tempfile::tempdir().expect("temp dir");
        std::fs::set_permissions(private.path(), std::fs::Permissions::from_mode(0o700))
            .expect("chmod 0700");
        let roots = [private.path().to_owned(), PathBuf::from("/tmp")];
        let as_postgres = running_as_root();
        let (dir, why) =
            temp_dir_in(&roots, "spoolite-testkit-tmp-", as_postgres).expect("a folder");
        let mode = std::fs::metadata(&dir).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o755, "{}", dir.display());
        if as_postgres {
            assert!(dir.starts_with("/tmp"), "{}", dir.display());
            assert!(why.is_some_and(|why| why.contains("cannot write")));
            assert_eq!(std::fs::read_dir(private.path()).expect("list").count(), 0);
        } else {
            // The caller's own folder serves the caller's own server.
            assert!(dir.starts_with(private.path()) && why.is_none());
        }
        std::fs::remove_dir_all(&dir).expect("remove");
    }
}
