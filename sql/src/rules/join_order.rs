//! Inner-join order chosen by estimated sizes instead of the order of the `FROM` list.
//!
//! DataFusion joins the relations of `FROM a, b, c WHERE …` in the order they are written
//! (its physical planner only picks each join's build side). When a selective relation is
//! written last — TPC-H Q5 filters `region` after joining all of `lineitem` — every earlier
//! join carries rows that are dropped only at the end.
//!
//! [`JoinOrder`], a logical optimizer rule run after DataFusion's own, rewrites a cluster of
//! inner joins when:
//!
//! 1. the cluster (inner joins whose inputs are inner joins, flattened) has at least three
//!    relations and at most [`MAX_RELATIONS`];
//! 2. every equi-join key is an expression over one relation's columns, no join is
//!    null-aware or matches NULL keys, and every relation's size can be estimated (native
//!    tables by their sampled filter estimate, providers reporting row counts, and the
//!    operators above them by simple rules);
//! 3. the best greedy left-deep order (from each relation in turn, add the connected
//!    relation that gives the smallest estimated result) costs less than half of the
//!    written order, the cost being the sum of the estimated intermediate results.
//!
//! Estimates: a join of row sets `R` and `S` on keys `k₁ … kₙ` gives `|R|·|S|·s₁·∜s₂·⁸√s₃…`,
//! each `sᵢ = 1 / max(ndv(R.kᵢ), ndv(S.kᵢ))` ordered most selective first (conditions on
//! correlated keys are damped instead of multiplied); a key's distinct values are those of
//! its table column (a dictionary's entries, an integer's zone-map range) capped by the rows
//! of its side, else its side's rows.
//!
//! The rewritten cluster joins in the chosen order with each key pair and each non-equi
//! condition at the first join where its columns are present, under a projection giving the
//! original columns in their original order. DataFusion's physical planner still picks
//! each join's build side from the scans' statistics.
//!
//! What it must not do: change a query's result or output schema, or touch outer, semi,
//! anti or null-aware joins.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use datafusion::catalog::default_table_source::source_as_provider;
use datafusion::common::tree_node::{Transformed, TreeNodeRecursion};
use datafusion::common::{Column, NullEquality, Result};
use datafusion::logical_expr::utils::split_conjunction_owned;
use datafusion::logical_expr::{
    Expr, Join, JoinConstraint, JoinType, LogicalPlan, Projection, and,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};

use crate::provider::NativeTable;

/// The most relations one cluster may hold (greedy orders from each start: cubic work).
pub const MAX_RELATIONS: usize = 24;

/// The share of rows a filter left above a scan is assumed to keep (DataFusion's default).
const FILTER_SELECTIVITY: f64 = 0.2;

/// A rewrite is kept when it costs less than this share of the written order.
const GAIN: f64 = 0.5;

/// Reorders clusters of inner joins (see the module docs); a fast path, on while the
/// connection's fast paths are.
#[derive(Debug)]
pub struct JoinOrder {
    enabled: Arc<AtomicBool>,
}

impl JoinOrder {
    /// The rule, active while `enabled` holds.
    pub fn new(enabled: Arc<AtomicBool>) -> JoinOrder {
        JoinOrder { enabled }
    }
}

impl OptimizerRule for JoinOrder {
    fn name(&self) -> &str {
        "basalt_join_order"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if !self.enabled.load(Ordering::Relaxed) {
            return Ok(Transformed::no(plan));
        }
        rewrite_plan(plan)
    }
}

fn rewrite_plan(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    // Subqueries too: DataFusion hands this rule only the statement's root, and a join a
    // query spells again in a subquery must come out in the same order to be shared
    // (`share_subplans`).
    plan.transform_down_with_subqueries(|p| {
        if !in_cluster(&p) {
            return Ok(Transformed::no(p));
        }
        let mut cluster = Cluster::default();
        cluster.flatten(&p);
        let mut changed = false;
        // Clusters below the relations (in subqueries, under aggregates) are reordered too.
        for r in &mut cluster.relations {
            let t = rewrite_plan(r.as_ref().clone())?;
            if t.transformed {
                *r = Arc::new(t.data);
                changed = true;
            }
        }
        let rebuilt = match cluster.reorder(&p)? {
            Some(new) => Some(new),
            None if changed => Some(cluster.rebuild_written(&p)?),
            None => None,
        };
        Ok(match rebuilt {
            Some(new) => Transformed::new(new, true, TreeNodeRecursion::Jump),
            None => Transformed::new(p, false, TreeNodeRecursion::Jump),
        })
    })
}

