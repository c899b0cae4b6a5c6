//! SQL types Basalt adds to DataFusion's: `VECTOR(D)`, a vector of `D` float32 values
//! (stored as Arrow `FixedSizeList<Float32>(D)`; `FLOAT[D]` is the same type), and
//! `VECTOR(D, FLOAT16)` / `VECTOR(D, INT8)`: the same type, stored as half floats or int8
//! codes (values rounded on insert; see `basalt_vector::stored`).

use std::sync::Arc;

use basalt_storage::StoredForm;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::logical_expr::planner::TypePlanner;
use datafusion::sql::sqlparser::ast::DataType as SqlType;

/// Plans `VECTOR(D)` and `VECTOR(D, form)` (`form`: `FLOAT32`, `FLOAT16` or `INT8`, the
/// column's stored form, carried as the field's `basalt.vector.storage` metadata).
#[derive(Debug)]
pub struct VectorTypes;

/// The dimension and stored form of a `VECTOR(…)` type; `None` for other types.
fn vector_args(sql_type: &SqlType) -> Result<Option<(usize, StoredForm)>> {
    let SqlType::Custom(name, args) = sql_type else { return Ok(None) };
    if !name.to_string().eq_ignore_ascii_case("vector") {
        return Ok(None);
    }
    let dim = |d: &String| d.trim().parse::<usize>().ok().filter(|d| (1..=65_536).contains(d));
    let bad = || {
        DataFusionError::Plan(format!(
            "VECTOR needs one dimension between 1 and 65536 and optionally a stored form \
             (FLOAT32, FLOAT16 or INT8), as in VECTOR(384) or VECTOR(384, INT8); got {sql_type}"
        ))
    };
    match args.as_slice() {
        [d] => Ok(Some((dim(d).ok_or_else(bad)?, StoredForm::Float32))),
        [d, form] => {
            let form =
                StoredForm::parse(form.trim_matches(|c| c == '\'' || c == '"')).ok_or_else(bad)?;
            Ok(Some((dim(d).ok_or_else(bad)?, form)))
        }
        _ => Err(bad()),
    }
}

impl TypePlanner for VectorTypes {
    #[allow(deprecated)] // DataFusion's default `plan_type_field` calls this.
    fn plan_type(&self, sql_type: &SqlType) -> Result<Option<DataType>> {
        Ok(vector_args(sql_type)?.map(|(dim, _)| basalt_storage::vector_type(dim)))
    }

    fn plan_type_field(&self, sql_type: &SqlType) -> Result<Option<FieldRef>> {
        Ok(vector_args(sql_type)?
            .map(|(dim, form)| Arc::new(basalt_storage::vector_field("", dim, form, true))))
    }
}

/// A planner context that knows types and nothing else (no tables, no functions): all that
/// `SqlToRel::build_schema` needs for the column list of a plain `CREATE TABLE`. Planning
/// such a statement through the session would copy the whole session state and resolve the
/// new table's name against the catalog and the file system first.
pub(crate) struct TypesOnly {
    options: std::sync::Arc<datafusion::config::ConfigOptions>,
}

impl TypesOnly {
    /// A context with the session's current options.
    pub(crate) fn new(options: std::sync::Arc<datafusion::config::ConfigOptions>) -> Self {
        Self { options }
    }
}

impl datafusion::logical_expr::planner::ContextProvider for TypesOnly {
    fn get_table_source(
        &self,
        name: datafusion::common::TableReference,
    ) -> Result<std::sync::Arc<dyn datafusion::logical_expr::TableSource>> {
        Err(DataFusionError::Plan(format!("no table '{name}' in a column list")))
    }

    fn get_type_planner(&self) -> Option<std::sync::Arc<dyn TypePlanner>> {
        Some(std::sync::Arc::new(VectorTypes))
    }

    fn get_function_meta(
        &self,
        _name: &str,
    ) -> Option<std::sync::Arc<datafusion::logical_expr::ScalarUDF>> {
        None
    }

    fn get_higher_order_meta(
        &self,
        _name: &str,
    ) -> Option<std::sync::Arc<datafusion::logical_expr::HigherOrderUDF>> {
        None
    }

    fn get_aggregate_meta(
        &self,
        _name: &str,
    ) -> Option<std::sync::Arc<datafusion::logical_expr::AggregateUDF>> {
        None
    }

    fn get_window_meta(
        &self,
        _name: &str,
    ) -> Option<std::sync::Arc<datafusion::logical_expr::WindowUDF>> {
        None
    }

    fn get_variable_type(&self, _names: &[String]) -> Option<DataType> {
        None
    }

    fn options(&self) -> &datafusion::config::ConfigOptions {
        &self.options
    }

    fn udf_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn higher_order_function_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udaf_names(&self) -> Vec<String> {
        Vec::new()
    }

    fn udwf_names(&self) -> Vec<String> {
        Vec::new()
    }
}
