//! `.csv` batches (section *CSV batches*): not yet read; every file is refused.

use std::io::BufRead;

use super::{Limits, ReadError, Record, RejectReason, reject};

pub struct CsvReader<R> {
    _input: R,
    _limits: Limits,
}

impl<R: BufRead> CsvReader<R> {
    pub fn new(input: R, limits: Limits) -> CsvReader<R> {
        CsvReader {
            _input: input,
            _limits: limits,
        }
    }

    pub fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        Err(reject(
            RejectReason::UnsupportedType,
            "CSV batches are not read yet",
        ))
    }
}
