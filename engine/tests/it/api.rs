//! The table API: create / insert / get / scan / drop, rows and values, errors.

use std::sync::Arc;

use basalt::arrow::array::{Array, Int32Array, RecordBatch, StringArray, UInt64Array};
use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{Database, Error, Options, Row, StorageError, Value, vector_type};

fn people() -> Schema {
    Schema::new(vec![
        Field::new("name", DataType::Utf8, false),
        Field::new("age", DataType::Int32, true),
        Field::new("emb", vector_type(3), true),
    ])
}

#[test]
fn rows_in_rows_out() {
    let db = Database::open_in_memory().unwrap();
    let t = db.create_table("people", &people()).unwrap();
    let a = t
        .insert_row(Row::new().set("name", "Ada").set("age", 36).set("emb", vec![1.0f32, 2.0, 3.0]))
        .unwrap();
    let b = t.insert_row(Row::new().set("name", "Bob")).unwrap();
    assert_eq!((a, b), (1, 2));
    let r = t.get(a).unwrap().unwrap();
    assert_eq!(r.id(), Some(1));
    assert_eq!(r.get("name"), Some(&Value::from("Ada")));
    assert_eq!(r.get("age"), Some(&Value::Int(36)));
    assert_eq!(r.get("emb"), Some(&Value::Vector(vec![1.0, 2.0, 3.0])));
    let r = t.get(b).unwrap().unwrap();
    assert_eq!(r.get("age"), Some(&Value::Null));
    assert!(t.get(3).unwrap().is_none());
    assert_eq!(t.count().unwrap(), 2);
    assert_eq!(db.list_tables(), vec!["people".to_string()]);
    assert_eq!(t.schema().unwrap().fields().len(), 3);
}

#[test]
fn bad_rows_get_clear_errors_and_write_nothing() {
    let db = Database::open_in_memory().unwrap();
    let t = db.create_table("people", &people()).unwrap();
    let e = t.insert_row(Row::new().set("name", 5)).unwrap_err();
    assert!(matches!(e, Error::InvalidValue { ref column, .. } if column == "name"), "{e}");
    let e = t.insert_row(Row::new().set("name", "x").set("age", 1i64 << 40)).unwrap_err();
    assert!(e.to_string().contains("out of range"), "{e}");
    let e = t.insert_row(Row::new().set("name", "x").set("emb", vec![1.0f32])).unwrap_err();
    assert!(
        matches!(e, Error::Storage(StorageError::VectorDimension { expected: 3, found: 1, .. })),
        "{e}"
    );
    let e = t.insert_row(Row::new().set("nmae", "x")).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::ColumnNotFound { .. })), "{e}");
    assert!(e.to_string().contains("nmae"));
    let e = t.insert_row(Row::new().set("age", 3)).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::NullViolation { .. })), "{e}");
    let e = t.insert_row(Row::new().set("_id", 9u64).set("name", "x")).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::InvalidInput { .. })), "{e}");
    // A batch where one of several rows is bad: nothing of it lands.
    let rows = vec![Row::new().set("name", "ok"), Row::new().set("name", Value::Null)];
    assert!(t.insert_rows(&rows).is_err());
    assert_eq!(t.count().unwrap(), 0);
    assert!(matches!(db.table("nope"), Err(Error::Storage(StorageError::TableNotFound { .. }))));
    assert!(matches!(
        db.create_table("people", &people()),
        Err(Error::Storage(StorageError::TableExists { .. }))
    ));
    assert!(matches!(
        db.create_table("", &people()),
        Err(Error::Storage(StorageError::InvalidName { .. }))
    ));
    assert!(t.scan_columns(&["name", "zzz"]).is_err());
    // The next id was not consumed by the failures.
    assert_eq!(t.insert_row(Row::new().set("name", "first")).unwrap(), 1);
}

