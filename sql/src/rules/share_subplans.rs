//! Subplans a statement repeats, computed once.
//!
//! A query that names a CTE twice (TPC-H Q15's `revenue0`, in the `FROM` list and in a
//! scalar subquery) or spells one join twice (Q11's outer query and its `HAVING`
//! subquery) is planned by DataFusion as independent copies, each reading and joining
//! its tables again.
//!
//! [`ShareSubplans`], a logical optimizer rule run after DataFusion's own and before
//! [`JoinOrder`](super::join_order::JoinOrder) (which would order copies spelled alike
//! differently when they keep different columns; it then orders the shared plan once),
//! replaces the copies of a subplan by one shared computation when:
//!
//! 1. the subplan is a join or an aggregate (a bare scan or filter is not shared: keeping a
//!    table's rows costs more than reading them again);
//! 2. it appears at least twice in the statement, subqueries included, the copies equal up
//!    to the columns each keeps (projections and scans' column lists may differ: the
//!    shared plan keeps their union, and each place projects its own columns);
//! 3. it calls no volatile function and refers to no outer query's column;
//! 4. the statement holds no recursive CTE (a recursive term runs again per iteration)
//!    and writes nothing.
//!
//! Each place becomes a projection of its columns over a [`SharedNode`]; the
//! [`SharedPlanner`] turns the nodes of one group into [`SharedExec`]s with one state when
//! their inputs are still equal at physical planning (a later optimizer pass may change
//! one copy; that place then runs alone). How the result is kept and when sharing gives up
//! is [`SharedExec`]'s. A fast path, off with the connection's fast paths.
//!
//! What it must not do: change a query's result or output schema.

use std::collections::HashMap;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchemaRef, Result};
use datafusion::execution::context::QueryPlanner;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{
    Aggregate, Expr, Extension, Filter, Join, LogicalPlan, Projection, SubqueryAlias,
    TableScanBuilder, UserDefinedLogicalNode, UserDefinedLogicalNodeCore,
};
use datafusion::optimizer::{OptimizerConfig, OptimizerRule};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_planner::{DefaultPhysicalPlanner, ExtensionPlanner, PhysicalPlanner};

use crate::exec::shared::{Shared, SharedExec};

/// Shares repeated subplans (see the module docs); a fast path, on while the connection's
/// fast paths are.
#[derive(Debug)]
pub struct ShareSubplans {
    enabled: Arc<AtomicBool>,
}

impl ShareSubplans {
    /// The rule, active while `enabled` holds.
    pub fn new(enabled: Arc<AtomicBool>) -> ShareSubplans {
        ShareSubplans { enabled }
    }
}

impl OptimizerRule for ShareSubplans {
    fn name(&self) -> &str {
        "basalt_share_subplans"
    }

    fn rewrite(
        &self,
        plan: LogicalPlan,
        _config: &dyn OptimizerConfig,
    ) -> Result<Transformed<LogicalPlan>> {
        if !self.enabled.load(Ordering::Relaxed) || !eligible_statement(&plan)? {
            return Ok(Transformed::no(plan));
        }
        share(plan)
    }
}

