//! The vector module (`benches/README.md`, *Metrics*): 1M × 128 float32 vectors uniform in [0, 1), k = 10;
//! top-k by L2, cosine and dot, one query and a batch of 10. Basalt runs `Table::topk` /
//! `Table::batch_topk`; DuckDB runs `ORDER BY array_distance(...) LIMIT 10` per query;
//! SQLite needs the sqlite-vector extension (not bundled) and reports N/A. The top-10 rows
//! of the first query must agree across engines, and the run measures the machine's memory
//! read bandwidth over the same number of bytes to put Basalt's scan speed in proportion.

use std::collections::BTreeMap;
use std::path::Path;

use crate::engines::{Kind, Res};
use crate::metrics::Group;
use crate::report::{Cell, Line};

/// Dimension.
pub const DIM: usize = 128;

/// The three metrics: name, DuckDB distance function.
pub const METRICS: [(&str, &str); 3] = [
    ("L2", "array_distance"),
    ("cosine", "array_cosine_distance"),
    ("dot", "array_negative_inner_product"),
];

/// The quantised precisions timed (L2, one query): label, precision.
const QUANTISED: [(&str, basalt::Precision); 2] = [
    ("int8", basalt::Precision::Int8 { oversample: 4 }),
    ("f16", basalt::Precision::Float16 { oversample: 2 }),
];

/// The stored forms timed (L2, one query): label, form, precision of the search.
const STORED: [(&str, basalt::StoredForm, basalt::Precision); 3] = [
    ("stored-f16", basalt::StoredForm::Float16, basalt::Precision::Exact),
    ("stored-int8", basalt::StoredForm::Int8, basalt::Precision::Exact),
    ("stored-int8-scan", basalt::StoredForm::Int8, basalt::Precision::Int8 { oversample: 4 }),
];

/// The share of `exact`'s neighbours that `got` found too.
fn recall(got: &[Vec<basalt::Neighbor>], exact: &[Vec<basalt::Neighbor>]) -> f64 {
    let (mut hit, mut total) = (0usize, 0usize);
    for (g, e) in got.iter().zip(exact) {
        total += e.len();
        hit += g.iter().filter(|n| e.iter().any(|x| x.id == n.id)).count();
    }
    hit as f64 / total.max(1) as f64
}

/// Runs `run` `warmup` times untimed, then `iterations` (at least once) timed: the median
/// seconds and the last result.
pub fn timed<T>(
    warmup: usize,
    iterations: usize,
    mut run: impl FnMut() -> Res<T>,
) -> Res<(f64, T)> {
    for _ in 0..warmup {
        run()?;
    }
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..iterations.max(1) {
        let s = std::time::Instant::now();
        last = Some(run()?);
        times.push(s.elapsed().as_secs_f64());
    }
    let last = last.ok_or("no timed iteration")?;
    Ok((crate::run::median(times), last))
}

/// Uniform [0, 1) floats from a seeded generator.
pub fn vectors(rows: usize, seed: u64) -> Vec<f32> {
    let mut rng = basalt_benches::Rng::new(seed);
    (0..rows * DIM).map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32).collect()
}

#[cfg_attr(not(feature = "duckdb"), allow(dead_code))]
/// A vector as an SQL array literal.
pub fn literal(v: &[f32]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x}")).collect();
    format!("[{}]::FLOAT[{DIM}]", parts.join(", "))
}

/// What one engine measured: seconds per metric id, and the ids (0-based row numbers) of
/// the top-10 of query 0 per metric name, for the cross-engine check.
#[derive(Debug, Default)]
pub struct Figures {
    /// Metric id → median seconds.
    pub secs: BTreeMap<String, f64>,
    /// Metric name → top-10 row numbers of query 0, closest first.
    pub top: BTreeMap<String, Vec<u64>>,
}

