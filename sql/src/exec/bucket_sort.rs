//! Bucket sort by dictionary value: a sort of a Basalt scan whose leading key is a
//! dictionary-encoded column, when only a prefix of its output is wanted, becomes
//! [`BucketSortExec`], which emits the output one leading-key value at a time — the rows of
//! the first value (selected in storage by code), sorted by the remaining keys, then the
//! next value's — so a consumer that stops early never reads or sorts the other values'
//! rows.
//!
//! DataFusion sorts every row before the first one comes out; under a window function with
//! `PARTITION BY city` and an outer `LIMIT 1000` (`SortExec` on `city, score` feeding
//! `BoundedWindowAggExec`), or under `ORDER BY age, name LIMIT 100 OFFSET 100000`, that is
//! a sort of the whole table for the first thousand or hundred thousand rows. Here the
//! first value's rows are all that a `LIMIT 1000` over a window partitioned by the key
//! reads when the value has at least that many rows; each value's window partition is
//! computed in full, so the answers are the ones a full sort gives.
//!
//! When it applies: a [`SortExec`] (partitions preserved or not) whose input is a Basalt
//! scan without a limit (directly, or under a repartition or a partition merge, which the
//! bucket sort does not need), whose first sort key is a plain column that is either Utf8
//! and dictionary-encoded in every row group of the snapshot, or Int64 (storage compares
//! both exactly as the sort orders them; it dictionary-encodes text, and packs integers);
//! and the sort has a fetch of at least [`MIN_FETCH`] rows (a smaller one stays DataFusion's
//! top-k heap), or has none and sits under a limit through operators that stream
//! (projections, bounded window aggregates, partition merges, limits). The exec has one
//! output partition with the sort's ordering; a window or merge above it is rebuilt over
//! that one partition. At execution it reads the key and `_id`
//! columns of the selected rows once, grouping the ids by key value (through a table per
//! dictionary, or per integer offset over a row group's range); then, value after value in
//! the sort's order, it fetches that group's rows by id (`TableSnapshot::get_many`, a
//! gather per row group) and sorts them by the other keys. With more than [`MAX_BUCKETS`]
//! values, an integer row group spanning more than [`INT_RANGE`], or more ids than the
//! memory pool gives it, it runs the original sort instead (merged into one partition; it
//! spills). The ids not yet read and the current value's rows count against the pool; a
//! value's rows that do not fit end the statement with "resources exhausted". The rule is
//! off with the connection's fast paths.
//!
//! What this module must not do: change the rows a sort returns or their order under its
//! keys (rows equal under every key may come in another order, as between DataFusion's own
//! sorts), or read storage other than through the snapshot and units the scan was planned
//! with.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::compute::{lexsort_to_indices, max, min, take_record_batch};
use datafusion::arrow::datatypes::{DataType, Int64Type, SchemaRef, UInt64Type};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_expr::{EquivalenceProperties, LexOrdering};
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties,
};
use futures::StreamExt;

use basalt_storage::{ID_COLUMN, Predicate, ScanUnit, TableSnapshot};

use crate::binding::storage_err;
use crate::exec::scan::{ScanExec, ScanParts, deferred_stream};

/// More distinct leading-key values than this: the original sort runs instead (each value
/// is one gather by id and one sort; many small ones are DataFusion's sort done slowly).
pub const MAX_BUCKETS: usize = 256;

/// Integer keys: a row group whose values span more than this many integers runs the
/// original sort (its distinct values are found through a bitmap over the range).
pub const INT_RANGE: usize = 1 << 16;

/// Sorts with a fetch of fewer rows than this stay DataFusion's top-k (a heap of the best
/// rows, fed a few columns), unless a limit above a window reaches them.
pub const MIN_FETCH: usize = 2048;

/// Rows per emitted batch.
const BATCH_ROWS: usize = 8192;

/// A sort emitted one leading-key value at a time (see the module docs).
#[derive(Debug, Clone)]
pub struct BucketSortExec {
    snapshot: Arc<TableSnapshot>,
    /// Full-schema positions the scan reads (scan output `i` is `projection[i]`).
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    units: Vec<ScanUnit>,
    /// Name of the leading key's (Utf8 or Int64) column.
    key: String,
    ordering: LexOrdering,
    fetch: Option<usize>,
    /// The original sort, merged into one partition: run when there are too many values.
    fallback: Arc<dyn ExecutionPlan>,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
}

