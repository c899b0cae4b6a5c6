//! Scalar functions Basalt adds to DataFusion's set. Each fills a gap users of SQLite,
//! DuckDB or PostgreSQL run into; none shadows a DataFusion function except to bound the
//! size of what it builds ([`bounded`]).
//!
//! - `mod(a, b)`: the remainder of `a / b`, as the `%` operator computes it (integer
//!   arguments give an integer, otherwise a float; the sign follows `a`; an integer division
//!   by zero is an error, as with `%`).
//!
//! And [`bounded`] wraps DataFusion's functions whose output size a caller chooses —
//! `rpad`, `lpad`, `repeat`, `array_repeat`, `array_resize`, and `array_concat` (which a
//! recursive query can double each step) — with a check of that size before anything is
//! built: `rpad('x', 2147483647)` or `array_repeat(1, 1e9)` asked the allocator for
//! gigabytes and aborted the process when it refused. Past [`MAX_OUTPUT_BYTES`] for one
//! call's output the statement fails with "resources exhausted"; below it the function
//! is DataFusion's, unchanged.

use datafusion::arrow::compute::kernels::numeric::rem;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The functions to register on every session.
pub fn all() -> Vec<ScalarUDF> {
    let mut v = vec![ScalarUDF::from(Mod::new())];
    v.extend(bounded());
    v
}

/// Most bytes one call of a size-choosing function may build (over all rows of a batch).
pub const MAX_OUTPUT_BYTES: u64 = 1 << 30;

/// Which size-choosing function a [`Bounded`] wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Grows {
    /// `rpad` / `lpad`: the second argument is the length in characters.
    Pad,
    /// `repeat(text, n)`.
    Repeat,
    /// `array_repeat(value, n)`.
    ArrayRepeat,
    /// `array_resize(array, n [, value])`.
    ArrayResize,
    /// `array_concat(a, b, …)`: as long as its arguments together (a recursive query that
    /// concatenates an array with itself doubles it each step).
    ArrayConcat,
}

/// DataFusion's `rpad`, `lpad`, `repeat` and `array_repeat`, bounded (see the module docs).
pub fn bounded() -> Vec<ScalarUDF> {
    use datafusion::functions::{string, unicode};
    [
        (unicode::rpad(), Grows::Pad),
        (unicode::lpad(), Grows::Pad),
        (string::repeat(), Grows::Repeat),
        (datafusion::functions_nested::repeat::array_repeat_udf(), Grows::ArrayRepeat),
        (datafusion::functions_nested::resize::array_resize_udf(), Grows::ArrayResize),
        (datafusion::functions_nested::concat::array_concat_udf(), Grows::ArrayConcat),
    ]
    .into_iter()
    .map(|(inner, grows)| ScalarUDF::from(Bounded { inner, grows }))
    .collect()
}

/// Whether `f` is one of [`bounded`]'s functions (SQL's planner calls some unwrapped
/// forms directly: `[1] || [2]` is DataFusion's own `array_concat`).
pub(crate) fn is_bounded(f: &ScalarUDF) -> bool {
    f.inner().downcast_ref::<Bounded>().is_some()
}

/// A size-choosing function with its output bounded.
#[derive(Debug)]
struct Bounded {
    inner: std::sync::Arc<ScalarUDF>,
    grows: Grows,
}

impl PartialEq for Bounded {
    fn eq(&self, other: &Self) -> bool {
        self.grows == other.grows && self.inner.name() == other.inner.name()
    }
}

impl Eq for Bounded {}

impl std::hash::Hash for Bounded {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.grows.hash(state);
        self.inner.name().hash(state);
    }
}

/// The largest non-NULL integer of an argument (0 when there is none).
fn max_count(v: &ColumnarValue) -> u64 {
    use datafusion::arrow::array::AsArray;
    use datafusion::arrow::datatypes::Int64Type;
    use datafusion::common::ScalarValue;
    match v {
        ColumnarValue::Scalar(s) => match s.cast_to(&DataType::Int64) {
            Ok(ScalarValue::Int64(Some(n))) => n.max(0) as u64,
            _ => 0,
        },
        ColumnarValue::Array(a) => datafusion::arrow::compute::cast(a, &DataType::Int64)
            .ok()
            .and_then(|a| datafusion::arrow::compute::max(a.as_primitive::<Int64Type>()))
            .map_or(0, |n| n.max(0) as u64),
    }
}

/// Bytes of one element of a list type (16 for elements that are not fixed-width).
fn element_width(t: &DataType) -> u64 {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            f.data_type().primitive_width().unwrap_or(16) as u64
        }
        _ => 16,
    }
}

