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

/// Integer arithmetic that does not fit its type is an error, in queries, constants,
/// aggregates and writes — and nothing wrapped is stored.
#[test]
fn integer_overflow_is_an_error_and_nothing_wrapped_is_stored() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    let off = db.connect();
    off.set_fast_paths(false).unwrap();
    conn.sql("CREATE TABLE t (a BIGINT, b INT, s SMALLINT)").unwrap();
    conn.sql("INSERT INTO t VALUES (9223372036854775807, 2147483647, 32767), (5, 1, 1)").unwrap();
    let overflowing = [
        "SELECT 9223372036854775807 + 1",
        "SELECT -9223372036854775807 - 2",
        "SELECT 4611686018427387904 * 2",
        "SELECT -(-9223372036854775807 - 1)",
        "SELECT a + 1 FROM t",
        "SELECT a * 2 FROM t WHERE a > 10",
        "SELECT s * s FROM t",
        "SELECT -a - 2 FROM t",
        "SELECT sum(a) FROM t",
        "SELECT sum(a) + 0 FROM t",
        "SELECT b > 0, sum(a) FROM t GROUP BY b > 0",
        "SELECT sum(a) FROM t GROUP BY 1 = 1",
        "SELECT count(*) FROM t WHERE a + 1 > 0",
        "SELECT a FROM t ORDER BY a + a",
        "SELECT (SELECT max(a) + 1 FROM t)",
        "SELECT sum(DISTINCT a) FROM t",
        "SELECT sum(a) OVER (ORDER BY a ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t",
        "SELECT sum(a) OVER () FROM t",
        "SELECT sum(DISTINCT a) OVER (ORDER BY a ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) FROM t",
    ];
    for q in overflowing {
        for (c, fast) in [(&conn, "on"), (&off, "off")] {
            let e = c.sql(q).map(|b| cells(&b)).expect_err(&format!("fast paths {fast}: {q}"));
            assert!(e.to_string().contains("overflow"), "{q}: {e}");
        }
    }
    // Writes that would overflow fail and change nothing.
    for w in [
        "UPDATE t SET a = a * 2",
        "UPDATE t SET b = b + 1 WHERE b > 5",
        "INSERT INTO t SELECT a + 1, b, s FROM t",
    ] {
        let e = conn.sql(w).unwrap_err();
        assert!(e.to_string().contains("overflow") || e.to_string().contains("cast"), "{w}: {e}");
    }
    let rows = cells(&conn.sql("SELECT a, b, s FROM t ORDER BY a").unwrap());
    assert_eq!(rows, ["5|1|1", "9223372036854775807|2147483647|32767"]);
    // What fits is computed as before, names unchanged.
    let ok =
        conn.sql("SELECT a - 1, b - 1, -a, a * 1, sum(b) FROM t GROUP BY a, b ORDER BY a").unwrap();
    assert_eq!(ok[0].schema().field(0).name(), "t.a - Int64(1)");
    assert_eq!(
        cells(&ok),
        [
            "4|0|-5|5|1",
            "9223372036854775806|2147483646|-9223372036854775807|9223372036854775807|2147483647"
        ]
    );
    assert_eq!(cells(&conn.sql("SELECT sum(b) FROM t").unwrap()), ["2147483648"]);
    let distinct = cells(&conn.sql("SELECT sum(DISTINCT b), sum(DISTINCT s) FROM t").unwrap());
    assert_eq!(distinct, ["2147483648|32768"]);
    let window = "SELECT sum(b) OVER (ORDER BY b ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) \
                  FROM t ORDER BY b";
    assert_eq!(cells(&conn.sql(window).unwrap()), ["1", "2147483648"]);
    // DISTINCT over a sliding frame: values leave the frame as it moves.
    let sliding = "SELECT sum(DISTINCT x) OVER (ORDER BY i ROWS BETWEEN 2 PRECEDING AND CURRENT \
                   ROW) FROM (VALUES (1, 5), (2, 5), (3, 7), (4, 5), (5, 9), (6, NULL)) v(i, x) \
                   ORDER BY i";
    assert_eq!(cells(&conn.sql(sliding).unwrap()), ["5", "5", "12", "12", "21", "14"]);
    // Sums folded natively over segments (dictionary keys, four lanes): an overflow in any
    // order of additions is found; a sum whose parts overflow but whose total fits is not
    // one.
    conn.sql("CREATE TABLE big (k TEXT, v BIGINT)").unwrap();
    conn.sql(
        "INSERT INTO big SELECT CASE WHEN value % 2 = 0 THEN 'x' ELSE 'y' END, \
         CASE WHEN value % 4 < 2 THEN 4611686018427387904 ELSE -4611686018427387904 END \
         FROM generate_series(1, 70000)",
    )
    .unwrap();
    db.flush().unwrap();
    for (c, fast) in [(&conn, "on"), (&off, "off")] {
        let fits = c.sql("SELECT k, sum(v), sum(v / 2) FROM big GROUP BY k ORDER BY k").unwrap();
        assert_eq!(cells(&fits), ["x|0|0", "y|0|0"], "fast paths {fast}");
        let e =
            c.sql("SELECT k, sum(v + 4611686018427387904 - 1) FROM big GROUP BY k").unwrap_err();
        assert!(e.to_string().contains("overflow"), "fast paths {fast}: {e}");
        let e = c.sql("SELECT sum(abs(v)) FROM big WHERE k = 'x'").unwrap_err();
        assert!(e.to_string().contains("overflow"), "fast paths {fast}: {e}");
        let e = c.sql("SELECT k, sum(abs(v)) FROM big GROUP BY k").unwrap_err();
        assert!(e.to_string().contains("overflow"), "fast paths {fast}: {e}");
    }
}