impl BucketSortExec {
    /// The bucket form of `sort` (the node `plan`), when it applies.
    pub(crate) fn replace(
        sort: &SortExec,
        plan: &Arc<dyn ExecutionPlan>,
    ) -> Option<BucketSortExec> {
        let mut input = sort.input();
        if let Some(r) = input.downcast_ref::<RepartitionExec>() {
            input = r.input();
        } else if let Some(c) = input.downcast_ref::<CoalescePartitionsExec>() {
            input = c.input();
        }
        let scan = input.downcast_ref::<ScanExec>()?;
        let ScanParts { snapshot, projection, predicate, groups } = scan.parts()?;
        let ordering = sort.expr().clone();
        let first = ordering.first();
        let c = first.expr.downcast_ref::<Column>()?;
        let full = *projection.get(c.index())?;
        let field = scan.schema().fields().get(c.index())?.clone();
        let ok = match field.data_type() {
            DataType::Utf8 => snapshot.is_dictionary_encoded(full),
            DataType::Int64 => true,
            _ => false,
        };
        if !ok {
            return None;
        }
        let fallback: Arc<dyn ExecutionPlan> = if plan.output_partitioning().partition_count() > 1 {
            Arc::new(
                SortPreservingMergeExec::new(ordering.clone(), plan.clone())
                    .with_fetch(sort.fetch()),
            )
        } else {
            plan.clone()
        };
        let schema = sort.schema();
        let props = PlanProperties::new(
            EquivalenceProperties::new_with_orderings(schema.clone(), [ordering.iter().cloned()]),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Some(BucketSortExec {
            snapshot: snapshot.clone(),
            projection: projection.to_vec(),
            predicate: predicate.cloned(),
            units: groups.iter().flatten().copied().collect(),
            key: field.name().clone(),
            ordering,
            fetch: sort.fetch(),
            fallback,
            schema,
            props: Arc::new(props),
        })
    }

    /// The `_id`s of the selected rows grouped by key value, the groups in output order
    /// (NULLs as their own group); `None` when there are more than [`MAX_BUCKETS`] values,
    /// or an integer row group spans more than [`INT_RANGE`]. One pass over the key and
    /// `_id` columns.
    ///
    /// `None` as well when the ids outgrow what `reservation` may hold (the original sort,
    /// which spills, runs instead).
    fn buckets(&self, reservation: &mut MemoryReservation) -> Result<Option<Vec<Vec<u64>>>> {
        let full = self.snapshot.schema().full_schema();
        let column = |name: &str| {
            full.index_of(name)
                .map_err(|e| DataFusionError::Internal(format!("bucket sort column: {e}")))
        };
        let (key, id) = (column(&self.key)?, column(ID_COLUMN)?);
        let scan = self
            .snapshot
            .scan_units_filtered(&[key, id], self.predicate.clone(), self.units.clone())
            .map_err(storage_err)?
            .with_codes();
        let mut groups = Groups::default();
        let mut held = 0;
        for b in scan {
            let b = b.map_err(storage_err)?;
            let Some(ids) = b.column(1).as_primitive_opt::<UInt64Type>() else {
                return Err(DataFusionError::Internal("bucket sort: _id is not UInt64".into()));
            };
            if !groups.add(b.column(0), ids.values())? {
                return Ok(None);
            }
            held += ids.len() * std::mem::size_of::<u64>();
            if reservation.try_resize(held).is_err() {
                return Ok(None);
            }
        }
        let options = self.ordering.first().options;
        Ok(Some(groups.ordered(options.descending, options.nulls_first)))
    }

    /// The rows with these `_id`s, sorted by the other keys (at most `limit` of them).
    fn bucket(&self, ids: &[u64], limit: Option<usize>) -> Result<Option<RecordBatch>> {
        let batch = self.snapshot.get_many(ids, &self.projection).map_err(storage_err)?;
        if batch.num_rows() == 0 {
            return Ok(None);
        }
        let rest = &self.ordering[1..];
        if rest.is_empty() {
            let n = limit.map_or(batch.num_rows(), |l| l.min(batch.num_rows()));
            return Ok(Some(batch.slice(0, n)));
        }
        let columns =
            rest.iter().map(|e| e.evaluate_to_sort_column(&batch)).collect::<Result<Vec<_>>>()?;
        let idx = lexsort_to_indices(&columns, limit)?;
        Ok(Some(take_record_batch(&batch, &idx)?))
    }
}

/// Row ids grouped by key value while scanning.
#[derive(Default)]
struct Groups {
    strs: HashMap<String, usize>,
    ints: HashMap<i64, usize>,
    ids: Vec<Vec<u64>>,
    nulls: Vec<u64>,
}

impl Groups {
    /// The group of a new or seen value.
    fn group<K: std::hash::Hash + Eq>(
        map: &mut HashMap<K, usize>,
        ids: &mut Vec<Vec<u64>>,
        k: K,
    ) -> usize {
        *map.entry(k).or_insert_with(|| {
            ids.push(Vec::new());
            ids.len() - 1
        })
    }

