//! The `basalt` command.
//!
//! Today it can list a database's tables with their row counts and columns
//! (`basalt tables DB`). The interactive SQL shell, one-shot queries, import/export and the
//! demo arrive with the CLI issue, once SQL has landed.

use std::process::ExitCode;

fn usage() -> &'static str {
    "usage:\n  basalt tables DB     list tables, row counts and columns of the database at DB\n  basalt --version\n\nThe SQL shell, one-shot queries, import/export and the demo are not available yet."
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
        ["--version"] => {
            println!("basalt {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        ["tables", db] => match tables(db) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("{}", usage());
            ExitCode::from(2)
        }
    }
}

fn tables(path: &str) -> basalt::Result<()> {
    let db = basalt::Database::open_read_only(path)?;
    for name in db.list_tables() {
        let t = db.table(&name)?;
        println!("{name} ({} rows)", t.count()?);
        for f in t.schema()?.fields() {
            let null = if f.is_nullable() { "" } else { " NOT NULL" };
            println!("  {} {}{null}", f.name(), f.data_type());
        }
    }
    Ok(())
}
