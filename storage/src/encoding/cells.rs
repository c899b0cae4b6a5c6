//! Reading single values in place: a [`Cell`] borrowed from an encoded block (point reads
//! without building an array), and the reader that finds a block's sections once for many
//! rows.
//!
//! Part of the encodings (see the module doc of `encoding`).

use super::*;

/// One value of a row read straight from an encoded block by [`decode_cell`], borrowing
/// from the block: what a point lookup turns into its own value type without building an
/// Arrow array per column.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    /// NULL.
    Null,
    /// A `Boolean`.
    Bool(bool),
    /// A signed integer column's value (`Int8`…`Int64`, `Date32`, `Timestamp`).
    Int(i64),
    /// An unsigned integer column's value (`UInt8`…`UInt64`).
    UInt(u64),
    /// A `Float32`.
    F32(f32),
    /// A `Float64`.
    F64(f64),
    /// A `Utf8` value (checked to be UTF-8).
    Str(&'a str),
    /// A `Binary` value.
    Bytes(&'a [u8]),
    /// A `Decimal128`'s unscaled value.
    Decimal(i128),
}

/// Whether [`decode_cell`] reads values of this Arrow type (others need an array).
pub fn reads_cells(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
            | DataType::Float32
            | DataType::Float64
            | DataType::Utf8
            | DataType::Binary
            | DataType::Date32
            | DataType::Timestamp(_, _)
            | DataType::Decimal128(_, _)
    )
}

/// Row `row` of an uncompressed block as one [`Cell`], read from its sections in place —
/// no array, no copy, no other row touched. `Ok(None)` when the value cannot be read this
/// way (a type [`reads_cells`] refuses, delta-packed integers with varying steps, which
/// need a prefix sum): the caller decodes that column with [`decode_rows`]. Every offset
/// and length is checked; damaged metadata yields [`Error::Corrupt`], never a panic.
pub fn decode_cell<'a>(raw: &'a [u8], c: ChunkInfo<'_>, row: usize) -> Result<Option<Cell<'a>>> {
    match CellReader::new(raw, c)? {
        Some(r) => r.read(row).map(Some),
        None => Ok(None),
    }
}

/// Reads single rows of one uncompressed block as [`Cell`]s in place (see
/// [`decode_cell`]): the sections are found and their sizes checked once, so each row
/// costs a few loads — how a lookup of many rows reads a block it has several rows in.
#[derive(Debug, Clone, Copy)]
pub struct CellReader<'a, 'c> {
    c: ChunkInfo<'c>,
    /// The validity bitmap, when the chunk holds NULLs.
    validity: Option<&'a [u8]>,
    kind: CellKind<'a>,
}

/// Where a [`CellReader`] finds a row's value (every section checked to hold all rows).
#[derive(Debug, Clone, Copy)]
pub(super) enum CellKind<'a> {
    Bool(&'a [u8]),
    /// Plain strings: offsets (`rows + 1` of them) into `data`.
    Bytes {
        offsets: &'a [u8],
        data: &'a [u8],
    },
    /// Plain fixed-width values, `width` bytes per row.
    Fixed {
        values: &'a [u8],
        width: usize,
    },
    /// Frame of reference: `base` plus `bits` packed bits per row.
    For {
        packed: &'a [u8],
        bits: u8,
        base: u64,
    },
    /// A constant step: `first + row · step`.
    Step {
        first: u64,
        step: u64,
    },
    /// A dictionary of `len` strings (offsets into `data`), `width`-byte codes.
    DictBytes {
        offsets: &'a [u8],
        data: &'a [u8],
        codes: &'a [u8],
        width: usize,
        len: usize,
    },
    /// A dictionary of `len` fixed-width values (`size` bytes each), `width`-byte codes.
    DictFixed {
        dict: &'a [u8],
        size: usize,
        codes: &'a [u8],
        width: usize,
        len: usize,
    },
}

