//! JSON syntax alone, fed in chunks: decides whether bytes are JSON, a proper prefix
//! of some JSON text (a file still arriving) or neither, and marks where the shallow
//! values of a document begin and end, in constant memory apart from the stack of
//! open brackets (one bit a level). Pure: bytes in, verdicts out.
//!
//! Both batch formats share it: a `.json` reader runs its whole file through it (and
//! cuts the events out of it at its marks), an NDJSON reader runs an unterminated
//! last line through it. Strings are checked for structure only (quotes, escapes,
//! control characters); what an escape means (a lone surrogate, say) is left to the
//! parser of values, since RFC 8259's grammar allows it.

use std::fmt;

/// Where a byte stands in a file, for details a person can act on: 1-based line and
/// column (the column counts characters, not bytes) and the 0-based byte offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Position {
    pub(crate) line: u64,
    pub(crate) column: u64,
    pub(crate) byte: u64,
}

impl Position {
    /// The first byte of a file (or of a file after its byte-order mark at `byte`).
    pub(crate) fn start(byte: u64) -> Position {
        Position {
            line: 1,
            column: 1,
            byte,
        }
    }

    /// The position `text.len()` bytes after this one, `text` being what stands
    /// between them.
    pub(crate) fn advance(self, text: &str) -> Position {
        let byte = self.byte + text.len() as u64;
        match text.rfind('\n') {
            None => Position {
                line: self.line,
                column: self.column + text.chars().count() as u64,
                byte,
            },
            Some(last) => Position {
                line: self.line + text.bytes().filter(|&b| b == b'\n').count() as u64,
                column: text[last + 1..].chars().count() as u64 + 1,
                byte,
            },
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {}, character {} (byte offset {})",
            self.line, self.column, self.byte
        )
    }
}

/// Bytes that no continuation can make JSON: what is wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) message: &'static str,
    pub(crate) at: Position,
    /// Not a syntax error but brackets nested deeper than `NESTING_FOLLOWED_MAX`,
    /// which this machine will not spend the memory to follow.
    pub(crate) too_deep_to_follow: bool,
}

/// How many open brackets the machine follows, at one bit each (16 MiB of stack).
/// Far beyond any depth limit; it only bounds memory on a file of brackets alone.
pub(crate) const NESTING_FOLLOWED_MAX: usize = 1 << 27;

