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

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::recursive_query::RecursiveQueryExec;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

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

/// Counts the runs of a recursive term; fails past the limit (see the module docs).
#[derive(Debug)]
pub struct CountIterations {
    input: Arc<dyn ExecutionPlan>,
    count: Arc<AtomicUsize>,
    limit: usize,
}

impl CountIterations {
    fn new(input: Arc<dyn ExecutionPlan>, count: Arc<AtomicUsize>, limit: usize) -> Self {
        CountIterations { input, count, limit }
    }
}

/// Starts each execution of a bounded recursive query at zero iterations.
#[derive(Debug)]
pub struct ResetIterations {
    input: Arc<dyn ExecutionPlan>,
    count: Arc<AtomicUsize>,
}

impl ResetIterations {
    fn new(input: Arc<dyn ExecutionPlan>, count: Arc<AtomicUsize>) -> Self {
        ResetIterations { input, count }
    }
}

impl DisplayAs for CountIterations {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BasaltRecursionLimit: iterations={}", self.limit)
    }
}

impl DisplayAs for ResetIterations {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BasaltRecursionStart")
    }
}

/// The `ExecutionPlan` methods of a one-input pass-through exec.
macro_rules! pass_through {
    ($name:literal) => {
        fn name(&self) -> &str {
            $name
        }

        fn properties(&self) -> &Arc<PlanProperties> {
            self.input.properties()
        }

        fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
            vec![&self.input]
        }

        no_expressions!();
    };
}

fn one_child(
    mut children: Vec<Arc<dyn ExecutionPlan>>,
    name: &str,
) -> Result<Arc<dyn ExecutionPlan>> {
    match (children.pop(), children.is_empty()) {
        (Some(c), true) => Ok(c),
        _ => Err(DataFusionError::Internal(format!("{name} takes one input"))),
    }
}

impl ExecutionPlan for CountIterations {
    pass_through!("BasaltRecursionLimit");

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = one_child(children, self.name())?;
        Ok(Arc::new(CountIterations::new(input, self.count.clone(), self.limit)))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let n = self.count.fetch_add(1, Ordering::Relaxed) + 1;
        if n > self.limit {
            return Err(DataFusionError::Execution(format!(
                "recursive query stopped after {} iterations (the recursion limit; \
                 Options::max_recursion): does its recursive part have a stopping condition?",
                self.limit
            )));
        }
        self.input.execute(partition, context)
    }
}

impl ExecutionPlan for ResetIterations {
    pass_through!("BasaltRecursionStart");

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = one_child(children, self.name())?;
        Ok(Arc::new(ResetIterations::new(input, self.count.clone())))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        self.count.store(0, Ordering::Relaxed);
        self.input.execute(partition, context)
    }
}
