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

/// A typed bound of a zone map.
#[derive(Debug, Clone, PartialEq)]
pub enum StatValue {
    /// Signed integers (and dates/timestamps).
    Int(i64),
    /// Unsigned integers and booleans (0/1).
    UInt(u64),
    /// Floats, ordered totally (−0 < +0, NaN above every number: Arrow's order).
    Float(f64),
    /// Byte strings (UTF-8 compares correctly as bytes). Only kept up to 64 bytes.
    Bytes(Vec<u8>),
}

impl StatValue {
    fn write(&self, e: &mut Enc) {
        match self {
            StatValue::Int(v) => {
                e.u8(0);
                e.u64(*v as u64);
            }
            StatValue::UInt(v) => {
                e.u8(1);
                e.u64(*v);
            }
            StatValue::Float(v) => {
                e.u8(2);
                e.u64(v.to_bits());
            }
            StatValue::Bytes(b) => {
                e.u8(3);
                e.bytes(b);
            }
        }
    }
    fn read(d: &mut Dec<'_>) -> Result<Self> {
        Ok(match d.u8("stat tag")? {
            0 => StatValue::Int(d.u64("stat")? as i64),
            1 => StatValue::UInt(d.u64("stat")?),
            2 => StatValue::Float(f64::from_bits(d.u64("stat")?)),
            3 => StatValue::Bytes(d.bytes("stat")?.to_vec()),
            t => return Err(d.err(format!("unknown stat tag {t}"))),
        })
    }
}

/// Min/max of the non-null values of a chunk.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneMap {
    /// Smallest non-null value.
    pub min: StatValue,
    /// Largest non-null value.
    pub max: StatValue,
}

