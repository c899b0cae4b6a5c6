//! Deduplication: the per-store index of content hashes and finding the item a new
//! memory duplicates (exact text, or a near vector), merged instead of added.
//!
//! Part of the memory store (see the module doc of `memory`).

use super::*;

/// Candidates for exact dedupe: (hash of the namespace, content hash) → ids of items that
/// had that pair when written through a memory store of this database handle (or when the
/// index was built by a scan). Entries may be stale — every candidate is read back and
/// checked (namespace, hash, live) inside the writing transaction, and stale ones are
/// dropped — but never missing for writes made through memory stores: each write adds its
/// pair inside its transaction. Built on a store's first write after it is opened (opening
/// discards it, so rows written by other means are seen after a reopen).
///
/// A pair nearly always has one item, held inline ([`Ids::One`]): a `Vec` per pair was an
/// allocation per `remember`. The map starts with room for [`DedupeIndex::ROOM`] more
/// pairs than the table holds, so a new store's first writes do not regrow it step by
/// step (each regrowth a larger allocation, which also made the allocator consolidate
/// every small block freed since the last one: the regrowths were 4 % of W3's profile).
#[derive(Debug, Default)]
pub(crate) struct DedupeIndex {
    map: HashMap<(u64, u64), Ids>,
}

/// The candidate ids of one (namespace hash, content hash) pair.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Ids {
    One(u64),
    Many(Vec<u64>),
}

impl Ids {
    pub(super) fn push(&mut self, id: u64) {
        match self {
            Ids::One(first) => *self = Ids::Many(vec![*first, id]),
            Ids::Many(v) => v.push(id),
        }
    }

    pub(super) fn into_vec(self) -> Vec<u64> {
        match self {
            Ids::One(id) => vec![id],
            Ids::Many(v) => v,
        }
    }
}

impl DedupeIndex {
    /// Room for this many pairs beyond the table's rows when the index is built.
    pub(super) const ROOM: usize = 1024;

    /// Every item of the table (one scan of three columns).
    pub(super) fn build(items: &Table) -> Res<DedupeIndex> {
        let mut map: HashMap<(u64, u64), Ids> = HashMap::new();
        use arrow_array::cast::AsArray;
        use arrow_array::types::UInt64Type;
        for b in items.scan_columns(&["_id", "namespace", "hash"])? {
            let b = b?;
            let (Some(ids), Some(ns), Some(hashes)) = (
                b.column(0).as_primitive_opt::<UInt64Type>(),
                b.column(1).as_string_opt::<i32>(),
                b.column(2).as_primitive_opt::<UInt64Type>(),
            ) else {
                // Never skip rows: a missing entry would let a duplicate in.
                return Err(MemoryError::Invalid {
                    store: items.name().to_string(),
                    reason: "the items table's _id, namespace or hash column has another type"
                        .into(),
                }
                .into());
            };
            for i in 0..b.num_rows() {
                let key = (embed::fnv1a(ns.value(i).as_bytes()), hashes.value(i));
                Self::add(&mut map, key, ids.value(i));
            }
        }
        map.reserve(Self::ROOM);
        Ok(DedupeIndex { map })
    }

    pub(super) fn add(map: &mut HashMap<(u64, u64), Ids>, key: (u64, u64), id: u64) {
        match map.entry(key) {
            std::collections::hash_map::Entry::Occupied(mut e) => e.get_mut().push(id),
            std::collections::hash_map::Entry::Vacant(e) => {
                e.insert(Ids::One(id));
            }
        }
    }
}

/// The exact-dedupe index of one store (`None` until built, or after being invalidated).
pub(super) type DedupeSlot = Arc<parking_lot::Mutex<Option<DedupeIndex>>>;

/// The dedupe indexes of a database's stores, by store name.
pub(crate) type DedupeSlots = parking_lot::Mutex<HashMap<String, DedupeSlot>>;

