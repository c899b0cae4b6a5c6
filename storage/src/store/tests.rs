//! Tests of the store: round trips through flush and reopen, lookups, bad input, locking,
//! corruption and injected I/O faults at every step.

use std::sync::Arc;

use arrow_array::{Float64Array, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::*;
use crate::io::{FaultFs, FaultKind, MemFs, OsFs};
use crate::wal::Durability;
use parking_lot::Mutex;

fn schema() -> Schema {
    Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int64, true),
        Field::new("score", DataType::Float64, true),
        Field::new("emb", crate::types::vector_type(3), true),
    ])
}

fn rows(start: usize, n: usize) -> RecordBatch {
    let s = Arc::new(Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int64, true),
        Field::new("score", DataType::Float64, true),
    ]));
    RecordBatch::try_new(
        s,
        vec![
            Arc::new(StringArray::from_iter_values(
                (start..start + n).map(|i| format!("user_{i}")),
            )),
            Arc::new(Int64Array::from_iter(
                (start..start + n).map(|i| (i % 5 != 0).then_some(18 + (i % 63) as i64)),
            )),
            Arc::new(Float64Array::from_iter_values(
                (start..start + n).map(|i| (i % 10_001) as f64 / 100.0),
            )),
        ],
    )
    .unwrap()
}

fn mem_store(fs: &Arc<MemFs>) -> Store {
    Store::open(fs.clone(), Path::new("/db"), Path::new(":memory:"), StoreOptions::default())
        .unwrap()
}

fn all_rows(store: &Store, table: &str) -> Vec<RecordBatch> {
    let t = store.snapshot().table(table).unwrap().clone();
    let proj: Vec<usize> = (0..t.schema().full_schema().fields().len()).collect();
    t.scan(&proj).unwrap().collect::<Result<Vec<_>>>().unwrap()
}

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    arrow_select::concat::concat_batches(&batches[0].schema(), batches).unwrap()
}

#[test]
fn insert_get_scan_flush_reopen() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("t", &schema()).unwrap();
    let r1 = store.insert("t", &[rows(0, 20_000)]).unwrap(); // bulk: straight to a segment
    assert_eq!(r1, IdRange { first: 1, count: 20_000 });
    let r2 = store.insert("t", &[rows(20_000, 10)]).unwrap(); // memtable
    assert_eq!(r2.first, 20_001);
    let snap = store.snapshot();
    let t = snap.table("t").unwrap();
    assert_eq!(t.count(), 20_010);
    assert_eq!(t.segments().len(), 1);
    assert_eq!(t.memtable().rows(), 10);

    let proj = t.resolve(&["_id", "name", "age"]).unwrap();
    let row = t.get(20_005, &proj).unwrap().unwrap();
    let names = row.column(1).as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(names.value(0), "user_20004");
    let row = t.get(7, &proj).unwrap().unwrap();
    assert_eq!(row.column(1).as_any().downcast_ref::<StringArray>().unwrap().value(0), "user_6");
    assert!(t.get(0, &proj).unwrap().is_none());
    assert!(t.get(99_999, &proj).unwrap().is_none());
    let many = t.get_many(&[20_010, 3, 123_456, 3, 19_999], &proj).unwrap();
    let ids = many.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
    assert_eq!(ids.values().to_vec(), vec![20_010, 3, 3, 19_999]);

    let before = concat(&all_rows(&store, "t"));
    assert_eq!(before.num_rows(), 20_010);
    // The vector column was not given: all nulls.
    assert_eq!(before.column(4).null_count(), 20_010);
    store.close().unwrap();
    assert!(matches!(store.insert("t", &[rows(0, 1)]), Err(Error::Closed)));
    drop(store);

    let store = mem_store(&fs);
    let after = concat(&all_rows(&store, "t"));
    assert_eq!(before, after);
    // The memtable became a segment at close; compaction then merged the two small ones.
    assert_eq!(store.snapshot().table("t").unwrap().segments().len(), 1);
    // Ids continue after reopen.
    assert_eq!(store.insert("t", &[rows(0, 1)]).unwrap().first, 20_011);
}

#[test]
fn snapshots_are_isolated_from_later_writes() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("t", &schema()).unwrap();
    store.insert("t", &[rows(0, 5)]).unwrap();
    let old = store.snapshot();
    store.insert("t", &[rows(5, 5)]).unwrap();
    store.flush().unwrap();
    store.drop_table("t").unwrap();
    assert_eq!(old.table("t").unwrap().count(), 5);
    assert!(matches!(store.snapshot().table("t"), Err(Error::TableNotFound { .. })));
}

#[test]
fn memtable_flushes_itself_at_the_threshold() {
    let fs = Arc::new(MemFs::new());
    let opts = StoreOptions {
        memtable_flush_rows: 100,
        bulk_insert_rows: 1000,
        ..StoreOptions::default()
    };
    let store = Store::open(fs.clone(), Path::new("/db"), Path::new(":memory:"), opts).unwrap();
    store.create_table("t", &schema()).unwrap();
    for i in 0..30 {
        store.insert("t", &[rows(i * 7, 7)]).unwrap();
    }
    let snap = store.snapshot();
    let t = snap.table("t").unwrap();
    assert_eq!(t.count(), 210);
    assert!(t.segments().len() >= 2);
    assert!(t.memtable().rows() < 100);
    let names: Vec<String> = all_rows(&store, "t")
        .iter()
        .flat_map(|b| {
            let a = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            a.iter().map(|s| s.unwrap().to_string()).collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(names, (0..210).map(|i| format!("user_{i}")).collect::<Vec<_>>());
}

/// An untyped NULL column (what a NULL parameter becomes) is NULLs of the column's type.
#[test]
fn untyped_null_columns_become_nulls_of_the_column_type() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("t", &schema()).unwrap();
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("age", DataType::Null, true),
            Field::new("emb", DataType::Null, true),
        ])),
        vec![
            Arc::new(StringArray::from(vec!["a", "b"])),
            Arc::new(arrow_array::NullArray::new(2)),
            Arc::new(arrow_array::NullArray::new(2)),
        ],
    )
    .unwrap();
    store.insert("t", &[b]).unwrap();
    let got = all_rows(&store, "t");
    let got = arrow_select::concat::concat_batches(&got[0].schema(), &got).unwrap();
    let age = got.column_by_name("age").unwrap();
    assert_eq!((age.data_type(), age.null_count()), (&DataType::Int64, 2));
    assert_eq!(got.column_by_name("emb").unwrap().null_count(), 2);
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("t", &schema()).unwrap();
    assert!(matches!(store.create_table("t", &schema()), Err(Error::TableExists { .. })));
    assert!(matches!(store.insert("nope", &[rows(0, 1)]), Err(Error::TableNotFound { .. })));
    let good = rows(0, 3);
    let mk = |fields: Vec<Field>, cols: Vec<ArrayRef>| {
        RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap()
    };
    let names: ArrayRef = Arc::new(StringArray::from(vec!["a", "b", "c"]));
    // Wrong type.
    let b = mk(
        vec![Field::new("name", DataType::Int64, false)],
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    );
    assert!(matches!(store.insert("t", &[good.clone(), b]), Err(Error::TypeMismatch { .. })));
    // Unknown column.
    let b = mk(
        vec![Field::new("name", DataType::Utf8, false), Field::new("zzz", DataType::Utf8, false)],
        vec![names.clone(), names.clone()],
    );
    assert!(matches!(store.insert("t", &[b]), Err(Error::ColumnNotFound { .. })));
    // _id supplied.
    let b = mk(
        vec![Field::new("name", DataType::Utf8, false), Field::new("_id", DataType::UInt64, false)],
        vec![names.clone(), Arc::new(UInt64Array::from(vec![1, 2, 3]))],
    );
    assert!(matches!(store.insert("t", &[b]), Err(Error::InvalidInput { .. })));
    // NOT NULL column missing, or null.
    let b = mk(
        vec![Field::new("age", DataType::Int64, true)],
        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
    );
    assert!(matches!(store.insert("t", &[b]), Err(Error::NullViolation { .. })));
    let b = mk(
        vec![Field::new("name", DataType::Utf8, true)],
        vec![Arc::new(StringArray::from(vec![Some("a"), None, Some("c")]))],
    );
    assert!(matches!(store.insert("t", &[b]), Err(Error::NullViolation { .. })));
    // An untyped NULL column (a NULL parameter) into a NOT NULL column.
    let b = mk(
        vec![Field::new("name", DataType::Null, true)],
        vec![Arc::new(arrow_array::NullArray::new(3))],
    );
    assert!(matches!(store.insert("t", &[b]), Err(Error::NullViolation { .. })));
    // Vector of the wrong dimension.
    let vt = crate::types::vector_type(2);
    let DataType::FixedSizeList(f, _) = &vt else { unreachable!() };
    let v = arrow_array::FixedSizeListArray::try_new(
        f.clone(),
        2,
        Arc::new(arrow_array::Float32Array::from(vec![0.0; 6])),
        None,
    )
    .unwrap();
    let b = mk(
        vec![Field::new("name", DataType::Utf8, false), Field::new("emb", vt.clone(), true)],
        vec![names.clone(), Arc::new(v)],
    );
    let e = store.insert("t", &[b]).unwrap_err();
    assert!(matches!(e, Error::VectorDimension { expected: 3, found: 2, .. }), "{e}");
    assert!(e.to_string().contains("emb"));
    // Nothing was written by any of those.
    let snap = store.snapshot();
    assert_eq!(snap.table("t").unwrap().count(), 0);
    assert_eq!(snap.table("t").unwrap().next_row_id(), 1);
    // A LargeUtf8 column is accepted (lossless cast); a right-sized vector too.
    let DataType::FixedSizeList(f3, _) = crate::types::vector_type(3) else { unreachable!() };
    let v = arrow_array::FixedSizeListArray::try_new(
        f3,
        3,
        Arc::new(arrow_array::Float32Array::from(vec![0.5; 9])),
        None,
    )
    .unwrap();
    let b = mk(
        vec![
            Field::new("name", DataType::LargeUtf8, false),
            Field::new("emb", crate::types::vector_type(3), true),
        ],
        vec![Arc::new(arrow_array::LargeStringArray::from(vec!["a", "b", "c"])), Arc::new(v)],
    );
    assert_eq!(store.insert("t", &[b]).unwrap().count, 3);
}

#[test]
fn vectors_with_null_or_non_finite_components_are_refused() {
    use arrow_array::{FixedSizeListArray, Float32Array};
    let fs = Arc::new(MemFs::new());
    let s = mem_store(&fs);
    let vs = Schema::new(vec![Field::new("v", crate::types::vector_type(2), true)]);
    s.create_table("t", &vs).unwrap();
    let DataType::FixedSizeList(item, _) = crate::types::vector_type(2) else { unreachable!() };
    let vectors = |values: Vec<Option<f32>>, rows: Option<Vec<bool>>| {
        let fsl = FixedSizeListArray::try_new(
            item.clone(),
            2,
            Arc::new(Float32Array::from(values)),
            rows.map(arrow_buffer::NullBuffer::from),
        )
        .unwrap();
        RecordBatch::try_new(Arc::new(vs.clone()), vec![Arc::new(fsl)]).unwrap()
    };
    // A NULL component in a vector that is not NULL: refused, with the row named.
    let bad = vectors(vec![Some(1.0), Some(2.0), Some(3.0), None], None);
    let e = s.insert("t", std::slice::from_ref(&bad)).unwrap_err();
    assert!(e.to_string().contains("row 2") && e.to_string().contains("NULL"), "{e}");
    assert_eq!(s.snapshot().table("t").unwrap().count(), 0);
    // A NULL vector may hold anything in its slots.
    let null_row = vectors(vec![Some(1.0), Some(2.0), None, None], Some(vec![true, false]));
    s.insert("t", &[null_row]).unwrap();
    let one = bad.slice(1, 1);
    assert!(s.update("t", &[1], &one).is_err(), "updates are checked too");
    s.update("t", &[1], &bad.slice(0, 1)).unwrap();
    // NaN and infinite components: refused on insert and update, with the row named.
    for x in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let nonfinite = vectors(vec![Some(1.0), Some(2.0), Some(x), Some(0.0)], None);
        let e = s.insert("t", std::slice::from_ref(&nonfinite)).unwrap_err().to_string();
        assert!(e.contains("row 2") && e.contains("finite"), "{e}");
        assert!(s.update("t", &[1], &nonfinite.slice(1, 1)).is_err());
        // In a NULL vector's slots it is not looked at.
        let hidden = vectors(vec![Some(1.0), Some(2.0), Some(x), None], Some(vec![true, false]));
        s.insert("t", &[hidden]).unwrap();
    }
    s.flush().unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().count(), 8);
}

#[test]
fn reserved_names_are_refused_and_staging_tables_do_not_outlive_a_crash() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    for name in ["__basalt_tmp_1_1", "__basalt_x"] {
        let e = s.create_table(name, &schema()).unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{e}");
        assert!(s.create_view(name, "SELECT 1", false).is_err());
    }
    s.create_table("t", &schema()).unwrap();
    assert!(s.rename_table("t", "__basalt_tmp_9", false).is_err());
    // Checkpoint names are one file name inside checkpoints/.
    for name in ["../escape", "a/b", "a\\b", ".hidden", "..", ""] {
        let e = s.checkpoint(name).unwrap_err();
        assert!(matches!(e, Error::InvalidName { .. }), "{name}: {e}");
        assert!(s.drop_checkpoint(name).is_err());
        assert!(s.restore(name).is_err());
    }
    assert!(fs.list_dir(Path::new("/")).unwrap().iter().all(|n| n == "db"));
    // A staging table is renamed into place whole, or dropped at the next writer open.
    let staged = s.create_staging_table(&schema()).unwrap();
    assert!(staged.starts_with(STAGING_PREFIX));
    s.insert(&staged, &[rows(0, 5)]).unwrap();
    s.rename_table(&staged, "whole", false).unwrap();
    let left = s.create_staging_table(&schema()).unwrap();
    s.insert(&left, &[rows(0, 5)]).unwrap();
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    assert_eq!(s.snapshot().table_names(), ["t", "whole"]);
    assert_eq!(s.snapshot().table("whole").unwrap().count(), 5);
}

#[test]
fn drop_removes_files_and_names_can_be_reused() {
    let t = tempfile::tempdir().unwrap();
    let store = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    store.create_table("a", &schema()).unwrap();
    store.insert("a", &[rows(0, 20_000)]).unwrap();
    let id = store.snapshot().table("a").unwrap().id();
    let dir = manifest::table_dir(t.path(), id);
    assert!(dir.exists());
    store.drop_table("a").unwrap();
    assert!(!dir.exists());
    assert!(matches!(store.drop_table("a"), Err(Error::TableNotFound { .. })));
    store.create_table("a", &schema()).unwrap();
    assert_ne!(store.snapshot().table("a").unwrap().id(), id);
    assert_eq!(store.snapshot().table("a").unwrap().count(), 0);
}

#[test]
fn tables_can_be_replaced_and_renamed_atomically() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("a", &schema()).unwrap();
    store.insert("a", &[rows(0, 10)]).unwrap();
    store.create_table("b", &schema()).unwrap();
    store.insert("b", &[rows(0, 3)]).unwrap();
    assert!(matches!(store.rename_table("a", "b", false), Err(Error::TableExists { .. })));
    store.rename_table("a", "b", true).unwrap();
    let snap = store.snapshot();
    assert_eq!(snap.table_names(), vec!["b".to_string()]);
    assert_eq!(snap.table("b").unwrap().count(), 10);
    assert_eq!(snap.table("b").unwrap().name(), "b");
    assert!(matches!(store.create_table("b", &schema()), Err(Error::TableExists { .. })));
    store.create_table_with("b", &schema(), true).unwrap();
    assert_eq!(store.snapshot().table("b").unwrap().count(), 0);
    store.insert("b", &[rows(0, 2)]).unwrap();
    store.rename_table("b", "c", false).unwrap();
    store.close().unwrap();
    drop(store);
    let store = mem_store(&fs);
    assert_eq!(store.snapshot().table_names(), vec!["c".to_string()]);
    assert_eq!(store.snapshot().table("c").unwrap().count(), 2);
    assert!(matches!(store.rename_table("nope", "d", false), Err(Error::TableNotFound { .. })));
}

