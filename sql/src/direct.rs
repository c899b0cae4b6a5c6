//! The direct path: simple single-table statements, recognised from the *parsed* statement
//! (never from the SQL text) and run straight against storage, without DataFusion's
//! planning, optimisation and physical planning (which cost milliseconds per statement,
//! and DataFusion re-plans a prepared statement at every run).
//!
//! Shapes taken (everything else goes to DataFusion, which gives the same answer slower):
//! - `SELECT *|col [AS x], … FROM t [AS a] [WHERE p] [LIMIT n] [OFFSET m]`: `_id = v` and
//!   `_id IN (…)` (alone or ANDed with more) are point lookups through the id index; other
//!   filters are storage scans that evaluate `p` on encoded data, skip row groups by zone
//!   map, stop at the limit and decode only the window of rows the result comes from;
//! - `UPDATE t SET col = v, … [WHERE p]`, `DELETE FROM t [WHERE p]`: one write statement of
//!   the connection's session (auto-commit or inside its transaction), rows found as above;
//! - `INSERT INTO t [(cols)] VALUES (v, …), …`;
//! - `SELECT agg(col|*) [AS x], … FROM t [WHERE p]` with `count`, `sum`, `avg`, `min`,
//!   `max` and no GROUP BY: one pass over the filtered rows on both cores; `sum` / `avg` /
//!   `min` / `max` of Int64 and Float64 columns are folded here ([`Fold`]: plain values in
//!   vectorised blocks, dictionary-coded chunks once per entry with its row count), others
//!   go through DataFusion's accumulators.
//!
//! `p` is a predicate that converts *exactly* to a storage [`Predicate`] (comparisons of a
//! column with a constant, `IN`, `BETWEEN`, `IS [NOT] NULL`, `LIKE 'prefix%'`, AND / OR /
//! NOT); `v` is a literal or a `$n` parameter whose value has the column's type without a
//! lossy conversion (an integer for an integer or float column, text for text, …). Where
//! DataFusion would coerce differently (an integer column against `2.5`, text against a
//! number, dates written as text, …) the statement is not taken. `t` must be a native
//! table of the statement's view (not a view, an external table or a file).
//!
//! What this module must not do: decide anything from SQL text, run a statement whose
//! result could differ from DataFusion's (the equivalence tests in `engine/tests/it/sql.rs`
//! run every shape both ways), or write outside the session's write statement.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, Int8Array, Int16Array, Int32Array,
    Int64Array, RecordBatch, RecordBatchOptions, StringArray, UInt8Array, UInt16Array, UInt32Array,
    UInt64Array, new_null_array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, BinaryOperator, Delete, Expr, FromTable, GroupByExpr, Ident, Insert,
    LimitClause, ObjectName, Query, Select, SelectItem, SetExpr, Statement, TableFactor,
    TableObject, TableWithJoins, UnaryOperator, Update, Value,
};

use basalt_storage::{CmpOp, ID_COLUMN, Predicate, Scalar, ScanUnit, TableSnapshot};

use crate::rewrite::ident_name;

/// A statement the direct path runs.
#[derive(Debug)]
pub(crate) enum Direct {
    /// A projected, filtered, limited read.
    Select(DirectSelect),
    /// Aggregates over the whole (filtered) table, without GROUP BY.
    Aggregate(DirectAggregate),
    /// `UPDATE … SET … [WHERE]`.
    Update {
        /// Table.
        table: String,
        /// Rows to change.
        filter: Option<Predicate>,
        /// One row: the new values of the assigned columns.
        values: RecordBatch,
    },
    /// `DELETE FROM … [WHERE]`.
    Delete {
        /// Table.
        table: String,
        /// Rows to delete.
        filter: Option<Predicate>,
    },
    /// `INSERT INTO … VALUES`.
    Insert {
        /// Table.
        table: String,
        /// The rows, in the table's user schema.
        rows: RecordBatch,
    },
}

/// A read the direct path runs.
#[derive(Debug)]
pub(crate) struct DirectSelect {
    name: String,
    table: Arc<TableSnapshot>,
    /// Full-schema positions of the output columns.
    projection: Vec<usize>,
    /// The output schema (the table's fields under their output names).
    schema: SchemaRef,
    filter: Option<Predicate>,
    offset: usize,
    limit: Option<usize>,
}

/// What the classifier needs to know about the connection.
pub(crate) struct Env<'a> {
    /// Whether unquoted identifiers fold to lower case.
    pub lower_idents: bool,
    /// Values of `$1`, `$2`, … (empty outside prepared statements).
    pub params: &'a [ScalarValue],
    /// The native table of this name in the statement's view (`None`: not a native table).
    pub table: &'a dyn Fn(&str) -> Option<Arc<TableSnapshot>>,
}

/// The direct plan of `stmt`, or `None` when it is not one of the direct shapes.
pub(crate) fn classify(stmt: &Statement, env: &Env<'_>) -> Option<Direct> {
    match stmt {
        Statement::Query(q) => select(q, env),
        Statement::Update(u) => update(u, env),
        Statement::Delete(d) => delete(d, env),
        Statement::Insert(i) => insert(i, env),
        _ => None,
    }
}

/// A constant as written (or bound), before it meets a column type.
#[derive(Debug, Clone, PartialEq)]
enum Lit {
    Null,
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
}

fn literal(e: &Expr, env: &Env<'_>) -> Option<Lit> {
    match e {
        Expr::Nested(e) => literal(e, env),
        Expr::UnaryOp { op: UnaryOperator::Minus, expr } => match literal(expr, env)? {
            Lit::Int(i) => i.checked_neg().map(Lit::Int),
            Lit::Float(f) => Some(Lit::Float(-f)),
            _ => None,
        },
        Expr::Value(v) => match &v.value {
            Value::Number(n, false) => number(&n.to_string()),
            Value::SingleQuotedString(s) => Some(Lit::Str(s.clone())),
            Value::Boolean(b) => Some(Lit::Bool(*b)),
            Value::Null => Some(Lit::Null),
            Value::Placeholder(p) => param(p, env),
            _ => None,
        },
        _ => None,
    }
}

/// A numeric literal as DataFusion reads it: an integer if it fits `i64`, else a float.
fn number(n: &str) -> Option<Lit> {
    if let Ok(i) = n.parse::<i64>() {
        return Some(Lit::Int(i));
    }
    if n.bytes().all(|b| b.is_ascii_digit()) {
        // Beyond i64 DataFusion reads UInt64 or a decimal; not taken.
        return None;
    }
    n.parse::<f64>().ok().filter(|f| f.is_finite()).map(Lit::Float)
}

