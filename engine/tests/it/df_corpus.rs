//! DataFusion's own sqllogictest corpus, run against Basalt connections (so its CREATE TABLE
//! and INSERT statements create native Basalt tables). Not part of `cargo test`: it needs
//! the corpus, which `engine/tests/fetch-datafusion-slt.sh` downloads (the `test_files/` of
//! the `datafusion-sqllogictest` 55.2.0 crate). Run:
//!
//! ```sh
//! engine/tests/fetch-datafusion-slt.sh            # once; prints the directory
//! BASALT_DF_SLT_DIR=<dir> cargo test -p basalt --test it -- --ignored datafusion_corpus --nocapture
//! ```
//!
//! `.ci/run` runs it and fails when fewer records pass than `tests/datafusion-corpus-floor`
//! says (raise the floor when a change makes more pass).
//!
//! Every record (statement or query) runs on its own, so one failure does not hide the rest.
//! The report counts passed and failed records per file and sorts failures into classes;
//! it is written to `$BASALT_DF_SLT_REPORT` (default `datafusion-slt-report.md` in the
//! system temp directory).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sqllogictest::{DefaultColumnType, Record};

use crate::slt::SltDb;

/// Why a record failed, from its SQL and error text.
fn classify(sql: &str, err: &str) -> &'static str {
    let sql_l = sql.to_lowercase();
    let err_l = err.to_lowercase();
    if sql_l.trim_start().starts_with("explain") || err_l.contains("[sql] explain") {
        "EXPLAIN text (plans differ by design: BasaltScan instead of DataSourceExec)"
    } else if err_l.contains("../../testing")
        || err_l.contains("testing/data")
        || err_l.contains("no such file")
        || err_l.contains("not found: /")
        || err_l.contains("object at location")
        || err_l.contains("no files found at")
        || err_l.contains("cannot infer schema from an empty location")
        || err_l.contains("partitioned table backed by a single file")
    {
        "needs external data files (not shipped in the crate)"
    } else if err_l.contains("is not supported (")
        || err_l.contains("no storage encoding")
        || err_l.contains("unsupportedtype")
        || err_l.contains("a column needs a value type")
    {
        "column types Basalt does not store"
    } else if err_l.contains("primary key / unique constraints")
        || err_l.contains("column default values")
        || err_l.contains("temporary tables")
        || err_l.contains("basalt has one schema")
        || err_l.contains("bad view name")
        || err_l.contains("ddl inside a transaction")
        || err_l.contains("savepoint")
        || err_l.contains("several changes in one alter")
        || err_l.contains("not yet available in basalt")
    {
        "statements Basalt refuses (documented as not supported)"
    } else if (err_l.contains("not found") || err_l.contains("does not exist"))
        && err_l.contains("table")
    {
        "a table an earlier failing record should have made is missing"
    } else if err_l.contains("expected to fail") || err_l.contains("expected error") {
        "error expected, statement succeeded or failed differently"
    } else if err_l.contains("query result mismatch") && err_l.contains("_id uint64") {
        "by design: DESCRIBE / information_schema list the _id column"
    } else if err_l.contains("query result mismatch")
        && (err_l.contains("utf8view")
            || err_l.contains("largeutf8")
            || err_l.contains("binaryview"))
    {
        "by design: text and binary are stored as Utf8 / Binary (type names differ)"
    } else if err_l.contains("query result mismatch") || err_l.contains("column count mismatch") {
        "result mismatch (investigate)"
    } else {
        "other error (investigate)"
    }
}

/// The table name and location of a `CREATE EXTERNAL TABLE` whose files are not there.
fn missing_external(sql: &str) -> Option<String> {
    let l = sql.to_lowercase();
    let at = l.find("external table")?;
    let mut words = l[at + "external table".len()..].split_whitespace();
    let mut name = words.next()?;
    if name == "if" {
        words.next();
        words.next();
        name = words.next()?;
    }
    let name = name.split('(').next()?.trim_matches('"').to_string();
    let loc = l.find("location")?;
    let rest = &sql[loc + "location".len()..];
    let start = rest.find('\'')? + 1;
    let end = start + rest[start..].find('\'')?;
    let path = &rest[start..end];
    (!Path::new(path).exists()).then_some(name)
}

/// Whether `sql` names one of `tables` (as a whole word).
fn mentions_any(sql: &str, tables: &std::collections::HashSet<String>) -> bool {
    sql.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .any(|w| tables.contains(w))
}

#[derive(Default)]
struct FileResult {
    passed: usize,
    failed: usize,
}

