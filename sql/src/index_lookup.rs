//! Index lookups: a scan's filters turned into the `_id`s of the rows a key or index says
//! can match, so the scan reads only the row groups holding them.
//!
//! Used when all of these hold:
//! 1. the table has a primary key, unique key or `CREATE INDEX` index;
//! 2. the filters constrain a leading run of its columns: `column = constant` or
//!    `column IN (constants)` on the first columns, optionally then a range
//!    (`<`, `<=`, `>`, `>=`, `BETWEEN`) on the next one;
//! 3. each constant converts to the column's type without loss (otherwise the condition is
//!    not used);
//! 4. no more rows than a quarter of the table's (at least 16) match — beyond that a scan
//!    with zone maps is cheaper;
//! 5. the snapshot's sets are built, or the filters' sampled estimate says so few rows
//!    match that building them (one scan of the key columns, kept for later queries on
//!    that state) pays.
//!
//! The lookup narrows the scan and never replaces a condition: the filters are still
//! applied to the rows read, so the candidates may be a superset (see
//! `TableSnapshot::index_candidates`). What this module must not do: decide an answer.

use std::collections::HashMap;
use std::ops::Bound;
use std::sync::Arc;

use basalt_storage::ID_COLUMN;
use basalt_storage::store::{KeyRange, TableSnapshot};
use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::{CastOptions, cast_with_options};
use datafusion::common::ScalarValue;
use datafusion::logical_expr::utils::split_conjunction;
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Operator, col, lit};

/// Most prefixes one lookup tries (the product of its `IN` lists' lengths).
const MAX_PREFIXES: usize = 256;

/// What the filters say about one column.
#[derive(Default)]
struct Conditions<'a> {
    /// The values it must equal one of (`=` or `IN`); the first such condition.
    equal: Option<Vec<&'a ScalarValue>>,
    /// A lower bound (value, inclusive).
    lower: Option<(&'a ScalarValue, bool)>,
    /// An upper bound (value, inclusive).
    upper: Option<(&'a ScalarValue, bool)>,
}

/// A lookup's result: the filter to add to the scan and the definition it used.
pub(crate) struct Lookup {
    /// `_id = n` for one row (`_id = 0` for none), an `_id` set otherwise.
    pub filter: Expr,
    /// The key's or index's name.
    pub index: String,
}

/// The lookup the filters allow on `snapshot`'s keys and indexes, if one pays (see the
/// module docs); the definition constraining the most columns is tried first. `estimate`
/// gives about how many rows the filters keep; it is asked only when the sets would have
/// to be built.
pub(crate) fn index_lookup(
    snapshot: &TableSnapshot,
    filters: &[Expr],
    estimate: &dyn Fn() -> Option<u64>,
) -> Option<Lookup> {
    if snapshot.indexes().is_empty() {
        return None;
    }
    let mut by_column: HashMap<&str, Conditions<'_>> = HashMap::new();
    for f in filters {
        for c in split_conjunction(f) {
            collect(c, &mut by_column);
        }
    }
    if by_column.is_empty() {
        return None;
    }
    let schema = snapshot.schema();
    let mut plans = Vec::new();
    for (i, d) in snapshot.indexes().iter().enumerate() {
        let mut prefixes: Vec<Vec<ArrayRef>> = vec![Vec::new()];
        let mut range: Option<KeyRange> = None;
        for &c in &d.columns {
            let Some(p) = schema.position_of_id(c) else { break };
            let field = schema.full_schema().field(p);
            let Some(cond) = by_column.get(field.name().as_str()) else { break };
            let stored = |v: &ScalarValue| exact_cast(v, field.data_type());
            if let Some(values) = &cond.equal {
                let Some(values) = values.iter().map(|v| stored(v)).collect::<Option<Vec<_>>>()
                else {
                    break;
                };
                if prefixes.len() * values.len() > MAX_PREFIXES {
                    break;
                }
                prefixes = prefixes
                    .iter()
                    .flat_map(|p| {
                        values.iter().map(move |v| {
                            let mut p = p.clone();
                            p.push(v.clone());
                            p
                        })
                    })
                    .collect();
                continue;
            }
            let bound = |b: Option<(&ScalarValue, bool)>| match b {
                None => Some(Bound::Unbounded),
                Some((v, true)) => stored(v).map(Bound::Included),
                Some((v, false)) => stored(v).map(Bound::Excluded),
            };
            if let (Some(lo), Some(hi)) = (bound(cond.lower), bound(cond.upper))
                && !(matches!(lo, Bound::Unbounded) && matches!(hi, Bound::Unbounded))
            {
                range = Some((lo, hi));
            }
            break;
        }
        let equal = prefixes[0].len();
        if equal == 0 && range.is_none() {
            continue;
        }
        let point = d.kind.is_unique() && equal == d.columns.len();
        plans.push((point, equal, range.is_some(), i, prefixes, range));
    }
    plans.sort_by_key(|p| std::cmp::Reverse((p.0, p.1, p.2)));
    let limit = (snapshot.count() as usize / 4).max(16);
    if plans.is_empty()
        || (!snapshot.index_sets_built() && estimate().is_none_or(|n| n > limit as u64))
    {
        return None;
    }
    'plans: for (_, _, _, i, prefixes, range) in plans {
        let mut ids: Vec<u64> = Vec::new();
        for p in &prefixes {
            match snapshot.index_candidates(i, p, range.as_ref(), limit - ids.len().min(limit)) {
                Ok(Some(found)) => ids.extend(found),
                _ => continue 'plans,
            }
            if ids.len() > limit {
                continue 'plans;
            }
        }
        ids.sort_unstable();
        ids.dedup();
        let index = snapshot.indexes()[i].name.clone();
        let filter = match ids.as_slice() {
            [] => col(ID_COLUMN).eq(lit(0u64)),
            [id] => col(ID_COLUMN).eq(lit(*id)),
            _ => crate::fts::IdSet::expr(ids.into(), format!("index {index}")),
        };
        return Some(Lookup { filter, index });
    }
    None
}

