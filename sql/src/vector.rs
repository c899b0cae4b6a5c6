//! Vector search in SQL: the distance functions Basalt adds, the `vector_topk` table
//! function, and the rule that answers `ORDER BY <distance> LIMIT k` with the storage top-k.
//!
//! - `l2_distance(a, b)` and `l2sq_distance(a, b)`: Euclidean and squared Euclidean
//!   distance, with the semantics of DataFusion's `array_distance` (computed in `f64`; NULL
//!   when either side is NULL or holds a NULL; an error when the lengths differ). A
//!   `VECTOR(D)` column is read in place (no cast to a list of `f64`). DataFusion's own
//!   `array_distance`, `cosine_distance` and `inner_product` / `dot_product` are left as
//!   they are.
//! - `vector_topk('table', 'column', [query], k [, 'metric'])`: the `k` closest rows as
//!   `_id` and `distance` (closest first; metric `l2` by default, or `l2sq`, `cosine`,
//!   `dot`), computed by storage's exact top-k in `f32` arithmetic. Rows without a distance
//!   (NULL vector, zero vector under cosine) are not returned.
//! - [`VectorTopKRule`]: `ORDER BY d ASC LIMIT k` where `d` is `array_distance`,
//!   `l2_distance`, `l2sq_distance` or `cosine_distance` of a `VECTOR` column and a constant
//!   vector, or `ORDER BY inner_product(…) DESC LIMIT k`, over a Basalt scan (filters pushed
//!   into it allowed) becomes a [`VectorSearchExec`] below the original projection and a
//!   sort of its few rows. The exec selects `2k + 8` candidates with the `f32` kernels; the
//!   sort above ranks them by DataFusion's own `f64` value, so near-ties at the boundary
//!   are settled by the exact function. Where rows without a distance would sort into the
//!   result (NULLs or NaN first, or fewer ranked candidates than `k`), the exec runs the
//!   original scan instead and DataFusion sorts it: results never change.
//!
//! What this module must not do: compute distances itself for the top-k (that is
//! `basalt_vector`, through storage), or read anything but the snapshot the scan was
//! planned on.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, GenericListArray, OffsetSizeTrait, RecordBatch,
    RecordBatchOptions, UInt64Array,
};
use datafusion::arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Schema, SchemaRef};
use datafusion::catalog::{
    Session as DfSession, TableFunctionArgs, TableFunctionImpl, TableProvider,
};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::utils::{ListCoercion, coerced_type_with_base_type_only};
use datafusion::common::{DataFusionError, Result, ScalarValue, exec_err, plan_err};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TableType,
    Volatility,
};
use datafusion::physical_expr::expressions::{CastExpr, Column, IsNotNullExpr, TryCastExpr};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{
    EquivalenceProperties, LexOrdering, PhysicalExpr, ScalarFunctionExpr,
};
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{
    Boundedness, ChildrenPropertiesMode, EmissionType, ReplaceChildrenOptions,
};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort::SortExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use basalt_storage::{Metric, Predicate, TableSnapshot};

use crate::binding::{Binding, storage_err};
use crate::constant::{evaluate_constant, evaluate_physical_constant};
use crate::provider::{ScanExec, ScanParts};

/// The scalar functions of this module.
pub fn functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::from(L2Distance::new("l2_distance", false)),
        ScalarUDF::from(L2Distance::new("l2sq_distance", true)),
    ]
}

/// `l2_distance` / `l2sq_distance` (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct L2Distance {
    name: &'static str,
    squared: bool,
    signature: Signature,
}