#[test]
fn scans_projections_and_get_many() {
    let db = Database::open_in_memory_with(Options { bulk_insert_rows: 100, ..Options::default() })
        .unwrap();
    let t = db.create_table("people", &people()).unwrap();
    let s = Arc::new(Schema::new(vec![
        Field::new("age", DataType::Int32, true),
        Field::new("name", DataType::Utf8, false),
    ]));
    let batch = |start: i32, n: i32| {
        RecordBatch::try_new(
            s.clone(),
            vec![
                Arc::new(Int32Array::from_iter_values(start..start + n)),
                Arc::new(StringArray::from_iter_values(
                    (start..start + n).map(|i| format!("p{i}")),
                )),
            ],
        )
        .unwrap()
    };
    t.insert(&batch(0, 150)).unwrap(); // segment
    t.insert(&batch(150, 20)).unwrap(); // memtable
    let scan = t.scan_columns(&["name", "_id"]).unwrap();
    assert_eq!(scan.schema().field(1).name(), "_id");
    let all = scan.collect_batch().unwrap();
    assert_eq!(all.num_rows(), 170);
    let ids = all.column(1).as_any().downcast_ref::<UInt64Array>().unwrap();
    assert_eq!(ids.values().to_vec(), (1..=170).collect::<Vec<u64>>());
    let names = all.column(0).as_any().downcast_ref::<StringArray>().unwrap();
    assert_eq!(names.value(160), "p160");
    let m = t.get_many_columns(&[170, 1, 999, 42], &["_id", "age"]).unwrap();
    assert_eq!(m.num_rows(), 3);
    let ages = m.column(1).as_any().downcast_ref::<Int32Array>().unwrap();
    assert_eq!(ages.values().to_vec(), vec![169, 0, 41]);
    let full = t.scan().unwrap().collect_batch().unwrap();
    assert_eq!(full.schema().field(0).name(), "_id");
    assert_eq!(full.column(3).null_count(), 170);
}

#[test]
fn drop_and_recreate() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let t = db.create_table("t", &people()).unwrap();
    t.insert_row(Row::new().set("name", "x")).unwrap();
    db.drop_table("t").unwrap();
    assert!(t.count().is_err());
    assert!(db.list_tables().is_empty());
    let t = db.create_table("t", &people()).unwrap();
    assert_eq!(t.count().unwrap(), 0);
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    assert_eq!(db.table("t").unwrap().count().unwrap(), 0);
}

#[test]
fn close_flushes_and_other_clones_see_closed() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let other = db.clone();
    let t = db.create_table("t", &people()).unwrap();
    t.insert_row(Row::new().set("name", "kept")).unwrap();
    db.close().unwrap();
    let e = other.create_table("u", &people()).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::Closed)), "{e}");
    drop((other, t));
    let db = Database::open(dir.path()).unwrap();
    let r = db.table("t").unwrap().get(1).unwrap().unwrap();
    assert_eq!(r.get("name"), Some(&Value::from("kept")));
}

#[test]
fn drop_of_the_last_handle_flushes() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::open(dir.path()).unwrap();
        db.create_table("t", &people()).unwrap().insert_row(Row::new().set("name", "x")).unwrap();
    }
    let db = Database::open_read_only(dir.path()).unwrap();
    assert_eq!(db.table("t").unwrap().count().unwrap(), 1);
    let e = db.table("t").unwrap().insert_row(Row::new().set("name", "y")).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::ReadOnly { .. })), "{e}");
}

#[test]
fn delete_and_update_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let t = db.create_table("people", &people()).unwrap();
    for n in ["a", "b", "c"] {
        t.insert_row(Row::new().set("name", n).set("age", 30)).unwrap();
    }
    assert!(t.delete(2).unwrap());
    assert!(!t.delete(2).unwrap());
    assert!(t.update(3, Row::new().set("age", 31)).unwrap());
    assert!(!t.update(99, Row::new().set("age", 1)).unwrap());
    let e = t.update(1, Row::new().set("age", "old")).unwrap_err();
    assert!(matches!(e, Error::InvalidValue { .. }), "{e}");
    assert_eq!(t.count().unwrap(), 2);
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let t = db.table("people").unwrap();
    assert!(t.get(2).unwrap().is_none());
    let r = t.get(3).unwrap().unwrap();
    assert_eq!(r.get("name"), Some(&Value::from("c")));
    assert_eq!(r.get("age"), Some(&Value::Int(31)));
    assert_eq!(t.delete_many(&[1, 3, 5]).unwrap(), 2);
    assert_eq!(t.count().unwrap(), 0);
    db.flush().unwrap();
    let r = t.compact().unwrap();
    assert_eq!(t.count().unwrap(), 0);
    assert!(r.rows_dropped <= 3);
}

