//! The `TableProvider` over native Basalt tables and its scan exec.
//!
//! A [`NativeTable`] holds no data and no snapshot: it names a table and the connection it
//! reads through ([`Binding`]). The snapshot is bound when a statement's physical plan is
//! built (`scan`), from the view the statement pinned, so cached logical plans and views
//! never read stale data, and every scan of one statement reads the same state.
//!
//! [`ScanExec`] splits the table's scan units (row groups, then the memtable) into
//! contiguous groups, one per partition, and decodes them lazily on the partition's task.
//! Filters that storage evaluates exactly (see [`crate::pushdown`]) are pushed as `Exact`
//! and run on encoded data; the others are pushed as `Inexact` (zone-map pruning with a
//! relaxed predicate) and DataFusion filters again. Row groups ruled out by zone maps are
//! dropped at planning time, so `EXPLAIN` shows how many remain. Filters parents push down
//! after planning (DataFusion's dynamic filters of hash joins and TopK, shown as
//! `pruning_hints`) skip units by zone maps and, outside a limit, filter rows in storage
//! where they convert; their parents still apply them.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session as DfSession, TableProvider};
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DataFusionError, Result, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, ExprSchemable, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use basalt_storage::{ID_COLUMN, Predicate, ScanUnit, TableSnapshot};

use crate::binding::{Binding, storage_err};
use crate::dml::{DmlExec, DmlKind};
use crate::pushdown;

/// A native table as DataFusion sees it: `_id` first, then the user columns.
#[derive(Debug)]
pub struct NativeTable {
    name: String,
    schema: SchemaRef,
    /// The columns an INSERT stores (`schema` without `_id`).
    user: SchemaRef,
    binding: Arc<Binding>,
}

impl NativeTable {
    /// A provider for `name`, with the schema the table has now.
    pub fn new(name: &str, snapshot: &TableSnapshot, binding: Arc<Binding>) -> NativeTable {
        NativeTable {
            name: name.to_string(),
            schema: snapshot.schema().full_schema().clone(),
            user: snapshot.schema().user_schema(),
            binding,
        }
    }

    /// The table's snapshot in the statement's view; fails if its columns changed since the
    /// statement was planned.
    fn bind(&self) -> Result<Arc<TableSnapshot>> {
        let view = self.binding.view().map_err(storage_err)?;
        let t = view.table(&self.name).map_err(storage_err)?;
        if t.schema().full_schema().fields() != self.schema.fields() {
            return Err(DataFusionError::Plan(format!(
                "table '{}' changed since this statement was planned; prepare it again",
                self.name
            )));
        }
        Ok(t)
    }

    fn df_schema(&self, schema: &SchemaRef) -> Result<DFSchema> {
        DFSchema::try_from(schema.as_ref().clone())
    }

    /// A scan of `columns` (full-schema positions, in that order) where all `filters` hold.
    /// What storage evaluates exactly is pushed into the scan; every other filter runs in a
    /// `FilterExec` above it (pruning with its relaxed form where one exists), with a
    /// projection back to `columns` if the filters needed more. `limit` is honoured only
    /// when no filter is left for the `FilterExec`.
    fn filtered_scan(
        &self,
        state: &dyn DfSession,
        columns: Vec<usize>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let snapshot = self.bind()?;
        let mut pushed = Vec::new();
        let mut rest = Vec::new();
        for f in filters {
            let mut f = unqualify(f.clone())?;
            if crate::fts::has_fts_match(&f) {
                // The search runs now, against the view this statement reads.
                let search = |column: &str, query: &str| {
                    crate::fts::matching_ids(&self.binding, &self.name, column, query)
                };
                f = crate::fts::resolve_matches(f, &search)?;
            }
            if !self.binding.pushdown() {
                rest.push(f);
                continue;
            }
            match pushdown::exact(&f, &self.schema) {
                Some(p) => pushed.push(p),
                None => {
                    // DataFusion may have simplified a filter we accepted as exact into a
                    // form that no longer converts: it must still be applied.
                    if let Some(p) = pushdown::relaxed(&f, &self.schema) {
                        pushed.push(p);
                    }
                    rest.push(f);
                }
            }
        }
        let wanted = columns.len();
        let mut columns = columns;
        for f in &rest {
            for c in f.column_refs() {
                let i = self.schema.index_of(&c.name)?;
                if !columns.contains(&i) {
                    columns.push(i);
                }
            }
        }
        let extra = columns.len() > wanted;
        let limit = if rest.is_empty() { limit } else { None };
        let scan = ScanExec::try_new(
            &self.name,
            snapshot,
            columns,
            and_all(pushed),
            limit,
            target_partitions(state),
        )?;
        let scan: Arc<dyn ExecutionPlan> = Arc::new(scan);
        let Some(filter) = rest.into_iter().reduce(Expr::and) else { return Ok(scan) };
        let schema = self.df_schema(&scan.schema())?;
        let pred = state.create_physical_expr(filter, &schema)?;
        let filtered: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(pred, scan)?);
        if !extra {
            return Ok(filtered);
        }
        let out = filtered.schema();
        let exprs = (0..wanted)
            .map(|i| {
                let name = out.field(i).name().clone();
                let c: Arc<dyn PhysicalExpr> =
                    Arc::new(datafusion::physical_expr::expressions::Column::new(&name, i));
                (c, name)
            })
            .collect::<Vec<_>>();
        Ok(Arc::new(ProjectionExec::try_new(exprs, filtered)?))
    }
}