/// The position (0-based) of parameter `$n`.
fn param_index(p: &str) -> Option<usize> {
    p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)
}

fn param(p: &str, env: &Env<'_>) -> Option<Lit> {
    param_lit(env.params.get(param_index(p)?)?)
}

/// A parameter's value as a literal (`None`: a value the direct path does not take).
fn param_lit(v: &ScalarValue) -> Option<Lit> {
    Some(match v {
        // NULL of any type is NULL (as a `NULL` written in the statement).
        v if v.is_null() => Lit::Null,
        ScalarValue::Int8(Some(v)) => Lit::Int((*v).into()),
        ScalarValue::Int16(Some(v)) => Lit::Int((*v).into()),
        ScalarValue::Int32(Some(v)) => Lit::Int((*v).into()),
        ScalarValue::Int64(Some(v)) => Lit::Int(*v),
        ScalarValue::UInt8(Some(v)) => Lit::Int((*v).into()),
        ScalarValue::UInt16(Some(v)) => Lit::Int((*v).into()),
        ScalarValue::UInt32(Some(v)) => Lit::Int((*v).into()),
        ScalarValue::UInt64(Some(v)) => Lit::Int(i64::try_from(*v).ok()?),
        ScalarValue::Float64(Some(v)) if v.is_finite() => Lit::Float(*v),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Lit::Str(s.clone()),
        ScalarValue::Boolean(Some(b)) => Lit::Bool(*b),
        _ => return None,
    })
}

/// `lit` as a predicate constant for a column of type `t`, when comparing them needs no
/// coercion that could change the answer. NULL is not taken (DataFusion folds those).
fn scalar_for(t: &DataType, lit: &Lit) -> Option<Scalar> {
    const EXACT_F64: i64 = 1 << 53;
    match (t, lit) {
        (DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64, Lit::Int(i)) => {
            fits(t, *i).then_some(Scalar::Int(*i))
        }
        (DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64, Lit::Int(i)) => {
            fits(t, *i).then_some(Scalar::UInt(*i as u64))
        }
        (DataType::Float64, Lit::Int(i)) if i.abs() <= EXACT_F64 => Some(Scalar::Float(*i as f64)),
        (DataType::Float64, Lit::Float(f)) => Some(Scalar::Float(*f)),
        (DataType::Utf8, Lit::Str(s)) => Some(Scalar::Str(s.clone())),
        (DataType::Boolean, Lit::Bool(b)) => Some(Scalar::Bool(*b)),
        _ => None,
    }
}

/// Whether integer `i` is a value of integer type `t`.
fn fits(t: &DataType, i: i64) -> bool {
    match t {
        DataType::Int8 => i8::try_from(i).is_ok(),
        DataType::Int16 => i16::try_from(i).is_ok(),
        DataType::Int32 => i32::try_from(i).is_ok(),
        DataType::Int64 => true,
        DataType::UInt8 => u8::try_from(i).is_ok(),
        DataType::UInt16 => u16::try_from(i).is_ok(),
        DataType::UInt32 => u32::try_from(i).is_ok(),
        DataType::UInt64 => i >= 0,
        _ => false,
    }
}

/// `lit` as a one-row array of column type `t` (for INSERT and SET), when DataFusion's
/// cast would give the same value.
fn value_for(t: &DataType, lit: &Lit) -> Option<ArrayRef> {
    values_for(t, std::slice::from_ref(lit))
}

/// One column of values of type `t` from literals, converted as [`value_for`] converts each
/// (`None`: one of them does not convert exactly). A multi-row `VALUES` builds each column
/// in one go instead of an array per value and a concatenation.
fn values_for(t: &DataType, lits: &[Lit]) -> Option<ArrayRef> {
    const EXACT_F64: i64 = 1 << 53;
    const EXACT_F32: i64 = 1 << 24;
    if lits.iter().all(|l| *l == Lit::Null) {
        return Some(new_null_array(t, lits.len()));
    }
    // Each literal through `conv` (NULL stays NULL), or `None` if one does not convert.
    fn each<'a, T>(lits: &'a [Lit], conv: impl Fn(&'a Lit) -> Option<T>) -> Option<Vec<Option<T>>> {
        lits.iter()
            .map(|l| match l {
                Lit::Null => Some(None),
                l => conv(l).map(Some),
            })
            .collect()
    }
    let int = |l: &Lit| match l {
        Lit::Int(i) => Some(*i),
        _ => None,
    };
    Some(match t {
        DataType::Int8 => Arc::new(Int8Array::from(each(lits, |l| i8::try_from(int(l)?).ok())?)),
        DataType::Int16 => Arc::new(Int16Array::from(each(lits, |l| i16::try_from(int(l)?).ok())?)),
        DataType::Int32 => Arc::new(Int32Array::from(each(lits, |l| i32::try_from(int(l)?).ok())?)),
        DataType::Int64 => Arc::new(Int64Array::from(each(lits, int)?)),
        DataType::UInt8 => Arc::new(UInt8Array::from(each(lits, |l| u8::try_from(int(l)?).ok())?)),
        DataType::UInt16 => {
            Arc::new(UInt16Array::from(each(lits, |l| u16::try_from(int(l)?).ok())?))
        }
        DataType::UInt32 => {
            Arc::new(UInt32Array::from(each(lits, |l| u32::try_from(int(l)?).ok())?))
        }
        DataType::UInt64 => {
            Arc::new(UInt64Array::from(each(lits, |l| u64::try_from(int(l)?).ok())?))
        }
        DataType::Float64 => Arc::new(Float64Array::from(each(lits, |l| match l {
            Lit::Int(i) if i.abs() <= EXACT_F64 => Some(*i as f64),
            Lit::Float(f) => Some(*f),
            _ => None,
        })?)),
        DataType::Float32 => Arc::new(Float32Array::from(each(lits, |l| match l {
            Lit::Int(i) if i.abs() <= EXACT_F32 => Some(*i as f32),
            _ => None,
        })?)),
        DataType::Utf8 => Arc::new(StringArray::from(each(lits, |l| match l {
            Lit::Str(s) => Some(s.as_str()),
            _ => None,
        })?)),
        DataType::Boolean => Arc::new(BooleanArray::from(each(lits, |l| match l {
            Lit::Bool(b) => Some(*b),
            _ => None,
        })?)),
        _ => return None,
    })
}

/// The table a single plain relation names, with the names its columns may be qualified by.
struct Relation {
    name: String,
    snapshot: Arc<TableSnapshot>,
    /// The alias if there is one, else the table name: what `x.col` may say.
    qualifier: String,
}

