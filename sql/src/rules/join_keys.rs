//! A hash join's key filter carried past the operators DataFusion's pushdown stops at.
//!
//! DataFusion pushes a hash join's dynamic filter (the build side's key bounds and key
//! list) into the probe side as one expression over all the join's keys, and an operator
//! that cannot take all of them takes none: an aggregate when a key is one of its results
//! (TPC-H Q2 matches the part key and `min(ps_supplycost)` of a grouped subquery), a join
//! when the keys come from both of its sides. The scans below then read every row.
//!
//! [`JoinKeysThrough`], a physical optimizer rule run after DataFusion's, gives a Basalt
//! scan the part of a join's filter on the keys that reach it, when:
//!
//! 1. the join is a hash join holding a dynamic filter (DataFusion made one: the probe
//!    side keeps its rows' keys);
//! 2. following the keys down the probe side — through projections of plain columns,
//!    filters, repartitions and merges, aggregates (a key must be a grouping column) and
//!    inner, semi and anti hash joins (to the side a key comes from) — a key is lost on the
//!    way (else DataFusion pushed the whole filter) and at least one reaches the scan;
//! 3. nothing else lies on the path (a limit or window could keep other rows when fewer
//!    come in; a shared subplan's rows serve other places).
//!
//! The scan holds a [`KeysOf`] expression: the join's filter read at its current state,
//! kept to what concerns the keys that reached the scan (their bounds, their lists — a
//! key's own field of a list of several keys — through `AND`, `OR` and `CASE`), on the
//! scan's columns. The scan skips units and drops rows with it as with any join hint.
//!
//! Why this is safe: a row whose key is outside the build side's keys cannot produce a
//! joined row, and every operator on the path keeps a row's key and decides per key
//! (grouping by it, joining on other columns row by row), so dropping such rows below
//! drops only outputs the join drops. The join still applies its own condition.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{JoinType, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{
    BinaryExpr, CaseExpr, Column, DynamicFilterPhysicalExpr, InListExpr, Literal, lit,
};
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::aggregates::AggregateExec;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;

use crate::exec::scan::ScanExec;

/// Carries join key filters past aggregates and joins (see the module docs); a fast path,
/// on while the connection's fast paths are.
#[derive(Debug)]
pub struct JoinKeysThrough {
    enabled: Arc<std::sync::atomic::AtomicBool>,
}

impl JoinKeysThrough {
    /// The rule, active while `enabled` holds.
    pub fn new(enabled: Arc<std::sync::atomic::AtomicBool>) -> JoinKeysThrough {
        JoinKeysThrough { enabled }
    }
}

