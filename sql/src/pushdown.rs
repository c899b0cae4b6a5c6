//! Filter pushdown: DataFusion expressions to the storage [`Predicate`].
//!
//! Storage evaluates a [`Predicate`] exactly (on dictionary codes where it can, with SQL's
//! three-valued logic), so a filter that converts completely is pushed as `Exact` and
//! DataFusion drops its own filter. What converts:
//! - `column op literal` and `literal op column` for `= <> < <= > >=`, when the literal has
//!   the column's own type (DataFusion's type coercion puts it there) and the column is
//!   boolean, an integer, a float, text, binary, a date or a timestamp;
//! - `column [NOT] IN (literals)`, `column [NOT] BETWEEN literal AND literal`,
//!   `column IS [NOT] NULL`, `column [NOT] LIKE 'prefix%'` (case-sensitive, no other
//!   wildcards), a boolean column on its own (`WHERE flag`), `IS [NOT] TRUE/FALSE`;
//! - the `_id` set a full-text `fts_match` became at scan time ([`crate::fts::IdSet`]);
//! - AND / OR / NOT of those.
//!
//! Everything else (functions, arithmetic, casts of columns, comparisons between columns,
//! other LIKE patterns) is not converted. A filter that only partly converts is pushed as
//! `Inexact` with a relaxed predicate that keeps every row the filter could keep (storage
//! prunes with it, DataFusion filters again); see [`relaxed`].

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::logical_expr::{Between, BinaryExpr, Expr, Like, Operator};
use datafusion::physical_expr::{PhysicalExpr, PhysicalExprRef};
use datafusion::physical_expr_common::physical_expr::snapshot_physical_expr;
use datafusion::scalar::ScalarValue;

use basalt_storage::{CmpOp, Predicate, Scalar};

/// The exact storage predicate of `expr`, or `None` if any part of it does not convert.
pub fn exact(expr: &Expr, schema: &Schema) -> Option<Predicate> {
    convert(expr, schema)
}

/// A predicate true for at least every row where `expr` is true (a superset), or `None` if
/// nothing useful remains. Unconvertible conjuncts are dropped; an OR needs every branch.
pub fn relaxed(expr: &Expr, schema: &Schema) -> Option<Predicate> {
    if let Some(p) = convert(expr, schema) {
        return Some(p);
    }
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::And, right }) => {
            match (relaxed(left, schema), relaxed(right, schema)) {
                (Some(l), Some(r)) => Some(Predicate::all(l, r)),
                (Some(p), None) | (None, Some(p)) => Some(p),
                (None, None) => None,
            }
        }
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            Some(Predicate::any(relaxed(left, schema)?, relaxed(right, schema)?))
        }
        _ => None,
    }
}

