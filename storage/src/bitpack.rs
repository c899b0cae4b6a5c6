//! Bit packing of unsigned integers into little-endian u64 words.
//!
//! Value `i` occupies bits `[i*bits, (i+1)*bits)` of the word stream, least significant bit
//! first. The packed form always carries one extra zero word at the end so that the unpacker
//! may read `word + 1` without a bounds branch. `bits` ranges over 0..=64; with 0 bits the
//! stream is a single zero word and every value equals the frame's base.

/// Number of bits needed to represent `range` (0 for 0).
pub fn bits_needed(range: u64) -> u8 {
    (64 - range.leading_zeros()) as u8
}

/// Bytes that [`pack`] produces for `n` values of `bits` bits.
pub fn packed_len(n: usize, bits: u8) -> usize {
    ((n * bits as usize).div_ceil(64) + 1) * 8
}

/// Packs `values` (each `< 2^bits`) and appends the words to `out`.
pub fn pack(values: impl Iterator<Item = u64>, n: usize, bits: u8, out: &mut Vec<u8>) {
    let words = packed_len(n, bits) / 8;
    let start = out.len();
    out.resize(start + words * 8, 0);
    if bits == 0 {
        return;
    }
    let dst = &mut out[start..];
    let bits = bits as usize;
    let mut acc: u64 = 0;
    let mut fill = 0usize; // bits used in acc
    let mut w = 0usize;
    for v in values.take(n) {
        acc |= v << fill;
        let used = fill + bits;
        if used >= 64 {
            dst[w * 8..w * 8 + 8].copy_from_slice(&acc.to_le_bytes());
            w += 1;
            let spill = used - 64;
            acc = if spill == 0 { 0 } else { v >> (bits - spill) };
            fill = spill;
        } else {
            fill = used;
        }
    }
    if fill > 0 {
        dst[w * 8..w * 8 + 8].copy_from_slice(&acc.to_le_bytes());
    }
}

/// Reads value `i` from a packed stream (`packed` must be at least [`packed_len`] long).
#[inline]
pub fn get(packed: &[u8], bits: u8, i: usize) -> u64 {
    if bits == 0 {
        return 0;
    }
    let bit = i * bits as usize;
    let w = bit / 64;
    let shift = (bit % 64) as u32;
    let lo = word(packed, w);
    let mut v = lo >> shift;
    if shift as usize + bits as usize > 64 {
        v |= word(packed, w + 1) << (64 - shift);
    }
    if bits == 64 { v } else { v & ((1u64 << bits) - 1) }
}

#[inline]
fn word(packed: &[u8], w: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&packed[w * 8..w * 8 + 8]);
    u64::from_le_bytes(a)
}

/// Unpacks `n` values, calling `f(i, value)` for each in order.
#[inline]
pub fn unpack(packed: &[u8], bits: u8, n: usize, f: impl FnMut(usize, u64)) {
    unpack_from(packed, bits, 0, n, f)
}

/// Unpacks values `start..start + n`, calling `f(i, value)` for the `i`-th of them in order.
/// `packed` must hold at least `start + n` values (as [`pack`] made them, extra zero word
/// included); a shorter stream panics, so callers check its length first.
#[inline]
pub fn unpack_from(packed: &[u8], bits: u8, start: usize, n: usize, mut f: impl FnMut(usize, u64)) {
    if bits == 0 {
        for i in 0..n {
            f(i, 0);
        }
        return;
    }
    let mask = if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 };
    let b = bits as usize;
    let mut bit = start * b;
    if b <= 56 {
        // A value of at most 56 bits lies within the 8 bytes from the byte holding its first
        // bit: one unaligned load and a shift, no branch. The extra zero word at the end of
        // the stream keeps those 8 bytes inside it.
        for i in 0..n {
            let at = bit / 8;
            let mut a = [0u8; 8];
            a.copy_from_slice(&packed[at..at + 8]);
            f(i, (u64::from_le_bytes(a) >> (bit % 8)) & mask);
            bit += b;
        }
        return;
    }
    for i in 0..n {
        let w = bit / 64;
        let shift = bit % 64;
        let mut v = word(packed, w) >> shift;
        if shift + b > 64 {
            v |= word(packed, w + 1) << (64 - shift);
        }
        f(i, v & mask);
        bit += b;
    }
}