impl ZoneMap {
    /// Serialises an optional zone map.
    pub fn write_opt(z: &Option<ZoneMap>, e: &mut Enc) {
        match z {
            None => e.u8(0),
            Some(z) => {
                e.u8(1);
                z.min.write(e);
                z.max.write(e);
            }
        }
    }
    /// Reads what [`ZoneMap::write_opt`] wrote.
    pub fn read_opt(d: &mut Dec<'_>) -> Result<Option<ZoneMap>> {
        Ok(match d.bool("zone map flag")? {
            false => None,
            true => Some(ZoneMap { min: StatValue::read(d)?, max: StatValue::read(d)? }),
        })
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

/// An encoded chunk before placement in a file.
#[derive(Debug)]
pub struct EncodedChunk {
    /// The chosen encoding.
    pub encoding: Encoding,
    /// Number of null rows.
    pub null_count: u32,
    /// Length of each section in the uncompressed block.
    pub sections: Vec<u64>,
    /// The uncompressed block (sections padded to 64 bytes).
    pub raw: Vec<u8>,
    /// Whether `stored` is the block in frames ([`crate::frames`]).
    pub compressed: bool,
    /// The bytes to store when `compressed` (otherwise `raw` is stored).
    pub stored: Vec<u8>,
    /// Min/max, when the type has an order and the chunk a non-null value.
    pub stats: Option<ZoneMap>,
}

struct Block {
    buf: Vec<u8>,
    lens: Vec<u64>,
}

impl Block {
    fn new(cap: usize) -> Self {
        Self { buf: Vec::with_capacity(cap), lens: Vec::new() }
    }
    fn section(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let start = self.buf.len();
        f(&mut self.buf);
        self.lens.push((self.buf.len() - start) as u64);
        self.buf.resize(align64(self.buf.len()), 0);
    }
}

/// The sections of an `int8` vector chunk: codes, steps, offsets, squared norms. Valid rows
/// hold values already rounded to the form (on insert), so quantising them again gives
/// back exactly those values; a NULL row's slot gets zero codes.
fn encode_int8_vectors(
    vals: &[f32],
    dim: usize,
    is_valid: &dyn Fn(usize) -> bool,
    block: &mut Block,
) -> Result<()> {
    let rows = vals.len() / dim.max(1);
    let mut codes = vec![0i8; vals.len()];
    let (mut scales, mut offsets) = (vec![1f32; rows], vec![0f32; rows]);
    for (i, (row, c)) in vals.chunks_exact(dim).zip(codes.chunks_exact_mut(dim)).enumerate() {
        if !is_valid(i) {
            continue;
        }
        let (s, o) = basalt_vector::stored::quantize_row(row, c).map_err(|e| {
            Error::arrow(
                "encode int8 vectors",
                arrow_schema::ArrowError::InvalidArgumentError(format!("row {i}: {e}")),
            )
        })?;
        (scales[i], offsets[i]) = (s, o);
    }
    let norms = basalt_vector::stored::row_norms(dim, &codes, &scales, &offsets);
    block.section(|b| b.extend(codes.iter().map(|c| *c as u8)));
    for part in [&scales, &offsets, &norms] {
        block.section(|b| {
            b.reserve(part.len() * 4);
            for v in part {
                b.extend_from_slice(&v.to_le_bytes());
            }
        });
    }
    Ok(())
}

/// Encodes `array` (already validated against the column type) choosing the smallest
/// candidate encoding, then compresses the block per `policy`.
pub fn encode(
    array: &dyn Array,
    phys: Physical,
    policy: CompressionPolicy,
) -> Result<EncodedChunk> {
    let n = array.len();
    let data = array.to_data();
    let null_count = array.null_count();
    let nulls = array.logical_nulls();
    let is_valid = |i: usize| nulls.as_ref().is_none_or(|nb| nb.is_valid(i));
    let mut block = Block::new(n * 4 + 128);
    if null_count > 0
        && phys != Physical::Generic
        && let Some(nb) = &nulls
    {
        block.section(|b| b.extend_from_slice(nb.inner().sliced().as_slice()));
    }
    let all_null = null_count == n;
    let mut stats = None;
    let encoding = match phys {
        Physical::Bool => {
            let arr = array.as_any().downcast_ref::<BooleanArray>().ok_or_else(|| {
                Error::arrow("encode", arrow_schema::ArrowError::CastError("not boolean".into()))
            })?;
            let values = arr.values();
            if !all_null {
                let (mut lo, mut hi) = (1u64, 0u64);
                for i in (0..n).filter(|&i| is_valid(i)) {
                    let v = u64::from(values.value(i));
                    lo = lo.min(v);
                    hi = hi.max(v);
                }
                stats = Some(ZoneMap { min: StatValue::UInt(lo), max: StatValue::UInt(hi) });
            }
            block.section(|b| b.extend_from_slice(values.sliced().as_slice()));
            Encoding::Plain
        }
        Physical::Int { width, signed } => {
            let vals = widen(&data, n, width, signed);
            encode_int(&vals, width, signed, &is_valid, all_null, &mut block, &mut stats)
        }
        Physical::F32 => {
            let vals: Vec<u64> =
                data.buffer::<f32>(0)[..n].iter().map(|v| u64::from(v.to_bits())).collect();
            if !all_null {
                stats = float_stats(
                    data.buffer::<f32>(0)[..n].iter().map(|v| f64::from(*v)),
                    &is_valid,
                );
            }
            encode_float(&vals, 4, &is_valid, all_null, &mut block)
        }
        Physical::F64 => {
            let vals: Vec<u64> = data.buffer::<f64>(0)[..n].iter().map(|v| v.to_bits()).collect();
            if !all_null {
                stats = float_stats(data.buffer::<f64>(0)[..n].iter().copied(), &is_valid);
            }
            encode_float(&vals, 8, &is_valid, all_null, &mut block)
        }
        Physical::Bytes => {
            let offsets = &data.buffer::<i32>(0)[..n + 1];
            let values = data.buffers()[1].as_slice();
            let get = |i: usize| &values[offsets[i] as usize..offsets[i + 1] as usize];
            if !all_null {
                let mut lo: Option<&[u8]> = None;
                let mut hi: Option<&[u8]> = None;
                for i in (0..n).filter(|&i| is_valid(i)) {
                    let v = get(i);
                    if lo.is_none_or(|l| v < l) {
                        lo = Some(v);
                    }
                    if hi.is_none_or(|h| v > h) {
                        hi = Some(v);
                    }
                }
                if let (Some(lo), Some(hi)) = (lo, hi)
                    && lo.len() <= 64
                    && hi.len() <= 64
                {
                    stats = Some(ZoneMap {
                        min: StatValue::Bytes(lo.to_vec()),
                        max: StatValue::Bytes(hi.to_vec()),
                    });
                }
            }
            encode_bytes(n, &get, &is_valid, all_null, offsets, values, &mut block)
        }
        Physical::Decimal128 => {
            let vals = &data.buffer::<i128>(0)[..n];
            block.section(|b| {
                for v in vals {
                    b.extend_from_slice(&v.to_le_bytes());
                }
            });
            Encoding::Plain
        }
        Physical::Vector { dim, form } => {
            let child = &data.child_data()[0];
            let start = data.offset() * dim;
            let vals = &child.buffer::<f32>(0)[start..start + n * dim];
            match form {
                StoredForm::Float32 => {
                    block.section(|b| {
                        b.reserve(vals.len() * 4);
                        for v in vals {
                            b.extend_from_slice(&v.to_le_bytes());
                        }
                    });
                    Encoding::Plain
                }
                StoredForm::Float16 => {
                    let mut bits = Vec::with_capacity(vals.len());
                    basalt_vector::stored::to_half_bits(vals, &mut bits);
                    block.section(|b| {
                        b.reserve(bits.len() * 2);
                        for v in &bits {
                            b.extend_from_slice(&v.to_le_bytes());
                        }
                    });
                    Encoding::HalfVector
                }
                StoredForm::Int8 => {
                    encode_int8_vectors(vals, dim, &is_valid, &mut block)?;
                    Encoding::Int8Vector
                }
            }
        }
        Physical::Generic => {
            let bytes = ipc_encode(array)?;
            block.section(|b| b.extend_from_slice(&bytes));
            Encoding::Ipc
        }
    };
    let raw = block.buf;
    let (compressed, stored) = match policy {
        CompressionPolicy::Auto { level }
            if raw.len() >= 4096 && !matches!(phys, Physical::Vector { .. }) =>
        {
            match crate::frames::compress(&raw, &block.lens, level) {
                Some(c) => (true, c),
                None if block.lens.len() == 1
                    && raw.len() >= crate::frames::AS_IS_AT
                    && in_place_width(phys).is_some() =>
                {
                    match crate::frames::as_is(&raw, &block.lens) {
                        Some(c) => (true, c),
                        None => (false, Vec::new()),
                    }
                }
                None => (false, Vec::new()),
            }
        }
        _ => (false, Vec::new()),
    };
    Ok(EncodedChunk {
        encoding,
        null_count: null_count as u32,
        sections: block.lens,
        raw,
        compressed,
        stored,
        stats,
    })
}

/// Sign- or zero-extends integer values to 64-bit patterns.
fn widen(data: &arrow_data::ArrayData, n: usize, width: u8, signed: bool) -> Vec<u64> {
    match (width, signed) {
        (1, true) => data.buffer::<i8>(0)[..n].iter().map(|&v| v as i64 as u64).collect(),
        (2, true) => data.buffer::<i16>(0)[..n].iter().map(|&v| v as i64 as u64).collect(),
        (4, true) => data.buffer::<i32>(0)[..n].iter().map(|&v| v as i64 as u64).collect(),
        (8, true) => data.buffer::<i64>(0)[..n].iter().map(|&v| v as u64).collect(),
        (1, false) => data.buffer::<u8>(0)[..n].iter().map(|&v| u64::from(v)).collect(),
        (2, false) => data.buffer::<u16>(0)[..n].iter().map(|&v| u64::from(v)).collect(),
        (4, false) => data.buffer::<u32>(0)[..n].iter().map(|&v| u64::from(v)).collect(),
        _ => data.buffer::<u64>(0)[..n].to_vec(),
    }
}

fn encode_int(
    vals: &[u64],
    width: u8,
    signed: bool,
    is_valid: &dyn Fn(usize) -> bool,
    all_null: bool,
    block: &mut Block,
    stats: &mut Option<ZoneMap>,
) -> Encoding {
    let n = vals.len();
    let plain = |block: &mut Block| {
        block.section(|b| {
            b.reserve(n * width as usize);
            for v in vals {
                b.extend_from_slice(&v.to_le_bytes()[..width as usize]);
            }
        });
        Encoding::Plain
    };
    if all_null || n == 0 {
        return plain(block);
    }
    // Min / max in the column's own order.
    let key = |v: u64| if signed { v as i64 as i128 } else { v as i128 };
    let mut lo = u64::MAX;
    let mut hi = 0u64;
    let mut first_valid = None;
    for (i, &v) in vals.iter().enumerate() {
        if !is_valid(i) {
            continue;
        }
        if first_valid.is_none() {
            first_valid = Some(v);
            lo = v;
            hi = v;
        } else {
            if key(v) < key(lo) {
                lo = v;
            }
            if key(v) > key(hi) {
                hi = v;
            }
        }
    }
    *stats = Some(if signed {
        ZoneMap { min: StatValue::Int(lo as i64), max: StatValue::Int(hi as i64) }
    } else {
        ZoneMap { min: StatValue::UInt(lo), max: StatValue::UInt(hi) }
    });
    let for_bits = bitpack::bits_needed(hi.wrapping_sub(lo));
    // Deltas over values with nulls replaced by the previous value (delta 0).
    let first = first_valid.unwrap_or(0);
    let mut prev = first;
    let mut dlo = i64::MAX;
    let mut dhi = i64::MIN;
    let filled = |i: usize, prev: u64| if is_valid(i) { vals[i] } else { prev };
    for i in 1..n {
        let v = filled(i, prev);
        let d = v.wrapping_sub(prev) as i64;
        dlo = dlo.min(d);
        dhi = dhi.max(d);
        prev = v;
    }
    let (dlo, dhi) = if n > 1 { (dlo, dhi) } else { (0, 0) };
    let delta_bits = bitpack::bits_needed((dhi as u64).wrapping_sub(dlo as u64));
    let plain_size = n * width as usize;
    let for_size = bitpack::packed_len(n, for_bits);
    let delta_size = bitpack::packed_len(n.saturating_sub(1), delta_bits);
    if plain_size <= for_size && plain_size <= delta_size {
        return plain(block);
    }
    if for_size <= delta_size {
        block.section(|b| {
            let it = (0..n).map(|i| if is_valid(i) { vals[i].wrapping_sub(lo) } else { 0 });
            bitpack::pack(it, n, for_bits, b);
        });
        Encoding::ForPacked { base: lo, bits: for_bits }
    } else {
        block.section(|b| {
            let mut prev = first;
            let it = (1..n).map(|i| {
                let v = filled(i, prev);
                let d = v.wrapping_sub(prev).wrapping_sub(dlo as u64);
                prev = v;
                d
            });
            bitpack::pack(it, n - 1, delta_bits, b);
        });
        // A leading null takes the first valid value, so `first` is what slot 0 decodes to.
        Encoding::DeltaPacked { first, base: dlo as u64, bits: delta_bits }
    }
}

fn float_stats(
    vals: impl Iterator<Item = f64>,
    is_valid: &dyn Fn(usize) -> bool,
) -> Option<ZoneMap> {
    // Min and max in IEEE 754's total order, the order Arrow's comparison kernels use:
    // −0 below +0, a NaN above every number (below, with its sign bit set). Ordered any
    // other way (NaN left out, −0 = +0), `x > 5` over a chunk holding a NaN would be ruled
    // out by its zone map although the NaN row matches.
    let mut range: Option<(f64, f64)> = None;
    for (i, v) in vals.enumerate() {
        if is_valid(i) {
            range = Some(match range {
                None => (v, v),
                Some((lo, hi)) => (
                    if v.total_cmp(&lo).is_lt() { v } else { lo },
                    if v.total_cmp(&hi).is_gt() { v } else { hi },
                ),
            });
        }
    }
    range.map(|(lo, hi)| ZoneMap { min: StatValue::Float(lo), max: StatValue::Float(hi) })
}

/// Code width for a dictionary of `k` entries.
fn code_width(k: usize) -> u8 {
    if k <= 1 << 8 {
        1
    } else if k <= 1 << 16 {
        2
    } else {
        4
    }
}

fn push_codes(b: &mut Vec<u8>, codes: &[u32], cw: u8) {
    b.reserve(codes.len() * cw as usize);
    match cw {
        1 => b.extend(codes.iter().map(|&c| c as u8)),
        2 => {
            for &c in codes {
                b.extend_from_slice(&(c as u16).to_le_bytes());
            }
        }
        _ => {
            for &c in codes {
                b.extend_from_slice(&c.to_le_bytes());
            }
        }
    }
}

/// Estimates the number of distinct values from a pseudo-random sample of 2048 rows
/// (fixed seed, so the same data always gets the same encoding),
/// using the birthday bound: a sample of `s` rows drawn from `D` equally likely values
/// shows about `s² / 2D` repeats, so `D ≈ s² / (2 · repeats)`. Returns `usize::MAX` when the
/// sample has no repeat at all (likely unique values). Small chunks are counted exactly.
fn estimate_distinct<K: std::hash::Hash + Eq>(n: usize, key: impl Fn(usize) -> Option<K>) -> usize {
    const SAMPLE: usize = 2048;
    let mut seen = std::collections::HashSet::with_capacity(SAMPLE.min(n));
    if n <= SAMPLE {
        seen.extend((0..n).filter_map(&key));
        return seen.len();
    }
    let mut taken = 0usize;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut positions = std::collections::HashSet::with_capacity(SAMPLE);
    while positions.len() < SAMPLE {
        // xorshift64*: cheap, deterministic positions without the aliasing of a stride.
        // Positions are drawn without replacement so that repeats come from values only.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let i = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as usize;
        if !positions.insert(i) {
            continue;
        }
        if let Some(k) = key(i) {
            seen.insert(k);
            taken += 1;
        }
    }
    let repeats = taken - seen.len();
    if repeats == 0 {
        return usize::MAX;
    }
    (taken * taken / (2 * repeats)).max(seen.len())
}

/// Builds a sorted dictionary: returns (sorted distinct keys, code per row; 0 for nulls).
/// Gives up (`None`) as soon as more than `max_k` distinct values are seen.
fn build_dict<K: std::hash::Hash + Eq + Copy>(
    n: usize,
    key: impl Fn(usize) -> Option<K>,
    cmp: impl Fn(&K, &K) -> std::cmp::Ordering,
    max_k: usize,
) -> Option<(Vec<K>, Vec<u32>)> {
    let mut ids: HashMap<K, u32> = HashMap::new();
    let mut uniq: Vec<K> = Vec::new();
    let mut tmp = Vec::with_capacity(n);
    for i in 0..n {
        match key(i) {
            Some(k) => {
                let id = *ids.entry(k).or_insert_with(|| {
                    uniq.push(k);
                    (uniq.len() - 1) as u32
                });
                if uniq.len() > max_k {
                    return None;
                }
                tmp.push(id);
            }
            None => tmp.push(u32::MAX),
        }
    }
    let mut order: Vec<u32> = (0..uniq.len() as u32).collect();
    order.sort_unstable_by(|a, b| cmp(&uniq[*a as usize], &uniq[*b as usize]));
    let mut rank = vec![0u32; uniq.len()];
    for (r, &o) in order.iter().enumerate() {
        rank[o as usize] = r as u32;
    }
    let codes = tmp.iter().map(|&t| if t == u32::MAX { 0 } else { rank[t as usize] }).collect();
    let sorted = order.iter().map(|&o| uniq[o as usize]).collect();
    Some((sorted, codes))
}

fn encode_float(
    bits: &[u64],
    width: usize,
    is_valid: &dyn Fn(usize) -> bool,
    all_null: bool,
    block: &mut Block,
) -> Encoding {
    let n = bits.len();
    let plain = |block: &mut Block| {
        block.section(|b| {
            b.reserve(n * width);
            for v in bits {
                b.extend_from_slice(&v.to_le_bytes()[..width]);
            }
        });
        Encoding::Plain
    };
    let key = |i: usize| is_valid(i).then_some(bits[i]);
    // Largest dictionary that is still smaller than plain: k·w + n·cw(k) < n·w.
    let max_k = (1..=4u8)
        .filter(|&cw| (cw as usize) < width)
        .map(|cw| {
            ((n * (width - cw as usize)) / width).min(if cw == 1 {
                256
            } else if cw == 2 {
                65536
            } else {
                usize::MAX
            })
        })
        .max()
        .unwrap_or(0);
    if all_null || estimate_distinct(n, key) > max_k {
        return plain(block);
    }
    let as_f64 = |b: &u64| {
        if width == 8 { f64::from_bits(*b) } else { f64::from(f32::from_bits(*b as u32)) }
    };
    let Some((dict, codes)) = build_dict(n, key, |a, b| as_f64(a).total_cmp(&as_f64(b)), max_k)
    else {
        return plain(block);
    };
    let cw = code_width(dict.len());
    if dict.len() * width + n * cw as usize >= n * width {
        return plain(block);
    }
    block.section(|b| {
        for v in &dict {
            b.extend_from_slice(&v.to_le_bytes()[..width]);
        }
    });
    block.section(|b| push_codes(b, &codes, cw));
    Encoding::Dict { code_width: cw, dict_len: dict.len() as u32 }
}

fn encode_bytes<'a>(
    n: usize,
    get: &dyn Fn(usize) -> &'a [u8],
    is_valid: &dyn Fn(usize) -> bool,
    all_null: bool,
    offsets: &[i32],
    values: &[u8],
    block: &mut Block,
) -> Encoding {
    let plain = |block: &mut Block| {
        let base = offsets[0];
        block.section(|b| {
            b.reserve((n + 1) * 4);
            for o in offsets {
                b.extend_from_slice(&(o - base).to_le_bytes());
            }
        });
        block.section(|b| b.extend_from_slice(&values[base as usize..offsets[n] as usize]));
        Encoding::Plain
    };
    let key = |i: usize| is_valid(i).then(|| get(i));
    let plain_size = (n + 1) * 4 + (offsets[n] - offsets[0]) as usize;
    // Each distinct value costs at least 4 bytes of offset plus its bytes; codes 1+ bytes.
    let avg = plain_size / n.max(1);
    let max_k = plain_size.saturating_sub(n) / avg.max(1);
    if all_null || estimate_distinct(n, key) > max_k {
        return plain(block);
    }
    let Some((dict, codes)) = build_dict(n, key, |a, b| a.cmp(b), max_k) else {
        return plain(block);
    };
    let cw = code_width(dict.len());
    let dict_bytes: usize = dict.iter().map(|d| d.len()).sum();
    if (dict.len() + 1) * 4 + dict_bytes + n * cw as usize >= plain_size {
        return plain(block);
    }
    block.section(|b| {
        let mut off = 0i32;
        b.extend_from_slice(&off.to_le_bytes());
        for d in &dict {
            off += d.len() as i32;
            b.extend_from_slice(&off.to_le_bytes());
        }
    });
    block.section(|b| {
        b.reserve(dict_bytes);
        for d in &dict {
            b.extend_from_slice(d);
        }
    });
    block.section(|b| push_codes(b, &codes, cw));
    Encoding::Dict { code_width: cw, dict_len: dict.len() as u32 }
}

fn ipc_encode(array: &dyn Array) -> Result<Vec<u8>> {
    let field = Field::new("c", array.data_type().clone(), true);
    let schema = Arc::new(Schema::new(vec![field]));
    let batch =
        arrow_array::RecordBatch::try_new(schema.clone(), vec![make_array(array.to_data())])
            .map_err(|e| Error::arrow("encode generic column", e))?;
    let mut out = Vec::new();
    {
        let mut w = arrow_ipc::writer::StreamWriter::try_new(&mut out, &schema)
            .map_err(|e| Error::arrow("encode generic column", e))?;
        w.write(&batch).map_err(|e| Error::arrow("encode generic column", e))?;
        w.finish().map_err(|e| Error::arrow("encode generic column", e))?;
    }
    Ok(out)
}

/// What [`decode`] should produce for dictionary chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeMode {
    /// Materialise values in the column's own type.
    Values,
    /// Hand dictionary chunks out as `DictionaryArray<UInt8|16|32, _>` (codes + sorted
    /// dictionary; float dictionaries in the column's float type). Other chunks as values.
    Codes,
    /// Vector chunks in the form they are stored in — `float16`: `FixedSizeList<Float16>`;
    /// `int8`: a struct of `codes` (`FixedSizeList<Int8>`), `scale`, `offset` and `norm`
    /// (`Float32`), see [`stored_vectors_type`] — for a scan that reads them in place.
    /// Other chunks (`float32` vectors included) as values.
    Stored,
}

