//! Agent-memory benchmark (`benches/README.md`, *Agent memory*; engine-only tier: vectors precomputed): the
//! `basalt::memory` store on the shapes of Wolbarg's published SQLite figures.
//!
//! W1 open empty / reopen populated; W2 one 200-item batch (`remember_many`, one
//! transaction), and the same 200 as single `remember`s; W3 2,000 `remember`s then recall
//! p50 / p95 (top 5, org-scoped, vector) over 12 queries round-robin, and the same at 10k
//! and 100k items; W4 8 / 16 / 32 threads × 20 `remember`s on one shared store; W7 12
//! concurrent identical `remember`s (exact dedupe) and 12 concurrent `put`s of one key; W8
//! the embedding cache on 10 unique texts × 10; W5 16 writer threads + 16 recall threads ×
//! 20 ops on a 2,000-item store; W6 reported (one process owns writes: other processes
//! open read-only — measured here as a read-only open plus a recall next to the writer).
//! Then the SDK-equivalent tier: W2, W3 and W4 again with no precomputed vectors, every
//! text embedded by a deterministic mock embedder that costs 0.25 ms per text (one FTS
//! entry per memory, as always; since 2026-12-03 a memory's history row is written at its
//! first change, not with it).
//! Items: templated notes of 30–90 characters, 7 metadata keys, 8 agents, 384-d vectors.
//! Durability `ProcessSafe` (an acknowledged memory survives a killed process). Items are
//! generated before the clock starts (the timed region is the store's work only); W4's
//! writer threads are started and given their items before it starts.
//!
//! `cargo run --release -p basalt-benches --bin memory-bench -- [--max N]`
//! (`--recall-only N [--int8]`, `--writes-only N`, `--w3-only R` and `--w4-only R` run one
//! part, for profiling).

#![forbid(unsafe_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use basalt::memory::{
    CachedEmbedder, Embedder, HashEmbedder, MemoryConfig, MemoryStore, NewMemory, Recall,
    RecallMode,
};
use basalt::{Database, Durability, Options, Precision};
use basalt_benches::Rng;
use serde_json::json;

