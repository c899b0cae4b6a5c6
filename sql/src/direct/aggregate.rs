//! Whole-table aggregates the direct path folds itself (`count`, `sum`, `avg`, `min`,
//! `max`, `count(DISTINCT)` over dictionary codes) with DataFusion's result types.
//!
//! Part of the direct path (see the module doc of `direct`).

use super::*;

/// An aggregate function the direct path computes.
#[derive(Clone, Copy)]
pub(super) enum AggFn {
    /// `count(*)`: rows.
    CountStar,
    /// `count(col)`: non-null values.
    Count,
    /// `sum`, `avg`, `min`, `max`: DataFusion's own accumulators.
    Udaf(fn() -> Arc<datafusion::logical_expr::AggregateUDF>),
    /// `sum`, `avg`, `min`, `max` of an Int64 or Float64 column, folded here (see [`Fold`]);
    /// DataFusion's function names and types the output.
    Fold(FoldFn, fn() -> Arc<datafusion::logical_expr::AggregateUDF>),
}

/// What a [`Fold`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FoldFn {
    Sum,
    Avg,
    Min,
    Max,
}

/// The running sum / min / max of one Int64 or Float64 column over the rows seen, read
/// from plain values or, for a dictionary-encoded chunk, once per dictionary entry with
/// the entry's row count. Results are DataFusion's: `sum` of integers wraps on overflow
/// as its accumulator does, `min` / `max` order floats by IEEE total order (NaN above
/// everything) as Arrow's kernels do, `avg` of integers divides the exact sum; float sums
/// add in another order (equal within rounding, as between DataFusion's own plans).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Fold {
    /// Whether the column is Float64 (else Int64).
    pub(super) float: bool,
    /// Whether min / max and sums are asked for (float folds skip what is not).
    pub(super) need_minmax: bool,
    pub(super) need_sum: bool,
    /// Rows folded (non-null values).
    pub(super) rows: i64,
    /// Whether a min / max candidate was seen.
    pub(super) seen: bool,
    /// Integers: wrapping sum, exact sum, min, max.
    pub(super) wrap: i64,
    pub(super) exact: i128,
    pub(super) imin: i64,
    pub(super) imax: i64,
    /// Floats: sum, min, max.
    pub(super) sum: f64,
    pub(super) fmin: f64,
    pub(super) fmax: f64,
}

impl Fold {
    pub(super) fn new(float: bool, need_minmax: bool, need_sum: bool) -> Self {
        Fold { float, need_minmax, need_sum, ..Fold::default() }
    }

    /// `v`, `times` times (zero: only a min / max candidate).
    pub(super) fn int(&mut self, v: i64, times: i64) {
        if self.seen {
            (self.imin, self.imax) = (self.imin.min(v), self.imax.max(v));
        } else {
            (self.imin, self.imax, self.seen) = (v, v, true);
        }
        self.rows += times;
        self.wrap = self.wrap.wrapping_add(v.wrapping_mul(times));
        self.exact += i128::from(v) * i128::from(times);
    }

    /// `v`, `times` times (zero: only a min / max candidate).
    pub(super) fn float(&mut self, v: f64, times: i64) {
        if !self.seen {
            (self.fmin, self.fmax, self.seen) = (v, v, true);
        }
        if v.total_cmp(&self.fmin).is_lt() {
            self.fmin = v;
        }
        if v.total_cmp(&self.fmax).is_gt() {
            self.fmax = v;
        }
        self.rows += times;
        if times > 0 {
            self.sum += if times == 1 { v } else { v * times as f64 };
        }
    }

    /// Adds another part's fold of the same column.
    pub(super) fn merge(&mut self, o: &Fold) {
        if !o.seen {
            return;
        }
        if self.float {
            self.float(o.fmin, 0);
            self.float(o.fmax, 0);
            self.sum += o.sum;
        } else {
            self.int(o.imin, 0);
            self.int(o.imax, 0);
            self.wrap = self.wrap.wrapping_add(o.wrap);
            self.exact += o.exact;
        }
        self.rows += o.rows;
    }

