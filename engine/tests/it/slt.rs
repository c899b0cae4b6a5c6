//! Runs the sqllogictest files in `tests/slt/` against a Basalt connection on a fresh
//! on-disk database per file. Besides SQL, a file may contain the statement `reopen`
//! (closes the database and opens it again) to test what persists.

use std::path::{Path, PathBuf};

use arrow::array::{Array, RecordBatch};
use arrow::datatypes::DataType;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use basalt::{Connection, Database};
use sqllogictest::{DBOutput, DefaultColumnType};

/// A Basalt database as the sqllogictest runner drives it.
pub struct SltDb {
    path: PathBuf,
    db: Option<Database>,
    conn: Option<Connection>,
}

impl SltDb {
    /// Opens (creating) the database at `path`.
    pub fn open(path: &Path) -> SltDb {
        let db = Database::open(path).unwrap();
        let conn = db.connect();
        SltDb { path: path.to_path_buf(), db: Some(db), conn: Some(conn) }
    }

    fn reopen(&mut self) -> Result<(), basalt::Error> {
        self.conn = None;
        if let Some(db) = self.db.take() {
            db.close()?;
        }
        let db = Database::open(&self.path)?;
        self.conn = Some(db.connect());
        self.db = Some(db);
        Ok(())
    }
}

fn column_type(dt: &DataType) -> DefaultColumnType {
    if dt.is_integer() {
        DefaultColumnType::Integer
    } else if dt.is_floating() || matches!(dt, DataType::Decimal128(..)) {
        DefaultColumnType::FloatingPoint
    } else if matches!(dt, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) {
        DefaultColumnType::Text
    } else {
        DefaultColumnType::Any
    }
}

/// Cell text as DataFusion's sqllogictest files expect it: NULL, `(empty)` for empty text.
fn cells(batches: &[RecordBatch]) -> Vec<Vec<String>> {
    let opts = FormatOptions::default().with_null("NULL");
    let mut rows = Vec::new();
    for b in batches {
        let fmts: Vec<ArrayFormatter<'_>> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            rows.push(
                fmts.iter()
                    .zip(b.columns())
                    .map(|(f, c)| {
                        if let Some(v) = float_at(c.as_ref(), r) {
                            return v;
                        }
                        let s = f.value(r).to_string();
                        if s.is_empty() && !c.is_null(r) { "(empty)".to_string() } else { s }
                    })
                    .collect(),
            );
        }
    }
    rows
}

/// Floats print in their shortest form (`2` for 2.0, like DataFusion's own test files).
fn float_at(c: &dyn Array, r: usize) -> Option<String> {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float32Type, Float64Type};
    if c.is_null(r) {
        return None;
    }
    match c.data_type() {
        DataType::Float64 => Some(format!("{}", c.as_primitive::<Float64Type>().value(r))),
        DataType::Float32 => Some(format!("{}", c.as_primitive::<Float32Type>().value(r))),
        _ => None,
    }
}

impl sqllogictest::DB for SltDb {
    type Error = basalt::Error;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, basalt::Error> {
        if sql.trim().trim_end_matches(';').eq_ignore_ascii_case("reopen") {
            self.reopen()?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let conn = self.conn.as_ref().unwrap();
        let rows = conn.sql_stream(sql)?;
        let schema = rows.schema();
        let batches = rows.collect::<Result<Vec<_>, _>>()?;
        if schema.fields().is_empty() {
            return Ok(DBOutput::StatementComplete(0));
        }
        Ok(DBOutput::Rows {
            types: schema.fields().iter().map(|f| column_type(f.data_type())).collect(),
            rows: cells(&batches),
        })
    }

    fn engine_name(&self) -> &str {
        "basalt"
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    files.sort();
    files
}

#[test]
fn sqllogictest_files() {
    let files = slt_files();
    assert!(!files.is_empty(), "no .slt files found");
    let mut failures = Vec::new();
    for file in &files {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let mut runner = sqllogictest::Runner::new(|| {
            let path = path.clone();
            async move { Ok::<_, basalt::Error>(SltDb::open(&path)) }
        });
        if let Err(e) = runner.run_file(file) {
            failures.push(format!("{}: {}", file.display(), e.display(false)));
        }
    }
    assert!(failures.is_empty(), "{} file(s) failed:\n{}", failures.len(), failures.join("\n\n"));
}
