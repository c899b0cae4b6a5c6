//! SQL types Basalt adds to DataFusion's: `VECTOR(D)`, a vector of `D` float32 values
//! (stored as Arrow `FixedSizeList<Float32>(D)`; `FLOAT[D]` is the same type).

use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::planner::TypePlanner;
use datafusion::sql::sqlparser::ast::DataType as SqlType;

/// Plans `VECTOR(D)`.
#[derive(Debug)]
pub struct VectorTypes;

impl TypePlanner for VectorTypes {
    #[allow(deprecated)] // DataFusion's default `plan_type_field` calls this.
    fn plan_type(&self, sql_type: &SqlType) -> Result<Option<DataType>> {
        let SqlType::Custom(name, args) = sql_type else { return Ok(None) };
        if !name.to_string().eq_ignore_ascii_case("vector") {
            return Ok(None);
        }
        let dim = match args.as_slice() {
            [d] => d.trim().parse::<usize>().ok().filter(|d| (1..=65_536).contains(d)),
            _ => None,
        };
        let dim = dim.ok_or_else(|| {
            DataFusionError::Plan(format!(
                "VECTOR needs one dimension between 1 and 65536, as in VECTOR(384); got {sql_type}"
            ))
        })?;
        Ok(Some(basalt_storage::vector_type(dim)))
    }
}
