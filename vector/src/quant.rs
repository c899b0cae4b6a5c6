//! Quantised copies of `f32` rows for approximate scans: IEEE half floats (2 bytes per
//! component) or int8 codes with one scale and offset per block (1 byte per component,
//! plus each row's squared norm).
//! A scan over a copy reads half or a quarter of the bytes; its candidates are then rescored
//! exactly on the `f32` rows (storage does that), so the distances returned stay exact and
//! only recall can suffer.
//!
//! Owns the encodings and the [`Precision`] a search asks for; must not scan or keep heaps.

use crate::kernel::{Isa, Rows};

/// How precisely a search compares vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// Every candidate's exact `f32` distance.
    #[default]
    Exact,
    /// Scan a half-float copy; rescore the best `k × oversample` rows of each block exactly.
    Float16 {
        /// Candidates kept per block, as a multiple of `k` (at least 1).
        oversample: usize,
    },
    /// Scan an int8 copy; rescore the best `k × oversample` rows of each block exactly.
    Int8 {
        /// Candidates kept per block, as a multiple of `k` (at least 1).
        oversample: usize,
    },
}

impl Precision {
    /// The quantisation it scans, if any.
    pub fn quantization(self) -> Option<Quantization> {
        match self {
            Precision::Exact => None,
            Precision::Float16 { .. } => Some(Quantization::Float16),
            Precision::Int8 { .. } => Some(Quantization::Int8),
        }
    }

    /// Candidates kept per block for a top-`k` (`k` when exact).
    pub fn candidates(self, k: usize) -> usize {
        match self {
            Precision::Exact => k,
            Precision::Float16 { oversample } | Precision::Int8 { oversample } => {
                k.saturating_mul(oversample.max(1))
            }
        }
    }
}

/// A quantised encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Quantization {
    /// IEEE 754 half floats.
    Float16,
    /// Int8 codes, one scale and offset per block.
    Int8,
}

/// A block of rows, quantised.
#[derive(Debug, Clone)]
pub enum Quantized {
    /// Half-float bit patterns.
    Float16(Vec<u16>),
    /// Codes with x ≈ code · scale + offset.
    Int8 {
        /// The codes.
        codes: Vec<i8>,
        /// Step between codes.
        scale: f32,
        /// Value of code 0.
        offset: f32,
        /// Per row, Σ xⱼ² of its dequantised values (see [`crate::kernel::int8`]).
        norms: Vec<f32>,
    },
}

impl Quantized {
    /// Quantises row-major `f32` values, `dim` per row. Int8 spreads the block's finite
    /// range over codes −127..=127 (NaN becomes the middle code, infinities the ends) and
    /// keeps each row's squared norm; half floats round to nearest (values beyond ±65504
    /// become infinite).
    ///
    /// Panics if `dim` is 0 or `values` is not whole rows (caller bugs).
    pub fn encode(kind: Quantization, values: &[f32], dim: usize) -> Quantized {
        assert!(dim > 0 && values.len().is_multiple_of(dim), "values are not whole rows");
        match kind {
            Quantization::Float16 => {
                let mut h = vec![0u16; values.len()];
                crate::kernel::to_f16(Isa::detect(), values, &mut h);
                Quantized::Float16(h)
            }
            Quantization::Int8 => {
                let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
                for v in values.iter().filter(|v| v.is_finite()) {
                    lo = lo.min(*v);
                    hi = hi.max(*v);
                }
                if lo > hi {
                    (lo, hi) = (0.0, 0.0);
                }
                let offset = lo / 2.0 + hi / 2.0;
                let scale = if hi > lo { (hi / 2.0 - lo / 2.0) / 127.0 } else { 1.0 };
                let mut codes = vec![0i8; values.len()];
                crate::kernel::to_i8(Isa::detect(), values, offset, scale, &mut codes);
                let norms = codes
                    .chunks_exact(dim)
                    .map(|row| crate::kernel::int8::squared_norm(row, scale, offset))
                    .collect();
                Quantized::Int8 { codes, scale, offset, norms }
            }
        }
    }