/// Values `start..start + n` mapped by `f`, collected: one allocation, written once (no
/// zeroing first, no capacity check per value). `packed` must hold them, as for
/// [`unpack_from`].
pub fn collect_from<T>(
    packed: &[u8],
    bits: u8,
    start: usize,
    n: usize,
    f: impl Fn(u64) -> T,
) -> Vec<T> {
    let b = bits as usize;
    if b == 0 {
        return (0..n).map(|_| f(0)).collect();
    }
    if b > 56 {
        return (start..start + n).map(|i| f(get(packed, bits, i))).collect();
    }
    let mask = (1u64 << b) - 1;
    // As in `unpack_from`: the 8 bytes from the byte holding a value's first bit hold it.
    (start..start + n)
        .map(|i| {
            let bit = i * b;
            let at = bit / 8;
            let mut a = [0u8; 8];
            a.copy_from_slice(&packed[at..at + 8]);
            f((u64::from_le_bytes(a) >> (bit % 8)) & mask)
        })
        .collect()
}

/// The wrapping sum of values `start..start + n` (what a delta-packed column's point lookup
/// needs: the sum of the deltas before a row). Same contract as [`unpack_from`]. Four
/// running sums and no call per value: a lookup near the end of a 64K-row group adds 64K
/// deltas, and one chain of `cur += base + d` through a closure took a few percent of an
/// int8 recall at 100k rows (the fetch of its hits' timestamps).
pub fn sum_from(packed: &[u8], bits: u8, start: usize, n: usize) -> u64 {
    let b = bits as usize;
    if b == 0 || n == 0 {
        return 0;
    }
    if b > 56 {
        let mut sum = 0u64;
        unpack_from(packed, bits, start, n, |_, v| sum = sum.wrapping_add(v));
        return sum;
    }
    let mask = (1u64 << b) - 1;
    // The 8 bytes from the byte holding the last value's first bit must be there (as in
    // `unpack_from`: the extra zero word at the end of the stream).
    let last = ((start + n - 1) * b) / 8;
    let packed = &packed[..last + 8];
    let at = |bit: usize| {
        let i = bit / 8;
        let mut a = [0u8; 8];
        a.copy_from_slice(&packed[i..i + 8]);
        (u64::from_le_bytes(a) >> (bit % 8)) & mask
    };
    let mut sums = [0u64; 4];
    let mut bit = start * b;
    for _ in 0..n / 4 {
        for s in &mut sums {
            *s = s.wrapping_add(at(bit));
            bit += b;
        }
    }
    for _ in 0..n % 4 {
        sums[0] = sums[0].wrapping_add(at(bit));
        bit += b;
    }
    sums.iter().fold(0u64, |a, s| a.wrapping_add(*s))
}

/// Bitmap (64 rows per little-endian word, Arrow's bit order) of the values
/// `start..start + n` of a packed stream that lie in `lo..=lo + span`. One unsigned compare
/// per value (`v - lo <= span`, so `lo + span` must not pass `u64::MAX`), bits gathered in
/// a register a word at a time. `packed` must hold at least `start + n` values, as for
/// [`unpack_from`].
pub fn range_mask(packed: &[u8], bits: u8, start: usize, n: usize, lo: u64, span: u64) -> Vec<u64> {
    let mut words = vec![0u64; n.div_ceil(64)];
    // Widths up to 16 bits (small ints, codes) get a loop compiled for their width: eight
    // values span exactly B bytes, so every shift is a constant.
    macro_rules! fixed {
        ($($b:literal)*) => {
            match bits {
                $($b => range_mask_fixed::<$b>(packed, start, n, lo, span, &mut words),)*
                _ => range_mask_any(packed, bits, start, n, lo, span, &mut words),
            }
        };
    }
    fixed!(1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16);
    words
}

/// [`range_mask`] for a width known at compile time.
fn range_mask_fixed<const B: usize>(
    packed: &[u8],
    start: usize,
    n: usize,
    lo: u64,
    span: u64,
    words: &mut [u64],
) {
    let mask = (1u64 << B) - 1;
    // Whole words from a byte-aligned start; the rest (and any unaligned start) per value.
    let full = if (start * B).is_multiple_of(8) { n / 64 } else { 0 };
    let base = start * B / 8;
    for (w, word) in words[..full].iter_mut().enumerate() {
        let mut acc = 0u64;
        // Eight values fill exactly B bytes: one load, then constant shifts. Up to 8 bits a
        // u64 load, else a u128 one; either stays inside the stream (its extra zero word
        // follows the values).
        for g in 0..8 {
            let at = base + (w * 8 + g) * B;
            let x: u128 = if B <= 8 {
                let mut a = [0u8; 8];
                a.copy_from_slice(&packed[at..at + 8]);
                u128::from(u64::from_le_bytes(a))
            } else {
                let mut a = [0u8; 16];
                a.copy_from_slice(&packed[at..at + 16]);
                u128::from_le_bytes(a)
            };
            for k in 0..8 {
                let v = (x >> (k * B)) as u64 & mask;
                acc |= u64::from(v.wrapping_sub(lo) <= span) << (g * 8 + k);
            }
        }
        *word = acc;
    }
    let done = full * 64;
    range_mask_any(packed, B as u8, start + done, n - done, lo, span, &mut words[full..]);
}

