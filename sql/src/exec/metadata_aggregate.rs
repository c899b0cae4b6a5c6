//! `BasaltMetadataAggregate`: `count`, `min` and `max` without GROUP BY answered from the
//! row groups' metadata — row counts, NULL counts, zone maps — wherever it is exact, and
//! from the rows elsewhere.
//!
//! DataFusion answers such an aggregate from the scan's statistics at planning when they
//! are exact for the whole table (no filter, no deleted rows, no memtable rows). This exec
//! covers the rest: a filter that zone maps prove for most row groups
//! (`max(x) WHERE day >= …` over a table appended by day), a table with deleted rows in a
//! few row groups, or with unflushed rows. Per scan unit, [`TableSnapshot::unit_metadata`] says whether the
//! metadata describes exactly the unit's matching rows (a row group without deleted rows
//! whose zone maps prove the filter); then `count(*)` adds its rows, `count(c)` its non-NULL
//! rows and `min(c)` / `max(c)` take its zone map's bound. A unit without such metadata —
//! or with a chunk holding non-NULL values but no zone map (a string longer than 64 bytes) —
//! is read, its filter evaluated in storage, and its rows fed to the same accumulators.
//!
//! When it applies ([`MetadataAggregateExec::replace`]):
//! 1. the aggregate is `Partial` or `Single`, without GROUP BY, a limit or FILTER clauses;
//! 2. its input is a Basalt scan without a limit and without parents' filters;
//! 3. every aggregate is `count`, `min` or `max` without DISTINCT or ORDER BY, over one
//!    column of the scan — or `count` over a non-NULL constant (`count(*)`) — with one state
//!    value (`count`: Int64; `min` / `max`: the column's type);
//! 4. `min` / `max` columns have a type whose zone-map bounds convert back exactly (integers,
//!    dates, times, timestamps, durations, booleans, floats, decimals, strings, binary);
//! 5. at planning at least half of the scan's units (and at least one) have such metadata.
//!
//! Results equal DataFusion's: metadata values enter DataFusion's own accumulators as
//! partial states (`merge_batch`), rows as rows (`update_batch`); zone maps keep bounds in
//! the order of Arrow's kernels that DataFusion's `min` / `max` use (floats in total order).
//!
//! What this module must not do: answer a unit from metadata that is not exact for it.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{Result, ScalarValue};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Accumulator;
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{Column, Literal};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use basalt_storage::{Predicate, ScanUnit, TableSnapshot, UnitMetadata};

use crate::binding::storage_err;
use crate::exec::scan::{ScanExec, ScanParts, bound_array, deferred_stream, partition_units};

/// What one aggregate computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    /// `count(*)`: rows.
    Rows,
    /// `count(c)`: non-NULL values of column `c` (a scan output position).
    Count(usize),
    /// `min(c)`.
    Min(usize),
    /// `max(c)`.
    Max(usize),
}

impl Op {
    fn column(self) -> Option<usize> {
        match self {
            Op::Rows => None,
            Op::Count(c) | Op::Min(c) | Op::Max(c) => Some(c),
        }
    }
}

