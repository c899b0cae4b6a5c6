//! The decimal form of a frame: a frame whose bytes are 64-bit floats that are all exact
//! decimals with a few fraction digits (prices, scores, measurements — and the sorted
//! dictionaries of such columns) is stored as integers `k` with one power of ten, frame of
//! reference and bit packed: `value = k / 10^scale`. Restoring it unpacks and divides
//! instead of running zstd (a cold `SELECT * LIMIT 100` of the 1M-row benchmark table, whose
//! `score` dictionary is 10,001 hundredths packed at 14 bits a value: 338 → 128 µs together
//! with the small first frames of `frames`, probe measurement in `docs/format.md`).
//!
//! # Stored layout
//!
//! ```text
//! scale (u8)       0..=MAX_SCALE: values are k / 10^scale
//! bits  (u8)       0..=64: bits per packed value
//! zero  (u16)
//! base  (i64 LE)   the smallest k
//! packed           k - base for each value, in order ([`crate::bitpack`], n = raw bytes / 8)
//! ```
//!
//! Exactness: a frame takes this form only when every value `v` is finite, not `-0.0`, and
//! `(k as f64) / 10^scale` is bit for bit `v` for an integer `|k| <= 2^53` — the very
//! expression restoring evaluates (IEEE division is correctly rounded, `k` converts
//! exactly), so a restored frame equals the written one byte for byte. Anything else
//! (integers, codes, other floats) fails the check on its first value or few and is left
//! to zstd.
//!
//! What this module must not do: take a frame it cannot restore exactly.

use crate::bitpack;

/// Largest power of ten tried (10^MAX_SCALE is exact in an `f64`).
const MAX_SCALE: u8 = 9;
const HEADER: usize = 12;
/// Largest integer part kept: every integer up to it converts to `f64` exactly.
const MAX_K: f64 = (1u64 << 53) as f64;
/// Widest packed difference: below 2^52 a difference turns into an `f64` by one OR and one
/// subtraction (see [`decode`]), and adds to the base exactly.
const MAX_BITS: u8 = 52;
/// 2^52 as the bits of an `f64`: ORing a difference below 2^52 into its mantissa makes
/// `2^52 + d` exactly.
const TWO_52: u64 = 0x4330_0000_0000_0000;

fn pow10(scale: u8) -> f64 {
    10f64.powi(i32::from(scale))
}

/// `k` with `(k as f64) / 10^scale == v` bit for bit, if there is one.
fn exact(v: f64, p: f64) -> Option<f64> {
    let k = (v * p).round();
    (k.abs() <= MAX_K && (k / p).to_bits() == v.to_bits()).then_some(k)
}

/// Appends the decimal form of `raw` (a frame) to `out` and returns `true` when every value
/// qualifies and the form saves at least a quarter of the bytes; otherwise leaves `out`
/// alone and returns `false`.
pub fn encode(raw: &[u8], out: &mut Vec<u8>) -> bool {
    if raw.len() < 64 || !raw.len().is_multiple_of(8) {
        return false;
    }
    let value = |c: &[u8]| f64::from_bits(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
    // The smallest scale at which every value is exact: raised as values need it.
    let mut scale = 0u8;
    for c in raw.chunks_exact(8) {
        let v = value(c);
        if !v.is_finite() || v.to_bits() == (-0.0f64).to_bits() {
            return false;
        }
        while exact(v, pow10(scale)).is_none() {
            if scale == MAX_SCALE {
                return false;
            }
            scale += 1;
        }
    }
    let p = pow10(scale);
    let mut ks = Vec::with_capacity(raw.len() / 8);
    for c in raw.chunks_exact(8) {
        // Exact at a smaller scale almost always means exact at this one; checked anyway.
        let Some(k) = exact(value(c), p) else { return false };
        ks.push(k as i64);
    }
    let (Some(&lo), Some(&hi)) = (ks.iter().min(), ks.iter().max()) else { return false };
    let bits = bitpack::bits_needed(hi.abs_diff(lo));
    if bits > MAX_BITS {
        return false;
    }
    let len = HEADER + bitpack::packed_len(ks.len(), bits);
    if len * 4 > raw.len() * 3 {
        return false;
    }
    out.reserve(len);
    out.extend_from_slice(&[scale, bits, 0, 0]);
    out.extend_from_slice(&lo.to_le_bytes());
    bitpack::pack(ks.iter().map(|&k| k.abs_diff(lo)), ks.len(), bits, out);
    true
}

/// The values of a frame stored in the decimal form, read one at a time from its packed
/// integers without restoring the frame.
#[derive(Debug, Clone, Copy)]
pub struct Values<'a> {
    packed: &'a [u8],
    bits: u8,
    base: f64,
    p: f64,
    n: usize,
}

