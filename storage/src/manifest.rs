//! The manifest: the single source of truth for which tables and segments exist.
//!
//! # Byte layout (format version 5), file `MANIFEST`
//!
//! ```text
//! magic "BSLTMAN\0" (8) | format version u32 | body length u64 | body | CRC-32C u32
//! ```
//! The CRC covers everything before it (magic, version, length, body). Body: manifest
//! version (u64, +1 per install), next table id (u64), next segment id (u64), `wal_lsn`
//! (u64: log records up to it are in segments), feed count (u32) and per feed its name and
//! acknowledged LSN (u64), table count
//! (u32), then per table: id (u64), name, next row id (u64), next column id (u32), column
//! count (u32) and ids (u32 each), the user schema as an Arrow IPC flatbuffer, segment count
//! (u32) and per segment: id, rows, min `_id`, max `_id`, file size, delete-file generation
//! (0 = none) and deleted rows (u64 each); then (since version 2) view count (u32) and per
//! view its name and its SQL text; then (since version 3) full-text index count (u32) and per
//! index its table id (u64), directory id (u64), tokenizer name and column count (u32) with
//! the column ids (u32 each); then (since version 4) flags (u32): bit 0 = *the log is kept*
//! — the log file whose first LSN is `wal_lsn + 1` exists for as long as this manifest is
//! in force, so a writer open that does not find it knows commits may be lost; then (since
//! version 5) key and index count (u32) and per definition its table id (u64), name, kind
//! (u32: 0 index, 1 unique, 2 primary key) and column count (u32) with the column ids (u32
//! each), then column default count (u32) and per default its table id (u64), column id
//! (u32) and SQL text. Versions 1 (no views), 2 (no full-text indexes), 3 (no flags) and 4 (no keys) are
//! still read; every install writes version 5.
//!
//! # Atomic replacement
//!
//! [`install`] writes `MANIFEST.tmp`, fsyncs it, renames it over `MANIFEST`, and fsyncs the
//! directory. A crash before the rename leaves the old manifest in force (the temp file is
//! removed at the next writer open); after the rename, the new one. A torn or damaged
//! manifest fails its CRC and the database refuses to open with [`Error::Corrupt`] rather than
//! guessing.
//!
//! # Pending catalog changes
//!
//! A catalog-only change (a table created, renamed, altered or dropped while it has no
//! files; a view created or dropped) in a database whose default durability is not
//! power-safe is installed by [`PendingSlots::install`]: the same bytes written over the start
//! of one of two slot files, `MANIFEST.pending-0` and `MANIFEST.pending-1` (version v goes to
//! slot v % 2), with no fsync, no truncation and no rename — a page-cache write, where a
//! new file and a rename over the old one cost ext4 an inode and an early write-back. Bytes
//! past the frame's length are an older, longer manifest's tail and are ignored. Two slots
//! because a write can tear: consecutive pending versions alternate, so the newest intact
//! one is never the one being overwritten (a synced install in between makes the
//! overwritten one stale anyway). Like a process-safe commit, a pending manifest survives a
//! killed process but not necessarily a power loss. [`Manifest::load`] takes the newest
//! intact slot whose version is above the synced manifest's; torn, lost or stale slots (a
//! power loss, or superseded) leave the synced `MANIFEST` in force — the state before the
//! pending changes (or an intact pending state in between: every one is a state the
//! database was in). The store keeps those states safe to fall back to: it never deletes a
//! file the synced manifest names while a pending one is in force, and it makes the pending
//! manifest synced (a normal [`install`]) before the first log record that depends on it
//! (rows of a table created or altered by a pending change). The next synced install
//! supersedes the slots; their files stay, to be overwritten. The store keeps both slot
//! files open while it is open ([`PendingSlots`]), so a catalog change costs one positioned
//! write and no open or close.

use std::path::{Path, PathBuf};

use crate::codec::{Dec, Enc, crc};
use crate::error::{Error, Result};
use crate::io::{SlotFile, Vfs};
use crate::types::{ColumnDef, TableSchema};