/// Answers `count` / `min` / `max` of a scan from metadata where it is exact (see the
/// module docs).
#[derive(Debug, Clone)]
pub struct MetadataAggregateExec {
    table: String,
    snapshot: Arc<TableSnapshot>,
    /// Full-schema positions the scan read (scan output column `i` is `projection[i]`).
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    groups: Vec<Vec<ScanUnit>>,
    aggs: Vec<Arc<AggregateFunctionExpr>>,
    ops: Vec<Op>,
    /// `Partial`: emit states (the final aggregate above merges them); `Single`: values.
    partial: bool,
    /// The scan's output schema.
    input_schema: SchemaRef,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

/// The operation of `a` over a scan whose output schema is `input`, when it is one this
/// exec answers (conditions 3 and 4 of the module docs).
fn op_of(a: &AggregateFunctionExpr, input: &SchemaRef) -> Result<Option<Op>> {
    if a.is_distinct() || !a.order_bys().is_empty() {
        return Ok(None);
    }
    let args = a.expressions();
    let [arg] = args.as_slice() else { return Ok(None) };
    let state = a.state_fields()?;
    let [state] = state.as_slice() else { return Ok(None) };
    let column = arg.downcast_ref::<Column>().map(Column::index);
    let name = a.fun().name();
    if name == "count" {
        if state.data_type() != &DataType::Int64 {
            return Ok(None);
        }
        return Ok(match column {
            Some(c) => Some(Op::Count(c)),
            None => {
                arg.downcast_ref::<Literal>().filter(|l| !l.value().is_null()).map(|_| Op::Rows)
            }
        });
    }
    let Some(c) = column else { return Ok(None) };
    let Some(field) = input.fields().get(c) else { return Ok(None) };
    let dt = field.data_type();
    let exact_bounds = dt.is_integer()
        || dt.is_floating()
        || matches!(
            dt,
            DataType::Boolean
                | DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(_, _)
                | DataType::Duration(_)
                | DataType::Utf8
                | DataType::Binary
                | DataType::Decimal128(_, _)
        );
    if !exact_bounds || state.data_type() != dt {
        return Ok(None);
    }
    Ok(match name {
        "min" => Some(Op::Min(c)),
        "max" => Some(Op::Max(c)),
        _ => None,
    })
}

impl MetadataAggregateExec {
    /// The exec answering `agg`, when it applies (see the module docs).
    pub fn replace(agg: &AggregateExec) -> Result<Option<MetadataAggregateExec>> {
        let partial = match agg.mode() {
            AggregateMode::Partial => true,
            AggregateMode::Single => false,
            _ => return Ok(None),
        };
        if !agg.group_expr().is_empty()
            || agg.limit_options().is_some()
            || agg.filter_expr().iter().any(Option::is_some)
            || agg.aggr_expr().is_empty()
        {
            return Ok(None);
        }
        let Some(scan) = agg.input().downcast_ref::<ScanExec>() else { return Ok(None) };
        if scan.has_hints() {
            return Ok(None);
        }
        let Some(ScanParts { snapshot, projection, predicate, groups }) = scan.parts() else {
            return Ok(None);
        };
        let input = agg.input_schema();
        let mut ops = Vec::with_capacity(agg.aggr_expr().len());
        for a in agg.aggr_expr() {
            let Some(op) = op_of(a, &input)? else { return Ok(None) };
            ops.push(op);
        }
        let units: Vec<ScanUnit> = groups.iter().flatten().copied().collect();
        let known =
            units.iter().filter(|u| snapshot.unit_metadata(**u, predicate, &[]).is_some()).count();
        if known == 0 || known * 2 < units.len() {
            return Ok(None);
        }
        let schema = agg.schema();
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len().max(1)),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        Ok(Some(MetadataAggregateExec {
            table: snapshot.name().to_string(),
            snapshot: snapshot.clone(),
            projection: projection.to_vec(),
            predicate: predicate.cloned(),
            groups: groups.to_vec(),
            aggs: agg.aggr_expr().to_vec(),
            ops,
            partial,
            input_schema: input,
            schema,
            props: Arc::new(props),
            metrics: ExecutionPlanMetricsSet::new(),
        }))
    }

    /// Full-schema positions of the columns the aggregates read, in `ops` order of first
    /// use, and for each op the index into that list.
    fn columns(&self) -> (Vec<usize>, Vec<Option<usize>>) {
        let mut cols: Vec<usize> = Vec::new();
        let at = self
            .ops
            .iter()
            .map(|op| {
                op.column().map(|c| {
                    let full = self.projection[c];
                    match cols.iter().position(|&x| x == full) {
                        Some(i) => i,
                        None => {
                            cols.push(full);
                            cols.len() - 1
                        }
                    }
                })
            })
            .collect();
        (cols, at)
    }

