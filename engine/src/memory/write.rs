//! Writes: remember (grouped), put, update, forget, clear, compress, each one
//! transaction over the items and their history.
//!
//! Part of the memory store (see the module doc of `memory`).

use super::*;

impl MemoryStore {
    /// Inside a transaction about to change or delete `old`: writes its `create` history
    /// row if it never changed (version 1). Until its first change an item's creation
    /// record is the item row itself ([`MemoryStore::history`] reads it from there), so a
    /// new item writes no history row (that row was about a quarter of a single
    /// `remember`'s time). A store whose items got their `create` rows when written (by
    /// earlier builds) gets a second, identical one at such an item's first change;
    /// `history` shows the first.
    pub(super) fn keep_creation(hist: &Table, old: &MemoryItem) -> Res<()> {
        if old.version == 1 {
            let meta = meta_text(&old.metadata);
            hist.insert_row(Self::history_row(
                old.id,
                1,
                "create",
                None,
                Some((&old.text, meta.as_deref())),
                old.created_ms,
            ))?;
        }
        Ok(())
    }

    pub(super) fn history_row(
        id: u64,
        version: i64,
        op: &str,
        old: Option<(&str, Option<&str>)>,
        new: Option<(&str, Option<&str>)>,
        at: i64,
    ) -> Row {
        let s = |v: Option<&str>| v.map_or(Value::Null, |s| Value::Str(s.into()));
        Row::new()
            .set("item", id)
            .set("version", version)
            .set("op", op)
            .set("old_text", s(old.map(|o| o.0)))
            .set("new_text", s(new.map(|n| n.0)))
            .set("old_metadata", s(old.and_then(|o| o.1)))
            .set("new_metadata", s(new.and_then(|n| n.1)))
            .set("at_ms", at)
    }

    /// Runs `f` in one serializable transaction on a fresh connection: all of it or none.
    pub(super) fn txn<T>(&self, f: impl FnOnce(&Connection, &Table, &Table) -> Res<T>) -> Res<T> {
        let conn = self.db.connect();
        conn.begin_immediate()?;
        let r = (|| {
            let items = conn.table(&self.name)?;
            let hist = conn.table(&self.history)?;
            f(&conn, &items, &hist)
        })();
        match r {
            Ok(v) => {
                conn.commit()?;
                Ok(v)
            }
            Err(e) => {
                let _ = conn.rollback();
                Err(e)
            }
        }
    }

    /// Adds a memory to `namespace` and returns its id — or, when it duplicates a live
    /// item of that namespace (see [`MemoryConfig::dedupe_exact`] and
    /// [`MemoryConfig::dedupe_near`]), updates that item (version + 1) and returns its id.
    ///
    /// The item is checked (and embedded) on the calling thread. Concurrent `remember`s on
    /// one store are written together: one caller writes every item queued at that moment
    /// in one transaction (one log write, one publish) while the others wait, and each
    /// returns once its item is committed, at the store's durability. Items stay
    /// independent — a duplicate among them updates the earlier one as it would in
    /// sequence, and if a group's transaction fails its items are written again one
    /// transaction each, so one item's failure is its own.
    pub fn remember(&self, namespace: &str, memory: NewMemory) -> Res<u64> {
        let now = now_ms();
        let p = self
            .prepare(namespace, vec![memory], now)?
            .pop()
            .unwrap_or_else(|| Err(self.invalid("nothing to remember")))?;
        if self.group.led_by_this_thread() {
            // Written from a commit hook of this thread's group: on its own.
            return self.txn(|_, t, h| self.write_new(t, h, &[(namespace, &p)])).map(|ids| ids[0]);
        }
        let ticket = Arc::new(Ticket::new((namespace.to_string(), p)));
        if !self.group.join(&ticket) {
            match ticket.wait() {
                Outcome::Done(r) => return r,
                Outcome::Lead | Outcome::Waiting => {}
            }
        }
        // This thread writes the group: every write queued now, its own among them.
        let lead = Lead::take(&self.group, || {
            Err(crate::Error::Transaction(
                "the thread writing this memory's group panicked before reporting whether \
                 it was stored"
                    .into(),
            ))
        });
        let inputs = lead.inputs();
        let items: Vec<(&str, &Prepared)> = inputs.iter().map(|(n, p)| (n.as_str(), p)).collect();
        let results: Vec<Res<u64>> = match self.txn(|_, t, h| self.write_new(t, h, &items)) {
            Ok(ids) => ids.into_iter().map(Ok).collect(),
            Err(e) if items.len() == 1 => vec![Err(e)],
            // Waiting for another writer timed out: so would each item; none waits again.
            Err(crate::Error::Storage(basalt_storage::Error::LockTimeout { path, waited })) => {
                let timeout = || basalt_storage::Error::LockTimeout { path: path.clone(), waited };
                items.iter().map(|_| Err(timeout().into())).collect()
            }
            // Which item failed is unknown: each is written on its own.
            Err(_) => items
                .iter()
                .map(|it| {
                    self.txn(|_, t, h| self.write_new(t, h, std::slice::from_ref(it)))
                        .map(|ids| ids[0])
                })
                .collect(),
        };
        lead.finish(&ticket, results)
    }

