//! Transactions: the one way data changes.
//!
//! Every insert, update and delete — an auto-commit call on [`Store`] or a statement inside
//! an explicit transaction — runs as a [`Transaction`]. A transaction reads from a snapshot
//! taken at `begin` and writes to private copies of the tables it touches, so it sees its own
//! writes and nobody else does until it commits. Commit publishes all of its changes at once
//! (one log record, or one manifest install when it wrote segments), atomically across tables.
//!
//! # Isolation
//!
//! One writer at a time: a transaction becomes *the* writer at its first write (or at begin,
//! with [`Store::begin_immediate`]) and stays it until commit or rollback; other writers wait
//! for it up to the lock-wait timeout (then [`Error::LockTimeout`]), they never fail at once
//! with "busy". At its first write a transaction's snapshot moves forward to the newest
//! committed state, so every write applies to the latest data. Readers never wait.
//!
//! The level is snapshot isolation. Because writers are serialised, write–write conflicts and
//! lost updates cannot happen among writes, but a transaction's reads *before its first write*
//! come from its begin snapshot: a decision made on such a read can be stale (write skew across
//! the first write). `begin_immediate` takes the writer lock at begin and makes the whole
//! transaction serializable.
//!
//! # Large transactions
//!
//! An insert of at least `bulk_insert_rows` rows inside a transaction is written to a segment
//! file at once (synced, not yet in the manifest), so big transactions do not hold their rows
//! in memory; commit installs those segments with one manifest, rollback deletes them.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, UInt64Array};

use crate::error::{Error, Result};
use crate::predicate::Predicate;
use arrow_schema::Schema;

use crate::store::{
    AlterColumn, CommitEvent, DbSnapshot, Effect, IdRange, NewCheck, NewIndex, OnConflict, Store,
    TableSnapshot, check_user_name,
};
use crate::types::ID_COLUMN;
use crate::wal::{Durability, Op};
use crate::writer::WriterToken;

/// An open transaction. Finish it with [`Store::commit`] or [`Store::rollback`]; a
/// transaction that is simply dropped while holding the writer lock must be rolled back by
/// its owner (the engine's `Connection` does this on drop).
#[derive(Debug)]
pub struct Transaction {
    /// What it reads: the begin snapshot, the head once it is the writer, then its own
    /// catalog changes (DDL) on top.
    snapshot: Arc<DbSnapshot>,
    /// The head when it became the writer (its catalog changes' base).
    base: Option<Arc<DbSnapshot>>,
    writer: Option<WriterToken>,
    tables: BTreeMap<Arc<str>, Arc<TableSnapshot>>,
    ops: Vec<Op>,
    spilled: Vec<PathBuf>,
    bulk: Vec<(u64, IdRange)>,
    durability: Durability,
    /// How many catalog changes it made (0: commit needs no manifest install).
    ddl: usize,
    /// Tables it dropped or replaced: their files go once it commits.
    dropped: Vec<Arc<TableSnapshot>>,
}

/// A point inside a transaction to roll back to ([`Transaction::savepoint`]).
#[derive(Debug, Clone)]
pub struct Savepoint {
    tables: BTreeMap<Arc<str>, Arc<TableSnapshot>>,
    ops: usize,
    spilled: usize,
    bulk: usize,
    snapshot: Arc<DbSnapshot>,
    writer: bool,
    ddl: usize,
    dropped: usize,
}

impl Store {
    /// Starts a transaction reading the current snapshot; it becomes the writer at its first
    /// write. `durability` applies to its commit.
    pub fn begin(&self, durability: Durability) -> Result<Transaction> {
        Ok(Transaction {
            snapshot: self.snapshot(),
            base: None,
            writer: None,
            tables: BTreeMap::new(),
            ops: Vec::new(),
            spilled: Vec::new(),
            bulk: Vec::new(),
            durability,
            ddl: 0,
            dropped: Vec::new(),
        })
    }

    /// Starts a transaction that is the writer from the start (serializable).
    pub fn begin_immediate(&self, durability: Durability) -> Result<Transaction> {
        let mut t = self.begin(durability)?;
        t.become_writer(self)?;
        Ok(t)
    }

