//! # Basalt
//!
//! An embedded columnar analytical + vector database. One [`Database`] handle stores tables
//! in Basalt's own columnar format: immutable, checksummed, memory-mapped segment files with
//! dictionary, frame-of-reference and delta encodings, plus an in-memory memtable. SQL runs
//! through Apache DataFusion on a [`Connection`] ([`Connection::sql`], [`Connection::prepare`],
//! [`Database::sql`]); see `docs/sql.md` for what is supported.
//!
//! This crate is the public API: everything a user touches is defined or re-exported here,
//! and nothing below it (`basalt-storage`, `basalt-sql`) is meant to be used directly.
//!
//! ```no_run
//! use basalt::arrow::schema::{DataType, Field, Schema};
//! use basalt::{Database, Row};
//!
//! # fn main() -> basalt::Result<()> {
//! let db = Database::open("my.db")?;
//! let people = db.create_table("people", &Schema::new(vec![
//!     Field::new("name", DataType::Utf8, false),
//!     Field::new("age", DataType::Int32, true),
//! ]))?;
//! let id = people.insert_row(Row::new().set("name", "Ada").set("age", 36))?;
//! assert_eq!(people.get(id)?.unwrap().get("name"), Some(&"Ada".into()));
//! db.close()?;
//! # Ok(())
//! # }
//! ```
//!
//! ## Durability
//! Bulk inserts (at least [`Options::bulk_insert_rows`] rows in one call) are written to a
//! synced segment and a synced manifest before `insert` returns. Smaller inserts go to the
//! memtable and, by [`Options::durability`] (or per call, [`Table::insert_with`]):
//! - [`Durability::Buffered`]: nowhere else until the next flush — a killed process loses them;
//! - [`Durability::ProcessSafe`] (default): the write-ahead log, written before returning —
//!   survives a killed process;
//! - [`Durability::PowerSafe`]: the write-ahead log, synced before returning (concurrent
//!   commits share one sync) — survives power loss.
//!
//! Memtables become segments at [`Database::flush`], [`Database::close`], when one reaches
//! [`Options::memtable_flush_rows`], or when the last handle is dropped; the log is then
//! emptied. Opening a database replays the log.

#![forbid(unsafe_code)]

mod error;
pub mod memory;
mod sql;
mod text;
mod value;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::{Field, Schema, SchemaRef};
use basalt_storage::{
    AlterColumn, MemFs, OsFs, Session, Store, StoreOptions, TableSnapshot, Transaction, Vfs,
};
use parking_lot::Mutex;

pub use basalt_storage::{
    CmpOp, CommitEvent, CommitHook, CompactionReport, CompressionPolicy, Durability, IdRange,
    IndexKind, Metric, Neighbor, NewIndex, OnConflict, Precision, Predicate, ROW_GROUP_ROWS,
    SEGMENT_FORMAT_VERSION, Scalar, StoredForm, TextHit, Tokenizer, VECTOR_FORM_KEY, round_vector,
    vector_field, vector_type,
};
pub use error::{Error, Result};
pub use sql::{SqlRows, Statement};
pub use text::{Hybrid, HybridHit};
pub use value::{Row, Value};

/// Errors of the SQL layer (parse and planning errors with positions, unsupported
/// statements, execution errors).
pub use basalt_sql::Error as SqlError;

/// Cutting SQL scripts into statements at `;` outside strings, quoted names and comments
/// (what [`Connection::sql`] does with a script; shells use it to know a statement is
/// complete and where each one starts).
pub use basalt_sql::script::{ScriptScanner, ScriptStatement, StatementEnd, split_script};

/// The Arrow crates Basalt speaks, re-exported so users build schemas and batches with the
/// exact versions Basalt was built with.
pub mod arrow {
    pub use arrow_array as array;
    pub use arrow_schema as schema;
}

/// A committed change as a change feed delivers it (one commit, its operations in order).
pub use basalt_storage::wal::{Op as ChangeOp, Record as ChangeRecord};

/// The storage error type, for matching on specific failures.
pub use basalt_storage::Error as StorageError;

/// Options for opening a database.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Open without taking the writer lock; every write fails. Several read-only handles,
    /// in this or other processes, may coexist with one writer.
    pub read_only: bool,
    /// zstd policy for segment blocks.
    pub compression: CompressionPolicy,
    /// A table's memtable becomes a segment once it holds this many rows.
    pub memtable_flush_rows: usize,
    /// Inserts of at least this many rows go straight to a new segment (durable on return).
    pub bulk_insert_rows: usize,
    /// Durability of writes that do not choose one (default: process-safe). A connection
    /// or a call may ask for a stronger level than this default, and gets it. In-memory
    /// databases have nothing to make durable: every level behaves as buffered there.
    pub durability: Durability,
    /// How long a write waits for another connection's write transaction, and an open for
    /// writing waits for a writer in another process to close, before failing with
    /// `StorageError::LockTimeout` (default 10 s; zero: an open fails at once with
    /// `StorageError::Locked`).
    pub lock_timeout: std::time::Duration,
    /// Compact small and delete-heavy segments after each explicit flush (default on).
    pub auto_compact: bool,
    /// Memory the SQL operators that hold data (sorts, joins, aggregations) may use, across
    /// all connections of this database; beyond it they spill to temporary files (in the
    /// database's `spill/` folder, or the system's temporary directory for in-memory and
    /// read-only databases) or fail with a "resources exhausted" error. Scans and imports
    /// stream and need little memory either way. Default: half the machine's memory
    /// (`None`: no limit).
    pub sql_memory_limit: Option<usize>,
    /// Longest a planned SQL statement may run (planning, execution and reading its result
    /// stream) before it fails with [`Error::Timeout`] and its work is undone; `None`
    /// (default): no limit. `Connection::set_statement_timeout` overrides it per
    /// connection. (Statements of the direct path — point reads and writes by `_id` and
    /// the like — take microseconds and are not timed.)
    pub statement_timeout: Option<std::time::Duration>,
    /// Iterations a recursive query (`WITH RECURSIVE`) may run before it fails with
    /// "recursive query stopped after N iterations" (default 1,000,000): a recursion
    /// without a stopping condition ends instead of running forever.
    pub max_recursion: usize,
    /// Open a damaged database by keeping what is intact instead of refusing it (writers
    /// only): a missing `MANIFEST` is replaced by the newest intact pending manifest or
    /// checkpoint; a damaged log is replayed up to the damage; what is given up is moved
    /// into `<db>/salvaged/<n>/`, never deleted. [`Database::salvage_report`] says what
    /// was done. Default off: damage is an error naming the file.
    pub salvage: bool,
}

