//! Parsing SQL text with a session's dialect and limits, and the schema storage keeps for
//! a statement's output.
//!
//! What this module must not do: depend on any other module of this crate but `depth` and
//! `error` (the catalog, file tables and the dispatcher all parse through it).

use crate::error::{Error, Result};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::sql::parser::Statement as DfStatement;

/// Tables and views whose names start with this are Basalt's own (the staging tables of
/// `CREATE TABLE … AS` among them): hidden from the catalog, refused for users' tables.
pub use basalt_storage::store::RESERVED_PREFIX;

/// Parses exactly one statement with the session's dialect.
pub(crate) fn parse_one(
    options: &datafusion::config::ConfigOptions,
    sql: &str,
) -> Result<DfStatement> {
    let mut v = parse(options, sql)?;
    match (v.pop(), v.is_empty()) {
        (Some(s), true) => Ok(s),
        _ => Err(Error::sql("expected exactly one statement")),
    }
}

/// Parses SQL text into statements with the session's dialect and recursion limit
/// (`SET datafusion.sql_parser.dialect = 'duckdb'` changes it).
pub(crate) fn parse(
    options: &datafusion::config::ConfigOptions,
    sql: &str,
) -> Result<Vec<DfStatement>> {
    let name = options.sql_parser.dialect.to_string();
    let dialect = datafusion::sql::sqlparser::dialect::dialect_from_str(&name)
        .ok_or_else(|| Error::sql(format!("unknown SQL dialect '{name}'")))?;
    let run_with = |d: &dyn datafusion::sql::sqlparser::dialect::Dialect,
                    sql: &str|
     -> Result<Vec<DfStatement>> {
        let mut parser = datafusion::sql::parser::DFParserBuilder::new(sql)
            .with_dialect(d)
            .with_recursion_limit(options.sql_parser.recursion_limit.get())
            .build()?;
        Ok(parser.parse_statements()?.into_iter().collect())
    };
    let run = |sql: &str| run_with(dialect.as_ref(), sql);
    let mut statements = match run(sql) {
        Ok(s) => s,
        // Only text the parser refused is looked at again.
        Err(e) => match sqlite_forms(dialect.as_ref(), sql) {
            Some(text) => run(&text).map_err(|_| e)?,
            // PostgreSQL's `INSERT INTO t AS alias …` (the alias an `ON CONFLICT DO
            // UPDATE` names the existing row by), which only PostgreSQL's dialect reads:
            // the text is parsed with it when the session's generic dialect refused it.
            None if name.eq_ignore_ascii_case("generic") && insert_alias(sql) => {
                let pg = datafusion::sql::sqlparser::dialect::PostgreSqlDialect {};
                run_with(&pg, sql).map_err(|_| e)?
            }
            None => return Err(e),
        },
    };
    for s in &mut statements {
        crate::depth::shape(s)?;
    }
    Ok(statements)
}

/// Whether the text has `INSERT INTO <name> AS` (a table alias), outside quotes.
fn insert_alias(sql: &str) -> bool {
    let words: Vec<String> = sql
        .split(|c: char| c.is_whitespace() || c == ';' || c == '(')
        .filter(|w| !w.is_empty())
        .map(str::to_ascii_uppercase)
        .collect();
    words.windows(4).any(|w| w[0] == "INSERT" && w[1] == "INTO" && w[3] == "AS")
}

/// SQLite forms the parser does not take, as what they mean: `x IN ()` (an empty list:
/// false, even for NULL) as `x IN (SELECT NULL WHERE FALSE)`; `x IN t` (a table's rows) as
/// `x IN (SELECT * FROM t)`; the index hints `NOT INDEXED` and `INDEXED BY name` after a
/// table dropped (they choose an index, not an answer). `None` when the text has none.
fn sqlite_forms(
    dialect: &dyn datafusion::sql::sqlparser::dialect::Dialect,
    sql: &str,
) -> Option<String> {
    use datafusion::sql::sqlparser::keywords::Keyword;
    use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};
    let tokens = Tokenizer::new(dialect, sql).tokenize().ok()?;
    let next =
        |from: usize| (from..tokens.len()).find(|&j| !matches!(tokens[j], Token::Whitespace(_)));
    let mut out = String::with_capacity(sql.len() + 32);
    let mut changed = false;
    let mut i = 0;
    while i < tokens.len() {
        // `NOT INDEXED` / `INDEXED BY name`: dropped.
        if let Token::Word(w) = &tokens[i]
            && let Some(a) = next(i + 1)
            && let Token::Word(b) = &tokens[a]
        {
            let word = |t: &datafusion::sql::sqlparser::tokenizer::Word, s: &str| {
                t.quote_style.is_none() && t.value.eq_ignore_ascii_case(s)
            };
            if word(w, "not") && word(b, "indexed") {
                i = a + 1;
                changed = true;
                continue;
            }
            if word(w, "indexed")
                && word(b, "by")
                && let Some(n) = next(a + 1)
                && matches!(tokens[n], Token::Word(_))
            {
                i = n + 1;
                changed = true;
                continue;
            }
        }
        out.push_str(&tokens[i].to_string());
        if let Token::Word(w) = &tokens[i]
            && w.keyword == Keyword::IN
            && let Some(a) = next(i + 1)
        {
            match &tokens[a] {
                Token::LParen if next(a + 1).is_some_and(|b| tokens[b] == Token::RParen) => {
                    out.push_str(" (SELECT NULL WHERE FALSE)");
                    i = next(a + 1).map_or(tokens.len(), |b| b + 1);
                    changed = true;
                    continue;
                }
                Token::Word(t) if t.keyword == Keyword::NoKeyword || t.quote_style.is_some() => {
                    // A possibly qualified table name.
                    let mut end = a;
                    let mut name = t.to_string();
                    while let Some(dot) = next(end + 1)
                        && tokens[dot] == Token::Period
                        && let Some(part) = next(dot + 1)
                        && let Token::Word(p) = &tokens[part]
                    {
                        name.push('.');
                        name.push_str(&p.to_string());
                        end = part;
                    }
                    out.push_str(&format!(" (SELECT * FROM {name})"));
                    i = end + 1;
                    changed = true;
                    continue;
                }
                _ => {}
            }
        }
        i += 1;
    }
    changed.then_some(out)
}

/// The schema with the types storage keeps (view / large string types as their plain form).
pub(crate) fn storable_schema(s: &Schema) -> Schema {
    let fields: Vec<Field> = s
        .fields()
        .iter()
        .map(|f| {
            let dt = match f.data_type() {
                DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
                DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
                d => d.clone(),
            };
            Field::new(f.name(), dt, f.is_nullable()).with_metadata(f.metadata().clone())
        })
        .collect();
    Schema::new(fields)
}
