//! INSERT with a conflict clause: `OR IGNORE`, `OR REPLACE` / `REPLACE INTO`, `ON CONFLICT
//! [target] DO NOTHING` (storage resolves those per row, see `basalt_storage::OnConflict`)
//! and `ON CONFLICT (target) DO UPDATE SET … [WHERE …]`.
//!
//! `DO UPDATE` runs in one write statement: the INSERT's rows are computed, storage splits
//! them by the target key into new rows (inserted) and rows whose key a live row has; for
//! those, the SET expressions are evaluated by a query joining the table to the proposed
//! rows (registered for the statement as `__basalt_excluded`, which `excluded.col` names),
//! and the results are written as an update of those rows, checked like any update.
//!
//! Part of the dispatcher (see the module doc of `connection`).

use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, ConflictTarget, DoUpdate, Expr as SqlExpr, Ident, Insert,
    OnConflict as SqlOnConflict, TableObject, VisitMut, VisitorMut,
};

use datafusion::error::DataFusionError;

use super::dispatch::dml_count;
use super::*;

/// The name the proposed rows of an `ON CONFLICT DO UPDATE` have in its query.
const EXCLUDED: &str = "__basalt_excluded";
/// Their column holding the `_id` of the row each would update.
const TARGET: &str = "__basalt_target";

impl SqlConnection {
    /// The INSERT without its conflict clause (`OR IGNORE`, `OR REPLACE`, `REPLACE INTO`,
    /// `ON CONFLICT … DO NOTHING`) and how that clause resolves duplicate keys; `None` for
    /// an INSERT without one (or with `OR ABORT`, which is what every INSERT does).
    pub(super) fn conflict_clause(
        &self,
        ins: &datafusion::sql::sqlparser::ast::Insert,
    ) -> Result<Option<(Statement, Option<OnConflict>)>> {
        use datafusion::sql::sqlparser::ast::{
            ConflictTarget, OnConflictAction, OnInsert, SqliteOnConflict,
        };
        let mut plain = ins.clone();
        plain.or = None;
        plain.on = None;
        plain.ignore = false;
        plain.replace_into = false;
        let mode = match (&ins.or, &ins.on) {
            (None, None) if !ins.ignore && !ins.replace_into => return Ok(None),
            (Some(SqliteOnConflict::Abort), None) if !ins.ignore && !ins.replace_into => None,
            (Some(SqliteOnConflict::Replace), None) | (None, None) if !ins.ignore => {
                Some(OnConflict::Replace)
            }
            (Some(SqliteOnConflict::Ignore), None) | (None, None) => {
                Some(OnConflict::Ignore { columns: None })
            }
            (None, Some(OnInsert::OnConflict(oc))) if !ins.ignore && !ins.replace_into => {
                if matches!(oc.action, OnConflictAction::DoUpdate(_)) {
                    return Err(Error::unsupported(
                        "INSERT … ON CONFLICT … DO UPDATE (DO NOTHING, INSERT OR IGNORE and \
                         INSERT OR REPLACE are available)",
                    ));
                }
                let fold = self.fold_case();
                let columns = match &oc.conflict_target {
                    None => None,
                    Some(ConflictTarget::Columns(cols)) => {
                        Some(cols.iter().map(|c| rewrite::ident_name(c, fold)).collect())
                    }
                    Some(ConflictTarget::OnConstraint(name)) => {
                        let name = rewrite::table_name_of(name, fold)
                            .ok_or_else(|| Error::sql(format!("bad constraint name {name}")))?;
                        Some(self.key_columns(&name)?)
                    }
                };
                Some(OnConflict::Ignore { columns })
            }
            _ => {
                return Err(Error::unsupported(format!(
                    "this conflict clause of INSERT ({})",
                    match (&ins.or, &ins.on) {
                        (Some(or), _) => or.to_string(),
                        (_, Some(on)) => on.to_string(),
                        _ => "IGNORE with REPLACE".to_string(),
                    }
                )));
            }
        };
        Ok(Some((Statement::Insert(plain), mode)))
    }

    /// The columns of the key or index `name`.
    fn key_columns(&self, name: &str) -> Result<Vec<String>> {
        let store = self.binding.session().lock().store().clone();
        let snap = store.snapshot();
        let t = snap.index_table(name).ok_or_else(|| {
            Error::Storage(basalt_storage::Error::IndexNotFound { index: name.to_string() })
        })?;
        let schema = t.schema();
        Ok(t.indexes()
            .iter()
            .filter(|d| d.name == name)
            .flat_map(|d| d.columns.iter())
            .filter_map(|&c| schema.position_of_id(c))
            .map(|p| schema.full_schema().field(p).name().clone())
            .collect())
    }

