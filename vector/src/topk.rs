//! Exact top-k: validated query sets, bounded heaps, the block scan and the final ranking.
//! Owns the metric semantics of a scan (scores, zero-norm rows, NaN, ties); must not know
//! where blocks come from (storage hands them in) nor run threads (callers scan blocks in
//! parallel, one heap set each, and [`TopK::merge`] the results).

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use crate::kernel::{self, Block, Isa, Picks, QueryCodes, Rows, Sum};
use crate::{Error, Metric, Result};

/// One result: a row's `_id` and its distance to the query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Neighbor {
    /// The row's `_id`.
    pub id: u64,
    /// Its distance under the search's metric.
    pub distance: f32,
}

/// A set of queries, validated and prepared for one metric and dimension.
#[derive(Debug, Clone)]
pub struct Queries {
    metric: Metric,
    dim: usize,
    /// Row-major `count × dim`.
    data: Vec<f32>,
    /// Lengths ‖q‖ (cosine only, else empty).
    lengths: Vec<f32>,
    isa: Isa,
    /// The queries quantised for int8 rows, made on the first scan of such rows.
    codes: std::sync::OnceLock<QueryCodes>,
}

impl Queries {
    /// Validates the queries: at least one, each of dimension `dim` (≥ 1), finite
    /// components, non-zero under cosine.
    pub fn new(metric: Metric, dim: usize, queries: &[&[f32]]) -> Result<Queries> {
        if dim == 0 {
            return Err(Error::Empty("vector dimension must be at least 1"));
        }
        if queries.is_empty() {
            return Err(Error::Empty("no query vectors given"));
        }
        let mut data = Vec::with_capacity(queries.len() * dim);
        for (query, q) in queries.iter().enumerate() {
            if q.len() != dim {
                return Err(Error::Dimension { query, expected: dim, found: q.len() });
            }
            if let Some((index, &value)) = q.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                return Err(Error::NonFinite { query, index, value });
            }
            if metric == Metric::Cosine && q.iter().all(|v| *v == 0.0) {
                return Err(Error::ZeroVector { query });
            }
            data.extend_from_slice(q);
        }
        let isa = Isa::detect();
        let mut lengths = Vec::new();
        if metric == Metric::Cosine {
            lengths = vec![0.0; queries.len()];
            kernel::squared_norms(isa, dim, &data, Picks::All(queries.len()), &mut lengths);
            for l in &mut lengths {
                *l = l.sqrt();
            }
        }
        Ok(Queries { metric, dim, data, lengths, isa, codes: Default::default() })
    }

    /// The metric.
    pub fn metric(&self) -> Metric {
        self.metric
    }

    /// The dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// How many queries.
    pub fn len(&self) -> usize {
        self.data.len() / self.dim
    }

    /// Never true: a query set holds at least one query.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Query `i` alone, as its own set (for rescoring its candidates).
    pub fn one(&self, i: usize) -> Option<Queries> {
        let data = self.data.get(i * self.dim..(i + 1) * self.dim)?.to_vec();
        let lengths = self.lengths.get(i).map(|n| vec![*n]).unwrap_or_default();
        let (metric, dim, isa) = (self.metric, self.dim, self.isa);
        Some(Queries { metric, dim, data, lengths, isa, codes: Default::default() })
    }

    /// The kernel's sums of a block with these queries (int8 rows meet the queries'
    /// codes, quantised once per query set).
    fn sums(&self, sum: Sum, block: Block<'_>, out: &mut [f32], norms: Option<&mut [f32]>) {
        match kernel::int8::Codes::of(block.rows) {
            Some(rows) => {
                let q = self.codes.get_or_init(|| QueryCodes::new(self.dim, &self.data));
                kernel::int8::sums(self.isa, sum, rows, block.picks, q, out, norms);
            }
            None => kernel::sums(self.isa, sum, block, &self.data, out, norms),
        }
    }

    /// One empty heap per query.
    pub fn heaps(&self, k: usize) -> Vec<TopK> {
        (0..self.len()).map(|_| TopK::new(k)).collect()
    }

    /// Turns each query's heap into its neighbours, closest first (ties: smaller `_id`).
    pub fn finish(&self, heaps: Vec<TopK>) -> Vec<Vec<Neighbor>> {
        heaps
            .into_iter()
            .map(|h| {
                let mut v = h.heap.into_vec();
                v.sort_unstable();
                v.into_iter()
                    .map(|e| Neighbor {
                        id: e.id,
                        distance: if self.metric == Metric::L2 { e.score.sqrt() } else { e.score },
                    })
                    .collect()
            })
            .collect()
    }
}

