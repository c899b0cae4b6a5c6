//! Subqueries DataFusion cannot plan, run as nested loops: each subquery expression
//! becomes a call that runs the subquery once per distinct combination of the outer values
//! it reads, with those values as constants.
//!
//! DataFusion decorrelates the common shapes (equality correlation under an aggregate,
//! `EXISTS` / `IN` in a filter) and Basalt's own rules a few more; others — a correlated
//! subquery with `ORDER BY … LIMIT` and no aggregate, `EXISTS` or `IN` as a value in a
//! `SELECT` list, a subquery in `ORDER BY`, outer references in an aggregate's argument —
//! fail to plan. Used when all of these hold:
//!
//! 1. the statement failed to plan with an error about a subquery (see
//!    [`is_unsupported_subquery`]); the connection then plans it once more with this rule
//!    switched on (the flag given to [`SubqueryFallback::new`]);
//! 2. the expression is a scalar subquery, `[NOT] EXISTS` or `x [NOT] IN (subquery)`, in
//!    any plan node.
//!
//! Every such expression of the statement is replaced (the decorrelatable ones too, so the
//! statement plans). The call's arguments are the outer columns the subquery reads (at any
//! depth) and, for `IN`, `x`. For each row it looks up the subquery's answer for those
//! values, running the subquery — outer references replaced by the values, planned and run
//! on a thread of its own, against the view the statement pinned — when they are new: a
//! scalar subquery gives its one value (NULL for no row; more than one row is an error), an
//! `EXISTS` whether it has a row, an `IN` SQL's three-valued answer (`x` NULL: NULL unless
//! the subquery is empty; found: true; else NULL if the subquery holds a NULL, false
//! otherwise). Answers are kept for the statement.
//!
//! What this module must not do: change the answer of a statement DataFusion plans (it
//! acts only on the second attempt, after a planning error).

use std::collections::{HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use datafusion::arrow::array::{ArrayRef, RecordBatch, new_empty_array};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DataFusionError, Result, ScalarValue};
use datafusion::execution::SessionState;
use datafusion::logical_expr::expr::{Exists, InSubquery, ScalarFunction};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Subquery, Volatility,
};
use datafusion::optimizer::analyzer::AnalyzerRule;
use parking_lot::{Mutex, RwLock};

use crate::binding::Binding;

/// The rule (see the module docs).
#[derive(Debug)]
pub struct SubqueryFallback {
    /// On while a statement is planned (and run) a second time.
    enabled: Arc<AtomicBool>,
    /// The connection's session state, for running subqueries (set once it is built).
    state: Arc<Mutex<Option<Weak<RwLock<SessionState>>>>>,
    binding: Arc<Binding>,
}

impl SubqueryFallback {
    /// The rule of a connection, acting while `enabled` is on (the connection turns it on
    /// for a second attempt).
    pub fn new(binding: Arc<Binding>, enabled: Arc<AtomicBool>) -> SubqueryFallback {
        SubqueryFallback { enabled, state: Arc::default(), binding }
    }

    /// Where the rule finds the connection's state, to set once the context exists.
    pub fn state_slot(&self) -> Arc<Mutex<Option<Weak<RwLock<SessionState>>>>> {
        self.state.clone()
    }
}

/// Whether planning `plan` failed with an error the fallback can avoid: DataFusion could
/// not plan a subquery (correlated, or in a place it does not take subqueries), or its
/// decorrelation of a plan holding subqueries lost a column (a schema or internal error:
/// the statement planned before that step, so its names are right).
pub fn is_unsupported_subquery(message: &str, plan: &LogicalPlan) -> bool {
    let m = message.to_ascii_lowercase();
    let refused = m.contains("subquery")
        && (m.contains("not support")
            || m.contains("not implemented")
            || m.contains("correlated")
            || m.contains("must be aggregated"));
    (refused || m.contains("schema error") || m.contains("internal error")) && has_subquery(plan)
}

