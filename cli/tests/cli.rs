//! Runs the built `basalt` binary: one-shot SQL, scripts on stdin, output modes, errors and
//! exit codes, import / export, the demo.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn basalt(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the basalt binary starts");
    let mut input = child.stdin.take().expect("stdin is piped");
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).expect("stdin takes the script");
    }
    drop(input);
    child.wait_with_output().expect("basalt runs to the end")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs and expects success; returns stdout.
fn ok(args: &[&str], stdin: Option<&str>) -> String {
    let out = basalt(args, stdin);
    assert!(
        out.status.success(),
        "basalt {args:?} failed: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    text(&out.stdout)
}

/// Runs and expects failure with `code`; returns stderr.
fn fails(args: &[&str], stdin: Option<&str>, code: i32) -> String {
    let out = basalt(args, stdin);
    assert_eq!(
        out.status.code(),
        Some(code),
        "basalt {args:?}: {}\n{}",
        text(&out.stderr),
        text(&out.stdout)
    );
    text(&out.stderr)
}

fn db_in(dir: &Path) -> String {
    dir.join("db").to_string_lossy().into_owned()
}

fn count(db: &str, table: &str) -> String {
    ok(&["-c", &format!("SELECT count(*) FROM {table}"), "--mode", "csv", db], None)
        .lines()
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

#[test]
fn one_shot_statements_print_each_result_in_every_mode() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = db_in(dir.path());
    let setup = "CREATE TABLE t (a INT, b TEXT, c DOUBLE); INSERT INTO t VALUES (1, 'x', 0.1 + 0.2), (22, NULL, 1e20)";
    ok(&["-c", setup, &db], None);

    let table =
        ok(&["-c", "SELECT a, b, c FROM t ORDER BY a; SELECT count(*) AS n FROM t", &db], None);
    assert_eq!(
        table,
        "+----+------+------+\n\
         | a  | b    | c    |\n\
         +----+------+------+\n\
         |  1 | x    |  0.3 |\n\
         | 22 | NULL | 1e20 |\n\
         +----+------+------+\n\
         (2 rows)\n\
         +---+\n\
         | n |\n\
         +---+\n\
         | 2 |\n\
         +---+\n\
         (1 row)\n"
    );
    let csv = ok(&["-c", "SELECT a, b FROM t ORDER BY a", "--mode", "csv", &db], None);
    assert_eq!(csv, "a,b\n1,x\n22,\n");
    let empty = ok(&["-c", "SELECT a, b FROM t WHERE a > 100", "--mode", "csv", &db], None);
    assert_eq!(empty, "a,b\n");
    let json = ok(&["-c", "SELECT a, b FROM t ORDER BY a", "--mode", "json", &db], None);
    assert_eq!(json, "[{\"a\":1,\"b\":\"x\"},{\"a\":22,\"b\":null}]\n");
    let line = ok(&["-c", "SELECT a, b AS longer FROM t ORDER BY a", "--mode", "line", &db], None);
    assert_eq!(line, "     a = 1\nlonger = x\n\n     a = 22\nlonger = NULL\n");
    // Wide values are cut; the shell keeps numbers right-aligned.
    let wide = ok(&["-c", "SELECT repeat('ab', 30) AS w", "--max-width", "10"], None);
    assert!(wide.contains("| ababababa… |"), "{wide}");
}

#[test]
fn scripts_on_stdin_with_dot_commands_and_multi_line_statements() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = db_in(dir.path());
    let script = "-- a comment; with a semicolon\n\
        CREATE TABLE people (\n  name TEXT NOT NULL,\n  note TEXT\n);\n\
        INSERT INTO people VALUES ('ann', 'likes ; and ''quotes'''),\n  ('ben', NULL);\n\
        .tables\n\
        .schema people\n\
        .mode csv\n\
        SELECT name, note FROM people ORDER BY name;\n\
        .mode line\n\
        SELECT count(*) AS n FROM people\n";
    let out = ok(&[&db], Some(script));
    assert!(
        out.contains("people\nCREATE TABLE people (\n  name TEXT NOT NULL,\n  note TEXT\n);\n"),
        "{out}"
    );
    assert!(out.contains("name,note\nann,likes ; and 'quotes'\nben,\n"), "{out}");
    assert!(out.ends_with("n = 2\n"), "{out}");

    // .output and .read
    let sql_file = dir.path().join("q.sql");
    std::fs::write(&sql_file, "SELECT name FROM people\nWHERE name = 'ben';\n")
        .expect("write script");
    let out_file = dir.path().join("out.csv");
    let script = format!(
        ".mode csv\n.output {}\n.read {}\n.output\nSELECT 1 AS one;\n",
        out_file.display(),
        sql_file.display()
    );
    let out = ok(&[&db], Some(&script));
    assert_eq!(out, "one\n1\n");
    assert_eq!(std::fs::read_to_string(&out_file).expect("output file"), "name\nben\n");

    // .timer prints a run time after each statement.
    let out = ok(&[], Some(".timer on\nSELECT 1;\n"));
    assert!(out.contains("Run Time: "), "{out}");
    // .help lists the commands.
    assert!(ok(&[], Some(".help\n")).contains(".import FILE TABLE"));
}

