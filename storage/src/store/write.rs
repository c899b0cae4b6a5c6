//! Applying commits and moving data to segments: spilled transactions, the commit
//! path, flushes of memtables, compaction, close.
//!
//! What this module must not do: publish a state whose files are not written.

use super::*;

impl Store {
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
        let mut paths = self.spill_memtable(t)?;
        let seg = self.write_segment(t, rows)?;
        paths.push(seg.segment.path().to_path_buf());
        t.segments.push(seg);
        t.index = Arc::new(IdIndex::build(&t.segments));
        Ok(paths)
    }

    /// Writes the memtable's live rows of a transaction's private table copy to a segment
    /// (not yet in the manifest) and empties it. Returns the new file, if any.
    pub(crate) fn spill_memtable(&self, t: &mut TableSnapshot) -> Result<Vec<PathBuf>> {
        let mut paths = Vec::new();
        if !t.memtable.is_empty() {
            let mem = memtable_rows(t)?;
            if mem.iter().any(|b| b.num_rows() > 0) {
                let seg = self.write_segment(t, &mem)?;
                paths.push(seg.segment.path().to_path_buf());
                t.segments.push(seg);
            }
            t.memtable = Memtable::default();
            t.index = Arc::new(IdIndex::build(&t.segments));
        }
        Ok(paths)
    }

    /// Commits a transaction that changed the catalog: its state `next` (catalog and
    /// tables) becomes the head through one manifest install with every memtable written to
    /// segments, so its DDL and its rows become durable together or not at all.
    pub(crate) fn apply_catalog_commit(
        &self,
        next: DbSnapshot,
        ops: &[Op],
        bulk: &[(u64, IdRange)],
    ) -> Result<()> {
        let mut head = self.head.lock();
        self.fts_mark(head.version + 1, ops, bulk, false)?;
        self.flush_into(&mut head, next)
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

    pub(super) fn write_segment(
        &self,
        t: &TableSnapshot,
        batches: &[RecordBatch],
    ) -> Result<LiveSegment> {
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
    pub(super) fn flush_into(
        &self,
        head: &mut Arc<DbSnapshot>,
        mut next: DbSnapshot,
    ) -> Result<()> {
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

    pub(super) fn compact_locked(
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

/// The rows of `batches` (`_id` first) in ascending `_id` order: as they are when they
/// already are, else concatenated and sorted.
pub(super) fn sorted_by_id(
    schema: &SchemaRef,
    batches: Vec<RecordBatch>,
) -> Result<Vec<RecordBatch>> {
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
pub(super) fn compaction_runs(t: &TableSnapshot, force: bool) -> Vec<(usize, usize)> {
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

/// The memtable's live rows in `_id` order, as a segment receives them.
pub(super) fn memtable_rows(t: &TableSnapshot) -> Result<Vec<RecordBatch>> {
    Ok(t.memtable.sorted_live()?.into_iter().collect())
}
