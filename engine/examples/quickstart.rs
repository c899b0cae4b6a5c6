//! Quick start: create a database, bulk-load Arrow data, insert single rows, read them back
//! by `_id`, scan and aggregate, search text, reopen, and print what is there.
//!
//! Run with `cargo run --release --example quickstart [DIR]` (default: a fresh directory
//! under the system temp dir).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use basalt::arrow::array::{Array, Float64Array, Int64Array, RecordBatch, StringArray};
use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{Database, Row, Tokenizer, vector_type};

const CITIES: [&str; 5] = ["Hangzhou", "Chengdu", "Wuhan", "Xian", "Qingdao"];
const TOPICS: [&str; 4] = ["Books", "Food", "Travel", "Gaming"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = match std::env::args().nth(1) {
        Some(d) => std::path::PathBuf::from(d),
        None => std::env::temp_dir().join(format!("basalt-quickstart-{}", std::process::id())),
    };
    let _ = std::fs::remove_dir_all(&dir);
    println!("database: {}", dir.display());

    let schema = Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int64, false),
        Field::new("score", DataType::Float64, false),
        Field::new("city", DataType::Utf8, false),
        Field::new("topic", DataType::Utf8, false),
        Field::new("embedding", vector_type(4), true),
    ]);

    // 1. Create and bulk-load 200,000 rows from Arrow (durable when insert returns).
    let rows = 200_000usize;
    let load_schema = Arc::new(Schema::new(schema.fields()[..5].to_vec()));
    let batch = RecordBatch::try_new(
        load_schema,
        vec![
            Arc::new(StringArray::from_iter_values((0..rows).map(|i| format!("user_{i}")))),
            Arc::new(Int64Array::from_iter_values((0..rows).map(|i| 18 + (i * 7 % 63) as i64))),
            Arc::new(Float64Array::from_iter_values(
                (0..rows).map(|i| (i * 7919 % 10_001) as f64 / 100.0),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| CITIES[i * 3 % CITIES.len()]),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..rows).map(|i| TOPICS[i / 3 % TOPICS.len()]),
            )),
        ],
    )?;
    let db = Database::open(&dir)?;
    let users = db.create_table("users", &schema)?;
    let t0 = Instant::now();
    let ids = users.insert(&batch)?;
    println!(
        "bulk insert: {} rows (_id {}..={}) in {:.1} ms",
        ids.count,
        ids.first,
        ids.first + ids.count - 1,
        t0.elapsed().as_secs_f64() * 1e3
    );

    // 2. Row-at-a-time inserts (memtable), then a flush makes them durable.
    let ada = users.insert_row(
        Row::new()
            .set("name", "ada")
            .set("age", 36)
            .set("score", 99.5)
            .set("city", "Hangzhou")
            .set("topic", "Books")
            .set("embedding", vec![0.1f32, 0.2, 0.3, 0.4]),
    )?;
    users.insert_row(
        Row::new()
            .set("name", "bob")
            .set("age", 41)
            .set("score", 12.25)
            .set("city", "Wuhan")
            .set("topic", "Food"),
    )?;
    db.flush()?;

    // 3. Point lookups by _id.
    println!("get({ada}) = {:?}", users.get(ada)?.map(|r| r.values().to_vec()));
    let few = users.get_many_columns(&[1, 100_000, ada], &["_id", "name", "city", "score"])?;
    println!("{}", arrow::util::pretty::pretty_format_batches(&[few])?);

    // 4. A projected scan, aggregated in Rust: average score per city.
    let t0 = Instant::now();
    let mut agg: BTreeMap<String, (u64, f64)> = BTreeMap::new();
    for b in users.scan_columns(&["city", "score"])? {
        let b = b?;
        let city = b.column(0).as_any().downcast_ref::<StringArray>().ok_or("city is not utf8")?;
        let score =
            b.column(1).as_any().downcast_ref::<Float64Array>().ok_or("score is not f64")?;
        for i in 0..b.num_rows() {
            let e = agg.entry(city.value(i).to_string()).or_default();
            e.0 += 1;
            e.1 += score.value(i);
        }
    }
    println!(
        "scan + group by city over {} rows in {:.1} ms:",
        users.count()?,
        t0.elapsed().as_secs_f64() * 1e3
    );
    for (city, (n, sum)) in &agg {
        println!("  {city:<10} {n:>6} rows  avg score {:.2}", sum / *n as f64);
    }

    // 5. Full-text search: index three text columns (every row, before returning), then
    //    BM25-ranked searches through the API and through SQL.
    let t0 = Instant::now();
    users.create_fts_index(&["name", "city", "topic"], Tokenizer::Default)?;
    println!(
        "full-text index over {} rows in {:.1} ms",
        users.count()?,
        t0.elapsed().as_secs_f64() * 1e3
    );
    let t0 = Instant::now();
    let hits = users.search_text("travel AND xian", None)?;
    println!(
        "search 'travel AND xian': {} rows in {:.2} ms; best: _id {:?}",
        hits.len(),
        t0.elapsed().as_secs_f64() * 1e3,
        hits.iter().take(3).map(|h| h.id).collect::<Vec<_>>()
    );
    let found = db.sql(
        "SELECT u._id, u.name, u.city, s.score FROM fts_search('users', 'ada OR bob') s \
         JOIN users u ON u._id = s._id ORDER BY s.score DESC, u._id",
    )?;
    println!("{}", arrow::util::pretty::pretty_format_batches(&found)?);
    db.close()?;

    // 6. Reopen read-only: the same data is there.
    let db = Database::open_read_only(&dir)?;
    let users = db.table("users")?;
    let head = users.scan()?.next().ok_or("empty table")??.slice(0, 5);
    println!("after reopen, {} rows; first five:", users.count()?);
    println!("{}", arrow::util::pretty::pretty_format_batches(&[head])?);
    let size: u64 = walk(&dir)?;
    println!("on disk: {:.1} MiB", size as f64 / (1 << 20) as f64);
    drop(db);
    if std::env::args().nth(1).is_none() {
        std::fs::remove_dir_all(&dir)?;
    }
    Ok(())
}

fn walk(p: &std::path::Path) -> std::io::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(p)? {
        let e = e?;
        let m = e.metadata()?;
        total += if m.is_dir() { walk(&e.path())? } else { m.len() };
    }
    Ok(total)
}
