//! Primary keys, unique keys and indexes: the definitions a table carries (kept in the
//! manifest) and the key sets that enforce uniqueness, kept in every table snapshot.
//!
//! A unique key's set holds one entry per live row whose key columns are all non-NULL: the
//! key in arrow's row format (bytes that compare as the values do, and no key's bytes are
//! a prefix of another's) followed by the row's `_id`, 8 bytes big-endian. The sets are
//! persistent (`imbl`): a transaction's copy of a table shares them with the snapshot it
//! came from and copies only the nodes it changes, so a write costs O(log n) per row and
//! nobody else sees it before commit. Because writers are serialised and a writer's
//! snapshot is the newest state (see `txn`), a check against its own copy is a check
//! against every committed row: two transactions can never both insert one key.
//!
//! Writes check at the end of each change, as SQL specifies for non-deferred constraints:
//! an update that swaps two rows' keys is allowed, one that leaves two rows with one key is
//! refused, and a refused write changes nothing.
//!
//! Plain indexes (`CREATE INDEX`) have a set too, of every row (rows with NULLs in the key
//! included, so a lookup by a prefix of the columns finds them), enforcing nothing; so do
//! the unique keys, whose uniqueness check skips keys holding a NULL. Lookups by equality on
//! a prefix of a definition's columns and a range on the next one
//! ([`TableSnapshot::index_candidates`]) walk the set in key order.
//!
//! The sets are not stored. A snapshot opened from the manifest (or replayed from the log)
//! has none, and the first write to a table with a key or index builds them from the
//! table's rows (one scan of the key columns), so they cannot be stale or damaged after a
//! crash. A lookup on a snapshot without them builds them for that snapshot (kept with it,
//! shared by the readers of that state); such read-built sets may still hold rows deleted
//! since (a delete on a table whose sets are not built leaves them alone), never miss a
//! row, so lookups return candidates that the caller's filters confirm.
//!
//! A table's column defaults live here too: SQL text by column id, kept and handed out,
//! never evaluated (the SQL layer plans them).
//!
//! What this module must not do: change rows.

use std::ops::Bound;

use arrow_array::{Array, ArrayRef, Float32Array, Float64Array, RecordBatch};
use arrow_row::{RowConverter, Rows, SortField};

use super::*;
use crate::manifest::{IndexDef, IndexKind};

/// One entry of a key set: the key's row-format bytes, then the `_id` (big-endian).
type Entry = Arc<[u8]>;

/// The key sets of a table, one per definition.
#[derive(Debug, Clone, Default)]
pub(crate) struct KeySets {
    sets: Vec<imbl::OrdSet<Entry>>,
}

/// The sets a reader built for a snapshot that had none (see the module docs).
pub(crate) type ReadSets = Arc<std::sync::OnceLock<Arc<KeySets>>>;

/// A key or index to create, its columns by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewIndex {
    /// Its name; `None` names it after the table and columns (`t_pkey`, `t_a_b_key`,
    /// `t_a_idx`).
    pub name: Option<String>,
    /// Index, unique key or primary key.
    pub kind: IndexKind,
    /// Key columns in key order.
    pub columns: Vec<String>,
}

/// What an insert does with a row whose key some row already has
/// ([`Transaction::insert_on_conflict`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnConflict {
    /// Skip the row (`INSERT OR IGNORE`, `ON CONFLICT [(cols)] DO NOTHING`). With
    /// `columns`, only a duplicate of the unique key over exactly those columns is skipped;
    /// a duplicate of another key is still an error. Without, a duplicate of any key.
    Ignore {
        /// The conflict target's columns (any order), or `None` for every unique key.
        columns: Option<Vec<String>>,
    },
    /// Delete every row that has one of the new row's keys, then insert it
    /// (`INSERT OR REPLACE`, `REPLACE INTO`). Among the rows of one insert, a later row
    /// replaces an earlier one.
    Replace,
}

impl TableSnapshot {
    /// Column defaults: column name and the SQL text of its default expression.
    pub fn column_defaults(&self) -> Vec<(String, String)> {
        self.defaults
            .iter()
            .filter_map(|(c, sql)| {
                let p = self.schema.position_of_id(*c)?;
                Some((self.schema.full_schema().field(p).name().clone(), sql.clone()))
            })
            .collect()
    }

    /// The table's primary key, unique keys and indexes, in creation order.
    pub fn indexes(&self) -> &[IndexDef] {
        &self.indexes
    }

    /// Full-schema positions of a definition's columns.
    fn key_positions(&self, def: &IndexDef) -> Result<Vec<usize>> {
        def.columns
            .iter()
            .map(|&c| {
                self.schema.position_of_id(c).ok_or_else(|| Error::InvalidInput {
                    table: self.name.to_string(),
                    reason: format!("index '{}' names column id {c}, which is gone", def.name),
                })
            })
            .collect()
    }

    /// Whether a change to these full-schema positions can change a key or index.
    pub(crate) fn touches_index(&self, positions: impl Fn(usize) -> bool) -> bool {
        self.indexes.iter().any(|d| {
            d.columns.iter().any(|&c| self.schema.position_of_id(c).is_some_and(&positions))
        })
    }

    /// Full-schema positions of `_id` and of every definition's columns.
    fn key_projection(&self) -> Result<Vec<usize>> {
        let mut projection = vec![0];
        for d in self.indexes.iter() {
            for p in self.key_positions(d)? {
                if !projection.contains(&p) {
                    projection.push(p);
                }
            }
        }
        Ok(projection)
    }

    /// The sets of the rows of this state; with `check`, fails with
    /// [`Error::UniqueViolation`] when the rows break a unique key.
    fn build_sets(&self, check: bool) -> Result<KeySets> {
        let mut keys = KeySets { sets: self.indexes.iter().map(|_| imbl::OrdSet::new()).collect() };
        let projection = self.key_projection()?;
        let snap = Arc::new(catalog::clone_table(self));
        for batch in snap.scan(&projection)? {
            let batch = batch?;
            // Full-width columns with the projected ones in place: `add` indexes by
            // full-schema position.
            let mut full: Vec<Option<ArrayRef>> =
                vec![None; self.schema.full_schema().fields().len()];
            for (i, &p) in projection.iter().enumerate() {
                full[p] = Some(batch.column(i).clone());
            }
            self.add_rows(&mut keys, &full, check)?;
        }
        Ok(keys)
    }

    /// Builds the key sets from the rows when they are not built yet; fails with
    /// [`Error::UniqueViolation`] when the rows break a unique key.
    pub(crate) fn ensure_keys(&mut self) -> Result<()> {
        if self.keys.is_some() || self.indexes.is_empty() {
            return Ok(());
        }
        self.keys = Some(self.build_sets(true)?);
        Ok(())
    }

