//! SQL on a [`Connection`](crate::Connection): sync and async forms, streaming, prepared
//! statements. The work is done by `basalt-sql`; this module owns the runtime that the sync
//! forms block on and converts values and errors to the public types.

use std::sync::{Arc, OnceLock};

use arrow_array::RecordBatch;
use arrow_schema::{DataType, SchemaRef};
use basalt_sql::datafusion::common::ScalarValue;
use basalt_sql::datafusion::execution::SendableRecordBatchStream;
use basalt_sql::{Prepared, SqlConnection};
use futures::StreamExt;

use crate::error::{Error, Result};
use crate::value::Value;

/// Stack of the query runtime's threads (address space; pages are used as touched).
const WORKER_STACK: usize = 32 << 20;

/// SQL texts this long or longer are planned and run on a stack of [`DEEP_STACK`] bytes:
/// DataFusion's planning recurses once per level of an expression (with frames of several
/// kilobytes in unoptimised builds), so an expression a few hundred levels deep — which
/// takes a few hundred bytes of text to write — overflowed a 2 MiB thread stack. Shorter
/// texts cannot nest that deep and run where they are called.
const DEEP_SQL_BYTES: usize = 256;

/// The stack long statements get (address space; pages are used as touched).
const DEEP_STACK: usize = 64 << 20;

/// Whether `sql` may nest deeply enough to need [`on_deep_stack`].
pub(crate) fn may_be_deep(sql: &str) -> bool {
    sql.len() >= DEEP_SQL_BYTES
}

/// Runs `f` on a stack of [`DEEP_STACK`] bytes when `deep` (unless the current one already
/// has most of that left).
pub(crate) fn on_deep_stack<R>(deep: bool, f: impl FnOnce() -> R) -> R {
    if deep { stacker::maybe_grow(DEEP_STACK / 2, DEEP_STACK, f) } else { f() }
}

/// A future whose every poll runs [`on_deep_stack`] (the async forms of long statements).
pub(crate) struct DeepStack<F> {
    inner: std::pin::Pin<Box<F>>,
    deep: bool,
}

impl<F> DeepStack<F> {
    pub(crate) fn new(deep: bool, inner: F) -> Self {
        DeepStack { inner: Box::pin(inner), deep }
    }
}

impl<F: std::future::Future> std::future::Future for DeepStack<F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let deep = self.deep;
        on_deep_stack(deep, || self.inner.as_mut().poll(cx))
    }
}

/// The tokio runtime the sync SQL calls block on (one per database, built on first use).
#[derive(Debug, Default)]
pub(crate) struct Runtime {
    rt: OnceLock<tokio::runtime::Runtime>,
}

impl Runtime {
    /// Cores queries may use (the partitions of a scan).
    pub(crate) fn cores() -> usize {
        basalt_sql::cores()
    }

    fn get(&self) -> Result<&tokio::runtime::Runtime> {
        if let Some(rt) = self.rt.get() {
            return Ok(rt);
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(Self::cores())
            .thread_name("basalt-sql")
            // Queries nest at most `basalt_sql::depth::MAX_EXPR_DEPTH` deep; evaluating
            // that deep an expression recurses once per level (see `DEEP_STACK`).
            .thread_stack_size(WORKER_STACK)
            .enable_all()
            .build()
            .map_err(|e| {
                Error::Sql(basalt_sql::Error::Execution {
                    message: format!("cannot start the query runtime: {e}"),
                })
            })?;
        Ok(self.rt.get_or_init(|| rt))
    }

    /// Runs a future to completion on this runtime; refuses inside another async runtime
    /// (blocking there would stall it; use the `_async` forms).
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> Result<F::Output> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::Sql(basalt_sql::Error::Unsupported {
                message: "a blocking SQL call inside an async runtime; use the _async form".into(),
            }));
        }
        // Boxed once here: a statement's future still holds about a kilobyte (the SQL layer
        // boxes DataFusion's much larger ones), and the runtime's layers would move it by
        // value several times per statement.
        Ok(self.get()?.block_on(Box::pin(f)))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // Dropping a runtime inside another one panics; shutting down in the background
        // does not.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Runs an SQL future, turning a panic inside it into an error (the statement guard in
