//! Framed block compression: a block's sections cut into frames of at most [`FRAME_RAW`]
//! bytes, each stored zstd-compressed (never a section's first frame), in the decimal form
//! ([`decimal`]) or as it is, with
//! an index, so that a reader can restore only the frames holding the rows it needs (a
//! `LIMIT 100` after a reopen restores a few kilobytes per column instead of whole 64K-row
//! blocks).
//!
//! # Stored layout (compression tag 2)
//!
//! ```text
//! frame_raw (u32 LE)     largest raw bytes per frame; frames never cross a section
//! frames    (u32 LE)     number of frames (derived from the section lengths: checked)
//! index CRC (u32 LE)     CRC-32C of frame_raw, frames, head_raw and the entries
//! head_raw  (u32 LE)     raw bytes of a section's first frame (0: frame_raw; format ≤ 2)
//! per frame: length (u32 LE; bit 31 set: zstd, bit 30 set: decimal form, neither: stored
//!            as it is), CRC-32C (u32 LE) of its stored bytes
//! the frames' bytes, back to back in section order
//! ```
//!
//! The frames of section `s` start at `pos(s)`, the section's 64-aligned offset in the raw
//! block, and run back to back to its end: the first holds `head_raw` bytes, each next one
//! twice as many as the one before, up to `frame_raw` (so a read of a section's first rows
//! restores a few kilobytes, a whole read few frames); the last is cut at the section's end.
//! The zero padding between sections is not stored: a restored block starts zeroed.
//! Segment format version 2 wrote `head_raw` 0 (every frame `frame_raw` bytes; the word
//! was not covered by the index CRC then) and no decimal frames; version 3 writes both.
//!
//! What this module must not do: trust an index it has not checked (every error is a
//! `String` the segment reader turns into [`crate::Error::Corrupt`] with file and offset), or
//! know about encodings (which bytes a window needs is [`crate::encoding::window_bytes`]).

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};

mod decimal;

use crate::codec::align64;

/// Largest raw bytes per frame written by this version.
pub const FRAME_RAW: usize = 32 * 1024;
/// Raw bytes of a section's first frame written by this version.
pub const HEAD_RAW: usize = 4 * 1024;
const HEADER: usize = 16;
const ENTRY: usize = 8;
const ZSTD: u32 = 1 << 31;
/// Entry flag of a frame stored in the decimal form (see [`decimal`]); format version 3.
const DECIMAL: u32 = 1 << 30;
/// Frame length bits of an index entry.
const LEN_MASK: u32 = DECIMAL - 1;

/// The raw byte range of each frame of a block with these sections, in frame order: each
/// section's frames hold `head_raw` bytes, then twice as many each, up to `frame_raw` (`0`
/// for `head_raw`: all `frame_raw`).
pub fn frame_ranges(
    sections: &[u64],
    frame_raw: usize,
    head_raw: usize,
) -> Option<Vec<Range<usize>>> {
    let head = if head_raw == 0 { frame_raw } else { head_raw };
    if frame_raw == 0 || head > frame_raw {
        return None;
    }
    let mut out = Vec::new();
    let mut pos = 0usize;
    for &len in sections {
        let len = usize::try_from(len).ok()?;
        let end = pos.checked_add(len)?;
        let mut at = pos;
        let mut size = head;
        while at < end {
            let next = at.saturating_add(size).min(end);
            out.push(at..next);
            at = next;
            size = size.saturating_mul(2).min(frame_raw);
        }
        pos = align64(end);
    }
    Some(out)
}

/// Blocks at least this large that do not compress are still framed, every frame as it is
/// ([`as_is`]), when their bytes can be used in place.
pub const AS_IS_AT: usize = 16 * 1024;

/// `raw` (a block with these sections) in frames all stored as they are: no smaller, but a
/// read of a few rows checks only its frames' checksums instead of the whole block's, and a
/// one-section block's stored frames are its raw bytes, back to back ([`Index::in_place`]).
pub fn as_is(raw: &[u8], sections: &[u64]) -> Option<Vec<u8>> {
    let ranges = frame_ranges(sections, FRAME_RAW, HEAD_RAW)?;
    if ranges.last().is_some_and(|r| r.end > raw.len()) {
        return None;
    }
    let mut entries = Vec::with_capacity(ranges.len() * ENTRY);
    let mut body = Vec::with_capacity(raw.len());
    for r in &ranges {
        let bytes = &raw[r.clone()];
        entries.extend_from_slice(&u32::try_from(bytes.len()).ok()?.to_le_bytes());
        entries.extend_from_slice(&crate::codec::crc(bytes).to_le_bytes());
        body.extend_from_slice(bytes);
    }
    framed_block(ranges.len(), &entries, &body)
}

