//! Vector search through the public API: `Table::topk` / `topk_where` / `batch_topk` against
//! a brute-force reference across flushes, reopen, deletes, updates and transactions, and
//! bad input. (The storage crate's tests cover the scan itself in depth.)

use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{CmpOp, Database, Error, Metric, Predicate, Row, StorageError, vector_type};

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
        .filter_map(|(id, _, e)| basalt_reference(metric, e, q).map(|d| (d, *id)))
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
