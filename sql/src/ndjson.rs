//! Newline-delimited JSON scans for `read_json` of one local file: the file is split into
//! byte ranges read in parallel, and each range is decoded by a fast decoder for flat
//! records, with arrow-json (what DataFusion's own JSON scan uses) as the reference for
//! anything the fast decoder does not accept.
//!
//! # What this module owns
//!
//! [`NdjsonTable`] wraps the listing table [`crate::files`] builds for `read_json('file')`.
//! Its scan is an [`NdjsonExec`] when fast paths are on (`Connection::set_fast_paths`) and
//! every projected column is `Int64`, `Float64`, `Boolean`, `Utf8` or `Null` (what schema
//! inference produces for flat records); otherwise it is the listing table's own scan. It
//! must not decide anything about the query above the scan (filters, limits and
//! aggregates stay DataFusion's), and it never reads more than the file's bytes once.
//!
//! # Ranges
//!
//! Partition `p` of `n` owns the lines that *start* in bytes `[len·p/n, len·(p+1)/n)`: it
//! skips to the first line start at or after its first byte and stops after the line that
//! crosses its last byte, so every line is read by exactly one partition, in file order
//! within it. A record written across several lines is decoded as long as it does not cross
//! a range boundary (the same rule DataFusion's own ranged JSON scan has).
//!
//! # Invariant: the same answer as arrow-json
//!
//! A range is decoded in slices of at most `batch_size` lines. The fast decoder either
//! returns exactly the batch arrow-json's decoder returns for a slice (same projected
//! schema, default options: unknown keys ignored, no coercion of primitives) or *refuses*
//! the slice, and a refused slice is decoded by arrow-json, whose rows or error are the
//! answer. The fast decoder accepts only a narrow grammar and refuses everything else:
//! whitespace-separated top-level objects; keys without escapes; a value of a read column
//! that is `null` or of the column's own JSON kind (a string for `Utf8`, `true`/`false` for
//! `Boolean`, an integer without fraction or exponent that fits for `Int64`, any finite
//! number for `Float64`); a read column given twice in one record; surrogate `\u` escapes;
//! a slice that is not UTF-8; nesting deeper than [`MAX_DEPTH`]. Values of other keys are
//! checked against the JSON grammar and skipped. So the fast path can be slower on unusual
//! input but never different; the tests compare the two on random input.

use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, NullArray, RecordBatch, RecordBatchOptions,
    StringArray,
};
use datafusion::arrow::array::{BooleanBufferBuilder, NullBufferBuilder};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::json::ReaderBuilder;
use datafusion::arrow::json::reader::Decoder;
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_expr::{EquivalenceProperties, Partitioning};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::metrics::{
    Count, ExecutionPlanMetricsSet, MetricBuilder, MetricsSet,
};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{DisplayAs, DisplayFormatType, ExecutionPlan, PlanProperties};

/// Deepest nesting of a skipped value the fast decoder follows (deeper: the slice is
/// refused and arrow-json decodes it).
pub const MAX_DEPTH: usize = 64;
/// Bytes read from the file at a time (a longer line grows the buffer).
const READ_BYTES: usize = 4 << 20;
/// A range is split only when each partition gets at least this many bytes.
const MIN_RANGE_BYTES: u64 = 1 << 20;

/// `read_json` of one local file: scanned by [`NdjsonExec`] when it can be, otherwise by the
/// listing table it wraps.
#[derive(Debug)]
pub struct NdjsonTable {
    inner: Arc<dyn TableProvider>,
    path: PathBuf,
    schema: SchemaRef,
    fast: Arc<AtomicBool>,
}

impl NdjsonTable {
    /// Wraps `inner` (the listing table over `path` with schema `schema`); `fast` is the
    /// connection's fast-path switch, read at each scan.
    pub fn new(
        inner: Arc<dyn TableProvider>,
        path: PathBuf,
        schema: SchemaRef,
        fast: Arc<AtomicBool>,
    ) -> NdjsonTable {
        NdjsonTable { inner, path, schema, fast }
    }
}

/// Whether the fast decoder reads columns of this type.
fn readable(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Int64 | DataType::Float64 | DataType::Boolean | DataType::Utf8 | DataType::Null
    )
}

#[async_trait]
impl TableProvider for NdjsonTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let columns: Vec<usize> = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        let repeats = columns.iter().enumerate().any(|(i, c)| columns[..i].contains(c));
        let fast = self.fast.load(Ordering::Relaxed)
            && !repeats
            && columns.iter().all(|&c| readable(self.schema.field(c).data_type()));
        if !fast {
            return self.inner.scan(state, projection, filters, limit).await;
        }
        let len = std::fs::metadata(&self.path)
            .map_err(|e| {
                DataFusionError::Execution(format!("read_json: {}: {e}", self.path.display()))
            })?
            .len();
        let partitions = (state.config().target_partitions().max(1) as u64)
            .min((len / MIN_RANGE_BYTES).max(1)) as usize;
        Ok(Arc::new(NdjsonExec::new(
            self.path.clone(),
            len,
            self.schema.clone(),
            columns,
            limit,
            partitions,
        )?))
    }
}

/// What a scan decodes: the file's field names and, per field, the output column it fills.
#[derive(Debug)]
struct Plan {
    names: Vec<Vec<u8>>,
    target: Vec<Option<usize>>,
    /// Output schema (the projected fields, in projection order).
    out: SchemaRef,
}

