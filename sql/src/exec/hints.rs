//! Filters of parent operators that a [`ScanExec`](super::scan::ScanExec) holds: hash
//! joins' dynamic filters (the build side's key bounds and key list), TopK's threshold,
//! and filters a parent pushed down but applies itself.
//!
//! A hint is read at its current state before each scan unit (converted again only when
//! its generation changed) and used twice:
//! 1. to skip the unit by zone maps, with the relaxed predicate of
//!    [`pushdown::from_physical`] (unconvertible conjuncts dropped);
//! 2. to drop rows in storage before the other columns are decoded (late
//!    materialisation), as a [`RowFilter`] evaluating [`pushdown::covering_physical`]:
//!    used when the hint converts whole (a key list becomes one bitmap or sorted lookup
//!    a row, a partitioned join's `CASE` over hashes the union of its lists). A hash-table
//!    lookup does not convert, and is not evaluated here: it costs about what the
//!    parent's own probe does.
//!
//! Row filtering pays only when it drops rows: a join whose build side holds most keys
//! would have the scan test every row for nothing. Each hint therefore keeps a [`Gate`],
//! shared by the scan's partitions, that measures the share of rows the hint keeps and
//! stops row filtering for a while when it keeps most of them.
//!
//! 3. when the hint holds a key list (`column IN (…)`, `column = v`) on the first column of
//!    a key or index of the scanned table, to look the keys up there (see
//!    [`index_ids`]): units holding none of the rows found are skipped and rows that are
//!    not among them dropped by `_id` — an index join, which skips what zone maps cannot
//!    when the keys are spread over the table.
//!
//! What this module must not do: drop a row its parent would keep (a hint is a filter
//! the parent applies again, so dropping fewer rows is always safe).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr_common::physical_expr::{
    snapshot_generation, snapshot_physical_expr,
};
use datafusion::physical_plan::metrics::Count;
use datafusion::scalar::ScalarValue;

use basalt_storage::store::TableSnapshot;
use basalt_storage::{CmpOp, Predicate, RowFilter, Scalar};

use crate::pushdown;

/// Rows a gate measures before it judges a hint.
const WINDOW_ROWS: u64 = 1 << 16;
/// A hint that keeps more than this share of the rows measured stops filtering rows.
const KEEP_LIMIT: f64 = 0.7;
/// Units a gate skips after its first judgement that a hint does not pay, doubling on
/// each further one up to [`MAX_SKIP`] (the hint may tighten: TopK's threshold does).
const FIRST_SKIP: u64 = 8;
const MAX_SKIP: u64 = 128;

/// A parent's filter held by a scan.
#[derive(Debug, Clone)]
pub(crate) struct Hint {
    /// The filter (dynamic filters change while the plan runs).
    pub expr: Arc<dyn PhysicalExpr>,
    state: Arc<HintState>,
}

/// What the partitions of a scan share about one hint.
#[derive(Debug, Default)]
struct HintState {
    gate: Gate,
    /// The hint prepared at its last generation (dynamic filters count theirs up as they
    /// change), so a unit does not convert the same key list again.
    prepared: Mutex<Option<(u64, Arc<Prepared>)>>,
}

/// A hint at one state, converted for pruning and row filtering.
#[derive(Debug)]
struct Prepared {
    /// What zone maps can judge of it (with the index's `_id`s, when there are some).
    prune: Option<Predicate>,
    /// The rows an index says can pass (`_id IN …`), when the hint's key list was looked up.
    ids: Option<Predicate>,
    /// How rows are tested; `None`: they cannot be (a column outside the scan).
    rows: Option<Arc<RowTest>>,
    /// The row test as text (storage shows it in errors).
    label: Arc<str>,
}

/// Storage's evaluation of the converted hint, on its columns.
#[derive(Debug)]
struct RowTest {
    columns: Vec<String>,
    predicate: Predicate,
}

impl Hint {
    pub(crate) fn new(expr: Arc<dyn PhysicalExpr>) -> Hint {
        Hint { expr, state: Arc::default() }
    }

