//! Little-endian binary encoding for footers and the manifest.
//!
//! [`Enc`] appends fixed-width integers and length-prefixed byte strings to a `Vec<u8>`;
//! [`Dec`] reads them back with bounds checks, turning every short read into
//! [`Error::Corrupt`] with the file name and absolute offset. Nothing here panics on
//! malformed input. Checksums (CRC-32C) are computed by the callers over whole structures.

use std::path::Path;

use crate::error::{Error, Result};

/// Append-only encoder.
#[derive(Default)]
pub struct Enc {
    buf: Vec<u8>,
}

impl Enc {
    /// A new, empty encoder.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends one byte.
    pub fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    /// Appends a bool as one byte.
    pub fn bool(&mut self, v: bool) {
        self.buf.push(u8::from(v));
    }
    /// Appends a little-endian u32.
    pub fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a little-endian u64.
    pub fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    /// Appends a length-prefixed (u32) byte string.
    pub fn bytes(&mut self, v: &[u8]) {
        // Lengths beyond u32 never occur in metadata; saturate so decoding then fails loudly.
        self.u32(u32::try_from(v.len()).unwrap_or(u32::MAX));
        self.buf.extend_from_slice(v);
    }
    /// Appends a length-prefixed UTF-8 string.
    pub fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    /// Appends raw bytes without a length.
    pub fn raw(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }
    /// Current length in bytes.
    pub fn len(&self) -> usize {
        self.buf.len()
    }
    /// True when nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// The encoded bytes.
    pub fn finish(self) -> Vec<u8> {
        self.buf
    }
}

/// Bounds-checked decoder over a byte slice that knows its file and base offset.
pub struct Dec<'a> {
    buf: &'a [u8],
    pos: usize,
    file: &'a Path,
    base: u64,
}

impl<'a> Dec<'a> {
    /// Decodes `buf`, which starts at absolute offset `base` of `file`.
    pub fn new(buf: &'a [u8], file: &'a Path, base: u64) -> Self {
        Self { buf, pos: 0, file, base }
    }

    /// A corruption error at the current position.
    pub fn err(&self, reason: impl Into<String>) -> Error {
        Error::corrupt(self.file, self.base + self.pos as u64, reason)
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        match end {
            Some(end) => {
                let s = &self.buf[self.pos..end];
                self.pos = end;
                Ok(s)
            }
            None => Err(self.err(format!("truncated while reading {what}"))),
        }
    }
    /// Reads one byte.
    pub fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }
    /// Reads a bool; any byte other than 0 or 1 is corruption.
    pub fn bool(&mut self, what: &str) -> Result<bool> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            b => Err(self.err(format!("invalid bool {b} for {what}"))),
        }
    }
    /// Reads a little-endian u32.
    pub fn u32(&mut self, what: &str) -> Result<u32> {
        let s = self.take(4, what)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }
    /// Reads a little-endian u64.
    pub fn u64(&mut self, what: &str) -> Result<u64> {
        let s = self.take(8, what)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
    /// Reads a u64 that must fit in `usize`.
    pub fn usize(&mut self, what: &str) -> Result<usize> {
        let v = self.u64(what)?;
        usize::try_from(v).map_err(|_| self.err(format!("{what} {v} out of range")))
    }
    /// Reads a u32 count, refusing counts that cannot fit in the remaining bytes
    /// (each element needs at least `min_elem_size` bytes).
    pub fn count(&mut self, min_elem_size: usize, what: &str) -> Result<usize> {
        let n = self.u32(what)? as usize;
        if n.saturating_mul(min_elem_size.max(1)) > self.remaining() {
            return Err(self.err(format!("{what} {n} exceeds the remaining bytes")));
        }
        Ok(n)
    }
    /// Reads `n` bytes (no length prefix).
    pub fn raw(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        self.take(n, what)
    }
    /// Reads a length-prefixed byte string.
    pub fn bytes(&mut self, what: &str) -> Result<&'a [u8]> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    /// Reads a length-prefixed UTF-8 string.
    pub fn str(&mut self, what: &str) -> Result<&'a str> {
        let b = self.bytes(what)?;
        std::str::from_utf8(b).map_err(|_| self.err(format!("{what} is not UTF-8")))
    }
    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Fails unless every byte was consumed.
    pub fn finish(&self, what: &str) -> Result<()> {
        if self.remaining() != 0 {
            return Err(self.err(format!("{} trailing bytes after {what}", self.remaining())));
        }
        Ok(())
    }
}

/// CRC-32C (Castagnoli) of `data`: hardware-accelerated where the CPU has it.
pub fn crc(data: &[u8]) -> u32 {
    crc32c::crc32c(data)
}

/// Rounds `n` up to a multiple of 64 (the alignment of every block and section).
pub fn align64(n: usize) -> usize {
    n.div_ceil(64) * 64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let mut e = Enc::new();
        e.u8(7);
        e.bool(true);
        e.u32(0xdead_beef);
        e.u64(u64::MAX - 3);
        e.str("héllo");
        let bytes = e.finish();
        let p = Path::new("f");
        let mut d = Dec::new(&bytes, p, 100);
        assert_eq!(d.u8("a").unwrap(), 7);
        assert!(d.bool("b").unwrap());
        assert_eq!(d.u32("c").unwrap(), 0xdead_beef);
        assert_eq!(d.u64("d").unwrap(), u64::MAX - 3);
        assert_eq!(d.str("e").unwrap(), "héllo");
        d.finish("all").unwrap();
        for cut in 0..bytes.len() {
            let mut d = Dec::new(&bytes[..cut], p, 0);
            let r = (|| -> Result<()> {
                d.u8("a")?;
                d.bool("b")?;
                d.u32("c")?;
                d.u64("d")?;
                d.str("e")?;
                Ok(())
            })();
            assert!(matches!(r, Err(Error::Corrupt { .. })), "cut at {cut}");
        }
    }
}
