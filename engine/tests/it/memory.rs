//! The agent-memory store (`basalt::memory`) through the public API.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use basalt::Database;
use basalt::memory::{
    CachedEmbedder, Embedder, Filter, HashEmbedder, MemoryConfig, MemoryError, MemoryEventKind,
    MemoryStore, MemoryUpdate, NewMemory, Recall, RecallHit, RecallMode,
};
use serde_json::{Value as Json, json};

const DIM: usize = 64;

fn store(db: &Database) -> MemoryStore {
    MemoryStore::open(db, "mem", MemoryConfig::new("basalt-hash-v1", DIM))
        .unwrap()
        .with_embedder(Arc::new(HashEmbedder::new(DIM)))
        .unwrap()
}

fn memory_error(e: basalt::Error) -> MemoryError {
    match e {
        basalt::Error::Memory(m) => m,
        other => panic!("not a memory error: {other}"),
    }
}

fn ids(hits: &[RecallHit]) -> BTreeSet<u64> {
    hits.iter().map(|h| h.item.id).collect()
}

const MODES: [RecallMode; 3] = [
    RecallMode::Vector,
    RecallMode::Keyword,
    RecallMode::Hybrid { keyword_weight: 1.0, vector_weight: 1.0 },
];

#[test]
fn namespaces_are_isolated_in_every_read_path() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let a1 = m.remember("acme/agent1/u1", NewMemory::text("user likes green tea")).unwrap();
    let a2 = m.remember("acme/agent1/u2", NewMemory::text("user likes green tea too")).unwrap();
    let b = m.remember("acme/agent10", NewMemory::text("user likes green tea as well")).unwrap();
    let other = m.remember("globex", NewMemory::text("green tea everywhere")).unwrap();
    let k = m.put("acme/agent1/u1", "drink", NewMemory::text("green tea, no sugar")).unwrap();
    let list =
        |ns: &str| m.list(ns, None, 100, None).unwrap().iter().map(|i| i.id).collect::<Vec<_>>();
    assert_eq!(list("acme/agent1"), vec![a1, a2, k]); // not acme/agent10: whole segments
    assert_eq!(list("acme"), vec![a1, a2, b, k]);
    assert_eq!(list("acme/agent1/u1"), vec![a1, k]);
    assert_eq!(list(""), vec![a1, a2, b, other, k]);
    for mode in MODES {
        let mut r = Recall::new("acme/agent1", "green tea", 10);
        r.mode = mode;
        assert_eq!(ids(&m.recall(&r).unwrap()), BTreeSet::from([a1, a2, k]), "{mode:?}");
        r.namespace = "globex".into();
        assert_eq!(ids(&m.recall(&r).unwrap()), BTreeSet::from([other]), "{mode:?}");
    }
    assert!(m.get_key("acme/agent1/u2", "drink").unwrap().is_none());
    assert_eq!(m.get_key("acme/agent1/u1", "drink").unwrap().map(|i| i.id), Some(k));
    assert!(!m.forget_key("acme/agent1/u2", "drink").unwrap());
    let ns: Vec<(String, u64)> = m.list_namespaces().unwrap();
    let want = [("acme/agent1/u1", 2), ("acme/agent1/u2", 1), ("acme/agent10", 1), ("globex", 1)];
    assert_eq!(ns, want.map(|(n, c)| (n.to_string(), c)).to_vec());
    // Pages by cursor.
    let p1 = m.list("", None, 2, None).unwrap();
    let p2 = m.list("", None, 2, p1.last().map(|i| i.id)).unwrap();
    assert_eq!(p1.iter().chain(&p2).map(|i| i.id).collect::<Vec<_>>(), vec![a1, a2, b, other]);
}

#[test]
fn keyed_upserts_versions_conflicts_and_history() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let id;
    {
        let db = Database::open(&path).unwrap();
        let m = store(&db);
        id = m
            .put("u/1", "diet", NewMemory::text("vegetarian").metadata(json!({"src": "chat"})))
            .unwrap();
        assert_eq!(m.put("u/1", "diet", NewMemory::text("vegan")).unwrap(), id);
        let item = m.get(id).unwrap().unwrap();
        assert_eq!(
            (item.text.as_str(), item.version, item.key.as_deref()),
            ("vegan", 2, Some("diet"))
        );
        assert!(item.created_ms <= item.updated_ms);
        // Compare-and-set.
        let stale = m.update(
            id,
            MemoryUpdate { text: Some("pescatarian".into()), ..Default::default() },
            Some(1),
        );
        match memory_error(stale.unwrap_err()) {
            MemoryError::Conflict { expected: 1, actual: 2, .. } => {}
            other => panic!("{other}"),
        }
        assert_eq!(m.get(id).unwrap().unwrap().text, "vegan"); // nothing written
        let v = m
            .update(
                id,
                MemoryUpdate { metadata: Some(json!({"src": "form"})), ..Default::default() },
                Some(2),
            )
            .unwrap();
        assert_eq!(v, 3);
        let missing = m.update(999_999, MemoryUpdate::default(), None).unwrap_err();
        assert!(matches!(memory_error(missing), MemoryError::NotFound { .. }));
        db.close().unwrap();
    }
    let db = Database::open(&path).unwrap();
    let m = store(&db);
    let item = m.get(id).unwrap().unwrap();
    assert_eq!(
        (item.text.as_str(), item.version, &item.metadata),
        ("vegan", 3, &json!({"src": "form"}))
    );
    let h = m.history(id).unwrap();
    let ops: Vec<(u64, &str, Option<&str>, Option<&str>)> = h
        .iter()
        .map(|e| (e.version, e.op.as_str(), e.old_text.as_deref(), e.new_text.as_deref()))
        .collect();
    assert_eq!(
        ops,
        vec![
            (1, "create", None, Some("vegetarian")),
            (2, "update", Some("vegetarian"), Some("vegan")),
            (3, "update", Some("vegan"), Some("vegan")),
        ]
    );
    assert_eq!((&h[1].old_metadata, &h[1].new_metadata), (&json!({"src": "chat"}), &json!(null)));
    assert_eq!((&h[2].old_metadata, &h[2].new_metadata), (&json!(null), &json!({"src": "form"})));
    // Another model or dimension is refused.
    let e =
        MemoryStore::open(&db, "mem", MemoryConfig::new("basalt-hash-v1", DIM + 1)).unwrap_err();
    assert!(matches!(memory_error(e), MemoryError::ModelMismatch { .. }));
    let e = MemoryStore::open(&db, "mem", MemoryConfig::new("other", DIM)).unwrap_err();
    assert!(matches!(memory_error(e), MemoryError::ModelMismatch { .. }));
}

