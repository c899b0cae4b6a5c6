//! Running statements: parsing, transaction control, planning, running a plan (again with
//! sort-merge joins when a hash join does not fit), queries, write statements and their
//! guard, errors naming the failing column.
//!
//! Part of the dispatcher (see the module doc of `connection`).

use datafusion::sql::sqlparser::ast::{OnConflictAction, OnInsert};

use super::*;
use crate::rules::subquery_fallback::is_unsupported_subquery;

/// The `DEFAULT` clauses of a `CREATE TABLE`'s columns: column name (as the planner folds
/// it) and the expression's SQL text.
fn column_defaults(
    ct: &datafusion::sql::sqlparser::ast::CreateTable,
    fold: bool,
) -> Vec<(String, String)> {
    use datafusion::sql::sqlparser::ast::ColumnOption;
    ct.columns
        .iter()
        .flat_map(|c| {
            c.options.iter().filter_map(move |o| match &o.option {
                ColumnOption::Default(e) => {
                    Some((rewrite::ident_name(&c.name, fold), e.to_string()))
                }
                _ => None,
            })
        })
        .collect()
}

/// The one-row result of a write statement: how many rows it changed.
pub(super) fn dml_count(n: u64) -> Result<Vec<RecordBatch>> {
    RecordBatch::try_new(count_schema(), vec![Arc::new(UInt64Array::from(vec![n]))])
        .map(|b| vec![b])
        .map_err(|e| Error::sql(format!("DML result: {e}")))
}

/// A write statement in progress. Dropping it unfinished — an error, a panic, or the caller
/// dropping the future of an async call — undoes everything the statement did and releases
/// the writer lock, so the connection is never left inside a half-done statement.
pub(super) struct StatementGuard<'a> {
    binding: &'a Binding,
    stmt: Option<basalt_storage::WriteStatement>,
}

impl<'a> StatementGuard<'a> {
    pub(super) fn begin(binding: &'a Binding) -> Result<StatementGuard<'a>> {
        let stmt = binding.session().lock().begin_write_statement()?;
        Ok(StatementGuard { binding, stmt: Some(stmt) })
    }

    /// Ends the statement: commit (or keep, inside a transaction) on success, undo otherwise.
    pub(super) fn finish(mut self, success: bool) -> Result<()> {
        match self.stmt.take() {
            Some(s) => Ok(self.binding.session().lock().end_write_statement(s, success)?),
            None => Ok(()),
        }
    }
}

impl Drop for StatementGuard<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.stmt.take() {
            let _ = self.binding.session().lock().end_write_statement(s, false);
        }
    }
}

/// Releases the statement's pinned view when dropped.
pub(super) struct PinnedView<'a>(pub(super) &'a Binding);

impl Drop for PinnedView<'_> {
    fn drop(&mut self) {
        self.0.unpin();
    }
}

/// Splits SQL text into Basalt's full-text index DDL and DataFusion's statements, parsed.
pub(super) fn parse_pieces(
    options: &datafusion::config::ConfigOptions,
    sql: &str,
) -> Result<Vec<Stmt>> {
    // SQLite's REINDEX, which the parser does not know: split off first (a scan of the
    // bytes rules it out of nearly every statement).
    if sql.as_bytes().windows(7).any(|w| w.eq_ignore_ascii_case(b"reindex")) {
        let lower = options.sql_parser.enable_ident_normalization;
        let mut out = Vec::new();
        for part in crate::script::split_script(sql) {
            match reindex(part.text, lower)? {
                Some(name) => out.push(Stmt::Reindex(name)),
                None if part.text.trim().is_empty() => {}
                None => out.extend(parse_sql_pieces(options, part.text)?),
            }
        }
        return Ok(out);
    }
    parse_sql_pieces(options, sql)
}

