//! A connection's transaction state: at most one open [`Transaction`], the connection's
//! durability override, and the rules for reading and writing through it.
//!
//! The engine's `Connection` and the SQL front end share one [`Session`] per connection, so a
//! table read through the Rust API and a `SELECT` see the same uncommitted writes, and a
//! `BEGIN` in SQL is the same transaction as `Connection::begin`. What this module must not do:
//! know about SQL or DataFusion; it speaks storage types only.

use std::sync::Arc;

use arrow_schema::Schema;

use crate::error::{Error, Result};
pub use crate::store::ReadView;
use crate::store::{AlterColumn, NewCheck, NewIndex, Store, TableSnapshot};
use crate::txn::{Savepoint, Transaction};
use crate::wal::Durability;

/// One connection's transaction state. Dropping it rolls back an open transaction.
#[derive(Debug)]
pub struct Session {
    store: Arc<Store>,
    txn: Option<Transaction>,
    durability: Option<Durability>,
    /// Named savepoints of the open transaction, oldest first.
    savepoints: Vec<NamedSavepoint>,
}

/// A savepoint set by name (SQL `SAVEPOINT name`).
#[derive(Debug)]
struct NamedSavepoint {
    name: String,
    mark: Savepoint,
    /// It started the transaction (there was none), so releasing it commits.
    began: bool,
}

impl Session {
    /// A session with no open transaction.
    pub fn new(store: Arc<Store>) -> Session {
        Session { store, txn: None, durability: None, savepoints: Vec::new() }
    }

    /// The store this session works on.
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }

    /// The durability override of this connection (`None`: the database default).
    pub fn durability_override(&self) -> Option<Durability> {
        self.durability
    }

    /// Sets the durability of this connection's later transactions and auto-commit writes.
    pub fn set_durability(&mut self, durability: Option<Durability>) {
        self.durability = durability;
    }

    /// The durability this connection's next commit gets.
    pub fn durability(&self) -> Durability {
        self.durability.unwrap_or(self.store.default_durability())
    }

    /// Starts a transaction; `immediate` makes it the writer at once (serializable).
    pub fn begin(&mut self, immediate: bool) -> Result<()> {
        if self.txn.is_some() {
            return Err(Error::Transaction {
                reason: "a transaction is already open on this connection".into(),
            });
        }
        let d = self.durability();
        let t = if immediate { self.store.begin_immediate(d)? } else { self.store.begin(d)? };
        self.txn = Some(t);
        Ok(())
    }

    /// Commits the open transaction.
    pub fn commit(&mut self) -> Result<()> {
        let t = self.txn.take().ok_or_else(no_transaction)?;
        self.savepoints.clear();
        self.store.commit(t)
    }

    /// Rolls back the open transaction.
    pub fn rollback(&mut self) -> Result<()> {
        let t = self.txn.take().ok_or_else(no_transaction)?;
        self.savepoints.clear();
        self.store.rollback(t);
        Ok(())
    }

    /// Sets a savepoint named `name` (names may repeat; the newest is the one named later).
    /// Without an open transaction it starts one, which releasing this savepoint commits
    /// (as SQLite does).
    pub fn savepoint(&mut self, name: &str) -> Result<()> {
        let began = self.txn.is_none();
        if began {
            self.begin(false)?;
        }
        let t = self.txn.as_ref().ok_or_else(no_transaction)?;
        self.savepoints.push(NamedSavepoint { name: name.to_string(), mark: t.savepoint(), began });
        Ok(())
    }

    /// Forgets the newest savepoint named `name` and every later one, keeping their changes;
    /// commits when that savepoint started the transaction.
    pub fn release_savepoint(&mut self, name: &str) -> Result<()> {
        let i = self.find_savepoint(name)?;
        let began = self.savepoints[i].began;
        self.savepoints.truncate(i);
        if began { self.commit() } else { Ok(()) }
    }

    /// Undoes every change made since the newest savepoint named `name`, which stays set
    /// (later ones are forgotten); the transaction stays open.
    pub fn rollback_to_savepoint(&mut self, name: &str) -> Result<()> {
        let i = self.find_savepoint(name)?;
        self.savepoints.truncate(i + 1);
        let mark = self.savepoints[i].mark.clone();
        let store = self.store.clone();
        let t = self.txn.as_mut().ok_or_else(no_transaction)?;
        t.rollback_to(&store, mark);
        Ok(())
    }

    fn find_savepoint(&self, name: &str) -> Result<usize> {
        self.savepoints.iter().rposition(|s| s.name == name).ok_or_else(|| Error::Transaction {
            reason: format!("no savepoint named '{name}' is set"),
        })
    }

    /// A table as this connection sees it now (its open transaction's writes included).
    pub fn table(&self, name: &str) -> Result<Arc<TableSnapshot>> {
        match &self.txn {
            Some(t) => t.table(name),
            None => self.store.snapshot().table(name).cloned(),
        }
    }

    /// The view a statement reads, pinned now: later commits by others (or later statements
    /// of this transaction) do not change it.
    pub fn read_view(&self) -> Result<ReadView> {
        match &self.txn {
            None => Ok(ReadView::Committed(self.store.snapshot())),
            Some(t) => {
                let base = t.snapshot().clone();
                let own = t.written_tables();
                Ok(ReadView::Transaction(base, own))
            }
        }
    }

    /// Runs a write: as one atomic statement of the open transaction, or as its own commit
    /// at this connection's durability.
    pub fn write<T>(&mut self, f: impl FnOnce(&mut Transaction, &Store) -> Result<T>) -> Result<T> {
        match self.txn.as_mut() {
            Some(t) => t.statement(&self.store, f),
            None => self.store.autocommit(self.durability(), f),
        }
    }
}

