//! Shared pieces of Basalt's benchmarks: the benchmark dataset (`benches/README.md`, *Data*)
//! generator, the TPC-H queries ([`tpch`]), the ClickBench queries ([`clickbench`]) and their
//! `hits` table generator ([`hits`]), and small measurement helpers. The binaries in `src/bin/` use them; nothing here is timed itself.

#![deny(unsafe_code)]

// Setting the allocator's options takes one FFI call.
#[allow(unsafe_code)]
pub mod alloc;

pub mod check;
pub mod clickbench;
pub mod hits;
pub mod tpch;

use std::time::{Duration, Instant};

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};

pub use basalt_dataset::{CATEGORIES, CITIES, Rng, bench_schema, dataset};

/// One row of the benchmark table, owned (for engines that take rows, not Arrow batches).
#[derive(Debug, Clone, PartialEq)]
pub struct BenchRow {
    /// `user_{i}`.
    pub name: String,
    /// 18..=80.
    pub age: i64,
    /// 0..=100, two decimals.
    pub score: f64,
    /// One of [`CITIES`].
    pub city: &'static str,
    /// One of [`CATEGORIES`].
    pub category: &'static str,
}

fn intern(v: &str, from: &[&'static str]) -> &'static str {
    from.iter().copied().find(|c| *c == v).unwrap_or("?")
}

/// The rows of batches of [`bench_schema`] (as [`dataset`] makes them), in order.
pub fn rows_of(batches: &[RecordBatch]) -> Vec<BenchRow> {
    let mut rows = Vec::with_capacity(batches.iter().map(|b| b.num_rows()).sum());
    for b in batches {
        let text = |i: usize| b.column(i).as_any().downcast_ref::<StringArray>();
        let name = text(0).expect("name is Utf8");
        let age = b.column(1).as_any().downcast_ref::<Int64Array>().expect("age is Int64");
        let score = b.column(2).as_any().downcast_ref::<Float64Array>().expect("score is Float64");
        let (city, cat) = (text(3).expect("city is Utf8"), text(4).expect("category is Utf8"));
        for i in 0..b.num_rows() {
            rows.push(BenchRow {
                name: name.value(i).to_string(),
                age: age.value(i),
                score: score.value(i),
                city: intern(city.value(i), &CITIES),
                category: intern(cat.value(i), &CATEGORIES),
            });
        }
    }
    rows
}

/// Times `f`, returning its result and the elapsed time.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed())
}

/// Median of durations (upper median for even counts).
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Total size of the files under `dir`.
pub fn dir_size(dir: &std::path::Path) -> std::io::Result<u64> {
    let mut total = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        total += if m.is_dir() { dir_size(&e.path())? } else { m.len() };
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_follows_the_workload_distributions() {
        let b = dataset(20_000, 7_000, 1);
        assert_eq!(b.len(), 3);
        let all = arrow::compute::concat_batches(&bench_schema(), &b).unwrap();
        let age = all.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        assert!(age.values().iter().all(|a| (18..=80).contains(a)));
        let over30 = age.values().iter().filter(|&&a| a > 30).count() as f64 / 20_000.0;
        assert!((0.76..0.82).contains(&over30), "{over30}");
        let names = all.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(names.value(19_999), "user_19999");
        let score = all.column(2).as_any().downcast_ref::<Float64Array>().unwrap();
        assert!(
            score
                .values()
                .iter()
                .all(|s| (0.0..=100.0).contains(s) && (s * 100.0).round() / 100.0 == *s)
        );
        // Same seed, same data.
        assert_eq!(dataset(100, 100, 5), dataset(100, 100, 5));
        let rows = rows_of(&b);
        assert_eq!(rows.len(), 20_000);
        assert_eq!(rows[19_999].name, "user_19999");
        assert_eq!(rows[7].age, age.value(7));
        assert!(rows.iter().all(|r| r.city != "?" && r.category != "?"));
    }
}
