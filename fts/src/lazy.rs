//! A directory that can commit without syncing.
//!
//! [`LazyDir`] wraps tantivy's `MmapDirectory`. While *lazy* (during
//! [`crate::FtsIndex::commit_unsynced`]) the files tantivy writes — segment files, `meta.json`
//! and its own bookkeeping — are written and renamed but not fsynced, and their paths are
//! remembered; [`LazyDir::sync_pending`] later fsyncs every remembered file that still exists
//! and the directory, so a durable commit that follows covers everything it refers to.
//! A killed process loses nothing (the page cache survives it); a power failure can leave
//! the files of unsynced commits torn, which the owner must detect (a marker file written
//! before the first unsynced commit, and `Index::validate_checksum` at open).

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use tantivy::Directory;
use tantivy::directory::error::{DeleteError, LockError, OpenReadError, OpenWriteError};
use tantivy::directory::{
    AntiCallToken, DirectoryLock, FileHandle, Lock, MmapDirectory, TerminatingWrite, WatchCallback,
    WatchHandle, WritePtr,
};

/// Shared between the clones tantivy makes of a directory.
#[derive(Debug, Default)]
struct State {
    lazy: AtomicBool,
    unsynced: Mutex<BTreeSet<PathBuf>>,
}

/// `MmapDirectory` with optional deferred syncing (see the module docs).
#[derive(Clone, Debug)]
pub(crate) struct LazyDir {
    inner: MmapDirectory,
    root: PathBuf,
    state: Arc<State>,
}

impl LazyDir {
    pub(crate) fn open(root: &Path) -> tantivy::Result<LazyDir> {
        Ok(LazyDir {
            inner: MmapDirectory::open(root)?,
            root: root.to_path_buf(),
            state: Arc::default(),
        })
    }

    /// Runs `f` with syncing deferred.
    pub(crate) fn lazily<T>(&self, f: impl FnOnce() -> T) -> T {
        self.state.lazy.store(true, Ordering::Release);
        let r = f();
        self.state.lazy.store(false, Ordering::Release);
        r
    }

    /// Fsyncs every file written lazily that still exists, then the directory.
    pub(crate) fn sync_pending(&self) -> io::Result<()> {
        let pending: Vec<PathBuf> = self.state.unsynced.lock().iter().cloned().collect();
        if pending.is_empty() {
            return Ok(());
        }
        for p in &pending {
            match File::open(self.root.join(p)) {
                Ok(f) => f.sync_data()?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        self.inner.sync_directory()?;
        let mut set = self.state.unsynced.lock();
        for p in pending {
            set.remove(&p);
        }
        Ok(())
    }

    fn is_lazy(&self) -> bool {
        self.state.lazy.load(Ordering::Acquire)
    }

    fn remember(&self, path: &Path) {
        self.state.unsynced.lock().insert(path.to_path_buf());
    }
}

/// A file written without a sync at its end.
struct UnsyncedFile(File);

impl Write for UnsyncedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl TerminatingWrite for UnsyncedFile {
    fn terminate_ref(&mut self, _: AntiCallToken) -> io::Result<()> {
        self.0.flush()
    }
}

/// Puts `tmp` in the place of `dst`, atomically (a reader of `dst` sees the old bytes or the
/// new ones).
///
/// Linux: when `dst` exists, the two names are exchanged (`renameat2` with
/// `RENAME_EXCHANGE`), so `tmp` keeps the old file and the next lazy write of the same
/// file rewrites it in place: no inode is allocated or freed. Tantivy rewrites its list of
/// managed files (`.managed.json`) for every new file and `meta.json` at every commit, a
/// refresh's segment has six files, and each rename freed an inode that ext4 then scans
/// past when it allocates the next (`recently_deleted` in a profile of `fts-upkeep --rows
/// 20000 --ops 200`: creating files was 36 % of its samples, the atomic writes 34 %).
/// Elsewhere, or if the exchange fails (no `dst` yet, a file system without it), a rename.
fn replace(tmp: &Path, dst: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if exchange(tmp, dst).is_ok() {
        return Ok(());
    }
    std::fs::rename(tmp, dst)
}

/// Exchanges the files at `a` and `b` atomically (both must exist).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let a = std::ffi::CString::new(a.as_os_str().as_bytes())?;
    let b = std::ffi::CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: `a` and `b` are NUL-terminated strings that outlive the call, which only reads
    // them; `AT_FDCWD` resolves them as `rename(2)` would.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

impl Directory for LazyDir {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.inner.get_file_handle(path)
    }
    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }
    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }
    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        if !self.is_lazy() {
            return self.inner.open_write(path);
        }
        let file = OpenOptions::new().write(true).create_new(true).open(self.root.join(path));
        let file = file.map_err(|e| {
            if e.kind() == io::ErrorKind::AlreadyExists {
                OpenWriteError::FileAlreadyExists(path.to_path_buf())
            } else {
                OpenWriteError::wrap_io_error(e, path.to_path_buf())
            }
        })?;
        self.remember(path);
        Ok(BufWriter::new(Box::new(UnsyncedFile(file))))
    }
    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }
    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        if !self.is_lazy() {
            return self.inner.atomic_write(path, data);
        }
        let full = self.root.join(path);
        let tmp = full.with_extension("lazy-tmp");
        std::fs::write(&tmp, data)?;
        replace(&tmp, &full)?;
        self.remember(path);
        Ok(())
    }
    fn sync_directory(&self) -> io::Result<()> {
        if self.is_lazy() { Ok(()) } else { self.inner.sync_directory() }
    }
    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        self.inner.acquire_lock(lock)
    }
    fn watch(&self, watch_callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(watch_callback)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lazy_atomic_writes_replace_the_file_and_reuse_the_old_one() {
        let dir = tempfile::tempdir().unwrap();
        let d = LazyDir::open(dir.path()).unwrap();
        let path = Path::new("meta.json");
        let tmp = dir.path().join("meta.lazy-tmp");
        // The first write has nothing to exchange with: a rename.
        d.lazily(|| d.atomic_write(path, b"one")).unwrap();
        assert_eq!(d.atomic_read(path).unwrap(), b"one");
        assert!(!tmp.exists());
        for (i, data) in [&b"two, longer"[..], b"3", b"four"].into_iter().enumerate() {
            #[cfg(target_os = "linux")]
            let before = {
                use std::os::unix::fs::MetadataExt;
                std::fs::metadata(dir.path().join(path)).unwrap().ino()
            };
            d.lazily(|| d.atomic_write(path, data)).unwrap();
            assert_eq!(d.atomic_read(path).unwrap(), data, "write {i}");
            // Linux: the replaced file is kept as the next write's temporary file.
            #[cfg(target_os = "linux")]
            {
                use std::os::unix::fs::MetadataExt;
                assert_eq!(std::fs::metadata(&tmp).unwrap().ino(), before, "write {i}");
            }
        }
        // Remembered for the next sync, which finds every file.
        assert!(d.state.unsynced.lock().contains(path));
        d.sync_pending().unwrap();
        assert!(d.state.unsynced.lock().is_empty());
        // Outside a lazy section the wrapped directory writes (and syncs) it.
        d.atomic_write(path, b"five").unwrap();
        assert_eq!(d.atomic_read(path).unwrap(), b"five");
    }
}