    /// Adds many memories to `namespace` in one transaction (one embedder call for those
    /// without vectors). Each gets its own result: a bad item is reported in its place and
    /// the others are written. The outer error is for failures of the whole batch (the
    /// embedder, storage).
    pub fn remember_many(&self, namespace: &str, memories: Vec<NewMemory>) -> Res<Vec<Res<u64>>> {
        let now = now_ms();
        let prepared = self.prepare(namespace, memories, now)?;
        let good: Vec<(&str, &Prepared)> =
            prepared.iter().filter_map(|p| p.as_ref().ok().map(|p| (namespace, p))).collect();
        let ids = if good.is_empty() {
            Vec::new()
        } else {
            self.txn(|_, items, hist| {
                let ids = self.write_new(items, hist, &good)?;
                // One id per good item, by construction of `write_new`; were it ever
                // otherwise, handing out ids by position would give items others' ids, so
                // the batch is rolled back instead.
                if ids.len() != good.len() {
                    return Err(crate::Error::Transaction(format!(
                        "memory store '{}': {} ids for {} items",
                        self.name,
                        ids.len(),
                        good.len()
                    )));
                }
                Ok(ids)
            })?
        };
        let mut ids = ids.into_iter();
        Ok(prepared.into_iter().map(|p| p.map(|_| ids.next().unwrap_or_default())).collect())
    }

    /// Inside a transaction: writes checked new items (each with its namespace), in order,
    /// and returns each one's id — the id of the live item it duplicates when it does
    /// (that item updated, version + 1).
    ///
    /// New items are written together (one multi-row insert; no history row: see
    /// `keep_creation`);
    /// an item with the content hash of a pending one writes those first so the duplicate
    /// lookup sees them. Near dedupe compares with stored vectors, so with it on every
    /// item is written before the next is checked.
    pub(super) fn write_new(
        &self,
        items: &Table,
        hist: &Table,
        new: &[(&str, &Prepared)],
    ) -> Res<Vec<u64>> {
        let buffered = self.config.dedupe_near.is_none();
        let mut out = vec![0u64; new.len()];
        // Positions in `new` of the items not yet written.
        let mut pending: Vec<usize> = Vec::new();
        let flush = |pending: &mut Vec<usize>, out: &mut [u64]| -> Res<()> {
            if pending.is_empty() {
                return Ok(());
            }
            let rows: Vec<(&str, &Prepared)> = pending.iter().map(|&i| new[i]).collect();
            let batch = new_items_batch(&self.schemas.0, &self.constants, &rows, self.config.dim)?;
            let ids = items.insert(&batch)?;
            for (j, (ns, p)) in rows.iter().enumerate() {
                self.note_hash(ns, p.hash, ids.first + j as u64);
            }
            for (j, i) in pending.drain(..).enumerate() {
                out[i] = ids.first + j as u64;
            }
            Ok(())
        };
        for (i, &(ns, p)) in new.iter().enumerate() {
            if pending.iter().any(|&j| new[j].1.hash == p.hash) {
                flush(&mut pending, &mut out)?;
            }
            match self.duplicate_of(items, ns, p, p.at)? {
                Some(old) => out[i] = self.merge_into(items, hist, old, p, p.at)?,
                None => {
                    pending.push(i);
                    if !buffered {
                        flush(&mut pending, &mut out)?;
                    }
                }
            }
        }
        flush(&mut pending, &mut out)?;
        Ok(out)
    }

