//! Checked integer arithmetic: an integer `+`, `-`, `*`, unary `-` or `sum` whose result
//! does not fit its type is an error ("integer overflow"), as in PostgreSQL and DuckDB,
//! never a wrapped value that a query returns or an `UPDATE` stores.
//!
//! DataFusion wraps: its binary operators use wrapping kernels, its constant folding
//! evaluates them, and its `sum` adds with wrapping. So:
//!
//! - [`CheckedArithmetic`], an analyzer rule that runs after DataFusion's type coercion,
//!   replaces every integer `a + b`, `a - b`, `a * b` (both sides of one integer type) and
//!   `-a` of a plan — subqueries included — by [`CheckedOp`], a scalar function computing
//!   it with Arrow's checked kernels. Its output name is the operator's (`a + Int64(1)`),
//!   so column names do not change. Constant folding cannot fold an overflowing call (the
//!   error comes when the statement runs, like any runtime error).
//! - [`CheckedSum`] is `sum` computed exactly (in 128 bits) for integer arguments (Int64 /
//!   UInt64 results) — grouped or not, `DISTINCT`, over window frames (sliding ones too)
//!   — an error when the result does not fit; every other argument type is DataFusion's
//!   `sum` unchanged.
//!
//! - The same rule replaces `a || b` of two Utf8 values by [`CheckedOp`] with
//!   [`Arith::Concat`] (Arrow's kernel, after a check that the output is at most
//!   [`crate::functions::MAX_OUTPUT_BYTES`]: past Utf8's 32-bit offsets the kernel panics),
//!   and calls of DataFusion's own forms of the functions [`crate::functions::bounded`]
//!   wraps (the planner makes `[1] || [2]` an `array_concat` call) by the bounded ones.
//!
//! Used on every session (registered in `connection/mod.rs`). What it must not do: change
//! anything but whether an overflow (or an oversized output) is an error.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, PrimitiveArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::kernels::concat_elements::concat_elements_utf8;
use datafusion::arrow::compute::kernels::numeric::{add, mul, neg, sub};
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Int64Type, UInt64Type};
use datafusion::arrow::error::ArrowError;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, Result, ScalarValue, plan_err};
use datafusion::functions_aggregate::sum::Sum;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::AggregateOrderSensitivity;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, BinaryExpr, ColumnarValue, EmitTo, Expr,
    ExprSchemable, GroupsAccumulator, LogicalPlan, Operator, ReturnFieldArgs, ReversedUDAF,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, SetMonotonicity, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The arithmetic a [`CheckedOp`] computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Arith {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `-a`
    Neg,
    /// `a || b` of two Utf8 values: its output must fit Utf8's 32-bit offsets (Arrow's
    /// kernel panics past them).
    Concat,
}

/// An integer operator computed with Arrow's checked kernels (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedOp {
    op: Arith,
    signature: Signature,
}

impl CheckedOp {
    /// The function for `op`.
    pub fn udf(op: Arith) -> ScalarUDF {
        let arity = if op == Arith::Neg { 1 } else { 2 };
        ScalarUDF::from(CheckedOp { op, signature: Signature::any(arity, Volatility::Immutable) })
    }

    /// The arithmetic it computes.
    pub fn arith(&self) -> Arith {
        self.op
    }

    /// The operator's symbol.
    fn symbol(&self) -> Operator {
        match self.op {
            Arith::Add => Operator::Plus,
            Arith::Sub | Arith::Neg => Operator::Minus,
            Arith::Mul => Operator::Multiply,
            Arith::Concat => Operator::StringConcat,
        }
    }

