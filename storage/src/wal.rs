//! The write-ahead log: commits that must survive a crash before their rows reach a segment.
//!
//! # Byte layout (format version 2)
//!
//! Files `<db>/wal/<first lsn as 16 hex digits>.wal`, each:
//!
//! ```text
//! header  "BSLTWAL\0" (8) | format version u32 | reserved u32 (0)
//! record  body length u32 | CRC-32C of body u32 | body
//! body    lsn u64 | op count u32 | ops          (one record = one atomic commit)
//! op      kind u8 | table id u64 | payload
//!         kind 1 = insert: the rows as one Arrow IPC record-batch message without its
//!                  schema (the table's schema at replay time is the schema they were
//!                  written with: schema changes flush the log first) — message length u32,
//!                  message, body length u32, body. Full table schema, `_id` first; an
//!                  update re-inserts existing ids.
//!         kind 2 = delete: count u32 + the deleted `_id`s (u64 each)
//!         kind 3 = insert, column layout (format 2; same meaning as kind 1, written when
//!                  every column has a fixed layout, which is far cheaper to encode than
//!                  IPC for the one-row commits of OLTP work): payload length u32, then
//!                  rows u32 and per column of the full schema, in order:
//!                    nulls u8 (0 none | 1: validity bitmap, ⌈rows/8⌉ bytes, LSB first)
//!                    values: fixed-width types rows × width bytes (little-endian);
//!                            Boolean ⌈rows/8⌉ bytes; Utf8 / Binary rows + 1 offsets
//!                            (u32, from 0) then data length u32 + data; VECTOR(d)
//!                            rows × d × 4 bytes (float32, no null components)
//! ```
//!
//! Format 1 files (kinds 1 and 2 only) are still read.
//!
//! After the last record a file holds zero bytes up to its preallocated size (see
//! [`crate::io::AppendFile`]): appends overwrite space the file system already allocated,
//! so a power-safe commit's `fdatasync` writes data blocks only. An all-zero rest of a file
//! is its clean end; a zero header followed by non-zero bytes is damage like any other.
//! A log file is always created new (truncating a leftover of the same name, which can only
//! be a file cut back to its header at open) and never appended to after a reopen.
//!
//! LSNs increase by one per record across files. The manifest records `wal_lsn`, the last
//! LSN whose rows are in segments; recovery replays records after it.
//!
//! # Durability levels
//!
//! - [`Durability::Buffered`]: no log record; rows live in the memtable until the next flush
//!   (explicit, automatic at the memtable threshold, at close, or at drop of the last handle).
//!   A killed process or a power loss loses them.
//! - [`Durability::ProcessSafe`]: the record is written to the log file (one `write(2)`)
//!   before the commit returns. Survives the process being killed; a power loss or OS crash
//!   can lose commits not yet written back by the OS.
//! - [`Durability::PowerSafe`]: the log is `fdatasync`ed before the commit returns.
//!   Concurrent commits share one sync (group commit): a committer that finds the log already
//!   synced past its record returns without syncing again.
//!
//! A commit becomes visible to other readers only once it is as durable as its level demands
//! (a power-safe commit is never visible before its sync).
//!
//! # Crash analysis
//!
//! A crash can tear the last record of the last file; its CRC (or a short read) marks the end
//! of the log and the tail is discarded, never half-applied. A bad record anywhere else is
//! corruption and refuses the open. After replay the writer flushes the replayed rows to
//! segments, installs a manifest with the new `wal_lsn`, and only then deletes the log files;
//! a crash in between replays records that the manifest already covers, which are skipped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_array::RecordBatch;
use parking_lot::Mutex;

use crate::codec::{Dec, crc};
use crate::error::{Error, Result};
use crate::io::{AppendFile, SyncFile, Vfs};

/// Name of the log directory inside a database directory.
pub const WAL_DIR: &str = "wal";
/// Current log format version.
pub const WAL_FORMAT_VERSION: u32 = 2;
/// Oldest log format version still read.
const WAL_OLDEST_READ: u32 = 1;
const MAGIC: &[u8; 8] = b"BSLTWAL\0";
pub(crate) const HEADER_LEN: usize = 16;
const KIND_INSERT: u8 = 1;
const KIND_DELETE: u8 = 2;
const KIND_INSERT_COLUMNS: u8 = 3;

/// How durable a commit is when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Persisted at the next flush; lost if the process dies first.
    Buffered,
    /// Written to the log before returning: survives a killed process.
    #[default]
    ProcessSafe,
    /// Synced to the device before returning: survives power loss.
    PowerSafe,
}

/// One change inside a commit.
#[derive(Debug, Clone)]
pub enum Op {
    /// Rows inserted into a table (full schema, `_id` first). Re-inserting an existing
    /// `_id` after deleting it in the same commit is an update.
    Insert {
        /// Table id.
        table_id: u64,
        /// The rows.
        batch: RecordBatch,
    },
    /// Rows deleted from a table, by `_id`.
    Delete {
        /// Table id.
        table_id: u64,
        /// The deleted ids.
        ids: Vec<u64>,
    },
}

/// A log record: one commit, applied all or nothing.
#[derive(Debug, Clone, Default)]
pub struct Record {
    /// The commit's changes, in order.
    pub ops: Vec<Op>,
}

impl Record {
    /// The record's operations as bytes (everything of the body after the LSN).
    #[cfg(test)]
    fn encode_ops(&self) -> Result<Vec<u8>> {
        Self::encode_ops_after(&self.ops, 0, Vec::new())
    }