/// `REINDEX [name]` (SQLite): `Some(name)` when the statement is one, `None` otherwise.
fn reindex(stmt: &str, lower: bool) -> Result<Option<Option<String>>> {
    use datafusion::sql::sqlparser::dialect::GenericDialect;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let Ok(tokens) = Tokenizer::new(&GenericDialect {}, stmt).tokenize() else { return Ok(None) };
    let toks: Vec<Token> = tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF | Token::SemiColon))
        .collect();
    let word = |t: &Token| match t {
        Token::Word(w) if w.quote_style.is_none() && lower => Some(w.value.to_lowercase()),
        Token::Word(w) => Some(w.value.clone()),
        _ => None,
    };
    match toks.as_slice() {
        [Token::Word(w), rest @ ..]
            if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("reindex") =>
        {
            match rest {
                [] => Ok(Some(None)),
                // `schema.name`: Basalt has one schema.
                [name] | [_, Token::Period, name] => match word(name) {
                    Some(n) => Ok(Some(Some(n))),
                    None => Err(Error::sql("REINDEX takes a table, index or collation name")),
                },
                _ => Err(Error::sql("REINDEX takes at most one name")),
            }
        }
        _ => Ok(None),
    }
}

/// [`parse_pieces`] for text without REINDEX.
fn parse_sql_pieces(options: &datafusion::config::ConfigOptions, sql: &str) -> Result<Vec<Stmt>> {
    let Some(pieces) =
        crate::fts::split_statements(sql, options.sql_parser.enable_ident_normalization)?
    else {
        return Ok(parse(options, sql)?.into_iter().map(Stmt::Df).collect());
    };
    let mut out = Vec::new();
    for p in pieces {
        match p {
            crate::fts::Piece::Fts(d) => out.push(Stmt::Fts(d)),
            crate::fts::Piece::Sql(text) => {
                out.extend(parse(options, &text)?.into_iter().map(Stmt::Df));
            }
        }
    }
    Ok(out)
}

pub(super) fn count_of(batches: &[RecordBatch]) -> u64 {
    batches
        .first()
        .and_then(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<datafusion::arrow::array::UInt64Array>()
                .map(|a| a.value(0))
        })
        .unwrap_or(0)
}

/// Whether a plan has a hash join, DataFusion's or a dictionary join.
pub(super) fn builds_hash_table(plan: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::joins::HashJoinExec;
    plan.downcast_ref::<HashJoinExec>().is_some()
        || plan.downcast_ref::<crate::exec::dict_join::DictJoinExec>().is_some()
        || plan.downcast_ref::<crate::exec::fused::GroupByExec>().is_some_and(|g| g.over_join())
        || plan.children().into_iter().any(builds_hash_table)
}

/// Whether `e` is the memory pool refusing a hash join's build side, DataFusion's or a
/// dictionary join's (neither spills; DataFusion's sort-merge joins do, through their
/// sorts).
pub(super) fn hash_join_out_of_memory(e: &Error) -> bool {
    matches!(e, Error::Execution { message }
        if message.contains("Resources exhausted")
            && (message.contains("HashJoinInput")
                || message.contains(crate::exec::dict_join::BUILD_CONSUMER)))
}

pub(super) async fn collect(mut s: SendableRecordBatchStream) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    while let Some(b) = s.next().await {
        out.push(b?);
    }
    Ok(out)
}

pub(super) fn batches_stream(b: Vec<RecordBatch>) -> SendableRecordBatchStream {
    let schema = b.first().map(|b| b.schema()).unwrap_or_else(|| Arc::new(Schema::empty()));
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
        schema,
        futures::stream::iter(b.into_iter().map(Ok)),
    ))
}

impl SqlConnection {
    /// Runs every statement in `sql`, in order; returns the result of the last one (DDL and
    /// transaction statements return no batches; DML returns one row with `count`). Stops
    /// at the first failing statement; the statements before it stay done.
    pub async fn execute(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let _g = self.gate.lock().await;
        let mut last = Vec::new();
        for stmt in self.parse(sql)? {
            let r = Box::pin(self.run_one(stmt, false)).await;
            self.files.clear();
            last = match r? {
                Outcome::Batches(b) => b,
                Outcome::Stream(s) => collect(s).await?,
            };
        }
        Ok(last)
    }

