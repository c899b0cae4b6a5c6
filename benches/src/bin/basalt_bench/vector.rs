//! WORKLOAD.md §3, the vector module: 1M × 128 float32 vectors uniform in [0, 1), k = 10;
//! top-k by L2, cosine and dot, one query and a batch of 10. Basalt's vector search has not
//! landed (issue 7) and SQLite needs the sqlite-vector extension, so both report N/A;
//! DuckDB runs `ORDER BY array_distance(...) LIMIT 10` per query.

use std::collections::BTreeMap;
use std::path::Path;

use crate::engines::{Kind, Res};
use crate::metrics::Group;
use crate::report::{Cell, Line};

/// Dimension.
pub const DIM: usize = 128;

/// The three metrics: name, DuckDB distance function.
pub const METRICS: [(&str, &str); 3] = [
    ("L2", "array_distance"),
    ("cosine", "array_cosine_distance"),
    ("dot", "array_negative_inner_product"),
];

#[cfg_attr(not(feature = "duckdb"), allow(dead_code))]
/// Uniform [0, 1) floats from a seeded generator.
pub fn vectors(rows: usize, seed: u64) -> Vec<f32> {
    let mut rng = basalt_benches::Rng::new(seed);
    (0..rows * DIM).map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32).collect()
}

#[cfg_attr(not(feature = "duckdb"), allow(dead_code))]
/// A vector as an SQL array literal.
pub fn literal(v: &[f32]) -> String {
    let parts: Vec<String> = v.iter().map(|x| format!("{x}")).collect();
    format!("[{}]::FLOAT[{DIM}]", parts.join(", "))
}

/// Runs §3 and returns its report lines and a Markdown note.
pub fn run(
    rows: usize,
    engines: &[Kind],
    warmup: usize,
    iterations: usize,
    work: &Path,
    failures: &mut Vec<String>,
) -> Res<(Vec<Line>, String)> {
    let mut lines = Vec::new();
    let figures = duck_figures(rows, engines, warmup, iterations, work).unwrap_or_else(|e| {
        failures.push(format!("VEC on duckdb: {e}"));
        BTreeMap::new()
    });
    for (name, _) in METRICS {
        for batch in [false, true] {
            let id = format!("VEC-{name}{}", if batch { "-batch10" } else { "" });
            let mut cells = BTreeMap::new();
            for k in engines {
                let c = match k {
                    Kind::Basalt => Cell::Na("vector search has not landed (issue 7)".into()),
                    Kind::Sqlite => {
                        Cell::Na("needs the sqlite-vector extension (not bundled)".into())
                    }
                    Kind::Duckdb => match figures.get(&id) {
                        Some(s) => Cell::Secs(*s),
                        None => Cell::Error("no figure".into()),
                    },
                };
                cells.insert(*k, c);
            }
            lines.push(Line {
                id: id.clone(),
                name: format!(
                    "Top-10 {name}, {rows} × {DIM} f32{}",
                    if batch { ", 10 queries" } else { "" }
                ),
                group: Group::Vector,
                mode: "median",
                ranked: true,
                cells,
                mismatch: None,
            });
        }
    }
    let md = format!(
        "\n## Vector module (WORKLOAD.md §3)\n\n{rows} × {DIM} float32 vectors uniform in [0, 1), k = 10; \
         DuckDB: `ORDER BY <distance>(vec, [...]::FLOAT[{DIM}]) LIMIT 10` materialised through Arrow, the \
         batch as 10 sequential queries. Basalt reports N/A until its vector search lands.\n"
    );
    Ok((lines, md))
}

#[cfg(feature = "duckdb")]
fn duck_figures(
    rows: usize,
    engines: &[Kind],
    warmup: usize,
    iterations: usize,
    work: &Path,
) -> Res<BTreeMap<String, f64>> {
    if !engines.contains(&Kind::Duckdb) {
        return Ok(BTreeMap::new());
    }
    crate::duck::vector_figures(rows, warmup, iterations, work)
}

#[cfg(not(feature = "duckdb"))]
fn duck_figures(
    _rows: usize,
    _engines: &[Kind],
    _warmup: usize,
    _iterations: usize,
    _work: &Path,
) -> Res<BTreeMap<String, f64>> {
    Ok(BTreeMap::new())
}
