//! Where log lines go and how they look: under systemd (stderr is the journal
//! stream named by `JOURNAL_STREAM`) each line starts with its syslog priority
//! (`<3>` error … `<7>` debug) and carries no timestamp, since journald adds one
//! and reads the priority (`journalctl -p warning`); elsewhere env_logger's usual
//! lines with millisecond timestamps. `RUST_LOG` picks the level (default info).

use std::io::Write;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;

use log::Level;

/// Sets up the global logger for this process; call once, from main.
pub fn init() {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    if stderr_is_journal() {
        builder.format(|buf, record| {
            let text = journal_lines(record.level(), &record.args().to_string());
            buf.write_all(text.as_bytes())
        });
    } else {
        builder.format_timestamp_millis();
    }
    builder.init();
}

/// The syslog priority of a level, as sd-daemon(3) prefixes write it.
pub(crate) fn priority(level: Level) -> u8 {
    match level {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

/// A message as journal lines: every line of it with the priority prefix, so that a
/// message of several lines cannot leave a line at the default priority.
pub(crate) fn journal_lines(level: Level, message: &str) -> String {
    let prefix = format!("<{}>", priority(level));
    let mut out = String::with_capacity(message.len() + 8);
    for line in message.split('\n') {
        out.push_str(&prefix);
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Whether stderr is the journal stream systemd connected: `JOURNAL_STREAM` holds
/// its `device:inode`, and a child started from a service (a shell, a script)
/// inherits the variable with a stderr of its own, so both must match.
fn stderr_is_journal() -> bool {
    let Some(stream) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((device, inode)) = stream.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let Ok(fd) = std::io::stderr().as_fd().try_clone_to_owned() else {
        return false;
    };
    let Ok(meta) = std::fs::File::from(fd).metadata() else {
        return false;
    };
    device.parse() == Ok(meta.dev()) && inode.parse() == Ok(meta.ino())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_journal_line_carries_its_priority() {
        assert_eq!(journal_lines(Level::Error, "disk full"), "<3>disk full\n");
        assert_eq!(journal_lines(Level::Warn, "w"), "<4>w\n");
        assert_eq!(journal_lines(Level::Info, "i"), "<6>i\n");
        assert_eq!(journal_lines(Level::Debug, "d"), "<7>d\n");
        assert_eq!(journal_lines(Level::Trace, "t"), "<7>t\n");
        assert_eq!(journal_lines(Level::Warn, "a\nb"), "<4>a\n<4>b\n");
    }
}
