//! The memtable's open tail: small writes (single-row inserts and updates) appended in
//! place into preallocated column memory instead of each becoming a record batch.
//!
//! Without it a one-row insert made a one-row batch (a few allocations per column) that the
//! memtable's tiered merges copied and freed again at each of their first levels. A tail
//! ([`TailArena`]) is one zeroed allocation per column (plus, for a nullable column, one
//! validity byte per row) sized for `rows_cap` rows. The memtable's newest batch is a
//! *view* of the tail's first `rows` rows; appending writes the new rows after the view's
//! end and yields a view some rows longer, while older snapshots keep the shorter view.
//! Arrow arrays of a view ([`TailArena::view`]) point into the tail's memory (no copy)
//! and keep it alive.
//!
//! # Invariants
//! - **Written bytes never change.** A row slot is written once, by the writer that
//!   claimed it: [`TailArena::append`] starts only when every earlier claim has finished
//!   writing (`written` equals the view's row count), then moves `claimed` from that count
//!   to the new one with a compare-and-swap *before* writing, and publishes `written`
//!   after. So two writers (or a writer and a rolled-back transaction's leftovers) never
//!   write the same slot, and a view whose row count is not `written` cannot append at
//!   all (the memtable starts a new tail then).
//! - **Views cover written rows only.** Arrays are built for a view's `rows`, all of which
//!   were written before the view existed; the bytes after them, which later appends
//!   write, are never part of any Arrow buffer or slice. Publication of a view to readers
//!   goes through the store's snapshot lock, which orders the writes before the reads.
//!
//! What it must not do: hold columns other than fixed-width values, vectors, booleans and
//! byte strings (the memtable keeps ordinary batches for tables with other types), or
//! decide when a tail is used (the memtable does).

use std::alloc::Layout;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::cast::AsArray;
use arrow_array::types::Float32Type;
use arrow_array::{Array, ArrayRef, RecordBatch, downcast_primitive_array, make_array};
use arrow_buffer::{BooleanBuffer, Buffer, NullBuffer};
use arrow_data::ArrayData;
use arrow_schema::{DataType, SchemaRef};

use crate::encoding::Cell;

/// Most rows a [`TailSize::First`] tail holds.
pub const TAIL_ROWS: usize = 256;
/// Most rows a [`TailSize::Grown`] tail holds.
pub const GROWN_TAIL_ROWS: usize = 4096;
/// Fewest rows worth a tail (wider rows are batched as they come).
const MIN_TAIL_ROWS: usize = 16;
/// Budget for the fixed-width part of a tail's rows (first, grown).
const TAIL_FIXED_BYTES: usize = 512 * 1024;
const GROWN_TAIL_FIXED_BYTES: usize = 8 * 1024 * 1024;
/// Smallest and largest byte-string capacity per column (the largest: first, grown).
const MIN_STRING_BYTES: usize = 16 * 1024;
const MAX_STRING_BYTES: usize = 1024 * 1024;
const GROWN_MAX_STRING_BYTES: usize = 8 * 1024 * 1024;

/// How large a new tail is.
///
/// A table's first tail is small, so a table written a few rows at a time holds little
/// memory. A tail started right after a *full* tail whose rows arrived in `_id` order (a
/// run of appends) is sized for [`GROWN_TAIL_ROWS`] rows: every closed tail is copied by
/// the memtable's tiered merges, and with 384-d vectors the merges of 256-row tails were
/// the largest part of a long run of single-row inserts (each vector copied about four
/// times by 20,000 rows, nearly all of it first-touch page faults of the merge output).
/// Its memory is only touched as rows arrive (zeroed allocations of this size are fresh
/// pages, or cleared reused ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TailSize {
    /// At most [`TAIL_ROWS`] rows within 512 KiB of fixed-width values.
    First,
    /// At most [`GROWN_TAIL_ROWS`] rows within 8 MiB of fixed-width values.
    Grown,
}

/// Alignment of every region. Arrow wants the value type's (at most 16, for `i128`
/// decimals); no kernel here needs more. At 16 — the system allocator's own alignment —
/// a zeroed region comes from `calloc`, which clears only reused memory (fresh pages are
/// zero already), instead of an aligned allocation always cleared with `memset`: starting
/// tails fell from 1.9 % to 1.1 % of the samples of `memory-bench --writes-only 20000`.
const ALIGN: usize = 16;
const _: () =
    assert!(ALIGN >= std::mem::align_of::<i128>() && ALIGN >= std::mem::align_of::<u64>());

