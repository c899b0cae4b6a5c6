//! [`SharedExec`]: one result computed once for every place of a plan that holds the same
//! [`Shared`] state (placed by [`ShareSubplans`](crate::rules::share_subplans::ShareSubplans),
//! whose docs say when).
//!
//! Within one execution of the plan (one `TaskContext`):
//! 1. the first place to be polled (the leader) runs its own input to the end, keeping the
//!    batches, while the others wait for it instead of running their own copies;
//! 2. when the kept batches pass [`MAX_SHARED_BYTES`] or the memory pool refuses them, the
//!    leader gives up sharing: it streams on to its own parent, and the others run their
//!    own copies (what the plan did without this exec);
//! 3. the batches are released once every place has read them; another execution (another
//!    `TaskContext`) computes them again.
//!
//! The leader computes the whole result before handing any of it out, so no place waits on
//! a consumer that is itself waiting (a hash join building from one place and probing the
//! other cannot deadlock).
//!
//! What this module must not do: hand a place rows its own copy would not produce. The
//! places' inputs are copies of one logical plan (the rule and the planner check it), and
//! this exec accepts no parent filter, so no dynamic filter narrows one copy.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::record_batch::RecordBatch;
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::memory_pool::MemoryConsumer;
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::statistics::{ChildStats, StatisticsArgs};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, ExecutionPlanProperties, Partitioning,
    PlanProperties, Statistics,
};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};

/// The most bytes of batches a leader keeps for the other places; past it, it gives up
/// sharing (a result this large costs less to compute again than to hold).
pub const MAX_SHARED_BYTES: usize = 256 << 20;

/// What the places of one shared subplan hold in common.
#[derive(Debug)]
pub struct Shared {
    /// How many places read the result (the batches are released after that many reads).
    places: usize,
    /// The most bytes kept ([`MAX_SHARED_BYTES`] but in tests).
    max_bytes: usize,
    run: tokio::sync::Mutex<Option<Run>>,
}

/// The result of the latest execution.
#[derive(Debug)]
struct Run {
    ctx: Arc<TaskContext>,
    /// `None` when the leader gave up sharing.
    batches: Option<Arc<Vec<RecordBatch>>>,
    /// Places that took the result so far.
    served: usize,
    _reservation: Option<datafusion::execution::memory_pool::MemoryReservation>,
}

impl Shared {
    /// State for `places` places.
    pub fn new(places: usize) -> Arc<Shared> {
        Self::with_limit(places, MAX_SHARED_BYTES)
    }

    fn with_limit(places: usize, max_bytes: usize) -> Arc<Shared> {
        Arc::new(Shared { places, max_bytes, run: tokio::sync::Mutex::new(None) })
    }

    /// The batches for one place: the kept ones when this execution's leader already ran,
    /// else computed here (this place leads).
    async fn open(
        self: Arc<Self>,
        input: Arc<dyn ExecutionPlan>,
        ctx: Arc<TaskContext>,
    ) -> Result<BoxStream<'static, Result<RecordBatch>>> {
        let mut slot = self.run.lock().await;
        if let Some(run) = slot.as_mut().filter(|r| Arc::ptr_eq(&r.ctx, &ctx)) {
            run.served += 1;
            let batches = run.batches.clone();
            if run.served >= self.places {
                *slot = None;
            }
            drop(slot);
            return match batches {
                Some(b) => Ok(replay(b)),
                None => Ok(single(input, ctx)?.boxed()),
            };
        }
        // This place leads: run the input to the end, keeping what it gives.
        let mut stream = single(input, Arc::clone(&ctx))?;
        let reservation = MemoryConsumer::new("BasaltShared").register(ctx.memory_pool());
        let mut kept = Vec::new();
        while let Some(batch) = stream.next().await {
            let batch = batch?;
            let size = batch.get_array_memory_size();
            if reservation.size() + size > self.max_bytes || reservation.try_grow(size).is_err() {
                // Too large to keep: stream on unshared; the other places run their copies.
                *slot = Some(Run { ctx, batches: None, served: 1, _reservation: None });
                drop(slot);
                drop(reservation);
                kept.push(batch);
                let kept = futures::stream::iter(kept.into_iter().map(Ok));
                return Ok(kept.chain(stream).boxed());
            }
            kept.push(batch);
        }
        let kept = Arc::new(kept);
        *slot = (self.places > 1).then(|| Run {
            ctx,
            batches: Some(Arc::clone(&kept)),
            served: 1,
            _reservation: Some(reservation),
        });
        Ok(replay(kept))
    }
}