#[test]
fn script_errors_name_their_position_and_the_script_goes_on_unless_it_bails() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = db_in(dir.path());
    // A syntax error in the third statement, on the script's third line.
    let script = "CREATE TABLE t (a INT);\nINSERT INTO t VALUES (1);\nSELECT a FROM t WHERE a = = 1;\nINSERT INTO t VALUES (2); SELECT nope FROM t; INSERT INTO t VALUES (3);\n";
    let out = basalt(&[&db], Some(script));
    assert_eq!(out.status.code(), Some(1), "a failed statement fails the script");
    let err = text(&out.stderr);
    assert!(err.contains("line 3 (statement 3)"), "{err}");
    assert!(err.contains("Line: 3, Column: 27"), "{err}");
    assert!(err.contains("line 4 (statement 5)"), "{err}");
    assert_eq!(err.lines().filter(|l| l.starts_with("error: ")).count(), 2, "{err}");
    // Every statement but the two failing ones ran.
    assert_eq!(count(&db, "t"), "3");

    // -bail (or .bail on): the first error ends the script.
    let fresh = "CREATE TABLE u (a INT);\nSELECT nope FROM u;\nINSERT INTO u VALUES (1);\n";
    let err = fails(&["-bail", &db], Some(fresh), 1);
    assert!(err.contains("line 2 (statement 2)"), "{err}");
    assert_eq!(count(&db, "u"), "0");
    let err = fails(&[&db], Some(".bail on\nSELECT nope FROM u;\nINSERT INTO u VALUES (1);\n"), 1);
    assert!(err.contains("nope"), "{err}");
    assert_eq!(count(&db, "u"), "0");
    // Errors inside a `.read` file name the file, and the outer script goes on.
    let inner = dir.path().join("inner.sql");
    std::fs::write(&inner, "INSERT INTO u VALUES (5);\nSELECT nope FROM u;\n").expect("write");
    let script = format!(".read {}\nINSERT INTO u VALUES (6);\n", inner.display());
    let err = fails(&[&db], Some(&script), 1);
    assert!(err.contains(&format!("{}: line 2 (statement 2)", inner.display())), "{err}");
    assert_eq!(count(&db, "u"), "2");

    // -c: the same, and the failing statement is named.
    let err = fails(&["-c", "SELECT 1; SELECT nope FROM t", &db], None, 1);
    assert!(err.contains("line 1 (statement 2)"), "{err}");
    assert!(err.contains("nope"), "{err}");
    let err = fails(&["-c", "SELECT * FROM missing", &db], None, 1);
    assert!(err.contains("missing"), "{err}");
    // A constraint error from storage.
    let err = fails(
        &["-c", "CREATE TABLE n (x TEXT NOT NULL); INSERT INTO n VALUES (NULL)", &db],
        None,
        1,
    );
    assert!(err.to_lowercase().contains("null"), "{err}");

    // Command-line usage errors exit 2; a script's failures 1.
    fails(&["--mode", "xml"], None, 2);
    fails(&["--bogus"], None, 2);
    fails(&["import", "db"], None, 2);
    let err = fails(&[&db], Some(".nope\nSELECT 1;\n"), 1);
    assert!(err.contains("unknown command .nope"), "{err}");
}

