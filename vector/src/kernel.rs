//! The top-k scan's kernel: for a chunk of candidate rows and a set of queries, every
//! (row, query) sum — Σ (xᵢ − qᵢ)² or Σ xᵢ·qᵢ — plus the rows' squared norms.
//!
//! On x86-64 with AVX2 and FMA (detected at run time, once) rows are taken 4 at a time and
//! queries 2 at a time: 8 accumulators stay in registers and each row element loaded feeds
//! every query of the tile, so a batch of queries reads each row once. A single query over
//! long rows takes them one at a time (one forward stream, which the hardware prefetches
//! well). Elsewhere a portable loop with 8 independent lanes per pair runs. Every pair has
//! its own accumulator and sees the same operations in the same order whatever the tile
//! shape, so one query alone and the same query inside a batch get identical sums.
//!
//! Rows may be stored as `f32` or as IEEE half floats (widened to `f32` as they are loaded;
//! the same arithmetic follows), or as int8 codes (x ≈ code · scale + offset): those meet
//! int8-quantised queries in integer arithmetic ([`int8`], with AVX-VNNI where the CPU has
//! it).
//!
//! This module owns arithmetic only: no heaps, no metric semantics (see [`crate::topk`]).

pub mod int8;

pub use int8::QueryCodes;

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
pub struct Isa {
    kind: Kind,
    /// AVX-VNNI (with AVX2): the integer kernel of [`int8`].
    vnni: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// AVX2 + FMA + F16C on x86-64.
    Avx2Fma,
    /// Portable Rust.
    Portable,
}

