//! Encoding an Arrow array into a block: choosing the smallest encoding (plain,
//! dictionary, frame-of-reference or delta bit-packing, IPC for nested types) by measured
//! size, and writing its sections.
//!
//! Part of the encodings (see the module doc of `encoding`).

use super::*;

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

pub(super) struct Block {
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
pub(super) fn encode_int8_vectors(
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
            let valid = vals.iter().enumerate().filter(|&(i, _)| is_valid(i)).map(|(_, v)| *v);
            let range = valid.fold(None, |r: Option<(i128, i128)>, v| {
                Some(r.map_or((v, v), |(lo, hi)| (lo.min(v), hi.max(v))))
            });
            if let Some((lo, hi)) = range {
                stats = Some(ZoneMap { min: StatValue::Decimal(lo), max: StatValue::Decimal(hi) });
            }
            let fits = |v: i128| i64::try_from(v).is_ok();
            match range {
                // Unscaled values within 64 bits (every DECIMAL(p ≤ 18), and wider ones
                // holding small values): the integer encodings, as a signed 64-bit column.
                Some((lo, hi)) if fits(lo) && fits(hi) => {
                    let wide: Vec<u64> = (0..n)
                        .map(|i| if is_valid(i) { vals[i] as i64 as u64 } else { 0 })
                        .collect();
                    let mut int_stats = None;
                    encode_packed_int(&wide, 8, true, &is_valid, &mut block, &mut int_stats)
                }
                _ => {
                    block.section(|b| {
                        for v in vals {
                            b.extend_from_slice(&v.to_le_bytes());
                        }
                    });
                    Encoding::Plain
                }
            }
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
pub(super) fn widen(data: &arrow_data::ArrayData, n: usize, width: u8, signed: bool) -> Vec<u64> {
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

pub(super) fn encode_int(
    vals: &[u64],
    width: u8,
    signed: bool,
    is_valid: &dyn Fn(usize) -> bool,
    all_null: bool,
    block: &mut Block,
    stats: &mut Option<ZoneMap>,
) -> Encoding {
    if all_null || vals.is_empty() {
        return plain_int(vals, width, block);
    }
    int_encoding(vals, width, signed, is_valid, true, block, stats)
}

/// The values as they are, `width` bytes each.
fn plain_int(vals: &[u64], width: u8, block: &mut Block) -> Encoding {
    block.section(|b| {
        b.reserve(vals.len() * width as usize);
        for v in vals {
            b.extend_from_slice(&v.to_le_bytes()[..width as usize]);
        }
    });
    Encoding::Plain
}

/// [`encode_int`] for a kind whose `Plain` encoding is not `width`-byte integers (a
/// decimal's unscaled values that fit 64 bits): frame-of-reference or delta packed, never
/// plain. At least one value must be valid.
pub(super) fn encode_packed_int(
    vals: &[u64],
    width: u8,
    signed: bool,
    is_valid: &dyn Fn(usize) -> bool,
    block: &mut Block,
    stats: &mut Option<ZoneMap>,
) -> Encoding {
    int_encoding(vals, width, signed, is_valid, false, block, stats)
}

/// The smallest of the integer encodings for `vals` (at least one valid), plain only when
/// `plain_allowed`; sets `stats` to the valid values' minimum and maximum.
fn int_encoding(
    vals: &[u64],
    width: u8,
    signed: bool,
    is_valid: &dyn Fn(usize) -> bool,
    plain_allowed: bool,
    block: &mut Block,
    stats: &mut Option<ZoneMap>,
) -> Encoding {
    let n = vals.len();
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
    if plain_allowed && plain_size <= for_size && plain_size <= delta_size {
        return plain_int(vals, width, block);
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

/// Code width for a dictionary of `k` entries.
pub(super) fn code_width(k: usize) -> u8 {
    if k <= 1 << 8 {
        1
    } else if k <= 1 << 16 {
        2
    } else {
        4
    }
}

pub(super) fn push_codes(b: &mut Vec<u8>, codes: &[u32], cw: u8) {
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
pub(super) fn estimate_distinct<K: std::hash::Hash + Eq>(
    n: usize,
    key: impl Fn(usize) -> Option<K>,
) -> usize {
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
pub(super) fn build_dict<K: std::hash::Hash + Eq + Copy>(
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

pub(super) fn encode_float(
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

pub(super) fn encode_bytes<'a>(
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

pub(super) fn ipc_encode(array: &dyn Array) -> Result<Vec<u8>> {
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