#[test]
fn filters_apply_before_top_k_and_keyword_only_hits_survive_fusion() {
    let db = Database::open_in_memory().unwrap();
    let m = MemoryStore::open(&db, "mem", MemoryConfig::new("test", 4)).unwrap();
    // 200 items near the query, 5 "gold" ones far from it.
    let mut gold = BTreeSet::new();
    for i in 0..205u32 {
        let (v, tier) = if i < 200 {
            (vec![1.0, 0.01 * i as f32, 0.0, 0.0], "free")
        } else {
            (vec![0.0, 0.0, 1.0, i as f32], "gold")
        };
        let id = m
            .remember(
                "t",
                NewMemory::text(&format!("note {i}"))
                    .vector(v)
                    .metadata(json!({"tier": tier, "n": i})),
            )
            .unwrap();
        if tier == "gold" {
            gold.insert(id);
        }
    }
    let mut r = Recall::new("t", "", 5);
    r.vector = Some(vec![1.0, 0.0, 0.0, 0.0]);
    r.mode = RecallMode::Vector;
    r.filter = Some(Filter::eq("tier", "gold"));
    let hits = m.recall(&r).unwrap();
    assert_eq!(ids(&hits), gold); // never under-filled
    r.filter =
        Some(Filter::And(vec![Filter::eq("tier", "free"), Filter::Gte("n".into(), json!(198))]));
    assert_eq!(m.recall(&r).unwrap().len(), 2);
    r.min_similarity = Some(0.9999);
    r.filter = None;
    assert!(m.recall(&r).unwrap().len() < 5);
    // A keyword-only item (no vector) survives hybrid fusion.
    let kw = m.remember("t", NewMemory::text("zebra crossing")).unwrap();
    let mut h = Recall::new("t", "zebra", 3);
    h.vector = Some(vec![1.0, 0.0, 0.0, 0.0]);
    let hits = m.recall(&h).unwrap();
    let hit = hits.iter().find(|x| x.item.id == kw).expect("the keyword hit is kept");
    assert!(hit.keyword.is_some() && hit.vector.is_none());
    // Bad filters are refused.
    r.filter = Some(Filter::Gt("".into(), json!(1)));
    assert!(matches!(memory_error(m.recall(&r).unwrap_err()), MemoryError::Invalid { .. }));
}

#[test]
fn forget_purges_items_and_their_index_entries() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let a = m.remember("x/a", NewMemory::text("alpha keyword one")).unwrap();
    let b = m
        .remember("x/b", NewMemory::text("alpha keyword two").metadata(json!({"drop": true})))
        .unwrap();
    let c = m.remember("x/b", NewMemory::text("alpha keyword three")).unwrap();
    let d = m.put("y", "k", NewMemory::text("alpha keyword four")).unwrap();
    let search = |ns: &str| {
        let mut r = Recall::new(ns, "alpha", 10);
        r.mode = RecallMode::Keyword;
        ids(&m.recall(&r).unwrap())
    };
    assert!(m.forget(a).unwrap());
    assert!(!m.forget(a).unwrap());
    assert_eq!(m.forget_namespace("x", Some(&Filter::eq("drop", true))).unwrap(), 1);
    assert_eq!(search(""), BTreeSet::from([c, d]));
    assert!(m.forget_key("y", "k").unwrap());
    assert_eq!(m.forget_namespace("x/b", None).unwrap(), 1);
    assert!(search("").is_empty());
    assert_eq!(db.table("mem").unwrap().search_text("alpha", None).unwrap().len(), 0);
    assert_eq!(m.history(b).unwrap().last().map(|e| e.op.clone()), Some("delete".to_string()));
}

#[test]
fn expiry_archive_and_bad_input() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    // A zero time to live expires at once (visible means `expires_ms > now`).
    let t = m.remember("n", NewMemory::text("short lived").ttl(Duration::ZERO)).unwrap();
    let keep =
        m.remember("n", NewMemory::text("long lived").ttl(Duration::from_secs(3600))).unwrap();
    assert!(m.get(t).unwrap().is_none());
    assert_eq!(
        m.list("n", None, 10, None).unwrap().iter().map(|i| i.id).collect::<Vec<_>>(),
        vec![keep]
    );
    m.update(keep, MemoryUpdate { archived: Some(true), ..Default::default() }, None).unwrap();
    assert!(m.list("n", None, 10, None).unwrap().is_empty());
    assert!(m.get(keep).unwrap().unwrap().archived); // still readable by id
    assert!(m.recall(&Recall::new("n", "lived", 5)).unwrap().is_empty());

    let count = || db.table("mem").unwrap().count().unwrap();
    let before = count();
    let bad = [
        m.remember("n", NewMemory::text("   ")),
        m.remember("n", NewMemory::text(&"x".repeat(70_000))),
        m.remember("n", NewMemory::text("a").metadata(json!([1, 2]))),
        m.remember("n", NewMemory::text("a").metadata(json!({"big": "y".repeat(20_000)}))),
        m.remember("n", NewMemory::text("a").vector(vec![1.0; DIM - 1])),
        m.remember("n", NewMemory::text("a").vector(vec![f32::NAN; DIM])),
        m.remember("", NewMemory::text("a")),
        m.remember("a//b", NewMemory::text("a")),
        m.put("n", "", NewMemory::text("a")),
    ];
    for r in bad {
        assert!(matches!(memory_error(r.unwrap_err()), MemoryError::Invalid { .. }));
    }
    // One bad component anywhere (first, middle, last) is refused; extreme finite values
    // (largest, smallest subnormal, negative zero) are not.
    for (at, bad) in [(0, f32::NAN), (DIM / 2, f32::INFINITY), (DIM - 1, f32::NEG_INFINITY)] {
        let mut v = vec![0.5; DIM];
        v[at] = bad;
        let e = m.remember("n", NewMemory::text("a").vector(v)).unwrap_err();
        assert!(matches!(memory_error(e), MemoryError::Invalid { .. }), "{bad} at {at}");
    }
    assert_eq!(count(), before); // nothing half-written
    let mut v = vec![f32::MAX; DIM];
    (v[1], v[2], v[DIM - 1]) = (f32::from_bits(1), -0.0, f32::MIN);
    let extreme = m.remember("n", NewMemory::text("extreme").vector(v)).unwrap();
    m.forget(extreme).unwrap();
    assert_eq!(m.recall(&Recall::new("n", "x", 0)).unwrap().len(), 0);
}

