//! Statement rewrites Basalt makes before DataFusion plans a statement.
//!
//! Every native table has the row id column `_id` (first in DataFusion's schema, so it can
//! be selected and filtered on), but `SELECT *` does not show it and a column-less
//! `INSERT INTO t VALUES (…)` does not expect it. DataFusion has no hidden columns, so:
//! - `t.*` over a native table becomes `t.* EXCLUDE (_id)`;
//! - a bare `*` over exactly one native table becomes `* EXCLUDE (_id)` (merged into the
//!   wildcard's own EXCLUDE; REPLACE and EXCEPT stay as written);
//! - a bare `*` over several native tables joined with plain joins (inner / outer / cross,
//!   `ON` or `USING`) becomes `a.* EXCLUDE (_id), b.* EXCLUDE (_id, <USING columns>)`, which
//!   is what DataFusion's own expansion gives minus the ids;
//! - `INSERT INTO t VALUES …` / `INSERT INTO t SELECT …` without a column list gets the
//!   table's user columns as its list.
//!
//! - `NATURAL JOIN` between native tables becomes `USING (common user columns)`, so it never
//!   joins on `_id`;
//! - unnamed derived tables next to native tables get a generated alias so the `*` can be
//!   expanded per relation (semi / anti joins keep only the side they output).
//!
//! - an aliased parenthesised join over native tables, `(a CROSS JOIN b) AS t`, becomes
//!   `(SELECT * FROM a CROSS JOIN b) AS t`.
//!
//! Not rewritten (so `_id` columns do show): a bare `*` over several relations that include
//! a native table and a `NATURAL` join with a non-table, or when such a `*` carries its own
//! EXCLUDE / EXCEPT / REPLACE / RENAME.
//! Names in FROM that refer to a CTE are not native tables.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    ExcludeSelectItem, Ident, JoinConstraint, JoinOperator, ObjectName, ObjectNamePart, Query,
    Select, SelectItem, SelectItemQualifiedWildcardKind, Statement, TableAlias, TableFactor,
    TableObject, TableWithJoins, VisitMut, VisitorMut, WildcardAdditionalOptions,
};

use basalt_storage::ID_COLUMN;

/// What the rewriter needs to know about the catalog.
pub trait NativeTables {
    /// Whether `name` (normalised) is a native table.
    fn is_native(&self, name: &str) -> bool;
    /// The user columns of a native table, in order.
    fn user_columns(&self, name: &str) -> Option<Vec<String>>;
    /// The SQL text of a native table's column default, if it has one.
    fn column_default(&self, table: &str, column: &str) -> Option<String>;
    /// Whether unquoted identifiers are folded to lower case (DataFusion's
    /// `enable_ident_normalization`).
    fn fold_case(&self) -> bool;
}

/// Rewrites one statement in place.
pub fn rewrite(stmt: &mut Statement, tables: &dyn NativeTables) {
    if let Statement::Insert(ins) = stmt
        && ins.columns.is_empty()
        && ins.source.is_some()
        && let TableObject::TableName(name) = &ins.table
        && let Some(t) = table_name(name, tables.fold_case())
        && let Some(cols) = tables.user_columns(&t)
    {
        ins.columns =
            cols.into_iter().map(|c| ObjectName::from(vec![Ident::with_quote('"', c)])).collect();
    }
    if let Statement::Insert(ins) = stmt {
        defaults_in_values(ins, tables);
        // `INSERT INTO t AS alias`: only `ON CONFLICT … DO UPDATE` (run apart, before
        // planning) refers to the alias; DataFusion's planner refuses it.
        ins.table_alias = None;
    }
    let mut v = Rewriter { tables, ctes: Vec::new() };
    let _ = stmt.visit(&mut v);
}

