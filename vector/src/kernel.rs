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

/// The instruction set a pass runs with. Only [`Isa::detect`] can choose the vector
/// instructions (after asking the CPU), so no caller can ask for instructions the CPU lacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Isa(Kind);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
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
                return Isa(Kind::Avx2Fma);
            }
        }
        Isa(Kind::Portable)
    }

    /// The portable code, whatever the CPU.
    pub fn portable() -> Isa {
        Isa(Kind::Portable)
    }

    /// Whether this is the portable code.
    pub fn is_portable(self) -> bool {
        self.0 == Kind::Portable
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

/// The rows a pass reads: `rows` is row-major with `dim` columns; `picks` says which.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// Columns per row.
    pub dim: usize,
    /// Row-major values.
    pub rows: &'a [f32],
    /// The rows to read.
    pub picks: Picks<'a>,
}

/// Fills `out[i * nq + q]` with the `sum` of picked row `i` (of `rows`, row-major with
/// `dim` columns) and query `q` (of `queries`, `nq = queries.len() / dim` of them), and,
/// when `norms` is given, `norms[i]` with Σ xⱼ² of picked row `i` (accumulated exactly as
/// a [`Sum::Products`] of the row with itself, in the same pass over the row).
///
/// Panics if a pick is outside `rows` or an output is shorter than the picks need — callers
/// in this crate size them from the same block.
pub fn sums(
    isa: Isa,
    sum: Sum,
    block: Block<'_>,
    queries: &[f32],
    out: &mut [f32],
    norms: Option<&mut [f32]>,
) {
    let Block { dim, rows, picks } = block;
    assert!(dim > 0 && queries.len().is_multiple_of(dim), "queries are not whole vectors");
    let nq = queries.len() / dim;
    assert!(nq > 0, "no queries");
    assert!(out.len() >= picks.len() * nq, "output too short");
    assert!(norms.as_ref().is_none_or(|n| n.len() >= picks.len()), "norms too short");
    if let Some(last) = (0..picks.len()).map(|i| picks.get(i)).max() {
        assert!((last + 1) * dim <= rows.len(), "pick outside the block");
    }
    match isa.0 {
        #[cfg(target_arch = "x86_64")]
        Kind::Avx2Fma => {
            // SAFETY: `Kind::Avx2Fma` is only chosen by `Isa::detect` after the CPU reported
            // AVX2 and FMA; every pick indexes a whole row inside `rows`, and `out` / `norms`
            // hold what the picks need (all asserted above).
            unsafe { avx2::sums(sum, dim, rows, picks, queries, out, norms) }
        }
        _ => portable_sums(sum, dim, rows, picks, queries, out, norms),
    }
}

