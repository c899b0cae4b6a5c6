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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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
    /// Opens `path` (created empty if missing, never truncated) for [`SlotFile::overwrite`]:
    /// kept open by its caller, so each rewrite is one positioned write with no open or
    /// close.
    fn open_slot(&self, path: &Path) -> Result<Box<dyn SlotFile>>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &Path, to: &Path) -> Result<()>;
    /// Removes a file; a missing file is not an error.
    fn remove_file(&self, path: &Path) -> Result<()>;
    /// Removes a directory if it is empty and says whether it is gone (a missing directory
    /// is not an error; a non-empty one stays, with `false`). There is no recursive
    /// removal: the store deletes only files it can name as its own (`owned`).
    fn remove_dir(&self, path: &Path) -> Result<bool>;
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
    /// Creates `path` as a new, empty log file (replacing any file of that name), written
    /// only at its logical end through the returned handle.
    fn create_log(&self, path: &Path) -> Result<Box<dyn AppendFile>>;
    /// Whether paths name real files of the operating system (so that other libraries, such
    /// as the full-text index, can keep their files there); in-memory file systems say no.
    fn native(&self) -> bool {
        false
    }
}

/// Smallest step by which a log file is preallocated.
const PREALLOC_MIN: u64 = 64 * 1024;
/// Largest step by which a log file is preallocated.
const PREALLOC_MAX: u64 = 4 * 1024 * 1024;

/// The physical size a log file of `cap` bytes grows to when `needed` bytes must fit:
/// doubling steps between `min_step` and `max_step`, in whole 4 KiB pages.
fn prealloc_target(cap: u64, needed: u64, min_step: u64, max_step: u64) -> u64 {
    let step = cap.clamp(min_step, max_step);
    needed.max(cap + step).div_ceil(4096) * 4096
}

/// A file written only at its logical end (the write-ahead log).
///
/// The file is *preallocated*: it is extended ahead of the data by writing zero bytes, in
/// growing steps, so that appends overwrite blocks the file system already allocated — a
/// `write(2)` then needs no block allocation and an `fdatasync` no inode update (the file
/// size does not change), as with SQLite's reused WAL file. Past the logical end the file
/// reads as zeros; readers of the log treat an all-zero tail as its clean end. A log that
/// is never synced is preallocated too: an extending write pays its own inode update. The
/// zero-fill steps are written by the append that needs them (a thread writing them ahead
/// was no faster with the writers' cores busy). Measurements:
/// `docs/design/write-path.md`, *The log file*.
pub trait AppendFile: Send + Sync + Debug {
    /// Appends `data` at the logical end (one positioned write or, for the OS's files on
    /// unix, a copy into a mapping of the file; after a zero-fill extension when the
    /// preallocated space is used up); visible to other processes once it returns.
    fn append(&mut self, data: &[u8]) -> Result<()>;
    /// Makes everything appended so far durable (`fdatasync`).
    fn sync(&mut self) -> Result<()>;
    /// Logical length in bytes (what was appended; the file may be longer).
    fn len(&self) -> u64;
    /// True when nothing has been written.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// A handle that syncs this file without borrowing it, so appends can go on while a
    /// sync runs (group commit).
    fn syncer(&self) -> Result<Arc<dyn SyncFile>>;
}

/// A small file rewritten in place from its start (a pending-manifest slot).
pub trait SlotFile: Send + Sync + Debug {
    /// Writes `data` at the start of the file without truncating and without syncing: bytes
    /// past `data.len()` keep their old contents. No new inode, no rename, no open, so it
    /// costs about one page-cache write.
    fn overwrite(&mut self, data: &[u8]) -> Result<()>;
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
    /// The log's [`OsAppend::synced`].
    synced: Arc<AtomicBool>,
}

impl SyncFile for OsSync {
    fn sync(&self) -> Result<()> {
        self.synced.store(true, Ordering::Relaxed);
        self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e))
    }
}

