//! The memtable: recently inserted rows held as Arrow record batches until a flush turns
//! them into a segment.
//!
//! Batches are kept in insertion order. Small batches are merged in tiers (four batches of
//! one size level become one; a newer, larger batch absorbs smaller older ones), so a run of
//! single-row inserts yields O(log n) batches and each row is copied about log₄ n times.
//! A merge concatenates (deleted rows dropped); it never reorders rows, because an
//! interleaving merge by `_id` costs a per-row gather of every column at every level. A
//! batch whose `_id`s are not ascending (updates re-insert old ids) instead carries its
//! *order*: row positions sorted by `_id`, merged linearly alongside, so lookups stay binary
//! searches. A flush sorts the rows once ([`Memtable::sorted_live`]) so segments get
//! `_id`-sorted row groups. The memtable is a value type: a snapshot clones it cheaply (the
//! batches are reference counted), so readers never see later inserts.
//!
//! It does not persist anything: durability of memtable rows is the write path's business.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt64Array};

use crate::deletes::DeleteVector;
use crate::error::{Error, Result};

/// Largest batch the merge produces; larger inserts stay as they are.
const MERGE_LIMIT: usize = 64 * 1024;
/// How many batches of one size level are merged into one. Eight was measured against
/// four: single-row inserts 6 % faster (fewer copies), but vector recall over a store of
/// 100k single-row remembers 1.5× slower (`memory-bench` W9: 14 vs 9 ms exact, 5.3 vs
/// 4.0 ms int8), so four it stays.
const FAN_IN: usize = 4;

/// Size level of a batch of `rows` rows: ⌊log_FAN_IN(rows)⌋.
fn level_of(mut rows: usize) -> u32 {
    let mut level = 0;
    while rows >= FAN_IN {
        rows /= FAN_IN;
        level += 1;
    }
    level
}

/// One batch holding the live rows of `parts` (oldest first), concatenated; when the
/// `_id`s of the result are not ascending, their order is merged alongside (linear).
fn merge(parts: &[Arc<MemBatch>]) -> Result<MemBatch> {
    let live = parts.iter().map(|p| p.live()).collect::<Result<Vec<_>>>()?;
    // (Ranges include deleted rows, so this is conservative.)
    let ascending =
        parts.iter().all(|p| p.sorted) && parts.windows(2).all(|w| w[0].id_max < w[1].id_min);
    let order = if ascending {
        None
    } else {
        let mut order: Vec<(u64, u32)> = Vec::new();
        let mut shift = 0u32;
        for (p, l) in parts.iter().zip(&live) {
            let next: Vec<(u64, u32)> =
                p.live_order()?.into_iter().map(|(id, r)| (id, r + shift)).collect();
            shift += l.num_rows() as u32;
            let mut out = Vec::with_capacity(order.len() + next.len());
            let (mut i, mut j) = (0, 0);
            while i < order.len() || j < next.len() {
                if j == next.len() || (i < order.len() && order[i].0 < next[j].0) {
                    out.push(order[i]);
                    i += 1;
                } else {
                    out.push(next[j]);
                    j += 1;
                }
            }
            order = out;
        }
        let identity = order.iter().enumerate().all(|(k, &(_, r))| k as u32 == r);
        (!identity).then(|| order.into_iter().map(|(_, r)| r).collect())
    };
    let merged = arrow_select::concat::concat_batches(&parts[0].batch.schema(), &live)
        .map_err(|e| Error::arrow("merge memtable batches", e))?;
    MemBatch::with_order(merged, order)
}

/// One batch with its `_id` summary.
#[derive(Debug, Clone)]
pub struct MemBatch {
    /// The rows (full table schema, `_id` first), including deleted ones.
    pub batch: RecordBatch,
    /// Smallest `_id`.
    pub id_min: u64,
    /// Largest `_id`.
    pub id_max: u64,
    /// `_id` strictly ascending in row order.
    pub sorted: bool,
    /// When not `sorted`: the row positions in ascending `_id` order (deleted rows
    /// included), so a lookup is a binary search.
    order: Option<Arc<[u32]>>,
    /// Rows deleted (or replaced by an update) since the batch was added.
    pub deleted: Option<Arc<DeleteVector>>,
    /// Quantised copies of vector columns, by (column, kind): built by the first quantised
    /// search that wants one, shared by every snapshot's copy of this batch (its rows never
    /// change; deletes are masks).
    quantized: Arc<parking_lot::Mutex<QuantCopies>>,
}

type QuantCopies =
    std::collections::HashMap<(usize, basalt_vector::Quantization), Arc<basalt_vector::Quantized>>;

