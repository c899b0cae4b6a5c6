//! The `basalt` command: an interactive SQL shell, one-shot SQL over databases and files,
//! import and export, and a demo.
//!
//! ```text
//! basalt [DB]                          shell (a script when stdin is not a terminal)
//! basalt -c "SQL; SQL" [--mode M] [DB] run statements, print each result
//! basalt import DB TABLE FILE [opts]   CSV / Parquet / JSON lines into a table
//! basalt export DB TABLE|QUERY FILE    a table or a query's rows to CSV / Parquet / JSON
//! basalt demo [DIR] [--rows N]         generate data, time analytics, vector, text, hybrid
//! basalt tables DB                     tables, row counts and columns
//! basalt recover DB                    open a damaged database keeping what is intact
//! ```
//!
//! This crate owns argument handling, the shell, output formats and file import; it talks
//! to the database only through the public `basalt` API (`Database`, `Connection`).

#![deny(unsafe_code)]

// Setting the allocator's options (`alloc.rs`) takes one FFI call.
#[allow(unsafe_code)]
mod alloc;
mod demo;
mod import;
// The SIGINT handler (`interrupt.rs`) is the only unsafe code of the command.
#[allow(unsafe_code)]
mod interrupt;
mod output;
mod shell;
// Reading the terminal's width (`term.rs`) takes one ioctl.
#[allow(unsafe_code)]
mod term;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use output::{Mode, Printer};
use shell::Shell;

