//! Basalt full-text search: one tantivy index per table, keyed by the row's `_id`.
//!
//! This crate owns the tantivy side only: the index schema (one text field per indexed
//! column, plus `_id` as an indexed and fast `u64`, no stored fields), the tokenizers, bulk
//! builds, per-row upkeep (`add` / `delete` by `_id`), commits that carry a [`Payload`]
//! (the log position and row-id counter the index reflects, so the owner can replay what
//! came after a crash), query parsing and BM25 search returning `(_id, score)`.
//!
//! It must not know about tables, logs or SQL: *which* rows to add or delete and *when* to
//! commit are decided by `basalt-storage`, which keeps the index in step with the data.

mod bulk;
mod lazy;

pub use bulk::{BulkBuild, SEGMENT_DOCS, SEGMENT_TEXT_BYTES, TextColumn};

use std::collections::BinaryHeap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use parking_lot::Mutex;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::query::{BooleanQuery, FuzzyTermQuery, Occur, Query, QueryParser, TermQuery};
use tantivy::schema::{
    FAST, Field, INDEXED, IndexRecordOption, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{
    Language, LowerCaser, NgramTokenizer, RemoveLongFilter, SimpleTokenizer, Stemmer, TextAnalyzer,
};
use tantivy::{DocId, Index, IndexReader, IndexWriter, ReloadPolicy, Score, SegmentReader, Term};

/// Name of the `_id` field in every index.
pub const ID_FIELD: &str = "_id";

/// Memory budget of one indexing thread (tantivy needs at least 15 MB per thread).
const THREAD_BUDGET: usize = 64 << 20;
/// Memory budget of a one-thread writer set by [`FtsIndex::set_writer_threads`] (an index
/// opened or bulk-built gets one thread of [`THREAD_BUDGET`]).
const UPKEEP_BUDGET: usize = 24 << 20;
/// Tokens longer than this many bytes are dropped (they are not words).
const MAX_TOKEN_BYTES: usize = 64;

/// Errors of the full-text layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The query text could not be parsed or uses what the index does not support.
    #[error("full-text query {query:?}: {reason}")]
    Query {
        /// The query text.
        query: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An unknown tokenizer name.
    #[error("unknown full-text tokenizer '{0}' (expected default, english or ngram)")]
    UnknownTokenizer(String),
    /// A column the index does not hold.
    #[error("column '{0}' is not in the full-text index")]
    UnknownColumn(String),
    /// An index definition that cannot be built.
    #[error("invalid full-text index: {0}")]
    Invalid(String),
    /// The index files are not what this version writes (or are damaged).
    #[error("full-text index at {path}: {reason}")]
    Damaged {
        /// The index directory.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// An error inside tantivy (I/O, a lock, a damaged file).
    #[error("full-text index: {action}: {source}")]
    Tantivy {
        /// What was being done.
        action: &'static str,
        /// The cause.
        #[source]
        source: tantivy::TantivyError,
    },
}

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn tv(action: &'static str) -> impl FnOnce(tantivy::TantivyError) -> Error {
    move |source| Error::Tantivy { action, source }
}

/// Runs a tantivy call that reads index files, turning a panic into [`Error::Damaged`].
/// Used around opening and searching: tantivy trusts the bytes of its segment files and
/// can panic on damaged ones the checksums did not cover (or on files changed after the
/// open); the caller's process and its tables must survive that.
fn guarded<T>(path: Option<&Path>, action: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            Err(Error::Damaged {
                path: path.map(Path::to_path_buf).unwrap_or_default(),
                reason: format!("tantivy failed to {action}: {what}"),
            })
        }
    }
}

