//! Out-of-core file import (`benches/README.md`, *Metrics*): each engine in its own process (this binary
//! with `--worker ooc …`) so its peak memory is its own. The worker queries the file
//! directly, materialises it into a table under a 1 GB memory limit, runs a repeated query
//! on the table, and reports times, incremental peak RSS and storage bytes on one line.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use crate::engines::{Kind, Res};

/// Memory limit given to each engine.
pub const MEMORY_LIMIT: usize = 1 << 30;

/// The §5 data: 65,536-row batches of value = row, score = (row % 1000) / 10,
/// category = `group_{row % 100}`, name = `user_{row % 10000}`.
pub fn write_file(rows: usize, format: &str, path: &Path) -> Res<()> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("value", DataType::Int64, false),
        Field::new("score", DataType::Float64, false),
        Field::new("category", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, false),
    ]));
    let mut batches = Vec::new();
    let mut start = 0;
    while start < rows {
        let n = 65_536.min(rows - start);
        let r = start as i64..(start + n) as i64;
        batches.push(
            RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(Int64Array::from_iter_values(r.clone())),
                    Arc::new(Float64Array::from_iter_values(
                        r.clone().map(|i| (i % 1000) as f64 / 10.0),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        r.clone().map(|i| format!("group_{}", i % 100)),
                    )),
                    Arc::new(StringArray::from_iter_values(
                        r.map(|i| format!("user_{}", i % 10_000)),
                    )),
                ],
            )
            .map_err(|e| e.to_string())?,
        );
        start += n;
    }
    if format == "parquet" {
        return crate::data::write_parquet(&batches, path);
    }
    let e = |e: std::io::Error| e.to_string();
    let mut w = BufWriter::new(std::fs::File::create(path).map_err(e)?);
    writeln!(w, "value,score,category,name").map_err(e)?;
    for i in 0..rows {
        writeln!(
            w,
            "{i},{},group_{},user_{}",
            crate::data::json_float((i % 1000) as f64 / 10.0),
            i % 100,
            i % 10_000
        )
        .map_err(e)?;
    }
    w.flush().map_err(e)
}

/// One engine's §5 figures.
#[derive(Debug, Clone, Default)]
pub struct OocFigures {
    /// Direct filtered count over the file (median seconds).
    pub direct: f64,
    /// Materialisation seconds.
    pub materialize: f64,
    /// Rows materialised.
    pub rows: u64,
    /// Repeated native query (median seconds).
    pub query: f64,
    /// Incremental peak RSS in bytes.
    pub rss: u64,
    /// Storage bytes after the import.
    pub storage: u64,
    /// Cross-check: the direct count and the query's total count.
    pub check: String,
}

fn proc_status_kb(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

const QUERY: &str = "SELECT category, COUNT(*) AS n, AVG(score) AS avg_score FROM imported \
                     WHERE score >= 50 GROUP BY category ORDER BY category";

/// One engine's §5 run: the engine, the file and its format, where its database goes, and
/// how many warm-up and timed runs the repeated queries get.
#[derive(Clone, Copy)]
pub struct Job<'a> {
    /// The engine.
    pub engine: Kind,
    /// `csv` or `parquet`.
    pub format: &'a str,
    /// The file.
    pub file: &'a Path,
    /// The engine's database directory.
    pub dir: &'a Path,
    /// Timed runs.
    pub runs: usize,
    /// Warm-up runs.
    pub warmup: usize,
}