impl MemoryStore {
    /// The live item of `namespace` (exactly) that `p` duplicates, by normalised text or
    /// (when configured) by vector similarity.
    pub(super) fn duplicate_of(
        &self,
        items: &Table,
        namespace: &str,
        p: &Prepared,
        now: i64,
    ) -> Res<Option<MemoryItem>> {
        if self.config.dedupe_exact {
            let mut index = self.dedupe.lock();
            let index = match &mut *index {
                Some(ix) => ix,
                built => built.insert(DedupeIndex::build(items)?),
            };
            let key = (embed::fnv1a(namespace.as_bytes()), p.hash);
            let mut candidates = index.map.remove(&key).map(Ids::into_vec).unwrap_or_default();
            candidates.sort_unstable();
            candidates.dedup();
            let mut found: Option<MemoryItem> = None;
            let mut still = Vec::with_capacity(candidates.len());
            for id in candidates {
                let Some(it) = items.get(id)?.map(|r| item_of(&r)) else { continue };
                if it.namespace != namespace || it.content_hash != p.hash {
                    continue;
                }
                still.push(id);
                let live = !it.archived && it.expires_ms.is_none_or(|e| e > now);
                if live && found.is_none() {
                    found = Some(it);
                }
            }
            match still.len() {
                0 => {}
                1 => _ = index.map.insert(key, Ids::One(still[0])),
                _ => _ = index.map.insert(key, Ids::Many(still)),
            }
            if found.is_some() {
                return Ok(found);
            }
        }
        if let (Some(min), Some(v)) = (self.config.dedupe_near, &p.vector)
            && v.iter().any(|x| *x != 0.0)
        {
            let mut live = live_conditions(now);
            live.push(Predicate::eq("namespace", namespace));
            let near =
                items.topk_where("embedding", v, 1, Metric::Cosine, &Predicate::And(live))?;
            if let Some(n) = near.first().filter(|n| 1.0 - n.distance >= min) {
                return Ok(items.get(n.id)?.map(|r| item_of(&r)));
            }
        }
        Ok(None)
    }

    /// Records inside a writing transaction that item `id` of `namespace` now has content
    /// hash `hash` (for exact dedupe; nothing to do before the index is built).
    pub(super) fn note_hash(&self, namespace: &str, hash: u64, id: u64) {
        if let Some(ix) = self.dedupe.lock().as_mut() {
            DedupeIndex::add(&mut ix.map, (embed::fnv1a(namespace.as_bytes()), hash), id);
        }
    }

    /// Inside a transaction: turns prepared item `p` into an update of `old`, the live item
    /// it duplicates (version + 1, its metadata / vector / expiry when given). Returns the id.
    pub(super) fn merge_into(
        &self,
        items: &Table,
        hist: &Table,
        old: MemoryItem,
        p: &Prepared,
        now: i64,
    ) -> Res<u64> {
        let version = old.version as i64 + 1;
        let mut row = Row::new()
            .set("text", p.text.as_str())
            .set("hash", p.hash)
            .set("version", version)
            .set("updated_ms", now);
        if let Some(m) = &p.meta {
            row = row.set("metadata", m.as_str());
        }
        if let Some(v) = &p.vector {
            row = row.set("embedding", Value::Vector(v.to_vec()));
        }
        if let Some(e) = p.expires {
            row = row.set("expires_ms", e);
        }
        items.update(old.id, row)?;
        self.note_hash(&old.namespace, p.hash, old.id);
        Self::keep_creation(hist, &old)?;
        let old_meta = meta_text(&old.metadata);
        let new_meta = p.meta.clone().or_else(|| old_meta.clone());
        hist.insert_row(Self::history_row(
            old.id,
            version,
            "update",
            Some((&old.text, old_meta.as_deref())),
            Some((&p.text, new_meta.as_deref())),
            now,
        ))?;
        Ok(old.id)
    }
}
