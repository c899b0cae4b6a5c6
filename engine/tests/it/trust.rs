//! Wrong answers and destroyed data found by trying Basalt as a hostile user would: empty
//! and degenerate tables through every fast path, integer overflow, NULL vector components,
//! reserved names. Each case compares against DataFusion's own plans (fast paths off) or
//! against what SQL says the answer is.

use basalt::{Connection, Database};

use crate::sql::rows_in_order as cells;

/// Queries that reach each fast path: the direct fold, the fused group-by (with and
/// without keys, under projections), counts from metadata, dictionary filters, top-k,
/// `ORDER BY … LIMIT`, joins, DISTINCT.
const DEGENERATE_QUERIES: &[&str] = &[
    "SELECT min(x), max(x), sum(x), avg(x), count(x), count(*) FROM t",
    "SELECT min(x) * 1, max(x) * 1, sum(x) + 0, avg(x) * 1, coalesce(sum(x), -1) FROM t",
    "SELECT min(f), max(f), sum(f), avg(f), min(s), max(s), count(s) FROM t",
    "SELECT min(f) + 0, max(f) + 0, sum(f) + 0, avg(f) + 0, coalesce(max(s), 'none') FROM t",
    "SELECT min(x), sum(f), count(*) FROM t WHERE x > 0",
    "SELECT sum(x) + 1, count(*) + 1 FROM t WHERE s = 'a'",
    "SELECT count(*) FROM t WHERE s = 'a'",
    "SELECT count(DISTINCT s), count(DISTINCT x) FROM t",
    "SELECT s, count(*), sum(x), min(f) FROM t GROUP BY s ORDER BY s",
    "SELECT x, count(*) FROM t GROUP BY x ORDER BY x",
    "SELECT max(_id), min(_id), count(_id) FROM t",
    "SELECT x FROM t ORDER BY x LIMIT 3",
    "SELECT s FROM t ORDER BY s DESC LIMIT 3",
    "SELECT * FROM t LIMIT 5",
    "SELECT _id FROM t ORDER BY l2_distance(v, [1.0, 2.0]) LIMIT 3",
    "SELECT _id FROM vector_topk('t', 'v', [1.0, 2.0], 3)",
    "SELECT count(*), sum(a.x), max(b.f) FROM t a JOIN t b ON a.s = b.s",
    "SELECT count(*), min(a.x) FROM t a JOIN t b ON a.x = b.x",
    "SELECT DISTINCT s FROM t ORDER BY s",
    "SELECT bool_and(x > 0), array_agg(x), string_agg(s, ',') FROM t",
];

fn agree(on: &Connection, off: &Connection, state: &str) {
    for q in DEGENERATE_QUERIES {
        let fast = on.sql(q).map(|b| cells(&b)).map_err(|e| e.to_string());
        let plain = off.sql(q).map(|b| cells(&b)).map_err(|e| e.to_string());
        assert_eq!(fast, plain, "{state}: {q}");
    }
}

/// Empty, all-NULL, all-deleted and truncated tables, in the memtable and in segments:
/// every fast path answers what DataFusion answers with them off, and the ungrouped
/// aggregates of no rows are NULL (`count` 0).
#[test]
fn fast_paths_agree_with_datafusion_on_empty_null_deleted_and_truncated_tables() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let on = db.connect();
    let off = db.connect();
    off.set_fast_paths(false).unwrap();
    off.set_filter_pushdown(false).unwrap();
    let create = "CREATE TABLE t (x BIGINT, f DOUBLE, s TEXT, v VECTOR(2))";
    let values = "(1, 1.5, 'a', [1.0, 1.0]), (2, 2.5, 'b', [2.0, 2.0]), (3, NULL, 'a', NULL)";
    let nulls = "(NULL, NULL, NULL, NULL), (NULL, NULL, NULL, NULL)";
    let states: &[(&str, &[&str])] = &[
        ("empty", &[]),
        ("all NULL, memtable", &[nulls]),
        ("all NULL, segment", &[nulls, "FLUSH"]),
        ("all deleted, memtable", &[values, "DELETE FROM t"]),
        ("all deleted, segment", &[values, "FLUSH", "DELETE FROM t"]),
        ("all deleted, flushed", &[values, "FLUSH", "DELETE FROM t", "FLUSH"]),
        ("truncated", &[values, "FLUSH", "TRUNCATE t"]),
        ("filtered away", &[values, "FLUSH", "DELETE FROM t WHERE x < 3", "UPDATE t SET s = NULL"]),
    ];
    for (state, steps) in states {
        on.sql("DROP TABLE IF EXISTS t").unwrap();
        on.sql(create).unwrap();
        for step in *steps {
            match *step {
                "FLUSH" => db.flush().unwrap(),
                s if s.starts_with('(') => {
                    on.sql(&format!("INSERT INTO t VALUES {s}")).unwrap();
                }
                s => {
                    on.sql(s).unwrap();
                }
            }
        }
        agree(&on, &off, state);
        if !state.starts_with("filtered") {
            let r = cells(&on.sql(DEGENERATE_QUERIES[1]).unwrap());
            assert_eq!(r, ["NULL|NULL|NULL|NULL|-1"], "{state}");
        }
    }
}
