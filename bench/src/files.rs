//! Reading the generated files: the buffer the bench reads them with, and warming
//! one into the page cache before a timed reader opens it.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use crate::BenchResult;

/// Read buffer of `warm` and of the in-process SHA-256 baseline.
pub const READ_BUFFER_BYTES: usize = 256 * 1024;

/// Reads `path` to its end, so that the next reader finds it in the page cache.
pub fn warm(path: &Path) -> BenchResult<()> {
    let mut file = File::open(path)?;
    let mut buffer = vec![0u8; READ_BUFFER_BYTES];
    while file.read(&mut buffer)? > 0 {}
    Ok(())
}
