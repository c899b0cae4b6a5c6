//! Printing query results: aligned tables, CSV, JSON, one-value-per-line and sqlite3's list.
//!
//! Owns how a result looks on the terminal or in a file; it never runs SQL. Table mode
//! collects the whole result (column widths depend on every row); the other modes print
//! batch by batch, so `basalt -c "SELECT …" --mode csv > out.csv` streams.

use std::io::Write;

use arrow_cast::display::{ArrayFormatter, FormatOptions};
use basalt::arrow::array::{Array, ArrayRef, Float32Array, Float64Array, RecordBatch};
use basalt::arrow::schema::{DataType, SchemaRef};
use unicode_width::UnicodeWidthChar;

use crate::CliError;

/// How results are printed (`.mode`, `--mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Aligned columns in a box, numbers right-aligned, NULL visible, wide values cut.
    Table,
    /// A header row, then one line per row (RFC 4180 quoting); NULL is an empty field.
    Csv,
    /// One JSON array of objects per statement; NULL is `null`.
    Json,
    /// `column = value`, one per line, a blank line between rows.
    Line,
    /// sqlite3's list mode: a row per line, values joined by the separator (`|` unless
    /// `.separator` says otherwise), NULL empty; the column names first unless
    /// `.headers off`.
    List,
}

impl Mode {
    /// Parses a mode name.
    pub fn parse(s: &str) -> Result<Mode, CliError> {
        Ok(match s {
            "table" => Mode::Table,
            "csv" => Mode::Csv,
            "json" => Mode::Json,
            "line" => Mode::Line,
            "list" => Mode::List,
            other => {
                return Err(CliError::Usage(format!(
                    "unknown mode '{other}' (table, csv, json, line or list)"
                )));
            }
        })
    }
}

/// Prints results in one mode.
#[derive(Debug, Clone)]
pub struct Printer {
    /// The output mode.
    pub mode: Mode,
    /// Widest value shown in table mode, in terminal columns (longer ones end in `…`);
    /// `usize::MAX`: none.
    pub max_width: usize,
    /// Whether table and CSV output start with the column names (`.headers`).
    pub headers: bool,
    /// The text of NULL (`.nullvalue`); `None`: `NULL` in table and line modes, an empty
    /// field in CSV.
    pub null: Option<String>,
    /// The width a table must fit (a terminal's); columns that do not fit are left out
    /// from the middle, shown as one `…` column, with a note. `None`: no limit.
    pub fit_width: Option<usize>,
    /// What separates values in list mode (`.separator`).
    pub separator: String,
}

impl Default for Printer {
    fn default() -> Self {
        Printer {
            mode: Mode::Table,
            max_width: 40,
            headers: true,
            null: None,
            fit_width: None,
            separator: "|".into(),
        }
    }
}

const NULL: &str = "NULL";