/// `DEFAULT` written as a value of an `INSERT … VALUES` row (a bare, unquoted `DEFAULT`
/// identifier, which the parser reads as a column name) becomes the column's default
/// expression, or NULL when it has none, as in SQLite and PostgreSQL. Applies to native
/// tables with a known column list (given, or filled in above).
fn defaults_in_values(
    ins: &mut datafusion::sql::sqlparser::ast::Insert,
    tables: &dyn NativeTables,
) {
    use datafusion::sql::sqlparser::ast::{Expr, SetExpr, Value};
    let is_default = |e: &Expr| matches!(e, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"));
    let Some(source) = ins.source.as_mut() else { return };
    let SetExpr::Values(values) = source.body.as_mut() else { return };
    if !values.rows.iter().flat_map(|r| r.content.iter()).any(is_default) {
        return;
    }
    let TableObject::TableName(name) = &ins.table else { return };
    let fold = tables.fold_case();
    let Some(table) = table_name(name, fold) else { return };
    if !tables.is_native(&table) {
        return;
    }
    let columns: Vec<String> = ins
        .columns
        .iter()
        .map(|c| {
            c.0.last().and_then(|p| p.as_ident()).map(|i| normalise(i, fold)).unwrap_or_default()
        })
        .collect();
    for row in &mut values.rows {
        for (i, e) in row.content.iter_mut().enumerate() {
            if !is_default(e) {
                continue;
            }
            let Some(column) = columns.get(i) else { continue };
            let parsed = tables.column_default(&table, column).and_then(|sql| {
                let dialect = datafusion::sql::sqlparser::dialect::GenericDialect {};
                datafusion::sql::sqlparser::parser::Parser::new(&dialect)
                    .try_with_sql(&sql)
                    .and_then(|mut p| p.parse_expr())
                    .ok()
            });
            *e = parsed.unwrap_or_else(|| Expr::value(Value::Null));
        }
    }
}

/// The normalised name of a one-part (or `public.`/`datafusion.public.`) table name.
fn table_name(name: &ObjectName, lower_idents: bool) -> Option<String> {
    let parts: Vec<&Ident> = name
        .0
        .iter()
        .map(|p| match p {
            ObjectNamePart::Identifier(i) => Some(i),
            ObjectNamePart::Function(_) => None,
        })
        .collect::<Option<_>>()?;
    let last = parts.last()?;
    let prefix_ok = match parts.len() {
        1 => true,
        2 => normalise(parts[0], lower_idents) == "public",
        3 => {
            normalise(parts[0], lower_idents) == "datafusion"
                && normalise(parts[1], lower_idents) == "public"
        }
        _ => false,
    };
    prefix_ok.then(|| normalise(last, lower_idents))
}

/// The normalised table name an `ALTER TABLE` (or other statement) names.
pub fn table_name_of(name: &ObjectName, lower_idents: bool) -> Option<String> {
    table_name(name, lower_idents)
}

/// An identifier as DataFusion resolves it (unquoted: lower case).
pub fn ident_name(i: &Ident, lower_idents: bool) -> String {
    normalise(i, lower_idents)
}

fn normalise(i: &Ident, lower_idents: bool) -> String {
    if i.quote_style.is_some() || !lower_idents { i.value.clone() } else { i.value.to_lowercase() }
}

struct Rewriter<'a> {
    tables: &'a dyn NativeTables,
    /// CTE names in scope, one set per enclosing query.
    ctes: Vec<HashSet<String>>,
}

/// The constraint of the join operators the rewrites understand (not APPLY, ASOF, …);
/// written once for the shared and the mutable accessor.
macro_rules! join_constraint {
    ($op:expr) => {
        match $op {
            JoinOperator::Join(c)
            | JoinOperator::Inner(c)
            | JoinOperator::Left(c)
            | JoinOperator::LeftOuter(c)
            | JoinOperator::Right(c)
            | JoinOperator::RightOuter(c)
            | JoinOperator::FullOuter(c)
            | JoinOperator::CrossJoin(c)
            | JoinOperator::Semi(c)
            | JoinOperator::LeftSemi(c)
            | JoinOperator::Anti(c)
            | JoinOperator::LeftAnti(c)
            | JoinOperator::RightSemi(c)
            | JoinOperator::RightAnti(c) => Some(c),
            _ => None,
        }
    };
}