    /// Applies a change to the key sets: the rows at `removed` (locations on this state, with
    /// their `_id`s) leave, the full-schema rows `added` come in. Checked as a whole; on
    /// error nothing changed. A table without keys or indexes costs nothing.
    pub(crate) fn change_keys(
        &mut self,
        removed: &[RowLocation],
        removed_ids: &[u64],
        added: &[RecordBatch],
    ) -> Result<()> {
        if self.indexes.is_empty() {
            return Ok(());
        }
        self.ensure_keys()?;
        let Some(mut keys) = self.keys.clone() else { return Ok(()) };
        if !removed.is_empty() {
            let mut projection = self.key_projection()?;
            projection.remove(0);
            let cols = self.columns_at(removed, &projection)?;
            let mut full: Vec<Option<ArrayRef>> =
                vec![None; self.schema.full_schema().fields().len()];
            for (i, &p) in projection.iter().enumerate() {
                full[p] = Some(cols[i].clone());
            }
            for (d, set) in self.indexes.iter().zip(keys.sets.iter_mut()) {
                let encoded = encode(self, d, &full)?;
                for (r, &id) in removed_ids.iter().enumerate() {
                    set.remove(&entry(encoded.bytes(r), id)[..]);
                }
            }
        }
        for b in added {
            let full: Vec<Option<ArrayRef>> = b.columns().iter().cloned().map(Some).collect();
            self.add_rows(&mut keys, &full, true)?;
        }
        self.keys = Some(keys);
        Ok(())
    }

    /// Adds rows (full-schema columns; `_id` and the key columns present) to `keys`; with
    /// `check`, refusing a unique key some row already has.
    fn add_rows(&self, keys: &mut KeySets, full: &[Option<ArrayRef>], check: bool) -> Result<()> {
        let ids = full
            .first()
            .and_then(|c| c.as_ref())
            .and_then(|c| c.as_any().downcast_ref::<UInt64Array>())
            .ok_or_else(|| Error::InvalidInput {
                table: self.name.to_string(),
                reason: "rows without their _id".into(),
            })?
            .clone();
        for (d, set) in self.indexes.iter().zip(keys.sets.iter_mut()) {
            let encoded = encode(self, d, full)?;
            let unique = check && d.kind.is_unique();
            for (r, id) in ids.values().iter().enumerate() {
                if unique
                    && let Some(key) = encoded.key(r)
                    && holder_in(set, key).is_some()
                {
                    return Err(self.violation(d, &encoded, r));
                }
                set.insert(entry(encoded.bytes(r), *id));
            }
        }
        Ok(())
    }

    fn violation(&self, d: &IndexDef, encoded: &Encoded, row: usize) -> Error {
        let (columns, value) = self.describe_key(d, encoded, row);
        Error::UniqueViolation {
            table: self.name.to_string(),
            constraint: d.name.clone(),
            columns,
            value,
        }
    }

    /// A key's columns and row `row`'s values of them, comma-separated.
    fn describe_key(&self, d: &IndexDef, encoded: &Encoded, row: usize) -> (String, String) {
        let names: Vec<String> = d
            .columns
            .iter()
            .filter_map(|&c| self.schema.position_of_id(c))
            .map(|p| self.schema.full_schema().field(p).name().clone())
            .collect();
        let options = arrow_cast::display::FormatOptions::default().with_null("NULL");
        let value: Vec<String> = encoded
            .columns
            .iter()
            .map(|c| {
                arrow_cast::display::ArrayFormatter::try_new(c.as_ref(), &options)
                    .map(|f| f.value(row).to_string())
                    .unwrap_or_else(|_| "?".into())
            })
            .collect();
        (names.join(", "), value.join(", "))
    }
}

impl TableSnapshot {
    /// The `_id` of the live row whose key under definition `d` (position in
    /// [`TableSnapshot::indexes`]) is `key`, if any. The key sets must be built.
    fn holder(&self, d: usize, key: &[u8]) -> Option<u64> {
        holder_in(self.keys.as_ref()?.sets.get(d)?, key)
    }

    /// Position in [`TableSnapshot::indexes`] of the unique key over exactly `cols` (in
    /// any order).
    fn unique_key_over(&self, cols: &[String]) -> Result<usize> {
        let mut ids = Vec::with_capacity(cols.len());
        for c in cols {
            let p = self.schema.index_of(c).filter(|&p| p > 0).ok_or_else(|| {
                Error::ColumnNotFound { table: self.name.to_string(), column: c.clone() }
            })?;
            ids.push(self.schema.column_id_at(p));
        }
        ids.sort_unstable();
        (0..self.indexes.len())
            .find(|&i| {
                let mut have = self.indexes[i].columns.clone();
                have.sort_unstable();
                self.indexes[i].kind.is_unique() && have == ids
            })
            .ok_or_else(|| Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!(
                    "ON CONFLICT ({}): no primary key or unique key is over exactly these columns",
                    cols.join(", ")
                ),
            })
    }

    /// For each row of each batch of `full` (full-schema rows, placeholder `_id`s), the
    /// `_id` of the live row that has its key under the unique key over `cols` (`None`: no
    /// such row, or a NULL in the key). Two rows of `full` with one key are refused.
    pub(crate) fn split_by_key(
        &mut self,
        full: &[RecordBatch],
        cols: &[String],
    ) -> Result<Vec<Vec<Option<u64>>>> {
        self.ensure_keys()?;
        let d = self.unique_key_over(cols)?;
        let mut seen = std::collections::HashSet::new();
        let mut hits = Vec::with_capacity(full.len());
        for b in full {
            let cols: Vec<Option<ArrayRef>> = b.columns().iter().cloned().map(Some).collect();
            let encoded = encode(self, &self.indexes[d], &cols)?;
            let mut h = Vec::with_capacity(b.num_rows());
            for r in 0..b.num_rows() {
                let hit = match encoded.key(r) {
                    Some(key) => {
                        if !seen.insert(key.to_vec()) {
                            let def = &self.indexes[d];
                            let (columns, value) = self.describe_key(def, &encoded, r);
                            return Err(Error::InvalidInput {
                                table: self.name.to_string(),
                                reason: format!(
                                    "ON CONFLICT DO UPDATE: two rows of the INSERT have the key \
                                     {} ({columns}) = ({value}); a row cannot be changed twice \
                                     in one statement",
                                    def.name
                                ),
                            });
                        }
                        self.holder(d, key)
                    }
                    None => None,
                };
                h.push(hit);
            }
            hits.push(h);
        }
        Ok(hits)
    }

    /// Decides an insert of `full` (full-schema rows; their `_id`s are not used) under
    /// `mode`: which rows to insert, and which live rows to delete first.
    pub(crate) fn resolve_conflicts(
        &mut self,
        full: &[RecordBatch],
        mode: &OnConflict,
    ) -> Result<(Vec<Vec<bool>>, Vec<u64>)> {
        self.ensure_keys()?;
        let unique: Vec<usize> =
            (0..self.indexes.len()).filter(|&i| self.indexes[i].kind.is_unique()).collect();
        // The definitions a duplicate is resolved on (others stay errors).
        let target: Vec<usize> = match mode {
            OnConflict::Ignore { columns: Some(cols) } => vec![self.unique_key_over(cols)?],
            _ => unique.clone(),
        };
        let replace = matches!(mode, OnConflict::Replace);
        // Keys of the rows kept so far: (definition, key) -> (batch, row).
        let mut kept: std::collections::HashMap<(usize, Vec<u8>), (usize, usize)> =
            std::collections::HashMap::new();
        let mut keep: Vec<Vec<bool>> = full.iter().map(|b| vec![true; b.num_rows()]).collect();
        let mut doomed: Vec<u64> = Vec::new();
        let mut doomed_set = std::collections::HashSet::new();
        let encoded: Vec<Vec<(usize, Encoded)>> = full
            .iter()
            .map(|b| {
                let cols: Vec<Option<ArrayRef>> = b.columns().iter().cloned().map(Some).collect();
                unique.iter().map(|&d| Ok((d, encode(self, &self.indexes[d], &cols)?))).collect()
            })
            .collect::<Result<_>>()?;
        for (bi, b) in full.iter().enumerate() {
            for r in 0..b.num_rows() {
                let keys: Vec<(usize, Option<&[u8]>)> =
                    encoded[bi].iter().map(|(d, e)| (*d, e.key(r))).collect();
                let mut skip = false;
                for &(d, key) in &keys {
                    let Some(key) = key else { continue };
                    if !target.contains(&d) {
                        continue;
                    }
                    let earlier = kept.get(&(d, key.to_vec())).copied();
                    let live = self.holder(d, key).filter(|id| !doomed_set.contains(id));
                    if replace {
                        if let Some(id) = live {
                            doomed_set.insert(id);
                            doomed.push(id);
                        }
                        if let Some((eb, er)) = earlier {
                            // A later row replaces an earlier one: forget the earlier's keys.
                            keep[eb][er] = false;
                            for (d2, e2) in &encoded[eb] {
                                if let Some(k2) = e2.key(er) {
                                    kept.remove(&(*d2, k2.to_vec()));
                                }
                            }
                        }
                    } else if earlier.is_some() || live.is_some() {
                        skip = true;
                        break;
                    }
                }
                if skip {
                    keep[bi][r] = false;
                    continue;
                }
                for &(d, key) in &keys {
                    if let Some(key) = key {
                        kept.insert((d, key.to_vec()), (bi, r));
                    }
                }
            }
        }
        Ok((keep, doomed))
    }
}

