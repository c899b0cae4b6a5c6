//! The top-k scan's kernel: for a chunk of candidate rows and a set of queries, every
//! (row, query) sum — Σ (xᵢ − qᵢ)² or Σ xᵢ·qᵢ — plus the rows' squared norms.
//!
//! On x86-64 with AVX2 and FMA (detected at run time, once) rows are taken 4 at a time and
//! queries 2 at a time: 8 accumulators stay in registers and each row element loaded feeds
//! every query of the tile, so a batch of queries reads each row once. Elsewhere a portable
//! loop with 8 independent lanes per pair runs. Every pair has its own accumulator and sees
//! the same operations in the same order whatever the tile shape, so one query alone and
//! the same query inside a batch get identical sums.
//!
//! This module owns arithmetic only: no heaps, no metric semantics (see [`crate::topk`]).

/// Which sum a pass computes for each (row, query) pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sum {
    /// Σ (xᵢ − qᵢ)².
    DiffSquares,
    /// Σ xᵢ·qᵢ.
    Products,
}

/// The instruction set chosen for this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX2 + FMA on x86-64.
    Avx2Fma,
    /// Portable Rust.
    Portable,
}

impl Isa {
    /// The best instruction set this CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2Fma;
            }
        }
        Isa::Portable
    }
}

/// Which rows of a block a pass covers: the first `n`, or the listed row indices.
#[derive(Debug, Clone, Copy)]
pub enum Picks<'a> {
    /// Rows `0..n`.
    All(usize),
    /// These rows, in this order.
    Some(&'a [u32]),
}