/// Records what conjunct `c` says about a column, when it is one a lookup can use.
fn collect<'a>(c: &'a Expr, by_column: &mut HashMap<&'a str, Conditions<'a>>) {
    match c {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => {
            let (name, v, op) = match (left.as_ref(), right.as_ref()) {
                (Expr::Column(c), Expr::Literal(v, _)) => (c.name.as_str(), v, *op),
                (Expr::Literal(v, _), Expr::Column(c)) => match op.swap() {
                    Some(op) => (c.name.as_str(), v, op),
                    None => return,
                },
                _ => return,
            };
            if v.is_null() {
                return;
            }
            let e = by_column.entry(name).or_default();
            match op {
                Operator::Eq if e.equal.is_none() => e.equal = Some(vec![v]),
                Operator::Gt => e.lower = e.lower.or(Some((v, false))),
                Operator::GtEq => e.lower = e.lower.or(Some((v, true))),
                Operator::Lt => e.upper = e.upper.or(Some((v, false))),
                Operator::LtEq => e.upper = e.upper.or(Some((v, true))),
                _ => {}
            }
        }
        Expr::InList(l) if !l.negated => {
            let Expr::Column(c) = l.expr.as_ref() else { return };
            let mut values = Vec::with_capacity(l.list.len());
            for v in &l.list {
                match v {
                    Expr::Literal(v, _) if !v.is_null() => values.push(v),
                    // A NULL in the list matches nothing; anything else: not a lookup.
                    Expr::Literal(..) => {}
                    _ => return,
                }
            }
            let e = by_column.entry(c.name.as_str()).or_default();
            if e.equal.is_none() {
                e.equal = Some(values);
            }
        }
        Expr::Between(Between { expr, negated: false, low, high }) => {
            let (Expr::Column(c), Expr::Literal(lo, _), Expr::Literal(hi, _)) =
                (expr.as_ref(), low.as_ref(), high.as_ref())
            else {
                return;
            };
            if lo.is_null() || hi.is_null() {
                return;
            }
            let e = by_column.entry(c.name.as_str()).or_default();
            e.lower = e.lower.or(Some((lo, true)));
            e.upper = e.upper.or(Some((hi, true)));
        }
        _ => {}
    }
}

/// `v` as a one-row array of type `to`, when the conversion loses nothing.
fn exact_cast(v: &ScalarValue, to: &datafusion::arrow::datatypes::DataType) -> Option<ArrayRef> {
    let strict = CastOptions { safe: false, ..Default::default() };
    let a = v.to_array().ok()?;
    let stored = cast_with_options(&a, to, &strict).ok()?;
    let back = cast_with_options(&stored, &v.data_type(), &strict).ok()?;
    let same = ScalarValue::try_from_array(&back, 0).ok().is_some_and(|b| &b == v);
    (same && stored.is_valid(0)).then(|| Arc::clone(&stored))
}
