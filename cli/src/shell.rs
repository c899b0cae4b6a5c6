//! The shell: runs scripts statement by statement and answers dot commands, interactively
//! (line editing and history) or from a script.
//!
//! Owns statement boundaries in typed input (via [`basalt::split_script`]), dot commands,
//! error positions relative to the script, and where output goes. It does not format
//! values ([`crate::output`]) or read data files ([`crate::import`]).

use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::time::Instant;

use basalt::{Connection, Database};

use crate::CliError;
use crate::output::{Mode, Printer, sql_type};

/// What a dot command asks of the loop.
#[derive(Debug, PartialEq, Eq)]
enum Flow {
    Continue,
    Quit,
}

/// Where results go (`.output`).
enum Out {
    Stdout(std::io::Stdout),
    File(BufWriter<File>),
}

impl Out {
    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Out::Stdout(s) => s,
            Out::File(f) => f,
        }
    }
}

/// One shell session on one database connection.
pub struct Shell {
    db: Database,
    conn: Connection,
    /// How results are printed.
    pub printer: Printer,
    /// Whether each statement's run time is printed.
    pub timer: bool,
    out: Out,
    /// SQL typed so far that does not end a statement yet.
    buf: String,
    /// The statement boundaries of `buf`, scanned a line at a time (so that a statement of
    /// many lines is not rescanned from its start at every line).
    scan: basalt::ScriptScanner,
    /// How many `.read` files are being read inside each other.
    depth: usize,
    /// Script line `buf` starts on (1-based).
    buf_line: usize,
    /// Script line the next fed line is.
    line: usize,
    /// Statements run so far in this script.
    number: usize,
    /// Whether a script stops at its first error (`-bail`, `.bail on`); otherwise the
    /// error is printed and the script goes on.
    pub bail: bool,
    /// Whether input is typed (errors are printed, never counted as failures).
    interactive: bool,
    /// The `.read` files being read, innermost last (named in errors).
    files: Vec<String>,
    /// Errors a script printed and went on after.
    failures: usize,
    /// The output to return to after the next statement (`.once`).
    after_once: Option<Out>,
}

const HELP: &str = "\
.tables                  list tables
.schema [TABLE]          CREATE statements of every table (or one), with full-text indexes
.mode table|csv|json|line|list  output mode
.separator SEP           what separates values in list mode (default |)
.timer on|off            print each statement's run time
.headers on|off          column names above table and CSV output
.nullvalue TEXT          how NULL is shown (table, line and CSV modes)
.maxwidth N              widest value shown in table mode
.bail on|off             stop a script at its first error (default: print it, go on)
.import FILE TABLE [--format F] [--schema S] [--no-header] [--delimiter C] [--skip-bad]
                         load a CSV / Parquet / JSON-lines file into TABLE
.read FILE               run the statements of a SQL file
.output [FILE]           send results to FILE (no FILE: back to the terminal)
.once FILE               send the next statement's result to FILE
.help                    this text
.quit / .exit            leave
SQL statements end with ';' and may span lines.";

/// Deepest nesting of `.read` files.
const MAX_READ_DEPTH: usize = 32;

impl Shell {
    /// A shell on `db` printing with `printer`.
    pub fn new(db: Database, printer: Printer) -> Shell {
        let conn = db.connect();
        Shell {
            db,
            conn,
            printer,
            timer: false,
            out: Out::Stdout(std::io::stdout()),
            buf: String::new(),
            scan: basalt::ScriptScanner::default(),
            depth: 0,
            buf_line: 1,
            line: 1,
            number: 0,
            bail: false,
            interactive: false,
            files: Vec::new(),
            failures: 0,
            after_once: None,
        }
    }

