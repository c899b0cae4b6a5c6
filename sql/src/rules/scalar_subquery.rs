//! Correlated scalar subqueries DataFusion cannot decorrelate, as joins.
//!
//! DataFusion turns a correlated scalar subquery into a join when its correlation is a set
//! of equalities (`WHERE x.k = t.k`): it groups the inner side by the key. With any other
//! correlation (`WHERE x.b < t.b`) it leaves the subquery in the plan, and the physical
//! planner refuses it. This analyzer rule rewrites such a subquery — applied when:
//!
//! 1. it sits in a projection or a filter;
//! 2. it is an aggregate without `GROUP BY`, optionally under a one-expression
//!    projection, over a filter, and the outer references appear only in that filter;
//! 3. at least one correlated conjunct of the filter is not an equality between an inner
//!    expression and an outer one (otherwise DataFusion's own decorrelation applies).
//!
//! The rewrite numbers the outer rows (`row_number()`), LEFT JOINs them to the inner rows
//! on the correlated conjuncts (with a marker column that is NULL on the unmatched side),
//! and aggregates per outer row — grouped by the row number and every outer column, which
//! so come through — with every aggregate filtered to matched rows (so `count(*)` over no
//! match is 0 and `sum` NULL, as the subquery gives). The outer rows are computed once:
//! a second computation (to join the values back by row number) could number them
//! differently. The node keeps its output schema.
//!
//! What this module must not do: change the answer of any query it rewrites, or rewrite a
//! shape it cannot prove (it then leaves the plan alone).

use std::sync::atomic::{AtomicU64, Ordering};

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, Result};
use datafusion::logical_expr::expr::AggregateFunction;
use datafusion::logical_expr::utils::{conjunction, split_conjunction};
use datafusion::logical_expr::{
    BinaryExpr, Expr, Filter, JoinType, LogicalPlan, LogicalPlanBuilder, Operator, Projection,
    Subquery, col, lit,
};
use datafusion::optimizer::analyzer::AnalyzerRule;

/// The rule (see the module docs).
#[derive(Debug, Default)]
pub struct CorrelatedScalarSubquery;

/// Makes the names of the columns a rewrite adds unique in a plan.
static NEXT: AtomicU64 = AtomicU64::new(1);

impl AnalyzerRule for CorrelatedScalarSubquery {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(rewrite_node).map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_correlated_scalar_subquery"
    }
}

/// What a subquery of the handled shape is made of.
struct Shape {
    /// The inner rows, before the correlated conjuncts.
    inner: LogicalPlan,
    /// The correlated conjuncts, outer references as plain columns.
    on: Expr,
    /// The aggregate expressions.
    aggs: Vec<Expr>,
    /// The subquery's value over the aggregate's output.
    value: Expr,
}

fn has_outer(e: &Expr) -> bool {
    e.exists(|x| Ok(matches!(x, Expr::OuterReferenceColumn(..)))).unwrap_or(true)
}

