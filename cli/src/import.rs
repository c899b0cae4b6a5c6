//! `basalt import` / `.import` and `basalt export`.
//!
//! Owns moving whole files in and out of a table. Schemas are inferred (or parsed from
//! `--schema`) by the SQL layer's `read_csv` / `read_json` / `read_parquet`, so an import
//! sees exactly the types `CREATE TABLE … AS SELECT * FROM read_csv(…)` would. CSV and JSON
//! lines are then read here, in file order, so every bad row is named by its line; the rows
//! go into the table in one transaction (large ones spill to segment files), so a failed
//! import leaves nothing behind — a table it created is dropped again.

use std::fs::File;
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arrow_cast::CastOptions;
use basalt::arrow::array::{Array, ArrayRef, BooleanArray, RecordBatch, StringArray};
use basalt::arrow::schema::{DataType, Field, Schema, SchemaRef};
use basalt::{Connection, Database};

use crate::CliError;

/// File formats an import reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma- (or other-) separated values.
    Csv,
    /// Apache Parquet.
    Parquet,
    /// Newline-delimited JSON objects.
    Json,
}

impl Format {
    fn parse(s: &str) -> Result<Format, CliError> {
        match s {
            "csv" | "tsv" => Ok(Format::Csv),
            "parquet" => Ok(Format::Parquet),
            "json" | "jsonl" | "ndjson" => Ok(Format::Json),
            other => {
                Err(CliError::Usage(format!("unknown format '{other}' (csv, parquet or json)")))
            }
        }
    }

    /// The format a file name implies.
    fn of(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "csv" | "tsv" | "txt" => Some(Format::Csv),
            "parquet" | "pq" => Some(Format::Parquet),
            "json" | "jsonl" | "ndjson" => Some(Format::Json),
            _ => None,
        }
    }

    fn sql_name(self) -> &'static str {
        match self {
            Format::Csv => "CSV",
            Format::Parquet => "PARQUET",
            Format::Json => "JSON",
        }
    }
}

/// How to read the file.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    format: Option<Format>,
    schema: Option<String>,
    no_header: bool,
    delimiter: Option<u8>,
    skip_bad: bool,
    quiet: bool,
}

impl ImportOptions {
    /// Parses the options after `FILE TABLE`.
    pub fn parse(args: &[String]) -> Result<ImportOptions, CliError> {
        let mut o = ImportOptions::default();
        let mut it = args.iter();
        while let Some(a) = it.next() {
            match a.as_str() {
                "--format" => o.format = Some(Format::parse(crate::value(&mut it, a)?)?),
                "--schema" => o.schema = Some(crate::value(&mut it, a)?.to_string()),
                "--no-header" => o.no_header = true,
                "--delimiter" => {
                    let d = crate::value(&mut it, a)?;
                    o.delimiter = Some(match d {
                        "\\t" | "tab" => b'\t',
                        d if d.len() == 1 => d.as_bytes()[0],
                        _ => {
                            return Err(CliError::Usage(format!(
                                "--delimiter: one character, not '{d}'"
                            )));
                        }
                    });
                }
                "--skip-bad" => o.skip_bad = true,
                "--quiet" | "-q" => o.quiet = true,
                other => return Err(CliError::Usage(format!("unknown import option {other}"))),
            }
        }
        Ok(o)
    }
}

/// What an import did.
#[derive(Debug)]
pub struct ImportReport {
    /// Rows written.
    pub rows: u64,
    /// Rows left out (`--skip-bad`): how many, and the first few reasons.
    pub skipped: u64,
    /// Up to 10 reasons for skipped rows.
    pub reasons: Vec<String>,
    /// Whether the table was created by this import.
    pub created: bool,
    /// Wall time, seconds.
    pub seconds: f64,
}

impl ImportReport {
    /// The closing lines: rows and rows/s, then what was skipped.
    pub fn print(&self, out: &mut dyn Write, table: &str) -> Result<(), CliError> {
        let rate = self.rows as f64 / self.seconds.max(1e-9);
        writeln!(
            out,
            "imported {} rows into {table}{} in {:.2} s ({} rows/s)",
            group(self.rows),
            if self.created { " (created)" } else { "" },
            self.seconds,
            group(rate.round() as u64)
        )?;
        if self.skipped > 0 {
            writeln!(out, "skipped {} bad rows:", group(self.skipped))?;
            for r in &self.reasons {
                writeln!(out, "  {r}")?;
            }
            if self.skipped as usize > self.reasons.len() {
                writeln!(out, "  …")?;
            }
        }
        Ok(())
    }
}

