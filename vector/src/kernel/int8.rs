//! Sums of int8 rows with int8 queries, in integers.
//!
//! Rows stored as int8 codes (xⱼ = cⱼ·s + o, one scale `s` and offset `o` per block, each
//! row's Σ xⱼ² kept beside them: [`squared_norm`]) are compared with the queries quantised
//! the same way ([`QueryCodes`]: qⱼ ≈ q̂ⱼ·t, one scale `t` per query, no offset). The
//! integer sum Σ cⱼ·q̂ⱼ is exact, and the rest follows in `f64`:
//!
//! - Σ xⱼ·qⱼ ≈ s·t·Σ cⱼ·q̂ⱼ + o·Σ qⱼ (Σ qⱼ of the `f32` query; the only error is the
//!   query's rounding, at most s·(t/2)·Σ |cⱼ|);
//! - Σ xⱼ² = s²·Σ cⱼ² + 2·s·o·Σ cⱼ + D·o², computed once per row when the block is encoded;
//! - Σ (xⱼ − qⱼ)² = Σ xⱼ² − 2·Σ xⱼ·qⱼ + Σ qⱼ² (clamped at 0).
//!
//! With AVX-VNNI (detected at run time) 32 codes of a row meet 32 codes of a query in one
//! `vpdpbusd` (unsigned × signed bytes, four products per 32-bit lane): the row's codes are
//! made unsigned by flipping their sign bit (uⱼ = cⱼ + 128) and the excess, 128·Σ q̂ⱼ, is
//! taken off after. With AVX2 alone (AMD Zen 3, older Intel) the same uⱼ and q̂ⱼ are
//! widened to 16 bits and meet in `vpmaddwd` (two products per 32-bit lane, 16 codes per
//! instruction). Elsewhere a scalar loop computes the same integers, so every path returns
//! identical sums.
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

/// Σ xⱼ² of one row of codes (xⱼ = cⱼ·scale + offset), from its exact Σ cⱼ and Σ cⱼ².
pub fn squared_norm(row: &[i8], scale: f32, offset: f32) -> f32 {
    let (c1, c2) = row.iter().fold((0i64, 0i64), |(c1, c2), &c| {
        let c = i64::from(c);
        (c1 + c, c2 + c * c)
    });
    let (s, o) = (f64::from(scale), f64::from(offset));
    (s * s * c2 as f64 + 2.0 * s * o * c1 as f64 + row.len() as f64 * o * o) as f32
}

/// A block of int8 rows as [`sums`] reads it.
#[derive(Debug, Clone, Copy)]
pub struct Codes<'a> {
    /// The codes, row-major.
    pub codes: &'a [i8],
    /// What the codes stand for.
    pub scale: Scale<'a>,
    /// Per row, [`squared_norm`].
    pub norms: &'a [f32],
}

/// The step and offset of a block's codes: xⱼ = cⱼ·scale + offset.
#[derive(Debug, Clone, Copy)]
pub enum Scale<'a> {
    /// One step and offset for the whole block.
    Block {
        /// Step between codes.
        scale: f32,
        /// Value of code 0.
        offset: f32,
    },
    /// A step and offset per row.
    Row {
        /// Per row, the step.
        scales: &'a [f32],
        /// Per row, the offset.
        offsets: &'a [f32],
    },
}