/// Checks every file of every committed segment of `index` against the CRC in its footer
/// (a missing or truncated file counts as damaged); `meta.json` was checked by reading it
/// (see the `lazy` module). `Err` names the damaged files.
fn verify_files(index: &Index, path: Option<&Path>) -> Result<()> {
    use tantivy::Directory;
    use tantivy::index::SegmentComponent as C;
    use tantivy_common::HasLen;
    let metas = index.load_metas().map_err(tv("read the index metadata"))?;
    let dir = index.directory();
    let mut bad = Vec::new();
    for seg in &metas.segments {
        let mut components =
            vec![C::Postings, C::Positions, C::FastFields, C::FieldNorms, C::Terms, C::Store];
        if seg.has_deletes() {
            components.push(C::Delete);
        }
        for c in components {
            let p = seg.relative_path(c);
            // Footers need 8 bytes; tantivy's reader would panic on fewer.
            let intact = dir.open_read(&p).is_ok_and(|f| f.len() >= 8)
                && dir.validate_checksum(&p).unwrap_or(false);
            if !intact {
                bad.push(p.display().to_string());
            }
        }
    }
    if bad.is_empty() {
        return Ok(());
    }
    Err(Error::Damaged {
        path: path.map(Path::to_path_buf).unwrap_or_default(),
        reason: format!("damaged or missing files: {}", bad.join(", ")),
    })
}

/// How text is cut into terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tokenizer {
    /// Unicode words (letters and digits), lowercased.
    #[default]
    Default,
    /// Unicode words, lowercased, reduced to their English stem ("running" → "run").
    English,
    /// Overlapping character 2- and 3-grams of the lowercased text, for languages written
    /// without spaces (Chinese, Japanese) and for substring-like matching.
    Ngram,
}

impl Tokenizer {
    /// The name used in `WITH (tokenizer = …)` and stored in the manifest.
    pub fn name(self) -> &'static str {
        match self {
            Tokenizer::Default => "default",
            Tokenizer::English => "english",
            Tokenizer::Ngram => "ngram",
        }
    }

    fn analyzer(self) -> Result<TextAnalyzer> {
        Ok(match self {
            Tokenizer::Default => TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
                .filter(LowerCaser)
                .build(),
            Tokenizer::English => TextAnalyzer::builder(SimpleTokenizer::default())
                .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
                .filter(LowerCaser)
                .filter(Stemmer::new(Language::English))
                .build(),
            Tokenizer::Ngram => TextAnalyzer::builder(
                NgramTokenizer::all_ngrams(2, 3).map_err(tv("make the n-gram tokenizer"))?,
            )
            .filter(LowerCaser)
            .build(),
        })
    }

    /// The tokens of `text`, as the index stores them (for tests and reference matchers).
    pub fn tokens(self, text: &str) -> Result<Vec<String>> {
        let mut a = self.analyzer()?;
        let mut s = a.token_stream(text);
        let mut out = Vec::new();
        while s.advance() {
            out.push(s.token().text.clone());
        }
        Ok(out)
    }
}

impl FromStr for Tokenizer {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "default" | "simple" => Ok(Tokenizer::Default),
            "english" | "en_stem" | "en" | "stem" => Ok(Tokenizer::English),
            "ngram" | "cjk" => Ok(Tokenizer::Ngram),
            _ => Err(Error::UnknownTokenizer(s.to_string())),
        }
    }
}

/// What an index commit reflects; stored in tantivy's commit payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Payload {
    /// Every logged change up to this log sequence number is in the index.
    pub lsn: u64,
    /// Every row with a smaller `_id` that existed at the commit is in the index.
    pub next_row_id: u64,
}

impl Payload {
    const PREFIX: &'static str = "basalt-fts 1";

    fn encode(self) -> String {
        format!("{} lsn={} next_row_id={}", Self::PREFIX, self.lsn, self.next_row_id)
    }

    fn decode(s: &str) -> Option<Payload> {
        let rest = s.strip_prefix(Self::PREFIX)?.trim();
        let mut p = Payload::default();
        let mut seen = 0;
        for part in rest.split(' ') {
            let (k, v) = part.split_once('=')?;
            let v: u64 = v.parse().ok()?;
            match k {
                "lsn" => p.lsn = v,
                "next_row_id" => p.next_row_id = v,
                _ => return None,
            }
            seen += 1;
        }
        (seen == 2).then_some(p)
    }
}

/// One search result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// The row's `_id`.
    pub id: u64,
    /// Its BM25 score (higher is better).
    pub score: f32,
}

/// Where an index lives.
#[derive(Debug, Clone)]
pub enum Location {
    /// Files in this directory (created if missing).
    Dir(PathBuf),
    /// In memory, gone with the handle (for `:memory:` databases).
    Memory,
}

