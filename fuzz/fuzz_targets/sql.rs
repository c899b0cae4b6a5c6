//! Arbitrary SQL text run on a small in-memory database must give a result or an error —
//! never a panic or a hang. Skipped: inputs that would touch the file system (`COPY`,
//! `read_…`, `FROM '…'`: the fuzzer must not write files), and the ways SQL can ask for
//! endless or enormous work on purpose (`RECURSIVE` CTEs that never stop, `generate_series`
//! / `range` over billions of rows), which run as long as they are told to.
//! Run: `cargo +nightly fuzz run sql -- -dict=sql.dict` from `fuzz/`.
#![no_main]

use basalt::Database;
use libfuzzer_sys::fuzz_target;

const SETUP: &str = "CREATE TABLE t (a INT, s TEXT, f DOUBLE, b BOOLEAN, v VECTOR(2));
INSERT INTO t (a, s, f, b) VALUES (1, 'x', 1.5, true), (2, NULL, NULL, false), (NULL, 'yy', -0.0, NULL);
CREATE TABLE u (a BIGINT NOT NULL, d DATE);
INSERT INTO u VALUES (1, '2020-01-01'), (3, NULL);
CREATE VIEW w AS SELECT a, s FROM t WHERE a > 0";

fuzz_target!(|data: &[u8]| {
    let Ok(sql) = std::str::from_utf8(data) else { return };
    let lower = sql.to_lowercase();
    let files = lower.contains("copy") || lower.contains("read_") || lower.contains('\'') && lower.contains("from");
    let endless = lower.contains("recursive") || lower.contains("generate_series") || lower.contains("range");
    if files || endless {
        return;
    }
    let db = Database::open_in_memory().expect("in-memory database");
    let conn = db.connect();
    conn.sql(SETUP).expect("setup");
    let _ = conn.sql(sql);
    // Whatever happened, the database still answers.
    conn.sql("SELECT count(*) FROM t").expect("database still usable");
});
