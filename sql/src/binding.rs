//! What the providers and execs of one connection read and write through: the
//! [`Binding`] (the connection's storage session and the read view a statement pinned),
//! and the small helpers every module that touches storage uses.
//!
//! What this module must not do: depend on any other module of this crate (it is a leaf
//! the providers, DML, full-text and vector modules share).

use basalt_storage::{ID_COLUMN, ReadView, Session, Store, Transaction};
use datafusion::arrow::array::{Array, RecordBatch, UInt64Array};
use datafusion::common::{DataFusionError, Result};
use parking_lot::Mutex;
use std::sync::Arc;

/// Converts a storage error for DataFusion (kept as the source, so callers can get it back).
pub(crate) fn storage_err(e: basalt_storage::Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

/// What the providers of one connection read and write through.
#[derive(Debug)]
pub struct Binding {
    session: Arc<Mutex<Session>>,
    /// The view pinned by the running statement (`None` between statements).
    view: Mutex<Option<ReadView>>,
    /// Whether filters are pushed into scans (a session switch for comparing results).
    pushdown: std::sync::atomic::AtomicBool,
}

impl Binding {
    /// A binding over a connection's session.
    pub fn new(session: Arc<Mutex<Session>>) -> Binding {
        Binding {
            session,
            view: Mutex::new(None),
            pushdown: std::sync::atomic::AtomicBool::new(true),
        }
    }

    /// The connection's session.
    pub fn session(&self) -> &Arc<Mutex<Session>> {
        &self.session
    }

    /// Pins what the next statement reads (the state now, or the open transaction's view).
    pub fn pin(&self) -> basalt_storage::Result<()> {
        let v = self.session.lock().read_view()?;
        *self.view.lock() = Some(v);
        Ok(())
    }

    /// Pins `view` (a view pinned earlier, kept by a later step of the same statement);
    /// returns what was pinned before, to put back with [`Binding::restore`].
    pub fn pin_view(&self, view: ReadView) -> Option<ReadView> {
        self.view.lock().replace(view)
    }

    /// Puts back what [`Binding::pin_view`] returned.
    pub fn restore(&self, before: Option<ReadView>) {
        *self.view.lock() = before;
    }

    /// Releases the pinned view.
    pub fn unpin(&self) {
        *self.view.lock() = None;
    }

    /// The pinned view, or the state now.
    pub fn view(&self) -> basalt_storage::Result<ReadView> {
        if let Some(v) = self.view.lock().as_ref() {
            return Ok(v.clone());
        }
        self.session.lock().read_view()
    }

    /// Turns filter pushdown on or off.
    pub fn set_pushdown(&self, on: bool) {
        self.pushdown.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether filter pushdown is on.
    pub fn pushdown(&self) -> bool {
        self.pushdown.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs one step of the connection's current write statement.
    pub(crate) fn apply<T>(
        &self,
        f: impl FnOnce(&mut Transaction, &Store) -> basalt_storage::Result<T>,
    ) -> Result<T> {
        self.session.lock().apply(f).map_err(storage_err)
    }
}

/// Checks that the `_id` column an INSERT hands over is all NULL (ids are Basalt's).
pub(crate) fn check_no_ids(table: &str, batch: &RecordBatch) -> Result<()> {
    if let Some(c) = batch.column_by_name(ID_COLUMN)
        && c.null_count() != c.len()
    {
        let given =
            c.as_any().downcast_ref::<UInt64Array>().map_or(0, |a| a.len() - a.null_count());
        return Err(DataFusionError::Plan(format!(
            "INSERT into '{table}' gives {given} _id value(s): row ids are assigned by Basalt \
             (leave _id out of the column list)"
        )));
    }
    Ok(())
}
