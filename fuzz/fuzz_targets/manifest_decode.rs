//! Any bytes given to the manifest decoder yield an error or a manifest, never a panic.
//! Run: `cargo +nightly fuzz run manifest_decode` from `fuzz/`.
#![no_main]

use basalt_storage::manifest::Manifest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = Manifest::decode(data, std::path::Path::new("MANIFEST"));
});