/// Strips table qualifiers from column references (DML filters arrive qualified).
fn unqualify(e: Expr) -> Result<Expr> {
    e.transform(|e| match e {
        Expr::Column(c) if c.relation.is_some() => {
            Ok(Transformed::yes(Expr::Column(datafusion::common::Column::new_unqualified(c.name))))
        }
        e => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

fn and_all(mut ps: Vec<Predicate>) -> Option<Predicate> {
    match ps.len() {
        0 => None,
        1 => ps.pop(),
        _ => Some(Predicate::And(ps)),
    }
}

fn target_partitions(state: &dyn DfSession) -> usize {
    state.config().target_partitions().max(1)
}

#[async_trait]
impl TableProvider for NativeTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                // The scan resolves a full-text match to an `_id` set and applies every
                // filter it is given (in storage or in its own FilterExec), so such a filter
                // is exact whatever else it holds; DataFusion cannot evaluate `fts_match`.
                if crate::fts::has_fts_match(f) {
                    return TableProviderFilterPushDown::Exact;
                }
                if !self.binding.pushdown() {
                    TableProviderFilterPushDown::Unsupported
                } else if pushdown::exact(f, &self.schema).is_some() {
                    TableProviderFilterPushDown::Exact
                } else if pushdown::relaxed(f, &self.schema).is_some() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn DfSession,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let columns = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        // Filters handed here are the ones reported Exact or Inexact (perhaps rewritten by
        // the optimizer since): the exact ones run in storage, the others above the scan.
        self.filtered_scan(state, columns, filters, limit)
    }

    async fn insert_into(
        &self,
        _state: &dyn DfSession,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if insert_op != InsertOp::Append {
            return Err(DataFusionError::NotImplemented(format!(
                "{insert_op} is not supported on table '{}' (only INSERT INTO)",
                self.name
            )));
        }
        let kind = DmlKind::Insert { user_schema: self.user.clone() };
        Ok(Arc::new(DmlExec::new(&self.name, kind, input, self.binding.clone())))
    }

    async fn delete_from(
        &self,
        state: &dyn DfSession,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = self.filtered_scan(state, vec![0], &filters, None)?;
        let input = project_columns(input, &[ID_COLUMN])?;
        Ok(Arc::new(DmlExec::new(&self.name, DmlKind::Delete, input, self.binding.clone())))
    }

    async fn update(
        &self,
        state: &dyn DfSession,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut assigned = Vec::new();
        for (name, e) in assignments {
            if self.schema.field_with_name(&name).is_err() {
                return Err(DataFusionError::Plan(format!(
                    "UPDATE: table '{}' has no column '{name}'",
                    self.name
                )));
            }
            let e = unqualify(e)?;
            // DataFusion lists unchanged columns as `col = col`; only real changes are written.
            if matches!(&e, Expr::Column(c) if c.name == name) {
                continue;
            }
            if name == ID_COLUMN {
                return Err(DataFusionError::Plan(
                    "UPDATE cannot set _id: row ids are assigned by Basalt and never change".into(),
                ));
            }
            assigned.push((name, e));
        }
        // Read every column the assignments and filters use, and `_id`.
        let mut columns = vec![0];
        for (_, e) in &assigned {
            for c in e.column_refs() {
                let i = self.schema.index_of(&c.name)?;
                if !columns.contains(&i) {
                    columns.push(i);
                }
            }
        }
        let input = self.filtered_scan(state, columns, &filters, None)?;
        let schema = self.df_schema(&input.schema())?;
        let id = state.create_physical_expr(Expr::Column(ID_COLUMN.into()), &schema)?;
        let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = vec![(id, ID_COLUMN.to_string())];
        let mut fields = vec![Field::new(ID_COLUMN, DataType::UInt64, false)];
        for (name, e) in assigned {
            let target = self.schema.field_with_name(&name)?.clone();
            let e = e.cast_to(target.data_type(), &schema)?;
            exprs.push((state.create_physical_expr(e, &schema)?, name));
            fields.push(target);
        }
        let input: Arc<dyn ExecutionPlan> = Arc::new(ProjectionExec::try_new(exprs, input)?);
        let kind = DmlKind::Update { values: Arc::new(Schema::new(fields[1..].to_vec())) };
        Ok(Arc::new(DmlExec::new(&self.name, kind, input, self.binding.clone())))
    }

    async fn truncate(&self, state: &dyn DfSession) -> Result<Arc<dyn ExecutionPlan>> {
        self.delete_from(state, vec![]).await
    }
}

fn project_columns(
    input: Arc<dyn ExecutionPlan>,
    names: &[&str],
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = input.schema();
    let exprs = names
        .iter()
        .map(|n| {
            let i = schema.index_of(n)?;
            let c: Arc<dyn PhysicalExpr> =
                Arc::new(datafusion::physical_expr::expressions::Column::new(n, i));
            Ok((c, (*n).to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
}

/// Scans a native table snapshot: one partition per contiguous group of scan units.
#[derive(Debug, Clone)]
pub struct ScanExec {
    table: String,
    snapshot: Arc<TableSnapshot>,
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    limit: Option<usize>,
    groups: Vec<Vec<ScanUnit>>,
    total_units: usize,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// Filters of parent operators (TopK's and joins' dynamic filters among them), used to
    /// skip units by zone maps and, outside a limit, to drop rows as the scan goes; the
    /// parents apply them again, so they need not be exact.
    hints: Vec<Arc<dyn PhysicalExpr>>,
    metrics: ExecutionPlanMetricsSet,
}

impl ScanExec {
    /// Plans a scan: prunes units by zone maps and splits the rest into at most
    /// `partitions` groups of about equal row counts.
    pub fn try_new(
        table: &str,
        snapshot: Arc<TableSnapshot>,
        projection: Vec<usize>,
        predicate: Option<Predicate>,
        limit: Option<usize>,
        partitions: usize,
    ) -> Result<ScanExec> {
        let schema = snapshot.projected_schema(&projection).map_err(storage_err)?;
        let all = snapshot.scan_units();
        let total_units = all.len();
        let units: Vec<ScanUnit> = match &predicate {
            Some(p) => all.into_iter().filter(|u| snapshot.unit_may_match(*u, p)).collect(),
            None => all,
        };
        let groups = split_units(&snapshot, units, partitions);
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        )
        .with_scheduling_type(SchedulingType::Cooperative);
        Ok(ScanExec {
            table: table.to_string(),
            snapshot,
            projection,
            predicate,
            limit,
            groups,
            total_units,
            schema,
            props: Arc::new(props),
            hints: Vec::new(),
            metrics: ExecutionPlanMetricsSet::new(),
        })
    }

    /// Whether the scan holds filters of parent operators (dynamic filters among them).
    pub(crate) fn has_hints(&self) -> bool {
        !self.hints.is_empty()
    }

    fn kept_units(&self) -> usize {
        self.groups.iter().map(Vec::len).sum()
    }
}

/// Contiguous groups of units with about equal row counts (scan order is kept).
fn split_units(t: &TableSnapshot, units: Vec<ScanUnit>, parts: usize) -> Vec<Vec<ScanUnit>> {
    let total: u64 = units.iter().map(|u| t.unit_rows(*u)).sum();
    let parts = parts.min(units.len()).max(1);
    let per = total.div_ceil(parts as u64).max(1);
    let mut groups: Vec<Vec<ScanUnit>> = vec![Vec::new()];
    let mut acc = 0u64;
    for u in units {
        let rows = t.unit_rows(u);
        if acc >= per && groups.len() < parts {
            groups.push(Vec::new());
            acc = 0;
        }
        acc += rows;
        if let Some(g) = groups.last_mut() {
            g.push(u);
        }
    }
    groups
}

/// The scan units of `partition` of an exec that split its units into `groups` (no group
/// at all is one empty partition).
pub(crate) fn partition_units(
    groups: &[Vec<ScanUnit>],
    partition: usize,
    exec: &str,
) -> Result<Vec<ScanUnit>> {
    match groups.get(partition) {
        Some(g) => Ok(g.clone()),
        None if partition == 0 => Ok(Vec::new()),
        None => Err(DataFusionError::Internal(format!("{exec} has no partition {partition}"))),
    }
}

/// A stream that first awaits `start` (building a join's table, say), then yields the
/// batches of the stream it returns; an error from `start` is the stream's one item.
pub(crate) fn deferred_stream<S, F>(schema: SchemaRef, start: F) -> SendableRecordBatchStream
where
    F: std::future::Future<Output = Result<S>> + Send + 'static,
    S: futures::Stream<Item = Result<RecordBatch>> + Send + 'static,
{
    let stream = futures::stream::once(start)
        .map(|r| match r {
            Ok(s) => s.boxed(),
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten();
    Box::pin(RecordBatchStreamAdapter::new(schema, stream))
}

/// What a [`ScanExec`] reads (see [`ScanExec::parts`]).
pub(crate) struct ScanParts<'a> {
    /// The snapshot the scan was planned on.
    pub snapshot: &'a Arc<TableSnapshot>,
    /// Full-schema positions of the output columns.
    pub projection: &'a [usize],
    /// The predicate evaluated in storage.
    pub predicate: Option<&'a Predicate>,
    /// The units of each partition.
    pub groups: &'a [Vec<ScanUnit>],
}

impl ScanExec {
    /// What the scan reads, for operators that read storage themselves (the fused
    /// group-by). `None` when the scan has a limit.
    pub(crate) fn parts(&self) -> Option<ScanParts<'_>> {
        if self.limit.is_some() {
            return None;
        }
        Some(ScanParts {
            snapshot: &self.snapshot,
            projection: &self.projection,
            predicate: self.predicate.as_ref(),
            groups: &self.groups,
        })
    }
}

impl DisplayAs for ScanExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cols: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(f, "BasaltScan: table={}, projection=[{}]", self.table, cols.join(", "))?;
                if let Some(p) = &self.predicate {
                    write!(f, ", filter={p}")?;
                }
                if let Some(l) = self.limit {
                    write!(f, ", limit={l}")?;
                }
                if !self.hints.is_empty() {
                    let h: Vec<String> = self.hints.iter().map(|e| e.to_string()).collect();
                    write!(f, ", pruning_hints=[{}]", h.join(", "))?;
                }
                write!(f, ", units={}/{}", self.kept_units(), self.total_units)
            }
            DisplayFormatType::TreeRender => {
                writeln!(f, "table={}", self.table)?;
                writeln!(f, "units={}/{}", self.kept_units(), self.total_units)
            }
        }
    }
}