    /// The name the operator's expression has (`a + b`, `(- a)`), from the arguments'
    /// names given by `name`. A left-deep chain of these calls (`a + b + c …`) is named in
    /// one loop, not one nested call per term: names of long chains are asked for often,
    /// and recursing per term took the stack of a thread at a few hundred terms.
    fn name_as_operator(&self, args: &[Expr], name: impl Fn(&Expr) -> String) -> Result<String> {
        let (left, right) = match (self.op, args) {
            (Arith::Neg, [a]) => return Ok(format!("(- {})", name(a))),
            (_, [a, b]) => (a, b),
            _ => return plan_err!("{}: wrong number of arguments", self.name()),
        };
        let mut rights = vec![(self.symbol(), right)];
        let mut left = left;
        while let Expr::ScalarFunction(f) = left
            && let Some(inner) = f.func.inner().downcast_ref::<CheckedOp>()
            && let [l, r] = f.args.as_slice()
        {
            rights.push((inner.symbol(), r));
            left = l;
        }
        let mut out = name(left);
        for (op, r) in rights.iter().rev() {
            out.push_str(&format!(" {op} {}", name(r)));
        }
        Ok(out)
    }
}

fn overflow(e: ArrowError) -> DataFusionError {
    match e {
        ArrowError::ArithmeticOverflow(m) => {
            DataFusionError::Execution(format!("integer overflow: {m}"))
        }
        e => DataFusionError::ArrowError(Box::new(e), None),
    }
}

impl ScalarUDFImpl for CheckedOp {
    fn name(&self) -> &str {
        match self.op {
            Arith::Add => "basalt_checked_add",
            Arith::Sub => "basalt_checked_sub",
            Arith::Mul => "basalt_checked_mul",
            Arith::Neg => "basalt_checked_neg",
            Arith::Concat => "basalt_checked_concat",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types.first() {
            Some(t) => Ok(t.clone()),
            None => plan_err!("{} needs an argument", self.name()),
        }
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs<'_>) -> Result<FieldRef> {
        let Some(first) = args.arg_fields.first() else {
            return plan_err!("{} needs an argument", self.name());
        };
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(Field::new(self.name(), first.data_type().clone(), nullable)))
    }
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.name_as_operator(args, |e| e.schema_name().to_string())
    }
    fn display_name(&self, args: &[Expr]) -> Result<String> {
        self.name_as_operator(args, |e| e.to_string())
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args.args.iter().all(|a| matches!(a, ColumnarValue::Scalar(_)));
        if let (Arith::Add | Arith::Sub, [a, b]) = (self.op, args.args.as_slice())
            && let Some(out) = wide_add_or_sub(self.op == Arith::Sub, a, b)?
        {
            return Ok(ColumnarValue::Array(out));
        }
        let rows = args.number_rows;
        if self.op == Arith::Concat {
            let bytes: u64 = args.args.iter().map(|a| text_bytes(a, rows)).sum();
            if bytes > crate::functions::MAX_OUTPUT_BYTES {
                return Err(DataFusionError::ResourcesExhausted(format!(
                    "|| would build about {bytes} bytes of text (more than the {} one \
                     operation may build)",
                    crate::functions::MAX_OUTPUT_BYTES
                )));
            }
        }
        let arrays: Vec<ArrayRef> =
            args.args.iter().map(|a| a.to_array(rows)).collect::<Result<_>>()?;
        let out = match (self.op, arrays.as_slice()) {
            (Arith::Concat, [a, b]) => {
                match (a.as_string_opt::<i32>(), b.as_string_opt::<i32>()) {
                    (Some(a), Some(b)) => concat_elements_utf8(a, b)
                        .map(|o| Arc::new(o) as ArrayRef)
                        .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))?,
                    _ => return plan_err!("{}: arguments are not Utf8", self.name()),
                }
            }
            (Arith::Add, [a, b]) => add(a, b).map_err(overflow)?,
            (Arith::Sub, [a, b]) => sub(a, b).map_err(overflow)?,
            (Arith::Mul, [a, b]) => mul(a, b).map_err(overflow)?,
            (Arith::Neg, [a]) => neg(a).map_err(overflow)?,
            _ => return plan_err!("{}: wrong number of arguments", self.name()),
        };
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