#[test]
fn shell_output_conventions() {
    // An empty JSON result is one empty array.
    let json = ok(&["-c", "SELECT 1 AS a WHERE false", "--mode", "json"], None);
    assert_eq!(json, "[]\n");
    let json = ok(&["--mode", "json"], Some("SELECT 1 AS a WHERE false;\nSELECT 2 AS b;\n"));
    assert_eq!(json, "[]\n[{\"b\":2}]\n");
    // .headers and .nullvalue, in table and CSV modes.
    let out = ok(
        &[],
        Some(
            ".headers off\n.nullvalue -\nSELECT NULL AS x, 1 AS y;\n.mode csv\nSELECT 2 AS z, NULL AS w;\n",
        ),
    );
    assert_eq!(out, "+---+---+\n| - | 1 |\n+---+---+\n(1 row)\n2,-\n", "{out}");
    // A value's line breaks start new lines in its cell; EXPLAIN is shown whole.
    let out = ok(&[], Some("SELECT 'one' || chr(10) || 'two' AS v, 7 AS n;\n"));
    assert!(out.contains("| one | 7 |\n| two |   |\n"), "{out}");
    let plan = ok(
        &["--max-width", "10"],
        Some("CREATE TABLE t (a INT);\nEXPLAIN SELECT a FROM t WHERE a > 1;\n"),
    );
    assert!(plan.contains("BasaltScan: table=t"), "{plan}");
    assert!(!plan.contains('…'), "{plan}");
    // sqlite3's list mode, its separator, NULL empty unless .nullvalue says otherwise.
    let out = ok(
        &["--mode", "list"],
        Some(
            "SELECT 1 AS a, NULL AS b, 'x y' AS c;\n.headers off\n.separator \\t\nSELECT 2, 'z';\n",
        ),
    );
    assert_eq!(out, "a|b|c\n1||x y\n2\tz\n");
    // .once sends only the next result to a file.
    let dir = tempfile::tempdir().expect("temp dir");
    let f = dir.path().join("once.csv");
    let out = ok(
        &["--mode", "csv"],
        Some(&format!(".once {}\nSELECT 1 AS a;\nSELECT 2 AS b;\n", f.display())),
    );
    assert_eq!(out, "b\n2\n");
    assert_eq!(std::fs::read_to_string(&f).expect("once file"), "a\n1\n");
}

