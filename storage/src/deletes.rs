//! Delete vectors: which rows of a segment are deleted.
//!
//! A segment is immutable, so deleting (or updating: delete + re-insert with the same `_id`)
//! one of its rows sets a bit in the segment's delete vector. In memory the vector is shared
//! copy-on-write between snapshots, in chunks of 32,768 rows: a write copies the one 4 KiB
//! chunk it changes, not the bitmap of a whole (1M-row: 128 KiB) segment; on flush it is written to a *delete file*
//! `t<table>/s<segment:016x>.<generation>.del`, and the manifest names the generation in force.
//!
//! # Byte layout (format version 1)
//!
//! ```text
//! magic "BSLTDEL\0" (8) | format version u32 | reserved u32 (0) | rows u64 | deleted u64
//! bitmap: ceil(rows / 64) little-endian u64 words, bit i = row i deleted
//! CRC-32C u32 of everything before it
//! ```

use std::path::Path;
use std::sync::Arc;

use arrow_buffer::BooleanBuffer;

use crate::codec::crc;
use crate::error::{Error, Result};

/// Current delete-file format version.
pub const DELETE_FORMAT_VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"BSLTDEL\0";

/// Words (of 64 rows) per copy-on-write chunk.
const CHUNK_WORDS: usize = 512;

/// The `n` (1..=64) lowest bits set.
fn low_bits(n: usize) -> u64 {
    if n >= 64 { u64::MAX } else { (1u64 << n) - 1 }
}

/// A bitmap of deleted rows of one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteVector {
    /// The bitmap in chunks of `CHUNK_WORDS` words (the last may be shorter), each shared
    /// until written.
    chunks: Vec<Arc<Vec<u64>>>,
    rows: usize,
    count: usize,
}

impl DeleteVector {
    /// No row deleted, for a segment of `rows` rows.
    pub fn new(rows: usize) -> Self {
        Self::from_words(vec![0; rows.div_ceil(64)], rows, 0)
    }

    fn from_words(words: Vec<u64>, rows: usize, count: usize) -> Self {
        let chunks = words.chunks(CHUNK_WORDS).map(|c| Arc::new(c.to_vec())).collect();
        Self { chunks, rows, count }
    }

    fn word(&self, w: usize) -> u64 {
        self.chunks[w / CHUNK_WORDS][w % CHUNK_WORDS]
    }

    /// Marks `row` deleted; false if it already was (or is out of range).
    pub fn set(&mut self, row: usize) -> bool {
        if row >= self.rows {
            return false;
        }
        let (w, b) = (row / 64, row % 64);
        if self.word(w) & (1 << b) != 0 {
            return false;
        }
        Arc::make_mut(&mut self.chunks[w / CHUNK_WORDS])[w % CHUNK_WORDS] |= 1 << b;
        self.count += 1;
        true
    }

    /// Whether `row` is deleted.
    pub fn get(&self, row: usize) -> bool {
        row < self.rows && self.word(row / 64) & (1 << (row % 64)) != 0
    }

    /// Number of deleted rows.
    pub fn count(&self) -> usize {
        self.count
    }

    /// Whether any row in `start..start + len` is deleted.
    pub fn any_in(&self, start: usize, len: usize) -> bool {
        let end = start.saturating_add(len).min(self.rows);
        let mut pos = start;
        while pos < end {
            let n = (end - pos).min(64);
            if self.bits64(pos) & low_bits(n) != 0 {
                return true;
            }
            pos += n;
        }
        false
    }

    /// A keep-mask (true = live) for rows `start..start + len` (rows past the segment's
    /// end are live), built 64 rows at a time.
    pub fn keep_mask(&self, start: usize, len: usize) -> BooleanBuffer {
        let mut words: Vec<u64> =
            (0..len.div_ceil(64)).map(|i| !self.bits64(start.saturating_add(i * 64))).collect();
        if let Some(last) = words.last_mut() {
            *last &= low_bits(len - (len - 1) / 64 * 64);
        }
        BooleanBuffer::new(arrow_buffer::Buffer::from_vec(words), 0, len)
    }

    /// The deleted bits of rows `start..start + 64` (bit i = row `start + i`; rows past
    /// the end read as not deleted).
    fn bits64(&self, start: usize) -> u64 {
        let words = self.rows.div_ceil(64);
        let (w, b) = (start / 64, start % 64);
        let at = |w: usize| if w < words { self.word(w) } else { 0 };
        let lo = at(w) >> b;
        if b == 0 { lo } else { lo | at(w + 1) << (64 - b) }
    }