fn relation(from: &[TableWithJoins], env: &Env<'_>) -> Option<Relation> {
    let [TableWithJoins { relation, joins }] = from else { return None };
    if !joins.is_empty() {
        return None;
    }
    let TableFactor::Table {
        name,
        alias,
        args,
        with_hints,
        version,
        with_ordinality,
        partitions,
        json_path,
        sample,
        index_hints,
    } = relation
    else {
        return None;
    };
    if args.is_some()
        || !with_hints.is_empty()
        || version.is_some()
        || *with_ordinality
        || !partitions.is_empty()
        || json_path.is_some()
        || sample.is_some()
        || !index_hints.is_empty()
    {
        return None;
    }
    let name = table_name(name, env)?;
    let qualifier = match alias {
        None => name.clone(),
        Some(a) if a.columns.is_empty() => ident_name(&a.name, env.lower_idents),
        Some(_) => return None,
    };
    let snapshot = (env.table)(&name)?;
    Some(Relation { name, snapshot, qualifier })
}

/// A one-part, unquoted-or-double-quoted table name.
fn table_name(name: &ObjectName, env: &Env<'_>) -> Option<String> {
    let [part] = name.0.as_slice() else { return None };
    let ident = part.as_ident()?;
    if !matches!(ident.quote_style, None | Some('"')) {
        return None;
    }
    Some(ident_name(ident, env.lower_idents))
}

impl Relation {
    /// The full-schema position of the column `e` names.
    fn column(&self, e: &Expr, env: &Env<'_>) -> Option<usize> {
        let ident: &Ident = match e {
            Expr::Identifier(i) => i,
            Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [q, c] if ident_name(q, env.lower_idents) == self.qualifier => c,
                _ => return None,
            },
            Expr::Nested(e) => return self.column(e, env),
            _ => return None,
        };
        let name = ident_name(ident, env.lower_idents);
        self.snapshot.schema().full_schema().index_of(&name).ok()
    }

    /// The storage filter of an optional WHERE clause: `Some(None)` without one, `None`
    /// when it does not convert exactly.
    fn filter(&self, selection: &Option<Expr>, env: &Env<'_>) -> Option<Option<Predicate>> {
        match selection {
            None => Some(None),
            Some(e) => self.predicate(e, env).map(Some),
        }
    }

    fn field(&self, i: usize) -> &Field {
        self.snapshot.schema().full_schema().field(i)
    }

    /// `e` as an exact storage predicate.
    fn predicate(&self, x: &Expr, env: &Env<'_>) -> Option<Predicate> {
        match x {
            Expr::Nested(e) => self.predicate(e, env),
            Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
                Some(Predicate::all(self.predicate(left, env)?, self.predicate(right, env)?))
            }
            Expr::BinaryOp { left, op: BinaryOperator::Or, right } => {
                Some(Predicate::any(self.predicate(left, env)?, self.predicate(right, env)?))
            }
            Expr::UnaryOp { op: UnaryOperator::Not, expr } => {
                Some(Predicate::Not(Box::new(self.predicate(expr, env)?)))
            }
            Expr::BinaryOp { left, op, right } => {
                let op = cmp_op(op)?;
                let (col, lit, op) = match (self.column(left, env), self.column(right, env)) {
                    (Some(c), None) => (c, literal(right, env)?, op),
                    (None, Some(c)) => (c, literal(left, env)?, op.flipped()),
                    _ => return None,
                };
                let value = scalar_for(self.field(col).data_type(), &lit)?;
                Some(Predicate::Cmp { column: self.field(col).name().clone(), op, value })
            }
            Expr::IsNull(e) | Expr::IsNotNull(e) => {
                let col = self.column(e, env)?;
                Some(Predicate::IsNull {
                    column: self.field(col).name().clone(),
                    negated: matches!(x, Expr::IsNotNull(_)),
                })
            }
            Expr::InList { expr, list, negated } => {
                let col = self.column(expr, env)?;
                if list.is_empty() {
                    return None;
                }
                let t = self.field(col).data_type();
                let values = list
                    .iter()
                    .map(|v| scalar_for(t, &literal(v, env)?))
                    .collect::<Option<Vec<_>>>()?;
                Some(Predicate::InList {
                    column: self.field(col).name().clone(),
                    values,
                    negated: *negated,
                })
            }
            Expr::Between { expr, negated, low, high } => {
                let col = self.column(expr, env)?;
                let t = self.field(col).data_type();
                let name = self.field(col).name();
                let p = Predicate::And(vec![
                    Predicate::cmp(name, CmpOp::GtEq, scalar_for(t, &literal(low, env)?)?),
                    Predicate::cmp(name, CmpOp::LtEq, scalar_for(t, &literal(high, env)?)?),
                ]);
                Some(if *negated { Predicate::Not(Box::new(p)) } else { p })
            }
            Expr::Like { negated, any: false, expr, pattern, escape_char: None } => {
                let col = self.column(expr, env)?;
                if self.field(col).data_type() != &DataType::Utf8 {
                    return None;
                }
                let Lit::Str(pattern) = literal(pattern, env)? else { return None };
                let column = self.field(col).name().clone();
                let plain = |s: &str| !s.contains(['%', '_', '\\']);
                if plain(&pattern) {
                    let p = Predicate::eq(&column, pattern);
                    return Some(if *negated { Predicate::Not(Box::new(p)) } else { p });
                }
                Predicate::like(&column, &pattern, *negated)
            }
            Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
                let col = self.column(x, env)?;
                (self.field(col).data_type() == &DataType::Boolean)
                    .then(|| Predicate::eq(self.field(col).name(), true))
            }
            _ => None,
        }
    }
}