#[test]
fn views_persist_and_share_the_table_namespace() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("a", &schema()).unwrap();
    store.create_view("v", "SELECT 1", false).unwrap();
    assert!(matches!(store.create_view("v", "SELECT 2", false), Err(Error::ViewExists { .. })));
    assert!(matches!(store.create_view("a", "SELECT 2", true), Err(Error::TableExists { .. })));
    assert!(matches!(store.create_table("v", &schema()), Err(Error::ViewExists { .. })));
    store.create_view("v", "SELECT 2", true).unwrap();
    store.create_view("w", "SELECT 3", false).unwrap();
    store.checkpoint("c").unwrap();
    store.drop_view("w").unwrap();
    assert!(matches!(store.drop_view("w"), Err(Error::ViewNotFound { .. })));
    store.close().unwrap();
    drop(store);
    let store = mem_store(&fs);
    let views: Vec<(String, String)> =
        store.snapshot().views().iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(views, vec![("v".to_string(), "SELECT 2".to_string())]);
    store.restore("c").unwrap();
    assert_eq!(store.snapshot().views().len(), 2);
}

#[test]
fn second_writer_is_refused_and_readers_can_open() {
    let t = tempfile::tempdir().unwrap();
    let w = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    let no_wait =
        StoreOptions { lock_timeout: std::time::Duration::ZERO, ..StoreOptions::default() };
    let e = Store::open(Arc::new(OsFs), t.path(), t.path(), no_wait).unwrap_err();
    assert!(matches!(e, Error::Locked { .. }), "{e}");
    // A second writer waits for the lock up to its timeout (across processes too: the lock
    // is the file lock), then says how long it waited.
    let short = StoreOptions {
        lock_timeout: std::time::Duration::from_millis(150),
        ..StoreOptions::default()
    };
    match Store::open(Arc::new(OsFs), t.path(), t.path(), short).unwrap_err() {
        Error::LockTimeout { waited, .. } => assert!(waited >= short.lock_timeout, "{waited:?}"),
        e => panic!("expected a lock timeout: {e}"),
    }
    w.create_table("t", &schema()).unwrap();
    w.insert("t", &[rows(0, 50)]).unwrap();
    w.flush().unwrap();
    let ro = StoreOptions { read_only: true, ..StoreOptions::default() };
    let r = Store::open(Arc::new(OsFs), t.path(), t.path(), ro).unwrap();
    assert_eq!(r.snapshot().table("t").unwrap().count(), 50);
    assert!(matches!(r.insert("t", &[rows(0, 1)]), Err(Error::ReadOnly { .. })));
    drop(r);
    // A writer waiting while the first one closes gets the database.
    let path = t.path().to_path_buf();
    let waiter = std::thread::spawn(move || {
        Store::open(Arc::new(OsFs), &path, &path, StoreOptions::default()).map(|_| ())
    });
    std::thread::sleep(std::time::Duration::from_millis(50));
    drop(w);
    waiter.join().unwrap().unwrap();
    Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    let missing = t.path().join("nothing-here");
    assert!(Store::open(Arc::new(OsFs), &missing, &missing, ro).is_err());
}

#[test]
fn corrupt_files_are_reported_with_file_and_offset() {
    let t = tempfile::tempdir().unwrap();
    {
        let s = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
        s.create_table("t", &schema()).unwrap();
        s.insert("t", &[rows(0, 20_000)]).unwrap();
    }
    let snap_dir = manifest::table_dir(t.path(), 1);
    let seg = std::fs::read_dir(&snap_dir).unwrap().next().unwrap().unwrap().path();
    let orig = std::fs::read(&seg).unwrap();
    // A flipped byte inside a block: open succeeds (checksums are lazy), the scan fails.
    let mut b = orig.clone();
    b[200] ^= 1;
    std::fs::write(&seg, &b).unwrap();
    {
        let s = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
        let snap = s.snapshot();
        let tb = snap.table("t").unwrap();
        let r: Result<Vec<_>> = tb.scan(&[0, 1, 2, 3]).unwrap().collect();
        let e = r.unwrap_err();
        assert!(e.is_corruption(), "{e}");
        assert!(e.to_string().contains(".bsg"), "{e}");
    }
    // A truncated segment: open fails.
    std::fs::write(&seg, &orig[..orig.len() - 5]).unwrap();
    let e = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap_err();
    assert!(e.is_corruption(), "{e}");
    std::fs::write(&seg, &orig).unwrap();
    // A damaged manifest: open fails.
    let mp = t.path().join(manifest::MANIFEST_FILE);
    let mut m = std::fs::read(&mp).unwrap();
    m[20] ^= 0xff;
    std::fs::write(&mp, &m).unwrap();
    let e = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap_err();
    assert!(e.is_corruption() && e.to_string().contains("MANIFEST"), "{e}");
}

#[test]
fn orphans_from_a_crash_are_removed() {
    let fs = Arc::new(MemFs::new());
    {
        let s = mem_store(&fs);
        s.create_table("t", &schema()).unwrap();
        s.insert("t", &[rows(0, 20_000)]).unwrap();
        s.create_table("gone", &schema()).unwrap(); // table id 2, dropped below
        s.insert("gone", &[rows(0, 20_000)]).unwrap();
        s.drop_table("gone").unwrap();
    }
    let junk = [
        "/db/t1/s00000000000000ff.bsg",
        "/db/t1/s00000000000000ff.1.del",
        "/db/t1/fts-9.lazy",
        "/db/t1/fts-9/meta.json",
        "/db/t2/s0000000000000007.bsg",
        "/db/MANIFEST.tmp",
    ];
    // Not Basalt's names, or in a directory of a table id this database never handed out.
    let foreign = [
        "/db/t1/notes.txt",
        "/db/t1/fts-9/mine.txt",
        "/db/t2/src/notes.txt",
        "/db/t77/s0000000000000001.bsg",
        "/db/tmp/s0000000000000001.bsg",
    ];
    for p in junk.iter().chain(&foreign) {
        fs.put(Path::new(p), b"junk");
    }
    let s = mem_store(&fs);
    for p in junk {
        assert!(!fs.exists(Path::new(p)), "{p} stayed");
    }
    for p in foreign {
        assert_eq!(fs.read(Path::new(p)).unwrap(), b"junk", "{p} was removed");
    }
    assert_eq!(s.snapshot().table("t").unwrap().count(), 20_000);
}

#[test]
fn directories_that_are_not_databases_are_refused_and_left_alone() {
    let fs = Arc::new(MemFs::new());
    fs.put(Path::new("/db/t1/src/notes.txt"), b"precious");
    let open = |read_only| {
        Store::open(
            fs.clone(),
            Path::new("/db"),
            Path::new("/db"),
            StoreOptions { read_only, ..StoreOptions::default() },
        )
    };
    for read_only in [false, true] {
        let e = open(read_only).unwrap_err();
        assert!(matches!(e, Error::NotADatabase { .. }), "{e}");
        assert!(e.to_string().contains("t1"), "{e}");
    }
    assert_eq!(fs.list_dir(Path::new("/db")).unwrap(), ["t1"], "no lock file left behind");
    assert_eq!(fs.read(Path::new("/db/t1/src/notes.txt")).unwrap(), b"precious");
    // An empty directory (or one an interrupted first open left) becomes a database.
    let fresh = Path::new("/new");
    fs.put(&fresh.join("LOCK"), b"");
    Store::open(fs.clone(), fresh, fresh, StoreOptions::default()).unwrap();
    assert!(fs.exists(&fresh.join("MANIFEST")));
}

#[test]
fn a_database_without_its_manifest_is_refused_and_nothing_is_removed() {
    for durability in [Durability::PowerSafe, Durability::ProcessSafe] {
        let fs = MemFs::new();
        let s = open_with(&fs, durability);
        s.create_table("t", &schema()).unwrap();
        s.insert("t", &[rows(0, 20_000)]).unwrap();
        s.insert("t", &[rows(0, 3)]).unwrap();
        kill(s);
        let before: Vec<(PathBuf, Vec<u8>)> = files_under(&fs, Path::new("/db"));
        fs.remove_file(Path::new("/db/MANIFEST")).unwrap();
        for read_only in [false, true] {
            let e = Store::open(
                Arc::new(fs.clone()),
                Path::new("/db"),
                Path::new("/db"),
                StoreOptions { read_only, durability, ..StoreOptions::default() },
            )
            .unwrap_err();
            assert!(matches!(e, Error::ManifestMissing { .. }), "{e}");
            assert!(e.to_string().contains("/db/MANIFEST"), "{e}");
        }
        let after = files_under(&fs, Path::new("/db"));
        let without: Vec<_> =
            before.into_iter().filter(|(p, _)| !p.ends_with("MANIFEST")).collect();
        assert_eq!(after, without, "{durability:?}");
    }
}

/// Every file under `dir` with its bytes, sorted by path.
fn files_under(fs: &MemFs, dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for name in fs.list_dir(dir).unwrap() {
        let p = dir.join(name);
        match fs.read(&p) {
            Ok(bytes) => out.push((p, bytes)),
            Err(_) => out.extend(files_under(fs, &p)),
        }
    }
    out
}

/// Runs a workload on a file system that fails at mutating operation `n`, then reopens the
/// surviving bytes: the database must open and hold one of the states the workload passed
/// through (never a mix, never corrupt).
#[test]
fn every_injected_fault_leaves_a_consistent_database() {
    for kind in [FaultKind::Error, FaultKind::Torn] {
        let mut n = 0u64;
        loop {
            let mem = Arc::new(MemFs::new());
            {
                let base = mem_store(&mem);
                base.create_table("keep", &schema()).unwrap();
                base.insert("keep", &[rows(0, 100)]).unwrap();
                base.close().unwrap();
            }
            let faulty = Arc::new(FaultFs::new(mem.clone(), n, kind));
            let finished = (|| -> Result<()> {
                let s = Store::open(
                    faulty.clone(),
                    Path::new("/db"),
                    Path::new(":memory:"),
                    StoreOptions::default(),
                )?;
                s.create_table("t", &schema())?;
                s.insert("t", &[rows(0, 17_000)])?;
                s.insert("keep", &[rows(100, 5)])?;
                s.delete("keep", &[1])?;
                s.update("keep", &[2], &set_name("two"))?;
                s.flush()?;
                s.drop_table("t")?;
                s.close()
            })()
            .is_ok();
            let s = Store::open(
                mem.clone(),
                Path::new("/db"),
                Path::new(":memory:"),
                StoreOptions::default(),
            )
            .unwrap_or_else(|e| panic!("fault {n} ({kind:?}): reopen failed: {e}"));
            let snap = s.snapshot();
            let keep = snap.table("keep").unwrap().count();
            assert!([100, 105, 104].contains(&keep), "fault {n} ({kind:?}): keep has {keep} rows");
            if let Ok(t) = snap.table("t") {
                assert!(
                    t.count() == 0 || t.count() == 17_000,
                    "fault {n}: t has {} rows",
                    t.count()
                );
            }
            for name in snap.table_names() {
                let rows: usize = all_rows(&s, &name).iter().map(|b| b.num_rows()).sum();
                assert_eq!(rows as u64, snap.table(&name).unwrap().count());
            }
            if finished {
                assert!(snap.table("t").is_err());
                assert_eq!(keep, 104);
                let names = names_of(&s, "keep");
                assert!(
                    names.contains(&(2, "two".to_string()))
                        && !names.iter().any(|(id, _)| *id == 1)
                );
                break;
            }
            n += 1;
            assert!(n < 200, "workload never finished");
        }
        assert!(n > 5, "too few fault points exercised: {n}");
    }
}

/// The log files of the database at `/db`.
fn log_files(fs: &MemFs) -> Vec<String> {
    fs.list_dir(Path::new("/db/wal")).unwrap()
}

fn open_with(fs: &MemFs, durability: Durability) -> Store {
    // Layout-sensitive tests want to see the segments their writes made.
    let opts = StoreOptions { durability, auto_compact: false, ..StoreOptions::default() };
    Store::open(Arc::new(fs.clone()), Path::new("/db"), Path::new(":memory:"), opts).unwrap()
}

/// Simulates a killed process: the store is never dropped, so nothing is flushed.
fn kill(store: Store) {
    std::mem::forget(store);
}

#[test]
fn process_safe_commits_survive_a_killed_process_buffered_ones_do_not() {
    for (durability, survives) in [
        (Durability::ProcessSafe, true),
        (Durability::PowerSafe, true),
        (Durability::Buffered, false),
    ] {
        let fs = MemFs::new();
        let s = open_with(&fs, durability);
        s.create_table("t", &schema()).unwrap();
        s.insert("t", &[rows(0, 20_000)]).unwrap(); // segment: durable at every level
        for i in 0..10 {
            s.insert("t", &[rows(20_000 + i, 1)]).unwrap();
        }
        kill(s);
        let s = open_with(&fs, durability);
        let t = s.snapshot().table("t").unwrap().clone();
        assert_eq!(t.count(), if survives { 20_010 } else { 20_000 }, "{durability:?}");
        if survives {
            // Recovery flushed the log into a segment and deleted it; the file the next
            // record goes to (LSN 11) is there, empty.
            assert!(t.memtable().is_empty());
            assert_eq!(log_files(&fs), ["000000000000000b.wal"]);
            let r = t.get(20_007, &[1]).unwrap().unwrap();
            assert_eq!(
                r.column(0).as_any().downcast_ref::<StringArray>().unwrap().value(0),
                "user_20006"
            );
        }
        // Ids continue after the recovered rows. Rows lost under Buffered never became
        // durable, and neither did their ids: those are handed out again (documented).
        let next = s.insert("t", &[rows(0, 1)]).unwrap().first;
        assert_eq!(next, if survives { 20_011 } else { 20_001 }, "{durability:?}");
    }
}

/// A store whose default is `Buffered` still logs the commits that ask for more: a
/// power-safe one survives a power loss, a buffered one does not.
#[test]
fn a_buffered_store_honours_stronger_levels_per_commit() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::Buffered);
    s.create_table("t", &schema()).unwrap();
    s.flush().unwrap();
    s.insert("t", &[rows(0, 1)]).unwrap(); // id 1: buffered (the default)
    s.insert_with("t", &[rows(1, 1)], Durability::PowerSafe).unwrap(); // id 2
    let mut txn = s.begin(Durability::PowerSafe).unwrap();
    txn.insert(&s, "t", &[rows(2, 1)]).unwrap(); // id 3
    s.commit(txn).unwrap();
    assert_eq!(ids_after_power_loss(&fs, s, &[1, 2, 3]), vec![2, 3]);
}

#[test]
fn power_loss_keeps_power_safe_commits_and_what_they_synced() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert_with("t", &[rows(0, 1)], Durability::ProcessSafe).unwrap(); // id 1
    s.insert_with("t", &[rows(1, 1)], Durability::PowerSafe).unwrap(); // id 2: syncs 1 and 2
    s.insert_with("t", &[rows(2, 1)], Durability::ProcessSafe).unwrap(); // id 3: not synced
    assert_eq!(ids_after_power_loss(&fs, s, &[1, 2, 3]), vec![1, 2]);
}

/// Catalog changes of a process-safe store are pending manifests: they survive a killed
/// process without any fsync, and the next writer open makes them synced.
#[test]
fn catalog_changes_survive_a_killed_process_without_a_sync() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 3)]).unwrap();
    s.flush().unwrap();
    let synced = fs.read(Path::new("/db/MANIFEST")).unwrap();
    s.create_table("u", &schema()).unwrap();
    s.create_table("gone", &schema()).unwrap();
    s.drop_table("gone").unwrap();
    s.create_view("v", "SELECT name FROM t", false).unwrap();
    s.rename_table("u", "u2", false).unwrap();
    s.alter_table("t", &AlterColumn::Add(Field::new("note", DataType::Utf8, true))).unwrap();
    // Nothing synced: the synced manifest is the one of the flush.
    assert_eq!(fs.read(Path::new("/db/MANIFEST")).unwrap(), synced);
    assert!(manifest::MANIFEST_PENDING.iter().any(|f| fs.exists(&Path::new("/db").join(f))));
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    let snap = s.snapshot();
    assert_eq!(snap.table_names(), vec!["t".to_string(), "u2".to_string()]);
    assert_eq!(snap.views().get("v").map(String::as_str), Some("SELECT name FROM t"));
    assert!(snap.table("t").unwrap().schema().full_schema().field_with_name("note").is_ok());
    assert_eq!(snap.table("t").unwrap().count(), 3);
    kill(s);
    fs.lose_unsynced_writes();
    let s = open_with(&fs, Durability::ProcessSafe);
    assert_eq!(s.snapshot().table_names(), vec!["t".to_string(), "u2".to_string()]);
}

