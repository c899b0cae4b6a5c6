//! The database-level store: tables, snapshots, inserts, flushes, point lookups and scans.
//!
//! A [`Store`] owns one database directory (or an in-memory [`crate::io::MemFs`]). Its state
//! is an immutable [`DbSnapshot`] behind an `RwLock<Arc<_>>`: readers clone the `Arc` in O(1)
//! and keep a consistent view for as long as they like; a writer (one at a time, serialised
//! by a mutex) builds the next state, makes it durable where required, and swaps it in.
//!
//! Write path (format version 1, before the WAL lands): small inserts go to the table's
//! memtable and are persisted by `flush()` / `close()` / drop; inserts of at least
//! [`StoreOptions::bulk_insert_rows`] rows are encoded straight into a new segment, synced,
//! and published through an atomic manifest replacement before `insert` returns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, PrimitiveArray, RecordBatch, UInt64Array,
    new_null_array,
};
use arrow_buffer::{BooleanBuffer, Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parking_lot::{Mutex, RwLock};

use crate::deletes::DeleteVector;
use crate::encoding::{self, Cell, DecodeMode};
use crate::error::{Error, Result};
use crate::io::{LockGuard, Vfs};
use crate::manifest::{self, MANIFEST_TMP, Manifest, SegmentEntry, TableEntry};
use crate::memtable::Memtable;
use crate::owned;
use crate::predicate::{self, ChunkStats, Predicate};
use crate::salvage;
use crate::segment::{self, Segment, WriteOptions};
use crate::types::{Physical, TableSchema, check_name, physical};
use crate::wal::{self, Durability, Op, Record, ReplayEnd, WAL_DIR, Wal};
use crate::writer::{WriterLock, WriterToken};

/// Directory of named checkpoints inside a database directory.
pub const CHECKPOINT_DIR: &str = "checkpoints";
/// Name of the writer-lock file inside a database directory.
pub const LOCK_FILE: &str = "LOCK";

/// Names of tables and views starting with this are Basalt's own: refused for user tables
/// and views, hidden from listings.
pub const RESERVED_PREFIX: &str = "__basalt_";

/// Prefix of staging tables ([`Store::create_staging_table`]).
pub const STAGING_PREFIX: &str = "__basalt_tmp_";

/// Checks a user's table or view name: a valid name outside [`RESERVED_PREFIX`].
fn check_user_name(name: &str) -> Result<()> {
    check_name(name)?;
    if name.starts_with(RESERVED_PREFIX) {
        return Err(Error::InvalidName {
            name: name.to_string(),
            reason: "names starting with __basalt_ are reserved for Basalt's own tables",
        });
    }
    Ok(())
}

/// Tunables of a [`Store`].
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// Open without the writer lock; every write fails with [`Error::ReadOnly`].
    pub read_only: bool,
    /// How segments are written.
    pub write: WriteOptions,
    /// A table's memtable is flushed to a segment once it holds this many rows.
    pub memtable_flush_rows: usize,
    /// Inserts of at least this many rows bypass the memtable and become a segment.
    pub bulk_insert_rows: usize,
    /// Durability of writes that do not choose one ([`Durability::Buffered`] also means no
    /// log is kept at all).
    pub durability: Durability,
    /// How long a writer waits for another writer (an open write transaction, or a writer
    /// holding the database in another process when opening) before failing with
    /// [`Error::LockTimeout`].
    pub lock_timeout: std::time::Duration,
    /// Compact small and delete-heavy segments after each explicit flush.
    pub auto_compact: bool,
    /// Open a damaged database by keeping what is intact instead of refusing it (writers
    /// only; see [`crate::salvage`]): a missing `MANIFEST` is replaced by the newest intact
    /// copy, a damaged log is replayed up to the damage, and what is given up is moved
    /// into `<db>/salvaged/<n>/`, never deleted. [`Store::salvage_report`] says what was
    /// done.
    pub salvage: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            read_only: false,
            write: WriteOptions::default(),
            memtable_flush_rows: segment::ROW_GROUP_ROWS,
            bulk_insert_rows: 16 * 1024,
            durability: Durability::default(),
            lock_timeout: std::time::Duration::from_secs(10),
            auto_compact: true,
            salvage: false,
        }
    }
}

/// A schema change for [`Store::alter_table`].
#[derive(Debug, Clone, PartialEq)]
pub enum AlterColumn {
    /// Add a column at the end.
    Add(Field),
    /// Drop a column.
    Drop(String),
    /// Rename a column.
    Rename {
        /// Current name.
        from: String,
        /// New name.
        to: String,
    },
}

/// A range of assigned `_id`s, `first..=last` (empty when `count == 0`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRange {
    /// First id assigned.
    pub first: u64,
    /// Number of ids assigned.
    pub count: u64,
}

impl IdRange {
    /// The ids as a Rust range.
    pub fn ids(&self) -> std::ops::Range<u64> {
        self.first..self.first + self.count
    }
}

/// A segment that is part of a table, with its mapped file and deleted rows.
#[derive(Debug, Clone)]
pub struct LiveSegment {
    /// Manifest entry.
    pub entry: SegmentEntry,
    /// The open segment.
    pub segment: Arc<Segment>,
    /// Deleted rows (shared copy-on-write between snapshots).
    pub deletes: Option<Arc<DeleteVector>>,
    /// Deletes not yet written to a delete file.
    pub deletes_dirty: bool,
}

impl LiveSegment {
    fn new(entry: SegmentEntry, segment: Arc<Segment>) -> Self {
        Self { entry, segment, deletes: None, deletes_dirty: false }
    }

    /// Number of deleted rows.
    pub fn deleted(&self) -> u64 {
        self.deletes.as_ref().map_or(0, |d| d.count() as u64)
    }

    /// Whether segment row `row` is deleted.
    pub fn is_deleted(&self, row: usize) -> bool {
        self.deletes.as_ref().is_some_and(|d| d.get(row))
    }

    /// Keep-mask of row group `rg` when it has deleted rows.
    pub fn keep_mask(&self, rg: usize) -> Option<arrow_array::BooleanArray> {
        let d = self.deletes.as_ref()?;
        let meta = self.segment.meta();
        let (start, len) = (meta.row_start(rg), meta.row_groups[rg].rows as usize);
        d.any_in(start, len).then(|| arrow_array::BooleanArray::new(d.keep_mask(start, len), None))
    }
}

/// Where a row lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowLocation {
    /// In memtable batch `batch`, row `row`.
    Memtable {
        /// Batch index.
        batch: usize,
        /// Row index.
        row: usize,
    },
    /// In segment `segment` (index into the table's segments), row group `rg`, row `row`.
    Segment {
        /// Segment index.
        segment: usize,
        /// Row group index.
        rg: usize,
        /// Row within the row group.
        row: usize,
    },
}

/// `_id` → (segment, row group) index. Ranges may overlap once updates move rows, so a
/// lookup yields every row group whose `[id_min, id_max]` covers the id.
#[derive(Debug, Default)]
struct IdIndex {
    /// (id_min, id_max, segment index, row group index), sorted by id_min.
    entries: Vec<(u64, u64, u32, u32)>,
    /// prefix_max[i] = max of entries[..=i].id_max.
    prefix_max: Vec<u64>,
}

impl IdIndex {
    fn build(segments: &[LiveSegment]) -> Self {
        let mut entries = Vec::new();
        for (s, seg) in segments.iter().enumerate() {
            for (g, rg) in seg.segment.meta().row_groups.iter().enumerate() {
                entries.push((rg.id_min, rg.id_max, s as u32, g as u32));
            }
        }
        entries.sort_unstable();
        let mut prefix_max = Vec::with_capacity(entries.len());
        let mut m = 0;
        for e in &entries {
            m = m.max(e.1);
            prefix_max.push(m);
        }
        Self { entries, prefix_max }
    }

    fn candidates(&self, id: u64) -> impl Iterator<Item = (usize, usize)> + '_ {
        let end = self.entries.partition_point(|e| e.0 <= id);
        (0..end)
            .rev()
            .take_while(move |&i| self.prefix_max[i] >= id)
            .filter(move |&i| self.entries[i].1 >= id)
            .map(move |i| (self.entries[i].2 as usize, self.entries[i].3 as usize))
    }
}

/// One value of a row as [`TableSnapshot::visit_row`] hands it out.
#[derive(Debug, Clone, Copy)]
pub enum RowValue<'a> {
    /// Read in place from an encoded block.
    Cell(Cell<'a>),
    /// Row `.1` of this array (memtable rows, kinds cells do not cover).
    Array(&'a ArrayRef, usize),
}

/// An immutable view of one table (transactions modify private clones).
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    id: u64,
    /// Shared: the snapshot is copied at every write to the table.
    name: Arc<str>,
    schema: Arc<TableSchema>,
    next_row_id: u64,
    segments: Vec<LiveSegment>,
    memtable: Memtable,
    index: Arc<IdIndex>,
    /// The table's full-text index definition, if it has one.
    fts: Option<Arc<manifest::FtsEntry>>,
}

impl TableSnapshot {
    /// Table id.
    pub fn id(&self) -> u64 {
        self.id
    }
    /// Table name.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Schema.
    pub fn schema(&self) -> &Arc<TableSchema> {
        &self.schema
    }
    /// Live segments, oldest first.
    pub fn segments(&self) -> &[LiveSegment] {
        &self.segments
    }
    /// Unflushed rows.
    pub fn memtable(&self) -> &Memtable {
        &self.memtable
    }
    /// Next `_id` that will be assigned.
    pub fn next_row_id(&self) -> u64 {
        self.next_row_id
    }

    pub(crate) fn set_next_row_id(&mut self, id: u64) {
        self.next_row_id = id;
    }

    pub(crate) fn push_memtable(&mut self, batch: RecordBatch) -> Result<()> {
        self.memtable.push(batch)
    }

    /// Number of live rows, in O(number of segments).
    pub fn count(&self) -> u64 {
        self.segments.iter().map(|s| s.entry.rows - s.deleted()).sum::<u64>()
            + self.memtable.rows() as u64
    }

    /// Adds rows that already carry their `_id`s to the memtable (private copy).
    fn apply_insert(&mut self, batch: RecordBatch) -> Result<()> {
        let max = batch
            .column(0)
            .as_any()
            .downcast_ref::<UInt64Array>()
            .and_then(|a| a.values().iter().copied().max());
        if let Some(max) = max {
            self.next_row_id = self.next_row_id.max(max + 1);
        }
        self.memtable.push(batch)
    }

    /// Marks the rows with these `_id`s deleted (in place on this private copy); returns the
    /// ids that existed, in the order given (each once).
    pub(crate) fn delete_ids(&mut self, ids: &[u64]) -> Result<Vec<u64>> {
        let mut found = Vec::with_capacity(ids.len());
        for &id in ids {
            if let Some(loc) = self.locate(id)? {
                self.delete_at(loc);
                found.push(id);
            }
        }
        Ok(found)
    }

    /// Deletes the row at `loc` (from [`TableSnapshot::locate`] on this state).
    pub(crate) fn delete_at(&mut self, loc: RowLocation) {
        match loc {
            RowLocation::Memtable { batch, row } => {
                self.memtable.delete(batch, row);
            }
            RowLocation::Segment { segment, rg, row } => {
                let Some(ls) = self.segments.get_mut(segment) else { return };
                let pos = ls.segment.meta().row_start(rg) + row;
                let rows = ls.entry.rows as usize;
                let d = Arc::make_mut(
                    ls.deletes.get_or_insert_with(|| Arc::new(DeleteVector::new(rows))),
                );
                d.set(pos);
                ls.deletes_dirty = true;
            }
        }
    }

    /// Resolves column names to positions in the full schema (`_id` is 0).
    pub fn resolve(&self, columns: &[&str]) -> Result<Vec<usize>> {
        columns
            .iter()
            .map(|c| {
                self.schema.index_of(c).ok_or_else(|| Error::ColumnNotFound {
                    table: self.name.to_string(),
                    column: (*c).to_string(),
                })
            })
            .collect()
    }

    /// The output schema of a projection.
    pub fn projected_schema(&self, projection: &[usize]) -> Result<SchemaRef> {
        self.schema.project(projection)
    }