/// A shallow value (or object key) beginning or ending; `depth` is the number of
/// containers around it (0 for the top-level value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Begins with the last byte consumed.
    Start { depth: usize, key: bool },
    /// Ended with the last byte consumed (a number ends before the byte after it,
    /// which is left unconsumed).
    End { depth: usize, key: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Text {
    Key,
    Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// A value must come: the start of the text, after ':' or after ',' in an array.
    Value,
    /// After '[': a value or ']'.
    ArrayFirst,
    /// After '{': a key or '}'.
    ObjectFirst,
    /// After ',' in an object: a key.
    Key,
    /// After a key: ':'.
    Colon,
    /// After a value inside a container: ',' or its closing bracket.
    After,
    /// The top-level value is complete; only whitespace may follow.
    Done,
    String(Text),
    Escape(Text),
    /// Inside `\u`, with this many hex digits still to come.
    Hex(Text, u8),
    Minus,
    Zero,
    Integer,
    Point,
    Fraction,
    Exponent,
    ExponentSign,
    ExponentDigits,
    /// Inside `true`, `false` or `null`, `at` bytes of `word` read.
    Literal(&'static [u8], u8),
}

impl State {
    /// Inside a number: after its sign, digits, point or exponent.
    fn in_number(self) -> bool {
        matches!(
            self,
            State::Minus
                | State::Zero
                | State::Integer
                | State::Point
                | State::Fraction
                | State::Exponent
                | State::ExponentSign
                | State::ExponentDigits
        )
    }
}

/// A stack of open brackets, one bit each: set for an object, clear for an array.
#[derive(Debug, Default)]
struct Nesting {
    words: Vec<u64>,
    len: usize,
}

impl Nesting {
    fn push(&mut self, object: bool) {
        let (word, bit) = (self.len / 64, self.len % 64);
        if word == self.words.len() {
            self.words.push(0);
        }
        if object {
            self.words[word] |= 1 << bit;
        } else {
            self.words[word] &= !(1 << bit);
        }
        self.len += 1;
    }

    /// Whether the innermost open bracket is an object (`None` at the top level).
    fn top_is_object(&self) -> Option<bool> {
        let last = self.len.checked_sub(1)?;
        Some(self.words[last / 64] & (1 << (last % 64)) != 0)
    }

    fn pop(&mut self) {
        self.len = self.len.saturating_sub(1);
    }
}

/// The incremental JSON syntax machine. Feed it the bytes of one JSON text in
/// chunks of any size; ask `finish` at the end.
#[derive(Debug)]
pub(crate) struct Syntax {
    state: State,
    nesting: Nesting,
    depth_max: usize,
    /// Where brackets first nested deeper than `depth_max`.
    too_deep_at: Option<Position>,
    /// Marks are reported for values fewer than this many containers deep.
    marks_below: usize,
    started: bool,
    /// The byte offset of the next byte fed.
    offset: u64,
    line: u64,
    line_start: u64,
    /// UTF-8 continuation bytes since `line_start`, to count columns in characters.
    continuation: u64,
}

fn is_whitespace(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

/// The bytes that end a run of plain string content: the quote, the backslash and
/// the control characters. (A byte `(b as i8) < -64` is 10xxxxxx, one that continues
/// a UTF-8 character.)
static ENDS_STRING_RUN: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 0x20 {
        table[byte] = true;
        byte += 1;
    }
    table[b'"' as usize] = true;
    table[b'\\' as usize] = true;
    table
};

impl Syntax {
    /// A machine for a text that begins a line of its file at `start` (after a
    /// byte-order mark, say), flagging nesting deeper than `depth_max` and reporting
    /// marks for values fewer than `marks_below` containers deep (0: none).
    pub(crate) fn new(start: Position, depth_max: usize, marks_below: usize) -> Syntax {
        debug_assert_eq!(start.column, 1, "a text that begins a line");
        Syntax {
            state: State::Value,
            nesting: Nesting::default(),
            depth_max,
            too_deep_at: None,
            marks_below,
            started: false,
            offset: start.byte,
            line: start.line,
            line_start: start.byte,
            continuation: 0,
        }
    }

    /// Stops reporting marks (the caller has decided the file and only wants to know
    /// whether it is JSON).
    pub(crate) fn stop_marks(&mut self) {
        self.marks_below = 0;
    }

    /// Where brackets first nested deeper than `depth_max`, if they have.
    pub(crate) fn too_deep_at(&self) -> Option<Position> {
        self.too_deep_at
    }

    /// Whether anything but whitespace has been fed.
    pub(crate) fn started(&self) -> bool {
        self.started
    }

    /// The position of the next byte to be fed.
    pub(crate) fn position(&self) -> Position {
        self.position_at(0)
    }

    /// The position of the last byte consumed (the first byte of a started value).
    pub(crate) fn last_position(&self) -> Position {
        let mut at = self.position();
        at.byte = at.byte.saturating_sub(1);
        at.column = at.column.saturating_sub(1).max(1);
        at
    }

    /// The position of byte `i` of the chunk being fed.
    fn position_at(&self, i: usize) -> Position {
        let byte = self.offset + i as u64;
        Position {
            line: self.line,
            column: byte - self.line_start - self.continuation + 1,
            byte,
        }
    }

    fn error(&self, i: usize, message: &'static str) -> SyntaxError {
        SyntaxError {
            message,
            at: self.position_at(i),
            too_deep_to_follow: false,
        }
    }

    /// Steps over the rest of an object or array whose opening bracket was the last
    /// byte consumed, without reading it: the caller vouches that the bracket and
    /// `rest` are one complete JSON value within the depth limit (a parser read
    /// them). The machine then stands where feeding `rest` would have left it,
    /// lines and characters counted; the marks inside are skipped and the one that
    /// ends the value is returned.
    pub(crate) fn skip_value(&mut self, rest: &[u8]) -> Option<Mark> {
        // Most values are on one line and ASCII: both are asked of the whole
        // slice at once before any byte is counted.
        let continuing = |bytes: &[u8]| {
            if bytes.is_ascii() {
                0
            } else {
                bytes.iter().filter(|&&b| (b as i8) < -64).count() as u64
            }
        };
        let last_newline = if rest.contains(&b'\n') {
            rest.iter().rposition(|&b| b == b'\n')
        } else {
            None
        };
        match last_newline {
            Some(last) => {
                self.line += rest.iter().filter(|&&b| b == b'\n').count() as u64;
                self.line_start = self.offset + last as u64 + 1;
                self.continuation = continuing(&rest[last + 1..]);
            }
            None => self.continuation += continuing(rest),
        }
        self.offset += rest.len() as u64;
        self.nesting.pop();
        self.end_value(false)
    }

    /// Consumes bytes of `input` until it ends or a mark is met; returns how many
    /// bytes were consumed and the mark.
    pub(crate) fn feed(&mut self, input: &[u8]) -> Result<(usize, Option<Mark>), SyntaxError> {
        let mut i = 0;
        let result = self.run(input, &mut i);
        match result {
            Ok(mark) => {
                // Marks are rare; the column bookkeeping wants the offset moved
                // only once per call.
                self.offset += i as u64;
                Ok((i, mark))
            }
            Err(error) => Err(error),
        }
    }

    /// Runs the machine over `input` from `*i` to the next mark or the end. Long
    /// (one `match` over every state, in one loop) because it is the hot path over
    /// every byte of every file: one loop keeps its state in registers.
    fn run(&mut self, input: &[u8], i: &mut usize) -> Result<Option<Mark>, SyntaxError> {
        while *i < input.len() {
            let byte = input[*i];
            match self.state {
                State::String(text) => {
                    // Most bytes of a batch are inside strings: one pass over the
                    // run finds its end and counts its non-first UTF-8 bytes.
                    let mut end = *i;
                    let mut continuation = 0;
                    while let Some(&b) = input.get(end) {
                        if ENDS_STRING_RUN[b as usize] {
                            break;
                        }
                        continuation += u64::from((b as i8) < -64);
                        end += 1;
                    }
                    self.continuation += continuation;
                    *i = end;
                    match input.get(*i) {
                        None => break,
                        Some(b'"') => {
                            *i += 1;
                            if let Some(mark) = self.end_value(text == Text::Key) {
                                return Ok(Some(mark));
                            }
                        }
                        Some(b'\\') => {
                            *i += 1;
                            self.state = State::Escape(text);
                        }
                        Some(_) => {
                            return Err(self.error(
                                *i,
                                "control character in a string (write it as an escape such as \\n)",
                            ));
                        }
                    }
                }
                State::Escape(text) => {
                    self.state = match byte {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                            State::String(text)
                        }
                        b'u' => State::Hex(text, 4),
                        _ => return Err(self.error(*i, "unknown escape in a string")),
                    };
                    *i += 1;
                }
                State::Hex(text, left) => {
                    if !byte.is_ascii_hexdigit() {
                        return Err(self.error(*i, "expected four hex digits after \\u"));
                    }
                    self.state = if left == 1 {
                        State::String(text)
                    } else {
                        State::Hex(text, left - 1)
                    };
                    *i += 1;
                }
                State::Literal(word, at) => {
                    if byte != word[at as usize] {
                        return Err(self.error(*i, "expected true, false or null"));
                    }
                    *i += 1;
                    if at as usize + 1 < word.len() {
                        self.state = State::Literal(word, at + 1);
                    } else if let Some(mark) = self.end_value(false) {
                        return Ok(Some(mark));
                    }
                }
                state if state.in_number() => {
                    if let Some(mark) = self.number(input, i)? {
                        return Ok(Some(mark));
                    }
                }
                _ if is_whitespace(byte) => {
                    if byte == b'\n' {
                        self.line += 1;
                        self.line_start = self.offset + *i as u64 + 1;
                        self.continuation = 0;
                    }
                    *i += 1;
                }
                _ => {
                    let mark = self.structural(byte, *i)?;
                    *i += 1;
                    if mark.is_some() {
                        return Ok(mark);
                    }
                }
            }
        }
        Ok(None)
    }

    /// One byte of a number at `input[*i]`; a byte that cannot continue it ends the
    /// number without being consumed.
    fn number(&mut self, input: &[u8], i: &mut usize) -> Result<Option<Mark>, SyntaxError> {
        let byte = input[*i];
        let digit = byte.is_ascii_digit();
        let next = match (self.state, byte) {
            (State::Minus, b'0') => State::Zero,
            (State::Minus, _) if digit => State::Integer,
            (State::Minus, _) => return Err(self.error(*i, "expected a digit after '-'")),
            (State::Integer, _) if digit => {
                // Digits come in runs; take the run in one step.
                let run = input[*i..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                *i += run;
                return Ok(None);
            }
            (State::Zero | State::Integer, b'.') => State::Point,
            (State::Zero | State::Integer | State::Fraction, b'e' | b'E') => State::Exponent,
            (State::Point | State::Fraction, _) if digit => State::Fraction,
            (State::Point, _) => {
                return Err(self.error(*i, "expected a digit after the decimal point"));
            }
            (State::Exponent, b'+' | b'-') => State::ExponentSign,
            (State::Exponent | State::ExponentSign | State::ExponentDigits, _) if digit => {
                State::ExponentDigits
            }
            (State::Exponent | State::ExponentSign, _) => {
                return Err(self.error(*i, "expected a digit in the exponent"));
            }
            // Zero, Integer, Fraction or ExponentDigits followed by anything else:
            // the number is complete and the byte belongs to what follows.
            _ => return Ok(self.end_value(false)),
        };
        self.state = next;
        *i += 1;
        Ok(None)
    }

    /// A byte outside strings, numbers and literals that is not whitespace.
    fn structural(&mut self, byte: u8, i: usize) -> Result<Option<Mark>, SyntaxError> {
        match self.state {
            State::Value => self.begin_value(byte, i, "expected a JSON value"),
            State::ArrayFirst if byte == b']' => self.close(false, i),
            State::ArrayFirst => self.begin_value(byte, i, "expected a JSON value or ']'"),
            State::ObjectFirst if byte == b'}' => self.close(true, i),
            State::ObjectFirst | State::Key if byte == b'"' => {
                self.state = State::String(Text::Key);
                Ok(self.mark(Mark::Start {
                    depth: self.nesting.len,
                    key: true,
                }))
            }
            State::ObjectFirst | State::Key => {
                Err(self.error(i, "expected a string key in an object"))
            }
            State::Colon if byte == b':' => {
                self.state = State::Value;
                Ok(None)
            }
            State::Colon => Err(self.error(i, "expected ':' after an object key")),
            State::After => self.after_value(byte, i),
            _ => Err(self.error(i, "unexpected text after the JSON value")),
        }
    }

    fn after_value(&mut self, byte: u8, i: usize) -> Result<Option<Mark>, SyntaxError> {
        let object = self.nesting.top_is_object() == Some(true);
        match (byte, object) {
            (b',', true) => self.state = State::Key,
            (b',', false) => self.state = State::Value,
            (b'}', true) => return self.close(true, i),
            (b']', false) => return self.close(false, i),
            (_, true) => return Err(self.error(i, "expected ',' or '}' in an object")),
            (_, false) => return Err(self.error(i, "expected ',' or ']' in an array")),
        }
        Ok(None)
    }

    fn begin_value(
        &mut self,
        byte: u8,
        i: usize,
        expected: &'static str,
    ) -> Result<Option<Mark>, SyntaxError> {
        let depth = self.nesting.len;
        self.state = match byte {
            b'{' | b'[' => {
                if depth >= NESTING_FOLLOWED_MAX {
                    return Err(SyntaxError {
                        message: "brackets nest deeper than spoolite follows",
                        at: self.position_at(i),
                        too_deep_to_follow: true,
                    });
                }
                self.nesting.push(byte == b'{');
                if self.nesting.len > self.depth_max && self.too_deep_at.is_none() {
                    self.too_deep_at = Some(self.position_at(i));
                }
                if byte == b'{' {
                    State::ObjectFirst
                } else {
                    State::ArrayFirst
                }
            }
            b'"' => State::String(Text::Value),
            b'-' => State::Minus,
            b'0' => State::Zero,
            b'1'..=b'9' => State::Integer,
            b't' => State::Literal(b"true", 1),
            b'f' => State::Literal(b"false", 1),
            b'n' => State::Literal(b"null", 1),
            _ => return Err(self.error(i, expected)),
        };
        self.started = true;
        Ok(self.mark(Mark::Start { depth, key: false }))
    }

    /// The closing bracket of an object or array, at the right place for one.
    fn close(&mut self, object: bool, i: usize) -> Result<Option<Mark>, SyntaxError> {
        debug_assert_eq!(self.nesting.top_is_object(), Some(object), "byte {i}");
        self.nesting.pop();
        Ok(self.end_value(false))
    }

    /// A key or value has just ended.
    fn end_value(&mut self, key: bool) -> Option<Mark> {
        let depth = self.nesting.len;
        self.state = if key {
            State::Colon
        } else if depth == 0 {
            State::Done
        } else {
            State::After
        };
        self.mark(Mark::End { depth, key })
    }

    fn mark(&self, mark: Mark) -> Option<Mark> {
        let (Mark::Start { depth, .. } | Mark::End { depth, .. }) = mark;
        (depth < self.marks_below).then_some(mark)
    }

    /// At the end of the bytes: `Ok` when they are a complete JSON text, otherwise
    /// where the text stands (`"inside a string"`), the bytes being a proper prefix
    /// of some JSON text.
    pub(crate) fn finish(&self) -> Result<(), &'static str> {
        let top_level = self.nesting.len == 0;
        match self.state {
            State::Done => Ok(()),
            State::Zero | State::Integer | State::Fraction | State::ExponentDigits if top_level => {
                Ok(())
            }
            State::Value if !self.started => Err("before any JSON value"),
            State::String(Text::Key) => Err("inside an object key"),
            State::String(Text::Value) | State::Escape(_) | State::Hex(..) => {
                Err("inside a string")
            }
            state if state.in_number() => Err("inside a number"),
            State::Literal(..) => Err("inside true, false or null"),
            State::Colon => Err("after an object key"),
            _ if self.nesting.top_is_object() == Some(true) => Err("inside an object"),
            _ => Err("inside an array"),
        }
    }
}

/// Whether the whole of `bytes`, a line of a file that starts at `start`, is
/// JSON: complete, a proper prefix (`Err(Ok((where, end)))`), or neither
/// (`Err(Err(error))`).
pub(crate) fn check(
    bytes: &[u8],
    start: Position,
) -> Result<(), Result<(&'static str, Position), SyntaxError>> {
    let mut syntax = Syntax::new(start, usize::MAX, 0);
    let mut rest = bytes;
    while !rest.is_empty() {
        let (used, _) = syntax.feed(rest).map_err(Err)?;
        rest = &rest[used..];
    }
    let end = syntax.position();
    syntax.finish().map_err(|place| Ok((place, end)))
}

#[cfg(test)]
mod tests {
    //! The machine against the recursive parser of `json`, on every input: both
    //! must agree on complete, cut short and broken, whatever the chunking.

    use super::*;
    use crate::batch::json::{self, JsonError};
    use proptest::prelude::*;

    #[derive(Debug, PartialEq, Eq)]
    enum Verdict {
        Complete,
        Prefix,
        Broken(u64),
    }

    /// The machine's verdict, fed `chunk` bytes at a time.
    fn machine(bytes: &[u8], chunk: usize) -> Verdict {
        let mut syntax = Syntax::new(Position::start(0), 128, 3);
        for piece in bytes.chunks(chunk) {
            let mut rest = piece;
            while !rest.is_empty() {
                match syntax.feed(rest) {
                    Ok((used, _)) => rest = &rest[used..],
                    Err(error) => return Verdict::Broken(error.at.byte),
                }
            }
        }
        match syntax.finish() {
            Ok(()) => Verdict::Complete,
            Err(_) => Verdict::Prefix,
        }
    }

    /// The recursive parser's verdict. A lone surrogate is grammatical JSON, which
    /// the parser refuses as no text: the generator's only one is made a character.
    fn parser(text: &str) -> Verdict {
        match json::parse(&text.replace("\\ud800", "\\u0800"), usize::MAX) {
            Ok(_) => Verdict::Complete,
            Err(JsonError::Eof { .. }) => Verdict::Prefix,
            Err(error) => Verdict::Broken(error.offset() as u64),
        }
    }

    fn jsonish() -> impl Strategy<Value = String> {
        let pieces = prop::sample::select(vec![
            "{", "}", "[", "]", ",", ":", "\"", "\\", "\\u", "\\ud800", "\\n", "a", "0", "-", "1",
            ".", "e", "+", "E", "tru", "e", "null", "f", "als", " ", "\n", "\t", "é", "\u{1}",
            "\"k\":", "\"v\"", "x",
        ]);
        prop::collection::vec(pieces, 0..40).prop_map(|parts| parts.concat())
    }

    #[test]
    fn agrees_on_examples() {
        let cases = [
            ("", Verdict::Prefix),
            ("  ", Verdict::Prefix),
            ("12", Verdict::Complete),
            ("-", Verdict::Prefix),
            ("[1,2]", Verdict::Complete),
            ("[1,2", Verdict::Prefix),
            ("[1}", Verdict::Broken(2)),
            (r#"{"a":"x"y"#, Verdict::Broken(8)),
            ("{\"a\":1} x", Verdict::Broken(8)),
        ];
        for (text, want) in cases {
            assert_eq!(machine(text.as_bytes(), 1 << 16), want, "{text:?}");
            assert_eq!(parser(text), want, "{text:?}");
        }
        // The grammar allows a lone surrogate; what it means is the parser's call.
        assert_eq!(machine(br#"["\ud800"]"#, 3), Verdict::Complete);
    }

    #[test]
    fn positions_count_lines_and_characters() {
        let text = "[\n \"é\u{1f600}\",\n  x]";
        let mut syntax = Syntax::new(Position::start(3), 128, 0);
        let error = syntax.feed(text.as_bytes()).expect_err("x is no value");
        assert_eq!(
            error.at,
            Position {
                line: 3,
                column: 3,
                byte: 3 + text.find('x').expect("x") as u64
            }
        );
        assert_eq!(
            error.at.to_string(),
            format!("line 3, character 3 (byte offset {})", error.at.byte)
        );
    }

    proptest! {
        #[test]
        fn agrees_with_the_parser_in_any_chunks(text in jsonish(), chunk in 1usize..8) {
            let want = parser(&text);
            prop_assert_eq!(machine(text.as_bytes(), chunk), want);
        }
    }
}