/// A power loss may take pending catalog changes, but what survives is always a state the
/// database was in: rows logged for a table created or altered by a pending change sync the
/// change first, and a table with files is never dropped by a pending change.
#[test]
fn power_loss_keeps_a_consistent_catalog() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 2)]).unwrap();
    s.flush().unwrap();
    s.create_table("lost", &schema()).unwrap(); // pending only
    s.create_table("kept", &schema()).unwrap();
    // Power-safe rows of a pending table: the catalog is synced before the log record.
    s.insert_with("kept", &[rows(0, 1)], Durability::PowerSafe).unwrap();
    s.alter_table("t", &AlterColumn::Add(Field::new("note", DataType::Utf8, true))).unwrap();
    s.insert_with("t", &[rows(2, 1)], Durability::PowerSafe).unwrap();
    s.create_table("later", &schema()).unwrap(); // pending again
    s.insert("t", &[rows(3, 1)]).unwrap(); // process-safe, not synced
    s.drop_table("t").unwrap(); // has segments: a synced drop
    s.create_view("v", "SELECT 1", false).unwrap(); // pending
    kill(s);
    fs.lose_unsynced_writes();
    let s = open_with(&fs, Durability::ProcessSafe);
    let snap = s.snapshot();
    // "lost" and "kept" were synced by the power-safe insert, "later" by the synced drop;
    // only the view was pending at the loss.
    assert_eq!(snap.table_names(), vec!["kept", "later", "lost"]);
    assert!(snap.views().is_empty());
    assert_eq!(snap.table("kept").unwrap().count(), 1);
    assert!(!fs.list_dir(Path::new("/db")).unwrap().iter().any(|f| f.starts_with("t1")));

    // A pending drop of a table without files comes back after a power loss, with its
    // logged (synced) rows.
    s.insert_with("lost", &[rows(0, 2)], Durability::PowerSafe).unwrap();
    s.drop_table("lost").unwrap();
    s.create_table("pending", &schema()).unwrap();
    s.insert("kept", &[rows(1, 1)]).unwrap(); // an older table: no sync, not synced
    kill(s);
    fs.lose_unsynced_writes();
    let s = open_with(&fs, Durability::ProcessSafe);
    let snap = s.snapshot();
    assert_eq!(snap.table_names(), vec!["kept", "later", "lost"]);
    assert_eq!(snap.table("lost").unwrap().count(), 2);
    assert_eq!(snap.table("kept").unwrap().count(), 1);

    // Rows logged for a pending table sync the catalog first: the drop before it too.
    s.drop_table("lost").unwrap();
    s.create_table("fresh", &schema()).unwrap();
    s.insert("fresh", &[rows(0, 1)]).unwrap(); // process-safe: the row itself is not synced
    kill(s);
    fs.lose_unsynced_writes();
    let s = open_with(&fs, Durability::ProcessSafe);
    let snap = s.snapshot();
    assert_eq!(snap.table_names(), vec!["fresh", "kept", "later"]);
    assert_eq!(snap.table("fresh").unwrap().count(), 0);
}

/// A power-safe store syncs every catalog change before it returns.
#[test]
fn power_safe_catalog_changes_are_synced_at_once() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::PowerSafe);
    s.create_table("t", &schema()).unwrap();
    s.create_view("v", "SELECT 1", false).unwrap();
    assert!(!fs.exists(Path::new("/db/MANIFEST.pending-0")));
    assert!(!fs.exists(Path::new("/db/MANIFEST.pending-1")));
    kill(s);
    fs.lose_unsynced_writes();
    let s = open_with(&fs, Durability::PowerSafe);
    assert_eq!(s.snapshot().table_names(), vec!["t"]);
    assert!(s.snapshot().views().contains_key("v"));
}

/// Kills `s`, loses every unsynced write, reopens, and returns which of `ids` table "t" has.
fn ids_after_power_loss(fs: &MemFs, s: Store, ids: &[u64]) -> Vec<u64> {
    kill(s);
    fs.lose_unsynced_writes();
    let s = open_with(fs, Durability::ProcessSafe);
    let t = s.snapshot().table("t").unwrap().clone();
    let found = t.get_many(ids, &[0]).unwrap();
    found.column(0).as_any().downcast_ref::<UInt64Array>().unwrap().values().to_vec()
}

/// Commits three single rows (process-safe) to table "t" and kills the store; returns the
/// log file, its bytes and the end of its last record. With `feed`, a change feed
/// "keep-log" holds the log files back across restarts.
fn three_logged_commits(fs: &MemFs, feed: bool) -> (PathBuf, Vec<u8>, usize) {
    let s = open_with(fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    if feed {
        s.create_feed("keep-log").unwrap();
    }
    for i in 0..3 {
        s.insert("t", &[rows(i, 1)]).unwrap();
    }
    kill(s);
    let wal_dir = Path::new("/db/wal");
    let f = wal_dir.join(&fs.list_dir(wal_dir).unwrap()[0]);
    let bytes = fs.read(&f).unwrap();
    let (end, _) = crate::wal::record_ends(&bytes);
    (f, bytes, end)
}

#[test]
fn torn_log_tail_is_discarded_and_earlier_commits_kept() {
    let fs = MemFs::new();
    let (f, bytes, end) = three_logged_commits(&fs, false);
    for cut in [end - 1, end - 30] {
        let fs2 = MemFs::new();
        for name in fs.list_dir(Path::new("/db")).unwrap() {
            copy_tree(&fs, &fs2, &Path::new("/db").join(name));
        }
        fs2.put(&f, &bytes[..cut]);
        let s = open_with(&fs2, Durability::ProcessSafe);
        assert_eq!(s.snapshot().table("t").unwrap().count(), 2, "cut at {cut}");
    }
}

#[test]
fn a_damaged_log_is_refused_untouched_and_salvage_keeps_what_precedes_it() {
    let fs = MemFs::new();
    let (f, bytes, _) = three_logged_commits(&fs, false);
    // Flip one byte inside the second record: the third is intact after it.
    let second = crate::wal::record_starts_for_tests(&bytes)[1];
    let mut bad = bytes.clone();
    bad[second + 12] ^= 0x40;
    fs.put(&f, &bad);
    let before = files_under(&fs, Path::new("/db"));
    let open = |salvage: bool, read_only: bool| {
        let opts = StoreOptions {
            durability: Durability::ProcessSafe,
            salvage,
            read_only,
            ..StoreOptions::default()
        };
        Store::open(Arc::new(fs.clone()), Path::new("/db"), Path::new("/db"), opts)
    };
    for read_only in [false, true] {
        let e = open(false, read_only).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        let msg = e.to_string();
        assert!(msg.contains(&f.display().to_string()), "{msg}");
        assert!(msg.contains(&format!("offset {second}")), "{msg}");
    }
    assert_eq!(files_under(&fs, Path::new("/db")), before, "a refused open changes nothing");
    // Salvage: the first commit is kept, the rest dropped and reported, the log kept aside.
    let s = open(true, false).unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().count(), 1);
    let report = s.salvage_report().join("\n");
    assert!(report.contains("dropped 1 intact later log record(s) (up to LSN 3)"), "{report}");
    assert!(report.contains("/db/salvaged/1"), "{report}");
    let kept = Path::new("/db/salvaged/1/wal").join(f.file_name().unwrap());
    assert_eq!(fs.read(&kept).unwrap(), bad);
    // Writes go on with new LSNs; normal opens see one consistent log again.
    s.insert("t", &[rows(7, 1)]).unwrap();
    kill(s);
    let s = open(false, false).unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().count(), 2);
    assert!(s.salvage_report().is_empty());
}

#[test]
fn salvage_adopts_the_newest_manifest_copy_and_moves_what_it_does_not_name_aside() {
    let t = tempfile::tempdir().unwrap();
    let open = |salvage| {
        let opts = StoreOptions { salvage, auto_compact: false, ..StoreOptions::default() };
        Store::open(Arc::new(OsFs), t.path(), t.path(), opts)
    };
    let s = open(false).unwrap();
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 20_000)]).unwrap();
    s.checkpoint("c1").unwrap();
    s.insert("t", &[rows(20_000, 20_000)]).unwrap(); // a second segment, after c1
    drop(s);
    std::fs::remove_file(t.path().join("MANIFEST")).unwrap();
    let e = open(false).unwrap_err();
    assert!(matches!(e, Error::ManifestMissing { .. }), "{e}");
    assert!(e.to_string().contains("salvage"), "{e}");
    let s = open(true).unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().count(), 20_000);
    let report = s.salvage_report().join("\n");
    assert!(report.contains("adopted checkpoint 'c1'"), "{report}");
    assert!(report.contains("1 file(s) the manifest does not name were moved to"), "{report}");
    let aside = t.path().join("salvaged/1/t1");
    let moved: Vec<_> =
        std::fs::read_dir(&aside).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(moved.len(), 1, "{moved:?}");
    // New segments never land on the moved file's name.
    s.insert("t", &[rows(0, 20_000)]).unwrap();
    drop(s);
    let s = open(false).unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().count(), 40_000);
    assert_eq!(std::fs::read_dir(&aside).unwrap().count(), 1, "kept aside for good");
}

#[test]
fn a_removed_log_file_is_refused_and_salvage_goes_on_without_it() {
    let fs = MemFs::new();
    let (f, _, _) = three_logged_commits(&fs, false);
    // The commits' file, and (after a flush) the empty file the next ones would go to.
    for flushed in [false, true] {
        let fs2 = MemFs::new();
        for name in fs.list_dir(Path::new("/db")).unwrap() {
            copy_tree(&fs, &fs2, &Path::new("/db").join(name));
        }
        if flushed {
            let s = open_with(&fs2, Durability::ProcessSafe);
            s.flush().unwrap();
            drop(s);
        }
        let wal_dir = Path::new("/db/wal");
        let files = fs2.list_dir(wal_dir).unwrap();
        assert_eq!(files.len(), 1, "{files:?}");
        assert_eq!(wal_dir.join(&files[0]) == f, !flushed);
        fs2.remove_file(&wal_dir.join(&files[0])).unwrap();
        let opts = |salvage| StoreOptions {
            durability: Durability::ProcessSafe,
            salvage,
            ..StoreOptions::default()
        };
        let e = Store::open(Arc::new(fs2.clone()), Path::new("/db"), Path::new("/db"), opts(false))
            .unwrap_err();
        assert!(e.is_corruption() && e.to_string().contains("log file is missing"), "{e}");
        assert!(e.to_string().contains(&files[0]), "{e}");
        let s = Store::open(Arc::new(fs2.clone()), Path::new("/db"), Path::new("/db"), opts(true))
            .unwrap();
        assert!(s.salvage_report().join("\n").contains("was missing"));
        assert_eq!(s.snapshot().table("t").unwrap().count(), if flushed { 3 } else { 0 });
    }
}

fn copy_tree(from: &MemFs, to: &MemFs, p: &Path) {
    if let Ok(bytes) = from.read(p) {
        to.put(p, &bytes);
        return;
    }
    for c in from.list_dir(p).unwrap() {
        copy_tree(from, to, &p.join(c));
    }
}

#[test]
fn log_records_of_dropped_tables_are_ignored() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("a", &schema()).unwrap();
    s.create_table("b", &schema()).unwrap();
    s.insert("a", &[rows(0, 3)]).unwrap();
    s.insert("b", &[rows(0, 4)]).unwrap();
    s.drop_table("a").unwrap();
    s.create_table("a", &schema()).unwrap();
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    let snap = s.snapshot();
    assert_eq!(snap.table("a").unwrap().count(), 0);
    assert_eq!(snap.table("b").unwrap().count(), 4);
}

#[test]
fn read_only_opener_sees_process_safe_commits_of_a_live_writer() {
    let t = tempfile::tempdir().unwrap();
    let w = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    w.create_table("t", &schema()).unwrap();
    w.insert("t", &[rows(0, 7)]).unwrap();
    let ro = StoreOptions { read_only: true, ..StoreOptions::default() };
    let r = Store::open(Arc::new(OsFs), t.path(), t.path(), ro).unwrap();
    assert_eq!(r.snapshot().table("t").unwrap().count(), 7);
    // The reader leaves the writer's log alone.
    drop(r);
    w.insert("t", &[rows(7, 1)]).unwrap();
    drop(w);
    let s = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().count(), 8);
}

#[test]
fn concurrent_power_safe_commits_all_land() {
    let fs = MemFs::new();
    let s = Arc::new(open_with(&fs, Durability::PowerSafe));
    s.create_table("t", &schema()).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|k| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..25 {
                    s.insert("t", &[rows(k * 100 + i, 1)]).unwrap();
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    assert_eq!(s.snapshot().table("t").unwrap().count(), 200);
    let s = Arc::try_unwrap(s).unwrap();
    kill(s);
    fs.lose_unsynced_writes();
    let s = open_with(&fs, Durability::PowerSafe);
    assert_eq!(s.snapshot().table("t").unwrap().count(), 200);
}

fn names_of(store: &Store, table: &str) -> Vec<(u64, String)> {
    all_rows(store, table)
        .iter()
        .flat_map(|b| {
            let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
            let n = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            (0..b.num_rows()).map(|i| (ids.value(i), n.value(i).to_string())).collect::<Vec<_>>()
        })
        .collect()
}

fn set_name(name: &str) -> RecordBatch {
    let s = Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, false)]));
    RecordBatch::try_new(s, vec![Arc::new(StringArray::from(vec![name]))]).unwrap()
}

#[test]
fn deletes_and_updates_in_segments_and_memtable_survive_flush_and_reopen() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 20_000)]).unwrap(); // ids 1..=20000 in a segment
    s.insert("t", &[rows(20_000, 5)]).unwrap(); // ids 20001..=20005 in the memtable
    assert_eq!(s.delete("t", &[3, 20_002, 999_999, 3]).unwrap(), 2);
    assert_eq!(s.delete("t", &[3]).unwrap(), 0);
    assert_eq!(s.update("t", &[10], &set_name("ten")).unwrap(), 1);
    assert_eq!(s.update("t", &[20_004], &set_name("mem")).unwrap(), 1);
    assert_eq!(s.update("t", &[424_242], &set_name("nobody")).unwrap(), 0);
    // Per-row values with a missing id among them: the others get their own rows' values.
    let three = RecordBatch::try_new(
        set_name("x").schema(),
        vec![Arc::new(StringArray::from(vec!["five", "nobody", "six"]))],
    )
    .unwrap();
    assert_eq!(s.update("t", &[5, 424_243, 6], &three).unwrap(), 2);
    let check = |s: &Store| {
        let snap = s.snapshot();
        let t = snap.table("t").unwrap();
        assert_eq!(t.count(), 20_003);
        assert!(t.get(3, &[0]).unwrap().is_none());
        assert!(t.get(20_002, &[0]).unwrap().is_none());
        let r = t.get(10, &[1, 2]).unwrap().unwrap();
        assert_eq!(r.column(0).as_any().downcast_ref::<StringArray>().unwrap().value(0), "ten");
        // Other columns keep their values.
        assert_eq!(r.column(1).as_any().downcast_ref::<Int64Array>().unwrap().value(0), 18 + 9);
        let all = names_of(s, "t");
        assert_eq!(all.len(), 20_003);
        assert!(all.contains(&(10, "ten".into())) && !all.contains(&(10, "user_9".into())));
        assert!(all.contains(&(20_004, "mem".into())));
        assert!(all.contains(&(5, "five".into())) && all.contains(&(6, "six".into())));
        assert!(!all.iter().any(|(_, n)| n == "nobody"));
        assert!(!all.iter().any(|(id, _)| *id == 3 || *id == 20_002));
        let mut ids: Vec<u64> = all.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), 20_003, "an id appears twice");
    };
    check(&s);
    kill(s); // replay of deletes and updates from the log
    let s = open_with(&fs, Durability::ProcessSafe);
    check(&s);
    s.delete("t", &[11]).unwrap();
    s.flush().unwrap(); // delete files written
    assert!(fs.list_dir(Path::new("/db/t1")).unwrap().iter().any(|f| f.ends_with(".del")));
    s.update("t", &[12], &set_name("twelve")).unwrap();
    s.close().unwrap();
    let s = open_with(&fs, Durability::ProcessSafe);
    let t = s.snapshot().table("t").unwrap().clone();
    assert_eq!(t.count(), 20_002);
    assert!(t.get(11, &[0]).unwrap().is_none());
    let r = t.get(12, &[1]).unwrap().unwrap();
    assert_eq!(r.column(0).as_any().downcast_ref::<StringArray>().unwrap().value(0), "twelve");
    // Only the newest delete-file generation of each segment remains.
    let dels = fs
        .list_dir(Path::new("/db/t1"))
        .unwrap()
        .into_iter()
        .filter(|f| f.ends_with(".del"))
        .count();
    assert_eq!(dels, t.segments().iter().filter(|s| s.entry.deletes_gen > 0).count());
}