    /// The exit code a script earned: 1 when anything failed, as sqlite3's.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.failures > 0)
    }

    /// Handles an error of a script or typed input: stops the script (returned) when it
    /// bails or output cannot be written, else prints it with the `.read` file its line
    /// numbers count in, counts it and lets the input go on.
    fn report(&mut self, e: CliError) -> Result<(), CliError> {
        if matches!(e, CliError::Output(_)) || (self.bail && !self.interactive) {
            return Err(e);
        }
        let _ = self.out.writer().flush();
        let from = self.files.last().map(|f| format!("{f}: ")).unwrap_or_default();
        eprintln!("error: {from}{e}");
        if !self.interactive {
            self.failures += 1;
        }
        Ok(())
    }

    /// The connection statements run on (to interrupt them from another thread).
    pub fn connection(&self) -> basalt::Connection {
        self.conn.clone()
    }

    /// Runs a whole script (`-c`): every statement in order; an error stops it when the
    /// shell bails, else is printed and the script goes on.
    pub fn run_script(&mut self, text: &str) -> Result<(), CliError> {
        self.reset();
        // A UTF-8 byte order mark (editors on Windows write one) is not part of the SQL.
        let text = text.strip_prefix('\u{feff}').unwrap_or(text);
        for line in text.split_inclusive('\n') {
            if self.feed(line.trim_end_matches(['\n', '\r']))? == Flow::Quit {
                return Ok(());
            }
        }
        self.end_of_input()
    }

    /// Runs a script read line by line (stdin, `.read`), with errors as in
    /// [`Shell::run_script`].
    pub fn run_reader(&mut self, input: impl BufRead) -> Result<(), CliError> {
        self.reset();
        for (i, line) in input.lines().enumerate() {
            let mut line = line.map_err(|e| CliError::io("reading the script", e))?;
            if i == 0 && line.starts_with('\u{feff}') {
                line.remove(0); // a byte order mark
            }
            if self.feed(&line)? == Flow::Quit {
                return Ok(());
            }
        }
        self.end_of_input()
    }

    /// Ends a script (not the interactive shell): a transaction it began and did not end
    /// is rolled back, and that is an error (the script's last statements did not take
    /// effect).
    pub fn end_script(&mut self) -> Result<(), CliError> {
        if !self.conn.in_transaction() {
            return Ok(());
        }
        self.conn.rollback()?;
        Err(CliError::Unfinished(
            "the script ended inside a transaction (BEGIN without COMMIT or ROLLBACK): its \
             changes were rolled back"
                .into(),
        ))
    }

    /// Flushes output (and a file set by `.output`).
    pub fn finish(&mut self) -> Result<(), CliError> {
        self.out.writer().flush()?;
        Ok(())
    }

    /// The interactive loop: line editing, history in `~/.basalt_history`, errors printed
    /// and the session goes on. Ctrl-C drops the statement being typed, Ctrl-D leaves.
    pub fn interactive(&mut self) -> Result<(), CliError> {
        use rustyline::error::ReadlineError;
        let mut ed = rustyline::DefaultEditor::new()
            .map_err(|e| CliError::io("starting the line editor", std::io::Error::other(e)))?;
        let history =
            std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".basalt_history"));
        if let Some(h) = &history {
            let _ = ed.load_history(h); // a missing history file is normal
        }
        println!(
            "basalt {} — {}. Enter .help for commands; end statements with ';'.",
            env!("CARGO_PKG_VERSION"),
            match self.db.path() {
                Some(p) => format!("database {}", p.display()),
                None => "in-memory database".to_string(),
            }
        );
        self.reset();
        self.interactive = true;
        let mut typed = String::new(); // the lines of the statement being typed
        loop {
            let prompt = if self.buf.is_empty() { "basalt> " } else { "   ...> " };
            match ed.readline(prompt) {
                Ok(line) => {
                    typed.push_str(&line);
                    typed.push('\n');
                    match self.feed(&line) {
                        Ok(Flow::Quit) => break,
                        Ok(Flow::Continue) => {}
                        Err(e) => self.report(e)?,
                    }
                    let _ = self.out.writer().flush();
                    if self.buf.is_empty() {
                        // A whole statement (or command) is one history entry.
                        if !typed.trim().is_empty() {
                            let _ = ed.add_history_entry(typed.trim_end());
                        }
                        typed.clear();
                        self.reset(); // positions in errors count from the input just typed
                    }
                }
                Err(ReadlineError::Interrupted) => {
                    typed.clear();
                    self.reset();
                }
                Err(ReadlineError::Eof) => break,
                Err(e) => return Err(CliError::io("reading input", std::io::Error::other(e))),
            }
        }
        if let Some(h) = &history {
            let _ = ed.save_history(h);
        }
        Ok(())
    }

    fn reset(&mut self) {
        self.buf.clear();
        self.scan.reset();
        self.buf_line = 1;
        self.line = 1;
        self.number = 0;
    }

    /// Takes one line of input: a dot command (when no statement is open), or more SQL —
    /// every statement it completes runs.
    fn feed(&mut self, line: &str) -> Result<Flow, CliError> {
        let open = self.scan.is_open();
        if !open && line.trim_start().starts_with('.') {
            self.buf.clear();
            self.scan.reset();
            self.line += 1;
            self.buf_line = self.line;
            return match self.dot(line.trim()) {
                Ok(flow) => Ok(flow),
                Err(e) => self.report(e).map(|()| Flow::Continue),
            };
        }
        if !open {
            self.buf.clear();
            self.scan.reset();
            self.buf_line = self.line;
        }
        let from = self.buf.len();
        self.buf.push_str(line);
        self.buf.push('\n');
        self.scan.feed(&self.buf[from..], |_| {});
        self.line += 1;
        if !self.scan.is_open() {
            let buf = std::mem::take(&mut self.buf);
            self.scan.reset();
            self.execute(&buf)?;
            self.buf_line = self.line;
        }
        Ok(Flow::Continue)
    }

    /// Runs what is left at the end of the input (a last statement without `;`).
    fn end_of_input(&mut self) -> Result<(), CliError> {
        let buf = std::mem::take(&mut self.buf);
        self.scan.reset();
        self.execute(&buf)
    }

    /// Runs every statement of `buf` (which starts on script line `buf_line`).
    fn execute(&mut self, buf: &str) -> Result<(), CliError> {
        let mut at = Cursor::default();
        for s in basalt::split_script(buf) {
            self.number += 1;
            let (line, col) = at.advance(buf, s.offset);
            let (line, col) = (self.buf_line + line - 1, col);
            let lead = s.text.len() - s.text.trim_start().len();
            let first_line = self.buf_line + at.clone().advance(buf, s.offset + lead).0 - 1;
            let number = self.number;
            let done = self.statement(s.text).map_err(|e| match e {
                CliError::Db(e) => CliError::Statement {
                    line: first_line,
                    number,
                    message: relocate(&e.to_string(), line, col),
                },
                other => other,
            });
            if let Some(out) = self.after_once.take() {
                self.out.writer().flush()?;
                self.out = out;
            }
            if let Err(e) = done {
                self.report(e)?;
            }
        }
        Ok(())
    }

    /// Runs one statement and prints its result. Data changes print how many rows they
    /// touched in table mode and nothing in the other modes (whose output is data).
    fn statement(&mut self, sql: &str) -> Result<(), CliError> {
        let _running = crate::interrupt::Running::start();
        let start = Instant::now();
        let mut rows = self.conn.sql_stream(sql)?;
        let schema = rows.schema();
        // Only a table shown on a terminal leaves out columns that do not fit.
        let fit_width = match &self.out {
            Out::Stdout(_) if self.printer.mode == Mode::Table => crate::term::stdout_width(),
            _ => None,
        };
        let out = self.out.writer();
        let word = first_word(sql).to_ascii_uppercase();
        if matches!(word.as_str(), "INSERT" | "REPLACE" | "UPDATE" | "DELETE" | "TRUNCATE" | "COPY")
        {
            let mut n = 0u64;
            for b in rows {
                let b = b?;
                if let Some(c) = b
                    .columns()
                    .first()
                    .and_then(|c| c.as_any().downcast_ref::<basalt::arrow::array::UInt64Array>())
                {
                    n += c.values().iter().sum::<u64>();
                }
            }
            if self.printer.mode == Mode::Table {
                writeln!(
                    out,
                    "({n} row{} {})",
                    if n == 1 { "" } else { "s" },
                    if word == "COPY" { "copied" } else { "changed" }
                )?;
            }
        } else if word == "EXPLAIN" {
            // A plan is shown whole, however wide.
            let whole = Printer { max_width: usize::MAX, ..self.printer.clone() };
            whole.print(out, &schema, &mut rows)?;
        } else {
            let printer = Printer { fit_width, ..self.printer.clone() };
            printer.print(out, &schema, &mut rows)?;
        }
        if self.timer {
            writeln!(out, "Run Time: {:.3} ms", start.elapsed().as_secs_f64() * 1e3)?;
        }
        Ok(())
    }

    fn dot(&mut self, line: &str) -> Result<Flow, CliError> {
        let words = split_words(line)?;
        let arg = |i: usize| words.get(i).map(String::as_str);
        match words[0].as_str() {
            ".quit" | ".exit" | ".q" => return Ok(Flow::Quit),
            ".help" => writeln!(self.out.writer(), "{HELP}")?,
            ".tables" => {
                let mut names = self.db.list_tables();
                names.sort();
                let out = self.out.writer();
                for n in names {
                    writeln!(out, "{n}")?;
                }
            }
            ".schema" => {
                let names = match arg(1) {
                    Some(t) => vec![t.to_string()],
                    None => {
                        let mut n = self.db.list_tables();
                        n.sort();
                        n
                    }
                };
                for n in names {
                    let text = schema_sql(&self.db, &n)?;
                    writeln!(self.out.writer(), "{text}")?;
                }
            }
            ".mode" => match arg(1) {
                Some(m) => self.printer.mode = Mode::parse(m)?,
                None => return Err(CliError::Usage(".mode table|csv|json|line|list".into())),
            },
            ".separator" => match arg(1) {
                Some(sep) => self.printer.separator = unescape(sep),
                None => return Err(CliError::Usage(".separator SEP".into())),
            },
            ".timer" => self.timer = on_off(arg(1), ".timer on|off")?,
            ".bail" => self.bail = on_off(arg(1), ".bail on|off")?,
            ".headers" | ".header" => self.printer.headers = on_off(arg(1), ".headers on|off")?,
            ".nullvalue" => match arg(1) {
                Some(t) => self.printer.null = Some(t.to_string()),
                None => return Err(CliError::Usage(".nullvalue TEXT".into())),
            },
            ".maxwidth" => match arg(1) {
                Some(n) => self.printer.max_width = crate::number(n, ".maxwidth")?.max(2),
                None => return Err(CliError::Usage(".maxwidth N".into())),
            },
            ".output" => {
                self.out.writer().flush()?;
                self.after_once = None;
                self.out = match arg(1) {
                    None => Out::Stdout(std::io::stdout()),
                    Some(f) => Out::File(create(f)?),
                };
            }
            ".once" => {
                let Some(f) = arg(1) else {
                    return Err(CliError::Usage(".once FILE".into()));
                };
                let file = Out::File(create(f)?);
                self.out.writer().flush()?;
                let before = std::mem::replace(&mut self.out, file);
                // A second `.once` before any statement replaces the first.
                self.after_once.get_or_insert(before);
            }
            ".read" => {
                let Some(f) = arg(1) else {
                    return Err(CliError::Usage(".read FILE".into()));
                };
                // A file that reads itself (or a longer cycle) stops here, not in a stack
                // overflow.
                if self.depth >= MAX_READ_DEPTH {
                    return Err(CliError::Usage(format!(
                        ".read {f}: more than {MAX_READ_DEPTH} files read inside each other"
                    )));
                }
                let file = File::open(f).map_err(|e| CliError::io(format!("opening {f}"), e))?;
                // The file is a script of its own: positions count from its first line.
                let saved = (
                    std::mem::take(&mut self.buf),
                    std::mem::take(&mut self.scan),
                    self.buf_line,
                    self.line,
                    self.number,
                );
                self.depth += 1;
                self.files.push(f.to_string());
                let r = self.run_reader(std::io::BufReader::new(file));
                self.files.pop();
                self.depth -= 1;
                (self.buf, self.scan, self.buf_line, self.line, self.number) = saved;
                r.map_err(|e| CliError::Import(format!("{f}: {e}")))?;
            }
            ".import" => {
                let (Some(file), Some(table)) = (arg(1), arg(2)) else {
                    return Err(CliError::Usage(".import FILE TABLE [options]".into()));
                };
                let opts = crate::import::ImportOptions::parse(&words[3..])?;
                let report =
                    crate::import::import(&self.db, &self.conn, table, file.as_ref(), &opts)?;
                report.print(self.out.writer(), table)?;
            }
            other => {
                return Err(CliError::Usage(format!("unknown command {other} (.help lists them)")));
            }
        }
        Ok(Flow::Continue)
    }
}

