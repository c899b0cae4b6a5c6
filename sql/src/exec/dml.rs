//! INSERT / UPDATE / DELETE / TRUNCATE on native tables: one exec that drains its input
//! plan and applies each batch to the connection's write statement.
//!
//! The statement dispatcher opens the write statement before the plan is built (so the
//! scans below a DELETE or UPDATE read the state the writes apply to) and ends it after the
//! plan ran: commit or, on any error, undo everything the statement did. This exec only
//! applies steps; it never commits. Inserted rows are handed over in chunks of at least
//! the store's bulk-insert size, so a large `INSERT … SELECT` spills to segment files
//! instead of holding every row in memory; chunks are whole row groups (up to
//! [`CHUNK_ROWS`] rows or [`CHUNK_BYTES`] bytes), so a large load makes segments of full
//! row groups rather than one small segment per bulk-insert size.

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};
use futures::StreamExt;

use basalt_storage::ID_COLUMN;

use crate::binding::{Binding, check_no_ids, storage_err};

/// What a [`DmlExec`] does with its input.
#[derive(Debug, Clone)]
pub enum DmlKind {
    /// Input: rows in the table's full schema (`_id` must be NULL); inserted.
    Insert {
        /// The columns stored (the full schema without `_id`).
        user_schema: SchemaRef,
        /// How rows whose key is taken are resolved (`None`: they are an error).
        on_conflict: Option<basalt_storage::OnConflict>,
    },
    /// Input: `_id`s of the rows to delete.
    Delete,
    /// Input: `_id` then the new values of the assigned columns.
    Update {
        /// The assigned columns.
        values: SchemaRef,
    },
}

/// Applies its input to a native table; outputs one row with the number of rows changed.
#[derive(Debug)]
pub struct DmlExec {
    table: String,
    kind: DmlKind,
    input: Arc<dyn ExecutionPlan>,
    binding: Arc<Binding>,
    props: Arc<PlanProperties>,
}

/// The output schema of DML statements, as DataFusion defines it.
pub(crate) fn count_schema() -> SchemaRef {
    // Made once: every direct write statement returns a batch of this schema.
    static SCHEMA: std::sync::OnceLock<SchemaRef> = std::sync::OnceLock::new();
    SCHEMA
        .get_or_init(|| Arc::new(Schema::new(vec![Field::new("count", DataType::UInt64, false)])))
        .clone()
}

impl DmlExec {
    /// A DML exec over `input`.
    pub fn new(
        table: &str,
        kind: DmlKind,
        input: Arc<dyn ExecutionPlan>,
        binding: Arc<Binding>,
    ) -> DmlExec {
        let props = PlanProperties::new(
            EquivalenceProperties::new(count_schema()),
            Partitioning::UnknownPartitioning(1),
            EmissionType::Final,
            Boundedness::Bounded,
        );
        DmlExec { table: table.to_string(), kind, input, binding, props: Arc::new(props) }
    }
}

impl DmlExec {
    /// The same insert, resolving duplicate keys as `mode` says; `None` if this is not
    /// an insert.
    pub fn with_on_conflict(&self, mode: basalt_storage::OnConflict) -> Option<DmlExec> {
        let DmlKind::Insert { user_schema, .. } = &self.kind else { return None };
        let kind = DmlKind::Insert { user_schema: user_schema.clone(), on_conflict: Some(mode) };
        Some(DmlExec::new(&self.table, kind, self.input.clone(), self.binding.clone()))
    }
}

impl DisplayAs for DmlExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            DmlKind::Insert { .. } => "Insert",
            DmlKind::Delete => "Delete",
            DmlKind::Update { .. } => "Update",
        };
        write!(f, "Basalt{what}: table={}", self.table)
    }
}

impl ExecutionPlan for DmlExec {
    fn name(&self) -> &str {
        "BasaltDml"
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
        let input = children
            .pop()
            .ok_or_else(|| DataFusionError::Internal("BasaltDml needs one input".into()))?;
        Ok(Arc::new(DmlExec::new(&self.table, self.kind.clone(), input, self.binding.clone())))
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        if partition != 0 {
            return Err(DataFusionError::Internal(format!(
                "BasaltDml has no partition {partition}"
            )));
        }
        let run = Apply {
            table: self.table.clone(),
            kind: self.kind.clone(),
            input: self.input.clone(),
            binding: self.binding.clone(),
        };
        let fut = async move {
            let n = run.run(context).await?;
            let count: Arc<dyn datafusion::arrow::array::Array> =
                Arc::new(UInt64Array::from(vec![n]));
            Ok(RecordBatch::try_new(count_schema(), vec![count])?)
        };
        Ok(Box::pin(RecordBatchStreamAdapter::new(count_schema(), futures::stream::once(fut))))
    }
}

/// The most rows an `INSERT` hands storage at once (16 row groups: one segment).
pub const CHUNK_ROWS: usize = 16 * basalt_storage::ROW_GROUP_ROWS;

/// An `INSERT` hands its pending rows to storage once they hold this many bytes (an eighth
/// of the SQL memory limit when that is less), bounding the memory a load holds for wide
/// rows; past the bulk-insert size, a chunk is then written even if not a whole row group.
pub const CHUNK_BYTES: usize = 128 << 20;

struct Apply {
    table: String,
    kind: DmlKind,
    input: Arc<dyn ExecutionPlan>,
    binding: Arc<Binding>,
}