#[test]
fn bad_updates_change_nothing() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 3)]).unwrap();
    let before = names_of(&s, "t");
    let two = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, false)])),
        vec![Arc::new(StringArray::from(vec!["a", "b"]))],
    )
    .unwrap();
    assert!(matches!(s.update("t", &[1], &two), Err(Error::InvalidInput { .. })));
    assert!(matches!(s.update("t", &[1, 1], &two), Err(Error::InvalidInput { .. })));
    // Longer id lists are checked with a set: a repeat far apart is found too.
    let many: Vec<u64> = (1..=20).chain([3]).collect();
    let names = StringArray::from(vec!["n"; many.len()]);
    let wide = RecordBatch::try_new(two.schema(), vec![Arc::new(names)]).unwrap();
    let e = s.update("t", &many, &wide).unwrap_err();
    assert!(e.to_string().contains("_id 3 given twice"), "{e}");
    // A predicate's update sets one row of values on every match.
    let e = s.update_where("t", &Predicate::True, &two, Durability::ProcessSafe).unwrap_err();
    assert!(matches!(e, Error::InvalidInput { .. }), "{e}");
    let wrong = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("name", DataType::Int64, false)])),
        vec![Arc::new(Int64Array::from(vec![5]))],
    )
    .unwrap();
    assert!(matches!(s.update("t", &[1], &wrong), Err(Error::TypeMismatch { .. })));
    let unknown = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("zzz", DataType::Utf8, false)])),
        vec![Arc::new(StringArray::from(vec!["x"]))],
    )
    .unwrap();
    assert!(matches!(s.update("t", &[1], &unknown), Err(Error::ColumnNotFound { .. })));
    let null = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("name", DataType::Utf8, true)])),
        vec![Arc::new(StringArray::from(vec![None::<&str>]))],
    )
    .unwrap();
    assert!(matches!(s.update("t", &[1], &null), Err(Error::NullViolation { .. })));
    // A column given twice is refused, not resolved to one of the two.
    let twice = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("name", DataType::Utf8, false),
        ])),
        vec![Arc::new(StringArray::from(vec!["x"])), Arc::new(StringArray::from(vec!["y"]))],
    )
    .unwrap();
    let e = s.update("t", &[1], &twice).unwrap_err();
    assert!(e.to_string().contains("column 'name' given twice"), "{e}");
    assert_eq!(names_of(&s, "t"), before);
}

#[test]
fn deleting_everything_then_flushing_leaves_an_empty_table() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 4)]).unwrap();
    assert_eq!(s.delete("t", &[1, 2, 3, 4]).unwrap(), 4);
    s.flush().unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().count(), 0);
    assert!(all_rows(&s, "t").is_empty());
    s.close().unwrap();
    let s = open_with(&fs, Durability::ProcessSafe);
    assert_eq!(s.snapshot().table("t").unwrap().count(), 0);
    assert_eq!(s.insert("t", &[rows(0, 1)]).unwrap().first, 5);
}

#[test]
fn single_row_deletes_and_updates_in_the_memtable_survive_close() {
    let t = tempfile::tempdir().unwrap();
    let s = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    s.create_table("t", &schema()).unwrap();
    for i in 0..3 {
        s.insert("t", &[rows(i, 1)]).unwrap();
    }
    assert_eq!(s.delete("t", &[2]).unwrap(), 1);
    assert_eq!(s.update("t", &[3], &set_name("three")).unwrap(), 1);
    assert_eq!(names_of(&s, "t"), vec![(1, "user_0".to_string()), (3, "three".to_string())]);
    s.close().unwrap();
    drop(s);
    let s = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    assert_eq!(names_of(&s, "t"), vec![(1, "user_0".to_string()), (3, "three".to_string())]);
}

#[test]
fn filtered_scans_and_predicate_deletes_updates() {
    use crate::predicate::{CmpOp, Predicate};
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 70_000)]).unwrap(); // two row groups
    s.insert("t", &[rows(70_000, 50)]).unwrap(); // memtable
    s.delete("t", &[5, 70_010]).unwrap();
    let snap = s.snapshot();
    let t = snap.table("t").unwrap().clone();
    let reference = |f: &dyn Fn(u64, i64) -> bool| -> Vec<u64> {
        let mut out = Vec::new();
        for b in t.scan(&[0, 2]).unwrap() {
            let b = b.unwrap();
            let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
            let age = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            for i in 0..b.num_rows() {
                if age.is_valid(i) && f(ids.value(i), age.value(i)) {
                    out.push(ids.value(i));
                }
            }
        }
        out
    };
    let p =
        Predicate::And(vec![Predicate::eq("age", 30), Predicate::cmp("_id", CmpOp::Gt, 60_000u64)]);
    assert_eq!(t.matching_ids(&p).unwrap(), reference(&|id, age| age == 30 && id > 60_000));
    let p = Predicate::Or(vec![
        Predicate::between("_id", 3u64, 7u64),
        Predicate::eq("name", "user_70011"),
    ]);
    assert_eq!(t.matching_ids(&p).unwrap(), vec![3, 4, 6, 7, 70_012]);
    // A predicate no row group can satisfy reads nothing and matches nothing.
    assert!(t.matching_ids(&Predicate::cmp("_id", CmpOp::Gt, 10_000_000u64)).unwrap().is_empty());
    assert!(matches!(t.matching_ids(&Predicate::eq("nope", 1)), Err(Error::ColumnNotFound { .. })));

    let n = s.delete_where("t", &Predicate::eq("age", 20), Durability::ProcessSafe).unwrap();
    assert_eq!(n as usize, reference(&|_, age| age == 20).len());
    let upd = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("score", DataType::Float64, true)])),
        vec![Arc::new(Float64Array::from(vec![-1.0]))],
    )
    .unwrap();
    let n = s.update_where("t", &Predicate::eq("age", 21), &upd, Durability::ProcessSafe).unwrap();
    assert_eq!(n as usize, reference(&|_, age| age == 21).len());
    assert!(n > 500);
    let t2 = s.snapshot().table("t").unwrap().clone();
    assert!(t2.matching_ids(&Predicate::eq("age", 20)).unwrap().is_empty());
    let changed = t2.matching_ids(&Predicate::eq("score", -1.0)).unwrap();
    assert_eq!(changed.len() as u64, n);
    assert_eq!(t2.matching_ids(&Predicate::eq("age", 21)).unwrap().len() as u64, n);
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    let t3 = s.snapshot().table("t").unwrap().clone();
    assert_eq!(t3.matching_ids(&Predicate::eq("score", -1.0)).unwrap().len() as u64, n);
    assert_eq!(t3.count(), t2.count());
}

/// Integer comparisons on a column without NULLs are answered from its packed values
/// (bounds on one column as one range); every shape matches a plain filter of the rows.
#[test]
fn integer_ranges_on_packed_values_match_a_plain_filter() {
    use crate::predicate::{CmpOp, Predicate};
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    let schema = Schema::new(vec![Field::new("age", DataType::Int64, false)]);
    s.create_table("t", &schema).unwrap();
    let batch = |start: i64, n: i64| {
        RecordBatch::try_new(
            Arc::new(schema.clone()),
            vec![Arc::new(Int64Array::from_iter_values((start..start + n).map(|i| 18 + i % 63)))],
        )
        .unwrap()
    };
    s.insert("t", &[batch(0, 70_000)]).unwrap(); // two row groups
    s.insert("t", &[batch(70_000, 40)]).unwrap(); // memtable
    s.delete("t", &[3, 65_600, 70_005]).unwrap();
    let t = s.snapshot().table("t").unwrap().clone();
    let mut all = Vec::new();
    for b in t.scan(&[0, 1]).unwrap() {
        let b = b.unwrap();
        let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
        let age = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        all.extend((0..b.num_rows()).map(|i| (ids.value(i), age.value(i))));
    }
    let cmp = |op, v: i64| Predicate::cmp("age", op, v);
    type Want = Box<dyn Fn(i64) -> bool>;
    let cases: Vec<(Predicate, Want)> = vec![
        (Predicate::between("age", 30i64, 40i64), Box::new(|a| (30..=40).contains(&a))),
        (
            Predicate::And(vec![cmp(CmpOp::Gt, 30), cmp(CmpOp::LtEq, 35), cmp(CmpOp::NotEq, 33)]),
            Box::new(|a| a > 30 && a <= 35 && a != 33),
        ),
        (Predicate::And(vec![cmp(CmpOp::GtEq, 40), cmp(CmpOp::Lt, 40)]), Box::new(|_| false)),
        (cmp(CmpOp::Lt, 19), Box::new(|a| a < 19)),
        (cmp(CmpOp::Eq, 80), Box::new(|a| a == 80)),
        (cmp(CmpOp::NotEq, 50), Box::new(|a| a != 50)),
        (cmp(CmpOp::Gt, 1000), Box::new(|_| false)),
        (
            Predicate::Not(Box::new(Predicate::between("age", 20i64, 70i64))),
            Box::new(|a| !(20..=70).contains(&a)),
        ),
        (
            Predicate::Or(vec![cmp(CmpOp::LtEq, 18), Predicate::cmp("age", CmpOp::GtEq, 80u64)]),
            Box::new(|a| a <= 18 || a >= 80),
        ),
    ];
    for (p, f) in cases {
        let want: Vec<u64> = all.iter().filter(|(_, a)| f(*a)).map(|(id, _)| *id).collect();
        assert_eq!(t.matching_ids(&p).unwrap(), want, "{p}");
    }
}

/// Table `t`: three row groups of a segment and memtable rows, with deletes in every row
/// group and in the memtable, and two rows moved to the memtable by updates (named "moved").
fn three_row_groups_with_deletes(fs: &MemFs) -> Arc<TableSnapshot> {
    three_row_groups_with_deletes_open(fs).1
}

/// [`three_row_groups_with_deletes`] with its store still open (closing flushes the
/// memtable, which builds the arrays of its open tail).
fn three_row_groups_with_deletes_open(fs: &MemFs) -> (Store, Arc<TableSnapshot>) {
    let s = open_with(fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 140_000)]).unwrap(); // three row groups
    s.insert("t", &[rows(140_000, 300)]).unwrap(); // memtable
    let gone: Vec<u64> =
        (1..140_300).filter(|i| i % 97 == 0 || (65_000..66_000).contains(i)).collect();
    s.delete("t", &gone).unwrap();
    for id in [10, 70_000] {
        s.update("t", &[id], &set_name("moved")).unwrap();
    }
    let t = s.snapshot().table("t").unwrap().clone();
    (s, t)
}

/// A filtered scan returns what filtering the unfiltered scan returns, whether the
/// predicate selects few rows of a row group (gathered from the encoded blocks) or many
/// (decoded whole, then filtered); deletes in segments and memtable rows included.
#[test]
fn filtered_scans_equal_filtering_the_full_scan_sparse_or_dense() {
    use crate::predicate::{CmpOp, Predicate};
    let fs = MemFs::new();
    let t = three_row_groups_with_deletes(&fs);
    let proj = [0usize, 1, 2, 3, 4];
    let full = concat(&t.scan(&proj).unwrap().collect::<Result<Vec<_>>>().unwrap());
    let name = full.column(1).as_any().downcast_ref::<StringArray>().unwrap();
    let age = full.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
    let score = full.column(3).as_any().downcast_ref::<Float64Array>().unwrap();
    type Want<'a> = Box<dyn Fn(usize) -> bool + 'a>;
    let cases: Vec<(Predicate, Want<'_>)> = vec![
        (Predicate::eq("name", "user_777"), Box::new(|i| name.value(i) == "user_777")),
        (Predicate::eq("name", "moved"), Box::new(|i| name.value(i) == "moved")),
        (Predicate::eq("age", 30), Box::new(|i| age.is_valid(i) && age.value(i) == 30)),
        (
            Predicate::cmp("score", CmpOp::Lt, 0.5),
            Box::new(|i| score.is_valid(i) && score.value(i) < 0.5),
        ),
        (Predicate::cmp("age", CmpOp::Gt, 40), Box::new(|i| age.is_valid(i) && age.value(i) > 40)),
        (Predicate::eq("age", 1_000), Box::new(|_| false)),
    ];
    for (p, want) in &cases {
        let got = t.scan_filtered(&proj, Some(p.clone())).unwrap().collect::<Result<Vec<_>>>();
        let got = arrow_select::concat::concat_batches(&full.schema(), &got.unwrap()).unwrap();
        let mask =
            arrow_array::BooleanArray::from_iter((0..full.num_rows()).map(|i| Some(want(i))));
        let expected = arrow_select::filter::filter_record_batch(&full, &mask).unwrap();
        assert_eq!(got, expected, "{p:?}");
    }
}

