//! Segment files: immutable, checksummed, memory-mapped column storage.
//!
//! # Byte layout (format version 4)
//!
//! ```text
//! offset 0    header, 64 bytes
//!             magic  "BSLTSEG\0"            8 bytes
//!             format version (u32 LE)       4 bytes   = 4 with float16 / int8 vector
//!                                                       columns, else 3 (1, 2 still read)
//!             reserved, zero               52 bytes   (a non-zero byte is corruption)
//! offset 64   blocks: one per (row group, column) chunk, each starting 64-byte aligned,
//!             zero-padded to the next multiple of 64. A block is the chunk's encoded
//!             sections (see `encoding`) as they are (compression 0) or in frames of at
//!             most 32 KiB with an index (compression 2, see `frames`: version 3 starts
//!             each section with a 4 KiB frame and stores frames of exact decimal floats
//!             bit packed; version 2 wrote 32 KiB frames, zstd or as they are); version 1
//!             files hold whole zstd frames instead (compression 1).
//! offset F    footer (F is 64-aligned), `footer_len` bytes, see below
//! end - 32    trailer, 32 bytes
//!             footer offset F (u64), footer_len (u64), CRC-32C of the footer (u32),
//!             format version (u32), magic "BSLTEND\0"
//! ```
//!
//! Footer: segment id (u64), table id (u64), column count (u32) and the column ids (u32
//! each), the segment's Arrow schema as an IPC flatbuffer (length-prefixed), row count (u64),
//! row-group count (u32), then per row group: rows (u32), min and max `_id` (u64),
//! `ids_sorted` and `ids_dense` (bool), and one chunk descriptor per column: encoding (tag +
//! parameters), compression (u8), null count (u32), section count (u8) and lengths (u64),
//! block offset, stored length, raw length (u64 each), block CRC-32C (u32), zone map.
//!
//! # Integrity
//!
//! Every byte of the file is covered by a check: header magic/version/zero padding at open,
//! the footer CRC and the trailer's self-consistency (`F + footer_len + 32 == file length`)
//! at open, and each block's CRC — computed over the block *including its zero padding* —
//! verified lazily the first time that block is read whole (never as a whole-file pass at
//! open, never again afterwards). A read of a few rows of a framed block (a window, a row
//! list, a point lookup) restores only the frames holding them, checking the frame index's
//! CRC and each restored frame's CRC instead; frames it does not restore are checked when
//! they are restored, and the block's zero padding when a whole read restores the block.
//! A failed check is [`Error::Corrupt`] naming file and offset.
//!
//! # Crash analysis
//!
//! A segment becomes part of the database only when a manifest naming it is installed, and
//! the writer syncs the segment file and its directory first. A crash before the manifest
//! rename leaves an unreferenced file that the next writer open deletes; a crash after it
//! leaves a complete, synced segment. Segments are never modified after they are written.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use arrow_array::{Array, ArrayRef, RecordBatch, UInt64Array};
use arrow_buffer::Buffer;
use arrow_schema::SchemaRef;
use rayon::prelude::*;

use crate::codec::{Dec, Enc, align64, crc};
use crate::encoding::{self, ChunkInfo, CompressionPolicy, DecodeMode, Encoding, ZoneMap};
use crate::error::{Error, Result};
use crate::io::Vfs;
use crate::types::{Physical, physical_of};

/// Segment format version written. Version 2 added framed compression (tag 2, see
/// [`crate::frames`]); version 3 small first frames and decimal frames in it; version 4 the
/// `half-vector` and `int8-vector` encodings (tags 5 and 6) of vector columns stored as
/// float16 or int8; version 5 zone maps of decimal chunks (stat tag 4); version 6 decimal
/// chunks in the integer encodings (`for` and `delta` bit-packing of the unscaled values
/// as signed 64-bit integers). A segment is written with the lowest version that
/// describes it: without bit-packed decimals as version 5, without decimal zone maps
/// either as version 4 or, without stored vectors either, as version 3
/// ([`SEGMENT_VERSION_WITHOUT_STORED_VECTORS`]), so an older build reads what it can.
/// This reader reads versions [`OLDEST_SEGMENT_VERSION`] to this one and refuses others. A
/// future bump must keep a reader for every older version it claims.
pub const SEGMENT_FORMAT_VERSION: u32 = 6;
/// The version written for a segment without bit-packed decimal chunks.
pub const SEGMENT_VERSION_WITHOUT_PACKED_DECIMALS: u32 = 5;
/// The version written for a segment without decimal zone maps.
pub const SEGMENT_VERSION_WITHOUT_DECIMAL_STATS: u32 = 4;
/// The version written for a segment without decimal zone maps whose vector columns are
/// all float32.
pub const SEGMENT_VERSION_WITHOUT_STORED_VECTORS: u32 = 3;
/// The oldest segment format version this reader reads (version 1: blocks are whole zstd
/// frames, tag 1).
pub const OLDEST_SEGMENT_VERSION: u32 = 1;
/// Rows per row group (the last row group of a segment may be shorter).
pub const ROW_GROUP_ROWS: usize = 64 * 1024;

const HEADER_MAGIC: &[u8; 8] = b"BSLTSEG\0";
const TRAILER_MAGIC: &[u8; 8] = b"BSLTEND\0";
const HEADER_LEN: usize = 64;
const TRAILER_LEN: usize = 32;

/// Compression codec of a stored block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Stored as is.
    None,
    /// One zstd frame (format version 1).
    Zstd,
    /// Frames with an index ([`crate::frames`]; format version 2).
    Framed,
}

/// Where a chunk's block lives and how to check it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkMeta {
    /// Encoding of the values.
    pub encoding: Encoding,
    /// Block compression.
    pub compression: Compression,
    /// Number of null rows.
    pub null_count: u32,
    /// Section lengths of the uncompressed block.
    pub sections: Vec<u64>,
    /// Absolute file offset of the block (64-aligned).
    pub offset: u64,
    /// Stored (possibly compressed) length, without padding.
    pub stored_len: u64,
    /// Uncompressed length.
    pub raw_len: u64,
    /// CRC-32C over the stored bytes plus zero padding to 64.
    pub crc: u32,
    /// Min/max of the non-null values.
    pub zone_map: Option<ZoneMap>,
}

/// One row group: up to [`ROW_GROUP_ROWS`] rows, one chunk per column.
#[derive(Debug, Clone, PartialEq)]
pub struct RowGroupMeta {
    /// Number of rows.
    pub rows: u32,
    /// Smallest `_id`.
    pub id_min: u64,
    /// Largest `_id`.
    pub id_max: u64,
    /// `_id` ascending within the row group.
    pub ids_sorted: bool,
    /// `_id`s are exactly `id_min..=id_max` in order: row = id - id_min.
    pub ids_dense: bool,
    /// Chunks, in the segment's column order.
    pub chunks: Vec<ChunkMeta>,
}

/// The decoded footer.
#[derive(Debug, Clone)]
pub struct SegmentMeta {
    /// Segment id (unique per database).
    pub segment_id: u64,
    /// Owning table.
    pub table_id: u64,
    /// Column ids in segment order (`_id`'s id 0 first).
    pub column_ids: Vec<u32>,
    /// Arrow schema in segment order.
    pub schema: SchemaRef,
    /// Physical kinds in segment order.
    pub physical: Vec<Physical>,
    /// Total rows.
    pub rows: u64,
    /// Row groups.
    pub row_groups: Vec<RowGroupMeta>,
}

impl SegmentMeta {
    /// Index of the first row of row group `rg` within the segment.
    pub fn row_start(&self, rg: usize) -> usize {
        self.row_groups[..rg].iter().map(|g| g.rows as usize).sum()
    }

    /// Position of a column id in this segment, if present.
    pub fn position_of(&self, column_id: u32) -> Option<usize> {
        self.column_ids.iter().position(|&c| c == column_id)
    }
}

/// Options for writing segments.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteOptions {
    /// Block compression policy.
    pub compression: CompressionPolicy,
}

/// Summary of a written segment.
#[derive(Debug, Clone)]
pub struct WrittenSegment {
    /// Rows written.
    pub rows: u64,
    /// Smallest `_id`.
    pub id_min: u64,
    /// Largest `_id`.
    pub id_max: u64,
    /// File size in bytes.
    pub bytes: u64,
}

