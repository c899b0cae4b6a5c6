//! Storage's exact vector top-k as an exec: [`VectorSearchExec`], read by the `vector_topk`
//! table function and placed by [`VectorTopKRule`](crate::rules::vector_topk::VectorTopKRule)
//! (when and how: the [`crate::vector`] module docs).

use crate::binding::storage_err;
use basalt_storage::{Metric, Predicate, TableSnapshot};
use datafusion::arrow::array::{
    ArrayRef, Float64Array, RecordBatch, RecordBatchOptions, UInt64Array,
};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;
use std::fmt;
use std::sync::Arc;

/// What to search for.
#[derive(Debug, Clone)]
pub(crate) struct Search {
    pub(crate) column: String,
    pub(crate) query: Vec<f32>,
    /// Candidates kept.
    pub(crate) k: usize,
    pub(crate) metric: Metric,
    pub(crate) predicate: Option<Predicate>,
}

/// What a [`VectorSearchExec`] returns.
#[derive(Debug, Clone)]
pub(crate) enum Mode {
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
    pub(crate) fn new(
        snapshot: Arc<TableSnapshot>,
        search: Search,
        mode: Mode,
        schema: SchemaRef,
    ) -> Self {
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
