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

mod embed;
mod feed;
mod filter;
mod group;
#[cfg(feature = "http-embedder")]
mod http;

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

/// Candidates for exact dedupe: (hash of the namespace, content hash) → ids of items that
/// had that pair when written through a memory store of this database handle (or when the
/// index was built by a scan). Entries may be stale — every candidate is read back and
/// checked (namespace, hash, live) inside the writing transaction, and stale ones are
/// dropped — but never missing for writes made through memory stores: each write adds its
/// pair inside its transaction. Built on a store's first write after it is opened (opening
/// discards it, so rows written by other means are seen after a reopen).
///
/// A pair nearly always has one item, held inline ([`Ids::One`]): a `Vec` per pair was an
/// allocation per `remember`. The map starts with room for [`DedupeIndex::ROOM`] more
/// pairs than the table holds, so a new store's first writes do not regrow it step by
/// step (each regrowth a larger allocation, which also made the allocator consolidate
/// every small block freed since the last one: the regrowths were 4 % of W3's profile).
#[derive(Debug, Default)]
pub(crate) struct DedupeIndex {
    map: HashMap<(u64, u64), Ids>,
}

/// The candidate ids of one (namespace hash, content hash) pair.
#[derive(Debug, Clone, PartialEq)]
enum Ids {
    One(u64),
    Many(Vec<u64>),
}

impl Ids {
    fn push(&mut self, id: u64) {
        match self {
            Ids::One(first) => *self = Ids::Many(vec![*first, id]),
            Ids::Many(v) => v.push(id),
        }
    }

    fn into_vec(self) -> Vec<u64> {
        match self {
            Ids::One(id) => vec![id],
            Ids::Many(v) => v,
        }
    }
}

impl DedupeIndex {
    /// Room for this many pairs beyond the table's rows when the index is built.
    const ROOM: usize = 1024;

    /// Every item of the table (one scan of three columns).
    fn build(items: &Table) -> Res<DedupeIndex> {
        let mut map: HashMap<(u64, u64), Ids> = HashMap::new();
        use arrow_array::cast::AsArray;
        use arrow_array::types::UInt64Type;
        for b in items.scan_columns(&["_id", "namespace", "hash"])? {
            let b = b?;
            let (Some(ids), Some(ns), Some(hashes)) = (
                b.column(0).as_primitive_opt::<UInt64Type>(),
                b.column(1).as_string_opt::<i32>(),
                b.column(2).as_primitive_opt::<UInt64Type>(),
            ) else {
                // Never skip rows: a missing entry would let a duplicate in.
                return Err(MemoryError::Invalid {
                    store: items.name().to_string(),
                    reason: "the items table's _id, namespace or hash column has another type"
                        .into(),
                }
                .into());
            };
            for i in 0..b.num_rows() {
                let key = (embed::fnv1a(ns.value(i).as_bytes()), hashes.value(i));
                Self::add(&mut map, key, ids.value(i));
            }
        }
        map.reserve(Self::ROOM);
        Ok(DedupeIndex { map })
    }

    fn add(map: &mut HashMap<(u64, u64), Ids>, key: (u64, u64), id: u64) {
        match map.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().push(id),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Ids::One(id));
            }
        }
    }
}

/// The exact-dedupe index of one store (`None` until built, or after being invalidated).
type DedupeSlot = Arc<parking_lot::Mutex<Option<DedupeIndex>>>;

/// The dedupe indexes of a database's stores, by store name.
pub(crate) type DedupeSlots = parking_lot::Mutex<HashMap<String, DedupeSlot>>;

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

impl MemoryStore {
    /// Opens the store `name` on `db`, creating its tables on first use (the items table
    /// `name`, its history `name__history`, a full-text index on the text, and a row in
    /// `basalt_memory_stores`). An existing store must have the same model and dimension.
    pub fn open(db: &Database, name: &str, config: MemoryConfig) -> Res<MemoryStore> {
        let store = MemoryStore {
            db: db.clone(),
            name: name.into(),
            history: format!("{name}__history"),
            namespaces: format!("{name}__namespaces"),
            embedder: None,
            known: Default::default(),
            schemas: (Arc::new(items_schema(config.dim)), Arc::new(history_schema())),
            group: WriteGroup::default(),
            constants: Constants::new(),
            dedupe: db.inner.memory_dedupe.lock().entry(name.to_string()).or_default().clone(),
            config,
        };
        if store.config.dim == 0 {
            return Err(store.invalid("the vector dimension must be at least 1"));
        }
        let tables = db.list_tables();
        if !tables.iter().any(|t| t == REGISTRY) {
            db.create_table(
                REGISTRY,
                &Schema::new(vec![
                    Field::new("store", DataType::Utf8, false),
                    Field::new("model", DataType::Utf8, false),
                    Field::new("dim", DataType::Int64, false),
                ]),
            )?;
        }
        let registry = db.table(REGISTRY)?;
        let mut found = None;
        for b in registry.scan_where(&["model", "dim"], &Predicate::eq("store", name))? {
            let b = b?;
            if b.num_rows() > 0 {
                let r = Row::from_batch(&b, 0);
                found = Some((
                    text_of(r.get("model")).unwrap_or_default(),
                    int_of(r.get("dim")) as usize,
                ));
            }
        }
        match found {
            Some((model, dim)) => {
                store.same_model((&model, dim), (&store.config.model, store.config.dim))?;
            }
            None => {
                store.create_tables()?;
                registry.insert_row(
                    Row::new()
                        .set("store", name)
                        .set("model", store.config.model.as_str())
                        .set("dim", store.config.dim as i64),
                )?;
            }
        }
        // Rows may have been written by other means since an index was built.
        *store.dedupe.lock() = None;
        // A read-only handle (another process's writer owns the store) changes nothing.
        if db.is_read_only() {
            return Ok(store);
        }
        // Stores made before namespace registration existed lack the table.
        if !db.list_tables().contains(&store.namespaces) {
            db.create_table(
                &store.namespaces,
                &Schema::new(vec![Field::new("namespace", DataType::Utf8, false)]),
            )?;
        }
        // Expired items are invisible from the moment they expire; opening reclaims them.
        store.sweep_expired()?;
        Ok(store)
    }

    /// Saves the store as it is now (items, history, registered namespaces) under `name`:
    /// a checkpoint of the database (cheap: its files are kept, nothing is copied).
    pub fn checkpoint(&self, name: &str) -> Res<()> {
        self.db.checkpoint(&self.checkpoint_name(name))
    }

    /// Brings the store back to checkpoint `name`: items, versions, history and registered
    /// namespaces become what they were, the full-text index is rebuilt; other tables of
    /// the database are untouched and ids handed out since are never reused. A restore is
    /// not a change-feed event: subscribers that mirror the store read it again.
    pub fn restore(&self, name: &str) -> Res<()> {
        let tables = [self.name.as_str(), self.history.as_str(), self.namespaces.as_str()];
        self.db.restore_tables(&self.checkpoint_name(name), &tables)?;
        self.known.lock().clear();
        *self.dedupe.lock() = None;
        Ok(())
    }

    /// Drops checkpoint `name` of the store (and the files only it kept).
    pub fn drop_checkpoint(&self, name: &str) -> Res<()> {
        self.db.drop_checkpoint(&self.checkpoint_name(name))
    }

    /// The store's checkpoints, sorted.
    pub fn checkpoints(&self) -> Res<Vec<String>> {
        let prefix = self.checkpoint_name("");
        Ok(self
            .db
            .list_checkpoints()?
            .into_iter()
            .filter_map(|c| c.strip_prefix(&prefix).map(str::to_string))
            .collect())
    }

    fn checkpoint_name(&self, name: &str) -> String {
        format!("{}__cp__{name}", self.name)
    }