    /// A record of `ops` as bytes, after `head` zero bytes (room for the frame header, so
    /// [`Wal::append`] need not copy the encoding to frame it), in `out` (cleared first;
    /// [`Wal::append`] passes the buffer of an earlier write).
    fn encode_ops_after(ops: &[Op], head: usize, mut out: Vec<u8>) -> Result<Vec<u8>> {
        // Sized for the rows' buffers, so encoding a small record does not grow it step by
        // step. (Capped: the buffers of a sliced batch can be far larger than its rows.)
        let bytes: usize = ops
            .iter()
            .map(|op| match op {
                Op::Insert { batch, .. } => batch.get_array_memory_size(),
                Op::Delete { ids, .. } => 8 * ids.len(),
            })
            .sum();
        out.clear();
        out.reserve(head + 256 + bytes.min(1 << 20));
        out.resize(head, 0);
        out.extend_from_slice(&(ops.len() as u32).to_le_bytes());
        for op in ops {
            match op {
                Op::Insert { table_id, batch } if columns_have_layout(batch) => {
                    out.push(KIND_INSERT_COLUMNS);
                    out.extend_from_slice(&table_id.to_le_bytes());
                    let at = out.len();
                    out.extend_from_slice(&[0; 4]);
                    encode_columns(batch, &mut out);
                    let len = (out.len() - at - 4) as u32;
                    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
                }
                Op::Insert { table_id, batch } => {
                    out.push(KIND_INSERT);
                    out.extend_from_slice(&table_id.to_le_bytes());
                    let ipc = arrow_ipc::writer::IpcDataGenerator::default();
                    let mut tracker = arrow_ipc::writer::DictionaryTracker::new(false);
                    let mut ctx = arrow_ipc::writer::IpcWriteContext::default();
                    let (_, enc) = ipc
                        .encode(
                            batch,
                            &mut tracker,
                            &arrow_ipc::writer::IpcWriteOptions::default(),
                            &mut ctx,
                        )
                        .map_err(|e| Error::arrow("encode log record", e))?;
                    out.extend_from_slice(&(enc.ipc_message.len() as u32).to_le_bytes());
                    out.extend_from_slice(&enc.ipc_message);
                    out.extend_from_slice(&(enc.arrow_data.len() as u32).to_le_bytes());
                    out.extend_from_slice(&enc.arrow_data);
                }
                Op::Delete { table_id, ids } => {
                    out.push(KIND_DELETE);
                    out.extend_from_slice(&table_id.to_le_bytes());
                    out.extend_from_slice(&(ids.len() as u32).to_le_bytes());
                    for id in ids {
                        out.extend_from_slice(&id.to_le_bytes());
                    }
                }
            }
        }
        Ok(out)
    }

    fn decode_body(
        body: &[u8],
        file: &Path,
        offset: u64,
        schema_of: &SchemaOf<'_>,
    ) -> Result<(u64, Record)> {
        let mut d = Dec::new(body, file, offset);
        let lsn = d.u64("lsn")?;
        let n = d.count(9, "op count")?;
        let mut ops = Vec::with_capacity(n);
        for _ in 0..n {
            let kind = d.u8("op kind")?;
            let table_id = d.u64("table id")?;
            match kind {
                KIND_INSERT => {
                    let message = d.bytes("rows message")?;
                    let data = d.bytes("rows body")?;
                    // Rows of a table that no longer exists are garbage: skip them.
                    let Some(schema) = schema_of(table_id) else { continue };
                    let bad =
                        |e: String| Error::corrupt(file, offset, format!("log record rows: {e}"));
                    let msg =
                        arrow_ipc::root_as_message(message).map_err(|e| bad(e.to_string()))?;
                    let rb = msg
                        .header_as_record_batch()
                        .ok_or_else(|| bad("not a record batch".into()))?;
                    let batch = arrow_ipc::reader::read_record_batch(
                        &arrow_buffer::Buffer::from(data.to_vec()),
                        rb,
                        schema,
                        &std::collections::HashMap::new(),
                        None,
                        &msg.version(),
                    )
                    .map_err(|e| bad(e.to_string()))?;
                    ops.push(Op::Insert { table_id, batch });
                }
                KIND_INSERT_COLUMNS => {
                    let payload = d.bytes("rows")?;
                    // Rows of a table that no longer exists are garbage: skip them.
                    let Some(schema) = schema_of(table_id) else { continue };
                    let mut p = Dec::new(payload, file, offset);
                    let batch = decode_columns(&mut p, &schema)?;
                    p.finish("log rows")?;
                    ops.push(Op::Insert { table_id, batch });
                }
                KIND_DELETE => {
                    let k = d.count(8, "deleted id count")?;
                    let mut ids = Vec::with_capacity(k);
                    for _ in 0..k {
                        ids.push(d.u64("deleted id")?);
                    }
                    ops.push(Op::Delete { table_id, ids });
                }
                k => return Err(Error::corrupt(file, offset, format!("unknown log op kind {k}"))),
            }
        }
        d.finish("log record")?;
        Ok((lsn, Record { ops }))
    }
}

/// Whether every column of `batch` has a kind-3 column layout.
fn columns_have_layout(batch: &RecordBatch) -> bool {
    use arrow_schema::DataType as D;
    batch.columns().iter().all(|c| match c.data_type() {
        D::Boolean | D::Utf8 | D::Binary => true,
        D::FixedSizeList(f, _) if f.data_type() == &D::Float32 => {
            use arrow_array::cast::AsArray;
            c.as_fixed_size_list_opt().is_some_and(|l| l.values().null_count() == 0)
        }
        dt => dt.primitive_width().is_some(),
    })
}

/// Appends `batch` in the kind-3 column layout (see the module docs); every column must
/// pass [`columns_have_layout`]. Columns are read through their typed arrays (already
/// offset to the slice they cover), not as `ArrayData`, whose construction allocated more
/// than a one-row commit costs otherwise.
fn encode_columns(batch: &RecordBatch, out: &mut Vec<u8>) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::Float32Type;
    use arrow_schema::DataType as D;
    let n = batch.num_rows();
    out.extend_from_slice(&(n as u32).to_le_bytes());
    let bits = |out: &mut Vec<u8>, b: &arrow_buffer::BooleanBuffer| {
        out.extend_from_slice(&b.sliced().as_slice()[..n.div_ceil(8)]);
    };
    let strings = |out: &mut Vec<u8>, offsets: &[i32], data: &[u8]| {
        let offsets = &offsets[..=n];
        let base = offsets[0];
        for &o in offsets {
            out.extend_from_slice(&((o - base) as u32).to_le_bytes());
        }
        let data = &data[base as usize..offsets[n] as usize];
        out.extend_from_slice(&(data.len() as u32).to_le_bytes());
        out.extend_from_slice(data);
    };
    for c in batch.columns() {
        match c.nulls().filter(|nb| nb.null_count() > 0) {
            Some(nb) => {
                out.push(1);
                bits(out, nb.inner());
            }
            None => out.push(0),
        }
        match c.data_type() {
            D::Boolean => bits(out, c.as_boolean().values()),
            D::Utf8 => {
                let a = c.as_string::<i32>();
                strings(out, a.value_offsets(), a.values().as_slice());
            }
            D::Binary => {
                let a = c.as_binary::<i32>();
                strings(out, a.value_offsets(), a.values().as_slice());
            }
            D::FixedSizeList(_, dim) => {
                let dim = *dim as usize;
                // The values of a (sliced) list array start at its first row.
                match c.as_fixed_size_list().values().as_primitive_opt::<Float32Type>() {
                    Some(v) => out.extend_from_slice(&v.values().inner()[..n * dim * 4]),
                    None => {
                        let d = c.to_data();
                        let v = &d.child_data()[0];
                        let start = (v.offset() + d.offset() * dim) * 4;
                        out.extend_from_slice(
                            &v.buffers()[0].as_slice()[start..start + n * dim * 4],
                        );
                    }
                }
            }
            dt => {
                let typed: Option<&[u8]> = arrow_array::downcast_primitive_array!(
                    c => Some(c.values().inner().as_slice()),
                    _ => None,
                );
                match typed {
                    Some(bytes) => out.extend_from_slice(bytes),
                    None => {
                        let d = c.to_data();
                        let (w, off) = (dt.primitive_width().unwrap_or(0), d.offset());
                        out.extend_from_slice(&d.buffers()[0].as_slice()[off * w..(off + n) * w]);
                    }
                }
            }
        }
    }
}

