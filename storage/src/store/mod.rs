//! The database-level store: tables, snapshots, inserts, flushes, point lookups and scans.
//!
//! A [`Store`] owns one database directory (or an in-memory [`crate::io::MemFs`]). Its state
//! is an immutable [`DbSnapshot`] behind an `RwLock<Arc<_>>`: readers clone the `Arc` in O(1)
//! and keep a consistent view for as long as they like; a writer (one at a time, holding the
//! writer token) builds the next state, makes it durable where its level requires, and
//! swaps it in.
//!
//! This file holds the types (options, snapshots, the store) and their accessors; each
//! concern is a file of its own:
//!
//! - `open.rs` — opening: directory check, writer lock, manifest or salvage, log replay,
//!   orphan removal;
//! - `catalog.rs` — publishing states, manifest installs, DDL, auto-commit write calls;
//! - `write.rs` — commits, spills, flushes, compaction, close;
//! - `checkpoints.rs` — named checkpoints, restore, garbage removal;
//! - `feeds.rs` — the commit hook and change feeds;
//! - `conform.rs` — what an insert or update must be before it is written;
//! - `read.rs` — point reads, ranges, scan units, zone maps;
//! - `scan.rs` — scans over scan units;
//! - `knn.rs` — vector top-k over a snapshot;
//! - `fts.rs` — the full-text index kept in step with the tables;
//! - `tests.rs` — the store's tests (fault injection, corruption sweep, crash states).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use arrow_array::{
    Array, ArrayRef, FixedSizeListArray, Float32Array, RecordBatch, UInt64Array, new_empty_array,
    new_null_array,
};
use arrow_buffer::BooleanBuffer;
use arrow_schema::{DataType, Field, Schema, SchemaRef};
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

/// Names of tables and views starting with this are Basalt's own: refused for user tables
/// and views, hidden from listings.
pub const RESERVED_PREFIX: &str = "__basalt_";

/// Prefix of staging tables ([`Store::create_staging_table`]).
pub const STAGING_PREFIX: &str = "__basalt_tmp_";

/// Checks a user's table or view name: a valid name outside [`RESERVED_PREFIX`].
pub(crate) fn check_user_name(name: &str) -> Result<()> {
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
    /// Set (`Some`) or drop (`None`) a column's default: the SQL text of an expression the
    /// SQL layer plans when a write leaves the column out.
    SetDefault {
        /// The column.
        column: String,
        /// The expression's SQL text.
        sql: Option<String>,
    },
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
    /// Add a CHECK constraint (refused when a row already there breaks it).
    AddCheck(NewCheck),
    /// Drop a CHECK constraint by name.
    DropCheck(String),
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
    /// Its primary key, unique keys and indexes (see `keys`).
    indexes: Arc<[manifest::IndexDef]>,
    /// Column defaults: column id and SQL text (the SQL layer plans them).
    defaults: Arc<[(u32, String)]>,
    /// CHECK constraints (the SQL layer evaluates them, see `checks`).
    checks: Arc<[manifest::CheckDef]>,
    /// The sets enforcing its unique keys, once a write has built them (`None`: not built).
    keys: Option<keys::KeySets>,
    /// Sets built by a lookup on this state while `keys` was `None` (see `keys`).
    read_keys: keys::ReadSets,
    /// [`TableSnapshot::estimate_matches`] answers already worked out, so a query run again
    /// samples nothing (a write starts a new snapshot with none).
    estimates: Arc<parking_lot::Mutex<std::collections::HashMap<(String, u64), u64>>>,
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
        // Replayed rows were checked when they were written; the sets are built again from
        // the rows on the next write.
        self.keys = None;
        self.read_keys = Arc::default();
        self.memtable.push(batch)
    }

    /// Marks the rows with these `_id`s deleted (in place on this private copy); returns the
    /// ids that existed, in the order given (each once).
    pub(crate) fn delete_ids(&mut self, ids: &[u64]) -> Result<Vec<u64>> {
        let mut found = Vec::with_capacity(ids.len());
        if self.keys.is_none() {
            // No key sets to keep: each row is deleted as it is found (an id given twice
            // is not found the second time).
            for &id in ids {
                if let Some(loc) = self.locate(id)? {
                    self.delete_at(loc);
                    found.push(id);
                }
            }
            return Ok(found);
        }
        let mut locs = Vec::with_capacity(ids.len());
        // An id given twice is deleted (and leaves the key sets) once.
        let mut seen = std::collections::HashSet::new();
        for &id in ids {
            if ids.len() > 1 && !seen.insert(id) {
                continue;
            }
            if let Some(loc) = self.locate(id)? {
                locs.push(loc);
                found.push(id);
            }
        }
        self.change_keys(&locs, &found, &[])?;
        for loc in locs {
            self.delete_at(loc);
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
                indexes: t.indexes.to_vec(),
                defaults: t.defaults.to_vec(),
                checks: t.checks.to_vec(),
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
    /// What evaluates CHECK constraints (installed by the SQL layer; see `checks`).
    check_evaluator: RwLock<Option<Arc<dyn checks::CheckEvaluator>>>,
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

impl Drop for Store {
    fn drop(&mut self) {
        // Best effort: Drop cannot report errors; callers who need to know use close().
        let _ = self.close();
    }
}

mod catalog;
mod checkpoints;
mod checks;
mod conform;
mod feeds;
mod fts;
mod keys;
mod knn;
mod open;
mod read;
mod scan;
#[cfg(test)]
mod tests;
mod view;
mod write;

pub(crate) use self::catalog::{Effect, staging_name};
pub use self::checks::{CheckEvaluator, NewCheck, name_checks};
pub use self::keys::{KeyRange, NewIndex, OnConflict};
pub use self::knn::VectorSearch;
#[cfg(test)]
use self::read::*;
pub use self::read::{ChunkMetadata, ColumnSummary, UnitMetadata};
pub use self::scan::{Scan, ScanUnit};
pub use self::view::ReadView;
pub use self::write::CompactionReport;
use self::{catalog::*, open::*, scan::*};
pub use crate::owned::{CHECKPOINT_DIR, LOCK_FILE};
pub use crate::values::RowValue;
pub(crate) use crate::values::{append_value, one_value_array};