#[derive(Debug)]
struct OsAppend {
    file: File,
    path: PathBuf,
    /// Logical length.
    len: u64,
    /// Physical length (zeros past `len`).
    cap: u64,
    /// Unix: a window of the file from byte `base` (the logical length when it was
    /// mapped), shared and writable, at least [`MAP_WINDOW`] bytes of address space; only
    /// its bytes below `cap` are ever touched. An append is then a copy into the page
    /// cache: the same pages a `pwrite` fills, without the system call (see
    /// [`OsAppend::append`]). `None` elsewhere, or if mapping failed: appends are
    /// positioned writes.
    map: Option<(u64, memmap2::MmapMut)>,
    /// Set once the log has been synced (through this handle or a syncer): from then on
    /// appends are positioned writes and the mapping is given up. Used because a copy into
    /// a page an `fdatasync` wrote back costs a write fault through the file system
    /// (`page_mkwrite`), which made power-safe commits slower than `pwrite`. A log lives
    /// until the next flush, so a database that syncs now and then goes back to copies
    /// with its next log.
    synced: Arc<AtomicBool>,
}

impl OsAppend {
    fn new(file: File, path: &Path) -> OsAppend {
        let synced = Arc::new(AtomicBool::new(false));
        OsAppend { file, path: path.to_path_buf(), len: 0, cap: 0, map: None, synced }
    }

    /// After the file grew from `old_cap` to `cap`: maps a window of the file from `len`
    /// (if the current one does not reach `cap`) and fills the page tables of the new
    /// bytes.
    #[cfg(unix)]
    fn grown(&mut self, old_cap: u64) {
        if self.synced.load(Ordering::Relaxed) {
            self.map = None;
            return;
        }
        let fits = self.map.as_ref().is_some_and(|(base, m)| self.cap <= base + m.len() as u64);
        if !fits {
            self.map = None;
            let Ok(n) = usize::try_from(MAP_WINDOW.max(self.cap - self.len)) else { return };
            // SAFETY: the window may reach past the end of the file, but only bytes below
            // `cap` are ever accessed (an append copies to `len..end` with `end <= cap`),
            // and the file has those (written as zeros just before), so no access faults
            // unless another process shrinks the file — which the database's exclusive
            // writer lock rules out for cooperating processes (others open logs read-only
            // and never truncate them). The file is only written through this handle, and
            // only past `len`, so no one else writes the mapped bytes while we copy into
            // them; bytes behind `len` are not touched again. (`MmapOptions` takes an
            // unaligned offset.)
            let map =
                unsafe { memmap2::MmapOptions::new().offset(self.len).len(n).map_mut(&self.file) };
            let Ok(map) = map else { return };
            self.map = Some((self.len, map));
        }
        // Linux: page tables of the new bytes filled writable now, on the growth's (rare)
        // slow path, not by a write fault at the first copy into each page. Best effort: a
        // failure leaves the pages to fault. (Only bytes the file has: never past `cap`.)
        #[cfg(target_os = "linux")]
        if let Some((base, m)) = &self.map {
            let from = old_cap.max(*base) - base;
            if let (Ok(from), Ok(n)) =
                (usize::try_from(from), usize::try_from(self.cap - base - from))
            {
                let _ = m.advise_range(memmap2::Advice::PopulateWrite, from, n);
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = old_cap;
    }
}

/// Bytes of a log file one mapping covers (address space only: pages past the file's end
/// are never touched). Growing within it costs no new mapping: a mapping per growth step
/// paid a `munmap` (a TLB shootdown of the other core) and an `mmap` per step, which ate
/// what the copies saved.
#[cfg(unix)]
const MAP_WINDOW: u64 = 64 << 20;

/// Writes `data` at `pos` (a positioned write: the file offset is not used).
fn write_at(file: &File, data: &[u8], pos: u64) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::os::unix::fs::FileExt::write_all_at(file, data, pos)
    }
    #[cfg(not(unix))]
    {
        use std::io::{Seek, SeekFrom};
        let mut f = file;
        f.seek(SeekFrom::Start(pos))?;
        f.write_all(data)
    }
}