#[test]
fn concurrent_identical_upserts_leave_one_item() {
    let db = Database::open_in_memory().unwrap();
    let m = Arc::new(store(&db));
    let handles: Vec<_> = (0..8)
        .map(|i| {
            let m = m.clone();
            std::thread::spawn(move || {
                m.put("race", "same", NewMemory::text(&format!("value {i}"))).unwrap()
            })
        })
        .collect();
    let got: BTreeSet<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(got.len(), 1);
    let items = m.list("race", None, 10, None).unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].version, 8);
    assert_eq!(m.history(items[0].id).unwrap().len(), 8);
}

#[test]
fn the_offline_embedder_ranks_shared_words_first() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let tea = m.remember("u", NewMemory::text("The user drinks green tea every morning")).unwrap();
    m.remember("u", NewMemory::text("Quarterly revenue grew in the northern region")).unwrap();
    m.remember("u", NewMemory::text("The meeting moved to Thursday afternoon")).unwrap();
    let mut r = Recall::new("u", "what tea does the user drink", 1);
    r.mode = RecallMode::Vector;
    let hits = m.recall(&r).unwrap();
    assert_eq!(hits.first().map(|h| h.item.id), Some(tea));
    assert!(hits[0].vector.is_some_and(|(rank, sim)| rank == 1 && sim > 0.0));
    // A store without an embedder needs vectors for vector recall.
    let plain = MemoryStore::open(&db, "plain", MemoryConfig::new("m", 3)).unwrap();
    plain.remember("u", NewMemory::text("text only")).unwrap();
    let mut r = Recall::new("u", "text", 1);
    r.mode = RecallMode::Vector;
    assert!(matches!(memory_error(plain.recall(&r).unwrap_err()), MemoryError::Invalid { .. }));
}

#[test]
fn a_read_only_open_next_to_the_writer_recalls() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let m = store(&db);
    let id = m.remember("ro", NewMemory::text("remember the milk")).unwrap();
    db.flush().unwrap();
    let reader = Database::open_read_only(dir.path()).unwrap();
    let r = store(&reader);
    assert_eq!(r.get(id).unwrap().map(|i| i.text), Some("remember the milk".into()));
    let mut q = Recall::new("ro", "milk", 1);
    q.mode = RecallMode::Keyword;
    assert_eq!(r.recall(&q).unwrap().first().map(|h| h.item.id), Some(id));
    assert!(r.remember("ro", NewMemory::text("x")).is_err()); // writes stay with the writer
    // A store that does not exist cannot be created through a read-only open.
    assert!(MemoryStore::open(&reader, "other", MemoryConfig::new("m", 2)).is_err());
}

#[test]
fn batches_report_bad_items_in_place_and_write_the_rest() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let out = m
        .remember_many(
            "b",
            vec![
                NewMemory::text("first good one"),
                NewMemory::text(""),
                NewMemory::text("second good one").vector(vec![0.5; DIM]),
                NewMemory::text("bad vector").vector(vec![1.0; 3]),
                NewMemory::text("third good one").metadata(json!({"i": 3})),
            ],
        )
        .unwrap();
    assert_eq!(out.len(), 5);
    assert!(out[0].is_ok() && out[2].is_ok() && out[4].is_ok());
    assert!(matches!(
        memory_error(out.into_iter().nth(1).unwrap().unwrap_err()),
        MemoryError::Invalid { .. }
    ));
    let texts: Vec<String> =
        m.list("b", None, 10, None).unwrap().into_iter().map(|i| i.text).collect();
    assert_eq!(texts, vec!["first good one", "second good one", "third good one"]);
    // Every item embedded (the given vector kept).
    let items = m.list("b", None, 10, None).unwrap();
    assert!(items.iter().all(|i| i.vector.is_some()));
    assert_eq!(items[1].vector.as_deref(), Some(&[0.5; DIM][..]));
    // A batch of only bad items writes nothing and reports each.
    let out = m.remember_many("b", vec![NewMemory::text(" "), NewMemory::text("")]).unwrap();
    assert!(out.iter().all(Result::is_err));
    assert_eq!(m.list("b", None, 10, None).unwrap().len(), 3);
}

#[test]
fn exact_and_near_duplicates_turn_writes_into_updates() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let a = m
        .remember("d", NewMemory::text("The user likes  green tea").metadata(json!({"v": 1})))
        .unwrap();
    let b = m.remember("d", NewMemory::text("the USER likes green tea")).unwrap(); // normalised equal
    assert_eq!(a, b);
    let item = m.get(a).unwrap().unwrap();
    assert_eq!(
        (item.version, item.text.as_str(), &item.metadata),
        (2, "the USER likes green tea", &json!({"v": 1}))
    );
    // Another namespace is another item; so is an archived one's twin.
    assert_ne!(m.remember("e", NewMemory::text("the user likes green tea")).unwrap(), a);
    // Concurrent identical remembers leave one item.
    let m = Arc::new(m);
    let handles: Vec<_> = (0..12)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || m.remember("race", NewMemory::text("same fact")).unwrap())
        })
        .collect();
    let ids: BTreeSet<u64> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(ids.len(), 1);
    let id = ids.into_iter().next().unwrap();
    assert_eq!(m.get(id).unwrap().unwrap().version, 12);

    // Near duplicates, when configured, by cosine similarity of the vectors.
    let mut cfg = MemoryConfig::new("near", 2);
    cfg.dedupe_near = Some(0.99);
    let n = MemoryStore::open(&db, "near", cfg).unwrap();
    let x = n.remember("n", NewMemory::text("alpha").vector(vec![1.0, 0.0])).unwrap();
    let y = n
        .remember("n", NewMemory::text("alpha, slightly reworded").vector(vec![1.0, 0.01]))
        .unwrap();
    let z = n.remember("n", NewMemory::text("beta").vector(vec![0.0, 1.0])).unwrap();
    assert_eq!(x, y);
    assert_ne!(x, z);
    assert_eq!(n.get(x).unwrap().unwrap().text, "alpha, slightly reworded");
    // Off: every write is new.
    let mut cfg = MemoryConfig::new("plain", 2);
    cfg.dedupe_exact = false;
    let p = MemoryStore::open(&db, "plain", cfg).unwrap();
    assert_ne!(
        p.remember("p", NewMemory::text("same")).unwrap(),
        p.remember("p", NewMemory::text("same")).unwrap()
    );
}

