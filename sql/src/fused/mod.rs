//! Fused group-by: a physical optimizer rule that replaces a partial (or single-stage)
//! `AggregateExec` reading a Basalt scan directly with [`GroupByExec`], which groups on
//! **dictionary codes** instead of materialised values.
//!
//! DataFusion's hash aggregation over a Basalt scan would first decode every group value
//! (a string per row for `GROUP BY city`) and then hash each one. Segments already store
//! such columns as a sorted dictionary plus 1–4-byte codes per row, so [`GroupByExec`]
//! reads the codes, maps each *dictionary entry* (not each row) to a group id once per row
//! group, and turns codes into group ids with one table lookup per row; several group
//! columns combine through dense tables. Within a batch rows are keyed by their combined
//! codes (a dense batch-local key), and only the keys present are turned into group ids.
//!
//! Aggregates: `COUNT(*)` counts rows per key (one coded group column without NULLs: counted
//! straight from its codes, [`Grouper::count_codes`]; with no aggregate at all, as for `DISTINCT`,
//! only marked until every dictionary entry has been seen); `count(CASE WHEN p THEN c END)` (`c` a
//! non-NULL constant) counts the rows per key where `p` is true ([`counts_if`]). `count` / `sum` /
//! `avg` / `min` / `max` of one Int64 or Float64 column (or of a narrower number under the cast
//! DataFusion adds) are folded per key by a tight loop that reads the column's dictionary codes
//! through a value table, or its plain values ([`Native`]); the per-key partial results are handed
//! to DataFusion's own accumulator (`merge_batch` for count / sum / avg states, `update_batch` with
//! one candidate per key for min / max), so DataFusion's rules decide and its states and values
//! come out. Every other aggregate is DataFusion's `GroupsAccumulator` fed a group id per row.
//! Results therefore equal DataFusion's, except that floating-point sums add in another order
//! (within rounding), as they do between DataFusion's own plans. Without GROUP BY (one group) the
//! rule applies only when every aggregate is counted or folded here, since DataFusion's scalar
//! accumulators are already vectorised. A partial aggregate over a union of scans (`UNION`, `UNION
//! ALL` under an aggregate) becomes the union of one fused partial aggregate per scan when every
//! scan fuses ([`fuse_union`]). A left semi / anti hash join without a join filter (`INTERSECT`,
//! `EXCEPT`) reads its scanned right input deduplicated by such a group-by
//! ([`dedupe_semi_join_input`]).
//!
//! When it applies: the aggregate's input is a Basalt scan without a limit (its filter already
//! evaluated in storage, on codes), or a dictionary join ([`crate::join`]) probing one, without a
//! fetch, whose output it reads with the probe columns as codes (group columns must then be probe
//! columns); there is no grouping set; every group expression is a column of the scan that is
//! dictionary-encoded in every row group of the snapshot (or there is none, see above); every
//! aggregate supports groups accumulators and has no DISTINCT, ORDER BY or FILTER; the mode is
//! `Partial` or `Single`. Memtable rows (values, not codes) are grouped through the same per-value
//! map. What the groups hold counts against the memory pool; a partition whose groups outgrow
//! it is dropped and computed by the aggregate the rule replaced (which spills or emits early),
//! counted in the `over_memory_limit` metric. The rule is off when the connection's fast paths are off
//! (`Connection::set_fast_paths(false)`), which is how the tests compare the two.
//!
//! What this module must not do: change what a query returns, or read storage other than
//! through the snapshot and units the scan was planned with.
//!
//! Files: this one holds the rule; `exec` the exec and its memory accounting, `grouper` the
//! group ids from codes, `fold` the aggregates folded per key.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Int64Array, NullArray,
    PrimitiveArray, RecordBatch, UInt64Array, new_null_array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int64Type, SchemaRef, UInt8Type, UInt16Type, UInt32Type,
};
use datafusion::common::JoinType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CaseExpr, CastExpr, Column, Literal};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use basalt_storage::{Predicate, ScanUnit, TableSnapshot};

use crate::binding::storage_err;
use crate::codes::{codes_of, dictionary_values};
use crate::join::DictJoinExec;
use crate::provider::{ScanExec, ScanParts, deferred_stream, partition_units};

mod exec;
mod fold;
mod grouper;

pub use self::exec::GroupByExec;
use self::{fold::*, grouper::*};

/// The rule: aggregate-over-scan shapes become [`GroupByExec`].
#[derive(Debug)]
pub struct FuseGroupBy {
    enabled: Arc<AtomicBool>,
}

