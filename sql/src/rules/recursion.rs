//! A bound on the iterations of a recursive query (`WITH RECURSIVE`).
//!
//! DataFusion runs a recursive term again as long as the last run produced rows, so a
//! recursion without a stopping condition (`SELECT n + 1 FROM r`) never ends. The rule
//! [`RecursionLimit`] wraps every `RecursiveQueryExec`: [`ResetIterations`] above it
//! starts each execution at zero, and [`CountIterations`] at the root of its recursive
//! term counts the term's runs — one per iteration — and fails the query past the limit
//! ("recursive query stopped after N iterations"). Always on (not a fast path): it changes
//! no answer of a recursion that ends within the limit.
//!
//! What this module must not do: count anything but the runs of the recursive term.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::exec::iterations::{CountIterations, ResetIterations};
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;

/// Iterations a recursive query may run by default.
pub const DEFAULT_MAX_RECURSION: usize = 1_000_000;

/// The rule (see the module docs).
#[derive(Debug)]
pub struct RecursionLimit {
    limit: usize,
}

impl RecursionLimit {
    /// Recursive queries stop with an error after `limit` iterations.
    pub fn new(limit: usize) -> RecursionLimit {
        RecursionLimit { limit }
    }
}

impl PhysicalOptimizerRule for RecursionLimit {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(|p| {
            let Some(r) = p.downcast_ref::<RecursiveQueryExec>() else {
                return Ok(Transformed::no(p));
            };
            if r.recursive_term().downcast_ref::<CountIterations>().is_some() {
                return Ok(Transformed::no(p)); // already bounded
            }
            let count = Arc::new(AtomicUsize::new(0));
            let term = Arc::new(CountIterations::new(
                r.recursive_term().clone(),
                count.clone(),
                self.limit,
            ));
            let bounded = Arc::new(RecursiveQueryExec::try_new(
                r.name().to_string(),
                r.schema(),
                r.static_term().clone(),
                term,
                r.is_distinct(),
            )?);
            Ok(Transformed::yes(Arc::new(ResetIterations::new(bounded, count))))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_recursion_limit"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
