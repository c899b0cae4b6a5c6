//! SQLite spellings DataFusion does not take, as what it does take:
//!
//! - unary `+` is dropped: it is the identity in SQLite for every type (DataFusion refuses
//!   it on text);
//! - `group_concat(x)` / `group_concat(x, sep)` → `string_agg(CAST(x AS VARCHAR), ',' | sep)`
//!   (NULLs skipped; no rows: NULL);
//! - `total(x)` → `COALESCE(sum(CAST(x AS DOUBLE)), 0.0)` (a float, 0.0 over no rows).
//!
//! For the aggregates, `DISTINCT`, `FILTER`, `ORDER BY` inside the call and `OVER` carry
//! over to the inner aggregate. Used on every prepared statement.
//!
//! What this module must not do: change what any other expression computes.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Statement,
    UnaryOperator, Value, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::parser::Parser;

/// Rewrites the SQLite spellings of `stmt` (see the module docs).
pub(crate) fn rewrite(stmt: &mut Statement) {
    let _ = stmt.visit(&mut Sqlite);
}

struct Sqlite;

impl VisitorMut for Sqlite {
    type Break = ();

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Expr::Function(f) = e
            && let Some(new) = translate(f)
        {
            *e = new;
        }
        while let Expr::UnaryOp { op: UnaryOperator::Plus, expr } = e {
            let inner = std::mem::replace(expr.as_mut(), Expr::value(Value::Null));
            *e = inner;
        }
        ControlFlow::Continue(())
    }
}

/// The name of a one-part function name, lower case.
fn plain_name(f: &Function) -> Option<String> {
    match f.name.0.as_slice() {
        [p] => p.as_ident().map(|i| i.value.to_lowercase()),
        _ => None,
    }
}

fn translate(f: &Function) -> Option<Expr> {
    let name = plain_name(f)?;
    let FunctionArguments::List(list) = &f.args else { return None };
    let args: Vec<Expr> = list
        .args
        .iter()
        .map(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => Some(e.clone()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let (template, inner) = match (name.as_str(), args.len()) {
        ("group_concat", 1) => ("string_agg(CAST(__basalt_arg0 AS VARCHAR), ',')", "string_agg"),
        ("group_concat", 2) => {
            ("string_agg(CAST(__basalt_arg0 AS VARCHAR), __basalt_arg1)", "string_agg")
        }
        ("total", 1) => ("COALESCE(sum(CAST(__basalt_arg0 AS DOUBLE)), 0.0)", "sum"),
        _ => return None,
    };
    let mut e = Parser::new(&GenericDialect {}).try_with_sql(template).ok()?.parse_expr().ok()?;
    let _ = e.visit(&mut Fill { args: &args, call: f, inner });
    Some(e)
}

/// Puts the call's arguments into a template, and its clauses on the inner aggregate.
struct Fill<'a> {
    args: &'a [Expr],
    call: &'a Function,
    inner: &'a str,
}

impl VisitorMut for Fill<'_> {
    type Break = ();

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        match e {
            Expr::Identifier(Ident { value, .. }) if value.starts_with("__basalt_arg") => {
                if let Some(a) = value["__basalt_arg".len()..]
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| self.args.get(i))
                {
                    *e = a.clone();
                }
            }
            Expr::Function(f) if plain_name(f).as_deref() == Some(self.inner) => {
                f.filter = self.call.filter.clone();
                f.over = self.call.over.clone();
                f.null_treatment = self.call.null_treatment;
                f.within_group = self.call.within_group.clone();
                if let (FunctionArguments::List(mine), FunctionArguments::List(theirs)) =
                    (&mut f.args, &self.call.args)
                {
                    mine.duplicate_treatment = theirs.duplicate_treatment;
                    mine.clauses = theirs.clauses.clone();
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    fn rewritten(sql: &str) -> String {
        let opts = datafusion::config::ConfigOptions::default();
        let mut s = crate::parse::parse_one(&opts, sql).unwrap();
        if let datafusion::sql::parser::Statement::Statement(s) = &mut s {
            super::rewrite(s);
        }
        s.to_string()
    }

    #[test]
    fn sqlite_aggregates_become_datafusion_ones() {
        assert_eq!(
            rewritten("SELECT group_concat(DISTINCT x), GROUP_CONCAT(y, '; ') FROM t"),
            "SELECT string_agg(DISTINCT CAST(x AS VARCHAR), ','), \
             string_agg(CAST(y AS VARCHAR), '; ') FROM t"
        );
        assert_eq!(
            rewritten("SELECT total(x) FILTER (WHERE x > 1), total(x) OVER () FROM t"),
            "SELECT COALESCE(sum(CAST(x AS DOUBLE)) FILTER (WHERE x > 1), 0.0), \
             COALESCE(sum(CAST(x AS DOUBLE)) OVER (), 0.0) FROM t"
        );
        // Unary plus is the identity, on text too.
        assert_eq!(rewritten("SELECT + + a, - + b, +'x' FROM t"), "SELECT a, -b, 'x' FROM t");
        // Other functions and other arities are left alone.
        assert_eq!(
            rewritten("SELECT total(x, y), sum(x) FROM t"),
            "SELECT total(x, y), sum(x) FROM t"
        );
    }
}
