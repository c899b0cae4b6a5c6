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
//!
//! This file holds [`SqlConnection`] and its session; `dispatch` runs statements, `ddl`
//! runs DDL and the plans DataFusion would run in memory, `prepared` keeps prepared
//! statements and their plans, `direct_path` hands statements to the direct path,
//! `upsert` runs INSERTs with a conflict clause, `dml_query` DELETEs and UPDATEs with
//! subqueries, and `runtime` is the runtime a database's connections share.

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

use basalt_storage::{AlterColumn, IndexKind, NewIndex, OnConflict, Session};

use crate::binding::Binding;
use crate::catalog::BasaltSchema;
use crate::direct::{self, Direct, InsertTemplate, KeyedTemplate};
use crate::error::{Error, Result};
use crate::exec::dml::{DmlExec, DmlKind, count_schema};
use crate::files::{FILES_SCHEMA, Files};
use crate::parse::{parse, parse_one, storable_schema};
use crate::prepare::prepare_statement;
use crate::rewrite;
use crate::rules::dictionary::FuseGroupBy;
use crate::types::VectorTypes;

mod ddl;
mod direct_path;
mod dispatch;
mod dml_query;
mod prepared;
mod runtime;
mod upsert;

pub use self::prepared::Prepared;
pub use self::runtime::SharedRuntime;
use self::{dispatch::*, prepared::*};

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
    /// The `DEFAULT` clauses of the `CREATE TABLE` being run, as SQL text by column: taken
    /// from its syntax tree (DataFusion's plan carries them only as planned expressions).
    create_defaults: Mutex<Vec<(String, String)>>,
    /// The CHECK constraints of the `CREATE TABLE` being run (taken out of its syntax tree:
    /// DataFusion's planner refuses them).
    create_checks: Mutex<Vec<basalt_storage::NewCheck>>,
    /// On while a statement that failed to plan a subquery is planned and run again with
    /// subqueries as nested loops (see `rules::subquery_fallback`).
    subquery_fallback: Arc<AtomicBool>,
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
    /// SQLite's `REINDEX [name]` (the name as given, folded like identifiers).
    Reindex(Option<String>),
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
        // Nesting as deep as SQLite's default limit (DataFusion's is 50 levels, which
        // generated filters with parentheses exceed); the parser grows its stack as it
        // goes, and `depth` bounds what later passes walk.
        if let Ok(limit) =
            datafusion::config::ConfigNonZeroUsize::try_new(crate::depth::MAX_EXPR_DEPTH)
        {
            opts.sql_parser.recursion_limit = limit;
        }
        // A hash join hands its probe-side scan the build keys as a list (storage tests
        // rows against it by one bitmap or sorted lookup, and drops non-members before
        // decoding the other columns) up to this many distinct keys a partition, instead
        // of a hash-table lookup storage cannot read (DataFusion: 150). A list of key
        // pairs reaches storage as one list per column, each shorter than the pairs
        // (TPC-H Q20: 8.5K pairs of 2.1K parts).
        opts.optimizer.hash_join_inlist_pushdown_max_distinct_values = 16384;
        // The key count above bounds the list; DataFusion's byte bound (128 KiB) measures the
        // key arrays' buffers, which for a build side of a few rows sliced out of a decoded
        // block hold the whole block, and would turn short lists into hash lookups.
        opts.optimizer.hash_join_inlist_pushdown_max_size = 64 << 20;
        // A join collects its build side into one shared hash table (no repartition of
        // either side) up to 2M rows / 32 MiB divided by the partitions, instead of
        // DataFusion's 128K rows / 1 MiB: on few cores, hashing both sides into
        // partitions costs more than building one table serially (TPC-H SF1 on 2 cores:
        // Q5 87 → 61 ms, Q21 121 → 94 ms). On 16 or more partitions it is DataFusion's.
        let parts = partitions.max(1);
        opts.optimizer.hash_join_single_partition_threshold_rows =
            (opts.optimizer.hash_join_single_partition_threshold_rows).max((2 << 20) / parts);
        opts.optimizer.hash_join_single_partition_threshold =
            (opts.optimizer.hash_join_single_partition_threshold).max((32 << 20) / parts);
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
            create_defaults: Mutex::new(Vec::new()),
            create_checks: Mutex::new(Vec::new()),
            subquery_fallback: Arc::default(),
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
        let fallback = crate::rules::subquery_fallback::SubqueryFallback::new(
            self.binding.clone(),
            self.subquery_fallback.clone(),
        );
        let fallback_state = fallback.state_slot();
        let state = SessionStateBuilder::new()
            .with_config(self.config.clone())
            .with_runtime_env(self.runtime.get()?)
            .with_default_features()
            .with_type_planner(Arc::new(VectorTypes))
            .with_analyzer_rule(Arc::new(crate::rules::checked::CheckedArithmetic::default()))
            .with_analyzer_rule(Arc::new(crate::rules::decimal::DecimalArithmetic::default()))
            .with_analyzer_rule(Arc::new(crate::rules::sum_shift::SumShift::default()))
            .with_analyzer_rule(Arc::new(crate::rules::in_list_nulls::InListNulls))
            // Before the subquery rewrites: when on, it leaves them no subquery to rewrite.
            .with_analyzer_rule(Arc::new(fallback))
            .with_analyzer_rule(Arc::new(crate::rules::in_subquery::InSubqueryValue))
            .with_analyzer_rule(Arc::new(crate::rules::scalar_subquery::CorrelatedScalarSubquery))
            // Before `JoinOrder`: copies of a join still spelled alike are shared, and the
            // shared plan is then ordered once.
            .with_optimizer_rule(Arc::new(crate::rules::share_subplans::ShareSubplans::new(
                fast_paths.clone(),
            )))
            .with_optimizer_rule(Arc::new(crate::rules::join_order::JoinOrder::new(
                fast_paths.clone(),
            )))
            .with_optimizer_rule(Arc::new(crate::rules::dml_filters::InlineDmlCommonExprs))
            .with_query_planner(Arc::new(crate::rules::share_subplans::BasaltQueryPlanner))
            .with_physical_optimizer_rule(Arc::new(FuseGroupBy::new(fast_paths.clone())))
            .with_physical_optimizer_rule(Arc::new(crate::rules::join_keys::JoinKeysThrough::new(
                fast_paths.clone(),
            )))
            .with_physical_optimizer_rule(Arc::new(crate::rules::vector_topk::VectorTopKRule::new(
                fast_paths.clone(),
            )))
            .with_physical_optimizer_rule(Arc::new(crate::rules::bucket_sort::BucketSortRule::new(
                fast_paths.clone(),
            )))
            .with_physical_optimizer_rule(Arc::new(crate::rules::serial::SmallLimitSerial::new(
                fast_paths.clone(),
            )))
            .with_physical_optimizer_rule(Arc::new(crate::rules::recursion::RecursionLimit::new(
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
        ctx.register_udaf(crate::rules::checked::CheckedSum::udaf());
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
        *fallback_state.lock() = Some(ctx.state_weak_ref());
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

    /// Turns filter pushdown into scans on or off (results must not change; for tests).
    pub fn set_pushdown(&self, on: bool) {
        self.binding.set_pushdown(on);
    }
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
