//! One value of a row as point reads hand it out ([`RowValue`]: a cell read in place from
//! an encoded block, or a row of an array), and the one-value arrays and builders made
//! from such values.
//!
//! What this module must not do: know about tables, segments or snapshots.

use arrow_array::{ArrayRef, PrimitiveArray};
use arrow_buffer::{Buffer, OffsetBuffer, ScalarBuffer};
use arrow_schema::{DataType, TimeUnit};

use std::sync::Arc;

use crate::encoding::{self, Cell};
use crate::error::{Error, Result};

/// One value of a row as [`TableSnapshot::visit_row`] hands it out.
#[derive(Debug, Clone, Copy)]
pub enum RowValue<'a> {
    /// Read in place from an encoded block.
    Cell(Cell<'a>),
    /// Row `.1` of this array (memtable rows, kinds cells do not cover).
    Array(&'a ArrayRef, usize),
}

/// Appends `v` to `b`, a builder of type `dt` from [`arrow_array::builder::make_builder`]
/// (a type [`encoding::reads_cells`] accepts).
pub(crate) fn append_value(
    b: &mut dyn arrow_array::builder::ArrayBuilder,
    dt: &DataType,
    v: RowValue<'_>,
) -> Result<()> {
    use arrow_array::builder::*;
    use arrow_array::types::*;
    let mismatch = || Error::InvalidInput {
        table: String::new(),
        reason: format!("a stored value does not fit type {dt}"),
    };
    // Appends the cell's value (its variant `$v`, as `$e`) to a builder of type `$b`.
    macro_rules! put {
        ($c:expr, $b:ty, $v:path, $x:ident => $e:expr) => {{
            let b = b.as_any_mut().downcast_mut::<$b>().ok_or_else(mismatch)?;
            match $c {
                $v($x) => b.append_value($e),
                Cell::Null => b.append_null(),
                _ => return Err(mismatch()),
            }
        }};
    }
    // The same for a primitive builder of `$t`.
    macro_rules! prim {
        ($c:expr, $t:ty, $v:path) => {
            put!($c, PrimitiveBuilder<$t>, $v, x => x as _)
        };
    }
    // An array row as the cell it holds (NULL included).
    let cell = match v {
        RowValue::Cell(c) => c,
        RowValue::Array(a, i) => encoding::cell_at(a.as_ref(), i).ok_or_else(mismatch)?,
    };
    match dt {
        DataType::Int8 => prim!(cell, Int8Type, Cell::Int),
        DataType::Int16 => prim!(cell, Int16Type, Cell::Int),
        DataType::Int32 => prim!(cell, Int32Type, Cell::Int),
        DataType::Int64 => prim!(cell, Int64Type, Cell::Int),
        DataType::Date32 => prim!(cell, Date32Type, Cell::Int),
        DataType::Timestamp(TimeUnit::Second, _) => prim!(cell, TimestampSecondType, Cell::Int),
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            prim!(cell, TimestampMillisecondType, Cell::Int)
        }
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            prim!(cell, TimestampMicrosecondType, Cell::Int)
        }
        DataType::Timestamp(TimeUnit::Nanosecond, _) => {
            prim!(cell, TimestampNanosecondType, Cell::Int)
        }
        DataType::UInt8 => prim!(cell, UInt8Type, Cell::UInt),
        DataType::UInt16 => prim!(cell, UInt16Type, Cell::UInt),
        DataType::UInt32 => prim!(cell, UInt32Type, Cell::UInt),
        DataType::UInt64 => prim!(cell, UInt64Type, Cell::UInt),
        DataType::Float32 => prim!(cell, Float32Type, Cell::F32),
        DataType::Float64 => prim!(cell, Float64Type, Cell::F64),
        DataType::Decimal128(_, _) => prim!(cell, Decimal128Type, Cell::Decimal),
        DataType::Boolean => put!(cell, BooleanBuilder, Cell::Bool, x => x),
        DataType::Utf8 => put!(cell, StringBuilder, Cell::Str, x => x),
        DataType::Binary => put!(cell, BinaryBuilder, Cell::Bytes, x => x),
        _ => return Err(mismatch()),
    }
    Ok(())
}

