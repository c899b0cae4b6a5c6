//! Decimal `+`, `-` and `*` in tight loops: DataFusion computes `Decimal128` arithmetic
//! with Arrow's kernels, which check each value's overflow through a fallible closure per
//! row (no vectorisation; TPC-H's `l_extendedprice * (1 - l_discount)` spent half of Q1
//! there). [`DecimalArithmetic`], an analyzer rule that runs after DataFusion's type
//! coercion, replaces such an operator by [`DecimalOp`] when:
//!
//! 1. both sides are `Decimal128` (coercion has made them so for any decimal arithmetic);
//! 2. the operator is `+`, `-` or `*` (division keeps Arrow's kernel);
//! 3. the result type Arrow's rules give (the Hive rules: `+`/`-` at scale `max(s1, s2)`,
//!    `*` at scale `s1 + s2`) is the type DataFusion planned for the expression.
//!
//! [`DecimalOp`] rescales and combines the values with wrapping 128-bit operations, noting
//! whether any overflowed; only then, or for two constants, does it hand the operands to
//! Arrow's kernel, whose answer (or overflow error) is therefore the answer. Its names are
//! the operator's, so column names do not change.
//!
//! What it must not do: change a value, a type or whether an expression fails.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, PrimitiveArray};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::kernels::numeric::{add_wrapping, mul_wrapping, sub_wrapping};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Field, FieldRef};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, Result, ScalarValue, plan_err};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    BinaryExpr, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ReturnFieldArgs,
    ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr_common::datum::apply;

/// `+`, `-` or `*` of two `Decimal128` values (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct DecimalOp {
    op: Operator,
    signature: Signature,
}

/// The result precision and scale Arrow gives `op` over `(p1, s1)` and `(p2, s2)`.
fn result_type(op: Operator, (p1, s1): (u8, i8), (p2, s2): (u8, i8)) -> Option<(u8, i8)> {
    const MAX_PRECISION: u8 = 38;
    match op {
        Operator::Plus | Operator::Minus => {
            let scale = s1.max(s2);
            let int = (p1 as i8 - s1).max(p2 as i8 - s2);
            let precision = (scale.saturating_add(int) as u8).saturating_add(1).min(MAX_PRECISION);
            Some((precision, scale))
        }
        Operator::Multiply => {
            let scale = s1.checked_add(s2).filter(|s| *s <= MAX_PRECISION as i8)?;
            Some((p1.saturating_add(p2 + 1).min(MAX_PRECISION), scale))
        }
        _ => None,
    }
}

fn decimal(t: &DataType) -> Option<(u8, i8)> {
    match t {
        DataType::Decimal128(p, s) => Some((*p, *s)),
        _ => None,
    }
}

/// 10^k as an i128 (`None` past 10^38).
fn pow10(k: i8) -> Option<i128> {
    10i128.checked_pow(u32::try_from(k).ok()?)
}

/// One side of the operation: the values of an array (times a power of ten), or a
/// constant.
enum Side<'a> {
    Values(&'a [i128]),
    Scaled(&'a [i128], i128),
    Constant(i128),
}

impl Side<'_> {
    /// This side times `m` (a constant is multiplied here, once).
    fn scaled(self, m: i128) -> Option<Self> {
        Some(match self {
            s if m == 1 => s,
            Side::Values(v) => Side::Scaled(v, m),
            Side::Scaled(v, k) => Side::Scaled(v, k.checked_mul(m)?),
            Side::Constant(c) => Side::Constant(c.checked_mul(m)?),
        })
    }
}

/// `a * b` wrapped, and whether it overflowed. Values that fit 64 bits (decimals of up to
/// 18 digits) multiply with one widening multiplication, which cannot overflow; others
/// take the full 128-bit check (a library call).
#[inline(always)]
fn mul(a: i128, b: i128) -> (i128, bool) {
    let (x, y) = (a as i64, b as i64);
    if i128::from(x) == a && i128::from(y) == b {
        (i128::from(x) * i128::from(y), false)
    } else {
        a.overflowing_mul(b)
    }
}

