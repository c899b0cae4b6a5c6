//! The SQL layer's error type.

use datafusion::error::DataFusionError;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything running SQL can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The text does not parse, or names something unknown, or types do not fit. The
    /// message says where (line and column) when the position is known.
    #[error("SQL error: {message}")]
    Sql {
        /// What is wrong, with its position.
        message: String,
    },
    /// The statement is valid SQL that Basalt does not support (yet).
    #[error("not supported: {message}")]
    Unsupported {
        /// What is not supported.
        message: String,
    },
    /// Running the statement failed (division by zero, a cast of a bad value, …).
    #[error("execution error: {message}")]
    Execution {
        /// What failed.
        message: String,
    },
    /// From storage: unknown tables or columns, type mismatches, NOT NULL violations, I/O,
    /// locking, corruption.
    #[error(transparent)]
    Storage(#[from] basalt_storage::Error),
}

impl Error {
    pub(crate) fn sql(message: impl Into<String>) -> Error {
        Error::Sql { message: message.into() }
    }

    pub(crate) fn unsupported(message: impl Into<String>) -> Error {
        Error::Unsupported { message: message.into() }
    }
}

impl From<DataFusionError> for Error {
    fn from(e: DataFusionError) -> Error {
        // A storage error travelling through DataFusion comes back as itself.
        let e = match take_storage(e) {
            Ok(s) => return Error::Storage(s),
            Err(e) => e,
        };
        let position = e
            .diagnostic()
            .and_then(|d| d.span)
            .map(|s| format!(" (at line {}, column {})", s.start.line, s.start.column));
        let root = e.find_root();
        if let DataFusionError::SQL(p, _) = root {
            use datafusion::sql::sqlparser::parser::ParserError as P;
            let text = match p.as_ref() {
                P::ParserError(m) | P::TokenizerError(m) => m.clone(),
                P::RecursionLimitExceeded => "statement nested too deeply".to_string(),
            };
            let message = if text.contains("Line: ") || !text.contains("found: EOF") {
                text
            } else {
                format!("{text} (at the end of the statement)")
            };
            return Error::Sql { message };
        }
        let message = format!("{}{}", root.strip_backtrace(), position.unwrap_or_default());
        match root {
            DataFusionError::NotImplemented(_) => Error::Unsupported { message },
            DataFusionError::Execution(_)
            | DataFusionError::ResourcesExhausted(_)
            | DataFusionError::ArrowError(..)
            | DataFusionError::IoError(_)
            | DataFusionError::ObjectStore(_)
            | DataFusionError::External(_) => Error::Execution { message },
            _ => Error::Sql { message },
        }
    }
}

/// Takes the storage error out of a DataFusion error chain, or gives the error back.
fn take_storage(e: DataFusionError) -> std::result::Result<basalt_storage::Error, DataFusionError> {
    match e {
        DataFusionError::External(b) => match b.downcast::<basalt_storage::Error>() {
            Ok(s) => Ok(*s),
            Err(b) => Err(DataFusionError::External(b)),
        },
        DataFusionError::Context(c, inner) => {
            take_storage(*inner).map_err(|i| DataFusionError::Context(c, Box::new(i)))
        }
        DataFusionError::Diagnostic(d, inner) => {
            take_storage(*inner).map_err(|i| DataFusionError::Diagnostic(d, Box::new(i)))
        }
        e => Err(e),
    }
}
