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
//! Writes of at most [`TAIL_PUSH_ROWS`] rows do not become batches of their own: they are
//! appended in place into the *open tail* ([`crate::tail`]), and the newest batch is a
//! view of its first rows whose arrays are built on first read. A full tail (or one a
//! larger push or a rolled-back append left behind) closes and merges like any batch.
//!
//! It does not persist anything: durability of memtable rows is the write path's business.

use std::sync::{Arc, OnceLock};

use arrow_array::{Array, RecordBatch, UInt64Array};

use crate::deletes::DeleteVector;
use crate::error::{Error, Result};
use crate::tail::{TailArena, TailSize};

/// Largest batch written into the open tail instead of being kept as a batch.
///
/// A tail append copies a batch's rows once; a kept batch is copied by each tier merge it
/// goes through, so any batch that fits a tail is cheaper appended. Sized for the write
/// groups of concurrent memory writes (about a row per writer: ~20 rows with 32 writers),
/// which a limit of 16 sent through the merges.
pub const TAIL_PUSH_ROWS: usize = 64;

/// Largest batch the merge produces; larger inserts stay as they are.
const MERGE_LIMIT: usize = 64 * 1024;
/// How many batches of one size level are merged into one. Eight would copy single-row
/// inserts less often, but leaves more batches for a vector search to visit (recall over
/// 100k single-row inserts 1.5× slower), so four.
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
    let merged = arrow_select::concat::concat_batches(&parts[0].batch()?.schema(), &live)
        .map_err(|e| Error::arrow("merge memtable batches", e))?;
    MemBatch::with_order(merged, order)
}

/// One batch with its `_id` summary.
#[derive(Debug, Clone)]
pub struct MemBatch {
    /// The rows (full table schema, `_id` first), including deleted ones. Set at creation,
    /// except for a tail view, whose arrays are built the first time they are read (a run
    /// of writes that nobody reads never builds them).
    batch: OnceLock<std::result::Result<RecordBatch, String>>,
    /// The open tail this batch is a view of (its first `rows` rows), if any.
    tail: Option<Arc<TailArena>>,
    /// Number of rows (deleted ones included).
    rows: usize,
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
    deleted: Option<Arc<DeleteVector>>,
    /// Quantised copies of vector columns, by (column, kind): built by the first quantised
    /// search that wants one, shared by every snapshot's copy of this batch (its rows never
    /// change; deletes are masks). Made on first use: a tail view is a new batch at
    /// every write.
    quantized: OnceLock<Arc<parking_lot::Mutex<QuantCopies>>>,
}