    /// Folds the non-null values of a run of integers in one pass.
    pub(super) fn ints(
        &mut self,
        v: &[i64],
        nulls: Option<&datafusion::arrow::buffer::NullBuffer>,
    ) {
        let (mut lo, mut hi, mut wrap, mut exact, mut n) = (i64::MAX, i64::MIN, 0i64, 0i128, 0);
        let mut add = |x: i64| {
            (lo, hi) = (lo.min(x), hi.max(x));
            wrap = wrap.wrapping_add(x);
            exact += i128::from(x);
        };
        match nulls {
            Some(nb) => nb.valid_indices().for_each(|i| {
                add(v[i]);
                n += 1;
            }),
            None => {
                // Blocks of 1024 in a loop the compiler vectorises (min, max, wrapping
                // sum); a block whose values are all below 2^52 in magnitude cannot
                // overflow, so its wrapping sum is exact, else it is summed again wide.
                const SMALL: i64 = 1 << 52;
                for c in v.chunks(1024) {
                    let (mut l, mut h, mut w) = (i64::MAX, i64::MIN, 0i64);
                    for &x in c {
                        (l, h, w) = (l.min(x), h.max(x), w.wrapping_add(x));
                    }
                    (lo, hi, wrap) = (lo.min(l), hi.max(h), wrap.wrapping_add(w));
                    exact += if l > -SMALL && h < SMALL {
                        i128::from(w)
                    } else {
                        c.iter().map(|&x| i128::from(x)).sum::<i128>()
                    };
                }
                n = v.len() as i64;
            }
        }
        if n > 0 {
            self.int(lo, 0);
            self.int(hi, 0);
            self.rows += n;
            self.wrap = self.wrap.wrapping_add(wrap);
            self.exact += exact;
        }
    }

    /// Folds the non-null values of a run of floats in one pass (min / max on the
    /// integers that order like IEEE total order).
    pub(super) fn floats(
        &mut self,
        v: &[f64],
        nulls: Option<&datafusion::arrow::buffer::NullBuffer>,
    ) {
        let key = |x: f64| {
            let b = x.to_bits() as i64;
            b ^ (((b >> 63) as u64) >> 1) as i64
        };
        let (mut lo, mut hi, mut n) = (i64::MAX, i64::MIN, 0i64);
        // Four running sums (reassociated: equal within rounding to one).
        let mut sums = [0f64; 4];
        match nulls {
            Some(nb) => nb.valid_indices().for_each(|i| {
                let k = key(v[i]);
                (lo, hi) = (lo.min(k), hi.max(k));
                sums[i % 4] += v[i];
                n += 1;
            }),
            None => {
                if self.need_minmax {
                    for &x in v {
                        let k = key(x);
                        (lo, hi) = (lo.min(k), hi.max(k));
                    }
                } else if let (Some(&a), Some(&b)) = (v.first(), v.last()) {
                    // Any value is a valid (unused) min / max candidate.
                    (lo, hi) = (key(a), key(b));
                }
                if self.need_sum {
                    for c in v.chunks(4) {
                        for (s, &x) in sums.iter_mut().zip(c) {
                            *s += x;
                        }
                    }
                }
                n = v.len() as i64;
            }
        }
        if n > 0 {
            let back = |k: i64| f64::from_bits((k ^ (((k >> 63) as u64) >> 1) as i64) as u64);
            self.float(back(lo), 0);
            self.float(back(hi), 0);
            self.rows += n;
            self.sum += (sums[0] + sums[1]) + (sums[2] + sums[3]);
        }
    }