impl Isa {
    /// The best instruction set this CPU supports.
    pub fn detect() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = std::arch::is_x86_feature_detected!("avx2");
            let vnni = avx2 && std::arch::is_x86_feature_detected!("avxvnni");
            if avx2
                && std::arch::is_x86_feature_detected!("fma")
                && std::arch::is_x86_feature_detected!("f16c")
            {
                return Isa { kind: Kind::Avx2Fma, vnni };
            }
            return Isa { kind: Kind::Portable, vnni };
        }
        #[allow(unreachable_code)]
        Isa::portable()
    }

    /// The portable code, whatever the CPU.
    pub fn portable() -> Isa {
        Isa { kind: Kind::Portable, vnni: false }
    }

    /// This ISA without AVX-VNNI (tests of the AVX2 integer path on CPUs that have it).
    #[cfg(test)]
    pub(crate) fn without_vnni(self) -> Isa {
        Isa { vnni: false, ..self }
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

/// Stored row values, row-major.
#[derive(Debug, Clone, Copy)]
pub enum Rows<'a> {
    /// Single floats.
    F32(&'a [f32]),
    /// IEEE 754 half floats (bit patterns).
    F16(&'a [u16]),
    /// Int8 codes: xᵢ ≈ codeᵢ · scale + offset (summed with quantised queries, see
    /// [`int8`]).
    I8 {
        /// The codes.
        codes: &'a [i8],
        /// Step between codes.
        scale: f32,
        /// Value of code 0.
        offset: f32,
        /// Per row, Σ xⱼ² of its dequantised values ([`int8::squared_norm`]).
        norms: &'a [f32],
    },
    /// Int8 codes with a step and offset per row (a column stored as int8, see
    /// [`crate::stored`]): xᵢ = codeᵢ · scale + offset of its row. With `integer` the rows
    /// meet int8-quantised queries (see [`int8`]: approximate, for ranking); without, each
    /// code is widened to its value as it is loaded and the float arithmetic follows, so
    /// the sums are those of `f32` rows holding the values.
    I8Rows {
        /// Rank with the integer kernel instead of widening.
        integer: bool,
        /// The codes.
        codes: &'a [i8],
        /// Per row, the step between codes.
        scales: &'a [f32],
        /// Per row, the value of code 0.
        offsets: &'a [f32],
        /// Per row, Σ xⱼ² of its values ([`int8::squared_norm`]).
        norms: &'a [f32],
    },
}

impl<'a> Rows<'a> {
    /// Values `start..end` (whole rows, row-major).
    pub fn slice(&self, start: usize, end: usize) -> Rows<'a> {
        match *self {
            Rows::F32(v) => Rows::F32(&v[start..end]),
            Rows::F16(v) => Rows::F16(&v[start..end]),
            Rows::I8 { codes, scale, offset, norms } => {
                // Whole rows: the norms are sliced by row.
                let dim = codes.len() / norms.len().max(1);
                let norms = &norms[start / dim.max(1)..end / dim.max(1)];
                Rows::I8 { codes: &codes[start..end], scale, offset, norms }
            }
            Rows::I8Rows { integer, codes, scales, offsets, norms } => {
                let dim = codes.len() / norms.len().max(1);
                let rows = start / dim.max(1)..end / dim.max(1);
                Rows::I8Rows {
                    integer,
                    codes: &codes[start..end],
                    scales: &scales[rows.clone()],
                    offsets: &offsets[rows.clone()],
                    norms: &norms[rows],
                }
            }
        }
    }

    /// How many values (rows × dimension).
    pub fn len(&self) -> usize {
        match self {
            Rows::F32(v) => v.len(),
            Rows::F16(v) => v.len(),
            Rows::I8 { codes, .. } | Rows::I8Rows { codes, .. } => codes.len(),
        }
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A stored element kind.
pub(crate) trait Elem: Copy {
    /// The value as `f32`.
    fn get(self) -> f32;

    /// Eight values from `p`, widened to `f32`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available and `p` must address 8 readable elements.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self) -> std::arch::x86_64::__m256;
}

impl Elem for f32 {
    #[inline(always)]
    fn get(self) -> f32 {
        self
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: forwarded from the caller.
        unsafe { std::arch::x86_64::_mm256_loadu_ps(p) }
    }
}

impl Elem for u16 {
    #[inline(always)]
    fn get(self) -> f32 {
        half::f16::from_bits(self).to_f32()
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: forwarded from the caller (16 readable bytes, F16C available).
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }
}

/// Rows as the float kernel reads them: a handle per row, values widened to `f32` as they
/// are loaded.
pub(crate) trait Source: Copy {
    /// One row.
    type Row: Copy;

    /// Row `r` (the caller checked it is inside the block).
    fn row(self, r: usize) -> Self::Row;

    /// Value `t` of a row.
    ///
    /// # Safety
    /// `t` must be below the dimension.
    unsafe fn get(row: Self::Row, t: usize) -> f32;

    /// Values `j..j + 8` of a row, widened to `f32`.
    ///
    /// # Safety
    /// AVX2, FMA and F16C must be available and `j + 8` must not exceed the dimension.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(row: Self::Row, j: usize) -> std::arch::x86_64::__m256;

    /// Where row `r`'s bytes start, and how many a row has (for prefetching).
    fn bytes(self, r: usize) -> (*const i8, usize);
}

/// Plain rows of an element kind.
#[derive(Clone, Copy)]
struct Plain<'a, T> {
    v: &'a [T],
    dim: usize,
}

impl<T: Elem> Source for Plain<'_, T> {
    type Row = *const T;

    #[inline(always)]
    fn row(self, r: usize) -> *const T {
        self.v[r * self.dim..].as_ptr()
    }

    #[inline(always)]
    unsafe fn get(row: *const T, t: usize) -> f32 {
        // SAFETY: forwarded from the caller.
        unsafe { (*row.add(t)).get() }
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(row: *const T, j: usize) -> std::arch::x86_64::__m256 {
        // SAFETY: forwarded from the caller.
        unsafe { T::load8(row.add(j)) }
    }

    #[inline(always)]
    fn bytes(self, r: usize) -> (*const i8, usize) {
        let size = self.dim * std::mem::size_of::<T>();
        (self.v.as_ptr().cast::<i8>().wrapping_add(r * size), size)
    }
}

/// Int8 rows with a step and offset each, widened to their values (`offset + code·scale`,
/// one fused multiply-add: the values are exact `f32`s for codes made by
/// [`crate::stored::quantize_row`], so both paths see exactly the dequantised rows).
#[derive(Clone, Copy)]
struct Widened<'a> {
    codes: &'a [i8],
    scales: &'a [f32],
    offsets: &'a [f32],
    dim: usize,
}

impl Source for Widened<'_> {
    type Row = (*const i8, f32, f32);

    #[inline(always)]
    fn row(self, r: usize) -> (*const i8, f32, f32) {
        (self.codes[r * self.dim..].as_ptr(), self.scales[r], self.offsets[r])
    }

    #[inline(always)]
    unsafe fn get((p, scale, offset): (*const i8, f32, f32), t: usize) -> f32 {
        // SAFETY: forwarded from the caller.
        offset + f32::from(unsafe { *p.add(t) }) * scale
    }

    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(
        (p, scale, offset): (*const i8, f32, f32),
        j: usize,
    ) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: forwarded from the caller (8 readable codes from `j`, AVX2 + FMA).
        unsafe {
            let c = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(p.add(j).cast())));
            _mm256_fmadd_ps(c, _mm256_set1_ps(scale), _mm256_set1_ps(offset))
        }
    }

    #[inline(always)]
    fn bytes(self, r: usize) -> (*const i8, usize) {
        (self.codes.as_ptr().wrapping_add(r * self.dim), self.dim)
    }
}

