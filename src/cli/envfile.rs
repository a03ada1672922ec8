//! systemd's `EnvironmentFile=` syntax, read as systemd reads it: the reader of
//! the site defaults file, with no I/O of its own.

/// One entry of an environment file, with the line (from 1) it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `NAME=value`, with the value as systemd reads it.
    Assignment {
        line: usize,
        name: String,
        value: String,
    },
    /// Text that systemd would not use (or would use by accident), and why.
    Problem { line: usize, why: String },
}

/// The entries of an environment file, read as systemd reads an `EnvironmentFile=`
/// (its `parse_env_file_internal` state machine, then its check of each name):
/// lines starting with `#` or `;` are comments; whitespace around the name and
/// before the value is dropped; an unquoted value keeps its inner whitespace and
/// quotes, loses its trailing whitespace, and takes `\` as an escape of the next
/// character (`\` at a line's end continues the value on the next line); a value in
/// single quotes is taken verbatim, one in double quotes with `\` escaping `"`,
/// `\`, `` ` ``, `$` and a line end, and either may span lines; quoted and unquoted
/// parts next to each other join. Where systemd drops a line without a word (no
/// `=`, a name such as `export SPOOLITE_DB`, text that is not UTF-8), this says so
/// in an `Entry::Problem`, as it does of a quote that is never closed (systemd
/// takes the rest of the file as the value).
pub fn parse_environment_file(bytes: &[u8]) -> Vec<Entry> {
    let mut parser = EnvironmentParser::default();
    for &byte in bytes {
        parser.feed(byte);
    }
    parser.finish()
}

/// Where `EnvironmentParser` is within an entry: systemd's states.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum EnvState {
    #[default]
    PreKey,
    Key,
    PreValue,
    Value,
    ValueEscape,
    SingleQuote,
    DoubleQuote,
    DoubleQuoteEscape,
    Comment,
    CommentEscape,
}

/// The environment file's reader, fed one byte at a time.
#[derive(Debug)]
struct EnvironmentParser {
    state: EnvState,
    /// The line of the byte being read.
    line: usize,
    /// The line the entry being read starts on.
    entry_line: usize,
    /// The line of the quote last opened.
    quote_line: usize,
    name: Vec<u8>,
    /// Where the name's trailing whitespace begins, if it has some.
    name_end: Option<usize>,
    value: Vec<u8>,
    /// Where an unquoted value's trailing whitespace begins, if it has some.
    value_end: Option<usize>,
    entries: Vec<Entry>,
}

impl Default for EnvironmentParser {
    fn default() -> Self {
        EnvironmentParser {
            state: EnvState::PreKey,
            line: 1,
            entry_line: 1,
            quote_line: 1,
            name: Vec::new(),
            name_end: None,
            value: Vec::new(),
            value_end: None,
            entries: Vec::new(),
        }
    }
}

/// systemd's `WHITESPACE` and `NEWLINE`.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_line_end(byte: u8) -> bool {
    matches!(byte, b'\n' | b'\r')
}

impl EnvironmentParser {
    fn feed(&mut self, byte: u8) {
        use EnvState::*;
        match self.state {
            PreKey if byte == b'#' || byte == b';' => self.state = Comment,
            PreKey if !is_space(byte) => self.start_key(byte),
            PreKey => {}
            Key if is_line_end(byte) => {
                self.state = PreKey;
                self.no_equals_sign();
            }
            Key if byte == b'=' => {
                self.state = PreValue;
                self.value_end = None;
            }
            Key => {
                track_trailing_space(&mut self.name_end, self.name.len(), byte);
                self.name.push(byte);
            }
            PreValue if is_line_end(byte) => {
                self.state = PreKey;
                self.push();
            }
            PreValue => self.pre_value(byte),
            Value if is_line_end(byte) => {
                self.state = PreKey;
                self.chomp_value();
                self.push();
            }
            Value if byte == b'\\' => {
                self.state = ValueEscape;
                self.value_end = None;
            }
            Value => {
                track_trailing_space(&mut self.value_end, self.value.len(), byte);
                self.value.push(byte);
            }
            ValueEscape => {
                self.state = Value;
                // An escaped line end continues the value on the next line.
                if !is_line_end(byte) {
                    self.value.push(byte);
                }
            }
            SingleQuote if byte == b'\'' => self.state = PreValue,
            SingleQuote => self.value.push(byte),
            DoubleQuote if byte == b'"' => self.state = PreValue,
            DoubleQuote if byte == b'\\' => self.state = DoubleQuoteEscape,
            DoubleQuote => self.value.push(byte),
            DoubleQuoteEscape => self.double_quote_escape(byte),
            Comment if byte == b'\\' => self.state = CommentEscape,
            Comment if is_line_end(byte) => self.state = PreKey,
            Comment => {}
            CommentEscape if is_line_end(byte) => self.state = PreKey,
            CommentEscape => self.state = Comment,
        }
        if byte == b'\n' {
            self.line += 1;
        }
    }

