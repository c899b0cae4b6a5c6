//! Semi-join reduction: a hash join that keeps the rows of a Basalt scan whose key one of a
//! (small) build side's keys equals (`RightSemi`: `IN (SELECT …)`, `EXISTS` with a
//! correlated equality) becomes [`SemiJoinScanExec`]: it runs the build side, turns its
//! distinct keys into a storage `IN` list and scans with it, so the probe rows are
//! selected on dictionary codes (one answer per dictionary entry) and never hashed.
//!
//! When it applies: join type `RightSemi` in `CollectLeft` mode, no join filter, one key
//! pair of plain columns typed Utf8 or Int64 (storage compares those exactly as the hash
//! join does), the right input a Basalt scan without a limit. NULL build keys never match
//! (the join's `NullsEqual: false`); with `NullsEqual: true` the rule does not apply.
//! DataFusion chooses `CollectLeft` only for a build side under its single-partition
//! thresholds (1 MB / 128k rows by default); each probe partition runs that build side
//! itself (no shared build yet), which costs little at that size.
//!
//! What this module must not do: read storage other than through the snapshot and units
//! the scan was planned with, or change which rows a query returns.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::JoinType;
use datafusion::common::{NullEquality, Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::common::collect;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use basalt_storage::{InValues, Predicate, ScanUnit, TableSnapshot};

use crate::binding::storage_err;
use crate::exec::scan::{ScanExec, ScanParts, deferred_stream, partition_units};
use crate::pushdown::scalar_of;

/// A semi join of a Basalt scan against a build side's keys, as a scan (see module docs).
#[derive(Debug, Clone)]
pub struct SemiJoinScanExec {
    build: Arc<dyn ExecutionPlan>,
    /// Build-side column of the key.
    build_key: usize,
    snapshot: Arc<TableSnapshot>,
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    groups: Vec<Vec<ScanUnit>>,
    /// Table column of the probe key and its type.
    key: String,
    key_type: DataType,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// The build side's keys, collected once for all partitions (the build side may hold
    /// a repartition, whose partitions can each be read only once).
    keys: Arc<tokio::sync::OnceCell<InValues>>,
}

impl SemiJoinScanExec {
    /// The reduced form of `join`, when it applies (see the module docs).
    pub fn reduce(join: &HashJoinExec) -> Option<SemiJoinScanExec> {
        if *join.join_type() != JoinType::RightSemi
            || *join.partition_mode() != PartitionMode::CollectLeft
            || join.filter().is_some()
            || join.null_equality() != NullEquality::NullEqualsNothing
            || join.null_aware
        {
            return None;
        }
        let [(l, r)] = join.on() else { return None };
        let (l, r) = (l.downcast_ref::<Column>()?, r.downcast_ref::<Column>()?);
        let scan = join.right().downcast_ref::<ScanExec>()?;
        let ScanParts { snapshot, projection, predicate, groups } = scan.parts()?;
        let field = scan.schema().fields().get(r.index())?.clone();
        let build_type = join.left().schema().fields().get(l.index())?.data_type().clone();
        if !matches!(field.data_type(), DataType::Utf8 | DataType::Int64)
            || &build_type != field.data_type()
        {
            return None;
        }
        let key = field.name().clone();
        let width = scan.schema().fields().len();
        let output: Vec<usize> = match &join.projection {
            Some(p) => p.to_vec(),
            None => (0..width).collect(),
        };
        if output.iter().any(|&c| c >= width) {
            return None;
        }
        let schema = join.schema();
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        // Read only the columns the join outputs (the key is filtered on, not decoded).
        let projection: Vec<usize> = output.iter().map(|&c| projection[c]).collect();
        Some(SemiJoinScanExec {
            build: join.left().clone(),
            build_key: l.index(),
            snapshot: snapshot.clone(),
            projection,
            predicate: predicate.cloned(),
            groups: groups.to_vec(),
            key,
            key_type: field.data_type().clone(),
            schema,
            props: Arc::new(props),
            keys: Arc::default(),
        })
    }
}

impl DisplayAs for SemiJoinScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BasaltSemiJoinScan: table={}, key={}", self.snapshot.name(), self.key)?;
        if let Some(p) = &self.predicate {
            write!(f, ", filter={p}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for SemiJoinScanExec {
    fn name(&self) -> &str {
        "BasaltSemiJoinScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![&self.build]
    }

    no_expressions!();

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let Some(build) = children.pop() else { return Ok(self) };
        Ok(Arc::new(SemiJoinScanExec { build, keys: Arc::default(), ..(*self).clone() }))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let units = partition_units(&self.groups, partition, "BasaltSemiJoinScan")?;
        let me = self.clone();
        let schema = self.schema.clone();
        Ok(deferred_stream(schema, async move {
            let keys = me.keys.get_or_try_init(|| me.build_keys(context)).await?;
            let predicate =
                Predicate::InList { column: me.key.clone(), values: keys.clone(), negated: false };
            let predicate = match me.predicate.clone() {
                Some(p) => Predicate::And(vec![p, predicate]),
                None => predicate,
            };
            let scan = me
                .snapshot
                .scan_units_filtered(&me.projection, Some(predicate), units)
                .map_err(storage_err)?;
            let schema = me.schema.clone();
            Ok::<_, datafusion::error::DataFusionError>(futures::stream::iter(scan.map(move |b| {
                let b = b.map_err(storage_err)?;
                Ok(RecordBatch::try_new_with_options(
                    schema.clone(),
                    b.columns().to_vec(),
                    &RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
                )?)
            })))
        }))
    }
}

impl SemiJoinScanExec {
    /// The build side's distinct non-NULL keys as storage constants.
    async fn build_keys(&self, context: Arc<TaskContext>) -> Result<InValues> {
        let mut keys: Vec<ScalarValue> = Vec::new();
        for p in 0..self.build.properties().output_partitioning().partition_count() {
            for b in collect(self.build.execute(p, context.clone())?).await? {
                let col = b.column(self.build_key);
                for i in 0..col.len() {
                    if col.is_valid(i) {
                        keys.push(ScalarValue::try_from_array(col, i)?);
                    }
                }
            }
        }
        keys.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        keys.dedup();
        keys.iter()
            .map(|k| {
                scalar_of(k, &self.key_type).ok_or_else(|| {
                    datafusion::error::DataFusionError::Internal(format!(
                        "semi-join key {k} has no storage form"
                    ))
                })
            })
            .collect::<Result<Vec<_>>>()
            .map(InValues::from)
    }
}