#[test]
fn directories_that_are_not_databases_or_lost_their_manifest_are_refused_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Someone's directory with a `t<digits>` folder is not a database: refused, kept.
    let notes = dir.path().join("d/t1/src/notes.txt");
    std::fs::create_dir_all(notes.parent().expect("parent")).expect("mkdir");
    std::fs::write(&notes, "precious").expect("write");
    let d = dir.path().join("d").to_string_lossy().into_owned();
    for args in [vec!["-c", "SELECT 1", &d], vec!["--readonly", "-c", "SELECT 1", &d]] {
        let err = fails(&args, None, 1);
        assert!(err.contains("is not a Basalt database"), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&notes).expect("still there"), "precious");
    let names: Vec<_> = std::fs::read_dir(dir.path().join("d"))
        .expect("list")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names, ["t1"], "nothing created next to it");

    // A database without its MANIFEST is refused and keeps its files; `recover` salvages.
    let db = db_in(dir.path());
    ok(&["-c", "CREATE TABLE t (a INT); INSERT INTO t VALUES (1), (2)", &db], None);
    std::fs::remove_file(Path::new(&db).join("MANIFEST")).expect("rm MANIFEST");
    let err = fails(&["-c", "SELECT count(*) FROM t", &db], None, 1);
    assert!(err.contains("MANIFEST is missing") && err.contains("basalt recover"), "{err}");
    assert!(Path::new(&db).join("t1").read_dir().expect("t1").count() > 0);
    let out = ok(&["recover", &db], None);
    assert!(out.contains("MANIFEST was missing: adopted"), "{out}");
    assert!(out.contains("moved to"), "{out}");
    // What the adopted copy does not name was kept aside, not deleted.
    assert!(Path::new(&db).join("salvaged/1/t1").read_dir().expect("kept").count() > 0);
    let out = ok(&["recover", &db], None);
    assert!(out.contains("nothing to recover"), "{out}");
}

/// `basalt import` into a new table, killed at different moments: the table is either
/// absent or complete, never empty or partial.
#[test]
fn a_killed_import_leaves_no_table_or_the_whole_table() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = db_in(dir.path());
    let csv = dir.path().join("big.csv");
    let rows = 200_000;
    let mut s = String::from("name,age,score\n");
    for i in 0..rows {
        s.push_str(&format!("user_{i},{},{}.25\n", 18 + i % 60, i % 1000));
    }
    std::fs::write(&csv, &s).expect("write csv");
    ok(&["-c", "CREATE TABLE other (a INT)", &db], None);
    let mut outcomes = Vec::new();
    for (round, wait_ms) in [5u64, 40, 120, 300, 700, 1500].into_iter().enumerate() {
        let table = format!("t{round}");
        let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
            .args(["import", &db, &table, &csv.to_string_lossy(), "--quiet"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("import starts");
        std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        let _ = child.kill(); // SIGKILL
        let status = child.wait().expect("import ends");
        let tables = ok(&["tables", &db], None);
        if tables.contains(&format!("{table} (")) {
            assert_eq!(count(&db, &table), rows.to_string(), "round {round}: a partial table");
            outcomes.push(format!("{wait_ms} ms: complete ({status})"));
        } else {
            outcomes.push(format!("{wait_ms} ms: absent ({status})"));
        }
        assert!(!tables.contains("__basalt"), "{tables}");
    }
    println!("killed imports: {outcomes:?}");
}

/// Runs `basalt` with `args` and `stdin`, killing it after `limit`; the exit status, or
/// `None` if it had to be killed (a hang).
fn bounded(args: &[&str], stdin: &[u8], limit: std::time::Duration) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the basalt binary starts");
    let mut input = child.stdin.take().expect("stdin is piped");
    let data = stdin.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let _ = writer.join();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut e, &mut err);
    }
    match status {
        None => (None, err),
        Some(s) => {
            // A signal (abort, segfault) is no exit code: report it as the test's failure.
            use std::os::unix::process::ExitStatusExt;
            assert!(s.signal().is_none(), "basalt {args:?} died of signal {:?}: {err}", s.signal());
            (s.code(), err)
        }
    }
}