/// The type [`DecodeMode::Stored`] hands an `int8` vector chunk out as.
pub fn stored_vectors_type(dim: usize) -> DataType {
    let f = |name: &str, dt: DataType| Arc::new(Field::new(name, dt, false));
    DataType::Struct(
        vec![
            f("codes", DataType::FixedSizeList(f("item", DataType::Int8), dim as i32)),
            f("scale", DataType::Float32),
            f("offset", DataType::Float32),
            f("norm", DataType::Float32),
        ]
        .into(),
    )
}

/// Everything [`decode`] needs to know about a chunk besides its bytes.
#[derive(Debug, Clone, Copy)]
pub struct ChunkInfo<'a> {
    /// Encoding.
    pub encoding: &'a Encoding,
    /// Null count.
    pub null_count: u32,
    /// Section lengths.
    pub sections: &'a [u64],
    /// Rows in the chunk.
    pub rows: usize,
    /// The column's Arrow type.
    pub data_type: &'a DataType,
    /// Its physical kind.
    pub phys: Physical,
    /// File, for error messages.
    pub file: &'a Path,
    /// Block offset in the file, for error messages.
    pub offset: u64,
}

/// Decodes an uncompressed block (starting 64-byte aligned) into an Arrow array.
/// Every length is checked; damaged metadata yields [`Error::Corrupt`], never a panic.
pub fn decode(raw: &Buffer, c: ChunkInfo<'_>, mode: DecodeMode) -> Result<ArrayRef> {
    decode_window(raw, c, mode, 0, c.rows)
}

/// Windows of at most this many rows decode dictionary chunks by gathering values.
const SMALL_WINDOW: usize = 64;

/// Like [`decode`], for rows `start..start + len` only. Plain and dictionary chunks are
/// windowed without touching other rows (validation included); bit-packed chunks unpack
/// only what the window needs.
pub fn decode_window(
    raw: &Buffer,
    c: ChunkInfo<'_>,
    mode: DecodeMode,
    start: usize,
    len: usize,
) -> Result<ArrayRef> {
    let n = c.rows;
    if start.checked_add(len).is_none_or(|e| e > n) {
        return Err(Error::corrupt(
            c.file,
            c.offset,
            format!("window {start}+{len} outside {n} rows"),
        ));
    }
    if matches!(c.encoding, Encoding::Dict { .. })
        && mode == DecodeMode::Values
        && len <= SMALL_WINDOW
    {
        // A few rows (point lookups): gather their values straight from the dictionary
        // instead of validating the whole dictionary and casting.
        return decode_rows(raw, c, &(start..start + len).collect::<Vec<_>>());
    }
    let corrupt = |reason: String| Error::corrupt(c.file, c.offset, reason);
    let (mut secs, nulls) = sections(raw, &c)?;
    let mut next = || secs.next().ok_or_else(|| corrupt("missing section".into()));
    let need = |b: &Buffer, len: usize, what: &str| section_has(&c, b, len, what);
    let window_nulls = nulls.as_ref().map(|nb| nb.slice(start, len));
    // Arrays built for the window only (`offset` into `buffers` where they cover more).
    let windowed = |buffers: Vec<Buffer>, offset: usize| {
        arrow_data::ArrayData::builder(c.data_type.clone())
            .len(len)
            .offset(offset)
            .buffers(buffers)
            .nulls(window_nulls.clone())
            .build()
            .map(make_array)
            .map_err(|e| corrupt(format!("invalid column data: {e}")))
    };
    // Arrays over the whole chunk's buffers, windowed by offset.
    let build = |dt: DataType,
                 buffers: Vec<Buffer>,
                 children: Vec<arrow_data::ArrayData>,
                 nulls: Option<NullBuffer>| {
        arrow_data::ArrayData::builder(dt)
            .len(len)
            .offset(start)
            .buffers(buffers)
            .child_data(children)
            .nulls(nulls.map(|nb| nb.slice(start, len)))
            .build()
            .map(make_array)
            .map_err(|e| corrupt(format!("invalid column data: {e}")))
    };
    match (c.encoding, c.phys) {
        (Encoding::Ipc, _) => {
            let bytes = next()?;
            let mut reader = arrow_ipc::reader::StreamReader::try_new(
                std::io::Cursor::new(bytes.as_slice()),
                None,
            )
            .map_err(|e| corrupt(format!("generic column: {e}")))?;
            let batch = reader
                .next()
                .ok_or_else(|| corrupt("generic column: empty stream".into()))?
                .map_err(|e| corrupt(format!("generic column: {e}")))?;
            let col = batch.column(0).clone();
            if col.len() != n || col.data_type() != c.data_type {
                return Err(corrupt("generic column: length or type mismatch".into()));
            }
            Ok(col.slice(start, len))
        }
        (Encoding::Plain, Physical::Bool) => {
            let v = next()?;
            need(&v, n.div_ceil(8), "bool")?;
            build(c.data_type.clone(), vec![v], vec![], nulls)
        }
        (Encoding::Plain, Physical::Bytes) => {
            let offs = next()?;
            let data = next()?;
            need(&offs, (n + 1) * 4, "offsets")?;
            if len < n {
                // A window: rebase its offsets and slice its bytes, so validation (UTF-8
                // included) touches only the rows asked for.
                let o = offs.typed_data::<i32>();
                let (lo, hi) = (o[start], o[start + len]);
                if lo < 0 || hi < lo || hi as usize > data.len() {
                    return Err(corrupt("string offsets out of range".into()));
                }
                let rebased: Vec<i32> = o[start..=start + len].iter().map(|x| x - lo).collect();
                return byte_array(
                    &c,
                    ScalarBuffer::from(rebased),
                    data.slice_with_length(lo as usize, (hi - lo) as usize),
                    window_nulls,
                );
            }
            byte_array(&c, ScalarBuffer::new(offs, 0, n + 1), data, nulls)
        }
        (Encoding::HalfVector, Physical::Vector { dim, .. }) => {
            let v = next()?;
            let bytes = n
                .checked_mul(dim)
                .and_then(|x| x.checked_mul(2))
                .ok_or_else(|| corrupt("vector size overflows".into()))?;
            need(&v, bytes, "vector")?;
            let v = v.slice_with_length(0, bytes);
            if mode == DecodeMode::Stored {
                let item = Arc::new(Field::new("item", DataType::Float16, false));
                let child = arrow_data::ArrayData::builder(DataType::Float16)
                    .len(n * dim)
                    .buffers(vec![v])
                    .build()
                    .map_err(|e| corrupt(format!("invalid vector data: {e}")))?;
                return build(
                    DataType::FixedSizeList(item, dim as i32),
                    vec![],
                    vec![child],
                    nulls,
                );
            }
            // Widen the window's rows only.
            let bits: &[u16] = v.typed_data();
            let rows = &bits[start * dim..(start + len) * dim];
            let mut wide = vec![0f32; rows.len()];
            basalt_vector::stored::widen_half(rows, &mut wide);
            widened_list(c.data_type, len, wide, window_nulls.clone())
                .map_err(|e| corrupt(format!("invalid vector data: {e}")))
        }
        (Encoding::Int8Vector, Physical::Vector { dim, .. }) => {
            let codes = next()?;
            let codes_len =
                n.checked_mul(dim).ok_or_else(|| corrupt("vector size overflows".into()))?;
            need(&codes, codes_len, "vector codes")?;
            let mut per_row = Vec::with_capacity(3);
            for what in ["vector steps", "vector offsets", "vector norms"] {
                let b = next()?;
                need(&b, n * 4, what)?;
                per_row.push(b.slice_with_length(0, n * 4));
            }
            let codes = codes.slice_with_length(0, codes_len);
            if mode == DecodeMode::Stored {
                let dt = stored_vectors_type(dim);
                let DataType::Struct(fields) = &dt else {
                    return Err(corrupt("stored vector type".into()));
                };
                let DataType::FixedSizeList(item, _) = fields[0].data_type() else {
                    return Err(corrupt("stored vector type".into()));
                };
                let codes = arrow_data::ArrayData::builder(item.data_type().clone())
                    .len(n * dim)
                    .buffers(vec![codes])
                    .build()
                    .map_err(|e| corrupt(format!("invalid vector codes: {e}")))?;
                let codes = arrow_data::ArrayData::builder(fields[0].data_type().clone())
                    .len(n)
                    .child_data(vec![codes])
                    .build()
                    .map_err(|e| corrupt(format!("invalid vector codes: {e}")))?;
                let mut children = vec![codes];
                for b in per_row {
                    children.push(
                        arrow_data::ArrayData::builder(DataType::Float32)
                            .len(n)
                            .buffers(vec![b])
                            .build()
                            .map_err(|e| corrupt(format!("invalid vector steps: {e}")))?,
                    );
                }
                return build(dt, vec![], children, nulls);
            }
            let (cs, ss, os): (&[i8], &[f32], &[f32]) =
                (codes.typed_data(), per_row[0].typed_data(), per_row[1].typed_data());
            let mut wide = vec![0f32; len * dim];
            for (r, out) in (start..start + len).zip(wide.chunks_exact_mut(dim.max(1))) {
                basalt_vector::stored::dequantize_row(
                    &cs[r * dim..(r + 1) * dim],
                    ss[r],
                    os[r],
                    out,
                );
            }
            widened_list(c.data_type, len, wide, window_nulls.clone())
                .map_err(|e| corrupt(format!("invalid vector data: {e}")))
        }
        (Encoding::Plain, Physical::Vector { dim, .. }) => {
            let v = next()?;
            let len = n
                .checked_mul(dim)
                .and_then(|x| x.checked_mul(4))
                .ok_or_else(|| corrupt("vector size overflows".into()))?;
            need(&v, len, "vector")?;
            let DataType::FixedSizeList(f, _) = c.data_type else {
                return Err(corrupt("vector chunk for a non-vector column".into()));
            };
            let child = arrow_data::ArrayData::builder(f.data_type().clone())
                .len(n * dim)
                .buffers(vec![v.slice_with_length(0, len)])
                .build()
                .map_err(|e| corrupt(format!("invalid vector data: {e}")))?;
            build(c.data_type.clone(), vec![], vec![child], nulls)
        }
        (Encoding::Plain, phys) => {
            let w = plain_width(phys)
                .ok_or_else(|| corrupt("plain encoding for an unexpected kind".into()))?;
            let v = next()?;
            need(&v, n * w, "values")?;
            build(c.data_type.clone(), vec![v.slice_with_length(0, n * w)], vec![], nulls)
        }
        (Encoding::ForPacked { base, bits }, Physical::Int { width, .. }) => {
            let p = next()?;
            need(&p, bitpack::packed_len(n, *bits), "packed")?;
            let base = *base;
            let values = unpack_ints(width, len, |out| {
                bitpack::unpack_from(p.as_slice(), *bits, start, len, |i, v| {
                    out[i] = base.wrapping_add(v)
                });
            });
            windowed(vec![values], 0)
        }
        (Encoding::DeltaPacked { first, base, bits }, Physical::Int { width, .. }) => {
            let p = next()?;
            need(&p, bitpack::packed_len(n.saturating_sub(1), *bits), "packed")?;
            let (first, base) = (*first, *base);
            if *bits == 0 {
                // Constant step (dense ids): value i is first + i·step, no prefix sum needed.
                let values = unpack_ints(width, len, |out| {
                    for (i, o) in out.iter_mut().enumerate() {
                        *o = first.wrapping_add(base.wrapping_mul((start + i) as u64));
                    }
                });
                return windowed(vec![values], 0);
            }
            // Deltas accumulate: decode from the start up to the window's end.
            let upto = start + len;
            let values = unpack_ints(width, upto, |out| {
                let Some((head, rest)) = out.split_first_mut() else { return };
                let mut cur = first;
                *head = cur;
                bitpack::unpack(p.as_slice(), *bits, upto - 1, |i, d| {
                    cur = cur.wrapping_add(base).wrapping_add(d);
                    rest[i] = cur;
                });
            });
            windowed(vec![values], start)
        }
        (Encoding::Dict { code_width, dict_len }, phys) => {
            let k = *dict_len as usize;
            let cw = *code_width as usize;
            let (dict, key_type) = match phys {
                Physical::Bytes => {
                    let offs = next()?;
                    let data = next()?;
                    need(&offs, (k + 1) * 4, "dictionary offsets")?;
                    let d = byte_array(&c, ScalarBuffer::new(offs, 0, k + 1), data, None)?;
                    (d.to_data(), c.data_type.clone())
                }
                Physical::F32 | Physical::F64 => {
                    let w = if phys == Physical::F32 { 4 } else { 8 };
                    let v = next()?;
                    need(&v, k * w, "dictionary")?;
                    let d = arrow_data::ArrayData::builder(c.data_type.clone())
                        .len(k)
                        .buffers(vec![v.slice_with_length(0, k * w)])
                        .build()
                        .map_err(|e| corrupt(format!("invalid dictionary: {e}")))?;
                    (d, c.data_type.clone())
                }
                _ => return Err(corrupt("dictionary encoding for an unexpected kind".into())),
            };
            let codes = next()?;
            need(&codes, n * cw, "codes")?;
            let key = match cw {
                1 => DataType::UInt8,
                2 => DataType::UInt16,
                _ => DataType::UInt32,
            };
            let dict_type = DataType::Dictionary(Box::new(key), Box::new(key_type));
            let codes = codes.slice_with_length(0, n * cw);
            let in_range = max_code(codes.as_slice(), cw, start, len) < k;
            let builder = arrow_data::ArrayData::builder(dict_type)
                .len(len)
                .offset(start)
                .buffers(vec![codes])
                .child_data(vec![dict])
                .nulls(window_nulls);
            let arr = if in_range {
                // Arrow's own validation checks each code with a branch per row (a sixth of
                // a grouped scan's time); one vectorised maximum over the window proves the
                // same. The dictionary child was validated when it was built above.
                // SAFETY: every code of the window (NULL rows included) is below the
                // dictionary's length `k`, the codes buffer holds `n * cw` bytes for `n`
                // rows of which the window `start..start + len` is a part (`max_code`
                // reports a window outside the buffer as out of range), and the key type
                // matches the code width.
                make_array(unsafe { builder.build_unchecked() })
            } else {
                // Some code is out of range: only a NULL row may hold one; Arrow decides.
                builder
                    .build()
                    .map(make_array)
                    .map_err(|e| corrupt(format!("invalid dictionary codes: {e}")))?
            };
            match mode {
                DecodeMode::Codes => Ok(arr),
                DecodeMode::Values | DecodeMode::Stored => arrow_cast::cast(&arr, c.data_type)
                    .map_err(|e| corrupt(format!("cannot materialise dictionary: {e}"))),
            }
        }
        (e, p) => Err(corrupt(format!("encoding {} is invalid for {p:?}", e.name()))),
    }
}

