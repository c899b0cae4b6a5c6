//! DELETE and UPDATE filters as the table provider needs them.
//!
//! DataFusion hands a DELETE's or UPDATE's filters to the table provider by collecting the
//! predicates of the plan's filters, which must name the table's columns. Its common
//! subexpression elimination can move a repeated part of a predicate (`col1 > 1 OR col1 > 2`
//! over a cast column) into a projection below as `__common_expr_N`; the collected
//! predicate then names a column the table does not have, and the statement fails. This
//! rule (a logical optimizer rule after DataFusion's) puts those expressions back into the
//! expressions of a DELETE's or UPDATE's input that name them. Used when:
//!
//! 1. the plan is a DELETE or an UPDATE, and
//! 2. a projection in its input defines a `__common_expr_*` alias.
//!
//! The rule also keeps a DELETE or UPDATE whose condition is always false (`WHERE 1 = 0`,
//! `a = 1 AND a = 2`) from writing every row: DataFusion's optimizer replaces such an input
//! with an empty relation, which leaves no filter to hand over, and a provider given no
//! filter changes every row. The input becomes a filter `false` over the table instead.
//!
//! What this module must not do: change what the statement writes (the inlined expression
//! is the one the alias named; an empty input writes nothing).

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::logical_expr::{Expr, LogicalPlan, LogicalPlanBuilder, Projection, WriteOp, lit};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

/// The rule (see the module docs).
#[derive(Debug, Default)]
pub struct InlineDmlCommonExprs;

/// Whether a DML input is filters and projections over a scan of one table (or the
/// optimizer's empty relation): what DataFusion's DML planning can hand to the provider.
fn simple_input(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::TableScan(_) | LogicalPlan::EmptyRelation(_) => true,
        LogicalPlan::Projection(p) => simple_input(&p.input),
        LogicalPlan::Filter(f) => {
            // A subquery left in the predicate is not the provider's to evaluate.
            !f.predicate
                .exists(|e| {
                    Ok(matches!(e, Expr::ScalarSubquery(_) | Expr::InSubquery(_) | Expr::Exists(_)))
                })
                .unwrap_or(true)
                && simple_input(&f.input)
        }
        LogicalPlan::SubqueryAlias(a) => simple_input(&a.input),
        _ => false,
    }
}

/// Whether a DML input is an empty relation (under projections, filters, aliases): the
/// optimizer's form of a condition that is always false.
fn reads_nothing(plan: &LogicalPlan) -> bool {
    match plan {
        LogicalPlan::EmptyRelation(e) => !e.produce_one_row,
        LogicalPlan::Projection(p) => reads_nothing(&p.input),
        LogicalPlan::Filter(f) => reads_nothing(&f.input),
        LogicalPlan::SubqueryAlias(a) => reads_nothing(&a.input),
        _ => false,
    }
}

/// The prefix of the aliases DataFusion's common subexpression elimination makes.
const PREFIX: &str = "__common_expr";

impl OptimizerRule for InlineDmlCommonExprs {
    fn name(&self) -> &str {
        "basalt_inline_dml_common_exprs"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        let LogicalPlan::Dml(dml) = &plan else { return Ok(Transformed::no(plan)) };
        if !matches!(dml.op, WriteOp::Delete | WriteOp::Update) {
            return Ok(Transformed::no(plan));
        }
        // DataFusion hands the provider only the predicates of filters on the table: an
        // input that joins (a decorrelated `IN` / `EXISTS` subquery), aggregates or
        // limits would lose its condition and write every row. Refused (the dispatcher
        // runs statements with subqueries another way, see `connection::dml_query`).
        if !simple_input(&dml.input) {
            return Err(datafusion::error::DataFusionError::Plan(format!(
                "{} on '{}': this condition cannot be applied to the table's rows",
                dml.op.name(),
                dml.table_name
            )));
        }
        if reads_nothing(&dml.input) {
            let scan =
                LogicalPlanBuilder::scan(dml.table_name.clone(), Arc::clone(&dml.target), None)?
                    .filter(lit(false))?
                    .build()?;
            // An UPDATE's assignments are its input's top projection: kept.
            let input = match dml.input.as_ref() {
                LogicalPlan::Projection(p) => {
                    LogicalPlan::Projection(Projection::try_new(p.expr.clone(), Arc::new(scan))?)
                }
                _ => scan,
            };
            let mut dml = dml.clone();
            dml.input = Arc::new(input);
            return Ok(Transformed::yes(LogicalPlan::Dml(dml)));
        }
        let mut defined: HashMap<String, Expr> = HashMap::new();
        dml.input.apply(|node| {
            if let LogicalPlan::Projection(p) = node {
                for e in &p.expr {
                    if let Expr::Alias(a) = e
                        && a.name.starts_with(PREFIX)
                    {
                        defined.insert(a.name.clone(), a.expr.as_ref().clone());
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        if defined.is_empty() {
            return Ok(Transformed::no(plan));
        }
        let inline = |e: Expr| {
            e.transform_up(|x| match &x {
                Expr::Column(c) if c.relation.is_none() && c.name.starts_with(PREFIX) => {
                    match defined.get(&c.name) {
                        // A defined expression may name an earlier alias in turn.
                        Some(d) => Ok(Transformed::new(d.clone(), true, TreeNodeRecursion::Jump)),
                        None => Ok(Transformed::no(x)),
                    }
                }
                _ => Ok(Transformed::no(x)),
            })
        };
        let inline_all = |e: Expr| -> Result<Transformed<Expr>> {
            let mut t = inline(e)?;
            // Nested aliases: inline until nothing names one.
            while t.transformed
                && t.data.exists(|x| {
                    Ok(matches!(x, Expr::Column(c) if c.relation.is_none() && defined.contains_key(&c.name)))
                })?
            {
                t = inline(t.data)?.update_data(|d| d);
            }
            Ok(t)
        };
        plan.transform_down(|node| match node {
            LogicalPlan::Filter(_) => node.map_expressions(&inline_all),
            n => Ok(Transformed::no(n)),
        })
    }
}