impl Plan {
    /// `columns`: the projection, without repeats (the table scans those the listing way).
    fn new(file: &SchemaRef, columns: &[usize]) -> Result<Plan> {
        let out = Arc::new(file.project(columns)?);
        let mut target = vec![None; file.fields().len()];
        for (i, &c) in columns.iter().enumerate() {
            target[c] = Some(i);
        }
        let names = file.fields().iter().map(|f| f.name().as_bytes().to_vec()).collect();
        Ok(Plan { names, target, out })
    }
}

/// Leaf scan of one NDJSON file in byte ranges; see the module docs.
#[derive(Debug, Clone)]
pub struct NdjsonExec {
    path: PathBuf,
    len: u64,
    plan: Arc<Plan>,
    limit: Option<usize>,
    props: Arc<PlanProperties>,
    metrics: ExecutionPlanMetricsSet,
}

impl NdjsonExec {
    fn new(
        path: PathBuf,
        len: u64,
        file_schema: SchemaRef,
        columns: Vec<usize>,
        limit: Option<usize>,
        partitions: usize,
    ) -> Result<NdjsonExec> {
        let plan = Arc::new(Plan::new(&file_schema, &columns)?);
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(plan.out.clone()),
            Partitioning::UnknownPartitioning(partitions.max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        Ok(NdjsonExec { path, len, plan, limit, props, metrics: ExecutionPlanMetricsSet::new() })
    }

    fn partitions(&self) -> usize {
        self.props.output_partitioning().partition_count()
    }
}

impl DisplayAs for NdjsonExec {
    fn fmt_as(&self, t: DisplayFormatType, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cols: Vec<&str> = self.plan.out.fields().iter().map(|f| f.name().as_str()).collect();
        match t {
            DisplayFormatType::Default | DisplayFormatType::Verbose => {
                write!(
                    f,
                    "BasaltNdjsonScan: file={}, projection=[{}], ranges={}",
                    self.path.display(),
                    cols.join(", "),
                    self.partitions()
                )?;
                if let Some(l) = self.limit {
                    write!(f, ", limit={l}")?;
                }
                Ok(())
            }
            DisplayFormatType::TreeRender => writeln!(f, "file={}", self.path.display()),
        }
    }
}

impl ExecutionPlan for NdjsonExec {
    fn name(&self) -> &str {
        "BasaltNdjsonScan"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    leaf_exec!();

    fn metrics(&self) -> Option<MetricsSet> {
        Some(self.metrics.clone_inner())
    }

    fn execute(
        &self,
        partition: usize,
        context: Arc<TaskContext>,
    ) -> Result<SendableRecordBatchStream> {
        let n = self.partitions() as u64;
        if partition as u64 >= n {
            return Err(DataFusionError::Internal(format!(
                "BasaltNdjsonScan has {n} partitions, asked for {partition}"
            )));
        }
        let p = partition as u64;
        let lo = (u128::from(self.len) * u128::from(p) / u128::from(n)) as u64;
        let hi = (u128::from(self.len) * u128::from(p + 1) / u128::from(n)) as u64;
        let counts = Counts {
            fast: MetricBuilder::new(&self.metrics).counter("fast_slices", partition),
            reference: MetricBuilder::new(&self.metrics).counter("reference_slices", partition),
        };
        let reader = RangeReader::open(
            self.path.clone(),
            lo,
            hi,
            self.plan.clone(),
            context.session_config().batch_size().max(1),
            self.limit,
            READ_BYTES,
            counts,
        );
        let stream =
            RecordBatchStreamAdapter::new(self.plan.out.clone(), futures::stream::iter(reader));
        Ok(datafusion::physical_plan::coop::make_cooperative(Box::pin(stream)))
    }
}

/// How a partition's slices were decoded (shown by EXPLAIN ANALYZE; read by the tests).
#[derive(Debug, Clone)]
struct Counts {
    fast: Count,
    reference: Count,
}

/// The batches of one byte range, in file order.
struct RangeReader {
    path: PathBuf,
    file: Option<File>,
    /// Bytes `[lo, hi)` hold the starts of this range's lines (reading starts at
    /// `lo - 1`, the end of the line before, when `lo > 0`).
    hi: u64,
    /// File offset of `buf[0]`.
    base: u64,
    buf: Vec<u8>,
    /// Bytes of `buf` already decoded.
    used: usize,
    /// The skip to the first line start is done.
    started: bool,
    /// No more bytes to read for this range.
    last: bool,
    plan: Arc<Plan>,
    batch_lines: usize,
    left: Option<usize>,
    read_bytes: usize,
    reference: Option<Decoder>,
    ready: std::collections::VecDeque<RecordBatch>,
    counts: Counts,
    failed: bool,
}

impl RangeReader {
    #[allow(clippy::too_many_arguments)]
    fn open(
        path: PathBuf,
        lo: u64,
        hi: u64,
        plan: Arc<Plan>,
        batch_lines: usize,
        limit: Option<usize>,
        read_bytes: usize,
        counts: Counts,
    ) -> RangeReader {
        RangeReader {
            path,
            file: None,
            hi,
            base: lo.saturating_sub(1),
            buf: Vec::new(),
            used: 0,
            started: lo == 0,
            last: false,
            plan,
            batch_lines,
            left: limit,
            read_bytes,
            reference: None,
            ready: Default::default(),
            counts,
            failed: false,
        }
    }

