//! The engines under test behind one interface: Basalt (this workspace), SQLite (rusqlite,
//! bundled, FTS5) and, with the `duckdb` feature, DuckDB 1.5.5 (prebuilt library).
//!
//! Every engine runs SQL through prepared statements cached by text and bound per call, and
//! materialises every result in full: Arrow batches for Basalt and DuckDB, owned rows for
//! SQLite. Nothing is cached between calls but the prepared statements themselves.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use arrow::array::{Array, RecordBatch};
use basalt::{Database, Durability, Options, Row, Value};

use basalt_benches::check::{Cell, Digest, arrow59};

/// Which engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// Basalt.
    Basalt,
    /// SQLite through rusqlite.
    Sqlite,
    /// DuckDB through the duckdb crate.
    Duckdb,
}

impl Kind {
    /// All engines, in report order.
    pub const ALL: [Kind; 3] = [Kind::Basalt, Kind::Sqlite, Kind::Duckdb];

    /// Lower-case name, as `--engines` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Basalt => "basalt",
            Kind::Sqlite => "sqlite",
            Kind::Duckdb => "duckdb",
        }
    }
}

/// A statement parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum P {
    /// Integer.
    I(i64),
    /// Float.
    F(f64),
    /// Text.
    S(String),
}

pub use basalt_benches::BenchRow;

/// A benchmark row as statement parameters.
pub trait Params {
    /// The row's values in column order.
    fn params(&self) -> Vec<P>;
}

impl Params for BenchRow {
    fn params(&self) -> Vec<P> {
        vec![
            P::S(self.name.clone()),
            P::I(self.age),
            P::F(self.score),
            P::S(self.city.into()),
            P::S(self.category.into()),
        ]
    }
}

/// A materialised result.
pub enum Out {
    /// Arrow batches (Basalt).
    Arrow(Vec<RecordBatch>),
    /// Owned rows with column names (SQLite).
    Rows(Vec<String>, Vec<Vec<rusqlite::types::Value>>),
    /// DuckDB's Arrow batches (its own arrow version).
    #[cfg(feature = "duckdb")]
    Duck(Vec<duckdb::arrow::record_batch::RecordBatch>),
    /// A count (affected rows, an id, a direct-API count).
    Count(u64),
    /// Values of a direct-API row lookup.
    Row(Option<Row>),
    /// A list of names.
    Names(Vec<String>),
    /// Nothing to check.
    Unit,
}

impl Out {
    /// The digest the cross-check compares.
    pub fn digest(&self) -> Digest {
        match self {
            Out::Arrow(b) => arrow59::digest(b),
            Out::Rows(cols, rows) => {
                let names: Vec<&str> = cols.iter().map(String::as_str).collect();
                Digest::from_rows(&names, rows.iter().map(|r| r.iter().map(sqlite_cell).collect()))
            }
            #[cfg(feature = "duckdb")]
            Out::Duck(b) => crate::duck::arrow58::digest(b),
            Out::Count(n) => Digest::scalar(*n as f64),
            Out::Row(r) => {
                let vals: Vec<&(String, Value)> = r.iter().flat_map(|r| r.values()).collect();
                let names: Vec<&str> = vals.iter().map(|(n, _)| n.as_str()).collect();
                Digest::from_rows(
                    &names,
                    r.iter().map(|_| vals.iter().map(|(_, v)| value_cell(v)).collect()),
                )
            }
            Out::Names(n) => Digest::names(n),
            Out::Unit => Digest::default(),
        }
    }
}

fn sqlite_cell(v: &rusqlite::types::Value) -> Cell<'_> {
    use rusqlite::types::Value as V;
    match v {
        V::Null => Cell::Null,
        V::Integer(i) => Cell::Num(*i as f64),
        V::Real(f) => Cell::Num(*f),
        V::Text(s) => Cell::Text(s),
        V::Blob(b) => Cell::Bytes(b),
    }
}

fn value_cell(v: &Value) -> Cell<'_> {
    match v {
        Value::Null => Cell::Null,
        Value::Bool(b) => Cell::Num(f64::from(u8::from(*b))),
        Value::Int(i) => Cell::Num(*i as f64),
        Value::UInt(u) => Cell::Num(*u as f64),
        Value::Float(f) => Cell::Num(*f),
        Value::Str(s) => Cell::Text(s),
        Value::Bytes(b) => Cell::Bytes(b),
        _ => Cell::Null,
    }
}

/// Result of harness calls.
pub type Res<T> = Result<T, String>;