impl Printer {
    /// Prints one statement's result and returns its row count. A result without columns
    /// (DDL) prints nothing.
    pub fn print(
        &self,
        out: &mut dyn Write,
        schema: &SchemaRef,
        batches: &mut dyn Iterator<Item = basalt::Result<RecordBatch>>,
    ) -> Result<u64, CliError> {
        if schema.fields().is_empty() {
            let mut n = 0;
            for b in batches {
                n += b?.num_rows() as u64;
            }
            return Ok(n);
        }
        match self.mode {
            Mode::Table => {
                let mut all = Vec::new();
                for b in batches {
                    all.push(b?);
                }
                self.table(out, schema, &all)
            }
            Mode::Csv => {
                let mut w = arrow_csv::WriterBuilder::new()
                    .with_header(self.headers)
                    .with_null(self.null.clone().unwrap_or_default())
                    .build(&mut *out);
                let mut n = 0;
                let mut any = false;
                for b in batches {
                    let b = flatten_nested(&b?)?;
                    n += b.num_rows() as u64;
                    w.write(&b)?;
                    any = true;
                }
                if !any {
                    // No batch came: an empty one still writes the header.
                    w.write(&flatten_nested(&RecordBatch::new_empty(schema.clone()))?)?;
                }
                Ok(n)
            }
            Mode::Json => {
                let mut w = arrow_json::WriterBuilder::new()
                    .with_explicit_nulls(true)
                    .build::<_, arrow_json::writer::JsonArray>(&mut *out);
                let mut n = 0;
                for b in batches {
                    let b = b?;
                    n += b.num_rows() as u64;
                    w.write(&b)?;
                }
                // An empty result is `[]` (the writer opens and closes the array).
                w.finish()?;
                drop(w);
                writeln!(out)?;
                Ok(n)
            }
            Mode::Line => {
                let name_w = schema.fields().iter().map(|f| width(f.name())).max().unwrap_or(0);
                let mut n = 0;
                for b in batches {
                    let b = b?;
                    let cols = Cells::new(&b, self.null_text())?;
                    for r in 0..b.num_rows() {
                        if n > 0 {
                            writeln!(out)?;
                        }
                        for (c, f) in schema.fields().iter().enumerate() {
                            let pad = name_w - width(f.name());
                            writeln!(out, "{}{} = {}", " ".repeat(pad), f.name(), cols.text(c, r))?;
                        }
                        n += 1;
                    }
                }
                Ok(n)
            }
            Mode::List => {
                let sep = self.separator.as_str();
                if self.headers {
                    let names: Vec<&str> =
                        schema.fields().iter().map(|f| f.name().as_str()).collect();
                    writeln!(out, "{}", names.join(sep))?;
                }
                let mut n = 0;
                for b in batches {
                    let b = b?;
                    let cols = Cells::new(&b, self.null.as_deref().unwrap_or(""))?;
                    for r in 0..b.num_rows() {
                        let row: Vec<String> =
                            (0..b.num_columns()).map(|c| cols.text(c, r)).collect();
                        writeln!(out, "{}", row.join(sep))?;
                        n += 1;
                    }
                }
                Ok(n)
            }
        }
    }

    fn null_text(&self) -> &str {
        self.null.as_deref().unwrap_or(NULL)
    }

    /// Aligned columns in a box. A value's line breaks start new lines inside its cell
    /// (as psql and duckdb show them), each line cut to `max_width`.
    fn table(
        &self,
        out: &mut dyn Write,
        schema: &SchemaRef,
        batches: &[RecordBatch],
    ) -> Result<u64, CliError> {
        let ncol = schema.fields().len();
        let header: Vec<Vec<(String, usize)>> =
            schema.fields().iter().map(|f| self.cell_lines(f.name())).collect();
        let mut widths = vec![0; ncol];
        if self.headers {
            for (w, cell) in widths.iter_mut().zip(&header) {
                *w = cell.iter().map(|l| l.1).max().unwrap_or(0);
            }
        }
        let right: Vec<bool> = schema.fields().iter().map(|f| f.data_type().is_numeric()).collect();
        let mut rows: Vec<Vec<Vec<(String, usize)>>> = Vec::new();
        for b in batches {
            let cells = Cells::new(b, self.null_text())?;
            for r in 0..b.num_rows() {
                let row: Vec<Vec<(String, usize)>> =
                    (0..ncol).map(|c| self.cell_lines(&cells.text(c, r))).collect();
                for (w, cell) in widths.iter_mut().zip(&row) {
                    *w = cell.iter().map(|l| l.1).fold(*w, usize::max);
                }
                rows.push(row);
            }
        }
        let shown = fit_columns(&widths, self.fit_width);
        // The display columns: `Some(c)` a result column, `None` the `…` of those left out.
        let shown_w: Vec<usize> = shown.iter().map(|c| c.map_or(1, |c| widths[c])).collect();
        let rule = {
            let mut s = String::from("+");
            for w in &shown_w {
                s.push_str(&"-".repeat(w + 2));
                s.push('+');
            }
            s
        };
        let gap = vec![("…".to_string(), 1)];
        let line = |out: &mut dyn Write,
                    cells: &[Vec<(String, usize)>],
                    right: &[bool]|
         -> std::io::Result<()> {
            let cell = |c: Option<usize>| c.map_or(&gap, |c| &cells[c]);
            let height = shown.iter().map(|c| cell(*c).len()).max().unwrap_or(1).max(1);
            for i in 0..height {
                let mut s = String::from("|");
                for (c, &col_w) in shown.iter().zip(&shown_w) {
                    let lines = cell(*c);
                    let (text, w) = lines.get(i).map_or(("", 0), |(t, w)| (t.as_str(), *w));
                    let pad = " ".repeat(col_w - w);
                    if c.is_some_and(|c| right[c]) {
                        s.push_str(&format!(" {pad}{text} |"));
                    } else {
                        s.push_str(&format!(" {text}{pad} |"));
                    }
                }
                writeln!(out, "{s}")?;
            }
            Ok(())
        };
        writeln!(out, "{rule}")?;
        if self.headers {
            line(out, &header, &vec![false; ncol])?;
            writeln!(out, "{rule}")?;
        }
        for row in &rows {
            line(out, row, &right)?;
        }
        if !rows.is_empty() {
            writeln!(out, "{rule}")?;
        }
        let n = rows.len();
        let hidden = ncol - shown.iter().flatten().count();
        if hidden > 0 {
            writeln!(
                out,
                "({n} row{}, {ncol} columns, {hidden} not shown: too wide for the terminal; \
                 .mode line shows every column)",
                if n == 1 { "" } else { "s" }
            )?;
        } else {
            writeln!(out, "({n} row{})", if n == 1 { "" } else { "s" })?;
        }
        Ok(n as u64)
    }

