//! SQL through the Rust API: prepared statements, streaming, async, isolation, pushdown
//! on/off equivalence on random data, EXPLAIN, statement atomicity, errors.

use std::sync::Arc;

use arrow::array::AsArray;
use basalt::arrow::array::{
    Array, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int64Array, RecordBatch,
    StringArray,
};
use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{Database, Error, Options, Value};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// Every cell of the batches as text, one string per row, sorted.
fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = rows_in_order(batches);
    out.sort();
    out
}

/// The rows of a result in the order they came, as `a|b|…` strings.
pub(crate) fn rows_in_order(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| {
                arrow::util::display::ArrayFormatter::try_new(
                    c.as_ref(),
                    &arrow::util::display::FormatOptions::default().with_null("NULL"),
                )
                .unwrap()
            })
            .collect();
        for r in 0..b.num_rows() {
            out.push(fmts.iter().map(|f| f.value(r).to_string()).collect::<Vec<_>>().join("|"));
        }
    }
    out
}

fn one_u64(batches: &[RecordBatch]) -> u64 {
    let c = batches[0].column(0);
    match c.data_type() {
        DataType::UInt64 => c.as_primitive::<arrow::datatypes::UInt64Type>().value(0),
        DataType::Int64 => c.as_primitive::<arrow::datatypes::Int64Type>().value(0) as u64,
        t => panic!("unexpected type {t}"),
    }
}

#[test]
fn prepared_statements_bind_parameters_and_read_fresh_data() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE kv (k BIGINT, v TEXT)").unwrap();
    let ins = conn.prepare("INSERT INTO kv VALUES ($1, $2)").unwrap();
    for i in 0..5i64 {
        let r = ins.execute(&[Value::Int(i), Value::Str(format!("v{i}"))]).unwrap();
        assert_eq!(one_u64(&r), 1);
    }
    let get = conn.prepare("SELECT v FROM kv WHERE k = $1").unwrap();
    assert_eq!(get.parameter_types().unwrap(), vec![Some(DataType::Int64)]);
    let r = get.execute(&[Value::Int(3)]).unwrap();
    assert_eq!(rows(&r), vec!["v3"]);
    // The plan was made before this write; the next run still sees it.
    conn.sql("UPDATE kv SET v = 'changed' WHERE k = 3").unwrap();
    assert_eq!(rows(&get.execute(&[Value::Int(3)]).unwrap()), vec!["changed"]);
    // ... and so does a write from another connection.
    db.connect().sql("DELETE FROM kv WHERE k = 3").unwrap();
    assert!(rows(&get.execute(&[Value::Int(3)]).unwrap()).is_empty());
    // A schema change makes a prepared statement ask to be prepared again.
    conn.sql("ALTER TABLE kv ADD COLUMN extra INT").unwrap();
    let e = get.execute(&[Value::Int(1)]).unwrap_err();
    assert!(e.to_string().contains("prepare it again"), "{e}");
    let e = get.execute(&[Value::Str("x".into())]);
    assert!(e.is_err());
    assert!(conn.prepare("SELECT 1; SELECT 2").is_err());
    assert!(conn.prepare("CREATE TABLE z (a INT)").is_err());
}

#[test]
fn statements_the_direct_path_takes_are_neither_planned_nor_need_the_session() {
    let db = Database::open_in_memory().unwrap();
    db.connect().sql("CREATE TABLE d (k BIGINT, v TEXT)").unwrap();
    db.connect().sql("INSERT INTO d VALUES (1, 'a'), (2, 'b'), (3, 'c')").unwrap();
    let conn = db.connect();
    let sel = conn.prepare("SELECT v FROM d WHERE k >= 2 LIMIT 10").unwrap();
    let cnt = conn.prepare("SELECT count(*) FROM d").unwrap();
    assert_eq!(sel.parameter_types().unwrap(), Vec::<Option<DataType>>::new());
    assert_eq!(rows(&sel.execute(&[]).unwrap()), vec!["b", "c"]);
    assert_eq!(one_u64(&cnt.execute(&[]).unwrap()), 3);
    assert_eq!(rows(&conn.sql("SELECT k FROM d WHERE v = 'a'").unwrap()), vec!["1"]);
    assert_eq!(one_u64(&conn.sql("UPDATE d SET v = 'z' WHERE k = 3").unwrap()), 1);
    assert_eq!(conn.planned_statements().unwrap(), 0);
    assert_eq!(conn.fast_path_statements().unwrap(), 4);
    // With the fast paths off the same prepared statements are planned on their first run
    // and give the same rows.
    conn.set_fast_paths(false).unwrap();
    assert_eq!(rows(&sel.execute(&[]).unwrap()), vec!["b", "z"]);
    assert_eq!(one_u64(&cnt.execute(&[]).unwrap()), 3);
    assert_eq!(conn.planned_statements().unwrap(), 2);
    assert_eq!(rows(&sel.execute(&[]).unwrap()), vec!["b", "z"]);
    assert_eq!(conn.planned_statements().unwrap(), 2);
    conn.set_fast_paths(true).unwrap();
    // Errors are still found when preparing; a table whose columns changed asks for the
    // statement to be prepared again, as a planned one does.
    let fresh = db.connect();
    let e = fresh.prepare("SELECT v FROM missing LIMIT 1").unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    assert!(fresh.prepare("SELECT nope FROM d LIMIT 1").is_err());
    // (DataFusion planned those two to report their errors.)
    assert_eq!(fresh.planned_statements().unwrap(), 2);
    let again = fresh.prepare("SELECT v FROM d LIMIT 1").unwrap();
    assert_eq!(fresh.planned_statements().unwrap(), 2);
    fresh.sql("ALTER TABLE d ADD COLUMN extra INT").unwrap();
    let e = again.execute(&[]).unwrap_err();
    assert!(e.to_string().contains("prepare it again"), "{e}");
    // Placeholders are planned when prepared (their types come from the plan).
    let p = fresh.prepare("SELECT v FROM d WHERE k = $1").unwrap();
    assert_eq!(p.parameter_types().unwrap(), vec![Some(DataType::Int64)]);
    assert_eq!(rows(&p.execute(&[Value::Int(2)]).unwrap()), vec!["b"]);
}

#[test]
fn prepared_parameters_take_their_placeholders_types_when_exact() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE m (d DECIMAL(10, 2), s SMALLINT, n BIGINT)").unwrap();
    let ins = conn.prepare("INSERT INTO m VALUES ($1, $2, $3)").unwrap();
    // Text as a literal would be; an integer into a narrower integer column.
    ins.execute(&[Value::Str("2.25".into()), Value::Int(7), Value::Int(1)]).unwrap();
    // A decimal with its own precision and scale, as a one-element array.
    let dec: arrow::array::ArrayRef = std::sync::Arc::new(
        arrow::array::Decimal128Array::from(vec![-1050]).with_precision_and_scale(5, 3).unwrap(),
    );
    ins.execute(&[Value::Nested(dec), Value::Null, Value::Int(2)]).unwrap();
    // Out of the column's range: refused, nothing written.
    assert!(ins.execute(&[Value::Null, Value::Int(70_000), Value::Int(3)]).is_err());
    let sel = conn.prepare("SELECT count(*) FROM m WHERE d = $1").unwrap();
    assert_eq!(one_u64(&sel.execute(&[Value::Str("2.25".into())]).unwrap()), 1);
    assert_eq!(
        rows(&conn.sql("SELECT CAST(d AS TEXT) || '/' || coalesce(CAST(s AS TEXT), '-') FROM m ORDER BY n").unwrap()),
        vec!["-1.05/-", "2.25/7"]
    );
}

#[test]
fn prepared_statements_keyed_by_id_skip_classifying_and_agree_with_datafusion() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE kt (name TEXT, n BIGINT)").unwrap();
    conn.sql("INSERT INTO kt VALUES ('a', 1), ('b', 2), ('c', 3), ('d', 4)").unwrap();
    let off = db.connect();
    off.set_fast_paths(false).unwrap();
    // Reads: the same rows (or the same failure) as DataFusion for every kind of value;
    // after the first run the statements whose only parameters are `_id` keys are not
    // classified again.
    let reads = [
        "SELECT * FROM kt WHERE _id = $1",
        "SELECT name AS x FROM kt WHERE ($1 = _id)",
        "SELECT n FROM kt WHERE _id IN ($1, $2, $1) LIMIT 2",
        "SELECT n FROM kt WHERE _id IN ($1, $2) OFFSET 1",
    ];
    let values: [Vec<Value>; 6] = [
        vec![Value::Int(2), Value::Int(3)],
        vec![Value::Int(3), Value::Int(2)],
        vec![Value::Int(9), Value::Int(1)],
        vec![Value::Int(-1), Value::Int(4)],
        vec![Value::Float(2.0), Value::Int(4)],
        vec![Value::Str("2".into()), Value::Int(4)],
    ];
    for sql in reads {
        let fast = conn.prepare(sql).unwrap();
        let slow = off.prepare(sql).unwrap();
        let want_params =
            |v: &[Value]| if sql.contains("$2") { v.to_vec() } else { v[..1].to_vec() };
        for v in &values {
            let p = want_params(v);
            let (a, b) = (fast.execute(&p), slow.execute(&p));
            match (&a, &b) {
                (Ok(a), Ok(b)) => assert_eq!(rows(a), rows(b), "{sql} {p:?}"),
                (Err(_), Err(_)) => {}
                _ => panic!("{sql} {p:?}: {a:?} vs {b:?}"),
            }
        }
    }
    // (Per statement: the first run classifies and keeps it, the next two are keyed, and
    // the values classifying would not take as keys are classified and then planned.)
    let keyed = conn.keyed_statement_runs().unwrap();
    assert_eq!(keyed, 4 * 2);
    // Writes by key, in a transaction and out: the same counts and rows as DataFusion's.
    let upd = conn.prepare("UPDATE kt SET n = 10 WHERE _id = $1").unwrap();
    let del = conn.prepare("DELETE FROM kt WHERE _id IN ($1, $2)").unwrap();
    let get = conn.prepare("SELECT name, n FROM kt WHERE _id = $1").unwrap();
    assert_eq!(one_u64(&upd.execute(&[Value::Int(1)]).unwrap()), 1);
    assert_eq!(one_u64(&upd.execute(&[Value::Int(2)]).unwrap()), 1);
    assert_eq!(one_u64(&upd.execute(&[Value::Int(99)]).unwrap()), 0);
    conn.sql("BEGIN").unwrap();
    assert_eq!(one_u64(&del.execute(&[Value::Int(3), Value::Int(1)]).unwrap()), 2);
    assert_eq!(one_u64(&del.execute(&[Value::Int(3), Value::Int(1)]).unwrap()), 0);
    assert!(rows(&get.execute(&[Value::Int(1)]).unwrap()).is_empty());
    assert_eq!(rows(&off.sql("SELECT name, n FROM kt WHERE _id = 1").unwrap()), vec!["a|10"]);
    conn.sql("ROLLBACK").unwrap();
    assert_eq!(rows(&get.execute(&[Value::Int(1)]).unwrap()), vec!["a|10"]);
    assert_eq!(one_u64(&del.execute(&[Value::Int(3), Value::Int(4)]).unwrap()), 2);
    assert_eq!(rows(&off.sql("SELECT name, n FROM kt").unwrap()), vec!["a|10", "b|10"]);
    // Rows written after the statement was kept are found; keyed runs were counted.
    conn.sql("INSERT INTO kt VALUES ('e', 5)").unwrap();
    assert_eq!(rows(&get.execute(&[Value::Int(5)]).unwrap()), vec!["e|5"]);
    assert_eq!(conn.keyed_statement_runs().unwrap(), keyed + 6);
    // Parameters anywhere else, or a filter beyond the keys: classified at every run.
    let before = conn.keyed_statement_runs().unwrap();
    let set = conn.prepare("UPDATE kt SET n = $2 WHERE _id = $1").unwrap();
    let and = conn.prepare("SELECT name FROM kt WHERE _id = $1 AND n > 5").unwrap();
    for id in [1, 2, 5] {
        assert_eq!(one_u64(&set.execute(&[Value::Int(id), Value::Int(id * 7)]).unwrap()), 1);
        let want = if id * 7 > 5 { 1 } else { 0 };
        assert_eq!(rows(&and.execute(&[Value::Int(id)]).unwrap()).len(), want);
    }
    assert_eq!(conn.keyed_statement_runs().unwrap(), before);
    assert_eq!(rows(&off.sql("SELECT _id, n FROM kt").unwrap()), vec!["1|7", "2|14", "5|35"]);
    // Fast paths off, or the table's columns changed: the kept template is not used.
    conn.set_fast_paths(false).unwrap();
    assert_eq!(rows(&get.execute(&[Value::Int(2)]).unwrap()), vec!["b|14"]);
    conn.set_fast_paths(true).unwrap();
    assert_eq!(conn.keyed_statement_runs().unwrap(), before);
    off.sql("ALTER TABLE kt ADD COLUMN extra INT").unwrap();
    let e = get.execute(&[Value::Int(2)]).unwrap_err();
    assert!(e.to_string().contains("prepare it again"), "{e}");
    let e = upd.execute(&[Value::Int(2)]).unwrap_err();
    assert!(e.to_string().contains("prepare it again"), "{e}");
}

/// A database with tables `fast` and `slow` (name, n, f, ok, and `s` of type `s_type` NOT
/// NULL), a connection, and a connection with the fast paths off.
fn fast_and_slow(s_type: &str) -> (Database, basalt::Connection, basalt::Connection) {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    let off = db.connect();
    off.set_fast_paths(false).unwrap();
    for t in ["fast", "slow"] {
        conn.sql(&format!(
            "CREATE TABLE {t} (name TEXT, n BIGINT, f DOUBLE, ok BOOLEAN, s {s_type} NOT NULL)"
        ))
        .unwrap();
    }
    (db, conn, off)
}

/// Prepares `sql` (`{t}` standing for the table) on `fast` through `conn` and on `slow`
/// through `off`, and runs both once per parameter list of `runs`: the same count, or both
/// errors.
fn run_both(conn: &basalt::Connection, off: &basalt::Connection, sql: &str, runs: &[Vec<Value>]) {
    let fast = conn.prepare(&sql.replace("{t}", "fast")).unwrap();
    let slow = off.prepare(&sql.replace("{t}", "slow")).unwrap();
    for p in runs {
        let (a, b) = (fast.execute(p), slow.execute(p));
        match (&a, &b) {
            (Ok(a), Ok(b)) => assert_eq!(one_u64(a), one_u64(b), "{sql} {p:?}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{sql} {p:?}: {a:?} vs {b:?}"),
        }
    }
}

#[test]
fn prepared_writes_without_parameters_are_classified_once_and_agree_with_datafusion() {
    let (_db, conn, off) = fast_and_slow("SMALLINT");
    // Multi-row VALUES with NULLs, integers into floats, negatives, a column list that
    // leaves columns out; UPDATE and DELETE with literal values; and statements the direct
    // path refuses (out-of-range and NULL-into-NOT-NULL values), which must fail alike.
    let statements = [
        "INSERT INTO {t} VALUES ('a', 1, 2, true, 1), (NULL, NULL, 1.5, NULL, -2), \
         ('c', -3, NULL, false, 3)",
        "INSERT INTO {t} (s, name) VALUES (7, 'x'), (8, NULL), (9, 'z')",
        "UPDATE {t} SET f = 9.5, ok = false WHERE n > 0",
        "DELETE FROM {t} WHERE name = 'z'",
        "INSERT INTO {t} (s) VALUES (70000)",
        "INSERT INTO {t} (name) VALUES ('no s')",
    ];
    let runs_before = conn.kept_write_runs().unwrap();
    for sql in statements {
        run_both(&conn, &off, sql, &[vec![], vec![], vec![]]);
    }
    let all =
        |t: &str| rows_in_order(&off.sql(&format!("SELECT * FROM {t} ORDER BY _id")).unwrap());
    assert_eq!(all("fast"), all("slow"));
    assert_eq!(all("fast").len(), 3 * 3 + 3 * 2);
    // The four writes the direct path takes were classified once and then kept.
    assert_eq!(conn.kept_write_runs().unwrap(), runs_before + 4 * 2);
    // In a transaction: rolled back with it, kept with it.
    let ins = conn.prepare("INSERT INTO fast (s) VALUES (1), (2)").unwrap();
    let count = conn.prepare("SELECT COUNT(*) FROM fast").unwrap();
    let n0 = one_u64(&count.execute(&[]).unwrap());
    assert_eq!(one_u64(&ins.execute(&[]).unwrap()), 2);
    conn.sql("BEGIN").unwrap();
    ins.execute(&[]).unwrap();
    ins.execute(&[]).unwrap();
    assert_eq!(one_u64(&count.execute(&[]).unwrap()), n0 + 6);
    conn.sql("ROLLBACK").unwrap();
    assert_eq!(one_u64(&count.execute(&[]).unwrap()), n0 + 2);
    conn.sql("START TRANSACTION").unwrap();
    ins.execute(&[]).unwrap();
    conn.sql("COMMIT").unwrap();
    assert_eq!(one_u64(&off.sql("SELECT COUNT(*) FROM fast").unwrap()), n0 + 4);
    // Fast paths off: DataFusion runs it (not counted); the table's columns changed: it
    // must be prepared again, as any prepared statement.
    let kept = conn.kept_write_runs().unwrap();
    conn.set_fast_paths(false).unwrap();
    assert_eq!(one_u64(&ins.execute(&[]).unwrap()), 2);
    conn.set_fast_paths(true).unwrap();
    assert_eq!(conn.kept_write_runs().unwrap(), kept);
    off.sql("ALTER TABLE fast ADD COLUMN extra INT").unwrap();
    let e = ins.execute(&[]).unwrap_err();
    assert!(e.to_string().contains("prepare it again"), "{e}");
    assert_eq!(conn.kept_write_runs().unwrap(), kept);
    // Transaction control out of order still fails clearly on the direct route.
    assert!(conn.sql("COMMIT").is_err());
}