/// Condition 4: no recursive CTE, no write.
fn eligible_statement(plan: &LogicalPlan) -> Result<bool> {
    let mut ok = true;
    plan.apply_with_subqueries(|p| {
        if matches!(p, LogicalPlan::RecursiveQuery(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_))
        {
            ok = false;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    Ok(ok)
}

fn share(plan: LogicalPlan) -> Result<Transformed<LogicalPlan>> {
    // How often each shape occurs among the candidates.
    let mut counts: HashMap<u64, usize> = HashMap::new();
    plan.apply_with_subqueries(|p| {
        if is_shared(p) {
            return Ok(TreeNodeRecursion::Jump);
        }
        if let Some(s) = candidate_shape(p) {
            *counts.entry(s).or_default() += 1;
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    if counts.values().all(|&n| n < 2) {
        return Ok(Transformed::no(plan));
    }
    // The outermost places of each repeated shape (a place's inside is shared with it).
    let mut places: HashMap<u64, Vec<LogicalPlan>> = HashMap::new();
    plan.apply_with_subqueries(|p| {
        if is_shared(p) {
            return Ok(TreeNodeRecursion::Jump);
        }
        match candidate_shape(p) {
            Some(s) if counts.get(&s).is_some_and(|&n| n >= 2) => {
                places.entry(s).or_default().push(p.clone());
                Ok(TreeNodeRecursion::Jump)
            }
            _ => Ok(TreeNodeRecursion::Continue),
        }
    })?;
    let mut groups: HashMap<u64, Arc<Group>> = HashMap::new();
    for (s, ps) in places {
        if ps.len() < 2 {
            continue;
        }
        let mut merged = ps[0].clone();
        let mut ok = true;
        for p in &ps[1..] {
            match merge(&merged, p) {
                Some(m) => merged = m,
                None => {
                    ok = false;
                    break;
                }
            }
        }
        if ok {
            groups.insert(s, Group::new(merged));
        }
    }
    if groups.is_empty() {
        return Ok(Transformed::no(plan));
    }
    plan.transform_down_with_subqueries(|p| {
        if is_shared(&p) {
            return Ok(Transformed::new(p, false, TreeNodeRecursion::Jump));
        }
        let Some(group) = candidate_shape(&p).and_then(|s| groups.get(&s)) else {
            return Ok(Transformed::no(p));
        };
        match place(&p, group)? {
            Some(new) => Ok(Transformed::new(new, true, TreeNodeRecursion::Jump)),
            None => Ok(Transformed::no(p)),
        }
    })
}

/// `p` read from the group's shared plan: a projection of `p`'s columns over a
/// [`SharedNode`], or `None` when the shared plan does not hold `p` (it is not one of the
/// places the group was merged from) or would give other columns.
fn place(p: &LogicalPlan, group: &Arc<Group>) -> Result<Option<LogicalPlan>> {
    if merge(&group.plan, p).as_ref() != Some(&group.plan) {
        return Ok(None);
    }
    let node = LogicalPlan::Extension(Extension {
        node: Arc::new(SharedNode { group: Arc::clone(group) }),
    });
    let columns = p.schema().columns().into_iter().map(Expr::Column).collect();
    let Ok(projection) = Projection::try_new(columns, Arc::new(node)) else {
        return Ok(None);
    };
    let same = projection.schema.iter().zip(p.schema().iter()).all(|((q1, f1), (q2, f2))| {
        q1 == q2 && f1.name() == f2.name() && f1.data_type() == f2.data_type()
    }) && projection.schema.fields().len() == p.schema().fields().len();
    if !same {
        return Ok(None);
    }
    group.places.fetch_add(1, Ordering::Relaxed);
    Ok(Some(LogicalPlan::Projection(projection)))
}

fn is_shared(p: &LogicalPlan) -> bool {
    matches!(p, LogicalPlan::Extension(e) if e.node.as_any().is::<SharedNode>())
}

/// The shape of `p` when it may be shared (conditions 1 and 3): a hash of its structure
/// that leaves out which columns projections and scans keep.
fn candidate_shape(p: &LogicalPlan) -> Option<u64> {
    if !matches!(p, LogicalPlan::Join(_) | LogicalPlan::Aggregate(_)) {
        return None;
    }
    let mut pure = true;
    p.apply(|n| {
        n.apply_expressions(|e| {
            if e.is_volatile() || e.contains_outer() {
                pure = false;
                return Ok(TreeNodeRecursion::Stop);
            }
            Ok(TreeNodeRecursion::Continue)
        })?;
        Ok(if pure { TreeNodeRecursion::Continue } else { TreeNodeRecursion::Stop })
    })
    .ok()?;
    if !pure {
        return None;
    }
    let mut h = DefaultHasher::new();
    shape(p, &mut h);
    Some(h.finish())
}

fn shape(p: &LogicalPlan, h: &mut DefaultHasher) {
    std::mem::discriminant(p).hash(h);
    match p {
        LogicalPlan::Projection(x) => shape(&x.input, h),
        LogicalPlan::TableScan(x) => {
            x.table_name.hash(h);
            x.filters.hash(h);
            x.fetch.hash(h);
        }
        LogicalPlan::Join(x) => {
            x.on.hash(h);
            x.filter.hash(h);
            x.join_type.hash(h);
            shape(&x.left, h);
            shape(&x.right, h);
        }
        LogicalPlan::Filter(x) => {
            x.predicate.hash(h);
            shape(&x.input, h);
        }
        LogicalPlan::Aggregate(x) => {
            x.group_expr.hash(h);
            shape(&x.input, h);
        }
        LogicalPlan::SubqueryAlias(x) => {
            x.alias.hash(h);
            shape(&x.input, h);
        }
        other => other.hash(h),
    }
}

/// One plan computing everything `a` and `b` do (their columns' union), when they differ
/// only in the columns projections, scans and aggregates keep; `None` otherwise.
fn merge(a: &LogicalPlan, b: &LogicalPlan) -> Option<LogicalPlan> {
    let plan = match (a, b) {
        (LogicalPlan::Projection(x), LogicalPlan::Projection(y)) => {
            let input = merge(&x.input, &y.input)?;
            LogicalPlan::Projection(
                Projection::try_new(union(&x.expr, &y.expr), Arc::new(input)).ok()?,
            )
        }
        (LogicalPlan::TableScan(x), LogicalPlan::TableScan(y))
            if x.table_name == y.table_name && x.filters == y.filters && x.fetch == y.fetch =>
        {
            let projection = match (&x.projection, &y.projection) {
                (Some(p), Some(q)) => {
                    let mut all: Vec<usize> = p.iter().chain(q).copied().collect();
                    all.sort_unstable();
                    all.dedup();
                    Some(all)
                }
                _ => None,
            };
            LogicalPlan::TableScan(
                TableScanBuilder::new(x.table_name.clone(), Arc::clone(&x.source))
                    .with_projection(projection)
                    .with_filters(x.filters.clone())
                    .with_fetch(x.fetch)
                    .with_statistics_requests(
                        x.statistics_requests.union(&y.statistics_requests).cloned().collect(),
                    )
                    .build()
                    .ok()?,
            )
        }
        (LogicalPlan::Join(x), LogicalPlan::Join(y))
            if x.on == y.on
                && x.filter == y.filter
                && x.join_type == y.join_type
                && x.join_constraint == y.join_constraint
                && x.null_equality == y.null_equality
                && x.null_aware == y.null_aware =>
        {
            let left = merge(&x.left, &y.left)?;
            let right = merge(&x.right, &y.right)?;
            LogicalPlan::Join(
                Join::try_new(
                    Arc::new(left),
                    Arc::new(right),
                    x.on.clone(),
                    x.filter.clone(),
                    x.join_type,
                    x.join_constraint,
                    x.null_equality,
                    x.null_aware,
                )
                .ok()?,
            )
        }
        (LogicalPlan::Filter(x), LogicalPlan::Filter(y)) if x.predicate == y.predicate => {
            let input = merge(&x.input, &y.input)?;
            LogicalPlan::Filter(Filter::try_new(x.predicate.clone(), Arc::new(input)).ok()?)
        }
        (LogicalPlan::Aggregate(x), LogicalPlan::Aggregate(y)) if x.group_expr == y.group_expr => {
            let input = merge(&x.input, &y.input)?;
            let aggr = union(&x.aggr_expr, &y.aggr_expr);
            LogicalPlan::Aggregate(
                Aggregate::try_new(Arc::new(input), x.group_expr.clone(), aggr).ok()?,
            )
        }
        (LogicalPlan::SubqueryAlias(x), LogicalPlan::SubqueryAlias(y)) if x.alias == y.alias => {
            let input = merge(&x.input, &y.input)?;
            LogicalPlan::SubqueryAlias(
                SubqueryAlias::try_new(Arc::new(input), x.alias.clone()).ok()?,
            )
        }
        (a, b) if a == b => a.clone(),
        _ => return None,
    };
    // Every column of both must be in the merged plan, with its type.
    let holds = |p: &LogicalPlan| {
        p.schema().iter().all(|(q, f)| {
            plan.schema().field_with_name(q, f.name()).is_ok_and(|m| m.data_type() == f.data_type())
        })
    };
    (holds(a) && holds(b)).then_some(plan)
}

/// `a`'s expressions, then those of `b` that `a` lacks.
fn union(a: &[Expr], b: &[Expr]) -> Vec<Expr> {
    let mut all = a.to_vec();
    for e in b {
        if !all.contains(e) {
            all.push(e.clone());
        }
    }
    all
}

/// The first place's input as planned and the state of the group's execs.
type Planned = Option<(LogicalPlan, Arc<Shared>)>;

/// The places of one shared subplan: the merged plan and, once planned, the state its
/// execs share.
struct Group {
    id: u64,
    plan: LogicalPlan,
    /// The places the rule made (kept by the copies an optimizer pass rewrites).
    places: Arc<AtomicUsize>,
    /// The first place's input as planned, with the state given to every place whose
    /// input equals it (kept by the copies an optimizer pass rewrites).
    planned: Arc<Mutex<Planned>>,
}

impl Group {
    fn new(plan: LogicalPlan) -> Arc<Group> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Arc::new(Group {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            plan,
            places: Arc::default(),
            planned: Arc::default(),
        })
    }
}

/// A place of a shared subplan in a logical plan (see the module docs).
#[derive(Clone)]
pub struct SharedNode {
    group: Arc<Group>,
}

impl fmt::Debug for SharedNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedNode({})", self.group.id)
    }
}

impl PartialEq for SharedNode {
    fn eq(&self, other: &Self) -> bool {
        self.group.id == other.group.id && self.group.plan == other.group.plan
    }
}

impl Eq for SharedNode {}

impl Hash for SharedNode {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.group.id.hash(state);
        self.group.plan.hash(state);
    }
}

impl PartialOrd for SharedNode {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        match self.group.id.cmp(&other.group.id) {
            std::cmp::Ordering::Equal => self.group.plan.partial_cmp(&other.group.plan),
            o => Some(o),
        }
    }
}

impl UserDefinedLogicalNodeCore for SharedNode {
    fn name(&self) -> &str {
        "BasaltShared"
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.group.plan]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.group.plan.schema()
    }

    fn expressions(&self) -> Vec<Expr> {
        Vec::new()
    }

    fn fmt_for_explain(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let places = self.group.places.load(Ordering::Relaxed);
        write!(f, "BasaltShared: group={}, places={places}", self.group.id)
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<Expr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        let input = inputs.pop().ok_or_else(|| {
            datafusion::error::DataFusionError::Internal("BasaltShared takes one input".into())
        })?;
        if input == self.group.plan {
            return Ok(self.clone());
        }
        // A rewritten copy stays in the group; the planner shares it only if every place's
        // input was rewritten alike.
        Ok(SharedNode {
            group: Arc::new(Group {
                id: self.group.id,
                plan: input,
                places: Arc::clone(&self.group.places),
                planned: Arc::clone(&self.group.planned),
            }),
        })
    }
}

