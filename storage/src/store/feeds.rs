//! The commit hook and change feeds: durable positions in the log that readers poll and
//! acknowledge; an unacknowledged feed holds the log back.
//!
//! What this module must not do: hand out a commit that is not durable.

use super::*;

impl Store {
    /// Installs (or with `None` removes) the function called after every commit, outside
    /// all locks, with what the commit changed. Index upkeep hangs off this.
    pub fn set_commit_hook(&self, hook: Option<CommitHook>) {
        *self.hook.write() = hook.map(HookSlot);
    }

    pub(crate) fn run_commit_hook(&self, event: &CommitEvent) {
        let hook = self.hook.read().clone();
        if let Some(HookSlot(h)) = hook {
            h(event);
        }
    }

    /// The lowest LSN the log must still hold: everything above the segments' `wal_lsn` and
    /// above the position of the slowest change feed.
    pub(super) fn retention(&self, state: &DbSnapshot) -> u64 {
        let keep = state.feeds.values().copied().fold(state.wal_lsn, u64::min);
        self.fts.retention().map_or(keep, |f| keep.min(f))
    }

    /// Creates a durable change feed starting after the newest commit; returns its position.
    /// Only commits made with a log (process-safe or power-safe durability) appear in feeds.
    pub fn create_feed(&self, name: &str) -> Result<u64> {
        check_name(name)?;
        let _w = self.writer()?;
        let mut head = self.head.lock();
        if head.feeds.contains_key(name) {
            return Err(Error::InvalidInput {
                table: String::new(),
                reason: format!("feed '{name}' already exists"),
            });
        }
        let mut next = (**head).clone();
        let pos = next.lsn;
        next.feeds.insert(name.to_string(), pos);
        self.install(&mut head, next, false)?;
        Ok(pos)
    }

    /// Removes a change feed; the log it held back is released at the next flush.
    pub fn drop_feed(&self, name: &str) -> Result<()> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let mut next = (**head).clone();
        next.feeds.remove(name).ok_or_else(|| Error::InvalidInput {
            table: String::new(),
            reason: format!("no feed '{name}'"),
        })?;
        self.install(&mut head, next, false)
    }

    /// Change feeds and their acknowledged positions.
    pub fn feeds(&self) -> Vec<(String, u64)> {
        self.snapshot().feeds.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Up to `max` committed changes after the feed's acknowledged position, in commit order,
    /// each with its LSN. Reading does not move the position; [`Store::ack_feed`] does.
    pub fn read_feed(&self, name: &str, max: usize) -> Result<Vec<(u64, Record)>> {
        let snap = self.snapshot();
        let pos = *snap.feeds.get(name).ok_or_else(|| Error::InvalidInput {
            table: String::new(),
            reason: format!("no feed '{name}'"),
        })?;
        let upto = snap.lsn;
        let mut out = Vec::new();
        if pos >= upto {
            return Ok(out);
        }
        let mut full = false;
        let schema_of = |id: u64| snap.table_by_id(id).map(|t| t.schema.full_schema().clone());
        let dir = self.root.join(WAL_DIR);
        wal::replay(self.vfs.as_ref(), &dir, pos, false, &schema_of, |lsn, rec| {
            if lsn <= upto && !full {
                out.push((lsn, rec));
                full = out.len() >= max;
            }
            Ok(())
        })?;
        if let Some(&(first, _)) = out.first()
            && first != pos + 1
        {
            return Err(Error::corrupt(
                self.root.join(WAL_DIR),
                pos,
                format!("feed '{name}' needs log record {} but the log starts at {first}", pos + 1),
            ));
        }
        Ok(out)
    }

    /// Acknowledges everything up to `lsn` on a feed (durably): those log records may now be
    /// deleted once segments hold them. Delivery is at-least-once across crashes between a
    /// consumer's processing and its acknowledgement.
    pub fn ack_feed(&self, name: &str, lsn: u64) -> Result<()> {
        let _w = self.writer()?;
        let mut head = self.head.lock();
        let mut next = (**head).clone();
        let top = next.lsn;
        let pos = next.feeds.get_mut(name).ok_or_else(|| Error::InvalidInput {
            table: String::new(),
            reason: format!("no feed '{name}'"),
        })?;
        *pos = (*pos).max(lsn.min(top));
        self.install(&mut head, next, false)
    }
}
