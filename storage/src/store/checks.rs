//! CHECK constraints: the definitions a table carries (kept in the manifest) and the hook
//! through which every written row is checked against them.
//!
//! Storage cannot evaluate SQL, so the SQL layer installs a [`CheckEvaluator`] on the
//! store ([`Store::set_check_evaluator`]); every insert and update of a table with checks
//! hands it the new rows, in the table's full schema, after they are conformed and before
//! anything is written (`txn`). A row passes a check it makes TRUE or NULL, as in SQL. A
//! table with checks refuses writes while no evaluator is installed rather than skipping
//! them.
//!
//! What this module must not do: evaluate conditions itself, or let a write through
//! unchecked.

use super::*;
use crate::manifest::CheckDef;

/// A CHECK constraint to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCheck {
    /// Its name; `None` names it as PostgreSQL does (`t_a_check` for a condition on one
    /// column `a`, `t_check` otherwise, with a number added when that name is taken).
    pub name: Option<String>,
    /// The condition's SQL text, every column written as a quoted identifier.
    pub sql: String,
    /// The columns it reads, by name.
    pub columns: Vec<String>,
}

/// Evaluates CHECK constraints over rows being written (implemented by the SQL layer).
pub trait CheckEvaluator: Send + Sync + std::fmt::Debug {
    /// The position in `checks` of the first constraint that some row of `rows` makes
    /// FALSE, or `None` when every row passes every one. `rows` has the table's full
    /// schema (`_id` first). An `Err` is a condition that cannot be evaluated.
    fn first_violated(
        &self,
        checks: &[CheckDef],
        rows: &RecordBatch,
    ) -> std::result::Result<Option<usize>, String>;
}

impl TableSnapshot {
    /// The table's CHECK constraints, in creation order.
    pub fn checks(&self) -> &[CheckDef] {
        &self.checks
    }

    /// The first check that reads the column at full-schema position `p` of `schema`.
    pub(super) fn check_reading(&self, schema: &TableSchema, p: usize) -> Option<&CheckDef> {
        let id = schema.column_id_at(p);
        self.checks.iter().find(|c| c.columns.contains(&id))
    }
}

impl Store {
    /// Installs what evaluates CHECK constraints (replacing any installed before).
    pub fn set_check_evaluator(&self, e: Arc<dyn CheckEvaluator>) {
        *self.check_evaluator.write() = Some(e);
    }

    /// Fails with [`Error::CheckViolation`] when a row of `rows` (full schema) breaks one of
    /// `t`'s checks; nothing to do for a table without checks.
    pub(crate) fn check_rows(&self, t: &TableSnapshot, rows: &RecordBatch) -> Result<()> {
        self.check_rows_against(&t.name, &t.checks, rows)
    }

    /// [`Store::check_rows`] with the checks given.
    fn check_rows_against(
        &self,
        table: &str,
        checks: &[CheckDef],
        rows: &RecordBatch,
    ) -> Result<()> {
        if checks.is_empty() || rows.num_rows() == 0 {
            return Ok(());
        }
        let e = self.check_evaluator.read().clone().ok_or_else(|| Error::InvalidInput {
            table: table.to_string(),
            reason: "the table has CHECK constraints and nothing here evaluates them".into(),
        })?;
        let bad = e.first_violated(checks, rows).map_err(|reason| Error::InvalidInput {
            table: table.to_string(),
            reason: format!("evaluating a CHECK constraint: {reason}"),
        })?;
        match bad.and_then(|i| checks.get(i)) {
            None => Ok(()),
            Some(c) => Err(Error::CheckViolation {
                table: table.to_string(),
                constraint: c.name.clone(),
                condition: c.sql.clone(),
            }),
        }
    }

    /// Fails when a row `t` holds breaks one of `checks` (a check being added): every row
    /// is read.
    pub(super) fn check_existing_rows(
        &self,
        t: &Arc<TableSnapshot>,
        checks: &[CheckDef],
    ) -> Result<()> {
        let all: Vec<usize> = (0..t.schema.full_schema().fields().len()).collect();
        for b in t.scan(&all)? {
            self.check_rows_against(&t.name, checks, &b?)?;
        }
        Ok(())
    }
}

/// The definitions of `new` checks of table `table` (schema `ts`), named, their columns
/// resolved to ids; names must be new among `existing` and each other.
pub(super) fn define_checks(
    table: &str,
    ts: &TableSchema,
    existing: &[CheckDef],
    new: &[NewCheck],
) -> Result<Vec<CheckDef>> {
    let mut out: Vec<CheckDef> = existing.to_vec();
    for c in new {
        let mut columns = Vec::with_capacity(c.columns.len());
        for name in &c.columns {
            let p = ts.index_of(name).ok_or_else(|| Error::ColumnNotFound {
                table: table.to_string(),
                column: name.clone(),
            })?;
            let id = ts.column_id_at(p);
            if !columns.contains(&id) {
                columns.push(id);
            }
        }
        let taken = |n: &str| out.iter().any(|d| d.name == n);
        let name = match &c.name {
            Some(n) if taken(n) => {
                return Err(Error::InvalidInput {
                    table: table.to_string(),
                    reason: format!("constraint '{n}' already exists"),
                });
            }
            Some(n) => n.clone(),
            None => auto_name(table, c, taken),
        };
        out.push(CheckDef { name, sql: c.sql.clone(), columns });
    }
    Ok(out.split_off(existing.len()))
}

/// `checks` with every unnamed one named as `table`'s (see [`NewCheck::name`]): for
/// checks created under another name first (a staging table renamed into place).
pub fn name_checks(table: &str, checks: &[NewCheck]) -> Vec<NewCheck> {
    let mut out: Vec<NewCheck> = Vec::with_capacity(checks.len());
    for c in checks {
        let name = match &c.name {
            Some(n) => n.clone(),
            None => auto_name(table, c, |n| out.iter().any(|d| d.name.as_deref() == Some(n))),
        };
        out.push(NewCheck { name: Some(name), ..c.clone() });
    }
    out
}

/// PostgreSQL's name for an unnamed check: `t_a_check` for one column `a`, `t_check`
/// otherwise, with 1, 2, … added while `taken` says the name is.
fn auto_name(table: &str, c: &NewCheck, taken: impl Fn(&str) -> bool) -> String {
    let base = match c.columns.as_slice() {
        [one] => format!("{table}_{one}_check"),
        _ => format!("{table}_check"),
    };
    let mut name = base.clone();
    let mut k = 1;
    while taken(&name) {
        name = format!("{base}{k}");
        k += 1;
    }
    name
}