impl TableSnapshot {
    /// The `_id` of the live row whose key under unique key `def` (a position in
    /// [`TableSnapshot::indexes`]) is `key` (one one-row array per key column, of the
    /// columns' types): `Some(None)` when no row has it (or it holds a NULL), `None` when
    /// this snapshot cannot answer (no such unique key, or its key sets are not built: a
    /// table not written since the database was opened).
    pub fn find_by_key(&self, def: usize, key: &[ArrayRef]) -> Result<Option<Option<u64>>> {
        let Some(d) = self.indexes.get(def).filter(|d| d.kind.is_unique()) else {
            return Ok(None);
        };
        if self.keys.is_none() || key.len() != d.columns.len() {
            return Ok(None);
        }
        let mut full: Vec<Option<ArrayRef>> = vec![None; self.schema.full_schema().fields().len()];
        for (p, a) in self.key_positions(d)?.into_iter().zip(key) {
            if a.len() != 1 || a.data_type() != self.schema.full_schema().field(p).data_type() {
                return Ok(None);
            }
            full[p] = Some(a.clone());
        }
        let encoded = encode(self, d, &full)?;
        Ok(Some(encoded.key(0).and_then(|k| self.holder(def, k))))
    }
}

/// A range of one key column's values, for [`TableSnapshot::index_candidates`]: each bound
/// a one-row array of the column's type.
pub type KeyRange = (Bound<ArrayRef>, Bound<ArrayRef>);

impl TableSnapshot {
    /// The key or index whose first column is `column`, if any: its position in
    /// [`TableSnapshot::indexes`] and name.
    pub fn index_on(&self, column: &str) -> Option<(usize, &str)> {
        let p = self.schema.index_of(column).filter(|&p| p > 0)?;
        let id = self.schema.column_id_at(p);
        self.indexes
            .iter()
            .position(|d| d.columns.first() == Some(&id))
            .map(|i| (i, self.indexes[i].name.as_str()))
    }

    /// [`TableSnapshot::index_candidates`] for `column IN values` (storage constants, as a
    /// join's key list arrives), through the first key or index on `column`: the name of the
    /// definition used and the sorted candidates. `None` when there is no such index, a
    /// value does not convert to the column's type, or more than `limit` rows match. A NULL
    /// value matches nothing.
    pub fn index_candidates_in(
        &self,
        column: &str,
        values: &[crate::predicate::Scalar],
        limit: usize,
    ) -> Result<Option<(String, Vec<u64>)>> {
        let Some((def, name)) = self.index_on(column) else { return Ok(None) };
        let Some(p) = self.schema.index_of(column) else { return Ok(None) };
        let dt = self.schema.full_schema().field(p).data_type().clone();
        let mut ids = Vec::new();
        for v in values {
            let Ok(a) = crate::predicate::scalar_array(v, &dt, column) else { return Ok(None) };
            let Some(a) = a else { continue };
            match self.index_candidates(def, &[a], None, limit.saturating_sub(ids.len()))? {
                Some(found) => ids.extend(found),
                None => return Ok(None),
            }
        }
        ids.sort_unstable();
        ids.dedup();
        Ok(Some((name.to_string(), ids)))
    }

    /// Whether lookups on this state find the key sets built (by a write, or by an earlier
    /// lookup); otherwise the first [`TableSnapshot::index_candidates`] builds them.
    pub fn index_sets_built(&self) -> bool {
        self.keys.is_some() || self.read_keys.get().is_some()
    }