    fn err(&self, what: impl fmt::Display) -> DataFusionError {
        DataFusionError::Execution(format!("read_json: {}: {what}", self.path.display()))
    }

    /// Reads more of the file after the undecoded bytes; `false` at the end of the file.
    fn fill(&mut self) -> Result<bool> {
        if self.file.is_none() {
            let mut f = File::open(&self.path).map_err(|e| self.err(e))?;
            f.seek(SeekFrom::Start(self.base)).map_err(|e| self.err(e))?;
            self.file = Some(f);
        }
        if self.used > 0 {
            self.buf.drain(..self.used);
            self.base += self.used as u64;
            self.used = 0;
        }
        let Some(f) = self.file.as_mut() else { return Ok(false) };
        self.buf.reserve(self.read_bytes);
        let got = Read::take(&mut *f, self.read_bytes as u64).read_to_end(&mut self.buf);
        Ok(got.map_err(|e| self.err(e))? > 0)
    }

    /// The end of the next run of whole lines of this range (`buf[used..end]`), reading as
    /// needed; `None` when the range is done.
    fn next_lines(&mut self) -> Result<Option<usize>> {
        loop {
            if !self.started {
                // Skip the line that started before `lo` (the previous range owns it).
                if let Some(nl) = memchr::memchr(b'\n', &self.buf[self.used..]) {
                    self.used += nl + 1;
                    self.started = true;
                    continue;
                }
                self.used = self.buf.len();
                if !self.fill()? {
                    return Ok(None);
                }
                continue;
            }
            if self.last {
                return Ok(None);
            }
            let pending = &self.buf[self.used..];
            // `pending` starts at a line start; lines starting at or after `hi` are not ours.
            let pos = self.base + self.used as u64;
            if pos >= self.hi {
                self.last = true;
                return Ok(None);
            }
            // The range ends with the line holding byte `hi - 1`.
            let stop = usize::try_from(self.hi - 1 - pos).unwrap_or(usize::MAX);
            if stop < pending.len() {
                if let Some(nl) = memchr::memchr(b'\n', &pending[stop..]) {
                    self.last = true;
                    return Ok(Some(self.used + stop + nl + 1));
                }
                if let Some(nl) = memchr::memrchr(b'\n', &pending[..stop]) {
                    return Ok(Some(self.used + nl + 1));
                }
            } else if let Some(nl) = memchr::memrchr(b'\n', pending) {
                return Ok(Some(self.used + nl + 1));
            }
            if !self.fill()? {
                // The file ends without a newline after the last line.
                self.last = true;
                return Ok((self.used < self.buf.len()).then_some(self.buf.len()));
            }
        }
    }

    fn decode_lines(&mut self, end: usize) -> Result<()> {
        let mut at = self.used;
        while at < end {
            let slice_end =
                match memchr::memchr_iter(b'\n', &self.buf[at..end]).nth(self.batch_lines - 1) {
                    Some(i) => at + i + 1,
                    None => end,
                };
            let slice = &self.buf[at..slice_end];
            let partial = self.reference.as_ref().is_some_and(Decoder::has_partial_record);
            let fast = if partial { Err(Refused) } else { decode_fast(slice, &self.plan) };
            match fast {
                Ok(b) => {
                    self.counts.fast.add(1);
                    if b.num_rows() > 0 {
                        self.ready.push_back(b);
                    }
                }
                Err(Refused) => {
                    self.counts.reference.add(1);
                    let at_byte = self.base + at as u64;
                    let slice = &self.buf[at..slice_end];
                    let dec = match &mut self.reference {
                        Some(d) => d,
                        None => {
                            let d = ReaderBuilder::new(self.plan.out.clone())
                                .with_batch_size(self.batch_lines)
                                .build_decoder()
                                .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))?;
                            self.reference.insert(d)
                        }
                    };
                    let mut fed = 0;
                    let ctx = |e: ArrowError| {
                        DataFusionError::Execution(format!(
                            "read_json: {}: in the lines from byte {at_byte}: {e}",
                            self.path.display()
                        ))
                    };
                    while fed < slice.len() {
                        let k = dec.decode(&slice[fed..]).map_err(ctx)?;
                        fed += k;
                        if fed < slice.len() {
                            // The decoder stopped at a full batch.
                            match dec.flush().map_err(ctx)? {
                                Some(b) => self.ready.push_back(b),
                                None if k == 0 => {
                                    return Err(ctx(ArrowError::JsonError(
                                        "the JSON decoder made no progress".into(),
                                    )));
                                }
                                None => {}
                            }
                        }
                    }
                    if !dec.has_partial_record()
                        && let Some(b) = dec.flush().map_err(ctx)?
                    {
                        self.ready.push_back(b);
                    }
                }
            }
            at = slice_end;
        }
        self.used = end;
        Ok(())
    }

