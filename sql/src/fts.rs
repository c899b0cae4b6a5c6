//! Full-text search in SQL.
//!
//! - `CREATE FTS INDEX [IF NOT EXISTS] ON t (col, …) [WITH (tokenizer = 'default' |
//!   'english' | 'ngram')]` and `DROP FTS INDEX [IF EXISTS] ON t`: DataFusion's parser does
//!   not know them, so [`split_statements`] finds them first (outside quotes and comments)
//!   and the connection runs them on storage.
//! - `fts_search('t', 'query' [, k])`: a table function returning `_id` and the BM25
//!   `score`, best first (every match without `k`), joinable back to `t`.
//! - `fts_match(col, 'query')`: a filter on an indexed column of a Basalt table. The scan
//!   runs the search against the view the statement reads and replaces the call by the set
//!   of matching `_id`s ([`IdSet`]), which storage evaluates (and prunes row groups with);
//!   anywhere else the call is an error that says so.
//!
//! What this module must not do: keep an index of its own. Storage owns the index and keeps
//! it in step with the data; this module only asks it.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, BooleanArray, Float32Array, RecordBatch, UInt64Array};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{Session as DfSession, TableFunctionArgs, TableFunctionImpl};
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue, plan_err};
use datafusion::datasource::memory::MemorySourceConfig;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::physical_plan::ExecutionPlan;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer, Word};

use crate::binding::{Binding, storage_err};

/// A full-text DDL statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FtsDdl {
    /// `CREATE FTS INDEX`.
    Create {
        /// The table.
        table: String,
        /// The indexed columns.
        columns: Vec<String>,
        /// The tokenizer name (`default` when not given).
        tokenizer: String,
        /// `IF NOT EXISTS`: an existing index is not an error.
        if_not_exists: bool,
    },
    /// `DROP FTS INDEX`.
    Drop {
        /// The table.
        table: String,
        /// `IF EXISTS`: no index is not an error.
        if_exists: bool,
    },
}

/// One statement of a script: Basalt's own DDL, or SQL text for DataFusion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// SQL for DataFusion's parser.
    Sql(String),
    /// Full-text DDL.
    Fts(FtsDdl),
}

/// Splits a script at top-level `;` (outside quotes and comments) when it holds full-text
/// DDL; `None` when it holds none (the usual case: DataFusion parses the script whole).
/// `lower_idents` lowers unquoted identifiers, as the session does.
pub fn split_statements(sql: &str, lower_idents: bool) -> crate::Result<Option<Vec<Piece>>> {
    // Every statement passes here: a scan of the bytes, no allocation, rules most out.
    if !sql.as_bytes().windows(3).any(|w| w.eq_ignore_ascii_case(b"fts")) {
        return Ok(None);
    }
    let parts = crate::script::split_script(sql);
    let mut any = false;
    let mut out = Vec::with_capacity(parts.len());
    for part in parts {
        let part = part.text;
        match parse_ddl(part, lower_idents)? {
            Some(d) => {
                any = true;
                out.push(Piece::Fts(d));
            }
            None if part.trim().is_empty() => {}
            None => out.push(Piece::Sql(part.to_string())),
        }
    }
    Ok(any.then_some(out))
}