/// Writes `batches` (all with `schema`, `_id` as column 0) as a new segment file at `path`
/// and fsyncs it. The caller installs it in the manifest afterwards.
#[allow(clippy::too_many_arguments)]
pub fn write_segment(
    vfs: &dyn Vfs,
    path: &Path,
    segment_id: u64,
    table_id: u64,
    column_ids: &[u32],
    schema: &SchemaRef,
    batches: &[RecordBatch],
    opts: WriteOptions,
) -> Result<WrittenSegment> {
    let phys: Vec<Physical> =
        schema.fields().iter().map(|f| physical_of(f)).collect::<Result<_>>()?;
    let groups = row_groups(schema, batches)?;
    // Encode every (row group, column) chunk in parallel.
    let jobs: Vec<(usize, usize)> =
        (0..groups.len()).flat_map(|g| (0..phys.len()).map(move |c| (g, c))).collect();
    let encoded: Vec<encoding::EncodedChunk> = jobs
        .par_iter()
        .map(|&(g, c)| encoding::encode(groups[g][c].as_ref(), phys[c], opts.compression))
        .collect::<Result<_>>()?;

    // The lowest version that describes the segment (see `SEGMENT_FORMAT_VERSION`).
    let stored_vectors = phys.iter().any(|p| {
        matches!(p, Physical::Vector { form, .. } if *form != basalt_vector::StoredForm::Float32)
    });
    let decimal_stats = encoded
        .iter()
        .any(|ch| matches!(&ch.stats, Some(ZoneMap { min: encoding::StatValue::Decimal(_), .. })));
    let packed_decimals = jobs
        .iter()
        .zip(&encoded)
        .any(|(&(_, c), ch)| phys[c] == Physical::Decimal128 && ch.encoding != Encoding::Plain);
    let version = if packed_decimals {
        SEGMENT_FORMAT_VERSION
    } else if decimal_stats {
        SEGMENT_VERSION_WITHOUT_PACKED_DECIMALS
    } else if stored_vectors {
        SEGMENT_VERSION_WITHOUT_DECIMAL_STATS
    } else {
        SEGMENT_VERSION_WITHOUT_STORED_VECTORS
    };
    // Place blocks.
    let mut header = vec![0u8; HEADER_LEN];
    header[..8].copy_from_slice(HEADER_MAGIC);
    header[8..12].copy_from_slice(&version.to_le_bytes());
    let zeros = [0u8; 64];
    let mut parts: Vec<&[u8]> = vec![&header];
    let mut offset = HEADER_LEN;
    let mut metas = Vec::with_capacity(encoded.len());
    for ch in &encoded {
        let stored: &[u8] = if ch.compressed { &ch.stored } else { &ch.raw };
        let pad = align64(stored.len()) - stored.len();
        let block_crc = crc32c::crc32c_append(crc(stored), &zeros[..pad]);
        metas.push(ChunkMeta {
            encoding: ch.encoding.clone(),
            compression: if ch.compressed { Compression::Framed } else { Compression::None },
            null_count: ch.null_count,
            sections: ch.sections.clone(),
            offset: offset as u64,
            stored_len: stored.len() as u64,
            raw_len: ch.raw.len() as u64,
            crc: block_crc,
            zone_map: ch.stats.clone(),
        });
        parts.push(stored);
        parts.push(&zeros[..pad]);
        offset += stored.len() + pad;
    }
    let footer_offset = offset as u64;

    // Footer.
    let mut e = Enc::new();
    e.u64(segment_id);
    e.u64(table_id);
    crate::types::encode_columns(&mut e, column_ids, schema);
    let total_rows: usize = groups.iter().map(|g| g[0].len()).sum();
    e.u64(total_rows as u64);
    e.u32(groups.len() as u32);
    let mut id_min_all = u64::MAX;
    let mut id_max_all = 0u64;
    let mut metas = metas.into_iter();
    for g in &groups {
        let ids =
            g[0].as_any().downcast_ref::<UInt64Array>().ok_or_else(|| Error::InvalidInput {
                table: table_id.to_string(),
                reason: "column 0 must be the UInt64 _id".into(),
            })?;
        let (id_min, id_max, sorted, dense) = id_summary(ids.values());
        id_min_all = id_min_all.min(id_min);
        id_max_all = id_max_all.max(id_max);
        e.u32(g[0].len() as u32);
        e.u64(id_min);
        e.u64(id_max);
        e.bool(sorted);
        e.bool(dense);
        for _ in 0..phys.len() {
            let Some(m) = metas.next() else {
                return Err(Error::InvalidInput {
                    table: table_id.to_string(),
                    reason: "chunk count".into(),
                });
            };
            write_chunk_meta(&m, &mut e);
        }
    }
    let footer = e.finish();
    let mut trailer = Vec::with_capacity(TRAILER_LEN);
    trailer.extend_from_slice(&footer_offset.to_le_bytes());
    trailer.extend_from_slice(&(footer.len() as u64).to_le_bytes());
    trailer.extend_from_slice(&crc(&footer).to_le_bytes());
    trailer.extend_from_slice(&version.to_le_bytes());
    trailer.extend_from_slice(TRAILER_MAGIC);
    parts.push(&footer);
    parts.push(&trailer);
    let bytes = (offset + footer.len() + TRAILER_LEN) as u64;
    vfs.write_file(path, &parts, true)?;
    Ok(WrittenSegment { rows: total_rows as u64, id_min: id_min_all, id_max: id_max_all, bytes })
}

fn id_summary(ids: &[u64]) -> (u64, u64, bool, bool) {
    let mut lo = u64::MAX;
    let mut hi = 0;
    let mut sorted = true;
    for (i, &v) in ids.iter().enumerate() {
        lo = lo.min(v);
        hi = hi.max(v);
        if i > 0 && ids[i - 1] >= v {
            sorted = false;
        }
    }
    let dense = sorted && !ids.is_empty() && hi - lo + 1 == ids.len() as u64;
    (lo, hi, sorted, dense)
}