/// Current manifest format version.
pub const MANIFEST_FORMAT_VERSION: u32 = 6;
/// Oldest manifest format version still read.
pub const MANIFEST_OLDEST_VERSION: u32 = 1;
/// File name of the manifest inside the database directory.
pub const MANIFEST_FILE: &str = "MANIFEST";
/// Temporary name used while replacing the manifest.
pub const MANIFEST_TMP: &str = "MANIFEST.tmp";
/// File names of the two slots of manifests installed without an fsync (see the module
/// docs); version v goes to slot v % 2.
pub const MANIFEST_PENDING: [&str; 2] = ["MANIFEST.pending-0", "MANIFEST.pending-1"];
/// Bytes before the body: magic, format version, body length.
const HEADER_LEN: usize = 20;
const MAGIC: &[u8; 8] = b"BSLTMAN\0";

/// A live segment of a table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEntry {
    /// Segment id; the file is `t<table id>/s<segment id as 16 hex digits>.bsg`.
    pub id: u64,
    /// Rows in the segment.
    pub rows: u64,
    /// Smallest `_id`.
    pub id_min: u64,
    /// Largest `_id`.
    pub id_max: u64,
    /// File size in bytes.
    pub bytes: u64,
    /// Generation of the segment's delete file in force (0: no deletes persisted).
    pub deletes_gen: u64,
    /// Deleted rows recorded by that delete file.
    pub deleted: u64,
}

/// A table as the manifest records it.
#[derive(Debug, Clone, PartialEq)]
pub struct TableEntry {
    /// Table id (names can be reused after a drop; ids never are).
    pub id: u64,
    /// Table name.
    pub name: String,
    /// Schema.
    pub schema: TableSchema,
    /// Next `_id` to assign.
    pub next_row_id: u64,
    /// Live segments, oldest first.
    pub segments: Vec<SegmentEntry>,
    /// The table's full-text index, if it has one.
    pub fts: Option<FtsEntry>,
    /// Its primary key, unique keys and indexes, in creation order.
    pub indexes: Vec<IndexDef>,
    /// Column defaults: column id and the SQL text of the default expression.
    pub defaults: Vec<(u32, String)>,
    /// CHECK constraints, in creation order.
    pub checks: Vec<CheckDef>,
}

/// A CHECK constraint as the manifest records it: a condition every row must not make
/// FALSE (TRUE and NULL pass). Storage keeps the text; the SQL layer evaluates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckDef {
    /// Its name, unique among the table's constraints.
    pub name: String,
    /// The condition's SQL text, every column written as a quoted identifier.
    pub sql: String,
    /// The columns it reads, by column id (dropping or renaming them is refused).
    pub columns: Vec<u32>,
}

/// What an [`IndexDef`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// `CREATE INDEX`: an ordered index, no constraint.
    Index,
    /// `UNIQUE` / `CREATE UNIQUE INDEX`: no two rows whose key columns are all non-NULL have
    /// the same key.
    Unique,
    /// `PRIMARY KEY`: unique, and its columns are `NOT NULL` (at most one per table).
    PrimaryKey,
}

impl IndexKind {
    fn code(self) -> u32 {
        match self {
            IndexKind::Index => 0,
            IndexKind::Unique => 1,
            IndexKind::PrimaryKey => 2,
        }
    }

    /// Whether it forbids two rows with the same key.
    pub fn is_unique(self) -> bool {
        self != IndexKind::Index
    }
}

/// A key or index of a table as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDef {
    /// Its name, unique in the database.
    pub name: String,
    /// Index, unique key or primary key.
    pub kind: IndexKind,
    /// The key columns by column id, in key order (renames keep the index; drops are
    /// refused).
    pub columns: Vec<u32>,
}

/// A full-text index as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FtsEntry {
    /// Names its directory, `t<table>/fts-<dir_id>` (never reused: a new index gets a new
    /// directory, so a crash cannot mix the files of two definitions).
    pub dir_id: u64,
    /// Tokenizer name (see `basalt_fts::Tokenizer`).
    pub tokenizer: String,
    /// Indexed columns, by column id (renames keep the index; drops are refused).
    pub columns: Vec<u32>,
}