/// `f(l[i], r[i])` for every row with wrapping results and whether any overflowed; one
/// loop per kind of side, so each is a plain loop over slices.
fn combine(
    n: usize,
    l: &Side<'_>,
    r: &Side<'_>,
    f: impl Fn(i128, i128) -> (i128, bool) + Copy,
) -> (Vec<i128>, bool) {
    fn run(
        n: usize,
        a: impl Fn(usize) -> (i128, bool),
        b: impl Fn(usize) -> (i128, bool),
        f: impl Fn(i128, i128) -> (i128, bool),
    ) -> (Vec<i128>, bool) {
        let mut out = Vec::with_capacity(n);
        let mut overflow = false;
        for i in 0..n {
            let ((x, o1), (y, o2)) = (a(i), b(i));
            let (z, o3) = f(x, y);
            overflow |= o1 | o2 | o3;
            out.push(z);
        }
        (out, overflow)
    }
    fn plain(v: &[i128]) -> impl Fn(usize) -> (i128, bool) + '_ {
        move |i| (v[i], false)
    }
    fn scaled(v: &[i128], m: i128) -> impl Fn(usize) -> (i128, bool) + '_ {
        move |i| mul(v[i], m)
    }
    fn constant(c: i128) -> impl Fn(usize) -> (i128, bool) {
        move |_| (c, false)
    }
    use Side::*;
    match (l, r) {
        (Values(a), Values(b)) => run(n, plain(a), plain(b), f),
        (Values(a), Scaled(b, m)) => run(n, plain(a), scaled(b, *m), f),
        (Scaled(a, m), Values(b)) => run(n, scaled(a, *m), plain(b), f),
        (Scaled(a, m), Scaled(b, k)) => run(n, scaled(a, *m), scaled(b, *k), f),
        (Values(a), Constant(c)) => run(n, plain(a), constant(*c), f),
        (Scaled(a, m), Constant(c)) => run(n, scaled(a, *m), constant(*c), f),
        (Constant(c), Values(b)) => run(n, constant(*c), plain(b), f),
        (Constant(c), Scaled(b, m)) => run(n, constant(*c), scaled(b, *m), f),
        (Constant(a), Constant(b)) => run(n, constant(*a), constant(*b), f),
    }
}

/// An operand of a [`DecimalOp`]: an array, or a non-NULL constant, and its scale.
struct Operand<'a> {
    scale: i8,
    array: Option<&'a ArrayRef>,
    constant: Option<i128>,
}

impl<'a> Operand<'a> {
    /// `None` for anything but a `Decimal128` array or non-NULL constant.
    fn of(v: &'a ColumnarValue) -> Option<Operand<'a>> {
        match v {
            ColumnarValue::Array(a) => {
                Some(Operand { scale: decimal(a.data_type())?.1, array: Some(a), constant: None })
            }
            ColumnarValue::Scalar(ScalarValue::Decimal128(Some(c), _, s)) => {
                Some(Operand { scale: *s, array: None, constant: Some(*c) })
            }
            _ => None,
        }
    }
}

/// The values of an array side, or its constant.
fn side_values(arr: Option<&ArrayRef>, c: Option<i128>) -> Option<Side<'_>> {
    match (arr, c) {
        (Some(a), _) => Some(Side::Values(a.as_primitive_opt::<Decimal128Type>()?.values())),
        (None, Some(c)) => Some(Side::Constant(c)),
        (None, None) => None,
    }
}

impl DecimalOp {
    /// The function for `op` (`+`, `-` or `*`).
    pub fn udf(op: Operator) -> ScalarUDF {
        ScalarUDF::from(DecimalOp { op, signature: Signature::any(2, Volatility::Immutable) })
    }

    /// The operator's name over `args`, as DataFusion names the operator itself.
    fn name_over(&self, args: &[Expr], schema: bool) -> Result<String> {
        let [a, b] = args else { return plan_err!("{}: two arguments", self.name()) };
        let e =
            Expr::BinaryExpr(BinaryExpr::new(Box::new(a.clone()), self.op, Box::new(b.clone())));
        Ok(if schema { e.schema_name().to_string() } else { e.to_string() })
    }

