//! The catalog DataFusion sees: the `public` schema of the default catalog lists the
//! connection's native tables and views (as the statement's pinned view, or the open
//! transaction, sees them).
//!
//! A view is stored as the SQL text of its query and planned again at every use (through the
//! same rewrites as a statement), so it always reads current data and follows column changes
//! of its tables; a view whose tables are gone fails when used, naming what is missing.
//!
//! `CREATE EXTERNAL TABLE` registers a file-backed table (DataFusion's listing table) that
//! this connection sees until it ends; it is not persisted and holds no Basalt data.

use std::sync::{Arc, OnceLock, Weak};

use async_trait::async_trait;
use datafusion::catalog::view::ViewTable;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::execution::session_state::SessionState;
use parking_lot::{Mutex, RwLock};

use crate::binding::{Binding, storage_err};
use crate::files::Files;
use crate::provider::NativeTable;

/// The schema provider over a connection's native tables and views.
#[derive(Debug)]
pub struct BasaltSchema {
    binding: Arc<Binding>,
    files: Arc<Files>,
    /// The session views are planned with (set once the session exists).
    state: OnceLock<Weak<RwLock<SessionState>>>,
    /// Views being expanded right now (a view that refers to itself is an error).
    expanding: Mutex<Vec<String>>,
    /// Tables registered by `CREATE EXTERNAL TABLE`: file-backed, visible to this
    /// connection only, not persisted.
    external: Mutex<std::collections::BTreeMap<String, Arc<dyn TableProvider>>>,
}

impl BasaltSchema {
    /// A schema provider reading through `binding`.
    pub fn new(binding: Arc<Binding>, files: Arc<Files>) -> BasaltSchema {
        BasaltSchema {
            binding,
            files,
            state: OnceLock::new(),
            expanding: Mutex::new(Vec::new()),
            external: Mutex::new(std::collections::BTreeMap::new()),
        }
    }

    /// Whether `name` is a connection-local external table.
    pub fn is_external(&self, name: &str) -> bool {
        self.external.lock().contains_key(name)
    }

    /// Gives the provider the session it plans views with.
    pub fn set_state(&self, state: Weak<RwLock<SessionState>>) {
        let _ = self.state.set(state);
    }

    /// A table's column defaults, planned (they name no column).
    fn plan_defaults(
        &self,
        table: &str,
        defaults: Vec<(String, String)>,
    ) -> Result<std::collections::HashMap<String, datafusion::logical_expr::Expr>> {
        let state = self.session_state()?;
        let empty = datafusion::common::DFSchema::empty();
        defaults
            .into_iter()
            .map(|(column, sql)| {
                let e = state.create_logical_expr(&sql, &empty).map_err(|e| {
                    DataFusionError::Plan(format!(
                        "table '{table}', column '{column}': the default {sql} no longer plans: {}",
                        e.strip_backtrace()
                    ))
                })?;
                Ok((column, e))
            })
            .collect()
    }

    /// A copy of the session state views and defaults are planned with.
    fn session_state(&self) -> Result<SessionState> {
        let state = self
            .state
            .get()
            .and_then(Weak::upgrade)
            .ok_or_else(|| DataFusionError::Internal("the SQL session is gone".into()))?;
        Ok(state.read().clone())
    }

    async fn view(&self, name: &str, sql: &str) -> Result<Arc<dyn TableProvider>> {
        let state = self.session_state()?;
        {
            let mut e = self.expanding.lock();
            if e.iter().any(|n| n == name) {
                return Err(DataFusionError::Plan(format!("view '{name}' refers to itself")));
            }
            e.push(name.to_string());
        }
        let r = async {
            let stmt = crate::parse::parse_one(state.config().options(), sql).map_err(|e| {
                DataFusionError::Plan(format!("view '{name}' no longer parses: {e}"))
            })?;
            let stmt = crate::prepare::prepare_statement(&self.binding, &self.files, &state, stmt)
                .await
                .map_err(|e| DataFusionError::Plan(e.to_string()))?;
            crate::prepare::plan_prepared(&state, stmt).await
        }
        .await;
        self.expanding.lock().retain(|n| n != name);
        let plan = r.map_err(|e| {
            DataFusionError::Plan(format!("view '{name}': {}", e.find_root().strip_backtrace()))
        })?;
        Ok(Arc::new(ViewTable::new(plan, Some(sql.to_string()))))
    }
}

#[async_trait]
impl SchemaProvider for BasaltSchema {
    fn table_names(&self) -> Vec<String> {
        self.binding
            .view()
            .map(|v| {
                let mut names = v.table_names();
                names.retain(|n| !n.starts_with(crate::parse::RESERVED_PREFIX));
                names.extend(v.views().keys().cloned());
                names.extend(self.external.lock().keys().cloned());
                names
            })
            .unwrap_or_default()
    }

    fn register_table(
        &self,
        name: String,
        table: Arc<dyn TableProvider>,
    ) -> Result<Option<Arc<dyn TableProvider>>> {
        if self.table_exist(&name) {
            return Err(DataFusionError::Plan(format!("table '{name}' already exists")));
        }
        Ok(self.external.lock().insert(name, table))
    }

    fn deregister_table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(self.external.lock().remove(name))
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        let view = self.binding.view().map_err(storage_err)?;
        match view.table(name) {
            Ok(t) => {
                let table = NativeTable::new(name, &t, self.binding.clone());
                let defaults = t.column_defaults();
                if defaults.is_empty() {
                    return Ok(Some(Arc::new(table)));
                }
                Ok(Some(Arc::new(table.with_defaults(self.plan_defaults(name, defaults)?))))
            }
            Err(basalt_storage::Error::TableNotFound { .. }) => match view.views().get(name) {
                Some(sql) => self.view(name, sql).await.map(Some),
                None => Ok(self.external.lock().get(name).cloned()),
            },
            Err(e) => Err(storage_err(e)),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.binding.view().is_ok_and(|v| v.table(name).is_ok() || v.views().contains_key(name))
            || self.external.lock().contains_key(name)
    }
}