#[test]
fn concurrent_remembers_are_each_written_once_in_their_namespace() {
    // Concurrent writers' items are written in groups (one transaction for the items
    // queued together); each must still be its own item, in its own namespace, with its
    // own history, and duplicates inside a group must update the earlier item.
    let dir = tempfile::tempdir().unwrap();
    let written: Vec<Vec<(u64, String)>> = {
        let db = Database::open(dir.path()).unwrap();
        let m = Arc::new(store(&db));
        let handles: Vec<_> = (0..8)
            .map(|w| {
                let m = m.clone();
                std::thread::spawn(move || {
                    (0..40)
                        .map(|i| {
                            let text = if i % 5 == 0 {
                                format!("writer {w} repeats this")
                            } else {
                                format!("writer {w} fact {i}")
                            };
                            let id = m.remember(&format!("w/{w}"), NewMemory::text(&text)).unwrap();
                            (id, text)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    };
    // Read back after a reopen: everything acknowledged was committed.
    let db = Database::open(dir.path()).unwrap();
    let m = store(&db);
    let mut all = BTreeSet::new();
    for (w, items) in written.iter().enumerate() {
        let repeated: BTreeSet<u64> = items.iter().step_by(5).map(|(id, _)| *id).collect();
        assert_eq!(repeated.len(), 1, "writer {w}: repeats are one item");
        for (id, text) in items {
            let item = m.get(*id).unwrap().unwrap();
            assert_eq!(
                (item.text.as_str(), item.namespace.as_str()),
                (text.as_str(), &*format!("w/{w}"))
            );
            all.insert(*id);
        }
        let listed: BTreeSet<u64> =
            m.list(&format!("w/{w}"), None, 100, None).unwrap().iter().map(|i| i.id).collect();
        assert_eq!(listed, items.iter().map(|(id, _)| *id).collect(), "writer {w}");
        assert_eq!(listed.len(), 33);
        let r = *repeated.iter().next().unwrap();
        assert_eq!(m.get(r).unwrap().unwrap().version, 8);
        let h = m.history(r).unwrap();
        assert_eq!(h.iter().map(|e| e.op.as_str()).collect::<Vec<_>>()[..2], ["create", "update"]);
        assert_eq!(h.len(), 8);
        assert_eq!(m.history(items[1].0).unwrap().len(), 1);
    }
    assert_eq!(all.len(), 8 * 33);
}

#[test]
fn a_group_that_cannot_commit_fails_every_write_in_it_and_writes_none() {
    // Another connection holds the writer token past the lock timeout: whichever caller
    // writes the group times out, and every queued write must get that error (none lost,
    // none reported as written).
    let opts =
        basalt::Options { lock_timeout: Duration::from_millis(200), ..basalt::Options::default() };
    let db = Database::open_in_memory_with(opts).unwrap();
    let m = Arc::new(store(&db));
    let blocker = db.connect();
    blocker.begin_immediate().unwrap();
    let handles: Vec<_> = (0..6)
        .map(|i| {
            let m = m.clone();
            std::thread::spawn(move || m.remember("blocked", NewMemory::text(&format!("fact {i}"))))
        })
        .collect();
    for h in handles {
        let e = h.join().unwrap().expect_err("the writer token is held");
        assert!(matches!(e.as_storage(), Some(basalt::StorageError::LockTimeout { .. })), "{e}");
    }
    blocker.rollback().unwrap();
    assert!(m.list("blocked", None, 10, None).unwrap().is_empty());
    let id = m.remember("blocked", NewMemory::text("after the blocker")).unwrap();
    assert_eq!(
        m.list("blocked", None, 10, None).unwrap().iter().map(|i| i.id).collect::<Vec<_>>(),
        vec![id]
    );
}

#[test]
fn a_commit_hook_may_remember_on_the_store_that_committed() {
    // The hook runs on the thread that wrote the group, which must not queue behind itself.
    let db = Database::open_in_memory().unwrap();
    let m = Arc::new(store(&db));
    let once = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (hm, once2) = (m.clone(), once.clone());
    db.set_commit_hook(Some(Arc::new(move |_| {
        if !once2.swap(true, std::sync::atomic::Ordering::SeqCst) {
            hm.remember("hook", NewMemory::text("written from a commit hook")).unwrap();
        }
    })));
    let first = m.remember("a", NewMemory::text("the first memory")).unwrap();
    db.set_commit_hook(None);
    assert!(once.load(std::sync::atomic::Ordering::SeqCst));
    let hooked = m.list("hook", None, 10, None).unwrap();
    assert_eq!(hooked.len(), 1);
    assert_ne!(hooked[0].id, first);
    assert_eq!(m.remember("a", NewMemory::text("a later one")).unwrap(), hooked[0].id + 1);
}

#[test]
fn a_batch_longer_than_the_cached_constant_columns_is_written_whole() {
    // New items' constant columns (key, version, archived, the history's op) are sliced
    // from columns built once for 256 rows; longer batches build their own.
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    for n in [1usize, 256, 300] {
        let ns = format!("batch/{n}");
        // Every other item has metadata; the `create` rows share the items' text,
        // metadata and time columns.
        let meta = |i: usize| i.is_multiple_of(2).then(|| json!({"n": n, "i": i}));
        let batch: Vec<NewMemory> = (0..n)
            .map(|i| {
                let it = NewMemory::text(&format!("batch {n} item {i}"));
                match meta(i) {
                    Some(md) => it.metadata(md),
                    None => it,
                }
            })
            .collect();
        let ids: Vec<u64> =
            m.remember_many(&ns, batch).unwrap().into_iter().map(Result::unwrap).collect();
        for (i, id) in ids.iter().enumerate() {
            let item = m.get(*id).unwrap().unwrap();
            assert_eq!(
                (item.key.as_deref(), item.version, item.archived, item.text.as_str()),
                (None, 1, false, &*format!("batch {n} item {i}")),
            );
            if i == 0 || i + 1 == n {
                let h = m.history(*id).unwrap();
                assert_eq!(h.len(), 1);
                let e = &h[0];
                assert_eq!((e.op.as_str(), e.version, e.old_text.as_deref()), ("create", 1, None));
                assert_eq!(e.new_text.as_deref(), Some(item.text.as_str()));
                assert_eq!(e.new_metadata, meta(i).unwrap_or(Json::Null));
                assert_eq!((&e.old_metadata, e.at_ms), (&Json::Null, item.created_ms));
            }
        }
        // A single `remember` too (the one-row path: constants and vector not copied).
        let v: Vec<f32> = (0..DIM).map(|k| k as f32 / DIM as f32).collect();
        let id = m.remember(&ns, NewMemory::text("alone").vector(v.clone())).unwrap();
        let item = m.get(id).unwrap().unwrap();
        assert_eq!((item.key.as_deref(), item.version, item.archived), (None, 1, false));
        assert_eq!(item.vector.as_deref(), Some(&v[..]));
        let h = m.history(id).unwrap();
        assert_eq!((h[0].op.as_str(), h[0].new_text.as_deref()), ("create", Some("alone")));
        assert_eq!(h[0].at_ms, item.created_ms);
        assert_eq!(m.list(&ns, None, 1000, None).unwrap().len(), n + 1);
    }
}

#[test]
fn int8_recall_returns_exact_distances_of_the_same_items_here() {
    let db = Database::open_in_memory().unwrap();
    let m = MemoryStore::open(&db, "q", MemoryConfig::new("m", 16)).unwrap();
    let mut x: u64 = 1;
    let mut next = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 40) as f32 / (1u64 << 24) as f32 - 0.5
    };
    let batch: Vec<NewMemory> = (0..3000)
        .map(|i| NewMemory::text(&format!("item {i}")).vector((0..16).map(|_| next()).collect()))
        .collect();
    assert!(m.remember_many("q/a", batch).unwrap().iter().all(Result::is_ok));
    db.flush().unwrap(); // segments: the quantised copy is built per segment
    let mut r = Recall::new("q", "", 10);
    r.mode = RecallMode::Vector;
    r.vector = Some((0..16).map(|_| next()).collect());
    let exact = m.recall(&r).unwrap();
    r.precision = basalt::Precision::Int8 { oversample: 8 };
    let quant = m.recall(&r).unwrap();
    let key =
        |h: &[RecallHit]| h.iter().map(|x| (x.item.id, x.score.to_bits())).collect::<Vec<_>>();
    assert_eq!(key(&quant), key(&exact));
}

#[test]
fn duplicates_inside_one_batch_become_one_item() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let out: Vec<u64> = m
        .remember_many(
            "b",
            vec![
                NewMemory::text("alpha"),
                NewMemory::text("beta"),
                NewMemory::text("ALPHA "),
                NewMemory::text("gamma"),
            ],
        )
        .unwrap()
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(out[0], out[2]);
    assert_eq!(out.iter().collect::<BTreeSet<_>>().len(), 3);
    assert_eq!(
        m.get(out[0]).unwrap().map(|i| (i.version, i.text)),
        Some((2, "ALPHA ".to_string()))
    );
    assert_eq!(m.history(out[0]).unwrap().len(), 2);
    assert_eq!(m.history(out[3]).unwrap().len(), 1);
}

#[test]
fn sweeping_reclaims_expired_items_with_their_index_entries() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let gone = m.remember("n", NewMemory::text("ephemeral lychee").ttl(Duration::ZERO)).unwrap();
    let kept = m.remember("n", NewMemory::text("durable lychee")).unwrap();
    let rows = || db.table("mem").unwrap().count().unwrap();
    assert_eq!(rows(), 2); // hidden, not yet removed
    assert_eq!(m.sweep_expired().unwrap(), 1);
    assert_eq!(rows(), 1);
    assert_eq!(m.sweep_expired().unwrap(), 0);
    let h = m.history(gone).unwrap();
    assert_eq!(h.last().map(|e| e.op.as_str()), Some("expire"));
    assert_eq!(h.last().unwrap().old_text.as_deref(), Some("ephemeral lychee"));
    let hits = db.table("mem").unwrap().search_text("lychee", None).unwrap();
    assert_eq!(hits.iter().map(|h| h.id).collect::<Vec<_>>(), vec![kept]);
    // Opening a store sweeps too.
    m.remember("n", NewMemory::text("another short one").ttl(Duration::ZERO)).unwrap();
    assert_eq!(rows(), 2);
    let _again = store(&db);
    assert_eq!(rows(), 1);
}

#[test]
fn strict_stores_refuse_unregistered_namespaces() {
    let db = Database::open_in_memory().unwrap();
    let mut config = MemoryConfig::new("basalt-hash-v1", DIM);
    config.strict_namespaces = true;
    let open = || {
        MemoryStore::open(&db, "strict", config.clone())
            .unwrap()
            .with_embedder(Arc::new(HashEmbedder::new(DIM)))
            .unwrap()
    };
    let m = open();
    let unknown = |r: basalt::Result<u64>| {
        matches!(memory_error(r.unwrap_err()), MemoryError::UnknownNamespace { .. })
    };
    assert!(unknown(m.remember("acme/u1", NewMemory::text("hello"))));
    m.register_namespace("acme").unwrap();
    m.register_namespace("acme").unwrap(); // twice is harmless
    let id = m.remember("acme/u1", NewMemory::text("hello")).unwrap();
    assert!(unknown(m.remember("acmex", NewMemory::text("hello"))));
    assert!(unknown(m.put("globex", "k", NewMemory::text("hello"))));
    let read_err = m.list("globex", None, 10, None).unwrap_err();
    assert!(matches!(memory_error(read_err), MemoryError::UnknownNamespace { .. }));
    assert!(m.recall(&Recall::new("glob", "hello", 3)).is_err());
    assert_eq!(m.list("", None, 10, None).unwrap().len(), 1); // the root reads everything
    assert_eq!(ids(&m.recall(&Recall::new("acme", "hello", 3)).unwrap()), BTreeSet::from([id]));
    // Registrations made through another handle count.
    let other = open();
    other.register_namespace("globex/team").unwrap();
    m.put("globex/team/u9", "k", NewMemory::text("hi")).unwrap();
    assert_eq!(m.registered_namespaces().unwrap(), vec!["acme", "globex/team"]);
    // A store that is not strict takes any namespace.
    store(&db).remember("anything/at/all", NewMemory::text("fine")).unwrap();
}

#[test]
fn the_change_feed_delivers_committed_changes_in_order_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let m = store(&db);
    let sub = m.subscribe("mirror").unwrap();
    let a = m.remember("n", NewMemory::text("alpha")).unwrap();
    let b = m.remember("n/x", NewMemory::text("beta")).unwrap();
    m.update(a, MemoryUpdate { text: Some("alpha two".into()), ..Default::default() }, None)
        .unwrap();
    m.forget(b).unwrap();
    let c = m.put("n", "k", NewMemory::text("gamma")).unwrap();
    let many = m.remember_many("n", vec![NewMemory::text("delta"), NewMemory::text("eps")]);
    let many: Vec<u64> = many.unwrap().into_iter().map(Result::unwrap).collect();
    m.remember("n", NewMemory::text("ALPHA two")).unwrap(); // an exact duplicate: an update
    let events = sub.poll(100).unwrap();
    let seen: Vec<(MemoryEventKind, u64, Option<u64>)> =
        events.iter().map(|e| (e.kind, e.id, e.version)).collect();
    use MemoryEventKind::*;
    assert_eq!(
        seen,
        vec![
            (Remembered, a, Some(1)),
            (Remembered, b, Some(1)),
            (Updated, a, Some(2)),
            (Forgotten, b, None),
            (Remembered, c, Some(1)),
            (Remembered, many[0], Some(1)),
            (Remembered, many[1], Some(1)),
            (Updated, a, Some(3)),
        ]
    );
    assert_eq!(events[1].namespace.as_deref(), Some("n/x"));
    assert_eq!(events[2].text.as_deref(), Some("alpha two"));
    assert_eq!(events[4].key.as_deref(), Some("k"));
    assert!(events.windows(2).all(|w| w[0].lsn <= w[1].lsn));
    // Unacknowledged: delivered again; acknowledged: gone, also after a restart.
    assert_eq!(sub.poll(100).unwrap(), events);
    assert_eq!(sub.poll(2).unwrap().len(), 2); // two commits, one event each
    sub.ack(events.last().unwrap().lsn).unwrap();
    assert!(sub.poll(100).unwrap().is_empty());
    drop((sub, m.subscribe("late").unwrap(), m));
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let m = store(&db);
    let sub = m.subscribe("mirror").unwrap();
    assert!(sub.poll(100).unwrap().is_empty());
    let late = m.subscribe("late").unwrap(); // resumes where it was
    let f = m.remember("n", NewMemory::text("phi")).unwrap();
    let kinds = |s: &basalt::memory::Subscription| {
        s.poll(100).unwrap().iter().map(|e| (e.kind, e.id)).collect::<Vec<_>>()
    };
    assert_eq!(kinds(&sub), vec![(Remembered, f)]);
    assert_eq!(kinds(&late), vec![(Remembered, f)]); // created after the first events
    m.unsubscribe("late").unwrap();
    assert!(late.poll(10).is_err());
}

#[test]
fn a_checkpoint_restores_the_store_and_nothing_else() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let m = store(&db);
    let notes = db
        .create_table(
            "notes",
            &arrow_schema::Schema::new(vec![arrow_schema::Field::new(
                "t",
                arrow_schema::DataType::Utf8,
                false,
            )]),
        )
        .unwrap();
    let a = m.remember("n", NewMemory::text("the red kite")).unwrap();
    let b = m.put("n", "k", NewMemory::text("the blue heron")).unwrap();
    m.register_namespace("n").unwrap();
    m.checkpoint("v1").unwrap();
    m.update(a, MemoryUpdate { text: Some("the green finch".into()), ..Default::default() }, None)
        .unwrap();
    m.forget(b).unwrap();
    let c = m.remember("n", NewMemory::text("the grey owl")).unwrap();
    m.register_namespace("later").unwrap();
    notes.insert_row(basalt::Row::new().set("t", "kept")).unwrap();
    m.restore("v1").unwrap();
    let get = |id| m.get(id).unwrap().map(|i| (i.text, i.version));
    assert_eq!(get(a), Some(("the red kite".to_string(), 1)));
    assert_eq!(get(b), Some(("the blue heron".to_string(), 1)));
    assert_eq!(get(c), None);
    assert_eq!(m.history(a).unwrap().len(), 1);
    assert_eq!(m.registered_namespaces().unwrap(), vec!["n"]);
    // The full-text index was rebuilt for the restored rows.
    let mut r = Recall::new("n", "heron", 5);
    r.mode = RecallMode::Keyword;
    assert_eq!(ids(&m.recall(&r).unwrap()), BTreeSet::from([b]));
    r.query = "owl".into();
    assert!(m.recall(&r).unwrap().is_empty());
    assert_eq!(db.table("notes").unwrap().count().unwrap(), 1); // other tables untouched
    assert!(m.remember("n", NewMemory::text("a new one")).unwrap() > c); // ids not reused
    assert_eq!(m.checkpoints().unwrap(), vec!["v1"]);
    assert!(m.restore("nope").is_err());
    m.drop_checkpoint("v1").unwrap();
    assert!(m.checkpoints().unwrap().is_empty());
}