    /// The values of `a op b` computed with wrapping operations, or `None` when one
    /// overflowed (the caller then asks Arrow's kernel, which reports it).
    fn fast(&self, a: &ColumnarValue, b: &ColumnarValue, out: (u8, i8)) -> Option<ArrayRef> {
        let (a, b) = (Operand::of(a)?, Operand::of(b)?);
        let (s1, s2) = (a.scale, b.scale);
        let (aa, ab, ca, cb) = (a.array, b.array, a.constant, b.constant);
        let (n, nulls) = match (&aa, &ab) {
            (Some(x), Some(y)) => (x.len(), NullBuffer::union(x.nulls(), y.nulls())),
            (Some(x), None) | (None, Some(x)) => (x.len(), x.nulls().cloned()),
            (None, None) => return None,
        };
        let (l, r) = (side_values(aa, ca)?, side_values(ab, cb)?);
        let (v, overflow) = match self.op {
            Operator::Plus | Operator::Minus => {
                // Rescale: an array side per value (only when its scale is below the
                // result's), a constant once.
                let (l, r) = (l.scaled(pow10(out.1 - s1)?)?, r.scaled(pow10(out.1 - s2)?)?);
                if self.op == Operator::Minus {
                    combine(n, &l, &r, i128::overflowing_sub)
                } else {
                    combine(n, &l, &r, i128::overflowing_add)
                }
            }
            Operator::Multiply => combine(n, &l, &r, mul),
            _ => return None,
        };
        if overflow {
            return None;
        }
        let array = PrimitiveArray::<Decimal128Type>::new(v.into(), nulls)
            .with_precision_and_scale(out.0, out.1)
            .ok()?;
        Some(Arc::new(array))
    }
}

impl ScalarUDFImpl for DecimalOp {
    fn name(&self) -> &str {
        match self.op {
            Operator::Plus => "basalt_decimal_add",
            Operator::Minus => "basalt_decimal_sub",
            _ => "basalt_decimal_mul",
        }
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let [a, b] = arg_types else { return plan_err!("{}: two arguments", self.name()) };
        match (decimal(a), decimal(b)) {
            (Some(a), Some(b)) => match result_type(self.op, a, b) {
                Some((p, s)) => Ok(DataType::Decimal128(p, s)),
                None => plan_err!("{}: no result type for {a:?} and {b:?}", self.name()),
            },
            _ => plan_err!("{}: arguments are not Decimal128", self.name()),
        }
    }
    fn return_field_from_args(&self, args: ReturnFieldArgs<'_>) -> Result<FieldRef> {
        let types: Vec<DataType> = args.arg_fields.iter().map(|f| f.data_type().clone()).collect();
        let nullable = args.arg_fields.iter().any(|f| f.is_nullable());
        Ok(Arc::new(Field::new(self.name(), self.return_type(&types)?, nullable)))
    }
    fn schema_name(&self, args: &[Expr]) -> Result<String> {
        self.name_over(args, true)
    }
    fn display_name(&self, args: &[Expr]) -> Result<String> {
        self.name_over(args, false)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = args.args.as_slice() else {
            return plan_err!("{}: two arguments", self.name());
        };
        if let DataType::Decimal128(p, s) = args.return_field.data_type()
            && let Some(out) = self.fast(a, b, (*p, *s))
        {
            return Ok(ColumnarValue::Array(out));
        }
        match self.op {
            Operator::Plus => apply(a, b, add_wrapping),
            Operator::Minus => apply(a, b, sub_wrapping),
            _ => apply(a, b, mul_wrapping),
        }
    }
}

/// Replaces decimal `+`, `-`, `*` by [`DecimalOp`] (see the module docs).
#[derive(Debug)]
pub struct DecimalArithmetic {
    add: Arc<ScalarUDF>,
    sub: Arc<ScalarUDF>,
    mul: Arc<ScalarUDF>,
}

impl Default for DecimalArithmetic {
    fn default() -> Self {
        DecimalArithmetic {
            add: Arc::new(DecimalOp::udf(Operator::Plus)),
            sub: Arc::new(DecimalOp::udf(Operator::Minus)),
            mul: Arc::new(DecimalOp::udf(Operator::Multiply)),
        }
    }
}

