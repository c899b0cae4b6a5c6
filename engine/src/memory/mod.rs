//! Agent memory: a namespaced memory store on one table of a [`Database`].
//!
//! Owns the item model (namespace path, optional key, text, JSON metadata, vector, content
//! hash, version, timestamps, archived flag), keyed upserts, optimistic versions, history,
//! and recall (vector, keyword or hybrid) with namespace and metadata filters applied
//! *before* the top-k. It stores everything in ordinary tables (the items, their history,
//! and a registry row per store) through the public API, so durability, transactions and
//! the full-text index are the engine's. It must not reach below the public API.
//!
//! Concurrent `remember`s are written a group per transaction (`group`).
//!
//! Change feed (`subscribe`, in `feed`), checkpoints (the database's, restored for the
//! store's tables alone), TTL sweeping, strict namespaces and an OpenAI-compatible HTTP
//! embedder (`http`, feature `http-embedder`) and a persistent embedding cache are here
//! too.
//!
//! This file holds the public types and the store's fields; each concern is a file:
//! `open` (opening, checkpoints, namespaces, TTL), `checks` (validating and preparing a
//! write), `dedupe` (exact and near duplicates), `write` (remember, put, update, forget),
//! `read` (get, list, history), `recall`, `rows` (schemas, item batches, items read back),
//! `group` (write groups), `embed` / `http` (embedders), `filter` (metadata filters),
//! `feed` (subscriptions).

mod checks;
mod dedupe;
mod embed;
mod feed;
mod filter;
mod group;
#[cfg(feature = "http-embedder")]
mod http;
mod open;
mod read;
mod recall;
mod rows;
mod write;

pub(crate) use self::dedupe::DedupeSlots;
use self::{dedupe::*, rows::*};

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow_array::{
    ArrayRef, BooleanArray, FixedSizeListArray, Float32Array, Int64Array, RecordBatch, StringArray,
    UInt64Array,
};
use arrow_buffer::{NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use serde_json::Value as Json;

pub use embed::{CacheStats, CachedEmbedder, Embedder, HashEmbedder};
pub use feed::{MemoryEvent, MemoryEventKind, Subscription};
pub use filter::Filter;
#[cfg(feature = "http-embedder")]
pub use http::{API_KEY_ENV, BASE_URL_ENV, HttpEmbedder};

use group::{Lead, Outcome, Ticket, WriteGroup};

use crate::{
    CmpOp, Connection, Database, Metric, Precision, Predicate, Row, Table, Tokenizer, Value,
};

/// Errors of the memory store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryError {
    /// An item's input is refused (empty or oversized text or metadata, a bad namespace,
    /// a vector of the wrong dimension or with non-finite components, a bad filter, …).
    #[error("memory store '{store}': {reason}")]
    Invalid {
        /// The store.
        store: String,
        /// What is wrong.
        reason: String,
    },
    /// `update` with an expected version that is not the item's current one.
    #[error("memory store '{store}': item {id} is at version {actual}, not {expected}")]
    Conflict {
        /// The store.
        store: String,
        /// The item.
        id: u64,
        /// The version the caller expected.
        expected: u64,
        /// The item's version.
        actual: u64,
    },
    /// The store exists with another embedding model or dimension.
    #[error(
        "memory store '{store}' holds {have_model} vectors of dimension {have_dim}, not {model} / {dim}"
    )]
    ModelMismatch {
        /// The store.
        store: String,
        /// Its model.
        have_model: String,
        /// Its dimension.
        have_dim: usize,
        /// The model asked for.
        model: String,
        /// The dimension asked for.
        dim: usize,
    },
    /// No item with this id (or key) is visible.
    #[error("memory store '{store}': no item {what}")]
    NotFound {
        /// The store.
        store: String,
        /// The id or key looked for.
        what: String,
    },
    /// A strict store (see [`MemoryConfig::strict_namespaces`]) was given a namespace
    /// that is not registered (nor below a registered one).
    #[error(
        "memory store '{store}': unknown namespace '{namespace}' (strict store: register it first)"
    )]
    UnknownNamespace {
        /// The store.
        store: String,
        /// The namespace.
        namespace: String,
    },
    /// The embedder failed.
    #[error("memory store '{store}': embedder: {reason}")]
    Embedder {
        /// The store.
        store: String,
        /// Its message.
        reason: String,
    },
}

