//! Prepared statements and the plans kept for them: the logical plan with placeholders,
//! the optimized plan kept while the settings do not change, the physical plan kept while
//! nothing was committed, and when each may be reused.
//!
//! Part of the dispatcher (see the module doc of `connection`).

use super::*;
use crate::rules::subquery_fallback::is_unsupported_subquery;
use datafusion::sql::sqlparser::ast::{OnConflictAction, OnInsert};

/// A prepared statement: its logical plan, with `$n` placeholders still in it, and the
/// parsed statement for the direct path (which classifies it again with each run's values).
///
/// A statement without placeholders that the direct path takes is not planned when it is
/// prepared: DataFusion plans it on the first run that needs it (the fast paths turned off,
/// or the table changed so that the direct path no longer takes it).
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The logical plan (see above for when it is empty); shared by clones.
    pub(super) plan: Arc<OnceLock<LogicalPlan>>,
    pub(super) stmt: Option<Arc<Statement>>,
    /// The tables the plan scans, with the columns they had when it was made.
    pub(super) scans: Arc<Vec<(String, SchemaRef)>>,
    /// The plan after DataFusion's logical optimizer, kept from the first run when the plan
    /// is a query whose optimisation cannot depend on the moment it runs (see
    /// [`reusable_optimization`]); shared by clones. Keyed by the optimizer settings it was
    /// made under. The physical plan — where scans bind the state the run reads — is built
    /// again unless nothing was committed since the last run ([`KeptPhysical`]).
    pub(super) optimized: Option<Arc<Mutex<Option<KeptPlan>>>>,
    /// Kept after the first direct run when the parameters are only the `_id` keys of the
    /// WHERE clause (see [`KeyedTemplate`]); shared by clones.
    pub(super) keyed: Arc<OnceLock<KeyedTemplate>>,
    /// Kept after the first direct run of a write without parameters (see [`KeptWrite`]);
    /// shared by clones.
    pub(super) kept_write: Arc<OnceLock<KeptWrite>>,
    /// Set at the first direct run of a statement with parameters: the statement's
    /// [`InsertTemplate`] when it is an `INSERT … VALUES` that has one, else `None` (not
    /// looked for again); shared by clones.
    pub(super) insert: Arc<OnceLock<Option<InsertTemplate>>>,
    /// An INSERT's conflict clause (`OR IGNORE`, `ON CONFLICT DO NOTHING`, …), planned
    /// without it and applied when it runs.
    pub(super) on_conflict: Option<OnConflict>,
    /// An `INSERT … ON CONFLICT … DO UPDATE`: run by `insert_do_update_with` with each
    /// run's values (its plan is the INSERT's without the clause, made to check it).
    pub(super) do_update: Option<Arc<Statement>>,
}

/// A prepared write without parameters (`INSERT … VALUES` of literals, `UPDATE` /
/// `DELETE` with literal values) as the direct path classified it: its literals are
/// already converted to the columns' types, so a run goes straight to storage. Such a
/// [`Direct`] holds no snapshot — the write resolves its table when it runs — so it stays
/// right while the table has the columns it was classified against (checked at each run,
/// with the identifier folding it was classified under and the fast-path switch, as for a
/// [`KeyedTemplate`]).
#[derive(Debug)]
pub(super) struct KeptWrite {
    /// Whether unquoted identifiers folded to lower case when it was classified.
    pub(super) lower_idents: bool,
    pub(super) direct: Direct,
}

/// A logically optimized plan and the key of the settings it was made under, with the
/// physical plan last built from it when that plan may run again (see [`KeptPhysical`]).
pub(super) struct KeptPlan {
    pub(super) key: KeptKey,
    pub(super) logical: LogicalPlan,
    pub(super) physical: Option<KeptPhysical>,
}

/// What a kept plan was made under: the connection's session and the generation of its
/// settings ([`SqlConnection::settings`]), and the connection's own switches. Compared on
/// every run instead of formatting the settings or copying the session state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct KeptKey {
    pub(super) session: String,
    pub(super) settings: u64,
    pub(super) fast_paths: bool,
    pub(super) pushdown: bool,
}

/// A physical plan kept for the next run of its prepared query: valid while the database's
/// committed state is the very snapshot it was built on (any commit, flush or compaction
/// makes a new one), the statement runs outside a transaction, on the same connection with
/// the same settings. Only plans whose every leaf is a Basalt exec holding no dynamic filter
/// are kept ([`rerunnable`]); each run resets their execution state first
/// (`reset_plan_states`). A kept plan holds its snapshot's tables until the next run
/// replaces it.
pub(super) struct KeptPhysical {
    pub(super) snapshot: Arc<basalt_storage::DbSnapshot>,
    pub(super) plan: Arc<dyn ExecutionPlan>,
    /// The task context the plan runs with (the session's settings and functions when it
    /// was built: valid while the key is).
    pub(super) task: Arc<datafusion::execution::TaskContext>,
}