    /// Like [`SqlConnection::execute`], but the last statement's rows are streamed (a query
    /// reads the state pinned when the call returns).
    pub async fn execute_stream(&self, sql: &str) -> Result<SendableRecordBatchStream> {
        let _g = self.gate.lock().await;
        let stmts = self.parse(sql)?;
        let n = stmts.len();
        let mut last: Option<Outcome> = None;
        for (i, stmt) in stmts.into_iter().enumerate() {
            // Only the last statement streams; the ones before it run to completion.
            let r = Box::pin(self.run_one(stmt, i + 1 == n)).await;
            self.files.clear();
            last = Some(r?);
        }
        Ok(match last {
            Some(Outcome::Stream(s)) => s,
            Some(Outcome::Batches(b)) => batches_stream(b),
            None => batches_stream(Vec::new()),
        })
    }

    /// Rewrites a statement and plans it with one copy of the session state.
    ///
    /// DataFusion's futures are large (kilobytes each): this module awaits them boxed, so
    /// the futures of the statements that never reach them (DDL, the direct path) stay
    /// small and are not copied kilobytes at a time as they move through the runtime.
    pub(super) async fn plan(&self, stmt: DfStatement) -> Result<LogicalPlan> {
        self.planned.fetch_add(1, Ordering::Relaxed);
        let state = self.ctx()?.state();
        let stmt = Box::pin(prepare_statement(&self.binding, &self.files, &state, stmt)).await?;
        Ok(Box::pin(crate::prepare::plan_prepared(&state, stmt)).await?)
    }

    pub(super) async fn run(&self, mut stmt: DfStatement, stream: bool) -> Result<Outcome> {
        // Set for every CREATE TABLE (empty without defaults or checks), before any
        // planning; the checks leave the statement (DataFusion refuses them).
        if let DfStatement::Statement(s) = &mut stmt
            && let Statement::CreateTable(ct) = s.as_mut()
        {
            *self.create_defaults.lock() = column_defaults(ct, self.fold_case());
            *self.create_checks.lock() = crate::checks::take_checks(ct, self.fold_case())?;
        }
        if let DfStatement::Statement(s) = &stmt {
            if let Some(plan) = self.plan_ddl_directly(s)? {
                return self.run_plan(plan, stream).await;
            }
            if let Some(r) = Box::pin(self.dml_via_query(s)).await {
                return r.map(Outcome::Batches);
            }
            if let Statement::Insert(ins) = s.as_ref()
                && let Some(OnInsert::OnConflict(oc)) = &ins.on
                && let OnConflictAction::DoUpdate(du) = &oc.action
            {
                return Box::pin(self.insert_do_update(ins, oc, du)).await.map(Outcome::Batches);
            }
            if let Statement::Insert(ins) = s.as_ref()
                && let Some((plain, mode)) = self.conflict_clause(ins)?
            {
                let plan = self.plan(DfStatement::Statement(Box::new(plain))).await?;
                return Box::pin(self.write_statement_with(plan, mode)).await.map(Outcome::Batches);
            }
            match s.as_ref() {
                Statement::StartTransaction { .. }
                | Statement::Commit { .. }
                | Statement::Rollback { .. }
                | Statement::Savepoint { .. }
                | Statement::ReleaseSavepoint { .. } => {
                    self.transaction_control(s).unwrap_or(Ok(()))?;
                    return Ok(Outcome::Batches(Vec::new()));
                }
                Statement::AlterTable(a) => {
                    Box::pin(self.alter_table(&a.name, &a.operations, a.if_exists)).await?;
                    return Ok(Outcome::Batches(Vec::new()));
                }
                Statement::CreateIndex(ci) => {
                    self.create_index(ci)?;
                    return Ok(Outcome::Batches(Vec::new()));
                }
                Statement::Drop {
                    object_type: datafusion::sql::sqlparser::ast::ObjectType::Index,
                    if_exists,
                    names,
                    ..
                } => {
                    self.drop_indexes(names, *if_exists)?;
                    return Ok(Outcome::Batches(Vec::new()));
                }
                Statement::CreateView(cv) => {
                    let cv = cv.clone();
                    Box::pin(self.create_view(&cv, stmt)).await?;
                    return Ok(Outcome::Batches(Vec::new()));
                }
                s => {
                    if let Some(b) = self.try_direct(s, &[], None)? {
                        return Ok(Outcome::Batches(b));
                    }
                }
            }
        }
        let plan = self.plan(stmt).await?;
        self.run_plan(plan, stream).await
    }