/// Bytes of text in a Utf8 argument over `rows` rows (a scalar counts once per row).
fn text_bytes(v: &ColumnarValue, rows: usize) -> u64 {
    match v {
        ColumnarValue::Scalar(ScalarValue::Utf8(Some(s))) => (s.len() as u64) * rows as u64,
        ColumnarValue::Scalar(_) => 0,
        ColumnarValue::Array(a) => a.as_string_opt::<i32>().map_or(0, |a| {
            let o = a.value_offsets();
            (o[o.len() - 1] - o[0]).max(0) as u64
        }),
    }
}

/// `a + b` or `a - b` of BIGINT columns without NULLs (or a column and a constant), when
/// that is what the arguments are: the wrapping results computed in one loop the compiler
/// vectorises, with the overflow test of two's complement (`a + b` overflowed iff the
/// result's sign differs from both operands'; `a - b` iff the operands' signs differ and
/// the result's differs from `a`'s) folded into one word, so checking costs no branch per
/// row (Arrow's checked kernels test each row). `None` when the arguments are anything
/// else (they take the general path).
fn wide_add_or_sub(sub: bool, a: &ColumnarValue, b: &ColumnarValue) -> Result<Option<ArrayRef>> {
    use datafusion::arrow::array::Int64Array;
    fn values(v: &ColumnarValue) -> Option<Result<&[i64], i64>> {
        match v {
            ColumnarValue::Array(a) => {
                let a = a.as_primitive_opt::<Int64Type>()?;
                (a.null_count() == 0).then(|| Ok(a.values().as_ref()))
            }
            ColumnarValue::Scalar(ScalarValue::Int64(Some(x))) => Some(Err(*x)),
            _ => None,
        }
    }
    let (Some(x), Some(y)) = (values(a), values(b)) else { return Ok(None) };
    let op = |p: i64, q: i64| {
        if sub {
            let r = p.wrapping_sub(q);
            (r, (p ^ q) & (p ^ r))
        } else {
            let r = p.wrapping_add(q);
            (r, (p ^ r) & (q ^ r))
        }
    };
    let mut bad = 0i64;
    // Each result kept, its overflow word or-ed into `bad` (no branch per row).
    let mut keep = |(r, o): (i64, i64)| {
        bad |= o;
        r
    };
    let out: Vec<i64> = match (x, y) {
        (Ok(x), Ok(y)) => x.iter().zip(y).map(|(&p, &q)| keep(op(p, q))).collect(),
        (Ok(x), Err(q)) => x.iter().map(|&p| keep(op(p, q))).collect(),
        (Err(p), Ok(y)) => y.iter().map(|&q| keep(op(p, q))).collect(),
        (Err(_), Err(_)) => return Ok(None),
    };
    if bad < 0 {
        return Err(DataFusionError::Execution(format!(
            "integer overflow: a BIGINT {} does not fit BIGINT",
            if sub { "difference" } else { "sum" }
        )));
    }
    Ok(Some(Arc::new(Int64Array::from(out))))
}

/// Replaces integer operators by [`CheckedOp`] calls (see the module docs).
#[derive(Debug)]
pub struct CheckedArithmetic {
    add: Arc<ScalarUDF>,
    sub: Arc<ScalarUDF>,
    mul: Arc<ScalarUDF>,
    neg: Arc<ScalarUDF>,
    concat: Arc<ScalarUDF>,
    /// The functions whose output size is bounded ([`crate::functions::bounded`]).
    bounded: Vec<Arc<ScalarUDF>>,
}

impl Default for CheckedArithmetic {
    fn default() -> Self {
        CheckedArithmetic {
            add: Arc::new(CheckedOp::udf(Arith::Add)),
            sub: Arc::new(CheckedOp::udf(Arith::Sub)),
            mul: Arc::new(CheckedOp::udf(Arith::Mul)),
            neg: Arc::new(CheckedOp::udf(Arith::Neg)),
            concat: Arc::new(CheckedOp::udf(Arith::Concat)),
            bounded: crate::functions::bounded().into_iter().map(Arc::new).collect(),
        }
    }
}

