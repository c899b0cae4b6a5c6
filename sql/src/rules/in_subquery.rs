//! `x [NOT] IN (subquery)` as a value (in a `SELECT` list), which DataFusion plans only
//! as a filter.
//!
//! Applied to an uncorrelated `IN` subquery in a projection. Its three-valued answer is
//! spelled with scalar subqueries DataFusion plans (the count of matches is correlated by
//! an equality when `x` reads outer columns, which DataFusion decorrelates):
//!
//! ```text
//! CASE WHEN (SELECT count(*) FROM s) = 0        THEN false   -- empty: false, even for NULL
//!      WHEN x IS NULL                           THEN NULL
//!      WHEN (SELECT count(*) FROM s WHERE y = x) > 0 THEN true
//!      WHEN (SELECT count(*) FROM s WHERE y IS NULL) > 0 THEN NULL
//!      ELSE false END
//! ```
//!
//! `NOT IN` is its negation. The item keeps its name.
//!
//! What this module must not do: touch an `IN` subquery DataFusion plans itself (in a
//! filter) or a correlated one.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::InSubquery;
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Subquery, lit, when};
use datafusion::optimizer::analyzer::AnalyzerRule;

/// The rule (see the module docs).
#[derive(Debug, Default)]
pub struct InSubqueryValue;

impl AnalyzerRule for InSubqueryValue {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let LogicalPlan::Projection(p) = &node else { return Ok(Transformed::no(node)) };
            if !p.expr.iter().any(|e| {
                e.exists(|x| {
                    Ok(matches!(x, Expr::InSubquery(s) if s.subquery.outer_ref_columns.is_empty()))
                })
                .unwrap_or(false)
            }) {
                return Ok(Transformed::no(node));
            }
            let input = p.input.clone();
            node.map_expressions(|e| {
                let name = e.schema_name().to_string();
                let t = e.transform_up(|x| match x {
                    Expr::InSubquery(s) if s.subquery.outer_ref_columns.is_empty() => {
                        Ok(Transformed::yes(value_of(s, &input)?))
                    }
                    x => Ok(Transformed::no(x)),
                })?;
                Ok(if t.transformed { t.update_data(|e| e.alias(name)) } else { t })
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_in_subquery_value"
    }
}

fn scalar(plan: LogicalPlan, outer_ref_columns: Vec<Expr>) -> Expr {
    Expr::ScalarSubquery(Subquery {
        subquery: Arc::new(plan),
        outer_ref_columns,
        spans: Default::default(),
    })
}

fn count_of(plan: LogicalPlan) -> Result<LogicalPlan> {
    LogicalPlanBuilder::from(plan)
        .aggregate(
            Vec::<Expr>::new(),
            vec![datafusion::functions_aggregate::count::count(lit(1i64))],
        )?
        .build()
}

fn value_of(s: InSubquery, input: &Arc<LogicalPlan>) -> Result<Expr> {
    let sub = s.subquery.subquery.as_ref().clone();
    let (q, f) = sub.schema().qualified_field(0);
    let y = Expr::Column(datafusion::common::Column::new(q.cloned(), f.name()));
    // `x` as the subquery sees it: its columns are the outer query's.
    let mut outer = Vec::new();
    let x_inside = s
        .expr
        .as_ref()
        .clone()
        .transform_up(|e| match e {
            Expr::Column(c) => {
                let field =
                    datafusion::common::ExprSchema::field_from_column(input.schema().as_ref(), &c)?;
                let r = Expr::OuterReferenceColumn(Arc::clone(field), c);
                if !outer.contains(&r) {
                    outer.push(r.clone());
                }
                Ok(Transformed::yes(r))
            }
            e => Ok(Transformed::no(e)),
        })?
        .data;
    let all = scalar(count_of(sub.clone())?, Vec::new());
    let nulls = scalar(
        count_of(LogicalPlanBuilder::from(sub.clone()).filter(y.clone().is_null())?.build()?)?,
        Vec::new(),
    );
    let equal =
        scalar(count_of(LogicalPlanBuilder::from(sub).filter(y.eq(x_inside))?.build()?)?, outer);
    let null_bool = lit(ScalarValue::Boolean(None));
    let value = when(all.eq(lit(0i64)), lit(false))
        .when(s.expr.as_ref().clone().is_null(), null_bool.clone())
        .when(equal.gt(lit(0i64)), lit(true))
        .when(nulls.gt(lit(0i64)), null_bool)
        .otherwise(lit(false))?;
    Ok(if s.negated { !value } else { value })
}
