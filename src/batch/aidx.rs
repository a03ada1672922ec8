//! `.xml` AIDX batches (section *AIDX batches*): not yet read; every file is refused.

use std::io::BufRead;

use super::{Limits, ReadError, Record, RejectReason, reject};

pub struct AidxReader<R> {
    _input: R,
    _limits: Limits,
}

impl<R: BufRead> AidxReader<R> {
    pub fn new(input: R, limits: Limits) -> AidxReader<R> {
        AidxReader {
            _input: input,
            _limits: limits,
        }
    }

    pub fn next_record(&mut self) -> Result<Option<Record>, ReadError> {
        Err(reject(
            RejectReason::UnsupportedType,
            "AIDX batches are not read yet",
        ))
    }
}
