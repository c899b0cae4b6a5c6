//! Dictionary join: an equi-join whose probe side is a Basalt scan of a dictionary-encoded
//! key becomes [`DictJoinExec`], which looks each **dictionary entry** of the key up in the
//! build side's table once per row group and gives every probe row its matches through its
//! code, instead of hashing and comparing the key of every probe row.
//!
//! DataFusion's hash join hashes the decoded key of each probe row (a string per row for a
//! join on `city`) and compares it with the build keys it collides with. Segments store
//! such a key as a sorted dictionary plus a 1–4-byte code per row, so a row group of 65k
//! rows with 10 distinct cities costs ten hash lookups here, then one table read per row.
//! Output rows are built with `take` on the probe columns (on their codes when they are
//! dictionary-encoded) and on the collected build batch. A join whose output has no
//! columns (`SELECT count(*) FROM t LEFT JOIN d ON …`) only counts rows per dictionary
//! entry and multiplies by the entry's matches. The fused group-by ([`crate::exec::fused`]) reads this exec's output with the probe
//! columns still as codes, so `JOIN … GROUP BY <probe column>` groups by code as well.
//!
//! When it applies: a [`HashJoinExec`] in `CollectLeft` mode (DataFusion's choice for a
//! small build side), join type `Inner` or `Right` (the probe rows are kept, with NULL build
//! columns when nothing matches), no join filter, NULLs never equal (`NullEqualsNothing`,
//! not null-aware), one key pair of plain Utf8 columns (storage dictionary-encodes text and
//! floats; integers are packed, not dictionary-encoded), the
//! right input a Basalt scan without a limit whose key column is dictionary-encoded in every
//! row group of the snapshot. Memtable rows (values, not codes) are looked up one by one.
//! The join's projection and `fetch` are kept. The rule is off with the connection's fast
//! paths (`Connection::set_fast_paths(false)`), which is how the tests compare.
//!
//! The build side runs once per execution of the exec and is shared by its partitions; what
//! it holds counts against the memory pool, and one that does not fit ends the statement
//! with "resources exhausted" (the connection then runs it again with sort-merge joins).
//!
//! What this module must not do: change which rows a join returns (only their order
//! within a probe batch may differ, as between DataFusion's own join algorithms), or read
//! storage other than through the snapshot and units the scan was planned with.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, RecordBatch, RecordBatchOptions, UInt32Array,
};
use datafusion::arrow::compute::{cast, concat_batches, take};
use datafusion::arrow::datatypes::{DataType, Schema, SchemaRef};
use datafusion::common::{DataFusionError, JoinType, NullEquality, Result};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_expr::expressions::Column;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::joins::{HashJoinExec, PartitionMode};
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use basalt_storage::{Predicate, Scan, ScanUnit, TableSnapshot};

use crate::binding::storage_err;
use crate::codes::{codes_of, dictionary_values};
use crate::exec::scan::{ScanExec, ScanParts, deferred_stream, partition_units};

/// Where an output column of the join comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// Column `i` of the build side.
    Build(usize),
    /// Column `i` of the probe scan's output.
    Probe(usize),
}

/// A hash join probed by dictionary code (see the module docs).
#[derive(Debug, Clone)]
pub struct DictJoinExec {
    build: Arc<dyn ExecutionPlan>,
    /// Build-side column of the key.
    build_key: usize,
    /// `RIGHT JOIN`: probe rows without a match are kept, with NULL build columns.
    keep_unmatched: bool,
    snapshot: Arc<TableSnapshot>,
    /// Full-schema positions the probe scan reads (scan output `i` is `projection[i]`).
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    groups: Vec<Vec<ScanUnit>>,
    /// Scan output position of the probe key.
    probe_key: usize,
    output: Vec<Out>,
    fetch: Option<usize>,
    schema: SchemaRef,
    props: Arc<PlanProperties>,
    /// The build table, built by the first partition that needs it.
    table: Arc<tokio::sync::OnceCell<Arc<BuildTable>>>,
}

