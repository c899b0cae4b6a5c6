//! What one statement reads ([`ReadView`]): a committed snapshot, or the tables as an open
//! transaction sees them. Defined with the snapshots so the store's readers (the full-text
//! search among them) need nothing of the session that makes views.
//!
//! Part of the store (see the module doc of `store`).

use super::*;

/// What one statement reads: the open transaction's view (its own writes included) or a
/// committed snapshot pinned when the statement started.
#[derive(Debug, Clone)]
pub enum ReadView {
    /// A committed state of the database.
    Committed(Arc<DbSnapshot>),
    /// The tables as the open transaction sees them, for the names the statement asked for.
    Transaction(Arc<DbSnapshot>, Vec<(String, Arc<TableSnapshot>)>),
}

impl ReadView {
    /// A table as this view sees it.
    pub fn table(&self, name: &str) -> Result<Arc<TableSnapshot>> {
        match self {
            ReadView::Committed(s) => s.table(name).cloned(),
            ReadView::Transaction(s, own) => match own.iter().find(|(n, _)| n == name) {
                Some((_, t)) => Ok(t.clone()),
                None => s.table(name).cloned(),
            },
        }
    }

    /// Table names, sorted.
    pub fn table_names(&self) -> Vec<String> {
        self.snapshot().table_names()
    }

    /// Views: name → SQL text.
    pub fn views(&self) -> &std::collections::BTreeMap<String, String> {
        self.snapshot().views()
    }

    fn snapshot(&self) -> &DbSnapshot {
        self.base()
    }

    /// The committed state under the view (the transaction's start, for a transaction).
    pub fn base(&self) -> &DbSnapshot {
        match self {
            ReadView::Committed(s) | ReadView::Transaction(s, _) => s,
        }
    }

    /// Whether the view's transaction has written to `name` (so its rows differ from
    /// [`ReadView::base`]).
    pub fn has_own_writes(&self, name: &str) -> bool {
        matches!(self, ReadView::Transaction(_, own) if own.iter().any(|(n, _)| n == name))
    }
}
