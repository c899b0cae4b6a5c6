//! Write-path benchmark (issue "Write path"): Basalt against SQLite (rusqlite, bundled,
//! WAL mode) in one run, at equal durability:
//!
//! | Basalt        | SQLite             |
//! |---------------|--------------------|
//! | `Buffered`    | `synchronous=OFF`  |
//! | `ProcessSafe` | `synchronous=NORMAL` (WAL: survives a killed process, not power loss) |
//! | `PowerSafe`   | `synchronous=FULL` |
//!
//! Rows: single-row insert + commit; UPDATE by `_id`; DELETE by `_id`; update then read it
//! back; and T writer threads × K single-row commits (throughput and latency percentiles).
//! Both engines start from the same 100,000-row table of the benchmark dataset (`benches/README.md`, *Data*).
//!
//! `cargo run --release -p basalt-benches --bin write-path -- [--ops N] [--threads T] [--per-thread K]
//! [--levels buffered,process-safe,power-safe]`

#![forbid(unsafe_code)]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt::{Database, Durability, Options, Row};
use basalt_benches::{Rng, dataset, rows_of};
use rusqlite::{Connection, params};

const BASE_ROWS: usize = 100_000;

struct Stats {
    per_op: Vec<Duration>,
    wall: Duration,
}

impl Stats {
    fn pct(&self, p: f64) -> Duration {
        let mut v = self.per_op.clone();
        v.sort();
        v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default()
    }
    fn ops_per_s(&self) -> f64 {
        self.per_op.len() as f64 / self.wall.as_secs_f64()
    }
}

fn time_ops(n: usize, mut f: impl FnMut(usize)) -> Stats {
    let mut per_op = Vec::with_capacity(n);
    let start = Instant::now();
    for i in 0..n {
        let t = Instant::now();
        f(i);
        per_op.push(t.elapsed());
    }
    Stats { per_op, wall: start.elapsed() }
}

fn sqlite_open(path: &Path, sync: &str) -> Connection {
    let c = Connection::open(path).expect("open sqlite");
    c.pragma_update(None, "journal_mode", "WAL").expect("wal");
    c.pragma_update(None, "synchronous", sync).expect("sync");
    c.busy_timeout(Duration::from_secs(60)).expect("busy timeout");
    c
}

fn sqlite_setup(path: &Path) {
    let mut c = sqlite_open(path, "OFF");
    c.execute_batch(
        "CREATE TABLE bench(_id INTEGER PRIMARY KEY, name TEXT, age INTEGER, score REAL, city TEXT, category TEXT)",
    )
    .expect("create");
    let tx = c.transaction().expect("tx");
    {
        let mut st = tx
            .prepare("INSERT INTO bench(name, age, score, city, category) VALUES (?,?,?,?,?)")
            .expect("prep");
        for r in rows_of(&dataset(BASE_ROWS, 65_536, 42)) {
            st.execute(params![r.name, r.age, r.score, r.city, r.category]).expect("ins");
        }
    }
    tx.commit().expect("commit");
}

fn basalt_setup(path: &Path, durability: Durability) -> Database {
    let db = Database::open_with(path, Options { durability, ..Options::default() })
        .expect("open basalt");
    let t = db.create_table("bench", &basalt_benches::bench_schema()).expect("create");
    t.insert_batches(&dataset(BASE_ROWS, 65_536, 42)).expect("load");
    db
}

fn row(i: usize) -> Row {
    Row::new()
        .set("name", format!("oltp_{i}"))
        .set("age", 31)
        .set("score", 77.0)
        .set("city", "Beijing")
        .set("category", "Books")
}