impl L2Distance {
    fn new(name: &'static str, squared: bool) -> Self {
        L2Distance { name, squared, signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// A vector column read in place, or any other numeric list as `List<Float64>`.
fn coerce_vector_arg(name: &str, t: &DataType) -> Result<DataType> {
    match t {
        DataType::FixedSizeList(f, _) if f.data_type() == &DataType::Float32 => Ok(t.clone()),
        DataType::Null => Ok(DataType::new_list(DataType::Float64, true)),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _)
            if f.data_type().is_numeric() || f.data_type().is_null() =>
        {
            Ok(coerced_type_with_base_type_only(
                t,
                &DataType::Float64,
                Some(&ListCoercion::FixedSizedListToList),
            ))
        }
        _ => plan_err!("{name} takes two vectors (numeric arrays), got {t}"),
    }
}

impl ScalarUDFImpl for L2Distance {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [a, b] = arg_types else {
            return plan_err!("{} takes two arguments, got {}", self.name, arg_types.len());
        };
        Ok(vec![coerce_vector_arg(self.name, a)?, coerce_vector_arg(self.name, b)?])
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = args.args.as_slice() else {
            return plan_err!("{} takes two arguments", self.name);
        };
        let scalar = matches!((a, b), (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let (a, b) = (Side::new(a)?, Side::new(b)?);
        let mut out = Float64Array::builder(rows);
        for i in 0..rows {
            match (a.row(i), b.row(i)) {
                (Some(x), Some(y)) => {
                    let (n, m) = (x.len(), y.len());
                    if n != m {
                        return exec_err!(
                            "{}: vectors of different dimensions ({n} and {m})",
                            self.name
                        );
                    }
                    let mut sum = 0f64;
                    for j in 0..n {
                        let d = x.get(j) - y.get(j);
                        sum += d * d;
                    }
                    out.append_value(if self.squared { sum } else { sum.sqrt() });
                }
                _ => out.append_null(),
            }
        }
        let out: ArrayRef = Arc::new(out.finish());
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

/// One argument of a distance function: an array, or a scalar repeated for every row.
struct Side {
    array: ArrayRef,
    broadcast: bool,
}

/// One row's vector.
enum Vals<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl Vals<'_> {
    fn len(&self) -> usize {
        match self {
            Vals::F32(v) => v.len(),
            Vals::F64(v) => v.len(),
        }
    }
    #[inline]
    fn get(&self, j: usize) -> f64 {
        match self {
            Vals::F32(v) => f64::from(v[j]),
            Vals::F64(v) => v[j],
        }
    }
}

impl Side {
    fn new(v: &ColumnarValue) -> Result<Side> {
        Ok(match v {
            ColumnarValue::Array(a) => Side { array: a.clone(), broadcast: false },
            ColumnarValue::Scalar(s) => Side { array: s.to_array_of_size(1)?, broadcast: true },
        })
    }

    /// Row `i`'s values; `None` for a NULL vector or one holding a NULL.
    fn row(&self, i: usize) -> Option<Vals<'_>> {
        let i = if self.broadcast { 0 } else { i };
        if self.array.is_null(i) {
            return None;
        }
        match self.array.data_type() {
            DataType::FixedSizeList(..) => {
                let l = self.array.as_fixed_size_list();
                let d = l.value_length() as usize;
                let child = l.values();
                let start = l.value_offset(i) as usize;
                if child.logical_nulls().is_some_and(|n| n.slice(start, d).null_count() > 0) {
                    return None;
                }
                let c = child.as_primitive_opt::<Float32Type>()?;
                Some(Vals::F32(&c.values()[start..start + d]))
            }
            DataType::List(_) => list_row(self.array.as_list::<i32>(), i),
            DataType::LargeList(_) => list_row(self.array.as_list::<i64>(), i),
            _ => None,
        }
    }
}

fn list_row<O: OffsetSizeTrait>(l: &GenericListArray<O>, i: usize) -> Option<Vals<'_>> {
    let (start, end) = (l.value_offsets()[i].as_usize(), l.value_offsets()[i + 1].as_usize());
    let child = l.values();
    if child.logical_nulls().is_some_and(|n| n.slice(start, end - start).null_count() > 0) {
        return None;
    }
    let c = child.as_primitive_opt::<Float64Type>()?;
    Some(Vals::F64(&c.values()[start..end]))
}

/// A constant's value as a vector of `f32`, if it is a non-NULL numeric list without NULLs.
fn constant_vector(v: &ScalarValue) -> Option<Vec<f32>> {
    let a = v.to_array_of_size(1).ok()?;
    if a.is_null(0) {
        return None;
    }
    let inner: ArrayRef = match a.data_type() {
        DataType::List(_) => a.as_list::<i32>().value(0),
        DataType::LargeList(_) => a.as_list::<i64>().value(0),
        DataType::FixedSizeList(..) => a.as_fixed_size_list().value(0),
        _ => return None,
    };
    if inner.null_count() > 0 || !inner.data_type().is_numeric() {
        return None;
    }
    let f = datafusion::arrow::compute::cast(&inner, &DataType::Float32).ok()?;
    Some(f.as_primitive::<Float32Type>().values().to_vec())
}

/// `vector_topk('table', 'column', [query], k [, 'metric'])`.
#[derive(Debug)]
pub struct VectorTopKFunction {
    binding: Arc<Binding>,
}

impl VectorTopKFunction {
    /// The table function of a connection.
    pub fn new(binding: Arc<Binding>) -> Self {
        VectorTopKFunction { binding }
    }
}

const USAGE: &str =
    "vector_topk('table', 'column', [query vector], k [, 'l2' | 'l2sq' | 'cosine' | 'dot'])";

impl TableFunctionImpl for VectorTopKFunction {
    fn call_with_args(&self, args: TableFunctionArgs<'_, '_>) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if !(4..=5).contains(&exprs.len()) {
            return plan_err!("{USAGE}: expected 4 or 5 arguments, got {}", exprs.len());
        }
        let values = exprs
            .iter()
            .map(|e| evaluate_constant(args.session(), e))
            .collect::<Result<Vec<_>>>()?;
        let text = |i: usize, what: &str| match &values[i] {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => Ok(s.clone()),
            v => plan_err!("{USAGE}: the {what} must be a string, got {v}"),
        };
        let table = text(0, "table name")?;
        let column = text(1, "column name")?;
        let Some(query) = constant_vector(&values[2]) else {
            return plan_err!(
                "{USAGE}: the query must be a numeric array without NULLs, got {}",
                values[2]
            );
        };
        let k = match values[3].cast_to(&DataType::Int64)? {
            ScalarValue::Int64(Some(k)) if k >= 0 => k as usize,
            v => return plan_err!("{USAGE}: k must be a non-negative integer, got {v}"),
        };
        let metric = match values.get(4) {
            None => Metric::L2,
            Some(_) => text(4, "metric")?
                .parse::<Metric>()
                .map_err(|e| DataFusionError::Plan(format!("{USAGE}: {e}")))?,
        };
        // Fail at planning on a table or column that is not there.
        let view = self.binding.view().map_err(storage_err)?;
        let snap = view.table(&table).map_err(storage_err)?;
        match snap
            .schema()
            .index_of(&column)
            .map(|i| snap.schema().full_schema().field(i).data_type().clone())
        {
            Some(DataType::FixedSizeList(f, _)) if f.data_type() == &DataType::Float32 => {}
            Some(t) => {
                return plan_err!(
                    "vector_topk: column '{column}' of '{table}' is {t}, not a VECTOR column"
                );
            }
            None => return plan_err!("vector_topk: table '{table}' has no column '{column}'"),
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new(basalt_storage::ID_COLUMN, DataType::UInt64, false),
            Field::new("distance", DataType::Float64, false),
        ]));
        Ok(Arc::new(VectorTopKTable {
            binding: self.binding.clone(),
            search: Search { column, query, k, metric, predicate: None },
            table,
            schema,
        }))
    }
}

