//! SQL over files: `read_parquet`, `read_csv` and `read_json` table functions.
//!
//! DataFusion has no such functions, and its table functions are synchronous while schema
//! inference reads the files. So the dispatcher resolves them before planning: each
//! `read_xxx(…)` in a FROM clause is replaced by a reference to a listing table registered
//! (for the duration of the statement) in the `basalt_files` schema, built with DataFusion's
//! file formats and an inferred or given schema. Scans of such tables stream (bounded
//! memory), so `CREATE TABLE t AS SELECT * FROM read_csv(…)` and `INSERT … SELECT` import
//! files larger than memory. (Plain `FROM 'f.parquet'` is DataFusion's URL tables.)
//!
//! Arguments: the path (a file, a directory, or a glob) first, then options written
//! `name = value` (or `name => value`):
//! - `read_csv`: `header` (bool, default true), `delimiter` (one character, default `,`),
//!   `quote` (one character), `schema` (column definitions as in CREATE TABLE, e.g.
//!   `'a INT, b TEXT'`; default: inferred);
//! - `read_json` (newline-delimited JSON): `schema`;
//! - `read_parquet`: none.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::memory::MemorySchemaProvider;
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::file_format::FileFormat;
use datafusion::datasource::file_format::csv::CsvFormat;
use datafusion::datasource::file_format::json::JsonFormat;
use datafusion::datasource::file_format::parquet::ParquetFormat;
use datafusion::datasource::listing::{
    ListingOptions, ListingTable, ListingTableConfig, ListingTableUrl,
};
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr as SqlExpr, FunctionArg, FunctionArgExpr, Ident, ObjectName,
    ObjectNamePart, Statement, TableFactor, Value as SqlValue, VisitMut, VisitorMut,
};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// The schema the per-statement file tables are registered in.
pub const FILES_SCHEMA: &str = "basalt_files";

/// DataFusion's URL tables (`SELECT … FROM 'data.parquet'`): a name the catalog does not
/// know is tried as a file path or URL. DataFusion's own factory lists the path through
/// the object store on a blocking thread for every unknown name — including the new name
/// of each `CREATE TABLE` and every misspelt table — which costs two thread hand-offs and a
/// copy of the session state. This one first asks whether the name can be a file at all:
/// a URL (`scheme://`), a glob, or a path that exists; anything else is "no table" at once,
/// which is what the listing would have concluded.
#[derive(Debug, Default)]
pub struct UrlTables {
    state: std::sync::OnceLock<std::sync::Weak<parking_lot::RwLock<SessionState>>>,
}

impl UrlTables {
    /// Gives the factory the session it infers file schemas with.
    pub fn set_state(&self, state: std::sync::Weak<parking_lot::RwLock<SessionState>>) {
        let _ = self.state.set(state);
    }
}

/// Whether `name` can name a file table: a URL, a glob, or an existing path.
fn may_be_file(name: &str) -> bool {
    name.contains("://") || name.contains(['*', '?', '[']) || std::path::Path::new(name).exists()
}

#[async_trait::async_trait]
impl datafusion::catalog::UrlTableFactory for UrlTables {
    async fn try_new(
        &self,
        url: &str,
    ) -> datafusion::error::Result<Option<Arc<dyn TableProvider>>> {
        if !may_be_file(url) {
            return Ok(None);
        }
        let Ok(table_url) = ListingTableUrl::parse(url) else { return Ok(None) };
        let Some(state) = self.state.get().and_then(std::sync::Weak::upgrade) else {
            return Err(datafusion::error::DataFusionError::Internal(
                "the SQL session is gone".into(),
            ));
        };
        let state = state.read().clone();
        use datafusion::datasource::listing::ListingTableConfigExt;
        // A path that is no readable table (wrong format, empty directory) is no table.
        let Ok(config) = ListingTableConfig::new(table_url).infer_options(&state).await else {
            return Ok(None);
        };
        let config = config.infer_partitions_from_path(&state).await?.infer_schema(&state).await?;
        Ok(Some(Arc::new(ListingTable::try_new(config)?)))
    }
}

/// File tables of one connection: registered per statement, removed when it ends.
#[derive(Debug)]
pub struct Files {
    schema: Arc<MemorySchemaProvider>,
    /// The connection's fast-path switch (`read_json` of one file scans with
    /// [`crate::ndjson::NdjsonExec`] while it is on).
    fast: Arc<AtomicBool>,
    next: AtomicU64,
    registered: Mutex<Vec<String>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Parquet,
    Csv,
    Json,
}

