//! Fused group-by: a physical optimizer rule that replaces a partial (or single-stage)
//! `AggregateExec` reading a Basalt scan directly with [`GroupByExec`], which groups on
//! **dictionary codes** instead of materialised values.
//!
//! DataFusion's hash aggregation over a Basalt scan would first decode every group value
//! (a string per row for `GROUP BY city`) and then hash each one. Segments already store
//! such columns as a sorted dictionary plus 1–4-byte codes per row, so [`GroupByExec`]
//! reads the codes, maps each *dictionary entry* (not each row) to a group id once per row
//! group, and turns codes into group ids with one table lookup per row; several group
//! columns combine through dense tables. Within a batch rows are keyed by their combined
//! codes (a dense batch-local key), and only the keys present are turned into group ids.
//!
//! Aggregates: `COUNT(*)` counts rows per key (one coded group column without NULLs: counted
//! straight from its codes, [`Grouper::count_codes`]; with no aggregate at all, as for `DISTINCT`,
//! only marked until every dictionary entry has been seen); `count(CASE WHEN p THEN c END)` (`c` a
//! non-NULL constant) counts the rows per key where `p` is true ([`counts_if`]). `count` / `sum` /
//! `avg` / `min` / `max` of one Int64 or Float64 column (or of a narrower number under the cast
//! DataFusion adds) are folded per key by a tight loop that reads the column's dictionary codes
//! through a value table, or its plain values ([`Native`]); the per-key partial results are handed
//! to DataFusion's own accumulator (`merge_batch` for count / sum / avg states, `update_batch` with
//! one candidate per key for min / max), so DataFusion's rules decide and its states and values
//! come out. Every other aggregate is DataFusion's `GroupsAccumulator` fed a group id per row.
//! Results therefore equal DataFusion's, except that floating-point sums add in another order
//! (within rounding), as they do between DataFusion's own plans. Without GROUP BY (one group) the
//! rule applies only when every aggregate is counted or folded here, since DataFusion's scalar
//! accumulators are already vectorised. A partial aggregate over a union of scans (`UNION`, `UNION
//! ALL` under an aggregate) becomes the union of one fused partial aggregate per scan when every
//! scan fuses ([`fuse_union`]). A left semi / anti hash join without a join filter (`INTERSECT`,
//! `EXCEPT`) reads its scanned right input deduplicated by such a group-by
//! ([`dedupe_semi_join_input`]).
//!
//! When it applies: the aggregate's input is a Basalt scan without a limit (its filter already
//! evaluated in storage, on codes), or a dictionary join ([`crate::join`]) probing one, without a
//! fetch, whose output it reads with the probe columns as codes (group columns must then be probe
//! columns); there is no grouping set; every group expression is a column of the scan that is
//! dictionary-encoded in every row group of the snapshot (or there is none, see above); every
//! aggregate supports groups accumulators and has no DISTINCT, ORDER BY or FILTER; the mode is
//! `Partial` or `Single`. Memtable rows (values, not codes) are grouped through the same per-value
//! map. What the groups hold counts against the memory pool; a partition whose groups outgrow
//! it is dropped and computed by the aggregate the rule replaced (which spills or emits early),
//! counted in the `over_memory_limit` metric. The rule is off when the connection's fast paths are off
//! (`Connection::set_fast_paths(false)`), which is how the tests compare the two.
//!
//! What this module must not do: change what a query returns, or read storage other than
//! through the snapshot and units the scan was planned with.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Int64Array, NullArray,
    PrimitiveArray, RecordBatch, UInt64Array, new_null_array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int64Type, SchemaRef, UInt8Type, UInt16Type, UInt32Type,
};
use datafusion::common::JoinType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CaseExpr, CastExpr, Column, Literal};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::joins::HashJoinExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::union::UnionExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use basalt_storage::{Predicate, ScanUnit, TableSnapshot};

use crate::binding::storage_err;
use crate::codes::{codes_of, dictionary_values};
use crate::join::DictJoinExec;
use crate::provider::{ScanExec, ScanParts, deferred_stream, partition_units};

/// The rule: aggregate-over-scan shapes become [`GroupByExec`].
#[derive(Debug)]
pub struct FuseGroupBy {
    enabled: Arc<AtomicBool>,
}

impl FuseGroupBy {
    /// A rule that applies while `enabled` is true.
    pub fn new(enabled: Arc<AtomicBool>) -> FuseGroupBy {
        FuseGroupBy { enabled }
    }
}

impl PhysicalOptimizerRule for FuseGroupBy {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Ok(plan);
        }
        plan.transform_up(|node| {
            if let Some(f) = node.downcast_ref::<datafusion::physical_plan::filter::FilterExec>() {
                return Ok(match crate::entry::EntryFilterExec::replace(f, &node)? {
                    Some(e) => Transformed::yes(e),
                    None => Transformed::no(node),
                });
            }
            if let Some(join) = node.downcast_ref::<HashJoinExec>() {
                if let Some(s) = crate::semi::SemiJoinScanExec::reduce(join) {
                    return Ok(Transformed::yes(Arc::new(s) as Arc<dyn ExecutionPlan>));
                }
                if let Some(j) = dedupe_semi_join_input(join, &node)? {
                    return Ok(Transformed::yes(j));
                }
                return Ok(match crate::join::DictJoinExec::replace(join) {
                    Some(j) => Transformed::yes(Arc::new(j) as Arc<dyn ExecutionPlan>),
                    None => Transformed::no(node),
                });
            }
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            if let Some(g) = GroupByExec::fuse(agg)? {
                return Ok(Transformed::yes(Arc::new(g) as Arc<dyn ExecutionPlan>));
            }
            Ok(match fuse_union(agg)? {
                Some(u) => Transformed::yes(u),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_fuse_group_by"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// A partial aggregate over a union of Basalt scans (`UNION`, `UNION ALL` under GROUP BY)
/// as the union of one fused partial aggregate per scan: partial states distribute over a
/// union, and the final aggregate above merges them as before. Only when every input
/// fuses, so the union's schema is the aggregate's.
fn fuse_union(agg: &AggregateExec) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if *agg.mode() != AggregateMode::Partial {
        return Ok(None);
    }
    let Some(union) = agg.input().downcast_ref::<UnionExec>() else { return Ok(None) };
    let mut parts: Vec<Arc<dyn ExecutionPlan>> = Vec::new();
    for child in union.children() {
        let one = AggregateExec::try_new(
            AggregateMode::Partial,
            agg.group_expr().clone(),
            agg.aggr_expr().to_vec(),
            agg.filter_expr().to_vec(),
            child.clone(),
            child.schema(),
        )?;
        // The same columns as the aggregate's (nullability may differ by input).
        let Some(g) = GroupByExec::fuse(&one)?.and_then(|g| g.with_schema(agg.schema())) else {
            return Ok(None);
        };
        parts.push(Arc::new(g));
    }
    if parts.len() < 2 {
        return Ok(None);
    }
    UnionExec::try_new(parts).map(Some)
}

/// A left semi or anti join (`INTERSECT`, `EXCEPT`, `IN` / `EXISTS` with the table on the
/// right) only asks whether a right row with the key exists, so its right input, a Basalt
/// scan (possibly under a hash repartition), may be deduplicated first: each scan partition
/// becomes a fused group-by on all of its columns. Duplicates across partitions remain and
/// are harmless; NULL keys keep one row. Not with a join filter, which could read other
/// right columns row by row.
fn dedupe_semi_join_input(
    join: &HashJoinExec,
    node: &Arc<dyn ExecutionPlan>,
) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    if !matches!(join.join_type(), JoinType::LeftSemi | JoinType::LeftAnti)
        || join.filter().is_some()
    {
        return Ok(None);
    }
    let [left, right] = [join.left(), join.right()];
    let (repartition, scan) = match right.downcast_ref::<RepartitionExec>() {
        Some(r) => (Some(r), r.input()),
        None => (None, right),
    };
    if scan.downcast_ref::<ScanExec>().is_none() {
        return Ok(None);
    }
    let schema = scan.schema();
    let keys: Vec<(Arc<dyn PhysicalExpr>, String)> = schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            (Arc::new(Column::new(f.name(), i)) as Arc<dyn PhysicalExpr>, f.name().clone())
        })
        .collect();
    let agg = AggregateExec::try_new(
        AggregateMode::Partial,
        PhysicalGroupBy::new_single(keys),
        Vec::new(),
        Vec::new(),
        scan.clone(),
        schema.clone(),
    )?;
    // The deduplicated input has the scan's columns; keep its exact fields.
    let Some(g) = GroupByExec::fuse(&agg)?.and_then(|g| g.with_schema(schema)) else {
        return Ok(None);
    };
    let mut right: Arc<dyn ExecutionPlan> = Arc::new(g);
    let recompute = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
    if let Some(r) = repartition {
        right = Arc::new(r.clone()).replace_children(vec![right], recompute)?;
    }
    node.clone().replace_children(vec![left.clone(), right], recompute).map(Some)
}