/// Reads what [`encode_columns`] wrote, as rows of `schema`; fully validated.
fn decode_columns(d: &mut Dec<'_>, schema: &arrow_schema::SchemaRef) -> Result<RecordBatch> {
    use arrow_buffer::Buffer;
    use arrow_schema::DataType as D;
    let n = d.u32("row count")? as usize;
    let size = |k: usize, w: usize, d: &Dec<'_>| {
        k.checked_mul(w).ok_or_else(|| d.err("log rows: column size overflows"))
    };
    let mut cols = Vec::with_capacity(schema.fields().len());
    for f in schema.fields() {
        let nulls = match d.u8("null flag")? {
            0 => None,
            1 => Some(Buffer::from(d.raw(n.div_ceil(8), "validity")?)),
            b => return Err(d.err(format!("log rows: invalid null flag {b}"))),
        };
        let b = arrow_data::ArrayData::builder(f.data_type().clone()).len(n).null_bit_buffer(nulls);
        let b = match f.data_type() {
            D::Boolean => b.add_buffer(Buffer::from(d.raw(n.div_ceil(8), "booleans")?)),
            D::Utf8 | D::Binary => {
                let raw = d.raw(size(n + 1, 4, d)?, "offsets")?;
                let mut offsets = Vec::with_capacity(n + 1);
                for o in raw.chunks_exact(4) {
                    let o = u32::from_le_bytes([o[0], o[1], o[2], o[3]]);
                    offsets.push(
                        i32::try_from(o).map_err(|_| d.err("log rows: offset out of range"))?,
                    );
                }
                let data = d.bytes("string data")?;
                b.add_buffer(Buffer::from_vec(offsets)).add_buffer(Buffer::from(data))
            }
            D::FixedSizeList(_, dim) => {
                let k = size(n, (*dim).max(0) as usize, d)?;
                let values = arrow_data::ArrayData::builder(D::Float32)
                    .len(k)
                    .add_buffer(Buffer::from(d.raw(size(k, 4, d)?, "vector values")?))
                    .build()
                    .map_err(|e| d.err(format!("log rows: {e}")))?;
                b.add_child_data(values)
            }
            dt => match dt.primitive_width() {
                Some(w) => b.add_buffer(Buffer::from(d.raw(size(n, w, d)?, "values")?)),
                None => return Err(d.err(format!("log rows: no column layout for {dt}"))),
            },
        };
        let data = b.build().map_err(|e| d.err(format!("log rows: {e}")))?;
        cols.push(arrow_array::make_array(data));
    }
    RecordBatch::try_new_with_options(
        schema.clone(),
        cols,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(n)),
    )
    .map_err(|e| d.err(format!("log rows: {e}")))
}

/// The schema of a table by id (`None`: the table is gone; its rows are skipped).
pub type SchemaOf<'a> = dyn Fn(u64) -> Option<arrow_schema::SchemaRef> + 'a;

/// What [`replay`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplayEnd {
    /// Highest LSN seen (replayed or skipped); 0 when the log is empty.
    pub last_lsn: u64,
    /// Whether the last file ended in a torn record (an incomplete last write, discarded).
    pub torn_tail: bool,
    /// The file with the torn tail and the length of its valid prefix.
    pub torn_at: Option<(PathBuf, usize)>,
    /// Number of log files.
    pub files: usize,
    /// Salvage only: where the log was damaged, and what was dropped from there on.
    pub damage: Option<LogDamage>,
}

/// Damage found in the log by a salvaging [`replay`]: records from here on were not
/// replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDamage {
    /// The damaged file.
    pub file: PathBuf,
    /// Offset of the first damaged record in it.
    pub offset: u64,
    /// What check failed.
    pub reason: String,
    /// Intact records after the damage (in this file and later ones), dropped with it.
    pub dropped_records: usize,
    /// The highest LSN among those dropped records (0: none).
    pub dropped_through: u64,
    /// The log files from the damaged one on, which hold what was dropped.
    pub files: Vec<PathBuf>,
}

fn wal_files(vfs: &dyn Vfs, dir: &Path) -> Result<Vec<PathBuf>> {
    let mut names: Vec<String> =
        vfs.list_dir(dir)?.into_iter().filter(|n| n.ends_with(".wal")).collect();
    names.sort();
    Ok(names.into_iter().map(|n| dir.join(n)).collect())
}

/// A record whose checksum holds, starting at `pos` (its LSN, and the offset after it).
fn intact_record_at(bytes: &[u8], pos: usize) -> Option<(u64, usize)> {
    let head = bytes.get(pos..pos + 8)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    let sum = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len < 12 {
        return None;
    }
    let body = bytes.get(pos + 8..(pos + 8).checked_add(len)?)?;
    let lsn = u64::from_le_bytes(body[..8].try_into().ok()?);
    (crc(body) == sum && lsn != 0).then_some((lsn, pos + 8 + len))
}