impl PhysicalOptimizerRule for JoinKeysThrough {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.enabled.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(plan);
        }
        plan.transform_down(|node| {
            let Some(join) = node.downcast_ref::<HashJoinExec>() else {
                return Ok(Transformed::no(node));
            };
            #[allow(deprecated)] // the replacement lists the filter among others
            let Some(filter) = join.dynamic_filter_expr().cloned() else {
                return Ok(Transformed::no(node));
            };
            let keys: Vec<Option<usize>> = join
                .on()
                .iter()
                .map(|(_, probe)| probe.downcast_ref::<Column>().map(|c| c.index()))
                .collect();
            let probe = Arc::clone(join.right());
            let new_probe = carry(&probe, &keys, false, &|scan, reached| {
                let expr = KeysOf::new(Arc::clone(&filter), join.on(), reached, &scan.schema());
                Arc::new(scan.with_hint(Arc::new(expr)))
            })?;
            match new_probe {
                Some(p) => {
                    let children = vec![Arc::clone(join.left()), p];
                    Ok(Transformed::yes(recompute(node.clone(), children)?))
                }
                None => Ok(Transformed::no(node)),
            }
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_join_keys_through"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A scan and the keys that reached it: `(key's position in the join's list, the scan's
/// column index)`.
type Attach<'a> = dyn Fn(&ScanExec, &[(usize, usize)]) -> Arc<dyn ExecutionPlan> + 'a;

/// `plan` with the scans the keys reach given their hint, or `None` when none changes.
/// `keys[i]`: the column of `plan`'s output holding key `i`, `None` once lost; `lost`:
/// whether some key was lost above (condition 2).
fn carry(
    plan: &Arc<dyn ExecutionPlan>,
    keys: &[Option<usize>],
    lost: bool,
    attach: &Attach<'_>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let lost = lost || keys.iter().any(Option::is_none);
    // Condition 3: an operator that stops after some rows keeps other rows when fewer come.
    if keys.iter().all(Option::is_none) || plan.fetch().is_some() {
        return Ok(None);
    }
    let one_child = |mapped: Vec<Option<usize>>| -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let child = &plan.children()[0];
        match carry(child, &mapped, lost, attach)? {
            Some(c) => Ok(Some(recompute(Arc::clone(plan), vec![c])?)),
            None => Ok(None),
        }
    };
    if let Some(scan) = plan.downcast_ref::<ScanExec>() {
        if !lost {
            return Ok(None);
        }
        let reached: Vec<(usize, usize)> =
            keys.iter().enumerate().filter_map(|(i, k)| k.map(|c| (i, c))).collect();
        return Ok(Some(attach(scan, &reached)));
    }
    if let Some(p) = plan.downcast_ref::<ProjectionExec>() {
        let exprs = p.expr();
        let mapped = keys
            .iter()
            .map(|k| {
                let e = &exprs.get((*k)?)?.expr;
                e.downcast_ref::<Column>().map(|c| c.index())
            })
            .collect();
        return one_child(mapped);
    }
    if let Some(f) = plan.downcast_ref::<FilterExec>() {
        let mapped = match f.projection() {
            Some(proj) => keys.iter().map(|k| proj.get((*k)?).copied()).collect(),
            None => keys.to_vec(),
        };
        return one_child(mapped);
    }
    if plan.downcast_ref::<RepartitionExec>().is_some()
        || plan.downcast_ref::<CoalescePartitionsExec>().is_some()
    {
        return one_child(keys.to_vec());
    }
    if let Some(a) = plan.downcast_ref::<AggregateExec>() {
        let group = a.group_expr();
        if group.has_grouping_set() || a.limit_options().is_some() {
            return Ok(None);
        }
        let exprs = group.expr();
        let mapped = keys
            .iter()
            .map(|k| exprs.get((*k)?)?.0.downcast_ref::<Column>().map(|c| c.index()))
            .collect();
        return one_child(mapped);
    }
    if let Some(j) = plan.downcast_ref::<HashJoinExec>() {
        return carry_join(plan, j, keys, lost, attach);
    }
    Ok(None)
}

/// [`carry`] through a hash join: each key to the side it comes from.
fn carry_join(
    plan: &Arc<dyn ExecutionPlan>,
    j: &HashJoinExec,
    keys: &[Option<usize>],
    lost: bool,
    attach: &Attach<'_>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    let left_len = j.left().schema().fields().len();
    // (left, right) positions of the join's unprojected output columns.
    let side = |c: usize| -> Option<(bool, usize)> {
        match j.join_type() {
            JoinType::Inner => Some(if c < left_len { (true, c) } else { (false, c - left_len) }),
            JoinType::LeftSemi | JoinType::LeftAnti => Some((true, c)),
            JoinType::RightSemi | JoinType::RightAnti => Some((false, c)),
            _ => None,
        }
    };
    let unprojected = |k: usize| -> Option<usize> {
        match &j.projection {
            Some(p) => p.get(k).copied(),
            None => Some(k),
        }
    };
    let mut left = vec![None; keys.len()];
    let mut right = vec![None; keys.len()];
    for (i, k) in keys.iter().enumerate() {
        if let Some((is_left, c)) = k.and_then(unprojected).and_then(side) {
            if is_left {
                left[i] = Some(c);
            } else {
                right[i] = Some(c);
            }
        }
    }
    // DataFusion passes the whole filter to a side only when every key goes there.
    let count = |v: &[Option<usize>]| v.iter().filter(|k| k.is_some()).count();
    let whole = |side: &[Option<usize>]| count(side) == keys.len();
    let new_left = carry(j.left(), &left, lost || !whole(&left), attach)?;
    let new_right = carry(j.right(), &right, lost || !whole(&right), attach)?;
    if new_left.is_none() && new_right.is_none() {
        return Ok(None);
    }
    let children = vec![
        new_left.unwrap_or_else(|| Arc::clone(j.left())),
        new_right.unwrap_or_else(|| Arc::clone(j.right())),
    ];
    Ok(Some(recompute(Arc::clone(plan), children)?))
}

fn recompute(
    plan: Arc<dyn ExecutionPlan>,
    children: Vec<Arc<dyn ExecutionPlan>>,
) -> Result<Arc<dyn ExecutionPlan>> {
    plan.replace_children(children, ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute))
}

/// A join's dynamic filter kept to some of its keys, on a scan's columns (see the module
/// docs). Read through [`PhysicalExpr::snapshot`]; it reports the join filter's
/// generation and identity, so the join fills the filter for it and scans re-read it when
/// it changes.
#[derive(Debug)]
pub struct KeysOf {
    filter: Arc<DynamicFilterPhysicalExpr>,
    /// `(the join's probe key expression, the scan column it reached)`.
    keys: Vec<(PhysicalExprRef, PhysicalExprRef)>,
    /// The scan's output schema.
    schema: SchemaRef,
}

impl KeysOf {
    fn new(
        filter: Arc<DynamicFilterPhysicalExpr>,
        on: &[(PhysicalExprRef, PhysicalExprRef)],
        reached: &[(usize, usize)],
        schema: &SchemaRef,
    ) -> KeysOf {
        let keys = reached
            .iter()
            .map(|&(i, c)| {
                let column: Arc<dyn PhysicalExpr> =
                    Arc::new(Column::new(schema.field(c).name(), c));
                (Arc::clone(&on[i].1), column)
            })
            .collect();
        KeysOf { filter, keys, schema: Arc::clone(schema) }
    }