    /// Commits: all of the transaction's changes become visible (and durable at its level)
    /// at once. On error nothing of it is visible.
    pub fn commit(&self, mut txn: Transaction) -> Result<()> {
        if txn.writer.is_none() {
            return Ok(()); // read-only
        }
        let mut r = self.commit_writes(&mut txn);
        if r.is_err() {
            txn.discard(self);
        }
        // A commit that needs no sync is written and published while it is still the
        // writer: one write(2) under the token costs less than handing the token on and
        // then queueing again for the log file and the published state (many writers on
        // few cores convoyed on that second hand-off).
        if let Ok((published, _)) = &mut r
            && published.as_ref().is_some_and(|next| next.sync_lsn == 0)
            && let Some(next) = published.take()
            && let Err(e) = self.publish(next)
        {
            r = Err(e);
        }
        // Let the next writer in before waiting for the log sync: concurrent power-safe
        // commits then share one fsync.
        drop(txn.writer.take());
        let (published, event) = r?;
        if let Some(next) = published {
            self.publish(next)?;
        }
        if let Some(event) = event {
            self.run_commit_hook(&event);
        }
        Ok(())
    }

    /// Rolls back: nothing the transaction did remains.
    pub fn rollback(&self, mut txn: Transaction) {
        txn.discard(self);
        drop(txn.writer.take());
    }

    /// Applies the writes; returns the state still to publish (after the log sync) and what
    /// to tell the commit hook.
    fn commit_writes(
        &self,
        txn: &mut Transaction,
    ) -> Result<(Option<Arc<DbSnapshot>>, Option<CommitEvent>)> {
        self.check_writable()?;
        let tables = std::mem::take(&mut txn.tables);
        let ops = std::mem::take(&mut txn.ops);
        if txn.ddl > 0 {
            let next = txn.snapshot.overlaid(&tables);
            self.apply_catalog_commit(next, &ops, &txn.bulk)?;
            txn.spilled.clear(); // now owned by the manifest
            for t in txn.dropped.drain(..) {
                // Garbage now; the next writer open removes what this misses.
                self.remove_files_of(&t);
            }
            let event = CommitEvent { lsn: None, ops, bulk_inserts: std::mem::take(&mut txn.bulk) };
            return Ok((None, Some(event)));
        }
        if ops.is_empty() && txn.spilled.is_empty() {
            return Ok((None, None));
        }
        let spilled = !txn.spilled.is_empty();
        let (published, lsn) =
            self.apply_commit(tables, &ops, &txn.bulk, spilled, txn.durability)?;
        txn.spilled.clear(); // now owned by the manifest
        let event = CommitEvent { lsn, ops, bulk_inserts: std::mem::take(&mut txn.bulk) };
        Ok((published, Some(event)))
    }

    /// Runs `f` as one auto-committed writer transaction: commits on success, rolls back
    /// on error.
    pub fn autocommit<T>(
        &self,
        durability: Durability,
        f: impl FnOnce(&mut Transaction, &Store) -> Result<T>,
    ) -> Result<T> {
        let mut txn = self.begin_immediate(durability)?;
        match f(&mut txn, self) {
            Ok(v) => {
                self.commit(txn)?;
                Ok(v)
            }
            Err(e) => {
                self.rollback(txn);
                Err(e)
            }
        }
    }
}

/// `batches` as `t` stores them, with placeholder `_id`s (for reading their keys).
fn placeholder_rows(
    t: &TableSnapshot,
    table: &str,
    batches: &[RecordBatch],
) -> Result<Vec<RecordBatch>> {
    let mut full = Vec::with_capacity(batches.len());
    for b in batches {
        let mut cols = t.conform(b)?;
        cols.insert(0, Arc::new(UInt64Array::from(vec![0u64; b.num_rows()])) as ArrayRef);
        full.push(
            RecordBatch::try_new_with_options(
                t.schema().full_schema().clone(),
                cols,
                &arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
            )
            .map_err(|e| Error::arrow(format!("insert into '{table}'"), e))?,
        );
    }
    Ok(full)
}

