//! Full-text search through the public API and SQL.

use std::collections::BTreeSet;
use std::sync::Arc;

use basalt::arrow::array::{
    Array, FixedSizeListArray, Float32Array, RecordBatch, StringArray, UInt64Array,
};
use basalt::arrow::schema::{DataType, Field, Schema};
use basalt::{Database, Hybrid, Metric, Row, StorageError, Tokenizer, Value};

fn docs_schema() -> Schema {
    Schema::new(vec![
        Field::new("title", DataType::Utf8, true),
        Field::new("city", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
    ])
}

fn ids(hits: &[basalt::TextHit]) -> BTreeSet<u64> {
    hits.iter().map(|h| h.id).collect()
}

fn col_ids(batches: &[RecordBatch], col: usize) -> Vec<u64> {
    batches
        .iter()
        .flat_map(|b| {
            let a = b.column(col).as_any().downcast_ref::<UInt64Array>().unwrap();
            a.values().to_vec()
        })
        .collect()
}

fn sample(db: &Database) -> basalt::Table {
    let t = db.create_table("docs", &docs_schema()).unwrap();
    let e = t.create_fts_index(&["n"], Tokenizer::Default).unwrap_err().to_string();
    assert!(e.contains("text columns"), "{e}");
    let rows = [
        ("Running shoes for trail", "Paris", 1),
        ("Red running jacket", "Berlin", 2),
        ("Electronics and gadgets", "Paris", 3),
        ("Tea from Kyoto", "Kyoto", 4),
        ("Electric kettle for tea", "Rome", 5),
    ];
    for (title, city, n) in rows {
        t.insert_row(Row::new().set("title", title).set("city", city).set("n", n as i64)).unwrap();
    }
    t
}

#[test]
fn api_search_follows_writes_transactions_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let t = sample(&db);
    t.create_fts_index(&["title", "city"], Tokenizer::English).unwrap();
    assert_eq!(
        t.fts_index().unwrap(),
        Some((vec!["title".into(), "city".into()], Tokenizer::English))
    );
    // Stems: "running" and "run" meet.
    assert_eq!(ids(&t.search_text("run", None).unwrap()), BTreeSet::from([1, 2]));
    assert_eq!(ids(&t.search_text("paris", None).unwrap()), BTreeSet::from([1, 3]));
    assert_eq!(ids(&t.search_text_in("title", "paris", None).unwrap()), BTreeSet::new());
    assert_eq!(ids(&t.search_text("tea AND NOT kettle", None).unwrap()), BTreeSet::from([4]));
    assert_eq!(t.search_text("tea", Some(1)).unwrap().len(), 1);
    // Read-your-writes: insert, update and delete are seen by the next search.
    let id =
        t.insert_row(Row::new().set("title", "Trail running map").set("city", "Oslo")).unwrap();
    assert_eq!(ids(&t.search_text("oslo", None).unwrap()), BTreeSet::from([id]));
    assert!(t.update(1, Row::new().set("title", "Walking boots")).unwrap());
    assert_eq!(ids(&t.search_text("run", None).unwrap()), BTreeSet::from([2, id]));
    assert_eq!(ids(&t.search_text("boot", None).unwrap()), BTreeSet::from([1]));
    assert!(t.delete(2).unwrap());
    assert_eq!(ids(&t.search_text("run", None).unwrap()), BTreeSet::from([id]));
    // A transaction's deletes hide rows from its own searches; a rollback brings them back.
    let conn = db.connect();
    let ct = conn.table("docs").unwrap();
    conn.begin().unwrap();
    assert!(ct.delete(id).unwrap());
    assert_eq!(ids(&ct.search_text("run", None).unwrap()), BTreeSet::new());
    assert_eq!(ids(&t.search_text("run", None).unwrap()), BTreeSet::from([id]));
    conn.rollback().unwrap();
    assert_eq!(ids(&ct.search_text("run", None).unwrap()), BTreeSet::from([id]));
    // Malformed queries are clear errors.
    for bad in ["title:(", "\"open", "nosuch:word", ""] {
        let e = t.search_text(bad, None).unwrap_err();
        assert!(matches!(&e, basalt::Error::Storage(StorageError::Fts { .. })), "{bad:?}: {e}");
    }
    drop(ct);
    drop(conn);
    db.close().unwrap();

    let db = Database::open(dir.path()).unwrap();
    let t = db.table("docs").unwrap();
    assert_eq!(ids(&t.search_text("run", None).unwrap()), BTreeSet::from([id]));
    assert_eq!(ids(&t.search_text("boot", None).unwrap()), BTreeSet::from([1]));
    // A read-only open (next to the writer) searches what the writer committed.
    let ro = Database::open_read_only(dir.path()).unwrap();
    let rt = ro.table("docs").unwrap();
    assert_eq!(ids(&rt.search_text("paris", None).unwrap()), BTreeSet::from([1, 3]));
    assert!(rt.create_fts_index(&["city"], Tokenizer::Default).is_err());
    drop(rt);
    drop(ro);
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let t = db.table("docs").unwrap();
    // Dropping the index, then the table, leaves no index files behind.
    t.drop_fts_index().unwrap();
    assert!(t.search_text("paris", None).is_err());
    t.create_fts_index(&["city"], Tokenizer::Default).unwrap();
    assert_eq!(ids(&t.search_text("paris", None).unwrap()), BTreeSet::from([1, 3]));
    assert!(t.create_fts_index(&["title"], Tokenizer::Default).is_err(), "one index per table");
    db.drop_table("docs").unwrap();
    db.close().unwrap();
    let leftovers: Vec<_> = walk(dir.path()).into_iter().filter(|p| p.contains("fts-")).collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

fn walk(p: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(p).unwrap() {
        let e = e.unwrap().path();
        out.push(e.display().to_string());
        if e.is_dir() {
            out.extend(walk(&e));
        }
    }
    out
}

#[test]
fn sql_ddl_search_function_and_match_predicate() {
    let db = Database::open_in_memory().unwrap();
    let _t = sample(&db);
    let conn = db.connect();
    conn.sql("CREATE FTS INDEX ON docs (title, city) WITH (tokenizer = 'english')").unwrap();
    conn.sql("CREATE FTS INDEX IF NOT EXISTS ON docs (title)").unwrap();
    let e = conn.sql("CREATE FTS INDEX ON docs (title)").unwrap_err().to_string();
    assert!(e.contains("already has a full-text index"), "{e}");
    let e = conn.sql("CREATE FTS INDEX ON docs (title").unwrap_err().to_string();
    assert!(e.contains("expected"), "{e}");

    let r = conn.sql("SELECT _id, score FROM fts_search('docs', 'paris OR tea')").unwrap();
    let got = col_ids(&r, 0);
    assert_eq!(got.iter().copied().collect::<BTreeSet<_>>(), BTreeSet::from([1, 3, 4, 5]));
    let scores: Vec<f32> = r
        .iter()
        .flat_map(|b| {
            b.column(1).as_any().downcast_ref::<Float32Array>().unwrap().values().to_vec()
        })
        .collect();
    assert!(scores.windows(2).all(|w| w[0] >= w[1]), "best first: {scores:?}");
    let r = conn.sql("SELECT _id FROM fts_search('docs', 'paris OR tea', 2)").unwrap();
    assert_eq!(col_ids(&r, 0), got[..2]);
    // Joined back to the table.
    let r = conn
        .sql(
            "SELECT d.n FROM fts_search('docs', 'electr*') s JOIN docs d ON d._id = s._id \
             ORDER BY d.n",
        )
        .unwrap();
    let ns: Vec<i64> = r
        .iter()
        .flat_map(|b| {
            b.column(0)
                .as_any()
                .downcast_ref::<basalt::arrow::array::Int64Array>()
                .unwrap()
                .values()
                .to_vec()
        })
        .collect();
    assert_eq!(ns, [3, 5]);

    // fts_match as a filter, alone and mixed with other predicates, pushed or not.
    let cases = [
        ("fts_match(city, 'paris')", vec![1, 3]),
        ("fts_match(title, 'tea') AND n > 4", vec![5]),
        ("fts_match(title, 'tea') OR n = 1", vec![1, 4, 5]),
        ("NOT fts_match(city, 'paris') AND n < 5", vec![2, 4]),
        ("fts_match(title, 'paris')", vec![]),
        ("fts_match(title, 'run') AND title LIKE 'Red%'", vec![2]),
    ];
    for fast in [true, false] {
        conn.set_filter_pushdown(fast).unwrap();
        conn.set_fast_paths(fast).unwrap();
        for (filter, want) in &cases {
            let r = conn.sql(&format!("SELECT _id FROM docs WHERE {filter} ORDER BY _id")).unwrap();
            assert_eq!(col_ids(&r, 0), *want, "{filter} (fast paths {fast})");
        }
    }
    conn.set_filter_pushdown(true).unwrap();
    conn.set_fast_paths(true).unwrap();
    let plan = conn.sql("EXPLAIN SELECT _id FROM docs WHERE fts_match(city, 'paris')").unwrap();
    let text = crate::vector::lines(&plan).join("\n");
    assert!(text.contains("_id IN <2 ids>"), "{text}");

    // Writes are seen by the next statement; DML can filter by a match.
    conn.sql("INSERT INTO docs (title, city, n) VALUES ('Paris tea room', 'Lyon', 6)").unwrap();
    let r = conn.sql("SELECT _id FROM docs WHERE fts_match(title, 'paris') ORDER BY _id").unwrap();
    assert_eq!(col_ids(&r, 0), [6]);
    conn.sql("DELETE FROM docs WHERE fts_match(city, 'paris')").unwrap();
    let r = conn.sql("SELECT _id FROM fts_search('docs', 'paris') ORDER BY _id").unwrap();
    assert_eq!(col_ids(&r, 0), [6]);
    conn.sql("UPDATE docs SET city = 'Paris' WHERE fts_match(title, 'kyoto')").unwrap();
    let r = conn.sql("SELECT _id FROM fts_search('docs', 'city:paris') ORDER BY _id").unwrap();
    assert_eq!(col_ids(&r, 0), [4]);

    // Errors say what is wrong.
    for (sql, says) in [
        ("SELECT * FROM fts_search('docs', 'city:(')", "full-text query"),
        ("SELECT * FROM fts_search('nope', 'x')", "nope"),
        ("SELECT fts_match(title, 'x') FROM docs", "works as a filter"),
        ("SELECT * FROM docs WHERE fts_match(n, 'x')", "fts_match"),
        ("SELECT * FROM fts_search('docs')", "fts_search('table', 'query'"),
    ] {
        let e = conn.sql(sql).unwrap_err().to_string();
        assert!(e.contains(says), "{sql}: {e}");
    }
    conn.sql("DROP FTS INDEX ON docs").unwrap();
    conn.sql("DROP FTS INDEX IF EXISTS ON docs").unwrap();
    let e = conn.sql("SELECT * FROM fts_search('docs', 'x')").unwrap_err().to_string();
    assert!(e.contains("no full-text index"), "{e}");
    let e = conn.sql("BEGIN; CREATE FTS INDEX ON docs (title)").unwrap_err().to_string();
    assert!(e.contains("transaction"), "{e}");
}

#[test]
fn ngram_tokenizer_finds_words_without_spaces() {
    let db = Database::open_in_memory().unwrap();
    let t =
        db.create_table("j", &Schema::new(vec![Field::new("s", DataType::Utf8, true)])).unwrap();
    for s in ["東京都の天気", "京都の寺", "大阪"] {
        t.insert_row(Row::new().set("s", s)).unwrap();
    }
    t.create_fts_index(&["s"], Tokenizer::Ngram).unwrap();
    assert_eq!(ids(&t.search_text("京都", None).unwrap()), BTreeSet::from([1, 2]));
    assert_eq!(ids(&t.search_text("\"東京都\"", None).unwrap()), BTreeSet::from([1]));
    assert_eq!(ids(&t.search_text("大阪", None).unwrap()), BTreeSet::from([3]));
}

#[test]
fn hybrid_search_fuses_text_and_vector_ranks() {
    let db = Database::open_in_memory().unwrap();
    let schema = Schema::new(vec![
        Field::new("body", DataType::Utf8, true),
        Field::new("v", basalt::vector_type(2), true),
    ]);
    let t = db.create_table("m", &schema).unwrap();
    let bodies = ["apple pie", "apple juice", "car engine", "banana bread", "apple"];
    let vecs: [[f32; 2]; 5] = [[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.95, 0.05], [0.1, 0.9]];
    let values = Float32Array::from_iter_values(vecs.iter().flatten().copied());
    let list = FixedSizeListArray::new(
        Arc::new(Field::new("item", DataType::Float32, true)),
        2,
        Arc::new(values),
        None,
    );
    let b = RecordBatch::try_new(
        Arc::new(schema),
        vec![Arc::new(StringArray::from_iter_values(bodies)), Arc::new(list)],
    )
    .unwrap();
    t.insert(&b).unwrap();
    t.create_fts_index(&["body"], Tokenizer::Default).unwrap();
    let hits =
        t.hybrid_search("apple", "v", &[1.0, 0.0], Metric::L2, 3, Hybrid::default()).unwrap();
    // Text ranks 5 ("apple", shortest) then 1, 2; vectors rank 1, 4, 2, 5, 3. Row 1 leads
    // both lists' tops; 2 and 5 are found by both channels, 4 by the vector one only.
    assert_eq!(hits[0].id, 1);
    assert_eq!(hits.iter().map(|h| h.id).collect::<BTreeSet<_>>(), BTreeSet::from([1, 2, 5]));
    assert!(hits[0].text.is_some() && hits[0].vector.is_some());
    let all =
        t.hybrid_search("apple", "v", &[1.0, 0.0], Metric::L2, 10, Hybrid::default()).unwrap();
    let vector_only = all.iter().find(|h| h.id == 4).unwrap();
    assert!(
        vector_only.text.is_none()
            && vector_only.vector == Some((2, vector_only.vector.unwrap().1))
    );
    assert_eq!(all.len(), 5);
    // Four candidates per channel (k wins over `candidates`): texts 5, 1, 2 and vectors
    // (towards [0, 1]) 3, 5, 2, 4. Row 1, found by the text channel only, keeps its place
    // above row 4, found by the vector channel only at a worse rank.
    let few = Hybrid { candidates: 1, ..Hybrid::default() };
    let top = t.hybrid_search("apple", "v", &[0.0, 1.0], Metric::L2, 4, few).unwrap();
    assert_eq!(top.iter().map(|h| h.id).collect::<Vec<_>>(), [5, 2, 3, 1], "{top:?}");
    assert!(top[3].text == Some((2, top[3].text.unwrap().1)) && top[3].vector.is_none());
    assert!(all.windows(2).all(|w| w[0].score >= w[1].score));
    let v = t.get(1).unwrap().unwrap();
    assert_eq!(v.get("body"), Some(&Value::from("apple pie")));
}
