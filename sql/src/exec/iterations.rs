//! The execs that count a recursive query's iterations (placed by
//! [`RecursionLimit`](crate::rules::recursion::RecursionLimit), whose docs say how).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// Counts the runs of a recursive term; fails past the limit (see the module docs).
#[derive(Debug)]
pub struct CountIterations {
    input: Arc<dyn ExecutionPlan>,
    count: Arc<AtomicUsize>,
    limit: usize,
}

impl CountIterations {
    pub(crate) fn new(
        input: Arc<dyn ExecutionPlan>,
        count: Arc<AtomicUsize>,
        limit: usize,
    ) -> Self {
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
    pub(crate) fn new(input: Arc<dyn ExecutionPlan>, count: Arc<AtomicUsize>) -> Self {
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
