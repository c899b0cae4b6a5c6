//! Integration tests of the public API (one test binary for the crate; modules below).

// Test helpers outside #[test] functions unwrap freely, like the tests themselves.
#![allow(clippy::unwrap_used)]

mod api;
mod df_corpus;
mod fts;
mod memory;
mod process;
mod roundtrip;
mod slt;
mod sql;
mod trust;
mod vector;