#[test]
fn predicates_select_update_and_delete() {
    use basalt::{CmpOp, Predicate};
    let db = Database::open_in_memory().unwrap();
    let t = db.create_table("people", &people()).unwrap();
    for (n, a) in [("ann", 20), ("bob", 30), ("cyd", 40), ("dee", 50)] {
        t.insert_row(Row::new().set("name", n).set("age", a)).unwrap();
    }
    t.insert_row(Row::new().set("name", "eve")).unwrap(); // age NULL
    let names = |p: &Predicate| -> Vec<String> {
        let b = t.scan_where(&["name"], p).unwrap().collect_batch().unwrap();
        let a = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        a.iter().map(|s| s.unwrap().to_string()).collect()
    };
    assert_eq!(names(&Predicate::cmp("age", CmpOp::Gt, 25)), vec!["bob", "cyd", "dee"]);
    // NOT (age > 25) does not select the NULL age: three-valued logic.
    assert_eq!(names(&Predicate::Not(Box::new(Predicate::cmp("age", CmpOp::Gt, 25)))), vec!["ann"]);
    assert_eq!(names(&Predicate::IsNull { column: "age".into(), negated: false }), vec!["eve"]);
    assert_eq!(
        t.update_where(&Predicate::between("age", 30, 40), Row::new().set("age", 99)).unwrap(),
        2
    );
    assert_eq!(names(&Predicate::eq("age", 99)), vec!["bob", "cyd"]);
    assert_eq!(
        t.delete_where(&Predicate::LikePrefix {
            column: "name".into(),
            prefix: "d".into(),
            negated: false
        })
        .unwrap(),
        1
    );
    assert_eq!(t.count().unwrap(), 4);
}

#[test]
fn connections_carry_transactions() {
    let dir = tempfile::tempdir().unwrap();
    let opts =
        Options { lock_timeout: std::time::Duration::from_millis(100), ..Options::default() };
    let db = Database::open_with(dir.path(), opts).unwrap();
    db.create_table("a", &people()).unwrap();
    db.create_table("b", &people()).unwrap();
    let conn = db.connect();
    let (ta, tb) = (conn.table("a").unwrap(), conn.table("b").unwrap());
    conn.begin().unwrap();
    assert!(conn.begin().is_err());
    ta.insert_row(Row::new().set("name", "x")).unwrap();
    tb.insert_row(Row::new().set("name", "y")).unwrap();
    // A failing statement is undone alone; the transaction goes on.
    assert!(ta.insert_rows(&[Row::new().set("name", "ok"), Row::new().set("age", 1)]).is_err());
    assert_eq!(ta.count().unwrap(), 1); // read-your-own-writes
    assert_eq!(db.table("a").unwrap().count().unwrap(), 0); // invisible to others
    // Another connection's write waits for the writer, then times out.
    let e = db.table("a").unwrap().insert_row(Row::new().set("name", "z")).unwrap_err();
    assert!(matches!(e, Error::Storage(StorageError::LockTimeout { .. })), "{e}");
    conn.commit().unwrap();
    assert_eq!(db.table("a").unwrap().count().unwrap(), 1);
    assert_eq!(db.table("b").unwrap().count().unwrap(), 1);
    assert!(conn.commit().is_err());

    conn.begin().unwrap();
    ta.delete(1).unwrap();
    assert_eq!(ta.count().unwrap(), 0);
    conn.rollback().unwrap();
    assert_eq!(ta.count().unwrap(), 1);

    // Dropping a connection with an open transaction rolls it back and frees the writer.
    let c2 = db.connect();
    c2.begin().unwrap();
    c2.table("b").unwrap().insert_row(Row::new().set("name", "gone")).unwrap();
    drop(c2);
    db.table("b").unwrap().insert_row(Row::new().set("name", "kept")).unwrap();
    assert_eq!(db.table("b").unwrap().count().unwrap(), 2);
    drop((ta, tb, conn));
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    assert_eq!(db.table("a").unwrap().count().unwrap(), 1);
    assert_eq!(db.table("b").unwrap().count().unwrap(), 2);
}

