//! Bounds on how deep a parsed statement nests, checked before anything else walks it.
//!
//! The parser builds operator chains (`a OR b OR …`, `1 + 1 + …`, `q1 UNION ALL q2 …`) as
//! trees one level deeper per term, and every later pass — cloning, dropping, planning,
//! optimizing, evaluating — recurses once per level: a long enough chain overflowed the
//! thread's stack and aborted the process. So, right after parsing:
//!
//! 1. chains of `AND`, of `OR` and of `||` are rebuilt as balanced trees (the operators are
//!    associative, NULLs included), so a chain of n terms is ⌈log₂ n⌉ deep — generated
//!    `WHERE id = 1 OR id = 2 OR …` filters of any length run;
//! 2. a statement whose expressions still nest deeper than [`MAX_EXPR_DEPTH`] (arithmetic
//!    chains, whose evaluation order decides overflow and rounding, are not rebalanced), or
//!    whose set operations chain more than [`MAX_SET_OPERATIONS`] queries, is refused with
//!    an error saying so.
//!
//! The walks here are sqlparser's visitors, which grow their stack as they go (its
//! `recursive-protection` feature), and chains are taken apart in loops; so the check itself
//! cannot overflow. What this module must not do: change what a statement means.

use std::ops::ControlFlow;

use datafusion::sql::parser::{CopyToSource, Statement as DfStatement};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, Query, SetExpr, Statement, Visit, VisitMut, Visitor, VisitorMut,
};

use crate::error::{Error, Result};

/// Deepest nesting of expressions a statement may have (after rebalancing).
pub const MAX_EXPR_DEPTH: usize = 1000;

/// Most queries one chain of set operations (`UNION`, `INTERSECT`, `EXCEPT`) may join.
pub const MAX_SET_OPERATIONS: usize = 1000;

/// Rebalances the associative chains of `stmt` and checks its depth (see the module docs).
pub fn shape(stmt: &mut DfStatement) -> Result<()> {
    match stmt {
        DfStatement::Statement(s) => shape_sql(s),
        DfStatement::Explain(e) => shape(&mut e.statement),
        DfStatement::CopyTo(c) => match &mut c.source {
            CopyToSource::Query(q) => shape_query(q),
            CopyToSource::Relation(_) => Ok(()),
        },
        DfStatement::CreateExternalTable(_) | DfStatement::Reset(_) => Ok(()),
    }
}

fn shape_sql(s: &mut Statement) -> Result<()> {
    let _ = s.visit(&mut Balance);
    check(s)
}

fn shape_query(q: &mut Query) -> Result<()> {
    let _ = q.visit(&mut Balance);
    check(q)
}

fn check<T: Visit>(node: &T) -> Result<()> {
    let mut d = Depth::default();
    match node.visit(&mut d) {
        ControlFlow::Continue(()) => Ok(()),
        ControlFlow::Break(why) => Err(Error::sql(why)),
    }
}

/// Whether `op` is one of the operators whose chains are rebalanced.
fn associative(op: &BinaryOperator) -> bool {
    matches!(op, BinaryOperator::And | BinaryOperator::Or | BinaryOperator::StringConcat)
}

/// Rebuilds chains of one associative operator as balanced trees.
struct Balance;

impl VisitorMut for Balance {
    type Break = ();

    fn pre_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let Expr::BinaryOp { op, left, right } = expr else { return ControlFlow::Continue(()) };
        let op = op.clone();
        let unbalanced = |e: &Expr| matches!(e, Expr::BinaryOp { op: o, .. } if *o == op);
        if !associative(&op) || !(unbalanced(left) || unbalanced(right)) {
            return ControlFlow::Continue(());
        }
        // Take the chain apart in a loop (terms in order), then build it up halving.
        let mut terms = Vec::new();
        let mut stack = vec![std::mem::replace(
            expr,
            Expr::value(datafusion::sql::sqlparser::ast::Value::Null),
        )];
        while let Some(e) = stack.pop() {
            match e {
                Expr::BinaryOp { op: o, left, right } if o == op => {
                    stack.push(*right);
                    stack.push(*left);
                }
                e => terms.push(e),
            }
        }
        if terms.len() > 2 {
            *expr = balanced(terms, &op);
        } else {
            let mut t = terms.into_iter();
            if let (Some(l), Some(r)) = (t.next(), t.next()) {
                *expr = Expr::BinaryOp { left: Box::new(l), op, right: Box::new(r) };
            }
        }
        ControlFlow::Continue(())
    }
}

/// `terms[0] op terms[1] op …` as a balanced tree (left halves first: the order of the
/// terms is kept).
fn balanced(mut terms: Vec<Expr>, op: &BinaryOperator) -> Expr {
    if terms.len() == 1 {
        return terms.pop().unwrap_or(Expr::value(datafusion::sql::sqlparser::ast::Value::Null));
    }
    let right = terms.split_off(terms.len() / 2);
    Expr::BinaryOp {
        left: Box::new(balanced(terms, op)),
        op: op.clone(),
        right: Box::new(balanced(right, op)),
    }
}

/// Measures expression nesting and set-operation chains; breaks with the error message.
#[derive(Default)]
struct Depth {
    depth: usize,
}

impl Visitor for Depth {
    type Break = String;

    fn pre_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<String> {
        self.depth += 1;
        if self.depth > MAX_EXPR_DEPTH {
            return ControlFlow::Break(format!(
                "statement too complex: expressions nest more than {MAX_EXPR_DEPTH} levels deep \
                 (a long chain of operators, or of nested subqueries); split it up"
            ));
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, _expr: &Expr) -> ControlFlow<String> {
        self.depth -= 1;
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<String> {
        // Set operations chain through `left` / `right` of the body: counted in a loop.
        let mut queries = 0usize;
        let mut stack: Vec<&SetExpr> = vec![&query.body];
        while let Some(s) = stack.pop() {
            match s {
                SetExpr::SetOperation { left, right, .. } => {
                    stack.push(left);
                    stack.push(right);
                }
                _ => queries += 1,
            }
            if queries > MAX_SET_OPERATIONS {
                return ControlFlow::Break(format!(
                    "statement too complex: more than {MAX_SET_OPERATIONS} queries joined by \
                     UNION / INTERSECT / EXCEPT; split it up"
                ));
            }
        }
        ControlFlow::Continue(())
    }
}