/// A full-text index over some text columns of one table.
pub struct FtsIndex {
    index: Index,
    id_field: Field,
    /// The text field of each indexed column, in column order.
    fields: Vec<Field>,
    /// The columns' names as queries spell them (`name:word`); renamable.
    names: parking_lot::RwLock<Vec<String>>,
    tokenizer: Tokenizer,
    /// The tokenizer's analyzer (upkeep segments are cut with it).
    analyzer: TextAnalyzer,
    reader: IndexReader,
    /// The upkeep writer, opened at its first use.
    writer: Mutex<Writer>,
    path: Option<PathBuf>,
    /// The directory, for files on disk (commits may defer their syncs).
    dir: Option<lazy::LazyDir>,
}

impl std::fmt::Debug for FtsIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FtsIndex")
            .field("columns", &self.columns())
            .field("tokenizer", &self.tokenizer)
            .field("path", &self.path)
            .finish()
    }
}

/// The writer of an index, opened when first needed.
///
/// A tantivy writer is not free to hold: opening one starts its indexing threads (each
/// allocating and zeroing a term hash table and arenas, several MiB), a segment updater and
/// a merge pool. A database opens every table's index, yet most opens write no text before
/// the first search or flush, and some never do (reopening a 500-item memory store took
/// three times as long with the writer opened at once). So the writer is opened by the
/// first call that needs it ([`FtsIndex::add_many`], [`FtsIndex::delete_many`], a
/// commit); a rollback or drop of a writer never opened has nothing to undo.
enum Writer {
    /// Opened read-only: no writer, ever.
    ReadOnly,
    /// Writable, the writer not opened yet: `threads` indexing threads, `budget` bytes.
    Unopened { threads: usize, budget: usize },
    /// The open writer (boxed: it is large, the other states are a few words).
    Open(Box<Upkeep>),
}

/// An open upkeep writer, and the `_id`s deleted through it that its delete queue may not
/// have flushed yet.
///
/// Rows given to [`FtsIndex::add_many`] become a segment the writer adopts
/// (`IndexWriter::add_segment`, see `bulk::UpkeepRows`). An adopted segment's documents
/// carry no operation stamps, so every delete the writer's queue has not flushed into a
/// block yet applies to them — including one issued *before* the rows were added, which
/// through the document writer would not (tantivy flushes its queue when a commit
/// advances the segments' delete cursors). A row whose `_id` is among those is therefore
/// given to the document writer instead (an update: delete, then add again, before a
/// commit), and the set is emptied by a commit that leaves the index with a segment (its
/// deletes were flushed on the way) or by a rollback (a new writer, a new queue).
struct Upkeep {
    writer: IndexWriter,
    deleted: std::collections::HashSet<u64>,
}

/// Bytes of indexing memory for a writer of `threads` threads opened by
/// [`FtsIndex::set_writer_threads`].
fn writer_budget(threads: usize) -> usize {
    if threads <= 1 { UPKEEP_BUDGET } else { THREAD_BUDGET * threads }
}

