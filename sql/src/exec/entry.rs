//! Per-entry filters: a filter that reads one dictionary-encoded column of a Basalt scan
//! and that storage cannot evaluate itself (`COALESCE(NULLIF(category, 'Books'), 'none') =
//! 'Books'`, `upper(s) = 'DATE'`, `length(city) > 6`) becomes [`EntryFilterExec`], which
//! evaluates the predicate once per **dictionary entry** of each row group and selects
//! rows through their codes, instead of once per row on decoded strings.
//!
//! DataFusion's `FilterExec` over a scan evaluates its predicate on every decoded row. A
//! row group of 65k rows with 10 distinct categories has 10 entries: here the predicate
//! runs on those 10 values (and once on NULL when the group has NULL rows), a row keeps
//! its entry's answer, and only the kept rows' columns are decoded.
//!
//! When it applies: a [`FilterExec`] without a fetch over a Basalt scan without a limit —
//! directly, or through a projection of immutable expressions (DataFusion computes a common
//! subexpression of a predicate, `NULLIF(…)` under `COALESCE`, in such a projection; the
//! filter then goes below it with those expressions inlined) — whose predicate reads exactly
//! one column of the scan, dictionary-encoded in every row group of the snapshot, calls no
//! function that is not immutable (a volatile one must run once per row) and holds no
//! dynamic filter. The filter's projection is kept. If evaluating the predicate on a row
//! group's entries fails (an entry that no selected row holds may make a cast fail, say),
//! that row group is evaluated row by row, as DataFusion would, so an error is raised only
//! where DataFusion raises it. Memtable rows (values) are evaluated row by row. The rule is
//! off with the connection's fast paths.
//!
//! What this module must not do: change which rows pass the filter, or read storage other
//! than through the snapshot and units the scan was planned with.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions, new_null_array,
};
use datafusion::arrow::compute::{cast, filter_record_batch};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::Volatility;
use datafusion::physical_expr::expressions::{Column, DynamicFilterPhysicalExpr};
use datafusion::physical_expr::utils::collect_columns;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr, ScalarFunctionExpr};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use basalt_storage::{Predicate, ScanUnit, TableSnapshot};

use crate::binding::storage_err;
use crate::codes::{codes_of, dictionary_values};
use crate::exec::scan::{ScanExec, ScanParts, deferred_stream, partition_units};

/// A filter on one dictionary-encoded column, evaluated per entry (see the module docs).
#[derive(Debug, Clone)]
pub struct EntryFilterExec {
    snapshot: Arc<TableSnapshot>,
    /// Full-schema positions the scan reads (scan output `i` is `projection[i]`).
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    groups: Vec<Vec<ScanUnit>>,
    /// Scan output position of the filtered column.
    column: usize,
    /// The filter's predicate over the scan's schema (row by row).
    rows: Arc<dyn PhysicalExpr>,
    /// The same predicate over a one-column schema of the filtered column (per entry).
    entries: Arc<dyn PhysicalExpr>,
    /// The one-column schema `entries` reads.
    entry_schema: SchemaRef,
    /// Scan columns the filter outputs (its projection), in order.
    output: Vec<usize>,
    scan_schema: SchemaRef,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
}

