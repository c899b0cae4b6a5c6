//! Classifying a parsed statement for the direct path: literals and parameters typed to
//! their columns, the one table it reads, its filter as a storage predicate, and the
//! statement shape (point read, filtered select, count, update, delete, insert).
//!
//! Part of the direct path (see the module doc of `direct`).

use super::*;

/// A constant as written (or bound), before it meets a column type.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Lit {
    Null,
    Int(i64),
    Float(f64),
    Str(String),
    Bool(bool),
}

pub(super) fn literal(e: &Expr, env: &Env<'_>) -> Option<Lit> {
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
pub(super) fn number(n: &str) -> Option<Lit> {
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
pub(super) fn param_index(p: &str) -> Option<usize> {
    p.strip_prefix('$')?.parse::<usize>().ok()?.checked_sub(1)
}

pub(super) fn param(p: &str, env: &Env<'_>) -> Option<Lit> {
    param_lit(env.params.get(param_index(p)?)?)
}

/// A parameter's value as a literal (`None`: a value the direct path does not take).
pub(super) fn param_lit(v: &ScalarValue) -> Option<Lit> {
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
pub(super) fn scalar_for(t: &DataType, lit: &Lit) -> Option<Scalar> {
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
pub(super) fn fits(t: &DataType, i: i64) -> bool {
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
pub(super) fn value_for(t: &DataType, lit: &Lit) -> Option<ArrayRef> {
    values_for(t, std::slice::from_ref(lit))
}

/// One column of values of type `t` from literals, converted as [`value_for`] converts each
/// (`None`: one of them does not convert exactly). A multi-row `VALUES` builds each column
/// in one go instead of an array per value and a concatenation.
pub(super) fn values_for(t: &DataType, lits: &[Lit]) -> Option<ArrayRef> {
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
pub(super) struct Relation {
    pub(super) name: String,
    pub(super) snapshot: Arc<TableSnapshot>,
    /// The alias if there is one, else the table name: what `x.col` may say.
    pub(super) qualifier: String,
}

pub(super) fn relation(from: &[TableWithJoins], env: &Env<'_>) -> Option<Relation> {
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
pub(super) fn table_name(name: &ObjectName, env: &Env<'_>) -> Option<String> {
    let [part] = name.0.as_slice() else { return None };
    let ident = part.as_ident()?;
    if !matches!(ident.quote_style, None | Some('"')) {
        return None;
    }
    Some(ident_name(ident, env.lower_idents))
}

impl Relation {
    /// The full-schema position of the column `e` names.
    pub(super) fn column(&self, e: &Expr, env: &Env<'_>) -> Option<usize> {
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
    pub(super) fn filter(
        &self,
        selection: &Option<Expr>,
        env: &Env<'_>,
    ) -> Option<Option<Predicate>> {
        match selection {
            None => Some(None),
            Some(e) => self.predicate(e, env).map(Some),
        }
    }

    pub(super) fn field(&self, i: usize) -> &Field {
        self.snapshot.schema().full_schema().field(i)
    }

    /// `e` as an exact storage predicate.
    pub(super) fn predicate(&self, x: &Expr, env: &Env<'_>) -> Option<Predicate> {
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
                    values: values.into(),
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

pub(super) fn cmp_op(op: &BinaryOperator) -> Option<CmpOp> {
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
pub(super) fn count(e: &Expr, env: &Env<'_>) -> Option<usize> {
    match literal(e, env)? {
        Lit::Int(i) => usize::try_from(i).ok(),
        _ => None,
    }
}

pub(super) fn select(q: &Query, env: &Env<'_>) -> Option<Direct> {
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

pub(super) fn update(u: &Update, env: &Env<'_>) -> Option<Direct> {
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

pub(super) fn delete(d: &Delete, env: &Env<'_>) -> Option<Direct> {
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

pub(super) fn insert(i: &Insert, env: &Env<'_>) -> Option<Direct> {
    insert_cells(i, env)?.direct(env.params)
}

/// The `_id`s a filter is limited to, when it says `_id = v` or `_id IN (…)` (alone or as
/// a conjunct): a point lookup finds its rows.
pub(super) fn id_keys(p: &Predicate) -> Option<Vec<u64>> {
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