/// Hostile input through the command line: deep and wide expressions, long set operations,
/// huge literals and IN lists, invalid UTF-8, NUL bytes, overflow, very wide tables, a
/// script reading itself, a statement of 40,000 lines. Each ends with exit code 0 or 1 —
/// never an abort or a crash — and none hangs.
#[test]
fn hostile_input_neither_aborts_nor_hangs() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = db_in(dir.path());
    ok(&["-c", "CREATE TABLE t AS SELECT value AS a FROM generate_series(1, 1000)", &db], None);
    let chain = |sep: &str, term: &str, n: usize| vec![term; n].join(sep);
    let selfread = dir.path().join("self.sql");
    std::fs::write(&selfread, format!(".read {}\n", selfread.display())).expect("write");
    let wide: Vec<String> = (0..10_000).map(|i| format!("c{i} INT")).collect();
    let rows: Vec<String> = (0..40_000).map(|i| format!("({i}, 'row {i}')")).collect();
    let cases: Vec<(&str, Vec<u8>, Option<&str>)> = vec![
        ("10,000-term OR", format!("SELECT count(*) FROM t WHERE {};", chain(" OR ", "a = 7", 10_000)).into_bytes(), None),
        ("10,000-term AND", format!("SELECT count(*) FROM t WHERE {};", chain(" AND ", "a > 0", 10_000)).into_bytes(), None),
        ("10,000-term +", format!("SELECT {};", chain("+", "1", 10_000)).into_bytes(), Some("too complex")),
        ("10,000-term + over a column", format!("SELECT sum({}) FROM t;", chain("+", "a", 10_000)).into_bytes(), Some("too complex")),
        ("5,000 UNION ALL", format!("{};", chain(" UNION ALL ", "SELECT 1", 5_000)).into_bytes(), Some("too complex")),
        ("10,000 || ", format!("SELECT length({});", chain(" || ", "'x'", 10_000)).into_bytes(), None),
        ("nested parentheses", format!("SELECT {}1{};", "(".repeat(5_000), ")".repeat(5_000)).into_bytes(), Some("nested too deeply")),
        ("nested subqueries", format!("SELECT {}1{};", "(SELECT ".repeat(500), ")".repeat(500)).into_bytes(), Some("nested too deeply")),
        (".read of itself", format!(".read {}\n", selfread.display()).into_bytes(), Some("inside each other")),
        ("100,000-value IN list", format!("SELECT count(*) FROM t WHERE a IN ({});", (0..100_000).map(|i| i.to_string()).collect::<Vec<_>>().join(",")).into_bytes(), None),
        ("8 MB string literal", format!("SELECT length('{}');", "x".repeat(8 << 20)).into_bytes(), None),
        ("invalid UTF-8", b"SELECT '\xff\xfe';\n".to_vec(), None),
        ("NUL bytes", b"SELECT 'a\0b', length('a\0b');\nCREATE TABLE \"n\0\" (x INT);\n".to_vec(), None),
        ("overflow", b"SELECT 9223372036854775807 + 1;".to_vec(), Some("overflow")),
        ("rpad to 2^31", b"SELECT length(rpad('x', 2147483647));".to_vec(), Some("esources exhausted")),
        ("lpad with a wide fill", "SELECT length(lpad('x', 400000000, 'é'));".as_bytes().to_vec(), Some("esources exhausted")),
        ("repeat 3 GB", b"SELECT length(repeat('abc', 1000000000));".to_vec(), Some("exhausted")),
        ("array_repeat 1e9", b"SELECT cardinality(array_repeat(1, 1000000000));".to_vec(), Some("esources exhausted")),
        ("array_resize 2e9", b"SELECT cardinality(array_resize([1], 2000000000, 0));".to_vec(), Some("esources exhausted")),
        ("text doubled by recursion", b"WITH RECURSIVE r(n) AS (SELECT 'ab' UNION ALL SELECT n || n FROM r) SELECT count(*) FROM r;".to_vec(), Some("esources exhausted")),
        ("array doubled by recursion", b"WITH RECURSIVE r(n) AS (SELECT [1] UNION ALL SELECT n || n FROM r) SELECT count(*) FROM r;".to_vec(), Some("esources exhausted")),
        ("10,000 columns", format!("CREATE TABLE w ({}); INSERT INTO w (c9999) VALUES (1); SELECT c9999 FROM w;", wide.join(", ")).into_bytes(), None),
        ("40,000-line INSERT", format!("CREATE TABLE big (i INT, s TEXT);\nINSERT INTO big VALUES\n{};\nSELECT count(*) FROM big;\n", rows.join(",\n")).into_bytes(), None),
        ("bounded recursive CTE", b"WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r WHERE n < 10000) SELECT count(*) FROM r;".to_vec(), None),
    ];
    let mut report = Vec::new();
    for (name, script, want) in &cases {
        let (code, err) = bounded(&[&db], script, std::time::Duration::from_secs(120));
        let code = code.unwrap_or_else(|| panic!("{name}: hung (killed after 120 s)"));
        assert!(code == 0 || code == 1, "{name}: exit code {code}: {err}");
        if let Some(w) = want {
            assert!(
                code == 1 && err.contains(w),
                "{name}: expected an error with {w:?}, got {code}: {err}"
            );
        }
        report.push(format!("{name}: {code}"));
    }
    println!("hostile input: {} cases, 0 aborts, 0 hangs: {report:?}", cases.len());
}

