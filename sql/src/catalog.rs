//! The catalog DataFusion sees: the `public` schema of the default catalog lists the
//! connection's native tables (as the statement's pinned view, or the open transaction,
//! sees them).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::common::{DataFusionError, Result};

use crate::provider::{Binding, NativeTable, storage_err};

/// The schema provider over a connection's native tables.
#[derive(Debug)]
pub struct BasaltSchema {
    binding: Arc<Binding>,
}

impl BasaltSchema {
    /// A schema provider reading through `binding`.
    pub fn new(binding: Arc<Binding>) -> BasaltSchema {
        BasaltSchema { binding }
    }
}

#[async_trait]
impl SchemaProvider for BasaltSchema {
    fn table_names(&self) -> Vec<String> {
        self.binding.view().map(|v| v.table_names()).unwrap_or_default()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>, DataFusionError> {
        let view = self.binding.view().map_err(storage_err)?;
        match view.table(name) {
            Ok(t) => Ok(Some(Arc::new(NativeTable::new(name, &t, self.binding.clone())))),
            Err(basalt_storage::Error::TableNotFound { .. }) => Ok(None),
            Err(e) => Err(storage_err(e)),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.binding.view().is_ok_and(|v| v.table(name).is_ok())
    }
}
