//! DDL and the plans DataFusion would run in memory: `CREATE TABLE [AS]`, views, `DROP`,
//! `ALTER TABLE`, inserts into a table by name.
//!
//! Part of the dispatcher (see the module doc of `connection`).

use super::*;

/// A one-part (or `public.`-qualified) table name.
pub(super) fn plain_table(name: &TableReference) -> Result<String> {
    let ok = match name {
        TableReference::Bare { .. } => true,
        TableReference::Partial { schema, .. } => schema.as_ref() == "public",
        TableReference::Full { catalog, schema, .. } => {
            catalog.as_ref() == "datafusion" && schema.as_ref() == "public"
        }
    };
    if !ok {
        return Err(Error::unsupported(format!(
            "table {name}: Basalt has one schema; use a plain table name"
        )));
    }
    Ok(name.table().to_string())
}

/// The keys of `CREATE TABLE`'s `PRIMARY KEY` and `UNIQUE` clauses (column options and
/// table constraints, as DataFusion's planner collected them) over the table's columns.
fn table_keys(
    constraints: &datafusion::common::Constraints,
    schema: &Schema,
) -> Result<Vec<NewIndex>> {
    use datafusion::common::Constraint;
    let names = |cols: &[usize]| -> Result<Vec<String>> {
        cols.iter()
            .map(|&i| {
                schema.fields().get(i).map(|f| f.name().clone()).ok_or_else(|| {
                    Error::sql(format!("a key names column {i}, which is not there"))
                })
            })
            .collect()
    };
    let mut out: Vec<NewIndex> = Vec::new();
    for c in constraints.iter() {
        let (kind, cols) = match c {
            Constraint::PrimaryKey(cols) => (IndexKind::PrimaryKey, cols),
            Constraint::Unique(cols) => (IndexKind::Unique, cols),
        };
        let columns = names(cols)?;
        // `a INT PRIMARY KEY UNIQUE` says one thing twice: one key serves both.
        if let Some(same) = out.iter_mut().find(|k| k.columns == columns) {
            if kind == IndexKind::PrimaryKey {
                same.kind = kind;
            }
            continue;
        }
        out.push(NewIndex { name: None, kind, columns });
    }
    Ok(out)
}

/// Casts and renames a plan's columns to a table's user schema (by position).
pub(super) fn rename_to(
    input: Arc<dyn ExecutionPlan>,
    user: &Schema,
) -> Result<Arc<dyn ExecutionPlan>> {
    use datafusion::physical_expr::PhysicalExpr;
    use datafusion::physical_expr::expressions::{CastExpr, Column};
    let schema = input.schema();
    if schema.fields().len() != user.fields().len() {
        return Err(Error::sql(format!(
            "the query gives {} columns, the table has {}",
            schema.fields().len(),
            user.fields().len()
        )));
    }
    let exprs = schema
        .fields()
        .iter()
        .zip(user.fields())
        .enumerate()
        .map(|(i, (have, want))| {
            let c: Arc<dyn PhysicalExpr> = Arc::new(Column::new(have.name(), i));
            let e: Arc<dyn PhysicalExpr> = if have.data_type() == want.data_type() {
                c
            } else {
                Arc::new(CastExpr::new(c, want.data_type().clone(), None))
            };
            (e, want.name().clone())
        })
        .collect::<Vec<_>>();
    Ok(Arc::new(datafusion::physical_plan::projection::ProjectionExec::try_new(exprs, input)?))
}