/// The rows of each batch whose flag is set (batches with none left out).
fn filter_rows(
    table: &str,
    batches: &[RecordBatch],
    keep: &[Vec<bool>],
) -> Result<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(batches.len());
    for (b, k) in batches.iter().zip(keep) {
        if k.iter().all(|&k| k) {
            out.push(b.clone());
        } else if k.iter().any(|&k| k) {
            out.push(
                arrow_select::filter::filter_record_batch(b, &k.clone().into())
                    .map_err(|e| Error::arrow(format!("insert into '{table}'"), e))?,
            );
        }
    }
    Ok(out)
}

impl Transaction {
    fn become_writer(&mut self, store: &Store) -> Result<()> {
        if self.writer.is_some() {
            return Ok(());
        }
        store.check_writable()?;
        self.writer = Some(store.acquire_writer()?);
        // Writes apply to the newest committed state.
        self.snapshot = store.head_snapshot();
        self.base = Some(self.snapshot.clone());
        Ok(())
    }

    fn discard(&mut self, store: &Store) {
        for p in self.spilled.drain(..) {
            // Unreferenced segment files; the next writer open removes what this misses.
            store.remove_unreferenced(&p);
        }
        self.tables.clear();
        self.ops.clear();
        // Dropped tables keep their files: the drop did not happen.
        self.dropped.clear();
        self.ddl = 0;
    }

    /// Runs one statement atomically inside the transaction: if `f` fails, every change it
    /// made to the transaction is undone (earlier statements stay).
    pub fn statement<T>(
        &mut self,
        store: &Store,
        f: impl FnOnce(&mut Self, &Store) -> Result<T>,
    ) -> Result<T> {
        let mark = self.savepoint();
        let r = f(self, store);
        if r.is_err() {
            self.rollback_to(store, mark);
        }
        r
    }

    /// Marks the current state so a failing statement can undo exactly its own changes.
    pub fn savepoint(&self) -> Savepoint {
        Savepoint {
            tables: self.tables.clone(),
            ops: self.ops.len(),
            spilled: self.spilled.len(),
            bulk: self.bulk.len(),
            snapshot: self.snapshot.clone(),
            writer: self.writer.is_some(),
            ddl: self.ddl,
            dropped: self.dropped.len(),
        }
    }

    /// Undoes every change made since `mark` (earlier ones stay).
    pub fn rollback_to(&mut self, store: &Store, mark: Savepoint) {
        self.tables = mark.tables;
        self.ops.truncate(mark.ops);
        self.bulk.truncate(mark.bulk);
        for p in self.spilled.drain(mark.spilled.min(self.spilled.len())..) {
            store.remove_unreferenced(&p);
        }
        self.dropped.truncate(mark.dropped);
        self.ddl = mark.ddl;
        // The catalog as it was at the mark. A transaction that became the writer since
        // keeps reading the head it became the writer at (the mark's snapshot may be older:
        // writes based on it would undo others' commits).
        self.snapshot = match (&self.base, mark.writer) {
            (Some(base), false) => base.clone(),
            _ => mark.snapshot,
        };
    }

    /// Makes this transaction the writer now (waiting up to the lock timeout), moving its
    /// snapshot to the newest committed state: a statement that reads and then writes (SQL
    /// `UPDATE … SET x = x + 1`) must read the state its writes apply to.
    pub fn ensure_writer(&mut self, store: &Store) -> Result<()> {
        self.become_writer(store)
    }

    /// Applies a catalog change to this transaction's own catalog (made the writer first):
    /// visible to it at once, to others when it commits, undone by a rollback.
    fn catalog_change(
        &mut self,
        store: &Store,
        edit: impl FnOnce(&Store, &mut DbSnapshot) -> Result<Effect>,
    ) -> Result<()> {
        store.check_writable()?;
        self.become_writer(store)?;
        let mut next = self.snapshot.overlaid(&self.tables);
        let e = edit(store, &mut next)?;
        if e.unchanged {
            return Ok(());
        }
        self.snapshot = Arc::new(next);
        self.tables.clear();
        self.dropped.extend(e.dropped);
        self.ddl += 1;
        Ok(())
    }

