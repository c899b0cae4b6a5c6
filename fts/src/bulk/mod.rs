//! Bulk builds: tantivy segments written straight from buffered columns.
//!
//! Indexing existing rows through tantivy's document writer costs one document per row: a
//! document is allocated and sent to an indexing thread, every token is hashed into the
//! writer's term table and appended to an in-memory posting list, and at the end every
//! list is read back, sorted by term and serialized. A bulk build knows all its rows up
//! front, so it does the same work a column at a time:
//!
//! - rows arrive one by one or in Arrow-layout batches and are buffered per column (text
//!   bytes and spans) with their `_id`s, up to [`SEGMENT_DOCS`] rows or
//!   [`SEGMENT_TEXT_BYTES`] of text per segment;
//! - each indexed column of a segment is one task: its texts are tokenized (a text seen
//!   before — the low-cardinality columns — is looked up in a small cache instead; mostly
//!   distinct texts are cut a batch at a time and their terms' table slots loaded together),
//!   its terms interned, its occurrences `(term, doc, position)` collected in document
//!   order; the terms are sorted once and the occurrences grouped by term with a counting
//!   sort, then written with tantivy's own postings, positions and term-dictionary
//!   serializers into memory buffers;
//! - `_id` (one term per row) is another task, and the `_id` fast field plus the document
//!   store a third; the buffers are then copied into the segment's composite files in
//!   field order and the field norms written;
//! - the work is spread over the cores by segments: a build told how many rows to expect
//!   ([`BulkBuild::expect_rows`]) hands each quarter of them to a background thread as
//!   soon as it is buffered (while the caller is still reading the rest), otherwise the
//!   buffered rows are split into one segment per core; tasks run costliest first;
//! - [`BulkBuild::finish`] waits for every segment and writes `meta.json` listing them
//!   with the commit payload — one commit.
//!
//! Each segment's files are the ones tantivy's writer produces for the same rows, byte for
//! byte (tests compare them), so searches, scores, merges and later upkeep cannot tell a
//! bulk-built segment from another.
//!
//! The same segment writing serves upkeep ([`UpkeepRows`]): the rows given to
//! `FtsIndex::add_many` become one new segment that the index's writer adopts, instead of
//! documents for tantivy's indexing thread, whose per-segment term table (2^19 slots,
//! walked at every commit and zeroed for the next segment) cost more than a refresh's few
//! rows.
//!
//! This module must not serve any schema but the one [`crate::schema_for`] builds (text
//! fields with positions; `_id` indexed, with field norms, and fast; nothing stored), and
//! a bulk build must not build into an index that already has segments (it writes
//! `meta.json` itself; upkeep segments go through the writer).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tantivy::columnar::{ColumnType, ColumnarWriter, NumericalValue};
use tantivy::directory::{CompositeWrite, FileSlice, TerminatingWrite};
use tantivy::fieldnorm::{FieldNormReader, FieldNormsSerializer};
use tantivy::index::{SegmentComponent, SegmentMeta};
use tantivy::positions::PositionSerializer;
use tantivy::postings::TermInfo;
use tantivy::postings::serializer::PostingsSerializer;
use tantivy::schema::{Field, IndexRecordOption, Schema};
use tantivy::store::StoreWriter;
use tantivy::termdict::TermDictionaryBuilder;
use tantivy::tokenizer::{MAX_TOKEN_LEN, TextAnalyzer, Token, TokenStream};
use tantivy::{Directory, DocId, Index, IndexMeta, Segment, TantivyDocument};
use tantivy_common::CountingWriter;

use crate::{Error, FtsIndex, Payload, Result, Tokenizer, lazy, tv};

mod postings;
mod terms;

use self::{postings::*, terms::*};

/// Rows per bulk-built segment (bounds the build's memory; a table this large gets several
/// segments).
pub const SEGMENT_DOCS: usize = 1 << 21;
/// Text bytes (over all indexed columns) per bulk-built segment.
pub const SEGMENT_TEXT_BYTES: usize = 256 << 20;
/// Segments written at once from the buffered rows are at least this many rows each.
const PIECE_ROWS: usize = 1 << 16;
/// At most this many segments are written at once, and a build told its row count writes
/// them in quarters (tantivy's default merge policy merges eight segments of a size; a
/// build must not leave work like that behind).
const MAX_PIECES: usize = 4;
/// Distinct texts a column's tokenization cache holds at most.
const CACHE_TEXTS: usize = 1 << 16;
/// Lookups after which a column's cache is dropped unless at least half of them hit.
const CACHE_PROBE: u32 = 4096;
/// A span's start marking a NULL text.
const NULL: u32 = u32::MAX;

/// An index being built from existing rows (see [`FtsIndex::bulk`]): feed every row with
/// [`BulkBuild::add`], then [`BulkBuild::finish`] commits once. Nothing is searchable, and
/// nothing is committed, before `finish`.
pub struct BulkBuild {
    index: Index,
    columns: Vec<String>,
    tokenizer: Tokenizer,
    analyzer: TextAnalyzer,
    id_field: Field,
    fields: Vec<Field>,
    path: Option<PathBuf>,
    dir: Option<lazy::LazyDir>,
    rows: Rows,
    /// Written (or being written) segments, in row order.
    segments: Pieces,
    /// Rows per segment written in the background while rows are still being added (see
    /// [`BulkBuild::expect_rows`]); `None`: segments are written when the buffer is full.
    background_rows: Option<usize>,
    /// Rows per segment ([`SEGMENT_DOCS`]; smaller in tests).
    segment_rows: usize,
    /// Texts a column's cache is tried on ([`CACHE_PROBE`]; smaller in tests).
    cache_probe: u32,
    /// Rows per piece below which buffered rows are not split ([`PIECE_ROWS`]).
    piece_rows: usize,
}

impl std::fmt::Debug for BulkBuild {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BulkBuild")
            .field("columns", &self.columns)
            .field("buffered_rows", &self.rows.ids.len())
            .field("segments", &self.segments.0.len())
            .finish()
    }
}

