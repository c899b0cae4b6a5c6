//! Exact vector top-k over a table snapshot ([`TableSnapshot::vector_topk`]).
//!
//! Owns the walk over a table's rows for a vector search: row groups and memtable batches
//! in parallel (rayon); deleted rows, NULL vectors and rows a filter rejects are removed from
//! the candidates before any distance is computed; zone maps skip row groups a filter rules
//! out. Vector chunks are never compressed, so a row group's vectors are read in place from
//! the mapped segment file. The arithmetic, heaps and metric semantics are
//! `basalt_vector`'s; this module must not compute distances itself.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, FixedSizeListArray, UInt64Array};
use arrow_buffer::BooleanBuffer;
use basalt_vector::kernel::{Picks, Rows};
use basalt_vector::{
    Metric, Neighbor, Precision, Quantization, Queries, RowCodes, TopK, search_block,
    search_positions, search_rows,
};
use rayon::prelude::*;

use super::{ScanUnit, TableSnapshot};
use crate::encoding::DecodeMode;
use crate::error::{Error, Result};
use crate::predicate::Predicate;

/// A block's quantised copy to rank on, and how many candidates to rescore.
struct Quant<'a> {
    source: QuantSource<'a>,
    kind: Quantization,
    candidates: usize,
}

/// Where a block's quantised copy is kept.
enum QuantSource<'a> {
    /// The part of chunk (`rg`, `pos`) of a segment from row `start`.
    Segment { segment: &'a crate::segment::Segment, rg: usize, pos: usize, start: usize },
    /// Column `col` of a memtable batch.
    Memtable { batch: &'a crate::memtable::MemBatch, col: usize },
}

impl Quant<'_> {
    /// The copy of `rows` (the block's `f32` values, `dim` per row), built on first use
    /// and kept.
    fn copy(&self, rows: &[f32], dim: usize) -> Arc<basalt_vector::Quantized> {
        match self.source {
            QuantSource::Segment { segment, rg, pos, start } => {
                segment.quantized(rg, pos, start, self.kind, rows, dim)
            }
            QuantSource::Memtable { batch, col } => batch.quantized(col, self.kind, rows, dim),
        }
    }
}

/// A unit of a vector search: a part of a row group (rows `start..start + len`), or one
/// memtable batch.
#[derive(Debug, Clone, Copy)]
enum KnnUnit {
    RowGroup { segment: usize, rg: usize, start: usize, len: usize },
    MemBatch(usize),
}

/// Fewest rows in a part of a row group (see [`TableSnapshot::vector_search_with`]).
const MIN_PART_ROWS: usize = 8 * 1024;

/// What [`TableSnapshot::vector_search`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct VectorSearch {
    /// Per query, the closest rows, closest first.
    pub neighbors: Vec<Vec<Neighbor>>,
    /// Per query, how many candidates with a vector had no distance: a zero vector under
    /// cosine, or a NaN distance (0 when `k = 0`: nothing is scanned).
    pub no_distance: Vec<u64>,
    /// How many candidates had a NULL vector (0 when `k = 0`).
    pub null_vectors: u64,
}

impl TableSnapshot {
    /// The `k` rows closest to each query vector in the `VECTOR(D)` column `column` under
    /// `metric`, closest first (ties: smaller `_id`), among the rows where `predicate` is
    /// true (every row for `None`). One list per query; a batch of queries reads each
    /// row group once. Rows with a NULL vector are never returned, nor rows without a
    /// distance (see `basalt_vector`'s semantics: zero vectors under cosine, NaN).
    ///
    /// Errors: an unknown or non-vector column, queries of the wrong dimension, with NaN or
    /// infinite components, a zero query under cosine, no queries.
    pub fn vector_topk(
        self: &Arc<Self>,
        column: &str,
        queries: &[&[f32]],
        k: usize,
        metric: Metric,
        predicate: Option<&Predicate>,
    ) -> Result<Vec<Vec<Neighbor>>> {
        Ok(self.vector_search(column, queries, k, metric, predicate)?.neighbors)
    }

    /// [`TableSnapshot::vector_topk`], also counting the candidates left unranked (NULL
    /// vector, or no distance) — what SQL sorts after or before every distance.
    pub fn vector_search(
        self: &Arc<Self>,
        column: &str,
        queries: &[&[f32]],
        k: usize,
        metric: Metric,
        predicate: Option<&Predicate>,
    ) -> Result<VectorSearch> {
        self.vector_search_with(column, queries, k, metric, predicate, Precision::Exact)
    }

