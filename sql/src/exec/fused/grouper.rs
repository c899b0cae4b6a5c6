//! Group ids: batch-local keys from several columns' codes, mapped to group ids through
//! dense tables, counted per key.
//!
//! Part of the fused group-by (see the module doc of `fused`).

use super::*;

/// Assigns group ids: per column a map from value to a column-local id (made once per
/// dictionary entry), then, level by level, (group id of the columns before, column id) to
/// a group id through a dense table — ids are handed out only when a row has them.
pub(super) struct Grouper {
    /// Per group column: value → column id.
    pub(super) values: Vec<ValueIds>,
    /// Per level `k`: `tables[k][prefix][column id] - 1` is the id at level `k` (0 = not
    /// seen yet); level 0 has the one prefix 0.
    pub(super) tables: Vec<Vec<Vec<usize>>>,
    /// Per level, the column ids of the key of each id handed out.
    pub(super) keys: Vec<Vec<Vec<usize>>>,
    /// Per group column of the last coded batch: the column id of each code.
    pub(super) parts: Vec<Vec<usize>>,
    /// Bytes held by the maps, tables and keys above (kept as they grow), for the memory
    /// pool.
    pub(super) bytes: usize,
}

impl Grouper {
    pub(super) fn new(columns: usize) -> Grouper {
        Grouper {
            values: (0..columns).map(|_| ValueIds::default()).collect(),
            tables: (0..columns).map(|_| Vec::new()).collect(),
            keys: (0..columns).map(|_| Vec::new()).collect(),
            parts: Vec::new(),
            bytes: 0,
        }
    }

    /// Number of groups so far.
    pub(super) fn len(&self) -> usize {
        self.keys.last().map_or(0, Vec::len)
    }

    pub(super) fn id_of_value(&mut self, k: usize, v: ScalarValue) -> usize {
        self.values[k].id_of_scalar(v, &mut self.bytes)
    }

    /// The column id of each entry of `values` (a dictionary's values, or plain values).
    pub(super) fn ids_of(&mut self, k: usize, values: &ArrayRef) -> Result<Vec<usize>> {
        self.values[k].ids_of(values, &mut self.bytes)
    }

    /// The column id of each entry of dictionary `dict` of group column `k`, and of NULL
    /// last: the key space of one coded column (NULL rows take the last key).
    pub(super) fn entry_ids(&mut self, k: usize, dict: &ArrayRef) -> Result<Vec<usize>> {
        let mut ids = self.ids_of(k, dict)?;
        ids.push(self.id_of_value(k, ScalarValue::try_from(dict.data_type())?));
        Ok(ids)
    }

    /// Batch-local keys of a batch whose group columns all came as dictionary codes: each
    /// row's codes combine into one dense key `c0 + w0 * (c1 + w1 * (…))` (NULL as the
    /// last code of its column), written to `keys`. Returns the key space, or `None`
    /// (nothing done) when a column is not coded or the space is too large; the caller
    /// then goes column by column. [`Grouper::assign`] turns the keys into group ids.
    pub(super) fn local_codes(
        &mut self,
        cols: &[&ArrayRef],
        keys: &mut Vec<u32>,
    ) -> Result<Option<usize>> {
        const MAX_LOCAL: usize = 1 << 16;
        let n = cols.first().map_or(0, |c| c.len());
        // Per column: the column id of each code (the last one: NULL).
        let mut parts: Vec<Vec<usize>> = Vec::with_capacity(cols.len());
        let mut space = 1usize;
        for (k, col) in cols.iter().enumerate() {
            let DataType::Dictionary(_, _) = col.data_type() else { return Ok(None) };
            let dict = dictionary_values(col)?;
            let width = dict.len() + 1;
            space = match space.checked_mul(width) {
                Some(s) if s <= MAX_LOCAL => s,
                _ => return Ok(None),
            };
            parts.push(self.entry_ids(k, &dict)?);
        }
        keys.clear();
        keys.resize(n, 0);
        for (col, col_ids) in cols.iter().zip(&parts).rev() {
            fold_codes(col, col_ids.len() as u32, keys)?;
        }
        self.parts = parts;
        Ok(Some(space))
    }