    /// The `_id`s of the rows whose key under definition `def` (a position in
    /// [`TableSnapshot::indexes`]) starts with `prefix` (one one-row array per leading key
    /// column, of the columns' types) and, with `range`, whose next key column lies in it;
    /// sorted. Candidates: rows deleted since the sets were built may be among them, so the
    /// caller still applies its conditions; no matching row is missing. NULL never equals a
    /// prefix value; a range may return rows with a NULL in its column. `None` when more
    /// than `limit` rows match (a scan is cheaper), or the arguments do not fit the
    /// definition.
    ///
    /// Builds the sets for this snapshot first when it has none (one scan of the key
    /// columns, kept for later lookups on this state).
    pub fn index_candidates(
        &self,
        def: usize,
        prefix: &[ArrayRef],
        range: Option<&KeyRange>,
        limit: usize,
    ) -> Result<Option<Vec<u64>>> {
        let Some(d) = self.indexes.get(def) else { return Ok(None) };
        let width = prefix.len() + usize::from(range.is_some());
        if width == 0 || width > d.columns.len() {
            return Ok(None);
        }
        let positions = self.key_positions(d)?;
        let types: Vec<DataType> = positions[..width]
            .iter()
            .map(|&p| self.schema.full_schema().field(p).data_type().clone())
            .collect();
        let fits = |a: &ArrayRef, t: &DataType| a.len() == 1 && a.data_type() == t;
        if prefix.iter().zip(&types).any(|(a, t)| !fits(a, t) || a.is_null(0)) {
            return Ok(None);
        }
        // The bytes of `prefix` followed by `last`: a prefix of the entries that have them
        // (the row format concatenates the columns' encodings).
        let encode_prefix = |last: Option<&ArrayRef>| -> Result<Vec<u8>> {
            let mut columns: Vec<ArrayRef> = prefix.iter().cloned().map(canonical).collect();
            columns.extend(last.cloned().map(canonical));
            if columns.is_empty() {
                return Ok(Vec::new());
            }
            let fields = columns.iter().map(|c| SortField::new(c.data_type().clone())).collect();
            let err = |e| Error::arrow(format!("index '{}' of '{}'", d.name, self.name), e);
            let rows =
                RowConverter::new(fields).map_err(err)?.convert_columns(&columns).map_err(err)?;
            Ok(rows.row(0).data().to_vec())
        };
        let bound = |b: &Bound<ArrayRef>| -> Result<Option<Bound<Vec<u8>>>> {
            Ok(Some(match b {
                Bound::Unbounded => Bound::Unbounded,
                Bound::Included(v) | Bound::Excluded(v) => {
                    if !fits(v, &types[width - 1]) || v.is_null(0) {
                        return Ok(None);
                    }
                    let e = encode_prefix(Some(v))?;
                    if matches!(b, Bound::Included(_)) {
                        Bound::Included(e)
                    } else {
                        Bound::Excluded(e)
                    }
                }
            }))
        };
        let (lower, upper) = match range {
            Some((lo, hi)) => match (bound(lo)?, bound(hi)?) {
                (Some(lo), Some(hi)) => (lo, hi),
                _ => return Ok(None),
            },
            None => (Bound::Unbounded, Bound::Unbounded),
        };
        let base = encode_prefix(None)?;
        let built;
        let sets: &KeySets = match &self.keys {
            Some(k) => k,
            None => {
                built = match self.read_keys.get() {
                    Some(k) => k.clone(),
                    None => {
                        let k = Arc::new(self.build_sets(false)?);
                        let _ = self.read_keys.set(k.clone());
                        k
                    }
                };
                &built
            }
        };
        let Some(set) = sets.sets.get(def) else { return Ok(None) };
        let start: &[u8] = match &lower {
            Bound::Included(e) | Bound::Excluded(e) => e,
            Bound::Unbounded => &base,
        };
        let mut ids = Vec::new();
        for e in set.range::<_, [u8]>((Bound::Included(start), Bound::Unbounded)) {
            let key = &e[..e.len().saturating_sub(8)];
            if !key.starts_with(&base) {
                break;
            }
            if let Bound::Excluded(lo) = &lower
                && key.starts_with(lo)
            {
                continue;
            }
            match &upper {
                Bound::Included(hi) if key > &hi[..] && !key.starts_with(hi) => break,
                Bound::Excluded(hi) if key >= &hi[..] => break,
                _ => {}
            }
            if ids.len() == limit {
                return Ok(None);
            }
            if let Ok(id) = e[key.len()..].try_into() {
                ids.push(u64::from_be_bytes(id));
            }
        }
        ids.sort_unstable();
        Ok(Some(ids))
    }
}

/// A definition's key columns of some rows, in row format.
struct Encoded {
    columns: Vec<ArrayRef>,
    rows: Rows,
}

impl Encoded {
    /// Row `r`'s key bytes, NULLs included (what its set entry starts with).
    fn bytes(&self, r: usize) -> &[u8] {
        self.rows.row(r).data()
    }

    /// Row `r`'s key bytes for uniqueness; `None` when one of its key columns is NULL
    /// (NULLs are distinct from each other, so such a key conflicts with nothing).
    fn key(&self, r: usize) -> Option<&[u8]> {
        if self.columns.iter().any(|c| c.is_null(r)) {
            return None;
        }
        Some(self.rows.row(r).data())
    }
}

fn encode(t: &TableSnapshot, d: &IndexDef, full: &[Option<ArrayRef>]) -> Result<Encoded> {
    let err = |reason: String| Error::InvalidInput { table: t.name.to_string(), reason };
    let mut columns = Vec::with_capacity(d.columns.len());
    for p in t.key_positions(d)? {
        let c = full
            .get(p)
            .and_then(|c| c.clone())
            .ok_or_else(|| err(format!("key column {p} missing from the rows")))?;
        columns.push(canonical(c));
    }
    let fields = columns.iter().map(|c| SortField::new(c.data_type().clone())).collect();
    let converter = RowConverter::new(fields)
        .map_err(|e| Error::arrow(format!("key '{}' of '{}'", d.name, t.name), e))?;
    let rows = converter
        .convert_columns(&columns)
        .map_err(|e| Error::arrow(format!("key '{}' of '{}'", d.name, t.name), e))?;
    Ok(Encoded { columns, rows })
}

/// The column as keys compare it: `-0.0` is `0.0` (they are equal in SQL).
fn canonical(c: ArrayRef) -> ArrayRef {
    let zero32 = |v: f32| if v == 0.0 { 0.0 } else { v };
    let zero64 = |v: f64| if v == 0.0 { 0.0 } else { v };
    if let Some(a) = c.as_any().downcast_ref::<Float32Array>() {
        return Arc::new(a.unary::<_, arrow_array::types::Float32Type>(zero32));
    }
    if let Some(a) = c.as_any().downcast_ref::<Float64Array>() {
        return Arc::new(a.unary::<_, arrow_array::types::Float64Type>(zero64));
    }
    c
}

/// The `_id` of the entry of `set` whose key is `key`, if any: the entries `key ‖ id` lie
/// between `key ‖ 0…0` and `key ‖ ff…ff` (no key's bytes are a prefix of another's).
fn holder_in(set: &imbl::OrdSet<Entry>, key: &[u8]) -> Option<u64> {
    let mut lo = Vec::with_capacity(key.len() + 8);
    lo.extend_from_slice(key);
    lo.extend_from_slice(&[0; 8]);
    let mut hi = lo.clone();
    hi[key.len()..].fill(0xff);
    set.range::<_, [u8]>((Bound::Included(&lo[..]), Bound::Included(&hi[..])))
        .find(|e| e.len() == key.len() + 8)
        .and_then(|e| e[key.len()..].try_into().ok().map(u64::from_be_bytes))
}