/// The bytes of an uncompressed block that decoding rows `start..start + len` reads —
/// [`decode_window`] of that window, [`decode_rows`] of rows within it, [`decode_cell`] of
/// a row in it: what a reader restoring only some frames of a framed block
/// ([`crate::frames`]) must have in place. Other bytes of the block are never read for those
/// rows (the tests decode from blocks whose other bytes are garbage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowBytes {
    /// The whole block (encodings read as a whole, or a layout this cannot vouch for).
    Whole,
    /// These ranges, and for plain strings the bytes [`StringSpan::data`] names.
    Ranges {
        /// Byte ranges of the raw block.
        ranges: Vec<std::ops::Range<usize>>,
        /// For plain string chunks: where the window's string bytes are, once the
        /// offsets (in `ranges`) are in place.
        strings: Option<StringSpan>,
    },
}

/// The string bytes of a window of a plain string chunk, found through its offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StringSpan {
    offsets: usize,
    data: std::ops::Range<usize>,
    start: usize,
    len: usize,
}

impl StringSpan {
    /// The range of the raw block holding the window's string bytes, read from the window's
    /// offsets in `raw` (which must be in place); `None` when those offsets are damaged
    /// (decoding then reports it, from the whole block).
    pub fn data(&self, raw: &[u8]) -> Option<std::ops::Range<usize>> {
        let at = |i: usize| -> Option<i32> {
            let p = self.offsets.checked_add(i.checked_mul(4)?)?;
            let b = raw.get(p..p + 4)?;
            Some(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let lo = usize::try_from(at(self.start)?).ok()?;
        let hi = usize::try_from(at(self.start + self.len)?).ok()?;
        (lo <= hi && hi <= self.data.len()).then(|| self.data.start + lo..self.data.start + hi)
    }
}

/// Which bytes of a chunk's raw block decoding rows `start..start + len` reads (see
/// [`WindowBytes`]).
pub fn window_bytes(c: &ChunkInfo<'_>, start: usize, len: usize) -> WindowBytes {
    window_bytes_for(c, start, len, true)
}

/// Like [`window_bytes`] for a 64-bit float dictionary chunk ([`f64_dictionary`]), without
/// the dictionary: what [`decode_window_with_entries`] reads from the raw block.
pub fn window_bytes_without_dictionary(c: &ChunkInfo<'_>, start: usize, len: usize) -> WindowBytes {
    window_bytes_for(c, start, len, false)
}

/// The byte ranges of a chunk's sections in its raw block (at most four: validity,
/// dictionary offsets and bytes, codes) and how many there are; `None` when the section
/// lengths do not add up or do not fit the encoding.
fn section_ranges(c: &ChunkInfo<'_>) -> Option<([std::ops::Range<usize>; 4], usize)> {
    let mut secs: [std::ops::Range<usize>; 4] = Default::default();
    if c.sections.len() != expected_sections(c) || c.sections.len() > secs.len() {
        return None;
    }
    let mut pos = 0usize;
    for (slot, &l) in secs.iter_mut().zip(c.sections) {
        let end = usize::try_from(l).ok().and_then(|l| pos.checked_add(l))?;
        *slot = pos..end;
        pos = align64(end);
    }
    Some((secs, c.sections.len()))
}

/// Where the dictionary of a 64-bit float dictionary chunk is in its raw block (entry `i`
/// at `8 i` from the range's start) and how many entries it has; `None` for other chunks
/// and for sections that do not match the entry count.
pub fn f64_dictionary(c: &ChunkInfo<'_>) -> Option<(std::ops::Range<usize>, usize)> {
    let (Encoding::Dict { dict_len, .. }, Physical::F64) = (c.encoding, c.phys) else {
        return None;
    };
    let (secs, _) = section_ranges(c)?;
    let dict = secs[usize::from(c.null_count > 0)].clone();
    let k = *dict_len as usize;
    (dict.len() == k.checked_mul(8)?).then_some((dict, k))
}

fn window_bytes_for(c: &ChunkInfo<'_>, start: usize, len: usize, dictionary: bool) -> WindowBytes {
    let Some((secs, count)) = section_ranges(c) else { return WindowBytes::Whole };
    let Some(end) = start.checked_add(len) else { return WindowBytes::Whole };
    if end > c.rows || end.checked_mul(64).is_none() {
        return WindowBytes::Whole;
    }
    let mut secs = secs.into_iter().take(count);
    let mut ranges = Vec::new();
    if c.null_count > 0 && c.phys != Physical::Generic {
        // The validity bitmap is checked whole against the null count.
        ranges.extend(secs.next());
    }
    let Some(first) = secs.next() else { return WindowBytes::Whole };
    // Bytes `lo..hi` of a section, clipped to it.
    let clip = |s: &std::ops::Range<usize>, lo: usize, hi: usize| {
        s.start + lo.min(s.len())..s.start + hi.min(s.len())
    };
    let mut strings = None;
    match (c.encoding, c.phys) {
        (Encoding::Ipc | Encoding::HalfVector | Encoding::Int8Vector, _)
        | (Encoding::Plain, Physical::Bool | Physical::Vector { .. }) => {
            return WindowBytes::Whole;
        }
        (Encoding::Plain, Physical::Bytes) => {
            let Some(data) = secs.next() else { return WindowBytes::Whole };
            ranges.push(clip(&first, start * 4, (end + 1) * 4));
            strings = Some(StringSpan { offsets: first.start, data, start, len });
        }
        (Encoding::Plain, phys) => {
            let Some(w) = plain_width(phys) else { return WindowBytes::Whole };
            ranges.push(clip(&first, start * w, end * w));
        }
        (Encoding::ForPacked { bits, .. }, _) => {
            // Unpacking loads 8 bytes from the byte holding a value's first bit (wider
            // values: two aligned words).
            let b = usize::from(*bits);
            ranges.push(clip(&first, (start * b / 8) & !7, (end * b).div_ceil(8) + 16));
        }
        (Encoding::DeltaPacked { bits, .. }, _) => {
            // Values are a prefix sum of the deltas: everything up to the window's end.
            let b = usize::from(*bits);
            ranges.push(clip(&first, 0, (end * b).div_ceil(8) + 16));
        }
        (Encoding::Dict { code_width, .. }, phys) => {
            // The dictionary is read whole (it is checked whole) unless the caller reads its
            // entries elsewhere; codes of the window only.
            let cw = usize::from(*code_width);
            if dictionary {
                ranges.push(first);
            }
            if phys == Physical::Bytes {
                let second = secs.next();
                if dictionary {
                    ranges.extend(second);
                }
            }
            let Some(codes) = secs.next() else { return WindowBytes::Whole };
            ranges.push(clip(&codes, start * cw, end * cw));
        }
    }
    WindowBytes::Ranges { ranges, strings }
}

/// A block's section buffers (count checked against the encoding) and its validated
/// validity bitmap (counted against the chunk's null count) when it has one.
fn sections(
    raw: &Buffer,
    c: &ChunkInfo<'_>,
) -> Result<(std::vec::IntoIter<Buffer>, Option<NullBuffer>)> {
    let n = c.rows;
    let corrupt = |reason: String| Error::corrupt(c.file, c.offset, reason);
    let mut secs = Vec::with_capacity(c.sections.len());
    let mut pos = 0usize;
    for &len in c.sections {
        let len = usize::try_from(len).map_err(|_| corrupt("section length overflows".into()))?;
        let end = pos.checked_add(len).filter(|&e| e <= raw.len());
        let Some(end) = end else {
            return Err(corrupt(format!("section [{pos}, +{len}) exceeds block of {}", raw.len())));
        };
        secs.push(raw.slice_with_length(pos, end - pos));
        pos = align64(end);
    }
    let has_validity = c.null_count > 0 && c.phys != Physical::Generic;
    let expected_secs = expected_sections(c);
    if secs.len() != expected_secs {
        return Err(corrupt(format!("expected {expected_secs} sections, found {}", secs.len())));
    }
    let mut secs = secs.into_iter();
    let nulls = if has_validity {
        let v = secs.next().ok_or_else(|| corrupt("missing validity".into()))?;
        if v.len() < n.div_ceil(8) {
            return Err(corrupt("validity bitmap too short".into()));
        }
        let nb = NullBuffer::new(BooleanBuffer::new(v, 0, n));
        if nb.null_count() != c.null_count as usize {
            return Err(corrupt("null count does not match the validity bitmap".into()));
        }
        Some(nb)
    } else {
        None
    };
    Ok((secs, nulls))
}

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
enum CellKind<'a> {
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
            (Encoding::ForPacked { base, bits }, Physical::Int { .. }) => CellKind::For {
                packed: sized(secs[0], Some(bitpack::packed_len(n, *bits)), "packed")?,
                bits: *bits,
                base: *base,
            },
            (Encoding::DeltaPacked { first, base, bits: 0 }, Physical::Int { .. }) => {
                CellKind::Step { first: *first, step: *base }
            }
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
fn code_in(codes: &[u8], cw: usize, i: usize) -> usize {
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

/// How many sections a chunk with this encoding has (validity first when it has nulls).
fn expected_sections(c: &ChunkInfo<'_>) -> usize {
    let has_validity = c.null_count > 0 && c.phys != Physical::Generic;
    usize::from(has_validity)
        + match (c.encoding, c.phys) {
            (Encoding::Ipc, _) => 1,
            (Encoding::Plain, Physical::Bytes) => 2,
            (Encoding::Plain, _) => 1,
            (Encoding::Dict { .. }, Physical::Bytes) => 3,
            (Encoding::Dict { .. }, _) => 2,
            (Encoding::ForPacked { .. } | Encoding::DeltaPacked { .. }, _) => 1,
            (Encoding::HalfVector, _) => 1,
            (Encoding::Int8Vector, _) => 4,
        }
}

/// A vector array of type `dt` (a `FixedSizeList<Float32>`) of `len` rows holding `values`
/// (exactly those rows' components).
fn widened_list(
    dt: &DataType,
    len: usize,
    values: Vec<f32>,
    nulls: Option<NullBuffer>,
) -> std::result::Result<ArrayRef, arrow_schema::ArrowError> {
    let DataType::FixedSizeList(item, _) = dt else {
        return Err(arrow_schema::ArrowError::InvalidArgumentError("not a vector type".into()));
    };
    let child = arrow_data::ArrayData::builder(item.data_type().clone())
        .len(values.len())
        .buffers(vec![Buffer::from_vec(values)])
        .build()?;
    arrow_data::ArrayData::builder(dt.clone())
        .len(len)
        .child_data(vec![child])
        .nulls(nulls)
        .build()
        .map(make_array)
}

/// A string or binary array (the chunk's type) over `offsets` into `data`. Checked like
/// Arrow's `try_new` (offsets ascending from zero within `data`; for strings, `data` valid
/// UTF-8 with every offset on a character boundary) — one pass over the bytes, where the
/// generic `ArrayData` validation checks each string on its own, several times slower.
fn byte_array(
    c: &ChunkInfo<'_>,
    offsets: ScalarBuffer<i32>,
    data: Buffer,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    let corrupt = |reason: String| Error::corrupt(c.file, c.offset, reason);
    if offsets.first().is_none_or(|&o| o < 0) || offsets.windows(2).any(|w| w[0] > w[1]) {
        return Err(corrupt("string offsets out of order".into()));
    }
    let offsets = arrow_buffer::OffsetBuffer::new(offsets);
    let invalid = |e: arrow_schema::ArrowError| corrupt(format!("invalid column data: {e}"));
    Ok(match c.data_type {
        DataType::Utf8 => {
            Arc::new(arrow_array::StringArray::try_new(offsets, data, nulls).map_err(invalid)?)
        }
        DataType::Binary => {
            Arc::new(arrow_array::BinaryArray::try_new(offsets, data, nulls).map_err(invalid)?)
        }
        other => return Err(corrupt(format!("string chunk for a {other} column"))),
    })
}

/// Like [`decode_window`] for the rows `rows` (ascending, each below the chunk's row count)
/// in values mode: the values of just those rows, gathered straight from the encoded
/// sections — one pass over the block's metadata for all of them instead of one per row,
/// and no other row decoded (delta-packed chunks with varying steps sum the deltas up to
/// the last row wanted, keeping only the running value). This is how a lookup of many ids
/// reads a row group it has few rows in.
pub fn decode_rows(raw: &Buffer, c: ChunkInfo<'_>, rows: &[usize]) -> Result<ArrayRef> {
    let n = c.rows;
    let corrupt = |reason: String| Error::corrupt(c.file, c.offset, reason);
    let (Some(&first), Some(&last)) = (rows.first(), rows.last()) else {
        return Ok(arrow_array::new_empty_array(c.data_type));
    };
    if last >= n || rows.windows(2).any(|w| w[0] > w[1]) {
        return Err(corrupt(format!("rows {first}..={last} outside {n} rows or unsorted")));
    }
    let k = rows.len();
    let span = |raw: &Buffer| -> Result<ArrayRef> {
        // Decode the covering window once and pick the rows from it.
        let w = decode_window(raw, c, DecodeMode::Values, first, last - first + 1)?;
        let idx =
            arrow_array::UInt32Array::from_iter_values(rows.iter().map(|&r| (r - first) as u32));
        arrow_select::take::take(w.as_ref(), &idx, None)
            .map_err(|e| corrupt(format!("gather rows: {e}")))
    };
    match (c.encoding, c.phys) {
        (Encoding::Ipc | Encoding::HalfVector | Encoding::Int8Vector, _)
        | (Encoding::Plain, Physical::Vector { .. } | Physical::Bool) => {
            return span(raw);
        }
        _ => {}
    }
    let (mut secs, nulls) = sections(raw, &c)?;
    let mut next = || secs.next().ok_or_else(|| corrupt("missing section".into()));
    let need = |b: &Buffer, len: usize, what: &str| section_has(&c, b, len, what);
    let out_nulls = nulls
        .as_ref()
        .map(|nb| NullBuffer::new(BooleanBuffer::from_iter(rows.iter().map(|&r| nb.is_valid(r)))));
    let is_null = |i: usize| nulls.as_ref().is_some_and(|nb| nb.is_null(i));
    let build = |buffers: Vec<Buffer>| {
        arrow_data::ArrayData::builder(c.data_type.clone())
            .len(k)
            .buffers(buffers)
            .nulls(out_nulls.clone())
            .build()
            .map(make_array)
            .map_err(|e| corrupt(format!("invalid column data: {e}")))
    };
    // Fixed-width values: `w` bytes of row `r` at `r * w` of `v`.
    let gather_fixed = |v: &Buffer, w: usize| {
        let mut out = MutableBuffer::from_len_zeroed(k * w);
        let o = out.as_slice_mut();
        for (j, &r) in rows.iter().enumerate() {
            o[j * w..(j + 1) * w].copy_from_slice(&v.as_slice()[r * w..(r + 1) * w]);
        }
        Buffer::from(out)
    };
    match (c.encoding, c.phys) {
        (Encoding::Plain, Physical::Bytes) => {
            let offs = next()?;
            let data = next()?;
            need(&offs, (n + 1) * 4, "offsets")?;
            let o = offs.typed_data::<i32>();
            let mut out_offs = Vec::with_capacity(k + 1);
            let mut out = Vec::new();
            out_offs.push(0i32);
            for &r in rows {
                let (lo, hi) = (o[r], o[r + 1]);
                if lo < 0 || hi < lo || hi as usize > data.len() {
                    return Err(corrupt("string offsets out of range".into()));
                }
                out.extend_from_slice(&data.as_slice()[lo as usize..hi as usize]);
                out_offs
                    .push(i32::try_from(out.len()).map_err(|_| corrupt("rows too large".into()))?);
            }
            build(vec![Buffer::from_vec(out_offs), Buffer::from_vec(out)])
        }
        (Encoding::Plain, phys) => {
            let w = plain_width(phys)
                .ok_or_else(|| corrupt("plain encoding for an unexpected kind".into()))?;
            let v = next()?;
            need(&v, n * w, "values")?;
            build(vec![gather_fixed(&v, w)])
        }
        (Encoding::ForPacked { base, bits }, Physical::Int { width, .. }) => {
            let p = next()?;
            need(&p, bitpack::packed_len(n, *bits), "packed")?;
            let values = unpack_ints(width, k, |out| {
                for (o, &r) in out.iter_mut().zip(rows) {
                    *o = base.wrapping_add(bitpack::get(p.as_slice(), *bits, r));
                }
            });
            build(vec![values])
        }
        (Encoding::DeltaPacked { first, base, bits }, Physical::Int { width, .. }) => {
            let p = next()?;
            need(&p, bitpack::packed_len(n.saturating_sub(1), *bits), "packed")?;
            let (first, base, bits) = (*first, *base, *bits);
            let values = unpack_ints(width, k, |out| {
                // Row r is row r − 1 plus `base` plus delta r − 1, so row r is
                // first + r·base + (the sum of deltas 0..r): one pass over the deltas up to
                // the last row wanted, summing them (decoding the covering window instead
                // materialised every row before it: a point lookup near the end of a
                // 64K-row group decoded 64K values). A constant step (dense ids: 0-bit
                // deltas) sums nothing.
                let (mut cur, mut at) = (first, 0usize);
                for (o, &r) in out.iter_mut().zip(rows) {
                    let deltas = bitpack::sum_from(p.as_slice(), bits, at, r - at);
                    cur = cur.wrapping_add(base.wrapping_mul((r - at) as u64)).wrapping_add(deltas);
                    at = r;
                    *o = cur;
                }
            });
            build(vec![values])
        }
        (Encoding::Dict { code_width, dict_len }, phys) => {
            let (dk, cw) = (*dict_len as usize, *code_width as usize);
            let (dict_a, dict_b) = match phys {
                Physical::Bytes => (Some(next()?), next()?),
                Physical::F32 | Physical::F64 => (None, next()?),
                _ => return Err(corrupt("dictionary encoding for an unexpected kind".into())),
            };
            let codes = next()?;
            need(&codes, n * cw, "codes")?;
            let code_at = |i: usize| -> Result<usize> {
                let c = code_in(codes.as_slice(), cw, i);
                if c >= dk {
                    return Err(corrupt(format!("dictionary code {c} out of {dk} entries")));
                }
                Ok(c)
            };
            match dict_a {
                Some(offs) => {
                    need(&offs, (dk + 1) * 4, "dictionary offsets")?;
                    let o = offs.typed_data::<i32>();
                    let data = dict_b.as_slice();
                    let mut out_offs = Vec::with_capacity(k + 1);
                    let mut out = Vec::new();
                    out_offs.push(0i32);
                    for &r in rows {
                        if !is_null(r) {
                            let c = code_at(r)?;
                            let (lo, hi) = (o[c], o[c + 1]);
                            if lo < 0 || hi < lo || hi as usize > data.len() {
                                return Err(corrupt("dictionary offsets out of range".into()));
                            }
                            out.extend_from_slice(&data[lo as usize..hi as usize]);
                        }
                        out_offs.push(
                            i32::try_from(out.len())
                                .map_err(|_| corrupt("rows too large".into()))?,
                        );
                    }
                    build(vec![Buffer::from_vec(out_offs), Buffer::from_vec(out)])
                }
                None => {
                    let w = if phys == Physical::F32 { 4 } else { 8 };
                    need(&dict_b, dk * w, "dictionary")?;
                    let d = dict_b.as_slice();
                    let mut out = MutableBuffer::from_len_zeroed(k * w);
                    let o = out.as_slice_mut();
                    for (j, &r) in rows.iter().enumerate() {
                        if !is_null(r) {
                            let c = code_at(r)?;
                            o[j * w..(j + 1) * w].copy_from_slice(&d[c * w..(c + 1) * w]);
                        }
                    }
                    build(vec![out.into()])
                }
            }
        }
        _ => span(raw),
    }
}

/// Rows `start..start + len` of a 64-bit float dictionary chunk ([`f64_dictionary`]) as
/// values, reading from `raw` only what [`window_bytes_without_dictionary`] names (validity
/// and the window's codes) and taking the dictionary entries from `entries`, which is
/// handed the entry index of each non-NULL row in row order and must give back one value
/// per index, in that order. A code out of the dictionary is [`Error::Corrupt`].
pub fn decode_window_with_entries(
    raw: &Buffer,
    c: ChunkInfo<'_>,
    start: usize,
    len: usize,
    entries: impl FnOnce(&[usize], &mut Vec<f64>) -> Result<()>,
) -> Result<ArrayRef> {
    let corrupt = |reason: String| Error::corrupt(c.file, c.offset, reason);
    let (Encoding::Dict { code_width, dict_len }, Physical::F64) = (c.encoding, c.phys) else {
        return Err(corrupt("not a 64-bit float dictionary chunk".into()));
    };
    let n = c.rows;
    if start.checked_add(len).is_none_or(|e| e > n) {
        return Err(corrupt(format!("window {start}+{len} outside {n} rows")));
    }
    let (dk, cw) = (*dict_len as usize, usize::from(*code_width));
    let (mut secs, nulls) = sections(raw, &c)?;
    let codes = secs.nth(1).ok_or_else(|| corrupt("missing section".into()))?;
    section_has(&c, &codes, n * cw, "codes")?;
    let window_nulls = nulls.as_ref().map(|nb| nb.slice(start, len));
    let valid = |i: usize| window_nulls.as_ref().is_none_or(|nb| nb.is_valid(i));
    let mut wanted = Vec::with_capacity(len);
    for i in (0..len).filter(|&i| valid(i)) {
        let code = code_in(codes.as_slice(), cw, start + i);
        if code >= dk {
            return Err(corrupt(format!("dictionary code {code} out of {dk} entries")));
        }
        wanted.push(code);
    }
    let mut got = Vec::with_capacity(wanted.len());
    entries(&wanted, &mut got)?;
    if got.len() != wanted.len() {
        return Err(corrupt(format!("{} dictionary entries for {} rows", got.len(), wanted.len())));
    }
    let mut values = vec![0f64; len];
    let mut got = got.into_iter();
    for (i, v) in values.iter_mut().enumerate().filter(|(i, _)| valid(*i)) {
        *v = got.next().ok_or_else(|| corrupt(format!("no dictionary entry for row {i}")))?;
    }
    arrow_data::ArrayData::builder(c.data_type.clone())
        .len(len)
        .buffers(vec![Buffer::from_vec(values)])
        .nulls(window_nulls)
        .build()
        .map(make_array)
        .map_err(|e| corrupt(format!("invalid column data: {e}")))
}

/// Checks that section `b` (named `what` in the error) holds at least `len` bytes.
fn section_has(c: &ChunkInfo<'_>, b: &Buffer, len: usize, what: &str) -> Result<()> {
    if b.len() < len {
        let reason = format!("{what} section has {} bytes, needs {len}", b.len());
        return Err(Error::corrupt(c.file, c.offset, reason));
    }
    Ok(())
}

/// The alignment the values of a one-section chunk of kind `phys` need when its bytes are
/// used in place (at most 8: a framed block's bytes in place are 8-byte aligned); `None`
/// for kinds that need more (128-bit decimals) or are not read in place (generic IPC,
/// vectors).
pub fn in_place_width(phys: Physical) -> Option<usize> {
    match phys {
        Physical::Decimal128 | Physical::Generic | Physical::Vector { .. } => None,
        Physical::Int { width, .. } => Some(usize::from(width)),
        Physical::F32 => Some(4),
        _ => Some(8),
    }
}

/// Bytes per value of a plain fixed-width chunk of kind `phys`.
fn plain_width(phys: Physical) -> Option<usize> {
    match phys {
        Physical::Int { width, .. } => Some(width as usize),
        Physical::F32 => Some(4),
        Physical::F64 => Some(8),
        Physical::Decimal128 => Some(16),
        _ => None,
    }
}

/// The rows `start..start + len` of an integer chunk whose value lies in `lo..=hi` (as
/// 128-bit integers, signed or unsigned per the column), computed on the packed values of
/// a frame-of-reference chunk without decoding them: `v` is in the range exactly when
/// `v - base` is, and `v - base` is what is packed. `Ok(None)` for any other encoding and
/// for a chunk holding NULLs (the caller decodes the column instead).
pub fn int_range_window(
    raw: &Buffer,
    c: ChunkInfo<'_>,
    start: usize,
    len: usize,
    lo: i128,
    hi: i128,
) -> Result<Option<BooleanBuffer>> {
    let (Encoding::ForPacked { base, bits }, Physical::Int { signed, .. }) = (c.encoding, c.phys)
    else {
        return Ok(None);
    };
    if c.null_count > 0 {
        return Ok(None);
    }
    if start.checked_add(len).is_none_or(|end| end > c.rows) {
        return Err(Error::corrupt(
            c.file,
            c.offset,
            format!("rows {start}+{len} outside a chunk of {}", c.rows),
        ));
    }
    let (bits, base) = (*bits, *base);
    let (mut secs, _) = sections(raw, &c)?;
    let p = secs.next().ok_or_else(|| Error::corrupt(c.file, c.offset, "missing packed values"))?;
    section_has(&c, &p, bitpack::packed_len(c.rows, bits), "packed")?;
    let base = if signed { i128::from(base as i64) } else { i128::from(base) };
    let top = if bits >= 64 { i128::from(u64::MAX) } else { (1i128 << bits) - 1 };
    // The packed values `v - base` that satisfy, clamped to what `bits` bits can hold.
    let (plo, phi) = (lo.saturating_sub(base).max(0), hi.saturating_sub(base).min(top));
    if plo > phi {
        return Ok(Some(BooleanBuffer::new_unset(len)));
    }
    let (plo, width) = (plo as u64, (phi - plo) as u64);
    // `v - plo <= phi - plo` exactly when `plo <= v <= phi`.
    let words = bitpack::range_mask(p.as_slice(), bits, start, len, plo, width);
    Ok(Some(BooleanBuffer::new(Buffer::from_vec(words), 0, len)))
}

/// Runs `fill(values)` on `n` 64-bit patterns and returns the values buffer of a `width`
/// byte integer column (the low `width` bytes of each pattern).
fn unpack_ints(width: u8, n: usize, fill: impl FnOnce(&mut [u64])) -> Buffer {
    // `fill` writes the 64-bit values (inlined, no call per value); narrower columns take
    // their low bytes in one more pass.
    let mut out = vec![0u64; n];
    fill(&mut out);
    match width {
        1 => Buffer::from_vec(out.iter().map(|&v| v as u8).collect::<Vec<u8>>()),
        2 => Buffer::from_vec(out.iter().map(|&v| v as u16).collect::<Vec<u16>>()),
        4 => Buffer::from_vec(out.iter().map(|&v| v as u32).collect::<Vec<u32>>()),
        _ => Buffer::from_vec(out),
    }
}

/// Decompresses a zstd block into a 64-byte-aligned buffer of exactly `raw_len` bytes.
pub fn decompress(stored: &[u8], raw_len: usize, file: &Path, offset: u64) -> Result<Buffer> {
    let mut out = MutableBuffer::from_len_zeroed(raw_len);
    let written = zstd::bulk::decompress_to_buffer(stored, out.as_slice_mut()).map_err(|e| {
        Error::corrupt(file, offset, format!("zstd block does not decompress: {e}"))
    })?;
    if written != raw_len {
        return Err(Error::corrupt(
            file,
            offset,
            format!("block decompressed to {written} bytes, expected {raw_len}"),
        ));
    }
    Ok(out.into())
}

/// The largest code of rows `start..start + len` of a `cw`-byte little-endian codes
/// buffer: 0 for an empty window, `usize::MAX` for a window outside the buffer. Plain
/// reductions, so it vectorises.
fn max_code(codes: &[u8], cw: usize, start: usize, len: usize) -> usize {
    let Some(w) = codes.get(start * cw..(start + len) * cw) else { return usize::MAX };
    match cw {
        1 => w.iter().copied().fold(0u8, u8::max) as usize,
        2 => w.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).fold(0, u16::max) as usize,
        _ => w
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .fold(0, u32::max) as usize,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::builder::{Int32Builder, ListBuilder};
    use arrow_array::cast::AsArray;
    use arrow_array::*;
    use arrow_schema::{Fields, TimeUnit};
    use proptest::prelude::*;

    use super::*;
    use crate::types::{physical, vector_type};

    /// The uncompressed block of an encoded chunk of `a` (64-byte aligned, as a segment
    /// hands it out) and its decoding info.
    fn block_of<'a>(
        enc: &'a EncodedChunk,
        a: &'a ArrayRef,
        phys: Physical,
    ) -> (Buffer, ChunkInfo<'a>) {
        let raw: Buffer = if enc.compressed {
            crate::frames::restore_all(&enc.stored, &enc.sections, enc.raw.len(), true).unwrap()
        } else {
            let mut m = MutableBuffer::new(enc.raw.len());
            m.extend_from_slice(&enc.raw);
            m.into()
        };
        let info = ChunkInfo {
            encoding: &enc.encoding,
            null_count: enc.null_count,
            sections: &enc.sections,
            rows: a.len(),
            data_type: a.data_type(),
            phys,
            file: Path::new("t"),
            offset: 0,
        };
        (raw, info)
    }

    /// Encodes with both policies, decodes both ways, checks equality; returns encodings seen.
    fn round_trip(array: &ArrayRef) -> Vec<Encoding> {
        round_trip_as(array, physical("c", array.data_type()).unwrap())
    }

    fn round_trip_as(array: &ArrayRef, phys: Physical) -> Vec<Encoding> {
        let mut seen = Vec::new();
        for policy in [CompressionPolicy::Never, CompressionPolicy::Auto { level: 1 }] {
            for sliced in [false, true] {
                let a = if sliced && array.len() > 2 {
                    array.slice(1, array.len() - 2)
                } else {
                    array.clone()
                };
                let enc = encode(a.as_ref(), phys, policy).unwrap();
                let (raw, info) = block_of(&enc, &a, phys);
                let got = decode(&raw, info, DecodeMode::Values).unwrap();
                assert_eq!(got.as_ref(), a.as_ref(), "encoding {:?}", enc.encoding);
                // Windows decode exactly the rows they cover.
                let n = a.len();
                for (start, len) in [
                    (0, 0),
                    (0, n.min(1)),
                    (n / 3, n - n / 3),
                    (n.saturating_sub(1), n.min(1)),
                    (n / 2, n.min(5).min(n - n / 2)),
                    (n / 4, n.min(SMALL_WINDOW).min(n - n / 4)),
                    (n / 5, n.min(SMALL_WINDOW + 1).min(n - n / 5)),
                ] {
                    let w = decode_window(&raw, info, DecodeMode::Values, start, len).unwrap();
                    assert_eq!(
                        w.as_ref(),
                        a.slice(start, len).as_ref(),
                        "window {start}+{len} of {:?}",
                        enc.encoding
                    );
                    check_window_bytes(&raw, info, &a, start, len);
                }
                assert!(decode_window(&raw, info, DecodeMode::Values, n, 1).is_err());
                // Row lists gather exactly those rows.
                let picks: [Vec<usize>; 6] = [
                    Vec::new(),
                    (0..n).collect(),
                    (0..n).step_by(3).collect(),
                    (0..n).filter(|i| i % 7 == 2 || i % 11 == 5).collect(),
                    [0, n.saturating_sub(1)].into_iter().filter(|_| n > 1).collect(),
                    vec![n / 2; n.min(2)],
                ];
                for rows in picks {
                    let got = decode_rows(&raw, info, &rows).unwrap();
                    let idx = UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
                    let want = arrow_select::take::take(a.as_ref(), &idx, None).unwrap();
                    assert_eq!(got.as_ref(), want.as_ref(), "rows {rows:?} of {:?}", enc.encoding);
                }
                assert!(decode_rows(&raw, info, &[n]).is_err());
                assert!(n < 2 || decode_rows(&raw, info, &[1, 0]).is_err());
                // Single values read in place equal the array's.
                let in_place = reads_cells(a.data_type())
                    && !matches!(enc.encoding, Encoding::DeltaPacked { bits, .. } if bits > 0);
                for r in 0..n {
                    let got = decode_cell(raw.as_slice(), info, r).unwrap();
                    match got {
                        Some(cell) => assert!(
                            same_cell(cell, cell_of(a.as_ref(), r)),
                            "row {r} of {:?}: {cell:?} vs {:?}",
                            enc.encoding,
                            cell_of(a.as_ref(), r)
                        ),
                        None => {
                            assert!(!in_place, "row {r} of {:?} not read in place", enc.encoding)
                        }
                    }
                }
                assert!(!in_place || decode_cell(raw.as_slice(), info, n).is_err());
                let codes = decode(&raw, info, DecodeMode::Codes).unwrap();
                if let DataType::Dictionary(_, _) = codes.data_type() {
                    let back = arrow_cast::cast(&codes, a.data_type()).unwrap();
                    assert_eq!(back.as_ref(), a.as_ref());
                    // Sorted dictionary: values strictly ascending.
                    let d = codes.as_any_dictionary().values().clone();
                    let sorted = arrow_ord::sort::sort(&d, None).unwrap();
                    assert_eq!(sorted.as_ref(), d.as_ref());
                }
                seen.push(enc.encoding.clone());
            }
        }
        seen
    }

    /// The block with only the bytes [`window_bytes`] names for rows `start..start + len`
    /// in place, every other byte garbage.
    fn holey(raw: &Buffer, info: ChunkInfo<'_>, start: usize, len: usize) -> Option<Buffer> {
        let WindowBytes::Ranges { ranges, strings } = window_bytes(&info, start, len) else {
            return None;
        };
        let mut out = MutableBuffer::from_len_zeroed(raw.len());
        out.as_slice_mut().fill(0xA5);
        let copy = |out: &mut MutableBuffer, r: std::ops::Range<usize>| {
            out.as_slice_mut()[r.clone()].copy_from_slice(&raw.as_slice()[r]);
        };
        for r in ranges {
            copy(&mut out, r);
        }
        if let Some(s) = strings {
            let r = s.data(out.as_slice()).expect("the window's offsets are in place");
            copy(&mut out, r);
        }
        Some(out.into())
    }

    /// Decoding rows `start..start + len` — as a window (values and codes), as row lists
    /// and as single cells — from only the bytes [`window_bytes`] names gives what the whole
    /// block gives; only encodings read whole may ask for the whole block.
    fn check_window_bytes(
        raw: &Buffer,
        info: ChunkInfo<'_>,
        a: &ArrayRef,
        start: usize,
        len: usize,
    ) {
        let Some(h) = holey(raw, info, start, len) else {
            assert!(
                matches!(
                    (info.encoding, info.phys),
                    (Encoding::Ipc | Encoding::HalfVector | Encoding::Int8Vector, _)
                        | (Encoding::Plain, Physical::Bool | Physical::Vector { .. })
                ),
                "{:?} asks for the whole block",
                info.encoding
            );
            return;
        };
        let what = format!("window {start}+{len} of {:?} from its bytes only", info.encoding);
        let w = decode_window(&h, info, DecodeMode::Values, start, len).unwrap();
        assert_eq!(w.as_ref(), a.slice(start, len).as_ref(), "{what}");
        let codes = decode_window(&h, info, DecodeMode::Codes, start, len).unwrap();
        let want = decode_window(raw, info, DecodeMode::Codes, start, len).unwrap();
        assert_eq!(codes.as_ref(), want.as_ref(), "{what} (codes)");
        let rows: Vec<usize> = (start..start + len).filter(|r| r % 3 != 1).collect();
        let got = decode_rows(&h, info, &rows).unwrap();
        let idx = UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
        let want = arrow_select::take::take(a.as_ref(), &idx, None).unwrap();
        assert_eq!(got.as_ref(), want.as_ref(), "{what} (rows)");
        for r in start..start + len {
            let (got, want) = (
                decode_cell(h.as_slice(), info, r).unwrap(),
                decode_cell(raw.as_slice(), info, r).unwrap(),
            );
            match (got, want) {
                (Some(g), Some(w)) => assert!(same_cell(g, w), "{what}: row {r}"),
                (g, w) => assert_eq!(g.is_some(), w.is_some(), "{what}: row {r}"),
            }
        }
    }

    /// Row `i` of the decoded array `a` as a cell ([`cell_at`]), what [`decode_cell`] reading
    /// the encoded block in place must agree with.
    fn cell_of(a: &dyn Array, i: usize) -> Cell<'_> {
        cell_at(a, i).unwrap_or_else(|| panic!("no cell for {}", a.data_type()))
    }

    /// Cells equal, floats by bit pattern (NaN, -0.0).
    fn same_cell(x: Cell<'_>, y: Cell<'_>) -> bool {
        match (x, y) {
            (Cell::F32(a), Cell::F32(b)) => a.to_bits() == b.to_bits(),
            (Cell::F64(a), Cell::F64(b)) => a.to_bits() == b.to_bits(),
            _ => x == y,
        }
    }

    fn opt_vec<T: std::fmt::Debug + Clone>(
        s: impl Strategy<Value = T>,
    ) -> impl Strategy<Value = Vec<Option<T>>> {
        proptest::collection::vec(proptest::option::weighted(0.85, s), 0..1500)
    }

    fn ints(mode: u8) -> BoxedStrategy<Vec<Option<i64>>> {
        match mode {
            0 => opt_vec(any::<i64>()).boxed(),
            1 => opt_vec(-3i64..4).boxed(),
            _ => (any::<i32>(), 0i64..3, 0usize..1500)
                .prop_map(|(start, step, n)| {
                    (0..n)
                        .map(|i| {
                            if i % 17 == 5 {
                                None
                            } else {
                                Some(i64::from(start) + step * i as i64)
                            }
                        })
                        .collect()
                })
                .boxed(),
        }
    }

    /// `int_range_window` on one encoded chunk against the decoded values compared plainly
    /// (`None` only where the chunk is not packed or has NULLs).
    fn check_int_range(a: &ArrayRef, values: &[Option<i128>], start: usize, lo: i128, hi: i128) {
        let phys = physical("c", a.data_type()).unwrap();
        let enc = encode(a.as_ref(), phys, CompressionPolicy::Never).unwrap();
        let (raw, info) = block_of(&enc, a, phys);
        let start = start % a.len();
        let len = ((a.len() - start) / 2 + 1).min(a.len() - start);
        let got = int_range_window(&raw, info, start, len, lo, hi).unwrap();
        let packed = matches!(enc.encoding, Encoding::ForPacked { .. });
        match got {
            None => assert!(!packed || enc.null_count > 0, "{:?} refused", enc.encoding),
            Some(t) => {
                assert!(packed && enc.null_count == 0);
                let want: Vec<bool> = values[start..start + len]
                    .iter()
                    .map(|v| v.is_some_and(|v| lo <= v && v <= hi))
                    .collect();
                assert_eq!(t.iter().collect::<Vec<_>>(), want, "{:?} [{lo}, {hi}]", enc.encoding);
            }
        }
        assert!(
            int_range_window(&raw, info, a.len(), 1, lo, hi).is_err()
                || !packed
                || enc.null_count > 0
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

        /// Ranges over packed integers, signed and unsigned, every width, windows anywhere.
        #[test]
        fn int_ranges_on_packed_values(
            v in prop::collection::vec(prop_oneof![
                8 => (-300i64..300).prop_map(Some),
                1 => any::<i64>().prop_map(Some),
                1 => Just(None),
            ], 1..300),
            start in 0usize..300,
            ends in (any::<prop::sample::Index>(), any::<prop::sample::Index>()),
            extreme in prop_oneof![
                6 => Just(None),
                1 => Just(Some((i128::MIN, 0i128))),
                1 => Just(Some((-5, i128::MAX))),
                1 => any::<(i64, i64)>().prop_map(|(a, b)| Some((i128::from(a), i128::from(b)))),
            ],
            dense in any::<bool>(),
            big in any::<bool>(),
        ) {
            // Mostly without NULLs and large values, so most chunks take the packed path.
            let v: Vec<Option<i64>> =
                if dense { v.iter().map(|x| Some(x.unwrap_or(7))).collect() } else { v };
            let v: Vec<Option<i64>> =
                if big { v } else { v.iter().map(|x| x.map(|x| x % 300)).collect() };
            let wide: Vec<Option<i128>> = v.iter().map(|x| x.map(i128::from)).collect();
            // Range ends taken from the values themselves (so both edges are hit), or extreme.
            let at = |i: &prop::sample::Index| wide[i.index(wide.len())].unwrap_or(0);
            let (lo, hi) = extreme.unwrap_or((at(&ends.0), at(&ends.1)));
            let (lo, hi) = if extreme.is_none() && lo > hi { (hi, lo) } else { (lo, hi) };
            check_int_range(&(Arc::new(Int64Array::from(v.clone())) as ArrayRef), &wide, start, lo, hi);
            let small: Vec<Option<i16>> = v.iter().map(|x| x.map(|x| (x % 300) as i16)).collect();
            let wide16: Vec<Option<i128>> = small.iter().map(|x| x.map(i128::from)).collect();
            check_int_range(&(Arc::new(Int16Array::from(small)) as ArrayRef), &wide16, start, lo, hi);
            let unsigned: Vec<Option<u64>> = v.iter().map(|x| x.map(|x| x as u64)).collect();
            let wideu: Vec<Option<i128>> = unsigned.iter().map(|x| x.map(i128::from)).collect();
            check_int_range(&(Arc::new(UInt64Array::from(unsigned)) as ArrayRef), &wideu, start, lo, hi);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn integers(mode in 0u8..3, v in (0u8..3).prop_flat_map(ints)) {
            let _ = mode;
            let i64s: ArrayRef = Arc::new(Int64Array::from(v.clone()));
            round_trip(&i64s);
            let narrow = |f: fn(i64) -> i64| v.iter().map(|x| x.map(f)).collect::<Vec<_>>();
            round_trip(&(Arc::new(Int8Array::from(narrow(|x| x % 128).iter().map(|x| x.map(|x| x as i8)).collect::<Vec<_>>())) as ArrayRef));
            round_trip(&(Arc::new(Int16Array::from(narrow(|x| x % 30000).iter().map(|x| x.map(|x| x as i16)).collect::<Vec<_>>())) as ArrayRef));
            round_trip(&(Arc::new(Int32Array::from(v.iter().map(|x| x.map(|x| x as i32)).collect::<Vec<_>>())) as ArrayRef));
            round_trip(&(Arc::new(UInt8Array::from(v.iter().map(|x| x.map(|x| x as u8)).collect::<Vec<_>>())) as ArrayRef));
            round_trip(&(Arc::new(UInt16Array::from(v.iter().map(|x| x.map(|x| x as u16)).collect::<Vec<_>>())) as ArrayRef));
            round_trip(&(Arc::new(UInt32Array::from(v.iter().map(|x| x.map(|x| x as u32)).collect::<Vec<_>>())) as ArrayRef));
            round_trip(&(Arc::new(UInt64Array::from(v.iter().map(|x| x.map(|x| x as u64)).collect::<Vec<_>>())) as ArrayRef));
            round_trip(&(Arc::new(Date32Array::from(v.iter().map(|x| x.map(|x| x as i32)).collect::<Vec<_>>())) as ArrayRef));
            round_trip(&(Arc::new(TimestampMicrosecondArray::from(v.clone()).with_timezone("UTC")) as ArrayRef));
            round_trip(&(Arc::new(Decimal128Array::from(v.iter().map(|x| x.map(i128::from)).collect::<Vec<_>>()).with_precision_and_scale(38, 2).unwrap()) as ArrayRef));
        }

        #[test]
        fn floats(v in prop_oneof![opt_vec(any::<f64>()), opt_vec((0i32..20).prop_map(|x| f64::from(x) / 4.0)), opt_vec(prop_oneof![Just(f64::NAN), Just(-0.0), Just(0.0), Just(f64::INFINITY)])]) {
            round_trip(&(Arc::new(Float64Array::from(v.clone())) as ArrayRef));
            round_trip(&(Arc::new(Float32Array::from(v.iter().map(|x| x.map(|x| x as f32)).collect::<Vec<_>>())) as ArrayRef));
        }

        #[test]
        fn strings_and_binary(v in prop_oneof![opt_vec(".{0,20}"), opt_vec(prop_oneof![Just("Beijing".to_string()), Just("Xi'an".into()), Just("".into()), Just("東京".into())])]) {
            round_trip(&(Arc::new(StringArray::from(v.clone())) as ArrayRef));
            let b: Vec<Option<&[u8]>> = v.iter().map(|x| x.as_deref().map(str::as_bytes)).collect();
            round_trip(&(Arc::new(BinaryArray::from(b)) as ArrayRef));
            round_trip(&(Arc::new(LargeStringArray::from(v.clone())) as ArrayRef));
        }

        #[test]
        fn booleans(v in opt_vec(any::<bool>())) {
            round_trip(&(Arc::new(BooleanArray::from(v)) as ArrayRef));
        }

        #[test]
        fn vectors(dim in 1usize..9, rows in proptest::collection::vec(proptest::option::weighted(0.9, proptest::collection::vec(-1e3f32..1e3, 8)), 0..200)) {
            let values: Vec<f32> = rows.iter().flat_map(|r| r.clone().unwrap_or_else(|| vec![0.0; 8])[..dim].to_vec()).collect();
            let nulls = NullBuffer::from(rows.iter().map(Option::is_some).collect::<Vec<_>>());
            let DataType::FixedSizeList(f, _) = vector_type(dim) else { unreachable!() };
            let a = FixedSizeListArray::try_new(f.clone(), dim as i32, Arc::new(Float32Array::from(values.clone())), Some(nulls.clone())).unwrap();
            round_trip(&(Arc::new(a) as ArrayRef));
            // The stored forms, over values already rounded to them (as on insert).
            for (form, name) in [(StoredForm::Float16, "half-vector"), (StoredForm::Int8, "int8-vector")] {
                let mut v = values.clone();
                for r in v.chunks_exact_mut(dim) {
                    basalt_vector::stored::round_row(form, r).unwrap();
                }
                let a: ArrayRef = Arc::new(FixedSizeListArray::try_new(f.clone(), dim as i32, Arc::new(Float32Array::from(v)), Some(nulls.clone())).unwrap());
                let seen = round_trip_as(&a, Physical::Vector { dim, form });
                prop_assert!(seen.iter().all(|e| e.name() == name), "{:?}", seen);
                // The stored form hands out the codes as they are.
                let enc = encode(a.as_ref(), Physical::Vector { dim, form }, CompressionPolicy::Never).unwrap();
                let (raw, info) = block_of(&enc, &a, Physical::Vector { dim, form });
                let st = decode(&raw, info, DecodeMode::Stored).unwrap();
                prop_assert_eq!(st.len(), a.len());
                prop_assert_eq!(st.null_count(), a.null_count());
                match form {
                    StoredForm::Int8 => prop_assert_eq!(st.data_type(), &stored_vectors_type(dim)),
                    _ => prop_assert!(matches!(st.data_type(), DataType::FixedSizeList(i, _) if i.data_type() == &DataType::Float16)),
                }
                // Every damaged section length is an error, never a panic.
                for i in 0..enc.sections.len() {
                    let mut secs = enc.sections.clone();
                    secs[i] = secs[i].saturating_sub(1);
                    if secs[i] == enc.sections[i] { continue; }
                    let info = ChunkInfo { sections: &secs, ..info };
                    for mode in [DecodeMode::Values, DecodeMode::Stored] {
                        prop_assert!(decode(&raw, info, mode).is_err());
                    }
                }
            }
        }

        #[test]
        fn nested_generic(v in proptest::collection::vec(proptest::option::weighted(0.8, proptest::collection::vec(proptest::option::of(any::<i32>()), 0..4)), 0..200)) {
            let mut b = ListBuilder::new(Int32Builder::new());
            for row in &v {
                match row {
                    Some(items) => { for x in items { b.values().append_option(*x); } b.append(true); }
                    None => b.append(false),
                }
            }
            let list: ArrayRef = Arc::new(b.finish());
            round_trip(&list);
            let ints: ArrayRef = Arc::new(Int32Array::from((0..v.len() as i32).collect::<Vec<_>>()));
            let s = StructArray::new(Fields::from(vec![Field::new("l", list.data_type().clone(), true), Field::new("i", DataType::Int32, false)]), vec![list, ints], None);
            round_trip(&(Arc::new(s) as ArrayRef));
        }
    }

    #[test]
    fn encodings_are_chosen_by_size() {
        let seq: ArrayRef = Arc::new(UInt64Array::from_iter_values(1..=70_000));
        assert!(matches!(round_trip(&seq)[0], Encoding::DeltaPacked { bits: 0, .. }));
        let ages: ArrayRef =
            Arc::new(Int64Array::from_iter_values((0..70_000).map(|i| 18 + (i * 7919) % 63)));
        assert!(matches!(round_trip(&ages)[0], Encoding::ForPacked { bits: 6, .. }));
        let cities: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..70_000).map(|i| ["Beijing", "Wuhan", "Xian"][(i * 31) % 3]),
        ));
        assert!(matches!(round_trip(&cities)[0], Encoding::Dict { code_width: 1, dict_len: 3 }));
        let scores: ArrayRef = Arc::new(Float64Array::from_iter_values(
            (0..70_000).map(|i| f64::from((i * 7919) % 10_001) / 100.0),
        ));
        assert!(matches!(round_trip(&scores)[0], Encoding::Dict { code_width: 2, .. }));
        let names: ArrayRef =
            Arc::new(StringArray::from_iter_values((0..70_000).map(|i| format!("user_{i}"))));
        assert_eq!(round_trip(&names)[0], Encoding::Plain);
        let random: ArrayRef = Arc::new(Float64Array::from_iter_values(
            (0..70_000).map(|i| (f64::from(i) * 1.618).sin()),
        ));
        assert_eq!(round_trip(&random)[0], Encoding::Plain);
        let ts: ArrayRef =
            Arc::new(TimestampNanosecondArray::from_iter_values(0..10).with_timezone("+08:00"));
        assert_eq!(
            ts.data_type(),
            &DataType::Timestamp(TimeUnit::Nanosecond, Some("+08:00".into()))
        );
        round_trip(&ts);
    }

