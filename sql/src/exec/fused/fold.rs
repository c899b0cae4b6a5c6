//! Aggregates folded per key: the native accumulators (`count`, `sum`, `avg`, `min`, `max`
//! of one column, conditional counts) and the loops over codes or values.
//!
//! Part of the fused group-by (see the module doc of `fused`).

use super::*;

/// One aggregate's running state.
pub(super) enum Acc {
    /// `count` of a non-NULL constant (`COUNT(*)`): rows per group, counted here. Its
    /// partial state and its value are both that Int64 count.
    Rows(Vec<i64>),
    /// `count(CASE WHEN p THEN c END)` with `c` a non-NULL constant ([`counts_if`]): rows
    /// per group where `p` is true, counted here from `p`'s mask; state and value as for
    /// [`Acc::Rows`].
    RowsIf(Arc<dyn PhysicalExpr>, Vec<i64>),
    /// `count`, `sum`, `avg`, `min` or `max` of one column: folded here (see [`Native`]).
    Native(Native),
    /// Any other aggregate: DataFusion's own groups accumulator, fed row by row.
    Df(Box<dyn GroupsAccumulator>),
}

impl Acc {
    /// Bytes it holds, for the memory pool.
    pub(super) fn size(&self) -> usize {
        match self {
            Acc::Rows(v) | Acc::RowsIf(_, v) => v.capacity() * std::mem::size_of::<i64>(),
            Acc::Native(Native { acc, .. }) | Acc::Df(acc) => acc.size(),
        }
    }
}

/// What a [`Native`] aggregate computes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Op {
    Count,
    Sum,
    Avg,
    Min,
    Max,
}

/// An aggregate of one column folded per batch key by a tight loop over the column's
/// codes (a value table lookup per row) or values, without materialising the column or
/// a group id per row. The per-key results go to DataFusion's own accumulator as partial
/// states (`count`, `sum`, `avg`, merged with its `merge_batch`) or as one candidate per
/// key (`min`, `max`, through its `update_batch`), so DataFusion's rules (overflow,
/// NULLs, NaN ordering) decide the result and its state and value are DataFusion's.
pub(super) struct Native {
    pub(super) op: Op,
    /// The scan output column it reads.
    pub(super) col: usize,
    /// The type the argument is evaluated as: the column's, or a cast's that cannot fail.
    pub(super) target: DataType,
    pub(super) acc: Box<dyn GroupsAccumulator>,
}

/// The [`Native`] form of `a`, when it has one: `count` of a column, or `sum` / `avg` /
/// `min` / `max` of an Int64 or Float64 column (or of a column under a cast to those that
/// cannot fail), with DataFusion's state layout as expected.
pub(super) fn native_of(
    a: &AggregateFunctionExpr,
    schema: &SchemaRef,
) -> Option<(Op, usize, DataType)> {
    let op = match a.fun().name() {
        "count" => Op::Count,
        "sum" => Op::Sum,
        "avg" => Op::Avg,
        "min" => Op::Min,
        "max" => Op::Max,
        _ => return None,
    };
    if a.is_distinct() || !a.order_bys().is_empty() {
        return None;
    }
    let args = a.expressions();
    let [arg] = args.as_slice() else { return None };
    let (col, target) = if let Some(c) = arg.downcast_ref::<Column>() {
        (c.index(), schema.fields().get(c.index())?.data_type().clone())
    } else if let Some(x) = arg.downcast_ref::<CastExpr>() {
        let c = x.expr().downcast_ref::<Column>()?;
        let from = schema.fields().get(c.index())?.data_type();
        let to = x.cast_type();
        let never_fails = match to {
            DataType::Int64 => {
                matches!(from, DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64)
            }
            DataType::Float64 => from.is_integer() || from.is_floating(),
            _ => false,
        };
        if !never_fails {
            return None;
        }
        (c.index(), to.clone())
    } else {
        return None;
    };
    let states: Vec<DataType> =
        a.state_fields().ok()?.iter().map(|f| f.data_type().clone()).collect();
    let numeric = matches!(target, DataType::Int64 | DataType::Float64);
    let fits = match op {
        Op::Count => states == [DataType::Int64],
        Op::Sum => numeric && states == [target.clone()],
        Op::Avg => target == DataType::Float64 && states == [DataType::UInt64, DataType::Float64],
        Op::Min | Op::Max => numeric,
    };
    fits.then_some((op, col, target))
}