    /// [`TableSnapshot::vector_search`] at a chosen [`Precision`]. Quantised: each row
    /// group's candidates are ranked on its quantised copy (built on first use and kept with
    /// the segment), the best `precision.candidates(k)` of them per query are rescored on
    /// the `f32` vectors, and only exact distances are returned (bit for bit those of an
    /// exact search); a row the copy ranks too low is missed (recall below 1 is possible).
    /// Memtable batches get quantised copies too (built on first use, kept with the batch
    /// until a merge or flush replaces it). The unranked counts then cover only the
    /// rescored candidates and the NULL vectors.
    pub fn vector_search_with(
        self: &Arc<Self>,
        column: &str,
        queries: &[&[f32]],
        k: usize,
        metric: Metric,
        predicate: Option<&Predicate>,
        precision: Precision,
    ) -> Result<VectorSearch> {
        let (col, dim) = self.vector_column(column)?;
        let queries = Queries::new(metric, dim, queries).map_err(|source| Error::VectorQuery {
            table: self.name.to_string(),
            column: column.to_string(),
            source,
        })?;
        if let Some(p) = predicate {
            self.resolve(&p.columns())?;
        }
        // Row groups are the units — unless there are too few to keep every thread busy
        // (a table of one or two row groups), then they are cut into parts. (Each unit
        // costs heaps, a merge and its own rescoring candidates, so no finer than needed.)
        let scan_units = self.scan_units();
        let groups = scan_units.iter().filter(|u| matches!(u, ScanUnit::RowGroup { .. })).count();
        let want = 4 * rayon::current_num_threads();
        let parts = if groups >= want { 1 } else { want.div_ceil(groups.max(1)) };
        let units: Vec<KnnUnit> = scan_units
            .into_iter()
            .flat_map(|u| match u {
                ScanUnit::Memtable => {
                    (0..self.memtable.batches().len()).map(KnnUnit::MemBatch).collect()
                }
                ScanUnit::RowGroup { segment, rg } => {
                    let rows = self.segments[segment]
                        .segment
                        .meta()
                        .row_groups
                        .get(rg)
                        .map_or(0, |g| g.rows as usize);
                    let part = rows.div_ceil(parts).max(MIN_PART_ROWS);
                    (0..rows)
                        .step_by(part)
                        .map(|start| KnnUnit::RowGroup {
                            segment,
                            rg,
                            start,
                            len: part.min(rows - start),
                        })
                        .collect::<Vec<_>>()
                }
            })
            .collect();
        let per_unit = units
            .par_iter()
            .map(|&u| {
                let mut heaps = queries.heaps(k);
                let nulls = self.search_unit(u, col, &queries, predicate, precision, &mut heaps)?;
                Ok((heaps, nulls))
            })
            .collect::<Result<Vec<(Vec<TopK>, u64)>>>()?;
        let mut heaps = queries.heaps(k);
        let mut null_vectors = 0;
        for (unit, nulls) in per_unit {
            null_vectors += nulls;
            for (h, u) in heaps.iter_mut().zip(unit) {
                h.merge(u);
            }
        }
        let no_distance = heaps.iter().map(TopK::unranked).collect();
        Ok(VectorSearch { neighbors: queries.finish(heaps), no_distance, null_vectors })
    }

