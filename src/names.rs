//! File names as spoolite records, logs and numbers them. A name need not be UTF-8:
//! wherever it is recorded (the inbox, quarantine, a reason file) each invalid byte
//! reads as U+FFFD, in a log line every character that could split or forge a line is
//! escaped, and a name numbered for archive/ or rejected/ is shortened to fit the
//! filesystem, never split inside a character.

use std::ffi::{CString, OsStr, OsString};
use std::fmt::Write as _;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// The longest file name Linux allows (NAME_MAX), in bytes.
pub(crate) const NAME_BYTES_MAX: usize = 255;

/// The name as recorded: UTF-8, each invalid byte as U+FFFD.
pub(crate) fn lossy(name: &OsStr) -> String {
    name.to_string_lossy().into_owned()
}

/// The base name of `path`, as recorded.
pub(crate) fn base_name(path: &Path) -> String {
    path.file_name().map(lossy).unwrap_or_default()
}

/// The name for a log line: as recorded, with control characters (a newline, a
/// carriage return, an escape sequence), backslashes and Unicode line separators
/// written as escapes, so that no name can split a line or forge one.
pub(crate) fn escaped(name: &str) -> String {
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

/// The longest name, in bytes, that the filesystem of `dir` allows: what
/// pathconf(_PC_NAME_MAX) says, never more than NAME_MAX (a larger answer would only
/// let a rename fail later), NAME_MAX when it cannot say.
pub(crate) fn name_bytes_max(dir: &Path) -> usize {
    let Ok(c_dir) = CString::new(dir.as_os_str().as_bytes()) else {
        return NAME_BYTES_MAX;
    };
    // SAFETY: a valid NUL-terminated path; pathconf only reads it.
    let answer = unsafe { libc::pathconf(c_dir.as_ptr(), libc::_PC_NAME_MAX) };
    usize::try_from(answer)
        .ok()
        .filter(|&n| n > 0)
        .map_or(NAME_BYTES_MAX, |n| n.min(NAME_BYTES_MAX))
}

/// The `n`th name to try for `name` in a folder where names may be at most `room`
/// bytes: `a.json`, `a.1.json`, `a.2.json`, … (the counter goes before the
/// extension). When the name with its counter is too long, the stem is shortened at
/// a character boundary, keeping the extension; an extension so long that not one
/// character of the stem fits beside it is cut with the rest. `None` when not even
/// one character fits.
pub(crate) fn numbered(name: &OsStr, n: u32, room: usize) -> Option<OsString> {
    let bytes = name.as_bytes();
    if n == 0 && bytes.len() <= room {
        return Some(name.to_owned());
    }
    let counter = if n == 0 {
        String::new()
    } else {
        format!(".{n}")
    };
    let (stem, extension) = split_extension(bytes);
    let tail_bytes = counter.len() + extension.len();
    let (stem, extension) = if first_unit_len(stem) + tail_bytes <= room {
        (stem, extension)
    } else {
        (bytes, &[][..])
    };
    let budget = room.checked_sub(counter.len() + extension.len())?;
    let stem = cut(stem, budget);
    if stem.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(stem.len() + counter.len() + extension.len());
    out.extend_from_slice(stem);
    out.extend_from_slice(counter.as_bytes());
    out.extend_from_slice(extension);
    Some(OsString::from_vec(out))
}

/// `(stem, extension)`, the extension with its dot: what follows the last dot that
/// is not the first byte (`.hidden` and `noext` have none).
fn split_extension(bytes: &[u8]) -> (&[u8], &[u8]) {
    match bytes.iter().rposition(|&b| b == b'.') {
        Some(dot) if dot > 0 => bytes.split_at(dot),
        _ => (bytes, &[]),
    }
}

/// The bytes of the first character of `bytes` (1 for an invalid byte, 0 when
/// empty).
fn first_unit_len(bytes: &[u8]) -> usize {
    match bytes.utf8_chunks().next() {
        Some(chunk) => chunk
            .valid()
            .chars()
            .next()
            .map_or(usize::from(!chunk.invalid().is_empty()), char::len_utf8),
        None => 0,
    }
}

/// The longest start of `bytes` of at most `budget` bytes that ends on a character
/// boundary. Bytes that are not UTF-8 are each a unit of their own, so a cut never
/// splits a valid sequence and never leaves half of one.
fn cut(bytes: &[u8], budget: usize) -> &[u8] {
    if bytes.len() <= budget {
        return bytes;
    }
    let mut end = 0;
    for chunk in bytes.utf8_chunks() {
        let units = chunk
            .valid()
            .chars()
            .map(char::len_utf8)
            .chain(chunk.invalid().iter().map(|_| 1));
        for unit in units {
            if end + unit > budget {
                return &bytes[..end];
            }
            end += unit;
        }
    }
    &bytes[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(bytes: &[u8]) -> &OsStr {
        OsStr::from_bytes(bytes)
    }

    /// `numbered(name, n, room)` is `expected`.
    fn check(name: &[u8], n: u32, room: usize, expected: Option<&[u8]>) {
        let got = numbered(os(name), n, room);
        assert_eq!(
            got.as_deref().map(OsStr::as_bytes),
            expected,
            "numbered({:?}, {n}, {room})",
            os(name)
        );
    }

    #[test]
    fn counters_go_before_the_extension() {
        check(b"a.json", 0, 255, Some(b"a.json"));
        check(b"a.json", 1, 255, Some(b"a.1.json"));
        check(b"a.b.json", 2, 255, Some(b"a.b.2.json"));
        check(b"noext", 1, 255, Some(b"noext.1"));
        check(b".hidden", 1, 255, Some(b".hidden.1"));
        check(b"a.", 3, 255, Some(b"a.3."));
    }

    #[test]
    fn long_stems_are_cut_at_a_character_boundary_keeping_the_extension() {
        check(b"abcdef.json", 0, 8, Some(b"abc.json"));
        check(b"abcdef.json", 1, 8, Some(b"a.1.json"));
        check(b"abcdef.json", 12, 8, Some(b"abcde.12"));
        check(b"abcdef.json", 10, 9, Some(b"a.10.json"));
        // "é" is two bytes: never split.
        check("aéé.json".as_bytes(), 0, 8, Some("aé.json".as_bytes()));
        check("aéé.json".as_bytes(), 0, 7, Some("a.json".as_bytes()));
        // Bytes that are not UTF-8 are units of their own; a valid "é" after them is
        // still whole or gone.
        check(b"a\xff\xfe\xc3\xa9.json", 0, 8, Some(b"a\xff\xfe.json"));
        check(b"a\xff\xfe\xc3\xa9.json", 0, 7, Some(b"a\xff.json"));
        // An extension that leaves no room for the stem is cut with the rest.
        check(b"a.verylongextension", 1, 10, Some(b"a.verylo.1"));
        check(b"abc", 1, 2, None);
    }

    #[test]
    fn every_numbered_name_fits_keeps_its_extension_and_cuts_only_between_characters() {
        let units: [&[u8]; 5] = [
            b"a",
            "é".as_bytes(),
            "日".as_bytes(),
            "😀".as_bytes(),
            b"\xff",
        ];
        for room in [243, 255] {
            for len in 1..=255 {
                for unit in units {
                    let mut stem = b"s".to_vec();
                    while stem.len() + unit.len() + 5 <= len {
                        stem.extend_from_slice(unit);
                    }
                    let name = [stem.as_slice(), b".json"].concat();
                    for n in [0, 1, 9, 10, 999, u32::MAX] {
                        let got = numbered(os(&name), n, room).expect("a name fits");
                        let got = got.as_bytes();
                        assert!(got.len() <= room, "{:?}", os(got));
                        let tail = if n == 0 {
                            b".json".to_vec()
                        } else {
                            format!(".{n}.json").into_bytes()
                        };
                        assert!(got.ends_with(&tail), "{:?}", os(got));
                        let kept = &got[..got.len() - tail.len()];
                        assert!(stem.starts_with(kept), "{:?}", os(got));
                        // Cut between characters: valid UTF-8 stays valid.
                        if unit != b"\xff" {
                            assert!(std::str::from_utf8(got).is_ok(), "{:?}", os(got));
                        }
                    }
                }
            }
        }
    }

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
