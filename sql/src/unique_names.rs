//! Names for repeated output names: `SELECT a, a FROM t`, `SELECT a+1, a + 1`,
//! `SELECT count(*), count(*)`, `SELECT a, 1 AS a`, `SELECT 1 AS x, 2 AS x` and two scalar
//! subqueries are valid in SQLite and PostgreSQL, but DataFusion refuses a projection whose
//! items share a name.
//!
//! Used when planning a statement failed for that reason ([`is_duplicate_names`]): in
//! every `SELECT` of the statement, items whose output names collide (unnamed ones compared
//! as written, case folded, a column by its last name part, every scalar subquery alike, as
//! DataFusion names them; aliases by their text) get aliases — the first keeps its name
//! (its text, for an unnamed item), the next get their own name with `:1`, `:2`, …
//! (skipping names the projection already uses) — and the statement is planned again.
//! Statements that plan without it are never touched, so their column names stay
//! DataFusion's.
//!
//! What this module must not do: change what any item computes (it only adds aliases).

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;

use datafusion::error::DataFusionError;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr, Ident, Select, SelectItem, Visit, VisitMut, Visitor, VisitorMut,
};

/// Whether a planning error is DataFusion's refusal of a projection with repeated names.
pub(crate) fn is_duplicate_names(e: &DataFusionError) -> bool {
    let text = e.to_string();
    text.contains("Projections require unique expression names")
        || (text.contains("Schema contains qualified field name")
            && text.contains("which would be ambiguous"))
}

