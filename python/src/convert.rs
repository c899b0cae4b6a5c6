//! Values between Python and the engine: result cells to Python objects (for `fetchone` /
//! `fetchall` without pyarrow in the way) and Python objects to statement parameters. Owns
//! the type mapping written in `python/README.md`; it must not run queries.

use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use basalt::Value;
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyAny, PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::errors::{NotSupportedError, bad_arg};

static DATE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static DATETIME: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TIMEDELTA: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static TIMEZONE: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
static DECIMAL: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn cached<'py>(
    py: Python<'py>,
    cell: &'static PyOnceLock<Py<PyAny>>,
    module: &str,
    name: &str,
) -> PyResult<&'py Bound<'py, PyAny>> {
    cell.import(py, module, name)
}

/// Days since 1970-01-01 as `datetime.date`.
fn date<'py>(py: Python<'py>, days: i64) -> PyResult<Bound<'py, PyAny>> {
    // 719_163 is the proleptic Gregorian ordinal of 1970-01-01.
    cached(py, &DATE, "datetime", "date")?.call_method1("fromordinal", (days + 719_163,))
}

/// Microseconds since the epoch as `datetime.datetime`: naive, or aware in UTC when the
/// column has a time zone.
fn timestamp<'py>(py: Python<'py>, micros: i64, zoned: bool) -> PyResult<Bound<'py, PyAny>> {
    let dt = cached(py, &DATETIME, "datetime", "datetime")?;
    let td = cached(py, &TIMEDELTA, "datetime", "timedelta")?;
    let delta = td.call1((0, 0, micros))?;
    let epoch = if zoned {
        let utc = cached(py, &TIMEZONE, "datetime", "timezone")?.getattr("utc")?;
        dt.call1((1970, 1, 1, 0, 0, 0, 0, utc))?
    } else {
        dt.call1((1970, 1, 1))?
    };
    epoch.call_method1("__add__", (delta,))
}

/// An unscaled decimal as `decimal.Decimal`.
fn decimal<'py>(py: Python<'py>, unscaled: i128, scale: i8) -> PyResult<Bound<'py, PyAny>> {
    let text = if scale > 0 {
        let s = scale as usize;
        let digits = unscaled.unsigned_abs().to_string();
        let digits = format!("{digits:0>width$}", width = s + 1);
        let (int, frac) = digits.split_at(digits.len() - s);
        format!("{}{int}.{frac}", if unscaled < 0 { "-" } else { "" })
    } else {
        format!("{unscaled}e{}", -(scale as i32))
    };
    cached(py, &DECIMAL, "decimal", "Decimal")?.call1((text,))
}

/// Row `i` of `batch` as a tuple.
pub fn row<'py>(py: Python<'py>, batch: &RecordBatch, i: usize) -> PyResult<Bound<'py, PyTuple>> {
    let cells = batch.columns().iter().map(|c| cell(py, c, i)).collect::<PyResult<Vec<_>>>()?;
    PyTuple::new(py, cells)
}

