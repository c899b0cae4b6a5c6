//! CHECK constraints in SQL: reading them from `CREATE TABLE` and `ALTER TABLE … ADD
//! CONSTRAINT` (DataFusion's planner refuses them, so they are taken out of the statement
//! before it plans), the text storage keeps for each, and the [`Evaluator`] storage calls
//! on every written row.
//!
//! The kept text names every column as a quoted identifier, so it means the same whatever
//! the identifier case rules of the connection that later writes. A condition is compiled
//! once against the table's schema when it is created (a subquery, an aggregate, an
//! unknown column or a result that is not boolean is refused then) and again, cached, by
//! the evaluator.
//!
//! What this module must not do: decide what a failed check does (storage refuses the
//! write), or evaluate anything but the kept conditions.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use basalt_storage::{CheckDef, CheckEvaluator, NewCheck};
use datafusion::arrow::array::{Array, BooleanArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    ColumnOption, CreateTable, Expr, Ident, TableConstraint, VisitMut, VisitorMut,
};
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::rewrite::ident_name;

/// Compiled conditions kept by an [`Evaluator`]; beyond this it starts over.
const CACHED: usize = 1024;

/// Takes the CHECK constraints out of `ct` (column options and table constraints) and
/// returns them as storage keeps them. Columns are resolved against `ct`'s own columns.
pub(crate) fn take_checks(ct: &mut CreateTable, fold: bool) -> Result<Vec<NewCheck>> {
    let columns: Vec<String> = ct.columns.iter().map(|c| ident_name(&c.name, fold)).collect();
    let mut out = Vec::new();
    for c in &mut ct.columns {
        let mut err = None;
        c.options.retain(|o| match &o.option {
            ColumnOption::Check(k) => {
                let name = k.name.as_ref().or(o.name.as_ref());
                match new_check(name, &k.expr, &columns, fold) {
                    Ok(n) => out.push(n),
                    Err(e) => err = Some(e),
                }
                false
            }
            _ => true,
        });
        if let Some(e) = err {
            return Err(e);
        }
    }
    let mut err = None;
    ct.constraints.retain(|t| match t {
        TableConstraint::Check(k) => {
            match new_check(k.name.as_ref(), &k.expr, &columns, fold) {
                Ok(n) => out.push(n),
                Err(e) => err = Some(e),
            }
            false
        }
        _ => true,
    });
    match err {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// A check on a table with these columns: its condition with every column reference
/// written as a quoted identifier, and the columns it reads. A name that is no column is
/// left as written (compiling the condition reports it).
pub(crate) fn new_check(
    name: Option<&Ident>,
    expr: &Expr,
    columns: &[String],
    fold: bool,
) -> Result<NewCheck> {
    struct Quote<'a> {
        columns: &'a [String],
        fold: bool,
        used: Vec<String>,
    }
    impl Quote<'_> {
        fn column(&mut self, i: &Ident) -> Option<Ident> {
            let n = ident_name(i, self.fold);
            let c = self
                .columns
                .iter()
                .find(|c| **c == n)
                .or_else(|| self.columns.iter().find(|c| c.eq_ignore_ascii_case(&n)))?;
            if !self.used.contains(c) {
                self.used.push(c.clone());
            }
            Some(Ident::with_quote('"', c.clone()))
        }
    }
    impl VisitorMut for Quote<'_> {
        type Break = ();
        fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
            match e {
                Expr::Identifier(i) => {
                    if let Some(q) = self.column(i) {
                        *i = q;
                    }
                }
                // `t.a`: the table is the one being checked.
                Expr::CompoundIdentifier(parts) if parts.len() >= 2 => {
                    if let Some(q) = parts.last().and_then(|i| self.column(i)) {
                        *e = Expr::Identifier(q);
                    }
                }
                _ => {}
            }
            ControlFlow::Continue(())
        }
    }
    let mut expr = expr.clone();
    let mut q = Quote { columns, fold, used: Vec::new() };
    let _ = expr.visit(&mut q);
    Ok(NewCheck { name: name.map(|n| ident_name(n, fold)), sql: expr.to_string(), columns: q.used })
}

