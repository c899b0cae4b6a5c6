//! `basalt-bench`: the cross-engine harness. Reproduces the workload of `benches/README.md` on
//! Basalt, SQLite (rusqlite, bundled, FTS5) and — with the `duckdb` feature — DuckDB 1.5.5 in
//! one process: every tabular metric of §2, the transaction / durability diagnostics of §4,
//! the out-of-core file comparison of §5 (one process per engine) and the vector module of
//! §3 (DuckDB only until Basalt's vector search lands: Basalt reports N/A).
//!
//! ```text
//! cargo run --release -p basalt-benches --bin basalt-bench -- [--rows N] [--iterations N]
//!     [--warmup N] [--filter REGEX] [--engines basalt,sqlite,duckdb] [--output DIR] [--quick]
//!     [--vector-rows N] [--ooc-rows N] [--no-ooc] [--no-vector] [--no-diagnostics] [--keep]
//! cargo run --release -p basalt-benches --bin basalt-bench -- --suite tpch [--sf N] …
//! cargo run --release -p basalt-benches --bin basalt-bench -- --suite clickbench [--rows N] …
//! ```
//!
//! `--suite tpch` runs the TPC-H suite ([`tpch`]) instead of the workload, `--suite
//! clickbench` the ClickBench suite ([`clickbench`]).
//!
//! Every engine's result of every metric is cross-checked; a mismatch or an engine error
//! fails the run (exit code 1) after the report is written.

#![forbid(unsafe_code)]

mod clickbench;
mod data;
#[cfg(feature = "duckdb")]
mod duck;
mod engines;
mod metrics;
mod ooc;
mod qps;
mod report;
mod run;
mod tpch;
mod vector;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::rc::Rc;
use std::time::Duration;

use arrow::array::RecordBatch;
use basalt_benches::check::{Digest, arrow59};
use regex::Regex;

use engines::{Kind, Res};
use metrics::{Ctx, Metric};
use report::{Cell, Line};

/// Which benchmark a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suite {
    /// The workload of `benches/README.md` (the default).
    Workload,
    /// TPC-H at a scale factor.
    Tpch,
    /// ClickBench's 43 queries over a generated `hits` table of `--rows` rows.
    ClickBench,
}

/// Command-line options.
struct Args {
    suite: Suite,
    /// TPC-H scale factor.
    sf: f64,
    /// `--engines` was given.
    engines_set: bool,
    rows: usize,
    iterations: usize,
    warmup: usize,
    filter: Option<Regex>,
    engines: Vec<Kind>,
    output: PathBuf,
    quick: bool,
    vector_rows: usize,
    ooc_rows: usize,
    ooc: bool,
    vector: bool,
    diagnostics: bool,
    write_batch: usize,
    /// `--keep`: leave the working directory (generated files, each engine's database) in
    /// place and print its path, for studying plans on the same data afterwards.
    keep: bool,
}

const USAGE: &str = "usage: basalt-bench [--rows N] [--iterations N] [--warmup N] [--filter REGEX] \
[--engines basalt,sqlite,duckdb] [--output DIR] [--quick] [--vector-rows N] [--ooc-rows N] \
[--write-batch N] [--no-ooc] [--no-vector] [--no-diagnostics] [--keep] \
[--suite workload|tpch|clickbench] [--sf N]";

fn built_engines() -> Vec<Kind> {
    Kind::ALL.into_iter().filter(|k| cfg!(feature = "duckdb") || *k != Kind::Duckdb).collect()
}