/// One `read_xxx(…)` call to resolve.
#[derive(Debug)]
struct Request {
    table: String,
    format: Format,
    args: Vec<FunctionArg>,
}

impl Default for Files {
    fn default() -> Self {
        Files::new(Arc::new(AtomicBool::new(true)))
    }
}

impl Files {
    /// An empty set of file tables; `fast` is the connection's fast-path switch.
    pub fn new(fast: Arc<AtomicBool>) -> Files {
        Files {
            schema: Arc::new(MemorySchemaProvider::new()),
            fast,
            next: AtomicU64::new(1),
            registered: Mutex::new(Vec::new()),
        }
    }

    /// The schema provider to register as [`FILES_SCHEMA`].
    pub fn schema(&self) -> Arc<MemorySchemaProvider> {
        self.schema.clone()
    }

    /// Drops the file tables of the statement that ended (plans that use them keep them).
    pub fn clear(&self) {
        for name in self.registered.lock().drain(..) {
            let _ = self.schema.deregister_table(&name);
        }
    }

    /// Replaces every `read_parquet / read_csv / read_json(…)` in `stmt` by a registered
    /// listing table.
    pub async fn resolve(&self, state: &SessionState, stmt: &mut Statement) -> Result<()> {
        let mut finder = Finder { files: self, found: Vec::new() };
        let _ = stmt.visit(&mut finder);
        for r in finder.found {
            let provider = self.build(state, &r).await?;
            self.schema.register_table(r.table.clone(), provider)?;
            self.registered.lock().push(r.table);
        }
        Ok(())
    }

    async fn build(&self, state: &SessionState, r: &Request) -> Result<Arc<dyn TableProvider>> {
        let fname = match r.format {
            Format::Parquet => "read_parquet",
            Format::Csv => "read_csv",
            Format::Json => "read_json",
        };
        let mut args = r.args.iter();
        let path = match args.next() {
            Some(FunctionArg::Unnamed(FunctionArgExpr::Expr(e))) => string_of(e),
            _ => None,
        }
        .ok_or_else(|| Error::sql(format!("{fname}: the first argument must be a path string")))?;
        let mut header = true;
        let mut delimiter = b',';
        let mut quote = b'"';
        let mut schema_text: Option<String> = None;
        for a in args {
            let (name, value) = option(a).ok_or_else(|| {
                Error::sql(format!("{fname}: options are written name = value, got {a}"))
            })?;
            let allowed = match r.format {
                Format::Csv => &["header", "delimiter", "quote", "schema"][..],
                Format::Json => &["schema"][..],
                Format::Parquet => &[][..],
            };
            if !allowed.contains(&name.as_str()) {
                return Err(Error::sql(format!(
                    "{fname}: unknown option '{name}' (options: {})",
                    if allowed.is_empty() { "none".to_string() } else { allowed.join(", ") }
                )));
            }
            match name.as_str() {
                "header" => {
                    header = bool_of(&value).ok_or_else(|| {
                        Error::sql(format!("{fname}: header must be true or false"))
                    })?
                }
                "delimiter" | "quote" => {
                    let s = string_of(&value).filter(|s| s.len() == 1).ok_or_else(|| {
                        Error::sql(format!("{fname}: {name} must be a one-character string"))
                    })?;
                    let b = s.as_bytes()[0];
                    if name == "delimiter" {
                        delimiter = b;
                    } else {
                        quote = b;
                    }
                }
                _ => {
                    schema_text = Some(string_of(&value).ok_or_else(|| {
                        Error::sql(format!(
                            "{fname}: schema must be a string of column definitions"
                        ))
                    })?)
                }
            }
        }
        let format: Arc<dyn FileFormat> = match r.format {
            Format::Parquet => Arc::new(ParquetFormat::default()),
            Format::Csv => Arc::new(
                CsvFormat::default()
                    .with_has_header(header)
                    .with_delimiter(delimiter)
                    .with_quote(quote),
            ),
            Format::Json => Arc::new(JsonFormat::default()),
        };
        let url = ListingTableUrl::parse(&path)?;
        let p = std::path::Path::new(&path);
        let is_file = p.is_file();
        if !is_file && !path.contains(['*', '?']) && !p.is_dir() {
            let message = if p.exists() {
                format!("{fname}: not a regular file or directory: {path}")
            } else {
                format!("{fname}: no such file or directory: {path}")
            };
            return Err(Error::Execution { message });
        }
        // A file named explicitly is read whatever its extension; a directory by extension.
        let ext = if is_file { String::new() } else { format.get_ext() };
        let options = ListingOptions::new(format).with_file_extension(ext);
        let schema: SchemaRef = match schema_text {
            Some(text) => Arc::new(schema_from_text(state, &text).await?),
            None => options.infer_schema(state, &url).await?,
        };
        let config =
            ListingTableConfig::new(url).with_listing_options(options).with_schema(schema.clone());
        let listing = Arc::new(ListingTable::try_new(config)?);
        if r.format == Format::Json && is_file {
            return Ok(Arc::new(crate::ndjson::NdjsonTable::new(
                listing,
                path.into(),
                schema,
                self.fast.clone(),
            )));
        }
        Ok(listing)
    }
}