    /// [`Store::create_table_full`] inside this transaction.
    #[allow(clippy::too_many_arguments)]
    pub fn create_table_full(
        &mut self,
        store: &Store,
        name: &str,
        schema: &Schema,
        replace: bool,
        keys: &[NewIndex],
        defaults: &[(String, String)],
        checks: &[NewCheck],
    ) -> Result<()> {
        check_user_name(name)?;
        self.catalog_change(store, |s, next| {
            s.create_table_edit(next, name, schema, replace, keys, defaults, checks)
        })
    }

    /// [`Store::create_staging_table_full`] inside this transaction: returns its name.
    pub fn create_staging_table_full(
        &mut self,
        store: &Store,
        schema: &Schema,
        keys: &[NewIndex],
        defaults: &[(String, String)],
        checks: &[NewCheck],
    ) -> Result<String> {
        let name = crate::store::staging_name();
        self.catalog_change(store, |s, next| {
            s.create_table_edit(next, &name, schema, false, keys, defaults, checks)
        })?;
        Ok(name)
    }

    /// [`Store::rename_table`] inside this transaction.
    pub fn rename_table(
        &mut self,
        store: &Store,
        from: &str,
        to: &str,
        replace: bool,
    ) -> Result<()> {
        check_user_name(to)?;
        self.catalog_change(store, |s, next| s.rename_table_edit(next, from, to, replace))
    }

    /// [`Store::drop_table`] inside this transaction (its files go when it commits).
    pub fn drop_table(&mut self, store: &Store, name: &str) -> Result<()> {
        self.catalog_change(store, |s, next| s.drop_table_edit(next, name))
    }

    /// [`Store::create_view`] inside this transaction.
    pub fn create_view(
        &mut self,
        store: &Store,
        name: &str,
        sql: &str,
        replace: bool,
    ) -> Result<()> {
        check_user_name(name)?;
        self.catalog_change(store, |s, next| s.create_view_edit(next, name, sql, replace))
    }

    /// [`Store::drop_view`] inside this transaction.
    pub fn drop_view(&mut self, store: &Store, name: &str) -> Result<()> {
        self.catalog_change(store, |s, next| s.drop_view_edit(next, name))
    }

    /// [`Store::alter_table_all`] inside this transaction. The table's rows in memory are
    /// written to a segment of its private copy first (rows keep the schema they were
    /// written under).
    pub fn alter_table_all(
        &mut self,
        store: &Store,
        table: &str,
        changes: &[AlterColumn],
    ) -> Result<()> {
        let t = self.write_table(store, table)?;
        let paths = store.spill_memtable(t)?;
        self.spilled.extend(paths);
        self.catalog_change(store, |s, next| s.alter_table_edit(next, table, changes))
    }

    /// [`Store::create_index`] inside this transaction.
    pub fn create_index(
        &mut self,
        store: &Store,
        table: &str,
        spec: &NewIndex,
        if_not_exists: bool,
    ) -> Result<()> {
        self.catalog_change(store, |s, next| s.create_index_edit(next, table, spec, if_not_exists))
    }

    /// [`Store::drop_index`] inside this transaction.
    pub fn drop_index(&mut self, store: &Store, name: &str) -> Result<()> {
        self.catalog_change(store, |s, next| s.drop_index_edit(next, name))
    }

    /// The snapshot this transaction reads (before its own writes).
    pub fn snapshot(&self) -> &Arc<DbSnapshot> {
        &self.snapshot
    }

    /// A table as this transaction sees it, its own writes included.
    pub fn table(&self, name: &str) -> Result<Arc<TableSnapshot>> {
        match self.tables.get(name) {
            Some(t) => Ok(t.clone()),
            None => self.snapshot.table(name).cloned(),
        }
    }

    /// The tables this transaction has written, as it sees them.
    pub(crate) fn written_tables(&self) -> Vec<(String, Arc<TableSnapshot>)> {
        self.tables.iter().map(|(n, t)| (n.to_string(), t.clone())).collect()
    }