    /// Runs `BEGIN` / `START TRANSACTION`, `COMMIT` or `ROLLBACK` (without a savepoint) on
    /// the session; `None` when `s` is none of them.
    pub(super) fn transaction_control(&self, s: &Statement) -> Option<Result<()>> {
        // Savepoint names fold as other identifiers do (unless quoted).
        let name = |i: &datafusion::sql::sqlparser::ast::Ident| {
            if i.quote_style.is_none() && self.fold_case() {
                i.value.to_lowercase()
            } else {
                i.value.clone()
            }
        };
        let r = match s {
            Statement::StartTransaction { .. } => self.binding.session().lock().begin(false),
            Statement::Commit { .. } => self.binding.session().lock().commit(),
            Statement::Rollback { savepoint: None, .. } => self.binding.session().lock().rollback(),
            Statement::Rollback { savepoint: Some(p), .. } => {
                self.binding.session().lock().rollback_to_savepoint(&name(p))
            }
            Statement::Savepoint { name: p } => self.binding.session().lock().savepoint(&name(p)),
            Statement::ReleaseSavepoint { name: p } => {
                self.binding.session().lock().release_savepoint(&name(p))
            }
            _ => return None,
        };
        Some(r.map_err(Into::into))
    }

    /// Runs a planned statement; when a hash join's build side did not fit the memory
    /// limit, runs it once more with sort-merge joins, which spill (see
    /// [`hash_join_out_of_memory`]).
    pub(super) async fn run_plan(&self, plan: LogicalPlan, stream: bool) -> Result<Outcome> {
        let again = self.runtime.limit.is_some().then(|| plan.clone());
        let retry = plan.clone();
        let first = Box::pin(self.run_plan_once(plan, stream)).await;
        // Subqueries DataFusion could not plan: once more, as nested loops (see
        // `rules::subquery_fallback`); nothing ran, the error came from planning.
        let first = match first {
            Err(e) if is_unsupported_subquery(&e.to_string(), &retry) => {
                self.subquery_fallback.store(true, Ordering::Release);
                let r = Box::pin(self.run_plan_once(retry, stream)).await;
                self.subquery_fallback.store(false, Ordering::Release);
                r
            }
            r => r,
        };
        match first {
            Err(e) if hash_join_out_of_memory(&e) => match again {
                Some(plan) if self.with_options(|o| o.optimizer.prefer_hash_join) => {
                    Box::pin(self.run_without_hash_joins(plan, stream)).await
                }
                _ => Err(e),
            },
            r => r,
        }
    }

    /// Runs a planned statement with the session's `prefer_hash_join` off.
    pub(super) async fn run_without_hash_joins(
        &self,
        plan: LogicalPlan,
        stream: bool,
    ) -> Result<Outcome> {
        let set = |on: bool| -> Result<()> {
            let ctx = self.ctx()?;
            ctx.state_ref().write().config_mut().options_mut().optimizer.prefer_hash_join = on;
            Ok(())
        };
        set(false)?;
        let r = Box::pin(self.run_plan_once(plan, stream)).await;
        set(true)?;
        r
    }

    /// Whether unquoted identifiers fold to lower case in this session.
    pub(super) fn fold_case(&self) -> bool {
        self.with_options(|o| o.sql_parser.enable_ident_normalization)
    }

    pub(super) fn parse(&self, sql: &str) -> Result<Vec<Stmt>> {
        self.with_options(|options| parse_pieces(options, sql))
    }

    pub(super) async fn run_one(&self, stmt: Stmt, stream: bool) -> Result<Outcome> {
        match stmt {
            Stmt::Df(s) => self.run(s, stream).await,
            Stmt::Reindex(name) => {
                self.reindex(name.as_deref())?;
                Ok(Outcome::Batches(Vec::new()))
            }
            Stmt::Fts(d) => {
                self.no_fts_ddl_in_transaction()?;
                let store = self.binding.session().lock().store().clone();
                crate::fts::run_ddl(&store, &d)?;
                Ok(Outcome::Batches(Vec::new()))
            }
        }
    }