fn cmp_op(op: &BinaryOperator) -> Option<CmpOp> {
    Some(match op {
        BinaryOperator::Eq => CmpOp::Eq,
        BinaryOperator::NotEq => CmpOp::NotEq,
        BinaryOperator::Lt => CmpOp::Lt,
        BinaryOperator::LtEq => CmpOp::LtEq,
        BinaryOperator::Gt => CmpOp::Gt,
        BinaryOperator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

/// A non-negative integer constant (LIMIT / OFFSET).
fn count(e: &Expr, env: &Env<'_>) -> Option<usize> {
    match literal(e, env)? {
        Lit::Int(i) => usize::try_from(i).ok(),
        _ => None,
    }
}

fn select(q: &Query, env: &Env<'_>) -> Option<Direct> {
    let Query {
        with,
        body,
        order_by,
        limit_clause,
        fetch,
        locks,
        for_clause,
        settings,
        format_clause,
        pipe_operators,
    } = q;
    if with.is_some()
        || order_by.is_some()
        || fetch.is_some()
        || !locks.is_empty()
        || for_clause.is_some()
        || settings.is_some()
        || format_clause.is_some()
        || !pipe_operators.is_empty()
    {
        return None;
    }
    let (offset, limit) = match limit_clause {
        None => (0, None),
        Some(LimitClause::LimitOffset { limit, offset, limit_by }) => {
            if !limit_by.is_empty() {
                return None;
            }
            let limit = match limit {
                None => None,
                Some(e) => Some(count(e, env)?),
            };
            let offset = match offset {
                None => 0,
                Some(o) => count(&o.value, env)?,
            };
            (offset, limit)
        }
        Some(LimitClause::OffsetCommaLimit { .. }) => return None,
    };
    let SetExpr::Select(s) = body.as_ref() else { return None };
    let Select {
        select_token: _,
        optimizer_hints,
        distinct,
        select_modifiers,
        top,
        top_before_distinct: _,
        projection,
        exclude,
        into,
        from,
        lateral_views,
        prewhere,
        selection,
        connect_by,
        group_by,
        cluster_by,
        distribute_by,
        sort_by,
        having,
        named_window,
        qualify,
        window_before_qualify: _,
        value_table_mode,
        flavor,
    } = s.as_ref();
    let no_group =
        matches!(group_by, GroupByExpr::Expressions(e, m) if e.is_empty() && m.is_empty());
    if !optimizer_hints.is_empty()
        || distinct.is_some()
        || select_modifiers.is_some()
        || top.is_some()
        || exclude.is_some()
        || into.is_some()
        || !lateral_views.is_empty()
        || prewhere.is_some()
        || !connect_by.is_empty()
        || !no_group
        || !cluster_by.is_empty()
        || !distribute_by.is_empty()
        || !sort_by.is_empty()
        || having.is_some()
        || !named_window.is_empty()
        || qualify.is_some()
        || value_table_mode.is_some()
        || !matches!(flavor, datafusion::sql::sqlparser::ast::SelectFlavor::Standard)
    {
        return None;
    }
    let rel = relation(from, env)?;
    let filter = rel.filter(selection, env)?;
    if projection.iter().any(|i| {
        matches!(i, SelectItem::UnnamedExpr(Expr::Function(_)))
            || matches!(i, SelectItem::ExprWithAlias { expr: Expr::Function(_), .. })
    }) {
        // One output row, kept unless OFFSET skips it or LIMIT 0 drops it.
        let keep = offset == 0 && limit != Some(0);
        return aggregate(projection, rel, filter, keep, env).map(Direct::Aggregate);
    }
    let mut cols = Vec::new();
    // Output names given by aliases, by output position.
    let mut aliases: Vec<(usize, String)> = Vec::new();
    for item in projection {
        match item {
            SelectItem::Wildcard(o) => {
                if o.opt_ilike.is_some()
                    || o.opt_exclude.is_some()
                    || o.opt_except.is_some()
                    || o.opt_replace.is_some()
                    || o.opt_rename.is_some()
                    || o.opt_alias.is_some()
                {
                    return None;
                }
                // `*` leaves `_id` out (see `rewrite`).
                cols.extend(1..rel.snapshot.schema().full_schema().fields().len());
            }
            SelectItem::UnnamedExpr(e @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_))) => {
                cols.push(rel.column(e, env)?);
            }
            SelectItem::ExprWithAlias {
                expr: e @ (Expr::Identifier(_) | Expr::CompoundIdentifier(_)),
                alias,
            } => {
                cols.push(rel.column(e, env)?);
                aliases.push((cols.len() - 1, ident_name(alias, env.lower_idents)));
            }
            _ => return None,
        }
    }
    let name_at = |i: usize| match aliases.iter().find(|(j, _)| *j == i) {
        Some((_, a)) => a.as_str(),
        None => rel.field(cols[i]).name().as_str(),
    };
    let mut names: Vec<&str> = (0..cols.len()).map(name_at).collect();
    names.sort_unstable();
    if cols.is_empty() || names.windows(2).any(|w| w[0] == w[1]) {
        // DataFusion refuses duplicate output names; let it say so.
        return None;
    }
    // Without aliases the output schema is the table's projection (kept by the table).
    let schema = if aliases.is_empty() {
        rel.snapshot.projected_schema(&cols).ok()?
    } else {
        let fields: Vec<Field> =
            (0..cols.len()).map(|i| rel.field(cols[i]).clone().with_name(name_at(i))).collect();
        Arc::new(Schema::new(fields))
    };
    Some(Direct::Select(DirectSelect {
        name: rel.name,
        table: rel.snapshot,
        projection: cols,
        schema,
        filter,
        offset,
        limit,
    }))
}

fn update(u: &Update, env: &Env<'_>) -> Option<Direct> {
    let Update {
        update_token: _,
        optimizer_hints,
        table,
        assignments,
        from,
        selection,
        returning,
        output,
        or,
        order_by,
        limit,
    } = u;
    if !optimizer_hints.is_empty()
        || from.is_some()
        || returning.is_some()
        || output.is_some()
        || or.is_some()
        || !order_by.is_empty()
        || limit.is_some()
        || assignments.is_empty()
    {
        return None;
    }
    let rel = relation(std::slice::from_ref(table), env)?;
    let mut fields = Vec::new();
    let mut cols = Vec::new();
    for a in assignments {
        let AssignmentTarget::ColumnName(name) = &a.target else { return None };
        let [part] = name.0.as_slice() else { return None };
        let c = rel.column(&Expr::Identifier(part.as_ident()?.clone()), env)?;
        let f = rel.field(c);
        if f.name() == ID_COLUMN || fields.iter().any(|x: &Field| x.name() == f.name()) {
            return None;
        }
        let lit = literal(&a.value, env)?;
        if lit == Lit::Null && !f.is_nullable() {
            return None;
        }
        cols.push(value_for(f.data_type(), &lit)?);
        fields.push(f.clone());
    }
    let values = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).ok()?;
    let filter = rel.filter(selection, env)?;
    Some(Direct::Update { table: rel.name, filter, values })
}

fn delete(d: &Delete, env: &Env<'_>) -> Option<Direct> {
    let Delete {
        delete_token: _,
        optimizer_hints,
        tables,
        from,
        using,
        selection,
        returning,
        output,
        order_by,
        limit,
    } = d;
    if !optimizer_hints.is_empty()
        || !tables.is_empty()
        || using.is_some()
        || returning.is_some()
        || output.is_some()
        || !order_by.is_empty()
        || limit.is_some()
    {
        return None;
    }
    let FromTable::WithFromKeyword(from) = from else { return None };
    let rel = relation(from, env)?;
    let filter = rel.filter(selection, env)?;
    Some(Direct::Delete { table: rel.name, filter })
}