/// Prepared `INSERT`s with parameters are classified once and then bind only their
/// values; every run agrees with DataFusion's (fast paths off), values the direct path
/// refuses (overflow, NULL into NOT NULL, a parameter inside an expression) fail or run
/// alike, and a changed table must be prepared again.
#[test]
fn prepared_inserts_with_parameters_bind_only_their_values_and_agree_with_datafusion() {
    let (_db, conn, off) = fast_and_slow("BIGINT");
    let statements = [
        "INSERT INTO {t} VALUES ($1, $2, $3, $4, $5)",
        "INSERT INTO {t} (s, f, name) VALUES ($1, $2, 'lit'), (3, -1.5, $3)",
        "INSERT INTO {t} (s, n) VALUES (-$1, $2)",
    ];
    let params: Vec<Vec<Vec<Value>>> = vec![
        vec![
            vec![
                Value::Str("a".into()),
                Value::Int(1),
                Value::Float(2.5),
                Value::Bool(true),
                Value::Int(1),
            ],
            vec![Value::Null, Value::Int(-7), Value::Int(3), Value::Null, Value::Int(2)],
            vec![
                Value::Str("c".into()),
                Value::Null,
                Value::Null,
                Value::Bool(false),
                Value::Float(2.5),
            ],
            vec![
                Value::Str("d".into()),
                Value::Int(4),
                Value::Float(0.25),
                Value::Bool(true),
                Value::Null,
            ],
            vec![
                Value::Str("e".into()),
                Value::Int(5),
                Value::Float(1.0),
                Value::Bool(false),
                Value::Int(5),
            ],
        ],
        vec![
            vec![Value::Int(10), Value::Float(1.25), Value::Str("x".into())],
            vec![Value::Int(11), Value::Int(2), Value::Null],
            vec![Value::Int(12), Value::Float(3.5), Value::Str("y".into())],
        ],
        vec![vec![Value::Int(4), Value::Int(40)], vec![Value::Int(6), Value::Int(60)]],
    ];
    let before = conn.insert_template_runs().unwrap();
    for (sql, runs) in statements.iter().zip(&params) {
        run_both(&conn, &off, sql, runs);
    }
    let all =
        |t: &str| rows_in_order(&off.sql(&format!("SELECT * FROM {t} ORDER BY _id")).unwrap());
    assert_eq!(all("fast"), all("slow"));
    // The fraction into an integer column goes to DataFusion on both connections (which
    // casts it as it casts a literal); the NULL into NOT NULL fails on both.
    assert_eq!(all("fast").len(), 4 + 2 * 3 + 2);
    // The first statement's runs after its first: two of them bind (a fraction into an
    // integer column and a NULL into a NOT NULL one are classified again, and go to
    // DataFusion); the second's two later runs bind; the third (a parameter under a minus)
    // never keeps a template.
    assert_eq!(conn.insert_template_runs().unwrap(), before + 2 + 2);
    // Fast paths off: not through the template; the table changed: prepare it again.
    let ins = conn.prepare("INSERT INTO fast (s, n) VALUES ($1, $2)").unwrap();
    assert_eq!(one_u64(&ins.execute(&[Value::Int(1), Value::Int(2)]).unwrap()), 1);
    assert_eq!(one_u64(&ins.execute(&[Value::Int(1), Value::Int(3)]).unwrap()), 1);
    let kept = conn.insert_template_runs().unwrap();
    assert_eq!(kept, before + 5);
    conn.set_fast_paths(false).unwrap();
    assert_eq!(one_u64(&ins.execute(&[Value::Int(1), Value::Int(4)]).unwrap()), 1);
    conn.set_fast_paths(true).unwrap();
    assert_eq!(conn.insert_template_runs().unwrap(), kept);
    off.sql("ALTER TABLE fast ADD COLUMN extra INT").unwrap();
    let e = ins.execute(&[Value::Int(1), Value::Int(5)]).unwrap_err();
    assert!(e.to_string().contains("prepare it again"), "{e}");
    let n = |t: &str| {
        one_u64(&off.sql(&format!("SELECT COUNT(*) FROM {t} WHERE n < 5 AND s = 1")).unwrap())
    };
    assert_eq!(n("fast"), 3 + 1);
    // Parameters into a narrower integer column: converted when they fit, refused when they
    // do not, on either route.
    conn.sql("CREATE TABLE small (s SMALLINT)").unwrap();
    for c in [&conn, &off] {
        let ins = c.prepare("INSERT INTO small VALUES ($1)").unwrap();
        assert_eq!(one_u64(&ins.execute(&[Value::Int(7)]).unwrap()), 1);
        assert!(ins.execute(&[Value::Int(70_000)]).is_err());
        assert_eq!(one_u64(&ins.execute(&[Value::Int(-8)]).unwrap()), 1);
    }
    let small = rows_in_order(&off.sql("SELECT s FROM small ORDER BY _id").unwrap());
    assert_eq!(small.len(), 4);
}

#[test]
fn prepared_queries_without_parameters_reuse_their_plan_and_still_read_fresh_data() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE m (g TEXT, x BIGINT)").unwrap();
    conn.sql("INSERT INTO m VALUES ('a', 1), ('b', 2), ('a', 3)").unwrap();
    let agg = conn.prepare("SELECT g, count(*), sum(x) FROM m WHERE x > 0 GROUP BY g").unwrap();
    let top = conn.prepare("SELECT x FROM m ORDER BY x DESC LIMIT 2").unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|1|2"]);
    assert_eq!(rows(&top.execute(&[]).unwrap()), vec!["2", "3"]);
    // Nothing committed since: the aggregate runs its physical plan again; the top-k (a
    // dynamic filter in its scan) is planned again.
    let reused = conn.reused_physical_plans().unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|1|2"]);
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|1|2"]);
    assert_eq!(conn.reused_physical_plans().unwrap(), reused + 2);
    assert_eq!(rows(&top.execute(&[]).unwrap()), vec!["2", "3"]);
    assert_eq!(conn.reused_physical_plans().unwrap(), reused + 2);
    // Every kind of change after the first run shows in the next one: memtable rows,
    // updates, deletes, flushed segments, another connection's commit.
    conn.sql("INSERT INTO m VALUES ('c', 10)").unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|1|2", "c|1|10"]);
    conn.sql("UPDATE m SET x = 5 WHERE g = 'b'").unwrap();
    db.connect().sql("DELETE FROM m WHERE g = 'c'").unwrap();
    db.flush().unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|1|5"]);
    assert_eq!(rows(&top.execute(&[]).unwrap()), vec!["3", "5"]);
    // A clone shares the plan and reads the same fresh state. A kept physical plan runs
    // again only while no connection commits anything.
    let agg2 = agg.clone();
    conn.sql("INSERT INTO m VALUES ('b', 1)").unwrap();
    assert_eq!(rows(&agg2.execute(&[]).unwrap()), vec!["a|2|4", "b|2|6"]);
    let reused = conn.reused_physical_plans().unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|2|6"]);
    assert_eq!(conn.reused_physical_plans().unwrap(), reused + 1);
    db.connect().sql("INSERT INTO m VALUES ('b', 100)").unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|3|106"]);
    db.connect().sql("DELETE FROM m WHERE x = 100").unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|2|6"]);
    assert_eq!(conn.reused_physical_plans().unwrap(), reused + 1);
    // Inside a transaction the run reads the transaction's own writes.
    conn.sql("BEGIN; INSERT INTO m VALUES ('z', 7)").unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|2|6", "z|1|7"]);
    conn.sql("ROLLBACK").unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|2|6"]);
    // A SET plans the statement again (its kept plan was made under the old settings); the
    // run after that reuses the new plan.
    let reused = conn.reused_physical_plans().unwrap();
    conn.sql("SET datafusion.execution.target_partitions = 1").unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|2|6"]);
    assert_eq!(conn.reused_physical_plans().unwrap(), reused);
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|2|6"]);
    assert_eq!(conn.reused_physical_plans().unwrap(), reused + 1);
    conn.sql("RESET datafusion.execution.target_partitions").unwrap();
    assert_eq!(rows(&agg.execute(&[]).unwrap()), vec!["a|2|4", "b|2|6"]);
    assert_eq!(conn.reused_physical_plans().unwrap(), reused + 1);
    // Functions folded at optimisation time are not frozen by a kept plan.
    let now = conn.prepare("SELECT CAST(now() AS VARCHAR)").unwrap();
    let first = rows(&now.execute(&[]).unwrap());
    std::thread::sleep(std::time::Duration::from_millis(5));
    assert_ne!(rows(&now.execute(&[]).unwrap()), first);
    // A schema change still asks for the statement to be prepared again.
    conn.sql("ALTER TABLE m ADD COLUMN y INT").unwrap();
    let e = agg.execute(&[]).unwrap_err();
    assert!(e.to_string().contains("prepare it again"), "{e}");
}

#[test]
fn streaming_async_and_statement_lists() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    let r = conn
        .sql("CREATE TABLE n (i BIGINT); INSERT INTO n SELECT value FROM generate_series(1, 100000); SELECT count(*), sum(i) FROM n")
        .unwrap();
    assert_eq!(rows(&r), vec!["100000|5000050000"]);
    let stream = conn.sql_stream("SELECT i FROM n WHERE i % 2 = 0").unwrap();
    assert_eq!(stream.schema().field(0).name(), "i");
    let mut n = 0;
    for b in stream {
        n += b.unwrap().num_rows();
    }
    assert_eq!(n, 50000);
    // Async form on a runtime of the caller's; a blocking call in there is refused.
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let r = rt.block_on(conn.sql_async("SELECT max(i) FROM n")).unwrap();
    assert_eq!(one_u64(&r), 100000);
    let e = rt.block_on(async { conn.sql("SELECT 1") }).unwrap_err();
    assert!(e.to_string().contains("_async"), "{e}");
    // A failing statement stops the list; the ones before it stay done.
    let e = conn.sql("INSERT INTO n VALUES (-1); SELECT nope FROM n; INSERT INTO n VALUES (-2)");
    assert!(e.is_err());
    let r = conn.sql("SELECT count(*) FROM n WHERE i < 0").unwrap();
    assert_eq!(one_u64(&r), 1);
    // Database::sql is a shortcut for a fresh connection.
    assert_eq!(one_u64(&db.sql("SELECT count(*) FROM n").unwrap()), 100001);
}

#[test]
fn transactions_are_isolated_between_connections() {
    let db = Database::open_in_memory().unwrap();
    let a = db.connect();
    let b = db.connect();
    a.sql("CREATE TABLE t (x INT); INSERT INTO t VALUES (1)").unwrap();
    b.sql("BEGIN; INSERT INTO t VALUES (2)").unwrap();
    assert!(b.in_transaction());
    assert_eq!(one_u64(&a.sql("SELECT count(*) FROM t").unwrap()), 1);
    assert_eq!(one_u64(&b.sql("SELECT count(*) FROM t").unwrap()), 2);
    // The Rust API on the same connection sees the same transaction.
    assert_eq!(b.table("t").unwrap().count().unwrap(), 2);
    b.commit().unwrap();
    assert_eq!(one_u64(&a.sql("SELECT count(*) FROM t").unwrap()), 2);
    // SQL BEGIN twice is a transaction error of the public type.
    a.sql("BEGIN").unwrap();
    assert!(matches!(a.sql("BEGIN").unwrap_err(), Error::Transaction(_)));
    a.sql("ROLLBACK").unwrap();
}

#[test]
fn errors_carry_positions_and_kinds() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE t (x INT, s TEXT)").unwrap();
    let e = conn.sql("SELECT x FROM t WHERE").unwrap_err();
    assert!(matches!(e, Error::Sql(basalt::SqlError::Sql { .. })), "{e}");
    assert!(e.to_string().contains("at the end of the statement"), "{e}");
    let e = conn.sql("SELECT x FROM t WHERE x = = 1").unwrap_err();
    assert!(e.to_string().contains("Line: 1, Column: 27"), "{e}");
    let e = conn.sql("SELECT y FROM t").unwrap_err();
    assert!(e.to_string().contains("(at line 1, column 8)"), "{e}");
    let e = conn.sql("INSERT INTO nope VALUES (1)").unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    let e = conn.sql("CREATE TABLE t (x INT)").unwrap_err();
    assert!(matches!(e, Error::Storage(basalt::StorageError::TableExists { .. })), "{e}");
    let e = conn.sql("CREATE MATERIALIZED VIEW v AS SELECT 1").unwrap_err();
    assert!(e.to_string().contains("materialized"), "{e}");
}

#[test]
fn a_failing_insert_select_leaves_nothing_behind() {
    // Small bulk size: the insert is applied in several chunks (spilled to segment files)
    // before the bad row is met.
    let db =
        Database::open_in_memory_with(Options { bulk_insert_rows: 1000, ..Options::default() })
            .unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE src (k BIGINT); CREATE TABLE dst (k BIGINT NOT NULL)").unwrap();
    conn.sql("INSERT INTO src SELECT value FROM generate_series(1, 20000)").unwrap();
    conn.sql("INSERT INTO src VALUES (NULL)").unwrap();
    let e = conn.sql("INSERT INTO dst SELECT k FROM src").unwrap_err();
    assert!(matches!(e, Error::Storage(basalt::StorageError::NullViolation { .. })), "{e}");
    assert_eq!(one_u64(&conn.sql("SELECT count(*) FROM dst").unwrap()), 0);
    // Inside a transaction the failing statement undoes only itself.
    conn.sql("BEGIN; INSERT INTO dst VALUES (1)").unwrap();
    assert!(conn.sql("INSERT INTO dst SELECT k FROM src").is_err());
    conn.sql("COMMIT").unwrap();
    assert_eq!(one_u64(&conn.sql("SELECT count(*) FROM dst").unwrap()), 1);
    // CTAS that fails leaves no table.
    assert!(conn.sql("CREATE TABLE bad AS SELECT 1 / (k - 20000) AS x FROM src").is_err());
    assert!(!db.list_tables().contains(&"bad".to_string()));
}

/// A table over several row groups and segments, with deletes, updates and memtable rows.
fn random_table(seed: u64) -> Database {
    random_table_with(seed, false)
}

