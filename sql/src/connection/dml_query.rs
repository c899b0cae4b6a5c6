//! DELETE and UPDATE whose condition or new values hold a subquery, run through a query.
//!
//! DataFusion plans DML by handing the table provider the predicates of the filters on
//! the table; a subquery in the condition becomes a join, whose condition would be lost
//! (the optimizer rule `rules::dml_filters` refuses such a plan rather than write every
//! row). Such a statement runs here instead, inside one write statement: the query
//! `SELECT t._id [, new values] FROM t WHERE condition` finds the rows (and computes their
//! values), then they are deleted, or updated with the values cast to the columns' types
//! (checked like any update). Used when:
//!
//! 1. the statement is a `DELETE FROM t [alias] [WHERE …]` or `UPDATE t [alias] SET … [WHERE
//!    …]` of one table, without `USING`, `FROM`, `RETURNING`, `ORDER BY` or `LIMIT`, and
//! 2. its condition or a new value holds a subquery (`IN (SELECT …)`, `EXISTS`, a scalar
//!    subquery).
//!
//! Part of the dispatcher (see the module doc of `connection`).

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, Expr as SqlExpr, FromTable, Ident, TableFactor, TableWithJoins,
};

use super::dispatch::dml_count;
use super::*;

/// Whether `e` holds a subquery.
fn has_subquery(e: &SqlExpr) -> bool {
    crate::unique_names::contains_subquery(e)
}

/// The one plain table of a DML statement (no joins), with the name its columns go by.
fn one_table(t: &TableWithJoins) -> Option<(&datafusion::sql::sqlparser::ast::ObjectName, Ident)> {
    if !t.joins.is_empty() {
        return None;
    }
    let TableFactor::Table { name, alias, args: None, with_hints, .. } = &t.relation else {
        return None;
    };
    if !with_hints.is_empty() {
        return None;
    }
    let q = match alias {
        Some(a) if a.columns.is_empty() => a.name.clone(),
        Some(_) => return None,
        None => name.0.last()?.as_ident()?.clone(),
    };
    Some((name, q))
}

impl SqlConnection {
    /// Runs a DELETE or UPDATE through a query when it needs to (see the module docs);
    /// `None` for any other statement.
    pub(super) async fn dml_via_query(&self, s: &Statement) -> Option<Result<Vec<RecordBatch>>> {
        match s {
            Statement::Delete(d) => {
                if !d.tables.is_empty()
                    || d.using.is_some()
                    || d.returning.is_some()
                    || d.output.is_some()
                    || !d.order_by.is_empty()
                    || d.limit.is_some()
                    || !d.selection.as_ref().is_some_and(has_subquery)
                {
                    return None;
                }
                let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &d.from;
                let [t] = from.as_slice() else { return None };
                let (name, q) = one_table(t)?;
                let cond = d.selection.as_ref()?;
                let select = format!("SELECT {q}._id FROM {t} WHERE {cond}");
                Some(Box::pin(self.delete_by_query(name, select)).await)
            }
            Statement::Update(u) => {
                if u.from.is_some()
                    || u.returning.is_some()
                    || u.output.is_some()
                    || u.or.is_some()
                    || !u.order_by.is_empty()
                    || u.limit.is_some()
                    || !(u.selection.as_ref().is_some_and(has_subquery)
                        || u.assignments.iter().any(|a| has_subquery(&a.value)))
                {
                    return None;
                }
                let (name, q) = one_table(&u.table)?;
                let t = &u.table;
                let fold = self.fold_case();
                let mut names = Vec::with_capacity(u.assignments.len());
                let mut values = Vec::with_capacity(u.assignments.len());
                for (i, a) in u.assignments.iter().enumerate() {
                    let AssignmentTarget::ColumnName(c) = &a.target else { return None };
                    let column = c.0.last()?.as_ident()?;
                    names.push(rewrite::ident_name(column, fold));
                    values.push(format!("{} AS \"__basalt_v{i}\"", a.value));
                }
                let filter = match &u.selection {
                    Some(w) => format!(" WHERE {w}"),
                    None => String::new(),
                };
                let select = format!("SELECT {q}._id, {} FROM {t}{filter}", values.join(", "));
                Some(Box::pin(self.update_by_query(name, names, select)).await)
            }
            _ => None,
        }
    }