fn convert(expr: &Expr, schema: &Schema) -> Option<Predicate> {
    match expr {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) => match op {
            Operator::And => Some(Predicate::all(convert(left, schema)?, convert(right, schema)?)),
            Operator::Or => Some(Predicate::any(convert(left, schema)?, convert(right, schema)?)),
            _ => comparison(left, *op, right, schema),
        },
        Expr::Not(e) => Some(Predicate::Not(Box::new(convert(e, schema)?))),
        Expr::IsNull(e) => Some(Predicate::IsNull { column: column(e, schema)?.0, negated: false }),
        Expr::IsNotNull(e) => {
            Some(Predicate::IsNull { column: column(e, schema)?.0, negated: true })
        }
        Expr::Column(_) => {
            let (name, dt) = column(expr, schema)?;
            (dt == DataType::Boolean).then(|| Predicate::eq(&name, true))
        }
        Expr::IsTrue(e) | Expr::IsNotFalse(e) | Expr::IsFalse(e) | Expr::IsNotTrue(e) => {
            let (name, dt) = column(e, schema)?;
            if dt != DataType::Boolean {
                return None;
            }
            let want = matches!(expr, Expr::IsTrue(_) | Expr::IsNotTrue(_));
            let p = Predicate::eq(&name, want);
            // IS TRUE / IS FALSE are never unknown: NULL rows are simply not selected, and
            // IS NOT TRUE / IS NOT FALSE select them.
            Some(match expr {
                Expr::IsTrue(_) | Expr::IsFalse(_) => p,
                _ => Predicate::Or(vec![
                    Predicate::Not(Box::new(p)),
                    Predicate::IsNull { column: name, negated: false },
                ]),
            })
        }
        Expr::InList(l) => {
            let (name, dt) = column(&l.expr, schema)?;
            let values = l.list.iter().map(|v| literal(v, &dt)).collect::<Option<Vec<Scalar>>>()?;
            Some(Predicate::InList { column: name, values: values.into(), negated: l.negated })
        }
        Expr::Between(Between { expr, negated, low, high }) => {
            let (name, dt) = column(expr, schema)?;
            let (lo, hi) = (literal(low, &dt)?, literal(high, &dt)?);
            let p = Predicate::between(&name, lo, hi);
            Some(if *negated { Predicate::Not(Box::new(p)) } else { p })
        }
        Expr::Like(Like { negated, expr, pattern, escape_char, case_insensitive }) => {
            if *case_insensitive || escape_char.is_some() {
                return None;
            }
            let (name, dt) = column(expr, schema)?;
            if !matches!(dt, DataType::Utf8 | DataType::Binary) {
                return None;
            }
            let Expr::Literal(
                ScalarValue::Utf8(Some(p))
                | ScalarValue::LargeUtf8(Some(p))
                | ScalarValue::Utf8View(Some(p)),
                _,
            ) = pattern.as_ref()
            else {
                return None;
            };
            Predicate::like(&name, p, *negated)
        }
        Expr::Literal(ScalarValue::Boolean(Some(true)), _) => Some(Predicate::True),
        Expr::Literal(ScalarValue::Boolean(Some(false)), _) => Some(Predicate::False),
        // The `_id` set a full-text match became (see `fts`).
        Expr::ScalarFunction(f) => {
            let set = f.func.inner().downcast_ref::<crate::fts::IdSet>()?;
            Some(Predicate::IdSet(set.ids.clone()))
        }
        _ => None,
    }
}

fn comparison(left: &Expr, op: Operator, right: &Expr, schema: &Schema) -> Option<Predicate> {
    let op = cmp_op(op)?;
    if let Some((name, dt)) = column(left, schema) {
        return Some(Predicate::cmp(&name, op, literal(right, &dt)?));
    }
    let (name, dt) = column(right, schema)?;
    Some(Predicate::cmp(&name, op.flipped(), literal(left, &dt)?))
}