impl EntryFilterExec {
    /// The per-entry form of `filter` (the node `plan`), when it applies (see the module
    /// docs): directly over a scan, or over a projection of one (where DataFusion put a
    /// common subexpression of the predicate), in which case the predicate goes below the
    /// projection with the projection's expressions inlined.
    pub fn replace(
        filter: &FilterExec,
        plan: &Arc<dyn ExecutionPlan>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        if filter.fetch().is_some() {
            return Ok(None);
        }
        let input = filter.input();
        if let Some(scan) = input.downcast_ref::<ScanExec>() {
            let output = filter.projection().as_ref().map(|p| p.to_vec());
            let e = Self::over_scan(scan, filter.predicate().clone(), output, plan.schema());
            return Ok(e.map(|e| Arc::new(e) as Arc<dyn ExecutionPlan>));
        }
        let Some(proj) = input.downcast_ref::<ProjectionExec>() else { return Ok(None) };
        let Some(scan) = proj.input().downcast_ref::<ScanExec>() else { return Ok(None) };
        let exprs: Vec<Arc<dyn PhysicalExpr>> =
            proj.expr().iter().map(|p| p.expr.clone()).collect();
        if !exprs.iter().all(immutable) {
            return Ok(None);
        }
        let inlined = filter
            .predicate()
            .clone()
            .transform(|e| {
                Ok(match e.downcast_ref::<Column>() {
                    Some(c) => match exprs.get(c.index()) {
                        Some(x) => Transformed::yes(x.clone()),
                        None => {
                            return Err(DataFusionError::Internal(
                                "filter column outside its projection".into(),
                            ));
                        }
                    },
                    None => Transformed::no(e),
                })
            })?
            .data;
        let Some(entry) = Self::over_scan(scan, inlined, None, scan.schema()) else {
            return Ok(None);
        };
        let mut out: Arc<dyn ExecutionPlan> =
            Arc::new(ProjectionExec::try_new(proj.expr().to_vec(), Arc::new(entry))?);
        if let Some(p) = filter.projection() {
            let schema = out.schema();
            let cols = p
                .iter()
                .map(|&i| {
                    let name = schema.field(i).name().clone();
                    (Arc::new(Column::new(&name, i)) as Arc<dyn PhysicalExpr>, name)
                })
                .collect::<Vec<_>>();
            out = Arc::new(ProjectionExec::try_new(cols, out)?);
        }
        // Only a plan with exactly the filter's output may replace it.
        if out.schema().fields() != plan.schema().fields() {
            return Ok(None);
        }
        Ok(Some(out))
    }

    /// A per-entry filter of `predicate` over `scan`, outputting `output` (scan columns;
    /// all when `None`) as `schema`.
    fn over_scan(
        scan: &ScanExec,
        predicate: Arc<dyn PhysicalExpr>,
        output: Option<Vec<usize>>,
        schema: SchemaRef,
    ) -> Option<EntryFilterExec> {
        let ScanParts { snapshot, projection, predicate: stored, groups } = scan.parts()?;
        let predicate_in_storage = stored;
        let rows = predicate;
        let cols = collect_columns(&rows);
        let [col] = cols.iter().collect::<Vec<_>>()[..] else { return None };
        let column = col.index();
        if !snapshot.is_dictionary_encoded(*projection.get(column)?) || !immutable(&rows) {
            return None;
        }
        let scan_schema = scan.schema();
        let field = scan_schema.fields().get(column)?.as_ref().clone().with_nullable(true);
        let entry_schema = Arc::new(Schema::new(vec![field]));
        // Rebase the one column onto position 0 of the one-column schema.
        let entries = rows
            .clone()
            .transform(|e| {
                Ok(match e.downcast_ref::<Column>() {
                    Some(c) => datafusion::common::tree_node::Transformed::yes(Arc::new(
                        Column::new(c.name(), 0),
                    )
                        as Arc<dyn PhysicalExpr>),
                    None => datafusion::common::tree_node::Transformed::no(e),
                })
            })
            .ok()?
            .data;
        let width = scan_schema.fields().len();
        let output: Vec<usize> = output.unwrap_or_else(|| (0..width).collect());
        if output.iter().any(|&c| c >= width) {
            return None;
        }
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Some(EntryFilterExec {
            snapshot: snapshot.clone(),
            projection: projection.to_vec(),
            predicate: predicate_in_storage.cloned(),
            groups: groups.to_vec(),
            column,
            rows,
            entries,
            entry_schema,
            output,
            scan_schema,
            schema,
            props: Arc::new(props),
        })
    }

    /// The rows of one scan batch (codes or values) that pass, as output columns.
    fn filter(&self, b: &RecordBatch) -> Result<Option<RecordBatch>> {
        let n = b.num_rows();
        let col = b.column(self.column);
        let keep = match self.by_entry(col)? {
            Some(k) => k,
            None => {
                let values = self.decoded(b)?;
                let v = self.rows.evaluate(&values)?.into_array(n)?;
                truth(&v)?
            }
        };
        if keep.true_count() == 0 {
            return Ok(None);
        }
        let cols: Vec<ArrayRef> = self.output.iter().map(|&c| b.column(c).clone()).collect();
        let fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .zip(&cols)
            .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
            .collect();
        let picked = filter_record_batch(
            &RecordBatch::try_new_with_options(
                Arc::new(Schema::new(fields)),
                cols,
                &RecordBatchOptions::new().with_row_count(Some(n)),
            )?,
            &keep,
        )?;
        // Decode the kept rows' codes into the output's types.
        let cols = picked
            .columns()
            .iter()
            .zip(self.schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() { Ok(c.clone()) } else { cast(c, f.data_type()) }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(Some(RecordBatch::try_new_with_options(
            self.schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(picked.num_rows())),
        )?))
    }

