//! The memtable: recently inserted rows held as Arrow record batches until a flush turns
//! them into a segment.
//!
//! Batches are kept in insertion order. Small batches are merged with their neighbour
//! whenever the newer one is at least as large as the older one (a binary-counter merge),
//! so a run of single-row inserts yields O(log n) batches and each row is copied O(log n)
//! times. The memtable is a value type: a snapshot clones it cheaply (the batches are
//! reference counted), so readers never see later inserts.
//!
//! It does not persist anything: durability of memtable rows is the write path's business.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, UInt64Array};

use crate::deletes::DeleteVector;
use crate::error::{Error, Result};

/// Largest batch the merge produces; larger inserts stay as they are.
const MERGE_LIMIT: usize = 64 * 1024;

/// One batch with its `_id` summary.
#[derive(Debug, Clone)]
pub struct MemBatch {
    /// The rows (full table schema, `_id` first), including deleted ones.
    pub batch: RecordBatch,
    /// Smallest `_id`.
    pub id_min: u64,
    /// Largest `_id`.
    pub id_max: u64,
    /// `_id` strictly ascending.
    pub sorted: bool,
    /// Rows deleted (or replaced by an update) since the batch was added.
    pub deleted: Option<Arc<DeleteVector>>,
}

impl MemBatch {
    fn new(batch: RecordBatch) -> Result<Self> {
        let ids = ids_of(&batch)?;
        let v = ids.values();
        let sorted = v.windows(2).all(|w| w[0] < w[1]);
        let id_min = v.iter().copied().min().unwrap_or(u64::MAX);
        let id_max = v.iter().copied().max().unwrap_or(0);
        Ok(Self { batch, id_min, id_max, sorted, deleted: None })
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
        let row = if self.sorted {
            v.binary_search(&id).ok()
        } else {
            // An id appears at most once among the live rows of a batch.
            (0..v.len()).find(|&i| v[i] == id && !self.is_deleted(i))
        }?;
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
    batches: Vec<MemBatch>,
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
        self.batches.push(MemBatch::new(batch)?);
        while self.batches.len() >= 2 {
            let n = self.batches.len();
            let (a, b) = (&self.batches[n - 2], &self.batches[n - 1]);
            let (ra, rb) = (a.batch.num_rows(), b.batch.num_rows());
            if rb < ra || ra + rb > MERGE_LIMIT {
                break;
            }
            // Merging drops deleted rows for good, and keeps rows in `_id` order (updates
            // re-insert old ids) so lookups stay binary searches.
            let (la, lb) = (a.live()?, b.live()?);
            let merged = if a.sorted && b.sorted && a.id_max < b.id_min {
                arrow_select::concat::concat_batches(&a.batch.schema(), [&la, &lb])
                    .map_err(|e| Error::arrow("merge memtable batches", e))?
            } else if a.sorted && b.sorted {
                // Two sorted runs: a linear merge by `_id`.
                let (ia, ib) = (ids_of(&la)?.values(), ids_of(&lb)?.values());
                let mut order = Vec::with_capacity(ia.len() + ib.len());
                let (mut i, mut j) = (0, 0);
                while i < ia.len() || j < ib.len() {
                    if j == ib.len() || (i < ia.len() && ia[i] < ib[j]) {
                        order.push((0, i));
                        i += 1;
                    } else {
                        order.push((1, j));
                        j += 1;
                    }
                }
                arrow_select::interleave::interleave_record_batch(&[&la, &lb], &order)
                    .map_err(|e| Error::arrow("merge memtable batches", e))?
            } else {
                let merged = arrow_select::concat::concat_batches(&a.batch.schema(), [&la, &lb])
                    .map_err(|e| Error::arrow("merge memtable batches", e))?;
                let order = arrow_ord::sort::sort_to_indices(merged.column(0), None, None)
                    .map_err(|e| Error::arrow("sort memtable batch", e))?;
                arrow_select::take::take_record_batch(&merged, &order)
                    .map_err(|e| Error::arrow("sort memtable batch", e))?
            };
            self.batches.truncate(n - 2);
            self.batches.push(MemBatch::new(merged)?);
        }
        Ok(())
    }

    /// The batches, oldest first.
    pub fn batches(&self) -> &[MemBatch] {
        &self.batches
    }

    /// Live rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Deletes row `row` of batch `batch`; false if it was already deleted.
    pub fn delete(&mut self, batch: usize, row: usize) -> bool {
        let Some(b) = self.batches.get_mut(batch) else { return false };
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
        assert!(m.batches().len() <= 11, "{} batches", m.batches().len());
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
}