fn entry(key: &[u8], id: u64) -> Entry {
    let mut e = Vec::with_capacity(key.len() + 8);
    e.extend_from_slice(key);
    e.extend_from_slice(&id.to_be_bytes());
    e.into()
}

/// The definitions for `specs` on a table of `schema` named `table`, with names chosen
/// where none is given; checks columns, types, duplicates and that at most one is the
/// primary key. `taken` says whether a name is in use already.
pub(super) fn define(
    table: &str,
    schema: &TableSchema,
    existing: &[IndexDef],
    specs: &[NewIndex],
    taken: &dyn Fn(&str) -> bool,
) -> Result<Vec<IndexDef>> {
    let bad = |reason: String| Error::InvalidInput { table: table.to_string(), reason };
    let mut out: Vec<IndexDef> = Vec::with_capacity(specs.len());
    for s in specs {
        if s.columns.is_empty() {
            return Err(bad("a key or index needs at least one column".into()));
        }
        let mut columns = Vec::with_capacity(s.columns.len());
        for c in &s.columns {
            let p = schema
                .index_of(c)
                .filter(|&p| p > 0)
                .ok_or_else(|| Error::ColumnNotFound { table: table.into(), column: c.clone() })?;
            let id = schema.column_id_at(p);
            if columns.contains(&id) {
                return Err(bad(format!("column '{c}' is named twice in one key")));
            }
            let dt = schema.full_schema().field(p).data_type().clone();
            if !RowConverter::supports_fields(&[SortField::new(dt.clone())]) {
                return Err(bad(format!("column '{c}' of type {dt} cannot be in a key or index")));
            }
            columns.push(id);
        }
        if s.kind == IndexKind::PrimaryKey
            && existing.iter().chain(&out).any(|d| d.kind == IndexKind::PrimaryKey)
        {
            return Err(bad("a table has at most one primary key".into()));
        }
        let name = match &s.name {
            Some(n) => {
                check_name(n)?;
                n.clone()
            }
            None => {
                let stem = match s.kind {
                    IndexKind::PrimaryKey => format!("{table}_pkey"),
                    IndexKind::Unique => format!("{table}_{}_key", s.columns.join("_")),
                    IndexKind::Index => format!("{table}_{}_idx", s.columns.join("_")),
                };
                let free = |n: &str| !taken(n) && !existing.iter().chain(&out).any(|d| d.name == n);
                let mut n = stem.clone();
                let mut k = 1;
                while !free(&n) {
                    n = format!("{stem}{k}");
                    k += 1;
                }
                n
            }
        };
        if taken(&name) || existing.iter().chain(&out).any(|d| d.name == name) {
            return Err(Error::IndexExists { index: name });
        }
        out.push(IndexDef { name, kind: s.kind, columns });
    }
    Ok(out)
}

/// `schema` with the columns of its primary key (by name) made `NOT NULL`.
pub(super) fn primary_key_not_null(schema: &Schema, specs: &[NewIndex]) -> Schema {
    let pk: Vec<&str> = specs
        .iter()
        .filter(|s| s.kind == IndexKind::PrimaryKey)
        .flat_map(|s| s.columns.iter().map(String::as_str))
        .collect();
    if pk.is_empty() {
        return schema.clone();
    }
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            let f = f.as_ref().clone();
            if pk.contains(&f.name().as_str()) { f.with_nullable(false) } else { f }
        })
        .collect();
    Schema::new_with_metadata(fields, schema.metadata().clone())
}

impl DbSnapshot {
    /// The table that has the index (or key) `name`, if any.
    pub fn index_table(&self, name: &str) -> Option<&Arc<TableSnapshot>> {
        self.tables.values().find(|t| t.indexes.iter().any(|d| d.name == name))
    }

    /// Whether `name` is a table, a view or an index (one namespace, as in SQLite and
    /// PostgreSQL), not counting the objects of table `except`.
    pub(super) fn name_taken(&self, name: &str, except: Option<u64>) -> bool {
        self.views.contains_key(name)
            || self.tables.get(name).is_some_and(|t| Some(t.id) != except)
            || self.index_table(name).is_some_and(|t| Some(t.id) != except)
    }
}

impl Store {
    /// `CREATE [UNIQUE] INDEX`: adds a key or index to a table. A unique one is checked
    /// against the rows first ([`Error::UniqueViolation`] names a duplicate). With
    /// `if_not_exists`, an index of that name already there is no error.
    pub fn create_index(&self, table: &str, spec: &NewIndex, if_not_exists: bool) -> Result<()> {
        self.check_writable()?;
        self.catalog_change(|s, next| s.create_index_edit(next, table, spec, if_not_exists))
    }

    /// The catalog part of [`Store::create_index`].
    pub(crate) fn create_index_edit(
        &self,
        next: &mut DbSnapshot,
        table: &str,
        spec: &NewIndex,
        if_not_exists: bool,
    ) -> Result<Effect> {
        if let Some(name) = &spec.name
            && next.index_table(name).is_some()
        {
            return if if_not_exists {
                Ok(Effect { unchanged: true, ..Effect::default() })
            } else {
                Err(Error::IndexExists { index: name.clone() })
            };
        }
        let t = next.table(table)?.clone();
        let taken = |n: &str| next.name_taken(n, None);
        let defs = define(table, &t.schema, &t.indexes, std::slice::from_ref(spec), &taken)?;
        let mut nt = catalog::clone_table(&t);
        let mut all = nt.indexes.to_vec();
        all.extend(defs);
        nt.indexes = all.into();
        // Built again with the new definition (the check of a new unique key).
        nt.keys = None;
        nt.ensure_keys()?;
        let id = nt.id;
        next.tables.insert(nt.name.clone(), Arc::new(nt));
        Ok(Effect { depends: vec![id], ..Effect::default() })
    }

    /// `DROP INDEX`: removes a key or index by name (a primary key too).
    pub fn drop_index(&self, name: &str) -> Result<()> {
        self.check_writable()?;
        self.catalog_change(|s, next| s.drop_index_edit(next, name))
    }

    /// The catalog part of [`Store::drop_index`].
    pub(crate) fn drop_index_edit(&self, next: &mut DbSnapshot, name: &str) -> Result<Effect> {
        let t = next
            .index_table(name)
            .cloned()
            .ok_or_else(|| Error::IndexNotFound { index: name.to_string() })?;
        let mut nt = catalog::clone_table(&t);
        let pos = nt.indexes.iter().position(|d| d.name == name).unwrap_or(0);
        let mut all = nt.indexes.to_vec();
        all.remove(pos);
        if let Some(mut keys) = nt.keys.take()
            && pos < keys.sets.len()
        {
            keys.sets.remove(pos);
            nt.keys = Some(keys);
        }
        nt.indexes = all.into();
        let id = nt.id;
        next.tables.insert(nt.name.clone(), Arc::new(nt));
        // Rows logged after the drop may break the dropped key: the manifest without it
        // must be synced before them.
        Ok(Effect { depends: vec![id], ..Effect::default() })
    }
}