    /// The first byte of a name, which starts an entry.
    fn start_key(&mut self, byte: u8) {
        self.state = EnvState::Key;
        self.entry_line = self.line;
        self.name_end = None;
        self.name.push(byte);
    }

    /// The byte after a `\` inside double quotes: `"`, `\`, `` ` `` and `$` stand
    /// for themselves, a line end continues the value, and any other keeps its `\`.
    fn double_quote_escape(&mut self, byte: u8) {
        self.state = EnvState::DoubleQuote;
        if b"\"\\`$".contains(&byte) {
            self.value.push(byte);
        } else if byte != b'\n' {
            self.value.extend([b'\\', byte]);
        }
    }

    /// After the `=` and between a value's quoted and unquoted parts.
    fn pre_value(&mut self, byte: u8) {
        match byte {
            b'\'' => {
                self.state = EnvState::SingleQuote;
                self.quote_line = self.line;
            }
            b'"' => {
                self.state = EnvState::DoubleQuote;
                self.quote_line = self.line;
            }
            b'\\' => self.state = EnvState::ValueEscape,
            byte if !is_space(byte) => {
                self.state = EnvState::Value;
                self.value.push(byte);
            }
            _ => {}
        }
    }

    fn chomp_value(&mut self) {
        if let Some(end) = self.value_end.take() {
            self.value.truncate(end);
        }
    }

    /// A line with no `=`, which systemd drops.
    fn no_equals_sign(&mut self) {
        let text = String::from_utf8_lossy(&self.name).into_owned();
        self.name.clear();
        let why = format!("{text:?} is not NAME=value (it has no '='); ignored");
        self.problem(self.entry_line, why);
    }

    fn problem(&mut self, line: usize, why: String) {
        self.entries.push(Entry::Problem { line, why });
    }

    /// The entry read, checked as systemd checks it: UTF-8, a name of letters,
    /// digits and `_` not starting with a digit (and, for `set_var`, no NUL).
    fn push(&mut self) {
        if let Some(end) = self.name_end.take() {
            self.name.truncate(end);
        }
        let name = std::mem::take(&mut self.name);
        let value = std::mem::take(&mut self.value);
        let line = self.entry_line;
        let Ok(name) = String::from_utf8(name) else {
            return self.problem(line, "the name is not UTF-8; ignored".to_owned());
        };
        if let Some(why) = bad_name(&name) {
            return self.problem(line, why);
        }
        let Ok(value) = String::from_utf8(value) else {
            return self.problem(line, format!("the value of {name} is not UTF-8; ignored"));
        };
        if value.contains('\0') {
            return self.problem(line, format!("the value of {name} holds a NUL; ignored"));
        }
        self.entries.push(Entry::Assignment { line, name, value });
    }

    fn finish(mut self) -> Vec<Entry> {
        use EnvState::*;
        match self.state {
            Key => self.no_equals_sign(),
            Value => {
                self.chomp_value();
                self.push();
            }
            PreValue | ValueEscape => self.push(),
            SingleQuote | DoubleQuote | DoubleQuoteEscape => {
                let name = String::from_utf8_lossy(&self.name).into_owned();
                let why = format!(
                    "the quote opened on this line is never closed, so the value of {name} \
                     runs to the end of the file"
                );
                self.problem(self.quote_line, why);
                self.push();
            }
            PreKey | Comment | CommentEscape => {}
        }
        self.entries
    }
}

/// Keeps `end` at the start of the whitespace that ends the text so far.
fn track_trailing_space(end: &mut Option<usize>, length: usize, byte: u8) {
    if !is_space(byte) {
        *end = None;
    } else if end.is_none() {
        *end = Some(length);
    }
}