    /// The hint as it stands now, for one scan unit; `None` when it selects every row
    /// (a dynamic filter not filled yet) or cannot be read.
    pub(crate) fn current(
        &self,
        schema: &SchemaRef,
        snapshot: &TableSnapshot,
        lookups: &Count,
    ) -> Option<UnitHint> {
        let generation = snapshot_generation(&self.expr);
        let mut slot = self.state.prepared.lock().unwrap_or_else(|e| e.into_inner());
        let prepared = match slot.as_ref() {
            Some((g, p)) if *g == generation => p.clone(),
            _ => {
                let p = Arc::new(prepare(&self.expr, schema, snapshot, lookups)?);
                *slot = Some((generation, p.clone()));
                p
            }
        };
        drop(slot);
        (prepared.prune.is_some() || prepared.rows.is_some())
            .then(|| UnitHint { prepared, state: self.state.clone() })
    }
}

fn prepare(
    expr: &Arc<dyn PhysicalExpr>,
    schema: &SchemaRef,
    snapshot: &TableSnapshot,
    lookups: &Count,
) -> Option<Prepared> {
    let now = snapshot_physical_expr(Arc::clone(expr)).ok()?;
    if now.downcast_ref::<Literal>().is_some_and(|l| l.value() == &ScalarValue::from(true)) {
        return Some(Prepared { prune: None, ids: None, rows: None, label: "true".into() });
    }
    let mut prune = pushdown::from_physical(&now, schema);
    if let Some(predicate) = pushdown::covering_physical(&now, schema) {
        let ids = index_ids(&predicate, snapshot);
        if let Some(ids) = &ids {
            lookups.add(1);
            prune = Some(match prune {
                Some(p) => Predicate::all(p, ids.clone()),
                None => ids.clone(),
            });
        }
        let columns: Vec<String> = predicate.columns().into_iter().map(String::from).collect();
        let label = predicate.to_string().into();
        // Without columns it is TRUE or FALSE, which the pruning predicate settles.
        let rows = (!columns.is_empty()).then(|| Arc::new(RowTest { columns, predicate }));
        return Some(Prepared { prune, ids, rows, label });
    }
    // Not converted (a join's hash-table lookup): zone maps only. Testing rows with
    // DataFusion's evaluation costs about what the parent's own probe does, and the rows
    // it would drop are mostly dropped by storage's filters or cheap to carry.
    Some(Prepared { prune, ids: None, rows: None, label: now.to_string().into() })
}

/// Most keys of a hint's list looked up in an index.
const MAX_INDEX_KEYS: usize = 4096;

/// `_id IN …` for the rows a key or index of `snapshot` finds for a key list in the hint
/// (a conjunct `column IN (…)` or `column = v` whose column leads a key or index): used
/// when the list has at most [`MAX_INDEX_KEYS`] keys and the rows found are at most a
/// quarter of the table's; the sets are built for it only when the list is under an eighth
/// of the rows. The rows found are a superset of the rows the conjunct keeps.
fn index_ids(predicate: &Predicate, snapshot: &TableSnapshot) -> Option<Predicate> {
    let terms: &[Predicate] = match predicate {
        Predicate::And(v) => v,
        p => std::slice::from_ref(p),
    };
    let rows = snapshot.count() as usize;
    terms.iter().find_map(|t| {
        let (column, values): (&str, &[Scalar]) = match t {
            Predicate::InList { column, values, negated: false } => (column, values),
            Predicate::Cmp { column, op: CmpOp::Eq, value } => {
                (column, std::slice::from_ref(value))
            }
            _ => return None,
        };
        if values.len() > MAX_INDEX_KEYS
            || (!snapshot.index_sets_built() && values.len().saturating_mul(8) > rows)
        {
            return None;
        }
        let limit = (rows / 4).max(16);
        let (_, ids) = snapshot.index_candidates_in(column, values, limit).ok()??;
        Some(Predicate::IdSet(ids.into()))
    })
}

/// A hint read for one unit.
pub(crate) struct UnitHint {
    prepared: Arc<Prepared>,
    state: Arc<HintState>,
}

impl UnitHint {
    /// What zone maps can judge of the hint.
    pub(crate) fn prune(&self) -> Option<&Predicate> {
        self.prepared.prune.as_ref()
    }

    /// The rows an index found for the hint's key list (`_id IN …`; cheap to test, so not
    /// gated).
    pub(crate) fn id_filter(&self) -> Option<Predicate> {
        self.prepared.ids.clone()
    }