    /// Serialises the vector as a delete file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(36 + self.rows.div_ceil(64) * 8);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&DELETE_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&(self.rows as u64).to_le_bytes());
        out.extend_from_slice(&(self.count as u64).to_le_bytes());
        for w in self.chunks.iter().flat_map(|c| c.iter()) {
            out.extend_from_slice(&w.to_le_bytes());
        }
        let c = crc(&out);
        out.extend_from_slice(&c.to_le_bytes());
        out
    }

    /// Reads a delete file for a segment of `rows` rows, checking every byte.
    pub fn decode(bytes: &[u8], rows: usize, file: &Path) -> Result<Self> {
        let bad = |off: usize, why: &str| Error::corrupt(file, off as u64, why);
        let words = rows.div_ceil(64);
        let want = 32 + words * 8 + 4;
        if bytes.len() != want {
            return Err(bad(0, "delete file has the wrong length for its segment"));
        }
        let (head, tail) = bytes.split_at(want - 4);
        if crc(head) != u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) {
            return Err(bad(want - 4, "delete file checksum mismatch"));
        }
        if &head[..8] != MAGIC {
            return Err(bad(0, "bad delete file magic"));
        }
        let u32_at =
            |o: usize| u32::from_le_bytes([head[o], head[o + 1], head[o + 2], head[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&head[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let version = u32_at(8);
        if version != DELETE_FORMAT_VERSION {
            return Err(Error::UnsupportedFormatVersion {
                file: file.to_path_buf(),
                found: version,
                supported: DELETE_FORMAT_VERSION,
            });
        }
        if u32_at(12) != 0 || u64_at(16) != rows as u64 {
            return Err(bad(12, "delete file header does not match its segment"));
        }
        let words: Vec<u64> = (0..words).map(|i| u64_at(32 + i * 8)).collect();
        let count = words.iter().map(|w| w.count_ones() as usize).sum::<usize>();
        let tail_bits = rows % 64;
        if tail_bits != 0 && words.last().is_some_and(|w| w >> tail_bits != 0) {
            return Err(bad(32, "delete file marks rows past the end of its segment"));
        }
        if count as u64 != u64_at(24) {
            return Err(bad(24, "delete file count does not match its bitmap"));
        }
        Ok(Self::from_words(words, rows, count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(rows in 0usize..500, picks in proptest::collection::vec(0usize..500, 0..100)) {
            let mut d = DeleteVector::new(rows);
            for p in &picks {
                d.set(*p);
            }
            let back = DeleteVector::decode(&d.encode(), rows, Path::new("d")).unwrap();
            prop_assert_eq!(&back, &d);
            for r in 0..rows {
                prop_assert_eq!(back.get(r), picks.contains(&r));
            }
        }

        /// The word-at-a-time range reads agree with reading row by row, at every
        /// alignment and across the segment's end.
        #[test]
        fn range_reads_match_rows(
            rows in 0usize..700,
            picks in proptest::collection::vec(0usize..700, 0..40),
            start in 0usize..760,
            len in 0usize..300,
        ) {
            let mut d = DeleteVector::new(rows);
            for p in &picks {
                d.set(*p);
            }
            let want_any = (start..start + len).any(|r| d.get(r));
            prop_assert_eq!(d.any_in(start, len), want_any);
            let mask = d.keep_mask(start, len);
            prop_assert_eq!(mask.len(), len);
            let got: Vec<bool> = mask.iter().collect();
            let want: Vec<bool> = (start..start + len).map(|r| !d.get(r)).collect();
            prop_assert_eq!(got, want);
            prop_assert_eq!(mask.count_set_bits(), (start..start + len).filter(|&r| !d.get(r)).count());
        }
    }

    #[test]
    fn clones_share_chunks_until_written() {
        let rows = 3 * CHUNK_WORDS * 64 + 5;
        let mut a = DeleteVector::new(rows);
        a.set(7);
        let mut b = a.clone();
        assert!(b.set(rows - 1) && b.set(CHUNK_WORDS * 64));
        assert!(!b.set(7) && !b.set(rows));
        assert_eq!((a.count(), b.count()), (1, 3));
        assert!(!a.get(rows - 1) && b.get(rows - 1) && b.get(7) && !a.get(CHUNK_WORDS * 64));
        // Unwritten chunks are shared, written ones are not.
        assert!(Arc::ptr_eq(&a.chunks[2], &b.chunks[2]));
        assert!(!Arc::ptr_eq(&a.chunks[1], &b.chunks[1]));
        let back = DeleteVector::decode(&b.encode(), rows, Path::new("d")).unwrap();
        assert_eq!(back, b);
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let mut d = DeleteVector::new(130);
        d.set(3);
        d.set(129);
        let bytes = d.encode();
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x10;
            assert!(DeleteVector::decode(&b, 130, Path::new("d")).is_err(), "byte {i}");
        }
        assert!(DeleteVector::decode(&bytes, 131, Path::new("d")).is_err());
    }
}
