//! The exception hierarchy of PEP 249 (DB-API 2.0) plus the memory store's own, and the
//! mapping of every engine error onto it. Used by every binding that calls the engine; it
//! must not decide anything about an error beyond its Python class.

use basalt::StorageError;
use basalt::memory::MemoryError;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(_basalt, Warning, PyException, "PEP 249: important warnings.");
pyo3::create_exception!(_basalt, Error, PyException, "PEP 249: the base of every Basalt error.");
pyo3::create_exception!(
    _basalt,
    InterfaceError,
    Error,
    "PEP 249: misuse of the Python interface itself (a closed connection or cursor)."
);
pyo3::create_exception!(_basalt, DatabaseError, Error, "PEP 249: errors of the database.");
pyo3::create_exception!(
    _basalt,
    DataError,
    DatabaseError,
    "A value that cannot be stored or computed: a bad cast, a wrong vector dimension, \
     NULL in a NOT NULL column, an invalid memory item."
);
pyo3::create_exception!(
    _basalt,
    OperationalError,
    DatabaseError,
    "The database could not do the work: locked by another writer, timed out, interrupted, \
     read-only, an I/O failure."
);
pyo3::create_exception!(
    _basalt,
    IntegrityError,
    DatabaseError,
    "A write would break a PRIMARY KEY or UNIQUE constraint (nothing of it was written)."
);
pyo3::create_exception!(
    _basalt,
    InternalError,
    DatabaseError,
    "The database's files are damaged or an internal invariant failed."
);
pyo3::create_exception!(
    _basalt,
    ProgrammingError,
    DatabaseError,
    "The statement is wrong: a syntax error, an unknown table or column, a transaction call \
     out of order, a wrong number of parameters."
);
pyo3::create_exception!(
    _basalt,
    NotSupportedError,
    DatabaseError,
    "Valid SQL or a call that Basalt does not support."
);
pyo3::create_exception!(
    _basalt,
    ConflictError,
    IntegrityError,
    "A memory-store update whose expected version is not the item's current one."
);
pyo3::create_exception!(
    _basalt,
    NotFoundError,
    DatabaseError,
    "A memory item, namespace or checkpoint that does not exist."
);

/// Adds every exception class to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Warning", py.get_type::<Warning>())?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("InterfaceError", py.get_type::<InterfaceError>())?;
    m.add("DatabaseError", py.get_type::<DatabaseError>())?;
    m.add("DataError", py.get_type::<DataError>())?;
    m.add("OperationalError", py.get_type::<OperationalError>())?;
    m.add("IntegrityError", py.get_type::<IntegrityError>())?;
    m.add("InternalError", py.get_type::<InternalError>())?;
    m.add("ProgrammingError", py.get_type::<ProgrammingError>())?;
    m.add("NotSupportedError", py.get_type::<NotSupportedError>())?;
    m.add("ConflictError", py.get_type::<ConflictError>())?;
    m.add("NotFoundError", py.get_type::<NotFoundError>())?;
    Ok(())
}

/// The Python exception for an engine error, its message the engine's.
pub fn to_py(e: basalt::Error) -> PyErr {
    let msg = e.to_string();
    match &e {
        basalt::Error::Storage(s) => storage(s, msg),
        basalt::Error::Transaction(_) => ProgrammingError::new_err(msg),
        basalt::Error::Sql(s) => match s {
            basalt::SqlError::Unsupported { .. } => NotSupportedError::new_err(msg),
            basalt::SqlError::Execution { .. } => DataError::new_err(msg),
            basalt::SqlError::Storage(s) => storage(s, msg),
            _ => ProgrammingError::new_err(msg),
        },
        basalt::Error::Memory(m) => match m {
            MemoryError::Conflict { .. } => ConflictError::new_err(msg),
            MemoryError::NotFound { .. } | MemoryError::UnknownNamespace { .. } => {
                NotFoundError::new_err(msg)
            }
            MemoryError::Embedder { .. } => OperationalError::new_err(msg),
            _ => DataError::new_err(msg),
        },
        basalt::Error::Interrupted | basalt::Error::Timeout { .. } => {
            OperationalError::new_err(msg)
        }
        basalt::Error::InvalidValue { .. } => DataError::new_err(msg),
        _ => DatabaseError::new_err(msg),
    }
}

fn storage(s: &StorageError, msg: String) -> PyErr {
    use StorageError as S;
    if s.is_corruption() {
        return InternalError::new_err(msg);
    }
    match s {
        // NOT NULL is a constraint too (sqlite3 and psycopg raise IntegrityError).
        S::UniqueViolation { .. } | S::NullViolation { .. } | S::CheckViolation { .. } => {
            IntegrityError::new_err(msg)
        }
        S::TypeMismatch { .. }
        | S::VectorDimension { .. }
        | S::VectorQuery { .. }
        | S::InvalidInput { .. }
        | S::Arrow { .. } => DataError::new_err(msg),
        S::TableExists { .. }
        | S::TableNotFound { .. }
        | S::IndexExists { .. }
        | S::IndexNotFound { .. }
        | S::ViewExists { .. }
        | S::ViewNotFound { .. }
        | S::ColumnNotFound { .. }
        | S::InvalidName { .. }
        | S::Transaction { .. } => ProgrammingError::new_err(msg),
        S::UnsupportedType { .. } | S::UnsupportedFormatVersion { .. } => {
            NotSupportedError::new_err(msg)
        }
        _ => OperationalError::new_err(msg),
    }
}

/// Maps an engine result into a Python one.
pub trait IntoPy<T> {
    /// The value, or the engine's error as its Python exception.
    fn py_err(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for basalt::Result<T> {
    fn py_err(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

/// A `ValueError` for a bad argument of the Python API itself.
pub fn bad_arg(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}