/// A separator as typed: `\t` and `\n` stand for a tab and a line break, as in sqlite3.
fn unescape(s: &str) -> String {
    s.replace("\\t", "\t").replace("\\n", "\n")
}

/// `on` or `off` as a boolean.
fn on_off(word: Option<&str>, usage: &str) -> Result<bool, CliError> {
    match word {
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        _ => Err(CliError::Usage(usage.into())),
    }
}

/// Creates (or truncates) an output file.
fn create(f: &str) -> Result<BufWriter<File>, CliError> {
    File::create(f).map(BufWriter::new).map_err(|e| CliError::io(format!("creating {f}"), e))
}

/// The first word of a statement, after blanks and comments.
fn first_word(sql: &str) -> &str {
    let mut s = sql;
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix("--") {
            s = rest.find('\n').map_or("", |i| &rest[i..]);
        } else if let Some(rest) = s.strip_prefix("/*") {
            s = rest.find("*/").map_or("", |i| &rest[i + 2..]);
        } else {
            break;
        }
    }
    let end = s.find(|c: char| !c.is_ascii_alphanumeric() && c != '_').unwrap_or(s.len());
    &s[..end]
}

/// 1-based line and column of byte `offset` in `text`.
/// A position in a text (1-based line and column, in characters) moved forward from one
/// statement to the next, so positioning every statement of a script costs one pass.
#[derive(Debug, Clone)]
struct Cursor {
    offset: usize,
    line: usize,
    col: usize,
}

