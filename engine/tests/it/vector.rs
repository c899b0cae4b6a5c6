//! Vector search through the public API: `Table::topk` / `topk_where` / `batch_topk` against
//! a brute-force reference across flushes, reopen, deletes, updates and transactions, and
//! bad input. (The storage crate's tests cover the scan itself in depth.)

use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{
    CmpOp, Database, Error, Metric, Precision, Predicate, Row, StorageError, vector_type,
};

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("tag", DataType::Utf8, false),
        Field::new("emb", vector_type(4), true),
    ])
}

fn vector(i: u64) -> Vec<f32> {
    (0..4).map(|j| ((i * 7 + j * 3) % 11) as f32 - 5.0).collect()
}

/// The reference: (distance, id) of every candidate under `metric`, sorted, first `k`.
fn reference(
    rows: &[(u64, String, Vec<f32>)],
    q: &[f32],
    k: usize,
    metric: Metric,
    tag: Option<&str>,
) -> Vec<(u64, f32)> {
    let mut v: Vec<(f64, u64)> = rows
        .iter()
        .filter(|(_, t, _)| tag.is_none_or(|want| t == want))
        .filter_map(|(id, _, e)| basalt_reference(metric, e, q).map(|d| (d + 0.0, *id)))
        .collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    v.into_iter().take(k).map(|(d, id)| (id, d as f32)).collect()
}

fn basalt_reference(metric: Metric, x: &[f32], q: &[f32]) -> Option<f64> {
    let pairs = x.iter().zip(q).map(|(a, b)| (f64::from(*a), f64::from(*b)));
    match metric {
        Metric::L2Squared => Some(pairs.map(|(a, b)| (a - b) * (a - b)).sum()),
        Metric::L2 => Some(pairs.map(|(a, b)| (a - b) * (a - b)).sum::<f64>().sqrt()),
        Metric::Dot => Some(-pairs.map(|(a, b)| a * b).sum::<f64>()),
        Metric::Cosine => {
            let (xy, xx, qq) = pairs
                .fold((0.0, 0.0, 0.0), |(s, xx, qq), (a, b)| (s + a * b, xx + a * a, qq + b * b));
            (xx > 0.0).then(|| 1.0 - xy / (xx.sqrt() * qq.sqrt()))
        }
    }
}

fn check(t: &basalt::Table, rows: &[(u64, String, Vec<f32>)]) {
    let queries = [vec![1.0f32, -2.0, 0.5, 3.0], vec![-4.0, 0.0, 2.0, 1.0]];
    let refs: Vec<&[f32]> = queries.iter().map(|q| q.as_slice()).collect();
    let red = Predicate::cmp("tag", CmpOp::Eq, "red");
    for metric in [Metric::L2, Metric::L2Squared, Metric::Cosine, Metric::Dot] {
        for k in [1, 5, 1000] {
            let batch = t.batch_topk("emb", &refs, k, metric).unwrap();
            let batch_red = t.batch_topk_where("emb", &refs, k, metric, &red).unwrap();
            for (qi, q) in queries.iter().enumerate() {
                for (got, tag) in [
                    (t.topk("emb", q, k, metric).unwrap(), None),
                    (t.topk_where("emb", q, k, metric, &red).unwrap(), Some("red")),
                ] {
                    let want = reference(rows, q, k, metric, tag);
                    assert_eq!(got.len(), want.len(), "{metric} k {k} {tag:?}");
                    for (n, (id, d)) in got.iter().zip(&want) {
                        assert!((n.distance - d).abs() < 1e-4, "{metric}: {n:?} vs {id} {d}");
                        if metric != Metric::Cosine {
                            assert_eq!(n.id, *id, "{metric} k {k} {tag:?}");
                        }
                    }
                    let from_batch = if tag.is_some() { &batch_red[qi] } else { &batch[qi] };
                    assert_eq!(&got, from_batch, "batch vs single, {metric}");
                }
            }
        }
    }
}