impl<'a, 'c> CellReader<'a, 'c> {
    /// A reader of the block `raw` of chunk `c`; `Ok(None)` when its values cannot be read
    /// as cells (see [`decode_cell`]).
    pub fn new(raw: &'a [u8], c: ChunkInfo<'c>) -> Result<Option<CellReader<'a, 'c>>> {
        let corrupt = |reason: String| Error::corrupt(c.file, c.offset, reason);
        if !reads_cells(c.data_type) || matches!(c.encoding, Encoding::Ipc) {
            return Ok(None);
        }
        let n = c.rows;
        // The sections as slices of the block (the layout `sections` checks).
        let mut secs: [&[u8]; 4] = [&[]; 4];
        let expected = expected_sections(&c);
        if c.sections.len() != expected || expected > secs.len() {
            let found = c.sections.len();
            return Err(corrupt(format!("expected {expected} sections, found {found}")));
        }
        let mut pos = 0usize;
        for (slot, &len) in secs.iter_mut().zip(c.sections) {
            let len =
                usize::try_from(len).map_err(|_| corrupt("section length overflows".into()))?;
            let end = pos.checked_add(len).filter(|&e| e <= raw.len());
            let Some(end) = end else {
                let have = raw.len();
                return Err(corrupt(format!("section [{pos}, +{len}) exceeds block of {have}")));
            };
            *slot = &raw[pos..end];
            pos = align64(end);
        }
        let mut secs = &secs[..expected];
        // Section `s` holding at least `len` bytes (`None`: the size overflows).
        let sized = |s: &'a [u8], len: Option<usize>, what: &str| -> Result<&'a [u8]> {
            match len {
                Some(len) if s.len() >= len => Ok(s),
                _ => Err(corrupt(format!("{what} section too short for {n} rows"))),
            }
        };
        let validity = if c.null_count > 0 {
            let v = sized(secs[0], Some(n.div_ceil(8)), "validity")?;
            secs = &secs[1..];
            Some(v)
        } else {
            None
        };
        let kind = match (c.encoding, c.phys) {
            (Encoding::Plain, Physical::Bool) => {
                CellKind::Bool(sized(secs[0], Some(n.div_ceil(8)), "bool")?)
            }
            (Encoding::Plain, Physical::Bytes) => CellKind::Bytes {
                offsets: sized(
                    secs[0],
                    n.checked_add(1).and_then(|k| k.checked_mul(4)),
                    "offsets",
                )?,
                data: secs[1],
            },
            (Encoding::Plain, phys) => {
                let Some(width) = plain_width(phys) else { return Ok(None) };
                CellKind::Fixed { values: sized(secs[0], n.checked_mul(width), "values")?, width }
            }
            (Encoding::ForPacked { base, bits }, Physical::Int { .. } | Physical::Decimal128) => {
                CellKind::For {
                    packed: sized(secs[0], Some(bitpack::packed_len(n, *bits)), "packed")?,
                    bits: *bits,
                    base: *base,
                }
            }
            (
                Encoding::DeltaPacked { first, base, bits: 0 },
                Physical::Int { .. } | Physical::Decimal128,
            ) => CellKind::Step { first: *first, step: *base },
            (Encoding::Dict { code_width, dict_len }, phys) => {
                let (width, len) = (*code_width as usize, *dict_len as usize);
                if !matches!(width, 1 | 2 | 4) {
                    return Err(corrupt(format!("dictionary code width {width}")));
                }
                let entries = len.checked_add(1).and_then(|k| k.checked_mul(4));
                match phys {
                    Physical::Bytes => CellKind::DictBytes {
                        offsets: sized(secs[0], entries, "dictionary offsets")?,
                        data: secs[1],
                        codes: sized(secs[2], n.checked_mul(width), "codes")?,
                        width,
                        len,
                    },
                    Physical::F32 | Physical::F64 => {
                        let size = if phys == Physical::F32 { 4 } else { 8 };
                        CellKind::DictFixed {
                            dict: sized(secs[0], len.checked_mul(size), "dictionary")?,
                            size,
                            codes: sized(secs[1], n.checked_mul(width), "codes")?,
                            width,
                            len,
                        }
                    }
                    _ => return Err(corrupt("dictionary encoding for an unexpected kind".into())),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(CellReader { c, validity, kind }))
    }

    /// Row `row`'s value.
    pub fn read(&self, row: usize) -> Result<Cell<'a>> {
        let c = &self.c;
        let corrupt = |reason: String| Error::corrupt(c.file, c.offset, reason);
        if row >= c.rows {
            return Err(corrupt(format!("row {row} outside {} rows", c.rows)));
        }
        // Every section holds all rows (checked in `new`): indexing below stays in bounds.
        if let Some(v) = self.validity
            && v[row / 8] & (1 << (row % 8)) == 0
        {
            return Ok(Cell::Null);
        }
        let int = |pattern: u64| -> Cell<'a> {
            if c.phys == Physical::Decimal128 {
                // A decimal's unscaled value, packed as a signed 64-bit integer.
                return Cell::Decimal(i128::from(pattern as i64));
            }
            let Physical::Int { width, signed } = c.phys else { return Cell::UInt(pattern) };
            let shift = 64 - 8 * u32::from(width.clamp(1, 8));
            if signed {
                Cell::Int(((pattern << shift) as i64) >> shift)
            } else {
                Cell::UInt((pattern << shift) >> shift)
            }
        };
        // A fixed-width value (`b` holds exactly the kind's width, checked in `new`).
        let fixed = |b: &[u8]| -> Result<Cell<'a>> {
            let bad = || corrupt(format!("a {}-byte value for {:?}", b.len(), c.phys));
            Ok(match c.phys {
                Physical::Int { .. } => {
                    let mut a = [0u8; 8];
                    a.get_mut(..b.len()).ok_or_else(bad)?.copy_from_slice(b);
                    int(u64::from_le_bytes(a))
                }
                Physical::F32 => Cell::F32(f32::from_le_bytes(b.try_into().map_err(|_| bad())?)),
                Physical::F64 => Cell::F64(f64::from_le_bytes(b.try_into().map_err(|_| bad())?)),
                Physical::Decimal128 => {
                    Cell::Decimal(i128::from_le_bytes(b.try_into().map_err(|_| bad())?))
                }
                _ => return Err(bad()),
            })
        };
        let text = |b: &'a [u8]| -> Result<Cell<'a>> {
            Ok(if *c.data_type == DataType::Utf8 {
                Cell::Str(
                    std::str::from_utf8(b).map_err(|_| corrupt("string is not UTF-8".into()))?,
                )
            } else {
                Cell::Bytes(b)
            })
        };
        // Entry `i` of `offsets` (checked to hold it) into `data`.
        let entry = |offsets: &[u8], i: usize, data: &'a [u8]| -> Result<&'a [u8]> {
            let w = &offsets[i * 4..i * 4 + 8];
            let lo = i32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            let hi = i32::from_le_bytes([w[4], w[5], w[6], w[7]]);
            if lo < 0 || hi < lo || hi as usize > data.len() {
                return Err(corrupt("string offsets out of range".into()));
            }
            Ok(&data[lo as usize..hi as usize])
        };
        let code = |codes: &[u8], width: usize, len: usize| -> Result<usize> {
            let code = code_in(codes, width, row);
            if code >= len {
                return Err(corrupt(format!("dictionary code {code} out of {len} entries")));
            }
            Ok(code)
        };
        match self.kind {
            CellKind::Bool(b) => Ok(Cell::Bool(b[row / 8] & (1 << (row % 8)) != 0)),
            CellKind::Bytes { offsets, data } => text(entry(offsets, row, data)?),
            CellKind::Fixed { values, width } => fixed(&values[row * width..(row + 1) * width]),
            CellKind::For { packed, bits, base } => {
                Ok(int(base.wrapping_add(bitpack::get(packed, bits, row))))
            }
            CellKind::Step { first, step } => {
                Ok(int(first.wrapping_add(step.wrapping_mul(row as u64))))
            }
            CellKind::DictBytes { offsets, data, codes, width, len } => {
                text(entry(offsets, code(codes, width, len)?, data)?)
            }
            CellKind::DictFixed { dict, size, codes, width, len } => {
                let k = code(codes, width, len)?;
                fixed(&dict[k * size..(k + 1) * size])
            }
        }
    }
}