/// Whether `p` is a join the rule may move (condition 2 of the module docs).
fn in_cluster(p: &LogicalPlan) -> bool {
    matches!(p, LogicalPlan::Join(j) if j.join_type == JoinType::Inner
        && j.null_equality == NullEquality::NullEqualsNothing
        && !j.null_aware)
}

/// The join below `p` when `p` only selects columns of it (the projections DataFusion
/// places between joins to drop columns); the cluster sees through them.
fn through_projection(p: &LogicalPlan) -> Option<&LogicalPlan> {
    match p {
        LogicalPlan::Projection(x)
            if in_cluster(&x.input) && x.expr.iter().all(|e| matches!(e, Expr::Column(_))) =>
        {
            Some(&x.input)
        }
        _ => None,
    }
}

/// One equi-join condition between two relations.
#[derive(Debug, Clone)]
struct Edge {
    a: usize,
    b: usize,
    ea: Expr,
    eb: Expr,
}

/// A cluster of inner joins taken apart.
#[derive(Debug, Default)]
struct Cluster {
    relations: Vec<Arc<LogicalPlan>>,
    /// Key pairs as written: `(left, right)` expressions.
    keys: Vec<(Expr, Expr)>,
    /// Non-equi conditions of the joins.
    filters: Vec<Expr>,
}

/// A joined set of relations: which (bit mask) and about how many rows.
#[derive(Debug, Clone, Copy)]
struct Part {
    mask: u64,
    rows: f64,
}

impl Cluster {
    fn flatten(&mut self, p: &LogicalPlan) {
        match p {
            LogicalPlan::Join(j) if in_cluster(p) => {
                self.flatten(&j.left);
                self.flatten(&j.right);
                self.keys.extend(j.on.iter().cloned());
                if let Some(f) = &j.filter {
                    self.filters.extend(split_conjunction_owned(f.clone()));
                }
            }
            other => match through_projection(other) {
                Some(join) => self.flatten(join),
                None => self.relations.push(Arc::new(other.clone())),
            },
        }
    }

    /// The relations (bit mask) whose columns `e` uses.
    fn uses(&self, e: &Expr) -> u64 {
        let mut mask = 0;
        for c in e.column_refs() {
            for (i, r) in self.relations.iter().enumerate() {
                if r.schema().has_column(c) {
                    mask |= 1 << i;
                }
            }
        }
        mask
    }

    /// The key pairs as edges between single relations (`None` when a key spans several).
    fn edges(&self) -> Option<Vec<Edge>> {
        self.keys
            .iter()
            .map(|(l, r)| {
                let (ml, mr) = (self.uses(l), self.uses(r));
                (ml.count_ones() == 1 && mr.count_ones() == 1 && ml != mr).then(|| Edge {
                    a: ml.trailing_zeros() as usize,
                    b: mr.trailing_zeros() as usize,
                    ea: l.clone(),
                    eb: r.clone(),
                })
            })
            .collect()
    }

    /// The cluster in a better order, or `None` (conditions of the module docs).
    fn reorder(&self, original: &LogicalPlan) -> Result<Option<LogicalPlan>> {
        let n = self.relations.len();
        if !(3..=MAX_RELATIONS).contains(&n) {
            return Ok(None);
        }
        let Some(edges) = self.edges() else { return Ok(None) };
        let Some(rows) =
            self.relations.iter().map(|r| estimate_rows(r)).collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        // Distinct keys per edge end, capped by the relation's rows.
        let ndv: Vec<(f64, f64)> = edges
            .iter()
            .map(|e| {
                let d = |rel: usize, x: &Expr| {
                    distinct(&self.relations[rel], x).unwrap_or(rows[rel]).min(rows[rel]).max(1.0)
                };
                (d(e.a, &e.ea), d(e.b, &e.eb))
            })
            .collect();
        let est = Estimator { rows: &rows, edges: &edges, ndv: &ndv };
        let Some(written) = est.written_cost(original, n) else { return Ok(None) };
        let (best, cost) = (0..n)
            .map(|start| est.greedy(start, n))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or((Vec::new(), f64::INFINITY));
        if best.len() != n || !connected(&edges, n) || cost >= written * GAIN {
            return Ok(None);
        }
        self.build(&best, &edges, original).map(Some)
    }