/// Whether some `SELECT` of `stmt` repeats an unnamed item (what
/// [`name_repeated_items`] would alias): only such a statement needs a copy kept for a
/// second planning, so a large `INSERT … VALUES` is never copied.
pub(crate) fn has_repeated_items(stmt: &DfStatement) -> bool {
    struct Finder;
    impl Visitor for Finder {
        type Break = ();
        fn pre_visit_select(&mut self, s: &Select) -> ControlFlow<()> {
            let mut keys = HashSet::new();
            for item in &s.projection {
                if let Some(k) = output_key(item)
                    && !keys.insert(k)
                {
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let found = |c: ControlFlow<()>| c.is_break();
    match stmt {
        DfStatement::Statement(s) => found(s.visit(&mut Finder)),
        DfStatement::Explain(e) => match e.statement.as_ref() {
            DfStatement::Statement(s) => found(s.visit(&mut Finder)),
            _ => false,
        },
        DfStatement::CopyTo(c) => match &c.source {
            datafusion::sql::parser::CopyToSource::Query(q) => found(q.visit(&mut Finder)),
            _ => false,
        },
        _ => false,
    }
}

/// Aliases repeated unnamed items in every `SELECT` of `stmt`; whether any changed.
pub(crate) fn name_repeated_items(stmt: &mut DfStatement) -> bool {
    let mut v = Namer { changed: false };
    match stmt {
        DfStatement::Statement(s) => {
            let _ = s.visit(&mut v);
        }
        DfStatement::Explain(e) => {
            if let DfStatement::Statement(s) = e.statement.as_mut() {
                let _ = s.visit(&mut v);
            }
        }
        DfStatement::CopyTo(c) => {
            if let datafusion::sql::parser::CopyToSource::Query(q) = &mut c.source {
                let _ = q.visit(&mut v);
            }
        }
        _ => {}
    }
    v.changed
}

struct Namer {
    changed: bool,
}

impl VisitorMut for Namer {
    type Break = ();

    fn pre_visit_select(&mut self, s: &mut Select) -> ControlFlow<()> {
        self.changed |= name_select(s);
        ControlFlow::Continue(())
    }
}

/// The names of one projection's repeated output names, aliased in place: the first of a
/// group keeps its name (an unnamed item gets it as an alias), the next get `name:1`, ….
fn name_select(s: &mut Select) -> bool {
    let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
    let mut used: HashSet<String> = HashSet::new();
    for (i, item) in s.projection.iter().enumerate() {
        if let Some(k) = output_key(item) {
            groups.entry(k).or_default().push(i);
        }
        if let SelectItem::ExprWithAlias { alias, .. } = item {
            used.insert(alias.value.to_lowercase());
        }
    }
    let mut repeated: Vec<Vec<usize>> = groups.into_values().filter(|g| g.len() > 1).collect();
    if repeated.is_empty() {
        return false;
    }
    repeated.sort();
    for group in repeated {
        for (rank, i) in group.into_iter().enumerate() {
            // Each by its own text (subqueries that DataFusion names alike differ in it).
            let (base, aliased) = match &s.projection[i] {
                SelectItem::UnnamedExpr(e) => (name(e), false),
                SelectItem::ExprWithAlias { alias, .. } => (alias.value.clone(), true),
                _ => continue,
            };
            if rank == 0 && aliased {
                continue; // keeps its alias
            }
            let mut n = usize::from(rank > 0 && aliased);
            let alias = loop {
                let candidate = if n == 0 { base.clone() } else { format!("{base}:{n}") };
                n += 1;
                if used.insert(candidate.to_lowercase()) || (n == 1 && rank == 0) {
                    break candidate;
                }
            };
            let item =
                std::mem::replace(&mut s.projection[i], SelectItem::Wildcard(Default::default()));
            s.projection[i] = match item {
                SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                    SelectItem::ExprWithAlias { expr, alias: Ident::with_quote('"', alias) }
                }
                other => other,
            };
        }
    }
    true
}

/// The name an item's output column has, as far as DataFusion's uniqueness check goes
/// (case folded); `None` for wildcards.
fn output_key(item: &SelectItem) -> Option<String> {
    match item {
        SelectItem::UnnamedExpr(e) => Some(key(e)),
        SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.to_lowercase()),
        _ => None,
    }
}

/// What two items must share to be the same expression as far as names go: DataFusion
/// names every scalar subquery `(<subquery>)`, and an `IN` / `EXISTS` subquery by the
/// operator alone, so every item holding a subquery shares one key.
fn key(e: &Expr) -> String {
    if contains_subquery(e) {
        // DataFusion's names of expressions around subqueries can coincide whatever the
        // rest of the text: all of them are named.
        return "(<subquery>)".into();
    }
    match e {
        Expr::Identifier(i) => i.value.to_lowercase(),
        Expr::CompoundIdentifier(parts) => {
            parts.last().map(|i| i.value.to_lowercase()).unwrap_or_default()
        }
        e => {
            // DataFusion's planner drops parentheses and unary plus from the names it gives.
            let mut e = e.clone();
            let _ = VisitMut::visit(&mut e, &mut Plain);
            e.to_string().to_lowercase()
        }
    }
}

/// Whether a subquery appears anywhere in `e`.
pub(crate) fn contains_subquery(e: &Expr) -> bool {
    struct Find;
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            match e {
                Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    Visit::visit(e, &mut Find).is_break()
}

/// Removes parentheses and unary plus (see [`key`]).
struct Plain;

impl VisitorMut for Plain {
    type Break = ();

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        loop {
            match e {
                Expr::Nested(inner) => {
                    *e = std::mem::replace(
                        inner.as_mut(),
                        Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
                    )
                }
                Expr::UnaryOp {
                    op: datafusion::sql::sqlparser::ast::UnaryOperator::Plus,
                    expr,
                } => {
                    *e = std::mem::replace(
                        expr.as_mut(),
                        Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
                    )
                }
                _ => break,
            }
        }
        ControlFlow::Continue(())
    }
}

/// The name an item is shown by: a column's name, else the expression as written.
fn name(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.clone(),
        Expr::CompoundIdentifier(parts) => {
            parts.last().map(|i| i.value.clone()).unwrap_or_default()
        }
        e => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(sql: &str) -> bool {
        let opts = datafusion::config::ConfigOptions::default();
        has_repeated_items(&crate::parse::parse_one(&opts, sql).unwrap())
    }

    fn named(sql: &str) -> String {
        let opts = datafusion::config::ConfigOptions::default();
        let mut s = crate::parse::parse_one(&opts, sql).unwrap();
        name_repeated_items(&mut s);
        s.to_string()
    }

    #[test]
    fn repeats_get_distinct_aliases_and_nothing_else_changes() {
        assert_eq!(
            named("SELECT a, t.a, a+1, a + 1, b FROM t"),
            "SELECT a AS \"a\", t.a AS \"a:1\", a + 1 AS \"a + 1\", a + 1 AS \"a + 1:1\", b FROM t"
        );
        assert_eq!(
            named("SELECT count(*), COUNT(*) AS \"count(*):1\" , count(*) FROM t"),
            "SELECT count(*) AS \"count(*)\", COUNT(*) AS \"count(*):1\", count(*) AS \"count(*):2\" FROM t"
        );
        assert!(has("SELECT a, t.a FROM t") && has("SELECT x FROM (SELECT 1, 1) s"));
        assert!(!has("SELECT a, b, a AS c FROM t") && !has("INSERT INTO t VALUES (1, 1)"));
        // Distinct subqueries share DataFusion's name: each gets its own text.
        assert_eq!(
            named("SELECT (SELECT 1), (SELECT 2), (SELECT 1) FROM t"),
            "SELECT (SELECT 1) AS \"(SELECT 1)\", (SELECT 2) AS \"(SELECT 2)\", (SELECT 1) AS \"(SELECT 1):1\" FROM t"
        );
        assert!(has("SELECT (SELECT 1), (SELECT 2) FROM t"));
        // A column and an alias, or two aliases, of one name.
        assert_eq!(
            named("SELECT col1, 90 AS col1, - col0 AS COL1 FROM t"),
            "SELECT col1 AS \"col1\", 90 AS \"col1:1\", -col0 AS \"COL1:2\" FROM t"
        );
        assert!(has("SELECT 38 AS c, 1 AS c FROM t"));
        // DataFusion names `( - + a )` and `- a` alike.
        assert_eq!(
            named("SELECT ( - + a ), - a FROM t"),
            "SELECT (-+a) AS \"(-+a)\", -a AS \"-a\" FROM t"
        );
        // Subqueries are named too; a projection without repeats is left as written.
        assert_eq!(
            named("SELECT x FROM (SELECT 1, 1) s WHERE y IN (SELECT c FROM u)"),
            "SELECT x FROM (SELECT 1 AS \"1\", 1 AS \"1:1\") s WHERE y IN (SELECT c FROM u)"
        );
    }
}