impl CheckedArithmetic {
    /// `e` with its integer operators replaced, given the schema its columns come from.
    fn rewrite(&self, e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        e.transform_up(|e| {
            let int = |x: &Expr| type_of(x, schema).filter(DataType::is_integer);
            let call = |f: &Arc<ScalarUDF>, args: Vec<Expr>| {
                Expr::ScalarFunction(ScalarFunction { func: f.clone(), args })
            };
            Ok(match e {
                Expr::BinaryExpr(BinaryExpr { left, op, right })
                    if matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply)
                        && int(&left).is_some_and(|t| Some(t) == int(&right)) =>
                {
                    let f = match op {
                        Operator::Plus => &self.add,
                        Operator::Minus => &self.sub,
                        _ => &self.mul,
                    };
                    Transformed::yes(call(f, vec![*left, *right]))
                }
                Expr::Negative(a) if int(&a).is_some() => {
                    Transformed::yes(call(&self.neg, vec![*a]))
                }
                Expr::BinaryExpr(BinaryExpr { left, op: Operator::StringConcat, right })
                    if type_of(&left, schema) == Some(DataType::Utf8)
                        && type_of(&right, schema) == Some(DataType::Utf8) =>
                {
                    Transformed::yes(call(&self.concat, vec![*left, *right]))
                }
                // DataFusion's own form of a function Basalt bounds: the bounded one.
                Expr::ScalarFunction(f)
                    if !crate::functions::is_bounded(&f.func)
                        && self.bounded.iter().any(|b| b.name() == f.func.name()) =>
                {
                    match self.bounded.iter().find(|b| b.name() == f.func.name()) {
                        Some(b) => Transformed::yes(call(b, f.args)),
                        None => Transformed::no(Expr::ScalarFunction(f)),
                    }
                }
                e => Transformed::no(e),
            })
        })
    }
}

/// The type of `e` (`None`: unknown). A chain of [`CheckedOp`] calls has the type of the
/// innermost first argument, found in a loop: asking DataFusion would compute the type
/// (and the name) of every level below, for every level of the chain.
fn type_of(e: &Expr, schema: &DFSchema) -> Option<DataType> {
    let mut e = e;
    while let Expr::ScalarFunction(f) = e
        && f.func.inner().downcast_ref::<CheckedOp>().is_some()
        && let Some(first) = f.args.first()
    {
        e = first;
    }
    e.get_type(schema).ok()
}

impl AnalyzerRule for CheckedArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| {
            // Expressions of a node read its inputs' columns (a scan's, its own schema's).
            let schema = match p.inputs().as_slice() {
                [] => p.schema().as_ref().clone(),
                inputs => datafusion::logical_expr::utils::merge_schema(inputs),
            };
            p.map_expressions(|e| self.rewrite(e, &schema))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_checked_arithmetic"
    }
}

/// `sum` with checked integer additions (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedSum {
    inner: Sum,
}

impl CheckedSum {
    /// The aggregate function, named `sum`.
    pub fn udaf() -> AggregateUDF {
        AggregateUDF::from(CheckedSum { inner: Sum::new() })
    }
}

/// The result type of an integer `sum` (DISTINCT or not).
fn integer_sum(args: &AccumulatorArgs<'_>) -> Option<DataType> {
    let t = args.return_field.data_type();
    matches!(t, DataType::Int64 | DataType::UInt64).then(|| t.clone())
}

/// Whether `sum` of this argument is computed here: integer results, no DISTINCT.
fn checked_type(args: &AccumulatorArgs<'_>) -> Option<DataType> {
    let t = args.return_field.data_type();
    (!args.is_distinct && matches!(t, DataType::Int64 | DataType::UInt64)).then(|| t.clone())
}