/// The value at `i` of `a` as a Python object (`None` for NULL).
pub fn cell<'py>(py: Python<'py>, a: &ArrayRef, i: usize) -> PyResult<Bound<'py, PyAny>> {
    if a.is_null(i) {
        return Ok(py.None().into_bound(py));
    }
    use DataType as D;
    let v = match a.data_type() {
        D::Null => py.None().into_bound(py),
        D::Boolean => a.as_boolean().value(i).into_bound_py_any(py)?,
        D::Int8 => a.as_primitive::<Int8Type>().value(i).into_bound_py_any(py)?,
        D::Int16 => a.as_primitive::<Int16Type>().value(i).into_bound_py_any(py)?,
        D::Int32 => a.as_primitive::<Int32Type>().value(i).into_bound_py_any(py)?,
        D::Int64 => a.as_primitive::<Int64Type>().value(i).into_bound_py_any(py)?,
        D::UInt8 => a.as_primitive::<UInt8Type>().value(i).into_bound_py_any(py)?,
        D::UInt16 => a.as_primitive::<UInt16Type>().value(i).into_bound_py_any(py)?,
        D::UInt32 => a.as_primitive::<UInt32Type>().value(i).into_bound_py_any(py)?,
        D::UInt64 => a.as_primitive::<UInt64Type>().value(i).into_bound_py_any(py)?,
        D::Float16 => f32::from(a.as_primitive::<Float16Type>().value(i)).into_bound_py_any(py)?,
        D::Float32 => a.as_primitive::<Float32Type>().value(i).into_bound_py_any(py)?,
        D::Float64 => a.as_primitive::<Float64Type>().value(i).into_bound_py_any(py)?,
        D::Utf8 => a.as_string::<i32>().value(i).into_bound_py_any(py)?,
        D::LargeUtf8 => a.as_string::<i64>().value(i).into_bound_py_any(py)?,
        D::Utf8View => a.as_string_view().value(i).into_bound_py_any(py)?,
        D::Binary => PyBytes::new(py, a.as_binary::<i32>().value(i)).into_any(),
        D::LargeBinary => PyBytes::new(py, a.as_binary::<i64>().value(i)).into_any(),
        D::BinaryView => PyBytes::new(py, a.as_binary_view().value(i)).into_any(),
        D::FixedSizeBinary(_) => PyBytes::new(py, a.as_fixed_size_binary().value(i)).into_any(),
        D::Date32 => date(py, a.as_primitive::<Date32Type>().value(i) as i64)?,
        D::Date64 => date(py, a.as_primitive::<Date64Type>().value(i).div_euclid(86_400_000))?,
        D::Timestamp(unit, tz) => {
            let micros = match unit {
                TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(i) * 1_000_000,
                TimeUnit::Millisecond => {
                    a.as_primitive::<TimestampMillisecondType>().value(i) * 1_000
                }
                TimeUnit::Microsecond => a.as_primitive::<TimestampMicrosecondType>().value(i),
                TimeUnit::Nanosecond => {
                    a.as_primitive::<TimestampNanosecondType>().value(i).div_euclid(1_000)
                }
            };
            timestamp(py, micros, tz.is_some())?
        }
        D::Decimal128(_, s) => decimal(py, a.as_primitive::<Decimal128Type>().value(i), *s)?,
        D::Decimal64(_, s) => decimal(py, a.as_primitive::<Decimal64Type>().value(i) as i128, *s)?,
        D::Decimal32(_, s) => decimal(py, a.as_primitive::<Decimal32Type>().value(i) as i128, *s)?,
        D::List(_) => list(py, &a.as_list::<i32>().value(i))?,
        D::LargeList(_) => list(py, &a.as_list::<i64>().value(i))?,
        D::FixedSizeList(_, _) => list(py, &a.as_fixed_size_list().value(i))?,
        D::Struct(fields) => {
            let s = a.as_struct();
            let d = PyDict::new(py);
            for (f, c) in fields.iter().zip(s.columns()) {
                d.set_item(f.name(), cell(py, c, i)?)?;
            }
            d.into_any()
        }
        D::Map(_, _) => {
            let m = a.as_map();
            let entries = m.value(i);
            let (k, v) = (entries.column(0), entries.column(1));
            let d = PyDict::new(py);
            for j in 0..entries.len() {
                d.set_item(cell(py, k, j)?, cell(py, v, j)?)?;
            }
            d.into_any()
        }
        D::Dictionary(_, _) => {
            let d = a.as_any_dictionary();
            let key = d.normalized_keys()[i];
            cell(py, d.values(), key)?
        }
        other => {
            // Anything else is shown as Arrow's own rendering of the value.
            let fmt = arrow_cast::display::ArrayFormatter::try_new(a.as_ref(), &Default::default())
                .map_err(|e| NotSupportedError::new_err(format!("{other}: {e}")))?;
            fmt.value(i).to_string().into_bound_py_any(py)?
        }
    };
    Ok(v)
}

fn list<'py>(py: Python<'py>, values: &ArrayRef) -> PyResult<Bound<'py, PyAny>> {
    let items = (0..values.len()).map(|j| cell(py, values, j)).collect::<PyResult<Vec<_>>>()?;
    Ok(PyList::new(py, items)?.into_any())
}