/// Directory of a table's full-text index.
pub fn fts_dir(root: &Path, table_id: u64, dir_id: u64) -> PathBuf {
    table_dir(root, table_id).join(format!("fts-{dir_id}"))
}

/// The whole manifest.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Manifest {
    /// Incremented by every install.
    pub version: u64,
    /// Next table id to assign.
    pub next_table_id: u64,
    /// Next segment id to assign.
    pub next_segment_id: u64,
    /// Log records up to this LSN are in segments; recovery replays the ones after it.
    pub wal_lsn: u64,
    /// Change feeds and the LSN each has acknowledged; the log is kept past the lowest.
    pub feeds: Vec<(String, u64)>,
    /// Tables, in creation order.
    pub tables: Vec<TableEntry>,
    /// Views: name and SQL text of the query, sorted by name.
    pub views: Vec<(String, String)>,
    /// The log file starting at `wal_lsn + 1` exists while this manifest is in force (a
    /// writer of format 4 or later made it before installing; see the module docs).
    pub log_kept: bool,
}

/// Path of a table's directory.
pub fn table_dir(root: &Path, table_id: u64) -> PathBuf {
    root.join(format!("t{table_id}"))
}

/// Path of a segment file.
pub fn segment_path(root: &Path, table_id: u64, segment_id: u64) -> PathBuf {
    table_dir(root, table_id).join(format!("s{segment_id:016x}.bsg"))
}

impl SegmentEntry {
    /// The files this entry refers to: its segment and, if any, its delete file in force.
    pub fn files(&self, root: &Path, table_id: u64) -> Vec<PathBuf> {
        let mut out = vec![segment_path(root, table_id, self.id)];
        out.extend(self.delete_file(root, table_id));
        out
    }

    /// Its delete file in force, if deletes were persisted.
    pub fn delete_file(&self, root: &Path, table_id: u64) -> Option<PathBuf> {
        (self.deletes_gen > 0).then(|| delete_path(root, table_id, self.id, self.deletes_gen))
    }
}

/// Path of a segment's delete file of a given generation.
pub fn delete_path(root: &Path, table_id: u64, segment_id: u64, generation: u64) -> PathBuf {
    table_dir(root, table_id).join(format!("s{segment_id:016x}.{generation}.del"))
}