/// `basalt-sql` undoes a write statement that a panic interrupts).
pub(crate) async fn guarded<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(f).catch_unwind().await {
        Ok(r) => r,
        Err(p) => Err(panicked(p.as_ref())),
    }
}

/// Runs a synchronous SQL call, turning a panic inside it into an error (as [`guarded`]).
pub(crate) fn unwinding<T>(f: impl FnOnce() -> basalt_sql::Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .map_err(|p| panicked(p.as_ref()))?
        .map_err(Error::from)
}

/// The error a panic inside SQL execution becomes.
fn panicked(p: &(dyn std::any::Any + Send)) -> Error {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into());
    Error::Sql(basalt_sql::Error::Execution {
        message: format!("internal error while running SQL (a panic: {what})"),
    })
}

/// A connection's SQL front end, created on first use.
#[derive(Debug, Default)]
pub(crate) struct SqlSlot {
    conn: OnceLock<Arc<SqlConnection>>,
}

impl SqlSlot {
    pub(crate) fn get(
        &self,
        session: &Arc<parking_lot::Mutex<basalt_storage::Session>>,
        env: &Arc<basalt_sql::connection::SharedRuntime>,
    ) -> Result<Arc<SqlConnection>> {
        if let Some(c) = self.conn.get() {
            return Ok(c.clone());
        }
        let c = Arc::new(SqlConnection::new(session.clone(), Runtime::cores(), env.clone())?);
        Ok(self.conn.get_or_init(|| c).clone())
    }
}

/// Rows of a streamed query, batch by batch (blocking iterator).
pub struct SqlRows {
    pub(crate) stream: SendableRecordBatchStream,
    pub(crate) db: crate::Database,
    /// The statement may nest deeply: its batches are computed on a large stack.
    pub(crate) deep: bool,
}

impl std::fmt::Debug for SqlRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlRows").field("schema", &self.stream.schema()).finish()
    }
}

impl SqlRows {
    /// The schema of every batch.
    pub fn schema(&self) -> SchemaRef {
        self.stream.schema()
    }
}

impl Iterator for SqlRows {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        let rt = &self.db.inner.runtime;
        let (deep, stream) = (self.deep, &mut self.stream);
        match on_deep_stack(deep, || rt.block_on(stream.next())) {
            Err(e) => Some(Err(e)),
            Ok(None) => None,
            Ok(Some(r)) => Some(r.map_err(stream_error)),
        }
    }
}

/// An error of a result stream: the engine's own when a [`Watch`] stopped the statement.
pub(crate) fn stream_error(e: basalt_sql::datafusion::common::DataFusionError) -> Error {
    use basalt_sql::datafusion::common::DataFusionError;
    match e {
        DataFusionError::External(b) => match b.downcast::<Error>() {
            Ok(e) => *e,
            Err(b) => Error::from(basalt_sql::Error::from(DataFusionError::External(b))),
        },
        e => Error::from(basalt_sql::Error::from(e)),
    }
}

/// A prepared statement ([`Connection::prepare`](crate::Connection::prepare)): planned once,
/// run many times with `$1`, `$2`, … bound to values. Each run reads the data as of that
/// run.
#[derive(Debug, Clone)]
pub struct Statement {
    pub(crate) conn: crate::Connection,
    /// Shared: cloning a statement does not copy its plan.
    pub(crate) prepared: Arc<Prepared>,
    /// Its text may nest deeply: it runs on a large stack ([`on_deep_stack`]).
    pub(crate) deep: bool,
}