    fn step(&mut self) -> Result<Option<RecordBatch>> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Ok(Some(b));
            }
            if self.left == Some(0) {
                return Ok(None);
            }
            match self.next_lines()? {
                Some(end) => self.decode_lines(end)?,
                None => {
                    if let Some(dec) = &mut self.reference {
                        if dec.has_partial_record() {
                            let at = self.base + self.used as u64;
                            return Err(self.err(format!(
                                "a JSON record is cut off before byte {at} (a record must end \
                                 before the next range of lines begins)"
                            )));
                        }
                        if let Some(b) = dec
                            .flush()
                            .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))?
                        {
                            self.ready.push_back(b);
                            continue;
                        }
                    }
                    return Ok(None);
                }
            }
        }
    }
}

impl Iterator for RangeReader {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.step() {
            Ok(Some(b)) => {
                let b = match &mut self.left {
                    Some(left) => {
                        let b = if b.num_rows() > *left { b.slice(0, *left) } else { b };
                        *left -= b.num_rows();
                        b
                    }
                    None => b,
                };
                Some(Ok(b))
            }
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// The fast decoder gave up on a slice; arrow-json decodes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

type Fast<T> = std::result::Result<T, Refused>;

/// One output column being built.
enum Col {
    Int(Vec<i64>, NullBufferBuilder),
    Float(Vec<f64>, NullBufferBuilder),
    Bool(BooleanBufferBuilder, NullBufferBuilder),
    Str(Vec<i32>, Vec<u8>, NullBufferBuilder),
    Null(usize),
}

impl Col {
    fn new(dt: &DataType, rows: usize) -> Col {
        match dt {
            DataType::Int64 => Col::Int(Vec::with_capacity(rows), NullBufferBuilder::new(rows)),
            DataType::Float64 => Col::Float(Vec::with_capacity(rows), NullBufferBuilder::new(rows)),
            DataType::Boolean => {
                Col::Bool(BooleanBufferBuilder::new(rows), NullBufferBuilder::new(rows))
            }
            DataType::Utf8 => {
                let mut offsets = Vec::with_capacity(rows + 1);
                offsets.push(0);
                Col::Str(offsets, Vec::with_capacity(rows * 8), NullBufferBuilder::new(rows))
            }
            _ => Col::Null(0),
        }
    }

    fn push_null(&mut self) {
        match self {
            Col::Int(v, n) => {
                v.push(0);
                n.append_null();
            }
            Col::Float(v, n) => {
                v.push(0.0);
                n.append_null();
            }
            Col::Bool(v, n) => {
                v.append(false);
                n.append_null();
            }
            Col::Str(o, d, n) => {
                o.push(d.len() as i32);
                n.append_null();
            }
            Col::Null(k) => *k += 1,
        }
    }