/// What to search for.
#[derive(Debug, Clone)]
struct Search {
    column: String,
    query: Vec<f32>,
    /// Candidates kept.
    k: usize,
    metric: Metric,
    predicate: Option<Predicate>,
}

/// The table a `vector_topk(…)` call stands for.
#[derive(Debug)]
struct VectorTopKTable {
    binding: Arc<Binding>,
    table: String,
    search: Search,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for VectorTopKTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Temporary
    }
    async fn scan(
        &self,
        _state: &dyn DfSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let view = self.binding.view().map_err(storage_err)?;
        let snapshot = view.table(&self.table).map_err(storage_err)?;
        let projection = projection.cloned().unwrap_or_else(|| vec![0, 1]);
        let schema = Arc::new(self.schema.project(&projection)?);
        Ok(Arc::new(VectorSearchExec::new(
            snapshot,
            self.search.clone(),
            Mode::Ids { projection },
            schema,
        )))
    }
}

/// What a [`VectorSearchExec`] returns.
#[derive(Debug, Clone)]
enum Mode {
    /// `_id` and `distance`, these positions of the two.
    Ids { projection: Vec<usize> },
    /// The rows found, as the replaced scan would have returned them (its columns); when
    /// the search cannot answer exactly, the scan itself.
    Rows {
        projection: Vec<usize>,
        /// The LIMIT (with OFFSET) the sort above keeps.
        need: usize,
        /// The sort's direction and where it puts NULLs.
        descending: bool,
        nulls_first: bool,
        /// A filter above the scan drops NULL vectors (`WHERE v IS NOT NULL`).
        nulls_excluded: bool,
        /// The replaced input: the scan, with that filter if there is one.
        scan: Arc<dyn ExecutionPlan>,
    },
}

