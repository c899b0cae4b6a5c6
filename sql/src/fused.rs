//! Fused group-by: a physical optimizer rule that replaces a partial (or single-stage)
//! `AggregateExec` reading a Basalt scan directly with [`GroupByExec`], which groups on
//! **dictionary codes** instead of materialised values.
//!
//! DataFusion's hash aggregation over a Basalt scan would first decode every group value
//! (a string per row for `GROUP BY city`) and then hash each one. Segments already store
//! such columns as a sorted dictionary plus 1–4-byte codes per row, so [`GroupByExec`]
//! reads the codes, maps each *dictionary entry* (not each row) to a group id once per row
//! group, and turns codes into group ids with one table lookup per row; several group
//! columns combine through dense tables. The aggregates themselves are DataFusion's own
//! `GroupsAccumulator`s fed with those group ids, so their results (and their partial
//! states, which the final aggregate above merges as before) are exactly DataFusion's.
//!
//! When it applies: the aggregate's input is a Basalt scan without a limit (its filter
//! already evaluated in storage, on codes); there is no grouping set; every group
//! expression is a column of the scan that is dictionary-encoded in every row group of the
//! snapshot; every aggregate supports groups accumulators and has no DISTINCT, ORDER BY or
//! FILTER; the mode is `Partial` or `Single`. Memtable rows (values, not codes) are grouped
//! through the same per-value map. The rule is off when the connection's fast paths are
//! off (`Connection::set_fast_paths(false)`), which is how the tests compare the two.
//!
//! What this module must not do: change what a query returns, or read storage other than
//! through the snapshot and units the scan was planned with.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, NullArray, RecordBatch, new_null_array,
};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, SchemaRef, UInt8Type, UInt16Type, UInt32Type, UInt64Type,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use basalt_storage::{Predicate, ScanUnit, TableSnapshot};

