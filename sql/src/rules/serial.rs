//! Round-robin repartitions above a small limited input are dropped.
//!
//! DataFusion's distribution pass puts `RepartitionExec(RoundRobinBatch(n))` above a
//! single-partition input so the operators above it run on `n` partitions. Above a limit of
//! a few thousand rows (`SELECT ROUND(score, 0), … WHERE … LIMIT 1000`: scan → limit →
//! partition merge → round robin → projection) there are too few rows to share out, and the
//! repartition only adds tasks and cross-thread hand-offs: a quarter of that query's time
//! was the kernel switching threads.
//!
//! When it applies: a [`RepartitionExec`] with round-robin partitioning whose input stops
//! after at most [`SMALL_FETCH`] rows (its `fetch`, as a limit or a partition merge with a
//! fetch reports it). The repartition is replaced by its input. Round-robin partitioning
//! promises no distribution and no ordering to the operators above, so nothing above
//! depends on it; they run on one partition instead. The rule is off with the connection's
//! fast paths.
//!
//! What this module must not do: remove a hash repartition, or a round-robin one whose
//! input is not bounded by a small fetch (there the parallelism pays).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{ExecutionPlan, Partitioning};

/// Inputs that stop after at most this many rows are not repartitioned round robin.
pub const SMALL_FETCH: usize = 8192;

/// The rule (see the module docs).
#[derive(Debug)]
pub struct SmallLimitSerial {
    enabled: Arc<AtomicBool>,
}

impl SmallLimitSerial {
    /// A rule that applies while `enabled` is true.
    pub fn new(enabled: Arc<AtomicBool>) -> SmallLimitSerial {
        SmallLimitSerial { enabled }
    }
}

impl PhysicalOptimizerRule for SmallLimitSerial {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Ok(plan);
        }
        plan.transform_up(|p| {
            if let Some(r) = p.downcast_ref::<RepartitionExec>()
                && matches!(r.partitioning(), Partitioning::RoundRobinBatch(_))
                && r.input().fetch().is_some_and(|f| f <= SMALL_FETCH)
            {
                return Ok(Transformed::yes(r.input().clone()));
            }
            Ok(Transformed::no(p))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_small_limit_serial"
    }

    fn schema_check(&self) -> bool {
        true
    }
}