    fn finish(self) -> Fast<ArrayRef> {
        Ok(match self {
            Col::Int(v, mut n) => Arc::new(Int64Array::new(v.into(), n.finish())),
            Col::Float(v, mut n) => Arc::new(Float64Array::new(v.into(), n.finish())),
            Col::Bool(mut v, mut n) => Arc::new(BooleanArray::new(v.finish(), n.finish())),
            Col::Str(o, d, mut n) => {
                // Offsets grow monotonically from 0 and every value was checked UTF-8 (the
                // slice is), so `try_new` cannot fail unless the data passed `i32::MAX`.
                let offsets = OffsetBuffer::new(o.into());
                Arc::new(StringArray::try_new(offsets, d.into(), n.finish()).map_err(|_| Refused)?)
            }
            Col::Null(k) => Arc::new(NullArray::new(k)),
        })
    }
}

/// Decodes a slice of whole lines with the fast decoder (see the module docs), or refuses.
fn decode_fast(slice: &[u8], plan: &Plan) -> Fast<RecordBatch> {
    if std::str::from_utf8(slice).is_err() {
        return Err(Refused);
    }
    // Capacity for the columns read (none for `COUNT(*)`, which only checks and counts).
    let reads = !plan.out.fields().is_empty();
    let lines = if reads { memchr::memchr_iter(b'\n', slice).count() + 1 } else { 0 };
    let mut cols: Vec<Col> =
        plan.out.fields().iter().map(|f| Col::new(f.data_type(), lines)).collect();
    let mut stamp = vec![0u32; cols.len()];
    let b = slice;
    let mut i = 0;
    let mut rows = 0u32;
    let mut guess = 0usize;
    loop {
        i = ws(b, i);
        if i == b.len() {
            break;
        }
        if b[i] != b'{' {
            return Err(Refused);
        }
        rows = rows.checked_add(1).ok_or(Refused)?;
        i = ws(b, i + 1);
        if b.get(i) == Some(&b'}') {
            i += 1;
        } else {
            loop {
                if b.get(i) != Some(&b'"') {
                    return Err(Refused);
                }
                let start = i + 1;
                let len = quote_or_backslash(&b[start..]).ok_or(Refused)?;
                if b[start + len] != b'"' {
                    return Err(Refused);
                }
                let key = &b[start..start + len];
                i = ws(b, start + len + 1);
                if b.get(i) != Some(&b':') {
                    return Err(Refused);
                }
                i = ws(b, i + 1);
                let field = if !reads {
                    None
                } else if plan.names.get(guess).is_some_and(|n| n == key) {
                    Some(guess)
                } else {
                    plan.names.iter().position(|n| n == key)
                };
                match field.and_then(|f| plan.target[f].map(|c| (f, c))) {
                    Some((f, c)) => {
                        guess = f + 1;
                        if stamp[c] == rows {
                            return Err(Refused);
                        }
                        stamp[c] = rows;
                        i = read_value(b, i, &mut cols[c])?;
                    }
                    None => {
                        if let Some(f) = field {
                            guess = f + 1;
                        }
                        i = skip_value(b, i, 0)?;
                    }
                }
                i = ws(b, i);
                match b.get(i) {
                    Some(b',') => i = ws(b, i + 1),
                    Some(b'}') => {
                        i += 1;
                        break;
                    }
                    _ => return Err(Refused),
                }
            }
        }
        for (c, s) in cols.iter_mut().zip(&stamp) {
            if *s != rows {
                c.push_null();
            }
        }
        // A record must be followed by whitespace or the next record.
        match b.get(i) {
            None | Some(b' ' | b'\n' | b'\r' | b'\t' | b'{') => {}
            _ => return Err(Refused),
        }
    }
    let arrays = cols.into_iter().map(Col::finish).collect::<Fast<Vec<_>>>()?;
    let opts = RecordBatchOptions::new().with_row_count(Some(rows as usize));
    RecordBatch::try_new_with_options(plan.out.clone(), arrays, &opts).map_err(|_| Refused)
}

/// The index of the first non-whitespace byte at or after `i`.
#[inline]
fn ws(b: &[u8], mut i: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\r' | b'\t') = b.get(i) {
        i += 1;
    }
    i
}

/// Reads the value at `b[i]` into `col`; returns the index after it.
fn read_value(b: &[u8], i: usize, col: &mut Col) -> Fast<usize> {
    match (b.get(i), col) {
        (Some(b'n'), col) => {
            if !b[i..].starts_with(b"null") {
                return Err(Refused);
            }
            col.push_null();
            Ok(i + 4)
        }
        (Some(b'"'), Col::Str(o, d, n)) => {
            let end = string(b, i + 1, Some(d))?;
            if d.len() > i32::MAX as usize {
                return Err(Refused);
            }
            o.push(d.len() as i32);
            n.append_non_null();
            Ok(end)
        }
        (Some(b't'), Col::Bool(v, n)) if b[i..].starts_with(b"true") => {
            v.append(true);
            n.append_non_null();
            Ok(i + 4)
        }
        (Some(b'f'), Col::Bool(v, n)) if b[i..].starts_with(b"false") => {
            v.append(false);
            n.append_non_null();
            Ok(i + 5)
        }
        (Some(b'-' | b'0'..=b'9'), Col::Int(v, n)) => {
            let (end, integral) = number(b, i)?;
            if !integral {
                return Err(Refused);
            }
            v.push(int(&b[i..end])?);
            n.append_non_null();
            Ok(end)
        }
        (Some(b'-' | b'0'..=b'9'), Col::Float(v, n)) => {
            let (end, _) = number(b, i)?;
            let text = &b[i..end];
            // Integers below 2^53 convert exactly, which is what parsing them gives.
            let x = match short_decimal(text) {
                Some(x) => x,
                None => std::str::from_utf8(text)
                    .ok()
                    .and_then(|s| s.parse::<f64>().ok())
                    .filter(|x| x.is_finite())
                    .ok_or(Refused)?,
            };
            v.push(x);
            n.append_non_null();
            Ok(end)
        }
        _ => Err(Refused),
    }
}

/// The first `"` or `\\` in `b`: eight bytes at a time in a register for the first 32
/// bytes (keys and values are mostly short, where a vector search's setup costs more than
/// it saves), then memchr.
#[inline]
fn quote_or_backslash(b: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    const NEAR: usize = 32;
    let mut at = 0;
    while at + 8 <= b.len() {
        if at == NEAR {
            return memchr::memchr2(b'"', b'\\', &b[at..]).map(|k| k + at);
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&b[at..at + 8]);
        let v = u64::from_le_bytes(a);
        // A zero byte of `v ^ pattern` is a match; the lowest flagged byte of the classic
        // "has a zero byte" mask is exactly the first zero byte (only bytes above it can be
        // flagged falsely), so the lowest bit of either mask is the first match.
        let (q, s) = (v ^ (ONES * u64::from(b'"')), v ^ (ONES * u64::from(b'\\')));
        let m = (q.wrapping_sub(ONES) & !q & HIGH) | (s.wrapping_sub(ONES) & !s & HIGH);
        if m != 0 {
            return Some(at + (m.trailing_zeros() / 8) as usize);
        }
        at += 8;
    }
    b[at..].iter().position(|&c| c == b'"' || c == b'\\').map(|k| k + at)
}

/// A number without exponent and with at most 15 digits, converted the way Clinger's fast
/// path does: the digits as an exact integer divided by an exact power of ten, one
/// correctly rounded operation — the same `f64` a full decimal parse gives. `None` for
/// anything else.
fn short_decimal(text: &[u8]) -> Option<f64> {
    const POW10: [f64; 16] =
        [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];
    let (neg, t) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let (mut mant, mut digits, mut frac, mut dot) = (0u64, 0usize, 0usize, false);
    for &c in t {
        if c == b'.' && !dot {
            dot = true;
            continue;
        }
        if !c.is_ascii_digit() {
            return None;
        }
        mant = mant * 10 + u64::from(c - b'0');
        digits += 1;
        frac += usize::from(dot);
        if digits > 15 {
            return None;
        }
    }
    let v = mant as f64 / POW10[frac];
    Some(if neg { -v } else { v })
}

/// Checks the JSON number at `b[i]`; returns the index after it and whether it has neither
/// fraction nor exponent.
fn number(b: &[u8], mut i: usize) -> Fast<(usize, bool)> {
    let digits = |b: &[u8], mut i: usize| -> (usize, usize) {
        let s = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        (i, i - s)
    };
    if b.get(i) == Some(&b'-') {
        i += 1;
    }
    match b.get(i) {
        Some(b'0') => i += 1,
        Some(b'1'..=b'9') => i = digits(b, i).0,
        _ => return Err(Refused),
    }
    let mut integral = true;
    if b.get(i) == Some(&b'.') {
        let (j, k) = digits(b, i + 1);
        if k == 0 {
            return Err(Refused);
        }
        i = j;
        integral = false;
    }
    if let Some(b'e' | b'E') = b.get(i) {
        i += 1;
        if let Some(b'+' | b'-') = b.get(i) {
            i += 1;
        }
        let (j, k) = digits(b, i);
        if k == 0 {
            return Err(Refused);
        }
        i = j;
        integral = false;
    }
    Ok((i, integral))
}

/// A checked integer (optional `-`, then digits) as `i64`.
fn int(text: &[u8]) -> Fast<i64> {
    let (neg, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return Err(Refused);
        }
        let d = i64::from(d - b'0');
        v = v
            .checked_mul(10)
            .and_then(|v| if neg { v.checked_sub(d) } else { v.checked_add(d) })
            .ok_or(Refused)?;
    }
    Ok(v)
}

