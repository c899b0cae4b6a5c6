//! The tables' schemas and the item rows: building batches of new items (shared constant
//! columns, one buffer for the small per-item columns) and reading items back.
//!
//! Part of the memory store (see the module doc of `memory`).

use super::*;

/// The items table's columns (after `_id`).
pub(super) fn items_schema(dim: usize) -> Schema {
    Schema::new(vec![
        Field::new("key", DataType::Utf8, true),
        Field::new("namespace", DataType::Utf8, false),
        Field::new("text", DataType::Utf8, false),
        Field::new("metadata", DataType::Utf8, true),
        Field::new("embedding", crate::vector_type(dim), true),
        Field::new("hash", DataType::UInt64, false),
        Field::new("version", DataType::Int64, false),
        Field::new("created_ms", DataType::Int64, false),
        Field::new("updated_ms", DataType::Int64, false),
        Field::new("expires_ms", DataType::Int64, true),
        Field::new("archived", DataType::Boolean, false),
    ])
}

/// The history table's columns (after `_id`).
pub(super) fn history_schema() -> Schema {
    Schema::new(vec![
        Field::new("item", DataType::UInt64, false),
        Field::new("version", DataType::Int64, false),
        Field::new("op", DataType::Utf8, false),
        Field::new("old_text", DataType::Utf8, true),
        Field::new("new_text", DataType::Utf8, true),
        Field::new("old_metadata", DataType::Utf8, true),
        Field::new("new_metadata", DataType::Utf8, true),
        Field::new("at_ms", DataType::Int64, false),
    ])
}

pub(super) fn arrow_err(e: arrow_schema::ArrowError) -> crate::Error {
    crate::Error::from(basalt_storage::Error::arrow("memory store rows", e))
}

/// New items without a key (version 1), each with its namespace, as one batch of the
/// items table (`schema`: its user columns), built column by column: a single `remember` is
/// one row, and going through [`Row`]s first (a string per column name and a value per
/// cell, then the same arrays) was a measurable part of it.
pub(super) fn new_items_batch(
    schema: &SchemaRef,
    constants: &Constants,
    ps: &[(&str, &Prepared)],
    dim: usize,
) -> Res<RecordBatch> {
    let n = ps.len();
    let (item, size) = match schema.field_with_name("embedding").map(|f| f.data_type()) {
        Ok(DataType::FixedSizeList(item, size)) if *size as usize == dim => (item.clone(), *size),
        _ => return Err(arrow_err(arrow_schema::ArrowError::SchemaError("vector type".into()))),
    };
    let (values, nulls) = match ps {
        // One item's vector is the batch's (a 1.5 KiB copy and allocation fewer).
        [(_, Prepared { vector: Some(v), .. })] => (v.clone(), None),
        _ => {
            let mut values = Vec::with_capacity(n * dim);
            let mut valid = Vec::with_capacity(n);
            for (_, p) in ps {
                match &p.vector {
                    Some(v) => values.extend_from_slice(v),
                    None => values.resize(values.len() + dim, 0.0),
                }
                valid.push(p.vector.is_some());
            }
            (ScalarBuffer::from(values), valid.contains(&false).then(|| NullBuffer::from(valid)))
        }
    };
    let values = Arc::new(Float32Array::new(values, None));
    let embedding = FixedSizeListArray::try_new(item, size, values, nulls).map_err(arrow_err)?;
    let small = SmallColumns::new(ps)?;
    let at: ArrayRef = Arc::new(small.at);
    let columns: Vec<ArrayRef> = vec![
        constants.get(&constants.null_text, n)?,
        Arc::new(small.namespace),
        Arc::new(small.text),
        Arc::new(small.metadata),
        Arc::new(embedding),
        Arc::new(small.hash),
        constants.get(&constants.one, n)?,
        at.clone(),
        at,
        Arc::new(small.expires),
        constants.get(&constants.no, n)?,
    ];
    RecordBatch::try_new(schema.clone(), columns).map_err(arrow_err)
}

/// The per-item columns of new items other than the vector, whose buffers are slices of
/// one allocation: built array by array they took two or three allocations per buffer
/// (the bytes, the shared handle, the array); this way a single `remember` makes 16
/// allocations fewer (`perf stat -e probe_libc:malloc` over `memory-bench --writes-only
/// 4000` less `--writes-only 2000`: 94 → 78 per item, the bench's item generation
/// included).
pub(super) struct SmallColumns {
    pub(super) namespace: StringArray,
    pub(super) text: StringArray,
    pub(super) metadata: StringArray,
    pub(super) hash: UInt64Array,
    pub(super) at: Int64Array,
    pub(super) expires: Int64Array,
}

impl SmallColumns {
    /// String column `k` of an item: 0 namespace, 1 text, 2 metadata.
    pub(super) fn string<'a>(item: &(&'a str, &'a Prepared), k: usize) -> Option<&'a str> {
        match k {
            0 => Some(item.0),
            1 => Some(item.1.text.as_str()),
            _ => item.1.meta.as_deref(),
        }
    }