fn cmp_op(op: Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::NotEq,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::LtEq,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

/// A plain column reference of a type storage compares natively.
fn column(e: &Expr, schema: &Schema) -> Option<(String, DataType)> {
    let Expr::Column(c) = e else { return None };
    let f = schema.field_with_name(&c.name).ok()?;
    let dt = f.data_type().clone();
    let supported = dt == DataType::Boolean
        || dt.is_integer()
        || matches!(dt, DataType::Float32 | DataType::Float64)
        || matches!(dt, DataType::Utf8 | DataType::Binary)
        || matches!(dt, DataType::Date32 | DataType::Date64 | DataType::Timestamp(_, _))
        || matches!(dt, DataType::Decimal128(_, _));
    supported.then(|| (c.name.clone(), dt))
}

/// A literal of exactly the column's type (text literals of any string type for text).
fn literal(e: &Expr, column_type: &DataType) -> Option<Scalar> {
    let Expr::Literal(v, _) = e else { return None };
    scalar_of(v, column_type)
}

/// A constant of exactly the column's type as a storage scalar.
pub(crate) fn scalar_of(v: &ScalarValue, column_type: &DataType) -> Option<Scalar> {
    if v.is_null() {
        return Some(Scalar::Null);
    }
    let dt = v.data_type();
    let same = match column_type {
        DataType::Utf8 => matches!(dt, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View),
        DataType::Binary => {
            matches!(dt, DataType::Binary | DataType::LargeBinary | DataType::BinaryView)
        }
        // A decimal of the column's scale compares exactly on unscaled values, whatever
        // its precision.
        DataType::Decimal128(_, scale) => matches!(dt, DataType::Decimal128(_, s) if s == *scale),
        t => &dt == t,
    };
    if !same {
        return None;
    }
    Some(match v {
        ScalarValue::Boolean(Some(b)) => Scalar::Bool(*b),
        ScalarValue::Int8(Some(x)) => Scalar::Int(i64::from(*x)),
        ScalarValue::Int16(Some(x)) => Scalar::Int(i64::from(*x)),
        ScalarValue::Int32(Some(x)) => Scalar::Int(i64::from(*x)),
        ScalarValue::Int64(Some(x)) => Scalar::Int(*x),
        ScalarValue::UInt8(Some(x)) => Scalar::UInt(u64::from(*x)),
        ScalarValue::UInt16(Some(x)) => Scalar::UInt(u64::from(*x)),
        ScalarValue::UInt32(Some(x)) => Scalar::UInt(u64::from(*x)),
        ScalarValue::UInt64(Some(x)) => Scalar::UInt(*x),
        ScalarValue::Float32(Some(x)) => Scalar::Float(f64::from(*x)),
        ScalarValue::Float64(Some(x)) => Scalar::Float(*x),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Scalar::Str(s.clone()),
        ScalarValue::Binary(Some(b))
        | ScalarValue::LargeBinary(Some(b))
        | ScalarValue::BinaryView(Some(b)) => Scalar::Bytes(b.clone()),
        ScalarValue::Date32(Some(d)) => Scalar::Int(i64::from(*d)),
        ScalarValue::Date64(Some(d)) => Scalar::Int(*d),
        ScalarValue::TimestampSecond(Some(t), _)
        | ScalarValue::TimestampMillisecond(Some(t), _)
        | ScalarValue::TimestampMicrosecond(Some(t), _)
        | ScalarValue::TimestampNanosecond(Some(t), _) => Scalar::Int(*t),
        ScalarValue::Decimal128(Some(v), _, scale) => {
            Scalar::Decimal { unscaled: *v, scale: *scale }
        }
        _ => return None,
    })
}

/// A predicate true for at least every row where the physical expression `e` is true, for
/// pruning scan units with zone maps (dynamic filters of TopK and joins arrive this way).
/// Dynamic expressions are read at their current state; unconvertible conjuncts are
/// dropped. `None` if nothing converts.
pub fn from_physical(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Predicate> {
    let e = snapshot_physical_expr(Arc::clone(e)).ok()?;
    physical(&e, schema, false)
}

/// A predicate for the physical expression `e` (read at its current state) that drops
/// nothing but the routing of a `CASE … WHEN … THEN p_i` (a partitioned join's filter,
/// taken as the OR of its branches) and bounds on a column whose values a conjunction
/// also lists: true wherever `e` is, and nearly only there — what a scan filters rows by
/// for a parent that applies `e` again. `None` if any part does not convert.
pub fn covering_physical(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<Predicate> {
    let e = snapshot_physical_expr(Arc::clone(e)).ok()?;
    physical(&e, schema, true).map(without_list_bounds)
}

/// `strict`: every conjunct must convert (else unconvertible ones are dropped).
fn physical(e: &Arc<dyn PhysicalExpr>, schema: &Schema, strict: bool) -> Option<Predicate> {
    use datafusion::physical_expr::expressions::{
        BinaryExpr as PBinary, CaseExpr, InListExpr, IsNotNullExpr, IsNullExpr, Literal,
    };
    if let Some(b) = e.downcast_ref::<PBinary>() {
        return match b.op() {
            Operator::And => {
                match (physical(b.left(), schema, strict), physical(b.right(), schema, strict)) {
                    (Some(l), Some(r)) => Some(Predicate::all(l, r)),
                    (Some(p), None) | (None, Some(p)) if !strict => Some(p),
                    _ => None,
                }
            }
            Operator::Or => Some(Predicate::any(
                physical(b.left(), schema, strict)?,
                physical(b.right(), schema, strict)?,
            )),
            op => {
                let op = cmp_op(*op)?;
                if let Some((name, dt)) = physical_column(b.left(), schema) {
                    let v = b.right().downcast_ref::<Literal>()?.value();
                    return Some(Predicate::cmp(&name, op, scalar_of(v, &dt)?));
                }
                let (name, dt) = physical_column(b.right(), schema)?;
                let v = b.left().downcast_ref::<Literal>()?.value();
                Some(Predicate::cmp(&name, op.flipped(), scalar_of(v, &dt)?))
            }
        };
    }
    // CASE [x] WHEN … THEN p_1 … [ELSE q]: true only where the branch taken is, so
    // wherever the CASE is true some p_i (or q) is. An ELSE that is NULL or false adds none.
    if let Some(c) = e.downcast_ref::<CaseExpr>() {
        let mut branches = c
            .when_then_expr()
            .iter()
            .map(|(_, then)| physical(then, schema, strict))
            .collect::<Option<Vec<_>>>()?;
        if let Some(other) = c.else_expr() {
            let never = other.downcast_ref::<Literal>().is_some_and(|l| {
                l.value().is_null() || l.value() == &ScalarValue::Boolean(Some(false))
            });
            if !never {
                branches.push(physical(other, schema, strict)?);
            }
        }
        branches.retain(|b| *b != Predicate::False);
        return Some(match branches.len() {
            0 => Predicate::False,
            1 => branches.pop()?,
            _ => union_of_lists(&branches).unwrap_or(Predicate::Or(branches)),
        });
    }
    if let Some(l) = e.downcast_ref::<InListExpr>() {
        if l.negated() {
            return None;
        }
        if let Some(p) = struct_list(l, schema) {
            return Some(p);
        }
        let (name, dt) = physical_column(l.expr(), schema)?;
        let values = l
            .list()
            .iter()
            .map(|v| scalar_of(v.downcast_ref::<Literal>()?.value(), &dt))
            .collect::<Option<Vec<_>>>()?;
        return Some(Predicate::InList {
            column: name,
            values: sorted_ints(values).into(),
            negated: false,
        });
    }
    if let Some(n) = e.downcast_ref::<IsNullExpr>() {
        return Some(Predicate::IsNull {
            column: physical_column(n.arg(), schema)?.0,
            negated: false,
        });
    }
    if let Some(n) = e.downcast_ref::<IsNotNullExpr>() {
        return Some(Predicate::IsNull {
            column: physical_column(n.arg(), schema)?.0,
            negated: true,
        });
    }
    if let Some(l) = e.downcast_ref::<Literal>() {
        return match l.value() {
            ScalarValue::Boolean(Some(true)) => Some(Predicate::True),
            ScalarValue::Boolean(Some(false)) => Some(Predicate::False),
            _ => None,
        };
    }
    None
}

/// `struct(c₁, …, cₙ) IN (struct literals)` — a hash join's key list on several columns —
/// as `c₁ IN (values of field 1) AND … AND cₙ IN (values of field n)`: true wherever the
/// list is, and also for rows pairing values of different entries (a superset, which is
/// what both callers of [`physical`] allow). `None` when the expression is not `struct` of
/// plain columns or a value does not convert (see [`struct_list_fields`]).
fn struct_list(
    l: &datafusion::physical_expr::expressions::InListExpr,
    schema: &Schema,
) -> Option<Predicate> {
    let mut terms = Vec::new();
    for (arg, values) in struct_list_fields(l)? {
        let (name, dt) = physical_column(&arg, schema)?;
        let list = values.iter().map(|v| scalar_of(v, &dt)).collect::<Option<Vec<_>>>()?;
        terms.push(Predicate::InList {
            column: name,
            values: sorted_ints(list).into(),
            negated: false,
        });
    }
    Some(match terms.len() {
        1 => terms.pop()?,
        _ => Predicate::And(terms),
    })
}

/// The fields of `struct(e₁, …, eₙ) IN (struct literals)` (a hash join's key list on
/// several columns): each `eᵢ` with the distinct values field `i` takes in the list.
/// `None` for other shapes, and when an entry holds a NULL field: a join that matches NULL
/// keys lists them, and per-field lists without them would drop rows it keeps.
pub(crate) fn struct_list_fields(
    l: &datafusion::physical_expr::expressions::InListExpr,
) -> Option<Vec<(PhysicalExprRef, Vec<ScalarValue>)>> {
    use datafusion::arrow::array::Array;
    use datafusion::physical_expr::ScalarFunctionExpr;
    use datafusion::physical_expr::expressions::Literal;
    let f = l.expr().downcast_ref::<ScalarFunctionExpr>()?;
    if f.name() != "struct" || f.args().is_empty() || l.negated() {
        return None;
    }
    let n = f.args().len();
    let mut seen: Vec<std::collections::HashSet<ScalarValue>> =
        vec![std::collections::HashSet::new(); n];
    let mut values: Vec<Vec<ScalarValue>> = vec![Vec::new(); n];
    for item in l.list() {
        let ScalarValue::Struct(s) = item.downcast_ref::<Literal>()?.value() else {
            return None;
        };
        if s.len() != 1 || s.num_columns() != n || s.is_null(0) {
            return None;
        }
        for (i, field) in s.columns().iter().enumerate() {
            let v = ScalarValue::try_from_array(field.as_ref(), 0).ok()?;
            if v.is_null() {
                return None;
            }
            if seen[i].insert(v.clone()) {
                values[i].push(v);
            }
        }
    }
    Some(f.args().iter().cloned().zip(values).collect())
}

/// Branches that each hold one `c IN (…)` on the same column `c` (a partitioned join's key
/// list and bounds per partition) as one list of all their values: true wherever a branch
/// is, tested by one lookup a row instead of one per branch. `None` for other shapes.
fn union_of_lists(branches: &[Predicate]) -> Option<Predicate> {
    let mut column: Option<&String> = None;
    let mut all = Vec::new();
    for b in branches {
        let terms = match b {
            Predicate::And(v) => v.as_slice(),
            p => std::slice::from_ref(p),
        };
        let mut lists = terms.iter().filter_map(|t| match t {
            Predicate::InList { column, values, negated: false } => Some((column, values)),
            _ => None,
        });
        let (Some((c, values)), None) = (lists.next(), lists.next()) else { return None };
        if *column.get_or_insert(c) != c {
            return None;
        }
        all.extend(values.iter().cloned());
    }
    Some(Predicate::InList {
        column: column?.clone(),
        values: sorted_ints(all).into(),
        negated: false,
    })
}

/// Integer list values sorted and without repeats (a join's build keys repeat), once here
/// rather than by every evaluation's lookup; other lists as they are.
fn sorted_ints(mut values: Vec<Scalar>) -> Vec<Scalar> {
    if values.iter().all(|v| matches!(v, Scalar::Int(_))) {
        values.sort_by_key(|v| match v {
            Scalar::Int(x) => *x,
            _ => 0,
        });
        values.dedup();
    }
    values
}

/// `p` without the comparisons on a column that a conjunction also lists values of (a
/// join filter's bounds next to its key list): a weaker predicate, kept by whatever the
/// list keeps, and one pass over the column instead of three.
fn without_list_bounds(p: Predicate) -> Predicate {
    match p {
        Predicate::And(terms) => {
            let listed: Vec<String> = terms
                .iter()
                .filter_map(|t| match t {
                    Predicate::InList { column, negated: false, .. } => Some(column.clone()),
                    _ => None,
                })
                .collect();
            let kept: Vec<Predicate> = terms
                .into_iter()
                .filter(|t| !matches!(t, Predicate::Cmp { column, .. } if listed.contains(column)))
                .map(without_list_bounds)
                .collect();
            match kept.len() {
                1 => kept.into_iter().next().unwrap_or(Predicate::True),
                _ => Predicate::And(kept),
            }
        }
        Predicate::Or(terms) => Predicate::Or(terms.into_iter().map(without_list_bounds).collect()),
        p => p,
    }
}

fn physical_column(e: &Arc<dyn PhysicalExpr>, schema: &Schema) -> Option<(String, DataType)> {
    let c = e.downcast_ref::<datafusion::physical_expr::expressions::Column>()?;
    column(&Expr::Column(datafusion::common::Column::new_unqualified(c.name())), schema)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;
    use datafusion::logical_expr::{col, lit};

    fn schema() -> Schema {
        Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("a", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("f", DataType::Boolean, true),
            Field::new("d", DataType::Decimal128(15, 2), true),
        ])
    }

    /// A decimal constant of the column's scale converts (any precision), as its unscaled
    /// value; one of another scale does not.
    #[test]
    fn decimal_comparisons_convert_at_the_column_scale() {
        let s = schema();
        let dec = |v: i128, p: u8, sc: i8| lit(ScalarValue::Decimal128(Some(v), p, sc));
        let want = Predicate::cmp("d", CmpOp::GtEq, Scalar::Decimal { unscaled: 5, scale: 2 });
        assert_eq!(exact(&col("d").gt_eq(dec(5, 15, 2)), &s), Some(want.clone()));
        assert_eq!(exact(&col("d").gt_eq(dec(5, 3, 2)), &s), Some(want));
        assert_eq!(exact(&col("d").lt(dec(5, 15, 3)), &s), None);
        assert!(exact(&col("d").lt(lit(5i64)), &s).is_none());
    }

    #[test]
    fn comparisons_and_logic_convert_exactly() {
        let s = schema();
        let e = col("a").gt(lit(5i64)).and(col("s").eq(lit("x")).or(col("a").is_null()));
        let p = exact(&e, &s).expect("converts");
        assert_eq!(p.columns(), vec!["a", "s"]);
        assert_eq!(exact(&lit(3i64).lt(col("a")), &s), Some(Predicate::cmp("a", CmpOp::Gt, 3i64)));
        assert!(exact(&col("s").like(lit("ab%")), &s).is_some());
        assert_eq!(
            exact(&col("s").like(lit("a_b%")), &s),
            Some(Predicate::Like { column: "s".into(), pattern: "a_b%".into(), negated: false })
        );
        assert!(exact(&col("s").like(lit("a\\_b%")), &s).is_none());
        assert!(exact(&col("f"), &s).is_some());
    }

    #[test]
    fn other_types_and_shapes_do_not_convert() {
        let s = schema();
        // An Int32 literal against an Int64 column: not the column's type.
        assert!(exact(&col("a").eq(lit(5i32)), &s).is_none());
        assert!(exact(&col("a").eq(col("a")), &s).is_none());
        assert!(exact(&(col("a") + lit(1i64)).gt(lit(2i64)), &s).is_none());
        // Partly convertible: relaxed keeps the convertible conjunct only.
        let e = col("a").gt(lit(1i64)).and((col("a") + lit(1i64)).gt(lit(2i64)));
        assert!(exact(&e, &s).is_none());
        assert_eq!(relaxed(&e, &s), Some(Predicate::cmp("a", CmpOp::Gt, 1i64)));
        let or = col("a").gt(lit(1i64)).or((col("a") + lit(1i64)).gt(lit(2i64)));
        assert_eq!(relaxed(&or, &s), None);
    }

    #[test]
    fn partitioned_join_filters_cover_the_union_of_their_lists() {
        use datafusion::physical_expr::expressions::{self as px, CaseExpr};
        let s = schema();
        let a = px::col("a", &s).unwrap();
        let list = |keys: &[i64]| -> Arc<dyn PhysicalExpr> {
            let l = keys.iter().map(|k| px::lit(*k)).collect();
            let within = px::binary(a.clone(), Operator::GtEq, px::lit(keys[0]), &s).unwrap();
            px::binary(within, Operator::And, px::in_list(a.clone(), l, &false, &s).unwrap(), &s)
                .unwrap()
        };
        let modulo = px::binary(a.clone(), Operator::Modulo, px::lit(2i64), &s).unwrap();
        let case = |other: Option<Arc<dyn PhysicalExpr>>| -> Arc<dyn PhysicalExpr> {
            let whens = vec![(px::lit(0i64), list(&[4, 2])), (px::lit(1i64), list(&[3, 9]))];
            Arc::new(CaseExpr::try_new(Some(modulo.clone()), whens, other).unwrap())
        };
        // Routing dropped, lists merged (and the integer keys sorted); ELSE false adds none.
        let want = Predicate::InList {
            column: "a".into(),
            values: [2, 3, 4, 9].map(Scalar::Int).to_vec().into(),
            negated: false,
        };
        assert_eq!(covering_physical(&case(Some(px::lit(false))), &s), Some(want.clone()));
        assert_eq!(covering_physical(&case(None), &s), Some(want));
        // Another ELSE joins the branches; one that does not convert defeats the whole.
        let other = px::binary(a.clone(), Operator::Lt, px::lit(0i64), &s).unwrap();
        let p = covering_physical(&case(Some(other)), &s).expect("converts");
        assert!(matches!(&p, Predicate::Or(v) if v.len() == 3), "{p}");
        let opaque = px::binary(a.clone(), Operator::Plus, px::lit(1i64), &s).unwrap();
        let opaque = px::binary(opaque, Operator::Gt, px::lit(0i64), &s).unwrap();
        assert_eq!(covering_physical(&case(Some(opaque.clone())), &s), None);
        // A key list makes the bounds on its column redundant: one lookup, keys sorted once.
        let want = Predicate::InList {
            column: "a".into(),
            values: [5, 7].map(Scalar::Int).to_vec().into(),
            negated: false,
        };
        assert_eq!(covering_physical(&list(&[7, 5, 7]), &s), Some(want));
        assert!(matches!(from_physical(&list(&[7, 5]), &s), Some(Predicate::And(_))));
        // Pruning keeps what converts of a conjunction; covering needs all of it.
        let and = px::binary(list(&[5, 7]), Operator::And, opaque, &s).unwrap();
        assert!(from_physical(&and, &s).is_some());
        assert_eq!(covering_physical(&and, &s), None);
    }

    #[test]
    fn multi_column_key_lists_become_a_list_per_column() {
        use datafusion::arrow::array::{ArrayRef, Int64Array, StringArray, StructArray};
        use datafusion::arrow::datatypes::Fields;
        use datafusion::common::DFSchema;
        use datafusion::execution::context::ExecutionProps;
        use datafusion::logical_expr::expr::ScalarFunction;
        use datafusion::physical_expr::create_physical_expr;
        use datafusion::physical_expr::expressions::InListExpr;
        let s = schema();
        let df = DFSchema::try_from(s.clone()).unwrap();
        let key = Expr::ScalarFunction(ScalarFunction::new_udf(
            datafusion::functions::core::r#struct(),
            vec![col("a"), col("s")],
        ));
        let planning =
            datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext::default();
        let key = create_physical_expr(&key, &df, &ExecutionProps::new(), &planning).unwrap();
        let entries = |a: Vec<Option<i64>>, s: Vec<&str>| -> ArrayRef {
            let fields = Fields::from(vec![
                Field::new("c0", DataType::Int64, true),
                Field::new("c1", DataType::Utf8, true),
            ]);
            let cols: Vec<ArrayRef> =
                vec![Arc::new(Int64Array::from(a)), Arc::new(StringArray::from(s))];
            Arc::new(StructArray::new(fields, cols, None))
        };
        let list = |arr: ArrayRef| -> Arc<dyn PhysicalExpr> {
            Arc::new(InListExpr::try_new_from_array(key.clone(), arr, false, &s).unwrap())
        };
        let e = list(entries(vec![Some(7), Some(5), Some(7)], vec!["x", "y", "y"]));
        let Some(Predicate::And(terms)) = covering_physical(&e, &s) else { panic!("converts") };
        let a_keys = Predicate::InList {
            column: "a".into(),
            values: [5, 7].map(Scalar::Int).to_vec().into(),
            negated: false,
        };
        assert_eq!(terms[0], a_keys);
        let Predicate::InList { column, values, .. } = &terms[1] else { panic!("{terms:?}") };
        let mut strs: Vec<Scalar> = values.to_vec();
        strs.sort_by_key(|v| format!("{v:?}"));
        assert_eq!(column, "s");
        assert_eq!(strs, vec![Scalar::Str("x".into()), Scalar::Str("y".into())]);
        assert!(from_physical(&e, &s).is_some());
        // An entry with a NULL field: not converted.
        let e = list(entries(vec![Some(7), None], vec!["x", "y"]));
        assert_eq!(covering_physical(&e, &s), None);
    }
}
