//! Decoding a block back into Arrow arrays: whole chunks, windows of rows, chosen rows,
//! dictionary codes, integer ranges answered on packed values, decompression.
//!
//! Part of the encodings (see the module doc of `encoding`).

use super::*;

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
pub(super) const SMALL_WINDOW: usize = 64;

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
        (Encoding::ForPacked { base, bits }, Physical::Decimal128) => {
            let p = next()?;
            need(&p, bitpack::packed_len(n, *bits), "packed")?;
            let base = *base;
            let values = bitpack::collect_from(p.as_slice(), *bits, start, len, |v| {
                i128::from(base.wrapping_add(v) as i64)
            });
            windowed(vec![Buffer::from_vec(values)], 0)
        }
        (Encoding::ForPacked { base, bits }, phys) if packed_width(phys).is_some() => {
            let width = packed_width(phys).unwrap_or(8);
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
        (Encoding::DeltaPacked { first, base, bits }, phys) if packed_width(phys).is_some() => {
            let width = packed_width(phys).unwrap_or(8);
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
pub(super) fn section_ranges(c: &ChunkInfo<'_>) -> Option<([std::ops::Range<usize>; 4], usize)> {
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

pub(super) fn window_bytes_for(
    c: &ChunkInfo<'_>,
    start: usize,
    len: usize,
    dictionary: bool,
) -> WindowBytes {
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
pub(super) fn sections(
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

/// How many sections a chunk with this encoding has (validity first when it has nulls).
pub(super) fn expected_sections(c: &ChunkInfo<'_>) -> usize {
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
pub(super) fn widened_list(
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
pub(super) fn byte_array(
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

/// [`decode_rows`] decodes the covering window of a delta-packed chunk when it holds at
/// most this many rows a pick.
const DENSE_DELTA_PICKS: usize = 16;

/// Like [`decode_window`] for the rows `rows` (ascending, each below the chunk's row count)
/// in values mode: the values of just those rows, gathered straight from the encoded
/// sections — one pass over the block's metadata for all of them instead of one per row,
/// and no other row decoded (delta-packed chunks with varying steps sum the deltas up to
/// the last row wanted, keeping only the running value, unless the rows lie close together:
/// then the covering window is decoded, see [`DENSE_DELTA_PICKS`]). This is how a lookup of many ids
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
        // Delta-packed rows close together (at least one in `DENSE_DELTA_PICKS` of the span):
        // one prefix sum over the span, then a take, costs less than summing the deltas
        // between each pair of picks (a call per pick).
        (Encoding::DeltaPacked { .. }, _) if (last - first + 1) <= k * DENSE_DELTA_PICKS => {
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
    // Fixed-width values: `w` bytes of row `r` at `r * w` of `v`. The common widths copy
    // one array of bytes a row (a fixed-size move, no `memcpy` call per row).
    fn gather<const W: usize>(v: &[u8], rows: &[usize]) -> Buffer {
        let mut out = MutableBuffer::from_len_zeroed(rows.len() * W);
        for (o, &r) in out.as_slice_mut().chunks_exact_mut(W).zip(rows) {
            let at = r * W;
            let value: [u8; W] = v[at..at + W].try_into().unwrap_or([0; W]);
            o.copy_from_slice(&value);
        }
        Buffer::from(out)
    }
    let gather_fixed = |v: &Buffer, w: usize| match w {
        1 => gather::<1>(v.as_slice(), rows),
        2 => gather::<2>(v.as_slice(), rows),
        4 => gather::<4>(v.as_slice(), rows),
        8 => gather::<8>(v.as_slice(), rows),
        16 => gather::<16>(v.as_slice(), rows),
        _ => {
            let mut out = MutableBuffer::from_len_zeroed(k * w);
            let o = out.as_slice_mut();
            for (j, &r) in rows.iter().enumerate() {
                o[j * w..(j + 1) * w].copy_from_slice(&v.as_slice()[r * w..(r + 1) * w]);
            }
            Buffer::from(out)
        }
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
        (Encoding::ForPacked { base, bits }, Physical::Decimal128) => {
            let p = next()?;
            need(&p, bitpack::packed_len(n, *bits), "packed")?;
            let values: Vec<i128> = rows
                .iter()
                .map(
                    |&r| i128::from(base.wrapping_add(bitpack::get(p.as_slice(), *bits, r)) as i64),
                )
                .collect();
            build(vec![Buffer::from_vec(values)])
        }
        (Encoding::ForPacked { base, bits }, phys) if packed_width(phys).is_some() => {
            let width = packed_width(phys).unwrap_or(8);
            let p = next()?;
            need(&p, bitpack::packed_len(n, *bits), "packed")?;
            let values = unpack_ints(width, k, |out| {
                for (o, &r) in out.iter_mut().zip(rows) {
                    *o = base.wrapping_add(bitpack::get(p.as_slice(), *bits, r));
                }
            });
            build(vec![values])
        }
        (Encoding::DeltaPacked { first, base, bits }, phys) if packed_width(phys).is_some() => {
            let width = packed_width(phys).unwrap_or(8);
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
pub(super) fn section_has(c: &ChunkInfo<'_>, b: &Buffer, len: usize, what: &str) -> Result<()> {
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
pub(super) fn plain_width(phys: Physical) -> Option<usize> {
    match phys {
        Physical::Int { width, .. } => Some(width as usize),
        Physical::F32 => Some(4),
        Physical::F64 => Some(8),
        Physical::Decimal128 => Some(16),
        _ => None,
    }
}

/// The rows `start..start + len` of an integer chunk (or a decimal chunk, on its unscaled
/// values) whose value lies in `lo..=hi` (as 128-bit integers, signed or unsigned per the
/// column), computed on the packed values of
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
    let (Encoding::ForPacked { base, bits }, Some(signed)) = (c.encoding, packed_signed(c.phys))
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
/// byte integer column (the low `width` bytes of each pattern; width 16: each pattern
/// sign-extended, a decimal's unscaled 128-bit values).
pub(super) fn unpack_ints(width: u8, n: usize, fill: impl FnOnce(&mut [u64])) -> Buffer {
    // `fill` writes the 64-bit values (inlined, no call per value); other widths take
    // their bytes in one more pass.
    if width == 16 {
        return widened_in_place(n, fill);
    }
    let mut out = vec![0u64; n];
    fill(&mut out);
    match width {
        1 => Buffer::from_vec(out.iter().map(|&v| v as u8).collect::<Vec<u8>>()),
        2 => Buffer::from_vec(out.iter().map(|&v| v as u16).collect::<Vec<u16>>()),
        4 => Buffer::from_vec(out.iter().map(|&v| v as u32).collect::<Vec<u32>>()),
        _ => Buffer::from_vec(out),
    }
}

/// [`unpack_ints`] for decimals: `fill` writes the `n` patterns into the first half of the
/// 128-bit values buffer, which is then widened from the back (value `i` goes to words
/// `2i` and `2i + 1`, which hold patterns already widened or pattern `i` itself, read
/// first), so a decode allocates one buffer, not a 64-bit one and then the decimals. Used
/// for delta-packed decimals; frame-of-reference ones decode straight into their values
/// (`bitpack::collect_from`).
fn widened_in_place(n: usize, fill: impl FnOnce(&mut [u64])) -> Buffer {
    let mut out = MutableBuffer::from_len_zeroed(n * 16);
    let words = out.typed_data_mut::<u64>();
    fill(&mut words[..n]);
    for i in (0..n).rev() {
        let v = i128::from(words[i] as i64);
        let (lo, hi) = (v as u64, (v >> 64) as u64);
        // An i128's words in memory order.
        let (first, second) = if cfg!(target_endian = "little") { (lo, hi) } else { (hi, lo) };
        words[2 * i] = first;
        words[2 * i + 1] = second;
    }
    out.into()
}

/// Bytes per value a bit-packed chunk of kind `phys` decodes to: an integer column's
/// width, 16 for a decimal (its unscaled values packed as signed 64-bit integers); `None`
/// for kinds never bit-packed.
pub(super) fn packed_width(phys: Physical) -> Option<u8> {
    match phys {
        Physical::Int { width, .. } => Some(width),
        Physical::Decimal128 => Some(16),
        _ => None,
    }
}

/// Whether a bit-packed chunk of kind `phys` holds signed 64-bit patterns.
pub(super) fn packed_signed(phys: Physical) -> Option<bool> {
    match phys {
        Physical::Int { signed, .. } => Some(signed),
        Physical::Decimal128 => Some(true),
        _ => None,
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
pub(super) fn max_code(codes: &[u8], cw: usize, start: usize, len: usize) -> usize {
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
