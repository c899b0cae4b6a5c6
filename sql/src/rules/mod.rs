//! The rules Basalt adds to DataFusion's planner, in the order a connection installs them:
//!
//! 1. [`checked::CheckedArithmetic`] (analyzer): integer arithmetic and `sum` that fail on
//!    overflow instead of wrapping.
//! 2. [`sum_shift::SumShift`] (analyzer): `sum(x + c)` as `sum(x) + c * count(x)` when an
//!    aggregate lists several shifts of one column.
//! 3. [`dictionary::FuseGroupBy`] (physical): the execs that read dictionary codes —
//!    per-entry filters, semi-join reduction, dictionary joins, fused group-bys.
//! 4. [`vector_topk::VectorTopKRule`] (physical): `ORDER BY <distance> LIMIT k` answered by
//!    the storage top-k.
//! 5. [`bucket_sort::BucketSortRule`] (physical): sorts under a limit emitted one
//!    dictionary value at a time.
//! 6. [`serial::SmallLimitSerial`] (physical): no round-robin repartition above a small
//!    limited input.
//! 7. [`recursion::RecursionLimit`] (physical): a bound on the iterations of `WITH
//!    RECURSIVE`.
//!
//! Rules 3–6 are fast paths, off with `Connection::set_fast_paths(false)`; 1, 2 and 7 are
//! always on. The execs they place live in [`crate::exec`].
//!
//! What this module must not do: change what a query returns.

pub mod bucket_sort;
pub mod checked;
pub mod dictionary;
pub mod recursion;
pub mod serial;
pub mod sum_shift;
pub mod vector_topk;