    /// The cluster in its written order (used when only relations below it changed).
    fn rebuild_written(&self, original: &LogicalPlan) -> Result<LogicalPlan> {
        let mut next = self.relations.iter();
        fn walk(
            p: &LogicalPlan,
            next: &mut std::slice::Iter<'_, Arc<LogicalPlan>>,
        ) -> Result<LogicalPlan> {
            match p {
                LogicalPlan::Join(j) if in_cluster(p) => {
                    let left = walk(&j.left, next)?;
                    let right = walk(&j.right, next)?;
                    Ok(LogicalPlan::Join(Join::try_new(
                        Arc::new(left),
                        Arc::new(right),
                        j.on.clone(),
                        j.filter.clone(),
                        j.join_type,
                        j.join_constraint,
                        j.null_equality,
                        j.null_aware,
                    )?))
                }
                LogicalPlan::Projection(x) if through_projection(p).is_some() => {
                    let input = walk(&x.input, next)?;
                    Ok(LogicalPlan::Projection(Projection::try_new(
                        x.expr.clone(),
                        Arc::new(input),
                    )?))
                }
                other => Ok(next.next().map_or_else(|| other.clone(), |r| r.as_ref().clone())),
            }
        }
        walk(original, &mut next)
    }

    /// Left-deep joins in `order`, each key and condition at the first join that has its
    /// columns, under a projection to `original`'s columns.
    fn build(
        &self,
        order: &[usize],
        edges: &[Edge],
        original: &LogicalPlan,
    ) -> Result<LogicalPlan> {
        let mut placed_keys = vec![false; edges.len()];
        let filter_masks: Vec<u64> = self.filters.iter().map(|f| self.uses(f)).collect();
        let mut placed_filters = vec![false; self.filters.len()];
        let mut plan = self.relations[order[0]].clone();
        let mut mask = 1u64 << order[0];
        for &r in &order[1..] {
            let bit = 1u64 << r;
            let mut on = Vec::new();
            for (i, e) in edges.iter().enumerate() {
                if placed_keys[i] {
                    continue;
                }
                if e.b == r && mask & (1 << e.a) != 0 {
                    on.push((e.ea.clone(), e.eb.clone()));
                } else if e.a == r && mask & (1 << e.b) != 0 {
                    on.push((e.eb.clone(), e.ea.clone()));
                } else {
                    continue;
                }
                placed_keys[i] = true;
            }
            mask |= bit;
            let mut conditions = Vec::new();
            for (i, f) in self.filters.iter().enumerate() {
                if !placed_filters[i] && filter_masks[i] & !mask == 0 {
                    placed_filters[i] = true;
                    conditions.push(f.clone());
                }
            }
            plan = Arc::new(LogicalPlan::Join(Join::try_new(
                plan,
                self.relations[r].clone(),
                on,
                conditions.into_iter().reduce(and),
                JoinType::Inner,
                JoinConstraint::On,
                NullEquality::NullEqualsNothing,
                false,
            )?));
        }
        let columns = original.schema().columns().into_iter().map(Expr::Column).collect();
        Ok(LogicalPlan::Projection(Projection::try_new(columns, plan)?))
    }
}

/// Whether the key edges connect all `n` relations (a cluster with a cross join — before
/// DataFusion has turned a `WHERE` into join keys, or as written — keeps its order).
fn connected(edges: &[Edge], n: usize) -> bool {
    let mut reached = 1u64;
    loop {
        let before = reached;
        for e in edges {
            if reached & (1 << e.a) != 0 || reached & (1 << e.b) != 0 {
                reached |= (1 << e.a) | (1 << e.b);
            }
        }
        if reached == before {
            return reached.count_ones() as usize == n;
        }
    }
}

