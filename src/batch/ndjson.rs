//! NDJSON batches: one event per line, blank lines ignored, CRLF allowed. A line is
//! held up to `--event-bytes-max` bytes; the rest of a longer one is skipped in
//! constant memory. An unterminated last line is still arriving when it is a proper
//! prefix of some JSON text (decided by `syntax`).

use std::io::{self, BufRead, Read};

use super::direct;
use super::syntax::{self, Position, Syntax, SyntaxError};
use super::{
    DEPTH_MAX, Limits, ReadError, Record, RejectReason, parse_event, reject, text_prefix,
    too_large, truncated, utf8,
};

/// Reads NDJSON: one event per line.
pub struct NdjsonReader<R> {
    input: R,
    limits: Limits,
    line: Vec<u8>,
    /// The byte offset in the file of the next line.
    offset: u64,
    /// The 1-based number of the next line.
    line_number: u64,
    index: u64,
    /// The size of the last line, with some room to spare (see `read_line`).
    last_line_bytes: usize,
    started: bool,
    scratch: direct::Scratch,
}

/// Where the syntax of an unterminated last line stands: complete, a proper prefix
/// (where it ends), or not JSON.
type Verdict = Result<(), Result<(&'static str, Position), SyntaxError>>;

/// One line of the file; its first bytes (at most the limit and its line end) are
/// in `NdjsonReader::line`, without the line end.
struct Line {
    /// Ended by a newline (not by the end of the file).
    complete: bool,
    /// Its length in bytes, without the line end.
    size: u64,
    /// Longer than `--event-bytes-max`: only its first bytes were kept.
    over: bool,
    /// Only spaces, tabs and carriage returns.
    blank: bool,
    /// For a line over the limit, its syntax, checked while it was skipped.
    verdict: Option<Verdict>,
}

fn is_blank(bytes: &[u8]) -> bool {
    bytes.iter().all(|b| matches!(b, b' ' | b'\t' | b'\r'))
}

/// Feeds all of `bytes` to `syntax` (which reports no marks).
fn feed_all(syntax: &mut Syntax, mut bytes: &[u8]) -> Result<(), SyntaxError> {
    while !bytes.is_empty() {
        let (used, _) = syntax.feed(bytes)?;
        bytes = &bytes[used..];
    }
    Ok(())
}

/// Runs a line's bytes through the syntax machine chunk by chunk, holding back a
/// carriage return at the end of each chunk until more follows: a `\r` that ends the
/// line is not part of it.
struct LineSyntax {
    syntax: Syntax,
    error: Option<SyntaxError>,
    held_return: bool,
}

impl LineSyntax {
    fn new(start: Position) -> LineSyntax {
        LineSyntax {
            syntax: Syntax::new(start, usize::MAX, 0),
            error: None,
            held_return: false,
        }
    }

    fn feed(&mut self, piece: &[u8]) {
        if self.error.is_some() || piece.is_empty() {
            return;
        }
        let (body, held) = match piece.strip_suffix(b"\r") {
            Some(body) => (body, true),
            None => (piece, false),
        };
        let result = if std::mem::replace(&mut self.held_return, held) {
            feed_all(&mut self.syntax, b"\r").and_then(|()| feed_all(&mut self.syntax, body))
        } else {
            feed_all(&mut self.syntax, body)
        };
        self.error = result.err();
    }

    fn verdict(self) -> Verdict {
        match self.error {
            Some(error) => Err(Err(error)),
            None => {
                let at = self.syntax.position();
                self.syntax.finish().map_err(|place| Ok((place, at)))
            }
        }
    }
}

impl<R: BufRead> NdjsonReader<R> {
    pub(super) fn new(input: R, limits: Limits) -> NdjsonReader<R> {
        NdjsonReader {
            input,
            limits,
            line: Vec::new(),
            offset: 0,
            line_number: 1,
            index: 0,
            last_line_bytes: 0,
            started: false,
            scratch: direct::Scratch::default(),
        }
    }

    pub(super) fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        if !self.started {
            self.started = true;
            self.offset += super::skip_bom(&mut self.input)?;
        }
        loop {
            let start = Position {
                line: self.line_number,
                column: 1,
                byte: self.offset,
            };
            let Some(line) = self.read_line()? else {
                if self.index == 0 {
                    return Err(reject(
                        RejectReason::Empty,
                        "the file holds no events, only blank lines",
                    ));
                }
                return Ok(None);
            };
            self.line_number += 1;
            if line.blank {
                continue;
            }
            return self.record(line, start).map(Some);
        }
    }

    /// The record of a non-blank line that starts at `start`.
    fn record(&mut self, line: Line, start: Position) -> Result<Record, ReadError> {
        let bytes = std::mem::take(&mut self.line);
        let (raw, event) = if line.over {
            if let Some(Err(Ok((place, at)))) = line.verdict.filter(|_| !line.complete) {
                return Err(self.cut(place, at));
            }
            let raw = text_prefix(bytes, self.limits.event_bytes_max, start.byte)?;
            (raw, Err(too_large(line.size, self.limits)))
        } else {
            if !line.complete {
                self.check_last_line(&bytes, start)?;
            }
            let raw = utf8(bytes, start.byte)?;
            let event = parse_event(&raw, DEPTH_MAX, start, &mut self.scratch);
            (raw, event)
        };
        let index = self.index;
        self.index += 1;
        Ok(Record { index, raw, event })
    }

    /// An unterminated last line that is a proper prefix of some JSON text (a
    /// character cut at its end included) means the file may still be arriving.
    fn check_last_line(&self, bytes: &[u8], start: Position) -> Result<(), ReadError> {
        if let Err(e) = std::str::from_utf8(bytes)
            && e.error_len().is_none()
        {
            let at = start.byte + e.valid_up_to() as u64;
            return Err(truncated(format!(
                "the last line (the file's event {}) has no final newline and ends inside a UTF-8 \
                 character at byte offset {at}",
                self.index + 1
            )));
        }
        match syntax::check(bytes, start) {
            Err(Ok((place, at))) => Err(self.cut(place, at)),
            _ => Ok(()),
        }
    }

    /// The rejection of a file whose unterminated last line may still be arriving.
    fn cut(&self, place: &str, at: Position) -> ReadError {
        truncated(format!(
            "the last line (the file's event {}) has no final newline and ends {place} at {at}",
            self.index + 1
        ))
    }

    /// Reads the next line (`None` at the end of the file), holding at most the
    /// limit and its line end.
    fn read_line(&mut self) -> io::Result<Option<Line>> {
        self.line.clear();
        let limit = self.limits.event_bytes_max;
        // The last line moved into its record: room for one of its size saves
        // growing the buffer step by step for each line.
        self.line
            .reserve_exact(self.last_line_bytes.min(limit.saturating_add(2)));
        // Room for a line of `limit` bytes and its "\r\n"; a line that fills it
        // without a newline is longer than the limit.
        let room = limit.saturating_add(2);
        let read = (&mut self.input)
            .take(room as u64)
            .read_until(b'\n', &mut self.line)?;
        if read == 0 {
            return Ok(None);
        }
        self.last_line_bytes = read + read / 8;
        let line_start = Position {
            line: self.line_number,
            column: 1,
            byte: self.offset,
        };
        self.offset += read as u64;
        let complete = self.line.last() == Some(&b'\n');
        if !complete && read == room {
            return self.skip_long_line(line_start).map(Some);
        }
        if complete {
            self.line.pop();
        }
        // A carriage return that ends the line, before its newline or at the end of
        // the file, is not part of it.
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        let size = self.line.len() as u64;
        Ok(Some(Line {
            complete,
            size,
            over: size > limit as u64,
            blank: is_blank(&self.line),
            verdict: None,
        }))
    }

    /// The rest of a line longer than the limit, whose first bytes are in
    /// `self.line`: skipped up to its newline without being held, its syntax
    /// checked on the way (it may be the last line, still arriving).
    fn skip_long_line(&mut self, line_start: Position) -> io::Result<Line> {
        let mut syntax = LineSyntax::new(line_start);
        syntax.feed(&self.line);
        let mut blank = is_blank(&self.line);
        let mut size = self.line.len() as u64;
        let mut ends_in_return = self.line.last() == Some(&b'\r');
        let mut complete = false;
        while !complete {
            let buf = self.input.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let piece = match buf.iter().position(|&b| b == b'\n') {
                Some(newline) => {
                    complete = true;
                    &buf[..newline]
                }
                None => buf,
            };
            syntax.feed(piece);
            blank = blank && is_blank(piece);
            size += piece.len() as u64;
            if let Some(&last) = piece.last() {
                ends_in_return = last == b'\r';
            }
            let used = piece.len() + usize::from(complete);
            self.input.consume(used);
            self.offset += used as u64;
        }
        if ends_in_return {
            size -= 1;
        }
        Ok(Line {
            complete,
            size,
            over: size > self.limits.event_bytes_max as u64,
            blank,
            verdict: Some(syntax.verdict()),
        })
    }
}
