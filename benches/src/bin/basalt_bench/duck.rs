//! The DuckDB peer (feature `duckdb`): DuckDB 1.5.5 through the duckdb crate, linked to the
//! prebuilt library `benches/setup-duckdb-peer.sh` fetches. Results come out through
//! DuckDB's Arrow interface; bulk loads go through its Arrow appender; `_id` is a
//! `PRIMARY KEY` filled from a sequence, so point lookups use DuckDB's index (the original
//! harness scanned `rowid`). Commits are DuckDB's default: the WAL is synced on commit.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use duckdb::arrow::array::{Float64Array, Int64Array, StringArray};
use duckdb::arrow::datatypes::{DataType, Field, Schema};
use duckdb::arrow::record_batch::RecordBatch;

use crate::engines::{BenchRow, Engine, INSERT_SQL, Kind, Out, P, Params, Res};

basalt_benches::arrow_digest_mod!(arrow58, duckdb::arrow);

/// The §5 cross-check string of DuckDB's batches (see `crate::worker_check`).
pub fn worker_check(b: &[RecordBatch]) -> String {
    crate::check_string(&arrow58::digest(b))
}

/// DuckDB on a database file.
pub struct DuckEngine {
    path: PathBuf,
    conn: Option<duckdb::Connection>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn params(p: &[P]) -> Vec<duckdb::types::Value> {
    p.iter()
        .map(|p| match p {
            P::I(i) => duckdb::types::Value::BigInt(*i),
            P::F(f) => duckdb::types::Value::Double(*f),
            P::S(s) => duckdb::types::Value::Text(s.clone()),
        })
        .collect()
}

impl DuckEngine {
    /// Opens (creating) the database file `path`.
    pub fn open(path: &Path) -> Res<Self> {
        let mut e = DuckEngine { path: path.to_path_buf(), conn: None };
        e.reopen()?;
        Ok(e)
    }

    /// Drops cached prepared statements after a write. DuckDB 1.5.5 answered
    /// `SELECT COUNT(*) FROM bench` from a statement prepared after a reopen with the count
    /// as of the prepare, also after later inserts (seen in this harness's cross-check); a
    /// statement prepared after the write is right. Reads between writes keep their cache.
    fn after_write(&self) {
        self.c().flush_prepared_statement_cache();
    }

    fn c(&self) -> &duckdb::Connection {
        self.conn.as_ref().expect("open between calls")
    }

    /// Rows as an Arrow batch of DuckDB's arrow version (without `_id`).
    fn batch(rows: &[BenchRow]) -> Res<RecordBatch> {
        let schema = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("age", DataType::Int64, false),
            Field::new("score", DataType::Float64, false),
            Field::new("city", DataType::Utf8, false),
            Field::new("category", DataType::Utf8, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.name.as_str()))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.age))),
                Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.score))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.city))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.category))),
            ],
        )
        .map_err(err)
    }
}

impl Engine for DuckEngine {
    fn kind(&self) -> Kind {
        Kind::Duckdb
    }
    fn query(&mut self, sql: &str, p: &[P]) -> Res<Out> {
        let mut stmt = self.c().prepare_cached(sql).map_err(err)?;
        let batches: Vec<RecordBatch> =
            stmt.query_arrow(duckdb::params_from_iter(params(p))).map_err(err)?.collect();
        Ok(Out::Duck(batches))
    }
    fn execute(&mut self, sql: &str, p: &[P]) -> Res<u64> {
        let n = {
            let mut stmt = self.c().prepare_cached(sql).map_err(err)?;
            stmt.execute(duckdb::params_from_iter(params(p))).map(|n| n as u64).map_err(err)?
        };
        self.after_write();
        Ok(n)
    }
    fn batch(&mut self, sql: &str) -> Res<()> {
        self.c().execute_batch(sql).map_err(err)?;
        self.after_write();
        Ok(())
    }
    fn insert_one(&mut self, row: &BenchRow) -> Res<i64> {
        let sql = format!("{INSERT_SQL} RETURNING _id");
        let mut stmt = self.c().prepare_cached(&sql).map_err(err)?;
        // Read the result to its end: DuckDB commits the statement when its result is done.
        let ids: Vec<i64> = stmt
            .query_map(duckdb::params_from_iter(params(&row.params())), |r| r.get(0))
            .map_err(err)?
            .collect::<Result<_, _>>()
            .map_err(err)?;
        self.after_write();
        ids.first().copied().ok_or_else(|| "INSERT … RETURNING returned no row".to_string())
    }
    fn insert_many(&mut self, rows: &[BenchRow]) -> Res<()> {
        let batch = Self::batch(rows)?;
        let mut app = self
            .c()
            .appender_with_columns("bench", &["name", "age", "score", "city", "category"])
            .map_err(err)?;
        app.append_record_batch(batch).map_err(err)?;
        app.flush().map_err(err)?;
        drop(app);
        self.after_write();
        Ok(())
    }
    fn reopen(&mut self) -> Res<()> {
        if let Some(c) = self.conn.take() {
            c.close().map_err(|(_, e)| err(e))?;
        }
        let c = duckdb::Connection::open(&self.path).map_err(err)?;
        c.execute_batch("SET threads = 2").map_err(err)?;
        if let Ok(fts) = std::env::var("BASALT_DUCKDB_FTS") {
            c.execute_batch(&format!("LOAD '{fts}'")).map_err(err)?;
        }
        self.conn = Some(c);
        Ok(())
    }
    fn fork(&self) -> Res<Box<dyn Engine + Send>> {
        let conn = self.c().try_clone().map_err(err)?;
        Ok(Box::new(DuckEngine { path: self.path.clone(), conn: Some(conn) }))
    }
    fn set_power_safe(&mut self, _on: bool) -> Res<()> {
        // DuckDB syncs its WAL on every commit; there is no weaker level to choose.
        Ok(())
    }
}