    /// Any byte of a string chunk (plain or dictionary) damaged past the checksum gives
    /// every decoder an error or a value, never a panic; non-UTF-8 text is always an error.
    #[test]
    fn damaged_string_chunks_are_errors_not_panics() {
        let plain: ArrayRef =
            Arc::new(StringArray::from_iter_values((0..40).map(|i| format!("név_{i}"))));
        let dict: ArrayRef =
            Arc::new(StringArray::from_iter_values((0..40).map(|i| ["Xi'an", "Wühan"][i % 2])));
        for (a, is_dict) in [(plain, false), (dict, true)] {
            let enc = encode(a.as_ref(), Physical::Bytes, CompressionPolicy::Never).unwrap();
            assert_eq!(matches!(enc.encoding, Encoding::Dict { .. }), is_dict);
            let info = ChunkInfo {
                encoding: &enc.encoding,
                null_count: 0,
                sections: &enc.sections,
                rows: 40,
                data_type: a.data_type(),
                phys: Physical::Bytes,
                file: Path::new("t"),
                offset: 0,
            };
            let buf = |raw: &[u8]| {
                let mut m = MutableBuffer::new(raw.len());
                m.extend_from_slice(raw);
                Buffer::from(m)
            };
            for at in 0..enc.raw.len() {
                for byte in [0x00, 0x7f, 0x80, 0xff] {
                    let mut raw = enc.raw.clone();
                    raw[at] = byte;
                    let b = buf(&raw);
                    let full = decode_window(&b, info, DecodeMode::Values, 0, 40);
                    let _ = decode_window(&b, info, DecodeMode::Values, 3, 30);
                    let _ = decode_window(&b, info, DecodeMode::Codes, 0, 40);
                    let _ = decode_rows(&b, info, &[0, 7, 39]);
                    let _ = decode_cell(&raw, info, 5);
                    if let Ok(full) = full {
                        // Whatever decodes is valid text (the array checked it).
                        let s = full.as_any().downcast_ref::<StringArray>().unwrap();
                        assert!(std::str::from_utf8(s.value_data()).is_ok());
                    }
                }
            }
            // Text that is not UTF-8 (both layouts start with offsets, then the text).
            let text_at = align64(enc.sections[0] as usize);
            let mut raw = enc.raw.clone();
            raw[text_at] = 0xff;
            let e = decode_window(&buf(&raw), info, DecodeMode::Values, 0, 40).unwrap_err();
            assert!(e.to_string().contains("UTF-8") || e.to_string().contains("utf-8"), "{e}");
        }
    }