    /// The full-schema position and dimension of a `VECTOR(D)` column.
    fn vector_column(&self, column: &str) -> Result<(usize, usize)> {
        let col = self.schema.index_of(column).ok_or_else(|| Error::ColumnNotFound {
            table: self.name.to_string(),
            column: column.to_string(),
        })?;
        match self.schema.full_schema().field(col).data_type() {
            arrow_schema::DataType::FixedSizeList(f, d)
                if f.data_type() == &arrow_schema::DataType::Float32 =>
            {
                Ok((col, *d as usize))
            }
            other => Err(Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("column '{column}' is {other}, not a VECTOR column"),
            }),
        }
    }

    fn search_unit(
        self: &Arc<Self>,
        unit: KnnUnit,
        col: usize,
        queries: &Queries,
        predicate: Option<&Predicate>,
        precision: Precision,
        heaps: &mut [TopK],
    ) -> Result<u64> {
        let quant_of = |source| {
            precision.quantization().map(|kind| Quant {
                source,
                kind,
                candidates: precision.candidates(heaps.first().map_or(0, TopK::k)),
            })
        };
        match unit {
            KnnUnit::RowGroup { segment, rg, start, len } => {
                let ls = &self.segments[segment];
                // Only this part's rows: the delete mask's slice, the predicate evaluated
                // on the part's window (each part of a row group evaluates its own rows).
                let mut keep = ls.keep_mask(rg).map(|m| m.values().slice(start, len));
                if keep.as_ref().is_some_and(|k| k.count_set_bits() == 0) {
                    return Ok(0);
                }
                if let Some(p) = predicate {
                    match self.select_in_row_group(segment, rg, p, start, Some(len))? {
                        None => return Ok(0),
                        Some(sel) => keep = Some(keep.map_or(sel.clone(), |k| &k & &sel)),
                    }
                }
                // Vectors in their stored form (half floats and int8 codes are read in
                // place, not widened).
                let mut cols = self.read_row_group(segment, rg, &[col], DecodeMode::Stored)?;
                let vectors = cols.pop().ok_or_else(|| self.not_vectors())?.slice(start, len);
                let ids = ls.segment.ids(rg)?.slice(start, len);
                let pos = ls.segment.meta().position_of(self.schema.column_id_at(col));
                let quant = pos.and_then(|pos| {
                    quant_of(QuantSource::Segment { segment: &ls.segment, rg, pos, start })
                });
                self.search_arrays(&vectors, &ids, keep, queries, quant, heaps)
            }
            KnnUnit::MemBatch(i) => {
                let Some(mb) = self.memtable.batches().get(i) else { return Ok(0) };
                if mb.live_rows() == 0 {
                    return Ok(0);
                }
                // Memtable batches hold the full schema at its current positions (schema
                // changes flush the memtable first).
                let b = mb.batch()?;
                let mut keep = mb.keep_mask();
                if let Some(p) = predicate {
                    let sel = crate::predicate::evaluate(p, &mut b.clone())?;
                    keep = Some(keep.map_or(sel.clone(), |k| &k & &sel));
                }
                if keep.as_ref().is_some_and(|k| k.count_set_bits() == 0) {
                    return Ok(0);
                }
                // The newest batch, when it is a tail view, is replaced by a longer view at
                // every write, and a quantised copy would be built again for each: its rows
                // (at most a tail's) are scanned exactly instead.
                let open_tail = mb.is_tail() && i + 1 == self.memtable.batches().len();
                let quant = if open_tail {
                    None
                } else {
                    quant_of(QuantSource::Memtable { batch: mb, col })
                };
                self.search_arrays(b.column(col), b.column(0), keep, queries, quant, heaps)
            }
        }
    }

    /// Scans one block: `vectors` (a `FixedSizeList<Float32>` array, or a vector chunk in its
    /// stored form: `FixedSizeList<Float16>` or the int8 struct of
    /// [`crate::encoding::stored_vectors_type`]) with its `_id`s; `keep` (if any) selects
    /// the candidates, NULL vectors are dropped (and counted: the result).
    fn search_arrays(
        &self,
        vectors: &dyn Array,
        ids: &dyn Array,
        keep: Option<BooleanBuffer>,
        queries: &Queries,
        quant: Option<Quant<'_>>,
        heaps: &mut [TopK],
    ) -> Result<u64> {
        let ids: &UInt64Array = ids.as_primitive_opt().ok_or_else(|| self.not_vectors())?;
        let n = vectors.len();
        if ids.len() != n {
            return Err(self.not_vectors());
        }
        let candidates = keep.as_ref().map_or(n, BooleanBuffer::count_set_bits);
        let keep = match (keep, vectors.nulls()) {
            (Some(k), Some(v)) => Some(&k & v.inner()),
            (Some(k), None) => Some(k),
            (None, Some(v)) => Some(v.inner().clone()),
            (None, None) => None,
        };
        // Every row kept: the kernel reads the block as one run (and prefetches ahead).
        let keep = keep.filter(|k| k.count_set_bits() < n);
        let picked: Option<Vec<u32>> = keep.map(|k| k.set_indices().map(|i| i as u32).collect());
        let picks = match &picked {
            None => Picks::All(n),
            Some(p) => Picks::Some(p),
        };
        let ranked = picks.len();
        let dim = queries.dim();
        if let Some(st) = vectors.as_struct_opt() {
            let rows = self.int8_rows(st, dim)?;
            let int8 = quant.filter(|z| z.kind == Quantization::Int8).map(|z| z.candidates);
            self.search_int8(rows, ids.values(), picks, queries, int8, heaps)?;
            return Ok((candidates - ranked) as u64);
        }
        let list: &FixedSizeListArray =
            vectors.as_fixed_size_list_opt().ok_or_else(|| self.not_vectors())?;
        // A sliced list shares its child: the block starts at the list's first row.
        let start = list.value_offset(0).max(0) as usize;
        if list.value_type() == arrow_schema::DataType::Float16 {
            // Half floats widen exactly to the values they stand for: an exact scan.
            let data = list.values().to_data();
            let bits: &[u16] =
                data.buffers().first().ok_or_else(|| self.not_vectors())?.typed_data();
            let from = data.offset() + start;
            let bits = bits.get(from..from + n * dim).ok_or_else(|| self.not_vectors())?;
            search_rows(queries, Rows::F16(bits), ids.values(), picks, heaps);
            return Ok((candidates - ranked) as u64);
        }
        let values =
            list.values().as_primitive_opt::<Float32Type>().ok_or_else(|| self.not_vectors())?;
        let rows = values.values().get(start..start + n * dim).ok_or_else(|| self.not_vectors())?;
        match quant {
            None => search_block(queries, rows, ids.values(), picks, heaps),
            Some(z) => {
                // Rank on the quantised copy (heap entries carry row positions), then
                // rescore each query's candidates on the f32 rows.
                let copy = z.copy(rows, dim);
                let mut approx = queries.heaps(z.candidates);
                search_positions(queries, copy.rows(), picks, &mut approx);
                self.rescore(queries, &approx, Rows::F32(rows), ids.values(), heaps)?;
            }
        }
        // The NULL vectors among the candidates.
        Ok((candidates - ranked) as u64)
    }

    /// The int8 rows of a stored chunk (see [`crate::encoding::stored_vectors_type`]).
    fn int8_rows<'a>(&self, st: &'a arrow_array::StructArray, dim: usize) -> Result<RowCodes<'a>> {
        let n = st.len();
        let f32s = |i: usize| -> Result<&'a [f32]> {
            let a =
                st.column(i).as_primitive_opt::<Float32Type>().ok_or_else(|| self.not_vectors())?;
            a.values().get(..n).ok_or_else(|| self.not_vectors())
        };
        let codes = st.column(0).as_fixed_size_list_opt().ok_or_else(|| self.not_vectors())?;
        let start = codes.value_offset(0).max(0) as usize;
        let codes = codes
            .values()
            .as_primitive_opt::<arrow_array::types::Int8Type>()
            .ok_or_else(|| self.not_vectors())?
            .values()
            .get(start..start + n * dim)
            .ok_or_else(|| self.not_vectors())?;
        Ok(RowCodes { codes, scales: f32s(1)?, offsets: f32s(2)?, norms: f32s(3)? })
    }

    /// Scans int8 rows stored with a step per row. Exact unless `int8` is given: the kernel
    /// widens each code to the value it stands for as it loads it — the same values and
    /// arithmetic a memtable row gets, so a row's distance does not change when it is
    /// flushed. With `int8` (candidates per query) the rows are ranked by the integer
    /// kernel and each query's best candidates rescored on their values, as a quantised
    /// search over a float32 column is.
    fn search_int8(
        &self,
        rows: RowCodes<'_>,
        ids: &[u64],
        picks: Picks<'_>,
        queries: &Queries,
        int8: Option<usize>,
        heaps: &mut [TopK],
    ) -> Result<()> {
        let Some(candidates) = int8 else {
            search_rows(queries, rows.rows(), ids, picks, heaps);
            return Ok(());
        };
        let mut approx = queries.heaps(candidates);
        search_positions(queries, rows.ranking_rows(), picks, &mut approx);
        self.rescore(queries, &approx, rows.rows(), ids, heaps)
    }

    /// Scores each query's candidates (the row positions in its `approx` heap) exactly on
    /// `rows` and offers them to its heap in `heaps`.
    fn rescore(
        &self,
        queries: &Queries,
        approx: &[TopK],
        rows: Rows<'_>,
        ids: &[u64],
        heaps: &mut [TopK],
    ) -> Result<()> {
        for (qi, (a, heap)) in approx.iter().zip(heaps.iter_mut()).enumerate() {
            let mut cands: Vec<u32> = a.entries().map(|(_, p)| p as u32).collect();
            cands.sort_unstable();
            let one = queries.one(qi).ok_or_else(|| self.not_vectors())?;
            search_rows(&one, rows, ids, Picks::Some(&cands), std::slice::from_mut(heap));
        }
        Ok(())
    }

    fn not_vectors(&self) -> Error {
        Error::InvalidInput {
            table: self.name.to_string(),
            reason: "vector column data is not a list of float32 vectors with _ids".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use arrow_array::{Int64Array, RecordBatch};
    use arrow_schema::{DataType, Field, Schema};
    use basalt_vector::reference_distance;

    use super::*;
    use crate::io::MemFs;
    use crate::predicate::CmpOp;
    use crate::store::{Store, StoreOptions};
    use crate::types::vector_type;

    const DIM: usize = 5;

    struct Gen(u64);
    impl Gen {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 >> 20
        }
        /// Grid values: sums of their products and squared differences are exact in f32.
        fn value(&mut self) -> f32 {
            (self.next() % 9) as f32 * 0.5 - 2.0
        }
    }

    fn batch(g: &mut Gen, n: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("grp", DataType::Int64, false),
            Field::new("v", vector_type(DIM), true),
        ]));
        let grp = Int64Array::from_iter_values((0..n).map(|_| (g.next() % 4) as i64));
        let mut values = Vec::with_capacity(n * DIM);
        let mut valid = Vec::with_capacity(n);
        for _ in 0..n {
            values.extend((0..DIM).map(|_| g.value()));
            valid.push(!g.next().is_multiple_of(11));
        }
        let DataType::FixedSizeList(item, _) = vector_type(DIM) else { unreachable!() };
        let list = FixedSizeListArray::new(
            item,
            DIM as i32,
            Arc::new(arrow_array::Float32Array::from(values)),
            Some(valid.into()),
        );
        RecordBatch::try_new(schema, vec![Arc::new(grp), Arc::new(list)]).unwrap()
    }

    /// A table with several segments (with deletes), updated rows and memtable rows, some
    /// NULL vectors and some zero vectors.
    fn table(seed: u64) -> (Store, Arc<TableSnapshot>) {
        let fs = Arc::new(MemFs::new());
        let opts = StoreOptions { bulk_insert_rows: 100, ..StoreOptions::default() };
        let store = Store::open(fs, Path::new("/db"), Path::new(":memory:"), opts).expect("open");
        store
            .create_table(
                "t",
                &Schema::new(vec![
                    Field::new("grp", DataType::Int64, false),
                    Field::new("v", vector_type(DIM), true),
                ]),
            )
            .expect("create");
        let mut g = Gen(seed | 1);
        for n in [150, 300, 120] {
            store.insert("t", &[batch(&mut g, n)]).expect("bulk insert");
        }
        store.insert("t", &[batch(&mut g, 60)]).expect("memtable insert");
        let zero = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("v", vector_type(DIM), true)])),
            vec![Arc::new(FixedSizeListArray::new(
                match vector_type(DIM) {
                    DataType::FixedSizeList(item, _) => item,
                    _ => unreachable!(),
                },
                DIM as i32,
                Arc::new(arrow_array::Float32Array::from(vec![0.0; DIM])),
                None,
            ))],
        )
        .expect("zero row");
        store.update("t", &[7], &zero).expect("update to a zero vector");
        let dels: Vec<u64> = (1..640).filter(|i| i % 7 == 3).collect();
        store.delete("t", &dels).expect("delete");
        let ups: Vec<u64> = (1..640).filter(|i| i % 13 == 5).collect();
        let new = batch(&mut g, ups.len());
        store.update("t", &ups, &new).expect("update");
        let t = store.snapshot().table("t").expect("table").clone();
        assert!(t.segments().len() >= 3 && t.memtable().rows() > 0);
        (store, t)
    }

    /// Every live candidate as (id, grp, vector).
    fn rows(t: &Arc<TableSnapshot>) -> Vec<(u64, i64, Option<Vec<f32>>)> {
        let mut out = Vec::new();
        for b in t.scan(&[0, 1, 2]).expect("scan") {
            let b = b.expect("batch");
            let ids = b.column(0).as_primitive::<arrow_array::types::UInt64Type>();
            let grp = b.column(1).as_primitive::<arrow_array::types::Int64Type>();
            let v = b.column(2).as_fixed_size_list();
            for i in 0..b.num_rows() {
                let vec = v
                    .is_valid(i)
                    .then(|| v.value(i).as_primitive::<Float32Type>().values().to_vec());
                out.push((ids.value(i), grp.value(i), vec));
            }
        }
        out
    }

    /// One row group big enough to be cut into parts searched in parallel: each part
    /// applies the filter and the deletes of its own rows only.
    #[test]
    fn parts_of_a_big_row_group_select_their_own_rows() {
        let fs = Arc::new(MemFs::new());
        let store =
            Store::open(fs, Path::new("/db"), Path::new(":memory:"), StoreOptions::default())
                .expect("open");
        let schema = batch(&mut Gen(1), 1).schema();
        store.create_table("t", &schema).expect("create");
        store.insert("t", &[batch(&mut Gen(5), 20_000)]).expect("bulk insert");
        let dels: Vec<u64> =
            (1..=20_000).filter(|i| i % 5 == 1 || (9_000..9_200).contains(i)).collect();
        store.delete("t", &dels).expect("delete");
        let t = store.snapshot().table("t").expect("table").clone();
        assert_eq!((t.segments().len(), t.segments()[0].segment.meta().row_groups.len()), (1, 1));
        let all = rows(&t);
        let q = [1.0f32, -0.5, 2.0, 0.0, -1.5];
        for (filter, keep) in [
            (Predicate::cmp("grp", CmpOp::Lt, 2i64), (|g| g < 2) as fn(i64) -> bool),
            (Predicate::cmp("grp", CmpOp::GtEq, 0i64), |_| true),
        ] {
            for metric in Metric::ALL {
                for precision in [Precision::Exact, Precision::Int8 { oversample: 10_000 }] {
                    let got = t
                        .vector_search_with("v", &[&q], 25, metric, Some(&filter), precision)
                        .expect("search");
                    let mut want: Vec<(f64, u64)> = all
                        .iter()
                        .filter(|(_, g, _)| keep(*g))
                        .filter_map(|(id, _, v)| {
                            reference_distance(metric, v.as_ref()?, &q).map(|d| (d + 0.0, *id))
                        })
                        .collect();
                    want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                    let ids: Vec<u64> = got.neighbors[0].iter().map(|n| n.id).collect();
                    let want_ids: Vec<u64> = want.iter().take(25).map(|w| w.1).collect();
                    assert_eq!(ids, want_ids, "{metric} {precision:?} {filter:?}");
                }
            }
        }
    }

    /// Columns stored as half floats and as int8 hold the input rounded on insert (in the
    /// memtable and in segments alike); searching them returns, bit for bit, what searching
    /// float32 columns holding those rounded values returns.
    #[test]
    fn stored_forms_search_like_float32_columns_of_their_values() {
        use basalt_vector::StoredForm;
        use basalt_vector::stored::round_row;

        use crate::types::vector_field;
        let forms = [StoredForm::Float16, StoredForm::Int8];
        let fields: Vec<Field> = std::iter::once(Field::new("grp", DataType::Int64, false))
            .chain(forms.iter().flat_map(|f| {
                [
                    vector_field(&format!("v_{}", f.name()), DIM, *f, true),
                    vector_field(&format!("r_{}", f.name()), DIM, StoredForm::Float32, true),
                ]
            }))
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let mut g = Gen(77);
        let mut make = |n: usize| {
            let grp = Int64Array::from_iter_values((0..n).map(|_| (g.next() % 4) as i64));
            let valid: Vec<bool> = (0..n).map(|_| !g.next().is_multiple_of(9)).collect();
            let raw: Vec<f32> = (0..n * DIM)
                .map(|_| {
                    (g.next() % 20_001) as f32 / 5_000.0
                        * if g.next().is_multiple_of(5) { 50.0 } else { 1.0 }
                        - 2.0
                })
                .collect();
            let mut cols: Vec<arrow_array::ArrayRef> = vec![Arc::new(grp)];
            for form in forms {
                let mut rounded = raw.clone();
                for r in rounded.chunks_exact_mut(DIM) {
                    round_row(form, r).expect("round");
                }
                for values in [raw.clone(), rounded] {
                    let DataType::FixedSizeList(item, _) = vector_type(DIM) else { unreachable!() };
                    cols.push(Arc::new(FixedSizeListArray::new(
                        item,
                        DIM as i32,
                        Arc::new(arrow_array::Float32Array::from(values)),
                        Some(valid.clone().into()),
                    )));
                }
            }
            RecordBatch::try_new(schema.clone(), cols).expect("batch")
        };
        let fs = Arc::new(MemFs::new());
        let opts = StoreOptions { bulk_insert_rows: 100, ..StoreOptions::default() };
        let store = Store::open(fs, Path::new("/db"), Path::new(":memory:"), opts).expect("open");
        store.create_table("t", &schema).expect("create");
        for n in [150, 300] {
            store.insert("t", &[make(n)]).expect("bulk insert");
        }
        store.insert("t", &[make(40)]).expect("memtable insert");
        store.delete("t", &(1..490).filter(|i| i % 7 == 3).collect::<Vec<_>>()).expect("delete");
        let ups: Vec<u64> = (1..490).filter(|i| i % 13 == 5).collect();
        store.update("t", &ups, &make(ups.len())).expect("update");
        let check = |t: &Arc<TableSnapshot>| {
            // The stored columns read as their float32 twins.
            let cols: Vec<usize> = (0..t.schema.full_schema().fields().len()).collect();
            for b in t.scan(&cols).expect("scan") {
                let b = b.expect("batch");
                assert_eq!(b.column(2), b.column(3), "float16 values");
                assert_eq!(b.column(4), b.column(5), "int8 values");
            }
            let q = [0.7f32, -1.25, 2.0, 0.1, -0.3];
            let q2 = [1.0f32, 0.0, -2.0, 0.5, 0.25];
            let filter = Predicate::cmp("grp", CmpOp::Lt, 2i64);
            for form in forms {
                let (v, r) = (format!("v_{}", form.name()), format!("r_{}", form.name()));
                for metric in Metric::ALL {
                    for pred in [None, Some(&filter)] {
                        // Every candidate's exact distance, per query.
                        let all =
                            t.vector_search(&r, &[&q, &q2], 1 << 30, metric, pred).expect("all");
                        for k in [1usize, 9, 1000] {
                            let want = t.vector_search(&r, &[&q, &q2], k, metric, pred).expect("r");
                            let got = t.vector_search(&v, &[&q, &q2], k, metric, pred).expect("v");
                            assert_eq!(got, want, "{form:?} {metric} k {k} {pred:?}");
                            // Ranked on the codes, rescored on the values: with every row
                            // a candidate, the exact answer; with few, exact distances.
                            for over in [1usize, 10_000] {
                                let p = Precision::Int8 { oversample: over };
                                let got = t
                                    .vector_search_with(&v, &[&q, &q2], k, metric, pred, p)
                                    .expect("int8");
                                if over > 1 {
                                    assert_eq!(
                                        got.neighbors, want.neighbors,
                                        "{form:?} {metric} k {k}"
                                    );
                                }
                                for ((g, w), a) in
                                    got.neighbors.iter().zip(&want.neighbors).zip(&all.neighbors)
                                {
                                    assert_eq!(g.len(), w.len());
                                    for n in g {
                                        assert!(a.contains(n), "{n:?} exact");
                                    }
                                }
                            }
                        }
                    }
                }
            }
        };
        let t = store.snapshot().table("t").expect("table").clone();
        assert!(t.segments().len() >= 2 && t.memtable().rows() > 0);
        check(&t);
        // The chunks are stored in their forms (and not compressed).
        let meta = t.segments()[0].segment.meta();
        let encodings: Vec<&str> =
            meta.row_groups[0].chunks.iter().map(|c| c.encoding.name()).collect();
        assert_eq!(&encodings[2..], ["half-vector", "plain", "int8-vector", "plain"]);
        // Flushing the memtable changes no value and no answer.
        store.flush().expect("flush");
        let t = store.snapshot().table("t").expect("table").clone();
        assert_eq!(t.memtable().rows(), 0);
        check(&t);
        // One big row group, cut into parts searched in parallel (windows of the stored
        // chunks that do not start at row 0), with deletes in every part.
        store.create_table("big", &schema).expect("create big");
        store.insert("big", &[make(20_000)]).expect("bulk insert");
        let gone: Vec<u64> = (1..=20_000).filter(|i| i % 5 == 2).collect();
        store.delete("big", &gone).expect("delete");
        let big = store.snapshot().table("big").expect("big").clone();
        assert_eq!(big.segments()[0].segment.meta().row_groups.len(), 1);
        check(&big);
        // A component a form cannot hold is refused, naming the row; nothing is written.
        let before = t.count();
        let mut bad = make(3);
        let mut cols = bad.columns().to_vec();
        let DataType::FixedSizeList(item, _) = vector_type(DIM) else { unreachable!() };
        let mut values = vec![1.0f32; 3 * DIM];
        values[DIM + 2] = 70_000.0;
        cols[1] = Arc::new(FixedSizeListArray::new(
            item.clone(),
            DIM as i32,
            Arc::new(arrow_array::Float32Array::from(values.clone())),
            None,
        ));
        bad = RecordBatch::try_new(schema.clone(), cols.clone()).expect("bad");
        let e = store.insert("t", &[bad]).expect_err("float16 range").to_string();
        assert!(e.contains("row 2") && e.contains("70000") && e.contains("FLOAT16"), "{e}");
        values[DIM + 2] = f32::NAN;
        cols[1] = make(3).column(1).clone();
        cols[3] = Arc::new(FixedSizeListArray::new(
            item,
            DIM as i32,
            Arc::new(arrow_array::Float32Array::from(values)),
            None,
        ));
        let e = store
            .insert("t", &[RecordBatch::try_new(schema.clone(), cols).expect("bad")])
            .expect_err("int8 NaN")
            .to_string();
        assert!(e.contains("row 2") && e.contains("NaN") && e.contains("v_int8"), "{e}");
        assert_eq!(store.snapshot().table("t").expect("table").count(), before);
    }

    #[test]
    fn top_k_equals_brute_force_over_segments_memtable_deletes_updates_and_filters() {
        for seed in [3u64, 99, 12345] {
            let (_store, t) = table(seed);
            let all = rows(&t);
            let mut g = Gen(seed * 7 + 1);
            let qs: Vec<Vec<f32>> = (0..3)
                .map(|_| {
                    let mut q: Vec<f32> = (0..DIM).map(|_| g.value()).collect();
                    q[0] = 1.0; // never a zero query
                    q
                })
                .collect();
            let refs: Vec<&[f32]> = qs.iter().map(|q| q.as_slice()).collect();
            let filter = Predicate::cmp("grp", CmpOp::Lt, 2i64);
            for metric in Metric::ALL {
                for pred in [None, Some(&filter)] {
                    for k in [0usize, 1, 7, 10_000] {
                        let got = t.vector_topk("v", &refs, k, metric, pred).expect("top-k");
                        assert_eq!(got.len(), qs.len());
                        for (qi, q) in qs.iter().enumerate() {
                            let mut want: Vec<(f64, u64)> = all
                                .iter()
                                .filter(|(_, grp, _)| pred.is_none() || *grp < 2)
                                .filter_map(|(id, _, v)| {
                                    reference_distance(metric, v.as_ref()?, q)
                                        .map(|d| (d + 0.0, *id))
                                })
                                .collect();
                            want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                            want.truncate(k);
                            let ctx = format!(
                                "seed {seed} {metric} filter {} k {k} q {qi}",
                                pred.is_some()
                            );
                            assert_eq!(got[qi].len(), want.len(), "{ctx}");
                            for (n, w) in got[qi].iter().zip(&want) {
                                assert!(
                                    (f64::from(n.distance) - w.0).abs() < 1e-4,
                                    "{ctx}: {n:?} vs {w:?}"
                                );
                                if metric != Metric::Cosine {
                                    assert_eq!(n.id, w.1, "{ctx}");
                                }
                            }
                            if k > 0 {
                                let search =
                                    t.vector_search("v", &[q], k, metric, pred).expect("search");
                                let candidates: Vec<_> = all
                                    .iter()
                                    .filter(|(_, grp, _)| pred.is_none() || *grp < 2)
                                    .collect();
                                let nulls =
                                    candidates.iter().filter(|(_, _, v)| v.is_none()).count()
                                        as u64;
                                let no_distance = candidates
                                    .iter()
                                    .filter(|(_, _, v)| {
                                        v.as_ref().is_some_and(|v| {
                                            reference_distance(metric, v, q).is_none()
                                        })
                                    })
                                    .count()
                                    as u64;
                                assert_eq!(search.null_vectors, nulls, "{ctx}");
                                assert_eq!(search.no_distance, vec![no_distance], "{ctx}");
                            }
                            // A single query returns what it returned inside the batch.
                            let one = t.vector_topk("v", &[q], k, metric, pred).expect("one");
                            assert_eq!(one[0], got[qi], "{ctx}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn quantised_searches_return_exact_distances_and_with_enough_candidates_the_exact_answer() {
        for seed in [3u64, 77] {
            let (_store, t) = table(seed);
            let all = rows(&t);
            let q = [1.0f32, -0.5, 2.0, 0.0, -1.5];
            let filter = Predicate::cmp("grp", CmpOp::Gt, 0i64);
            for metric in Metric::ALL {
                for pred in [None, Some(&filter)] {
                    let exact = t.vector_search("v", &[&q], 9, metric, pred).expect("exact");
                    for precision in [
                        Precision::Float16 { oversample: 1000 },
                        Precision::Int8 { oversample: 1000 },
                        Precision::Float16 { oversample: 2 },
                        Precision::Int8 { oversample: 1 },
                    ] {
                        let ctx =
                            format!("seed {seed} {metric} {precision:?} filter {}", pred.is_some());
                        let got = t
                            .vector_search_with("v", &[&q], 9, metric, pred, precision)
                            .expect("quantised");
                        // Enough candidates to rescore every row: the exact answer, bit for bit.
                        if matches!(
                            precision,
                            Precision::Float16 { oversample: 1000 }
                                | Precision::Int8 { oversample: 1000 }
                        ) {
                            assert_eq!(got.neighbors, exact.neighbors, "{ctx}");
                            continue;
                        }
                        // Few candidates: whatever is returned carries its exact distance, in order.
                        let n = &got.neighbors[0];
                        assert_eq!(n.len(), exact.neighbors[0].len(), "{ctx}");
                        for w in n.windows(2) {
                            assert!(w[0].distance <= w[1].distance, "{ctx}");
                        }
                        for nb in n {
                            let (_, _, v) =
                                all.iter().find(|(id, _, _)| *id == nb.id).expect("row");
                            let d = reference_distance(metric, v.as_ref().expect("vector"), &q)
                                .expect("distance");
                            assert!(
                                (d - f64::from(nb.distance)).abs() < 1e-4,
                                "{ctx}: {nb:?} vs {d}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn bad_vector_searches_are_clear_errors() {
        let (_store, t) = table(5);
        let e = t.vector_topk("v", &[&[1.0, 2.0]], 3, Metric::L2, None).unwrap_err();
        assert!(e.to_string().contains("dimension 5, got 2"), "{e}");
        let nan = [f32::NAN, 0.0, 0.0, 0.0, 0.0];
        let e = t.vector_topk("v", &[&nan], 3, Metric::L2, None).unwrap_err();
        assert!(e.to_string().contains("not a finite number"), "{e}");
        let e = t.vector_topk("v", &[&[0.0; DIM]], 3, Metric::Cosine, None).unwrap_err();
        assert!(e.to_string().contains("zero vector"), "{e}");
        let e = t.vector_topk("grp", &[&[1.0; DIM]], 3, Metric::L2, None).unwrap_err();
        assert!(e.to_string().contains("not a VECTOR column"), "{e}");
        let e = t.vector_topk("nope", &[&[1.0; DIM]], 3, Metric::L2, None).unwrap_err();
        assert!(matches!(e, Error::ColumnNotFound { .. }), "{e}");
        let bad = Predicate::cmp("missing", CmpOp::Eq, 1i64);
        assert!(t.vector_topk("v", &[&[1.0; DIM]], 3, Metric::L2, Some(&bad)).is_err());
        assert!(matches!(
            t.vector_topk("v", &[], 3, Metric::L2, None),
            Err(Error::VectorQuery { .. })
        ));
    }
}
