//! The vector top-k rule: `ORDER BY <distance> LIMIT k` over a Basalt scan becomes a
//! [`VectorSearchExec`] (when and how: the [`crate::vector`] module docs).

use crate::constant::evaluate_physical_constant;
use crate::exec::scan::{ScanExec, ScanParts};
use crate::exec::vector_search::{Mode, Search, VectorSearchExec};
use crate::vector::constant_vector;
use basalt_storage::Metric;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::Result;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::physical_expr::expressions::{CastExpr, Column, IsNotNullExpr, TryCastExpr};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{LexOrdering, PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Answers `ORDER BY <distance> LIMIT k` over a Basalt scan with [`VectorSearchExec`] (see
/// the module docs). Off together with the other fast paths.
#[derive(Debug)]
pub struct VectorTopKRule {
    enabled: Arc<AtomicBool>,
}

impl VectorTopKRule {
    /// The rule, on while `enabled` is.
    pub fn new(enabled: Arc<AtomicBool>) -> Self {
        VectorTopKRule { enabled }
    }
}

impl PhysicalOptimizerRule for VectorTopKRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Ok(plan);
        }
        plan.transform_down(|node| {
            Ok(match rewrite(&node)? {
                Some(n) => Transformed::yes(n),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_vector_topk"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The replacement of `node` when it is a top-k sort by a distance over a Basalt scan.
fn rewrite(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // The sort and its LIMIT: a merge of per-partition top-k sorts, or one sort.
    let (ordering, fetch, below) = if let Some(m) = node.downcast_ref::<SortPreservingMergeExec>() {
        let Some(sort) = m.input().downcast_ref::<SortExec>() else { return Ok(None) };
        match (m.fetch(), sort.fetch()) {
            (Some(f), Some(_)) if sort.expr() == m.expr() => {
                (m.expr().clone(), f, sort.input().clone())
            }
            _ => return Ok(None),
        }
    } else if let Some(sort) = node.downcast_ref::<SortExec>() {
        let parts = sort.input().properties().output_partitioning().partition_count();
        match sort.fetch() {
            Some(f) if !sort.preserve_partitioning() || parts == 1 => {
                (sort.expr().clone(), f, sort.input().clone())
            }
            _ => return Ok(None),
        }
    } else {
        return Ok(None);
    };
    let Some(below) = skip_exchanges(below) else { return Ok(None) };
    let (projection, input) = match below.downcast_ref::<ProjectionExec>() {
        Some(p) => match skip_exchanges(p.input().clone()) {
            Some(input) => (Some(p), input),
            None => return Ok(None),
        },
        None => (None, below.clone()),
    };
    // `WHERE v IS NOT NULL` stays above the scan (storage does not filter vectors); the
    // search drops NULL vectors anyway.
    let (not_null, scan_plan) = match input.downcast_ref::<FilterExec>() {
        Some(f) if f.projection().is_none() => match not_null_column(f.predicate()) {
            Some(c) => match skip_exchanges(f.input().clone()) {
                Some(s) => (Some(c), s),
                None => return Ok(None),
            },
            None => return Ok(None),
        },
        Some(_) => return Ok(None),
        None => (None, input.clone()),
    };
    let Some(scan) = scan_plan.downcast_ref::<ScanExec>() else { return Ok(None) };
    let Some(ScanParts { snapshot, projection: columns, predicate, .. }) = scan.parts() else {
        return Ok(None);
    };
    let [first] = ordering.as_ref() else { return Ok(None) };
    // The sort key as an expression over the scan's columns.
    let key = match (projection, first.expr.downcast_ref::<Column>()) {
        (Some(p), Some(c)) => match p.expr().get(c.index()) {
            Some(e) => e.expr.clone(),
            None => return Ok(None),
        },
        (Some(_), None) => return Ok(None),
        (None, _) => first.expr.clone(),
    };
    let Some((metric, column, query)) = distance_call(&key, &scan.schema()) else {
        return Ok(None);
    };
    let descending = first.options.descending;
    if descending != (metric == Metric::Dot) || not_null.as_ref().is_some_and(|c| *c != column) {
        return Ok(None);
    }
    let search = Search {
        column,
        query,
        k: fetch.saturating_mul(2).saturating_add(8),
        metric,
        predicate: predicate.cloned(),
    };
    let mode = Mode::Rows {
        projection: columns.to_vec(),
        need: fetch,
        descending,
        nulls_first: first.options.nulls_first,
        nulls_excluded: not_null.is_some(),
        scan: input.clone(),
    };
    let exec: Arc<dyn ExecutionPlan> =
        Arc::new(VectorSearchExec::new(snapshot.clone(), search, mode, scan.schema()));
    let input = match projection {
        Some(_) => below.clone().replace_children(
            vec![exec],
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )?,
        None => exec,
    };
    let ordering: LexOrdering = ordering.clone();
    Ok(Some(Arc::new(SortExec::new(ordering, input).with_fetch(Some(fetch)))))
}

/// The column a filter keeps the non-NULL rows of (`c IS NOT NULL`).
fn not_null_column(e: &Arc<dyn PhysicalExpr>) -> Option<String> {
    let n = e.downcast_ref::<IsNotNullExpr>()?;
    n.arg().downcast_ref::<Column>().map(|c| c.name().to_string())
}

/// `plan` under the operators that only move rows between partitions (merges without a
/// limit, repartitions): the exec replacing a scan has one partition and needs none of
/// them. `None` for a merge with a limit.
fn skip_exchanges(mut plan: Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    loop {
        if let Some(c) = plan.downcast_ref::<CoalescePartitionsExec>() {
            if c.fetch().is_some() {
                return None;
            }
            plan = c.input().clone();
        } else if let Some(r) = plan.downcast_ref::<RepartitionExec>() {
            plan = r.input().clone();
        } else {
            return Some(plan);
        }
    }
}

/// `(metric, column name, query)` when `e` is a distance function of a `VECTOR` column of
/// `schema` and a constant vector of its dimension with finite components.
fn distance_call(
    e: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
) -> Option<(Metric, String, Vec<f32>)> {
    let f = e.downcast_ref::<ScalarFunctionExpr>()?;
    let metric = match f.name() {
        "array_distance" | "list_distance" | "l2_distance" => Metric::L2,
        "l2sq_distance" => Metric::L2Squared,
        "cosine_distance" => Metric::Cosine,
        "inner_product" | "dot_product" => Metric::Dot,
        _ => return None,
    };
    let [a, b] = f.args() else { return None };
    let (col, constant) = match (vector_column(a, schema), vector_column(b, schema)) {
        (Some(c), None) => (c, b),
        (None, Some(c)) => (c, a),
        _ => return None,
    };
    if !collect_columns(constant).is_empty() {
        return None;
    }
    let query = constant_vector(&evaluate_physical_constant(constant).ok()?)?;
    let DataType::FixedSizeList(_, dim) = schema.field(col.index()).data_type() else {
        return None;
    };
    if query.len() != *dim as usize || query.iter().any(|v| !v.is_finite()) {
        return None;
    }
    if metric == Metric::Cosine && query.iter().all(|v| *v == 0.0) {
        return None;
    }
    Some((metric, col.name().to_string(), query))
}

/// The column under casts, when it is a `VECTOR` (`FixedSizeList<Float32>`) column.
fn vector_column<'a>(e: &'a Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<&'a Column> {
    let mut e = e;
    loop {
        if let Some(c) = e.downcast_ref::<CastExpr>() {
            e = c.expr();
        } else if let Some(c) = e.downcast_ref::<TryCastExpr>() {
            e = c.expr();
        } else {
            break;
        }
    }
    let c = e.downcast_ref::<Column>()?;
    match schema.fields().get(c.index())?.data_type() {
        DataType::FixedSizeList(f, _) if f.data_type() == &DataType::Float32 => Some(c),
        _ => None,
    }
}