/// What every engine offers the metric catalogue.
pub trait Engine {
    /// Which engine this is.
    fn kind(&self) -> Kind;
    /// Runs a query (prepared, bound) and materialises its result.
    fn query(&mut self, sql: &str, params: &[P]) -> Res<Out>;
    /// Runs a statement, returning affected rows where the engine says.
    fn execute(&mut self, sql: &str, params: &[P]) -> Res<u64>;
    /// Runs statements without parameters or results (DDL, BEGIN, ...), unprepared.
    fn batch(&mut self, sql: &str) -> Res<()>;
    /// Inserts one row through the engine's usual single-row path; returns its `_id`.
    fn insert_one(&mut self, row: &BenchRow) -> Res<i64>;
    /// Inserts many rows through the engine's bulk path (one transaction).
    fn insert_many(&mut self, rows: &[BenchRow]) -> Res<()>;
    /// Closes and reopens the database (outside any timed region).
    fn reopen(&mut self) -> Res<()>;
    /// Sets the durability of the following commits: `true` survives power loss.
    fn set_power_safe(&mut self, on: bool) -> Res<()>;
    /// Another handle on the same database for another thread (Basalt: a new connection
    /// on the shared `Database`; SQLite: a new connection to the file; DuckDB: a cloned
    /// connection on the same instance).
    fn fork(&self) -> Res<Box<dyn Engine + Send>>;
    /// The Basalt engine, for direct-API metrics.
    fn basalt(&mut self) -> Option<&mut BasaltEngine> {
        None
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Basalt: one database directory, one connection, prepared statements cached by text.
pub struct BasaltEngine {
    dir: PathBuf,
    db: Option<Database>,
    conn: Option<basalt::Connection>,
    prepared: HashMap<String, basalt::Statement>,
    power_safe: bool,
}

impl BasaltEngine {
    /// Opens (creating) the database in `dir`.
    pub fn open(dir: &Path) -> Res<Self> {
        let mut e = BasaltEngine {
            dir: dir.to_path_buf(),
            db: None,
            conn: None,
            prepared: HashMap::new(),
            power_safe: false,
        };
        e.reopen()?;
        Ok(e)
    }

    /// The database handle.
    pub fn db(&self) -> &Database {
        self.db.as_ref().expect("open between calls")
    }

    /// The connection.
    pub fn conn(&self) -> &basalt::Connection {
        self.conn.as_ref().expect("open between calls")
    }

    /// The benchmark table's handle.
    pub fn bench(&self) -> Res<basalt::Table> {
        self.conn().table("bench").map_err(err)
    }

    fn prepared(&mut self, sql: &str) -> Res<Option<basalt::Statement>> {
        if let Some(s) = self.prepared.get(sql) {
            return Ok(Some(s.clone()));
        }
        match self.conn().prepare(sql) {
            Ok(s) => {
                self.prepared.insert(sql.to_string(), s.clone());
                Ok(Some(s))
            }
            // DDL and transaction control are not preparable: run them directly.
            Err(basalt::Error::Sql(e)) if e.to_string().contains("can be prepared") => Ok(None),
            Err(e) => Err(err(e)),
        }
    }

    fn run(&mut self, sql: &str, params: &[P]) -> Res<Vec<RecordBatch>> {
        match self.prepared(sql)? {
            Some(stmt) => {
                let vals: Vec<Value> = params.iter().map(to_value).collect();
                match stmt.execute(&vals) {
                    Ok(b) => Ok(b),
                    Err(e) if e.to_string().contains("prepare") => {
                        // The schema changed under the statement: prepare it again.
                        self.prepared.remove(sql);
                        let stmt = self.prepared(sql)?.ok_or("statement became unpreparable")?;
                        stmt.execute(&vals).map_err(err)
                    }
                    Err(e) => Err(err(e)),
                }
            }
            None => {
                if !params.is_empty() {
                    return Err(format!("parameters given to an unpreparable statement: {sql}"));
                }
                // Schema changes make cached plans stale.
                self.prepared.clear();
                self.conn().sql(sql).map_err(err)
            }
        }
    }
}

fn to_value(p: &P) -> Value {
    match p {
        P::I(i) => Value::Int(*i),
        P::F(f) => Value::Float(*f),
        P::S(s) => Value::Str(s.clone()),
    }
}

fn basalt_row(r: &BenchRow) -> Row {
    Row::new()
        .set("name", r.name.as_str())
        .set("age", r.age)
        .set("score", r.score)
        .set("city", r.city)
        .set("category", r.category)
}

/// The count a Basalt DML statement reports (first column of its one row).
fn affected(batches: &[RecordBatch]) -> u64 {
    batches
        .iter()
        .find(|b| b.num_rows() > 0 && b.num_columns() > 0)
        .and_then(|b| {
            let c = arrow::compute::cast(b.column(0), &arrow::datatypes::DataType::UInt64).ok()?;
            let c = c.as_any().downcast_ref::<arrow::array::UInt64Array>()?;
            c.is_valid(0).then(|| c.value(0))
        })
        .unwrap_or(0)
}

impl Engine for BasaltEngine {
    fn kind(&self) -> Kind {
        Kind::Basalt
    }
    fn query(&mut self, sql: &str, params: &[P]) -> Res<Out> {
        self.run(sql, params).map(Out::Arrow)
    }
    fn execute(&mut self, sql: &str, params: &[P]) -> Res<u64> {
        self.run(sql, params).map(|b| affected(&b))
    }
    fn batch(&mut self, sql: &str) -> Res<()> {
        // Transaction control leaves the catalog alone, so cached statements stay valid;
        // anything else may change a schema.
        let word = sql.split_whitespace().next().unwrap_or("").to_ascii_uppercase();
        if !matches!(word.as_str(), "BEGIN" | "COMMIT" | "ROLLBACK") {
            self.prepared.clear();
        }
        self.conn().sql(sql).map(|_| ()).map_err(err)
    }
    fn insert_one(&mut self, row: &BenchRow) -> Res<i64> {
        let t = self.bench()?;
        t.insert_row(basalt_row(row)).map(|id| id as i64).map_err(err)
    }
    fn insert_many(&mut self, rows: &[BenchRow]) -> Res<()> {
        let t = self.bench()?;
        let batch = crate::data::batch_of(rows);
        t.insert(&batch).map(|_| ()).map_err(err)
    }
    fn reopen(&mut self) -> Res<()> {
        self.prepared.clear();
        self.conn = None;
        if let Some(db) = self.db.take() {
            db.close().map_err(err)?;
        }
        let db = Database::open_with(&self.dir, Options::default()).map_err(err)?;
        let conn = db.connect();
        self.db = Some(db);
        self.conn = Some(conn);
        let on = self.power_safe;
        self.set_power_safe(on)
    }
    fn set_power_safe(&mut self, on: bool) -> Res<()> {
        self.power_safe = on;
        self.conn().set_durability(on.then_some(Durability::PowerSafe));
        Ok(())
    }
    fn fork(&self) -> Res<Box<dyn Engine + Send>> {
        let db = self.db().clone();
        let conn = db.connect();
        Ok(Box::new(BasaltEngine {
            dir: self.dir.clone(),
            db: Some(db),
            conn: Some(conn),
            prepared: HashMap::new(),
            power_safe: self.power_safe,
        }))
    }
    fn basalt(&mut self) -> Option<&mut BasaltEngine> {
        Some(self)
    }
}

/// SQLite: WAL mode, `synchronous=OFF` (a killed process loses nothing committed; power loss
/// may) or `FULL` for the power-safe tier, a 1 GiB page cache and memory-mapped reads.
pub struct SqliteEngine {
    path: PathBuf,
    conn: Option<rusqlite::Connection>,
    power_safe: bool,
}

impl SqliteEngine {
    /// Opens (creating) the database file `path`.
    pub fn open(path: &Path) -> Res<Self> {
        let mut e = SqliteEngine { path: path.to_path_buf(), conn: None, power_safe: false };
        e.reopen()?;
        Ok(e)
    }

    fn c(&self) -> &rusqlite::Connection {
        self.conn.as_ref().expect("open between calls")
    }
}

fn sqlite_params(params: &[P]) -> Vec<rusqlite::types::Value> {
    params
        .iter()
        .map(|p| match p {
            P::I(i) => rusqlite::types::Value::Integer(*i),
            P::F(f) => rusqlite::types::Value::Real(*f),
            P::S(s) => rusqlite::types::Value::Text(s.clone()),
        })
        .collect()
}

impl Engine for SqliteEngine {
    fn kind(&self) -> Kind {
        Kind::Sqlite
    }
    fn query(&mut self, sql: &str, params: &[P]) -> Res<Out> {
        let mut stmt = self.c().prepare_cached(sql).map_err(err)?;
        let cols: Vec<String> = stmt.column_names().map(String::from).collect();
        let n = cols.len();
        let mut rows =
            stmt.query(rusqlite::params_from_iter(sqlite_params(params))).map_err(err)?;
        let mut out = Vec::new();
        while let Some(r) = rows.next().map_err(err)? {
            let mut row = Vec::with_capacity(n);
            for i in 0..n {
                row.push(r.get::<_, rusqlite::types::Value>(i).map_err(err)?);
            }
            out.push(row);
        }
        Ok(Out::Rows(cols, out))
    }
    fn execute(&mut self, sql: &str, params: &[P]) -> Res<u64> {
        let mut stmt = self.c().prepare_cached(sql).map_err(err)?;
        stmt.execute(rusqlite::params_from_iter(sqlite_params(params)))
            .map(|n| n as u64)
            .map_err(err)
    }
    fn batch(&mut self, sql: &str) -> Res<()> {
        self.c().execute_batch(sql).map_err(err)
    }
    fn insert_one(&mut self, row: &BenchRow) -> Res<i64> {
        self.execute(INSERT_SQL, &row.params())?;
        Ok(self.c().last_insert_rowid())
    }
    fn insert_many(&mut self, rows: &[BenchRow]) -> Res<()> {
        let c = self.c();
        c.execute_batch("BEGIN").map_err(err)?;
        {
            let mut stmt = c.prepare_cached(INSERT_SQL).map_err(err)?;
            for r in rows {
                stmt.execute(rusqlite::params![r.name, r.age, r.score, r.city, r.category])
                    .map_err(err)?;
            }
        }
        c.execute_batch("COMMIT").map_err(err)
    }
    fn reopen(&mut self) -> Res<()> {
        if let Some(c) = self.conn.take() {
            c.close().map_err(|(_, e)| err(e))?;
        }
        let c = rusqlite::Connection::open(&self.path).map_err(err)?;
        c.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA cache_size=-1048576; PRAGMA mmap_size=1073741824; \
             PRAGMA temp_store=MEMORY;",
        )
        .map_err(err)?;
        c.set_prepared_statement_cache_capacity(256);
        self.conn = Some(c);
        let on = self.power_safe;
        self.set_power_safe(on)
    }
    fn set_power_safe(&mut self, on: bool) -> Res<()> {
        self.power_safe = on;
        self.c()
            .execute_batch(if on { "PRAGMA synchronous=FULL" } else { "PRAGMA synchronous=OFF" })
            .map_err(err)
    }
    fn fork(&self) -> Res<Box<dyn Engine + Send>> {
        let mut e =
            SqliteEngine { path: self.path.clone(), conn: None, power_safe: self.power_safe };
        e.reopen()?;
        Ok(Box::new(e))
    }
}

/// The single-row insert every SQL engine runs (`_id` is assigned by the engine).
pub const INSERT_SQL: &str =
    "INSERT INTO bench (name, age, score, city, category) VALUES ($1, $2, $3, $4, $5)";

/// Creates the benchmark tables and bulk-loads `rows` into `bench` (the load metric times
/// this). `meta` is created and filled as well.
pub fn create_schema(e: &mut dyn Engine) -> Res<()> {
    match e.kind() {
        Kind::Basalt => {
            let b = e.basalt().ok_or("basalt")?;
            b.db().create_table("bench", &crate::data::bench_schema()).map_err(err)?;
        }
        Kind::Sqlite => e.batch(
            "CREATE TABLE bench (_id INTEGER PRIMARY KEY, name TEXT NOT NULL, age INTEGER NOT NULL, \
             score REAL NOT NULL, city TEXT NOT NULL, category TEXT NOT NULL)",
        )?,
        Kind::Duckdb => e.batch(
            "CREATE SEQUENCE bench_id START 1; \
             CREATE TABLE bench (_id BIGINT PRIMARY KEY DEFAULT nextval('bench_id'), \
             name VARCHAR NOT NULL, age BIGINT NOT NULL, score DOUBLE NOT NULL, \
             city VARCHAR NOT NULL, category VARCHAR NOT NULL)",
        )?,
    }
    let meta_type = if e.kind() == Kind::Sqlite { "TEXT" } else { "VARCHAR" };
    e.batch(&format!("CREATE TABLE meta (city {meta_type}, pop BIGINT)"))?;
    let values: Vec<String> =
        crate::data::META.iter().map(|(c, p)| format!("('{c}', {p})")).collect();
    e.batch(&format!("INSERT INTO meta VALUES {}", values.join(", ")))
}

/// Opens every engine asked for under `dir`.
pub fn open_all(dir: &Path, kinds: &[Kind]) -> Res<Vec<Box<dyn Engine>>> {
    let mut out: Vec<Box<dyn Engine>> = Vec::new();
    for k in kinds {
        match k {
            Kind::Basalt => out.push(Box::new(BasaltEngine::open(&dir.join("basalt"))?)),
            Kind::Sqlite => out.push(Box::new(SqliteEngine::open(&dir.join("sqlite.db"))?)),
            #[cfg(feature = "duckdb")]
            Kind::Duckdb => {
                out.push(Box::new(crate::duck::DuckEngine::open(&dir.join("duck.db"))?))
            }
            #[cfg(not(feature = "duckdb"))]
            Kind::Duckdb => {
                return Err(
                    "DuckDB needs the `duckdb` feature (see benches/setup-duckdb-peer.sh)".into()
                );
            }
        }
    }
    Ok(out)
}