impl Default for Options {
    fn default() -> Self {
        let s = StoreOptions::default();
        Self {
            read_only: false,
            compression: s.write.compression,
            memtable_flush_rows: s.memtable_flush_rows,
            bulk_insert_rows: s.bulk_insert_rows,
            durability: s.durability,
            lock_timeout: s.lock_timeout,
            auto_compact: s.auto_compact,
            sql_memory_limit: default_memory_limit(),
            statement_timeout: None,
            max_recursion: basalt_sql::rules::recursion::DEFAULT_MAX_RECURSION,
            salvage: false,
        }
    }
}

/// Half the machine's physical memory (Linux; `None` where it cannot be read).
fn default_memory_limit() -> Option<usize> {
    basalt_storage::machine_memory().map(|m| m / 2)
}

impl Options {
    fn store(&self) -> StoreOptions {
        let mut s = StoreOptions {
            read_only: self.read_only,
            memtable_flush_rows: self.memtable_flush_rows.max(1),
            bulk_insert_rows: self.bulk_insert_rows.max(1),
            durability: self.durability,
            lock_timeout: self.lock_timeout,
            auto_compact: self.auto_compact,
            salvage: self.salvage,
            ..StoreOptions::default()
        };
        s.write.compression = self.compression;
        s
    }
}

/// A database: a directory on disk, or `:memory:`. Cheap to clone and shareable across
/// threads; all clones are one database. Dropping the last clone flushes (see
/// [`Database::close`] to observe errors).
#[derive(Debug, Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    store: Arc<Store>,
    path: Option<PathBuf>,
    runtime: sql::Runtime,
    sql_env: Arc<basalt_sql::connection::SharedRuntime>,
    /// Exact-dedupe indexes of memory stores, by store name: shared by every handle of a
    /// store on this database (see `memory::DedupeIndex`).
    memory_dedupe: memory::DedupeSlots,
    /// `Options::statement_timeout`.
    statement_timeout: Option<std::time::Duration>,
}

impl Database {
    /// Opens the database at `path` for writing, creating it if needed. Fails with
    /// [`StorageError::Locked`] if another handle (in any process) is writing it.
    pub fn open(path: impl AsRef<Path>) -> Result<Database> {
        Self::open_with(path, Options::default())
    }