impl ExecutionPlan for ScanExec {
    fn name(&self) -> &str {
        "BasaltScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    leaf_exec!();

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let units = partition_units(&self.groups, partition, "BasaltScan")?;
        let pruned = MetricBuilder::new(&self.metrics).counter("units_pruned_by_hints", partition);
        let read = MetricBuilder::new(&self.metrics).counter("units_read", partition);
        let (snapshot, projection, predicate, hints, schema, limit) = (
            self.snapshot.clone(),
            self.projection.clone(),
            self.predicate.clone(),
            self.hints.clone(),
            self.schema.clone(),
            self.limit,
        );
        // Units are read one at a time; before each, the hints (whose dynamic parts tighten
        // as TopK fills or a join builds) may rule it out by its zone maps, and otherwise
        // filter its rows: a hint is a parent's filter (or its relaxed form) that the parent
        // applies again, so a row failing it is one the parent drops (a hash join's build
        // keys, a TopK's threshold). Not under a limit, where filtering first would change
        // which rows the limit keeps.
        let batches = units.into_iter().flat_map(move |unit| {
            let current: Vec<Predicate> =
                hints.iter().filter_map(|h| pushdown::from_physical(h, &schema)).collect();
            if current.iter().any(|p| !snapshot.unit_may_match(unit, p)) {
                pruned.add(1);
                return UnitBatches::Empty;
            }
            read.add(1);
            let predicate = if limit.is_none() && !current.is_empty() {
                and_all(predicate.iter().cloned().chain(current).collect())
            } else {
                predicate.clone()
            };
            // A unit decodes its columns only up to the row where the limit is met (a
            // limit reaches the scan only when every filter was pushed into it exactly).
            match snapshot.scan_units_filtered(&projection, predicate, vec![unit]) {
                Ok(scan) => UnitBatches::Scan(scan.with_limit(limit)),
                Err(e) => UnitBatches::Error(Some(e)),
            }
        });
        let stream = futures::stream::iter(batches).map(|r| r.map_err(storage_err));
        let stream = LimitStop { inner: stream, left: self.limit };
        let adapter = RecordBatchStreamAdapter::new(self.schema.clone(), stream);
        Ok(datafusion::physical_plan::coop::make_cooperative(Box::pin(adapter)))
    }