impl<'a> Codes<'a> {
    /// The int8 rows of `rows` that meet quantised queries; `None` for other kinds (and
    /// for per-row int8 rows read as their values).
    pub fn of(rows: super::Rows<'a>) -> Option<Codes<'a>> {
        match rows {
            super::Rows::I8 { codes, scale, offset, norms } => {
                Some(Codes { codes, scale: Scale::Block { scale, offset }, norms })
            }
            super::Rows::I8Rows { integer: true, codes, scales, offsets, norms } => {
                Some(Codes { codes, scale: Scale::Row { scales, offsets }, norms })
            }
            _ => None,
        }
    }
}

/// Fills `out[i * nq + q]` with the `sum` of picked row `i` of `block` (row-major with
/// `queries.dim()` columns) and query `q`, and `norms[i]` (when given) with the row's
/// Σ xⱼ² — see the module docs for how they are computed.
///
/// Panics if a pick is outside the block or an output is too short (caller bugs).
pub fn sums(
    isa: Isa,
    sum: Sum,
    block: Codes<'_>,
    picks: Picks<'_>,
    queries: &QueryCodes,
    out: &mut [f32],
    norms: Option<&mut [f32]>,
) {
    let Codes { codes, scale, norms: own } = block;
    let (dim, nq) = (queries.dim, queries.len());
    let n = picks.len();
    assert!(nq > 0, "no queries");
    assert!(out.len() >= n * nq, "output too short");
    assert!(norms.as_ref().is_none_or(|m| m.len() >= n), "norms too short");
    assert_eq!(own.len() * dim, codes.len(), "a norm per row");
    if let Scale::Row { scales, offsets } = scale {
        assert!(scales.len() == own.len() && offsets.len() == own.len(), "a step per row");
    }
    if let Some(last) = (0..n).map(|i| picks.get(i)).max() {
        assert!((last + 1) * dim <= codes.len(), "pick outside the block");
    }
    // The exact integer sums Σ uⱼ·q̂ⱼ first (|sum| < 2³¹ for rows up to `MAX_DIM` codes:
    // at most 255·127 per code), then plain loops for the values.
    let mut dots = vec![0i32; n * nq];
    let mut done = false;
    #[cfg(target_arch = "x86_64")]
    if isa.vnni && dim <= MAX_DIM {
        // SAFETY: `isa.vnni` is only set by `Isa::detect` after the CPU reported AVX2 and
        // AVX-VNNI; every pick indexes a whole row inside `codes` (asserted above), every
        // query a whole row of `queries.codes`, `dots` holds a sum per pair and `dim` is
        // within `MAX_DIM`.
        unsafe { simd::walk_vnni(dim, codes, picks, queries, &mut dots) };
        done = true;
    } else if isa.kind == super::Kind::Avx2Fma && dim <= MAX_DIM {
        // SAFETY: `Kind::Avx2Fma` is only chosen by `Isa::detect` after the CPU reported
        // AVX2; the rest as above.
        unsafe { simd::walk_avx2(dim, codes, picks, queries, &mut dots) };
        done = true;
    }
    let mut wide = Vec::new();
    if !done {
        let _ = isa;
        wide = vec![0i64; n * nq];
        for (i, d) in wide.chunks_exact_mut(nq).enumerate() {
            let row = &codes[picks.get(i) * dim..(picks.get(i) + 1) * dim];
            for (d, y) in d.iter_mut().zip(queries.codes.chunks_exact(dim)) {
                *d = row.iter().zip(y).map(|(&c, &q)| (i64::from(c) + 128) * i64::from(q)).sum();
            }
        }
    }
    // The rows' Σ xⱼ², in pick order (a contiguous block's are read in place).
    let gathered: Vec<f32>;
    let xx: &[f32] = match picks {
        Picks::All(_) => &own[..n],
        Picks::Some(p) => {
            gathered = p.iter().map(|&r| own[r as usize]).collect();
            &gathered
        }
    };
    if let Some(m) = norms {
        m[..n].copy_from_slice(xx);
    }
    // Per query: Σ xⱼ·qⱼ = a·(raw − 128·Σ q̂ⱼ) + b, in `f32` (one loop per query, so that
    // the compiler can run it several rows at a time).
    let (s, o) = match scale {
        Scale::Block { scale, offset } => (f64::from(scale), f64::from(offset)),
        Scale::Row { .. } => (1.0, 0.0),
    };
    // Per-row steps and offsets, in pick order.
    let per_row: Option<(Vec<f32>, Vec<f32>)> = match scale {
        Scale::Block { .. } => None,
        Scale::Row { scales, offsets } => {
            Some((0..n).map(|i| picks.get(i)).map(|r| (scales[r], offsets[r])).unzip())
        }
    };
    for q in 0..nq {
        let a = (s * queries.scale[q]) as f32;
        let b = (o * queries.sums[q]) as f32;
        let qq = queries.squares[q] as f32;
        let excess = 128 * queries.code_sums[q];
        let one = Query { sum, q, nq, a, b, qq };
        match (&per_row, done) {
            (None, true) => {
                // `raw − excess` = Σ cⱼ·q̂ⱼ fits in 32 bits, as `raw` and `excess` do.
                let excess = excess as i32;
                one.fill(&dots, |raw| (raw - excess) as f32, xx, out);
            }
            (None, false) => one.fill(&wide, |raw| (raw - excess) as f32, xx, out),
            (Some((ss, oo)), _) => {
                let (t, qs) = (queries.scale[q] as f32, queries.sums[q] as f32);
                for i in 0..n {
                    let raw = if done {
                        (dots[i * nq + q] - excess as i32) as f32
                    } else {
                        (wide[i * nq + q] - excess) as f32
                    };
                    let xq = ss[i] * t * raw + oo[i] * qs;
                    out[i * nq + q] = match sum {
                        Sum::Products => xq,
                        Sum::DiffSquares => (xx[i] - 2.0 * xq + qq).max(0.0),
                    };
                }
            }
        }
    }
}

/// What turns one query's raw sums into values: Σ xⱼ·qⱼ = a·Σ cⱼ·q̂ⱼ + b.
#[derive(Clone, Copy)]
struct Query {
    sum: Sum,
    q: usize,
    nq: usize,
    a: f32,
    b: f32,
    /// Σ qⱼ².
    qq: f32,
}

impl Query {
    /// `out[i * nq + q]` for every row `i` (Σ xᵢ² in `xx[i]`) from `raws[i * nq + q]`, whose
    /// Σ cⱼ·q̂ⱼ `dot` gives. One plain loop, so the compiler can take rows several at a time
    /// (a single query's is contiguous, and written as such: strided stores kept it to one
    /// row at a time).
    #[inline(always)]
    fn fill<T: Copy>(&self, raws: &[T], dot: impl Fn(T) -> f32, xx: &[f32], out: &mut [f32]) {
        let Query { sum, q, nq, a, b, qq } = *self;
        if nq == 1 {
            let n = xx.len();
            for ((o, &raw), &x) in out[..n].iter_mut().zip(&raws[..n]).zip(xx) {
                let xq = a * dot(raw) + b;
                *o = match sum {
                    Sum::Products => xq,
                    Sum::DiffSquares => (x - 2.0 * xq + qq).max(0.0),
                };
            }
            return;
        }
        for (i, &x) in xx.iter().enumerate() {
            let xq = a * dot(raws[i * nq + q]) + b;
            out[i * nq + q] = match sum {
                Sum::Products => xq,
                Sum::DiffSquares => (x - 2.0 * xq + qq).max(0.0),
            };
        }
    }
}

/// The longest rows the vector path sums in 32-bit integers (longer ones take the scalar
/// path in 64 bits).
pub const MAX_DIM: usize = 1 << 15;

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    use super::{MAX_DIM, Picks, QueryCodes};