    /// Writes the memory under `key` in `namespace`: creates it, or replaces the text,
    /// metadata, vector and expiry of the one there (version + 1). Returns its id. Two
    /// concurrent puts of one key leave one item.
    pub fn put(&self, namespace: &str, key: &str, memory: NewMemory) -> Res<u64> {
        if key.is_empty() {
            return Err(self.invalid("empty key"));
        }
        let now = now_ms();
        let Some(p) = self.prepare(namespace, vec![memory], now)?.pop() else {
            return Err(self.invalid("nothing to put"));
        };
        let p = p?;
        let row = Self::new_row(namespace, Some(key), &p, now);
        let (meta, text, hash) = (p.meta, p.text, p.hash);
        self.txn(|_, items, hist| match find_key(items, namespace, key)? {
            None => {
                // (Its creation record is the item row until it changes: `keep_creation`.)
                let id = items.insert_row(row)?;
                self.note_hash(namespace, hash, id);
                Ok(id)
            }
            Some(old) => {
                let version = old.version as i64 + 1;
                let row = row.set("version", version).set("created_ms", old.created_ms);
                items.update(old.id, row)?;
                self.note_hash(namespace, hash, old.id);
                Self::keep_creation(hist, &old)?;
                let old_meta = meta_text(&old.metadata);
                hist.insert_row(Self::history_row(
                    old.id,
                    version,
                    "update",
                    Some((&old.text, old_meta.as_deref())),
                    Some((&text, meta.as_deref())),
                    now,
                ))?;
                Ok(old.id)
            }
        })
    }

    /// Changes an item; with `expected_version`, only if it is still at that version
    /// ([`MemoryError::Conflict`] otherwise). Returns the new version.
    pub fn update(&self, id: u64, change: MemoryUpdate, expected_version: Option<u64>) -> Res<u64> {
        if let Some(t) = &change.text {
            self.check_text(t)?;
        }
        let meta = match &change.metadata {
            Some(m) => Some(self.check_metadata(m)?),
            None => None,
        };
        let vector = match (&change.vector, &change.text) {
            (Some(v), _) => {
                self.check_vector(v)?;
                Some(v.clone())
            }
            (None, Some(t)) => self.embed_one(t)?,
            (None, None) => None,
        };
        let now = now_ms();
        self.txn(|_, items, hist| {
            let Some(old) = items.get(id)?.map(|r| item_of(&r)).filter(|i| !expired(i, now)) else {
                return Err(MemoryError::NotFound {
                    store: self.name.clone(),
                    what: id.to_string(),
                }
                .into());
            };
            if let Some(e) = expected_version.filter(|e| *e != old.version) {
                return Err(MemoryError::Conflict {
                    store: self.name.clone(),
                    id,
                    expected: e,
                    actual: old.version,
                }
                .into());
            }
            let version = old.version + 1;
            let mut row = Row::new().set("version", version as i64).set("updated_ms", now);
            if let Some(t) = &change.text {
                row = row.set("text", t.as_str()).set("hash", content_hash(t));
            }
            if let Some(m) = &meta {
                row = row.set("metadata", m.clone().map_or(Value::Null, Value::Str));
            }
            if let Some(v) = &vector {
                row = row.set("embedding", Value::Vector(v.clone()));
            }
            if let Some(a) = change.archived {
                row = row.set("archived", a);
            }
            items.update(id, row)?;
            if let Some(t) = &change.text {
                self.note_hash(&old.namespace, content_hash(t), id);
            }
            Self::keep_creation(hist, &old)?;
            let old_meta = meta_text(&old.metadata);
            let new_text = change.text.as_deref().unwrap_or(&old.text);
            let new_meta = match &meta {
                Some(m) => m.clone(),
                None => old_meta.clone(),
            };
            hist.insert_row(Self::history_row(
                id,
                version as i64,
                "update",
                Some((&old.text, old_meta.as_deref())),
                Some((new_text, new_meta.as_deref())),
                now,
            ))?;
            Ok(version)
        })
    }

