//! Tests across processes: the test binary re-runs itself as a child (selected by an
//! environment variable) to hold the writer lock, or to be killed in the middle of writes.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use basalt::arrow::array::{Array, RecordBatch, StringArray, UInt64Array};
use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{Database, Error, Row, StorageError};

const ROLE: &str = "BASALT_TEST_CHILD_ROLE";
const DIR: &str = "BASALT_TEST_CHILD_DIR";

fn spawn(test: &str, role: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .env(DIR, dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Reads child stdout lines until one contains `marker`; returns what follows it. (The
/// test harness may print its own text before the child's on the same line.)
fn wait_for(lines: &mut impl Iterator<Item = std::io::Result<String>>, marker: &str) -> String {
    for l in lines {
        let l = l.unwrap();
        if let Some(pos) = l.find(marker) {
            return l[pos + marker.len()..].to_string();
        }
    }
    panic!("child exited before printing {marker}");
}

#[test]
fn a_second_process_cannot_write_but_can_read() {
    if std::env::var(ROLE).as_deref() == Ok("hold") {
        let db = Database::open(std::env::var(DIR).unwrap()).unwrap();
        let t = db
            .create_table("t", &Schema::new(vec![Field::new("x", DataType::Utf8, true)]))
            .unwrap();
        t.insert_row(Row::new().set("x", "hello")).unwrap();
        db.flush().unwrap();
        println!("@@ready");
        std::io::stdout().flush().unwrap();
        let mut s = String::new();
        std::io::stdin().read_line(&mut s).unwrap(); // hold the lock until the parent says
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child =
        spawn("process::a_second_process_cannot_write_but_can_read", "hold", dir.path());
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    wait_for(&mut lines, "@@ready");
    let opts = |ms| basalt::Options {
        lock_timeout: std::time::Duration::from_millis(ms),
        ..basalt::Options::default()
    };
    let e = Database::open_with(dir.path(), opts(0)).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::Locked { .. })), "{e}");
    assert!(e.to_string().contains("locked"));
    // The lock timeout holds across processes: a writer waits for it, then says so.
    let e = Database::open_with(dir.path(), opts(200)).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::LockTimeout { .. })), "{e}");
    let ro = Database::open_read_only(dir.path()).unwrap();
    assert_eq!(ro.table("t").unwrap().count().unwrap(), 1);
    // A writer waiting (default timeout, 10 s) gets the database when the other one exits.
    let path = dir.path().to_path_buf();
    let waiter = std::thread::spawn(move || Database::open(&path).map(|_| ()));
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(child.stdin.take()); // EOF: the child exits and releases the lock
    assert!(child.wait().unwrap().success());
    waiter.join().unwrap().unwrap();
    Database::open(dir.path()).unwrap();
}

fn batch(first: u64, n: u64) -> RecordBatch {
    let s = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, false)]));
    RecordBatch::try_new(
        s,
        vec![Arc::new(StringArray::from_iter_values(
            (first..first + n).map(|i| format!("row {i}")),
        ))],
    )
    .unwrap()
}