/// `basalt import DB TABLE FILE [options]`.
pub fn command(args: &[String]) -> Result<(), CliError> {
    if args.len() < 3 || args[..3].iter().any(|a| a.starts_with("--")) {
        return Err(CliError::Usage("expected: basalt import DB TABLE FILE [options]".into()));
    }
    let opts = ImportOptions::parse(&args[3..])?;
    let db = Database::open(&args[0])?;
    let conn = db.connect();
    let report = import(&db, &conn, &args[1], Path::new(&args[2]), &opts)?;
    report.print(&mut std::io::stdout().lock(), &args[1])?;
    db.close()?;
    Ok(())
}

/// Imports `file` into `table` (created from the file's schema when it does not exist):
/// all rows or, on any error, none.
pub fn import(
    db: &Database,
    conn: &Connection,
    table: &str,
    file: &Path,
    opts: &ImportOptions,
) -> Result<ImportReport, CliError> {
    let start = Instant::now();
    let format = match opts.format.or_else(|| Format::of(file)) {
        Some(f) => f,
        None => {
            return Err(CliError::Usage(format!(
                "{}: cannot tell the format from the name; give --format csv|parquet|json",
                file.display()
            )));
        }
    };
    if !file.is_file() {
        return Err(CliError::Import(format!("{}: no such file", file.display())));
    }
    if conn.in_transaction() {
        return Err(CliError::Import(
            "import inside an open transaction: COMMIT or ROLLBACK first".into(),
        ));
    }
    let delimiter = opts.delimiter.unwrap_or(
        if file.extension().is_some_and(|e| e.eq_ignore_ascii_case("tsv")) { b'\t' } else { b',' },
    );
    let source = read_call(format, file, opts, delimiter);
    let schema = file_schema(conn, &source)
        .map_err(|e| CliError::Import(format!("{}: {e}", file.display())))?;
    // A new table is filled under a hidden name and renamed into place at the end, so that
    // an interrupted import (an error, a killed process) leaves no table behind.
    let created = !db.list_tables().iter().any(|t| t == table);
    let staged = if created { Some(db.stage_table(&schema)?) } else { None };
    let target = staged.as_ref().map_or(table, |s| s.name());
    let progress = Progress::new(!opts.quiet && std::io::stderr().is_terminal());
    let mut report =
        ImportReport { rows: 0, skipped: 0, reasons: Vec::new(), created, seconds: 0.0 };
    let r = (|| -> Result<(), CliError> {
        conn.begin()?;
        let t = conn.table(target)?;
        let mut sink = |batch: RecordBatch, report: &mut ImportReport| -> Result<(), CliError> {
            if batch.num_rows() > 0 {
                t.insert(&batch)?;
                report.rows += batch.num_rows() as u64;
                progress.rows(report.rows);
            }
            Ok(())
        };
        match format {
            Format::Csv => {
                read_csv(file, &schema, opts, delimiter, &progress, &mut report, &mut sink)?
            }
            Format::Json => read_json(file, &schema, opts, &progress, &mut report, &mut sink)?,
            Format::Parquet => {
                let total = count_rows(conn, &source)?;
                progress.set_total(total, Unit::Rows);
                let rows = conn.sql_stream(&format!("SELECT * FROM {source}"))?;
                for b in rows {
                    sink(conform(b?, &schema)?, &mut report)?;
                }
            }
        }
        conn.commit()?;
        Ok(())
    })();
    progress.clear();
    if let Err(e) = r {
        if conn.in_transaction() {
            let _ = conn.rollback();
        }
        return Err(e); // a staged table is dropped with `staged`
    }
    if let Some(s) = staged {
        s.publish(table)?;
    }
    report.seconds = start.elapsed().as_secs_f64();
    Ok(report)
}

/// The SQL table function reading `file` with the import's options.
fn read_call(format: Format, file: &Path, opts: &ImportOptions, delimiter: u8) -> String {
    let path = quote(&file.to_string_lossy());
    let schema =
        opts.schema.as_deref().map(|s| format!(", schema = {}", quote(s))).unwrap_or_default();
    match format {
        Format::Csv => format!(
            "read_csv({path}, header = {}, delimiter = {}{schema})",
            !opts.no_header,
            quote(&(delimiter as char).to_string())
        ),
        Format::Json => format!("read_json({path}{schema})"),
        Format::Parquet => format!("read_parquet({path})"),
    }
}