    /// A cell's lines (split at line breaks, a final one dropped), each as [`Printer::fit`]
    /// shows it.
    fn cell_lines(&self, s: &str) -> Vec<(String, usize)> {
        let s = s.strip_suffix('\n').unwrap_or(s);
        s.split('\n').map(|l| self.fit(l.strip_suffix('\r').unwrap_or(l))).collect()
    }

    /// The text shown for a cell (line breaks as `\\n`, other control characters as `?`),
    /// cut to `max_width` terminal columns with a final `…`, and its width.
    fn fit(&self, s: &str) -> (String, usize) {
        fn shown(c: char) -> (&'static str, Option<char>, usize) {
            match c {
                '\n' => ("\\n", None, 2),
                '\r' => ("\\r", None, 2),
                '\t' => (" ", None, 1),
                c if c.is_control() => ("?", None, 1),
                c => ("", Some(c), c.width().unwrap_or(0)),
            }
        }
        let total: usize = s.chars().map(|c| shown(c).2).sum();
        let budget = if total <= self.max_width { total } else { self.max_width.saturating_sub(1) };
        let mut out = String::with_capacity(s.len().min(budget * 4 + 3));
        let mut w = 0;
        for c in s.chars() {
            let (text, ch, cw) = shown(c);
            if w + cw > budget {
                break;
            }
            match ch {
                Some(ch) => out.push(ch),
                None => out.push_str(text),
            }
            w += cw;
        }
        if total > self.max_width {
            out.push('…');
            w += 1;
        }
        (out, w)
    }
}

/// The columns a table of columns `widths` wide shows within `limit` terminal columns:
/// all when they fit, else as many as fit taken alternately from the left and the right
/// end, with `None` (one `…` column) where the others were; the first column always.
fn fit_columns(widths: &[usize], limit: Option<usize>) -> Vec<Option<usize>> {
    let all: Vec<Option<usize>> = (0..widths.len()).map(Some).collect();
    // A column takes its width plus three: a space each side and its right border.
    let total = 1 + widths.iter().map(|w| w + 3).sum::<usize>();
    let Some(limit) = limit.filter(|l| total > *l && widths.len() > 1) else { return all };
    let mut used = 1 + 4; // the left border and the `…` column
    let (mut left, mut right) = (Vec::new(), Vec::new());
    let (mut lo, mut hi) = (0, widths.len());
    let mut from_left = true;
    while lo < hi {
        let c = if from_left { lo } else { hi - 1 };
        if used + widths[c] + 3 > limit && !(left.is_empty() && from_left) {
            break;
        }
        used += widths[c] + 3;
        if from_left {
            left.push(Some(c));
            lo += 1;
        } else {
            right.push(Some(c));
            hi -= 1;
        }
        from_left = !from_left;
    }
    right.reverse();
    left.push(None);
    left.extend(right);
    left
}