/// Regions of at least this many bytes are mapped from the system (anonymous memory,
/// zero and page aligned) instead of allocated, and their pages are populated ahead of
/// the writes (see [`Region::write`]).
const MAP_MIN_BYTES: usize = 256 * 1024;
/// How far ahead of a write a mapped region's pages are populated at once.
const POPULATE_BYTES: usize = 256 * 1024;

/// Most bytes of earlier tails' data the process keeps in [`POOL`] (mapped regions
/// whose tails were dropped, resident, for the next tails to reuse).
const POOL_MAX_BYTES: usize = 32 * 1024 * 1024;
/// Most regions kept in [`POOL`].
const POOL_MAX_REGIONS: usize = 16;

/// A mapping whose tail was dropped: its first `dirty` bytes may hold that tail's data;
/// the rest of it is untouched, zero pages.
struct Pooled {
    map: memmap2::MmapMut,
    dirty: usize,
}

/// Mapped regions of dropped tails, reused by new tails of any store of the process.
///
/// A fresh page costs far more than clearing a resident one: on the 2-core virtual
/// machine of the benchmarks a first touch of anonymous memory took 4.2 µs per 4 KiB page
/// (271 µs per 256 KiB), clearing the same 256 KiB resident 14 µs — and a concurrent
/// memory write burst (`memory-bench` W4, a fresh store) spent ~8 % of its time
/// populating tail pages. A memtable's tails are dropped when it is flushed (or its store
/// closes), so the next memtable of a long-running process reuses them, clearing each
/// chunk as it populates it (see [`Region::populate`]). Bounded by [`POOL_MAX_BYTES`] of
/// possibly-dirty (resident) memory and [`POOL_MAX_REGIONS`] regions: the newest dropped
/// regions are kept, the oldest unmapped to make room.
static POOL: parking_lot::Mutex<Vec<Pooled>> = parking_lot::Mutex::new(Vec::new());

/// Where a region's memory comes from.
enum Backing {
    /// `alloc_zeroed` with this layout (small regions).
    Heap(Layout),
    /// An anonymous mapping (large regions), fresh or from [`POOL`].
    Map(memmap2::MmapMut),
    /// The mapping went back to [`POOL`] (only while dropping).
    Pooled,
}

/// One zeroed region of memory, written only through its raw pointer.
///
/// A large region is an anonymous mapping whose pages are populated a chunk at a time
/// ahead of the writes (`MADV_POPULATE_WRITE`, one system call per [`POPULATE_BYTES`])
/// rather than faulted in one page per first write: a growing tail's vector column would
/// otherwise take a page fault every few single-row inserts of large vectors. Where the
/// advice is not supported (kernels before 5.14, other systems) the pages fault in as
/// before. Measurements: `docs/design/write-path.md`, *Tail regions*.
struct Region {
    ptr: NonNull<u8>,
    len: usize,
    backing: Backing,
    /// Bytes from the start whose pages were populated — and, in a reused mapping, cleared
    /// (mapped regions; only the writer holding the tail's claim moves it, so relaxed
    /// ordering suffices). Every byte below it is zero or was written by this tail.
    populated: AtomicUsize,
    /// Bytes from the start that may hold an earlier tail's data (a mapping reused from
    /// [`POOL`]; 0 otherwise). Cleared chunk by chunk as `populated` passes them.
    dirty: usize,
}

