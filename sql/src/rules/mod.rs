//! The rules Basalt adds to DataFusion's planner, in the order a connection installs them:
//!
//! 1. [`checked::CheckedArithmetic`] (analyzer): integer arithmetic and `sum` that fail on
//!    overflow instead of wrapping.
//! 2. [`dictionary::FuseGroupBy`] (physical): the execs that read dictionary codes —
//!    per-entry filters, semi-join reduction, dictionary joins, fused group-bys.
//! 3. [`vector_topk::VectorTopKRule`] (physical): `ORDER BY <distance> LIMIT k` answered by
//!    the storage top-k.
//! 4. [`bucket_sort::BucketSortRule`] (physical): sorts under a limit emitted one
//!    dictionary value at a time.
//! 5. [`serial::SmallLimitSerial`] (physical): no round-robin repartition above a small
//!    limited input.
//! 6. [`recursion::RecursionLimit`] (physical): a bound on the iterations of `WITH
//!    RECURSIVE`.
//!
//! Rules 2–5 are fast paths, off with `Connection::set_fast_paths(false)`; 1 and 6 are
//! always on. The execs they place live in [`crate::exec`].
//!
//! What this module must not do: change what a query returns.

pub mod bucket_sort;
pub mod checked;
pub mod dictionary;
pub mod recursion;
pub mod serial;
pub mod vector_topk;