/// A Python value as a statement parameter.
pub fn param(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let py = obj.py();
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if obj.is_instance_of::<PyBool>() {
        return Ok(Value::Bool(obj.extract::<bool>()?));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::Int(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::UInt(u));
        }
        return Err(bad_arg("integer parameter out of the 64-bit range"));
    }
    if obj.is_instance_of::<PyFloat>() {
        return Ok(Value::Float(obj.extract::<f64>()?));
    }
    if obj.is_instance_of::<PyString>() {
        return Ok(Value::Str(obj.extract::<String>()?));
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(Value::Bytes(b.as_bytes().to_vec()));
    }
    // datetime is a subclass of date: test it first.
    if obj.is_instance(cached(py, &DATETIME, "datetime", "datetime")?)? {
        let aware = !obj.getattr("tzinfo")?.is_none();
        let epoch = if aware {
            let utc = cached(py, &TIMEZONE, "datetime", "timezone")?.getattr("utc")?;
            cached(py, &DATETIME, "datetime", "datetime")?.call1((1970, 1, 1, 0, 0, 0, 0, utc))?
        } else {
            cached(py, &DATETIME, "datetime", "datetime")?.call1((1970, 1, 1))?
        };
        let delta = obj.call_method1("__sub__", (epoch,))?;
        let (d, s, us): (i64, i64, i64) = (
            delta.getattr("days")?.extract()?,
            delta.getattr("seconds")?.extract()?,
            delta.getattr("microseconds")?.extract()?,
        );
        return Ok(Value::Timestamp((d * 86_400 + s) * 1_000_000 + us));
    }
    if obj.is_instance(cached(py, &DATE, "datetime", "date")?)? {
        let ord: i64 = obj.call_method0("toordinal")?.extract()?;
        return Ok(Value::Date((ord - 719_163) as i32));
    }
    if obj.is_instance(cached(py, &DECIMAL, "decimal", "Decimal")?)? {
        return decimal_param(obj);
    }
    if obj.hasattr("tolist")? && obj.hasattr("dtype")? {
        // A numpy array: a vector.
        return param(&obj.call_method0("tolist")?);
    }
    if let Ok(v) = obj.extract::<Vec<f32>>() {
        return Ok(Value::Vector(v));
    }
    Err(bad_arg(format!(
        "cannot use a {} as a parameter (None, bool, int, float, str, bytes, date, datetime, \
         Decimal, or a list / numpy array of floats for a vector)",
        obj.get_type().name()?
    )))
}

/// A `decimal.Decimal` as a DECIMAL parameter of its own precision and scale; beyond 38
/// digits (or NaN / infinity) as text, which SQL casts where the column's type is known.
fn decimal_param(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let text = || -> PyResult<Value> { Ok(Value::Str(obj.str()?.extract::<String>()?)) };
    let t = obj.call_method0("as_tuple")?;
    let (sign, digits, exp): (i64, Vec<u8>, Bound<'_, PyAny>) =
        (t.get_item(0)?.extract()?, t.get_item(1)?.extract()?, t.get_item(2)?);
    let Ok(exp) = exp.extract::<i64>() else { return text() };
    let (mut unscaled, mut digits_n) = (0i128, digits.len() as i64);
    for d in &digits {
        let Some(v) = unscaled.checked_mul(10).and_then(|v| v.checked_add(*d as i128)) else {
            return text();
        };
        unscaled = v;
    }
    let scale = if exp < 0 { -exp } else { 0 };
    for _ in 0..exp.max(0) {
        let Some(v) = unscaled.checked_mul(10) else { return text() };
        unscaled = v;
        digits_n += 1;
    }
    let precision = digits_n.max(scale).max(1);
    if precision > 38 {
        return text();
    }
    if sign == 1 {
        unscaled = -unscaled;
    }
    let a = arrow_array::Decimal128Array::from(vec![unscaled])
        .with_precision_and_scale(precision as u8, scale as i8)
        .map_err(|e| bad_arg(e.to_string()))?;
    Ok(Value::Nested(std::sync::Arc::new(a)))
}

/// A sequence of Python values as parameters.
pub fn params(seq: Option<&Bound<'_, PyAny>>) -> PyResult<Vec<Value>> {
    let Some(seq) = seq else { return Ok(Vec::new()) };
    if seq.is_none() {
        return Ok(Vec::new());
    }
    if seq.is_instance_of::<PyString>() || seq.is_instance_of::<PyDict>() {
        return Err(bad_arg(
            "parameters are a sequence (a list or tuple) bound to ? / $1, $2, … in order",
        ));
    }
    seq.try_iter()?.map(|o| param(&o?)).collect()
}
