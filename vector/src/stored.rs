//! The forms a `VECTOR(D)` column can store its components in ([`StoredForm`]), and the
//! rounding each applies when a row is written.
//!
//! - `Float32`: the values as given.
//! - `Float16`: each component rounded to the nearest IEEE half float (2 bytes). A finite
//!   component beyond ±65504 is refused rather than turned into an infinity; NaN and
//!   infinities stay what they are.
//! - `Int8`: each row gets its own step `s = 2^e` and offset `o = m·s`, and component `j`
//!   becomes the code `cⱼ` in −127..=127 with xⱼ = o + cⱼ·s (D bytes plus 8 per row).
//!   `e` is the smallest exponent at which the row's values, rounded to multiples of `s`
//!   (`nⱼ = round(xⱼ / s)`), span at most 254 steps, with every |nⱼ| < 2²⁴ and
//!   s ≥ 2⁻¹⁴⁹; `m = ⌊(n_min + n_max) / 2⌋` and `cⱼ = nⱼ − m`. Every value the codes stand
//!   for, `nⱼ·s`, is an `f32` computed without rounding, and quantising those values again
//!   gives the same values (they are multiples of `s`, fit at `e`, and at any smaller
//!   exponent they are exact multiples too) — so a row read back, written again or moved
//!   between the memtable and a segment never changes. Rows with NaN or infinite
//!   components are refused.
//!
//! Owns these roundings only; scanning the stored forms is [`crate::kernel`]'s.

use crate::kernel::{Isa, Rows};

/// How a vector column stores its components.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StoredForm {
    /// 4-byte floats, as given.
    #[default]
    Float32,
    /// IEEE half floats.
    Float16,
    /// Int8 codes with a power-of-two step and an offset per row.
    Int8,
}

impl StoredForm {
    /// The name SQL and schemas use: `float32`, `float16` or `int8`.
    pub fn name(self) -> &'static str {
        match self {
            StoredForm::Float32 => "float32",
            StoredForm::Float16 => "float16",
            StoredForm::Int8 => "int8",
        }
    }

    /// Parses a name (case-insensitive; `f32`, `f16`, `half` and `i8` are accepted too).
    pub fn parse(name: &str) -> Option<StoredForm> {
        match name.trim().to_ascii_lowercase().as_str() {
            "float32" | "f32" | "float" | "real" => Some(StoredForm::Float32),
            "float16" | "f16" | "half" => Some(StoredForm::Float16),
            "int8" | "i8" | "tinyint" => Some(StoredForm::Int8),
            _ => None,
        }
    }
}

/// Why a row cannot be stored in a form.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum RoundError {
    /// A component an int8 row cannot hold (NaN or infinite).
    #[error("component {index} is {value}; INT8 vectors hold finite numbers only")]
    NotFinite {
        /// Which component.
        index: usize,
        /// The value.
        value: f32,
    },
    /// A finite component beyond the form's range.
    #[error("component {index} is {value}, beyond the range of {form} vectors")]
    OutOfRange {
        /// Which component.
        index: usize,
        /// The value.
        value: f32,
        /// The form's name.
        form: &'static str,
    },
}

/// Rounds `row` in place to the values `form` stores (see the module docs).
pub fn round_row(form: StoredForm, row: &mut [f32]) -> Result<(), RoundError> {
    match form {
        StoredForm::Float32 => Ok(()),
        StoredForm::Float16 => {
            if let Some(index) = row.iter().position(|v| v.is_finite() && v.abs() > F16_MAX) {
                return Err(RoundError::OutOfRange { index, value: row[index], form: "FLOAT16" });
            }
            let isa = Isa::detect();
            let mut bits = [0u16; 64];
            for chunk in row.chunks_mut(64) {
                let bits = &mut bits[..chunk.len()];
                crate::kernel::to_f16(isa, chunk, bits);
                crate::kernel::from_f16(isa, bits, chunk);
            }
            Ok(())
        }
        StoredForm::Int8 => {
            let mut codes = vec![0i8; row.len()];
            let (scale, offset) = quantize_row(row, &mut codes)?;
            dequantize_row(&codes, scale, offset, row);
            Ok(())
        }
    }
}

/// Largest finite value that rounds to a finite half float (65504 plus just under half a
/// step of 32).
const F16_MAX: f32 = 65519.996;