/// The tantivy name of the `i`-th indexed column.
fn field_name(i: usize) -> String {
    format!("__c{i}")
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// An index schema, its `_id` field, and the text field of each column.
type Fields = (Schema, Field, Vec<Field>);

fn schema_for(columns: &[String]) -> Result<Fields> {
    if columns.is_empty() {
        return Err(Error::Invalid("an index needs at least one column".into()));
    }
    let mut b = Schema::builder();
    let id_field = b.add_u64_field(ID_FIELD, INDEXED | FAST);
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer("basalt")
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let mut fields = Vec::with_capacity(columns.len());
    for (i, c) in columns.iter().enumerate() {
        if columns[..i].contains(c) {
            return Err(Error::Invalid(format!("column '{c}' is listed twice")));
        }
        // Field names are positional so that column renames never touch the index.
        fields.push(b.add_text_field(&field_name(i), text.clone()));
    }
    Ok((b.build(), id_field, fields))
}

impl FtsIndex {
    fn finish(
        index: Index,
        columns: &[String],
        tokenizer: Tokenizer,
        writer_threads: Option<usize>,
        path: Option<PathBuf>,
        dir: Option<lazy::LazyDir>,
    ) -> Result<FtsIndex> {
        let analyzer = tokenizer.analyzer()?;
        index.tokenizers().register("basalt", analyzer.clone());
        let (schema, id_field, fields) = schema_for(columns)?;
        if index.schema() != schema {
            return Err(Error::Damaged {
                path: path.clone().unwrap_or_default(),
                reason: "its schema is not the one of this index definition".into(),
            });
        }
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(tv("open a reader"))?;
        let writer = match writer_threads {
            Some(n) => Writer::Unopened { threads: n.max(1), budget: THREAD_BUDGET * n.max(1) },
            None => Writer::ReadOnly,
        };
        Ok(FtsIndex {
            index,
            id_field,
            fields,
            names: parking_lot::RwLock::new(columns.to_vec()),
            tokenizer,
            analyzer,
            reader,
            writer: Mutex::new(writer),
            path,
            dir,
        })
    }

    /// Creates an empty index over `columns`, writable by `writer_threads` indexing threads
    /// (more than one only to add many rows at once, then [`FtsIndex::set_writer_threads`];
    /// an index over existing rows is built faster by [`FtsIndex::bulk`]).
    pub fn create(
        location: &Location,
        columns: &[String],
        tokenizer: Tokenizer,
        writer_threads: usize,
    ) -> Result<FtsIndex> {
        let (index, path, lazy) = Self::create_index(location, columns)?;
        Self::finish(index, columns, tokenizer, Some(writer_threads), path, lazy)
    }

    /// Starts building a new index over `columns` from existing rows: tantivy segments
    /// are written straight from the rows given to [`BulkBuild::add`], on every core, and
    /// [`BulkBuild::finish`] commits them once (see the `bulk` module).
    pub fn bulk(
        location: &Location,
        columns: &[String],
        tokenizer: Tokenizer,
    ) -> Result<BulkBuild> {
        let (index, path, lazy) = Self::create_index(location, columns)?;
        BulkBuild::new(index, columns, tokenizer, path, lazy)
    }

    /// A new, empty tantivy index at `location` with the schema of `columns`.
    fn create_index(
        location: &Location,
        columns: &[String],
    ) -> Result<(Index, Option<PathBuf>, Option<lazy::LazyDir>)> {
        let (schema, ..) = schema_for(columns)?;
        Ok(match location {
            Location::Memory => (Index::create_in_ram(schema), None, None),
            Location::Dir(dir) => {
                std::fs::create_dir_all(dir).map_err(|e| Error::Tantivy {
                    action: "create the index directory",
                    source: tantivy::TantivyError::from(e),
                })?;
                let d = lazy::LazyDir::open(dir).map_err(tv("open the index directory"))?;
                let index = Index::create(d.clone(), schema, tantivy::IndexSettings::default())
                    .map_err(tv("create the index"))?;
                (index, Some(dir.clone()), Some(d))
            }
        })
    }

    /// Opens an existing index; `writable` allows writes (one upkeep thread, its writer
    /// opened at the first write or commit).
    pub fn open(
        dir: &Path,
        columns: &[String],
        tokenizer: Tokenizer,
        writable: bool,
    ) -> Result<FtsIndex> {
        guarded(Some(dir), "open the index", || {
            let d = lazy::LazyDir::open(dir).map_err(tv("open the index directory"))?;
            let index = Index::open(d.clone()).map_err(tv("open the index"))?;
            // Every file is checked once before tantivy reads it: it does not check its
            // segment files' checksums itself, and reads damaged ones into wrong answers
            // or panics.
            verify_files(&index, Some(dir))?;
            Self::finish(
                index,
                columns,
                tokenizer,
                writable.then_some(1),
                Some(dir.to_path_buf()),
                Some(d),
            )
        })
    }

    /// Replaces the writer by one with `threads` indexing threads, opened at its first use
    /// (pending changes are dropped: commit first). Refused on a read-only index.
    pub fn set_writer_threads(&self, threads: usize) -> Result<()> {
        let mut w = self.writer.lock();
        let old = match std::mem::replace(&mut *w, Writer::ReadOnly) {
            Writer::ReadOnly => return Err(read_only()),
            Writer::Unopened { .. } => None,
            Writer::Open(old) => Some(old),
        };
        *w = Writer::Unopened { threads: threads.max(1), budget: writer_budget(threads) };
        // (Still under the lock: a new writer cannot open while the old one holds the
        // directory's writer lock.)
        if let Some(old) = old {
            old.writer.wait_merging_threads().map_err(tv("finish merges"))?;
        }
        Ok(())
    }

    /// Whether the upkeep writer has been opened (by a write or commit since the index was
    /// opened, or since [`FtsIndex::set_writer_threads`]).
    pub fn writer_is_open(&self) -> bool {
        matches!(*self.writer.lock(), Writer::Open(_))
    }

    /// The indexed columns, in order.
    pub fn columns(&self) -> Vec<String> {
        self.names.read().clone()
    }

    /// The payload of the last commit (`None` for an index never committed with one).
    pub fn payload(&self) -> Result<Option<Payload>> {
        let metas = self.index.load_metas().map_err(tv("read the index metadata"))?;
        match metas.payload {
            None => Ok(None),
            Some(p) => Payload::decode(&p).map(Some).ok_or_else(|| Error::Damaged {
                path: self.path.clone().unwrap_or_default(),
                reason: format!("unreadable commit payload {p:?}"),
            }),
        }
    }

    /// Runs `f` on the writer, opening it first if this is its first use.
    fn with_writer<T>(&self, f: impl FnOnce(&mut Upkeep) -> Result<T>) -> Result<T> {
        let mut w = self.writer.lock();
        if let Writer::Unopened { threads, budget } = *w {
            let writer = self
                .index
                .writer_with_num_threads(threads, budget)
                .map_err(tv("open the writer"))?;
            *w = Writer::Open(Box::new(Upkeep { writer, deleted: Default::default() }));
        }
        match &mut *w {
            Writer::Open(u) => f(u),
            _ => Err(read_only()),
        }
    }

    /// Adds one row: its `_id` and the text of each indexed column, in column order
    /// (`None` for NULL). Visible to searches after the next [`FtsIndex::commit`].
    pub fn add(&self, id: u64, texts: &[Option<&str>]) -> Result<()> {
        self.add_many(std::iter::once((id, texts.iter().copied())))
    }

    /// Adds many rows (see [`FtsIndex::add`]) under one writer lock.
    pub fn add_many<'a, I, T>(&self, rows: I) -> Result<()>
    where
        I: IntoIterator<Item = (u64, T)>,
        T: IntoIterator<Item = Option<&'a str>>,
    {
        let mut buffered = bulk::UpkeepRows::new(self.fields.len());
        for (id, texts) in rows {
            buffered.push(id, texts)?;
        }
        self.with_writer(|u| {
            if buffered.ids().iter().any(|id| u.deleted.contains(id)) {
                // A delete of one of these `_id`s may still be unflushed (see `Upkeep`).
                for doc in buffered.documents(self.id_field, &self.fields) {
                    u.writer.add_document(doc).map_err(tv("add a document"))?;
                }
                return Ok(());
            }
            // One new segment, the files tantivy's document writer would write for these
            // rows, adopted by the writer: the next commit publishes it, a rollback drops
            // it. Its files are written without syncing (remembered by the directory): a
            // synced commit syncs them first, an unsynced one leaves them as its own.
            let write = || {
                buffered.write_segment(
                    &self.index,
                    &self.analyzer,
                    self.tokenizer,
                    self.id_field,
                    &self.fields,
                )
            };
            let segment = match &self.dir {
                Some(d) => d.lazily(write)?,
                None => write()?,
            };
            match segment {
                Some(meta) => u.writer.add_segment(meta).map_err(tv("add a segment")),
                None => Ok(()),
            }
        })
    }

    /// Removes the row with this `_id` (if indexed) at the next commit.
    pub fn delete(&self, id: u64) -> Result<()> {
        self.delete_many(std::iter::once(id))
    }

    /// Removes many rows by `_id` at the next commit.
    pub fn delete_many(&self, ids: impl IntoIterator<Item = u64>) -> Result<()> {
        self.with_writer(|u| {
            for id in ids {
                u.writer.delete_term(Term::from_field_u64(self.id_field, id));
                u.deleted.insert(id);
            }
            Ok(())
        })
    }

    /// Makes every change so far durable and visible to searches, recording `payload`
    /// (files of earlier [`FtsIndex::commit_unsynced`] calls are synced first).
    pub fn commit(&self, payload: Payload) -> Result<()> {
        if let Some(d) = &self.dir {
            d.sync_pending().map_err(|e| Error::Tantivy {
                action: "sync unsynced commits",
                source: tantivy::TantivyError::from(e),
            })?;
        }
        self.commit_now(payload)
    }

    /// Makes every change so far visible to searches, recording `payload`, without syncing
    /// any file: it survives a killed process, and after a power failure its files may be
    /// torn (the next [`FtsIndex::commit`] syncs them; [`FtsIndex::files_intact`] checks).
    pub fn commit_unsynced(&self, payload: Payload) -> Result<()> {
        match &self.dir {
            Some(d) => d.lazily(|| self.commit_now(payload)),
            None => self.commit_now(payload),
        }
    }

    /// Whether every file the last commit names is present with a valid checksum.
    pub fn files_intact(&self) -> bool {
        guarded(self.path.as_deref(), "check the files", || verify_files(&self.index, None)).is_ok()
    }

    fn commit_now(&self, payload: Payload) -> Result<()> {
        self.with_writer(|u| {
            let mut prepared = u.writer.prepare_commit().map_err(tv("prepare a commit"))?;
            prepared.set_payload(&payload.encode());
            prepared.commit().map_err(tv("commit"))?;
            // Deletes are flushed by a commit that advances a segment's delete cursor: one
            // that leaves a segment had one to advance (see `Upkeep`).
            // (Unreadable metas keep the set: the slower path is never wrong.)
            if !u.deleted.is_empty()
                && self.index.load_metas().is_ok_and(|m| !m.segments.is_empty())
            {
                u.deleted.clear();
            }
            Ok(())
        })?;
        self.reload()
    }

    /// Drops every change since the last commit.
    pub fn rollback(&self) -> Result<()> {
        match &mut *self.writer.lock() {
            Writer::ReadOnly => Err(read_only()),
            // Nothing was written without a writer.
            Writer::Unopened { .. } => Ok(()),
            Writer::Open(u) => {
                u.writer.rollback().map_err(tv("roll back"))?;
                u.deleted.clear(); // a new writer, with a new delete queue
                Ok(())
            }
        }
    }

    /// Sees the latest commit (of this handle or, for read-only handles, of the writer).
    pub fn reload(&self) -> Result<()> {
        guarded(self.path.as_deref(), "reload the reader", || {
            self.reader.reload().map_err(tv("reload the reader"))
        })
    }

    /// Searches every indexed column; `limit` bounds the hits (`None`: every match). Hits
    /// come by descending score, ties by ascending `_id`.
    pub fn search(&self, query: &str, limit: Option<usize>) -> Result<Vec<Hit>> {
        let fields = self.fields.clone();
        self.search_fields(fields, query, limit)
    }

    /// Searches one column only (terms without a column name match in it).
    pub fn search_column(
        &self,
        column: &str,
        query: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Hit>> {
        let i = self
            .names
            .read()
            .iter()
            .position(|c| c == column)
            .ok_or_else(|| Error::UnknownColumn(column.to_string()))?;
        self.search_fields(vec![self.fields[i]], query, limit)
    }

    /// Renames the columns (same count and order; the index itself is unchanged).
    pub fn set_column_names(&self, names: Vec<String>) -> Result<()> {
        if names.len() != self.fields.len() {
            return Err(Error::Invalid(format!(
                "{} column names for an index of {} columns",
                names.len(),
                self.fields.len()
            )));
        }
        *self.names.write() = names;
        Ok(())
    }

    /// Rows in the index (deleted rows not counted).
    pub fn num_docs(&self) -> u64 {
        self.reader.searcher().num_docs()
    }

    fn search_fields(
        &self,
        fields: Vec<Field>,
        query: &str,
        limit: Option<usize>,
    ) -> Result<Vec<Hit>> {
        if limit == Some(0) {
            return Ok(Vec::new());
        }
        let q = self.parse(fields, query)?;
        let searcher = self.reader.searcher();
        let collector = HitCollector { limit };
        let mut hits = guarded(self.path.as_deref(), "search", || {
            searcher.search(q.as_ref(), &collector).map_err(tv("search"))
        })?;
        hits.sort_by(hit_order);
        if let Some(k) = limit {
            hits.truncate(k);
        }
        Ok(hits)
    }

    /// Parses tantivy query syntax, with columns named as in the table (`city:paris`), plus
    /// fuzzy words `word~1` / `word~2` (edit distance, transpositions count one) and prefix
    /// words `word*`.
    fn parse(&self, fields: Vec<Field>, query: &str) -> Result<Box<dyn Query>> {
        let qerr = |reason: String| Error::Query { query: query.to_string(), reason };
        if query.trim().is_empty() {
            return Err(qerr("the query is empty".into()));
        }
        let (text, fuzzy) = self.rewrite_text(query).map_err(qerr)?;
        let parser = QueryParser::for_index(&self.index, fields);
        let q = parser.parse_query(&text).map_err(|e| qerr(e.to_string()))?;
        let q = self.rewrite(q, &fuzzy).map_err(qerr)?;
        Ok(q)
    }

    /// Rewrites the words outside quotes: a `column:` prefix becomes the column's
    /// positional field name, and `word~N` (fuzzy) and `word*` (prefix) become placeholder
    /// words. Returns the text and what each placeholder stands for.
    fn rewrite_text(&self, query: &str) -> Result<(String, Vec<Special>), String> {
        let chars: Vec<char> = query.chars().collect();
        let mut out = String::with_capacity(query.len());
        let mut specials = Vec::new();
        let mut in_quotes = false;
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if c == '"' {
                in_quotes = !in_quotes;
            }
            let starts_word =
                !in_quotes && is_word_char(c) && (i == 0 || !is_word_char(chars[i - 1]));
            if !starts_word {
                out.push(c);
                i += 1;
                continue;
            }
            let mut j = i;
            while j < chars.len() && is_word_char(chars[j]) {
                j += 1;
            }
            let word: String = chars[i..j].iter().collect();
            let next = chars.get(j).copied();
            let fuzzy = next == Some('~') && chars.get(j + 1).is_some_and(char::is_ascii_digit);
            let prefix = next == Some('*');
            if next == Some(':') {
                match self.names.read().iter().position(|col| *col == word) {
                    Some(p) => out.push_str(&field_name(p)),
                    None => out.push_str(&word),
                }
                i = j;
                continue;
            }
            if !fuzzy && !prefix {
                out.push_str(&word);
                i = j;
                continue;
            }
            if self.tokenizer == Tokenizer::Ngram {
                return Err("fuzzy and prefix words need a word tokenizer, not ngram".into());
            }
            let (distance, end) = if fuzzy {
                let mut k = j + 1;
                while k < chars.len() && chars[k].is_ascii_digit() {
                    k += 1;
                }
                let digits: String = chars[j + 1..k].iter().collect();
                match digits.parse() {
                    Ok(d @ 0..=2) => (d, k),
                    _ => return Err(format!("fuzzy distance must be 0, 1 or 2, not {digits}")),
                }
            } else {
                (0, j + 1)
            };
            // A prefix is matched against the indexed terms as typed (lowercased), a fuzzy
            // word as the index would store it (stemmed under the English tokenizer).
            let analysed = if prefix { Tokenizer::Default } else { self.tokenizer }
                .tokens(&word)
                .map_err(|e| e.to_string())?;
            let [term] = analysed.as_slice() else {
                return Err(format!("'{word}' is not one term"));
            };
            let placeholder = format!("qqbasaltfz{}qq", specials.len());
            out.push_str(&placeholder);
            specials.push(Special { placeholder, term: term.clone(), distance, prefix });
            i = end;
        }
        Ok((out, specials))
    }

    /// Turns fuzzy placeholders into fuzzy term queries, and lifts `AND NOT x` (which the
    /// parser turns into a required clause holding only an exclusion, matching nothing)
    /// into an exclusion of the enclosing expression.
    fn rewrite(&self, q: Box<dyn Query>, fuzzy: &[Special]) -> Result<Box<dyn Query>, String> {
        if let Some(t) = q.downcast_ref::<TermQuery>() {
            let term = t.term();
            if let Some(text) = term.value().as_str()
                && let Some(sp) = fuzzy.iter().find(|sp| sp.placeholder == text)
            {
                let fterm = Term::from_field_text(term.field(), &sp.term);
                return Ok(Box::new(if sp.prefix {
                    FuzzyTermQuery::new_prefix(fterm, sp.distance, true)
                } else {
                    FuzzyTermQuery::new(fterm, sp.distance, true)
                }));
            }
            return Ok(q);
        }
        if let Some(b) = q.downcast_ref::<BooleanQuery>() {
            let mut clauses = Vec::with_capacity(b.clauses().len());
            for (occur, sub) in b.clauses() {
                let sub = self.rewrite(sub.box_clone(), fuzzy)?;
                if *occur == Occur::Must
                    && let Some(inner) = sub.downcast_ref::<BooleanQuery>()
                    && !inner.clauses().is_empty()
                    && inner.clauses().iter().all(|(o, _)| *o == Occur::MustNot)
                {
                    clauses.extend(inner.clauses().iter().map(|(o, q)| (*o, q.box_clone())));
                    continue;
                }
                clauses.push((*occur, sub));
            }
            let mut nb = BooleanQuery::new(clauses);
            nb.set_minimum_number_should_match(b.get_minimum_number_should_match());
            return Ok(Box::new(nb));
        }
        let mut left = false;
        q.query_terms(&mut |t, _| {
            if t.value().as_str().is_some_and(|s| fuzzy.iter().any(|sp| sp.placeholder == s)) {
                left = true;
            }
        });
        if left {
            return Err(
                "a fuzzy or prefix word can only stand alone or in a boolean expression".into()
            );
        }
        Ok(q)
    }
}

/// A fuzzy or prefix word of a query, standing in the parsed text as a placeholder word.
struct Special {
    placeholder: String,
    term: String,
    distance: u8,
    prefix: bool,
}

impl Drop for FtsIndex {
    fn drop(&mut self) {
        // Let background merges finish, so that the directory is quiet once the handle is
        // gone (a rebuild or a drop may delete it next). Errors cannot be reported here;
        // uncommitted changes are discarded, as after a crash.
        if let Writer::Open(u) = std::mem::replace(self.writer.get_mut(), Writer::ReadOnly) {
            let _ = u.writer.wait_merging_threads();
        }
    }
}

/// The error of a write to an index opened read-only.
fn read_only() -> Error {
    Error::Invalid("the index is open read-only".into())
}

fn hit_order(a: &Hit, b: &Hit) -> std::cmp::Ordering {
    b.score.total_cmp(&a.score).then(a.id.cmp(&b.id))
}

/// Heap entry ordered so that the *worst* hit is the greatest (a max-heap keeps the worst on
/// top, ready to be replaced).
#[derive(PartialEq)]
struct Worst(Hit);
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Worst {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        hit_order(&self.0, &other.0)
    }
}