#[test]
fn exact_dedupe_sees_what_a_restore_brings_back_through_every_handle() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let m = store(&db);
    let kite = m.remember("n", NewMemory::text("the red kite")).unwrap();
    m.checkpoint("v1").unwrap();
    m.forget(kite).unwrap();
    // A second handle shares the store's dedupe index; its open empties it and its first
    // write rebuilds it from the table, which no longer holds the kite.
    let other = store(&db);
    other.remember("n", NewMemory::text("the grey owl")).unwrap();
    m.restore("v1").unwrap();
    // The kite is back, and a duplicate of it updates it, through either handle.
    assert_eq!(m.remember("n", NewMemory::text("The red  KITE")).unwrap(), kite);
    assert_eq!(other.remember("n", NewMemory::text("the red kite")).unwrap(), kite);
    assert_eq!(m.get(kite).unwrap().map(|i| i.version), Some(3));
}

#[test]
fn the_persistent_embedding_cache_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let hash = Arc::new(HashEmbedder::new(DIM));
    let c = CachedEmbedder::persistent(hash.clone(), 1, &db).unwrap();
    let v = c.embed(&["alpha", "beta", "alpha"]).unwrap();
    assert_eq!(v, vec![hash.vector("alpha"), hash.vector("beta"), hash.vector("alpha")]);
    assert_eq!(c.stats().provider_texts, 2);
    // The memory part holds one vector; the other comes from the table.
    assert_eq!(c.embed(&["alpha", "beta"]).unwrap()[1], hash.vector("beta"));
    assert_eq!(c.stats().provider_texts, 2);
    assert!(c.stats().disk_hits >= 1);
    drop(c);
    db.close().unwrap();
    let db = Database::open(dir.path()).unwrap();
    let c = CachedEmbedder::persistent(hash.clone(), 100, &db).unwrap();
    assert_eq!(c.embed(&["alpha", "gamma"]).unwrap()[0], hash.vector("alpha"));
    let s = c.stats();
    assert_eq!((s.disk_hits, s.provider_texts, s.provider_calls), (1, 1, 1));
    // Same model name, another dimension: never a vector of the wrong size.
    let wide = Arc::new(HashEmbedder::new(DIM * 2));
    let w = CachedEmbedder::persistent(wide.clone(), 100, &db).unwrap();
    assert_eq!(w.embed(&["alpha"]).unwrap()[0], wide.vector("alpha"));
    assert_eq!(w.stats().disk_hits, 0);
    // A store uses it like any embedder.
    let m = MemoryStore::open(&db, "mem", MemoryConfig::new("basalt-hash-v1", DIM))
        .unwrap()
        .with_embedder(Arc::new(c))
        .unwrap();
    let id = m.remember("n", NewMemory::text("gamma")).unwrap();
    assert_eq!(m.get(id).unwrap().unwrap().vector, Some(hash.vector("gamma")));
}