/// Int8 codes of one row (see the module docs): fills `codes` and returns the row's
/// `(step, offset)`.
///
/// Panics if `codes` is shorter than `row` (a caller bug).
pub fn quantize_row(row: &[f32], codes: &mut [i8]) -> Result<(f32, f32), RoundError> {
    assert!(codes.len() >= row.len(), "codes too short");
    if let Some(index) = row.iter().position(|v| !v.is_finite()) {
        return Err(RoundError::NotFinite { index, value: row[index] });
    }
    let Some(&first) = row.first() else { return Ok((1.0, 0.0)) };
    // Compares (no NaN is left), so the loop runs several lanes at a time.
    let (mut lo, mut hi) = (first, first);
    for &v in row {
        lo = if v < lo { v } else { lo };
        hi = if v > hi { v } else { hi };
    }
    let (lo, hi) = (f64::from(lo), f64::from(hi));
    // Start a little below the smallest exponent that could fit and go up.
    let range = hi - lo;
    let mut e =
        if range > 0.0 { ((range / 254.0).log2().floor() as i32 - 1).max(-149) } else { -149 };
    // The largest magnitude also bounds the exponent from below (|n| < 2²⁴).
    let big = lo.abs().max(hi.abs());
    if big > 0.0 {
        e = e.max(big.log2().floor() as i32 - 24);
    }
    loop {
        let (s, inv) = (pow2(e), pow2(-e));
        // v / s exactly (a power of two), rounded half away from zero.
        let n = |v: f32| round_half_away(f64::from(v) * inv);
        let (n_lo, n_hi) = (n(lo as f32), n(hi as f32));
        let fits = n_hi - n_lo <= 254.0 && n_lo.abs() < 16_777_216.0 && n_hi.abs() < 16_777_216.0;
        if fits {
            let m = ((n_lo + n_hi) / 2.0).floor();
            let (scale, offset) = (s as f32, (m * s) as f32);
            // The largest value must stay finite as an f32 (rows near ±f32::MAX).
            let far = if n_hi.abs() >= n_lo.abs() { hi } else { lo };
            if n_hi.abs().max(n_lo.abs()) * s > f64::from(f32::MAX) {
                let index = row.iter().position(|v| f64::from(*v) == far).unwrap_or(0);
                return Err(RoundError::OutOfRange { index, value: far as f32, form: "INT8" });
            }
            // Every |v / s| < 2²⁴ + 1 here (the extremes fit): rounded through `i32`,
            // without branches, so the loop runs several lanes at a time.
            let m = m as i32;
            for (c, &v) in codes.iter_mut().zip(row) {
                let x = f64::from(v) * inv;
                let t = x as i32;
                let rest = x - f64::from(t);
                let n = t + i32::from(rest >= 0.5) - i32::from(rest <= -0.5);
                *c = (n - m) as i8;
            }
            return Ok((scale, offset));
        }
        e += 1;
    }
}

/// `x` rounded to the nearest integer, halves away from zero (for |x| < 2⁵³; a cast and a
/// compare, where `f64::round` is a library call on baseline x86-64).
fn round_half_away(x: f64) -> f64 {
    let t = x as i64 as f64;
    let rest = x - t;
    if rest >= 0.5 {
        t + 1.0
    } else if rest <= -0.5 {
        t - 1.0
    } else {
        t
    }
}

/// 2^e as an `f64` (exact for every exponent an `f32` step can have).
fn pow2(e: i32) -> f64 {
    2f64.powi(e)
}

/// The values a row of codes stands for: `offset + code·scale` (exact for codes made by
/// [`quantize_row`]).
pub fn dequantize_row(codes: &[i8], scale: f32, offset: f32, out: &mut [f32]) {
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = offset + f32::from(c) * scale;
    }
}

/// Rows of int8 codes with a step and offset each, as a column stores them.
#[derive(Debug, Clone, Copy)]
pub struct RowCodes<'a> {
    /// Row-major codes, `dim` per row.
    pub codes: &'a [i8],
    /// Per row, the step.
    pub scales: &'a [f32],
    /// Per row, the offset.
    pub offsets: &'a [f32],
    /// Per row, Σ xⱼ² of its values ([`crate::kernel::int8::squared_norm`]).
    pub norms: &'a [f32],
}

impl<'a> RowCodes<'a> {
    /// The rows as their values (exact sums: those of `f32` rows holding the values).
    pub fn rows(&self) -> Rows<'a> {
        self.with(false)
    }

    /// The rows for the integer kernel (approximate sums, for ranking candidates).
    pub fn ranking_rows(&self) -> Rows<'a> {
        self.with(true)
    }

    fn with(&self, integer: bool) -> Rows<'a> {
        Rows::I8Rows {
            integer,
            codes: self.codes,
            scales: self.scales,
            offsets: self.offsets,
            norms: self.norms,
        }
    }
}