/// §3 on DuckDB: loads the vectors through the Arrow appender into an in-memory database,
/// then times each metric's top-10 query (one, and 10 sequential ones for the batch).
pub fn vector_figures(
    rows: usize,
    data: &[f32],
    queries: &[f32],
    warmup: usize,
    iterations: usize,
) -> Res<crate::vector::Figures> {
    use crate::vector::{DIM, METRICS, literal};
    use duckdb::arrow::array::{FixedSizeListArray, Float32Array};
    let c = duckdb::Connection::open_in_memory().map_err(err)?;
    c.execute_batch(&format!("SET threads = 2; CREATE TABLE vecs (id BIGINT, vec FLOAT[{DIM}])"))
        .map_err(err)?;
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("vec", DataType::FixedSizeList(item.clone(), DIM as i32), false),
    ]));
    {
        let mut app = c.appender("vecs").map_err(err)?;
        for start in (0..rows).step_by(10_000) {
            let n = 10_000.min(rows - start);
            let values = Float32Array::from(data[start * DIM..(start + n) * DIM].to_vec());
            let list =
                FixedSizeListArray::try_new(item.clone(), DIM as i32, Arc::new(values), None)
                    .map_err(err)?;
            let ids = Int64Array::from_iter_values(start as i64..(start + n) as i64);
            let batch = RecordBatch::try_new(schema.clone(), vec![Arc::new(ids), Arc::new(list)])
                .map_err(err)?;
            app.append_record_batch(batch).map_err(err)?;
        }
        app.flush().map_err(err)?;
    }
    let mut out = crate::vector::Figures::default();
    for (name, func) in METRICS {
        let sql_for = |q: &[f32]| {
            format!(
                "SELECT id, {func}(vec, {}) AS dist FROM vecs ORDER BY dist LIMIT 10",
                literal(q)
            )
        };
        let one = |q: &[f32]| -> Res<Vec<u64>> {
            let mut st = c.prepare(&sql_for(q)).map_err(err)?;
            let b: Vec<RecordBatch> = st.query_arrow([]).map_err(err)?.collect();
            let mut ids = Vec::new();
            for b in &b {
                let col = b
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .ok_or("top-10 ids are not BIGINT")?;
                ids.extend(col.values().iter().map(|v| *v as u64));
            }
            Ok(ids)
        };
        for batch in [false, true] {
            let run = || -> Res<Vec<u64>> {
                let qs = if batch { 1..11 } else { 0..1 };
                let mut first = Vec::new();
                for i in qs {
                    let got = one(&queries[i * DIM..(i + 1) * DIM])?;
                    if got.len() != 10.min(rows) {
                        return Err(format!("top-10 {name} returned {} rows", got.len()));
                    }
                    if first.is_empty() {
                        first = got;
                    }
                }
                Ok(first)
            };
            let (secs, top) = crate::vector::timed(warmup, iterations, run)?;
            if !batch {
                out.top.insert(name.to_string(), top);
            }
            let id = format!("VEC-{name}{}", if batch { "-batch10" } else { "" });
            out.secs.insert(id, secs);
        }
    }
    Ok(out)
}