    /// `INSERT … ON CONFLICT (target) DO UPDATE SET … [WHERE …]` (see the module docs).
    pub(super) async fn insert_do_update(
        &self,
        ins: &Insert,
        oc: &SqlOnConflict,
        du: &DoUpdate,
    ) -> Result<Vec<RecordBatch>> {
        Box::pin(self.insert_do_update_with(ins, oc, du, &[])).await
    }

    /// [`SqlConnection::insert_do_update`] of a prepared statement: `params` are the values
    /// of its `$n` placeholders (in the rows, the SET list or the WHERE), bound in each
    /// plan the statement makes.
    pub(super) async fn insert_do_update_with(
        &self,
        ins: &Insert,
        oc: &SqlOnConflict,
        du: &DoUpdate,
        params: &[ScalarValue],
    ) -> Result<Vec<RecordBatch>> {
        let fold = self.fold_case();
        let TableObject::TableName(tname) = &ins.table else {
            return Err(Error::unsupported("ON CONFLICT on an INSERT into a table function"));
        };
        let table = rewrite::table_name_of(tname, fold)
            .ok_or_else(|| Error::sql(format!("INSERT: bad table name {tname}")))?;
        let columns: Vec<String> = match &oc.conflict_target {
            Some(ConflictTarget::Columns(cols)) => {
                cols.iter().map(|c| rewrite::ident_name(c, fold)).collect()
            }
            Some(ConflictTarget::OnConstraint(name)) => {
                let name = rewrite::table_name_of(name, fold)
                    .ok_or_else(|| Error::sql(format!("bad constraint name {name}")))?;
                self.key_columns(&name)?
            }
            None => {
                return Err(Error::sql(
                    "ON CONFLICT DO UPDATE needs a conflict target: ON CONFLICT (columns) or \
                     ON CONFLICT ON CONSTRAINT name",
                ));
            }
        };
        // The SET list and WHERE as a query over the table (under the INSERT's alias, if
        // any) joined to the proposed rows.
        let qualifier = match &ins.table_alias {
            Some(a) => a.alias.clone(),
            None => Ident::with_quote('"', table.clone()),
        };
        let mut sets = Vec::with_capacity(du.assignments.len());
        let mut names: Vec<String> = Vec::with_capacity(du.assignments.len());
        for a in &du.assignments {
            let AssignmentTarget::ColumnName(c) = &a.target else {
                return Err(Error::unsupported("ON CONFLICT DO UPDATE SET (a, b) = …"));
            };
            let Some(last) = c.0.last().and_then(|p| p.as_ident()) else {
                return Err(Error::sql(format!("DO UPDATE SET: bad column name {c}")));
            };
            let name = rewrite::ident_name(last, fold);
            if names.contains(&name) {
                return Err(Error::sql(format!("DO UPDATE SET names column '{name}' twice")));
            }
            let mut value = a.value.clone();
            let _ = value.visit(&mut Qualify { table: qualifier.clone(), fold, depth: 0 });
            sets.push(format!("{value} AS \"__basalt_v{}\"", names.len()));
            names.push(name);
        }
        let filter = match &du.selection {
            Some(w) => {
                let mut w = w.clone();
                let _ = w.visit(&mut Qualify { table: qualifier.clone(), fold, depth: 0 });
                format!(" WHERE {w}")
            }
            None => String::new(),
        };
        let select = format!(
            "SELECT {qualifier}._id, {} FROM {} AS {qualifier} JOIN {EXCLUDED} ON \
             {qualifier}._id = {EXCLUDED}.{TARGET}{filter}",
            sets.join(", "),
            Ident::with_quote('"', table.clone()),
        );
        let mut plain = ins.clone();
        plain.on = None;
        plain.table_alias = None;
        let plan = self.plan(DfStatement::Statement(Box::new(Statement::Insert(plain)))).await?;
        let plan = bind_params(plan, params)?;
        let LogicalPlan::Dml(dml) = plan else {
            return Err(Error::sql("ON CONFLICT DO UPDATE: the INSERT did not plan as an insert"));
        };
        let stmt = StatementGuard::begin(&self.binding)?;
        let r = Box::pin(self.run_do_update(&table, &dml, &columns, &names, &select, params)).await;
        let end = stmt.finish(r.is_ok());
        let changed = r?;
        end?;
        dml_count(changed)
    }