/// Intact records with LSNs above `after` from `from` on in `bytes` (a damaged region is
/// searched byte by byte for the next record): their count and highest LSN.
fn intact_records_after(bytes: &[u8], from: usize, after: u64) -> (usize, u64) {
    let (mut count, mut high, mut pos) = (0, 0, from);
    while pos + 8 <= bytes.len() {
        match intact_record_at(bytes, pos) {
            Some((lsn, next)) if lsn > after => {
                count += 1;
                high = high.max(lsn);
                pos = next;
            }
            _ => pos += 1,
        }
    }
    (count, high)
}

/// Reads every log file under `dir` in order and calls `apply` for each record with an
/// LSN above `after`.
///
/// A record that fails its checks ends the log when it is a *torn tail*: in the last file,
/// with no intact record after it (an interrupted last write). Anywhere else it is damage,
/// and acknowledged commits would be lost by skipping it: [`Error::Corrupt`] naming the
/// file and offset, unless `salvage` is set — then replay stops there and
/// [`ReplayEnd::damage`] says what was dropped.
pub fn replay(
    vfs: &dyn Vfs,
    dir: &Path,
    after: u64,
    salvage: bool,
    schema_of: &SchemaOf<'_>,
    mut apply: impl FnMut(u64, Record) -> Result<()>,
) -> Result<ReplayEnd> {
    let files = wal_files(vfs, dir)?;
    let mut end = ReplayEnd { files: files.len(), ..ReplayEnd::default() };
    for (fi, path) in files.iter().enumerate() {
        let bytes = vfs.read(path)?;
        // A failed check at `off`: torn tail (`Ok(true)`), salvaged damage (`Ok(false)`, the
        // damage recorded), or corruption.
        let damaged = |off: usize, why: &str, end: &mut ReplayEnd| -> Result<bool> {
            let mut later = intact_records_after(&bytes, off + 1, end.last_lsn);
            for p in &files[fi + 1..] {
                let (n, high) = intact_records_after(&vfs.read(p)?, HEADER_LEN, end.last_lsn);
                later = (later.0 + n, later.1.max(high));
            }
            if later.0 == 0 && fi + 1 == files.len() {
                return Ok(true);
            }
            if !salvage {
                return Err(Error::corrupt(
                    path,
                    off as u64,
                    format!(
                        "{why}, with {} intact log records after it: the log is damaged, not \
                         torn (open with salvage to keep the commits before the damage)",
                        later.0
                    ),
                ));
            }
            end.damage = Some(LogDamage {
                file: path.clone(),
                offset: off as u64,
                reason: why.to_string(),
                dropped_records: later.0,
                dropped_through: later.1,
                files: files[fi..].to_vec(),
            });
            Ok(false)
        };
        if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
            // A file whose header never made it to disk holds no records.
            if bytes.iter().all(|&b| b == 0) && fi + 1 == files.len() {
                end.torn_tail = !bytes.is_empty();
                end.torn_at = end.torn_tail.then(|| (path.clone(), 0));
            } else if damaged(0, "bad log header", &mut end)? {
                end.torn_tail = true;
                end.torn_at = Some((path.clone(), 0));
            }
            break;
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if version == 0 && fi + 1 == files.len() && bytes[12..].iter().all(|&b| b == 0) {
            // A header torn while the last file was started: it holds no record.
            end.torn_tail = true;
            end.torn_at = Some((path.clone(), 0));
            break;
        }
        if !(WAL_OLDEST_READ..=WAL_FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedFormatVersion {
                file: path.clone(),
                found: version,
                supported: WAL_FORMAT_VERSION,
            });
        }
        let mut pos = HEADER_LEN;
        let mut stop = false;
        while pos < bytes.len() {
            // Preallocated space: an all-zero rest of the file is the clean end of its log.
            // (A zero record header followed by anything else is damage, handled below.)
            if bytes[pos..].iter().all(|&b| b == 0) {
                break;
            }
            let why = if bytes.len() - pos < 8 {
                Some("truncated log record header")
            } else {
                let len = u32::from_le_bytes([
                    bytes[pos],
                    bytes[pos + 1],
                    bytes[pos + 2],
                    bytes[pos + 3],
                ]) as usize;
                if bytes.len() - (pos + 8) < len || len < 12 {
                    Some("truncated log record")
                } else if intact_record_at(&bytes, pos).is_none() {
                    Some("log record checksum mismatch")
                } else {
                    None
                }
            };
            if let Some(why) = why {
                stop = true;
                end.torn_tail = damaged(pos, why, &mut end)?;
                break;
            }
            let len =
                u32::from_le_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]])
                    as usize;
            let body_start = pos + 8;
            let body = &bytes[body_start..body_start + len];
            let (lsn, rec) = Record::decode_body(body, path, body_start as u64, schema_of)?;
            if lsn <= end.last_lsn && end.last_lsn != 0 {
                return Err(Error::corrupt(path, pos as u64, "log sequence numbers go backwards"));
            }
            end.last_lsn = lsn;
            if lsn > after {
                apply(lsn, rec)?;
            }
            pos = body_start + len;
        }
        if end.torn_tail {
            end.torn_at = Some((path.clone(), pos));
        }
        if stop {
            break;
        }
    }
    Ok(end)
}

/// Deletes the log files whose records all have LSNs at or below `through`; `last_lsn`
/// is the last LSN written (the end of the newest file).
pub fn remove_through(vfs: &dyn Vfs, dir: &Path, through: u64, last_lsn: u64) -> Result<()> {
    let files = wal_files(vfs, dir)?;
    let first = |p: &Path| {
        p.file_stem().and_then(|s| s.to_str()).and_then(|s| u64::from_str_radix(s, 16).ok())
    };
    for (i, f) in files.iter().enumerate() {
        let last = match files.get(i + 1).and_then(|n| first(n)) {
            Some(next_first) => next_first.saturating_sub(1),
            None => last_lsn,
        };
        // A file holding no record yet (the one the next record goes to) stays.
        if last <= through && first(f).is_none_or(|start| start <= last) {
            vfs.remove_file(f)?;
        }
    }
    Ok(())
}

/// A log file's header.
fn header() -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&WAL_FORMAT_VERSION.to_le_bytes());
    h
}

#[derive(Debug)]
struct Pending {
    /// Next LSN to hand out.
    next_lsn: u64,
    /// Encoded records not yet written to the file, and the LSN of the first of them.
    bytes: Vec<u8>,
    first: u64,
    /// The emptied buffer of the last write, for the next record to be encoded into: a
    /// record of a one-row write is a few KiB, and allocating it afresh every time (an
    /// allocation that size takes the allocator's slow path) was most of
    /// [`Wal::append`]'s time in a run of `remember`s.
    spare: Vec<u8>,
}