impl Statement {
    /// Runs the statement with `params` for `$1`, `$2`, …
    pub fn execute(&self, params: &[Value]) -> Result<Vec<RecordBatch>> {
        // Simple statements run on the direct path right here, outside the runtime.
        let sql = self.conn.sql_conn()?;
        let scalars = params.iter().map(to_scalar).collect::<Result<Vec<_>>>()?;
        if let Some(b) = unwinding(|| sql.execute_prepared_direct(&self.prepared, &scalars))? {
            return Ok(b);
        }
        let rt = &self.conn.db.inner.runtime;
        on_deep_stack(self.deep, || rt.block_on(self.run_planned(&sql, scalars)))?
    }

    /// The async form of [`Statement::execute`].
    pub async fn execute_async(&self, params: &[Value]) -> Result<Vec<RecordBatch>> {
        let sql = self.conn.sql_conn()?;
        let params = params.iter().map(to_scalar).collect::<Result<Vec<_>>>()?;
        DeepStack::new(self.deep, self.run_planned(&sql, params)).await
    }

    async fn run_planned(
        &self,
        sql: &basalt_sql::SqlConnection,
        params: Vec<ScalarValue>,
    ) -> Result<Vec<RecordBatch>> {
        let mut watch = self.conn.watch()?;
        watch.run(guarded(async { Ok(sql.execute_prepared(&self.prepared, params).await?) })).await
    }

    /// The types inferred for `$1`, `$2`, … (`None` where the statement does not say).
    pub fn parameter_types(&self) -> Result<Vec<Option<DataType>>> {
        Ok(self.prepared.parameter_types()?)
    }
}

/// A parameter value as DataFusion takes it.
fn to_scalar(v: &Value) -> Result<ScalarValue> {
    Ok(match v {
        Value::Null => ScalarValue::Null,
        Value::Bool(b) => ScalarValue::Boolean(Some(*b)),
        Value::Int(i) => ScalarValue::Int64(Some(*i)),
        Value::UInt(u) => ScalarValue::UInt64(Some(*u)),
        Value::Float(f) => ScalarValue::Float64(Some(*f)),
        Value::Str(s) => ScalarValue::Utf8(Some(s.clone())),
        Value::Bytes(b) => ScalarValue::Binary(Some(b.clone())),
        Value::Date(d) => ScalarValue::Date32(Some(*d)),
        Value::Timestamp(t) => ScalarValue::TimestampMicrosecond(Some(*t), None),
        Value::Vector(v) => {
            let a = arrow_array::FixedSizeListArray::from_iter_primitive::<
                arrow_array::types::Float32Type,
                _,
                _,
            >(
                std::iter::once(Some(v.iter().map(|x| Some(*x)).collect::<Vec<_>>())),
                i32::try_from(v.len()).map_err(|_| {
                    Error::Sql(basalt_sql::Error::Sql { message: "vector too long".into() })
                })?,
            );
            ScalarValue::FixedSizeList(Arc::new(a))
        }
        // An unscaled decimal without its type: the widest integer decimal.
        Value::Decimal(d) => ScalarValue::Decimal128(Some(*d), 38, 0),
        // Any other type as a one-element array (a decimal with its precision and scale,
        // a list, a struct, …).
        Value::Nested(a) => ScalarValue::try_from_array(a, 0).map_err(|e| {
            Error::Sql(basalt_sql::Error::Sql { message: format!("parameter value: {e}") })
        })?,
    })
}

/// What stops a connection's running statement: [`crate::Connection::interrupt`] and the
/// statement timeout. Shared by the connection's clones.
#[derive(Debug, Default)]
pub(crate) struct Cancel {
    /// Bumped by every interrupt: a statement that started at another value is stopped.
    generation: std::sync::atomic::AtomicU64,
    notify: Arc<tokio::sync::Notify>,
    /// The connection's own statement timeout (`None`: the database's).
    timeout: parking_lot::Mutex<Option<Option<std::time::Duration>>>,
}

impl Cancel {
    /// Stops the statement running now (if any).
    pub(crate) fn interrupt(&self) {
        self.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        self.notify.notify_waiters();
    }