#[test]
fn range_scans_and_many_row_lookups_equal_the_full_scan() {
    use crate::predicate::{CmpOp, Predicate};
    let fs = MemFs::new();
    let t = three_row_groups_with_deletes(&fs);
    let proj = [0usize, 1, 3];
    let preds = [
        None,
        Some(Predicate::cmp("age", CmpOp::Gt, 70)),
        Some(Predicate::eq("name", "moved")),
        Some(Predicate::Or(vec![
            Predicate::cmp("_id", CmpOp::Lt, 5u64),
            Predicate::cmp("_id", CmpOp::Gt, 139_990u64),
        ])),
        Some(Predicate::eq("age", 1_000)),
    ];
    for p in &preds {
        let full: Vec<RecordBatch> =
            t.scan_filtered(&proj, p.clone()).unwrap().collect::<Result<_>>().unwrap();
        let full = arrow_select::concat::concat_batches(&t.projected_schema(&proj).unwrap(), &full)
            .unwrap();
        let n = full.num_rows();
        for (offset, limit) in [
            (0, Some(1)),
            (0, Some(100)),
            (3, Some(7)),
            (65_530, Some(20)),
            (n.saturating_sub(5), Some(100)),
            (n, Some(3)),
            (n + 10, None),
            (1_000, None),
            (0, Some(0)),
        ] {
            let got = t.scan_range(&proj, p.as_ref(), offset, limit).unwrap();
            let got = arrow_select::concat::concat_batches(&full.schema(), &got).unwrap();
            let start = offset.min(n);
            let len = limit.unwrap_or(usize::MAX).min(n - start);
            assert_eq!(got, full.slice(start, len), "{p:?} offset {offset} limit {limit:?}");
        }
    }
    assert!(matches!(
        t.scan_range(&proj, Some(&Predicate::eq("nope", 1)), 0, None),
        Err(Error::ColumnNotFound { .. })
    ));
    // Point lookups of many ids (dense windows, sparse rows, the memtable, deleted and
    // missing ids, repeats) equal picking the rows out of the full scan.
    let full = concat(&t.scan(&proj).unwrap().collect::<Result<Vec<_>>>().unwrap());
    let ids = full.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
    let at: std::collections::HashMap<u64, usize> =
        (0..full.num_rows()).map(|i| (ids.value(i), i)).collect();
    // Up to `CELL_ROWS` rows are read value by value, more as arrays per row group: the
    // lists cover both, sparse and dense.
    let lists: [Vec<u64>; 6] = [
        (1_000..1_200).collect(),
        (1..140_300).step_by(1_009).collect(),
        (139_900..140_300).rev().chain([10, 70_000, 97, 5_000_000, 11, 11]).collect(),
        (1..140_300).step_by(331).chain(60_000..60_100).collect(),
        (1..140_300).step_by(89).chain([10, 140_100, 10]).collect(),
        (20_000..22_000).chain(139_900..140_300).collect(),
    ];
    // The same lookups on an identical table that nothing has scanned: its updated rows
    // (10 and 70,000) sit in the memtable's open tail, whose arrays are not built yet, so
    // the value-by-value path reads them in place.
    let (_open, fresh) = three_row_groups_with_deletes_open(&MemFs::new());
    let early: Vec<RecordBatch> = lists
        .iter()
        .filter(|l| l.len() <= CELL_ROWS)
        .map(|l| fresh.get_many(l, &proj).unwrap())
        .collect();
    let mut paths = [false; 2];
    let mut small = 0;
    for list in &lists {
        let got = t.get_many(list, &proj).unwrap();
        if list.len() <= CELL_ROWS {
            assert_eq!(early[small], got, "unbuilt tail: {list:?}");
            small += 1;
        }
        let rows: Vec<u32> = list.iter().filter_map(|id| at.get(id)).map(|&r| r as u32).collect();
        assert!(rows.len() > 1 && rows.len() < list.len(), "a list skips deleted ids");
        paths[usize::from(rows.len() > CELL_ROWS)] = true;
        let want =
            arrow_select::take::take_record_batch(&full, &arrow_array::UInt32Array::from(rows))
                .unwrap();
        assert_eq!(got, want);
    }
    assert_eq!(paths, [true, true], "the lists take both paths");
    // A few ids (spread over row groups and the memtable, repeated, missing).
    for list in [vec![5u64, 70_001, 140_100, 5, 99_999, 5_000_000], vec![140_250, 3], vec![]] {
        let got = t.get_many(&list, &proj).unwrap();
        let rows: Vec<u32> = list.iter().filter_map(|id| at.get(id)).map(|&r| r as u32).collect();
        let want =
            arrow_select::take::take_record_batch(&full, &arrow_array::UInt32Array::from(rows))
                .unwrap();
        assert_eq!(got, want, "{list:?}");
    }
}

#[test]
fn transactions_are_atomic_across_tables_and_see_their_own_writes() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("a", &schema()).unwrap();
    s.create_table("b", &schema()).unwrap();
    s.insert("a", &[rows(0, 3)]).unwrap();

    let mut txn = s.begin(Durability::ProcessSafe).unwrap();
    txn.insert(&s, "a", &[rows(3, 2)]).unwrap();
    txn.insert(&s, "b", &[rows(0, 4)]).unwrap();
    txn.delete(&s, "a", &[1]).unwrap();
    txn.update(&s, "a", &[2], &set_name("two")).unwrap();
    // Read-your-own-writes inside; nothing outside.
    assert_eq!(txn.table("a").unwrap().count(), 4);
    assert_eq!(txn.table("b").unwrap().count(), 4);
    assert_eq!(s.snapshot().table("a").unwrap().count(), 3);
    assert_eq!(s.snapshot().table("b").unwrap().count(), 0);
    s.commit(txn).unwrap();
    assert_eq!(s.snapshot().table("a").unwrap().count(), 4);
    assert_eq!(s.snapshot().table("b").unwrap().count(), 4);

    let mut txn = s.begin(Durability::ProcessSafe).unwrap();
    txn.insert(&s, "b", &[rows(10, 1)]).unwrap();
    txn.delete(&s, "a", &[2, 3]).unwrap();
    s.rollback(txn);
    assert_eq!(s.snapshot().table("a").unwrap().count(), 4);
    assert_eq!(s.snapshot().table("b").unwrap().count(), 4);
    // A later commit reuses nothing of the rolled-back state and is still atomic on reopen.
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    let mut names = names_of(&s, "a");
    names.sort();
    assert_eq!(names.iter().map(|(id, _)| *id).collect::<Vec<_>>(), vec![2, 3, 4, 5]);
    assert_eq!(names[0].1, "two");
    assert_eq!(s.snapshot().table("b").unwrap().count(), 4);
}

#[test]
fn uncommitted_transactions_leave_no_trace_after_a_crash() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 2)]).unwrap();
    let mut txn = s.begin(Durability::ProcessSafe).unwrap();
    txn.insert(&s, "t", &[rows(2, 20_000)]).unwrap(); // spilled to a segment file
    txn.delete(&s, "t", &[1]).unwrap();
    let spilled = fs.list_dir(Path::new("/db/t1")).unwrap();
    assert!(!spilled.is_empty());
    std::mem::forget(txn);
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    assert_eq!(s.snapshot().table("t").unwrap().count(), 2);
    // The spilled segments were orphans and are gone: every file left is in the manifest.
    let now = fs.list_dir(Path::new("/db/t1")).unwrap();
    let segs = s.snapshot().table("t").unwrap().segments().len();
    assert_eq!(now.iter().filter(|f| f.ends_with(".bsg")).count(), segs, "{spilled:?} / {now:?}");
}

#[test]
fn large_transactions_spill_and_commit_or_roll_back() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 5)]).unwrap(); // memtable
    let mut txn = s.begin(Durability::ProcessSafe).unwrap();
    let r = txn.insert(&s, "t", &[rows(5, 30_000)]).unwrap();
    assert_eq!(r.first, 6);
    assert_eq!(txn.table("t").unwrap().memtable().rows(), 0); // spilled, not held in memory
    assert_eq!(txn.table("t").unwrap().count(), 30_005);
    s.rollback(txn);
    assert!(fs.list_dir(Path::new("/db/t1")).unwrap().iter().all(|f| !f.ends_with(".bsg")));
    assert_eq!(s.snapshot().table("t").unwrap().count(), 5);
    let mut txn = s.begin(Durability::ProcessSafe).unwrap();
    txn.insert(&s, "t", &[rows(5, 30_000)]).unwrap();
    txn.insert(&s, "t", &[rows(30_005, 3)]).unwrap();
    s.commit(txn).unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().count(), 30_008);
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    let ids: Vec<u64> = names_of(&s, "t").iter().map(|(id, _)| *id).collect();
    assert_eq!(ids, (1..=30_008).collect::<Vec<_>>());
}

#[test]
fn writers_queue_behind_a_write_transaction_and_time_out() {
    let fs = MemFs::new();
    // A short lock timeout: a second writer gives up with LockTimeout.
    {
        let opts = StoreOptions {
            lock_timeout: std::time::Duration::from_millis(100),
            ..StoreOptions::default()
        };
        let s = Store::open(Arc::new(fs.clone()), Path::new("/db"), Path::new(":memory:"), opts)
            .unwrap();
        s.create_table("t", &schema()).unwrap();
        let mut txn = s.begin(Durability::ProcessSafe).unwrap();
        txn.insert(&s, "t", &[rows(0, 1)]).unwrap(); // now the writer
        let e = s.insert("t", &[rows(1, 1)]).unwrap_err();
        assert!(matches!(e, Error::LockTimeout { .. }), "{e}");
        s.commit(txn).unwrap();
        s.close().unwrap();
    }
    // A generous one: a second writer queues and gets in once the transaction commits.
    let opts = StoreOptions {
        lock_timeout: std::time::Duration::from_secs(60),
        ..StoreOptions::default()
    };
    let s = Arc::new(
        Store::open(Arc::new(fs.clone()), Path::new("/db"), Path::new(":memory:"), opts).unwrap(),
    );
    let mut txn = s.begin(Durability::ProcessSafe).unwrap();
    txn.insert(&s, "t", &[rows(2, 1)]).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let s2 = s.clone();
    let waiter = std::thread::spawn(move || {
        tx.send(()).unwrap();
        s2.insert("t", &[rows(3, 1)])
    });
    rx.recv().unwrap();
    s.commit(txn).unwrap();
    // The transaction's row got id 2; the queued insert came after it.
    assert_eq!(waiter.join().unwrap().unwrap().first, 3);
    assert_eq!(s.snapshot().table("t").unwrap().count(), 3);
}

/// Transfers between accounts keep the total constant; every snapshot a reader takes, at
/// any moment, sees the same total.
#[test]
fn concurrent_transfers_keep_the_invariant_for_every_reader() {
    let fs = MemFs::new();
    let s = Arc::new(open_with(&fs, Durability::ProcessSafe));
    let acc = Schema::new(vec![Field::new("balance", DataType::Int64, false)]);
    s.create_table("acc", &acc).unwrap();
    let init = RecordBatch::try_new(
        Arc::new(acc.clone()),
        vec![Arc::new(Int64Array::from(vec![100i64; 10]))],
    )
    .unwrap();
    s.insert("acc", &[init]).unwrap();
    let total = |snap: &DbSnapshot| -> i64 {
        let t = snap.table("acc").unwrap().clone();
        t.scan(&[1])
            .unwrap()
            .map(|b| {
                let b = b.unwrap();
                b.column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .unwrap()
                    .values()
                    .iter()
                    .sum::<i64>()
            })
            .sum()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (s, stop) = (s.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seen = 0;
                loop {
                    assert_eq!(total(&s.snapshot()), 1000);
                    seen += 1;
                    if stop.load(Ordering::Relaxed) {
                        break seen;
                    }
                }
            })
        })
        .collect();
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let s = s.clone();
            std::thread::spawn(move || {
                for i in 0..40u64 {
                    let (from, to) = (1 + (w * 7 + i) % 10, 1 + (w * 3 + i * 5 + 1) % 10);
                    if from == to {
                        continue;
                    }
                    let mut txn = s.begin_immediate(Durability::ProcessSafe).unwrap();
                    let t = txn.table("acc").unwrap();
                    let b = t.get_many(&[from, to], &[1]).unwrap();
                    let v = b
                        .column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap()
                        .values()
                        .to_vec();
                    let amount = 7;
                    let upd = RecordBatch::try_new(
                        Arc::new(acc_schema()),
                        vec![Arc::new(Int64Array::from(vec![v[0] - amount, v[1] + amount]))],
                    )
                    .unwrap();
                    txn.update(&s, "acc", &[from, to], &upd).unwrap();
                    s.commit(txn).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert_eq!(total(&s.snapshot()), 1000);
    let s = Arc::try_unwrap(s).unwrap();
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    assert_eq!(total(&s.snapshot()), 1000);
}

fn acc_schema() -> Schema {
    Schema::new(vec![Field::new("balance", DataType::Int64, false)])
}

#[test]
fn columns_can_be_added_dropped_and_renamed_without_rewriting() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 20_000)]).unwrap();
    s.insert("t", &[rows(20_000, 3)]).unwrap(); // memtable, flushed by the first ALTER
    let files_before: Vec<String> = fs.list_dir(Path::new("/db/t1")).unwrap();
    s.alter_table("t", &AlterColumn::Add(Field::new("note", DataType::Utf8, true))).unwrap();
    s.alter_table("t", &AlterColumn::Rename { from: "name".into(), to: "who".into() }).unwrap();
    s.alter_table("t", &AlterColumn::Drop("score".into())).unwrap();
    let e = s
        .alter_table("t", &AlterColumn::Add(Field::new("must", DataType::Int32, false)))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidInput { .. }), "{e}");
    assert!(matches!(
        s.alter_table("t", &AlterColumn::Drop("nope".into())),
        Err(Error::ColumnNotFound { .. })
    ));
    assert!(
        s.alter_table("t", &AlterColumn::Rename { from: "who".into(), to: "age".into() }).is_err()
    );
    // Several changes: all or none; a full-text column renamed earlier in the same list
    // still may not be dropped.
    s.create_fts_index("t", &["who"], "default").unwrap();
    let renamed_then_dropped = [
        AlterColumn::Add(Field::new("extra", DataType::Int32, true)),
        AlterColumn::Rename { from: "who".into(), to: "w2".into() },
        AlterColumn::Drop("w2".into()),
    ];
    let e = s.alter_table_all("t", &renamed_then_dropped).unwrap_err();
    assert!(e.to_string().contains("full-text index"), "{e}");
    assert!(s.snapshot().table("t").unwrap().schema().index_of("extra").is_none());
    s.drop_fts_index("t").unwrap();
    // Existing segments were not rewritten (only the memtable became one more).
    let files_after = fs.list_dir(Path::new("/db/t1")).unwrap();
    assert!(files_before.iter().all(|f| files_after.contains(f)));
    let check = |s: &Store| {
        let snap = s.snapshot();
        let t = snap.table("t").unwrap().clone();
        let names: Vec<String> =
            t.schema().user_schema().fields().iter().map(|f| f.name().clone()).collect();
        assert_eq!(names, vec!["who", "age", "emb", "note"]);
        let r = t.get(7, &t.resolve(&["who", "note"]).unwrap()).unwrap().unwrap();
        assert_eq!(r.column(0).as_any().downcast_ref::<StringArray>().unwrap().value(0), "user_6");
        assert!(r.column(1).is_null(0));
        assert_eq!(
            t.matching_ids(&crate::Predicate::eq("who", "user_20001")).unwrap(),
            vec![20_002]
        );
    };
    check(&s);
    // New rows use the new schema.
    let b = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("who", DataType::Utf8, false),
            Field::new("note", DataType::Utf8, true),
        ])),
        vec![Arc::new(StringArray::from(vec!["new"])), Arc::new(StringArray::from(vec!["hi"]))],
    )
    .unwrap();
    s.insert("t", &[b]).unwrap();
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    check(&s);
    let t = s.snapshot().table("t").unwrap().clone();
    assert_eq!(t.matching_ids(&crate::Predicate::eq("note", "hi")).unwrap(), vec![20_004]);
}

#[test]
fn compaction_merges_small_segments_and_reclaims_deleted_rows_without_disturbing_readers() {
    let t = tempfile::tempdir().unwrap();
    let opts = StoreOptions { auto_compact: false, ..StoreOptions::default() };
    let s = Store::open(Arc::new(OsFs), t.path(), t.path(), opts).unwrap();
    s.create_table("t", &schema()).unwrap();
    for i in 0..5 {
        s.insert("t", &[rows(i * 10, 10)]).unwrap();
        s.flush().unwrap();
    }
    s.insert("t", &[rows(50, 40_000)]).unwrap(); // a big segment
    let ids: Vec<u64> = (51..=40_050).filter(|i| i % 3 != 0).collect();
    s.delete("t", &ids).unwrap(); // two thirds of the big segment
    s.flush().unwrap();
    assert_eq!(s.snapshot().table("t").unwrap().segments().len(), 6);
    let before = names_of(&s, "t");
    let old_reader = s.snapshot();
    let size = |p: &Path| -> u64 {
        std::fs::read_dir(p).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
    };
    let bytes_before = size(&manifest::table_dir(t.path(), 1));
    let r = s.compact("t", false).unwrap();
    assert_eq!(r.segments_in, 6);
    assert_eq!(r.rows_dropped, ids.len() as u64);
    assert_eq!(s.snapshot().table("t").unwrap().segments().len(), 1);
    assert_eq!(names_of(&s, "t"), before);
    assert!(size(&manifest::table_dir(t.path(), 1)) < bytes_before);
    // The old snapshot still reads its (now unlinked) segment files.
    let old = old_reader.table("t").unwrap().clone();
    let n: usize = old.scan(&[0, 1]).unwrap().map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(n, before.len());
    // Point lookups find rows in the compacted segment; deleted ones stay gone.
    let now = s.snapshot().table("t").unwrap().clone();
    assert!(now.get(52, &[0]).unwrap().is_none());
    assert!(now.get(54, &[0]).unwrap().is_some());
    drop((old, old_reader, now));
    s.close().unwrap();
    drop(s);
    let s = Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    assert_eq!(names_of(&s, "t"), before);
    // Nothing is compacted twice.
    assert_eq!(s.compact("t", false).unwrap(), CompactionReport::default());
}