/// Compiles each check against the table's user columns `schema` (refusing one that does
/// not compile or is not boolean).
pub(crate) fn validate(table: &str, schema: &Schema, checks: &[NewCheck]) -> Result<()> {
    if checks.is_empty() {
        return Ok(());
    }
    let full = full_schema(schema);
    let ctx = SessionContext::new();
    for c in checks {
        compile(&ctx, &full, &c.sql)
            .map_err(|e| Error::sql(format!("CHECK ({}) of table '{table}': {e}", c.sql)))?;
    }
    Ok(())
}

/// `_id` and then the user columns, as storage hands rows to the evaluator.
fn full_schema(user: &Schema) -> SchemaRef {
    let mut fields = vec![Arc::new(Field::new(basalt_storage::ID_COLUMN, DataType::UInt64, false))];
    fields.extend(user.fields().iter().cloned());
    Arc::new(Schema::new(fields))
}

fn compile(
    ctx: &SessionContext,
    schema: &SchemaRef,
    sql: &str,
) -> std::result::Result<Arc<dyn PhysicalExpr>, String> {
    let df = DFSchema::try_from(schema.as_ref().clone()).map_err(|e| e.to_string())?;
    let expr = ctx.parse_sql_expr(sql, &df).map_err(|e| e.to_string())?;
    let pe = ctx.create_physical_expr(expr, &df).map_err(|e| e.to_string())?;
    match pe.data_type(schema).map_err(|e| e.to_string())? {
        DataType::Boolean | DataType::Null => Ok(pe),
        t => Err(format!("a CHECK condition must be boolean, not {t}")),
    }
}

/// Evaluates CHECK constraints for storage (installed with
/// `Store::set_check_evaluator`): each condition compiled once per table schema and kept.
pub struct Evaluator {
    ctx: SessionContext,
    /// By the schema's address (the schema is kept alive with the entry) and the text.
    cache: Mutex<HashMap<(usize, String), Compiled>>,
}

/// A condition compiled for a schema (kept alive so its address is not reused).
type Compiled = (SchemaRef, Arc<dyn PhysicalExpr>);

impl std::fmt::Debug for Evaluator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Evaluator").field("cached", &self.cache.lock().len()).finish()
    }
}

impl Default for Evaluator {
    fn default() -> Self {
        Evaluator { ctx: SessionContext::new(), cache: Mutex::new(HashMap::new()) }
    }
}

impl Evaluator {
    fn compiled(
        &self,
        schema: &SchemaRef,
        sql: &str,
    ) -> std::result::Result<Arc<dyn PhysicalExpr>, String> {
        let key = (Arc::as_ptr(schema) as *const u8 as usize, sql.to_string());
        if let Some((s, pe)) = self.cache.lock().get(&key)
            && Arc::ptr_eq(s, schema)
        {
            return Ok(pe.clone());
        }
        let pe = compile(&self.ctx, schema, sql)?;
        let mut cache = self.cache.lock();
        if cache.len() >= CACHED {
            cache.clear();
        }
        cache.insert(key, (schema.clone(), pe.clone()));
        Ok(pe)
    }
}

impl CheckEvaluator for Evaluator {
    fn first_violated(
        &self,
        checks: &[CheckDef],
        rows: &RecordBatch,
    ) -> std::result::Result<Option<usize>, String> {
        let schema = rows.schema();
        for (i, c) in checks.iter().enumerate() {
            let pe = self.compiled(&schema, &c.sql)?;
            let v = pe
                .evaluate(rows)
                .and_then(|v| v.into_array(rows.num_rows()))
                .map_err(|e| e.to_string())?;
            if v.data_type() == &DataType::Null {
                continue;
            }
            let b = v
                .as_any()
                .downcast_ref::<BooleanArray>()
                .ok_or_else(|| format!("the condition gave {}, not booleans", v.data_type()))?;
            // FALSE fails; TRUE and NULL pass.
            let failed = match b.nulls() {
                None => b.false_count() > 0,
                Some(n) => b.values().iter().zip(n.iter()).any(|(v, valid)| valid && !v),
            };
            if failed {
                return Ok(Some(i));
            }
        }
        Ok(None)
    }
}
