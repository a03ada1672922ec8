//! `.xml` IATA AIDX batches through the real binary (section *AIDX batches*).
