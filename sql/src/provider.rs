//! The `TableProvider` over native Basalt tables: [`NativeTable`]. Its scans are
//! [`ScanExec`](crate::exec::scan::ScanExec)s.
//!
//! A [`NativeTable`] holds no data and no snapshot: it names a table and the connection it
//! reads through ([`Binding`]). The snapshot is bound when a statement's physical plan is
//! built (`scan`), from the view the statement pinned, so cached logical plans and views
//! never read stale data, and every scan of one statement reads the same state.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session as DfSession, TableProvider};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, DataFusionError, Result};
use datafusion::logical_expr::dml::InsertOp;
use datafusion::logical_expr::{Expr, ExprSchemable, TableProviderFilterPushDown, TableType};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::physical_plan::ExecutionPlan;
use datafusion::physical_plan::filter::FilterExec;
use datafusion::physical_plan::projection::ProjectionExec;

use basalt_storage::{ID_COLUMN, TableSnapshot};

use crate::binding::{Binding, storage_err};
use crate::exec::dml::{DmlExec, DmlKind};
use crate::pushdown;

use crate::exec::scan::{ScanExec, and_all};
/// A native table as DataFusion sees it: `_id` first, then the user columns.
#[derive(Debug)]
pub struct NativeTable {
    name: String,
    schema: SchemaRef,
    /// The columns an INSERT stores (`schema` without `_id`).
    user: SchemaRef,
    binding: Arc<Binding>,
    /// The table's primary and unique keys (DataFusion derives functional dependencies
    /// from them: `GROUP BY pk` may select the other columns).
    constraints: datafusion::common::Constraints,
    /// Column defaults, planned ([`NativeTable::with_defaults`]): what an INSERT that
    /// leaves a column out stores there.
    defaults: std::collections::HashMap<String, Expr>,
}

impl NativeTable {
    /// A provider for `name`, with the schema the table has now.
    pub fn new(name: &str, snapshot: &TableSnapshot, binding: Arc<Binding>) -> NativeTable {
        use basalt_storage::IndexKind;
        use datafusion::common::{Constraint, Constraints};
        let schema = snapshot.schema();
        let keys = snapshot
            .indexes()
            .iter()
            .filter_map(|d| {
                let cols: Option<Vec<usize>> =
                    d.columns.iter().map(|&c| schema.position_of_id(c)).collect();
                match d.kind {
                    IndexKind::PrimaryKey => Some(Constraint::PrimaryKey(cols?)),
                    IndexKind::Unique => Some(Constraint::Unique(cols?)),
                    IndexKind::Index => None,
                }
            })
            .collect();
        NativeTable {
            name: name.to_string(),
            schema: schema.full_schema().clone(),
            user: schema.user_schema(),
            binding,
            constraints: Constraints::new_unverified(keys),
            defaults: std::collections::HashMap::new(),
        }
    }

    /// The provider with its column defaults (name → planned expression).
    pub fn with_defaults(mut self, defaults: std::collections::HashMap<String, Expr>) -> Self {
        self.defaults = defaults;
        self
    }

    /// The table's snapshot in the statement's view; fails if its columns changed since the
    /// statement was planned.
    fn bind(&self) -> Result<Arc<TableSnapshot>> {
        let view = self.binding.view().map_err(storage_err)?;
        let t = view.table(&self.name).map_err(storage_err)?;
        if t.schema().full_schema().fields() != self.schema.fields() {
            return Err(DataFusionError::Plan(format!(
                "table '{}' changed since this statement was planned; prepare it again",
                self.name
            )));
        }
        Ok(t)
    }

    /// For join ordering at planning: about how many of the table's live rows satisfy
    /// `filters` (the ones storage can evaluate, exactly or relaxed; the share of
    /// sampled rows that match, see [`TableSnapshot::estimate_matches`]). `None` when the
    /// table cannot be read.
    pub(crate) fn estimate_rows(&self, filters: &[Expr]) -> Option<f64> {
        let snapshot = self.bind().ok()?;
        let count = snapshot.count() as f64;
        let pushed: Vec<_> = filters
            .iter()
            .filter(|f| !crate::fts::has_fts_match(f))
            .filter_map(|f| {
                let f = unqualify(f.clone()).ok()?;
                pushdown::exact(&f, &self.schema).or_else(|| pushdown::relaxed(&f, &self.schema))
            })
            .collect();
        let Some(p) = and_all(pushed) else { return Some(count) };
        let n = snapshot.estimate_matches(&p, &snapshot.scan_units()).ok()? as f64;
        Some(n.min(count))
    }

