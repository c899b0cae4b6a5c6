//! The statement dispatcher: one [`SqlConnection`] per engine connection.
//!
//! Each statement is parsed by DataFusion's parser, rewritten where Basalt's tables need
//! it ([`crate::rewrite`]), and then sent to the right place:
//! - `BEGIN` / `START TRANSACTION`, `COMMIT`, `ROLLBACK`, and `ALTER TABLE` go to storage
//!   directly (DataFusion does not execute them);
//! - everything else is planned by DataFusion; of the plans, `CREATE TABLE [AS]` and
//!   `DROP TABLE` are executed against storage (DataFusion would create in-memory tables),
//!   DML runs DataFusion's physical plan inside a write statement of the connection's
//!   session, and queries run as they are.
//!
//! Each statement pins the state it reads before its physical plan is built: a statement
//! never mixes two committed states, and a write statement reads the newest state with the
//! writer lock held (so `UPDATE t SET x = x + 1` cannot lose an update). Statements of one
//! connection run one at a time.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::SchemaProvider;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{ParamValues, ScalarValue, TableReference};
use datafusion::execution::SendableRecordBatchStream;
use datafusion::execution::context::SessionContext;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::prelude::SessionConfig;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    AlterTableOperation, ObjectName, RenameTableNameKind, Statement,
};
use futures::StreamExt;
use parking_lot::Mutex;

use basalt_storage::{AlterColumn, Session};

use crate::binding::Binding;
use crate::catalog::BasaltSchema;
use crate::direct::{self, Direct, InsertTemplate, KeyedTemplate};
use crate::dml::{DmlExec, DmlKind, count_schema};
use crate::error::{Error, Result};
use crate::files::{FILES_SCHEMA, Files};
use crate::fused::FuseGroupBy;
use crate::parse::{parse, parse_one, storable_schema};
use crate::prepare::prepare_statement;
use crate::rewrite;
use crate::types::VectorTypes;

/// A prepared statement: its logical plan, with `$n` placeholders still in it, and the
/// parsed statement for the direct path (which classifies it again with each run's values).
///
/// A statement without placeholders that the direct path takes is not planned when it is
/// prepared: DataFusion plans it on the first run that needs it (the fast paths turned off,
/// or the table changed so that the direct path no longer takes it).
#[derive(Debug, Clone)]
pub struct Prepared {
    /// The logical plan (see above for when it is empty); shared by clones.
    plan: Arc<OnceLock<LogicalPlan>>,
    stmt: Option<Arc<Statement>>,
    /// The tables the plan scans, with the columns they had when it was made.
    scans: Arc<Vec<(String, SchemaRef)>>,
    /// The plan after DataFusion's logical optimizer, kept from the first run when the plan
    /// is a query whose optimisation cannot depend on the moment it runs (see
    /// [`reusable_optimization`]); shared by clones. Keyed by the optimizer settings it was
    /// made under. The physical plan — where scans bind the state the run reads — is built
    /// again unless nothing was committed since the last run ([`KeptPhysical`]).
    optimized: Option<Arc<Mutex<Option<KeptPlan>>>>,
    /// Kept after the first direct run when the parameters are only the `_id` keys of the
    /// WHERE clause (see [`KeyedTemplate`]); shared by clones.
    keyed: Arc<OnceLock<KeyedTemplate>>,
    /// Kept after the first direct run of a write without parameters (see [`KeptWrite`]);
    /// shared by clones.
    kept_write: Arc<OnceLock<KeptWrite>>,
    /// Set at the first direct run of a statement with parameters: the statement's
    /// [`InsertTemplate`] when it is an `INSERT … VALUES` that has one, else `None` (not
    /// looked for again); shared by clones.
    insert: Arc<OnceLock<Option<InsertTemplate>>>,
}

/// A prepared write without parameters (`INSERT … VALUES` of literals, `UPDATE` /
/// `DELETE` with literal values) as the direct path classified it: its literals are
/// already converted to the columns' types, so a run goes straight to storage. Such a
/// [`Direct`] holds no snapshot — the write resolves its table when it runs — so it stays
/// right while the table has the columns it was classified against (checked at each run,
/// with the identifier folding it was classified under and the fast-path switch, as for a
/// [`KeyedTemplate`]).
#[derive(Debug)]
struct KeptWrite {
    /// Whether unquoted identifiers folded to lower case when it was classified.
    lower_idents: bool,
    direct: Direct,
}

/// A logically optimized plan and the key of the settings it was made under, with the
/// physical plan last built from it when that plan may run again (see [`KeptPhysical`]).
struct KeptPlan {
    key: KeptKey,
    logical: LogicalPlan,
    physical: Option<KeptPhysical>,
}

/// What a kept plan was made under: the connection's session and the generation of its
/// settings ([`SqlConnection::settings`]), and the connection's own switches. Compared on
/// every run instead of formatting the settings or copying the session state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct KeptKey {
    session: String,
    settings: u64,
    fast_paths: bool,
    pushdown: bool,
}

