//! Opening a store: the directory check, the writer lock, loading the manifest (or
//! salvaging), replaying the log, removing what a crash left behind.
//!
//! What this module must not do: delete a file it cannot prove the database wrote (see
//! `crate::owned`).

use super::*;

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
            check_evaluator: RwLock::new(None),
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
    pub(super) fn lock_within(
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

    pub(super) fn load(
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
    pub(super) fn remove_orphans(&self) -> Result<()> {
        self.dispose_orphans(&|p| self.vfs.remove_file(p))
    }

    /// [`Store::remove_orphans`] with another way to dispose of each file (salvage moves
    /// them aside).
    pub(super) fn dispose_orphans(&self, dispose: &owned::Dispose<'_>) -> Result<()> {
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
}

/// Opens every segment (and delete file) a manifest names and builds the state it describes
/// (no log replay).
pub(super) fn state_from_manifest(
    vfs: &dyn Vfs,
    root: &Path,
    manifest: Manifest,
) -> Result<DbSnapshot> {
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
            indexes: t.indexes.into(),
            defaults: t.defaults.into(),
            checks: t.checks.into(),
            keys: None,
            read_keys: Arc::default(),
            estimates: Arc::default(),
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

/// Whether a manifest names files of `t` (segments, delete files, a full-text index).
pub(super) fn has_files(t: &TableSnapshot) -> bool {
    !t.segments.is_empty() || t.fts.is_some()
}

/// Files a manifest refers to.
pub(super) fn manifest_files(root: &Path, m: &Manifest) -> Vec<PathBuf> {
    m.tables.iter().flat_map(|t| t.segments.iter().flat_map(move |s| s.files(root, t.id))).collect()
}
