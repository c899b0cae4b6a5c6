//! The native connection: opening databases (one shared handle per file in a process), SQL
//! with parameters and a per-connection cache of prepared statements, transactions, loading
//! Arrow data into tables, and vector and full-text search. The GIL is released for every
//! engine call. The DB-API surface (cursors, descriptions) is Python code built on this
//! (`basalt/__init__.py`); this file must not format results for people.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use arrow_array::RecordBatch;
use arrow_schema::{DataType, Schema, SchemaRef};
use basalt::{Durability, Metric, Options, StorageError, Value};
use parking_lot::{Mutex, RwLock};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::arrow;
use crate::convert;
use crate::errors::{InterfaceError, IntoPy, ProgrammingError, bad_arg, to_py};
use crate::params;
use crate::result::QueryResult;

/// Databases open in this process, by path and mode, with the number of native
/// connections on each: a second `connect` to the same file shares the handle instead of
/// waiting for the first one's writer lock.
static OPEN: Mutex<Option<HashMap<OpenKey, (basalt::Database, usize)>>> = Mutex::new(None);

/// A database file (canonical path) and whether it is open read-only.
type OpenKey = (PathBuf, bool);

/// Prepared statements a connection keeps, by text; beyond this the cache starts over.
const CACHED_STATEMENTS: usize = 256;

/// A connection to a database (the native half of `basalt.Connection`).
#[pyclass(frozen, module = "basalt._basalt", name = "NativeConnection")]
pub struct NativeConnection {
    /// The database and this connection on it; `None` once closed (dropping them closes
    /// the database with its last handle).
    handles: RwLock<Option<(basalt::Database, basalt::Connection)>>,
    /// Where the shared handle is registered (`None`: in memory).
    key: Option<OpenKey>,
    /// Texts run before: their prepared statement, or `None` when `prepare` refused the
    /// text (a script, DDL, transaction control), which then runs as text at once.
    statements: Mutex<HashMap<String, Option<basalt::Statement>>>,
}

fn parse_durability(s: &str) -> PyResult<Durability> {
    Ok(match s.to_ascii_lowercase().replace(['-', '_'], "").as_str() {
        "buffered" => Durability::Buffered,
        "processsafe" | "process" => Durability::ProcessSafe,
        "powersafe" | "power" | "sync" => Durability::PowerSafe,
        other => {
            return Err(bad_arg(format!(
                "unknown durability '{other}' (buffered, process_safe, power_safe)"
            )));
        }
    })
}

fn seconds(v: &Bound<'_, PyAny>) -> PyResult<Option<Duration>> {
    if v.is_none() {
        return Ok(None);
    }
    let s: f64 = v.extract()?;
    if !s.is_finite() || s < 0.0 {
        return Err(bad_arg("a duration in seconds must be finite and not negative"));
    }
    Ok(Some(Duration::from_secs_f64(s)))
}

/// Database options from `connect(**options)`; an unknown name is an error.
fn options(read_only: bool, opts: Option<&Bound<'_, PyDict>>) -> PyResult<Options> {
    let mut o = Options { read_only, ..Options::default() };
    let Some(opts) = opts else { return Ok(o) };
    for (k, v) in opts.iter() {
        let k: String = k.extract()?;
        match k.as_str() {
            "durability" => o.durability = parse_durability(&v.extract::<String>()?)?,
            "memory_limit" => {
                o.sql_memory_limit = if v.is_none() { None } else { Some(v.extract()?) }
            }
            "lock_timeout" => o.lock_timeout = seconds(&v)?.unwrap_or_default(),
            "statement_timeout" => o.statement_timeout = seconds(&v)?,
            "memtable_flush_rows" => o.memtable_flush_rows = v.extract()?,
            "bulk_insert_rows" => o.bulk_insert_rows = v.extract()?,
            "auto_compact" => o.auto_compact = v.extract()?,
            other => {
                return Err(bad_arg(format!(
                    "unknown option '{other}' (durability, memory_limit, lock_timeout, \
                     statement_timeout, memtable_flush_rows, bulk_insert_rows, auto_compact)"
                )));
            }
        }
    }
    Ok(o)
}