/// Storage's exact vector top-k as an exec (see the module docs). One partition.
#[derive(Debug, Clone)]
pub struct VectorSearchExec {
    snapshot: Arc<TableSnapshot>,
    search: Search,
    mode: Mode,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// `rows_ranked` (rows the search returned) and `scan_fallbacks` (1 when the replaced
    /// scan ran instead), shown by `EXPLAIN ANALYZE`.
    metrics: ExecutionPlanMetricsSet,
}

impl VectorSearchExec {
    fn new(snapshot: Arc<TableSnapshot>, search: Search, mode: Mode, schema: SchemaRef) -> Self {
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        VectorSearchExec {
            snapshot,
            search,
            mode,
            schema,
            props: Arc::new(props),
            metrics: ExecutionPlanMetricsSet::new(),
        }
    }

    /// Runs the search: the batch to return, or `None` when the scan must run instead.
    fn answer(&self) -> Result<Option<RecordBatch>> {
        let s = &self.search;
        let found = self
            .snapshot
            .vector_search(&s.column, &[&s.query], s.k, s.metric, s.predicate.as_ref())
            .map_err(storage_err)?;
        let (neighbors, no_distance) = match (found.neighbors.first(), found.no_distance.first()) {
            (Some(n), Some(u)) => (n, *u),
            _ => return Err(DataFusionError::Internal("vector search lost its query".into())),
        };
        let opts = RecordBatchOptions::new().with_row_count(Some(neighbors.len()));
        match &self.mode {
            Mode::Ids { projection } => {
                let ids: ArrayRef =
                    Arc::new(UInt64Array::from_iter_values(neighbors.iter().map(|n| n.id)));
                let d: ArrayRef = Arc::new(Float64Array::from_iter_values(
                    neighbors.iter().map(|n| f64::from(n.distance)),
                ));
                let both = [ids, d];
                let cols = projection.iter().map(|&i| both[i].clone()).collect();
                Ok(Some(RecordBatch::try_new_with_options(self.schema.clone(), cols, &opts)?))
            }
            Mode::Rows { projection, need, descending, nulls_first, nulls_excluded, .. } => {
                // Where DataFusion puts the rows without a distance: NULL vectors (and zero
                // vectors under cosine) by the NULLS clause, NaN distances above every number.
                // Those counted together cannot be told apart, so count them where either
                // kind could sort ahead of the ranked rows.
                let nulls = if *nulls_excluded { 0 } else { found.null_vectors };
                let before = if *nulls_first {
                    nulls + no_distance
                } else if *descending {
                    no_distance
                } else {
                    0
                };
                let exact = before == 0 && (nulls + no_distance == 0 || neighbors.len() >= *need);
                if !exact {
                    return Ok(None);
                }
                let ids: Vec<u64> = neighbors.iter().map(|n| n.id).collect();
                let b = self.snapshot.get_many(&ids, projection).map_err(storage_err)?;
                Ok(Some(RecordBatch::try_new_with_options(
                    self.schema.clone(),
                    b.columns().to_vec(),
                    &RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
                )?))
            }
        }
    }
}

impl DisplayAs for VectorSearchExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = &self.search;
        write!(
            f,
            "BasaltVectorTopK: table={}, column={}, metric={}, k={}",
            self.snapshot.name(),
            s.column,
            s.metric,
            s.k
        )?;
        if let Some(p) = &s.predicate {
            write!(f, ", filter={p}")?;
        }
        if matches!(self.mode, Mode::Rows { .. }) {
            write!(f, ", else scan")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for VectorSearchExec {
    fn name(&self) -> &str {
        "BasaltVectorTopK"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        match &self.mode {
            Mode::Rows { scan, .. } => vec![scan],
            Mode::Ids { .. } => vec![],
        }
    }

    no_expressions!();

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut me = (*self).clone();
        me.metrics = ExecutionPlanMetricsSet::new();
        if let (Mode::Rows { scan, .. }, Some(c)) = (&mut me.mode, children.pop()) {
            *scan = c;
        }
        Ok(Arc::new(me))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "BasaltVectorTopK has one partition, asked for {partition}"
            )));
        }
        let me = self.clone();
        let ranked = MetricBuilder::new(&self.metrics).counter("rows_ranked", partition);
        let fallbacks = MetricBuilder::new(&self.metrics).counter("scan_fallbacks", partition);
        let pool = context.memory_pool().clone();
        let stream = futures::stream::once(async move {
            match me.answer()? {
                Some(b) => {
                    ranked.add(b.num_rows());
                    // The ranked rows count against the memory pool until they are handed
                    // on (a LIMIT as large as the table gathers every row).
                    let reservation = MemoryConsumer::new("BasaltVectorTopK").register(&pool);
                    reservation.try_grow(b.get_array_memory_size())?;
                    Ok(futures::stream::once(async move {
                        drop(reservation);
                        Ok(b)
                    })
                    .boxed())
                }
                None => {
                    fallbacks.add(1);
                    // Not exact: every row of the original scan, for the sort above.
                    let Mode::Rows { scan, .. } = &me.mode else {
                        return Err(DataFusionError::Internal("ids search fell back".into()));
                    };
                    let parts = scan.properties().output_partitioning().partition_count();
                    let streams = (0..parts)
                        .map(|p| scan.execute(p, context.clone()))
                        .collect::<Result<Vec<_>>>()?;
                    Ok(futures::stream::iter(streams).flatten().boxed())
                }
            }
        })
        .map(|r| match r {
            Ok(s) => s,
            Err(e) => futures::stream::once(async move { Err(e) }).boxed(),
        })
        .flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream)))
    }
}