    /// The filter storage drops rows by for this unit, `None` while the gate is closed or
    /// when the hint cannot be evaluated on the scan's columns. `removed` counts the rows
    /// it drops.
    pub(crate) fn row_filter(&self, removed: &Count) -> Option<Predicate> {
        let test = self.prepared.rows.as_ref()?;
        if !self.state.gate.admit() {
            return None;
        }
        let (state, rows_test, removed) = (self.state.clone(), test.clone(), removed.clone());
        let f = move |arrays: &[ArrayRef], rows: usize| {
            let RowTest { columns, predicate } = rows_test.as_ref();
            let fields: Vec<Field> = columns
                .iter()
                .zip(arrays)
                .map(|(n, a)| Field::new(n, a.data_type().clone(), true))
                .collect();
            let mut batch = RecordBatch::try_new_with_options(
                Arc::new(Schema::new(fields)),
                arrays.to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(rows)),
            )
            .map_err(|e| e.to_string())?;
            let sel = basalt_storage::predicate::evaluate(predicate, &mut batch)
                .map_err(|e| e.to_string())?;
            let out = BooleanArray::new(sel, None);
            let kept = out.true_count();
            removed.add(out.len() - kept);
            state.gate.record(out.len() as u64, kept as u64);
            Ok(out)
        };
        let columns = test.columns.clone();
        let label = self.prepared.label.clone();
        Some(Predicate::Rows(RowFilter::new(columns, label, Arc::new(f))))
    }
}

/// Whether a hint filters rows: open until it is seen to keep more than [`KEEP_LIMIT`] of
/// [`WINDOW_ROWS`] rows, then closed for a number of units, then measured again.
/// Partitions share it; races only blur the measurement.
#[derive(Debug, Default)]
struct Gate {
    seen: AtomicU64,
    kept: AtomicU64,
    /// Units left to pass without row filtering.
    skip: AtomicU64,
    /// The skip after the next judgement that the hint does not pay (0: [`FIRST_SKIP`]).
    next_skip: AtomicU64,
}

impl Gate {
    /// Whether the next unit filters rows (a closed gate counts one unit down).
    fn admit(&self) -> bool {
        self.skip.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| s.checked_sub(1)).is_err()
    }

    fn record(&self, rows: u64, kept: u64) {
        let seen = self.seen.fetch_add(rows, Ordering::Relaxed) + rows;
        let k = self.kept.fetch_add(kept, Ordering::Relaxed) + kept;
        if seen < WINDOW_ROWS {
            return;
        }
        self.seen.store(0, Ordering::Relaxed);
        self.kept.store(0, Ordering::Relaxed);
        if k as f64 > seen as f64 * KEEP_LIMIT {
            let skip = match self.next_skip.load(Ordering::Relaxed) {
                0 => FIRST_SKIP,
                s => s,
            };
            self.skip.store(skip, Ordering::Relaxed);
            self.next_skip.store((skip * 2).min(MAX_SKIP), Ordering::Relaxed);
        } else {
            self.next_skip.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_closes_on_hints_that_keep_most_rows_and_reopens() {
        let g = Gate::default();
        assert!(g.admit());
        g.record(WINDOW_ROWS, WINDOW_ROWS / 10);
        assert!(g.admit(), "a selective hint keeps filtering");
        g.record(WINDOW_ROWS, WINDOW_ROWS);
        let closed = (0..FIRST_SKIP).filter(|_| !g.admit()).count() as u64;
        assert_eq!(closed, FIRST_SKIP);
        assert!(g.admit(), "measured again after the skip");
        g.record(WINDOW_ROWS, WINDOW_ROWS);
        let closed = (0..4 * FIRST_SKIP).take_while(|_| !g.admit()).count() as u64;
        assert_eq!(closed, 2 * FIRST_SKIP, "a second judgement skips twice as long");
        g.record(WINDOW_ROWS / 2, 0);
        g.record(WINDOW_ROWS / 2, 0);
        assert!(g.admit());
        g.record(WINDOW_ROWS, WINDOW_ROWS);
        let closed = (0..4 * FIRST_SKIP).take_while(|_| !g.admit()).count() as u64;
        assert_eq!(closed, FIRST_SKIP, "a hint that paid again starts over");
    }
}
