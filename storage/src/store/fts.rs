//! Full-text index upkeep: keeps each table's tantivy index (crate `basalt-fts`) in step
//! with the table, through commits, flushes, crashes, drops and restores.
//!
//! This module (a child of `store`) owns *when* rows reach the index and what the index
//! commit records; `basalt-fts` owns the index files and the search. It must not change
//! table data: the table is the truth, and the index is derived from it.
//!
//! # Protocol
//!
//! - **Marks.** Every commit that touches an indexed table records, under the head lock and
//!   before its state is published, a *mark*: the state version that includes it and the
//!   `_id`s it inserted, updated or deleted (bulk inserts: their id range).
//! - **Refresh.** Before a search on a writable handle, and after every flush, the index is
//!   brought up to the published state `S`: marks with version ≤ `S.version` are taken, each
//!   marked id is deleted from the index (unless it was never indexed) and re-added with its
//!   text in `S` if it is still live, and the tantivy commit records the payload
//!   `{lsn: S.lsn, next_row_id}`. Every commit with a version ≤ `S.version` is published,
//!   and was marked before it was published, so the payload's claims hold. Writes between
//!   searches cost no tantivy commit; a search after writes costs one (read-your-writes),
//!   made without fsync after a synced `fts-<dir>.lazy` marker; a flush's refresh syncs
//!   every file those commits wrote, then removes the marker.
//! - **Log retention.** The log keeps every record above the lowest *synced* payload LSN
//!   (like a change feed), and each flush commits the index synced, so the log does not
//!   grow.
//! - **Recovery** (writer open): the index is rebuilt from the table when it is missing or
//!   unreadable (with the `.lazy` marker present: any file failing its checksum, as a power
//!   failure can leave unsynced commits), when its payload is ahead of the recovered log
//!   (commits lost to a power failure) or of the table's row-id counter (buffered rows
//!   lost), or when the *unclean marker* exists. Otherwise the ids of logged records after the payload's LSN and every
//!   `_id` from the payload's `next_row_id` on are re-indexed: that covers logged commits and
//!   inserts that bypass the log (bulk inserts and flushes). Updates and deletes that bypass
//!   the log (buffered durability, or a commit that flushed a full memtable) first create
//!   the marker file `fts-<dir>.unclean` (synced) before anything of them can be durable;
//!   it is removed once a synced index commit covers a state whose manifest install
//!   absorbed them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::{Array, RecordBatch, StringArray, UInt64Array};
use arrow_schema::DataType;
use basalt_fts::{FtsIndex, Hit, Location, Payload, TextColumn, Tokenizer};
use parking_lot::{Mutex, RwLock};

use super::{DbSnapshot, Store, TableSnapshot};
use crate::error::{Error, Result};
use crate::manifest::{self, FtsEntry};
use crate::owned;
use crate::store::ReadView;
use crate::wal::{self, Op, WAL_DIR};

/// The live full-text indexes of a store, by table id.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    handles: RwLock<BTreeMap<u64, Arc<Handle>>>,
    /// Why a read-only handle could not open a table's index (by table id): full-text
    /// queries on it report this; everything else about the table works.
    unusable: RwLock<BTreeMap<u64, String>>,
    /// Version of the newest installed manifest (buffered changes up to it are durable).
    installed: AtomicU64,
    /// Opens that rebuilt an index / caught up from its payload (for tests and diagnostics).
    rebuilds: AtomicU64,
    catch_ups: AtomicU64,
}

impl Registry {
    fn get(&self, table_id: u64) -> Option<Arc<Handle>> {
        self.handles.read().get(&table_id).cloned()
    }

    fn all(&self) -> Vec<Arc<Handle>> {
        self.handles.read().values().cloned().collect()
    }

    /// The lowest LSN an index still needs from the log (`None`: no index needs any).
    pub(crate) fn retention(&self) -> Option<u64> {
        self.handles.read().values().map(|h| h.pending.lock().durable_lsn).min()
    }

    /// Forgets a table's index (closing its writer) without touching files.
    pub(crate) fn forget(&self, table_id: u64) {
        self.handles.write().remove(&table_id);
    }

    /// Closes every index writer.
    pub(crate) fn handles_clear(&self) {
        self.handles.write().clear();
    }

    pub(crate) fn note_install(&self, version: u64) {
        self.installed.fetch_max(version, Ordering::AcqRel);
    }
}

/// One open index.
#[derive(Debug)]
struct Handle {
    table_id: u64,
    entry: FtsEntry,
    index: FtsIndex,
    pending: Mutex<Pending>,
    /// Serialises refreshes (one tantivy writer, one payload order).
    refresh: Mutex<()>,
    /// The unclean-marker file (`None` for in-memory databases).
    marker: Option<PathBuf>,
    writable: bool,
}

#[derive(Debug, Default)]
struct Pending {
    /// (state version, ids) of commits not yet in the index.
    marks: Vec<(u64, Vec<u64>)>,
    /// Ids from here on were never indexed: adding them needs no delete first.
    fresh_from: u64,
    /// What the last index commit recorded.
    committed: Payload,
    /// The payload LSN of the last synced index commit (what a power failure keeps).
    durable_lsn: u64,
    /// Commits since the last synced one left files unsynced (the `.lazy` marker exists).
    unsynced: bool,
    /// The index reflects the table as of this state version.
    indexed_version: u64,
    /// Version of the newest update or delete that bypassed the log and is not yet covered
    /// by an index commit of an installed state (the marker file exists meanwhile).
    unlogged: Option<u64>,
}

/// Positions (in the full schema) of the indexed columns, and their current names.
fn indexed_columns(t: &TableSnapshot, entry: &FtsEntry) -> Result<(Vec<usize>, Vec<String>)> {
    let full = t.schema.full_schema();
    let mut pos = Vec::with_capacity(entry.columns.len());
    let mut names = Vec::with_capacity(entry.columns.len());
    for cid in &entry.columns {
        let p = (0..full.fields().len()).find(|&i| t.schema.column_id_at(i) == *cid).ok_or_else(
            || Error::InvalidInput {
                table: t.name.to_string(),
                reason: format!("full-text index column id {cid} is not in the table"),
            },
        )?;
        pos.push(p);
        names.push(full.field(p).name().clone());
    }
    Ok((pos, names))
}