/// Why `name` is not a variable name systemd sets, if it is not.
fn bad_name(name: &str) -> Option<String> {
    let valid = name.bytes().next().is_some_and(|b| !b.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if valid {
        return None;
    }
    if let Some(rest) = name
        .strip_prefix("export")
        .filter(|r| r.starts_with([' ', '\t']))
    {
        let rest = rest.trim_start();
        return Some(format!(
            "{name:?} is not a variable name: an EnvironmentFile= takes no `export`, \
             write {rest}=… alone; ignored"
        ));
    }
    Some(format!(
        "{name:?} is not a variable name (letters, digits and _, not starting with a \
         digit); ignored"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `text` as an environment file and compares its entries: `(line, name,
    /// value)` for an assignment, `(line, "!", why)` for a problem.
    fn check(text: &[u8], expected: &[(usize, &str, &str)]) {
        let entries: Vec<(usize, String, String)> = parse_environment_file(text)
            .into_iter()
            .map(|entry| match entry {
                Entry::Assignment { line, name, value } => (line, name, value),
                Entry::Problem { line, why } => (line, "!".to_owned(), why),
            })
            .collect();
        let expected: Vec<(usize, String, String)> = expected
            .iter()
            .map(|(line, name, value)| (*line, (*name).to_owned(), (*value).to_owned()))
            .collect();
        assert_eq!(entries, expected, "{:?}", String::from_utf8_lossy(text));
    }

    #[test]
    fn environment_files_read_as_systemd_reads_them() {
        // Comments, blank lines, whitespace around the name and before the value.
        check(
            b"# comment\n; also a comment\n\n  A = 1\n\tB=\n",
            &[(4, "A", "1"), (5, "B", "")],
        );
        // Unquoted: inner whitespace and quotes kept, trailing whitespace dropped,
        // `\` escapes the next character, and at a line's end continues the value.
        check(
            b"A=x  y \t\nB=it's \"so\"\nC=a\\ b\\\\ \nD=one\\\ntwo\nE=last",
            &[
                (1, "A", "x  y"),
                (2, "B", "it's \"so\""),
                (3, "C", "a b\\"),
                (4, "D", "onetwo"),
                (6, "E", "last"),
            ],
        );
        // Single quotes verbatim, double quotes with the shell's escapes; either may
        // span lines, and quoted and unquoted parts join.
        check(
            b"A='x\\y \"z\" '\nB=\"a\\\"b\\\\c\\$d\\e\"\nC=\"l1\nl2\"\nD=\"con\\\ntinued\"\nE=\"x\" y\nF=\n",
            &[
                (1, "A", "x\\y \"z\" "),
                (2, "B", "a\"b\\c$d\\e"),
                (3, "C", "l1\nl2"),
                (5, "D", "continued"),
                (7, "E", "xy"),
                (8, "F", ""),
            ],
        );
        // CRLF line ends; a comment ending in `\` does not swallow the next line.
        check(b"A=b\r\n# c \\\nC=d\r\n", &[(1, "A", "b"), (3, "C", "d")]);
    }

    #[test]
    fn what_systemd_drops_is_reported_with_its_line() {
        check(
            b"export SPOOLITE_DB=/x\njunk\n1BAD=x\n=x\nA B=1\nOK=\xff\n\xffK=1\nN=\"a\\\nb",
            &[
                (
                    1,
                    "!",
                    "\"export SPOOLITE_DB\" is not a variable name: an EnvironmentFile= takes \
                     no `export`, write SPOOLITE_DB=… alone; ignored",
                ),
                (
                    2,
                    "!",
                    "\"junk\" is not NAME=value (it has no '='); ignored",
                ),
                (
                    3,
                    "!",
                    "\"1BAD\" is not a variable name (letters, digits and _, not starting with \
                     a digit); ignored",
                ),
                (4, "!", "\"=x\" is not NAME=value (it has no '='); ignored"),
                (
                    5,
                    "!",
                    "\"A B\" is not a variable name (letters, digits and _, not starting with \
                     a digit); ignored",
                ),
                (6, "!", "the value of OK is not UTF-8; ignored"),
                (7, "!", "the name is not UTF-8; ignored"),
                (
                    8,
                    "!",
                    "the quote opened on this line is never closed, so the value of N runs to \
                     the end of the file",
                ),
                (8, "N", "ab"),
            ],
        );
        // A last line without `=` and without a line end.
        check(
            b"A=1\nlast",
            &[
                (1, "A", "1"),
                (
                    2,
                    "!",
                    "\"last\" is not NAME=value (it has no '='); ignored",
                ),
            ],
        );
    }
}
