//! Reads: get, list, namespaces, the live-item conditions, history.
//!
//! Part of the memory store (see the module doc of `memory`).

use super::*;

impl MemoryStore {
    /// The item with this id, if it exists and has not expired (archived items included).
    pub fn get(&self, id: u64) -> Res<Option<MemoryItem>> {
        let now = now_ms();
        Ok(self.db.table(&self.name)?.get(id)?.map(|r| item_of(&r)).filter(|i| !expired(i, now)))
    }

    /// The item under `key` in `namespace`, if any (and not expired).
    pub fn get_key(&self, namespace: &str, key: &str) -> Res<Option<MemoryItem>> {
        let now = now_ms();
        Ok(find_key(&self.db.table(&self.name)?, namespace, key)?.filter(|i| !expired(i, now)))
    }

    /// Live items (not archived, not expired) in `namespace` or below it whose metadata
    /// passes `filter`, by ascending id, at most `limit` of them after id `after` (a cursor:
    /// pass the last id of the previous page).
    pub fn list(
        &self,
        namespace: &str,
        filter: Option<&Filter>,
        limit: usize,
        after: Option<u64>,
    ) -> Res<Vec<MemoryItem>> {
        let mut items = self.live(namespace, filter, after)?;
        items.truncate(limit);
        Ok(items)
    }

    /// Every namespace holding a live item, sorted, with how many it holds.
    pub fn list_namespaces(&self) -> Res<Vec<(String, u64)>> {
        let mut counts: BTreeMap<String, u64> = BTreeMap::new();
        let t = self.db.table(&self.name)?;
        for b in t.scan_where(&["namespace"], &visible("", now_ms()))? {
            let b = b?;
            for i in 0..b.num_rows() {
                let r = Row::from_batch(&b, i);
                *counts.entry(text_of(r.get("namespace")).unwrap_or_default()).or_default() += 1;
            }
        }
        Ok(counts.into_iter().collect())
    }

    /// Checks a namespace prefix and a filter of a read.
    pub(super) fn check_read(&self, namespace: &str, filter: Option<&Filter>) -> Res<()> {
        self.check_namespace(namespace, true)?;
        if let Some(f) = filter {
            f.validate().map_err(|r| self.invalid(r))?;
        }
        Ok(())
    }

    /// Live items of the namespace subtree passing `filter`, sorted by id.
    pub(super) fn live(
        &self,
        namespace: &str,
        filter: Option<&Filter>,
        after: Option<u64>,
    ) -> Res<Vec<MemoryItem>> {
        self.check_read(namespace, filter)?;
        let mut pred = visible(namespace, now_ms());
        if let Some(a) = after {
            pred = Predicate::And(vec![pred, Predicate::cmp("_id", CmpOp::Gt, a)]);
        }
        let t = self.db.table(&self.name)?;
        let mut out = Vec::new();
        for b in t.scan_where(&COLUMNS, &pred)? {
            let b = b?;
            for i in 0..b.num_rows() {
                let item = item_of(&Row::from_batch(&b, i));
                if filter.is_none_or(|f| f.matches(&item.metadata)) {
                    out.push(item);
                }
            }
        }
        out.sort_by_key(|i| i.id);
        Ok(out)
    }

    /// The ids of the live items of the namespace subtree passing `filter`, ascending
    /// (reads `_id`, and `metadata` only when there is a filter).
    pub(super) fn candidate_ids(
        &self,
        t: &Table,
        pred: &Predicate,
        filter: Option<&Filter>,
    ) -> Res<Vec<u64>> {
        let cols: &[&str] = if filter.is_some() { &["_id", "metadata"] } else { &["_id"] };
        let mut ids = Vec::new();
        for b in t.scan_where(cols, pred)? {
            let b = b?;
            for i in 0..b.num_rows() {
                let r = Row::from_batch(&b, i);
                if filter.is_none_or(|f| f.matches(&json_of(r.get("metadata")))) {
                    ids.extend(r.id());
                }
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// The changes of an item, oldest first (it may have been deleted since).
    ///
    /// The first is its creation (`create`, version 1, the text and metadata it was
    /// written with, at its creation time). That entry is stored only once the item
    /// changes; until then it is read from the item row, which still holds those values
    /// (see `keep_creation`). Both tables are read from one snapshot, so a concurrent
    /// first change cannot make the entry vanish between the two reads.
    pub fn history(&self, id: u64) -> Res<Vec<HistoryEntry>> {
        let conn = self.db.connect();
        conn.begin()?;
        let r = self.history_in(&conn, id);
        let _ = conn.rollback();
        r
    }

    pub(super) fn history_in(&self, conn: &Connection, id: u64) -> Res<Vec<HistoryEntry>> {
        let t = conn.table(&self.history)?;
        let mut out = Vec::new();
        let cols = [
            "_id",
            "version",
            "op",
            "old_text",
            "new_text",
            "old_metadata",
            "new_metadata",
            "at_ms",
        ];
        for b in t.scan_where(&cols, &Predicate::eq("item", id))? {
            let b = b?;
            for i in 0..b.num_rows() {
                let r = Row::from_batch(&b, i);
                out.push((
                    r.id().unwrap_or(0),
                    HistoryEntry {
                        version: int_of(r.get("version")).max(0) as u64,
                        op: text_of(r.get("op")).unwrap_or_default(),
                        old_text: text_of(r.get("old_text")),
                        new_text: text_of(r.get("new_text")),
                        old_metadata: json_of(r.get("old_metadata")),
                        new_metadata: json_of(r.get("new_metadata")),
                        at_ms: int_of(r.get("at_ms")),
                    },
                ));
            }
        }
        out.sort_by_key(|(hid, _)| *hid);
        let mut entries: Vec<HistoryEntry> = out.into_iter().map(|(_, e)| e).collect();
        // The first `create` stays (a store written before creation rows became lazy can
        // hold a second, identical one: see `keep_creation`).
        let mut created = false;
        entries.retain(|e| e.op != "create" || !std::mem::replace(&mut created, true));
        if !created
            && let Some(item) = conn.table(&self.name)?.get(id)?.map(|r| item_of(&r))
            && item.version == 1
        {
            entries.insert(
                0,
                HistoryEntry {
                    version: 1,
                    op: "create".into(),
                    old_text: None,
                    new_text: Some(item.text),
                    old_metadata: Json::Null,
                    new_metadata: item.metadata,
                    at_ms: item.created_ms,
                },
            );
        }
        Ok(entries)
    }
}
