//! Names for repeated unnamed projections: `SELECT a, a FROM t`, `SELECT a+1, a + 1`,
//! `SELECT count(*), count(*)` are valid in SQLite and PostgreSQL, but DataFusion refuses a
//! projection whose expressions share a name.
//!
//! Used when planning a statement failed for that reason ([`is_duplicate_names`]): in
//! every `SELECT` of the statement, unnamed items that spell the same expression (compared
//! as written, case folded, a column by its last name part) get aliases — the expression's
//! text for the first, the text with `:1`, `:2`, … for the next (skipping names the
//! projection already uses) — and the statement is planned again. Statements that plan
//! without it are never touched, so their column names stay DataFusion's.
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
    e.to_string().contains("Projections require unique expression names")
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
                if let SelectItem::UnnamedExpr(e) = item
                    && !keys.insert(key(e))
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

/// The names of one projection's repeated unnamed items, aliased in place.
fn name_select(s: &mut Select) -> bool {
    let mut groups: HashMap<String, Vec<usize>> = HashMap::new();
    let mut used: HashSet<String> = HashSet::new();
    for (i, item) in s.projection.iter().enumerate() {
        match item {
            SelectItem::UnnamedExpr(e) => groups.entry(key(e)).or_default().push(i),
            SelectItem::ExprWithAlias { alias, .. } => {
                used.insert(alias.value.to_lowercase());
            }
            _ => {}
        }
    }
    let mut repeated: Vec<Vec<usize>> = groups.into_values().filter(|g| g.len() > 1).collect();
    if repeated.is_empty() {
        return false;
    }
    repeated.sort();
    for group in repeated {
        let base = match &s.projection[group[0]] {
            SelectItem::UnnamedExpr(e) => name(e),
            _ => continue,
        };
        let mut n = 0usize;
        for i in group {
            let alias = loop {
                let candidate = if n == 0 { base.clone() } else { format!("{base}:{n}") };
                n += 1;
                if used.insert(candidate.to_lowercase()) {
                    break candidate;
                }
            };
            let item =
                std::mem::replace(&mut s.projection[i], SelectItem::Wildcard(Default::default()));
            s.projection[i] = match item {
                SelectItem::UnnamedExpr(expr) => {
                    SelectItem::ExprWithAlias { expr, alias: Ident::with_quote('"', alias) }
                }
                other => other,
            };
        }
    }
    true
}

/// What two items must share to be the same expression as far as names go.
fn key(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.to_lowercase(),
        Expr::CompoundIdentifier(parts) => {
            parts.last().map(|i| i.value.to_lowercase()).unwrap_or_default()
        }
        e => e.to_string().to_lowercase(),
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
        // Subqueries are named too; a projection without repeats is left as written.
        assert_eq!(
            named("SELECT x FROM (SELECT 1, 1) s WHERE y IN (SELECT c FROM u)"),
            "SELECT x FROM (SELECT 1 AS \"1\", 1 AS \"1:1\") s WHERE y IN (SELECT c FROM u)"
        );
    }
}