#[test]
fn top_k_through_the_api_across_flush_reopen_deletes_updates_and_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    let mut rows: Vec<(u64, String, Vec<f32>)> = Vec::new();
    {
        let db = Database::open(&path).unwrap();
        let t = db.create_table("docs", &schema()).unwrap();
        for i in 0..300u64 {
            let tag = if i % 3 == 0 { "red" } else { "blue" };
            let id = t.insert_row(Row::new().set("tag", tag).set("emb", vector(i))).unwrap();
            rows.push((id, tag.to_string(), vector(i)));
            if i == 200 {
                db.flush().unwrap(); // the first 201 rows go to a segment, the rest stay in memory
            }
        }
        // A row without a vector is never returned.
        t.insert_row(Row::new().set("tag", "red")).unwrap();
        for id in [3u64, 150, 250] {
            assert!(t.delete(id).unwrap());
            rows.retain(|r| r.0 != id);
        }
        t.update(10, Row::new().set("emb", vec![9.0f32, 9.0, 9.0, 9.0])).unwrap();
        rows.iter_mut().filter(|r| r.0 == 10).for_each(|r| r.2 = vec![9.0; 4]);
        check(&t, &rows);
        db.close().unwrap();
    }
    let db = Database::open(&path).unwrap();
    let t = db.table("docs").unwrap();
    check(&t, &rows);
    // Inside a transaction, its own uncommitted rows are candidates; a rollback removes them.
    let conn = db.connect();
    conn.begin().unwrap();
    let tt = conn.table("docs").unwrap();
    let id = tt
        .insert_row(Row::new().set("tag", "red").set("emb", vec![1.0f32, -2.0, 0.5, 3.0]))
        .unwrap();
    let near = tt.topk("emb", &[1.0, -2.0, 0.5, 3.0], 1, Metric::L2).unwrap();
    assert_eq!((near[0].id, near[0].distance), (id, 0.0));
    assert_ne!(
        t.topk("emb", &[1.0, -2.0, 0.5, 3.0], 1, Metric::L2).unwrap()[0].id,
        id,
        "not visible outside"
    );
    conn.rollback().unwrap();
    check(&t, &rows);
}

#[test]
fn bad_vector_queries_are_typed_errors() {
    let db = Database::open_in_memory().unwrap();
    let t = db.create_table("docs", &schema()).unwrap();
    t.insert_row(Row::new().set("tag", "a").set("emb", vec![1.0f32, 0.0, 0.0, 0.0])).unwrap();
    let e = t.topk("emb", &[1.0, 2.0], 3, Metric::L2).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::VectorQuery { .. })), "{e}");
    assert!(e.to_string().contains("dimension 4, got 2"), "{e}");
    let e = t.topk("emb", &[f32::INFINITY, 0.0, 0.0, 0.0], 3, Metric::Dot).unwrap_err();
    assert!(e.to_string().contains("not a finite number"), "{e}");
    let e = t.topk("emb", &[0.0; 4], 3, Metric::Cosine).unwrap_err();
    assert!(e.to_string().contains("zero vector"), "{e}");
    let e = t.topk("tag", &[0.0; 4], 3, Metric::L2).unwrap_err();
    assert!(e.to_string().contains("not a VECTOR column"), "{e}");
    assert!(t.topk("emb", &[1.0; 4], 0, Metric::L2).unwrap().is_empty());
    assert_eq!(t.topk("emb", &[1.0; 4], 50, Metric::L2).unwrap().len(), 1);
    assert!("manhattan".parse::<Metric>().is_err());
}

/// Each row as `a|b|…`, in the order returned.
pub(crate) fn lines(batches: &[basalt::arrow::array::RecordBatch]) -> Vec<String> {
    let opts = arrow::util::display::FormatOptions::default().with_null("NULL");
    let mut out = Vec::new();
    for b in batches {
        let fmts: Vec<_> = b
            .columns()
            .iter()
            .map(|c| arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            out.push(fmts.iter().map(|f| f.value(r).to_string()).collect::<Vec<_>>().join("|"));
        }
    }
    out
}

fn literal(v: &[f32]) -> String {
    format!("[{}]", v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(", "))
}

