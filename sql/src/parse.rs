//! Parsing SQL text with a session's dialect and limits, and the schema storage keeps for
//! a statement's output.
//!
//! What this module must not do: depend on any other module of this crate but `depth` and
//! `error` (the catalog, file tables and the dispatcher all parse through it).

use crate::error::{Error, Result};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::parser::Statement as DfStatement;

/// Tables and views whose names start with this are Basalt's own (the staging tables of
/// `CREATE TABLE … AS` among them): hidden from the catalog, refused for users' tables.
pub use basalt_storage::store::RESERVED_PREFIX;

/// Parses exactly one statement with the session's dialect.
pub(crate) fn parse_one(
    options: &datafusion::config::ConfigOptions,
    sql: &str,
) -> Result<DfStatement> {
    let mut v = parse(options, sql)?;
    match (v.pop(), v.is_empty()) {
        (Some(s), true) => Ok(s),
        _ => Err(Error::sql("expected exactly one statement")),
    }
}

/// Parses SQL text into statements with the session's dialect and recursion limit
/// (`SET datafusion.sql_parser.dialect = 'duckdb'` changes it).
pub(crate) fn parse(
    options: &datafusion::config::ConfigOptions,
    sql: &str,
) -> Result<Vec<DfStatement>> {
    let name = options.sql_parser.dialect.to_string();
    let dialect = datafusion::sql::sqlparser::dialect::dialect_from_str(&name)
        .ok_or_else(|| Error::sql(format!("unknown SQL dialect '{name}'")))?;
    let mut parser = datafusion::sql::parser::DFParserBuilder::new(sql)
        .with_dialect(dialect.as_ref())
        .with_recursion_limit(options.sql_parser.recursion_limit.get())
        .build()?;
    let mut statements: Vec<DfStatement> = parser.parse_statements()?.into_iter().collect();
    for s in &mut statements {
        crate::depth::shape(s)?;
    }
    Ok(statements)
}

/// The schema with the types storage keeps (view / large string types as their plain form).
pub(crate) fn storable_schema(s: &Schema) -> Schema {
    let fields: Vec<Field> = s
        .fields()
        .iter()
        .map(|f| {
            let dt = match f.data_type() {
                DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
                DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
                d => d.clone(),
            };
            Field::new(f.name(), dt, f.is_nullable()).with_metadata(f.metadata().clone())
        })
        .collect();
    Schema::new(fields)
}
