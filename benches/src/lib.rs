//! Shared pieces of Basalt's benchmarks: the WORKLOAD.md §1 dataset generator and small
//! measurement helpers. The binaries in `src/bin/` use them; nothing here is timed itself.

pub mod check;

use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

/// The ten cities of the workload, in order.
pub const CITIES: [&str; 10] = [
    "Beijing",
    "Shanghai",
    "Guangzhou",
    "Shenzhen",
    "Hangzhou",
    "Nanjing",
    "Chengdu",
    "Wuhan",
    "Xian",
    "Qingdao",
];
/// The ten categories of the workload, in order.
pub const CATEGORIES: [&str; 10] = [
    "Electronics",
    "Clothing",
    "Food",
    "Sports",
    "Books",
    "Home",
    "Auto",
    "Health",
    "Travel",
    "Gaming",
];

/// SplitMix64: a small, seeded, reproducible generator.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator with the given seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform integer in `lo..=hi`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next_u64() % (hi - lo + 1) as u64) as i64
    }
}

/// Schema of the benchmark table (user columns; Basalt adds `_id`).
pub fn bench_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int64, false),
        Field::new("score", DataType::Float64, false),
        Field::new("city", DataType::Utf8, false),
        Field::new("category", DataType::Utf8, false),
    ]))
}

/// The WORKLOAD.md §1 dataset: `rows` rows generated in order with seed `seed`, cut into
/// batches of `batch_rows`. name = `user_{i}`, age uniform 18..=80, score uniform 0..100 with
/// two decimals, city and category uniform over ten values each.
pub fn dataset(rows: usize, batch_rows: usize, seed: u64) -> Vec<RecordBatch> {
    let mut rng = Rng::new(seed);
    let schema = bench_schema();
    let mut out = Vec::new();
    let mut start = 0;
    while start < rows {
        let n = batch_rows.min(rows - start);
        let mut age = Vec::with_capacity(n);
        let mut score = Vec::with_capacity(n);
        let mut city = Vec::with_capacity(n);
        let mut cat = Vec::with_capacity(n);
        for _ in 0..n {
            age.push(rng.range(18, 80));
            score.push(rng.range(0, 10_000) as f64 / 100.0);
            city.push(CITIES[rng.range(0, 9) as usize]);
            cat.push(CATEGORIES[rng.range(0, 9) as usize]);
        }
        let name = StringArray::from_iter_values((start..start + n).map(|i| format!("user_{i}")));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(name),
                Arc::new(Int64Array::from(age)),
                Arc::new(Float64Array::from(score)),
                Arc::new(StringArray::from(city)),
                Arc::new(StringArray::from(cat)),
            ],
        )
        .expect("dataset batch matches its schema");
        out.push(batch);
        start += n;
    }
    out
}

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