/// Plans [`SharedNode`]s as [`SharedExec`]s (see the module docs).
#[derive(Debug, Default)]
pub struct SharedPlanner;

#[async_trait]
impl ExtensionPlanner for SharedPlanner {
    async fn plan_extension(
        &self,
        _planner: &dyn PhysicalPlanner,
        node: &dyn UserDefinedLogicalNode,
        logical_inputs: &[&LogicalPlan],
        physical_inputs: &[Arc<dyn ExecutionPlan>],
        _session_state: &dyn Session,
        _planning_ctx: &PhysicalPlanningContext,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(n) = node.as_any().downcast_ref::<SharedNode>() else { return Ok(None) };
        let (Some(input), Some(logical)) = (physical_inputs.first(), logical_inputs.first()) else {
            return Ok(None);
        };
        let shared = {
            let mut planned = n.group.planned.lock().unwrap_or_else(|e| e.into_inner());
            match &*planned {
                Some((first, shared)) => (first == *logical).then(|| Arc::clone(shared)),
                None => {
                    let shared = Shared::new(n.group.places.load(Ordering::Relaxed));
                    *planned = Some(((*logical).clone(), Arc::clone(&shared)));
                    Some(shared)
                }
            }
        };
        Ok(Some(Arc::new(SharedExec::new(Arc::clone(input), shared))))
    }
}

/// The session's query planner: DataFusion's, with [`SharedPlanner`] for Basalt's nodes.
#[derive(Debug, Default)]
pub struct BasaltQueryPlanner;

#[async_trait]
impl QueryPlanner for BasaltQueryPlanner {
    async fn create_physical_plan(
        &self,
        logical_plan: &LogicalPlan,
        session_state: &dyn Session,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        DefaultPhysicalPlanner::with_extension_planners(vec![Arc::new(SharedPlanner)])
            .create_physical_plan(logical_plan, session_state)
            .await
    }
}