/// Segments of a build: written, or being written by a background thread (joined when
/// the build is finished or dropped, so no thread outlives it).
struct Pieces(Vec<Piece>);

enum Piece {
    Done(Vec<SegmentMeta>),
    Writing(std::thread::JoinHandle<Result<Vec<SegmentMeta>>>),
}

impl Pieces {
    /// Segments being written.
    fn writing(&self) -> usize {
        self.0.iter().filter(|p| matches!(p, Piece::Writing(_))).count()
    }

    /// Waits for the oldest segment being written (an error is returned at once).
    fn wait_oldest(&mut self) -> Result<()> {
        if let Some(p) = self.0.iter_mut().find(|p| matches!(p, Piece::Writing(_))) {
            let Piece::Writing(h) = std::mem::replace(p, Piece::Done(Vec::new())) else {
                return Ok(());
            };
            *p = Piece::Done(joined(h)?);
        }
        Ok(())
    }

    /// Every segment, in row order, once all are written.
    fn wait(&mut self) -> Result<Vec<SegmentMeta>> {
        let mut metas = Vec::new();
        let mut first_error = None;
        for piece in self.0.drain(..) {
            let done = match piece {
                Piece::Done(m) => Ok(m),
                Piece::Writing(h) => joined(h),
            };
            match done {
                Ok(m) => metas.extend(m),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(metas), Err)
    }
}

/// What a segment-writing thread returned.
fn joined(h: std::thread::JoinHandle<Result<Vec<SegmentMeta>>>) -> Result<Vec<SegmentMeta>> {
    h.join().unwrap_or_else(|_| Err(Error::Invalid("a bulk build thread panicked".into())))
}

impl Drop for Pieces {
    fn drop(&mut self) {
        let _ = self.wait();
    }
}

/// Rows buffered for the next segment.
struct Rows {
    ids: Vec<u64>,
    cols: Vec<Column>,
}

impl Rows {
    fn empty(columns: usize) -> Rows {
        Rows { ids: Vec::new(), cols: (0..columns).map(|_| Column::default()).collect() }
    }

    /// Appends one row: its `_id` and the text of each column in order (`None` for NULL;
    /// missing trailing columns are NULL). An error (a text past the 4 GiB a column's
    /// spans address) appends nothing.
    fn push<'a>(
        &mut self,
        id: u64,
        texts: impl IntoIterator<Item = Option<&'a str>>,
    ) -> Result<()> {
        let mut texts = texts.into_iter();
        let row: Vec<Option<&str>> = self.cols.iter().map(|_| texts.next().flatten()).collect();
        // Checked before anything is appended (an error changes nothing).
        for (col, t) in self.cols.iter().zip(&row) {
            if let Some(t) = t
                && u32::try_from(col.data.len() + t.len()).is_err()
            {
                return Err(Error::Invalid(format!(
                    "a text of {} bytes is too long to index",
                    t.len()
                )));
            }
        }
        for (col, t) in self.cols.iter_mut().zip(row) {
            let span = match t {
                Some(t) => {
                    let start = col.data.len() as u32;
                    col.data.push_str(t);
                    (start, t.len() as u32)
                }
                None => (NULL, 0),
            };
            col.spans.push(span);
        }
        self.ids.push(id);
        Ok(())
    }

    /// Text bytes buffered, over every column.
    fn text_bytes(&self) -> usize {
        self.cols.iter().map(|c| c.data.len()).sum()
    }
}

/// One column's buffered texts.
#[derive(Default)]
struct Column {
    data: String,
    /// `(start, len)` into `data` per row; `start == NULL` for NULL.
    spans: Vec<(u32, u32)>,
}

/// One batch of an indexed column in Arrow's string layout (see [`BulkBuild::add_batch`]).
#[derive(Debug, Clone, Copy)]
pub struct TextColumn<'a> {
    /// The texts' bytes, concatenated (UTF-8).
    pub data: &'a [u8],
    /// Row `r`'s text is `data[offsets[r]..offsets[r + 1]]` (one more offset than rows).
    pub offsets: &'a [i32],
    /// Whether each row has a text (`None`: every row has one).
    pub valid: Option<&'a [bool]>,
}

/// The texts of a batch column as one string (from its first offset), checked: UTF-8, and
/// every offset on a character boundary (offsets already checked against the data).
fn checked_text<'a>(c: &TextColumn<'a>) -> Result<&'a str> {
    let not_utf8 = || Error::Invalid("a text column batch that is not UTF-8".into());
    let (lo, hi) = (c.offsets[0] as usize, c.offsets[c.offsets.len() - 1] as usize);
    let chunk = std::str::from_utf8(&c.data[lo..hi]).map_err(|_| not_utf8())?;
    if c.offsets.iter().all(|&o| chunk.is_char_boundary(o as usize - lo)) {
        Ok(chunk)
    } else {
        Err(not_utf8())
    }
}

impl Column {
    /// Appends rows `r..e` of `c`, whose text is `chunk` (a slice of [`checked_text`]).
    fn append(&mut self, c: &TextColumn<'_>, r: usize, e: usize, chunk: &str) {
        let lo = c.offsets[r] as usize;
        let base = self.data.len();
        for i in r..e {
            if c.valid.is_some_and(|v| !v[i]) {
                self.spans.push((NULL, 0));
            } else {
                let (s, t) = (c.offsets[i] as usize - lo, c.offsets[i + 1] as usize - lo);
                self.spans.push(((base + s) as u32, (t - s) as u32));
            }
        }
        self.data.push_str(chunk);
    }

    fn text(&self, (start, len): (u32, u32)) -> Option<&str> {
        if start == NULL {
            return None;
        }
        self.data.get(start as usize..start as usize + len as usize)
    }
}

fn io_err(action: &'static str) -> impl FnOnce(io::Error) -> Error {
    move |e| Error::Tantivy { action, source: tantivy::TantivyError::from(e) }
}