const DIM: usize = 384;
const AGENTS: usize = 8;
const TEAMS: [&str; 3] = ["core", "web", "data"];
const TOPICS: [&str; 12] = [
    "deploy",
    "billing",
    "latency",
    "onboarding",
    "refund",
    "schema",
    "alerts",
    "backup",
    "pricing",
    "login",
    "export",
    "quota",
];

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v.get(((v.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or_default()
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn unit(rng: &mut Rng) -> Vec<f32> {
    let mut v: Vec<f32> =
        (0..DIM).map(|_| (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32 - 0.5).collect();
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    v.iter_mut().for_each(|x| *x /= n);
    v
}

fn item(i: usize, rng: &mut Rng) -> (String, NewMemory) {
    let topic = TOPICS[i % TOPICS.len()];
    let agent = i % AGENTS;
    let text = format!(
        "Agent {agent} noted that {topic} issue #{i} needs follow-up on {}",
        ["Monday", "Friday", "the 3rd"][i % 3]
    );
    let meta = json!({
        "agent": format!("a{agent}"), "topic": topic, "priority": i % 5, "source": "chat",
        "ticket": i, "team": TEAMS[i % 3], "resolved": i.is_multiple_of(4),
    });
    (format!("org/a{agent}"), NewMemory::text(&text).metadata(meta).vector(unit(rng)))
}

/// The SDK tier's embedder: the offline hash embedder, made to cost `cost` per text (a
/// spin, so the cost is paid on the calling thread as a provider round trip would be).
struct MockEmbed {
    inner: HashEmbedder,
    cost: Duration,
}

impl Embedder for MockEmbed {
    fn model(&self) -> &str {
        "mock-384"
    }
    fn dim(&self) -> usize {
        DIM
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        let until = Instant::now() + self.cost * texts.len() as u32;
        let out = texts.iter().map(|t| self.inner.vector(t)).collect();
        while Instant::now() < until {
            std::hint::spin_loop();
        }
        Ok(out)
    }
}

/// A store whose texts go through [`MockEmbed`].
fn open_sdk(dir: &std::path::Path) -> (Database, MemoryStore) {
    let (db, m) = open(dir);
    let e = MockEmbed { inner: HashEmbedder::new(DIM), cost: Duration::from_micros(250) };
    (db, m.with_embedder(Arc::new(e)).expect("embedder"))
}

/// [`item`] without its vector (the SDK tier embeds the text).
fn text_item(i: usize, rng: &mut Rng) -> (String, NewMemory) {
    let (ns, mut it) = item(i, rng);
    it.vector = None;
    (ns, it)
}

/// `writers` threads × 20 `remember`s on one store; returns ops/s and p95.
///
/// Each thread generates its 20 items first; a barrier releases them together, and the run
/// lasts from the first thread's start to the last one's end (each thread reads the clock
/// itself: timed from this thread, a run could begin before this thread got the core back
/// after the barrier — on 2 cores with 8–32 writers, sometimes after the writes were
/// done), so neither thread start-up nor item generation is timed.
fn writers_x20(
    m: &Arc<MemoryStore>,
    writers: usize,
    make: fn(usize, &mut Rng) -> (String, NewMemory),
) -> (f64, Duration) {
    let ready = Arc::new(std::sync::Barrier::new(writers + 1));
    let handles: Vec<_> = (0..writers)
        .map(|w| {
            let (m, ready) = (m.clone(), ready.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(100 + w as u64);
                let items: Vec<_> = (0..20).map(|i| make(w * 20 + i, &mut rng)).collect();
                let mut lat = Vec::new();
                ready.wait();
                let start = Instant::now();
                for (ns, it) in items {
                    let s = Instant::now();
                    m.remember(&ns, it).expect("remember");
                    lat.push(s.elapsed());
                }
                (start, Instant::now(), lat)
            })
        })
        .collect();
    ready.wait();
    let runs: Vec<(Instant, Instant, Vec<Duration>)> =
        handles.into_iter().map(|h| h.join().expect("writer")).collect();
    let first = runs.iter().map(|r| r.0).min().expect("writers");
    let last = runs.iter().map(|r| r.1).max().expect("writers");
    let mut lat: Vec<Duration> = runs.into_iter().flat_map(|r| r.2).collect();
    ((writers * 20) as f64 / (last - first).as_secs_f64(), pct(&mut lat, 0.95))
}

fn open(dir: &std::path::Path) -> (Database, MemoryStore) {
    let opts = Options { durability: Durability::ProcessSafe, ..Options::default() };
    let db = Database::open_with(dir, opts).expect("open");
    let m = MemoryStore::open(&db, "memories", MemoryConfig::new("mock-384", DIM)).expect("store");
    (db, m)
}

/// `remember`s items `from..to` one by one; returns the time they took (the items are
/// generated before the clock starts).
fn fill(m: &MemoryStore, from: usize, to: usize, rng: &mut Rng) -> Duration {
    let items: Vec<_> = (from..to).map(|i| item(i, rng)).collect();
    let start = Instant::now();
    for (ns, it) in items {
        m.remember(&ns, it).expect("remember");
    }
    start.elapsed()
}

/// Recall p50 / p95 over `n` queries (12 round-robin), and the share of the exact top-5 ids
/// the chosen precision returns (1.0 for exact, or when `agree` is false: not checked).
fn recall(
    m: &MemoryStore,
    rng: &mut Rng,
    n: usize,
    precision: Precision,
    agree: bool,
) -> (Duration, Duration, f64) {
    let queries: Vec<Vec<f32>> = (0..TOPICS.len()).map(|_| unit(rng)).collect();
    let mut t = Vec::new();
    let (mut same, mut total) = (0usize, 0usize);
    for i in 0..n {
        let mut r = Recall::new("org", "", 5);
        r.mode = RecallMode::Vector;
        r.vector = Some(queries[i % queries.len()].clone());
        r.precision = precision;
        let start = Instant::now();
        let hits = m.recall(&r).expect("recall");
        t.push(start.elapsed());
        assert_eq!(hits.len(), 5);
        if agree && precision != Precision::Exact {
            r.precision = Precision::Exact;
            let exact: Vec<u64> = m.recall(&r).expect("recall").iter().map(|h| h.item.id).collect();
            same += hits.iter().filter(|h| exact.contains(&h.item.id)).count();
            total += exact.len();
        }
    }
    let agreement = if total == 0 { 1.0 } else { same as f64 / total as f64 };
    (pct(&mut t, 0.5), pct(&mut t, 0.95), agreement)
}

/// The number after option `name` in `args`, if given and valid.
fn count_arg(args: &[String], name: &str) -> Option<usize> {
    let at = args.iter().position(|a| a == name)?;
    args.get(at + 1)?.parse().ok()
}

fn main() {
    basalt_benches::alloc::keep_freed_memory();
    let args: Vec<String> = std::env::args().collect();
    let max = count_arg(&args, "--max").unwrap_or(100_000);
    let root = std::env::temp_dir().join(format!("basalt-memory-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let mut rng = Rng::new(7);
    // `--recall-only N [--int8]`: N items (written in batches), then recall timings only
    // (profiling): exact and int8 with the share of the exact top 5 found, or with `--int8`
    // int8 timings alone (no exact searches to compare with).
    if let Some(n) = count_arg(&args, "--recall-only") {
        let (_db, m) = open(&root.join("recall"));
        for start in (0..n).step_by(1000) {
            let items: Vec<NewMemory> =
                (start..(start + 1000).min(n)).map(|i| item(i, &mut rng).1).collect();
            m.remember_many(&format!("org/a{}", start / 1000 % AGENTS), items).expect("batch");
        }
        let int8 = Precision::Int8 { oversample: 4 };
        let only = args.iter().any(|a| a == "--int8");
        let precisions = if only { vec![int8] } else { vec![Precision::Exact, int8] };
        for precision in precisions {
            let (p50, p95, agree) = recall(&m, &mut rng, 200, precision, !only);
            println!(
                "{n} items, {precision:?}: p50 {} p95 {}, recall@5 {agree:.3}",
                ms(p50),
                ms(p95)
            );
        }
        let _ = std::fs::remove_dir_all(&root);
        return;
    }

    // `--writes-only N`: N single `remember`s on a fresh store (W3's shape, for profiling),
    // then W4 once with 16 writers.
    if let Some(n) = count_arg(&args, "--writes-only") {
        let (_db, m) = open(&root.join("writes"));
        let d = fill(&m, 0, n, &mut rng);
        println!("{n} remembers: {:.0} ops/s", n as f64 / d.as_secs_f64());
        let (_db, m) = open(&root.join("w4"));
        let (ops, p95) = writers_x20(&Arc::new(m), 16, item);
        println!("W4 16 writers × 20: {ops:.0} ops/s, p95 {}", ms(p95));
        let _ = std::fs::remove_dir_all(&root);
        return;
    }

    // `--w3-only R`: W3's 2,000 `remember`s, R times on fresh stores (its write half
    // alone, for profiling and repeated measurement: a fresh store's first writes weigh
    // more here than in `--writes-only 20000`).
    if let Some(r) = count_arg(&args, "--w3-only") {
        for k in 0..r {
            let (_db, m) = open(&root.join(format!("w3-{k}")));
            let d = fill(&m, 0, 2000, &mut rng);
            println!("W3 2,000 remembers: {:.0} ops/s", 2000.0 / d.as_secs_f64());
        }
        let _ = std::fs::remove_dir_all(&root);
        return;
    }

    // `--w4-only R`: W4 with 8, 16 and 32 writers, R times each on fresh stores (the
    // concurrent write path alone, for profiling and repeated measurement), with the
    // number of transactions (log records) the 20 × N writes took.
    if let Some(r) = count_arg(&args, "--w4-only") {
        for writers in [8usize, 16, 32] {
            for k in 0..r {
                let (db, m) = open(&root.join(format!("w4-{writers}-{k}")));
                // Log positions before and after: how many transactions the writes took.
                let before = db.create_feed("before").expect("feed");
                let (ops, p95) = writers_x20(&Arc::new(m), writers, item);
                let commits = db.create_feed("after").expect("feed") - before;
                println!(
                    "W4 {writers} writers × 20: {ops:.0} ops/s, p95 {}, {commits} commits \
                     ({:.1} writes each)",
                    ms(p95),
                    (writers * 20) as f64 / commits.max(1) as f64
                );
            }
        }
        let _ = std::fs::remove_dir_all(&root);
        return;
    }

    // W1
    let dir = root.join("w1");
    let start = Instant::now();
    let (db, m) = open(&dir);
    let open_empty = start.elapsed();
    fill(&m, 0, 500, &mut rng);
    drop(m);
    db.close().expect("close");
    let start = Instant::now();
    let (db, m) = open(&dir);
    let reopen = start.elapsed();
    drop((db, m));
    println!("W1 open empty store: {}; reopen with 500 items: {}", ms(open_empty), ms(reopen));

    // W2
    let (_db, m) = open(&root.join("w2"));
    let batch: Vec<NewMemory> = (0..200).map(|i| item(i, &mut rng).1).collect();
    let start = Instant::now();
    let out = m.remember_many("org/a0", batch).expect("batch");
    let d = start.elapsed();
    assert!(out.iter().all(Result::is_ok));
    println!("W2 one batch of 200 (remember_many): {:.0} ops/s", 200.0 / d.as_secs_f64());
    let d = fill(&m, 200, 400, &mut rng);
    println!(
        "   200 single remembers (one transaction each): {:.0} ops/s",
        200.0 / d.as_secs_f64()
    );

    // W3 + W9 recall at scale
    let (_db, m) = open(&root.join("w3"));
    let d = fill(&m, 0, 2000, &mut rng);
    println!("W3 2,000 remembers: {:.0} ops/s", 2000.0 / d.as_secs_f64());
    let mut have = 2000;
    for n in [2_000usize, 10_000, 100_000] {
        if n > max {
            break;
        }
        if n > have {
            let d = fill(&m, have, n, &mut rng);
            println!(
                "   +{} remembers: {:.0} ops/s",
                n - have,
                (n - have) as f64 / d.as_secs_f64()
            );
            have = n;
        }
        let (p50, p95, _) = recall(&m, &mut rng, 60, Precision::Exact, true);
        println!("W3/W9 recall top 5 (vector, org-scoped) at {n}: p50 {} p95 {}", ms(p50), ms(p95));
        let (p50, p95, agree) = recall(&m, &mut rng, 60, Precision::Int8 { oversample: 4 }, true);
        println!(
            "   int8 scan + exact rescoring: p50 {} p95 {}, recall@5 vs exact {agree:.3}",
            ms(p50),
            ms(p95)
        );
    }

    // W4
    for writers in [8usize, 16, 32] {
        let (_db, m) = open(&root.join(format!("w4-{writers}")));
        let (ops, p95) = writers_x20(&Arc::new(m), writers, item);
        println!("W4 {writers} writers × 20: {ops:.0} ops/s, p95 {}", ms(p95));
    }

    // W5: 16 writers and 16 recall readers at once, 20 operations each.
    let (db5, m) = open(&root.join("w5"));
    fill(&m, 0, 2000, &mut rng);
    let m = Arc::new(m);
    let queries: Arc<Vec<Vec<f32>>> = Arc::new((0..TOPICS.len()).map(|_| unit(&mut rng)).collect());
    let start = Instant::now();
    let mut handles = Vec::new();
    for w in 0..16usize {
        let m = m.clone();
        handles.push(std::thread::spawn(move || {
            let mut rng = Rng::new(500 + w as u64);
            (0..20)
                .filter(|i| {
                    let (ns, it) = item(2000 + w * 20 + i, &mut rng);
                    m.remember(&ns, it).is_err()
                })
                .count()
        }));
    }
    for r in 0..16usize {
        let (m, queries) = (m.clone(), queries.clone());
        handles.push(std::thread::spawn(move || {
            (0..20)
                .filter(|i| {
                    let mut q = Recall::new("org", "", 5);
                    q.mode = RecallMode::Vector;
                    q.vector = Some(queries[(r + i) % queries.len()].clone());
                    m.recall(&q).map(|h| h.len() != 5).unwrap_or(true)
                })
                .count()
        }));
    }
    let failures: usize = handles.into_iter().map(|h| h.join().expect("thread")).sum();
    println!(
        "W5 16 writers + 16 recall readers × 20: wall {}, failures {failures}",
        ms(start.elapsed())
    );

    // W6: one process owns writes; another process opens read-only.
    let start = Instant::now();
    let ro = Database::open_read_only(root.join("w5")).expect("read-only open");
    let rm = MemoryStore::open(&ro, "memories", MemoryConfig::new("mock-384", DIM)).expect("store");
    let mut q = Recall::new("org", "", 5);
    q.mode = RecallMode::Vector;
    q.vector = Some(queries[0].clone());
    let n = rm.recall(&q).expect("recall").len();
    println!(
        "W6 several processes writing one store: out of scope (one process owns writes; a \
         second writer gets StorageError::Locked). Read-only open + recall next to the \
         writer: {} ({n} hits)",
        ms(start.elapsed())
    );
    drop((rm, ro, m, db5));

    // W7
    let (_db, m) = open(&root.join("w7"));
    let m = Arc::new(m);
    let handles: Vec<_> = (0..12)
        .map(|_| {
            let m = m.clone();
            std::thread::spawn(move || {
                m.remember("org/a0", NewMemory::text("the same fact")).expect("remember")
            })
        })
        .collect();
    let ids: std::collections::BTreeSet<u64> =
        handles.into_iter().map(|h| h.join().expect("remember")).collect();
    let version =
        ids.first().and_then(|id| m.get(*id).expect("get")).map(|i| i.version).unwrap_or(0);
    println!(
        "W7 12 concurrent identical remembers: {} distinct id(s), {} updates",
        ids.len(),
        version.saturating_sub(1)
    );
    let handles: Vec<_> = (0..12)
        .map(|i| {
            let m = m.clone();
            std::thread::spawn(move || {
                m.put("org/a0", "same", NewMemory::text(&format!("same fact, copy {i}")))
                    .expect("put")
            })
        })
        .collect();
    let ids: std::collections::BTreeSet<u64> =
        handles.into_iter().map(|h| h.join().expect("put")).collect();
    let version = m.get_key("org/a0", "same").expect("get").map(|i| i.version).unwrap_or(0);
    println!(
        "W7 12 concurrent puts of one key: {} distinct id(s), {} updates",
        ids.len(),
        version.saturating_sub(1)
    );

    // W8
    let cache = CachedEmbedder::new(Arc::new(HashEmbedder::new(DIM)), 10_000);
    for _ in 0..10 {
        for u in 0..10 {
            cache.embed(&[&format!("unique text {u}")]).expect("embed");
        }
    }
    let s = cache.stats();
    println!(
        "W8 embedding cache, 10 unique texts × 10: {} of {} texts reached the provider ({:.0} % fewer)",
        s.provider_texts,
        s.requested,
        100.0 * (1.0 - s.provider_texts as f64 / s.requested as f64)
    );
    // SDK-equivalent tier: texts embedded per operation by the 0.25 ms mock.
    println!("SDK-equivalent tier (mock embedder, 0.25 ms per text):");
    let (_db, m) = open_sdk(&root.join("sdk-w2"));
    let batch: Vec<NewMemory> = (0..200).map(|i| text_item(i, &mut rng).1).collect();
    let start = Instant::now();
    let out = m.remember_many("org/a0", batch).expect("batch");
    assert!(out.iter().all(Result::is_ok));
    println!("   W2 one batch of 200: {:.0} ops/s", 200.0 / start.elapsed().as_secs_f64());
    let (_db, m) = open_sdk(&root.join("sdk-w3"));
    let items: Vec<_> = (0..2000).map(|i| text_item(i, &mut rng)).collect();
    let start = Instant::now();
    for (ns, it) in items {
        m.remember(&ns, it).expect("remember");
    }
    println!("   W3 2,000 remembers: {:.0} ops/s", 2000.0 / start.elapsed().as_secs_f64());
    let mut t = Vec::new();
    for i in 0..60 {
        let mut r = Recall::new("org", &format!("{} follow-up", TOPICS[i % TOPICS.len()]), 5);
        r.mode = RecallMode::Vector;
        let s = Instant::now();
        assert_eq!(m.recall(&r).expect("recall").len(), 5);
        t.push(s.elapsed());
    }
    println!(
        "   W3 recall top 5 (query embedded): p50 {} p95 {}",
        ms(pct(&mut t, 0.5)),
        ms(pct(&mut t, 0.95))
    );
    for writers in [8usize, 16, 32] {
        let (_db, m) = open_sdk(&root.join(format!("sdk-w4-{writers}")));
        let (ops, p95) = writers_x20(&Arc::new(m), writers, text_item);
        println!("   W4 {writers} writers × 20: {ops:.0} ops/s, p95 {}", ms(p95));
    }
    let _ = std::fs::remove_dir_all(&root);
}
