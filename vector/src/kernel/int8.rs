//! Sums of int8 rows with int8 queries, in integers.
//!
//! Rows stored as int8 codes (xⱼ = cⱼ·s + o, one scale `s` and offset `o` per block) are
//! compared with the queries quantised the same way ([`QueryCodes`]: qⱼ ≈ q̂ⱼ·t, one scale
//! `t` per query, no offset). Every integer sum is exact — Σ cⱼ·q̂ⱼ, and per row Σ cⱼ and
//! Σ cⱼ² — and they combine in `f64`:
//!
//! - Σ xⱼ·qⱼ ≈ s·t·Σ cⱼ·q̂ⱼ + o·Σ qⱼ (Σ qⱼ of the `f32` query; the only error is the
//!   query's rounding, at most s·(t/2)·Σ |cⱼ|);
//! - Σ xⱼ² = s²·Σ cⱼ² + 2·s·o·Σ cⱼ + D·o² (exact up to the `f64` rounding);
//! - Σ (xⱼ − qⱼ)² = Σ xⱼ² − 2·Σ xⱼ·qⱼ + Σ qⱼ² (clamped at 0).
//!
//! With AVX-VNNI (detected at run time) 32 codes of a row meet 32 codes of a query in one
//! `vpdpbusd` (unsigned × signed bytes, four products per 32-bit lane): the row's codes are
//! made unsigned by flipping their sign bit (uⱼ = cⱼ + 128) and the excess, 128·Σ q̂ⱼ, is
//! taken off after. Σ cⱼ and Σ cⱼ² come from the same instruction against ones and against
//! the codes themselves. Elsewhere a scalar loop computes the same integers, so both paths
//! return identical sums.
//!
//! Owns the arithmetic only, like its parent.

use super::{Isa, Picks, Sum};

/// Queries quantised for the integer kernel.
#[derive(Debug, Clone)]
pub struct QueryCodes {
    dim: usize,
    /// Row-major `count × dim` codes in −127..=127.
    codes: Vec<i8>,
    /// Per query: the step `t` between codes.
    scale: Vec<f64>,
    /// Per query: Σ q̂ⱼ.
    code_sums: Vec<i64>,
    /// Per query: Σ qⱼ of the `f32` query.
    sums: Vec<f64>,
    /// Per query: Σ qⱼ² of the `f32` query.
    squares: Vec<f64>,
}

impl QueryCodes {
    /// Quantises `queries` (row-major, `dim` columns, finite components): each query's
    /// largest magnitude becomes code ±127, rounding to nearest. A zero query gets zero
    /// codes.
    pub fn new(dim: usize, queries: &[f32]) -> QueryCodes {
        assert!(dim > 0 && queries.len().is_multiple_of(dim), "queries are not whole vectors");
        let nq = queries.len() / dim;
        let mut out = QueryCodes {
            dim,
            codes: Vec::with_capacity(queries.len()),
            scale: Vec::with_capacity(nq),
            code_sums: Vec::with_capacity(nq),
            sums: Vec::with_capacity(nq),
            squares: Vec::with_capacity(nq),
        };
        for q in queries.chunks_exact(dim) {
            let max = q.iter().fold(0f32, |m, v| m.max(v.abs()));
            let t = if max > 0.0 { f64::from(max) / 127.0 } else { 1.0 };
            let mut code_sum = 0i64;
            for v in q {
                let c = (f64::from(*v) / t).round().clamp(-127.0, 127.0) as i8;
                code_sum += i64::from(c);
                out.codes.push(c);
            }
            out.scale.push(t);
            out.code_sums.push(code_sum);
            out.sums.push(q.iter().map(|v| f64::from(*v)).sum());
            out.squares.push(q.iter().map(|v| f64::from(*v) * f64::from(*v)).sum());
        }
        out
    }

    /// How many queries.
    pub fn len(&self) -> usize {
        self.scale.len()
    }