/// Bytes of the elements of a list argument over all `rows` (a scalar counts once per row).
fn list_bytes(v: &ColumnarValue, rows: u64) -> u64 {
    use datafusion::arrow::array::{Array, AsArray};
    let elements = |a: &dyn Array| -> u64 {
        let width = element_width(a.data_type());
        let n = if let Some(l) = a.as_list_opt::<i32>() {
            let o = l.value_offsets();
            (o[o.len() - 1] - o[0]).max(0) as u64
        } else if let Some(l) = a.as_list_opt::<i64>() {
            let o = l.value_offsets();
            (o[o.len() - 1] - o[0]).max(0) as u64
        } else if let Some(l) = a.as_fixed_size_list_opt() {
            (l.len() as u64).saturating_mul(l.value_length().max(0) as u64)
        } else {
            0
        };
        n.saturating_mul(width)
    };
    match v {
        ColumnarValue::Array(a) => elements(a.as_ref()),
        ColumnarValue::Scalar(s) => match s.to_array_of_size(1) {
            Ok(a) => elements(a.as_ref()).saturating_mul(rows),
            Err(_) => 0,
        },
    }
}

/// The longest value of a text argument in bytes, and whether any is not ASCII.
fn longest_text(v: &ColumnarValue) -> (u64, bool) {
    use datafusion::common::ScalarValue;
    let one = |s: &str| (s.len() as u64, !s.is_ascii());
    match v {
        ColumnarValue::Scalar(
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
        ) => one(s),
        ColumnarValue::Scalar(_) => (0, false),
        ColumnarValue::Array(a) => {
            let Ok(a) = datafusion::arrow::compute::cast(a, &DataType::Utf8) else {
                return (0, true);
            };
            let Some(a) = a.as_any().downcast_ref::<datafusion::arrow::array::StringArray>() else {
                return (0, true);
            };
            a.iter().flatten().map(one).fold((0, false), |(l, u), (x, y)| (l.max(x), u || y))
        }
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }
    fn signature(&self) -> &Signature {
        self.inner.signature()
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }
    fn return_field_from_args(
        &self,
        args: datafusion::logical_expr::ReturnFieldArgs<'_>,
    ) -> Result<datafusion::arrow::datatypes::FieldRef> {
        self.inner.return_field_from_args(args)
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }
    fn documentation(&self) -> Option<&datafusion::logical_expr::Documentation> {
        self.inner.documentation()
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows.max(1) as u64;
        let a = &args.args;
        let bytes = match (self.grows, a.as_slice()) {
            (Grows::Pad, [text, n, rest @ ..]) => {
                // A character of the result takes at most 4 bytes; 1 when all is ASCII.
                let wide = longest_text(text).1 || rest.first().is_some_and(|f| longest_text(f).1);
                max_count(n).saturating_mul(if wide { 4 } else { 1 }).saturating_mul(rows)
            }
            (Grows::Repeat, [text, n]) => {
                longest_text(text).0.saturating_mul(max_count(n)).saturating_mul(rows)
            }
            (Grows::ArrayRepeat, [value, n]) => {
                let width = value.data_type().primitive_width().unwrap_or(16) as u64;
                max_count(n).saturating_mul(width).saturating_mul(rows)
            }
            (Grows::ArrayResize, [list, n, ..]) => {
                max_count(n).saturating_mul(element_width(&list.data_type())).saturating_mul(rows)
            }
            (Grows::ArrayConcat, lists) => {
                lists.iter().map(|l| list_bytes(l, rows)).fold(0u64, u64::saturating_add)
            }
            _ => 0,
        };
        if bytes > MAX_OUTPUT_BYTES {
            return Err(datafusion::common::DataFusionError::ResourcesExhausted(format!(
                "{} would build about {bytes} bytes (more than the {} a function may build \
                 in one call)",
                self.name(),
                MAX_OUTPUT_BYTES
            )));
        }
        self.inner.invoke_with_args(args)
    }
}

/// `mod(a, b)`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Mod {
    signature: Signature,
}

impl Mod {
    fn new() -> Self {
        Mod { signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl Default for Mod {
    fn default() -> Self {
        Self::new()
    }
}

/// Integer arguments stay integers (Int64); any other numeric mix computes in Float64.
fn common_type(args: &[DataType]) -> Result<DataType> {
    let [a, b] = args else {
        return plan_err!("mod takes two arguments, got {}", args.len());
    };
    if !(a.is_numeric() || a.is_null()) || !(b.is_numeric() || b.is_null()) {
        return plan_err!("mod takes numbers, got {a} and {b}");
    }
    let int = |t: &DataType| t.is_integer() || t.is_null();
    Ok(if int(a) && int(b) { DataType::Int64 } else { DataType::Float64 })
}

impl ScalarUDFImpl for Mod {
    fn name(&self) -> &str {
        "mod"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let t = common_type(arg_types)?;
        Ok(vec![t.clone(), t])
    }
    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        common_type(arg_types)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = args.args.as_slice() else {
            return plan_err!("mod takes two arguments");
        };
        let scalar = matches!((a, b), (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)));
        let rows = args.number_rows;
        let out = rem(&a.to_array(rows)?, &b.to_array(rows)?)?;
        if scalar {
            Ok(ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}
