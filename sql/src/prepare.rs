//! Preparing a parsed statement for DataFusion: Basalt's rewrites with the catalog as a
//! binding sees it, file table functions resolved, `COPY` of a native table made a query,
//! `COPY` into the database directory refused. Used by the dispatcher and by the catalog
//! when it plans a view, so views never go through the dispatcher.
//!
//! What this module must not do: run anything (it only rewrites statements).

use crate::binding::Binding;
use crate::error::{Error, Result};
use crate::files::Files;
use crate::rewrite::{self, NativeTables};
use datafusion::sql::parser::Statement as DfStatement;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion::sql::sqlparser::dialect::GenericDialect;

/// Refuses a `COPY … TO` target inside the database's directory: only the store writes
/// there (a file written over `MANIFEST` or a segment would destroy the database).
pub(crate) fn refuse_database_target(binding: &Binding, target: &str) -> Result<()> {
    let store = binding.session().lock().store().clone();
    let Some(dir) = store.directory() else { return Ok(()) };
    let resolve = |p: &std::path::Path| {
        let abs = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        // The deepest existing ancestor, resolved (links, `..`), then the rest as written.
        let mut base = abs.as_path();
        let mut rest = Vec::new();
        loop {
            if let Ok(real) = base.canonicalize() {
                return rest.iter().rev().fold(real, |acc: std::path::PathBuf, c| acc.join(c));
            }
            match (base.parent(), base.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_os_string());
                    base = parent;
                }
                _ => return abs.clone(),
            }
        }
    };
    if resolve(std::path::Path::new(target)).starts_with(resolve(dir)) {
        return Err(Error::sql(format!(
            "COPY … TO '{target}': refusing to write into the database directory {} (only the \
             database writes there)",
            store.display_path().display()
        )));
    }
    Ok(())
}

/// Prepares a statement for DataFusion: Basalt's rewrites ([`crate::rewrite`]) with the
/// catalog as `binding` sees it, then its file table functions resolved
/// ([`Files::resolve`]). `COPY t TO …` of a native table becomes `COPY (SELECT * FROM t)`
/// first, so `_id` stays out of the file.
pub(crate) async fn prepare_statement(
    binding: &Binding,
    files: &Files,
    state: &datafusion::execution::session_state::SessionState,
    mut stmt: DfStatement,
) -> Result<DfStatement> {
    let lower_idents = state.config().options().sql_parser.enable_ident_normalization;
    let tables = CatalogNames::new(binding, lower_idents)?;
    if let DfStatement::CopyTo(c) = &stmt {
        refuse_database_target(binding, &c.target)?;
    }
    if let DfStatement::CopyTo(c) = &mut stmt
        && let datafusion::sql::parser::CopyToSource::Relation(name) = &c.source
        && rewrite::table_name_of(name, lower_idents).is_some_and(|t| tables.is_native(&t))
    {
        let q = datafusion::sql::sqlparser::parser::Parser::new(&GenericDialect {})
            .try_with_sql(&format!("SELECT * FROM {name}"))
            .and_then(|mut p| p.parse_query())
            .map_err(|e| Error::sql(e.to_string()))?;
        c.source = datafusion::sql::parser::CopyToSource::Query(q);
    }
    async fn prepare(
        s: &mut Statement,
        tables: &CatalogNames,
        files: &Files,
        state: &datafusion::execution::session_state::SessionState,
    ) -> Result<()> {
        rewrite::rewrite(s, tables);
        crate::sqlite_compat::rewrite(s);
        files.resolve(state, s).await
    }
    match &mut stmt {
        DfStatement::Statement(s) => prepare(s, &tables, files, state).await?,
        DfStatement::Explain(e) => {
            if let DfStatement::Statement(s) = e.statement.as_mut() {
                prepare(s, &tables, files, state).await?;
            }
        }
        DfStatement::CopyTo(c) => {
            if let datafusion::sql::parser::CopyToSource::Query(q) = &mut c.source {
                let mut s = Statement::Query(q.clone());
                prepare(&mut s, &tables, files, state).await?;
                if let Statement::Query(nq) = s {
                    *q = nq;
                }
            }
        }
        _ => {}
    }
    Ok(stmt)
}

/// Plans a prepared statement. One that DataFusion refuses for repeated output names
/// (`SELECT a, a`) or for SQLite's bare columns (`SELECT a, max(b) FROM t`) is planned again
/// with those items named ([`crate::unique_names`]) or those columns wrapped
/// ([`crate::bare_columns`]); statements DataFusion plans are never changed.
pub(crate) async fn plan_prepared(
    state: &datafusion::execution::session_state::SessionState,
    stmt: DfStatement,
) -> datafusion::error::Result<datafusion::logical_expr::LogicalPlan> {
    // A copy for a second planning: queries (small) and statements with repeated items.
    let keep = crate::unique_names::has_repeated_items(&stmt)
        || matches!(&stmt, DfStatement::Statement(s) if matches!(s.as_ref(), Statement::Query(_)));
    let mut retry = keep.then(|| stmt.clone());
    let mut result = Box::pin(state.statement_to_plan(stmt)).await;
    // Each fix at most once (a statement may need both).
    let mut named = false;
    let mut wrapped = false;
    while let (Err(e), Some(s)) = (&result, retry.as_mut()) {
        let changed = if !named && crate::unique_names::is_duplicate_names(e) {
            named = true;
            crate::unique_names::name_repeated_items(s)
        } else if !wrapped && crate::bare_columns::is_bare_column_error(e) {
            wrapped = true;
            crate::bare_columns::wrap_bare_columns(s)
        } else {
            false
        };
        if !changed {
            break;
        }
        match Box::pin(state.statement_to_plan(s.clone())).await {
            Ok(plan) => return Ok(plan),
            Err(e2) => result = Err(e2),
        }
    }
    result
}

/// The native tables the rewriter may expand, read once per statement.
pub(crate) struct CatalogNames {
    view: basalt_storage::ReadView,
    lower_idents: bool,
}

impl CatalogNames {
    pub(crate) fn new(binding: &Binding, lower_idents: bool) -> Result<CatalogNames> {
        Ok(CatalogNames { view: binding.view()?, lower_idents })
    }
}

impl NativeTables for CatalogNames {
    fn is_native(&self, name: &str) -> bool {
        self.view.table(name).is_ok()
    }
    fn user_columns(&self, name: &str) -> Option<Vec<String>> {
        let t = self.view.table(name).ok()?;
        Some(t.schema().user_schema().fields().iter().map(|f| f.name().clone()).collect())
    }
    fn column_default(&self, table: &str, column: &str) -> Option<String> {
        let t = self.view.table(table).ok()?;
        t.column_defaults().into_iter().find(|(c, _)| c == column).map(|(_, sql)| sql)
    }
    fn fold_case(&self) -> bool {
        self.lower_idents
    }
}