    fn check_projection(&self, projection: &[usize]) -> Result<()> {
        let n = self.schema.full_schema().fields().len();
        match projection.iter().find(|&&p| p >= n) {
            Some(p) => Err(Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("projection index {p} out of range (table has {n} columns)"),
            }),
            None => Ok(()),
        }
    }

    /// Reads the projected columns of one row group.
    pub fn read_row_group(
        &self,
        segment: usize,
        rg: usize,
        projection: &[usize],
        mode: DecodeMode,
    ) -> Result<Vec<ArrayRef>> {
        self.read_row_group_window(segment, rg, projection, 0, None, mode)
    }

    /// Reads rows `start .. start + len` (`None`: to the end) of the projected columns of
    /// one row group, decoding no more of each chunk than its encoding needs for them.
    pub fn read_row_group_window(
        &self,
        segment: usize,
        rg: usize,
        projection: &[usize],
        start: usize,
        len: Option<usize>,
        mode: DecodeMode,
    ) -> Result<Vec<ArrayRef>> {
        self.check_projection(projection)?;
        let seg = self.segment_at(segment)?;
        let rows = seg.meta().row_groups.get(rg).map(|g| g.rows as usize).ok_or_else(|| {
            Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("segment {segment} has no row group {rg}"),
            }
        })?;
        let len = len.unwrap_or(rows.saturating_sub(start));
        if start.checked_add(len).is_none_or(|end| end > rows) {
            return Err(Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("rows {start}+{len} outside row group of {rows}"),
            });
        }
        projection
            .iter()
            .map(|&p| {
                let cid = self.schema.column_id_at(p);
                match seg.meta().position_of(cid) {
                    Some(pos) => seg.read_column_window(rg, pos, start, len, mode),
                    None => Ok(new_null_array(self.schema.full_schema().field(p).data_type(), len)),
                }
            })
            .collect()
    }

    /// Rows `start..start + len` of row group `rg` of the `segment`-th segment where integer
    /// column `p` (table position) lies in `lo..=hi`, from its packed values; `None` when
    /// its chunk there cannot answer that way (another encoding, NULLs, a column the
    /// segment predates).
    #[allow(clippy::too_many_arguments)]
    fn int_range_window(
        &self,
        segment: usize,
        rg: usize,
        p: usize,
        start: usize,
        len: usize,
        lo: i128,
        hi: i128,
    ) -> Result<Option<arrow_buffer::BooleanBuffer>> {
        let seg = self.segment_at(segment)?;
        match seg.meta().position_of(self.schema.column_id_at(p)) {
            Some(pos) => seg.int_range_window(rg, pos, start, len, lo, hi),
            None => Ok(None),
        }
    }

    /// Rows `offset .. offset + limit` (in scan order) of the rows where `predicate` is
    /// true (every row for `None`), projected. Reads only what that needs: a row group
    /// whose live rows all fall before `offset` is counted from its metadata and delete
    /// vector (or, with a predicate, from the predicate's columns alone); of the row groups
    /// the result comes from, only the window of rows holding the result is decoded; the
    /// scan stops once `limit` rows are found.
    pub fn scan_range(
        self: &Arc<Self>,
        projection: &[usize],
        predicate: Option<&Predicate>,
        mut offset: usize,
        limit: Option<usize>,
    ) -> Result<Vec<RecordBatch>> {
        self.check_projection(projection)?;
        if let Some(p) = predicate {
            self.resolve(&p.columns())?;
        }
        let schema = self.projected_schema(projection)?;
        let mut remaining = limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        for unit in self.scan_units() {
            if remaining == 0 {
                break;
            }
            let ScanUnit::RowGroup { segment, rg } = unit else {
                let scan = self.scan_units_filtered(
                    projection,
                    predicate.cloned(),
                    vec![ScanUnit::Memtable],
                )?;
                for b in scan {
                    let b = b?;
                    let n = b.num_rows();
                    if n <= offset {
                        offset -= n;
                        continue;
                    }
                    let take = (n - offset).min(remaining);
                    out.push(b.slice(offset, take));
                    offset = 0;
                    remaining -= take;
                    if remaining == 0 {
                        break;
                    }
                }
                continue;
            };
            let ls = &self.segments[segment];
            let rows = ls.segment.meta().row_groups[rg].rows as usize;
            if predicate.is_some_and(|p| !self.zone_maps_allow(segment, rg, p)) {
                continue;
            }
            let deleted = ls.keep_mask(rg).map(|m| m.values().clone());
            // With a filter and a limit, the filter is evaluated on growing windows of the
            // row group, so a limit met early reads little of it.
            let mut step = if predicate.is_some() && limit.is_some() { 4096 } else { rows };
            let mut ws = 0;
            while ws < rows && remaining > 0 {
                let we = ws.saturating_add(step).min(rows);
                step = step.saturating_mul(4);
                let len = we - ws;
                let mut keep = deleted.as_ref().map(|d| d.slice(ws, len));
                if let Some(p) = predicate {
                    let mut cols = RowGroupColumns {
                        table: self,
                        segment,
                        rg,
                        start: ws,
                        rows: len,
                        decoded: Vec::new(),
                    };
                    let sel = predicate::evaluate(p, &mut cols)?;
                    keep = Some(keep.map_or(sel.clone(), |k| &k & &sel));
                }
                let live = keep.as_ref().map_or(len, BooleanBuffer::count_set_bits);
                if live <= offset {
                    offset -= live;
                    ws = we;
                    continue;
                }
                let take = (live - offset).min(remaining);
                // The window from the first to the last wanted row; the rows kept inside it
                // are exactly the wanted ones (kept rows are taken in order).
                let (first, end) = match &keep {
                    None => (offset, offset + take),
                    Some(k) => {
                        let mut wanted = k.set_indices().skip(offset);
                        let first = wanted.next().unwrap_or(0);
                        let last =
                            if take > 1 { wanted.nth(take - 2).unwrap_or(first) } else { first };
                        (first, last + 1)
                    }
                };
                let cols = self.read_row_group_window(
                    segment,
                    rg,
                    projection,
                    ws + first,
                    Some(end - first),
                    DecodeMode::Values,
                )?;
                let b = RecordBatch::try_new_with_options(
                    schema.clone(),
                    cols,
                    &arrow_array::RecordBatchOptions::new().with_row_count(Some(end - first)),
                )
                .map_err(|e| Error::arrow("scan", e))?;
                let b = match &keep {
                    Some(k) if end - first > take => {
                        let m = arrow_array::BooleanArray::new(k.slice(first, end - first), None);
                        arrow_select::filter::filter_record_batch(&b, &m)
                            .map_err(|e| Error::arrow("scan", e))?
                    }
                    _ => b,
                };
                out.push(b);
                offset = 0;
                remaining -= take;
                ws = we;
            }
        }
        Ok(out)
    }

    /// Scans the projected columns (full-schema positions) as record batches: one per row
    /// group, then the memtable's batches.
    pub fn scan(self: &Arc<Self>, projection: &[usize]) -> Result<Scan> {
        self.scan_filtered(projection, None)
    }

    /// Scans the rows where `predicate` is true (all rows for `None`). Row groups whose
    /// zone maps rule the predicate out are not read; the predicate is evaluated on
    /// dictionary codes where chunks are dictionary-encoded.
    pub fn scan_filtered(
        self: &Arc<Self>,
        projection: &[usize],
        predicate: Option<Predicate>,
    ) -> Result<Scan> {
        let units = self.scan_units();
        self.scan_units_filtered(projection, predicate, units)
    }

    /// Every unit of a full scan, in scan order: each row group of each segment, then the
    /// memtable (if it has rows).
    pub fn scan_units(&self) -> Vec<ScanUnit> {
        let mut out = Vec::new();
        for (segment, ls) in self.segments.iter().enumerate() {
            for rg in 0..ls.segment.meta().row_groups.len() {
                out.push(ScanUnit::RowGroup { segment, rg });
            }
        }
        if self.memtable.rows() > 0 {
            out.push(ScanUnit::Memtable);
        }
        out
    }

    /// The rows a unit holds before deletes.
    pub fn unit_rows(&self, unit: ScanUnit) -> u64 {
        match unit {
            ScanUnit::RowGroup { segment, rg } => self
                .segments
                .get(segment)
                .and_then(|s| s.segment.meta().row_groups.get(rg))
                .map_or(0, |g| u64::from(g.rows)),
            ScanUnit::Memtable => self.memtable.rows() as u64,
        }
    }

    /// Whether the zone maps and null counts of a row group leave `predicate` possibly true
    /// (the memtable always may match). Reads no column data.
    pub fn unit_may_match(&self, unit: ScanUnit, predicate: &Predicate) -> bool {
        match unit {
            ScanUnit::Memtable => true,
            ScanUnit::RowGroup { segment, rg } => self.zone_maps_allow(segment, rg, predicate),
        }
    }

    /// Scans the chosen units (from [`TableSnapshot::scan_units`]), in the order given.
    pub fn scan_units_filtered(
        self: &Arc<Self>,
        projection: &[usize],
        predicate: Option<Predicate>,
        units: Vec<ScanUnit>,
    ) -> Result<Scan> {
        self.check_projection(projection)?;
        if let Some(p) = &predicate {
            self.resolve(&p.columns())?;
        }
        Ok(Scan {
            schema: self.projected_schema(projection)?,
            table: self.clone(),
            projection: projection.to_vec(),
            predicate,
            units,
            next: 0,
            mem: 0,
            mode: DecodeMode::Values,
            limit: None,
        })
    }

    /// Whether column `col` (full-schema position) is dictionary-encoded in every row group
    /// of every segment (memtable rows aside): a scan in [`DecodeMode::Codes`] hands it out
    /// as dictionary codes.
    pub fn is_dictionary_encoded(&self, col: usize) -> bool {
        let Some(cid) =
            (col < self.schema.full_schema().fields().len()).then(|| self.schema.column_id_at(col))
        else {
            return false;
        };
        self.segments.iter().all(|ls| {
            let meta = ls.segment.meta();
            match meta.position_of(cid) {
                None => false,
                Some(pos) => meta.row_groups.iter().all(|g| {
                    matches!(
                        g.chunks.get(pos).map(|c| &c.encoding),
                        Some(crate::encoding::Encoding::Dict { .. })
                    )
                }),
            }
        })
    }

    /// The `_id`s of the rows where `predicate` is true, in scan order.
    pub fn matching_ids(self: &Arc<Self>, predicate: &Predicate) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for b in self.scan_filtered(&[0], Some(predicate.clone()))? {
            let b = b?;
            let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().ok_or_else(|| {
                Error::InvalidInput {
                    table: self.name.to_string(),
                    reason: "_id column is not UInt64".into(),
                }
            })?;
            out.extend_from_slice(ids.values());
        }
        Ok(out)
    }

    fn zone_maps_allow(&self, segment: usize, rg: usize, predicate: &Predicate) -> bool {
        self.with_chunk_stats(segment, rg, |stats| predicate::may_match(predicate, stats))
            .unwrap_or(false)
    }

    /// Whether the zone maps and null counts of a row group prove every row of it matches.
    fn zone_maps_prove(&self, segment: usize, rg: usize, predicate: &Predicate) -> bool {
        self.with_chunk_stats(segment, rg, |stats| predicate::must_match(predicate, stats))
            .unwrap_or(false)
    }

    /// `f` over the chunk statistics of a row group (by column name); `None` if there is no
    /// such row group.
    fn with_chunk_stats<'s, R>(
        &'s self,
        segment: usize,
        rg: usize,
        f: impl FnOnce(&dyn Fn(&str) -> Option<ChunkStats<'s>>) -> R,
    ) -> Option<R> {
        let ls = self.segments.get(segment)?;
        let meta = ls.segment.meta();
        let g = meta.row_groups.get(rg)?;
        let stats = |name: &str| {
            let i = self.schema.index_of(name)?;
            let float32 =
                self.schema.full_schema().field(i).data_type() == &arrow_schema::DataType::Float32;
            let c = meta.position_of(self.schema.column_id_at(i)).map(|p| &g.chunks[p]);
            Some(match c {
                Some(c) => ChunkStats {
                    zone_map: c.zone_map.as_ref(),
                    null_count: u64::from(c.null_count),
                    rows: u64::from(g.rows),
                    float32,
                },
                // A column added after this segment was written: all NULL here.
                None => ChunkStats {
                    zone_map: None,
                    null_count: u64::from(g.rows),
                    rows: u64::from(g.rows),
                    float32,
                },
            })
        };
        Some(f(&stats))
    }

    /// Selection for a predicate over rows `start..start + rows` of a row group (`None`
    /// for the rest of it): one bit per row of that window; `None` = no row of it matches
    /// (zone maps rule the whole row group out, or nothing in the window matched). When the
    /// zone maps prove every row matches, nothing is read.
    fn select_in_row_group(
        &self,
        segment: usize,
        rg: usize,
        predicate: &Predicate,
        start: usize,
        rows: Option<usize>,
    ) -> Result<Option<BooleanBuffer>> {
        if !self.zone_maps_allow(segment, rg, predicate) {
            return Ok(None);
        }
        let all = self.segments[segment].segment.meta().row_groups[rg].rows as usize;
        let rows = rows.unwrap_or(all.saturating_sub(start));
        if self.zone_maps_prove(segment, rg, predicate) {
            // Every row matches: nothing to read or evaluate.
            return Ok((rows > 0).then(|| BooleanBuffer::new_set(rows)));
        }
        let mut cols =
            RowGroupColumns { table: self, segment, rg, start, rows, decoded: Vec::new() };
        let sel = predicate::evaluate(predicate, &mut cols)?;
        Ok((sel.count_set_bits() > 0).then_some(sel))
    }

    /// Finds where `id` lives.
    pub fn locate(&self, id: u64) -> Result<Option<RowLocation>> {
        if let Some((batch, row)) = self.memtable.find(id) {
            return Ok(Some(RowLocation::Memtable { batch, row }));
        }
        for (s, g) in self.index.candidates(id) {
            let ls = &self.segments[s];
            let seg = &ls.segment;
            let meta = &seg.meta().row_groups[g];
            let start = seg.meta().row_start(g);
            if meta.ids_dense {
                let row = (id - meta.id_min) as usize;
                if ls.is_deleted(start + row) {
                    continue;
                }
                return Ok(Some(RowLocation::Segment { segment: s, rg: g, row }));
            }
            let ids = seg.ids(g)?;
            let ids = ids
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| Error::corrupt(seg.path(), 0, "_id column is not UInt64"))?;
            let v = ids.values();
            let found = if meta.ids_sorted {
                v.binary_search(&id).ok().filter(|&r| !ls.is_deleted(start + r))
            } else {
                let order = seg.id_order(g)?;
                let k = order.partition_point(|&r| v[r as usize] < id);
                order[k..]
                    .iter()
                    .map(|&r| r as usize)
                    .take_while(|&r| v[r] == id)
                    .find(|&r| !ls.is_deleted(start + r))
            };
            if let Some(row) = found {
                return Ok(Some(RowLocation::Segment { segment: s, rg: g, row }));
            }
        }
        Ok(None)
    }

    /// The row with `_id == id`, projected, as a one-row batch; `None` if there is none.
    pub fn get(&self, id: u64, projection: &[usize]) -> Result<Option<RecordBatch>> {
        self.check_projection(projection)?;
        match self.locate(id)? {
            Some(loc) => self.rows_at(&[loc], projection).map(Some),
            None => Ok(None),
        }
    }

    /// Hands `f` the values of the row at `loc` (from [`TableSnapshot::locate`] on this
    /// snapshot), one per projected column in projection order, as `(position in the
    /// projection, value)`. Segment values of the kinds [`encoding::reads_cells`] accepts
    /// are read in place from their encoded blocks — no array is built — which is what
    /// makes a point lookup by `_id` cheap; memtable rows and other kinds come as a row of
    /// an array. Stops at the first error `f` returns.
    pub fn visit_row(
        &self,
        loc: RowLocation,
        projection: &[usize],
        mut f: impl FnMut(usize, RowValue<'_>) -> Result<()>,
    ) -> Result<()> {
        self.check_projection(projection)?;
        match loc {
            RowLocation::Memtable { batch, row } => {
                let b = self.mem_batch(batch)?;
                for (i, &p) in projection.iter().enumerate() {
                    f(i, b.value(p, row)?)?;
                }
            }
            RowLocation::Segment { segment, rg, row } => {
                let seg = self.segment_at(segment)?;
                if seg.meta().row_groups.get(rg).is_none_or(|g| row >= g.rows as usize) {
                    return Err(Error::InvalidInput {
                        table: self.name.to_string(),
                        reason: format!("segment {segment} has no row {row} in row group {rg}"),
                    });
                }
                for (i, &p) in projection.iter().enumerate() {
                    let cid = self.schema.column_id_at(p);
                    match seg.meta().position_of(cid) {
                        Some(pos) => seg.with_value(rg, pos, row, |v| f(i, v))??,
                        // A column added after this segment was written: NULL here.
                        None => f(i, RowValue::Cell(Cell::Null))?,
                    }
                }
            }
        }
        Ok(())
    }

    /// The rows with the given ids, in the order given; ids that do not exist are skipped
    /// (include `_id` in the projection to tell which were found).
    pub fn get_many(&self, ids: &[u64], projection: &[usize]) -> Result<RecordBatch> {
        let mut locs = Vec::with_capacity(ids.len());
        for &id in ids {
            if let Some(loc) = self.locate(id)? {
                locs.push(loc);
            }
        }
        self.rows_at(&locs, projection)
    }

    /// The columns `projection` (full-schema positions) of the rows at `locs`, in that
    /// order, without a record batch around them (what an update needs of the old rows).
    /// One row is read value by value in place, each value becoming a one-value array.
    pub fn columns_at(&self, locs: &[RowLocation], projection: &[usize]) -> Result<Vec<ArrayRef>> {
        let [loc] = locs else {
            return Ok(self.rows_at(locs, projection)?.columns().to_vec());
        };
        let full = self.schema.full_schema();
        let mut columns = Vec::with_capacity(projection.len());
        self.visit_row(*loc, projection, |i, v| {
            columns.push(one_value_array(full.field(projection[i]).data_type(), v)?);
            Ok(())
        })?;
        Ok(columns)
    }

    /// The rows at these locations (from [`TableSnapshot::locate`] on this snapshot), in
    /// that order, projected.
    pub fn rows_at(&self, locs: &[RowLocation], projection: &[usize]) -> Result<RecordBatch> {
        self.check_projection(projection)?;
        let schema = self.projected_schema(projection)?;
        let batch = |columns: Vec<ArrayRef>, rows: usize| {
            RecordBatch::try_new_with_options(
                schema.clone(),
                columns,
                &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
            )
            .map_err(|e| Error::arrow("gather rows", e))
        };
        if let [_] = locs {
            return batch(self.columns_at(locs, projection)?, 1);
        }
        if locs.len() <= CELL_ROWS
            && schema.fields().iter().all(|f| encoding::reads_cells(f.data_type()))
        {
            let columns = self.gather_values(locs, projection, &schema)?;
            return batch(columns, locs.len());
        }
        // Group the wanted rows by source: a memtable batch is used as it is; of a row
        // group, the window from its first to its last wanted row is decoded once when the
        // rows are dense in it, otherwise just the wanted rows are gathered from each
        // column's encoded block (one pass over each block's metadata for all of them).
        let key_of = source_of;
        let mut wanted: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
        for &loc in locs {
            let (key, row) = key_of(loc);
            wanted.entry(key).or_default().push(row);
        }
        // Per source: its columns and how a wanted row maps to an index into them.
        enum Pick {
            Direct,
            Offset(usize),
            Listed(Vec<usize>),
        }
        let mut sources: Vec<Vec<ArrayRef>> = Vec::with_capacity(wanted.len());
        let mut picks_of: BTreeMap<(usize, usize), (usize, Pick)> = BTreeMap::new();
        for (key, mut rows) in wanted {
            rows.sort_unstable();
            rows.dedup();
            let (cols, pick) = if key.0 == 0 {
                let b = self.memtable_batch(key.1)?;
                (projection.iter().map(|&p| b.column(p).clone()).collect(), Pick::Direct)
            } else {
                let (segment, rg) = (key.0 - 1, key.1);
                let (lo, hi) = (rows[0], rows[rows.len() - 1]);
                if rows.len() * 4 > hi - lo {
                    let len = Some(hi - lo + 1);
                    let mode = DecodeMode::Values;
                    let cols =
                        self.read_row_group_window(segment, rg, projection, lo, len, mode)?;
                    (cols, Pick::Offset(lo))
                } else {
                    (self.read_row_group_rows(segment, rg, projection, &rows)?, Pick::Listed(rows))
                }
            };
            sources.push(cols);
            picks_of.insert(key, (sources.len() - 1, pick));
        }
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(locs.len());
        for &loc in locs {
            let (key, row) = key_of(loc);
            // Every key and row was put in `picks_of` above.
            let pick = picks_of.get(&key).and_then(|(src, pick)| match pick {
                Pick::Direct => Some((*src, row)),
                Pick::Offset(lo) => Some((*src, row - lo)),
                Pick::Listed(rows) => rows.binary_search(&row).ok().map(|i| (*src, i)),
            });
            picks.push(pick.ok_or_else(|| Error::InvalidInput {
                table: self.name.to_string(),
                reason: "a wanted row lost its source".into(),
            })?);
        }
        let mut columns = Vec::with_capacity(projection.len());
        for c in 0..projection.len() {
            let arrays: Vec<&dyn Array> = sources.iter().map(|cols| cols[c].as_ref()).collect();
            let col = if arrays.is_empty() {
                new_null_array(schema.field(c).data_type(), 0)
            } else {
                arrow_select::interleave::interleave(&arrays, &picks)
                    .map_err(|e| Error::arrow("gather rows", e))?
            };
            columns.push(col);
        }
        batch(columns, picks.len())
    }

    /// [`TableSnapshot::rows_at`] for up to [`CELL_ROWS`] rows of kinds
    /// [`encoding::reads_cells`] accepts: the wanted rows sorted by source (memtable batch
    /// or row group) and row, each source's values appended to one builder per column —
    /// read in place, each block found once per source, no array per source and no
    /// interleaving — then put in the order asked by one `take` per column.
    fn gather_values(
        &self,
        locs: &[RowLocation],
        projection: &[usize],
        schema: &Schema,
    ) -> Result<Vec<ArrayRef>> {
        let bad = |reason: String| Error::InvalidInput { table: self.name.to_string(), reason };
        let mut order: Vec<u32> = (0..locs.len() as u32).collect();
        order.sort_unstable_by_key(|&i| source_of(locs[i as usize]));
        let sorted: Vec<((usize, usize), usize)> =
            order.iter().map(|&i| source_of(locs[i as usize])).collect();
        let rows: Vec<usize> = sorted.iter().map(|k| k.1).collect();
        // Runs of one source: (source, memtable batch or row group, its part of `rows`).
        let mut runs = Vec::new();
        let mut start = 0;
        for i in 1..=sorted.len() {
            if i == sorted.len() || sorted[i].0 != sorted[start].0 {
                let (src, sub) = sorted[start].0;
                // Sorted: the run's last row is its largest.
                let last = rows[i - 1];
                let held = if src == 0 {
                    self.mem_batch(sub)?.num_rows()
                } else {
                    let seg = self.segment_at(src - 1)?;
                    seg.meta().row_groups.get(sub).map_or(0, |g| g.rows as usize)
                };
                if last >= held {
                    return Err(bad(format!("no row {last} in source {src}.{sub}")));
                }
                runs.push((src, sub, start..i));
                start = i;
            }
        }
        let mut columns = Vec::with_capacity(projection.len());
        for (i, &p) in projection.iter().enumerate() {
            let dt = schema.field(i).data_type();
            let mut b = arrow_array::builder::make_builder(dt, locs.len());
            let cid = self.schema.column_id_at(p);
            for (src, sub, range) in &runs {
                let rows = &rows[range.clone()];
                if *src == 0 {
                    // A tail view's rows are read in place (no arrays built for them).
                    let mb = self.mem_batch(*sub)?;
                    for &r in rows {
                        append_value(b.as_mut(), dt, mb.value(p, r)?)?;
                    }
                    continue;
                }
                let seg = self.segment_at(src - 1)?;
                match seg.meta().position_of(cid) {
                    Some(pos) => {
                        seg.visit_values(*sub, pos, rows, |v| append_value(b.as_mut(), dt, v))?
                    }
                    // A column added after this segment was written: NULL here.
                    None => {
                        for _ in rows {
                            append_value(b.as_mut(), dt, RowValue::Cell(Cell::Null))?;
                        }
                    }
                }
            }
            columns.push(b.finish());
        }
        if order.iter().enumerate().all(|(j, &o)| o as usize == j) {
            return Ok(columns);
        }
        // Loc `k` sits at position `at[k]` of the sorted order.
        let mut at = vec![0u32; order.len()];
        for (j, &o) in order.iter().enumerate() {
            at[o as usize] = j as u32;
        }
        let at = arrow_array::UInt32Array::from(at);
        columns
            .iter()
            .map(|c| {
                arrow_select::take::take(c.as_ref(), &at, None)
                    .map_err(|e| Error::arrow("gather rows", e))
            })
            .collect()
    }

    fn segment_at(&self, segment: usize) -> Result<&Segment> {
        Ok(&self
            .segments
            .get(segment)
            .ok_or_else(|| Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("no segment {segment} (table has {})", self.segments.len()),
            })?
            .segment)
    }

    /// The rows `rows` (ascending) of the projected columns of one row group, gathered
    /// from the encoded blocks without decoding other rows.
    pub fn read_row_group_rows(
        &self,
        segment: usize,
        rg: usize,
        projection: &[usize],
        rows: &[usize],
    ) -> Result<Vec<ArrayRef>> {
        self.check_projection(projection)?;
        let seg = self.segment_at(segment)?;
        projection
            .iter()
            .map(|&p| {
                let cid = self.schema.column_id_at(p);
                match seg.meta().position_of(cid) {
                    Some(pos) => seg.read_column_rows(rg, pos, rows),
                    None => Ok(new_null_array(
                        self.schema.full_schema().field(p).data_type(),
                        rows.len(),
                    )),
                }
            })
            .collect()
    }

    fn memtable_batch(&self, batch: usize) -> Result<&RecordBatch> {
        self.mem_batch(batch)?.batch()
    }

    fn mem_batch(&self, batch: usize) -> Result<&crate::memtable::MemBatch> {
        self.memtable.batches().get(batch).map(|b| &**b).ok_or_else(|| Error::InvalidInput {
            table: self.name.to_string(),
            reason: format!("memtable batch {batch} does not exist in this snapshot"),
        })
    }

    /// Checks a caller's batch against the schema and returns the user columns in table
    /// order, casting only where lossless (large/view strings, dictionaries) and filling
    /// absent nullable columns with nulls.
    pub fn conform(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let n = batch.num_rows();
        self.conform_with(batch, "_id is assigned by Basalt and cannot be inserted", |f| {
            if f.is_nullable() {
                Ok(new_null_array(f.data_type(), n))
            } else {
                Err(Error::NullViolation { table: self.name.to_string(), column: f.name().clone() })
            }
        })
    }

    /// The user columns, in table order, of rows being updated: the columns `values` gives,
    /// checked and cast as [`TableSnapshot::conform`] checks an insert's, and the others
    /// from `old` (the rows' stored values of the columns not given, in table order) as
    /// they are — no intermediate batch, no schema built per update.
    pub fn conform_update(
        &self,
        values: &RecordBatch,
        old: Vec<ArrayRef>,
    ) -> Result<Vec<ArrayRef>> {
        let mut olds = old.into_iter();
        self.conform_with(values, "_id cannot be updated", |f| {
            olds.next().ok_or_else(|| Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("the old rows lack column '{}'", f.name()),
            })
        })
    }

    /// The user columns of a write, in table order: each column `batch` gives checked and
    /// cast (lossless casts only, see `conform_column`), each column it does not give from
    /// `absent`. `_id` is refused with `id_reason`; unknown and repeated columns, columns
    /// of another length and NULLs in NOT NULL columns are errors.
    fn conform_with(
        &self,
        batch: &RecordBatch,
        id_reason: &str,
        mut absent: impl FnMut(&Field) -> Result<ArrayRef>,
    ) -> Result<Vec<ArrayRef>> {
        let table = &*self.name;
        let bad = |reason: String| Error::InvalidInput { table: table.to_string(), reason };
        let bschema = batch.schema();
        // The batch column of each user column.
        let mut given: Vec<Option<usize>> = vec![None; self.schema.columns().len()];
        for (i, f) in bschema.fields().iter().enumerate() {
            match self.schema.index_of(f.name()) {
                Some(0) => return Err(bad(id_reason.into())),
                None => {
                    return Err(Error::ColumnNotFound {
                        table: table.to_string(),
                        column: f.name().clone(),
                    });
                }
                Some(k) => {
                    if given[k - 1].replace(i).is_some() {
                        return Err(bad(format!("column '{}' given twice", f.name())));
                    }
                }
            }
        }
        let n = batch.num_rows();
        // One slot more than the user columns: an insert puts `_id` in front.
        let mut out = Vec::with_capacity(given.len() + 1);
        for (c, at) in self.schema.columns().iter().zip(given) {
            let f = &c.field;
            let col = match at {
                Some(i) => conform_column(table, f, batch.column(i))?,
                None => absent(f)?,
            };
            if col.len() != n {
                return Err(bad(format!("column '{}' has {} rows, not {n}", f.name(), col.len())));
            }
            if !f.is_nullable() && col.null_count() > 0 {
                return Err(Error::NullViolation {
                    table: table.to_string(),
                    column: f.name().clone(),
                });
            }
            out.push(col);
        }
        Ok(out)
    }
}

