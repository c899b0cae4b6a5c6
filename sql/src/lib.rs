//! # basalt-sql
//!
//! The DataFusion front end: the catalog over a connection's native tables
//! ([`catalog`]), the `TableProvider` and scan exec over storage snapshots with projection,
//! filter and limit pushdown ([`provider`], [`pushdown`]), the statement dispatcher that
//! sends each statement to DataFusion or to storage ([`connection`]), the direct path that
//! runs simple single-table statements on storage without planning (`direct`), the
//! execution plans Basalt adds — DML onto the connection's transaction, the fused group-by
//! on dictionary codes, per-entry filters, semi-join reduction, dictionary joins, bucket
//! sorts, the vector search exec ([`exec`]) — and the rules that place them ([`rules`]),
//! vector search in SQL — distance functions and `vector_topk` ([`vector`]) — full-text
//! search in SQL — `CREATE / DROP FTS INDEX`, `fts_search`, `fts_match` ([`fts`]) — the
//! rewrites that hide `_id` from `SELECT *` ([`rewrite`]), SQL over files ([`files`]), the
//! `VECTOR(D)` type ([`types`]) and the scalar functions Basalt adds ([`functions`]).
//!
//! What this crate must not do: touch files of its own (storage does), or be used by
//! anything but `basalt` (the engine crate), which wraps it in the public API.

#![forbid(unsafe_code)]

/// `ExecutionPlan::apply_expressions` of an exec holding no physical expressions of its own
/// (inside an `impl ExecutionPlan` block).
macro_rules! no_expressions {
    () => {
        fn apply_expressions(
            &self,
            _f: &mut dyn FnMut(
                &std::sync::Arc<dyn datafusion::physical_expr::PhysicalExpr>,
            ) -> datafusion::common::Result<
                datafusion::common::tree_node::TreeNodeRecursion,
            >,
        ) -> datafusion::common::Result<datafusion::common::tree_node::TreeNodeRecursion> {
            Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
        }
    };
}

/// The child-related `ExecutionPlan` methods of a leaf exec (no children, no expressions),
/// inside an `impl ExecutionPlan` block.
macro_rules! leaf_exec {
    () => {
        fn children(&self) -> Vec<&std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>> {
            vec![]
        }

        no_expressions!();

        fn with_new_children(
            self: std::sync::Arc<Self>,
            _children: Vec<std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>>,
        ) -> datafusion::common::Result<
            std::sync::Arc<dyn datafusion::physical_plan::ExecutionPlan>,
        > {
            Ok(self)
        }
    };
}

mod bare_columns;
pub mod binding;
pub mod catalog;
pub mod checks;
mod codes;
pub mod connection;
mod constant;
pub mod depth;
mod direct;
pub mod error;
pub mod exec;
pub mod files;
pub mod fts;
pub mod functions;
mod index_lookup;
pub mod ndjson;
mod parse;
pub mod pool;
mod prepare;
pub mod provider;
pub mod pushdown;
mod registered;
pub mod rewrite;
pub mod rules;
pub mod script;
mod sqlite_compat;
pub mod types;
mod unique_names;
pub mod vector;

pub use connection::{Prepared, SqlConnection};
pub use error::{Error, Result};
pub use parse::RESERVED_PREFIX;

/// DataFusion and Arrow as this crate uses them (for the engine's signatures).
pub use datafusion;

/// The cores this process may use (`std::thread::available_parallelism`, 1 if unknown),
/// read once: the standard library reads the cgroup's CPU quota files at every call, which
/// cost ~15 µs of syscalls per SQL connection and per direct aggregate.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}