/// Parses one statement as full-text DDL; `None` if it is not (it does not start with
/// `CREATE FTS` / `DROP FTS`).
fn parse_ddl(stmt: &str, lower_idents: bool) -> crate::Result<Option<FtsDdl>> {
    let tokens = Tokenizer::new(&GenericDialect {}, stmt)
        .tokenize()
        .map_err(|e| crate::Error::sql(format!("{e}")))?;
    let mut toks: Vec<Token> =
        tokens.into_iter().filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF)).collect();
    toks.reverse(); // pop() takes the next token
    let kw = |t: Option<&Token>, k: &str| matches!(t, Some(Token::Word(Word { value, quote_style: None, .. })) if value.eq_ignore_ascii_case(k));
    let n = toks.len();
    let create = kw(toks.last(), "CREATE");
    if !(create || kw(toks.last(), "DROP")) || n < 2 || !kw(toks.get(n - 2), "FTS") {
        return Ok(None);
    }
    let usage = if create {
        "CREATE FTS INDEX [IF NOT EXISTS] ON table (column, …) [WITH (tokenizer = 'default' | \
         'english' | 'ngram')]"
    } else {
        "DROP FTS INDEX [IF EXISTS] ON table"
    };
    let bad = |what: &str| crate::Error::sql(format!("{what}; expected {usage}"));
    let expect = |toks: &mut Vec<Token>, k: &str| -> crate::Result<()> {
        if kw(toks.last(), k) {
            toks.pop();
            Ok(())
        } else {
            Err(bad(&format!("expected {k}, found {}", show(toks.last()))))
        }
    };
    let ident = |toks: &mut Vec<Token>, what: &str| -> crate::Result<String> {
        match toks.pop() {
            Some(Token::Word(w)) if w.quote_style.is_some() => Ok(w.value),
            Some(Token::Word(w)) if lower_idents => Ok(w.value.to_lowercase()),
            Some(Token::Word(w)) => Ok(w.value),
            t => Err(bad(&format!("expected a {what} name, found {}", show(t.as_ref())))),
        }
    };
    toks.pop();
    toks.pop();
    expect(&mut toks, "INDEX")?;
    let mut flag = false;
    if kw(toks.last(), "IF") {
        toks.pop();
        if create {
            expect(&mut toks, "NOT")?;
        }
        expect(&mut toks, "EXISTS")?;
        flag = true;
    }
    expect(&mut toks, "ON")?;
    let table = ident(&mut toks, "table")?;
    let ddl = if create {
        if toks.pop() != Some(Token::LParen) {
            return Err(bad("expected ( and the columns"));
        }
        let mut columns = vec![ident(&mut toks, "column")?];
        loop {
            match toks.pop() {
                Some(Token::Comma) => columns.push(ident(&mut toks, "column")?),
                Some(Token::RParen) => break,
                t => return Err(bad(&format!("expected , or ), found {}", show(t.as_ref())))),
            }
        }
        let mut tokenizer = "default".to_string();
        if kw(toks.last(), "WITH") {
            toks.pop();
            if toks.pop() != Some(Token::LParen) {
                return Err(bad("expected ( after WITH"));
            }
            expect(&mut toks, "TOKENIZER")?;
            if toks.pop() != Some(Token::Eq) {
                return Err(bad("expected = after tokenizer"));
            }
            tokenizer = match toks.pop() {
                Some(Token::SingleQuotedString(s)) => s,
                Some(Token::Word(w)) => w.value,
                t => {
                    return Err(bad(&format!(
                        "expected a tokenizer name, found {}",
                        show(t.as_ref())
                    )));
                }
            };
            if toks.pop() != Some(Token::RParen) {
                return Err(bad("expected ) after the tokenizer"));
            }
        }
        FtsDdl::Create { table, columns, tokenizer, if_not_exists: flag }
    } else {
        FtsDdl::Drop { table, if_exists: flag }
    };
    if let Some(t) = toks.last() {
        return Err(bad(&format!("unexpected {t} at the end")));
    }
    Ok(Some(ddl))
}

fn show(t: Option<&Token>) -> String {
    t.map_or_else(|| "the end of the statement".to_string(), |t| format!("'{t}'"))
}

/// Runs full-text DDL on the store.
pub fn run_ddl(store: &basalt_storage::Store, ddl: &FtsDdl) -> crate::Result<()> {
    match ddl {
        FtsDdl::Create { table, columns, tokenizer, if_not_exists } => {
            let snap = store.snapshot();
            if *if_not_exists && store.fts_definition(&snap, table)?.is_some() {
                return Ok(());
            }
            let cols: Vec<&str> = columns.iter().map(String::as_str).collect();
            Ok(store.create_fts_index(table, &cols, tokenizer)?)
        }
        FtsDdl::Drop { table, if_exists } => {
            let snap = store.snapshot();
            if *if_exists && store.fts_definition(&snap, table)?.is_none() {
                return Ok(());
            }
            Ok(store.drop_fts_index(table)?)
        }
    }
}

/// The scalar functions of this module.
pub fn functions() -> Vec<ScalarUDF> {
    vec![ScalarUDF::from(FtsMatch::default())]
}

/// `fts_match(col, 'query')`: replaced by the scan; evaluating it anywhere else is an error.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct FtsMatch {
    signature: Signature,
}

impl Default for FtsMatch {
    fn default() -> Self {
        FtsMatch {
            signature: Signature::exact(vec![DataType::Utf8, DataType::Utf8], Volatility::Stable),
        }
    }
}

/// The name of [`FtsMatch`].
pub const FTS_MATCH: &str = "fts_match";

impl ScalarUDFImpl for FtsMatch {
    fn name(&self) -> &str {
        FTS_MATCH
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        plan_err!(
            "fts_match(column, 'query') works as a filter (WHERE, JOIN … ON) on a column of a \
             Basalt table with a full-text index, with a constant query"
        )
    }
}