/// A SQL string literal.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// The schema the SQL layer infers (or parses from `--schema`) for the file, with columns
/// of no type (all values empty) read as text.
fn file_schema(conn: &Connection, source: &str) -> Result<SchemaRef, CliError> {
    let rows = conn.sql_stream(&format!("SELECT * FROM {source} LIMIT 0"))?;
    let fields: Vec<Field> = rows
        .schema()
        .fields()
        .iter()
        .map(|f| Field::new(f.name(), storable(f.data_type()), true))
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

/// The type a column read from a file is stored as: text and binary views (what the
/// Parquet reader hands out) as plain text and binary, no-type columns as text.
fn storable(t: &DataType) -> DataType {
    match t {
        DataType::Null | DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        DataType::BinaryView | DataType::LargeBinary => DataType::Binary,
        other => other.clone(),
    }
}

/// `batch` with its columns cast to `schema`'s types where they differ.
fn conform(batch: RecordBatch, schema: &SchemaRef) -> Result<RecordBatch, CliError> {
    if batch
        .schema()
        .fields()
        .iter()
        .zip(schema.fields())
        .all(|(a, b)| a.data_type() == b.data_type())
    {
        return Ok(batch);
    }
    let cols = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(c, f)| arrow_cast::cast(c, f.data_type()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RecordBatch::try_new(schema.clone(), cols)?)
}

fn count_rows(conn: &Connection, source: &str) -> Result<u64, CliError> {
    Ok(first_number(&conn.sql(&format!("SELECT count(*) FROM {source}"))?))
}

/// The first value of a one-number result (a count, signed or not); 0 when there is none.
fn first_number(batches: &[RecordBatch]) -> u64 {
    use basalt::arrow::array::{Int64Array, UInt64Array};
    let Some(c) = batches.first().filter(|b| b.num_rows() > 0).map(|b| b.column(0)) else {
        return 0;
    };
    if let Some(a) = c.as_any().downcast_ref::<UInt64Array>() {
        a.value(0)
    } else if let Some(a) = c.as_any().downcast_ref::<Int64Array>() {
        a.value(0).max(0) as u64
    } else {
        0
    }
}

/// Reads a CSV file as text in file order and converts each column to its type; a value
/// that does not convert is a bad row (its line is the record's number, counting the
/// header as line 1).
fn read_csv(
    file: &Path,
    schema: &SchemaRef,
    opts: &ImportOptions,
    delimiter: u8,
    progress: &Progress,
    report: &mut ImportReport,
    sink: &mut dyn FnMut(RecordBatch, &mut ImportReport) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let f = open_counted(file, progress)?;
    let text_schema = Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let reader = arrow_csv::ReaderBuilder::new(text_schema)
        .with_header(!opts.no_header)
        .with_delimiter(delimiter)
        .with_batch_size(8192)
        .build(f)
        .map_err(|e| CliError::Import(format!("{}: {e}", file.display())))?;
    let first_line = if opts.no_header { 1 } else { 2 };
    let mut record = 0u64;
    for batch in reader {
        let batch = batch.map_err(|e| CliError::Import(format!("{}: {e}", file.display())))?;
        let n = batch.num_rows();
        let mut good = vec![true; n];
        let mut cols: Vec<ArrayRef> = Vec::with_capacity(batch.num_columns());
        for (field, text) in schema.fields().iter().zip(batch.columns()) {
            if field.data_type() == &DataType::Utf8 {
                cols.push(text.clone());
                continue;
            }
            let safe = CastOptions { safe: true, ..Default::default() };
            let typed = arrow_cast::cast_with_options(text, field.data_type(), &safe)?;
            let s = text.as_any().downcast_ref::<StringArray>();
            for (r, ok) in good.iter_mut().enumerate() {
                if *ok && typed.is_null(r) && !text.is_null(r) {
                    let value = s.map(|s| s.value(r)).unwrap_or_default();
                    if value.trim().is_empty() {
                        continue; // an empty field is NULL
                    }
                    let line = record + r as u64 + first_line;
                    let reason = format!(
                        "{}: line {line}, column {}: '{}' is not a valid {}",
                        file.display(),
                        field.name(),
                        value,
                        crate::output::sql_type(field.data_type())
                    );
                    bad_row(opts, report, reason)?;
                    *ok = false;
                }
            }
            // Empty text converts to NULL; keep the typed column.
            cols.push(typed);
        }
        record += n as u64;
        let batch = RecordBatch::try_new(schema.clone(), cols)?;
        let batch =
            if good.iter().all(|g| *g) { batch } else { arrow_select_filter(&batch, &good)? };
        sink(batch, report)?;
    }
    Ok(())
}

fn arrow_select_filter(batch: &RecordBatch, keep: &[bool]) -> Result<RecordBatch, CliError> {
    let mask = BooleanArray::from(keep.to_vec());
    Ok(arrow_select::filter::filter_record_batch(batch, &mask)?)
}

/// Reads newline-delimited JSON in chunks of lines; a chunk that does not decode is
/// decoded line by line to name (or skip) the bad lines.
fn read_json(
    file: &Path,
    schema: &SchemaRef,
    opts: &ImportOptions,
    progress: &Progress,
    report: &mut ImportReport,
    sink: &mut dyn FnMut(RecordBatch, &mut ImportReport) -> Result<(), CliError>,
) -> Result<(), CliError> {
    let f = open_counted(file, progress)?;
    let mut input = BufReader::with_capacity(1 << 20, f);
    let decode = |lines: &[u8]| -> Result<Option<RecordBatch>, basalt::arrow::schema::ArrowError> {
        let mut d = arrow_json::ReaderBuilder::new(schema.clone())
            .with_batch_size(16_384)
            .build_decoder()?;
        let mut rest = lines;
        while !rest.is_empty() {
            let used = d.decode(rest)?;
            if used == 0 {
                break;
            }
            rest = &rest[used..];
        }
        d.flush()
    };
    let mut chunk: Vec<u8> = Vec::with_capacity(4 << 20);
    let mut starts: Vec<(u64, usize)> = Vec::new(); // (line number, offset in chunk)
    let mut line_no = 0u64;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = input
            .read_until(b'\n', &mut line)
            .map_err(|e| CliError::io(format!("reading {}", file.display()), e))?;
        if n > 0 {
            line_no += 1;
            if !line.iter().all(u8::is_ascii_whitespace) {
                starts.push((line_no, chunk.len()));
                chunk.extend_from_slice(&line);
                if line.last() != Some(&b'\n') {
                    chunk.push(b'\n');
                }
            }
        }
        if (n == 0 && !starts.is_empty()) || starts.len() >= 8192 {
            let batch = match decode(&chunk) {
                Ok(b) => b,
                Err(_) => {
                    // Find the bad lines one by one; decode the good ones together.
                    let mut good = Vec::with_capacity(chunk.len());
                    for (i, &(ln, off)) in starts.iter().enumerate() {
                        let end = starts.get(i + 1).map_or(chunk.len(), |s| s.1);
                        let one = &chunk[off..end];
                        match decode(one) {
                            Ok(_) => good.extend_from_slice(one),
                            Err(e) => {
                                let reason = format!("{}: line {ln}: {e}", file.display());
                                bad_row(opts, report, reason)?;
                            }
                        }
                    }
                    decode(&good)?
                }
            };
            if let Some(b) = batch {
                sink(b, report)?;
            }
            chunk.clear();
            starts.clear();
        }
        if n == 0 {
            return Ok(());
        }
    }
}