/// Ctrl-C (SIGINT) during a statement stops the statement, not the process: the script
/// reports the interruption and exits 1.
#[cfg(unix)]
#[test]
fn ctrl_c_interrupts_the_running_statement() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_basalt"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("basalt starts");
    let script = "SELECT 'started' AS s;\n\
        WITH RECURSIVE r(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM r) SELECT count(*) FROM r;\n";
    child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("script");
    // The endless statement starts right after the first one's result is printed.
    let mut out = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    while !line.contains("started") {
        line.clear();
        assert!(out.read_line(&mut line).expect("read") > 0, "basalt ended early");
    }
    // A SIGINT that lands between the two statements cancels nothing, so one is sent
    // every 100 ms until basalt has ended (at most a minute).
    let pid = child.id().to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() {
        assert!(std::time::Instant::now() < deadline, "Ctrl-C did not stop the statement");
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let result = child.wait_with_output().expect("basalt ends");
    let err = text(&result.stderr);
    assert_eq!(result.status.code(), Some(1), "{err}");
    assert!(err.contains("interrupted"), "{err}");
}

#[test]
fn errors_name_what_is_wrong() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = db_in(dir.path());
    ok(&["-c", "CREATE TABLE n (a INT, b TEXT NOT NULL, c INT, d TEXT NOT NULL)", &db], None);
    let err = fails(&["-c", "INSERT INTO n VALUES (1, 'x', 2, NULL)", &db], None, 1);
    assert!(err.contains("column 'd' is NOT NULL"), "{err}");
    let err = fails(&["-c", "INSERT INTO n (d, b) VALUES ('a', NULL)", &db], None, 1);
    assert!(err.contains("column 'b' is NOT NULL"), "{err}");
    let err = fails(&["-c", "SELECT * FROM read_csv('/dev/null')"], None, 1);
    assert!(err.contains("not a regular file"), "{err}");
    let out = dir.path().join("x.csv").to_string_lossy().into_owned();
    let err = fails(&["export", &db, "nosuchtable", &out], None, 1);
    assert!(err.contains("no table 'nosuchtable'"), "{err}");
    for target in ["MANIFEST", "t1/x.csv", "../db/new.csv"] {
        let sql = format!("COPY n TO '{db}/{target}'");
        let err = fails(&["-c", &sql, &db], None, 1);
        assert!(err.contains("refusing to write into the database directory"), "{target}: {err}");
    }
    assert_eq!(count(&db, "n"), "0", "the database still opens");
    let out = ok(&["--mode", "csv"], Some("\u{feff}SELECT 1 AS one;\n"));
    assert_eq!(out, "one\n1\n");
    let script = "BEGIN;\nINSERT INTO n VALUES (1, 'x', 2, 'y');\n";
    let err = fails(&[&db], Some(script), 1);
    assert!(err.contains("ended inside a transaction") && err.contains("rolled back"), "{err}");
    assert_eq!(count(&db, "n"), "0");
}