fn insert(i: &Insert, env: &Env<'_>) -> Option<Direct> {
    insert_cells(i, env)?.direct(env.params)
}

/// A cell of an `INSERT … VALUES` as classified: a constant, parameter `$n + 1` (resolved
/// at each run), or a constant computed from this run's parameters (`-$1`: a statement
/// with one gets no [`InsertTemplate`]).
#[derive(Debug, Clone, PartialEq)]
enum InsertCell {
    Lit(Lit),
    Param(usize),
    Bound(Lit),
}

/// A prepared `INSERT … VALUES` as the direct path classified it, with its parameters left
/// as parameters: the table, the user columns (fields), and each column's cells, row by
/// row (columns the statement does not name hold NULL). Kept after the first direct run of
/// a prepared `INSERT` with parameters, so that later runs convert only the parameters'
/// values instead of classifying the statement again; it holds no table state (the caller
/// checks the table still has the columns the statement was prepared against).
#[derive(Debug)]
pub(crate) struct InsertTemplate {
    table: String,
    schema: SchemaRef,
    columns: Vec<Vec<InsertCell>>,
    rows: usize,
    /// The identifier folding the statement was classified under.
    lower_idents: bool,
}

impl InsertTemplate {
    /// The template of `stmt` when it is an `INSERT … VALUES` the direct path takes with
    /// `env`'s parameters and has at least one bare parameter and none inside an
    /// expression; it keeps `env`'s identifier folding.
    pub(crate) fn new(stmt: &Statement, env: &Env<'_>) -> Option<InsertTemplate> {
        let Statement::Insert(i) = stmt else { return None };
        let t = insert_cells(i, env)?;
        let cells = || t.columns.iter().flatten();
        let has_params = cells().any(|c| matches!(c, InsertCell::Param(_)));
        let bound = cells().any(|c| matches!(c, InsertCell::Bound(_)));
        // Only when this run's values convert (what the run classified did).
        (has_params && !bound && t.direct(env.params).is_some()).then_some(t)
    }

    /// The table it inserts into.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// The identifier folding it was classified under.
    pub(crate) fn lower_idents(&self) -> bool {
        self.lower_idents
    }

    /// The insert with `params` bound, converted to the columns' types as classifying
    /// converts them; `None` when a value does not convert exactly or a NULL meets a NOT
    /// NULL column (the statement is then classified, and refused, as usual).
    pub(crate) fn direct(&self, params: &[ScalarValue]) -> Option<Direct> {
        let mut lits = Vec::with_capacity(self.rows);
        let mut arrays = Vec::with_capacity(self.columns.len());
        for (cells, field) in self.columns.iter().zip(self.schema.fields()) {
            lits.clear();
            for c in cells {
                let lit = match c {
                    InsertCell::Lit(l) | InsertCell::Bound(l) => l.clone(),
                    InsertCell::Param(k) => param_lit(params.get(*k)?)?,
                };
                if lit == Lit::Null && !field.is_nullable() {
                    return None;
                }
                lits.push(lit);
            }
            arrays.push(values_for(field.data_type(), &lits)?);
        }
        let rows = RecordBatch::try_new_with_options(
            self.schema.clone(),
            arrays,
            &RecordBatchOptions::new().with_row_count(Some(self.rows)),
        )
        .ok()?;
        Some(Direct::Insert { table: self.table.clone(), rows })
    }
}

/// The cells of an `INSERT … VALUES` the direct path takes (parameters left unbound).
fn insert_cells(i: &Insert, env: &Env<'_>) -> Option<InsertTemplate> {
    let Insert {
        insert_token: _,
        optimizer_hints,
        or,
        ignore,
        into: _,
        table,
        table_alias,
        columns,
        overwrite,
        source,
        assignments,
        partitioned,
        after_columns,
        has_table_keyword: _,
        on,
        returning,
        output,
        replace_into,
        priority,
        insert_alias,
        settings,
        format_clause,
        multi_table_insert_type,
        multi_table_into_clauses,
        multi_table_when_clauses,
        multi_table_else_clause,
    } = i;
    if !optimizer_hints.is_empty()
        || or.is_some()
        || *ignore
        || table_alias.is_some()
        || *overwrite
        || !assignments.is_empty()
        || partitioned.is_some()
        || !after_columns.is_empty()
        || on.is_some()
        || returning.is_some()
        || output.is_some()
        || *replace_into
        || priority.is_some()
        || insert_alias.is_some()
        || settings.is_some()
        || format_clause.is_some()
        || multi_table_insert_type.is_some()
        || !multi_table_into_clauses.is_empty()
        || !multi_table_when_clauses.is_empty()
        || multi_table_else_clause.is_some()
    {
        return None;
    }
    let TableObject::TableName(name) = table else { return None };
    let name = table_name(name, env)?;
    let snapshot = (env.table)(&name)?;
    let q = source.as_ref()?;
    let Query {
        with: None,
        body,
        order_by: None,
        limit_clause: None,
        fetch: None,
        locks,
        for_clause: None,
        settings: None,
        format_clause: None,
        pipe_operators,
    } = q.as_ref()
    else {
        return None;
    };
    let SetExpr::Values(values) = body.as_ref() else { return None };
    if !locks.is_empty() || !pipe_operators.is_empty() || values.explicit_row {
        return None;
    }
    let full = snapshot.schema().full_schema();
    let user: Vec<usize> = (1..full.fields().len()).collect();
    // Which user column each VALUES position fills.
    let targets: Vec<usize> = if columns.is_empty() {
        user.clone()
    } else {
        let mut t = Vec::with_capacity(columns.len());
        for c in columns {
            let [part] = c.0.as_slice() else { return None };
            let i = full.index_of(&ident_name(part.as_ident()?, env.lower_idents)).ok()?;
            if i == 0 || t.contains(&i) {
                return None;
            }
            t.push(i);
        }
        t
    };
    let mut columns: Vec<Vec<InsertCell>> = vec![Vec::with_capacity(values.rows.len()); user.len()];
    for row in &values.rows {
        if row.len() != targets.len() {
            return None;
        }
        for (k, &col) in user.iter().enumerate() {
            let cell = match targets.iter().position(|&t| t == col) {
                Some(p) => cell(&row[p], env)?,
                None => InsertCell::Lit(Lit::Null),
            };
            if cell == InsertCell::Lit(Lit::Null) && !full.field(col).is_nullable() {
                return None;
            }
            columns[k].push(cell);
        }
    }
    let schema =
        Arc::new(Schema::new(user.iter().map(|&i| full.field(i).clone()).collect::<Vec<_>>()));
    Some(InsertTemplate {
        table: name,
        schema,
        columns,
        rows: values.rows.len(),
        lower_idents: env.lower_idents,
    })
}

