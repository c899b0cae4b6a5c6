//! Keeps SQL's NULL answer for pairs of IN lists that DataFusion's expression simplifier
//! would fold to a constant.
//!
//! The simplifier merges two lists on one expression: `x IN (1, 2) AND x IN (3)` becomes
//! `x IN ()`, then `false`; `x NOT IN (12) OR x NOT IN (9, 1)` becomes `x NOT IN ()`, then
//! `true`; `x IN (1) AND x NOT IN (1, 2)` becomes `false`. For a NULL `x` (or a NULL in a
//! list) the original is NULL, and under `NOT`, `CASE` or in a projection that difference
//! shows. [`InListNulls`], an analyzer rule (it runs before the optimizer), wraps the left
//! list of such a pair in [`keep`], an identity function the simplifier does not look into,
//! when:
//!
//! 1. an `AND` / `OR` has a list on each side (`x IN (…)`, `x NOT IN (…)`, `x = c`, or an
//!    `OR` of `x = c`s, which the simplifier turns into a list first) over the same `x`;
//! 2. and merging them leaves no element: `AND` of two `IN`s or `OR` of two `NOT IN`s with
//!    no common element, or `AND` of an `IN` whose elements all are in the `NOT IN`.
//!
//! 3. and the pair is not an `AND` at the top of a filter's predicate (a filter drops NULL
//!    and FALSE rows alike, so there the constant is right and prunes the scan).
//!
//! Merges that leave a list are right for NULLs too and are left to the simplifier. The
//! wrapped predicate is evaluated by DataFusion (storage cannot take `keep`).
//!
//! What it must not do: change a query's result or output schema.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::expr::{InList, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// Guards IN-list pairs from folding (see the module docs).
#[derive(Debug, Default)]
pub struct InListNulls;

impl AnalyzerRule for InListNulls {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| {
            let filter = matches!(p, LogicalPlan::Filter(_));
            // A rewritten output expression keeps its name (and so the plan its schema).
            let names = NamePreserver::new(&p);
            p.map_expressions(|e| {
                // Most expressions hold no such pair: they skip naming and rewriting.
                if !e.exists(|x| Ok(matches!(x, Expr::BinaryExpr(b) if folds(b))))? {
                    return Ok(Transformed::no(e));
                }
                let saved = names.save(&e);
                let e = if filter { guard_conjuncts(e)? } else { e.transform_up(guard)? };
                Ok(e.update_data(|e| saved.restore(e)))
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_in_list_nulls"
    }
}

/// A filter's predicate: its top-level `AND`s are left to the simplifier (a filter drops
/// NULL and FALSE rows alike, so `x IN (1) AND x IN (2)` may become FALSE there and prune
/// the scan); everything below them is guarded.
fn guard_conjuncts(e: Expr) -> Result<Transformed<Expr>> {
    match e {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            let (l, r) = (guard_conjuncts(*left)?, guard_conjuncts(*right)?);
            let changed = l.transformed || r.transformed;
            let e = Expr::BinaryExpr(BinaryExpr::new(
                Box::new(l.data),
                Operator::And,
                Box::new(r.data),
            ));
            Ok(if changed { Transformed::yes(e) } else { Transformed::no(e) })
        }
        e => e.transform_up(guard),
    }
}

fn guard(e: Expr) -> Result<Transformed<Expr>> {
    let Expr::BinaryExpr(b) = e else { return Ok(Transformed::no(e)) };
    if !folds(&b) {
        return Ok(Transformed::no(Expr::BinaryExpr(b)));
    }
    let BinaryExpr { left, op, right } = b;
    let kept = Expr::ScalarFunction(ScalarFunction::new_udf(KEEP.clone(), vec![*left]));
    Ok(Transformed::yes(Expr::BinaryExpr(BinaryExpr::new(Box::new(kept), op, right))))
}

/// Conditions 1 and 2 of the module docs.
fn folds(b: &BinaryExpr) -> bool {
    matches!(b.op, Operator::And | Operator::Or)
        && match (as_list(&b.left), as_list(&b.right)) {
            (Some(l), Some(r)) => l.0 == r.0 && folds_to_constant(b.op, &l, &r),
            _ => false,
        }
}

/// An IN list as the simplifier sees one: (expression, elements, negated).
type List<'a> = (&'a Expr, Vec<&'a Expr>, bool);

fn as_list(e: &Expr) -> Option<List<'_>> {
    match e {
        Expr::InList(InList { expr, list, negated }) => {
            Some((expr.as_ref(), list.iter().collect(), *negated))
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Eq, right }) => {
            match (left.as_ref(), right.as_ref()) {
                (x, c @ Expr::Literal(..)) | (c @ Expr::Literal(..), x)
                    if !matches!(x, Expr::Literal(..)) =>
                {
                    Some((x, vec![c], false))
                }
                _ => None,
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            let (l, r) = (as_list(left)?, as_list(right)?);
            (l.0 == r.0 && !l.2 && !r.2).then(|| (l.0, [l.1, r.1].concat(), false))
        }
        _ => None,
    }
}

/// Condition 2 of the module docs, for two lists over one expression.
fn folds_to_constant(op: Operator, l: &List<'_>, r: &List<'_>) -> bool {
    let common = || l.1.iter().any(|a| r.1.contains(a));
    match (op, l.2, r.2) {
        (Operator::And, false, false) | (Operator::Or, true, true) => !common(),
        (Operator::And, false, true) => l.1.iter().all(|a| r.1.contains(a)),
        (Operator::And, true, false) => r.1.iter().all(|a| l.1.contains(a)),
        _ => false,
    }
}

static KEEP: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| Arc::new(ScalarUDF::from(Keep::new())));

/// `basalt_keep(b)`: `b` itself, a boolean the simplifier does not rewrite through.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Keep {
    signature: Signature,
}

impl Keep {
    fn new() -> Keep {
        Keep { signature: Signature::exact(vec![DataType::Boolean], Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for Keep {
    fn name(&self) -> &str {
        "basalt_keep"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        match <[ColumnarValue; 1]>::try_from(args.args) {
            Ok([v]) => Ok(v),
            Err(_) => plan_err!("basalt_keep takes one argument"),
        }
    }
}