/// A framed block: header, index (`frames` entries) and body.
fn framed_block(frames: usize, entries: &[u8], body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(HEADER + entries.len() + body.len());
    let head = u32::try_from(HEAD_RAW).ok()?.to_le_bytes();
    out.extend_from_slice(&u32::try_from(FRAME_RAW).ok()?.to_le_bytes());
    out.extend_from_slice(&u32::try_from(frames).ok()?.to_le_bytes());
    out.extend_from_slice(&index_crc(&out[..8], &head, entries).to_le_bytes());
    out.extend_from_slice(&head);
    out.extend_from_slice(entries);
    out.extend_from_slice(body);
    Some(out)
}

/// `raw` (a block with these sections) in frames, each in the decimal form when its values
/// qualify ([`decimal::encode`]), else — except a section's first frame, kept as it is —
/// zstd-compressed at `level` when that saves a quarter of it; `None` when the whole saves
/// less than an eighth (the block is then better stored as it is).
pub fn compress(raw: &[u8], sections: &[u64], level: i32) -> Option<Vec<u8>> {
    let ranges = frame_ranges(sections, FRAME_RAW, HEAD_RAW)?;
    if ranges.last().is_some_and(|r| r.end > raw.len()) {
        return None;
    }
    // Where each section starts in the raw block: its first frame starts there.
    let mut heads = Vec::with_capacity(sections.len());
    let mut pos = 0usize;
    for &len in sections {
        heads.push(pos);
        pos = align64(pos.checked_add(usize::try_from(len).ok()?)?);
    }
    let mut zstd = zstd::bulk::Compressor::new(level).ok()?;
    let mut entries = Vec::with_capacity(ranges.len() * ENTRY);
    let mut body = Vec::with_capacity(raw.len() / 2);
    for r in &ranges {
        let bytes = &raw[r.clone()];
        let start = body.len();
        // A section's first frame is what a read of its first rows restores: it is kept as
        // it is (a copy to restore) rather than zstd-compressed (a decompression context and
        // its tables per frame, most of a cold `LIMIT` read's restoring).
        let head = heads.binary_search(&r.start).is_ok();
        let flag = if decimal::encode(bytes, &mut body) {
            DECIMAL
        } else {
            let packed = (!head)
                .then(|| zstd.compress(bytes).ok())
                .flatten()
                .filter(|c| c.len() * 4 <= bytes.len() * 3);
            match packed {
                Some(c) => {
                    body.extend_from_slice(&c);
                    ZSTD
                }
                None => {
                    body.extend_from_slice(bytes);
                    0
                }
            }
        };
        let stored = &body[start..];
        entries.extend_from_slice(&(u32::try_from(stored.len()).ok()? | flag).to_le_bytes());
        entries.extend_from_slice(&crate::codec::crc(stored).to_le_bytes());
    }
    let out = framed_block(ranges.len(), &entries, &body)?;
    (out.len() * 8 <= raw.len() * 7).then_some(out)
}

/// The index CRC: over `frame_raw` and the frame count (`words`), `head_raw` when it is not
/// 0 (format version 2 wrote 0 there, outside the CRC), and the entries.
fn index_crc(words: &[u8], head: &[u8; 4], entries: &[u8]) -> u32 {
    let mut c = crate::codec::crc(words);
    if *head != [0; 4] {
        c = crc32c::crc32c_append(c, head);
    }
    crc32c::crc32c_append(c, entries)
}

/// One frame of a framed block.
#[derive(Debug)]
pub struct Frame {
    /// Where its bytes go in the raw block.
    pub raw: Range<usize>,
    /// Where its stored bytes are in the stored block.
    stored: Range<usize>,
    form: Form,
    crc: u32,
    /// Set once its stored bytes matched `crc` (they are immutable: a mapped segment).
    checked: AtomicBool,
}

/// How a frame's bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    /// As they are.
    Raw,
    /// One zstd frame.
    Zstd,
    /// Decimal floats ([`decimal`]).
    Decimal,
}

/// The checked index of a framed block.
#[derive(Debug)]
pub struct Index {
    /// The frames, in raw order.
    pub frames: Vec<Frame>,
}