/// A heap entry: ordered by score, then `_id` (total order; NaN never enters).
#[derive(Debug, Clone, Copy)]
struct Entry {
    score: f32,
    id: u64,
}

impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then(self.id.cmp(&o.id))
    }
}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Entry {}

/// The `k` best (smallest score, then smallest `_id`) rows seen so far for one query.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Entry>,
    /// Candidates offered that have no distance (NaN, zero vectors under cosine).
    unranked: u64,
}

impl TopK {
    /// An empty heap keeping at most `k` rows.
    pub fn new(k: usize) -> TopK {
        TopK { k, heap: BinaryHeap::with_capacity(k.min(1 << 16) + 1), unranked: 0 }
    }

    /// How many candidates had no distance: NaN scores and zero vectors under cosine. SQL
    /// sorts such rows after (or before) every distance, so a caller answering an
    /// `ORDER BY` needs to know whether there were any. (A heap with `k = 0` sees no
    /// candidates and counts none.)
    pub fn unranked(&self) -> u64 {
        self.unranked
    }

    /// The most rows it keeps.
    pub fn k(&self) -> usize {
        self.k
    }

    /// How many rows it holds.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The score a row must not exceed to enter: the worst kept one once `k` rows are
    /// kept, +∞ before.
    #[inline]
    pub fn worst(&self) -> f32 {
        match self.heap.peek() {
            Some(e) if self.heap.len() >= self.k => e.score,
            _ => f32::INFINITY,
        }
    }

    /// Offers a row; NaN scores are never kept. −0 counts as +0 (a tie, broken by `_id`).
    #[inline]
    pub fn offer(&mut self, score: f32, id: u64) {
        if score.is_nan() {
            self.unranked += 1;
            return;
        }
        let e = Entry { score: score + 0.0, id };
        if self.heap.len() < self.k {
            self.heap.push(e);
        } else if let Some(mut top) = self.heap.peek_mut()
            && e < *top
        {
            *top = e;
        }
    }

    /// The rows kept, as (score, id) in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (f32, u64)> + '_ {
        self.heap.iter().map(|e| (e.score, e.id))
    }

    /// Takes in another heap's rows (of the same query, from other blocks).
    pub fn merge(&mut self, other: TopK) {
        self.unranked += other.unranked;
        for e in other.heap {
            self.offer(e.score, e.id);
        }
    }
}

/// Rows per kernel call: the sums of one chunk stay in L1.
const CHUNK: usize = 256;

/// Rows whose scores are compared with the heaps' bars in one flat loop.
const GROUP: usize = 8;

/// Scans one block of rows for every query: `rows` is row-major with the queries'
/// dimension, `ids[r]` is row `r`'s `_id`, `picks` the candidate rows (a filter's
/// selection, live non-NULL rows); `heaps` has one heap per query.
///
/// Panics if `rows` and `ids` disagree in length, a pick is outside the block, or `heaps`
/// does not have one heap per query (caller bugs, not bad input).
pub fn search_block(
    queries: &Queries,
    rows: &[f32],
    ids: &[u64],
    picks: Picks<'_>,
    heaps: &mut [TopK],
) {
    search_rows(queries, Rows::F32(rows), ids, picks, heaps);
}