impl AnalyzerRule for SubqueryFallback {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        if !self.enabled.load(Ordering::Acquire) || !has_subquery(&plan) {
            return Ok(plan);
        }
        let Some(state) = self.state.lock().as_ref().and_then(Weak::upgrade) else {
            return Ok(plan);
        };
        let state = state.read().clone();
        let view = self.binding.view().map_err(crate::binding::storage_err)?;
        let env = Arc::new(Env {
            state,
            binding: self.binding.clone(),
            view,
            enabled: self.enabled.clone(),
        });
        plan.transform_up(|node| {
            let schema = merged_input_schema(&node);
            // Output names stay those of the subquery expressions.
            let names = NamePreserver::new(&node);
            node.map_expressions(|e| {
                let saved = names.save(&e);
                let t = e.transform_up(|e| replace(e, &schema, &env))?;
                Ok(if t.transformed { t.update_data(|e| saved.restore(e)) } else { t })
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "basalt_subquery_fallback"
    }
}

/// What a fallback call needs to run its subquery.
#[derive(Debug)]
struct Env {
    state: SessionState,
    binding: Arc<Binding>,
    view: basalt_storage::ReadView,
    enabled: Arc<AtomicBool>,
}

/// Whether any expression of the plan (not counting subquery plans) holds a subquery.
fn has_subquery(plan: &LogicalPlan) -> bool {
    let mut found = false;
    let _ = plan.apply(|node| {
        let _ = node.apply_expressions(|e| {
            found |= e.exists(|e| {
                Ok(matches!(e, Expr::ScalarSubquery(_) | Expr::Exists(_) | Expr::InSubquery(_)))
            })?;
            Ok(if found { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
        });
        Ok(if found { TreeNodeRecursion::Stop } else { TreeNodeRecursion::Continue })
    });
    found
}

/// The columns a node's expressions may name: its inputs' (a leaf's own schema).
fn merged_input_schema(node: &LogicalPlan) -> DFSchema {
    let mut schema = DFSchema::empty();
    let inputs = node.inputs();
    if inputs.is_empty() {
        return node.schema().as_ref().clone();
    }
    for i in inputs {
        schema.merge(i.schema());
    }
    schema
}

/// What a call answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Scalar,
    Exists { negated: bool },
    In { negated: bool },
}

fn replace(e: Expr, schema: &DFSchema, env: &Arc<Env>) -> Result<Transformed<Expr>> {
    let (kind, subquery, x) = match e {
        Expr::ScalarSubquery(s) => (Kind::Scalar, s, None),
        Expr::Exists(Exists { subquery, negated }) => (Kind::Exists { negated }, subquery, None),
        Expr::InSubquery(InSubquery { expr, subquery, negated }) => {
            (Kind::In { negated }, subquery, Some(*expr))
        }
        e => return Ok(Transformed::no(e)),
    };
    let outer: Vec<(Column, DataType)> = outer_columns(&subquery.subquery)
        .into_iter()
        .filter(|(c, _)| schema.has_column(c))
        .collect();
    let ret = match kind {
        Kind::Scalar => subquery.subquery.schema().field(0).data_type().clone(),
        _ => DataType::Boolean,
    };
    let mut args: Vec<Expr> = outer.iter().map(|(c, _)| Expr::Column(c.clone())).collect();
    args.extend(x);
    let signature = if args.is_empty() {
        Signature::nullary(Volatility::Volatile)
    } else {
        Signature::any(args.len(), Volatility::Volatile)
    };
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let call = SubqueryCall {
        id,
        name: format!("subquery_{id}"),
        kind,
        plan: subquery.subquery.as_ref().clone(),
        outer,
        ret,
        signature,
        env: env.clone(),
        answers: Mutex::default(),
    };
    let f = Arc::new(ScalarUDF::from(call));
    Ok(Transformed::yes(Expr::ScalarFunction(ScalarFunction::new_udf(f, args))))
}

/// The outer columns `plan` reads, at any depth of its own subqueries, with their types.
fn outer_columns(plan: &LogicalPlan) -> Vec<(Column, DataType)> {
    let mut out: Vec<(Column, DataType)> = Vec::new();
    let _ = plan.apply_with_subqueries(|node| {
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::OuterReferenceColumn(f, c) = e
                    && !out.iter().any(|(o, _)| o == c)
                {
                    out.push((c.clone(), f.data_type().clone()));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    out
}

/// `plan` with the outer references in `values` replaced by constants, at every depth.
fn substitute(plan: LogicalPlan, values: &HashMap<Column, ScalarValue>) -> Result<LogicalPlan> {
    plan.transform_up(|node| {
        // Names stay: the nodes above refer to columns by them.
        let names = NamePreserver::new(&node);
        node.map_expressions(|e| {
            let saved = names.save(&e);
            let t = e.transform_up(|e| substitute_expr(e, values))?;
            Ok(if t.transformed { t.update_data(|e| saved.restore(e)) } else { t })
        })
    })
    .map(|t| t.data)
}

fn substitute_expr(e: Expr, values: &HashMap<Column, ScalarValue>) -> Result<Transformed<Expr>> {
    let sub = |s: Subquery| -> Result<Subquery> {
        let plan = substitute(s.subquery.as_ref().clone(), values)?;
        let outer_ref_columns = s
            .outer_ref_columns
            .into_iter()
            .filter(|e| !matches!(e, Expr::OuterReferenceColumn(_, c) if values.contains_key(c)))
            .collect();
        Ok(Subquery { subquery: Arc::new(plan), outer_ref_columns, spans: s.spans })
    };
    Ok(match e {
        Expr::OuterReferenceColumn(f, c) => match values.get(&c) {
            Some(v) => Transformed::yes(Expr::Literal(v.cast_to(f.data_type())?, None)),
            None => Transformed::no(Expr::OuterReferenceColumn(f, c)),
        },
        Expr::ScalarSubquery(s) => Transformed::yes(Expr::ScalarSubquery(sub(s)?)),
        Expr::Exists(Exists { subquery, negated }) => {
            Transformed::yes(Expr::Exists(Exists { subquery: sub(subquery)?, negated }))
        }
        Expr::InSubquery(InSubquery { expr, subquery, negated }) => {
            Transformed::yes(Expr::InSubquery(InSubquery {
                expr,
                subquery: sub(subquery)?,
                negated,
            }))
        }
        e => Transformed::no(e),
    })
}

/// A subquery's answer for one combination of outer values.
#[derive(Debug, Clone)]
enum Answer {
    Value(ScalarValue),
    Rows(bool),
    Set { values: Arc<HashSet<ScalarValue>>, null: bool },
}

/// The call a subquery expression became (see the module docs).
#[derive(Debug)]
struct SubqueryCall {
    id: u64,
    name: String,
    kind: Kind,
    plan: LogicalPlan,
    outer: Vec<(Column, DataType)>,
    ret: DataType,
    signature: Signature,
    env: Arc<Env>,
    answers: Mutex<HashMap<Vec<ScalarValue>, Answer>>,
}

impl PartialEq for SubqueryCall {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl Eq for SubqueryCall {}

impl Hash for SubqueryCall {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl SubqueryCall {
    /// The answer for outer values `key` (worked out once per statement).
    fn answer(&self, key: Vec<ScalarValue>) -> Result<Answer> {
        if let Some(a) = self.answers.lock().get(&key) {
            return Ok(a.clone());
        }
        let values: HashMap<Column, ScalarValue> =
            self.outer.iter().map(|(c, _)| c.clone()).zip(key.iter().cloned()).collect();
        let plan = substitute(self.plan.clone(), &values)?;
        let batches = run(&self.env, plan)?;
        let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
        let answer = match self.kind {
            Kind::Exists { .. } => Answer::Rows(rows > 0),
            Kind::Scalar => {
                if rows > 1 {
                    return Err(DataFusionError::Execution(
                        "a scalar subquery returned more than one row".into(),
                    ));
                }
                match batches.iter().find(|b| b.num_rows() > 0) {
                    Some(b) => Answer::Value(ScalarValue::try_from_array(b.column(0), 0)?),
                    None => Answer::Value(ScalarValue::try_from(&self.ret)?),
                }
            }
            Kind::In { .. } => {
                let mut values = HashSet::new();
                let mut null = false;
                for b in &batches {
                    for r in 0..b.num_rows() {
                        let v = ScalarValue::try_from_array(b.column(0), r)?;
                        if v.is_null() {
                            null = true;
                        } else {
                            values.insert(v);
                        }
                    }
                }
                Answer::Set { values: Arc::new(values), null }
            }
        };
        self.answers.lock().insert(key, answer.clone());
        Ok(answer)
    }
}

/// Plans and runs `plan` against the view the statement pinned, on a thread of its own (the
/// caller is inside the statement's own execution).
fn run(env: &Env, plan: LogicalPlan) -> Result<Vec<RecordBatch>> {
    std::thread::scope(|s| {
        s.spawn(|| -> Result<Vec<RecordBatch>> {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
            rt.block_on(async {
                let physical = {
                    let before = env.binding.pin_view(env.view.clone());
                    let was = env.enabled.swap(true, Ordering::AcqRel);
                    let p = env.state.create_physical_plan(&plan).await;
                    env.enabled.store(was, Ordering::Release);
                    env.binding.restore(before);
                    p?
                };
                datafusion::physical_plan::collect(physical, env.state.task_ctx()).await
            })
        })
        .join()
        .unwrap_or_else(|_| Err(DataFusionError::Execution("a subquery panicked".into())))
    })
}

impl ScalarUDFImpl for SubqueryCall {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.ret.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays: Vec<ArrayRef> =
            args.args.iter().map(|a| a.to_array(n)).collect::<Result<_>>()?;
        let outer = &arrays[..self.outer.len()];
        let x = arrays.get(self.outer.len());
        let mut out = Vec::with_capacity(n);
        for r in 0..n {
            let key = outer
                .iter()
                .map(|a| ScalarValue::try_from_array(a, r))
                .collect::<Result<Vec<_>>>()?;
            let value = match (self.answer(key)?, self.kind) {
                (Answer::Value(v), _) => v,
                (Answer::Rows(any), Kind::Exists { negated }) => {
                    ScalarValue::Boolean(Some(any != negated))
                }
                (Answer::Set { values, null }, Kind::In { negated }) => {
                    let x = match x {
                        Some(a) => ScalarValue::try_from_array(a, r)?,
                        None => ScalarValue::Null,
                    };
                    let found = if values.is_empty() && !null {
                        Some(false)
                    } else if x.is_null() {
                        None
                    } else if values.contains(&x) {
                        Some(true)
                    } else if null {
                        None
                    } else {
                        Some(false)
                    };
                    ScalarValue::Boolean(found.map(|f| f != negated))
                }
                _ => {
                    return Err(DataFusionError::Internal(
                        "subquery answer of another kind".into(),
                    ));
                }
            };
            out.push(value);
        }
        if out.is_empty() {
            return Ok(ColumnarValue::Array(new_empty_array(&self.ret)));
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(out)?))
    }
}
