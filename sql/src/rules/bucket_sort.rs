//! The bucket-sort rule: puts [`BucketSortExec`] in place of sorts of a Basalt scan that a
//! limit stops early; when a sort qualifies is documented on the exec.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::limit::{GlobalLimitExec, LocalLimitExec};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::windows::BoundedWindowAggExec;

use crate::exec::bucket_sort::{BucketSortExec, MIN_FETCH};

/// The rule: sorts of a scan by a dictionary-encoded leading key under a limit become
/// [`BucketSortExec`].
#[derive(Debug)]
pub struct BucketSortRule {
    enabled: Arc<AtomicBool>,
}

impl BucketSortRule {
    /// A rule that applies while `enabled` is true.
    pub fn new(enabled: Arc<AtomicBool>) -> BucketSortRule {
        BucketSortRule { enabled }
    }
}

impl PhysicalOptimizerRule for BucketSortRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Ok(plan);
        }
        rewrite(plan, false)
    }

    fn name(&self) -> &str {
        "basalt_bucket_sort"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Rewrites top-down; `limited`: a limit above reaches `plan` through streaming operators.
fn rewrite(plan: Arc<dyn ExecutionPlan>, limited: bool) -> Result<Arc<dyn ExecutionPlan>> {
    if let Some(sort) = plan.downcast_ref::<SortExec>()
        && match sort.fetch() {
            // A full sort (under a window, say) that a limit above stops early.
            None => limited,
            Some(f) => f >= MIN_FETCH,
        }
        && let Some(b) = BucketSortExec::replace(sort, &plan)
    {
        return Ok(Arc::new(b));
    }
    let fetch = plan.fetch().is_some();
    let below = if plan.downcast_ref::<LocalLimitExec>().is_some()
        || plan.downcast_ref::<GlobalLimitExec>().is_some()
    {
        true
    } else if plan.downcast_ref::<CoalescePartitionsExec>().is_some()
        || plan.downcast_ref::<SortPreservingMergeExec>().is_some()
    {
        limited || fetch
    } else if plan.downcast_ref::<ProjectionExec>().is_some()
        || plan.downcast_ref::<BoundedWindowAggExec>().is_some()
    {
        limited
    } else {
        false
    };
    let children: Vec<Arc<dyn ExecutionPlan>> = plan.children().into_iter().cloned().collect();
    let mut changed = false;
    let mut out = Vec::with_capacity(children.len());
    for c in children {
        let n = rewrite(c.clone(), below)?;
        changed |= !Arc::ptr_eq(&n, &c);
        out.push(n);
    }
    if !changed {
        return Ok(plan);
    }
    // Recomputed: a window or merge above a bucket sort now has one input partition.
    plan.replace_children(out, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))
}
