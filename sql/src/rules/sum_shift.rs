//! Sums of shifted values, `sum(x + c)`, computed from one `sum(x)` and one `count(x)`:
//! `sum(x + c) = sum(x) + c · count(x)` (and `sum(x - c)`, `sum(c - x)` alike), so an
//! aggregate listing many shifts of one column scans it for two aggregates instead of one
//! per shift (ClickBench's `SUM(ResolutionWidth + 0 … 89)` is the extreme case).
//!
//! [`SumShift`], an analyzer rule that runs after [`super::checked::CheckedArithmetic`],
//! rewrites an `Aggregate` when:
//!
//! 1. it has no grouping sets;
//! 2. some of its aggregates are plain `sum`s (no `DISTINCT`, `FILTER` or `ORDER BY`) of
//!    `x + c`, `c + x`, `x - c` or `c - x`, where `c` is a 64-bit integer constant with
//!    |c| ≤ 2³¹ and `x` a 64-bit cast of an integer of at most 32 bits;
//! 3. rewriting leaves fewer aggregates besides the `count`s it adds (two shifts of one
//!    `x`, or one next to a plain `sum(x)`): a lone `sum(x + 1)` is left alone, as a sum
//!    and a count cost a little more than one sum.
//!
//! The `Aggregate` then computes the distinct `sum(x)` / `count(x)` pairs and every other
//! aggregate once, and a `Projection` on top gives the original output columns, names and
//! types: `sum(x) + c * count(x)` with Basalt's checked operators.
//!
//! The answers are the same integers: no `x ± c` can overflow 64 bits, sums are exact
//! (128-bit) and both forms are NULL exactly when no `x` is non-NULL. Under condition 2
//! neither form overflows below 2³¹ rows in one group; beyond that, where the original's
//! total fits but `sum(x)` alone or `c · count(x)` does not, the rewritten form reports the
//! overflow.
//!
//! What it must not do: change a query's result or output schema.

use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{Column, DFSchema, Result, ScalarValue};
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::logical_expr::expr::{AggregateFunction, AggregateFunctionParams, ScalarFunction};
use datafusion::logical_expr::{
    Aggregate, AggregateUDF, BinaryExpr, Expr, ExprSchemable, LogicalPlan, Operator, Projection,
    ScalarUDF,
};
use datafusion::optimizer::AnalyzerRule;

use super::checked::{Arith, CheckedOp};

/// The largest |c| rewritten (condition 2 of the module docs).
const MAX_SHIFT: i64 = 1 << 31;

/// Rewrites sums of shifted values (see the module docs).
#[derive(Debug)]
pub struct SumShift {
    add: Arc<ScalarUDF>,
    sub: Arc<ScalarUDF>,
    mul: Arc<ScalarUDF>,
    count: Arc<AggregateUDF>,
}

impl Default for SumShift {
    fn default() -> Self {
        SumShift {
            add: Arc::new(CheckedOp::udf(Arith::Add)),
            sub: Arc::new(CheckedOp::udf(Arith::Sub)),
            mul: Arc::new(CheckedOp::udf(Arith::Mul)),
            count: count_udaf(),
        }
    }
}

/// `sum(x ± c)` taken apart: `x`, `c`, and whether the sum is `c - x`.
struct Shift {
    x: Expr,
    c: i64,
    negated: bool,
}

/// `x` when it is a 64-bit cast of a narrow integer (condition 2).
fn narrow_widened(x: &Expr, schema: &DFSchema) -> bool {
    match x {
        Expr::Cast(c) if c.field.data_type() == &DataType::Int64 => matches!(
            c.expr.get_type(schema),
            Ok(DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::UInt8
                | DataType::UInt16
                | DataType::UInt32)
        ),
        _ => false,
    }
}

fn constant(e: &Expr) -> Option<i64> {
    match e {
        Expr::Literal(ScalarValue::Int64(Some(c)), _) if c.abs() <= MAX_SHIFT => Some(*c),
        _ => None,
    }
}