    /// Registers `namespace` (and so everything below it) for a strict store; registering
    /// twice is harmless. Works on any store.
    pub fn register_namespace(&self, namespace: &str) -> Res<()> {
        self.check_namespace_form(namespace, false)?;
        if self.registered(namespace)? {
            return Ok(());
        }
        self.db.table(&self.namespaces)?.insert_row(Row::new().set("namespace", namespace))?;
        self.known.lock().insert(namespace.to_string());
        Ok(())
    }

    /// The registered namespaces, sorted.
    pub fn registered_namespaces(&self) -> Res<Vec<String>> {
        let mut out = std::collections::BTreeSet::new();
        // (Absent on a read-only handle of a store made before registration existed.)
        let Ok(table) = self.db.table(&self.namespaces) else { return Ok(Vec::new()) };
        for b in table.scan_columns(&["namespace"])? {
            let b = b?;
            for i in 0..b.num_rows() {
                if let Some(ns) = text_of(Row::from_batch(&b, i).get("namespace")) {
                    out.insert(ns);
                }
            }
        }
        *self.known.lock() = out.clone();
        Ok(out.into_iter().collect())
    }

    /// Whether `ns` or one of its ancestors is registered.
    fn registered(&self, ns: &str) -> Res<bool> {
        let covered = |known: &std::collections::BTreeSet<String>| {
            let mut prefix = String::new();
            ns.split('/').any(|seg| {
                if !prefix.is_empty() {
                    prefix.push('/');
                }
                prefix.push_str(seg);
                known.contains(&prefix)
            })
        };
        if covered(&self.known.lock()) {
            return Ok(true);
        }
        let all = self.registered_namespaces()?;
        Ok(covered(&all.into_iter().collect()))
    }

    /// Deletes expired items for good (their full-text entries with them), each with an
    /// `expire` history entry; returns how many. Expired items are invisible to every read
    /// from the moment they expire; sweeping reclaims their space (run it on a timer; every
    /// open sweeps too).
    pub fn sweep_expired(&self) -> Res<u64> {
        let now = now_ms();
        self.forget_where("expire", |t| {
            let mut out = Vec::new();
            for b in t.scan_where(&COLUMNS, &Predicate::cmp("expires_ms", CmpOp::LtEq, now))? {
                let b = b?;
                for i in 0..b.num_rows() {
                    out.push(item_of(&Row::from_batch(&b, i)));
                }
            }
            Ok(out)
        })
    }

    fn create_tables(&self) -> Res<()> {
        let tables = self.db.list_tables();
        if !tables.contains(&self.name) {
            let t = self.db.create_table(&self.name, &self.schemas.0)?;
            t.create_fts_index(&["text"], Tokenizer::English)?;
        }
        if !tables.contains(&self.history) {
            self.db.create_table(&self.history, &self.schemas.1)?;
        }
        Ok(())
    }

    /// Uses `embedder` for texts written or recalled without a vector; its model and
    /// dimension must be the store's.
    pub fn with_embedder(mut self, embedder: Arc<dyn Embedder>) -> Res<MemoryStore> {
        self.same_model((&self.config.model, self.config.dim), (embedder.model(), embedder.dim()))?;
        self.embedder = Some(embedder);
        Ok(self)
    }

    /// Refuses `asked` (model, dimension) where the store holds `have`.
    fn same_model(&self, have: (&str, usize), asked: (&str, usize)) -> Res<()> {
        if have == asked {
            return Ok(());
        }
        Err(MemoryError::ModelMismatch {
            store: self.name.clone(),
            have_model: have.0.into(),
            have_dim: have.1,
            model: asked.0.into(),
            dim: asked.1,
        }
        .into())
    }

    /// The store's name (its items table).
    pub fn name(&self) -> &str {
        &self.name
    }

    fn invalid(&self, reason: impl Into<String>) -> crate::Error {
        MemoryError::Invalid { store: self.name.clone(), reason: reason.into() }.into()
    }

    /// Checks a namespace's form and, for a strict store, that it is registered (the root
    /// `""`, where allowed, always is).
    fn check_namespace(&self, ns: &str, allow_root: bool) -> Res<()> {
        self.check_namespace_form(ns, allow_root)?;
        if self.config.strict_namespaces && !ns.is_empty() && !self.registered(ns)? {
            return Err(MemoryError::UnknownNamespace {
                store: self.name.clone(),
                namespace: ns.to_string(),
            }
            .into());
        }
        Ok(())
    }

    fn check_namespace_form(&self, ns: &str, allow_root: bool) -> Res<()> {
        if ns.is_empty() {
            return if allow_root {
                Ok(())
            } else {
                Err(self.invalid("an item needs a namespace"))
            };
        }
        if ns.split('/').any(|s| s.trim().is_empty()) {
            return Err(self
                .invalid(format!("bad namespace '{ns}' (segments separated by '/', none empty)")));
        }
        Ok(())
    }

    fn check_vector(&self, v: &[f32]) -> Res<()> {
        if v.len() != self.config.dim {
            return Err(self.invalid(format!(
                "vector of dimension {}, the store's is {}",
                v.len(),
                self.config.dim
            )));
        }
        // A component is NaN or infinite when its exponent bits are all set; or-ing the
        // test over every component (no early exit) compiles to vector instructions.
        const EXP: u32 = 0x7f80_0000;
        if v.iter().fold(false, |bad, x| bad | (x.to_bits() & EXP == EXP)) {
            return Err(self.invalid("vector with a NaN or infinite component"));
        }
        Ok(())
    }

    fn check_metadata(&self, m: &Json) -> Res<Option<String>> {
        match m {
            Json::Null => Ok(None),
            Json::Object(_) => {
                // (`Display` formats through `fmt::Write`: 2.8× slower here, 520 vs 185 ns
                // for the seven keys of `memory-bench`'s items, same text.)
                let s = serde_json::to_string(m)
                    .map_err(|e| self.invalid(format!("metadata not serialisable: {e}")))?;
                if s.len() > self.config.max_metadata_bytes {
                    return Err(self.invalid(format!(
                        "metadata of {} bytes, more than the limit of {}",
                        s.len(),
                        self.config.max_metadata_bytes
                    )));
                }
                Ok(Some(s))
            }
            other => Err(self.invalid(format!("metadata must be a JSON object, not {other}"))),
        }
    }

    fn check_text(&self, t: &str) -> Res<()> {
        if t.trim().is_empty() {
            return Err(self.invalid("empty text"));
        }
        if t.len() > self.config.max_text_bytes {
            return Err(self.invalid(format!(
                "text of {} bytes, more than the limit of {}",
                t.len(),
                self.config.max_text_bytes
            )));
        }
        Ok(())
    }

    /// The embedder's vector for `text` (checked), or `None` without an embedder.
    fn embed_one(&self, text: &str) -> Res<Option<Vec<f32>>> {
        let Some(e) = &self.embedder else {
            return Ok(None);
        };
        let v = e
            .embed(&[text])
            .map_err(|reason| MemoryError::Embedder { store: self.name.clone(), reason })?
            .pop();
        if let Some(v) = &v {
            self.check_vector(v)?;
        }
        Ok(v)
    }

    /// Checks a new item (everything but its vector when the embedder is to make it).
    fn check_new(&self, namespace: &str, m: &NewMemory) -> Res<Option<String>> {
        self.check_namespace(namespace, false)?;
        self.check_text(&m.text)?;
        if let Some(v) = &m.vector {
            self.check_vector(v)?;
        }
        self.check_metadata(&m.metadata)
    }