    /// Rows per code of one dictionary column without NULLs (`rows[code]`, the key space of
    /// [`Grouper::local_codes`] for that column), counted straight from its 1- or 2-byte
    /// codes without batch-local keys; with `presence`, only whether each code occurs
    /// (`rows[code]` 1 or 0): the scan stops once every dictionary entry has been seen. `None`
    /// (nothing done) for other columns; an out-of-range code is an error.
    pub(super) fn count_codes(
        &mut self,
        col: &ArrayRef,
        presence: bool,
        rows: &mut Vec<u64>,
    ) -> Result<Option<usize>> {
        fn count<T: Copy + Into<usize>>(
            codes: &[T],
            entries: usize,
            presence: bool,
            rows: &mut [u64],
        ) -> Result<()> {
            let out_of_range =
                |c: usize| DataFusionError::Internal(format!("dictionary code {c} out of range"));
            // The slots of the dictionary's entries (the NULL slot after them has no row).
            let rows = rows.get_mut(..entries).ok_or_else(|| out_of_range(entries))?;
            if presence {
                let mut seen = 0usize;
                for run in codes.chunks(256) {
                    for &c in run {
                        let r = rows.get_mut(c.into()).ok_or_else(|| out_of_range(c.into()))?;
                        seen += usize::from(*r == 0);
                        *r = 1;
                    }
                    if seen >= entries {
                        break;
                    }
                }
            } else if size_of::<T>() == 1 {
                // Four interleaved tables, so that repeated codes do not wait on each other.
                let mut t = [[0u32; 256]; 4];
                let mut quads = codes.chunks_exact(4);
                for q in &mut quads {
                    for (table, &c) in t.iter_mut().zip(q) {
                        table[c.into() & 255] += 1;
                    }
                }
                for &c in quads.remainder() {
                    t[0][c.into() & 255] += 1;
                }
                for (c, tables) in (0..256).map(|c| (c, t.iter().map(move |t| t[c]))) {
                    let n: u64 = tables.map(u64::from).sum();
                    match rows.get_mut(c) {
                        Some(r) => *r = n,
                        None if n == 0 => {}
                        None => return Err(out_of_range(c)),
                    }
                }
            } else {
                for &c in codes {
                    *rows.get_mut(c.into()).ok_or_else(|| out_of_range(c.into()))? += 1;
                }
            }
            Ok(())
        }
        if col.null_count() > 0 {
            return Ok(None);
        }
        let DataType::Dictionary(kt, _) = col.data_type() else { return Ok(None) };
        if !matches!(kt.as_ref(), DataType::UInt8 | DataType::UInt16) {
            return Ok(None);
        }
        let dict = dictionary_values(col)?;
        let col_ids = self.entry_ids(0, &dict)?;
        let space = col_ids.len();
        rows.clear();
        rows.resize(space, 0);
        match kt.as_ref() {
            DataType::UInt8 => {
                count(col.as_dictionary::<UInt8Type>().keys().values(), dict.len(), presence, rows)?
            }
            _ => count(
                col.as_dictionary::<UInt16Type>().keys().values(),
                dict.len(),
                presence,
                rows,
            )?,
        }
        self.parts = vec![col_ids];
        Ok(Some(space))
    }

    /// The group id of each batch-local key of the last [`Grouper::local_codes`] that some
    /// row has (`rows[key] > 0`; the others get `usize::MAX`), handing out new ids.
    pub(super) fn assign(&mut self, rows: &[u64]) -> Vec<usize> {
        let parts = std::mem::take(&mut self.parts);
        let mut gid = vec![usize::MAX; rows.len()];
        for (l, slot) in gid.iter_mut().enumerate() {
            if rows[l] == 0 {
                continue;
            }
            // Decompose the key into column ids and walk the levels once.
            let mut rest = l;
            let mut g = 0;
            for (k, col_ids) in parts.iter().enumerate() {
                let w = col_ids.len();
                g = self.level_id(k, if k == 0 { 0 } else { g }, col_ids[rest % w]);
                rest /= w;
            }
            *slot = g;
        }
        self.parts = parts;
        gid
    }