impl Default for Cursor {
    fn default() -> Self {
        Cursor { offset: 0, line: 1, col: 1 }
    }
}

impl Cursor {
    /// Moves to byte `offset` of `text` (at or after the cursor) and returns its line and
    /// column.
    fn advance(&mut self, text: &str, offset: usize) -> (usize, usize) {
        for c in text[self.offset..offset].chars() {
            if c == '\n' {
                (self.line, self.col) = (self.line + 1, 1);
            } else {
                self.col += 1;
            }
        }
        self.offset = offset;
        (self.line, self.col)
    }
}

/// Rewrites the positions in a database message — `Line: L, Column: C` (syntax errors)
/// and `line L, column C` (planning errors), both relative to the statement — to
/// positions in the script, given where the statement's text starts.
fn relocate(message: &str, line0: usize, col0: usize) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    loop {
        let found = ["Line: ", "line "]
            .iter()
            .filter_map(|k| rest.find(k).map(|i| (i, *k)))
            .min_by_key(|(i, _)| *i);
        let Some((i, key)) = found else {
            out.push_str(rest);
            return out;
        };
        let col_key = if key == "Line: " { ", Column: " } else { ", column " };
        let after = &rest[i + key.len()..];
        let l_len = after.bytes().take_while(u8::is_ascii_digit).count();
        let tail = &after[l_len..];
        let c_len =
            tail.strip_prefix(col_key).map(|t| t.bytes().take_while(u8::is_ascii_digit).count());
        match (after[..l_len].parse::<usize>(), c_len) {
            (Ok(l), Some(c_len)) if c_len > 0 => {
                let c: usize = tail[col_key.len()..col_key.len() + c_len].parse().unwrap_or(1);
                let (al, ac) = (line0 + l - 1, if l == 1 { col0 + c - 1 } else { c });
                out.push_str(&rest[..i]);
                out.push_str(&format!("{key}{al}{col_key}{ac}"));
                rest = &tail[col_key.len() + c_len..];
            }
            _ => {
                out.push_str(&rest[..i + key.len()]);
                rest = after;
            }
        }
    }
}