fn fts_err(table: &str) -> impl FnOnce(basalt_fts::Error) -> Error + '_ {
    move |source| Error::Fts { table: table.to_string(), source }
}

/// The indexed columns of a batch (`_id` first, then the text columns) as strings.
fn text_columns(batch: &RecordBatch) -> Result<Vec<StringArray>> {
    (1..batch.num_columns())
        .map(|i| {
            let c = batch.column(i);
            let c = if c.data_type() == &DataType::Utf8 {
                c.clone()
            } else {
                arrow_cast::cast(c, &DataType::Utf8)
                    .map_err(|e| Error::arrow("read full-text columns", e))?
            };
            Ok(c.as_string::<i32>().clone())
        })
        .collect()
}

/// Adds every row of `batch` (`_id`, then the indexed columns) to the index.
fn add_batch(index: &FtsIndex, table: &str, batch: &RecordBatch) -> Result<()> {
    let ids = batch.column(0).as_primitive::<arrow_array::types::UInt64Type>();
    let cols = text_columns(batch)?;
    index
        .add_many(
            (0..batch.num_rows()).map(|r| {
                (ids.value(r), cols.iter().map(move |c| (!c.is_null(r)).then(|| c.value(r))))
            }),
        )
        .map_err(fts_err(table))
}

impl Store {
    fn fts_location(&self, table_id: u64, dir_id: u64) -> Location {
        if self.vfs.native() {
            Location::Dir(manifest::fts_dir(&self.root, table_id, dir_id))
        } else {
            Location::Memory
        }
    }

    /// The marker of unsynced index commits (see [`Store::fts_refresh`]).
    fn fts_lazy_marker(&self, table_id: u64, dir_id: u64) -> Option<PathBuf> {
        self.vfs
            .native()
            .then(|| manifest::table_dir(&self.root, table_id).join(format!("fts-{dir_id}.lazy")))
    }

    fn fts_marker(&self, table_id: u64, dir_id: u64) -> Option<PathBuf> {
        self.vfs.native().then(|| {
            manifest::table_dir(&self.root, table_id).join(format!("fts-{dir_id}.unclean"))
        })
    }

    /// Builds a fresh index of every row of `t` (any old files of that directory go first).
    fn fts_build(&self, t: &TableSnapshot, entry: &FtsEntry, lsn: u64) -> Result<FtsIndex> {
        let tokenizer: Tokenizer = entry.tokenizer.parse().map_err(fts_err(&t.name))?;
        let (pos, names) = indexed_columns(t, entry)?;
        let location = self.fts_location(t.id, entry.dir_id);
        if let Location::Dir(dir) = &location {
            owned::remove_index_dir(self.vfs.as_ref(), dir)?;
        }
        // The rows go to the index column-wise in the scan's batches; tantivy segments are
        // written from them directly (a share of the rows per segment, by background threads
        // while the scan goes on), then committed once.
        let mut build = FtsIndex::bulk(&location, &names, tokenizer).map_err(fts_err(&t.name))?;
        build.expect_rows(t.count());
        let mut projection = vec![0];
        projection.extend(&pos);
        let snap = Arc::new(super::clone_table(t));
        for batch in snap.scan(&projection)? {
            let batch = batch?;
            let ids = batch.column(0).as_primitive::<arrow_array::types::UInt64Type>();
            let cols = text_columns(&batch)?;
            let valid: Vec<Option<Vec<bool>>> =
                cols.iter().map(|c| c.nulls().map(|n| n.iter().collect())).collect();
            let views: Vec<TextColumn<'_>> = cols
                .iter()
                .zip(&valid)
                .map(|(c, v)| TextColumn {
                    data: c.value_data(),
                    offsets: c.value_offsets(),
                    valid: v.as_deref(),
                })
                .collect();
            build.add_batch(ids.values(), &views).map_err(fts_err(&t.name))?;
        }
        let index =
            build.finish(Payload { lsn, next_row_id: t.next_row_id }).map_err(fts_err(&t.name))?;
        if let Location::Dir(dir) = &location {
            self.vfs.sync_dir(dir.parent().unwrap_or(dir))?;
        }
        Ok(index)
    }