impl std::fmt::Debug for KeptPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeptPlan")
            .field("key", &self.key)
            .field("physical", &self.physical.is_some())
            .finish_non_exhaustive()
    }
}

/// Whether a physical plan may be executed again on the same data: every leaf reads a
/// Basalt snapshot (file scans list and read files at planning, and may see them change),
/// and no Basalt scan holds a parent's dynamic filter (DataFusion's `reset_plan_states`
/// gives a top-k or join a new filter, but the scan would keep the old one).
pub(super) fn rerunnable(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut ok = true;
    let _ = plan.apply(|node| {
        let leaf = node.children().is_empty();
        let fine = match node.downcast_ref::<crate::exec::scan::ScanExec>() {
            Some(scan) => !scan.has_hints(),
            None => !leaf
                || node.downcast_ref::<crate::exec::fused::GroupByExec>().is_some()
                || node.downcast_ref::<crate::exec::entry::EntryFilterExec>().is_some()
                || node.downcast_ref::<datafusion::physical_plan::empty::EmptyExec>().is_some()
                || node
                    .downcast_ref::<datafusion::physical_plan::placeholder_row::PlaceholderRowExec>(
                    )
                    .is_some(),
        };
        if !fine {
            ok = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    ok
}

/// Whether a prepared plan may keep its logically optimized form across runs: a query (not
/// DML, DDL, EXPLAIN or a session statement) with no placeholders and no function that is
/// not immutable — the optimizer folds stable functions such as `now()` to the time of the
/// run, and a kept plan would freeze them. Nothing in a logical plan holds data: tables are
/// bound when the physical plan is built, so a kept plan still reads the state of each run.
pub(super) fn reusable_optimization(plan: &LogicalPlan) -> bool {
    use datafusion::logical_expr::{Expr, Volatility};
    match plan {
        LogicalPlan::Dml(_)
        | LogicalPlan::Ddl(_)
        | LogicalPlan::Statement(_)
        | LogicalPlan::Explain(_)
        | LogicalPlan::Analyze(_)
        | LogicalPlan::Copy(_)
        | LogicalPlan::DescribeTable(_)
        | LogicalPlan::Extension(_) => return false,
        _ => {}
    }
    if plan.get_parameter_types().map(|p| !p.is_empty()).unwrap_or(true) {
        return false;
    }
    let mut reusable = true;
    let walked = plan.apply_with_subqueries(|node| {
        if matches!(node, LogicalPlan::Extension(_) | LogicalPlan::Dml(_)) {
            reusable = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::ScalarFunction(f) = e
                    && f.func.signature().volatility != Volatility::Immutable
                {
                    reusable = false;
                    return Ok(TreeNodeRecursion::Stop);
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    walked.is_ok() && reusable
}

impl Prepared {
    /// The types the placeholders were inferred to have (`$1` first; `None` if unknown).
    pub fn parameter_types(&self) -> Result<Vec<Option<DataType>>> {
        // Not planned yet: prepared for the direct path, which takes no placeholders.
        let Some(plan) = self.plan.get() else { return Ok(Vec::new()) };
        let mut types: Vec<(String, Option<DataType>)> =
            plan.get_parameter_types().map_err(Error::from)?.into_iter().collect();
        types
            .sort_by_key(|(k, _)| k.trim_start_matches('$').parse::<usize>().unwrap_or(usize::MAX));
        Ok(types.into_iter().map(|(_, t)| t).collect())
    }
}

/// Whether table `name` has the columns a prepared statement's plan scanned (`None`: the
/// plan scanned no table of that name).
pub(super) fn same_columns(
    planned: &[(String, SchemaRef)],
    name: &str,
    now: &basalt_storage::TableSnapshot,
) -> Option<bool> {
    let (_, then) = planned.iter().find(|(n, _)| n == name)?;
    Some(now.schema().full_schema().fields() == then.fields())
}

impl SqlConnection {
    /// Parses and plans one statement with `$1`-style placeholders.
    pub async fn prepare(&self, sql: &str) -> Result<Prepared> {
        let _g = self.gate.lock().await;
        let mut stmts = self.parse(sql)?;
        if let Some(p) = self.prepare_for_direct(&stmts)? {
            return Ok(p);
        }
        if stmts.len() != 1 {
            return Err(Error::sql(format!(
                "prepare takes exactly one statement, got {}",
                stmts.len()
            )));
        }
        let stmt = match stmts.pop() {
            Some(Stmt::Df(s)) => s,
            Some(Stmt::Fts(_) | Stmt::Reindex(_)) => {
                return Err(Error::unsupported(
                    "full-text index DDL and REINDEX cannot be prepared",
                ));
            }
            None => return Err(Error::sql("empty statement")),
        };
        let mut raw = match &stmt {
            DfStatement::Statement(s) => Some(Arc::new(s.as_ref().clone())),
            _ => None,
        };
        // A conflict clause: the INSERT is planned without it (and only through the plan:
        // the direct path does not resolve conflicts).
        let mut on_conflict = None;
        let mut do_update = None;
        let mut stmt = stmt;
        if let DfStatement::Statement(s) = &stmt
            && let Statement::Insert(ins) = s.as_ref()
            && let Some(OnInsert::OnConflict(oc)) = &ins.on
            && matches!(oc.action, OnConflictAction::DoUpdate(_))
        {
            do_update = Some(Arc::new(s.as_ref().clone()));
            let mut plain = ins.clone();
            plain.on = None;
            plain.table_alias = None;
            stmt = DfStatement::Statement(Box::new(Statement::Insert(plain)));
            raw = None;
        } else if let DfStatement::Statement(s) = &stmt
            && let Statement::Insert(ins) = s.as_ref()
            && let Some((plain, mode)) = self.conflict_clause(ins)?
        {
            on_conflict = mode;
            stmt = DfStatement::Statement(Box::new(plain));
            raw = None;
        }
        let planned = self.plan(stmt).await;
        self.files.clear();
        let plan = planned?;
        match &plan {
            LogicalPlan::Ddl(_) | LogicalPlan::Statement(_) => {
                Err(Error::unsupported("only queries and INSERT / UPDATE / DELETE can be prepared"))
            }
            _ => {
                let mut scans = Vec::new();
                plan.apply_with_subqueries(|node| {
                    match node {
                        LogicalPlan::TableScan(t) => {
                            scans.push((t.table_name.table().to_string(), t.source.schema()));
                        }
                        LogicalPlan::Dml(d) => {
                            scans.push((d.table_name.table().to_string(), d.target.schema()));
                        }
                        _ => {}
                    }
                    Ok(TreeNodeRecursion::Continue)
                })?;
                let optimized = reusable_optimization(&plan).then(|| Arc::new(Mutex::new(None)));
                Ok(Prepared {
                    plan: Arc::new(OnceLock::from(plan)),
                    stmt: raw,
                    scans: Arc::new(scans),
                    optimized,
                    keyed: Arc::new(OnceLock::new()),
                    kept_write: Arc::new(OnceLock::new()),
                    insert: Arc::new(OnceLock::new()),
                    on_conflict,
                    do_update,
                })
            }
        }
    }

    /// Runs a prepared statement with values for its placeholders (`$1` first). The
    /// statement reads the state as of this call.
    pub async fn execute_prepared(
        &self,
        prepared: &Prepared,
        params: Vec<ScalarValue>,
    ) -> Result<Vec<RecordBatch>> {
        let _g = self.gate.lock().await;
        if let Some(s) = &prepared.do_update
            && let Statement::Insert(ins) = s.as_ref()
            && let Some(OnInsert::OnConflict(oc)) = &ins.on
            && let OnConflictAction::DoUpdate(du) = &oc.action
        {
            return Box::pin(self.insert_do_update_with(ins, oc, du, &params)).await;
        }
        if let Some(stmt) = &prepared.stmt
            && let Some(b) = self.try_prepared_direct(prepared, stmt, &params)?
        {
            return Ok(b);
        }
        let plan = match (prepared.plan.get(), &prepared.stmt) {
            (Some(p), _) => p.clone(),
            (None, Some(stmt)) => {
                let planned = self.plan(DfStatement::Statement(Box::new(stmt.as_ref().clone())));
                let planned = Box::pin(planned).await;
                self.files.clear();
                let planned = planned?;
                prepared.plan.get_or_init(|| planned).clone()
            }
            (None, None) => return Err(Error::sql("a prepared statement without a plan")),
        };
        let params = coerce_params(&plan, params);
        if let Some(mode) = &prepared.on_conflict {
            let plan = plan.with_param_values(ParamValues::List(
                params.into_iter().map(Into::into).collect(),
            ))?;
            return Box::pin(self.write_statement_with(plan, Some(mode.clone()))).await;
        }
        if let Some(cache) = &prepared.optimized
            && params.is_empty()
        {
            return match Box::pin(self.run_optimized(&plan, cache)).await {
                // Subqueries DataFusion could not plan: the path that plans them again.
                Err(e) if is_unsupported_subquery(&e.to_string(), &plan) => {
                    match Box::pin(self.run_plan(plan, false)).await? {
                        Outcome::Batches(b) => Ok(b),
                        Outcome::Stream(s) => collect(s).await,
                    }
                }
                Err(e) if hash_join_out_of_memory(&e) => {
                    match Box::pin(self.run_without_hash_joins(plan, false)).await? {
                        Outcome::Batches(b) => Ok(b),
                        Outcome::Stream(s) => collect(s).await,
                    }
                }
                r => r,
            };
        }
        let plan = plan
            .with_param_values(ParamValues::List(params.into_iter().map(Into::into).collect()))?;
        match Box::pin(self.run_plan(plan, false)).await? {
            Outcome::Batches(b) => Ok(b),
            Outcome::Stream(s) => collect(s).await,
        }
    }

    /// Runs a prepared query whose logically optimized plan may be kept (see
    /// [`reusable_optimization`]): optimizes it on the first run (or after a `SET`, `RESET`
    /// or switch changed the settings), then only builds the physical plan — binding this
    /// run's state — and runs it.
    pub(super) async fn run_optimized(
        &self,
        plan: &LogicalPlan,
        cache: &Mutex<Option<KeptPlan>>,
    ) -> Result<Vec<RecordBatch>> {
        let key = KeptKey {
            session: self.ctx()?.session_id(),
            settings: self.settings.load(Ordering::Acquire),
            fast_paths: self.fast_paths.load(Ordering::Relaxed),
            pushdown: self.binding.pushdown(),
        };
        let committed = match self.binding.session().lock().read_view()? {
            basalt_storage::ReadView::Committed(s) => Some(s),
            basalt_storage::ReadView::Transaction(..) => None,
        };
        // The session state is copied only to plan (a copy clones every function map).
        let (optimized, kept) = {
            let mut guard = cache.lock();
            match guard.as_mut().filter(|k| k.key == key) {
                Some(k) => {
                    let kept = match (&k.physical, &committed) {
                        (Some(p), Some(now)) if Arc::ptr_eq(&p.snapshot, now) => {
                            Some((p.plan.clone(), p.task.clone()))
                        }
                        _ => None,
                    };
                    (k.logical.clone(), kept)
                }
                None => {
                    let p = self.ctx()?.state().optimize(plan)?;
                    *guard =
                        Some(KeptPlan { key: key.clone(), logical: p.clone(), physical: None });
                    (p, None)
                }
            }
        };
        let (physical, task) = match kept {
            Some((p, task)) => {
                self.reused_plans.fetch_add(1, Ordering::Relaxed);
                (datafusion::physical_plan::execution_plan::reset_plan_states(p)?, task)
            }
            None => {
                // Pin the committed snapshot read above, so the plan is known to read it.
                self.binding.pin()?;
                let _unpin = PinnedView(&self.binding);
                let state = self.ctx()?.state();
                let p = Box::pin(state.query_planner().create_physical_plan(&optimized, &state))
                    .await?;
                let task = Arc::new(datafusion::execution::TaskContext::from(&state));
                let pinned = match self.binding.view()? {
                    basalt_storage::ReadView::Committed(s) => Some(s),
                    basalt_storage::ReadView::Transaction(..) => None,
                };
                if let Some(snapshot) = pinned
                    && rerunnable(&p)
                    && let Some(k) = cache.lock().as_mut().filter(|k| k.key == key)
                {
                    k.physical =
                        Some(KeptPhysical { snapshot, plan: p.clone(), task: task.clone() });
                }
                (p, task)
            }
        };
        let s = datafusion::physical_plan::execute_stream(physical, task)?;
        collect(s).await
    }
}

/// `params` cast to the types the plan infers for its placeholders, where the cast is exact:
/// text converts as a literal would (`'2.25'` into a DECIMAL column), other values only when
/// casting back gives the same value (an integer into a narrower integer column, yes; 2.5
/// into an integer column, no). Used when the plan, not the direct path, runs a prepared
/// statement; a value that does not cast is left for the usual type error.
pub(super) fn coerce_params(plan: &LogicalPlan, params: Vec<ScalarValue>) -> Vec<ScalarValue> {
    if params.is_empty() {
        return params;
    }
    let Ok(types) = plan.get_parameter_types() else { return params };
    params
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let Some(Some(want)) = types.get(&format!("${}", i + 1)) else { return p };
            let have = p.data_type();
            if p.is_null() || &have == want {
                return p;
            }
            let Ok(cast) = p.cast_to(want) else { return p };
            let text = matches!(
                have,
                datafusion::arrow::datatypes::DataType::Utf8
                    | datafusion::arrow::datatypes::DataType::LargeUtf8
                    | datafusion::arrow::datatypes::DataType::Utf8View
            );
            if cast.is_null() || !(text || cast.cast_to(&have).is_ok_and(|back| back == p)) {
                return p;
            }
            cast
        })
        .collect()
}