/// Opens `file` for reading, its size the progress bar's total.
fn open_counted<'a>(file: &Path, progress: &'a Progress) -> Result<Counting<'a, File>, CliError> {
    let f = File::open(file).map_err(|e| CliError::io(format!("opening {}", file.display()), e))?;
    progress.set_total(f.metadata().map(|m| m.len()).unwrap_or(0), Unit::Bytes);
    Ok(Counting { inner: f, progress })
}

/// A row that does not parse: the end of the import, or (`--skip-bad`) one more skipped
/// row, its reason kept among the first ten.
fn bad_row(
    opts: &ImportOptions,
    report: &mut ImportReport,
    reason: String,
) -> Result<(), CliError> {
    if !opts.skip_bad {
        return Err(CliError::Import(format!("{reason}; nothing was imported")));
    }
    report.skipped += 1;
    if report.reasons.len() < 10 {
        report.reasons.push(reason);
    }
    Ok(())
}

/// Counts bytes read into the progress bar.
struct Counting<'a, R> {
    inner: R,
    progress: &'a Progress,
}

impl<R: Read> Read for Counting<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.progress.bytes(n as u64);
        Ok(n)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Bytes,
    Rows,
}

/// A progress bar on stderr (only when stderr is a terminal), redrawn at most 10 times a
/// second: share of the file read (or rows, for Parquet), rows so far and rows/s.
struct Progress {
    on: bool,
    start: Instant,
    total: AtomicU64,
    rows_total: AtomicU64,
    done: AtomicU64,
    rows: AtomicU64,
    last_draw_ms: AtomicU64,
}