    /// Opens the database at `path` for reading only; another process may be writing it.
    /// The handle sees the data flushed when it was opened.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Database> {
        Self::open_with(path, Options { read_only: true, ..Options::default() })
    }

    /// Opens the database at `path` with explicit options.
    pub fn open_with(path: impl AsRef<Path>, options: Options) -> Result<Database> {
        let path = path.as_ref();
        let vfs: Arc<dyn Vfs> = Arc::new(OsFs);
        let store = Arc::new(Store::open(vfs, path, path, options.store())?);
        Ok(Database::on_store(store, Some(path.to_path_buf()), &options))
    }

    /// Where SQL operators spill: the database's own folder for a writer (cleaned up at the
    /// next writer open if a process dies mid-query), the system's temporary directory
    /// otherwise.
    fn spill_dir(path: Option<&Path>, options: &Options) -> Option<PathBuf> {
        path.filter(|_| !options.read_only).map(|p| p.join(basalt_storage::owned::SPILL_DIR))
    }

    /// The handle of an opened store.
    fn on_store(store: Arc<Store>, path: Option<PathBuf>, options: &Options) -> Database {
        let spill = Self::spill_dir(path.as_deref(), options);
        // Storage checks every written row against the tables' CHECK constraints through
        // the SQL layer's evaluator.
        store.set_check_evaluator(Arc::new(basalt_sql::checks::Evaluator::default()));
        Database {
            inner: Arc::new(Inner {
                store,
                path,
                runtime: sql::Runtime::default(),
                sql_env: Arc::new({
                    let env = basalt_sql::connection::SharedRuntime::new(options.sql_memory_limit)
                        .with_max_recursion(options.max_recursion);
                    match spill {
                        Some(dir) => env.with_spill_dir(dir),
                        None => env,
                    }
                }),
                memory_dedupe: Default::default(),
                statement_timeout: options.statement_timeout,
            }),
        }
    }

    /// A database on `vfs` (tests: fault injection), with `options` as given.
    #[cfg(test)]
    pub(crate) fn open_on_vfs(vfs: Arc<dyn Vfs>, options: Options) -> Result<Database> {
        let store =
            Arc::new(Store::open(vfs, Path::new("/"), Path::new(":test:"), options.store())?);
        Ok(Database::on_store(store, None, &options))
    }

    /// A new, empty database held in memory (same code paths and format as on disk).
    pub fn open_in_memory() -> Result<Database> {
        Self::open_in_memory_with(Options::default())
    }

    /// An in-memory database with explicit options.
    pub fn open_in_memory_with(options: Options) -> Result<Database> {
        let vfs: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let options = Options { durability: Durability::Buffered, read_only: false, ..options };
        let store =
            Arc::new(Store::open(vfs, Path::new("/"), Path::new(":memory:"), options.store())?);
        Ok(Database::on_store(store, None, &options))
    }

    /// The directory, or `None` for an in-memory database.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    /// Creates a table with the given columns (every table also has `_id`).
    pub fn create_table(&self, name: &str, schema: &Schema) -> Result<Table> {
        self.inner.store.create_table(name, schema)?;
        Ok(Table { db: self.clone(), name: name.to_string(), conn: None })
    }

    /// Creates a table with a primary key, unique keys and indexes, all in one catalog
    /// change. The primary key's columns become `NOT NULL`. A write that would give two
    /// rows the same non-NULL key fails with [`StorageError::UniqueViolation`] and writes
    /// nothing (see [`Error::is_constraint_violation`]).
    pub fn create_table_with_keys(
        &self,
        name: &str,
        schema: &Schema,
        keys: &[NewIndex],
    ) -> Result<Table> {
        self.inner.store.create_table_with_keys(name, schema, false, keys)?;
        Ok(Table { db: self.clone(), name: name.to_string(), conn: None })
    }

    /// Drops a key or index by name (what `DROP INDEX` does).
    pub fn drop_index(&self, name: &str) -> Result<()> {
        Ok(self.inner.store.drop_index(name)?)
    }

    /// Starts a table that appears under its name with all its rows or not at all: fill
    /// the returned hidden table (through any connection, in a transaction or not), then
    /// [`StagedTable::publish`] it. Dropped unpublished, or after a crash at the next
    /// writer open, it leaves nothing behind.
    pub fn stage_table(&self, schema: &Schema) -> Result<StagedTable> {
        let name = self.inner.store.create_staging_table(schema)?;
        Ok(StagedTable { db: self.clone(), name, published: false })
    }

    /// Drops a table and deletes its files.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        Ok(self.inner.store.drop_table(name)?)
    }

    /// Table names, sorted.
    pub fn list_tables(&self) -> Vec<String> {
        let mut names = self.inner.store.snapshot().table_names();
        names.retain(|n| !n.starts_with(basalt_sql::RESERVED_PREFIX));
        names
    }

    /// A handle on an existing table; every write through it commits on its own.
    pub fn table(&self, name: &str) -> Result<Table> {
        self.inner.store.snapshot().table(name)?;
        Ok(Table { db: self.clone(), name: name.to_string(), conn: None })
    }

    /// Runs SQL on a fresh connection (see [`Connection::sql`]); a shortcut for statements
    /// that need no transaction across calls.
    pub fn sql(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        self.connect().sql(sql)
    }

    /// A new connection: it carries its own transaction (see [`Connection`]).
    pub fn connect(&self) -> Connection {
        Connection {
            db: self.clone(),
            session: Arc::new(Mutex::new(Session::new(self.inner.store.clone()))),
            sql: Arc::new(sql::SqlSlot::default()),
            cancel: Arc::default(),
        }
    }

    /// Creates a durable change feed that starts after the newest commit; returns its
    /// position (an LSN). Only commits made with a log (process-safe or power-safe) appear.
    pub fn create_feed(&self, name: &str) -> Result<u64> {
        Ok(self.inner.store.create_feed(name)?)
    }

    /// Up to `max` committed changes after the feed's acknowledged position, in commit order.
    pub fn read_feed(&self, name: &str, max: usize) -> Result<Vec<(u64, ChangeRecord)>> {
        Ok(self.inner.store.read_feed(name, max)?)
    }

    /// Acknowledges a feed up to `lsn` (durably); the log before it may then be released.
    pub fn ack_feed(&self, name: &str, lsn: u64) -> Result<()> {
        Ok(self.inner.store.ack_feed(name, lsn)?)
    }

    /// The change feeds and their acknowledged positions.
    pub fn list_feeds(&self) -> Vec<(String, u64)> {
        self.inner.store.feeds()
    }

    /// Whether this handle was opened read-only (every write fails).
    pub fn is_read_only(&self) -> bool {
        self.inner.store.options().read_only
    }

    /// What opening with [`Options::salvage`] did, a line per step (what was adopted,
    /// dropped and moved aside); empty when there was nothing to salvage.
    pub fn salvage_report(&self) -> &[String] {
        self.inner.store.salvage_report()
    }

    /// Removes a change feed.
    pub fn drop_feed(&self, name: &str) -> Result<()> {
        Ok(self.inner.store.drop_feed(name)?)
    }

    /// Runs `hook` after every commit (outside all locks), with what the commit changed.
    pub fn set_commit_hook(&self, hook: Option<CommitHook>) {
        self.inner.store.set_commit_hook(hook)
    }

    /// Creates a named checkpoint of the whole database as it is now; its files are kept
    /// (compaction and drops leave them alone) until the checkpoint is dropped.
    pub fn checkpoint(&self, name: &str) -> Result<()> {
        Ok(self.inner.store.checkpoint(name)?)
    }

    /// Restores the database to a checkpoint; everything committed since is discarded.
    /// `_id`s handed out since are not reused.
    pub fn restore(&self, name: &str) -> Result<()> {
        Ok(self.inner.store.restore(name)?)
    }

    /// Restores only `tables` to a checkpoint (their rows, schemas and full-text indexes);
    /// every other table, every view and every change feed stays as it is. A table the
    /// checkpoint lacks is an error and nothing changes.
    pub fn restore_tables(&self, name: &str, tables: &[&str]) -> Result<()> {
        Ok(self.inner.store.restore_tables(name, tables)?)
    }

    /// Drops a checkpoint and the files only it kept.
    pub fn drop_checkpoint(&self, name: &str) -> Result<()> {
        Ok(self.inner.store.drop_checkpoint(name)?)
    }

    /// Names of the checkpoints.
    pub fn list_checkpoints(&self) -> Result<Vec<String>> {
        Ok(self.inner.store.list_checkpoints()?)
    }

    /// Persists every table's memtable to segment files.
    pub fn flush(&self) -> Result<()> {
        Ok(self.inner.store.flush()?)
    }

    /// Flushes and releases the writer lock. Other clones of this handle fail with
    /// [`StorageError::Closed`] afterwards.
    pub fn close(self) -> Result<()> {
        Ok(self.inner.store.close()?)
    }
}

/// A new table being filled under a hidden name (see [`Database::stage_table`]).
#[derive(Debug)]
pub struct StagedTable {
    db: Database,
    name: String,
    published: bool,
}

impl StagedTable {
    /// The hidden name to write the rows under (`Connection::table`, `Database::table`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Renames the table into place as `name`, with every row committed to it so far, in
    /// one catalog change. Fails (dropping the staged rows) if `name` is taken or invalid.
    pub fn publish(mut self, name: &str) -> Result<Table> {
        self.published = true;
        let store = &self.db.inner.store;
        if let Err(e) = store.rename_table(&self.name, name, false) {
            let _ = store.drop_table(&self.name);
            return Err(e.into());
        }
        Ok(Table { db: self.db.clone(), name: name.to_string(), conn: None })
    }
}

impl Drop for StagedTable {
    fn drop(&mut self) {
        if !self.published {
            let _ = self.db.inner.store.drop_table(&self.name);
        }
    }
}

/// Interrupts the statements of one connection from anywhere (see
/// [`Connection::interrupter`]).
#[derive(Debug, Clone)]
pub struct Interrupter(Arc<sql::Cancel>);

impl Interrupter {
    /// Stops the statement the connection is running, as [`Connection::interrupt`] does.
    pub fn interrupt(&self) {
        self.0.interrupt();
    }
}

/// A connection: the unit of transactions. Outside a transaction every write commits on
/// its own; between [`Connection::begin`] and [`Connection::commit`] /
/// [`Connection::rollback`], the connection's tables read their own uncommitted writes, other
/// connections see none of them, and commit makes all of them visible at once (atomically
/// across tables). See ARCHITECTURE.md (*Transactions*) for the isolation level. Dropping the
/// last clone of a connection rolls back its open transaction.
#[derive(Debug, Clone)]
pub struct Connection {
    db: Database,
    session: Arc<Mutex<Session>>,
    sql: Arc<sql::SqlSlot>,
    /// Interrupts and the statement timeout.
    cancel: Arc<sql::Cancel>,
}