impl<'a> Values<'a> {
    /// The values of `stored`, a frame in the decimal form whose raw form is `raw_len` bytes;
    /// a header or length that does not fit is an error.
    pub fn new(stored: &'a [u8], raw_len: usize) -> Result<Values<'a>, String> {
        let head = stored.get(..HEADER).ok_or("decimal frame too short")?;
        let (scale, bits) = (head[0], head[1]);
        if scale > MAX_SCALE || bits > MAX_BITS || head[2..4] != [0, 0] {
            return Err(format!("decimal frame header ({scale}, {bits}) is invalid"));
        }
        if !raw_len.is_multiple_of(8) {
            return Err("decimal frame for a raw length not a multiple of 8".into());
        }
        let n = raw_len / 8;
        let packed = &stored[HEADER..];
        if packed.len() != bitpack::packed_len(n, bits) {
            return Err(format!(
                "decimal frame holds {} packed bytes for {n} values",
                packed.len()
            ));
        }
        let base = i64::from_le_bytes(head[4..12].try_into().map_err(|_| "decimal frame base")?);
        if base.unsigned_abs() > 1 << 53 {
            return Err(format!("decimal frame base {base} is out of range"));
        }
        Ok(Values { packed, bits, base: base as f64, p: pow10(scale), n })
    }

    /// The value from packed difference `d`: `base` and `d` are exact as `f64`, and so is
    /// their sum `k` (|k| <= 2^53 was checked when the frame was written); the division is
    /// the one the writer checked.
    #[inline]
    fn value(&self, d: u64) -> f64 {
        let two_52 = f64::from_bits(TWO_52);
        (self.base + (f64::from_bits(d | TWO_52) - two_52)) / self.p
    }

    /// Value `i` (its raw bytes are `8 i .. 8 i + 8` of the frame); `None` past the end.
    pub fn get(&self, i: usize) -> Option<f64> {
        (i < self.n).then(|| self.value(bitpack::get(self.packed, self.bits, i)))
    }
}

/// Restores a frame stored in the decimal form into `dst` (its raw bytes).
pub fn decode(stored: &[u8], dst: &mut [u8]) -> Result<(), String> {
    let v = Values::new(stored, dst.len())?;
    // Unpacked a run at a time, then converted in a loop the compiler vectorises.
    let mut run = [0u64; 256];
    for (r, out) in dst.chunks_mut(run.len() * 8).enumerate() {
        let m = out.len() / 8;
        bitpack::unpack_from(v.packed, v.bits, r * run.len(), m, |i, d| run[i] = d);
        for (o, &d) in out.chunks_exact_mut(8).zip(&run[..m]) {
            o.copy_from_slice(&v.value(d).to_le_bytes());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn bytes(values: &[f64]) -> Vec<u8> {
        values.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    fn round_trip(raw: &[u8]) -> Option<Vec<u8>> {
        let mut out = vec![0xEE];
        if !encode(raw, &mut out) {
            assert_eq!(out, [0xEE], "a refused frame appends nothing");
            return None;
        }
        let mut back = vec![0u8; raw.len()];
        decode(&out[1..], &mut back).unwrap();
        Some(back)
    }

    proptest! {
        /// Whatever bytes a frame holds, the decimal form is either refused or restores them
        /// exactly; decimals of up to nine fraction digits are taken.
        #[test]
        fn decimal_frames_restore_exactly(
            ks in prop::collection::vec(-1_000_000_000i64..1_000_000_000, 8..600),
            scale in 0u8..=MAX_SCALE,
            noise in prop::collection::vec(any::<u64>(), 0..3),
            at in any::<prop::sample::Index>(),
        ) {
            let p = pow10(scale);
            let mut values: Vec<f64> = ks.iter().map(|&k| k as f64 / p).collect();
            let raw = bytes(&values);
            let back = round_trip(&raw);
            // Hundredths of a small range pack to well under three quarters.
            if scale <= 2 && ks.iter().all(|k| k.abs() < 100_000) {
                prop_assert!(back.is_some());
            }
            if let Some(b) = back {
                prop_assert_eq!(b, raw);
            }
            // Arbitrary bit patterns (NaN, -0.0, subnormals, huge values) in the frame.
            for &x in &noise {
                let i = at.index(values.len());
                values[i] = f64::from_bits(x);
            }
            let raw = bytes(&values);
            if let Some(b) = round_trip(&raw) {
                prop_assert_eq!(b, raw);
            }
        }

        /// Random bytes (codes, integers) are refused or restored exactly.
        #[test]
        fn other_bytes_are_refused_or_exact(raw in prop::collection::vec(any::<u8>(), 0..800)) {
            if let Some(b) = round_trip(&raw) {
                prop_assert_eq!(b, raw);
            }
        }
    }

    #[test]
    fn what_is_taken_and_what_is_not() {
        let hundredths: Vec<f64> = (0..4096).map(|i| (i * 7919 % 10_001) as f64 / 100.0).collect();
        let mut out = Vec::new();
        assert!(encode(&bytes(&hundredths), &mut out));
        // 14 bits per value instead of 64.
        assert!(out.len() < 4096 * 2, "{}", out.len());
        for bad in [f64::NAN, f64::INFINITY, -0.0, 1e-300, 0.1 + 0.2, 1e300] {
            let mut v = hundredths.clone();
            v[100] = bad;
            assert!(!encode(&bytes(&v), &mut Vec::new()), "{bad}");
        }
        // Short frames and lengths that are not whole values are left alone.
        assert!(!encode(&bytes(&hundredths[..7]), &mut Vec::new()));
        assert!(!encode(&bytes(&hundredths)[..801], &mut Vec::new()));
        // Integers at the edge of exactness, of either sign, restore exactly; a spread that
        // needs more than 52 bits is refused.
        for sign in [1.0, -1.0] {
            let big: Vec<f64> = (0..64).map(|i| sign * ((1u64 << 53) - i * 3) as f64).collect();
            assert_eq!(round_trip(&bytes(&big)), Some(bytes(&big)));
        }
        let wide: Vec<f64> = (0..64).map(|i| if i % 2 == 0 { 4e15 } else { -4e15 }).collect();
        assert!(!encode(&bytes(&wide), &mut Vec::new()));
        // All zeros: no bits at all.
        let mut out = Vec::new();
        assert!(encode(&[0u8; 4096], &mut out));
        assert_eq!(out.len(), HEADER + 8);
    }

    #[test]
    fn damaged_headers_are_errors() {
        let raw = bytes(&(0..64).map(|i| i as f64 / 4.0).collect::<Vec<_>>());
        let mut out = Vec::new();
        assert!(encode(&raw, &mut out));
        let mut dst = vec![0u8; raw.len()];
        for (at, byte) in [(0, MAX_SCALE + 1), (1, MAX_BITS + 1), (2, 1)] {
            let mut bad = out.clone();
            bad[at] = byte;
            assert!(decode(&bad, &mut dst).is_err(), "byte {at}");
        }
        assert!(decode(&out[..out.len() - 1], &mut dst).is_err());
        assert!(decode(&out[..5], &mut dst).is_err());
        assert!(decode(&out, &mut dst[..raw.len() - 8 * 16]).is_err());
        assert!(decode(&out, &mut dst[..raw.len() - 3]).is_err());
    }
}