impl Native {
    /// Folds one batch: `keys` gives each row's key (`None`: every row has key 0),
    /// `rows[k]` how many rows have key `k`, `gid[k]` its group id.
    pub(super) fn update(
        &mut self,
        col: &ArrayRef,
        keys: Option<&[u32]>,
        rows: &[u64],
        gid: &[usize],
        total: usize,
    ) -> Result<()> {
        let nk = gid.len();
        if self.op == Op::Count {
            let mut cnt = vec![0u64; nk];
            match (col.logical_nulls(), keys) {
                (None, _) => cnt.copy_from_slice(rows),
                (Some(nulls), None) => cnt[0] = (nulls.len() - nulls.null_count()) as u64,
                (Some(nulls), Some(keys)) => {
                    for r in nulls.valid_indices() {
                        cnt[keys[r] as usize] += 1;
                    }
                }
            }
            let (idx, present) = present_keys(rows, gid);
            let counts = Int64Array::from_iter_values(present.iter().map(|&k| cnt[k] as i64));
            return self.acc.merge_batch(&[Arc::new(counts)], &idx, total);
        }
        match self.target {
            DataType::Int64 => self.update_typed::<Int64Type>(col, keys, rows, gid, total),
            _ => self.update_typed::<Float64Type>(col, keys, rows, gid, total),
        }
    }

    pub(super) fn update_typed<T>(
        &mut self,
        col: &ArrayRef,
        keys: Option<&[u32]>,
        rows: &[u64],
        gid: &[usize],
        total: usize,
    ) -> Result<()>
    where
        T: ArrowPrimitiveType,
        T::Native: Value,
    {
        let nk = gid.len();
        let n = col.len();
        let nulls = col.logical_nulls();
        let part = if let DataType::Dictionary(kt, _) = col.data_type() {
            let tab = cast(&dictionary_values(col)?, &self.target)?;
            let tab = tab.as_primitive::<T>().values();
            match kt.as_ref() {
                DataType::UInt8 => {
                    let c = col.as_dictionary::<UInt8Type>().keys().values();
                    fold(self.op, |r| tab[c[r] as usize], n, nulls.as_ref(), keys, nk)
                }
                DataType::UInt16 => {
                    let c = col.as_dictionary::<UInt16Type>().keys().values();
                    fold(self.op, |r| tab[c[r] as usize], n, nulls.as_ref(), keys, nk)
                }
                DataType::UInt32 => {
                    let c = col.as_dictionary::<UInt32Type>().keys().values();
                    fold(self.op, |r| tab[c[r] as usize], n, nulls.as_ref(), keys, nk)
                }
                t => {
                    return Err(DataFusionError::Internal(format!("dictionary keys of type {t}")));
                }
            }
        } else {
            let values = if col.data_type() == &self.target {
                col.clone()
            } else {
                cast(col, &self.target)?
            };
            let v = values.as_primitive::<T>().values();
            fold(self.op, |r| v[r], n, nulls.as_ref(), keys, nk)
        };
        if part.carry != 0 {
            return Err(DataFusionError::Execution(format!(
                "integer overflow: a sum does not fit {}",
                self.target
            )));
        }
        let (idx, present) = present_keys(rows, gid);
        let value = |k: usize| (part.cnt[k] > 0).then(|| part.acc[k]);
        let values: ArrayRef =
            Arc::new(PrimitiveArray::<T>::from_iter(present.iter().map(|&k| value(k))));
        match self.op {
            Op::Sum => self.acc.merge_batch(&[values], &idx, total),
            Op::Avg => {
                let counts = UInt64Array::from_iter(
                    present.iter().map(|&k| (part.cnt[k] > 0).then_some(part.cnt[k])),
                );
                self.acc.merge_batch(&[Arc::new(counts), values], &idx, total)
            }
            _ => self.acc.update_batch(&[values], &idx, None, total),
        }
    }
}