    /// Folds column `a` (Int64 / Float64 values, or a dictionary of them).
    pub(super) fn update(&mut self, a: &ArrayRef) -> crate::Result<()> {
        use datafusion::arrow::array::{Array, AsArray};
        use datafusion::arrow::datatypes::{
            Float64Type, Int64Type, UInt8Type, UInt16Type, UInt32Type,
        };
        if let Some(d) = a.as_any_dictionary_opt() {
            if d.keys().len() < 4 * d.values().len() {
                // Few rows per entry: gathering the values costs less than a histogram
                // the size of the dictionary.
                let v = datafusion::arrow::compute::take(d.values(), d.keys(), None)
                    .map_err(|e| crate::Error::sql(format!("aggregate: {e}")))?;
                return self.update(&v);
            }
            // Rows per dictionary entry, then each entry once.
            let mut counts = vec![0i64; d.values().len()];
            let keys = d.keys();
            match keys.data_type() {
                DataType::UInt8 => count_codes(keys.as_primitive::<UInt8Type>(), &mut counts),
                DataType::UInt16 => count_codes(keys.as_primitive::<UInt16Type>(), &mut counts),
                DataType::UInt32 => count_codes(keys.as_primitive::<UInt32Type>(), &mut counts),
                t => return Err(crate::Error::sql(format!("aggregate over {t} codes"))),
            }
            let vals = d.values();
            let used = counts.iter().enumerate().filter(|(_, c)| **c > 0);
            match vals.data_type() {
                DataType::Int64 if !self.float => {
                    let v = vals.as_primitive::<Int64Type>();
                    used.for_each(|(i, &c)| self.int(v.value(i), c));
                }
                DataType::Float64 if self.float => {
                    let v = vals.as_primitive::<Float64Type>();
                    used.for_each(|(i, &c)| self.float(v.value(i), c));
                }
                t => return Err(crate::Error::sql(format!("aggregate of a dictionary of {t}"))),
            }
            return Ok(());
        }
        match a.data_type() {
            DataType::Int64 if !self.float => {
                let v = a.as_primitive::<Int64Type>();
                self.ints(v.values(), v.nulls().filter(|n| n.null_count() > 0));
            }
            DataType::Float64 if self.float => {
                let v = a.as_primitive::<Float64Type>();
                self.floats(v.values(), v.nulls().filter(|n| n.null_count() > 0));
            }
            t => return Err(crate::Error::sql(format!("aggregate of {t}"))),
        }
        Ok(())
    }

    /// The answer of `f` as a one-row array (NULL over no rows). An integer sum outside
    /// the range of BIGINT is an overflow error, as `sum` is everywhere (`checked`).
    pub(super) fn finish(&self, f: FoldFn) -> crate::Result<ArrayRef> {
        let one_f = |v: Option<f64>| Arc::new(Float64Array::from(vec![v])) as ArrayRef;
        let one_i = |v: Option<i64>| Arc::new(Int64Array::from(vec![v])) as ArrayRef;
        let some = self.rows > 0;
        if (f, self.float) == (FoldFn::Sum, false) && some && i64::try_from(self.exact).is_err() {
            return Err(crate::Error::sql(format!(
                "integer overflow: the sum {} does not fit BIGINT",
                self.exact
            )));
        }
        Ok(match (f, self.float) {
            (FoldFn::Avg, true) => one_f(some.then(|| self.sum / self.rows as f64)),
            (FoldFn::Avg, false) => one_f(some.then(|| self.exact as f64 / self.rows as f64)),
            (FoldFn::Sum, true) => one_f(some.then_some(self.sum)),
            (FoldFn::Sum, false) => one_i(some.then_some(self.wrap)),
            (FoldFn::Min, true) => one_f(some.then_some(self.fmin)),
            (FoldFn::Min, false) => one_i(some.then_some(self.imin)),
            (FoldFn::Max, true) => one_f(some.then_some(self.fmax)),
            (FoldFn::Max, false) => one_i(some.then_some(self.imax)),
        })
    }
}

/// `SELECT agg(…) [AS x], … FROM t [WHERE p]` with no GROUP BY: one row.
#[derive(Debug)]
pub(crate) struct DirectAggregate {
    pub(super) name: String,
    pub(super) table: Arc<TableSnapshot>,
    /// Each output column: the function and the full-schema position of its argument.
    pub(super) aggs: Vec<(AggFn, Option<usize>)>,
    pub(super) schema: SchemaRef,
    pub(super) filter: Option<Predicate>,
    /// Whether the one row is returned (OFFSET / LIMIT 0 may drop it).
    pub(super) keep: bool,
    /// For each folded aggregate, the aggregate whose [`Fold`] it reads (the first one
    /// over the same column).
    pub(super) fold_slot: Vec<Option<usize>>,
}

impl std::fmt::Debug for AggFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AggFn::CountStar => f.write_str("count(*)"),
            AggFn::Count => f.write_str("count"),
            AggFn::Udaf(u) | AggFn::Fold(_, u) => f.write_str(u().name()),
        }
    }
}