    /// Folds the unit's metadata into the accumulators; `false` (nothing folded) when a
    /// `min` / `max` column has non-NULL values but no zone map there.
    fn fold_metadata(
        &self,
        meta: &UnitMetadata,
        at: &[Option<usize>],
        accs: &mut [Box<dyn Accumulator>],
    ) -> Result<bool> {
        let mut states: Vec<ArrayRef> = Vec::with_capacity(self.ops.len());
        for (op, at) in self.ops.iter().zip(at) {
            let chunk = at.map(|i| &meta.columns[i]);
            let count = |n: u64| -> ArrayRef {
                Arc::new(Int64Array::from(vec![i64::try_from(n).unwrap_or(i64::MAX)]))
            };
            states.push(match (op, chunk) {
                (Op::Rows, _) => count(meta.rows),
                (Op::Count(_), Some(c)) => count(meta.rows.saturating_sub(c.null_count)),
                (Op::Min(i) | Op::Max(i), Some(c)) => {
                    let dt = self.input_schema.field(*i).data_type();
                    match &c.zone_map {
                        // All NULL: no candidate (the accumulator skips a NULL state).
                        None if c.null_count >= meta.rows => {
                            datafusion::arrow::array::new_null_array(dt, 1)
                        }
                        None => return Ok(false),
                        Some(z) => {
                            let bound = if matches!(op, Op::Min(_)) { &z.min } else { &z.max };
                            match bound_array(bound, dt) {
                                Some(a) => a,
                                None => return Ok(false),
                            }
                        }
                    }
                }
                (_, None) => return Ok(false),
            });
        }
        for (acc, state) in accs.iter_mut().zip(states) {
            acc.merge_batch(&[state])?;
        }
        Ok(true)
    }

    /// Aggregates one partition's units into one row.
    fn run(
        &self,
        units: Vec<ScanUnit>,
        answered: &datafusion::physical_plan::metrics::Count,
    ) -> Result<RecordBatch> {
        let mut accs: Vec<Box<dyn Accumulator>> =
            self.aggs.iter().map(|a| a.create_accumulator()).collect::<Result<_>>()?;
        let (cols, at) = self.columns();
        let mut read = Vec::new();
        for unit in units {
            let folded = match self.snapshot.unit_metadata(unit, self.predicate.as_ref(), &cols) {
                Some(meta) => self.fold_metadata(&meta, &at, &mut accs)?,
                None => false,
            };
            match folded {
                true => answered.add(1),
                false => read.push(unit),
            }
        }
        if !read.is_empty() {
            let scan = self
                .snapshot
                .scan_units_filtered(&self.projection, self.predicate.clone(), read)
                .map_err(storage_err)?;
            for batch in scan {
                let batch = batch.map_err(storage_err)?;
                for (a, acc) in self.aggs.iter().zip(accs.iter_mut()) {
                    let args = a
                        .expressions()
                        .iter()
                        .map(|e| e.evaluate(&batch)?.into_array(batch.num_rows()))
                        .collect::<Result<Vec<ArrayRef>>>()?;
                    acc.update_batch(&args)?;
                }
            }
        }
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        for acc in &mut accs {
            let values: Vec<ScalarValue> = match self.partial {
                true => acc.state()?,
                false => vec![acc.evaluate()?],
            };
            for v in values {
                columns.push(v.to_array()?);
            }
        }
        // The aggregate's declared types (a NULL state may come out as another type).
        let columns = columns
            .into_iter()
            .zip(self.schema.fields())
            .map(|(c, f)| match c.data_type() == f.data_type() {
                true => Ok(c),
                false => Ok(datafusion::arrow::compute::cast(&c, f.data_type())?),
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

impl DisplayAs for MetadataAggregateExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let aggs: Vec<&str> = self.aggs.iter().map(|a| a.name()).collect();
        write!(
            f,
            "BasaltMetadataAggregate: table={}, mode={}, aggr=[{}]",
            self.table,
            if self.partial { "Partial" } else { "Single" },
            aggs.join(", ")
        )?;
        if let Some(p) = &self.predicate {
            write!(f, ", filter={p}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for MetadataAggregateExec {
    fn name(&self) -> &str {
        "BasaltMetadataAggregate"
    }

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
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
        use futures::StreamExt as _;
        let units = partition_units(&self.groups, partition, "BasaltMetadataAggregate")?;
        let me = MetadataAggregateExec { groups: Vec::new(), ..self.clone() };
        let answered = MetricBuilder::new(&self.metrics).counter("units_from_metadata", partition);
        // The work happens when the stream is first polled (on DataFusion's runtime).
        Ok(deferred_stream(self.schema.clone(), async move {
            let batch = me.run(units, &answered)?;
            Ok(futures::stream::once(async move { Ok(batch) }).boxed())
        }))
    }
}