/// Display width of a string in terminal columns.
fn width(s: &str) -> usize {
    s.chars().map(|c| c.width().unwrap_or(0)).sum()
}

/// The display text of every cell of a batch: floats rounded to 6 decimals (table and line
/// modes; CSV and JSON keep every digit), vectors and other nested values in brackets.
struct Cells<'a> {
    cols: Vec<Col<'a>>,
    /// The text of NULL.
    null: &'a str,
}

enum Col<'a> {
    F64(&'a Float64Array),
    F32(&'a Float32Array),
    Other(ArrayFormatter<'a>, &'a ArrayRef),
}

static OPTIONS: FormatOptions<'static> =
    FormatOptions::new().with_null(NULL).with_display_error(true);

impl<'a> Cells<'a> {
    fn new(batch: &'a RecordBatch, null: &'a str) -> Result<Cells<'a>, CliError> {
        let mut cols = Vec::with_capacity(batch.num_columns());
        for a in batch.columns() {
            cols.push(match a.data_type() {
                DataType::Float64 => match a.as_any().downcast_ref::<Float64Array>() {
                    Some(f) => Col::F64(f),
                    None => Col::Other(ArrayFormatter::try_new(a.as_ref(), &OPTIONS)?, a),
                },
                DataType::Float32 => match a.as_any().downcast_ref::<Float32Array>() {
                    Some(f) => Col::F32(f),
                    None => Col::Other(ArrayFormatter::try_new(a.as_ref(), &OPTIONS)?, a),
                },
                _ => Col::Other(ArrayFormatter::try_new(a.as_ref(), &OPTIONS)?, a),
            });
        }
        Ok(Cells { cols, null })
    }

    fn text(&self, c: usize, r: usize) -> String {
        match &self.cols[c] {
            Col::F64(a) => {
                if a.is_null(r) {
                    self.null.into()
                } else {
                    float(a.value(r))
                }
            }
            Col::F32(a) => {
                if a.is_null(r) {
                    self.null.into()
                } else {
                    float32(a.value(r))
                }
            }
            Col::Other(f, a) => {
                // A NULL-typed column has no validity buffer: every slot is NULL.
                if a.is_null(r) || a.data_type() == &DataType::Null {
                    self.null.into()
                } else {
                    f.value(r).to_string()
                }
            }
        }
    }
}

/// A float for reading: its shortest exact form when that has at most 6 decimals, else
/// rounded to 6 decimals with trailing zeros dropped; very large or very small magnitudes
/// in exponent form.
pub fn float(x: f64) -> String {
    readable(x, x.to_string())
}

/// [`float`] for a 32-bit float (its own shortest form, not that of the widened value).
pub fn float32(x: f32) -> String {
    readable(f64::from(x), x.to_string())
}

fn readable(x: f64, shortest: String) -> String {
    if !x.is_finite() {
        return shortest;
    }
    let a = x.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-4..1e15).contains(&a) {
        return format!("{x:e}");
    }
    if shortest.split_once('.').is_none_or(|(_, d)| d.len() <= 6) {
        return shortest;
    }
    let s = format!("{x:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" { "0".into() } else { s.into() }
}

/// A copy of `batch` with nested columns (lists, vectors, structs, maps) turned into their
/// display text, for CSV, which has no nested values.
fn flatten_nested(batch: &RecordBatch) -> Result<RecordBatch, CliError> {
    use basalt::arrow::array::StringArray;
    use basalt::arrow::schema::{Field, Schema};
    use std::sync::Arc;
    if !batch.columns().iter().any(|a| a.data_type().is_nested()) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::new();
    let mut cols: Vec<ArrayRef> = Vec::new();
    let opts = FormatOptions::new();
    for (f, a) in batch.schema().fields().iter().zip(batch.columns()) {
        if a.data_type().is_nested() {
            let fmt = ArrayFormatter::try_new(a.as_ref(), &opts)?;
            let s: StringArray =
                (0..a.len()).map(|i| (!a.is_null(i)).then(|| fmt.value(i).to_string())).collect();
            fields.push(Field::new(f.name(), DataType::Utf8, true));
            cols.push(Arc::new(s));
        } else {
            fields.push(f.as_ref().clone());
            cols.push(a.clone());
        }
    }
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), cols)?)
}