    /// SQLite's `REINDEX [name]`: Basalt's key and index sets are derived from the rows
    /// and kept in step with every write, so there is nothing to rebuild; the name must be
    /// a table, an index or one of SQLite's collations (`BINARY`, `NOCASE`, `RTRIM`).
    fn reindex(&self, name: Option<&str>) -> Result<()> {
        let Some(name) = name else { return Ok(()) };
        if ["binary", "nocase", "rtrim"].iter().any(|c| c.eq_ignore_ascii_case(name)) {
            return Ok(());
        }
        let view = self.binding.view()?;
        let found = view.table(name).is_ok()
            || view
                .table_names()
                .iter()
                .any(|t| view.table(t).is_ok_and(|t| t.indexes().iter().any(|d| d.name == name)));
        if found {
            Ok(())
        } else {
            Err(Error::sql(format!("REINDEX: no table or index named '{name}'")))
        }
    }

    /// Plans and runs a query (or EXPLAIN, SHOW, SET, …) against a pinned view.
    pub(super) async fn query(&self, plan: LogicalPlan, stream: bool) -> Result<Outcome> {
        let physical = self.physical(plan).await?;
        let joins = self.runtime.limit.is_some() && builds_hash_table(&physical);
        let mut s = datafusion::physical_plan::execute_stream(physical, self.ctx()?.task_ctx())?;
        if !stream {
            return Ok(Outcome::Batches(collect(s).await?));
        }
        if !joins {
            return Ok(Outcome::Stream(s));
        }
        // With a hash join the first batch is awaited here: an error before any output (its
        // build side over the memory limit) is the statement's, which may then run again.
        let Some(first) = s.next().await else { return Ok(Outcome::Stream(s)) };
        let first = first?;
        let schema = s.schema();
        let rest = futures::stream::once(async move { Ok(first) }).chain(s);
        Ok(Outcome::Stream(Box::pin(
            datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(schema, rest),
        )))
    }

    /// Builds the physical plan with the statement's view pinned.
    /// [`SqlConnection::physical`], planned once more with subqueries as nested loops when
    /// DataFusion could not plan them (see `rules::subquery_fallback`).
    pub(super) async fn physical_or_fallback(
        &self,
        plan: LogicalPlan,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let retry = plan.clone();
        match Box::pin(self.physical(plan)).await {
            Err(e) if is_unsupported_subquery(&e.to_string(), &retry) => {
                self.subquery_fallback.store(true, Ordering::Release);
                let r = Box::pin(self.physical(retry)).await;
                self.subquery_fallback.store(false, Ordering::Release);
                r
            }
            r => r,
        }
    }

    pub(super) async fn physical(&self, plan: LogicalPlan) -> Result<Arc<dyn ExecutionPlan>> {
        self.binding.pin()?;
        let _unpin = PinnedView(&self.binding);
        let df = Box::pin(self.ctx()?.execute_logical_plan(plan)).await?;
        Ok(Box::pin(df.create_physical_plan()).await?)
    }

    /// Runs a DML plan as one write statement: all of it or (on error) none of it.
    pub(super) async fn write_statement(&self, plan: LogicalPlan) -> Result<Vec<RecordBatch>> {
        self.write_statement_with(plan, None).await
    }

    /// [`SqlConnection::write_statement`] with an INSERT's duplicate keys resolved as
    /// `on_conflict` says.
    pub(super) async fn write_statement_with(
        &self,
        plan: LogicalPlan,
        on_conflict: Option<OnConflict>,
    ) -> Result<Vec<RecordBatch>> {
        let stmt = StatementGuard::begin(&self.binding)?;
        let r = async {
            let mut physical = self.physical(plan.clone()).await?;
            if let Some(mode) = on_conflict {
                let insert = physical
                    .downcast_ref::<DmlExec>()
                    .and_then(|d| d.with_on_conflict(mode))
                    .ok_or_else(|| {
                        Error::unsupported("a conflict clause on an INSERT into this table")
                    })?;
                physical = Arc::new(insert);
            }
            let s = datafusion::physical_plan::execute_stream(physical, self.ctx()?.task_ctx())?;
            collect(s).await
        }
        .await;
        let end = stmt.finish(r.is_ok());
        let batches = match r {
            Ok(b) => b,
            Err(e) => return Err(self.name_failing_column(&plan, e).await),
        };
        end?;
        Ok(batches)
    }

