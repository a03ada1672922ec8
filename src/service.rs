//! Tells systemd how the daemon is doing, by the sd_notify protocol: `READY=1` once
//! start-up is done, `WATCHDOG=1` while the loop turns, `STOPPING=1` at the end.
//! Without `NOTIFY_SOCKET` (not under systemd) every call does nothing.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::{Duration, Instant};

pub(crate) struct Notifier {
    target: Option<(UnixDatagram, SocketAddr)>,
    /// How often to ping: half the `WatchdogSec=` systemd gave us.
    watchdog_every: Option<Duration>,
    last_ping: Instant,
}

impl Notifier {
    pub(crate) fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let bytes = path.as_encoded_bytes();
            let addr = match bytes.strip_prefix(b"@") {
                Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name),
                None => SocketAddr::from_pathname(&path),
            };
            match (UnixDatagram::unbound(), addr) {
                (Ok(socket), Ok(addr)) => Some((socket, addr)),
                (Err(error), _) | (_, Err(error)) => {
                    log::warn!("systemd notify socket {path:?}: {error}");
                    None
                }
            }
        });
        let for_us =
            std::env::var("WATCHDOG_PID").map_or(true, |pid| pid == std::process::id().to_string());
        let watchdog_every = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|usec| usec.parse::<u64>().ok())
            .filter(|_| for_us && target.is_some())
            .map(|usec| Duration::from_micros(usec) / 2);
        Notifier {
            target,
            watchdog_every,
            last_ping: Instant::now(),
        }
    }

    /// The longest the loop may sleep and still ping in time.
    pub(crate) fn watchdog_every(&self) -> Option<Duration> {
        self.watchdog_every
    }

    pub(crate) fn ready(&self) {
        self.send("READY=1");
    }

    pub(crate) fn stopping(&self) {
        self.send("STOPPING=1");
    }

    /// Pings the watchdog when half its interval has passed since the last ping.
    pub(crate) fn ping_if_due(&mut self) {
        if let Some(every) = self.watchdog_every
            && self.last_ping.elapsed() >= every
        {
            self.send("WATCHDOG=1");
            self.last_ping = Instant::now();
        }
    }

    fn send(&self, message: &str) {
        if let Some((socket, addr)) = &self.target
            && let Err(error) = socket.send_to_addr(message.as_bytes(), addr)
        {
            log::warn!("tell systemd {message}: {error}");
        }
    }
}
