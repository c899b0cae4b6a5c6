//! The data every engine gets: the benchmark table (`benches/README.md`, *Data*) (generated once, by
//! `basalt_benches::dataset`), the `meta` table, and the files for the file-scan metrics.

use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::SchemaRef;

use crate::engines::{BenchRow, Res};

pub use basalt_benches::bench_schema;

pub use basalt_dataset::{META, SEED};

/// The dataset, once as Arrow batches and once as rows (the same values).
pub struct Dataset {
    /// Batches of 65,536 rows.
    pub batches: Vec<RecordBatch>,
    /// The same rows.
    pub rows: Vec<BenchRow>,
}

/// Generates `n` rows.
pub fn generate(n: usize) -> Dataset {
    let batches = basalt_benches::dataset(n, 65_536, SEED);
    let rows = basalt_benches::rows_of(&batches);
    Dataset { batches, rows }
}

/// Rows as one Arrow batch of the benchmark schema.
pub fn batch_of(rows: &[BenchRow]) -> RecordBatch {
    let schema: SchemaRef = bench_schema();
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
    .expect("rows match the schema")
}

/// Writes the dataset as CSV (header row), JSON lines and Parquet under `dir`.
pub fn write_files(d: &Dataset, dir: &Path) -> Res<()> {
    let e = |e: std::io::Error| e.to_string();
    let mut csv = BufWriter::new(std::fs::File::create(dir.join("bench.csv")).map_err(e)?);
    writeln!(csv, "name,age,score,city,category").map_err(e)?;
    let mut json = BufWriter::new(std::fs::File::create(dir.join("bench.jsonl")).map_err(e)?);
    for r in &d.rows {
        writeln!(csv, "{},{},{},{},{}", r.name, r.age, r.score, r.city, r.category).map_err(e)?;
        writeln!(
            json,
            r#"{{"name":"{}","age":{},"score":{},"city":"{}","category":"{}"}}"#,
            r.name,
            r.age,
            json_float(r.score),
            r.city,
            r.category
        )
        .map_err(e)?;
    }
    csv.flush().map_err(e)?;
    json.flush().map_err(e)?;
    write_parquet(&d.batches, &dir.join("bench.parquet"))
}

/// A float as JSON writes it so every reader infers a float column (`50` → `50.0`).
pub fn json_float(f: f64) -> String {
    if f.fract() == 0.0 { format!("{f:.1}") } else { f.to_string() }
}

/// A Parquet writer creating `path`: zstd, 65,536-row row groups (every file the harness
/// writes).
pub fn parquet_writer(
    path: &Path,
    schema: SchemaRef,
) -> Res<parquet::arrow::ArrowWriter<std::fs::File>> {
    let file = std::fs::File::create(path).map_err(|e| e.to_string())?;
    let props = parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(Default::default()))
        .set_max_row_group_row_count(Some(65_536))
        .build();
    parquet::arrow::ArrowWriter::try_new(file, schema, Some(props)).map_err(|e| e.to_string())
}

/// Writes batches to a Parquet file (zstd; this build of parquet has no snappy).
pub fn write_parquet(batches: &[RecordBatch], path: &Path) -> Res<()> {
    let Some(first) = batches.first() else { return Err("no batches".into()) };
    let mut w = parquet_writer(path, first.schema())?;
    for b in batches {
        w.write(b).map_err(|e| e.to_string())?;
    }
    w.close().map(|_| ()).map_err(|e| e.to_string())
}