#[test]
fn savepoints_through_the_api_and_sql_are_one_stack() {
    let db = Database::open_in_memory().unwrap();
    db.create_table("a", &people()).unwrap();
    let conn = db.connect();
    let t = conn.table("a").unwrap();
    conn.begin().unwrap();
    t.insert_row(Row::new().set("name", "kept")).unwrap();
    conn.savepoint("s1").unwrap();
    t.insert_row(Row::new().set("name", "undone")).unwrap();
    // Set through SQL, rolled back to through the API: one stack per connection.
    conn.sql("SAVEPOINT s2").unwrap();
    t.insert_row(Row::new().set("name", "undone too")).unwrap();
    conn.rollback_to_savepoint("s1").unwrap();
    assert_eq!(t.count().unwrap(), 1);
    assert!(conn.release_savepoint("s2").is_err(), "s2 went with the rollback to s1");
    conn.release_savepoint("s1").unwrap();
    assert!(conn.in_transaction(), "s1 did not start the transaction");
    conn.commit().unwrap();
    assert_eq!(db.table("a").unwrap().count().unwrap(), 1);
    // A savepoint without a transaction starts one; releasing it commits.
    conn.savepoint("auto").unwrap();
    t.insert_row(Row::new().set("name", "second")).unwrap();
    assert_eq!(db.table("a").unwrap().count().unwrap(), 1, "not committed yet");
    conn.release_savepoint("auto").unwrap();
    assert!(!conn.in_transaction());
    assert_eq!(db.table("a").unwrap().count().unwrap(), 2);
    assert!(conn.rollback_to_savepoint("auto").is_err());
}

#[test]
fn schema_evolution() {
    let db = Database::open_in_memory().unwrap();
    let t = db.create_table("people", &people()).unwrap();
    t.insert_row(Row::new().set("name", "ann").set("age", 3)).unwrap();
    t.add_column(Field::new("email", DataType::Utf8, true)).unwrap();
    t.rename_column("age", "years").unwrap();
    t.drop_column("emb").unwrap();
    t.insert_row(Row::new().set("name", "bob").set("email", "b@x")).unwrap();
    let r = t.get(1).unwrap().unwrap();
    assert_eq!(r.get("years"), Some(&Value::Int(3)));
    assert_eq!(r.get("email"), Some(&Value::Null));
    assert!(r.get("emb").is_none());
    assert_eq!(t.get(2).unwrap().unwrap().get("email"), Some(&Value::from("b@x")));
    let names: Vec<String> =
        t.schema().unwrap().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(names, vec!["name", "years", "email"]);
}

#[test]
fn change_feed_through_the_public_api() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let t = db.create_table("people", &people()).unwrap();
    db.create_feed("sync").unwrap();
    t.insert_row(Row::new().set("name", "a")).unwrap();
    t.delete(1).unwrap();
    let changes = db.read_feed("sync", 10).unwrap();
    assert_eq!(changes.len(), 2);
    assert!(matches!(changes[1].1.ops[0], basalt::ChangeOp::Delete { .. }));
    db.ack_feed("sync", changes[1].0).unwrap();
    assert!(db.read_feed("sync", 10).unwrap().is_empty());
}

#[test]
fn checkpoint_and_restore() {
    let db = Database::open_in_memory().unwrap();
    let t = db.create_table("people", &people()).unwrap();
    t.insert_row(Row::new().set("name", "a")).unwrap();
    db.checkpoint("before").unwrap();
    t.insert_row(Row::new().set("name", "b")).unwrap();
    t.delete(1).unwrap();
    db.restore("before").unwrap();
    assert_eq!(t.count().unwrap(), 1);
    assert_eq!(t.get(1).unwrap().unwrap().get("name"), Some(&Value::from("a")));
    assert_eq!(db.list_checkpoints().unwrap(), vec!["before".to_string()]);
    db.drop_checkpoint("before").unwrap();
}