/// [`range_mask`] for any width, value by value.
fn range_mask_any(
    packed: &[u8],
    bits: u8,
    start: usize,
    n: usize,
    lo: u64,
    span: u64,
    words: &mut [u64],
) {
    unpack_from(packed, bits, start, n, |i, v| {
        words[i / 64] |= u64::from(v.wrapping_sub(lo) <= span) << (i % 64);
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(bits in 0u8..=64, raw in proptest::collection::vec(any::<u64>(), 0..300)) {
            let mask = if bits == 64 { u64::MAX } else if bits == 0 { 0 } else { (1u64 << bits) - 1 };
            let vals: Vec<u64> = raw.iter().map(|v| v & mask).collect();
            let mut out = vec![1u8, 2, 3];
            pack(vals.iter().copied(), vals.len(), bits, &mut out);
            let packed = &out[3..];
            prop_assert_eq!(packed.len(), packed_len(vals.len(), bits));
            let mut got = Vec::new();
            unpack(packed, bits, vals.len(), |_, v| got.push(v));
            prop_assert_eq!(&got, &vals);
            for (i, v) in vals.iter().enumerate() {
                prop_assert_eq!(get(packed, bits, i), *v);
            }
            // Windows from any start.
            for start in [0, 1, vals.len() / 3, vals.len().saturating_sub(1), vals.len()] {
                let start = start.min(vals.len());
                let mut w = Vec::new();
                unpack_from(packed, bits, start, vals.len() - start, |i, v| w.push((i, v)));
                let want: Vec<(usize, u64)> = vals[start..].iter().copied().enumerate().collect();
                prop_assert_eq!(&w, &want);
                // Sums of windows: every length from `start`, wrapping.
                for n in [0, 1, 3, 4, 5, 9, vals.len() - start] {
                    let n = n.min(vals.len() - start);
                    let want = vals[start..start + n].iter().fold(0u64, |a, v| a.wrapping_add(*v));
                    prop_assert_eq!(sum_from(packed, bits, start, n), want);
                }
            }
        }
    }

    proptest! {
        /// The range bitmap equals unpacking and comparing, for every width and window.
        #[test]
        fn range_masks_match_unpacking(
            bits in 0u8..=64,
            raw in proptest::collection::vec(any::<u64>(), 0..400),
            start in 0usize..400,
            lo_at in any::<prop::sample::Index>(),
            span in prop_oneof![Just(0u64), 0u64..64, Just(u64::MAX)],
            small in any::<bool>(),
        ) {
            let mask = if bits == 64 { u64::MAX } else if bits == 0 { 0 } else { (1u64 << bits) - 1 };
            // Small values (many equal ones: range edges hit) or the width's whole range.
            let vals: Vec<u64> =
                raw.iter().map(|v| if small { (v & mask) % 97 } else { v & mask }).collect();
            let mut packed = Vec::new();
            pack(vals.iter().copied(), vals.len(), bits, &mut packed);
            let start = if vals.is_empty() { 0 } else { start % vals.len() };
            let n = vals.len() - start;
            let lo = if vals.is_empty() { 0 } else { vals[lo_at.index(vals.len())] };
            let span = span.min(u64::MAX - lo);
            let got = range_mask(&packed, bits, start, n, lo, span);
            let want: Vec<bool> =
                vals[start..].iter().map(|&v| v >= lo && v - lo <= span).collect();
            let got: Vec<bool> = (0..n).map(|i| got[i / 64] >> (i % 64) & 1 == 1).collect();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn bits_needed_edges() {
        assert_eq!(bits_needed(0), 0);
        assert_eq!(bits_needed(1), 1);
        assert_eq!(bits_needed(255), 8);
        assert_eq!(bits_needed(256), 9);
        assert_eq!(bits_needed(u64::MAX), 64);
    }
}