    /// Folds group column `k` of a batch into `ids` (on entry the group ids of columns
    /// `..k`; on return those of `..=k`).
    pub(super) fn add_column(&mut self, k: usize, col: &ArrayRef, ids: &mut [usize]) -> Result<()> {
        let col_ids: Vec<usize> = match col.data_type() {
            DataType::Dictionary(_, _) => {
                let dict = dictionary_values(col)?;
                let entry = self.ids_of(k, &dict)?;
                // NULL rows map to the NULL value's id.
                let null_id = if col.null_count() > 0 {
                    Some(self.id_of_value(k, ScalarValue::try_from(dict.data_type())?))
                } else {
                    None
                };
                let codes = codes_of(col)?;
                let mut out = Vec::with_capacity(codes.len());
                for (r, c) in codes.into_iter().enumerate() {
                    out.push(match null_id {
                        Some(nid) if col.is_null(r) => nid,
                        _ => *entry.get(c as usize).ok_or_else(|| {
                            DataFusionError::Internal(format!("dictionary code {c} out of range"))
                        })?,
                    });
                }
                out
            }
            // Memtable rows: a value at a time.
            _ => self.ids_of(k, col)?,
        };
        for (id, c) in ids.iter_mut().zip(col_ids) {
            let prefix = if k == 0 { 0 } else { *id };
            *id = self.level_id(k, prefix, c);
        }
        Ok(())
    }

    /// The id at level `k` of (prefix id, column id), handing out a new one if unseen.
    pub(super) fn level_id(&mut self, k: usize, prefix: usize, col_id: usize) -> usize {
        let word = std::mem::size_of::<usize>();
        let table = &mut self.tables[k];
        if table.len() <= prefix {
            self.bytes += (prefix + 1 - table.len()) * std::mem::size_of::<Vec<usize>>();
            table.resize_with(prefix + 1, Vec::new);
        }
        let row = &mut table[prefix];
        if row.len() <= col_id {
            self.bytes += (col_id + 1 - row.len()) * word;
            row.resize(col_id + 1, 0);
        }
        if row[col_id] != 0 {
            return row[col_id] - 1;
        }
        let id = self.keys[k].len();
        row[col_id] = id + 1;
        let mut key = if k == 0 { Vec::new() } else { self.keys[k - 1][prefix].clone() };
        key.push(col_id);
        self.bytes += std::mem::size_of::<Vec<usize>>() + key.len() * word;
        self.keys[k].push(key);
        id
    }

    /// The group columns, group by group, typed as `schema`'s first fields.
    pub(super) fn key_arrays(&self, schema: &SchemaRef) -> Result<Vec<ArrayRef>> {
        let groups = self.keys.last().map(Vec::as_slice).unwrap_or_default();
        (0..self.values.len())
            .map(|k| {
                let t = schema.field(k).data_type();
                if groups.is_empty() {
                    return Ok(new_null_array(t, 0));
                }
                let a = self.values[k].array(groups.iter().map(|key| key[k]))?;
                if a.data_type() == t { Ok(a) } else { Ok(cast(&a, t)?) }
            })
            .collect()
    }
}

/// The column ids of one group column's values. Text and binary values are looked up by
/// their bytes (no value built per lookup, a fast hash): a column of many distinct strings
/// maps thousands of dictionary entries per row group. Other values (and NULL) go through
/// `ScalarValue`s.
#[derive(Default)]
pub(super) struct ValueIds {
    /// Text and binary values.
    bytes: datafusion::common::HashMap<Box<[u8]>, usize>,
    /// Whether the byte values are text (else binary).
    text: bool,
    /// Every other value, NULL included.
    scalars: HashMap<ScalarValue, usize>,
    /// Per id: the value when it is in `scalars`, `None` when in `bytes`.
    order: Vec<Option<ScalarValue>>,
}

