//! The storage error type. Every variant carries enough context (table, column, file,
//! offset) for a user to tell what went wrong without a debugger.

use std::path::PathBuf;

use arrow_schema::{ArrowError, DataType};

/// Result alias used throughout the storage crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in the storage layer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O call failed.
    #[error("I/O error during {op} on {path}: {source}")]
    Io {
        /// What was being done (`"write"`, `"fsync"`, `"rename"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file's bytes do not match what was written: checksum mismatch, truncation,
    /// impossible lengths or offsets.
    #[error("corrupt file {file} at offset {offset}: {reason}")]
    Corrupt {
        /// The damaged file.
        file: PathBuf,
        /// Byte offset of the damaged region (start of the block or structure).
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// A file was written by a format version this build cannot read.
    #[error("{file} has format version {found}; this build reads version {supported}")]
    UnsupportedFormatVersion {
        /// The file.
        file: PathBuf,
        /// Version found in the file.
        found: u32,
        /// Highest version this build understands.
        supported: u32,
    },
    /// Another writer (in this or another process) holds the database's lock.
    #[error(
        "database {path} is locked by another writer (open it read-only, or close the other handle)"
    )]
    Locked {
        /// The database directory.
        path: PathBuf,
    },
    /// The directory is not a Basalt database: it has no `MANIFEST` and holds files no
    /// Basalt database has (or, opening read-only, nothing at all). Nothing was changed.
    #[error(
        "{path} is not a Basalt database ({found}); open an empty or new directory to create one"
    )]
    NotADatabase {
        /// The directory.
        path: PathBuf,
        /// What was found instead.
        found: String,
    },
    /// The database's `MANIFEST` is missing while its other files are there. Opening would
    /// start an empty database and treat every table's files as garbage, so it is refused
    /// and nothing is changed.
    #[error(
        "{path} is missing, but the database holds {found}: refusing to open. \
         Put the MANIFEST back from a copy of the database, or open with salvage \
         (`basalt recover <db>`, `Options::salvage`), which adopts the newest intact \
         pending manifest or checkpoint and reports what it could not restore"
    )]
    ManifestMissing {
        /// The missing manifest file.
        path: PathBuf,
        /// The database files that were found.
        found: String,
    },
    /// A write was attempted on a read-only handle.
    #[error("database {path} is open read-only")]
    ReadOnly {
        /// The database directory (or `:memory:`).
        path: PathBuf,
    },
    /// An earlier write failed while replacing the manifest; this handle refuses further
    /// writes because it cannot know whether that write landed. Reopen the database.
    #[error(
        "database {path}: an earlier commit failed while installing the manifest; reopen the database to continue writing"
    )]
    Poisoned {
        /// The database directory (or `:memory:`).
        path: PathBuf,
    },
    /// Another writer (a write transaction on another connection) held the writer lock for
    /// longer than the lock-wait timeout.
    #[error("database {path}: timed out after {waited:?} waiting for another writer to finish")]
    LockTimeout {
        /// The database directory (or `:memory:`).
        path: PathBuf,
        /// How long this writer waited.
        waited: std::time::Duration,
    },
    /// The database handle was closed.
    #[error("database is closed")]
    Closed,
    /// A table with that name already exists.
    #[error("table '{table}' already exists")]
    TableExists {
        /// The table name.
        table: String,
    },
    /// No table with that name exists.
    #[error("table '{table}' does not exist")]
    TableNotFound {
        /// The table name.
        table: String,
    },
    /// A write would give two rows the same primary or unique key. Nothing of the write
    /// was applied.
    #[error(
        "duplicate key in table '{table}': {constraint} ({columns}) = ({value}) already exists"
    )]
    UniqueViolation {
        /// The table.
        table: String,
        /// The key's name.
        constraint: String,
        /// The key columns, comma-separated.
        columns: String,
        /// The duplicated key value, comma-separated.
        value: String,
    },
    /// An index (or key) with that name already exists.
    #[error("index '{index}' already exists")]
    IndexExists {
        /// The index name.
        index: String,
    },
    /// No index with that name exists.
    #[error("index '{index}' does not exist")]
    IndexNotFound {
        /// The index name.
        index: String,
    },
    /// A view with that name already exists.
    #[error("view '{view}' already exists")]
    ViewExists {
        /// The view name.
        view: String,
    },
    /// No view with that name exists.
    #[error("view '{view}' does not exist")]
    ViewNotFound {
        /// The view name.
        view: String,
    },
    /// A column named in a request is not in the table.
    #[error("table '{table}' has no column '{column}'")]
    ColumnNotFound {
        /// The table name.
        table: String,
        /// The column name.
        column: String,
    },
    /// A name (table or column) is not acceptable.
    #[error("invalid name '{name}': {reason}")]
    InvalidName {
        /// The offending name.
        name: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A column's Arrow type cannot be stored.
    #[error("column '{column}': type {data_type} is not supported ({reason})")]
    UnsupportedType {
        /// The column.
        column: String,
        /// The type asked for.
        data_type: DataType,
        /// Why.
        reason: &'static str,
    },
    /// A value given for a column does not have the column's type.
    #[error("table '{table}', column '{column}': expected {expected}, got {found}")]
    TypeMismatch {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The column's type.
        expected: DataType,
        /// What was supplied.
        found: String,
    },
    /// A vector of the wrong dimension was given for a `VECTOR(D)` column.
    #[error(
        "table '{table}', column '{column}': expected a vector of dimension {expected}, got {found}"
    )]
    VectorDimension {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// The column's dimension.
        expected: usize,
        /// The dimension supplied.
        found: usize,
    },
    /// A vector search's query is invalid: wrong dimension, NaN or infinite components, a
    /// zero vector under cosine, no queries.
    #[error("vector search on table '{table}', column '{column}': {source}")]
    VectorQuery {
        /// The table.
        table: String,
        /// The vector column.
        column: String,
        /// What is wrong with the query.
        #[source]
        source: basalt_vector::Error,
    },
    /// A full-text index operation failed: a malformed query, an unknown tokenizer, or an
    /// error of the index files.
    #[error("full-text index of table '{table}': {source}")]
    Fts {
        /// The table.
        table: String,
        /// The cause.
        #[source]
        source: basalt_fts::Error,
    },
    /// A written row makes a CHECK constraint FALSE.
    #[error("new row for table '{table}' violates check constraint {constraint}: {condition}")]
    CheckViolation {
        /// The table.
        table: String,
        /// The constraint's name.
        constraint: String,
        /// Its condition, as SQL.
        condition: String,
    },
    /// A NULL was given for a NOT NULL column (or a required column was missing).
    #[error("table '{table}', column '{column}' is NOT NULL but a null (or no value) was given")]
    NullViolation {
        /// The table.
        table: String,
        /// The column.
        column: String,
    },
    /// The request itself is malformed (for example a reserved column supplied by the caller).
    #[error("invalid request on table '{table}': {reason}")]
    InvalidInput {
        /// The table.
        table: String,
        /// What is wrong.
        reason: String,
    },
    /// A transaction call out of order (commit without begin, nested begin).
    #[error("transaction error: {reason}")]
    Transaction {
        /// What is wrong.
        reason: String,
    },
    /// An Arrow operation failed.
    #[error("{context}: {source}")]
    Arrow {
        /// What was being done.
        context: String,
        /// The Arrow error.
        #[source]
        source: ArrowError,
    },
}

impl Error {
    /// Builds a [`Error::Corrupt`].
    pub fn corrupt(file: impl Into<PathBuf>, offset: u64, reason: impl Into<String>) -> Self {
        Error::Corrupt { file: file.into(), offset, reason: reason.into() }
    }

    /// Builds an [`Error::Io`].
    pub fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { op, path: path.into(), source }
    }

    /// Wraps an Arrow error with context.
    pub fn arrow(context: impl Into<String>, source: ArrowError) -> Self {
        Error::Arrow { context: context.into(), source }
    }

    /// True for errors that mean on-disk data is damaged.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corrupt { .. } | Error::UnsupportedFormatVersion { .. })
    }
}