fn conform_column(table: &str, f: &Field, col: &ArrayRef) -> Result<ArrayRef> {
    let mismatch = || Error::TypeMismatch {
        table: table.to_string(),
        column: f.name().clone(),
        expected: f.data_type().clone(),
        found: col.data_type().to_string(),
    };
    let want = f.data_type();
    if col.data_type() == want {
        if let Some(fsl) = col.as_any().downcast_ref::<FixedSizeListArray>() {
            check_components(table, f, fsl)?;
        }
        return round_vectors(table, f, col);
    }
    if col.data_type() == &DataType::Null {
        // All NULL (an untyped NULL, such as a NULL parameter): NULLs of the column's type
        // (a NOT NULL column refuses them after this).
        return Ok(new_null_array(want, col.len()));
    }
    let phys = physical(f.name(), want)?;
    if let Physical::Vector { dim, .. } = phys {
        let DataType::FixedSizeList(child, n) = col.data_type() else { return Err(mismatch()) };
        if child.data_type() != &DataType::Float32 {
            return Err(mismatch());
        }
        if *n as usize != dim {
            return Err(Error::VectorDimension {
                table: table.to_string(),
                column: f.name().clone(),
                expected: dim,
                found: *n as usize,
            });
        }
        let fsl = col.as_any().downcast_ref::<FixedSizeListArray>().ok_or_else(mismatch)?;
        check_components(table, f, fsl)?;
        let DataType::FixedSizeList(want_child, _) = want else { return Err(mismatch()) };
        let a = FixedSizeListArray::try_new(
            want_child.clone(),
            *n,
            fsl.values().clone(),
            fsl.nulls().cloned(),
        )
        .map_err(|e| Error::arrow(format!("column '{}'", f.name()), e))?;
        return round_vectors(table, f, &(Arc::new(a) as ArrayRef));
    }
    let lossless = matches!(
        (col.data_type(), want),
        (DataType::LargeUtf8 | DataType::Utf8View, DataType::Utf8)
            | (DataType::LargeBinary | DataType::BinaryView, DataType::Binary)
    ) || matches!(col.data_type(), DataType::Dictionary(_, v) if v.as_ref() == want);
    if lossless {
        return arrow_cast::cast(col, want)
            .map_err(|e| Error::arrow(format!("column '{}'", f.name()), e));
    }
    Err(mismatch())
}

/// Refuses a vector with a NULL component (a NULL vector is a NULL row, but a vector is
/// whole or absent: a NULL component would be stored as 0.0) or one that is not a finite
/// number (NaN or infinite, as pgvector refuses them: no distance to such a vector is
/// meaningful, and a value out of FLOAT's range, such as `1e39` cast to it, arrives as
/// infinity). Only the rows of the array's window that are not NULL themselves are looked
/// at.
fn check_components(table: &str, f: &Field, fsl: &FixedSizeListArray) -> Result<()> {
    let dim = fsl.value_length().max(0) as usize;
    let nulls = fsl.values().nulls().filter(|n| n.null_count() > 0);
    let floats = fsl.values().as_any().downcast_ref::<Float32Array>();
    let refuse = |row: usize, what: &str| Error::InvalidInput {
        table: table.to_string(),
        reason: format!("column '{}', row {}: a vector component is {what}", f.name(), row + 1),
    };
    // One pass over the window's values first (branch-free, so it vectorises): only when
    // it finds a NULL or non-finite value are the rows walked to name the first bad one.
    let first = fsl.value_offset(0).max(0) as usize;
    let window = first..first + fsl.len() * dim;
    let finite = floats
        .and_then(|v| v.values().get(window.clone()))
        .is_some_and(|v| v.iter().fold(true, |ok, x| ok & x.is_finite()));
    if finite && nulls.is_none_or(|n| n.slice(window.start, window.len()).null_count() == 0) {
        return Ok(());
    }
    for row in 0..fsl.len() {
        if fsl.is_null(row) {
            continue;
        }
        let start = fsl.value_offset(row).max(0) as usize;
        if let Some(nulls) = nulls
            && (start..start + dim).any(|i| nulls.is_null(i))
        {
            return Err(refuse(row, "NULL (vectors are whole or NULL)"));
        }
        let values = floats.and_then(|v| v.values().get(start..start + dim)).unwrap_or(&[]);
        if let Some(x) = values.iter().find(|x| !x.is_finite()) {
            let what = if x.is_nan() { "NaN" } else { "infinite (or out of FLOAT's range)" };
            return Err(refuse(row, &format!("{what}; vector components are finite numbers")));
        }
    }
    Ok(())
}

/// The values of a vector column as its stored form holds them (`float16` / `int8`
/// columns round each row on insert, so memtable and segment rows read the same; see
/// `basalt_vector::stored`); other columns as they are. A component the form cannot hold
/// is an error naming the row.
fn round_vectors(table: &str, f: &Field, col: &ArrayRef) -> Result<ArrayRef> {
    if !matches!(f.data_type(), DataType::FixedSizeList(..)) {
        return Ok(col.clone());
    }
    let form = crate::types::stored_form(f)?;
    if form == basalt_vector::StoredForm::Float32 {
        return Ok(col.clone());
    }
    let bad = || Error::InvalidInput {
        table: table.to_string(),
        reason: format!("column '{}' is not a list of float32 vectors", f.name()),
    };
    let fsl = col.as_any().downcast_ref::<FixedSizeListArray>().ok_or_else(bad)?;
    let dim = fsl.value_length().max(0) as usize;
    let start = fsl.value_offset(0).max(0) as usize;
    let values = fsl.values().as_any().downcast_ref::<Float32Array>().ok_or_else(bad)?;
    let mut out = values.values().get(start..start + fsl.len() * dim).ok_or_else(bad)?.to_vec();
    for (i, row) in out.chunks_exact_mut(dim.max(1)).enumerate() {
        if fsl.is_null(i) {
            row.fill(0.0);
            continue;
        }
        basalt_vector::stored::round_row(form, row).map_err(|e| Error::InvalidInput {
            table: table.to_string(),
            reason: format!("column '{}' ({} vectors), row {}: {e}", f.name(), form.name(), i + 1),
        })?;
    }
    let DataType::FixedSizeList(item, n) = f.data_type() else { return Err(bad()) };
    let a = FixedSizeListArray::try_new(
        item.clone(),
        *n,
        Arc::new(Float32Array::from(out)),
        fsl.nulls().cloned(),
    )
    .map_err(|e| Error::arrow(format!("column '{}'", f.name()), e))?;
    Ok(Arc::new(a))
}

/// One unit of a table scan: a row group of a segment, or the memtable. Scans can be split
/// into groups of units (the SQL layer runs one group per partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanUnit {
    /// Row group `rg` of the `segment`-th live segment.
    RowGroup {
        /// Position in [`TableSnapshot::segments`].
        segment: usize,
        /// Row group within the segment.
        rg: usize,
    },
    /// Every memtable batch.
    Memtable,
}

/// Iterator over a table snapshot's rows as record batches.
#[derive(Debug)]
pub struct Scan {
    table: Arc<TableSnapshot>,
    schema: SchemaRef,
    projection: Vec<usize>,
    predicate: Option<Predicate>,
    units: Vec<ScanUnit>,
    next: usize,
    mem: usize,
    mode: DecodeMode,
    /// Rows still wanted (`None`: all): the scan ends once they are returned, and a row
    /// group decodes its projected columns only up to the last row it needs.
    limit: Option<usize>,
}