    /// Adds a batch's keys (codes or values) and ids; `false` when there are too many
    /// values.
    fn add(&mut self, keys: &ArrayRef, ids: &[u64]) -> Result<bool> {
        // Each row's group through a table: per dictionary entry, or per integer offset.
        let (table, at): (Vec<usize>, Vec<usize>) = match keys.data_type() {
            DataType::Dictionary(_, _) => {
                let values = crate::codes::dictionary_values(keys)?;
                let Some(v) = values.as_string_opt::<i32>() else {
                    return Err(DataFusionError::Internal(format!(
                        "bucket sort key of type {}",
                        values.data_type()
                    )));
                };
                let table = v
                    .iter()
                    .map(|s| {
                        s.map_or(usize::MAX, |s| {
                            Self::group(&mut self.strs, &mut self.ids, s.to_string())
                        })
                    })
                    .collect();
                let codes = crate::codes::codes_of(keys)?;
                (table, codes.into_iter().map(|c| c as usize).collect())
            }
            DataType::Utf8 => {
                let v = keys.as_string::<i32>();
                let mut table = Vec::new();
                let mut at = Vec::with_capacity(v.len());
                for s in v.iter() {
                    at.push(table.len());
                    table.push(s.map_or(usize::MAX, |s| {
                        Self::group(&mut self.strs, &mut self.ids, s.to_string())
                    }));
                }
                (table, at)
            }
            DataType::Int64 => {
                let v = keys.as_primitive::<Int64Type>();
                let (Some(lo), Some(hi)) = (min(v), max(v)) else {
                    // Every key NULL.
                    self.nulls.extend_from_slice(ids);
                    return Ok(true);
                };
                let Some(width) = hi.checked_sub(lo).and_then(|w| usize::try_from(w).ok()) else {
                    return Ok(false);
                };
                if width >= INT_RANGE {
                    return Ok(false);
                }
                let mut table = vec![usize::MAX; width + 1];
                let mut at = Vec::with_capacity(v.len());
                for (i, &x) in v.values().iter().enumerate() {
                    // lo <= x <= hi for valid rows; NULL rows point at a NULL slot below.
                    let o = if v.is_valid(i) { (x - lo) as usize } else { usize::MAX };
                    if o != usize::MAX && table[o] == usize::MAX {
                        table[o] = Self::group(&mut self.ints, &mut self.ids, x);
                    }
                    at.push(o);
                }
                // Row `i` reads `table[at[i]]`; NULL rows read the slot past the end.
                table.push(usize::MAX);
                let last = table.len() - 1;
                for o in &mut at {
                    if *o == usize::MAX {
                        *o = last;
                    }
                }
                (table, at)
            }
            t => {
                return Err(DataFusionError::Internal(format!("bucket sort key of type {t}")));
            }
        };
        if self.ids.len() > MAX_BUCKETS {
            return Ok(false);
        }
        for (r, (&id, &a)) in ids.iter().zip(&at).enumerate() {
            let g = if keys.is_null(r) {
                usize::MAX
            } else {
                table.get(a).copied().unwrap_or(usize::MAX)
            };
            match self.ids.get_mut(g) {
                Some(v) => v.push(id),
                None => self.nulls.push(id),
            }
        }
        Ok(true)
    }

