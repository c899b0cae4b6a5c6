//! OLAP throughput (`benches/README.md`, *Metrics*, DIAG): a mix of `COUNT(*)`, two 10-group GROUP BYs and a
//! filtered `LIMIT 100`, run round-robin for a fixed time by 1 and by 4 threads. Each thread
//! has its own handle on the engine's database (`Engine::fork`), as the workload gives
//! SQLite and DuckDB one connection per thread. Reported as seconds per query (Q/s = 1/x) so
//! that lower is better like every other row; not ranked.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::engines::{Engine, Res};
use crate::metrics::Group;
use crate::report::{Cell, Line};

/// The query mix.
pub const MIX: [&str; 4] = [
    "SELECT COUNT(*) FROM bench",
    "SELECT city, COUNT(*) FROM bench GROUP BY city",
    "SELECT category, AVG(score) FROM bench GROUP BY category",
    "SELECT * FROM bench WHERE age > 30 LIMIT 100",
];

/// Seconds per query of `threads` threads running the mix for `span`.
pub fn measure(e: &dyn Engine, threads: usize, span: Duration) -> Res<f64> {
    let mut forks = (0..threads).map(|_| e.fork()).collect::<Res<Vec<_>>>()?;
    // Warm every handle once (prepares the statements), untimed.
    for f in forks.iter_mut() {
        for q in MIX {
            f.query(q, &[])?;
        }
    }
    let start = Instant::now();
    let counts = std::thread::scope(|s| {
        let handles: Vec<_> = forks
            .iter_mut()
            .map(|f| {
                s.spawn(move || -> Res<u64> {
                    let mut n = 0u64;
                    while start.elapsed() < span {
                        for q in MIX {
                            f.query(q, &[])?;
                            n += 1;
                        }
                    }
                    Ok(n)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| "a throughput thread panicked".to_string())?)
            .collect::<Res<Vec<u64>>>()
    })?;
    let total: u64 = counts.iter().sum();
    Ok(start.elapsed().as_secs_f64() / total.max(1) as f64)
}

/// The two report lines (1 and 4 threads) over every engine.
pub fn lines(engines: &[Box<dyn Engine>], span: Duration, failures: &mut Vec<String>) -> Vec<Line> {
    [1usize, 4]
        .into_iter()
        .map(|threads| {
            let mut cells = BTreeMap::new();
            for e in engines {
                let cell = match measure(e.as_ref(), threads, span) {
                    Ok(s) => Cell::Secs(s),
                    Err(err) => {
                        failures.push(format!("DIAG-QPS{threads} on {}: {err}", e.kind().name()));
                        Cell::Error(err)
                    }
                };
                cells.insert(e.kind(), cell);
            }
            let line = Line {
                id: format!("DIAG-QPS{threads}"),
                name: format!("OLAP mix throughput, {threads} thread(s): s per query (Q/s = 1/x)"),
                group: Group::Diagnostics,
                mode: "fixed time",
                ranked: false,
                cells,
                mismatch: None,
            };
            eprintln!("{:<9} {}", line.id, line.name);
            line
        })
        .collect()
}