/// A store's fixed settings.
#[derive(Debug, Clone)]
pub struct MemoryConfig {
    /// The embedding model whose vectors the store holds (checked at every open).
    pub model: String,
    /// The vector dimension (checked at every open).
    pub dim: usize,
    /// Largest text, in bytes (default 64 KiB).
    pub max_text_bytes: usize,
    /// Largest metadata document, in bytes of JSON (default 16 KiB).
    pub max_metadata_bytes: usize,
    /// `remember` of a text whose normalised form (lower case, whitespace collapsed)
    /// equals a live item's in the same namespace updates that item instead of adding one
    /// (default true).
    pub dedupe_exact: bool,
    /// `remember` of a vector whose cosine similarity to a live item's in the same
    /// namespace is at least this updates that item instead (default off).
    pub dedupe_near: Option<f32>,
    /// Only registered namespaces ([`MemoryStore::register_namespace`]) and those below
    /// them may be written or read; any other is [`MemoryError::UnknownNamespace`], so a
    /// misspelt tenant or user is an error instead of an empty result (default false).
    pub strict_namespaces: bool,
}

impl MemoryConfig {
    /// Settings for `model` vectors of dimension `dim`, default limits.
    pub fn new(model: &str, dim: usize) -> MemoryConfig {
        MemoryConfig {
            model: model.into(),
            dim,
            max_text_bytes: 64 << 10,
            max_metadata_bytes: 16 << 10,
            dedupe_exact: true,
            dedupe_near: None,
            strict_namespaces: false,
        }
    }
}

/// One memory.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryItem {
    /// The item's id (the table's `_id`).
    pub id: u64,
    /// Its key within its namespace, if it was `put` with one.
    pub key: Option<String>,
    /// Its namespace path (`tenant/agent/user`).
    pub namespace: String,
    /// The text.
    pub text: String,
    /// Metadata (`Null` when none).
    pub metadata: Json,
    /// The vector, if it has one.
    pub vector: Option<Vec<f32>>,
    /// Hash of the normalised text (lower case, whitespace collapsed).
    pub content_hash: u64,
    /// 1 when created, +1 per update.
    pub version: u64,
    /// Milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Milliseconds since the Unix epoch.
    pub updated_ms: i64,
    /// When it stops being visible (ms since the epoch), if ever.
    pub expires_ms: Option<i64>,
    /// Archived items are kept (and readable by id) but left out of lists and recall.
    pub archived: bool,
}

/// What to write: text, optional metadata, vector and time to live.
#[derive(Debug, Clone, Default)]
pub struct NewMemory {
    /// The text (not empty).
    pub text: String,
    /// Metadata: a JSON object, or `Null`.
    pub metadata: Json,
    /// The vector; computed by the store's embedder when `None` and there is one.
    pub vector: Option<Vec<f32>>,
    /// Time to live from now.
    pub ttl: Option<Duration>,
}

impl NewMemory {
    /// A memory with this text and nothing else.
    pub fn text(text: &str) -> NewMemory {
        NewMemory { text: text.into(), ..Default::default() }
    }
    /// With metadata.
    pub fn metadata(mut self, m: Json) -> NewMemory {
        self.metadata = m;
        self
    }
    /// With a vector.
    pub fn vector(mut self, v: Vec<f32>) -> NewMemory {
        self.vector = Some(v);
        self
    }
    /// With a time to live.
    pub fn ttl(mut self, ttl: Duration) -> NewMemory {
        self.ttl = Some(ttl);
        self
    }
}

/// Changes of an `update`: each `Some` replaces that part.
#[derive(Debug, Clone, Default)]
pub struct MemoryUpdate {
    /// New text (the vector is recomputed by the embedder unless one is given).
    pub text: Option<String>,
    /// New metadata.
    pub metadata: Option<Json>,
    /// New vector.
    pub vector: Option<Vec<f32>>,
    /// Archive or unarchive.
    pub archived: Option<bool>,
}