/// Runs in the worker process: measures the job's engine in this process.
pub fn worker(job: &Job<'_>) -> Res<OocFigures> {
    let Job { engine, format, file, dir, runs, warmup } = *job;
    let baseline = proc_status_kb("VmRSS:");
    let f = file.display().to_string();
    let mut out = OocFigures::default();
    let time_runs = |run: &mut dyn FnMut() -> Res<String>| -> Res<(f64, String)> {
        let mut last = String::new();
        for _ in 0..warmup {
            run()?;
        }
        let mut t = Vec::new();
        for _ in 0..runs.max(1) {
            let s = Instant::now();
            last = run()?;
            t.push(s.elapsed().as_secs_f64());
        }
        Ok((crate::run::median(t), last))
    };
    let e = |e: basalt::Error| e.to_string();
    match engine {
        Kind::Basalt => {
            let opts =
                basalt::Options { sql_memory_limit: Some(MEMORY_LIMIT), ..Default::default() };
            let db = basalt::Database::open_with(dir.join("basalt"), opts).map_err(e)?;
            let conn = db.connect();
            let src = if format == "parquet" {
                format!("read_parquet('{f}')")
            } else {
                format!("read_csv('{f}')")
            };
            let scalar = |b: &[RecordBatch]| crate::worker_check(b);
            let (direct, c1) = time_runs(&mut || {
                conn.sql(&format!("SELECT COUNT(*) FROM {src} WHERE score >= 50"))
                    .map(|b| scalar(&b))
                    .map_err(e)
            })?;
            let s = Instant::now();
            conn.sql(&format!("CREATE TABLE imported AS SELECT * FROM {src}")).map_err(e)?;
            out.materialize = s.elapsed().as_secs_f64();
            out.rows = conn.table("imported").and_then(|t| t.count()).map_err(e)?;
            let (query, c2) = time_runs(&mut || conn.sql(QUERY).map(|b| scalar(&b)).map_err(e))?;
            out.rss = proc_status_kb("VmHWM:").saturating_sub(baseline) * 1024;
            db.flush().map_err(e)?;
            out.storage =
                basalt_benches::dir_size(&dir.join("basalt")).map_err(|e| e.to_string())?;
            out.direct = direct;
            out.query = query;
            out.check = format!("{c1}/{c2}");
        }
        #[cfg(feature = "duckdb")]
        Kind::Duckdb => {
            let de = |e: duckdb::Error| e.to_string();
            let c = duckdb::Connection::open(dir.join("duck.db")).map_err(de)?;
            let tmp = dir.join("duck_tmp");
            c.execute_batch(&format!(
                "SET memory_limit = '1GB'; SET temp_directory = '{}'; SET threads = 2",
                tmp.display()
            ))
            .map_err(de)?;
            let src = if format == "parquet" {
                format!("read_parquet('{f}')")
            } else {
                format!("read_csv_auto('{f}', header = true)")
            };
            let scalar = |sql: &str| -> Res<String> {
                let mut st = c.prepare(sql).map_err(de)?;
                let b: Vec<_> = st.query_arrow([]).map_err(de)?.collect();
                Ok(crate::duck::worker_check(&b))
            };
            let (direct, c1) = time_runs(&mut || {
                scalar(&format!("SELECT COUNT(*) FROM {src} WHERE score >= 50"))
            })?;
            let s = Instant::now();
            c.execute_batch(&format!("CREATE TABLE imported AS SELECT * FROM {src}"))
                .map_err(de)?;
            out.materialize = s.elapsed().as_secs_f64();
            out.rows = c
                .query_row("SELECT COUNT(*) FROM imported", [], |r| r.get::<_, i64>(0))
                .map_err(de)? as u64;
            let (query, c2) = time_runs(&mut || scalar(QUERY))?;
            out.rss = proc_status_kb("VmHWM:").saturating_sub(baseline) * 1024;
            c.execute_batch("CHECKPOINT").map_err(de)?;
            out.storage = basalt_benches::dir_size(dir).map_err(|e| e.to_string())?;
            out.direct = direct;
            out.query = query;
            out.check = format!("{c1}/{c2}");
        }
        other => return Err(format!("§5 compares Basalt and DuckDB, not {}", other.name())),
    }
    Ok(out)
}

/// Encodes figures on one line for the parent.
pub fn encode(f: &OocFigures) -> String {
    format!(
        "OOC direct={} materialize={} rows={} query={} rss={} storage={} check={}",
        f.direct, f.materialize, f.rows, f.query, f.rss, f.storage, f.check
    )
}

fn decode(line: &str) -> Option<OocFigures> {
    let mut f = OocFigures::default();
    for kv in line.strip_prefix("OOC ")?.split(' ') {
        let (k, v) = kv.split_once('=')?;
        match k {
            "direct" => f.direct = v.parse().ok()?,
            "materialize" => f.materialize = v.parse().ok()?,
            "rows" => f.rows = v.parse().ok()?,
            "query" => f.query = v.parse().ok()?,
            "rss" => f.rss = v.parse().ok()?,
            "storage" => f.storage = v.parse().ok()?,
            "check" => f.check = v.to_string(),
            _ => {}
        }
    }
    Some(f)
}

/// Runs the job in a child process (this binary with `--worker ooc …`).
pub fn spawn(job: &Job<'_>) -> Res<OocFigures> {
    let Job { engine, format, file, dir, runs, warmup } = *job;
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let out = Command::new(exe)
        .args(["--worker", "ooc", engine.name(), format])
        .arg(file)
        .arg(dir)
        .args([runs.to_string(), warmup.to_string()])
        .output()
        .map_err(|e| e.to_string())?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "§5 worker for {} failed: {}{}",
            engine.name(),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    stdout
        .lines()
        .find_map(decode)
        .ok_or_else(|| format!("§5 worker for {} printed no figures: {stdout}", engine.name()))
}
