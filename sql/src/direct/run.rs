//! Running a classified statement on storage: reading rows by id or by filter (in parallel
//! over scan units), and writing through the session's write statement.
//!
//! Part of the direct path (see the module doc of `direct`).

use super::*;

/// Runs `f` over the table's scan units: on a large table, split into contiguous runs, one
/// per core, on scoped threads; results in unit order (at least one).
pub(super) fn in_parallel<T: Send>(
    t: &Arc<TableSnapshot>,
    f: impl Fn(Vec<ScanUnit>) -> crate::Result<T> + Sync,
) -> crate::Result<Vec<T>> {
    /// Below this many rows a single thread is as quick as starting more.
    const PARALLEL_ROWS: u64 = 65_536;
    let units = t.scan_units();
    let cores = crate::cores();
    let parts = if t.count() >= PARALLEL_ROWS { cores.min(units.len()).max(1) } else { 1 };
    if parts <= 1 {
        return Ok(vec![f(units)?]);
    }
    let per = units.len().div_ceil(parts).max(1);
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> =
            units.chunks(per).map(|u| u.to_vec()).map(|u| s.spawn(move || f(u))).collect();
        handles
            .into_iter()
            .map(|h| h.join().map_err(|_| crate::Error::sql("a scan worker panicked"))?)
            .collect()
    })
}

/// The rows of `t` where `filter` holds, projected: by point lookups when the filter names
/// its `_id`s, else by a filtered scan; then `offset` / `limit`.
pub(super) fn rows_where(
    t: &Arc<TableSnapshot>,
    projection: &[usize],
    filter: Option<&Predicate>,
    offset: usize,
    limit: Option<usize>,
) -> crate::Result<Vec<RecordBatch>> {
    let (Some(p), Some(ids)) = (filter, filter.and_then(id_keys)) else {
        if offset == 0 && limit.is_none() {
            // The whole answer: every core scans a part of the table.
            let parts = in_parallel(t, |units| {
                t.scan_units_filtered(projection, filter.cloned(), units)?
                    .collect::<basalt_storage::Result<Vec<_>>>()
                    .map_err(crate::Error::from)
            })?;
            return Ok(parts.into_iter().flatten().collect());
        }
        return Ok(t.scan_range(projection, filter, offset, limit)?);
    };
    Ok(lookup_rows(t, projection, p, &ids, offset, limit)?)
}

/// The rows with `ids` where `p` (which limits them to those ids) holds, projected, then
/// `offset` / `limit`.
pub(super) fn lookup_rows(
    t: &Arc<TableSnapshot>,
    projection: &[usize],
    p: &Predicate,
    ids: &[u64],
    offset: usize,
    limit: Option<usize>,
) -> basalt_storage::Result<Vec<RecordBatch>> {
    let only_ids = !matches!(p, Predicate::And(_));
    let b = if only_ids {
        t.get_many(ids, projection)?
    } else {
        let mut need = projection.to_vec();
        for i in t.resolve(&p.columns())? {
            if !need.contains(&i) {
                need.push(i);
            }
        }
        let mut b = t.get_many(ids, &need)?;
        let sel = basalt_storage::predicate::evaluate(p, &mut b)?;
        let b = datafusion::arrow::compute::filter_record_batch(&b, &BooleanArray::new(sel, None))
            .map_err(|e| basalt_storage::Error::arrow("direct lookup", e))?;
        let keep: Vec<usize> = (0..projection.len()).collect();
        b.project(&keep).map_err(|e| basalt_storage::Error::arrow("direct lookup", e))?
    };
    let n = b.num_rows();
    let start = offset.min(n);
    let len = limit.unwrap_or(usize::MAX).min(n - start);
    Ok(vec![if (start, len) == (0, n) { b } else { b.slice(start, len) }])
}

impl DirectSelect {
    /// Runs the read against the snapshot it was classified on.
    pub(crate) fn run(&self) -> crate::Result<Vec<RecordBatch>> {
        let batches = rows_where(
            &self.table,
            &self.projection,
            self.filter.as_ref(),
            self.offset,
            self.limit,
        )?;
        under_schema(batches, &self.schema)
    }
}

/// The non-empty `batches` under the output `schema` (one empty batch when none is left).
pub(super) fn under_schema(
    batches: Vec<RecordBatch>,
    schema: &SchemaRef,
) -> crate::Result<Vec<RecordBatch>> {
    let mut out = Vec::with_capacity(batches.len().max(1));
    for b in batches.into_iter().filter(|b| b.num_rows() > 0) {
        if Arc::ptr_eq(&b.schema(), schema) {
            out.push(b);
            continue;
        }
        let n = b.num_rows();
        out.push(
            RecordBatch::try_new_with_options(
                schema.clone(),
                b.columns().to_vec(),
                &RecordBatchOptions::new().with_row_count(Some(n)),
            )
            .map_err(|e| basalt_storage::Error::arrow("direct read", e))?,
        );
    }
    if out.is_empty() {
        out.push(RecordBatch::new_empty(schema.clone()));
    }
    Ok(out)
}

impl Direct {
    /// Whether the statement writes (`INSERT`, `UPDATE`, `DELETE`).
    pub(crate) fn writes(&self) -> bool {
        !matches!(self, Direct::Select(_) | Direct::Aggregate(_))
    }

    /// The table the statement reads or writes.
    pub(crate) fn table(&self) -> &str {
        match self {
            Direct::Select(s) => &s.name,
            Direct::Aggregate(a) => &a.name,
            Direct::Update { table, .. }
            | Direct::Delete { table, .. }
            | Direct::Insert { table, .. } => table,
        }
    }

    /// Applies a write (`Update`, `Delete`, `Insert`) as one step of the session's write
    /// statement; returns the rows changed. A read returns 0 and changes nothing.
    pub(crate) fn write(
        &self,
        txn: &mut basalt_storage::Transaction,
        store: &basalt_storage::Store,
    ) -> basalt_storage::Result<u64> {
        match self {
            Direct::Select(_) | Direct::Aggregate(_) => Ok(0),
            Direct::Insert { table, rows } => {
                Ok(txn.insert(store, table, std::slice::from_ref(rows))?.count)
            }
            Direct::Delete { table, filter } => {
                let ids = writer_ids(txn, store, table, filter.as_ref())?;
                txn.delete(store, table, &ids)
            }
            Direct::Update { table, filter, values } => {
                let ids = writer_ids(txn, store, table, filter.as_ref())?;
                txn.update_all(store, table, &ids, values)
            }
        }
    }
}

/// The `_id`s a write applies to, read as the writer (the newest state).
pub(super) fn writer_ids(
    txn: &mut basalt_storage::Transaction,
    store: &basalt_storage::Store,
    table: &str,
    filter: Option<&Predicate>,
) -> basalt_storage::Result<Vec<u64>> {
    txn.ensure_writer(store)?;
    let t = txn.table(table)?;
    match filter {
        None => t.matching_ids(&Predicate::True),
        // Only ids: the write itself skips the ones that do not exist.
        Some(p)
            if !matches!(p, Predicate::And(_))
                && let Some(keys) = id_keys(p) =>
        {
            Ok(keys)
        }
        Some(p) if let Some(keys) = id_keys(p) => {
            let ids = lookup_rows(&t, &[0], p, &keys, 0, None)?;
            let mut out = Vec::new();
            for b in ids {
                if let Some(a) = b.column(0).as_any().downcast_ref::<UInt64Array>() {
                    out.extend_from_slice(a.values());
                }
            }
            Ok(out)
        }
        Some(p) => t.matching_ids(p),
    }
}