    /// How far ahead (in rows) a contiguous block is prefetched.
    const PREFETCH_ROWS: usize = 16;

    /// [`walk`] with `vpdpbusd`.
    ///
    /// # Safety
    /// AVX2 and AVX-VNNI must be available; the rest as [`walk`].
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn walk_vnni(
        dim: usize,
        codes: &[i8],
        picks: Picks<'_>,
        queries: &QueryCodes,
        dots: &mut [i32],
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { walk::<Vnni>(dim, codes, picks, queries, dots) }
    }

    /// [`walk`] with `vpmaddwd`.
    ///
    /// # Safety
    /// AVX2 must be available; the rest as [`walk`].
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn walk_avx2(
        dim: usize,
        codes: &[i8],
        picks: Picks<'_>,
        queries: &QueryCodes,
        dots: &mut [i32],
    ) {
        // SAFETY: forwarded from the caller.
        unsafe { walk::<Madd>(dim, codes, picks, queries, dots) }
    }

    /// Every picked row against every query: `dots[i * nq + q]` gets Σ uⱼ·q̂ⱼ of picked
    /// row `i` and query `q`. Rows go 4 at a time, queries 2 at a time.
    ///
    /// # Safety
    /// The instructions `K` uses must be available; every pick must index a whole row of
    /// `codes`; `dots` must hold `picks.len() * queries.len()` sums; `dim <= MAX_DIM`.
    #[inline(always)]
    unsafe fn walk<K: Dots>(
        dim: usize,
        codes: &[i8],
        picks: Picks<'_>,
        queries: &QueryCodes,
        dots: &mut [i32],
    ) {
        debug_assert!(dim <= MAX_DIM);
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
            if i + 4 + PREFETCH_ROWS <= n {
                // The four rows `PREFETCH_ROWS` picks on: one run of a contiguous block, or
                // each picked row (the hardware does not run ahead of a row's few lines;
                // about 10 % faster over picks of every row).
                let runs = match picks {
                    Picks::All(_) => [(i + PREFETCH_ROWS, 4 * dim), (0, 0), (0, 0), (0, 0)],
                    Picks::Some(_) => {
                        std::array::from_fn(|a| (picks.get(i + PREFETCH_ROWS + a), dim))
                    }
                };
                for (row, len) in runs {
                    let ahead = rp.wrapping_add(row * dim);
                    let mut off = 0;
                    while off < len {
                        // SAFETY: prefetching is a hint that never faults.
                        unsafe { _mm_prefetch::<_MM_HINT_T0>(ahead.wrapping_add(off)) };
                        off += 64;
                    }
                }
            }
            let mut q = 0;
            while q + 2 <= nq {
                // SAFETY: queries q and q + 1 exist; every pointer addresses `dim` codes.
                let t =
                    unsafe { K::tile::<4, 2>(dim, r, [qp.add(q * dim), qp.add((q + 1) * dim)]) };
                for (a, s) in t.iter().enumerate() {
                    dots[(i + a) * nq + q..(i + a) * nq + q + 2].copy_from_slice(s);
                }
                q += 2;
            }
            if q < nq {
                // SAFETY: query q exists.
                let t = unsafe { K::tile::<4, 1>(dim, r, [qp.add(q * dim)]) };
                for (a, s) in t.iter().enumerate() {
                    dots[(i + a) * nq + q] = s[0];
                }
            }
            i += 4;
        }
        while i < n {
            // SAFETY: the pick indexes a whole row inside `codes`.
            let r = unsafe { [rp.add(picks.get(i) * dim)] };
            for q in 0..nq {
                // SAFETY: query q exists; both pointers address `dim` codes.
                dots[i * nq + q] = unsafe { K::tile::<1, 1>(dim, r, [qp.add(q * dim)]) }[0][0];
            }
            i += 1;
        }
    }

    /// One way of summing a tile of rows × queries in integers: how `STEP` codes of a row
    /// and of a query are loaded, and how they meet.
    trait Dots {
        /// Codes per step of the vector loop.
        const STEP: usize;

        /// Codes `p..p + STEP` of a row, as uⱼ = cⱼ + 128.
        ///
        /// # Safety
        /// The instructions the implementation uses must be available; `p` must address
        /// `STEP` readable codes.
        unsafe fn row(p: *const i8) -> __m256i;

        /// Codes `p..p + STEP` of a query.
        ///
        /// # Safety
        /// As [`Dots::row`].
        unsafe fn query(p: *const i8) -> __m256i;

        /// `acc` plus the products of `u` (from [`Dots::row`]) and `y` (from
        /// [`Dots::query`]), summed into 32-bit lanes.
        ///
        /// # Safety
        /// The instructions the implementation uses must be available.
        unsafe fn dot(acc: __m256i, u: __m256i, y: __m256i) -> __m256i;

        /// R rows × Q queries: Σ uⱼ·q̂ⱼ of each pair (in 32 bits: `dim <= MAX_DIM`); the
        /// tail past the last multiple of `STEP` is summed one code at a time.
        ///
        /// # Safety
        /// The instructions the implementation uses must be available; every pointer must
        /// address `dim` codes.
        #[inline(always)]
        unsafe fn tile<const R: usize, const Q: usize>(
            dim: usize,
            rows: [*const i8; R],
            qs: [*const i8; Q],
        ) -> [[i32; Q]; R] {
            // SAFETY: the caller guarantees the CPU features and that every pointer reads
            // `dim` codes; vector steps stay below `body <= dim`, the tail below `dim`.
            unsafe {
                let mut acc = [[_mm256_setzero_si256(); Q]; R];
                let body = dim - dim % Self::STEP;
                let mut j = 0;
                while j < body {
                    let mut u = [_mm256_setzero_si256(); R];
                    for (u, row) in u.iter_mut().zip(&rows) {
                        *u = Self::row(row.add(j));
                    }
                    for q in 0..Q {
                        let y = Self::query(qs[q].add(j));
                        for r in 0..R {
                            acc[r][q] = Self::dot(acc[r][q], u[r], y);
                        }
                    }
                    j += Self::STEP;
                }
                let mut res = [[0i32; Q]; R];
                for (res, acc) in res.iter_mut().zip(&acc) {
                    for (d, a) in res.iter_mut().zip(acc) {
                        *d = hsum(*a);
                    }
                }
                for t in body..dim {
                    for (res, row) in res.iter_mut().zip(&rows) {
                        let u = i32::from(*row.add(t)) + 128;
                        for (d, q) in res.iter_mut().zip(&qs) {
                            *d += u * i32::from(*q.add(t));
                        }
                    }
                }
                res
            }
        }
    }

    /// AVX-VNNI: 32 codes per `vpdpbusd` (unsigned row bytes × signed query bytes).
    struct Vnni;

    impl Dots for Vnni {
        const STEP: usize = 32;

        #[inline(always)]
        unsafe fn row(p: *const i8) -> __m256i {
            // SAFETY: the caller guarantees AVX2 and 32 readable codes.
            unsafe { _mm256_xor_si256(_mm256_loadu_si256(p.cast()), _mm256_set1_epi8(i8::MIN)) }
        }

        #[inline(always)]
        unsafe fn query(p: *const i8) -> __m256i {
            // SAFETY: as above.
            unsafe { _mm256_loadu_si256(p.cast()) }
        }

        #[inline(always)]
        unsafe fn dot(acc: __m256i, u: __m256i, y: __m256i) -> __m256i {
            // SAFETY: the caller guarantees AVX-VNNI.
            unsafe { _mm256_dpbusd_avx_epi32(acc, u, y) }
        }
    }

    /// AVX2: 16 codes per `vpmaddwd`, rows and queries widened to 16 bits (uⱼ ≤ 255 and
    /// |q̂ⱼ| ≤ 127, so each pair of products fits a 32-bit lane exactly).
    struct Madd;

    impl Dots for Madd {
        const STEP: usize = 16;

        #[inline(always)]
        unsafe fn row(p: *const i8) -> __m256i {
            // SAFETY: the caller guarantees AVX2 and 16 readable codes.
            unsafe {
                _mm256_cvtepu8_epi16(_mm_xor_si128(
                    _mm_loadu_si128(p.cast()),
                    _mm_set1_epi8(i8::MIN),
                ))
            }
        }

        #[inline(always)]
        unsafe fn query(p: *const i8) -> __m256i {
            // SAFETY: as above.
            unsafe { _mm256_cvtepi8_epi16(_mm_loadu_si128(p.cast())) }
        }

        #[inline(always)]
        unsafe fn dot(acc: __m256i, u: __m256i, y: __m256i) -> __m256i {
            // SAFETY: the caller guarantees AVX2.
            unsafe { _mm256_add_epi32(acc, _mm256_madd_epi16(u, y)) }
        }
    }

    /// The eight 32-bit lanes of `v` added (the sum fits: `dim <= MAX_DIM`).
    ///
    /// # Safety
    /// AVX2 must be available.
    #[inline(always)]
    unsafe fn hsum(v: __m256i) -> i32 {
        // SAFETY: the caller guarantees AVX2.
        unsafe {
            let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
            let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
            _mm_cvtsi128_si32(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::{Quantization, Quantized};
    use proptest::prelude::*;

    /// The module's formulas evaluated from scratch, one pair at a time.
    fn reference(sum: Sum, x: &[i8], (s, o): (f32, f32), q: &[f32]) -> (f32, f32) {
        let qc = QueryCodes::new(q.len(), q);
        let dot: i64 = x.iter().zip(&qc.codes).map(|(&c, &y)| i64::from(c) * i64::from(y)).sum();
        let xx = squared_norm(x, s, o);
        let a = (f64::from(s) * qc.scale[0]) as f32;
        let xq = a * dot as f32 + (f64::from(o) * qc.sums[0]) as f32;
        let v = match sum {
            Sum::Products => xq,
            Sum::DiffSquares => (xx - 2.0 * xq + qc.squares[0] as f32).max(0.0),
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
            let Quantized::Int8 { codes, scale, offset, norms: own } = Quantized::encode(Quantization::Int8, rows, dim) else {
                unreachable!()
            };
            let block = Codes { codes: &codes, scale: Scale::Block { scale, offset }, norms: &own };
            let qc = QueryCodes::new(dim, queries);
            for sum in [Sum::DiffSquares, Sum::Products] {
                for isa in [Isa::detect(), Isa::detect().without_vnni(), Isa::portable()] {
                    let mut out = vec![0f32; picks.len() * nq];
                    let mut norms = vec![0f32; picks.len()];
                    let p = Picks::Some(&picks);
                    sums(isa, sum, block, p, &qc, &mut out, Some(&mut norms));
                    let mut plain = vec![0f32; picks.len() * nq];
                    sums(isa, sum, block, p, &qc, &mut plain, None);
                    prop_assert_eq!(&out, &plain, "sums with and without norms");
                    for (i, &r) in picks.iter().enumerate() {
                        let x = &codes[r as usize * dim..(r as usize + 1) * dim];
                        let back: Vec<f64> = x.iter().map(|&c| f64::from(c) * f64::from(scale) + f64::from(offset)).collect();
                        for q in 0..nq {
                            let y = &queries[q * dim..(q + 1) * dim];
                            let (want, xx) = reference(sum, x, (scale, offset), y);
                            prop_assert_eq!(out[i * nq + q], want, "{:?} row {} query {}", sum, r, q);
                            prop_assert_eq!(norms[i], xx);
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
    fn the_longest_rows_of_each_path_sum_exactly() {
        // Every code at the extremes: the longest rows summed in 32 bits, then rows whose
        // sums need 64 (the wide path).
        for dim in [MAX_DIM, MAX_DIM * 2 + 40] {
            let codes: Vec<i8> =
                (0..2 * dim).map(|i| if i % 2 == 0 { -127 } else { 127 }).collect();
            let q: Vec<f32> = (0..dim).map(|i| if i % 3 == 0 { -1.0 } else { 1.0 }).collect();
            let qc = QueryCodes::new(dim, &q);
            let own: Vec<f32> =
                codes.chunks_exact(dim).map(|r| squared_norm(r, 1.0, 0.0)).collect();
            let block = Codes {
                codes: &codes,
                scale: Scale::Block { scale: 1.0, offset: 0.0 },
                norms: &own,
            };
            let mut a = [0f32; 2];
            let mut b = [0f32; 2];
            let (mut na, mut nb) = ([0f32; 2], [0f32; 2]);
            let all = Picks::All(2);
            sums(Isa::portable(), Sum::DiffSquares, block, all, &qc, &mut b, Some(&mut nb));
            for isa in [Isa::detect(), Isa::detect().without_vnni()] {
                sums(isa, Sum::DiffSquares, block, all, &qc, &mut a, Some(&mut na));
                assert_eq!((a, na), (b, nb), "dim {dim}");
            }
            assert_eq!(na[0], (127.0f64 * 127.0 * dim as f64) as f32);
            let (want, _) = reference(Sum::DiffSquares, &codes[..dim], (1.0, 0.0), &q);
            assert_eq!(a[0], want, "dim {dim}");
        }
    }

    #[test]
    fn extreme_codes_in_every_tile_shape_sum_exactly() {
        // Rows of −128 / 127 / 0 against queries of ±127 / 0 codes, in runs, so that the
        // products and their pair sums reach their largest magnitudes; one query and
        // several (tiles of 4 rows × 2 queries, with rows and a query left over);
        // dimensions around both vector steps. Every path must equal the scalar one and
        // the reference.
        let row_pattern = [-128i8, -128, 127, 127, 0, -128, 127, -128];
        let q_pattern = [-1.0f32, -1.0, 1.0, 1.0, 0.0, 1.0, -1.0, -1.0, 1.0];
        for dim in [1usize, 15, 16, 31, 32, 33, 64, 100] {
            let nrows = 7;
            let codes: Vec<i8> =
                (0..nrows * dim).map(|i| row_pattern[(i + i / dim) % row_pattern.len()]).collect();
            let own: Vec<f32> =
                codes.chunks_exact(dim).map(|r| squared_norm(r, 1.0, 0.0)).collect();
            let block = Codes {
                codes: &codes,
                scale: Scale::Block { scale: 1.0, offset: 0.0 },
                norms: &own,
            };
            for nq in [1usize, 2, 3] {
                let q: Vec<f32> = (0..nq * dim)
                    .map(|i| q_pattern[(i + 3 * (i / dim)) % q_pattern.len()])
                    .collect();
                let qc = QueryCodes::new(dim, &q);
                for sum in [Sum::Products, Sum::DiffSquares] {
                    let mut want = vec![0f32; nrows * nq];
                    sums(Isa::portable(), sum, block, Picks::All(nrows), &qc, &mut want, None);
                    for isa in [Isa::detect(), Isa::detect().without_vnni()] {
                        let mut got = vec![0f32; nrows * nq];
                        sums(isa, sum, block, Picks::All(nrows), &qc, &mut got, None);
                        assert_eq!(got, want, "dim {dim}, {nq} queries, {sum:?}");
                    }
                    for (i, row) in codes.chunks_exact(dim).enumerate() {
                        for (k, y) in q.chunks_exact(dim).enumerate() {
                            let (v, _) = reference(sum, row, (1.0, 0.0), y);
                            assert_eq!(want[i * nq + k], v, "dim {dim}, row {i}, query {k}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_zero_query_has_zero_codes() {
        let qc = QueryCodes::new(3, &[0.0, 0.0, 0.0, 1.0, -0.5, 0.25]);
        assert_eq!(qc.codes, vec![0, 0, 0, 127, -64, 32]);
        assert_eq!(qc.code_sums, vec![0, 95]);
        assert_eq!(qc.len(), 2);
    }
}