impl ValueIds {
    fn id_of_scalar(&mut self, v: ScalarValue, held: &mut usize) -> usize {
        if let Some(&id) = self.scalars.get(&v) {
            return id;
        }
        // The value twice (map key and list) and the map's slot.
        *held += 2 * v.size() + std::mem::size_of::<usize>() * 2;
        self.order.push(Some(v.clone()));
        self.scalars.insert(v, self.order.len() - 1);
        self.order.len() - 1
    }

    fn id_of_bytes(&mut self, v: &[u8], held: &mut usize) -> usize {
        if let Some(&id) = self.bytes.get(v) {
            return id;
        }
        *held += v.len() + std::mem::size_of::<(Box<[u8]>, usize)>() + std::mem::size_of::<usize>();
        self.order.push(None);
        let id = self.order.len() - 1;
        self.bytes.insert(v.into(), id);
        id
    }

    /// The id of each entry of `values`.
    fn ids_of(&mut self, values: &ArrayRef, held: &mut usize) -> Result<Vec<usize>> {
        fn each<'a>(
            ids: &mut ValueIds,
            values: &ArrayRef,
            held: &mut usize,
            at: impl Fn(usize) -> &'a [u8],
        ) -> Result<Vec<usize>> {
            let null = || ScalarValue::try_from(values.data_type());
            (0..values.len())
                .map(|i| {
                    Ok(if values.is_null(i) {
                        ids.id_of_scalar(null()?, held)
                    } else {
                        ids.id_of_bytes(at(i), held)
                    })
                })
                .collect()
        }
        let text =
            matches!(values.data_type(), DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
        if text
            || matches!(
                values.data_type(),
                DataType::Binary | DataType::LargeBinary | DataType::BinaryView
            )
        {
            self.text = text;
        }
        match values.data_type() {
            DataType::Utf8 => {
                let a = values.as_string::<i32>();
                each(self, values, held, |i| a.value(i).as_bytes())
            }
            DataType::LargeUtf8 => {
                let a = values.as_string::<i64>();
                each(self, values, held, |i| a.value(i).as_bytes())
            }
            DataType::Utf8View => {
                let a = values.as_string_view();
                each(self, values, held, |i| a.value(i).as_bytes())
            }
            DataType::Binary => {
                let a = values.as_binary::<i32>();
                each(self, values, held, |i| a.value(i))
            }
            DataType::LargeBinary => {
                let a = values.as_binary::<i64>();
                each(self, values, held, |i| a.value(i))
            }
            DataType::BinaryView => {
                let a = values.as_binary_view();
                each(self, values, held, |i| a.value(i))
            }
            _ => (0..values.len())
                .map(|i| Ok(self.id_of_scalar(ScalarValue::try_from_array(values, i)?, held)))
                .collect(),
        }
    }

    /// The values of `ids`, in order, as one array (text as Utf8, binary as Binary, other
    /// values in their own type).
    fn array(&self, ids: impl Iterator<Item = usize>) -> Result<ArrayRef> {
        if self.bytes.is_empty() {
            let vals = ids.map(|id| self.order[id].clone().unwrap_or(ScalarValue::Null));
            return ScalarValue::iter_to_array(vals);
        }
        let mut by_id: Vec<&[u8]> = vec![&[]; self.order.len()];
        for (v, &id) in &self.bytes {
            by_id[id] = v;
        }
        let value = |id: usize| match &self.order[id] {
            None => Ok(Some(by_id[id])),
            Some(v) if v.is_null() => Ok(None),
            Some(v) => Err(DataFusionError::Internal(format!(
                "group value {v} next to text or binary values"
            ))),
        };
        if self.text {
            let mut b = datafusion::arrow::array::StringBuilder::new();
            for id in ids {
                match value(id)? {
                    Some(v) => b.append_value(std::str::from_utf8(v).map_err(|e| {
                        DataFusionError::Internal(format!("group value not UTF-8: {e}"))
                    })?),
                    None => b.append_null(),
                }
            }
            Ok(Arc::new(b.finish()))
        } else {
            let mut b = datafusion::arrow::array::BinaryBuilder::new();
            for id in ids {
                b.append_option(value(id)?);
            }
            Ok(Arc::new(b.finish()))
        }
    }
}