/// Largest emptied buffer kept for the next record (a larger one is freed).
const SPARE_BYTES: usize = 1 << 20;

#[derive(Debug)]
struct Output {
    file: Option<Box<dyn AppendFile>>,
    syncer: Option<std::sync::Arc<dyn SyncFile>>,
    /// LSN the open file's name says it starts at.
    first: u64,
}

/// The open log of a writer.
///
/// Appending only encodes a record into an in-memory buffer (under a short lock, in commit
/// order); [`Wal::write_to`] writes everything buffered with one `write(2)` and
/// [`Wal::sync_to`] additionally `fdatasync`s. Neither needs the writer lock: the store
/// writes process-safe commits while still holding it, and syncs power-safe ones after
/// releasing it, so commits that arrive meanwhile share one write and one sync (group
/// commit).
#[derive(Debug)]
pub struct Wal {
    vfs: std::sync::Arc<dyn Vfs>,
    dir: PathBuf,
    pending: Mutex<Pending>,
    out: Mutex<Output>,
    written_lsn: AtomicU64,
    synced_lsn: AtomicU64,
    sync_lock: Mutex<()>,
}

impl Wal {
    /// A log whose next record gets `next_lsn`; the file is created on first write.
    pub fn new(vfs: std::sync::Arc<dyn Vfs>, dir: PathBuf, next_lsn: u64) -> Self {
        Self {
            vfs,
            dir,
            pending: Mutex::new(Pending {
                next_lsn,
                bytes: Vec::new(),
                first: next_lsn,
                spare: Vec::new(),
            }),
            out: Mutex::new(Output { file: None, syncer: None, first: 0 }),
            written_lsn: AtomicU64::new(next_lsn - 1),
            synced_lsn: AtomicU64::new(next_lsn - 1),
            sync_lock: Mutex::new(()),
        }
    }

    /// Adds a record of `ops` (a commit's changes, in order: what [`Record::ops`] reads
    /// back) to the log buffer; returns its LSN. Not on disk until [`Wal::write_to`] (or
    /// [`Wal::sync_to`]) covers it.
    pub fn append(&self, ops: &[Op]) -> Result<u64> {
        // The frame: length, checksum, LSN, then the operations, encoded after room for
        // the header so that into an empty buffer (the usual case: it empties at every
        // write) the record moves instead of being copied.
        let spare = std::mem::take(&mut self.pending.lock().spare);
        let mut framed = Record::encode_ops_after(ops, 16, spare)?;
        let mut p = self.pending.lock();
        let lsn = p.next_lsn;
        let len = (framed.len() - 16 + 8) as u32;
        let lsn_bytes = lsn.to_le_bytes();
        let sum = crc32c::crc32c_append(crc(&lsn_bytes), &framed[16..]);
        framed[..4].copy_from_slice(&len.to_le_bytes());
        framed[4..8].copy_from_slice(&sum.to_le_bytes());
        framed[8..16].copy_from_slice(&lsn_bytes);
        if p.bytes.is_empty() {
            p.first = lsn;
            p.bytes = framed;
        } else {
            p.bytes.extend_from_slice(&framed);
            if framed.capacity() <= SPARE_BYTES {
                p.spare = framed;
            }
        }
        p.next_lsn += 1;
        Ok(lsn)
    }

    /// Returns once every record up to `lsn` is written to the log file (one write for all
    /// records buffered so far).
    pub fn write_to(&self, lsn: u64) -> Result<()> {
        if self.written_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let mut out = self.out.lock();
        if self.written_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        let (bytes, first, last) = {
            let mut p = self.pending.lock();
            (std::mem::take(&mut p.bytes), p.first, p.next_lsn - 1)
        };
        if bytes.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        if out.file.is_none() {
            let f = self.create_file(&mut out, first)?;
            if f.is_empty() {
                buf.extend_from_slice(&header());
            }
            out.file = Some(f);
        }
        let file = out
            .file
            .as_mut()
            .ok_or_else(|| Error::io("append", &self.dir, std::io::Error::other("no log file")))?;
        if buf.is_empty() {
            file.append(&bytes)?;
        } else {
            buf.extend_from_slice(&bytes);
            file.append(&buf)?;
        }
        self.written_lsn.fetch_max(last, Ordering::AcqRel);
        if bytes.capacity() <= SPARE_BYTES {
            let mut bytes = bytes;
            bytes.clear();
            self.pending.lock().spare = bytes;
        }
        Ok(())
    }

    /// Returns once every record up to `lsn` is written and synced. Concurrent callers share
    /// writes and syncs.
    pub fn sync_to(&self, lsn: u64) -> Result<()> {
        if self.synced_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        self.write_to(lsn)?;
        let _g = self.sync_lock.lock();
        if self.synced_lsn.load(Ordering::Acquire) >= lsn {
            return Ok(());
        }
        // Capture what is written, then sync without blocking writes: commits that write
        // meanwhile are covered by the next sync.
        let (upto, syncer) = {
            let out = self.out.lock();
            (self.written_lsn.load(Ordering::Acquire), out.syncer.clone())
        };
        if let Some(s) = syncer {
            s.sync()?;
        }
        self.synced_lsn.fetch_max(upto, Ordering::AcqRel);
        Ok(())
    }

    /// LSN of the last appended record (buffered or written).
    pub fn last_lsn(&self) -> u64 {
        self.pending.lock().next_lsn - 1
    }

    /// Creates the log file whose first record will be `first` (replacing a leftover of
    /// that name, which can only hold a header), syncs the directory entry, and makes it
    /// the output.
    fn create_file(&self, out: &mut Output, first: u64) -> Result<Box<dyn AppendFile>> {
        self.vfs.create_dir_all(&self.dir)?;
        let path = self.dir.join(format!("{first:016x}.wal"));
        let f = self.vfs.create_log(&path)?;
        self.vfs.sync_dir(&self.dir)?;
        out.syncer = Some(f.syncer()?);
        out.first = first;
        Ok(f)
    }