/// A one-row array of type `dt` holding `v` (a cell of another kind than `dt` stores is
/// an error, not a guess).
pub(crate) fn one_value_array(dt: &DataType, v: RowValue<'_>) -> Result<ArrayRef> {
    use arrow_array::types::*;
    macro_rules! prim {
        ($t:ty, $x:expr) => {
            // A `Vec`-backed buffer: Arrow's own constructors allocate 64-byte aligned
            // memory, which costs more than the rest of a one-row read.
            Arc::new(
                PrimitiveArray::<$t>::new(arrow_buffer::ScalarBuffer::from(vec![$x as _]), None)
                    .with_data_type(dt.clone()),
            ) as ArrayRef
        };
    }
    let cell = match v {
        RowValue::Array(a, i) => return Ok(a.slice(i, 1)),
        RowValue::Cell(c) => c,
    };
    Ok(match (cell, dt) {
        (Cell::Null, _) => arrow_array::new_null_array(dt, 1),
        (Cell::Bool(b), DataType::Boolean) => Arc::new(arrow_array::BooleanArray::from(vec![b])),
        (Cell::Int(x), DataType::Int8) => prim!(Int8Type, x),
        (Cell::Int(x), DataType::Int16) => prim!(Int16Type, x),
        (Cell::Int(x), DataType::Int32) => prim!(Int32Type, x),
        (Cell::Int(x), DataType::Int64) => prim!(Int64Type, x),
        (Cell::Int(x), DataType::Date32) => prim!(Date32Type, x),
        (Cell::Int(x), DataType::Timestamp(unit, _)) => match unit {
            TimeUnit::Second => prim!(TimestampSecondType, x),
            TimeUnit::Millisecond => prim!(TimestampMillisecondType, x),
            TimeUnit::Microsecond => prim!(TimestampMicrosecondType, x),
            TimeUnit::Nanosecond => prim!(TimestampNanosecondType, x),
        },
        (Cell::UInt(x), DataType::UInt8) => prim!(UInt8Type, x),
        (Cell::UInt(x), DataType::UInt16) => prim!(UInt16Type, x),
        (Cell::UInt(x), DataType::UInt32) => prim!(UInt32Type, x),
        (Cell::UInt(x), DataType::UInt64) => prim!(UInt64Type, x),
        (Cell::F32(x), DataType::Float32) => prim!(Float32Type, x),
        (Cell::F64(x), DataType::Float64) => prim!(Float64Type, x),
        (Cell::Decimal(x), DataType::Decimal128(_, _)) => prim!(Decimal128Type, x),
        (Cell::Str(x), DataType::Utf8) => {
            let (offsets, data) = one_value_buffers(x.as_bytes())?;
            // SAFETY: the one value is `x`, a `&str` (valid UTF-8), and the offsets are 0
            // and its length; Arrow's check would validate the same bytes again.
            Arc::new(unsafe { arrow_array::StringArray::new_unchecked(offsets, data, None) })
        }
        (Cell::Bytes(x), DataType::Binary) => {
            let (offsets, data) = one_value_buffers(x)?;
            Arc::new(arrow_array::BinaryArray::new(offsets, data, None))
        }
        (cell, dt) => {
            return Err(Error::InvalidInput {
                table: String::new(),
                reason: format!("a stored value {cell:?} does not fit type {dt}"),
            });
        }
    })
}

/// The offsets (0 and its length) and the bytes of a one-value byte-string array, in one
/// allocation (when the allocator aligns it for `i32`): the two offsets first, the value
/// after them.
pub(crate) fn one_value_buffers(value: &[u8]) -> Result<(OffsetBuffer<i32>, Buffer)> {
    let len = i32::try_from(value.len()).map_err(|_| Error::InvalidInput {
        table: String::new(),
        reason: format!("a stored value of {} bytes is too long for Utf8/Binary", value.len()),
    })?;
    let mut bytes = Vec::with_capacity(8 + value.len());
    bytes.extend_from_slice(&0i32.to_le_bytes());
    bytes.extend_from_slice(&len.to_le_bytes());
    bytes.extend_from_slice(value);
    if !(bytes.as_ptr() as usize).is_multiple_of(align_of::<i32>()) {
        // An allocator that does not align byte vectors: two buffers.
        return Ok((OffsetBuffer::from_lengths([value.len()]), Buffer::from_vec(value.to_vec())));
    }
    let all = Buffer::from_vec(bytes);
    let offsets = ScalarBuffer::<i32>::new(all.slice_with_length(0, 8), 0, 2);
    Ok((OffsetBuffer::new(offsets), all.slice(8)))
}