/// A child bulk-inserts in a loop and reports each acknowledged insert; the parent kills it
/// with SIGKILL at a random-ish point. Every acknowledged row must survive, nothing may be
/// half there, and the database must open cleanly.
#[test]
fn killed_writer_loses_no_acknowledged_bulk_insert() {
    const N: u64 = 20_000;
    if std::env::var(ROLE).as_deref() == Ok("writer") {
        let db = Database::open(std::env::var(DIR).unwrap()).unwrap();
        let t = match db.table("t") {
            Ok(t) => t,
            Err(_) => db
                .create_table("t", &Schema::new(vec![Field::new("name", DataType::Utf8, false)]))
                .unwrap(),
        };
        loop {
            let first = t.count().unwrap() + 1;
            let r = t.insert(&batch(first, N)).unwrap();
            println!("@@acked {}", r.first + r.count - 1);
            std::io::stdout().flush().unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for round in 0..3u64 {
        let acked = kill_after_acks(
            "process::killed_writer_loses_no_acknowledged_bulk_insert",
            "writer",
            dir.path(),
            2 + round,
        );
        let db = Database::open(dir.path()).unwrap();
        let t = db.table("t").unwrap();
        let count = t.count().unwrap();
        assert!(
            count >= acked && count <= acked + N,
            "round {round}: {count} rows, {acked} acknowledged"
        );
        assert_eq!(count % N, 0, "a partial insert is visible");
        let all = t.scan().unwrap().collect_batch().unwrap();
        let ids = all.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
        let names = all.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(all.num_rows() as u64, count);
        for i in (0..all.num_rows()).step_by(997) {
            assert_eq!(names.value(i), format!("row {}", ids.value(i)));
        }
        assert_eq!(names.null_count(), 0);
    }
}

/// Child side: inserts rows named after their ids, one auto-commit each, printing every
/// acknowledged id, until killed.
fn insert_rows_until_killed(t: &basalt::Table) -> ! {
    let mut next = t.count().unwrap() + 1;
    loop {
        let id = t.insert_row(Row::new().set("name", format!("row {next}"))).unwrap();
        assert_eq!(id, next);
        println!("@@acked {id}");
        std::io::stdout().flush().unwrap();
        next += 1;
    }
}

/// Parent side: runs `test` as a child in role `role`, SIGKILLs it once it has acknowledged
/// `n` rows, and returns the last acknowledged id.
fn kill_after_acks(test: &str, role: &str, dir: &Path, n: u64) -> u64 {
    let mut child = spawn(test, role, dir);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut acked = 0;
    for _ in 0..n {
        acked = wait_for(&mut lines, "@@acked ").trim().parse::<u64>().unwrap();
    }
    child.kill().unwrap();
    child.wait().unwrap();
    acked
}

/// Reopens `dir` and checks table "t": at least `acked` rows, ids contiguous from 1 (no
/// commit lost in between), each row's name matching its id. Returns the row count.
fn check_acked_rows(dir: &Path, acked: u64, round: usize) -> u64 {
    let db = Database::open(dir).unwrap();
    let t = db.table("t").unwrap();
    let count = t.count().unwrap();
    // The child runs ahead of what the parent has read, so only the lower bound is exact;
    // contiguity shows nothing in between was lost.
    assert!(count >= acked, "round {round}: {count} rows, {acked} acknowledged");
    let all = t.scan().unwrap().collect_batch().unwrap();
    let ids = all.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
    let names = all.column(1).as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(ids.values().to_vec(), (1..=count).collect::<Vec<_>>(), "round {round}");
    for i in 0..all.num_rows() {
        assert_eq!(names.value(i), format!("row {}", ids.value(i)));
    }
    db.close().unwrap();
    count
}

fn name_schema() -> Schema {
    Schema::new(vec![Field::new("name", DataType::Utf8, false)])
}

/// A child commits single rows (process-safe, the default) and reports each acknowledged
/// one; the parent SIGKILLs it after a varying number. Every acknowledged row survives, ids
/// are contiguous (no commit lost in between), and each row's data matches its id.
/// The child's small memtable threshold makes flushes (and log truncation) happen mid-run.
#[test]
fn killed_writer_loses_no_acknowledged_small_commit() {
    const TEST: &str = "process::killed_writer_loses_no_acknowledged_small_commit";
    if std::env::var(ROLE).as_deref() == Ok("rows") {
        let opts = basalt::Options { memtable_flush_rows: 700, ..basalt::Options::default() };
        let db = basalt::Database::open_with(std::env::var(DIR).unwrap(), opts).unwrap();
        let t = match db.table("t") {
            Ok(t) => t,
            Err(_) => db.create_table("t", &name_schema()).unwrap(),
        };
        insert_rows_until_killed(&t);
    }
    let dir = tempfile::tempdir().unwrap();
    for (round, kill_after) in [37u64, 1_500, 800].into_iter().enumerate() {
        let acked = kill_after_acks(TEST, "rows", dir.path(), kill_after);
        check_acked_rows(dir.path(), acked, round);
    }
}

/// The per-connection durability override decides what survives a kill: on a database
/// whose default is `Buffered` (nothing logged), a connection set to `ProcessSafe` logs its
/// auto-commit writes, so every one it acknowledged survives SIGKILL.
#[test]
fn connection_durability_override_survives_a_kill() {
    const TEST: &str = "process::connection_durability_override_survives_a_kill";
    if std::env::var(ROLE).as_deref() == Ok("conn-rows") {
        let opts = basalt::Options {
            durability: basalt::Durability::Buffered,
            ..basalt::Options::default()
        };
        let db = basalt::Database::open_with(std::env::var(DIR).unwrap(), opts).unwrap();
        if db.table("t").is_err() {
            db.create_table("t", &name_schema()).unwrap();
            db.flush().unwrap();
        }
        let conn = db.connect();
        conn.set_durability(Some(basalt::Durability::ProcessSafe));
        insert_rows_until_killed(&conn.table("t").unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let mut total = 0;
    for (round, kill_after) in [50u64, 400].into_iter().enumerate() {
        let acked = kill_after_acks(TEST, "conn-rows", dir.path(), kill_after);
        assert_eq!(acked, total + kill_after, "round {round}: ids go on after the last round");
        total = check_acked_rows(dir.path(), acked, round);
    }
}

/// A child runs DDL (process-safe, the default: catalog changes go to the pending
/// manifest slots without any fsync) and reports each statement acknowledged; the parent
/// SIGKILLs it. Every acknowledged CREATE, DROP and ALTER survives, and the reopened
/// database takes writes.
#[test]
fn killed_writer_loses_no_acknowledged_ddl() {
    const TEST: &str = "process::killed_writer_loses_no_acknowledged_ddl";
    if std::env::var(ROLE).as_deref() == Ok("ddl") {
        let db = Database::open(std::env::var(DIR).unwrap()).unwrap();
        for i in 1u64.. {
            db.sql(&format!("CREATE TABLE d{i} (k BIGINT)")).unwrap();
            if i % 3 == 0 {
                db.sql(&format!("DROP TABLE d{}", i - 1)).unwrap();
            }
            if i % 4 == 0 {
                db.sql(&format!("ALTER TABLE d{i} ADD COLUMN c{i} BIGINT")).unwrap();
            }
            println!("@@acked {i}");
            std::io::stdout().flush().unwrap();
        }
    }
    for (round, kill_after) in [7u64, 120].into_iter().enumerate() {
        let dir = tempfile::tempdir().unwrap();
        let acked = kill_after_acks(TEST, "ddl", dir.path(), kill_after);
        let db = Database::open(dir.path()).unwrap();
        let tables = db.list_tables();
        // Step j + 1 drops d{j} when j + 1 is a multiple of 3; the step after the last
        // acknowledged one may or may not have run.
        for j in 1..=acked {
            let dropped = (j + 1) % 3 == 0;
            let exists = tables.contains(&format!("d{j}"));
            if j < acked {
                assert_eq!(exists, !dropped, "round {round}: d{j} ({acked} acknowledged)");
            } else {
                assert!(exists || dropped, "round {round}: d{j} was acknowledged");
            }
            if exists && j % 4 == 0 {
                let cols = db.table(&format!("d{j}")).unwrap().schema().unwrap();
                assert!(cols.field_with_name(&format!("c{j}")).is_ok(), "round {round}: d{j}");
            }
        }
        db.sql("INSERT INTO d1 (k) VALUES (1), (2)").unwrap();
        db.close().unwrap();
        let db = Database::open(dir.path()).unwrap();
        assert_eq!(db.table("d1").unwrap().count().unwrap(), 2, "round {round}");
    }
}

/// Rounds for the randomised kill tests: `BASALT_CRASH_ROUNDS` (small by default for CI).
fn crash_rounds() -> u64 {
    std::env::var("BASALT_CRASH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(4)
}

/// The next of a pseudo-random sequence (xorshift), for where the kill tests kill.
fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// A child commits transactions that each insert one row into two tables (and, every tenth
/// time, delete the oldest pair); it is SIGKILLed at pseudo-random points, many rounds.
/// Afterwards both tables hold exactly the same ids — no transaction is half there — and
/// every acknowledged one is present.
#[test]
fn killed_transactions_are_all_or_nothing() {
    if std::env::var(ROLE).as_deref() == Ok("txn") {
        let db = Database::open(std::env::var(DIR).unwrap()).unwrap();
        let s = Schema::new(vec![Field::new("name", DataType::Utf8, false)]);
        for t in ["a", "b"] {
            if db.table(t).is_err() {
                db.create_table(t, &s).unwrap();
            }
        }
        let conn = db.connect();
        let (a, b) = (conn.table("a").unwrap(), conn.table("b").unwrap());
        for i in 0.. {
            conn.begin().unwrap();
            let ia = a.insert_row(Row::new().set("name", format!("a{i}"))).unwrap();
            let ib = b.insert_row(Row::new().set("name", format!("b{i}"))).unwrap();
            assert_eq!(ia, ib);
            if i % 10 == 9 {
                let oldest = a.scan_columns(&["_id"]).unwrap().collect_batch().unwrap();
                let ids = oldest.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
                let first = ids.values().iter().copied().min().unwrap();
                assert!(a.delete(first).unwrap());
                assert!(b.delete(first).unwrap());
            }
            conn.commit().unwrap();
            println!("@@acked {ia}");
            std::io::stdout().flush().unwrap();
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    for round in 0..crash_rounds() {
        let kill_after = 5 + xorshift(&mut seed) % 400;
        let acked = kill_after_acks(
            "process::killed_transactions_are_all_or_nothing",
            "txn",
            dir.path(),
            kill_after,
        );
        let db = Database::open(dir.path()).unwrap();
        let ids = |t: &str| -> Vec<u64> {
            let b = db.table(t).unwrap().scan_columns(&["_id"]).unwrap().collect_batch().unwrap();
            let mut v =
                b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap().values().to_vec();
            v.sort_unstable();
            v
        };
        let (ia, ib) = (ids("a"), ids("b"));
        assert_eq!(ia, ib, "round {round}: a transaction is half there");
        assert!(
            ia.last().copied().unwrap_or(0) >= acked,
            "round {round}: acknowledged {acked} lost"
        );
        db.close().unwrap();
    }
}

/// Peak resident memory of this process so far (Linux `VmHWM`), in bytes.
fn peak_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

fn current_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
}

/// Writes a CSV file of `rows` rows (about 80 bytes each); returns its size.
fn write_csv(path: &Path, rows: u64) -> u64 {
    let mut w = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    writeln!(w, "id,name,city,amount,note").unwrap();
    for i in 0..rows {
        writeln!(
            w,
            "{i},customer-{:08},city-{},{}.{:02},note text for row number {i:010}",
            i * 7919 % 100_000_000,
            i % 97,
            i % 100_000,
            i % 100
        )
        .unwrap();
    }
    w.flush().unwrap();
    std::fs::metadata(path).unwrap().len()
}

#[test]
fn importing_a_file_larger_than_the_memory_limit_streams() {
    if std::env::var(ROLE).as_deref() == Ok("import") {
        let dir = std::path::PathBuf::from(std::env::var(DIR).unwrap());
        let opts =
            basalt::Options { sql_memory_limit: Some(4 << 20), ..basalt::Options::default() };
        let db = Database::open_with(dir.join("db"), opts).unwrap();
        let conn = db.connect();
        conn.sql("SELECT 1").unwrap(); // runtime and session set up before measuring
        let before = current_rss();
        let csv = dir.join("big.csv");
        conn.sql(&format!("CREATE TABLE big AS SELECT * FROM read_csv('{}')", csv.display()))
            .unwrap();
        let growth = peak_rss().saturating_sub(before);
        let n = db.table("big").unwrap().count().unwrap();
        println!("@@result {n} {growth}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let rows = 900_000;
    let size = write_csv(&dir.path().join("big.csv"), rows);
    let mut child = spawn(
        "process::importing_a_file_larger_than_the_memory_limit_streams",
        "import",
        dir.path(),
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let r = wait_for(&mut lines, "@@result ");
    assert!(child.wait().unwrap().success());
    let mut it = r.split_whitespace().map(|x| x.parse::<u64>().unwrap());
    let (n, growth) = (it.next().unwrap(), it.next().unwrap());
    assert_eq!(n, rows);
    eprintln!("imported {size} bytes of CSV; peak memory grew by {growth} bytes");
    assert!(size > 6 * (4 << 20), "the file must be several times the memory limit");
    assert!(growth < size / 2, "peak memory grew by {growth} bytes importing {size} bytes");
}

const TEXT_WORDS: [&str; 5] = ["amber", "basalt", "cobalt", "dune", "ember"];

/// A child inserts, updates and deletes rows of a table with a full-text index — logged
/// commits, buffered ones, searches in between (so the index commits) and flushes — and
/// reports each acknowledged step; the parent kills it. After reopening, every search
/// returns exactly what a reference matcher finds in the table's rows.
#[test]
fn killed_writer_leaves_the_text_index_in_step() {
    if std::env::var(ROLE).as_deref() == Ok("fts-writer") {
        let db = Database::open(std::env::var(DIR).unwrap()).unwrap();
        let t = match db.table("t") {
            Ok(t) => t,
            Err(_) => {
                let s = Schema::new(vec![Field::new("name", DataType::Utf8, true)]);
                let t = db.create_table("t", &s).unwrap();
                t.create_fts_index(&["name"], basalt::Tokenizer::Default).unwrap();
                t
            }
        };
        let conn = db.connect();
        conn.set_durability(Some(basalt::Durability::Buffered));
        let buffered = conn.table("t").unwrap();
        let mut i = t.count().unwrap();
        loop {
            i += 1;
            let word = TEXT_WORDS[(i % 5) as usize];
            let row = Row::new().set("name", format!("{word} row{i}"));
            let id =
                if i % 11 == 0 { buffered.insert_row(row) } else { t.insert_row(row) }.unwrap();
            let other = TEXT_WORDS[((i + 2) % 5) as usize];
            if i % 3 == 0 {
                t.update(id - 1, Row::new().set("name", format!("{other} updated"))).unwrap();
            }
            if i % 13 == 0 {
                buffered
                    .update(id - 2, Row::new().set("name", format!("{other} buffered")))
                    .unwrap();
            }
            if i % 7 == 0 {
                t.delete(id - 3).unwrap();
            }
            if i % 5 == 0 {
                t.search_text(word, Some(1)).unwrap();
            }
            if i % 40 == 0 {
                db.flush().unwrap();
            }
            println!("@@acked {id}");
            std::io::stdout().flush().unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for round in 0..4u64 {
        kill_after_acks(
            "process::killed_writer_leaves_the_text_index_in_step",
            "fts-writer",
            dir.path(),
            15 + round * 23,
        );
        let db = Database::open(dir.path()).unwrap();
        let t = db.table("t").unwrap();
        let all = t.scan().unwrap().collect_batch().unwrap();
        let ids = all.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
        let names = all.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        for word in TEXT_WORDS {
            let want: std::collections::BTreeSet<u64> = (0..all.num_rows())
                .filter(|&r| !names.is_null(r) && names.value(r).split(' ').any(|w| w == word))
                .map(|r| ids.value(r))
                .collect();
            let got: std::collections::BTreeSet<u64> =
                t.search_text(word, None).unwrap().iter().map(|h| h.id).collect();
            assert_eq!(got, want, "round {round}: {word}");
        }
        assert!(all.num_rows() > 0);
        db.close().unwrap();
    }
}

/// A child writes agent memories (`remember`, keyed `put` updates, `forget`), each
/// acknowledged after it returns; the parent SIGKILLs it. After reopening, every
/// acknowledged memory is there with its history, keyword and vector recall find the last
/// one, and nothing acknowledged as forgotten comes back.
#[test]
fn killed_writer_loses_no_acknowledged_memory() {
    use basalt::memory::{HashEmbedder, MemoryConfig, MemoryStore, NewMemory, Recall, RecallMode};
    const TEST: &str = "process::killed_writer_loses_no_acknowledged_memory";
    let open = |db: &Database| {
        MemoryStore::open(db, "mem", MemoryConfig::new("basalt-hash-v1", 32))
            .unwrap()
            .with_embedder(Arc::new(HashEmbedder::new(32)))
            .unwrap()
    };
    if std::env::var(ROLE).as_deref() == Ok("memory") {
        let opts = basalt::Options { memtable_flush_rows: 300, ..basalt::Options::default() };
        let db = Database::open_with(std::env::var(DIR).unwrap(), opts).unwrap();
        let m = open(&db);
        // Resume after the last number whose keyed put committed.
        let mut i = m
            .get_key("agents/a", "latest")
            .unwrap()
            .map_or(0, |l| l.text.trim_start_matches("latest is number").parse::<u64>().unwrap());
        loop {
            i += 1;
            let id =
                m.remember("agents/a", NewMemory::text(&format!("memo number{i} saved"))).unwrap();
            m.put("agents/a", "latest", NewMemory::text(&format!("latest is number{i}"))).unwrap();
            if i % 7 == 0 {
                assert!(m.forget(id).unwrap());
                println!("@@acked {i} {id} forgot");
            } else {
                println!("@@acked {i} {id} kept");
            }
            std::io::stdout().flush().unwrap();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let mut forgotten = Vec::new(); // ids acknowledged as forgotten
    let mut kept = Vec::new(); // (number, id) acknowledged as kept
    for (round, kill_after) in [25u64, 400, 120].into_iter().enumerate() {
        let mut child = spawn(TEST, "memory", dir.path());
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut acked = 0;
        for _ in 0..kill_after {
            let l = wait_for(&mut lines, "@@acked ");
            let mut parts = l.split_whitespace();
            acked = parts.next().unwrap().parse::<u64>().unwrap();
            let id = parts.next().unwrap().parse::<u64>().unwrap();
            if parts.next() == Some("forgot") {
                forgotten.push(id);
            } else {
                kept.push((acked, id));
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();

        let db = Database::open(dir.path()).unwrap();
        let m = open(&db);
        for (n, id) in &kept {
            let item = m.get(*id).unwrap();
            assert_eq!(
                item.map(|i| i.text),
                Some(format!("memo number{n} saved")),
                "round {round}"
            );
        }
        for id in &forgotten {
            assert!(m.get(*id).unwrap().is_none(), "round {round}: forgotten {id} is back");
        }
        let latest = m.get_key("agents/a", "latest").unwrap().unwrap();
        let n: u64 = latest.text.trim_start_matches("latest is number").parse().unwrap();
        assert!(n >= acked, "round {round}: latest {n} < acked {acked}");
        assert_eq!(latest.version, n, "round {round}: one version per put");
        assert_eq!(m.history(latest.id).unwrap().len() as u64, n, "round {round}");
        let mut r = Recall::new("agents/a", &format!("number{acked}"), 3);
        r.mode = RecallMode::Keyword;
        let hits: Vec<String> = m.recall(&r).unwrap().into_iter().map(|h| h.item.text).collect();
        if acked % 7 != 0 {
            assert!(hits.contains(&format!("memo number{acked} saved")), "round {round}: {hits:?}");
        }
        r.mode = RecallMode::Vector;
        assert_eq!(m.recall(&r).unwrap().len(), 3, "round {round}");
        db.close().unwrap();
    }
}

/// The model of what a killed writer leaves, over the statements the trust work made
/// atomic or refusing: a child runs, step after step, `CREATE TABLE … AS`, a staged import
/// (several commits into a hidden table, then published), a counter `UPDATE` beside one
/// that overflows, and a vector insert beside one with a NULL component; it reports each
/// acknowledged step and is SIGKILLed at pseudo-random points. After each kill the
/// database opens, every acknowledged table is there whole, every table there is whole
/// (acknowledged or not), the counter is the acknowledged value or one more, no overflowed
/// or NULL-component value was stored, and no hidden staging table or its directory is
/// left behind.
#[test]
fn killed_writer_leaves_every_statement_whole() {
    const STAGED_ROWS: u64 = 3 * 700;
    if let Ok(role) = std::env::var(ROLE)
        && let Some(round) = role.strip_prefix("model:")
    {
        let db = Database::open(std::env::var(DIR).unwrap()).unwrap();
        let conn = db.connect();
        conn.sql("CREATE TABLE IF NOT EXISTS acc (v BIGINT NOT NULL)").unwrap();
        if db.table("acc").unwrap().count().unwrap() == 0 {
            conn.sql("INSERT INTO acc VALUES (0)").unwrap();
        }
        conn.sql("CREATE TABLE IF NOT EXISTS vecs (e VECTOR(3))").unwrap();
        let ack = |what: String| {
            println!("@@acked {what}");
            std::io::stdout().flush().unwrap();
        };
        for i in 0u64.. {
            match i % 4 {
                0 => {
                    let name = format!("c{round}_{i}");
                    conn.sql(&format!(
                        "CREATE TABLE {name} AS SELECT value AS v FROM generate_series(1, {})",
                        1000 + i
                    ))
                    .unwrap();
                    ack(format!("table {name} {}", 1000 + i));
                }
                1 => {
                    let schema = Schema::new(vec![Field::new("v", DataType::Int64, false)]);
                    let staged = db.stage_table(&schema).unwrap();
                    let t = db.table(staged.name()).unwrap();
                    for part in 0..3i64 {
                        let v = basalt::arrow::array::Int64Array::from_iter_values(
                            (0..700).map(|k| part * 700 + k),
                        );
                        let b = RecordBatch::try_new(Arc::new(schema.clone()), vec![Arc::new(v)])
                            .unwrap();
                        t.insert(&b).unwrap();
                    }
                    let name = format!("s{round}_{i}");
                    staged.publish(&name).unwrap();
                    ack(format!("table {name} {STAGED_ROWS}"));
                }
                2 => {
                    let e = conn.sql("UPDATE acc SET v = (v + 2) * 4611686018427387904");
                    assert!(e.is_err(), "an overflowing UPDATE succeeded");
                    conn.sql("UPDATE acc SET v = v + 1").unwrap();
                    let v = conn.sql("SELECT v FROM acc").unwrap();
                    let v =
                        v[0].column(0).as_any().downcast_ref::<basalt::arrow::array::Int64Array>();
                    ack(format!("counter {}", v.unwrap().value(0)));
                }
                _ => {
                    assert!(conn.sql("INSERT INTO vecs VALUES ([1.0, NULL, 3.0])").is_err());
                    conn.sql("INSERT INTO vecs VALUES ([1.0, 2.0, 3.0])").unwrap();
                    ack("vector".to_string());
                }
            }
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut tables: Vec<(String, u64)> = Vec::new();
    let mut counter = 0i64;
    let mut vectors = 0u64;
    for round in 0..crash_rounds() {
        let kill_after = 3 + xorshift(&mut seed) % 40;
        let mut child = spawn(
            "process::killed_writer_leaves_every_statement_whole",
            &format!("model:{round}"),
            dir.path(),
        );
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        for _ in 0..kill_after {
            let what = wait_for(&mut lines, "@@acked ");
            let parts: Vec<&str> = what.split_whitespace().collect();
            match parts.as_slice() {
                ["table", name, rows] => tables.push((name.to_string(), rows.parse().unwrap())),
                ["counter", v] => counter = v.parse().unwrap(),
                ["vector"] => vectors += 1,
                other => panic!("unexpected ack {other:?}"),
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();

        let db = Database::open(dir.path()).unwrap();
        let conn = db.connect();
        let one = |sql: &str| -> i64 {
            let b = conn.sql(sql).unwrap();
            let c = b[0].column(0).as_any().downcast_ref::<basalt::arrow::array::Int64Array>();
            c.unwrap_or_else(|| panic!("{sql}: not BIGINT")).value(0)
        };
        for (name, rows) in &tables {
            assert_eq!(db.table(name).unwrap().count().unwrap(), *rows, "round {round}: {name}");
        }
        for name in db.list_tables() {
            let want = match name.as_bytes()[0] {
                b'c' => 1000 + name.rsplit('_').next().unwrap().parse::<u64>().unwrap(),
                b's' => STAGED_ROWS,
                _ => continue,
            };
            let n = db.table(&name).unwrap().count().unwrap();
            assert_eq!(n, want, "round {round}: {name} is partly there");
            if want == STAGED_ROWS {
                assert_eq!(one(&format!("SELECT sum(v) FROM {name}")), 2100 * 2099 / 2);
            }
        }
        let v = one("SELECT v FROM acc");
        assert!(v == counter || v == counter + 1, "round {round}: counter {v}, acked {counter}");
        let stored = one("SELECT count(*) FROM vecs") as u64;
        assert!(stored == vectors || stored == vectors + 1, "round {round}: {stored} vectors");
        let zeros = "SELECT count(*) FROM vecs WHERE array_element(e, 2) <> 2";
        assert_eq!(one(zeros), 0, "round {round}: a NULL component was stored");
        // The staging tables of killed imports are gone, with their directories.
        let dirs = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().to_string();
                n.len() > 1 && n.starts_with('t') && n[1..].bytes().all(|b| b.is_ascii_digit())
            })
            .count();
        assert_eq!(dirs, db.list_tables().len(), "round {round}: a staging table is left");
        drop(conn);
        db.close().unwrap();
    }
    println!("killed writer model: {} tables, counter {counter}, {vectors} vectors", tables.len());
}

/// A child runs transactions that create a table, fill it, add to a running total table
/// and sometimes drop an older table, all in one `BEGIN … COMMIT`; it is SIGKILLed at
/// pseudo-random points. Afterwards every table `tN` holds its 50 rows or does not exist,
/// the total table lists exactly the tables created (dropped ones included), and every
/// acknowledged transaction is there.
#[test]
fn killed_ddl_transactions_are_all_or_nothing() {
    const TEST: &str = "process::killed_ddl_transactions_are_all_or_nothing";
    if std::env::var(ROLE).as_deref() == Ok("txn-ddl") {
        let db = Database::open(std::env::var(DIR).unwrap()).unwrap();
        let conn = db.connect();
        conn.sql("CREATE TABLE IF NOT EXISTS made (n BIGINT)").unwrap();
        let start = conn.sql("SELECT coalesce(max(n), 0) FROM made").unwrap();
        let start = start[0]
            .column(0)
            .as_any()
            .downcast_ref::<basalt::arrow::array::Int64Array>()
            .unwrap()
            .value(0);
        for i in start + 1.. {
            conn.sql("BEGIN").unwrap();
            conn.sql(&format!(
                "CREATE TABLE t{i} AS SELECT value AS v FROM generate_series(1, 50)"
            ))
            .unwrap();
            conn.sql(&format!("INSERT INTO made VALUES ({i})")).unwrap();
            if i % 3 == 0 {
                conn.sql(&format!("DROP TABLE t{}", i - 2)).unwrap();
            }
            conn.sql("COMMIT").unwrap();
            println!("@@acked {i}");
            std::io::stdout().flush().unwrap();
        }
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    for round in 0..crash_rounds() {
        let kill_after = 3 + xorshift(&mut seed) % 40;
        let acked = kill_after_acks(TEST, "txn-ddl", dir.path(), kill_after);
        let db = Database::open(dir.path()).unwrap();
        let made = db.sql("SELECT n FROM made ORDER BY n").unwrap();
        let made: Vec<i64> = made
            .iter()
            .flat_map(|b| {
                let c = b.column(0).as_any().downcast_ref::<basalt::arrow::array::Int64Array>();
                c.unwrap().values().to_vec()
            })
            .collect();
        let last = made.last().copied().unwrap_or(0);
        assert!(last as u64 >= acked, "round {round}: acknowledged {acked} lost");
        assert_eq!(made, (1..=last).collect::<Vec<_>>(), "round {round}");
        for t in db.list_tables().iter().filter(|t| t.starts_with('t')) {
            let n: i64 = t[1..].parse().unwrap();
            assert!(n <= last, "round {round}: {t} without its row in made");
            assert_eq!(db.table(t).unwrap().count().unwrap(), 50, "round {round}: {t}");
        }
        for n in 1..=last {
            let dropped = n + 2 <= last && (n + 2) % 3 == 0;
            assert_eq!(
                db.list_tables().contains(&format!("t{n}")),
                !dropped,
                "round {round}: t{n} of {last}"
            );
        }
        db.close().unwrap();
    }
}