/// How recall ranks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RecallMode {
    /// Cosine distance of vectors only.
    Vector,
    /// BM25 over the text only.
    Keyword,
    /// Both, fused by weighted reciprocal rank (`k` = 60): an item found by one channel
    /// only keeps its place.
    Hybrid {
        /// Weight of the keyword rank.
        keyword_weight: f32,
        /// Weight of the vector rank.
        vector_weight: f32,
    },
}

/// A recall request.
#[derive(Debug, Clone)]
pub struct Recall {
    /// Query text (keyword channel, and the vector through the embedder when `vector` is
    /// `None`).
    pub query: String,
    /// Query vector.
    pub vector: Option<Vec<f32>>,
    /// How many items at most.
    pub k: usize,
    /// Only items in this namespace or below it (`""`: every namespace).
    pub namespace: String,
    /// Only items whose metadata passes.
    pub filter: Option<Filter>,
    /// Vector channel: only items with cosine similarity (1 − distance) at least this.
    pub min_similarity: Option<f32>,
    /// Ranking.
    pub mode: RecallMode,
    /// How the vector channel compares vectors: `Exact` (default), or a scan of an int8 /
    /// half-float copy whose best candidates are rescored exactly (every distance returned
    /// is exact; a candidate the copy ranks too low can be missed).
    pub precision: Precision,
}

impl Recall {
    /// A hybrid (equal weights) recall of `k` items in `namespace` for `query`.
    pub fn new(namespace: &str, query: &str, k: usize) -> Recall {
        Recall {
            query: query.into(),
            vector: None,
            k,
            namespace: namespace.into(),
            filter: None,
            min_similarity: None,
            mode: RecallMode::Hybrid { keyword_weight: 1.0, vector_weight: 1.0 },
            precision: Precision::Exact,
        }
    }
}

/// One recalled item with its channels' ranks and scores.
#[derive(Debug, Clone)]
pub struct RecallHit {
    /// The item.
    pub item: MemoryItem,
    /// The fused score (hybrid), similarity (vector) or BM25 (keyword); larger is better.
    pub score: f32,
    /// Vector channel: 1-based rank and cosine similarity.
    pub vector: Option<(usize, f32)>,
    /// Keyword channel: 1-based rank and BM25 score.
    pub keyword: Option<(usize, f32)>,
}

/// One entry of an item's history.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    /// The version this change produced (0 for a deletion).
    pub version: u64,
    /// `create`, `update`, `delete`, or `expire` (swept after its time to live).
    pub op: String,
    /// Text before the change.
    pub old_text: Option<String>,
    /// Text after it.
    pub new_text: Option<String>,
    /// Metadata before.
    pub old_metadata: Json,
    /// Metadata after.
    pub new_metadata: Json,
    /// When (ms since the epoch).
    pub at_ms: i64,
}

const REGISTRY: &str = "basalt_memory_stores";
const COLUMNS: [&str; 12] = [
    "_id",
    "key",
    "namespace",
    "text",
    "metadata",
    "embedding",
    "hash",
    "version",
    "created_ms",
    "updated_ms",
    "expires_ms",
    "archived",
];

/// A namespaced memory store (see the module docs).
pub struct MemoryStore {
    db: Database,
    name: String,
    history: String,
    /// Registered namespaces (`<name>__namespaces`).
    namespaces: String,
    config: MemoryConfig,
    embedder: Option<Arc<dyn Embedder>>,
    /// Registered namespaces seen so far (a cache of the table; misses read it again, so
    /// registrations through other handles count).
    known: parking_lot::Mutex<std::collections::BTreeSet<String>>,
    /// The items and history tables' user columns, built once (the schema of every batch
    /// a write makes).
    schemas: (SchemaRef, SchemaRef),
    /// The columns whose value is the same for every new item, built once.
    constants: Constants,
    /// Concurrent `remember`s, written a group at a time (see [`MemoryStore::remember`]).
    group: WriteGroup<(String, Prepared), Res<u64>>,
    /// The store's exact-dedupe index, shared by every handle of the store in this
    /// database (the database keeps the slot; emptied, never replaced, to invalidate it).
    dedupe: DedupeSlot,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("name", &self.name)
            .field("config", &self.config)
            .finish()
    }
}