#[test]
fn compaction_writes_row_groups_in_id_order_so_lookups_stay_binary_searches() {
    let t = tempfile::tempdir().unwrap();
    let opts = StoreOptions { auto_compact: false, ..StoreOptions::default() };
    let s = Store::open(Arc::new(OsFs), t.path(), t.path(), opts).unwrap();
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 10)]).unwrap();
    s.flush().unwrap();
    // Updated rows move to the next segment, before the newer ids of that segment.
    s.insert("t", &[rows(10, 10)]).unwrap();
    for id in [2u64, 3, 9] {
        s.update("t", &[id], &set_name(&format!("new_{id}"))).unwrap();
    }
    s.flush().unwrap();
    let before = names_of(&s, "t");
    let r = s.compact("t", false).unwrap();
    assert_eq!(r.segments_in, 2);
    let now = s.snapshot().table("t").unwrap().clone();
    assert_eq!(now.segments().len(), 1);
    assert!(now.segments()[0].segment.meta().row_groups.iter().all(|g| g.ids_sorted));
    let mut want = before.clone();
    want.sort();
    assert_eq!(names_of(&s, "t"), want);
    for (id, name) in &before {
        let b = now.get(*id, &[0, 1]).unwrap().unwrap();
        let got = b.column(1).as_any().downcast_ref::<StringArray>().unwrap().value(0);
        assert_eq!(got, name, "row {id}");
    }
    assert!(now.get(21, &[0]).unwrap().is_none());
}

#[test]
fn explicit_flushes_keep_the_segment_count_bounded() {
    let fs = MemFs::new();
    let s = mem_store(&Arc::new(fs.clone()));
    s.create_table("t", &schema()).unwrap();
    for i in 0..40 {
        s.insert("t", &[rows(i * 3, 3)]).unwrap();
        s.flush().unwrap();
    }
    let t = s.snapshot().table("t").unwrap().clone();
    assert!(t.segments().len() <= 2, "{} segments", t.segments().len());
    assert_eq!(
        names_of(&s, "t").iter().map(|(id, _)| *id).collect::<Vec<_>>(),
        (1..=120).collect::<Vec<_>>()
    );
}

#[test]
fn change_feeds_tail_the_log_durably_and_hold_it_back() {
    use crate::wal::Op;
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 2)]).unwrap(); // before the feed: not in it
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    s.set_commit_hook(Some(Arc::new(move |e: &crate::store::CommitEvent| {
        ev.lock().push((e.lsn, e.ops.len(), e.bulk_inserts.len()));
    })));
    let start = s.create_feed("idx").unwrap();
    s.insert("t", &[rows(2, 3)]).unwrap();
    s.delete("t", &[1]).unwrap();
    s.insert("t", &[rows(5, 20_000)]).unwrap(); // bulk: straight to a segment, not logged
    s.update("t", &[2], &set_name("two")).unwrap();
    let got = s.read_feed("idx", 100).unwrap();
    let kinds: Vec<&str> = got
        .iter()
        .flat_map(|(_, r)| {
            r.ops.iter().map(|o| match o {
                Op::Insert { .. } => "insert",
                Op::Delete { .. } => "delete",
            })
        })
        .collect();
    assert_eq!(kinds, vec!["insert", "delete", "delete", "insert"]);
    assert_eq!(got[0].0, start + 1);
    // The hook saw every commit, including the bulk one.
    let evs = events.lock().clone();
    assert_eq!(evs.len(), 4);
    assert_eq!(evs[2], (None, 0, 1));
    assert!(evs[0].0.is_some());
    // Flushing does not drop log records the feed has not acknowledged.
    s.flush().unwrap();
    assert_eq!(s.read_feed("idx", 100).unwrap().len(), 3);
    s.ack_feed("idx", got[1].0).unwrap();
    assert_eq!(s.read_feed("idx", 100).unwrap().len(), 1);
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    let rest = s.read_feed("idx", 100).unwrap();
    assert_eq!(rest.len(), 1);
    assert_eq!(rest[0].0, got[2].0);
    s.ack_feed("idx", rest[0].0).unwrap();
    s.insert("t", &[rows(0, 1)]).unwrap(); // a new change for the feed
    let last = s.read_feed("idx", 100).unwrap();
    assert_eq!(last.len(), 1);
    s.ack_feed("idx", last[0].0).unwrap();
    s.flush().unwrap();
    assert_eq!(s.read_feed("idx", 100).unwrap().len(), 0);
    // Everything acknowledged and flushed: no log file of records is kept, only the empty
    // one the next record goes to.
    let files = log_files(&fs);
    assert_eq!(files.len(), 1, "{files:?}");
    let bytes = fs.read(&Path::new("/db/wal").join(&files[0])).unwrap();
    assert!(crate::wal::record_starts_for_tests(&bytes).is_empty());
    s.drop_feed("idx").unwrap();
    assert!(s.read_feed("idx", 1).is_err());
}

#[test]
fn checkpoints_pin_a_version_and_restore_it() {
    let t = tempfile::tempdir().unwrap();
    let open = || Store::open(Arc::new(OsFs), t.path(), t.path(), StoreOptions::default()).unwrap();
    let s = open();
    s.create_table("a", &schema()).unwrap();
    s.create_table("b", &schema()).unwrap();
    s.insert("a", &[rows(0, 20_000)]).unwrap();
    s.insert("a", &[rows(20_000, 5)]).unwrap();
    s.insert("b", &[rows(0, 3)]).unwrap();
    s.checkpoint("v1").unwrap();
    assert!(matches!(s.checkpoint("v1"), Err(Error::InvalidInput { .. })));
    let at_v1 = names_of(&s, "a");
    // Change everything: deletes (then compaction), updates, a drop, new rows.
    let ids: Vec<u64> = (1..=15_000).collect();
    s.delete("a", &ids).unwrap();
    s.update("a", &[16_000], &set_name("changed")).unwrap();
    s.flush().unwrap();
    s.compact("a", true).unwrap();
    s.drop_table("b").unwrap();
    s.insert("a", &[rows(0, 2)]).unwrap();
    let next_id_before = s.snapshot().table("a").unwrap().next_row_id();
    // The checkpoint still reads as it was, although compaction and the drop ran.
    let cp = s.checkpoint_snapshot("v1").unwrap();
    let cpa = cp.table("a").unwrap().clone();
    assert_eq!(cpa.count(), 20_005);
    assert_eq!(cp.table("b").unwrap().count(), 3);
    let n: usize = cpa.scan(&[0]).unwrap().map(|b| b.unwrap().num_rows()).sum();
    assert_eq!(n, 20_005);
    drop((cp, cpa));
    s.restore("v1").unwrap();
    assert_eq!(names_of(&s, "a"), at_v1);
    assert_eq!(s.snapshot().table("b").unwrap().count(), 3);
    // Ids are never reused after a restore.
    assert_eq!(s.insert("a", &[rows(0, 1)]).unwrap().first, next_id_before);
    assert_eq!(s.list_checkpoints().unwrap(), vec!["v1".to_string()]);
    s.close().unwrap();
    drop(s);
    let s = open();
    assert_eq!(s.snapshot().table("a").unwrap().count(), 20_006);
    assert_eq!(s.snapshot().table("b").unwrap().count(), 3);
    s.drop_checkpoint("v1").unwrap();
    assert!(s.list_checkpoints().unwrap().is_empty());
    assert!(s.restore("v1").is_err());
}

/// Restoring some tables leaves every other one (memtable rows included, across a crash)
/// as it is.
#[test]
fn some_tables_restore_alone() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    for t in ["a", "b", "c"] {
        s.create_table(t, &schema()).unwrap();
        s.insert(t, &[rows(0, 10)]).unwrap();
    }
    s.checkpoint("cp").unwrap();
    let a_at_cp = names_of(&s, "a");
    s.delete("a", &[1, 2, 3]).unwrap();
    s.update("a", &[4], &set_name("changed")).unwrap();
    s.insert("b", &[rows(10, 5)]).unwrap(); // memtable rows of a table not restored
    s.drop_table("c").unwrap();
    s.create_table("c", &schema()).unwrap(); // another table of that name
    s.insert("c", &[rows(0, 1)]).unwrap();
    s.create_table("d", &schema()).unwrap();
    // A table the checkpoint lacks: an error, nothing changes.
    assert!(matches!(s.restore_tables("cp", &["a", "d"]), Err(Error::InvalidInput { .. })));
    assert_eq!(s.snapshot().table("a").unwrap().count(), 7);
    let next_a = s.snapshot().table("a").unwrap().next_row_id();
    s.restore_tables("cp", &["a", "c"]).unwrap();
    let snap = s.snapshot();
    assert_eq!(names_of(&s, "a"), a_at_cp);
    assert_eq!(snap.table("b").unwrap().count(), 15);
    assert_eq!(snap.table("c").unwrap().count(), 10);
    assert!(snap.table("d").is_ok());
    // Ids are not reused; everything survives a crash.
    assert_eq!(s.insert("a", &[rows(0, 1)]).unwrap().first, next_a);
    s.insert("b", &[rows(15, 1)]).unwrap();
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    let snap = s.snapshot();
    assert_eq!(snap.table("a").unwrap().count(), 11);
    assert_eq!(snap.table("b").unwrap().count(), 16);
    assert_eq!(snap.table("c").unwrap().count(), 10);
}

mod model {
    //! Model-based test: random operation sequences against the store and against a
    //! `BTreeMap` model must agree after every step. Case count: BASALT_MODEL_CASES.
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::predicate::{CmpOp, Predicate};

    #[derive(Debug, Clone)]
    enum Step {
        Insert(Vec<(i64, u8)>),
        Bulk(u16),
        Delete(Vec<usize>),
        Update(usize, i64),
        DeleteWhere(i64),
        TxnCommit(Vec<(i64, u8)>, usize),
        TxnRollback(Vec<(i64, u8)>),
        Flush,
        Compact,
        Kill,
        Close,
    }

    fn step() -> impl Strategy<Value = Step> {
        let rows = proptest::collection::vec((-50i64..50, 0u8..4), 1..20);
        prop_oneof![
            6 => rows.clone().prop_map(Step::Insert),
            1 => (100u16..300).prop_map(Step::Bulk),
            3 => proptest::collection::vec(any::<usize>(), 1..5).prop_map(Step::Delete),
            3 => (any::<usize>(), -50i64..50).prop_map(|(i, v)| Step::Update(i, v)),
            1 => (-50i64..50).prop_map(Step::DeleteWhere),
            2 => (rows.clone(), any::<usize>()).prop_map(|(r, d)| Step::TxnCommit(r, d)),
            1 => rows.prop_map(Step::TxnRollback),
            1 => Just(Step::Flush),
            1 => Just(Step::Compact),
            1 => Just(Step::Kill),
            1 => Just(Step::Close),
        ]
    }

    fn batch(rows: &[(i64, u8)]) -> RecordBatch {
        let s = Arc::new(Schema::new(vec![
            Field::new("v", DataType::Int64, false),
            Field::new("c", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            s,
            vec![
                Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>())),
                Arc::new(StringArray::from(
                    rows.iter().map(|r| (r.1 < 3).then(|| format!("c{}", r.1))).collect::<Vec<_>>(),
                )),
            ],
        )
        .unwrap()
    }

    fn open(fs: &MemFs) -> Store {
        let opts = StoreOptions {
            bulk_insert_rows: 100,
            memtable_flush_rows: 150,
            ..StoreOptions::default()
        };
        Store::open(Arc::new(fs.clone()), Path::new("/db"), Path::new(":memory:"), opts).unwrap()
    }

    fn contents(s: &Store) -> BTreeMap<u64, (i64, Option<String>)> {
        let t = s.snapshot().table("m").unwrap().clone();
        let mut out = BTreeMap::new();
        for b in t.scan(&[0, 1, 2]).unwrap() {
            let b = b.unwrap();
            let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
            let v = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
            let c = b.column(2).as_any().downcast_ref::<StringArray>().unwrap();
            for i in 0..b.num_rows() {
                let prev = out.insert(
                    ids.value(i),
                    (v.value(i), c.is_valid(i).then(|| c.value(i).to_string())),
                );
                assert!(prev.is_none(), "id {} twice", ids.value(i));
            }
        }
        out
    }

    fn run(steps: Vec<Step>) {
        let fs = MemFs::new();
        let mut s = open(&fs);
        let schema = Schema::new(vec![
            Field::new("v", DataType::Int64, false),
            Field::new("c", DataType::Utf8, true),
        ]);
        s.create_table("m", &schema).unwrap();
        let mut model: BTreeMap<u64, (i64, Option<String>)> = BTreeMap::new();
        let add =
            |model: &mut BTreeMap<u64, (i64, Option<String>)>, first: u64, rows: &[(i64, u8)]| {
                for (k, r) in rows.iter().enumerate() {
                    model.insert(first + k as u64, (r.0, (r.1 < 3).then(|| format!("c{}", r.1))));
                }
            };
        let pick = |model: &BTreeMap<u64, (i64, Option<String>)>, i: usize| {
            model.keys().nth(i % model.len().max(1)).copied()
        };
        for st in steps {
            match st {
                Step::Insert(rows) => {
                    let r = s.insert("m", &[batch(&rows)]).unwrap();
                    add(&mut model, r.first, &rows);
                }
                Step::Bulk(n) => {
                    let rows: Vec<(i64, u8)> =
                        (0..n).map(|i| (i64::from(i % 97), (i % 4) as u8)).collect();
                    let r = s.insert("m", &[batch(&rows)]).unwrap();
                    add(&mut model, r.first, &rows);
                }
                Step::Delete(picks) => {
                    let ids: Vec<u64> = picks.iter().filter_map(|&i| pick(&model, i)).collect();
                    s.delete("m", &ids).unwrap();
                    for id in ids {
                        model.remove(&id);
                    }
                }
                Step::Update(i, v) => {
                    if let Some(id) = pick(&model, i) {
                        let b = RecordBatch::try_new(
                            Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)])),
                            vec![Arc::new(Int64Array::from(vec![v]))],
                        )
                        .unwrap();
                        assert_eq!(s.update("m", &[id], &b).unwrap(), 1);
                        model.get_mut(&id).unwrap().0 = v;
                    }
                }
                Step::DeleteWhere(v) => {
                    let p = Predicate::cmp("v", CmpOp::Lt, v);
                    let n = s.delete_where("m", &p, Durability::ProcessSafe).unwrap();
                    let before = model.len();
                    model.retain(|_, (x, _)| *x >= v);
                    assert_eq!(n as usize, before - model.len());
                }
                Step::TxnCommit(rows, d) => {
                    let mut txn = s.begin(Durability::ProcessSafe).unwrap();
                    let r = txn.insert(&s, "m", &[batch(&rows)]).unwrap();
                    let victim = pick(&model, d);
                    if let Some(id) = victim {
                        txn.delete(&s, "m", &[id]).unwrap();
                    }
                    s.commit(txn).unwrap();
                    add(&mut model, r.first, &rows);
                    if let Some(id) = victim {
                        model.remove(&id);
                    }
                }
                Step::TxnRollback(rows) => {
                    let mut txn = s.begin(Durability::ProcessSafe).unwrap();
                    txn.insert(&s, "m", &[batch(&rows)]).unwrap();
                    s.rollback(txn);
                }
                Step::Flush => s.flush().unwrap(),
                Step::Compact => {
                    s.compact("m", true).unwrap();
                }
                Step::Kill => {
                    std::mem::forget(s);
                    s = open(&fs);
                }
                Step::Close => {
                    s.close().unwrap();
                    drop(s);
                    s = open(&fs);
                }
            }
            assert_eq!(contents(&s), model);
            assert_eq!(s.snapshot().table("m").unwrap().count() as usize, model.len());
        }
        // Point lookups agree too.
        let t = s.snapshot().table("m").unwrap().clone();
        for (id, (v, _)) in model.iter().take(50) {
            let r = t.get(*id, &[1]).unwrap().unwrap();
            assert_eq!(r.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0), *v);
        }
    }

    fn cases() -> u32 {
        std::env::var("BASALT_MODEL_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

        #[test]
        fn store_agrees_with_a_map_model(steps in proptest::collection::vec(step(), 1..40)) {
            run(steps);
        }
    }
}