/// A `VALUES` cell: a parameter (bare `$n`, bound at each run) or a constant as
/// [`literal`] reads it (a parameter inside an expression, `-$1`, bound now: such a
/// statement gets no template, see [`InsertTemplate::new`]).
fn cell(e: &Expr, env: &Env<'_>) -> Option<InsertCell> {
    if let Expr::Value(v) = e
        && let Value::Placeholder(p) = &v.value
    {
        let k = param_index(p)?;
        // A parameter the run was not given, or whose value is not taken: not direct.
        param_lit(env.params.get(k)?)?;
        return Some(InsertCell::Param(k));
    }
    let lit = literal(e, env)?;
    Some(if mentions_param(e) { InsertCell::Bound(lit) } else { InsertCell::Lit(lit) })
}

/// Whether a constant expression [`literal`] reads holds a parameter.
fn mentions_param(e: &Expr) -> bool {
    match e {
        Expr::Nested(e) | Expr::UnaryOp { expr: e, .. } => mentions_param(e),
        Expr::Value(v) => matches!(v.value, Value::Placeholder(_)),
        _ => false,
    }
}

/// The `_id`s a filter is limited to, when it says `_id = v` or `_id IN (…)` (alone or as
/// a conjunct): a point lookup finds its rows.
fn id_keys(p: &Predicate) -> Option<Vec<u64>> {
    let mut ids = match p {
        Predicate::Cmp { column, op: CmpOp::Eq, value: Scalar::UInt(v) } if column == ID_COLUMN => {
            vec![*v]
        }
        Predicate::InList { column, values, negated: false } if column == ID_COLUMN => values
            .iter()
            .map(|v| match v {
                Scalar::UInt(v) => Some(*v),
                _ => None,
            })
            .collect::<Option<Vec<_>>>()?,
        Predicate::And(ps) => return ps.iter().find_map(id_keys),
        _ => return None,
    };
    ids.sort_unstable();
    ids.dedup();
    Some(ids)
}

/// Runs `f` over the table's scan units: on a large table, split into contiguous runs, one
/// per core, on scoped threads; results in unit order (at least one).
fn in_parallel<T: Send>(
    t: &Arc<TableSnapshot>,
    f: impl Fn(Vec<ScanUnit>) -> crate::Result<T> + Sync,
) -> crate::Result<Vec<T>> {
    /// Below this many rows a single thread is as quick as starting more.
    const PARALLEL_ROWS: u64 = 65_536;
    let units = t.scan_units();
    let cores = crate::cores();
    let parts = if t.count() >= PARALLEL_ROWS { cores.min(units.len()).max(1) } else { 1 };
    if parts <= 1 {
        return Ok(vec![f(units)?]);
    }
    let per = units.len().div_ceil(parts).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> =
            units.chunks(per).map(|u| u.to_vec()).map(|u| s.spawn(move || f(u))).collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| crate::Error::sql("a scan worker panicked"))?)
            .collect()
    })
}

/// The rows of `t` where `filter` holds, projected: by point lookups when the filter names
/// its `_id`s, else by a filtered scan; then `offset` / `limit`.
fn rows_where(
    t: &Arc<TableSnapshot>,
    projection: &[usize],
    filter: Option<&Predicate>,
    offset: usize,
    limit: Option<usize>,
) -> crate::Result<Vec<RecordBatch>> {
    let (Some(p), Some(ids)) = (filter, filter.and_then(id_keys)) else {
        if offset == 0 && limit.is_none() {
            // The whole answer: every core scans a part of the table.
            let parts = in_parallel(t, |units| {
                t.scan_units_filtered(projection, filter.cloned(), units)?
                    .collect::<basalt_storage::Result<Vec<_>>>()
                    .map_err(crate::Error::from)
            })?;
            return Ok(parts.into_iter().flatten().collect());
        }
        return Ok(t.scan_range(projection, filter, offset, limit)?);
    };
    Ok(lookup_rows(t, projection, p, &ids, offset, limit)?)
}

/// The rows with `ids` where `p` (which limits them to those ids) holds, projected, then
/// `offset` / `limit`.
fn lookup_rows(
    t: &Arc<TableSnapshot>,
    projection: &[usize],
    p: &Predicate,
    ids: &[u64],
    offset: usize,
    limit: Option<usize>,
) -> basalt_storage::Result<Vec<RecordBatch>> {
    let only_ids = !matches!(p, Predicate::And(_));
    let b = if only_ids {
        t.get_many(ids, projection)?
    } else {
        let mut need = projection.to_vec();
        for i in t.resolve(&p.columns())? {
            if !need.contains(&i) {
                need.push(i);
            }
        }
        let mut b = t.get_many(ids, &need)?;
        let sel = basalt_storage::predicate::evaluate(p, &mut b)?;
        let b = datafusion::arrow::compute::filter_record_batch(&b, &BooleanArray::new(sel, None))
            .map_err(|e| basalt_storage::Error::arrow("direct lookup", e))?;
        let keep: Vec<usize> = (0..projection.len()).collect();
        b.project(&keep).map_err(|e| basalt_storage::Error::arrow("direct lookup", e))?
    };
    let n = b.num_rows();
    let start = offset.min(n);
    let len = limit.unwrap_or(usize::MAX).min(n - start);
    Ok(vec![if (start, len) == (0, n) { b } else { b.slice(start, len) }])
}

impl DirectSelect {
    /// Runs the read against the snapshot it was classified on.
    pub(crate) fn run(&self) -> crate::Result<Vec<RecordBatch>> {
        let batches = rows_where(
            &self.table,
            &self.projection,
            self.filter.as_ref(),
            self.offset,
            self.limit,
        )?;
        under_schema(batches, &self.schema)
    }
}

/// The non-empty `batches` under the output `schema` (one empty batch when none is left).
fn under_schema(batches: Vec<RecordBatch>, schema: &SchemaRef) -> crate::Result<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(batches.len().max(1));
    for b in batches.into_iter().filter(|b| b.num_rows() > 0) {
        if Arc::ptr_eq(&b.schema(), schema) {
            out.push(b);
            continue;
        }
        let n = b.num_rows();
        out.push(
            RecordBatch::try_new_with_options(
                schema.clone(),
                b.columns().to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(n)),
            )
            .map_err(|e| basalt_storage::Error::arrow("direct read", e))?,
        );
    }
    if out.is_empty() {
        out.push(RecordBatch::new_empty(schema.clone()));
    }
    Ok(out)
}

