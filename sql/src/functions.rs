//! Scalar functions Basalt adds to DataFusion's set. Each fills a gap users of SQLite,
//! DuckDB or PostgreSQL run into; none shadows a DataFusion function.
//!
//! - `mod(a, b)`: the remainder of `a / b`, as the `%` operator computes it (integer
//!   arguments give an integer, otherwise a float; the sign follows `a`; an integer division
//!   by zero is an error, as with `%`).

use datafusion::arrow::compute::kernels::numeric::rem;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The functions to register on every session.
pub fn all() -> Vec<ScalarUDF> {
    vec![ScalarUDF::from(Mod::new())]
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
