//! SQL through the Rust API: prepared statements, streaming, async, pushdown, errors.