/// Code `i` of a dictionary chunk's codes section, `cw` (1, 2 or 4) bytes per code; the
/// caller has checked the section holds it.
pub(super) fn code_in(codes: &[u8], cw: usize, i: usize) -> usize {
    let b = &codes[cw * i..];
    match cw {
        1 => b[0] as usize,
        2 => u16::from_le_bytes([b[0], b[1]]) as usize,
        _ => u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize,
    }
}

/// Row `i` of `a` as a [`Cell`] (borrowing from `a`), for the types [`reads_cells`]
/// accepts; `None` for others.
pub fn cell_at(a: &dyn Array, i: usize) -> Option<Cell<'_>> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::*;
    use arrow_schema::TimeUnit;
    if a.is_null(i) {
        return Some(Cell::Null);
    }
    Some(match a.data_type() {
        DataType::Boolean => Cell::Bool(a.as_boolean().value(i)),
        DataType::Int8 => Cell::Int(a.as_primitive::<Int8Type>().value(i).into()),
        DataType::Int16 => Cell::Int(a.as_primitive::<Int16Type>().value(i).into()),
        DataType::Int32 => Cell::Int(a.as_primitive::<Int32Type>().value(i).into()),
        DataType::Int64 => Cell::Int(a.as_primitive::<Int64Type>().value(i)),
        DataType::Date32 => Cell::Int(a.as_primitive::<Date32Type>().value(i).into()),
        DataType::Timestamp(unit, _) => Cell::Int(match unit {
            TimeUnit::Second => a.as_primitive::<TimestampSecondType>().value(i),
            TimeUnit::Millisecond => a.as_primitive::<TimestampMillisecondType>().value(i),
            TimeUnit::Microsecond => a.as_primitive::<TimestampMicrosecondType>().value(i),
            TimeUnit::Nanosecond => a.as_primitive::<TimestampNanosecondType>().value(i),
        }),
        DataType::UInt8 => Cell::UInt(a.as_primitive::<UInt8Type>().value(i).into()),
        DataType::UInt16 => Cell::UInt(a.as_primitive::<UInt16Type>().value(i).into()),
        DataType::UInt32 => Cell::UInt(a.as_primitive::<UInt32Type>().value(i).into()),
        DataType::UInt64 => Cell::UInt(a.as_primitive::<UInt64Type>().value(i)),
        DataType::Float32 => Cell::F32(a.as_primitive::<Float32Type>().value(i)),
        DataType::Float64 => Cell::F64(a.as_primitive::<Float64Type>().value(i)),
        DataType::Decimal128(_, _) => Cell::Decimal(a.as_primitive::<Decimal128Type>().value(i)),
        DataType::Utf8 => Cell::Str(a.as_string::<i32>().value(i)),
        DataType::Binary => Cell::Bytes(a.as_binary::<i32>().value(i)),
        _ => return None,
    })
}