    /// Whether the transaction has written anything.
    pub fn has_writes(&self) -> bool {
        !self.ops.is_empty() || !self.spilled.is_empty() || self.ddl > 0
    }

    fn write_table(&mut self, store: &Store, name: &str) -> Result<&mut TableSnapshot> {
        self.become_writer(store)?;
        if !self.tables.contains_key(name) {
            let (key, t) = self.snapshot.table_entry(name)?;
            let (key, t) = (key.clone(), t.clone());
            self.tables.insert(key, t);
        }
        let t = self
            .tables
            .get_mut(name)
            .ok_or_else(|| Error::TableNotFound { table: name.to_string() })?;
        Ok(Arc::make_mut(t))
    }

    /// Inserts rows (validated before anything changes); they get consecutive new `_id`s.
    pub fn insert(
        &mut self,
        store: &Store,
        table: &str,
        batches: &[RecordBatch],
    ) -> Result<IdRange> {
        let bulk = store.options().bulk_insert_rows;
        let t = self.write_table(store, table)?;
        let mut conformed = Vec::with_capacity(batches.len());
        let mut total = 0u64;
        for b in batches {
            let cols = t.conform(b)?;
            total += b.num_rows() as u64;
            conformed.push((b.num_rows(), cols));
        }
        let first = t.next_row_id();
        if total == 0 {
            return Ok(IdRange { first, count: 0 });
        }
        let mut full = Vec::with_capacity(conformed.len());
        let mut id = first;
        for (rows, mut cols) in conformed {
            // (A `Vec`'s allocation becomes the buffer: no aligned allocation for a row.)
            let ids = UInt64Array::from((id..id + rows as u64).collect::<Vec<_>>());
            id += rows as u64;
            // `_id` first, in the conformed columns' vector (`conform` leaves room).
            cols.insert(0, Arc::new(ids) as ArrayRef);
            full.push(
                RecordBatch::try_new_with_options(
                    t.schema().full_schema().clone(),
                    cols,
                    &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
                )
                .map_err(|e| Error::arrow(format!("insert into '{table}'"), e))?,
            );
        }
        // CHECK constraints, then unique keys (against every live row and each other),
        // before anything else changes.
        for b in &full {
            store.check_rows(t, b)?;
        }
        t.change_keys(&[], &[], &full)?;
        t.set_next_row_id(first + total);
        if total as usize >= bulk {
            // Spill: straight to segments (memtable rows first, to keep `_id` order).
            let paths = store.spill(t, &full)?;
            let table_id = t.id();
            self.spilled.extend(paths);
            self.bulk.push((table_id, IdRange { first, count: total }));
        } else {
            let batch = if full.len() == 1 {
                full.swap_remove(0)
            } else {
                arrow_select::concat::concat_batches(t.schema().full_schema(), &full)
                    .map_err(|e| Error::arrow(format!("insert into '{table}'"), e))?
            };
            t.push_memtable(batch.clone())?;
            let table_id = t.id();
            self.ops.push(Op::Insert { table_id, batch });
        }
        Ok(IdRange { first, count: total })
    }

    /// Inserts rows whose keys may already be taken, resolving each duplicate as `mode`
    /// says (see [`OnConflict`]); returns how many rows were inserted. Rows a key does
    /// not resolve are checked as [`Transaction::insert`] checks them. On error nothing
    /// changed.
    pub fn insert_on_conflict(
        &mut self,
        store: &Store,
        table: &str,
        batches: &[RecordBatch],
        mode: &OnConflict,
    ) -> Result<u64> {
        let t = self.write_table(store, table)?;
        if !t.indexes().iter().any(|d| d.kind.is_unique()) {
            return Ok(self.insert(store, table, batches)?.count);
        }
        let full = placeholder_rows(t, table, batches)?;
        let (keep, doomed) = t.resolve_conflicts(&full, mode)?;
        // The rows to insert pass the CHECK constraints before a replaced row is deleted
        // (skipped rows are not checked; the insert checks the kept ones again).
        for b in filter_rows(table, &full, &keep)? {
            store.check_rows(t, &b)?;
        }
        let kept = filter_rows(table, batches, &keep)?;
        if !doomed.is_empty() {
            self.delete(store, table, &doomed)?;
        }
        Ok(self.insert(store, table, &kept)?.count)
    }