    /// Each row's answer through its dictionary entry's; `None` when the column came as
    /// values, or evaluating the entries failed (the caller then goes row by row).
    fn by_entry(&self, col: &ArrayRef) -> Result<Option<BooleanArray>> {
        if !matches!(col.data_type(), DataType::Dictionary(_, _)) {
            return Ok(None);
        }
        let values = dictionary_values(col)?;
        let field_type = self.entry_schema.field(0).data_type();
        let values =
            if values.data_type() == field_type { values } else { cast(&values, field_type)? };
        // The entries, then NULL (for NULL rows) as the last entry.
        let with_null = datafusion::arrow::compute::concat(&[
            values.as_ref(),
            new_null_array(field_type, 1).as_ref(),
        ])?;
        let batch = RecordBatch::try_new(self.entry_schema.clone(), vec![with_null])?;
        let answers =
            match self.entries.evaluate(&batch).and_then(|v| v.into_array(batch.num_rows())) {
                Ok(a) => a,
                Err(_) => return Ok(None),
            };
        let answers = truth(&answers)?;
        let null_answer = answers.value(answers.len() - 1);
        let codes = codes_of(col)?;
        let mut keep = Vec::with_capacity(codes.len());
        for (i, c) in codes.into_iter().enumerate() {
            keep.push(if col.is_null(i) {
                null_answer
            } else {
                (c as usize) < answers.len() - 1 && answers.value(c as usize)
            });
        }
        Ok(Some(BooleanArray::from(keep)))
    }

    /// A scan batch with its codes decoded into the scan schema's types.
    fn decoded(&self, b: &RecordBatch) -> Result<RecordBatch> {
        let cols = b
            .columns()
            .iter()
            .zip(self.scan_schema.fields())
            .map(|(c, f)| {
                if c.data_type() == f.data_type() { Ok(c.clone()) } else { cast(c, f.data_type()) }
            })
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(RecordBatch::try_new_with_options(
            self.scan_schema.clone(),
            cols,
            &RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
        )?)
    }
}

/// A predicate's result as a selection: NULL is false.
fn truth(v: &ArrayRef) -> Result<BooleanArray> {
    let Some(b) = v.as_any().downcast_ref::<BooleanArray>() else {
        return Err(DataFusionError::Internal(format!(
            "filter predicate of type {}",
            v.data_type()
        )));
    };
    Ok(match b.nulls() {
        Some(_) => datafusion::arrow::compute::prep_null_mask_filter(b),
        None => b.clone(),
    })
}

/// Whether `e` calls only immutable functions (a stable or volatile one may answer
/// differently per row, so it must run per row) and holds no dynamic filter (a top-k's or
/// join's, which DataFusion may fold into a filter's predicate: its value changes while
/// the query runs, and a kept plan would keep a past run's).
pub(crate) fn immutable(e: &Arc<dyn PhysicalExpr>) -> bool {
    let mut ok = true;
    let _ = e.apply(|x| {
        let volatile = x
            .downcast_ref::<ScalarFunctionExpr>()
            .is_some_and(|f| f.fun().signature().volatility != Volatility::Immutable);
        if volatile || x.downcast_ref::<DynamicFilterPhysicalExpr>().is_some() {
            ok = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    ok
}

impl DisplayAs for EntryFilterExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BasaltEntryFilter: table={}, column={}, predicate={}",
            self.snapshot.name(),
            self.entry_schema.field(0).name(),
            self.rows
        )?;
        if let Some(p) = &self.predicate {
            write!(f, ", filter={p}")?;
        }
        Ok(())
    }
}

impl ExecutionPlan for EntryFilterExec {
    fn name(&self) -> &str {
        "BasaltEntryFilter"
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
        let units = partition_units(&self.groups, partition, "BasaltEntryFilter")?;
        let me = self.clone();
        Ok(deferred_stream(self.schema.clone(), async move {
            let scan = me
                .snapshot
                .scan_units_filtered(&me.projection, me.predicate.clone(), units)
                .map_err(storage_err)?
                .with_codes();
            Ok(futures::stream::iter(scan.filter_map(move |b| {
                match b.map_err(storage_err).and_then(|b| me.filter(&b)) {
                    Ok(Some(out)) => Some(Ok(out)),
                    Ok(None) => None,
                    Err(e) => Some(Err(e)),
                }
            })))
        }))
    }
}