pub(super) fn aggregate(
    projection: &[SelectItem],
    rel: Relation,
    filter: Option<Predicate>,
    keep: bool,
    env: &Env<'_>,
) -> Option<DirectAggregate> {
    use datafusion::functions_aggregate::{average, min_max, sum};
    let mut aggs = Vec::new();
    let mut fields = Vec::new();
    for item in projection {
        let (f, alias) = match item {
            SelectItem::UnnamedExpr(Expr::Function(f)) => (f, None),
            SelectItem::ExprWithAlias { expr: Expr::Function(f), alias } => {
                (f, Some(ident_name(alias, env.lower_idents)))
            }
            _ => return None,
        };
        let datafusion::sql::sqlparser::ast::Function {
            name,
            uses_odbc_syntax,
            parameters,
            args,
            filter,
            null_treatment,
            over,
            within_group,
        } = f;
        use datafusion::sql::sqlparser::ast::{FunctionArg, FunctionArgExpr, FunctionArguments};
        if *uses_odbc_syntax
            || !matches!(parameters, FunctionArguments::None)
            || filter.is_some()
            || null_treatment.is_some()
            || over.is_some()
            || !within_group.is_empty()
        {
            return None;
        }
        let FunctionArguments::List(list) = args else { return None };
        if list.duplicate_treatment.is_some() || !list.clauses.is_empty() {
            return None;
        }
        let [arg] = list.args.as_slice() else { return None };
        let FunctionArg::Unnamed(arg) = arg else { return None };
        let [fname] = name.0.as_slice() else { return None };
        let fname = fname.as_ident()?;
        if fname.quote_style.is_some() {
            return None;
        }
        let func = fname.value.to_lowercase();
        let (agg, col) = match (func.as_str(), arg) {
            ("count", FunctionArgExpr::Wildcard) => (AggFn::CountStar, None),
            (_, FunctionArgExpr::Expr(e @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_)))) => {
                let c = rel.column(e, env)?;
                let t = rel.field(c).data_type();
                let numeric = t.is_integer() || matches!(t, DataType::Float32 | DataType::Float64);
                let pick = |k, u| match t {
                    DataType::Int64 | DataType::Float64 => AggFn::Fold(k, u),
                    _ => AggFn::Udaf(u),
                };
                let agg = match func.as_str() {
                    "count" => AggFn::Count,
                    "sum" if numeric => pick(FoldFn::Sum, sum::sum_udaf),
                    "avg" if numeric => pick(FoldFn::Avg, average::avg_udaf),
                    "min" if numeric || t == &DataType::Utf8 => {
                        pick(FoldFn::Min, min_max::min_udaf)
                    }
                    "max" if numeric || t == &DataType::Utf8 => {
                        pick(FoldFn::Max, min_max::max_udaf)
                    }
                    _ => return None,
                };
                (agg, Some(c))
            }
            _ => return None,
        };
        // The output column as DataFusion names and types it.
        let field = match (agg, col) {
            (AggFn::CountStar, _) => Field::new("count(*)", DataType::Int64, false),
            (AggFn::Count, Some(c)) => Field::new(
                format!("count({}.{})", rel.qualifier, rel.field(c).name()),
                DataType::Int64,
                false,
            ),
            (AggFn::Udaf(u) | AggFn::Fold(_, u), Some(c)) => {
                let arg = coerced(u, Arc::new(rel.field(c).clone()))?;
                let rt = u().return_field(&[arg]).ok()?;
                Field::new(
                    format!("{}({}.{})", u().name(), rel.qualifier, rel.field(c).name()),
                    rt.data_type().clone(),
                    true,
                )
            }
            _ => return None,
        };
        fields.push(match alias {
            Some(a) => field.with_name(a),
            None => field,
        });
        aggs.push((agg, col));
    }
    let mut names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return None;
    }
    // Folds of one column share one pass: the first such aggregate owns it.
    let fold_slot = aggs
        .iter()
        .map(|(a, c)| match a {
            AggFn::Fold(..) => {
                aggs.iter().position(|(b, d)| matches!(b, AggFn::Fold(..)) && d == c)
            }
            _ => None,
        })
        .collect();
    Some(DirectAggregate {
        name: rel.name,
        table: rel.snapshot,
        aggs,
        schema: Arc::new(Schema::new(fields)),
        filter,
        keep,
        fold_slot,
    })
}