impl AggregateUDFImpl for CheckedSum {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn accumulator(&self, args: AccumulatorArgs<'_>) -> Result<Box<dyn Accumulator>> {
        match (checked_type(&args), integer_sum(&args)) {
            (Some(t), _) => Ok(Box::new(SumAcc::new(t == DataType::Int64))),
            (None, Some(t)) if args.is_distinct => Ok(Box::new(DistinctSumAcc::new(t))),
            _ => self.inner.accumulator(args),
        }
    }
    fn state_fields(&self, args: StateFieldsArgs<'_>) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }
    fn groups_accumulator_supported(&self, args: AccumulatorArgs<'_>) -> bool {
        self.inner.groups_accumulator_supported(args)
    }
    fn create_groups_accumulator(
        &self,
        args: AccumulatorArgs<'_>,
    ) -> Result<Box<dyn GroupsAccumulator>> {
        match checked_type(&args) {
            Some(t) => Ok(Box::new(SumGroups::new(t == DataType::Int64))),
            None => self.inner.create_groups_accumulator(args),
        }
    }
    fn create_sliding_accumulator(
        &self,
        args: AccumulatorArgs<'_>,
    ) -> Result<Box<dyn Accumulator>> {
        match (checked_type(&args), integer_sum(&args)) {
            (Some(t), _) => Ok(Box::new(SumAcc::new(t == DataType::Int64))),
            (None, Some(t)) if args.is_distinct => Ok(Box::new(DistinctSumAcc::new(t))),
            _ => self.inner.create_sliding_accumulator(args),
        }
    }
    fn reverse_expr(&self) -> ReversedUDAF {
        ReversedUDAF::Identical
    }
    fn order_sensitivity(&self) -> AggregateOrderSensitivity {
        self.inner.order_sensitivity()
    }
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        self.inner.documentation()
    }
    fn set_monotonicity(&self, data_type: &DataType) -> SetMonotonicity {
        self.inner.set_monotonicity(data_type)
    }
    fn value_from_stats(
        &self,
        statistics_args: &datafusion::logical_expr::StatisticsArgs<'_>,
    ) -> Option<ScalarValue> {
        self.inner.value_from_stats(statistics_args)
    }
}

/// Calls `f(row, value)` for each non-NULL value of an Int64 or UInt64 array, widened.
fn each_value(a: &dyn Array, mut f: impl FnMut(usize, i128)) -> Result<()> {
    fn go<T: datafusion::arrow::datatypes::ArrowPrimitiveType>(
        a: &PrimitiveArray<T>,
        f: &mut impl FnMut(usize, i128),
    ) where
        T::Native: Into<i128>,
    {
        match a.nulls().filter(|n| n.null_count() > 0) {
            None => a.values().iter().enumerate().for_each(|(r, &v)| f(r, v.into())),
            Some(n) => n.valid_indices().for_each(|r| f(r, a.value(r).into())),
        }
    }
    if let Some(v) = a.as_primitive_opt::<Int64Type>() {
        go(v, &mut f);
    } else if let Some(v) = a.as_primitive_opt::<UInt64Type>() {
        go(v, &mut f);
    } else {
        return Err(DataFusionError::Internal(format!("an integer sum of {}", a.data_type())));
    }
    Ok(())
}

/// `sum` of one group or of each group, computed exactly in 128 bits: it fails only when
/// the result (or a partial result handed to another part of the plan) does not fit the
/// sum's type, whatever order the rows come in.
fn narrowed(sums: &[i128], seen: &[bool], signed: bool) -> Result<ArrayRef> {
    let nulls = NullBuffer::from(seen.to_vec());
    let fits = |s: &i128, what: &str| {
        DataFusionError::Execution(format!("integer overflow: the sum {s} does not fit {what}"))
    };
    Ok(if signed {
        let v = sums
            .iter()
            .zip(seen)
            .map(
                |(s, &ok)| {
                    if ok { i64::try_from(*s).map_err(|_| fits(s, "BIGINT")) } else { Ok(0) }
                },
            )
            .collect::<Result<Vec<i64>>>()?;
        Arc::new(PrimitiveArray::<Int64Type>::new(v.into(), Some(nulls)))
    } else {
        let v =
            sums.iter()
                .zip(seen)
                .map(|(s, &ok)| {
                    if ok {
                        u64::try_from(*s).map_err(|_| fits(s, "BIGINT UNSIGNED"))
                    } else {
                        Ok(0)
                    }
                })
                .collect::<Result<Vec<u64>>>()?;
        Arc::new(PrimitiveArray::<UInt64Type>::new(v.into(), Some(nulls)))
    })
}