impl MemBatch {
    fn new(batch: RecordBatch) -> Result<Self> {
        let ids = ids_of(&batch)?;
        let v = ids.values();
        let sorted = v.windows(2).all(|w| w[0] < w[1]);
        let order = (!sorted).then(|| {
            let mut o: Vec<u32> = (0..v.len() as u32).collect();
            o.sort_by_key(|&r| v[r as usize]);
            o.into()
        });
        Self::with_order(batch, order)
    }

    /// A batch with its `_id` order already known (`None`: rows are in `_id` order).
    fn with_order(batch: RecordBatch, order: Option<Arc<[u32]>>) -> Result<Self> {
        let ids = ids_of(&batch)?;
        let v = ids.values();
        let (id_min, id_max) = match &order {
            None => (v.first().copied().unwrap_or(u64::MAX), v.last().copied().unwrap_or(0)),
            Some(o) => (
                o.first().map_or(u64::MAX, |&r| v[r as usize]),
                o.last().map_or(0, |&r| v[r as usize]),
            ),
        };
        Ok(Self {
            batch,
            id_min,
            id_max,
            sorted: order.is_none(),
            order,
            deleted: None,
            quantized: Default::default(),
        })
    }

    /// The live rows' (`_id`, position among the live rows) in ascending `_id` order.
    fn live_order(&self) -> Result<Vec<(u64, u32)>> {
        let ids = ids_of(&self.batch)?.values();
        let n = ids.len();
        // Position of each row once deleted rows are dropped.
        let new_pos: Option<Vec<u32>> = self.deleted.as_ref().filter(|d| d.count() > 0).map(|d| {
            let mut next = 0u32;
            (0..n)
                .map(|r| {
                    let p = next;
                    if !d.get(r) {
                        next += 1;
                    }
                    p
                })
                .collect()
        });
        let mut out = Vec::with_capacity(self.live_rows());
        let mut visit = |r: usize| {
            if !self.is_deleted(r) {
                out.push((ids[r], new_pos.as_ref().map_or(r as u32, |p| p[r])));
            }
        };
        match &self.order {
            None => (0..n).for_each(&mut visit),
            Some(o) => o.iter().for_each(|&r| visit(r as usize)),
        }
        Ok(out)
    }

    /// The quantised copy of vector column `col` (full-schema position) whose `f32`
    /// values, row-major with `dim` per row, are `values`; built the first time it is
    /// asked for.
    pub fn quantized(
        &self,
        col: usize,
        kind: basalt_vector::Quantization,
        values: &[f32],
        dim: usize,
    ) -> Arc<basalt_vector::Quantized> {
        if let Some(q) = self.quantized.lock().get(&(col, kind)) {
            return q.clone();
        }
        let q = Arc::new(basalt_vector::Quantized::encode(kind, values, dim));
        self.quantized.lock().entry((col, kind)).or_insert(q).clone()
    }

    /// The live rows as a mask (`None`: every row is live).
    pub fn keep_mask(&self) -> Option<arrow_buffer::BooleanBuffer> {
        let d = self.deleted.as_ref().filter(|d| d.count() > 0)?;
        Some(d.keep_mask(0, self.batch.num_rows()))
    }

    /// Whether row `row` is deleted.
    pub fn is_deleted(&self, row: usize) -> bool {
        self.deleted.as_ref().is_some_and(|d| d.get(row))
    }

    /// Number of live rows.
    pub fn live_rows(&self) -> usize {
        self.batch.num_rows() - self.deleted.as_ref().map_or(0, |d| d.count())
    }

    /// The live rows (the batch itself when nothing was deleted).
    pub fn live(&self) -> Result<RecordBatch> {
        match &self.deleted {
            Some(d) if d.count() > 0 => {
                let mask =
                    arrow_array::BooleanArray::new(d.keep_mask(0, self.batch.num_rows()), None);
                arrow_select::filter::filter_record_batch(&self.batch, &mask)
                    .map_err(|e| Error::arrow("filter deleted memtable rows", e))
            }
            _ => Ok(self.batch.clone()),
        }
    }

    /// Row index of `id` in this batch.
    pub fn find(&self, id: u64) -> Option<usize> {
        if id < self.id_min || id > self.id_max {
            return None;
        }
        let ids = ids_of(&self.batch).ok()?;
        let v = ids.values();
        let row = match &self.order {
            None => v.binary_search(&id).ok()?,
            Some(o) => {
                // An id appears at most once among the rows of a batch: merges keep only
                // live rows, and one insert or update never repeats an id.
                let k = o.partition_point(|&r| v[r as usize] < id);
                let r = *o.get(k)? as usize;
                if v[r] != id {
                    return None;
                }
                r
            }
        };
        (!self.is_deleted(row)).then_some(row)
    }
}

