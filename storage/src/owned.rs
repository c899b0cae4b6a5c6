//! Which files in a database directory are Basalt's, and the only ways the store deletes
//! files it no longer needs.
//!
//! Opening a directory, dropping a table and cleaning up after a crash must never delete
//! anything Basalt did not write. So nothing here removes a directory tree blindly: a
//! file is removed only when its name is one Basalt gives its own files (segment and
//! delete files, full-text index files and markers), and a directory only once it is
//! empty. A file of any other name — a user's notes put into a table directory, say —
//! keeps its directory too.
//!
//! This module also decides what an existing directory without a `MANIFEST` is
//! ([`classify_without_manifest`]): empty (a new database may be created there), a
//! damaged Basalt database, or something else entirely; the store refuses to open the
//! last two rather than start an empty database over them.

use std::path::Path;

use crate::error::Result;
use crate::io::Vfs;
use crate::manifest::{MANIFEST_PENDING, MANIFEST_TMP};
use crate::wal::WAL_DIR;

/// Directory of named checkpoints inside a database directory.
pub const CHECKPOINT_DIR: &str = "checkpoints";

/// Name of the writer-lock file inside a database directory.
pub const LOCK_FILE: &str = "LOCK";

/// `s<16 hex digits>` followed by `rest`.
fn segment_named(name: &str, rest: impl FnOnce(&str) -> bool) -> bool {
    let Some(tail) = name.strip_prefix('s') else { return false };
    tail.len() > 16 && tail.as_bytes()[..16].iter().all(u8::is_ascii_hexdigit) && rest(&tail[16..])
}

/// A segment file name: `s<segment id, 16 hex digits>.bsg`.
pub fn is_segment_file(name: &str) -> bool {
    segment_named(name, |rest| rest == ".bsg")
}