/// The rows a pass reads: `rows` is row-major with `dim` columns; `picks` says which.
#[derive(Debug, Clone, Copy)]
pub struct Block<'a> {
    /// Columns per row.
    pub dim: usize,
    /// Row-major values.
    pub rows: Rows<'a>,
    /// The rows to read.
    pub picks: Picks<'a>,
}

/// Fills `out[i * nq + q]` with the `sum` of picked row `i` (of `rows`, row-major with
/// `dim` columns) and query `q` (of `queries`, `nq = queries.len() / dim` of them), and,
/// when `norms` is given, `norms[i]` with Σ xⱼ² of picked row `i` (accumulated exactly as
/// a [`Sum::Products`] of the row with itself, in the same pass over the row).
///
/// Int8 rows meet the queries quantised to int8 (see [`int8`]: the sums then carry the
/// queries' rounding too); a scan over many blocks quantises once ([`QueryCodes`]) and
/// calls [`int8::sums`] itself.
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
    let pass = Pass { sum, dim, picks, queries };
    match rows {
        Rows::F32(v) => run(isa, pass, Plain { v, dim }, out, norms),
        Rows::F16(v) => run(isa, pass, Plain { v, dim }, out, norms),
        Rows::I8Rows { integer: false, codes, scales, offsets, .. } => {
            run(isa, pass, Widened { codes, scales, offsets, dim }, out, norms)
        }
        Rows::I8 { .. } | Rows::I8Rows { integer: true, .. } => {
            let codes_q = QueryCodes::new(dim, queries);
            if let Some(block) = int8::Codes::of(rows) {
                int8::sums(isa, sum, block, picks, &codes_q, out, norms)
            }
        }
    }
}

/// What one pass computes, apart from the rows and outputs.
#[derive(Clone, Copy)]
struct Pass<'a> {
    sum: Sum,
    dim: usize,
    picks: Picks<'a>,
    queries: &'a [f32],
}

fn run<S: Source>(isa: Isa, pass: Pass<'_>, rows: S, out: &mut [f32], norms: Option<&mut [f32]>) {
    match isa.kind {
        #[cfg(target_arch = "x86_64")]
        Kind::Avx2Fma => {
            // SAFETY: `Kind::Avx2Fma` is only chosen by `Isa::detect` after the CPU reported
            // AVX2, FMA and F16C; every pick indexes a whole row inside `rows`, and `out` /
            // `norms` hold what the picks need (all asserted by `sums`).
            unsafe { avx2::sums(pass, rows, out, norms) }
        }
        _ => portable_sums(pass, rows, out, norms),
    }
}