/// Cuts batches into row groups of at most [`ROW_GROUP_ROWS`] rows (columns per group).
fn row_groups(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<Vec<Vec<ArrayRef>>> {
    let ncols = schema.fields().len();
    let mut groups = Vec::new();
    let mut pending: Vec<Vec<ArrayRef>> = vec![Vec::new(); ncols];
    let mut pending_rows = 0usize;
    let flush = |pending: &mut Vec<Vec<ArrayRef>>, groups: &mut Vec<Vec<ArrayRef>>| -> Result<()> {
        let mut cols = Vec::with_capacity(ncols);
        for parts in pending.iter_mut() {
            let col = if parts.len() == 1 {
                parts.remove(0)
            } else {
                let refs: Vec<&dyn Array> = parts.iter().map(|a| a.as_ref()).collect();
                let c = arrow_select::concat::concat(&refs)
                    .map_err(|e| Error::arrow("build row group", e))?;
                parts.clear();
                c
            };
            cols.push(col);
        }
        groups.push(cols);
        Ok(())
    };
    for b in batches {
        let mut off = 0;
        while off < b.num_rows() {
            let take = (ROW_GROUP_ROWS - pending_rows).min(b.num_rows() - off);
            for (c, col) in b.columns().iter().enumerate() {
                pending[c].push(col.slice(off, take));
            }
            pending_rows += take;
            off += take;
            if pending_rows == ROW_GROUP_ROWS {
                flush(&mut pending, &mut groups)?;
                pending_rows = 0;
            }
        }
    }
    if pending_rows > 0 {
        flush(&mut pending, &mut groups)?;
    }
    Ok(groups)
}

fn write_chunk_meta(m: &ChunkMeta, e: &mut Enc) {
    m.encoding.write(e);
    e.u8(match m.compression {
        Compression::None => 0,
        Compression::Zstd => 1,
        Compression::Framed => 2,
    });
    e.u32(m.null_count);
    e.u8(m.sections.len() as u8);
    for &s in &m.sections {
        e.u64(s);
    }
    e.u64(m.offset);
    e.u64(m.stored_len);
    e.u64(m.raw_len);
    e.u32(m.crc);
    ZoneMap::write_opt(&m.zone_map, e);
}

fn read_chunk_meta(d: &mut Dec<'_>, footer_offset: u64) -> Result<ChunkMeta> {
    let encoding = Encoding::read(d)?;
    let compression = match d.u8("compression")? {
        0 => Compression::None,
        1 => Compression::Zstd,
        2 => Compression::Framed,
        c => return Err(d.err(format!("unknown compression {c}"))),
    };
    let null_count = d.u32("null count")?;
    let nsec = d.u8("section count")? as usize;
    let mut sections = Vec::with_capacity(nsec);
    for _ in 0..nsec {
        sections.push(d.u64("section length")?);
    }
    let offset = d.u64("block offset")?;
    let stored_len = d.u64("stored length")?;
    let raw_len = d.u64("raw length")?;
    let crc = d.u32("block checksum")?;
    let zone_map = ZoneMap::read_opt(d)?;
    let end = offset.checked_add(align64(stored_len as usize) as u64);
    if offset < HEADER_LEN as u64 || offset % 64 != 0 || end.is_none_or(|e| e > footer_offset) {
        return Err(
            d.err(format!("block at {offset} (+{stored_len}) lies outside the data region"))
        );
    }
    if compression == Compression::None && raw_len != stored_len {
        return Err(d.err("uncompressed block with raw length != stored length"));
    }
    if raw_len > (1 << 40) {
        return Err(d.err("implausible raw block length"));
    }
    Ok(ChunkMeta {
        encoding,
        compression,
        null_count,
        sections,
        offset,
        stored_len,
        raw_len,
        crc,
        zone_map,
    })
}

const UNVERIFIED: u8 = 0;
const VERIFIED: u8 = 1;

/// An open segment: the mapped bytes, the decoded footer, and per-block verification state.
#[derive(Debug)]
pub struct Segment {
    path: PathBuf,
    buf: Buffer,
    meta: SegmentMeta,
    verified: Vec<AtomicU8>,
    /// Recently decompressed blocks, so point reads do not decompress a block each time.
    cache: parking_lot::Mutex<BlockCache>,
    /// The decoded `_id` column per row group, filled on first use by [`Segment::ids`]
    /// (8 bytes per row, only for row groups looked up by binary search).
    ids: Vec<std::sync::OnceLock<ArrayRef>>,
    /// For row groups whose `_id`s are not ascending (written before compaction sorted its
    /// output): row positions in `_id` order, built on the first lookup by
    /// [`Segment::id_order`], so a lookup is a binary search rather than a scan.
    id_orders: Vec<std::sync::OnceLock<Arc<[u32]>>>,
    /// Quantised copies of vector chunks, keyed by (row group, column position, kind),
    /// built on first use by [`Segment::quantized`] and kept with the segment while the
    /// process's budget for them allows (`crate::quantized`).
    quantized: parking_lot::Mutex<QuantCache>,
}

/// Quantised copies by (row group, column, first row of the part, kind).
type QuantCache = crate::quantized::Copies<(usize, usize, usize, basalt_vector::Quantization)>;

/// A FIFO cache of decompressed blocks, bounded by their bytes.
#[derive(Debug, Default)]
struct BlockCache {
    /// By block number (`rg * columns + col`): a lookup per point read, no hashing; with the
    /// bytes each counts against the bound.
    blocks: Vec<Option<(Cached, usize)>>,
    order: std::collections::VecDeque<usize>,
    bytes: usize,
    /// Bytes kept at most (see [`CACHED_BYTES`]).
    bound: usize,
}

/// A window of a 64-bit float dictionary chunk reads its dictionary entries straight from
/// the packed decimal frames when the dictionary has at least this many entries per row of
/// the window (see [`Segment::window_from_packed_dictionary`]); smaller dictionaries are
/// restored.
const PACKED_ENTRIES_PER_ROW: usize = 16;

/// A decompressed block, whole or (framed blocks) with some frames restored.
#[derive(Debug)]
struct Cached {
    buf: Buffer,
    /// Which frames are restored; `None`: all of them.
    filled: Option<Vec<bool>>,
    /// The block's checked frame index, kept for the next partial read.
    index: Option<Arc<crate::frames::Index>>,
}

impl BlockCache {
    /// Block `idx` if it is kept whole.
    fn complete(&self, idx: usize) -> Option<Buffer> {
        self.get(idx).filter(|c| c.filled.is_none()).map(|c| c.buf.clone())
    }

    /// Block `idx` as kept, whole or in part.
    fn get(&self, idx: usize) -> Option<&Cached> {
        self.blocks.get(idx).and_then(Option::as_ref).map(|(c, _)| c)
    }

    /// Keeps `c` as block `idx` (replacing what was kept), evicting the oldest blocks beyond
    /// the byte bound.
    fn put(&mut self, idx: usize, c: Cached) {
        self.keep(idx, c, false);
    }

    /// Keeps `c`, a block whose bytes are the segment's own mapping, as block `idx`: it
    /// counts no bytes against the bound (it holds no memory of its own).
    fn put_in_place(&mut self, idx: usize, c: Cached) {
        self.keep(idx, c, true);
    }

    fn keep(&mut self, idx: usize, c: Cached, in_place: bool) {
        let len = if in_place { 0 } else { c.buf.len() };
        if self.blocks.len() <= idx {
            self.blocks.resize_with(idx + 1, || None);
        }
        match self.blocks[idx].replace((c, len)) {
            Some((_, old)) => self.bytes -= old,
            None => self.order.push_back(idx),
        }
        self.bytes += len;
        while self.bytes > self.bound.max(CACHED_BYTES) && self.order.len() > 1 {
            let Some(old) = self.order.pop_front() else { break };
            if let Some((_, counted)) = self.blocks.get_mut(old).and_then(Option::take) {
                self.bytes -= counted;
            }
        }
    }
}

/// Bytes of decompressed blocks kept per segment at least: enough for every compressed block
/// of a typical segment, so point lookups at random rows do not decompress a block each (a
/// block-count bound let a few columns of a 1M-row segment evict each other). A segment
/// whose blocks decompress to more keeps up to all of them, so a table cached whole in many
/// small segments stays cached whole in fewer large ones. A process-wide bound is missing.
const CACHED_BYTES: usize = 32 << 20;

impl Segment {
    /// Maps and opens a segment file; checks header, trailer and footer (not the blocks).
    pub fn open(vfs: &dyn Vfs, path: &Path) -> Result<Arc<Segment>> {
        let buf = vfs.map(path)?;
        Ok(Arc::new(Self::from_buffer(path.to_path_buf(), buf)?))
    }

    /// Opens a segment held in `buf` (64-byte aligned).
    pub fn from_buffer(path: PathBuf, buf: Buffer) -> Result<Segment> {
        let bytes = buf.as_slice();
        let len = bytes.len();
        let corrupt = |off: u64, why: &str| Error::corrupt(&path, off, why);
        if len < HEADER_LEN + TRAILER_LEN {
            return Err(corrupt(0, "file too short to be a segment (truncated?)"));
        }
        if &bytes[..8] != HEADER_MAGIC {
            return Err(corrupt(0, "bad header magic"));
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if !(OLDEST_SEGMENT_VERSION..=SEGMENT_FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedFormatVersion {
                file: path,
                found: version,
                supported: SEGMENT_FORMAT_VERSION,
            });
        }
        if let Some(i) = bytes[12..HEADER_LEN].iter().position(|&b| b != 0) {
            return Err(corrupt(12 + i as u64, "non-zero reserved header byte"));
        }
        let t = &bytes[len - TRAILER_LEN..];
        let tpos = (len - TRAILER_LEN) as u64;
        let mut td = Dec::new(t, &path, tpos);
        let footer_offset = td.u64("footer offset")?;
        let footer_len = td.u64("footer length")?;
        let footer_crc = td.u32("footer checksum")?;
        let tversion = td.u32("trailer version")?;
        if &t[24..32] != TRAILER_MAGIC {
            return Err(corrupt(tpos + 24, "bad trailer magic (truncated file?)"));
        }
        if tversion != version {
            return Err(corrupt(tpos + 20, "trailer version differs from header version"));
        }
        if footer_offset % 64 != 0
            || footer_offset.checked_add(footer_len) != Some(tpos)
            || footer_offset < HEADER_LEN as u64
        {
            return Err(corrupt(tpos, "trailer footer offset/length inconsistent with file size"));
        }
        let footer = &bytes[footer_offset as usize..tpos as usize];
        if crc(footer) != footer_crc {
            return Err(corrupt(footer_offset, "footer checksum mismatch"));
        }
        let meta = parse_footer(footer, &path, footer_offset)?;
        let nblocks = meta.row_groups.len() * meta.column_ids.len();
        let verified = (0..nblocks).map(|_| AtomicU8::new(UNVERIFIED)).collect();
        let ids = (0..meta.row_groups.len()).map(|_| std::sync::OnceLock::new()).collect();
        let id_orders = (0..meta.row_groups.len()).map(|_| std::sync::OnceLock::new()).collect();
        // Decompressed blocks, and the values of bit-packed decimal chunks decoded whole.
        let raw: u64 = meta
            .row_groups
            .iter()
            .flat_map(|g| g.chunks.iter().zip(&meta.physical).map(move |(c, p)| (g.rows, c, p)))
            .map(|(rows, c, p)| {
                let decoded = if kept_decoded(*p, c) { u64::from(rows) * 16 } else { 0 };
                c.raw_len + decoded
            })
            .sum();
        let bound = usize::try_from(raw).unwrap_or(usize::MAX);
        Ok(Segment {
            path,
            buf,
            meta,
            verified,
            cache: parking_lot::Mutex::new(BlockCache { bound, ..BlockCache::default() }),
            ids,
            id_orders,
            quantized: Default::default(),
        })
    }

    /// The decoded footer.
    pub fn meta(&self) -> &SegmentMeta {
        &self.meta
    }

    /// The file this segment was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// File size in bytes.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// The quantised copy of the part of vector chunk (`rg`, `col`) that starts at row
    /// `start`, built from `values` (the part's `f32` values, row-major, `dim` per row) the
    /// first time it is asked for and kept with the segment (D bytes per row for int8, 2·D
    /// for half floats) when the process's budget for copies has room. A caller always
    /// splits a chunk into the same parts. Concurrent first users may both build it; one
    /// copy is kept.
    pub fn quantized(
        &self,
        rg: usize,
        col: usize,
        start: usize,
        kind: basalt_vector::Quantization,
        values: &[f32],
        dim: usize,
    ) -> Arc<basalt_vector::Quantized> {
        crate::quantized::Copies::get_or_build(&self.quantized, (rg, col, start, kind), || {
            basalt_vector::Quantized::encode(kind, values, dim)
        })
    }

    /// The uncompressed block of chunk (`rg`, `col`), verifying its checksum on first touch.
    pub fn block(&self, rg: usize, col: usize) -> Result<Buffer> {
        let m = self.chunk(rg, col)?;
        let idx = rg * self.meta.column_ids.len() + col;
        let stored = self.buf.slice_with_length(m.offset as usize, align64(m.stored_len as usize));
        if self.verified[idx].load(Ordering::Acquire) != VERIFIED {
            if crc(stored.as_slice()) != m.crc {
                return Err(Error::corrupt(&self.path, m.offset, "block checksum mismatch"));
            }
            self.verified[idx].store(VERIFIED, Ordering::Release);
        }
        let stored = &stored.as_slice()[..m.stored_len as usize];
        let raw = match m.compression {
            Compression::None => {
                return Ok(self.buf.slice_with_length(m.offset as usize, m.stored_len as usize));
            }
            Compression::Zstd | Compression::Framed => {
                if let Some(b) = self.cache.lock().complete(idx) {
                    return Ok(b);
                }
                if m.compression == Compression::Zstd {
                    encoding::decompress(stored, m.raw_len as usize, &self.path, m.offset)?
                } else {
                    let corrupt = |e: String| Error::corrupt(&self.path, m.offset, e);
                    let index = crate::frames::Index::read(stored, &m.sections, m.raw_len as usize)
                        .map_err(corrupt)?;
                    let width = encoding::in_place_width(self.meta.physical[col]);
                    let at = |body: &std::ops::Range<usize>| m.offset as usize + body.start;
                    match index.in_place() {
                        // Frames stored as they are, back to back: the raw bytes in place
                        // (aligned for the values; the block's checksum was checked above).
                        Some(body)
                            if width.is_some_and(|w| {
                                (self.buf.as_ptr() as usize + at(&body)).is_multiple_of(w)
                            }) =>
                        {
                            // Kept without counting against the cache's bound: it is the
                            // mapping, no memory of its own.
                            let b = self.buf.slice_with_length(at(&body), body.len());
                            let kept = Cached { buf: b.clone(), filled: None, index: None };
                            self.cache.lock().put_in_place(idx, kept);
                            return Ok(b);
                        }
                        // Frames need no check of their own: the whole block's was checked.
                        _ => {
                            index.restore_all(stored, m.raw_len as usize, false).map_err(corrupt)?
                        }
                    }
                }
            }
        };
        self.cache.lock().put(idx, Cached { buf: raw.clone(), filled: None, index: None });
        Ok(raw)
    }

    /// The block of chunk (`rg`, `col`) with at least the bytes `need` names in place: of a
    /// framed block only the frames holding them are restored (each checked against its own
    /// checksum) and kept with the frames restored before; other blocks whole, as
    /// [`Segment::block`].
    fn block_with(
        &self,
        rg: usize,
        col: usize,
        need: &encoding::WindowBytes,
        read_index: Option<Arc<crate::frames::Index>>,
    ) -> Result<Buffer> {
        let m = self.chunk(rg, col)?;
        let encoding::WindowBytes::Ranges { ranges, strings } = need else {
            return self.block(rg, col);
        };
        if m.compression != Compression::Framed {
            return self.block(rg, col);
        }
        let idx = rg * self.meta.column_ids.len() + col;
        let stored = &self.buf.as_slice()[m.offset as usize..][..m.stored_len as usize];
        let corrupt = |e: String| Error::corrupt(&self.path, m.offset, e);
        let (index, mut have) = match self.cache.lock().get(idx) {
            Some(Cached { buf, filled: None, .. }) => return Ok(buf.clone()),
            Some(Cached { buf, filled: Some(f), index }) => {
                (index.clone(), Some((buf.clone(), f.clone())))
            }
            None => (None, None),
        };
        let index = match index.or(read_index) {
            Some(i) => i,
            None => Arc::new(
                crate::frames::Index::read(stored, &m.sections, m.raw_len as usize)
                    .map_err(corrupt)?,
            ),
        };
        let want = index.covering(ranges);
        // Everything already restored in the kept buffer: no copy.
        if let Some((buf, filled)) = &have
            && want.iter().all(|&k| filled[k])
        {
            match strings.as_ref().map(|s| s.data(buf.as_slice())) {
                None => return Ok(buf.clone()),
                Some(Some(r))
                    if index.covering(std::slice::from_ref(&r)).iter().all(|&k| filled[k]) =>
                {
                    return Ok(buf.clone());
                }
                // Damaged offsets: the whole block, whose decoding reports them.
                Some(None) => return self.block(rg, col),
                Some(Some(_)) => {}
            }
        }
        // A new buffer (the kept one may be shared with arrays already handed out): the
        // frames restored in the kept one, plus the missing ones. A block read in more than
        // one place is restored whole at its second miss — growing it a frame at a time
        // would copy it at every miss of a random access pattern (point lookups).
        let want = if have.is_some() { (0..index.frames.len()).collect() } else { want };
        let io = |e: std::io::Error| Error::io("restore block", &self.path, e);
        let sparse = want.len() < index.frames.len();
        let mut out = crate::frames::RawBlock::zeroed(m.raw_len as usize, sparse);
        let mut filled = vec![false; index.frames.len()];
        if let Some((buf, f)) = have.take() {
            for (k, frame) in index.frames.iter().enumerate().filter(|(k, _)| f[*k]) {
                out.as_mut_slice()[frame.raw.clone()]
                    .copy_from_slice(&buf.as_slice()[frame.raw.clone()]);
                filled[k] = true;
            }
        }
        let mut restore = |out: &mut crate::frames::RawBlock, frames: Vec<usize>| -> Result<()> {
            // The pages of each run of adjacent frames to restore, faulted in at once.
            let mut run: Option<std::ops::Range<usize>> = None;
            for r in frames.iter().filter(|&&k| !filled[k]).map(|&k| &index.frames[k].raw) {
                match &mut run {
                    Some(cur) if cur.end == r.start || align64(cur.end) == r.start => {
                        cur.end = r.end;
                    }
                    _ => {
                        if let Some(done) = run.replace(r.clone()) {
                            out.prefault(done);
                        }
                    }
                }
            }
            if let Some(done) = run {
                out.prefault(done);
            }
            for k in frames {
                if !filled[k] {
                    index.restore(stored, k, out.as_mut_slice(), true).map_err(corrupt)?;
                    filled[k] = true;
                }
            }
            Ok(())
        };
        restore(&mut out, want)?;
        if let Some(span) = strings {
            match span.data(out.as_slice()) {
                Some(r) => restore(&mut out, index.covering(&[r]))?,
                None => return self.block(rg, col),
            }
        }
        let buf = out.freeze().map_err(io)?;
        let filled = (!filled.iter().all(|&f| f)).then_some(filled);
        self.cache.lock().put(idx, Cached { buf: buf.clone(), filled, index: Some(index) });
        Ok(buf)
    }

    /// What decoding chunk `m` (column `col` of row group `rg`) needs to know.
    fn chunk_info<'a>(&'a self, rg: usize, col: usize, m: &'a ChunkMeta) -> ChunkInfo<'a> {
        ChunkInfo {
            encoding: &m.encoding,
            null_count: m.null_count,
            sections: &m.sections,
            rows: self.meta.row_groups[rg].rows as usize,
            data_type: self.meta.schema.field(col).data_type(),
            phys: self.meta.physical[col],
            file: &self.path,
            offset: m.offset,
        }
    }

    fn chunk(&self, rg: usize, col: usize) -> Result<&ChunkMeta> {
        self.meta
            .row_groups
            .get(rg)
            .and_then(|g| g.chunks.get(col))
            .ok_or_else(|| Error::corrupt(&self.path, 0, format!("no chunk ({rg}, {col})")))
    }

    /// Decodes rows `start..start + len` of column `col` of row group `rg` only.
    pub fn read_column_window(
        &self,
        rg: usize,
        col: usize,
        start: usize,
        len: usize,
        mode: DecodeMode,
    ) -> Result<ArrayRef> {
        if mode == DecodeMode::Values
            && let Some(a) = self.window_from_packed_dictionary(rg, col, start, len)?
        {
            return Ok(a);
        }
        let m = self.chunk(rg, col)?;
        if kept_decoded(self.meta.physical[col], m)
            && let Some(a) = self.decoded_window(rg, col, start, len)?
        {
            return Ok(a);
        }
        let (raw, info) = self.block_info_for(rg, col, Some((start, len)))?;
        encoding::decode_window(&raw, info, mode, start, len)
    }

    /// Rows `start..start + len` of a chunk [`kept_decoded`] applies to, from its values
    /// decoded whole: kept with the decompressed blocks (under the same bound, which counts
    /// them) when a read of the whole chunk decoded them. `None`: not kept and not a whole
    /// read (the caller decodes the window alone).
    fn decoded_window(
        &self,
        rg: usize,
        col: usize,
        start: usize,
        len: usize,
    ) -> Result<Option<ArrayRef>> {
        let rows = self.meta.row_groups[rg].rows as usize;
        // Kept after the blocks' numbers.
        let key = self.verified.len() + rg * self.meta.column_ids.len() + col;
        let kept = self.cache.lock().complete(key);
        let whole = match kept {
            Some(values) => {
                let data_type = self.meta.schema.field(col).data_type().clone();
                arrow_data::ArrayData::builder(data_type)
                    .len(rows)
                    .buffers(vec![values])
                    .build()
                    .map(arrow_array::make_array)
                    .map_err(|e| Error::corrupt(&self.path, 0, format!("kept values: {e}")))?
            }
            None if start == 0 && len == rows => {
                let (raw, info) = self.block_info_for(rg, col, None)?;
                let a = encoding::decode(&raw, info, DecodeMode::Values)?;
                if let Some(values) = a.to_data().buffers().first() {
                    let kept = Cached { buf: values.clone(), filled: None, index: None };
                    self.cache.lock().put(key, kept);
                }
                return Ok(Some(a));
            }
            None => return Ok(None),
        };
        if start.checked_add(len).is_none_or(|end| end > rows) {
            return Err(Error::corrupt(
                &self.path,
                0,
                format!("window {start}+{len} outside {rows} rows"),
            ));
        }
        Ok(Some(whole.slice(start, len)))
    }

    /// Rows `start..start + len` of a framed 64-bit float dictionary chunk whose dictionary
    /// is stored in decimal frames and has at least [`PACKED_ENTRIES_PER_ROW`] entries per
    /// row of the window, as values: only the validity and the window's codes are restored,
    /// and the entries the rows name are read from the packed frames
    /// ([`crate::frames::Index::read_f64`]) — a `LIMIT 100` after a reopen neither restores
    /// nor faults in a dictionary a hundred times larger than the window. `None` when that
    /// does not apply, or the dictionary is already restored in the kept block (the caller
    /// decodes as usual).
    fn window_from_packed_dictionary(
        &self,
        rg: usize,
        col: usize,
        start: usize,
        len: usize,
    ) -> Result<Option<ArrayRef>> {
        let m = self.chunk(rg, col)?;
        if m.compression != Compression::Framed {
            return Ok(None);
        }
        let info = self.chunk_info(rg, col, m);
        let Some((dict, entries)) = encoding::f64_dictionary(&info) else { return Ok(None) };
        if len == 0 || len.saturating_mul(PACKED_ENTRIES_PER_ROW) > entries {
            return Ok(None);
        }
        let idx = rg * self.meta.column_ids.len() + col;
        let stored = &self.buf.as_slice()[m.offset as usize..][..m.stored_len as usize];
        let corrupt = |e: String| Error::corrupt(&self.path, m.offset, e);
        let kept = match self.cache.lock().get(idx) {
            None => None,
            Some(Cached { filled: None, .. }) => return Ok(None),
            Some(Cached { filled: Some(f), index, .. }) => {
                let Some(index) = index else { return Ok(None) };
                if index.covering(std::slice::from_ref(&dict)).iter().all(|&k| f[k]) {
                    return Ok(None);
                }
                Some(index.clone())
            }
        };
        let index = match kept {
            Some(i) => i,
            None => Arc::new(
                crate::frames::Index::read(stored, &m.sections, m.raw_len as usize)
                    .map_err(corrupt)?,
            ),
        };
        if !index.decimal(dict.clone()) {
            return Ok(None);
        }
        let need = encoding::window_bytes_without_dictionary(&info, start, len);
        let raw = self.block_with(rg, col, &need, Some(index.clone()))?;
        let a = encoding::decode_window_with_entries(&raw, info, start, len, |codes, out| {
            index
                .read_f64(stored, codes.iter().map(|&c| dict.start + c * 8), |v| out.push(v))
                .map_err(corrupt)
        })?;
        Ok(Some(a))
    }

    /// The (verified) block of column `col` of row group `rg` and what decoding it needs.
    fn block_info(&self, rg: usize, col: usize) -> Result<(Buffer, ChunkInfo<'_>)> {
        self.block_info_for(rg, col, None)
    }

    /// Like [`Segment::block_info`], with only what decoding rows `start..start + len` reads
    /// restored when `rows` is `Some((start, len))` (see [`Segment::block_with`]).
    fn block_info_for(
        &self,
        rg: usize,
        col: usize,
        rows: Option<(usize, usize)>,
    ) -> Result<(Buffer, ChunkInfo<'_>)> {
        let m = self.chunk(rg, col)?;
        let info = self.chunk_info(rg, col, m);
        // Part of a framed block: what the rows need (a whole read checks the whole block's
        // checksum once, padding included).
        let raw = match rows {
            Some((start, len)) if m.compression == Compression::Framed && len < info.rows => {
                // Kept whole: no need to work out which bytes the rows need.
                let whole = self.cache.lock().complete(rg * self.meta.column_ids.len() + col);
                match whole {
                    Some(b) => b,
                    None => {
                        self.block_with(rg, col, &encoding::window_bytes(&info, start, len), None)?
                    }
                }
            }
            _ => self.block(rg, col)?,
        };
        Ok((raw, info))
    }

    /// Rows `start..start + len` of integer column `col` of row group `rg` whose value lies
    /// in `lo..=hi`, read from the packed values (see [`encoding::int_range_window`]);
    /// `None` when the chunk is not frame-of-reference packed or holds NULLs.
    pub fn int_range_window(
        &self,
        rg: usize,
        col: usize,
        start: usize,
        len: usize,
        lo: i128,
        hi: i128,
    ) -> Result<Option<arrow_buffer::BooleanBuffer>> {
        let (raw, info) = self.block_info(rg, col)?;
        encoding::int_range_window(&raw, info, start, len, lo, hi)
    }

    /// Row `row` of column `col` of row group `rg` handed to `f`: a [`encoding::Cell`] read
    /// in place from the block when its kind allows, otherwise (see
    /// [`encoding::decode_cell`]) a one-row array decoded by [`encoding::decode_rows`].
    pub fn with_value<R>(
        &self,
        rg: usize,
        col: usize,
        row: usize,
        f: impl FnOnce(crate::values::RowValue<'_>) -> R,
    ) -> Result<R> {
        let (raw, info) = self.block_info_for(rg, col, Some((row, 1)))?;
        if let Some(cell) = encoding::decode_cell(raw.as_slice(), info, row)? {
            return Ok(f(crate::values::RowValue::Cell(cell)));
        }
        let a = encoding::decode_rows(&raw, info, &[row])?;
        Ok(f(crate::values::RowValue::Array(&a, 0)))
    }

    /// The rows `rows` (ascending) of column `col` of row group `rg` handed to `f` in order:
    /// the block is found once for all of them, and each value is a [`encoding::Cell`] read
    /// in place when its kind allows (no array built), otherwise a row of an array decoded
    /// by [`encoding::decode_rows`]. How a lookup of many ids reads a row group it has a
    /// few rows in.
    pub fn visit_values(
        &self,
        rg: usize,
        col: usize,
        rows: &[usize],
        mut f: impl FnMut(crate::values::RowValue<'_>) -> Result<()>,
    ) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        if rows.windows(2).any(|w| w[0] > w[1]) {
            return Err(Error::InvalidInput {
                table: self.path.display().to_string(),
                reason: "rows to visit must be in ascending order".into(),
            });
        }
        let (raw, info) = self.block_info_for(rg, col, Some(span_of(rows)))?;
        match encoding::CellReader::new(raw.as_slice(), info)? {
            Some(reader) => {
                rows.iter().try_for_each(|&r| f(crate::values::RowValue::Cell(reader.read(r)?)))
            }
            None => {
                let a = encoding::decode_rows(&raw, info, rows)?;
                (0..a.len()).try_for_each(|i| f(crate::values::RowValue::Array(&a, i)))
            }
        }
    }

    /// Decodes the rows `rows` (ascending) of column `col` of row group `rg` only, as
    /// values (see [`encoding::decode_rows`]).
    pub fn read_column_rows(&self, rg: usize, col: usize, rows: &[usize]) -> Result<ArrayRef> {
        let (raw, info) = self.block_info_for(rg, col, Some(span_of(rows)))?;
        encoding::decode_rows(&raw, info, rows)
    }

    /// The `_id` column (segment position 0) of row group `rg`, decoded once and kept: a
    /// point lookup in a row group whose ids are not dense (rows re-inserted by updates)
    /// binary-searches it, and decoding 64K ids per lookup would cost more than the lookup.
    pub fn ids(&self, rg: usize) -> Result<ArrayRef> {
        let slot = self.ids.get(rg).ok_or_else(|| {
            Error::corrupt(&self.path, 0, format!("no row group {rg} in this segment"))
        })?;
        if let Some(a) = slot.get() {
            return Ok(a.clone());
        }
        let a = self.read_column(rg, 0, DecodeMode::Values)?;
        Ok(slot.get_or_init(|| a).clone())
    }

    /// The rows of row group `rg` in ascending `_id` order (ties in row order), built once
    /// and kept: how a point lookup binary-searches a row group whose `_id`s are not sorted.
    pub fn id_order(&self, rg: usize) -> Result<Arc<[u32]>> {
        let slot = self.id_orders.get(rg).ok_or_else(|| {
            Error::corrupt(&self.path, 0, format!("no row group {rg} in this segment"))
        })?;
        if let Some(o) = slot.get() {
            return Ok(o.clone());
        }
        let ids = self.ids(rg)?;
        let ids = ids
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .ok_or_else(|| Error::corrupt(&self.path, 0, "_id column is not UInt64"))?
            .values();
        let mut order: Vec<u32> = (0..ids.len() as u32).collect();
        order.sort_by_key(|&r| ids[r as usize]);
        Ok(slot.get_or_init(|| order.into()).clone())
    }

    /// Decodes column `col` (segment position) of row group `rg`.
    pub fn read_column(&self, rg: usize, col: usize, mode: DecodeMode) -> Result<ArrayRef> {
        let rows = self.chunk(rg, col).map(|_| self.meta.row_groups[rg].rows as usize)?;
        self.read_column_window(rg, col, 0, rows, mode)
    }
}

/// Whether the values of chunk `c` of kind `phys` are kept decoded once read whole: a
/// bit-packed decimal chunk without NULLs. Used when scans would otherwise widen its
/// packed 64-bit values into 16-byte decimals on every read (TPC-H Q1: four such columns
/// of 6M rows, a fifth of its time); the kept values cost what the plain 16-byte blocks
/// restored from compression cost before decimals were packed.
fn kept_decoded(phys: Physical, c: &ChunkMeta) -> bool {
    phys == Physical::Decimal128
        && c.null_count == 0
        && matches!(c.encoding, Encoding::ForPacked { .. } | Encoding::DeltaPacked { .. })
}

/// The window `(start, len)` from the first to the last of `rows` (ascending; `(0, 0)` for
/// none or rows out of order, which decoding then reports).
fn span_of(rows: &[usize]) -> (usize, usize) {
    match (rows.first(), rows.last()) {
        (Some(&first), Some(&last)) if first <= last => (first, last - first + 1),
        _ => (0, 0),
    }
}

fn parse_footer(footer: &[u8], path: &Path, base: u64) -> Result<SegmentMeta> {
    let mut d = Dec::new(footer, path, base);
    let segment_id = d.u64("segment id")?;
    let table_id = d.u64("table id")?;
    let (column_ids, schema) = crate::types::decode_columns(&mut d)?;
    let ncols = column_ids.len();
    let physical = schema
        .fields()
        .iter()
        .map(|f| physical_of(f))
        .collect::<Result<Vec<_>>>()
        .map_err(|e| d.err(format!("unsupported column type in segment: {e}")))?;
    let rows = d.u64("row count")?;
    let nrg = d.count(16, "row-group count")?;
    let mut row_groups = Vec::with_capacity(nrg);
    let mut total = 0u64;
    for _ in 0..nrg {
        let rg_rows = d.u32("row-group rows")?;
        let id_min = d.u64("id min")?;
        let id_max = d.u64("id max")?;
        let ids_sorted = d.bool("ids sorted")?;
        let ids_dense = d.bool("ids dense")?;
        let mut chunks = Vec::with_capacity(ncols);
        for _ in 0..ncols {
            chunks.push(read_chunk_meta(&mut d, base)?);
        }
        total += u64::from(rg_rows);
        row_groups.push(RowGroupMeta {
            rows: rg_rows,
            id_min,
            id_max,
            ids_sorted,
            ids_dense,
            chunks,
        });
    }
    d.finish("footer")?;
    if total != rows {
        return Err(Error::corrupt(path, base, "row-group rows do not add up to the segment rows"));
    }
    Ok(SegmentMeta {
        segment_id,
        table_id,
        column_ids,
        schema: Arc::new(schema),
        physical,
        rows,
        row_groups,
    })
}

#[cfg(test)]
mod tests {
    use arrow_array::{Float64Array, Int32Array, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::io::MemFs;

    fn batch(rows: usize, start: u64) -> (SchemaRef, RecordBatch) {
        let schema = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("age", DataType::Int32, true),
            Field::new("city", DataType::Utf8, true),
            Field::new("note", DataType::Utf8, true),
            Field::new("score", DataType::Float64, true),
        ]));
        let cities = ["Beijing", "Wuhan", "Xian"];
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(UInt64Array::from_iter_values(start..start + rows as u64)),
                Arc::new(Int32Array::from_iter(
                    (0..rows).map(|i| (i % 7 != 3).then_some(18 + (i * 13 % 60) as i32)),
                )),
                Arc::new(StringArray::from_iter(
                    (0..rows).map(|i| (i % 11 != 0).then_some(cities[i % 3])),
                )),
                Arc::new(StringArray::from_iter_values(
                    (0..rows).map(|i| format!("note number {i} with some text")),
                )),
                Arc::new(Float64Array::from_iter_values((0..rows).map(|i| (i % 100) as f64 / 4.0))),
            ],
        )
        .unwrap();
        (schema, b)
    }

    fn write(fs: &MemFs, rows: usize) -> Vec<RecordBatch> {
        let (schema, b) = batch(rows, 1);
        let w = write_segment(
            fs,
            Path::new("/s"),
            5,
            9,
            &[0, 1, 2, 3, 4],
            &schema,
            std::slice::from_ref(&b),
            WriteOptions::default(),
        )
        .unwrap();
        assert_eq!((w.rows, w.id_min, w.id_max), (rows as u64, 1, rows as u64));
        vec![b]
    }

    fn read_all(seg: &Segment) -> Result<RecordBatch> {
        let mut batches = Vec::new();
        for rg in 0..seg.meta().row_groups.len() {
            let cols = (0..seg.meta().column_ids.len())
                .map(|c| seg.read_column(rg, c, DecodeMode::Values))
                .collect::<Result<Vec<_>>>()?;
            batches.push(RecordBatch::try_new(seg.meta().schema.clone(), cols).unwrap());
        }
        Ok(arrow_select::concat::concat_batches(&seg.meta().schema, &batches).unwrap())
    }

    #[test]
    fn unsorted_ids_get_a_kept_lookup_order() {
        let fs = MemFs::new();
        let (schema, b) = batch(1000, 1);
        // Ids in a shuffled order, one repeated.
        let ids: Vec<u64> =
            (0..1000u64).map(|i| if i == 7 { 500 } else { (i * 389) % 1000 + 1 }).collect();
        let mut cols = b.columns().to_vec();
        cols[0] = Arc::new(UInt64Array::from(ids.clone()));
        let b = RecordBatch::try_new(schema.clone(), cols).unwrap();
        let path = Path::new("/u");
        let opts = WriteOptions::default();
        write_segment(&fs, path, 1, 9, &[0, 1, 2, 3, 4], &schema, &[b], opts).unwrap();
        let seg = Segment::open(&fs, path).unwrap();
        assert!(!seg.meta().row_groups[0].ids_sorted);
        let order = seg.id_order(0).unwrap();
        let sorted: Vec<u64> = order.iter().map(|&r| ids[r as usize]).collect();
        let mut want = ids.clone();
        want.sort_unstable();
        assert_eq!(sorted, want);
        // Ties stay in row order; the order is built once.
        let at_500: Vec<u32> = order.iter().copied().filter(|&r| ids[r as usize] == 500).collect();
        assert!(at_500.windows(2).all(|w| w[0] < w[1]) && at_500.len() == 2);
        assert!(Arc::ptr_eq(&order, &seg.id_order(0).unwrap()));
        assert!(seg.id_order(1).is_err());
    }

    #[test]
    fn multi_row_group_round_trip() {
        let fs = MemFs::new();
        let rows = ROW_GROUP_ROWS * 2 + 123;
        let input = write(&fs, rows);
        let seg = Segment::open(&fs, Path::new("/s")).unwrap();
        let m = seg.meta();
        assert_eq!(m.row_groups.len(), 3);
        assert_eq!(m.row_groups[2].rows, 123);
        assert!(m.row_groups.iter().all(|g| g.ids_dense && g.ids_sorted));
        assert_eq!((m.segment_id, m.table_id), (5, 9));
        // Zone map of age in the first row group.
        assert_eq!(
            m.row_groups[0].chunks[1].zone_map,
            Some(ZoneMap { min: encoding::StatValue::Int(18), max: encoding::StatValue::Int(77) })
        );
        assert!(m.row_groups[0].chunks.iter().any(|c| c.compression == Compression::Framed));
        assert_eq!(read_all(&seg).unwrap(), input[0]);
        // Every block and the footer start 64-byte aligned.
        for g in &m.row_groups {
            for c in &g.chunks {
                assert_eq!(c.offset % 64, 0);
            }
        }
        // Codes mode hands the city column out as a dictionary.
        let codes = seg.read_column(0, 2, DecodeMode::Codes).unwrap();
        assert!(matches!(codes.data_type(), DataType::Dictionary(k, _) if **k == DataType::UInt8));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let fs = MemFs::new();
        let input = write(&fs, 600);
        let bytes = fs.read(Path::new("/s")).unwrap();
        {
            let seg = Segment::from_buffer("/s".into(), Buffer::from_vec(bytes.clone())).unwrap();
            assert!(
                seg.meta().row_groups[0]
                    .chunks
                    .iter()
                    .any(|c| c.compression == Compression::Framed)
            );
            assert_eq!(read_all(&seg).unwrap(), input[0]);
        }
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x20;
            let mut m = arrow_buffer::MutableBuffer::new(b.len());
            m.extend_from_slice(&b);
            let r = Segment::from_buffer("/s".into(), m.into()).and_then(|s| read_all(&s));
            match r {
                Err(e) => assert!(e.is_corruption(), "byte {i}: {e}"),
                Ok(_) => panic!("flipping byte {i} of {} went unnoticed", bytes.len()),
            }
        }
        for cut in [0, 10, 64, bytes.len() / 2, bytes.len() - 1] {
            let r = Segment::from_buffer("/s".into(), Buffer::from_vec(bytes[..cut].to_vec()));
            assert!(r.is_err_and(|e| e.is_corruption()), "cut at {cut}");
        }
    }

    /// A segment written by format version 1 (whole zstd blocks), kept as a file: it still
    /// reads, whole and in windows.
    /// A kept segment file of format `version` (holding `batch(3000, 1)` in blocks of
    /// `compression`), checked to read back whole and in windows.
    fn kept_segment_reads(bytes: &[u8], version: u32, compression: Compression) {
        assert_eq!(&bytes[8..12], &version.to_le_bytes());
        let mut m = arrow_buffer::MutableBuffer::new(bytes.len());
        m.extend_from_slice(bytes);
        let seg = Segment::from_buffer(format!("v{version}").into(), m.into()).unwrap();
        assert!(seg.meta().row_groups[0].chunks.iter().any(|c| c.compression == compression));
        let (_, want) = batch(3000, 1);
        for col in 0..5 {
            let w = seg.read_column_window(0, col, 1234, 77, DecodeMode::Values).unwrap();
            assert_eq!(w.as_ref(), want.column(col).slice(1234, 77).as_ref());
        }
        assert_eq!(read_all(&seg).unwrap(), want);
    }

    #[test]
    fn version_1_segments_still_read() {
        let bytes = include_bytes!("testdata/segment-v1.bsg");
        kept_segment_reads(bytes, 1, Compression::Zstd);
        // A version this reader does not know is refused, not guessed at.
        let mut future = bytes.to_vec();
        future[8..12].copy_from_slice(&(SEGMENT_FORMAT_VERSION + 1).to_le_bytes());
        let e = Segment::from_buffer("future".into(), Buffer::from_vec(future)).unwrap_err();
        assert!(
            matches!(e, Error::UnsupportedFormatVersion { found, .. } if found == SEGMENT_FORMAT_VERSION + 1),
            "{e}"
        );
    }

    /// Version 4 is written only for segments with float16 or int8 vector columns; others
    /// stay version 3, readable by builds that know nothing of those encodings.
    #[test]
    fn only_segments_with_stored_vector_forms_are_version_4() {
        use basalt_vector::StoredForm;
        for (form, want) in
            [(StoredForm::Float32, 3u32), (StoredForm::Int8, 4), (StoredForm::Float16, 4)]
        {
            let fs = MemFs::new();
            let schema = Arc::new(Schema::new(vec![
                Field::new("_id", DataType::UInt64, false),
                crate::types::vector_field("v", 2, form, false),
            ]));
            let DataType::FixedSizeList(item, _) = crate::types::vector_type(2) else {
                unreachable!()
            };
            let v = arrow_array::FixedSizeListArray::new(
                item,
                2,
                Arc::new(arrow_array::Float32Array::from(vec![0.5, 1.0, -2.0, 4.0])),
                None,
            );
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(arrow_array::UInt64Array::from(vec![1u64, 2])), Arc::new(v)],
            )
            .unwrap();
            write_segment(
                &fs,
                Path::new("/s"),
                1,
                1,
                &[0, 1],
                &schema,
                std::slice::from_ref(&b),
                WriteOptions::default(),
            )
            .unwrap();
            let bytes = fs.map(Path::new("/s")).unwrap();
            let header = u32::from_le_bytes(bytes.as_slice()[8..12].try_into().unwrap());
            let trailer = u32::from_le_bytes(
                bytes.as_slice()[bytes.len() - 12..bytes.len() - 8].try_into().unwrap(),
            );
            assert_eq!((header, trailer), (want, want), "{form:?}");
            let seg = Segment::open(&fs, Path::new("/s")).unwrap();
            assert_eq!(read_all(&seg).unwrap(), b, "{form:?}");
        }
    }

    /// Version 6 is written only for segments with a bit-packed decimal chunk (unscaled
    /// values within 64 bits), version 5 for decimal chunks with zone maps but values past
    /// 64 bits (stored plain), neither when the decimal chunks are all NULL (no zone map);
    /// values and zone maps read back as written.
    #[test]
    fn only_segments_with_decimal_zone_maps_are_version_5_or_6() {
        let wide = Some(i128::from(i64::MAX) + 1);
        for (values, want) in [
            (vec![Some(-12_345i128), Some(7), None], 6u32),
            (vec![Some(-12_345i128), wide, Some(7)], 5),
            (vec![None], 3),
        ] {
            let fs = MemFs::new();
            let schema = Arc::new(Schema::new(vec![
                Field::new("_id", DataType::UInt64, false),
                Field::new("d", DataType::Decimal128(38, 2), true),
            ]));
            let n = values.len() as u64;
            let d = arrow_array::Decimal128Array::from(values.clone())
                .with_precision_and_scale(38, 2)
                .unwrap();
            let b = RecordBatch::try_new(
                schema.clone(),
                vec![Arc::new(arrow_array::UInt64Array::from_iter_values(1..=n)), Arc::new(d)],
            )
            .unwrap();
            let opts = WriteOptions::default();
            let one = std::slice::from_ref(&b);
            write_segment(&fs, Path::new("/s"), 1, 1, &[0, 1], &schema, one, opts).unwrap();
            let bytes = fs.map(Path::new("/s")).unwrap();
            let header = u32::from_le_bytes(bytes.as_slice()[8..12].try_into().unwrap());
            assert_eq!(header, want, "{values:?}");
            let seg = Segment::open(&fs, Path::new("/s")).unwrap();
            assert_eq!(read_all(&seg).unwrap(), b);
            let zone = seg.meta().row_groups[0].chunks[1].zone_map.clone();
            let want_zone = (want >= 5).then(|| ZoneMap {
                min: encoding::StatValue::Decimal(-12_345),
                max: encoding::StatValue::Decimal(values.iter().flatten().copied().max().unwrap()),
            });
            assert_eq!(zone, want_zone);
        }
    }

    /// A bit-packed decimal chunk without NULLs read whole is kept decoded (counted
    /// against the bound): later windows and whole reads come from the kept values and
    /// equal the decoded ones; a window read before that decodes only itself.
    #[test]
    fn packed_decimals_read_whole_are_kept_decoded() {
        let fs = MemFs::new();
        let schema = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("d", DataType::Decimal128(12, 2), false),
        ]));
        let n = 5000u64;
        let d = arrow_array::Decimal128Array::from_iter_values(
            (0..n).map(|i| i128::from((i * 7919 % 10_007) as i64 - 5000)),
        )
        .with_precision_and_scale(12, 2)
        .unwrap();
        let d: ArrayRef = Arc::new(d);
        let ids = Arc::new(arrow_array::UInt64Array::from_iter_values(1..=n));
        let b = RecordBatch::try_new(schema.clone(), vec![ids, d.clone()]).unwrap();
        let one = std::slice::from_ref(&b);
        let opts = WriteOptions::default();
        write_segment(&fs, Path::new("/s"), 1, 1, &[0, 1], &schema, one, opts).unwrap();
        let seg = Segment::open(&fs, Path::new("/s")).unwrap();
        let chunk = &seg.meta().row_groups[0].chunks[1];
        assert!(kept_decoded(Physical::Decimal128, chunk), "{:?}", chunk.encoding);
        let key = seg.verified.len() + 1;
        let w = seg.read_column_window(0, 1, 100, 50, DecodeMode::Values).unwrap();
        assert_eq!(w.as_ref(), d.slice(100, 50).as_ref());
        assert!(seg.cache.lock().complete(key).is_none());
        assert_eq!(seg.read_column(0, 1, DecodeMode::Values).unwrap().as_ref(), d.as_ref());
        assert!(seg.cache.lock().complete(key).is_some());
        for (start, len) in [(0, 5000), (4999, 1), (1234, 2000), (5000, 0)] {
            let w = seg.read_column_window(0, 1, start, len, DecodeMode::Values).unwrap();
            assert_eq!(w.as_ref(), d.slice(start, len).as_ref(), "{start}+{len}");
        }
        assert!(seg.read_column_window(0, 1, 4999, 2, DecodeMode::Values).is_err());
    }

    /// A segment written by format version 2 (uniform 32 KiB frames, no decimal frames),
    /// kept as a file: it still reads, whole and in windows.
    #[test]
    fn version_2_segments_still_read() {
        kept_segment_reads(include_bytes!("testdata/segment-v2.bsg"), 2, Compression::Framed);
    }

    /// Windows of framed blocks restore only the frames they need and equal what whole reads
    /// give; the kept block serves later reads it covers, and the first read it does not
    /// cover restores it whole.
    #[test]
    fn windows_restore_only_their_frames() {
        let fs = MemFs::new();
        let rows = ROW_GROUP_ROWS + 500;
        let input = write(&fs, rows);
        let whole = Segment::open(&fs, Path::new("/s")).unwrap();
        let want = read_all(&whole).unwrap();
        assert_eq!(want, input[0]);
        let note = 3;
        let filled = |seg: &Segment| {
            seg.cache
                .lock()
                .get(note)
                .map(|c| c.filled.as_ref().map(|f| f.iter().filter(|&&x| x).count()))
        };
        for (start, len) in [(0, 100), (40_000, 3), (ROW_GROUP_ROWS - 10, 10), (5, 1), (0, 0)] {
            let seg = Segment::open(&fs, Path::new("/s")).unwrap();
            assert_eq!(seg.meta().row_groups[0].chunks[note].compression, Compression::Framed);
            for col in 0..5 {
                let got = seg.read_column_window(0, col, start, len, DecodeMode::Values).unwrap();
                assert_eq!(got.as_ref(), want.column(col).slice(start, len).as_ref(), "{col}");
                let rows: Vec<usize> = (start..start + len).step_by(3).collect();
                let got = seg.read_column_rows(0, col, &rows).unwrap();
                let pick =
                    arrow_array::UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
                let w = arrow_select::take::take(want.column(col).as_ref(), &pick, None).unwrap();
                assert_eq!(got.as_ref(), w.as_ref());
                // The same rows visited value by value, from a segment that restores only
                // the frames they need.
                let fresh = Segment::open(&fs, Path::new("/s")).unwrap();
                let mut j = 0;
                fresh
                    .visit_values(0, col, &rows, |v| {
                        let same = match v {
                            crate::values::RowValue::Cell(c) => {
                                encoding::cell_at(w.as_ref(), j) == Some(c)
                            }
                            crate::values::RowValue::Array(a, i) => {
                                a.slice(i, 1).as_ref() == w.slice(j, 1).as_ref()
                            }
                        };
                        assert!(same, "row {} of column {col}", rows[j]);
                        j += 1;
                        Ok(())
                    })
                    .unwrap();
                assert_eq!(j, rows.len());
                if len == 0 {
                    continue;
                }
                assert!(fresh.visit_values(0, col, &[start + 1, start], |_| Ok(())).is_err());
                let got = seg.with_value(0, col, start, |v| match v {
                    crate::values::RowValue::Cell(c) => format!("{c:?}"),
                    crate::values::RowValue::Array(a, i) => format!("{:?}", a.slice(i, 1)),
                });
                assert!(got.is_ok());
            }
            // A few frames of the 2 MB note block (none for the empty window).
            let n = filled(&seg)
                .expect("kept")
                .unwrap_or_else(|| panic!("only some frames for {start}+{len}"));
            assert!(n <= 3, "{n} frames for {start}+{len}");
        }
        let seg = Segment::open(&fs, Path::new("/s")).unwrap();
        let w = seg.read_column_window(0, note, 10, 50, DecodeMode::Values).unwrap();
        assert_eq!(w.as_ref(), want.column(note).slice(10, 50).as_ref());
        let first = filled(&seg);
        // Covered by the kept frames: served from them.
        let w = seg.read_column_window(0, note, 20, 30, DecodeMode::Values).unwrap();
        assert_eq!(w.as_ref(), want.column(note).slice(20, 30).as_ref());
        assert_eq!(filled(&seg), first);
        // Not covered: restored whole; windows then read the complete block.
        let w = seg.read_column_window(0, note, 50_000, 20, DecodeMode::Values).unwrap();
        assert_eq!(w.as_ref(), want.column(note).slice(50_000, 20).as_ref());
        assert_eq!(filled(&seg), Some(None));
        let w = seg.read_column_window(0, note, 777, 50, DecodeMode::Values).unwrap();
        assert_eq!(w.as_ref(), want.column(note).slice(777, 50).as_ref());
        let full = seg.read_column(0, note, DecodeMode::Values).unwrap();
        assert_eq!(full.as_ref(), want.column(note).slice(0, ROW_GROUP_ROWS).as_ref());
    }

    /// Small windows of a float column with a large dictionary in decimal frames read the
    /// entries they name from the packed frames: the values (NULLs included) are the whole
    /// read's, the dictionary's frames stay unrestored, and no flipped byte of the block
    /// gives a wrong value. Larger windows restore the dictionary.
    #[test]
    fn small_windows_read_dictionary_entries_from_packed_frames() {
        let fs = MemFs::new();
        let rows = ROW_GROUP_ROWS;
        let schema = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("score", DataType::Float64, true),
        ]));
        let score = Float64Array::from_iter(
            (0..rows).map(|i| (i % 13 != 5).then(|| (i * 7919 % 10_001) as f64 / 100.0)),
        );
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(UInt64Array::from_iter_values(1..=rows as u64)), Arc::new(score)],
        )
        .unwrap();
        let path = Path::new("/d");
        write_segment(
            &fs,
            path,
            1,
            9,
            &[0, 1],
            &schema,
            std::slice::from_ref(&b),
            WriteOptions::default(),
        )
        .unwrap();
        let seg = Segment::open(&fs, path).unwrap();
        let m = seg.meta().row_groups[0].chunks[1].clone();
        assert_eq!(m.compression, Compression::Framed);
        let info = seg.chunk_info(0, 1, &m);
        let (dict, entries) = encoding::f64_dictionary(&info).expect("a float dictionary");
        assert!(entries > 10_000, "{entries}");
        let dict_frames = |seg: &Segment| -> Option<usize> {
            let cache = seg.cache.lock();
            let c = cache.get(1)?;
            let index = c.index.as_ref()?;
            let ks = index.covering(std::slice::from_ref(&dict));
            Some(ks.iter().filter(|&&k| c.filled.as_ref().is_none_or(|f| f[k])).count())
        };
        let want = b.column(1);
        for (start, len) in [(0, 100), (1000, 37), (rows - 50, 50), (5, 1), (13 * 40, 14)] {
            let seg = Segment::open(&fs, path).unwrap();
            let got = seg.read_column_window(0, 1, start, len, DecodeMode::Values).unwrap();
            assert_eq!(got.as_ref(), want.slice(start, len).as_ref(), "{start}+{len}");
            assert_eq!(dict_frames(&seg), Some(0), "{start}+{len}");
            // Again, from the kept codes.
            let got = seg.read_column_window(0, 1, start, len, DecodeMode::Values).unwrap();
            assert_eq!(got.as_ref(), want.slice(start, len).as_ref());
            let codes = seg.read_column_window(0, 1, start, len, DecodeMode::Codes).unwrap();
            let codes = arrow_cast::cast(&codes, &DataType::Float64).unwrap();
            assert_eq!(codes.as_ref(), want.slice(start, len).as_ref());
        }
        let seg = Segment::open(&fs, path).unwrap();
        let got = seg.read_column_window(0, 1, 100, 5000, DecodeMode::Values).unwrap();
        assert_eq!(got.as_ref(), want.slice(100, 5000).as_ref());
        assert!(dict_frames(&seg).is_some_and(|n| n > 0));
        // Damage anywhere in the stored block: an error or the right values, never others.
        let bytes = fs.read(path).unwrap();
        let mut errors = 0;
        for at in (m.offset as usize..(m.offset + m.stored_len) as usize).step_by(61) {
            let mut b = bytes.clone();
            b[at] ^= 0x08;
            let seg = Segment::from_buffer("/d".into(), Buffer::from_vec(b)).unwrap();
            match seg.read_column_window(0, 1, 0, 100, DecodeMode::Values) {
                Ok(got) => assert_eq!(got.as_ref(), want.slice(0, 100).as_ref(), "flip at {at}"),
                Err(e) => {
                    assert!(e.is_corruption(), "{e}");
                    errors += 1;
                }
            }
        }
        assert!(errors > 0);
    }

    /// An incompressible one-section block is framed as it is: a whole read uses its bytes
    /// in place (no copy), a window restores and checks only its frames (damage elsewhere
    /// shows at the first whole read), and the values are the input's either way.
    #[test]
    fn incompressible_blocks_are_framed_as_they_are() {
        let fs = MemFs::new();
        let rows = ROW_GROUP_ROWS;
        let schema = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("noise", DataType::UInt64, false),
        ]));
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let noise = UInt64Array::from_iter_values((0..rows).map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }));
        let b = RecordBatch::try_new(
            schema.clone(),
            vec![Arc::new(UInt64Array::from_iter_values(1..=rows as u64)), Arc::new(noise)],
        )
        .unwrap();
        let path = Path::new("/n");
        let opts = WriteOptions::default();
        write_segment(&fs, path, 1, 9, &[0, 1], &schema, std::slice::from_ref(&b), opts).unwrap();
        let bytes = fs.read(path).unwrap();
        let seg = Segment::open(&fs, path).unwrap();
        let m = seg.meta().row_groups[0].chunks[1].clone();
        assert_eq!(m.compression, Compression::Framed);
        let in_file = |buf: &Buffer, seg: &Segment| {
            let base = seg.buf.as_ptr() as usize;
            (base..base + seg.buf.len()).contains(&(buf.as_ptr() as usize))
        };
        let whole = seg.block(0, 1).unwrap();
        assert!(in_file(&whole, &seg), "the whole block was copied");
        // Kept, without counting against the cache's bound.
        assert!(seg.cache.lock().complete(1).is_some_and(|b| in_file(&b, &seg)));
        assert_eq!(seg.cache.lock().bytes, 0);
        assert_eq!(read_all(&seg).unwrap(), b);
        for (start, len) in [(0, 100), (40_000, 7), (rows - 3, 3)] {
            let seg = Segment::open(&fs, path).unwrap();
            let w = seg.read_column_window(0, 1, start, len, DecodeMode::Values).unwrap();
            assert_eq!(w.as_ref(), b.column(1).slice(start, len).as_ref());
            let kept = seg.cache.lock().get(1).map(|c| c.filled.clone());
            let filled = kept.flatten().expect("some frames restored");
            assert!(filled.iter().filter(|&&f| f).count() <= 2, "{filled:?}");
        }
        // Damage in the last frame: a window at the start reads; a whole read refuses.
        let mut bad = bytes.clone();
        bad[(m.offset + m.stored_len) as usize - 1] ^= 0x20;
        let seg = Segment::from_buffer("/n".into(), Buffer::from_vec(bad)).unwrap();
        let w = seg.read_column_window(0, 1, 0, 100, DecodeMode::Values).unwrap();
        assert_eq!(w.as_ref(), b.column(1).slice(0, 100).as_ref());
        assert!(seg.read_column(0, 1, DecodeMode::Values).unwrap_err().is_corruption());
        assert!(seg.read_column_window(0, 1, rows - 5, 5, DecodeMode::Values).is_err());
    }

    /// A window reads (and checks) only its frames: damage elsewhere in the block shows at
    /// the first whole read; damage in its frames shows at once.
    #[test]
    fn damaged_frames_are_found_by_the_reads_that_need_them() {
        let fs = MemFs::new();
        write(&fs, ROW_GROUP_ROWS);
        let bytes = fs.read(Path::new("/s")).unwrap();
        let seg = Segment::from_buffer("/s".into(), Buffer::from_vec(bytes.clone())).unwrap();
        let m = seg.meta().row_groups[0].chunks[3].clone();
        assert_eq!(m.compression, Compression::Framed);
        let stored = &bytes[m.offset as usize..][..m.stored_len as usize];
        let index = crate::frames::Index::read(stored, &m.sections, m.raw_len as usize).unwrap();
        let frames = index.covering(std::slice::from_ref(&(0..m.raw_len as usize)));
        assert!(frames.len() > 4);
        let open_flipped = |at: usize| {
            let mut b = bytes.clone();
            b[at] ^= 0x04;
            let mut mb = arrow_buffer::MutableBuffer::new(b.len());
            mb.extend_from_slice(&b);
            Segment::from_buffer("/s".into(), mb.into()).unwrap()
        };
        // The last byte of the stored block: in the last frame, far from row 0.
        let seg = open_flipped(m.offset as usize + m.stored_len as usize - 1);
        seg.read_column_window(0, 3, 0, 100, DecodeMode::Values).unwrap();
        let e = seg.read_column(0, 3, DecodeMode::Values).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        // The frame index.
        let seg = open_flipped(m.offset as usize + 20);
        let e = seg.read_column_window(0, 3, 0, 100, DecodeMode::Values).unwrap_err();
        assert!(e.is_corruption() && e.to_string().contains("index"), "{e}");
        drop(seg);
    }

    #[test]
    fn checksum_is_verified_once_per_block() {
        let fs = MemFs::new();
        write(&fs, 100);
        let seg = Segment::open(&fs, Path::new("/s")).unwrap();
        assert!(seg.verified.iter().all(|v| v.load(Ordering::Relaxed) == UNVERIFIED));
        seg.read_column(0, 1, DecodeMode::Values).unwrap();
        let done: Vec<u8> = seg.verified.iter().map(|v| v.load(Ordering::Relaxed)).collect();
        assert_eq!(done, vec![0, 1, 0, 0, 0]);
    }
}