/// A vector with a NULL, NaN or infinite component (a value out of FLOAT's range
/// included) is refused by every write path; NULL vectors are fine.
#[test]
fn vectors_with_null_or_non_finite_components_are_refused_everywhere() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE v (id INT, e VECTOR(2))").unwrap();
    for w in ["INSERT INTO v VALUES (1, [1.0, NULL])", "INSERT INTO v SELECT 2, [NULL, 2.0]"] {
        let e = conn.sql(w).unwrap_err();
        assert!(e.to_string().contains("NULL"), "{w}: {e}");
    }
    for w in [
        "INSERT INTO v VALUES (1, [1e39, 0.0])",
        "INSERT INTO v VALUES (1, [0.0, -1e39])",
        "INSERT INTO v SELECT 2, [CAST('NaN' AS DOUBLE), 2.0]",
        "INSERT INTO v SELECT 2, [CAST('inf' AS FLOAT), 2.0]",
    ] {
        let e = conn.sql(w).unwrap_err();
        assert!(e.to_string().contains("finite"), "{w}: {e}");
    }
    let t = db.table("v").unwrap();
    let row = basalt::Row::new().set("id", 5).set("e", vec![f32::NAN, 1.0]);
    assert!(t.insert_row(row).unwrap_err().to_string().contains("finite"));
    conn.sql("INSERT INTO v VALUES (3, [1.0, 2.0]), (4, NULL)").unwrap();
    let e = conn.sql("UPDATE v SET e = [NULL, 1.0] WHERE id = 3").unwrap_err();
    assert!(e.to_string().contains("NULL"), "{e}");
    let e = conn.sql("UPDATE v SET e = [1e300, 1.0] WHERE id = 3").unwrap_err();
    assert!(e.to_string().contains("finite"), "{e}");
    db.flush().unwrap();
    assert_eq!(
        cells(&conn.sql("SELECT id, e FROM v ORDER BY id").unwrap()),
        ["3|[1.0, 2.0]", "4|NULL"]
    );
}

/// Statements as deep as the limit allows run on a 2 MiB thread (sync, streamed, prepared
/// and async forms); deeper ones are refused with a clear error, not a stack overflow.
#[test]
fn deep_statements_run_on_small_stacks_or_are_refused() {
    let db = Database::open_in_memory().unwrap();
    db.connect().sql("CREATE TABLE t AS SELECT value AS a FROM generate_series(1, 100)").unwrap();
    let deep = format!("SELECT sum({}) FROM t", vec!["a"; 600].join(" + "));
    let ors = format!(
        "SELECT count(*) FROM t WHERE {}",
        (0..2_000).map(|i| format!("a = {i}")).collect::<Vec<_>>().join(" OR ")
    );
    let too_deep = format!("SELECT {}", vec!["1"; 1_200].join(" + "));
    // Parentheses as deep as SQLite's default limit parse (DataFusion's own limit is 50).
    let parens = format!("SELECT max({}a{}) FROM t", "(".repeat(900), ")".repeat(900));
    let too_many_parens = format!("SELECT {}1{}", "(".repeat(1_200), ")".repeat(1_200));
    let handle = std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(move || {
            let conn = db.connect();
            assert_eq!(cells(&conn.sql(&deep).unwrap()), ["3030000"]);
            let streamed: Vec<_> = conn.sql_stream(&deep).unwrap().map(|b| b.unwrap()).collect();
            assert_eq!(cells(&streamed), ["3030000"]);
            assert_eq!(cells(&conn.prepare(&deep).unwrap().execute(&[]).unwrap()), ["3030000"]);
            assert_eq!(cells(&conn.sql(&ors).unwrap()), ["100"]);
            let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
            let r = rt.block_on(conn.sql_async(&deep)).unwrap();
            assert_eq!(cells(&r), ["3030000"]);
            let e = conn.sql(&too_deep).unwrap_err();
            assert!(e.to_string().contains("too complex"), "{e}");
            assert_eq!(cells(&conn.sql(&parens).unwrap()), ["100"]);
            let e = conn.sql(&too_many_parens).unwrap_err();
            assert!(e.to_string().contains("nested too deeply"), "{e}");
        })
        .unwrap();
    handle.join().expect("no stack overflow");
}