/// Columns of one row group, fetched on demand (dictionary chunks as codes).
struct RowGroupColumns<'a> {
    table: &'a TableSnapshot,
    segment: usize,
    rg: usize,
    /// First row of the window the predicate is evaluated on.
    start: usize,
    rows: usize,
    /// Columns decoded so far (a predicate may name one column in several leaves).
    decoded: Vec<(usize, ArrayRef)>,
}

impl predicate::Columns for RowGroupColumns<'_> {
    fn rows(&self) -> usize {
        self.rows
    }
    fn column(&mut self, name: &str) -> Result<ArrayRef> {
        let i = self.table.schema.index_of(name).ok_or_else(|| Error::ColumnNotFound {
            table: self.table.name.to_string(),
            column: name.to_string(),
        })?;
        if let Some((_, a)) = self.decoded.iter().find(|(c, _)| *c == i) {
            return Ok(a.clone());
        }
        let mut cols = self.table.read_row_group_window(
            self.segment,
            self.rg,
            &[i],
            self.start,
            Some(self.rows),
            DecodeMode::Codes,
        )?;
        let a = cols.pop().ok_or_else(|| Error::ColumnNotFound {
            table: self.table.name.to_string(),
            column: name.to_string(),
        })?;
        self.decoded.push((i, a.clone()));
        Ok(a)
    }
    fn int_range(
        &mut self,
        name: &str,
        lo: i128,
        hi: i128,
    ) -> Result<Option<arrow_buffer::BooleanBuffer>> {
        let Some(i) = self.table.schema.index_of(name) else { return Ok(None) };
        // A column decoded for another leaf is compared as an array.
        if self.decoded.iter().any(|(c, _)| *c == i)
            || !self.table.schema.full_schema().field(i).data_type().is_integer()
        {
            return Ok(None);
        }
        self.table.int_range_window(self.segment, self.rg, i, self.start, self.rows, lo, hi)
    }
}

impl Scan {
    /// Schema of the batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Hands dictionary-encoded chunks of segments out as dictionary arrays (codes plus the
    /// chunk's sorted dictionary; see [`DecodeMode::Codes`]) instead of values. Each batch
    /// then carries its own schema, whose field types say which columns came as codes;
    /// memtable batches always come as values.
    pub fn with_codes(mut self) -> Scan {
        self.mode = DecodeMode::Codes;
        self
    }

    /// Ends the scan after `limit` rows (`None`: no limit). With a predicate, a row group
    /// is still filtered whole, but its other projected columns are decoded only up to the
    /// row where the limit is met.
    pub fn with_limit(mut self, limit: Option<usize>) -> Scan {
        self.limit = limit;
        self
    }
}

/// A scan gathers the selected rows of a row group instead of decoding it whole when at
/// most one row in this many is selected.
const SPARSE_SELECTION: usize = 8;

impl Iterator for Scan {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.next_batch()?;
        if let (Ok(b), Some(left)) = (&b, &mut self.limit) {
            *left = left.saturating_sub(b.num_rows());
        }
        Some(b)
    }
}

impl Scan {
    fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        if self.limit == Some(0) {
            return None;
        }
        loop {
            let unit = *self.units.get(self.next)?;
            let r = match unit {
                ScanUnit::RowGroup { segment, rg } => {
                    self.next += 1;
                    self.read_row_group(segment, rg)
                }
                ScanUnit::Memtable => match self.table.memtable.batches().get(self.mem) {
                    None => {
                        self.next += 1;
                        self.mem = 0;
                        continue;
                    }
                    Some(mb) => {
                        self.mem += 1;
                        if mb.live_rows() == 0 {
                            continue;
                        }
                        self.read_memtable_batch(mb).map(Some)
                    }
                },
            };
            match r {
                Ok(Some(b)) if b.num_rows() > 0 => return Some(Ok(b)),
                Ok(_) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl Scan {
    /// The selected rows of one row group (`None`: nothing selected).
    fn read_row_group(&self, s: usize, g: usize) -> Result<Option<RecordBatch>> {
        let t = &self.table;
        let Some(ls) = t.segments.get(s) else { return Ok(None) };
        let Some(meta) = ls.segment.meta().row_groups.get(g) else { return Ok(None) };
        let rows = meta.rows as usize;
        let mut keep = ls.keep_mask(g).map(|m| m.values().clone());
        let mut rows = rows;
        match (&self.predicate, self.limit) {
            // Under a limit the filter runs on windows of the row group until enough rows
            // matched: 4096 rows first, then as many as the selectivity seen so far says
            // are still needed plus a quarter (four times more while nothing matched).
            (Some(p), Some(left)) => {
                if !t.zone_maps_allow(s, g, p) {
                    return Ok(None);
                }
                let mut all = arrow_buffer::BooleanBufferBuilder::new(rows);
                let (mut ws, mut step, mut found) = (0usize, 4096usize, 0usize);
                while ws < rows && found < left {
                    let we = ws.saturating_add(step).min(rows);
                    let mut cols = RowGroupColumns {
                        table: t,
                        segment: s,
                        rg: g,
                        start: ws,
                        rows: we - ws,
                        decoded: Vec::new(),
                    };
                    let mut sel = predicate::evaluate(p, &mut cols)?;
                    if let Some(k) = &keep {
                        sel = &sel & &k.slice(ws, we - ws);
                    }
                    found += sel.count_set_bits();
                    all.append_buffer(&sel);
                    ws = we;
                    step = match found {
                        0 => step.saturating_mul(4),
                        _ => {
                            let expect = left.saturating_sub(found).saturating_mul(ws) / found;
                            expect.saturating_add(expect / 4).max(1024)
                        }
                    };
                }
                rows = ws;
                keep = Some(all.finish());
            }
            (Some(p), None) => match t.select_in_row_group(s, g, p, 0, None)? {
                None => return Ok(None),
                Some(sel) => keep = Some(keep.map_or(sel.clone(), |k| &k & &sel)),
            },
            (None, _) => {}
        }
        if keep.as_ref().is_some_and(|m| m.count_set_bits() == 0) {
            return Ok(None);
        }
        // Under a limit, only rows up to the one that meets it are decoded.
        if let Some(left) = self.limit {
            let end = match &keep {
                Some(m) => m.set_indices().nth(left.saturating_sub(1)).map_or(rows, |i| i + 1),
                None => left.min(rows),
            };
            if end < rows {
                rows = end;
                keep = keep.map(|m| m.slice(0, end));
            }
        }
        // Few rows selected: gather just those from the encoded blocks (late
        // materialisation) instead of decoding the row group and filtering it.
        if self.mode == DecodeMode::Values
            && let Some(m) = &keep
            && m.count_set_bits() * SPARSE_SELECTION <= rows
        {
            let picks: Vec<usize> = m.set_indices().collect();
            let cols = t.read_row_group_rows(s, g, &self.projection, &picks)?;
            return RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &arrow_array::RecordBatchOptions::new().with_row_count(Some(picks.len())),
            )
            .map(Some)
            .map_err(|e| Error::arrow("scan", e));
        }
        // Some rows dropped: dictionary chunks are read as codes, filtered, and only the
        // kept rows' values looked up (instead of every row's, then filtered).
        if self.mode == DecodeMode::Values
            && let Some(m) = keep.as_ref().filter(|m| m.count_set_bits() < rows)
        {
            let mask = arrow_array::BooleanArray::new(m.clone(), None);
            let codes =
                t.read_row_group_window(s, g, &self.projection, 0, Some(rows), DecodeMode::Codes)?;
            let cols = codes
                .iter()
                .zip(self.schema.fields())
                .map(|(c, f)| {
                    let kept = arrow_select::filter::filter(c.as_ref(), &mask)?;
                    if kept.data_type() == f.data_type() {
                        Ok(kept)
                    } else {
                        arrow_cast::cast(&kept, f.data_type())
                    }
                })
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::arrow("scan", e))?;
            let n = m.count_set_bits();
            return RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &arrow_array::RecordBatchOptions::new().with_row_count(Some(n)),
            )
            .map(Some)
            .map_err(|e| Error::arrow("scan", e));
        }
        let cols = t.read_row_group_window(s, g, &self.projection, 0, Some(rows), self.mode)?;
        let schema = match self.mode {
            DecodeMode::Values => self.schema.clone(),
            DecodeMode::Codes | DecodeMode::Stored => Arc::new(Schema::new(
                self.schema
                    .fields()
                    .iter()
                    .zip(&cols)
                    .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
                    .collect::<Vec<_>>(),
            )),
        };
        let b = RecordBatch::try_new_with_options(
            schema,
            cols,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| Error::arrow("scan", e))?;
        match &keep {
            Some(m) if m.count_set_bits() < rows => {
                let m = arrow_array::BooleanArray::new(m.clone(), None);
                arrow_select::filter::filter_record_batch(&b, &m)
                    .map(Some)
                    .map_err(|e| Error::arrow("scan", e))
            }
            _ => Ok(Some(b)),
        }
    }

    fn read_memtable_batch(&self, mb: &crate::memtable::MemBatch) -> Result<RecordBatch> {
        let b = mb.live()?;
        let b = match &self.predicate {
            Some(p) => {
                let mut named = b.clone();
                let sel = predicate::evaluate(p, &mut named)?;
                let m = arrow_array::BooleanArray::new(sel, None);
                arrow_select::filter::filter_record_batch(&b, &m)
                    .map_err(|e| Error::arrow("scan", e))?
            }
            None => b,
        };
        let b = b.project(&self.projection).map_err(|e| Error::arrow("scan", e))?;
        // Memtable batches carry the schema of their insert; present the current one.
        b.with_schema(self.schema.clone()).map_err(|e| Error::arrow("scan", e))
    }
}

/// An immutable view of the whole database.
#[derive(Debug, Clone, Default)]
pub struct DbSnapshot {
    /// Increases with every state change; publishing never goes backwards.
    version: u64,
    manifest_version: u64,
    next_table_id: u64,
    next_segment_id: u64,
    /// Log records up to this LSN are in segments (the manifest's `wal_lsn`).
    wal_lsn: u64,
    /// Highest LSN of a power-safe commit this state includes; it may be published only
    /// once the log is synced that far.
    pub(crate) sync_lsn: u64,
    /// Highest LSN included.
    lsn: u64,
    /// Change feeds and their acknowledged LSNs.
    feeds: BTreeMap<String, u64>,
    /// Keys shared with the tables' own names and with transactions' copies: the map is
    /// copied at every commit.
    tables: BTreeMap<Arc<str>, Arc<TableSnapshot>>,
    /// Views: name → SQL text of the query.
    views: BTreeMap<String, String>,
    /// The log file starting at `wal_lsn + 1` exists (the manifest's promise; see
    /// [`Manifest::log_kept`]).
    log_kept: bool,
}

impl DbSnapshot {
    /// A table by name.
    pub fn table(&self, name: &str) -> Result<&Arc<TableSnapshot>> {
        self.tables.get(name).ok_or_else(|| Error::TableNotFound { table: name.to_string() })
    }
    /// A table with its name as this snapshot keys it (sharing that key costs no
    /// allocation).
    pub(crate) fn table_entry(&self, name: &str) -> Result<(&Arc<str>, &Arc<TableSnapshot>)> {
        self.tables
            .get_key_value(name)
            .ok_or_else(|| Error::TableNotFound { table: name.to_string() })
    }
    /// Table names, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.tables.keys().map(|k| k.to_string()).collect()
    }
    /// Views: name → SQL text of the query, sorted by name.
    pub fn views(&self) -> &BTreeMap<String, String> {
        &self.views
    }
    /// Version of the manifest this snapshot was built from or installed.
    pub fn manifest_version(&self) -> u64 {
        self.manifest_version
    }

    fn table_by_id(&self, id: u64) -> Option<&Arc<TableSnapshot>> {
        self.tables.values().find(|t| t.id == id)
    }

    fn to_manifest(&self, version: u64) -> Manifest {
        let mut tables: Vec<TableEntry> = self
            .tables
            .values()
            .map(|t| TableEntry {
                id: t.id,
                name: t.name.to_string(),
                schema: (*t.schema).clone(),
                next_row_id: t.next_row_id,
                segments: t.segments.iter().map(|s| s.entry.clone()).collect(),
                fts: t.fts.as_deref().cloned(),
            })
            .collect();
        tables.sort_by_key(|t| t.id);
        Manifest {
            version,
            next_table_id: self.next_table_id,
            next_segment_id: self.next_segment_id,
            wal_lsn: self.wal_lsn,
            feeds: self.feeds.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            tables,
            views: self.views.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            log_kept: self.log_kept,
        }
    }

    /// Highest log sequence number this state includes (0 before any logged commit).
    pub fn lsn(&self) -> u64 {
        self.lsn
    }
}

/// The storage engine of one database.
#[derive(Debug)]
pub struct Store {
    vfs: Arc<dyn Vfs>,
    root: PathBuf,
    display: PathBuf,
    opts: StoreOptions,
    /// The published state: what readers see.
    current: RwLock<Arc<DbSnapshot>>,
    /// The newest state, including commits still waiting for their log sync. Holding this
    /// lock is what makes a writer the only writer.
    head: Mutex<Arc<DbSnapshot>>,
    /// The write-ahead log (writers on disk only).
    wal: Option<Wal>,
    closed: AtomicBool,
    /// Set when a manifest install or a log write failed: the durable state is then
    /// uncertain, so this handle refuses further writes.
    poisoned: AtomicBool,
    /// Segment ids are never reused, even when a write that allocated one fails.
    next_segment_id: AtomicU64,
    lock: Mutex<Option<LockGuard>>,
    /// The writer token: held by one auto-commit write or one write transaction at a time.
    writer_lock: Arc<WriterLock>,
    hook: RwLock<Option<HookSlot>>,
    /// Files named by checkpoints: never deleted while a checkpoint names them.
    pins: RwLock<std::collections::BTreeSet<PathBuf>>,
    /// Open full-text indexes.
    fts: fts::Registry,
    /// Catalog changes installed as a pending manifest, not yet synced. Only touched with
    /// `head` locked.
    pending: Mutex<PendingCatalog>,
    /// What a salvaging open did (see [`crate::salvage`]); empty otherwise.
    salvage_report: Vec<String>,
}

/// Catalog changes in force through a pending manifest (see the `manifest` module docs).
#[derive(Debug, Default)]
struct PendingCatalog {
    /// A pending manifest newer than the synced one is in force.
    active: bool,
    /// Tables created or altered by pending changes: a log record with rows of one of them
    /// must not be written before a synced manifest describes the table.
    tables: std::collections::HashSet<u64>,
    /// The two slot files pending manifests are written to, kept open.
    slots: manifest::PendingSlots,
}

/// Holds the commit hook; opaque in `Debug` output.
#[derive(Clone)]
struct HookSlot(CommitHook);

impl std::fmt::Debug for HookSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CommitHook")
    }
}

/// What a commit changed, for commit hooks.
#[derive(Debug, Clone)]
pub struct CommitEvent {
    /// The commit's log sequence number (`None` for buffered commits and commits that went
    /// straight to segments).
    pub lsn: Option<u64>,
    /// The logged operations.
    pub ops: Vec<Op>,
    /// Bulk inserts written straight to segments: (table id, ids).
    pub bulk_inserts: Vec<(u64, IdRange)>,
}

/// A function run after every commit.
pub type CommitHook = Arc<dyn Fn(&CommitEvent) + Send + Sync>;