impl Region {
    /// A region of `len` bytes reading as zero: heap memory, a fresh mapping, or a mapping
    /// reused from [`POOL`] whose first chunk is cleared here (the rest as it is populated).
    fn zeroed(len: usize) -> Option<Self> {
        let len = len.max(1);
        if len >= MAP_MIN_BYTES {
            // Best fit among pooled mappings at most twice the size asked for.
            let reused = {
                let mut pool = POOL.lock();
                let fit = pool
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.map.len() >= len && p.map.len() / 2 <= len)
                    .min_by_key(|(_, p)| p.map.len())
                    .map(|(i, _)| i);
                fit.map(|i| pool.swap_remove(i))
            };
            let (mut map, dirty) = match reused {
                Some(p) => (p.map, p.dirty),
                None => match memmap2::MmapOptions::new().len(len).map_anon() {
                    Ok(map) => (map, 0),
                    Err(_) => return Self::heap(len),
                },
            };
            let Some(ptr) = NonNull::new(map.as_mut_ptr()) else { return Self::heap(len) };
            let region = Self { ptr, len, backing: Backing::Map(map), populated: 0.into(), dirty };
            if dirty > 0 {
                // Views may read a column's first bytes before anything is written (a
                // byte-string column's first offset): they must read zero from the start.
                region.populate(1);
            }
            return Some(region);
        }
        Self::heap(len)
    }

    /// A zeroed heap region of `len` (at least 1) bytes.
    fn heap(len: usize) -> Option<Self> {
        let layout = Layout::from_size_align(len, ALIGN).ok()?;
        // SAFETY: the layout's size is at least 1.
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        match NonNull::new(raw) {
            Some(ptr) => Some(Self {
                ptr,
                len,
                backing: Backing::Heap(layout),
                populated: len.into(),
                dirty: 0,
            }),
            None => std::alloc::handle_alloc_error(layout),
        }
    }

    /// Populates the pages of a mapped region up to at least byte `end` (and up to
    /// [`POPULATE_BYTES`] beyond the bytes populated so far).
    fn populate(&self, end: usize) {
        let from = self.populated.load(Ordering::Relaxed);
        if end <= from {
            return;
        }
        let to = end.max(from + POPULATE_BYTES).min(self.len);
        // An earlier tail's bytes in this chunk are cleared; past them the pages are fresh.
        let cleared = to.min(self.dirty).max(from);
        if cleared > from {
            // SAFETY: `from..cleared` is within the region and past `populated`: nothing
            // of this tail was written there and no view covers it.
            unsafe { self.ptr.as_ptr().add(from).write_bytes(0, cleared - from) };
        }
        #[cfg(target_os = "linux")]
        if let Backing::Map(map) = &self.backing
            && to > cleared
        {
            // Only advice: on failure the pages fault in on first write.
            let _ = map.advise_range(memmap2::Advice::PopulateWrite, cleared, to - cleared);
        }
        self.populated.store(to, Ordering::Relaxed);
    }

    /// Copies `bytes` to byte offset `at`.
    ///
    /// # Safety
    /// `at + bytes.len()` is within the region, and no Arrow buffer or slice covers those
    /// bytes (the caller claimed the rows they belong to and no view of them exists yet).
    unsafe fn write(&self, at: usize, bytes: &[u8]) {
        debug_assert!(at + bytes.len() <= self.len);
        self.populate(at + bytes.len());
        // SAFETY: in bounds (caller), and `bytes` cannot overlap a region nobody else
        // references.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(at), bytes.len())
        }
    }

    /// The first `len` bytes.
    ///
    /// # Safety
    /// Those bytes were written, or are the initial zeroes of a fresh region or of the
    /// first chunk of a reused one (a reused mapping reads zero only below `populated`),
    /// and are never written again.
    unsafe fn prefix(&self, len: usize) -> &[u8] {
        debug_assert!(len <= self.len);
        // SAFETY: in bounds and immutable from here on (caller); the memory lives as long
        // as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.backing, Backing::Pooled) {
            // SAFETY: allocated in `heap` with this layout, freed once.
            Backing::Heap(layout) => unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) },
            Backing::Map(map) => {
                let dirty = self.dirty.max(self.populated.load(Ordering::Relaxed));
                if dirty > POOL_MAX_BYTES {
                    return; // unmapped as `map` drops
                }
                // The newest regions are kept: the oldest make room (unmapped as they drop,
                // after the lock is released).
                let mut evicted = Vec::new();
                let mut pool = POOL.lock();
                pool.push(Pooled { map, dirty });
                let mut held: usize = pool.iter().map(|p| p.dirty).sum();
                while pool.len() > POOL_MAX_REGIONS || held > POOL_MAX_BYTES {
                    let old = pool.remove(0);
                    held -= old.dirty;
                    evicted.push(old);
                }
                drop(pool);
                drop(evicted);
            }
            Backing::Pooled => {}
        }
    }
}

