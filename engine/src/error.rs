//! The engine's error type: storage errors pass through unchanged; the engine adds the
//! errors of its own conversions (row values).

/// Result alias of the public API.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything the public API can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// From the storage layer: I/O, corruption (with file and offset), locking, unknown
    /// tables or columns, type and schema mismatches, ...
    #[error(transparent)]
    Storage(#[from] basalt_storage::Error),
    /// A transaction call out of order (commit without begin, nested begin).
    #[error("transaction error: {0}")]
    Transaction(String),
    /// From the SQL layer: syntax and planning errors (with their position), unsupported
    /// statements, execution errors. Storage errors met while running SQL arrive as
    /// [`Error::Storage`], transaction-order errors as [`Error::Transaction`].
    #[error(transparent)]
    Sql(basalt_sql::Error),
    /// From the agent-memory store ([`crate::memory`]): invalid items, version conflicts,
    /// model mismatches, missing items.
    #[error(transparent)]
    Memory(#[from] crate::memory::MemoryError),
    /// The statement was stopped by [`crate::Connection::interrupt`] (its work undone).
    #[error("statement interrupted")]
    Interrupted,
    /// The statement ran longer than its timeout (`Options::statement_timeout`,
    /// `Connection::set_statement_timeout`) and was stopped (its work undone).
    #[error("statement timed out after {limit:?} (the statement timeout)")]
    Timeout {
        /// The timeout.
        limit: std::time::Duration,
    },
    /// A row value cannot be stored in its column.
    #[error("table '{table}', column '{column}': {reason}")]
    InvalidValue {
        /// The table.
        table: String,
        /// The column.
        column: String,
        /// What is wrong with the value.
        reason: String,
    },
}

impl Error {
    /// The storage error inside, if any.
    pub fn as_storage(&self) -> Option<&basalt_storage::Error> {
        match self {
            Error::Storage(e) => Some(e),
            Error::InvalidValue { .. }
            | Error::Interrupted
            | Error::Timeout { .. }
            | Error::Transaction(_)
            | Error::Sql(_)
            | Error::Memory(_) => None,
        }
    }

    /// True when a write was refused because it would break a constraint: a primary or
    /// unique key, a CHECK constraint or NOT NULL.
    pub fn is_constraint_violation(&self) -> bool {
        matches!(
            self.as_storage(),
            Some(
                basalt_storage::Error::UniqueViolation { .. }
                    | basalt_storage::Error::CheckViolation { .. }
                    | basalt_storage::Error::NullViolation { .. }
            )
        )
    }

    /// True for errors that mean on-disk data is damaged.
    pub fn is_corruption(&self) -> bool {
        self.as_storage().is_some_and(basalt_storage::Error::is_corruption)
    }
}

impl From<basalt_sql::Error> for Error {
    fn from(e: basalt_sql::Error) -> Error {
        match e {
            basalt_sql::Error::Storage(basalt_storage::Error::Transaction { reason }) => {
                Error::Transaction(reason)
            }
            basalt_sql::Error::Storage(s) => Error::Storage(s),
            e => Error::Sql(e),
        }
    }
}
