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
    /// Opens `path` for appending, creating it empty if it does not exist.
    fn open_append(&self, path: &Path) -> Result<Box<dyn AppendFile>>;
}

/// A file written only at its end (the write-ahead log).
pub trait AppendFile: Send + Sync + Debug {
    /// Appends `data` with one write (visible to other processes once it returns).
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Makes everything appended so far durable (`fdatasync`).
    fn sync(&mut self) -> Result<()>;
    /// Current length in bytes.
    fn len(&self) -> u64;
    /// True when nothing has been written.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A handle that syncs this file without borrowing it, so appends can go on while a
    /// sync runs (group commit).
    fn syncer(&self) -> Result<Arc<dyn SyncFile>>;
}

/// Syncs a file that another handle appends to.
pub trait SyncFile: Send + Sync + Debug {
    /// Makes everything appended before the call durable.
    fn sync(&self) -> Result<()>;
}

#[derive(Debug)]
struct OsSync {
    file: File,
    path: PathBuf,
}

impl SyncFile for OsSync {
    fn sync(&self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e))
    }
}

#[derive(Debug)]
struct OsAppend {
    file: File,
    path: PathBuf,
    len: u64,
}

impl AppendFile for OsAppend {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.file.write_all(data).map_err(|e| Error::io("append", &self.path, e))?;
        self.len += data.len() as u64;
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e))
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn syncer(&self) -> Result<Arc<dyn SyncFile>> {
        let file = self.file.try_clone().map_err(|e| Error::io("dup", &self.path, e))?;
        Ok(Arc::new(OsSync { file, path: self.path.clone() }))
    }
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

    fn open_append(&self, path: &Path) -> Result<Box<dyn AppendFile>> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| Error::io("open for append", path, e))?;
        let len = file.metadata().map_err(|e| Error::io("stat", path, e))?.len();
        Ok(Box::new(OsAppend { file, path: path.to_path_buf(), len }))
    }
}

/// An in-memory file system: the backing of `:memory:` databases and of many tests.
///
/// Files are stored as immutable 64-byte-aligned [`Buffer`]s, so `map` is a cheap clone.
/// Clones share the same files.
#[derive(Debug, Default, Clone)]
pub struct MemFs(Arc<MemInner>);

#[derive(Debug, Default)]
struct MemInner {
    files: Mutex<BTreeMap<PathBuf, Buffer>>,
    dirs: Mutex<std::collections::BTreeSet<PathBuf>>,
    /// Bytes of each file known to be durable (written with sync, or synced since).
    synced: Mutex<BTreeMap<PathBuf, usize>>,
}

impl MemFs {
    /// A new, empty in-memory file system.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces a file's bytes (tests use this to damage files).
    pub fn put(&self, path: &Path, bytes: &[u8]) {
        self.0.files.lock().insert(path.to_path_buf(), aligned(bytes));
    }

    /// Simulates a power loss: every file keeps only the bytes that were synced; files never
    /// synced disappear. (Renames count as durable once done: the directory fsync that makes
    /// them so is always issued right after, by the code under test.)
    pub fn lose_unsynced_writes(&self) {
        let synced = self.0.synced.lock();
        let mut files = self.0.files.lock();
        let paths: Vec<PathBuf> = files.keys().cloned().collect();
        for p in paths {
            match synced.get(&p) {
                None => {
                    files.remove(&p);
                }
                Some(&n) => {
                    let b = &files[&p];
                    if b.len() > n {
                        let kept = aligned(&b.as_slice()[..n]);
                        files.insert(p, kept);
                    }
                }
            }
        }
    }

    fn append_bytes(&self, path: &Path, data: &[u8]) -> usize {
        let mut files = self.0.files.lock();
        let old = files.get(path).map(|b| b.as_slice().to_vec()).unwrap_or_default();
        let mut all = old;
        all.extend_from_slice(data);
        let len = all.len();
        files.insert(path.to_path_buf(), aligned(&all));
        len
    }
}

#[derive(Debug)]
struct MemAppend {
    fs: MemFs,
    path: PathBuf,
    len: u64,
}

impl AppendFile for MemAppend {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        self.len = self.fs.append_bytes(&self.path, data) as u64;
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.fs.0.synced.lock().insert(self.path.clone(), self.len as usize);
        Ok(())
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn syncer(&self) -> Result<Arc<dyn SyncFile>> {
        Ok(Arc::new(MemSync { fs: self.fs.clone(), path: self.path.clone() }))
    }
}

#[derive(Debug)]
struct MemSync {
    fs: MemFs,
    path: PathBuf,
}

impl SyncFile for MemSync {
    fn sync(&self) -> Result<()> {
        // Everything appended so far becomes durable (as with fdatasync).
        let len = self.fs.0.files.lock().get(&self.path).map_or(0, |b| b.len());
        self.fs.0.synced.lock().insert(self.path.clone(), len);
        Ok(())
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
        let mut dirs = self.0.dirs.lock();
        for a in path.ancestors() {
            dirs.insert(a.to_path_buf());
        }
        Ok(())
    }

    fn write_file(&self, path: &Path, parts: &[&[u8]], sync: bool) -> Result<()> {
        let len = parts.iter().map(|p| p.len()).sum();
        let mut m = MutableBuffer::with_capacity(len);
        for p in parts {
            m.extend_from_slice(p);
        }
        self.0.files.lock().insert(path.to_path_buf(), m.into());
        let mut synced = self.0.synced.lock();
        if sync {
            synced.insert(path.to_path_buf(), len);
        } else {
            synced.remove(path);
        }
        Ok(())
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut files = self.0.files.lock();
        let b = files.remove(from).ok_or_else(|| Error::io("rename", from, not_found(from)))?;
        files.insert(to.to_path_buf(), b);
        let mut synced = self.0.synced.lock();
        match synced.remove(from) {
            Some(n) => synced.insert(to.to_path_buf(), n),
            None => synced.remove(to),
        };
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        self.0.files.lock().remove(path);
        self.0.synced.lock().remove(path);
        Ok(())
    }