/// [`random_table`], with a `DECIMAL(12, 2)` column `m` and a `DATE` column `d` (no NULLs)
/// when `decimals`.
fn random_table_with(seed: u64, decimals: bool) -> Database {
    let db = Database::open_in_memory().unwrap();
    let mut fields = vec![
        Field::new("a", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("f", DataType::Float64, true),
        Field::new("b", DataType::Boolean, true),
    ];
    if decimals {
        fields.push(Field::new("m", DataType::Decimal128(12, 2), true));
        fields.push(Field::new("d", DataType::Date32, false));
    }
    let schema = Arc::new(Schema::new(fields));
    let t = db.create_table("r", &schema).unwrap();
    let mut x = seed | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words = ["apple", "apricot", "banana", "cherry", "date", ""];
    for (chunk, n) in [(0, 70_000usize), (1, 30_000), (2, 500)] {
        let mut a = Vec::with_capacity(n);
        let mut s = Vec::with_capacity(n);
        let mut f = Vec::with_capacity(n);
        let mut b = Vec::with_capacity(n);
        let mut m = Vec::with_capacity(n);
        let mut d = Vec::with_capacity(n);
        for _ in 0..n {
            let r = next();
            a.push((r % 11 != 0).then_some((r % 1000) as i64 - 200 + chunk * 50));
            s.push((r % 13 != 0).then(|| words[(r >> 8) as usize % words.len()]));
            f.push((r % 7 != 0).then_some(((r >> 16) % 10_000) as f64 / 100.0));
            b.push((r % 5 != 0).then_some(r % 3 == 0));
            m.push((r % 9 != 0).then_some(((r >> 24) % 100_000) as i128 - 20_000));
            d.push(8000 + ((r >> 40) % 3000) as i32);
        }
        let mut columns: Vec<Arc<dyn Array>> = vec![
            Arc::new(Int64Array::from(a)),
            Arc::new(StringArray::from(s)),
            Arc::new(Float64Array::from(f)),
            Arc::new(BooleanArray::from(b)),
        ];
        if decimals {
            columns
                .push(Arc::new(Decimal128Array::from(m).with_precision_and_scale(12, 2).unwrap()));
            columns.push(Arc::new(Date32Array::from(d)));
        }
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        t.insert(&batch).unwrap();
    }
    if decimals {
        // The rows in segments (packed, with zone maps), the changes below in the memtable.
        db.flush().unwrap();
    }
    let conn = db.connect();
    conn.sql("DELETE FROM r WHERE a % 17 = 3").unwrap();
    conn.sql("UPDATE r SET s = 'updated', a = a + 5000 WHERE _id % 101 = 7").unwrap();
    db
}

const FILTERS: &[&str] = &[
    "a > 100",
    "a >= -50 AND a < 20",
    "a BETWEEN 700 AND 800",
    "a NOT BETWEEN 0 AND 900",
    "a IN (1, 2, 3, 500, 5007)",
    "a NOT IN (1, 2, 3) AND a < 10",
    "a IS NULL",
    "s IS NOT NULL AND s <> 'banana'",
    "s = 'cherry' OR f < 1.5",
    "s LIKE 'ap%'",
    "s NOT LIKE 'ap%'",
    "s > 'b' AND s <= 'date'",
    "s = ''",
    "NOT (a > 0 OR s = 'date')",
    "b",
    "NOT b",
    "b IS NOT TRUE",
    "b = false AND f > 50",
    "f > 99.5 OR a > 5000",
    "_id < 100 OR _id BETWEEN 65530 AND 65540",
    "a + 1 > 100 AND s = 'apple'",
    "(a > 10 AND length(s) > 4) OR f < 0.5",
    "upper(s) = 'DATE'",
    "a > 800 AND _id > 90000",
    "s LIKE 'a_r%'",
    "s LIKE '%an%'",
    "s NOT LIKE '_a%a'",
    "s LIKE 'ch_rr_' OR s LIKE '%e'",
    "s LIKE '%'",
    "s LIKE ''",
    "s LIKE 'a\\_%'",
    "m > 1.5",
    "m BETWEEN -0.5 AND 20.25",
    "m = 3.14 OR m IS NULL",
    "m < 0 AND a > 100",
    "m >= 100.255",
    "m IN (1.00, 2.50, -3)",
    "m <> 7.77 AND NOT m > 700",
    "d >= DATE '1994-01-01' AND d < DATE '1995-01-01'",
    "d BETWEEN DATE '1995-03-01' AND DATE '1995-03-31' AND m > 100 AND s <> 'date'",
    "d < DATE '1992-02-01' AND (m < 0 OR s LIKE '%an%')",
];

#[test]
fn pushdown_on_and_off_agree_on_random_data() {
    let db = random_table_with(0x5eed, true);
    let on = db.connect();
    let off = db.connect();
    off.set_filter_pushdown(false).unwrap();
    off.set_fast_paths(false).unwrap();
    for f in FILTERS {
        let q = format!("SELECT _id, a, s, f, b FROM r WHERE {f}");
        let x = rows(&on.sql(&q).unwrap());
        let y = rows(&off.sql(&q).unwrap());
        assert_eq!(x.len(), y.len(), "row count differs for {f}");
        assert!(x == y, "rows differ for {f}");
        let c = format!("SELECT count(*) FROM r WHERE {f}");
        assert_eq!(one_u64(&on.sql(&c).unwrap()), x.len() as u64, "count(*) for {f}");
        let l = format!("SELECT count(*) FROM (SELECT a FROM r WHERE {f} LIMIT 7)");
        assert_eq!(one_u64(&on.sql(&l).unwrap()), x.len().min(7) as u64, "limit for {f}");
    }
    // A decimal comparison at the column's scale is storage's to evaluate.
    let plan = rows(&on.sql("EXPLAIN SELECT a FROM r WHERE m > 1.5 AND m <= 20").unwrap());
    let plan = plan.join("\n");
    assert!(plan.contains("m > 1.50") && plan.contains("m <= 20.00"), "{plan}");
    assert!(!plan.contains("FilterExec"), "{plan}");
}

#[test]
fn pushdown_agrees_on_generated_filters() {
    let db = random_table_with(0xfeed, true);
    let on = db.connect();
    let off = db.connect();
    off.set_filter_pushdown(false).unwrap();
    off.set_fast_paths(false).unwrap();
    let leaf = prop_oneof![
        (-300i64..1200, 0..6usize)
            .prop_map(|(v, o)| { format!("a {} {v}", ["=", "<>", "<", "<=", ">", ">="][o]) }),
        (0..6usize).prop_map(|i| format!(
            "s = '{}'",
            ["apple", "apricot", "banana", "cherry", "date", ""][i]
        )),
        Just("s IS NULL".to_string()),
        (0..7usize).prop_map(|i| format!(
            "s {}LIKE '{}'",
            if i % 2 == 0 { "" } else { "NOT " },
            ["a%", "%a%", "_a%", "%r_", "b_n_n_", "%", "__%t"][i]
        )),
        Just("b".to_string()),
        (0.0f64..100.0).prop_map(|v| format!("f < {v:.2}")),
        (-200.0f64..800.0, 0..6usize)
            .prop_map(|(v, o)| format!("m {} {v:.2}", ["=", "<>", "<", "<=", ">", ">="][o])),
        (8000i32..11_000, 0..6usize).prop_map(|(v, o)| format!(
            "d {} DATE '1970-01-01' + INTERVAL '{v}' DAY",
            ["=", "<>", "<", "<=", ">", ">="][o]
        )),
    ];
    let expr = leaf.prop_recursive(3, 12, 2, |inner| {
        prop_oneof![
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} AND {b})")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("({a} OR {b})")),
            inner.prop_map(|a| format!("NOT ({a})")),
        ]
    });
    let mut runner = TestRunner::new(Config { cases: 40, ..Config::default() });
    runner
        .run(&expr, |f| {
            let q = format!("SELECT _id FROM r WHERE {f}");
            prop_assert_eq!(rows(&on.sql(&q).unwrap()), rows(&off.sql(&q).unwrap()), "{}", f);
            Ok(())
        })
        .unwrap();
}

/// Column names and types of a result.
fn shape(batches: &[RecordBatch]) -> Vec<(String, DataType)> {
    batches
        .first()
        .map(|b| {
            b.schema().fields().iter().map(|f| (f.name().clone(), f.data_type().clone())).collect()
        })
        .unwrap_or_default()
}

/// Runs `q` on both connections: both fail, or both give the same rows (sorted) and columns.
fn same(on: &basalt::Connection, off: &basalt::Connection, q: &str) -> Vec<String> {
    match (on.sql(q), off.sql(q)) {
        (Ok(x), Ok(y)) => {
            let (rx, ry) = (rows(&x), rows(&y));
            assert_eq!(rx, ry, "rows differ for {q}");
            if !ry.is_empty() {
                assert_eq!(shape(&x), shape(&y), "columns differ for {q}");
            }
            rx
        }
        (Err(_), Err(_)) => Vec::new(),
        (x, y) => panic!("{q}: fast paths {:?}, DataFusion {:?}", x.map(|_| ()), y.map(|_| ())),
    }
}

/// A random table and two connections on it: fast paths on, and off.
fn fast_and_planned(seed: u64) -> (Database, basalt::Connection, basalt::Connection) {
    let db = random_table(seed);
    let (on, off) = (db.connect(), db.connect());
    off.set_fast_paths(false).unwrap();
    (db, on, off)
}

#[test]
fn fast_paths_on_and_off_agree_on_reads() {
    let db = random_table_with(0xd1ec7, true);
    let (on, off) = (db.connect(), db.connect());
    off.set_fast_paths(false).unwrap();
    let mut filters: Vec<String> = FILTERS.iter().map(|f| f.to_string()).collect();
    filters.extend(
        [
            "_id = 1",
            "_id = 65537",
            "_id = 100450",
            "_id = 999999999",
            "_id IN (1, 2, 3, 70000, 100400, 100401, 3, 5000000)",
            "_id IN (7, 108, 209) AND s = 'updated'",
            "_id = 17 AND a > 100000",
            "r._id = 12 OR _id = 13",
            "a = 2.5",
            "a > '5'",
            "s = 5",
            "f = 12",
            "s LIKE 'apple'",
            "s LIKE 'a_p%'",
            "s LIKE '%e'",
            "nope = 1",
            "a IN (NULL, 1)",
            "a = NULL",
        ]
        .map(String::from),
    );
    for f in &filters {
        let all = same(&on, &off, &format!("SELECT _id, a, s, f, b FROM r WHERE {f}"));
        same(&on, &off, &format!("SELECT * FROM r WHERE {f}"));
        same(&on, &off, &format!("SELECT s AS name, q.a FROM r AS q WHERE {f}"));
        // Without ORDER BY, which rows a LIMIT keeps is up to the engine: the fast path
        // must keep as many, each one a row of the whole answer.
        for (limit, offset) in [(1, 0), (100, 0), (7, 3), (50, 65_530), (10, 1_000_000)] {
            let q =
                format!("SELECT _id, a, s, f, b FROM r WHERE {f} LIMIT {limit} OFFSET {offset}");
            let Ok(x) = on.sql(&q) else {
                assert!(off.sql(&q).is_err(), "{q}");
                continue;
            };
            let x = rows(&x);
            assert_eq!(x.len(), all.len().saturating_sub(offset).min(limit), "{q}");
            assert!(x.iter().all(|r| all.binary_search(r).is_ok()), "{q}: a row not in the answer");
        }
    }
    // The shapes the fast path is for do take it.
    for q in [
        "SELECT * FROM r WHERE _id = 5",
        "SELECT a AS x, s FROM r AS q WHERE q._id IN (1, 2) AND a > 3 LIMIT 1",
        "SELECT _id FROM r WHERE s LIKE 'ap%' OR f BETWEEN 1 AND 2 OR b LIMIT 10 OFFSET 5",
        "SELECT count(*), avg(a), min(s) FROM r WHERE a NOT IN (1, 2)",
        "SELECT COUNT(*) FROM r",
    ] {
        let before = on.fast_path_statements().unwrap();
        on.sql(q).unwrap();
        assert_eq!(on.fast_path_statements().unwrap(), before + 1, "{q} took the fast path");
    }
    // Another default schema: unqualified names are not Basalt's tables there.
    let other = db.connect();
    other.sql("SET datafusion.catalog.default_schema = 'information_schema'").unwrap();
    assert!(other.sql("SELECT * FROM r WHERE _id = 5").is_err());
    assert_eq!(other.fast_path_statements().unwrap(), 0);
    for q in ["SELECT a + 1 FROM r LIMIT 1", "SELECT * FROM r ORDER BY a LIMIT 1", "SELECT 1"] {
        let before = on.fast_path_statements().unwrap();
        on.sql(q).unwrap();
        assert_eq!(on.fast_path_statements().unwrap(), before, "{q} is not a fast-path shape");
    }
    assert_eq!(off.fast_path_statements().unwrap(), 0);
    for q in [
        "SELECT * FROM r LIMIT 100",
        "SELECT a, a FROM r LIMIT 3",
        "SELECT a AS x, s AS x FROM r",
        "SELECT nope FROM r",
        "SELECT * FROM missing",
        "SELECT _id FROM r LIMIT 0",
        "SELECT \"a\" FROM \"r\" WHERE \"s\" = 'date' LIMIT 20",
    ] {
        let x = on.sql(q);
        let y = off.sql(q);
        assert_eq!(x.is_ok(), y.is_ok(), "{q}");
        if let (Ok(x), Ok(y)) = (x, y) {
            assert_eq!(rows(&x).len(), rows(&y).len(), "{q}");
            // An empty answer may come as no batch at all (DataFusion) or as one empty
            // batch that still carries the columns (the fast path).
            if !y.is_empty() {
                assert_eq!(shape(&x), shape(&y), "{q}");
            }
        }
    }
    // Prepared statements bind their parameters on the fast path too.
    let p_on = on.prepare("SELECT a, s FROM r WHERE _id = $1").unwrap();
    let p_off = off.prepare("SELECT a, s FROM r WHERE _id = $1").unwrap();
    for id in [1i64, 2, 17, 70_000, 100_450, -1, 10_000_000] {
        let x = p_on.execute(&[Value::Int(id)]).map(|b| rows(&b));
        let y = p_off.execute(&[Value::Int(id)]).map(|b| rows(&b));
        assert_eq!(x.is_ok(), y.is_ok(), "id {id}");
        if let (Ok(x), Ok(y)) = (x, y) {
            assert_eq!(x, y, "id {id}");
        }
    }
    let p_on = on.prepare("SELECT _id FROM r WHERE s = $1 AND a > $2 LIMIT $3").unwrap();
    let p_off = off.prepare("SELECT _id FROM r WHERE s = $1 AND a > $2 LIMIT $3").unwrap();
    let args = [Value::Str("date".into()), Value::Int(500), Value::Int(1_000_000)];
    assert_eq!(rows(&p_on.execute(&args).unwrap()), rows(&p_off.execute(&args).unwrap()));
}

#[test]
fn fast_paths_on_and_off_agree_on_aggregates() {
    let (_db, on, off) = fast_and_planned(0xa66);
    let mut filters: Vec<&str> = FILTERS.to_vec();
    filters.extend(["_id IN (1, 5, 70000)", "a > 100000", "s = 'nothing'"]);
    for f in filters {
        for q in [
            format!("SELECT COUNT(*) FROM r WHERE {f}"),
            format!(
                "SELECT count(*), count(a), sum(a), avg(f), min(s), max(f), min(a), max(_id), \
                 sum(f) AS total FROM r WHERE {f}"
            ),
            format!("SELECT avg(q.a) AS m, count(q.s) FROM r q WHERE {f}"),
            format!(
                "SELECT sum(a), avg(a), min(a), max(a), sum(f), avg(f), min(f), max(f), \
                 count(f) FROM r WHERE {f}"
            ),
            format!("SELECT count(*) FROM r WHERE {f} LIMIT 1 OFFSET 1"),
        ] {
            same_close(&on, &off, &q);
        }
    }
    for q in [
        "SELECT COUNT(*) FROM r",
        "SELECT count(*) AS n, count(*) AS m FROM r",
        "SELECT count(*), count(*) FROM r",
        "SELECT sum(s) FROM r",
        "SELECT max(b) FROM r",
        "SELECT count(DISTINCT a) FROM r",
        "SELECT count(a) FILTER (WHERE a > 5) FROM r",
        "SELECT count(nope) FROM r",
    ] {
        let (x, y) = (on.sql(q), off.sql(q));
        assert_eq!(x.is_ok(), y.is_ok(), "{q}");
        if let (Ok(x), Ok(y)) = (x, y) {
            assert_eq!(rows(&x), rows(&y), "{q}");
            assert_eq!(shape(&x), shape(&y), "{q}");
        }
    }
    // A bare column (SQLite's: the value of some row) is answered both ways; which row's
    // value it shows is not defined, the count is.
    let q = "SELECT a, count(*) FROM r";
    let (x, y) = (on.sql(q).unwrap(), off.sql(q).unwrap());
    assert_eq!(shape(&x), shape(&y), "{q}");
    let counts = |b: &[RecordBatch]| {
        rows(b).iter().map(|r| r.split('|').nth(1).map(str::to_string)).collect::<Vec<_>>()
    };
    assert_eq!(counts(&x), counts(&y), "{q}");
}