use crate::provider::{ScanExec, ScanParts, partition_units, storage_err};

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
            let Some(agg) = node.downcast_ref::<AggregateExec>() else {
                return Ok(Transformed::no(node));
            };
            Ok(match GroupByExec::fuse(agg)? {
                Some(g) => Transformed::yes(Arc::new(g) as Arc<dyn ExecutionPlan>),
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

/// Group-by on dictionary codes over a Basalt snapshot, with DataFusion's accumulators.
#[derive(Debug)]
pub struct GroupByExec {
    table: String,
    snapshot: Arc<TableSnapshot>,
    /// Full-schema positions the scan read (scan output column `i` is `projection[i]`).
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    groups: Vec<Vec<ScanUnit>>,
    /// Scan output positions of the group columns.
    keys: Vec<usize>,
    aggs: Vec<Arc<AggregateFunctionExpr>>,
    /// `Partial`: emit states (the final aggregate above merges them); `Single`: values.
    partial: bool,
    /// The scan's output schema (what the aggregate expressions are evaluated against).
    input_schema: SchemaRef,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
}

impl GroupByExec {
    /// The fused form of `agg`, when it applies (see the module docs).
    pub fn fuse(agg: &AggregateExec) -> Result<Option<GroupByExec>> {
        let partial = match agg.mode() {
            AggregateMode::Partial => true,
            AggregateMode::Single => false,
            _ => return Ok(None),
        };
        let Some(scan) = agg.input().downcast_ref::<ScanExec>() else { return Ok(None) };
        let Some(ScanParts { snapshot, projection, predicate, groups }) = scan.parts() else {
            return Ok(None);
        };
        let g = agg.group_expr();
        if g.is_empty() || g.has_grouping_set() || agg.limit_options().is_some() {
            return Ok(None);
        }
        if agg.filter_expr().iter().any(Option::is_some) {
            return Ok(None);
        }
        let mut keys = Vec::new();
        for (e, _) in g.expr() {
            let Some(c) = e.downcast_ref::<Column>() else { return Ok(None) };
            let Some(&full) = projection.get(c.index()) else { return Ok(None) };
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
            projection: projection.to_vec(),
            predicate: predicate.cloned(),
            groups: groups.to_vec(),
            keys,
            aggs: agg.aggr_expr().to_vec(),
            partial,
            input_schema: agg.input_schema(),
            schema,
            props: Arc::new(props),
        }))
    }

    /// Groups and aggregates the units of one partition into one batch.
    fn run(&self, units: Vec<ScanUnit>) -> Result<RecordBatch> {
        let mut grouper = Grouper::new(self.keys.len());
        let mut accs = self
            .aggs
            .iter()
            .map(|a| {
                Ok(if counts_rows(a) {
                    Acc::Rows(Vec::new())
                } else {
                    Acc::Df(a.create_groups_accumulator()?)
                })
            })
            .collect::<Result<Vec<Acc>>>()?;
        let scan = self
            .snapshot
            .scan_units_filtered(&self.projection, self.predicate.clone(), units)
            .map_err(storage_err)?
            .with_codes();
        let mut ids = Vec::new();
        // What the aggregates are evaluated on: the scan's columns they read, as values;
        // the others as NULL placeholders (no allocation).
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
        for b in scan {
            let b = b.map_err(storage_err)?;
            let n = b.num_rows();
            ids.clear();
            ids.resize(n, 0usize);
            let key_cols: Vec<&ArrayRef> = self.keys.iter().map(|&c| b.column(c)).collect();
            if !grouper.add_coded(&key_cols, &mut ids)? {
                for (k, col) in key_cols.iter().enumerate() {
                    grouper.add_column(k, col, &mut ids)?;
                }
            }
            // The aggregates read values: columns as the scan schema has them, codes cast
            // back; group-only columns no aggregate reads are left as NULLs.
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
            let batch = RecordBatch::try_new(loose.clone(), cols)?;
            let total = grouper.len();
            for (acc, a) in accs.iter_mut().zip(&self.aggs) {
                match acc {
                    Acc::Rows(counts) => {
                        counts.resize(total, 0);
                        for &g in &ids {
                            counts[g] += 1;
                        }
                    }
                    Acc::Df(acc) => {
                        let values = a
                            .expressions()
                            .iter()
                            .map(|e| e.evaluate(&batch).and_then(|v| v.into_array(n)))
                            .collect::<Result<Vec<_>>>()?;
                        acc.update_batch(&values, &ids, None, total)?;
                    }
                }
            }
        }
        if grouper.len() == 0 {
            return Ok(RecordBatch::new_empty(self.schema.clone()));
        }
        let mut cols: Vec<ArrayRef> = grouper.key_arrays(&self.schema)?;
        for acc in &mut accs {
            match acc {
                Acc::Rows(counts) => {
                    counts.resize(grouper.len(), 0);
                    cols.push(Arc::new(Int64Array::from(std::mem::take(counts))));
                }
                Acc::Df(acc) if self.partial => cols.extend(acc.state(EmitTo::All)?),
                Acc::Df(acc) => cols.push(acc.evaluate(EmitTo::All)?),
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
        Ok(RecordBatch::try_new(self.schema.clone(), cols)?)
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
    /// Any other aggregate: DataFusion's own groups accumulator.
    Df(Box<dyn GroupsAccumulator>),
}

/// Whether `a` counts rows: `count` of one non-NULL literal, without DISTINCT.
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
}

impl Grouper {
    fn new(columns: usize) -> Grouper {
        Grouper {
            values: (0..columns).map(|_| (HashMap::new(), Vec::new())).collect(),
            tables: (0..columns).map(|_| Vec::new()).collect(),
            keys: (0..columns).map(|_| Vec::new()).collect(),
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

    /// Group ids of a batch whose group columns all came as dictionary codes: each row's
    /// codes combine into one dense batch-local code, and each local code present is turned
    /// into a group id once. Returns false (nothing done) when a column is not coded or
    /// the local code space is too large; the caller then goes column by column.
    fn add_coded(&mut self, cols: &[&ArrayRef], ids: &mut [usize]) -> Result<bool> {
        const MAX_LOCAL: usize = 1 << 16;
        let n = ids.len();
        // Per column: codes, the column id of each code (the last one: NULL), and the
        // code space (dictionary entries + 1 for NULL).
        let mut parts: Vec<Vec<usize>> = Vec::with_capacity(cols.len());
        let mut space = 1usize;
        for (k, col) in cols.iter().enumerate() {
            let DataType::Dictionary(_, _) = col.data_type() else { return Ok(false) };
            let dict = dictionary_values(col)?;
            let width = dict.len() + 1;
            space = match space.checked_mul(width) {
                Some(s) if s <= MAX_LOCAL => s,
                _ => return Ok(false),
            };
            let mut col_ids = self.ids_of(k, &dict)?;
            col_ids.push(self.id_of_value(k, ScalarValue::try_from(dict.data_type())?));
            parts.push(col_ids);
        }
        // Batch-local code of each row: c0 + w0 * (c1 + w1 * (…)), NULL as the last code.
        let mut local = vec![0u32; n];
        for (col, col_ids) in cols.iter().zip(&parts).rev() {
            fold_codes(col, col_ids.len() as u32, &mut local)?;
        }
        let mut gid = vec![usize::MAX; space];
        for (r, &l) in local.iter().enumerate() {
            let slot = &mut gid[l as usize];
            if *slot == usize::MAX {
                // Decompose the local code into column ids and walk the levels once.
                let mut rest = l;
                let mut g = 0;
                for (k, col_ids) in parts.iter().enumerate() {
                    let w = col_ids.len() as u32;
                    let c = (rest % w) as usize;
                    rest /= w;
                    g = self.level_id(k, if k == 0 { 0 } else { g }, col_ids[c]);
                }
                *slot = g;
            }
            ids[r] = *slot;
        }
        Ok(true)
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
        let table = &mut self.tables[k];
        if table.len() <= prefix {
            table.resize_with(prefix + 1, Vec::new);
        }
        let row = &mut table[prefix];
        if row.len() <= col_id {
            row.resize(col_id + 1, 0);
        }
        if row[col_id] != 0 {
            return row[col_id] - 1;
        }
        let id = self.keys[k].len();
        row[col_id] = id + 1;
        let mut key = if k == 0 { Vec::new() } else { self.keys[k - 1][prefix].clone() };
        key.push(col_id);
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

/// The values of a dictionary array.
fn dictionary_values(col: &ArrayRef) -> Result<ArrayRef> {
    Ok(match col.data_type() {
        DataType::Dictionary(k, _) => match k.as_ref() {
            DataType::UInt8 => col.as_dictionary::<UInt8Type>().values().clone(),
            DataType::UInt16 => col.as_dictionary::<UInt16Type>().values().clone(),
            DataType::UInt32 => col.as_dictionary::<UInt32Type>().values().clone(),
            DataType::UInt64 => col.as_dictionary::<UInt64Type>().values().clone(),
            t => return Err(DataFusionError::Internal(format!("dictionary keys of type {t}"))),
        },
        t => return Err(DataFusionError::Internal(format!("not a dictionary: {t}"))),
    })
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

/// The codes of a dictionary array (NULL rows give whatever code they hold).
fn codes_of(col: &ArrayRef) -> Result<Vec<u32>> {
    let DataType::Dictionary(kt, _) = col.data_type() else {
        return Err(DataFusionError::Internal(format!("not a dictionary: {}", col.data_type())));
    };
    Ok(match kt.as_ref() {
        DataType::UInt8 => {
            col.as_dictionary::<UInt8Type>().keys().values().iter().map(|&c| u32::from(c)).collect()
        }
        DataType::UInt16 => col
            .as_dictionary::<UInt16Type>()
            .keys()
            .values()
            .iter()
            .map(|&c| u32::from(c))
            .collect(),
        DataType::UInt32 => col.as_dictionary::<UInt32Type>().keys().values().to_vec(),
        t => return Err(DataFusionError::Internal(format!("dictionary keys of type {t}"))),
    })
}

impl DisplayAs for GroupByExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
        if let Some(p) = &self.predicate {
            write!(f, ", filter={p}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for GroupByExec {
    fn name(&self) -> &str {
        "BasaltGroupBy"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(&Arc<dyn PhysicalExpr>) -> Result<TreeNodeRecursion>,
    ) -> Result<TreeNodeRecursion> {
        Ok(TreeNodeRecursion::Continue)
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
        let units = partition_units(&self.groups, partition, "BasaltGroupBy")?;
        let me = GroupByExec {
            table: self.table.clone(),
            snapshot: self.snapshot.clone(),
            projection: self.projection.clone(),
            predicate: self.predicate.clone(),
            groups: Vec::new(),
            keys: self.keys.clone(),
            aggs: self.aggs.clone(),
            partial: self.partial,
            input_schema: self.input_schema.clone(),
            schema: self.schema.clone(),
            props: self.props.clone(),
        };
        // The work happens when the stream is first polled (on DataFusion's runtime).
        let stream = futures::stream::once(async move { me.run(units) });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream)))
    }
}