/// Maps the storage layer's transaction-order errors to [`Error::Transaction`].
fn txn_error(e: StorageError) -> Error {
    match e {
        StorageError::Transaction { reason } => Error::Transaction(reason),
        e => Error::Storage(e),
    }
}

impl Connection {
    /// A handle on a table whose reads and writes go through this connection.
    pub fn table(&self, name: &str) -> Result<Table> {
        // As this connection sees it: a table its open transaction created counts.
        self.session.lock().table(name)?;
        Ok(Table { db: self.db.clone(), name: name.to_string(), conn: Some(self.session.clone()) })
    }

    /// [`Database::create_table`] through this connection: inside its open transaction
    /// (seen by others when it commits, undone by rollback), or committed on its own.
    pub fn create_table(&self, name: &str, schema: &Schema) -> Result<Table> {
        self.create_table_with_keys(name, schema, &[])
    }

    /// [`Database::create_table_with_keys`] through this connection (see
    /// [`Connection::create_table`]).
    pub fn create_table_with_keys(
        &self,
        name: &str,
        schema: &Schema,
        keys: &[NewIndex],
    ) -> Result<Table> {
        self.session.lock().create_table_full(name, schema, false, keys, &[], &[])?;
        self.table(name)
    }

    /// [`Database::drop_table`] through this connection: inside its open transaction the
    /// files go when it commits.
    pub fn drop_table(&self, name: &str) -> Result<()> {
        Ok(self.session.lock().drop_table(name)?)
    }

    /// [`Database::drop_index`] through this connection.
    pub fn drop_index(&self, name: &str) -> Result<()> {
        Ok(self.session.lock().drop_index(name)?)
    }

    /// Starts a transaction. Its reads come from the state at this moment until its first
    /// write, which makes it the (single) writer until it ends.
    pub fn begin(&self) -> Result<()> {
        self.session.lock().begin(false).map_err(txn_error)
    }

    /// Starts a transaction that is the writer from the start (waiting for another writer
    /// up to the lock timeout): serializable.
    pub fn begin_immediate(&self) -> Result<()> {
        self.session.lock().begin(true).map_err(txn_error)
    }

    /// Commits the open transaction.
    pub fn commit(&self) -> Result<()> {
        self.session.lock().commit().map_err(txn_error)
    }

    /// Rolls back the open transaction.
    pub fn rollback(&self) -> Result<()> {
        self.session.lock().rollback().map_err(txn_error)
    }

    /// Sets a savepoint (SQL `SAVEPOINT name`). Without an open transaction it starts one,
    /// which releasing this savepoint commits.
    pub fn savepoint(&self, name: &str) -> Result<()> {
        self.session.lock().savepoint(name).map_err(txn_error)
    }

    /// Forgets the newest savepoint named `name` and every later one, keeping their changes
    /// (SQL `RELEASE name`); commits when that savepoint started the transaction.
    pub fn release_savepoint(&self, name: &str) -> Result<()> {
        self.session.lock().release_savepoint(name).map_err(txn_error)
    }

    /// Undoes every change since the newest savepoint named `name`, which stays set (SQL
    /// `ROLLBACK TO name`); the transaction stays open.
    pub fn rollback_to_savepoint(&self, name: &str) -> Result<()> {
        self.session.lock().rollback_to_savepoint(name).map_err(txn_error)
    }

    /// Whether a transaction is open.
    pub fn in_transaction(&self) -> bool {
        self.session.lock().in_transaction()
    }

    /// Durability of this connection's commits (transactions begun later and auto-commit
    /// writes); `None` returns to the database default.
    pub fn set_durability(&self, durability: Option<Durability>) {
        self.session.lock().set_durability(durability);
    }

    fn sql_conn(&self) -> Result<Arc<basalt_sql::SqlConnection>> {
        self.sql.get(&self.session, &self.db.inner.sql_env)
    }

    /// Runs the SQL statements in `sql` in order and returns the last one's result. Queries
    /// return their rows; `INSERT` / `UPDATE` / `DELETE` one row with the `count` of rows
    /// changed; DDL and `BEGIN` / `COMMIT` / `ROLLBACK` nothing. Each statement is atomic;
    /// at the first failing one the call stops (the statements before it stay done, and an
    /// open transaction stays open). `BEGIN` in SQL is this connection's transaction.
    ///
    /// Blocks; inside an async runtime use [`Connection::sql_async`].
    pub fn sql(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        // One statement the direct path takes runs right here, outside the runtime.
        let conn = self.sql_conn()?;
        if let Some(b) = sql::unwinding(|| conn.execute_direct(sql))? {
            return Ok(b);
        }
        let rt = &self.db.inner.runtime;
        sql::on_deep_stack(sql::may_be_deep(sql), || rt.block_on(self.sql_async(sql)))?
    }

    /// The async form of [`Connection::sql`].
    pub async fn sql_async(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let conn = self.sql_conn()?;
        let mut watch = self.watch()?;
        let run = watch.run(sql::guarded(async { Ok(conn.execute(sql).await?) }));
        sql::DeepStack::new(sql::may_be_deep(sql), run).await
    }

    /// Stops the statement this connection is running (from another thread): it fails
    /// with [`Error::Interrupted`] and its work is undone; a transaction it ran in stays
    /// open. Statements started afterwards run normally.
    pub fn interrupt(&self) {
        self.cancel.interrupt();
    }

    /// A handle that interrupts this connection's statements ([`Connection::interrupt`])
    /// without keeping the connection or its database open (for a signal handler's thread).
    pub fn interrupter(&self) -> Interrupter {
        Interrupter(self.cancel.clone())
    }

    /// Sets this connection's statement timeout (`None`: no limit), overriding
    /// `Options::statement_timeout`.
    pub fn set_statement_timeout(&self, timeout: Option<std::time::Duration>) {
        self.cancel.set_timeout(timeout);
    }

    /// The watch of a statement this connection starts now.
    pub(crate) fn watch(&self) -> Result<sql::Watch> {
        self.cancel.watch(self.db.inner.statement_timeout, &self.db.inner.runtime)
    }

    /// Makes Arrow data a read-only table of this connection only: SQL on this connection
    /// sees `name` (joins with stored tables included) until [`Connection::unregister`] or
    /// the connection's last clone is dropped; nothing is copied or persisted. A second
    /// registration of the name replaces the first; a stored table or view of the same name
    /// hides it.
    pub fn register(&self, name: &str, schema: SchemaRef, batches: Vec<RecordBatch>) -> Result<()> {
        Ok(self.sql_conn()?.register_batches(name, schema, batches)?)
    }