fn constraint_mut(op: &mut JoinOperator) -> Option<&mut JoinConstraint> {
    join_constraint!(op)
}

/// A join's constraint and which sides its output has.
fn join_parts(op: &JoinOperator) -> Option<(&JoinConstraint, Keep)> {
    let keep = match op {
        // Semi and anti joins output one side only.
        JoinOperator::Semi(_)
        | JoinOperator::LeftSemi(_)
        | JoinOperator::Anti(_)
        | JoinOperator::LeftAnti(_) => Keep::Left,
        JoinOperator::RightSemi(_) | JoinOperator::RightAnti(_) => Keep::Right,
        _ => Keep::Both,
    };
    Some((join_constraint!(op)?, keep))
}

/// Which sides of a join its output has.
enum Keep {
    Both,
    Left,
    Right,
}

/// A relation of a FROM clause, for wildcard expansion.
struct Rel {
    /// The name `*` columns are qualified by (alias or table name).
    qualifier: Option<Ident>,
    native: bool,
    /// Columns a USING join with an earlier relation merges away from this one.
    using: Vec<Ident>,
}

impl Rewriter<'_> {
    fn is_native(&self, name: &ObjectName) -> bool {
        let Some(t) = table_name(name, self.tables.fold_case()) else { return false };
        if name.0.len() == 1 && self.ctes.iter().any(|s| s.contains(&t)) {
            return false;
        }
        self.tables.is_native(&t)
    }

    fn rel(&self, f: &TableFactor) -> Rel {
        match f {
            TableFactor::Table { name, alias, args: None, .. } => Rel {
                qualifier: alias.as_ref().map(|a| a.name.clone()).or_else(|| match name.0.last() {
                    Some(ObjectNamePart::Identifier(i)) => Some(i.clone()),
                    _ => None,
                }),
                native: self.is_native(name),
                using: Vec::new(),
            },
            TableFactor::Table { alias, .. } | TableFactor::Derived { alias, .. } => Rel {
                qualifier: alias.as_ref().map(|a| a.name.clone()),
                native: false,
                using: Vec::new(),
            },
            _ => Rel { qualifier: None, native: false, using: Vec::new() },
        }
    }

    /// The relations of a FROM clause in order, or `None` if a `*` over them cannot be
    /// expanded per relation.
    fn relations(&self, select: &Select) -> Option<Vec<Rel>> {
        let mut out = Vec::new();
        for twj in &select.from {
            out.extend(self.join_relations(twj)?);
        }
        Some(out)
    }

    /// The relations of one FROM item with its joins (an unaliased parenthesised join
    /// contributes its own relations).
    fn join_relations(&self, twj: &TableWithJoins) -> Option<Vec<Rel>> {
        let mut out = Vec::new();
        {
            out.extend(self.factor_relations(&twj.relation)?);
            for j in &twj.joins {
                let (constraint, keep) = join_parts(&j.join_operator)?;
                let mut rs = self.factor_relations(&j.relation)?;
                if rs.len() != 1
                    && !matches!(constraint, JoinConstraint::On(_) | JoinConstraint::None)
                {
                    return None;
                }
                let mut r = rs.pop()?;
                match constraint {
                    JoinConstraint::Natural => return None,
                    JoinConstraint::Using(cols) => {
                        for c in cols {
                            match c.0.last() {
                                Some(ObjectNamePart::Identifier(i)) => r.using.push(i.clone()),
                                _ => return None,
                            }
                        }
                    }
                    JoinConstraint::On(_) | JoinConstraint::None => {}
                }
                rs.push(r);
                match keep {
                    Keep::Both => out.extend(rs),
                    Keep::Left => {}
                    Keep::Right => {
                        for r in &mut rs {
                            r.using.clear();
                        }
                        out = rs;
                    }
                }
            }
        }
        Some(out)
    }

    /// The qualifiers of the native tables in a FROM item (unaliased parenthesised joins
    /// included).
    fn collect_natives(&self, twj: &TableWithJoins, out: &mut Vec<Ident>) {
        for f in std::iter::once(&twj.relation).chain(twj.joins.iter().map(|j| &j.relation)) {
            match f {
                TableFactor::NestedJoin { table_with_joins, alias: None } => {
                    self.collect_natives(table_with_joins, out)
                }
                f => {
                    let r = self.rel(f);
                    if r.native
                        && let Some(q) = r.qualifier
                    {
                        out.push(q);
                    }
                }
            }
        }
    }

    fn factor_relations(&self, f: &TableFactor) -> Option<Vec<Rel>> {
        match f {
            TableFactor::NestedJoin { table_with_joins, alias: None } => {
                self.join_relations(table_with_joins)
            }
            f => Some(vec![self.rel(f)]),
        }
    }

    /// `a NATURAL JOIN b` joins on every common column — `_id` too, which every native table
    /// has. When all relations involved are native tables, the join becomes `USING (common
    /// user columns)` (or a cross join if there are none).
    fn rewrite_natural_joins(&self, select: &mut Select) {
        for twj in &mut select.from {
            let mut left: Option<Vec<String>> = self.native_columns(&twj.relation);
            for j in &mut twj.joins {
                let right = self.native_columns(&j.relation);
                let both = matches!(join_parts(&j.join_operator), Some((_, Keep::Both)));
                let constraint = constraint_mut(&mut j.join_operator).filter(|_| both);
                if let (Some(c), Some(l), Some(r)) = (constraint, &left, &right)
                    && matches!(c, JoinConstraint::Natural)
                {
                    let common: Vec<ObjectName> = l
                        .iter()
                        .filter(|n| r.contains(n))
                        .map(|n| ObjectName::from(vec![Ident::with_quote('"', n.clone())]))
                        .collect();
                    *c = if common.is_empty() {
                        JoinConstraint::None
                    } else {
                        JoinConstraint::Using(common)
                    };
                }
                left = match (left, right) {
                    (Some(mut l), Some(r)) => {
                        l.extend(r.into_iter().filter(|c| !l.contains(c)).collect::<Vec<_>>());
                        Some(l)
                    }
                    _ => None,
                };
            }
        }
    }

    /// `(a CROSS JOIN b) AS t` exposes every column of `a` and `b` as `t.…`, `_id`s included.
    /// Over native tables it becomes `(SELECT * FROM a CROSS JOIN b) AS t`, whose `*` the
    /// rules above expand without the ids (the visit reaches the new subquery next).
    fn alias_nested_joins(&self, select: &mut Select) {
        let factors = select.from.iter_mut().flat_map(|t| {
            std::iter::once(&mut t.relation).chain(t.joins.iter_mut().map(|j| &mut j.relation))
        });
        for f in factors {
            let TableFactor::NestedJoin { table_with_joins, alias: Some(alias) } = f else {
                continue;
            };
            let has_native = std::iter::once(&table_with_joins.relation)
                .chain(table_with_joins.joins.iter().map(|j| &j.relation))
                .any(|r| self.rel(r).native);
            if !has_native {
                continue;
            }
            let sql = format!("SELECT * FROM {table_with_joins}");
            let parsed = datafusion::sql::sqlparser::parser::Parser::new(
                &datafusion::sql::sqlparser::dialect::GenericDialect {},
            )
            .try_with_sql(&sql)
            .and_then(|mut p| p.parse_query());
            if let Ok(subquery) = parsed {
                *f = TableFactor::Derived {
                    lateral: false,
                    subquery,
                    alias: Some(alias.clone()),
                    sample: None,
                };
            }
        }
    }

    /// The user columns of a FROM item that is a native table.
    fn native_columns(&self, f: &TableFactor) -> Option<Vec<String>> {
        match f {
            TableFactor::Table { name, args: None, .. } if self.is_native(name) => {
                self.tables.user_columns(&table_name(name, self.tables.fold_case())?)
            }
            _ => None,
        }
    }

    fn rewrite_select(&self, select: &mut Select) {
        self.rewrite_natural_joins(select);
        self.alias_nested_joins(select);
        let mut natives: Vec<Ident> = Vec::new();
        for t in &select.from {
            self.collect_natives(t, &mut natives);
        }
        if natives.is_empty() {
            return;
        }
        let several = select.from.len() > 1 || select.from.iter().any(|t| !t.joins.is_empty());
        if several && select.projection.iter().any(|i| matches!(i, SelectItem::Wildcard(_))) {
            name_derived_tables(select);
        }
        let mut items = Vec::with_capacity(select.projection.len());
        for item in std::mem::take(&mut select.projection) {
            match item {
                SelectItem::QualifiedWildcard(
                    SelectItemQualifiedWildcardKind::ObjectName(q),
                    mut opts,
                ) if table_name(&q, self.tables.fold_case()).is_some()
                    && natives.iter().any(
                        |n| matches!(q.0.last(), Some(ObjectNamePart::Identifier(i)) if same(i, n, self.tables.fold_case())),
                    ) =>
                {
                    if !mentions_id(&opts) {
                        add_exclude(&mut opts, &[]);
                    }
                    items.push(SelectItem::QualifiedWildcard(
                        SelectItemQualifiedWildcardKind::ObjectName(q),
                        opts,
                    ));
                }
                SelectItem::Wildcard(mut opts) => {
                    if natives.len() == 1
                        && select.from.iter().all(|t| t.joins.is_empty())
                        && select.from.len() == 1
                    {
                        if !mentions_id(&opts) {
                            add_exclude(&mut opts, &[]);
                        }
                        items.push(SelectItem::Wildcard(opts));
                    } else if plain(&opts)
                        && let Some(rels) = self.relations(select)
                        && rels.iter().all(|r| r.qualifier.is_some())
                    {
                        for r in rels {
                            let Some(q) = r.qualifier else { continue };
                            let mut o = WildcardAdditionalOptions {
                                wildcard_token: opts.wildcard_token.clone(),
                                ..Default::default()
                            };
                            if r.native || !r.using.is_empty() {
                                if r.native {
                                    add_exclude(&mut o, &r.using);
                                } else {
                                    add_exclude_only(&mut o, &r.using);
                                }
                            }
                            items.push(SelectItem::QualifiedWildcard(
                                SelectItemQualifiedWildcardKind::ObjectName(ObjectName::from(
                                    vec![q],
                                )),
                                o,
                            ));
                        }
                    } else {
                        items.push(SelectItem::Wildcard(opts));
                    }
                }
                other => items.push(other),
            }
        }
        select.projection = items;
    }
}