    /// Splits rows to insert by the unique key over exactly `columns` (what `INSERT … ON
    /// CONFLICT (columns) DO UPDATE` needs): the rows no live row has the key of, and the
    /// rows some live row has it of, as the table stores them (user columns), with that
    /// row's `_id`. Nothing is written. Two rows of `batches` with one key are refused (the
    /// second would change the row the first writes).
    pub fn split_conflicts(
        &mut self,
        store: &Store,
        table: &str,
        batches: &[RecordBatch],
        columns: &[String],
    ) -> Result<(Vec<RecordBatch>, Vec<u64>, Vec<RecordBatch>)> {
        let t = self.write_table(store, table)?;
        let full = placeholder_rows(t, table, batches)?;
        let hits = t.split_by_key(&full, columns)?;
        let fresh: Vec<Vec<bool>> =
            hits.iter().map(|h| h.iter().map(Option::is_none).collect()).collect();
        let fresh_rows = filter_rows(table, batches, &fresh)?;
        let mut ids = Vec::new();
        let mut hit_masks = Vec::with_capacity(full.len());
        for h in &hits {
            ids.extend(h.iter().flatten());
            hit_masks.push(h.iter().map(Option::is_some).collect::<Vec<_>>());
        }
        let users: Vec<RecordBatch> = full
            .iter()
            .map(|b| {
                let s = t.schema().user_schema();
                RecordBatch::try_new(s, b.columns()[1..].to_vec())
                    .map_err(|e| Error::arrow(format!("insert into '{table}'"), e))
            })
            .collect::<Result<_>>()?;
        let hit_rows = filter_rows(table, &users, &hit_masks)?;
        Ok((fresh_rows, ids, hit_rows))
    }

    /// Deletes the rows with these `_id`s (missing ones ignored); returns how many.
    pub fn delete(&mut self, store: &Store, table: &str, ids: &[u64]) -> Result<u64> {
        let t = self.write_table(store, table)?;
        let found = t.delete_ids(ids)?;
        let n = found.len() as u64;
        if n > 0 {
            let table_id = t.id();
            self.ops.push(Op::Delete { table_id, ids: found });
        }
        Ok(n)
    }

    /// Deletes the rows where `predicate` is true; returns how many.
    pub fn delete_where(
        &mut self,
        store: &Store,
        table: &str,
        predicate: &Predicate,
    ) -> Result<u64> {
        self.become_writer(store)?;
        let ids = self.table(table)?.matching_ids(predicate)?;
        self.delete(store, table, &ids)
    }