impl AppendFile for OsAppend {
    /// Unix: a copy into the shared mapping of the preallocated space. It lands in the same
    /// page-cache pages a `pwrite` would fill, so it is as visible to readers and survives
    /// the process as soon as the copy is done, and `fdatasync` (of this or any handle of
    /// the file) writes it out the same way. What it saves is the system call (microseconds
    /// per record against a fraction of one for the copy). The zero-fill that grows the
    /// file stays a `pwrite`: it reserves the blocks, so a copy never needs an allocation
    /// (no out-of-space fault at a page's first write).
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let end = self.len + data.len() as u64;
        if end > self.cap {
            static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];
            let target = prealloc_target(self.cap, end, PREALLOC_MIN, PREALLOC_MAX);
            let mut at = self.cap;
            while at < target {
                let n = (target - at).min(ZEROS.len() as u64);
                write_at(&self.file, &ZEROS[..n as usize], at)
                    .map_err(|e| Error::io("preallocate", &self.path, e))?;
                at += n;
            }
            let old_cap = std::mem::replace(&mut self.cap, target);
            #[cfg(unix)]
            self.grown(old_cap);
        }
        let copy = !self.synced.load(Ordering::Relaxed);
        let mapped = self.map.as_mut().filter(|_| copy).and_then(|(base, m)| {
            let from = usize::try_from(self.len - *base).ok()?;
            m.get_mut(from..from + data.len())
        });
        match mapped {
            Some(dst) => dst.copy_from_slice(data),
            None => {
                write_at(&self.file, data, self.len)
                    .map_err(|e| Error::io("append", &self.path, e))?;
            }
        }
        self.len = end;
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.synced.store(true, Ordering::Relaxed);
        self.file.sync_data().map_err(|e| Error::io("fsync", &self.path, e))
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn syncer(&self) -> Result<Arc<dyn SyncFile>> {
        let file = self.file.try_clone().map_err(|e| Error::io("dup", &self.path, e))?;
        Ok(Arc::new(OsSync { file, path: self.path.clone(), synced: self.synced.clone() }))
    }
}

/// A held `flock`, released explicitly on drop: closing our descriptor alone would not
/// release it while a child process forked meanwhile still shares the open file description
/// (between its fork and exec), and a reopen right after close would then fail as Locked.
#[derive(Debug)]
struct OsLock(File);

impl Drop for OsLock {
    fn drop(&mut self) {
        // Unlocking applies to the open file description, whoever else refers to it. An
        // error leaves the lock to be released when the last descriptor closes.
        let _ = self.0.unlock();
    }
}

#[derive(Debug)]
struct OsSlot {
    file: File,
    path: PathBuf,
}

impl SlotFile for OsSlot {
    fn overwrite(&mut self, data: &[u8]) -> Result<()> {
        write_at(&self.file, data, 0).map_err(|e| Error::io("write", &self.path, e))
    }
}

/// The operating system's file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct OsFs;

impl Vfs for OsFs {
    fn native(&self) -> bool {
        true
    }

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

    fn open_slot(&self, path: &Path) -> Result<Box<dyn SlotFile>> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io("open", path, e))?;
        Ok(Box::new(OsSlot { file, path: path.to_path_buf() }))
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

    fn remove_dir(&self, path: &Path) -> Result<bool> {
        match std::fs::remove_dir(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => Ok(false),
            Err(e) => Err(Error::io("remove directory", path, e)),
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
            Ok(()) => Ok(LockGuard::new(OsLock(f))),
            Err(std::fs::TryLockError::WouldBlock) => {
                Err(Error::Locked { path: db_path.to_path_buf() })
            }
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("lock", path, e)),
        }
    }

    fn create_log(&self, path: &Path) -> Result<Box<dyn AppendFile>> {
        // Read access too: a shared writable mapping needs it.
        let file = OpenOptions::new()
            .create(true)
            .read(true)
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(|e| Error::io("create log file", path, e))?;
        Ok(Box::new(OsAppend::new(file, path)))
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
    /// The durable contents of each file (as of its last sync); files absent here were
    /// never synced.
    synced: Mutex<BTreeMap<PathBuf, Buffer>>,
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

    /// Simulates a power loss: every file reverts to its contents as of its last sync
    /// (writes after it are lost, overwrites of preallocated space included); files never
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
                Some(b) => {
                    files.insert(p, b.clone());
                }
            }
        }
    }

    /// Writes `data` at `pos`, first extending the file with zeros to `min_len` bytes.
    fn write_at(&self, path: &Path, pos: usize, data: &[u8], min_len: usize) {
        let mut files = self.0.files.lock();
        let mut all = files.get(path).map(|b| b.as_slice().to_vec()).unwrap_or_default();
        let end = pos + data.len();
        if all.len() < end.max(min_len) {
            all.resize(end.max(min_len), 0);
        }
        all[pos..end].copy_from_slice(data);
        files.insert(path.to_path_buf(), aligned(&all));
    }

    /// Records the current contents of `path` as durable.
    fn mark_synced(&self, path: &Path) {
        let now = self.0.files.lock().get(path).cloned();
        let mut synced = self.0.synced.lock();
        match now {
            Some(b) => synced.insert(path.to_path_buf(), b),
            None => synced.remove(path),
        };
    }
}