/// Gives unnamed derived tables (`, LATERAL (SELECT …)`, `JOIN (SELECT …) ON …`) a name, so
/// a `*` over several relations can be expanded per relation. Their columns keep their names
/// and unqualified references still resolve.
fn name_derived_tables(select: &mut Select) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let factors = select.from.iter_mut().flat_map(|t| {
        std::iter::once(&mut t.relation).chain(t.joins.iter_mut().map(|j| &mut j.relation))
    });
    for f in factors {
        if let TableFactor::Derived { alias: alias @ None, .. } = f {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            *alias = Some(TableAlias {
                explicit: true,
                name: Ident::new(format!("__basalt_subquery_{n}")),
                columns: Vec::new(),
                at: None,
            });
        }
    }
}

fn same(a: &Ident, b: &Ident, lower_idents: bool) -> bool {
    normalise(a, lower_idents) == normalise(b, lower_idents)
}

/// Whether a wildcard's own EXCLUDE / EXCEPT already names `_id`.
fn mentions_id(o: &WildcardAdditionalOptions) -> bool {
    let is_id = |i: &Ident| normalise(i, true) == ID_COLUMN;
    let in_names = |ns: &[ObjectName]| {
        ns.iter().any(|n| matches!(n.0.last(), Some(ObjectNamePart::Identifier(i)) if is_id(i)))
    };
    let excluded = match &o.opt_exclude {
        Some(ExcludeSelectItem::Single(n)) => in_names(std::slice::from_ref(n)),
        Some(ExcludeSelectItem::Multiple(ns)) => in_names(ns),
        None => false,
    };
    let excepted = o
        .opt_except
        .as_ref()
        .is_some_and(|e| is_id(&e.first_element) || e.additional_elements.iter().any(is_id));
    excluded || excepted
}