/// [`search_block`] over rows stored in any [`Rows`] kind (half floats and int8 codes give
/// approximate scores, to be rescored on the `f32` rows).
pub fn search_rows(
    queries: &Queries,
    rows: Rows<'_>,
    ids: &[u64],
    picks: Picks<'_>,
    heaps: &mut [TopK],
) {
    assert_eq!(rows.len(), ids.len() * queries.dim, "rows and ids disagree");
    scan(queries, rows, |r| ids[r], picks, heaps);
}

/// [`search_rows`] with each row's position in the block (0, 1, …) as its id: ranks a
/// block's rows to pick candidates for rescoring, without a list of positions to read.
///
/// Panics if `rows` is not whole rows of the queries' dimension or a pick is outside it.
pub fn search_positions(queries: &Queries, rows: Rows<'_>, picks: Picks<'_>, heaps: &mut [TopK]) {
    assert!(rows.len().is_multiple_of(queries.dim), "rows are not whole vectors");
    scan(queries, rows, |r| r as u64, picks, heaps);
}

fn scan(
    queries: &Queries,
    rows: Rows<'_>,
    id_of: impl Fn(usize) -> u64,
    picks: Picks<'_>,
    heaps: &mut [TopK],
) {
    let (dim, nq) = (queries.dim, queries.len());
    assert_eq!(heaps.len(), nq, "one heap per query");
    if heaps.iter().all(|h| h.k == 0) {
        return;
    }
    let sum = match queries.metric {
        Metric::L2 | Metric::L2Squared => Sum::DiffSquares,
        Metric::Dot | Metric::Cosine => Sum::Products,
    };
    let cosine = queries.metric == Metric::Cosine;
    let mut out = vec![0f32; CHUNK.min(picks.len()) * nq];
    let mut norms = vec![0f32; if cosine { CHUNK.min(picks.len()) } else { 0 }];
    // Cosine with several queries: each row's ‖x‖ of a chunk.
    let mut roots = vec![0f32; if cosine && nq > 1 { norms.len() } else { 0 }];
    // Per (row of a group, query): the score a pair must not exceed to enter its heap.
    let mut bar: Vec<f32> = heaps.iter().map(TopK::worst).collect::<Vec<_>>().repeat(GROUP);
    let mut start = 0;
    while start < picks.len() {
        let n = CHUNK.min(picks.len() - start);
        let chunk_picks: Vec<u32>;
        let nr = if cosine { Some(&mut norms[..n]) } else { None };
        let chunk = match picks {
            Picks::All(_) => {
                // Contiguous rows: hand the kernel the sub-slice.
                let sub = rows.slice(start * dim, (start + n) * dim);
                queries.sums(sum, Block { dim, rows: sub, picks: Picks::All(n) }, &mut out, nr);
                None
            }
            Picks::Some(all) => {
                chunk_picks = all[start..start + n].to_vec();
                let p = Picks::Some(&chunk_picks);
                queries.sums(sum, Block { dim, rows, picks: p }, &mut out, nr);
                Some(&chunk_picks)
            }
        };
        let row_of = |i: usize| chunk.map_or(start + i, |c| c[i] as usize);
        if cosine {
            // The chunk's sums become distances 1 − x·q / (‖x‖·‖q‖) in flat loops over the
            // rows the compiler vectorises (square roots and divisions four or eight at a
            // time, not one row's scalar `sqrtss` + `divss` after another: those were a
            // quarter of an int8 scan's time outside the kernel). One square root per row,
            // not per pair; the same operations in the same order as row by row, so the
            // distances are bit for bit the same. (Zero rows divide by zero here and are
            // counted as unranked below.)
            if let [qn] = queries.lengths[..] {
                for (s, x) in out[..n].iter_mut().zip(&norms[..n]) {
                    *s = 1.0 - *s / (x.sqrt() * qn);
                }
            } else {
                for (r, x) in roots[..n].iter_mut().zip(&norms[..n]) {
                    *r = x.sqrt();
                }
                for (row, r) in out[..n * nq].chunks_exact_mut(nq).zip(&roots[..n]) {
                    for (s, qn) in row.iter_mut().zip(&queries.lengths) {
                        *s = 1.0 - *s / (r * qn);
                    }
                }
            }
        }
        if queries.metric == Metric::Dot {
            // Scores are negated products (closest = largest product).
            for s in &mut out[..n * nq] {
                *s = -*s;
            }
        }
        // Rows scoring above a heap's worst cannot enter. Rows go `GROUP` at a time: one
        // flat comparison of the group's scores with each pair's bar (the vectorised
        // common case: nothing enters), and only a group with a candidate, a NaN score or
        // a zero row under cosine is walked pair by pair. (The heaps keep the `k` smallest
        // (score, id) pairs, so the order rows are offered in does not matter.)
        let mut i = 0;
        while i < n {
            let g = GROUP.min(n - i);
            let scores = &out[i * nq..(i + g) * nq];
            // A candidate, or NaN (which the heap counts as unranked).
            let mut hit =
                scores.iter().zip(&bar).fold(false, |a, (s, w)| a | (*s <= *w) | s.is_nan());
            if cosine {
                hit |= norms[i..i + g].iter().fold(false, |a, x| a | (*x == 0.0));
            }
            if hit {
                for (r, scores) in scores.chunks_exact(nq).enumerate() {
                    if cosine && norms[i + r] == 0.0 {
                        for heap in heaps.iter_mut() {
                            heap.unranked += 1;
                        }
                        continue;
                    }
                    for (q, &score) in scores.iter().enumerate() {
                        if score > bar[q] {
                            continue;
                        }
                        heaps[q].offer(score, id_of(row_of(i + r)));
                        let w = heaps[q].worst();
                        for b in bar[q..].iter_mut().step_by(nq) {
                            *b = w;
                        }
                    }
                }
            }
            i += g;
        }
        start += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference_distance;
    use proptest::prelude::*;

    /// Brute force in f64: every (distance, id) of the candidates, sorted.
    fn brute(
        m: Metric,
        dim: usize,
        rows: &[f32],
        ids: &[u64],
        picks: &[u32],
        q: &[f32],
    ) -> Vec<(f64, u64)> {
        let mut v: Vec<(f64, u64)> = picks
            .iter()
            .filter_map(|&p| {
                let x = &rows[p as usize * dim..(p as usize + 1) * dim];
                // + 0.0: −0 and +0 tie (broken by id), as in the heap.
                reference_distance(m, x, q)
                    .filter(|d| !d.is_nan())
                    .map(|d| (d + 0.0, ids[p as usize]))
            })
            .collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        v
    }

    /// The top-k matches the reference: same length; each rank's distance within `tol` of
    /// the reference's at that rank, and each id's reference distance within `tol` of the
    /// distance returned for it (so only near-ties may swap).
    /// With `exact` (sums exact in `f32`: grid values under L2 / dot) ids must match too.
    fn agrees(
        got: &[Neighbor],
        all: &[(f64, u64)],
        k: usize,
        tol: f64,
        exact: bool,
    ) -> std::result::Result<(), String> {
        let want = &all[..k.min(all.len())];
        if got.len() != want.len() {
            return Err(format!("{} results, expected {}", got.len(), want.len()));
        }
        for (g, w) in got.iter().zip(want) {
            if (f64::from(g.distance) - w.0).abs() > tol {
                return Err(format!("distance {} vs {}", g.distance, w.0));
            }
            // The id returned really is that far away.
            match all.iter().find(|(_, id)| *id == g.id) {
                Some((d, _)) if (d - f64::from(g.distance)).abs() <= tol => {}
                other => {
                    return Err(format!(
                        "id {} returned at {}, reference {other:?}",
                        g.id, g.distance
                    ));
                }
            }
            if exact && g.id != w.1 {
                return Err(format!("id {} where the reference has {}", g.id, w.1));
            }
        }
        Ok(())
    }

    proptest! {
        #[test]
        fn top_k_equals_brute_force_and_batches_equal_single_queries(
            dim in 1usize..20,
            nrows in 0usize..300,
            k in 0usize..12,
            nq in 1usize..4,
            seed in any::<u64>(),
            filtered in any::<bool>(),
        ) {
            // A small deterministic generator: values on a coarse grid make exact ties.
            let mut s = seed | 1;
            let mut next = || { s ^= s << 13; s ^= s >> 7; s ^= s << 17; ((s >> 40) % 9) as f32 * 0.5 - 2.0 };
            let rows: Vec<f32> = (0..nrows * dim).map(|_| next()).collect();
            let ids: Vec<u64> = (0..nrows as u64).map(|i| i * 3 + 1).collect();
            let mut qv: Vec<Vec<f32>> = (0..nq).map(|_| (0..dim).map(|_| next()).collect()).collect();
            for q in &mut qv { if q.iter().all(|v| *v == 0.0) { q[0] = 1.0; } }
            let picks: Vec<u32> = if filtered {
                (0..nrows as u32).filter(|r| r % 3 != 1).collect()
            } else {
                (0..nrows as u32).collect()
            };
            for m in Metric::ALL {
                let refs: Vec<&[f32]> = qv.iter().map(|q| q.as_slice()).collect();
                let queries = Queries::new(m, dim, &refs).unwrap();
                let mut heaps = queries.heaps(k);
                let p = if filtered { Picks::Some(&picks) } else { Picks::All(nrows) };
                // Two blocks, merged, as storage scans row groups.
                let half = nrows / 2;
                if filtered {
                    search_block(&queries, &rows, &ids, p, &mut heaps);
                } else {
                    let mut h2 = queries.heaps(k);
                    search_block(&queries, &rows[..half * dim], &ids[..half], Picks::All(half), &mut heaps);
                    search_block(&queries, &rows[half * dim..], &ids[half..], Picks::All(nrows - half), &mut h2);
                    for (a, b) in heaps.iter_mut().zip(h2) { a.merge(b); }
                }
                let batch = queries.finish(heaps);
                for (qi, q) in qv.iter().enumerate() {
                    let want = brute(m, dim, &rows, &ids, &picks, q);
                    let r = agrees(&batch[qi], &want, k, 1e-3 * dim as f64, m != Metric::Cosine);
                    prop_assert!(r.is_ok(), "{m} query {qi}: {r:?}");
                    let single = Queries::new(m, dim, &[q]).unwrap();
                    let mut h = single.heaps(k);
                    search_block(&single, &rows, &ids, p, &mut h);
                    let one = single.finish(h);
                    prop_assert_eq!(&one[0], &batch[qi], "{} batch vs single", m);
                }
            }
        }
    }

    #[test]
    fn rows_without_a_distance_count_wherever_they_fall() {
        // 700 rows (chunks and groups with a tail) and k = 3, so the heaps fill early and
        // most groups are passed over by the flat comparison; zero rows and rows holding a
        // NaN are scattered among them.
        let (dim, n) = (4usize, 700usize);
        let mut s = 99u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        };
        let mut rows: Vec<f32> = (0..n * dim).map(|_| next()).collect();
        let (mut zeros, mut nans) = (0u64, 0u64);
        for r in 0..n {
            if r % 37 == 5 {
                rows[r * dim..(r + 1) * dim].fill(0.0);
                zeros += 1;
            } else if r % 53 == 7 {
                rows[r * dim + 1] = f32::NAN;
                nans += 1;
            }
        }
        let ids: Vec<u64> = (0..n as u64).map(|i| i + 1).collect();
        let all: Vec<u32> = (0..n as u32).collect();
        let qv = [[1.0f32, -0.5, 0.25, 2.0], [-1.0, 0.5, 1.5, 0.0]];
        for m in Metric::ALL {
            let q = Queries::new(m, dim, &[&qv[0], &qv[1]]).unwrap();
            for picks in [Picks::All(n), Picks::Some(&all)] {
                let mut h = q.heaps(3);
                search_block(&q, &rows, &ids, picks, &mut h);
                let unranked = nans + if m == Metric::Cosine { zeros } else { 0 };
                for heap in &h {
                    assert_eq!(heap.unranked(), unranked, "{m}");
                }
                let got = q.finish(h);
                for (qi, qq) in qv.iter().enumerate() {
                    let want = brute(m, dim, &rows, &ids, &all, qq);
                    let r = agrees(&got[qi], &want, 3, 1e-4, false);
                    assert!(r.is_ok(), "{m} query {qi}: {r:?}");
                }
            }
        }
    }

    #[test]
    fn exact_ties_break_by_the_smaller_id() {
        let rows = vec![1.0f32, 0.0, 1.0, 0.0, 1.0, 0.0, 5.0, 5.0];
        let ids = [40u64, 7, 19, 2];
        let q = Queries::new(Metric::L2, 2, &[&[1.0, 0.0]]).unwrap();
        let mut h = q.heaps(2);
        search_block(&q, &rows, &ids, Picks::All(4), &mut h);
        let got = q.finish(h);
        assert_eq!(
            got[0],
            vec![Neighbor { id: 7, distance: 0.0 }, Neighbor { id: 19, distance: 0.0 }]
        );
        // By position: the same rows, named 0..4.
        let mut h = q.heaps(2);
        search_positions(&q, Rows::F32(&rows), Picks::Some(&[3, 2, 1]), &mut h);
        let got = q.finish(h);
        assert_eq!(
            got[0],
            vec![Neighbor { id: 1, distance: 0.0 }, Neighbor { id: 2, distance: 0.0 }]
        );
    }

    #[test]
    fn bad_queries_are_typed_errors() {
        assert!(matches!(
            Queries::new(Metric::L2, 3, &[&[1.0, 2.0]]),
            Err(Error::Dimension { expected: 3, found: 2, .. })
        ));
        assert!(matches!(
            Queries::new(Metric::Dot, 2, &[&[1.0, 2.0], &[f32::NAN, 0.0]]),
            Err(Error::NonFinite { query: 1, index: 0, .. })
        ));
        assert!(matches!(
            Queries::new(Metric::L2, 1, &[&[f32::INFINITY]]),
            Err(Error::NonFinite { .. })
        ));
        assert!(matches!(
            Queries::new(Metric::Cosine, 2, &[&[0.0, 0.0]]),
            Err(Error::ZeroVector { query: 0 })
        ));
        assert!(matches!(Queries::new(Metric::L2, 2, &[]), Err(Error::Empty(_))));
        assert!(matches!(Queries::new(Metric::L2, 0, &[&[]]), Err(Error::Empty(_))));
    }

    #[test]
    fn zero_rows_are_skipped_under_cosine_and_nan_rows_always() {
        let rows = vec![0.0f32, 0.0, 1.0, 1.0, f32::NAN, 1.0];
        let ids = [1u64, 2, 3];
        for (m, want) in [(Metric::Cosine, vec![2u64]), (Metric::L2, vec![2, 1])] {
            let q = Queries::new(m, 2, &[&[1.0, 1.0]]).unwrap();
            let mut h = q.heaps(10);
            search_block(&q, &rows, &ids, Picks::All(3), &mut h);
            // Cosine: the zero row and the NaN row; L2: the NaN row.
            let unranked = if m == Metric::Cosine { 2 } else { 1 };
            assert_eq!(h[0].unranked(), unranked, "{m}");
            let got: Vec<u64> = q.finish(h)[0].iter().map(|n| n.id).collect();
            assert_eq!(got, want, "{m}");
        }
    }
}