impl SqlConnection {
    /// Plans a plain `CREATE TABLE` (a column list of types with `NULL` / `NOT NULL`, no
    /// query, no other clause) and a `DROP TABLE` / `DROP VIEW` of one name without the
    /// session: the logical plan DataFusion's planner builds for them, minus the copy of
    /// the session state and the resolution of the statement's names against the catalog
    /// and the file system (most of a DDL statement's time). `None` for anything else, or
    /// with the fast paths off: DataFusion plans it.
    pub(super) fn plan_ddl_directly(&self, s: &Statement) -> Result<Option<LogicalPlan>> {
        use datafusion::common::{DFSchema, DFSchemaRef, ToDFSchema};
        use datafusion::logical_expr::{CreateMemoryTable, DropTable, DropView, EmptyRelation};
        use datafusion::sql::planner::{SqlToRel, object_name_to_table_reference};
        use datafusion::sql::sqlparser::ast::helpers::stmt_create_table::CreateTableBuilder;
        use datafusion::sql::sqlparser::ast::{ColumnOption, ObjectType};
        if !self.fast_paths.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let options = || self.with_options(Arc::clone);
        match s {
            Statement::CreateTable(ct) => {
                let plain_columns = !ct.columns.is_empty()
                    && ct.columns.iter().all(|c| {
                        c.options.iter().all(|o| {
                            o.name.is_none()
                                && matches!(o.option, ColumnOption::Null | ColumnOption::NotNull)
                        })
                    });
                // Nothing but name, columns, IF NOT EXISTS and OR REPLACE.
                let bare = || {
                    CreateTableBuilder::new(ct.name.clone())
                        .columns(ct.columns.clone())
                        .if_not_exists(ct.if_not_exists)
                        .or_replace(ct.or_replace)
                        .build()
                };
                if !plain_columns || ct.query.is_some() || bare() != *ct {
                    return Ok(None);
                }
                let options = options();
                let lower_idents = options.sql_parser.enable_ident_normalization;
                let types = crate::types::TypesOnly::new(options);
                let schema = SqlToRel::new(&types).build_schema(ct.columns.clone())?;
                let input = LogicalPlan::EmptyRelation(EmptyRelation {
                    produce_one_row: false,
                    schema: schema.to_dfschema_ref()?,
                });
                Ok(Some(LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(CreateMemoryTable {
                    name: object_name_to_table_reference(ct.name.clone(), lower_idents)?,
                    constraints: Default::default(),
                    input: Arc::new(input),
                    if_not_exists: ct.if_not_exists,
                    or_replace: ct.or_replace,
                    column_defaults: Vec::new(),
                    temporary: false,
                }))))
            }
            Statement::Drop {
                object_type: object_type @ (ObjectType::Table | ObjectType::View),
                if_exists,
                names,
                cascade: false,
                restrict: false,
                purge: false,
                temporary: false,
                table: None,
            } if names.len() == 1 => {
                let lower_idents = options().sql_parser.enable_ident_normalization;
                let name = object_name_to_table_reference(names[0].clone(), lower_idents)?;
                let schema = DFSchemaRef::new(DFSchema::empty());
                let if_exists = *if_exists;
                Ok(Some(LogicalPlan::Ddl(match object_type {
                    ObjectType::Table => {
                        DdlStatement::DropTable(DropTable { name, if_exists, schema })
                    }
                    _ => DdlStatement::DropView(DropView { name, if_exists, schema }),
                })))
            }
            _ => Ok(None),
        }
    }

    pub(super) async fn run_plan_once(&self, plan: LogicalPlan, stream: bool) -> Result<Outcome> {
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                if c.or_replace && c.if_not_exists {
                    return Err(Error::sql("'IF NOT EXISTS' cannot coexist with 'REPLACE'"));
                }
                if c.temporary {
                    return Err(Error::unsupported("temporary tables"));
                }
                // The defaults as written (see `create_defaults`), one per planned default.
                let defaults = std::mem::take(&mut *self.create_defaults.lock());
                if c.column_defaults.len() != defaults.len() {
                    return Err(Error::unsupported(
                        "column DEFAULT values outside a CREATE TABLE statement",
                    ));
                }
                let name = plain_table(&c.name)?;
                let schema = storable_schema(c.input.schema().as_arrow());
                let keys = table_keys(&c.constraints, &schema)?;
                // Named now: a CREATE TABLE … AS fills a staging table renamed into place.
                let checks = basalt_storage::name_checks(
                    &name,
                    &std::mem::take(&mut *self.create_checks.lock()),
                );
                crate::checks::validate(&name, &schema, &checks)?;
                let session = self.binding.session();
                let exists = session.lock().table(&name).is_ok();
                if exists && c.if_not_exists {
                    return Ok(Outcome::Batches(Vec::new()));
                }
                let has_rows = !matches!(
                    c.input.as_ref(),
                    LogicalPlan::EmptyRelation(e) if !e.produce_one_row
                );
                if !has_rows {
                    session.lock().create_table_full(
                        &name,
                        &schema,
                        c.or_replace,
                        &keys,
                        &defaults,
                        &checks,
                    )?;
                    return Ok(Outcome::Batches(Vec::new()));
                }
                if exists && !c.or_replace {
                    return Err(basalt_storage::Error::TableExists { table: name }.into());
                }
                // CREATE TABLE … AS: fill a temporary table, then rename it into place in one
                // manifest install, so the new table appears complete or not at all (and the
                // query may read the table it replaces).
                let tmp =
                    session.lock().create_staging_table_full(&schema, &keys, &defaults, &checks)?;
                let r = match Box::pin(self.insert_plan(&tmp, c.input.as_ref().clone())).await {
                    Ok(_) => {
                        session.lock().rename_table(&tmp, &name, c.or_replace).map_err(Error::from)
                    }
                    // A duplicate key names the table and key the user will see.
                    Err(Error::Storage(basalt_storage::Error::UniqueViolation {
                        table,
                        constraint,
                        columns,
                        value,
                    })) if table == tmp => {
                        let constraint = match constraint.strip_prefix(tmp.as_str()) {
                            Some(rest) => format!("{name}{rest}"),
                            None => constraint,
                        };
                        Err(basalt_storage::Error::UniqueViolation {
                            table: name.clone(),
                            constraint,
                            columns,
                            value,
                        }
                        .into())
                    }
                    Err(Error::Storage(basalt_storage::Error::CheckViolation {
                        table,
                        constraint,
                        condition,
                    })) if table == tmp => Err(basalt_storage::Error::CheckViolation {
                        table: name.clone(),
                        constraint,
                        condition,
                    }
                    .into()),
                    Err(e) => Err(e),
                };
                if r.is_err() {
                    let _ = session.lock().drop_table(&tmp);
                }
                r.map(|()| Outcome::Batches(Vec::new()))
            }
            LogicalPlan::Ddl(DdlStatement::CreateExternalTable(_)) => {
                // DataFusion builds the listing table and registers it in our schema, which
                // keeps it for this connection (see `catalog`).
                Box::pin(self.ctx()?.execute_logical_plan(plan)).await?;
                Ok(Outcome::Batches(Vec::new()))
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(d))
                if self.schema.is_external(d.name.table()) =>
            {
                self.schema.deregister_table(d.name.table())?;
                Ok(Outcome::Batches(Vec::new()))
            }
            LogicalPlan::Ddl(DdlStatement::DropTable(d)) => {
                self.drop_object(&d.name, d.if_exists, |s, n| s.drop_table(n))
            }
            LogicalPlan::Ddl(DdlStatement::DropView(d))
                if self.schema.is_external(d.name.table()) =>
            {
                self.schema.deregister_table(d.name.table())?;
                Ok(Outcome::Batches(Vec::new()))
            }
            LogicalPlan::Ddl(DdlStatement::DropView(d)) => {
                self.drop_object(&d.name, d.if_exists, |s, n| s.drop_view(n))
            }
            LogicalPlan::Ddl(d) => {
                Err(Error::unsupported(format!("{} (not yet available in Basalt)", d.name())))
            }
            LogicalPlan::Dml(_) => Box::pin(self.write_statement(plan)).await.map(Outcome::Batches),
            // EXPLAIN ANALYZE runs its statement: DML under it is a write statement too.
            LogicalPlan::Analyze(ref a) if matches!(a.input.as_ref(), LogicalPlan::Dml(_)) => {
                Box::pin(self.write_statement(plan)).await.map(Outcome::Batches)
            }
            // SET / RESET change the session's settings: kept plans of another generation
            // are planned again (raised after the change, whether or not it succeeded).
            LogicalPlan::Statement(
                datafusion::logical_expr::Statement::SetVariable(_)
                | datafusion::logical_expr::Statement::ResetVariable(_),
            ) => {
                let r = Box::pin(self.query(plan, stream)).await;
                self.settings.fetch_add(1, Ordering::AcqRel);
                r
            }
            // Queries, EXPLAIN (which never runs DML), SHOW, ...
            _ => Box::pin(self.query(plan, stream)).await,
        }
    }

    /// `CREATE [OR REPLACE] VIEW [IF NOT EXISTS] v [(cols)] AS query`: checked by planning
    /// it, then stored as SQL text (planned again at each use).
    pub(super) async fn create_view(
        &self,
        cv: &datafusion::sql::sqlparser::ast::CreateView,
        stmt: DfStatement,
    ) -> Result<()> {
        if cv.materialized {
            return Err(Error::unsupported("materialized views"));
        }
        let name = rewrite::table_name_of(&cv.name, self.fold_case())
            .ok_or_else(|| Error::sql(format!("CREATE VIEW: bad view name {}", cv.name)))?;
        if cv.temporary {
            return self.create_temporary_view(cv, &name, stmt).await;
        }
        let session = self.binding.session();
        if cv.if_not_exists && session.lock().read_view()?.views().contains_key(&name) {
            return Ok(());
        }
        // Plan it now: a view that does not plan is refused at CREATE time.
        self.plan(stmt).await?;
        let query = cv.query.to_string();
        let sql = if cv.columns.is_empty() {
            query
        } else {
            let cols: Vec<String> = cv.columns.iter().map(|c| c.name.to_string()).collect();
            format!("SELECT * FROM ({query}) AS {}({})", cv.name, cols.join(", "))
        };
        Ok(session.lock().create_view(&name, &sql, cv.or_replace)?)
    }

    /// `CREATE [UNIQUE] INDEX [IF NOT EXISTS] [name] ON t (col [ASC|DESC], …)`: a unique
    /// one is checked against the rows first. Expression and partial indexes are refused.
    pub(super) fn create_index(
        &self,
        ci: &datafusion::sql::sqlparser::ast::CreateIndex,
    ) -> Result<()> {
        use datafusion::sql::sqlparser::ast::Expr;
        if ci.predicate.is_some() {
            return Err(Error::unsupported("partial indexes (CREATE INDEX … WHERE)"));
        }
        if !ci.include.is_empty() || ci.nulls_distinct == Some(false) {
            return Err(Error::unsupported("CREATE INDEX … INCLUDE / NULLS NOT DISTINCT"));
        }
        let fold = self.fold_case();
        let table = rewrite::table_name_of(&ci.table_name, fold)
            .ok_or_else(|| Error::sql(format!("CREATE INDEX: bad table name {}", ci.table_name)))?;
        let name = match &ci.name {
            Some(n) => Some(
                rewrite::table_name_of(n, fold)
                    .ok_or_else(|| Error::sql(format!("CREATE INDEX: bad index name {n}")))?,
            ),
            None => None,
        };
        let columns = ci
            .columns
            .iter()
            .map(|c| match &c.column.expr {
                Expr::Identifier(i) => Ok(rewrite::ident_name(i, fold)),
                e => Err(Error::unsupported(format!(
                    "index on the expression {e} (index columns must be plain column names)"
                ))),
            })
            .collect::<Result<Vec<_>>>()?;
        let kind = if ci.unique { IndexKind::Unique } else { IndexKind::Index };
        let spec = NewIndex { name, kind, columns };
        Ok(self.binding.session().lock().create_index(&table, &spec, ci.if_not_exists)?)
    }

    /// `DROP INDEX [IF EXISTS] name, …` (a primary key or unique key by its name too).
    pub(super) fn drop_indexes(&self, names: &[ObjectName], if_exists: bool) -> Result<()> {
        for n in names {
            let name = rewrite::table_name_of(n, self.fold_case())
                .ok_or_else(|| Error::sql(format!("DROP INDEX: bad index name {n}")))?;
            let r = self.binding.session().lock().drop_index(&name);
            match r {
                Err(basalt_storage::Error::IndexNotFound { .. }) if if_exists => {}
                r => r?,
            }
        }
        Ok(())
    }

    /// `CREATE TEMP VIEW`: a view of this connection only (gone when it closes), planned
    /// once, at creation (a stored table or view of the same name hides it).
    async fn create_temporary_view(
        &self,
        cv: &datafusion::sql::sqlparser::ast::CreateView,
        name: &str,
        stmt: DfStatement,
    ) -> Result<()> {
        let exists = self.schema.is_external(name);
        if exists && cv.if_not_exists {
            return Ok(());
        }
        if exists && !cv.or_replace {
            return Err(basalt_storage::Error::ViewExists { view: name.to_string() }.into());
        }
        let plan = match self.plan(stmt).await? {
            LogicalPlan::Ddl(DdlStatement::CreateView(c)) => c.input.as_ref().clone(),
            _ => return Err(Error::sql("CREATE TEMP VIEW did not plan as a view")),
        };
        let view = datafusion::catalog::view::ViewTable::new(plan, Some(cv.query.to_string()));
        if exists {
            self.schema.deregister_table(name)?;
        }
        self.schema.register_table(name.to_string(), Arc::new(view))?;
        Ok(())
    }

    /// Makes `batches` a table of this connection only: `name` in SQL (read-only, see
    /// `registered.rs`) until
    /// [`SqlConnection::unregister`] or the connection closes, replacing an earlier
    /// registration of the name. A stored table or view of the same name hides it. The
    /// batches are read in two partitions, so scans use both cores.
    pub fn register_batches(
        &self,
        name: &str,
        schema: SchemaRef,
        batches: Vec<RecordBatch>,
    ) -> Result<()> {
        let mut parts = vec![Vec::new(), Vec::new()];
        for (i, b) in batches.into_iter().enumerate() {
            parts[i % 2].push(b);
        }
        let table = datafusion::datasource::MemTable::try_new(schema, parts)?;
        self.schema.deregister_table(name)?;
        self.schema
            .register_table(name.to_string(), Arc::new(crate::registered::Registered(table)))?;
        Ok(())
    }

    /// Removes a connection-local table or temporary view; false when there was none.
    pub fn unregister(&self, name: &str) -> Result<bool> {
        Ok(self.schema.deregister_table(name)?.is_some())
    }

    /// `DROP TABLE` / `DROP VIEW`: `IF EXISTS` turns "not found" into nothing done.
    pub(super) fn drop_object(
        &self,
        name: &TableReference,
        if_exists: bool,
        drop: impl FnOnce(&mut basalt_storage::Session, &str) -> basalt_storage::Result<()>,
    ) -> Result<Outcome> {
        let name = plain_table(name)?;
        let r = drop(&mut self.binding.session().lock(), &name);
        match r {
            Ok(()) => Ok(Outcome::Batches(Vec::new())),
            Err(
                basalt_storage::Error::TableNotFound { .. }
                | basalt_storage::Error::ViewNotFound { .. },
            ) if if_exists => Ok(Outcome::Batches(Vec::new())),
            Err(e) => Err(e.into()),
        }
    }

    /// Refuses full-text index DDL inside a transaction (it commits on its own).
    pub(super) fn no_fts_ddl_in_transaction(&self) -> Result<()> {
        if self.binding.session().lock().in_transaction() {
            return Err(Error::unsupported(
                "full-text index DDL inside a transaction (COMMIT or ROLLBACK first)",
            ));
        }
        Ok(())
    }

    /// Inserts the rows of `input` into native table `name` as one write statement.
    pub(super) async fn insert_plan(&self, name: &str, input: LogicalPlan) -> Result<u64> {
        let stmt = StatementGuard::begin(&self.binding)?;
        let r = async {
            let physical = self.physical(input).await?;
            let t = self.binding.view()?.table(name)?;
            let user = t.schema().user_schema();
            let physical = rename_to(physical, &user)?;
            let exec: Arc<dyn ExecutionPlan> = Arc::new(DmlExec::new(
                name,
                DmlKind::Insert { user_schema: user, on_conflict: None },
                physical,
                self.binding.clone(),
            ));
            let s = datafusion::physical_plan::execute_stream(exec, self.ctx()?.task_ctx())?;
            let b = collect(s).await?;
            Ok::<u64, Error>(count_of(&b))
        }
        .await;
        let end = stmt.finish(r.is_ok());
        let n = r?;
        end?;
        Ok(n)
    }

    pub(super) async fn alter_table(
        &self,
        name: &ObjectName,
        ops: &[AlterTableOperation],
        if_exists: bool,
    ) -> Result<()> {
        let table = rewrite::table_name_of(name, self.fold_case())
            .ok_or_else(|| Error::sql(format!("ALTER TABLE: bad table name {name}")))?;
        let session = self.binding.session();
        if session.lock().table(&table).is_err() {
            if if_exists {
                return Ok(());
            }
            return Err(basalt_storage::Error::TableNotFound { table }.into());
        }
        let mut changes = Vec::new();
        for op in ops {
            // A change that follows the one below (a new column's default).
            let mut then = None;
            changes.push(match op {
                AlterTableOperation::AddColumn { column_def, if_not_exists, .. } => {
                    use datafusion::sql::sqlparser::ast::{ColumnOption, Expr as SqlExpr, Value};
                    // A DEFAULT is kept as text (and the column planned without it).
                    let mut def = column_def.clone();
                    let mut default = None;
                    def.options.retain(|o| match &o.option {
                        ColumnOption::Default(e) => {
                            default = Some(e.clone());
                            false
                        }
                        _ => true,
                    });
                    let field = self.column_field(&def.to_string()).await?;
                    let t = session.lock().table(&table).ok();
                    let t = t.as_ref();
                    let exists = t.is_some_and(|t| t.schema().index_of(field.name()).is_some());
                    if exists && *if_not_exists {
                        continue;
                    }
                    if let Some(d) = default {
                        let null = matches!(&d, SqlExpr::Value(v) if v.value == Value::Null);
                        if !null && t.is_some_and(|t| t.count() > 0) {
                            return Err(Error::unsupported(format!(
                                "ADD COLUMN {} DEFAULT {d} on a table with rows (the rows there \
                                 would read NULL, not the default): add the column, then \
                                 UPDATE and SET DEFAULT",
                                field.name()
                            )));
                        }
                        let column = field.name().clone();
                        then = Some(AlterColumn::SetDefault {
                            column,
                            sql: (!null).then(|| d.to_string()),
                        });
                        AlterColumn::Add(field)
                    } else {
                        AlterColumn::Add(field)
                    }
                }
                AlterTableOperation::AlterColumn { column_name, op } => {
                    use datafusion::sql::sqlparser::ast::AlterColumnOperation as Op;
                    let column = rewrite::ident_name(column_name, self.fold_case());
                    match op {
                        Op::SetDefault { value } => {
                            // Checked now: a default that does not plan is refused.
                            let empty = datafusion::common::DFSchema::empty();
                            self.ctx()?.state().create_logical_expr(&value.to_string(), &empty)?;
                            AlterColumn::SetDefault { column, sql: Some(value.to_string()) }
                        }
                        Op::DropDefault => AlterColumn::SetDefault { column, sql: None },
                        other => {
                            return Err(Error::unsupported(format!(
                                "ALTER COLUMN … {other} (SET DEFAULT and DROP DEFAULT are \
                                 supported)"
                            )));
                        }
                    }
                }
                AlterTableOperation::DropColumn { column_names, if_exists, .. } => {
                    for c in column_names {
                        let c = rewrite::ident_name(c, self.fold_case());
                        let exists = session
                            .lock()
                            .table(&table)
                            .map(|t| t.schema().index_of(&c).is_some())
                            .unwrap_or(false);
                        if !exists && *if_exists {
                            continue;
                        }
                        changes.push(AlterColumn::Drop(c));
                    }
                    continue;
                }
                AlterTableOperation::RenameTable { table_name } => {
                    let (RenameTableNameKind::To(to) | RenameTableNameKind::As(to)) = table_name;
                    let to = rewrite::table_name_of(to, self.fold_case())
                        .ok_or_else(|| Error::sql(format!("ALTER TABLE: bad table name {to}")))?;
                    if ops.len() > 1 {
                        return Err(Error::unsupported(
                            "RENAME TO together with other changes in one ALTER TABLE",
                        ));
                    }
                    session.lock().rename_table(&table, &to, false)?;
                    return Ok(());
                }
                AlterTableOperation::AddConstraint {
                    constraint: datafusion::sql::sqlparser::ast::TableConstraint::Check(k),
                    ..
                } => {
                    let t = session.lock().table(&table)?;
                    let user = t.schema().user_schema();
                    let names: Vec<String> =
                        user.fields().iter().map(|f| f.name().clone()).collect();
                    let fold = self.fold_case();
                    let c = crate::checks::new_check(k.name.as_ref(), &k.expr, &names, fold)?;
                    crate::checks::validate(&table, &user, std::slice::from_ref(&c))?;
                    AlterColumn::AddCheck(c)
                }
                AlterTableOperation::DropConstraint { if_exists, name, .. } => {
                    let name = rewrite::ident_name(name, self.fold_case());
                    let t = session.lock().table(&table)?;
                    if !t.checks().iter().any(|c| c.name == name) {
                        if *if_exists {
                            continue;
                        }
                        return Err(Error::unsupported(format!(
                            "DROP CONSTRAINT {name}: table '{table}' has no check constraint \
                             of that name (keys are dropped with DROP INDEX)"
                        )));
                    }
                    AlterColumn::DropCheck(name)
                }
                AlterTableOperation::RenameColumn { old_column_name, new_column_name } => {
                    AlterColumn::Rename {
                        from: rewrite::ident_name(old_column_name, self.fold_case()),
                        to: rewrite::ident_name(new_column_name, self.fold_case()),
                    }
                }
                other => {
                    return Err(Error::unsupported(format!(
                        "ALTER TABLE {other} (Basalt supports ADD / DROP / RENAME COLUMN, \
                         ALTER COLUMN SET / DROP DEFAULT, ADD CONSTRAINT … CHECK, DROP \
                         CONSTRAINT)"
                    )));
                }
            });
            changes.extend(then);
        }
        // One catalog change: every change takes effect, or none.
        if !changes.is_empty() {
            session.lock().alter_table_all(&table, &changes)?;
        }
        Ok(())
    }

    /// The Arrow field a SQL column definition describes (type, NOT NULL), planned by
    /// DataFusion with Basalt's type planner.
    pub(super) async fn column_field(&self, column_def: &str) -> Result<Field> {
        // A plain column definition plans directly (no copy of the session state).
        let sql = format!("CREATE TABLE basalt_schema_probe ({column_def})");
        let options = self.with_options(|o| o.clone());
        if let DfStatement::Statement(s) = parse_one(&options, &sql)?
            && let Some(LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c))) =
                self.plan_ddl_directly(&s)?
            && let Some(f) = storable_schema(c.input.schema().as_arrow()).fields().first()
        {
            return Ok(f.as_ref().clone());
        }
        let schema = crate::files::schema_from_text(&self.ctx()?.state(), column_def).await?;
        schema
            .fields()
            .first()
            .map(|f| f.as_ref().clone())
            .ok_or_else(|| Error::sql(format!("bad column definition: {column_def}")))
    }
}
