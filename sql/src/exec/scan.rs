//! The scan exec over a native table's snapshot.
//!
//! [`ScanExec`] splits the table's scan units (row groups, then the memtable) into
//! contiguous groups, one per partition, and decodes them lazily on the partition's task.
//! Filters that storage evaluates exactly (see [`crate::pushdown`]) are pushed as `Exact`
//! and run on encoded data; the others are pushed as `Inexact` (zone-map pruning with a
//! relaxed predicate) and DataFusion filters again. Row groups ruled out by zone maps are
//! dropped at planning time, so `EXPLAIN` shows how many remain. Filters parents push down
//! after planning (DataFusion's dynamic filters of hash joins and TopK, shown as
//! `pruning_hints`) skip units by zone maps and, outside a limit, filter rows in storage
//! while that pays (see `exec/hints.rs`); their parents still apply them.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::config::ConfigOptions;
use datafusion::common::stats::Precision;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, Statistics};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::DynamicFilterPhysicalExpr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType, SchedulingType};
use datafusion::physical_plan::filter_pushdown::{
    ChildPushdownResult, FilterPushdownPhase, FilterPushdownPropagation, PushedDown,
};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use basalt_storage::{Predicate, ScanUnit, TableSnapshot};

use super::hints::Hint;
use crate::binding::storage_err;
use crate::pushdown;

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
    hints: Vec<Hint>,
    metrics: ExecutionPlanMetricsSet,
    /// [`ScanExec::estimate`], worked out once (it samples rows when there is a filter).
    estimates: Arc<std::sync::OnceLock<Statistics>>,
    /// The key or index whose lookup gave the predicate's `_id`s, for plans.
    index: Option<String>,
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
            estimates: Arc::default(),
            index: None,
        })
    }

    /// Names the key or index a lookup used to find the predicate's `_id`s (shown in plans).
    pub(crate) fn with_index(mut self, name: String) -> Self {
        self.index = Some(name);
        self
    }

    /// The keys and indexes that lead with a column a hint reads: a join's key list on
    /// such a column is looked up there (see `hints`).
    fn hint_indexes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for h in &self.hints {
            for c in datafusion::physical_expr::utils::collect_columns(&h.expr) {
                if let Some((_, name)) = self.snapshot.index_on(c.name())
                    && !out.iter().any(|n| n == name)
                {
                    out.push(name.to_string());
                }
            }
        }
        out
    }

    /// The scan holding one more filter of a parent operator (see `hints`), with fresh
    /// metrics.
    pub(crate) fn with_hint(&self, expr: Arc<dyn PhysicalExpr>) -> ScanExec {
        let mut next = self.clone();
        next.hints.push(Hint::new(expr));
        next.metrics = ExecutionPlanMetricsSet::new();
        next
    }

    /// Whether the scan holds filters of parent operators (dynamic filters among them).
    pub(crate) fn has_hints(&self) -> bool {
        !self.hints.is_empty()
    }

    fn kept_units(&self) -> usize {
        self.groups.iter().map(Vec::len).sum()
    }

    /// The scan's statistics for the planner (join order, build sides): its rows — exact
    /// without a filter, else the share of sampled rows that match (see
    /// [`TableSnapshot::estimate_matches`]) — and per column the zone maps' bounds (exact
    /// without a filter, a limit or deleted rows), the NULL count and, for dictionary
    /// columns, their entries as a distinct-count estimate.
    fn estimate(&self) -> Statistics {
        let count = usize::try_from(self.snapshot.count()).unwrap_or(usize::MAX);
        // The limit applies per partition (a limit node above makes it global), so only a
        // single-partition scan without filters knows its output size exactly.
        let rows = match (&self.predicate, self.limit) {
            (None, None) => Precision::Exact(count),
            (None, Some(l)) if self.groups.len() <= 1 => Precision::Exact(count.min(l)),
            (_, Some(l)) => Precision::Inexact(count.min(l.saturating_mul(self.groups.len()))),
            (Some(p), None) => {
                let units: Vec<ScanUnit> = self.groups.iter().flatten().copied().collect();
                let n = self.snapshot.estimate_matches(p, &units).unwrap_or(count as u64);
                Precision::Inexact(usize::try_from(n).unwrap_or(usize::MAX).min(count))
            }
        };
        let exact = self.predicate.is_none() && self.limit.is_none();
        let mut s = Statistics::new_unknown(&self.schema);
        s.num_rows = rows;
        for (i, (c, &p)) in s.column_statistics.iter_mut().zip(&self.projection).enumerate() {
            if p == 0 {
                // `_id`: unique.
                c.distinct_count = rows;
                c.null_count = Precision::Exact(0);
                continue;
            }
            let sum = self.snapshot.column_summary(p);
            let nulls = usize::try_from(sum.null_count).unwrap_or(usize::MAX);
            c.null_count = match exact && sum.nulls_exact {
                true => Precision::Exact(nulls),
                false => Precision::Inexact(nulls.min(rows.get_value().copied().unwrap_or(nulls))),
            };
            let dt = self.schema.field(i).data_type();
            if let (Some(lo), Some(hi)) = (&sum.min, &sum.max)
                && let (Some(lo), Some(hi)) = (stat_scalar(lo, dt), stat_scalar(hi, dt))
            {
                // Exact (DataFusion then answers MIN / MAX from them) only when they are
                // the bounds of exactly the rows the scan returns.
                (c.min_value, c.max_value) = match exact && sum.bounds_exact {
                    true => (Precision::Exact(lo), Precision::Exact(hi)),
                    false => (Precision::Inexact(lo), Precision::Inexact(hi)),
                };
            }
            if let Some(d) = sum.dictionary_entries {
                c.distinct_count = Precision::Inexact(usize::try_from(d).unwrap_or(usize::MAX));
            }
        }
        s
    }
}