// SAFETY: a region is plain memory (heap or an anonymous mapping). Concurrent access
// follows the module invariants: bytes are written once by the single writer that claimed
// them, before any reader can reach them, and are only read afterwards.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// How one column is laid out in a tail.
enum ColumnLayout {
    /// `width` bytes per row (integers, floats, decimals, temporal types).
    Fixed { width: usize },
    /// `FixedSizeList<Float32, dim>` without null components: `4 * dim` bytes per row.
    Vector { dim: usize },
    /// One byte per row (0 or 1), packed into a bitmap when a view is built.
    Bool,
    /// `i32` offsets (`rows_cap + 1`) and a value region of `values_cap` bytes.
    Bytes { offsets: Region, values_cap: usize },
}

struct Column {
    data_type: DataType,
    layout: ColumnLayout,
    data: Region,
    /// One byte per row, 1 = valid; only for nullable columns.
    valid: Option<Region>,
}

/// Preallocated memory for up to `rows_cap` rows of one table schema (see the module docs).
pub struct TailArena {
    schema: SchemaRef,
    columns: Vec<Column>,
    rows_cap: usize,
    /// Rows claimed by appends so far.
    claimed: AtomicUsize,
    /// Rows written: every row below it is complete and never changes. An append may
    /// only start from here, so it never runs while another is writing.
    written: AtomicUsize,
}

impl std::fmt::Debug for TailArena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TailArena")
            .field("rows_cap", &self.rows_cap)
            .field("claimed", &self.claimed.load(Ordering::Relaxed))
            .field("written", &self.written.load(Ordering::Relaxed))
            .finish()
    }
}

/// Bytes of the values of a byte-string column (`None`: not a byte string).
fn string_bytes(a: &dyn Array) -> Option<usize> {
    let offs = match a.data_type() {
        DataType::Utf8 => a.as_string::<i32>().value_offsets(),
        DataType::Binary => a.as_binary::<i32>().value_offsets(),
        _ => return None,
    };
    Some((offs[offs.len() - 1] - offs[0]) as usize)
}

impl TailArena {
    /// A tail for `batch`'s schema holding `batch` as its first rows, or `None` when the
    /// schema has a column a tail cannot hold, the rows are too wide for a useful tail, or
    /// `batch` does not fit.
    pub fn start(batch: &RecordBatch, size: TailSize) -> Option<Arc<Self>> {
        let schema = batch.schema();
        let mut fixed = 0usize;
        for f in schema.fields() {
            fixed += match f.data_type() {
                DataType::Boolean => 1,
                DataType::Utf8 | DataType::Binary => 4,
                DataType::FixedSizeList(c, d) if c.data_type() == &DataType::Float32 => {
                    4 * usize::try_from(*d).ok()?
                }
                dt if dt.is_primitive() => dt.primitive_width()?,
                _ => return None,
            } + usize::from(f.is_nullable());
        }
        let (fixed_bytes, max_rows, max_string) = match size {
            TailSize::First => (TAIL_FIXED_BYTES, TAIL_ROWS, MAX_STRING_BYTES),
            TailSize::Grown => (GROWN_TAIL_FIXED_BYTES, GROWN_TAIL_ROWS, GROWN_MAX_STRING_BYTES),
        };
        let rows_cap = (fixed_bytes / fixed.max(1)).min(max_rows);
        if rows_cap < MIN_TAIL_ROWS.max(batch.num_rows()) {
            return None;
        }
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (f, a) in schema.fields().iter().zip(batch.columns()) {
            let dt = f.data_type().clone();
            let (layout, data) = match &dt {
                DataType::Boolean => (ColumnLayout::Bool, Region::zeroed(rows_cap)?),
                DataType::Utf8 | DataType::Binary => {
                    let used = string_bytes(a.as_ref())?;
                    let want = used.saturating_mul(2 * rows_cap) / batch.num_rows().max(1);
                    let values_cap = want.clamp(MIN_STRING_BYTES, max_string);
                    let offsets = Region::zeroed(4 * (rows_cap + 1))?;
                    (ColumnLayout::Bytes { offsets, values_cap }, Region::zeroed(values_cap)?)
                }
                DataType::FixedSizeList(_, d) => {
                    let dim = usize::try_from(*d).ok()?;
                    (ColumnLayout::Vector { dim }, Region::zeroed(4 * dim * rows_cap)?)
                }
                dt => {
                    let width = dt.primitive_width()?;
                    (ColumnLayout::Fixed { width }, Region::zeroed(width * rows_cap)?)
                }
            };
            let valid = if f.is_nullable() { Some(Region::zeroed(rows_cap)?) } else { None };
            columns.push(Column { data_type: dt, layout, data, valid });
        }
        let arena = Arc::new(Self {
            schema,
            columns,
            rows_cap,
            claimed: AtomicUsize::new(0),
            written: AtomicUsize::new(0),
        });
        arena.append(0, batch).then_some(arena)
    }