type Res<T> = crate::Result<T>;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Hash of the normalised text: lower case, runs of whitespace as one space, trimmed.
///
/// The FNV-1a of `text.split_whitespace().map(str::to_lowercase).join(" ")`, computed
/// word by word without building that string: ASCII words are lowered byte by byte, other
/// words through `str::to_lowercase` (which knows the context-dependent cases, such as a
/// final sigma).
pub fn content_hash(text: &str) -> u64 {
    let mut h = embed::Fnv1a::new();
    for (i, word) in text.split_whitespace().enumerate() {
        if i > 0 {
            h.byte(b' ');
        }
        if word.is_ascii() {
            for b in word.bytes() {
                h.byte(b.to_ascii_lowercase());
            }
        } else {
            h.bytes(word.to_lowercase().as_bytes());
        }
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The definition [`content_hash`] computes without building the string.
    fn reference(text: &str) -> u64 {
        let norm: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
        embed::fnv1a(norm.join(" ").as_bytes())
    }

    /// A group of queued `remember`s whose transaction fails (not a lock timeout) is
    /// written again one item per transaction; when those fail too, every caller gets its
    /// own error — none hangs, none gets another's id — and nothing of theirs is stored,
    /// while the write acknowledged before the failure is.
    #[test]
    fn dedupe_pairs_keep_every_id_in_order_one_inline() {
        let mut map = HashMap::new();
        DedupeIndex::add(&mut map, (1, 2), 10);
        DedupeIndex::add(&mut map, (1, 3), 11);
        assert_eq!(map[&(1, 2)], Ids::One(10));
        DedupeIndex::add(&mut map, (1, 2), 12);
        DedupeIndex::add(&mut map, (1, 2), 13);
        assert_eq!(map.remove(&(1, 2)).map(Ids::into_vec), Some(vec![10, 12, 13]));
        assert_eq!(map.remove(&(1, 3)).map(Ids::into_vec), Some(vec![11]));
    }

    #[test]
    fn a_failed_group_is_retried_item_by_item_and_each_caller_learns_its_failure() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::mpsc;

        use basalt_storage::{FaultFs, FaultKind, MemFs, Vfs};

        let mem = Arc::new(MemFs::new());
        let faulty = Arc::new(FaultFs::new(mem.clone(), u64::MAX, FaultKind::Error));
        let vfs: Arc<dyn Vfs> = faulty.clone();
        let db = crate::Database::open_on_vfs(vfs, crate::Options::default()).unwrap();
        let config = MemoryConfig::new("m", 3);
        let store = Arc::new(MemoryStore::open(&db, "notes", config.clone()).unwrap());
        // The first commit after this point blocks in the commit hook (on the leading
        // thread, which still leads) until released: the writes started meanwhile queue.
        let (release, gate) = mpsc::channel::<()>();
        let gate = parking_lot::Mutex::new(Some(gate));
        let armed = Arc::new(AtomicBool::new(true));
        let hook_armed = armed.clone();
        db.set_commit_hook(Some(Arc::new(move |_: &basalt_storage::CommitEvent| {
            if hook_armed.swap(false, Ordering::SeqCst)
                && let Some(g) = gate.lock().take()
            {
                let _ = g.recv();
            }
        })));
        let item = |t: &str| NewMemory::text(t).vector(vec![1.0, 0.5, 0.25]);
        let first = {
            let s = store.clone();
            std::thread::spawn(move || s.remember("a", item("the first note")))
        };
        while armed.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        // The first write is in its commit hook: four more queue behind it (one group).
        let queued: Vec<_> = (0..4)
            .map(|i| {
                let s = store.clone();
                std::thread::spawn(move || s.remember("a", item(&format!("queued note {i}"))))
            })
            .collect();
        while store.group.queued() < 4 {
            std::thread::yield_now();
        }
        // Every write from now on fails: the queued group's log write poisons the store, so
        // each retry is refused.
        faulty.fail_from_now();
        release.send(()).unwrap();
        let first_id = first.join().unwrap().expect("committed before the fault");
        for t in queued {
            let e = t.join().unwrap().expect_err("a write that could not be stored reports it");
            // Tried again in a transaction of its own (the group's error was the I/O
            // fault), which the store, poisoned by that failed log write, refused.
            assert!(
                matches!(e, crate::Error::Storage(basalt_storage::Error::Poisoned { .. })),
                "{e:?}"
            );
        }
        drop(store);
        drop(db);
        // The stored state: the first note only.
        let db = crate::Database::open_on_vfs(mem, crate::Options::default()).unwrap();
        let store = MemoryStore::open(&db, "notes", config).unwrap();
        let all = store.list("a", None, 100, None).unwrap();
        let texts: Vec<&str> = all.iter().map(|i| i.text.as_str()).collect();
        assert_eq!(texts, vec!["the first note"]);
        assert_eq!(all[0].id, first_id);
    }

    #[test]
    fn the_content_hash_normalises_case_and_whitespace() {
        assert_eq!(content_hash("  Hello \t WORLD\n"), content_hash("hello world"));
        assert_ne!(content_hash("hello world"), content_hash("helloworld"));
        // Context-dependent lowering (a final capital sigma) agrees with `to_lowercase`.
        for t in ["ΟΔΟΣ", "ΟΔΟΣ ΟΔΟΣ", "İstanbul", "ǅ x", "a\u{3000}b"] {
            assert_eq!(content_hash(t), reference(t), "{t:?}");
        }
    }

    proptest! {
        #[test]
        fn the_content_hash_is_the_hash_of_the_normalised_text(
            t in "[a-zA-Z ΣσςΟΔİǅ\u{3000}\t\n.,0-9é]{0,40}"
        ) {
            prop_assert_eq!(content_hash(&t), reference(&t));
        }

        #[test]
        fn small_columns_in_one_buffer_equal_the_arrays_built_one_by_one(
            items in proptest::collection::vec(
                (
                    "[a-z/]{1,12}",
                    "[a-zA-Z é😀]{1,40}",
                    proptest::option::of("[{}\":a-z0-9]{0,30}"),
                    any::<u64>(),
                    any::<i64>(),
                    proptest::option::of(any::<i64>()),
                ),
                1..40,
            )
        ) {
            let prepared: Vec<(String, Prepared)> = items
                .iter()
                .map(|(ns, text, meta, hash, at, expires)| {
                    let p = Prepared {
                        at: *at,
                        text: text.clone(),
                        hash: *hash,
                        meta: meta.clone(),
                        vector: None,
                        expires: *expires,
                    };
                    (ns.clone(), p)
                })
                .collect();
            let ps: Vec<(&str, &Prepared)> =
                prepared.iter().map(|(ns, p)| (ns.as_str(), p)).collect();
            use arrow_array::Array;
            let c = SmallColumns::new(&ps).expect("columns");
            let ns = StringArray::from_iter_values(items.iter().map(|i| i.0.as_str()));
            prop_assert_eq!(&c.namespace, &ns);
            let text = StringArray::from_iter_values(items.iter().map(|i| i.1.as_str()));
            prop_assert_eq!(&c.text, &text);
            let meta = StringArray::from_iter(items.iter().map(|i| i.2.as_deref()));
            prop_assert_eq!(&c.metadata, &meta);
            prop_assert_eq!(c.metadata.null_count(), meta.null_count());
            prop_assert_eq!(&c.hash, &UInt64Array::from_iter_values(items.iter().map(|i| i.3)));
            prop_assert_eq!(&c.at, &Int64Array::from_iter_values(items.iter().map(|i| i.4)));
            let expires = Int64Array::from_iter(items.iter().map(|i| i.5));
            prop_assert_eq!(&c.expires, &expires);
            prop_assert_eq!(c.expires.null_count(), expires.null_count());
        }
    }

    /// Up to 2 GiB − 1 bytes of a string column fit Arrow's 32-bit offsets; one byte more
    /// in any of the three is refused with which one it was (the sizes alone: building
    /// 2 GiB of text in a unit test is not worth its memory).
    #[test]
    fn string_columns_past_32_bit_offsets_are_refused() {
        let most = i32::MAX as usize;
        assert!(SmallColumns::fit_offsets(3, [most, most, most]).is_ok());
        for (k, what) in ["namespaces", "texts", "metadata"].into_iter().enumerate() {
            let mut bytes = [0, 10, 20];
            bytes[k] = most + 1;
            let e = SmallColumns::fit_offsets(3, bytes).expect_err("refused").to_string();
            assert!(e.contains(&format!("3 items whose {what} add up to more than 2 GiB")), "{e}");
        }
    }
}
