//! `.csv` batches through the real binary (section *CSV batches*).