    /// Deletes the item with this id (from the table and its indexes); false if none.
    pub fn forget(&self, id: u64) -> Res<bool> {
        self.forget_where("delete", |t| Ok(t.get(id)?.map(|r| item_of(&r)).into_iter().collect()))
            .map(|n| n == 1)
    }

    /// Deletes the item under `key` in `namespace`; false if none.
    pub fn forget_key(&self, namespace: &str, key: &str) -> Res<bool> {
        self.forget_where("delete", |t| Ok(find_key(t, namespace, key)?.into_iter().collect()))
            .map(|n| n == 1)
    }

    /// Deletes every item of the store, in every namespace (history entries are kept, one
    /// `delete` each); returns how many. `confirm` must be true — a guard against clearing
    /// by accident (false is [`MemoryError::Invalid`] and deletes nothing).
    pub fn clear(&self, confirm: bool) -> Res<u64> {
        if !confirm {
            return Err(self.invalid("clear deletes every item of the store: pass confirm = true"));
        }
        self.forget_where("delete", |t| {
            let mut out = Vec::new();
            for b in t.scan_columns(&COLUMNS)? {
                let b = b?;
                for i in 0..b.num_rows() {
                    out.push(item_of(&Row::from_batch(&b, i)));
                }
            }
            Ok(out)
        })
    }

    /// Drops the vectors of the items in `namespace` or below it last updated before
    /// `before_ms` (ms since the epoch), to save space: they stay readable, listable and
    /// found by keyword recall, but no longer by vector recall (nor near dedupe). Returns
    /// how many items lost a vector. Not a new version (no history entry).
    pub fn compress(&self, namespace: &str, before_ms: i64) -> Res<u64> {
        self.check_namespace(namespace, true)?;
        let mut pred = vec![
            Predicate::cmp("updated_ms", CmpOp::Lt, before_ms),
            Predicate::IsNull { column: "embedding".into(), negated: true },
        ];
        if !namespace.is_empty() {
            pred.push(namespace_predicate(namespace));
        }
        self.txn(|_, items, _| {
            let mut ids = Vec::new();
            for b in items.scan_where(&["_id"], &Predicate::And(pred))? {
                let b = b?;
                for i in 0..b.num_rows() {
                    ids.extend(Row::from_batch(&b, i).id());
                }
            }
            let mut n = 0;
            for id in ids {
                n += u64::from(items.update(id, Row::new().set("embedding", Value::Null))?);
            }
            Ok(n)
        })
    }

    /// Deletes every item (archived and expired ones too) in `namespace` or below it whose
    /// metadata passes `filter`; returns how many.
    pub fn forget_namespace(&self, namespace: &str, filter: Option<&Filter>) -> Res<u64> {
        self.check_namespace(namespace, false)?;
        self.check_read(namespace, filter)?;
        self.forget_where("delete", |t| {
            let mut out = Vec::new();
            for b in t.scan_where(&COLUMNS, &namespace_predicate(namespace))? {
                let b = b?;
                for i in 0..b.num_rows() {
                    let item = item_of(&Row::from_batch(&b, i));
                    if filter.is_none_or(|f| f.matches(&item.metadata)) {
                        out.push(item);
                    }
                }
            }
            Ok(out)
        })
    }

    /// Deletes the items `pick` chooses (inside the transaction), writing an `op` history
    /// entry for each.
    pub(super) fn forget_where(
        &self,
        op: &str,
        pick: impl FnOnce(&Table) -> Res<Vec<MemoryItem>>,
    ) -> Res<u64> {
        let now = now_ms();
        self.txn(|_, items, hist| {
            let gone = pick(items)?;
            if gone.is_empty() {
                return Ok(0);
            }
            let ids: Vec<u64> = gone.iter().map(|i| i.id).collect();
            let n = items.delete_many(&ids)?;
            for i in &gone {
                Self::keep_creation(hist, i)?;
                let m = meta_text(&i.metadata);
                hist.insert_row(Self::history_row(
                    i.id,
                    0,
                    op,
                    Some((&i.text, m.as_deref())),
                    None,
                    now,
                ))?;
            }
            Ok(n)
        })
    }
}