impl Manifest {
    /// Serialises the manifest.
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Enc::new();
        b.u64(self.version);
        b.u64(self.next_table_id);
        b.u64(self.next_segment_id);
        b.u64(self.wal_lsn);
        b.u32(self.feeds.len() as u32);
        for (name, lsn) in &self.feeds {
            b.str(name);
            b.u64(*lsn);
        }
        b.u32(self.tables.len() as u32);
        for t in &self.tables {
            b.u64(t.id);
            b.str(&t.name);
            b.u64(t.next_row_id);
            b.u32(t.schema.next_column_id());
            b.raw(t.schema.encoded_columns());
            b.u32(t.segments.len() as u32);
            for s in &t.segments {
                b.u64(s.id);
                b.u64(s.rows);
                b.u64(s.id_min);
                b.u64(s.id_max);
                b.u64(s.bytes);
                b.u64(s.deletes_gen);
                b.u64(s.deleted);
            }
        }
        b.u32(self.views.len() as u32);
        for (name, sql) in &self.views {
            b.str(name);
            b.str(sql);
        }
        let fts: Vec<(u64, &FtsEntry)> =
            self.tables.iter().filter_map(|t| t.fts.as_ref().map(|f| (t.id, f))).collect();
        b.u32(fts.len() as u32);
        for (table_id, f) in fts {
            b.u64(table_id);
            b.u64(f.dir_id);
            b.str(&f.tokenizer);
            b.u32(f.columns.len() as u32);
            for c in &f.columns {
                b.u32(*c);
            }
        }
        b.u32(u32::from(self.log_kept));
        let indexes: Vec<(u64, &IndexDef)> =
            self.tables.iter().flat_map(|t| t.indexes.iter().map(move |i| (t.id, i))).collect();
        b.u32(indexes.len() as u32);
        for (table_id, i) in indexes {
            b.u64(table_id);
            b.str(&i.name);
            b.u32(i.kind.code());
            b.u32(i.columns.len() as u32);
            for c in &i.columns {
                b.u32(*c);
            }
        }
        let defaults: Vec<(u64, &(u32, String))> =
            self.tables.iter().flat_map(|t| t.defaults.iter().map(move |d| (t.id, d))).collect();
        b.u32(defaults.len() as u32);
        for (table_id, (column, sql)) in defaults {
            b.u64(table_id);
            b.u32(*column);
            b.str(sql);
        }
        let checks: Vec<(u64, &CheckDef)> =
            self.tables.iter().flat_map(|t| t.checks.iter().map(move |c| (t.id, c))).collect();
        b.u32(checks.len() as u32);
        for (table_id, c) in checks {
            b.u64(table_id);
            b.str(&c.name);
            b.str(&c.sql);
            b.u32(c.columns.len() as u32);
            for id in &c.columns {
                b.u32(*id);
            }
        }
        let body = b.finish();
        let mut out = Vec::with_capacity(body.len() + 24);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&MANIFEST_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(body.len() as u64).to_le_bytes());
        out.extend_from_slice(&body);
        let c = crc(&out);
        out.extend_from_slice(&c.to_le_bytes());
        out
    }

    /// Parses and verifies a manifest read from `file`.
    pub fn decode(bytes: &[u8], file: &Path) -> Result<Manifest> {
        if bytes.len() < 24 {
            return Err(Error::corrupt(file, 0, "manifest too short (truncated?)"));
        }
        if &bytes[..8] != MAGIC {
            return Err(Error::corrupt(file, 0, "bad manifest magic"));
        }
        let (head, tail) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
        if crc(head) != stored {
            return Err(Error::corrupt(
                file,
                (bytes.len() - 4) as u64,
                "manifest checksum mismatch",
            ));
        }
        let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if !(MANIFEST_OLDEST_VERSION..=MANIFEST_FORMAT_VERSION).contains(&version) {
            return Err(Error::UnsupportedFormatVersion {
                file: file.to_path_buf(),
                found: version,
                supported: MANIFEST_FORMAT_VERSION,
            });
        }
        let mut d = Dec::new(&head[12..], file, 12);
        let body_len = d.usize("body length")?;
        if body_len != d.remaining() {
            return Err(d.err("manifest body length does not match the file size"));
        }
        let mut m = Manifest {
            version: d.u64("manifest version")?,
            next_table_id: d.u64("next table id")?,
            next_segment_id: d.u64("next segment id")?,
            wal_lsn: d.u64("wal lsn")?,
            feeds: Vec::new(),
            tables: Vec::new(),
            views: Vec::new(),
            log_kept: false,
        };
        let nfeeds = d.count(12, "feed count")?;
        for _ in 0..nfeeds {
            let name = d.str("feed name")?.to_string();
            m.feeds.push((name, d.u64("feed position")?));
        }
        let ntables = d.count(8, "table count")?;
        for _ in 0..ntables {
            let id = d.u64("table id")?;
            let name = d.str("table name")?.to_string();
            let next_row_id = d.u64("next row id")?;
            let next_column_id = d.u32("next column id")?;
            let (ids, schema) = crate::types::decode_columns(&mut d)?;
            let columns = ids
                .into_iter()
                .zip(schema.fields().iter())
                .map(|(id, f)| ColumnDef { id, field: f.clone() })
                .collect();
            let schema = TableSchema::from_parts(columns, next_column_id)
                .map_err(|e| d.err(format!("invalid schema for table '{name}': {e}")))?;
            let nseg = d.count(56, "segment count")?;
            let mut segments = Vec::with_capacity(nseg);
            for _ in 0..nseg {
                segments.push(SegmentEntry {
                    id: d.u64("segment id")?,
                    rows: d.u64("segment rows")?,
                    id_min: d.u64("segment id min")?,
                    id_max: d.u64("segment id max")?,
                    bytes: d.u64("segment size")?,
                    deletes_gen: d.u64("delete generation")?,
                    deleted: d.u64("deleted rows")?,
                });
            }
            m.tables.push(TableEntry {
                id,
                name,
                schema,
                next_row_id,
                segments,
                fts: None,
                indexes: Vec::new(),
                defaults: Vec::new(),
                checks: Vec::new(),
            });
        }
        if version >= 2 {
            let nviews = d.count(8, "view count")?;
            for _ in 0..nviews {
                let name = d.str("view name")?.to_string();
                let sql = d.str("view text")?.to_string();
                m.views.push((name, sql));
            }
        }
        if version >= 3 {
            let n = d.count(24, "full-text index count")?;
            for _ in 0..n {
                let table_id = d.u64("full-text table id")?;
                let dir_id = d.u64("full-text directory id")?;
                let tokenizer = d.str("full-text tokenizer")?.to_string();
                let ncols = d.count(4, "full-text column count")?;
                let mut columns = Vec::with_capacity(ncols);
                for _ in 0..ncols {
                    columns.push(d.u32("full-text column id")?);
                }
                let Some(t) = m.tables.iter_mut().find(|t| t.id == table_id && t.fts.is_none())
                else {
                    return Err(d.err(format!("full-text index of unknown table {table_id}")));
                };
                t.fts = Some(FtsEntry { dir_id, tokenizer, columns });
            }
        }
        if version >= 4 {
            let flags = d.u32("manifest flags")?;
            if flags > 1 {
                return Err(d.err(format!("unknown manifest flags {flags:#x}")));
            }
            m.log_kept = flags & 1 == 1;
        }
        if version >= 5 {
            let n = d.count(24, "index count")?;
            for _ in 0..n {
                let table_id = d.u64("index table id")?;
                let name = d.str("index name")?.to_string();
                let kind = match d.u32("index kind")? {
                    0 => IndexKind::Index,
                    1 => IndexKind::Unique,
                    2 => IndexKind::PrimaryKey,
                    k => return Err(d.err(format!("unknown index kind {k}"))),
                };
                let ncols = d.count(4, "index column count")?;
                let mut columns = Vec::with_capacity(ncols);
                for _ in 0..ncols {
                    columns.push(d.u32("index column id")?);
                }
                let Some(t) = m.tables.iter_mut().find(|t| t.id == table_id) else {
                    return Err(d.err(format!("index '{name}' of unknown table {table_id}")));
                };
                if columns.is_empty()
                    || columns.iter().any(|c| t.schema.position_of_id(*c).is_none())
                {
                    return Err(
                        d.err(format!("index '{name}' names a column table {table_id} lacks"))
                    );
                }
                t.indexes.push(IndexDef { name, kind, columns });
            }
            let n = d.count(16, "default count")?;
            for _ in 0..n {
                let table_id = d.u64("default table id")?;
                let column = d.u32("default column id")?;
                let sql = d.str("default text")?.to_string();
                let Some(t) = m.tables.iter_mut().find(|t| t.id == table_id) else {
                    return Err(d.err(format!("default of unknown table {table_id}")));
                };
                if t.schema.position_of_id(column).is_none() {
                    return Err(d.err(format!("default of unknown column {column}")));
                }
                t.defaults.push((column, sql));
            }
        }
        if version >= 6 {
            let n = d.count(24, "check count")?;
            for _ in 0..n {
                let table_id = d.u64("check table id")?;
                let name = d.str("check name")?.to_string();
                let sql = d.str("check text")?.to_string();
                let ncols = d.count(4, "check column count")?;
                let mut columns = Vec::with_capacity(ncols);
                for _ in 0..ncols {
                    columns.push(d.u32("check column id")?);
                }
                let Some(t) = m.tables.iter_mut().find(|t| t.id == table_id) else {
                    return Err(d.err(format!("check '{name}' of unknown table {table_id}")));
                };
                if columns.iter().any(|c| t.schema.position_of_id(*c).is_none()) {
                    return Err(
                        d.err(format!("check '{name}' names a column table {table_id} lacks"))
                    );
                }
                t.checks.push(CheckDef { name, sql, columns });
            }
        }
        d.finish("manifest")?;
        Ok(m)
    }

    /// Reads the manifest of the database at `root`; `Ok(None)` if there is none yet. An
    /// intact pending manifest newer than the synced one wins; the flag says it did.
    pub fn load(vfs: &dyn Vfs, root: &Path) -> Result<Option<(Manifest, bool)>> {
        let path = root.join(MANIFEST_FILE);
        if !vfs.exists(&path) {
            return Ok(None);
        }
        let bytes = vfs.read(&path)?;
        let synced = Manifest::decode(&bytes, &path)?;
        // Pending slots were never synced: after a power loss they may be torn or lost, and
        // a superseded one is stale; then the synced manifest is the truth.
        let mut best: Option<Manifest> = None;
        for name in MANIFEST_PENDING {
            let path = root.join(name);
            if !vfs.exists(&path) {
                continue;
            }
            let Ok(bytes) = vfs.read(&path) else { continue };
            let Some(m) = Manifest::decode_slot(&bytes, &path) else { continue };
            if m.version > best.as_ref().map_or(synced.version, |b| b.version) {
                best = Some(m);
            }
        }
        Ok(Some(match best {
            Some(m) => (m, true),
            None => (synced, false),
        }))
    }
}