/// Group-by on dictionary codes over a Basalt snapshot, with DataFusion's accumulators.
#[derive(Debug, Clone)]
pub struct GroupByExec {
    table: String,
    snapshot: Arc<TableSnapshot>,
    /// Full-schema positions the scan read (scan output column `i` is `projection[i]`).
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    groups: Vec<Vec<ScanUnit>>,
    /// Scan output positions of the group columns.
    keys: Vec<usize>,
    /// The input when it is a dictionary join probing the snapshot (its output, with the
    /// probe columns as codes, is what is grouped); `None`: the scan itself.
    join: Option<Arc<DictJoinExec>>,
    aggs: Vec<Arc<AggregateFunctionExpr>>,
    /// `Partial`: emit states (the final aggregate above merges them); `Single`: values.
    partial: bool,
    /// The scan's output schema (what the aggregate expressions are evaluated against).
    input_schema: SchemaRef,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// The aggregate this replaced (same input partitions), run for a partition whose
    /// groups outgrow the memory limit.
    fallback: Arc<dyn ExecutionPlan>,
    metrics: ExecutionPlanMetricsSet,
}

impl GroupByExec {
    /// The fused form of `agg`, when it applies (see the module docs).
    pub fn fuse(agg: &AggregateExec) -> Result<Option<GroupByExec>> {
        let partial = match agg.mode() {
            AggregateMode::Partial => true,
            AggregateMode::Single => false,
            _ => return Ok(None),
        };
        let input = agg.input();
        let join = input.downcast_ref::<DictJoinExec>().filter(|j| !j.has_fetch());
        let (snapshot, projection, predicate, groups) =
            match (input.downcast_ref::<ScanExec>(), join) {
                (Some(scan), _) => {
                    let Some(ScanParts { snapshot, projection, predicate, groups }) = scan.parts()
                    else {
                        return Ok(None);
                    };
                    (snapshot, projection.to_vec(), predicate, groups)
                }
                // The join's output columns stand for the scan's: a group column must be one of
                // its probe columns (see `full` below).
                (None, Some(j)) => (j.snapshot(), Vec::new(), j.predicate(), j.groups()),
                (None, None) => return Ok(None),
            };
        let g = agg.group_expr();
        if g.has_grouping_set() || agg.limit_options().is_some() {
            return Ok(None);
        }
        // Without GROUP BY only aggregates folded here gain anything: DataFusion's scalar
        // accumulators already run vectorised kernels.
        let input = agg.input_schema();
        if g.is_empty()
            && !agg
                .aggr_expr()
                .iter()
                .all(|a| counts_rows(a) || counts_if(a).is_some() || native_of(a, &input).is_some())
        {
            return Ok(None);
        }
        if agg.filter_expr().iter().any(Option::is_some) {
            return Ok(None);
        }
        let mut keys = Vec::new();
        for (e, _) in g.expr() {
            let Some(c) = e.downcast_ref::<Column>() else { return Ok(None) };
            let full = match join {
                Some(j) => j.probe_column(c.index()),
                None => projection.get(c.index()).copied(),
            };
            let Some(full) = full else { return Ok(None) };
            if !snapshot.is_dictionary_encoded(full) {
                return Ok(None);
            }
            keys.push(c.index());
        }
        for a in agg.aggr_expr() {
            if a.is_distinct() || !a.order_bys().is_empty() || !a.groups_accumulator_supported() {
                return Ok(None);
            }
        }
        let schema = agg.schema();
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len().max(1)),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Some(GroupByExec {
            table: snapshot.name().to_string(),
            snapshot: snapshot.clone(),
            projection,
            predicate: predicate.cloned(),
            groups: groups.to_vec(),
            keys,
            join: join.map(|j| Arc::new(j.clone())),
            aggs: agg.aggr_expr().to_vec(),
            partial,
            input_schema: agg.input_schema(),
            schema,
            props: Arc::new(props),
            fallback: Arc::new(agg.clone()),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    /// Whether it groups a dictionary join's output (which builds a hash table).
    pub(crate) fn over_join(&self) -> bool {
        self.join.is_some()
    }

    /// The same exec declaring `schema` as its output (other field names or nullability),
    /// when its columns have `schema`'s types.
    fn with_schema(mut self, schema: SchemaRef) -> Option<GroupByExec> {
        let ours = self.schema.fields();
        if ours.len() != schema.fields().len()
            || ours.iter().zip(schema.fields()).any(|(a, b)| a.data_type() != b.data_type())
        {
            return None;
        }
        self.props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            self.props.partitioning.clone(),
            EmissionType::Final,
            Boundedness::Bounded,
        ));
        self.schema = schema;
        Some(self)
    }

