//! The whole-file rules that come before parsing: the format by extension, the size
//! limit, an empty file, and the encoding (UTF-8 throughout, or cut inside its last
//! character, which counts as still arriving; `LineOf` says where a bad byte stands). Pure: names, sizes and chunks of bytes
//! in, a `Rejection` out. With the readers' own rejections, these are every reason a
//! whole file is rejected; the daemon's readiness rules decide only when a file that
//! may still be arriving has waited long enough.

use super::{Format, RejectReason, Rejection};
use crate::names;

/// The rules that need only the name and the size: the format by extension, the
/// size limit, an empty file.
pub(crate) fn preflight(name: &str, bytes: u64, file_bytes_max: u64) -> Result<Format, Rejection> {
    let Some(format) = Format::from_name(name) else {
        return Err(Rejection::new(
            RejectReason::UnsupportedType,
            format!(
                "{:?} does not end in .json, .ndjson, .jsonl, .csv or .xml (or one of them and \
                 .gz); rename it if it is a batch",
                names::escaped(name)
            ),
        ));
    };
    if bytes > file_bytes_max {
        return Err(Rejection::new(
            RejectReason::TooLarge,
            format!(
                "the file is {bytes} bytes, over the limit of {file_bytes_max} (--file-bytes-max); \
                 split it into smaller batches"
            ),
        ));
    }
    if bytes == 0 && super::is_gzip(name) {
        return Err(Rejection::new(
            RejectReason::Truncated,
            "the gzip file is empty (0 bytes): its stream has not begun; it may still be \
             arriving",
        ));
    }
    if bytes == 0 {
        return Err(Rejection::new(
            RejectReason::Empty,
            "the file is empty (0 bytes)",
        ));
    }
    Ok(format)
}

/// Why a gzip file is rejected, from the error its decompression met: a stream that
/// ends early may still be arriving (`truncated`); one that is not gzip, or whose
/// header, data or CRC is corrupt, is `bad_gzip`. `None`: a read of the file failed.
pub(crate) fn gzip_fault(error: &std::io::Error) -> Option<Rejection> {
    match error.kind() {
        std::io::ErrorKind::UnexpectedEof => Some(Rejection::new(
            RejectReason::Truncated,
            "the gzip stream ends early; it may still be arriving",
        )),
        std::io::ErrorKind::InvalidInput | std::io::ErrorKind::InvalidData => Some(bad_gzip(error)),
        _ => None,
    }
}

/// Why a file that is no whole, sound gzip stream is rejected, `why` saying what
/// is wrong with it.
pub(crate) fn bad_gzip(why: impl std::fmt::Display) -> Rejection {
    Rejection::new(
        RejectReason::BadGzip,
        format!(
            "the file is not a whole, sound gzip stream ({why}); compress the batch again \
             with gzip and drop it again"
        ),
    )
}

/// Why a gzip file whose content is over `content_bytes_max` bytes is rejected.
pub(crate) fn gzip_too_large(content_bytes_max: u64) -> Rejection {
    Rejection::new(
        RejectReason::TooLarge,
        format!(
            "the gzip file's content is over the limit of {content_bytes_max} bytes \
             (--file-bytes-max) once decompressed; split it into smaller batches"
        ),
    )
}

/// Checks that a file is UTF-8 throughout, fed its bytes in chunks of any size;
/// remembers the offset of the first bad byte. It runs in the digest pass of every
/// file, a re-drop's included, so it only validates: the line of a bad byte is
/// found by `LineOf`, fed the file again, only for a file that is rejected.
#[derive(Debug, Default)]
pub(crate) struct Utf8Check {
    /// Bytes fed so far.
    offset: u64,
    /// Up to 3 bytes of a character cut by the end of the previous chunk.
    carry: Vec<u8>,
    /// The offset of the first invalid byte, once found.
    invalid_at: Option<u64>,
}

/// What `Utf8Check` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Utf8Verdict {
    Utf8,
    /// An invalid byte at this offset: the file is `not_utf8`, and `LineOf` says
    /// where.
    InvalidAt(u64),
    /// The file ends inside a character: `truncated`.
    Cut(Rejection),
}

impl Utf8Check {
    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        if self.invalid_at.is_some() {
            return;
        }
        self.invalid_at = check_utf8(&mut self.carry, chunk, self.offset);
        self.offset += chunk.len() as u64;
    }

    pub(crate) fn finish(self) -> Utf8Verdict {
        if let Some(at) = self.invalid_at {
            return Utf8Verdict::InvalidAt(at);
        }
        if self.carry.is_empty() {
            return Utf8Verdict::Utf8;
        }
        Utf8Verdict::Cut(Rejection::new(
            RejectReason::Truncated,
            "the file ends inside a UTF-8 character; it may still be arriving",
        ))
    }
}

/// Where the byte at `at` stands (line, byte of the line), fed the file's bytes from
/// its start in chunks of any size; bytes from `at` on are not looked at.
#[derive(Debug)]
pub(crate) struct LineOf {
    at: u64,
    /// Bytes fed so far.
    offset: u64,
    /// Newlines before `at` (or so far), and where the line of `at` starts.
    lines: u64,
    line_start: u64,
}

impl LineOf {
    pub(crate) fn new(at: u64) -> LineOf {
        LineOf {
            at,
            offset: 0,
            lines: 0,
            line_start: 0,
        }
    }

    /// Whether the bytes up to `at` have all been fed.
    pub(crate) fn done(&self) -> bool {
        self.offset >= self.at
    }