impl Manifest {
    /// The manifest in a pending slot's bytes, if intact.
    pub(crate) fn decode_slot(bytes: &[u8], path: &Path) -> Option<Manifest> {
        frame(bytes).and_then(|f| Manifest::decode(f, path).ok())
    }
}

/// The manifest frame at the start of `bytes` (a pending slot may hold an older manifest's
/// tail after it); `None` when the bytes are too short for the length they announce.
fn frame(bytes: &[u8]) -> Option<&[u8]> {
    let len = bytes.get(12..HEADER_LEN)?;
    let body = u64::from_le_bytes(len.try_into().ok()?);
    let total = usize::try_from(body).ok()?.checked_add(HEADER_LEN + 4)?;
    bytes.get(..total)
}

/// Atomically replaces the manifest of the database at `root` with `m`.
pub fn install(vfs: &dyn Vfs, root: &Path, m: &Manifest) -> Result<()> {
    let tmp = root.join(MANIFEST_TMP);
    vfs.write_file(&tmp, &[&m.encode()], true)?;
    vfs.rename(&tmp, &root.join(MANIFEST_FILE))?;
    vfs.sync_dir(root)
}

/// The two pending-manifest slot files of one database, opened on first use and kept
/// open (see the module docs).
#[derive(Debug, Default)]
pub struct PendingSlots {
    files: [Option<Box<dyn SlotFile>>; 2],
}

