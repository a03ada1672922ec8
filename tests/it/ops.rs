//! Tests of what ops engineers and analysts use: the packaging, status, metrics and read-only access.