    /// Refuses a batch whose namespaces, texts or metadata (`bytes`, in that order) add up
    /// to more than Arrow's 32-bit offsets address (2 GiB): refused, not wrapped.
    pub(super) fn fit_offsets(n: usize, bytes: [usize; 3]) -> Res<()> {
        match (0..3).find(|k| bytes[*k] > i32::MAX as usize) {
            None => Ok(()),
            Some(k) => {
                let what = ["namespaces", "texts", "metadata"][k];
                Err(arrow_err(arrow_schema::ArrowError::InvalidArgumentError(format!(
                    "{n} items whose {what} add up to more than 2 GiB: write them in smaller \
                     batches"
                ))))
            }
        }
    }

    pub(super) fn new(ps: &[(&str, &Prepared)]) -> Res<SmallColumns> {
        use arrow_buffer::{BooleanBuffer, Buffer, MutableBuffer, OffsetBuffer};
        let n = ps.len();
        let bytes = |k: usize| -> usize {
            ps.iter().filter_map(|p| Self::string(p, k)).map(str::len).sum()
        };
        Self::fit_offsets(n, [bytes(0), bytes(1), bytes(2)])?;
        let pad = |len: usize| len.next_multiple_of(8);
        let (offsets, words, bits) = (pad(4 * (n + 1)), 8 * n, pad(n.div_ceil(8)));
        let total = 3 * offsets + 3 * words + 2 * bits + bytes(0) + bytes(1) + bytes(2);
        // Layout: the three string columns' offsets, hash / at / expires, two validity
        // bitmaps (metadata, expires), then the three string columns' bytes. Every section
        // but the last three starts at a multiple of 8 bytes, as the 4- and 8-byte values
        // need (the buffer itself is 64-byte aligned).
        let mut buf = MutableBuffer::with_capacity(total);
        for k in 0..3 {
            let mut end = 0i32;
            buf.push(end);
            for p in ps {
                end += Self::string(p, k).map_or(0, str::len) as i32;
                buf.push(end);
            }
            buf.extend_zeros(offsets - 4 * (n + 1));
        }
        buf.extend(ps.iter().map(|p| p.1.hash));
        buf.extend(ps.iter().map(|p| p.1.at));
        buf.extend(ps.iter().map(|p| p.1.expires.unwrap_or(0)));
        let valid =
            |p: &Prepared, k: usize| if k == 0 { p.meta.is_some() } else { p.expires.is_some() };
        for k in 0..2 {
            for chunk in ps.chunks(8) {
                let byte = chunk
                    .iter()
                    .enumerate()
                    .fold(0u8, |b, (i, p)| b | (u8::from(valid(p.1, k)) << i));
                buf.push(byte);
            }
            buf.extend_zeros(bits - n.div_ceil(8));
        }
        let values_at = buf.len();
        for k in 0..3 {
            for p in ps {
                buf.extend_from_slice(Self::string(p, k).unwrap_or("").as_bytes());
            }
        }
        let buf: Buffer = buf.into();
        let bits_at = 3 * offsets + 3 * words;
        let nulls = |k: usize| {
            ps.iter().any(|p| !valid(p.1, k)).then(|| {
                NullBuffer::new(BooleanBuffer::new(buf.clone(), 8 * (bits_at + k * bits), n))
            })
        };
        let mut values_from = values_at;
        let mut string = |k: usize, nulls: Option<NullBuffer>| {
            let offs = OffsetBuffer::new(ScalarBuffer::new(buf.clone(), k * offsets / 4, n + 1));
            let len = bytes(k);
            let values = buf.slice_with_length(values_from, len);
            values_from += len;
            StringArray::try_new(offs, values, nulls).map_err(arrow_err)
        };
        let at = |k: usize| (3 * offsets + k * words) / 8;
        Ok(SmallColumns {
            namespace: string(0, None)?,
            text: string(1, None)?,
            metadata: string(2, nulls(0))?,
            hash: UInt64Array::new(ScalarBuffer::new(buf.clone(), at(0), n), None),
            at: Int64Array::new(ScalarBuffer::new(buf.clone(), at(1), n), None),
            expires: Int64Array::new(ScalarBuffer::new(buf.clone(), at(2), n), nulls(1)),
        })
    }
}

/// Columns with one value for every new item, built once for [`Constants::ROWS`] rows and sliced for each write (one-row writes built them anew
/// every time, a few allocations each).
pub(super) struct Constants {
    /// NULL text (`key`).
    pub(super) null_text: Constant,
    /// 1 (`version`).
    pub(super) one: Constant,
    /// false (`archived`).
    pub(super) no: Constant,
}

/// One constant column: [`Constants::ROWS`] rows, and its first row alone (a slice is an
/// allocation; a one-row write takes a reference to the same array every time).
pub(super) struct Constant {
    pub(super) rows: ArrayRef,
    pub(super) one_row: ArrayRef,
}