#[test]
fn exact_dedupe_follows_updates_forgets_archives_and_other_handles() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let other = store(&db); // another handle on the same database
    let text = |t: &str| NewMemory::text(t);
    let a = m.remember("n", text("Blue sky")).unwrap();
    assert_eq!(other.remember("n", text("blue   SKY")).unwrap(), a);
    m.update(a, MemoryUpdate { text: Some("green grass".into()), ..Default::default() }, None)
        .unwrap();
    let b = other.remember("n", text("blue sky")).unwrap();
    assert_ne!(b, a); // a no longer says it
    assert_eq!(m.remember("n", text("Green grass")).unwrap(), a);
    m.forget(b).unwrap();
    let c = m.remember("n", text("blue sky")).unwrap();
    assert!(c != b && c != a);
    m.update(c, MemoryUpdate { archived: Some(true), ..Default::default() }, None).unwrap();
    let d = other.remember("n", text("blue sky")).unwrap();
    assert_ne!(d, c); // archived items are not live
    let e = m.remember("n/x", text("blue sky")).unwrap();
    assert_ne!(e, d); // namespaces are exact
    let batch = m.remember_many("n", vec![text("blue sky"), text("red sun"), text("RED sun")]);
    let batch: Vec<u64> = batch.unwrap().into_iter().map(Result::unwrap).collect();
    assert_eq!(batch[0], d);
    assert_eq!(batch[1], batch[2]);
    assert_eq!(m.list("n", None, 100, None).unwrap().len(), 4); // a, d, e (n/x), the red sun
}