    /// Checks new items and fills in missing vectors with one embedder call.
    fn prepare(
        &self,
        namespace: &str,
        memories: Vec<NewMemory>,
        now: i64,
    ) -> Res<Vec<Res<Prepared>>> {
        let mut out: Vec<Res<Prepared>> = memories
            .into_iter()
            .map(|m| {
                let meta = self.check_new(namespace, &m)?;
                Ok(Prepared {
                    at: now,
                    hash: content_hash(&m.text),
                    text: m.text,
                    meta,
                    vector: m.vector.map(ScalarBuffer::from),
                    expires: m.ttl.map(|t| now.saturating_add(t.as_millis() as i64)),
                })
            })
            .collect();
        if let Some(e) = &self.embedder {
            let todo: Vec<usize> = (0..out.len())
                .filter(|i| out[*i].as_ref().is_ok_and(|p| p.vector.is_none()))
                .collect();
            if !todo.is_empty() {
                let texts: Vec<&str> = todo
                    .iter()
                    .filter_map(|i| out[*i].as_ref().ok().map(|p| p.text.as_str()))
                    .collect();
                let vectors = e
                    .embed(&texts)
                    .map_err(|reason| MemoryError::Embedder { store: self.name.clone(), reason })?;
                if vectors.len() != todo.len() {
                    return Err(MemoryError::Embedder {
                        store: self.name.clone(),
                        reason: format!("{} vectors for {} texts", vectors.len(), todo.len()),
                    }
                    .into());
                }
                for (i, v) in todo.into_iter().zip(vectors) {
                    let checked = self.check_vector(&v);
                    if let Ok(p) = &mut out[i] {
                        match checked {
                            Ok(()) => p.vector = Some(ScalarBuffer::from(v)),
                            Err(e) => out[i] = Err(e),
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The row of a new item (everything but `_id`).
    fn new_row(namespace: &str, key: Option<&str>, p: &Prepared, now: i64) -> Row {
        Row::new()
            .set("key", key.map_or(Value::Null, |k| Value::Str(k.into())))
            .set("namespace", namespace)
            .set("text", p.text.as_str())
            .set("metadata", p.meta.clone().map_or(Value::Null, Value::Str))
            .set("embedding", p.vector.as_ref().map_or(Value::Null, |v| Value::Vector(v.to_vec())))
            .set("hash", p.hash)
            .set("version", 1i64)
            .set("created_ms", now)
            .set("updated_ms", now)
            .set("expires_ms", p.expires.map_or(Value::Null, Value::Int))
            .set("archived", false)
    }

    /// The live item of `namespace` (exactly) that `p` duplicates, by normalised text or
    /// (when configured) by vector similarity.
    fn duplicate_of(
        &self,
        items: &Table,
        namespace: &str,
        p: &Prepared,
        now: i64,
    ) -> Res<Option<MemoryItem>> {
        if self.config.dedupe_exact {
            let mut index = self.dedupe.lock();
            let index = match &mut *index {
                Some(ix) => ix,
                built => built.insert(DedupeIndex::build(items)?),
            };
            let key = (embed::fnv1a(namespace.as_bytes()), p.hash);
            let mut candidates = index.map.remove(&key).map(Ids::into_vec).unwrap_or_default();
            candidates.sort_unstable();
            candidates.dedup();
            let mut found: Option<MemoryItem> = None;
            let mut still = Vec::with_capacity(candidates.len());
            for id in candidates {
                let Some(it) = items.get(id)?.map(|r| item_of(&r)) else { continue };
                if it.namespace != namespace || it.content_hash != p.hash {
                    continue;
                }
                still.push(id);
                let live = !it.archived && it.expires_ms.is_none_or(|e| e > now);
                if live && found.is_none() {
                    found = Some(it);
                }
            }
            match still.len() {
                0 => {}
                1 => _ = index.map.insert(key, Ids::One(still[0])),
                _ => _ = index.map.insert(key, Ids::Many(still)),
            }
            if found.is_some() {
                return Ok(found);
            }
        }
        if let (Some(min), Some(v)) = (self.config.dedupe_near, &p.vector)
            && v.iter().any(|x| *x != 0.0)
        {
            let mut live = live_conditions(now);
            live.push(Predicate::eq("namespace", namespace));
            let near =
                items.topk_where("embedding", v, 1, Metric::Cosine, &Predicate::And(live))?;
            if let Some(n) = near.first().filter(|n| 1.0 - n.distance >= min) {
                return Ok(items.get(n.id)?.map(|r| item_of(&r)));
            }
        }
        Ok(None)
    }

    /// Records inside a writing transaction that item `id` of `namespace` now has content
    /// hash `hash` (for exact dedupe; nothing to do before the index is built).
    fn note_hash(&self, namespace: &str, hash: u64, id: u64) {
        if let Some(ix) = self.dedupe.lock().as_mut() {
            DedupeIndex::add(&mut ix.map, (embed::fnv1a(namespace.as_bytes()), hash), id);
        }
    }

    /// Inside a transaction: turns prepared item `p` into an update of `old`, the live item
    /// it duplicates (version + 1, its metadata / vector / expiry when given). Returns the id.
    fn merge_into(
        &self,
        items: &Table,
        hist: &Table,
        old: MemoryItem,
        p: &Prepared,
        now: i64,
    ) -> Res<u64> {
        let version = old.version as i64 + 1;
        let mut row = Row::new()
            .set("text", p.text.as_str())
            .set("hash", p.hash)
            .set("version", version)
            .set("updated_ms", now);
        if let Some(m) = &p.meta {
            row = row.set("metadata", m.as_str());
        }
        if let Some(v) = &p.vector {
            row = row.set("embedding", Value::Vector(v.to_vec()));
        }
        if let Some(e) = p.expires {
            row = row.set("expires_ms", e);
        }
        items.update(old.id, row)?;
        self.note_hash(&old.namespace, p.hash, old.id);
        Self::keep_creation(hist, &old)?;
        let old_meta = meta_text(&old.metadata);
        let new_meta = p.meta.clone().or_else(|| old_meta.clone());
        hist.insert_row(Self::history_row(
            old.id,
            version,
            "update",
            Some((&old.text, old_meta.as_deref())),
            Some((&p.text, new_meta.as_deref())),
            now,
        ))?;
        Ok(old.id)
    }

    /// Inside a transaction about to change or delete `old`: writes its `create` history
    /// row if it never changed (version 1). Until its first change an item's creation
    /// record is the item row itself ([`MemoryStore::history`] reads it from there), so a
    /// new item writes no history row (that row was about a quarter of a single
    /// `remember`'s time). A store whose items got their `create` rows when written (by
    /// earlier builds) gets a second, identical one at such an item's first change;
    /// `history` shows the first.
    fn keep_creation(hist: &Table, old: &MemoryItem) -> Res<()> {
        if old.version == 1 {
            let meta = meta_text(&old.metadata);
            hist.insert_row(Self::history_row(
                old.id,
                1,
                "create",
                None,
                Some((&old.text, meta.as_deref())),
                old.created_ms,
            ))?;
        }
        Ok(())
    }

    fn history_row(
        id: u64,
        version: i64,
        op: &str,
        old: Option<(&str, Option<&str>)>,
        new: Option<(&str, Option<&str>)>,
        at: i64,
    ) -> Row {
        let s = |v: Option<&str>| v.map_or(Value::Null, |s| Value::Str(s.into()));
        Row::new()
            .set("item", id)
            .set("version", version)
            .set("op", op)
            .set("old_text", s(old.map(|o| o.0)))
            .set("new_text", s(new.map(|n| n.0)))
            .set("old_metadata", s(old.and_then(|o| o.1)))
            .set("new_metadata", s(new.and_then(|n| n.1)))
            .set("at_ms", at)
    }

    /// Runs `f` in one serializable transaction on a fresh connection: all of it or none.
    fn txn<T>(&self, f: impl FnOnce(&Connection, &Table, &Table) -> Res<T>) -> Res<T> {
        let conn = self.db.connect();
        conn.begin_immediate()?;
        let r = (|| {
            let items = conn.table(&self.name)?;
            let hist = conn.table(&self.history)?;
            f(&conn, &items, &hist)
        })();
        match r {
            Ok(v) => {
                conn.commit()?;
                Ok(v)
            }
            Err(e) => {
                let _ = conn.rollback();
                Err(e)
            }
        }
    }

    /// Adds a memory to `namespace` and returns its id — or, when it duplicates a live
    /// item of that namespace (see [`MemoryConfig::dedupe_exact`] and
    /// [`MemoryConfig::dedupe_near`]), updates that item (version + 1) and returns its id.
    ///
    /// The item is checked (and embedded) on the calling thread. Concurrent `remember`s on
    /// one store are written together: one caller writes every item queued at that moment
    /// in one transaction (one log write, one publish) while the others wait, and each
    /// returns once its item is committed, at the store's durability. Items stay
    /// independent — a duplicate among them updates the earlier one as it would in
    /// sequence, and if a group's transaction fails its items are written again one
    /// transaction each, so one item's failure is its own.
    pub fn remember(&self, namespace: &str, memory: NewMemory) -> Res<u64> {
        let now = now_ms();
        let p = self
            .prepare(namespace, vec![memory], now)?
            .pop()
            .unwrap_or_else(|| Err(self.invalid("nothing to remember")))?;
        if self.group.led_by_this_thread() {
            // Written from a commit hook of this thread's group: on its own.
            return self.txn(|_, t, h| self.write_new(t, h, &[(namespace, &p)])).map(|ids| ids[0]);
        }
        let ticket = Arc::new(Ticket::new((namespace.to_string(), p)));
        if !self.group.join(&ticket) {
            match ticket.wait() {
                Outcome::Done(r) => return r,
                Outcome::Lead | Outcome::Waiting => {}
            }
        }
        // This thread writes the group: every write queued now, its own among them.
        let lead = Lead::take(&self.group, || {
            Err(crate::Error::Transaction(
                "the thread writing this memory's group panicked before reporting whether \
                 it was stored"
                    .into(),
            ))
        });
        let inputs = lead.inputs();
        let items: Vec<(&str, &Prepared)> = inputs.iter().map(|(n, p)| (n.as_str(), p)).collect();
        let results: Vec<Res<u64>> = match self.txn(|_, t, h| self.write_new(t, h, &items)) {
            Ok(ids) => ids.into_iter().map(Ok).collect(),
            Err(e) if items.len() == 1 => vec![Err(e)],
            // Waiting for another writer timed out: so would each item; none waits again.
            Err(crate::Error::Storage(basalt_storage::Error::LockTimeout { path, waited })) => {
                let timeout = || basalt_storage::Error::LockTimeout { path: path.clone(), waited };
                items.iter().map(|_| Err(timeout().into())).collect()
            }
            // Which item failed is unknown: each is written on its own.
            Err(_) => items
                .iter()
                .map(|it| {
                    self.txn(|_, t, h| self.write_new(t, h, std::slice::from_ref(it)))
                        .map(|ids| ids[0])
                })
                .collect(),
        };
        lead.finish(&ticket, results)
    }

    /// Adds many memories to `namespace` in one transaction (one embedder call for those
    /// without vectors). Each gets its own result: a bad item is reported in its place and
    /// the others are written. The outer error is for failures of the whole batch (the
    /// embedder, storage).
    pub fn remember_many(&self, namespace: &str, memories: Vec<NewMemory>) -> Res<Vec<Res<u64>>> {
        let now = now_ms();
        let prepared = self.prepare(namespace, memories, now)?;
        let good: Vec<(&str, &Prepared)> =
            prepared.iter().filter_map(|p| p.as_ref().ok().map(|p| (namespace, p))).collect();
        let ids = if good.is_empty() {
            Vec::new()
        } else {
            self.txn(|_, items, hist| {
                let ids = self.write_new(items, hist, &good)?;
                // One id per good item, by construction of `write_new`; were it ever
                // otherwise, handing out ids by position would give items others' ids, so
                // the batch is rolled back instead.
                if ids.len() != good.len() {
                    return Err(crate::Error::Transaction(format!(
                        "memory store '{}': {} ids for {} items",
                        self.name,
                        ids.len(),
                        good.len()
                    )));
                }
                Ok(ids)
            })?
        };
        let mut ids = ids.into_iter();
        Ok(prepared.into_iter().map(|p| p.map(|_| ids.next().unwrap_or_default())).collect())
    }

    /// Inside a transaction: writes checked new items (each with its namespace), in order,
    /// and returns each one's id — the id of the live item it duplicates when it does
    /// (that item updated, version + 1).
    ///
    /// New items are written together (one multi-row insert; no history row: see
    /// `keep_creation`);
    /// an item with the content hash of a pending one writes those first so the duplicate
    /// lookup sees them. Near dedupe compares with stored vectors, so with it on every
    /// item is written before the next is checked.
    fn write_new(&self, items: &Table, hist: &Table, new: &[(&str, &Prepared)]) -> Res<Vec<u64>> {
        let buffered = self.config.dedupe_near.is_none();
        let mut out = vec![0u64; new.len()];
        // Positions in `new` of the items not yet written.
        let mut pending: Vec<usize> = Vec::new();
        let flush = |pending: &mut Vec<usize>, out: &mut [u64]| -> Res<()> {
            if pending.is_empty() {
                return Ok(());
            }
            let rows: Vec<(&str, &Prepared)> = pending.iter().map(|&i| new[i]).collect();
            let batch = new_items_batch(&self.schemas.0, &self.constants, &rows, self.config.dim)?;
            let ids = items.insert(&batch)?;
            for (j, (ns, p)) in rows.iter().enumerate() {
                self.note_hash(ns, p.hash, ids.first + j as u64);
            }
            for (j, i) in pending.drain(..).enumerate() {
                out[i] = ids.first + j as u64;
            }
            Ok(())
        };
        for (i, &(ns, p)) in new.iter().enumerate() {
            if pending.iter().any(|&j| new[j].1.hash == p.hash) {
                flush(&mut pending, &mut out)?;
            }
            match self.duplicate_of(items, ns, p, p.at)? {
                Some(old) => out[i] = self.merge_into(items, hist, old, p, p.at)?,
                None => {
                    pending.push(i);
                    if !buffered {
                        flush(&mut pending, &mut out)?;
                    }
                }
            }
        }
        flush(&mut pending, &mut out)?;
        Ok(out)
    }

    /// Writes the memory under `key` in `namespace`: creates it, or replaces the text,
    /// metadata, vector and expiry of the one there (version + 1). Returns its id. Two
    /// concurrent puts of one key leave one item.
    pub fn put(&self, namespace: &str, key: &str, memory: NewMemory) -> Res<u64> {
        if key.is_empty() {
            return Err(self.invalid("empty key"));
        }
        let now = now_ms();
        let Some(p) = self.prepare(namespace, vec![memory], now)?.pop() else {
            return Err(self.invalid("nothing to put"));
        };
        let p = p?;
        let row = Self::new_row(namespace, Some(key), &p, now);
        let (meta, text, hash) = (p.meta, p.text, p.hash);
        self.txn(|_, items, hist| match find_key(items, namespace, key)? {
            None => {
                // (Its creation record is the item row until it changes: `keep_creation`.)
                let id = items.insert_row(row)?;
                self.note_hash(namespace, hash, id);
                Ok(id)
            }
            Some(old) => {
                let version = old.version as i64 + 1;
                let row = row.set("version", version).set("created_ms", old.created_ms);
                items.update(old.id, row)?;
                self.note_hash(namespace, hash, old.id);
                Self::keep_creation(hist, &old)?;
                let old_meta = meta_text(&old.metadata);
                hist.insert_row(Self::history_row(
                    old.id,
                    version,
                    "update",
                    Some((&old.text, old_meta.as_deref())),
                    Some((&text, meta.as_deref())),
                    now,
                ))?;
                Ok(old.id)
            }
        })
    }

    /// The item with this id, if it exists and has not expired (archived items included).
    pub fn get(&self, id: u64) -> Res<Option<MemoryItem>> {
        let now = now_ms();
        Ok(self.db.table(&self.name)?.get(id)?.map(|r| item_of(&r)).filter(|i| !expired(i, now)))
    }

    /// The item under `key` in `namespace`, if any (and not expired).
    pub fn get_key(&self, namespace: &str, key: &str) -> Res<Option<MemoryItem>> {
        let now = now_ms();
        Ok(find_key(&self.db.table(&self.name)?, namespace, key)?.filter(|i| !expired(i, now)))
    }

    /// Live items (not archived, not expired) in `namespace` or below it whose metadata
    /// passes `filter`, by ascending id, at most `limit` of them after id `after` (a cursor:
    /// pass the last id of the previous page).
    pub fn list(
        &self,
        namespace: &str,
        filter: Option<&Filter>,
        limit: usize,
        after: Option<u64>,
    ) -> Res<Vec<MemoryItem>> {
        let mut items = self.live(namespace, filter, after)?;
        items.truncate(limit);
        Ok(items)
    }

    /// Every namespace holding a live item, sorted, with how many it holds.
    pub fn list_namespaces(&self) -> Res<Vec<(String, u64)>> {
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let t = self.db.table(&self.name)?;
        for b in t.scan_where(&["namespace"], &visible("", now_ms()))? {
            let b = b?;
            for i in 0..b.num_rows() {
                let r = Row::from_batch(&b, i);
                *counts.entry(text_of(r.get("namespace")).unwrap_or_default()).or_default() += 1;
            }
        }
        Ok(counts.into_iter().collect())
    }

    /// Checks a namespace prefix and a filter of a read.
    fn check_read(&self, namespace: &str, filter: Option<&Filter>) -> Res<()> {
        self.check_namespace(namespace, true)?;
        if let Some(f) = filter {
            f.validate().map_err(|r| self.invalid(r))?;
        }
        Ok(())
    }

    /// Live items of the namespace subtree passing `filter`, sorted by id.
    fn live(
        &self,
        namespace: &str,
        filter: Option<&Filter>,
        after: Option<u64>,
    ) -> Res<Vec<MemoryItem>> {
        self.check_read(namespace, filter)?;
        let mut pred = visible(namespace, now_ms());
        if let Some(a) = after {
            pred = Predicate::And(vec![pred, Predicate::cmp("_id", CmpOp::Gt, a)]);
        }
        let t = self.db.table(&self.name)?;
        let mut out = Vec::new();
        for b in t.scan_where(&COLUMNS, &pred)? {
            let b = b?;
            for i in 0..b.num_rows() {
                let item = item_of(&Row::from_batch(&b, i));
                if filter.is_none_or(|f| f.matches(&item.metadata)) {
                    out.push(item);
                }
            }
        }
        out.sort_by_key(|i| i.id);
        Ok(out)
    }

    /// The ids of the live items of the namespace subtree passing `filter`, ascending
    /// (reads `_id`, and `metadata` only when there is a filter).
    fn candidate_ids(&self, t: &Table, pred: &Predicate, filter: Option<&Filter>) -> Res<Vec<u64>> {
        let cols: &[&str] = if filter.is_some() { &["_id", "metadata"] } else { &["_id"] };
        let mut ids = Vec::new();
        for b in t.scan_where(cols, pred)? {
            let b = b?;
            for i in 0..b.num_rows() {
                let r = Row::from_batch(&b, i);
                if filter.is_none_or(|f| f.matches(&json_of(r.get("metadata")))) {
                    ids.extend(r.id());
                }
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Changes an item; with `expected_version`, only if it is still at that version
    /// ([`MemoryError::Conflict`] otherwise). Returns the new version.
    pub fn update(&self, id: u64, change: MemoryUpdate, expected_version: Option<u64>) -> Res<u64> {
        if let Some(t) = &change.text {
            self.check_text(t)?;
        }
        let meta = match &change.metadata {
            Some(m) => Some(self.check_metadata(m)?),
            None => None,
        };
        let vector = match (&change.vector, &change.text) {
            (Some(v), _) => {
                self.check_vector(v)?;
                Some(v.clone())
            }
            (None, Some(t)) => self.embed_one(t)?,
            (None, None) => None,
        };
        let now = now_ms();
        self.txn(|_, items, hist| {
            let Some(old) = items.get(id)?.map(|r| item_of(&r)).filter(|i| !expired(i, now)) else {
                return Err(MemoryError::NotFound {
                    store: self.name.clone(),
                    what: id.to_string(),
                }
                .into());
            };
            if let Some(e) = expected_version.filter(|e| *e != old.version) {
                return Err(MemoryError::Conflict {
                    store: self.name.clone(),
                    id,
                    expected: e,
                    actual: old.version,
                }
                .into());
            }
            let version = old.version + 1;
            let mut row = Row::new().set("version", version as i64).set("updated_ms", now);
            if let Some(t) = &change.text {
                row = row.set("text", t.as_str()).set("hash", content_hash(t));
            }
            if let Some(m) = &meta {
                row = row.set("metadata", m.clone().map_or(Value::Null, Value::Str));
            }
            if let Some(v) = &vector {
                row = row.set("embedding", Value::Vector(v.clone()));
            }
            if let Some(a) = change.archived {
                row = row.set("archived", a);
            }
            items.update(id, row)?;
            if let Some(t) = &change.text {
                self.note_hash(&old.namespace, content_hash(t), id);
            }
            Self::keep_creation(hist, &old)?;
            let old_meta = meta_text(&old.metadata);
            let new_text = change.text.as_deref().unwrap_or(&old.text);
            let new_meta = match &meta {
                Some(m) => m.clone(),
                None => old_meta.clone(),
            };
            hist.insert_row(Self::history_row(
                id,
                version as i64,
                "update",
                Some((&old.text, old_meta.as_deref())),
                Some((new_text, new_meta.as_deref())),
                now,
            ))?;
            Ok(version)
        })
    }

    /// Deletes the item with this id (from the table and its indexes); false if none.
    pub fn forget(&self, id: u64) -> Res<bool> {
        self.forget_where("delete", |t| Ok(t.get(id)?.map(|r| item_of(&r)).into_iter().collect()))
            .map(|n| n == 1)
    }

    /// Deletes the item under `key` in `namespace`; false if none.
    pub fn forget_key(&self, namespace: &str, key: &str) -> Res<bool> {
        self.forget_where("delete", |t| Ok(find_key(t, namespace, key)?.into_iter().collect()))
            .map(|n| n == 1)
    }

    /// Deletes every item of the store, in every namespace (history entries are kept, one
    /// `delete` each); returns how many. `confirm` must be true — a guard against clearing
    /// by accident (false is [`MemoryError::Invalid`] and deletes nothing).
    pub fn clear(&self, confirm: bool) -> Res<u64> {
        if !confirm {
            return Err(self.invalid("clear deletes every item of the store: pass confirm = true"));
        }
        self.forget_where("delete", |t| {
            let mut out = Vec::new();
            for b in t.scan_columns(&COLUMNS)? {
                let b = b?;
                for i in 0..b.num_rows() {
                    out.push(item_of(&Row::from_batch(&b, i)));
                }
            }
            Ok(out)
        })
    }

    /// Drops the vectors of the items in `namespace` or below it last updated before
    /// `before_ms` (ms since the epoch), to save space: they stay readable, listable and
    /// found by keyword recall, but no longer by vector recall (nor near dedupe). Returns
    /// how many items lost a vector. Not a new version (no history entry).
    pub fn compress(&self, namespace: &str, before_ms: i64) -> Res<u64> {
        self.check_namespace(namespace, true)?;
        let mut pred = vec![
            Predicate::cmp("updated_ms", CmpOp::Lt, before_ms),
            Predicate::IsNull { column: "embedding".into(), negated: true },
        ];
        if !namespace.is_empty() {
            pred.push(namespace_predicate(namespace));
        }
        self.txn(|_, items, _| {
            let mut ids = Vec::new();
            for b in items.scan_where(&["_id"], &Predicate::And(pred))? {
                let b = b?;
                for i in 0..b.num_rows() {
                    ids.extend(Row::from_batch(&b, i).id());
                }
            }
            let mut n = 0;
            for id in ids {
                n += u64::from(items.update(id, Row::new().set("embedding", Value::Null))?);
            }
            Ok(n)
        })
    }

    /// Deletes every item (archived and expired ones too) in `namespace` or below it whose
    /// metadata passes `filter`; returns how many.
    pub fn forget_namespace(&self, namespace: &str, filter: Option<&Filter>) -> Res<u64> {
        self.check_namespace(namespace, false)?;
        self.check_read(namespace, filter)?;
        self.forget_where("delete", |t| {
            let mut out = Vec::new();
            for b in t.scan_where(&COLUMNS, &namespace_predicate(namespace))? {
                let b = b?;
                for i in 0..b.num_rows() {
                    let item = item_of(&Row::from_batch(&b, i));
                    if filter.is_none_or(|f| f.matches(&item.metadata)) {
                        out.push(item);
                    }
                }
            }
            Ok(out)
        })
    }

    /// Deletes the items `pick` chooses (inside the transaction), writing an `op` history
    /// entry for each.
    fn forget_where(
        &self,
        op: &str,
        pick: impl FnOnce(&Table) -> Res<Vec<MemoryItem>>,
    ) -> Res<u64> {
        let now = now_ms();
        self.txn(|_, items, hist| {
            let gone = pick(items)?;
            if gone.is_empty() {
                return Ok(0);
            }
            let ids: Vec<u64> = gone.iter().map(|i| i.id).collect();
            let n = items.delete_many(&ids)?;
            for i in &gone {
                Self::keep_creation(hist, i)?;
                let m = meta_text(&i.metadata);
                hist.insert_row(Self::history_row(
                    i.id,
                    0,
                    op,
                    Some((&i.text, m.as_deref())),
                    None,
                    now,
                ))?;
            }
            Ok(n)
        })
    }

    /// The changes of an item, oldest first (it may have been deleted since).
    ///
    /// The first is its creation (`create`, version 1, the text and metadata it was
    /// written with, at its creation time). That entry is stored only once the item
    /// changes; until then it is read from the item row, which still holds those values
    /// (see `keep_creation`). Both tables are read from one snapshot, so a concurrent
    /// first change cannot make the entry vanish between the two reads.
    pub fn history(&self, id: u64) -> Res<Vec<HistoryEntry>> {
        let conn = self.db.connect();
        conn.begin()?;
        let r = self.history_in(&conn, id);
        let _ = conn.rollback();
        r
    }

    fn history_in(&self, conn: &Connection, id: u64) -> Res<Vec<HistoryEntry>> {
        let t = conn.table(&self.history)?;
        let mut out = Vec::new();
        let cols = [
            "_id",
            "version",
            "op",
            "old_text",
            "new_text",
            "old_metadata",
            "new_metadata",
            "at_ms",
        ];
        for b in t.scan_where(&cols, &Predicate::eq("item", id))? {
            let b = b?;
            for i in 0..b.num_rows() {
                let r = Row::from_batch(&b, i);
                out.push((
                    r.id().unwrap_or(0),
                    HistoryEntry {
                        version: int_of(r.get("version")).max(0) as u64,
                        op: text_of(r.get("op")).unwrap_or_default(),
                        old_text: text_of(r.get("old_text")),
                        new_text: text_of(r.get("new_text")),
                        old_metadata: json_of(r.get("old_metadata")),
                        new_metadata: json_of(r.get("new_metadata")),
                        at_ms: int_of(r.get("at_ms")),
                    },
                ));
            }
        }
        out.sort_by_key(|(hid, _)| *hid);
        let mut entries: Vec<HistoryEntry> = out.into_iter().map(|(_, e)| e).collect();
        // The first `create` stays (a store written before creation rows became lazy can
        // hold a second, identical one: see `keep_creation`).
        let mut created = false;
        entries.retain(|e| e.op != "create" || !std::mem::replace(&mut created, true));
        if !created
            && let Some(item) = conn.table(&self.name)?.get(id)?.map(|r| item_of(&r))
            && item.version == 1
        {
            entries.insert(
                0,
                HistoryEntry {
                    version: 1,
                    op: "create".into(),
                    old_text: None,
                    new_text: Some(item.text),
                    old_metadata: Json::Null,
                    new_metadata: item.metadata,
                    at_ms: item.created_ms,
                },
            );
        }
        Ok(entries)
    }

    /// The best `k` live items for the request. Namespace, archive and expiry conditions
    /// run inside the scans (and the vector search) as storage predicates, the metadata
    /// filter picks candidate ids before any ranking, so `k` items that pass are returned
    /// whenever `k` exist; whole items are read only for the results.
    pub fn recall(&self, req: &Recall) -> Res<Vec<RecallHit>> {
        self.check_read(&req.namespace, req.filter.as_ref())?;
        if req.k == 0 {
            return Ok(Vec::new());
        }
        let t = self.db.table(&self.name)?;
        let pred = visible(&req.namespace, now_ms());
        // With a metadata filter, the candidates are an explicit id set.
        let filtered = match &req.filter {
            Some(f) => Some(self.candidate_ids(&t, &pred, Some(f))?),
            None => None,
        };
        let want_vec = !matches!(req.mode, RecallMode::Keyword);
        let want_kw = !matches!(req.mode, RecallMode::Vector);
        // Hybrid looks deeper in each channel than k, so fusion has material.
        let depth =
            if matches!(req.mode, RecallMode::Hybrid { .. }) { req.k.max(50) } else { req.k };
        let mut vec_hits: Vec<(u64, f32)> = Vec::new();
        if want_vec {
            let q = match &req.vector {
                Some(v) => {
                    self.check_vector(v)?;
                    Some(v.clone())
                }
                None if !req.query.trim().is_empty() => self.embed_one(&req.query)?,
                None => None,
            };
            if let Some(q) = q.filter(|q| q.iter().any(|x| *x != 0.0)) {
                let p = match &filtered {
                    Some(ids) => Predicate::id_set(ids.clone()),
                    None => pred.clone(),
                };
                let near = t
                    .batch_topk_with(
                        "embedding",
                        &[&q],
                        depth,
                        Metric::Cosine,
                        Some(&p),
                        req.precision,
                    )?
                    .pop()
                    .unwrap_or_default();
                for n in near {
                    let sim = 1.0 - n.distance;
                    if req.min_similarity.is_none_or(|m| sim >= m) {
                        vec_hits.push((n.id, sim));
                    }
                }
            } else if matches!(req.mode, RecallMode::Vector) {
                return Err(self.invalid(
                    "vector recall needs a query vector, or a query text and an embedder",
                ));
            }
        }
        let mut kw_hits: Vec<(u64, f32)> = Vec::new();
        if want_kw && !req.query.trim().is_empty() {
            let hits = t.search_text(&req.query, None)?;
            if !hits.is_empty() {
                let allowed = match filtered {
                    Some(ids) => ids,
                    None => self.candidate_ids(&t, &pred, None)?,
                };
                for h in hits {
                    if allowed.binary_search(&h.id).is_ok() {
                        kw_hits.push((h.id, h.score));
                        if kw_hits.len() == depth {
                            break;
                        }
                    }
                }
            }
        }
        let (kw_w, vec_w, rrf) = match req.mode {
            RecallMode::Hybrid { keyword_weight, vector_weight } => {
                (keyword_weight, vector_weight, true)
            }
            _ => (1.0, 1.0, false),
        };
        // (score, vector channel, keyword channel) per id.
        type Fused = (f32, Option<(usize, f32)>, Option<(usize, f32)>);
        let mut fused: HashMap<u64, Fused> = HashMap::new();
        for (rank, (id, sim)) in vec_hits.iter().enumerate() {
            let e = fused.entry(*id).or_default();
            e.1 = Some((rank + 1, *sim));
            e.0 += if rrf { vec_w / (60.0 + (rank + 1) as f32) } else { *sim };
        }
        for (rank, (id, bm25)) in kw_hits.iter().enumerate() {
            let e = fused.entry(*id).or_default();
            e.2 = Some((rank + 1, *bm25));
            e.0 += if rrf { kw_w / (60.0 + (rank + 1) as f32) } else { *bm25 };
        }
        let mut ranked: Vec<(u64, Fused)> = fused.into_iter().collect();
        ranked.sort_by(|a, b| b.1.0.total_cmp(&a.1.0).then(a.0.cmp(&b.0)));
        ranked.truncate(req.k);
        let ids: Vec<u64> = ranked.iter().map(|(id, _)| *id).collect();
        let rows = t.get_many_columns(&ids, &COLUMNS)?;
        let mut items: HashMap<u64, MemoryItem> = (0..rows.num_rows())
            .map(|i| item_of(&Row::from_batch(&rows, i)))
            .map(|it| (it.id, it))
            .collect();
        Ok(ranked
            .into_iter()
            .filter_map(|(id, (score, vector, keyword))| {
                items.remove(&id).map(|item| RecallHit { item, score, vector, keyword })
            })
            .collect())
    }
}

/// The items table's columns (after `_id`).
fn items_schema(dim: usize) -> Schema {
    Schema::new(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("namespace", DataType::Utf8, false),
        Field::new("text", DataType::Utf8, false),
        Field::new("metadata", DataType::Utf8, true),
        Field::new("embedding", crate::vector_type(dim), true),
        Field::new("hash", DataType::UInt64, false),
        Field::new("version", DataType::Int64, false),
        Field::new("created_ms", DataType::Int64, false),
        Field::new("updated_ms", DataType::Int64, false),
        Field::new("expires_ms", DataType::Int64, true),
        Field::new("archived", DataType::Boolean, false),
    ])
}

/// The history table's columns (after `_id`).
fn history_schema() -> Schema {
    Schema::new(vec![
        Field::new("item", DataType::UInt64, false),
        Field::new("version", DataType::Int64, false),
        Field::new("op", DataType::Utf8, false),
        Field::new("old_text", DataType::Utf8, true),
        Field::new("new_text", DataType::Utf8, true),
        Field::new("old_metadata", DataType::Utf8, true),
        Field::new("new_metadata", DataType::Utf8, true),
        Field::new("at_ms", DataType::Int64, false),
    ])
}

fn arrow_err(e: arrow_schema::ArrowError) -> crate::Error {
    crate::Error::from(basalt_storage::Error::arrow("memory store rows", e))
}

/// New items without a key (version 1), each with its namespace, as one batch of the
/// items table (`schema`: its user columns), built column by column: a single `remember` is
/// one row, and going through [`Row`]s first (a string per column name and a value per
/// cell, then the same arrays) was a measurable part of it.
fn new_items_batch(
    schema: &SchemaRef,
    constants: &Constants,
    ps: &[(&str, &Prepared)],
    dim: usize,
) -> Res<RecordBatch> {
    let n = ps.len();
    let (item, size) = match schema.field_with_name("embedding").map(|f| f.data_type()) {
        Ok(DataType::FixedSizeList(item, size)) if *size as usize == dim => (item.clone(), *size),
        _ => return Err(arrow_err(arrow_schema::ArrowError::SchemaError("vector type".into()))),
    };
    let (values, nulls) = match ps {
        // One item's vector is the batch's (a 1.5 KiB copy and allocation fewer).
        [(_, Prepared { vector: Some(v), .. })] => (v.clone(), None),
        _ => {
            let mut values = Vec::with_capacity(n * dim);
            let mut valid = Vec::with_capacity(n);
            for (_, p) in ps {
                match &p.vector {
                    Some(v) => values.extend_from_slice(v),
                    None => values.resize(values.len() + dim, 0.0),
                }
                valid.push(p.vector.is_some());
            }
            (ScalarBuffer::from(values), valid.contains(&false).then(|| NullBuffer::from(valid)))
        }
    };
    let values = Arc::new(Float32Array::new(values, None));
    let embedding = FixedSizeListArray::try_new(item, size, values, nulls).map_err(arrow_err)?;
    let small = SmallColumns::new(ps)?;
    let at: ArrayRef = Arc::new(small.at);
    let columns: Vec<ArrayRef> = vec![
        constants.get(&constants.null_text, n)?,
        Arc::new(small.namespace),
        Arc::new(small.text),
        Arc::new(small.metadata),
        Arc::new(embedding),
        Arc::new(small.hash),
        constants.get(&constants.one, n)?,
        at.clone(),
        at,
        Arc::new(small.expires),
        constants.get(&constants.no, n)?,
    ];
    RecordBatch::try_new(schema.clone(), columns).map_err(arrow_err)
}

/// The per-item columns of new items other than the vector, whose buffers are slices of
/// one allocation: built array by array they took two or three allocations per buffer
/// (the bytes, the shared handle, the array); this way a single `remember` makes 16
/// allocations fewer (`perf stat -e probe_libc:malloc` over `memory-bench --writes-only
/// 4000` less `--writes-only 2000`: 94 → 78 per item, the bench's item generation
/// included).
struct SmallColumns {
    namespace: StringArray,
    text: StringArray,
    metadata: StringArray,
    hash: UInt64Array,
    at: Int64Array,
    expires: Int64Array,
}

impl SmallColumns {
    /// String column `k` of an item: 0 namespace, 1 text, 2 metadata.
    fn string<'a>(item: &(&'a str, &'a Prepared), k: usize) -> Option<&'a str> {
        match k {
            0 => Some(item.0),
            1 => Some(item.1.text.as_str()),
            _ => item.1.meta.as_deref(),
        }
    }

    /// Refuses a batch whose namespaces, texts or metadata (`bytes`, in that order) add up
    /// to more than Arrow's 32-bit offsets address (2 GiB): refused, not wrapped.
    fn fit_offsets(n: usize, bytes: [usize; 3]) -> Res<()> {
        match (0..3).find(|k| bytes[*k] > i32::MAX as usize) {
            None => Ok(()),
            Some(k) => {
                let what = ["namespaces", "texts", "metadata"][k];
                Err(arrow_err(arrow_schema::ArrowError::InvalidArgumentError(format!(
                    "{n} items whose {what} add up to more than 2 GiB: write them in smaller \
                     batches"
                ))))
            }
        }
    }

    fn new(ps: &[(&str, &Prepared)]) -> Res<SmallColumns> {
        use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer, OffsetBuffer};
        let n = ps.len();
        let bytes = |k: usize| -> usize {
            ps.iter().filter_map(|p| Self::string(p, k)).map(str::len).sum()
        };
        Self::fit_offsets(n, [bytes(0), bytes(1), bytes(2)])?;
        let pad = |len: usize| len.next_multiple_of(8);
        let (offsets, words, bits) = (pad(4 * (n + 1)), 8 * n, pad(n.div_ceil(8)));
        let total = 3 * offsets + 3 * words + 2 * bits + bytes(0) + bytes(1) + bytes(2);
        // Layout: the three string columns' offsets, hash / at / expires, two validity
        // bitmaps (metadata, expires), then the three string columns' bytes. Every section
        // but the last three starts at a multiple of 8 bytes, as the 4- and 8-byte values
        // need (the buffer itself is 64-byte aligned).
        let mut buf = MutableBuffer::with_capacity(total);
        for k in 0..3 {
            let mut end = 0i32;
            buf.push(end);
            for p in ps {
                end += Self::string(p, k).map_or(0, str::len) as i32;
                buf.push(end);
            }
            buf.extend_zeros(offsets - 4 * (n + 1));
        }
        buf.extend(ps.iter().map(|p| p.1.hash));
        buf.extend(ps.iter().map(|p| p.1.at));
        buf.extend(ps.iter().map(|p| p.1.expires.unwrap_or(0)));
        let valid =
            |p: &Prepared, k: usize| if k == 0 { p.meta.is_some() } else { p.expires.is_some() };
        for k in 0..2 {
            for chunk in ps.chunks(8) {
                let byte = chunk
                    .iter()
                    .enumerate()
                    .fold(0u8, |b, (i, p)| b | (u8::from(valid(p.1, k)) << i));
                buf.push(byte);
            }
            buf.extend_zeros(bits - n.div_ceil(8));
        }
        let values_at = buf.len();
        for k in 0..3 {
            for p in ps {
                buf.extend_from_slice(Self::string(p, k).unwrap_or("").as_bytes());
            }
        }
        let buf: Buffer = buf.into();
        let bits_at = 3 * offsets + 3 * words;
        let nulls = |k: usize| {
            ps.iter().any(|p| !valid(p.1, k)).then(|| {
                NullBuffer::new(BooleanBuffer::new(buf.clone(), 8 * (bits_at + k * bits), n))
            })
        };
        let mut values_from = values_at;
        let mut string = |k: usize, nulls: Option<NullBuffer>| {
            let offs = OffsetBuffer::new(ScalarBuffer::new(buf.clone(), k * offsets / 4, n + 1));
            let len = bytes(k);
            let values = buf.slice_with_length(values_from, len);
            values_from += len;
            StringArray::try_new(offs, values, nulls).map_err(arrow_err)
        };
        let at = |k: usize| (3 * offsets + k * words) / 8;
        Ok(SmallColumns {
            namespace: string(0, None)?,
            text: string(1, None)?,
            metadata: string(2, nulls(0))?,
            hash: UInt64Array::new(ScalarBuffer::new(buf.clone(), at(0), n), None),
            at: Int64Array::new(ScalarBuffer::new(buf.clone(), at(1), n), None),
            expires: Int64Array::new(ScalarBuffer::new(buf.clone(), at(2), n), nulls(1)),
        })
    }
}

/// Columns with one value for every new item, built once for [`Constants::ROWS`] rows and sliced for each write (one-row writes built them anew
/// every time, a few allocations each).
struct Constants {
    /// NULL text (`key`).
    null_text: Constant,
    /// 1 (`version`).
    one: Constant,
    /// false (`archived`).
    no: Constant,
}

/// One constant column: [`Constants::ROWS`] rows, and its first row alone (a slice is an
/// allocation; a one-row write takes a reference to the same array every time).
struct Constant {
    rows: ArrayRef,
    one_row: ArrayRef,
}

impl Constant {
    fn new(rows: ArrayRef) -> Constant {
        Constant { one_row: rows.slice(0, 1), rows }
    }
}

impl Constants {
    const ROWS: usize = 256;

    fn new() -> Constants {
        let n = Self::ROWS;
        Constants {
            null_text: Constant::new(Arc::new(StringArray::new_null(n))),
            one: Constant::new(Arc::new(Int64Array::from(vec![1; n]))),
            no: Constant::new(Arc::new(BooleanArray::from(vec![false; n]))),
        }
    }

    /// `column` (one of this struct's) for `n` rows.
    fn get(&self, column: &Constant, n: usize) -> Res<ArrayRef> {
        if n == 1 {
            return Ok(column.one_row.clone());
        }
        if n <= Self::ROWS {
            return Ok(column.rows.slice(0, n));
        }
        // Longer writes repeat the first row.
        let first = arrow_array::UInt32Array::from(vec![0u32; n]);
        arrow_select::take::take(column.rows.as_ref(), &first, None).map_err(arrow_err)
    }
}

/// A checked new item.
struct Prepared {
    /// When it was checked: its creation (or update) time, ms since the epoch.
    at: i64,
    text: String,
    hash: u64,
    meta: Option<String>,
    /// Shared with the items batch of a one-item write (no copy).
    vector: Option<ScalarBuffer<f32>>,
    expires: Option<i64>,
}

/// Not archived and not expired at `now`.
fn live_conditions(now: i64) -> Vec<Predicate> {
    vec![
        Predicate::eq("archived", false),
        Predicate::Or(vec![
            Predicate::IsNull { column: "expires_ms".into(), negated: false },
            Predicate::cmp("expires_ms", CmpOp::Gt, now),
        ]),
    ]
}

/// What every read sees: not archived, not expired at `now`, in the namespace subtree
/// (`""`: all).
fn visible(namespace: &str, now: i64) -> Predicate {
    let mut p = live_conditions(now);
    if !namespace.is_empty() {
        p.push(namespace_predicate(namespace));
    }
    Predicate::And(p)
}

/// `namespace = ns OR namespace LIKE 'ns/%'`.
fn namespace_predicate(ns: &str) -> Predicate {
    Predicate::Or(vec![
        Predicate::eq("namespace", ns),
        Predicate::LikePrefix {
            column: "namespace".into(),
            prefix: format!("{ns}/"),
            negated: false,
        },
    ])
}

fn find_key(t: &Table, namespace: &str, key: &str) -> Res<Option<MemoryItem>> {
    let p = Predicate::And(vec![Predicate::eq("namespace", namespace), Predicate::eq("key", key)]);
    for b in t.scan_where(&COLUMNS, &p)? {
        let b = b?;
        if b.num_rows() > 0 {
            return Ok(Some(item_of(&Row::from_batch(&b, 0))));
        }
    }
    Ok(None)
}

fn expired(i: &MemoryItem, now: i64) -> bool {
    i.expires_ms.is_some_and(|e| e <= now)
}

fn meta_text(m: &Json) -> Option<String> {
    (!m.is_null()).then(|| m.to_string())
}

fn text_of(v: Option<&Value>) -> Option<String> {
    match v {
        Some(Value::Str(s)) => Some(s.clone()),
        _ => None,
    }
}

fn int_of(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Int(i)) => *i,
        Some(Value::UInt(u)) => *u as i64,
        _ => 0,
    }
}

fn json_of(v: Option<&Value>) -> Json {
    text_of(v).and_then(|s| serde_json::from_str(&s).ok()).unwrap_or(Json::Null)
}

fn item_of(r: &Row) -> MemoryItem {
    MemoryItem {
        id: r.id().unwrap_or(0),
        key: text_of(r.get("key")),
        namespace: text_of(r.get("namespace")).unwrap_or_default(),
        text: text_of(r.get("text")).unwrap_or_default(),
        metadata: json_of(r.get("metadata")),
        vector: match r.get("embedding") {
            Some(Value::Vector(v)) => Some(v.clone()),
            _ => None,
        },
        content_hash: match r.get("hash") {
            Some(Value::UInt(u)) => *u,
            _ => 0,
        },
        version: int_of(r.get("version")).max(0) as u64,
        created_ms: int_of(r.get("created_ms")),
        updated_ms: int_of(r.get("updated_ms")),
        expires_ms: match r.get("expires_ms") {
            Some(Value::Int(i)) => Some(*i),
            _ => None,
        },
        archived: matches!(r.get("archived"), Some(Value::Bool(true))),
    }
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