/// `_id` is one of a set of ids: what the scan turns `fts_match` into. Storage evaluates it
/// (see `pushdown`); DataFusion can too, by binary search.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct IdSet {
    signature: Signature,
    /// Sorted, no duplicates.
    pub ids: Arc<[u64]>,
    /// The call it stands for, for plans.
    label: String,
}

impl IdSet {
    pub(crate) fn expr(ids: Arc<[u64]>, label: String) -> Expr {
        let f = IdSet {
            signature: Signature::exact(vec![DataType::UInt64], Volatility::Immutable),
            ids,
            label,
        };
        Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(ScalarUDF::from(f)),
            vec![Expr::Column(datafusion::common::Column::new_unqualified(
                basalt_storage::ID_COLUMN,
            ))],
        ))
    }
}

impl ScalarUDFImpl for IdSet {
    fn name(&self) -> &str {
        &self.label
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a] = args.args.as_slice() else { return plan_err!("{} takes _id", self.label) };
        let a = a.to_array(args.number_rows)?;
        let Some(ids) = a.as_any().downcast_ref::<UInt64Array>() else {
            return plan_err!("{} takes _id (UInt64), got {}", self.label, a.data_type());
        };
        let out: BooleanArray =
            ids.iter().map(|v| v.map(|v| self.ids.binary_search(&v).is_ok())).collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}

/// Whether `e` calls `fts_match`.
pub fn has_fts_match(e: &Expr) -> bool {
    let mut found = false;
    let _ = e.apply(|e| {
        if let Expr::ScalarFunction(f) = e
            && f.func.name() == FTS_MATCH
        {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// `e` with every `fts_match(col, 'query')` replaced by the `_id` set it matches
/// (`search(column, query)` runs the query on one column of the scanned table).
pub fn resolve_matches(e: Expr, search: &dyn Fn(&str, &str) -> Result<Vec<u64>>) -> Result<Expr> {
    e.transform(|e| {
        let Expr::ScalarFunction(f) = &e else { return Ok(Transformed::no(e)) };
        if f.func.name() != FTS_MATCH {
            return Ok(Transformed::no(e));
        }
        let (column, query) = match f.args.as_slice() {
            [Expr::Column(c), q] => match q {
                Expr::Literal(ScalarValue::Utf8(Some(q)), _)
                | Expr::Literal(ScalarValue::LargeUtf8(Some(q)), _)
                | Expr::Literal(ScalarValue::Utf8View(Some(q)), _) => (c.name.clone(), q.clone()),
                _ => return plan_err!("fts_match: the query must be a constant string"),
            },
            _ => {
                return plan_err!(
                    "fts_match(column, 'query'): the first argument must be a column"
                );
            }
        };
        let mut ids = search(&column, &query)?;
        ids.sort_unstable();
        ids.dedup();
        let label = format!("fts_match({column}, {})", ScalarValue::Utf8(Some(query)));
        Ok(Transformed::yes(IdSet::expr(ids.into(), label)))
    })
    .map(|t| t.data)
}

/// `fts_search('table', 'query' [, k])`.
#[derive(Debug)]
pub struct FtsSearchFunction {
    binding: Arc<Binding>,
}

impl FtsSearchFunction {
    /// The table function of a connection.
    pub fn new(binding: Arc<Binding>) -> Self {
        FtsSearchFunction { binding }
    }
}

const USAGE: &str = "fts_search('table', 'query' [, k])";

impl TableFunctionImpl for FtsSearchFunction {
    fn call_with_args(&self, args: TableFunctionArgs<'_, '_>) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if !(2..=3).contains(&exprs.len()) {
            return plan_err!("{USAGE}: expected 2 or 3 arguments, got {}", exprs.len());
        }
        let values = exprs
            .iter()
            .map(|e| crate::constant::evaluate_constant(args.session(), e))
            .collect::<Result<Vec<_>>>()?;
        let text = |i: usize, what: &str| match &values[i] {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => Ok(s.clone()),
            v => plan_err!("{USAGE}: the {what} must be a string, got {v}"),
        };
        let table = text(0, "table name")?;
        let query = text(1, "query")?;
        let k = match values.get(2) {
            None => None,
            Some(v) => match v.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(Some(k)) if k >= 0 => Some(k as usize),
                v => return plan_err!("{USAGE}: k must be a non-negative integer, got {v}"),
            },
        };
        // Fail at planning on a table without an index.
        let store = self.binding.session().lock().store().clone();
        let view = self.binding.view().map_err(storage_err)?;
        if store.fts_definition(view.base(), &table).map_err(storage_err)?.is_none() {
            return plan_err!(
                "fts_search: table '{table}' has no full-text index (CREATE FTS INDEX ON \
                 {table} (columns))"
            );
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new(basalt_storage::ID_COLUMN, DataType::UInt64, false),
            Field::new("score", DataType::Float32, false),
        ]));
        Ok(Arc::new(FtsSearchTable { binding: self.binding.clone(), table, query, k, schema }))
    }
}