#[test]
fn queries_files_without_a_database() {
    let dir = tempfile::tempdir().expect("temp dir");
    let csv = dir.path().join("f.csv");
    std::fs::write(&csv, "k,v\na,1\nb,2\na,3\n").expect("write csv");
    let sql =
        format!("SELECT k, sum(v) AS s FROM read_csv('{}') GROUP BY k ORDER BY k", csv.display());
    assert_eq!(ok(&["-c", &sql, "--mode", "csv"], None), "k,s\na,4\nb,2\n");
}

#[test]
fn import_csv_all_or_nothing_with_line_numbers_or_skipping() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = db_in(dir.path());
    let good = dir.path().join("good.csv");
    let mut s = String::from("name,age,score\n");
    for i in 0..20_000 {
        s.push_str(&format!("user_{i},{},{}.5\n", 18 + i % 60, i % 100));
    }
    std::fs::write(&good, &s).expect("write csv");
    let out = ok(&["import", &db, "users", &good.to_string_lossy()], None);
    assert!(out.contains("imported 20,000 rows into users (created)"), "{out}");
    assert!(out.contains("rows/s"), "{out}");
    let tables = ok(&["tables", &db], None);
    assert!(
        tables.contains("users (20000 rows)\n  name TEXT\n  age BIGINT\n  score DOUBLE\n"),
        "{tables}"
    );
    assert_eq!(count(&db, "users"), "20000");

    // A bad value deep in the file: nothing of it lands, the line is named.
    let bad = dir.path().join("bad.csv");
    let mut s = String::from("name,age,score\n");
    for i in 0..15_000 {
        let age = if i == 12_345 { "twelve".to_string() } else { (20 + i % 50).to_string() };
        s.push_str(&format!("x_{i},{age},1.0\n"));
    }
    std::fs::write(&bad, &s).expect("write csv");
    let err = fails(&["import", &db, "users", &bad.to_string_lossy()], None, 1);
    assert!(err.contains("line 12347, column age: 'twelve' is not a valid BIGINT"), "{err}");
    assert!(err.contains("nothing was imported"), "{err}");
    assert_eq!(count(&db, "users"), "20000");
    // Into a new table: the table is not left behind either.
    fails(
        &[
            "import",
            &db,
            "fresh",
            &bad.to_string_lossy(),
            "--schema",
            "name TEXT, age BIGINT, score DOUBLE",
        ],
        None,
        1,
    );
    assert!(!ok(&["tables", &db], None).contains("fresh"));

    // --skip-bad imports the rest and reports the skipped line.
    let out = ok(&["import", &db, "users", &bad.to_string_lossy(), "--skip-bad"], None);
    assert!(out.contains("imported 14,999 rows into users"), "{out}");
    assert!(out.contains("skipped 1 bad rows"), "{out}");
    assert!(out.contains("line 12347"), "{out}");
    assert_eq!(count(&db, "users"), "34999");

    // Empty fields are NULL, not bad; no header and another delimiter.
    let tsv = dir.path().join("plain.tsv");
    std::fs::write(&tsv, "1\t\n2\tb\n").expect("write tsv");
    ok(&["import", &db, "plain", &tsv.to_string_lossy(), "--no-header"], None);
    let out = ok(&["-c", "SELECT * FROM plain ORDER BY 1", "--mode", "csv", &db], None);
    assert_eq!(out, "column_1,column_2\n1,\n2,b\n");

    // The shell's .import does the same.
    let out = ok(
        &[&db],
        Some(&format!(".import {} again\nSELECT count(*) AS n FROM again;\n", good.display())),
    );
    assert!(out.contains("imported 20,000 rows into again"), "{out}");
}