impl DirectAggregate {
    /// Computes the row: one pass over the needed columns of the rows the filter keeps
    /// (evaluated on encoded data); `count(*)` alone without a filter is the table's count.
    pub(crate) fn run(&self) -> crate::Result<Vec<RecordBatch>> {
        if !self.keep {
            return Ok(vec![RecordBatch::new_empty(self.schema.clone())]);
        }
        let t = &self.table;
        let mut needed: Vec<usize> = self.aggs.iter().filter_map(|(_, c)| *c).collect();
        needed.sort_unstable();
        needed.dedup();
        let mut total = if needed.is_empty() && self.filter.is_none() {
            // count(*) alone, unfiltered: the table's count, no scan.
            let mut p = self.partial_state()?;
            p.rows = i64::try_from(t.count()).unwrap_or(i64::MAX);
            p
        } else {
            // Large tables: contiguous runs of scan units on scoped threads, one partial
            // state each, merged through the accumulators' own state/merge.
            let mut states = in_parallel(t, |units| self.partial(&needed, units))?;
            let mut first = states.remove(0);
            for mut other in states {
                first.rows += other.rows;
                for (a, b) in first.counts.iter_mut().zip(&other.counts) {
                    *a += b;
                }
                for (a, b) in first.folds.iter_mut().zip(&other.folds) {
                    if let (Some(a), Some(b)) = (a.as_mut(), b) {
                        a.merge(b);
                    }
                }
                for (a, b) in first.accs.iter_mut().zip(other.accs.iter_mut()) {
                    if let (Some(a), Some(b)) = (a.as_mut(), b.as_mut()) {
                        let state = b
                            .state()?
                            .iter()
                            .map(|v| v.to_array())
                            .collect::<datafusion::common::Result<Vec<_>>>()?;
                        a.merge_batch(&state)?;
                    }
                }
            }
            first
        };
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.aggs.len());
        for (i, (agg, _)) in self.aggs.iter().enumerate() {
            columns.push(match agg {
                AggFn::CountStar => Arc::new(Int64Array::from(vec![total.rows])),
                AggFn::Count => Arc::new(Int64Array::from(vec![total.counts[i]])),
                AggFn::Udaf(_) => match total.accs[i].as_mut() {
                    Some(acc) => acc.evaluate()?.to_array()?,
                    None => new_null_array(self.schema.field(i).data_type(), 1),
                },
                AggFn::Fold(f, _) => {
                    match self.fold_slot[i].and_then(|o| total.folds[o].as_ref()) {
                        Some(fold) => fold.finish(*f)?,
                        None => new_null_array(self.schema.field(i).data_type(), 1),
                    }
                }
            });
        }
        let b = RecordBatch::try_new(self.schema.clone(), columns)
            .map_err(|e| crate::Error::sql(format!("aggregate result: {e}")))?;
        Ok(vec![b])
    }

    /// Fresh running state: no rows, zero counts, an empty accumulator per `sum` / `avg` /
    /// `min` / `max` (DataFusion's, built for the coerced argument type).
    pub(super) fn partial_state(&self) -> crate::Result<AggState> {
        use datafusion::logical_expr::function::AccumulatorArgs;
        use datafusion::physical_expr::expressions::Column;
        let t = &self.table;
        let mut accs = Vec::with_capacity(self.aggs.len());
        for (i, (agg, col)) in self.aggs.iter().enumerate() {
            accs.push(match (agg, col) {
                (AggFn::Udaf(u), Some(c)) => {
                    let arg = coerced(*u, Arc::new(t.schema().full_schema().field(*c).clone()))
                        .ok_or_else(|| crate::Error::sql("aggregate argument type"))?;
                    let schema = Schema::new(vec![arg.clone()]);
                    let expr: Arc<dyn datafusion::physical_expr::PhysicalExpr> =
                        Arc::new(Column::new(arg.name(), 0));
                    let name = self.schema.field(i).name().clone();
                    let udaf = u();
                    Some(udaf.accumulator(AccumulatorArgs {
                        return_field: Arc::new(self.schema.field(i).clone()),
                        schema: &schema,
                        ignore_nulls: false,
                        order_bys: &[],
                        is_reversed: false,
                        name: &name,
                        is_distinct: false,
                        exprs: &[expr],
                        expr_fields: &[arg],
                    })?)
                }
                _ => None,
            });
        }
        let folds = self
            .aggs
            .iter()
            .enumerate()
            .map(|(i, (agg, col))| match (agg, col) {
                (AggFn::Fold(..), Some(c)) if self.fold_slot[i] == Some(i) => {
                    let asks = |f: &dyn Fn(FoldFn) -> bool| {
                        self.aggs
                            .iter()
                            .any(|(a, d)| matches!(a, AggFn::Fold(k, _) if f(*k)) && d == col)
                    };
                    Some(Fold::new(
                        t.schema().full_schema().field(*c).data_type() == &DataType::Float64,
                        asks(&|k| matches!(k, FoldFn::Min | FoldFn::Max)),
                        asks(&|k| matches!(k, FoldFn::Sum | FoldFn::Avg)),
                    ))
                }
                _ => None,
            })
            .collect();
        Ok(AggState { rows: 0, counts: vec![0; self.aggs.len()], accs, folds })
    }

    /// The running state over the rows of `units` the filter keeps.
    pub(super) fn partial(
        &self,
        needed: &[usize],
        units: Vec<ScanUnit>,
    ) -> crate::Result<AggState> {
        let mut st = self.partial_state()?;
        // Dictionary chunks come as codes when only counts and folds read the columns.
        let codes = self.aggs.iter().all(|(a, _)| !matches!(a, AggFn::Udaf(_)));
        let scan = self.table.scan_units_filtered(needed, self.filter.clone(), units)?;
        let scan = if codes { scan.with_codes() } else { scan };
        for b in scan {
            let b = b?;
            st.rows += b.num_rows() as i64;
            for (i, (agg, col)) in self.aggs.iter().enumerate() {
                let Some(c) = col else { continue };
                let Some(pos) = needed.iter().position(|n| n == c) else { continue };
                let a = b.column(pos);
                match agg {
                    AggFn::Count => st.counts[i] += (a.len() - a.null_count()) as i64,
                    AggFn::Udaf(u) => {
                        let Some(acc) = st.accs[i].as_mut() else { continue };
                        let want = coerced(*u, Arc::new(b.schema().field(pos).clone()))
                            .ok_or_else(|| crate::Error::sql("aggregate argument type"))?;
                        if want.data_type() == a.data_type() {
                            acc.update_batch(std::slice::from_ref(a))?;
                        } else {
                            let a = datafusion::arrow::compute::cast(a, want.data_type())
                                .map_err(|e| crate::Error::sql(format!("aggregate: {e}")))?;
                            acc.update_batch(&[a])?;
                        }
                    }
                    AggFn::Fold(..) => {
                        if let Some(fold) = st.folds[i].as_mut() {
                            fold.update(a)?;
                        }
                    }
                    AggFn::CountStar => {}
                }
            }
        }
        Ok(st)
    }
}