    /// Groups and aggregates the batches of one partition (its scan units, or the join's
    /// output over them, with codes where storage has them) into one batch.
    /// `None`: what it held grew past what the memory pool would give (nothing is
    /// emitted; the caller runs the aggregate it replaced instead).
    fn run(
        &self,
        batches: impl Iterator<Item = Result<RecordBatch>>,
        reservation: &mut MemoryReservation,
    ) -> Result<Option<RecordBatch>> {
        let scalar = self.keys.is_empty();
        let mut grouper = Grouper::new(self.keys.len());
        let mut accs = self
            .aggs
            .iter()
            .map(|a| {
                if counts_rows(a) {
                    return Ok(Acc::Rows(Vec::new()));
                }
                if let Some(p) = counts_if(a) {
                    return Ok(Acc::RowsIf(p, Vec::new()));
                }
                let acc = a.create_groups_accumulator()?;
                Ok(match native_of(a, &self.input_schema) {
                    Some((op, col, target)) => Acc::Native(Native { op, col, target, acc }),
                    None => Acc::Df(acc),
                })
            })
            .collect::<Result<Vec<Acc>>>()?;
        // What DataFusion's accumulators are evaluated on: the scan's columns they read,
        // as values; the others as NULL placeholders (no allocation).
        let read: Vec<bool> =
            (0..self.input_schema.fields().len()).map(|i| self.reads(i)).collect();
        let loose = Arc::new(datafusion::arrow::datatypes::Schema::new(
            self.input_schema
                .fields()
                .iter()
                .zip(&read)
                .map(|(f, &r)| {
                    let f = f.as_ref().clone().with_nullable(true);
                    if r { f } else { f.with_data_type(DataType::Null) }
                })
                .collect::<Vec<_>>(),
        ));
        let need_ids = accs.iter().any(|a| matches!(a, Acc::Df(_)));
        // Only rows per group wanted (`COUNT(*)`, or nothing: `DISTINCT`): one coded group
        // column is counted straight from its codes ([`Grouper::count_codes`]).
        let rows_only = accs.iter().all(|a| matches!(a, Acc::Rows(_)));
        let need_values = need_ids || accs.iter().any(|a| matches!(a, Acc::RowsIf(..)));
        // Per batch and key: rows whose condition holds (`Acc::RowsIf`).
        let mut tally: Vec<i64> = Vec::new();
        // Per batch: each row's key (none when scalar), rows per key, each key's group.
        let mut keys: Vec<u32> = Vec::new();
        let mut rows: Vec<u64> = Vec::new();
        let mut ids: Vec<usize> = Vec::new();
        let mut any_rows = false;
        for b in batches {
            let b = b?;
            let n = b.num_rows();
            if n == 0 {
                continue;
            }
            any_rows = true;
            let gid: Vec<usize> = if scalar {
                rows.clear();
                rows.push(n as u64);
                vec![0]
            } else {
                let key_cols: Vec<&ArrayRef> = self.keys.iter().map(|&c| b.column(c)).collect();
                let counted = match key_cols.as_slice() {
                    [col] if rows_only => grouper.count_codes(col, accs.is_empty(), &mut rows)?,
                    _ => None,
                };
                if counted.is_some() {
                    grouper.assign(&rows)
                } else {
                    match grouper.local_codes(&key_cols, &mut keys)? {
                        Some(space) => {
                            count_keys(&keys, space, &mut rows);
                            grouper.assign(&rows)
                        }
                        None => {
                            ids.clear();
                            ids.resize(n, 0);
                            for (k, col) in key_cols.iter().enumerate() {
                                grouper.add_column(k, col, &mut ids)?;
                            }
                            keys.clear();
                            for &g in &ids {
                                keys.push(u32::try_from(g).map_err(|_| {
                                    DataFusionError::Execution("more than 2^32 groups".into())
                                })?);
                            }
                            count_keys(&keys, grouper.len(), &mut rows);
                            (0..grouper.len()).collect()
                        }
                    }
                }
            };
            let total = if scalar { 1 } else { grouper.len() };
            let row_keys = (!scalar).then_some(keys.as_slice());
            // DataFusion's accumulators take a group id per row and values.
            if need_ids {
                ids.clear();
                match row_keys {
                    None => ids.resize(n, 0),
                    Some(k) => ids.extend(k.iter().map(|&k| gid[k as usize])),
                }
            }
            let batch = if need_values {
                let cols = self
                    .input_schema
                    .fields()
                    .iter()
                    .enumerate()
                    .map(|(i, f)| {
                        let c = b.column(i);
                        if !read[i] {
                            Ok(Arc::new(NullArray::new(n)) as ArrayRef)
                        } else if c.data_type() == f.data_type() {
                            Ok(c.clone())
                        } else {
                            cast(c, f.data_type()).map_err(DataFusionError::from)
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                Some(RecordBatch::try_new(loose.clone(), cols)?)
            } else {
                None
            };
            for (acc, a) in accs.iter_mut().zip(&self.aggs) {
                match acc {
                    Acc::Rows(counts) => {
                        counts.resize(total, 0);
                        for (k, &r) in rows.iter().enumerate() {
                            if r > 0 {
                                counts[gid[k]] += r as i64;
                            }
                        }
                    }
                    Acc::RowsIf(p, counts) => {
                        let Some(batch) = &batch else {
                            return Err(DataFusionError::Internal("no values batch".into()));
                        };
                        let mask = p.evaluate(batch)?.into_array(n)?;
                        let Some(mask) = mask.as_any().downcast_ref::<BooleanArray>() else {
                            return Err(DataFusionError::Internal(
                                "a CASE condition that is not boolean".into(),
                            ));
                        };
                        // Rows where the condition is true (NULL is not).
                        let holds = match mask.nulls() {
                            Some(nb) => mask.values() & nb.inner(),
                            None => mask.values().clone(),
                        };
                        counts.resize(total, 0);
                        match row_keys {
                            None => counts[0] += holds.count_set_bits() as i64,
                            Some(k) => {
                                tally.clear();
                                tally.resize(rows.len(), 0);
                                for i in holds.set_indices() {
                                    tally[k[i] as usize] += 1;
                                }
                                for (key, &t) in tally.iter().enumerate() {
                                    if t > 0 {
                                        counts[gid[key]] += t;
                                    }
                                }
                            }
                        }
                    }
                    Acc::Native(x) => x.update(b.column(x.col), row_keys, &rows, &gid, total)?,
                    Acc::Df(acc) => {
                        let Some(batch) = &batch else {
                            return Err(DataFusionError::Internal("no values batch".into()));
                        };
                        let values = a
                            .expressions()
                            .iter()
                            .map(|e| e.evaluate(batch).and_then(|v| v.into_array(n)))
                            .collect::<Result<Vec<_>>>()?;
                        acc.update_batch(&values, &ids, None, total)?;
                    }
                }
            }
            // What the groups hold now counts against the memory limit; past it this
            // partition is DataFusion's aggregate's, which can spill or emit early.
            let held = grouper.bytes
                + accs.iter().map(Acc::size).sum::<usize>()
                + (keys.capacity() + tally.capacity()) * 8
                + (rows.capacity() + ids.capacity()) * std::mem::size_of::<usize>();
            if reservation.try_resize(held).is_err() {
                return Ok(None);
            }
        }
        if !scalar && grouper.len() == 0 {
            return Ok(Some(RecordBatch::new_empty(self.schema.clone())));
        }
        if scalar && !any_rows {
            // No rows: the one group still exists, with each aggregate's empty value. The
            // accumulators learn of the group from one filtered-out row (NULL arguments, a
            // false filter): given no row at all, DataFusion's accumulators take a group
            // they never saw a NULL for as one that saw values, and `min` / `max` / `sum`
            // over an empty table answered their starting values instead of NULL.
            let excluded = BooleanArray::from(vec![false]);
            for (acc, a) in accs.iter_mut().zip(&self.aggs) {
                let values = a
                    .expressions()
                    .iter()
                    .map(|e| Ok(new_null_array(&e.data_type(&self.input_schema)?, 1)))
                    .collect::<Result<Vec<_>>>()?;
                match acc {
                    Acc::Rows(_) | Acc::RowsIf(..) => {}
                    Acc::Native(Native { acc, .. }) | Acc::Df(acc) => {
                        acc.update_batch(&values, &[0], Some(&excluded), 1)?
                    }
                }
            }
        }
        let total = if scalar { 1 } else { grouper.len() };
        let mut cols: Vec<ArrayRef> =
            if scalar { Vec::new() } else { grouper.key_arrays(&self.schema)? };
        for acc in &mut accs {
            match acc {
                Acc::Rows(counts) | Acc::RowsIf(_, counts) => {
                    counts.resize(total, 0);
                    cols.push(Arc::new(Int64Array::from(std::mem::take(counts))));
                }
                Acc::Native(Native { acc, .. }) | Acc::Df(acc) => {
                    if self.partial {
                        cols.extend(acc.state(EmitTo::All)?)
                    } else {
                        cols.push(acc.evaluate(EmitTo::All)?)
                    }
                }
            }
        }
        let cols =
            cols.into_iter()
                .zip(self.schema.fields())
                .map(|(c, f)| {
                    if c.data_type() == f.data_type() {
                        Ok(c)
                    } else {
                        Ok(cast(&c, f.data_type())?)
                    }
                })
                .collect::<Result<Vec<_>>>()?;
        Ok(Some(RecordBatch::try_new(self.schema.clone(), cols)?))
    }

    /// Whether any aggregate reads scan column `i`.
    fn reads(&self, i: usize) -> bool {
        self.aggs.iter().any(|a| {
            a.expressions().iter().any(|e| {
                let mut uses = false;
                let _ = e.apply(|x| {
                    if x.downcast_ref::<Column>().is_some_and(|c| c.index() == i) {
                        uses = true;
                        return Ok(TreeNodeRecursion::Stop);
                    }
                    Ok(TreeNodeRecursion::Continue)
                });
                uses
            })
        })
    }
}

/// One aggregate's running state.
enum Acc {
    /// `count` of a non-NULL constant (`COUNT(*)`): rows per group, counted here. Its
    /// partial state and its value are both that Int64 count.
    Rows(Vec<i64>),
    /// `count(CASE WHEN p THEN c END)` with `c` a non-NULL constant ([`counts_if`]): rows
    /// per group where `p` is true, counted here from `p`'s mask; state and value as for
    /// [`Acc::Rows`].
    RowsIf(Arc<dyn PhysicalExpr>, Vec<i64>),
    /// `count`, `sum`, `avg`, `min` or `max` of one column: folded here (see [`Native`]).
    Native(Native),
    /// Any other aggregate: DataFusion's own groups accumulator, fed row by row.
    Df(Box<dyn GroupsAccumulator>),
}

impl Acc {
    /// Bytes it holds, for the memory pool.
    fn size(&self) -> usize {
        match self {
            Acc::Rows(v) | Acc::RowsIf(_, v) => v.capacity() * std::mem::size_of::<i64>(),
            Acc::Native(Native { acc, .. }) | Acc::Df(acc) => acc.size(),
        }
    }
}

/// What a [`Native`] aggregate computes.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

/// An aggregate of one column folded per batch key by a tight loop over the column's
/// codes (a value table lookup per row) or values, without materialising the column or
/// a group id per row. The per-key results go to DataFusion's own accumulator as partial
/// states (`count`, `sum`, `avg`, merged with its `merge_batch`) or as one candidate per
/// key (`min`, `max`, through its `update_batch`), so DataFusion's rules (overflow,
/// NULLs, NaN ordering) decide the result and its state and value are DataFusion's.
struct Native {
    op: Op,
    /// The scan output column it reads.
    col: usize,
    /// The type the argument is evaluated as: the column's, or a cast's that cannot fail.
    target: DataType,
    acc: Box<dyn GroupsAccumulator>,
}

/// The [`Native`] form of `a`, when it has one: `count` of a column, or `sum` / `avg` /
/// `min` / `max` of an Int64 or Float64 column (or of a column under a cast to those that
/// cannot fail), with DataFusion's state layout as expected.
fn native_of(a: &AggregateFunctionExpr, schema: &SchemaRef) -> Option<(Op, usize, DataType)> {
    let op = match a.fun().name() {
        "count" => Op::Count,
        "sum" => Op::Sum,
        "avg" => Op::Avg,
        "min" => Op::Min,
        "max" => Op::Max,
        _ => return None,
    };
    if a.is_distinct() || !a.order_bys().is_empty() {
        return None;
    }
    let args = a.expressions();
    let [arg] = args.as_slice() else { return None };
    let (col, target) = if let Some(c) = arg.downcast_ref::<Column>() {
        (c.index(), schema.fields().get(c.index())?.data_type().clone())
    } else if let Some(x) = arg.downcast_ref::<CastExpr>() {
        let c = x.expr().downcast_ref::<Column>()?;
        let from = schema.fields().get(c.index())?.data_type();
        let to = x.cast_type();
        let never_fails = match to {
            DataType::Int64 => {
                matches!(from, DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64)
            }
            DataType::Float64 => from.is_integer() || from.is_floating(),
            _ => false,
        };
        if !never_fails {
            return None;
        }
        (c.index(), to.clone())
    } else {
        return None;
    };
    let states: Vec<DataType> =
        a.state_fields().ok()?.iter().map(|f| f.data_type().clone()).collect();
    let numeric = matches!(target, DataType::Int64 | DataType::Float64);
    let fits = match op {
        Op::Count => states == [DataType::Int64],
        Op::Sum => numeric && states == [target.clone()],
        Op::Avg => target == DataType::Float64 && states == [DataType::UInt64, DataType::Float64],
        Op::Min | Op::Max => numeric,
    };
    fits.then_some((op, col, target))
}

impl Native {
    /// Folds one batch: `keys` gives each row's key (`None`: every row has key 0),
    /// `rows[k]` how many rows have key `k`, `gid[k]` its group id.
    fn update(
        &mut self,
        col: &ArrayRef,
        keys: Option<&[u32]>,
        rows: &[u64],
        gid: &[usize],
        total: usize,
    ) -> Result<()> {
        let nk = gid.len();
        if self.op == Op::Count {
            let mut cnt = vec![0u64; nk];
            match (col.logical_nulls(), keys) {
                (None, _) => cnt.copy_from_slice(rows),
                (Some(nulls), None) => cnt[0] = (nulls.len() - nulls.null_count()) as u64,
                (Some(nulls), Some(keys)) => {
                    for r in nulls.valid_indices() {
                        cnt[keys[r] as usize] += 1;
                    }
                }
            }
            let (idx, present) = present_keys(rows, gid);
            let counts = Int64Array::from_iter_values(present.iter().map(|&k| cnt[k] as i64));
            return self.acc.merge_batch(&[Arc::new(counts)], &idx, total);
        }
        match self.target {
            DataType::Int64 => self.update_typed::<Int64Type>(col, keys, rows, gid, total),
            _ => self.update_typed::<Float64Type>(col, keys, rows, gid, total),
        }
    }

    fn update_typed<T>(
        &mut self,
        col: &ArrayRef,
        keys: Option<&[u32]>,
        rows: &[u64],
        gid: &[usize],
        total: usize,
    ) -> Result<()>
    where
        T: ArrowPrimitiveType,
        T::Native: Value,
    {
        let nk = gid.len();
        let n = col.len();
        let nulls = col.logical_nulls();
        let part = if let DataType::Dictionary(kt, _) = col.data_type() {
            let tab = cast(&dictionary_values(col)?, &self.target)?;
            let tab = tab.as_primitive::<T>().values();
            match kt.as_ref() {
                DataType::UInt8 => {
                    let c = col.as_dictionary::<UInt8Type>().keys().values();
                    fold(self.op, |r| tab[c[r] as usize], n, nulls.as_ref(), keys, nk)
                }
                DataType::UInt16 => {
                    let c = col.as_dictionary::<UInt16Type>().keys().values();
                    fold(self.op, |r| tab[c[r] as usize], n, nulls.as_ref(), keys, nk)
                }
                DataType::UInt32 => {
                    let c = col.as_dictionary::<UInt32Type>().keys().values();
                    fold(self.op, |r| tab[c[r] as usize], n, nulls.as_ref(), keys, nk)
                }
                t => {
                    return Err(DataFusionError::Internal(format!("dictionary keys of type {t}")));
                }
            }
        } else {
            let values = if col.data_type() == &self.target {
                col.clone()
            } else {
                cast(col, &self.target)?
            };
            let v = values.as_primitive::<T>().values();
            fold(self.op, |r| v[r], n, nulls.as_ref(), keys, nk)
        };
        if part.carry != 0 {
            return Err(DataFusionError::Execution(format!(
                "integer overflow: a sum does not fit {}",
                self.target
            )));
        }
        let (idx, present) = present_keys(rows, gid);
        let value = |k: usize| (part.cnt[k] > 0).then(|| part.acc[k]);
        let values: ArrayRef =
            Arc::new(PrimitiveArray::<T>::from_iter(present.iter().map(|&k| value(k))));
        match self.op {
            Op::Sum => self.acc.merge_batch(&[values], &idx, total),
            Op::Avg => {
                let counts = UInt64Array::from_iter(
                    present.iter().map(|&k| (part.cnt[k] > 0).then_some(part.cnt[k])),
                );
                self.acc.merge_batch(&[Arc::new(counts), values], &idx, total)
            }
            _ => self.acc.update_batch(&[values], &idx, None, total),
        }
    }
}

/// The group ids and the keys of the keys some row of the batch has.
fn present_keys(rows: &[u64], gid: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let present: Vec<usize> = (0..rows.len()).filter(|&k| rows[k] > 0).collect();
    (present.iter().map(|&k| gid[k]).collect(), present)
}

/// A number a [`Native`] aggregate folds: adds as `sum` does and orders as `min` / `max`
/// do (`partial_cmp`, a NaN replaces). Integers add with wrapping and count the carries
/// (+1 for each add that wrapped upwards, −1 downwards): the exact sum is the wrapped one
/// plus `carry · 2^64`, so it fits a BIGINT exactly when the net carry is 0 — an overflow
/// check without a branch in the loop, whatever order the lanes add in.
trait Value: Copy + PartialOrd + Default {
    fn plus(self, other: Self, carry: &mut i64) -> Self;
}

impl Value for i64 {
    #[inline(always)]
    fn plus(self, other: i64, carry: &mut i64) -> i64 {
        let (s, wrapped) = self.overflowing_add(other);
        *carry += i64::from(wrapped) * (1 | (other >> 63));
        s
    }
}

impl Value for f64 {
    #[inline(always)]
    fn plus(self, other: f64, _carry: &mut i64) -> f64 {
        self + other
    }
}

/// Per key: rows with a value, and their sum (`Sum`, `Avg`) or extreme (`Min`, `Max`);
/// `carry` is the sum's net carry (see [`Value`]), not 0 when it does not fit.
struct Partial<T> {
    cnt: Vec<u64>,
    acc: Vec<T>,
    carry: i64,
}

/// Whether `new` replaces `cur` as the minimum (`MIN`) or maximum (`MAX`): DataFusion's rule.
#[inline(always)]
fn replaces<T: Value>(max: bool, new: T, cur: T) -> bool {
    use std::cmp::Ordering::{Greater, Less};
    match new.partial_cmp(&cur) {
        None => true,
        Some(o) => o == if max { Greater } else { Less },
    }
}

/// Folds `n` rows (value of row `r`: `get(r)`) per key for `op` (not `Count`).
fn fold<T: Value>(
    op: Op,
    get: impl Fn(usize) -> T,
    n: usize,
    nulls: Option<&NullBuffer>,
    keys: Option<&[u32]>,
    nk: usize,
) -> Partial<T> {
    match op {
        Op::Min => fold_op::<T, 1>(get, n, nulls, keys, nk),
        Op::Max => fold_op::<T, 2>(get, n, nulls, keys, nk),
        _ => fold_op::<T, 0>(get, n, nulls, keys, nk),
    }
}

/// [`fold`] for one operation: `OP` 0 sums, 1 keeps the minimum, 2 the maximum.
fn fold_op<T: Value, const OP: u8>(
    get: impl Fn(usize) -> T,
    n: usize,
    nulls: Option<&NullBuffer>,
    keys: Option<&[u32]>,
    nk: usize,
) -> Partial<T> {
    let mut cnt = vec![0u64; nk];
    let mut acc = vec![T::default(); nk];
    // Net carries of every key's sum: any key's not 0 is an overflow (see `Value`).
    let mut carries = vec![0i64; nk];
    let mut put = |k: usize, v: T| {
        let c = &mut cnt[k];
        let a = &mut acc[k];
        if OP == 0 {
            *a = a.plus(v, &mut carries[k]);
        } else if *c == 0 || replaces::<T>(OP == 2, v, *a) {
            *a = v;
        }
        *c += 1;
    };
    match (keys, nulls) {
        (None, None) if n > 0 => {
            // One key, no NULLs: four independent lanes so the adds (or compares) overlap.
            let mut lane = [get(0); 4];
            let mut lane_carry = [0i64; 4];
            if OP == 0 {
                lane = [T::default(); 4];
            }
            let whole = n / 4 * 4;
            for r in (0..whole).step_by(4) {
                for (l, x) in lane.iter_mut().enumerate() {
                    let v = get(r + l);
                    if OP == 0 {
                        *x = x.plus(v, &mut lane_carry[l]);
                    } else if replaces::<T>(OP == 2, v, *x) {
                        *x = v;
                    }
                }
            }
            for r in whole..n {
                put(0, get(r));
            }
            for x in lane {
                put(0, x);
            }
            carries[0] += lane_carry.iter().sum::<i64>();
            // `put` counted the lanes and the tail; the count is the rows.
            cnt[0] = n as u64;
        }
        (None, None) => {}
        (None, Some(nulls)) => {
            for r in nulls.valid_indices() {
                put(0, get(r));
            }
        }
        (Some(keys), None) => {
            for (r, &k) in keys.iter().enumerate().take(n) {
                put(k as usize, get(r));
            }
        }
        (Some(keys), Some(nulls)) => {
            for r in nulls.valid_indices() {
                put(keys[r] as usize, get(r));
            }
        }
    }
    let carry = carries.iter().find(|&&c| c != 0).copied().unwrap_or(0);
    Partial { cnt, acc, carry }
}

/// Rows per key: `rows[k]` = how many of `keys` are `k`, for keys below `space`. Small
/// key spaces count in four interleaved tables so repeated keys do not wait on each other.
fn count_keys(keys: &[u32], space: usize, rows: &mut Vec<u64>) {
    rows.clear();
    rows.resize(space, 0);
    if space <= 4096 {
        let mut t = vec![0u32; 4 * space];
        let whole = keys.len() / 4 * 4;
        for c in keys[..whole].chunks_exact(4) {
            t[c[0] as usize] += 1;
            t[space + c[1] as usize] += 1;
            t[2 * space + c[2] as usize] += 1;
            t[3 * space + c[3] as usize] += 1;
        }
        for &k in &keys[whole..] {
            t[k as usize] += 1;
        }
        for (k, r) in rows.iter_mut().enumerate() {
            *r = (0..4).map(|l| u64::from(t[l * space + k])).sum();
        }
    } else {
        for &k in keys {
            rows[k as usize] += 1;
        }
    }
}

/// Whether `a` counts rows: `count` of one non-NULL literal, without DISTINCT.
/// The condition `p` of `count(CASE WHEN p THEN c END)` (also with `ELSE NULL`) where `c`
/// is a non-NULL constant: such a count is the number of rows where `p` is true (a NULL
/// `p` takes no branch, and the missing ELSE is NULL, which `count` skips).
fn counts_if(a: &AggregateFunctionExpr) -> Option<Arc<dyn PhysicalExpr>> {
    if a.fun().name() != "count" || a.is_distinct() || !a.order_bys().is_empty() {
        return None;
    }
    let args = a.expressions();
    let [arg] = args.as_slice() else { return None };
    let case = arg.downcast_ref::<CaseExpr>()?;
    let [(when, then)] = case.when_then_expr() else { return None };
    let literal = |e: &Arc<dyn PhysicalExpr>, null: bool| {
        e.downcast_ref::<Literal>().is_some_and(|l| l.value().is_null() == null)
    };
    let no_else = case.else_expr().is_none_or(|e| literal(e, true));
    (case.expr().is_none() && literal(then, false) && no_else).then(|| when.clone())
}

fn counts_rows(a: &AggregateFunctionExpr) -> bool {
    let args = a.expressions();
    a.fun().name() == "count"
        && !a.is_distinct()
        && args.len() == 1
        && args[0].downcast_ref::<Literal>().is_some_and(|l| !l.value().is_null())
}

/// Assigns group ids: per column a map from value to a column-local id (made once per
/// dictionary entry), then, level by level, (group id of the columns before, column id) to
/// a group id through a dense table — ids are handed out only when a row has them.
struct Grouper {
    /// Per group column: value → column id, and the values in id order.
    values: Vec<(HashMap<ScalarValue, usize>, Vec<ScalarValue>)>,
    /// Per level `k`: `tables[k][prefix][column id] - 1` is the id at level `k` (0 = not
    /// seen yet); level 0 has the one prefix 0.
    tables: Vec<Vec<Vec<usize>>>,
    /// Per level, the column ids of the key of each id handed out.
    keys: Vec<Vec<Vec<usize>>>,
    /// Per group column of the last coded batch: the column id of each code.
    parts: Vec<Vec<usize>>,
    /// Bytes held by the maps, tables and keys above (kept as they grow), for the memory
    /// pool.
    bytes: usize,
}

impl Grouper {
    fn new(columns: usize) -> Grouper {
        Grouper {
            values: (0..columns).map(|_| (HashMap::new(), Vec::new())).collect(),
            tables: (0..columns).map(|_| Vec::new()).collect(),
            keys: (0..columns).map(|_| Vec::new()).collect(),
            parts: Vec::new(),
            bytes: 0,
        }
    }

    /// Number of groups so far.
    fn len(&self) -> usize {
        self.keys.last().map_or(0, Vec::len)
    }

    fn id_of_value(&mut self, k: usize, v: ScalarValue) -> usize {
        let (map, vals) = &mut self.values[k];
        if let Some(&id) = map.get(&v) {
            return id;
        }
        // The value twice (map key and list) and the map's slot.
        self.bytes += 2 * v.size() + std::mem::size_of::<usize>() * 2;
        vals.push(v.clone());
        map.insert(v, vals.len() - 1);
        vals.len() - 1
    }

    /// The column id of each entry of `values` (a dictionary's values, or plain values).
    fn ids_of(&mut self, k: usize, values: &ArrayRef) -> Result<Vec<usize>> {
        (0..values.len())
            .map(|i| Ok(self.id_of_value(k, ScalarValue::try_from_array(values, i)?)))
            .collect()
    }

    /// The column id of each entry of dictionary `dict` of group column `k`, and of NULL
    /// last: the key space of one coded column (NULL rows take the last key).
    fn entry_ids(&mut self, k: usize, dict: &ArrayRef) -> Result<Vec<usize>> {
        let mut ids = self.ids_of(k, dict)?;
        ids.push(self.id_of_value(k, ScalarValue::try_from(dict.data_type())?));
        Ok(ids)
    }

    /// Batch-local keys of a batch whose group columns all came as dictionary codes: each
    /// row's codes combine into one dense key `c0 + w0 * (c1 + w1 * (…))` (NULL as the
    /// last code of its column), written to `keys`. Returns the key space, or `None`
    /// (nothing done) when a column is not coded or the space is too large; the caller
    /// then goes column by column. [`Grouper::assign`] turns the keys into group ids.
    fn local_codes(&mut self, cols: &[&ArrayRef], keys: &mut Vec<u32>) -> Result<Option<usize>> {
        const MAX_LOCAL: usize = 1 << 16;
        let n = cols.first().map_or(0, |c| c.len());
        // Per column: the column id of each code (the last one: NULL).
        let mut parts: Vec<Vec<usize>> = Vec::with_capacity(cols.len());
        let mut space = 1usize;
        for (k, col) in cols.iter().enumerate() {
            let DataType::Dictionary(_, _) = col.data_type() else { return Ok(None) };
            let dict = dictionary_values(col)?;
            let width = dict.len() + 1;
            space = match space.checked_mul(width) {
                Some(s) if s <= MAX_LOCAL => s,
                _ => return Ok(None),
            };
            parts.push(self.entry_ids(k, &dict)?);
        }
        keys.clear();
        keys.resize(n, 0);
        for (col, col_ids) in cols.iter().zip(&parts).rev() {
            fold_codes(col, col_ids.len() as u32, keys)?;
        }
        self.parts = parts;
        Ok(Some(space))
    }

    /// Rows per code of one dictionary column without NULLs (`rows[code]`, the key space of
    /// [`Grouper::local_codes`] for that column), counted straight from its 1- or 2-byte
    /// codes without batch-local keys; with `presence`, only whether each code occurs
    /// (`rows[code]` 1 or 0): the scan stops once every dictionary entry has been seen. `None`
    /// (nothing done) for other columns; an out-of-range code is an error.
    fn count_codes(
        &mut self,
        col: &ArrayRef,
        presence: bool,
        rows: &mut Vec<u64>,
    ) -> Result<Option<usize>> {
        fn count<T: Copy + Into<usize>>(
            codes: &[T],
            entries: usize,
            presence: bool,
            rows: &mut [u64],
        ) -> Result<()> {
            let out_of_range =
                |c: usize| DataFusionError::Internal(format!("dictionary code {c} out of range"));
            // The slots of the dictionary's entries (the NULL slot after them has no row).
            let rows = rows.get_mut(..entries).ok_or_else(|| out_of_range(entries))?;
            if presence {
                let mut seen = 0usize;
                for run in codes.chunks(256) {
                    for &c in run {
                        let r = rows.get_mut(c.into()).ok_or_else(|| out_of_range(c.into()))?;
                        seen += usize::from(*r == 0);
                        *r = 1;
                    }
                    if seen >= entries {
                        break;
                    }
                }
            } else if size_of::<T>() == 1 {
                // Four interleaved tables, so that repeated codes do not wait on each other.
                let mut t = [[0u32; 256]; 4];
                let mut quads = codes.chunks_exact(4);
                for q in &mut quads {
                    for (table, &c) in t.iter_mut().zip(q) {
                        table[c.into() & 255] += 1;
                    }
                }
                for &c in quads.remainder() {
                    t[0][c.into() & 255] += 1;
                }
                for (c, tables) in (0..256).map(|c| (c, t.iter().map(move |t| t[c]))) {
                    let n: u64 = tables.map(u64::from).sum();
                    match rows.get_mut(c) {
                        Some(r) => *r = n,
                        None if n == 0 => {}
                        None => return Err(out_of_range(c)),
                    }
                }
            } else {
                for &c in codes {
                    *rows.get_mut(c.into()).ok_or_else(|| out_of_range(c.into()))? += 1;
                }
            }
            Ok(())
        }
        if col.null_count() > 0 {
            return Ok(None);
        }
        let DataType::Dictionary(kt, _) = col.data_type() else { return Ok(None) };
        if !matches!(kt.as_ref(), DataType::UInt8 | DataType::UInt16) {
            return Ok(None);
        }
        let dict = dictionary_values(col)?;
        let col_ids = self.entry_ids(0, &dict)?;
        let space = col_ids.len();
        rows.clear();
        rows.resize(space, 0);
        match kt.as_ref() {
            DataType::UInt8 => {
                count(col.as_dictionary::<UInt8Type>().keys().values(), dict.len(), presence, rows)?
            }
            _ => count(
                col.as_dictionary::<UInt16Type>().keys().values(),
                dict.len(),
                presence,
                rows,
            )?,
        }
        self.parts = vec![col_ids];
        Ok(Some(space))
    }

    /// The group id of each batch-local key of the last [`Grouper::local_codes`] that some
    /// row has (`rows[key] > 0`; the others get `usize::MAX`), handing out new ids.
    fn assign(&mut self, rows: &[u64]) -> Vec<usize> {
        let parts = std::mem::take(&mut self.parts);
        let mut gid = vec![usize::MAX; rows.len()];
        for (l, slot) in gid.iter_mut().enumerate() {
            if rows[l] == 0 {
                continue;
            }
            // Decompose the key into column ids and walk the levels once.
            let mut rest = l;
            let mut g = 0;
            for (k, col_ids) in parts.iter().enumerate() {
                let w = col_ids.len();
                g = self.level_id(k, if k == 0 { 0 } else { g }, col_ids[rest % w]);
                rest /= w;
            }
            *slot = g;
        }
        self.parts = parts;
        gid
    }

    /// Folds group column `k` of a batch into `ids` (on entry the group ids of columns
    /// `..k`; on return those of `..=k`).
    fn add_column(&mut self, k: usize, col: &ArrayRef, ids: &mut [usize]) -> Result<()> {
        let col_ids: Vec<usize> = match col.data_type() {
            DataType::Dictionary(_, _) => {
                let dict = dictionary_values(col)?;
                let entry = self.ids_of(k, &dict)?;
                // NULL rows map to the NULL value's id.
                let null_id = if col.null_count() > 0 {
                    Some(self.id_of_value(k, ScalarValue::try_from(dict.data_type())?))
                } else {
                    None
                };
                let codes = codes_of(col)?;
                let mut out = Vec::with_capacity(codes.len());
                for (r, c) in codes.into_iter().enumerate() {
                    out.push(match null_id {
                        Some(nid) if col.is_null(r) => nid,
                        _ => *entry.get(c as usize).ok_or_else(|| {
                            DataFusionError::Internal(format!("dictionary code {c} out of range"))
                        })?,
                    });
                }
                out
            }
            // Memtable rows: a value at a time.
            _ => self.ids_of(k, col)?,
        };
        for (id, c) in ids.iter_mut().zip(col_ids) {
            let prefix = if k == 0 { 0 } else { *id };
            *id = self.level_id(k, prefix, c);
        }
        Ok(())
    }

    /// The id at level `k` of (prefix id, column id), handing out a new one if unseen.
    fn level_id(&mut self, k: usize, prefix: usize, col_id: usize) -> usize {
        let word = std::mem::size_of::<usize>();
        let table = &mut self.tables[k];
        if table.len() <= prefix {
            self.bytes += (prefix + 1 - table.len()) * std::mem::size_of::<Vec<usize>>();
            table.resize_with(prefix + 1, Vec::new);
        }
        let row = &mut table[prefix];
        if row.len() <= col_id {
            self.bytes += (col_id + 1 - row.len()) * word;
            row.resize(col_id + 1, 0);
        }
        if row[col_id] != 0 {
            return row[col_id] - 1;
        }
        let id = self.keys[k].len();
        row[col_id] = id + 1;
        let mut key = if k == 0 { Vec::new() } else { self.keys[k - 1][prefix].clone() };
        key.push(col_id);
        self.bytes += std::mem::size_of::<Vec<usize>>() + key.len() * word;
        self.keys[k].push(key);
        id
    }

    /// The group columns, group by group, typed as `schema`'s first fields.
    fn key_arrays(&self, schema: &SchemaRef) -> Result<Vec<ArrayRef>> {
        let groups = self.keys.last().map(Vec::as_slice).unwrap_or_default();
        (0..self.values.len())
            .map(|k| {
                let t = schema.field(k).data_type();
                if groups.is_empty() {
                    return Ok(new_null_array(t, 0));
                }
                let vals = &self.values[k].1;
                let a = ScalarValue::iter_to_array(groups.iter().map(|key| vals[key[k]].clone()))?;
                if a.data_type() == t { Ok(a) } else { Ok(cast(&a, t)?) }
            })
            .collect()
    }
}

/// `local = local * w + code` for each row of dictionary array `col` (`w - 1` = NULL).
fn fold_codes(col: &ArrayRef, w: u32, local: &mut [u32]) -> Result<()> {
    fn fold<T: Copy + Into<u32>>(keys: &[T], w: u32, local: &mut [u32]) {
        for (l, &c) in local.iter_mut().zip(keys) {
            *l = *l * w + c.into();
        }
    }
    match col.data_type() {
        DataType::Dictionary(k, _) if k.as_ref() == &DataType::UInt8 => {
            fold(col.as_dictionary::<UInt8Type>().keys().values(), w, local)
        }
        DataType::Dictionary(k, _) if k.as_ref() == &DataType::UInt16 => {
            fold(col.as_dictionary::<UInt16Type>().keys().values(), w, local)
        }
        DataType::Dictionary(k, _) if k.as_ref() == &DataType::UInt32 => {
            fold(col.as_dictionary::<UInt32Type>().keys().values(), w, local)
        }
        t => return Err(DataFusionError::Internal(format!("not dictionary codes: {t}"))),
    }
    if col.null_count() > 0 {
        // Undo the code a NULL row holds and put the NULL code in its place.
        let codes = codes_of(col)?;
        for (r, (l, c)) in local.iter_mut().zip(codes).enumerate() {
            if col.is_null(r) {
                *l = *l - c + (w - 1);
            }
        }
    }
    Ok(())
}

impl DisplayAs for GroupByExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys: Vec<&str> =
            self.keys.iter().map(|&k| self.input_schema.field(k).name().as_str()).collect();
        let aggs: Vec<&str> = self.aggs.iter().map(|a| a.name()).collect();
        write!(
            f,
            "BasaltGroupBy: table={}, mode={}, by=[{}], aggr=[{}]",
            self.table,
            if self.partial { "Partial" } else { "Single" },
            keys.join(", "),
            aggs.join(", ")
        )?;
        match &self.join {
            Some(j) => {
                write!(f, ", over ")?;
                j.fmt_as(t, f)?;
            }
            None => {
                if let Some(p) = &self.predicate {
                    write!(f, ", filter={p}")?;
                }
            }
        }
        Ok(())
    }
}

impl ExecutionPlan for GroupByExec {
    fn name(&self) -> &str {
        "BasaltGroupBy"
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        match &self.join {
            Some(j) => vec![j.build()],
            None => vec![],
        }
    }