/// Catalog changes (DDL): inside the open transaction — seen by it at once, by others when
/// it commits, together with its rows (see [`Transaction::create_table_full`]) — or
/// auto-committed without one.
impl Session {
    /// [`Store::create_table_full`].
    pub fn create_table_full(
        &mut self,
        name: &str,
        schema: &Schema,
        replace: bool,
        keys: &[NewIndex],
        defaults: &[(String, String)],
        checks: &[NewCheck],
    ) -> Result<()> {
        match self.txn.as_mut() {
            Some(t) => {
                t.create_table_full(&self.store, name, schema, replace, keys, defaults, checks)
            }
            None => self.store.create_table_full(name, schema, replace, keys, defaults, checks),
        }
    }

    /// [`Store::create_staging_table_full`]: returns the staging table's name.
    pub fn create_staging_table_full(
        &mut self,
        schema: &Schema,
        keys: &[NewIndex],
        defaults: &[(String, String)],
        checks: &[NewCheck],
    ) -> Result<String> {
        match self.txn.as_mut() {
            Some(t) => t.create_staging_table_full(&self.store, schema, keys, defaults, checks),
            None => self.store.create_staging_table_full(schema, keys, defaults, checks),
        }
    }

    /// [`Store::rename_table`].
    pub fn rename_table(&mut self, from: &str, to: &str, replace: bool) -> Result<()> {
        match self.txn.as_mut() {
            Some(t) => t.rename_table(&self.store, from, to, replace),
            None => self.store.rename_table(from, to, replace),
        }
    }

    /// [`Store::drop_table`].
    pub fn drop_table(&mut self, name: &str) -> Result<()> {
        match self.txn.as_mut() {
            Some(t) => t.drop_table(&self.store, name),
            None => self.store.drop_table(name),
        }
    }

    /// [`Store::create_view`].
    pub fn create_view(&mut self, name: &str, sql: &str, replace: bool) -> Result<()> {
        match self.txn.as_mut() {
            Some(t) => t.create_view(&self.store, name, sql, replace),
            None => self.store.create_view(name, sql, replace),
        }
    }

    /// [`Store::drop_view`].
    pub fn drop_view(&mut self, name: &str) -> Result<()> {
        match self.txn.as_mut() {
            Some(t) => t.drop_view(&self.store, name),
            None => self.store.drop_view(name),
        }
    }

    /// [`Store::alter_table_all`].
    pub fn alter_table_all(&mut self, table: &str, changes: &[AlterColumn]) -> Result<()> {
        match self.txn.as_mut() {
            Some(t) => t.alter_table_all(&self.store, table, changes),
            None => self.store.alter_table_all(table, changes),
        }
    }

    /// [`Store::create_index`].
    pub fn create_index(
        &mut self,
        table: &str,
        spec: &NewIndex,
        if_not_exists: bool,
    ) -> Result<()> {
        match self.txn.as_mut() {
            Some(t) => t.create_index(&self.store, table, spec, if_not_exists),
            None => self.store.create_index(table, spec, if_not_exists),
        }
    }

    /// [`Store::drop_index`].
    pub fn drop_index(&mut self, name: &str) -> Result<()> {
        match self.txn.as_mut() {
            Some(t) => t.drop_index(&self.store, name),
            None => self.store.drop_index(name),
        }
    }
}

/// An SQL write statement in progress ([`Session::begin_write_statement`]).
#[derive(Debug)]
pub struct WriteStatement {
    /// `None`: the statement runs in a transaction of its own, committed at its end.
    savepoint: Option<Savepoint>,
}

impl Session {
    /// Starts a write statement that may read and write in several steps (SQL DML): the
    /// connection's transaction (or a new one of its own) becomes the writer first, so the
    /// statement's reads ([`Session::read_view`] after this call) see the state its writes
    /// apply to. End it with [`Session::end_write_statement`].
    pub fn begin_write_statement(&mut self) -> Result<WriteStatement> {
        if self.txn.is_none() {
            self.begin(true)?;
            return Ok(WriteStatement { savepoint: None });
        }
        let store = self.store.clone();
        let t = self.txn.as_mut().ok_or_else(no_transaction)?;
        t.ensure_writer(&store)?;
        Ok(WriteStatement { savepoint: Some(t.savepoint()) })
    }

    /// Applies one step of the current write statement.
    pub fn apply<T>(&mut self, f: impl FnOnce(&mut Transaction, &Store) -> Result<T>) -> Result<T> {
        let t = self.txn.as_mut().ok_or_else(no_transaction)?;
        f(t, &self.store)
    }

    /// Ends a write statement: on success its own transaction commits (inside an explicit
    /// transaction its changes simply stay); on failure every change it made is undone.
    pub fn end_write_statement(&mut self, stmt: WriteStatement, success: bool) -> Result<()> {
        match (stmt.savepoint, success) {
            (None, true) => self.commit(),
            (None, false) => self.rollback(),
            (Some(_), true) => Ok(()),
            (Some(mark), false) => {
                let store = self.store.clone();
                if let Some(t) = self.txn.as_mut() {
                    t.rollback_to(&store, mark);
                }
                Ok(())
            }
        }
    }
}

fn no_transaction() -> Error {
    Error::Transaction { reason: "no transaction is open".into() }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(t) = self.txn.take() {
            self.store.rollback(t);
        }
    }
}