/// Fills `out[i]` with Σ xⱼ² of picked row `i`, accumulated exactly as [`sums`] accumulates
/// a [`Sum::Products`] of the row with itself.
pub fn squared_norms(isa: Isa, dim: usize, rows: &[f32], picks: Picks<'_>, out: &mut [f32]) {
    assert!(out.len() >= picks.len(), "output too short");
    for i in 0..picks.len() {
        let r = picks.get(i);
        let row = &rows[r * dim..(r + 1) * dim];
        let one = Block { dim, rows: Rows::F32(row), picks: Picks::All(1) };
        sums(isa, Sum::Products, one, row, &mut out[i..i + 1], None);
    }
}

/// The values of half-float bit patterns: with F16C eight at a time, otherwise one by one
/// (the conversion is exact, so both give the same values).
pub fn from_f16(isa: Isa, bits: &[u16], out: &mut [f32]) {
    assert!(out.len() >= bits.len(), "output too short");
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa.kind == Kind::Avx2Fma {
        // SAFETY: `Kind::Avx2Fma` means the CPU reported F16C (see `Isa::detect`); the
        // function reads and writes within the two slices.
        done = unsafe { avx2::from_f16(bits, out) };
    }
    for (o, b) in out[done..].iter_mut().zip(&bits[done..]) {
        *o = half::f16::from_bits(*b).to_f32();
    }
}

/// Converts `values` to IEEE half floats (bit patterns), rounding to nearest even: with
/// F16C eight at a time, otherwise one by one.
pub fn to_f16(isa: Isa, values: &[f32], out: &mut [u16]) {
    assert!(out.len() >= values.len(), "output too short");
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa.kind == Kind::Avx2Fma {
        // SAFETY: `Kind::Avx2Fma` means the CPU reported F16C (see `Isa::detect`); the
        // function reads and writes within the two slices.
        done = unsafe { avx2::to_f16(values, out) };
    }
    for (o, v) in out[done..].iter_mut().zip(&values[done..]) {
        *o = half::f16::from_f32(*v).to_bits();
    }
}

/// Int8 codes of `values`: `round((v − offset) / scale)` (half away from zero) clamped to
/// −127..=127, NaN to 0 — with AVX2 32 at a time, otherwise one by one; both give the same
/// codes.
pub fn to_i8(isa: Isa, values: &[f32], offset: f32, scale: f32, out: &mut [i8]) {
    assert!(out.len() >= values.len(), "output too short");
    let mut done = 0;
    #[cfg(target_arch = "x86_64")]
    if isa.kind == Kind::Avx2Fma {
        // SAFETY: `Kind::Avx2Fma` means the CPU reported AVX2 (see `Isa::detect`); the
        // function reads and writes within the two slices.
        done = unsafe { avx2::to_i8(values, offset, scale, out) };
    }
    for (o, v) in out[done..].iter_mut().zip(&values[done..]) {
        *o = ((v - offset) / scale).round().clamp(-127.0, 127.0) as i8;
    }
}