impl Store {
    /// Opens (creating if needed, unless read-only) the database rooted at `root` on `vfs`.
    /// `display` names the database in errors (its path, or `:memory:`). Log records
    /// not yet in segments are replayed; a writer then flushes them and deletes the log.
    pub fn open(
        vfs: Arc<dyn Vfs>,
        root: &Path,
        display: &Path,
        opts: StoreOptions,
    ) -> Result<Store> {
        // A directory without a manifest is a new database only if it holds nothing: never
        // start an empty database over someone's files, or over a database that lost its
        // manifest (it would take every table's files for orphans). Checked before the
        // lock file is created, so a refused directory is left as it was.
        if !vfs.exists(&root.join(manifest::MANIFEST_FILE)) {
            match owned::classify_without_manifest(vfs.as_ref(), root)? {
                owned::Contents::Empty if !opts.read_only => {}
                owned::Contents::Empty => {
                    return Err(Error::NotADatabase {
                        path: display.to_path_buf(),
                        found: "no MANIFEST".into(),
                    });
                }
                owned::Contents::Foreign(names) => {
                    return Err(Error::NotADatabase {
                        path: display.to_path_buf(),
                        found: format!("no MANIFEST but other files ({})", names.join(", ")),
                    });
                }
                // Salvaging writers adopt a manifest copy in `load`.
                owned::Contents::Damaged(_) if opts.salvage && !opts.read_only => {}
                owned::Contents::Damaged(names) => {
                    return Err(Error::ManifestMissing {
                        path: display.join(manifest::MANIFEST_FILE),
                        found: names.join(", "),
                    });
                }
            }
        }
        let lock = if opts.read_only {
            None
        } else {
            vfs.create_dir_all(root)?;
            Some(Self::lock_within(vfs.as_ref(), root, display, opts.lock_timeout)?)
        };
        let mut attempts = 0;
        let mut report = Vec::new();
        let (state, replayed) = loop {
            attempts += 1;
            match Self::load(vfs.as_ref(), root, display, &opts, &mut report) {
                // A read-only opener can race a writer that replaced the manifest and removed
                // a segment or log file it had listed: read the manifest again.
                Err(Error::Io { source, .. })
                    if opts.read_only
                        && source.kind() == std::io::ErrorKind::NotFound
                        && attempts < 5 => {}
                r => break r?,
            }
        };
        // The log file a manifest promises (format 4) must be there: without it, commits
        // acknowledged after the last flush would be lost without a word.
        if !opts.read_only && state.log_kept {
            let name = format!("{:016x}.wal", state.wal_lsn + 1);
            if !vfs.exists(&root.join(WAL_DIR).join(&name)) {
                let file = display.join(WAL_DIR).join(&name);
                if !opts.salvage {
                    return Err(Error::corrupt(
                        file,
                        0,
                        "the log file is missing: commits made since the last flush may be \
                         lost (put it back, or open with salvage to go on without them)",
                    ));
                }
                report.push(format!(
                    "the log file {} was missing: commits made since the last flush, if \
                     any, are lost",
                    file.display()
                ));
            }
        }
        // LSNs of log records a salvage dropped are not handed out again.
        let dropped = replayed.damage.as_ref().map_or(0, |d| d.dropped_through);
        let next_lsn = replayed.last_lsn.max(state.wal_lsn).max(dropped) + 1;
        // Every writable store has a log, whatever its default durability: a transaction or
        // call may ask for more than the default (its file is created at the first record).
        let wal = (!opts.read_only).then(|| Wal::new(vfs.clone(), root.join(WAL_DIR), next_lsn));
        let state = Arc::new(state);
        let mut store = Store {
            vfs,
            root: root.to_path_buf(),
            display: display.to_path_buf(),
            opts,
            next_segment_id: AtomicU64::new(state.next_segment_id),
            current: RwLock::new(state.clone()),
            head: Mutex::new(state),
            wal,
            closed: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
            lock: Mutex::new(lock),
            writer_lock: Arc::new(WriterLock::default()),
            hook: RwLock::new(None),
            pins: RwLock::new(Default::default()),
            fts: fts::Registry::default(),
            pending: Mutex::new(PendingCatalog::default()),
            salvage_report: Vec::new(),
        };
        store.reload_pins()?;
        if !opts.read_only {
            let aside = match opts.salvage {
                true => Some(salvage::Aside::new(store.vfs.as_ref(), root)?),
                false => None,
            };
            if let (Some(damage), Some(aside)) = (&replayed.damage, &aside) {
                let wal_dir = root.join(WAL_DIR);
                report.push(salvage::set_log_aside(store.vfs.as_ref(), &wal_dir, damage, aside)?);
            }
            // A torn last record is cut off now: later files will follow this one, and a
            // damaged record that is not at the very end of the log means corruption.
            if let Some((path, valid)) = &replayed.torn_at {
                let bytes = store.vfs.read(path)?;
                let keep = &bytes[..(*valid).min(bytes.len())];
                if keep.is_empty() {
                    store.vfs.remove_file(path)?;
                } else {
                    store.vfs.write_file(path, &[keep], true)?;
                }
                store.vfs.sync_dir(&root.join(WAL_DIR))?;
            }
            // First forget files no manifest names (so no new file ever lands on an orphan's
            // name), then absorb the replayed log into segments and forget the log. A
            // salvaging open moves them aside instead: its manifest may be an older copy.
            match &aside {
                None => store.remove_orphans()?,
                Some(aside) => {
                    let moved = std::cell::Cell::new(0usize);
                    let vfs = store.vfs.as_ref();
                    store.dispose_orphans(&|p| {
                        moved.set(moved.get() + 1);
                        aside.keep(vfs, p)
                    })?;
                    if moved.get() > 0 {
                        report.push(format!(
                            "{} file(s) the manifest does not name were moved to {}",
                            moved.get(),
                            aside.dest().display()
                        ));
                    }
                }
            }
            // Spill files of queries a killed process was running (only one writer: no
            // query of this database runs yet).
            if store.vfs.native() {
                owned::remove_spill_leftovers(store.vfs.as_ref(), &root.join(owned::SPILL_DIR))?;
            }
            // Indexes catch up with the replayed log before the log can be trimmed.
            store.fts_open_all(false)?;
            if replayed.files > 0 {
                let mut head = store.head.lock();
                // Only records past the manifest's `wal_lsn` need absorbing; files kept for
                // change feeds (or left by a crash after a flush) need no new manifest.
                if replayed.last_lsn > head.wal_lsn {
                    let mut next = (**head).clone();
                    next.wal_lsn = next_lsn - 1;
                    store.flush_into(&mut head, next)?;
                }
                let keep = store.retention(&head);
                wal::remove_through(store.vfs.as_ref(), &root.join(WAL_DIR), keep, next_lsn - 1)?;
            }
        } else {
            store.fts_open_all(false)?;
        }
        if let Some(wal) = &store.wal {
            // The file the next record goes to exists from now on, so the next install can
            // promise it (`Manifest::log_kept`).
            wal.start_next_file()?;
            let mut head = store.head.lock();
            if !head.log_kept && head.wal_lsn == wal.last_lsn() {
                Arc::make_mut(&mut head).log_kept = true;
            }
        }
        if !store.opts.read_only {
            // Staging tables of a `CREATE TABLE … AS` or an import that a crash interrupted.
            for name in store.snapshot().table_names() {
                if name.starts_with(STAGING_PREFIX) {
                    store.drop_table(&name)?;
                }
            }
        }
        store.salvage_report = report;
        Ok(store)
    }

    /// What a salvaging open ([`StoreOptions::salvage`]) did, a line per step; empty when
    /// it found nothing to salvage, and for every other open.
    pub fn salvage_report(&self) -> &[String] {
        &self.salvage_report
    }