#[test]
#[ignore = "needs the DataFusion corpus (see module docs)"]
fn datafusion_corpus() {
    let dir = PathBuf::from(
        std::env::var("BASALT_DF_SLT_DIR").expect("set BASALT_DF_SLT_DIR to the test_files dir"),
    );
    let only = std::env::var("BASALT_DF_SLT_ONLY").ok();
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .filter(|p| only.as_ref().is_none_or(|o| p.to_string_lossy().contains(o.as_str())))
        .collect();
    files.sort();
    // Relative paths in the files (data, scratch output) are relative to the crate root.
    std::env::set_current_dir(dir.parent().unwrap()).unwrap();
    let mut per_file: BTreeMap<String, FileResult> = BTreeMap::new();
    let mut classes: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
    for file in &files {
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        let records = match sqllogictest::parse_file::<DefaultColumnType>(file) {
            Ok(r) => r,
            Err(e) => {
                classes.entry("file does not parse").or_default().push(format!("{name}: {e}"));
                continue;
            }
        };
        // Output a file writes goes under scratch/<file>; start it empty, as DataFusion's runner
        // does (leftovers from an earlier run change listing results).
        let stem = file.file_stem().unwrap().to_string_lossy().to_string();
        let _ = std::fs::remove_dir_all(dir.join("scratch").join(&stem));
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("db");
        let mut runner = sqllogictest::Runner::new(|| {
            let path = path.clone();
            async move { Ok::<_, crate::slt::SltError>(SltDb::open_df(&path)) }
        });
        runner.add_label("datafusion");
        let res = per_file.entry(name.clone()).or_default();
        let mut missing = std::collections::HashSet::new();
        let started = std::time::Instant::now();
        for record in records {
            let sql = match &record {
                Record::Statement { sql, .. } | Record::Query { sql, .. } => sql.clone(),
                _ => {
                    let _ = runner.run(record);
                    continue;
                }
            };
            if let Some(t) = missing_external(&sql) {
                missing.insert(t);
            }
            match runner.run(record) {
                Ok(_) => res.passed += 1,
                Err(e) => {
                    res.failed += 1;
                    let text = e.display(false).to_string();
                    let first = text.lines().take(6).collect::<Vec<_>>().join(" | ");
                    let class = if mentions_any(&sql, &missing) {
                        "needs external data files (not shipped in the crate)"
                    } else {
                        classify(&sql, &text)
                    };
                    classes
                        .entry(class)
                        .or_default()
                        .push(format!("{name}: {}", first.chars().take(400).collect::<String>()));
                }
            }
            // A file that hangs the harness is a bug of its own; report and move on.
            if started.elapsed() > std::time::Duration::from_secs(600) {
                classes.entry("file timed out (10 min)").or_default().push(name.clone());
                break;
            }
        }
    }
    let passed: usize = per_file.values().map(|r| r.passed).sum();
    let failed: usize = per_file.values().map(|r| r.failed).sum();
    let clean = per_file.values().filter(|r| r.failed == 0).count();
    let mut report = String::new();
    writeln!(report, "# DataFusion 55.2.0 sqllogictest corpus on Basalt\n").unwrap();
    writeln!(
        report,
        "{} files, {clean} with no failure; {passed} of {} records passed ({:.1}%).\n",
        per_file.len(),
        passed + failed,
        100.0 * passed as f64 / (passed + failed).max(1) as f64
    )
    .unwrap();
    writeln!(report, "| failure class | records |\n|---|---|").unwrap();
    for (c, v) in &classes {
        writeln!(report, "| {c} | {} |", v.len()).unwrap();
    }
    writeln!(report, "\n## Per file (passed / failed)\n").unwrap();
    for (f, r) in &per_file {
        writeln!(report, "- {f}: {} / {}", r.passed, r.failed).unwrap();
    }
    for (c, v) in &classes {
        writeln!(report, "\n## {c}\n").unwrap();
        for line in v {
            writeln!(report, "- {}", line.replace('\n', " ")).unwrap();
        }
    }
    let out = std::env::var("BASALT_DF_SLT_REPORT")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir().join("datafusion-slt-report.md"));
    std::fs::write(&out, &report).unwrap();
    println!("{}", report.lines().take(20).collect::<Vec<_>>().join("\n"));
    println!("full report: {}", out.display());
    // The floor guards the whole corpus (CI runs it); a subset has no floor.
    if only.is_none() {
        let floor_file =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/datafusion-corpus-floor");
        let floor: usize = std::fs::read_to_string(&floor_file)
            .unwrap_or_else(|e| panic!("reading {}: {e}", floor_file.display()))
            .trim()
            .parse()
            .expect("the floor is a whole number");
        assert!(
            passed >= floor,
            "{passed} records passed, fewer than the floor of {floor} ({}): a change broke \
             records that passed (see {})",
            floor_file.display(),
            out.display()
        );
        if passed > floor {
            println!("{passed} records passed: raise {} from {floor}", floor_file.display());
        }
    }
}