/// Primary and unique keys through the table API: typed errors, nothing written, keys
/// listed, indexes created and dropped, concurrent writers of one key.
#[test]
fn keys_refuse_duplicates_through_the_api() {
    use basalt::{IndexKind, NewIndex};
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let key = |kind, cols: &[&str]| NewIndex {
        name: None,
        kind,
        columns: cols.iter().map(|c| c.to_string()).collect(),
    };
    let t = db
        .create_table_with_keys(
            "people",
            &people(),
            &[key(IndexKind::PrimaryKey, &["name"]), key(IndexKind::Unique, &["age"])],
        )
        .unwrap();
    t.insert_row(Row::new().set("name", "Ada").set("age", 36)).unwrap();
    let e = t.insert_row(Row::new().set("name", "Ada").set("age", 37)).unwrap_err();
    assert!(e.is_constraint_violation(), "{e}");
    assert!(
        matches!(e, Error::Storage(StorageError::UniqueViolation { ref constraint, ref value, .. })
            if constraint == "people_pkey" && value == "Ada"),
        "{e}"
    );
    let e = t.insert_row(Row::new().set("name", "Bob").set("age", 36)).unwrap_err();
    assert!(e.to_string().contains("people_age_key (age) = (36)"), "{e}");
    assert_eq!(t.count().unwrap(), 1);
    t.create_index(&key(IndexKind::Index, &["age", "name"])).unwrap();
    let names: Vec<(String, IndexKind, Vec<String>)> =
        t.indexes().unwrap().into_iter().map(|i| (i.name, i.kind, i.columns)).collect();
    assert_eq!(
        names,
        vec![
            ("people_pkey".into(), IndexKind::PrimaryKey, vec!["name".into()]),
            ("people_age_key".into(), IndexKind::Unique, vec!["age".into()]),
            ("people_age_name_idx".into(), IndexKind::Index, vec!["age".into(), "name".into()]),
        ]
    );
    db.drop_index("people_age_key").unwrap();
    t.insert_row(Row::new().set("name", "Bob").set("age", 36)).unwrap();
    // Two connections insert one key: the second (waiting for the first's transaction to
    // end, or starting after it) is refused either way.
    let (c1, c2) = (db.connect(), db.connect());
    c1.sql("BEGIN").unwrap();
    c1.sql("INSERT INTO people (name) VALUES ('Cy')").unwrap();
    let other = std::thread::spawn(move || c2.sql("INSERT INTO people (name) VALUES ('Cy')"));
    c1.sql("COMMIT").unwrap();
    let e = other.join().unwrap().unwrap_err();
    assert!(e.is_constraint_violation(), "{e}");
    drop((t, c1));
    drop(db);
    let db = Database::open(dir.path()).unwrap();
    let t = db.table("people").unwrap();
    assert_eq!(t.count().unwrap(), 3);
    assert_eq!(t.indexes().unwrap().len(), 2);
    assert!(t.insert_row(Row::new().set("name", "Cy")).unwrap_err().is_constraint_violation());
}

