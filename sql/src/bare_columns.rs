//! SQLite's bare columns: an aggregate query may name a column that is neither grouped nor
//! aggregated (`SELECT a, max(b) FROM t`, `SELECT coalesce(3, c) FROM t GROUP BY d`);
//! SQLite takes its value from one row of the group. DataFusion (like PostgreSQL)
//! refuses such a query.
//!
//! Used when planning a statement failed for that reason ([`is_bare_column_error`]): in
//! every `SELECT` that groups or aggregates, each column reference of its items and
//! `HAVING` that is neither inside an aggregate call nor (part of) a grouped expression
//! becomes `any_value(column)`, and the statement is planned again. Statements that plan
//! are never touched.
//!
//! What this module must not do: change a query DataFusion accepts.

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::error::DataFusionError;
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::{
    Expr, Function, GroupByExpr, Select, SelectItem, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Whether a planning error is DataFusion's refusal of an ungrouped column.
pub(crate) fn is_bare_column_error(e: &DataFusionError) -> bool {
    let text = e.to_string();
    text.contains("must appear in the GROUP BY clause or must be part of an aggregate function")
}

/// Wraps the bare columns of every grouping `SELECT` of `stmt`; whether any changed.
pub(crate) fn wrap_bare_columns(stmt: &mut DfStatement) -> bool {
    let mut v = Wrapper { changed: false };
    if let DfStatement::Statement(s) = stmt {
        let _ = s.visit(&mut v);
    }
    v.changed
}

/// Aggregate functions (their arguments are not bare).
const AGGREGATES: &[&str] = &[
    "any_value",
    "array_agg",
    "avg",
    "bit_and",
    "bit_or",
    "bit_xor",
    "bool_and",
    "bool_or",
    "count",
    "first_value",
    "group_concat",
    "last_value",
    "max",
    "mean",
    "median",
    "min",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "string_agg",
    "sum",
    "total",
    "var",
    "var_pop",
    "var_samp",
    "variance",
];

fn aggregate_name(f: &Function) -> Option<String> {
    let name = f.name.0.last()?.as_ident()?.value.to_lowercase();
    (f.over.is_none() && AGGREGATES.contains(&name.as_str())).then_some(name)
}

/// The text a grouped expression is compared by (a column by its last name part).
fn key(e: &Expr) -> String {
    match e {
        Expr::Identifier(i) => i.value.to_lowercase(),
        Expr::CompoundIdentifier(p) => p.last().map(|i| i.value.to_lowercase()).unwrap_or_default(),
        Expr::Nested(e) => key(e),
        e => e.to_string().to_lowercase(),
    }
}

struct Wrapper {
    changed: bool,
}

impl VisitorMut for Wrapper {
    type Break = ();

    fn pre_visit_select(&mut self, s: &mut Select) -> ControlFlow<()> {
        let grouped: HashSet<String> = match &s.group_by {
            GroupByExpr::Expressions(exprs, _) => exprs.iter().map(key).collect(),
            GroupByExpr::All(_) => return ControlFlow::Continue(()),
        };
        let aggregates = s.projection.iter().any(|i| match i {
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                has_aggregate(e)
            }
            _ => false,
        }) || s.having.as_ref().is_some_and(has_aggregate);
        if grouped.is_empty() && !aggregates {
            return ControlFlow::Continue(());
        }
        for item in &mut s.projection {
            // A bare column item keeps its column's name.
            let name = match item {
                SelectItem::UnnamedExpr(Expr::Identifier(i)) => Some(i.clone()),
                SelectItem::UnnamedExpr(Expr::CompoundIdentifier(p)) => p.last().cloned(),
                _ => None,
            };
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item
                && wrap(e, &grouped)
            {
                self.changed = true;
                if let (Some(alias), SelectItem::UnnamedExpr(e)) = (name, &*item) {
                    *item = SelectItem::ExprWithAlias { expr: e.clone(), alias };
                }
            }
        }
        if let Some(h) = &mut s.having {
            self.changed |= wrap(h, &grouped);
        }
        ControlFlow::Continue(())
    }
}

fn has_aggregate(e: &Expr) -> bool {
    let mut found = false;
    let mut e = e.clone();
    let _ = VisitMut::visit(&mut e, &mut FindAggregate { found: &mut found });
    found
}

struct FindAggregate<'a> {
    found: &'a mut bool,
}

impl VisitorMut for FindAggregate<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = e
            && aggregate_name(f).is_some()
        {
            *self.found = true;
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// Wraps the bare columns of one expression (not inside aggregates or subqueries).
fn wrap(e: &mut Expr, grouped: &HashSet<String>) -> bool {
    if grouped.contains(&key(e)) {
        return false;
    }
    match e {
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => {
            let text = format!("any_value({e})");
            match Parser::new(&GenericDialect {})
                .try_with_sql(&text)
                .and_then(|mut p| p.parse_expr())
            {
                Ok(w) => {
                    *e = w;
                    true
                }
                Err(_) => false,
            }
        }
        Expr::Function(f) if aggregate_name(f).is_some() => false,
        Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => false,
        _ => {
            // The direct children, through a visitor that stops at each (wrap recurses).
            let mut changed = false;
            let _ = VisitMut::visit(e, &mut Children { grouped, changed: &mut changed, depth: 0 });
            changed
        }
    }
}

/// Applies [`wrap`] to the direct child expressions of an expression.
struct Children<'a> {
    grouped: &'a HashSet<String>,
    changed: &'a mut bool,
    depth: usize,
}

impl VisitorMut for Children<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        self.depth += 1;
        if self.depth == 2 {
            *self.changed |= wrap(e, self.grouped);
        }
        ControlFlow::Continue(())
    }
    fn post_visit_expr(&mut self, _e: &mut Expr) -> ControlFlow<()> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    fn wrapped(sql: &str) -> String {
        let opts = datafusion::config::ConfigOptions::default();
        let mut s = crate::parse::parse_one(&opts, sql).unwrap();
        super::wrap_bare_columns(&mut s);
        s.to_string()
    }

    #[test]
    fn ungrouped_columns_become_any_value() {
        assert_eq!(
            wrapped("SELECT a, max(b), coalesce(3, t.c * 2), d + 1 FROM t GROUP BY d HAVING e > 1"),
            "SELECT any_value(a) AS a, max(b), coalesce(3, any_value(t.c) * 2), d + 1 FROM t \
             GROUP BY d HAVING any_value(e) > 1"
        );
        // Subqueries and queries without grouping are left alone.
        assert_eq!(
            wrapped("SELECT a, (SELECT x FROM u) FROM t"),
            "SELECT a, (SELECT x FROM u) FROM t"
        );
    }
}