    /// Creates the full-text index of `table` over `columns` (text columns) and indexes
    /// every existing row before returning. Writers wait meanwhile; readers do not.
    pub fn create_fts_index(&self, table: &str, columns: &[&str], tokenizer: &str) -> Result<()> {
        self.check_writable()?;
        let tok: Tokenizer = tokenizer.parse().map_err(fts_err(table))?;
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let t = head.table(table)?.clone();
        if t.fts.is_some() {
            return Err(Error::InvalidInput {
                table: table.into(),
                reason: "the table already has a full-text index (drop it first)".into(),
            });
        }
        if columns.is_empty() {
            return Err(Error::InvalidInput {
                table: table.into(),
                reason: "a full-text index needs at least one column".into(),
            });
        }
        let full = t.schema.full_schema();
        let mut ids = Vec::with_capacity(columns.len());
        for (p, c) in t.resolve(columns)?.into_iter().zip(columns) {
            let f = full.field(p);
            if !matches!(f.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
                || p == 0
            {
                return Err(Error::InvalidInput {
                    table: table.into(),
                    reason: format!(
                        "column '{c}' is {} — a full-text index takes text columns",
                        f.data_type()
                    ),
                });
            }
            let id = t.schema.column_id_at(p);
            if ids.contains(&id) {
                return Err(Error::InvalidInput {
                    table: table.into(),
                    reason: format!("column '{c}' is listed twice"),
                });
            }
            ids.push(id);
        }
        let entry = FtsEntry {
            dir_id: self.next_segment_id.fetch_add(1, Ordering::AcqRel),
            tokenizer: tok.name().to_string(),
            columns: ids,
        };
        let dir = manifest::table_dir(&self.root, t.id);
        if !self.vfs.exists(&dir) {
            self.vfs.create_dir_all(&dir)?;
            self.vfs.sync_dir(&self.root)?;
        }
        let index = self.fts_build(&t, &entry, head.lsn)?;
        let mut next = (**head).clone();
        let mut nt = super::clone_table(&t);
        nt.fts = Some(Arc::new(entry.clone()));
        next.tables.insert(nt.name.clone(), Arc::new(nt));
        if let Err(e) = self.install(&mut head, next, false) {
            drop(index);
            if let Location::Dir(d) = self.fts_location(t.id, entry.dir_id) {
                let _ = owned::remove_index_dir(self.vfs.as_ref(), &d);
            }
            return Err(e);
        }
        self.fts_register(&t, entry, index, head.lsn, head.version);
        Ok(())
    }

    fn fts_register(
        &self,
        t: &TableSnapshot,
        entry: FtsEntry,
        index: FtsIndex,
        lsn: u64,
        version: u64,
    ) {
        let marker = self.fts_marker(t.id, entry.dir_id);
        let h = Handle {
            table_id: t.id,
            entry,
            index,
            pending: Mutex::new(Pending {
                fresh_from: t.next_row_id,
                committed: Payload { lsn, next_row_id: t.next_row_id },
                durable_lsn: lsn,
                indexed_version: version,
                ..Pending::default()
            }),
            refresh: Mutex::new(()),
            marker,
            writable: !self.opts.read_only,
        };
        self.fts.handles.write().insert(t.id, Arc::new(h));
    }

    /// Drops the full-text index of `table` and deletes its files.
    pub fn drop_fts_index(&self, table: &str) -> Result<()> {
        self.check_writable()?;
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let t = head.table(table)?.clone();
        let Some(entry) = t.fts.clone() else {
            return Err(Error::InvalidInput {
                table: table.into(),
                reason: "the table has no full-text index".into(),
            });
        };
        let mut next = (**head).clone();
        let mut nt = super::clone_table(&t);
        nt.fts = None;
        next.tables.insert(nt.name.clone(), Arc::new(nt));
        self.install(&mut head, next, false)?;
        self.fts.forget(t.id);
        // Garbage now; the next writer open removes what this misses.
        let dir = manifest::fts_dir(&self.root, t.id, entry.dir_id);
        let _ = owned::remove_index_dir(self.vfs.as_ref(), &dir);
        for m in [self.fts_marker(t.id, entry.dir_id), self.fts_lazy_marker(t.id, entry.dir_id)]
            .into_iter()
            .flatten()
        {
            let _ = self.vfs.remove_file(&m);
        }
        Ok(())
    }

    /// The definition of `table`'s full-text index: column names and tokenizer name.
    pub fn fts_definition(
        &self,
        snap: &DbSnapshot,
        table: &str,
    ) -> Result<Option<(Vec<String>, String)>> {
        let t = snap.table(table)?;
        let Some(entry) = &t.fts else { return Ok(None) };
        let (_, names) = indexed_columns(t, entry)?;
        Ok(Some((names, entry.tokenizer.clone())))
    }

    /// Records, under the head lock and before the commit is published, which ids of
    /// indexed tables a commit changes. `version` is the state version that includes it;
    /// `logged` says whether the commit is in the log.
    pub(crate) fn fts_mark(
        &self,
        version: u64,
        ops: &[Op],
        bulk: &[(u64, super::IdRange)],
        logged: bool,
    ) -> Result<()> {
        if self.fts.handles.read().is_empty() {
            return Ok(());
        }
        let mut by_table: BTreeMap<u64, (Vec<u64>, bool)> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Insert { table_id, batch } => {
                    if self.fts.get(*table_id).is_none() {
                        continue;
                    }
                    let e = by_table.entry(*table_id).or_default();
                    if let Some(ids) = batch.column(0).as_any().downcast_ref::<UInt64Array>() {
                        e.0.extend(ids.values().iter().copied());
                    }
                }
                Op::Delete { table_id, ids } => {
                    if self.fts.get(*table_id).is_none() {
                        continue;
                    }
                    let e = by_table.entry(*table_id).or_default();
                    e.0.extend(ids.iter().copied());
                    e.1 = true;
                }
            }
        }
        for (table_id, range) in bulk {
            if self.fts.get(*table_id).is_some() {
                by_table.entry(*table_id).or_default().0.extend(range.ids());
            }
        }
        for (table_id, (ids, deletes)) in by_table {
            let Some(h) = self.fts.get(table_id) else { continue };
            let mut p = h.pending.lock();
            if deletes && !logged {
                if p.unlogged.is_none()
                    && let Some(m) = &h.marker
                {
                    self.vfs.write_file(m, &[b"unclean"], true)?;
                    if let Some(dir) = m.parent() {
                        self.vfs.sync_dir(dir)?;
                    }
                }
                p.unlogged = Some(version);
            }
            p.marks.push((version, ids));
        }
        Ok(())
    }

    /// Brings one index up to the published state (see the module docs). With `force`, an
    /// index without changes still commits when the log moved, so the log can be trimmed.
    fn fts_refresh(&self, h: &Handle, force: bool) -> Result<()> {
        if !h.writable {
            return Ok(());
        }
        let _r = h.refresh.lock();
        let snap = self.snapshot();
        let Some(t) = snap.table_by_id(h.table_id) else { return Ok(()) };
        let (mut ids, fresh_from) = {
            let mut p = h.pending.lock();
            let mut ids = Vec::new();
            p.marks.retain_mut(|(v, marked)| {
                if *v <= snap.version {
                    ids.append(marked);
                    false
                } else {
                    true
                }
            });
            if ids.is_empty() && !(force && (snap.lsn > p.committed.lsn || p.unsynced)) {
                if p.marks.is_empty() {
                    p.indexed_version = p.indexed_version.max(snap.version);
                }
                return Ok(());
            }
            (ids, p.fresh_from)
        };
        ids.sort_unstable();
        ids.dedup();
        let payload = Payload { lsn: snap.lsn, next_row_id: t.next_row_id };
        // A search's refresh commits without syncing (a power failure may tear its files:
        // the `.lazy` marker, synced first, makes the next open check them); a flush's
        // refresh syncs everything, and only it moves the log retention and clears markers.
        let lazy_marker = self.fts_lazy_marker(h.table_id, h.entry.dir_id);
        if !force && !h.pending.lock().unsynced {
            if let Some(m) = &lazy_marker {
                self.vfs.write_file(m, &[b"unsynced"], true)?;
                if let Some(dir) = m.parent() {
                    self.vfs.sync_dir(dir)?;
                }
            }
            h.pending.lock().unsynced = true;
        }
        let applied = (|| {
            let (pos, _) = indexed_columns(t, &h.entry)?;
            h.index
                .delete_many(ids.iter().copied().filter(|&id| id < fresh_from))
                .map_err(fts_err(&t.name))?;
            let mut projection = vec![0];
            projection.extend(&pos);
            for chunk in ids.chunks(64 * 1024) {
                let rows = t.get_many(chunk, &projection)?;
                add_batch(&h.index, &t.name, &rows)?;
            }
            if force {
                h.index.commit(payload).map_err(fts_err(&t.name))
            } else {
                h.index.commit_unsynced(payload).map_err(fts_err(&t.name))
            }
        })();
        if let Err(e) = applied {
            // Nothing of this attempt stays queued, and its ids wait for the next one.
            let _ = h.index.rollback();
            h.pending.lock().marks.push((0, ids));
            return Err(e);
        }
        let installed = self.fts.installed.load(Ordering::Acquire);
        let mut p = h.pending.lock();
        p.committed = payload;
        p.fresh_from = p.fresh_from.max(t.next_row_id);
        if p.marks.is_empty() {
            p.indexed_version = snap.version;
        }
        if !force {
            return Ok(());
        }
        p.durable_lsn = payload.lsn;
        if p.unsynced {
            if let Some(m) = &lazy_marker {
                self.vfs.remove_file(m)?;
            }
            p.unsynced = false;
        }
        if let Some(u) = p.unlogged
            && u <= snap.version
            && u <= installed
        {
            if let Some(m) = &h.marker {
                self.vfs.remove_file(m)?;
            }
            p.unlogged = None;
        }
        Ok(())
    }

    /// Refreshes every index (after a flush; see [`Store::fts_refresh`]).
    pub(crate) fn fts_refresh_all(&self) -> Result<()> {
        for h in self.fts.all() {
            self.fts_refresh(&h, true)?;
        }
        Ok(())
    }

    /// Opens the index of every table that has one, rebuilding or catching up as the
    /// module docs describe (`rebuild`: rebuild every one, as after a restore).
    pub(crate) fn fts_open_all(&self, rebuild: bool) -> Result<()> {
        self.fts_open_tables(|_| rebuild)
    }

    /// Like [`Store::fts_open_all`], rebuilding the indexes of the tables (by id) for which
    /// `rebuild` says so.
    pub(crate) fn fts_open_tables(&self, rebuild: impl Fn(u64) -> bool) -> Result<()> {
        self.fts.handles.write().clear();
        self.fts.unusable.write().clear();
        let snap = self.head_snapshot();
        for t in snap.tables.values() {
            let Some(entry) = t.fts.as_deref().cloned() else { continue };
            if self.opts.read_only {
                // Searched as last committed; a read-only handle cannot catch up, nor
                // rebuild a damaged index: full-text queries then say why, nothing else
                // about the table is affected.
                let Location::Dir(dir) = self.fts_location(t.id, entry.dir_id) else { continue };
                let opened = entry
                    .tokenizer
                    .parse::<Tokenizer>()
                    .map_err(|e| e.to_string())
                    .and_then(|tok| {
                        let (_, names) = indexed_columns(t, &entry).map_err(|e| e.to_string())?;
                        FtsIndex::open(&dir, &names, tok, false).map_err(|e| e.to_string())
                    });
                match opened {
                    Ok(index) => {
                        let lsn = index.payload().ok().flatten().unwrap_or_default().lsn;
                        self.fts_register(t, entry, index, lsn, 0);
                    }
                    Err(why) => {
                        self.fts.unusable.write().insert(t.id, why);
                    }
                }
                continue;
            }
            self.fts_open_one(t, &snap, entry, rebuild(t.id))?;
        }
        Ok(())
    }

    fn fts_open_one(
        &self,
        t: &TableSnapshot,
        snap: &DbSnapshot,
        entry: FtsEntry,
        rebuild: bool,
    ) -> Result<()> {
        let marker = self.fts_marker(t.id, entry.dir_id);
        let unclean = marker.as_ref().is_some_and(|m| self.vfs.exists(m));
        let lazy_marker = self.fts_lazy_marker(t.id, entry.dir_id);
        let unsynced = lazy_marker.as_ref().is_some_and(|m| self.vfs.exists(m));
        let tok: Tokenizer = entry.tokenizer.parse().map_err(fts_err(&t.name))?;
        let (_, names) = indexed_columns(t, &entry)?;
        let opened = match self.fts_location(t.id, entry.dir_id) {
            Location::Dir(dir) if !rebuild && !unclean => {
                FtsIndex::open(&dir, &names, tok, true)
                    .ok()
                    // Unsynced commits may have been torn by a power failure.
                    .filter(|ix| !unsynced || ix.files_intact())
                    .and_then(|ix| match ix.payload() {
                        Ok(Some(p)) if p.lsn <= snap.lsn && p.next_row_id <= t.next_row_id => {
                            Some((ix, p))
                        }
                        _ => None,
                    })
            }
            _ => None,
        };
        let Some((index, payload)) = opened else {
            self.fts.rebuilds.fetch_add(1, Ordering::Relaxed);
            let index = self.fts_build(t, &entry, snap.lsn)?;
            for m in [&marker, &lazy_marker].into_iter().flatten() {
                self.vfs.remove_file(m)?;
            }
            self.fts_register(t, entry, index, snap.lsn, snap.version);
            return Ok(());
        };
        // Catch up: logged changes after the payload, and every row the payload's counter
        // had not reached.
        self.fts.catch_ups.fetch_add(1, Ordering::Relaxed);
        let mut ids: Vec<u64> = (payload.next_row_id..t.next_row_id).collect();
        let schemas: BTreeMap<u64, arrow_schema::SchemaRef> =
            snap.tables.values().map(|t| (t.id, t.schema.full_schema().clone())).collect();
        let schema_of = |id: u64| schemas.get(&id).cloned();
        wal::replay(
            self.vfs.as_ref(),
            &self.root.join(WAL_DIR),
            payload.lsn,
            false,
            &schema_of,
            |_, rec| {
                for op in rec.ops {
                    match op {
                        Op::Insert { table_id, batch } if table_id == t.id => {
                            if let Some(a) = batch.column(0).as_any().downcast_ref::<UInt64Array>()
                            {
                                ids.extend(a.values().iter().copied());
                            }
                        }
                        Op::Delete { table_id, ids: d } if table_id == t.id => ids.extend(d),
                        _ => {}
                    }
                }
                Ok(())
            },
        )?;
        let table_id = t.id;
        self.fts_register(t, entry, index, payload.lsn, 0);
        if let Some(h) = self.fts.get(table_id) {
            {
                let mut p = h.pending.lock();
                p.fresh_from = payload.next_row_id;
                p.committed = payload;
                p.unsynced = unsynced;
                if !ids.is_empty() {
                    p.marks.push((0, ids));
                }
            }
            self.fts_refresh(&h, true)?;
        }
        Ok(())
    }

    /// Full-text search of `table` as `view` sees it: BM25 hits (`_id`, score), best first,
    /// ties by `_id`; `column` restricts unqualified terms to one indexed column; `limit`
    /// bounds the hits (`None`: every match). The index first catches up with every commit
    /// published so far (read-your-writes). Hits are rows live in the view. The index holds
    /// committed rows only, so when the view is older than the index a row's text is
    /// matched as it is in the newest state, and a transaction's own uncommitted inserts and
    /// updates are not searched (its deletes are honoured).
    pub fn search_text(
        &self,
        view: &ReadView,
        table: &str,
        column: Option<&str>,
        query: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Hit>> {
        let snap = view.base();
        let t = &view.table(table)?;
        if t.fts.is_none() {
            return Err(Error::InvalidInput {
                table: table.into(),
                reason: "the table has no full-text index (CREATE FTS INDEX ON t (columns))".into(),
            });
        }
        let h = self.fts.get(t.id).ok_or_else(|| Error::InvalidInput {
            table: table.into(),
            reason: match self.fts.unusable.read().get(&t.id) {
                Some(why) => format!(
                    "the full-text index cannot be used by this read-only handle ({why}); \
                     opening the database for writing rebuilds it from the table"
                ),
                None => "the full-text index is not open here (a checkpoint view)".into(),
            },
        })?;
        self.fts_refresh(&h, false)?;
        if !h.writable {
            h.index.reload().map_err(fts_err(table))?;
        }
        let exact = {
            let p = h.pending.lock();
            h.writable
                && p.marks.is_empty()
                && p.indexed_version == snap.version
                && !view.has_own_writes(table)
        };
        // Columns may have been renamed since the index was opened.
        let (_, names) = indexed_columns(t, &h.entry)?;
        if names != h.index.columns() {
            h.index.set_column_names(names.clone()).map_err(fts_err(table))?;
        }
        if let Some(c) = column
            && !names.iter().any(|n| n == c)
        {
            return Err(Error::InvalidInput {
                table: table.into(),
                reason: format!("column '{c}' is not in the full-text index"),
            });
        }
        let want = if exact { limit } else { None };
        let mut hits = match column {
            None => h.index.search(query, want),
            Some(c) => h.index.search_column(c, query, want),
        }
        .map_err(fts_err(table))?;
        if !exact {
            let mut keep = Vec::with_capacity(hits.len());
            for hit in hits {
                if t.locate(hit.id)?.is_some() {
                    keep.push(hit);
                }
            }
            hits = keep;
            if let Some(k) = limit {
                hits.truncate(k);
            }
        }
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};
    use std::path::Path;
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use std::sync::atomic::Ordering;

    use crate::io::{MemFs, OsFs, Vfs};
    use crate::store::ReadView;
    use crate::store::{Store, StoreOptions};
    use crate::wal::Durability;
    use crate::{Error, Tokenizer};

    const WORDS: &[&str] = &["red", "Blue", "green", "paris", "ROME", "shoe", "car", "tea"];

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("name", DataType::Utf8, true),
            Field::new("city", DataType::Utf8, true),
            Field::new("n", DataType::Int64, true),
        ])
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn text(&mut self) -> Option<String> {
            if self.below(8) == 0 {
                return None;
            }
            let n = 1 + self.below(3);
            Some(
                (0..n)
                    .map(|_| WORDS[self.below(WORDS.len() as u64) as usize])
                    .collect::<Vec<_>>()
                    .join(" "),
            )
        }
    }

    type Model = BTreeMap<u64, [Option<String>; 2]>;

    fn batch(rows: &[[Option<String>; 2]]) -> RecordBatch {
        RecordBatch::try_new(
            Arc::new(schema()),
            vec![
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r[0].clone()))),
                Arc::new(StringArray::from_iter(rows.iter().map(|r| r[1].clone()))),
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|_| 1))),
            ],
        )
        .unwrap()
    }

    fn names_batch(names: &[Option<String>]) -> RecordBatch {
        let s = Schema::new(vec![Field::new("name", DataType::Utf8, true)]);
        RecordBatch::try_new(Arc::new(s), vec![Arc::new(StringArray::from_iter(names.to_vec()))])
            .unwrap()
    }

    fn expected(model: &Model, word: &str, col: Option<usize>) -> BTreeSet<u64> {
        let w = word.to_lowercase();
        model
            .iter()
            .filter(|(_, texts)| {
                texts.iter().enumerate().filter(|(i, _)| col.is_none_or(|c| c == *i)).any(
                    |(_, t)| {
                        t.as_deref()
                            .is_some_and(|t| Tokenizer::Default.tokens(t).unwrap().contains(&w))
                    },
                )
            })
            .map(|(id, _)| *id)
            .collect()
    }

    fn view(s: &Store) -> ReadView {
        ReadView::Committed(s.snapshot())
    }

    fn found(s: &Store, word: &str, col: Option<&str>) -> BTreeSet<u64> {
        s.search_text(&view(s), "t", col, word, None).unwrap().iter().map(|h| h.id).collect()
    }

    fn check(s: &Store, model: &Model, rng: &mut Rng, step: usize) {
        let w = WORDS[rng.below(WORDS.len() as u64) as usize];
        assert_eq!(found(s, w, None), expected(model, w, None), "step {step}: {w}");
        assert_eq!(found(s, w, Some("city")), expected(model, w, Some(1)), "step {step}: city {w}");
        let v = view(s);
        let all = s.search_text(&v, "t", None, w, None).unwrap();
        let top = s.search_text(&v, "t", None, w, Some(3)).unwrap();
        assert_eq!(top, all[..all.len().min(3)], "step {step}");
    }

    fn opts() -> StoreOptions {
        // Small thresholds so that bulk inserts and full-memtable flushes happen.
        StoreOptions {
            bulk_insert_rows: 30,
            memtable_flush_rows: 60,
            auto_compact: false,
            ..StoreOptions::default()
        }
    }

    /// Random inserts (buffered, logged, bulk), updates, deletes, flushes, reopens and
    /// simulated crashes; after each step the index finds exactly what a reference matcher
    /// over the model finds.
    fn random_history(vfs: Arc<dyn Vfs>, root: &Path, seed: u64) -> (u64, u64) {
        let (mut rebuilds, mut catch_ups) = (0, 0);
        let open = || Store::open(vfs.clone(), root, root, opts()).unwrap();
        let mut rng = Rng(seed);
        let mut s = open();
        s.create_table("t", &schema()).unwrap();
        let mut model = Model::new();
        let first: Vec<[Option<String>; 2]> = (0..40).map(|_| [rng.text(), rng.text()]).collect();
        let r = s.insert("t", &[batch(&first)]).unwrap();
        for (id, row) in r.ids().zip(first) {
            model.insert(id, row);
        }
        assert!(matches!(
            s.create_fts_index("t", &["name", "n"], "default"),
            Err(Error::InvalidInput { .. })
        ));
        assert!(matches!(s.create_fts_index("t", &["name"], "klingon"), Err(Error::Fts { .. })));
        s.create_fts_index("t", &["name", "city"], "default").unwrap();
        assert!(matches!(
            s.create_fts_index("t", &["name"], "default"),
            Err(Error::InvalidInput { .. })
        ));
        for step in 0..120 {
            let durability = [Durability::Buffered, Durability::ProcessSafe, Durability::PowerSafe]
                [rng.below(3) as usize];
            match rng.below(10) {
                0..=2 => {
                    let n = if rng.below(6) == 0 { 35 } else { 1 + rng.below(4) as usize };
                    let rows: Vec<[Option<String>; 2]> =
                        (0..n).map(|_| [rng.text(), rng.text()]).collect();
                    let r = s.insert_with("t", &[batch(&rows)], durability).unwrap();
                    for (id, row) in r.ids().zip(rows) {
                        model.insert(id, row);
                    }
                }
                3 | 4 => {
                    let ids: Vec<u64> = model.keys().copied().collect();
                    if ids.is_empty() {
                        continue;
                    }
                    let pick: Vec<u64> = (0..1 + rng.below(3))
                        .map(|_| ids[rng.below(ids.len() as u64) as usize])
                        .collect::<BTreeSet<_>>()
                        .into_iter()
                        .collect();
                    let names: Vec<Option<String>> = pick.iter().map(|_| rng.text()).collect();
                    s.update_with("t", &pick, &names_batch(&names), durability).unwrap();
                    for (id, name) in pick.iter().zip(names) {
                        model.get_mut(id).unwrap()[0] = name;
                    }
                }
                5 => {
                    let ids: Vec<u64> = model.keys().copied().collect();
                    if ids.is_empty() {
                        continue;
                    }
                    let id = ids[rng.below(ids.len() as u64) as usize];
                    s.delete_with("t", &[id], durability).unwrap();
                    model.remove(&id);
                }
                6 => s.flush().unwrap(),
                7 => {
                    s.close().unwrap();
                    drop(s);
                    s = open();
                    rebuilds += s.fts.rebuilds.load(Ordering::Relaxed);
                    catch_ups += s.fts.catch_ups.load(Ordering::Relaxed);
                }
                8 => {
                    // A killed process: nothing flushed, the index writer's uncommitted work
                    // lost. Buffered commits since the last flush are lost with it; rebuild
                    // the model from what survived.
                    s.fts.handles_clear();
                    *s.lock.lock() = None;
                    std::mem::forget(s);
                    s = open();
                    rebuilds += s.fts.rebuilds.load(Ordering::Relaxed);
                    catch_ups += s.fts.catch_ups.load(Ordering::Relaxed);
                    let snap = s.snapshot();
                    let t = snap.table("t").unwrap();
                    let proj = t.resolve(&["_id", "name", "city"]).unwrap();
                    model.clear();
                    for b in t.clone().scan(&proj).unwrap() {
                        let b = b.unwrap();
                        let ids = b.column(0).as_any().downcast_ref::<arrow_array::UInt64Array>();
                        let (ids, names, cities) = (
                            ids.unwrap(),
                            b.column(1).as_any().downcast_ref::<StringArray>().unwrap(),
                            b.column(2).as_any().downcast_ref::<StringArray>().unwrap(),
                        );
                        for r in 0..b.num_rows() {
                            let get =
                                |a: &StringArray| (!a.is_null(r)).then(|| a.value(r).to_string());
                            model.insert(ids.value(r), [get(names), get(cities)]);
                        }
                    }
                }
                _ => {}
            }
            check(&s, &model, &mut rng, step);
        }
        // Dropping the column under the index is refused; renaming keeps the index.
        assert!(matches!(
            s.alter_table("t", &crate::store::AlterColumn::Drop("city".into())),
            Err(Error::InvalidInput { .. })
        ));
        s.alter_table(
            "t",
            &crate::store::AlterColumn::Rename { from: "city".into(), to: "town".into() },
        )
        .unwrap();
        let town = |q: &str, col| -> BTreeSet<u64> {
            s.search_text(&view(&s), "t", col, q, None).unwrap().iter().map(|h| h.id).collect()
        };
        assert_eq!(town("town:paris", None), expected(&model, "paris", Some(1)));
        assert_eq!(town("paris", Some("town")), expected(&model, "paris", Some(1)));
        assert!(matches!(
            s.search_text(&view(&s), "t", Some("city"), "paris", None),
            Err(Error::InvalidInput { .. })
        ));
        s.drop_fts_index("t").unwrap();
        assert!(matches!(
            s.search_text(&view(&s), "t", None, "red", None),
            Err(Error::InvalidInput { .. })
        ));
        s.alter_table("t", &crate::store::AlterColumn::Drop("town".into())).unwrap();
        (rebuilds, catch_ups)
    }

    use arrow_array::Array;

    /// A search after writes commits the index without syncing; files such a commit left
    /// torn (as a power failure can) are detected at the next open, which rebuilds; a flush
    /// syncs and clears the marker.
    #[test]
    fn torn_unsynced_index_commits_are_detected_and_rebuilt() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Store::open(Arc::new(OsFs), dir.path(), dir.path(), opts()).unwrap();
        let s = open();
        s.create_table("t", &schema()).unwrap();
        let row = |a: &str| [Some(a.to_string()), Some("rome".to_string())];
        s.insert("t", &[batch(&[row("red car"), row("blue tea")])]).unwrap();
        s.create_fts_index("t", &["name", "city"], "default").unwrap();
        let entry = s.snapshot().table("t").unwrap().fts.clone().unwrap();
        let fts_dir = crate::manifest::fts_dir(dir.path(), 1, entry.dir_id);
        let lazy =
            crate::manifest::table_dir(dir.path(), 1).join(format!("fts-{}.lazy", entry.dir_id));
        let files = |d: &Path| -> BTreeSet<String> {
            std::fs::read_dir(d)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        };
        // Unsynced commit, then a flush syncs it and removes the marker.
        s.insert("t", &[batch(&[row("red fox")])]).unwrap();
        assert_eq!(found(&s, "red", None), BTreeSet::from([1, 3]));
        assert!(lazy.exists());
        s.flush().unwrap();
        assert!(!lazy.exists(), "a flush syncs the index");
        // Another unsynced commit; then its new files are torn and the process dies.
        let before = files(&fts_dir);
        s.insert("t", &[batch(&[row("red hat")])]).unwrap();
        assert_eq!(found(&s, "red", None), BTreeSet::from([1, 3, 4]));
        assert!(lazy.exists());
        let torn: Vec<String> = files(&fts_dir).difference(&before).cloned().collect();
        assert!(!torn.is_empty());
        for f in &torn {
            let p = fts_dir.join(f);
            let len = std::fs::metadata(&p).unwrap().len();
            std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(len / 2).unwrap();
        }
        s.fts.handles_clear();
        *s.lock.lock() = None;
        std::mem::forget(s);
        let s = open();
        assert_eq!(s.fts.rebuilds.load(Ordering::Relaxed), 1, "torn files are detected");
        assert_eq!(found(&s, "red", None), BTreeSet::from([1, 3, 4]));
        assert!(!lazy.exists());
        // Without damage, an unsynced commit is caught up from (no rebuild).
        s.insert("t", &[batch(&[row("red cup")])]).unwrap();
        assert_eq!(found(&s, "red", None), BTreeSet::from([1, 3, 4, 5]));
        s.fts.handles_clear();
        *s.lock.lock() = None;
        std::mem::forget(s);
        let s = open();
        assert_eq!(s.fts.rebuilds.load(Ordering::Relaxed), 0);
        assert_eq!(s.fts.catch_ups.load(Ordering::Relaxed), 1);
        assert_eq!(found(&s, "red", None), BTreeSet::from([1, 3, 4, 5]));
        // Leftovers of other index generations (a crash during a drop) go at the next open,
        // markers and directories alike; the current index's files stay.
        s.close().unwrap();
        drop(s);
        let tdir = crate::manifest::table_dir(dir.path(), 1);
        std::fs::write(tdir.join("fts-999.lazy"), b"x").unwrap();
        std::fs::write(tdir.join("fts-999.unclean"), b"x").unwrap();
        std::fs::create_dir_all(tdir.join("fts-998")).unwrap();
        std::fs::write(tdir.join("fts-998").join("meta.json"), b"{}").unwrap();
        let s = open();
        let left = files(&tdir);
        assert!(left.iter().all(|f| !f.contains("999") && !f.contains("998")), "{left:?}");
        assert!(left.contains(&format!("fts-{}", entry.dir_id)));
        assert_eq!(found(&s, "red", None), BTreeSet::from([1, 3, 4, 5]));
    }

    /// Copies the files of a database directory tree.
    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            if e.file_type().unwrap().is_dir() {
                copy_dir(&e.path(), &to.join(e.file_name()));
            } else {
                std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
            }
        }
    }

    /// Flips bytes in, truncates and deletes every file of a full-text index: a writer open
    /// rebuilds the index and answers as the intact database does; a read-only open
    /// answers every query but full-text ones, which either answer as the intact database
    /// or say the index is unusable. Never a panic, never a different answer.
    #[test]
    fn damaged_index_files_are_rebuilt_by_writers_and_refused_by_readers() {
        let dir = tempfile::tempdir().unwrap();
        let intact = dir.path().join("intact");
        let mut rng = Rng(5);
        {
            let s = Store::open(Arc::new(OsFs), &intact, &intact, opts()).unwrap();
            s.create_table("t", &schema()).unwrap();
            for _ in 0..4 {
                let rows: Vec<_> = (0..50).map(|_| [rng.text(), rng.text()]).collect();
                s.insert("t", &[batch(&rows)]).unwrap();
            }
            s.create_fts_index("t", &["name", "city"], "default").unwrap();
            s.delete("t", &[3, 17, 60]).unwrap(); // a delete bitset in the index too
            let _ = found(&s, "red", None);
            s.close().unwrap();
        }
        let answers = |s: &Store| -> Vec<Result<BTreeSet<u64>, String>> {
            ["red", "paris", "tea"]
                .iter()
                .map(|w| {
                    s.search_text(&view(s), "t", None, w, None)
                        .map(|h| h.iter().map(|h| h.id).collect())
                        .map_err(|e| e.to_string())
                })
                .collect()
        };
        let want = {
            let s = Store::open(Arc::new(OsFs), &intact, &intact, opts()).unwrap();
            answers(&s)
        };
        assert!(want.iter().all(|a| a.as_ref().is_ok_and(|ids| !ids.is_empty())));
        let entry = {
            let s = Store::open(
                Arc::new(OsFs),
                &intact,
                &intact,
                StoreOptions { read_only: true, ..opts() },
            )
            .unwrap();
            s.snapshot().table("t").unwrap().fts.clone().unwrap()
        };
        let rel = Path::new("t1").join(format!("fts-{}", entry.dir_id));
        let mut names: Vec<String> = std::fs::read_dir(intact.join(&rel))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| !n.ends_with(".lock"))
            .collect();
        names.sort();
        assert!(names.iter().any(|n| n.ends_with(".term")) && names.contains(&"meta.json".into()));
        let (mut cases, mut refused, mut same) = (0, 0, 0);
        for name in &names {
            let bytes = std::fs::read(intact.join(&rel).join(name)).unwrap();
            let mut damages: Vec<Option<Vec<u8>>> =
                vec![None, Some(bytes[..bytes.len() / 2].to_vec())];
            for k in 0..12 {
                let mut b = bytes.clone();
                if b.is_empty() {
                    break;
                }
                let at = (k * 7919 + rng.below(97) as usize) % b.len();
                b[at] ^= 1 << (k % 8);
                damages.push(Some(b));
            }
            for damage in damages {
                cases += 1;
                let case = dir.path().join(format!("case{cases}"));
                copy_dir(&intact, &case);
                let file = case.join(&rel).join(name);
                match &damage {
                    None => std::fs::remove_file(&file).unwrap(),
                    Some(b) => std::fs::write(&file, b).unwrap(),
                }
                let ro = Store::open(
                    Arc::new(OsFs),
                    &case,
                    &case,
                    StoreOptions { read_only: true, ..opts() },
                )
                .unwrap_or_else(|e| panic!("{name}: read-only open failed: {e}"));
                assert_eq!(ro.snapshot().table("t").unwrap().count(), 197);
                for (got, want) in answers(&ro).into_iter().zip(&want) {
                    match got {
                        Ok(ids) => {
                            assert_eq!(Ok(&ids), want.as_ref(), "{name}: a different answer");
                            same += 1;
                        }
                        Err(e) => {
                            assert!(e.contains("cannot be used"), "{name}: {e}");
                            refused += 1;
                        }
                    }
                }
                drop(ro);
                let w = Store::open(Arc::new(OsFs), &case, &case, opts())
                    .unwrap_or_else(|e| panic!("{name}: writer open failed: {e}"));
                assert_eq!(answers(&w), want, "{name}: the writer's answers");
                drop(w);
                std::fs::remove_dir_all(&case).unwrap();
            }
        }
        println!(
            "full-text damage sweep: {cases} cases over {} files; read-only queries: {refused} \
             refused, {same} answered as intact; 0 panics, 0 different answers",
            names.len()
        );
        assert!(refused > 0);
    }

    #[test]
    fn restore_rebuilds_the_index_for_the_restored_rows() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store::open(Arc::new(OsFs), dir.path(), dir.path(), opts()).unwrap();
        s.create_table("t", &schema()).unwrap();
        let row = |a: &str, b: &str| [Some(a.to_string()), Some(b.to_string())];
        s.insert("t", &[batch(&[row("red car", "paris"), row("blue tea", "rome")])]).unwrap();
        s.create_fts_index("t", &["name", "city"], "default").unwrap();
        s.checkpoint("before").unwrap();
        s.delete("t", &[1]).unwrap();
        s.insert("t", &[batch(&[row("red shoe", "oslo")])]).unwrap();
        assert_eq!(found(&s, "red", None), BTreeSet::from([3]));
        s.restore("before").unwrap();
        assert_eq!(found(&s, "red", None), BTreeSet::from([1]));
        assert_eq!(found(&s, "oslo", None), BTreeSet::new());
        s.insert("t", &[batch(&[row("red fox", "oslo")])]).unwrap();
        assert_eq!(found(&s, "red", None), BTreeSet::from([1, 4]), "ids are not reused");
        s.close().unwrap();
        drop(s);
        let s = Store::open(Arc::new(OsFs), dir.path(), dir.path(), opts()).unwrap();
        assert_eq!(found(&s, "red", None), BTreeSet::from([1, 4]));
        assert_eq!(s.fts.rebuilds.load(Ordering::Relaxed), 0, "reopened from its commit");
    }

    /// A table large enough for a bulk build in several background segments: the index
    /// finds what the reference matcher finds, upkeep reaches bulk-built rows, and a
    /// reopen trusts the build's commit.
    #[test]
    fn a_large_build_in_background_segments_is_exact_and_kept_up() {
        let dir = tempfile::tempdir().unwrap();
        let open = || Store::open(Arc::new(OsFs), dir.path(), dir.path(), opts()).unwrap();
        let s = open();
        s.create_table("t", &schema()).unwrap();
        let mut rng = Rng(5);
        let rows: Vec<[Option<String>; 2]> = (0..140_000)
            .map(|i| [rng.text().map(|t| format!("{t} w{}", i % 1000)), rng.text()])
            .collect();
        let r = s.insert("t", &[batch(&rows)]).unwrap();
        let mut model: Model = r.ids().zip(rows).collect();
        s.create_fts_index("t", &["name", "city"], "default").unwrap();
        for w in ["paris", "w17"] {
            assert_eq!(found(&s, w, None), expected(&model, w, None), "{w}");
        }
        s.delete("t", &[1, 2, 70_001]).unwrap();
        for id in [1, 2, 70_001] {
            model.remove(&id);
        }
        assert_eq!(found(&s, "w0", None), expected(&model, "w0", None));
        s.close().unwrap();
        drop(s);
        let s = open();
        assert_eq!(s.fts.rebuilds.load(Ordering::Relaxed), 0, "reopened from its commit");
        assert_eq!(found(&s, "w0", None), expected(&model, "w0", None));
        assert_eq!(found(&s, "rome", Some("city")), expected(&model, "rome", Some(1)));
    }

    #[test]
    fn index_follows_random_writes_in_memory() {
        for seed in [1, 7, 99] {
            let _ = random_history(Arc::new(MemFs::new()), Path::new("/db"), seed);
        }
    }

    #[test]
    fn index_follows_random_writes_on_disk() {
        let (mut rebuilds, mut catch_ups) = (0, 0);
        for seed in [3, 11] {
            let dir = tempfile::tempdir().unwrap();
            let (r, c) = random_history(Arc::new(OsFs), dir.path(), seed);
            rebuilds += r;
            catch_ups += c;
            // Only the table's own files remain after the index is dropped.
            for entry in std::fs::read_dir(dir.path()).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() && p.file_name().unwrap().to_string_lossy().starts_with('t') {
                    for f in std::fs::read_dir(&p).unwrap() {
                        let n = f.unwrap().file_name().to_string_lossy().to_string();
                        assert!(!n.starts_with("fts-"), "{n} left behind");
                    }
                }
            }
        }
        // Both recovery paths ran (in memory every open rebuilds).
        assert!(rebuilds > 0 && catch_ups > 0, "rebuilds {rebuilds}, catch-ups {catch_ups}");
        eprintln!("rebuilds {rebuilds}, catch-ups {catch_ups}");
    }
}