/// A wildcard without options of its own.
fn plain(o: &WildcardAdditionalOptions) -> bool {
    o.opt_ilike.is_none()
        && o.opt_exclude.is_none()
        && o.opt_except.is_none()
        && o.opt_replace.is_none()
        && o.opt_rename.is_none()
        && o.opt_alias.is_none()
}

/// Adds `_id` and `more` to a wildcard's EXCLUDE list (unless `_id` is already there).
fn add_exclude(o: &mut WildcardAdditionalOptions, more: &[Ident]) {
    let mut names: Vec<ObjectName> = match o.opt_exclude.take() {
        None => Vec::new(),
        Some(ExcludeSelectItem::Single(n)) => vec![n],
        Some(ExcludeSelectItem::Multiple(ns)) => ns,
    };
    let has_id = names.iter().any(
        |n| matches!(n.0.last(), Some(ObjectNamePart::Identifier(i)) if normalise(i, true) == ID_COLUMN),
    );
    if !has_id {
        names.push(ObjectName::from(vec![Ident::new(ID_COLUMN)]));
    }
    names.extend(more.iter().map(|i| ObjectName::from(vec![i.clone()])));
    o.opt_exclude = Some(ExcludeSelectItem::Multiple(names));
}

fn add_exclude_only(o: &mut WildcardAdditionalOptions, cols: &[Ident]) {
    if !cols.is_empty() {
        o.opt_exclude = Some(ExcludeSelectItem::Multiple(
            cols.iter().map(|i| ObjectName::from(vec![i.clone()])).collect(),
        ));
    }
}

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    fn pre_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        let mut names = HashSet::new();
        if let Some(with) = q.with.as_mut() {
            // A CTE's body sees the CTEs defined before it (and itself when recursive), not
            // the later ones: `WITH t AS (SELECT * FROM t)` reads the table t. Rewrite each
            // body in its own scope first; the visit that follows finds nothing more to do
            // there (the rewrites are idempotent and a larger scope only rewrites less).
            for cte in with.cte_tables.iter_mut() {
                let name = normalise(&cte.alias.name, self.tables.fold_case());
                let mut scope = names.clone();
                if with.recursive {
                    scope.insert(name.clone());
                }
                let mut ctes = self.ctes.clone();
                ctes.push(scope);
                let mut inner = Rewriter { tables: self.tables, ctes };
                let _ = cte.query.visit(&mut inner);
                names.insert(name);
            }
        }
        self.ctes.push(names);
        ControlFlow::Continue(())
    }

    fn post_visit_query(&mut self, _q: &mut Query) -> ControlFlow<()> {
        self.ctes.pop();
        ControlFlow::Continue(())
    }

    fn pre_visit_select(&mut self, s: &mut Select) -> ControlFlow<()> {
        self.rewrite_select(s);
        ControlFlow::Continue(())
    }
}