    /// Writes what is buffered and makes the file the next record goes to exist now, with
    /// its header — the file a manifest with `wal_lsn = last_lsn()` promises
    /// ([`crate::manifest::Manifest::log_kept`]). The file written so far is closed (every
    /// record in it must be going into segments). Nothing happens when the open file is
    /// already that one.
    pub fn start_next_file(&self) -> Result<()> {
        self.write_to(self.last_lsn())?;
        let mut out = self.out.lock();
        let next = {
            let mut p = self.pending.lock();
            p.bytes.clear();
            p.first = p.next_lsn;
            p.next_lsn
        };
        if out.file.is_some() && out.first == next {
            return Ok(());
        }
        if out.file.is_none() && self.vfs.exists(&self.dir.join(format!("{next:016x}.wal"))) {
            // Left by the last close (it holds no record, or replay would have moved `next`
            // past it): the first write recreates it, no system call now.
            return Ok(());
        }
        out.file = None;
        out.syncer = None;
        let mut f = self.create_file(&mut out, next)?;
        f.append(&header())?;
        out.file = Some(f);
        self.written_lsn.fetch_max(next - 1, Ordering::AcqRel);
        Ok(())
    }

    /// Starts the next file ([`Wal::start_next_file`]: every appended record is now in
    /// segments and a manifest with `wal_lsn >= last_lsn()` is installed) and deletes every
    /// file whose records are all at or below `through` (the lowest position a change feed
    /// or index still needs).
    pub fn rotate(&self, through: u64) -> Result<()> {
        self.start_next_file()?;
        let _out = self.out.lock();
        // Every record so far is in segments: as safe as synced.
        self.synced_lsn.fetch_max(self.last_lsn(), Ordering::AcqRel);
        let written = self.written_lsn.load(Ordering::Acquire);
        remove_through(self.vfs.as_ref(), &self.dir, through, written)
    }
}

/// Offsets of the records of an undamaged log file, for tests that damage one.
#[cfg(test)]
pub(crate) fn record_starts_for_tests(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = HEADER_LEN;
    while let Some((_, next)) = intact_record_at(bytes, pos) {
        out.push(pos);
        pos = next;
    }
    out
}