    /// Never true for queries from a validated set; true when built from no queries.
    pub fn is_empty(&self) -> bool {
        self.scale.is_empty()
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
}

/// Exact integer sums of one row: Σ uⱼ·q̂ⱼ per query (uⱼ = cⱼ + 128), Σ uⱼ and Σ uⱼ·cⱼ.
struct RowSums<const Q: usize> {
    dots: [i64; Q],
    ones: i64,
    own: i64,
}

/// Fills `out[i * nq + q]` with the `sum` of picked row `i` (codes `codes`, row-major with
/// `queries.dim()` columns, xⱼ = cⱼ·scale + offset) and query `q`, and `norms[i]` (when
/// given) with Σ xⱼ² of the row — see the module docs for how they are computed.
///
/// Panics if a pick is outside `codes` or an output is too short (caller bugs).
#[allow(clippy::too_many_arguments)]
pub fn sums(
    isa: Isa,
    sum: Sum,
    codes: &[i8],
    (scale, offset): (f32, f32),
    picks: Picks<'_>,
    queries: &QueryCodes,
    out: &mut [f32],
    mut norms: Option<&mut [f32]>,
) {
    let (dim, nq) = (queries.dim, queries.len());
    assert!(nq > 0, "no queries");
    assert!(out.len() >= picks.len() * nq, "output too short");
    assert!(norms.as_ref().is_none_or(|n| n.len() >= picks.len()), "norms too short");
    if let Some(last) = (0..picks.len()).map(|i| picks.get(i)).max() {
        assert!((last + 1) * dim <= codes.len(), "pick outside the block");
    }
    let stats = sum == Sum::DiffSquares || norms.is_some();
    let (s, o) = (f64::from(scale), f64::from(offset));
    let d = dim as i64;
    // Turns one row's raw sums into the caller's values.
    let mut emit = |i: usize, q0: usize, dots: &[i64], ones: i64, own: i64| {
        let c1 = ones - 128 * d;
        let c2 = own - 128 * c1;
        let xx = s * s * c2 as f64 + 2.0 * s * o * c1 as f64 + dim as f64 * o * o;
        if q0 == 0
            && let Some(n) = norms.as_deref_mut()
        {
            n[i] = xx as f32;
        }
        for (k, raw) in dots.iter().enumerate() {
            let q = q0 + k;
            let dot = raw - 128 * queries.code_sums[q];
            let xq = s * queries.scale[q] * dot as f64 + o * queries.sums[q];
            out[i * nq + q] = match sum {
                Sum::Products => xq as f32,
                Sum::DiffSquares => (xx - 2.0 * xq + queries.squares[q]).max(0.0) as f32,
            };
        }
    };
    #[cfg(target_arch = "x86_64")]
    if isa.vnni {
        // SAFETY: `isa.vnni` is only set by `Isa::detect` after the CPU reported AVX2 and
        // AVX-VNNI; every pick indexes a whole row inside `codes` (asserted above) and
        // every query a whole row of `queries.codes`.
        unsafe { vnni::walk(dim, codes, picks, queries, stats, &mut emit) };
        return;
    }
    let _ = isa;
    for i in 0..picks.len() {
        let row = &codes[picks.get(i) * dim..(picks.get(i) + 1) * dim];
        let (mut ones, mut own) = (0i64, 0i64);
        if stats {
            for &c in row {
                let u = i64::from(c) + 128;
                ones += u;
                own += u * i64::from(c);
            }
        }
        let dots: Vec<i64> = queries
            .codes
            .chunks_exact(dim)
            .map(|y| row.iter().zip(y).map(|(&c, &q)| (i64::from(c) + 128) * i64::from(q)).sum())
            .collect();
        emit(i, 0, &dots, ones, own);
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{Picks, QueryCodes, RowSums};

    /// Codes summed into 32-bit lanes before they are added into 64 bits: each lane gains
    /// at most 4·255·128 per 32 codes, so 2¹⁸ codes stay below 2³¹.
    const SPAN: usize = 1 << 18;

    /// How far ahead (in rows) a contiguous block is prefetched.
    const PREFETCH_ROWS: usize = 16;

    /// Every picked row against every query: `emit(i, q0, dots, ones, own)` receives row
    /// `i`'s raw sums with queries `q0..q0 + dots.len()` and, with `stats`, its Σ uⱼ and
    /// Σ uⱼ·cⱼ (zeros otherwise).
    ///
    /// # Safety
    /// AVX2 and AVX-VNNI must be available; every pick must index a whole row of `codes`.
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn walk(
        dim: usize,
        codes: &[i8],
        picks: Picks<'_>,
        queries: &QueryCodes,
        stats: bool,
        emit: &mut impl FnMut(usize, usize, &[i64], i64, i64),
    ) {
        let nq = queries.len();
        let (rp, qp) = (codes.as_ptr(), queries.codes.as_ptr());
        let n = picks.len();
        let mut i = 0;
        while i + 4 <= n {
            // SAFETY: picks index whole rows inside `codes` (the caller's guarantee).
            let r = unsafe {
                [
                    rp.add(picks.get(i) * dim),
                    rp.add(picks.get(i + 1) * dim),
                    rp.add(picks.get(i + 2) * dim),
                    rp.add(picks.get(i + 3) * dim),
                ]
            };
            if let Picks::All(_) = picks
                && i + 4 + PREFETCH_ROWS <= n
            {
                // SAFETY: rows up to `n` are inside `codes`; prefetching never faults.
                let ahead = unsafe { rp.add((i + PREFETCH_ROWS) * dim) };
                let mut off = 0;
                while off < 4 * dim {
                    // SAFETY: as above.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.add(off)) };
                    off += 64;
                }
            }
            let mut q = 0;
            let mut own = [(0i64, 0i64); 4];
            if stats {
                // Query 0 with the rows' own sums, two rows at a time (registers).
                for h in [0, 2] {
                    // SAFETY: both rows and query 0 address `dim` codes.
                    let t = unsafe { tile::<2, 1, true>(dim, [r[h], r[h + 1]], [qp]) };
                    for (a, s) in t.iter().enumerate() {
                        own[h + a] = (s.ones, s.own);
                        emit(i + h + a, 0, &s.dots, s.ones, s.own);
                    }
                }
                q = 1;
            }
            while q + 2 <= nq {
                // SAFETY: queries q and q + 1 exist; every pointer addresses `dim` codes.
                let t = unsafe {
                    tile::<4, 2, false>(dim, r, [qp.add(q * dim), qp.add((q + 1) * dim)])
                };
                for (a, s) in t.iter().enumerate() {
                    emit(i + a, q, &s.dots, own[a].0, own[a].1);
                }
                q += 2;
            }
            if q < nq {
                // SAFETY: query q exists.
                let t = unsafe { tile::<4, 1, false>(dim, r, [qp.add(q * dim)]) };
                for (a, s) in t.iter().enumerate() {
                    emit(i + a, q, &s.dots, own[a].0, own[a].1);
                }
            }
            i += 4;
        }
        while i < n {
            // SAFETY: the pick indexes a whole row inside `codes`.
            let r = unsafe { [rp.add(picks.get(i) * dim)] };
            let mut own = (0, 0);
            for q in 0..nq {
                // SAFETY: query q exists; both pointers address `dim` codes.
                let t = unsafe {
                    if stats && q == 0 {
                        tile::<1, 1, true>(dim, r, [qp])
                    } else {
                        tile::<1, 1, false>(dim, r, [qp.add(q * dim)])
                    }
                };
                if stats && q == 0 {
                    own = (t[0].ones, t[0].own);
                }
                emit(i, q, &t[0].dots, own.0, own.1);
            }
            i += 1;
        }
    }

    /// R rows × Q queries: the raw sums of each pair (and with `STATS`, of each row with
    /// ones and with itself); the tail past the last multiple of 32 is summed one code at a
    /// time.
    ///
    /// # Safety
    /// AVX2 and AVX-VNNI must be available; every pointer must address `dim` codes.
    #[inline(always)]
    unsafe fn tile<const R: usize, const Q: usize, const STATS: bool>(
        dim: usize,
        rows: [*const i8; R],
        qs: [*const i8; Q],
    ) -> [RowSums<Q>; R] {
        // SAFETY: the caller guarantees the CPU features and that every pointer reads `dim`
        // codes; vector loads stay below `body <= dim`, the tail below `dim`.
        unsafe {
            let flip = _mm256_set1_epi8(i8::MIN);
            let one = _mm256_set1_epi8(1);
            let mut res = [const { RowSums { dots: [0i64; Q], ones: 0, own: 0 } }; R];
            let body = dim - dim % 32;
            let mut j = 0;
            while j < body {
                let end = (j + SPAN).min(body);
                let mut acc = [[_mm256_setzero_si256(); Q]; R];
                let mut ones = [_mm256_setzero_si256(); R];
                let mut own = [_mm256_setzero_si256(); R];
                while j < end {
                    let mut u = [_mm256_setzero_si256(); R];
                    for r in 0..R {
                        let c = _mm256_loadu_si256(rows[r].add(j).cast());
                        u[r] = _mm256_xor_si256(c, flip);
                        if STATS {
                            ones[r] = _mm256_dpbusd_avx_epi32(ones[r], u[r], one);
                            own[r] = _mm256_dpbusd_avx_epi32(own[r], u[r], c);
                        }
                    }
                    for q in 0..Q {
                        let y = _mm256_loadu_si256(qs[q].add(j).cast());
                        for r in 0..R {
                            acc[r][q] = _mm256_dpbusd_avx_epi32(acc[r][q], u[r], y);
                        }
                    }
                    j += 32;
                }
                for r in 0..R {
                    for (d, a) in res[r].dots.iter_mut().zip(&acc[r]) {
                        *d += hsum(*a);
                    }
                    if STATS {
                        res[r].ones += hsum(ones[r]);
                        res[r].own += hsum(own[r]);
                    }
                }
            }
            for t in body..dim {
                for r in 0..R {
                    let c = i64::from(*rows[r].add(t));
                    let u = c + 128;
                    for (d, q) in res[r].dots.iter_mut().zip(&qs) {
                        *d += u * i64::from(*q.add(t));
                    }
                    if STATS {
                        res[r].ones += u;
                        res[r].own += u * c;
                    }
                }
            }
            res
        }
    }

    /// The eight 32-bit lanes of `v`, added in 64 bits.
    #[inline(always)]
    fn hsum(v: __m256i) -> i64 {
        let mut l = [0i32; 8];
        // SAFETY: `l` holds 32 writable bytes; AVX is implied by the callers' features.
        unsafe { _mm256_storeu_si256(l.as_mut_ptr().cast(), v) };
        l.iter().map(|&x| i64::from(x)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{Quantization, Quantized};
    use proptest::prelude::*;

    /// The module's formulas evaluated from scratch in `f64` / `i64`, one pair at a time.
    fn reference(sum: Sum, x: &[i8], (s, o): (f32, f32), q: &[f32]) -> (f64, f64) {
        let qc = QueryCodes::new(q.len(), q);
        let (s, o, t) = (f64::from(s), f64::from(o), qc.scale[0]);
        let dot: i64 = x.iter().zip(&qc.codes).map(|(&c, &y)| i64::from(c) * i64::from(y)).sum();
        let c1: i64 = x.iter().map(|&c| i64::from(c)).sum();
        let c2: i64 = x.iter().map(|&c| i64::from(c) * i64::from(c)).sum();
        let xq = s * t * dot as f64 + o * qc.sums[0];
        let xx = s * s * c2 as f64 + 2.0 * s * o * c1 as f64 + x.len() as f64 * o * o;
        let v = match sum {
            Sum::Products => xq,
            Sum::DiffSquares => (xx - 2.0 * xq + qc.squares[0]).max(0.0),
        };
        (v, xx)
    }

    proptest! {
        /// Both paths give the reference's values bit for bit, whatever the tile shape, and
        /// they stay within the query's rounding of the dequantised rows' exact sums.
        #[test]
        fn integer_sums_match_the_reference_and_the_dequantised_rows(
            dim in 1usize..80,
            nrows in 1usize..11,
            nq in 1usize..5,
            data in proptest::collection::vec(-3.0f32..3.0, 10 * 80 + 4 * 80),
            picks in proptest::collection::vec(0u32..10, 0..14),
        ) {
            let rows = &data[..nrows * dim];
            let queries = &data[10 * 80..10 * 80 + nq * dim];
            let picks: Vec<u32> = picks.into_iter().filter(|p| (*p as usize) < nrows).collect();
            let Quantized::Int8 { codes, scale, offset } = Quantized::encode(Quantization::Int8, rows) else {
                unreachable!()
            };
            let qc = QueryCodes::new(dim, queries);
            for sum in [Sum::DiffSquares, Sum::Products] {
                for isa in [Isa::detect(), Isa::portable()] {
                    let mut out = vec![0f32; picks.len() * nq];
                    let mut norms = vec![0f32; picks.len()];
                    let p = Picks::Some(&picks);
                    sums(isa, sum, &codes, (scale, offset), p, &qc, &mut out, Some(&mut norms));
                    let mut plain = vec![0f32; picks.len() * nq];
                    sums(isa, sum, &codes, (scale, offset), p, &qc, &mut plain, None);
                    prop_assert_eq!(&out, &plain, "sums with and without norms");
                    for (i, &r) in picks.iter().enumerate() {
                        let x = &codes[r as usize * dim..(r as usize + 1) * dim];
                        let back: Vec<f64> = x.iter().map(|&c| f64::from(c) * f64::from(scale) + f64::from(offset)).collect();
                        for q in 0..nq {
                            let y = &queries[q * dim..(q + 1) * dim];
                            let (want, xx) = reference(sum, x, (scale, offset), y);
                            prop_assert_eq!(out[i * nq + q], want as f32, "{:?} row {} query {}", sum, r, q);
                            prop_assert_eq!(norms[i], xx as f32);
                            // Against the dequantised row and the f32 query: only the
                            // query's rounding (half a step per code) separates them.
                            let exact: f64 = match sum {
                                Sum::Products => back.iter().zip(y).map(|(a, b)| a * f64::from(*b)).sum(),
                                Sum::DiffSquares => back.iter().zip(y).map(|(a, b)| (a - f64::from(*b)).powi(2)).sum(),
                            };
                            let t = qc.scale[q];
                            let step: f64 = x.iter().map(|&c| f64::from(c).abs()).sum::<f64>() * f64::from(scale) * t / 2.0;
                            let bound = match sum { Sum::Products => step, Sum::DiffSquares => 2.0 * step };
                            prop_assert!((f64::from(out[i * nq + q]) - exact).abs() <= bound + 1e-4 * (1.0 + exact.abs()),
                                "{:?}: {} vs {} (bound {})", sum, out[i * nq + q], exact, bound);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn long_rows_do_not_overflow_the_lanes() {
        // Every code at the extremes over more than one span.
        let dim = (1 << 18) + 40;
        let codes: Vec<i8> = (0..2 * dim).map(|i| if i % 2 == 0 { -127 } else { 127 }).collect();
        let q: Vec<f32> = (0..dim).map(|i| if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
        let qc = QueryCodes::new(dim, &q);
        let mut a = [0f32; 2];
        let mut b = [0f32; 2];
        let (mut na, mut nb) = ([0f32; 2], [0f32; 2]);
        sums(
            Isa::detect(),
            Sum::DiffSquares,
            &codes,
            (1.0, 0.0),
            Picks::All(2),
            &qc,
            &mut a,
            Some(&mut na),
        );
        sums(
            Isa::portable(),
            Sum::DiffSquares,
            &codes,
            (1.0, 0.0),
            Picks::All(2),
            &qc,
            &mut b,
            Some(&mut nb),
        );
        assert_eq!((a, na), (b, nb));
        assert_eq!(na[0], (127.0f64 * 127.0 * dim as f64) as f32);
        let (want, _) = reference(Sum::DiffSquares, &codes[..dim], (1.0, 0.0), &q);
        assert_eq!(a[0], want as f32);
    }

    #[test]
    fn a_zero_query_has_zero_codes() {
        let qc = QueryCodes::new(3, &[0.0, 0.0, 0.0, 1.0, -0.5, 0.25]);
        assert_eq!(qc.codes, vec![0, 0, 0, 127, -64, 32]);
        assert_eq!(qc.code_sums, vec![0, 95]);
        assert_eq!(qc.len(), 2);
    }
}