    #[test]
    fn a_dictionary_code_out_of_range_is_an_error() {
        let cities: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..300).map(|i| ["Beijing", "Wuhan", "Xian"][i % 3]),
        ));
        let enc = encode(cities.as_ref(), Physical::Bytes, CompressionPolicy::Never).unwrap();
        assert!(matches!(enc.encoding, Encoding::Dict { code_width: 1, dict_len: 3 }));
        let info = ChunkInfo {
            encoding: &enc.encoding,
            null_count: 0,
            sections: &enc.sections,
            rows: 300,
            data_type: cities.data_type(),
            phys: Physical::Bytes,
            file: Path::new("t"),
            offset: 0,
        };
        let decode_all = |raw: &[u8], mode, start, len| {
            let mut m = MutableBuffer::new(raw.len());
            m.extend_from_slice(raw);
            decode_window(&m.into(), info, mode, start, len)
        };
        let mut raw = enc.raw.clone();
        assert!(decode_all(&raw, DecodeMode::Codes, 0, 300).is_ok());
        // The codes are the chunk's last section (sections start 64-byte aligned): make
        // the last row's code 3, which has no entry.
        let codes_at = enc.sections[..2].iter().fold(0, |p, &l| align64(p + l as usize));
        assert_eq!(enc.sections[2], 300);
        raw[codes_at + 299] = 3;
        for mode in [DecodeMode::Codes, DecodeMode::Values] {
            let e = decode_all(&raw, mode, 0, 300).unwrap_err();
            assert!(e.to_string().contains("dictionary"), "{e}");
            assert!(decode_all(&raw, mode, 250, 50).is_err());
            // A window that does not reach the bad code decodes.
            assert_eq!(decode_all(&raw, mode, 10, 200).unwrap().len(), 200);
        }
    }

    #[test]
    fn damaged_metadata_is_an_error_not_a_panic() {
        let a: ArrayRef = Arc::new(StringArray::from(vec![Some("a"), None, Some("bb")]));
        let enc = encode(a.as_ref(), Physical::Bytes, CompressionPolicy::Never).unwrap();
        let mut m = MutableBuffer::new(enc.raw.len());
        m.extend_from_slice(&enc.raw);
        let raw: Buffer = m.into();
        let mut info = ChunkInfo {
            encoding: &enc.encoding,
            null_count: enc.null_count,
            sections: &enc.sections,
            rows: 3,
            data_type: a.data_type(),
            phys: Physical::Bytes,
            file: Path::new("t"),
            offset: 0,
        };
        info.rows = 1000;
        assert!(decode(&raw, info, DecodeMode::Values).is_err());
        info.rows = 3;
        info.null_count = 2;
        assert!(decode(&raw, info, DecodeMode::Values).is_err());
        info.null_count = 1;
        let big = [u64::MAX, 1, 1];
        info.sections = &big;
        assert!(decode(&raw, info, DecodeMode::Values).is_err());
        let wrong = Encoding::Dict { code_width: 1, dict_len: 9 };
        info.sections = &enc.sections;
        info.encoding = &wrong;
        assert!(decode(&raw, info, DecodeMode::Values).is_err());
    }
}