    /// Rows this tail can hold.
    pub fn rows_cap(&self) -> usize {
        self.rows_cap
    }

    /// Appends `batch` after the first `rows` rows; false (nothing written) when another
    /// append claimed rows past `rows` (or is still writing), the rows do not fit, or a
    /// column does not match the tail's layout.
    pub fn append(&self, rows: usize, batch: &RecordBatch) -> bool {
        let n = batch.num_rows();
        if n == 0
            || self.written.load(Ordering::Acquire) != rows
            || rows + n > self.rows_cap
            || batch.num_columns() != self.columns.len()
            || !self.fits(rows, batch)
        {
            return false;
        }
        if self
            .claimed
            .compare_exchange(rows, rows + n, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        for (c, a) in self.columns.iter().zip(batch.columns()) {
            // SAFETY: rows `rows..rows + n` were claimed above by this call alone, so no
            // view covers them; `fits` checked every bound.
            unsafe { c.write(rows, a.as_ref()) };
        }
        self.written.store(rows + n, Ordering::Release);
        true
    }

    /// Whether `batch` can be written after `rows` rows: every column of the expected
    /// type, nulls only where the column is nullable, vectors without null components,
    /// strings within the value capacity.
    fn fits(&self, rows: usize, batch: &RecordBatch) -> bool {
        self.columns.iter().zip(batch.columns()).all(|(c, a)| {
            if a.data_type() != &c.data_type || (c.valid.is_none() && a.null_count() > 0) {
                return false;
            }
            match &c.layout {
                ColumnLayout::Vector { .. } => {
                    a.as_fixed_size_list().values().null_count() == 0
                        && a.as_fixed_size_list().values().data_type() == &DataType::Float32
                }
                ColumnLayout::Bytes { values_cap, .. } => {
                    // SAFETY: `append` checked `rows == written`: offset `rows` ends the
                    // last written row (or is the initial zero).
                    let end = unsafe { c.offset(rows) } as usize;
                    string_bytes(a.as_ref()).is_some_and(|b| end + b <= *values_cap)
                }
                ColumnLayout::Fixed { .. } => downcast_primitive_array!(a => true, _ => false),
                ColumnLayout::Bool => true,
            }
        })
    }

    /// The first `rows` rows as a record batch whose arrays point into this tail.
    pub fn view(self: &Arc<Self>, rows: usize) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let rows = rows.min(self.written.load(Ordering::Acquire));
        let columns =
            self.columns.iter().map(|c| c.array(self, rows)).collect::<Result<Vec<_>, _>>()?;
        RecordBatch::try_new_with_options(
            self.schema.clone(),
            columns,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
    }

    /// The `_id`s (column 0, `UInt64`) of the first `rows` rows, without building arrays.
    pub fn ids(&self, rows: usize) -> &[u64] {
        let rows = rows.min(self.written.load(Ordering::Acquire));
        let c = &self.columns[0];
        if c.data_type != DataType::UInt64 {
            return &[];
        }
        // SAFETY: the first `rows` rows are written and immutable; the region is aligned
        // to `ALIGN` (≥ 8) and holds `8 * rows_cap` bytes, so it is a valid `[u64]` prefix.
        unsafe { std::slice::from_raw_parts(c.data.ptr.as_ptr().cast::<u64>(), rows) }
    }
    /// The value of column `col` at `row`, read in place; `None` when the row is not
    /// written or the column's type is not one [`Cell`] covers (vectors, temporal types
    /// other than `Date32` and timestamps).
    pub fn cell(&self, col: usize, row: usize) -> Option<Cell<'_>> {
        if row >= self.written.load(Ordering::Acquire) {
            return None;
        }
        let c = self.columns.get(col)?;
        if !crate::encoding::reads_cells(&c.data_type) {
            return None;
        }
        if let Some(v) = &c.valid {
            // SAFETY: rows below `written` are written and immutable.
            if unsafe { v.prefix(row + 1) }[row] == 0 {
                return Some(Cell::Null);
            }
        }
        Some(match &c.layout {
            ColumnLayout::Fixed { width } => {
                // SAFETY: as above.
                let all = unsafe { c.data.prefix((row + 1) * width) };
                let b = &all[row * width..];
                let le = |n: usize| {
                    let mut w = [0u8; 16];
                    w[..n].copy_from_slice(&b[..n]);
                    w
                };
                let int = |n: usize| {
                    // Sign-extend an n-byte little-endian integer.
                    let v = i128::from_le_bytes(le(n));
                    let shift = 128 - 8 * n as u32;
                    (v << shift) >> shift
                };
                match &c.data_type {
                    DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                        Cell::UInt(u128::from_le_bytes(le(*width)) as u64)
                    }
                    DataType::Float32 => Cell::F32(f32::from_le_bytes(le(4)[..4].try_into().ok()?)),
                    DataType::Float64 => Cell::F64(f64::from_le_bytes(le(8)[..8].try_into().ok()?)),
                    DataType::Decimal128(_, _) => Cell::Decimal(int(16)),
                    _ => Cell::Int(int(*width) as i64),
                }
            }
            ColumnLayout::Bool => {
                // SAFETY: as above.
                Cell::Bool(unsafe { c.data.prefix(row + 1) }[row] != 0)
            }
            ColumnLayout::Bytes { .. } => {
                // SAFETY: offsets up to `row + 1 <= written` are written.
                let (lo, hi) = unsafe { (c.offset(row) as usize, c.offset(row + 1) as usize) };
                // SAFETY: the values of written rows end at offset `written`, past `hi`.
                let bytes = &unsafe { c.data.prefix(hi) }[lo..];
                match c.data_type {
                    DataType::Utf8 => Cell::Str(std::str::from_utf8(bytes).ok()?),
                    _ => Cell::Bytes(bytes),
                }
            }
            ColumnLayout::Vector { .. } => return None,
        })
    }
}

