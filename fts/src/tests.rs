use std::collections::BTreeSet;

use proptest::prelude::*;

use super::*;

fn cols(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn ids(hits: &[Hit]) -> BTreeSet<u64> {
    hits.iter().map(|h| h.id).collect()
}

fn sample(tokenizer: Tokenizer) -> FtsIndex {
    let ix = FtsIndex::create(&Location::Memory, &cols(&["name", "city"]), tokenizer, 1).unwrap();
    ix.add(1, &[Some("Running Shoes"), Some("Paris")]).unwrap();
    ix.add(2, &[Some("Red shoe"), Some("Berlin")]).unwrap();
    ix.add(3, &[Some("Electronics store"), None]).unwrap();
    ix.add(4, &[None, Some("New York")]).unwrap();
    ix.add(5, &[Some("new electric car"), Some("Paris")]).unwrap();
    ix.commit(Payload { lsn: 7, next_row_id: 6 }).unwrap();
    ix
}

fn found(ix: &FtsIndex, q: &str) -> BTreeSet<u64> {
    ids(&ix.search(q, None).unwrap())
}

#[test]
fn tokenizers_cut_as_documented() {
    assert_eq!(Tokenizer::Default.tokens("Hello, Wörld-42!").unwrap(), ["hello", "wörld", "42"]);
    assert_eq!(Tokenizer::English.tokens("Running shoes").unwrap(), ["run", "shoe"]);
    assert_eq!(Tokenizer::Ngram.tokens("東京都").unwrap(), ["東京", "東京都", "京都"]);
    for name in ["default", "english", "ngram", "EN_STEM", "cjk"] {
        name.parse::<Tokenizer>().unwrap();
    }
    assert!(matches!("porter".parse::<Tokenizer>(), Err(Error::UnknownTokenizer(_))));
}

#[test]
fn search_syntax() {
    let ix = sample(Tokenizer::Default);
    assert_eq!(found(&ix, "paris"), BTreeSet::from([1, 5]));
    assert_eq!(found(&ix, "PARIS"), BTreeSet::from([1, 5]));
    assert_eq!(found(&ix, "paris berlin"), BTreeSet::from([1, 2, 5]), "OR by default");
    assert_eq!(found(&ix, "paris AND car"), BTreeSet::from([5]));
    assert_eq!(found(&ix, "+paris -car"), BTreeSet::from([1]));
    assert_eq!(found(&ix, "paris AND NOT car"), BTreeSet::from([1]));
    assert_eq!(found(&ix, "(paris OR berlin) AND shoes"), BTreeSet::from([1]));
    assert_eq!(found(&ix, "berlin OR (paris AND NOT car)"), BTreeSet::from([1, 2]));
    assert_eq!(found(&ix, "\"new york\""), BTreeSet::from([4]));
    assert_eq!(found(&ix, "\"york new\""), BTreeSet::new());
    assert_eq!(found(&ix, "elec*"), BTreeSet::from([3, 5]), "prefix");
    assert_eq!(found(&ix, "electrnics~1"), BTreeSet::from([3]), "fuzzy");
    assert_eq!(found(&ix, "shoe~1"), BTreeSet::from([1, 2]), "fuzzy");
    assert_eq!(found(&ix, "city:pa*"), BTreeSet::from([1, 5]));
    assert_eq!(found(&ix, "pa* AND NOT elec*"), BTreeSet::from([1]));
    assert_eq!(found(&ix, "\"new el\"*"), BTreeSet::from([5]), "phrase prefix");
    assert_eq!(found(&ix, "city:paris"), BTreeSet::from([1, 5]));
    assert_eq!(found(&ix, "name:new"), BTreeSet::from([5]));
    assert_eq!(found(&ix, "name:new OR city:berlin"), BTreeSet::from([2, 5]));
    assert_eq!(ids(&ix.search_column("city", "new", None).unwrap()), BTreeSet::from([4]));
    assert_eq!(ids(&ix.search_column("name", "new", None).unwrap()), BTreeSet::from([5]));
    assert!(matches!(ix.search_column("nope", "x", None), Err(Error::UnknownColumn(_))));
    // Only the words, not the placeholder machinery, can match.
    assert_eq!(found(&ix, "qqbasaltfz0qq"), BTreeSet::new());
}

#[test]
fn malformed_queries_are_clear_errors() {
    let ix = sample(Tokenizer::Default);
    for q in
        ["", "   ", "nope:paris", "\"unclosed", "paris~7", "name:(", "a AND", "NOT paris", "-paris"]
    {
        match ix.search(q, None) {
            Err(Error::Query { query, reason }) => {
                assert_eq!(query, q);
                assert!(!reason.is_empty());
            }
            other => panic!("{q:?}: {other:?}"),
        }
    }
    let ng = sample(Tokenizer::Ngram);
    assert!(matches!(ng.search("paris~1", None), Err(Error::Query { .. })));
}

#[test]
fn scores_rank_and_limits_cut() {
    let ix = FtsIndex::create(&Location::Memory, &cols(&["t"]), Tokenizer::Default, 1).unwrap();
    ix.add(10, &[Some("apple apple apple")]).unwrap();
    ix.add(11, &[Some("apple pie with a long tail of other words")]).unwrap();
    ix.add(12, &[Some("apple")]).unwrap();
    ix.add(13, &[Some("apple")]).unwrap();
    ix.add(14, &[Some("pear")]).unwrap();
    ix.commit(Payload::default()).unwrap();
    let all = ix.search("apple", None).unwrap();
    assert_eq!(all.len(), 4);
    assert!(all.windows(2).all(|w| w[0].score >= w[1].score));
    assert_eq!(all[0].id, 10, "most occurrences first");
    assert_eq!(all.last().unwrap().id, 11, "longest field last");
    let tie: Vec<u64> = all.iter().filter(|h| h.score == all[1].score).map(|h| h.id).collect();
    assert_eq!(tie, [12, 13], "ties by ascending _id");
    let top2 = ix.search("apple", Some(2)).unwrap();
    assert_eq!(top2, all[..2]);
    assert!(ix.search("apple", Some(0)).unwrap().is_empty());
    assert_eq!(ix.search("apple", Some(100)).unwrap(), all);
}

#[test]
fn deletes_updates_commits_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fts");
    let columns = cols(&["name", "city"]);
    {
        let ix = FtsIndex::create(&Location::Dir(path.clone()), &columns, Tokenizer::English, 2)
            .unwrap();
        assert_eq!(ix.payload().unwrap(), None);
        ix.add(1, &[Some("running"), Some("rome")]).unwrap();
        ix.add(2, &[Some("walking"), Some("rome")]).unwrap();
        ix.commit(Payload { lsn: 3, next_row_id: 3 }).unwrap();
        ix.set_writer_threads(1).unwrap();
        // Uncommitted changes are invisible.
        ix.delete(1).unwrap();
        ix.add(3, &[Some("runs"), None]).unwrap();
        assert_eq!(found(&ix, "run"), BTreeSet::from([1]));
        ix.commit(Payload { lsn: 9, next_row_id: 4 }).unwrap();
        assert_eq!(found(&ix, "run"), BTreeSet::from([3]));
        // An update is a delete and an add of the same _id.
        ix.delete(2).unwrap();
        ix.add(2, &[Some("running fast"), Some("milan")]).unwrap();
        // Left uncommitted: lost at close.
        ix.delete(3).unwrap();
    }
    let ix = FtsIndex::open(&path, &columns, Tokenizer::English, true).unwrap();
    assert_eq!(ix.payload().unwrap(), Some(Payload { lsn: 9, next_row_id: 4 }));
    assert_eq!(found(&ix, "run"), BTreeSet::from([3]));
    assert_eq!(found(&ix, "rome"), BTreeSet::from([2]));
    assert_eq!(ix.num_docs(), 2);
    // A read-only handle sees the writer's commits after a reload and refuses writes.
    let ro = FtsIndex::open(&path, &columns, Tokenizer::English, false).unwrap();
    assert!(matches!(ro.add(9, &[Some("x"), None]), Err(Error::Invalid(_))));
    ix.delete(2).unwrap();
    ix.commit(Payload { lsn: 10, next_row_id: 4 }).unwrap();
    assert_eq!(found(&ro, "rome"), BTreeSet::from([2]));
    ro.reload().unwrap();
    assert_eq!(found(&ro, "rome"), BTreeSet::new());
    // The schema is checked against the definition.
    drop((ix, ro));
    assert!(matches!(
        FtsIndex::open(&path, &cols(&["name"]), Tokenizer::English, false),
        Err(Error::Damaged { .. })
    ));
}