/// Answers `ORDER BY <distance> LIMIT k` over a Basalt scan with [`VectorSearchExec`] (see
/// the module docs). Off together with the other fast paths.
#[derive(Debug)]
pub struct VectorTopKRule {
    enabled: Arc<AtomicBool>,
}

impl VectorTopKRule {
    /// The rule, on while `enabled` is.
    pub fn new(enabled: Arc<AtomicBool>) -> Self {
        VectorTopKRule { enabled }
    }
}

impl PhysicalOptimizerRule for VectorTopKRule {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Ok(plan);
        }
        plan.transform_down(|node| {
            Ok(match rewrite(&node)? {
                Some(n) => Transformed::yes(n),
                None => Transformed::no(node),
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_vector_topk"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// The replacement of `node` when it is a top-k sort by a distance over a Basalt scan.
fn rewrite(node: &Arc<dyn ExecutionPlan>) -> Result<Option<Arc<dyn ExecutionPlan>>> {
    // The sort and its LIMIT: a merge of per-partition top-k sorts, or one sort.
    let (ordering, fetch, below) = if let Some(m) = node.downcast_ref::<SortPreservingMergeExec>() {
        let Some(sort) = m.input().downcast_ref::<SortExec>() else { return Ok(None) };
        match (m.fetch(), sort.fetch()) {
            (Some(f), Some(_)) if sort.expr() == m.expr() => {
                (m.expr().clone(), f, sort.input().clone())
            }
            _ => return Ok(None),
        }
    } else if let Some(sort) = node.downcast_ref::<SortExec>() {
        let parts = sort.input().properties().output_partitioning().partition_count();
        match sort.fetch() {
            Some(f) if !sort.preserve_partitioning() || parts == 1 => {
                (sort.expr().clone(), f, sort.input().clone())
            }
            _ => return Ok(None),
        }
    } else {
        return Ok(None);
    };
    let Some(below) = skip_exchanges(below) else { return Ok(None) };
    let (projection, input) = match below.downcast_ref::<ProjectionExec>() {
        Some(p) => match skip_exchanges(p.input().clone()) {
            Some(input) => (Some(p), input),
            None => return Ok(None),
        },
        None => (None, below.clone()),
    };
    // `WHERE v IS NOT NULL` stays above the scan (storage does not filter vectors); the
    // search drops NULL vectors anyway.
    let (not_null, scan_plan) = match input.downcast_ref::<FilterExec>() {
        Some(f) if f.projection().is_none() => match not_null_column(f.predicate()) {
            Some(c) => match skip_exchanges(f.input().clone()) {
                Some(s) => (Some(c), s),
                None => return Ok(None),
            },
            None => return Ok(None),
        },
        Some(_) => return Ok(None),
        None => (None, input.clone()),
    };
    let Some(scan) = scan_plan.downcast_ref::<ScanExec>() else { return Ok(None) };
    let Some(ScanParts { snapshot, projection: columns, predicate, .. }) = scan.parts() else {
        return Ok(None);
    };
    let [first] = ordering.as_ref() else { return Ok(None) };
    // The sort key as an expression over the scan's columns.
    let key = match (projection, first.expr.downcast_ref::<Column>()) {
        (Some(p), Some(c)) => match p.expr().get(c.index()) {
            Some(e) => e.expr.clone(),
            None => return Ok(None),
        },
        (Some(_), None) => return Ok(None),
        (None, _) => first.expr.clone(),
    };
    let Some((metric, column, query)) = distance_call(&key, &scan.schema()) else {
        return Ok(None);
    };
    let descending = first.options.descending;
    if descending != (metric == Metric::Dot) || not_null.as_ref().is_some_and(|c| *c != column) {
        return Ok(None);
    }
    let search = Search {
        column,
        query,
        k: fetch.saturating_mul(2).saturating_add(8),
        metric,
        predicate: predicate.cloned(),
    };
    let mode = Mode::Rows {
        projection: columns.to_vec(),
        need: fetch,
        descending,
        nulls_first: first.options.nulls_first,
        nulls_excluded: not_null.is_some(),
        scan: input.clone(),
    };
    let exec: Arc<dyn ExecutionPlan> =
        Arc::new(VectorSearchExec::new(snapshot.clone(), search, mode, scan.schema()));
    let input = match projection {
        Some(_) => below.clone().replace_children(
            vec![exec],
            ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
        )?,
        None => exec,
    };
    let ordering: LexOrdering = ordering.clone();
    Ok(Some(Arc::new(SortExec::new(ordering, input).with_fetch(Some(fetch)))))
}

/// The column a filter keeps the non-NULL rows of (`c IS NOT NULL`).
fn not_null_column(e: &Arc<dyn PhysicalExpr>) -> Option<String> {
    let n = e.downcast_ref::<IsNotNullExpr>()?;
    n.arg().downcast_ref::<Column>().map(|c| c.name().to_string())
}

/// `plan` under the operators that only move rows between partitions (merges without a
/// limit, repartitions): the exec replacing a scan has one partition and needs none of
/// them. `None` for a merge with a limit.
fn skip_exchanges(mut plan: Arc<dyn ExecutionPlan>) -> Option<Arc<dyn ExecutionPlan>> {
    loop {
        if let Some(c) = plan.downcast_ref::<CoalescePartitionsExec>() {
            if c.fetch().is_some() {
                return None;
            }
            plan = c.input().clone();
        } else if let Some(r) = plan.downcast_ref::<RepartitionExec>() {
            plan = r.input().clone();
        } else {
            return Some(plan);
        }
    }
}

/// `(metric, column name, query)` when `e` is a distance function of a `VECTOR` column of
/// `schema` and a constant vector of its dimension with finite components.
fn distance_call(
    e: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
) -> Option<(Metric, String, Vec<f32>)> {
    let f = e.downcast_ref::<ScalarFunctionExpr>()?;
    let metric = match f.name() {
        "array_distance" | "list_distance" | "l2_distance" => Metric::L2,
        "l2sq_distance" => Metric::L2Squared,
        "cosine_distance" => Metric::Cosine,
        "inner_product" | "dot_product" => Metric::Dot,
        _ => return None,
    };
    let [a, b] = f.args() else { return None };
    let (col, constant) = match (vector_column(a, schema), vector_column(b, schema)) {
        (Some(c), None) => (c, b),
        (None, Some(c)) => (c, a),
        _ => return None,
    };
    if !collect_columns(constant).is_empty() {
        return None;
    }
    let query = constant_vector(&evaluate_physical_constant(constant).ok()?)?;
    let DataType::FixedSizeList(_, dim) = schema.field(col.index()).data_type() else {
        return None;
    };
    if query.len() != *dim as usize || query.iter().any(|v| !v.is_finite()) {
        return None;
    }
    if metric == Metric::Cosine && query.iter().all(|v| *v == 0.0) {
        return None;
    }
    Some((metric, col.name().to_string(), query))
}

/// The column under casts, when it is a `VECTOR` (`FixedSizeList<Float32>`) column.
fn vector_column<'a>(e: &'a Arc<dyn PhysicalExpr>, schema: &SchemaRef) -> Option<&'a Column> {
    let mut e = e;
    loop {
        if let Some(c) = e.downcast_ref::<CastExpr>() {
            e = c.expr();
        } else if let Some(c) = e.downcast_ref::<TryCastExpr>() {
            e = c.expr();
        } else {
            break;
        }
    }
    let c = e.downcast_ref::<Column>()?;
    match schema.fields().get(c.index())?.data_type() {
        DataType::FixedSizeList(f, _) if f.data_type() == &DataType::Float32 => Some(c),
        _ => None,
    }
}