/// A recursion without a stopping condition ends at the recursion limit; a running
/// statement stops at its timeout or when interrupted from another thread — its writes
/// undone, the connection usable afterwards.
#[test]
fn statements_stop_at_the_recursion_limit_a_timeout_or_an_interrupt() {
    use std::time::Duration;
    let forever = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) \
                   SELECT count(*) FROM r";
    let limited = basalt::Database::open_in_memory_with(basalt::Options {
        max_recursion: 200,
        ..basalt::Options::default()
    })
    .unwrap();
    let e = limited.connect().sql(forever).unwrap_err();
    assert!(e.to_string().contains("stopped after 200 iterations"), "{e}");
    let ok = "WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 150) \
              SELECT count(*) FROM r";
    assert_eq!(cells(&limited.connect().sql(ok).unwrap()), ["150"]);
    // Each run starts counting afresh (a prepared plan is reused).
    let p = limited.connect().prepare(ok).unwrap();
    for _ in 0..3 {
        assert_eq!(cells(&p.execute(&[]).unwrap()), ["150"]);
    }

    let db = Database::open_in_memory_with(basalt::Options {
        max_recursion: usize::MAX,
        statement_timeout: Some(Duration::from_millis(300)),
        ..basalt::Options::default()
    })
    .unwrap();
    let conn = db.connect();
    let e = conn.sql(forever).unwrap_err();
    assert!(matches!(e, basalt::Error::Timeout { .. }), "{e}");
    let mut rows = conn.sql_stream(forever).unwrap();
    let e = rows.next().unwrap().unwrap_err();
    assert!(matches!(e, basalt::Error::Timeout { .. }), "{e}");
    // Interrupted from another thread; a write is undone.
    conn.set_statement_timeout(None);
    conn.sql("CREATE TABLE t (n BIGINT)").unwrap();
    let other = conn.clone();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = done.clone();
    // Interrupts keep coming until the statement ends (one sent before it starts is lost).
    let stopper = std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(100));
            other.interrupt();
        }
    });
    let e = conn
        .sql("INSERT INTO t WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT n FROM r")
        .unwrap_err();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    stopper.join().unwrap();
    assert!(matches!(e, basalt::Error::Interrupted), "{e}");
    assert_eq!(cells(&conn.sql("SELECT count(*) FROM t").unwrap()), ["0"]);
    conn.sql("INSERT INTO t VALUES (1)").unwrap();
    assert_eq!(cells(&conn.sql("SELECT count(*) FROM t").unwrap()), ["1"]);
}

