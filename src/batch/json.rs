//! A strict JSON reader for one value held in memory (an event, a top-level field),
//! and the canonical writer for payloads.
//!
//! serde_json cannot give what the contract asks of events: numbers kept exactly as
//! written, duplicate keys reported instead of resolved, the exact text of each
//! event, and a nesting limit of 128 levels counted the contract's way. So events are
//! read by this small recursive-descent parser; it does no I/O.

use std::fmt::Write as _;

/// A parsed JSON value. Numbers keep the text they were written with, and objects
/// keep their members in file order (duplicates included, see `Parsed::duplicate`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Null,
    Bool(bool),
    Number(String),
    String(String),
    Array(Vec<Value>),
    Object(Vec<(String, Value)>),
}

impl Value {
    pub(crate) fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) => "a number",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }
}

/// Why a text is not one JSON value; each offset is in bytes from the start of the
/// text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum JsonError {
    /// The text ends before the value does.
    Eof { offset: usize },
    /// The text breaks JSON's grammar.
    Syntax {
        offset: usize,
        message: &'static str,
    },
    /// Objects and arrays nest deeper than allowed.
    TooDeep { offset: usize },
    /// A `\u` escape is half of a surrogate pair without its other half: the
    /// grammar allows it, but it is no character, so the string cannot be text.
    LoneSurrogate { offset: usize },
}

impl JsonError {
    /// Where in the text the problem stands.
    pub(crate) fn offset(&self) -> usize {
        match *self {
            JsonError::Eof { offset }
            | JsonError::Syntax { offset, .. }
            | JsonError::TooDeep { offset }
            | JsonError::LoneSurrogate { offset } => offset,
        }
    }

    /// What is wrong, as the end of a sentence.
    pub(crate) fn message(&self) -> &'static str {
        match self {
            JsonError::Eof { .. } => "the text ends before the JSON value does",
            JsonError::Syntax { message, .. } => message,
            JsonError::TooDeep { .. } => "arrays and objects nest deeper than 128 levels",
            JsonError::LoneSurrogate { .. } => {
                "a \\u escape is half of a surrogate pair without the other half, which is no character"
            }
        }
    }
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at byte {}", self.message(), self.offset())
    }
}

/// A value and the first duplicate object key met anywhere inside it, with the path
/// of the object that holds it (`payload.crew`), so that callers decide what a
/// duplicate means where it stands.
#[derive(Debug)]
pub struct Parsed {
    pub(crate) value: Value,
    pub(crate) duplicate: Option<String>,
}

/// Parses `text` as exactly one JSON value surrounded by optional whitespace.
/// `depth_max` is how many levels of arrays and objects may nest (1 = a flat object).
pub(crate) fn parse(text: &str, depth_max: usize) -> Result<Parsed, JsonError> {
    let mut parser = Parser {
        cursor: Cursor::new(text),
        depth_max,
        duplicate: None,
    };
    parser.skip_whitespace();
    let value = parser.value(0, &mut String::new())?;
    parser.skip_whitespace();
    if parser.pos != parser.bytes.len() {
        return Err(parser.syntax("unexpected text after the value"));
    }
    Ok(Parsed {
        value,
        duplicate: parser.duplicate,
    })
}