impl DictJoinExec {
    /// The dictionary form of `join`, when it applies (see the module docs).
    pub fn replace(join: &HashJoinExec) -> Option<DictJoinExec> {
        let keep_unmatched = match join.join_type() {
            JoinType::Inner => false,
            JoinType::Right => true,
            _ => return None,
        };
        if *join.partition_mode() != PartitionMode::CollectLeft
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
        let probe_type = scan.schema().fields().get(r.index())?.data_type().clone();
        let build_schema = join.left().schema();
        let build_type = build_schema.fields().get(l.index())?.data_type().clone();
        if probe_type != DataType::Utf8
            || build_type != probe_type
            || !snapshot.is_dictionary_encoded(*projection.get(r.index())?)
        {
            return None;
        }
        let left = build_schema.fields().len();
        let width = left + scan.schema().fields().len();
        let columns: Vec<usize> = match &join.projection {
            Some(p) => p.to_vec(),
            None => (0..width).collect(),
        };
        let output = columns
            .iter()
            .map(|&c| match c {
                c if c < left => Some(Out::Build(c)),
                c if c < width => Some(Out::Probe(c - left)),
                _ => None,
            })
            .collect::<Option<Vec<Out>>>()?;
        let schema = join.schema();
        let props = PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(groups.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        );
        Some(DictJoinExec {
            build: join.left().clone(),
            build_key: l.index(),
            keep_unmatched,
            snapshot: snapshot.clone(),
            projection: projection.to_vec(),
            predicate: predicate.cloned(),
            groups: groups.to_vec(),
            probe_key: r.index(),
            output,
            fetch: join.fetch(),
            schema,
            props: Arc::new(props),
            table: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    /// The probed table's snapshot.
    pub(crate) fn snapshot(&self) -> &Arc<TableSnapshot> {
        &self.snapshot
    }

    /// The predicate the probe scan evaluates in storage.
    pub(crate) fn predicate(&self) -> Option<&Predicate> {
        self.predicate.as_ref()
    }

    /// The probe scan's units per partition.
    pub(crate) fn groups(&self) -> &[Vec<ScanUnit>] {
        &self.groups
    }

    /// The build side.
    pub(crate) fn build(&self) -> &Arc<dyn ExecutionPlan> {
        &self.build
    }

    /// Whether the join ends after a number of rows.
    pub(crate) fn has_fetch(&self) -> bool {
        self.fetch.is_some()
    }

    /// The full-schema position of output column `c` when it is a probe column (which
    /// comes as codes from [`DictJoinExec::coded_batches`] where storage has them).
    pub(crate) fn probe_column(&self, c: usize) -> Option<usize> {
        match self.output.get(c)? {
            Out::Probe(p) => self.projection.get(*p).copied(),
            Out::Build(_) => None,
        }
    }

    /// The same join over another build side (a fresh build table).
    pub(crate) fn with_build(&self, build: Arc<dyn ExecutionPlan>) -> DictJoinExec {
        DictJoinExec { build, table: Arc::new(tokio::sync::OnceCell::new()), ..self.clone() }
    }

    /// The output batches of the probe units `units`, with probe columns left as
    /// dictionary codes where storage hands them out so (each batch carries its own
    /// schema saying which), for the fused group-by. The join's `fetch` is not applied.
    pub(crate) async fn coded_batches(
        &self,
        units: Vec<ScanUnit>,
        context: Arc<TaskContext>,
    ) -> Result<Probe> {
        self.probe(units, context, true).await
    }

    async fn probe(
        &self,
        units: Vec<ScanUnit>,
        context: Arc<TaskContext>,
        codes: bool,
    ) -> Result<Probe> {
        let table = self
            .table
            .get_or_try_init(|| async {
                BuildTable::new(&self.build, self.build_key, context).await.map(Arc::new)
            })
            .await?
            .clone();
        // Codes always: the key is looked up per dictionary entry, and probe columns are
        // taken on their codes and decoded after (when `codes` is false).
        let scan = self
            .snapshot
            .scan_units_filtered(&self.projection, self.predicate.clone(), units)
            .map_err(storage_err)?
            .with_codes();
        Ok(Probe {
            scan,
            table,
            probe_key: self.probe_key,
            keep_unmatched: self.keep_unmatched,
            output: self.output.clone(),
            schema: self.schema.clone(),
            codes,
            left: if codes { None } else { self.fetch },
        })
    }
}

/// The build side, collected: its rows, and for each distinct non-NULL key the run of its
/// rows in `rows`.
#[derive(Debug)]
struct BuildTable {
    batch: RecordBatch,
    rows: Vec<u32>,
    /// Key → `(start, len)` of its rows in `rows`.
    map: HashMap<Box<str>, (u32, u32)>,
    /// What the above holds, counted against the memory pool while the table lives.
    _reservation: MemoryReservation,
}

impl BuildTable {
    async fn new(
        build: &Arc<dyn ExecutionPlan>,
        key: usize,
        context: Arc<TaskContext>,
    ) -> Result<BuildTable> {
        // The build rows count against the pool as they arrive (twice while they are
        // concatenated); past the limit the statement fails with "resources exhausted"
        // and may run again with sort-merge joins.
        use futures::StreamExt as _;
        let reservation = MemoryConsumer::new(BUILD_CONSUMER).register(context.memory_pool());
        let mut batches = Vec::new();
        for p in 0..build.properties().output_partitioning().partition_count() {
            let mut stream = build.execute(p, context.clone())?;
            while let Some(b) = stream.next().await {
                let b = b?;
                reservation.try_grow(b.get_array_memory_size())?;
                batches.push(b);
            }
        }
        reservation.try_grow(reservation.size())?;
        let batch = concat_batches(&build.schema(), &batches)?;
        drop(batches);
        reservation.try_resize(batch.get_array_memory_size())?;
        if batch.num_rows() > u32::MAX as usize {
            return Err(DataFusionError::Execution(
                "a dictionary join's build side has more than 2^32 rows".into(),
            ));
        }
        let col = batch.column(key);
        let DataType::Utf8 = col.data_type() else {
            return Err(DataFusionError::Internal(format!(
                "dictionary join on a key of type {}",
                col.data_type()
            )));
        };
        let (rows, map) = runs(col.as_string::<i32>().iter().map(|v| v.map(Box::<str>::from)));
        let entry = std::mem::size_of::<(Box<str>, (u32, u32))>() + 8;
        let keys: usize = map.keys().map(|k| k.len() + entry).sum();
        reservation.try_grow(rows.len() * 4 + keys)?;
        Ok(BuildTable { batch, rows, map, _reservation: reservation })
    }

    /// `(start, len)` of the build rows matching each element of `keys` (`len` 0: none;
    /// NULL never matches).
    fn spans(&self, keys: &ArrayRef) -> Result<Vec<(u32, u32)>> {
        let DataType::Utf8 = keys.data_type() else {
            return Err(DataFusionError::Internal(format!(
                "dictionary join probed with keys of type {}",
                keys.data_type()
            )));
        };
        Ok(keys
            .as_string::<i32>()
            .iter()
            .map(|k| k.and_then(|k| self.map.get(k).copied()).unwrap_or((0, 0)))
            .collect())
    }
}

/// The memory pool consumer name of a dictionary join's build side (named in "resources
/// exhausted" errors, which the connection recognises to run the statement again).
pub(crate) const BUILD_CONSUMER: &str = "BasaltDictJoinBuild";

/// Groups row numbers by key: the rows grouped by key (ascending within a key), and each
/// key's run. NULL keys are left out.
fn runs<K: std::hash::Hash + Eq>(
    keys: impl Iterator<Item = Option<K>>,
) -> (Vec<u32>, HashMap<K, (u32, u32)>) {
    let mut by_key: HashMap<K, Vec<u32>> = HashMap::new();
    for (i, k) in keys.enumerate() {
        let Some(k) = k else { continue };
        // The build side has fewer than 2^32 rows (checked by the caller).
        let i = i as u32;
        match by_key.get_mut(&k) {
            Some(v) => v.push(i),
            None => {
                by_key.insert(k, vec![i]);
            }
        }
    }
    let mut rows = Vec::new();
    let mut map = HashMap::with_capacity(by_key.len());
    for (k, v) in by_key {
        let start = rows.len() as u32;
        rows.extend_from_slice(&v);
        map.insert(k, (start, v.len() as u32));
    }
    (rows, map)
}

/// The probe of one partition: scans its units and joins each batch (one row group, or
/// the memtable) with the build table.
pub(crate) struct Probe {
    scan: Scan,
    table: Arc<BuildTable>,
    probe_key: usize,
    keep_unmatched: bool,
    output: Vec<Out>,
    schema: SchemaRef,
    /// Leave probe columns as codes (each batch with its own schema).
    codes: bool,
    /// Rows still to return under the join's `fetch`.
    left: Option<usize>,
}

impl Probe {
    /// Joins one probe batch; `None` when no row comes out.
    fn join(&self, b: &RecordBatch) -> Result<Option<RecordBatch>> {
        let n = b.num_rows();
        let key = b.column(self.probe_key);
        if self.output.is_empty() && matches!(key.data_type(), DataType::Dictionary(_, _)) {
            return self.count_only(key);
        }
        let spans = match key.data_type() {
            DataType::Dictionary(_, _) => {
                // One lookup per dictionary entry, then one table read per row.
                let entries = self.table.spans(&dictionary_values(key)?)?;
                let codes = codes_of(key)?;
                let mut out: Vec<(u32, u32)> = Vec::with_capacity(n);
                for (i, c) in codes.into_iter().enumerate() {
                    let s = if key.is_null(i) { None } else { entries.get(c as usize).copied() };
                    out.push(s.unwrap_or((0, 0)));
                }
                out
            }
            _ => self.table.spans(key)?,
        };
        let keep = u32::from(self.keep_unmatched);
        let mut total = 0usize;
        let mut identity = true;
        for &(_, len) in &spans {
            let k = len.max(keep);
            total += k as usize;
            identity &= k == 1;
        }
        if total == 0 {
            return Ok(None);
        }
        let needs_build = self.output.iter().any(|o| matches!(o, Out::Build(_)));
        // Probe row and build row (NULL: none) of each output row.
        let mut probe_idx: Vec<u32> = Vec::new();
        let mut build_idx: Vec<Option<u32>> = Vec::new();
        if !identity || needs_build {
            if !identity {
                probe_idx.reserve(total);
            }
            if needs_build {
                build_idx.reserve(total);
            }
            for (i, &(start, len)) in spans.iter().enumerate() {
                if len == 0 {
                    if keep == 1 {
                        if !identity {
                            probe_idx.push(i as u32);
                        }
                        if needs_build {
                            build_idx.push(None);
                        }
                    }
                    continue;
                }
                for r in start..start + len {
                    if !identity {
                        probe_idx.push(i as u32);
                    }
                    if needs_build {
                        build_idx.push(self.table.rows.get(r as usize).copied());
                    }
                }
            }
        }
        let probe_idx = (!identity).then(|| UInt32Array::from(probe_idx));
        let build_idx = needs_build.then(|| UInt32Array::from(build_idx));
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(self.output.len());
        for (o, f) in self.output.iter().zip(self.schema.fields()) {
            let c = match *o {
                Out::Probe(p) => {
                    let c = b.column(p);
                    match &probe_idx {
                        Some(idx) => take(c.as_ref(), idx, None)?,
                        None => c.clone(),
                    }
                }
                Out::Build(p) => match &build_idx {
                    Some(idx) => take(self.table.batch.column(p).as_ref(), idx, None)?,
                    None => {
                        return Err(DataFusionError::Internal("no build indices".into()));
                    }
                },
            };
            let c = if c.data_type() == f.data_type()
                || (self.codes && matches!(c.data_type(), DataType::Dictionary(_, _)))
            {
                c
            } else {
                cast(&c, f.data_type())?
            };
            cols.push(c);
        }
        let schema = if self.codes {
            Arc::new(Schema::new(
                self.schema
                    .fields()
                    .iter()
                    .zip(&cols)
                    .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
                    .collect::<Vec<_>>(),
            ))
        } else {
            self.schema.clone()
        };
        Ok(Some(RecordBatch::try_new_with_options(
            schema,
            cols,
            &RecordBatchOptions::new().with_row_count(Some(total)),
        )?))
    }
}

impl Probe {
    /// A join without output columns (`count(*)` over it): rows per dictionary entry times
    /// that entry's matches, as a batch of that many rows and no column.
    fn count_only(&self, key: &ArrayRef) -> Result<Option<RecordBatch>> {
        let entries = self.table.spans(&dictionary_values(key)?)?;
        let mut rows = vec![0usize; entries.len()];
        let mut nulls = 0usize;
        for (i, c) in codes_of(key)?.into_iter().enumerate() {
            match rows.get_mut(c as usize) {
                Some(r) if key.is_valid(i) => *r += 1,
                _ => nulls += 1,
            }
        }
        let keep = usize::from(self.keep_unmatched);
        let total = nulls * keep
            + rows
                .iter()
                .zip(&entries)
                .map(|(r, &(_, len))| r * (len as usize).max(keep))
                .sum::<usize>();
        if total == 0 {
            return Ok(None);
        }
        Ok(Some(RecordBatch::try_new_with_options(
            self.schema.clone(),
            Vec::new(),
            &RecordBatchOptions::new().with_row_count(Some(total)),
        )?))
    }
}

impl Iterator for Probe {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Result<RecordBatch>> {
        loop {
            if self.left == Some(0) {
                return None;
            }
            let b = match self.scan.next()?.map_err(storage_err) {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            match self.join(&b) {
                Ok(Some(out)) => {
                    let Some(left) = &mut self.left else { return Some(Ok(out)) };
                    let out = out.slice(0, out.num_rows().min(*left));
                    *left -= out.num_rows();
                    return Some(Ok(out));
                }
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl DisplayAs for DictJoinExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let key = self
            .snapshot
            .schema()
            .full_schema()
            .fields()
            .get(self.projection.get(self.probe_key).copied().unwrap_or(usize::MAX))
            .map(|f| f.name().clone())
            .unwrap_or_default();
        write!(
            f,
            "BasaltDictJoin: type={}, table={}, key={}",
            if self.keep_unmatched { "Right" } else { "Inner" },
            self.snapshot.name(),
            key
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

impl ExecutionPlan for DictJoinExec {
    fn name(&self) -> &str {
        "BasaltDictJoin"
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
        Ok(Arc::new(self.with_build(build)))
    }

    fn fetch(&self) -> Option<usize> {
        self.fetch
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let units = partition_units(&self.groups, partition, "BasaltDictJoin")?;
        let me = self.clone();
        Ok(deferred_stream(self.schema.clone(), async move {
            me.probe(units, context, false).await.map(futures::stream::iter)
        }))
    }
}