#[test]
fn clear_needs_confirmation_and_compress_strips_vectors() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let a = m.remember("n/a", NewMemory::text("the cobalt lighthouse")).unwrap();
    let b = m.remember("other", NewMemory::text("the cobalt harbour")).unwrap();
    let later =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()
            as i64
            + 1_000;
    // Compress: the vector goes, the item stays (keyword recall still finds it).
    assert_eq!(m.compress("n", later).unwrap(), 1);
    assert_eq!(m.compress("n", later).unwrap(), 0);
    let item = m.get(a).unwrap().unwrap();
    assert!(item.vector.is_none() && item.version == 1);
    assert!(m.get(b).unwrap().unwrap().vector.is_some());
    let mut r = Recall::new("", "cobalt lighthouse", 5);
    r.mode = RecallMode::Vector;
    assert_eq!(ids(&m.recall(&r).unwrap()), BTreeSet::from([b]));
    r.mode = RecallMode::Keyword;
    assert!(ids(&m.recall(&r).unwrap()).contains(&a));
    // Clear: refused without confirmation, then everything goes.
    let e = m.clear(false).unwrap_err();
    assert!(matches!(memory_error(e), MemoryError::Invalid { .. }));
    assert_eq!(m.list("", None, 10, None).unwrap().len(), 2);
    assert_eq!(m.clear(true).unwrap(), 2);
    assert!(m.list("", None, 10, None).unwrap().is_empty());
    assert!(m.recall(&r).unwrap().is_empty());
    assert_eq!(m.history(a).unwrap().last().map(|h| h.op.as_str()), Some("delete"));
}

#[test]
fn unicode_text_and_large_metadata_round_trip() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let text = "用户喜欢绿茶 🍵 — café naïve Ünïcödé ‘quotes’ \u{200d}👩‍💻 ελληνικά";
    let big = "ü".repeat(7_000); // 14 KB of two-byte characters: just under the 16 KiB limit
    let meta = json!({"note": big, "emoji": "🦀", "nested": {"日本": ["東京", 1, null, true]}});
    let id = m.remember("租户/代理", NewMemory::text(text).metadata(meta.clone())).unwrap();
    let item = m.get(id).unwrap().unwrap();
    assert_eq!(
        (item.text.as_str(), &item.metadata, item.namespace.as_str()),
        (text, &meta, "租户/代理")
    );
    let f = Filter::Eq("nested.日本".into(), json!(["東京", 1, null, true]));
    assert_eq!(m.list("租户", Some(&f), 10, None).unwrap().len(), 1);
    let mut r = Recall::new("租户", "café naïve", 3);
    r.mode = RecallMode::Keyword;
    assert_eq!(ids(&m.recall(&r).unwrap()), BTreeSet::from([id]));
    // Exact dedupe normalises case and spaces of any script.
    assert_eq!(m.remember("租户/代理", NewMemory::text(&text.to_uppercase())).unwrap(), id);
    // One byte over the limit is refused.
    let over = json!({"note": "x".repeat(16 << 10)});
    let e = m.remember("租户/代理", NewMemory::text("x").metadata(over)).unwrap_err();
    assert!(matches!(memory_error(e), MemoryError::Invalid { .. }));
}