/// Σ xⱼ² of each row of codes, for [`RowCodes::norms`].
pub fn row_norms(dim: usize, codes: &[i8], scales: &[f32], offsets: &[f32]) -> Vec<f32> {
    codes
        .chunks_exact(dim.max(1))
        .zip(scales.iter().zip(offsets))
        .map(|(row, (s, o))| crate::kernel::int8::squared_norm(row, *s, *o))
        .collect()
}

/// Half-float bit patterns of `values` (already rounded by [`round_row`], so exact).
pub fn to_half_bits(values: &[f32], out: &mut Vec<u16>) {
    let start = out.len();
    out.resize(start + values.len(), 0);
    crate::kernel::to_f16(Isa::detect(), values, &mut out[start..]);
}

/// The values of half-float bit patterns.
///
/// Panics if `out` is shorter than `bits` (a caller bug).
pub fn widen_half(bits: &[u16], out: &mut [f32]) {
    crate::kernel::from_f16(Isa::detect(), bits, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rounded(form: StoredForm, row: &[f32]) -> Vec<f32> {
        let mut r = row.to_vec();
        round_row(form, &mut r).unwrap();
        r
    }

    proptest! {
        /// Rounding twice gives what rounding once gave, bit for bit, and int8 values stay
        /// within half a step of the input.
        #[test]
        fn rounding_is_idempotent_and_close(
            row in proptest::collection::vec(prop_oneof![
                -1.0f32..1.0,
                -1e6f32..1e6,
                0.0f32..1e-30,
                Just(0.0f32),
                Just(1000.0f32),
            ], 1..70),
            shift in prop_oneof![Just(0.0f32), 1e3f32..1e7],
        ) {
            let row: Vec<f32> = row.iter().map(|v| v + shift).collect();
            for form in [StoredForm::Float16, StoredForm::Int8] {
                if form == StoredForm::Float16 && row.iter().any(|v| v.abs() > 65504.0) {
                    continue;
                }
                let once = rounded(form, &row);
                let twice = rounded(form, &once);
                prop_assert_eq!(
                    once.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    twice.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{:?}", form
                );
                if form == StoredForm::Int8 {
                    let mut codes = vec![0i8; row.len()];
                    let (s, _) = quantize_row(&row, &mut codes).unwrap();
                    let lo = row.iter().cloned().fold(f32::INFINITY, f32::min);
                    let hi = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                    // The step is the smallest power of two that fits (or the f32 grid).
                    prop_assert!(f64::from(s) <= ((f64::from(hi) - f64::from(lo)) / 126.0).max(
                        f64::from(lo.abs().max(hi.abs())) / 8_388_608.0).max(1.5e-45) * 1.0001);
                    for (a, b) in row.iter().zip(&once) {
                        prop_assert!((a - b).abs() <= s / 2.0, "{} -> {} (step {})", a, b, s);
                    }
                }
            }
        }
    }

    proptest! {
        /// The integer kernel over rows with their own steps stays within the queries'
        /// rounding of the exact sums over the values the rows stand for; both paths agree.
        #[test]
        fn integer_sums_over_per_row_codes_are_close(
            dim in 1usize..70,
            nrows in 1usize..9,
            data in proptest::collection::vec(-2.0f32..2.0, 9 * 70 + 2 * 70),
            scale_rows in proptest::collection::vec(0.01f32..100.0, 9),
        ) {
            use crate::kernel::{Block, Picks, QueryCodes, Sum, int8};
            let mut rows = data[..nrows * dim].to_vec();
            for (r, f) in rows.chunks_exact_mut(dim).zip(&scale_rows) {
                r.iter_mut().for_each(|v| *v *= f);
            }
            let queries = &data[9 * 70..9 * 70 + 2 * dim];
            let mut codes = vec![0i8; rows.len()];
            let (mut scales, mut offsets) = (Vec::new(), Vec::new());
            for (r, c) in rows.chunks_exact(dim).zip(codes.chunks_exact_mut(dim)) {
                let (s, o) = quantize_row(r, c).unwrap();
                scales.push(s);
                offsets.push(o);
            }
            let norms = row_norms(dim, &codes, &scales, &offsets);
            let rc = RowCodes { codes: &codes, scales: &scales, offsets: &offsets, norms: &norms };
            let mut back = vec![0f32; rows.len()];
            for (r, o) in back.chunks_exact_mut(dim).enumerate() {
                dequantize_row(&codes[r * dim..(r + 1) * dim], scales[r], offsets[r], o);
            }
            let qc = QueryCodes::new(dim, queries);
            for sum in [Sum::Products, Sum::DiffSquares] {
                let mut got = Vec::new();
                for isa in [Isa::detect(), Isa::detect().without_vnni(), Isa::portable()] {
                    let mut out = vec![0f32; nrows * 2];
                    let block = int8::Codes::of(rc.ranking_rows()).unwrap();
                    int8::sums(isa, sum, block, Picks::All(nrows), &qc, &mut out, None);
                    got.push(out);
                }
                prop_assert_eq!(&got[0], &got[2]);
                prop_assert_eq!(&got[1], &got[2]);
                let mut exact = vec![0f32; nrows * 2];
                let b = Block { dim, rows: Rows::F32(&back), picks: Picks::All(nrows) };
                crate::kernel::sums(Isa::portable(), sum, b, queries, &mut exact, None);
                // Read as their values, the rows sum bit for bit like f32 rows holding them
                // (norms too), on both paths, for any picks.
                let picks: Vec<u32> = (0..nrows as u32).rev().step_by(2).collect();
                for isa in [Isa::detect(), Isa::portable()] {
                    for p in [Picks::All(nrows), Picks::Some(&picks)] {
                        let (mut a, mut b) = (vec![0f32; nrows * 2], vec![0f32; nrows * 2]);
                        let (mut na, mut nb) = (vec![0f32; nrows], vec![0f32; nrows]);
                        let wide = Block { dim, rows: rc.rows(), picks: p };
                        crate::kernel::sums(isa, sum, wide, queries, &mut a, Some(&mut na));
                        let plain = Block { dim, rows: Rows::F32(&back), picks: p };
                        crate::kernel::sums(isa, sum, plain, queries, &mut b, Some(&mut nb));
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        prop_assert_eq!(bits(&a), bits(&b));
                        prop_assert_eq!(bits(&na), bits(&nb));
                    }
                }
                for (i, (g, e)) in got[0].iter().zip(&exact).enumerate() {
                    let r = i / 2;
                    let x = &back[r * dim..(r + 1) * dim];
                    let t = queries[(i % 2) * dim..(i % 2 + 1) * dim].iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
                    let bound = x.iter().map(|v| v.abs()).sum::<f32>() * t / 2.0 * 2.0;
                    prop_assert!((g - e).abs() <= bound + 1e-3 * (1.0 + e.abs()), "{:?} {}: {} vs {}", sum, i, g, e);
                }
            }
        }
    }

    #[test]
    fn bad_components_are_refused() {
        let mut r = vec![1.0, f32::NAN];
        assert_eq!(
            round_row(StoredForm::Int8, &mut r).unwrap_err().to_string(),
            "component 1 is NaN; INT8 vectors hold finite numbers only"
        );
        let mut r = vec![70_000.0, 1.0];
        assert!(matches!(
            round_row(StoredForm::Float16, &mut r),
            Err(RoundError::OutOfRange { index: 0, .. })
        ));
        // NaN and infinities stay what they are as half floats.
        let mut r = vec![f32::NAN, f32::INFINITY, 0.1];
        round_row(StoredForm::Float16, &mut r).unwrap();
        assert!(
            r[0].is_nan() && r[1] == f32::INFINITY && r[2] == half::f16::from_f32(0.1).to_f32()
        );
        let mut r = vec![f32::MAX, -f32::MAX];
        assert!(round_row(StoredForm::Int8, &mut r).is_err() || r.iter().all(|v| v.is_finite()));
        // Constant, zero and one-component rows are exact.
        for row in [vec![3.25f32; 5], vec![0.0; 4], vec![-7.5]] {
            assert_eq!(rounded(StoredForm::Int8, &row), row);
        }
        // The largest values that still round to a finite half float, and the first not.
        let mut r = vec![65519.0, -65519.0, 65504.0];
        round_row(StoredForm::Float16, &mut r).unwrap();
        assert_eq!(r, vec![65504.0, -65504.0, 65504.0]);
        assert!(round_row(StoredForm::Float16, &mut [65520.0]).is_err());
        // Every half float widens to the same value on both paths.
        let bits: Vec<u16> = (0..=u16::MAX).collect();
        let (mut a, mut b) = (vec![0f32; bits.len()], vec![0f32; bits.len()]);
        crate::kernel::from_f16(Isa::detect(), &bits, &mut a);
        crate::kernel::from_f16(Isa::portable(), &bits, &mut b);
        assert!(
            a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        );
        assert_eq!(StoredForm::parse(" INT8 "), Some(StoredForm::Int8));
        assert_eq!(StoredForm::parse("half"), Some(StoredForm::Float16));
        assert_eq!(StoredForm::parse("int4"), None);
    }
}