    /// Removes what [`Connection::register`] (or `CREATE TEMP VIEW`) made; false when
    /// `name` was not registered.
    pub fn unregister(&self, name: &str) -> Result<bool> {
        Ok(self.sql_conn()?.unregister(name)?)
    }

    /// Like [`Connection::sql`], with the last statement's rows streamed batch by batch
    /// (the query reads the data as of this call).
    pub fn sql_stream(&self, sql: &str) -> Result<SqlRows> {
        let rt = &self.db.inner.runtime;
        let deep = sql::may_be_deep(sql);
        let stream = sql::on_deep_stack(deep, || rt.block_on(self.sql_stream_async(sql)))??;
        Ok(SqlRows { stream, db: self.db.clone(), deep })
    }

    /// The async form of [`Connection::sql_stream`]: a stream of Arrow record batches.
    pub async fn sql_stream_async(
        &self,
        sql: &str,
    ) -> Result<basalt_sql::datafusion::execution::SendableRecordBatchStream> {
        let conn = self.sql_conn()?;
        // One watch for planning and for the stream: the timeout counts from the start.
        let mut watch = self.watch()?;
        let run = watch.run(sql::guarded(async { Ok(conn.execute_stream(sql).await?) }));
        let stream = sql::DeepStack::new(sql::may_be_deep(sql), run).await?;
        Ok(watch.stream(stream))
    }

    /// Parses and plans one statement with `$1`, `$2`, … placeholders, to run many times
    /// with [`Statement::execute`].
    pub fn prepare(&self, sql: &str) -> Result<Statement> {
        // A statement the direct path takes as it is needs no planning (and no runtime).
        let conn = self.sql_conn()?;
        let deep = sql::may_be_deep(sql);
        if let Some(prepared) = sql::unwinding(|| conn.prepare_direct(sql))? {
            return Ok(Statement { conn: self.clone(), prepared: Arc::new(prepared), deep });
        }
        let rt = &self.db.inner.runtime;
        sql::on_deep_stack(deep, || rt.block_on(self.prepare_async(sql)))?
    }

    /// The async form of [`Connection::prepare`].
    pub async fn prepare_async(&self, sql: &str) -> Result<Statement> {
        let conn = self.sql_conn()?;
        let deep = sql::may_be_deep(sql);
        let mut watch = self.watch()?;
        let run = watch.run(sql::guarded(async { Ok(conn.prepare(sql).await?) }));
        let prepared = sql::DeepStack::new(deep, run).await?;
        Ok(Statement { conn: self.clone(), prepared: Arc::new(prepared), deep })
    }

    /// Turns filter pushdown into table scans on or off for this connection's SQL (on by
    /// default). Results never change; this exists to compare plans and results.
    pub fn set_filter_pushdown(&self, on: bool) -> Result<()> {
        self.sql_conn()?.set_pushdown(on);
        Ok(())
    }

    /// Turns this connection's SQL fast paths on or off (on by default): the direct path
    /// that runs simple single-table statements — point lookups and `_id IN` lists,
    /// filtered and limited column reads, `INSERT … VALUES`, `UPDATE` / `DELETE` with such
    /// filters — on storage without DataFusion planning. Results never change; off, every
    /// statement is planned by DataFusion (to compare results and plans).
    pub fn set_fast_paths(&self, on: bool) -> Result<()> {
        self.sql_conn()?.set_fast_paths(on);
        Ok(())
    }

    /// How many of this connection's SQL statements took the direct path (see
    /// [`Connection::set_fast_paths`]); a statistic for checking which statements do.
    pub fn fast_path_statements(&self) -> Result<u64> {
        Ok(self.sql_conn()?.fast_path_statements())
    }

    /// How many of this connection's SQL statements DataFusion planned (statements on the
    /// direct path, prepared or not, are not planned); a statistic for checking which
    /// statements are.
    pub fn planned_statements(&self) -> Result<u64> {
        Ok(self.sql_conn()?.planned_statements())
    }

    /// How many runs of this connection's prepared queries executed the physical plan of an
    /// earlier run again (nothing was committed in between); a statistic for checking
    /// which queries do.
    pub fn reused_physical_plans(&self) -> Result<u64> {
        Ok(self.sql_conn()?.reused_physical_plans())
    }

    /// How many runs of this connection's prepared statements whose parameters are only the
    /// `_id` keys of their WHERE clause (`_id = $1`, `_id IN ($1, …)`) went straight to the
    /// lookup or write without classifying the statement again; a statistic for checking
    /// which statements do.
    pub fn keyed_statement_runs(&self) -> Result<u64> {
        Ok(self.sql_conn()?.keyed_runs())
    }

    /// How many runs of this connection's prepared writes without parameters (`INSERT …
    /// VALUES` of literals, `UPDATE` / `DELETE` with literal values) went straight to
    /// storage without classifying the statement again; a statistic for checking which
    /// statements do.
    pub fn kept_write_runs(&self) -> Result<u64> {
        Ok(self.sql_conn()?.kept_write_runs())
    }

    /// How many runs of this connection's prepared `INSERT … VALUES` statements with
    /// parameters went straight to storage converting only the parameters' values (the
    /// statement classified once, at its first direct run); a statistic for checking which
    /// statements do.
    pub fn insert_template_runs(&self) -> Result<u64> {
        Ok(self.sql_conn()?.insert_template_runs())
    }
}

/// A key or index of a table ([`Table::indexes`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// Its name.
    pub name: String,
    /// Index, unique key or primary key.
    pub kind: IndexKind,
    /// Its columns, in key order.
    pub columns: Vec<String>,
}

/// What [`Table::upsert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Upserted {
    /// Rows inserted (their keys were free).
    pub inserted: u64,
    /// Rows updated (their keys were taken).
    pub updated: u64,
}

/// A handle on one table. Reads see the table as of each call (or the connection's open
/// transaction); writes commit on their own unless the handle came from a [`Connection`]
/// with an open transaction.
#[derive(Debug, Clone)]
pub struct Table {
    db: Database,
    name: String,
    conn: Option<Arc<Mutex<Session>>>,
}

impl Table {
    fn snap(&self) -> Result<Arc<TableSnapshot>> {
        match &self.conn {
            Some(c) => Ok(c.lock().table(&self.name)?),
            None => Ok(self.db.inner.store.snapshot().table(&self.name)?.clone()),
        }
    }

