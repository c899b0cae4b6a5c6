//! Installing states: publishing snapshots, manifest installs (synced or pending),
//! the catalog changes (create, rename, drop, alter, views) and the auto-commit write
//! calls that run one transaction each.
//!
//! What this module must not do: make a state visible before it is as durable as its
//! level requires.

use super::*;

impl Store {
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

    pub(super) fn writer(&self) -> Result<WriterToken> {
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

    pub(super) fn poison<T>(&self, r: Result<T>) -> Result<T> {
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
    pub(super) fn install(
        &self,
        head: &mut Arc<DbSnapshot>,
        next: DbSnapshot,
        absorbed: bool,
    ) -> Result<()> {
        self.install_as(head, next, absorbed, None)
    }

    /// Installs a catalog-only change `next` (no file written or removed) the way the store's
    /// durability asks: synced for a power-safe store, otherwise as a pending manifest (see
    /// the `manifest` module docs) that survives a killed process. `depends` names tables
    /// created or altered by the change: log records with their rows wait for a synced
    /// manifest.
    pub(super) fn install_catalog(
        &self,
        head: &mut Arc<DbSnapshot>,
        next: DbSnapshot,
        absorbed: bool,
        depends: &[u64],
    ) -> Result<()> {
        let pending = self.opts.durability != Durability::PowerSafe;
        self.install_as(head, next, absorbed, pending.then_some(depends))
    }

    pub(super) fn install_as(
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
    pub(super) fn pending_superseded(&self) {
        let mut p = self.pending.lock();
        p.active = false;
        p.tables.clear();
    }

    /// Makes pending catalog changes synced: `head`'s manifest (already written as the
    /// pending one) installed the normal way.
    pub(super) fn sync_catalog(&self, head: &DbSnapshot) -> Result<()> {
        if !self.pending.lock().active {
            return Ok(());
        }
        let m = head.to_manifest(head.manifest_version);
        self.poison(manifest::install(self.vfs.as_ref(), &self.root, &m))?;
        self.pending_superseded();
        Ok(())
    }

    /// Whether writing `ops` to the log must wait for pending catalog changes to be synced.
    pub(super) fn ops_need_synced_catalog(&self, ops: &[Op]) -> bool {
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
        self.create_table_named(name, schema, replace, &[], &[], &[])
    }

    /// [`Store::create_table_with`] with a primary key, unique keys and indexes (created
    /// with the table, in one catalog change). The primary key's columns become `NOT NULL`.
    pub fn create_table_with_keys(
        &self,
        name: &str,
        schema: &Schema,
        replace: bool,
        keys: &[keys::NewIndex],
    ) -> Result<()> {
        self.create_table_full(name, schema, replace, keys, &[], &[])
    }

    /// [`Store::create_table_with_keys`] with column defaults (column name and the SQL text
    /// of its default expression, kept as text; the SQL layer plans it) and CHECK
    /// constraints (see `checks`).
    pub fn create_table_full(
        &self,
        name: &str,
        schema: &Schema,
        replace: bool,
        keys: &[keys::NewIndex],
        defaults: &[(String, String)],
        checks: &[NewCheck],
    ) -> Result<()> {
        check_user_name(name)?;
        self.create_table_named(name, schema, replace, keys, defaults, checks)
    }

    /// Creates a hidden *staging* table (its name, which starts with [`STAGING_PREFIX`], is
    /// returned) to be filled and then renamed into place with [`Store::rename_table`], so
    /// that a new table appears with all its rows or not at all. Staging tables left by a
    /// crash are dropped when the database is next opened for writing.
    pub fn create_staging_table(&self, schema: &Schema) -> Result<String> {
        self.create_staging_table_with_keys(schema, &[])
    }

    /// [`Store::create_staging_table`] with keys and indexes (see
    /// [`Store::create_table_with_keys`]); their names stay when it is renamed into place.
    pub fn create_staging_table_with_keys(
        &self,
        schema: &Schema,
        keys: &[keys::NewIndex],
    ) -> Result<String> {
        self.create_staging_table_full(schema, keys, &[], &[])
    }

    /// [`Store::create_staging_table_with_keys`] with column defaults and CHECK
    /// constraints (see [`Store::create_table_full`]; unnamed checks are named after the
    /// staging table: give names to keep them stable across the rename).
    pub fn create_staging_table_full(
        &self,
        schema: &Schema,
        keys: &[keys::NewIndex],
        defaults: &[(String, String)],
        checks: &[NewCheck],
    ) -> Result<String> {
        let name = staging_name();
        self.create_table_named(&name, schema, false, keys, defaults, checks)?;
        Ok(name)
    }

    pub(super) fn create_table_named(
        &self,
        name: &str,
        schema: &Schema,
        replace: bool,
        specs: &[keys::NewIndex],
        column_defaults: &[(String, String)],
        new_checks: &[NewCheck],
    ) -> Result<()> {
        self.check_writable()?;
        check_name(name)?;
        self.catalog_change(|s, next| {
            s.create_table_edit(next, name, schema, replace, specs, column_defaults, new_checks)
        })
    }

    /// The catalog part of [`Store::create_table_named`].
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_table_edit(
        &self,
        next: &mut DbSnapshot,
        name: &str,
        schema: &Schema,
        replace: bool,
        specs: &[keys::NewIndex],
        column_defaults: &[(String, String)],
        new_checks: &[NewCheck],
    ) -> Result<Effect> {
        let ts = TableSchema::from_user_schema(&keys::primary_key_not_null(schema, specs))?;
        let mut defaults = Vec::with_capacity(column_defaults.len());
        for (column, sql) in column_defaults {
            let p = ts.index_of(column).filter(|&p| p > 0).ok_or_else(|| {
                Error::ColumnNotFound { table: name.to_string(), column: column.clone() }
            })?;
            defaults.push((ts.column_id_at(p), sql.clone()));
        }
        let checks = checks::define_checks(name, &ts, &[], new_checks)?;
        let old = replaced_table(next, name, replace)?;
        // Names of the replaced table's indexes are free again.
        let replaced = old.as_ref().map(|o| o.id);
        if next.index_table(name).is_some_and(|t| Some(t.id) != replaced) {
            return Err(Error::IndexExists { index: name.to_string() });
        }
        let taken = |n: &str| n == name || next.name_taken(n, replaced);
        let defs = keys::define(name, &ts, &[], specs, &taken)?;
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
            indexes: defs.into(),
            defaults: defaults.into(),
            checks: checks.into(),
            keys: None,
            read_keys: Arc::default(),
            estimates: Arc::default(),
        };
        next.tables.insert(t.name.clone(), Arc::new(t));
        Ok(Effect { depends: vec![id], dropped: old.into_iter().collect(), ..Effect::default() })
    }

    /// Applies the catalog change `edit` to a copy of the head and installs it, auto-
    /// committed (see [`Store::install_catalog`]), then deletes the files of the tables it
    /// dropped or replaced. Dropping a table that has files makes the install synced: the
    /// synced manifest must never name a deleted file.
    pub(super) fn catalog_change(
        &self,
        edit: impl FnOnce(&Store, &mut DbSnapshot) -> Result<Effect>,
    ) -> Result<()> {
        let _w = self.writer()?;
        self.catalog_change_locked(self.head.lock(), edit)
    }

    /// [`Store::catalog_change`] for a caller holding the writer token and the head.
    fn catalog_change_locked(
        &self,
        mut head: parking_lot::MutexGuard<'_, Arc<DbSnapshot>>,
        edit: impl FnOnce(&Store, &mut DbSnapshot) -> Result<Effect>,
    ) -> Result<()> {
        let mut next = (**head).clone();
        let e = edit(self, &mut next)?;
        if e.unchanged {
            return Ok(());
        }
        if e.dropped.iter().any(|t| has_files(t)) {
            self.install(&mut head, next, e.absorbed)?;
        } else {
            self.install_catalog(&mut head, next, e.absorbed, &e.depends)?;
        }
        drop(head);
        // The tables are gone once the manifest is installed; their files are garbage now.
        // A failure here leaves orphans that the next writer open removes.
        for t in &e.dropped {
            self.remove_files_of(t);
        }
        Ok(())
    }

    /// Renames a table (its data, ids and files stay); with `replace`, a table named `to` is
    /// dropped in the same manifest install.
    pub fn rename_table(&self, from: &str, to: &str, replace: bool) -> Result<()> {
        self.check_writable()?;
        check_user_name(to)?;
        self.catalog_change(|s, next| s.rename_table_edit(next, from, to, replace))
    }

    /// The catalog part of [`Store::rename_table`].
    pub(crate) fn rename_table_edit(
        &self,
        next: &mut DbSnapshot,
        from: &str,
        to: &str,
        replace: bool,
    ) -> Result<Effect> {
        if from == to {
            next.tables.get(from).ok_or_else(|| Error::TableNotFound { table: from.into() })?;
            return Ok(Effect { unchanged: true, ..Effect::default() });
        }
        let old = replaced_table(next, to, replace)?;
        if next.index_table(to).is_some_and(|t| old.as_ref().is_none_or(|o| o.id != t.id)) {
            return Err(Error::IndexExists { index: to.to_string() });
        }
        let t = next
            .tables
            .remove(from)
            .ok_or_else(|| Error::TableNotFound { table: from.to_string() })?;
        let mut t = clone_table(&t);
        t.name = to.into();
        // A staging table's keys were named after it: they take the name it gets.
        if from.starts_with(STAGING_PREFIX) {
            let mut defs = t.indexes.to_vec();
            for i in 0..defs.len() {
                let Some(rest) = defs[i].name.strip_prefix(from) else { continue };
                let stem = format!("{to}{rest}");
                let mut name = stem.clone();
                let mut k = 1;
                while next
                    .index_table(&name)
                    .is_some_and(|o| old.as_ref().is_none_or(|r| r.id != o.id))
                    || defs.iter().any(|d| d.name == name)
                {
                    name = format!("{stem}{k}");
                    k += 1;
                }
                defs[i].name = name;
            }
            t.indexes = defs.into();
        }
        next.tables.insert(t.name.clone(), Arc::new(t));
        Ok(Effect { dropped: old.into_iter().collect(), ..Effect::default() })
    }

    /// Creates a view: a name for the SQL text of a query (storage keeps the text; the SQL
    /// layer plans it at each use). `replace` replaces an existing view of that name.
    pub fn create_view(&self, name: &str, sql: &str, replace: bool) -> Result<()> {
        self.check_writable()?;
        check_user_name(name)?;
        self.catalog_change(|s, next| s.create_view_edit(next, name, sql, replace))
    }

    /// The catalog part of [`Store::create_view`].
    pub(crate) fn create_view_edit(
        &self,
        next: &mut DbSnapshot,
        name: &str,
        sql: &str,
        replace: bool,
    ) -> Result<Effect> {
        if next.tables.contains_key(name) {
            return Err(Error::TableExists { table: name.to_string() });
        }
        if next.index_table(name).is_some() {
            return Err(Error::IndexExists { index: name.to_string() });
        }
        if next.views.contains_key(name) && !replace {
            return Err(Error::ViewExists { view: name.to_string() });
        }
        next.views.insert(name.to_string(), sql.to_string());
        Ok(Effect::default())
    }

    /// Drops a view.
    pub fn drop_view(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        self.catalog_change(|s, next| s.drop_view_edit(next, name))
    }

    /// The catalog part of [`Store::drop_view`].
    pub(crate) fn drop_view_edit(&self, next: &mut DbSnapshot, name: &str) -> Result<Effect> {
        if next.views.remove(name).is_none() {
            return Err(Error::ViewNotFound { view: name.to_string() });
        }
        Ok(Effect::default())
    }

    /// Drops a table and deletes its files.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.catalog_change(|s, next| s.drop_table_edit(next, name))
    }

    /// The catalog part of [`Store::drop_table`].
    pub(crate) fn drop_table_edit(&self, next: &mut DbSnapshot, name: &str) -> Result<Effect> {
        let t = next
            .tables
            .remove(name)
            .ok_or_else(|| Error::TableNotFound { table: name.to_string() })?;
        Ok(Effect { dropped: vec![t], ..Effect::default() })
    }

    /// Changes a table's columns without rewriting data: segments refer to columns by id,
    /// so an added column reads as NULL where it was never written, a dropped column's data
    /// is ignored (and reclaimed by compaction), and a rename keeps id, type and data.
    /// Memtables are flushed first, so the log never holds rows of an older schema.
    pub fn alter_table(&self, table: &str, change: &AlterColumn) -> Result<()> {
        self.alter_table_all(table, std::slice::from_ref(change))
    }

    /// [`Store::alter_table`] with several changes, applied in order and installed as one
    /// catalog change: all of them take effect or, when one is refused, none.
    pub fn alter_table_all(&self, table: &str, changes: &[AlterColumn]) -> Result<()> {
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
        self.catalog_change_locked(head, |s, next| s.alter_table_edit(next, table, changes))
    }

    /// The catalog part of [`Store::alter_table_all`]: the table's memtable must be empty
    /// (its rows in segments).
    pub(crate) fn alter_table_edit(
        &self,
        next: &mut DbSnapshot,
        table: &str,
        changes: &[AlterColumn],
    ) -> Result<Effect> {
        let t = next.table(table)?.clone();
        if !t.memtable.is_empty() {
            return Err(Error::InvalidInput {
                table: table.to_string(),
                reason: "ALTER TABLE with rows of the old schema in memory".into(),
            });
        }
        let mut schema = (*t.schema).clone();
        for change in changes {
            schema = match change {
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
                    schema.with_added(f)?
                }
                AlterColumn::Drop(name) => {
                    // By the schema as the earlier changes left it (a renamed column too).
                    if let Some(e) = &t.fts
                        && schema
                            .index_of(name)
                            .is_some_and(|p| e.columns.contains(&schema.column_id_at(p)))
                    {
                        return Err(Error::InvalidInput {
                            table: table.to_string(),
                            reason: format!(
                                "column '{name}' is in the full-text index: drop the index first"
                            ),
                        });
                    }
                    if let Some(d) = t.indexes.iter().find(|d| {
                        schema
                            .index_of(name)
                            .is_some_and(|p| d.columns.contains(&schema.column_id_at(p)))
                    }) {
                        return Err(Error::InvalidInput {
                            table: table.to_string(),
                            reason: format!(
                                "column '{name}' is in index '{}': drop the index first",
                                d.name
                            ),
                        });
                    }
                    refuse_check_column(&t, &schema, table, name, "drop")?;
                    schema.with_dropped(table, name)?
                }
                AlterColumn::Rename { from, to } => {
                    refuse_check_column(&t, &schema, table, from, "rename")?;
                    schema.with_renamed(table, from, to)?
                }
                AlterColumn::SetDefault { .. }
                | AlterColumn::AddCheck(_)
                | AlterColumn::DropCheck(_) => schema,
            };
        }
        let mut nt = (*t).clone();
        // Defaults of dropped columns go; the others follow their columns by id.
        let mut defaults: Vec<(u32, String)> = t
            .defaults
            .iter()
            .filter(|(c, _)| schema.position_of_id(*c).is_some())
            .cloned()
            .collect();
        for change in changes {
            if let AlterColumn::SetDefault { column, sql } = change {
                let p = schema.index_of(column).filter(|&p| p > 0).ok_or_else(|| {
                    Error::ColumnNotFound { table: table.to_string(), column: column.clone() }
                })?;
                let id = schema.column_id_at(p);
                defaults.retain(|(c, _)| *c != id);
                if let Some(sql) = sql {
                    defaults.push((id, sql.clone()));
                }
            }
        }
        nt.defaults = defaults.into();
        let mut checks = t.checks.to_vec();
        for change in changes {
            match change {
                AlterColumn::AddCheck(c) => {
                    let new =
                        checks::define_checks(table, &schema, &checks, std::slice::from_ref(c))?;
                    // The rows already there must pass it (read under the writer lock, so
                    // no write comes between).
                    self.check_existing_rows(&t, &new)?;
                    checks.extend(new);
                }
                AlterColumn::DropCheck(name) => {
                    let before = checks.len();
                    checks.retain(|c| &c.name != name);
                    if checks.len() == before {
                        return Err(Error::InvalidInput {
                            table: table.to_string(),
                            reason: format!("no check constraint '{name}'"),
                        });
                    }
                }
                _ => {}
            }
        }
        nt.checks = checks.into();
        nt.schema = Arc::new(schema);
        let id = nt.id;
        next.tables.insert(nt.name.clone(), Arc::new(nt));
        Ok(Effect { depends: vec![id], absorbed: true, ..Effect::default() })
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
}

/// The id of the table a new table named `name` replaces (`None` if there is none); an
/// error if it exists and may not be replaced, or if a view has the name.
pub(super) fn replaced_table(
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

/// A new staging table name (see [`Store::create_staging_table`]).
pub(crate) fn staging_name() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{STAGING_PREFIX}{}_{n}", std::process::id())
}

impl DbSnapshot {
    /// This state with `tables` (a transaction's copies) in place of the tables of their
    /// names.
    pub(crate) fn overlaid(&self, tables: &BTreeMap<Arc<str>, Arc<TableSnapshot>>) -> DbSnapshot {
        let mut next = self.clone();
        for (name, t) in tables {
            next.tables.insert(name.clone(), t.clone());
        }
        next
    }
}

/// What a catalog change needs at install ([`Store::catalog_change`], or a transaction's
/// commit).
#[derive(Debug, Default)]
pub(crate) struct Effect {
    /// Tables created or altered: log records with their rows wait for a synced manifest.
    pub(crate) depends: Vec<u64>,
    /// Tables dropped or replaced: their files go once the change is installed.
    pub(crate) dropped: Vec<Arc<TableSnapshot>>,
    /// Every memtable row of the new state is in a synced segment.
    pub(crate) absorbed: bool,
    /// Nothing changed (nothing to install).
    pub(crate) unchanged: bool,
}

pub(super) fn clone_table(t: &TableSnapshot) -> TableSnapshot {
    TableSnapshot {
        id: t.id,
        name: t.name.clone(),
        schema: t.schema.clone(),
        next_row_id: t.next_row_id,
        segments: t.segments.clone(),
        memtable: t.memtable.clone(),
        index: t.index.clone(),
        fts: t.fts.clone(),
        indexes: t.indexes.clone(),
        defaults: t.defaults.clone(),
        checks: t.checks.clone(),
        keys: t.keys.clone(),
        read_keys: Arc::default(),
        estimates: Arc::default(),
    }
}

/// Refuses to `what` (drop or rename) column `name` of `schema` while a check of `t` reads
/// it: the check's text names the column.
fn refuse_check_column(
    t: &TableSnapshot,
    schema: &TableSchema,
    table: &str,
    name: &str,
    what: &str,
) -> Result<()> {
    if let Some(c) = schema.index_of(name).and_then(|p| t.check_reading(schema, p)) {
        return Err(Error::InvalidInput {
            table: table.to_string(),
            reason: format!(
                "cannot {what} column '{name}': check constraint {} reads it (drop the \
                 constraint first)",
                c.name
            ),
        });
    }
    Ok(())
}