/// Size estimates over one cluster.
struct Estimator<'a> {
    rows: &'a [f64],
    edges: &'a [Edge],
    /// Per edge, the distinct keys on its `a` and `b` ends.
    ndv: &'a [(f64, f64)],
}

impl Estimator<'_> {
    /// About how many rows joining `x` and `y` gives, and whether a key connects them.
    fn join(&self, x: Part, y: Part) -> (Part, bool) {
        let mut sel: Vec<f64> = Vec::new();
        for (e, &(da, db)) in self.edges.iter().zip(self.ndv) {
            let (ia, ib) = (x.mask & (1 << e.a) != 0, y.mask & (1 << e.b) != 0);
            let (ja, jb) = (y.mask & (1 << e.a) != 0, x.mask & (1 << e.b) != 0);
            let (dx, dy) = if ia && ib {
                (da.min(x.rows), db.min(y.rows))
            } else if ja && jb {
                (db.min(x.rows), da.min(y.rows))
            } else {
                continue;
            };
            sel.push(1.0 / dx.max(dy).max(1.0));
        }
        sel.sort_by(f64::total_cmp);
        let mut s = 1.0;
        for (i, v) in sel.iter().enumerate() {
            // 1, ¼, ⅛ …: a second key is often part of a composite key the first nearly
            // determines (a line's part and supplier), so it counts little.
            let damping = if i == 0 { 1.0 } else { 1.0 / f64::from(2u32 << i.min(16)) };
            s *= v.powf(damping);
        }
        (Part { mask: x.mask | y.mask, rows: (x.rows * y.rows * s).max(1.0) }, !sel.is_empty())
    }

    fn leaf(&self, i: usize) -> Part {
        Part { mask: 1 << i, rows: self.rows[i] }
    }

    /// A left-deep order from `start`, each step the connected relation giving the fewest
    /// rows (a cross join only when none is connected), and its cost.
    fn greedy(&self, start: usize, n: usize) -> (Vec<usize>, f64) {
        let mut order = vec![start];
        let mut acc = self.leaf(start);
        let mut cost = 0.0;
        while order.len() < n {
            let mut best: Option<(usize, Part, bool)> = None;
            for r in (0..n).filter(|r| acc.mask & (1 << r) == 0) {
                let (p, connected) = self.join(acc, self.leaf(r));
                let better = match &best {
                    None => true,
                    Some((_, b, bc)) => (connected && !bc) || (connected == *bc && p.rows < b.rows),
                };
                if better {
                    best = Some((r, p, connected));
                }
            }
            let Some((r, p, _)) = best else { break };
            order.push(r);
            if order.len() < n {
                cost += p.rows;
            }
            acc = p;
        }
        (order, cost)
    }

    /// The cost of the written tree (its intermediate results), `None` if a relation is
    /// missing from it.
    fn written_cost(&self, original: &LogicalPlan, n: usize) -> Option<f64> {
        let mut next = 0usize;
        let mut cost = 0.0;
        fn walk(
            est: &Estimator<'_>,
            p: &LogicalPlan,
            next: &mut usize,
            cost: &mut f64,
            n: usize,
        ) -> Option<Part> {
            match p {
                LogicalPlan::Join(j) if in_cluster(p) => {
                    let l = walk(est, &j.left, next, cost, n)?;
                    let r = walk(est, &j.right, next, cost, n)?;
                    let (part, _) = est.join(l, r);
                    if part.mask.count_ones() as usize != n {
                        *cost += part.rows;
                    }
                    Some(part)
                }
                LogicalPlan::Projection(x) if through_projection(p).is_some() => {
                    walk(est, &x.input, next, cost, n)
                }
                _ => {
                    let i = *next;
                    *next += 1;
                    (i < n).then(|| est.leaf(i))
                }
            }
        }
        walk(self, original, &mut next, &mut cost, n)?;
        Some(cost)
    }
}