/// A zone-map bound for the planner: a value of the column's type (`None` if it does not
/// convert, or is a NaN, which DataFusion's interval arithmetic does not order).
fn stat_scalar(
    v: &basalt_storage::encoding::StatValue,
    dt: &datafusion::arrow::datatypes::DataType,
) -> Option<datafusion::scalar::ScalarValue> {
    if matches!(v, basalt_storage::encoding::StatValue::Float(x) if x.is_nan()) {
        return None;
    }
    datafusion::scalar::ScalarValue::try_from_array(&bound_array(v, dt)?, 0).ok()
}

/// A zone-map bound as a one-value array of the column's type, exactly (`None` if the
/// bound cannot be a value of that type).
pub(crate) fn bound_array(
    v: &basalt_storage::encoding::StatValue,
    dt: &datafusion::arrow::datatypes::DataType,
) -> Option<datafusion::arrow::array::ArrayRef> {
    use basalt_storage::encoding::StatValue as S;
    use datafusion::arrow::array::*;
    use datafusion::arrow::datatypes::DataType as D;
    // Dates, times, timestamps and durations are integers of their width in storage.
    let retype = |a: ArrayRef| -> Option<ArrayRef> {
        Some(make_array(a.to_data().into_builder().data_type(dt.clone()).build().ok()?))
    };
    let a: ArrayRef = match (v, dt) {
        (S::Int(x), D::Int8) => Arc::new(Int8Array::from(vec![i8::try_from(*x).ok()?])),
        (S::Int(x), D::Int16) => Arc::new(Int16Array::from(vec![i16::try_from(*x).ok()?])),
        (S::Int(x), D::Int32 | D::Date32 | D::Time32(_)) => {
            retype(Arc::new(Int32Array::from(vec![i32::try_from(*x).ok()?])))?
        }
        (S::Int(x), D::Int64 | D::Date64 | D::Time64(_) | D::Timestamp(_, _) | D::Duration(_)) => {
            retype(Arc::new(Int64Array::from(vec![*x])))?
        }
        (S::UInt(x), D::UInt8) => Arc::new(UInt8Array::from(vec![u8::try_from(*x).ok()?])),
        (S::UInt(x), D::UInt16) => Arc::new(UInt16Array::from(vec![u16::try_from(*x).ok()?])),
        (S::UInt(x), D::UInt32) => Arc::new(UInt32Array::from(vec![u32::try_from(*x).ok()?])),
        (S::UInt(x), D::UInt64) => Arc::new(UInt64Array::from(vec![*x])),
        (S::UInt(x @ (0 | 1)), D::Boolean) => Arc::new(BooleanArray::from(vec![*x == 1])),
        // A float32 column's bounds are its values widened, so narrowing is exact.
        (S::Float(x), D::Float32) => Arc::new(Float32Array::from(vec![*x as f32])),
        (S::Float(x), D::Float64) => Arc::new(Float64Array::from(vec![*x])),
        (S::Bytes(b), D::Utf8) => {
            Arc::new(StringArray::from(vec![std::str::from_utf8(b).ok()?.to_string()]))
        }
        (S::Bytes(b), D::Binary) => Arc::new(BinaryArray::from(vec![b.as_slice()])),
        (S::Decimal(x), D::Decimal128(p, s)) => {
            Arc::new(Decimal128Array::from(vec![*x]).with_precision_and_scale(*p, *s).ok()?)
        }
        _ => return None,
    };
    Some(a)
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
                if let Some(i) = &self.index {
                    write!(f, ", index={i}")?;
                }
                if let Some(l) = self.limit {
                    write!(f, ", limit={l}")?;
                }
                if !self.hints.is_empty() {
                    let h: Vec<String> = self.hints.iter().map(|h| h.expr.to_string()).collect();
                    write!(f, ", pruning_hints=[{}]", h.join(", "))?;
                    let ix = self.hint_indexes();
                    if !ix.is_empty() {
                        write!(f, ", index_join=[{}]", ix.join(", "))?;
                    }
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

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    /// The hints: DataFusion fills a join's dynamic filter only when its probe side holds it.
    fn apply_expressions(
        &self,
        f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        let mut r = TreeNodeRecursion::Continue;
        for h in &self.hints {
            r = f(&h.expr)?;
            if r == TreeNodeRecursion::Stop {
                break;
            }
        }
        Ok(r)
    }

    fn with_new_children(
        self: Arc<Self>,
        _children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(
        &self,
        partition: usize,
        _context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let units = partition_units(&self.groups, partition, "BasaltScan")?;
        let pruned = MetricBuilder::new(&self.metrics).counter("units_pruned_by_hints", partition);
        let read = MetricBuilder::new(&self.metrics).counter("units_read", partition);
        let removed = MetricBuilder::new(&self.metrics).counter("rows_removed_by_hints", partition);
        let lookups = MetricBuilder::new(&self.metrics).counter("index_lookups", partition);
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
        // filter its rows: a hint is a parent's filter that the parent applies again, so a
        // row failing it is one the parent drops (a hash join's build keys, a TopK's
        // threshold). Not under a limit, where filtering first would change which rows the
        // limit keeps.
        let batches = units.into_iter().flat_map(move |unit| {
            let current: Vec<_> =
                hints.iter().filter_map(|h| h.current(&schema, &snapshot, &lookups)).collect();
            if current.iter().any(|h| h.prune().is_some_and(|p| !snapshot.unit_may_match(unit, p)))
            {
                pruned.add(1);
                return UnitBatches::Empty;
            }
            read.add(1);
            let predicate = match limit {
                None => and_all(
                    predicate
                        .iter()
                        .cloned()
                        .chain(current.iter().filter_map(|h| h.id_filter()))
                        .chain(current.iter().filter_map(|h| h.row_filter(&removed)))
                        .collect(),
                ),
                Some(_) => predicate.clone(),
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
        if args.partition().is_some() {
            return Ok(Arc::new(Statistics::new_unknown(&self.schema)));
        }
        Ok(Arc::new(self.estimates.get_or_init(|| self.estimate()).clone()))
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
        next.hints.extend(useful.into_iter().map(Hint::new));
        next.metrics = ExecutionPlanMetricsSet::new();
        Ok(FilterPushdownPropagation { filters: answer, updated_node: Some(Arc::new(next)) })
    }
}

/// Whether an expression contains a dynamic filter (its value changes while the plan runs).
/// The conjunction of `ps` (`None` when empty).
pub(crate) fn and_all(mut ps: Vec<Predicate>) -> Option<Predicate> {
    match ps.len() {
        0 => None,
        1 => ps.pop(),
        _ => Some(Predicate::And(ps)),
    }
}

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