impl PendingSlots {
    /// Replaces the pending manifest of the database at `root` with `m`, without syncing
    /// anything (see the module docs): survives a killed process, not a power loss. A slot
    /// whose write failed is closed, to be opened again by the next install into it.
    pub fn install(&mut self, vfs: &dyn Vfs, root: &Path, m: &Manifest) -> Result<()> {
        let i = (m.version % 2) as usize;
        let file = match &mut self.files[i] {
            Some(f) => f,
            none => none.insert(vfs.open_slot(&root.join(MANIFEST_PENDING[i]))?),
        };
        let written = file.overwrite(&m.encode());
        if written.is_err() {
            self.files[i] = None;
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use arrow_schema::{DataType, Field, Schema};

    use super::*;

    fn sample() -> Manifest {
        let s = Schema::new(vec![
            Field::new("a", DataType::Int64, false),
            Field::new("b", DataType::Utf8, true),
        ]);
        Manifest {
            version: 7,
            next_table_id: 3,
            next_segment_id: 9,
            wal_lsn: 4,
            feeds: vec![("fts".into(), 3)],
            tables: vec![TableEntry {
                id: 2,
                name: "t".into(),
                schema: TableSchema::from_user_schema(&s).unwrap(),
                next_row_id: 101,
                segments: vec![SegmentEntry {
                    id: 8,
                    rows: 100,
                    id_min: 1,
                    id_max: 100,
                    bytes: 4096,
                    deletes_gen: 2,
                    deleted: 3,
                }],
                fts: Some(FtsEntry { dir_id: 5, tokenizer: "english".into(), columns: vec![2, 1] }),
                indexes: vec![
                    IndexDef {
                        name: "t_pkey".into(),
                        kind: IndexKind::PrimaryKey,
                        columns: vec![1],
                    },
                    IndexDef { name: "t_b_a".into(), kind: IndexKind::Index, columns: vec![2, 1] },
                ],
                defaults: vec![(2, "'x' || 'y'".into())],
                checks: vec![CheckDef {
                    name: "t_a_check".into(),
                    sql: "\"a\" > 0 AND \"b\" <> ''".into(),
                    columns: vec![1, 2],
                }],
            }],
            views: vec![("v".into(), "SELECT a FROM t WHERE b = 'x'".into())],
            log_kept: true,
        }
    }

    #[test]
    fn round_trip() {
        let m = sample();
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes, Path::new("M")).unwrap(), m);
    }