#[test]
fn a_torn_tail_is_cut_off_so_later_log_files_replay() {
    let fs = MemFs::new();
    let (f, bytes, end) = three_logged_commits(&fs, true); // the feed keeps log files
    fs.put(&f, &bytes[..end - 7]); // tear the last record
    let s = open_with(&fs, Durability::ProcessSafe);
    assert_eq!(s.snapshot().table("t").unwrap().count(), 2);
    s.insert("t", &[rows(9, 1)]).unwrap(); // goes to a newer log file
    kill(s);
    let s = open_with(&fs, Durability::ProcessSafe);
    assert_eq!(s.snapshot().table("t").unwrap().count(), 3);
    assert_eq!(s.read_feed("keep-log", 100).unwrap().len(), 3);
}

#[test]
fn updates_of_some_or_all_columns_keep_the_rest() {
    let fs = MemFs::new();
    let s = open_with(&fs, Durability::ProcessSafe);
    s.create_table("t", &schema()).unwrap();
    s.insert("t", &[rows(0, 1000)]).unwrap(); // a segment
    s.insert("t", &[rows(1000, 10)]).unwrap(); // the memtable
    let before = |id: u64| s.snapshot().table("t").unwrap().get(id, &[0, 1, 2, 3, 4]).unwrap();
    let (seg_row, mem_row) = (before(7).unwrap(), before(1003).unwrap());
    // Every user column given: nothing is read from the old rows; a missing id in between.
    let all = rows(5000, 3);
    let emb = crate::types::vector_type(3);
    let mut fields: Vec<Field> = all.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields.push(Field::new("emb", emb, true));
    let mut cols = all.columns().to_vec();
    cols.push(arrow_array::new_null_array(fields[3].data_type(), 3));
    let all = RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).unwrap();
    assert_eq!(s.update("t", &[7, 424_242, 1003], &all).unwrap(), 2);
    // One column given: the others keep their values.
    assert_eq!(s.update("t", &[8], &set_name("eight")).unwrap(), 1);
    let check = |s: &Store| {
        let t = s.snapshot().table("t").unwrap().clone();
        let row = |id: u64| t.get(id, &[0, 1, 2, 3, 4]).unwrap().unwrap();
        let (r7, r1003) = (row(7), row(1003));
        assert_eq!(r7.column(0), seg_row.column(0));
        assert_eq!(r1003.column(0), mem_row.column(0));
        // Rows 0 and 2 of `all` went to ids 7 and 1003 (the missing id dropped its row).
        for (r, k) in [(&r7, 0), (&r1003, 2)] {
            for c in 1..5 {
                assert_eq!(r.column(c).as_ref(), all.column(c - 1).slice(k, 1).as_ref(), "col {c}");
            }
        }
        let r8 = row(8);
        let name = r8.column(1).as_any().downcast_ref::<StringArray>().unwrap();
        assert_eq!(name.value(0), "eight");
        let old8 = rows(7, 1);
        for c in 2..4 {
            assert_eq!(r8.column(c).as_ref(), old8.column(c - 1).as_ref(), "col {c}");
        }
        assert_eq!(t.count(), 1010);
    };
    check(&s);
    kill(s); // the log replays the same rows
    let s = open_with(&fs, Durability::ProcessSafe);
    check(&s);
}

#[test]
fn a_limited_scan_returns_the_prefix_of_the_unlimited_one() {
    let fs = Arc::new(MemFs::new());
    let s = mem_store(&fs);
    s.create_table("t", &schema()).unwrap();
    // Two segments of several row groups, deletes in them, and memtable rows.
    s.insert("t", &[rows(0, 150_000)]).unwrap();
    s.flush().unwrap();
    s.insert("t", &[rows(150_000, 70_000)]).unwrap();
    s.flush().unwrap();
    s.delete("t", &(0..3_000).map(|i| i * 41 + 1).collect::<Vec<u64>>()).unwrap();
    s.insert("t", &[rows(220_000, 500)]).unwrap();
    let t = s.snapshot().table("t").unwrap().clone();
    let proj = [0usize, 1, 2, 3];
    let ids = |batches: Vec<RecordBatch>| -> Vec<u64> {
        batches
            .iter()
            .flat_map(|b| {
                let c = b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap();
                c.values().to_vec()
            })
            .collect()
    };
    for p in [
        None,
        Some(Predicate::between("age", 30i64, 40i64)),
        Some(Predicate::eq("age", 500i64)), // matches nothing
        Some(Predicate::cmp("_id", crate::predicate::CmpOp::Gt, 219_900u64)),
    ] {
        let all = ids(t
            .scan_units_filtered(&proj, p.clone(), t.scan_units())
            .unwrap()
            .collect::<Result<Vec<_>>>()
            .unwrap());
        for limit in [0usize, 1, 7, 999, 65_536, 70_000, 1_000_000] {
            let got = ids(t
                .scan_units_filtered(&proj, p.clone(), t.scan_units())
                .unwrap()
                .with_limit(Some(limit))
                .collect::<Result<Vec<_>>>()
                .unwrap());
            // Every batch is whole except where the limit cut a row group short, so the
            // limited scan returns at least `limit` rows (when there are) and they are the
            // first rows of the unlimited scan.
            assert!(got.len() >= limit.min(all.len()), "{p:?} limit {limit}");
            assert_eq!(got[..], all[..got.len()], "{p:?} limit {limit}");
            if limit == 0 {
                assert!(got.is_empty());
            }
        }
    }
}

#[test]
fn id_set_predicate_selects_and_prunes() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("t", &schema()).unwrap();
    store.insert("t", &[rows(0, 70_000)]).unwrap(); // one segment of two row groups
    store.insert("t", &[rows(70_000, 5)]).unwrap(); // memtable
    store.delete("t", &[3]).unwrap();
    let t = store.snapshot().table("t").unwrap().clone();
    let ids_of = |p: Predicate| -> Vec<u64> {
        let mut out = Vec::new();
        for b in t.scan_filtered(&[0], Some(p)).unwrap() {
            let b = b.unwrap();
            let a = b.column(0).as_any().downcast_ref::<arrow_array::UInt64Array>().unwrap();
            out.extend(a.values().iter().copied());
        }
        out
    };
    let p = Predicate::id_set(vec![70_003, 2, 3, 69_999, 5, 5, 1_000_000]);
    assert_eq!(ids_of(p.clone()), [2, 5, 69_999, 70_003], "deleted and missing ids drop out");
    assert_eq!(ids_of(Predicate::Not(Box::new(p))).len(), 70_004 - 4);
    assert!(ids_of(Predicate::id_set(Vec::new())).is_empty());
    // Row groups holding none of the ids are skipped by their `_id` zone maps (the
    // memtable has none and is always read).
    let p = Predicate::id_set(vec![2, 5]);
    let kept: Vec<ScanUnit> =
        t.scan_units().into_iter().filter(|u| t.unit_may_match(*u, &p)).collect();
    assert_eq!(kept, [ScanUnit::RowGroup { segment: 0, rg: 0 }, ScanUnit::Memtable]);
}

/// A table `t (x)` of one column of `data_type`, each of `columns` in a segment of its own.
fn one_segment_each(
    data_type: DataType,
    columns: Vec<arrow_array::ArrayRef>,
) -> (Store, Arc<TableSnapshot>) {
    let opts = StoreOptions { bulk_insert_rows: 1, auto_compact: false, ..StoreOptions::default() };
    let store =
        Store::open(Arc::new(MemFs::new()), Path::new("/db"), Path::new(":memory:"), opts).unwrap();
    let schema = Arc::new(Schema::new(vec![Field::new("x", data_type, true)]));
    store.create_table("t", &schema).unwrap();
    let n = columns.len();
    for c in columns {
        store.insert("t", &[RecordBatch::try_new(schema.clone(), vec![c]).unwrap()]).unwrap();
    }
    let t = store.snapshot().table("t").unwrap().clone();
    assert_eq!(t.segments().len(), n);
    (store, t)
}

/// Rows of `t` where `p` holds.
fn count_where(t: &Arc<TableSnapshot>, p: crate::predicate::Predicate) -> usize {
    t.scan_filtered(&[1], Some(p)).unwrap().map(|b| b.unwrap().num_rows()).sum()
}

/// Zone maps order floats as Arrow compares them (−0 < +0, NaN above every number): a
/// flushed chunk holding a NaN is not skipped for `x > c`, nor one holding +0 for `x > −0`.
#[test]
fn float_zone_maps_keep_nan_and_signed_zero_rows() {
    use crate::predicate::{CmpOp, Predicate};
    let columns: Vec<arrow_array::ArrayRef> =
        [vec![1.0, f64::NAN, 2.0], vec![0.0, 0.0], vec![-0.0, 3.0]]
            .into_iter()
            .map(|v| Arc::new(Float64Array::from(v)) as arrow_array::ArrayRef)
            .collect();
    let (_store, t) = one_segment_each(DataType::Float64, columns);
    let count = |p| count_where(&t, p);
    assert_eq!(count(Predicate::cmp("x", CmpOp::Gt, 5.0)), 1, "the NaN row");
    assert_eq!(count(Predicate::cmp("x", CmpOp::Gt, -0.0)), 6, "+0, +0, 1, NaN, 2, 3");
    assert_eq!(count(Predicate::cmp("x", CmpOp::Lt, 0.0)), 1, "-0");
    assert_eq!(count(Predicate::cmp("x", CmpOp::LtEq, 2.0)), 5);
}

/// A float32 column compares with a constant rounded to `f32` (as evaluation casts it), so
/// its zone maps do too: `x = 0.1` finds the rows holding `0.1f32` before and after a flush.
#[test]
fn float32_zone_maps_compare_with_the_rounded_constant() {
    use crate::predicate::{CmpOp, Predicate};
    let values = arrow_array::Float32Array::from(vec![0.1f32, 0.1, 16_777_217.0]);
    let (_store, t) = one_segment_each(DataType::Float32, vec![Arc::new(values)]);
    let count = |p| count_where(&t, p);
    assert_eq!(count(Predicate::eq("x", 0.1f64)), 2);
    assert_eq!(count(Predicate::cmp("x", CmpOp::LtEq, 0.1f64)), 2);
    assert_eq!(count(Predicate::cmp("x", CmpOp::GtEq, 16_777_217i64)), 1, "rounds to 2^24");
}

/// Rows of every table (and a full-text search) as sorted text: what a database answers.
fn answers(s: &Store) -> Result<Vec<String>> {
    let snap = s.snapshot();
    let mut out = Vec::new();
    for name in snap.table_names() {
        let t = snap.table(&name)?.clone();
        let proj: Vec<usize> = (0..t.schema().full_schema().fields().len()).collect();
        let mut rows = Vec::new();
        for b in t.scan(&proj)? {
            let b = b?;
            let opts = arrow_cast::display::FormatOptions::default().with_null("NULL");
            let fmts: Vec<_> = b
                .columns()
                .iter()
                .map(|c| arrow_cast::display::ArrayFormatter::try_new(c.as_ref(), &opts))
                .collect::<std::result::Result<_, _>>()
                .map_err(|e| Error::arrow("format", e))?;
            for r in 0..b.num_rows() {
                let cells: Vec<String> = fmts.iter().map(|f| f.value(r).to_string()).collect();
                rows.push(format!("{name}|{}", cells.join("|")));
            }
        }
        rows.sort();
        out.extend(rows);
        if t.fts.is_some() {
            let view = crate::store::ReadView::Committed(snap.clone());
            let mut ids: Vec<u64> =
                s.search_text(&view, &name, None, "user_7", None)?.iter().map(|h| h.id).collect();
            ids.sort_unstable();
            out.push(format!("{name} fts {ids:?}"));
        }
    }
    Ok(out)
}

/// Copies a directory tree.
fn copy_dir_all(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir_all(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// Every file of a tree, relative to its root, sorted.
fn tree_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            tree_files(root, &e.path(), out);
        } else {
            out.push(e.path().strip_prefix(root).unwrap().to_path_buf());
        }
    }
    out.sort();
}

/// The corruption sweep: every kind of file the database writes — segments, delete files,
/// the manifest, pending slots, the log, checkpoints, full-text index files — with bytes
/// flipped at seeded offsets, cut to half, a page zeroed, or removed. Each case must end in
/// a typed error (naming the file, at open or at the first read of the damaged part) or in
/// the intact database's answers; damage to the log's last record may drop that record
/// (a torn tail), nothing more. Never a panic, never a silently different answer, never a
/// file of the user's removed. Counts per outcome are printed.
#[test]
fn corruption_sweep_over_every_file_kind() {
    let dir = tempfile::tempdir().unwrap();
    let intact = dir.path().join("intact");
    let opts = StoreOptions {
        durability: Durability::ProcessSafe,
        auto_compact: false,
        bulk_insert_rows: 40,
        memtable_flush_rows: 1000,
        ..StoreOptions::default()
    };
    let open = |p: &Path| Store::open(Arc::new(OsFs), p, p, opts);
    {
        let s = open(&intact).unwrap();
        s.create_table("t", &schema()).unwrap();
        s.insert("t", &[rows(0, 60)]).unwrap(); // a segment
        s.insert("t", &[rows(60, 60)]).unwrap(); // another
        s.delete("t", &[3, 4, 70]).unwrap();
        s.update("t", &[10], &set_name("changed")).unwrap();
        s.create_fts_index("t", &["name"], "default").unwrap();
        s.flush().unwrap(); // delete files, the updated row's segment
        s.checkpoint("c").unwrap();
        s.create_table("u", &schema()).unwrap();
        s.insert("u", &[rows(500, 50)]).unwrap();
        s.flush().unwrap();
        // Logged commits left in the log by a kill.
        for i in 0..6 {
            s.insert("t", &[rows(1000 + i, 1)]).unwrap();
        }
        kill(s);
    }
    // A user's file inside the database directory: never removed.
    std::fs::write(intact.join("t1").join("notes.txt"), b"mine").unwrap();
    let mut files = Vec::new();
    tree_files(&intact, &intact, &mut files);
    files.retain(|f| f.file_name().is_some_and(|n| n != "LOCK" && n != "notes.txt"));
    // The answers of the intact database, and of each prefix of its log (a torn tail).
    let state = |root: &Path| -> Result<Vec<String>> {
        let s = open(root)?;
        answers(&s)
    };
    let case_dir = |n: usize| {
        let c = dir.path().join(format!("case{n}"));
        copy_dir_all(&intact, &c);
        c
    };
    let want = state(&case_dir(0)).unwrap();
    let wal_file = files.iter().find(|f| f.starts_with("wal")).unwrap().clone();
    let wal_bytes = std::fs::read(intact.join(&wal_file)).unwrap();
    let starts = crate::wal::record_starts_for_tests(&wal_bytes);
    assert_eq!(starts.len(), 6);
    let mut prefixes = Vec::new();
    for &cut in &starts {
        let c = case_dir(1);
        let mut b = wal_bytes[..cut].to_vec();
        b.resize(wal_bytes.len(), 0);
        std::fs::write(c.join(&wal_file), b).unwrap();
        prefixes.push(state(&c).unwrap());
        std::fs::remove_dir_all(&c).unwrap();
    }
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n.max(1) as u64) as usize
    };
    let (mut cases, mut refused_at_open, mut refused_at_read, mut same, mut torn) = (0, 0, 0, 0, 0);
    for f in &files {
        let bytes = std::fs::read(intact.join(f)).unwrap();
        let mut damages: Vec<(String, Option<Vec<u8>>)> = vec![("removed".into(), None)];
        damages.push(("cut to half".into(), Some(bytes[..bytes.len() / 2].to_vec())));
        if bytes.len() > 8 {
            let at = next(bytes.len()) / 4096 * 4096;
            let mut z = bytes.clone();
            z[at..(at + 4096).min(bytes.len())].fill(0);
            if z != bytes {
                damages.push((format!("page at {at} zeroed"), Some(z)));
            }
        }
        for _ in 0..12 {
            let at = next(bytes.len());
            let mut b = bytes.clone();
            if b.is_empty() {
                break;
            }
            b[at] ^= 1 << next(8);
            damages.push((format!("byte {at} flipped"), Some(b)));
        }
        for (what, damage) in damages {
            cases += 1;
            let c = case_dir(2);
            let p = c.join(f);
            match &damage {
                None => std::fs::remove_file(&p).unwrap(),
                Some(b) => std::fs::write(&p, b).unwrap(),
            }
            let case = format!("{} {what}", f.display());
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let s = match open(&c) {
                    Ok(s) => s,
                    Err(e) => return Err((true, e)),
                };
                answers(&s).map_err(|e| (false, e))
            }));
            match outcome {
                Err(_) => panic!("{case}: panicked"),
                Ok(Err((at_open, e))) => {
                    // Typed, and names a file of the database (or the database).
                    assert!(
                        e.is_corruption()
                            || matches!(
                                e,
                                Error::Io { .. }
                                    | Error::ManifestMissing { .. }
                                    | Error::Fts { .. }
                            ),
                        "{case}: untyped error {e:?}"
                    );
                    assert!(e.to_string().contains(&*c.to_string_lossy()), "{case}: {e}");
                    if at_open { refused_at_open += 1 } else { refused_at_read += 1 }
                }
                Ok(Ok(got)) if got == want => same += 1,
                Ok(Ok(got)) => {
                    // Only the log's last record may be dropped (a torn tail).
                    let in_last = f == &wal_file
                        && damage.as_ref().is_some_and(|b| {
                            b.len() < wal_bytes.len() && b.len() >= starts[5]
                                || b.iter()
                                    .zip(&wal_bytes)
                                    .position(|(x, y)| x != y)
                                    .is_some_and(|d| d >= starts[5])
                        });
                    assert!(in_last && got == prefixes[5], "{case}: a different answer");
                    torn += 1;
                }
            }
            assert_eq!(std::fs::read(c.join("t1/notes.txt")).unwrap(), b"mine", "{case}");
            std::fs::remove_dir_all(&c).unwrap();
        }
    }
    println!(
        "corruption sweep: {cases} cases over {} files: {refused_at_open} refused at open, \
         {refused_at_read} refused at read, {same} answered as intact, {torn} dropped a torn \
         log tail; 0 panics, 0 different answers, 0 user files removed",
        files.len()
    );
}

