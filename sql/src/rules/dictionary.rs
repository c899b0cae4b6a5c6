//! The dictionary-code rule: puts Basalt's execs that read dictionary codes into a plan,
//! bottom-up — a filter on one dictionary-encoded column becomes an
//! [`EntryFilterExec`], a semi join against a small build
//! side a [`SemiJoinScanExec`], an equi-join probing
//! a scan a [`DictJoinExec`], and an aggregate over either
//! a [`GroupByExec`] — or, for `count` / `min` / `max` without GROUP BY that row-group
//! metadata answers, a [`MetadataAggregateExec`]. When each applies is documented on the
//! exec that the rule asks (`replace`, `reduce`, `fuse`).
//!
//! What this module must not do: decide itself whether a node can be replaced (the exec's
//! constructor does), or change what a query returns.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, Result};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::UnionExec;

use crate::exec::dict_join::DictJoinExec;
use crate::exec::entry::EntryFilterExec;
use crate::exec::fused::GroupByExec;
use crate::exec::metadata_aggregate::MetadataAggregateExec;
use crate::exec::scan::ScanExec;
use crate::exec::semi_join::SemiJoinScanExec;

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
            if let Some(f) = node.downcast_ref::<FilterExec>() {
                return Ok(match EntryFilterExec::replace(f, &node)? {
                    Some(e) => Transformed::yes(e),
                    None => Transformed::no(node),
                });
            }
            if let Some(join) = node.downcast_ref::<HashJoinExec>() {
                if let Some(s) = SemiJoinScanExec::reduce(join) {
                    return Ok(Transformed::yes(Arc::new(s) as Arc<dyn ExecutionPlan>));
                }
                if let Some(j) = dedupe_semi_join_input(join, &node)? {
                    return Ok(Transformed::yes(j));
                }
                return Ok(match DictJoinExec::replace(join) {
                    Some(j) => Transformed::yes(Arc::new(j) as Arc<dyn ExecutionPlan>),
                    None => Transformed::no(node),
                });
            }
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            if let Some(m) = MetadataAggregateExec::replace(agg)? {
                return Ok(Transformed::yes(Arc::new(m) as Arc<dyn ExecutionPlan>));
            }
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