/// A position in a JSON text and the steps both parsers of this module take over
/// it: errors with their offsets, whitespace, an expected byte, an escape. Each
/// parser derefs to its cursor.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(text: &'a str) -> Cursor<'a> {
        Cursor {
            bytes: text.as_bytes(),
            pos: 0,
        }
    }

    pub(super) fn eof(&self) -> JsonError {
        JsonError::Eof {
            offset: self.bytes.len(),
        }
    }

    pub(super) fn syntax(&self, message: &'static str) -> JsonError {
        if self.pos >= self.bytes.len() {
            self.eof()
        } else {
            JsonError::Syntax {
                offset: self.pos,
                message,
            }
        }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    pub(super) fn skip_whitespace(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.pos += 1;
        }
    }

    /// Steps over a number, as JSON's grammar has it.
    pub(super) fn skip_number(&mut self) -> Result<(), JsonError> {
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        match self.peek() {
            Some(b'0') => self.pos += 1,
            Some(b'1'..=b'9') => self.skip_digits(),
            _ => return Err(self.syntax("expected a digit")),
        }
        if self.peek() == Some(b'.') {
            self.pos += 1;
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax("expected a digit after the decimal point"));
            }
            self.skip_digits();
        }
        if let Some(b'e' | b'E') = self.peek() {
            self.pos += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.pos += 1;
            }
            if !matches!(self.peek(), Some(b'0'..=b'9')) {
                return Err(self.syntax("expected a digit in the exponent"));
            }
            self.skip_digits();
        }
        Ok(())
    }

    fn skip_digits(&mut self) {
        while let Some(b'0'..=b'9') = self.peek() {
            self.pos += 1;
        }
    }

    pub(super) fn expect(&mut self, byte: u8, message: &'static str) -> Result<(), JsonError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.syntax(message))
        }
    }

    /// The escape whose backslash stands just before the cursor, into `out`.
    pub(super) fn escape(&mut self, out: &mut String) -> Result<(), JsonError> {
        decode_escape(self.bytes, &mut self.pos, out)
    }
}

struct Parser<'a> {
    cursor: Cursor<'a>,
    depth_max: usize,
    duplicate: Option<String>,
}

impl<'a> std::ops::Deref for Parser<'a> {
    type Target = Cursor<'a>;
    fn deref(&self) -> &Cursor<'a> {
        &self.cursor
    }
}

impl std::ops::DerefMut for Parser<'_> {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.cursor
    }
}

impl Parser<'_> {
    /// `path` names the object being read, for duplicate reports.
    fn value(&mut self, depth: usize, path: &mut String) -> Result<Value, JsonError> {
        match self.peek() {
            None => Err(self.eof()),
            Some(b'{') => self.object(depth + 1, path),
            Some(b'[') => self.array(depth + 1, path),
            Some(b'"') => Ok(Value::String(self.string()?)),
            Some(b't') => self.literal("true", Value::Bool(true)),
            Some(b'f') => self.literal("false", Value::Bool(false)),
            Some(b'n') => self.literal("null", Value::Null),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.syntax("expected a JSON value")),
        }
    }

    fn literal(&mut self, word: &'static str, value: Value) -> Result<Value, JsonError> {
        for &expected in word.as_bytes() {
            match self.peek() {
                Some(b) if b == expected => self.pos += 1,
                _ => return Err(self.syntax("expected true, false or null")),
            }
        }
        Ok(value)
    }

    fn number(&mut self) -> Result<Value, JsonError> {
        let start = self.pos;
        self.skip_number()?;
        let text = std::str::from_utf8(&self.bytes[start..self.pos]).expect("digits are ASCII");
        Ok(Value::Number(text.to_owned()))
    }

    fn string(&mut self) -> Result<String, JsonError> {
        self.pos += 1; // the opening quote
        let mut out = String::new();
        loop {
            let run_start = self.pos;
            while let Some(b) = self.peek() {
                if b == b'"' || b == b'\\' || b < 0x20 {
                    break;
                }
                self.pos += 1;
            }
            // The input is a &str and the run stops only at ASCII bytes, so the run
            // is whole characters.
            out.push_str(std::str::from_utf8(&self.bytes[run_start..self.pos]).expect("utf-8"));
            match self.peek() {
                None => return Err(self.eof()),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(out);
                }
                Some(b'\\') => {
                    self.pos += 1;
                    self.escape(&mut out)?;
                }
                Some(_) => return Err(self.syntax("control character in a string")),
            }
        }
    }

    fn array(&mut self, depth: usize, path: &mut String) -> Result<Value, JsonError> {
        if depth > self.depth_max {
            return Err(JsonError::TooDeep { offset: self.pos });
        }
        self.pos += 1;
        let mut items = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Value::Array(items));
        }
        loop {
            self.skip_whitespace();
            items.push(self.value(depth, path)?);
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Value::Array(items));
                }
                _ => return Err(self.syntax("expected ',' or ']' in an array")),
            }
        }
    }

    fn object(&mut self, depth: usize, path: &mut String) -> Result<Value, JsonError> {
        if depth > self.depth_max {
            return Err(JsonError::TooDeep { offset: self.pos });
        }
        self.pos += 1;
        let mut members: Vec<(String, Value)> = Vec::new();
        self.skip_whitespace();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Value::Object(members));
        }
        loop {
            self.skip_whitespace();
            if self.peek() != Some(b'"') {
                return Err(self.syntax("expected a string key in an object"));
            }
            let key = self.string()?;
            self.skip_whitespace();
            self.expect(b':', "expected ':' after an object key")?;
            self.skip_whitespace();
            let path_len = path.len();
            if !path.is_empty() {
                path.push('.');
            }
            path.push_str(&key);
            let value = self.value(depth, path)?;
            path.truncate(path_len);
            members.push((key, value));
            self.skip_whitespace();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    if self.duplicate.is_none()
                        && let Some(key) = first_duplicate(&members)
                    {
                        let prefix = if path.is_empty() {
                            String::new()
                        } else {
                            format!("{path}.")
                        };
                        self.duplicate = Some(format!("{prefix}{key}"));
                    }
                    return Ok(Value::Object(members));
                }
                _ => return Err(self.syntax("expected ',' or '}' in an object")),
            }
        }
    }
}