/// A physical plan kept for the next run of its prepared query: valid while the database's
/// committed state is the very snapshot it was built on (any commit, flush or compaction
/// makes a new one), the statement runs outside a transaction, on the same connection with
/// the same settings. Only plans whose every leaf is a Basalt exec holding no dynamic filter
/// are kept ([`rerunnable`]); each run resets their execution state first
/// (`reset_plan_states`). A kept plan holds its snapshot's tables until the next run
/// replaces it.
struct KeptPhysical {
    snapshot: Arc<basalt_storage::DbSnapshot>,
    plan: Arc<dyn ExecutionPlan>,
    /// The task context the plan runs with (the session's settings and functions when it
    /// was built: valid while the key is).
    task: Arc<datafusion::execution::TaskContext>,
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
fn rerunnable(plan: &Arc<dyn ExecutionPlan>) -> bool {
    let mut ok = true;
    let _ = plan.apply(|node| {
        let leaf = node.children().is_empty();
        let fine = match node.downcast_ref::<crate::provider::ScanExec>() {
            Some(scan) => !scan.has_hints(),
            None => !leaf
                || node.downcast_ref::<crate::fused::GroupByExec>().is_some()
                || node.downcast_ref::<crate::entry::EntryFilterExec>().is_some()
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
fn reusable_optimization(plan: &LogicalPlan) -> bool {
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
fn same_columns(
    planned: &[(String, SchemaRef)],
    name: &str,
    now: &basalt_storage::TableSnapshot,
) -> Option<bool> {
    let (_, then) = planned.iter().find(|(n, _)| n == name)?;
    Some(now.schema().full_schema().fields() == then.fields())
}

/// The one-row result of a write statement: how many rows it changed.
fn dml_count(n: u64) -> Result<Vec<RecordBatch>> {
    RecordBatch::try_new(count_schema(), vec![Arc::new(UInt64Array::from(vec![n]))])
        .map(|b| vec![b])
        .map_err(|e| Error::sql(format!("DML result: {e}")))
}

/// DataFusion's runtime environment (memory pool, spill files) that the SQL connections of
/// one database share, built on first use: statements that never reach DataFusion (the
/// direct path) do not pay for it.
#[derive(Debug)]
pub struct SharedRuntime {
    limit: Option<usize>,
    /// Where operators spill (`None`: the system's temporary directory).
    spill: Option<std::path::PathBuf>,
    env: OnceLock<Arc<RuntimeEnv>>,
    /// Iterations a recursive query may run ([`crate::recursion`]).
    max_recursion: usize,
}

impl SharedRuntime {
    /// A runtime environment whose memory pool holds `limit` bytes (`None`: unbounded).
    pub fn new(limit: Option<usize>) -> SharedRuntime {
        SharedRuntime {
            limit,
            spill: None,
            env: OnceLock::new(),
            max_recursion: crate::recursion::DEFAULT_MAX_RECURSION,
        }
    }

    /// Operators spill into `dir` (made when first needed) instead of the system's
    /// temporary directory.
    pub fn with_spill_dir(mut self, dir: std::path::PathBuf) -> SharedRuntime {
        self.spill = Some(dir);
        self
    }

    /// Recursive queries of every connection stop with an error after `n` iterations.
    pub fn with_max_recursion(mut self, n: usize) -> SharedRuntime {
        self.max_recursion = n.max(1);
        self
    }

    fn get(&self) -> Result<Arc<RuntimeEnv>> {
        if let Some(e) = self.env.get() {
            return Ok(e.clone());
        }
        let mut b = datafusion::execution::runtime_env::RuntimeEnvBuilder::new();
        if let Some(limit) = self.limit {
            // Fair with headroom: operators that can spill share what those that cannot
            // leave over, less a quarter kept for the merges that cannot spill.
            use datafusion::execution::memory_pool::TrackConsumersPool;
            let pool = TrackConsumersPool::new(
                crate::pool::HeadroomPool::new(limit),
                std::num::NonZeroUsize::new(5).unwrap_or(std::num::NonZeroUsize::MIN),
            );
            b = b.with_memory_pool(Arc::new(pool));
            // A merge of spilled runs holds a batch of each run it reads, as many as the
            // pool gives it up to this fan-in (merged in passes beyond), leaving the pool
            // to the sorts and merges running beside it: two runs at a time under 256 MiB,
            // up to eight from 512 MiB.
            b = b.with_max_spill_merge_fan_in((limit >> 26).clamp(2, 8));
        }
        if let Some(dir) = &self.spill {
            b = b.with_temp_file_path(dir.clone());
        }
        let env = b.build_arc()?;
        Ok(self.env.get_or_init(|| env).clone())
    }
}

/// One connection's SQL front end.
///
/// DataFusion's session is built on the first statement that needs it (building one costs
/// about half a millisecond: function registries, catalogs, the optimizer's rules); until
/// then statements are parsed with the session's initial settings and the direct path
/// ([`crate::direct`]) runs without it.
pub struct SqlConnection {
    /// DataFusion's session; see [`SqlConnection::ctx`].
    ctx: OnceLock<SessionContext>,
    /// Serialises building `ctx` (the catalogs learn the state they belong to).
    building: Mutex<()>,
    /// The settings the session starts with (and that parsing uses until it exists).
    config: SessionConfig,
    runtime: Arc<SharedRuntime>,
    binding: Arc<Binding>,
    files: Arc<Files>,
    schema: Arc<BasaltSchema>,
    /// Statements of one connection run one at a time.
    gate: tokio::sync::Mutex<()>,
    /// Whether the fast paths are on (they never change results; see [`crate::direct`]).
    fast_paths: Arc<AtomicBool>,
    /// Statements the direct path ran (a statistic for tests and users).
    direct_runs: std::sync::atomic::AtomicU64,
    /// Prepared-query runs that reused a kept physical plan.
    reused_plans: std::sync::atomic::AtomicU64,
    /// Direct runs through a prepared statement's kept [`KeyedTemplate`].
    keyed_runs: std::sync::atomic::AtomicU64,
    /// Direct runs through a prepared write's kept [`KeptWrite`].
    kept_write_runs: std::sync::atomic::AtomicU64,
    /// Direct runs through a prepared insert's kept [`InsertTemplate`].
    insert_template_runs: std::sync::atomic::AtomicU64,
    /// Statements DataFusion planned.
    planned: std::sync::atomic::AtomicU64,
    /// The generation of the session's settings: raised by every `SET` / `RESET` (the only
    /// way they change after [`SqlConnection::new`]); kept plans made under another
    /// generation are planned again.
    settings: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for SqlConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let id = self.ctx.get().map(|c| c.session_id());
        f.debug_struct("SqlConnection").field("session_id", &id).finish()
    }
}

/// One parsed statement: DataFusion's, or Basalt's own DDL.
enum Stmt {
    Df(DfStatement),
    Fts(crate::fts::FtsDdl),
}

/// What a statement produced before streaming.
enum Outcome {
    Batches(Vec<RecordBatch>),
    Stream(SendableRecordBatchStream),
}

impl SqlConnection {
    /// A SQL front end over a connection's session; `partitions` is how many partitions
    /// scans split into (the cores queries may use); `runtime` holds the memory pool and
    /// spill files, shared by the connections of one database.
    pub fn new(
        session: Arc<Mutex<Session>>,
        partitions: usize,
        runtime: Arc<SharedRuntime>,
    ) -> Result<SqlConnection> {
        let binding = Arc::new(Binding::new(session));
        let mut config = SessionConfig::new()
            .with_information_schema(true)
            .with_target_partitions(partitions.max(1));
        let opts = config.options_mut();
        // Storage keeps text as Utf8; DataFusion would otherwise plan VARCHAR as Utf8View.
        opts.sql_parser.map_string_types_to_utf8view = false;
        // Positions in planning errors.
        opts.sql_parser.collect_spans = true;
        if let Some(limit) = runtime.limit {
            // Each sort (one per partition, several per plan: a sort-merge join has two)
            // sets this much aside to merge its spilled runs (DataFusion: 10 MiB); under a
            // small memory limit that alone would exhaust the pool, so all of a plan's
            // partitions of four sorts take at most half the limit.
            let sorts = 8 * partitions.max(1);
            let reserve = opts.execution.sort_spill_reservation_bytes.min(limit / sorts);
            opts.execution.sort_spill_reservation_bytes = reserve;
            opts.execution.sort_in_place_threshold_bytes =
                opts.execution.sort_in_place_threshold_bytes.min(reserve);
            // A merge of spilled runs holds a few batches of each run; under a small limit
            // smaller batches let the merges of all of a plan's sorts fit together (one row
            // per 16 KiB of the limit: 8,192 rows, DataFusion's default, from 128 MiB).
            let rows = opts.execution.batch_size.get().min((limit >> 14).max(1024));
            if let Ok(rows) = datafusion::common::config::ConfigNonZeroUsize::try_new(rows) {
                opts.execution.batch_size = rows;
            }
        }
        let fast_paths = Arc::new(AtomicBool::new(true));
        let files = Arc::new(Files::new(fast_paths.clone()));
        let schema = Arc::new(BasaltSchema::new(binding.clone(), files.clone()));
        Ok(SqlConnection {
            ctx: OnceLock::new(),
            building: Mutex::new(()),
            config,
            runtime,
            binding,
            files,
            schema,
            gate: tokio::sync::Mutex::new(()),
            fast_paths,
            direct_runs: std::sync::atomic::AtomicU64::new(0),
            keyed_runs: std::sync::atomic::AtomicU64::new(0),
            kept_write_runs: std::sync::atomic::AtomicU64::new(0),
            insert_template_runs: std::sync::atomic::AtomicU64::new(0),
            reused_plans: std::sync::atomic::AtomicU64::new(0),
            planned: std::sync::atomic::AtomicU64::new(0),
            settings: std::sync::atomic::AtomicU64::new(0),
        })
    }

    /// DataFusion's session, built on first use.
    fn ctx(&self) -> Result<&SessionContext> {
        if let Some(c) = self.ctx.get() {
            return Ok(c);
        }
        let _b = self.building.lock();
        if let Some(c) = self.ctx.get() {
            return Ok(c);
        }
        let ctx = self.build_ctx()?;
        Ok(self.ctx.get_or_init(|| ctx))
    }

    /// Runs `f` on the session's current settings (the initial ones before the session
    /// exists: only `SET` changes them, and `SET` builds the session).
    fn with_options<R>(&self, f: impl FnOnce(&Arc<datafusion::config::ConfigOptions>) -> R) -> R {
        match self.ctx.get() {
            Some(c) => f(c.state_ref().read().config().options()),
            None => f(self.config.options()),
        }
    }

    fn build_ctx(&self) -> Result<SessionContext> {
        let fast_paths = &self.fast_paths;
        let state = SessionStateBuilder::new()
            .with_config(self.config.clone())
            .with_runtime_env(self.runtime.get()?)
            .with_default_features()
            .with_type_planner(Arc::new(VectorTypes))
            .with_analyzer_rule(Arc::new(crate::checked::CheckedArithmetic::default()))
            .with_physical_optimizer_rule(Arc::new(FuseGroupBy::new(fast_paths.clone())))
            .with_physical_optimizer_rule(Arc::new(crate::vector::VectorTopKRule::new(
                fast_paths.clone(),
            )))
            .with_physical_optimizer_rule(Arc::new(crate::sort::BucketSortRule::new(
                fast_paths.clone(),
            )))
            .with_physical_optimizer_rule(Arc::new(crate::serial::SmallLimitSerial::new(
                fast_paths.clone(),
            )))
            .with_physical_optimizer_rule(Arc::new(crate::recursion::RecursionLimit::new(
                self.runtime.max_recursion,
            )))
            .build();
        let ctx = SessionContext::new_with_state(state);
        for f in crate::functions::all()
            .into_iter()
            .chain(crate::vector::functions())
            .chain(crate::fts::functions())
        {
            ctx.register_udf(f);
        }
        // Replaces DataFusion's `sum`: the same but for integer overflow (see `checked`).
        ctx.register_udaf(crate::checked::CheckedSum::udaf());
        ctx.register_udtf(
            "fts_search",
            Arc::new(crate::fts::FtsSearchFunction::new(self.binding.clone())),
        );
        ctx.register_udtf(
            "vector_topk",
            Arc::new(crate::vector::VectorTopKFunction::new(self.binding.clone())),
        );
        let catalog = ctx.catalog("datafusion").ok_or_else(|| {
            Error::sql("the default catalog 'datafusion' is missing from the session")
        })?;
        catalog.register_schema("public", self.schema.clone())?;
        catalog.register_schema(FILES_SCHEMA, self.files.schema())?;
        // `SELECT … FROM 'data.parquet'`: URL tables, tried after the catalog.
        let urls = Arc::new(crate::files::UrlTables::default());
        let catalogs = Arc::new(datafusion::catalog::DynamicFileCatalog::new(
            ctx.state().catalog_list().clone(),
            urls.clone(),
        ));
        let session_id = ctx.session_id();
        let ctx: SessionContext = ctx
            .into_state_builder()
            .with_session_id(session_id)
            .with_catalog_list(catalogs)
            .build()
            .into();
        urls.set_state(ctx.state_weak_ref());
        self.schema.set_state(ctx.state_weak_ref());
        Ok(ctx)
    }

    /// Turns the fast paths on or off: the direct path to storage for simple statements
    /// and the fused group-by on dictionary codes. Results must not change (for tests and
    /// for comparing plans).
    pub fn set_fast_paths(&self, on: bool) {
        self.fast_paths.store(on, Ordering::Relaxed);
    }

    /// How many statements of this connection the direct path has run.
    pub fn fast_path_statements(&self) -> u64 {
        self.direct_runs.load(Ordering::Relaxed)
    }

    /// How many statements of this connection DataFusion planned (the direct path and the
    /// directly planned DDL do not count).
    pub fn planned_statements(&self) -> u64 {
        self.planned.load(Ordering::Relaxed)
    }

    /// How many prepared-query runs of this connection reused a kept physical plan.
    pub fn reused_physical_plans(&self) -> u64 {
        self.reused_plans.load(Ordering::Relaxed)
    }

    /// How many direct runs of this connection's prepared statements skipped classifying
    /// the statement because its parameters are only `_id` keys (counted in
    /// [`SqlConnection::fast_path_statements`] too).
    pub fn keyed_runs(&self) -> u64 {
        self.keyed_runs.load(Ordering::Relaxed)
    }

    /// How many runs of this connection's prepared writes without parameters went to
    /// storage without classifying the statement again (see [`KeptWrite`]; counted in
    /// [`SqlConnection::fast_path_statements`] too).
    pub fn kept_write_runs(&self) -> u64 {
        self.kept_write_runs.load(Ordering::Relaxed)
    }

    /// How many runs of this connection's prepared `INSERT`s with parameters went to
    /// storage through their kept [`InsertTemplate`] (only the parameters converted; counted
    /// in [`SqlConnection::fast_path_statements`] too).
    pub fn insert_template_runs(&self) -> u64 {
        self.insert_template_runs.load(Ordering::Relaxed)
    }

    /// Runs `stmt` on the direct path if it is one of its shapes ([`crate::direct`]);
    /// `None`: it is not, and DataFusion must run it. `planned`: the tables a prepared
    /// statement's plan scans, with their columns then (a table whose columns changed since
    /// gets the same error as on the planned path).
    fn try_direct(
        &self,
        stmt: &Statement,
        params: &[ScalarValue],
        planned: Option<&[(String, SchemaRef)]>,
    ) -> Result<Option<Vec<RecordBatch>>> {
        let Some(d) = self.classify(stmt, params, planned, None)? else { return Ok(None) };
        self.run_direct(&d).map(Some)
    }

    /// Runs a statement the direct path classified.
    fn run_direct(&self, d: &Direct) -> Result<Vec<RecordBatch>> {
        // Counted once the direct path is certain to run the statement.
        self.direct_runs.fetch_add(1, Ordering::Relaxed);
        match d {
            Direct::Select(s) => return s.run(),
            Direct::Aggregate(a) => return a.run(),
            _ => {}
        }
        let n = self.binding.session().lock().write(|txn, store| d.write(txn, store))?;
        dml_count(n)
    }

    /// [`SqlConnection::try_direct`] for a prepared statement: through its kept
    /// [`KeyedTemplate`] when it has one that applies, else by classifying it (and keeping
    /// the template when one can be made).
    fn try_prepared_direct(
        &self,
        prepared: &Prepared,
        stmt: &Statement,
        params: &[ScalarValue],
    ) -> Result<Option<Vec<RecordBatch>>> {
        if let Some(b) = self.try_keyed(prepared, params)? {
            return Ok(Some(b));
        }
        if params.is_empty()
            && let Some(b) = self.try_kept_write(prepared)?
        {
            return Ok(Some(b));
        }
        if !params.is_empty()
            && let Some(b) = self.try_insert_template(prepared, params)?
        {
            return Ok(Some(b));
        }
        let mut template = None;
        let want = (!params.is_empty() && prepared.insert.get().is_none()).then_some(&mut template);
        let Some(d) = self.classify(stmt, params, Some(&prepared.scans), want)? else {
            return Ok(None);
        };
        if !params.is_empty() {
            let _ = prepared.insert.set(template);
        }
        if params.is_empty() && d.writes() {
            // This run runs what it classified; the first one keeps it for later runs.
            let r = self.run_direct(&d);
            if let Some(lower_idents) = self.lower_idents() {
                let _ = prepared.kept_write.set(KeptWrite { lower_idents, direct: d });
            }
            return r.map(Some);
        }
        if !params.is_empty()
            && prepared.keyed.get().is_none()
            && let Some(lower_idents) = self.lower_idents()
            && let Some(t) = KeyedTemplate::new(stmt, &d, lower_idents)
        {
            let _ = prepared.keyed.set(t);
        }
        self.run_direct(&d).map(Some)
    }

    /// Runs a prepared statement through its kept [`KeyedTemplate`]: `None` when it has
    /// none, or when anything classifying looks at differs from when it was kept (fast
    /// paths off, identifier folding, the table's columns, an external table of the same
    /// name, a parameter value of another kind), and then the statement is classified.
    fn try_keyed(
        &self,
        prepared: &Prepared,
        params: &[ScalarValue],
    ) -> Result<Option<Vec<RecordBatch>>> {
        let Some(t) = prepared.keyed.get() else { return Ok(None) };
        let Some(filter) = t.filter(params) else { return Ok(None) };
        let Some(now) = self.still_applies(prepared, t.lower_idents(), t.table())? else {
            return Ok(None);
        };
        self.direct_runs.fetch_add(1, Ordering::Relaxed);
        self.keyed_runs.fetch_add(1, Ordering::Relaxed);
        if !t.writes() {
            return t.read(&now, &filter).map(Some);
        }
        let n = self.binding.session().lock().write(|txn, store| t.write(&filter, txn, store))?;
        dml_count(n).map(Some)
    }

    /// Runs a prepared `INSERT` with parameters through its kept [`InsertTemplate`]: `None`
    /// when it has none, when a parameter's value does not convert (or is NULL for a NOT
    /// NULL column), or when anything classifying looked at differs from when it was kept
    /// (see [`SqlConnection::still_applies`]); the statement is then classified.
    fn try_insert_template(
        &self,
        prepared: &Prepared,
        params: &[ScalarValue],
    ) -> Result<Option<Vec<RecordBatch>>> {
        let Some(Some(t)) = prepared.insert.get() else { return Ok(None) };
        if self.still_applies(prepared, t.lower_idents(), t.table())?.is_none() {
            return Ok(None);
        }
        let Some(d) = t.direct(params) else { return Ok(None) };
        self.insert_template_runs.fetch_add(1, Ordering::Relaxed);
        self.run_direct(&d).map(Some)
    }

    /// Runs a prepared write without parameters through its [`KeptWrite`]: `None` when it
    /// has none, or when anything classifying looked at differs from when it was kept (fast
    /// paths off, identifier folding, the table's columns, an external table of the same
    /// name), and then the statement is classified again.
    fn try_kept_write(&self, prepared: &Prepared) -> Result<Option<Vec<RecordBatch>>> {
        let Some(k) = prepared.kept_write.get() else { return Ok(None) };
        if self.still_applies(prepared, k.lower_idents, k.direct.table())?.is_none() {
            return Ok(None);
        }
        self.kept_write_runs.fetch_add(1, Ordering::Relaxed);
        self.run_direct(&k.direct).map(Some)
    }

    /// The table `name` as this session reads it now, when what a prepared statement kept
    /// from classifying (under identifier folding `lower_idents`, against the columns
    /// `prepared.scans` records) still holds: fast paths on, the same folding, no external
    /// table of that name, the same columns. `None` otherwise.
    fn still_applies(
        &self,
        prepared: &Prepared,
        lower_idents: bool,
        name: &str,
    ) -> Result<Option<Arc<basalt_storage::TableSnapshot>>> {
        if !self.fast_paths.load(Ordering::Relaxed)
            || self.lower_idents() != Some(lower_idents)
            || self.schema.is_external(name)
        {
            return Ok(None);
        }
        let view = self.binding.session().lock().read_view()?;
        let Ok(now) = view.table(name) else { return Ok(None) };
        Ok((same_columns(&prepared.scans, name, &now) == Some(true)).then_some(now))
    }

    /// Whether unquoted identifiers fold to lower case, when unqualified names resolve to
    /// Basalt's tables (`None`: under another default catalog or schema they do not).
    fn lower_idents(&self) -> Option<bool> {
        self.with_options(|o| {
            (o.catalog.default_catalog == "datafusion" && o.catalog.default_schema == "public")
                .then_some(o.sql_parser.enable_ident_normalization)
        })
    }

    /// The direct path's form of `stmt` with `params` (`None`: the direct path does not
    /// take it); `planned` as in [`SqlConnection::try_direct`].
    /// When `template` is given and the statement is an `INSERT … VALUES` with parameters
    /// the direct path takes, its [`InsertTemplate`] is put there.
    fn classify(
        &self,
        stmt: &Statement,
        params: &[ScalarValue],
        planned: Option<&[(String, SchemaRef)]>,
        template: Option<&mut Option<InsertTemplate>>,
    ) -> Result<Option<Direct>> {
        if !self.fast_paths.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if !matches!(
            stmt,
            Statement::Query(_)
                | Statement::Insert(_)
                | Statement::Update(_)
                | Statement::Delete(_)
        ) {
            return Ok(None);
        }
        let view = self.binding.session().lock().read_view()?;
        let table = |name: &str| {
            if self.schema.is_external(name) { None } else { view.table(name).ok() }
        };
        // Unqualified names resolve to Basalt's tables only under the default schema.
        let Some(lower_idents) = self.lower_idents() else { return Ok(None) };
        let env = direct::Env { lower_idents, params, table: &table };
        let Some(d) = direct::classify(stmt, &env) else { return Ok(None) };
        if let Some(slot) = template {
            *slot = InsertTemplate::new(stmt, &env);
        }
        if let Some(planned) = planned {
            let name = d.table();
            let now = view.table(name)?;
            let Some(same) = same_columns(planned, name, &now) else {
                return Ok(None);
            };
            if !same {
                return Err(Error::sql(format!(
                    "table '{name}' changed since this statement was planned; prepare it again"
                )));
            }
        }
        Ok(Some(d))
    }

    /// Turns filter pushdown into scans on or off (results must not change; for tests).
    pub fn set_pushdown(&self, on: bool) {
        self.binding.set_pushdown(on);
    }

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
            Some(Stmt::Fts(_)) => {
                return Err(Error::unsupported("full-text index DDL cannot be prepared"));
            }
            None => return Err(Error::sql("empty statement")),
        };
        let raw = match &stmt {
            DfStatement::Statement(s) => Some(Arc::new(s.as_ref().clone())),
            _ => None,
        };
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
                })
            }
        }
    }

    /// Prepares `sql` without entering the async runtime when the direct path takes it as
    /// it is (no placeholders): `None` otherwise (or while another statement of this
    /// connection runs), and then [`SqlConnection::prepare`] prepares it.
    pub fn prepare_direct(&self, sql: &str) -> Result<Option<Prepared>> {
        let Ok(_g) = self.gate.try_lock() else { return Ok(None) };
        let stmts = self.parse(sql)?;
        self.prepare_for_direct(&stmts)
    }

    /// The unplanned [`Prepared`] of a lone statement the direct path takes.
    fn prepare_for_direct(&self, stmts: &[Stmt]) -> Result<Option<Prepared>> {
        let [Stmt::Df(DfStatement::Statement(stmt))] = stmts else { return Ok(None) };
        let Some(d) = self.classify(stmt, &[], None, None)? else { return Ok(None) };
        let name = d.table().to_string();
        let schema =
            self.binding.session().lock().read_view()?.table(&name)?.schema().full_schema().clone();
        Ok(Some(Prepared {
            plan: Arc::new(OnceLock::new()),
            stmt: Some(Arc::new(stmt.as_ref().clone())),
            scans: Arc::new(vec![(name, schema)]),
            optimized: None,
            keyed: Arc::new(OnceLock::new()),
            kept_write: Arc::new(OnceLock::new()),
            insert: Arc::new(OnceLock::new()),
        }))
    }

    /// Runs `sql` without entering the async runtime when it is one statement the direct
    /// path takes, or one transaction-control statement (`BEGIN`, `COMMIT`, `ROLLBACK`):
    /// `None` otherwise (or while another statement of this connection runs), and then
    /// [`SqlConnection::execute`] runs it.
    pub fn execute_direct(&self, sql: &str) -> Result<Option<Vec<RecordBatch>>> {
        let Ok(_g) = self.gate.try_lock() else { return Ok(None) };
        match self.parse(sql)?.as_slice() {
            [Stmt::Df(DfStatement::Statement(stmt))] => {
                // Transaction control needs neither DataFusion nor the runtime.
                if let Some(r) = self.transaction_control(stmt) {
                    return r.map(|()| Some(Vec::new()));
                }
                self.try_direct(stmt, &[], None)
            }
            _ => Ok(None),
        }
    }

    /// Runs a prepared statement on the direct path without entering the async runtime:
    /// `None` when it needs DataFusion (or another statement of this connection is
    /// running), and then [`SqlConnection::execute_prepared`] runs it. The result is the
    /// same either way; this saves simple statements the cost of building and moving the
    /// planner's future.
    pub fn execute_prepared_direct(
        &self,
        prepared: &Prepared,
        params: &[ScalarValue],
    ) -> Result<Option<Vec<RecordBatch>>> {
        let Ok(_g) = self.gate.try_lock() else { return Ok(None) };
        match &prepared.stmt {
            Some(stmt) => self.try_prepared_direct(prepared, stmt, params),
            None => Ok(None),
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
        if let Some(cache) = &prepared.optimized
            && params.is_empty()
        {
            return match Box::pin(self.run_optimized(&plan, cache)).await {
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
    async fn run_optimized(
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

    /// Rewrites a statement and plans it with one copy of the session state.
    ///
    /// DataFusion's futures are large (kilobytes each): this module awaits them boxed, so
    /// the futures of the statements that never reach them (DDL, the direct path) stay
    /// small and are not copied kilobytes at a time as they move through the runtime.
    async fn plan(&self, stmt: DfStatement) -> Result<LogicalPlan> {
        self.planned.fetch_add(1, Ordering::Relaxed);
        let state = self.ctx()?.state();
        let stmt = Box::pin(prepare_statement(&self.binding, &self.files, &state, stmt)).await?;
        Ok(Box::pin(state.statement_to_plan(stmt)).await?)
    }

    async fn run(&self, stmt: DfStatement, stream: bool) -> Result<Outcome> {
        if let DfStatement::Statement(s) = &stmt {
            if let Some(plan) = self.plan_ddl_directly(s)? {
                return self.run_plan(plan, stream).await;
            }
            match s.as_ref() {
                Statement::StartTransaction { .. }
                | Statement::Commit { .. }
                | Statement::Rollback { savepoint: None, .. } => {
                    self.transaction_control(s).unwrap_or(Ok(()))?;
                    return Ok(Outcome::Batches(Vec::new()));
                }
                Statement::Rollback { savepoint: Some(_), .. } | Statement::Savepoint { .. } => {
                    return Err(Error::unsupported("savepoints"));
                }
                Statement::AlterTable(a) => {
                    Box::pin(self.alter_table(&a.name, &a.operations, a.if_exists)).await?;
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
    fn transaction_control(&self, s: &Statement) -> Option<Result<()>> {
        let r = match s {
            Statement::StartTransaction { .. } => self.binding.session().lock().begin(false),
            Statement::Commit { .. } => self.binding.session().lock().commit(),
            Statement::Rollback { savepoint: None, .. } => self.binding.session().lock().rollback(),
            _ => return None,
        };
        Some(r.map_err(Into::into))
    }

    /// Plans a plain `CREATE TABLE` (a column list of types with `NULL` / `NOT NULL`, no
    /// query, no other clause) and a `DROP TABLE` / `DROP VIEW` of one name without the
    /// session: the logical plan DataFusion's planner builds for them, minus the copy of
    /// the session state and the resolution of the statement's names against the catalog
    /// and the file system (most of a DDL statement's time). `None` for anything else, or
    /// with the fast paths off: DataFusion plans it.
    fn plan_ddl_directly(&self, s: &Statement) -> Result<Option<LogicalPlan>> {
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

    /// Runs a planned statement; when a hash join's build side did not fit the memory
    /// limit, runs it once more with sort-merge joins, which spill (see
    /// [`hash_join_out_of_memory`]).
    async fn run_plan(&self, plan: LogicalPlan, stream: bool) -> Result<Outcome> {
        let again = self.runtime.limit.is_some().then(|| plan.clone());
        match Box::pin(self.run_plan_once(plan, stream)).await {
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
    async fn run_without_hash_joins(&self, plan: LogicalPlan, stream: bool) -> Result<Outcome> {
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

    async fn run_plan_once(&self, plan: LogicalPlan, stream: bool) -> Result<Outcome> {
        match plan {
            LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) => {
                self.no_ddl_in_transaction()?;
                if c.or_replace && c.if_not_exists {
                    return Err(Error::sql("'IF NOT EXISTS' cannot coexist with 'REPLACE'"));
                }
                if c.temporary {
                    return Err(Error::unsupported("temporary tables"));
                }
                if !c.constraints.is_empty() {
                    return Err(Error::unsupported(
                        "PRIMARY KEY / UNIQUE constraints (Basalt does not enforce them; every \
                         row has its own _id)",
                    ));
                }
                if !c.column_defaults.is_empty() {
                    return Err(Error::unsupported("column DEFAULT values"));
                }
                let name = plain_table(&c.name)?;
                let schema = storable_schema(c.input.schema().as_arrow());
                let store = self.binding.session().lock().store().clone();
                let exists = store.snapshot().table(&name).is_ok();
                if exists && c.if_not_exists {
                    return Ok(Outcome::Batches(Vec::new()));
                }
                let has_rows = !matches!(
                    c.input.as_ref(),
                    LogicalPlan::EmptyRelation(e) if !e.produce_one_row
                );
                if !has_rows {
                    store.create_table_with(&name, &schema, c.or_replace)?;
                    return Ok(Outcome::Batches(Vec::new()));
                }
                if exists && !c.or_replace {
                    return Err(basalt_storage::Error::TableExists { table: name }.into());
                }
                // CREATE TABLE … AS: fill a temporary table, then rename it into place in one
                // manifest install, so the new table appears complete or not at all (and the
                // query may read the table it replaces).
                let tmp = store.create_staging_table(&schema)?;
                let r = match Box::pin(self.insert_plan(&tmp, c.input.as_ref().clone())).await {
                    Ok(_) => store.rename_table(&tmp, &name, c.or_replace).map_err(Error::from),
                    Err(e) => Err(e),
                };
                if r.is_err() {
                    let _ = store.drop_table(&tmp);
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
    async fn create_view(
        &self,
        cv: &datafusion::sql::sqlparser::ast::CreateView,
        stmt: DfStatement,
    ) -> Result<()> {
        self.no_ddl_in_transaction()?;
        if cv.materialized || cv.temporary {
            return Err(Error::unsupported("materialized and temporary views"));
        }
        let name = rewrite::table_name_of(&cv.name, self.fold_case())
            .ok_or_else(|| Error::sql(format!("CREATE VIEW: bad view name {}", cv.name)))?;
        let store = self.binding.session().lock().store().clone();
        let snap = store.snapshot();
        if cv.if_not_exists && snap.views().contains_key(&name) {
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
        Ok(store.create_view(&name, &sql, cv.or_replace)?)
    }

    /// Whether unquoted identifiers fold to lower case in this session.
    fn fold_case(&self) -> bool {
        self.with_options(|o| o.sql_parser.enable_ident_normalization)
    }

    fn parse(&self, sql: &str) -> Result<Vec<Stmt>> {
        self.with_options(|options| parse_pieces(options, sql))
    }

    async fn run_one(&self, stmt: Stmt, stream: bool) -> Result<Outcome> {
        match stmt {
            Stmt::Df(s) => self.run(s, stream).await,
            Stmt::Fts(d) => {
                self.no_ddl_in_transaction()?;
                let store = self.binding.session().lock().store().clone();
                crate::fts::run_ddl(&store, &d)?;
                Ok(Outcome::Batches(Vec::new()))
            }
        }
    }

    /// `DROP TABLE` / `DROP VIEW`: `IF EXISTS` turns "not found" into nothing done.
    fn drop_object(
        &self,
        name: &TableReference,
        if_exists: bool,
        drop: impl FnOnce(&basalt_storage::Store, &str) -> basalt_storage::Result<()>,
    ) -> Result<Outcome> {
        self.no_ddl_in_transaction()?;
        let name = plain_table(name)?;
        let store = self.binding.session().lock().store().clone();
        match drop(&store, &name) {
            Ok(()) => Ok(Outcome::Batches(Vec::new())),
            Err(
                basalt_storage::Error::TableNotFound { .. }
                | basalt_storage::Error::ViewNotFound { .. },
            ) if if_exists => Ok(Outcome::Batches(Vec::new())),
            Err(e) => Err(e.into()),
        }
    }

    fn no_ddl_in_transaction(&self) -> Result<()> {
        if self.binding.session().lock().in_transaction() {
            return Err(Error::unsupported(
                "DDL inside a transaction (COMMIT or ROLLBACK first); DDL commits on its own",
            ));
        }
        Ok(())
    }

    /// Plans and runs a query (or EXPLAIN, SHOW, SET, …) against a pinned view.
    async fn query(&self, plan: LogicalPlan, stream: bool) -> Result<Outcome> {
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
    async fn physical(&self, plan: LogicalPlan) -> Result<Arc<dyn ExecutionPlan>> {
        self.binding.pin()?;
        let _unpin = PinnedView(&self.binding);
        let df = Box::pin(self.ctx()?.execute_logical_plan(plan)).await?;
        Ok(Box::pin(df.create_physical_plan()).await?)
    }

    /// Runs a DML plan as one write statement: all of it or (on error) none of it.
    async fn write_statement(&self, plan: LogicalPlan) -> Result<Vec<RecordBatch>> {
        let stmt = StatementGuard::begin(&self.binding)?;
        let r = async {
            let physical = self.physical(plan.clone()).await?;
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
    async fn name_failing_column(&self, plan: &LogicalPlan, e: Error) -> Error {
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
    async fn runs(&self, plan: LogicalPlan) -> bool {
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

    /// Inserts the rows of `input` into native table `name` as one write statement.
    async fn insert_plan(&self, name: &str, input: LogicalPlan) -> Result<u64> {
        let stmt = StatementGuard::begin(&self.binding)?;
        let r = async {
            let physical = self.physical(input).await?;
            let t = self.binding.view()?.table(name)?;
            let user = t.schema().user_schema();
            let physical = rename_to(physical, &user)?;
            let exec: Arc<dyn ExecutionPlan> = Arc::new(DmlExec::new(
                name,
                DmlKind::Insert { user_schema: user },
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

    async fn alter_table(
        &self,
        name: &ObjectName,
        ops: &[AlterTableOperation],
        if_exists: bool,
    ) -> Result<()> {
        self.no_ddl_in_transaction()?;
        let table = rewrite::table_name_of(name, self.fold_case())
            .ok_or_else(|| Error::sql(format!("ALTER TABLE: bad table name {name}")))?;
        let store = self.binding.session().lock().store().clone();
        if store.snapshot().table(&table).is_err() {
            if if_exists {
                return Ok(());
            }
            return Err(basalt_storage::Error::TableNotFound { table }.into());
        }
        let mut changes = Vec::new();
        for op in ops {
            changes.push(match op {
                AlterTableOperation::AddColumn { column_def, if_not_exists, .. } => {
                    let field = self.column_field(&column_def.to_string()).await?;
                    let snap = store.snapshot();
                    let exists = snap
                        .table(&table)
                        .map(|t| t.schema().index_of(field.name()).is_some())
                        .unwrap_or(false);
                    if exists && *if_not_exists {
                        continue;
                    }
                    AlterColumn::Add(field)
                }
                AlterTableOperation::DropColumn { column_names, if_exists, .. } => {
                    for c in column_names {
                        let c = rewrite::ident_name(c, self.fold_case());
                        let snap = store.snapshot();
                        let exists = snap
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
                    store.rename_table(&table, &to, false)?;
                    return Ok(());
                }
                AlterTableOperation::RenameColumn { old_column_name, new_column_name } => {
                    AlterColumn::Rename {
                        from: rewrite::ident_name(old_column_name, self.fold_case()),
                        to: rewrite::ident_name(new_column_name, self.fold_case()),
                    }
                }
                other => {
                    return Err(Error::unsupported(format!(
                        "ALTER TABLE {other} (Basalt supports ADD / DROP / RENAME COLUMN)"
                    )));
                }
            });
        }
        if changes.len() > 1 {
            return Err(Error::unsupported(
                "several changes in one ALTER TABLE (run one ALTER TABLE per change)",
            ));
        }
        for c in changes {
            store.alter_table(&table, &c)?;
        }
        Ok(())
    }

    /// The Arrow field a SQL column definition describes (type, NOT NULL), planned by
    /// DataFusion with Basalt's type planner.
    async fn column_field(&self, column_def: &str) -> Result<Field> {
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

/// A write statement in progress. Dropping it unfinished — an error, a panic, or the caller
/// dropping the future of an async call — undoes everything the statement did and releases
/// the writer lock, so the connection is never left inside a half-done statement.
struct StatementGuard<'a> {
    binding: &'a Binding,
    stmt: Option<basalt_storage::WriteStatement>,
}

impl<'a> StatementGuard<'a> {
    fn begin(binding: &'a Binding) -> Result<StatementGuard<'a>> {
        let stmt = binding.session().lock().begin_write_statement()?;
        Ok(StatementGuard { binding, stmt: Some(stmt) })
    }

    /// Ends the statement: commit (or keep, inside a transaction) on success, undo otherwise.
    fn finish(mut self, success: bool) -> Result<()> {
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
struct PinnedView<'a>(&'a Binding);

impl Drop for PinnedView<'_> {
    fn drop(&mut self) {
        self.0.unpin();
    }
}

/// Splits SQL text into Basalt's full-text index DDL and DataFusion's statements, parsed.
fn parse_pieces(options: &datafusion::config::ConfigOptions, sql: &str) -> Result<Vec<Stmt>> {
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

/// A one-part (or `public.`-qualified) table name.
fn plain_table(name: &TableReference) -> Result<String> {
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

/// Casts and renames a plan's columns to a table's user schema (by position).
fn rename_to(input: Arc<dyn ExecutionPlan>, user: &Schema) -> Result<Arc<dyn ExecutionPlan>> {
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

fn count_of(batches: &[RecordBatch]) -> u64 {
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
fn builds_hash_table(plan: &Arc<dyn ExecutionPlan>) -> bool {
    use datafusion::physical_plan::joins::HashJoinExec;
    plan.downcast_ref::<HashJoinExec>().is_some()
        || plan.downcast_ref::<crate::join::DictJoinExec>().is_some()
        || plan.downcast_ref::<crate::fused::GroupByExec>().is_some_and(|g| g.over_join())
        || plan.children().into_iter().any(builds_hash_table)
}

/// Whether `e` is the memory pool refusing a hash join's build side, DataFusion's or a
/// dictionary join's (neither spills; DataFusion's sort-merge joins do, through their
/// sorts).
fn hash_join_out_of_memory(e: &Error) -> bool {
    matches!(e, Error::Execution { message }
        if message.contains("Resources exhausted")
            && (message.contains("HashJoinInput")
                || message.contains(crate::join::BUILD_CONSUMER)))
}

async fn collect(mut s: SendableRecordBatchStream) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::new();
    while let Some(b) = s.next().await {
        out.push(b?);
    }
    Ok(out)
}

fn batches_stream(b: Vec<RecordBatch>) -> SendableRecordBatchStream {
    let schema = b.first().map(|b| b.schema()).unwrap_or_else(|| Arc::new(Schema::empty()));
    Box::pin(datafusion::physical_plan::stream::RecordBatchStreamAdapter::new(
        schema,
        futures::stream::iter(b.into_iter().map(Ok)),
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use basalt_storage::{MemFs, Store, StoreOptions};

    use super::*;

    fn connection() -> SqlConnection {
        let store = Store::open(
            Arc::new(MemFs::new()),
            Path::new("/db"),
            Path::new(":memory:"),
            StoreOptions::default(),
        )
        .unwrap();
        let session = Session::new(Arc::new(store));
        SqlConnection::new(Arc::new(Mutex::new(session)), 1, Arc::new(SharedRuntime::new(None)))
            .unwrap()
    }

    /// The direct DDL plans are exactly what DataFusion plans for the same statements, and
    /// every statement with more than the direct path understands is left to DataFusion.
    #[test]
    fn plain_ddl_is_planned_directly_and_like_datafusion() {
        let c = connection();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let parse = |sql: &str| {
            let DfStatement::Statement(s) =
                parse_one(c.ctx().unwrap().state().config_options(), sql).unwrap()
            else {
                panic!("{sql}: not a plain statement")
            };
            s
        };
        for sql in [
            "CREATE TABLE t (k BIGINT)",
            "CREATE TABLE IF NOT EXISTS \"Mixed\" (a INT NOT NULL, b VARCHAR NULL, v VECTOR(3))",
            "CREATE OR REPLACE TABLE public.t (a DOUBLE, b BOOLEAN, c TIMESTAMP, d DECIMAL(10, 2))",
            "CREATE TABLE t (Upper TEXT, a FLOAT[4])",
            "DROP TABLE t",
            "DROP TABLE IF EXISTS public.\"T\"",
            "DROP VIEW IF EXISTS v",
        ] {
            let s = parse(sql);
            let direct = c.plan_ddl_directly(&s).unwrap().unwrap_or_else(|| panic!("{sql}"));
            let state = c.ctx().unwrap().state();
            let planned = rt.block_on(state.statement_to_plan(DfStatement::Statement(s))).unwrap();
            assert_eq!(direct, planned, "{sql}");
        }
        for sql in [
            "CREATE TABLE t (a INT PRIMARY KEY)",
            "CREATE TABLE t (a INT DEFAULT 3)",
            "CREATE TABLE t (a INT, UNIQUE (a))",
            "CREATE TABLE t AS SELECT 1 AS a",
            "CREATE TABLE t (a INT) AS SELECT 1",
            "CREATE TEMPORARY TABLE t (a INT)",
            "CREATE EXTERNAL TABLE t STORED AS CSV LOCATION 'x.csv'",
            "CREATE TABLE t (a INT) WITH (x = 1)",
            "CREATE TABLE t (a INT) COMMENT 'c'",
            "DROP TABLE a, b",
            "DROP TABLE a CASCADE",
            "DROP SCHEMA s",
        ] {
            let s = match parse_one(c.ctx().unwrap().state().config_options(), sql) {
                Ok(DfStatement::Statement(s)) => s,
                _ => continue, // not even a plain statement to DataFusion's parser
            };
            assert!(c.plan_ddl_directly(&s).unwrap().is_none(), "{sql}");
        }
        // A bad type is the error DataFusion gives.
        let s = parse("CREATE TABLE t (v VECTOR(0))");
        let e = c.plan_ddl_directly(&s).unwrap_err().to_string();
        assert!(e.contains("VECTOR needs one dimension"), "{e}");
        // Fast paths off: DataFusion plans everything.
        c.set_fast_paths(false);
        assert!(c.plan_ddl_directly(&parse("DROP TABLE t")).unwrap().is_none());
    }
}