/// Fills `out[i]` with Σ xⱼ² of picked row `i`, accumulated exactly as [`sums`] accumulates
/// a [`Sum::Products`] of the row with itself.
pub fn squared_norms(isa: Isa, dim: usize, rows: &[f32], picks: Picks<'_>, out: &mut [f32]) {
    assert!(out.len() >= picks.len(), "output too short");
    for i in 0..picks.len() {
        let r = picks.get(i);
        let row = &rows[r * dim..(r + 1) * dim];
        let one = Block { dim, rows: row, picks: Picks::All(1) };
        sums(isa, Sum::Products, one, row, &mut out[i..i + 1], None);
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
    mut norms: Option<&mut [f32]>,
) {
    let nq = queries.len() / dim;
    let body = dim - dim % 8;
    for i in 0..picks.len() {
        let r = picks.get(i);
        let x = &rows[r * dim..(r + 1) * dim];
        if let Some(n) = norms.as_deref_mut() {
            let mut lanes = [0f32; 8];
            for xc in x[..body].chunks_exact(8) {
                for l in 0..8 {
                    lanes[l] += xc[l] * xc[l];
                }
            }
            let mut s = reduce8(lanes);
            for v in &x[body..] {
                s += v * v;
            }
            n[i] = s;
        }
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

    /// How far ahead (in rows) a contiguous block is prefetched.
    const PREFETCH_ROWS: usize = 16;

    /// See [`super::sums`]; the caller guarantees AVX2 + FMA and in-bounds picks and outputs.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn sums(
        sum: Sum,
        dim: usize,
        rows: &[f32],
        picks: Picks<'_>,
        queries: &[f32],
        out: &mut [f32],
        norms: Option<&mut [f32]>,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match sum {
                Sum::DiffSquares => pass::<true>(dim, rows, picks, queries, out, norms),
                Sum::Products => pass::<false>(dim, rows, picks, queries, out, norms),
            }
        }
    }

    /// One pass; `DIFF` chooses Σ (x − q)² over Σ x·q at compile time.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn pass<const DIFF: bool>(
        dim: usize,
        rows: &[f32],
        picks: Picks<'_>,
        queries: &[f32],
        out: &mut [f32],
        mut norms: Option<&mut [f32]>,
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
            // Ask for the rows a few tiles ahead now, so their lines are on the way while
            // this tile computes (contiguous blocks only; hints never fault).
            if let Picks::All(_) = picks
                && i + 4 + PREFETCH_ROWS <= n
            {
                // SAFETY: the addresses are inside `rows` (the picks up to `n` are).
                let ahead = unsafe { rp.add((i + PREFETCH_ROWS) * dim) };
                let mut off = 0;
                while off < 4 * dim {
                    // SAFETY: prefetching is a hint; the address is inside `rows`.
                    unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.add(off).cast::<i8>()) };
                    off += 16;
                }
            }
            let mut q = 0;
            if let Some(nr) = norms.as_deref_mut() {
                // The first query alone, with the rows' norms in the same pass.
                // SAFETY: query 0 exists; every pointer addresses `dim` readable floats.
                let (s, m) = unsafe { tile::<4, 1, DIFF, true>(dim, r, [qp]) };
                for a in 0..4 {
                    out[(i + a) * nq] = s[a][0];
                    nr[i + a] = m[a];
                }
                q = 1;
            }
            while q + 2 <= nq {
                // SAFETY: queries q and q + 1 exist (q + 2 <= nq).
                let qs = unsafe { [qp.add(q * dim), qp.add((q + 1) * dim)] };
                // SAFETY: every pointer addresses `dim` readable floats.
                let (s, _) = unsafe { tile::<4, 2, DIFF, false>(dim, r, qs) };
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
                let (s, _) = unsafe { tile::<4, 1, DIFF, false>(dim, r, qs) };
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
                let (s, m) = unsafe { tile::<1, 1, DIFF, true>(dim, r, [qp.add(q * dim)]) };
                out[i * nq + q] = s[0][0];
                if q == 0
                    && let Some(nr) = norms.as_deref_mut()
                {
                    nr[i] = m[0];
                }
            }
            i += 1;
        }
    }

    /// R rows × Q queries, one 8-lane accumulator per pair (and per row for the norms when
    /// `NORMS`); the tail past the last multiple of 8 is added after the reduction, term by
    /// term, as the portable path does.
    ///
    /// # Safety
    /// AVX2 + FMA must be available and every pointer must address `dim` readable floats.
    #[inline(always)]
    unsafe fn tile<const R: usize, const Q: usize, const DIFF: bool, const NORMS: bool>(
        dim: usize,
        rows: [*const f32; R],
        qs: [*const f32; Q],
    ) -> ([[f32; Q]; R], [f32; R]) {
        // SAFETY: the caller guarantees the CPU features and that every pointer reads `dim`
        // floats; loads stay below `body <= dim`, the tail below `dim`.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); Q]; R];
            let mut nrm = [_mm256_setzero_ps(); R];
            let body = dim - dim % 8;
            let mut j = 0;
            while j < body {
                let mut x = [_mm256_setzero_ps(); R];
                for r in 0..R {
                    x[r] = _mm256_loadu_ps(rows[r].add(j));
                    if NORMS {
                        nrm[r] = _mm256_fmadd_ps(x[r], x[r], nrm[r]);
                    }
                }
                for q in 0..Q {
                    let y = _mm256_loadu_ps(qs[q].add(j));
                    for r in 0..R {
                        acc[r][q] = if DIFF {
                            let d = _mm256_sub_ps(x[r], y);
                            _mm256_fmadd_ps(d, d, acc[r][q])
                        } else {
                            _mm256_fmadd_ps(x[r], y, acc[r][q])
                        };
                    }
                }
                j += 8;
            }
            let mut out = [[0f32; Q]; R];
            let mut norms = [0f32; R];
            let mut lanes = [0f32; 8];
            for r in 0..R {
                for q in 0..Q {
                    _mm256_storeu_ps(lanes.as_mut_ptr(), acc[r][q]);
                    let mut s = reduce8(lanes);
                    for t in body..dim {
                        let (a, b) = (*rows[r].add(t), *qs[q].add(t));
                        s += if DIFF { (a - b) * (a - b) } else { a * b };
                    }
                    out[r][q] = s;
                }
                if NORMS {
                    _mm256_storeu_ps(lanes.as_mut_ptr(), nrm[r]);
                    let mut s = reduce8(lanes);
                    for t in body..dim {
                        let a = *rows[r].add(t);
                        s += a * a;
                    }
                    norms[r] = s;
                }
            }
            (out, norms)
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
            let mut norms = vec![0f32; picks.len()];
            sums(
                isa,
                sum,
                Block { dim, rows, picks: Picks::Some(picks) },
                queries,
                &mut out,
                Some(&mut norms),
            );
            let mut alone = vec![0f32; picks.len()];
            squared_norms(isa, dim, rows, Picks::Some(picks), &mut alone);
            assert_eq!(
                norms.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "norms in the pass and alone"
            );
            let mut plain = vec![0f32; picks.len() * nq];
            sums(
                isa,
                sum,
                Block { dim, rows, picks: Picks::Some(picks) },
                queries,
                &mut plain,
                None,
            );
            assert_eq!(
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                plain.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "sums with and without norms"
            );
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
                    sums(isa, sum, Block { dim, rows: x, picks: Picks::All(1) }, y, &mut one, None);
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
            check(Isa::portable(), dim, rows, queries, &picks);
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