impl Constant {
    pub(super) fn new(rows: ArrayRef) -> Constant {
        Constant { one_row: rows.slice(0, 1), rows }
    }
}

impl Constants {
    pub(super) const ROWS: usize = 256;

    pub(super) fn new() -> Constants {
        let n = Self::ROWS;
        Constants {
            null_text: Constant::new(Arc::new(StringArray::new_null(n))),
            one: Constant::new(Arc::new(Int64Array::from(vec![1; n]))),
            no: Constant::new(Arc::new(BooleanArray::from(vec![false; n]))),
        }
    }

    /// `column` (one of this struct's) for `n` rows.
    pub(super) fn get(&self, column: &Constant, n: usize) -> Res<ArrayRef> {
        if n == 1 {
            return Ok(column.one_row.clone());
        }
        if n <= Self::ROWS {
            return Ok(column.rows.slice(0, n));
        }
        // Longer writes repeat the first row.
        let first = arrow_array::UInt32Array::from(vec![0u32; n]);
        arrow_select::take::take(column.rows.as_ref(), &first, None).map_err(arrow_err)
    }
}

/// A checked new item.
pub(super) struct Prepared {
    /// When it was checked: its creation (or update) time, ms since the epoch.
    pub(super) at: i64,
    pub(super) text: String,
    pub(super) hash: u64,
    pub(super) meta: Option<String>,
    /// Shared with the items batch of a one-item write (no copy).
    pub(super) vector: Option<ScalarBuffer<f32>>,
    pub(super) expires: Option<i64>,
}

/// Not archived and not expired at `now`.
pub(super) fn live_conditions(now: i64) -> Vec<Predicate> {
    vec![
        Predicate::eq("archived", false),
        Predicate::Or(vec![
            Predicate::IsNull { column: "expires_ms".into(), negated: false },
            Predicate::cmp("expires_ms", CmpOp::Gt, now),
        ]),
    ]
}

/// What every read sees: not archived, not expired at `now`, in the namespace subtree
/// (`""`: all).
pub(super) fn visible(namespace: &str, now: i64) -> Predicate {
    let mut p = live_conditions(now);
    if !namespace.is_empty() {
        p.push(namespace_predicate(namespace));
    }
    Predicate::And(p)
}

/// `namespace = ns OR namespace LIKE 'ns/%'`.
pub(super) fn namespace_predicate(ns: &str) -> Predicate {
    Predicate::Or(vec![
        Predicate::eq("namespace", ns),
        Predicate::LikePrefix {
            column: "namespace".into(),
            prefix: format!("{ns}/"),
            negated: false,
        },
    ])
}

pub(super) fn find_key(t: &Table, namespace: &str, key: &str) -> Res<Option<MemoryItem>> {
    let p = Predicate::And(vec![Predicate::eq("namespace", namespace), Predicate::eq("key", key)]);
    for b in t.scan_where(&COLUMNS, &p)? {
        let b = b?;
        if b.num_rows() > 0 {
            return Ok(Some(item_of(&Row::from_batch(&b, 0))));
        }
    }
    Ok(None)
}

pub(super) fn expired(i: &MemoryItem, now: i64) -> bool {
    i.expires_ms.is_some_and(|e| e <= now)
}

pub(super) fn meta_text(m: &Json) -> Option<String> {
    (!m.is_null()).then(|| m.to_string())
}

pub(super) fn text_of(v: Option<&Value>) -> Option<String> {
    match v {
        Some(Value::Str(s)) => Some(s.clone()),
        _ => None,
    }
}

pub(super) fn int_of(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Int(i)) => *i,
        Some(Value::UInt(u)) => *u as i64,
        _ => 0,
    }
}

pub(super) fn json_of(v: Option<&Value>) -> Json {
    text_of(v).and_then(|s| serde_json::from_str(&s).ok()).unwrap_or(Json::Null)
}

pub(super) fn item_of(r: &Row) -> MemoryItem {
    MemoryItem {
        id: r.id().unwrap_or(0),
        key: text_of(r.get("key")),
        namespace: text_of(r.get("namespace")).unwrap_or_default(),
        text: text_of(r.get("text")).unwrap_or_default(),
        metadata: json_of(r.get("metadata")),
        vector: match r.get("embedding") {
            Some(Value::Vector(v)) => Some(v.clone()),
            _ => None,
        },
        content_hash: match r.get("hash") {
            Some(Value::UInt(u)) => *u,
            _ => 0,
        },
        version: int_of(r.get("version")).max(0) as u64,
        created_ms: int_of(r.get("created_ms")),
        updated_ms: int_of(r.get("updated_ms")),
        expires_ms: match r.get("expires_ms") {
            Some(Value::Int(i)) => Some(*i),
            _ => None,
        },
        archived: matches!(r.get("archived"), Some(Value::Bool(true))),
    }
}