/// The SQL spelling of a column type.
pub fn sql_type(t: &DataType) -> String {
    match t {
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INT".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "TINYINT UNSIGNED".into(),
        DataType::UInt16 => "SMALLINT UNSIGNED".into(),
        DataType::UInt32 => "INT UNSIGNED".into(),
        DataType::UInt64 => "BIGINT UNSIGNED".into(),
        DataType::Float32 => "REAL".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "TEXT".into(),
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "BYTEA".into(),
        DataType::Date32 => "DATE".into(),
        DataType::Timestamp(_, None) => "TIMESTAMP".into(),
        DataType::Timestamp(_, Some(_)) => "TIMESTAMPTZ".into(),
        DataType::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        DataType::FixedSizeList(f, d) if f.data_type() == &DataType::Float32 => {
            format!("VECTOR({d})")
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_read_well() {
        assert_eq!(float(0.1 + 0.2), "0.3");
        assert_eq!(float(85.5), "85.5");
        assert_eq!(float(-0.0), "0");
        assert_eq!(float(2.0), "2");
        assert_eq!(float(1e20), "1e20");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(1.0 / 3.0), "0.333333");
        assert_eq!(float32(21.117), "21.117");
        assert_eq!(float32(0.1), "0.1");
    }

    #[test]
    fn tables_wider_than_the_terminal_leave_out_middle_columns() {
        assert_eq!(fit_columns(&[3, 3, 3], None), [Some(0), Some(1), Some(2)]);
        assert_eq!(fit_columns(&[3, 3, 3], Some(19)), [Some(0), Some(1), Some(2)]);
        // 1 + 6 * 6 = 37 columns needed; 22 fit the first, the last and the `…` (17).
        assert_eq!(fit_columns(&[3; 6], Some(22)), [Some(0), None, Some(5)]);
        assert_eq!(fit_columns(&[3; 6], Some(23)), [Some(0), Some(1), None, Some(5)]);
        assert_eq!(fit_columns(&[3; 6], Some(30)), [Some(0), Some(1), None, Some(4), Some(5)]);
        // The first column shows even when it alone is too wide.
        assert_eq!(fit_columns(&[50, 3], Some(20)), [Some(0), None]);
    }

    #[test]
    fn a_table_too_wide_shows_its_ends_and_says_what_it_left_out() {
        use basalt::arrow::array::Int64Array;
        use basalt::arrow::schema::{Field, Schema};
        use std::sync::Arc;
        let fields: Vec<Field> =
            (0..6).map(|i| Field::new(format!("c{i}"), DataType::Int64, true)).collect();
        let schema = Arc::new(Schema::new(fields));
        let cols: Vec<ArrayRef> =
            (0..6).map(|i| Arc::new(Int64Array::from(vec![100 + i])) as ArrayRef).collect();
        let batch = RecordBatch::try_new(schema.clone(), cols).unwrap();
        let p = Printer { fit_width: Some(22), ..Printer::default() };
        let mut out = Vec::new();
        p.print(&mut out, &schema, &mut std::iter::once(Ok(batch))).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "+-----+---+-----+\n\
             | c0  | … | c5  |\n\
             +-----+---+-----+\n\
             | 100 | … | 105 |\n\
             +-----+---+-----+\n\
             (1 row, 6 columns, 4 not shown: too wide for the terminal; .mode line shows every \
             column)\n"
        );
        assert!(text.lines().all(|l| l.chars().count() <= 22 || l.starts_with('(')));
    }

    #[test]
    fn wide_values_are_cut_with_an_ellipsis() {
        let p = Printer { mode: Mode::Table, max_width: 5, ..Printer::default() };
        assert_eq!(p.fit("abcde"), ("abcde".into(), 5));
        assert_eq!(p.fit("abcdef"), ("abcd…".into(), 5));
        assert_eq!(p.fit("a\nb"), ("a\\nb".into(), 4));
        assert_eq!(p.fit("数据库系统"), ("数据…".into(), 5));
    }
}
