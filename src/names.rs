//! File names as spoolite records and logs them. A name need not be UTF-8: wherever
//! it is recorded (the inbox, quarantine, a reason file) each invalid byte reads as
//! U+FFFD, and in a log line every character that could split or forge a line is
//! escaped.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::path::Path;

/// The name as recorded: UTF-8, each invalid byte as U+FFFD.
pub fn lossy(name: &OsStr) -> String {
    name.to_string_lossy().into_owned()
}

/// The base name of `path`, as recorded.
pub fn base_name(path: &Path) -> String {
    path.file_name().map(lossy).unwrap_or_default()
}

/// The name for a log line: as recorded, with control characters (a newline, a
/// carriage return, an escape sequence), backslashes and Unicode line separators
/// written as escapes, so that no name can split a line or forge one.
pub fn escaped(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn names_never_split_a_log_line() {
        assert_eq!(escaped("a.json"), "a.json");
        assert_eq!(
            escaped("a.json\nprocessed b.json"),
            "a.json\\nprocessed b.json"
        );
        assert_eq!(escaped("x\u{1b}[31m\r\\"), "x\\u{1b}[31m\\r\\\\");
        assert_eq!(
            lossy(OsStr::from_bytes(b"caf\xe9.json")),
            "caf\u{fffd}.json"
        );
    }
}