struct Line {
    metric: String,
    basalt: Stats,
    sqlite: Stats,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    basalt_benches::alloc::keep_freed_memory();
    let mut ops = 2_000usize;
    let mut threads = 16usize;
    let mut per_thread = 1_000usize;
    let mut levels = vec![
        (Durability::Buffered, "OFF"),
        (Durability::ProcessSafe, "NORMAL"),
        (Durability::PowerSafe, "FULL"),
    ];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--ops" => ops = args.next().ok_or("--ops needs a value")?.parse()?,
            "--threads" => threads = args.next().ok_or("--threads needs a value")?.parse()?,
            "--per-thread" => {
                per_thread = args.next().ok_or("--per-thread needs a value")?.parse()?
            }
            "--levels" => {
                let want = args.next().ok_or("--levels needs a value")?;
                let names: Vec<&str> = want.split(',').collect();
                for n in &names {
                    if !["buffered", "process-safe", "power-safe"].contains(n) {
                        return Err(format!("unknown durability level {n}").into());
                    }
                }
                let name = |d: Durability| match d {
                    Durability::Buffered => "buffered",
                    Durability::ProcessSafe => "process-safe",
                    Durability::PowerSafe => "power-safe",
                };
                levels.retain(|(d, _)| names.contains(&name(*d)));
            }
            other => return Err(format!("unknown argument {other}").into()),
        }
    }
    let base = std::env::temp_dir().join(format!("basalt-write-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    let mut lines = Vec::new();
    for (level, sync) in levels {
        let bdir = base.join(format!("basalt-{level:?}"));
        let spath = base.join(format!("sqlite-{sync}.db"));
        let db = basalt_setup(&bdir, level);
        sqlite_setup(&spath);
        let t = db.table("bench")?;
        let c = sqlite_open(&spath, sync);
        let label = format!("{level:?} vs synchronous={sync}");

        // Single-row insert + commit.
        let b = time_ops(ops, |i| {
            t.insert_row(row(i)).expect("insert");
        });
        let mut ins =
            c.prepare("INSERT INTO bench(name, age, score, city, category) VALUES (?,?,?,?,?)")?;
        let s = time_ops(ops, |i| {
            ins.execute(params![format!("oltp_{i}"), 31, 77.0, "Beijing", "Books"])
                .expect("insert");
        });
        lines.push(Line {
            metric: format!("insert 1 row + commit ({label})"),
            basalt: b,
            sqlite: s,
        });

        // UPDATE by _id.
        let mut rng = Rng::new(7);
        let ids: Vec<u64> = (0..ops).map(|_| 1 + rng.next_u64() % BASE_ROWS as u64).collect();
        let b = time_ops(ops, |i| {
            t.update(ids[i], Row::new().set("score", 50.0 + i as f64)).expect("update");
        });
        let mut upd = c.prepare("UPDATE bench SET score = ? WHERE _id = ?")?;
        let s = time_ops(ops, |i| {
            upd.execute(params![50.0 + i as f64, ids[i] as i64]).expect("update");
        });
        lines.push(Line { metric: format!("UPDATE by _id ({label})"), basalt: b, sqlite: s });

        // Update, then read the row back.
        let b = time_ops(ops, |i| {
            t.update(ids[i], Row::new().set("score", 1.0 + i as f64)).expect("update");
            let r = t.get(ids[i]).expect("get").expect("row");
            assert!(r.get("score").is_some());
        });
        let mut sel = c.prepare("SELECT score FROM bench WHERE _id = ?")?;
        let s = time_ops(ops, |i| {
            upd.execute(params![1.0 + i as f64, ids[i] as i64]).expect("update");
            let v: f64 = sel.query_row(params![ids[i] as i64], |r| r.get(0)).expect("read");
            assert!(v >= 1.0);
        });
        lines.push(Line {
            metric: format!("UPDATE then read by _id ({label})"),
            basalt: b,
            sqlite: s,
        });

        // DELETE by _id (distinct ids).
        let del: Vec<u64> = (0..ops as u64).map(|i| 1 + (i * 37) % BASE_ROWS as u64).collect();
        let b = time_ops(ops, |i| {
            t.delete(del[i]).expect("delete");
        });
        let mut d = c.prepare("DELETE FROM bench WHERE _id = ?")?;
        let s = time_ops(ops, |i| {
            d.execute(params![del[i] as i64]).expect("delete");
        });
        lines.push(Line { metric: format!("DELETE by _id ({label})"), basalt: b, sqlite: s });
        drop((ins, upd, sel, d));

        // T threads × K single-row commits.
        let run_threads = |f: Arc<dyn Fn(usize, usize) + Send + Sync>| -> Stats {
            let start = Instant::now();
            let hs: Vec<_> = (0..threads)
                .map(|k| {
                    let f = f.clone();
                    std::thread::spawn(move || {
                        let mut v = Vec::with_capacity(per_thread);
                        for i in 0..per_thread {
                            let t0 = Instant::now();
                            f(k, i);
                            v.push(t0.elapsed());
                        }
                        v
                    })
                })
                .collect();
            let mut per_op = Vec::new();
            for h in hs {
                per_op.extend(h.join().expect("thread"));
            }
            Stats { per_op, wall: start.elapsed() }
        };
        let tb = t.clone();
        let b = run_threads(Arc::new(move |k, i| {
            tb.insert_row(row(k * 1_000_000 + i)).expect("insert");
        }));
        let sp = spath.clone();
        let conns: Arc<Vec<parking::Pool>> =
            Arc::new((0..threads).map(|_| parking::Pool::new(&sp, sync)).collect());
        let s = run_threads(Arc::new(move |k, i| {
            conns[k].insert(k * 1_000_000 + i);
        }));
        lines.push(Line {
            metric: format!("{threads} threads x {per_thread} commits ({label})"),
            basalt: b,
            sqlite: s,
        });
        db.close()?;
    }

    println!(
        "| metric | Basalt ops/s | SQLite ops/s | ratio (Basalt/SQLite) | Basalt p50 / p99 µs | SQLite p50 / p99 µs |"
    );
    println!("|---|--:|--:|--:|--:|--:|");
    for l in &lines {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "| {} | {:.0} | {:.0} | {:.2} | {:.1} / {:.1} | {:.1} / {:.1} |",
            l.metric,
            l.basalt.ops_per_s(),
            l.sqlite.ops_per_s(),
            l.basalt.ops_per_s() / l.sqlite.ops_per_s(),
            us(l.basalt.pct(0.5)),
            us(l.basalt.pct(0.99)),
            us(l.sqlite.pct(0.5)),
            us(l.sqlite.pct(0.99)),
        );
    }
    for l in lines.iter().filter(|l| l.metric.contains("threads")) {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        println!(
            "{}: p95 Basalt {:.1} µs, SQLite {:.1} µs",
            l.metric,
            us(l.basalt.pct(0.95)),
            us(l.sqlite.pct(0.95))
        );
    }
    std::fs::remove_dir_all(&base)?;
    Ok(())
}

/// One SQLite connection per thread behind a mutex (rusqlite connections are `Send`, not
/// `Sync`).
mod parking {
    use std::path::Path;
    use std::sync::Mutex;

    use rusqlite::params;

    pub struct Pool(Mutex<rusqlite::Connection>);

    impl Pool {
        pub fn new(path: &Path, sync: &str) -> Self {
            Pool(Mutex::new(super::sqlite_open(path, sync)))
        }
        pub fn insert(&self, i: usize) {
            let c = self.0.lock().expect("connection");
            let mut st = c
                .prepare_cached(
                    "INSERT INTO bench(name, age, score, city, category) VALUES (?,?,?,?,?)",
                )
                .expect("prepare");
            st.execute(params![format!("oltp_{i}"), 31, 77.0, "Beijing", "Books"]).expect("insert");
        }
    }
}