/// About how many rows `p` returns (`None` for operators the rule does not estimate).
fn estimate_rows(p: &LogicalPlan) -> Option<f64> {
    Some(match p {
        LogicalPlan::TableScan(s) => {
            let provider = source_as_provider(&s.source).ok()?;
            let rows = match provider.downcast_ref::<NativeTable>() {
                Some(t) => t.estimate_rows(&s.filters)?,
                None => {
                    let n = *provider.statistics()?.num_rows.get_value()? as f64;
                    if s.filters.is_empty() { n } else { n * FILTER_SELECTIVITY }
                }
            };
            s.fetch.map_or(rows, |f| rows.min(f as f64))
        }
        LogicalPlan::Filter(f) => estimate_rows(&f.input)? * FILTER_SELECTIVITY,
        LogicalPlan::Projection(x) => estimate_rows(&x.input)?,
        LogicalPlan::SubqueryAlias(x) => estimate_rows(&x.input)?,
        LogicalPlan::Sort(x) => {
            let n = estimate_rows(&x.input)?;
            x.fetch.map_or(n, |f| n.min(f as f64))
        }
        LogicalPlan::Limit(x) => {
            let n = estimate_rows(&x.input)?;
            match x.get_fetch_type().ok()? {
                datafusion::logical_expr::logical_plan::FetchType::Literal(Some(f)) => {
                    n.min(f as f64)
                }
                _ => n,
            }
        }
        LogicalPlan::Aggregate(a) if a.group_expr.is_empty() => 1.0,
        LogicalPlan::Aggregate(a) => {
            let input = estimate_rows(&a.input)?;
            // Groups: the product of the keys' distinct values, at most the input's rows.
            let mut groups = 1.0f64;
            for g in &a.group_expr {
                groups *= distinct(&a.input, g).unwrap_or(input);
            }
            groups.min(input).max(1.0)
        }
        LogicalPlan::Distinct(d) => estimate_rows(d.input())?,
        LogicalPlan::Join(j) => {
            let (l, r) = (estimate_rows(&j.left)?, estimate_rows(&j.right)?);
            match j.join_type {
                JoinType::LeftSemi | JoinType::LeftAnti | JoinType::LeftMark => l,
                JoinType::RightSemi | JoinType::RightAnti | JoinType::RightMark => r,
                _ => l.max(r),
            }
        }
        LogicalPlan::Union(u) => u.inputs.iter().map(|i| estimate_rows(i)).sum::<Option<f64>>()?,
        LogicalPlan::Values(v) => v.values.len() as f64,
        LogicalPlan::EmptyRelation(e) => f64::from(u8::from(e.produce_one_row)),
        _ => return None,
    })
}

/// About how many distinct values `e` takes over the rows of `p` before `p`'s own
/// filters, when `e` is a column that leads to a native table's column.
fn distinct(p: &LogicalPlan, e: &Expr) -> Option<f64> {
    let Expr::Column(c) = unalias(e) else { return None };
    column_distinct(p, c)
}

fn unalias(e: &Expr) -> &Expr {
    match e {
        Expr::Alias(a) => unalias(&a.expr),
        e => e,
    }
}

fn column_distinct(p: &LogicalPlan, c: &Column) -> Option<f64> {
    let index = p.schema().index_of_column(c).ok()?;
    match p {
        LogicalPlan::TableScan(s) => {
            let provider = source_as_provider(&s.source).ok()?;
            let table = provider.downcast_ref::<NativeTable>()?;
            let full = match &s.projection {
                Some(proj) => *proj.get(index)?,
                None => index,
            };
            table.estimate_distinct(full)
        }
        LogicalPlan::Projection(x) => distinct(&x.input, x.expr.get(index)?),
        LogicalPlan::SubqueryAlias(x) => {
            let inner = x.input.schema().columns().into_iter().nth(index)?;
            column_distinct(&x.input, &inner)
        }
        LogicalPlan::Filter(x) => column_distinct(&x.input, c),
        LogicalPlan::Sort(x) => column_distinct(&x.input, c),
        LogicalPlan::Limit(x) => column_distinct(&x.input, c),
        LogicalPlan::Aggregate(a) if a.group_expr.len() == 1 && index == 0 => estimate_rows(p),
        LogicalPlan::Aggregate(a) if index < a.group_expr.len() => {
            distinct(&a.input, &a.group_expr[index])
        }
        LogicalPlan::Join(j) => {
            if j.left.schema().has_column(c) {
                column_distinct(&j.left, c)
            } else {
                column_distinct(&j.right, c)
            }
        }
        _ => None,
    }
}