/// Adds one to `counts[code]` for each non-null code (codes past the end are ignored:
/// the scan checked them against the dictionary).
pub(super) fn count_codes<K: datafusion::arrow::datatypes::ArrowPrimitiveType>(
    keys: &datafusion::arrow::array::PrimitiveArray<K>,
    counts: &mut [i64],
) where
    K::Native: Into<u32>,
{
    use datafusion::arrow::array::Array;
    let v = keys.values();
    let mut add = |k: K::Native| {
        if let Some(c) = counts.get_mut(k.into() as usize) {
            *c += 1;
        }
    };
    match keys.nulls().filter(|n| n.null_count() > 0) {
        Some(nb) => nb.valid_indices().for_each(|i| add(v[i])),
        None => v.iter().for_each(|&k| add(k)),
    }
}

/// The running state of a [`DirectAggregate`] over some of the table's rows.
pub(super) struct AggState {
    pub(super) rows: i64,
    pub(super) counts: Vec<i64>,
    pub(super) accs: Vec<Option<Box<dyn datafusion::logical_expr::Accumulator>>>,
    pub(super) folds: Vec<Option<Fold>>,
}

/// The argument field after DataFusion's type coercion for aggregate `u` (AVG of an
/// integer column takes Float64, for example).
pub(super) fn coerced(
    u: fn() -> Arc<datafusion::logical_expr::AggregateUDF>,
    arg: datafusion::arrow::datatypes::FieldRef,
) -> Option<datafusion::arrow::datatypes::FieldRef> {
    let udaf = u();
    datafusion::logical_expr::type_coercion::functions::fields_with_udf(&[arg], udaf.as_ref())
        .ok()?
        .pop()
}