#[test]
fn the_writer_opens_at_its_first_use() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fts");
    let columns = cols(&["t"]);
    let ix =
        FtsIndex::create(&Location::Dir(path.clone()), &columns, Tokenizer::Default, 1).unwrap();
    // Searching, rolling back and reading the payload need no writer.
    assert!(ix.search("x", None).unwrap().is_empty());
    ix.rollback().unwrap();
    assert_eq!(ix.payload().unwrap(), None);
    assert!(!ix.writer_is_open());
    ix.add(1, &[Some("first words")]).unwrap();
    assert!(ix.writer_is_open());
    ix.rollback().unwrap();
    ix.add(2, &[Some("second words")]).unwrap();
    ix.commit(Payload { lsn: 1, next_row_id: 3 }).unwrap();
    assert_eq!(found(&ix, "words"), BTreeSet::from([2]), "the rolled-back add is gone");
    // Back to an unopened writer: the next write opens it again, the old one's lock freed.
    ix.set_writer_threads(1).unwrap();
    assert!(!ix.writer_is_open());
    ix.delete(2).unwrap();
    ix.commit(Payload { lsn: 2, next_row_id: 3 }).unwrap();
    assert!(found(&ix, "words").is_empty());
    drop(ix);
    // Reopened writable: unopened until a write, and a commit alone opens it.
    let ix = FtsIndex::open(&path, &columns, Tokenizer::Default, true).unwrap();
    assert!(!ix.writer_is_open());
    ix.commit(Payload { lsn: 3, next_row_id: 3 }).unwrap();
    assert!(ix.writer_is_open());
    assert_eq!(ix.payload().unwrap(), Some(Payload { lsn: 3, next_row_id: 3 }));
    // Read-only: every write is refused, the writer never opens.
    let ro = FtsIndex::open(&path, &columns, Tokenizer::Default, false).unwrap();
    assert!(matches!(ro.rollback(), Err(Error::Invalid(_))));
    assert!(matches!(ro.set_writer_threads(2), Err(Error::Invalid(_))));
    assert!(matches!(ro.commit(Payload::default()), Err(Error::Invalid(_))));
    assert!(!ro.writer_is_open());
}