/// Portable: 8 lanes per pair, summed in the same order as the AVX2 reduction.
fn portable_sums<S: Source>(
    pass: Pass<'_>,
    rows: S,
    out: &mut [f32],
    mut norms: Option<&mut [f32]>,
) {
    let Pass { sum, dim, picks, queries } = pass;
    let nq = queries.len() / dim;
    let body = dim - dim % 8;
    let mut x = vec![0f32; dim];
    for i in 0..picks.len() {
        let row = rows.row(picks.get(i));
        for (t, v) in x.iter_mut().enumerate() {
            // SAFETY: `t < dim`; the pick is inside the block (asserted by `sums`).
            *v = unsafe { S::get(row, t) };
        }
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

    use super::{Pass, Picks, Source, Sum, reduce8};

    /// Converts the first multiple of 8 of `values` to half floats; returns how many.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn to_f16(values: &[f32], out: &mut [u16]) -> usize {
        let n = values.len() - values.len() % 8;
        let mut i = 0;
        while i < n {
            // SAFETY: `i + 8 <= n <= values.len() <= out.len()` (asserted by the caller).
            unsafe {
                let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_loadu_ps(
                    values.as_ptr().add(i),
                ));
                _mm_storeu_si128(out.as_mut_ptr().add(i).cast(), h);
            }
            i += 8;
        }
        n
    }

    /// Widens the first multiple of 8 of `bits`; returns how many.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn from_f16(bits: &[u16], out: &mut [f32]) -> usize {
        let n = bits.len() - bits.len() % 8;
        let mut i = 0;
        while i < n {
            // SAFETY: `i + 8 <= n <= bits.len() <= out.len()` (asserted by the caller).
            unsafe {
                let v = _mm256_cvtph_ps(_mm_loadu_si128(bits.as_ptr().add(i).cast()));
                _mm256_storeu_ps(out.as_mut_ptr().add(i), v);
            }
            i += 8;
        }
        n
    }

    /// [`super::to_i8`] for the first multiple of 32 of `values`; returns how many.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn to_i8(values: &[f32], offset: f32, scale: f32, out: &mut [i8]) -> usize {
        let n = values.len() - values.len() % 32;
        let (off, sc) = (_mm256_set1_ps(offset), _mm256_set1_ps(scale));
        let (half, one) = (_mm256_set1_ps(0.5), _mm256_set1_ps(1.0));
        let (lo, hi) = (_mm256_set1_ps(-127.0), _mm256_set1_ps(127.0));
        let sign = _mm256_set1_ps(-0.0);
        // The 32-bit lanes `packs` leaves interleaved by 128-bit halves, back in order.
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let mut i = 0;
        while i < n {
            let mut ints = [_mm256_setzero_si256(); 4];
            for (k, slot) in ints.iter_mut().enumerate() {
                // SAFETY: `i + 32 <= n <= values.len()`.
                let v = unsafe { _mm256_loadu_ps(values.as_ptr().add(i + 8 * k)) };
                let x = _mm256_div_ps(_mm256_sub_ps(v, off), sc);
                // round(): truncate, then step away from zero when the rest is ≥ 0.5.
                let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x);
                let rest = _mm256_andnot_ps(sign, _mm256_sub_ps(x, t));
                let away = _mm256_or_ps(_mm256_and_ps(x, sign), one);
                let up = _mm256_cmp_ps::<_CMP_GE_OQ>(rest, half);
                let r = _mm256_add_ps(t, _mm256_and_ps(up, away));
                let r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
                // NaN → 0 (`max` / `min` above pass a NaN in `r` through as the bound, so
                // mask on `x`).
                let r = _mm256_and_ps(r, _mm256_cmp_ps::<_CMP_ORD_Q>(x, x));
                *slot = _mm256_cvttps_epi32(r);
            }
            let words = _mm256_packs_epi16(
                _mm256_packs_epi32(ints[0], ints[1]),
                _mm256_packs_epi32(ints[2], ints[3]),
            );
            let bytes = _mm256_permutevar8x32_epi32(words, order);
            // SAFETY: `i + 32 <= n <= out.len()` (asserted by the caller).
            unsafe { _mm256_storeu_si256(out.as_mut_ptr().add(i).cast(), bytes) };
            i += 32;
        }
        n
    }

    /// How far ahead (in rows) a contiguous block is prefetched.
    const PREFETCH_ROWS: usize = 16;

    /// Rows longer than this are read one at a time by a single query. Four long rows side
    /// by side are four interleaved streams the hardware prefetchers follow badly, and a
    /// single query shares no row loads across a tile anyway; short rows side by side are
    /// one stream, and the tile's independent accumulators win. Int8 rows keep their tiles
    /// at every length, and so do two or more queries. Measurements:
    /// `docs/design/vector-kernels.md`.
    const SINGLE_ROW_MIN_BYTES: usize = 512;

    /// See [`super::sums`]; the caller guarantees AVX2 + FMA + F16C and in-bounds picks and
    /// outputs.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn sums<S: Source>(
        pass: Pass<'_>,
        rows: S,
        out: &mut [f32],
        norms: Option<&mut [f32]>,
    ) {
        // SAFETY: forwarded from the caller.
        unsafe {
            match pass.sum {
                Sum::DiffSquares => run::<S, true>(pass, rows, out, norms),
                Sum::Products => run::<S, false>(pass, rows, out, norms),
            }
        }
    }

    /// One pass; `DIFF` chooses Σ (x − q)² over Σ x·q at compile time.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run<S: Source, const DIFF: bool>(
        pass: Pass<'_>,
        rows: S,
        out: &mut [f32],
        mut norms: Option<&mut [f32]>,
    ) {
        let Pass { dim, picks, queries, .. } = pass;
        let nq = queries.len() / dim;
        let n = picks.len();
        let qp = queries.as_ptr();
        if nq == 1 && n > 0 && rows.bytes(0).1 > SINGLE_ROW_MIN_BYTES {
            // One query over long rows: rows one at a time, so the block is read as one
            // forward stream (see `SINGLE_ROW_MIN_BYTES`). Each pair keeps its own
            // accumulator, so the sums are the same as in a tile.
            for i in 0..n {
                let r = [rows.row(picks.get(i))];
                if let Some(nr) = norms.as_deref_mut() {
                    // SAFETY: query 0 exists; the row and the query hold `dim` values.
                    let (s, m) = unsafe { tile::<S, 1, 1, DIFF, true>(dim, r, [qp]) };
                    out[i] = s[0][0];
                    nr[i] = m[0];
                } else {
                    // SAFETY: as above.
                    let (s, _) = unsafe { tile::<S, 1, 1, DIFF, false>(dim, r, [qp]) };
                    out[i] = s[0][0];
                }
            }
            return;
        }
        let mut i = 0;
        while i + 4 <= n {
            // Picks index whole rows inside the block (asserted by the caller).
            let r = [
                rows.row(picks.get(i)),
                rows.row(picks.get(i + 1)),
                rows.row(picks.get(i + 2)),
                rows.row(picks.get(i + 3)),
            ];
            // Ask for the rows a few tiles ahead, so their lines are on the way while these
            // rows compute (hints never fault): one run of a contiguous block, or the four
            // picked rows as four runs (picks in order still jump from row to row, which
            // the hardware does not follow: over picks of every row of 1M × 128 floats
            // the scan took ≈ 1.5× the contiguous time without them). The lines are
            // spread over the group's query tiles: issued in one burst they fill the
            // core's miss buffers and stall it, so a batch's arithmetic waited for memory
            // instead of overlapping it.
            let mut runs = [(std::ptr::null::<i8>(), 0usize); 4];
            let mut step = 0;
            if i + 4 + PREFETCH_ROWS <= n {
                // The addresses are inside the block (the picks up to `n` are).
                let (at, row_bytes) = rows.bytes(picks.get(i + PREFETCH_ROWS));
                match picks {
                    Picks::All(_) => runs[0] = (at, 4 * row_bytes),
                    Picks::Some(_) => {
                        for (a, run) in runs.iter_mut().enumerate() {
                            *run = (rows.bytes(picks.get(i + PREFETCH_ROWS + a)).0, row_bytes);
                        }
                    }
                }
                // The tiles below: the first query alone with the norms, then pairs, then
                // one left over.
                let first = usize::from(norms.is_some());
                let tiles = first + (nq - first).div_ceil(2);
                step = (4 * row_bytes).div_ceil(64 * tiles) * 64;
            }
            let mut prefetch = || {
                let mut budget = step;
                for (at, left) in runs.iter_mut() {
                    while budget > 0 && *left > 0 {
                        // Prefetching is a hint that never faults.
                        _mm_prefetch::<_MM_HINT_T0>(*at);
                        *at = at.wrapping_add(64);
                        *left = left.saturating_sub(64);
                        budget -= 64;
                    }
                }
            };
            let mut q = 0;
            if let Some(nr) = norms.as_deref_mut() {
                prefetch();
                // The first query alone, with the rows' norms in the same pass.
                // SAFETY: query 0 exists; every pointer addresses `dim` readable values.
                let (s, m) = unsafe { tile::<S, 4, 1, DIFF, true>(dim, r, [qp]) };
                for a in 0..4 {
                    out[(i + a) * nq] = s[a][0];
                    nr[i + a] = m[a];
                }
                q = 1;
            }
            while q + 2 <= nq {
                prefetch();
                // SAFETY: queries q and q + 1 exist (q + 2 <= nq).
                let qs = unsafe { [qp.add(q * dim), qp.add((q + 1) * dim)] };
                // SAFETY: every pointer addresses `dim` readable values.
                let (s, _) = unsafe { tile::<S, 4, 2, DIFF, false>(dim, r, qs) };
                for (a, row) in s.iter().enumerate() {
                    out[(i + a) * nq + q] = row[0];
                    out[(i + a) * nq + q + 1] = row[1];
                }
                q += 2;
            }
            if q < nq {
                prefetch();
                // SAFETY: query q exists.
                let qs = unsafe { [qp.add(q * dim)] };
                // SAFETY: as above.
                let (s, _) = unsafe { tile::<S, 4, 1, DIFF, false>(dim, r, qs) };
                for (a, row) in s.iter().enumerate() {
                    out[(i + a) * nq + q] = row[0];
                }
            }
            i += 4;
        }
        while i < n {
            // The pick indexes a whole row inside the block.
            let r = [rows.row(picks.get(i))];
            for q in 0..nq {
                // SAFETY: query q exists; the row and the query hold `dim` values.
                let (s, m) = unsafe { tile::<S, 1, 1, DIFF, true>(dim, r, [qp.add(q * dim)]) };
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
    /// AVX2 + FMA + F16C must be available and every pointer must address `dim` readable
    /// values.
    #[inline(always)]
    unsafe fn tile<
        S: Source,
        const R: usize,
        const Q: usize,
        const DIFF: bool,
        const NORMS: bool,
    >(
        dim: usize,
        rows: [S::Row; R],
        qs: [*const f32; Q],
    ) -> ([[f32; Q]; R], [f32; R]) {
        // SAFETY: the caller guarantees the CPU features and that every pointer reads `dim`
        // values; loads stay below `body <= dim`, the tail below `dim`.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); Q]; R];
            let mut nrm = [_mm256_setzero_ps(); R];
            let body = dim - dim % 8;
            let mut j = 0;
            while j < body {
                let mut x = [_mm256_setzero_ps(); R];
                for r in 0..R {
                    x[r] = S::load8(rows[r], j);
                    if NORMS {
                        nrm[r] = _mm256_fmadd_ps(x[r], x[r], nrm[r]);
                    }
                }
                for q in 0..Q {
                    let y = _mm256_loadu_ps(qs[q].add(j));
                    for r in 0..R {
                        acc[r][q] = if DIFF {
                            let diff = _mm256_sub_ps(x[r], y);
                            _mm256_fmadd_ps(diff, diff, acc[r][q])
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
                        let (a, b) = (S::get(rows[r], t), *qs[q].add(t));
                        s += if DIFF { (a - b) * (a - b) } else { a * b };
                    }
                    out[r][q] = s;
                }
                if NORMS {
                    _mm256_storeu_ps(lanes.as_mut_ptr(), nrm[r]);
                    let mut s = reduce8(lanes);
                    for t in body..dim {
                        let a = S::get(rows[r], t);
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
                Block { dim, rows: Rows::F32(rows), picks: Picks::Some(picks) },
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
                Block { dim, rows: Rows::F32(rows), picks: Picks::Some(picks) },
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
                    sums(
                        isa,
                        sum,
                        Block { dim, rows: Rows::F32(x), picks: Picks::All(1) },
                        y,
                        &mut one,
                        None,
                    );
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
    fn one_query_over_long_rows_sums_as_in_a_batch() {
        // Rows longer than 512 bytes are walked one at a time by a query alone and in
        // tiles by a batch: the same bits either way, norms included, and the reference's
        // values. Half-float rows of 129 / 200 values stay in tiles, of 384 do not. Enough
        // rows and picks (out of order, repeated) for the tiles to prefetch ahead.
        let isa = Isa::detect();
        for dim in [129usize, 200, 384] {
            let nrows = 40;
            let rows: Vec<f32> =
                (0..nrows * dim).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013).collect();
            let halves: Vec<u16> = rows.iter().map(|v| half::f16::from_f32(*v).to_bits()).collect();
            let queries: Vec<f32> =
                (0..3 * dim).map(|i| ((i * 53 % 89) as f32 - 44.0) * 0.021).collect();
            let picked: Vec<u32> = (0..30u32).map(|i| i * 7 % 40).chain([8, 0, 3, 3, 5]).collect();
            for stored in [Rows::F32(&rows), Rows::F16(&halves)] {
                for sum in [Sum::DiffSquares, Sum::Products] {
                    for picks in [Picks::All(nrows), Picks::Some(&picked)] {
                        let n = picks.len();
                        let block = Block { dim, rows: stored, picks };
                        let (mut batch, mut batch_norms) = (vec![0f32; n * 3], vec![0f32; n]);
                        sums(isa, sum, block, &queries, &mut batch, Some(&mut batch_norms));
                        let (mut one, mut one_norms) = (vec![0f32; n], vec![0f32; n]);
                        sums(isa, sum, block, &queries[..dim], &mut one, Some(&mut one_norms));
                        let mut plain = vec![0f32; n];
                        sums(isa, sum, block, &queries[..dim], &mut plain, None);
                        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                        let first: Vec<f32> = batch.chunks_exact(3).map(|c| c[0]).collect();
                        assert_eq!(bits(&one), bits(&first), "dim {dim} {sum:?}");
                        assert_eq!(bits(&one_norms), bits(&batch_norms), "dim {dim} norms");
                        assert_eq!(bits(&plain), bits(&one), "dim {dim} without norms");
                        if let Rows::F32(_) = stored {
                            for (i, got) in one.iter().enumerate() {
                                let r = picks.get(i);
                                let (x, y) = (&rows[r * dim..(r + 1) * dim], &queries[..dim]);
                                let want = match sum {
                                    Sum::DiffSquares => {
                                        reference_distance(Metric::L2Squared, x, y).unwrap()
                                    }
                                    Sum::Products => {
                                        -reference_distance(Metric::Dot, x, y).unwrap()
                                    }
                                };
                                assert!((want - f64::from(*got)).abs() <= 1e-4 * dim as f64);
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn half_conversion_matches_the_reference_conversion() {
        let values: Vec<f32> = (0..1000)
            .map(|i| (i as f32 - 500.0) * 131.7)
            .chain([f32::NAN, f32::INFINITY, -0.0, 1e-8, 65504.0, 65520.0, 1e6])
            .collect();
        for isa in [Isa::detect(), Isa::portable()] {
            let mut out = vec![0u16; values.len()];
            to_f16(isa, &values, &mut out);
            for (v, h) in values.iter().zip(&out) {
                let want = half::f16::from_f32(*v);
                assert!(
                    want.to_bits() == *h || (want.is_nan() && half::f16::from_bits(*h).is_nan()),
                    "{v}: {h:#x} vs {:#x}",
                    want.to_bits()
                );
            }
        }
    }

    #[test]
    fn int8_codes_are_the_same_on_both_paths() {
        let values: Vec<f32> = (0..2000)
            .map(|i| (i as f32 - 1000.0) * 0.0173)
            .chain([f32::NAN, f32::INFINITY, f32::NEG_INFINITY, -0.0, 0.5, -0.5, 1.5, 2.5])
            .chain((0..100).map(|i| i as f32 * 0.5 - 25.0))
            .collect();
        for (offset, scale) in [(0.0, 1.0), (0.3, 0.1), (-1.0, 0.5), (2.0, 0.0173)] {
            let mut a = vec![0i8; values.len()];
            let mut b = vec![0i8; values.len()];
            to_i8(Isa::detect(), &values, offset, scale, &mut a);
            to_i8(Isa::portable(), &values, offset, scale, &mut b);
            assert_eq!(a, b, "offset {offset} scale {scale}");
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