/// Splits a dot command into words; `'…'` and `"…"` quote words with spaces.
fn split_words(line: &str) -> Result<Vec<String>, CliError> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() {
            chars.next();
            continue;
        }
        let mut w = String::new();
        if c == '\'' || c == '"' {
            chars.next();
            let mut closed = false;
            for d in chars.by_ref() {
                if d == c {
                    closed = true;
                    break;
                }
                w.push(d);
            }
            if !closed {
                return Err(CliError::Usage(format!("unclosed quote in: {line}")));
            }
        } else {
            while let Some(&d) = chars.peek() {
                if d.is_whitespace() {
                    break;
                }
                w.push(d);
                chars.next();
            }
        }
        words.push(w);
    }
    Ok(words)
}

/// A table's `CREATE TABLE` statement (with its keys), plus its indexes and full-text
/// index.
fn schema_sql(db: &Database, name: &str) -> Result<String, CliError> {
    let t = db.table(name)?;
    let defaults = t.column_defaults()?;
    let mut cols: Vec<String> = t
        .schema()?
        .fields()
        .iter()
        .filter(|f| f.name() != "_id")
        .map(|f| {
            let null = if f.is_nullable() { "" } else { " NOT NULL" };
            let default = match defaults.iter().find(|(c, _)| c == f.name()) {
                Some((_, sql)) => format!(" DEFAULT {sql}"),
                None => String::new(),
            };
            format!("  {} {}{null}{default}", ident(f.name()), sql_type(f.data_type()))
        })
        .collect();
    let indexes = t.indexes()?;
    let list = |c: &[String]| c.iter().map(|c| ident(c)).collect::<Vec<_>>().join(", ");
    for k in &indexes {
        match k.kind {
            basalt::IndexKind::PrimaryKey => cols.push(format!(
                "  CONSTRAINT {} PRIMARY KEY ({})",
                ident(&k.name),
                list(&k.columns)
            )),
            basalt::IndexKind::Unique => {
                cols.push(format!("  CONSTRAINT {} UNIQUE ({})", ident(&k.name), list(&k.columns)))
            }
            _ => {}
        }
    }
    for (n, sql) in t.check_constraints()? {
        cols.push(format!("  CONSTRAINT {} CHECK ({sql})", ident(&n)));
    }
    let mut s = format!("CREATE TABLE {} (\n{}\n);", ident(name), cols.join(",\n"));
    for k in indexes.iter().filter(|k| k.kind == basalt::IndexKind::Index) {
        s.push_str(&format!(
            "\nCREATE INDEX {} ON {} ({});",
            ident(&k.name),
            ident(name),
            list(&k.columns)
        ));
    }
    if let Some((cols, tok)) = t.fts_index()? {
        let cols: Vec<String> = cols.iter().map(|c| ident(c)).collect();
        s.push_str(&format!(
            "\nCREATE FTS INDEX ON {} ({}) WITH (tokenizer = '{}');",
            ident(name),
            cols.join(", "),
            tok.name()
        ));
    }
    Ok(s)
}