#[cfg(test)]
mod tests {
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::DataType;

    use super::*;
    use crate::io::MemFs;

    fn open(fs: &MemFs) -> Store {
        let opts = StoreOptions { durability: Durability::ProcessSafe, ..StoreOptions::default() };
        Store::open(Arc::new(fs.clone()), Path::new("/db"), Path::new(":memory:"), opts).unwrap()
    }

    fn rows(keys: &[Option<i64>], names: &[&str]) -> RecordBatch {
        let s = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        RecordBatch::try_new(
            s,
            vec![
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(StringArray::from(names.to_vec())),
            ],
        )
        .unwrap()
    }

    fn keyed(store: &Store) {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]);
        let keys = [
            NewIndex { name: None, kind: IndexKind::PrimaryKey, columns: vec!["k".into()] },
            NewIndex { name: None, kind: IndexKind::Unique, columns: vec!["name".into()] },
        ];
        store.create_table_with_keys("t", &schema, false, &keys).unwrap();
    }

    fn count(store: &Store) -> u64 {
        store.snapshot().table("t").unwrap().count()
    }

    fn is_dup(r: Result<impl std::fmt::Debug>, constraint: &str, value: &str) {
        match r {
            Err(Error::UniqueViolation { constraint: c, value: v, table, .. }) => {
                assert_eq!((c.as_str(), v.as_str(), table.as_str()), (constraint, value, "t"));
            }
            other => panic!("expected a duplicate of {constraint}, got {other:?}"),
        }
    }

    #[test]
    fn duplicates_are_refused_and_nothing_is_written() {
        let fs = MemFs::new();
        let s = open(&fs);
        keyed(&s);
        let t = s.snapshot().table("t").unwrap().clone();
        assert_eq!(t.indexes().len(), 2);
        assert_eq!(t.indexes()[0].name, "t_pkey");
        assert_eq!(t.indexes()[1].name, "t_name_key");
        // The primary key's column became NOT NULL.
        assert!(!t.schema().full_schema().field(1).is_nullable());
        s.insert("t", &[rows(&[Some(1), Some(2)], &["a", "b"])]).unwrap();
        is_dup(s.insert("t", &[rows(&[Some(3), Some(1)], &["c", "d"])]), "t_pkey", "1");
        is_dup(s.insert("t", &[rows(&[Some(5), Some(5)], &["e", "f"])]), "t_pkey", "5");
        is_dup(s.insert("t", &[rows(&[Some(6)], &["a"])]), "t_name_key", "a");
        assert!(s.insert("t", &[rows(&[None], &["z"])]).is_err(), "NULL primary key");
        assert_eq!(count(&s), 2);
        // NULLs in a unique key are distinct from each other.
        let nulls = rows(&[Some(7), Some(8)], &["x", "y"]);
        let nulls = RecordBatch::try_new(
            nulls.schema(),
            vec![nulls.column(0).clone(), Arc::new(StringArray::from(vec![None::<&str>, None]))],
        )
        .unwrap();
        s.insert("t", &[nulls]).unwrap();
        // Flushed rows (segments) are checked as well as memtable rows.
        s.flush().unwrap();
        is_dup(s.insert("t", &[rows(&[Some(2)], &["q"])]), "t_pkey", "2");
        assert_eq!(count(&s), 4);
    }

    #[test]
    fn deletes_free_keys_and_updates_are_checked_at_the_end() {
        let fs = MemFs::new();
        let s = open(&fs);
        keyed(&s);
        let r = s.insert("t", &[rows(&[Some(1), Some(2), Some(3)], &["a", "b", "c"])]).unwrap();
        let ids: Vec<u64> = r.ids().collect();
        s.delete("t", &[ids[0], ids[0]]).unwrap();
        s.insert("t", &[rows(&[Some(1)], &["a"])]).unwrap();
        // Swapping two keys in one update is allowed (checked at its end)...
        s.update(
            "t",
            &[ids[1], ids[2]],
            &rows(&[Some(3), Some(2)], &["b", "c"]).project(&[0]).unwrap(),
        )
        .unwrap();
        // ...one that leaves two rows with one key is not, and changes nothing.
        let before = s.snapshot().table("t").unwrap().count();
        is_dup(
            s.update("t", &[ids[1]], &rows(&[Some(2)], &["x"]).project(&[0]).unwrap()),
            "t_pkey",
            "2",
        );
        assert_eq!(count(&s), before);
        // An update of other columns leaves the keys alone.
        let name_only = rows(&[Some(0)], &["n"]).project(&[1]).unwrap();
        s.update("t", &[ids[1]], &name_only).unwrap();
        is_dup(s.insert("t", &[rows(&[Some(9)], &["n"])]), "t_name_key", "n");
    }

    #[test]
    fn keys_survive_reopen_and_log_replay() {
        let fs = MemFs::new();
        let s = open(&fs);
        keyed(&s);
        s.insert("t", &[rows(&[Some(1)], &["a"])]).unwrap();
        s.flush().unwrap();
        s.insert("t", &[rows(&[Some(2)], &["b"])]).unwrap(); // only in the log
        std::mem::forget(s); // a killed process
        let s = open(&fs);
        let t = s.snapshot().table("t").unwrap().clone();
        assert_eq!(
            t.indexes().iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
            ["t_pkey", "t_name_key"]
        );
        is_dup(s.insert("t", &[rows(&[Some(2)], &["z"])]), "t_pkey", "2");
        is_dup(s.insert("t", &[rows(&[Some(3)], &["a"])]), "t_name_key", "a");
        s.insert("t", &[rows(&[Some(3)], &["c"])]).unwrap();
        assert_eq!(count(&s), 3);
    }

    #[test]
    fn concurrent_inserts_of_one_key_let_exactly_one_in() {
        let fs = MemFs::new();
        let s = Arc::new(open(&fs));
        keyed(&s);
        for k in 0..20i64 {
            let oks: usize = std::thread::scope(|scope| {
                let hs: Vec<_> = (0..2)
                    .map(|w| {
                        let s = s.clone();
                        scope.spawn(move || {
                            let mut txn = s.begin(Durability::ProcessSafe).unwrap();
                            let name = format!("w{w}_{k}");
                            let r = txn.insert(&s, "t", &[rows(&[Some(k)], &[name.as_str()])]);
                            match r {
                                Ok(_) => usize::from(s.commit(txn).is_ok()),
                                Err(_) => {
                                    s.rollback(txn);
                                    0
                                }
                            }
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(oks, 1, "key {k}");
        }
        assert_eq!(count(&s), 20);
    }

    #[test]
    fn savepoints_and_rollback_restore_the_keys() {
        let fs = MemFs::new();
        let s = open(&fs);
        keyed(&s);
        let mut txn = s.begin(Durability::ProcessSafe).unwrap();
        txn.insert(&s, "t", &[rows(&[Some(1)], &["a"])]).unwrap();
        let mark = txn.savepoint();
        txn.insert(&s, "t", &[rows(&[Some(2)], &["b"])]).unwrap();
        txn.rollback_to(&s, mark);
        txn.insert(&s, "t", &[rows(&[Some(2)], &["b"])]).unwrap();
        assert!(txn.insert(&s, "t", &[rows(&[Some(1)], &["q"])]).is_err());
        s.rollback(txn);
        s.insert("t", &[rows(&[Some(1), Some(2)], &["a", "b"])]).unwrap();
    }

    #[test]
    fn unique_indexes_are_checked_when_created_and_can_be_dropped() {
        let fs = MemFs::new();
        let s = open(&fs);
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]);
        s.create_table("t", &schema).unwrap();
        s.insert("t", &[rows(&[Some(1), Some(1), Some(2)], &["a", "b", "c"])]).unwrap();
        let uk = |name: &str, col: &str| NewIndex {
            name: Some(name.into()),
            kind: IndexKind::Unique,
            columns: vec![col.into()],
        };
        is_dup(s.create_index("t", &uk("k_u", "k"), false), "k_u", "1");
        s.create_index("t", &uk("n_u", "name"), false).unwrap();
        assert!(matches!(
            s.create_index("t", &uk("n_u", "k"), false),
            Err(Error::IndexExists { .. })
        ));
        s.create_index("t", &uk("n_u", "k"), true).unwrap();
        is_dup(s.insert("t", &[rows(&[Some(5)], &["c"])]), "n_u", "c");
        // A key column cannot be dropped while the key exists.
        assert!(s.alter_table("t", &AlterColumn::Drop("name".into())).is_err());
        s.drop_index("n_u").unwrap();
        assert!(matches!(s.drop_index("n_u"), Err(Error::IndexNotFound { .. })));
        s.insert("t", &[rows(&[Some(5)], &["c"])]).unwrap();
        // A plain index enforces nothing.
        let idx = NewIndex { name: None, kind: IndexKind::Index, columns: vec!["k".into()] };
        s.create_index("t", &idx, false).unwrap();
        s.insert("t", &[rows(&[Some(5)], &["c"])]).unwrap();
        assert_eq!(s.snapshot().table("t").unwrap().indexes()[0].name, "t_k_idx");
    }

    #[test]
    fn large_tables_are_checked_across_segments_and_bulk_inserts() {
        let fs = MemFs::new();
        let s = open(&fs);
        keyed(&s);
        let n = 40_000i64;
        let keys: Vec<Option<i64>> = (0..n).map(Some).collect();
        let names: Vec<String> = (0..n).map(|i| format!("n{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        s.insert("t", &[rows(&keys, &names)]).unwrap(); // a bulk insert: a segment
        let mut more: Vec<Option<i64>> = (n..2 * n).map(Some).collect();
        more[30_000] = Some(17);
        let more_names: Vec<String> = (n..2 * n).map(|i| format!("n{i}")).collect();
        let more_names: Vec<&str> = more_names.iter().map(String::as_str).collect();
        is_dup(s.insert("t", &[rows(&more, &more_names)]), "t_pkey", "17");
        assert_eq!(count(&s), n as u64);
    }

    fn names(store: &Store) -> Vec<(i64, String)> {
        let t = store.snapshot().table("t").unwrap().clone();
        let mut out = Vec::new();
        for b in t.scan(&[1, 2]).unwrap() {
            let b = b.unwrap();
            let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
            let n = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
            for r in 0..b.num_rows() {
                out.push((
                    k.value(r),
                    if n.is_null(r) { "NULL".into() } else { n.value(r).into() },
                ));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn conflicts_are_ignored_or_replaced() {
        let fs = MemFs::new();
        let s = open(&fs);
        keyed(&s);
        s.insert("t", &[rows(&[Some(1), Some(2)], &["a", "b"])]).unwrap();
        let ignore = OnConflict::Ignore { columns: None };
        let on = |mode: &OnConflict, b: RecordBatch| {
            s.autocommit(Durability::ProcessSafe, |t, st| t.insert_on_conflict(st, "t", &[b], mode))
        };
        // Existing keys and repeats inside the insert are skipped, on either key.
        let n = on(&ignore, rows(&[Some(1), Some(3), Some(3), Some(4)], &["x", "c", "y", "b"]));
        assert_eq!(n.unwrap(), 1);
        assert_eq!(names(&s), [(1, "a".into()), (2, "b".into()), (3, "c".into())]);
        // A target skips duplicates of that key only; another key's duplicate is an error.
        let pk = OnConflict::Ignore { columns: Some(vec!["k".into()]) };
        assert_eq!(on(&pk, rows(&[Some(1), Some(5)], &["q", "e"])).unwrap(), 1);
        is_dup(on(&pk, rows(&[Some(6)], &["a"])), "t_name_key", "a");
        let none = OnConflict::Ignore { columns: Some(vec!["name".into(), "k".into()]) };
        assert!(on(&none, rows(&[Some(9)], &["z"])).is_err(), "no key over (name, k)");
        // Replace deletes every row holding one of the new row's keys; later rows win.
        let n = on(&OnConflict::Replace, rows(&[Some(1), Some(7), Some(7)], &["b", "g", "h"]));
        assert_eq!(n.unwrap(), 2);
        assert_eq!(names(&s), [(1, "b".into()), (3, "c".into()), (5, "e".into()), (7, "h".into())]);
        // Without keys, these are plain inserts.
        let schema = Schema::new(vec![Field::new("k", DataType::Int64, true)]);
        s.create_table("plain", &schema).unwrap();
        let b = rows(&[Some(1), Some(1)], &["a", "a"]).project(&[0]).unwrap();
        let n = s.autocommit(Durability::ProcessSafe, |t, st| {
            t.insert_on_conflict(st, "plain", &[b], &OnConflict::Replace)
        });
        assert_eq!(n.unwrap(), 2);
    }

    #[test]
    fn rows_are_found_by_key_once_the_sets_are_built() {
        let fs = MemFs::new();
        let s = open(&fs);
        keyed(&s);
        let r = s.insert("t", &[rows(&[Some(1), Some(2)], &["a", "b"])]).unwrap();
        let t = s.snapshot().table("t").unwrap().clone();
        let k = |v: i64| vec![Arc::new(Int64Array::from(vec![v])) as ArrayRef];
        assert_eq!(t.find_by_key(0, &k(2)).unwrap(), Some(Some(r.first + 1)));
        assert_eq!(t.find_by_key(0, &k(9)).unwrap(), Some(None));
        let name = vec![Arc::new(StringArray::from(vec!["a"])) as ArrayRef];
        assert_eq!(t.find_by_key(1, &name).unwrap(), Some(Some(r.first)));
        // A wrong type or a table not written since opening: no answer (callers scan).
        assert_eq!(t.find_by_key(1, &k(1)).unwrap(), None);
        drop(s);
        let s = open(&fs);
        assert_eq!(s.snapshot().table("t").unwrap().find_by_key(0, &k(2)).unwrap(), None);
    }

    /// Rows of a table with a plain index over (k, name), as (_id, k, name).
    fn live(store: &Store) -> Vec<(u64, Option<i64>, Option<String>)> {
        let t = store.snapshot().table("ix").unwrap().clone();
        let mut out = Vec::new();
        for b in t.scan(&[0, 1, 2]).unwrap() {
            let b = b.unwrap();
            let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().unwrap().clone();
            let k = b.column(1).as_any().downcast_ref::<Int64Array>().unwrap().clone();
            let n = b.column(2).as_any().downcast_ref::<StringArray>().unwrap().clone();
            for r in 0..b.num_rows() {
                out.push((
                    ids.value(r),
                    k.is_valid(r).then(|| k.value(r)),
                    n.is_valid(r).then(|| n.value(r).to_string()),
                ));
            }
        }
        out
    }

    #[test]
    fn index_lookups_find_every_matching_row() {
        let fs = MemFs::new();
        let s = open(&fs);
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]);
        let ix = NewIndex {
            name: Some("ix_k_name".into()),
            kind: IndexKind::Index,
            columns: vec!["k".into(), "name".into()],
        };
        let mut s = s;
        s.create_table_with_keys("ix", &schema, false, &[ix]).unwrap();
        let mut seed = 7u64;
        let mut next = move |n: u64| {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 33) % n
        };
        let names = ["a", "b", "c", "d"];
        let int = |v: i64| Arc::new(Int64Array::from(vec![v])) as ArrayRef;
        let text = |v: &str| Arc::new(StringArray::from(vec![v])) as ArrayRef;
        for round in 0..6 {
            let n = 40;
            let k: Vec<Option<i64>> =
                (0..n).map(|_| (next(8) != 0).then(|| next(12) as i64 - 2)).collect();
            let nm: Vec<&str> = (0..n).map(|_| names[next(4) as usize]).collect();
            s.insert("ix", &[rows(&k, &nm).with_schema(Arc::new(schema.clone())).unwrap()])
                .unwrap();
            let ids: Vec<u64> = live(&s).iter().map(|r| r.0).filter(|_| next(5) == 0).collect();
            s.delete("ix", &ids).unwrap();
            if round % 2 == 1 {
                // Reopened: a lookup builds the sets from the rows, then deletes follow
                // (sets built by reads may keep deleted rows; never miss live ones).
                drop(s);
                s = open(&fs);
                let t = s.snapshot().table("ix").unwrap().clone();
                assert!(t.keys.is_none());
                assert!(t.index_candidates(0, &[int(1)], None, usize::MAX).unwrap().is_some());
                let gone: Vec<u64> =
                    live(&s).iter().map(|r| r.0).filter(|_| next(6) == 0).collect();
                s.delete("ix", &gone).unwrap();
            }
            let t = s.snapshot().table("ix").unwrap().clone();
            let rows_now = live(&s);
            let b = |v: i64, inc: bool| {
                if inc { Bound::Included(int(v)) } else { Bound::Excluded(int(v)) }
            };
            for q in 0..200 {
                let lo = next(14) as i64 - 3;
                let hi = lo + next(6) as i64;
                let (li, hi_inc) = (next(2) == 0, next(2) == 0);
                let (range, want): (KeyRange, Vec<u64>) = match q % 4 {
                    0 => (
                        (b(lo, li), Bound::Unbounded),
                        rows_now
                            .iter()
                            .filter(|r| r.1.is_some_and(|k| if li { k >= lo } else { k > lo }))
                            .map(|r| r.0)
                            .collect(),
                    ),
                    1 => (
                        (Bound::Unbounded, b(hi, hi_inc)),
                        rows_now
                            .iter()
                            .filter(|r| r.1.is_some_and(|k| if hi_inc { k <= hi } else { k < hi }))
                            .map(|r| r.0)
                            .collect(),
                    ),
                    _ => (
                        (b(lo, li), b(hi, hi_inc)),
                        rows_now
                            .iter()
                            .filter(|r| {
                                r.1.is_some_and(|k| {
                                    (if li { k >= lo } else { k > lo })
                                        && (if hi_inc { k <= hi } else { k < hi })
                                })
                            })
                            .map(|r| r.0)
                            .collect(),
                    ),
                };
                let got = t.index_candidates(0, &[], Some(&range), usize::MAX).unwrap().unwrap();
                assert!(
                    want.iter().all(|id| got.binary_search(id).is_ok()),
                    "{q}: {want:?} ⊄ {got:?}"
                );
                // Equality on k, then a range of names.
                let kv = next(12) as i64 - 2;
                let want: Vec<u64> = rows_now
                    .iter()
                    .filter(|r| {
                        r.1 == Some(kv) && r.2.as_deref().is_some_and(|n| n > "a" && n <= "c")
                    })
                    .map(|r| r.0)
                    .collect();
                let range = (Bound::Excluded(text("a")), Bound::Included(text("c")));
                let got =
                    t.index_candidates(0, &[int(kv)], Some(&range), usize::MAX).unwrap().unwrap();
                assert!(want.iter().all(|id| got.binary_search(id).is_ok()));
                // Built on a write: exact.
                if t.keys.is_some() {
                    let all: Vec<u64> = rows_now
                        .iter()
                        .filter(|r| {
                            r.1 == Some(kv) && r.2.as_deref().is_some_and(|n| n > "a" && n <= "c")
                        })
                        .map(|r| r.0)
                        .collect();
                    assert_eq!(got, all);
                }
                let eq = rows_now.iter().filter(|r| r.1 == Some(kv)).count();
                let got = t.index_candidates(0, &[int(kv)], None, usize::MAX).unwrap().unwrap();
                assert!(got.len() >= eq);
                if eq > 0 {
                    assert_eq!(t.index_candidates(0, &[int(kv)], None, eq - 1).unwrap(), None);
                }
            }
            // A wrong type or too many columns: no answer.
            assert_eq!(t.index_candidates(0, &[text("1")], None, 10).unwrap(), None);
            assert_eq!(
                t.index_candidates(0, &[int(1), text("a"), int(2)], None, 10).unwrap(),
                None
            );
        }
    }
}