    /// Re-frames the first `body_len` bytes of `m`'s current body as format `version`.
    fn older(m: &Manifest, version: u32, cut: usize) -> Vec<u8> {
        let cur = m.encode();
        let body_len = cur.len() - 24 - cut;
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(body_len as u64).to_le_bytes());
        out.extend_from_slice(&cur[20..20 + body_len]);
        let c = crc(&out);
        out.extend_from_slice(&c.to_le_bytes());
        out
    }

    #[test]
    fn older_versions_are_read() {
        let with_checks = sample();
        let mut with_keys = sample();
        for t in &mut with_keys.tables {
            t.checks.clear();
        }
        // A version-5 body is the version-6 body without the trailing check section.
        let checks = with_checks.encode().len() - with_keys.encode().len() + 4;
        assert_eq!(
            Manifest::decode(&older(&with_checks, 5, checks), Path::new("M")).unwrap(),
            with_keys
        );
        let mut m = with_keys.clone();
        for t in &mut m.tables {
            t.indexes.clear();
            t.defaults.clear();
        }
        // A version-4 body is the version-5 body without the trailing key and default
        // sections (and, from version 6, the check count after them).
        let keys = with_keys.encode().len() - m.encode().len() + 12;
        assert_eq!(Manifest::decode(&older(&with_keys, 4, keys), Path::new("M")).unwrap(), m);
        // A version-3 body is the version-4 body without the trailing flags (no promise
        // about the log).
        let mut v3 = m.clone();
        v3.log_kept = false;
        assert_eq!(Manifest::decode(&older(&m, 3, 16), Path::new("M")).unwrap(), v3);
        m.log_kept = false;
        for t in &mut m.tables {
            t.fts = None;
        }
        // A version-2 body is the version-3 body without the trailing index count; a
        // version-1 body also lacks the view count before it.
        assert_eq!(Manifest::decode(&older(&m, 2, 20), Path::new("M")).unwrap(), m);
        m.views.clear();
        assert_eq!(Manifest::decode(&older(&m, 1, 24), Path::new("M")).unwrap(), m);
        // A version from the future is refused, not guessed at.
        let mut v7 = m.encode();
        v7[8] = 7;
        let n = v7.len() - 4;
        let c = crc(&v7[..n]);
        v7[n..].copy_from_slice(&c.to_le_bytes());
        assert!(matches!(
            Manifest::decode(&v7, Path::new("M")),
            Err(Error::UnsupportedFormatVersion { found: 7, .. })
        ));
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let bytes = sample().encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x5a;
            let r = Manifest::decode(&b, Path::new("M"));
            assert!(r.as_ref().is_err_and(|e| e.is_corruption()), "byte {i}: {r:?}");
        }
        for cut in 0..bytes.len() {
            assert!(Manifest::decode(&bytes[..cut], Path::new("M")).is_err());
        }
    }

    #[test]
    fn install_replaces_atomically() {
        let fs = crate::io::MemFs::new();
        let root = Path::new("/db");
        let mut m = sample();
        install(&fs, root, &m).unwrap();
        m.version += 1;
        install(&fs, root, &m).unwrap();
        assert_eq!(Manifest::load(&fs, root).unwrap(), Some((m, false)));
        assert!(!fs.exists(&root.join(MANIFEST_TMP)));
    }

    #[test]
    fn a_pending_manifest_wins_only_when_intact_and_newer() {
        let fs = crate::io::MemFs::new();
        let root = Path::new("/db");
        let mut m = sample();
        install(&fs, root, &m).unwrap();
        let synced = m.clone();
        let slot = |v: u64| root.join(MANIFEST_PENDING[(v % 2) as usize]);
        let mut slots = PendingSlots::default();
        // A long pending manifest, then a shorter one in the other slot, then a shorter
        // one over the first slot (its tail stays behind the new frame).
        m.version += 1;
        m.views.push(("w".into(), "SELECT 1 -- a long view text to leave a tail".into()));
        slots.install(&fs, root, &m).unwrap();
        assert_eq!(Manifest::load(&fs, root).unwrap(), Some((m.clone(), true)));
        m.version += 1;
        m.views.pop();
        slots.install(&fs, root, &m).unwrap();
        assert_eq!(Manifest::load(&fs, root).unwrap(), Some((m.clone(), true)));
        m.version += 1;
        let v = m.version;
        slots.install(&fs, root, &m).unwrap();
        assert!(fs.read(&slot(v)).unwrap().len() > m.encode().len());
        assert_eq!(Manifest::load(&fs, root).unwrap(), Some((m.clone(), true)));
        // The newest slot torn (half of a next version written over it): the other slot
        // (an older pending state) is in force.
        let mut torn = m.clone();
        torn.version += 2;
        torn.next_table_id += 1;
        let bytes = torn.encode();
        fs.open_slot(&slot(v)).unwrap().overwrite(&bytes[..bytes.len() / 2]).unwrap();
        let older = Manifest::load(&fs, root).unwrap().unwrap();
        assert_eq!((older.0.version, older.1), (v - 1, true));
        // Both lost (a power loss): the synced one.
        fs.lose_unsynced_writes();
        assert_eq!(Manifest::load(&fs, root).unwrap(), Some((synced.clone(), false)));
        // Slots older than the synced manifest (superseded): ignored.
        slots.install(&fs, root, &m).unwrap();
        m.version += 1;
        install(&fs, root, &m).unwrap();
        assert_eq!(Manifest::load(&fs, root).unwrap(), Some((m, false)));
        // Garbage and short files in the slots are ignored too.
        fs.put(&slot(0), b"BSLTMAN");
        fs.put(&slot(1), &[0xff; 40]);
        assert!(!Manifest::load(&fs, root).unwrap().unwrap().1);
    }

    /// The same through the operating system's files, whose handles stay open between
    /// installs: each install lands where a fresh open reads it, a shorter manifest over a
    /// longer one included.
    #[test]
    fn kept_slot_files_write_what_a_fresh_open_reads() {
        let dir = tempfile::tempdir().unwrap();
        let (fs, root) = (crate::io::OsFs, dir.path());
        let mut m = sample();
        install(&fs, root, &m).unwrap();
        let mut slots = PendingSlots::default();
        for i in 0..6 {
            m.version += 1;
            if i % 3 == 0 {
                m.views.push((format!("v{i}"), "SELECT 1 -- a long text".repeat(i + 1)));
            } else {
                m.views.pop();
            }
            slots.install(&fs, root, &m).unwrap();
            assert_eq!(Manifest::load(&fs, root).unwrap(), Some((m.clone(), true)), "{i}");
        }
        assert!(slots.files.iter().all(Option::is_some));
    }
}
