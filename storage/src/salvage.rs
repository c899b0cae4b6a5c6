//! Opening a damaged database by keeping what is intact ([`crate::StoreOptions::salvage`]).
//!
//! A normal open refuses damage it cannot repair without losing acknowledged data: a
//! missing `MANIFEST`, a log record that fails its checksum with intact records after it.
//! A salvaging open (writers only) goes on instead, and never deletes what it gives up:
//!
//! 1. A missing `MANIFEST` is replaced by the newest intact manifest copy the database
//!    holds — a pending slot or a checkpoint ([`newest_manifest_copy`]).
//! 2. A damaged log is replayed up to the damage; the log files from the damaged one on
//!    are copied into the salvage folder before the damaged file is cut at the damage and
//!    later files are removed ([`set_log_aside`]).
//! 3. Files the (possibly older) manifest does not name are moved into the salvage folder
//!    instead of being removed as orphans.
//!
//! The salvage folder is `<db>/salvaged/<n>/` (the first free number), holding the files
//! under their paths relative to the database. Every step adds a line to the report the
//! store keeps ([`crate::Store::salvage_report`]).

use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::io::Vfs;
use crate::manifest::{MANIFEST_PENDING, Manifest};
use crate::owned::CHECKPOINT_DIR;
use crate::wal::{HEADER_LEN, LogDamage};

/// Folder (under the database) of the salvage folders.
pub const SALVAGE_DIR: &str = "salvaged";

/// The newest intact manifest among the pending slots and the checkpoints, with a name
/// for the report; `None` when there is none.
pub fn newest_manifest_copy(vfs: &dyn Vfs, root: &Path) -> Result<Option<(Manifest, String)>> {
    let mut best: Option<(Manifest, String)> = None;
    let mut consider = |m: Manifest, what: String| {
        if best.as_ref().is_none_or(|(b, _)| m.version > b.version) {
            best = Some((m, what));
        }
    };
    for name in MANIFEST_PENDING {
        let p = root.join(name);
        if let Some(m) = vfs.read(&p).ok().and_then(|b| Manifest::decode_slot(&b, &p)) {
            consider(m, format!("the pending manifest {name}"));
        }
    }
    let dir = root.join(CHECKPOINT_DIR);
    for f in vfs.list_dir(&dir)? {
        let Some(name) = f.strip_suffix(".manifest") else { continue };
        let p = dir.join(&f);
        if let Some(m) = vfs.read(&p).ok().and_then(|b| Manifest::decode(&b, &p).ok()) {
            consider(m, format!("checkpoint '{name}'"));
        }
    }
    Ok(best)
}

/// The salvage folder of one open: files moved or copied here keep their paths relative
/// to the database.
#[derive(Debug)]
pub struct Aside {
    root: PathBuf,
    dest: PathBuf,
}

impl Aside {
    /// Picks the first free `<root>/salvaged/<n>` (created at the first file kept).
    pub fn new(vfs: &dyn Vfs, root: &Path) -> Result<Aside> {
        let base = root.join(SALVAGE_DIR);
        let taken = vfs.list_dir(&base)?;
        let n = (1u64..).find(|n| !taken.contains(&n.to_string())).unwrap_or(u64::MAX);
        Ok(Aside { root: root.to_path_buf(), dest: base.join(n.to_string()) })
    }

    /// The folder, for reports.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    fn target(&self, vfs: &dyn Vfs, path: &Path) -> Result<PathBuf> {
        let rel = path.strip_prefix(&self.root).unwrap_or(path);
        let to = self.dest.join(rel);
        if let Some(parent) = to.parent() {
            vfs.create_dir_all(parent)?;
        }
        Ok(to)
    }

    /// Moves `path` (inside the database) into the folder.
    pub fn keep(&self, vfs: &dyn Vfs, path: &Path) -> Result<()> {
        let to = self.target(vfs, path)?;
        vfs.rename(path, &to)
    }

    /// Copies `path` (inside the database) into the folder, synced.
    pub fn copy(&self, vfs: &dyn Vfs, path: &Path) -> Result<()> {
        let to = self.target(vfs, path)?;
        let bytes = vfs.read(path)?;
        vfs.write_file(&to, &[&bytes], true)?;
        if let Some(parent) = to.parent() {
            vfs.sync_dir(parent)?;
        }
        Ok(())
    }
}

/// Copies the log files holding what `damage` dropped into the salvage folder, then cuts
/// the damaged file at the damage and removes the files after it, so that the log the
/// store goes on with is intact. Returns the report line.
pub fn set_log_aside(
    vfs: &dyn Vfs,
    wal_dir: &Path,
    damage: &LogDamage,
    aside: &Aside,
) -> Result<String> {
    for f in &damage.files {
        aside.copy(vfs, f)?;
    }
    for f in &damage.files {
        if f == &damage.file && damage.offset >= HEADER_LEN as u64 {
            let bytes = vfs.read(f)?;
            let keep = &bytes[..(damage.offset as usize).min(bytes.len())];
            vfs.write_file(f, &[keep], true)?;
        } else {
            vfs.remove_file(f)?;
        }
    }
    vfs.sync_dir(wal_dir)?;
    Ok(format!(
        "log damaged in {} at offset {} ({}): replayed the commits before it; dropped {} \
         intact later log record(s){}; the log files from there on are kept in {}",
        damage.file.display(),
        damage.offset,
        damage.reason,
        damage.dropped_records,
        if damage.dropped_records > 0 {
            format!(" (up to LSN {})", damage.dropped_through)
        } else {
            String::new()
        },
        aside.dest().display(),
    ))
}