impl Index {
    /// Reads and checks the index of `stored`, a framed block whose raw form has these
    /// sections and `raw_len` bytes.
    pub fn read(stored: &[u8], sections: &[u64], raw_len: usize) -> Result<Index, String> {
        let word = |at: usize| -> Result<u32, String> {
            let b = stored.get(at..at + 4).ok_or("framed block too short for its index")?;
            Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        let frame_raw = word(0)? as usize;
        let count = word(4)? as usize;
        let entries_end = count
            .checked_mul(ENTRY)
            .and_then(|e| e.checked_add(HEADER))
            .filter(|&e| e <= stored.len())
            .ok_or("framed block too short for its index")?;
        let head = word(12)?;
        if index_crc(&stored[..8], &head.to_le_bytes(), &stored[HEADER..entries_end]) != word(8)? {
            return Err("frame index checksum mismatch".into());
        }
        let ranges =
            frame_ranges(sections, frame_raw, head as usize).ok_or("invalid frame size")?;
        if ranges.len() != count {
            return Err(format!(
                "frame index lists {count} frames, the sections make {}",
                ranges.len()
            ));
        }
        if ranges.last().is_some_and(|r| r.end > raw_len) {
            return Err("frames extend past the raw block".into());
        }
        let mut at = entries_end;
        let mut frames = Vec::with_capacity(count);
        for (k, raw) in ranges.into_iter().enumerate() {
            let len = word(HEADER + k * ENTRY)?;
            let crc = word(HEADER + k * ENTRY + 4)?;
            let form = match (len & ZSTD != 0, len & DECIMAL != 0) {
                (false, false) => Form::Raw,
                (true, false) => Form::Zstd,
                (false, true) => Form::Decimal,
                (true, true) => return Err(format!("frame {k} has two stored forms")),
            };
            let len = (len & LEN_MASK) as usize;
            let end = at.checked_add(len).filter(|&e| e <= stored.len());
            let end = end.ok_or_else(|| format!("frame {k} extends past the stored block"))?;
            if form == Form::Raw && len != raw.len() {
                return Err(format!("stored frame {k} has {len} bytes for {}", raw.len()));
            }
            frames.push(Frame { raw, stored: at..end, form, crc, checked: AtomicBool::new(false) });
            at = end;
        }
        if at != stored.len() {
            return Err("bytes after the last frame".into());
        }
        Ok(Index { frames })
    }

    /// The frames holding any byte of `ranges` of the raw block.
    pub fn covering(&self, ranges: &[Range<usize>]) -> Vec<usize> {
        let mut out: Vec<usize> = Vec::new();
        for r in ranges.iter().filter(|r| !r.is_empty()) {
            let first = self.frames.partition_point(|f| f.raw.end <= r.start);
            for (k, f) in self.frames.iter().enumerate().skip(first) {
                if f.raw.start >= r.end {
                    break;
                }
                out.push(k);
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Whether every frame holding a byte of `range` (not empty) is in the decimal form,
    /// whose values [`Index::read_f64`] reads without restoring the frame.
    pub fn decimal(&self, range: Range<usize>) -> bool {
        let ks = self.covering(std::slice::from_ref(&range));
        !ks.is_empty() && ks.iter().all(|&k| self.frames[k].form == Form::Decimal)
    }

    /// The 64-bit floats whose raw bytes start at each offset of `at` (each the start of a
    /// value of a frame in the decimal form), handed to `out` in order, read from the packed
    /// frames of `stored` without restoring them: a few values of a large frame cost a few
    /// unpacks instead of the whole frame. A frame's checksum is checked the first time a
    /// value is read from it.
    pub fn read_f64(
        &self,
        stored: &[u8],
        at: impl IntoIterator<Item = usize>,
        mut out: impl FnMut(f64),
    ) -> Result<(), String> {
        let mut cur: Option<(&Frame, decimal::Values<'_>)> = None;
        for a in at {
            let (f, values) = match cur {
                Some((f, v)) if f.raw.contains(&a) => (f, v),
                _ => {
                    let k = self.frames.partition_point(|f| f.raw.end <= a);
                    let f = self.frames.get(k).filter(|f| f.raw.contains(&a));
                    let f = f.ok_or_else(|| format!("no frame holds raw byte {a}"))?;
                    if f.form != Form::Decimal {
                        return Err(format!("frame {k} is not in the decimal form"));
                    }
                    let bytes =
                        stored.get(f.stored.clone()).ok_or("frame outside the stored block")?;
                    f.check(k, bytes)?;
                    let v = decimal::Values::new(bytes, f.raw.len())
                        .map_err(|e| format!("frame {k}: {e}"))?;
                    cur = Some((f, v));
                    (f, v)
                }
            };
            let off = a - f.raw.start;
            let v = (off % 8 == 0).then(|| values.get(off / 8)).flatten();
            out(v.ok_or_else(|| format!("raw byte {a} does not start a value of its frame"))?);
        }
        Ok(())
    }

    /// Where the raw block's bytes are, back to back, in the stored block when every frame is
    /// stored as it is and the frames run on from raw byte 0 without a gap (one section, or
    /// sections that need no padding): bytes `0..len` of the raw block are that range of the
    /// stored block, and can be read in place. `None` otherwise.
    pub fn in_place(&self) -> Option<Range<usize>> {
        let (first, last) = (self.frames.first()?, self.frames.last()?);
        let mut at = 0;
        for f in &self.frames {
            // Raw frames have as many stored bytes as raw ones (checked by `read`), and the
            // stored frames are back to back.
            if f.form != Form::Raw || f.raw.start != at {
                return None;
            }
            at = f.raw.end;
        }
        Some(first.stored.start..last.stored.end)
    }

    /// Restores frame `k` of `stored` into `out` (the raw block), checking its CRC first
    /// when `check`.
    pub fn restore(
        &self,
        stored: &[u8],
        k: usize,
        out: &mut [u8],
        check: bool,
    ) -> Result<(), String> {
        let f = self.frames.get(k).ok_or("no such frame")?;
        let bytes = stored.get(f.stored.clone()).ok_or("frame outside the stored block")?;
        if check {
            f.check(k, bytes)?;
        }
        let dst = out.get_mut(f.raw.clone()).ok_or("frame outside the raw block")?;
        match f.form {
            Form::Raw => {
                dst.copy_from_slice(bytes);
                return Ok(());
            }
            Form::Decimal => {
                return decimal::decode(bytes, dst).map_err(|e| format!("frame {k}: {e}"));
            }
            Form::Zstd => {}
        }
        let n = DECOMPRESSOR.with(|d| {
            let mut d = d.borrow_mut();
            if d.is_none() {
                *d = Some(zstd::bulk::Decompressor::new().map_err(|e| e.to_string())?);
            }
            match d.as_mut() {
                Some(d) => d.decompress_to_buffer(bytes, dst).map_err(|e| e.to_string()),
                None => Err("no zstd context".to_string()),
            }
        });
        match n {
            Ok(n) if n == f.raw.len() => Ok(()),
            Ok(n) => Err(format!("frame {k} decompressed to {n} bytes, expected {}", f.raw.len())),
            Err(e) => Err(format!("frame {k} does not decompress: {e}")),
        }
    }
}

impl Frame {
    /// Checks `bytes` (its stored bytes; frame `k`) against its CRC, once.
    fn check(&self, k: usize, bytes: &[u8]) -> Result<(), String> {
        if self.checked.load(Ordering::Acquire) {
            return Ok(());
        }
        if crate::codec::crc(bytes) != self.crc {
            return Err(format!("frame {k} checksum mismatch"));
        }
        self.checked.store(true, Ordering::Release);
        Ok(())
    }
}

/// The whole raw block (`raw_len` bytes, 64-byte aligned) of a framed block; frame
/// checksums are checked when `check` (the caller may have checked the whole block's).
pub fn restore_all(
    stored: &[u8],
    sections: &[u64],
    raw_len: usize,
    check: bool,
) -> Result<arrow_buffer::Buffer, String> {
    Index::read(stored, sections, raw_len)?.restore_all(stored, raw_len, check)
}

impl Index {
    /// The whole raw block (`raw_len` bytes) of `stored`, this block's stored bytes; frame
    /// checksums are checked when `check`.
    pub fn restore_all(
        &self,
        stored: &[u8],
        raw_len: usize,
        check: bool,
    ) -> Result<arrow_buffer::Buffer, String> {
        let mut out = arrow_buffer::MutableBuffer::from_len_zeroed(raw_len);
        for k in 0..self.frames.len() {
            self.restore(stored, k, out.as_slice_mut(), check)?;
        }
        Ok(out.into())
    }
}

/// A zeroed raw block that frames are restored into, then frozen into an Arrow buffer.
/// Large blocks restored in part are anonymous mappings, whose pages the kernel zeroes when
/// they are first touched: a read restoring a few frames of a 1 MB block touches a few
/// pages, where a zeroed heap allocation would write all of it first (measured: zeroing and
/// faulting in whole blocks was a fifth of a cold `LIMIT 100`). At most [`MAX_MAPS`] such
/// mappings live at once (the kernel bounds a process's mappings, 65,530 by default);
/// beyond that, and for blocks restored whole, the heap.
pub enum RawBlock {
    /// Small blocks: an ordinary zeroed allocation.
    Heap(arrow_buffer::MutableBuffer),
    /// Large blocks: an anonymous mapping, counted while it lives.
    Map(memmap2::MmapMut, MapSlot),
}

/// Blocks at least this large are restored in part into anonymous mappings.
const MAP_AT: usize = 64 * 1024;
/// Anonymous mappings of restored blocks alive at once, at most.
pub const MAX_MAPS: usize = 4096;
/// Anonymous mappings of restored blocks alive now.
static LIVE_MAPS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One of the [`MAX_MAPS`] places for a live mapping, given back when dropped (with the
/// mapping it travels with).
pub struct MapSlot(());

impl MapSlot {
    fn take() -> Option<MapSlot> {
        use std::sync::atomic::Ordering::Relaxed;
        if LIVE_MAPS.fetch_add(1, Relaxed) >= MAX_MAPS {
            LIVE_MAPS.fetch_sub(1, Relaxed);
            return None;
        }
        Some(MapSlot(()))
    }
}

impl Drop for MapSlot {
    fn drop(&mut self) {
        LIVE_MAPS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A frozen mapping with its slot: the owner of a buffer's bytes. The mapping stays
/// writable as far as the kernel knows (an `mprotect` per restored block was 8 % of a cold
/// `LIMIT 100`), but nothing writes it any more: this type is private, gives out no
/// access of its own, and only the buffer built over it reads the bytes.
struct CountedMap(#[allow(dead_code)] memmap2::MmapMut, #[allow(dead_code)] MapSlot);

impl RawBlock {
    /// `len` zero bytes; `sparse`: only some of them will be written (a mapping pays off).
    pub fn zeroed(len: usize, sparse: bool) -> RawBlock {
        let heap = || RawBlock::Heap(arrow_buffer::MutableBuffer::from_len_zeroed(len));
        if !sparse || len < MAP_AT {
            return heap();
        }
        let Some(slot) = MapSlot::take() else { return heap() };
        match memmap2::MmapMut::map_anon(len) {
            Ok(m) => RawBlock::Map(m, slot),
            // Out of mappings or address space: the heap serves as well.
            Err(_) => heap(),
        }
    }

    /// Anonymous mappings of restored blocks alive now (for tests and diagnostics).
    pub fn live_maps() -> usize {
        LIVE_MAPS.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Has the kernel fault in the pages under `range` in one call (a mapping only): what
    /// a restore is about to write, so it takes no page fault per page. Best effort — a
    /// kernel without `MADV_POPULATE_WRITE` (before Linux 5.14), or one refusing it, leaves
    /// the pages to be faulted in as they are written; a heap block has its pages already.
    pub fn prefault(&mut self, range: Range<usize>) {
        #[cfg(target_os = "linux")]
        if let RawBlock::Map(m, _) = self
            && !range.is_empty()
            && range.end <= m.len()
        {
            let _ = m.advise_range(memmap2::Advice::PopulateWrite, range.start, range.len());
        }
        #[cfg(not(target_os = "linux"))]
        let _ = range;
    }

    /// The bytes, to restore frames into.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            RawBlock::Heap(b) => b.as_slice_mut(),
            RawBlock::Map(m, _) => &mut m[..],
        }
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            RawBlock::Heap(b) => b.as_slice(),
            RawBlock::Map(m, _) => &m[..],
        }
    }

    /// The block as an immutable Arrow buffer (a mapping stays mapped while any slice of
    /// the buffer lives).
    pub fn freeze(self) -> std::io::Result<arrow_buffer::Buffer> {
        match self {
            RawBlock::Heap(b) => Ok(b.into()),
            RawBlock::Map(m, slot) => {
                let mut map = CountedMap(m, slot);
                let len = map.0.len();
                let ptr = std::ptr::NonNull::new(map.0.as_mut_ptr())
                    .ok_or_else(|| std::io::Error::other("null mapping"))?;
                // SAFETY: `ptr` points to `len` readable bytes owned by `map` (page aligned,
                // which satisfies Arrow's alignment); the Arc'd mapping is kept alive by the
                // buffer for as long as any slice of it exists, and nothing writes it from
                // here on (`CountedMap` gives out no access: the buffer is the only way to
                // its bytes, and a `Buffer` is immutable), so the bytes never change.
                Ok(unsafe {
                    arrow_buffer::Buffer::from_custom_allocation(ptr, len, std::sync::Arc::new(map))
                })
            }
        }
    }
}

thread_local! {
    /// One zstd decompression context per thread, reused for every frame.
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sections_and_raw(lens: &[usize], seed: u8) -> (Vec<u64>, Vec<u8>) {
        let mut raw = Vec::new();
        for (i, &l) in lens.iter().enumerate() {
            // Compressible, incompressible and decimal-float sections alike (the last cut
            // anywhere, so that its final frame is not whole values).
            let hundredths = |j: usize| {
                let k = (j / 8) as u64 * 7919 % 10_001 + u64::from(seed);
                (k as f64 / 100.0).to_le_bytes()[j % 8]
            };
            raw.extend((0..l).map(|j| match i % 3 {
                0 => (j / 7) as u8,
                1 => (j as u32).wrapping_mul(2654435761) as u8 ^ seed,
                _ => hundredths(j),
            }));
            raw.resize(align64(raw.len()), 0);
        }
        (lens.iter().map(|&l| l as u64).collect(), raw)
    }

    proptest! {
        /// Restoring every frame gives the raw block back; restoring some gives exactly
        /// their bytes and leaves the others untouched.
        #[test]
        fn frames_restore_what_was_written(
            lens in prop::collection::vec(0usize..50_000, 1..4),
            seed: u8,
            pick in prop::collection::vec(any::<bool>(), 0..20),
        ) {
            let (sections, raw) = sections_and_raw(&lens, seed);
            let Some(stored) = compress(&raw, &sections, 1) else { return Ok(()) };
            let idx = Index::read(&stored, &sections, raw.len()).unwrap();
            let mut out = vec![0u8; raw.len()];
            for k in 0..idx.frames.len() {
                idx.restore(&stored, k, &mut out, true).unwrap();
            }
            prop_assert_eq!(&out, &raw);
            let mut part = vec![0xA5u8; raw.len()];
            let chosen: Vec<usize> =
                (0..idx.frames.len()).filter(|&k| pick.get(k).copied().unwrap_or(false)).collect();
            for &k in &chosen {
                idx.restore(&stored, k, &mut part, true).unwrap();
            }
            for (k, f) in idx.frames.iter().enumerate() {
                let want: &[u8] = &raw[f.raw.clone()];
                if chosen.contains(&k) {
                    prop_assert_eq!(&part[f.raw.clone()], want);
                } else {
                    prop_assert!(part[f.raw.clone()].iter().all(|&b| b == 0xA5));
                }
            }
        }
    }

    /// A section's frames grow from `head_raw` to `frame_raw`; `head_raw` 0 (format version
    /// 2) keeps them all `frame_raw`; a head larger than the frames is refused.
    #[test]
    fn frames_grow_from_the_head_of_each_section() {
        let sizes = |sections: &[u64], head: usize| -> Vec<usize> {
            frame_ranges(sections, 32_768, head).unwrap().iter().map(|r| r.len()).collect()
        };
        assert_eq!(sizes(&[100_000], 4096), [4096, 8192, 16_384, 32_768, 32_768, 5792]);
        assert_eq!(sizes(&[100_000, 5000], 4096)[6..], [4096, 904]);
        assert_eq!(sizes(&[100_000], 0), [32_768, 32_768, 32_768, 1696]);
        assert_eq!(sizes(&[0, 10], 4096), [10]);
        assert!(frame_ranges(&[10], 4096, 8192).is_none());
        assert!(frame_ranges(&[10], 0, 0).is_none());
        // The second section starts 64-aligned.
        let r = frame_ranges(&[100, 10], 32_768, 4096).unwrap();
        assert_eq!(r[1], 128..138);
    }

    /// Decimal-float sections are stored in the decimal form (and restore exactly, above).
    #[test]
    fn decimal_sections_take_the_decimal_form() {
        let (sections, raw) = sections_and_raw(&[1000, 1000, 80_000], 9);
        let stored = compress(&raw, &sections, 1).unwrap();
        let idx = Index::read(&stored, &sections, raw.len()).unwrap();
        let forms: Vec<Form> = idx.frames.iter().map(|f| f.form).collect();
        assert!(forms[2..].iter().all(|&f| f == Form::Decimal), "{forms:?}");
        assert!(forms[..2].iter().all(|&f| f != Form::Decimal), "{forms:?}");
        assert_eq!(restore_all(&stored, &sections, raw.len(), true).unwrap().as_slice(), raw);
    }

    /// A section's first frame is never zstd-compressed (decimal form or as it is); the
    /// frames after it are.
    #[test]
    fn head_frames_are_not_zstd_compressed() {
        let (sections, raw) = sections_and_raw(&[40_000, 100, 70_000, 30_000], 0);
        let stored = compress(&raw, &sections, 1).unwrap();
        let idx = Index::read(&stored, &sections, raw.len()).unwrap();
        let mut heads = Vec::new();
        let mut pos = 0;
        for &l in &sections {
            heads.push(pos);
            pos = align64(pos + l as usize);
        }
        let mut zstd = 0;
        for f in &idx.frames {
            if heads.contains(&f.raw.start) {
                assert_ne!(f.form, Form::Zstd, "{f:?}");
            } else {
                zstd += usize::from(f.form == Form::Zstd);
            }
        }
        assert!(heads.iter().all(|h| idx.frames.iter().any(|f| f.raw.start == *h)));
        assert!(zstd > 4, "{:?}", idx.frames);
        assert_eq!(restore_all(&stored, &sections, raw.len(), true).unwrap().as_slice(), raw);
    }

    /// Values read from packed decimal frames are the raw block's; offsets that do not
    /// start a value, frames in another form and damaged frames are errors.
    #[test]
    fn decimal_values_are_read_without_restoring() {
        let (sections, raw) = sections_and_raw(&[1000, 1000, 80_000], 9);
        let stored = compress(&raw, &sections, 1).unwrap();
        let idx = Index::read(&stored, &sections, raw.len()).unwrap();
        let dict = 2048..2048 + 80_000;
        assert!(idx.decimal(dict.clone()) && !idx.decimal(0..1000) && !idx.decimal(5..5));
        let value = |a: usize| f64::from_le_bytes(raw[a..a + 8].try_into().unwrap());
        let at: Vec<usize> = (0..10_000).map(|j| dict.start + (j * 7919 % 10_000) * 8).collect();
        let mut got = Vec::new();
        idx.read_f64(&stored, at.iter().copied(), |v| got.push(v)).unwrap();
        assert_eq!(got.len(), at.len());
        assert!(at.iter().zip(&got).all(|(&a, &v)| v.to_bits() == value(a).to_bits()));
        for bad in [dict.start + 4, 10, dict.end, raw.len() + 100] {
            assert!(idx.read_f64(&stored, [dict.start, bad], |_| {}).is_err(), "{bad}");
        }
        // A flipped byte in the frame a value is read from: its checksum says so.
        let k = idx.covering(std::slice::from_ref(&(dict.end - 8..dict.end)))[0];
        let mut bad = stored.clone();
        bad[idx.frames[k].stored.start + 20] ^= 1;
        let fresh = Index::read(&bad, &sections, raw.len()).unwrap();
        let e = fresh.read_f64(&bad, [dict.end - 8], |_| {}).unwrap_err();
        assert!(e.contains("checksum"), "{e}");
    }

    /// A block framed as it is restores exactly; a one-section one is its raw bytes in
    /// place, and neither a compressed block nor sections with padding between are.
    #[test]
    fn blocks_framed_as_they_are() {
        for lens in [vec![100_000], vec![30_000, 5_000], vec![4096, 4096]] {
            let (sections, raw) = sections_and_raw(&lens, 1);
            let stored = as_is(&raw, &sections).unwrap();
            let idx = Index::read(&stored, &sections, raw.len()).unwrap();
            assert!(idx.frames.iter().all(|f| f.form == Form::Raw));
            assert_eq!(restore_all(&stored, &sections, raw.len(), true).unwrap().as_slice(), raw);
            let gapless = lens.iter().rev().skip(1).all(|l| l % 64 == 0);
            match idx.in_place() {
                Some(body) => {
                    assert!(gapless, "{lens:?}");
                    let len: usize = lens.iter().sum();
                    assert_eq!(&stored[body], &raw[..len]);
                }
                None => assert!(!gapless, "{lens:?}"),
            }
            assert!(!damage_found(&stored, &sections, raw.len()));
        }
        let (sections, raw) = sections_and_raw(&[100_000], 1);
        let idx = Index::read(&compress(&raw, &sections, 1).unwrap(), &sections, raw.len());
        assert!(idx.unwrap().in_place().is_none());
    }

    #[test]
    fn covering_finds_every_frame_a_range_touches() {
        let (sections, raw) = sections_and_raw(&[40_000, 100, 70_000], 3);
        let stored = compress(&raw, &sections, 1).unwrap();
        let idx = Index::read(&stored, &sections, raw.len()).unwrap();
        for r in [0..1, 16_383..16_385, 39_999..40_100, 40_000..40_064, 0..raw.len(), 5..5] {
            let got = idx.covering(std::slice::from_ref(&r));
            let want: Vec<usize> = (0..idx.frames.len())
                .filter(|&k| {
                    let f = &idx.frames[k].raw;
                    !r.is_empty() && f.start < r.end && r.start < f.end
                })
                .collect();
            assert_eq!(got, want, "{r:?}");
        }
    }

    /// Held by the tests that need mapping slots: `mappings_are_capped` takes every one of
    /// them for a while, and a test expecting a mapping meanwhile would get the heap.
    static MAP_SLOTS: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

    /// Sparse blocks are mappings up to the cap, then heap allocations; frozen or not, a
    /// mapping gives its place back when it goes.
    #[test]
    fn mappings_are_capped() {
        let _slots = MAP_SLOTS.lock();
        let len = MAP_AT;
        let blocks: Vec<RawBlock> =
            (0..MAX_MAPS + 10).map(|_| RawBlock::zeroed(len, true)).collect();
        assert!(RawBlock::live_maps() <= MAX_MAPS);
        let heap = blocks.iter().filter(|b| matches!(b, RawBlock::Heap(_))).count();
        assert!(heap >= 10, "{heap}");
        assert!(blocks.iter().all(|b| b.as_slice().len() == len && b.as_slice()[len - 1] == 0));
        let frozen: Vec<arrow_buffer::Buffer> =
            blocks.into_iter().take(20).map(|b| b.freeze().unwrap()).collect();
        assert!(frozen.iter().all(|b| b.len() == len));
        drop(frozen);
        assert!(matches!(RawBlock::zeroed(len, false), RawBlock::Heap(_)));
        assert!(matches!(RawBlock::zeroed(len - 1, true), RawBlock::Heap(_)));
        // Every place came back: the cap can be reached again.
        let again: Vec<RawBlock> = (0..MAX_MAPS).map(|_| RawBlock::zeroed(len, true)).collect();
        let maps = again.iter().filter(|b| matches!(b, RawBlock::Map(..))).count();
        assert!(maps > MAX_MAPS / 2, "{maps}");
    }

    /// Prefaulting a mapping changes no byte: what is written reads back from the frozen
    /// buffer, and the rest stays zero; ranges out of bounds or empty are ignored.
    #[test]
    fn prefaulted_mappings_keep_what_is_written() {
        let _slots = MAP_SLOTS.lock();
        let len = MAP_AT * 4;
        let mut b = RawBlock::zeroed(len, true);
        assert!(matches!(b, RawBlock::Map(..)));
        b.prefault(100..9000);
        b.prefault(len - 10..len + 10);
        b.prefault(50..50);
        b.as_mut_slice()[100..9000].fill(7);
        b.prefault(MAP_AT..MAP_AT * 2);
        b.as_mut_slice()[MAP_AT + 1] = 9;
        let f = b.freeze().unwrap();
        assert_eq!(f.len(), len);
        assert!(f[..100].iter().all(|&x| x == 0));
        assert!(f[100..9000].iter().all(|&x| x == 7));
        assert_eq!(f[MAP_AT + 1], 9);
        assert_eq!(f.iter().filter(|&&x| x != 0).count(), 8900 + 1);
        // A heap block takes the call and stays as it is.
        let mut h = RawBlock::zeroed(64, true);
        h.prefault(0..64);
        assert!(h.as_slice().iter().all(|&x| x == 0));
    }

    /// Whether reading `stored` (index, then every frame) reports damage.
    fn damage_found(stored: &[u8], sections: &[u64], raw_len: usize) -> bool {
        match Index::read(stored, sections, raw_len) {
            Err(_) => true,
            Ok(idx) => {
                let mut out = vec![0u8; raw_len];
                (0..idx.frames.len()).any(|k| idx.restore(stored, k, &mut out, true).is_err())
            }
        }
    }

    /// A flipped byte anywhere in a framed block is found: in the index by its checksum or
    /// its consistency checks, in a frame by the frame's checksum.
    #[test]
    fn damage_is_detected() {
        let (sections, raw) = sections_and_raw(&[30_000, 20_000], 9);
        let stored = compress(&raw, &sections, 1).unwrap();
        assert!(!damage_found(&stored, &sections, raw.len()));
        for at in (0..stored.len()).step_by(97) {
            let mut bad = stored.clone();
            bad[at] ^= 0x10;
            assert!(damage_found(&bad, &sections, raw.len()), "flipped byte {at} not detected");
        }
        assert!(Index::read(&stored[..stored.len() - 1], &sections, raw.len()).is_err());
        assert!(
            damage_found(&stored, &[30_000, 20_001], raw.len()),
            "sections that disagree with the index were not noticed"
        );
    }
}