/// Aggregates folded on the direct path keep DataFusion's answers at the edges: an integer
/// sum that does not fit is an overflow error on both (one whose partial sums overflow but
/// whose total fits is not), floats order NaN above infinity and -0 below 0, and
/// infinities and NaN propagate through sums; in segments (dictionary-coded floats) and
/// the memtable.
#[test]
fn folded_aggregates_match_datafusion_on_edge_values() {
    let db = Database::open_in_memory().unwrap();
    let (on, off) = (db.connect(), db.connect());
    off.set_fast_paths(false).unwrap();
    on.sql("CREATE TABLE e (k BIGINT, a BIGINT, f DOUBLE)").unwrap();
    let vals = [
        "(1, 9223372036854775807, 1.5)",
        "(1, 9223372036854775807, CAST('-0.0' AS DOUBLE))",
        "(2, -9223372036854775808, 0.0)",
        "(2, NULL, CAST('NaN' AS DOUBLE))",
        "(3, 5, CAST('-inf' AS DOUBLE))",
        "(3, -7, CAST('inf' AS DOUBLE))",
        "(4, 3, NULL)",
        "(4, 4, 2.25)",
    ];
    on.sql(&format!("INSERT INTO e VALUES {}", vals.join(", "))).unwrap();
    let queries = |on: &basalt::Connection, off: &basalt::Connection| {
        let wheres =
            ["", "WHERE k = 1", "WHERE k <= 2", "WHERE k = 3", "WHERE k >= 3", "WHERE k = 9"];
        let selects = [
            "sum(a), avg(a), min(a), max(a), sum(f), avg(f), min(f), max(f), count(f)",
            "avg(f), sum(a)",
            "max(f), min(f), max(a)",
        ];
        for w in wheres {
            for sel in selects {
                let q = format!("SELECT {sel} FROM e {w}");
                let before = on.fast_path_statements().unwrap();
                let answer = |c: &basalt::Connection| {
                    c.sql(&q).map(|b| rows(&b)).map_err(|e| {
                        assert!(e.to_string().contains("integer overflow"), "{q}: {e}");
                    })
                };
                assert_eq!(answer(on), answer(off), "{q}");
                assert_eq!(on.fast_path_statements().unwrap(), before + 1, "{q}: fast path");
            }
        }
    };
    queries(&on, &off);
    db.flush().unwrap();
    queries(&on, &off);
}

/// Like [`same`], with floats equal within 1e-9 relative (sums depend on the order of
/// addition).
fn same_close(on: &basalt::Connection, off: &basalt::Connection, q: &str) -> usize {
    let close = |x: &str, y: &str| match (x.parse::<f64>(), y.parse::<f64>()) {
        (Ok(a), Ok(b)) => a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()),
        _ => x == y,
    };
    match (on.sql(q), off.sql(q)) {
        (Ok(x), Ok(y)) => {
            let (rx, ry) = (rows(&x), rows(&y));
            assert_eq!(rx.len(), ry.len(), "{q}");
            for (a, b) in rx.iter().zip(&ry) {
                let ok = a.split('|').zip(b.split('|')).all(|(u, v)| close(u, v));
                assert!(ok, "{q}: {a} vs {b}");
            }
            if !ry.is_empty() {
                assert_eq!(shape(&x), shape(&y), "{q}");
            }
            rx.len()
        }
        (Err(_), Err(_)) => 0,
        (x, y) => panic!("{q}: {:?} vs {:?}", x.map(|_| ()), y.map(|_| ())),
    }
}

/// A table of every type whose zone maps answer `min` / `max`, written as row groups of
/// increasing `day`; `z` added after the first segment.
fn metadata_table() -> Database {
    use basalt::arrow::array::{
        ArrayRef, Date32Array, Decimal128Array, Float32Array, Int32Array, TimestampNanosecondArray,
        UInt8Array,
    };
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql(
        "CREATE TABLE m (day INT, a BIGINT, u TINYINT UNSIGNED, f DOUBLE, g REAL, s TEXT, \
         d DECIMAL(15, 2), t TIMESTAMP, dt DATE, b BOOLEAN)",
    )
    .unwrap();
    let t = db.table("m").unwrap();
    let schema = t.schema().unwrap();
    let mut x = 0x5eed_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let batch = |first: usize, n: usize, next: &mut dyn FnMut() -> u64| {
        let r: Vec<u64> = (0..n).map(|_| next()).collect();
        let nul = |i: usize, k: u64| !r[i].is_multiple_of(k);
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from_iter_values((0..n).map(|i| ((first + i) / 1000) as i32))),
            Arc::new(Int64Array::from_iter(
                (0..n).map(|i| nul(i, 11).then_some((r[i] % 100_000) as i64 - 50_000)),
            )),
            Arc::new(UInt8Array::from_iter(
                (0..n).map(|i| nul(i, 13).then_some((r[i] >> 8) as u8)),
            )),
            Arc::new(Float64Array::from_iter((0..n).map(|i| {
                nul(i, 7).then_some(match r[i] % 5_000 {
                    0 => f64::NAN,
                    1 => -0.0,
                    v => v as f64 / 7.0 - 300.0,
                })
            }))),
            Arc::new(Float32Array::from_iter(
                (0..n).map(|i| nul(i, 3).then_some((r[i] >> 20) as f32 / 1e9)),
            )),
            Arc::new(StringArray::from_iter((0..n).map(|i| {
                nul(i, 17).then(|| match r[i] % 40_000 {
                    // Longer than a zone map keeps: its row group is read.
                    0 => "~".repeat(100),
                    v => format!("w{}", v % 97),
                })
            }))),
            Arc::new(
                Decimal128Array::from_iter(
                    (0..n).map(|i| nul(i, 5).then_some((r[i] % 10_000_000) as i128 - 5_000_000)),
                )
                .with_precision_and_scale(15, 2)
                .unwrap(),
            ),
            Arc::new(TimestampNanosecondArray::from_iter(
                (0..n)
                    .map(|i| nul(i, 9).then_some(1_700_000_000_000_000_000 + (r[i] >> 20) as i64)),
            )),
            Arc::new(Date32Array::from_iter(
                (0..n).map(|i| nul(i, 19).then_some(19_000 + (r[i] % 3_000) as i32)),
            )),
            Arc::new(BooleanArray::from_iter(
                (0..n).map(|i| nul(i, 23).then_some(r[i].is_multiple_of(3))),
            )),
        ];
        RecordBatch::try_new(schema.clone(), cols).unwrap()
    };
    t.insert(&batch(0, 200_000, &mut next)).unwrap();
    db.flush().unwrap();
    conn.sql("ALTER TABLE m ADD COLUMN z BIGINT").unwrap();
    conn.sql("INSERT INTO m SELECT day + 200, a, u, f, g, s, d, t, dt, b, a % 1000 FROM m WHERE day < 70")
        .unwrap();
    db.flush().unwrap();
    db
}