fn parse_args() -> Res<Args> {
    let mut a = Args {
        suite: Suite::Workload,
        sf: 1.0,
        engines_set: false,
        rows: 1_000_000,
        iterations: 5,
        warmup: 2,
        filter: None,
        engines: built_engines(),
        output: PathBuf::from("bench-results"),
        quick: false,
        vector_rows: 1_000_000,
        ooc_rows: 0,
        ooc: true,
        vector: true,
        diagnostics: true,
        write_batch: 100,
        keep: false,
    };
    let mut rows_set = None;
    let mut sf_set = None;
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut val = |name: &str| it.next().ok_or(format!("{name} needs a value\n{USAGE}"));
        let num = |v: String| v.replace('_', "").parse::<usize>().map_err(|e| format!("{v}: {e}"));
        match arg.as_str() {
            "--rows" => rows_set = Some(num(val("--rows")?)?),
            "--iterations" => a.iterations = num(val("--iterations")?)?.max(1),
            "--warmup" => a.warmup = num(val("--warmup")?)?,
            "--filter" => {
                a.filter = Some(Regex::new(&val("--filter")?).map_err(|e| e.to_string())?)
            }
            "--suite" => {
                a.suite = match val("--suite")?.as_str() {
                    "workload" => Suite::Workload,
                    "tpch" => Suite::Tpch,
                    "clickbench" => Suite::ClickBench,
                    other => return Err(format!("unknown suite {other}\n{USAGE}")),
                }
            }
            "--sf" => {
                let v = val("--sf")?;
                let sf = v.parse::<f64>().map_err(|e| format!("{v}: {e}"))?;
                if !(sf > 0.0 && sf <= 1000.0) {
                    return Err(format!("--sf {v}: a scale factor above 0 and at most 1000"));
                }
                sf_set = Some(sf);
            }
            "--engines" => {
                a.engines_set = true;
                a.engines = val("--engines")?
                    .split(',')
                    .map(|s| {
                        Kind::ALL
                            .into_iter()
                            .find(|k| k.name() == s.trim())
                            .ok_or(format!("unknown engine {s}"))
                    })
                    .collect::<Res<_>>()?;
                if !a.engines.contains(&Kind::Basalt) {
                    a.engines.insert(0, Kind::Basalt);
                }
                a.engines.sort();
            }
            "--output" => a.output = PathBuf::from(val("--output")?),
            "--quick" => a.quick = true,
            "--vector-rows" => a.vector_rows = num(val("--vector-rows")?)?,
            "--ooc-rows" => a.ooc_rows = num(val("--ooc-rows")?)?,
            "--write-batch" => a.write_batch = num(val("--write-batch")?)?.max(1),
            "--no-ooc" => a.ooc = false,
            "--no-vector" => a.vector = false,
            "--no-diagnostics" => a.diagnostics = false,
            "--keep" => a.keep = true,
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if a.quick {
        a.rows = 20_000;
        a.iterations = 1;
        a.warmup = 0;
        a.vector_rows = 2_000;
        a.write_batch = 1;
    }
    if a.suite == Suite::ClickBench && !a.quick {
        a.rows = 10_000_000;
    }
    if let Some(r) = rows_set {
        a.rows = r.max(10_000);
    }
    a.sf = sf_set.unwrap_or(if a.quick { 0.01 } else { 1.0 });
    if a.ooc_rows == 0 {
        a.ooc_rows = a.rows;
    }
    Ok(a)
}

/// The §5 / scalar cross-check string of a digest.
pub fn check_string(d: &Digest) -> String {
    let sum: f64 = d.cols.iter().map(|c| c.sum).sum();
    format!("{}:{:.4}", d.rows, sum)
}

/// The §5 cross-check string of Basalt's batches.
pub fn worker_check(b: &[RecordBatch]) -> String {
    check_string(&arrow59::digest(b))
}

fn sh(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .next()
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<u64>().ok()))
        })
        .map(|kb| format!("{:.0} GiB", kb as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
    format!("{cpu}, {cores} cores, {mem}")
}

fn matches(filter: &Option<Regex>, m: &Metric) -> bool {
    filter.as_ref().is_none_or(|r| r.is_match(&m.id) || r.is_match(&m.name))
}

impl Args {
    /// Whether `--filter` selects a section whose ids start with `prefix`.
    fn wants(&self, prefix: &str) -> bool {
        self.filter.as_ref().is_none_or(|r| r.is_match(prefix))
    }
}

/// Runs a list of metrics metric by metric over every engine, cross-checking as it goes.
fn run_metrics(
    list: &[Metric],
    engines: &mut [Box<dyn engines::Engine>],
    args: &Args,
    always: &[&str],
    failures: &mut Vec<String>,
) -> Vec<Line> {
    let timing = run::Timing {
        warmup: args.warmup,
        iterations: args.iterations,
        write_batch: args.write_batch,
        min_sample: Duration::from_millis(2),
        quick: args.quick,
    };
    let mut lines = Vec::new();
    for m in list {
        let selected = matches(&args.filter, m);
        if !selected && !always.contains(&m.id.as_str()) {
            continue;
        }
        let mut line = Line {
            id: m.id.clone(),
            name: m.name.clone(),
            group: m.group,
            mode: m.mode.label(),
            ranked: m.ranked,
            cells: BTreeMap::new(),
            mismatch: None,
        };
        let mut reference: Option<(Kind, Digest)> = None;
        for e in engines.iter_mut() {
            let kind = e.kind();
            let work = match (m.work)(kind) {
                Ok(w) => w,
                Err(why) => {
                    line.cells.insert(kind, Cell::Na(why));
                    continue;
                }
            };
            match run::measure(m, &work, e.as_mut(), &timing) {
                Ok(fig) => {
                    line.cells.insert(kind, Cell::Secs(fig.secs));
                    match &reference {
                        None => reference = Some((kind, fig.digest)),
                        Some((rk, rd)) => {
                            if let Err(why) = rd.agrees(&fig.digest, m.check) {
                                let msg = format!("{} vs {}: {why}", rk.name(), kind.name());
                                eprintln!("!! {} result mismatch: {msg}", m.id);
                                failures.push(format!("{}: {msg}", m.id));
                                line.mismatch = Some(msg);
                            }
                        }
                    }
                }
                Err(err) => {
                    eprintln!("!! {} failed on {}: {err}", m.id, kind.name());
                    failures.push(format!("{} on {}: {err}", m.id, kind.name()));
                    line.cells.insert(kind, Cell::Error(err));
                }
            }
        }
        let figs: Vec<String> = line
            .cells
            .iter()
            .map(|(k, c)| match c {
                Cell::Secs(s) => format!("{} {}", k.name(), report::fmt_secs(*s)),
                Cell::Na(_) => format!("{} N/A", k.name()),
                _ => format!("{} ERROR", k.name()),
            })
            .collect();
        let ratio = line.ratio().map(|r| format!("  ratio {r:.3}")).unwrap_or_default();
        eprintln!("{:<9} {:<48} {}{ratio}", m.id, m.name, figs.join(" | "));
        if selected {
            lines.push(line);
        }
    }
    lines
}

fn main() {
    basalt_benches::alloc::keep_freed_memory();
    match real_main() {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("basalt-bench: {e}");
            std::process::exit(2);
        }
    }
}