/// CHECK constraints hold for the table API (inserts, updates, bulk batches) and for
/// prepared statements, across connections and a reopen.
#[test]
fn check_constraints_hold_for_every_writer() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    db.sql("CREATE TABLE acct (owner TEXT NOT NULL, balance BIGINT CHECK (balance >= 0))").unwrap();
    let t = db.table("acct").unwrap();
    assert_eq!(
        t.check_constraints().unwrap(),
        vec![("acct_balance_check".to_string(), "\"balance\" >= 0".to_string())]
    );
    let id = t.insert_row(Row::new().set("owner", "ann").set("balance", 10i64)).unwrap();
    let e = t.insert_row(Row::new().set("owner", "bob").set("balance", -1i64)).unwrap_err();
    assert!(e.is_constraint_violation(), "{e}");
    assert!(
        matches!(e.as_storage(), Some(StorageError::CheckViolation { constraint, .. }) if constraint == "acct_balance_check"),
        "{e}"
    );
    assert!(t.update(id, Row::new().set("balance", -5i64)).unwrap_err().is_constraint_violation());
    // A bulk batch with one bad row among many writes nothing.
    let n = 50_000;
    let owners: Vec<String> = (0..n).map(|i| format!("o{i}")).collect();
    let balances: Vec<i64> = (0..n).map(|i| if i == n - 7 { -3 } else { i as i64 }).collect();
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![
            Field::new("owner", DataType::Utf8, false),
            Field::new("balance", DataType::Int64, true),
        ])),
        vec![
            Arc::new(StringArray::from(owners)),
            Arc::new(basalt::arrow::array::Int64Array::from(balances)),
        ],
    )
    .unwrap();
    assert!(t.insert(&batch).unwrap_err().is_constraint_violation());
    assert_eq!(t.count().unwrap(), 1);
    // A prepared statement on another connection.
    let c = db.connect();
    let stmt = c.prepare("UPDATE acct SET balance = balance - $1 WHERE owner = 'ann'").unwrap();
    stmt.execute(&[Value::Int(4)]).unwrap();
    assert!(stmt.execute(&[Value::Int(7)]).unwrap_err().is_constraint_violation());
    drop((t, stmt, c));
    drop(db);
    let db = Database::open(dir.path()).unwrap();
    let t = db.table("acct").unwrap();
    assert_eq!(t.count().unwrap(), 1);
    let e = t.insert_row(Row::new().set("owner", "cy").set("balance", -9i64)).unwrap_err();
    assert!(e.is_constraint_violation(), "{e}");
    let b = db.sql("SELECT balance FROM acct").unwrap();
    let v = b[0].column(0).as_any().downcast_ref::<basalt::arrow::array::Int64Array>().unwrap();
    assert_eq!(v.value(0), 6);
}

/// Upserts through the table API and prepared statements.
#[test]
fn upserts_through_the_api_and_prepared_statements() {
    use basalt::{IndexKind, NewIndex, OnConflict};
    let db = Database::open_in_memory().unwrap();
    let pk = NewIndex { name: None, kind: IndexKind::PrimaryKey, columns: vec!["name".into()] };
    let t = db.create_table_with_keys("people", &people(), &[pk]).unwrap();
    let batch = |names: &[&str], ages: &[i32]| {
        let s = Arc::new(Schema::new(vec![
            Field::new("name", DataType::Utf8, false),
            Field::new("age", DataType::Int32, true),
        ]));
        RecordBatch::try_new(
            s,
            vec![
                Arc::new(StringArray::from(names.to_vec())),
                Arc::new(Int32Array::from(ages.to_vec())),
            ],
        )
        .unwrap()
    };
    t.insert(&batch(&["a", "b"], &[1, 2])).unwrap();
    let ignore = OnConflict::Ignore { columns: None };
    assert_eq!(t.insert_on_conflict(&batch(&["a", "c"], &[9, 3]), &ignore).unwrap(), 1);
    assert_eq!(t.insert_on_conflict(&batch(&["a"], &[7]), &OnConflict::Replace).unwrap(), 1);
    let ages = db.sql("SELECT name, age FROM people ORDER BY name").unwrap();
    let ages = ages[0].column(1).as_any().downcast_ref::<Int32Array>().unwrap().clone();
    assert_eq!(ages.values().to_vec(), vec![7, 2, 3]);
    let conn = db.connect();
    let up = conn
        .prepare(
            "INSERT INTO people (name, age) VALUES ($1, $2) \
             ON CONFLICT (name) DO NOTHING",
        )
        .unwrap();
    up.execute(&[Value::from("b"), Value::Int(50)]).unwrap();
    up.execute(&[Value::from("d"), Value::Int(4)]).unwrap();
    let replace =
        conn.prepare("INSERT OR REPLACE INTO people (name, age) VALUES ($1, $2)").unwrap();
    replace.execute(&[Value::from("c"), Value::Int(30)]).unwrap();
    let total = db.sql("SELECT CAST(sum(age) AS INT) AS s FROM people").unwrap();
    let total = total[0].column(0).as_any().downcast_ref::<Int32Array>().unwrap().value(0);
    assert_eq!(total, 7 + 2 + 30 + 4);
}