impl Picks<'_> {
    /// How many rows.
    pub fn len(&self) -> usize {
        match self {
            Picks::All(n) => *n,
            Picks::Some(s) => s.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `i`-th row index.
    #[inline(always)]
    pub fn get(&self, i: usize) -> usize {
        match self {
            Picks::All(_) => i,
            Picks::Some(s) => s[i] as usize,
        }
    }
}

/// Fills `out[i * nq + q]` with the `sum` of picked row `i` (of `rows`, row-major with
/// `dim` columns) and query `q` (of `queries`, `nq = queries.len() / dim` of them).
///
/// Panics if a pick is outside `rows` or `out` is shorter than `picks.len() * nq` — callers
/// in this crate size both from the same block.
pub fn sums(
    isa: Isa,
    sum: Sum,
    dim: usize,
    rows: &[f32],
    picks: Picks<'_>,
    queries: &[f32],
    out: &mut [f32],
) {
    assert!(dim > 0 && queries.len().is_multiple_of(dim), "queries are not whole vectors");
    let nq = queries.len() / dim;
    assert!(out.len() >= picks.len() * nq, "output too short");
    if let Some(last) = (0..picks.len()).map(|i| picks.get(i)).max() {
        assert!((last + 1) * dim <= rows.len(), "pick outside the block");
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2Fma => {
            // SAFETY: `Isa::Avx2Fma` is only produced by `Isa::detect` after the CPU reported
            // AVX2 and FMA; every pick indexes a whole row inside `rows` and `out` holds
            // `picks.len() * nq` values (both asserted above).
            unsafe { avx2::sums(sum, dim, rows, picks, queries, out) }
        }
        _ => portable_sums(sum, dim, rows, picks, queries, out),
    }
}

/// Fills `out[i]` with Σ xⱼ² of picked row `i`, accumulated exactly as [`sums`] accumulates
/// a [`Sum::Products`] of the row with itself.
pub fn squared_norms(isa: Isa, dim: usize, rows: &[f32], picks: Picks<'_>, out: &mut [f32]) {
    assert!(out.len() >= picks.len(), "output too short");
    for i in 0..picks.len() {
        let r = picks.get(i);
        let row = &rows[r * dim..(r + 1) * dim];
        sums(isa, Sum::Products, dim, row, Picks::All(1), row, &mut out[i..i + 1]);
    }
}

/// Portable: 8 lanes per pair, summed in the same order as the AVX2 reduction.
fn portable_sums(
    sum: Sum,
    dim: usize,
    rows: &[f32],
    picks: Picks<'_>,
    queries: &[f32],
    out: &mut [f32],
) {
    let nq = queries.len() / dim;
    let body = dim - dim % 8;
    for i in 0..picks.len() {
        let r = picks.get(i);
        let x = &rows[r * dim..(r + 1) * dim];
        for q in 0..nq {
            let y = &queries[q * dim..(q + 1) * dim];
            let mut lanes = [0f32; 8];
            for (xc, yc) in x[..body].chunks_exact(8).zip(y[..body].chunks_exact(8)) {
                for l in 0..8 {
                    lanes[l] += term(sum, xc[l], yc[l]);
                }
            }
            let mut s = reduce8(lanes);
            for j in body..dim {
                s += term(sum, x[j], y[j]);
            }
            out[i * nq + q] = s;
        }
    }
}

#[inline(always)]
fn term(sum: Sum, x: f32, y: f32) -> f32 {
    match sum {
        Sum::DiffSquares => (x - y) * (x - y),
        Sum::Products => x * y,
    }
}

/// The reduction order shared by both paths: halves, then pairs, then the last two.
#[inline(always)]
fn reduce8(l: [f32; 8]) -> f32 {
    let h = [l[0] + l[4], l[1] + l[5], l[2] + l[6], l[3] + l[7]];
    let p = [h[0] + h[2], h[1] + h[3]];
    p[0] + p[1]
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{Picks, Sum, reduce8};

    /// See [`super::sums`]; the caller guarantees AVX2 + FMA and in-bounds picks.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sums(
        sum: Sum,
        dim: usize,
        rows: &[f32],
        picks: Picks<'_>,
        queries: &[f32],
        out: &mut [f32],
    ) {
        let nq = queries.len() / dim;
        let n = picks.len();
        let qp = queries.as_ptr();
        let rp = rows.as_ptr();
        let mut i = 0;
        while i + 4 <= n {
            // SAFETY: picks index whole rows inside `rows` (asserted by the caller).
            let r = unsafe {
                [
                    rp.add(picks.get(i) * dim),
                    rp.add(picks.get(i + 1) * dim),
                    rp.add(picks.get(i + 2) * dim),
                    rp.add(picks.get(i + 3) * dim),
                ]
            };
            let mut q = 0;
            while q + 2 <= nq {
                // SAFETY: queries q and q + 1 exist (q + 2 <= nq).
                let qs = unsafe { [qp.add(q * dim), qp.add((q + 1) * dim)] };
                // SAFETY: every pointer addresses `dim` readable floats.
                let s = unsafe { tile::<4, 2>(sum, dim, r, qs) };
                for (a, row) in s.iter().enumerate() {
                    out[(i + a) * nq + q] = row[0];
                    out[(i + a) * nq + q + 1] = row[1];
                }
                q += 2;
            }
            if q < nq {
                // SAFETY: query q exists.
                let qs = unsafe { [qp.add(q * dim)] };
                // SAFETY: as above.
                let s = unsafe { tile::<4, 1>(sum, dim, r, qs) };
                for (a, row) in s.iter().enumerate() {
                    out[(i + a) * nq + q] = row[0];
                }
            }
            i += 4;
        }
        while i < n {
            // SAFETY: the pick indexes a whole row inside `rows`.
            let r = unsafe { [rp.add(picks.get(i) * dim)] };
            for q in 0..nq {
                // SAFETY: query q exists; both pointers address `dim` floats.
                let s = unsafe { tile::<1, 1>(sum, dim, r, [qp.add(q * dim)]) };
                out[i * nq + q] = s[0][0];
            }
            i += 1;
        }
    }

    /// R rows × Q queries, one 8-lane accumulator per pair; the tail past the last multiple
    /// of 8 is added after the reduction, term by term, as the portable path does.
    ///
    /// # Safety
    /// AVX2 + FMA must be available and every pointer must address `dim` readable floats.
    #[inline(always)]
    unsafe fn tile<const R: usize, const Q: usize>(
        sum: Sum,
        dim: usize,
        rows: [*const f32; R],
        qs: [*const f32; Q],
    ) -> [[f32; Q]; R] {
        // SAFETY: the caller guarantees the CPU features and that every pointer reads `dim`
        // floats; loads stay below `body <= dim`, the tail below `dim`.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); Q]; R];
            let body = dim - dim % 8;
            let mut j = 0;
            while j < body {
                let mut x = [_mm256_setzero_ps(); R];
                for r in 0..R {
                    x[r] = _mm256_loadu_ps(rows[r].add(j));
                }
                for q in 0..Q {
                    let y = _mm256_loadu_ps(qs[q].add(j));
                    for r in 0..R {
                        acc[r][q] = match sum {
                            Sum::DiffSquares => {
                                let d = _mm256_sub_ps(x[r], y);
                                _mm256_fmadd_ps(d, d, acc[r][q])
                            }
                            Sum::Products => _mm256_fmadd_ps(x[r], y, acc[r][q]),
                        };
                    }
                }
                j += 8;
            }
            let mut out = [[0f32; Q]; R];
            for r in 0..R {
                for q in 0..Q {
                    let mut lanes = [0f32; 8];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r][q]);
                    let mut s = reduce8(lanes);
                    for t in body..dim {
                        let (a, b) = (*rows[r].add(t), *qs[q].add(t));
                        s += match sum {
                            Sum::DiffSquares => (a - b) * (a - b),
                            Sum::Products => a * b,
                        };
                    }
                    out[r][q] = s;
                }
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metric::{Metric, reference_distance};
    use proptest::prelude::*;

    fn check(isa: Isa, dim: usize, rows: &[f32], queries: &[f32], picks: &[u32]) {
        let nq = queries.len() / dim;
        for sum in [Sum::DiffSquares, Sum::Products] {
            let mut out = vec![0f32; picks.len() * nq];
            sums(isa, sum, dim, rows, Picks::Some(picks), queries, &mut out);
            for (i, &p) in picks.iter().enumerate() {
                let x = &rows[p as usize * dim..(p as usize + 1) * dim];
                for q in 0..nq {
                    let y = &queries[q * dim..(q + 1) * dim];
                    let want = match sum {
                        Sum::DiffSquares => reference_distance(Metric::L2Squared, x, y),
                        Sum::Products => reference_distance(Metric::Dot, x, y).map(|d| -d),
                    }
                    .unwrap();
                    let got = f64::from(out[i * nq + q]);
                    assert!(
                        (want - got).abs() <= 1e-4 * dim as f64 + 1e-4,
                        "{sum:?}: {want} {got}"
                    );
                    // The same pair alone: bit-identical.
                    let mut one = [0f32];
                    sums(isa, sum, dim, x, Picks::All(1), y, &mut one);
                    assert_eq!(one[0].to_bits(), out[i * nq + q].to_bits(), "{sum:?} tile shape");
                }
            }
        }
    }

    proptest! {
        #[test]
        fn tiles_agree_with_the_reference_and_with_single_pairs(
            dim in 1usize..40,
            nrows in 1usize..12,
            nq in 1usize..6,
            data in proptest::collection::vec(-2.0f32..2.0, 12 * 40 + 6 * 40),
            picks in proptest::collection::vec(0u32..12, 0..15),
        ) {
            let rows = &data[..nrows * dim];
            let queries = &data[12 * 40..12 * 40 + nq * dim];
            let picks: Vec<u32> = picks.into_iter().filter(|p| (*p as usize) < nrows).collect();
            check(Isa::detect(), dim, rows, queries, &picks);
            check(Isa::Portable, dim, rows, queries, &picks);
        }
    }

    #[test]
    fn squared_norms_match_products_of_a_row_with_itself() {
        let rows: Vec<f32> = (0..3 * 13).map(|i| i as f32 * 0.25 - 3.0).collect();
        let mut n = [0f32; 3];
        squared_norms(Isa::detect(), 13, &rows, Picks::All(3), &mut n);
        for (r, got) in n.iter().enumerate() {
            let x = &rows[r * 13..(r + 1) * 13];
            let want: f32 = x.iter().map(|v| v * v).sum();
            assert!((want - got).abs() < 1e-3);
        }
    }
}