    no_expressions!();

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (Some(j), Some(build)) = (&self.join, children.pop()) else { return Ok(self) };
        let join = Arc::new(j.with_build(build));
        let same = ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute);
        let fallback = self.fallback.clone().replace_children(vec![join.clone()], same)?;
        Ok(Arc::new(GroupByExec { join: Some(join), fallback, ..self.as_ref().clone() }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        use futures::StreamExt as _;
        let units = partition_units(&self.groups, partition, "BasaltGroupBy")?;
        let me = GroupByExec { groups: Vec::new(), ..self.clone() };
        let mut reservation = MemoryConsumer::new(format!("BasaltGroupBy[{partition}]"))
            .register(context.memory_pool());
        let over_limit = MetricBuilder::new(&self.metrics).counter("over_memory_limit", partition);
        let schema = self.schema.clone();
        // The work happens when the stream is first polled (on DataFusion's runtime).
        Ok(deferred_stream(self.schema.clone(), async move {
            let out = match me.join.clone() {
                Some(j) => {
                    me.run(j.coded_batches(units, context.clone()).await?, &mut reservation)?
                }
                None => {
                    let scan = me
                        .snapshot
                        .scan_units_filtered(&me.projection, me.predicate.clone(), units)
                        .map_err(storage_err)?
                        .with_codes();
                    me.run(scan.map(|b| b.map_err(storage_err)), &mut reservation)?
                }
            };
            drop(reservation);
            Ok(match out {
                Some(b) => futures::stream::once(async move { Ok(b) }).boxed(),
                None => {
                    over_limit.add(1);
                    // Its batches under this exec's schema (the same types; field names or
                    // nullability may differ, see `with_schema`).
                    me.fallback
                        .execute(partition, context)?
                        .map(move |b| {
                            Ok(RecordBatch::try_new(schema.clone(), b?.columns().to_vec())?)
                        })
                        .boxed()
                }
            })
        }))
    }
}