/// Everything that can stop a command.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad command-line arguments or a bad dot command.
    #[error("{0}")]
    Usage(String),
    /// An error from the database.
    #[error("{0}")]
    Db(#[from] basalt::Error),
    /// An Arrow error while reading or printing data.
    #[error("{0}")]
    Arrow(#[from] basalt::arrow::schema::ArrowError),
    /// A file or terminal error.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Writing output failed (a closed pipe ends the command quietly).
    #[error("writing output: {0}")]
    Output(#[from] std::io::Error),
    /// A file could not be imported; nothing was written.
    #[error("{0}")]
    Import(String),
    /// A script ended with work left undone (an open transaction, rolled back).
    #[error("{0}")]
    Unfinished(String),
    /// A statement of a script failed.
    #[error("line {line} (statement {number}): {message}")]
    Statement {
        /// The script line the statement starts on (1-based).
        line: usize,
        /// The statement's number in its script (1-based).
        number: usize,
        /// The database's message, positions made relative to the script.
        message: String,
    },
}

impl CliError {
    fn io(context: impl Into<String>, source: std::io::Error) -> CliError {
        CliError::Io { context: context.into(), source }
    }
}

const USAGE: &str = "\
usage:
  basalt [OPTIONS] [DB]                  interactive shell on DB (in memory without DB);
                                         reads a script when stdin is not a terminal: a
                                         failing statement prints its error and the
                                         script goes on; the exit code is then non-zero
  basalt -c \"SQL; …\" [OPTIONS] [DB]      run the statements in order, print each result,
                                         stop at the first error
  basalt import DB TABLE FILE [IMPORT OPTIONS]
                                         load a CSV, Parquet or JSON-lines file into TABLE
                                         (created from the file's schema when missing)
  basalt export DB TABLE|QUERY FILE [--format F]
                                         write a table or a query's rows to FILE
  basalt demo [DIR] [--rows N]           generate a dataset, run and time analytics, a
                                         vector top-k, a full-text and a hybrid search
  basalt tables DB                       tables, row counts and columns
  basalt recover DB                      open a database that refuses to open because of
                                         damage (a missing MANIFEST, a damaged log),
                                         keeping what is intact; prints what it did and
                                         moves what it gives up to DB/salvaged/N/
  basalt --version | --help

options:
  --mode table|csv|json|line|list
                               output mode (default table)
  --readonly                   open DB read-only (next to a running writer)
  --timer                      print each statement's run time
  -bail, --bail                stop a script at its first error
  --max-width N                widest value shown in table mode (default 40)
  --memory-limit SIZE          memory for sorts, joins and aggregations (e.g. 512MB, 4GB,
                                 none; default half the machine's memory); beyond it they
                                 spill to DB/spill or fail (resources exhausted)

import options:
  --format csv|parquet|json    file format (default: from the extension)
  --schema 'a INT, b TEXT'     column names and types instead of inferring them (CSV, JSON)
  --no-header                  the CSV file has no header row (columns c0, c1, …)
  --delimiter C                CSV field separator (default ',', '\\t' for .tsv)
  --skip-bad                   skip rows whose values do not parse (reported) instead of
                                 failing; without it a bad row imports nothing
  --quiet                      no progress bar";

fn main() -> ExitCode {
    alloc::keep_freed_memory();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(args) {
        Ok(code) => code,
        Err(CliError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(CliError::Usage(m)) => {
            eprintln!("error: {m}\n\n{USAGE}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Options shared by the shell and `-c`.
struct ShellArgs {
    db: Option<PathBuf>,
    command: Option<String>,
    printer: Printer,
    readonly: bool,
    timer: bool,
    /// `--memory-limit` (`Some(None)`: none).
    memory_limit: Option<Option<usize>>,
    /// `-bail`: a script stops at its first error.
    bail: bool,
}

fn run(args: Vec<String>) -> Result<ExitCode, CliError> {
    match args.first().map(String::as_str) {
        Some("--version" | "-V") => {
            println!("basalt {}", env!("CARGO_PKG_VERSION"));
            return Ok(ExitCode::SUCCESS);
        }
        Some("--help" | "-h" | "help") => {
            println!("{USAGE}");
            return Ok(ExitCode::SUCCESS);
        }
        Some("tables") => {
            let [db] = positional::<1>(&args[1..], "tables DB")?;
            tables(&db)?;
            return Ok(ExitCode::SUCCESS);
        }
        Some("recover") => {
            let [db] = positional::<1>(&args[1..], "recover DB")?;
            recover(&db)?;
            return Ok(ExitCode::SUCCESS);
        }
        Some("import") => return import::command(&args[1..]).map(|()| ExitCode::SUCCESS),
        Some("export") => return import::export_command(&args[1..]).map(|()| ExitCode::SUCCESS),
        Some("demo") => return demo::command(&args[1..]).map(|()| ExitCode::SUCCESS),
        _ => {}
    }
    let a = shell_args(&args)?;
    let mut options = basalt::Options { read_only: a.readonly, ..basalt::Options::default() };
    if let Some(limit) = a.memory_limit {
        options.sql_memory_limit = limit;
    }
    let db = match &a.db {
        None => basalt::Database::open_in_memory_with(options)?,
        Some(p) => basalt::Database::open_with(p, options)?,
    };
    let mut sh = Shell::new(db, a.printer);
    sh.timer = a.timer;
    sh.bail = a.bail;
    interrupt::install(sh.connection().interrupter());
    if let Some(sql) = a.command {
        // Statements given as an argument stop at the first error, as sqlite3's do.
        sh.bail = true;
        sh.run_script(&sql)?;
        sh.finish()?;
        sh.end_script()?;
        return Ok(ExitCode::SUCCESS);
    }
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        sh.interactive()?;
    } else {
        sh.run_reader(stdin.lock())?;
        sh.finish()?;
        sh.end_script()?;
    }
    sh.finish()?;
    Ok(ExitCode::from(sh.exit_code()))
}

fn shell_args(args: &[String]) -> Result<ShellArgs, CliError> {
    let mut a = ShellArgs {
        db: None,
        command: None,
        printer: Printer::default(),
        readonly: false,
        timer: false,
        memory_limit: None,
        bail: false,
    };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "-c" | "--command" => a.command = Some(value(&mut it, arg)?.to_string()),
            "--mode" | "-m" => a.printer.mode = Mode::parse(value(&mut it, arg)?)?,
            "--readonly" => a.readonly = true,
            "--timer" => a.timer = true,
            "-bail" | "--bail" => a.bail = true,
            "--max-width" => a.printer.max_width = number(value(&mut it, arg)?, arg)?,
            "--memory-limit" => a.memory_limit = Some(bytes(value(&mut it, arg)?, arg)?),
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(CliError::Usage(format!("unknown option {s}")));
            }
            s => {
                if a.db.is_some() {
                    return Err(CliError::Usage(format!("unexpected argument {s}")));
                }
                a.db = Some(PathBuf::from(s));
            }
        }
    }
    Ok(a)
}

/// The value after an option.
fn value<'a>(it: &mut impl Iterator<Item = &'a String>, opt: &str) -> Result<&'a str, CliError> {
    it.next().map(String::as_str).ok_or_else(|| CliError::Usage(format!("{opt} needs a value")))
}

/// A whole number option value.
fn number(s: &str, opt: &str) -> Result<usize, CliError> {
    s.replace('_', "")
        .parse()
        .map_err(|_| CliError::Usage(format!("{opt}: '{s}' is not a whole number")))
}

/// A size in bytes: a number with an optional `KB` / `MB` / `GB` (powers of 1024), or
/// `none` (no limit).
fn bytes(s: &str, opt: &str) -> Result<Option<usize>, CliError> {
    let t = s.trim().to_ascii_uppercase();
    if t == "NONE" {
        return Ok(None);
    }
    let (digits, unit) = match t.find(|c: char| !c.is_ascii_digit() && c != '_') {
        Some(i) => t.split_at(i),
        None => (t.as_str(), ""),
    };
    let shift = match unit.trim() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => return Err(CliError::Usage(format!("{opt}: '{s}' is not a size (e.g. 512MB, 4GB)"))),
    };
    let n = number(digits, opt)?;
    n.checked_mul(1 << shift)
        .map(Some)
        .ok_or_else(|| CliError::Usage(format!("{opt}: '{s}' is too large")))
}

/// Exactly `N` positional arguments (no options).
fn positional<const N: usize>(args: &[String], shape: &str) -> Result<[String; N], CliError> {
    <[String; N]>::try_from(args.to_vec())
        .map_err(|_| CliError::Usage(format!("expected: basalt {shape}")))
}

/// Opens `path` with salvage, prints the report and closes it again (flushing what the log
/// replay recovered).
fn recover(path: &str) -> Result<(), CliError> {
    let options = basalt::Options { salvage: true, ..basalt::Options::default() };
    let db = basalt::Database::open_with(path, options)?;
    let report = db.salvage_report().to_vec();
    db.close()?;
    if report.is_empty() {
        println!("{path}: nothing to recover (the database opened intact)");
    }
    for line in report {
        println!("{line}");
    }
    Ok(())
}

fn tables(path: &str) -> Result<(), CliError> {
    let db = basalt::Database::open_read_only(path)?;
    for name in db.list_tables() {
        let t = db.table(&name)?;
        println!("{name} ({} rows)", t.count()?);
        for f in t.schema()?.fields() {
            let null = if f.is_nullable() { "" } else { " NOT NULL" };
            println!("  {} {}{null}", f.name(), output::sql_type(f.data_type()));
        }
        if let Some((cols, tok)) = t.fts_index()? {
            println!("  full-text index on ({}) tokenizer {}", cols.join(", "), tok.name());
        }
    }
    Ok(())
}