impl Apply {
    async fn run(&self, context: Arc<TaskContext>) -> Result<u64> {
        let chunk = {
            let s = self.binding.session().lock();
            s.store().options().bulk_insert_rows.max(1)
        };
        // Pending rows are not counted against the memory pool: under a limit they may
        // take an eighth of it (the rest is for the plan that produces them).
        let chunk_bytes = match context.memory_pool().memory_limit() {
            datafusion::execution::memory_pool::MemoryLimit::Finite(limit) => {
                CHUNK_BYTES.min(limit / 8)
            }
            _ => CHUNK_BYTES,
        };
        let mut pending: Vec<RecordBatch> = Vec::new();
        let mut pending_rows = 0usize;
        let mut pending_bytes = 0usize;
        let mut changed = 0u64;
        let parts = self.input.properties().partitioning.partition_count();
        for p in 0..parts {
            let mut stream = self.input.execute(p, context.clone())?;
            while let Some(batch) = stream.next().await {
                let batch = batch?;
                if batch.num_rows() == 0 {
                    continue;
                }
                match &self.kind {
                    DmlKind::Insert { user_schema, .. } => {
                        check_no_ids(&self.table, &batch)?;
                        let batch = without_id(&batch, user_schema)?;
                        pending_rows += batch.num_rows();
                        pending_bytes += batch_bytes(&batch);
                        pending.push(batch);
                        if pending_rows >= chunk
                            && (pending_rows >= CHUNK_ROWS || pending_bytes >= chunk_bytes)
                        {
                            changed += self.insert_whole_groups(&mut pending, chunk)?;
                            pending_rows = pending.iter().map(RecordBatch::num_rows).sum();
                            pending_bytes = pending.iter().map(batch_bytes).sum();
                        }
                    }
                    DmlKind::Delete => {
                        let ids = ids_of(&batch)?;
                        changed +=
                            self.binding.apply(|t, s| t.delete(s, &self.table, ids.values()))?;
                    }
                    DmlKind::Update { values } => {
                        let ids = ids_of(&batch)?;
                        let cols = batch.columns()[1..].to_vec();
                        let v = RecordBatch::try_new(values.clone(), cols)?;
                        changed += self
                            .binding
                            .apply(|t, s| t.update(s, &self.table, ids.values(), &v))?;
                    }
                }
            }
        }
        if !pending.is_empty() {
            changed += self.insert(&mut pending)?;
        }
        Ok(changed)
    }

    /// Inserts the pending rows up to the last whole row group (all of them when that is
    /// fewer than `at_least` rows) and keeps the rest pending.
    fn insert_whole_groups(&self, pending: &mut Vec<RecordBatch>, at_least: usize) -> Result<u64> {
        let rows: usize = pending.iter().map(RecordBatch::num_rows).sum();
        let whole = rows - rows % basalt_storage::ROW_GROUP_ROWS;
        if whole < at_least.max(1) {
            return self.insert(pending);
        }
        let mut now = Vec::new();
        let mut rest = Vec::new();
        let mut taken = 0usize;
        for b in pending.drain(..) {
            let n = b.num_rows();
            if taken + n <= whole {
                taken += n;
                now.push(b);
            } else if taken < whole {
                let k = whole - taken;
                taken = whole;
                now.push(b.slice(0, k));
                rest.push(b.slice(k, n - k));
            } else {
                rest.push(b);
            }
        }
        *pending = rest;
        self.insert(&mut now)
    }

    fn insert(&self, pending: &mut Vec<RecordBatch>) -> Result<u64> {
        let batches = std::mem::take(pending);
        if let DmlKind::Insert { on_conflict: Some(mode), .. } = &self.kind {
            return self.binding.apply(|t, s| t.insert_on_conflict(s, &self.table, &batches, mode));
        }
        let r = self.binding.apply(|t, s| t.insert(s, &self.table, &batches))?;
        Ok(r.count)
    }
}

/// The bytes of `b`'s rows (of a slice: its rows only, not the buffers it views).
fn batch_bytes(b: &RecordBatch) -> usize {
    b.columns()
        .iter()
        .map(|c| c.to_data().get_slice_memory_size().unwrap_or_else(|_| c.get_array_memory_size()))
        .sum()
}

pub(crate) fn without_id(batch: &RecordBatch, user_schema: &SchemaRef) -> Result<RecordBatch> {
    let cols = user_schema
        .fields()
        .iter()
        .map(|f| {
            batch.column_by_name(f.name()).cloned().ok_or_else(|| {
                DataFusionError::Internal(format!("INSERT input lacks column '{}'", f.name()))
            })
        })
        .collect::<Result<Vec<_>>>()?;
    // Numbers of another numeric type (a prepared INSERT's parameters arrive as the values
    // given, not as the columns' types) are cast as DataFusion casts an INSERT's literals;
    // a value out of the column's range is an error, not a NULL.
    let options = datafusion::arrow::compute::CastOptions { safe: false, ..Default::default() };
    let cols = cols
        .into_iter()
        .zip(user_schema.fields())
        .map(|(c, f)| {
            if c.data_type() != f.data_type()
                && c.data_type().is_numeric()
                && f.data_type().is_numeric()
            {
                Ok(datafusion::arrow::compute::cast_with_options(&c, f.data_type(), &options)?)
            } else {
                Ok(c)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    // The input's own field nullability may differ from the table's; storage checks nulls.
    let fields: Vec<Field> = user_schema
        .fields()
        .iter()
        .zip(&cols)
        .map(|(f, c)| {
            Field::new(f.name(), c.data_type().clone(), true).with_metadata(f.metadata().clone())
        })
        .collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
}

fn ids_of(batch: &RecordBatch) -> Result<UInt64Array> {
    batch
        .column_by_name(ID_COLUMN)
        .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
        .cloned()
        .ok_or_else(|| {
            storage_err(basalt_storage::Error::InvalidInput {
                table: String::new(),
                reason: "DML input lacks a UInt64 _id column".into(),
            })
        })
}