    /// The steps of [`SqlConnection::insert_do_update`] inside its write statement;
    /// returns the rows inserted plus the rows updated.
    async fn run_do_update(
        &self,
        table: &str,
        dml: &datafusion::logical_expr::DmlStatement,
        key: &[String],
        names: &[String],
        select: &str,
        params: &[ScalarValue],
    ) -> Result<u64> {
        let snapshot = self.binding.session().lock().table(table)?;
        let user = snapshot.schema().user_schema();
        let input = self.physical(dml.input.as_ref().clone()).await?;
        let rows =
            collect(datafusion::physical_plan::execute_stream(input, self.ctx()?.task_ctx())?)
                .await?;
        let rows = rows
            .iter()
            .filter(|b| b.num_rows() > 0)
            .map(|b| {
                crate::binding::check_no_ids(table, b)?;
                Ok(crate::exec::dml::without_id(b, &user)?)
            })
            .collect::<Result<Vec<_>>>()?;
        let (fresh, ids, hits) = self
            .binding
            .apply(|t, s| t.split_conflicts(s, table, &rows, key))
            .map_err(Error::from)?;
        let mut changed = self.binding.apply(|t, s| t.insert(s, table, &fresh))?.count;
        if ids.is_empty() {
            return Ok(changed);
        }
        // The proposed rows that hit, with the `_id` each would update.
        let arrow = |e: datafusion::arrow::error::ArrowError| {
            Error::from(DataFusionError::ArrowError(Box::new(e), None))
        };
        let hits = datafusion::arrow::compute::concat_batches(&user, &hits).map_err(arrow)?;
        let mut fields: Vec<Field> = user.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.push(Field::new(TARGET, DataType::UInt64, false));
        let mut cols = hits.columns().to_vec();
        cols.push(Arc::new(UInt64Array::from(ids)));
        let excluded = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).map_err(arrow)?;
        let mem =
            datafusion::datasource::MemTable::try_new(excluded.schema(), vec![vec![excluded]])?;
        self.schema.register_table(EXCLUDED.to_string(), Arc::new(mem))?;
        let updates = Box::pin(self.run_query_text_with(select, params)).await;
        let _ = self.schema.deregister_table(EXCLUDED);
        changed += self.apply_updates(table, names, updates?)?;
        Ok(changed)
    }
}

/// `plan` with its `$n` placeholders bound to `params` (cast to the types the plan infers
/// where that is exact); the plan itself without any.
pub(super) fn bind_params(plan: LogicalPlan, params: &[ScalarValue]) -> Result<LogicalPlan> {
    if params.is_empty() {
        return Ok(plan);
    }
    let params = super::prepared::coerce_params(&plan, params.to_vec());
    Ok(plan.with_param_values(datafusion::common::ParamValues::List(
        params.into_iter().map(Into::into).collect(),
    ))?)
}

/// Qualifies the bare column names of a `DO UPDATE` expression with the target table (they
/// name its columns, as in PostgreSQL and SQLite), and points `excluded.col` at the
/// proposed rows. Names inside a subquery are left to it.
struct Qualify {
    table: Ident,
    fold: bool,
    /// Subqueries entered.
    depth: usize,
}

impl VisitorMut for Qualify {
    type Break = ();

    fn pre_visit_query(
        &mut self,
        _q: &mut datafusion::sql::sqlparser::ast::Query,
    ) -> std::ops::ControlFlow<()> {
        self.depth += 1;
        std::ops::ControlFlow::Continue(())
    }

    fn post_visit_query(
        &mut self,
        _q: &mut datafusion::sql::sqlparser::ast::Query,
    ) -> std::ops::ControlFlow<()> {
        self.depth -= 1;
        std::ops::ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut SqlExpr) -> std::ops::ControlFlow<()> {
        if self.depth > 0 {
            return std::ops::ControlFlow::Continue(());
        }
        match expr {
            SqlExpr::Identifier(i) => {
                *expr = SqlExpr::CompoundIdentifier(vec![self.table.clone(), i.clone()]);
            }
            SqlExpr::CompoundIdentifier(parts)
                if parts.len() == 2 && rewrite::ident_name(&parts[0], self.fold) == "excluded" =>
            {
                parts[0] = Ident::new(EXCLUDED);
            }
            _ => {}
        }
        std::ops::ControlFlow::Continue(())
    }
}