impl Column {
    /// Offset `i` of a byte-string column.
    ///
    /// # Safety
    /// Offset `i` is written (it ends row `i - 1`) or is offset 0.
    unsafe fn offset(&self, i: usize) -> i32 {
        let ColumnLayout::Bytes { offsets, .. } = &self.layout else { return 0 };
        // SAFETY: offsets holds `rows_cap + 1` aligned `i32`s and `i <= rows_cap` (callers
        // pass a row count); written offsets never change.
        unsafe { offsets.ptr.as_ptr().cast::<i32>().add(i).read() }
    }

    /// Writes `a`'s rows as rows `at..at + a.len()`.
    ///
    /// # Safety
    /// Those rows are claimed by the caller, within capacity, and `a` passed `fits`.
    unsafe fn write(&self, at: usize, a: &dyn Array) {
        let n = a.len();
        if let Some(valid) = &self.valid {
            for i in 0..n {
                // SAFETY: rows claimed (caller), `at + n <= rows_cap`.
                unsafe { valid.write(at + i, &[u8::from(a.is_valid(i))]) };
            }
        }
        match &self.layout {
            ColumnLayout::Fixed { width } => {
                let bytes = downcast_primitive_array!(
                    a => a.values().inner().as_slice(),
                    _ => return,
                );
                // SAFETY: claimed rows, in bounds (caller).
                unsafe { self.data.write(at * width, bytes) };
            }
            ColumnLayout::Vector { dim } => {
                let values = a.as_fixed_size_list().values().as_primitive::<Float32Type>();
                let bytes = values.values().inner().as_slice();
                let bytes = &bytes[..(4 * dim * n).min(bytes.len())];
                // SAFETY: claimed rows, in bounds (caller).
                unsafe { self.data.write(at * 4 * dim, bytes) };
            }
            ColumnLayout::Bool => {
                let b = a.as_boolean();
                for i in 0..n {
                    // SAFETY: claimed rows, in bounds (caller).
                    unsafe { self.data.write(at + i, &[u8::from(b.value(i))]) };
                }
            }
            ColumnLayout::Bytes { offsets, .. } => {
                let (offs, values) = match a.data_type() {
                    DataType::Utf8 => {
                        let s = a.as_string::<i32>();
                        (s.value_offsets(), s.values().as_slice())
                    }
                    _ => {
                        let s = a.as_binary::<i32>();
                        (s.value_offsets(), s.values().as_slice())
                    }
                };
                // SAFETY: offset `at` ends the rows before the claimed ones.
                let base = unsafe { self.offset(at) };
                let first = offs[0];
                let used = &values[first as usize..offs[n] as usize];
                // SAFETY: claimed rows; `fits` checked `base + used.len() <= values_cap`
                // and `at + n <= rows_cap` (offsets `at + 1..=at + n`).
                unsafe { self.data.write(base as usize, used) };
                for (i, o) in offs[1..].iter().enumerate() {
                    let end = base + (o - first);
                    // SAFETY: as above.
                    unsafe { offsets.write(4 * (at + 1 + i), &end.to_le_bytes()) };
                }
            }
        }
    }