    pub(crate) fn feed(&mut self, chunk: &[u8]) {
        let upto = usize::try_from(self.at.saturating_sub(self.offset))
            .unwrap_or(usize::MAX)
            .min(chunk.len());
        let scanned = &chunk[..upto];
        let newlines = count_newlines(scanned);
        if newlines > 0 {
            self.lines += newlines;
            if let Some(last) = scanned.iter().rposition(|&b| b == b'\n') {
                self.line_start = self.offset + last as u64 + 1;
            }
        }
        self.offset += chunk.len() as u64;
    }

    /// The file's `not_utf8` rejection, saying where its bad byte stands.
    pub(crate) fn not_utf8(self) -> Rejection {
        let at = self.at;
        Rejection::new(
            RejectReason::NotUtf8,
            format!(
                "the file is not UTF-8: invalid byte at line {}, byte {} of the line \
                 (byte offset {at}); save it as UTF-8 and drop it again",
                self.lines + 1,
                at - self.line_start + 1
            ),
        )
    }
}

/// How many newlines `bytes` holds. Counted in blocks of 255 bytes into a byte
/// counter, which the compiler turns into vector compares and adds.
fn count_newlines(bytes: &[u8]) -> u64 {
    bytes
        .chunks(255)
        .map(|block| {
            let in_block = block
                .iter()
                .fold(0u8, |count, &b| count + u8::from(b == b'\n'));
            u64::from(in_block)
        })
        .sum()
}

/// Validates `chunk` (which starts at `offset` in the file) after the `carry` left
/// by the previous chunk; leaves in `carry` an incomplete character at its end.
/// Returns the offset of an invalid byte, if there is one.
fn check_utf8(carry: &mut Vec<u8>, chunk: &[u8], offset: u64) -> Option<u64> {
    let mut chunk = chunk;
    let mut offset = offset;
    while !carry.is_empty() && !chunk.is_empty() {
        carry.push(chunk[0]);
        chunk = &chunk[1..];
        offset += 1;
        match std::str::from_utf8(carry) {
            Ok(_) => carry.clear(),
            Err(e) if e.error_len().is_some() => return Some(offset - carry.len() as u64),
            Err(_) => {}
        }
    }
    match std::str::from_utf8(chunk) {
        Ok(_) => None,
        Err(e) => match e.error_len() {
            Some(_) => Some(offset + e.valid_up_to() as u64),
            None => {
                carry.extend_from_slice(&chunk[e.valid_up_to()..]);
                None
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(chunks: &[&[u8]]) -> Option<(RejectReason, String)> {
        let mut check = Utf8Check::default();
        for chunk in chunks {
            check.feed(chunk);
        }
        let rejection = match check.finish() {
            Utf8Verdict::Utf8 => return None,
            Utf8Verdict::Cut(rejection) => rejection,
            Utf8Verdict::InvalidAt(at) => {
                let mut line = LineOf::new(at);
                for chunk in chunks {
                    if line.done() {
                        break;
                    }
                    line.feed(chunk);
                }
                line.not_utf8()
            }
        };
        Some((rejection.reason, rejection.detail))
    }

    #[test]
    fn utf8_across_chunks() {
        let text = "aé😀b".as_bytes();
        for split in 0..text.len() {
            assert_eq!(
                check(&[&text[..split], &text[split..]]),
                None,
                "split {split}"
            );
        }
        let (reason, detail) = check(&[b"ab\xf0\x9f", b"x"]).expect("invalid");
        assert_eq!(reason, RejectReason::NotUtf8);
        assert!(detail.contains("(byte offset 2)"), "{detail}");
        let (reason, detail) = check(&[b"{\n\"a\": 1,\n \"b\": \"\xff\"}"]).expect("invalid");
        assert_eq!(reason, RejectReason::NotUtf8);
        assert!(
            detail.contains("line 3, byte 8 of the line (byte offset 17)"),
            "{detail}"
        );
        let (reason, _) = check(&[b"{\"a\": \"\xe2\x82"]).expect("cut");
        assert_eq!(reason, RejectReason::Truncated);
    }

    #[test]
    fn the_line_of_a_bad_byte_is_counted_across_chunks_of_many_lines() {
        // 1000 lines (more than one block of the newline count) of 3 bytes, then a
        // bad byte as the third of line 1001, fed in chunks of every size.
        let mut text = b"ab\n".repeat(1000);
        text.extend_from_slice(b"cd\xffe\n");
        for size in [1, 2, 3, 254, 255, 256, 1000, text.len()] {
            let chunks: Vec<&[u8]> = text.chunks(size).collect();
            let (reason, detail) = check(&chunks).expect("invalid");
            assert_eq!(reason, RejectReason::NotUtf8);
            assert!(
                detail.contains("line 1001, byte 3 of the line (byte offset 3002)"),
                "chunks of {size}: {detail}"
            );
        }
    }

    #[test]
    fn rules_before_parsing() {
        let code = |name: &str, bytes: u64| preflight(name, bytes, 1000).map_err(|r| r.reason);
        assert_eq!(code("a.json", 10), Ok(Format::Json));
        assert_eq!(code("a.JSONL", 10), Ok(Format::Ndjson));
        assert_eq!(code("a.csv", 10), Ok(Format::Csv));
        assert_eq!(code("a.txt", 10), Err(RejectReason::UnsupportedType));
        assert_eq!(code("a.json", 1001), Err(RejectReason::TooLarge));
        assert_eq!(code("a.json", 0), Err(RejectReason::Empty));
    }
}
