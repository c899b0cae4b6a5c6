//! Integration tests of the public API (one test binary for the crate; modules below).

mod api;
mod process;
mod roundtrip;
