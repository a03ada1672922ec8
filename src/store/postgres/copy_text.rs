//! COPY's text format (`COPY … FROM STDIN`), the way every bulk write to
//! PostgreSQL goes: one row of fields escaped as the format says, and a buffer
//! of rows sent in one COPY.

use std::io::Write as _;

use postgres::Transaction;

use crate::store::error::StoreError;

/// Appends `value` to COPY text as one field (text format: backslash escapes).
fn field(out: &mut Vec<u8>, value: &str) {
    for byte in value.bytes() {
        match byte {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            _ => out.push(byte),
        }
    }
}

/// Appends the fields of one COPY row, tab separated, newline ended; `None` is NULL.
pub fn row(out: &mut Vec<u8>, fields: &[Option<&str>]) {
    for (at, value) in fields.iter().enumerate() {
        if at > 0 {
            out.push(b'\t');
        }
        match value {
            Some(value) => field(out, value),
            None => out.extend_from_slice(b"\\N"),
        }
    }
    out.push(b'\n');
}

/// COPYs `data` (COPY text rows) with `sql` and empties it.
pub(crate) fn copy(
    tx: &mut Transaction<'_>,
    sql: &str,
    data: &mut Vec<u8>,
) -> Result<(), StoreError> {
    if data.is_empty() {
        return Ok(());
    }
    let mut writer = tx.copy_in(sql)?;
    writer.write_all(data).map_err(StoreError::Copy)?;
    writer.finish()?;
    data.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_text_escapes_what_would_end_a_field_or_a_row() {
        let mut out = Vec::new();
        row(&mut out, &[Some("a\tb\\c\nd\re"), None, Some("")]);
        assert_eq!(out, b"a\\tb\\\\c\\nd\\re\t\\N\t\n");
    }
}