/// Column defaults apply to the table API's inserts as to SQL's.
#[test]
fn defaults_fill_columns_the_api_leaves_out() {
    let db = Database::open_in_memory().unwrap();
    db.sql("CREATE TABLE d (name TEXT NOT NULL, age INT DEFAULT 40 + 2, tag TEXT DEFAULT 'new')")
        .unwrap();
    let t = db.table("d").unwrap();
    assert_eq!(
        t.column_defaults().unwrap(),
        vec![("age".to_string(), "40 + 2".to_string()), ("tag".to_string(), "'new'".to_string()),]
    );
    let a = t.insert_row(Row::new().set("name", "Ada")).unwrap();
    let b =
        t.insert_row(Row::new().set("name", "Bob").set("age", 7).set("tag", Value::Null)).unwrap();
    let r = t.get(a).unwrap().unwrap();
    assert_eq!((r.get("age"), r.get("tag")), (Some(&Value::Int(42)), Some(&Value::from("new"))));
    let r = t.get(b).unwrap().unwrap();
    assert_eq!((r.get("age"), r.get("tag")), (Some(&Value::Int(7)), Some(&Value::Null)));
}

#[test]
fn registered_batches_are_connection_local_read_only_tables() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    conn.sql("CREATE TABLE orders (id BIGINT, city TEXT)").unwrap();
    conn.sql("INSERT INTO orders VALUES (1, 'Oslo'), (2, 'Rome'), (3, 'Oslo')").unwrap();
    let schema = Arc::new(Schema::new(vec![
        Field::new("city", DataType::Utf8, false),
        Field::new("pop", DataType::Int32, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(vec!["Oslo", "Rome"])),
            Arc::new(Int32Array::from(vec![7, 28])),
        ],
    )
    .unwrap();
    conn.register("cities", schema, vec![batch.clone(), batch]).unwrap();
    let b = conn.sql("SELECT sum(c.pop) FROM orders o JOIN cities c ON o.city = c.city").unwrap();
    let total = arrow_cast::display::array_value_to_string(b[0].column(0), 0).unwrap();
    assert_eq!(total, "84");
    // Other connections do not see it; writes to it are refused; the catalog does not list it.
    assert!(db.connect().sql("SELECT * FROM cities").is_err());
    assert!(conn.sql("INSERT INTO cities VALUES ('Paris', 2)").is_err());
    assert_eq!(db.list_tables(), vec!["orders".to_string()]);
    assert!(conn.unregister("cities").unwrap());
    assert!(!conn.unregister("cities").unwrap());
    assert!(conn.sql("SELECT * FROM cities").is_err());
}