fn ids_of(batch: &RecordBatch) -> Result<&UInt64Array> {
    batch.column(0).as_any().downcast_ref::<UInt64Array>().ok_or_else(|| Error::InvalidInput {
        table: String::new(),
        reason: "memtable batch without a UInt64 _id column".into(),
    })
}

/// Rows not yet in a segment.
#[derive(Debug, Clone, Default)]
pub struct Memtable {
    /// Shared with every snapshot holding this state: cloning the memtable (once per
    /// commit) copies one pointer per batch, and a delete copies only the batch it marks.
    batches: Vec<Arc<MemBatch>>,
    /// Live rows.
    rows: usize,
    bytes: usize,
}

impl Memtable {
    /// Appends a batch (already validated and carrying `_id`s).
    pub fn push(&mut self, batch: RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.rows += batch.num_rows();
        self.bytes += batch.get_array_memory_size();
        self.batches.push(Arc::new(MemBatch::new(batch)?));
        // Tiered merging with fan-in `FAN_IN`: a batch's level is ⌊log_FAN_IN(rows)⌋; the
        // newest batch absorbs older ones of a lower level, and `FAN_IN` newest batches of
        // one level become one. Levels then never increase from oldest to newest, so there
        // are at most `FAN_IN - 1` batches per level, and each row is copied about
        // log_FAN_IN(n) times.
        loop {
            let n = self.batches.len();
            if n < 2 {
                break;
            }
            let level = |b: &Arc<MemBatch>| level_of(b.batch.num_rows());
            let last = level(&self.batches[n - 1]);
            let take = if level(&self.batches[n - 2]) < last {
                2
            } else {
                let run = self.batches.iter().rev().take_while(|b| level(b) == last).count();
                if run < FAN_IN {
                    break;
                }
                FAN_IN
            };
            let rows: usize = self.batches[n - take..].iter().map(|b| b.batch.num_rows()).sum();
            if rows > MERGE_LIMIT {
                break;
            }
            let merged = merge(&self.batches[n - take..])?;
            self.batches.truncate(n - take);
            self.batches.push(Arc::new(merged));
        }
        Ok(())
    }

    /// Every live row as one batch in ascending `_id` order (what a flush writes), or
    /// `None` when there is none.
    pub fn sorted_live(&self) -> Result<Option<RecordBatch>> {
        let Some(first) = self.batches.first() else { return Ok(None) };
        let live = self.batches.iter().map(|b| b.live()).collect::<Result<Vec<_>>>()?;
        let all = arrow_select::concat::concat_batches(&first.batch.schema(), &live)
            .map_err(|e| Error::arrow("collect memtable rows", e))?;
        if all.num_rows() == 0 {
            return Ok(None);
        }
        if ids_of(&all)?.values().windows(2).all(|w| w[0] < w[1]) {
            return Ok(Some(all));
        }
        let order = arrow_ord::sort::sort_to_indices(all.column(0), None, None)
            .map_err(|e| Error::arrow("sort memtable rows", e))?;
        let sorted = arrow_select::take::take_record_batch(&all, &order)
            .map_err(|e| Error::arrow("sort memtable rows", e))?;
        Ok(Some(sorted))
    }

    /// The batches, oldest first.
    pub fn batches(&self) -> &[Arc<MemBatch>] {
        &self.batches
    }

    /// Live rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Deletes row `row` of batch `batch`; false if it was already deleted.
    pub fn delete(&mut self, batch: usize, row: usize) -> bool {
        let Some(b) = self.batches.get_mut(batch) else { return false };
        let b = Arc::make_mut(b);
        let n = b.batch.num_rows();
        let d = Arc::make_mut(b.deleted.get_or_insert_with(|| Arc::new(DeleteVector::new(n))));
        let newly = d.set(row);
        if newly {
            self.rows -= 1;
        }
        newly
    }