    /// The scan column for the join's key expression `e`, if it reached the scan.
    fn column_for(&self, e: &Arc<dyn PhysicalExpr>) -> Option<Arc<dyn PhysicalExpr>> {
        self.keys.iter().find(|(k, _)| k.as_ref() == e.as_ref()).map(|(_, c)| Arc::clone(c))
    }

    /// What of `e` (a state of the join's filter) concerns the reached keys, on the scan's
    /// columns: `None` when nothing does (for a conjunct: drop it).
    fn keep(&self, e: &Arc<dyn PhysicalExpr>) -> Option<Arc<dyn PhysicalExpr>> {
        if let Some(b) = e.downcast_ref::<BinaryExpr>() {
            return match b.op() {
                Operator::And => match (self.keep(b.left()), self.keep(b.right())) {
                    (Some(l), Some(r)) => Some(Arc::new(BinaryExpr::new(l, Operator::And, r))),
                    (x, None) | (None, x) => x,
                },
                Operator::Or => {
                    let (l, r) = (self.keep(b.left())?, self.keep(b.right())?);
                    Some(Arc::new(BinaryExpr::new(l, Operator::Or, r)))
                }
                Operator::Eq | Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq => {
                    let v = b.right().downcast_ref::<Literal>()?;
                    let c = self.column_for(b.left())?;
                    Some(Arc::new(BinaryExpr::new(c, *b.op(), lit(v.value().clone()))))
                }
                _ => None,
            };
        }
        if let Some(c) = e.downcast_ref::<CaseExpr>() {
            // True only where a branch is: the OR of the branches' parts (each must have one).
            let mut out: Option<Arc<dyn PhysicalExpr>> = None;
            for (_, then) in c.when_then_expr() {
                let t = self.keep(then)?;
                out = Some(match out {
                    Some(o) => Arc::new(BinaryExpr::new(o, Operator::Or, t)),
                    None => t,
                });
            }
            if let Some(other) = c.else_expr() {
                let never = other.downcast_ref::<Literal>().is_some_and(|l| {
                    l.value().is_null() || l.value() == &ScalarValue::Boolean(Some(false))
                });
                if !never {
                    let t = self.keep(other)?;
                    out = Some(match out {
                        Some(o) => Arc::new(BinaryExpr::new(o, Operator::Or, t)),
                        None => t,
                    });
                }
            }
            return out;
        }
        if let Some(l) = e.downcast_ref::<InListExpr>() {
            if l.negated() {
                return None;
            }
            if let Some(c) = self.column_for(l.expr()) {
                return InListExpr::try_new(c, l.list().to_vec(), false, &self.schema)
                    .ok()
                    .map(|e| Arc::new(e) as _);
            }
            return self.keep_struct_list(l);
        }
        None
    }

    /// `struct(k₁, …) IN (…)`: for each reached key among the `kᵢ`, its field's values.
    fn keep_struct_list(&self, l: &InListExpr) -> Option<Arc<dyn PhysicalExpr>> {
        let mut out: Option<Arc<dyn PhysicalExpr>> = None;
        for (arg, values) in crate::pushdown::struct_list_fields(l)? {
            let Some(column) = self.column_for(&arg) else { continue };
            let values = values.into_iter().map(lit).collect();
            let list: Arc<dyn PhysicalExpr> =
                Arc::new(InListExpr::try_new(column, values, false, &self.schema).ok()?);
            out = Some(match out {
                Some(o) => Arc::new(BinaryExpr::new(o, Operator::And, list)),
                None => list,
            });
        }
        out
    }

    /// The filter's current state kept to the reached keys (`true` when nothing is).
    fn current(&self) -> Result<Arc<dyn PhysicalExpr>> {
        let now = self.filter.current()?;
        Ok(self.keep(&now).unwrap_or_else(|| lit(true)))
    }
}

impl fmt::Display for KeysOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<String> = self.keys.iter().map(|(_, c)| c.to_string()).collect();
        write!(f, "JoinKeys [{}]", names.join(", "))
    }
}

impl PartialEq for KeysOf {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.filter, &other.filter) && self.keys == other.keys
    }
}

impl Eq for KeysOf {}

impl Hash for KeysOf {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.filter) as *const () as usize).hash(state);
        for (k, c) in &self.keys {
            k.hash(state);
            c.hash(state);
        }
    }
}

impl PhysicalExpr for KeysOf {
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(true)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        self.current()?.evaluate(batch)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        Vec::new()
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(self)
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }

    fn snapshot(&self) -> Result<Option<Arc<dyn PhysicalExpr>>> {
        Ok(Some(self.current()?))
    }

    fn snapshot_generation(&self) -> u64 {
        self.filter.snapshot_generation()
    }

    fn expression_id(&self) -> Option<u64> {
        self.filter.expression_id()
    }
}
