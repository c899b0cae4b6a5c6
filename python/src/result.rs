//! A statement's result held natively: its Arrow batches (handed to pyarrow, pandas or
//! polars through the PyCapsule stream interface without a copy), a read position for
//! `fetchone` / `fetchmany` / `fetchall`, and the number of rows a write changed. It must not
//! run statements.

use arrow_array::{Array, RecordBatch, RecordBatchReader, UInt64Array};
use arrow_schema::{ArrowError, Schema, SchemaRef};
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyCapsule, PyList};
use std::sync::Arc;

use crate::errors::InterfaceError;
use crate::{arrow, convert};

/// The rows a write statement's result reports (its one `UInt64` column summed).
pub fn changed_rows(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .filter_map(|b| b.columns().first()?.as_any().downcast_ref::<UInt64Array>().cloned())
        .map(|c| c.values().iter().sum::<u64>())
        .sum()
}

/// Statements whose result is a count of changed rows rather than rows.
fn is_write(sql: &str) -> bool {
    let word = crate::params::first_word(sql);
    matches!(word.as_str(), "INSERT" | "REPLACE" | "UPDATE" | "DELETE" | "TRUNCATE" | "COPY")
}

/// The result of one statement (the native half of `basalt.Result`).
#[pyclass(frozen, module = "basalt._basalt", name = "NativeResult")]
pub struct QueryResult {
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
    rows: usize,
    /// Rows a write changed; `None` for a query.
    changed: Option<u64>,
    /// The next row `fetch` returns: (batch, row in it).
    pos: Mutex<(usize, usize)>,
}

impl QueryResult {
    /// The result of `sql`, from its batches.
    pub fn new(sql: &str, batches: Vec<RecordBatch>) -> QueryResult {
        let schema =
            batches.first().map(RecordBatch::schema).unwrap_or_else(|| Arc::new(Schema::empty()));
        let changed = is_write(sql).then(|| changed_rows(&batches));
        let rows = batches.iter().map(RecordBatch::num_rows).sum();
        QueryResult { schema, batches, rows, changed, pos: Mutex::new((0, 0)) }
    }

    /// A result with no rows of this schema.
    pub fn empty(schema: SchemaRef) -> QueryResult {
        QueryResult { schema, batches: Vec::new(), rows: 0, changed: None, pos: Mutex::new((0, 0)) }
    }
}

#[pymethods]
impl QueryResult {
    /// The Arrow PyCapsule stream interface: every row of the result, whatever was
    /// fetched. `requested_schema` is not applied (the interface lets a producer keep its
    /// own).
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        arrow::export(py, self.schema.clone(), self.batches.clone())
    }

    /// Up to `n` rows (all that are left when `None`) from the read position, as tuples.
    #[pyo3(signature = (n=None))]
    fn fetch<'py>(&self, py: Python<'py>, n: Option<usize>) -> PyResult<Bound<'py, PyList>> {
        let mut pos = self.pos.lock();
        let mut want = n.unwrap_or(usize::MAX);
        let out = PyList::empty(py);
        while want > 0 && pos.0 < self.batches.len() {
            let b = &self.batches[pos.0];
            if pos.1 >= b.num_rows() {
                *pos = (pos.0 + 1, 0);
                continue;
            }
            out.append(convert::row(py, b, pos.1)?)?;
            pos.1 += 1;
            want -= 1;
        }
        Ok(out)
    }

    /// The next row as a tuple, or `None` when none is left.
    fn fetchone<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        let mut pos = self.pos.lock();
        while pos.0 < self.batches.len() {
            let b = &self.batches[pos.0];
            if pos.1 < b.num_rows() {
                let row = convert::row(py, b, pos.1)?;
                pos.1 += 1;
                return Ok(Some(row.into_any()));
            }
            *pos = (pos.0 + 1, 0);
        }
        Ok(None)
    }

    /// `(name, type, nullable)` of each column; the type as Arrow writes it.
    #[getter]
    fn columns(&self) -> Vec<(String, String, bool)> {
        self.schema
            .fields()
            .iter()
            .map(|f| (f.name().clone(), f.data_type().to_string(), f.is_nullable()))
            .collect()
    }

    /// Rows in the result.
    #[getter]
    fn num_rows(&self) -> usize {
        self.rows
    }

    /// Rows a write statement changed; `None` for a query.
    #[getter]
    fn changed(&self) -> Option<u64> {
        self.changed
    }

    fn __len__(&self) -> usize {
        self.rows
    }
}

/// A query's rows as the engine produces them, read once (the native half of
/// `Connection.stream`): its capsule hands the engine's result stream itself to the consumer,
/// which pulls each batch when it wants it, so a result larger than memory can be read.
#[pyclass(frozen, module = "basalt._basalt", name = "NativeStream")]
pub struct QueryStream {
    schema: SchemaRef,
    rows: Mutex<Option<basalt::SqlRows>>,
}

impl QueryStream {
    /// The stream of `rows`.
    pub fn new(rows: basalt::SqlRows) -> QueryStream {
        QueryStream { schema: rows.schema(), rows: Mutex::new(Some(rows)) }
    }
}

/// The engine's result stream as an Arrow reader (errors keep the engine's message).
struct RowsReader {
    schema: SchemaRef,
    rows: basalt::SqlRows,
}

impl Iterator for RowsReader {
    type Item = Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        Some(self.rows.next()?.map_err(|e| ArrowError::ExternalError(Box::new(e))))
    }
}

impl RecordBatchReader for RowsReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

#[pymethods]
impl QueryStream {
    /// The Arrow PyCapsule stream interface; a stream can be consumed once.
    #[pyo3(signature = (requested_schema=None))]
    fn __arrow_c_stream__<'py>(
        &self,
        py: Python<'py>,
        requested_schema: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        let _ = requested_schema;
        let rows = self
            .rows
            .lock()
            .take()
            .ok_or_else(|| InterfaceError::new_err("the stream was already read"))?;
        let reader = RowsReader { schema: self.schema.clone(), rows };
        arrow::export_reader(py, Box::new(reader))
    }
}