/// Sorts, aggregates and joins over more data than the memory limit complete with the
/// right answer, spilling into the database's spill folder; the spill folder is empty
/// afterwards. The fused group-by counts its groups against the limit and hands a
/// partition that outgrows it to DataFusion's aggregate; a hash join whose build side does
/// not fit runs again as a sort-merge join, which spills, so a join never fails on its hash
/// table; the pool keeps a share for the merges of spilled runs, which cannot spill.
#[test]
fn queries_larger_than_the_memory_limit_complete_by_spilling() {
    let dir = tempfile::tempdir().unwrap();
    let mut outcomes = Vec::new();
    // Under 64 MiB the sorts still spill and the hash join's build side still does not fit.
    for limit in [24 << 20, 64 << 20] {
        let opts = basalt::Options { sql_memory_limit: Some(limit), ..basalt::Options::default() };
        let db = Database::open_with(dir.path(), opts).unwrap();
        let conn = db.connect();
        // 400,000 rows of ~100-byte strings: about 40 MB of values, over the limit.
        conn.sql(
            "CREATE TABLE IF NOT EXISTS big AS SELECT value AS k, \
             concat('row-', CAST(value * 7919 % 400009 AS TEXT), '-', repeat('x', 90)) AS s, \
             CAST(value % 97 AS TEXT) AS a, CAST(value % 89 AS TEXT) AS b, \
             CAST(value % 83 AS TEXT) AS c \
             FROM generate_series(1, 400000)",
        )
        .unwrap();
        let mut judge = |what: &str, r: basalt::Result<Vec<String>>, want: &[&str]| {
            let what = format!("{what} under {} MiB", limit >> 20);
            assert_eq!(r.unwrap_or_else(|e| panic!("{what}: {e}")), want, "{what}");
            outcomes.push(what);
        };
        // Dictionary-coded keys (the fused group-by when fast paths are on), one group per
        // row, each holding a string.
        let coded = "SELECT count(*), count(m), sum(mk) FROM \
                     (SELECT a, b, c, max(s) AS m, max(k) AS mk FROM big GROUP BY a, b, c)";
        let join = "SELECT a.k FROM big a JOIN big b ON a.s = b.s";
        for fast in [true, false] {
            conn.set_fast_paths(fast).unwrap();
            let sorted = (|| {
                let (mut last, mut n): (Option<String>, usize) = (None, 0);
                for b in conn.sql_stream("SELECT s FROM big ORDER BY s")? {
                    for row in cells(&[b?]) {
                        assert!(last.as_ref().is_none_or(|l| *l <= row), "sorted");
                        last = Some(row);
                        n += 1;
                    }
                }
                Ok(vec![n.to_string()])
            })();
            judge(&format!("sort (fast paths {fast})"), sorted, &["400000"]);
            let grouped = conn
                .sql("SELECT count(*), sum(n) FROM (SELECT s, count(*) AS n FROM big GROUP BY s)")
                .map(|b| cells(&b));
            judge(&format!("aggregate (fast paths {fast})"), grouped, &["400000|400000"]);
            let grouped = conn.sql(coded).map(|b| cells(&b));
            let want = ["400000|400000|80000200000"];
            judge(&format!("coded aggregate (fast paths {fast})"), grouped, &want);
            let joined = conn.sql(&format!("SELECT count(*) FROM ({join})")).map(|b| cells(&b));
            judge(&format!("join (fast paths {fast})"), joined, &["400000"]);
            // Streamed: the statement's first batch is awaited before the stream is handed
            // out, so the join may still run again as a sort-merge join.
            let streamed = (|| {
                let mut n = 0;
                for b in conn.sql_stream(join)? {
                    n += b?.num_rows();
                }
                Ok(vec![n.to_string()])
            })();
            judge(&format!("streamed join (fast paths {fast})"), streamed, &["400000"]);
        }
        if limit == 24 << 20 {
            conn.set_fast_paths(true).unwrap();
            let analyzed =
                cells(&conn.sql(&format!("EXPLAIN ANALYZE {coded}")).unwrap()).join("\n");
            let fused = analyzed.lines().find(|l| l.contains("BasaltGroupBy")).unwrap_or_default();
            assert!(fused.contains("over_memory_limit="), "{analyzed}");
            assert!(!fused.contains("over_memory_limit=0"), "{analyzed}");
        }
    }
    println!("completed over the memory limit: {outcomes:?}");
    // What a killed process leaves in the spill folder goes at the next writer open.
    let spill = dir.path().join("spill");
    let stale = spill.join("datafusion-dead");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join(".tmpAbCdEf"), vec![0u8; 1 << 20]).unwrap();
    drop(Database::open(dir.path()).unwrap());
    let left: Vec<_> = std::fs::read_dir(&spill)
        .map(|d| d.flatten().map(|e| e.path()).filter(|p| p.ends_with("datafusion-dead")).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "spill files left behind: {left:?}");
}

/// The vector top-k's ranked rows count against the memory limit: a `LIMIT` as large as
/// the table under a small limit is "resources exhausted", a small one answers.
#[test]
fn vector_top_k_counts_against_the_memory_limit() {
    let opts = basalt::Options { sql_memory_limit: Some(2 << 20), ..basalt::Options::default() };
    let db = Database::open_in_memory_with(opts).unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE v (e VECTOR(4), s TEXT)").unwrap();
    conn.sql(
        "INSERT INTO v SELECT [CAST(value AS DOUBLE), 1.0, 2.0, 3.0], repeat('x', 200) \
         FROM generate_series(1, 20000)",
    )
    .unwrap();
    let q = "SELECT _id, s, l2_distance(e, [0.0, 1.0, 2.0, 3.0]) AS d FROM v ORDER BY d LIMIT";
    let plan = cells(&conn.sql(&format!("EXPLAIN {q} 20000")).unwrap()).join("\n");
    assert!(plan.contains("BasaltVectorTopK"), "{plan}");
    let e = conn.sql(&format!("{q} 20000")).unwrap_err();
    assert!(e.to_string().contains("BasaltVectorTopK"), "{e}");
    let x = "x".repeat(200);
    assert_eq!(
        cells(&conn.sql(&format!("{q} 2")).unwrap()),
        [format!("1|{x}|1.0"), format!("2|{x}|2.0")]
    );
}
