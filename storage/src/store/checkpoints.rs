//! Named checkpoints (a manifest copy that pins its files), restore of the whole
//! database or of some tables, and removal of files no manifest or checkpoint names.
//!
//! What this module must not do: remove a file a checkpoint still pins.

use super::*;

impl Store {
    pub(super) fn checkpoint_dir(&self) -> PathBuf {
        self.root.join(CHECKPOINT_DIR)
    }

    /// The file of checkpoint `name`. A name is one file name: no path separators, not
    /// `.` / `..` or hidden, so a checkpoint can never be written or removed outside
    /// `checkpoints/`.
    pub(super) fn checkpoint_path(&self, name: &str) -> Result<PathBuf> {
        check_name(name)?;
        if name.contains(['/', '\\']) || name.starts_with('.') {
            return Err(Error::InvalidName {
                name: name.to_string(),
                reason: "checkpoint names must not contain '/' or '\\' or start with '.'",
            });
        }
        Ok(self.checkpoint_dir().join(format!("{name}.manifest")))
    }

    pub(super) fn load_checkpoint(&self, name: &str) -> Result<Manifest> {
        let p = self.checkpoint_path(name)?;
        if !self.vfs.exists(&p) {
            return Err(Error::InvalidInput {
                table: String::new(),
                reason: format!("no checkpoint '{name}'"),
            });
        }
        Manifest::decode(&self.vfs.read(&p)?, &p)
    }

    pub(super) fn reload_pins(&self) -> Result<()> {
        let mut pins = std::collections::BTreeSet::new();
        for name in self.list_checkpoints()? {
            let m = self.load_checkpoint(&name)?;
            pins.extend(manifest_files(&self.root, &m));
        }
        *self.pins.write() = pins;
        Ok(())
    }

    pub(super) fn is_pinned(&self, path: &Path) -> bool {
        self.pins.read().contains(path)
    }

    /// Deletes a file that became garbage unless a checkpoint pins it (best effort: the next
    /// writer open removes what this misses).
    pub(super) fn remove_garbage(&self, path: &Path) {
        if !self.is_pinned(path) {
            let _ = self.vfs.remove_file(path);
        }
    }

    /// Removes the files of the dropped table `t`. When the manifest names no file of `t`,
    /// there is nothing of it to remove: files it stopped naming went when they did (or
    /// stay pinned by a checkpoint), and what a failed write left is an orphan the next
    /// writer open removes, with the directory. So dropping a table that holds no files
    /// costs no file-system calls.
    pub(crate) fn remove_files_of(&self, t: &TableSnapshot) {
        if has_files(t) {
            self.remove_table_files(t.id);
        } else {
            self.fts.forget(t.id);
        }
    }

    pub(super) fn remove_table_files(&self, table_id: u64) {
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

    pub(super) fn restore_from(&self, name: &str, only: Option<&[&str]>) -> Result<()> {
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
}