#[derive(Debug)]
struct MemSlot {
    fs: MemFs,
    path: PathBuf,
}

impl SlotFile for MemSlot {
    fn overwrite(&mut self, data: &[u8]) -> Result<()> {
        // The durable contents (if any) stay what they were: the write is not synced.
        self.fs.write_at(&self.path, 0, data, 0);
        Ok(())
    }
}

/// Preallocation steps of in-memory log files: small, so tests cross many extensions.
const MEM_PREALLOC_MIN: u64 = 4096;
const MEM_PREALLOC_MAX: u64 = 64 * 1024;

#[derive(Debug)]
struct MemAppend {
    fs: MemFs,
    path: PathBuf,
    len: u64,
    cap: u64,
}

impl AppendFile for MemAppend {
    fn append(&mut self, data: &[u8]) -> Result<()> {
        let end = self.len + data.len() as u64;
        if end > self.cap {
            self.cap = prealloc_target(self.cap, end, MEM_PREALLOC_MIN, MEM_PREALLOC_MAX);
        }
        self.fs.write_at(&self.path, self.len as usize, data, self.cap as usize);
        self.len = end;
        Ok(())
    }
    fn sync(&mut self) -> Result<()> {
        self.fs.mark_synced(&self.path);
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
        // Everything written so far becomes durable (as with fdatasync).
        self.fs.mark_synced(&self.path);
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
        let b: Buffer = m.into();
        self.0.files.lock().insert(path.to_path_buf(), b.clone());
        let mut synced = self.0.synced.lock();
        if sync {
            synced.insert(path.to_path_buf(), b);
        } else {
            synced.remove(path);
        }
        Ok(())
    }

    fn open_slot(&self, path: &Path) -> Result<Box<dyn SlotFile>> {
        // Like opening without truncation: an existing file keeps its bytes.
        self.write_at(path, 0, &[], 0);
        Ok(Box::new(MemSlot { fs: self.clone(), path: path.to_path_buf() }))
    }

    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        let mut files = self.0.files.lock();
        let b = files.remove(from).ok_or_else(|| Error::io("rename", from, not_found(from)))?;
        files.insert(to.to_path_buf(), b);
        let mut synced = self.0.synced.lock();
        match synced.remove(from) {
            Some(b) => synced.insert(to.to_path_buf(), b),
            None => synced.remove(to),
        };
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> Result<()> {
        self.0.files.lock().remove(path);
        self.0.synced.lock().remove(path);
        Ok(())
    }