/// `sum` of one group, or of a window frame (values leave it by `retract_batch`).
#[derive(Debug)]
struct SumAcc {
    signed: bool,
    sum: i128,
    /// Values summed (net of retracted ones): NULL when none.
    count: u64,
}

impl SumAcc {
    fn new(signed: bool) -> Self {
        SumAcc { signed, sum: 0, count: 0 }
    }

    /// Adds (`sign` 1) or takes away (-1) the non-NULL values of `v`.
    fn fold(&mut self, v: &dyn Array, sign: i128) -> Result<()> {
        // Fewer than 2^63 rows of at most 2^64 each: an i128 cannot overflow.
        let (mut sum, mut n) = (0i128, 0u64);
        each_value(v, |_, x| {
            sum += x;
            n += 1;
        })?;
        self.sum += sign * sum;
        self.count = if sign > 0 { self.count + n } else { self.count.saturating_sub(n) };
        Ok(())
    }
}

impl Accumulator for SumAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(v) = values.first() else { return Ok(()) };
        self.fold(v.as_ref(), 1)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(v) = values.first() else { return Ok(()) };
        self.fold(v.as_ref(), -1)
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.update_batch(states)
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![self.evaluate()?])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        ScalarValue::try_from_array(&narrowed(&[self.sum], &[self.count > 0], self.signed)?, 0)
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }
}

/// `sum(DISTINCT …)` of one group or window frame: the distinct values, each with how
/// many rows hold it (a frame's rows leave by `retract_batch`), summed exactly at the end.
/// Its state is DataFusion's: the list of distinct values.
#[derive(Debug)]
struct DistinctSumAcc {
    data_type: DataType,
    values: std::collections::HashMap<i128, u64>,
}

impl DistinctSumAcc {
    fn new(data_type: DataType) -> Self {
        DistinctSumAcc { data_type, values: Default::default() }
    }
}

impl Accumulator for DistinctSumAcc {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(v) = values.first() else { return Ok(()) };
        let set = &mut self.values;
        each_value(v.as_ref(), |_, x| *set.entry(x).or_default() += 1)
    }
    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let Some(v) = values.first() else { return Ok(()) };
        let set = &mut self.values;
        each_value(v.as_ref(), |_, x| {
            if let Some(n) = set.get_mut(&x) {
                *n -= 1;
                if *n == 0 {
                    set.remove(&x);
                }
            }
        })
    }
    fn supports_retract_batch(&self) -> bool {
        true
    }
    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let Some(lists) = states.first().and_then(|s| s.as_list_opt::<i32>()) else {
            return Err(DataFusionError::Internal("sum(DISTINCT) state is not a list".into()));
        };
        for l in lists.iter().flatten() {
            self.update_batch(&[l])?;
        }
        Ok(())
    }
    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        let items = self
            .values
            .keys()
            .map(|&x| match self.data_type {
                DataType::Int64 => i64::try_from(x).map(|v| ScalarValue::Int64(Some(v))).ok(),
                _ => u64::try_from(x).map(|v| ScalarValue::UInt64(Some(v))).ok(),
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| DataFusionError::Internal("a distinct value out of range".into()))?;
        Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(&items, &self.data_type))])
    }
    fn evaluate(&mut self) -> Result<ScalarValue> {
        let sum: i128 = self.values.keys().sum();
        let seen = !self.values.is_empty();
        ScalarValue::try_from_array(
            &narrowed(&[sum], &[seen], self.data_type == DataType::Int64)?,
            0,
        )
    }
    fn size(&self) -> usize {
        std::mem::size_of_val(self) + self.values.capacity() * 24
    }
}