/// The operator and operands of `a + b` / `a - b`, plain or checked.
fn operands(e: &Expr) -> Option<(Operator, &Expr, &Expr)> {
    match e {
        Expr::BinaryExpr(BinaryExpr {
            left,
            op: op @ (Operator::Plus | Operator::Minus),
            right,
        }) => Some((*op, left, right)),
        Expr::ScalarFunction(f) => {
            let op = match f.func.inner().downcast_ref::<CheckedOp>()?.arith() {
                Arith::Add => Operator::Plus,
                Arith::Sub => Operator::Minus,
                _ => return None,
            };
            match f.args.as_slice() {
                [a, b] => Some((op, a, b)),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The shift a plain `sum` aggregates, if it is one (condition 2).
fn shift(e: &Expr, schema: &DFSchema) -> Option<Shift> {
    let Expr::AggregateFunction(AggregateFunction { func, params }) = e else { return None };
    let AggregateFunctionParams { args, distinct, filter, order_by, null_treatment } = params;
    if func.name() != "sum" || *distinct || filter.is_some() || !order_by.is_empty() {
        return None;
    }
    if null_treatment.is_some() {
        return None;
    }
    let [arg] = args.as_slice() else { return None };
    let (op, a, b) = operands(arg)?;
    let (x, c, negated) = match (op, constant(a), constant(b)) {
        (Operator::Plus, None, Some(c)) => (a, c, false),
        (Operator::Plus, Some(c), None) => (b, c, false),
        (Operator::Minus, None, Some(c)) => (a, -c, false),
        (Operator::Minus, Some(c), None) => (b, c, true),
        _ => return None,
    };
    narrow_widened(x, schema).then(|| Shift { x: x.clone(), c, negated })
}

/// The index of `e` in `list`, pushing it when absent.
fn index_of(list: &mut Vec<Expr>, e: Expr) -> usize {
    match list.iter().position(|x| *x == e) {
        Some(i) => i,
        None => {
            list.push(e);
            list.len() - 1
        }
    }
}

impl SumShift {
    fn call(&self, f: &Arc<ScalarUDF>, a: Expr, b: Expr) -> Expr {
        Expr::ScalarFunction(ScalarFunction { func: f.clone(), args: vec![a, b] })
    }

    /// `agg` rewritten, or `None` when the module's conditions do not hold.
    fn rewrite(&self, agg: &Aggregate) -> Result<Option<LogicalPlan>> {
        if agg.group_expr.iter().any(|g| matches!(g, Expr::GroupingSet(_))) {
            return Ok(None);
        }
        let input_schema = agg.input.schema();
        // Per original aggregate: its index in the new list, or the indexes of its sum and
        // count with the shift.
        enum Out {
            Same(usize),
            Shifted { sum: usize, count: usize, c: i64, negated: bool },
        }
        let mut list: Vec<Expr> = Vec::new();
        let mut outs = Vec::with_capacity(agg.aggr_expr.len());
        // Counts cost next to nothing (a NULL count per batch): only the other aggregates
        // must become fewer for the rewrite to pay.
        let mut added_counts = 0;
        for e in &agg.aggr_expr {
            match shift(e, input_schema) {
                Some(Shift { x, c, negated }) => {
                    let Expr::AggregateFunction(f) = e else { return Ok(None) };
                    let sum = Expr::AggregateFunction(AggregateFunction::new_udf(
                        f.func.clone(),
                        vec![x.clone()],
                        false,
                        None,
                        vec![],
                        None,
                    ));
                    let count = Expr::AggregateFunction(AggregateFunction::new_udf(
                        self.count.clone(),
                        vec![x],
                        false,
                        None,
                        vec![],
                        None,
                    ));
                    let sum = index_of(&mut list, sum);
                    let before = list.len();
                    let count = index_of(&mut list, count);
                    added_counts += list.len() - before;
                    outs.push(Out::Shifted { sum, count, c, negated });
                }
                None => outs.push(Out::Same(index_of(&mut list, e.clone()))),
            }
        }
        if list.len() - added_counts >= agg.aggr_expr.len() {
            return Ok(None);
        }
        let new = Aggregate::try_new(agg.input.clone(), agg.group_expr.clone(), list)?;
        let groups = agg.group_expr.len();
        let column = |i: usize| {
            let (q, f) = new.schema.qualified_field(groups + i);
            Expr::Column(Column::new(q.cloned(), f.name()))
        };
        let mut exprs: Vec<Expr> = (0..groups)
            .map(|i| {
                let (q, f) = new.schema.qualified_field(i);
                Expr::Column(Column::new(q.cloned(), f.name()))
            })
            .collect();
        for (i, out) in outs.into_iter().enumerate() {
            let (_, field) = agg.schema.qualified_field(groups + i);
            let e = match out {
                Out::Same(j) => column(j),
                Out::Shifted { sum, count, c, negated } => {
                    let scaled = self.call(
                        &self.mul,
                        Expr::Literal(ScalarValue::Int64(Some(c)), None),
                        column(count),
                    );
                    if negated {
                        self.call(&self.sub, scaled, column(sum))
                    } else {
                        self.call(&self.add, column(sum), scaled)
                    }
                }
            };
            exprs.push(e.alias(field.name()));
        }
        let projection = Projection::try_new(exprs, Arc::new(LogicalPlan::Aggregate(new)))?;
        if projection.schema.fields() != agg.schema.fields() {
            // Types or nullability would change: keep the original.
            return Ok(None);
        }
        Ok(Some(LogicalPlan::Projection(projection)))
    }
}

impl AnalyzerRule for SumShift {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| match &p {
            LogicalPlan::Aggregate(agg) => match self.rewrite(agg)? {
                Some(new) => Ok(Transformed::yes(new)),
                None => Ok(Transformed::no(p)),
            },
            _ => Ok(Transformed::no(p)),
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_sum_shift"
    }
}