    /// Takes the writer lock of the database at `root`, waiting up to `timeout` for a
    /// writer in another process (or another handle) to let it go: [`Error::Locked`] with
    /// no timeout, [`Error::LockTimeout`] after waiting.
    fn lock_within(
        vfs: &dyn Vfs,
        root: &Path,
        display: &Path,
        timeout: std::time::Duration,
    ) -> Result<LockGuard> {
        let start = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            match vfs.lock_exclusive(&root.join(LOCK_FILE), display) {
                Err(Error::Locked { path }) if !timeout.is_zero() => {
                    let waited = start.elapsed();
                    if waited >= timeout {
                        return Err(Error::LockTimeout { path, waited });
                    }
                    // The other writer holds a file lock: there is nothing to be woken by,
                    // so poll, backing off to 50 ms.
                    std::thread::sleep(pause.min(timeout - waited));
                    pause = (pause * 2).min(std::time::Duration::from_millis(50));
                }
                r => return r,
            }
        }
    }

    fn load(
        vfs: &dyn Vfs,
        root: &Path,
        display: &Path,
        opts: &StoreOptions,
        report: &mut Vec<String>,
    ) -> Result<(DbSnapshot, ReplayEnd)> {
        let manifest = match Manifest::load(vfs, root)? {
            Some((m, pending)) => {
                // Pending catalog changes survived (no power loss): a writer makes them
                // synced before anything else is written or removed. (The slot files stay,
                // superseded, to be overwritten.)
                if pending && !opts.read_only {
                    manifest::install(vfs, root, &m)?;
                }
                m
            }
            None if !opts.read_only
                && matches!(
                    owned::classify_without_manifest(vfs, root)?,
                    owned::Contents::Empty
                ) =>
            {
                let m = Manifest {
                    version: 1,
                    next_table_id: 1,
                    next_segment_id: 1,
                    wal_lsn: 0,
                    feeds: Vec::new(),
                    tables: Vec::new(),
                    views: Vec::new(),
                    log_kept: false,
                };
                manifest::install(vfs, root, &m)?;
                m
            }
            None if opts.salvage && !opts.read_only => {
                let Some((m, from)) = salvage::newest_manifest_copy(vfs, root)? else {
                    return Err(Error::ManifestMissing {
                        path: display.join(manifest::MANIFEST_FILE),
                        found: "files of a database, and no intact pending manifest or \
                                checkpoint to salvage from"
                            .into(),
                    });
                };
                manifest::install(vfs, root, &m)?;
                report.push(format!(
                    "MANIFEST was missing: adopted {from} (manifest version {})",
                    m.version
                ));
                m
            }
            // The manifest vanished after the check in `open` (or read-only): refuse as there.
            None => {
                return Err(Error::ManifestMissing {
                    path: display.join(manifest::MANIFEST_FILE),
                    found: "files of a database".into(),
                });
            }
        };
        let wal_lsn = manifest.wal_lsn;
        let mut state = state_from_manifest(vfs, root, manifest)?;
        // Replay committed rows that never reached a segment.
        let mut updated: BTreeMap<String, TableSnapshot> = BTreeMap::new();
        let schemas: BTreeMap<u64, SchemaRef> =
            state.tables.values().map(|t| (t.id, t.schema.full_schema().clone())).collect();
        let schema_of = |id: u64| schemas.get(&id).cloned();
        let salvage = opts.salvage && !opts.read_only;
        let end =
            wal::replay(vfs, &root.join(WAL_DIR), wal_lsn, salvage, &schema_of, |lsn, rec| {
                for op in rec.ops {
                    let table_id = match &op {
                        Op::Insert { table_id, .. } | Op::Delete { table_id, .. } => *table_id,
                    };
                    // Changes to a table dropped since are garbage.
                    let Some(t) = state.table_by_id(table_id) else { continue };
                    let nt = updated.entry(t.name.to_string()).or_insert_with(|| clone_table(t));
                    match op {
                        Op::Insert { batch, .. } => {
                            if batch.schema().fields() != nt.schema.full_schema().fields() {
                                return Err(Error::corrupt(
                                    root.join(WAL_DIR),
                                    lsn,
                                    format!(
                                        "log record {lsn} does not match the schema of table '{}'",
                                        nt.name
                                    ),
                                ));
                            }
                            nt.apply_insert(batch)?;
                        }
                        Op::Delete { ids, .. } => {
                            nt.delete_ids(&ids)?;
                        }
                    }
                }
                Ok(())
            })?;
        for t in updated.into_values() {
            state.tables.insert(t.name.clone(), Arc::new(t));
        }
        state.lsn = state.lsn.max(end.last_lsn);
        Ok((state, end))
    }

    /// Deletes what Basalt wrote and no manifest refers to any longer: files left by a
    /// crash between writing a segment and installing the manifest, or by a drop
    /// interrupted after its manifest install. Only table directories of ids this
    /// database handed out are looked into, and only files of Basalt's own names are
    /// removed (see [`crate::owned`]): anything else in the directory stays.
    fn remove_orphans(&self) -> Result<()> {
        self.dispose_orphans(&|p| self.vfs.remove_file(p))
    }

    /// [`Store::remove_orphans`] with another way to dispose of each file (salvage moves
    /// them aside).
    fn dispose_orphans(&self, dispose: &owned::Dispose<'_>) -> Result<()> {
        let snap = self.snapshot();
        let live: BTreeMap<u64, &Arc<TableSnapshot>> =
            snap.tables.values().map(|t| (t.id, t)).collect();
        let vfs = self.vfs.as_ref();
        for name in vfs.list_dir(&self.root)? {
            if name == MANIFEST_TMP {
                dispose(&self.root.join(&name))?;
                continue;
            }
            let Some(id) = owned::table_dir_id(&name) else { continue };
            if id >= snap.next_table_id {
                continue; // not an id this database handed out: not ours to clean
            }
            let dir = manifest::table_dir(&self.root, id);
            let Some(t) = live.get(&id) else {
                owned::dispose_table_dir(vfs, &dir, &|p| self.is_pinned(p), dispose)?;
                continue;
            };
            for f in vfs.list_dir(&dir)? {
                let p = dir.join(&f);
                let current = |dir_id: u64| t.fts.as_ref().is_some_and(|e| e.dir_id == dir_id);
                match owned::fts_name(&f) {
                    Some(owned::FtsName::Dir(d)) if !current(d) => {
                        owned::dispose_index_dir(vfs, &p, dispose)?;
                    }
                    Some(owned::FtsName::Marker(d)) if !current(d) => dispose(&p)?,
                    Some(_) => {}
                    None if owned::is_segment_file(&f) || owned::is_delete_file(&f) => {
                        let named = t.segments.iter().any(|s| {
                            s.entry
                                .files(&self.root, id)
                                .iter()
                                .any(|q| q.file_name() == Some(std::ffi::OsStr::new(&f)))
                        });
                        if !named && !self.is_pinned(&p) {
                            dispose(&p)?;
                        }
                    }
                    None => {}
                }
            }
        }
        Ok(())
    }

    /// The published state, in O(1).
    pub fn snapshot(&self) -> Arc<DbSnapshot> {
        self.current.read().clone()
    }

    /// The database's name in messages (path or `:memory:`).
    pub fn display_path(&self) -> &Path {
        &self.display
    }

    /// The directory of a database on disk (`None` in memory): nothing but the store
    /// writes there.
    pub fn directory(&self) -> Option<&Path> {
        self.vfs.native().then_some(self.root.as_path())
    }

    /// Whether writes are refused.
    pub fn is_read_only(&self) -> bool {
        self.opts.read_only
    }

    /// The durability level used when a write does not choose one.
    pub fn default_durability(&self) -> Durability {
        self.opts.durability
    }

    /// Waits (up to the lock timeout) to become the writer.
    pub(crate) fn acquire_writer(&self) -> Result<WriterToken> {
        self.writer_lock.acquire_for(self.opts.lock_timeout).ok_or_else(|| Error::LockTimeout {
            path: self.display.clone(),
            waited: self.opts.lock_timeout,
        })
    }

    fn writer(&self) -> Result<WriterToken> {
        self.check_writable()?;
        self.acquire_writer()
    }

    pub(crate) fn check_writable(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if self.opts.read_only {
            return Err(Error::ReadOnly { path: self.display.clone() });
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Poisoned { path: self.display.clone() });
        }
        Ok(())
    }

    fn poison<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.poisoned.store(true, Ordering::Release);
        }
        r
    }

    /// Makes `next` visible once it is as durable as its commits demand.
    pub(crate) fn publish(&self, next: Arc<DbSnapshot>) -> Result<()> {
        if let Some(wal) = &self.wal {
            // Logged commits are visible once written (process-safe) or synced (power-safe);
            // commits waiting here share one write and one sync.
            if next.sync_lsn > 0 {
                self.poison(wal.sync_to(next.sync_lsn))?;
            }
            if next.lsn > 0 {
                self.poison(wal.write_to(next.lsn))?;
            }
        }
        let mut cur = self.current.write();
        if next.version > cur.version {
            *cur = next;
        }
        Ok(())
    }

    /// Installs `next` as the manifest (segments already written), makes it the head, and
    /// publishes it. `absorbed` says every memtable row of `next` is now in a synced segment,
    /// so no log sync is owed before publishing.
    fn install(&self, head: &mut Arc<DbSnapshot>, next: DbSnapshot, absorbed: bool) -> Result<()> {
        self.install_as(head, next, absorbed, None)
    }

    /// Installs a catalog-only change `next` (no file written or removed) the way the store's
    /// durability asks: synced for a power-safe store, otherwise as a pending manifest (see
    /// the `manifest` module docs) that survives a killed process. `depends` names tables
    /// created or altered by the change: log records with their rows wait for a synced
    /// manifest.
    fn install_catalog(
        &self,
        head: &mut Arc<DbSnapshot>,
        next: DbSnapshot,
        absorbed: bool,
        depends: &[u64],
    ) -> Result<()> {
        let pending = self.opts.durability != Durability::PowerSafe;
        self.install_as(head, next, absorbed, pending.then_some(depends))
    }

    fn install_as(
        &self,
        head: &mut Arc<DbSnapshot>,
        mut next: DbSnapshot,
        absorbed: bool,
        pending: Option<&[u64]>,
    ) -> Result<()> {
        next.manifest_version += 1;
        next.version = head.version + 1;
        next.next_segment_id = self.next_segment_id.load(Ordering::Acquire);
        let m = next.to_manifest(next.manifest_version);
        match pending {
            Some(depends) => {
                let mut p = self.pending.lock();
                self.poison(p.slots.install(self.vfs.as_ref(), &self.root, &m))?;
                p.active = true;
                p.tables.extend(depends.iter().copied());
            }
            None => {
                self.poison(manifest::install(self.vfs.as_ref(), &self.root, &m))?;
                self.pending_superseded();
            }
        }
        if absorbed {
            next.sync_lsn = 0;
        }
        let next = Arc::new(next);
        *head = next.clone();
        let version = next.version;
        self.publish(next)?;
        self.fts.note_install(version);
        Ok(())
    }

    /// A synced manifest now holds every pending catalog change: the pending slots are
    /// stale (older, so ignored at open) and stay to be overwritten.
    fn pending_superseded(&self) {
        let mut p = self.pending.lock();
        p.active = false;
        p.tables.clear();
    }

    /// Makes pending catalog changes synced: `head`'s manifest (already written as the
    /// pending one) installed the normal way.
    fn sync_catalog(&self, head: &DbSnapshot) -> Result<()> {
        if !self.pending.lock().active {
            return Ok(());
        }
        let m = head.to_manifest(head.manifest_version);
        self.poison(manifest::install(self.vfs.as_ref(), &self.root, &m))?;
        self.pending_superseded();
        Ok(())
    }

    /// Whether writing `ops` to the log must wait for pending catalog changes to be synced.
    fn ops_need_synced_catalog(&self, ops: &[Op]) -> bool {
        let p = self.pending.lock();
        p.active
            && ops.iter().any(|op| match op {
                Op::Insert { table_id, .. } | Op::Delete { table_id, .. } => {
                    p.tables.contains(table_id)
                }
            })
    }

    /// Creates a table with the given user columns.
    pub fn create_table(&self, name: &str, schema: &Schema) -> Result<()> {
        self.create_table_with(name, schema, false)
    }

    /// Creates a table; with `replace`, a table of that name is dropped in the same manifest
    /// install (readers see the old table or the new one, never neither).
    pub fn create_table_with(&self, name: &str, schema: &Schema, replace: bool) -> Result<()> {
        check_user_name(name)?;
        self.create_table_named(name, schema, replace)
    }

    /// Creates a hidden *staging* table (its name, which starts with [`STAGING_PREFIX`], is
    /// returned) to be filled and then renamed into place with [`Store::rename_table`], so
    /// that a new table appears with all its rows or not at all. Staging tables left by a
    /// crash are dropped when the database is next opened for writing.
    pub fn create_staging_table(&self, schema: &Schema) -> Result<String> {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = format!("{STAGING_PREFIX}{}_{n}", std::process::id());
        self.create_table_named(&name, schema, false)?;
        Ok(name)
    }

    fn create_table_named(&self, name: &str, schema: &Schema, replace: bool) -> Result<()> {
        self.check_writable()?;
        check_name(name)?;
        let ts = TableSchema::from_user_schema(schema)?;
        let _w = self.writer()?;
        let head = self.head.lock();
        let mut next = (**head).clone();
        let old = replaced_table(&next, name, replace)?;
        // A directory of an id this database has not handed out (a power loss took back the
        // catalog change that did, or someone made it) is not reused: its files are not
        // ours to overwrite or clean.
        let mut id = next.next_table_id;
        while self.vfs.exists(&manifest::table_dir(&self.root, id)) {
            id += 1;
        }
        next.next_table_id = id + 1;
        let t = TableSnapshot {
            id,
            name: name.into(),
            schema: Arc::new(ts),
            next_row_id: 1,
            segments: Vec::new(),
            memtable: Memtable::default(),
            index: Arc::new(IdIndex::default()),
            fts: None,
        };
        next.tables.insert(t.name.clone(), Arc::new(t));
        self.install_replacing(head, next, old, &[id])
    }

    /// Installs the catalog change `next` (see [`Store::install_catalog`]), then deletes the
    /// files of the table it replaced (if any). Replacing a table that has files makes the
    /// install synced: the synced manifest must never name a deleted file.
    fn install_replacing(
        &self,
        mut head: parking_lot::MutexGuard<'_, Arc<DbSnapshot>>,
        next: DbSnapshot,
        replaced: Option<Arc<TableSnapshot>>,
        depends: &[u64],
    ) -> Result<()> {
        if replaced.as_ref().is_some_and(|t| has_files(t)) {
            self.install(&mut head, next, false)?;
        } else {
            self.install_catalog(&mut head, next, false, depends)?;
        }
        drop(head);
        if let Some(old) = replaced {
            self.remove_files_of(&old);
        }
        Ok(())
    }

    /// Renames a table (its data, ids and files stay); with `replace`, a table named `to` is
    /// dropped in the same manifest install.
    pub fn rename_table(&self, from: &str, to: &str, replace: bool) -> Result<()> {
        self.check_writable()?;
        check_user_name(to)?;
        let _w = self.writer()?;
        let head = self.head.lock();
        let mut next = (**head).clone();
        if from == to {
            next.tables.get(from).ok_or_else(|| Error::TableNotFound { table: from.into() })?;
            return Ok(());
        }
        let old = replaced_table(&next, to, replace)?;
        let t = next
            .tables
            .remove(from)
            .ok_or_else(|| Error::TableNotFound { table: from.to_string() })?;
        let mut t = clone_table(&t);
        t.name = to.into();
        next.tables.insert(t.name.clone(), Arc::new(t));
        self.install_replacing(head, next, old, &[])
    }

    /// Creates a view: a name for the SQL text of a query (storage keeps the text; the SQL
    /// layer plans it at each use). `replace` replaces an existing view of that name.
    pub fn create_view(&self, name: &str, sql: &str, replace: bool) -> Result<()> {
        self.check_writable()?;
        check_user_name(name)?;
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let mut next = (**head).clone();
        if next.tables.contains_key(name) {
            return Err(Error::TableExists { table: name.to_string() });
        }
        if next.views.contains_key(name) && !replace {
            return Err(Error::ViewExists { view: name.to_string() });
        }
        next.views.insert(name.to_string(), sql.to_string());
        self.install_catalog(&mut head, next, false, &[])
    }

    /// Drops a view.
    pub fn drop_view(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let mut next = (**head).clone();
        if next.views.remove(name).is_none() {
            return Err(Error::ViewNotFound { view: name.to_string() });
        }
        self.install_catalog(&mut head, next, false, &[])
    }

    /// Drops a table and deletes its files.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let mut next = (**head).clone();
        let t = next
            .tables
            .remove(name)
            .ok_or_else(|| Error::TableNotFound { table: name.to_string() })?;
        // A table with files is dropped by a synced install: its files go right after, and
        // the synced manifest must never name a deleted file.
        if has_files(&t) {
            self.install(&mut head, next, false)?;
        } else {
            self.install_catalog(&mut head, next, false, &[])?;
        }
        // The table is gone once the manifest is installed; its files are garbage now. A
        // failure here leaves orphans that the next writer open removes.
        self.remove_files_of(&t);
        Ok(())
    }

    /// Changes a table's columns without rewriting data: segments refer to columns by id,
    /// so an added column reads as NULL where it was never written, a dropped column's data
    /// is ignored (and reclaimed by compaction), and a rename keeps id, type and data.
    /// Memtables are flushed first, so the log never holds rows of an older schema.
    pub fn alter_table(&self, table: &str, change: &AlterColumn) -> Result<()> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        head.table(table)?;
        // Rows in memtables (and the log) were written under the old schemas: make them
        // segments first.
        if head
            .tables
            .values()
            .any(|t| !t.memtable.is_empty() || t.segments.iter().any(|s| s.deletes_dirty))
        {
            let n = (**head).clone();
            self.flush_into(&mut head, n)?;
        }
        let mut next = (**head).clone();
        let t = next.table(table)?.clone();
        let schema = match change {
            AlterColumn::Add(f) => {
                if !f.is_nullable() && t.count() > 0 {
                    return Err(Error::InvalidInput {
                        table: table.to_string(),
                        reason: format!(
                            "cannot add NOT NULL column '{}' to a table with rows",
                            f.name()
                        ),
                    });
                }
                t.schema.with_added(f)?
            }
            AlterColumn::Drop(name) => {
                if let Some(e) = &t.fts
                    && t.resolve(&[name.as_str()])
                        .is_ok_and(|p| e.columns.contains(&t.schema.column_id_at(p[0])))
                {
                    return Err(Error::InvalidInput {
                        table: table.to_string(),
                        reason: format!(
                            "column '{name}' is in the full-text index: drop the index first"
                        ),
                    });
                }
                t.schema.with_dropped(table, name)?
            }
            AlterColumn::Rename { from, to } => t.schema.with_renamed(table, from, to)?,
        };
        let mut nt = (*t).clone();
        nt.schema = Arc::new(schema);
        let id = nt.id;
        next.tables.insert(nt.name.clone(), Arc::new(nt));
        self.install_catalog(&mut head, next, true, &[id])
    }

    /// Inserts rows with the store's default durability. See [`Store::insert_with`].
    pub fn insert(&self, table: &str, batches: &[RecordBatch]) -> Result<IdRange> {
        self.insert_with(table, batches, self.opts.durability)
    }

    /// Inserts rows as one auto-committed transaction. All batches are validated before
    /// anything is written; the rows get consecutive new `_id`s. Inserts of at least
    /// [`StoreOptions::bulk_insert_rows`] rows become synced segments (durable at every
    /// level); smaller ones go to the memtable and to the log as `durability` demands.
    pub fn insert_with(
        &self,
        table: &str,
        batches: &[RecordBatch],
        durability: Durability,
    ) -> Result<IdRange> {
        self.autocommit(durability, |t, s| t.insert(s, table, batches))
    }

    /// Deletes the rows with these `_id`s with the store's default durability.
    pub fn delete(&self, table: &str, ids: &[u64]) -> Result<u64> {
        self.delete_with(table, ids, self.opts.durability)
    }

    /// Deletes the rows with these `_id`s; ids that do not exist are ignored. Returns how
    /// many rows were deleted.
    pub fn delete_with(&self, table: &str, ids: &[u64], durability: Durability) -> Result<u64> {
        self.autocommit(durability, |t, s| t.delete(s, table, ids))
    }

    /// Updates rows by `_id` with the store's default durability. See [`Store::update_with`].
    pub fn update(&self, table: &str, ids: &[u64], values: &RecordBatch) -> Result<u64> {
        self.update_with(table, ids, values, self.opts.durability)
    }

    /// Updates the rows with these `_id`s: row `i` of `values` gives the new values of the
    /// columns it has for `ids[i]`; other columns keep their values and `_id` is kept. Ids
    /// that do not exist are ignored. Returns how many rows were updated. The update is
    /// atomic: validated fully before anything changes.
    pub fn update_with(
        &self,
        table: &str,
        ids: &[u64],
        values: &RecordBatch,
        durability: Durability,
    ) -> Result<u64> {
        self.autocommit(durability, |t, s| t.update(s, table, ids, values))
    }

    /// Deletes the rows where `predicate` is true, as one commit; returns how many.
    pub fn delete_where(
        &self,
        table: &str,
        predicate: &Predicate,
        durability: Durability,
    ) -> Result<u64> {
        self.autocommit(durability, |t, s| t.delete_where(s, table, predicate))
    }

    /// Sets the columns of the one-row batch `values` on every row where `predicate` is
    /// true, as one commit; returns how many rows were updated.
    pub fn update_where(
        &self,
        table: &str,
        predicate: &Predicate,
        values: &RecordBatch,
        durability: Durability,
    ) -> Result<u64> {
        self.autocommit(durability, |t, s| t.update_where(s, table, predicate, values))
    }

    fn checkpoint_dir(&self) -> PathBuf {
        self.root.join(CHECKPOINT_DIR)
    }

    /// The file of checkpoint `name`. A name is one file name: no path separators, not
    /// `.` / `..` or hidden, so a checkpoint can never be written or removed outside
    /// `checkpoints/`.
    fn checkpoint_path(&self, name: &str) -> Result<PathBuf> {
        check_name(name)?;
        if name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(Error::InvalidName {
                name: name.to_string(),
                reason: "checkpoint names must not contain '/' or '\\' or start with '.'",
            });
        }
        Ok(self.checkpoint_dir().join(format!("{name}.manifest")))
    }

    fn load_checkpoint(&self, name: &str) -> Result<Manifest> {
        let p = self.checkpoint_path(name)?;
        if !self.vfs.exists(&p) {
            return Err(Error::InvalidInput {
                table: String::new(),
                reason: format!("no checkpoint '{name}'"),
            });
        }
        Manifest::decode(&self.vfs.read(&p)?, &p)
    }

    fn reload_pins(&self) -> Result<()> {
        let mut pins = std::collections::BTreeSet::new();
        for name in self.list_checkpoints()? {
            let m = self.load_checkpoint(&name)?;
            pins.extend(manifest_files(&self.root, &m));
        }
        *self.pins.write() = pins;
        Ok(())
    }

    fn is_pinned(&self, path: &Path) -> bool {
        self.pins.read().contains(path)
    }

    /// Deletes a file that became garbage unless a checkpoint pins it (best effort: the next
    /// writer open removes what this misses).
    fn remove_garbage(&self, path: &Path) {
        if !self.is_pinned(path) {
            let _ = self.vfs.remove_file(path);
        }
    }

    /// Removes the files of the dropped table `t`. When the manifest names no file of `t`,
    /// there is nothing of it to remove: files it stopped naming went when they did (or
    /// stay pinned by a checkpoint), and what a failed write left is an orphan the next
    /// writer open removes, with the directory. So dropping a table that holds no files
    /// costs no file-system calls.
    fn remove_files_of(&self, t: &TableSnapshot) {
        if has_files(t) {
            self.remove_table_files(t.id);
        } else {
            self.fts.forget(t.id);
        }
    }

    fn remove_table_files(&self, table_id: u64) {
        self.fts.forget(table_id);
        let dir = manifest::table_dir(&self.root, table_id);
        // Garbage now: what fails to go is removed at the next writer open.
        let _ = owned::remove_table_dir(self.vfs.as_ref(), &dir, &|p| self.is_pinned(p));
    }

    /// Names of the checkpoints, sorted.
    pub fn list_checkpoints(&self) -> Result<Vec<String>> {
        Ok(self
            .vfs
            .list_dir(&self.checkpoint_dir())?
            .into_iter()
            .filter_map(|f| f.strip_suffix(".manifest").map(str::to_string))
            .collect())
    }

    /// Creates a named checkpoint of the whole database as it is now (memtables are flushed
    /// first). The files it needs are pinned — compaction and drops leave them alone —
    /// until the checkpoint is dropped.
    pub fn checkpoint(&self, name: &str) -> Result<()> {
        let path = self.checkpoint_path(name)?;
        let _w = self.writer()?;
        let mut head = self.head.lock();
        if self.vfs.exists(&path) {
            return Err(Error::InvalidInput {
                table: String::new(),
                reason: format!("checkpoint '{name}' already exists"),
            });
        }
        let next = (**head).clone();
        self.flush_into(&mut head, next)?;
        let mut m = head.to_manifest(head.manifest_version);
        // A past state: its log file is not kept for it.
        m.log_kept = false;
        self.vfs.create_dir_all(&self.checkpoint_dir())?;
        let tmp = self.checkpoint_dir().join(format!("{name}.tmp"));
        self.vfs.write_file(&tmp, &[&m.encode()], true)?;
        self.vfs.rename(&tmp, &path)?;
        self.vfs.sync_dir(&self.checkpoint_dir())?;
        self.pins.write().extend(manifest_files(&self.root, &m));
        Ok(())
    }

    /// Drops a checkpoint; files only it kept alive are deleted.
    pub fn drop_checkpoint(&self, name: &str) -> Result<()> {
        let _w = self.writer()?;
        let _head = self.head.lock();
        self.load_checkpoint(name)?;
        self.vfs.remove_file(&self.checkpoint_path(name)?)?;
        self.vfs.sync_dir(&self.checkpoint_dir())?;
        self.reload_pins()?;
        drop(_head);
        self.remove_orphans()
    }

    /// A read-only view of a checkpoint (it does not change the database).
    pub fn checkpoint_snapshot(&self, name: &str) -> Result<Arc<DbSnapshot>> {
        let m = self.load_checkpoint(name)?;
        Ok(Arc::new(state_from_manifest(self.vfs.as_ref(), &self.root, m)?))
    }

    /// Restores the database to a checkpoint: tables, rows and schemas become what they
    /// were; everything committed since is discarded (including unflushed rows). Ids are
    /// never reused: row, table and segment counters keep their current maxima. Change feeds
    /// keep their positions.
    pub fn restore(&self, name: &str) -> Result<()> {
        self.restore_from(name, None)
    }

    /// Restores only the tables `tables` to checkpoint `name`: their rows, schemas and
    /// full-text indexes become what they were; every other table, every view and every
    /// change feed stays as it is. A named table the checkpoint does not hold is an error
    /// (nothing changes). A table of that name created since the checkpoint is replaced.
    pub fn restore_tables(&self, name: &str, tables: &[&str]) -> Result<()> {
        self.restore_from(name, Some(tables))
    }

    fn restore_from(&self, name: &str, only: Option<&[&str]>) -> Result<()> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let m = self.load_checkpoint(name)?;
        let restored = state_from_manifest(self.vfs.as_ref(), &self.root, m)?;
        if let Some(names) = only {
            if let Some(missing) = names.iter().find(|n| !restored.tables.contains_key(**n)) {
                return Err(Error::InvalidInput {
                    table: missing.to_string(),
                    reason: format!("checkpoint '{name}' has no table '{missing}'"),
                });
            }
            // The other tables keep their rows, those still only in the log included: make
            // them segments, so that no log record needs replaying after the swap below.
            let n = (**head).clone();
            self.flush_into(&mut head, n)?;
        }
        let mut next = (**head).clone();
        next.next_table_id = next.next_table_id.max(restored.next_table_id);
        let picked = |tname: &str| only.is_none_or(|o| o.contains(&tname));
        let mut tables = if only.is_some() { next.tables.clone() } else { BTreeMap::new() };
        let mut rebuilt = std::collections::BTreeSet::new();
        for (tname, t) in restored.tables {
            if !picked(&tname) {
                continue;
            }
            let mut t = (*t).clone();
            if let Some(cur) = head.tables.values().find(|c| c.id == t.id) {
                t.next_row_id = t.next_row_id.max(cur.next_row_id);
            }
            // Renamed since: the table goes back to its old name.
            tables.retain(|k, c| c.id != t.id || *k == tname);
            rebuilt.insert(t.id);
            tables.insert(tname, Arc::new(t));
        }
        next.tables = tables;
        if only.is_none() {
            next.views = restored.views;
        }
        // The log's records describe the state being discarded (or, restoring some
        // tables, are all in segments now): none may replay onto the restored one.
        if let Some(wal) = &self.wal {
            next.wal_lsn = next.wal_lsn.max(wal.last_lsn());
            self.poison(wal.start_next_file())?;
            next.log_kept = true;
        }
        next.lsn = next.lsn.max(next.wal_lsn);
        self.install(&mut head, next, true)?;
        drop(head);
        // The restored tables' indexes describe other rows: build them again.
        self.fts_open_tables(|id| rebuilt.contains(&id))?;
        if let Some(wal) = &self.wal {
            let keep = self.retention(&self.head.lock());
            self.poison(wal.rotate(keep))?;
        }
        self.remove_orphans()
    }

    /// Installs (or with `None` removes) the function called after every commit, outside
    /// all locks, with what the commit changed. Index upkeep hangs off this.
    pub fn set_commit_hook(&self, hook: Option<CommitHook>) {
        *self.hook.write() = hook.map(HookSlot);
    }

    pub(crate) fn run_commit_hook(&self, event: &CommitEvent) {
        let hook = self.hook.read().clone();
        if let Some(HookSlot(h)) = hook {
            h(event);
        }
    }

    /// The lowest LSN the log must still hold: everything above the segments' `wal_lsn` and
    /// above the position of the slowest change feed.
    fn retention(&self, state: &DbSnapshot) -> u64 {
        let keep = state.feeds.values().copied().fold(state.wal_lsn, u64::min);
        self.fts.retention().map_or(keep, |f| keep.min(f))
    }

    /// Creates a durable change feed starting after the newest commit; returns its position.
    /// Only commits made with a log (process-safe or power-safe durability) appear in feeds.
    pub fn create_feed(&self, name: &str) -> Result<u64> {
        check_name(name)?;
        let _w = self.writer()?;
        let mut head = self.head.lock();
        if head.feeds.contains_key(name) {
            return Err(Error::InvalidInput {
                table: String::new(),
                reason: format!("feed '{name}' already exists"),
            });
        }
        let mut next = (**head).clone();
        let pos = next.lsn;
        next.feeds.insert(name.to_string(), pos);
        self.install(&mut head, next, false)?;
        Ok(pos)
    }

    /// Removes a change feed; the log it held back is released at the next flush.
    pub fn drop_feed(&self, name: &str) -> Result<()> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let mut next = (**head).clone();
        next.feeds.remove(name).ok_or_else(|| Error::InvalidInput {
            table: String::new(),
            reason: format!("no feed '{name}'"),
        })?;
        self.install(&mut head, next, false)
    }

    /// Change feeds and their acknowledged positions.
    pub fn feeds(&self) -> Vec<(String, u64)> {
        self.snapshot().feeds.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Up to `max` committed changes after the feed's acknowledged position, in commit order,
    /// each with its LSN. Reading does not move the position; [`Store::ack_feed`] does.
    pub fn read_feed(&self, name: &str, max: usize) -> Result<Vec<(u64, Record)>> {
        let snap = self.snapshot();
        let pos = *snap.feeds.get(name).ok_or_else(|| Error::InvalidInput {
            table: String::new(),
            reason: format!("no feed '{name}'"),
        })?;
        let upto = snap.lsn;
        let mut out = Vec::new();
        if pos >= upto {
            return Ok(out);
        }
        let mut full = false;
        let schema_of = |id: u64| snap.table_by_id(id).map(|t| t.schema.full_schema().clone());
        let dir = self.root.join(WAL_DIR);
        wal::replay(self.vfs.as_ref(), &dir, pos, false, &schema_of, |lsn, rec| {
            if lsn <= upto && !full {
                out.push((lsn, rec));
                full = out.len() >= max;
            }
            Ok(())
        })?;
        if let Some(&(first, _)) = out.first()
            && first != pos + 1
        {
            return Err(Error::corrupt(
                self.root.join(WAL_DIR),
                pos,
                format!("feed '{name}' needs log record {} but the log starts at {first}", pos + 1),
            ));
        }
        Ok(out)
    }

    /// Acknowledges everything up to `lsn` on a feed (durably): those log records may now be
    /// deleted once segments hold them. Delivery is at-least-once across crashes between a
    /// consumer's processing and its acknowledgement.
    pub fn ack_feed(&self, name: &str, lsn: u64) -> Result<()> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let mut next = (**head).clone();
        let top = next.lsn;
        let pos = next.feeds.get_mut(name).ok_or_else(|| Error::InvalidInput {
            table: String::new(),
            reason: format!("no feed '{name}'"),
        })?;
        *pos = (*pos).max(lsn.min(top));
        self.install(&mut head, next, false)
    }

    /// The store's options.
    pub fn options(&self) -> &StoreOptions {
        &self.opts
    }

    /// The newest state, including commits still waiting for their log sync.
    pub(crate) fn head_snapshot(&self) -> Arc<DbSnapshot> {
        self.head.lock().clone()
    }

    /// Removes a file nothing refers to (best effort).
    pub(crate) fn remove_unreferenced(&self, path: &Path) {
        let _ = self.vfs.remove_file(path);
    }

    /// Writes a transaction's big insert straight to segments of its private table copy
    /// (the memtable's rows first, to keep segments in `_id` order). Returns the new files.
    pub(crate) fn spill(
        &self,
        t: &mut TableSnapshot,
        rows: &[RecordBatch],
    ) -> Result<Vec<PathBuf>> {
        let mut paths = Vec::new();
        if !t.memtable.is_empty() {
            let mem = memtable_rows(t)?;
            if mem.iter().any(|b| b.num_rows() > 0) {
                let seg = self.write_segment(t, &mem)?;
                paths.push(seg.segment.path().to_path_buf());
                t.segments.push(seg);
            }
            t.memtable = Memtable::default();
        }
        let seg = self.write_segment(t, rows)?;
        paths.push(seg.segment.path().to_path_buf());
        t.segments.push(seg);
        t.index = Arc::new(IdIndex::build(&t.segments));
        Ok(paths)
    }

    /// Makes a writer transaction's tables the new head: through one manifest install when it
    /// spilled segments or a memtable is full, otherwise through one log record. Returns the
    /// state to publish once the writer lock is released (`None` when already published).
    pub(crate) fn apply_commit(
        &self,
        tables: BTreeMap<Arc<str>, Arc<TableSnapshot>>,
        ops: &[Op],
        bulk: &[(u64, IdRange)],
        spilled: bool,
        durability: Durability,
    ) -> Result<(Option<Arc<DbSnapshot>>, Option<u64>)> {
        let mut head = self.head.lock();
        let mut next = (**head).clone();
        for (name, t) in tables {
            next.tables.insert(name, t);
        }
        let full = next.tables.values().any(|t| t.memtable.rows() >= self.opts.memtable_flush_rows);
        // Full-text upkeep learns of the commit before it can be published (both paths below
        // publish version head.version + 1).
        let logged = !(spilled || full) && durability != Durability::Buffered && self.wal.is_some();
        self.fts_mark(head.version + 1, ops, bulk, logged)?;
        if spilled || full {
            self.flush_into(&mut head, next)?;
            return Ok((None, None));
        }
        let mut logged = None;
        if durability != Durability::Buffered
            && let Some(wal) = &self.wal
        {
            if self.ops_need_synced_catalog(ops) {
                self.sync_catalog(&head)?;
            }
            let lsn = self.poison(wal.append(ops))?;
            if durability == Durability::PowerSafe {
                next.sync_lsn = lsn;
            }
            next.lsn = lsn;
            logged = Some(lsn);
        }
        next.version = head.version + 1;
        let next = Arc::new(next);
        *head = next.clone();
        Ok((Some(next), logged))
    }

    fn write_segment(&self, t: &TableSnapshot, batches: &[RecordBatch]) -> Result<LiveSegment> {
        let seg_id = self.next_segment_id.fetch_add(1, Ordering::AcqRel);
        let dir = manifest::table_dir(&self.root, t.id);
        if !self.vfs.exists(&dir) {
            self.vfs.create_dir_all(&dir)?;
            self.vfs.sync_dir(&self.root)?;
        }
        let path = manifest::segment_path(&self.root, t.id, seg_id);
        let column_ids: Vec<u32> =
            (0..t.schema.full_schema().fields().len()).map(|i| t.schema.column_id_at(i)).collect();
        let w = segment::write_segment(
            self.vfs.as_ref(),
            &path,
            seg_id,
            t.id,
            &column_ids,
            t.schema.full_schema(),
            batches,
            self.opts.write,
        )?;
        self.vfs.sync_dir(&dir)?;
        let segment = Segment::open(self.vfs.as_ref(), &path)?;
        let entry = SegmentEntry {
            id: seg_id,
            rows: w.rows,
            id_min: w.id_min,
            id_max: w.id_max,
            bytes: w.bytes,
            deletes_gen: 0,
            deleted: 0,
        };
        Ok(LiveSegment::new(entry, segment))
    }

    /// Writes every memtable of `next` to segments, installs one manifest for all of it
    /// (recording that the whole log is absorbed), and drops the log.
    fn flush_into(&self, head: &mut Arc<DbSnapshot>, mut next: DbSnapshot) -> Result<()> {
        let dirty: Vec<String> = next
            .tables
            .values()
            .filter(|t| !t.memtable.is_empty() || t.segments.iter().any(|s| s.deletes_dirty))
            .map(|t| t.name.to_string())
            .collect();
        let mut superseded = Vec::new();
        for name in dirty {
            let Some(t) = next.tables.get(&*name).cloned() else { continue };
            let mut nt = clone_table(&t);
            // Deletes of existing segments: a new delete-file generation each.
            for ls in nt.segments.iter_mut().filter(|s| s.deletes_dirty) {
                let generation = ls.entry.deletes_gen + 1;
                let path = manifest::delete_path(&self.root, nt.id, ls.entry.id, generation);
                let d = ls
                    .deletes
                    .clone()
                    .unwrap_or_else(|| Arc::new(DeleteVector::new(ls.entry.rows as usize)));
                self.vfs.write_file(&path, &[&d.encode()], true)?;
                superseded.extend(ls.entry.delete_file(&self.root, nt.id));
                ls.entry.deletes_gen = generation;
                ls.entry.deleted = d.count() as u64;
                ls.deletes_dirty = false;
            }
            let rows = memtable_rows(&t)?;
            if rows.iter().any(|b| b.num_rows() > 0) {
                let seg = self.write_segment(&nt, &rows)?;
                nt.segments.push(seg);
            } else if self.vfs.exists(&manifest::table_dir(&self.root, nt.id)) {
                self.vfs.sync_dir(&manifest::table_dir(&self.root, nt.id))?;
            }
            nt.memtable = Memtable::default();
            nt.index = Arc::new(IdIndex::build(&nt.segments));
            next.tables.insert(nt.name.clone(), Arc::new(nt));
        }
        if let Some(wal) = &self.wal {
            next.wal_lsn = next.wal_lsn.max(wal.last_lsn());
            // The file of the records after `wal_lsn` exists before a manifest says so.
            self.poison(wal.start_next_file())?;
            next.log_kept = true;
        }
        self.install(head, next, true)?;
        // Index commits after the install, so buffered changes it absorbed can clear the
        // unclean marker and the log can be trimmed past what the indexes hold.
        self.fts_refresh_all()?;
        if let Some(wal) = &self.wal {
            let keep = self.retention(head);
            self.poison(wal.rotate(keep))?;
        }
        for p in superseded {
            // Garbage now; the next writer open removes what this misses.
            self.remove_garbage(&p);
        }
        Ok(())
    }

    /// Persists every memtable and pending delete to segments and the manifest, and
    /// empties the log.
    pub fn flush(&self) -> Result<()> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let dirty = head
            .tables
            .values()
            .any(|t| !t.memtable.is_empty() || t.segments.iter().any(|s| s.deletes_dirty));
        if !dirty {
            // Nothing to write but perhaps pending catalog changes: flushed means durable.
            return self.sync_catalog(&head);
        }
        let next = (**head).clone();
        self.flush_into(&mut head, next)?;
        if self.opts.auto_compact {
            let names: Vec<String> = head.tables.keys().map(|k| k.to_string()).collect();
            for name in names {
                if compaction_runs(head.table(&name)?, false).is_empty() {
                    continue;
                }
                self.compact_locked(&mut head, &name, false)?;
            }
        }
        Ok(())
    }

    /// Rewrites a table's small or delete-heavy segments: runs of adjacent segments that are
    /// small (under half a row group) or have at least a fifth of their rows deleted become
    /// new segments holding only live rows (of the current columns), so deleted rows and
    /// dropped columns stop taking space. With `force`, every run of two or more segments
    /// and every segment with a deleted row is rewritten. Readers are not blocked: their
    /// snapshots keep the old segments (mapped) until they finish. Returns rows dropped.
    pub fn compact(&self, table: &str, force: bool) -> Result<CompactionReport> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        self.compact_locked(&mut head, table, force)
    }

    fn compact_locked(
        &self,
        head: &mut Arc<DbSnapshot>,
        table: &str,
        force: bool,
    ) -> Result<CompactionReport> {
        let t = head.table(table)?.clone();
        let runs = compaction_runs(&t, force);
        let mut report = CompactionReport::default();
        if runs.is_empty() {
            return Ok(report);
        }
        let mut nt = (*t).clone();
        let all: Vec<usize> = (0..t.schema.full_schema().fields().len()).collect();
        let mut new_segments = Vec::with_capacity(t.segments.len());
        let mut old_files = Vec::new();
        let mut i = 0;
        for (start, end) in runs {
            new_segments.extend(t.segments[i..start].iter().cloned());
            // Live rows of the run, in order.
            let mut rows = Vec::new();
            for s in start..end {
                let ls = &t.segments[s];
                report.segments_in += 1;
                report.rows_dropped += ls.deleted();
                for rg in 0..ls.segment.meta().row_groups.len() {
                    let cols = t.read_row_group(s, rg, &all, DecodeMode::Values)?;
                    let b = RecordBatch::try_new(t.schema.full_schema().clone(), cols)
                        .map_err(|e| Error::arrow("compact", e))?;
                    let b = match ls.keep_mask(rg) {
                        Some(m) => arrow_select::filter::filter_record_batch(&b, &m)
                            .map_err(|e| Error::arrow("compact", e))?,
                        None => b,
                    };
                    if b.num_rows() > 0 {
                        rows.push(b);
                    }
                }
                old_files.extend(ls.entry.files(&self.root, t.id));
            }
            if !rows.is_empty() {
                // Row groups in `_id` order, as a flush writes them: lookups binary-search.
                let rows = sorted_by_id(t.schema.full_schema(), rows)?;
                new_segments.push(self.write_segment(&nt, &rows)?);
                report.segments_out += 1;
            }
            i = end;
        }
        new_segments.extend(t.segments[i..].iter().cloned());
        nt.segments = new_segments;
        nt.index = Arc::new(IdIndex::build(&nt.segments));
        let mut next = (**head).clone();
        next.tables.insert(nt.name.clone(), Arc::new(nt));
        self.install(head, next, false)?;
        for f in old_files {
            // Garbage now (open snapshots keep their mappings); a miss is removed at open.
            self.remove_garbage(&f);
        }
        Ok(report)
    }

    /// Flushes and releases the writer lock; later calls fail with [`Error::Closed`].
    pub fn close(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        let skip = self.opts.read_only || self.poisoned.load(Ordering::Acquire);
        let r = if skip { Ok(()) } else { self.flush().and_then(|()| self.fts_refresh_all()) };
        // Closes the index writers (their lock files go with them).
        self.fts.handles_clear();
        self.closed.store(true, Ordering::Release);
        *self.lock.lock() = None;
        r
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionReport {
    /// Segments rewritten.
    pub segments_in: u64,
    /// Segments written.
    pub segments_out: u64,
    /// Deleted rows whose space was reclaimed.
    pub rows_dropped: u64,
}

/// Up to how many rows [`TableSnapshot::rows_at`] gathers value by value into one builder
/// per column (beyond, it decodes each row group's wanted rows as arrays and interleaves
/// them). Measured below it: 100 rows in 16 row groups cost about half the instructions
/// the arrays did; where the two cross over was not measured (it depends on how densely
/// the rows sit in their row groups: a dense window decodes for a few instructions a row).
const CELL_ROWS: usize = 1024;

/// The source of a row — `(0, memtable batch)` or `(1 + segment, row group)` — and its row
/// in it: the key a lookup of many rows groups and sorts them by.
fn source_of(loc: RowLocation) -> ((usize, usize), usize) {
    match loc {
        RowLocation::Memtable { batch, row } => ((0, batch), row),
        RowLocation::Segment { segment, rg, row } => ((1 + segment, rg), row),
    }
}

/// Appends `v` to `b`, a builder of type `dt` from [`arrow_array::builder::make_builder`]
/// (a type [`encoding::reads_cells`] accepts).
fn append_value(
    b: &mut dyn arrow_array::builder::ArrayBuilder,
    dt: &DataType,
    v: RowValue<'_>,
) -> Result<()> {
    use arrow_array::builder::*;
    use arrow_array::types::*;
    let mismatch = || Error::InvalidInput {
        table: String::new(),
        reason: format!("a stored value does not fit type {dt}"),
    };
    // Appends the cell's value (its variant `$v`, as `$e`) to a builder of type `$b`.
    macro_rules! put {
        ($c:expr, $b:ty, $v:path, $x:ident => $e:expr) => {{
            let b = b.as_any_mut().downcast_mut::<$b>().ok_or_else(mismatch)?;
            match $c {
                $v($x) => b.append_value($e),
                Cell::Null => b.append_null(),
                _ => return Err(mismatch()),
            }
        }};
    }
    // The same for a primitive builder of `$t`.
    macro_rules! prim {
        ($c:expr, $t:ty, $v:path) => {
            put!($c, PrimitiveBuilder<$t>, $v, x => x as _)
        };
    }
    // An array row as the cell it holds (NULL included).
    let cell = match v {
        RowValue::Cell(c) => c,
        RowValue::Array(a, i) => encoding::cell_at(a.as_ref(), i).ok_or_else(mismatch)?,
    };
    match dt {
        DataType::Int8 => prim!(cell, Int8Type, Cell::Int),
        DataType::Int16 => prim!(cell, Int16Type, Cell::Int),
        DataType::Int32 => prim!(cell, Int32Type, Cell::Int),
        DataType::Int64 => prim!(cell, Int64Type, Cell::Int),
        DataType::Date32 => prim!(cell, Date32Type, Cell::Int),
        DataType::Timestamp(TimeUnit::Second, _) => prim!(cell, TimestampSecondType, Cell::Int),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            prim!(cell, TimestampMillisecondType, Cell::Int)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            prim!(cell, TimestampMicrosecondType, Cell::Int)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            prim!(cell, TimestampNanosecondType, Cell::Int)
        }
        DataType::UInt8 => prim!(cell, UInt8Type, Cell::UInt),
        DataType::UInt16 => prim!(cell, UInt16Type, Cell::UInt),
        DataType::UInt32 => prim!(cell, UInt32Type, Cell::UInt),
        DataType::UInt64 => prim!(cell, UInt64Type, Cell::UInt),
        DataType::Float32 => prim!(cell, Float32Type, Cell::F32),
        DataType::Float64 => prim!(cell, Float64Type, Cell::F64),
        DataType::Decimal128(_, _) => prim!(cell, Decimal128Type, Cell::Decimal),
        DataType::Boolean => put!(cell, BooleanBuilder, Cell::Bool, x => x),
        DataType::Utf8 => put!(cell, StringBuilder, Cell::Str, x => x),
        DataType::Binary => put!(cell, BinaryBuilder, Cell::Bytes, x => x),
        _ => return Err(mismatch()),
    }
    Ok(())
}

