//! The I/O layer: every byte Basalt writes, syncs, renames or maps goes through [`Vfs`].
//!
//! Three implementations:
//! - [`OsFs`]: the real file system; immutable segment files are memory-mapped.
//! - [`MemFs`]: an in-memory file system behind `open_in_memory` — the same code paths as
//!   on disk, with files held in 64-byte-aligned Arrow buffers.
//! - [`FaultFs`]: wraps another `Vfs` and fails (or tears) the N-th mutating operation, so
//!   tests can check that every crash point leaves a database that opens to a consistent
//!   state.
//!
//! This module owns no format knowledge; it must not interpret the bytes it moves.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_buffer::{Buffer, MutableBuffer};
use parking_lot::Mutex;

use crate::error::{Error, Result};

/// A held lock; dropping it releases the lock.
pub struct LockGuard(#[allow(dead_code)] Box<dyn Send + Sync>);

impl LockGuard {
    /// Wraps whatever keeps the lock held.
    pub fn new(inner: impl Send + Sync + 'static) -> Self {
        LockGuard(Box::new(inner))
    }
}

impl Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LockGuard")
    }
}

/// File-system operations used by the storage engine.
pub trait Vfs: Send + Sync + Debug {
    /// Creates a directory and its parents.
    fn create_dir_all(&self, path: &Path) -> Result<()>;
    /// Creates (or truncates) `path` and writes `parts` in order; fsyncs the file if `sync`.
    fn write_file(&self, path: &Path, parts: &[&[u8]], sync: bool) -> Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes a file; a missing file is not an error.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Removes a directory tree; a missing directory is not an error.
    fn remove_dir_all(&self, path: &Path) -> Result<()>;
    /// Makes a directory's entries (creations, renames) durable.
    fn sync_dir(&self, path: &Path) -> Result<()>;
    /// Reads a whole (small) file.
    fn read(&self, path: &Path) -> Result<Vec<u8>>;
    /// Maps an immutable file for reading. The returned buffer starts 64-byte aligned.
    fn map(&self, path: &Path) -> Result<Buffer>;
    /// Names of the entries of a directory (empty if it does not exist).
    fn list_dir(&self, path: &Path) -> Result<Vec<String>>;
    /// Whether a file or directory exists.
    fn exists(&self, path: &Path) -> bool;
    /// Takes the exclusive writer lock on `path`, or fails with [`Error::Locked`] naming
    /// `db_path`. In-memory file systems have nothing to share and always succeed.
    fn lock_exclusive(&self, path: &Path, db_path: &Path) -> Result<LockGuard>;
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

impl Vfs for OsFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        std::fs::create_dir_all(path).map_err(|e| Error::io("create directory", path, e))
    }

    fn write_file(&self, path: &Path, parts: &[&[u8]], sync: bool) -> Result<()> {
        let mut f = File::create(path).map_err(|e| Error::io("create", path, e))?;
        for p in parts {
            f.write_all(p).map_err(|e| Error::io("write", path, e))?;
        }
        if sync {
            f.sync_all().map_err(|e| Error::io("fsync", path, e))?;
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        std::fs::rename(from, to).map_err(|e| Error::io("rename", from, e))
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        match std::fs::remove_file(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io("remove", path, e)),
            _ => Ok(()),
        }
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        match std::fs::remove_dir_all(path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io("remove directory", path, e))
            }
            _ => Ok(()),
        }
    }

    fn sync_dir(&self, path: &Path) -> Result<()> {
        let d = File::open(path).map_err(|e| Error::io("open directory", path, e))?;
        d.sync_all().map_err(|e| Error::io("fsync directory", path, e))
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        std::fs::read(path).map_err(|e| Error::io("read", path, e))
    }

    fn map(&self, path: &Path) -> Result<Buffer> {
        let f = File::open(path).map_err(|e| Error::io("open", path, e))?;
        let len = f.metadata().map_err(|e| Error::io("stat", path, e))?.len();
        if len == 0 {
            return Ok(Buffer::from_vec(Vec::<u8>::new()));
        }
        // SAFETY: Basalt maps only segment files, which are written once, synced, and never
        // modified afterwards (a rewrite always goes to a new file name). Another process
        // truncating the file behind our back is outside the supported contract, as for
        // every mmap-based reader.
        let map = unsafe { memmap2::Mmap::map(&f) }.map_err(|e| Error::io("mmap", path, e))?;
        let len = map.len();
        let ptr = NonNull::new(map.as_ptr().cast_mut())
            .ok_or_else(|| Error::io("mmap", path, std::io::Error::other("null mapping")))?;
        // SAFETY: `ptr` points to `len` readable bytes owned by `map`; the Arc'd mapping is
        // kept alive by the buffer for as long as any slice of it exists, and the bytes are
        // never written through this mapping. Page alignment satisfies Arrow's alignment.
        Ok(unsafe { Buffer::from_custom_allocation(ptr, len, Arc::new(map)) })
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let rd = match std::fs::read_dir(path) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("list directory", path, e)),
        };
        let mut out = Vec::new();
        for entry in rd {
            let entry = entry.map_err(|e| Error::io("list directory", path, e))?;
            out.push(entry.file_name().to_string_lossy().into_owned());
        }
        out.sort();
        Ok(out)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn lock_exclusive(&self, path: &Path, db_path: &Path) -> Result<LockGuard> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)
            .map_err(|e| Error::io("open lock file", path, e))?;
        match f.try_lock() {
            Ok(()) => Ok(LockGuard::new(f)),
            Err(std::fs::TryLockError::WouldBlock) => {
                Err(Error::Locked { path: db_path.to_path_buf() })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
        }
    }
}