/// Checks the string whose contents start at `b[i]` (after the opening quote), appending
/// its unescaped bytes to `out` when given; returns the index after the closing quote.
fn string(b: &[u8], mut i: usize, mut out: Option<&mut Vec<u8>>) -> Fast<usize> {
    loop {
        let k = quote_or_backslash(&b[i..]).ok_or(Refused)?;
        if let Some(o) = out.as_deref_mut() {
            o.extend_from_slice(&b[i..i + k]);
        }
        i += k;
        if b[i] == b'"' {
            return Ok(i + 1);
        }
        let c = *b.get(i + 1).ok_or(Refused)?;
        let plain = match c {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let hex = b.get(i + 2..i + 6).ok_or(Refused)?;
                let s = std::str::from_utf8(hex).map_err(|_| Refused)?;
                if !s.bytes().all(|h| h.is_ascii_hexdigit()) {
                    return Err(Refused);
                }
                let u = u32::from_str_radix(s, 16).map_err(|_| Refused)?;
                // Surrogates (pairs or lone) are left to arrow-json.
                let ch = char::from_u32(u).ok_or(Refused)?;
                if let Some(o) = out.as_deref_mut() {
                    let mut tmp = [0u8; 4];
                    o.extend_from_slice(ch.encode_utf8(&mut tmp).as_bytes());
                }
                i += 6;
                continue;
            }
            _ => return Err(Refused),
        };
        if let Some(o) = out.as_deref_mut() {
            o.push(plain);
        }
        i += 2;
    }
}