    /// Runs a write: inside the connection's transaction (atomic as a statement), or as its
    /// own commit.
    fn write<T>(
        &self,
        f: impl FnOnce(&mut Transaction, &Store) -> basalt_storage::Result<T>,
    ) -> Result<T> {
        let store = &self.db.inner.store;
        match &self.conn {
            Some(c) => Ok(c.lock().write(f)?),
            None => Ok(store.autocommit(store.default_durability(), f)?),
        }
    }

    /// The table's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The table's id: what [`ChangeOp`]s of a change feed name it by (stable across
    /// renames, never reused).
    pub fn id(&self) -> Result<u64> {
        Ok(self.snap()?.id())
    }

    /// The user columns (what `SELECT *` shows; `_id` not included).
    pub fn schema(&self) -> Result<SchemaRef> {
        Ok(self.snap()?.schema().user_schema())
    }

    /// Number of rows.
    pub fn count(&self) -> Result<u64> {
        Ok(self.snap()?.count())
    }

    /// Inserts a batch whose keys may be taken already, resolving each duplicate as
    /// `mode` says: skip the row, or replace the rows that hold its keys (what `INSERT OR
    /// IGNORE` / `ON CONFLICT DO NOTHING` and `INSERT OR REPLACE` do). Returns how many
    /// rows were inserted.
    pub fn insert_on_conflict(&self, batch: &RecordBatch, mode: &OnConflict) -> Result<u64> {
        self.write(|t, s| t.insert_on_conflict(s, &self.name, std::slice::from_ref(batch), mode))
    }

    /// Inserts a batch, updating instead the rows that already hold a row's key: what
    /// `INSERT … ON CONFLICT (key) DO UPDATE SET c = excluded.c, …` does for the columns in
    /// `update`. `key` names the columns of a primary or unique key (any order); a row
    /// whose key no live row has is inserted (a duplicate of another key is an error, as
    /// in PostgreSQL); two rows of the batch with one key are refused. `update` empty:
    /// conflicting rows are left alone (`DO NOTHING`). One statement: all of it or, on
    /// error, nothing.
    pub fn upsert(&self, batch: &RecordBatch, key: &[&str], update: &[&str]) -> Result<Upserted> {
        let key: Vec<String> = key.iter().map(|c| c.to_string()).collect();
        let name = self.name.clone();
        self.write(|t, s| {
            let (fresh, ids, hits) =
                t.split_conflicts(s, &name, std::slice::from_ref(batch), &key)?;
            let inserted = if fresh.is_empty() { 0 } else { t.insert(s, &name, &fresh)?.count };
            let mut updated = 0;
            if !ids.is_empty() && !update.is_empty() {
                let mut at = 0;
                for h in &hits {
                    let schema = h.schema();
                    let cols = update
                        .iter()
                        .map(|c| {
                            schema.index_of(c).map_err(|_| StorageError::ColumnNotFound {
                                table: name.clone(),
                                column: c.to_string(),
                            })
                        })
                        .collect::<basalt_storage::Result<Vec<_>>>()?;
                    let values = h
                        .project(&cols)
                        .map_err(|e| StorageError::arrow(format!("upsert into '{name}'"), e))?;
                    let n = h.num_rows();
                    updated += t.update(s, &name, &ids[at..at + n], &values)?;
                    at += n;
                }
            }
            Ok(Upserted { inserted, updated })
        })
    }

    /// Adds a key or index (what `CREATE [UNIQUE] INDEX` does); a unique one is checked
    /// against the rows first.
    pub fn create_index(&self, index: &NewIndex) -> Result<()> {
        match &self.conn {
            Some(c) => Ok(c.lock().create_index(&self.name, index, false)?),
            None => Ok(self.db.inner.store.create_index(&self.name, index, false)?),
        }
    }

    /// Changes the table's columns: inside the connection's open transaction when the
    /// handle came from one, else committed on its own.
    fn alter(&self, change: AlterColumn) -> Result<()> {
        let changes = std::slice::from_ref(&change);
        match &self.conn {
            Some(c) => Ok(c.lock().alter_table_all(&self.name, changes)?),
            None => Ok(self.db.inner.store.alter_table_all(&self.name, changes)?),
        }
    }

    /// The table's primary key, unique keys and indexes, in creation order.
    pub fn indexes(&self) -> Result<Vec<Index>> {
        let t = self.snap()?;
        let schema = t.schema();
        Ok(t.indexes()
            .iter()
            .map(|d| Index {
                name: d.name.clone(),
                kind: d.kind,
                columns: d
                    .columns
                    .iter()
                    .filter_map(|&c| schema.position_of_id(c))
                    .map(|p| schema.full_schema().field(p).name().clone())
                    .collect(),
            })
            .collect())
    }

    /// Inserts a batch. Columns are matched by name; absent nullable columns become NULL.
    /// Returns the `_id`s assigned (consecutive).
    pub fn insert(&self, batch: &RecordBatch) -> Result<IdRange> {
        self.insert_batches(std::slice::from_ref(batch))
    }

    /// Inserts several batches as one unit: all are validated before anything is written.
    pub fn insert_batches(&self, batches: &[RecordBatch]) -> Result<IdRange> {
        let filled = self.fill_defaults(batches)?;
        let batches = filled.as_deref().unwrap_or(batches);
        self.write(|t, s| t.insert(s, &self.name, batches))
    }

    /// The table's column defaults: column name and the SQL text of its default.
    pub fn column_defaults(&self) -> Result<Vec<(String, String)>> {
        Ok(self.snap()?.column_defaults())
    }

    /// The table's CHECK constraints: name and condition (SQL text, columns quoted), in
    /// creation order. Every write is checked against them; a row that makes one FALSE is
    /// refused with [`StorageError::CheckViolation`].
    pub fn check_constraints(&self) -> Result<Vec<(String, String)>> {
        Ok(self.snap()?.checks().iter().map(|c| (c.name.clone(), c.sql.clone())).collect())
    }