/// Opens (or shares) a database and makes a connection on it.
#[pyfunction]
#[pyo3(signature = (path=None, read_only=false, options=None))]
pub fn open(
    py: Python<'_>,
    path: Option<PathBuf>,
    read_only: bool,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<NativeConnection> {
    let opts = self::options(read_only, options)?;
    let Some(path) = path.filter(|p| p.as_os_str() != ":memory:") else {
        let db = py.detach(|| basalt::Database::open_in_memory_with(opts)).py_err()?;
        return Ok(NativeConnection::new(db, None));
    };
    // The same file by any spelling: the canonical path once it exists.
    let canonical = std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone());
    let key = (canonical, read_only);
    let mut open = OPEN.lock();
    let map = open.get_or_insert_with(HashMap::new);
    if let Some((db, n)) = map.get_mut(&key) {
        *n += 1;
        return Ok(NativeConnection::new(db.clone(), Some(key)));
    }
    let db = py.detach(|| basalt::Database::open_with(&path, opts)).py_err()?;
    // A database that did not exist before has a canonical path now.
    let key = (std::fs::canonicalize(&path).unwrap_or(key.0), read_only);
    map.entry(key.clone()).or_insert_with(|| (db.clone(), 0)).1 += 1;
    Ok(NativeConnection::new(db, Some(key)))
}

impl NativeConnection {
    fn new(db: basalt::Database, key: Option<OpenKey>) -> NativeConnection {
        let conn = db.connect();
        NativeConnection {
            handles: RwLock::new(Some((db, conn))),
            key,
            statements: Mutex::new(HashMap::new()),
        }
    }

    /// The database and the connection, or `InterfaceError` once closed.
    fn handles(&self) -> PyResult<(basalt::Database, basalt::Connection)> {
        self.handles
            .read()
            .clone()
            .ok_or_else(|| InterfaceError::new_err("the connection is closed"))
    }

    /// A prepared statement for `sql` (already rewritten), from the cache or made now;
    /// `None` when `prepare` refuses the text (remembered as such).
    fn statement(
        &self,
        conn: &basalt::Connection,
        sql: &str,
    ) -> basalt::Result<Option<basalt::Statement>> {
        if let Some(s) = self.statements.lock().get(sql) {
            return Ok(s.clone());
        }
        let (s, out) = match conn.prepare(sql) {
            Ok(s) => (Some(s.clone()), Ok(Some(s))),
            Err(e) => (None, Err(e)),
        };
        let mut cache = self.statements.lock();
        if cache.len() >= CACHED_STATEMENTS {
            cache.clear();
        }
        cache.insert(sql.to_string(), s);
        out
    }

    /// Forgets every kept statement (the catalog or the connection's names changed).
    fn forget_statements(&self) {
        self.statements.lock().clear();
    }

    /// The database handle shared by this connection, for the memory store.
    pub(crate) fn database(&self) -> PyResult<basalt::Database> {
        Ok(self.handles()?.0)
    }

    /// Runs a cached prepared statement (with parameters, so it must prepare); one whose
    /// tables changed shape since it was prepared is prepared again once.
    fn run_prepared(
        &self,
        conn: &basalt::Connection,
        sql: &str,
        values: &[Value],
    ) -> basalt::Result<Vec<RecordBatch>> {
        let run = || match self.statement(conn, sql)? {
            Some(s) => s.execute(values),
            // Refused before (by an earlier text run): prepare again for its error.
            None => conn.prepare(sql)?.execute(values),
        };
        match run() {
            Err(e) if e.to_string().contains("prepare it again") => {
                self.statements.lock().remove(sql);
                run()
            }
            r => r,
        }
    }

    /// Runs text without parameters: one preparable statement through the statement cache
    /// (its plan kept, as for statements with parameters); a script, DDL, transaction
    /// control — or a text that fails to prepare, whose error running it reports — as text.
    fn run_text(&self, conn: &basalt::Connection, sql: &str) -> basalt::Result<Vec<RecordBatch>> {
        if changes_catalog(sql) {
            self.forget_statements();
            return conn.sql(sql);
        }
        match self.statement(conn, sql) {
            Ok(Some(_)) => self.run_prepared(conn, sql, &[]),
            Ok(None) | Err(_) => conn.sql(sql),
        }
    }