/// A one-row array of type `dt` holding `v` (a cell of another kind than `dt` stores is
/// an error, not a guess).
pub(crate) fn one_value_array(dt: &DataType, v: RowValue<'_>) -> Result<ArrayRef> {
    use arrow_array::types::*;
    macro_rules! prim {
        ($t:ty, $x:expr) => {
            // A `Vec`-backed buffer: Arrow's own constructors allocate 64-byte aligned
            // memory, which costs more than the rest of a one-row read.
            Arc::new(
                PrimitiveArray::<$t>::new(arrow_buffer::ScalarBuffer::from(vec![$x as _]), None)
                    .with_data_type(dt.clone()),
            ) as ArrayRef
        };
    }
    let cell = match v {
        RowValue::Array(a, i) => return Ok(a.slice(i, 1)),
        RowValue::Cell(c) => c,
    };
    Ok(match (cell, dt) {
        (Cell::Null, _) => arrow_array::new_null_array(dt, 1),
        (Cell::Bool(b), DataType::Boolean) => Arc::new(arrow_array::BooleanArray::from(vec![b])),
        (Cell::Int(x), DataType::Int8) => prim!(Int8Type, x),
        (Cell::Int(x), DataType::Int16) => prim!(Int16Type, x),
        (Cell::Int(x), DataType::Int32) => prim!(Int32Type, x),
        (Cell::Int(x), DataType::Int64) => prim!(Int64Type, x),
        (Cell::Int(x), DataType::Date32) => prim!(Date32Type, x),
        (Cell::Int(x), DataType::Timestamp(unit, _)) => match unit {
            TimeUnit::Second => prim!(TimestampSecondType, x),
            TimeUnit::Millisecond => prim!(TimestampMillisecondType, x),
            TimeUnit::Microsecond => prim!(TimestampMicrosecondType, x),
            TimeUnit::Nanosecond => prim!(TimestampNanosecondType, x),
        },
        (Cell::UInt(x), DataType::UInt8) => prim!(UInt8Type, x),
        (Cell::UInt(x), DataType::UInt16) => prim!(UInt16Type, x),
        (Cell::UInt(x), DataType::UInt32) => prim!(UInt32Type, x),
        (Cell::UInt(x), DataType::UInt64) => prim!(UInt64Type, x),
        (Cell::F32(x), DataType::Float32) => prim!(Float32Type, x),
        (Cell::F64(x), DataType::Float64) => prim!(Float64Type, x),
        (Cell::Decimal(x), DataType::Decimal128(_, _)) => prim!(Decimal128Type, x),
        (Cell::Str(x), DataType::Utf8) => {
            let (offsets, data) = one_value_buffers(x.as_bytes())?;
            // SAFETY: the one value is `x`, a `&str` (valid UTF-8), and the offsets are 0
            // and its length; Arrow's check would validate the same bytes again.
            Arc::new(unsafe { arrow_array::StringArray::new_unchecked(offsets, data, None) })
        }
        (Cell::Bytes(x), DataType::Binary) => {
            let (offsets, data) = one_value_buffers(x)?;
            Arc::new(arrow_array::BinaryArray::new(offsets, data, None))
        }
        (cell, dt) => {
            return Err(Error::InvalidInput {
                table: String::new(),
                reason: format!("a stored value {cell:?} does not fit type {dt}"),
            });
        }
    })
}