    fn statistics_from_inputs(
        &self,
        _input_stats: &[Arc<Statistics>],
        args: &datafusion::physical_plan::statistics::StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        let mut s = Statistics::new_unknown(&self.schema);
        if args.partition().is_none() {
            let count = usize::try_from(self.snapshot.count()).unwrap_or(usize::MAX);
            // The limit applies per partition (a limit node above makes it global), so only
            // a single-partition scan without filters knows its output size exactly.
            s.num_rows = match (&self.predicate, self.limit) {
                (None, None) => Precision::Exact(count),
                (None, Some(l)) if self.groups.len() <= 1 => Precision::Exact(count.min(l)),
                (_, Some(l)) => Precision::Inexact(count.min(l.saturating_mul(self.groups.len()))),
                (Some(_), None) => Precision::Inexact(count),
            };
        }
        Ok(Arc::new(s))
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn handle_child_pushdown_result(
        &self,
        _phase: FilterPushdownPhase,
        child_pushdown_result: ChildPushdownResult,
        _config: &ConfigOptions,
    ) -> Result<FilterPushdownPropagation<Arc<dyn ExecutionPlan>>> {
        let filters: Vec<Arc<dyn PhysicalExpr>> =
            child_pushdown_result.parent_filters.into_iter().map(|f| f.filter).collect();
        // Every filter stays with the parent (PushedDown::No): here it only prunes.
        let answer = vec![PushedDown::No; filters.len()];
        let useful: Vec<_> = filters
            .into_iter()
            .filter(|f| {
                // Keep what converts now, and dynamic filters (which may convert later).
                pushdown::from_physical(f, &self.schema).is_some() || is_dynamic(f)
            })
            .collect();
        if useful.is_empty() {
            return Ok(FilterPushdownPropagation { filters: answer, updated_node: None });
        }
        let mut next = self.clone();
        next.hints.extend(useful);
        next.metrics = ExecutionPlanMetricsSet::new();
        Ok(FilterPushdownPropagation { filters: answer, updated_node: Some(Arc::new(next)) })
    }
}

/// Whether an expression contains a dynamic filter (its value changes while the plan runs).
fn is_dynamic(e: &Arc<dyn PhysicalExpr>) -> bool {
    let mut dynamic = false;
    let _ = e.apply(|x| {
        if x.downcast_ref::<DynamicFilterPhysicalExpr>().is_some() {
            dynamic = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    dynamic
}

/// The batches of one scan unit.
enum UnitBatches {
    Empty,
    Scan(basalt_storage::Scan),
    Error(Option<basalt_storage::Error>),
}

impl Iterator for UnitBatches {
    type Item = basalt_storage::Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        match self {
            UnitBatches::Empty => None,
            UnitBatches::Scan(s) => s.next(),
            UnitBatches::Error(e) => e.take().map(Err),
        }
    }
}

/// Passes at most `left` rows (all for `None`), then ends the stream.
struct LimitStop<S> {
    inner: S,
    left: Option<usize>,
}

impl<S: futures::Stream<Item = Result<RecordBatch>> + Unpin> futures::Stream for LimitStop<S> {
    type Item = Result<RecordBatch>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.left == Some(0) {
            return std::task::Poll::Ready(None);
        }
        let r = futures::ready!(self.inner.poll_next_unpin(cx));
        let r = match (r, self.left.as_mut()) {
            (Some(Ok(b)), Some(l)) => {
                let n = b.num_rows().min(*l);
                *l -= n;
                Some(Ok(if n < b.num_rows() { b.slice(0, n) } else { b }))
            }
            (r, _) => r,
        };
        std::task::Poll::Ready(r)
    }
}