/// (end of the last record, start of the last record) of an undamaged log file: tests use
/// it to find what to tear in a preallocated file.
#[cfg(test)]
pub(crate) fn record_ends(bytes: &[u8]) -> (usize, usize) {
    let (mut pos, mut last) = (HEADER_LEN, HEADER_LEN);
    while pos + 8 <= bytes.len() {
        let len = u32::from_le_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]]);
        if len == 0 {
            break;
        }
        last = pos;
        pos += 8 + len as usize;
    }
    (pos, last)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int32Array, UInt64Array};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::io::MemFs;

    fn rec(i: u64) -> Record {
        let s = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("x", DataType::Int32, true),
        ]));
        let batch = RecordBatch::try_new(
            s,
            vec![Arc::new(UInt64Array::from(vec![i])), Arc::new(Int32Array::from(vec![i as i32]))],
        )
        .unwrap();
        Record {
            ops: vec![
                Op::Insert { table_id: 7, batch },
                Op::Delete { table_id: 7, ids: vec![i, i + 1] },
            ],
        }
    }

    fn collect(fs: &MemFs, after: u64) -> Result<(Vec<u64>, ReplayEnd)> {
        collect_salvaging(fs, after, false)
    }

    fn collect_salvaging(fs: &MemFs, after: u64, salvage: bool) -> Result<(Vec<u64>, ReplayEnd)> {
        let mut seen = Vec::new();
        let schema = rec(0).ops.iter().find_map(|o| match o {
            Op::Insert { batch, .. } => Some(batch.schema()),
            Op::Delete { .. } => None,
        });
        let end = replay(fs, Path::new("/w"), after, salvage, &|_| schema.clone(), |lsn, r| {
            let [Op::Insert { batch, table_id }, Op::Delete { ids, .. }] = &r.ops[..] else {
                panic!("unexpected record {r:?}");
            };
            assert_eq!(*table_id, 7);
            assert_eq!(batch.num_rows(), 1);
            assert_eq!(ids.len(), 2);
            seen.push(lsn);
            Ok(())
        })?;
        Ok((seen, end))
    }

    #[test]
    fn append_replay_and_torn_tail() {
        let fs = MemFs::new();
        let wal = Wal::new(Arc::new(fs.clone()), "/w".into(), 1);
        for i in 1..=5 {
            assert_eq!(wal.append(&rec(i).ops).unwrap(), i);
        }
        // Buffered until written.
        assert!(fs.list_dir(Path::new("/w")).unwrap().is_empty());
        wal.sync_to(5).unwrap();
        let (seen, end) = collect(&fs, 2).unwrap();
        assert_eq!(seen, vec![3, 4, 5]);
        assert_eq!(end, ReplayEnd { last_lsn: 5, files: 1, ..ReplayEnd::default() });
        // The file is preallocated: zeros follow the last record.
        let path = Path::new("/w/0000000000000001.wal");
        let full = fs.read(path).unwrap();
        let (logical, last_start) = record_ends(&full);
        assert!(full.len() > logical && full[logical..].iter().all(|&b| b == 0));
        // Tear the last record at every length, as a short file and as a partial write
        // into the zeroed space: replay stops cleanly before it.
        let mut cut_points = 0;
        for cut in last_start + 1..logical {
            for zero_tail in [false, true] {
                let mut torn = full[..cut].to_vec();
                if zero_tail {
                    torn.resize(full.len(), 0);
                    if torn == full {
                        continue; // the cut-off bytes were zeros: nothing is torn
                    }
                }
                fs.put(path, &torn);
                let (seen, end) = collect(&fs, 0).unwrap();
                assert_eq!(seen, vec![1, 2, 3, 4]);
                assert!(end.torn_tail, "cut at {cut}");
                cut_points += 1;
            }
        }
        assert!(cut_points > 0);
        // Nothing of the last record written: the log simply ends before it.
        let mut none = full[..last_start].to_vec();
        none.resize(full.len(), 0);
        fs.put(path, &none);
        let (seen, end) = collect(&fs, 0).unwrap();
        assert_eq!(seen, vec![1, 2, 3, 4]);
        assert!(!end.torn_tail);
        // A zeroed record header followed by non-zero bytes is damage, not the end.
        let mut hole = full.clone();
        hole[last_start..last_start + 8].fill(0);
        fs.put(path, &hole);
        let (seen, end) = collect(&fs, 0).unwrap();
        assert_eq!(seen, vec![1, 2, 3, 4]);
        assert!(end.torn_tail);
        fs.put(Path::new("/w/0000000000000098.wal"), &full);
        assert!(collect(&fs, 0).unwrap_err().is_corruption());
        fs.remove_file(Path::new("/w/0000000000000098.wal")).unwrap();
        // A flipped byte in the middle of the last file, with intact records after it, is
        // damage: acknowledged commits would be lost by stopping there.
        let mut bad = full.clone();
        bad[HEADER_LEN + 20] ^= 1;
        fs.put(path, &bad);
        let e = collect(&fs, 0).unwrap_err();
        assert!(e.is_corruption(), "{e}");
        let msg = e.to_string();
        assert!(msg.contains("0000000000000001.wal") && msg.contains("offset 16"), "{msg}");
        assert!(msg.contains("4 intact log records after it"), "{msg}");
        // Salvaging keeps the records before the damage and says what it dropped.
        let mut second = bad.clone();
        let third = record_starts_for_tests(&full)[2];
        second[third + 9] ^= 1; // damage the third record instead
        fs.put(path, &second);
        let (seen, end) = collect_salvaging(&fs, 0, true).unwrap();
        assert!(seen.is_empty(), "the first record was damaged");
        let d = end.damage.expect("damage reported");
        assert_eq!((d.offset, d.dropped_records, d.dropped_through), (16, 3, 5));
        let mut third_only = full.clone();
        third_only[third + 9] ^= 1;
        fs.put(path, &third_only);
        let (seen, end) = collect_salvaging(&fs, 0, true).unwrap();
        assert_eq!(seen, vec![1, 2]);
        let d = end.damage.expect("damage reported");
        assert_eq!((d.offset as usize, d.dropped_records, d.dropped_through), (third, 2, 5));
        assert_eq!(d.files, vec![path.to_path_buf()]);
        assert!(!end.torn_tail);
        // In an earlier file any damage is corruption, even with nothing intact after it.
        fs.put(Path::new("/w/0000000000000099.wal"), &full[..HEADER_LEN]);
        let mut zero_tail = full[..last_start + 12].to_vec();
        zero_tail.resize(full.len(), 0);
        fs.put(path, &zero_tail);
        assert!(collect(&fs, 0).unwrap_err().is_corruption());
    }

    #[test]
    fn records_encoded_into_a_reused_buffer_replay_exactly() {
        // Each write leaves its emptied buffer for the next record: records of different
        // sizes, written one by one and several at a time, must not carry each other's
        // bytes.
        let fs = MemFs::new();
        let wal = Wal::new(Arc::new(fs.clone()), "/w".into(), 1);
        let s = Arc::new(Schema::new(vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("x", DataType::Int32, true),
        ]));
        let rows = |i: u64| -> Vec<u64> { (0..[1, 300, 2, 40][i as usize % 4]).collect() };
        let record = |i: u64| {
            let ids = rows(i);
            let xs: Vec<i32> = ids.iter().map(|r| (*r as i32) * 7 + i as i32).collect();
            let batch = RecordBatch::try_new(
                s.clone(),
                vec![Arc::new(UInt64Array::from(ids)), Arc::new(Int32Array::from(xs))],
            )
            .unwrap();
            Record { ops: vec![Op::Insert { table_id: 7, batch }] }
        };
        for i in 1..=12u64 {
            assert_eq!(wal.append(&record(i).ops).unwrap(), i);
            // Four records buffered together, then the rest one write each.
            if i >= 4 {
                wal.write_to(i).unwrap();
            }
        }
        wal.write_to(12).unwrap();
        let mut seen = Vec::new();
        replay(&fs, Path::new("/w"), 0, false, &|_| Some(s.clone()), |lsn, r| {
            let [Op::Insert { batch, .. }] = &r.ops[..] else { panic!("unexpected {r:?}") };
            assert_eq!(
                batch,
                &match &record(lsn).ops[0] {
                    Op::Insert { batch, .. } => batch.clone(),
                    Op::Delete { .. } => unreachable!(),
                }
            );
            seen.push(lsn);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, (1..=12).collect::<Vec<_>>());
    }

    #[test]
    fn rotation_keeps_what_feeds_need_and_lsns_continue() {
        let fs = MemFs::new();
        let wal = Wal::new(Arc::new(fs.clone()), "/w".into(), 10);
        wal.append(&rec(1).ops).unwrap(); // 10
        wal.append(&rec(1).ops).unwrap(); // 11
        wal.rotate(9).unwrap(); // writes them: a feed still needs 10 and 11
        // Their file stays; the next records' file (12) exists already.
        assert_eq!(fs.list_dir(Path::new("/w")).unwrap().len(), 2);
        assert_eq!(wal.append(&rec(2).ops).unwrap(), 12);
        wal.write_to(12).unwrap();
        let (seen, _) = collect(&fs, 0).unwrap();
        assert_eq!(seen, vec![10, 11, 12]);
        wal.rotate(11).unwrap(); // the first file is no longer needed
        let (seen, _) = collect(&fs, 0).unwrap();
        assert_eq!(seen, vec![12]);
        wal.rotate(12).unwrap();
        assert_eq!(fs.list_dir(Path::new("/w")).unwrap(), ["000000000000000d.wal"]);
    }

    #[test]
    fn power_loss_keeps_synced_records_only() {
        let fs = MemFs::new();
        let wal = Wal::new(Arc::new(fs.clone()), "/w".into(), 1);
        wal.append(&rec(1).ops).unwrap();
        wal.append(&rec(2).ops).unwrap();
        wal.sync_to(2).unwrap();
        wal.append(&rec(3).ops).unwrap();
        wal.write_to(3).unwrap(); // written, not synced
        fs.lose_unsynced_writes();
        let (seen, _) = collect(&fs, 0).unwrap();
        assert_eq!(seen, vec![1, 2]);
    }

    /// Encodes `ops` as a record body with LSN 1 and decodes it with `schema`.
    fn round_trip(ops: Vec<Op>, schema: &arrow_schema::SchemaRef) -> Result<Record> {
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend(Record { ops }.encode_ops()?);
        let s = schema.clone();
        Ok(Record::decode_body(&body, Path::new("/w/x.wal"), 0, &|_| Some(s.clone()))?.1)
    }

    fn inserted(r: &Record) -> &RecordBatch {
        match &r.ops[..] {
            [Op::Insert { batch, .. }] => batch,
            other => panic!("unexpected ops {other:?}"),
        }
    }

    fn wide_schema(with_list: bool) -> arrow_schema::SchemaRef {
        let mut f = vec![
            Field::new("_id", DataType::UInt64, false),
            Field::new("b", DataType::Boolean, true),
            Field::new("i", DataType::Int32, true),
            Field::new("s", DataType::Utf8, true),
            Field::new("bin", DataType::Binary, true),
            Field::new("f", DataType::Float64, true),
            Field::new("ts", DataType::Timestamp(arrow_schema::TimeUnit::Microsecond, None), true),
            Field::new("dec", DataType::Decimal128(20, 3), true),
            Field::new("v", crate::types::vector_type(3), true),
        ];
        if with_list {
            f.push(Field::new_list("l", Field::new("item", DataType::Int32, true), true));
        }
        Arc::new(Schema::new(f))
    }

    fn wide_batch(rows: &[(Option<i32>, Option<String>)], with_list: bool) -> RecordBatch {
        use arrow_array::{
            ArrayRef, BinaryArray, BooleanArray, Decimal128Array, FixedSizeListArray, Float32Array,
            Float64Array, ListArray, StringArray, TimestampMicrosecondArray,
        };
        let n = rows.len();
        let opt = |k: usize, v: i64| (k % 3 != 1).then_some(v);
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(UInt64Array::from_iter_values(1..=n as u64)),
            Arc::new(BooleanArray::from_iter((0..n).map(|k| opt(k, 0).map(|_| k % 2 == 0)))),
            Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1.clone()))),
            Arc::new(BinaryArray::from_iter(
                rows.iter().map(|r| r.1.as_ref().map(|s| s.as_bytes().to_vec())),
            )),
            Arc::new(Float64Array::from_iter(
                (0..n).map(|k| opt(k, k as i64).map(|v| v as f64 / 7.0)),
            )),
            Arc::new(TimestampMicrosecondArray::from_iter((0..n).map(|k| opt(k, k as i64 * 1000)))),
            Arc::new(
                Decimal128Array::from_iter((0..n).map(|k| opt(k, k as i64).map(i128::from)))
                    .with_precision_and_scale(20, 3)
                    .unwrap(),
            ),
            Arc::new(FixedSizeListArray::new(
                Arc::new(Field::new("item", DataType::Float32, true)),
                3,
                Arc::new(Float32Array::from_iter_values((0..3 * n).map(|k| k as f32 * 0.5))),
                Some((0..n).map(|k| k % 4 != 2).collect()),
            )),
        ];
        if with_list {
            cols.push(Arc::new(ListArray::from_iter_primitive::<
                arrow_array::types::Int32Type,
                _,
                _,
            >((0..n).map(|k| Some(vec![Some(k as i32); k % 3])))));
        }
        RecordBatch::try_new(wide_schema(with_list), cols).unwrap()
    }

    proptest::proptest! {
        /// Every column layout round-trips, with nulls and with sliced (offset) arrays;
        /// a column without a layout sends the whole op through IPC, which round-trips too.
        #[test]
        fn column_layout_round_trips(
            rows in proptest::collection::vec(
                (proptest::option::of(proptest::num::i32::ANY), proptest::option::of("[a-zé]{0,12}")),
                1..40,
            ),
            cut in 0usize..5,
            with_list in proptest::bool::ANY,
        ) {
            let full = wide_batch(&rows, with_list);
            let start = cut.min(full.num_rows() - 1);
            let batch = full.slice(start, full.num_rows() - start);
            proptest::prop_assert_eq!(columns_have_layout(&batch), !with_list);
            let schema = wide_schema(with_list);
            let back = round_trip(vec![Op::Insert { table_id: 3, batch: batch.clone() }], &schema).unwrap();
            proptest::prop_assert_eq!(inserted(&back), &batch);
        }
    }

    #[test]
    fn damaged_column_layout_is_an_error_or_other_rows_never_a_panic() {
        let rows: Vec<(Option<i32>, Option<String>)> =
            (0..5).map(|k| ((k % 2 == 0).then_some(k), Some(format!("row {k}")))).collect();
        let batch = wide_batch(&rows, false);
        let schema = wide_schema(false);
        let mut body = 1u64.to_le_bytes().to_vec();
        body.extend(Record { ops: vec![Op::Insert { table_id: 3, batch }] }.encode_ops().unwrap());
        assert_eq!(body[12], KIND_INSERT_COLUMNS);
        let mut errors = 0;
        for i in 12..body.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = body.clone();
                bad[i] ^= flip;
                let s = schema.clone();
                match Record::decode_body(&bad, Path::new("/w/x.wal"), 0, &|_| Some(s.clone())) {
                    Err(e) => {
                        assert!(e.is_corruption(), "{e}");
                        errors += 1;
                    }
                    Ok((_, r)) => assert!(r.ops.len() <= 1),
                }
            }
        }
        assert!(errors > 0);
    }

    #[test]
    fn format_1_logs_are_read_and_unknown_versions_refused() {
        // A format-1 file holds IPC inserts (kind 1) and deletes; the column layout
        // (kind 3) is only ever written under a format-2 header.
        let fs = MemFs::new();
        let wal = Wal::new(Arc::new(fs.clone()), "/w".into(), 1);
        let schema = wide_schema(true);
        let batch = wide_batch(&[(Some(1), Some("a".into())), (None, None)], true);
        wal.append(&[Op::Insert { table_id: 3, batch: batch.clone() }]).unwrap();
        wal.sync_to(1).unwrap();
        let path = Path::new("/w/0000000000000001.wal");
        let mut bytes = fs.read(path).unwrap();
        let replay_all = |fs: &MemFs| {
            let mut got = Vec::new();
            let s = schema.clone();
            replay(fs, Path::new("/w"), 0, false, &|_| Some(s.clone()), |_, r| {
                got.push(inserted(&r).clone());
                Ok(())
            })
            .map(|_| got)
        };
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        fs.put(path, &bytes);
        assert_eq!(replay_all(&fs).unwrap(), vec![batch]);
        bytes[8..12].copy_from_slice(&(WAL_FORMAT_VERSION + 1).to_le_bytes());
        fs.put(path, &bytes);
        assert!(matches!(replay_all(&fs), Err(Error::UnsupportedFormatVersion { .. })));
    }
}
