//! # basalt-vector
//!
//! Owns the vector math of Basalt: distance metrics over `f32` vectors, the kernels that
//! compute them, and exact top-k selection. It is a leaf crate: it must not depend on
//! storage, SQL or the engine, and it knows nothing of tables — callers hand it blocks of
//! rows (a row-major `n × D` slice plus the rows' `_id`s) and it keeps one bounded heap per
//! query.
//!
//! - [`metric`]: the four metrics, their names, the pairwise [`distance`] (simsimd, with a
//!   portable fallback) and the `f64` scalar [`reference_distance`] everything is tested
//!   against.
//! - [`kernel`]: the register-blocked kernel of the top-k scan — tiles of 4 rows × 2 queries
//!   in AVX2/FMA registers on x86-64 (detected at run time; one long row at a time for a
//!   single query), portable code elsewhere. Each (row, query) pair is accumulated in the
//!   same order whatever the tile shape, so a batch of queries returns bit for bit what the
//!   queries return one by one. Int8 rows meet
//!   int8-quantised queries in integer sums (`kernel::int8`, AVX-VNNI where the CPU has it).
//! - [`topk`]: validated query sets ([`Queries`]), bounded heaps ([`TopK`]), the block scan
//!   ([`search_block`], [`search_rows`], [`search_positions`]) and the final ranking ([`Neighbor`]). Ties in
//!   distance are broken by the smaller `_id`.
//! - [`stored`]: the forms a column stores vectors in ([`StoredForm`]: float32, float16,
//!   int8 with a step and offset per row), the rounding each applies on insert, and int8
//!   rows as the kernel reads them ([`RowCodes`]).
//! - [`quant`]: half-float and int8 copies of a block ([`Quantized`]) for approximate scans
//!   whose candidates are rescored exactly, and the [`Precision`] a search asks for.
//!
//! ## Semantics (what every layer above inherits)
//! - `l2sq`: Σ (xᵢ − qᵢ)²; `l2`: its square root; `dot`: −Σ xᵢ·qᵢ (inner product as a
//!   distance, smaller is closer); `cosine`: 1 − x·q / (‖x‖·‖q‖).
//! - A stored vector with zero norm has no cosine distance (SQL's `cosine_distance` returns
//!   NULL for it): such rows are never returned under `cosine`. Rows whose distance is not a
//!   number (a stored NaN or infinite component) are never returned either.
//! - Queries must have the column's dimension and finite components; a zero query under
//!   `cosine` is an error. `k = 0` returns nothing; `k` larger than the candidates returns
//!   every candidate.

pub mod kernel;
pub mod metric;
pub mod quant;
pub mod stored;
pub mod topk;

pub use metric::{Metric, distance, reference_distance};
pub use quant::{Precision, Quantization, Quantized};
pub use stored::{RoundError, RowCodes, StoredForm};
pub use topk::{Neighbor, Queries, TopK, search_block, search_positions, search_rows};

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Bad vector input. Every variant says which query or what value is wrong.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A vector does not have the column's dimension.
    #[error("query {query}: expected a vector of dimension {expected}, got {found}")]
    Dimension {
        /// Which query (0 for a single one).
        query: usize,
        /// The column's dimension.
        expected: usize,
        /// The vector's length.
        found: usize,
    },
    /// A query component is NaN or infinite.
    #[error("query {query}: component {index} is {value}, not a finite number")]
    NonFinite {
        /// Which query.
        query: usize,
        /// Which component.
        index: usize,
        /// The value found.
        value: f32,
    },
    /// A zero query vector under the cosine metric (its direction is undefined).
    #[error("query {query}: a zero vector has no cosine distance")]
    ZeroVector {
        /// Which query.
        query: usize,
    },
    /// An unknown metric name.
    #[error("unknown vector metric '{0}' (expected l2, l2sq, cosine or dot)")]
    UnknownMetric(String),
    /// No queries were given, or the dimension is zero.
    #[error("{0}")]
    Empty(&'static str),
}
