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
pub(crate) struct SltDb {
    path: PathBuf,
    db: Option<Database>,
    conn: Option<Connection>,
    /// Spell SQL errors as DataFusion's own runner does (`DataFusion error: …`), for the
    /// DataFusion corpus whose expected-error patterns start that way.
    df_errors: bool,
}

/// An error as the runner matches it against `statement error <pattern>`.
#[derive(Debug)]
pub(crate) struct SltError(String);

impl std::fmt::Display for SltError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SltError {}

impl SltDb {
    /// Opens (creating) the database at `path`.
    pub(crate) fn open(path: &Path) -> SltDb {
        let db = Database::open(path).unwrap();
        let conn = db.connect();
        SltDb { path: path.to_path_buf(), db: Some(db), conn: Some(conn), df_errors: false }
    }

    /// Like [`SltDb::open`], with DataFusion's error spelling.
    pub(crate) fn open_df(path: &Path) -> SltDb {
        SltDb { df_errors: true, ..SltDb::open(path) }
    }

    fn err(&self, e: basalt::Error) -> SltError {
        if !self.df_errors {
            return SltError(e.to_string());
        }
        SltError(match e {
            basalt::Error::Sql(
                basalt::SqlError::Sql { message }
                | basalt::SqlError::Execution { message }
                | basalt::SqlError::Unsupported { message },
            ) => format!("DataFusion error: {message}"),
            e => format!("DataFusion error: {e}"),
        })
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
    let opts = FormatOptions::default()
        .with_null("NULL")
        .with_duration_format(arrow::util::display::DurationFormat::Pretty);
    let mut rows = Vec::new();
    for b in batches {
        let fmts: Vec<ArrayFormatter<'_>> = b
            .columns()
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).unwrap())
            .collect();
        for r in 0..b.num_rows() {
            rows.extend(expand(
                fmts.iter()
                    .zip(b.columns())
                    .map(|(f, c)| {
                        if let Some(v) = float_at(c.as_ref(), r) {
                            return v;
                        }
                        let s = f.value(r).to_string();
                        let text = matches!(
                            c.data_type(),
                            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                        );
                        if s.is_empty() && text && !c.is_null(r) {
                            "(empty)".to_string()
                        } else {
                            s
                        }
                    })
                    .collect(),
            ));
        }
    }
    rows
}

/// Floats and decimals print as DataFusion's own test files expect: the shortest text of
/// the value, rounded (half to even) to 12 decimal places, without trailing zeros; NaN and
/// Infinity spelled out.
fn float_at(c: &dyn Array, r: usize) -> Option<String> {
    use arrow::array::AsArray;
    use arrow::datatypes::{Float32Type, Float64Type};
    if c.is_null(r) {
        return None;
    }
    let text = match c.data_type() {
        DataType::Float64 => {
            let v = c.as_primitive::<Float64Type>().value(r);
            if v.is_nan() || v.is_infinite() {
                return Some(special(v));
            }
            v.to_string()
        }
        DataType::Float32 => {
            let v = c.as_primitive::<Float32Type>().value(r);
            if v.is_nan() || v.is_infinite() {
                return Some(special(f64::from(v)));
            }
            v.to_string()
        }
        DataType::Decimal128(_, _) | DataType::Decimal256(_, _) => {
            let opts = FormatOptions::default();
            return Some(trim_zeros(ArrayFormatter::try_new(c, &opts).ok()?.value(r).to_string()));
        }
        _ => return None,
    };
    let s = trim_zeros(round12(&text));
    Some(if s == "-0" { "0".into() } else { s })
}

fn special(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v > 0.0 {
        "Infinity".into()
    } else {
        "-Infinity".into()
    }
}

/// Rounds a plain decimal string to 12 places, half to even.
fn round12(s: &str) -> String {
    let (sign, body) = s.strip_prefix('-').map_or(("", s), |b| ("-", b));
    let Some((int, frac)) = body.split_once('.') else { return s.to_string() };
    if frac.len() <= 12 {
        return s.to_string();
    }
    let (keep, rest) = frac.split_at(12);
    let mut digits: Vec<u8> = int.bytes().chain(keep.bytes()).map(|b| b - b'0').collect();
    let next = rest.as_bytes()[0] - b'0';
    let tail_nonzero = rest.bytes().skip(1).any(|b| b != b'0');
    let last_odd = digits.last().is_some_and(|d| d % 2 == 1);
    if next > 5 || (next == 5 && (tail_nonzero || last_odd)) {
        let mut i = digits.len();
        loop {
            if i == 0 {
                digits.insert(0, 1);
                break;
            }
            i -= 1;
            if digits[i] == 9 {
                digits[i] = 0;
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    let split = digits.len() - 12;
    let text: String = digits.iter().map(|d| char::from(b'0' + d)).collect();
    format!("{sign}{}.{}", &text[..split], &text[split..])
}

fn trim_zeros(s: String) -> String {
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// A cell with several lines becomes extra rows `01)line`, as in DataFusion's runner.
fn expand(mut row: Vec<String>) -> Vec<Vec<String>> {
    let Some(last) = row.pop() else { return vec![row] };
    let lines: Vec<&str> = last.split('\n').collect();
    if lines.len() < 2 {
        row.push(last);
        return vec![row];
    }
    let mut out = vec![row];
    for (i, l) in lines.iter().enumerate() {
        let content = l.trim_start();
        let prefix = "-".repeat(l.len() - content.len());
        out.push(vec![format!("{:02}){prefix}{content}", i + 1)]);
    }
    out
}

impl sqllogictest::DB for SltDb {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        if sql.trim().trim_end_matches(';').eq_ignore_ascii_case("reopen") {
            self.reopen().map_err(|e| self.err(e))?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let conn = self.conn.as_ref().unwrap();
        let rows = conn.sql_stream(sql).map_err(|e| self.err(e))?;
        let schema = rows.schema();
        let batches = rows.collect::<Result<Vec<_>, _>>().map_err(|e| self.err(e))?;
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
    // The directory of the sources being tested, read when the test runs: `cargo test`
    // sets it for the test process, while the value compiled in names wherever the binary
    // was built, which a build cache shared between checkouts may have left elsewhere.
    let root = std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from);
    let dir = root.join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
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
            async move { Ok::<_, SltError>(SltDb::open(&path)) }
        });
        if let Err(e) = runner.run_file(file) {
            failures.push(format!("{}: {}", file.display(), e.display(false)));
        }
    }
    assert!(failures.is_empty(), "{} file(s) failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn floats_round_like_datafusion() {
    assert_eq!(round12("32768.3"), "32768.3");
    assert_eq!(round12("0.30000000000000004"), "0.300000000000");
    assert_eq!(round12("0.9999999999995"), "1.000000000000");
    assert_eq!(round12("-0.0000000000005"), "-0.000000000000");
    assert_eq!(round12("2.0000000000025"), "2.000000000002");
}