    /// `batches` with the columns they leave out that have a default filled with it (the
    /// default evaluated once per call, as SQL evaluates it once per statement); `None` when
    /// nothing is left out that has one.
    fn fill_defaults(&self, batches: &[RecordBatch]) -> Result<Option<Vec<RecordBatch>>> {
        let snap = self.snap()?;
        let defaults = snap.column_defaults();
        let missing = |b: &RecordBatch| {
            defaults.iter().any(|(c, _)| b.schema().column_with_name(c).is_none())
        };
        if defaults.is_empty() || !batches.iter().any(missing) {
            return Ok(None);
        }
        let schema = snap.schema().full_schema().clone();
        let mut values: std::collections::HashMap<&str, arrow_array::ArrayRef> =
            std::collections::HashMap::new();
        let mut out = Vec::with_capacity(batches.len());
        for b in batches {
            let mut fields: Vec<Field> =
                b.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
            let mut columns = b.columns().to_vec();
            for (column, sql) in &defaults {
                if b.schema().column_with_name(column).is_some() {
                    continue;
                }
                let Ok(field) = schema.field_with_name(column) else { continue };
                if !values.contains_key(column.as_str()) {
                    let r = self.db.connect().sql(&format!("SELECT {sql}"))?;
                    let one = r.first().filter(|b| b.num_rows() == 1).ok_or_else(|| {
                        Error::InvalidValue {
                            table: self.name.clone(),
                            column: column.clone(),
                            reason: format!("its default {sql} gave no value"),
                        }
                    })?;
                    let options = arrow_cast::CastOptions { safe: false, ..Default::default() };
                    let v =
                        arrow_cast::cast_with_options(one.column(0), field.data_type(), &options)
                            .map_err(|e| Error::InvalidValue {
                            table: self.name.clone(),
                            column: column.clone(),
                            reason: format!("its default {sql}: {e}"),
                        })?;
                    values.insert(column.as_str(), v);
                }
                let zeros = arrow_array::UInt32Array::from(vec![0u32; b.num_rows()]);
                let v = arrow_select::take::take(values[column.as_str()].as_ref(), &zeros, None)
                    .map_err(|e| {
                        basalt_storage::Error::arrow(format!("table '{}'", self.name), e)
                    })?;
                fields.push(field.clone());
                columns.push(v);
            }
            out.push(
                RecordBatch::try_new_with_options(
                    Arc::new(Schema::new(fields)),
                    columns,
                    &arrow_array::RecordBatchOptions::new().with_row_count(Some(b.num_rows())),
                )
                .map_err(|e| basalt_storage::Error::arrow(format!("table '{}'", self.name), e))?,
            );
        }
        Ok(Some(out))
    }

    /// Inserts batches with an explicit durability level for this write.
    /// Outside a transaction only; inside one, the transaction's durability applies.
    pub fn insert_with(&self, batches: &[RecordBatch], durability: Durability) -> Result<IdRange> {
        if self.conn.as_ref().is_some_and(|c| c.lock().in_transaction()) {
            return self.insert_batches(batches);
        }
        let filled = self.fill_defaults(batches)?;
        let batches = filled.as_deref().unwrap_or(batches);
        Ok(self.db.inner.store.insert_with(&self.name, batches, durability)?)
    }

    /// Inserts one row; returns its `_id`.
    pub fn insert_row(&self, row: Row) -> Result<u64> {
        Ok(self.insert_rows(std::slice::from_ref(&row))?.first)
    }

    /// Inserts rows as one unit.
    pub fn insert_rows(&self, rows: &[Row]) -> Result<IdRange> {
        let batch = self.rows_to_batch(rows)?;
        self.insert(&batch)
    }

    /// Adds a (nullable, or the table must be empty) column at the end; existing rows
    /// read NULL for it. No data is rewritten.
    pub fn add_column(&self, field: Field) -> Result<()> {
        self.alter(AlterColumn::Add(field))
    }

    /// Drops a column. No data is rewritten; its space returns when segments are compacted.
    pub fn drop_column(&self, name: &str) -> Result<()> {
        self.alter(AlterColumn::Drop(name.to_string()))
    }

    /// Renames a column (same data, type and position).
    pub fn rename_column(&self, from: &str, to: &str) -> Result<()> {
        self.alter(AlterColumn::Rename { from: from.to_string(), to: to.to_string() })
    }

    /// Rewrites this table's small and delete-heavy segments so deleted rows and dropped
    /// columns stop taking space; readers are not blocked. (Explicit flushes also do this
    /// automatically unless [`Options::auto_compact`] is off.)
    pub fn compact(&self) -> Result<CompactionReport> {
        Ok(self.db.inner.store.compact(&self.name, true)?)
    }

    /// Deletes the row with this `_id`; false if there is none.
    pub fn delete(&self, id: u64) -> Result<bool> {
        Ok(self.delete_many(&[id])? == 1)
    }

    /// Deletes the rows with these `_id`s (missing ones are ignored) as one commit; returns
    /// how many were deleted.
    pub fn delete_many(&self, ids: &[u64]) -> Result<u64> {
        self.write(|t, s| t.delete(s, &self.name, ids))
    }

    /// Sets the columns named in `row` on the row with this `_id` (other columns and `_id`
    /// keep their values); false if there is no such row.
    pub fn update(&self, id: u64, row: Row) -> Result<bool> {
        let batch = self.rows_to_batch(std::slice::from_ref(&row))?;
        Ok(self.write(|t, s| t.update(s, &self.name, &[id], &batch))? == 1)
    }

    /// Deletes every row where `predicate` is true, as one commit; returns how many.
    pub fn delete_where(&self, predicate: &Predicate) -> Result<u64> {
        self.write(|t, s| t.delete_where(s, &self.name, predicate))
    }

    /// Sets the columns named in `row` on every row where `predicate` is true, as one
    /// commit; returns how many rows were updated.
    pub fn update_where(&self, predicate: &Predicate, row: Row) -> Result<u64> {
        let batch = self.rows_to_batch(std::slice::from_ref(&row))?;
        self.write(|t, s| t.update_where(s, &self.name, predicate, &batch))
    }

    /// The named columns of the rows where `predicate` is true. Row groups that zone maps
    /// rule out are not read.
    pub fn scan_where(&self, columns: &[&str], predicate: &Predicate) -> Result<Scan> {
        let snap = self.snap()?;
        let proj = snap.resolve(columns)?;
        Ok(Scan { inner: snap.scan_filtered(&proj, Some(predicate.clone()))? })
    }

    /// The `k` rows whose `VECTOR(D)` column `column` is closest to `query` under `metric`,
    /// closest first; ties in distance go to the smaller `_id`. Exact: every live row is
    /// compared (row groups in parallel, memtable rows included). Rows with a NULL vector are
    /// never returned, nor, under [`Metric::Cosine`], rows whose vector is zero (they have no
    /// cosine distance; SQL's `cosine_distance` is NULL for them). `k = 0` returns nothing;
    /// a `k` larger than the table returns every candidate.
    ///
    /// Errors ([`StorageError::VectorQuery`]): a query of the wrong dimension, with NaN or
    /// infinite components, or a zero query under cosine; an unknown or non-vector column.
    pub fn topk(
        &self,
        column: &str,
        query: &[f32],
        k: usize,
        metric: Metric,
    ) -> Result<Vec<Neighbor>> {
        Ok(self.search(column, &[query], k, metric, None)?.pop().unwrap_or_default())
    }

