//! The benchmark dataset (`benches/README.md`, *Data*): the benchmark table (`name`, `age`, `score`, `city`,
//! `category`) generated in order from a seeded SplitMix64, and the `meta(city, pop)` table.
//!
//! Owns the exact values every benchmark engine and the `basalt demo` command load, so a
//! demo run and a benchmark run see the same rows. It must not depend on any Basalt crate
//! (only Arrow): both `benches` and `cli` use it, beside the engine.

#![forbid(unsafe_code)]

use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

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

/// The benchmark dataset (`benches/README.md`, *Data*): `rows` rows generated in order with seed `seed`, cut into
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

/// The `meta(city, pop)` table of §1.
pub const META: [(&str, i64); 10] = [
    ("Beijing", 21_540_000),
    ("Shanghai", 24_870_000),
    ("Guangzhou", 18_680_000),
    ("Shenzhen", 17_680_000),
    ("Hangzhou", 10_360_000),
    ("Nanjing", 9_490_000),
    ("Chengdu", 20_940_000),
    ("Wuhan", 13_690_000),
    ("Xian", 13_150_000),
    ("Qingdao", 9_480_000),
];

/// The seed of the benchmark dataset.
pub const SEED: u64 = 42;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dataset_is_reproducible_and_in_range() {
        let a = dataset(1000, 300, SEED);
        let b = dataset(1000, 300, SEED);
        assert_eq!(a, b);
        assert_eq!(a.iter().map(|b| b.num_rows()).collect::<Vec<_>>(), vec![300, 300, 300, 100]);
        let age = a[3].column(1).as_any().downcast_ref::<Int64Array>().map(|a| a.values().to_vec());
        assert!(age.unwrap_or_default().iter().all(|v| (18..=80).contains(v)));
        let name =
            a[3].column(0).as_any().downcast_ref::<StringArray>().map(|n| n.value(99).to_string());
        assert_eq!(name.as_deref(), Some("user_999"));
        assert_ne!(dataset(10, 10, SEED), dataset(10, 10, SEED + 1));
    }
}