/// Runs §3 and returns its report lines and a Markdown note.
pub fn run(
    rows: usize,
    engines: &[Kind],
    warmup: usize,
    iterations: usize,
    work: &Path,
    failures: &mut Vec<String>,
) -> Res<(Vec<Line>, String)> {
    let mut lines = Vec::new();
    let data = vectors(rows, 42);
    let queries = vectors(11, 7);
    let mut figures: BTreeMap<Kind, Figures> = BTreeMap::new();
    let mut note = String::new();
    if engines.contains(&Kind::Basalt) {
        match basalt_figures(rows, &data, &queries, warmup, iterations, work) {
            Ok((f, n)) => {
                figures.insert(Kind::Basalt, f);
                note = n;
            }
            Err(e) => failures.push(format!("VEC on basalt: {e}")),
        }
    }
    match duck_figures(rows, &data, &queries, engines, warmup, iterations) {
        Ok(Some(f)) => {
            figures.insert(Kind::Duckdb, f);
        }
        Ok(None) => {}
        Err(e) => failures.push(format!("VEC on duckdb: {e}")),
    }
    drop(data);
    let bandwidth = read_bandwidth(rows * DIM, iterations);
    for (name, _) in METRICS {
        // Agreement: every engine that ran returns the same top-10 rows for query 0.
        let tops: Vec<(Kind, &Vec<u64>)> =
            figures.iter().filter_map(|(k, f)| f.top.get(name).map(|t| (*k, t))).collect();
        let mismatch = tops.windows(2).find(|w| w[0].1 != w[1].1).map(|w| {
            format!("top-10 {name}: {:?} {:?} vs {:?} {:?}", w[0].0, w[0].1, w[1].0, w[1].1)
        });
        for batch in [false, true] {
            let id = format!("VEC-{name}{}", if batch { "-batch10" } else { "" });
            let mut cells = BTreeMap::new();
            for k in engines {
                let c = match (k, figures.get(k)) {
                    (Kind::Sqlite, _) => {
                        Cell::Na("needs the sqlite-vector extension (not bundled)".into())
                    }
                    (_, Some(f)) => match f.secs.get(&id) {
                        Some(s) => Cell::Secs(*s),
                        None => Cell::Error("no figure".into()),
                    },
                    (_, None) => Cell::Error("did not run (see failures)".into()),
                };
                cells.insert(*k, c);
            }
            lines.push(Line {
                id: id.clone(),
                name: format!(
                    "Top-10 {name}, {rows} × {DIM} f32{}",
                    if batch { ", 10 queries" } else { "" }
                ),
                group: Group::Vector,
                mode: "median",
                ranked: true,
                cells,
                mismatch: mismatch.clone(),
            });
        }
    }
    // Basalt-only rows (not ranked): the quantised copies, then the stored forms.
    let quantised = QUANTISED.iter().map(|(label, _)| {
        let name = format!("Top-10 L2 on a {label} copy + exact rescoring, {rows} × {DIM}");
        (format!("VEC-L2-{label}"), name, "no quantised search")
    });
    let stored = STORED.iter().map(|(label, form, precision)| {
        let how = match precision {
            basalt::Precision::Exact => "exact".to_string(),
            p => format!("{p:?}"),
        };
        let name = format!("Top-10 L2 over a {} column ({how}), {rows} × {DIM}", form.name());
        (format!("VEC-L2-{label}"), name, "no stored quantised vectors")
    });
    for (id, name, na) in quantised.chain(stored) {
        let mut cells = BTreeMap::new();
        for k in engines {
            let c = match (k, figures.get(k).and_then(|f| f.secs.get(&id))) {
                (Kind::Basalt, Some(s)) => Cell::Secs(*s),
                (Kind::Basalt, None) => Cell::Error("did not run (see failures)".into()),
                _ => Cell::Na(na.into()),
            };
            cells.insert(*k, c);
        }
        lines.push(Line {
            id,
            name,
            group: Group::Vector,
            mode: "median",
            ranked: false,
            cells,
            mismatch: None,
        });
    }
    let bytes = (rows * DIM * 4) as f64;
    let mut md = format!(
        "\n## Vector module\n\n{rows} × {DIM} float32 vectors uniform in [0, 1), k = 10. \
         Basalt: `Table::topk` / `Table::batch_topk` (exact, one pass over the vectors for the \
         batch). DuckDB: `ORDER BY <distance>(vec, [...]::FLOAT[{DIM}]) LIMIT 10` materialised \
         through Arrow, the batch as 10 sequential queries. The top-10 rows of the first query \
         are compared across engines.\n\n\
         Memory read bandwidth of this machine in this run (2 threads summing {:.0} MB of f32): \
         **{:.1} GB/s**.\n",
        bytes / 1e6,
        bytes / bandwidth / 1e9
    );
    if let Some(f) = figures.get(&Kind::Basalt) {
        for (name, _) in METRICS {
            if let Some(s) = f.secs.get(&format!("VEC-{name}")) {
                md.push_str(&format!(
                    "- Basalt top-10 {name}: {:.1} ms, {:.1} GB/s of vectors = {:.0}% of that bandwidth\n",
                    s * 1e3,
                    bytes / s / 1e9,
                    100.0 * bandwidth / s
                ));
            }
        }
    }
    md.push_str(&note);
    Ok((lines, md))
}