#[test]
fn creation_records_are_stored_at_the_first_change_and_read_from_the_item_until_then() {
    let db = Database::open_in_memory().unwrap();
    let m = store(&db);
    let stored = |id: u64| {
        let t = db.table("mem__history").unwrap();
        let all = t.scan_where(&["item"], &basalt::Predicate::eq("item", id)).unwrap();
        all.map(|b| b.unwrap().num_rows()).sum::<usize>()
    };
    let ops = |id: u64| -> Vec<(u64, String)> {
        m.history(id).unwrap().into_iter().map(|e| (e.version, e.op)).collect()
    };
    let create = |id: u64, text: &str, meta: Json| {
        let item = m.get(id).unwrap().unwrap();
        let e = m.history(id).unwrap().remove(0);
        assert_eq!(
            (e.version, e.op.as_str(), e.old_text, e.old_metadata),
            (1, "create", None, Json::Null)
        );
        assert_eq!(
            (e.new_text.as_deref(), e.new_metadata, e.at_ms),
            (Some(text), meta, item.created_ms)
        );
    };

    // A new item (remember, remember_many, a new key) stores no history row; its history
    // still starts with its creation, read from the item.
    let a = m.remember("n", NewMemory::text("first note").metadata(json!({"k": 1}))).unwrap();
    let b = m.remember_many("n", vec![NewMemory::text("second note")]).unwrap().remove(0).unwrap();
    let c = m.put("n", "key", NewMemory::text("keyed note")).unwrap();
    let d = m.remember("n", NewMemory::text("short note").ttl(Duration::ZERO)).unwrap();
    for id in [a, b, c, d] {
        assert_eq!(stored(id), 0);
    }
    assert_eq!(ops(a), vec![(1, "create".to_string())]);
    create(a, "first note", json!({"k": 1}));

    // Its first change stores the creation first: an update, a keyed put, a deduplicated
    // remember, a forget, a sweep of the expired item.
    m.update(a, MemoryUpdate { text: Some("first, edited".into()), ..Default::default() }, Some(1))
        .unwrap();
    assert_eq!(ops(a), vec![(1, "create".into()), (2, "update".into())]);
    assert_eq!(stored(a), 2);
    let h = m.history(a).unwrap();
    assert_eq!(
        (h[0].new_text.as_deref(), &h[0].new_metadata),
        (Some("first note"), &json!({"k": 1}))
    );
    assert_eq!(h[1].old_text.as_deref(), Some("first note"));
    m.update(a, MemoryUpdate { text: Some("again".into()), ..Default::default() }, Some(2))
        .unwrap();
    assert_eq!(stored(a), 3, "only the first change stores the creation");
    assert_eq!(m.put("n", "key", NewMemory::text("keyed, replaced")).unwrap(), c);
    assert_eq!(ops(c), vec![(1, "create".into()), (2, "update".into())]);
    assert_eq!(m.history(c).unwrap()[0].new_text.as_deref(), Some("keyed note"));
    assert_eq!(m.remember("n", NewMemory::text("Second   NOTE")).unwrap(), b, "deduplicated");
    assert_eq!(ops(b), vec![(1, "create".into()), (2, "update".into())]);
    assert_eq!(m.history(b).unwrap()[0].new_text.as_deref(), Some("second note"));
    assert_eq!(m.sweep_expired().unwrap(), 1);
    assert_eq!(ops(d), vec![(1, "create".into()), (0, "expire".into())]);
    assert_eq!(m.history(d).unwrap()[0].new_text.as_deref(), Some("short note"));
    let e = m.remember("n", NewMemory::text("gone soon")).unwrap();
    assert!(m.forget(e).unwrap());
    assert_eq!(ops(e), vec![(1, "create".into()), (0, "delete".into())]);
    assert_eq!(m.history(e).unwrap()[0].new_text.as_deref(), Some("gone soon"));
    assert!(m.history(999_999).unwrap().is_empty());

    // An item of a store written before creation records became lazy has one stored at
    // creation; its first change stores a second, identical one, and history shows one.
    let old = m.remember("n", NewMemory::text("old style")).unwrap();
    let created = m.get(old).unwrap().unwrap().created_ms;
    db.table("mem__history")
        .unwrap()
        .insert_row(
            basalt::Row::new()
                .set("item", old)
                .set("version", 1i64)
                .set("op", "create")
                .set("new_text", "old style")
                .set("at_ms", created),
        )
        .unwrap();
    assert_eq!(ops(old), vec![(1, "create".into())]);
    m.update(old, MemoryUpdate { text: Some("new style".into()), ..Default::default() }, None)
        .unwrap();
    assert_eq!(stored(old), 3);
    assert_eq!(ops(old), vec![(1, "create".into()), (2, "update".into())]);
    create(old, "old style", Json::Null);
}

#[test]
fn history_never_loses_the_creation_entry_to_a_concurrent_first_change() {
    // One thread changes fresh items for the first time while another reads their
    // history: read from one snapshot, every history starts with the creation, whether it
    // saw the change or not.
    let db = Database::open_in_memory().unwrap();
    let m = Arc::new(store(&db));
    for round in 0..40 {
        let ids: Vec<u64> = (0..25)
            .map(|i| m.remember("n", NewMemory::text(&format!("r{round} i{i}"))).unwrap())
            .collect();
        let (writer, ids2) = (m.clone(), ids.clone());
        let t = std::thread::spawn(move || {
            for id in ids2 {
                let change =
                    MemoryUpdate { text: Some(format!("{id} changed")), ..Default::default() };
                writer.update(id, change, Some(1)).unwrap();
            }
        });
        for _ in 0..4 {
            for id in &ids {
                let h = m.history(*id).unwrap();
                assert_eq!((h[0].op.as_str(), h[0].version), ("create", 1), "item {id}: {h:?}");
            }
        }
        t.join().unwrap();
    }
}