/// An in-memory file system: the backing of `:memory:` databases and of many tests.
///
/// Files are stored as immutable 64-byte-aligned [`Buffer`]s, so `map` is a cheap clone.
#[derive(Debug, Default)]
pub struct MemFs {
    files: Mutex<BTreeMap<PathBuf, Buffer>>,
    dirs: Mutex<std::collections::BTreeSet<PathBuf>>,
}

impl MemFs {
    /// A new, empty in-memory file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces a file's bytes (tests use this to damage files).
    pub fn put(&self, path: &Path, bytes: &[u8]) {
        self.files.lock().insert(path.to_path_buf(), aligned(bytes));
    }

    /// Total bytes held.
    pub fn bytes_used(&self) -> usize {
        self.files.lock().values().map(|b| b.len()).sum()
    }
}

fn aligned(bytes: &[u8]) -> Buffer {
    let mut m = MutableBuffer::with_capacity(bytes.len());
    m.extend_from_slice(bytes);
    m.into()
}

fn not_found(path: &Path) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::NotFound, format!("{} not found", path.display()))
}

impl Vfs for MemFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        let mut dirs = self.dirs.lock();
        for a in path.ancestors() {
            dirs.insert(a.to_path_buf());
        }
        Ok(())
    }

    fn write_file(&self, path: &Path, parts: &[&[u8]], _sync: bool) -> Result<()> {
        let len = parts.iter().map(|p| p.len()).sum();
        let mut m = MutableBuffer::with_capacity(len);
        for p in parts {
            m.extend_from_slice(p);
        }
        self.files.lock().insert(path.to_path_buf(), m.into());
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut files = self.files.lock();
        let b = files.remove(from).ok_or_else(|| Error::io("rename", from, not_found(from)))?;
        files.insert(to.to_path_buf(), b);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        self.files.lock().remove(path);
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        self.files.lock().retain(|p, _| !p.starts_with(path));
        self.dirs.lock().retain(|p| !p.starts_with(path));
        Ok(())
    }

    fn sync_dir(&self, _path: &Path) -> Result<()> {
        Ok(())
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let files = self.files.lock();
        let b = files.get(path).ok_or_else(|| Error::io("read", path, not_found(path)))?;
        Ok(b.as_slice().to_vec())
    }

    fn map(&self, path: &Path) -> Result<Buffer> {
        let files = self.files.lock();
        files.get(path).cloned().ok_or_else(|| Error::io("open", path, not_found(path)))
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        let files = self.files.lock();
        let dirs = self.dirs.lock();
        let children = files.keys().chain(dirs.iter());
        for p in children {
            // Direct children, and the first component of deeper paths (implicit directories).
            if let Ok(rest) = p.strip_prefix(path)
                && let Some(first) = rest.components().next()
            {
                out.push(first.as_os_str().to_string_lossy().into_owned());
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn exists(&self, path: &Path) -> bool {
        self.files.lock().contains_key(path) || self.dirs.lock().contains(path)
    }

    fn lock_exclusive(&self, _path: &Path, _db_path: &Path) -> Result<LockGuard> {
        Ok(LockGuard::new(()))
    }
}

/// How [`FaultFs`] fails the chosen operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The operation returns an error and has no effect.
    Error,
    /// A `write_file` writes only the first half of its bytes, then errors (a torn write);
    /// other operations behave as [`FaultKind::Error`].
    Torn,
}

/// A fault-injecting wrapper: the `n`-th mutating operation (0-based) and every one after
/// it fail, as if the process had died at that point. Reads are never failed.
#[derive(Debug)]
pub struct FaultFs {
    inner: Arc<dyn Vfs>,
    remaining: AtomicU64,
    kind: FaultKind,
}

impl FaultFs {
    /// Fails mutating operation number `n` (0-based) and all later ones.
    pub fn new(inner: Arc<dyn Vfs>, n: u64, kind: FaultKind) -> Self {
        Self { inner, remaining: AtomicU64::new(n), kind }
    }

    /// A wrapper that never fails (counts operations; see [`FaultFs::ops_left`]).
    pub fn never(inner: Arc<dyn Vfs>) -> Self {
        Self::new(inner, u64::MAX, FaultKind::Error)
    }

    /// How many operations remain before the fault.
    pub fn ops_left(&self) -> u64 {
        self.remaining.load(Ordering::SeqCst)
    }

    fn tick(&self, path: &Path) -> Result<()> {
        let prev = self
            .remaining
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| Some(r.saturating_sub(1)))
            .unwrap_or(0);
        if prev == 0 {
            return Err(Error::io("injected fault", path, std::io::Error::other("injected fault")));
        }
        Ok(())
    }
}