    /// The groups in output order: by value, ascending or descending, NULLs first or last.
    fn ordered(mut self, descending: bool, nulls_first: bool) -> Vec<Vec<u64>> {
        let mut order: Vec<usize> = Vec::with_capacity(self.ids.len());
        if !self.strs.is_empty() {
            let mut keys: Vec<(String, usize)> = self.strs.drain().collect();
            keys.sort();
            order.extend(keys.into_iter().map(|(_, g)| g));
        } else {
            let mut keys: Vec<(i64, usize)> = self.ints.drain().collect();
            keys.sort();
            order.extend(keys.into_iter().map(|(_, g)| g));
        }
        if descending {
            order.reverse();
        }
        let mut out: Vec<Vec<u64>> =
            order.into_iter().map(|g| std::mem::take(&mut self.ids[g])).collect();
        if !self.nulls.is_empty() {
            if nulls_first {
                out.insert(0, std::mem::take(&mut self.nulls));
            } else {
                out.push(std::mem::take(&mut self.nulls));
            }
        }
        out
    }
}

/// The emitted batches: bucket after bucket, cut into batches of [`BATCH_ROWS`].
struct Buckets {
    exec: BucketSortExec,
    buckets: std::vec::IntoIter<Vec<u64>>,
    current: Option<(RecordBatch, usize)>,
    left: Option<usize>,
    /// The ids of the buckets not yet read and the current bucket's rows.
    reservation: MemoryReservation,
}

impl Iterator for Buckets {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if self.left == Some(0) {
                return None;
            }
            if let Some((b, at)) = &mut self.current
                && *at < b.num_rows()
            {
                let mut n = BATCH_ROWS.min(b.num_rows() - *at);
                if let Some(l) = &mut self.left {
                    n = n.min(*l);
                    *l -= n;
                }
                let out = b.slice(*at, n);
                *at += n;
                return Some(Ok(out));
            }
            self.current = None;
            let ids = self.buckets.next()?;
            let rest: usize = self.buckets.as_slice().iter().map(Vec::len).sum();
            match self.exec.bucket(&ids, self.left) {
                Ok(b) => {
                    let rows = b.as_ref().map_or(0, RecordBatch::get_array_memory_size);
                    let held = rest * std::mem::size_of::<u64>() + rows;
                    if let Err(e) = self.reservation.try_resize(held) {
                        return Some(Err(e));
                    }
                    self.current = b.map(|b| (b, 0));
                }
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl DisplayAs for BucketSortExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BasaltBucketSort: table={}, key={}, expr=[{}]",
            self.snapshot.name(),
            self.key,
            self.ordering
        )?;
        if let Some(p) = &self.predicate {
            write!(f, ", filter={p}")?;
        }
        if let Some(n) = self.fetch {
            write!(f, ", fetch={n}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for BucketSortExec {
    fn name(&self) -> &str {
        "BasaltBucketSort"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.fallback]
    }

    no_expressions!();

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(fallback) = children.pop() else { return Ok(self) };
        Ok(Arc::new(BucketSortExec { fallback, ..(*self).clone() }))
    }

    fn fetch(&self) -> Option<usize> {
        self.fetch
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "BasaltBucketSort has no partition {partition}"
            )));
        }
        let me = self.clone();
        let mut reservation =
            MemoryConsumer::new("BasaltBucketSort").register(context.memory_pool());
        Ok(deferred_stream(self.schema.clone(), async move {
            Ok(match me.buckets(&mut reservation)? {
                Some(buckets) => {
                    let left = me.fetch;
                    futures::stream::iter(Buckets {
                        exec: me,
                        buckets: buckets.into_iter(),
                        current: None,
                        left,
                        reservation,
                    })
                    .boxed()
                }
                None => {
                    drop(reservation);
                    me.fallback.execute(0, context)?.boxed()
                }
            })
        }))
    }
}