/// Decodes the escape whose backslash stands just before `bytes[*pos]` into `out`,
/// moving `*pos` past it. On an error `*pos` is where the error stands, as the
/// parsers report syntax errors (`Cursor::escape`).
fn decode_escape(bytes: &[u8], pos: &mut usize, out: &mut String) -> Result<(), JsonError> {
    let eof = || JsonError::Eof {
        offset: bytes.len(),
    };
    let syntax = |at: usize, message| {
        if at >= bytes.len() {
            eof()
        } else {
            JsonError::Syntax {
                offset: at,
                message,
            }
        }
    };
    let Some(&b) = bytes.get(*pos) else {
        return Err(eof());
    };
    let c = match b {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            *pos += 1;
            return unicode_escape(bytes, pos, out, &eof, &syntax);
        }
        _ => return Err(syntax(*pos, "unknown escape in a string")),
    };
    *pos += 1;
    out.push(c);
    Ok(())
}

/// The rest of a `\u` escape (and of the low half of a surrogate pair).
fn unicode_escape(
    bytes: &[u8],
    pos: &mut usize,
    out: &mut String,
    eof: &dyn Fn() -> JsonError,
    syntax: &dyn Fn(usize, &'static str) -> JsonError,
) -> Result<(), JsonError> {
    let escape_at = *pos - 2; // the backslash
    let lone = JsonError::LoneSurrogate { offset: escape_at };
    let hex4 = |pos: &mut usize| -> Result<u32, JsonError> {
        let mut code = 0;
        for _ in 0..4 {
            let Some(&b) = bytes.get(*pos) else {
                return Err(eof());
            };
            let Some(digit) = (b as char).to_digit(16) else {
                return Err(syntax(*pos, "expected four hex digits after \\u"));
            };
            code = code * 16 + digit;
            *pos += 1;
        }
        Ok(code)
    };
    let first = hex4(pos)?;
    let code = if (0xD800..0xDC00).contains(&first) {
        if *pos >= bytes.len() {
            return Err(eof());
        }
        if !bytes[*pos..].starts_with(b"\\u") {
            return Err(lone);
        }
        *pos += 2;
        let second = hex4(pos)?;
        if !(0xDC00..0xE000).contains(&second) {
            return Err(lone);
        }
        0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
    } else if (0xDC00..0xE000).contains(&first) {
        return Err(lone);
    } else {
        first
    };
    match char::from_u32(code) {
        Some(c) => out.push(c),
        None => return Err(lone),
    }
    Ok(())
}

/// The first key that stands twice among `members`, if any. Small objects (events)
/// are compared pairwise; large ones are sorted, so that no input is quadratic.
fn first_duplicate(members: &[(String, Value)]) -> Option<&str> {
    if members.len() <= 16 {
        return members
            .iter()
            .enumerate()
            .find(|(i, (key, _))| members[..*i].iter().any(|(k, _)| k == key))
            .map(|(_, (key, _))| key.as_str());
    }
    let mut keys: Vec<&str> = members.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    keys.windows(2)
        .find(|pair| pair[0] == pair[1])
        .map(|pair| pair[0])
}

/// Writes `value` in the canonical form: compact, object keys sorted by their UTF-8
/// bytes, numbers as written, strings with the minimal escaping JSON requires.
pub fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(text) => out.push_str(text),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(members) => {
            let mut sorted: Vec<&(String, Value)> = members.iter().collect();
            // Rust's str ordering is the ordering of their UTF-8 bytes.
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            out.push('{');
            for (i, (key, item)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

/// Writes `text` as a JSON string with the minimal escaping JSON requires.
pub(super) fn write_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                write!(out, "\\u{:04x}", c as u32).expect("writing to a String cannot fail")
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canonical(text: &str) -> String {
        let parsed = parse(text, 128).expect("valid JSON");
        let mut out = String::new();
        write_canonical(&parsed.value, &mut out);
        out
    }

    #[test]
    fn canonical_form() {
        let cases = [
            (
                r#"{ "b" : 1 , "a" : [ true , null ] }"#,
                r#"{"a":[true,null],"b":1}"#,
            ),
            (
                r#"{"n": 1.50, "e": 1E+5, "big": 123456789012345678901234567890}"#,
                r#"{"big":123456789012345678901234567890,"e":1E+5,"n":1.50}"#,
            ),
            (
                r#"{"s": "caf\u00e9 \/ \"q\" \u0001"}"#,
                "{\"s\":\"café / \\\"q\\\" \\u0001\"}",
            ),
            (r#"{"é": 1, "z": 2, "Z": 3}"#, r#"{"Z":3,"z":2,"é":1}"#),
            (r#"{"x": "\ud83d\ude00"}"#, "{\"x\":\"😀\"}"),
        ];
        for (input, expected) in cases {
            assert_eq!(canonical(input), expected, "input: {input}");
        }
    }

    #[test]
    fn errors() {
        let cases: [(&str, JsonError); 10] = [
            ("{\"a\": 1", JsonError::Eof { offset: 7 }),
            ("{\"a\": \"x", JsonError::Eof { offset: 8 }),
            ("[1, 2", JsonError::Eof { offset: 5 }),
            ("", JsonError::Eof { offset: 0 }),
            ("[\"\\ud800\"]", JsonError::LoneSurrogate { offset: 2 }),
            ("[\"ab\\udc00\"]", JsonError::LoneSurrogate { offset: 4 }),
            (
                "[\"\\ud800\\u0041\"]",
                JsonError::LoneSurrogate { offset: 2 },
            ),
            ("[\"\\ud800\\n\"]", JsonError::LoneSurrogate { offset: 2 }),
            (
                "{\"a\": 01}",
                JsonError::Syntax {
                    offset: 7,
                    message: "expected ',' or '}' in an object",
                },
            ),
            (
                "{\"a\": 1} x",
                JsonError::Syntax {
                    offset: 9,
                    message: "unexpected text after the value",
                },
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(parse(input, 128).unwrap_err(), expected, "input: {input}");
        }
    }

    #[test]
    fn depth_is_counted_in_levels() {
        let nested = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(&nested(128), 128).is_ok());
        assert_eq!(
            parse(&nested(129), 128).unwrap_err(),
            JsonError::TooDeep { offset: 128 }
        );
    }

    #[test]
    fn duplicates_are_reported_with_their_path() {
        let parsed = parse(r#"{"a": {"b": 1, "b": 2}, "c": 3}"#, 128).unwrap();
        assert_eq!(parsed.duplicate.as_deref(), Some("a.b"));
        let parsed = parse(r#"{"a": 1, "a": 1}"#, 128).unwrap();
        assert_eq!(parsed.duplicate.as_deref(), Some("a"));
    }
}
