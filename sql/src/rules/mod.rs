//! The rules Basalt adds to DataFusion's planner, in the order a connection installs them:
//!
//! 1. [`checked::CheckedArithmetic`] (analyzer): integer arithmetic and `sum` that fail on
//!    overflow instead of wrapping.
//! 2. [`decimal::DecimalArithmetic`] (analyzer): decimal `+`, `-`, `*` in tight loops that
//!    fall back to Arrow's kernels on overflow.
//! 3. [`sum_shift::SumShift`] (analyzer): `sum(x + c)` as `sum(x) + c * count(x)` when an
//!    aggregate lists several shifts of one column.
//! 4. [`in_list_nulls::InListNulls`] (analyzer): pairs of IN lists that DataFusion's
//!    simplifier would fold to a constant keep their NULL answer.
//! 5. [`subquery_fallback::SubqueryFallback`] (analyzer): on the second attempt at a
//!    statement whose subqueries DataFusion could not plan, every subquery as a call that
//!    runs it per distinct outer values (before 6 and 7, which then find none).
//! 6. [`in_subquery::InSubqueryValue`] (analyzer): `x IN (subquery)` as a value in a
//!    `SELECT` list, spelled with scalar subqueries DataFusion plans.
//! 7. [`scalar_subquery::CorrelatedScalarSubquery`] (analyzer): correlated scalar
//!    subqueries DataFusion cannot decorrelate (non-equality correlation), as joins.
//! 8. [`share_subplans::ShareSubplans`] (logical optimizer): joins and aggregates a
//!    statement repeats (a CTE named twice, a join spelled in a query and its subquery)
//!    computed once, through the session's [`share_subplans::BasaltQueryPlanner`].
//! 9. [`join_order::JoinOrder`] (logical optimizer): clusters of inner joins in the order
//!    of estimated sizes.
//! 10. [`dml_filters::InlineDmlCommonExprs`] (logical optimizer): DELETE / UPDATE
//!     predicates with DataFusion's common subexpressions put back, so the table provider
//!     can read them.
//! 11. [`dictionary::FuseGroupBy`] (physical): the execs that read dictionary codes —
//!     per-entry filters, semi-join reduction, dictionary joins, fused group-bys — and
//!     `count` / `min` / `max` answered from row-group metadata.
//! 12. [`join_keys::JoinKeysThrough`] (physical): a hash join's key filter given to the
//!     scans below an aggregate or join that DataFusion's pushdown stops at.
//! 13. [`vector_topk::VectorTopKRule`] (physical): `ORDER BY <distance> LIMIT k` answered
//!     by the storage top-k.
//! 14. [`bucket_sort::BucketSortRule`] (physical): sorts under a limit emitted one
//!     dictionary value at a time.
//! 15. [`serial::SmallLimitSerial`] (physical): no round-robin repartition above a small
//!     limited input.
//! 16. [`recursion::RecursionLimit`] (physical): a bound on the iterations of `WITH
//!     RECURSIVE`.
//!
//! Rules 8, 9 and 11–15 are fast paths, off with `Connection::set_fast_paths(false)`; 1–7, 10
//! and 16 are always on. The execs they place live in [`crate::exec`].
//!
//! What this module must not do: change what a query returns.

pub mod bucket_sort;
pub mod checked;
pub mod decimal;
pub mod dictionary;
pub mod dml_filters;
pub mod in_list_nulls;
pub mod in_subquery;
pub mod join_keys;
pub mod join_order;
pub mod recursion;
pub mod scalar_subquery;
pub mod serial;
pub mod share_subplans;
pub mod subquery_fallback;
pub mod sum_shift;
pub mod vector_topk;