impl Progress {
    fn new(on: bool) -> Progress {
        Progress {
            on,
            start: Instant::now(),
            total: AtomicU64::new(0),
            rows_total: AtomicU64::new(0),
            done: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            last_draw_ms: AtomicU64::new(0),
        }
    }

    fn set_total(&self, total: u64, unit: Unit) {
        match unit {
            Unit::Bytes => self.total.store(total, Ordering::Relaxed),
            Unit::Rows => self.rows_total.store(total, Ordering::Relaxed),
        }
    }

    fn bytes(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    fn rows(&self, n: u64) {
        self.rows.store(n, Ordering::Relaxed);
        self.draw();
    }

    fn draw(&self) {
        if !self.on {
            return;
        }
        let ms = self.start.elapsed().as_millis() as u64;
        if ms < self.last_draw_ms.load(Ordering::Relaxed) + 100 {
            return;
        }
        self.last_draw_ms.store(ms, Ordering::Relaxed);
        let rows = self.rows.load(Ordering::Relaxed);
        let (done, total) = match self.rows_total.load(Ordering::Relaxed) {
            0 => (self.done.load(Ordering::Relaxed), self.total.load(Ordering::Relaxed)),
            t => (rows, t),
        };
        let frac = if total == 0 { 0.0 } else { (done as f64 / total as f64).min(1.0) };
        let filled = (frac * 30.0) as usize;
        let rate = rows as f64 / (ms.max(1) as f64 / 1e3);
        eprint!(
            "\r[{}{}] {:>3.0}%  {} rows  {} rows/s ",
            "#".repeat(filled),
            " ".repeat(30 - filled),
            frac * 100.0,
            group(rows),
            group(rate as u64)
        );
    }

    fn clear(&self) {
        if self.on && self.last_draw_ms.load(Ordering::Relaxed) > 0 {
            eprint!("\r{}\r", " ".repeat(79));
        }
    }
}

/// 1234567 → "1,234,567".
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// `basalt export DB TABLE|QUERY FILE [--format F]`: `COPY … TO` with the format from the
/// file name (or `--format`).
pub fn export_command(args: &[String]) -> Result<(), CliError> {
    if args.len() < 3 {
        return Err(CliError::Usage(
            "expected: basalt export DB TABLE|QUERY FILE [--format F]".into(),
        ));
    }
    let mut format = None;
    let mut it = args[3..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--format" => format = Some(Format::parse(crate::value(&mut it, a)?)?),
            other => return Err(CliError::Usage(format!("unknown export option {other}"))),
        }
    }
    let file = Path::new(&args[2]);
    let Some(format) = format.or_else(|| Format::of(file)) else {
        return Err(CliError::Usage(format!(
            "{}: cannot tell the format from the name; give --format csv|parquet|json",
            file.display()
        )));
    };
    let start = Instant::now();
    let db = Database::open_read_only(&args[0])?;
    let what = &args[1];
    let source = if db.list_tables().iter().any(|t| t == what) {
        format!("\"{}\"", what.replace('"', "\"\""))
    } else if is_plain_name(what) {
        // One word that names no table: not a query either.
        return Err(CliError::Import(format!(
            "no table '{what}' in {} (give a table name or a query)",
            args[0]
        )));
    } else {
        format!("({})", what.trim().trim_end_matches(';'))
    };
    let sql = format!(
        "COPY {source} TO {} STORED AS {}",
        quote(&file.to_string_lossy()),
        format.sql_name()
    );
    let rows = first_number(&db.connect().sql(&sql)?);
    let secs = start.elapsed().as_secs_f64();
    println!("exported {} rows to {} in {:.2} s", group(rows), file.display(), secs);
    Ok(())
}

/// A bare identifier (letters, digits, `_`), as a table name is written.
fn is_plain_name(s: &str) -> bool {
    let s = s.trim();
    !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped() {
        assert_eq!(group(0), "0");
        assert_eq!(group(999), "999");
        assert_eq!(group(1000), "1,000");
        assert_eq!(group(1234567), "1,234,567");
    }

    #[test]
    fn formats_follow_the_extension() {
        assert_eq!(Format::of(Path::new("a.CSV")), Some(Format::Csv));
        assert_eq!(Format::of(Path::new("a.jsonl")), Some(Format::Json));
        assert_eq!(Format::of(Path::new("a.parquet")), Some(Format::Parquet));
        assert_eq!(Format::of(Path::new("a.bin")), None);
    }
}
