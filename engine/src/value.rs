//! Rows and values: the ergonomic, row-at-a-time face of the API.
//!
//! [`Row`] is a builder of `(column, value)` pairs for inserts, and the result type of
//! `Table::get`. Conversions between [`Value`]s and Arrow columns live here; anything
//! the row API cannot express (nested types) is inserted as Arrow batches and read back as
//! [`Value::Nested`].

use std::sync::Arc;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Decimal128Builder, FixedSizeListBuilder, Float32Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{
    Array, ArrayRef, Float32Array, Float64Array, PrimitiveArray, RecordBatch, StringArray,
    new_null_array,
};
use arrow_schema::{DataType, Field, FieldRef, TimeUnit};

use crate::error::{Error, Result};

/// One value of a row.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer (fits any integer, date or timestamp column when in range).
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float.
    Float(f64),
    /// Text.
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A `VECTOR(D)` value.
    Vector(Vec<f32>),
    /// Days since the Unix epoch.
    Date(i32),
    /// A timestamp in the column's unit since the Unix epoch.
    Timestamp(i64),
    /// A decimal's unscaled value.
    Decimal(i128),
    /// A value of a nested or otherwise row-inexpressible type: a one-element Arrow array.
    Nested(ArrayRef),
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Bool(v)
    }
}
macro_rules! from_int {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Value {
            fn from(v: $t) -> Self { Value::$v(v.into()) }
        }
    )*};
}
from_int!(i8 => Int, i16 => Int, i32 => Int, i64 => Int, u8 => UInt, u16 => UInt, u32 => UInt, u64 => UInt, f32 => Float, f64 => Float);
impl From<&str> for Value {
    fn from(v: &str) -> Self {
        Value::Str(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Self {
        Value::Str(v)
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Self {
        Value::Bytes(v)
    }
}
impl From<Vec<f32>> for Value {
    fn from(v: Vec<f32>) -> Self {
        Value::Vector(v)
    }
}
impl From<&[f32]> for Value {
    fn from(v: &[f32]) -> Self {
        Value::Vector(v.to_vec())
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Self {
        v.map_or(Value::Null, Into::into)
    }
}

/// A row: column names with values. Build one with [`Row::new`] and [`Row::set`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Row {
    values: Vec<(String, Value)>,
}

impl Row {
    /// An empty row.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `column` to `value` (replacing an earlier value of the same column).
    pub fn set(mut self, column: &str, value: impl Into<Value>) -> Self {
        let value = value.into();
        match self.values.iter_mut().find(|(c, _)| c == column) {
            Some(slot) => slot.1 = value,
            None => self.values.push((column.to_string(), value)),
        }
        self
    }

    /// The value of `column`, if the row has one.
    pub fn get(&self, column: &str) -> Option<&Value> {
        self.values.iter().find(|(c, _)| c == column).map(|(_, v)| v)
    }

    /// The row's `_id`, when it came from the database.
    pub fn id(&self) -> Option<u64> {
        match self.get(basalt_storage::ID_COLUMN) {
            Some(Value::UInt(v)) => Some(*v),
            _ => None,
        }
    }

    /// Columns and values in order.
    pub fn values(&self) -> &[(String, Value)] {
        &self.values
    }

    /// A row of these (column, value) pairs, taken as they are (names distinct).
    pub(crate) fn from_values(values: Vec<(String, Value)>) -> Row {
        Row { values }
    }

    /// Reads row `i` of `batch`.
    pub fn from_batch(batch: &RecordBatch, i: usize) -> Row {
        let schema = batch.schema();
        let values = schema
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(f, c)| (f.name().clone(), value_at(c, i)))
            .collect();
        Row { values }
    }
}

/// The value at row `i` of an array: through the storage's [`basalt_storage::Cell`] for
/// the types cells cover, a vector or a nested slice otherwise.
pub fn value_at(a: &ArrayRef, i: usize) -> Value {
    if let Some(c) = basalt_storage::encoding::cell_at(a.as_ref(), i) {
        return cell_value(a.data_type(), c);
    }
    match a.data_type() {
        DataType::FixedSizeList(f, _) if f.data_type() == &DataType::Float32 => {
            let l = a.as_fixed_size_list().value(i);
            Value::Vector(l.as_primitive::<Float32Type>().values().to_vec())
        }
        _ => Value::Nested(a.slice(i, 1)),
    }
}

/// The value a storage row visit hands out (see `TableSnapshot::visit_row`), as
/// [`value_at`] would give it for the same row of an array of type `dt`.
pub fn value_of(dt: &DataType, v: basalt_storage::RowValue<'_>) -> Value {
    use basalt_storage::RowValue;
    match v {
        RowValue::Array(a, i) => value_at(a, i),
        RowValue::Cell(c) => cell_value(dt, c),
    }
}

/// A cell of a column of type `dt` as a value (dates and timestamps keep their kind).
fn cell_value(dt: &DataType, cell: basalt_storage::Cell<'_>) -> Value {
    use basalt_storage::Cell;
    match (cell, dt) {
        (Cell::Null, _) => Value::Null,
        (Cell::Bool(b), _) => Value::Bool(b),
        (Cell::Int(x), DataType::Date32) => Value::Date(x as i32),
        (Cell::Int(x), DataType::Timestamp(_, _)) => Value::Timestamp(x),
        (Cell::Int(x), _) => Value::Int(x),
        (Cell::UInt(x), _) => Value::UInt(x),
        (Cell::F32(x), _) => Value::Float(x.into()),
        (Cell::F64(x), _) => Value::Float(x),
        (Cell::Str(x), _) => Value::Str(x.to_string()),
        (Cell::Bytes(x), _) => Value::Bytes(x.to_vec()),
        (Cell::Decimal(x), _) => Value::Decimal(x),
    }
}

/// Builds the column `field` of `table` from the rows' values (absent = NULL).
pub fn column_from_rows(table: &str, field: &FieldRef, rows: &[Row]) -> Result<ArrayRef> {
    let name = field.name().as_str();
    let bad = |reason: String| Error::InvalidValue {
        table: table.to_string(),
        column: name.to_string(),
        reason,
    };
    // The values in row order, looked up again for each pass (no list of them is built:
    // single-row inserts are the common case and each allocation shows).
    let vals = || rows.iter().map(|r| r.get(name).unwrap_or(&Value::Null));
    let n = rows.len();
    let mismatch =
        |v: &Value| bad(format!("cannot store {v:?} in a column of type {}", field.data_type()));
    // A validity bitmap only when some value is NULL.
    let nulls = || -> Option<arrow_buffer::NullBuffer> {
        vals()
            .any(|v| matches!(v, Value::Null))
            .then(|| arrow_buffer::NullBuffer::from_iter(vals().map(|v| !matches!(v, Value::Null))))
    };
    fn int_of(v: &Value) -> Option<i128> {
        match v {
            Value::Int(x) | Value::Timestamp(x) => Some(i128::from(*x)),
            Value::UInt(x) => Some(i128::from(*x)),
            Value::Date(x) => Some(i128::from(*x)),
            _ => None,
        }
    }
    macro_rules! ints {
        ($t:ty, $native:ty) => {{
            let mut out: Vec<$native> = Vec::with_capacity(n);
            for v in vals() {
                out.push(match v {
                    Value::Null => 0,
                    v => {
                        let x = int_of(v).ok_or_else(|| mismatch(v))?;
                        <$native>::try_from(x).map_err(|_| {
                            bad(format!("value {x} is out of range for {}", field.data_type()))
                        })?
                    }
                });
            }
            Arc::new(
                PrimitiveArray::<$t>::new(out.into(), nulls())
                    .with_data_type(field.data_type().clone()),
            ) as ArrayRef
        }};
    }
    let float_of = |v: &Value| -> Result<Option<f64>> {
        Ok(match v {
            Value::Null => None,
            Value::Float(x) => Some(*x),
            Value::Int(x) => Some(*x as f64),
            Value::UInt(x) => Some(*x as f64),
            v => return Err(mismatch(v)),
        })
    };
    Ok(match field.data_type() {
        DataType::Boolean => {
            let mut b = BooleanBuilder::with_capacity(n);
            for v in vals() {
                match v {
                    Value::Null => b.append_null(),
                    Value::Bool(x) => b.append_value(*x),
                    v => return Err(mismatch(v)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Int8 => ints!(Int8Type, i8),
        DataType::Int16 => ints!(Int16Type, i16),
        DataType::Int32 => ints!(Int32Type, i32),
        DataType::Int64 => ints!(Int64Type, i64),
        DataType::UInt8 => ints!(UInt8Type, u8),
        DataType::UInt16 => ints!(UInt16Type, u16),
        DataType::UInt32 => ints!(UInt32Type, u32),
        DataType::UInt64 => ints!(UInt64Type, u64),
        DataType::Date32 => ints!(Date32Type, i32),
        DataType::Timestamp(TimeUnit::Second, _) => ints!(TimestampSecondType, i64),
        DataType::Timestamp(TimeUnit::Millisecond, _) => ints!(TimestampMillisecondType, i64),
        DataType::Timestamp(TimeUnit::Microsecond, _) => ints!(TimestampMicrosecondType, i64),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => ints!(TimestampNanosecondType, i64),
        DataType::Float32 => {
            let mut out: Vec<f32> = Vec::with_capacity(n);
            for v in vals() {
                out.push(float_of(v)?.unwrap_or(0.0) as f32);
            }
            Arc::new(Float32Array::new(out.into(), nulls()))
        }
        DataType::Float64 => {
            let mut out: Vec<f64> = Vec::with_capacity(n);
            for v in vals() {
                out.push(float_of(v)?.unwrap_or(0.0));
            }
            Arc::new(Float64Array::new(out.into(), nulls()))
        }
        DataType::Utf8 => {
            let mut data: Vec<u8> = Vec::new();
            let mut offsets: Vec<i32> = Vec::with_capacity(n + 1);
            offsets.push(0);
            for v in vals() {
                match v {
                    Value::Null => {}
                    Value::Str(s) => data.extend_from_slice(s.as_bytes()),
                    v => return Err(mismatch(v)),
                }
                let end = i32::try_from(data.len())
                    .map_err(|_| bad("more than 2 GiB of text in one insert".into()))?;
                offsets.push(end);
            }
            // `String`s joined and split where they were joined: valid UTF-8 on character
            // boundaries with offsets ascending from zero (`try_new` checks it again).
            let offsets = arrow_buffer::OffsetBuffer::new(offsets.into());
            Arc::new(
                StringArray::try_new(offsets, data.into(), nulls())
                    .map_err(|e| bad(e.to_string()))?,
            )
        }
        DataType::Binary => {
            let bytes = vals()
                .map(|v| match v {
                    Value::Bytes(x) => x.len(),
                    Value::Str(s) => s.len(),
                    _ => 0,
                })
                .sum();
            let mut b = BinaryBuilder::with_capacity(n, bytes);
            for v in vals() {
                match v {
                    Value::Null => b.append_null(),
                    Value::Bytes(x) => b.append_value(x),
                    Value::Str(s) => b.append_value(s.as_bytes()),
                    v => return Err(mismatch(v)),
                }
            }
            Arc::new(b.finish())
        }
        DataType::Decimal128(p, s) => {
            let mut b = Decimal128Builder::with_capacity(n);
            for v in vals() {
                match v {
                    Value::Null => b.append_null(),
                    Value::Decimal(x) => b.append_value(*x),
                    v => return Err(mismatch(v)),
                }
            }
            Arc::new(b.finish().with_precision_and_scale(*p, *s).map_err(|e| bad(e.to_string()))?)
        }
        DataType::FixedSizeList(child, dim) if child.data_type() == &DataType::Float32 => {
            let dim = *dim as usize;
            let values = Float32Builder::with_capacity(n * dim);
            let mut b = FixedSizeListBuilder::with_capacity(values, dim as i32, n)
                .with_field(child.clone());
            for v in vals() {
                match v {
                    Value::Null => {
                        b.values().append_slice(&vec![0.0; dim]);
                        b.append(false);
                    }
                    Value::Vector(x) if x.len() == dim => {
                        b.values().append_slice(x);
                        b.append(true);
                    }
                    Value::Vector(x) => {
                        return Err(Error::Storage(basalt_storage::Error::VectorDimension {
                            table: table.to_string(),
                            column: name.to_string(),
                            expected: dim,
                            found: x.len(),
                        }));
                    }
                    v => return Err(mismatch(v)),
                }
            }
            Arc::new(b.finish())
        }
        other => {
            if vals().all(|v| matches!(v, Value::Null)) {
                new_null_array(other, n)
            } else {
                let parts: Vec<&dyn Array> = vals()
                    .map(|v| match v {
                        Value::Nested(a) if a.data_type() == other && a.len() == 1 => {
                            Ok(a.as_ref())
                        }
                        v => Err(mismatch(v)),
                    })
                    .collect::<Result<_>>()?;
                arrow_select::concat::concat(&parts).map_err(|e| bad(e.to_string()))?
            }
        }
    })
}

/// The user fields named by any row, checked against the table.
pub fn row_fields(
    table: &str,
    user: &[basalt_storage::types::ColumnDef],
    rows: &[Row],
) -> Result<Vec<FieldRef>> {
    let mut named: Vec<&str> = Vec::new();
    for r in rows {
        for (c, _) in r.values() {
            if !named.contains(&c.as_str()) {
                named.push(c);
            }
        }
    }
    let mut out = Vec::new();
    for c in named {
        if c == basalt_storage::ID_COLUMN {
            return Err(Error::Storage(basalt_storage::Error::InvalidInput {
                table: table.to_string(),
                reason: "_id is assigned by Basalt and cannot be inserted".into(),
            }));
        }
        let f = user.iter().map(|d| &d.field).find(|f| f.name() == c).ok_or_else(|| {
            basalt_storage::Error::ColumnNotFound {
                table: table.to_string(),
                column: c.to_string(),
            }
        })?;
        // A NOT NULL column some row leaves NULL (or out) gets a nullable field here, so
        // the batch can be built and conforming it to the table reports the NULL with a
        // clear error; otherwise the table's field is shared (no allocation per row).
        let has_null = || rows.iter().any(|r| matches!(r.get(c), None | Some(Value::Null)));
        out.push(if f.is_nullable() || !has_null() {
            f.clone()
        } else {
            Arc::new(Field::new(f.name(), f.data_type().clone(), true))
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use arrow_array::{Float32Array, Float64Array, Int32Array, Int64Array, StringArray};
    use proptest::prelude::*;

    use super::*;

    /// One row's optional values; `None` leaves the column out of the row, `Some(None)`
    /// sets it to NULL explicitly.
    type Cells = (Option<Option<i64>>, Option<Option<f64>>, Option<Option<String>>);

    fn row_of((i, f, s): &Cells) -> Row {
        let mut r = Row::new();
        if let Some(i) = i {
            r = r.set("i", i.map_or(Value::Null, Value::Int));
            r = r.set("i32", i.map_or(Value::Null, |x| Value::Int(x % 1000)));
        }
        if let Some(f) = f {
            r = r.set("f", f.map_or(Value::Null, Value::Float));
            r = r.set("f32", f.map_or(Value::Null, Value::Float));
        }
        if let Some(s) = s {
            r = r.set("s", s.clone().map_or(Value::Null, Value::Str));
        }
        r
    }

    proptest! {
        /// The columns built from rows equal the arrays Arrow's own constructors build from
        /// the same optional values (absent and NULL values both read NULL).
        #[test]
        fn columns_from_rows_match_arrow_arrays(
            cells in proptest::collection::vec(
                (
                    proptest::option::of(proptest::option::of(any::<i64>())),
                    proptest::option::of(proptest::option::of(-1e6f64..1e6)),
                    proptest::option::of(proptest::option::of("[a-zé中]{0,6}")),
                ),
                1..12,
            )
        ) {
            let rows: Vec<Row> = cells.iter().map(row_of).collect();
            let col = |name: &str, dt: DataType| {
                column_from_rows("t", &Arc::new(Field::new(name, dt, true)), &rows).unwrap()
            };
            let ints: Vec<Option<i64>> = cells.iter().map(|c| c.0.flatten()).collect();
            let floats: Vec<Option<f64>> = cells.iter().map(|c| c.1.flatten()).collect();
            let texts: Vec<Option<String>> = cells.iter().map(|c| c.2.clone().flatten()).collect();
            let small: Vec<Option<i32>> = ints.iter().map(|x| x.map(|x| (x % 1000) as i32)).collect();
            let narrow: Vec<Option<f32>> = floats.iter().map(|x| x.map(|x| x as f32)).collect();
            let want: [(&str, DataType, ArrayRef); 5] = [
                ("i", DataType::Int64, Arc::new(Int64Array::from(ints))),
                ("i32", DataType::Int32, Arc::new(Int32Array::from(small))),
                ("f", DataType::Float64, Arc::new(Float64Array::from(floats))),
                ("f32", DataType::Float32, Arc::new(Float32Array::from(narrow))),
                ("s", DataType::Utf8, Arc::new(StringArray::from(texts))),
            ];
            for (name, dt, want) in want {
                let got = col(name, dt);
                prop_assert_eq!(got.as_ref(), want.as_ref(), "{}", name);
            }
        }
    }

    #[test]
    fn values_of_the_wrong_kind_or_range_are_refused() {
        let rows = [Row::new().set("x", "text")];
        let f = Arc::new(Field::new("x", DataType::Int64, true));
        assert!(column_from_rows("t", &f, &rows).is_err());
        let rows = [Row::new().set("x", 1i64 << 40)];
        let f = Arc::new(Field::new("x", DataType::Int32, true));
        assert!(column_from_rows("t", &f, &rows).unwrap_err().to_string().contains("out of range"));
        let rows = [Row::new().set("x", 3i64)];
        let f = Arc::new(Field::new("x", DataType::Utf8, true));
        assert!(column_from_rows("t", &f, &rows).is_err());
    }
}