    /// Approximate bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// True when no batch is held (deleted rows still count as held).
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Locates `id`: (batch index, row), newest batch first.
    pub fn find(&self, id: u64) -> Option<(usize, usize)> {
        self.batches.iter().enumerate().rev().find_map(|(i, b)| b.find(id).map(|r| (i, r)))
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::Int32Array;
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    #[test]
    fn merges_keep_batches_logarithmic_and_rows_findable() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("x", DataType::Int32, false),
        ]));
        let mut m = Memtable::default();
        for i in 1..=1000u64 {
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(UInt64Array::from(vec![i])),
                    Arc::new(Int32Array::from(vec![i as i32 * 2])),
                ],
            )
            .unwrap();
            m.push(b).unwrap();
        }
        assert_eq!(m.rows(), 1000);
        let bound = (FAN_IN - 1) * (level_of(1000) as usize + 1);
        assert!(m.batches().len() <= bound, "{} batches", m.batches().len());
        for id in [1u64, 500, 1000] {
            let (b, r) = m.find(id).unwrap();
            let col = m.batches()[b].batch.column(1).as_any().downcast_ref::<Int32Array>().unwrap();
            assert_eq!(col.value(r), id as i32 * 2);
        }
        assert!(m.find(1001).is_none());
        // Deleting hides a row from find() and from the live rows; merges drop it.
        let (b, r) = m.find(500).unwrap();
        assert!(m.delete(b, r));
        assert!(!m.delete(b, r));
        assert!(m.find(500).is_none());
        assert_eq!(m.rows(), 999);
        let live: usize = m.batches().iter().map(|b| b.live().unwrap().num_rows()).sum();
        assert_eq!(live, 999);
        let order: Vec<u64> =
            m.batches().iter().flat_map(|b| ids_of(&b.batch).unwrap().values().to_vec()).collect();
        assert_eq!(order, (1..=1000).collect::<Vec<_>>());
    }

    fn batch_of(schema: &Arc<Schema>, rows: &[(u64, i32)]) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    proptest::proptest! {
        /// Inserts, updates (delete + re-insert of the same `_id`, one or several per
        /// batch, in any order) and deletes against a map: every lookup finds the newest
        /// value, deleted ids are gone, and `sorted_live` is every live row in `_id` order.
        #[test]
        fn updates_and_deletes_keep_lookups_exact(
            steps in proptest::collection::vec((0u8..4, proptest::collection::vec(1u64..400, 1..6)), 1..300)
        ) {
            let schema = Arc::new(Schema::new(vec![
                Field::new("_id", DataType::UInt64, false),
                Field::new("x", DataType::Int32, false),
            ]));
            let mut m = Memtable::default();
            let mut model = std::collections::BTreeMap::new();
            let mut next = 1000u64;
            for (step, (kind, ids)) in steps.into_iter().enumerate() {
                let v = step as i32;
                let mut ids: Vec<u64> = ids;
                ids.dedup();
                let mut seen = std::collections::HashSet::new();
                ids.retain(|id| seen.insert(*id));
                match kind {
                    0 => {
                        // Fresh ids, ascending.
                        let rows: Vec<(u64, i32)> =
                            ids.iter().map(|_| { next += 1; (next, v) }).collect();
                        for r in &rows { model.insert(r.0, r.1); }
                        m.push(batch_of(&schema, &rows)).unwrap();
                    }
                    1 | 2 => {
                        // Update: delete where present, re-insert in the given order.
                        let rows: Vec<(u64, i32)> = ids.iter().map(|&id| (id, v)).collect();
                        for &(id, _) in &rows {
                            if let Some((b, r)) = m.find(id) {
                                proptest::prop_assert!(m.delete(b, r));
                            }
                            model.insert(id, v);
                        }
                        m.push(batch_of(&schema, &rows)).unwrap();
                    }
                    _ => {
                        for id in ids {
                            let found = m.find(id);
                            proptest::prop_assert_eq!(found.is_some(), model.remove(&id).is_some());
                            if let Some((b, r)) = found {
                                proptest::prop_assert!(m.delete(b, r));
                            }
                        }
                    }
                }
                proptest::prop_assert_eq!(m.rows(), model.len());
            }
            for id in 0..next + 2 {
                let got = m.find(id).map(|(b, r)| {
                    m.batches()[b].batch.column(1).as_any().downcast_ref::<Int32Array>().unwrap().value(r)
                });
                proptest::prop_assert_eq!(got, model.get(&id).copied(), "id {}", id);
            }
            let live = m.sorted_live().unwrap();
            let want: Vec<(u64, i32)> = model.into_iter().collect();
            let got: Vec<(u64, i32)> = live.map(|b| {
                let ids = ids_of(&b).unwrap().values().to_vec();
                let xs = b.column(1).as_any().downcast_ref::<Int32Array>().unwrap().values().to_vec();
                ids.into_iter().zip(xs).collect()
            }).unwrap_or_default();
            proptest::prop_assert_eq!(got, want);
        }
    }
}