#[test]
fn import_json_lines_and_parquet_and_export_round_trips() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = db_in(dir.path());
    let json = dir.path().join("items.jsonl");
    std::fs::write(
        &json,
        "{\"id\": 1, \"tag\": \"a\"}\n\n{\"id\": 2, \"tag\": \"b\"}\n{\"id\": 3}\n",
    )
    .expect("write json");
    let out = ok(&["import", &db, "items", &json.to_string_lossy()], None);
    assert!(out.contains("imported 3 rows into items"), "{out}");
    assert_eq!(
        ok(&["-c", "SELECT id, tag FROM items ORDER BY id", "--mode", "csv", &db], None),
        "id,tag\n1,a\n2,b\n3,\n"
    );

    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"id\": 4, \"tag\": \"c\"}\n{\"id\": 5, \"tag\": \n{\"id\": \"six\", \"tag\": \"d\"}\n{\"id\": 7}\n").expect("write json");
    let err = fails(
        &["import", &db, "items", &bad.to_string_lossy(), "--schema", "id BIGINT, tag TEXT"],
        None,
        1,
    );
    assert!(err.contains("line 2"), "{err}");
    assert_eq!(count(&db, "items"), "3");
    let out = ok(
        &[
            "import",
            &db,
            "items",
            &bad.to_string_lossy(),
            "--schema",
            "id BIGINT, tag TEXT",
            "--skip-bad",
        ],
        None,
    );
    assert!(out.contains("imported 2 rows into items"), "{out}");
    assert!(
        out.contains("skipped 2 bad rows") && out.contains("line 2") && out.contains("line 3"),
        "{out}"
    );
    assert_eq!(
        ok(&["-c", "SELECT id FROM items ORDER BY id", "--mode", "csv", &db], None),
        "id\n1\n2\n3\n4\n7\n"
    );

    // Export a table to Parquet, import it elsewhere, export a query to JSON and CSV.
    let pq = dir.path().join("items.parquet");
    let out = ok(&["export", &db, "items", &pq.to_string_lossy()], None);
    assert!(out.contains("exported 5 rows"), "{out}");
    let other = dir.path().join("other").to_string_lossy().into_owned();
    let out = ok(&["import", &other, "copy", &pq.to_string_lossy()], None);
    assert!(out.contains("imported 5 rows into copy (created)"), "{out}");
    assert_eq!(
        ok(&["-c", "SELECT sum(id) AS s FROM copy", "--mode", "csv", &other], None),
        "s\n17\n"
    );
    let js = dir.path().join("q.json");
    ok(
        &["export", &db, "SELECT id FROM items WHERE id > 3 ORDER BY id", &js.to_string_lossy()],
        None,
    );
    assert_eq!(std::fs::read_to_string(&js).expect("exported json"), "{\"id\":4}\n{\"id\":7}\n");
    let csv = dir.path().join("q.csv");
    ok(
        &[
            "export",
            &db,
            "SELECT id, tag FROM items WHERE id < 3 ORDER BY id",
            &csv.to_string_lossy(),
        ],
        None,
    );
    assert_eq!(std::fs::read_to_string(&csv).expect("exported csv"), "id,tag\n1,a\n2,b\n");
    // An unknown extension needs --format.
    fails(&["import", &db, "x", &dir.path().join("data.bin").to_string_lossy()], None, 2);
}

#[test]
fn demo_runs_on_small_data() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = ok(&["demo", &dir.path().to_string_lossy(), "--rows", "3000"], None);
    for want in [
        "SQL: group by city",
        "SQL: join",
        "vector top-k",
        "full-text search (BM25)",
        "hybrid",
        "Timings",
    ] {
        assert!(out.contains(want), "demo output lacks {want}:\n{out}");
    }
    // The database stays for the shell.
    let db = dir.path().join("demo.basalt");
    assert_eq!(count(&db.to_string_lossy(), "users"), "3000");
    let schema = ok(&[&db.to_string_lossy()], Some(".schema docs\n"));
    assert!(
        schema.contains("embedding VECTOR(128)")
            && schema.contains("CREATE FTS INDEX ON docs (title, body)"),
        "{schema}"
    );
}