    fn remove_dir_all(&self, path: &Path) -> Result<()> {
        self.0.files.lock().retain(|p, _| !p.starts_with(path));
        self.0.dirs.lock().retain(|p| !p.starts_with(path));
        Ok(())
    }

    fn sync_dir(&self, _path: &Path) -> Result<()> {
        Ok(())
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>> {
        let files = self.0.files.lock();
        let b = files.get(path).ok_or_else(|| Error::io("read", path, not_found(path)))?;
        Ok(b.as_slice().to_vec())
    }

    fn map(&self, path: &Path) -> Result<Buffer> {
        let files = self.0.files.lock();
        files.get(path).cloned().ok_or_else(|| Error::io("open", path, not_found(path)))
    }

    fn list_dir(&self, path: &Path) -> Result<Vec<String>> {
        let mut out: Vec<String> = Vec::new();
        let files = self.0.files.lock();
        let dirs = self.0.dirs.lock();
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
        self.0.files.lock().contains_key(path) || self.0.dirs.lock().contains(path)
    }

    fn lock_exclusive(&self, _path: &Path, _db_path: &Path) -> Result<LockGuard> {
        Ok(LockGuard::new(()))
    }

    fn open_append(&self, path: &Path) -> Result<Box<dyn AppendFile>> {
        let len = self.0.files.lock().get(path).map_or(0, |b| b.len() as u64);
        if len == 0 {
            self.append_bytes(path, &[]);
        }
        Ok(Box::new(MemAppend { fs: self.clone(), path: path.to_path_buf(), len }))
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
    remaining: Arc<AtomicU64>,
    kind: FaultKind,
}

impl FaultFs {
    /// Fails mutating operation number `n` (0-based) and all later ones.
    pub fn new(inner: Arc<dyn Vfs>, n: u64, kind: FaultKind) -> Self {
        Self { inner, remaining: Arc::new(AtomicU64::new(n)), kind }
    }

    fn tick(&self, path: &Path) -> Result<()> {
        tick(&self.remaining, path)
    }
}

fn tick(remaining: &AtomicU64, path: &Path) -> Result<()> {
    let prev = remaining
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |r| Some(r.saturating_sub(1)))
        .unwrap_or(0);
    if prev == 0 {
        return Err(Error::io("injected fault", path, std::io::Error::other("injected fault")));
    }
    Ok(())
}

#[derive(Debug)]
struct FaultAppend {
    inner: Box<dyn AppendFile>,
    remaining: Arc<AtomicU64>,
    kind: FaultKind,
    path: PathBuf,
}

impl AppendFile for FaultAppend {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        if let Err(e) = tick(&self.remaining, &self.path) {
            if self.kind == FaultKind::Torn {
                let _ = self.inner.append(&data[..data.len() / 2]);
            }
            return Err(e);
        }
        self.inner.append(data)
    }
    fn sync(&mut self) -> Result<()> {
        tick(&self.remaining, &self.path)?;
        self.inner.sync()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn syncer(&self) -> Result<Arc<dyn SyncFile>> {
        Ok(Arc::new(FaultSync {
            inner: self.inner.syncer()?,
            remaining: self.remaining.clone(),
            path: self.path.clone(),
        }))
    }
}

#[derive(Debug)]
struct FaultSync {
    inner: Arc<dyn SyncFile>,
    remaining: Arc<AtomicU64>,
    path: PathBuf,
}

impl SyncFile for FaultSync {
    fn sync(&self) -> Result<()> {
        tick(&self.remaining, &self.path)?;
        self.inner.sync()
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
    fn open_append(&self, path: &Path) -> Result<Box<dyn AppendFile>> {
        self.tick(path)?;
        let inner = self.inner.open_append(path)?;
        Ok(Box::new(FaultAppend {
            inner,
            remaining: self.remaining.clone(),
            kind: self.kind,
            path: path.to_path_buf(),
        }))
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
        let w = dir.join("w");
        let mut a = fs.open_append(&w).unwrap();
        a.append(b"ab").unwrap();
        a.append(b"cd").unwrap();
        a.sync().unwrap();
        assert_eq!(a.len(), 4);
        drop(a);
        let mut a = fs.open_append(&w).unwrap();
        assert_eq!(a.len(), 4);
        a.append(b"e").unwrap();
        assert_eq!(fs.read(&w).unwrap(), b"abcde");
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
    fn mem_fs_power_loss_keeps_only_synced_bytes() {
        let fs = MemFs::new();
        fs.write_file(Path::new("/a"), &[b"synced"], true).unwrap();
        fs.write_file(Path::new("/b"), &[b"not synced"], false).unwrap();
        let mut w = fs.open_append(Path::new("/w")).unwrap();
        w.append(b"12").unwrap();
        w.sync().unwrap();
        w.append(b"34").unwrap();
        fs.lose_unsynced_writes();
        assert_eq!(fs.read(Path::new("/a")).unwrap(), b"synced");
        assert!(!fs.exists(Path::new("/b")));
        assert_eq!(fs.read(Path::new("/w")).unwrap(), b"12");
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