    /// For join ordering at planning: about how many distinct values column `column`
    /// (full-schema position) holds over the whole table — a dictionary's entries, or for
    /// integers (dates, timestamps) at most the width of the zone maps' range. `None` when
    /// metadata does not bound it.
    pub(crate) fn estimate_distinct(&self, column: usize) -> Option<f64> {
        use basalt_storage::encoding::StatValue as S;
        let snapshot = self.bind().ok()?;
        let count = snapshot.count() as f64;
        if column == 0 {
            return Some(count);
        }
        let sum = snapshot.column_summary(column);
        if let Some(d) = sum.dictionary_entries {
            return Some((d as f64).clamp(1.0, count.max(1.0)));
        }
        let width = match (&sum.min, &sum.max) {
            (Some(S::Int(lo)), Some(S::Int(hi))) => (*hi as f64 - *lo as f64) + 1.0,
            (Some(S::UInt(lo)), Some(S::UInt(hi))) => (*hi as f64 - *lo as f64) + 1.0,
            _ => return None,
        };
        Some(width.clamp(1.0, count.max(1.0)))
    }

    fn df_schema(&self, schema: &SchemaRef) -> Result<DFSchema> {
        DFSchema::try_from(schema.as_ref().clone())
    }

    /// A scan of `columns` (full-schema positions, in that order) where all `filters` hold.
    /// What storage evaluates exactly is pushed into the scan; every other filter runs in a
    /// `FilterExec` above it (pruning with its relaxed form where one exists), with a
    /// projection back to `columns` if the filters needed more. `limit` is honoured only
    /// when no filter is left for the `FilterExec`.
    fn filtered_scan(
        &self,
        state: &dyn DfSession,
        columns: Vec<usize>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let snapshot = self.bind()?;
        let mut pushed = Vec::new();
        let mut rest = Vec::new();
        for f in filters {
            let mut f = unqualify(f.clone())?;
            if crate::fts::has_fts_match(&f) {
                // The search runs now, against the view this statement reads.
                let search = |column: &str, query: &str| {
                    crate::fts::matching_ids(&self.binding, &self.name, column, query)
                };
                f = crate::fts::resolve_matches(f, &search)?;
            }
            if !self.binding.pushdown() {
                rest.push(f);
                continue;
            }
            match pushdown::exact(&f, &self.schema) {
                Some(p) => pushed.push(p),
                None => {
                    // DataFusion may have simplified a filter we accepted as exact into a
                    // form that no longer converts: it must still be applied.
                    if let Some(p) = pushdown::relaxed(&f, &self.schema) {
                        pushed.push(p);
                    }
                    rest.push(f);
                }
            }
        }
        let mut index = None;
        if self.binding.pushdown()
            && let Some(l) = crate::index_lookup::index_lookup(&snapshot, filters, &|| {
                let p = and_all(pushed.clone())?;
                snapshot.estimate_matches(&p, &snapshot.scan_units()).ok()
            })
            && let Some(p) = pushdown::exact(&l.filter, &self.schema)
        {
            pushed.push(p);
            index = Some(l.index);
        }
        let wanted = columns.len();
        let mut columns = columns;
        for f in &rest {
            for c in f.column_refs() {
                let i = self.schema.index_of(&c.name)?;
                if !columns.contains(&i) {
                    columns.push(i);
                }
            }
        }
        let extra = columns.len() > wanted;
        let limit = if rest.is_empty() { limit } else { None };
        let scan = ScanExec::try_new(
            &self.name,
            snapshot,
            columns,
            and_all(pushed),
            limit,
            target_partitions(state),
        )?;
        let scan = match index {
            Some(name) => scan.with_index(name),
            None => scan,
        };
        let scan: Arc<dyn ExecutionPlan> = Arc::new(scan);
        let Some(filter) = rest.into_iter().reduce(Expr::and) else { return Ok(scan) };
        let schema = self.df_schema(&scan.schema())?;
        let pred = state.create_physical_expr(filter, &schema)?;
        let filtered: Arc<dyn ExecutionPlan> = Arc::new(FilterExec::try_new(pred, scan)?);
        if !extra {
            return Ok(filtered);
        }
        let out = filtered.schema();
        let exprs = (0..wanted)
            .map(|i| {
                let name = out.field(i).name().clone();
                let c: Arc<dyn PhysicalExpr> =
                    Arc::new(datafusion::physical_expr::expressions::Column::new(&name, i));
                (c, name)
            })
            .collect::<Vec<_>>();
        Ok(Arc::new(ProjectionExec::try_new(exprs, filtered)?))
    }
}

/// Strips table qualifiers from column references (DML filters arrive qualified).
fn unqualify(e: Expr) -> Result<Expr> {
    e.transform(|e| match e {
        Expr::Column(c) if c.relation.is_some() => {
            Ok(Transformed::yes(Expr::Column(datafusion::common::Column::new_unqualified(c.name))))
        }
        e => Ok(Transformed::no(e)),
    })
    .map(|t| t.data)
}

fn target_partitions(state: &dyn DfSession) -> usize {
    state.config().target_partitions().max(1)
}