/// A table `docs (tag, emb VECTOR(4))` of pseudo-random vectors (no exact distance ties),
/// some NULL, one zero vector, in two segments and the memtable, with deletes.
fn sql_table(db: &Database) -> basalt::Table {
    let t = db.create_table("docs", &schema()).unwrap();
    let mut s = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        ((s >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
    };
    for i in 0..400u64 {
        let tag = if i % 3 == 0 { "red" } else { "blue" };
        let mut row = Row::new().set("tag", tag);
        if i % 17 != 5 {
            let v: Vec<f32> = if i == 42 { vec![0.0; 4] } else { (0..4).map(|_| next()).collect() };
            row = row.set("emb", v);
        }
        t.insert_row(row).unwrap();
        if i == 150 || i == 300 {
            db.flush().unwrap();
        }
    }
    t.delete_many(&[2, 160, 390]).unwrap();
    t
}

#[test]
fn sql_distance_functions_vector_topk_and_the_top_k_rule_agree_with_plain_datafusion() {
    let db = Database::open_in_memory().unwrap();
    let t = sql_table(&db);
    let on = db.connect();
    let off = db.connect();
    off.set_fast_paths(false).unwrap();
    let q = [0.5f32, -1.25, 1.0, 0.25];
    let lit = literal(&q);

    // l2_distance / l2sq_distance compute what array_distance computes (f64, NULL rules).
    let cmp = on
        .sql(&format!(
            "SELECT count(*) FROM docs WHERE (l2_distance(emb, {lit}) IS DISTINCT FROM array_distance(emb, {lit})) \
             OR (abs(l2sq_distance(emb, {lit}) - power(array_distance(emb, {lit}), 2)) > 1e-9)"
        ))
        .unwrap();
    assert_eq!(lines(&cmp), vec!["0"]);
    let nulls = on
        .sql(&format!("SELECT count(*) FROM docs WHERE l2_distance(emb, {lit}) IS NULL"))
        .unwrap();
    assert_eq!(lines(&nulls), vec![(400 / 17 + 1).to_string()], "NULL vectors give NULL");
    let scalar = on
        .sql("SELECT l2_distance([3.0, 4.0], [0.0, 0.0]), l2sq_distance([1, 2], [1, 4])")
        .unwrap();
    assert_eq!(lines(&scalar), vec!["5.0|4.0"]);
    let e = on.sql("SELECT l2_distance(emb, [1.0, 2.0]) FROM docs").unwrap_err();
    assert!(e.to_string().contains("different dimensions"), "{e}");
    let e = on.sql("SELECT l2_distance('a', [1.0])").unwrap_err();
    assert!(e.to_string().contains("takes two vectors"), "{e}");

    // vector_topk returns what Table::topk returns.
    for (name, metric) in [
        ("l2", Metric::L2),
        ("l2sq", Metric::L2Squared),
        ("cosine", Metric::Cosine),
        ("dot", Metric::Dot),
    ] {
        let got = on
            .sql(&format!(
                "SELECT _id, distance FROM vector_topk('docs', 'emb', {lit}, 7, '{name}')"
            ))
            .unwrap();
        let want: Vec<String> = t
            .topk("emb", &q, 7, metric)
            .unwrap()
            .iter()
            .map(|n| format!("{}|{:?}", n.id, f64::from(n.distance)))
            .collect();
        assert_eq!(lines(&got), want, "{name}");
    }
    let joined = on
        .sql(&format!("SELECT d.tag FROM vector_topk('docs', 'emb', {lit}, 3) v JOIN docs d ON d._id = v._id ORDER BY v.distance"))
        .unwrap();
    assert_eq!(lines(&joined).len(), 3);
    for bad in [
        format!("vector_topk('docs', 'emb', {lit})"),
        format!("vector_topk('nope', 'emb', {lit}, 3)"),
        format!("vector_topk('docs', 'tag', {lit}, 3)"),
        format!("vector_topk('docs', 'emb', {lit}, -1)"),
        format!("vector_topk('docs', 'emb', {lit}, 3, 'manhattan')"),
        "vector_topk('docs', 'emb', [1.0, 2.0], 3)".to_string(),
        "vector_topk('docs', 'emb', [0.0, 0.0, 0.0, 0.0], 3, 'cosine')".to_string(),
    ] {
        assert!(on.sql(&format!("SELECT * FROM {bad}")).is_err(), "{bad}");
    }

    // ORDER BY <distance> LIMIT k: the rule's answer is plain DataFusion's, and EXPLAIN shows it.
    let queries = [
        format!("SELECT _id, array_distance(emb, {lit}) AS d FROM docs ORDER BY d LIMIT 10"),
        format!(
            "SELECT _id, tag FROM docs WHERE tag = 'red' ORDER BY l2_distance(emb, {lit}) LIMIT 5"
        ),
        format!(
            "SELECT _id, l2sq_distance(emb, {lit}) AS d FROM docs ORDER BY d ASC LIMIT 4 OFFSET 3"
        ),
        format!("SELECT _id, cosine_distance(emb, {lit}) AS d FROM docs ORDER BY d LIMIT 8"),
        format!(
            "SELECT _id FROM docs WHERE _id > 100 ORDER BY cosine_distance(emb, {lit}) LIMIT 8"
        ),
        // Ranked rows fewer than the LIMIT: NULL-distance rows fill it (the scan runs instead).
        format!(
            "SELECT _id, array_distance(emb, {lit}) AS d FROM docs WHERE _id > 380 ORDER BY d LIMIT 30"
        ),
        // NULLs first: the scan runs instead.
        format!(
            "SELECT _id, array_distance(emb, {lit}) AS d FROM docs ORDER BY d NULLS FIRST LIMIT 5"
        ),
        // inner_product DESC puts NULLs first by default: the scan runs instead.
        format!("SELECT _id, inner_product(emb, {lit}) AS s FROM docs ORDER BY s DESC LIMIT 6"),
        format!(
            "SELECT _id, inner_product(emb, {lit}) AS s FROM docs WHERE emb IS NOT NULL ORDER BY s DESC NULLS LAST LIMIT 6"
        ),
    ];
    // Rows whose sort key is NULL tie, and either engine may return any of them.
    let ties = |v: Vec<String>| -> Vec<String> {
        v.into_iter()
            .map(|l| if l.ends_with("|NULL") { "<a NULL key>".into() } else { l })
            .collect()
    };
    for sql in &queries {
        let a = ties(lines(&on.sql(sql).unwrap()));
        let b = ties(lines(&off.sql(sql).unwrap()));
        assert_eq!(a, b, "{sql}");
        assert!(!a.is_empty(), "{sql}");
        let plan = lines(&on.sql(&format!("EXPLAIN {sql}")).unwrap()).join("\n");
        assert!(plan.contains("BasaltVectorTopK"), "{sql}\n{plan}");
        let plan = lines(&off.sql(&format!("EXPLAIN {sql}")).unwrap()).join("\n");
        assert!(!plan.contains("BasaltVectorTopK"), "{sql}\n{plan}");
    }
    // The search answers when it can, and says so; otherwise the scan runs.
    let analyze = |sql: &str| lines(&on.sql(&format!("EXPLAIN ANALYZE {sql}")).unwrap()).join("\n");
    let plan = analyze(&queries[0]);
    assert!(plan.contains("rows_ranked=28") && plan.contains("scan_fallbacks=0"), "{plan}");
    let plan = analyze(&queries[6]);
    assert!(plan.contains("scan_fallbacks=1"), "{plan}");
    let plan = analyze(&queries[8]);
    assert!(plan.contains("scan_fallbacks=0"), "{plan}");

    // Shapes the rule leaves alone: the farthest rows, two sort keys, a computed filter.
    for sql in [
        format!("SELECT _id, array_distance(emb, {lit}) AS d FROM docs ORDER BY d DESC LIMIT 3"),
        format!("SELECT _id, array_distance(emb, {lit}) AS d FROM docs ORDER BY d, _id LIMIT 3"),
        format!(
            "SELECT _id, array_distance(emb, {lit}) AS d FROM docs WHERE length(tag) > 3 \
             ORDER BY d LIMIT 3"
        ),
    ] {
        let (a, b) = (ties(lines(&on.sql(&sql).unwrap())), ties(lines(&off.sql(&sql).unwrap())));
        assert_eq!(a, b, "{sql}");
        let plan = lines(&on.sql(&format!("EXPLAIN {sql}")).unwrap()).join("\n");
        assert!(!plan.contains("BasaltVectorTopK"), "{sql}\n{plan}");
    }
}

#[test]
fn quantised_searches_keep_exact_distances_and_find_the_exact_rows_with_enough_candidates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.db");
    let db = Database::open(&path).unwrap();
    let t = sql_table(&db);
    db.flush().unwrap();
    let qs = [vec![0.5f32, -1.25, 1.0, 0.25], vec![-1.0, 2.0, 0.0, 1.5]];
    let refs: Vec<&[f32]> = qs.iter().map(|q| q.as_slice()).collect();
    let red = Predicate::cmp("tag", CmpOp::Eq, "red");
    for metric in [Metric::L2, Metric::Cosine, Metric::Dot] {
        for filter in [None, Some(&red)] {
            let exact =
                t.batch_topk_with("emb", &refs, 10, metric, filter, Precision::Exact).unwrap();
            for precision in
                [Precision::Int8 { oversample: 100 }, Precision::Float16 { oversample: 100 }]
            {
                let got = t.batch_topk_with("emb", &refs, 10, metric, filter, precision).unwrap();
                assert_eq!(got, exact, "{metric} {precision:?}");
            }
            for precision in
                [Precision::Int8 { oversample: 2 }, Precision::Float16 { oversample: 1 }]
            {
                let got = t.batch_topk_with("emb", &refs, 10, metric, filter, precision).unwrap();
                for (g, e) in got.iter().zip(&exact) {
                    assert_eq!(g.len(), e.len());
                    // Every distance is exact: each row found is in the exact answer or no
                    // closer than its last row.
                    let last = e.last().unwrap().distance;
                    for n in g {
                        assert!(
                            e.contains(n) || n.distance >= last,
                            "{metric} {precision:?}: {n:?}"
                        );
                    }
                }
            }
        }
    }
    db.close().unwrap();
    // After reopening, the copies are built again from the files.
    let db = Database::open(&path).unwrap();
    let t = db.table("docs").unwrap();
    let a = t
        .batch_topk_with("emb", &refs, 5, Metric::L2, None, Precision::Int8 { oversample: 100 })
        .unwrap();
    assert_eq!(a, t.batch_topk("emb", &refs, 5, Metric::L2).unwrap());
}