impl DecimalArithmetic {
    fn rewrite(&self, e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
        e.transform_up(|e| {
            let Expr::BinaryExpr(BinaryExpr { left, op, right }) = &e else {
                return Ok(Transformed::no(e));
            };
            let f = match op {
                Operator::Plus => &self.add,
                Operator::Minus => &self.sub,
                Operator::Multiply => &self.mul,
                _ => return Ok(Transformed::no(e)),
            };
            let types = (left.get_type(schema), right.get_type(schema), e.get_type(schema));
            let (Ok(l), Ok(r), Ok(planned)) = types else { return Ok(Transformed::no(e)) };
            let ours = match (decimal(&l), decimal(&r)) {
                (Some(a), Some(b)) => result_type(*op, a, b),
                _ => None,
            };
            if ours.map(|(p, s)| DataType::Decimal128(p, s)) != Some(planned) {
                return Ok(Transformed::no(e));
            }
            let Expr::BinaryExpr(BinaryExpr { left, right, .. }) = e else {
                return Ok(Transformed::no(e));
            };
            Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction {
                func: f.clone(),
                args: vec![*left, *right],
            })))
        })
    }
}

impl AnalyzerRule for DecimalArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|p| {
            let schema = match p.inputs().as_slice() {
                [] => p.schema().as_ref().clone(),
                inputs => datafusion::logical_expr::utils::merge_schema(inputs),
            };
            p.map_expressions(|e| self.rewrite(e, &schema))
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_decimal_arithmetic"
    }
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::Decimal128Array;

    use super::*;

    fn dec(v: Vec<Option<i128>>, p: u8, s: i8) -> ColumnarValue {
        ColumnarValue::Array(Arc::new(
            Decimal128Array::from(v).with_precision_and_scale(p, s).unwrap(),
        ))
    }

    /// The loops give Arrow's kernel's values and types, on arrays and constants, with
    /// NULLs, rescaling and values at the edge of 128 bits (which fall back to the
    /// kernel and its overflow error).
    #[test]
    fn loops_agree_with_arrow_kernels() {
        let big = i128::MAX / 3;
        let cases = [
            (
                dec(vec![Some(105), None, Some(-7), Some(0)], 15, 2),
                dec(vec![Some(6), Some(1), None, Some(9)], 15, 2),
            ),
            (
                dec(vec![Some(105), Some(3)], 15, 2),
                ColumnarValue::Scalar(ScalarValue::Decimal128(Some(1), 20, 0)),
            ),
            (
                ColumnarValue::Scalar(ScalarValue::Decimal128(Some(1), 20, 0)),
                dec(vec![Some(4), Some(-9), None], 12, 2),
            ),
            (dec(vec![Some(big), Some(1)], 38, 0), dec(vec![Some(big), Some(2)], 38, 0)),
            (dec(vec![Some(big)], 38, 10), dec(vec![Some(5)], 38, 0)),
        ];
        for op in [Operator::Plus, Operator::Minus, Operator::Multiply] {
            let udf = DecimalOp { op, signature: Signature::any(2, Volatility::Immutable) };
            for (a, b) in &cases {
                let want = match op {
                    Operator::Plus => apply(a, b, add_wrapping),
                    Operator::Minus => apply(a, b, sub_wrapping),
                    _ => apply(a, b, mul_wrapping),
                };
                let ta = a.data_type();
                let tb = b.data_type();
                let Ok(out) = udf.return_type(&[ta.clone(), tb.clone()]) else {
                    assert!(want.is_err(), "{op} {ta} {tb}");
                    continue;
                };
                let DataType::Decimal128(p, s) = out else { panic!("{out}") };
                let fast = udf.fast(a, b, (p, s));
                match (want, fast) {
                    (Ok(ColumnarValue::Array(w)), Some(f)) => {
                        assert_eq!(w.data_type(), f.data_type(), "{op} {ta} {tb}");
                        assert_eq!(w.as_ref(), f.as_ref(), "{op} {ta} {tb}");
                    }
                    // Overflow: no fast answer; the kernel's error stands.
                    (Err(_), None) => {}
                    (w, f) => panic!("{op} {ta} {tb}: {w:?} vs {f:?}"),
                }
            }
        }
    }
}