/// The table an `fts_search(…)` call stands for; the search runs when the scan is planned
/// for execution, against the view the statement reads.
#[derive(Debug)]
struct FtsSearchTable {
    binding: Arc<Binding>,
    table: String,
    query: String,
    k: Option<usize>,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for FtsSearchTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Temporary
    }
    async fn scan(
        &self,
        _state: &dyn DfSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let store = self.binding.session().lock().store().clone();
        let view = self.binding.view().map_err(storage_err)?;
        let hits = store
            .search_text(&view, &self.table, None, &self.query, self.k)
            .map_err(storage_err)?;
        let ids = UInt64Array::from_iter_values(hits.iter().map(|h| h.id));
        let scores = Float32Array::from_iter_values(hits.iter().map(|h| h.score));
        let batch =
            RecordBatch::try_new(self.schema.clone(), vec![Arc::new(ids), Arc::new(scores)])?;
        let exec: Arc<dyn ExecutionPlan> = MemorySourceConfig::try_new_exec(
            &[vec![batch]],
            self.schema.clone(),
            projection.cloned(),
        )?;
        Ok(exec)
    }
}

/// Runs `fts_match`'s query on one column of `table` in the bound view.
pub(crate) fn matching_ids(
    binding: &Binding,
    table: &str,
    column: &str,
    query: &str,
) -> Result<Vec<u64>> {
    let store = binding.session().lock().store().clone();
    let view = binding.view().map_err(storage_err)?;
    let hits = store
        .search_text(&view, table, Some(column), query, None)
        .map_err(|e| DataFusionError::Plan(format!("fts_match({column}, …): {e}")))?;
    Ok(hits.into_iter().map(|h| h.id).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_split_outside_quotes_and_comments() {
        let s = "SELECT ';' AS a; -- c;\nCREATE FTS INDEX ON t (a, \"B\") WITH (tokenizer = \
                 'english'); /* ; */ SELECT \"x;\" FROM t";
        let p = split_statements(s, true).unwrap().unwrap();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0], Piece::Sql("SELECT ';' AS a".into()));
        assert_eq!(
            p[1],
            Piece::Fts(FtsDdl::Create {
                table: "t".into(),
                columns: vec!["a".into(), "B".into()],
                tokenizer: "english".into(),
                if_not_exists: false
            })
        );
        assert!(matches!(&p[2], Piece::Sql(s) if s.contains("\"x;\"")));
        assert_eq!(split_statements("SELECT 1; SELECT 2", true).unwrap(), None);
        assert_eq!(split_statements("SELECT 'fts'", true).unwrap(), None);
        assert_eq!(
            split_statements("drop fts index if exists on Docs", true).unwrap().unwrap(),
            [Piece::Fts(FtsDdl::Drop { table: "docs".into(), if_exists: true })]
        );
        assert_eq!(
            split_statements("CREATE FTS INDEX IF NOT EXISTS ON Docs (Body)", false)
                .unwrap()
                .unwrap(),
            [Piece::Fts(FtsDdl::Create {
                table: "Docs".into(),
                columns: vec!["Body".into()],
                tokenizer: "default".into(),
                if_not_exists: true
            })]
        );
    }

    #[test]
    fn malformed_ddl_is_a_clear_error() {
        for bad in [
            "CREATE FTS INDEX t (a)",
            "CREATE FTS INDEX ON t",
            "CREATE FTS INDEX ON t ()",
            "CREATE FTS INDEX ON t (a b)",
            "CREATE FTS INDEX ON t (a) WITH (stemmer = 'x')",
            "CREATE FTS INDEX ON t (a) extra",
            "CREATE FTS TABLE t",
            "DROP FTS INDEX t",
            "DROP FTS INDEX IF NOT EXISTS ON t",
        ] {
            let e = split_statements(bad, true).unwrap_err().to_string();
            assert!(e.contains("expected"), "{bad}: {e}");
        }
    }
}
