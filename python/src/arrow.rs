//! Arrow across the Python boundary through the Arrow PyCapsule interface: results leave as
//! an `arrow_array_stream` capsule (zero-copy: the consumer reads the engine's buffers), and
//! data comes in from any object with `__arrow_c_stream__` (pyarrow tables and readers,
//! polars and pandas ≥ 2.2 frames, …). Owns the capsule handling and the casts that fit
//! incoming columns to a table's types; it must not interpret the data otherwise.

use std::ffi::CStr;
use std::sync::Arc;

use arrow_array::ffi_stream::{ArrowArrayStreamReader, FFI_ArrowArrayStream};
use arrow_array::{RecordBatch, RecordBatchIterator, RecordBatchReader};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use crate::errors::{DataError, InterfaceError, bad_arg};

/// The capsule name the interface fixes for a stream.
const STREAM: &CStr = c"arrow_array_stream";

/// A capsule holding a stream over `batches`.
pub fn export<'py>(
    py: Python<'py>,
    schema: SchemaRef,
    batches: Vec<RecordBatch>,
) -> PyResult<Bound<'py, PyCapsule>> {
    export_reader(py, Box::new(RecordBatchIterator::new(batches.into_iter().map(Ok), schema)))
}

/// A capsule holding a stream over `reader`'s batches.
pub fn export_reader<'py>(
    py: Python<'py>,
    reader: Box<dyn RecordBatchReader + Send>,
) -> PyResult<Bound<'py, PyCapsule>> {
    let stream = FFI_ArrowArrayStream::new(reader);
    // The consumer moves the stream out (leaving a released one behind); whatever is left is
    // released by the stream's own drop when the capsule is collected.
    PyCapsule::new_with_value(py, stream, STREAM)
}

/// True when `obj` can hand out an Arrow stream.
pub fn is_stream_source(obj: &Bound<'_, PyAny>) -> bool {
    obj.hasattr("__arrow_c_stream__").unwrap_or(false)
}

/// Reads every batch of an object that implements `__arrow_c_stream__`.
pub fn import(obj: &Bound<'_, PyAny>) -> PyResult<(SchemaRef, Vec<RecordBatch>)> {
    if !is_stream_source(obj) {
        return Err(bad_arg(format!(
            "expected Arrow data (an object with __arrow_c_stream__), got {}",
            obj.get_type().name()?
        )));
    }
    let capsule = obj.call_method0("__arrow_c_stream__")?;
    let capsule = capsule.cast_into::<PyCapsule>().map_err(|_| {
        InterfaceError::new_err("__arrow_c_stream__ did not return a capsule".to_string())
    })?;
    let ptr = capsule.pointer_checked(Some(STREAM))?;
    // SAFETY: the capsule's name says it holds an `ArrowArrayStream` (the C stream interface
    // struct, which `FFI_ArrowArrayStream` mirrors with `repr(C)`); `from_raw` moves the
    // struct out and leaves a released one, so the capsule's destructor finds nothing to
    // release and the stream is released exactly once, by the reader.
    let reader =
        unsafe { ArrowArrayStreamReader::from_raw(ptr.as_ptr().cast()) }.map_err(arrow_err)?;
    let schema = reader.schema();
    // The producer's callbacks take the GIL themselves when they need it.
    let batches = obj.py().detach(|| reader.collect::<Result<Vec<_>, _>>()).map_err(arrow_err)?;
    Ok((schema, batches))
}

/// An Arrow error of data crossing the boundary.
pub fn arrow_err(e: ArrowError) -> PyErr {
    DataError::new_err(e.to_string())
}

/// The type a column of `dt` is stored as when a table is created from Python data: the
/// large, view and dictionary forms other libraries produce become their plain forms.
pub fn storable(dt: &DataType) -> DataType {
    use DataType as D;
    match dt {
        D::LargeUtf8 | D::Utf8View => D::Utf8,
        D::LargeBinary | D::BinaryView => D::Binary,
        D::Dictionary(_, v) => storable(v),
        D::Float16 => D::Float32,
        D::LargeList(f) | D::ListView(f) | D::LargeListView(f) => {
            D::List(Arc::new(f.as_ref().clone().with_data_type(storable(f.data_type()))))
        }
        D::List(f) => D::List(Arc::new(f.as_ref().clone().with_data_type(storable(f.data_type())))),
        D::FixedSizeList(f, n) => D::FixedSizeList(
            Arc::new(f.as_ref().clone().with_data_type(storable(f.data_type()))),
            *n,
        ),
        D::Struct(fields) => D::Struct(
            fields
                .iter()
                .map(|f| Arc::new(f.as_ref().clone().with_data_type(storable(f.data_type()))))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The schema a new table gets from incoming data's schema.
pub fn storable_schema(schema: &Schema) -> Schema {
    Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), storable(f.data_type()), f.is_nullable()))
            .collect::<Vec<_>>(),
    )
}

/// Fits incoming batches to a table: each incoming column is matched to the table's column
/// of the same name (exactly, else ignoring case) and cast to its type; columns the data
/// leaves out are left to the table (NULL or their DEFAULT). A column the table does not
/// have, or a value that does not fit its column's type, is an error naming both.
pub fn fit(table: &str, target: &Schema, batches: Vec<RecordBatch>) -> PyResult<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(batches.len());
    for b in batches {
        let mut fields = Vec::with_capacity(b.num_columns());
        let mut columns = Vec::with_capacity(b.num_columns());
        for (f, col) in b.schema().fields().iter().zip(b.columns()) {
            let Some(t) = target.fields().iter().find(|t| t.name() == f.name()).or_else(|| {
                target.fields().iter().find(|t| t.name().eq_ignore_ascii_case(f.name()))
            }) else {
                return Err(bad_arg(format!(
                    "table '{table}' has no column '{}' (its columns: {})",
                    f.name(),
                    target
                        .fields()
                        .iter()
                        .map(|t| t.name().as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            let col = if col.data_type() == t.data_type() {
                col.clone()
            } else {
                let opts = arrow_cast::CastOptions { safe: false, ..Default::default() };
                arrow_cast::cast_with_options(col, t.data_type(), &opts).map_err(|e| {
                    DataError::new_err(format!(
                        "table '{table}', column '{}': cannot store {} as {}: {e}",
                        t.name(),
                        col.data_type(),
                        t.data_type()
                    ))
                })?
            };
            // Nullable here: the engine checks NOT NULL itself and names the column.
            fields.push(t.as_ref().clone().with_nullable(true));
            columns.push(col);
        }
        let schema = Arc::new(Schema::new(fields));
        out.push(RecordBatch::try_new(schema, columns).map_err(arrow_err)?);
    }
    Ok(out)
}
