//! Evaluating a constant expression of a statement (a query vector, a `k`, a text query)
//! to one value, as table functions need their arguments.
//!
//! What this module must not do: depend on any other module of this crate.

use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::Schema;
use datafusion::catalog::Session as DfSession;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Expr};
use datafusion::physical_expr::PhysicalExpr;
use std::sync::Arc;

/// Evaluates an expression without columns (a literal, `make_array(…)`, a cast of one).
pub(crate) fn evaluate_constant(state: &dyn DfSession, e: &Expr) -> Result<ScalarValue> {
    let p = state.create_physical_expr(e.clone(), &DFSchema::empty())?;
    evaluate_physical_constant(&p)
}

pub(crate) fn evaluate_physical_constant(p: &Arc<dyn PhysicalExpr>) -> Result<ScalarValue> {
    let one = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    match p.evaluate(&one)? {
        ColumnarValue::Scalar(s) => Ok(s),
        ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, 0),
    }
}