/// The batches again, without copying their buffers.
fn replay(batches: Arc<Vec<RecordBatch>>) -> BoxStream<'static, Result<RecordBatch>> {
    futures::stream::iter((0..batches.len()).map(move |i| Ok(batches[i].clone()))).boxed()
}

/// All partitions of `input` as one stream.
fn single(
    input: Arc<dyn ExecutionPlan>,
    ctx: Arc<TaskContext>,
) -> Result<SendableRecordBatchStream> {
    let input: Arc<dyn ExecutionPlan> = if input.output_partitioning().partition_count() > 1 {
        Arc::new(CoalescePartitionsExec::new(input))
    } else {
        input
    };
    input.execute(0, ctx)
}

/// One place of a shared subplan (see the module docs); `shared` is `None` for a place that
/// runs its input alone (its copy no longer matched the others' at planning).
#[derive(Debug)]
pub struct SharedExec {
    input: Arc<dyn ExecutionPlan>,
    shared: Option<Arc<Shared>>,
    props: Arc<PlanProperties>,
}

impl SharedExec {
    /// A place reading `input` through `shared`.
    pub fn new(input: Arc<dyn ExecutionPlan>, shared: Option<Arc<Shared>>) -> SharedExec {
        let props = PlanProperties::new(
            EquivalenceProperties::new(input.schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        SharedExec { input, shared, props: Arc::new(props) }
    }
}

impl DisplayAs for SharedExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.shared {
            Some(s) => write!(f, "BasaltShared: places={}", s.places),
            None => write!(f, "BasaltShared: unshared"),
        }
    }
}

impl ExecutionPlan for SharedExec {
    fn name(&self) -> &str {
        "BasaltShared"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.input]
    }

    no_expressions!();

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match (children.pop(), children.is_empty()) {
            (Some(input), true) => Ok(Arc::new(SharedExec::new(input, self.shared.clone()))),
            _ => Err(DataFusionError::Internal("BasaltShared takes one input".into())),
        }
    }

    fn child_stats_requests(&self, _partition: Option<usize>) -> Vec<ChildStats> {
        vec![ChildStats::At(None)]
    }

    /// The input's statistics, all of them in the one partition.
    fn statistics_from_inputs(
        &self,
        input_stats: &[Arc<Statistics>],
        args: &StatisticsArgs,
    ) -> Result<Arc<Statistics>> {
        match (args.partition(), input_stats.first()) {
            (None | Some(0), Some(s)) => Ok(Arc::clone(s)),
            _ => Ok(Arc::new(Statistics::new_unknown(&self.schema()))),
        }
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "BasaltShared has one partition, not {partition}"
            )));
        }
        let input = Arc::clone(&self.input);
        let Some(shared) = self.shared.clone() else {
            return single(input, context);
        };
        let once = futures::stream::once(shared.open(input, context)).try_flatten();
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema(), once)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Int64Array};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use datafusion::datasource::memory::MemorySourceConfig;
    use datafusion::physical_plan::collect;

    fn input() -> Arc<dyn ExecutionPlan> {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let batch = |r: std::ops::Range<i64>| {
            RecordBatch::try_new(schema.clone(), vec![Arc::new(Int64Array::from_iter_values(r))])
                .unwrap()
        };
        // Two partitions: the place reads both.
        let parts = vec![vec![batch(0..100), batch(100..150)], vec![batch(150..400)]];
        MemorySourceConfig::try_new_exec(&parts, schema, None).unwrap()
    }

    fn total(batches: &[RecordBatch]) -> (usize, i64) {
        let rows = batches.iter().map(|b| b.num_rows()).sum();
        let sum = batches
            .iter()
            .flat_map(|b| {
                b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()
            })
            .sum();
        (rows, sum)
    }

    #[tokio::test]
    async fn every_place_reads_the_whole_result_kept_or_not() {
        let want = (400, (0..400).sum());
        for limit in [MAX_SHARED_BYTES, 1] {
            let shared = Shared::with_limit(2, limit);
            let places: Vec<Arc<dyn ExecutionPlan>> = (0..2)
                .map(|_| Arc::new(SharedExec::new(input(), Some(shared.clone()))) as _)
                .collect();
            for _run in 0..2 {
                let ctx = Arc::new(TaskContext::default());
                for p in &places {
                    assert_eq!(total(&collect(p.clone(), ctx.clone()).await.unwrap()), want);
                }
                // Released (or the give-up forgotten) once both places read it.
                assert!(shared.run.lock().await.is_none());
            }
        }
        // A place of its own runs its input.
        let alone = Arc::new(SharedExec::new(input(), None));
        let ctx = Arc::new(TaskContext::default());
        assert_eq!(total(&collect(alone, ctx).await.unwrap()), want);
    }
}