struct Finder<'a> {
    files: &'a Files,
    found: Vec<Request>,
}

impl VisitorMut for Finder<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, f: &mut TableFactor) -> ControlFlow<()> {
        let TableFactor::Table { name, args: Some(args), .. } = f else {
            return ControlFlow::Continue(());
        };
        let format = match name.0.as_slice() {
            [ObjectNamePart::Identifier(i)] => match i.value.to_lowercase().as_str() {
                "read_parquet" => Format::Parquet,
                "read_csv" => Format::Csv,
                "read_json" | "read_ndjson" => Format::Json,
                _ => return ControlFlow::Continue(()),
            },
            _ => return ControlFlow::Continue(()),
        };
        let n = self.files.next.fetch_add(1, Ordering::Relaxed);
        let table = format!("file_{n}");
        self.found.push(Request { table: table.clone(), format, args: args.args.clone() });
        *name = ObjectName::from(vec![Ident::new(FILES_SCHEMA), Ident::new(table)]);
        if let TableFactor::Table { args, .. } = f {
            *args = None;
        }
        ControlFlow::Continue(())
    }
}

/// `name = value` or `name => value`.
fn option(a: &FunctionArg) -> Option<(String, SqlExpr)> {
    match a {
        FunctionArg::Named { name, arg: FunctionArgExpr::Expr(e), .. } => {
            Some((name.value.to_lowercase(), e.clone()))
        }
        FunctionArg::Unnamed(FunctionArgExpr::Expr(SqlExpr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        })) => match left.as_ref() {
            SqlExpr::Identifier(i) => Some((i.value.to_lowercase(), (**right).clone())),
            _ => None,
        },
        _ => None,
    }
}

fn string_of(e: &SqlExpr) -> Option<String> {
    match e {
        SqlExpr::Value(v) => match &v.value {
            SqlValue::SingleQuotedString(s) | SqlValue::DoubleQuotedString(s) => Some(s.clone()),
            _ => None,
        },
        _ => None,
    }
}

fn bool_of(e: &SqlExpr) -> Option<bool> {
    match e {
        SqlExpr::Value(v) => match &v.value {
            SqlValue::Boolean(b) => Some(*b),
            _ => None,
        },
        _ => None,
    }
}

/// An Arrow schema from column definitions (`a INT NOT NULL, b TEXT`), typed by DataFusion
/// with Basalt's type planner.
pub(crate) async fn schema_from_text(
    state: &SessionState,
    columns: &str,
) -> Result<datafusion::arrow::datatypes::Schema> {
    let sql = format!("CREATE TABLE basalt_schema_probe ({columns})");
    let stmt = crate::parse::parse_one(state.config().options(), &sql)?;
    let plan = state.statement_to_plan(stmt).await?;
    let LogicalPlan::Ddl(DdlStatement::CreateMemoryTable(c)) = plan else {
        return Err(Error::sql(format!("bad column definitions: {columns}")));
    };
    if !c.column_defaults.is_empty() || !c.constraints.is_empty() {
        return Err(Error::unsupported("DEFAULT values and constraints in a column list"));
    }
    Ok(crate::parse::storable_schema(c.input.schema().as_arrow()))
}
