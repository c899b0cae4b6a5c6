//! Storage benchmark (issue "Foundation"): bulk insert of the benchmark dataset (`benches/README.md`, *Data*) as
//! Arrow batches through the engine API, timed until committed and durable (segment and
//! manifest synced); then full and projected scans; then bytes on disk next to the same
//! data written as zstd Parquet by the parquet crate.
//!
//! `cargo run --release -p basalt-benches --bin bulk-load -- [--rows N] [--iters K] [--dir D]`

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{RecordBatch, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use basalt::Database;
use basalt_benches::{dataset, dir_size, median, timed};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    basalt_benches::alloc::keep_freed_memory();
    let mut rows = 1_000_000usize;
    let mut iters = 5usize;
    let mut dir: Option<PathBuf> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rows" => rows = args.next().ok_or("--rows needs a value")?.parse()?,
            "--iters" => iters = args.next().ok_or("--iters needs a value")?.parse()?,
            "--dir" => dir = Some(args.next().ok_or("--dir needs a value")?.into()),
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let base = dir.unwrap_or_else(|| {
        std::env::temp_dir().join(format!("basalt-bulk-{}", std::process::id()))
    });
    std::fs::create_dir_all(&base)?;
    let batches = dataset(rows, basalt::ROW_GROUP_ROWS, 42);
    let schema = batches[0].schema();
    let raw: usize = batches.iter().map(RecordBatch::get_array_memory_size).sum();
    println!(
        "dataset: {rows} rows, {} batches, {:.1} MiB in Arrow",
        batches.len(),
        raw as f64 / 1048576.0
    );

    // Bulk insert: fresh database per iteration; create_table outside the timed region.
    let mut inserts = Vec::new();
    let db_dir = base.join("db");
    for i in 0..iters + 1 {
        let _ = std::fs::remove_dir_all(&db_dir);
        let db = Database::open(&db_dir)?;
        let t = db.create_table("bench", &schema)?;
        let (r, d) = timed(|| t.insert_batches(&batches));
        let ids = r?;
        assert_eq!(ids.count as usize, rows);
        db.close()?;
        if i > 0 {
            inserts.push(d); // the first run warms the page cache and allocator
        }
    }
    let basalt_bytes = dir_size(&db_dir)?;

    // Scans on the reopened database.
    let db = Database::open(&db_dir)?;
    let t = db.table("bench")?;
    let scan = |cols: Option<&[&str]>| -> Result<Duration, Box<dyn std::error::Error>> {
        let mut ds = Vec::new();
        for _ in 0..iters + 2 {
            let (n, d) = timed(|| -> basalt::Result<usize> {
                let it = match cols {
                    Some(c) => t.scan_columns(c)?,
                    None => t.scan()?,
                };
                let mut n = 0;
                for b in it {
                    n += b?.num_rows();
                }
                Ok(n)
            });
            assert_eq!(n?, rows);
            ds.push(d);
        }
        Ok(median(ds[2..].to_vec()))
    };
    let full_scan = scan(None)?;
    let proj_scan = scan(Some(&["name", "age", "city"]))?;

    // The same data (with _id) as zstd Parquet.
    let pq_path = base.join("bench.parquet");
    let mut fields = vec![Arc::new(Field::new("_id", DataType::UInt64, false))];
    fields.extend(schema.fields().iter().cloned());
    let pq_schema = Arc::new(Schema::new(fields));
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .build();
    let (r, pq_write) = timed(|| -> Result<(), Box<dyn std::error::Error>> {
        let f = std::fs::File::create(&pq_path)?;
        let mut w = ArrowWriter::try_new(f, pq_schema.clone(), Some(props))?;
        let mut id = 1u64;
        for b in &batches {
            let n = b.num_rows() as u64;
            let mut cols = vec![Arc::new(UInt64Array::from_iter_values(id..id + n)) as _];
            cols.extend(b.columns().iter().cloned());
            w.write(&RecordBatch::try_new(pq_schema.clone(), cols)?)?;
            id += n;
        }
        w.close()?;
        Ok(())
    });
    r?;
    let pq_bytes = std::fs::metadata(&pq_path)?.len();

    let ins = median(inserts.clone());
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let rps = |d: Duration| rows as f64 / d.as_secs_f64();
    println!();
    println!("| metric | value |");
    println!("|---|---|");
    println!(
        "| bulk insert {rows} rows, durable (median of {iters}) | {:.1} ms ({:.2} M rows/s; min {:.1} ms) |",
        ms(ins),
        rps(ins) / 1e6,
        ms(*inserts.iter().min().unwrap_or(&ins))
    );
    println!(
        "| full scan, all columns incl. _id (median) | {:.1} ms ({:.1} M rows/s) |",
        ms(full_scan),
        rps(full_scan) / 1e6
    );
    println!(
        "| projected scan name, age, city (median) | {:.1} ms ({:.1} M rows/s) |",
        ms(proj_scan),
        rps(proj_scan) / 1e6
    );
    println!("| Basalt bytes on disk | {:.2} MiB |", basalt_bytes as f64 / 1048576.0);
    println!(
        "| zstd Parquet bytes (parquet crate, incl. _id) | {:.2} MiB (written in {:.1} ms) |",
        pq_bytes as f64 / 1048576.0,
        ms(pq_write)
    );
    println!("| size ratio Basalt / Parquet | {:.2} |", basalt_bytes as f64 / pq_bytes as f64);
    println!();
    println!(
        "{{\"rows\":{rows},\"bulk_insert_ms\":{:.3},\"full_scan_ms\":{:.3},\"projected_scan_ms\":{:.3},\"basalt_bytes\":{basalt_bytes},\"parquet_bytes\":{pq_bytes}}}",
        ms(ins),
        ms(full_scan),
        ms(proj_scan)
    );
    drop(db);
    std::fs::remove_dir_all(&base)?;
    Ok(())
}