    /// Like [`Table::topk`] among the rows where `predicate` is true: the filter selects the
    /// candidates before any distance is computed (zone maps skip row groups it rules out),
    /// so the result is never under-filled by the filter.
    pub fn topk_where(
        &self,
        column: &str,
        query: &[f32],
        k: usize,
        metric: Metric,
        predicate: &Predicate,
    ) -> Result<Vec<Neighbor>> {
        Ok(self.search(column, &[query], k, metric, Some(predicate))?.pop().unwrap_or_default())
    }

    /// [`Table::topk`] for several queries in one pass over the data: each block of vectors
    /// is read once for all of them. Returns one list per query, in order; each equals what
    /// [`Table::topk`] returns for that query alone.
    pub fn batch_topk(
        &self,
        column: &str,
        queries: &[&[f32]],
        k: usize,
        metric: Metric,
    ) -> Result<Vec<Vec<Neighbor>>> {
        self.search(column, queries, k, metric, None)
    }

    /// [`Table::batch_topk`] among the rows where `predicate` is true.
    pub fn batch_topk_where(
        &self,
        column: &str,
        queries: &[&[f32]],
        k: usize,
        metric: Metric,
        predicate: &Predicate,
    ) -> Result<Vec<Vec<Neighbor>>> {
        self.search(column, queries, k, metric, Some(predicate))
    }

    /// The general form of the searches above: several queries, an optional filter, and a
    /// [`Precision`]. `Precision::Int8 { oversample }` / `Float16 { oversample }` rank each
    /// row group on a quantised copy of its vectors (a quarter / half of the bytes; built on
    /// first use and kept in memory with the segment: D or 2·D bytes per row) and rescore the
    /// best `k × oversample` of each row group on the float32 vectors, so every distance
    /// returned is exact and a row the copy ranks too low can be missed (recall below 1;
    /// larger `oversample`, fewer misses). Memtable batches are ranked on quantised copies
    /// too (built on first use, kept until a merge or flush replaces the batch).
    pub fn batch_topk_with(
        &self,
        column: &str,
        queries: &[&[f32]],
        k: usize,
        metric: Metric,
        predicate: Option<&Predicate>,
        precision: Precision,
    ) -> Result<Vec<Vec<Neighbor>>> {
        let snap = self.snap()?;
        Ok(snap.vector_search_with(column, queries, k, metric, predicate, precision)?.neighbors)
    }

    fn search(
        &self,
        column: &str,
        queries: &[&[f32]],
        k: usize,
        metric: Metric,
        predicate: Option<&Predicate>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        self.batch_topk_with(column, queries, k, metric, predicate, Precision::Exact)
    }

    /// Updates several rows as one commit: row `i` of `values` holds the new values of the
    /// columns it has for `ids[i]`. Returns how many rows existed and were updated.
    pub fn update_many(&self, ids: &[u64], values: &RecordBatch) -> Result<u64> {
        self.write(|t, s| t.update(s, &self.name, ids, values))
    }

    fn rows_to_batch(&self, rows: &[Row]) -> Result<RecordBatch> {
        let snap = self.snap()?;
        let fields = value::row_fields(&self.name, snap.schema().columns(), rows)?;
        let columns = fields
            .iter()
            .map(|f| value::column_from_rows(&self.name, f, rows))
            .collect::<Result<Vec<_>>>()?;
        RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            columns,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows.len())),
        )
        .map_err(|e| basalt_storage::Error::arrow(format!("table '{}'", self.name), e).into())
    }

    /// The row with this `_id` (all columns, `_id` first), or `None`.
    pub fn get(&self, id: u64) -> Result<Option<Row>> {
        let snap = self.snap()?;
        let Some(loc) = snap.locate(id)? else { return Ok(None) };
        // Values are read in place (no arrays): a point lookup's cost is the lookup.
        let fields = snap.schema().full_schema().fields().clone();
        let all: Vec<usize> = (0..fields.len()).collect();
        let mut values = Vec::with_capacity(fields.len());
        snap.visit_row(loc, &all, |i, v| {
            let f = &fields[i];
            values.push((f.name().clone(), value::value_of(f.data_type(), v)));
            Ok(())
        })?;
        Ok(Some(Row::from_values(values)))
    }

    /// The rows with these ids, in the order given, as one batch with `_id` first; ids that
    /// do not exist are left out.
    pub fn get_many(&self, ids: &[u64]) -> Result<RecordBatch> {
        let snap = self.snap()?;
        let all: Vec<usize> = (0..snap.schema().full_schema().fields().len()).collect();
        Ok(snap.get_many(ids, &all)?)
    }

    /// Like [`Table::get_many`], with only the named columns (`"_id"` may be named).
    pub fn get_many_columns(&self, ids: &[u64], columns: &[&str]) -> Result<RecordBatch> {
        let snap = self.snap()?;
        let proj = snap.resolve(columns)?;
        Ok(snap.get_many(ids, &proj)?)
    }

    /// Every row, `_id` first, as record batches (one per row group, then the memtable).
    /// The scan reads the table as it was when it started.
    pub fn scan(&self) -> Result<Scan> {
        let snap = self.snap()?;
        let all: Vec<usize> = (0..snap.schema().full_schema().fields().len()).collect();
        Ok(Scan { inner: snap.scan(&all)? })
    }

    /// Only the named columns (`"_id"` may be named), in the order given.
    pub fn scan_columns(&self, columns: &[&str]) -> Result<Scan> {
        let snap = self.snap()?;
        let proj = snap.resolve(columns)?;
        Ok(Scan { inner: snap.scan(&proj)? })
    }
}

/// An iterator of record batches over a table snapshot.
#[derive(Debug)]
pub struct Scan {
    inner: basalt_storage::Scan,
}

impl Scan {
    /// Schema of every batch.
    pub fn schema(&self) -> SchemaRef {
        self.inner.schema().clone()
    }

    /// Reads everything into one batch.
    pub fn collect_batch(self) -> Result<RecordBatch> {
        let schema = self.schema();
        let batches = self.collect::<Result<Vec<_>>>()?;
        arrow_select::concat::concat_batches(&schema, &batches)
            .map_err(|e| Error::Storage(basalt_storage::Error::arrow("concatenate scan", e)))
    }
}

impl Iterator for Scan {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.inner.next().map(|r| r.map_err(Error::from))
    }
}