/// A name as SQL needs it: bare when it is a plain lower-case identifier, quoted otherwise.
fn ident(name: &str) -> String {
    let plain = name.chars().next().is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if plain { name.to_string() } else { format!("\"{}\"", name.replace('"', "\"\"")) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_move_to_the_script() {
        let mut at = Cursor::default();
        assert_eq!(at.advance("ab\ncdé\nf", 4), (2, 2));
        assert_eq!(at.advance("ab\ncdé\nf", 7), (2, 4), "columns count characters");
        assert_eq!(at.advance("ab\ncdé\nf", 8), (3, 1));
        assert_eq!(
            relocate("Expected: x, found: y at Line: 1, Column: 8", 3, 5),
            "Expected: x, found: y at Line: 3, Column: 12"
        );
        assert_eq!(relocate("bad (at line 2, column 4)", 3, 5), "bad (at line 4, column 4)");
        assert_eq!(relocate("no position, line 7 only", 3, 5), "no position, line 7 only");
    }

    #[test]
    fn first_words_skip_comments() {
        assert_eq!(first_word("  -- x\n /* y */ insert INTO t"), "insert");
        assert_eq!(first_word("SELECT(1)"), "SELECT");
        assert_eq!(first_word("-- only"), "");
    }

    #[test]
    fn dot_command_words() {
        assert_eq!(
            split_words(".import 'my file.csv' t --skip-bad").unwrap_or_default(),
            vec![".import", "my file.csv", "t", "--skip-bad"]
        );
        assert!(split_words(".read 'x").is_err());
    }
}