type QuantCopies = crate::quantized::Copies<(usize, basalt_vector::Quantization)>;

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
            rows: batch.num_rows(),
            batch: OnceLock::from(Ok(batch)),
            tail: None,
            id_min,
            id_max,
            sorted: order.is_none(),
            order,
            deleted: None,
            quantized: OnceLock::new(),
        })
    }

    /// The view of the first `rows` rows of `arena`, whose last `added` rows were just
    /// appended after `prev` (the view of the rows before them; `None` for a new tail).
    /// The `_id` order is extended row by row: a tail holds at most
    /// [`crate::tail::GROWN_TAIL_ROWS`] rows, so keeping it is a copy of at most 16 KiB
    /// per append (a grown tail follows a run of in-order rows, which need no order, but
    /// updates may still land in it).
    fn tail_view(
        arena: Arc<TailArena>,
        rows: usize,
        added: usize,
        prev: Option<&MemBatch>,
    ) -> Self {
        let ids = arena.ids(rows);
        let (mut sorted, mut order, mut id_min, mut id_max, deleted) = match prev {
            Some(p) => (
                p.sorted,
                p.order.as_deref().map(|o| {
                    let mut v = Vec::with_capacity(o.len() + added);
                    v.extend_from_slice(o);
                    v
                }),
                p.id_min,
                p.id_max,
                p.deleted.clone(),
            ),
            None => (true, None, u64::MAX, 0, None),
        };
        for r in rows.saturating_sub(added)..ids.len() {
            let id = ids[r];
            if sorted && (r == 0 || id > id_max) {
                // Still ascending.
            } else {
                let o = order.get_or_insert_with(|| {
                    let mut v = Vec::with_capacity(rows);
                    v.extend(0..r as u32);
                    v
                });
                sorted = false;
                let at = o.partition_point(|&x| ids[x as usize] < id);
                o.insert(at, r as u32);
            }
            id_min = id_min.min(id);
            id_max = id_max.max(id);
        }
        let rows = ids.len();
        Self {
            batch: OnceLock::new(),
            tail: Some(arena),
            rows,
            id_min,
            id_max,
            sorted,
            order: if sorted { None } else { order.map(Into::into) },
            deleted,
            quantized: OnceLock::new(),
        }
    }

    /// The rows (full table schema, `_id` first), including deleted ones.
    pub fn batch(&self) -> Result<&RecordBatch> {
        let built = self.batch.get_or_init(|| match &self.tail {
            Some(arena) => arena.view(self.rows).map_err(|e| e.to_string()),
            None => Err("memtable batch without rows".to_string()),
        });
        built.as_ref().map_err(|e| Error::InvalidInput {
            table: String::new(),
            reason: format!("memtable tail view: {e}"),
        })
    }

    /// The value of full-schema column `col` at `row`: read in place from an open tail
    /// whose arrays were not built (a read right after a write builds none), otherwise
    /// from the batch's array.
    pub fn value(&self, col: usize, row: usize) -> Result<crate::values::RowValue<'_>> {
        if let Some(arena) = &self.tail
            && self.batch.get().is_none()
            && row < self.rows
            && let Some(cell) = arena.cell(col, row)
        {
            return Ok(crate::values::RowValue::Cell(cell));
        }
        Ok(crate::values::RowValue::Array(self.batch()?.column(col), row))
    }

    /// Whether this batch is a view of a tail (see [`crate::tail`]).
    pub fn is_tail(&self) -> bool {
        self.tail.is_some()
    }

    /// Number of rows, deleted ones included.
    pub fn num_rows(&self) -> usize {
        self.rows
    }

    /// The `_id`s of the rows in row order.
    fn ids(&self) -> Result<&[u64]> {
        match &self.tail {
            Some(arena) => Ok(arena.ids(self.rows)),
            None => Ok(ids_of(self.batch()?)?.values()),
        }
    }

    /// The live rows' (`_id`, position among the live rows) in ascending `_id` order.
    fn live_order(&self) -> Result<Vec<(u64, u32)>> {
        let ids = self.ids()?;
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
    /// asked for, kept when the process's budget for copies has room.
    pub fn quantized(
        &self,
        col: usize,
        kind: basalt_vector::Quantization,
        values: &[f32],
        dim: usize,
    ) -> Arc<basalt_vector::Quantized> {
        let copies = self.quantized.get_or_init(Default::default);
        crate::quantized::Copies::get_or_build(copies, (col, kind), || {
            basalt_vector::Quantized::encode(kind, values, dim)
        })
    }

    /// The live rows as a mask (`None`: every row is live).
    pub fn keep_mask(&self) -> Option<arrow_buffer::BooleanBuffer> {
        let d = self.deleted.as_ref().filter(|d| d.count() > 0)?;
        Some(d.keep_mask(0, self.rows))
    }

    /// Whether row `row` is deleted.
    pub fn is_deleted(&self, row: usize) -> bool {
        self.deleted.as_ref().is_some_and(|d| d.get(row))
    }

    /// Number of live rows.
    pub fn live_rows(&self) -> usize {
        self.rows - self.deleted.as_ref().map_or(0, |d| d.count())
    }

    /// The live rows (the batch itself when nothing was deleted).
    pub fn live(&self) -> Result<RecordBatch> {
        match &self.deleted {
            Some(d) if d.count() > 0 => {
                let mask = arrow_array::BooleanArray::new(d.keep_mask(0, self.rows), None);
                arrow_select::filter::filter_record_batch(self.batch()?, &mask)
                    .map_err(|e| Error::arrow("filter deleted memtable rows", e))
            }
            _ => Ok(self.batch()?.clone()),
        }
    }

    /// Row index of `id` in this batch.
    pub fn find(&self, id: u64) -> Option<usize> {
        if id < self.id_min || id > self.id_max {
            return None;
        }
        let v = self.ids().ok()?;
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
}

impl Memtable {
    /// Appends a batch (already validated and carrying `_id`s).
    ///
    /// A batch of at most [`TAIL_PUSH_ROWS`] rows is written into the open tail (see
    /// [`crate::tail`]) when the newest batch is a tail view with room, or starts a new
    /// tail; anything else is kept as the batch it is and merged in tiers.
    pub fn push(&mut self, batch: RecordBatch) -> Result<()> {
        let n = batch.num_rows();
        if n == 0 {
            return Ok(());
        }
        self.rows += n;
        if n <= TAIL_PUSH_ROWS {
            if let Some(last) = self.batches.last_mut()
                && let Some(arena) = &last.tail
                && arena.append(last.rows, &batch)
            {
                let arena = arena.clone();
                let rows = last.rows + n;
                *last = Arc::new(MemBatch::tail_view(arena, rows, n, Some(last)));
                return Ok(());
            }
            // A run of appends that filled a tail gets a larger one (see `TailSize`).
            let size = match self.batches.last() {
                Some(last)
                    if last.sorted
                        && last.tail.as_ref().is_some_and(|t| last.rows == t.rows_cap()) =>
                {
                    TailSize::Grown
                }
                _ => TailSize::First,
            };
            if let Some(arena) = TailArena::start(&batch, size) {
                // The previous tail, if any, is closed from here on and merges like any
                // other batch.
                self.settle()?;
                self.batches.push(Arc::new(MemBatch::tail_view(arena, n, n, None)));
                return Ok(());
            }
        }
        self.batches.push(Arc::new(MemBatch::new(batch)?));
        self.settle()
    }

    /// Merges the newest batches while the tiering rule asks for it.
    fn settle(&mut self) -> Result<()> {
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
            let level = |b: &Arc<MemBatch>| level_of(b.rows);
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
            let rows: usize = self.batches[n - take..].iter().map(|b| b.rows).sum();
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
        let all = arrow_select::concat::concat_batches(&first.batch()?.schema(), &live)
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
        let n = b.tail.as_ref().map_or(b.rows, |t| t.rows_cap());
        let d = Arc::make_mut(b.deleted.get_or_insert_with(|| Arc::new(DeleteVector::new(n))));
        let newly = d.set(row);
        if newly {
            self.rows -= 1;
        }
        newly
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
            let col = m.batches()[b]
                .batch()
                .unwrap()
                .column(1)
                .as_any()
                .downcast_ref::<Int32Array>()
                .unwrap();
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
        let order: Vec<u64> = m
            .batches()
            .iter()
            .flat_map(|b| ids_of(b.batch().unwrap()).unwrap().values().to_vec())
            .collect();
        assert_eq!(order, (1..=1000).collect::<Vec<_>>());
    }

    /// A schema with every kind of column a tail holds, nullable and not.
    fn wide_schema() -> Arc<Schema> {
        Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("i", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("b", DataType::Boolean, true),
            Field::new("f", DataType::Float32, false),
            Field::new("bin", DataType::Binary, true),
            Field::new("d", DataType::Decimal128(12, 2), true),
            Field::new("t", DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None), true),
            Field::new("v", crate::types::vector_type(3), true),
            Field::new("small", DataType::Int8, false),
        ]))
    }

    /// Rows of [`wide_schema`]: `_id`s `ids`, values derived from `seed`, nulls where
    /// `(seed + row) % 3 == 0`, strings of `len` bytes.
    fn wide_batch(ids: &[u64], seed: u64, len: usize) -> RecordBatch {
        use arrow_array::{
            BinaryArray, BooleanArray, Decimal128Array, FixedSizeListArray, Float32Array,
            Int8Array, Int64Array, StringArray, TimestampMicrosecondArray,
        };
        let n = ids.len();
        let null = |r: usize| (seed + r as u64).is_multiple_of(3);
        let opt = |r: usize, v: i64| (!null(r)).then_some(v);
        let text = |r: usize| format!("{}-{}", seed + r as u64, "x".repeat(len));
        let vec_values: Vec<f32> = (0..n * 3).map(|k| seed as f32 + k as f32 * 0.5).collect();
        let vec_nulls: Vec<bool> = (0..n).map(|r| !null(r)).collect();
        RecordBatch::try_new(
            wide_schema(),
            vec![
                Arc::new(UInt64Array::from(ids.to_vec())),
                Arc::new(Int64Array::from_iter(
                    (0..n).map(|r| opt(r, seed as i64 * 10 + r as i64)),
                )),
                Arc::new(StringArray::from_iter((0..n).map(|r| (!null(r)).then(|| text(r))))),
                Arc::new(BooleanArray::from_iter((0..n).map(|r| (!null(r)).then_some(r % 2 == 0)))),
                Arc::new(Float32Array::from_iter_values((0..n).map(|r| r as f32 + seed as f32))),
                Arc::new(BinaryArray::from_iter(
                    (0..n).map(|r| (!null(r)).then(|| text(r).into_bytes())),
                )),
                Arc::new(
                    Decimal128Array::from_iter(
                        (0..n).map(|r| opt(r, seed as i64 * 7).map(i128::from)),
                    )
                    .with_precision_and_scale(12, 2)
                    .unwrap(),
                ),
                Arc::new(TimestampMicrosecondArray::from_iter((0..n).map(|r| opt(r, r as i64)))),
                Arc::new(FixedSizeListArray::new(
                    Arc::new(Field::new("item", DataType::Float32, true)),
                    3,
                    Arc::new(Float32Array::from(vec_values)),
                    Some(vec_nulls.into()),
                )),
                Arc::new(Int8Array::from_iter_values(
                    (0..n).map(|r| (seed as i8).wrapping_add(r as i8)),
                )),
            ],
        )
        .unwrap()
    }

    /// Every row of the memtable (deleted ones dropped), in batch order.
    fn rows_of(m: &Memtable) -> RecordBatch {
        let live: Vec<RecordBatch> = m.batches().iter().map(|b| b.live().unwrap()).collect();
        arrow_select::concat::concat_batches(&wide_schema(), &live).unwrap()
    }

    proptest::proptest! {
        /// Small pushes go through tails: after any sequence of pushes (1–64 rows, nulls
        /// in every nullable column, strings short and long enough to overflow a tail,
        /// occasionally a big batch), deletes, snapshots and rolled-back copies, each
        /// snapshot still holds exactly the rows it had when taken and the memtable holds
        /// every row pushed, value for value.
        #[test]
        fn tails_keep_every_snapshot_exact(
            steps in proptest::collection::vec((0u8..10, 1usize..17, 0usize..3000), 1..120)
        ) {
            let mut m = Memtable::default();
            let mut want: Vec<RecordBatch> = Vec::new();
            let mut snapshots: Vec<(Memtable, RecordBatch)> = Vec::new();
            let mut next = 1u64;
            for (seed, (kind, n, len)) in steps.into_iter().enumerate() {
                let seed = seed as u64;
                // Mostly 1–16 rows; kind 7 up to the limit, kind 9 past it.
                let n = match kind {
                    7 => n * TAIL_PUSH_ROWS / 16,
                    9 => TAIL_PUSH_ROWS + 24,
                    _ => n,
                };
                let ids: Vec<u64> = (next..next + n as u64).collect();
                next += n as u64;
                let batch = wide_batch(&ids, seed, if kind == 8 { len * 40 } else { len % 40 });
                match kind {
                    0 => {
                        // A copy that pushes and is then thrown away (a rolled-back
                        // transaction): its rows must not surface or be overwritten.
                        let mut doomed = m.clone();
                        doomed.push(wide_batch(&ids, seed + 1000, 5)).unwrap();
                        let seen = rows_of(&doomed);
                        m.push(batch.clone()).unwrap();
                        want.push(batch);
                        // The copy still reads its own rows.
                        proptest::prop_assert_eq!(rows_of(&doomed), seen);
                    }
                    1 => {
                        m.push(batch.clone()).unwrap();
                        want.push(batch);
                        // Delete the newest row.
                        let id = *ids.last().unwrap();
                        let (b, r) = m.find(id).unwrap();
                        proptest::prop_assert!(m.delete(b, r));
                        let keep = arrow_array::BooleanArray::from(
                            (0..n).map(|r| r + 1 < n).collect::<Vec<_>>(),
                        );
                        let last = want.pop().unwrap();
                        want.push(arrow_select::filter::filter_record_batch(&last, &keep).unwrap());
                    }
                    2 => {
                        let expected = rows_of(&m);
                        snapshots.push((m.clone(), expected));
                        m.push(batch.clone()).unwrap();
                        want.push(batch);
                    }
                    _ => {
                        m.push(batch.clone()).unwrap();
                        want.push(batch);
                    }
                }
                proptest::prop_assert_eq!(m.rows(), want.iter().map(|b| b.num_rows()).sum::<usize>());
                // Each new row's values, read one by one (in place from a tail whose
                // arrays were not built), equal the pushed batch's.
                let pushed = want.last().unwrap().clone();
                let pushed_ids = ids_of(&pushed).unwrap().values().to_vec();
                for (k, id) in pushed_ids.iter().enumerate() {
                    let (b, r) = m.find(*id).unwrap();
                    for col in 0..pushed.num_columns() {
                        let dt = pushed.schema().field(col).data_type().clone();
                        let v = m.batches()[b].value(col, r).unwrap();
                        let got = crate::values::one_value_array(&dt, v).unwrap();
                        proptest::prop_assert_eq!(got.to_data(), pushed.column(col).slice(k, 1).to_data(), "column {}", col);
                    }
                }
            }
            let all = arrow_select::concat::concat_batches(&wide_schema(), &want).unwrap();
            proptest::prop_assert_eq!(rows_of(&m), all.clone());
            for (snap, expected) in &snapshots {
                proptest::prop_assert_eq!(&rows_of(snap), expected);
            }
            // Every live id is found at its row, and `sorted_live` is the same rows.
            let ids = all.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
            for (k, id) in ids.values().iter().enumerate() {
                let (b, r) = m.find(*id).unwrap();
                let got = m.batches()[b].batch().unwrap().slice(r, 1);
                proptest::prop_assert_eq!(got, all.slice(k, 1));
            }
            // No live row: nothing to sort.
            match m.sorted_live().unwrap() {
                Some(sorted) => proptest::prop_assert_eq!(sorted, all),
                None => proptest::prop_assert_eq!(all.num_rows(), 0),
            }
        }
    }

    #[test]
    fn tails_take_unordered_ids_and_wide_rows_stay_batches() {
        // Updates re-insert old ids in any order: lookups still find each.
        let mut m = Memtable::default();
        let ids = [50u64, 3, 900, 7, 8, 1, 400];
        for (k, id) in ids.iter().enumerate() {
            m.push(wide_batch(&[*id], k as u64, 3)).unwrap();
        }
        assert_eq!(m.batches().len(), 1, "one tail holds them all");
        assert!(!m.batches()[0].sorted);
        for (k, id) in ids.iter().enumerate() {
            assert_eq!(m.find(*id), Some((0, k)));
        }
        assert_eq!(m.find(2), None);
        let sorted = m.sorted_live().unwrap().unwrap();
        let got = ids_of(&sorted).unwrap().values().to_vec();
        assert_eq!(got, vec![1, 3, 7, 8, 50, 400, 900]);
        // A row wider than a tail's budget is kept as a batch of its own.
        let schema = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("v", crate::types::vector_type(40_000), false),
        ]));
        let v = arrow_array::FixedSizeListArray::new(
            Arc::new(Field::new("item", DataType::Float32, true)),
            40_000,
            Arc::new(arrow_array::Float32Array::from(vec![1.0; 40_000])),
            None,
        );
        let b =
            RecordBatch::try_new(schema, vec![Arc::new(UInt64Array::from(vec![1])), Arc::new(v)])
                .unwrap();
        assert!(TailArena::start(&b, TailSize::First).is_none());
    }

    /// The tail cap of the newest batch (`None`: not a tail view).
    fn newest_tail_cap(m: &Memtable) -> Option<usize> {
        m.batches().last().and_then(|b| b.tail.as_ref()).map(|t| t.rows_cap())
    }

    #[test]
    fn a_grown_tail_of_wide_vectors_reads_back_exactly() {
        // 384-d vectors: a grown tail holds 6 MiB of them.
        let dim = 384usize;
        let schema = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("v", crate::types::vector_type(dim), true),
        ]));
        let row = |id: u64| {
            let values: Vec<f32> = (0..dim).map(|k| id as f32 + k as f32 / 1000.0).collect();
            let v = arrow_array::FixedSizeListArray::new(
                Arc::new(Field::new("item", DataType::Float32, true)),
                dim as i32,
                Arc::new(arrow_array::Float32Array::from(values)),
                None,
            );
            RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(UInt64Array::from(vec![id])), Arc::new(v)],
            )
            .unwrap()
        };
        let mut m = Memtable::default();
        let n = crate::tail::TAIL_ROWS as u64 + 700;
        for id in 1..=n {
            m.push(row(id)).unwrap();
        }
        let newest = m.batches().last().unwrap();
        let arena = newest.tail.as_ref().unwrap();
        assert_eq!(arena.rows_cap(), crate::tail::GROWN_TAIL_ROWS);
        for id in [1, 2, 256, 257, 600, n] {
            let (b, r) = m.find(id).unwrap();
            let batch = m.batches()[b].batch().unwrap();
            let v = batch.column(1).as_any().downcast_ref::<arrow_array::FixedSizeListArray>();
            let v = v.unwrap().value(r);
            let v = v.as_any().downcast_ref::<arrow_array::Float32Array>().unwrap();
            assert_eq!(v.value(0), id as f32);
            assert_eq!(v.value(dim - 1), id as f32 + (dim - 1) as f32 / 1000.0);
        }
        let sorted = m.sorted_live().unwrap().unwrap();
        assert_eq!(sorted.num_rows(), n as usize);
    }

    #[test]
    fn a_run_of_appends_that_fills_a_tail_gets_a_grown_one() {
        let first = crate::tail::TAIL_ROWS;
        let grown = crate::tail::GROWN_TAIL_ROWS;
        let mut m = Memtable::default();
        let mut id = 0u64;
        let push = |m: &mut Memtable, id: u64| m.push(wide_batch(&[id], id, 3)).unwrap();
        for _ in 0..first {
            id += 1;
            push(&mut m, id);
        }
        assert_eq!(newest_tail_cap(&m), Some(first));
        id += 1;
        push(&mut m, id);
        assert_eq!(newest_tail_cap(&m), Some(grown), "the next tail is grown");
        for _ in 0..grown {
            id += 1;
            push(&mut m, id);
        }
        assert_eq!(newest_tail_cap(&m), Some(grown), "and so is the one after it");
        // Every row findable, in order, across the closed tails and their merges.
        for k in (1..=id).step_by(97) {
            let (b, r) = m.find(k).unwrap();
            let batch = m.batches()[b].batch().unwrap();
            assert_eq!(ids_of(batch).unwrap().value(r), k);
        }
        let sorted = m.sorted_live().unwrap().unwrap();
        assert_eq!(ids_of(&sorted).unwrap().values().to_vec(), (1..=id).collect::<Vec<_>>());

        // A tail that took rows out of `_id` order (updates) is followed by a first-size
        // one: the `_id` order a tail view keeps is copied at every append.
        let mut m = Memtable::default();
        for k in 0..first as u64 {
            let id = if k == 5 { 1_000_000 } else { k + 1 };
            push(&mut m, id);
        }
        assert!(!m.batches()[0].sorted);
        push(&mut m, 2_000_000);
        assert_eq!(newest_tail_cap(&m), Some(first));
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
                    m.batches()[b].batch().unwrap().column(1).as_any().downcast_ref::<Int32Array>().unwrap().value(r)
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