#[async_trait]
impl TableProvider for NativeTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn constraints(&self) -> Option<&datafusion::common::Constraints> {
        (!self.constraints.is_empty()).then_some(&self.constraints)
    }

    fn get_column_default(&self, column: &str) -> Option<&Expr> {
        self.defaults.get(column)
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                // The scan resolves a full-text match to an `_id` set and applies every
                // filter it is given (in storage or in its own FilterExec), so such a filter
                // is exact whatever else it holds; DataFusion cannot evaluate `fts_match`.
                if crate::fts::has_fts_match(f) {
                    return TableProviderFilterPushDown::Exact;
                }
                if !self.binding.pushdown() {
                    TableProviderFilterPushDown::Unsupported
                } else if pushdown::exact(f, &self.schema).is_some() {
                    TableProviderFilterPushDown::Exact
                } else if pushdown::relaxed(f, &self.schema).is_some() {
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn DfSession,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let columns = match projection {
            Some(p) => p.clone(),
            None => (0..self.schema.fields().len()).collect(),
        };
        // Filters handed here are the ones reported Exact or Inexact (perhaps rewritten by
        // the optimizer since): the exact ones run in storage, the others above the scan.
        self.filtered_scan(state, columns, filters, limit)
    }

    async fn insert_into(
        &self,
        _state: &dyn DfSession,
        input: Arc<dyn ExecutionPlan>,
        insert_op: InsertOp,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let on_conflict = match insert_op {
            InsertOp::Append => None,
            // `REPLACE INTO`, `INSERT OR REPLACE`.
            InsertOp::Replace => Some(basalt_storage::OnConflict::Replace),
            InsertOp::Overwrite => {
                return Err(DataFusionError::NotImplemented(format!(
                    "{insert_op} is not supported on table '{}' (use TRUNCATE, then INSERT)",
                    self.name
                )));
            }
        };
        let kind = DmlKind::Insert { user_schema: self.user.clone(), on_conflict };
        Ok(Arc::new(DmlExec::new(&self.name, kind, input, self.binding.clone())))
    }

    async fn delete_from(
        &self,
        state: &dyn DfSession,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let input = self.filtered_scan(state, vec![0], &filters, None)?;
        let input = project_columns(input, &[ID_COLUMN])?;
        Ok(Arc::new(DmlExec::new(&self.name, DmlKind::Delete, input, self.binding.clone())))
    }

    async fn update(
        &self,
        state: &dyn DfSession,
        assignments: Vec<(String, Expr)>,
        filters: Vec<Expr>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut assigned = Vec::new();
        for (name, e) in assignments {
            if self.schema.field_with_name(&name).is_err() {
                return Err(DataFusionError::Plan(format!(
                    "UPDATE: table '{}' has no column '{name}'",
                    self.name
                )));
            }
            let e = unqualify(e)?;
            // DataFusion lists unchanged columns as `col = col`; only real changes are written.
            if matches!(&e, Expr::Column(c) if c.name == name) {
                continue;
            }
            if name == ID_COLUMN {
                return Err(DataFusionError::Plan(
                    "UPDATE cannot set _id: row ids are assigned by Basalt and never change".into(),
                ));
            }
            assigned.push((name, e));
        }
        // Read every column the assignments and filters use, and `_id`.
        let mut columns = vec![0];
        for (_, e) in &assigned {
            for c in e.column_refs() {
                let i = self.schema.index_of(&c.name)?;
                if !columns.contains(&i) {
                    columns.push(i);
                }
            }
        }
        let input = self.filtered_scan(state, columns, &filters, None)?;
        let schema = self.df_schema(&input.schema())?;
        let id = state.create_physical_expr(Expr::Column(ID_COLUMN.into()), &schema)?;
        let mut exprs: Vec<(Arc<dyn PhysicalExpr>, String)> = vec![(id, ID_COLUMN.to_string())];
        let mut fields = vec![Field::new(ID_COLUMN, DataType::UInt64, false)];
        for (name, e) in assigned {
            let target = self.schema.field_with_name(&name)?.clone();
            let e = e.cast_to(target.data_type(), &schema)?;
            exprs.push((state.create_physical_expr(e, &schema)?, name));
            fields.push(target);
        }
        let input: Arc<dyn ExecutionPlan> = Arc::new(ProjectionExec::try_new(exprs, input)?);
        let kind = DmlKind::Update { values: Arc::new(Schema::new(fields[1..].to_vec())) };
        Ok(Arc::new(DmlExec::new(&self.name, kind, input, self.binding.clone())))
    }

    async fn truncate(&self, state: &dyn DfSession) -> Result<Arc<dyn ExecutionPlan>> {
        self.delete_from(state, vec![]).await
    }
}

fn project_columns(
    input: Arc<dyn ExecutionPlan>,
    names: &[&str],
) -> Result<Arc<dyn ExecutionPlan>> {
    let schema = input.schema();
    let exprs = names
        .iter()
        .map(|n| {
            let i = schema.index_of(n)?;
            let c: Arc<dyn PhysicalExpr> =
                Arc::new(datafusion::physical_expr::expressions::Column::new(n, i));
            Ok((c, (*n).to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(ProjectionExec::try_new(exprs, input)?))
}
