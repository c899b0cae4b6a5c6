//! Arbitrary bytes laid out as a database directory (manifest, a segment, a delete file and
//! a log file) must open to an error or to readable data — never a panic or a hang.
//! Run: `cargo +nightly fuzz run open_database` from `fuzz/`.
#![no_main]

use std::path::Path;
use std::sync::Arc;

use basalt_storage::{MemFs, Store, StoreOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Split the input into four files at fixed fractions.
    let q = data.len() / 4;
    let fs = MemFs::new();
    fs.put(Path::new("/db/MANIFEST"), &data[..q]);
    fs.put(Path::new("/db/t1/s0000000000000001.bsg"), &data[q..2 * q]);
    fs.put(Path::new("/db/t1/s0000000000000001.1.del"), &data[2 * q..3 * q]);
    fs.put(Path::new("/db/wal/0000000000000001.wal"), &data[3 * q..]);
    for read_only in [true, false] {
        let opts = StoreOptions { read_only, ..StoreOptions::default() };
        if let Ok(store) = Store::open(Arc::new(fs.clone()), Path::new("/db"), Path::new("fuzz"), opts) {
            let snap = store.snapshot();
            for name in snap.table_names() {
                if let Ok(t) = snap.table(&name) {
                    let all: Vec<usize> = (0..t.schema().full_schema().fields().len()).collect();
                    if let Ok(scan) = t.scan(&all) {
                        for b in scan {
                            let _ = b;
                        }
                    }
                }
            }
        }
    }
});