/// `Table::upsert`: `INSERT … ON CONFLICT (key) DO UPDATE SET c = excluded.c` from the
/// API — new keys inserted, taken ones updated in the columns named, the rest of the row
/// kept; a batch that breaks another key or repeats a key writes nothing.
#[test]
fn upsert_inserts_new_keys_and_updates_taken_ones() {
    let db = Database::open_in_memory().unwrap();
    db.sql("CREATE TABLE users (id INT PRIMARY KEY, email TEXT UNIQUE, name TEXT, visits INT)")
        .unwrap();
    db.sql("INSERT INTO users VALUES (1, 'a@x', 'Ann', 1), (2, 'b@x', 'Bob', 1)").unwrap();
    let t = db.table("users").unwrap();
    let batch = |ids: &[i32], emails: &[&str], names: &[&str], visits: &[i32]| {
        RecordBatch::try_new(
            Arc::new(Schema::new(vec![
                Field::new("id", DataType::Int32, false),
                Field::new("email", DataType::Utf8, true),
                Field::new("name", DataType::Utf8, true),
                Field::new("visits", DataType::Int32, true),
            ])),
            vec![
                Arc::new(Int32Array::from(ids.to_vec())),
                Arc::new(StringArray::from(emails.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
                Arc::new(Int32Array::from(visits.to_vec())),
            ],
        )
        .unwrap()
    };
    let all = |db: &Database| -> Vec<String> {
        let b = db.sql("SELECT id, email, name, visits FROM users ORDER BY id").unwrap();
        let mut out = Vec::new();
        for b in &b {
            for r in 0..b.num_rows() {
                let v: Vec<String> = (0..4)
                    .map(|c| arrow_cast::display::array_value_to_string(b.column(c), r).unwrap())
                    .collect();
                out.push(v.join("|"));
            }
        }
        out
    };
    let r = t
        .upsert(
            &batch(&[2, 3], &["b@x", "c@x"], &["Bobby", "Cy"], &[5, 1]),
            &["id"],
            &["name", "visits"],
        )
        .unwrap();
    assert_eq!((r.inserted, r.updated), (1, 1));
    assert_eq!(all(&db), ["1|a@x|Ann|1", "2|b@x|Bobby|5", "3|c@x|Cy|1"]);
    // Only the columns named change; no update columns: DO NOTHING.
    let r = t.upsert(&batch(&[1], &["a@x"], &["Zed"], &[9]), &["id"], &["visits"]).unwrap();
    assert_eq!((r.inserted, r.updated), (0, 1));
    let r =
        t.upsert(&batch(&[1, 4], &["a@x", "d@x"], &["Q", "Dee"], &[0, 2]), &["id"], &[]).unwrap();
    assert_eq!((r.inserted, r.updated), (1, 0));
    assert_eq!(all(&db), ["1|a@x|Ann|9", "2|b@x|Bobby|5", "3|c@x|Cy|1", "4|d@x|Dee|2"]);
    // A new id with a taken email breaks the other key; a key twice in one batch is
    // refused: nothing of either batch is written.
    let e = t.upsert(&batch(&[5, 6], &["e@x", "a@x"], &["E", "F"], &[1, 1]), &["id"], &["name"]);
    assert!(e.unwrap_err().is_constraint_violation());
    let e = t.upsert(&batch(&[1, 1], &["a@x", "a@x"], &["A", "B"], &[1, 1]), &["id"], &["name"]);
    assert!(e.is_err());
    // The conflict target must be a key.
    assert!(t.upsert(&batch(&[7], &["g@x"], &["G"], &[1]), &["name"], &["visits"]).is_err());
    assert_eq!(all(&db), ["1|a@x|Ann|9", "2|b@x|Bobby|5", "3|c@x|Cy|1", "4|d@x|Dee|2"]);
    // By the unique email instead of the primary key.
    let r = t.upsert(&batch(&[99], &["c@x"], &["Cyrus"], &[3]), &["email"], &["name"]).unwrap();
    assert_eq!((r.inserted, r.updated), (0, 1));
    assert_eq!(all(&db)[2], "3|c@x|Cyrus|1");
}

/// DDL from the Rust API inside a connection's transaction: tables created, altered,
/// indexed and dropped through the connection are its own until commit and gone on
/// rollback, with the rows written to them.
#[test]
fn connection_ddl_joins_its_transaction() {
    let db = Database::open_in_memory().unwrap();
    let conn = db.connect();
    let schema = Schema::new(vec![Field::new("name", DataType::Utf8, true)]);
    conn.begin().unwrap();
    let t = conn.create_table("people", &schema).unwrap();
    t.insert_row(Row::new().set("name", "ann")).unwrap();
    t.add_column(Field::new("age", DataType::Int32, true)).unwrap();
    t.insert_row(Row::new().set("name", "bob").set("age", 7i32)).unwrap();
    t.create_index(&basalt::NewIndex {
        name: Some("people_age".into()),
        kind: basalt::IndexKind::Index,
        columns: vec!["age".into()],
    })
    .unwrap();
    assert_eq!(conn.table("people").unwrap().count().unwrap(), 2);
    assert!(db.table("people").is_err(), "others do not see it before commit");
    conn.rollback().unwrap();
    assert!(conn.table("people").is_err());
    conn.begin().unwrap();
    let t = conn.create_table("people", &schema).unwrap();
    t.insert_row(Row::new().set("name", "cy")).unwrap();
    t.rename_column("name", "full_name").unwrap();
    conn.commit().unwrap();
    let t = db.table("people").unwrap();
    assert_eq!(t.count().unwrap(), 1);
    assert!(t.schema().unwrap().field_with_name("full_name").is_ok());
    conn.begin().unwrap();
    conn.drop_table("people").unwrap();
    assert!(db.table("people").is_ok());
    conn.commit().unwrap();
    assert!(db.table("people").is_err());
}