/// Checks and skips the value at `b[i]`; returns the index after it.
fn skip_value(b: &[u8], i: usize, depth: usize) -> Fast<usize> {
    match b.get(i) {
        Some(b'"') => string(b, i + 1, None),
        Some(b'-' | b'0'..=b'9') => Ok(number(b, i)?.0),
        Some(b't') if b[i..].starts_with(b"true") => Ok(i + 4),
        Some(b'f') if b[i..].starts_with(b"false") => Ok(i + 5),
        Some(b'n') if b[i..].starts_with(b"null") => Ok(i + 4),
        Some(&open @ (b'{' | b'[')) => {
            if depth >= MAX_DEPTH {
                return Err(Refused);
            }
            let close = if open == b'{' { b'}' } else { b']' };
            let mut i = ws(b, i + 1);
            if b.get(i) == Some(&close) {
                return Ok(i + 1);
            }
            loop {
                if open == b'{' {
                    if b.get(i) != Some(&b'"') {
                        return Err(Refused);
                    }
                    i = ws(b, string(b, i + 1, None)?);
                    if b.get(i) != Some(&b':') {
                        return Err(Refused);
                    }
                    i = ws(b, i + 1);
                }
                i = ws(b, skip_value(b, i, depth + 1)?);
                match b.get(i) {
                    Some(b',') => i = ws(b, i + 1),
                    Some(&c) if c == close => return Ok(i + 1),
                    _ => return Err(Refused),
                }
            }
        }
        _ => Err(Refused),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Schema};
    use proptest::prelude::*;

    fn file_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("i", DataType::Int64, true),
            Field::new("f", DataType::Float64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("z", DataType::Null, true),
        ]))
    }

    /// What arrow-json's decoder makes of `text` with the projected schema.
    fn reference(text: &[u8], plan: &Plan) -> std::result::Result<RecordBatch, String> {
        let mut d = ReaderBuilder::new(plan.out.clone())
            .with_batch_size(1 << 20)
            .build_decoder()
            .map_err(|e| e.to_string())?;
        let k = d.decode(text).map_err(|e| e.to_string())?;
        assert_eq!(k, text.len());
        if d.has_partial_record() {
            return Err("partial record".into());
        }
        Ok(d.flush()
            .map_err(|e| e.to_string())?
            .unwrap_or_else(|| RecordBatch::new_empty(plan.out.clone())))
    }

    fn counts() -> Counts {
        let m = ExecutionPlanMetricsSet::new();
        Counts {
            fast: MetricBuilder::new(&m).counter("f", 0),
            reference: MetricBuilder::new(&m).counter("r", 0),
        }
    }

    /// A JSON string text: plain, with every escape, or with ones left to arrow-json.
    fn string_text() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => "[a-zé\u{4e2d} ]{0,8}".prop_map(|s| format!("\"{s}\"")),
            2 => Just(r#""a\"b\\c\/d\n\t\r\b\f\u00e9\u4e2d""#.to_string()),
            1 => Just(r#""\ud83d\ude00""#.to_string()),
            1 => Just(r#""bad \x escape""#.to_string()),
        ]
    }

    /// Any JSON value text, valid or not.
    fn any_value() -> impl Strategy<Value = String> {
        prop_oneof![
            4 => any::<i64>().prop_map(|v| v.to_string()),
            1 => (-1000i64..1000).prop_map(|v| v.to_string()),
            3 => any::<f64>().prop_filter("finite", |x| x.is_finite()).prop_map(|x| format!("{x:?}")),
            1 => any::<f32>().prop_filter("finite", |x| x.is_finite()).prop_map(|x| format!("{x:e}")),
            3 => string_text(),
            2 => Just("null".to_string()),
            1 => any::<bool>().prop_map(|v| v.to_string()),
            1 => prop_oneof![
                Just(r#"{"x":[1,{"y":null}],"w":"q"}"#.to_string()),
                Just("[1, 2,]".to_string()),
                Just("01".to_string()),
                Just("1.".to_string()),
                Just("-".to_string()),
                Just("1e400".to_string()),
                Just("tru".to_string()),
                Just("9223372036854775808".to_string()),
            ],
        ]
    }

    /// A value for key `k`: mostly of its column's kind, sometimes anything.
    fn value_for(k: &'static str) -> BoxedStrategy<String> {
        let own: BoxedStrategy<String> = match k {
            "i" => prop_oneof![any::<i64>().prop_map(|v| v.to_string()), Just("-0".into())].boxed(),
            "f" => prop_oneof![
                any::<f64>()
                    .prop_filter("finite", |x| x.is_finite())
                    .prop_map(|x| format!("{x:?}")),
                any::<f64>()
                    .prop_filter("finite", |x| x.is_finite())
                    .prop_map(|x| format!("{x:e}")),
                any::<i64>().prop_map(|v| v.to_string()),
            ]
            .boxed(),
            "s" => string_text().boxed(),
            "b" => any::<bool>().prop_map(|v| v.to_string()).boxed(),
            "z" => Just("null".to_string()).boxed(),
            _ => any_value().boxed(),
        };
        prop_oneof![6 => own, 1 => Just("null".to_string()), 1 => any_value()].boxed()
    }

    /// A record: some of the file's keys plus unknown ones, in any order, any spacing.
    fn record() -> impl Strategy<Value = String> {
        let key = prop::sample::select(vec!["i", "f", "s", "b", "z", "other", "nested"]);
        let kv = key.prop_flat_map(|k| (Just(k), value_for(k), 0..3usize));
        (prop::collection::vec(kv, 0..7), any::<bool>()).prop_map(|(kvs, spaced)| {
            let sp = if spaced { " " } else { "" };
            let parts: Vec<String> = kvs
                .iter()
                .map(|(k, v, w)| format!("{}\"{k}\"{sp}:{}{v}", " ".repeat(*w), sp))
                .collect();
            format!("{{{}}}", parts.join(","))
        })
    }

    /// A record whose values all fit their columns (the fast decoder must take these).
    fn regular_record() -> impl Strategy<Value = String> {
        (
            prop::option::of(any::<i64>()),
            prop::option::of((-1e9f64..1e9).prop_map(|x| (x * 100.0).round() / 100.0)),
            prop::option::of(prop_oneof![
                "[a-z0-9 é]{0,12}".prop_map(|s| format!("\"{s}\"")),
                Just(r#""a\"b\\c\/d\n\t\r\b\f\u00e9\u4e2d""#.to_string()),
            ]),
            prop::option::of(any::<bool>()),
            any::<bool>(),
        )
            .prop_map(|(i, f, s, b, extra)| {
                let mut parts = Vec::new();
                if let Some(s) = s {
                    parts.push(format!("\"s\":{s}"));
                }
                if let Some(i) = i {
                    parts.push(format!("\"i\":{i}"));
                }
                parts.push(match f {
                    Some(f) => format!("\"f\":{f:?}"),
                    None => "\"f\":null".to_string(),
                });
                if let Some(b) = b {
                    parts.push(format!("\"b\":{b}"));
                }
                if extra {
                    parts.push(r#""tags":["a",{"k":-1.5e-3}]"#.to_string());
                }
                format!("{{{}}}", parts.join(","))
            })
    }

    fn projections() -> impl Strategy<Value = Vec<usize>> {
        prop::collection::vec(0..5usize, 0..5)
            .prop_map(|mut v| {
                v.sort_unstable();
                v.dedup();
                v
            })
            .prop_shuffle()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Whatever the fast decoder accepts, it decodes exactly as arrow-json does.
        #[test]
        fn fast_decoder_agrees_with_arrow_json(
            recs in prop::collection::vec(record(), 0..5),
            sep in prop_oneof![Just("\n"), Just("\r\n"), Just("\n\n "), Just(" ")],
            cols in projections(),
        ) {
            let plan = Plan::new(&file_schema(), &cols).unwrap();
            let text = recs.join(sep);
            if let Ok(fast) = decode_fast(text.as_bytes(), &plan) {
                let want = reference(text.as_bytes(), &plan);
                prop_assert!(want.is_ok(), "fast took what arrow-json refuses: {text}: {want:?}");
                prop_assert_eq!(fast, want.unwrap(), "{}", text);
            }
        }

        /// The word-at-a-time search finds what a plain search finds.
        #[test]
        fn quote_search_matches_a_plain_search(
            b in prop::collection::vec(
                // Matches rare enough that some first ones lie past the word-at-a-time part.
                prop_oneof![40 => 0x20u8..0x7f, 1 => Just(b'"'), 1 => Just(b'\\'), 2 => any::<u8>()],
                0..90,
            ),
        ) {
            let want = b.iter().position(|&c| c == b'"' || c == b'\\');
            prop_assert_eq!(quote_or_backslash(&b), want);
        }

        /// The short-decimal conversion gives the bits a full parse gives.
        #[test]
        fn short_decimals_convert_as_a_full_parse(
            m in prop_oneof![0u64..1000, 0u64..1_000_000_000_000_000],
            point in 0usize..17,
            neg in any::<bool>(),
        ) {
            let digits = m.to_string();
            let text = if point > 0 && point < digits.len() {
                format!("{}{}.{}", if neg { "-" } else { "" }, &digits[..point], &digits[point..])
            } else {
                format!("{}{digits}", if neg { "-" } else { "" })
            };
            let want: f64 = text.parse().unwrap();
            let got = short_decimal(text.as_bytes());
            prop_assert_eq!(got.map(f64::to_bits), Some(want.to_bits()), "{}", text);
        }

        /// Regular records are taken by the fast decoder (so the fast path is the one used).
        #[test]
        fn regular_records_take_the_fast_path(
            recs in prop::collection::vec(regular_record(), 1..20),
            cols in projections(),
        ) {
            let plan = Plan::new(&file_schema(), &cols).unwrap();
            let text = recs.join("\n") + "\n";
            let fast = decode_fast(text.as_bytes(), &plan);
            prop_assert!(fast.is_ok(), "refused: {text}");
            prop_assert_eq!(fast.unwrap(), reference(text.as_bytes(), &plan).unwrap());
        }

        /// Split into any number of ranges read in any read size, a file gives every record
        /// once, in order — refused slices included.
        #[test]
        fn ranges_cover_every_line_once(
            recs in prop::collection::vec(prop_oneof![3 => regular_record(), 1 => record()], 0..40),
            parts in 1u64..6,
            read_bytes in prop_oneof![Just(1usize), 2usize..40, Just(4096)],
            batch_lines in 1usize..7,
        ) {
            let text = recs.join("\n") + "\n";
            let plan = Arc::new(Plan::new(&file_schema(), &[0, 2, 1]).unwrap());
            let want = reference(text.as_bytes(), &plan);
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("r.json");
            std::fs::write(&path, &text).unwrap();
            let len = text.len() as u64;
            let mut got = Vec::new();
            let mut failed = None;
            for p in 0..parts {
                let reader = RangeReader::open(
                    path.clone(), len * p / parts, len * (p + 1) / parts, plan.clone(),
                    batch_lines, None, read_bytes, counts(),
                );
                for b in reader {
                    match b {
                        Ok(b) => got.push(b),
                        Err(e) => failed = Some(e.to_string()),
                    }
                }
            }
            match want {
                Ok(want) => {
                    prop_assert!(failed.is_none(), "{failed:?}");
                    let got = datafusion::arrow::compute::concat_batches(&plan.out, &got).unwrap();
                    prop_assert_eq!(got, want);
                }
                Err(_) => prop_assert!(failed.is_some(), "arrow-json fails, the ranges did not"),
            }
        }
    }

    #[test]
    fn limits_stop_early_and_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.json");
        let text: String = (0..100).map(|i| format!("{{\"i\":{i}}}\n")).collect();
        std::fs::write(&path, &text).unwrap();
        let plan = Arc::new(Plan::new(&file_schema(), &[0]).unwrap());
        let len = text.len() as u64;
        let reader =
            RangeReader::open(path.clone(), 0, len, plan.clone(), 8, Some(10), 64, counts());
        let rows: usize = reader.map(|b| b.unwrap().num_rows()).sum();
        assert_eq!(rows, 10);

        std::fs::write(&path, "{\"i\":1}\n{\"i\":oops}\n").unwrap();
        let reader = RangeReader::open(path.clone(), 0, 19, plan, 8, None, 64, counts());
        let err = reader.filter_map(|b| b.err()).next().expect("an error").to_string();
        assert!(err.contains("l.json") && err.contains("byte 0"), "{err}");
    }
}