/// Seconds (median) for two threads to read `floats` f32 values once: the bandwidth a scan
/// of the same bytes can hope for.
fn read_bandwidth(floats: usize, iterations: usize) -> f64 {
    let data: Vec<f32> = (0..floats).map(|i| (i % 7) as f32).collect();
    let half = floats / 2;
    let mut t = Vec::new();
    for _ in 0..iterations.max(1) + 1 {
        let s = std::time::Instant::now();
        let sums: Vec<f32> = std::thread::scope(|sc| {
            let hs: Vec<_> = [&data[..half], &data[half..]]
                .into_iter()
                .map(|part| {
                    sc.spawn(move || {
                        let mut acc = [0f32; 16];
                        for c in part.chunks_exact(16) {
                            for l in 0..16 {
                                acc[l] += c[l];
                            }
                        }
                        acc.iter().sum::<f32>()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).collect()
        });
        std::hint::black_box(sums);
        t.push(s.elapsed().as_secs_f64());
    }
    t.remove(0);
    crate::run::median(t)
}

/// §3 on Basalt: a table `vecs (id BIGINT, vec VECTOR(128))` loaded through bulk inserts
/// and flushed, then `topk` / `batch_topk` per metric.
fn basalt_figures(
    rows: usize,
    data: &[f32],
    queries: &[f32],
    warmup: usize,
    iterations: usize,
    work: &Path,
) -> Res<(Figures, String)> {
    use basalt::arrow::array::{FixedSizeListArray, Float32Array, Int64Array, RecordBatch};
    use basalt::arrow::schema::{Field, Schema};
    use basalt::{Database, Metric, Precision};
    use std::sync::Arc;
    let err = |e: basalt::Error| e.to_string();
    let path = work.join("vectors.basalt");
    if path.exists() {
        std::fs::remove_dir_all(&path).map_err(|e| e.to_string())?;
    }
    let db = Database::open(&path).map_err(err)?;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", basalt::arrow::schema::DataType::Int64, false),
        Field::new("vec", basalt::vector_type(DIM), false),
    ]));
    let t = db.create_table("vecs", &schema).map_err(err)?;
    let basalt::arrow::schema::DataType::FixedSizeList(item, _) = basalt::vector_type(DIM) else {
        return Err("vector type".into());
    };
    let fill = |t: &basalt::Table, schema: &Arc<Schema>| -> Res<f64> {
        let load = std::time::Instant::now();
        for start in (0..rows).step_by(100_000) {
            let n = 100_000.min(rows - start);
            let values = Float32Array::from(data[start * DIM..(start + n) * DIM].to_vec());
            let list =
                FixedSizeListArray::try_new(item.clone(), DIM as i32, Arc::new(values), None)
                    .map_err(|e| e.to_string())?;
            let ids = Int64Array::from_iter_values(start as i64..(start + n) as i64);
            let b = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(list)])
                .map_err(|e| e.to_string())?;
            t.insert(&b).map_err(err)?;
        }
        db.flush().map_err(err)?;
        Ok(load.elapsed().as_secs_f64())
    };
    let load = fill(&t, &schema)?;
    let q = |i: usize| &queries[i * DIM..(i + 1) * DIM];
    let batch: Vec<&[f32]> = (1..11).map(q).collect();
    let mut f = Figures::default();
    for ((name, _), metric) in METRICS.iter().zip([Metric::L2, Metric::Cosine, Metric::Dot]) {
        for is_batch in [false, true] {
            let run = || -> Res<Vec<u64>> {
                if is_batch {
                    let r = t.batch_topk("vec", &batch, 10, metric).map_err(err)?;
                    if r.iter().any(|r| r.len() != 10.min(rows)) {
                        return Err(format!("batch top-10 {name} returned too few rows"));
                    }
                    Ok(Vec::new())
                } else {
                    let r = t.topk("vec", q(0), 10, metric).map_err(err)?;
                    // `_id`s are 1-based in insertion order; row numbers are 0-based.
                    Ok(r.iter().map(|n| n.id - 1).collect())
                }
            };
            let (secs, top) = timed(warmup, iterations, run)?;
            if !is_batch {
                f.top.insert(name.to_string(), top);
            }
            let id = format!("VEC-{name}{}", if is_batch { "-batch10" } else { "" });
            f.secs.insert(id, secs);
        }
    }
    let mut note = format!(
        "- Basalt load: {rows} vectors in {:.2} s (bulk inserts of 100k rows, then flush).\n",
        load
    );
    // Quantised scans with exact rescoring: time, the first call (which builds the copies)
    // and recall@10 against the exact search over all 11 queries.
    let all: Vec<&[f32]> = (0..11).map(q).collect();
    let exact =
        t.batch_topk_with("vec", &all, 10, Metric::L2, None, Precision::Exact).map_err(err)?;
    // One query's median time on `table` at `precision`, and recall@10 over all 11 queries.
    let measure = |table: &basalt::Table, precision: Precision| -> Res<(f64, f64)> {
        let run =
            || table.batch_topk_with("vec", &[q(0)], 10, Metric::L2, None, precision).map_err(err);
        let (secs, _) = timed(warmup, iterations, run)?;
        let got =
            table.batch_topk_with("vec", &all, 10, Metric::L2, None, precision).map_err(err)?;
        Ok((secs, recall(&got, &exact)))
    };
    for (label, precision) in QUANTISED {
        let s = std::time::Instant::now();
        t.batch_topk_with("vec", &[q(0)], 10, Metric::L2, None, precision).map_err(err)?;
        let build = s.elapsed().as_secs_f64();
        let (secs, recall) = measure(&t, precision)?;
        f.secs.insert(format!("VEC-L2-{label}"), secs);
        note.push_str(&format!(
            "- Basalt top-10 L2 on the {label} copy ({precision:?}, exact rescoring): {:.1} ms, \
             recall@10 {recall:.3} over 11 queries; the first call, which builds the copies, {:.0} ms\n",
            secs * 1e3,
            build * 1e3
        ));
    }
    // Columns stored as half floats and as int8 (`VECTOR(128, FLOAT16)` / `INT8`): the same
    // vectors rounded on insert; exact searches over the stored values, and the int8 column
    // ranked by the integer kernel with rescoring. Recall@10 against the float32 answer.
    for (label, form, precision) in STORED {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", basalt::arrow::schema::DataType::Int64, false),
            basalt::vector_field("vec", DIM, form, false),
        ]));
        let name = format!("vecs_{}", form.name());
        let st = match db.table(&name) {
            Ok(st) => st, // the int8 table serves two rows
            Err(_) => {
                let st = db.create_table(&name, &schema).map_err(err)?;
                let load = fill(&st, &schema)?;
                note.push_str(&format!(
                    "- Basalt load of the {} column: {load:.2} s.\n",
                    form.name()
                ));
                st
            }
        };
        let (secs, recall) = measure(&st, precision)?;
        f.secs.insert(format!("VEC-L2-{label}"), secs);
        note.push_str(&format!(
            "- Basalt top-10 L2 over a column stored as {} ({precision:?}): {:.1} ms, recall@10 \
             {recall:.3} against the float32 column's answer over 11 queries\n",
            form.name(),
            secs * 1e3,
        ));
    }
    // The same searches through SQL (DataFusion's own distance functions; the top-k rule
    // answers them from storage), reported beside the API figures.
    let lit = |v: &[f32]| {
        format!("[{}]", v.iter().map(|x| format!("{x:?}")).collect::<Vec<_>>().join(", "))
    };
    for (name, sql) in [
        (
            "L2",
            format!(
                "SELECT id, array_distance(vec, {}) AS d FROM vecs ORDER BY d LIMIT 10",
                lit(q(0))
            ),
        ),
        (
            "cosine",
            format!(
                "SELECT id, cosine_distance(vec, {}) AS d FROM vecs ORDER BY d LIMIT 10",
                lit(q(0))
            ),
        ),
        (
            "dot",
            format!(
                "SELECT id, inner_product(vec, {}) AS s FROM vecs ORDER BY s DESC LIMIT 10",
                lit(q(0))
            ),
        ),
    ] {
        let conn = db.connect();
        let run = || -> Res<Vec<u64>> {
            let b = conn.sql(&sql).map_err(err)?;
            let mut ids = Vec::new();
            for b in &b {
                let c = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or("SQL top-10 ids are not BIGINT")?;
                ids.extend(c.values().iter().map(|v| *v as u64));
            }
            Ok(ids)
        };
        let (secs, ids) = timed(warmup, iterations, run)?;
        let same = f.top.get(name).is_some_and(|t| *t == ids);
        note.push_str(&format!(
            "- Basalt top-10 {name} through SQL (`{}…`): {:.1} ms, {} the API's rows\n",
            &sql[..sql.find('[').unwrap_or(sql.len())],
            secs * 1e3,
            if same { "same as" } else { "DIFFERENT from" }
        ));
    }
    db.close().map_err(err)?;
    // The first query after opening the database: the segment files are mapped afresh (the
    // page cache is warm), so this is what faulting the mapping in costs.
    let mut cold = Vec::new();
    for _ in 0..3 {
        let db = Database::open(&path).map_err(err)?;
        let t = db.table("vecs").map_err(err)?;
        let s = std::time::Instant::now();
        t.topk("vec", q(0), 10, Metric::L2).map_err(err)?;
        cold.push(s.elapsed().as_secs_f64());
        db.close().map_err(err)?;
    }
    note.push_str(&format!(
        "- Basalt top-10 L2, first query after reopening the database (median of 3): {:.1} ms\n",
        crate::run::median(cold) * 1e3
    ));
    Ok((f, note))
}

#[cfg(feature = "duckdb")]
fn duck_figures(
    rows: usize,
    data: &[f32],
    queries: &[f32],
    engines: &[Kind],
    warmup: usize,
    iterations: usize,
) -> Res<Option<Figures>> {
    if !engines.contains(&Kind::Duckdb) {
        return Ok(None);
    }
    crate::duck::vector_figures(rows, data, queries, warmup, iterations).map(Some)
}

#[cfg(not(feature = "duckdb"))]
fn duck_figures(
    _rows: usize,
    _data: &[f32],
    _queries: &[f32],
    engines: &[Kind],
    _warmup: usize,
    _iterations: usize,
) -> Res<Option<Figures>> {
    if engines.contains(&Kind::Duckdb) {
        return Err("built without the `duckdb` feature".into());
    }
    Ok(None)
}