#[test]
fn column_summaries_and_match_estimates_come_from_metadata_and_samples() {
    use crate::encoding::StatValue;
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("t", &schema()).unwrap();
    store.insert("t", &[rows(0, 70_000)]).unwrap(); // one segment of two row groups
    let t = store.snapshot().table("t").unwrap().clone();
    let age = t.resolve(&["age"]).unwrap()[0];
    let s = t.column_summary(age);
    assert_eq!((s.min, s.max), (Some(StatValue::Int(18)), Some(StatValue::Int(80))));
    assert_eq!((s.null_count, s.nulls_exact, s.bounds_exact), (14_000, true, true));
    // Floats and short text get bounds too; a unique text column is no dictionary.
    let score = t.resolve(&["score"]).unwrap()[0];
    let s = t.column_summary(score);
    assert_eq!((s.min, s.max), (Some(StatValue::Float(0.0)), Some(StatValue::Float(100.0))));
    let name = t.resolve(&["name"]).unwrap()[0];
    let s = t.column_summary(name);
    assert_eq!(s.min, Some(StatValue::Bytes(b"user_0".to_vec())));
    assert_eq!(s.dictionary_entries, None);
    // Row-group metadata: whole row groups without deletes, under a predicate only where
    // zone maps prove it.
    let rg = |rg| ScanUnit::RowGroup { segment: 0, rg };
    let m = t.unit_metadata(rg(1), None, &[age, score]).unwrap();
    assert_eq!((m.rows, m.columns[0].null_count), (70_000 - 65_536, 892));
    let z = m.columns[1].zone_map.clone().unwrap();
    assert_eq!((z.min, z.max), (StatValue::Float(55.3), StatValue::Float(99.93)));
    let ids = Predicate::cmp("_id", crate::predicate::CmpOp::GtEq, 65_537u64);
    assert!(t.unit_metadata(rg(1), Some(&ids), &[age]).is_some());
    assert!(t.unit_metadata(rg(0), Some(&ids), &[age]).is_none());
    assert!(t.unit_metadata(ScanUnit::Memtable, None, &[age]).is_none());
    // `age = 20`: 1 in 5 rows NULL, 1 in 63 of the rest → about 889 rows.
    let units = t.scan_units();
    let n = t.estimate_matches(&Predicate::eq("age", 20i64), &units).unwrap();
    assert!((400..2_000).contains(&n), "{n}");
    // No sampled match: half a row's share, not zero.
    let n = t.estimate_matches(&Predicate::eq("age", 1_000i64), &units).unwrap();
    assert!((1..50).contains(&n), "{n}");
    // Memtable rows leave the bounds unknown and the NULL count inexact; so do deletes.
    store.insert("t", &[rows(70_000, 5)]).unwrap();
    let t = store.snapshot().table("t").unwrap().clone();
    let s = t.column_summary(age);
    assert_eq!((s.min, s.nulls_exact), (None, false));
    assert_eq!(t.estimate_matches(&Predicate::True, &[ScanUnit::Memtable]).unwrap(), 5);
    store.delete("t", &[3]).unwrap();
    let t = store.snapshot().table("t").unwrap().clone();
    assert!(!t.column_summary(age).nulls_exact);
    // A deleted row may hold a bound: its row group has no exact metadata any more.
    assert!(t.unit_metadata(rg(0), None, &[age]).is_none());
    assert!(t.unit_metadata(rg(1), None, &[age]).is_some());
    store.flush().unwrap();
    let t = store.snapshot().table("t").unwrap().clone();
    let s = t.column_summary(age);
    assert!(s.min.is_some() && !s.bounds_exact);
}

#[test]
fn row_filters_in_a_conjunction_read_only_the_undecided_rows() {
    use arrow_array::cast::AsArray;
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    store.create_table("t", &schema()).unwrap();
    store.insert("t", &[rows(0, 70_000)]).unwrap();
    store.insert("t", &[rows(70_000, 300)]).unwrap(); // memtable
    let t = store.snapshot().table("t").unwrap().clone();
    let seen = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = seen.clone();
    let thirds = crate::RowFilter::new(
        vec!["age".into()],
        "age % 3 = 0".into(),
        Arc::new(move |cols: &[arrow_array::ArrayRef], rows| {
            counter.fetch_add(rows, std::sync::atomic::Ordering::Relaxed);
            let a = cols[0].as_primitive::<arrow_array::types::Int64Type>();
            Ok(a.iter().map(|v| v.map(|v| v % 3 == 0)).collect())
        }),
    );
    // 18..=21 is 4 ages in 63: the filter sees those rows only (and the memtable's).
    let p = Predicate::And(vec![
        Predicate::between("age", 18i64, 21i64),
        Predicate::Rows(thirds.clone()),
    ]);
    let n: usize = t.scan_filtered(&[0], Some(p)).unwrap().map(|b| b.unwrap().num_rows()).sum();
    let want = (0..70_300).filter(|i| i % 5 != 0 && [0, 3].contains(&(i % 63))).count();
    assert_eq!(n, want);
    let read = seen.load(std::sync::atomic::Ordering::Relaxed);
    assert!(read < 70_000 / 8 + 300, "{read}");
    // Under NOT, a row the filter finds false is true: the undecided rows include
    // those the rest left unknown (NULL ages), which stay unknown.
    let p = Predicate::Not(Box::new(Predicate::And(vec![
        Predicate::between("age", 18i64, 21i64),
        Predicate::Rows(thirds),
    ])));
    let n: usize = t.scan_filtered(&[0], Some(p)).unwrap().map(|b| b.unwrap().num_rows()).sum();
    let want = (0..70_300).filter(|i| i % 5 != 0 && ![0, 3].contains(&(i % 63))).count();
    assert_eq!(n, want);
}

/// Fails rows whose `age` (column 2) is below 18, whatever the condition's text says.
#[derive(Debug)]
struct AdultsOnly;

impl CheckEvaluator for AdultsOnly {
    fn first_violated(
        &self,
        checks: &[crate::manifest::CheckDef],
        rows: &RecordBatch,
    ) -> std::result::Result<Option<usize>, String> {
        let age = rows.column(2).as_any().downcast_ref::<Int64Array>().ok_or("age")?;
        let bad = age.iter().any(|a| a.is_some_and(|a| a < 18));
        Ok((bad && !checks.is_empty()).then_some(0))
    }
}

#[test]
fn check_constraints_are_kept_and_every_write_goes_through_the_evaluator() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    let check = NewCheck { name: None, sql: "\"age\" >= 18".into(), columns: vec!["age".into()] };
    store.create_table_full("t", &schema(), false, &[], &[], &[check]).unwrap();
    // No evaluator installed: a table with checks refuses writes instead of skipping them.
    let e = store.insert("t", &[rows(0, 3)]).unwrap_err();
    assert!(e.to_string().contains("nothing here evaluates them"), "{e}");
    store.set_check_evaluator(Arc::new(AdultsOnly));
    store.insert("t", &[rows(0, 3)]).unwrap();
    let minor = |n: i64| {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("name", DataType::Utf8, false),
                Field::new("age", DataType::Int64, true),
            ])),
            vec![Arc::new(StringArray::from(vec!["kid"])), Arc::new(Int64Array::from(vec![n]))],
        )
        .unwrap()
    };
    let e = store.insert("t", &[minor(5)]).unwrap_err();
    assert!(
        matches!(&e, Error::CheckViolation { constraint, .. } if constraint == "t_age_check"),
        "{e}"
    );
    // Updates are checked on the whole new row; bulk inserts too.
    let age = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("age", DataType::Int64, true)])),
        vec![Arc::new(Int64Array::from(vec![3]))],
    )
    .unwrap();
    assert!(matches!(store.update("t", &[2], &age), Err(Error::CheckViolation { .. })));
    let mut big = rows(100, 30_000);
    let cols = big.columns().to_vec();
    let mut ages: Vec<Option<i64>> =
        cols[1].as_any().downcast_ref::<Int64Array>().unwrap().iter().collect();
    ages[29_000] = Some(2);
    big = RecordBatch::try_new(
        big.schema(),
        vec![cols[0].clone(), Arc::new(Int64Array::from(ages)), cols[2].clone()],
    )
    .unwrap();
    assert!(matches!(store.insert("t", &[big]), Err(Error::CheckViolation { .. })));
    assert_eq!(store.snapshot().table("t").unwrap().count(), 3);
    // The column it reads cannot go; adding a check the rows break is refused.
    let e = store.alter_table("t", &AlterColumn::Drop("age".into())).unwrap_err();
    assert!(e.to_string().contains("t_age_check reads it"), "{e}");
    store.insert("t", &[rows(5, 1)]).unwrap();
    drop(store);
    // Kept across a reopen (the log replays rows without checking them again).
    let store = mem_store(&fs);
    let snap = store.snapshot();
    let t = snap.table("t").unwrap();
    assert_eq!(t.count(), 4);
    assert_eq!(t.checks().len(), 1);
    assert_eq!(t.checks()[0].sql, "\"age\" >= 18");
    store.set_check_evaluator(Arc::new(AdultsOnly));
    assert!(store.insert("t", &[minor(1)]).is_err());
    store.alter_table("t", &AlterColumn::DropCheck("t_age_check".into())).unwrap();
    store.insert("t", &[minor(1)]).unwrap();
    let again =
        NewCheck { name: Some("adults".into()), sql: "x".into(), columns: vec!["age".into()] };
    assert!(matches!(
        store.alter_table("t", &AlterColumn::AddCheck(again)),
        Err(Error::CheckViolation { .. })
    ));
}

/// DDL inside a transaction: seen by it at once, by others at commit (with its rows, in
/// one manifest install), undone by rollback or a savepoint; durable after reopening.
#[test]
fn ddl_in_a_transaction_commits_with_its_rows() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    let user = Schema::new(rows(0, 1).schema().fields().to_vec());
    store.create_table("keep", &user).unwrap();
    store.insert("keep", &[rows(0, 3)]).unwrap();

    let mut t = store.begin(Durability::ProcessSafe).unwrap();
    t.create_table_full(&store, "fresh", &user, false, &[], &[], &[]).unwrap();
    t.insert(&store, "fresh", &[rows(0, 5)]).unwrap();
    t.insert(&store, "keep", &[rows(3, 2)]).unwrap();
    t.alter_table_all(
        &store,
        "keep",
        &[AlterColumn::Add(Field::new("extra", DataType::Int64, true))],
    )
    .unwrap();
    t.insert(&store, "keep", &[rows(5, 1)]).unwrap();
    t.create_view(&store, "v", "SELECT 1", false).unwrap();
    assert_eq!(t.table("fresh").unwrap().count(), 5);
    assert_eq!(t.table("keep").unwrap().count(), 6);
    assert!(t.table("keep").unwrap().schema().index_of("extra").is_some());
    // Others see nothing of it yet.
    assert!(store.snapshot().table("fresh").is_err());
    assert!(store.snapshot().table("keep").unwrap().schema().index_of("extra").is_none());
    assert_eq!(store.snapshot().table("keep").unwrap().count(), 3);
    // A savepoint undoes a later drop.
    let mark = t.savepoint();
    t.drop_table(&store, "fresh").unwrap();
    assert!(t.table("fresh").is_err());
    t.rollback_to(&store, mark);
    assert_eq!(t.table("fresh").unwrap().count(), 5);
    store.commit(t).unwrap();
    let check = |s: &Store| {
        let snap = s.snapshot();
        assert_eq!(snap.table("fresh").unwrap().count(), 5);
        let keep = snap.table("keep").unwrap().clone();
        assert_eq!(keep.count(), 6);
        assert!(keep.schema().index_of("extra").is_some());
        assert!(snap.views().contains_key("v"));
    };
    check(&store);
    drop(store);
    let store = mem_store(&fs);
    check(&store);

    // Rolled back: nothing of it stays, the dropped table keeps its files.
    let mut t = store.begin(Durability::ProcessSafe).unwrap();
    t.drop_table(&store, "keep").unwrap();
    t.create_table_full(&store, "gone", &user, false, &[], &[], &[]).unwrap();
    t.insert(&store, "gone", &[rows(0, 2)]).unwrap();
    store.rollback(t);
    assert!(store.snapshot().table("gone").is_err());
    assert_eq!(concat(&all_rows(&store, "keep")).num_rows(), 6);
    // A committed drop removes the table's files.
    store.flush().unwrap();
    let mut t = store.begin(Durability::ProcessSafe).unwrap();
    t.drop_table(&store, "keep").unwrap();
    store.commit(t).unwrap();
    drop(store);
    let store = mem_store(&fs);
    assert!(store.snapshot().table("keep").is_err());
    assert_eq!(store.snapshot().table("fresh").unwrap().count(), 5);
}

/// A transaction that became the writer and rolled back to a savepoint set before that
/// keeps reading the head it became the writer at: writing on its older begin snapshot
/// would undo commits made in between.
#[test]
fn rollback_to_a_savepoint_keeps_the_newest_state() {
    let fs = Arc::new(MemFs::new());
    let store = mem_store(&fs);
    let user = Schema::new(rows(0, 1).schema().fields().to_vec());
    store.create_table("t", &user).unwrap();
    let mut t = store.begin(Durability::ProcessSafe).unwrap();
    let mark = t.savepoint();
    // Committed by another writer after this transaction began.
    store.insert("t", &[rows(0, 4)]).unwrap();
    t.insert(&store, "t", &[rows(4, 1)]).unwrap();
    t.rollback_to(&store, mark);
    t.insert(&store, "t", &[rows(5, 1)]).unwrap();
    store.commit(t).unwrap();
    assert_eq!(store.snapshot().table("t").unwrap().count(), 5);
}