    fn dml_table(&self, name: &datafusion::sql::sqlparser::ast::ObjectName) -> Result<String> {
        rewrite::table_name_of(name, self.fold_case())
            .ok_or_else(|| Error::sql(format!("bad table name {name}")))
    }

    async fn delete_by_query(
        &self,
        name: &datafusion::sql::sqlparser::ast::ObjectName,
        select: String,
    ) -> Result<Vec<RecordBatch>> {
        let table = self.dml_table(name)?;
        let stmt = StatementGuard::begin(&self.binding)?;
        let r = async {
            let mut changed = 0;
            for b in Box::pin(self.run_query_text(&select)).await? {
                let ids = ids_in(&b)?;
                changed += self.binding.apply(|t, s| t.delete(s, &table, ids.values()))?;
            }
            Ok::<u64, Error>(changed)
        }
        .await;
        let end = stmt.finish(r.is_ok());
        let changed = r?;
        end?;
        dml_count(changed)
    }

    async fn update_by_query(
        &self,
        name: &datafusion::sql::sqlparser::ast::ObjectName,
        names: Vec<String>,
        select: String,
    ) -> Result<Vec<RecordBatch>> {
        let table = self.dml_table(name)?;
        let stmt = StatementGuard::begin(&self.binding)?;
        let r = async {
            let rows = Box::pin(self.run_query_text(&select)).await?;
            self.apply_updates(&table, &names, rows)
        }
        .await;
        let end = stmt.finish(r.is_ok());
        let changed = r?;
        end?;
        dml_count(changed)
    }

    /// Plans and runs a query given as text (inside the caller's write statement).
    pub(super) async fn run_query_text(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        Box::pin(self.run_query_text_with(sql, &[])).await
    }

    /// [`SqlConnection::run_query_text`] with values for the `$n` placeholders of the text.
    pub(super) async fn run_query_text_with(
        &self,
        sql: &str,
        params: &[ScalarValue],
    ) -> Result<Vec<RecordBatch>> {
        let stmt = parse_one(&self.with_options(|o| o.clone()), sql)?;
        let plan = super::upsert::bind_params(self.plan(stmt).await?, params)?;
        let physical = Box::pin(self.physical_or_fallback(plan)).await?;
        collect(datafusion::physical_plan::execute_stream(physical, self.ctx()?.task_ctx())?).await
    }

    /// Updates rows from query results: column 0 the `_id`s, column i + 1 the new value
    /// of `names[i]`, cast to the column's type (a value that does not fit is an error,
    /// never a wrapped or NULL one). Returns how many rows changed.
    pub(super) fn apply_updates(
        &self,
        table: &str,
        names: &[String],
        batches: Vec<RecordBatch>,
    ) -> Result<u64> {
        let snapshot = self.binding.session().lock().table(table)?;
        let schema = snapshot.schema();
        let arrow = |e: datafusion::arrow::error::ArrowError| {
            Error::from(DataFusionError::ArrowError(Box::new(e), None))
        };
        let mut changed = 0;
        for b in batches {
            if b.num_rows() == 0 {
                continue;
            }
            let ids = ids_in(&b)?;
            let mut fields = Vec::with_capacity(names.len());
            let mut values = Vec::with_capacity(names.len());
            for (i, name) in names.iter().enumerate() {
                let p = schema.index_of(name).filter(|&p| p > 0).ok_or_else(|| {
                    basalt_storage::Error::ColumnNotFound {
                        table: table.to_string(),
                        column: name.clone(),
                    }
                })?;
                let field = schema.full_schema().field(p).clone();
                let options =
                    datafusion::arrow::compute::CastOptions { safe: false, ..Default::default() };
                let v = datafusion::arrow::compute::cast_with_options(
                    b.column(i + 1),
                    field.data_type(),
                    &options,
                )
                .map_err(|e| Error::sql(format!("table '{table}', column '{name}': {e}")))?;
                fields.push(field);
                values.push(v);
            }
            let values =
                RecordBatch::try_new(Arc::new(Schema::new(fields)), values).map_err(arrow)?;
            changed += self.binding.apply(|t, s| t.update(s, table, ids.values(), &values))?;
        }
        Ok(changed)
    }
}

/// Column 0 of a query's results: `_id`s.
fn ids_in(b: &RecordBatch) -> Result<UInt64Array> {
    b.column(0)
        .as_any()
        .downcast_ref::<UInt64Array>()
        .cloned()
        .ok_or_else(|| Error::sql("the query for a DELETE / UPDATE gave no _id column"))
}