#[test]
fn payload_round_trip() {
    let p = Payload { lsn: u64::MAX, next_row_id: 42 };
    assert_eq!(Payload::decode(&p.encode()), Some(p));
    for bad in ["", "basalt-fts 1", "basalt-fts 1 lsn=1", "basalt-fts 2 lsn=1 next_row_id=2"] {
        assert_eq!(Payload::decode(bad), None, "{bad:?}");
    }
}

const WORDS: &[&str] = &["alpha", "beta", "gamma", "delta", "Alpha", "BETA", "omega"];

fn doc_strategy() -> impl Strategy<Value = Vec<Option<String>>> {
    let text = prop::collection::vec(prop::sample::select(WORDS), 0..5).prop_map(|w| w.join(" "));
    prop::collection::vec(prop::option::of(text), 2)
}

/// Reference matcher over the default tokenizer.
fn words(doc: &[Option<String>], col: Option<usize>) -> Vec<Vec<String>> {
    doc.iter()
        .enumerate()
        .filter(|(i, _)| col.is_none_or(|c| c == *i))
        .map(|(_, t)| {
            t.as_deref().map(|t| Tokenizer::Default.tokens(t).unwrap()).unwrap_or_default()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn matches_a_reference_matcher(
        docs in prop::collection::vec(doc_strategy(), 1..30),
        deleted in prop::collection::vec(any::<bool>(), 30),
        a in prop::sample::select(WORDS),
        b in prop::sample::select(WORDS),
    ) {
        let ix = FtsIndex::create(&Location::Memory, &cols(&["x", "y"]), Tokenizer::Default, 1)
            .unwrap();
        for (i, d) in docs.iter().enumerate() {
            ix.add(i as u64, &[d[0].as_deref(), d[1].as_deref()]).unwrap();
        }
        ix.commit(Payload::default()).unwrap();
        let live: Vec<usize> = (0..docs.len()).filter(|i| !deleted[*i]).collect();
        ix.delete_many((0..docs.len()).filter(|i| deleted[*i]).map(|i| i as u64)).unwrap();
        ix.commit(Payload::default()).unwrap();
        let (a, b) = (a.to_lowercase(), b.to_lowercase());
        let has = |d: &[Option<String>], w: &str, col: Option<usize>| {
            words(d, col).iter().any(|f| f.iter().any(|t| t == w))
        };
        let phrase = |d: &[Option<String>]| {
            words(d, None).iter().any(|f| f.windows(2).any(|p| p[0] == a && p[1] == b))
        };
        let expect = |pred: &dyn Fn(&[Option<String>]) -> bool| -> BTreeSet<u64> {
            live.iter().filter(|i| pred(&docs[**i])).map(|i| *i as u64).collect()
        };
        prop_assert_eq!(found(&ix, &a), expect(&|d| has(d, &a, None)));
        prop_assert_eq!(found(&ix, &format!("{a} OR {b}")), expect(&|d| has(d, &a, None) || has(d, &b, None)));
        prop_assert_eq!(found(&ix, &format!("{a} AND {b}")), expect(&|d| has(d, &a, None) && has(d, &b, None)));
        prop_assert_eq!(found(&ix, &format!("{a} AND NOT {b}")), expect(&|d| has(d, &a, None) && !has(d, &b, None)));
        prop_assert_eq!(found(&ix, &format!("\"{a} {b}\"")), expect(&phrase));
        prop_assert_eq!(found(&ix, &format!("y:{a}")), expect(&|d| has(d, &a, Some(1))));
        let all = ix.search(&a, None).unwrap();
        let top = ix.search(&a, Some(3)).unwrap();
        prop_assert_eq!(&top[..], &all[..all.len().min(3)]);
    }
}

#[derive(Debug, Clone)]
enum Op {
    Add(u64, usize),
    Delete(u64),
    Commit,
    Rollback,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6u64, 0..3usize).prop_map(|(id, w)| Op::Add(id, w)),
        3 => (0..6u64).prop_map(Op::Delete),
        2 => Just(Op::Commit),
        1 => Just(Op::Rollback),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Adds, deletes, commits and rollbacks in any order against a model applying the
    /// committed operations in order: a delete removes the documents added before it, never
    /// one added after it (updates are a delete then an add of the same `_id`, before or
    /// after a commit, on an empty index or not).
    #[test]
    fn operations_apply_in_order(ops in prop::collection::vec(op_strategy(), 1..40)) {
        const W: [&str; 3] = ["alpha", "beta", "gamma"];
        let dir = tempfile::tempdir().unwrap();
        let ix = FtsIndex::create(&Location::Dir(dir.path().join("i")), &cols(&["t"]), Tokenizer::Default, 1)
            .unwrap();
        let (mut committed, mut pending): (Vec<(u64, usize)>, Vec<Op>) = (Vec::new(), Vec::new());
        for op in ops.iter().cloned().chain([Op::Commit]) {
            match op {
                Op::Add(id, w) => ix.add(id, &[Some(W[w])]).unwrap(),
                Op::Delete(id) => ix.delete(id).unwrap(),
                Op::Commit => ix.commit_unsynced(Payload::default()).unwrap(),
                Op::Rollback => ix.rollback().unwrap(),
            }
            match op {
                Op::Commit => {
                    for p in pending.drain(..) {
                        match p {
                            Op::Add(id, w) => committed.push((id, w)),
                            Op::Delete(id) => committed.retain(|d| d.0 != id),
                            _ => {}
                        }
                    }
                    for (w, word) in W.iter().enumerate() {
                        let mut want: Vec<u64> =
                            committed.iter().filter(|d| d.1 == w).map(|d| d.0).collect();
                        want.sort_unstable();
                        let mut got: Vec<u64> = ix.search(word, None).unwrap().iter().map(|h| h.id).collect();
                        got.sort_unstable();
                        prop_assert_eq!(got, want, "{} after {:?}", word, ops);
                    }
                }
                Op::Rollback => pending.clear(),
                op => pending.push(op),
            }
        }
    }
}