/// The group ids and the keys of the keys some row of the batch has.
pub(super) fn present_keys(rows: &[u64], gid: &[usize]) -> (Vec<usize>, Vec<usize>) {
    let present: Vec<usize> = (0..rows.len()).filter(|&k| rows[k] > 0).collect();
    (present.iter().map(|&k| gid[k]).collect(), present)
}

/// A number a [`Native`] aggregate folds: adds as `sum` does and orders as `min` / `max`
/// do (`partial_cmp`, a NaN replaces). Integers add with wrapping and count the carries
/// (+1 for each add that wrapped upwards, −1 downwards): the exact sum is the wrapped one
/// plus `carry · 2^64`, so it fits a BIGINT exactly when the net carry is 0 — an overflow
/// check without a branch in the loop, whatever order the lanes add in.
pub(super) trait Value: Copy + PartialOrd + Default {
    fn plus(self, other: Self, carry: &mut i64) -> Self;
}

impl Value for i64 {
    #[inline(always)]
    fn plus(self, other: i64, carry: &mut i64) -> i64 {
        let (s, wrapped) = self.overflowing_add(other);
        *carry += i64::from(wrapped) * (1 | (other >> 63));
        s
    }
}

impl Value for f64 {
    #[inline(always)]
    fn plus(self, other: f64, _carry: &mut i64) -> f64 {
        self + other
    }
}

/// Per key: rows with a value, and their sum (`Sum`, `Avg`) or extreme (`Min`, `Max`);
/// `carry` is the sum's net carry (see [`Value`]), not 0 when it does not fit.
pub(super) struct Partial<T> {
    pub(super) cnt: Vec<u64>,
    pub(super) acc: Vec<T>,
    pub(super) carry: i64,
}

/// Whether `new` replaces `cur` as the minimum (`MIN`) or maximum (`MAX`): DataFusion's rule.
#[inline(always)]
pub(super) fn replaces<T: Value>(max: bool, new: T, cur: T) -> bool {
    use std::cmp::Ordering::{Greater, Less};
    match new.partial_cmp(&cur) {
        None => true,
        Some(o) => o == if max { Greater } else { Less },
    }
}

/// Folds `n` rows (value of row `r`: `get(r)`) per key for `op` (not `Count`).
pub(super) fn fold<T: Value>(
    op: Op,
    get: impl Fn(usize) -> T,
    n: usize,
    nulls: Option<&NullBuffer>,
    keys: Option<&[u32]>,
    nk: usize,
) -> Partial<T> {
    match op {
        Op::Min => fold_op::<T, 1>(get, n, nulls, keys, nk),
        Op::Max => fold_op::<T, 2>(get, n, nulls, keys, nk),
        _ => fold_op::<T, 0>(get, n, nulls, keys, nk),
    }
}

