//! Column-chunk encodings: choosing one by measured size, encoding an Arrow array into a
//! block of 64-byte-aligned sections, and decoding a block back into an Arrow array.
//!
//! A *block* is the unit of compression and checksumming. Its uncompressed form is a
//! sequence of sections, each starting at a multiple of 64 bytes (zero padding between);
//! the section lengths live in the segment footer, never in the block. Sections by
//! encoding (the validity bitmap comes first whenever the chunk has nulls, except `Ipc`):
//!
//! | encoding      | physical kinds        | sections                                      |
//! |---------------|-----------------------|-----------------------------------------------|
//! | `Plain`       | bool                  | value bits (LSB first)                        |
//! | `Plain`       | int, float, decimal   | values, little-endian, native width           |
//! | `Plain`       | bytes (utf8, binary)  | offsets `(n+1) × i32` from 0, data            |
//! | `Plain`       | vector                | `n × D × f32` (never compressed)              |
//! | `Dict`        | bytes                 | dict offsets, dict data, codes (1/2/4 bytes)  |
//! | `Dict`        | f32, f64              | dict values, codes (1/2/4 bytes)              |
//! | `ForPacked`   | int                   | `(v - base)` bit-packed (see [`crate::bitpack`]) |
//! | `DeltaPacked` | int                   | `(v[i] - v[i-1] - base)` bit-packed, i ≥ 1    |
//! | `Ipc`         | generic               | one Arrow IPC stream holding a 1-column batch |
//!
//! Dictionaries are sorted (bytes lexicographically, floats by IEEE total order), so code
//! order equals value order and range predicates / ORDER BY can compare codes. Null slots
//! hold code 0 / the frame base / the previous value; they are masked by the validity bitmap.
//!
//! This module must not know about files, offsets or checksums: that is [`crate::segment`].

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, ArrayRef, BooleanArray, make_array};
use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer, NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema};
use basalt_vector::StoredForm;

use crate::bitpack;
use crate::codec::{Dec, Enc, align64};
use crate::error::{Error, Result};
use crate::types::Physical;

/// How a chunk's values are encoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encoding {
    /// Values as they are in Arrow.
    Plain,
    /// Sorted dictionary plus fixed-width codes.
    Dict {
        /// Bytes per code: 1, 2 or 4.
        code_width: u8,
        /// Number of dictionary entries.
        dict_len: u32,
    },
    /// Frame of reference: `v - base` in `bits` bits.
    ForPacked {
        /// The frame base (minimum), as sign- or zero-extended 64-bit pattern.
        base: u64,
        /// Bits per value.
        bits: u8,
    },
    /// Deltas between consecutive values, frame-of-reference packed.
    DeltaPacked {
        /// First value (64-bit pattern).
        first: u64,
        /// Minimum delta (wrapping 64-bit pattern).
        base: u64,
        /// Bits per delta.
        bits: u8,
    },
    /// Generic Arrow IPC stream.
    Ipc,
    /// A `float16` vector column: each component's half-float bits (one section).
    HalfVector,
    /// An `int8` vector column: codes (D per row), then per row its step, offset and
    /// Σ xⱼ² (`f32` each), four sections (see `basalt_vector::stored`).
    Int8Vector,
}

impl Encoding {
    /// Serialises the encoding tag and parameters.
    pub fn write(&self, e: &mut Enc) {
        match self {
            Encoding::Plain => e.u8(0),
            Encoding::Dict { code_width, dict_len } => {
                e.u8(1);
                e.u8(*code_width);
                e.u32(*dict_len);
            }
            Encoding::ForPacked { base, bits } => {
                e.u8(2);
                e.u64(*base);
                e.u8(*bits);
            }
            Encoding::DeltaPacked { first, base, bits } => {
                e.u8(3);
                e.u64(*first);
                e.u64(*base);
                e.u8(*bits);
            }
            Encoding::Ipc => e.u8(4),
            Encoding::HalfVector => e.u8(5),
            Encoding::Int8Vector => e.u8(6),
        }
    }

    /// Reads what [`Encoding::write`] wrote.
    pub fn read(d: &mut Dec<'_>) -> Result<Self> {
        Ok(match d.u8("encoding tag")? {
            0 => Encoding::Plain,
            1 => {
                let code_width = d.u8("code width")?;
                if !matches!(code_width, 1 | 2 | 4) {
                    return Err(d.err(format!("invalid dictionary code width {code_width}")));
                }
                Encoding::Dict { code_width, dict_len: d.u32("dictionary length")? }
            }
            2 => {
                let base = d.u64("frame base")?;
                let bits = d.u8("bit width")?;
                if bits > 64 {
                    return Err(d.err(format!("invalid bit width {bits}")));
                }
                Encoding::ForPacked { base, bits }
            }
            3 => {
                let first = d.u64("first value")?;
                let base = d.u64("delta base")?;
                let bits = d.u8("bit width")?;
                if bits > 64 {
                    return Err(d.err(format!("invalid bit width {bits}")));
                }
                Encoding::DeltaPacked { first, base, bits }
            }
            4 => Encoding::Ipc,
            5 => Encoding::HalfVector,
            6 => Encoding::Int8Vector,
            t => return Err(d.err(format!("unknown encoding tag {t}"))),
        })
    }

    /// Short name for diagnostics.
    pub fn name(&self) -> &'static str {
        match self {
            Encoding::Plain => "plain",
            Encoding::Dict { .. } => "dict",
            Encoding::ForPacked { .. } => "for",
            Encoding::DeltaPacked { .. } => "delta",
            Encoding::Ipc => "ipc",
            Encoding::HalfVector => "half-vector",
            Encoding::Int8Vector => "int8-vector",
        }
    }
}

/// Whether and how hard to zstd-compress blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionPolicy {
    /// Never compress (fastest scans, largest files).
    Never,
    /// Compress a block's frames with zstd at `level` (see [`crate::frames`]): a frame is kept
    /// compressed when that saves a quarter of it, the block framed when that saves an
    /// eighth of it. A block of at least [`crate::frames::AS_IS_AT`] bytes that does not
    /// compress and has one section of values at most 8 bytes wide is framed with every
    /// frame as it is (its frames' checksums let a read of a few rows check only theirs;
    /// a whole read uses the bytes in place).
    Auto {
        /// zstd level (1 = fastest).
        level: i32,
    },
}

impl Default for CompressionPolicy {
    fn default() -> Self {
        CompressionPolicy::Auto { level: 1 }
    }
}

mod cells;
mod decode;
mod encode;
mod stats;
#[cfg(test)]
mod tests;

pub use self::{cells::*, decode::*, encode::*, stats::*};
