//! A memory store's change feed: events of committed writes, read from the database's
//! write-ahead log through a durable named feed, so a subscriber that restarts resumes after
//! what it acknowledged (at-least-once delivery). It owns turning log records of the items
//! table into events; it writes nothing but its feed position.
//!
//! Only logged commits appear: a store on a database whose durability is
//! [`crate::Durability::Buffered`] produces no events. A subscription that is never
//! acknowledged holds the log back (the log is kept from its position on); unsubscribe what
//! is no longer read.

use arrow_array::{Array, Int64Array, RecordBatch, StringArray, UInt64Array};

use super::{MemoryStore, Res};
use crate::{ChangeOp, Database};

/// What happened to an item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryEventKind {
    /// A new item (`remember`, or `put` of a new key).
    Remembered,
    /// A new version of an item (`update`, a keyed `put`, a deduplicated `remember`).
    Updated,
    /// The item was deleted (`forget…`, or swept after expiring).
    Forgotten,
}

/// One committed change of a memory store.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryEvent {
    /// The commit's position in the log: acknowledge up to it with [`Subscription::ack`].
    pub lsn: u64,
    /// What happened.
    pub kind: MemoryEventKind,
    /// The item.
    pub id: u64,
    /// Its namespace (`None` for [`MemoryEventKind::Forgotten`]: the log keeps the id only).
    pub namespace: Option<String>,
    /// Its key, if it has one (`None` for forgotten items).
    pub key: Option<String>,
    /// Its version after the change (`None` for forgotten items).
    pub version: Option<u64>,
    /// Its text after the change (`None` for forgotten items).
    pub text: Option<String>,
}

/// A durable subscription to a memory store's changes (see [`MemoryStore::subscribe`]).
#[derive(Debug)]
pub struct Subscription {
    db: Database,
    feed: String,
    table: String,
}

impl MemoryStore {
    /// Subscribes to the store's committed changes under `name`: created at the newest
    /// commit the first time, resumed from its acknowledged position afterwards (also
    /// after a restart).
    pub fn subscribe(&self, name: &str) -> Res<Subscription> {
        let feed = self.feed_name(name);
        if !self.db.list_feeds().iter().any(|(f, _)| *f == feed) {
            self.db.create_feed(&feed)?;
        }
        Ok(Subscription { db: self.db.clone(), feed, table: self.name.clone() })
    }

    /// Removes the subscription `name` (and the hold it had on the log).
    pub fn unsubscribe(&self, name: &str) -> Res<()> {
        self.db.drop_feed(&self.feed_name(name))
    }

    fn feed_name(&self, name: &str) -> String {
        format!("{}__feed__{name}", self.name)
    }
}

impl Subscription {
    /// The changes of commits after the acknowledged position, in commit order and, within
    /// a commit, in the order they were made — from at most `max_commits` commits (commits
    /// that did not touch the store count too). Polling again without acknowledging returns
    /// the same events.
    pub fn poll(&self, max_commits: usize) -> Res<Vec<MemoryEvent>> {
        let table_id = self.db.table(&self.table)?.id()?;
        let mut out = Vec::new();
        for (lsn, record) in self.db.read_feed(&self.feed, max_commits)? {
            // Ids deleted earlier in this commit: re-inserted they are updates.
            let mut deleted: Vec<u64> = Vec::new();
            for op in record.ops {
                match op {
                    ChangeOp::Delete { table_id: t, ids } if t == table_id => deleted.extend(ids),
                    ChangeOp::Insert { table_id: t, batch } if t == table_id => {
                        for e in events_of(lsn, &batch, &mut deleted) {
                            out.push(e);
                        }
                    }
                    _ => {}
                }
            }
            out.extend(deleted.into_iter().map(|id| MemoryEvent {
                lsn,
                kind: MemoryEventKind::Forgotten,
                id,
                namespace: None,
                key: None,
                version: None,
                text: None,
            }));
        }
        Ok(out)
    }

    /// Acknowledges everything up to `lsn` (durably): later polls start after it.
    pub fn ack(&self, lsn: u64) -> Res<()> {
        self.db.ack_feed(&self.feed, lsn)
    }
}

/// Events of the rows of `batch` (the items table's full schema); rows whose id is in
/// `deleted` are updates and leave it.
fn events_of(lsn: u64, batch: &RecordBatch, deleted: &mut Vec<u64>) -> Vec<MemoryEvent> {
    let col = |name: &str| batch.schema().index_of(name).ok().map(|i| batch.column(i).clone());
    let (Some(ids), Some(ns), Some(keys), Some(texts), Some(versions)) =
        (col("_id"), col("namespace"), col("key"), col("text"), col("version"))
    else {
        return Vec::new();
    };
    let ids = ids.as_any().downcast_ref::<UInt64Array>();
    let ns = ns.as_any().downcast_ref::<StringArray>();
    let keys = keys.as_any().downcast_ref::<StringArray>();
    let texts = texts.as_any().downcast_ref::<StringArray>();
    let versions = versions.as_any().downcast_ref::<Int64Array>();
    let (Some(ids), Some(ns), Some(keys), Some(texts), Some(versions)) =
        (ids, ns, keys, texts, versions)
    else {
        return Vec::new();
    };
    let text = |a: &StringArray, i: usize| a.is_valid(i).then(|| a.value(i).to_string());
    (0..batch.num_rows())
        .map(|i| {
            let id = ids.value(i);
            let kind = match deleted.iter().position(|&d| d == id) {
                Some(p) => {
                    deleted.remove(p);
                    MemoryEventKind::Updated
                }
                None => MemoryEventKind::Remembered,
            };
            MemoryEvent {
                lsn,
                kind,
                id,
                namespace: text(ns, i),
                key: text(keys, i),
                version: u64::try_from(versions.value(i)).ok(),
                text: text(texts, i),
            }
        })
        .collect()
}
