//! A directory that can commit without syncing.
//!
//! [`LazyDir`] wraps tantivy's `MmapDirectory`. While *lazy* (during
//! [`crate::FtsIndex::commit_unsynced`]) the files tantivy writes — segment files, `meta.json`
//! and its own bookkeeping — are written and renamed but not fsynced, and their paths are
//! remembered; [`LazyDir::sync_pending`] later fsyncs every remembered file that still exists
//! and the directory, so a durable commit that follows covers everything it refers to.
//! A killed process loses nothing (the page cache survives it); a power failure can leave
//! the files of unsynced commits torn, which the owner must detect (a marker file written
//! before the first unsynced commit, and the checksums checked at open).
//!
//! Tantivy's own JSON files (`meta.json`, `.managed.json`) carry no checksum. Every
//! atomic write of one here ends in a *checksum trailer* made of JSON whitespace (so
//! tantivy's parser, which allows trailing whitespace, reads the file unchanged): the
//! marker [`TRAILER_MARK`], then the CRC-32C of the bytes before the trailer as sixteen
//! whitespace characters, two bits each. [`LazyDir::atomic_read`] checks it and reports a
//! mismatch as damage; a file without the marker (written before the trailer existed)
//! is read as it is.

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

/// Starts the checksum trailer of an atomically written file (see the module docs).
const TRAILER_MARK: &[u8; 8] = b"\n \t\t \t \t";
/// The four whitespace characters that carry two bits each of the trailer's CRC.
const TRAILER_DIGITS: [u8; 4] = [b' ', b'\t', b'\r', b'\n'];
/// Bytes of a trailer.
const TRAILER_LEN: usize = TRAILER_MARK.len() + 16;

/// `data` followed by its checksum trailer.
fn with_trailer(data: &[u8]) -> Vec<u8> {
    let crc = crc32c::crc32c(data);
    let mut out = Vec::with_capacity(data.len() + TRAILER_LEN);
    out.extend_from_slice(data);
    out.extend_from_slice(TRAILER_MARK);
    out.extend((0..16).map(|i| TRAILER_DIGITS[((crc >> (2 * i)) & 3) as usize]));
    out
}

/// Checks and strips the checksum trailer of `bytes`; a file without one is returned as
/// it is. `Err` says why the bytes are damaged.
fn strip_trailer(mut bytes: Vec<u8>) -> Result<Vec<u8>, &'static str> {
    let Some(at) = bytes.len().checked_sub(TRAILER_LEN) else { return Ok(bytes) };
    if &bytes[at..at + TRAILER_MARK.len()] != TRAILER_MARK {
        return Ok(bytes);
    }
    let mut crc = 0u32;
    for (i, b) in bytes[at + TRAILER_MARK.len()..].iter().enumerate() {
        let d = TRAILER_DIGITS.iter().position(|d| d == b).ok_or("a damaged checksum trailer")?;
        crc |= (d as u32) << (2 * i);
    }
    if crc32c::crc32c(&bytes[..at]) != crc {
        return Err("checksum mismatch");
    }
    bytes.truncate(at);
    Ok(bytes)
}

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
        strip_trailer(self.inner.atomic_read(path)?).map_err(|why| OpenReadError::IoError {
            io_error: Arc::new(io::Error::new(io::ErrorKind::InvalidData, why)),
            filepath: path.to_path_buf(),
        })
    }
    fn atomic_write(&self, path: &Path, data: &[u8]) -> io::Result<()> {
        let data = &with_trailer(data)[..];
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
    fn json_files_carry_a_whitespace_checksum_that_catches_every_flipped_byte() {
        let json = br#"{"segments": [], "opstamp": 12}"#.to_vec();
        let written = with_trailer(&json);
        assert!(serde_json::from_slice::<serde_json::Value>(&written).is_ok());
        assert_eq!(strip_trailer(written.clone()), Ok(json.clone()));
        assert_eq!(strip_trailer(json.clone()), Ok(json.clone()), "files from before");
        for i in 0..written.len() {
            for bit in 0..8 {
                let mut bad = written.clone();
                bad[i] ^= 1 << bit;
                // Damage to the content or the checksum is reported; a flip inside the marker
                // leaves the content intact, read as a file without a trailer.
                let in_marker = (json.len()..json.len() + TRAILER_MARK.len()).contains(&i);
                match strip_trailer(bad) {
                    Err(_) => assert!(!in_marker),
                    Ok(back) => {
                        assert!(in_marker, "flip at {i} bit {bit} went unnoticed");
                        assert_eq!(back[..json.len()], json[..]);
                    }
                }
            }
        }
    }

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