/// A prepared statement whose only parameters are the `_id` keys of its WHERE clause
/// (`WHERE _id = $n`, `WHERE _id IN ($a, $b, …)`), kept after its first direct run so
/// that later runs only convert the keys instead of classifying the statement again (which
/// costs more than the point lookup or the write it leads to). It holds no table state:
/// every run reads the table from its own view, and the caller checks the table still has
/// the columns the statement was prepared against.
#[derive(Debug)]
pub(crate) struct KeyedTemplate {
    shape: KeyedShape,
    /// Positions (0-based) of the parameters that are the keys, in the statement's order.
    keys: Vec<usize>,
    /// Whether the keys are an `IN` list (else one `=`).
    list: bool,
    /// The identifier folding the statement was classified under.
    lower_idents: bool,
}

/// What a [`KeyedTemplate`] does with the rows its keys name.
#[derive(Debug)]
enum KeyedShape {
    /// A read: the columns at `projection` under `schema`, then `offset` / `limit`.
    Select {
        table: String,
        projection: Vec<usize>,
        schema: SchemaRef,
        offset: usize,
        limit: Option<usize>,
    },
    /// `UPDATE … SET` these values.
    Update { table: String, values: RecordBatch },
    /// `DELETE`.
    Delete { table: String },
}

/// The parameter positions a WHERE clause compares `_id`-like with, when it is exactly
/// `x = $n` (either side) or `x IN ($a, …)` of placeholders only; and whether it is a list.
fn key_params(e: &Expr) -> Option<(Vec<usize>, bool)> {
    fn placeholder(e: &Expr) -> Option<usize> {
        match e {
            Expr::Nested(e) => placeholder(e),
            Expr::Value(v) => match &v.value {
                Value::Placeholder(p) => param_index(p),
                _ => None,
            },
            _ => None,
        }
    }
    match e {
        Expr::Nested(e) => key_params(e),
        Expr::BinaryOp { left, op: BinaryOperator::Eq, right } => {
            match (placeholder(left), placeholder(right)) {
                (Some(i), None) | (None, Some(i)) => Some((vec![i], false)),
                _ => None,
            }
        }
        Expr::InList { list, negated: false, .. } if !list.is_empty() => {
            Some((list.iter().map(placeholder).collect::<Option<Vec<_>>>()?, true))
        }
        _ => None,
    }
}

impl KeyedTemplate {
    /// The template of `stmt`, which classified as `d` under identifier folding `lower_idents`, when
    /// its parameters are exactly the `_id` keys of its WHERE clause.
    pub(crate) fn new(stmt: &Statement, d: &Direct, lower_idents: bool) -> Option<KeyedTemplate> {
        let selection = match stmt {
            Statement::Query(q) => match q.body.as_ref() {
                SetExpr::Select(s) => s.selection.as_ref()?,
                _ => return None,
            },
            Statement::Update(u) => u.selection.as_ref()?,
            Statement::Delete(d) => d.selection.as_ref()?,
            _ => return None,
        };
        let (keys, list) = key_params(selection)?;
        // No parameter anywhere else (SET values, LIMIT, …): those would change per run.
        let mut placeholders = 0;
        let _ = datafusion::sql::sqlparser::ast::visit_expressions(stmt, |e| {
            if matches!(e, Expr::Value(v) if matches!(v.value, Value::Placeholder(_))) {
                placeholders += 1;
            }
            std::ops::ControlFlow::<()>::Continue(())
        });
        if placeholders != keys.len() {
            return None;
        }
        let (filter, shape) = match d {
            Direct::Select(s) => (
                s.filter.as_ref(),
                KeyedShape::Select {
                    table: s.name.clone(),
                    projection: s.projection.clone(),
                    schema: s.schema.clone(),
                    offset: s.offset,
                    limit: s.limit,
                },
            ),
            Direct::Update { table, filter, values } => (
                filter.as_ref(),
                KeyedShape::Update { table: table.clone(), values: values.clone() },
            ),
            Direct::Delete { table, filter } => {
                (filter.as_ref(), KeyedShape::Delete { table: table.clone() })
            }
            Direct::Aggregate(_) | Direct::Insert { .. } => return None,
        };
        // The classified filter is exactly the keys compared with `_id`.
        let exact = match filter? {
            Predicate::Cmp { column, op: CmpOp::Eq, value: Scalar::UInt(_) } => {
                !list && column == ID_COLUMN
            }
            Predicate::InList { column, values, negated: false } => {
                list && column == ID_COLUMN
                    && values.len() == keys.len()
                    && values.iter().all(|v| matches!(v, Scalar::UInt(_)))
            }
            _ => false,
        };
        exact.then_some(KeyedTemplate { shape, keys, list, lower_idents })
    }

    /// The table the statement reads or writes.
    pub(crate) fn table(&self) -> &str {
        match &self.shape {
            KeyedShape::Select { table, .. }
            | KeyedShape::Update { table, .. }
            | KeyedShape::Delete { table } => table,
        }
    }

    /// The identifier folding it was classified under.
    pub(crate) fn lower_idents(&self) -> bool {
        self.lower_idents
    }

    /// Whether the statement writes.
    pub(crate) fn writes(&self) -> bool {
        !matches!(self.shape, KeyedShape::Select { .. })
    }

    /// The filter these parameter values make, converted as classifying converts them
    /// (`None`: a value classifying would treat otherwise, so the caller classifies).
    pub(crate) fn filter(&self, params: &[ScalarValue]) -> Option<Predicate> {
        let key = |i: &usize| scalar_for(&DataType::UInt64, &param_lit(params.get(*i)?)?);
        let column = ID_COLUMN.to_string();
        Some(if self.list {
            let values = self.keys.iter().map(key).collect::<Option<Vec<_>>>()?;
            Predicate::InList { column, values, negated: false }
        } else {
            Predicate::Cmp { column, op: CmpOp::Eq, value: key(self.keys.first()?)? }
        })
    }

    /// Runs a read with `filter` (from [`KeyedTemplate::filter`]) against `t`.
    pub(crate) fn read(
        &self,
        t: &Arc<TableSnapshot>,
        filter: &Predicate,
    ) -> crate::Result<Vec<RecordBatch>> {
        let KeyedShape::Select { projection, schema, offset, limit, .. } = &self.shape else {
            return Err(crate::Error::sql("a keyed write run as a read"));
        };
        under_schema(rows_where(t, projection, Some(filter), *offset, *limit)?, schema)
    }

