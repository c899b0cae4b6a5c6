//! Templates kept for prepared statements the direct path takes: `INSERT … VALUES` with
//! parameters, and statements keyed by `_id`, bound again at each run.
//!
//! Part of the direct path (see the module doc of `direct`).

use super::*;

/// A cell of an `INSERT … VALUES` as classified: a constant, parameter `$n + 1` (resolved
/// at each run), or a constant computed from this run's parameters (`-$1`: a statement
/// with one gets no [`InsertTemplate`]).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum InsertCell {
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
    pub(super) table: String,
    pub(super) schema: SchemaRef,
    pub(super) columns: Vec<Vec<InsertCell>>,
    pub(super) rows: usize,
    /// The identifier folding the statement was classified under.
    pub(super) lower_idents: bool,
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
pub(super) fn insert_cells(i: &Insert, env: &Env<'_>) -> Option<InsertTemplate> {
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
    // Column defaults are planned SQL: such inserts go through DataFusion.
    if !snapshot.column_defaults().is_empty() {
        return None;
    }
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
pub(super) fn cell(e: &Expr, env: &Env<'_>) -> Option<InsertCell> {
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
pub(super) fn mentions_param(e: &Expr) -> bool {
    match e {
        Expr::Nested(e) | Expr::UnaryOp { expr: e, .. } => mentions_param(e),
        Expr::Value(v) => matches!(v.value, Value::Placeholder(_)),
        _ => false,
    }
}

/// A prepared statement whose only parameters are the `_id` keys of its WHERE clause
/// (`WHERE _id = $n`, `WHERE _id IN ($a, $b, …)`), kept after its first direct run so
/// that later runs only convert the keys instead of classifying the statement again (which
/// costs more than the point lookup or the write it leads to). It holds no table state:
/// every run reads the table from its own view, and the caller checks the table still has
/// the columns the statement was prepared against.
#[derive(Debug)]
pub(crate) struct KeyedTemplate {
    pub(super) shape: KeyedShape,
    /// Positions (0-based) of the parameters that are the keys, in the statement's order.
    pub(super) keys: Vec<usize>,
    /// Whether the keys are an `IN` list (else one `=`).
    pub(super) list: bool,
    /// The identifier folding the statement was classified under.
    pub(super) lower_idents: bool,
}

/// What a [`KeyedTemplate`] does with the rows its keys name.
#[derive(Debug)]
pub(super) enum KeyedShape {
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
pub(super) fn key_params(e: &Expr) -> Option<(Vec<usize>, bool)> {
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
            let values = self.keys.iter().map(key).collect::<Option<basalt_storage::InValues>>()?;
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