#[test]
fn count_min_max_from_row_group_metadata_agree_with_datafusion() {
    let db = metadata_table();
    let (on, off) = (db.connect(), db.connect());
    off.set_fast_paths(false).unwrap();
    let plan =
        |c: &basalt::Connection, q: &str| rows(&c.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    let all = "count(*), count(a), min(a), max(a), min(u), max(u), min(f), max(f), count(f), \
               min(g), max(g), min(s), max(s), count(s), min(d), max(d), count(d), min(t), \
               max(t), min(dt), max(dt), min(b), max(b), min(z), max(z), count(z), count(1)";
    let filters = [
        "",
        "WHERE day > 10",
        "WHERE day >= 66",
        "WHERE day >= 132 AND day < 250",
        "WHERE day < 100000",
        "WHERE day > 10 AND a > 0",
        "WHERE day = 150",
        "WHERE day > 1000",
    ];
    let mut from_metadata = 0;
    for phase in ["written", "deleted", "unflushed"] {
        match phase {
            "deleted" => {
                on.sql("DELETE FROM m WHERE day = 140 AND a > 0").unwrap();
                on.sql("UPDATE m SET a = -99999, d = 99999.99 WHERE day = 150 AND u = 7").unwrap();
            }
            "unflushed" => {
                on.sql("INSERT INTO m (day, a, f, s, d, z) VALUES (5, 9999999, 1e300, 'zzz', -99999.99, -5), (190, NULL, NULL, NULL, NULL, NULL)")
                    .unwrap();
            }
            _ => {}
        }
        for w in filters {
            let q = format!("SELECT {all} FROM m {w}");
            assert_eq!(same(&on, &off, &q).len(), 1, "{q}");
            same(&on, &off, &format!("SELECT max(d), min(s) FROM m {w}"));
            same(&on, &off, &format!("SELECT count(*) FROM m {w}"));
            let p = plan(&on, &q);
            if p.contains("BasaltMetadataAggregate") {
                from_metadata += 1;
                let analyzed = rows(&on.sql(&format!("EXPLAIN ANALYZE {q}")).unwrap()).join("\n");
                assert!(analyzed.contains("units_from_metadata="), "{analyzed}");
            }
            assert!(!plan(&off, &q).contains("BasaltMetadataAggregate"));
        }
        // Proved for every row group but the first: answered from metadata (while the
        // memtable is not most of the units).
        let q = format!("SELECT {all} FROM m WHERE day > 10");
        assert!(plan(&on, &q).contains("BasaltMetadataAggregate"), "{phase}: {}", plan(&on, &q));
    }
    assert!(from_metadata >= 9, "{from_metadata}");
    // Not answered from metadata: DISTINCT, GROUP BY, other aggregates, expressions.
    for q in [
        "SELECT count(DISTINCT a) FROM m WHERE day > 10",
        "SELECT day, max(a) FROM m WHERE day > 10 GROUP BY day",
        "SELECT sum(a), max(a) FROM m WHERE day > 10",
        "SELECT max(a + 1) FROM m WHERE day > 10",
    ] {
        same(&on, &off, q);
        assert!(!plan(&on, q).contains("BasaltMetadataAggregate"), "{q}");
    }
}

#[test]
fn fused_group_by_agrees_with_datafusion() {
    let (_db, on, off) = fast_and_planned(0x6b0);
    let plan =
        |c: &basalt::Connection, q: &str| rows(&c.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    let q = "SELECT s, count(*) FROM r GROUP BY s";
    assert!(plan(&on, q).contains("BasaltGroupBy"), "{}", plan(&on, q));
    assert!(!plan(&off, q).contains("BasaltGroupBy"));
    let mut filters: Vec<&str> = vec!["true"];
    filters.extend(FILTERS.iter().take(12));
    for f in filters {
        let w = if f == "true" { String::new() } else { format!("WHERE {f}") };
        for q in [
            format!(
                "SELECT s, count(*), count(a), sum(a), avg(f), min(a), max(f), count(b), \
                 min(s), sum(f) FROM r {w} GROUP BY s"
            ),
            format!(
                "SELECT s AS k, count(*) AS n FROM r {w} GROUP BY s HAVING count(*) > 100 ORDER BY n DESC, k LIMIT 3"
            ),
            format!("SELECT count(DISTINCT s) FROM r {w}"),
            format!("SELECT DISTINCT s FROM r {w}"),
            format!("SELECT s, f, count(*), max(a) FROM r {w} GROUP BY s, f"),
            format!(
                "SELECT f, s, avg(a) FROM r {w} GROUP BY 1, 2 ORDER BY 3 DESC NULLS LAST, 1, 2 LIMIT 7"
            ),
            format!("SELECT x.s, sum(x.a) FROM (SELECT * FROM r {w}) x GROUP BY x.s"),
            // Without GROUP BY (folded here when every aggregate is).
            format!(
                "SELECT count(*), count(a), sum(a), avg(a), min(a), max(a), count(f), sum(f), \
                 avg(f), min(f), max(f), count(s), count(b) FROM r {w}"
            ),
            format!("SELECT max(f), min(a), count(*) FROM r {w}"),
            // Conditional counts (counted from the condition's mask), and CASE shapes that
            // are not one (ELSE 0, two branches, a base expression: DataFusion's count).
            format!(
                "SELECT s, count(CASE WHEN a > 500 THEN 1 END), \
                 count(CASE WHEN f < 10 OR b THEN 'x' ELSE NULL END), \
                 count(CASE WHEN b THEN 1 ELSE 0 END), \
                 count(CASE WHEN a > 900 THEN 1 WHEN f > 90 THEN 2 END), \
                 count(CASE s WHEN 'apple' THEN 1 END), count(*) FROM r {w} GROUP BY s ORDER BY s"
            ),
            format!(
                "SELECT count(CASE WHEN a % 2 = 0 THEN 1 END), count(CASE WHEN b THEN 1 END), \
                 count(*) FROM r {w}"
            ),
        ] {
            same_close(&on, &off, &q);
        }
    }
    // Group columns without NULLs (1-byte codes for s, 2-byte codes for f): counted or
    // marked straight from their codes.
    for q in [
        "SELECT count(DISTINCT s) FROM r WHERE s IS NOT NULL",
        "SELECT DISTINCT s FROM r WHERE s IS NOT NULL ORDER BY s",
        "SELECT s, count(*), count(1) FROM r WHERE s IS NOT NULL GROUP BY s ORDER BY s",
        "SELECT s, count(*) FROM r WHERE s IS NOT NULL AND a > 500 GROUP BY s ORDER BY s",
        "SELECT count(DISTINCT f) FROM r WHERE f IS NOT NULL",
        "SELECT DISTINCT f FROM r WHERE f IS NOT NULL AND a < 0 ORDER BY f",
        "SELECT f, count(*) FROM r WHERE f IS NOT NULL GROUP BY f ORDER BY f",
    ] {
        assert!(same_close(&on, &off, q) > 0, "{q}");
    }
    // Aggregates over expressions (DataFusion computes them, and shared subexpressions, in a
    // projection between the scan and the aggregate, inlined into the fused group-by).
    for q in [
        "SELECT s, sum(f * (1 - a / 1000.0)), sum(f * (1 - a / 1000.0) * (1 + a / 2000.0)), \
         avg(a + 1), count(*) FROM r GROUP BY s ORDER BY s",
        "SELECT s, sum(a * 2), min(f - a), max(CASE WHEN b THEN a END), sum(f - a) * 2 FROM r \
         WHERE a > 100 GROUP BY s ORDER BY s",
    ] {
        assert!(plan(&on, q).contains("BasaltGroupBy"), "{}", plan(&on, q));
        assert!(same_close(&on, &off, q) > 0, "{q}");
    }
    // A volatile projection expression is not inlined (it would be drawn once per use).
    let q = "SELECT s, sum(x), max(x) FROM (SELECT s, random() AS x FROM r) t GROUP BY s";
    assert_eq!(rows(&on.sql(q).unwrap()).len(), rows(&off.sql(q).unwrap()).len());
    // A value met once, late in its row group: marking codes must not stop before it.
    on.sql(
        "CREATE TABLE d (k VARCHAR NOT NULL); INSERT INTO d SELECT CASE WHEN _id = 60000 \
         THEN 'rare' WHEN _id % 1000 = 0 AND _id > 70000 THEN 'late' ELSE 'common' END FROM r",
    )
    .unwrap();
    _db.flush().unwrap();
    for q in [
        "SELECT DISTINCT k FROM d ORDER BY k",
        "SELECT count(DISTINCT k) FROM d",
        "SELECT k, count(*) FROM d GROUP BY k ORDER BY k",
    ] {
        assert!(plan(&on, q).contains("BasaltGroupBy"), "{}", plan(&on, q));
        assert!(same_close(&on, &off, q) > 0, "{q}");
    }
    assert_eq!(rows(&on.sql("SELECT count(DISTINCT k) FROM d").unwrap()), ["3"]);
    let q = "SELECT s, count(CASE WHEN a > 40 THEN 1 END) AS c FROM r GROUP BY s ORDER BY s";
    assert!(plan(&on, q).contains("BasaltGroupBy"), "{}", plan(&on, q));
    assert!(same_close(&on, &off, q) > 3);
    let q = "SELECT count(*), sum(a), avg(f), min(f) FROM r";
    assert!(
        plan(&on, q).contains("BasaltGroupBy: table=r, mode=Partial, by=[]"),
        "{}",
        plan(&on, q)
    );
    // Partial aggregation over a union of scans: one fused aggregate per input.
    let unions = [
        "SELECT s FROM r WHERE a > 500 UNION SELECT s FROM r WHERE f < 10",
        "SELECT s, count(*), sum(a), max(f) FROM \
         (SELECT s, a, f FROM r WHERE a > 0 UNION ALL SELECT s, a, f FROM r WHERE b) GROUP BY s",
        "SELECT count(*), avg(f) FROM (SELECT f FROM r WHERE s = 'date' UNION ALL SELECT f FROM r)",
    ];
    let p = plan(&on, unions[0]);
    assert_eq!(p.matches("BasaltGroupBy").count(), 2, "{p}");
    for q in unions {
        assert!(same_close(&on, &off, q) > 0, "{q}");
    }
    // Semi and anti joins deduplicate a scanned right input first (NULLs included).
    let semis = [
        "SELECT s FROM r WHERE a > 500 INTERSECT SELECT s FROM r WHERE f < 10",
        "SELECT s FROM r WHERE a > 500 EXCEPT SELECT s FROM r WHERE f < 50",
        "SELECT s FROM r WHERE b INTERSECT SELECT s FROM r",
        "SELECT v.k FROM (VALUES ('apple'), ('zzz'), (NULL), ('date')) v(k) \
         WHERE v.k IN (SELECT s FROM r WHERE a > 100)",
        "SELECT v.k FROM (VALUES ('apple'), ('zzz'), (NULL)) v(k) \
         WHERE NOT EXISTS (SELECT 1 FROM r WHERE r.s = v.k)",
    ];
    let p = plan(&on, semis[0]);
    assert_eq!(p.matches("BasaltGroupBy").count(), 2, "{p}");
    assert!(same_close(&on, &off, semis[0]) > 0);
    for q in semis {
        same_close(&on, &off, q);
    }
    // A scalar aggregate folded here only when all of its aggregates are.
    let q = "SELECT count(*), stddev(f) FROM r";
    assert!(!plan(&on, q).contains("BasaltGroupBy"), "{}", plan(&on, q));
    same_close(&on, &off, q);
    // No row selected: one row of empty aggregates, in every partition.
    let q = "SELECT count(*), count(a), sum(a), avg(f), min(f), max(a) FROM r WHERE a > 100000";
    assert_eq!(same_close(&on, &off, q), 1);
    // Narrower types under the casts DataFusion adds (Int32 → Int64 / Float64, Float32 →
    // Float64); Float32 columns are dictionary-encoded too.
    on.sql("CREATE TABLE w AS SELECT CAST(a AS INT) AS i, CAST(f AS REAL) AS x, s FROM r").unwrap();
    for q in [
        "SELECT s, sum(i), avg(i), min(i), max(x), avg(x), sum(x), count(x) FROM w GROUP BY s",
        "SELECT sum(i), avg(i), min(x), max(i), avg(x), sum(x) FROM w",
        "SELECT sum(i), avg(x), min(x) FROM w WHERE s = 'banana'",
    ] {
        same_close(&on, &off, q);
    }
    // Rows in the memtable (values, not codes) and an empty selection.
    on.sql("INSERT INTO r VALUES (1, 'zeta', 1.0, true), (2, NULL, 2.0, false), (3, 'apple', NULL, NULL)")
        .unwrap();
    for q in [
        "SELECT s, count(*), sum(a), avg(f) FROM r GROUP BY s",
        "SELECT s, count(*) FROM r WHERE a > 100000 GROUP BY s",
        "SELECT s, f, count(*) FROM r WHERE _id > 100400 GROUP BY s, f",
        "SELECT count(*), sum(a), avg(f), min(f), max(a) FROM r WHERE _id > 100400",
        "SELECT s, count(CASE WHEN a < 3 THEN 1 END) FROM r GROUP BY s",
        "SELECT s FROM r WHERE a > 500 UNION SELECT s FROM r WHERE _id > 100400",
        "SELECT s FROM r WHERE a > 500 INTERSECT SELECT s FROM r WHERE _id > 100400",
    ] {
        same_close(&on, &off, q);
    }
    assert!(same_close(&on, &off, "SELECT s, count(*) FROM r GROUP BY s") >= 7);
    // Two dictionary-encoded group columns (with NULLs in both), over segments.
    on.sql(
        "CREATE TABLE g AS SELECT s, CASE WHEN a % 3 = 0 THEN 'x' WHEN a % 3 = 1 THEN 'y' END AS t, \
         a, f FROM r",
    )
    .unwrap();
    let q = "SELECT s, t, count(*), sum(a), avg(f) FROM g GROUP BY s, t";
    assert!(plan(&on, q).contains("by=[s, t]"), "{}", plan(&on, q));
    for q in [
        q,
        "SELECT t, s, count(*), max(f) FROM g WHERE a > 0 GROUP BY t, s",
        "SELECT DISTINCT t, s FROM g",
        "SELECT count(DISTINCT t) FROM g WHERE s = 'date'",
    ] {
        same_close(&on, &off, q);
    }
    // NOT NULL columns, grouped by one and aggregating another.
    on.sql("CREATE TABLE nn (k TEXT NOT NULL, v BIGINT NOT NULL, w TEXT NOT NULL)").unwrap();
    on.sql(
        "INSERT INTO nn SELECT coalesce(s, 'none'), coalesce(a, 0), coalesce(s, 'other') FROM r",
    )
    .unwrap();
    let q = "SELECT k, count(*), sum(v), min(w) FROM nn GROUP BY k";
    assert!(plan(&on, q).contains("BasaltGroupBy"), "{}", plan(&on, q));
    same_close(&on, &off, q);
    same_close(&on, &off, "SELECT k, w, avg(v) FROM nn WHERE v > 10 GROUP BY k, w");
}

#[test]
fn fast_paths_on_and_off_agree_on_writes() {
    let (db_on, db_off) = (random_table(0xbeef), random_table(0xbeef));
    let (on, off) = (db_on.connect(), db_off.connect());
    off.set_fast_paths(false).unwrap();
    let all = "SELECT _id, a, s, f, b FROM r";
    let steps = [
        "UPDATE r SET s = 'big', f = 1 WHERE a > 900",
        "UPDATE r SET b = NULL WHERE _id IN (3, 5, 70001, 999999)",
        "UPDATE r SET a = -1 WHERE _id = 4 AND s = 'nothing'",
        "UPDATE r SET a = 2.5 WHERE _id = 6",
        "UPDATE r SET _id = 2 WHERE _id = 6",
        "UPDATE r SET nope = 1 WHERE _id = 6",
        "DELETE FROM r WHERE s LIKE 'ch%' AND f < 20",
        "DELETE FROM r WHERE _id = 10",
        "DELETE FROM r WHERE _id = 10",
        "DELETE FROM r WHERE _id IN (11, 12, 13) OR a = 77",
        "INSERT INTO r VALUES (1, 'n', 2.5, true), (NULL, NULL, NULL, NULL)",
        "INSERT INTO r (s, a) VALUES ('only', 7)",
        "INSERT INTO r (s, a) VALUES ('only')",
        "INSERT INTO r VALUES (1, 'n', 2.5)",
        "INSERT INTO r VALUES ('x', 'n', 2.5, true)",
        "INSERT INTO r VALUES (9223372036854775807, 'max', -0.5, false)",
        "BEGIN",
        "UPDATE r SET s = 'in txn' WHERE _id = 20",
        "SELECT _id, s FROM r WHERE _id = 20",
        "DELETE FROM r WHERE _id = 21",
        "ROLLBACK",
        "BEGIN",
        "INSERT INTO r VALUES (5, 'kept', 0.0, NULL)",
        "UPDATE r SET f = 0.25 WHERE s = 'kept'",
        "COMMIT",
        "DELETE FROM r WHERE a < 0",
        "UPDATE r SET s = 'every'",
    ];
    for q in steps {
        let (x, y) = (on.sql(q), off.sql(q));
        assert_eq!(x.is_ok(), y.is_ok(), "{q}: {:?} vs {:?}", x.err(), y.err());
        if let (Ok(x), Ok(y)) = (x, y) {
            assert_eq!(rows(&x), rows(&y), "{q}");
        }
        assert_eq!(rows(&on.sql(all).unwrap()), rows(&off.sql(all).unwrap()), "after {q}");
    }
    let before = on.fast_path_statements().unwrap();
    let u_on = on.prepare("UPDATE r SET a = $1 WHERE _id = $2").unwrap();
    let u_off = off.prepare("UPDATE r SET a = $1 WHERE _id = $2").unwrap();
    for (a, id) in [(1i64, 30i64), (2, 31), (3, 10_000_000)] {
        let args = [Value::Int(a), Value::Int(id)];
        assert_eq!(rows(&u_on.execute(&args).unwrap()), rows(&u_off.execute(&args).unwrap()));
    }
    assert!(on.fast_path_statements().unwrap() >= 20, "the writes took the fast path");
    assert_eq!(off.fast_path_statements().unwrap(), 0);
    let i_on = on.prepare("INSERT INTO r (a, s) VALUES ($1, $2)").unwrap();
    let i_off = off.prepare("INSERT INTO r (a, s) VALUES ($1, $2)").unwrap();
    let args = [Value::Int(42), Value::Str("prepared".into())];
    assert_eq!(rows(&i_on.execute(&args).unwrap()), rows(&i_off.execute(&args).unwrap()));
    // Prepared statements take the fast path at each run.
    assert_eq!(on.fast_path_statements().unwrap(), before + 4);
    assert_eq!(rows(&on.sql(all).unwrap()), rows(&off.sql(all).unwrap()));
}

#[test]
fn explain_shows_pushed_filters_and_pruned_row_groups() {
    let db = random_table(7);
    let conn = db.connect();
    let plan = rows(&conn.sql("EXPLAIN SELECT a FROM r WHERE a > 5000 AND s = 'updated'").unwrap())
        .join("\n");
    assert!(plan.contains("BasaltScan: table=r"), "{plan}");
    assert!(plan.contains("filter=(a > 5000 AND s = 'updated')"), "{plan}");
    // The updated rows live in the memtable: every segment row group is pruned by its
    // zone map (a ≤ ~1000 there).
    assert!(plan.contains("units=1/"), "{plan}");
    // An exact filter leaves no FilterExec; an unsupported one keeps it.
    assert!(!plan.contains("FilterExec"), "{plan}");
    let plan = rows(&conn.sql("EXPLAIN SELECT a FROM r WHERE a + 1 > 3").unwrap()).join("\n");
    assert!(plan.contains("FilterExec"), "{plan}");
    // COUNT(*) without a filter is answered from exact statistics, with one it is not.
    let total = db.table("r").unwrap().count().unwrap();
    assert_eq!(one_u64(&conn.sql("SELECT count(*) FROM r").unwrap()), total);
    // With a filter it is counted by the fused aggregate, which evaluates the filter.
    let plan = rows(&conn.sql("EXPLAIN SELECT count(*) FROM r WHERE a > 0").unwrap()).join("\n");
    assert!(plan.contains("BasaltGroupBy: table=r") && plan.contains("filter=a > 0"), "{plan}");
}

#[test]
fn large_insert_select_streams_into_segments() {
    let db =
        Database::open_in_memory_with(Options { bulk_insert_rows: 4096, ..Options::default() })
            .unwrap();
    let conn = db.connect();
    conn.sql(
        "CREATE TABLE big AS SELECT value AS v, value % 10 AS m FROM generate_series(1, 200000)",
    )
    .unwrap();
    let r = conn.sql("SELECT count(*), sum(v), count(DISTINCT m) FROM big").unwrap();
    assert_eq!(rows(&r), vec!["200000|20000100000|10"]);
    // Ids are consecutive and `_id` order is insertion order.
    let r = conn.sql("SELECT min(_id), max(_id) FROM big").unwrap();
    assert_eq!(rows(&r), vec!["1|200000"]);
}

#[test]
fn topk_dynamic_filters_skip_row_groups() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE s AS SELECT value AS v FROM generate_series(1, 200000)").unwrap();
    // One partition: the scan reads units in order, so after the first one TopK's
    // threshold rules out every later unit by its zone map.
    conn.sql("SET datafusion.execution.target_partitions = 1").unwrap();
    assert_eq!(rows(&conn.sql("SELECT v FROM s ORDER BY v LIMIT 3").unwrap()), vec!["1", "2", "3"]);
    let plan =
        rows(&conn.sql("EXPLAIN ANALYZE SELECT v FROM s ORDER BY v LIMIT 3").unwrap()).join("\n");
    let pruned = plan
        .split("units_pruned_by_hints=")
        .nth(1)
        .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no pruning metric in {plan}"));
    assert!(pruned > 0, "{plan}");
    assert!(plan.contains("pruning_hints=[DynamicFilter"), "{plan}");
    // Descending order over ascending data prunes too, and results match a full sort.
    conn.sql("SET datafusion.execution.target_partitions = 2").unwrap();
    let off = db.connect();
    off.set_filter_pushdown(false).unwrap();
    off.set_fast_paths(false).unwrap();
    for q in [
        "SELECT v FROM s ORDER BY v DESC LIMIT 4",
        "SELECT v FROM s WHERE v % 7 = 0 ORDER BY v LIMIT 5",
        "SELECT v FROM s ORDER BY v DESC LIMIT 2 OFFSET 3",
    ] {
        assert_eq!(rows(&conn.sql(q).unwrap()), rows(&off.sql(q).unwrap()), "{q}");
    }
}

/// The metric `name` summed over an `EXPLAIN ANALYZE` text (counts shown as `199.2 K`).
fn metric_sum(plan: &str, name: &str) -> f64 {
    plan.split(&format!("{name}="))
        .skip(1)
        .filter_map(|s| {
            let v = s.split([',', ']']).next()?.trim();
            let (num, scale) = match v.split_once(' ') {
                Some((n, "K")) => (n, 1e3),
                Some((n, "M")) => (n, 1e6),
                Some((n, "B")) => (n, 1e9),
                _ => (v, 1.0),
            };
            Some(num.parse::<f64>().ok()? * scale)
        })
        .sum()
}

#[test]
fn join_dynamic_filters_drop_probe_rows_in_storage() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql(
        "CREATE TABLE f AS SELECT value AS id, value % 50000 AS k, value % 7 AS v \
         FROM generate_series(1, 200000)",
    )
    .unwrap();
    conn.sql(
        "CREATE TABLE d AS SELECT value * 397 % 50000 AS k, \
         CASE WHEN value % 3 = 0 THEN 'x' ELSE 'y' END AS tag FROM generate_series(1, 600)",
    )
    .unwrap();
    let off = db.connect();
    off.set_filter_pushdown(false).unwrap();
    off.set_fast_paths(false).unwrap();
    let queries = [
        // Inner join: the build side's 200 keys filter the probe scan of f.
        "SELECT count(*), sum(f.v) FROM f JOIN d ON f.k = d.k WHERE d.tag = 'x'",
        // The filter reaches the scan below an aggregate on the join key.
        "SELECT count(*) FROM d WHERE d.tag = 'x' AND d.k IN \
         (SELECT k FROM f GROUP BY k HAVING sum(v) > 3)",
        // Most keys on the build side: the hint keeps most rows (the gate closes).
        "SELECT count(*), sum(f.v) FROM f JOIN d ON f.k <> 0 AND f.k = d.k",
        "SELECT count(*) FROM f JOIN (SELECT DISTINCT k FROM f WHERE v < 6) g ON f.k = g.k",
        // Two keys: the list of pairs filters by each key's own values.
        "SELECT count(*), sum(f.id) FROM f JOIN d ON f.k = d.k AND f.v = length(d.tag) + 2",
        // One key is an aggregate's result: the other key's values still reach the scan
        // below the aggregate (DataFusion's pushdown stops there).
        "SELECT count(*) FROM d JOIN (SELECT k, max(v) AS m FROM f GROUP BY k) g \
         ON d.k = g.k AND length(d.tag) + 5 = g.m",
        "SELECT d.k FROM d WHERE d.tag = 'x' AND EXISTS (SELECT 1 FROM \
         (SELECT k, max(v) AS m FROM f WHERE id > 10 GROUP BY k) g \
         WHERE g.k = d.k AND g.m = length(d.tag) + 5)",
    ];
    for partitions in [1, 2] {
        conn.sql(&format!("SET datafusion.execution.target_partitions = {partitions}")).unwrap();
        for q in queries {
            assert_eq!(rows(&conn.sql(q).unwrap()), rows(&off.sql(q).unwrap()), "{q}");
        }
        let plan = rows(&conn.sql(&format!("EXPLAIN ANALYZE {}", queries[0])).unwrap()).join("\n");
        assert!(metric_sum(&plan, "rows_removed_by_hints") > 1e5, "{plan}");
        for q in [queries[1], queries[4], queries[5], queries[6]] {
            let plan = rows(&conn.sql(&format!("EXPLAIN ANALYZE {q}")).unwrap()).join("\n");
            assert!(metric_sum(&plan, "rows_removed_by_hints") > 1e5, "{plan}");
        }
        // Past the aggregate, the part of the filter on the grouping key.
        for q in [queries[5], queries[6]] {
            let plan = rows(&conn.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
            assert!(plan.contains("JoinKeys [k@"), "{plan}");
        }
    }
}

/// Parent filters pushed into the scan (a hash join's build keys, TopK's threshold) drop
/// rows in storage; the answers must be those of the rows themselves, computed here.
#[test]
fn dictionary_join_agrees_with_datafusion() {
    let (_db, on, off) = fast_and_planned(0xd1c7);
    let plan =
        |c: &basalt::Connection, q: &str| rows(&c.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    // A small dimension table: a duplicated key, a NULL key, a key no row has, a key
    // missing ('banana'), and the empty string.
    on.sql("CREATE TABLE dim (s TEXT, w BIGINT, tag TEXT)").unwrap();
    on.sql(
        "INSERT INTO dim VALUES ('apple', 1, 'fruit'), ('apple', 2, 'again'), ('date', 3, NULL), \
         (NULL, 4, 'null'), ('zzz', 5, 'none'), ('', 6, 'empty'), ('cherry', NULL, 'red')",
    )
    .unwrap();
    let queries = [
        "SELECT r._id, r.a, d.w FROM r JOIN dim d ON r.s = d.s",
        "SELECT r._id, r.s, r.f, d.tag FROM r LEFT JOIN dim d ON r.s = d.s",
        "SELECT d.s, d.w, r.b FROM dim d RIGHT JOIN r ON r.s = d.s",
        "SELECT count(*) FROM r JOIN dim d ON r.s = d.s",
        "SELECT count(*) FROM r LEFT JOIN dim d ON r.s = d.s",
        "SELECT count(*) FROM r LEFT JOIN dim d ON r.s = d.s AND d.w > 2",
        "SELECT count(*), sum(r.a), max(d.w) FROM r LEFT JOIN dim d ON r.s = d.s WHERE r.f > 20",
        "SELECT r.s, count(*), sum(r.a), avg(r.f), min(d.tag), max(d.w) FROM r \
         JOIN dim d ON r.s = d.s GROUP BY r.s",
        "SELECT r.s, r.b, count(*) AS c FROM r JOIN dim d ON r.s = d.s WHERE r.a > 100 \
         GROUP BY r.s, r.b ORDER BY c DESC, r.s, r.b LIMIT 4",
        "SELECT r.s, count(d.w) FROM r LEFT JOIN dim d ON r.s = d.s GROUP BY r.s",
        "SELECT d.tag, count(*) FROM r JOIN dim d ON r.s = d.s GROUP BY d.tag",
        "SELECT r.s, d.w FROM r JOIN dim d ON r.s = d.s WHERE d.w < 3 AND r.a BETWEEN 0 AND 300",
        "SELECT count(*) FROM (SELECT r.s FROM r JOIN dim d ON r.s = d.s LIMIT 10)",
        "SELECT count(*) FROM r JOIN dim d ON r.s = d.s JOIN dim e ON r.s = e.s",
        // Integer keys (never dictionary-encoded: DataFusion's join).
        "SELECT count(*), sum(r.f) FROM r JOIN dim d ON r.a = d.w",
        "SELECT r.a, d.tag FROM r LEFT JOIN dim d ON r.a = d.w WHERE r.a < 10",
    ];
    let q = queries[0];
    assert!(
        plan(&on, q).contains("BasaltDictJoin: type=Inner, table=r, key=s"),
        "{}",
        plan(&on, q)
    );
    assert!(!plan(&off, q).contains("BasaltDictJoin"));
    let q = queries[7];
    assert!(plan(&on, q).contains("over BasaltDictJoin"), "{}", plan(&on, q));
    let q = queries[4];
    assert!(plan(&on, q).contains("type=Right"), "{}", plan(&on, q));
    for q in queries {
        same_close(&on, &off, q);
    }
    // Rows that differ: counts per join kind against a count done here.
    let strings = rows(&on.sql("SELECT s FROM r").unwrap());
    let (apples, dates, cherries, empties) = ["apple", "date", "cherry", ""]
        .map(|w| strings.iter().filter(|s| s.as_str() == w).count())
        .into();
    assert!(apples > 0 && dates > 0 && cherries > 0);
    let inner = 2 * apples + dates + cherries + empties;
    assert_eq!(one_u64(&on.sql(queries[3]).unwrap()), inner as u64);
    let left = strings.len() + apples;
    assert_eq!(one_u64(&on.sql(queries[4]).unwrap()), left as u64);
    // Memtable rows (values, not codes).
    on.sql("INSERT INTO r VALUES (1, 'apple', 1.0, true), (2, NULL, 2.0, false), (6, 'zzz', NULL, NULL)")
        .unwrap();
    for q in queries {
        same_close(&on, &off, q);
    }
    // An empty build side.
    for q in [
        "SELECT count(*) FROM r JOIN dim d ON r.s = d.s AND d.w > 100",
        "SELECT count(*), max(d.w) FROM r LEFT JOIN dim d ON r.s = d.s AND d.w > 100",
        "SELECT r.s, count(*) FROM r JOIN dim d ON r.s = d.s AND d.w > 100 GROUP BY r.s",
    ] {
        same_close(&on, &off, q);
    }
}

#[test]
fn entry_filter_agrees_with_datafusion() {
    let (_db, on, off) = fast_and_planned(0xe17);
    let plan =
        |c: &basalt::Connection, q: &str| rows(&c.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    let queries = [
        "SELECT _id, a FROM r WHERE COALESCE(NULLIF(s, 'apple'), 'none') = 'none'",
        "SELECT count(*) FROM r WHERE COALESCE(NULLIF(s, 'banana'), 'none') = 'banana'",
        "SELECT count(*) FROM r WHERE upper(s) = 'DATE'",
        "SELECT _id, s, f FROM r WHERE length(s) > 5 OR s IS NULL",
        "SELECT s, count(*) FROM r WHERE CASE WHEN s = 'apple' THEN 1 WHEN s IS NULL THEN 2 ELSE 0 END > 0 GROUP BY s",
        "SELECT _id FROM r WHERE NOT (s LIKE '%an%')",
        "SELECT count(*), sum(a) FROM r WHERE COALESCE(s, 'x') = 'x'",
        "SELECT _id, b FROM r WHERE concat(s, '!') IN ('date!', '!')",
        "SELECT count(*) FROM r WHERE f * 2 > 150",
        "SELECT a FROM r WHERE upper(s) = 'CHERRY' AND a > 500",
    ];
    let q = queries[0];
    assert!(plan(&on, q).contains("BasaltEntryFilter: table=r, column=s"), "{}", plan(&on, q));
    assert!(!plan(&off, q).contains("BasaltEntryFilter"));
    for q in queries {
        same(&on, &off, q);
    }
    // A cast that fails on an entry no selected row holds (its rows were deleted): the
    // row group is evaluated row by row, and the answer is DataFusion's.
    on.sql(
        "CREATE TABLE nums AS SELECT CASE WHEN a % 3 = 0 THEN 'x' ELSE CAST(a % 10 AS TEXT) END \
         AS t, a FROM r WHERE a IS NOT NULL",
    )
    .unwrap();
    on.sql("DELETE FROM nums WHERE t = 'x'").unwrap();
    let q = "SELECT count(*), sum(a) FROM nums WHERE CAST(t AS BIGINT) > 4";
    assert!(plan(&on, q).contains("BasaltEntryFilter"), "{}", plan(&on, q));
    assert_eq!(same(&on, &off, q).len(), 1);
    assert!(on.sql("SELECT count(*) FROM r WHERE CAST(s AS BIGINT) > 4").is_err());
    // Memtable rows (values) with the segments' codes.
    on.sql("INSERT INTO r VALUES (1, 'apple', 1.0, true), (2, NULL, 2.0, false), (3, 'Date', 0.5, NULL)")
        .unwrap();
    for q in queries {
        same(&on, &off, q);
    }
}

#[test]
fn bucket_sort_agrees_with_datafusion() {
    let (_db, on, off) = fast_and_planned(0xb0c7);
    let plan =
        |c: &basalt::Connection, q: &str| rows(&c.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    // In order (every sort ends on `_id`, so the order is determined): several buckets,
    // NULLs first and last, descending, OFFSET past bucket ends, filters, no other key.
    // Integer keys: few values (`k`), and more than MAX_BUCKETS (`a`: the original sort).
    on.sql("CREATE TABLE k AS SELECT a % 5 AS a, s, f FROM r").unwrap();
    let ordered = [
        "SELECT _id, s, f FROM r ORDER BY s, _id LIMIT 100 OFFSET 3000",
        "SELECT _id, s, a FROM r ORDER BY s DESC, a, _id LIMIT 50 OFFSET 30000",
        "SELECT _id, s FROM r ORDER BY s NULLS FIRST, _id DESC LIMIT 20 OFFSET 7000",
        "SELECT _id, s, f FROM r WHERE f > 30 ORDER BY s DESC NULLS LAST, f DESC, _id LIMIT 40000",
        "SELECT _id, s FROM r WHERE a < 0 ORDER BY s, length(s), _id LIMIT 5000",
        "SELECT s, _id FROM r ORDER BY s, _id DESC LIMIT 5 OFFSET 90000",
        "SELECT a, _id FROM r ORDER BY a, _id LIMIT 30 OFFSET 5000",
        "SELECT a, s, f, _id FROM k ORDER BY a NULLS FIRST, s, f, _id LIMIT 100 OFFSET 20000",
        "SELECT a, s, f, _id FROM k ORDER BY a DESC, s, f, _id LIMIT 100 OFFSET 30000",
        "SELECT a, s, f, _id FROM k WHERE f > 50 ORDER BY a DESC NULLS LAST, f DESC, _id LIMIT 3000",
    ];
    let q = ordered[0];
    assert!(plan(&on, q).contains("BasaltBucketSort: table=r, key=s"), "{}", plan(&on, q));
    assert!(!plan(&off, q).contains("BasaltBucketSort"));
    let q = ordered[7];
    assert!(plan(&on, q).contains("BasaltBucketSort: table=k, key=a"), "{}", plan(&on, q));
    // A small fetch stays DataFusion's top-k.
    let q = "SELECT _id, s FROM r ORDER BY s, _id LIMIT 100";
    assert!(!plan(&on, q).contains("BasaltBucketSort"), "{}", plan(&on, q));
    for q in ordered {
        let (x, y) = (on.sql(q).unwrap(), off.sql(q).unwrap());
        let (a, b) = (rows_in_order(&x), rows_in_order(&y));
        assert!(!a.is_empty(), "{q}");
        assert_eq!(a, b, "{q}");
    }
    // Windows partitioned by the key under a LIMIT without ORDER BY: any rows of the
    // window's result may come back, so each must be a row of the full result.
    let windows = [
        "SELECT _id, s, ROW_NUMBER() OVER (PARTITION BY s ORDER BY f DESC, _id) AS rn FROM r",
        "SELECT _id, s, RANK() OVER (PARTITION BY s ORDER BY a) AS rk FROM r",
        "SELECT _id, s, SUM(a) OVER (PARTITION BY s ORDER BY f) AS run FROM r",
        "SELECT _id, s, LAG(a) OVER (PARTITION BY s ORDER BY f, _id) AS prev FROM r WHERE b",
    ];
    let q = format!("{} LIMIT 1000", windows[0]);
    assert!(plan(&on, &q).contains("BasaltBucketSort"), "{}", plan(&on, &q));
    for w in windows {
        let all: std::collections::HashSet<String> =
            rows(&off.sql(w).unwrap()).into_iter().collect();
        for limit in [1000, 25000] {
            let got = rows(&on.sql(&format!("{w} LIMIT {limit}")).unwrap());
            assert_eq!(got.len(), limit, "{w}");
            for r in &got {
                assert!(all.contains(r), "{w} LIMIT {limit}: {r} is not in the full result");
            }
        }
    }
    // Memtable rows (a new value among them), and a key with more than MAX_BUCKETS values
    // (the original sort runs).
    on.sql("INSERT INTO r VALUES (1, 'apple', 1.0, true), (2, NULL, 2.0, false), (3, 'zeta', 0.5, NULL)")
        .unwrap();
    on.sql("CREATE TABLE tk AS SELECT CAST(a AS TEXT) AS t, s, f FROM r").unwrap();
    let q = "SELECT t, s, f, _id FROM tk ORDER BY t NULLS FIRST, s, f, _id LIMIT 100 OFFSET 2000";
    assert!(plan(&on, q).contains("BasaltBucketSort: table=tk, key=t"), "{}", plan(&on, q));
    for q in [
        "SELECT _id, s, f FROM r ORDER BY s DESC, f, _id LIMIT 300",
        "SELECT _id, s, f FROM r ORDER BY s NULLS FIRST, f, _id LIMIT 30 OFFSET 100",
        q,
    ] {
        let (x, y) = (on.sql(q).unwrap(), off.sql(q).unwrap());
        assert_eq!(rows_in_order(&x), rows_in_order(&y), "{q}");
    }
}

#[test]
fn small_limits_are_not_repartitioned() {
    let (_db, on, off) = fast_and_planned(0x5e71);
    let plan =
        |c: &basalt::Connection, q: &str| rows(&c.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    // A projection over a small limit runs on the limit's one partition; without the fast
    // paths DataFusion's round-robin repartition stays; a large limit keeps it too.
    let q = "SELECT ROUND(f, 0) AS r, ABS(a - 40) AS x, _id FROM r WHERE a BETWEEN -30 AND 40 LIMIT 1000";
    assert!(plan(&off, q).contains("RoundRobinBatch"), "{}", plan(&off, q));
    assert!(!plan(&on, q).contains("RoundRobinBatch"), "{}", plan(&on, q));
    let big = "SELECT ROUND(f, 0) AS r, ABS(a - 40) AS x, _id FROM r LIMIT 50000";
    assert!(plan(&on, big).contains("RoundRobinBatch"), "{}", plan(&on, big));
    // The same rows either way (a limit without ORDER BY may pick any rows: compare what
    // both return against the full result and check the counts).
    let all: std::collections::HashSet<String> = rows(
        &off.sql(
            "SELECT ROUND(f, 0) AS r, ABS(a - 40) AS x, _id FROM r WHERE a BETWEEN -30 AND 40",
        )
        .unwrap(),
    )
    .into_iter()
    .collect();
    for c in [&on, &off] {
        let got = rows(&c.sql(q).unwrap());
        assert_eq!(got.len(), 1000.min(all.len()));
        assert!(got.iter().all(|r| all.contains(r)), "{q}");
    }
    // Ordered and aggregated shapes above a small limit answer as DataFusion does.
    for q in [
        "SELECT a, _id FROM (SELECT a, _id FROM r LIMIT 500) t ORDER BY a, _id",
        "SELECT count(*), sum(a) FROM (SELECT a FROM r ORDER BY _id LIMIT 700) t",
        "SELECT s, count(*) FROM (SELECT s FROM r ORDER BY _id LIMIT 3000) t GROUP BY s ORDER BY s",
    ] {
        let (x, y) = (on.sql(q).unwrap(), off.sql(q).unwrap());
        assert_eq!(rows_in_order(&x), rows_in_order(&y), "{q}");
    }
}

#[test]
fn join_and_topk_filters_dropping_rows_in_the_scan_keep_answers() {
    let db = random_table(0x101);
    let conn = db.connect();
    conn.sql("CREATE TABLE pick (s TEXT, w BIGINT)").unwrap();
    conn.sql("INSERT INTO pick VALUES ('apple', 1), ('date', 2), (NULL, 3), ('zzz', 4)").unwrap();
    let strings = rows(&conn.sql("SELECT s FROM r").unwrap());
    let count_of = |set: &[&str]| strings.iter().filter(|s| set.contains(&s.as_str())).count();
    let (both, date) = (count_of(&["apple", "date"]), count_of(&["date"]));
    assert!(both > date && date > 0);
    for (q, want) in [
        ("SELECT count(*) FROM r WHERE s IN (SELECT s FROM pick)", both),
        ("SELECT count(*) FROM r WHERE EXISTS (SELECT 1 FROM pick p WHERE p.s = r.s)", both),
        ("SELECT count(*) FROM r JOIN pick p ON r.s = p.s", both),
        ("SELECT count(*) FROM r JOIN pick p ON r.s = p.s AND p.w > 1", date),
        ("SELECT count(*) FROM r WHERE s IN (SELECT s FROM pick WHERE w = 2)", date),
        ("SELECT count(*) FROM r LEFT JOIN pick p ON r.s = p.s", strings.len()),
    ] {
        assert_eq!(one_u64(&conn.sql(q).unwrap()), want as u64, "{q}");
    }
    // Semi joins against a small build side run as a scan with the build's keys as an IN
    // list (string and integer keys); the answers above already went that way.
    let ints = rows(&conn.sql("SELECT a FROM r").unwrap());
    let small = ints.iter().filter(|a| ["1", "2", "3", "4"].contains(&a.as_str())).count();
    for (q, want) in [
        ("SELECT count(*) FROM r WHERE a IN (SELECT w FROM pick)", small),
        ("SELECT count(*) FROM r WHERE s IN (SELECT s FROM pick WHERE w > 100)", 0),
    ] {
        assert_eq!(one_u64(&conn.sql(q).unwrap()), want as u64, "{q}");
    }
    for q in [
        "SELECT count(*) FROM r WHERE s IN (SELECT s FROM pick)",
        "SELECT count(*) FROM r WHERE EXISTS (SELECT 1 FROM pick p WHERE p.s = r.s)",
    ] {
        let plan = rows(&conn.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
        assert!(plan.contains("BasaltSemiJoinScan: table=r, key=s"), "{plan}");
    }
    let q = "SELECT _id, s, f FROM r WHERE s IN (SELECT s FROM pick) AND f > 50";
    let off = db.connect();
    off.set_fast_paths(false).unwrap();
    let (fast, slow) = (rows(&conn.sql(q).unwrap()), rows(&off.sql(q).unwrap()));
    assert_eq!(fast, slow);
    assert!(!fast.is_empty());
    // (With the fast paths on this join probes by dictionary code instead.)
    let plan =
        rows(&off.sql("EXPLAIN ANALYZE SELECT count(*) FROM r JOIN pick p ON r.s = p.s").unwrap())
            .join("\n");
    assert!(plan.contains("pruning_hints=[DynamicFilter"), "{plan}");
    // TopK over several partitions and row groups, against a sort done here.
    let all = rows(&conn.sql("SELECT f, _id FROM r WHERE f IS NOT NULL").unwrap());
    let mut pairs: Vec<(f64, u64, &String)> = all
        .iter()
        .map(|r| {
            let (f, id) = r.split_once('|').unwrap();
            (f.parse().unwrap(), id.parse().unwrap(), r)
        })
        .collect();
    pairs.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    let got = rows(
        &conn.sql("SELECT f, _id FROM r WHERE f IS NOT NULL ORDER BY f DESC, _id LIMIT 9").unwrap(),
    );
    let mut want: Vec<String> = pairs[..9].iter().map(|p| p.2.clone()).collect();
    want.sort();
    assert_eq!(got, want);
}

#[test]
fn limit_offset_over_pushed_filters_counts_right() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE t1 (a INT)").unwrap();
    conn.sql("INSERT INTO t1 SELECT CAST(value AS INT) FROM generate_series(1, 20)").unwrap();
    let plan = rows(
        &conn
            .sql("EXPLAIN SELECT COUNT(*) FROM (SELECT a FROM t1 WHERE a > 3 LIMIT 3 OFFSET 6)")
            .unwrap(),
    )
    .join("\n");
    // The offset stays above the scan (the scan's own limit is per partition).
    assert!(plan.contains("GlobalLimitExec: skip=6, fetch=3"), "{plan}");
    let q = "SELECT COUNT(*) FROM (SELECT a FROM t1 WHERE a > 3 LIMIT 3 OFFSET 6)";
    assert_eq!(one_u64(&conn.sql(q).unwrap()), 3);
    let q = "SELECT a FROM t1 WHERE a > 3 ORDER BY a LIMIT 3 OFFSET 6";
    assert_eq!(rows(&conn.sql(q).unwrap()), vec!["10", "11", "12"]);
}

#[test]
fn concurrent_sql_increments_lose_no_update() {
    let db = Database::open_in_memory().unwrap();
    db.sql("CREATE TABLE c (n BIGINT); INSERT INTO c VALUES (0)").unwrap();
    let threads: Vec<_> = (0..3)
        .map(|_| {
            let db = db.clone();
            std::thread::spawn(move || {
                let conn = db.connect();
                for _ in 0..30 {
                    conn.sql("UPDATE c SET n = n + 1").unwrap();
                }
                // The same inside explicit transactions (the read happens after the writer
                // lock is taken, even though BEGIN did not take it).
                for _ in 0..10 {
                    conn.sql("BEGIN; UPDATE c SET n = n + 1; COMMIT").unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(one_u64(&db.sql("SELECT n FROM c").unwrap()), 120);
}

#[test]
fn a_dropped_async_write_leaves_nothing_and_holds_no_lock() {
    let db = Database::open_in_memory_with(Options {
        lock_timeout: std::time::Duration::from_millis(500),
        ..Options::default()
    })
    .unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE t (v BIGINT)").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    rt.block_on(async {
        let mut fut =
            Box::pin(conn.sql_async("INSERT INTO t SELECT value FROM generate_series(1, 3000000)"));
        // Poll until the statement is under way (its transaction is open).
        let mut polls = 0;
        while !conn.in_transaction() {
            assert!(futures::poll!(fut.as_mut()).is_pending(), "the insert finished first");
            polls += 1;
            assert!(polls < 100_000, "the insert never started");
        }
        for _ in 0..10 {
            assert!(futures::poll!(fut.as_mut()).is_pending(), "the insert finished first");
        }
        // The caller gives up (a timeout, a cancelled request): the future is dropped.
    });
    assert!(!conn.in_transaction());
    assert_eq!(one_u64(&conn.sql("SELECT count(*) FROM t").unwrap()), 0);
    // No writer lock is left behind: another connection writes at once.
    db.connect().sql("INSERT INTO t VALUES (1)").unwrap();
    assert_eq!(one_u64(&conn.sql("SELECT count(*) FROM t").unwrap()), 1);
}

/// `read_json` of one file: the ranged fast scan (`BasaltNdjsonScan`) gives what
/// DataFusion's own JSON scan gives (fast paths off), on a file of several ranges holding
/// records the fast decoder takes and ones it leaves to arrow-json.
#[test]
fn read_json_fast_scan_agrees_with_the_listing_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.json");
    let mut text = String::new();
    let cities = ["Xian", "Nanjing", "Wuhan", "Qingdao"];
    for i in 0..40_000i64 {
        let city = cities[(i % 4) as usize];
        let line = match i % 97 {
            // Keys in another order, an unknown nested key, escapes, spacing, CRLF.
            0 => format!(
                "{{ \"city\" : \"{city}\\n\\u00e9\", \"extra\": {{\"a\": [1, null]}}, \"id\": {i} }}\r"
            ),
            // Missing and null values.
            1 => format!("{{\"id\":{i},\"score\":null}}"),
            // A surrogate pair the fast decoder leaves to arrow-json (in one stretch of the
            // file only, so the other slices take the fast decoder).
            2 if (20_000..20_400).contains(&i) => {
                format!("{{\"id\":{i},\"city\":\"\\ud83d\\ude00\",\"score\":1e2,\"ok\":true}}")
            }
            3 => String::new(),
            _ => format!(
                "{{\"id\":{i},\"city\":\"{city}\",\"score\":{}.{:02},\"ok\":{}}}",
                i % 100,
                i % 7,
                i % 3 == 0
            ),
        };
        text.push_str(&line);
        text.push('\n');
    }
    std::fs::write(&path, &text).unwrap();
    let db = Database::open_in_memory().unwrap();
    let on = db.connect();
    let off = db.connect();
    off.set_fast_paths(false).unwrap();
    let f = format!("read_json('{}')", path.display());
    let queries = [
        format!("SELECT * FROM {f}"),
        format!("SELECT COUNT(*) FROM {f}"),
        // Rounded: batch boundaries differ between the scans, so float sums add in another
        // order (the values themselves are compared exactly by `SELECT *`).
        format!("SELECT city, COUNT(*), ROUND(SUM(score), 6), MIN(id) FROM {f} GROUP BY city"),
        format!("SELECT id, ok FROM {f} WHERE score > 50.5 AND ok"),
        format!("SELECT score, id FROM {f} ORDER BY score DESC, id LIMIT 7"),
        format!("SELECT COUNT(*) FROM (SELECT id FROM {f} LIMIT 1234)"),
    ];
    for q in &queries {
        let (x, y) = (rows(&on.sql(q).unwrap()), rows(&off.sql(q).unwrap()));
        assert!(!x.is_empty(), "{q}");
        assert!(x == y, "rows differ for {q}: {x:?} {y:?}");
    }
    assert_eq!(one_u64(&on.sql(&queries[1]).unwrap()), 40_000 - 40_000 / 97 - 1);
    let explain =
        |c: &basalt::Connection, q: &str| rows(&c.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    assert!(
        explain(&on, &queries[1]).contains("BasaltNdjsonScan"),
        "{}",
        explain(&on, &queries[1])
    );
    assert!(!explain(&off, &queries[1]).contains("BasaltNdjsonScan"));
    // Both decoders ran: most slices fast, the one with the surrogates through arrow-json.
    let analyze = explain(&on, &format!("ANALYZE SELECT id, city FROM {f}"));
    let metric = |name: &str| -> u64 {
        let at = analyze.find(&format!("{name}=")).unwrap_or_else(|| panic!("{analyze}"));
        let digits: String =
            analyze[at + name.len() + 1..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    assert!(metric("fast_slices") >= 2, "{analyze}");
    assert!(metric("reference_slices") >= 1, "{analyze}");

    // A damaged line fails the statement either way; the fast scan's error names the file.
    std::fs::write(&path, format!("{text}{{\"id\": 1, \"city\": oops}}\n")).unwrap();
    let err = on.sql(&queries[1]).unwrap_err().to_string();
    assert!(err.contains("data.json"), "{err}");
    assert!(off.sql(&queries[1]).is_err());
}

/// `sum(x + c)` over narrow integers is computed as `sum(x) + c * count(x)` when an
/// aggregate lists several shifts (`rules/sum_shift.rs`): the answers, NULLs and column
/// names are those of the sums themselves.
#[test]
fn sums_of_shifted_narrow_integers_match_the_plain_sums() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE t (g INT, a SMALLINT, b INT, c TINYINT UNSIGNED)").unwrap();
    conn.sql(
        "INSERT INTO t SELECT value % 5, CASE WHEN value % 7 = 0 THEN NULL ELSE value % 3000 - 1500 END, \
         value * 7919 % 2000000000 - 1000000000, value % 256 FROM generate_series(1, 5000)",
    )
    .unwrap();
    // A group whose `a` is all NULL, and one value at the type's edge.
    conn.sql("INSERT INTO t VALUES (9, NULL, 2147483647, 255), (9, NULL, -2147483648, 0)").unwrap();
    let shifted = "SELECT g, sum(a), sum(a + 1), sum(a - 2), sum(3 - a), sum(2147483648 + a), \
                   sum(b + 1), sum(b - 2147483648), sum(c + 7), min(a), count(*) FROM t GROUP BY g";
    let plain = "SELECT g, sum(a * 1), sum((a + 1) * 1), sum((a - 2) * 1), sum((3 - a) * 1), \
                 sum((2147483648 + a) * 1), sum((b + 1) * 1), sum((b - 2147483648) * 1), \
                 sum((c + 7) * 1), min(a), count(*) FROM t GROUP BY g";
    let got = conn.sql(shifted).unwrap();
    assert_eq!(rows(&got), rows(&conn.sql(plain).unwrap()));
    assert!(
        rows(&got).iter().any(|r| r.starts_with("9|NULL|NULL|NULL|NULL|NULL|")),
        "{:?}",
        rows(&got)
    );
    let names: Vec<String> = got[0].schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names[2], "sum(t.a + Int64(1))", "{names:?}");
    assert_eq!(names[4], "sum(Int64(3) - t.a)", "{names:?}");
    // Without GROUP BY, and over no rows at all.
    let q = "SELECT sum(a + 1), sum(a + 2), sum(a) FROM t";
    let p = "SELECT sum((a + 1) * 1), sum((a + 2) * 1), sum(a * 1) FROM t";
    assert_eq!(rows(&conn.sql(q).unwrap()), rows(&conn.sql(p).unwrap()));
    let empty = conn.sql("SELECT sum(a + 1), sum(a + 2) FROM t WHERE g > 100").unwrap();
    assert_eq!(rows(&empty), vec!["NULL|NULL".to_string()]);
    // The rewrite shows in the plan when it pays (two shifts), not for a lone shift.
    let plan = rows(&conn.sql("EXPLAIN SELECT sum(a + 1), sum(a + 2) FROM t").unwrap()).join("\n");
    let aggregate = plan.lines().find(|l| l.contains("Aggregate:")).unwrap_or_default();
    assert!(aggregate.contains("count(") && !aggregate.contains("checked_add"), "{plan}");
    let plan = rows(&conn.sql("EXPLAIN SELECT sum(a + 1) FROM t").unwrap()).join("\n");
    assert!(!plan.contains("count("), "{plan}");
    // A 64-bit column keeps its per-row checked addition (and its overflow error).
    conn.sql("CREATE TABLE w (x BIGINT)").unwrap();
    conn.sql("INSERT INTO w VALUES (9223372036854775807)").unwrap();
    let err = conn.sql("SELECT sum(x + 1), sum(x + 2) FROM w").unwrap_err();
    assert!(err.to_string().contains("overflow"), "{err}");
}

/// Decimal `+ - *` run in Basalt's loops (`rules/decimal.rs`): the values, scales, NULLs
/// and names are DataFusion's, and an overflow is still an error.
#[test]
fn decimal_arithmetic_keeps_values_types_names_and_overflow_errors() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE d (a DECIMAL(15,2), b DECIMAL(12,4), c DECIMAL(38,0))").unwrap();
    conn.sql(
        "INSERT INTO d VALUES (10.50, 0.0600, 1), (NULL, 1, 99999999999999999999999999999999999999), \
         (-3.25, NULL, 5)",
    )
    .unwrap();
    let got =
        conn.sql("SELECT a * (1 - b), a + b, a - 1, b * 3, c + c FROM d WHERE c < 10").unwrap();
    assert_eq!(
        rows_in_order(&got),
        vec!["9.870000|10.5600|9.50|0.1800|2", "NULL|NULL|-4.25|NULL|10"],
        "{got:?}"
    );
    let schema = got[0].schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names[2], "d.a - Int64(1)");
    assert_eq!(schema.field(0).data_type(), &DataType::Decimal128(38, 6));
    let err = conn.sql("SELECT c * c FROM d").unwrap_err();
    assert!(err.to_string().to_lowercase().contains("overflow"), "{err}");
    let err = conn.sql("SELECT c + c FROM d").unwrap_err();
    assert!(err.to_string().to_lowercase().contains("overflow"), "{err}");
}

/// Inner joins written with the selective relation last run in order of estimated sizes
/// (the rule `join_order`), with DataFusion's answers and columns in the written order;
/// outer joins, cross joins and relations under them keep their place.
#[test]
fn inner_joins_run_in_estimated_order_with_the_written_answers() {
    let db = Database::open_in_memory().unwrap();
    let c = db.connect();
    for q in [
        "CREATE TABLE fact AS SELECT value AS id, value % 2000 AS a, value % 7 AS b, \
         value * 3 AS v FROM generate_series(1, 120000)",
        "CREATE TABLE d1 AS SELECT value AS k, value % 50 AS r, 'n' || value AS name \
         FROM generate_series(0, 1999)",
        "CREATE TABLE d2 AS SELECT value AS k, value % 10 AS g FROM generate_series(0, 49)",
        "CREATE TABLE d3 AS SELECT value AS k, CASE WHEN value = 3 THEN 'x' ELSE 'y' END AS flag \
         FROM generate_series(0, 9)",
    ] {
        c.sql(q).unwrap();
    }
    db.flush().unwrap();
    let (on, off) = (db.connect(), db.connect());
    off.set_fast_paths(false).unwrap();
    let chain = "fact.a = d1.k AND d1.r = d2.k AND d2.g = d3.k AND d3.flag = 'x'";
    let queries = [
        format!("SELECT d3.flag, count(*), sum(fact.v) FROM fact, d1, d2, d3 WHERE {chain} GROUP BY d3.flag"),
        format!("SELECT * FROM fact, d1, d2, d3 WHERE {chain} AND fact.v > d1.k * 10"),
        format!("SELECT d1.name, fact.id FROM fact, d1, d2, d3 WHERE {chain} AND fact.b + d2.k < 9"),
        "SELECT * FROM fact JOIN d1 ON fact.a = d1.k JOIN d2 ON d1.r = d2.k \
         JOIN d3 ON d2.g = d3.k WHERE d3.flag = 'x' AND fact.id < 50000"
            .to_string(),
        "SELECT count(*) FROM fact f1, fact f2, d1 WHERE f1.id = f2.id + 1 AND f1.a = d1.k \
         AND d1.name = 'n5'"
            .to_string(),
        // A cross join: the written order stays.
        "SELECT count(*), sum(d1.k + d3.k) FROM d2, d3, d1 WHERE d1.r = d2.k AND d1.k < 30".to_string(),
        // An outer join among the relations: it is one relation of the cluster.
        "SELECT count(*), sum(fact.v) FROM fact LEFT JOIN d1 ON fact.a = d1.k AND d1.r < 3, d2, d3 \
         WHERE fact.b = d2.k AND d2.g = d3.k AND d3.flag = 'x'"
            .to_string(),
        // A grouped subquery as a relation.
        "SELECT s.a, s.n, d1.name FROM (SELECT a, count(*) AS n FROM fact GROUP BY a) s, d1, d2, d3 \
         WHERE s.a = d1.k AND d1.r = d2.k AND d2.g = d3.k AND d3.flag = 'x'"
            .to_string(),
        format!("SELECT count(*) FROM fact, d1, d2, d3 WHERE {chain} AND fact.id IN \
                 (SELECT f.id FROM fact f, d1 x, d3 y WHERE f.a = x.k AND f.b = y.k AND y.flag = 'x')"),
    ];
    for q in &queries {
        let n = same(&on, &off, q).len();
        assert!(n > 0, "{q}");
    }
    // The selective `d3` is joined first (the logical plan lists the deepest join's inputs
    // first), where the written order joins it last.
    let logical = |conn: &basalt::Connection, q: &str| {
        let out = rows(&conn.sql(&format!("EXPLAIN {q}")).unwrap());
        out.into_iter().find(|r| r.starts_with("logical_plan")).unwrap()
    };
    let at = |p: &str, t: &str| p.find(&format!("TableScan: {t}")).unwrap_or_else(|| panic!("{p}"));
    for q in &queries[..4] {
        let (p, written) = (logical(&on, q), logical(&off, q));
        assert!(at(&p, "d3") < at(&p, "fact"), "{q}\n{p}");
        assert!(at(&written, "d3") > at(&written, "fact"), "{q}\n{written}");
    }
    // The cluster with a cross join keeps DataFusion's plan.
    assert_eq!(logical(&on, &queries[5]), logical(&off, &queries[5]));
}

/// Joins and aggregates a statement repeats (a CTE named twice, a join spelled again in a
/// subquery) run once, shared by their places; answers are those of separate copies, also
/// when one place builds a hash join the other probes, for prepared statements run again
/// with other parameters, and after the table changed.
#[test]
fn repeated_subplans_run_once_with_the_answers_of_separate_copies() {
    let db = Database::open_in_memory().unwrap();
    let c = db.connect();
    c.sql(
        "CREATE TABLE fact AS SELECT value AS id, value % 300 AS a, value % 7 AS b, \
         value * 3 AS v FROM generate_series(1, 60000)",
    )
    .unwrap();
    c.sql("CREATE TABLE d1 AS SELECT value AS k, value % 5 AS r, 'n' || value AS name FROM generate_series(0, 299)")
        .unwrap();
    let (on, off) = (db.connect(), db.connect());
    off.set_fast_paths(false).unwrap();
    let queries = [
        // A CTE in the FROM list and in a scalar subquery (TPC-H Q15's shape).
        "WITH t AS (SELECT a, sum(v) AS s FROM fact GROUP BY a) \
         SELECT d1.name, t.s FROM d1, t WHERE d1.k = t.a AND t.s = (SELECT max(s) FROM t)",
        // A join spelled again in HAVING, keeping other columns (Q11's shape).
        "SELECT fact.a, sum(v) FROM fact, d1 WHERE fact.a = d1.k AND d1.r = 3 GROUP BY fact.a \
         HAVING sum(v) > (SELECT sum(v) / 100 FROM fact, d1 WHERE fact.a = d1.k AND d1.r = 3)",
        // Both sides of one hash join.
        "WITH t AS (SELECT a, count(*) AS n FROM fact GROUP BY a) \
         SELECT count(*), sum(x.n + y.n) FROM t x JOIN t y ON x.a = y.a + 1",
        // Three places keeping different aggregates, with their own filters above.
        "WITH t AS (SELECT b, sum(v) AS s, count(*) AS n FROM fact GROUP BY b) \
         SELECT s FROM t WHERE s > 100 UNION ALL SELECT n FROM t WHERE n > 1 \
         UNION ALL SELECT max(s) FROM t",
        // Filters on the grouping column reach each copy's scan: the copies differ.
        "WITH t AS (SELECT b, sum(v) AS s, count(*) AS n FROM fact GROUP BY b) \
         SELECT s FROM t WHERE b = 1 UNION ALL SELECT n FROM t WHERE b = 2",
        // Different conditions: nothing in common to share.
        "SELECT (SELECT count(*) FROM fact JOIN d1 ON fact.a = d1.k WHERE d1.r = 1), \
         (SELECT count(*) FROM fact JOIN d1 ON fact.a = d1.k WHERE d1.r = 2)",
        // A volatile function: each place computes its own.
        "WITH t AS (SELECT a, sum(v * random()) AS s FROM fact GROUP BY a) \
         SELECT count(*) FROM t x JOIN t y ON x.a = y.a WHERE x.s >= 0 AND y.s >= 0",
    ];
    for q in &queries {
        assert!(!same(&on, &off, q).is_empty(), "{q}");
    }
    let explain = |q: &str| rows(&on.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    for q in &queries[..4] {
        let plan = explain(q);
        assert!(plan.contains("BasaltShared: places="), "{q}\n{plan}");
        assert!(!plan.contains("unshared"), "{q}\n{plan}");
    }
    for q in &queries[4..] {
        let plan = explain(q);
        assert!(!plan.contains("BasaltShared"), "{q}\n{plan}");
    }
    // One read of `fact` where separate copies read it twice.
    let fact_rows = |conn: &basalt::Connection, q: &str| {
        let plan = rows(&conn.sql(&format!("EXPLAIN ANALYZE {q}")).unwrap()).join("\n");
        let scans: Vec<&str> = plan.lines().filter(|l| l.contains("table=fact")).collect();
        metric_sum(&scans.join("\n"), "output_rows")
    };
    for q in &queries[..3] {
        assert_eq!(fact_rows(&on, q) * 2.0, fact_rows(&off, q), "{q}");
    }
    // Prepared: run again with other parameters, and after a write.
    let q = "WITH t AS (SELECT a, sum(v) AS s FROM fact WHERE b <> $1 GROUP BY a) \
             SELECT a, s FROM t WHERE s = (SELECT max(s) FROM t)";
    let (p_on, p_off) = (on.prepare(q).unwrap(), off.prepare(q).unwrap());
    for round in 0..3 {
        for b in [0i64, 3, 6] {
            let (x, y) =
                (p_on.execute(&[Value::Int(b)]).unwrap(), p_off.execute(&[Value::Int(b)]).unwrap());
            assert_eq!(rows(&x), rows(&y), "round {round}, b = {b}");
        }
        c.sql(&format!("INSERT INTO fact VALUES ({}, 17, 1, 1000000000)", 100000 + round)).unwrap();
    }
    assert!(!same(&on, &off, queries[0]).is_empty());
}

/// A large `INSERT … SELECT` hands storage whole row groups: its segments hold row groups
/// of the full size (a few segments, not one per bulk-insert size), within the memory
/// limit's share for pending rows; answers are the rows inserted.
#[test]
fn large_inserts_write_segments_of_whole_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let opts = basalt::Options { sql_memory_limit: Some(64 << 20), ..basalt::Options::default() };
    let db = Database::open_with(dir.path(), opts).unwrap();
    let c = db.connect();
    let segments = || {
        fn walk(p: &std::path::Path, n: &mut usize) {
            for e in std::fs::read_dir(p).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, n);
                } else if p.extension().is_some_and(|x| x == "bsg") {
                    *n += 1;
                }
            }
        }
        let mut n = 0;
        walk(dir.path(), &mut n);
        n
    };
    // Narrow rows (16 bytes): 300,000 rows fit one chunk, one segment (was one per 16,384).
    c.sql(
        "CREATE TABLE narrow AS SELECT value AS a, value * 3 AS b FROM generate_series(1, 300000)",
    )
    .unwrap();
    assert_eq!(segments(), 1);
    // ~120-byte rows: 25 MB, over the 8 MiB a 64 MiB limit leaves pending rows, so chunks
    // of whole 65,536-row groups: four segments.
    c.sql(
        "CREATE TABLE wide AS SELECT value AS k, concat(CAST(value AS TEXT), repeat('w', 110)) AS s \
         FROM generate_series(1, 200000)",
    )
    .unwrap();
    let wide = segments() - 1;
    assert!((2..=4).contains(&wide), "{wide} segments");
    for (q, want) in [
        ("SELECT count(*), sum(a), sum(b) FROM narrow", "300000|45000150000|135000450000"),
        ("SELECT count(*), sum(k), count(DISTINCT s) FROM wide", "200000|20000100000|200000"),
    ] {
        assert_eq!(rows(&c.sql(q).unwrap()), vec![want.to_string()], "{q}");
    }
}

/// Index lookups on a database just opened (no write has built the sets yet) and on a
/// table segments hold: the first lookup builds the sets from the rows, deletes and
/// updates after it are answered right, and a plan names the index.
#[test]
fn index_lookups_after_reopening_match_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let q = [
        "SELECT count(*), sum(v) FROM ix WHERE g = 17",
        "SELECT count(*), sum(v) FROM ix WHERE g BETWEEN 100 AND 102 AND h < 3",
        "SELECT count(*), sum(v) FROM ix WHERE g IN (5, 6, 9999)",
        "SELECT count(*), sum(v) FROM ix WHERE g = 40 AND h = 2",
    ];
    let expected: Vec<Vec<String>>;
    {
        let db = Database::open(&path).unwrap();
        let conn = db.connect();
        conn.sql(
            "CREATE TABLE ix AS SELECT value AS v, value % 1000 AS g, value % 7 AS h \
             FROM generate_series(1, 50000)",
        )
        .unwrap();
        expected = q.iter().map(|s| rows(&conn.sql(s).unwrap())).collect();
        conn.sql("CREATE INDEX ix_gh ON ix (g, h)").unwrap();
    }
    let db = Database::open(&path).unwrap();
    let conn = db.connect();
    let plan = rows(&conn.sql(&format!("EXPLAIN {}", q[0])).unwrap()).join("\n");
    assert!(plan.contains("index=ix_gh") && plan.contains("_id IN <50 ids>"), "{plan}");
    for (s, want) in q.iter().zip(&expected) {
        assert_eq!(&rows(&conn.sql(s).unwrap()), want, "{s}");
    }
    // Changes after the sets were built by reading: deletes leave them, moved keys are
    // found at their new values, new rows are found.
    conn.sql("DELETE FROM ix WHERE v % 2 = 0").unwrap();
    conn.sql("UPDATE ix SET g = 17 WHERE v = 3").unwrap();
    conn.sql("INSERT INTO ix VALUES (60000, 17, 1)").unwrap();
    // Without pushdown nothing reaches the scan: the answers of a plain scan.
    let off = db.connect();
    off.set_filter_pushdown(false).unwrap();
    for s in q {
        assert_eq!(rows(&conn.sql(s).unwrap()), rows(&off.sql(s).unwrap()), "{s}");
    }
    assert_eq!(
        rows(&conn.sql("SELECT count(*) FROM ix WHERE g = 17").unwrap()),
        vec!["52".to_string()]
    );
}

/// A hash join whose probe side has an index on the join key looks the build side's keys
/// up there: row groups holding none of the rows found are skipped (keys spread over the
/// table, so zone maps alone skip none of them) and the answers are a scan's.
#[test]
fn joins_look_build_keys_up_in_an_index() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql(
        "CREATE TABLE big AS SELECT value AS id, (value * 7919) % 200000 AS k, value % 13 AS v \
         FROM generate_series(1, 200000)",
    )
    .unwrap();
    conn.sql("CREATE INDEX big_k ON big (k)").unwrap();
    conn.sql("CREATE TABLE small (k BIGINT, tag TEXT)").unwrap();
    conn.sql(
        "INSERT INTO small VALUES (5, 'a'), (77777, 'b'), (123456, 'c'), (9, 'd'), (NULL, 'n')",
    )
    .unwrap();
    let q = "SELECT small.tag, big.id, big.v FROM small JOIN big ON big.k = small.k ORDER BY tag";
    let plan = rows(&conn.sql(&format!("EXPLAIN {q}")).unwrap()).join("\n");
    assert!(plan.contains("index_join=[big_k]"), "{plan}");
    let analyzed = rows(&conn.sql(&format!("EXPLAIN ANALYZE {q}")).unwrap()).join("\n");
    let probe = analyzed.lines().find(|l| l.contains("table=big")).unwrap_or_default();
    assert!(probe.contains("index_lookups=1"), "{analyzed}");
    assert!(!probe.contains("units_pruned_by_hints=0"), "{analyzed}");
    let got = rows(&conn.sql(q).unwrap());
    assert_eq!(got.len(), 4);
    let off = db.connect();
    off.set_filter_pushdown(false).unwrap();
    assert_eq!(got, rows(&off.sql(q).unwrap()));
    // After deletes and updates the index still finds exactly the live rows.
    conn.sql("DELETE FROM big WHERE k = 77777").unwrap();
    conn.sql("UPDATE big SET k = 9 WHERE id = 3").unwrap();
    let got = rows(&conn.sql(q).unwrap());
    assert_eq!(got.len(), 4);
    assert_eq!(got, rows(&off.sql(q).unwrap()));
}

/// A prepared `INSERT … ON CONFLICT … DO UPDATE` with placeholders in its rows, SET list
/// and WHERE: each run binds its values, inserting free keys and updating taken ones;
/// a prepared query with a subquery DataFusion cannot plan runs as a nested loop.
#[test]
fn prepared_upserts_and_nested_loop_subqueries() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE kv (k TEXT PRIMARY KEY, v BIGINT, seen INT DEFAULT 1)").unwrap();
    let up = conn
        .prepare(
            "INSERT INTO kv AS t (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE \
             SET v = t.v + excluded.v, seen = t.seen + 1 WHERE t.v < $3",
        )
        .unwrap();
    let run = |k: &str, v: i64, cap: i64| {
        one_u64(&up.execute(&[Value::Str(k.into()), Value::Int(v), Value::Int(cap)]).unwrap())
    };
    assert_eq!(run("a", 5, 100), 1);
    assert_eq!(run("a", 7, 100), 1);
    assert_eq!(run("b", 1, 100), 1);
    // The WHERE keeps `a` (12 is not below 10) as it is: nothing changes.
    assert_eq!(run("a", 1, 10), 0);
    assert_eq!(
        rows(&conn.sql("SELECT k, v, seen FROM kv ORDER BY k").unwrap()),
        ["a|12|2", "b|1|1"]
    );
    // Inside a transaction, rolled back.
    conn.sql("BEGIN").unwrap();
    assert_eq!(run("b", 10, 100), 1);
    conn.sql("ROLLBACK").unwrap();
    assert_eq!(rows(&conn.sql("SELECT v FROM kv WHERE k = 'b'").unwrap()), ["1"]);
    let q = conn
        .prepare(
            "SELECT k, (SELECT v FROM kv AS o WHERE o.k <> kv.k ORDER BY v DESC LIMIT 1) \
             FROM kv WHERE v >= $1 ORDER BY k",
        )
        .unwrap();
    assert_eq!(rows(&q.execute(&[Value::Int(0)]).unwrap()), ["a|1", "b|12"]);
    assert_eq!(rows(&q.execute(&[Value::Int(5)]).unwrap()), ["a|1"]);
    let plain = conn
        .prepare("SELECT k, EXISTS (SELECT 1 FROM kv AS o WHERE o.v > kv.v) FROM kv ORDER BY k")
        .unwrap();
    assert_eq!(rows(&plain.execute(&[]).unwrap()), ["a|false", "b|true"]);
    assert_eq!(rows(&plain.execute(&[]).unwrap()), ["a|false", "b|true"]);
}