impl BulkBuild {
    pub(crate) fn new(
        index: Index,
        columns: &[String],
        tokenizer: Tokenizer,
        path: Option<PathBuf>,
        dir: Option<lazy::LazyDir>,
    ) -> Result<BulkBuild> {
        let (_, id_field, fields) = crate::schema_for(columns)?;
        if !index.searchable_segment_metas().map_err(tv("read the index metas"))?.is_empty() {
            return Err(Error::Invalid("a bulk build needs an empty index".into()));
        }
        Ok(BulkBuild {
            analyzer: tokenizer.analyzer()?,
            index,
            columns: columns.to_vec(),
            tokenizer,
            id_field,
            fields,
            path,
            dir,
            rows: Rows::empty(columns.len()),
            segments: Pieces(Vec::new()),
            background_rows: None,
            segment_rows: SEGMENT_DOCS,
            cache_probe: CACHE_PROBE,
            piece_rows: PIECE_ROWS,
        })
    }

    /// Adds one row: its `_id` and the text of each indexed column in column order (`None`
    /// for NULL; missing trailing columns are NULL). Rows become documents in the order
    /// they are added.
    pub fn add<'a>(
        &mut self,
        id: u64,
        texts: impl IntoIterator<Item = Option<&'a str>>,
    ) -> Result<()> {
        self.rows.push(id, texts)?;
        self.full()
    }

    /// Tells the build about how many rows it will be given (a table's row count): with
    /// several cores, segments of a share of them are then written by background threads
    /// while later rows are still being added, instead of all after the last one.
    pub fn expect_rows(&mut self, rows: u64) {
        let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
        let rows = usize::try_from(rows).unwrap_or(usize::MAX);
        if threads > 1 && rows >= 2 * self.piece_rows {
            let piece = rows.div_ceil(MAX_PIECES).max(self.piece_rows).min(self.segment_rows);
            self.background_rows = Some(piece);
        }
    }

    /// Rows a segment takes at most.
    fn segment_limit(&self) -> usize {
        self.background_rows.unwrap_or(self.segment_rows)
    }

    /// Writes the buffered rows if they make a segment.
    fn full(&mut self) -> Result<()> {
        if self.rows.ids.len() >= self.segment_limit()
            || self.rows.text_bytes() >= SEGMENT_TEXT_BYTES
        {
            if self.background_rows.is_some() {
                self.detach()?;
            } else {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn cutter(&self) -> Cutter {
        Cutter::new(&self.analyzer, self.tokenizer, self.cache_probe)
    }

    /// Hands the buffered rows to a background thread that writes them as one segment
    /// (after the oldest such thread finishes, when [`MAX_PIECES`] are running: the rows
    /// and working memory of the segments being written stay bounded).
    fn detach(&mut self) -> Result<()> {
        while self.segments.writing() >= MAX_PIECES {
            self.segments.wait_oldest()?;
        }
        let rows = std::mem::replace(&mut self.rows, Rows::empty(self.fields.len()));
        let (index, cutter, id_field) = (self.index.clone(), self.cutter(), self.id_field);
        let fields = self.fields.clone();
        let handle = std::thread::Builder::new()
            .name("basalt-fts-build".into())
            .spawn(move || write_segments(&index, &cutter, id_field, &fields, &rows, 1, 1))
            .map_err(io_err("start a build thread"))?;
        self.segments.0.push(Piece::Writing(handle));
        Ok(())
    }

    /// Adds a batch of rows given column-wise in Arrow's string layout: `ids[r]` is row
    /// `r`'s `_id`, and each of `columns` (one per indexed column, in order) holds its
    /// texts. The same as [`BulkBuild::add`] for each row, without a call per row.
    pub fn add_batch(&mut self, ids: &[u64], columns: &[TextColumn<'_>]) -> Result<()> {
        if columns.len() != self.rows.cols.len() {
            return Err(Error::Invalid(format!(
                "a batch of {} text columns for an index of {}",
                columns.len(),
                self.rows.cols.len()
            )));
        }
        for c in columns {
            let bad = c.offsets.len() != ids.len() + 1
                || c.valid.is_some_and(|v| v.len() != ids.len())
                || c.offsets.windows(2).any(|w| w[0] < 0 || w[1] < w[0])
                || c.offsets.last().is_some_and(|&e| e as usize > c.data.len());
            if bad {
                return Err(Error::Invalid("a text column batch with broken offsets".into()));
            }
        }
        // The whole batch is checked before any of it is added (a bad batch adds nothing).
        let texts = columns.iter().map(checked_text).collect::<Result<Vec<_>>>()?;
        let len = |c: &TextColumn<'_>, r: usize| (c.offsets[r + 1] - c.offsets[r]) as usize;
        let mut r = 0;
        while r < ids.len() {
            // Rows [r, e) fit the segment being buffered (at least one row always does).
            let room = self.segment_limit().saturating_sub(self.rows.ids.len()).max(1);
            let (mut e, mut bytes) = (r, self.rows.text_bytes());
            while e < ids.len() && e - r < room {
                let row: usize = columns.iter().map(|c| len(c, e)).sum();
                if e > r && bytes + row > SEGMENT_TEXT_BYTES {
                    break;
                }
                bytes += row;
                e += 1;
            }
            // Rows r..e of each column (on character boundaries: checked above).
            let chunks = columns
                .iter()
                .zip(&texts)
                .map(|(c, t)| {
                    let base = c.offsets[0];
                    t.get((c.offsets[r] - base) as usize..(c.offsets[e] - base) as usize)
                        .ok_or_else(|| {
                            Error::Invalid("a text column batch that is not UTF-8".into())
                        })
                })
                .collect::<Result<Vec<_>>>()?;
            if let Some((_, big)) = self
                .rows
                .cols
                .iter()
                .zip(&chunks)
                .find(|(col, chunk)| u32::try_from(col.data.len() + chunk.len()).is_err())
            {
                return Err(Error::Invalid(format!(
                    "a text of {} bytes is too long to index",
                    big.len()
                )));
            }
            for ((col, c), chunk) in self.rows.cols.iter_mut().zip(columns).zip(chunks) {
                col.append(c, r, e, chunk);
            }
            self.rows.ids.extend_from_slice(&ids[r..e]);
            self.full()?;
            r = e;
        }
        Ok(())
    }

    /// Writes the buffered rows as segments (not yet part of any commit), on every core:
    /// split in pieces when no background thread is writing the others.
    fn flush(&mut self) -> Result<()> {
        if self.rows.ids.is_empty() {
            return Ok(());
        }
        let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
        let pieces = match self.background_rows {
            Some(_) => 1,
            None => threads.min(MAX_PIECES).min(self.rows.ids.len() / self.piece_rows).max(1),
        };
        let rows = std::mem::replace(&mut self.rows, Rows::empty(self.fields.len()));
        let metas = write_segments(
            &self.index,
            &self.cutter(),
            self.id_field,
            &self.fields,
            &rows,
            pieces,
            threads,
        )?;
        self.segments.0.push(Piece::Done(metas));
        Ok(())
    }

    /// Writes the last segment, commits every segment with `payload` (synced) and returns
    /// the open index, with its one-thread upkeep writer (opened at its first use).
    pub fn finish(mut self, payload: Payload) -> Result<FtsIndex> {
        self.flush()?;
        let meta = IndexMeta {
            index_settings: self.index.settings().clone(),
            persisted_custom_extensions: Vec::new(),
            segments: self.segments.wait()?,
            schema: self.index.schema(),
            opstamp: 0,
            payload: Some(payload.encode()),
        };
        let mut json = serde_json::to_vec_pretty(&meta).map_err(|e| Error::Tantivy {
            action: "encode the index metas",
            source: tantivy::TantivyError::from(io::Error::other(e)),
        })?;
        json.push(b'\n');
        let d = self.index.directory();
        d.sync_directory().map_err(io_err("sync the index directory"))?;
        d.atomic_write(Path::new("meta.json"), &json).map_err(io_err("commit"))?;
        d.sync_directory().map_err(io_err("sync the index directory"))?;
        FtsIndex::finish(self.index, &self.columns, self.tokenizer, Some(1), self.path, self.dir)
    }
}

/// What one task made of one indexed field: its field norms and its sections of the
/// term, postings and positions files.
struct FieldPart {
    field: Field,
    norms: Vec<u8>,
    /// `None` when the field has no term at all (it then gets no section, as in tantivy).
    sections: Option<[Vec<u8>; 3]>,
}

/// Writes `rows` as new segments of `index` (every file but `meta.json`): `pieces`
/// segments of consecutive rows, so that every core has a share of every column (one
/// column with most of the work would otherwise leave the other cores idle).
fn write_segments(
    index: &Index,
    cutter: &Cutter,
    id_field: Field,
    fields: &[Field],
    rows: &Rows,
    pieces: usize,
    threads: usize,
) -> Result<Vec<SegmentMeta>> {
    let schema = index.schema();
    let n = rows.ids.len();
    let pieces = pieces.clamp(1, n.max(1));
    let ranges: Vec<Range<usize>> =
        (0..pieces).map(|i| i * n / pieces..(i + 1) * n / pieces).collect();
    let segments: Vec<Segment> = ranges.iter().map(|_| index.new_segment()).collect();

    type Task<'s> = Job<'s, Result<Option<FieldPart>>>;
    // (cost estimate, segment, task)
    let mut tasks: Vec<(usize, usize, Task<'_>)> = Vec::new();
    for (si, (range, segment)) in ranges.iter().zip(&segments).enumerate() {
        let rn = range.len();
        for (&field, col) in fields.iter().zip(&rows.cols) {
            let mut cutter = cutter.clone();
            let option = record_option(&schema, field);
            let spans = &col.spans[range.clone()];
            let cost = spans.iter().map(|s| s.1 as usize).sum::<usize>() + 8 * rn;
            tasks.push((
                cost,
                si,
                Box::new(move || {
                    let occ = tokenize(col, spans, &mut cutter);
                    text_field(field, occ, option).map(Some).map_err(io_err("write postings"))
                }),
            ));
        }
        let ids = &rows.ids[range.clone()];
        let option = record_option(&schema, id_field);
        tasks.push((
            24 * rn,
            si,
            Box::new(move || {
                id_postings(id_field, ids, option).map(Some).map_err(io_err("write postings"))
            }),
        ));
        let sch = &schema;
        tasks.push((
            8 * rn,
            si,
            Box::new(move || fast_and_store(segment, sch, ids).map(|()| None)),
        ));
    }
    tasks.sort_by_key(|t| std::cmp::Reverse(t.0));
    let owners: Vec<usize> = tasks.iter().map(|t| t.1).collect();
    let mut parts: Vec<Vec<FieldPart>> = segments.iter().map(|_| Vec::new()).collect();
    for (r, si) in
        run_all(tasks.into_iter().map(|t| t.2).collect(), threads).into_iter().zip(owners)
    {
        if let Some(p) = r? {
            parts[si].push(p);
        }
    }
    let jobs: Vec<Job<'_, Result<SegmentMeta>>> = segments
        .iter()
        .zip(parts)
        .zip(&ranges)
        .map(|((segment, parts), range)| {
            Box::new(move || finish_segment(segment, parts, range.len())) as Job<'_, _>
        })
        .collect();
    run_all(jobs, threads).into_iter().collect()
}

/// Rows an upkeep writer is given (`FtsIndex::add_many`), buffered column-wise: written as
/// one new segment for the writer to adopt (`IndexWriter::add_segment`) — the files
/// tantivy's document writer would write for the same rows, without its per-thread term
/// table — or, when that would be wrong, handed to the document writer one by one.
///
/// Through tantivy's document writer, every upkeep commit finalized a segment by walking
/// the whole term table of its indexing thread (2^19 slots, whatever the number of rows)
/// and then allocated and zeroed a new one for the next segment: most of a one-row
/// refresh's work (`fts-upkeep --rows 20000 --ops 200`, a profile: 31 % of the samples
/// finalizing, 23 % setting up the next segment, on the indexing thread).
pub(crate) struct UpkeepRows(Rows);

impl UpkeepRows {
    pub(crate) fn new(columns: usize) -> UpkeepRows {
        UpkeepRows(Rows::empty(columns))
    }

    /// Appends one row (see [`BulkBuild::add`]); an error appends nothing.
    pub(crate) fn push<'a>(
        &mut self,
        id: u64,
        texts: impl IntoIterator<Item = Option<&'a str>>,
    ) -> Result<()> {
        self.0.push(id, texts)
    }

    /// The rows' `_id`s, in order.
    pub(crate) fn ids(&self) -> &[u64] {
        &self.0.ids
    }

    /// The rows as tantivy documents, in order.
    pub(crate) fn documents(
        &self,
        id_field: Field,
        fields: &[Field],
    ) -> impl Iterator<Item = TantivyDocument> {
        (0..self.0.ids.len()).map(move |r| {
            let mut doc = TantivyDocument::new();
            doc.add_u64(id_field, self.0.ids[r]);
            for (col, field) in self.0.cols.iter().zip(fields) {
                if let Some(t) = col.text(col.spans[r]) {
                    doc.add_text(*field, t);
                }
            }
            doc
        })
    }

    /// Writes the rows as one new segment of `index` (`None` when there are none).
    pub(crate) fn write_segment(
        &self,
        index: &Index,
        analyzer: &TextAnalyzer,
        tokenizer: Tokenizer,
        id_field: Field,
        fields: &[Field],
    ) -> Result<Option<SegmentMeta>> {
        if self.0.ids.is_empty() {
            return Ok(None);
        }
        let cutter = Cutter::new(analyzer, tokenizer, CACHE_PROBE);
        // A few rows (a search's refresh) on this thread; many (a flush's) on every core.
        let threads = match self.0.ids.len() >= PIECE_ROWS {
            true => std::thread::available_parallelism().map_or(1, |p| p.get()),
            false => 1,
        };
        let mut metas = write_segments(index, &cutter, id_field, fields, &self.0, 1, threads)?;
        Ok(metas.pop())
    }
}

/// Writes a segment's field norms and its term, postings and positions files from the
/// parts of its fields.
fn finish_segment(
    segment: &Segment,
    mut parts: Vec<FieldPart>,
    rows: usize,
) -> Result<SegmentMeta> {
    let max_doc = u32::try_from(rows).map_err(|_| Error::Invalid("too many rows".into()))?;
    parts.sort_by_key(|p| p.field);
    let open = |c: SegmentComponent| {
        segment.open_write(c).map_err(|e| Error::Tantivy {
            action: "create a segment file",
            source: tantivy::TantivyError::from(e),
        })
    };
    let mut norms = FieldNormsSerializer::from_write(open(SegmentComponent::FieldNorms)?)
        .map_err(io_err("write field norms"))?;
    for p in &parts {
        norms.serialize_field(p.field, &p.norms).map_err(io_err("write field norms"))?;
    }
    norms.close().map_err(io_err("write field norms"))?;
    let components =
        [SegmentComponent::Terms, SegmentComponent::Postings, SegmentComponent::Positions];
    for (i, c) in components.into_iter().enumerate() {
        let mut w = CompositeWrite::wrap(open(c)?);
        for p in &parts {
            if let Some(sections) = &p.sections {
                w.for_field(p.field).write_all(&sections[i]).map_err(io_err("write postings"))?;
            }
        }
        w.close().map_err(io_err("write postings"))?;
    }
    Ok(segment.clone().with_max_doc(max_doc).meta().clone())
}

fn record_option(schema: &Schema, field: Field) -> IndexRecordOption {
    schema
        .get_field_entry(field)
        .field_type()
        .index_record_option()
        .unwrap_or(IndexRecordOption::Basic)
}

/// A task of [`run_all`].
type Job<'s, T> = Box<dyn FnOnce() -> T + Send + 's>;

/// Runs `tasks` on up to `threads` threads (this one included), taken in order of
/// submission, and returns their results in the same order.
fn run_all<'s, T: Send>(tasks: Vec<Job<'s, T>>, threads: usize) -> Vec<T> {
    let n = tasks.len();
    let slots: Vec<Mutex<Option<Job<'s, T>>>> =
        tasks.into_iter().map(|t| Mutex::new(Some(t))).collect();
    let results: Vec<Mutex<Option<T>>> = (0..n).map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= n {
                break;
            }
            if let Some(task) = slots[i].lock().take() {
                *results[i].lock() = Some(task());
            }
        }
    };
    let threads = threads.clamp(1, n.max(1));
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(work);
        }
        work();
    });
    results.into_iter().filter_map(|r| r.into_inner()).collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{Hit, Location};

    const COMPONENTS: [SegmentComponent; 6] = [
        SegmentComponent::Terms,
        SegmentComponent::Postings,
        SegmentComponent::Positions,
        SegmentComponent::FieldNorms,
        SegmentComponent::FastFields,
        SegmentComponent::Store,
    ];

    type Row = (u64, Vec<Option<String>>);

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("c{i}")).collect()
    }

    /// The same rows indexed by tantivy's document writer (one thread: one segment, rows in
    /// order) — the reference, not `FtsIndex::add_many` (which writes upkeep segments the
    /// way this module does).
    fn by_writer(rows: &[Row], n_cols: usize, tok: Tokenizer) -> FtsIndex {
        let ix = FtsIndex::create(&Location::Memory, &names(n_cols), tok, 1).unwrap();
        ix.with_writer(|u| {
            for (id, texts) in rows {
                let mut doc = TantivyDocument::new();
                doc.add_u64(ix.id_field, *id);
                for (text, field) in texts.iter().zip(&ix.fields) {
                    if let Some(t) = text {
                        doc.add_text(*field, t);
                    }
                }
                u.writer.add_document(doc).map_err(tv("add a document"))?;
            }
            Ok(())
        })
        .unwrap();
        ix.commit(Payload { lsn: 3, next_row_id: 9 }).unwrap();
        ix
    }

    fn by_bulk(rows: &[Row], n_cols: usize, tok: Tokenizer, segment_rows: usize) -> FtsIndex {
        let mut b = FtsIndex::bulk(&Location::Memory, &names(n_cols), tok).unwrap();
        b.segment_rows = segment_rows;
        // Mostly distinct texts leave the cache after a few rows (both paths are tested).
        b.cache_probe = 8;
        for (id, t) in rows {
            b.add(*id, t.iter().map(|t| t.as_deref())).unwrap();
        }
        b.finish(Payload { lsn: 3, next_row_id: 9 }).unwrap()
    }

    /// Every component file of every segment, in segment order.
    fn files(ix: &FtsIndex) -> Vec<Vec<Vec<u8>>> {
        let metas = ix.index.searchable_segment_metas().unwrap();
        metas
            .into_iter()
            .map(|m| {
                let seg = ix.index.segment(m);
                COMPONENTS
                    .iter()
                    .map(|c| seg.open_read(c.clone()).unwrap().read_bytes().unwrap().to_vec())
                    .collect()
            })
            .collect()
    }

    fn sorted(mut hits: Vec<Hit>) -> Vec<(u64, u32)> {
        hits.sort_by_key(|h| h.id);
        hits.iter().map(|h| (h.id, h.score.to_bits())).collect()
    }

    fn sample_rows(n: usize) -> Vec<Row> {
        const CITIES: [&str; 4] = ["Paris", "New York", "Berlin", "São Paulo"];
        (0..n as u64)
            .map(|i| {
                let name = format!("user_{i} Runs running-shoes {}", i % 7);
                let city = (i % 5 != 0).then(|| CITIES[(i % 4) as usize].to_string());
                let note = (i % 3 == 0).then(|| "the the the end".to_string());
                (i + 1, vec![Some(name), city, note])
            })
            .collect()
    }

    #[test]
    fn bulk_segments_are_the_writers_byte_for_byte() {
        let rows = sample_rows(3000);
        for tok in [Tokenizer::Default, Tokenizer::English, Tokenizer::Ngram] {
            let a = by_writer(&rows, 3, tok);
            let b = by_bulk(&rows, 3, tok, SEGMENT_DOCS);
            let (fa, fb) = (files(&a), files(&b));
            assert_eq!(fa.len(), 1);
            assert_eq!(fb.len(), 1);
            for (i, c) in COMPONENTS.iter().enumerate() {
                assert!(fa[0][i] == fb[0][i], "{tok:?}: the {c} files differ");
            }
            assert_eq!(b.payload().unwrap(), Some(Payload { lsn: 3, next_row_id: 9 }));
            assert_eq!(b.num_docs(), 3000);
            let prefix = if tok == Tokenizer::Ngram { "ru" } else { "run*" };
            for q in ["paris", "\"new york\"", prefix, "user_17", "the", "sao OR berlin"] {
                assert_eq!(sorted(a.search(q, None).unwrap()), sorted(b.search(q, None).unwrap()));
            }
        }
    }

    #[test]
    fn upkeep_segments_are_the_writers_byte_for_byte_and_obey_delete_order() {
        let rows = sample_rows(700);
        let dir = tempfile::tempdir().unwrap();
        for tok in [Tokenizer::Default, Tokenizer::English, Tokenizer::Ngram] {
            let a = by_writer(&rows, 3, tok);
            // On disk, through the lazily syncing directory: the upkeep path as storage uses it.
            let path = dir.path().join(format!("{tok:?}"));
            let b = FtsIndex::create(&Location::Dir(path), &names(3), tok, 1).unwrap();
            b.add_many(rows.iter().map(|(id, t)| (*id, t.iter().map(|t| t.as_deref())))).unwrap();
            b.commit(Payload { lsn: 3, next_row_id: 9 }).unwrap();
            let (fa, fb) = (files(&a), files(&b));
            assert_eq!((fa.len(), fb.len()), (1, 1));
            for (i, c) in COMPONENTS.iter().enumerate() {
                assert!(fa[0][i] == fb[0][i], "{tok:?}: the {c} files differ");
            }
            // An update: the old document deleted, then the row added again — the delete
            // must not reach the new segment; a delete after an add must.
            b.delete_many([1, 2]).unwrap();
            b.add_many([(1, [Some("zebra crossing"), None, None])]).unwrap();
            b.add_many([(2, [Some("zebra again"), None, None])]).unwrap();
            b.delete(2).unwrap();
            b.commit(Payload { lsn: 4, next_row_id: 9 }).unwrap();
            assert_eq!(sorted(b.search("zebra", None).unwrap()).len(), 1);
            assert_eq!(b.search("zebra", None).unwrap()[0].id, 1);
            assert_eq!(b.num_docs(), 699);
            // Nothing added is seen before the commit, and a rollback drops it.
            b.add_many([(5000, [Some("unicorn"), None, None])]).unwrap();
            assert!(b.search("unicorn", None).unwrap().is_empty());
            b.rollback().unwrap();
            b.commit(Payload { lsn: 5, next_row_id: 9 }).unwrap();
            assert!(b.search("unicorn", None).unwrap().is_empty());
            let prefix = if tok == Tokenizer::Ngram { "ru" } else { "run*" };
            for q in ["paris", "\"new york\"", prefix, "user_17", "sao OR berlin"] {
                let hits = |ix: &FtsIndex| {
                    let mut h = sorted(ix.search(q, None).unwrap());
                    h.retain(|(id, _)| *id > 2);
                    h.into_iter().map(|(id, _)| id).collect::<Vec<_>>()
                };
                assert_eq!(hits(&a), hits(&b), "{tok:?} {q}");
            }
        }
    }

    #[test]
    fn large_builds_split_into_segments_and_stay_maintainable() {
        let rows = sample_rows(2500);
        let b = by_bulk(&rows, 3, Tokenizer::Default, 1000);
        assert_eq!(files(&b).len(), 3, "1000 + 1000 + 500 rows");
        let a = by_writer(&rows, 3, Tokenizer::Default);
        for q in ["paris", "user_2499", "\"new york\" AND 3"] {
            assert_eq!(
                sorted(a.search(q, None).unwrap()),
                sorted(b.search(q, None).unwrap()),
                "{q}"
            );
        }
        // Upkeep after a bulk build: deletes by `_id` reach bulk-built documents.
        b.delete(2).unwrap();
        b.add(9000, &[Some("paris"), None, None]).unwrap();
        b.commit(Payload { lsn: 4, next_row_id: 9001 }).unwrap();
        let hits: Vec<u64> = b.search("c0:paris", None).unwrap().iter().map(|h| h.id).collect();
        assert_eq!(hits, [9000]);
        assert!(!b.search("user_1", None).unwrap().iter().any(|h| h.id == 2));
    }

    /// Each segment of `b` holds the files tantivy's writer makes of its rows, the rows
    /// are all there in order, and searches agree with one writer's segment of all rows.
    fn assert_segments_are_the_writers(b: &FtsIndex, rows: &[Row]) {
        let metas = b.index.searchable_segment_metas().unwrap();
        let mut start = 0;
        for (m, got) in metas.iter().zip(files(b)) {
            let piece = &rows[start..start + m.max_doc() as usize];
            assert!(files(&by_writer(piece, 3, Tokenizer::Default))[0] == got, "rows from {start}");
            start += m.max_doc() as usize;
        }
        assert_eq!(start, rows.len());
        let one = by_writer(rows, 3, Tokenizer::Default);
        for q in ["paris", "user_2599", "\"new york\" AND 3", "the"] {
            let (x, y) = (one.search(q, None).unwrap(), b.search(q, None).unwrap());
            let ids = |h: &[Hit]| h.iter().map(|h| h.id).collect::<Vec<_>>();
            assert_eq!(ids(&x), ids(&y), "{q}");
            for (h, g) in x.iter().zip(&y) {
                assert!((h.score - g.score).abs() <= 1e-4 * h.score.abs(), "{q}: {h:?} {g:?}");
            }
        }
    }

    fn threads() -> usize {
        std::thread::available_parallelism().map_or(1, |p| p.get())
    }

    #[test]
    fn rows_split_across_cores_give_one_writers_segment_per_piece() {
        let rows = sample_rows(2600);
        let mut b = FtsIndex::bulk(&Location::Memory, &names(3), Tokenizer::Default).unwrap();
        (b.segment_rows, b.cache_probe, b.piece_rows) = (2000, 8, 300);
        for (id, t) in &rows {
            b.add(*id, t.iter().map(|t| t.as_deref())).unwrap();
        }
        let b = b.finish(Payload { lsn: 3, next_row_id: 9 }).unwrap();
        // 2000 rows buffered, then 600: each split in up to `threads` (≤ 4) pieces.
        let expect = threads().min(MAX_PIECES).min(6) + threads().min(MAX_PIECES).min(2);
        assert_eq!(b.index.searchable_segment_metas().unwrap().len(), expect);
        assert_segments_are_the_writers(&b, &rows);
    }

    #[test]
    fn expected_rows_are_written_in_the_background_while_rows_arrive() {
        let rows = sample_rows(2600);
        let mut b = FtsIndex::bulk(&Location::Memory, &names(3), Tokenizer::Default).unwrap();
        (b.cache_probe, b.piece_rows) = (8, 300);
        b.expect_rows(rows.len() as u64);
        for chunk in rows.chunks(100) {
            for (id, t) in chunk {
                b.add(*id, t.iter().map(|t| t.as_deref())).unwrap();
            }
        }
        let b = b.finish(Payload { lsn: 3, next_row_id: 9 }).unwrap();
        // Segments of 650 rows (a quarter) when there are cores to write them meanwhile.
        let expect = if threads() > 1 { 4 } else { 1 };
        assert_eq!(b.index.searchable_segment_metas().unwrap().len(), expect);
        assert_segments_are_the_writers(&b, &rows);
        // More segments than may be written at once: later ones wait for earlier ones.
        let mut b = FtsIndex::bulk(&Location::Memory, &names(3), Tokenizer::Default).unwrap();
        (b.cache_probe, b.piece_rows, b.segment_rows) = (8, 100, 200);
        b.expect_rows(rows.len() as u64);
        for (id, t) in &rows {
            b.add(*id, t.iter().map(|t| t.as_deref())).unwrap();
        }
        let b = b.finish(Payload { lsn: 3, next_row_id: 9 }).unwrap();
        assert_eq!(b.index.searchable_segment_metas().unwrap().len(), 13, "segments of 200 rows");
        assert_segments_are_the_writers(&b, &rows);
        // A build dropped unfinished waits for its threads and leaves nothing committed.
        let mut d = FtsIndex::bulk(&Location::Memory, &names(3), Tokenizer::Default).unwrap();
        d.piece_rows = 300;
        d.expect_rows(rows.len() as u64);
        for (id, t) in &rows[..1500] {
            d.add(*id, t.iter().map(|t| t.as_deref())).unwrap();
        }
        drop(d);
    }

    #[test]
    fn empty_and_unordered_builds() {
        let b = by_bulk(&[], 2, Tokenizer::Default, SEGMENT_DOCS);
        assert_eq!(b.num_docs(), 0);
        assert_eq!(b.payload().unwrap(), Some(Payload { lsn: 3, next_row_id: 9 }));
        assert!(b.search("x", None).unwrap().is_empty());
        // Ids out of order, and a column that is NULL everywhere.
        let rows: Vec<Row> = [5u64, 1, 9, 3]
            .iter()
            .map(|&id| (id, vec![Some(format!("w{}", id % 2)), None]))
            .collect();
        let a = by_writer(&rows, 2, Tokenizer::Default);
        let b = by_bulk(&rows, 2, Tokenizer::Default, SEGMENT_DOCS);
        assert_eq!(files(&a), files(&b));
        assert_eq!(sorted(b.search("w1", None).unwrap()).len(), 4);
    }

    #[test]
    fn an_index_on_disk_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let loc = Location::Dir(dir.path().join("ix"));
        let mut b = FtsIndex::bulk(&loc, &names(1), Tokenizer::Default).unwrap();
        for i in 0..100u64 {
            b.add(i, [Some(if i % 2 == 0 { "even words" } else { "odd words" })]).unwrap();
        }
        drop(b.finish(Payload { lsn: 1, next_row_id: 100 }).unwrap());
        let ix =
            FtsIndex::open(&dir.path().join("ix"), &names(1), Tokenizer::Default, true).unwrap();
        assert!(ix.files_intact());
        assert_eq!(ix.payload().unwrap(), Some(Payload { lsn: 1, next_row_id: 100 }));
        assert_eq!(ix.search("odd", None).unwrap().len(), 50);
    }

    /// `rows` as Arrow-layout batches of `batch` rows (with some leading garbage in the
    /// data buffer, so offsets do not start at 0).
    fn by_batches(rows: &[Row], n_cols: usize, batch: usize, segment_rows: usize) -> FtsIndex {
        let mut b = FtsIndex::bulk(&Location::Memory, &names(n_cols), Tokenizer::Default).unwrap();
        b.segment_rows = segment_rows;
        b.cache_probe = 8;
        for chunk in rows.chunks(batch) {
            let ids: Vec<u64> = chunk.iter().map(|r| r.0).collect();
            let mut cols = Vec::new();
            for c in 0..n_cols {
                let mut data = b"junk".to_vec();
                let mut offsets = vec![data.len() as i32];
                let mut valid = Vec::new();
                for r in chunk {
                    data.extend_from_slice(r.1[c].as_deref().unwrap_or("").as_bytes());
                    offsets.push(data.len() as i32);
                    valid.push(r.1[c].is_some());
                }
                cols.push((data, offsets, valid));
            }
            let views: Vec<TextColumn<'_>> = cols
                .iter()
                .map(|(d, o, v)| TextColumn { data: d, offsets: o, valid: Some(v) })
                .collect();
            b.add_batch(&ids, &views).unwrap();
        }
        b.finish(Payload { lsn: 3, next_row_id: 9 }).unwrap()
    }

    #[test]
    fn batches_give_the_same_segments_as_rows() {
        let rows = sample_rows(2500);
        let one = by_bulk(&rows, 3, Tokenizer::Default, 1000);
        for batch in [1, 7, 999, 2500] {
            let b = by_batches(&rows, 3, batch, 1000);
            assert!(files(&one) == files(&b), "batches of {batch}");
        }
    }

    #[test]
    fn bad_batches_are_refused_and_change_nothing() {
        let rows = sample_rows(10);
        let mut b = FtsIndex::bulk(&Location::Memory, &names(1), Tokenizer::Default).unwrap();
        b.cache_probe = 8;
        let col = |data, offsets, valid| TextColumn { data, offsets, valid };
        let bad = [
            col(b"ab\xffcd", &[0, 2, 5], None),      // not UTF-8
            col("aé".as_bytes(), &[0, 2, 3], None),  // offset inside a character
            col(b"abcd", &[0, 2, 9], None),          // past the data
            col(b"abcd", &[0, 3, 2], None),          // decreasing
            col(b"abcd", &[0, 2, 4], Some(&[true])), // validity of the wrong length
        ];
        for c in bad {
            assert!(matches!(b.add_batch(&[1, 2], &[c]), Err(Error::Invalid(_))), "{c:?}");
        }
        // A bad row late in a batch that spans segments: nothing of the batch is added.
        let mut small = FtsIndex::bulk(&Location::Memory, &names(1), Tokenizer::Default).unwrap();
        small.segment_rows = 2;
        let late = col(b"abcd\xff", &[0, 1, 2, 3, 5], None);
        assert!(matches!(small.add_batch(&[1, 2, 3, 4], &[late]), Err(Error::Invalid(_))));
        assert_eq!(small.finish(Payload::default()).unwrap().num_docs(), 0);
        let two = TextColumn { data: b"ab", offsets: &[0, 1, 2], valid: None };
        assert!(
            matches!(b.add_batch(&[1, 2], &[two, two]), Err(Error::Invalid(_))),
            "column count"
        );
        for (id, t) in &rows {
            b.add(*id, t.iter().take(1).map(|t| t.as_deref())).unwrap();
        }
        let b = b.finish(Payload { lsn: 3, next_row_id: 9 }).unwrap();
        let one_col = by_bulk(
            &rows.iter().map(|(id, t)| (*id, t[..1].to_vec())).collect::<Vec<_>>(),
            1,
            Tokenizer::Default,
            SEGMENT_DOCS,
        );
        assert!(files(&b) == files(&one_col));
    }

    /// ASCII and other words, and words just under and at the long-token limit (64 bytes).
    const WORDS: &[&str] = &[
        "alpha",
        "Beta",
        "gamma",
        "δέλτα",
        "東京都",
        "a-b",
        "x",
        "Running",
        "MiXeD_9",
        "ÄÖ",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb",
    ];

    fn rows_strategy() -> impl Strategy<Value = Vec<Row>> {
        let text =
            prop::collection::vec(prop::sample::select(WORDS), 0..6).prop_map(|w| w.join(" "));
        let row = prop::collection::vec(prop::option::of(text), 2);
        prop::collection::vec(row, 0..200).prop_map(|rows| {
            rows.into_iter().enumerate().map(|(i, t)| ((i as u64 * 7919) % 1009, t)).collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(40))]
        #[test]
        fn random_rows_give_the_writers_files(
            rows in rows_strategy(),
            tok in prop::sample::select(vec![Tokenizer::Default, Tokenizer::English, Tokenizer::Ngram]),
        ) {
            let a = by_writer(&rows, 2, tok);
            let b = by_bulk(&rows, 2, tok, SEGMENT_DOCS);
            let (fa, fb) = (files(&a), files(&b));
            prop_assert_eq!(fa.len(), fb.len());
            prop_assert!(fa == fb, "segment files differ");
        }
    }
}