/// Collects `(_id, score)` of every match, or of the best `limit` per segment.
struct HitCollector {
    limit: Option<usize>,
}

struct HitSegment {
    ids: tantivy::columnar::Column<u64>,
    limit: Option<usize>,
    all: Vec<Hit>,
    heap: BinaryHeap<Worst>,
}

impl Collector for HitCollector {
    type Fruit = Vec<Hit>;
    type Child = HitSegment;

    fn for_segment(&self, _ord: u32, segment: &SegmentReader) -> tantivy::Result<HitSegment> {
        let ids = segment.fast_fields().u64(ID_FIELD)?;
        Ok(HitSegment { ids, limit: self.limit, all: Vec::new(), heap: BinaryHeap::new() })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<Hit>>) -> tantivy::Result<Vec<Hit>> {
        Ok(fruits.into_iter().flatten().collect())
    }
}

impl SegmentCollector for HitSegment {
    type Fruit = Vec<Hit>;

    fn collect(&mut self, doc: DocId, score: Score) {
        let Some(id) = self.ids.first(doc) else { return };
        let hit = Hit { id, score };
        match self.limit {
            None => self.all.push(hit),
            Some(k) => {
                if self.heap.len() < k {
                    self.heap.push(Worst(hit));
                } else if let Some(top) = self.heap.peek()
                    && hit_order(&hit, &top.0).is_lt()
                {
                    self.heap.pop();
                    self.heap.push(Worst(hit));
                }
            }
        }
    }

    fn harvest(self) -> Vec<Hit> {
        match self.limit {
            None => self.all,
            Some(_) => self.heap.into_iter().map(|w| w.0).collect(),
        }
    }
}

#[cfg(test)]
mod tests;