    /// Sets the connection's statement timeout.
    pub(crate) fn set_timeout(&self, t: Option<std::time::Duration>) {
        *self.timeout.lock() = Some(t);
    }

    /// The watch of a statement starting now, given the database's default timeout and
    /// the runtime whose timer measures it.
    pub(crate) fn watch(
        self: &Arc<Self>,
        default: Option<std::time::Duration>,
        rt: &Runtime,
    ) -> Result<Watch> {
        let limit = (*self.timeout.lock()).unwrap_or(default);
        let sleep = match limit {
            // Made inside the query runtime, so its timer drives it wherever it is polled.
            Some(d) => {
                let _in = rt.get()?.enter();
                Some((Box::pin(tokio::time::sleep(d)), d))
            }
            None => None,
        };
        let mut notified = Box::pin(self.notify.clone().notified_owned());
        notified.as_mut().enable();
        Ok(Watch {
            generation: self.generation.load(std::sync::atomic::Ordering::Acquire),
            cancel: self.clone(),
            notified,
            sleep,
            done: false,
        })
    }
}

/// Stops one statement when its connection is interrupted or its time is up: around its
/// future ([`Watch::run`]) and its result stream ([`Watch::stream`]). Dropping a statement's
/// future or stream cancels its work (DataFusion's tasks end with them, and a write
/// statement is undone).
pub(crate) struct Watch {
    cancel: Arc<Cancel>,
    generation: u64,
    notified: std::pin::Pin<Box<tokio::sync::futures::OwnedNotified>>,
    sleep: Option<(std::pin::Pin<Box<tokio::time::Sleep>>, std::time::Duration)>,
    /// The error was reported (a stream then ends).
    done: bool,
}

impl Watch {
    /// The error to stop with, if the statement must stop now.
    fn poll_stop(&mut self, cx: &mut std::task::Context<'_>) -> Option<Error> {
        use std::future::Future;
        let interrupted = self.cancel.generation.load(std::sync::atomic::Ordering::Acquire)
            != self.generation
            || self.notified.as_mut().poll(cx).is_ready();
        if interrupted {
            return Some(Error::Interrupted);
        }
        let (sleep, limit) = self.sleep.as_mut()?;
        // The clock is read too: the timer alone fires late, or never, while every worker
        // of the runtime is busy computing (its driver is not polled), and the statement's
        // own polls go on.
        let late = sleep.deadline() <= tokio::time::Instant::now();
        (late || sleep.as_mut().poll(cx).is_ready()).then_some(Error::Timeout { limit: *limit })
    }

    /// Runs `f` unless the statement is stopped first.
    pub(crate) async fn run<T>(
        &mut self,
        f: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let mut f = std::pin::pin!(f);
        std::future::poll_fn(move |cx| {
            if let Some(e) = self.poll_stop(cx) {
                return std::task::Poll::Ready(Err(e));
            }
            f.as_mut().poll(cx)
        })
        .await
    }

    /// `stream`, ended by an error when the statement is stopped.
    pub(crate) fn stream(self, stream: SendableRecordBatchStream) -> SendableRecordBatchStream {
        Box::pin(Watched { watch: self, inner: stream })
    }
}

/// A result stream under a [`Watch`].
struct Watched {
    watch: Watch,
    inner: SendableRecordBatchStream,
}

impl futures::Stream for Watched {
    type Item = basalt_sql::datafusion::common::Result<RecordBatch>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        if self.watch.done {
            return std::task::Poll::Ready(None);
        }
        if let Some(e) = self.watch.poll_stop(cx) {
            self.watch.done = true;
            let e = basalt_sql::datafusion::common::DataFusionError::External(Box::new(e));
            return std::task::Poll::Ready(Some(Err(e)));
        }
        self.inner.as_mut().poll_next(cx)
    }
}

impl basalt_sql::datafusion::physical_plan::RecordBatchStream for Watched {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }
}