    /// Arrow buffer over the first `len` bytes of `region`, owned by `arena`.
    fn buffer(arena: &Arc<TailArena>, region: &Region, len: usize) -> Buffer {
        let owner: Arc<dyn arrow_buffer::alloc::Allocation> = arena.clone();
        // SAFETY: `region` belongs to `arena`, which the buffer keeps alive; its first
        // `len` bytes are written rows (callers pass a view's extent) and never change.
        unsafe { Buffer::from_custom_allocation(region.ptr, len, owner) }
    }

    /// The first `rows` rows of this column as an array pointing into the tail.
    fn array(
        &self,
        arena: &Arc<TailArena>,
        rows: usize,
    ) -> Result<ArrayRef, arrow_schema::ArrowError> {
        let nulls = self.valid.as_ref().and_then(|v| {
            // SAFETY: the first `rows` validity bytes are written and immutable.
            let bytes = unsafe { v.prefix(rows) };
            bytes
                .contains(&0)
                .then(|| NullBuffer::new(BooleanBuffer::collect_bool(rows, |i| bytes[i] != 0)))
        });
        let data = match &self.layout {
            ColumnLayout::Fixed { width } => ArrayData::builder(self.data_type.clone())
                .len(rows)
                .add_buffer(Self::buffer(arena, &self.data, width * rows))
                .nulls(nulls)
                .build()?,
            ColumnLayout::Vector { dim } => {
                let child = ArrayData::builder(DataType::Float32)
                    .len(dim * rows)
                    .add_buffer(Self::buffer(arena, &self.data, 4 * dim * rows))
                    .build()?;
                ArrayData::builder(self.data_type.clone())
                    .len(rows)
                    .child_data(vec![child])
                    .nulls(nulls)
                    .build()?
            }
            ColumnLayout::Bool => {
                // SAFETY: the first `rows` bytes are written and immutable.
                let bytes = unsafe { self.data.prefix(rows) };
                let bits = BooleanBuffer::collect_bool(rows, |i| bytes[i] != 0);
                ArrayData::builder(DataType::Boolean)
                    .len(rows)
                    .add_buffer(bits.into_inner())
                    .nulls(nulls)
                    .build()?
            }
            ColumnLayout::Bytes { offsets, .. } => {
                // SAFETY: offset `rows` ends the last written row.
                let end = unsafe { self.offset(rows) } as usize;
                let builder = ArrayData::builder(self.data_type.clone())
                    .len(rows)
                    .add_buffer(Self::buffer(arena, offsets, 4 * (rows + 1)))
                    .add_buffer(Self::buffer(arena, &self.data, end))
                    .nulls(nulls);
                // SAFETY: the offsets start at 0 and never decrease (each append continues
                // from the previous end with the non-decreasing offsets of a valid array),
                // the last is `end`, the value buffer holds `end` bytes, and every value
                // was copied whole from an array of the same type, so UTF-8 values stay
                // valid and split at the same boundaries.
                unsafe { builder.build_unchecked() }
            }
        };
        Ok(make_array(data))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_regions_are_mapped_and_read_back_what_was_written_across_populated_chunks() {
        let small = Region::zeroed(MAP_MIN_BYTES - 1).expect("small");
        assert!(matches!(small.backing, Backing::Heap(_)));
        let len = 3 * POPULATE_BYTES + MAP_MIN_BYTES + 13;
        let big = Region::zeroed(len).expect("big");
        assert!(matches!(big.backing, Backing::Map(_)));
        assert_eq!(big.ptr.as_ptr() as usize % ALIGN, 0);
        // Nothing written yet: a fresh mapping is zero throughout, one reused from the pool
        // (another test's) below `populated`.
        let zero = if big.dirty == 0 { len } else { big.populated.load(Ordering::Relaxed) };
        // SAFETY: as just said, those bytes are initial zeroes.
        assert!(unsafe { big.prefix(zero) }.iter().all(|b| *b == 0));
        // Pieces of odd lengths, some crossing the populated boundary, one larger than a
        // populate step, the last ending at the region's end.
        let mut expect = vec![0u8; len];
        let mut at = 0;
        for (k, piece) in
            [1usize, 4095, 1536 * 3, POPULATE_BYTES + 7, 77, 1536 * 170].iter().enumerate()
        {
            let bytes: Vec<u8> = (0..*piece).map(|i| (i * 31 + k * 7 + 1) as u8).collect();
            // SAFETY: in bounds, written once, no view covers it.
            unsafe { big.write(at, &bytes) };
            expect[at..at + piece].copy_from_slice(&bytes);
            at += piece;
            assert!(big.populated.load(Ordering::Relaxed) >= at);
        }
        let rest = len - at;
        let bytes = vec![0xA5u8; rest];
        // SAFETY: as above.
        unsafe { big.write(at, &bytes) };
        expect[at..].copy_from_slice(&bytes);
        assert_eq!(big.populated.load(Ordering::Relaxed), len, "never past the end");
        // SAFETY: every byte written once.
        assert_eq!(unsafe { big.prefix(len) }, &expect[..]);
    }

    #[test]
    fn a_dropped_mapping_is_reused_cleared_chunk_by_chunk_and_reads_back_what_was_written() {
        // An odd size no other test asks for (the pool is shared by the whole process).
        let len = 5 * POPULATE_BYTES + 4099;
        let mut reused = false;
        for _ in 0..20 {
            let old = Region::zeroed(len).expect("old");
            let ones = vec![0xFFu8; len];
            // SAFETY: in bounds, written once, no view covers it.
            unsafe { old.write(0, &ones) };
            let at = old.ptr;
            drop(old);
            let new = Region::zeroed(len).expect("new");
            if new.ptr != at || new.dirty == 0 {
                // Another test took it from the pool first (or this is a fresh mapping at
                // the same address).
                continue;
            }
            reused = true;
            assert_eq!(new.dirty, len, "all of it held the old tail's data");
            let first = new.populated.load(Ordering::Relaxed);
            assert_eq!(first, POPULATE_BYTES, "the first chunk is cleared on reuse");
            // SAFETY: below `populated` of a reused mapping: zero, nothing written yet.
            assert!(unsafe { new.prefix(first) }.iter().all(|b| *b == 0));
            // Writes crossing chunk boundaries: each chunk is cleared before it is written,
            // so what is read back is what this region wrote (zero where it wrote zero).
            let mut expect = vec![0u8; len];
            let mut at = 0;
            for (k, piece) in [3usize, POPULATE_BYTES, 1536 * 200, 9].iter().enumerate() {
                let bytes: Vec<u8> = (0..*piece).map(|i| ((i * 13 + k) % 7) as u8).collect();
                // SAFETY: in bounds, written once, no view covers it.
                unsafe { new.write(at, &bytes) };
                expect[at..at + piece].copy_from_slice(&bytes);
                at += piece;
            }
            let populated = new.populated.load(Ordering::Relaxed);
            assert!(populated >= at && populated < len);
            // SAFETY: written, or cleared below `populated` and never written.
            assert_eq!(unsafe { new.prefix(populated) }, &expect[..populated]);
            break;
        }
        assert!(reused, "a dropped mapping of the same size was reused");
    }

    #[test]
    fn the_pool_keeps_at_most_its_bound_of_regions_and_dirty_bytes() {
        // More dropped regions (each dirtied past one chunk) than the pool may keep; other
        // tests share the pool, but its bounds hold at every moment.
        for k in 0..POOL_MAX_REGIONS + 8 {
            let len = 7 * POPULATE_BYTES + 4096 * (k + 3);
            let r = Region::zeroed(len).expect("region");
            // SAFETY: in bounds, written once, no view covers it.
            unsafe { r.write(0, &vec![1u8; POPULATE_BYTES + 1]) };
            assert!(r.populated.load(Ordering::Relaxed) > POPULATE_BYTES);
        }
        let pool = POOL.lock();
        assert!(pool.len() <= POOL_MAX_REGIONS, "{} regions kept", pool.len());
        let held: usize = pool.iter().map(|p| p.dirty).sum();
        assert!(held <= POOL_MAX_BYTES, "{held} dirty bytes kept");
        assert!(pool.iter().all(|p| p.dirty <= p.map.len()));
    }
}