fn real_main() -> Res<bool> {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--worker") {
        return worker(&argv[2..]).map(|_| true);
    }
    let args = parse_args()?;
    let stamp = sh("date", &["-u", "+%Y%m%dT%H%M%SZ"]);
    let work = std::env::temp_dir().join(format!("basalt-bench-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let result = run_all(&args, &work, &stamp);
    if args.keep {
        eprintln!("kept the working directory {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    result
}

fn run_all(args: &Args, work: &Path, stamp: &str) -> Res<bool> {
    match args.suite {
        Suite::Tpch => return run_tpch(args, work, stamp),
        Suite::ClickBench => return run_clickbench(args, work, stamp),
        Suite::Workload => {}
    }
    eprintln!("generating {} rows …", args.rows);
    let data = Rc::new(data::generate(args.rows));
    data::write_files(&data, work).map_err(|e| format!("writing files: {e}"))?;
    let ctx = Ctx {
        rows: args.rows,
        data: data.clone(),
        files: work.to_path_buf(),
        duck_fts: std::env::var_os("BASALT_DUCKDB_FTS").is_some(),
    };
    let mut engines = engines::open_all(work, &args.engines)?;
    let mut failures = Vec::new();

    let mut meta = common_meta(&args.engines);
    meta.extend([
        ("rows".into(), args.rows.to_string()),
        ("timing".into(), format!(
            "{} warm-up + {} timed iterations, median; micro-operations: per-call median of samples ≥ 2 ms (writes: {} calls per sample on every engine)",
            args.warmup, args.iterations, args.write_batch
        )),
        ("durability".into(), "default tier survives a killed process on every engine (Basalt process-safe WAL, SQLite WAL + synchronous=OFF, DuckDB WAL synced at commit); power-safe rows: Basalt power-safe, SQLite synchronous=FULL, DuckDB default".into()),
    ]);

    let mut lines =
        run_metrics(&metrics::tabular(&ctx), &mut engines, args, &["OLTP-1"], &mut failures);
    if args.diagnostics {
        if args.wants("DIAG-QPS") {
            let span = Duration::from_millis(if args.quick { 200 } else { 2_000 });
            lines.extend(qps::lines(&engines, span, &mut failures));
        }
        lines.extend(run_metrics(
            &metrics::diagnostics(&ctx),
            &mut engines,
            args,
            &[],
            &mut failures,
        ));
    }
    drop(engines);

    let mut extra = Vec::new();
    let mut sections = String::new();
    if args.vector && args.wants("VEC") {
        let (vlines, md) = vector::run(
            args.vector_rows,
            &args.engines,
            args.warmup,
            args.iterations,
            work,
            &mut failures,
        )?;
        lines.extend(vlines);
        sections.push_str(&md);
    }
    if args.ooc && args.wants("OOC") {
        let (md, js) = run_ooc(args, work, &mut failures)?;
        sections.push_str(&md);
        extra.push(("out_of_core".to_string(), js));
    }
    let report = Report {
        title: "Basalt cross-engine benchmark",
        file: format!("basalt-bench-{stamp}"),
        meta,
        lines,
        engines: args.engines.clone(),
        sections,
        extra,
    };
    write_report(args, report, &failures)
}

/// What a run reports.
struct Report {
    title: &'static str,
    /// File name without extension.
    file: String,
    meta: Vec<(String, String)>,
    lines: Vec<Line>,
    engines: Vec<Kind>,
    /// Markdown sections after the table.
    sections: String,
    /// Extra JSON members.
    extra: Vec<(String, String)>,
}

/// The run's description every report starts with.
fn common_meta(engines: &[Kind]) -> Vec<(String, String)> {
    let mut versions = vec![
        format!("basalt {}", env!("CARGO_PKG_VERSION")),
        format!("SQLite {}", rusqlite::version()),
    ];
    if engines.contains(&Kind::Duckdb) {
        versions.push("DuckDB 1.5.5 (prebuilt libduckdb, duckdb crate 1.10505.0)".into());
    }
    let profile =
        if cfg!(debug_assertions) { "dev (debug assertions; not for figures)" } else { "release" };
    let git = sh("git", &["rev-parse", "--short", "HEAD"]);
    let dirty = !sh("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    vec![
        ("date".into(), sh("date", &["-u", "+%Y-%m-%d %H:%M UTC"])),
        ("machine".into(), machine()),
        ("git".into(), format!("{git}{}", if dirty { " (dirty)" } else { "" })),
        ("rustc".into(), sh("rustc", &["--version"])),
        ("profile".into(), profile.into()),
        ("versions".into(), versions.join(", ")),
        ("command".into(), std::env::args().collect::<Vec<_>>().join(" ")),
    ]
}

/// Writes the Markdown and JSON files; `Ok(false)` when anything failed.
fn write_report(args: &Args, r: Report, failures: &[String]) -> Res<bool> {
    let mut md = report::markdown(r.title, &r.meta, &r.lines, &r.engines);
    md.push_str(&r.sections);
    if !failures.is_empty() {
        md.push_str(&format!(
            "\n## FAILURES\n\n{}\n",
            failures.iter().map(|f| format!("- {f}")).collect::<Vec<_>>().join("\n")
        ));
    }
    std::fs::create_dir_all(&args.output).map_err(|e| e.to_string())?;
    let base = args.output.join(&r.file);
    std::fs::write(base.with_extension("md"), &md).map_err(|e| e.to_string())?;
    std::fs::write(base.with_extension("json"), report::json(&r.meta, &r.lines, &r.extra))
        .map_err(|e| e.to_string())?;
    println!("{md}");
    eprintln!("wrote {}.md and .json", base.display());
    if failures.is_empty() {
        Ok(true)
    } else {
        eprintln!("\n{} FAILURE(S):", failures.len());
        for f in failures {
            eprintln!("  {f}");
        }
        Ok(false)
    }
}

/// A query suite's engines: SQLite left out when `too_big` unless `--engines` named it
/// (`limit` says where, for the report).
fn suite_engines(args: &Args, too_big: bool, limit: &str) -> (Vec<Kind>, String) {
    let mut kinds = args.engines.clone();
    if args.engines_set || !too_big || !kinds.contains(&Kind::Sqlite) {
        return (kinds, String::new());
    }
    kinds.retain(|k| *k != Kind::Sqlite);
    (kinds, format!("; SQLite left out above {limit} (name it in --engines to include it)"))
}

/// Runs a query suite (its load metric `load`, then its queries) on `report.engines` and
/// writes the report; `report.meta` holds the suite's own lines, put after the common ones.
fn run_suite(
    args: &Args,
    work: &Path,
    metrics: &[Metric],
    load: &str,
    mut report: Report,
) -> Res<bool> {
    let mut engines = engines::open_all(work, &report.engines)?;
    let mut failures = Vec::new();
    report.lines = run_metrics(metrics, &mut engines, args, &[load], &mut failures);
    drop(engines);
    let mut meta = common_meta(&report.engines);
    meta.append(&mut report.meta);
    meta.push((
        "timing".into(),
        format!(
            "load timed once; queries: {} warm-up + {} timed runs, median; one process, every engine on its own storage",
            args.warmup, args.iterations
        ),
    ));
    report.meta = meta;
    write_report(args, report, &failures)
}

/// A suite's report before its run: title, file name and description.
fn suite_report(
    title: &'static str,
    file: String,
    engines: Vec<Kind>,
    meta: Vec<(String, String)>,
) -> Report {
    Report {
        title,
        file,
        meta,
        lines: Vec::new(),
        engines,
        sections: String::new(),
        extra: Vec::new(),
    }
}

/// `--suite tpch`: generate, load, run the 22 queries on every engine, cross-checked.
fn run_tpch(args: &Args, work: &Path, stamp: &str) -> Res<bool> {
    // SQLite's nested-loop plans take hours on the correlated queries at SF 1.
    let (kinds, left_out) = suite_engines(args, args.sf > 0.1, "SF 0.1");
    eprintln!("generating TPC-H SF {} …", args.sf);
    let dir = work.join("tpch");
    let counts = tpch::generate(args.sf, &dir)?;
    let meta = vec![
        ("scale factor".into(), format!("{}{left_out}", args.sf)),
        (
            "tables".into(),
            counts.iter().map(|(t, n)| format!("{t} {n}")).collect::<Vec<_>>().join(", "),
        ),
    ];
    let sf = format!("{}", args.sf).replace('.', "_");
    let report = suite_report("TPC-H", format!("tpch-sf{sf}-{stamp}"), kinds, meta);
    run_suite(args, work, &tpch::metrics(args.sf, &dir), "TPCH-LOAD", report)
}

/// `--suite clickbench`: generate `hits`, load it, run the 43 queries on every engine,
/// cross-checked.
fn run_clickbench(args: &Args, work: &Path, stamp: &str) -> Res<bool> {
    // Loading 105 columns row by row and its row-store scans take hours at 10M rows.
    let (kinds, left_out) = suite_engines(args, args.rows > 1_000_000, "1,000,000 rows");
    eprintln!("generating {} hits …", args.rows);
    let dir = work.join("clickbench");
    let (generated, took) = basalt_benches::timed(|| clickbench::generate(args.rows, &dir));
    generated?;
    eprintln!("generated in {:.1} s", took.as_secs_f64());
    let meta = vec![
        ("rows".into(), format!("{}{left_out}", args.rows)),
        (
            "data".into(),
            "generated `hits` (105 columns, ClickBench's types; benches/README.md, ClickBench)"
                .into(),
        ),
    ];
    let file = format!("clickbench-{}-{stamp}", args.rows);
    let report = suite_report("ClickBench", file, kinds, meta);
    run_suite(args, work, &clickbench::metrics(&dir), "CLICKBENCH-LOAD", report)
}

fn run_ooc(args: &Args, work: &Path, failures: &mut Vec<String>) -> Res<(String, String)> {
    let mut md = String::from("\n## Out-of-core file import\n\n");
    md.push_str(&format!(
        "{} rows; each engine in its own process with a 1 GB memory limit; {} warm-up + {} runs, median.\n\n",
        args.ooc_rows, args.warmup, args.iterations.max(1)
    ));
    md.push_str("| Format | Engine | Direct filtered count | Materialise | Rows/s | Repeated query | Peak RSS Δ | Storage |\n|---|---|--:|--:|--:|--:|--:|--:|\n");
    let mut js = Vec::new();
    for format in ["csv", "parquet"] {
        let file = work.join(format!("ooc.{format}"));
        ooc::write_file(args.ooc_rows, format, &file)?;
        let mut checks: Vec<(Kind, String)> = Vec::new();
        for k in args.engines.iter().copied().filter(|k| *k != Kind::Sqlite) {
            let dir = work.join(format!("ooc-{format}-{}", k.name()));
            match ooc::spawn(&ooc::Job {
                engine: k,
                format,
                file: &file,
                dir: &dir,
                runs: args.iterations,
                warmup: args.warmup,
            }) {
                Ok(f) => {
                    md.push_str(&format!(
                        "| {format} | {} | {} | {} | {:.0} | {} | {:.1} MiB | {:.1} MiB |\n",
                        k.name(),
                        report::fmt_secs(f.direct),
                        report::fmt_secs(f.materialize),
                        f.rows as f64 / f.materialize,
                        report::fmt_secs(f.query),
                        f.rss as f64 / 1048576.0,
                        f.storage as f64 / 1048576.0
                    ));
                    js.push(format!(
                        "{{\"format\": \"{format}\", \"engine\": \"{}\", \"direct_secs\": {:e}, \"materialize_secs\": {:e}, \"rows\": {}, \"query_secs\": {:e}, \"rss_bytes\": {}, \"storage_bytes\": {}}}",
                        k.name(), f.direct, f.materialize, f.rows, f.query, f.rss, f.storage
                    ));
                    if f.rows != args.ooc_rows as u64 {
                        failures.push(format!(
                            "OOC {format} {}: {} rows imported, expected {}",
                            k.name(),
                            f.rows,
                            args.ooc_rows
                        ));
                    }
                    checks.push((k, f.check));
                }
                Err(e) => {
                    eprintln!("!! OOC {format} {}: {e}", k.name());
                    failures.push(format!("OOC {format} {}: {e}", k.name()));
                }
            }
        }
        if let Some((k0, c0)) = checks.first() {
            for (k, c) in &checks[1..] {
                if c != c0 {
                    failures.push(format!("OOC {format}: {} {c0} vs {} {c}", k0.name(), k.name()));
                }
            }
        }
    }
    Ok((md, format!("[{}]", js.join(", "))))
}

/// `--worker sql DB RUNS SQL [SETUP]`: runs one statement `RUNS` times on a Basalt database
/// (a `--keep` run's `basalt` directory), prints each time, then its `EXPLAIN ANALYZE` — for
/// profiling one query (`perf record -p`) without generating and loading the data again.
/// `SETUP` (say `SET datafusion.… = …`) runs once before, on the same connection.
fn sql_worker(db: &str, runs: &str, sql: &str, setup: Option<&str>) -> Res<()> {
    let runs = runs.parse::<usize>().map_err(|e| e.to_string())?;
    let db = basalt::Database::open(db).map_err(|e| e.to_string())?;
    let conn = db.connect();
    if let Some(setup) = setup {
        conn.sql(setup).map_err(|e| e.to_string())?;
    }
    for i in 0..runs {
        let t = std::time::Instant::now();
        let rows: usize =
            conn.sql(sql).map_err(|e| e.to_string())?.iter().map(|b| b.num_rows()).sum();
        println!("run {i}: {:.2} ms, {rows} rows", t.elapsed().as_secs_f64() * 1e3);
    }
    let plan = conn.sql(&format!("EXPLAIN ANALYZE {sql}")).map_err(|e| e.to_string())?;
    let text = arrow::util::pretty::pretty_format_batches(&plan).map_err(|e| e.to_string())?;
    println!("{text}");
    Ok(())
}

/// `--worker ooc ENGINE FORMAT FILE DIR RUNS WARMUP`: one engine's §5 run, in this process;
/// `--worker sql …`: see [`sql_worker`].
fn worker(args: &[String]) -> Res<()> {
    match args {
        [what, db, runs, sql] if what == "sql" => return sql_worker(db, runs, sql, None),
        [what, db, runs, sql, setup] if what == "sql" => {
            return sql_worker(db, runs, sql, Some(setup));
        }
        _ => {}
    }
    let [what, engine, format, file, dir, runs, warmup] = args else {
        return Err("--worker ooc ENGINE FORMAT FILE DIR RUNS WARMUP".into());
    };
    if what != "ooc" {
        return Err(format!("unknown worker {what}"));
    }
    let kind = Kind::ALL.into_iter().find(|k| k.name() == engine).ok_or("unknown engine")?;
    let n = |s: &String| s.parse::<usize>().map_err(|e| e.to_string());
    let f = ooc::worker(&ooc::Job {
        engine: kind,
        format,
        file: Path::new(file),
        dir: Path::new(dir),
        runs: n(runs)?,
        warmup: n(warmup)?,
    })?;
    println!("{}", ooc::encode(&f));
    Ok(())
}