/// [`fold`] for one operation: `OP` 0 sums, 1 keeps the minimum, 2 the maximum.
pub(super) fn fold_op<T: Value, const OP: u8>(
    get: impl Fn(usize) -> T,
    n: usize,
    nulls: Option<&NullBuffer>,
    keys: Option<&[u32]>,
    nk: usize,
) -> Partial<T> {
    let mut cnt = vec![0u64; nk];
    let mut acc = vec![T::default(); nk];
    // Net carries of every key's sum: any key's not 0 is an overflow (see `Value`).
    let mut carries = vec![0i64; nk];
    let mut put = |k: usize, v: T| {
        let c = &mut cnt[k];
        let a = &mut acc[k];
        if OP == 0 {
            *a = a.plus(v, &mut carries[k]);
        } else if *c == 0 || replaces::<T>(OP == 2, v, *a) {
            *a = v;
        }
        *c += 1;
    };
    match (keys, nulls) {
        (None, None) if n > 0 => {
            // One key, no NULLs: four independent lanes so the adds (or compares) overlap.
            let mut lane = [get(0); 4];
            let mut lane_carry = [0i64; 4];
            if OP == 0 {
                lane = [T::default(); 4];
            }
            let whole = n / 4 * 4;
            for r in (0..whole).step_by(4) {
                for (l, x) in lane.iter_mut().enumerate() {
                    let v = get(r + l);
                    if OP == 0 {
                        *x = x.plus(v, &mut lane_carry[l]);
                    } else if replaces::<T>(OP == 2, v, *x) {
                        *x = v;
                    }
                }
            }
            for r in whole..n {
                put(0, get(r));
            }
            for x in lane {
                put(0, x);
            }
            carries[0] += lane_carry.iter().sum::<i64>();
            // `put` counted the lanes and the tail; the count is the rows.
            cnt[0] = n as u64;
        }
        (None, None) => {}
        (None, Some(nulls)) => {
            for r in nulls.valid_indices() {
                put(0, get(r));
            }
        }
        (Some(keys), None) => {
            for (r, &k) in keys.iter().enumerate().take(n) {
                put(k as usize, get(r));
            }
        }
        (Some(keys), Some(nulls)) => {
            for r in nulls.valid_indices() {
                put(keys[r] as usize, get(r));
            }
        }
    }
    let carry = carries.iter().find(|&&c| c != 0).copied().unwrap_or(0);
    Partial { cnt, acc, carry }
}

/// Rows per key: `rows[k]` = how many of `keys` are `k`, for keys below `space`. Small
/// key spaces count in four interleaved tables so repeated keys do not wait on each other.
pub(super) fn count_keys(keys: &[u32], space: usize, rows: &mut Vec<u64>) {
    rows.clear();
    rows.resize(space, 0);
    if space <= 4096 {
        let mut t = vec![0u32; 4 * space];
        let whole = keys.len() / 4 * 4;
        for c in keys[..whole].chunks_exact(4) {
            t[c[0] as usize] += 1;
            t[space + c[1] as usize] += 1;
            t[2 * space + c[2] as usize] += 1;
            t[3 * space + c[3] as usize] += 1;
        }
        for &k in &keys[whole..] {
            t[k as usize] += 1;
        }
        for (k, r) in rows.iter_mut().enumerate() {
            *r = (0..4).map(|l| u64::from(t[l * space + k])).sum();
        }
    } else {
        for &k in keys {
            rows[k as usize] += 1;
        }
    }
}

/// Whether `a` counts rows: `count` of one non-NULL literal, without DISTINCT.
/// The condition `p` of `count(CASE WHEN p THEN c END)` (also with `ELSE NULL`) where `c`
/// is a non-NULL constant: such a count is the number of rows where `p` is true (a NULL
/// `p` takes no branch, and the missing ELSE is NULL, which `count` skips).
pub(super) fn counts_if(a: &AggregateFunctionExpr) -> Option<Arc<dyn PhysicalExpr>> {
    if a.fun().name() != "count" || a.is_distinct() || !a.order_bys().is_empty() {
        return None;
    }
    let args = a.expressions();
    let [arg] = args.as_slice() else { return None };
    let case = arg.downcast_ref::<CaseExpr>()?;
    let [(when, then)] = case.when_then_expr() else { return None };
    let literal = |e: &Arc<dyn PhysicalExpr>, null: bool| {
        e.downcast_ref::<Literal>().is_some_and(|l| l.value().is_null() == null)
    };
    let no_else = case.else_expr().is_none_or(|e| literal(e, true));
    (case.expr().is_none() && literal(then, false) && no_else).then(|| when.clone())
}

pub(super) fn counts_rows(a: &AggregateFunctionExpr) -> bool {
    let args = a.expressions();
    a.fun().name() == "count"
        && !a.is_distinct()
        && args.len() == 1
        && args[0].downcast_ref::<Literal>().is_some_and(|l| !l.value().is_null())
}
