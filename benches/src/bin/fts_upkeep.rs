//! Full-text upkeep benchmark (issue "Full-text search"): what keeping the index in step
//! costs, Basalt against SQLite FTS5 (rusqlite, bundled, WAL, `synchronous=NORMAL`: both
//! survive a killed process) in one run.
//!
//! Rows: building the index over N existing rows of short notes; one insert followed by a
//! search that must find it (read-your-writes: Basalt applies the pending rows with one
//! index commit; SQLite's trigger writes the FTS5 table in the insert's transaction); the
//! same search with no write before it. Searches ask for the 10 best rows of a word that
//! one row in 50 holds.
//!
//! `cargo run --release -p basalt-benches --bin fts-upkeep -- [--rows N] [--ops K]`

#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt::arrow::array::{RecordBatch, StringArray};
use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{Database, Durability, Options, Row, Tokenizer};
use rusqlite::{Connection, params};

fn note(i: usize) -> String {
    format!("note {i} about topic{} and the day's errands", i % 50)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

struct Figures {
    build: Duration,
    write_search: Vec<Duration>,
    search: Vec<Duration>,
}

fn basalt(dir: &Path, rows: usize, ops: usize) -> Figures {
    let opts = Options { durability: Durability::ProcessSafe, ..Options::default() };
    let db = Database::open_with(dir.join("basalt"), opts).expect("open basalt");
    let schema = Arc::new(Schema::new(vec![Field::new("body", DataType::Utf8, false)]));
    let t = db.create_table("notes", &schema).expect("create table");
    let body = StringArray::from_iter_values((0..rows).map(note));
    t.insert(&RecordBatch::try_new(schema, vec![Arc::new(body)]).expect("batch")).expect("insert");
    let start = Instant::now();
    t.create_fts_index(&["body"], Tokenizer::Default).expect("create index");
    let build = start.elapsed();
    let (mut write_search, mut search) = (Vec::new(), Vec::new());
    for i in 0..ops {
        let start = Instant::now();
        let row = Row::new().set("body", format!("fresh topic7 memo m{i}x"));
        let id = t.insert_row(row).expect("insert");
        let hits = t.search_text(&format!("m{i}x"), Some(10)).expect("search");
        write_search.push(start.elapsed());
        assert!(hits.iter().any(|h| h.id == id), "read-your-writes");
        let start = Instant::now();
        let hits = t.search_text("topic7", Some(10)).expect("search");
        search.push(start.elapsed());
        assert_eq!(hits.len(), 10);
    }
    db.close().expect("close");
    Figures { build, write_search, search }
}

fn sqlite(dir: &Path, rows: usize, ops: usize) -> Figures {
    let c = Connection::open(dir.join("sqlite.db")).expect("open sqlite");
    c.pragma_update(None, "journal_mode", "WAL").expect("wal");
    c.pragma_update(None, "synchronous", "NORMAL").expect("sync");
    c.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        .expect("create");
    {
        let tx = c.unchecked_transaction().expect("tx");
        let mut st = tx.prepare("INSERT INTO notes (body) VALUES (?1)").expect("prepare");
        for i in 0..rows {
            st.execute(params![note(i)]).expect("insert");
        }
        drop(st);
        tx.commit().expect("commit");
    }
    let start = Instant::now();
    c.execute_batch(
        "CREATE VIRTUAL TABLE notes_fts USING fts5(body, content='notes', content_rowid='id');
         INSERT INTO notes_fts(notes_fts) VALUES('rebuild');
         CREATE TRIGGER notes_ai AFTER INSERT ON notes BEGIN
           INSERT INTO notes_fts(rowid, body) VALUES (new.id, new.body);
         END;",
    )
    .expect("fts5");
    let build = start.elapsed();
    let mut ins = c.prepare("INSERT INTO notes (body) VALUES (?1)").expect("prepare");
    let mut q = c
        .prepare("SELECT rowid FROM notes_fts WHERE notes_fts MATCH ?1 ORDER BY rank LIMIT 10")
        .expect("prepare");
    let (mut write_search, mut search) = (Vec::new(), Vec::new());
    for i in 0..ops {
        let start = Instant::now();
        ins.execute(params![format!("fresh topic7 memo m{i}x")]).expect("insert");
        let id = c.last_insert_rowid();
        let ids: Vec<i64> = q
            .query_map(params![format!("m{i}x")], |r| r.get(0))
            .expect("q")
            .map(|r| r.expect("row"))
            .collect();
        write_search.push(start.elapsed());
        assert!(ids.contains(&id), "read-your-writes");
        let start = Instant::now();
        let n = q.query_map(params!["topic7"], |r| r.get::<_, i64>(0)).expect("q").count();
        search.push(start.elapsed());
        assert_eq!(n, 10);
    }
    Figures { build, write_search, search }
}

fn main() {
    basalt_benches::alloc::keep_freed_memory();
    let mut rows = 100_000;
    let mut ops = 200;
    let args: Vec<String> = std::env::args().skip(1).collect();
    for w in args.chunks(2) {
        match (w[0].as_str(), w.get(1).and_then(|v| v.parse().ok())) {
            ("--rows", Some(v)) => rows = v,
            ("--ops", Some(v)) => ops = v,
            _ => {
                eprintln!("usage: fts-upkeep [--rows N] [--ops K]");
                std::process::exit(2);
            }
        }
    }
    let dir = std::env::temp_dir().join(format!("basalt-fts-upkeep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("work dir");
    let mut b = basalt(&dir, rows, ops);
    let mut s = sqlite(&dir, rows, ops);
    let _ = std::fs::remove_dir_all(&dir);
    println!("# Full-text upkeep: {rows} rows, {ops} operations (median / p95)\n");
    println!("| row | Basalt | SQLite FTS5 | Basalt / SQLite |");
    println!("|---|--:|--:|--:|");
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    println!(
        "| build the index | {} | {} | {:.2} |",
        ms(b.build),
        ms(s.build),
        ratio(b.build, s.build)
    );
    for (name, bv, sv) in [
        ("insert 1 row + search finding it (p50)", &mut b.write_search, &mut s.write_search),
        ("search, no write before it (p50)", &mut b.search, &mut s.search),
    ] {
        let (b50, s50) = (pct(bv, 0.5), pct(sv, 0.5));
        let (b95, s95) = (pct(bv, 0.95), pct(sv, 0.95));
        println!(
            "| {name} | {} (p95 {}) | {} (p95 {}) | {:.2} |",
            ms(b50),
            ms(b95),
            ms(s50),
            ms(s95),
            ratio(b50, s50)
        );
    }
}