/// `sum` per group: a running 128-bit sum and whether a value was seen, per group.
#[derive(Debug)]
struct SumGroups {
    signed: bool,
    sums: Vec<i128>,
    seen: Vec<bool>,
}

impl SumGroups {
    fn new(signed: bool) -> Self {
        SumGroups { signed, sums: Vec::new(), seen: Vec::new() }
    }
}

impl GroupsAccumulator for SumGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        let Some(v) = values.first() else { return Ok(()) };
        self.sums.resize(total_num_groups, 0);
        self.seen.resize(total_num_groups, false);
        let (sums, seen) = (&mut self.sums, &mut self.seen);
        each_value(v.as_ref(), |row, x| {
            if opt_filter.is_some_and(|f| !f.is_valid(row) || !f.value(row)) {
                return;
            }
            let g = group_indices[row];
            sums[g] += x;
            seen[g] = true;
        })
    }
    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.update_batch(values, group_indices, None, total_num_groups)
    }
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        // Each row its own group: the value, NULL where it is NULL or filtered out.
        let Some(v) = values.first() else { return Ok(Vec::new()) };
        let keep = opt_filter.map(|f| match f.nulls() {
            Some(n) => NullBuffer::new(f.values() & n.inner()),
            None => NullBuffer::new(f.values().clone()),
        });
        let nulls = NullBuffer::union(v.nulls(), keep.as_ref());
        let data = v.to_data().into_builder().nulls(nulls).build()?;
        Ok(vec![datafusion::arrow::array::make_array(data)])
    }
    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        let sums = emit_to.take_needed(&mut self.sums);
        let seen = emit_to.take_needed(&mut self.seen);
        narrowed(&sums, &seen, self.signed)
    }
    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        Ok(vec![self.evaluate(emit_to)?])
    }
    fn size(&self) -> usize {
        self.sums.capacity() * 16 + self.seen.capacity()
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Int64Array;

    use super::*;

    /// The vectorised sum and difference fail exactly when Arrow's checked kernels do, and
    /// give their values otherwise: columns with columns and with constants, at the edges.
    #[test]
    fn wide_sums_and_differences_agree_with_checked_kernels() {
        let edges = [i64::MIN, i64::MIN + 1, -2, -1, 0, 1, 2, i64::MAX - 1, i64::MAX];
        let mut pairs: Vec<(i64, i64)> =
            edges.iter().flat_map(|&a| edges.iter().map(move |&b| (a, b))).collect();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = x as i64 >> (x % 3 * 20);
            let b = (x.rotate_left(29) as i64) >> (x % 5 * 12);
            pairs.push((a, b));
        }
        for sub in [false, true] {
            for &(p, q) in &pairs {
                let want = if sub { p.checked_sub(q) } else { p.checked_add(q) };
                let col = |v: i64| ColumnarValue::Array(Arc::new(Int64Array::from(vec![v, v, v])));
                let lit = |v: i64| ColumnarValue::Scalar(ScalarValue::Int64(Some(v)));
                for (a, b) in [(col(p), col(q)), (col(p), lit(q)), (lit(p), col(q))] {
                    let got = wide_add_or_sub(sub, &a, &b);
                    match (want, got) {
                        (Some(w), Ok(Some(arr))) => {
                            assert_eq!(arr.as_primitive::<Int64Type>().value(1), w, "{p} {q}");
                        }
                        (None, Err(e)) => assert!(e.to_string().contains("overflow")),
                        (w, g) => {
                            panic!("{p} {} {q}: want {w:?}, got {g:?}", if sub { '-' } else { '+' })
                        }
                    }
                }
            }
        }
    }
}