    fn remove_dir(&self, path: &Path) -> Result<bool> {
        let files = self.0.files.lock();
        let mut dirs = self.0.dirs.lock();
        let inside = |p: &Path| p != path && p.starts_with(path);
        if files.keys().any(|p| inside(p)) || dirs.iter().any(|p| inside(p)) {
            return Ok(false);
        }
        dirs.remove(path);
        Ok(true)
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

    fn create_log(&self, path: &Path) -> Result<Box<dyn AppendFile>> {
        self.0.files.lock().insert(path.to_path_buf(), aligned(&[]));
        // The creation survives a power loss (the log syncs its directory right after), the
        // bytes written later only once synced: the file is empty until then.
        self.0.synced.lock().insert(path.to_path_buf(), aligned(&[]));
        Ok(Box::new(MemAppend { fs: self.clone(), path: path.to_path_buf(), len: 0, cap: 0 }))
    }
}

/// How [`FaultFs`] fails the chosen operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// The operation returns an error and has no effect.
    Error,
    /// A write (`write_file`, a log append, a slot overwrite) writes only the first half of
    /// its bytes, then errors (a torn write); other operations behave as
    /// [`FaultKind::Error`].
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

    /// Fails every mutating operation from now on (the point of failure chosen by the test
    /// as it runs, instead of by counting operations ahead).
    pub fn fail_from_now(&self) {
        self.remaining.store(0, Ordering::SeqCst);
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

/// One write through a fault-injecting handle: counted as an operation; when it is the one
/// to fail, a torn fault still writes the first half of `data`.
fn faulty_write(
    remaining: &AtomicU64,
    kind: FaultKind,
    path: &Path,
    data: &[u8],
    mut write: impl FnMut(&[u8]) -> Result<()>,
) -> Result<()> {
    if let Err(e) = tick(remaining, path) {
        if kind == FaultKind::Torn {
            let _ = write(&data[..data.len() / 2]);
        }
        return Err(e);
    }
    write(data)
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
        let inner = &mut self.inner;
        faulty_write(&self.remaining, self.kind, &self.path, data, |d| inner.append(d))
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
struct FaultSlot {
    inner: Box<dyn SlotFile>,
    remaining: Arc<AtomicU64>,
    kind: FaultKind,
    path: PathBuf,
}

impl SlotFile for FaultSlot {
    fn overwrite(&mut self, data: &[u8]) -> Result<()> {
        let inner = &mut self.inner;
        faulty_write(&self.remaining, self.kind, &self.path, data, |d| inner.overwrite(d))
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
    fn open_slot(&self, path: &Path) -> Result<Box<dyn SlotFile>> {
        // Opening creates at most an empty file, which readers of slots ignore: only the
        // writes count as operations that can fail.
        Ok(Box::new(FaultSlot {
            inner: self.inner.open_slot(path)?,
            remaining: self.remaining.clone(),
            kind: self.kind,
            path: path.to_path_buf(),
        }))
    }
    fn rename(&self, from: &Path, to: &Path) -> Result<()> {
        self.tick(from)?;
        self.inner.rename(from, to)
    }
    fn remove_file(&self, path: &Path) -> Result<()> {
        self.tick(path)?;
        self.inner.remove_file(path)
    }
    fn remove_dir(&self, path: &Path) -> Result<bool> {
        self.tick(path)?;
        self.inner.remove_dir(path)
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
    fn create_log(&self, path: &Path) -> Result<Box<dyn AppendFile>> {
        self.tick(path)?;
        let inner = self.inner.create_log(path)?;
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
        // Log files: appends land at the logical end, the rest reads as zeros; growth
        // past the preallocated space keeps earlier bytes; creating again starts empty.
        let w = dir.join("w");
        let mut a = fs.create_log(&w).unwrap();
        a.append(b"ab").unwrap();
        a.append(b"cd").unwrap();
        a.sync().unwrap();
        assert_eq!(a.len(), 4);
        let bytes = fs.read(&w).unwrap();
        assert_eq!(&bytes[..4], b"abcd");
        assert!(bytes.len() >= 4096 && bytes[4..].iter().all(|&b| b == 0));
        let big = vec![7u8; 3 * bytes.len()];
        a.append(&big).unwrap();
        a.append(b"e").unwrap();
        let bytes = fs.read(&w).unwrap();
        let end = 4 + big.len() + 1;
        assert_eq!(&bytes[..4], b"abcd");
        assert!(bytes[4..end - 1].iter().all(|&b| b == 7));
        assert_eq!(bytes[end - 1], b'e');
        assert!(bytes[end..].iter().all(|&b| b == 0));
        drop(a);
        let mut a = fs.create_log(&w).unwrap();
        assert_eq!(a.len(), 0);
        a.append(b"x").unwrap();
        assert_eq!(fs.read(&w).unwrap()[..2], *b"x\0");
        // Many records across several growth steps (one mapping window on unix), every
        // one readable at once, without a sync, from another handle of the file.
        let record =
            |i: usize| -> Vec<u8> { (0..1699 + i % 7).map(|j| (i * 31 + j) as u8).collect() };
        let mut want = b"x".to_vec();
        for i in 0..400 {
            a.append(&record(i)).unwrap();
            want.extend_from_slice(&record(i));
            if i % 97 == 0 {
                assert_eq!(fs.read(&w).unwrap()[..want.len()], want[..]);
            }
        }
        assert_eq!(a.len(), want.len() as u64);
        let bytes = fs.read(&w).unwrap();
        assert_eq!(bytes[..want.len()], want[..]);
        assert!(bytes[want.len()..].iter().all(|&b| b == 0));
        drop(a);
        assert_eq!(fs.read(&w).unwrap()[..want.len()], want[..]);
        assert!(!fs.remove_dir(&dir).unwrap(), "a directory with a file stays");
        fs.remove_file(&w).unwrap();
        assert!(fs.remove_dir(&dir).unwrap());
        assert!(!fs.exists(&dir));
    }

    #[test]
    fn os_and_mem_behave_alike() {
        let t = tempfile::tempdir().unwrap();
        exercise(&OsFs, t.path());
        exercise(&MemFs::new(), Path::new("/mem"));
    }

    /// On unix the log's appends go through the mapping (the shared test above checks the
    /// bytes; this that the mapped path is the one taken, and follows each growth).
    #[cfg(unix)]
    #[test]
    fn os_log_appends_are_copies_into_a_mapping() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("log");
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let mut a = OsAppend::new(file, &path);
        let window = |a: &OsAppend| a.map.as_ref().map(|(base, m)| (*base, m.len() as u64));
        a.append(b"abc").unwrap();
        assert_eq!(window(&a), Some((0, MAP_WINDOW)));
        // Growth inside the window keeps the mapping.
        let cap = a.cap;
        a.append(&vec![5u8; cap as usize]).unwrap();
        assert!(a.cap > cap);
        assert_eq!(window(&a), Some((0, MAP_WINDOW)));
        a.append(b"z").unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(&bytes[..3], b"abc");
        assert!(bytes[3..3 + cap as usize].iter().all(|&b| b == 5));
        assert_eq!(bytes[3 + cap as usize], b'z');
        // Growth past it maps a new window from the logical end.
        let len = a.len();
        a.append(&vec![6u8; MAP_WINDOW as usize]).unwrap();
        assert_eq!(window(&a), Some((len, MAP_WINDOW.max(a.cap - len))));
        a.append(b"y").unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let end = len as usize + MAP_WINDOW as usize;
        assert!(bytes[len as usize..end].iter().all(|&b| b == 6));
        assert_eq!(bytes[end], b'y');
        assert!(bytes[end + 1..].iter().all(|&b| b == 0));
        // Once synced (here through a syncer), positioned writes: the mapping is given up
        // at the next growth, and the bytes land all the same.
        a.syncer().unwrap().sync().unwrap();
        let len = a.len();
        a.append(b"w").unwrap();
        let cap = a.cap;
        a.append(&vec![8u8; cap as usize]).unwrap();
        assert!(a.map.is_none());
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes[len as usize], b'w');
        assert!(bytes[len as usize + 1..len as usize + 1 + cap as usize].iter().all(|&b| b == 8));
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
        let mut w = fs.create_log(Path::new("/w")).unwrap();
        w.append(b"12").unwrap();
        w.sync().unwrap();
        w.append(b"34").unwrap(); // into preallocated space: lost as well
        fs.lose_unsynced_writes();
        assert_eq!(fs.read(Path::new("/a")).unwrap(), b"synced");
        assert!(!fs.exists(Path::new("/b")));
        let w = fs.read(Path::new("/w")).unwrap();
        assert_eq!(&w[..4], b"12\0\0");
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