    /// The rows, for the kernel.
    pub fn rows(&self) -> Rows<'_> {
        match self {
            Quantized::Float16(v) => Rows::F16(v),
            Quantized::Int8 { codes, scale, offset, norms } => {
                Rows::I8 { codes, scale: *scale, offset: *offset, norms }
            }
        }
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        match self {
            Quantized::Float16(v) => v.len() * 2,
            Quantized::Int8 { codes, norms, .. } => codes.len() + 4 * norms.len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::{Block, Isa, Picks, Sum, sums};
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn quantised_values_stay_within_half_a_step(
            values in proptest::collection::vec(-100.0f32..100.0, 1..300),
        ) {
            let Quantized::Int8 { codes, scale, offset, .. } = Quantized::encode(Quantization::Int8, &values, 1) else {
                unreachable!()
            };
            for (v, c) in values.iter().zip(&codes) {
                let back = f32::from(*c) * scale + offset;
                prop_assert!((back - v).abs() <= scale * 0.5 + 1e-4 * v.abs().max(1.0), "{v} -> {c} -> {back}");
            }
            let Quantized::Float16(h) = Quantized::encode(Quantization::Float16, &values, 1) else { unreachable!() };
            for (v, b) in values.iter().zip(&h) {
                let back = half::f16::from_bits(*b).to_f32();
                prop_assert!((back - v).abs() <= v.abs() * 1e-3 + 1e-4, "{v} -> {back}");
            }
        }

        /// Half-float rows are widened and summed like `f32` rows. (Int8 rows meet quantised
        /// queries: `kernel::int8`'s tests bound their sums against the dequantised rows.)
        #[test]
        fn the_kernel_reads_half_float_rows_as_their_values(
            dim in 1usize..40,
            data in proptest::collection::vec(-3.0f32..3.0, 5 * 40 + 40),
        ) {
            let rows = &data[..5 * dim];
            let q = &data[200..200 + dim];
            for kind in [Quantization::Float16] {
                let z = Quantized::encode(kind, rows, dim);
                let Quantized::Float16(h) = &z else { unreachable!() };
                let back: Vec<f32> = h.iter().map(|b| half::f16::from_bits(*b).to_f32()).collect();
                for isa in [Isa::detect(), Isa::portable()] {
                    for sum in [Sum::DiffSquares, Sum::Products] {
                        let mut got = [0f32; 5];
                        let mut want = [0f32; 5];
                        sums(isa, sum, Block { dim, rows: z.rows(), picks: Picks::All(5) }, q, &mut got, None);
                        sums(isa, sum, Block { dim, rows: Rows::F32(&back), picks: Picks::All(5) }, q, &mut want, None);
                        for (g, w) in got.iter().zip(&want) {
                            prop_assert!((g - w).abs() <= 1e-3 * (1.0 + w.abs()), "{kind:?} {sum:?}: {g} vs {w}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn constant_and_non_finite_blocks_encode() {
        let z = Quantized::encode(Quantization::Int8, &[2.0, 2.0, f32::NAN, f32::INFINITY], 2);
        let Quantized::Int8 { codes, scale, offset, norms } = z else { unreachable!() };
        assert_eq!((scale, offset), (1.0, 2.0));
        assert_eq!(codes, vec![0, 0, 0, 127]);
        // Rows (2, 2) and (2, 129) as the codes stand for them.
        assert_eq!(norms, vec![8.0, 4.0 + 129.0 * 129.0]);
        assert_eq!(Quantized::encode(Quantization::Int8, &[], 3).bytes(), 0);
        assert_eq!(Precision::Int8 { oversample: 0 }.candidates(10), 10);
        assert_eq!(Precision::Exact.candidates(10), 10);
    }
}