/// The offsets (0 and its length) and the bytes of a one-value byte-string array, in one
/// allocation (when the allocator aligns it for `i32`): the two offsets first, the value
/// after them.
fn one_value_buffers(value: &[u8]) -> Result<(OffsetBuffer<i32>, Buffer)> {
    let len = i32::try_from(value.len()).map_err(|_| Error::InvalidInput {
        table: String::new(),
        reason: format!("a stored value of {} bytes is too long for Utf8/Binary", value.len()),
    })?;
    let mut bytes = Vec::with_capacity(8 + value.len());
    bytes.extend_from_slice(&0i32.to_le_bytes());
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(value);
    if !(bytes.as_ptr() as usize).is_multiple_of(align_of::<i32>()) {
        // An allocator that does not align byte vectors: two buffers.
        return Ok((OffsetBuffer::from_lengths([value.len()]), Buffer::from_vec(value.to_vec())));
    }
    let all = Buffer::from_vec(bytes);
    let offsets = ScalarBuffer::<i32>::new(all.slice_with_length(0, 8), 0, 2);
    Ok((OffsetBuffer::new(offsets), all.slice(8)))
}

/// The rows of `batches` (`_id` first) in ascending `_id` order: as they are when they
/// already are, else concatenated and sorted.
fn sorted_by_id(schema: &SchemaRef, batches: Vec<RecordBatch>) -> Result<Vec<RecordBatch>> {
    let mut last = None;
    let mut ascending = true;
    for b in &batches {
        let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().ok_or_else(|| {
            Error::InvalidInput { table: String::new(), reason: "_id column is not UInt64".into() }
        })?;
        for &id in ids.values() {
            ascending &= last.is_none_or(|l| l < id);
            last = Some(id);
        }
    }
    if ascending {
        return Ok(batches);
    }
    let all = arrow_select::concat::concat_batches(schema, &batches)
        .map_err(|e| Error::arrow("compact", e))?;
    let order = arrow_ord::sort::sort_to_indices(all.column(0), None, None)
        .map_err(|e| Error::arrow("compact", e))?;
    let sorted = arrow_select::take::take_record_batch(&all, &order)
        .map_err(|e| Error::arrow("compact", e))?;
    Ok(vec![sorted])
}

/// Runs `[start, end)` of adjacent segments worth rewriting.
fn compaction_runs(t: &TableSnapshot, force: bool) -> Vec<(usize, usize)> {
    let small = (segment::ROW_GROUP_ROWS / 2) as u64;
    let candidate = |ls: &LiveSegment| {
        let heavy = ls.deleted() * 5 >= ls.entry.rows && ls.deleted() > 0;
        heavy || ls.entry.rows < small || (force && ls.deleted() > 0)
    };
    let mut runs = Vec::new();
    let mut i = 0;
    while i < t.segments.len() {
        if !candidate(&t.segments[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < t.segments.len() && candidate(&t.segments[i]) {
            i += 1;
        }
        let run = &t.segments[start..i];
        // A single small segment without deletes gains nothing from a rewrite.
        if run.len() >= 2 || run.iter().any(|s| s.deleted() > 0) {
            runs.push((start, i));
        }
    }
    runs
}

/// Opens every segment (and delete file) a manifest names and builds the state it describes
/// (no log replay).
fn state_from_manifest(vfs: &dyn Vfs, root: &Path, manifest: Manifest) -> Result<DbSnapshot> {
    let mut tables = BTreeMap::new();
    for t in manifest.tables {
        let mut segments = Vec::with_capacity(t.segments.len());
        for e in t.segments {
            let path = manifest::segment_path(root, t.id, e.id);
            let seg = Segment::open(vfs, &path)?;
            let m = seg.meta();
            if m.segment_id != e.id || m.table_id != t.id || m.rows != e.rows {
                return Err(Error::corrupt(&path, 0, "segment does not match its manifest entry"));
            }
            let mut ls = LiveSegment::new(e, seg);
            if ls.entry.deletes_gen > 0 {
                let p = manifest::delete_path(root, t.id, ls.entry.id, ls.entry.deletes_gen);
                let d = DeleteVector::decode(&vfs.read(&p)?, ls.entry.rows as usize, &p)?;
                if d.count() as u64 != ls.entry.deleted {
                    return Err(Error::corrupt(
                        &p,
                        0,
                        "delete file does not match its manifest entry",
                    ));
                }
                ls.deletes = Some(Arc::new(d));
            }
            segments.push(ls);
        }
        let index = Arc::new(IdIndex::build(&segments));
        let snap = TableSnapshot {
            id: t.id,
            name: t.name.as_str().into(),
            schema: Arc::new(t.schema),
            next_row_id: t.next_row_id,
            segments,
            memtable: Memtable::default(),
            index,
            fts: t.fts.map(Arc::new),
        };
        tables.insert(snap.name.clone(), Arc::new(snap));
    }
    Ok(DbSnapshot {
        version: 1,
        manifest_version: manifest.version,
        next_table_id: manifest.next_table_id,
        next_segment_id: manifest.next_segment_id,
        wal_lsn: manifest.wal_lsn,
        sync_lsn: 0,
        lsn: manifest.wal_lsn,
        feeds: manifest.feeds.into_iter().collect(),
        tables,
        views: manifest.views.into_iter().collect(),
        log_kept: manifest.log_kept,
    })
}

/// The id of the table a new table named `name` replaces (`None` if there is none); an
/// error if it exists and may not be replaced, or if a view has the name.
fn replaced_table(
    state: &DbSnapshot,
    name: &str,
    replace: bool,
) -> Result<Option<Arc<TableSnapshot>>> {
    if state.views.contains_key(name) {
        return Err(Error::ViewExists { view: name.to_string() });
    }
    match state.tables.get(name) {
        Some(_) if !replace => Err(Error::TableExists { table: name.to_string() }),
        Some(t) => Ok(Some(t.clone())),
        None => Ok(None),
    }
}

/// Whether a manifest names files of `t` (segments, delete files, a full-text index).
fn has_files(t: &TableSnapshot) -> bool {
    !t.segments.is_empty() || t.fts.is_some()
}

/// Files a manifest refers to.
fn manifest_files(root: &Path, m: &Manifest) -> Vec<PathBuf> {
    m.tables.iter().flat_map(|t| t.segments.iter().flat_map(move |s| s.files(root, t.id))).collect()
}

/// The memtable's live rows in `_id` order, as a segment receives them.
fn memtable_rows(t: &TableSnapshot) -> Result<Vec<RecordBatch>> {
    Ok(t.memtable.sorted_live()?.into_iter().collect())
}

impl Drop for Store {
    fn drop(&mut self) {
        // Best effort: Drop cannot report errors; callers who need to know use close().
        let _ = self.close();
    }
}

fn clone_table(t: &TableSnapshot) -> TableSnapshot {
    TableSnapshot {
        id: t.id,
        name: t.name.clone(),
        schema: t.schema.clone(),
        next_row_id: t.next_row_id,
        segments: t.segments.clone(),
        memtable: t.memtable.clone(),
        index: t.index.clone(),
        fts: t.fts.clone(),
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;

#[path = "knn.rs"]
mod knn;

#[path = "fts.rs"]
mod fts;
pub use knn::VectorSearch;