    /// A value that does not fit its column fails somewhere inside DataFusion without naming
    /// the column. When an INSERT or UPDATE fails that way, each written column's expression
    /// is evaluated on its own to find the first that fails, and the error names it.
    pub(super) async fn name_failing_column(&self, plan: &LogicalPlan, e: Error) -> Error {
        let text = e.to_string().to_lowercase();
        let null = text.contains("declared as non-nullable");
        if !(null
            || text.contains("cast")
            || text.contains("overflow")
            || text.contains("out of range"))
        {
            return e;
        }
        let LogicalPlan::Dml(dml) = plan else { return e };
        let LogicalPlan::Projection(p) = dml.input.as_ref() else { return e };
        if null {
            // A NULL in a VALUES list for a NOT NULL column: DataFusion names the VALUES
            // list's own column (`column4`); name the table's.
            let original = e.to_string();
            let values_column = original
                .split("Column '")
                .nth(1)
                .and_then(|rest| rest.split('\'').next())
                .map(str::to_string);
            let target = values_column.and_then(|c| {
                p.expr.iter().zip(p.schema.fields()).find_map(|(x, f)| {
                    x.column_refs().iter().any(|r| r.name == c).then(|| f.name().clone())
                })
            });
            return match target {
                Some(column) => Error::Storage(basalt_storage::Error::NullViolation {
                    table: dml.table_name.table().to_string(),
                    column,
                }),
                None => e,
            };
        }
        let name = |field: &str| {
            let message = format!("table '{}', column '{field}': {e}", dml.table_name);
            match &e {
                Error::Sql { .. } => Error::Sql { message },
                _ => Error::Execution { message },
            }
        };
        let column_of = |input_column: &str| {
            p.expr.iter().zip(p.schema.fields()).find_map(|(x, f)| {
                x.column_refs().iter().any(|c| c.name == input_column).then(|| f.name().clone())
            })
        };
        if !self.runs(p.input.as_ref().clone()).await {
            // The input itself fails: INSERT … VALUES casts inside its VALUES list.
            let LogicalPlan::Values(v) = p.input.as_ref() else { return e };
            for (i, f) in v.schema.fields().iter().enumerate() {
                let rows: Vec<Vec<datafusion::logical_expr::Expr>> =
                    v.values.iter().filter_map(|r| r.get(i).cloned().map(|x| vec![x])).collect();
                let probe = datafusion::logical_expr::LogicalPlanBuilder::values(rows)
                    .and_then(|b| b.build());
                if let Ok(probe) = probe
                    && !self.runs(probe).await
                    && let Some(target) = column_of(f.name())
                {
                    return name(&target);
                }
            }
            return e;
        }
        for (expr, field) in p.expr.iter().zip(p.schema.fields()) {
            let probe =
                datafusion::logical_expr::LogicalPlanBuilder::from(p.input.as_ref().clone())
                    .project(vec![expr.clone()])
                    .and_then(|b| b.build());
            if let Ok(probe) = probe
                && !self.runs(probe).await
            {
                return name(field.name());
            }
        }
        e
    }

    /// Whether a plan plans and runs without error (for error diagnosis only).
    pub(super) async fn runs(&self, plan: LogicalPlan) -> bool {
        match self.physical(plan).await {
            Err(_) => false,
            Ok(physical) => {
                let Ok(ctx) = self.ctx() else { return false };
                match datafusion::physical_plan::execute_stream(physical, ctx.task_ctx()) {
                    Ok(s) => collect(s).await.is_ok(),
                    Err(_) => false,
                }
            }
        }
    }
}
