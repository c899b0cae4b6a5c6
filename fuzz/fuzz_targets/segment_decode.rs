//! Any bytes given to the segment reader yield an error or data, never a panic or UB.
//! Run: `cargo +nightly fuzz run segment_decode` from `fuzz/`.
#![no_main]

use basalt_storage::DecodeMode;
use basalt_storage::segment::Segment;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut m = arrow_buffer::MutableBuffer::new(data.len());
    m.extend_from_slice(data);
    if let Ok(seg) = Segment::from_buffer("fuzz.bsg".into(), m.into()) {
        for rg in 0..seg.meta().row_groups.len() {
            for col in 0..seg.meta().column_ids.len() {
                let _ = seg.read_column(rg, col, DecodeMode::Values);
                let _ = seg.read_column(rg, col, DecodeMode::Codes);
            }
        }
    }
});