    fn table(&self, name: &str) -> PyResult<basalt::Table> {
        self.handles()?.1.table(name).map_err(to_py)
    }

    fn release(&self) {
        let Some((_, conn)) = self.handles.write().take() else { return };
        if conn.in_transaction() {
            let _ = conn.rollback();
        }
        self.forget_statements();
        if let Some(key) = &self.key {
            let mut open = OPEN.lock();
            if let Some(map) = open.as_mut()
                && let Some((_, n)) = map.get_mut(key)
            {
                *n -= 1;
                if *n == 0 {
                    map.remove(key);
                }
            }
        }
    }
}

impl Drop for NativeConnection {
    fn drop(&mut self) {
        self.release();
    }
}

/// Words that start statements changing the catalog: the statement cache starts over.
fn changes_catalog(sql: &str) -> bool {
    let word = crate::params::first_word(sql);
    matches!(word.as_str(), "CREATE" | "DROP" | "ALTER" | "SET" | "RESET")
}

/// `executemany` of a plain `INSERT … VALUES ($1, …)` as one insert of all its rows
/// through the table API (one batch, one commit instead of a statement per row). `None`
/// when that does not apply — an unknown table or column, a parameter count that does not
/// match, or a value the table API does not take as it is (text for a date, a float for an
/// integer, …) — and then nothing was written: the statement runs row by row, as SQL casts.
fn insert_rows(
    conn: &basalt::Connection,
    p: &params::PlainInsert,
    rows: &[Vec<Value>],
) -> basalt::Result<Option<u64>> {
    // Unquoted names fold to lower case, as the engine's SQL does by default.
    let name = |(n, quoted): &(String, bool)| if *quoted { n.clone() } else { n.to_lowercase() };
    let Ok(t) = conn.table(&name(&p.table)) else { return Ok(None) };
    let schema = t.schema()?;
    let columns: Vec<String> = if p.columns.is_empty() {
        schema.fields().iter().map(|f| f.name().clone()).filter(|n| n != "_id").collect()
    } else {
        p.columns.iter().map(name).collect()
    };
    if columns.len() != p.params
        || columns.iter().any(|c| c == "_id" || schema.field_with_name(c).is_err())
        || rows.iter().any(|r| r.len() != p.params)
    {
        return Ok(None);
    }
    let rows: Vec<basalt::Row> = rows
        .iter()
        .map(|r| {
            columns.iter().zip(r).fold(basalt::Row::new(), |row, (c, v)| row.set(c, v.clone()))
        })
        .collect();
    match t.insert_rows(&rows) {
        Ok(ids) => Ok(Some(ids.count)),
        // Refused before anything was written: a value to cast as SQL would.
        Err(basalt::Error::InvalidValue { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A row from a dict of column name → value.
fn row(values: &Bound<'_, PyDict>) -> PyResult<basalt::Row> {
    let mut row = basalt::Row::new();
    for (k, v) in values.iter() {
        let name: String =
            k.extract().map_err(|_| bad_arg("a row's keys are column names (str)"))?;
        row = row.set(&name, convert::param(&v)?);
    }
    Ok(row)
}

/// A vector from little-endian float32 bytes.
fn floats(bytes: &[u8]) -> PyResult<Vec<f32>> {
    if !bytes.len().is_multiple_of(4) {
        return Err(bad_arg("a vector's bytes must be float32 values"));
    }
    Ok(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

fn metric(name: &str) -> PyResult<Metric> {
    name.parse::<Metric>().map_err(|e| bad_arg(e.to_string()))
}

/// Ids and distances as two byte strings (`uint64` and `float32`, little-endian) that numpy
/// reads without a copy per element.
fn id_bytes<'py>(
    py: Python<'py>,
    ids: impl Iterator<Item = u64>,
    scores: impl Iterator<Item = f32>,
) -> (Bound<'py, PyBytes>, Bound<'py, PyBytes>) {
    let ids: Vec<u8> = ids.flat_map(u64::to_le_bytes).collect();
    let scores: Vec<u8> = scores.flat_map(f32::to_le_bytes).collect();
    (PyBytes::new(py, &ids), PyBytes::new(py, &scores))
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[pymethods]
impl NativeConnection {
    /// Runs SQL: a script of statements without parameters, or one statement with them.
    #[pyo3(signature = (sql, params=None))]
    fn execute(
        &self,
        py: Python<'_>,
        sql: &str,
        params: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<QueryResult> {
        let (_, conn) = self.handles()?;
        let values = convert::params(params)?;
        let (text, highest) = params::rewrite(sql);
        if highest != values.len() && !(highest == 0 && values.is_empty()) {
            return Err(ProgrammingError::new_err(format!(
                "the statement takes {highest} parameter(s), {} given",
                values.len()
            )));
        }
        let batches = if values.is_empty() && highest == 0 {
            py.detach(|| self.run_text(&conn, sql)).py_err()?
        } else {
            py.detach(|| self.run_prepared(&conn, &text, &values)).py_err()?
        };
        Ok(QueryResult::new(sql, batches))
    }

    /// Runs a query (or the last statement of a script) and returns its rows as a stream
    /// that produces them as it is read.
    fn stream(&self, py: Python<'_>, sql: &str) -> PyResult<crate::result::QueryStream> {
        let (_, conn) = self.handles()?;
        if changes_catalog(sql) {
            self.forget_statements();
        }
        let rows = py.detach(|| conn.sql_stream(sql)).py_err()?;
        Ok(crate::result::QueryStream::new(rows))
    }

    /// Runs one statement once per parameter row, in one transaction (all or nothing).
    /// Returns the number of rows the statement changed in total.
    fn execute_many(&self, py: Python<'_>, sql: &str, rows: &Bound<'_, PyAny>) -> PyResult<u64> {
        let (_, conn) = self.handles()?;
        let (text, _) = params::rewrite(sql);
        let rows = rows
            .try_iter()?
            .map(|r| convert::params(Some(&r?)))
            .collect::<PyResult<Vec<Vec<Value>>>>()?;
        let plain = params::plain_insert(&text);
        py.detach(|| {
            let own = !conn.in_transaction();
            if own {
                conn.begin()?;
            }
            let run = || -> basalt::Result<u64> {
                if let Some(p) = &plain
                    && let Some(n) = insert_rows(&conn, p, &rows)?
                {
                    return Ok(n);
                }
                let mut n = 0;
                for r in &rows {
                    n += crate::result::changed_rows(&self.run_prepared(&conn, &text, r)?);
                }
                Ok(n)
            };
            match run() {
                Ok(n) => {
                    if own {
                        conn.commit()?;
                    }
                    Ok(n)
                }
                Err(e) => {
                    if own {
                        let _ = conn.rollback();
                    }
                    Err(e)
                }
            }
        })
        .py_err()
    }

    /// Starts a transaction.
    fn begin(&self, py: Python<'_>) -> PyResult<()> {
        let (_, conn) = self.handles()?;
        py.detach(|| conn.begin()).py_err()
    }

    /// Commits the open transaction; nothing when none is open.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let (_, conn) = self.handles()?;
        if !conn.in_transaction() {
            return Ok(());
        }
        py.detach(|| conn.commit()).py_err()
    }

    /// Rolls the open transaction back; nothing when none is open.
    fn rollback(&self, py: Python<'_>) -> PyResult<()> {
        let (_, conn) = self.handles()?;
        if !conn.in_transaction() {
            return Ok(());
        }
        py.detach(|| conn.rollback()).py_err()
    }

    /// True between `begin` and `commit` / `rollback`.
    #[getter]
    fn in_transaction(&self) -> bool {
        self.handles.read().as_ref().is_some_and(|(_, c)| c.in_transaction())
    }

    /// A new connection on the same database, with its own transactions.
    fn duplicate(&self) -> PyResult<NativeConnection> {
        let (db, _) = self.handles()?;
        if let Some(key) = &self.key
            && let Some(map) = OPEN.lock().as_mut()
            && let Some((_, n)) = map.get_mut(key)
        {
            *n += 1;
        }
        Ok(NativeConnection::new(db, self.key.clone()))
    }

    /// Stops the statement running on this connection (from another thread).
    fn interrupt(&self) {
        if let Some((_, c)) = self.handles.read().as_ref() {
            c.interrupt();
        }
    }

    /// Closes the connection (rolling back an open transaction); the database closes with
    /// its last connection.
    fn close(&self) {
        self.release();
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.handles.read().is_none()
    }

    /// Writes memtables to segments and empties the log.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let (db, _) = self.handles()?;
        py.detach(|| db.flush()).py_err()
    }

    /// The database's tables.
    fn tables(&self) -> PyResult<Vec<String>> {
        let (db, _) = self.handles()?;
        Ok(db.list_tables())
    }

    /// The Arrow schema of a table, as a result with no rows.
    fn table_schema(&self, table: &str) -> PyResult<QueryResult> {
        self.handles()?;
        let schema = self.table(table)?.schema().py_err()?;
        Ok(QueryResult::empty(schema))
    }

    /// Inserts Arrow data (any `__arrow_c_stream__` source) into a table, creating the
    /// table from the data's schema when it does not exist. Returns the rows inserted.
    fn insert(&self, py: Python<'_>, table: &str, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let (db, conn) = self.handles()?;
        let (schema, batches) = arrow::import(data)?;
        let t = match conn.table(table) {
            Ok(t) => t,
            Err(basalt::Error::Storage(StorageError::TableNotFound { .. })) => {
                let schema = arrow::storable_schema(&schema);
                py.detach(|| -> basalt::Result<basalt::Table> {
                    db.create_table(table, &schema)?;
                    conn.table(table)
                })
                .py_err()?
            }
            Err(e) => return Err(to_py(e)),
        };
        let target: SchemaRef = t.schema().py_err()?;
        let batches = arrow::fit(table, &target, batches)?;
        let n: usize = batches.iter().map(RecordBatch::num_rows).sum();
        if n == 0 {
            return Ok(0);
        }
        py.detach(|| t.insert_batches(&batches)).py_err()?;
        Ok(n as u64)
    }

    /// Makes Arrow data (any `__arrow_c_stream__` source) a read-only table of this
    /// connection only, queried in place (the batches are imported, not copied).
    fn register(&self, py: Python<'_>, name: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let (_, conn) = self.handles()?;
        let (schema, batches) = arrow::import(data)?;
        // Kept statements may name what this replaces.
        self.forget_statements();
        py.detach(|| conn.register(name, schema, batches)).py_err()
    }

    /// Removes a registration; false when `name` was not registered.
    fn unregister(&self, name: &str) -> PyResult<bool> {
        let (_, conn) = self.handles()?;
        self.forget_statements();
        conn.unregister(name).py_err()
    }

    /// Creates a table from an Arrow schema source (`__arrow_c_stream__` data whose schema
    /// is used; its rows are not inserted).
    fn create_table(&self, py: Python<'_>, table: &str, data: &Bound<'_, PyAny>) -> PyResult<()> {
        let (db, _) = self.handles()?;
        let (schema, _) = arrow::import(data)?;
        let schema: Schema = arrow::storable_schema(&schema);
        py.detach(|| db.create_table(table, &schema).map(|_| ())).py_err()
    }

    /// The `k` rows nearest to each query (`queries`: `n × dim` float32 bytes), optionally
    /// among the rows where the SQL condition `where_` holds. Returns per query the ids and
    /// distances as byte strings.
    #[pyo3(signature = (table, column, queries, dim, k, metric_name, where_=None, params=None))]
    #[allow(clippy::too_many_arguments)]
    fn topk<'py>(
        &self,
        py: Python<'py>,
        table: &str,
        column: &str,
        queries: &[u8],
        dim: usize,
        k: usize,
        metric_name: &str,
        where_: Option<&str>,
        params: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Vec<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)>> {
        let (_, conn) = self.handles()?;
        let m = metric(metric_name)?;
        let flat = floats(queries)?;
        if dim == 0 || flat.len() % dim != 0 {
            return Err(bad_arg("queries must be a whole number of vectors of the dimension"));
        }
        let qs: Vec<&[f32]> = flat.chunks_exact(dim).collect();
        let Some(cond) = where_ else {
            let t = self.table(table)?;
            let hits = py.detach(|| t.batch_topk(column, &qs, k, m)).py_err()?;
            return Ok(hits
                .into_iter()
                .map(|h| id_bytes(py, h.iter().map(|n| n.id), h.iter().map(|n| n.distance)))
                .collect());
        };
        // A filter in SQL: `ORDER BY distance LIMIT k` runs as the storage top-k with the
        // condition pushed into the scan.
        let extra = convert::params(params)?;
        let (cond, used) = params::rewrite(cond);
        if used != extra.len() {
            return Err(ProgrammingError::new_err(format!(
                "the condition takes {used} parameter(s), {} given",
                extra.len()
            )));
        }
        let q = extra.len() + 1;
        let (func, order) = match m {
            Metric::L2 => ("l2_distance", ""),
            Metric::L2Squared => ("l2sq_distance", ""),
            Metric::Cosine => ("cosine_distance", ""),
            Metric::Dot => ("inner_product", " DESC"),
        };
        let col = quote(column);
        let sql = format!(
            "SELECT _id, {func}({col}, ${q}) AS d FROM {} WHERE ({cond}) AND {col} IS NOT NULL \
             ORDER BY d{order} LIMIT {k}",
            quote(table)
        );
        let mut out = Vec::with_capacity(qs.len());
        for query in qs {
            let mut values = extra.clone();
            values.push(Value::Vector(query.to_vec()));
            let batches = py.detach(|| self.run_prepared(&conn, &sql, &values)).py_err()?;
            let mut ids = Vec::new();
            let mut dists = Vec::new();
            for b in &batches {
                let id =
                    arrow_cast::cast(b.column(0), &DataType::UInt64).map_err(arrow::arrow_err)?;
                let d =
                    arrow_cast::cast(b.column(1), &DataType::Float32).map_err(arrow::arrow_err)?;
                let (id, d) = (
                    id.as_any().downcast_ref::<arrow_array::UInt64Array>(),
                    d.as_any().downcast_ref::<arrow_array::Float32Array>(),
                );
                let (Some(id), Some(d)) = (id, d) else { continue };
                for i in 0..b.num_rows() {
                    use arrow_array::Array;
                    if d.is_valid(i) && !d.value(i).is_nan() {
                        ids.push(id.value(i));
                        // The inner product as a distance, as the storage top-k gives it.
                        dists.push(if m == Metric::Dot { -d.value(i) } else { d.value(i) });
                    }
                }
            }
            out.push(id_bytes(py, ids.into_iter(), dists.into_iter()));
        }
        Ok(out)
    }

    /// Creates a table's full-text index over `columns`.
    #[pyo3(signature = (table, columns, tokenizer="default"))]
    fn create_fts_index(
        &self,
        py: Python<'_>,
        table: &str,
        columns: Vec<String>,
        tokenizer: &str,
    ) -> PyResult<()> {
        self.handles()?;
        let tok: basalt::Tokenizer = tokenizer.parse().map_err(|e| bad_arg(format!("{e}")))?;
        let t = self.table(table)?;
        let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
        py.detach(|| t.create_fts_index(&cols, tok)).py_err()
    }

    /// BM25 full-text search: ids and scores (best first) as byte strings.
    #[pyo3(signature = (table, query, k=None, column=None))]
    fn search_text<'py>(
        &self,
        py: Python<'py>,
        table: &str,
        query: &str,
        k: Option<usize>,
        column: Option<&str>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        self.handles()?;
        let t = self.table(table)?;
        let hits = py
            .detach(|| match column {
                Some(c) => t.search_text_in(c, query, k),
                None => t.search_text(query, k),
            })
            .py_err()?;
        Ok(id_bytes(py, hits.iter().map(|h| h.id), hits.iter().map(|h| h.score)))
    }

    /// Hybrid search (full-text and vector ranks fused by reciprocal rank): ids and fused
    /// scores (best first) as byte strings.
    #[pyo3(signature = (table, text, column, vector, k, metric_name="cosine", text_weight=1.0, vector_weight=1.0, candidates=100))]
    #[allow(clippy::too_many_arguments)]
    fn hybrid_search<'py>(
        &self,
        py: Python<'py>,
        table: &str,
        text: &str,
        column: &str,
        vector: &[u8],
        k: usize,
        metric_name: &str,
        text_weight: f32,
        vector_weight: f32,
        candidates: usize,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyBytes>)> {
        self.handles()?;
        let m = metric(metric_name)?;
        let v = floats(vector)?;
        let t = self.table(table)?;
        let opts = basalt::Hybrid { text_weight, vector_weight, candidates, ..Default::default() };
        let hits = py.detach(|| t.hybrid_search(text, column, &v, m, k, opts)).py_err()?;
        Ok(id_bytes(py, hits.iter().map(|h| h.id), hits.iter().map(|h| h.score)))
    }

    /// Rows of a table by `_id`, in the order given (missing ids are left out).
    #[pyo3(signature = (table, ids, columns=None))]
    fn get_many(
        &self,
        py: Python<'_>,
        table: &str,
        ids: Vec<u64>,
        columns: Option<Vec<String>>,
    ) -> PyResult<QueryResult> {
        self.handles()?;
        let t = self.table(table)?;
        let batch = py
            .detach(|| match &columns {
                Some(c) => {
                    let c: Vec<&str> = c.iter().map(String::as_str).collect();
                    t.get_many_columns(&ids, &c)
                }
                None => t.get_many(&ids),
            })
            .py_err()?;
        Ok(QueryResult::new("SELECT", vec![batch]))
    }

    /// Inserts one row given as column → value; returns its `_id`.
    fn insert_row(&self, py: Python<'_>, table: &str, values: &Bound<'_, PyDict>) -> PyResult<u64> {
        let t = self.table(table)?;
        let row = row(values)?;
        py.detach(|| t.insert_row(row)).py_err()
    }

    /// Sets the given columns on the row with this `_id`; false when there is none.
    fn update_row(
        &self,
        py: Python<'_>,
        table: &str,
        id: u64,
        values: &Bound<'_, PyDict>,
    ) -> PyResult<bool> {
        let t = self.table(table)?;
        let row = row(values)?;
        py.detach(|| t.update(id, row)).py_err()
    }

    /// Deletes the rows with these `_id`s (missing ones ignored); returns how many.
    fn delete_rows(&self, py: Python<'_>, table: &str, ids: Vec<u64>) -> PyResult<u64> {
        let t = self.table(table)?;
        py.detach(|| t.delete_many(&ids)).py_err()
    }

    /// The number of rows of a table (no scan: the table keeps its count).
    fn count_rows(&self, py: Python<'_>, table: &str) -> PyResult<u64> {
        let t = self.table(table)?;
        py.detach(|| t.count()).py_err()
    }

    /// Saves a named checkpoint of the database.
    fn checkpoint(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let (db, _) = self.handles()?;
        py.detach(|| db.checkpoint(name)).py_err()
    }

    /// Restores the database to a named checkpoint.
    fn restore(&self, py: Python<'_>, name: &str) -> PyResult<()> {
        let (db, _) = self.handles()?;
        self.forget_statements();
        py.detach(|| db.restore(name)).py_err()
    }

    /// The database's checkpoints.
    fn checkpoints(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let (db, _) = self.handles()?;
        py.detach(|| db.list_checkpoints()).py_err()
    }

    fn __repr__(&self) -> String {
        match &self.key {
            Some((p, ro)) => format!(
                "<basalt connection to {}{}>",
                p.display(),
                if *ro { " (read-only)" } else { "" }
            ),
            None => "<basalt connection to :memory:>".into(),
        }
    }
}