impl FuseGroupBy {
    /// A rule that applies while `enabled` is true.
    pub fn new(enabled: Arc<AtomicBool>) -> FuseGroupBy {
        FuseGroupBy { enabled }
    }
}

impl PhysicalOptimizerRule for FuseGroupBy {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            if let Some(f) = node.downcast_ref::<datafusion::physical_plan::filter::FilterExec>() {
                return Ok(match crate::entry::EntryFilterExec::replace(f, &node)? {
                    Some(e) => Transformed::yes(e),
                    None => Transformed::no(node),
                });
            }
            if let Some(join) = node.downcast_ref::<HashJoinExec>() {
                if let Some(s) = crate::semi::SemiJoinScanExec::reduce(join) {
                    return Ok(Transformed::yes(Arc::new(s) as Arc<dyn ExecutionPlan>));
                }
                if let Some(j) = dedupe_semi_join_input(join, &node)? {
                    return Ok(Transformed::yes(j));
                }
                return Ok(match crate::join::DictJoinExec::replace(join) {
                    Some(j) => Transformed::yes(Arc::new(j) as Arc<dyn ExecutionPlan>),
                    None => Transformed::no(node),
                });
            }
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            if let Some(g) = GroupByExec::fuse(agg)? {
                return Ok(Transformed::yes(Arc::new(g) as Arc<dyn ExecutionPlan>));
            }
            Ok(match fuse_union(agg)? {
                Some(u) => Transformed::yes(u),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_fuse_group_by"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A partial aggregate over a union of Basalt scans (`UNION`, `UNION ALL` under GROUP BY)
/// as the union of one fused partial aggregate per scan: partial states distribute over a
/// union, and the final aggregate above merges them as before. Only when every input
/// fuses, so the union's schema is the aggregate's.
fn fuse_union(agg: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if *agg.mode() != AggregateMode::Partial {
        return Ok(None);
    }
    let Some(union) = agg.input().downcast_ref::<UnionExec>() else { return Ok(None) };
    let mut parts: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    for child in union.children() {
        let one = AggregateExec::try_new(
            AggregateMode::Partial,
            agg.group_expr().clone(),
            agg.aggr_expr().to_vec(),
            agg.filter_expr().to_vec(),
            child.clone(),
            child.schema(),
        )?;
        // The same columns as the aggregate's (nullability may differ by input).
        let Some(g) = GroupByExec::fuse(&one)?.and_then(|g| g.with_schema(agg.schema())) else {
            return Ok(None);
        };
        parts.push(Arc::new(g));
    }
    if parts.len() < 2 {
        return Ok(None);
    }
    UnionExec::try_new(parts).map(Some)
}

/// A left semi or anti join (`INTERSECT`, `EXCEPT`, `IN` / `EXISTS` with the table on the
/// right) only asks whether a right row with the key exists, so its right input, a Basalt
/// scan (possibly under a hash repartition), may be deduplicated first: each scan partition
/// becomes a fused group-by on all of its columns. Duplicates across partitions remain and
/// are harmless; NULL keys keep one row. Not with a join filter, which could read other
/// right columns row by row.
fn dedupe_semi_join_input(
    join: &HashJoinExec,
    node: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if !matches!(join.join_type(), JoinType::LeftSemi | JoinType::LeftAnti)
        || join.filter().is_some()
    {
        return Ok(None);
    }
    let [left, right] = [join.left(), join.right()];
    let (repartition, scan) = match right.downcast_ref::<RepartitionExec>() {
        Some(r) => (Some(r), r.input()),
        None => (None, right),
    };
    if scan.downcast_ref::<ScanExec>().is_none() {
        return Ok(None);
    }
    let schema = scan.schema();
    let keys: Vec<(Arc<dyn PhysicalExpr>, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            (Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>, f.name().clone())
        })
        .collect();
    let agg = AggregateExec::try_new(
        AggregateMode::Partial,
        PhysicalGroupBy::new_single(keys),
        Vec::new(),
        Vec::new(),
        scan.clone(),
        schema.clone(),
    )?;
    // The deduplicated input has the scan's columns; keep its exact fields.
    let Some(g) = GroupByExec::fuse(&agg)?.and_then(|g| g.with_schema(schema)) else {
        return Ok(None);
    };
    let mut right: Arc<dyn ExecutionPlan> = Arc::new(g);
    let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
    if let Some(r) = repartition {
        right = Arc::new(r.clone()).replace_children(vec![right], recompute)?;
    }
    node.clone().replace_children(vec![left.clone(), right], recompute).map(Some)
}