    /// Updates rows by `_id`: row `i` of `values` gives the new values of the columns it has
    /// for `ids[i]`; other columns and `_id` are kept. Missing ids are ignored; returns how
    /// many rows were updated. Validated fully before anything changes.
    pub fn update(
        &mut self,
        store: &Store,
        table: &str,
        ids: &[u64],
        values: &RecordBatch,
    ) -> Result<u64> {
        self.become_writer(store)?;
        let t = self.table(table)?;
        let bad = |reason: String| Error::InvalidInput { table: table.to_string(), reason };
        if values.num_rows() != ids.len() {
            return Err(bad(format!("{} ids but {} rows of values", ids.len(), values.num_rows())));
        }
        // A few ids are compared pairwise (no set to build for the common single update).
        let dup = if ids.len() <= 16 {
            ids.iter().enumerate().find(|(i, id)| ids[..*i].contains(id)).map(|(_, id)| *id)
        } else {
            let mut seen = std::collections::HashSet::with_capacity(ids.len());
            ids.iter().find(|id| !seen.insert(**id)).copied()
        };
        if let Some(dup) = dup {
            return Err(bad(format!("_id {dup} given twice")));
        }
        if let Some(f) =
            values.schema().fields().iter().find(|f| t.schema().index_of(f.name()).is_none())
        {
            return Err(Error::ColumnNotFound {
                table: table.to_string(),
                column: f.name().clone(),
            });
        }
        if values.schema().column_with_name(ID_COLUMN).is_some() {
            return Err(bad("_id cannot be updated".into()));
        }
        // Each row is located once; the same locations serve the read and the delete.
        let mut found = Vec::with_capacity(ids.len());
        let mut locs = Vec::with_capacity(ids.len());
        // Positions of the ids not found (no allocation while there are none).
        let mut missing = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            match t.locate(id)? {
                Some(loc) => {
                    found.push(id);
                    locs.push(loc);
                }
                None => missing.push(i),
            }
        }
        if found.is_empty() {
            return Ok(0);
        }
        let filtered;
        let values = if found.len() == ids.len() {
            values
        } else {
            let mut keep = vec![true; ids.len()];
            for &i in &missing {
                keep[i] = false;
            }
            let keep = arrow_array::BooleanArray::from(keep);
            filtered = arrow_select::filter::filter_record_batch(values, &keep)
                .map_err(|e| Error::arrow(format!("update '{table}'"), e))?;
            &filtered
        };
        // Only the columns `values` does not give are read from the old rows.
        let given = |name: &str| values.schema().column_with_name(name).map(|(j, _)| j);
        let kept: Vec<usize> = (0..t.schema().columns().len())
            .filter(|&i| given(t.schema().columns()[i].field.name()).is_none())
            .map(|i| i + 1)
            .collect();
        let old = t.columns_at(&locs, &kept)?;
        // The new user rows: given columns from `values`, the rest from the old rows.
        let ids_col: ArrayRef = Arc::new(UInt64Array::from(found.clone()));
        let mut full_cols = vec![ids_col];
        full_cols.extend(t.conform_update(values, old)?);
        let batch = RecordBatch::try_new(t.schema().full_schema().clone(), full_cols)
            .map_err(|e| Error::arrow(format!("update '{table}'"), e))?;
        store.check_rows(&t, &batch)?;
        let wt = self.write_table(store, table)?;
        // `wt` holds the same state as `t`, so the locations still apply. Keys change only
        // when a key column is given (the rows keep their `_id`s).
        if wt.touches_index(|p| p > 0 && given(wt.schema().full_schema().field(p).name()).is_some())
        {
            wt.change_keys(&locs, &found, std::slice::from_ref(&batch))?;
        }
        for loc in locs {
            wt.delete_at(loc);
        }
        wt.push_memtable(batch.clone())?;
        let table_id = wt.id();
        let n = found.len() as u64;
        self.ops.push(Op::Delete { table_id, ids: found });
        self.ops.push(Op::Insert { table_id, batch });
        Ok(n)
    }

    /// Sets the columns of the one-row batch `values` on every row where `predicate` is
    /// true; returns how many rows were updated.
    pub fn update_where(
        &mut self,
        store: &Store,
        table: &str,
        predicate: &Predicate,
        values: &RecordBatch,
    ) -> Result<u64> {
        self.become_writer(store)?;
        let ids = self.table(table)?.matching_ids(predicate)?;
        self.update_all(store, table, &ids, values)
    }

    /// Sets the one row of `values` on every row with these `_id`s (missing ones are
    /// skipped); returns how many rows were updated. A single id takes `values` as it is.
    pub fn update_all(
        &mut self,
        store: &Store,
        table: &str,
        ids: &[u64],
        values: &RecordBatch,
    ) -> Result<u64> {
        if values.num_rows() != 1 {
            return Err(Error::InvalidInput {
                table: table.to_string(),
                reason: format!("one row of values for every id, got {}", values.num_rows()),
            });
        }
        match ids.len() {
            0 => Ok(0),
            1 => self.update(store, table, ids, values),
            n => {
                let zeros = arrow_array::UInt32Array::from(vec![0u32; n]);
                let cols = values
                    .columns()
                    .iter()
                    .map(|c| arrow_select::take::take(c.as_ref(), &zeros, None))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| Error::arrow(format!("update '{table}'"), e))?;
                let repeated = RecordBatch::try_new(values.schema(), cols)
                    .map_err(|e| Error::arrow(format!("update '{table}'"), e))?;
                self.update(store, table, ids, &repeated)
            }
        }
    }
}