/// `local = local * w + code` for each row of dictionary array `col` (`w - 1` = NULL).
pub(super) fn fold_codes(col: &ArrayRef, w: u32, local: &mut [u32]) -> Result<()> {
    fn fold<T: Copy + Into<u32>>(keys: &[T], w: u32, local: &mut [u32]) {
        for (l, &c) in local.iter_mut().zip(keys) {
            *l = *l * w + c.into();
        }
    }
    match col.data_type() {
        DataType::Dictionary(k, _) if k.as_ref() == &DataType::UInt8 => {
            fold(col.as_dictionary::<UInt8Type>().keys().values(), w, local)
        }
        DataType::Dictionary(k, _) if k.as_ref() == &DataType::UInt16 => {
            fold(col.as_dictionary::<UInt16Type>().keys().values(), w, local)
        }
        DataType::Dictionary(k, _) if k.as_ref() == &DataType::UInt32 => {
            fold(col.as_dictionary::<UInt32Type>().keys().values(), w, local)
        }
        t => return Err(DataFusionError::Internal(format!("not dictionary codes: {t}"))),
    }
    if col.null_count() > 0 {
        // Undo the code a NULL row holds and put the NULL code in its place.
        let codes = codes_of(col)?;
        for (r, (l, c)) in local.iter_mut().zip(codes).enumerate() {
            if col.is_null(r) {
                *l = *l - c + (w - 1);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use datafusion::arrow::array::{BinaryArray, DictionaryArray, Int64Array, StringArray};
    use datafusion::arrow::datatypes::UInt8Type;

    use super::*;

    /// Text values found through their bytes get one id per value whether they come as a
    /// dictionary's entries or plain (memtable) values, NULL one id of its own; the output
    /// array gives them back in group order.
    #[test]
    fn value_ids_are_shared_by_dictionaries_and_plain_values() {
        let mut g = Grouper::new(1);
        let dict: ArrayRef = Arc::new(StringArray::from(vec!["b", "a", "c"]));
        assert_eq!(g.entry_ids(0, &dict).unwrap(), vec![0, 1, 2, 3]);
        let plain: ArrayRef =
            Arc::new(StringArray::from(vec![Some("c"), None, Some("d"), Some("a")]));
        assert_eq!(g.ids_of(0, &plain).unwrap(), vec![2, 3, 4, 1]);
        let coded: ArrayRef = Arc::new(
            DictionaryArray::<UInt8Type>::try_new(
                datafusion::arrow::array::UInt8Array::from(vec![Some(1), None, Some(0)]),
                Arc::new(StringArray::from(vec!["d", "e"])),
            )
            .unwrap(),
        );
        let mut ids = vec![0; 3];
        g.add_column(0, &coded, &mut ids).unwrap();
        assert_eq!(g.len(), 3);
        let schema = Arc::new(datafusion::arrow::datatypes::Schema::new(vec![
            datafusion::arrow::datatypes::Field::new("k", DataType::Utf8, true),
        ]));
        let keys = g.key_arrays(&schema).unwrap();
        let got: Vec<Option<&str>> = keys[0].as_string::<i32>().iter().collect();
        assert_eq!(got, vec![Some("e"), None, Some("d")]);
        assert!(g.bytes > 0);

        // Binary values and other types keep their own kinds.
        let mut b = ValueIds::default();
        let mut held = 0;
        let bin: ArrayRef = Arc::new(BinaryArray::from(vec![&b"\xff"[..], b"x", b"\xff"]));
        assert_eq!(b.ids_of(&bin, &mut held).unwrap(), vec![0, 1, 0]);
        let out = b.array([1usize, 0].into_iter()).unwrap();
        assert_eq!(out.as_binary::<i32>().value(0), b"x");
        let mut n = ValueIds::default();
        let ints: ArrayRef = Arc::new(Int64Array::from(vec![Some(7), None, Some(7)]));
        assert_eq!(n.ids_of(&ints, &mut held).unwrap(), vec![0, 1, 0]);
        let out = n.array([0usize, 1].into_iter()).unwrap();
        assert_eq!(out.as_primitive::<Int64Type>().value(0), 7);
        assert!(out.is_null(1));
    }
}