    /// Applies a write with `filter` (from [`KeyedTemplate::filter`]) as one step of the
    /// session's write statement, as [`Direct::write`] would; returns the rows changed.
    pub(crate) fn write(
        &self,
        filter: &Predicate,
        txn: &mut basalt_storage::Transaction,
        store: &basalt_storage::Store,
    ) -> basalt_storage::Result<u64> {
        match &self.shape {
            KeyedShape::Select { .. } => Ok(0),
            KeyedShape::Update { table, values } => {
                let ids = writer_ids(txn, store, table, Some(filter))?;
                txn.update_all(store, table, &ids, values)
            }
            KeyedShape::Delete { table } => {
                let ids = writer_ids(txn, store, table, Some(filter))?;
                txn.delete(store, table, &ids)
            }
        }
    }
}

impl Direct {
    /// Whether the statement writes (`INSERT`, `UPDATE`, `DELETE`).
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, Direct::Select(_) | Direct::Aggregate(_))
    }

    /// The table the statement reads or writes.
    pub(crate) fn table(&self) -> &str {
        match self {
            Direct::Select(s) => &s.name,
            Direct::Aggregate(a) => &a.name,
            Direct::Update { table, .. }
            | Direct::Delete { table, .. }
            | Direct::Insert { table, .. } => table,
        }
    }

    /// Applies a write (`Update`, `Delete`, `Insert`) as one step of the session's write
    /// statement; returns the rows changed. A read returns 0 and changes nothing.
    pub(crate) fn write(
        &self,
        txn: &mut basalt_storage::Transaction,
        store: &basalt_storage::Store,
    ) -> basalt_storage::Result<u64> {
        match self {
            Direct::Select(_) | Direct::Aggregate(_) => Ok(0),
            Direct::Insert { table, rows } => {
                Ok(txn.insert(store, table, std::slice::from_ref(rows))?.count)
            }
            Direct::Delete { table, filter } => {
                let ids = writer_ids(txn, store, table, filter.as_ref())?;
                txn.delete(store, table, &ids)
            }
            Direct::Update { table, filter, values } => {
                let ids = writer_ids(txn, store, table, filter.as_ref())?;
                txn.update_all(store, table, &ids, values)
            }
        }
    }
}

/// The `_id`s a write applies to, read as the writer (the newest state).
fn writer_ids(
    txn: &mut basalt_storage::Transaction,
    store: &basalt_storage::Store,
    table: &str,
    filter: Option<&Predicate>,
) -> basalt_storage::Result<Vec<u64>> {
    txn.ensure_writer(store)?;
    let t = txn.table(table)?;
    match filter {
        None => t.matching_ids(&Predicate::True),
        // Only ids: the write itself skips the ones that do not exist.
        Some(p)
            if !matches!(p, Predicate::And(_))
                && let Some(keys) = id_keys(p) =>
        {
            Ok(keys)
        }
        Some(p) if let Some(keys) = id_keys(p) => {
            let ids = lookup_rows(&t, &[0], p, &keys, 0, None)?;
            let mut out = Vec::new();
            for b in ids {
                if let Some(a) = b.column(0).as_any().downcast_ref::<UInt64Array>() {
                    out.extend_from_slice(a.values());
                }
            }
            Ok(out)
        }
        Some(p) => t.matching_ids(p),
    }
}

/// An aggregate function the direct path computes.
#[derive(Clone, Copy)]
enum AggFn {
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
enum FoldFn {
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
struct Fold {
    /// Whether the column is Float64 (else Int64).
    float: bool,
    /// Whether min / max and sums are asked for (float folds skip what is not).
    need_minmax: bool,
    need_sum: bool,
    /// Rows folded (non-null values).
    rows: i64,
    /// Whether a min / max candidate was seen.
    seen: bool,
    /// Integers: wrapping sum, exact sum, min, max.
    wrap: i64,
    exact: i128,
    imin: i64,
    imax: i64,
    /// Floats: sum, min, max.
    sum: f64,
    fmin: f64,
    fmax: f64,
}

impl Fold {
    fn new(float: bool, need_minmax: bool, need_sum: bool) -> Self {
        Fold { float, need_minmax, need_sum, ..Fold::default() }
    }

    /// `v`, `times` times (zero: only a min / max candidate).
    fn int(&mut self, v: i64, times: i64) {
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
    fn float(&mut self, v: f64, times: i64) {
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
    fn merge(&mut self, o: &Fold) {
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
    fn ints(&mut self, v: &[i64], nulls: Option<&datafusion::arrow::buffer::NullBuffer>) {
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
    fn floats(&mut self, v: &[f64], nulls: Option<&datafusion::arrow::buffer::NullBuffer>) {
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
    fn update(&mut self, a: &ArrayRef) -> crate::Result<()> {
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
    fn finish(&self, f: FoldFn) -> crate::Result<ArrayRef> {
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
    name: String,
    table: Arc<TableSnapshot>,
    /// Each output column: the function and the full-schema position of its argument.
    aggs: Vec<(AggFn, Option<usize>)>,
    schema: SchemaRef,
    filter: Option<Predicate>,
    /// Whether the one row is returned (OFFSET / LIMIT 0 may drop it).
    keep: bool,
    /// For each folded aggregate, the aggregate whose [`Fold`] it reads (the first one
    /// over the same column).
    fold_slot: Vec<Option<usize>>,
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

fn aggregate(
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
    fn partial_state(&self) -> crate::Result<AggState> {
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
    fn partial(&self, needed: &[usize], units: Vec<ScanUnit>) -> crate::Result<AggState> {
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
fn count_codes<K: datafusion::arrow::datatypes::ArrowPrimitiveType>(
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
struct AggState {
    rows: i64,
    counts: Vec<i64>,
    accs: Vec<Option<Box<dyn datafusion::logical_expr::Accumulator>>>,
    folds: Vec<Option<Fold>>,
}

/// The argument field after DataFusion's type coercion for aggregate `u` (AVG of an
/// integer column takes Float64, for example).
fn coerced(
    u: fn() -> Arc<datafusion::logical_expr::AggregateUDF>,
    arg: datafusion::arrow::datatypes::FieldRef,
) -> Option<datafusion::arrow::datatypes::FieldRef> {
    let udaf = u();
    datafusion::logical_expr::type_coercion::functions::fields_with_udf(&[arg], udaf.as_ref())
        .ok()?
        .pop()
}