/// A delete file name: `s<segment id, 16 hex digits>.<generation>.del`.
pub fn is_delete_file(name: &str) -> bool {
    segment_named(name, |rest| {
        rest.strip_prefix('.')
            .and_then(|r| r.strip_suffix(".del"))
            .is_some_and(|g| !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// What a `fts-…` name inside a table directory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FtsName {
    /// `fts-<dir id>`: an index directory.
    Dir(u64),
    /// `fts-<dir id>.unclean` or `fts-<dir id>.lazy`: a marker file of that index.
    Marker(u64),
}

/// Parses the name of a full-text index directory or marker (`None`: not one).
pub fn fts_name(name: &str) -> Option<FtsName> {
    let rest = name.strip_prefix("fts-")?;
    let (id, marker) = match rest.split_once('.') {
        Some((id, "unclean" | "lazy")) => (id, true),
        Some(_) => return None,
        None => (rest, false),
    };
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let id = id.parse().ok()?;
    Some(if marker { FtsName::Marker(id) } else { FtsName::Dir(id) })
}

/// A file the full-text index (tantivy, and the lazy directory around it) writes inside
/// its directory: `meta.json`, `.managed.json`, tantivy's lock files, temporary files of
/// atomic writes, and segment component files `<32 hex digits>.<component>`.
pub fn is_index_file(name: &str) -> bool {
    if matches!(name, "meta.json" | ".managed.json")
        || (name.starts_with(".tantivy-") && name.ends_with(".lock"))
        || name.ends_with(".lazy-tmp")
        || name.starts_with(".tmp")
    {
        return true;
    }
    let (stem, ext) = name.split_once('.').unwrap_or((name, ""));
    stem.len() == 32 && stem.bytes().all(|b| b.is_ascii_hexdigit()) && !ext.is_empty()
}

/// A file Basalt writes directly inside a table directory (not counting index
/// directories): segment and delete files and index markers.
pub fn is_table_file(name: &str) -> bool {
    is_segment_file(name)
        || is_delete_file(name)
        || matches!(fts_name(name), Some(FtsName::Marker(_)))
}

/// The table id of a `t<digits>` directory name.
pub fn table_dir_id(name: &str) -> Option<u64> {
    let digits = name.strip_prefix('t')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// What to do with a file that is garbage: remove it, or (salvaging) move it aside.
pub type Dispose<'a> = dyn Fn(&Path) -> Result<()> + 'a;

/// Removes the files of a full-text index directory that the index wrote, then the
/// directory if that left it empty.
pub fn remove_index_dir(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    dispose_index_dir(vfs, dir, &|p| vfs.remove_file(p))
}

/// [`remove_index_dir`] with another way to dispose of each file.
pub fn dispose_index_dir(vfs: &dyn Vfs, dir: &Path, dispose: &Dispose<'_>) -> Result<()> {
    for f in vfs.list_dir(dir)? {
        if is_index_file(&f) {
            dispose(&dir.join(&f))?;
        }
    }
    vfs.remove_dir(dir)?;
    Ok(())
}

/// Removes what Basalt wrote in the table directory `dir` — segment and delete files
/// (unless `keep` says otherwise), index markers and index directories — then the
/// directory if that left it empty.
pub fn remove_table_dir(vfs: &dyn Vfs, dir: &Path, keep: &dyn Fn(&Path) -> bool) -> Result<()> {
    dispose_table_dir(vfs, dir, keep, &|p| vfs.remove_file(p))
}

/// [`remove_table_dir`] with another way to dispose of each file.
pub fn dispose_table_dir(
    vfs: &dyn Vfs,
    dir: &Path,
    keep: &dyn Fn(&Path) -> bool,
    dispose: &Dispose<'_>,
) -> Result<()> {
    for f in vfs.list_dir(dir)? {
        let p = dir.join(&f);
        match fts_name(&f) {
            Some(FtsName::Dir(_)) => dispose_index_dir(vfs, &p, dispose)?,
            Some(FtsName::Marker(_)) => dispose(&p)?,
            None if is_table_file(&f) && !keep(&p) => dispose(&p)?,
            None => {}
        }
    }
    vfs.remove_dir(dir)?;
    Ok(())
}

/// Folder (under the database) where SQL operators spill; each query runtime makes a
/// `datafusion-…` folder of temporary files in it, removed when the runtime ends.
pub const SPILL_DIR: &str = "spill";

/// Removes what a killed process left in the spill folder `dir`: the files of its
/// `datafusion-…` folders whose names are temporary files' (`.tmp…`), then those folders
/// and `dir` if that left them empty.
pub fn remove_spill_leftovers(vfs: &dyn Vfs, dir: &Path) -> Result<()> {
    for d in vfs.list_dir(dir)? {
        if !d.starts_with("datafusion-") {
            continue;
        }
        let sub = dir.join(&d);
        for f in vfs.list_dir(&sub)? {
            if f.starts_with(".tmp") {
                vfs.remove_file(&sub.join(&f))?;
            }
        }
        vfs.remove_dir(&sub)?;
    }
    vfs.remove_dir(dir)?;
    Ok(())
}

/// What an existing directory without a `MANIFEST` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Contents {
    /// Nothing, or only what an interrupted first open leaves (`LOCK`, `MANIFEST.tmp`):
    /// a new database may be created here.
    Empty,
    /// Files only a Basalt database has (log files, pending manifests, checkpoints, segment
    /// files in table directories), listed: the database lost its `MANIFEST`.
    Damaged(Vec<String>),
    /// Something else (the first entries, listed): not a Basalt database.
    Foreign(Vec<String>),
}

/// Looks at the directory `root`, which has no `MANIFEST` (see [`Contents`]).
pub fn classify_without_manifest(vfs: &dyn Vfs, root: &Path) -> Result<Contents> {
    let entries: Vec<String> =
        vfs.list_dir(root)?.into_iter().filter(|n| n != LOCK_FILE && n != MANIFEST_TMP).collect();
    if entries.is_empty() {
        return Ok(Contents::Empty);
    }
    let mut ours = Vec::new();
    for name in &entries {
        let p = root.join(name);
        let evidence = if MANIFEST_PENDING.contains(&name.as_str()) {
            true
        } else if name == WAL_DIR {
            vfs.list_dir(&p)?.iter().any(|f| f.ends_with(".wal"))
        } else if name == CHECKPOINT_DIR {
            vfs.list_dir(&p)?.iter().any(|f| f.ends_with(".manifest"))
        } else if table_dir_id(name).is_some() {
            vfs.list_dir(&p)?.iter().any(|f| is_segment_file(f) || fts_name(f).is_some())
        } else {
            false
        };
        if evidence {
            ours.push(name.clone());
        }
    }
    Ok(if ours.is_empty() {
        Contents::Foreign(entries.into_iter().take(5).collect())
    } else {
        Contents::Damaged(ours)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::MemFs;

    #[test]
    fn names_are_recognised_exactly() {
        assert!(is_segment_file("s00000000000000ff.bsg"));
        assert!(!is_segment_file("s00000000000000f.bsg"));
        assert!(!is_segment_file("s00000000000000zz.bsg"));
        assert!(!is_segment_file("notes.bsg"));
        assert!(is_delete_file("s00000000000000ff.3.del"));
        assert!(!is_delete_file("s00000000000000ff..del"));
        assert!(!is_delete_file("s00000000000000ff.x.del"));
        assert_eq!(fts_name("fts-12"), Some(FtsName::Dir(12)));
        assert_eq!(fts_name("fts-12.lazy"), Some(FtsName::Marker(12)));
        assert_eq!(fts_name("fts-12.unclean"), Some(FtsName::Marker(12)));
        assert_eq!(fts_name("fts-12.txt"), None);
        assert_eq!(fts_name("fts-"), None);
        assert_eq!(table_dir_id("t17"), Some(17));
        assert_eq!(table_dir_id("t"), None);
        assert_eq!(table_dir_id("tx1"), None);
        assert!(is_index_file("0123456789abcdef0123456789abcdef.idx"));
        assert!(is_index_file("0123456789abcdef0123456789abcdef.12.del"));
        assert!(is_index_file("meta.json"));
        assert!(!is_index_file("notes.txt"));
        assert!(!is_index_file("0123456789abcdef0123456789abcdef"));
    }

    #[test]
    fn only_our_files_and_then_empty_directories_are_removed() {
        let fs = MemFs::new();
        let t = Path::new("/db/t3");
        fs.put(&t.join("s0000000000000001.bsg"), b"x");
        fs.put(&t.join("s0000000000000001.2.del"), b"x");
        fs.put(&t.join("fts-4.lazy"), b"");
        fs.put(&t.join("fts-4/meta.json"), b"{}");
        fs.put(&t.join("fts-4/0123456789abcdef0123456789abcdef.term"), b"x");
        fs.put(&t.join("src/notes.txt"), b"precious");
        fs.put(&t.join("fts-5/mine.txt"), b"precious too");
        remove_table_dir(&fs, t, &|_| false).unwrap();
        let mut left = Vec::new();
        for d in ["", "src", "fts-4", "fts-5"] {
            for f in fs.list_dir(&t.join(d)).unwrap() {
                left.push(format!("{d}/{f}"));
            }
        }
        left.sort();
        assert_eq!(left, ["/fts-5", "/src", "fts-5/mine.txt", "src/notes.txt"]);
        assert!(!fs.exists(&t.join("fts-4")));

        let u = Path::new("/db/t4");
        fs.put(&u.join("s0000000000000002.bsg"), b"x");
        fs.put(&u.join("s0000000000000003.bsg"), b"x");
        remove_table_dir(&fs, u, &|p| p.ends_with("s0000000000000003.bsg")).unwrap();
        assert_eq!(fs.list_dir(u).unwrap(), ["s0000000000000003.bsg"]);
        remove_table_dir(&fs, u, &|_| false).unwrap();
        assert!(!fs.exists(u));
    }

    #[test]
    fn directories_without_a_manifest_are_told_apart() {
        let fs = MemFs::new();
        let root = Path::new("/d");
        fs.create_dir_all(root).unwrap();
        assert_eq!(classify_without_manifest(&fs, root).unwrap(), Contents::Empty);
        fs.put(&root.join(LOCK_FILE), b"");
        fs.put(&root.join(MANIFEST_TMP), b"half");
        assert_eq!(classify_without_manifest(&fs, root).unwrap(), Contents::Empty);
        fs.put(&root.join("t1/src/notes.txt"), b"precious");
        assert_eq!(
            classify_without_manifest(&fs, root).unwrap(),
            Contents::Foreign(vec!["t1".into()])
        );
        fs.put(&root.join("t2/s0000000000000001.bsg"), b"x");
        fs.put(&root.join("wal/0000000000000001.wal"), b"x");
        assert_eq!(
            classify_without_manifest(&fs, root).unwrap(),
            Contents::Damaged(vec!["t2".into(), "wal".into()])
        );
    }
}