impl Vfs for FaultFs {
    fn create_dir_all(&self, path: &Path) -> Result<()> {
        self.tick(path)?;
        self.inner.create_dir_all(path)
    }
    fn write_file(&self, path: &Path, parts: &[&[u8]], sync: bool) -> Result<()> {
        if let Err(e) = self.tick(path) {
            if self.kind == FaultKind::Torn {
                let all: Vec<u8> = parts.concat();
                let _ = self.inner.write_file(path, &[&all[..all.len() / 2]], sync);
            }
            return Err(e);
        }
        self.inner.write_file(path, parts, sync)
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.tick(from)?;
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        self.tick(path)?;
        self.inner.remove_file(path)
    }
    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        self.tick(path)?;
        self.inner.remove_dir_all(path)
    }
    fn sync_dir(&self, path: &Path) -> Result<()> {
        self.tick(path)?;
        self.inner.sync_dir(path)
    }
    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn map(&self, path: &Path) -> Result<Buffer> {
        self.inner.map(path)
    }
    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        self.inner.list_dir(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn lock_exclusive(&self, path: &Path, db_path: &Path) -> Result<LockGuard> {
        self.inner.lock_exclusive(path, db_path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exercise(fs: &dyn Vfs, root: &Path) {
        let dir = root.join("d");
        fs.create_dir_all(&dir).unwrap();
        let a = dir.join("a");
        fs.write_file(&a, &[b"hello ", b"world"], true).unwrap();
        assert_eq!(fs.read(&a).unwrap(), b"hello world");
        let m = fs.map(&a).unwrap();
        assert_eq!(m.as_slice(), b"hello world");
        assert_eq!(m.as_ptr() as usize % 64, 0);
        let b = dir.join("b");
        fs.rename(&a, &b).unwrap();
        assert!(!fs.exists(&a));
        assert_eq!(fs.list_dir(&dir).unwrap(), vec!["b".to_string()]);
        fs.sync_dir(&dir).unwrap();
        fs.remove_file(&b).unwrap();
        fs.remove_file(&b).unwrap();
        assert!(fs.list_dir(&dir).unwrap().is_empty());
        fs.remove_dir_all(&dir).unwrap();
        assert!(!fs.exists(&dir));
    }

    #[test]
    fn os_and_mem_behave_alike() {
        let t = tempfile::tempdir().unwrap();
        exercise(&OsFs, t.path());
        exercise(&MemFs::new(), Path::new("/mem"));
    }

    #[test]
    fn os_lock_is_exclusive() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("LOCK");
        let g = OsFs.lock_exclusive(&p, t.path()).unwrap();
        assert!(matches!(OsFs.lock_exclusive(&p, t.path()), Err(Error::Locked { .. })));
        drop(g);
        OsFs.lock_exclusive(&p, t.path()).unwrap();
    }

    #[test]
    fn fault_fs_fails_from_the_nth_op() {
        let mem: Arc<dyn Vfs> = Arc::new(MemFs::new());
        let f = FaultFs::new(mem.clone(), 1, FaultKind::Torn);
        f.write_file(Path::new("/x"), &[b"abcd"], true).unwrap();
        assert!(f.write_file(Path::new("/y"), &[b"abcd"], true).is_err());
        assert_eq!(mem.read(Path::new("/y")).unwrap(), b"ab");
        assert!(f.remove_file(Path::new("/x")).is_err());
        assert!(mem.exists(Path::new("/x")));
    }
}