fn plan_has_outer(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply_with_subqueries(|n| {
        if n.expressions().iter().any(has_outer) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// `inner = outer` with the outer references on one side only: DataFusion's case.
fn is_key_equality(e: &Expr) -> bool {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => {
            has_outer(left) != has_outer(right)
        }
        _ => false,
    }
}

fn shape_of(sq: &Subquery) -> Option<Shape> {
    if sq.outer_ref_columns.is_empty() {
        return None;
    }
    let mut plan = sq.subquery.as_ref();
    let mut projected = None;
    if let LogicalPlan::Projection(p) = plan {
        if p.expr.len() != 1 || has_outer(&p.expr[0]) {
            return None;
        }
        projected = Some(p.expr[0].clone());
        plan = p.input.as_ref();
    }
    let LogicalPlan::Aggregate(a) = plan else { return None };
    if !a.group_expr.is_empty() || a.aggr_expr.iter().any(has_outer) {
        return None;
    }
    let LogicalPlan::Filter(f) = a.input.as_ref() else { return None };
    let (corr, rest): (Vec<&Expr>, Vec<&Expr>) =
        split_conjunction(&f.predicate).into_iter().partition(|c| has_outer(c));
    if corr.is_empty() || corr.iter().all(|c| is_key_equality(c)) {
        return None;
    }
    if plan_has_outer(f.input.as_ref()) {
        return None;
    }
    let inner = match conjunction(rest.into_iter().cloned()) {
        Some(p) => LogicalPlan::Filter(Filter::try_new(p, f.input.clone()).ok()?),
        None => f.input.as_ref().clone(),
    };
    let on = conjunction(corr.into_iter().cloned())?
        .transform_up(|e| match e {
            Expr::OuterReferenceColumn(_, c) => Ok(Transformed::yes(Expr::Column(c))),
            e => Ok(Transformed::no(e)),
        })
        .ok()?
        .data;
    let value = match projected {
        Some(v) => v,
        None => {
            let (q, f) = a.schema.qualified_field(0);
            Expr::Column(Column::new(q.cloned(), f.name()))
        }
    };
    Some(Shape { inner, on, aggs: a.aggr_expr.clone(), value })
}

fn rewrite_node(node: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    if !matches!(node, LogicalPlan::Projection(_) | LogicalPlan::Filter(_)) {
        return Ok(Transformed::no(node));
    }
    let mut found: Vec<(Subquery, Shape)> = Vec::new();
    for e in node.expressions() {
        e.apply(|x| {
            if let Expr::ScalarSubquery(sq) = x
                && !found.iter().any(|(s, _)| s == sq)
                && let Some(shape) = shape_of(sq)
            {
                found.push((sq.clone(), shape));
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
    }
    if found.is_empty() {
        return Ok(Transformed::no(node));
    }
    // A rewrite that does not build (names that clash, say) leaves the node as it was.
    match rewrite(&node, found) {
        Ok(plan) => Ok(Transformed::yes(plan)),
        Err(_) => Ok(Transformed::no(node)),
    }
}

fn rewrite(node: &LogicalPlan, found: Vec<(Subquery, Shape)>) -> Result<LogicalPlan> {
    let input = match node {
        LogicalPlan::Projection(p) => p.input.clone(),
        LogicalPlan::Filter(f) => f.input.clone(),
        _ => return Ok(node.clone()),
    };
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let rn = format!("__basalt_rn_{n}");
    let row_number = datafusion::functions_window::expr_fn::row_number().alias(&rn);
    // Numbered once: every later step carries the outer columns along (grouped by them
    // with the row number), so the outer input is computed once and its rows keep their
    // numbers (two computations of it need not number rows alike).
    let mut current =
        LogicalPlanBuilder::from(input.as_ref().clone()).window(vec![row_number])?.build()?;
    let mut values: Vec<(Subquery, Expr)> = Vec::new();
    for (i, (sq, shape)) in found.into_iter().enumerate() {
        let marker = format!("__basalt_m_{n}_{i}");
        let value = format!("__basalt_sv_{n}_{i}");
        let carried: Vec<Expr> = current.schema().columns().into_iter().map(Expr::Column).collect();
        let mut inner_cols: Vec<Expr> =
            shape.inner.schema().columns().into_iter().map(Expr::Column).collect();
        inner_cols.push(lit(true).alias(&marker));
        let inner = LogicalPlanBuilder::from(shape.inner).project(inner_cols)?.build()?;
        let joined = LogicalPlanBuilder::from(current)
            .join_on(inner, JoinType::Left, vec![shape.on])?
            .build()?;
        let matched = col(&marker).is_not_null();
        // Each aggregate under a name of its own (the carried columns may hold the outer
        // query's aggregates of the same text); the value reads them by those names.
        let renamed: Vec<(String, String)> = shape
            .aggs
            .iter()
            .enumerate()
            .map(|(j, a)| (a.schema_name().to_string(), format!("__basalt_a_{n}_{i}_{j}")))
            .collect();
        let aggs = shape
            .aggs
            .iter()
            .zip(&renamed)
            .map(|(a, (_, name))| {
                let filtered = match a.clone().unalias() {
                    Expr::AggregateFunction(AggregateFunction { func, mut params }) => {
                        params.filter = Some(Box::new(match params.filter.take() {
                            Some(f) => f.and(matched.clone()),
                            None => matched.clone(),
                        }));
                        Expr::AggregateFunction(AggregateFunction { func, params })
                    }
                    other => {
                        return Err(datafusion::error::DataFusionError::Plan(format!(
                            "not an aggregate: {other}"
                        )));
                    }
                };
                Ok(filtered.alias(name.as_str()))
            })
            .collect::<Result<Vec<_>>>()?;
        let aggregated =
            LogicalPlanBuilder::from(joined).aggregate(carried.clone(), aggs)?.build()?;
        let read = shape
            .value
            .transform_up(|e| match &e {
                Expr::Column(c) if c.relation.is_none() => {
                    match renamed.iter().find(|(from, _)| *from == c.name) {
                        Some((_, to)) => Ok(Transformed::yes(col(to.as_str()))),
                        None => Ok(Transformed::no(e)),
                    }
                }
                _ => Ok(Transformed::no(e)),
            })?
            .data;
        let mut out = carried;
        out.push(read.alias(&value));
        current = LogicalPlanBuilder::from(aggregated).project(out)?.build()?;
        values.push((sq, col(&value)));
    }
    let replace = |e: Expr| {
        e.transform_up(|x| match &x {
            Expr::ScalarSubquery(sq) => match values.iter().find(|(s, _)| s == sq) {
                Some((_, v)) => Ok(Transformed::yes(v.clone())),
                None => Ok(Transformed::no(x)),
            },
            _ => Ok(Transformed::no(x)),
        })
        .map(|t| t.data)
    };
    let back: Vec<Expr> = input.schema().columns().into_iter().map(Expr::Column).collect();
    match node {
        LogicalPlan::Projection(p) => {
            let exprs = p
                .expr
                .iter()
                .map(|e| {
                    // A rewritten item keeps its name (and the node its schema).
                    let new = replace(e.clone())?;
                    Ok(if new == *e { new } else { new.alias(e.schema_name().to_string()) })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(LogicalPlan::Projection(Projection::try_new(exprs, std::sync::Arc::new(current))?))
        }
        LogicalPlan::Filter(f) => {
            let predicate = replace(f.predicate.clone())?;
            let filtered =
                LogicalPlan::Filter(Filter::try_new(predicate, std::sync::Arc::new(current))?);
            LogicalPlanBuilder::from(filtered).project(back)?.build()
        }
        _ => Ok(node.clone()),
    }
}
