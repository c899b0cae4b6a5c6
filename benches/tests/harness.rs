//! Runs the cross-engine harness the way CI can: `basalt-bench --quick` with the engines this
//! build has (Basalt and SQLite; DuckDB needs the `duckdb` feature). The harness exits
//! non-zero when an engine fails or two engines disagree on a result, so this test keeps the
//! catalogue honest on every change. It checks agreement only, never timing.

use std::process::Command;

#[test]
fn quick_run_covers_every_tabular_metric_and_engines_agree() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_basalt-bench"))
        .args(["--quick", "--output"])
        .arg(dir.path())
        .output()
        .expect("run basalt-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "basalt-bench --quick failed:\n{stderr}");

    let mut json = None;
    let mut md = None;
    for e in std::fs::read_dir(dir.path()).expect("output dir") {
        let p = e.expect("entry").path();
        match p.extension().and_then(|x| x.to_str()) {
            Some("json") => json = Some(std::fs::read_to_string(&p).expect("json")),
            Some("md") => md = Some(std::fs::read_to_string(&p).expect("md")),
            _ => {}
        }
    }
    let json = json.expect("a JSON report");
    let md = md.expect("a Markdown report");
    // All 71 OLAP and 32 OLTP metrics of `benches/README.md` (*Metrics*) are in the report, each once.
    for (prefix, n) in [("OLAP", 71), ("OLTP", 32)] {
        for i in 1..=n {
            let id = format!("\"id\": \"{prefix}-{i}\"");
            assert_eq!(json.matches(&id).count(), 1, "{id} in the JSON report");
        }
    }
    assert!(json.contains("\"scoreboard\""));
    assert!(json.contains("\"out_of_core\""));
    assert!(md.contains("## Scoreboard") && md.contains("## Out-of-core file import"));
    assert!(!md.contains("RESULT MISMATCH") && !md.contains("## FAILURES"));
}

/// Runs `basalt-bench --suite <suite> --quick` and returns its JSON report, failing the test
/// when the run fails (an engine error or a disagreement).
fn quick_suite_report(suite: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = Command::new(env!("CARGO_BIN_EXE_basalt-bench"))
        .args(["--suite", suite, "--quick", "--output"])
        .arg(dir.path())
        .output()
        .expect("run basalt-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "basalt-bench --suite {suite} --quick failed:\n{stderr}");
    std::fs::read_dir(dir.path())
        .expect("output dir")
        .map(|e| e.expect("entry").path())
        .find(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| std::fs::read_to_string(p).expect("json"))
        .expect("a JSON report")
}

#[test]
fn quick_tpch_run_loads_every_table_and_engines_agree_on_all_22_queries() {
    let json = quick_suite_report("tpch");
    let ids = ["TPCH-LOAD", "TPCH-OPEN"].map(String::from);
    for id in ids.into_iter().chain((1..=22).map(|n| format!("TPCH-Q{n:02}"))) {
        assert_eq!(json.matches(&format!("\"id\": \"{id}\"")).count(), 1, "{id} in the report");
    }
    // Both engines loaded the tables and ran every query (a failure is an "error" cell).
    assert!(!json.contains("\"error\""), "an engine failed:\n{json}");
    for engine in ["basalt", "sqlite"] {
        let timed = json.matches(&format!("\"{engine}\": {{\"secs\"")).count();
        assert_eq!(timed, 24, "{engine} figures in the report");
    }
}

#[test]
fn quick_clickbench_run_loads_hits_and_engines_agree_on_all_43_queries() {
    let json = quick_suite_report("clickbench");
    let ids = ["CLICKBENCH-LOAD", "CLICKBENCH-OPEN"]
        .map(String::from)
        .into_iter()
        .chain((0..43).map(|n| format!("CLICKBENCH-Q{n:02}")));
    for id in ids {
        assert_eq!(json.matches(&format!("\"id\": \"{id}\"")).count(), 1, "{id} in the report");
    }
    assert!(!json.contains("\"error\""), "an engine failed:\n{json}");
    // Basalt runs all 43 queries, the load and the reopen; SQLite all but the query with
    // REGEXP_REPLACE.
    for (engine, n) in [("basalt", 45), ("sqlite", 44)] {
        let timed = json.matches(&format!("\"{engine}\": {{\"secs\"")).count();
        assert_eq!(timed, n, "{engine} figures in the report");
    }
}