/// `VECTOR(D, FLOAT16)` and `VECTOR(D, INT8)` columns: values rounded on insert (through
/// SQL and the API, in the memtable and in segments, across a reopen), searched exactly on
/// those values by the API, `vector_topk` and the top-k rule, and refused when a form
/// cannot hold a component.
#[test]
fn stored_forms_round_on_insert_and_search_their_values() {
    use basalt::{StoredForm, round_vector};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("forms.db");
    let input = |i: u64| -> Vec<f32> {
        // Distinct rows (no distance ties), spread over a few units.
        (0..4).map(|j| ((i * (37 + 2 * j) + j * 11) % 1009) as f32 / 73.0 - 6.0).collect()
    };
    let rounded = |form: StoredForm, v: &[f32]| {
        let mut r = v.to_vec();
        round_vector(form, &mut r).unwrap();
        r
    };
    {
        let db = Database::open(&path).unwrap();
        let c = db.connect();
        c.sql(
            "CREATE TABLE sv (tag TEXT, e32 VECTOR(4), e16 VECTOR(4, FLOAT16), e8 VECTOR(4, int8))",
        )
        .unwrap();
        for i in 0..120u64 {
            let v = literal(&input(i));
            c.sql(&format!("INSERT INTO sv VALUES ('t{}', {v}, {v}, {v})", i % 3)).unwrap();
            if i == 70 {
                db.flush().unwrap();
            }
        }
        let t = db.table("sv").unwrap();
        t.insert_row(
            Row::new()
                .set("tag", "api")
                .set("e32", input(500))
                .set("e16", input(500))
                .set("e8", input(500)),
        )
        .unwrap();
        // A component a form cannot hold: a clear error, nothing written.
        let e = c.sql("INSERT INTO sv VALUES ('x', NULL, [70000.0, 1, 1, 1], NULL)").unwrap_err();
        assert!(e.to_string().contains("FLOAT16"), "{e}");
        let e = t
            .insert_row(Row::new().set("tag", "x").set("e8", vec![1.0, f32::NAN, 0.0, 0.0]))
            .unwrap_err();
        assert!(e.to_string().contains("'e8'") && e.to_string().contains("NaN"), "{e}");
        let e = c.sql("CREATE TABLE bad (e VECTOR(4, INT4))").unwrap_err();
        assert!(e.to_string().contains("FLOAT16 or INT8"), "{e}");
        assert_eq!(lines(&c.sql("SELECT count(*) FROM sv").unwrap()), vec!["121"]);
    }
    let db = Database::open(&path).unwrap();
    let on = db.connect();
    let off = db.connect();
    off.set_fast_paths(false).unwrap();
    on.sql("INSERT INTO sv VALUES ('late', [0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4], [0.1, 0.2, 0.3, 0.4])")
        .unwrap();
    // Reads return the rounded values (the float32 column keeps the input).
    let got =
        lines(&on.sql("SELECT e32, e16, e8 FROM sv WHERE tag <> 'late' ORDER BY _id").unwrap());
    assert_eq!(got.len(), 121);
    // Arrow prints floats its own way: compare the parsed values.
    let parse = |cell: &str| -> Vec<f32> {
        cell.trim_matches(|c| c == '[' || c == ']')
            .split(", ")
            .map(|x| x.parse().unwrap())
            .collect()
    };
    for (i, line) in got.iter().enumerate() {
        let v = if i == 120 { input(500) } else { input(i as u64) };
        let cells: Vec<Vec<f32>> = line.split('|').map(parse).collect();
        let want = vec![v.clone(), rounded(StoredForm::Float16, &v), rounded(StoredForm::Int8, &v)];
        assert_eq!(cells, want, "row {i}");
    }
    let late = lines(&on.sql("SELECT e8 FROM sv WHERE tag = 'late'").unwrap());
    assert_eq!(parse(&late[0]), rounded(StoredForm::Int8, &[0.1, 0.2, 0.3, 0.4]));
    // A column added later keeps its form; updates round too.
    on.sql("ALTER TABLE sv ADD COLUMN extra VECTOR(4, FLOAT16)").unwrap();
    on.sql("UPDATE sv SET extra = [0.1, 0.2, 0.3, 0.4], e8 = [1.001, 2, 3, 4] WHERE tag = 'late'")
        .unwrap();
    let late = lines(&on.sql("SELECT extra, e8 FROM sv WHERE tag = 'late'").unwrap());
    let cells: Vec<Vec<f32>> = late[0].split('|').map(parse).collect();
    assert_eq!(cells[0], rounded(StoredForm::Float16, &[0.1, 0.2, 0.3, 0.4]));
    assert_eq!(cells[1], rounded(StoredForm::Int8, &[1.001, 2.0, 3.0, 4.0]));
    assert_ne!(cells[1][0], 1.001);
    on.sql("ALTER TABLE sv DROP COLUMN extra").unwrap();
    // Searches rank the stored values: the API, vector_topk and the rule agree with
    // DataFusion's own sort over the same column.
    let t = db.table("sv").unwrap();
    let q = [0.5f32, -1.0, 2.0, 0.25];
    let lit = literal(&q);
    for col in ["e16", "e8"] {
        let api: Vec<String> = t
            .topk(col, &q, 6, Metric::L2)
            .unwrap()
            .iter()
            .map(|n| format!("{}|{:?}", n.id, f64::from(n.distance)))
            .collect();
        let tf = lines(
            &on.sql(&format!("SELECT _id, distance FROM vector_topk('sv', '{col}', {lit}, 6)"))
                .unwrap(),
        );
        assert_eq!(tf, api, "{col}");
        for sql in [
            format!("SELECT _id, array_distance({col}, {lit}) AS d FROM sv ORDER BY d LIMIT 6"),
            format!(
                "SELECT _id FROM sv WHERE tag = 't1' ORDER BY cosine_distance({col}, {lit}) LIMIT 5"
            ),
            format!(
                "SELECT _id, inner_product({col}, {lit}) AS s FROM sv WHERE {col} IS NOT NULL ORDER BY s DESC NULLS LAST LIMIT 4"
            ),
        ] {
            let a = lines(&on.sql(&sql).unwrap());
            assert_eq!(a, lines(&off.sql(&sql).unwrap()), "{sql}");
            let plan = lines(&on.sql(&format!("EXPLAIN {sql}")).unwrap()).join("\n");
            assert!(plan.contains("BasaltVectorTopK"), "{sql}\n{plan}");
        }
        let ids: Vec<String> =
            api.iter().map(|l| l.split('|').next().unwrap().to_string()).collect();
        let sorted = lines(
            &off.sql(&format!(
                "SELECT _id FROM sv ORDER BY array_distance({col}, {lit}), _id LIMIT 6"
            ))
            .unwrap(),
        );
        assert_eq!(ids, sorted, "{col}");
        // The int8 scan with rescoring returns exact distances of the stored values.
        let p = Precision::Int8 { oversample: 100 };
        let quant = t.batch_topk_with(col, &[&q], 6, Metric::L2, None, p).unwrap();
        let exact = t.topk(col, &q, 6, Metric::L2).unwrap();
        assert_eq!(quant[0], exact, "{col}");
    }
}
