//! Reading a table snapshot: row groups and windows of them, `OFFSET` / `LIMIT` ranges,
//! scan units and zone-map pruning, locating rows by `_id`, point reads in place
//! (`visit_row`, `get_many`, `rows_at`), late materialisation of selective filters.
//!
//! What this module must not do: change a snapshot (reads only).

use super::*;
use crate::encoding::StatValue;

/// Row groups [`TableSnapshot::estimate_matches`] samples, and rows from each.
const SAMPLE_UNITS: usize = 8;
const SAMPLE_ROWS: usize = 2048;
/// Estimates a snapshot keeps (then it starts over).
const ESTIMATES_KEPT: usize = 256;

fn has_row_filter(p: &Predicate) -> bool {
    match p {
        Predicate::Rows(_) => true,
        Predicate::And(v) | Predicate::Or(v) => v.iter().any(has_row_filter),
        Predicate::Not(p) => has_row_filter(p),
        _ => false,
    }
}

/// What a snapshot's metadata tells of one column (see [`TableSnapshot::column_summary`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ColumnSummary {
    /// Smallest non-null value, for columns whose every row group holding a non-null
    /// value has a zone map (every type but vectors and nested types; strings up to 64
    /// bytes), with an empty memtable. It bounds the live rows (deleted rows may have set
    /// it: see `bounds_exact`).
    pub min: Option<StatValue>,
    /// Largest non-null value, as `min`.
    pub max: Option<StatValue>,
    /// Whether `min` and `max` are the live rows' own: no segment has deleted rows.
    pub bounds_exact: bool,
    /// NULLs over the row groups, deleted rows included (memtable rows not counted).
    pub null_count: u64,
    /// Whether `null_count` is exact: no deleted rows and an empty memtable.
    pub nulls_exact: bool,
    /// Most dictionary entries of one row group, when every row group stores the column as
    /// a dictionary: a lower bound of its distinct values (about their number, for the
    /// low-cardinality columns dictionaries are chosen for).
    pub dictionary_entries: Option<u64>,
}

/// What a row group's metadata tells of its rows that satisfy a predicate, when that is
/// all of them (see [`TableSnapshot::unit_metadata`]).
#[derive(Debug, Clone, PartialEq)]
pub struct UnitMetadata {
    /// The row group's rows (every one live and matching).
    pub rows: u64,
    /// Per column asked, in the order asked.
    pub columns: Vec<ChunkMetadata>,
}

/// One column chunk's header facts (see [`UnitMetadata`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkMetadata {
    /// NULL rows.
    pub null_count: u64,
    /// Min and max of the non-null values (`None` when the chunk keeps none: all NULL,
    /// strings longer than 64 bytes, vectors and nested types).
    pub zone_map: Option<encoding::ZoneMap>,
}

impl TableSnapshot {
    /// Resolves column names to positions in the full schema (`_id` is 0).
    pub fn resolve(&self, columns: &[&str]) -> Result<Vec<usize>> {
        columns
            .iter()
            .map(|c| {
                self.schema.index_of(c).ok_or_else(|| Error::ColumnNotFound {
                    table: self.name.to_string(),
                    column: (*c).to_string(),
                })
            })
            .collect()
    }

    /// The output schema of a projection.
    pub fn projected_schema(&self, projection: &[usize]) -> Result<SchemaRef> {
        self.schema.project(projection)
    }

    pub(super) fn check_projection(&self, projection: &[usize]) -> Result<()> {
        let n = self.schema.full_schema().fields().len();
        match projection.iter().find(|&&p| p >= n) {
            Some(p) => Err(Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("projection index {p} out of range (table has {n} columns)"),
            }),
            None => Ok(()),
        }
    }

    /// Reads the projected columns of one row group.
    pub fn read_row_group(
        &self,
        segment: usize,
        rg: usize,
        projection: &[usize],
        mode: DecodeMode,
    ) -> Result<Vec<ArrayRef>> {
        self.read_row_group_window(segment, rg, projection, 0, None, mode)
    }

    /// Reads rows `start .. start + len` (`None`: to the end) of the projected columns of
    /// one row group, decoding no more of each chunk than its encoding needs for them.
    pub fn read_row_group_window(
        &self,
        segment: usize,
        rg: usize,
        projection: &[usize],
        start: usize,
        len: Option<usize>,
        mode: DecodeMode,
    ) -> Result<Vec<ArrayRef>> {
        self.check_projection(projection)?;
        let seg = self.segment_at(segment)?;
        let rows = seg.meta().row_groups.get(rg).map(|g| g.rows as usize).ok_or_else(|| {
            Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("segment {segment} has no row group {rg}"),
            }
        })?;
        let len = len.unwrap_or(rows.saturating_sub(start));
        if start.checked_add(len).is_none_or(|end| end > rows) {
            return Err(Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("rows {start}+{len} outside row group of {rows}"),
            });
        }
        projection
            .iter()
            .map(|&p| {
                let cid = self.schema.column_id_at(p);
                match seg.meta().position_of(cid) {
                    Some(pos) => seg.read_column_window(rg, pos, start, len, mode),
                    None => Ok(new_null_array(self.schema.full_schema().field(p).data_type(), len)),
                }
            })
            .collect()
    }

    /// Rows `start..start + len` of row group `rg` of the `segment`-th segment where integer
    /// column `p` (table position) lies in `lo..=hi`, from its packed values; `None` when
    /// its chunk there cannot answer that way (another encoding, NULLs, a column the
    /// segment predates).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn int_range_window(
        &self,
        segment: usize,
        rg: usize,
        p: usize,
        start: usize,
        len: usize,
        lo: i128,
        hi: i128,
    ) -> Result<Option<arrow_buffer::BooleanBuffer>> {
        let seg = self.segment_at(segment)?;
        match seg.meta().position_of(self.schema.column_id_at(p)) {
            Some(pos) => seg.int_range_window(rg, pos, start, len, lo, hi),
            None => Ok(None),
        }
    }

    /// Rows `offset .. offset + limit` (in scan order) of the rows where `predicate` is
    /// true (every row for `None`), projected. Reads only what that needs: a row group
    /// whose live rows all fall before `offset` is counted from its metadata and delete
    /// vector (or, with a predicate, from the predicate's columns alone); of the row groups
    /// the result comes from, only the window of rows holding the result is decoded; the
    /// scan stops once `limit` rows are found.
    pub fn scan_range(
        self: &Arc<Self>,
        projection: &[usize],
        predicate: Option<&Predicate>,
        mut offset: usize,
        limit: Option<usize>,
    ) -> Result<Vec<RecordBatch>> {
        self.check_projection(projection)?;
        if let Some(p) = predicate {
            self.resolve(&p.columns())?;
        }
        let schema = self.projected_schema(projection)?;
        let mut remaining = limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        for unit in self.scan_units() {
            if remaining == 0 {
                break;
            }
            let ScanUnit::RowGroup { segment, rg } = unit else {
                let scan = self.scan_units_filtered(
                    projection,
                    predicate.cloned(),
                    vec![ScanUnit::Memtable],
                )?;
                for b in scan {
                    let b = b?;
                    let n = b.num_rows();
                    if n <= offset {
                        offset -= n;
                        continue;
                    }
                    let take = (n - offset).min(remaining);
                    out.push(b.slice(offset, take));
                    offset = 0;
                    remaining -= take;
                    if remaining == 0 {
                        break;
                    }
                }
                continue;
            };
            let ls = &self.segments[segment];
            let rows = ls.segment.meta().row_groups[rg].rows as usize;
            if predicate.is_some_and(|p| !self.zone_maps_allow(segment, rg, p)) {
                continue;
            }
            let deleted = ls.keep_mask(rg).map(|m| m.values().clone());
            // With a filter and a limit, the filter is evaluated on growing windows of the
            // row group, so a limit met early reads little of it.
            let mut step = if predicate.is_some() && limit.is_some() { 4096 } else { rows };
            let mut ws = 0;
            while ws < rows && remaining > 0 {
                let we = ws.saturating_add(step).min(rows);
                step = step.saturating_mul(4);
                let len = we - ws;
                let mut keep = deleted.as_ref().map(|d| d.slice(ws, len));
                if let Some(p) = predicate {
                    let mut cols = RowGroupColumns {
                        table: self,
                        segment,
                        rg,
                        start: ws,
                        rows: len,
                        decoded: Vec::new(),
                    };
                    let sel = predicate::evaluate(p, &mut cols)?;
                    keep = Some(keep.map_or(sel.clone(), |k| &k & &sel));
                }
                let live = keep.as_ref().map_or(len, BooleanBuffer::count_set_bits);
                if live <= offset {
                    offset -= live;
                    ws = we;
                    continue;
                }
                let take = (live - offset).min(remaining);
                // The window from the first to the last wanted row; the rows kept inside it
                // are exactly the wanted ones (kept rows are taken in order).
                let (first, end) = match &keep {
                    None => (offset, offset + take),
                    Some(k) => {
                        let mut wanted = k.set_indices().skip(offset);
                        let first = wanted.next().unwrap_or(0);
                        let last =
                            if take > 1 { wanted.nth(take - 2).unwrap_or(first) } else { first };
                        (first, last + 1)
                    }
                };
                let cols = self.read_row_group_window(
                    segment,
                    rg,
                    projection,
                    ws + first,
                    Some(end - first),
                    DecodeMode::Values,
                )?;
                let b = RecordBatch::try_new_with_options(
                    schema.clone(),
                    cols,
                    &arrow_array::RecordBatchOptions::new().with_row_count(Some(end - first)),
                )
                .map_err(|e| Error::arrow("scan", e))?;
                let b = match &keep {
                    Some(k) if end - first > take => {
                        let m = arrow_array::BooleanArray::new(k.slice(first, end - first), None);
                        arrow_select::filter::filter_record_batch(&b, &m)
                            .map_err(|e| Error::arrow("scan", e))?
                    }
                    _ => b,
                };
                out.push(b);
                offset = 0;
                remaining -= take;
                ws = we;
            }
        }
        Ok(out)
    }

    /// Scans the projected columns (full-schema positions) as record batches: one per row
    /// group, then the memtable's batches.
    pub fn scan(self: &Arc<Self>, projection: &[usize]) -> Result<Scan> {
        self.scan_filtered(projection, None)
    }

    /// Scans the rows where `predicate` is true (all rows for `None`). Row groups whose
    /// zone maps rule the predicate out are not read; the predicate is evaluated on
    /// dictionary codes where chunks are dictionary-encoded.
    pub fn scan_filtered(
        self: &Arc<Self>,
        projection: &[usize],
        predicate: Option<Predicate>,
    ) -> Result<Scan> {
        let units = self.scan_units();
        self.scan_units_filtered(projection, predicate, units)
    }

    /// Every unit of a full scan, in scan order: each row group of each segment, then the
    /// memtable (if it has rows).
    pub fn scan_units(&self) -> Vec<ScanUnit> {
        let mut out = Vec::new();
        for (segment, ls) in self.segments.iter().enumerate() {
            for rg in 0..ls.segment.meta().row_groups.len() {
                out.push(ScanUnit::RowGroup { segment, rg });
            }
        }
        if self.memtable.rows() > 0 {
            out.push(ScanUnit::Memtable);
        }
        out
    }

    /// The rows a unit holds before deletes.
    pub fn unit_rows(&self, unit: ScanUnit) -> u64 {
        match unit {
            ScanUnit::RowGroup { segment, rg } => self
                .segments
                .get(segment)
                .and_then(|s| s.segment.meta().row_groups.get(rg))
                .map_or(0, |g| u64::from(g.rows)),
            ScanUnit::Memtable => self.memtable.rows() as u64,
        }
    }

    /// What the zone maps and chunk headers tell of column `col` (full-schema position)
    /// over the snapshot, for a planner's estimates; reads no column data.
    pub fn column_summary(&self, col: usize) -> ColumnSummary {
        let mut out =
            ColumnSummary { nulls_exact: self.memtable.rows() == 0, ..ColumnSummary::default() };
        if col >= self.schema.full_schema().fields().len() {
            return out;
        }
        let cid = self.schema.column_id_at(col);
        let (mut lo, mut hi): (Option<StatValue>, Option<StatValue>) = (None, None);
        let mut bounded = self.memtable.rows() == 0;
        let mut dictionary = Some(0u64);
        for ls in &self.segments {
            out.nulls_exact &= ls.deleted() == 0;
            let meta = ls.segment.meta();
            let pos = meta.position_of(cid);
            for g in &meta.row_groups {
                let Some(c) = pos.and_then(|p| g.chunks.get(p)) else {
                    // Added after this segment was written: all NULL here.
                    out.null_count += u64::from(g.rows);
                    dictionary = None;
                    continue;
                };
                out.null_count += u64::from(c.null_count);
                dictionary = match (&c.encoding, dictionary) {
                    (crate::encoding::Encoding::Dict { dict_len, .. }, Some(d)) => {
                        Some(d.max(u64::from(*dict_len)))
                    }
                    _ => None,
                };
                match &c.zone_map {
                    Some(z) => {
                        let below = |a: &StatValue, b: &StatValue| a.compare(b).map(|o| o.is_lt());
                        match lo.as_ref().map_or(Some(true), |l| below(&z.min, l)) {
                            Some(true) => lo = Some(z.min.clone()),
                            Some(false) => {}
                            None => bounded = false,
                        }
                        match hi.as_ref().map_or(Some(true), |h| below(h, &z.max)) {
                            Some(true) => hi = Some(z.max.clone()),
                            Some(false) => {}
                            None => bounded = false,
                        }
                    }
                    None if c.null_count < g.rows => bounded = false,
                    None => {}
                }
            }
        }
        if bounded {
            (out.min, out.max) = (lo, hi);
            out.bounds_exact = self.segments.iter().all(|ls| ls.deleted() == 0);
        }
        out.dictionary_entries = dictionary.filter(|_| !self.segments.is_empty());
        out
    }

    /// About how many rows of `units` satisfy `predicate`: the share that matches in up
    /// to 8 row groups spread over them, 2,048 rows from each
    /// (a share of half a row when none does), times their rows. Without a row group to
    /// sample, all their rows. Answers are kept with the snapshot, by the predicate's text
    /// and the units' rows (not for predicates holding a [`crate::RowFilter`]).
    pub fn estimate_matches(&self, predicate: &Predicate, units: &[ScanUnit]) -> Result<u64> {
        let total: u64 = units.iter().map(|u| self.unit_rows(*u)).sum();
        // Row filters are the caller's functions: their text does not say what they keep.
        let key = (!has_row_filter(predicate)).then(|| (predicate.to_string(), total));
        if let Some(n) = key.as_ref().and_then(|k| self.estimates.lock().get(k).copied()) {
            return Ok(n);
        }
        let n = self.sample_matches(predicate, units, total)?;
        if let Some(k) = key {
            let mut cache = self.estimates.lock();
            if cache.len() >= ESTIMATES_KEPT {
                cache.clear();
            }
            cache.insert(k, n);
        }
        Ok(n)
    }

    fn sample_matches(&self, predicate: &Predicate, units: &[ScanUnit], total: u64) -> Result<u64> {
        let groups: Vec<(usize, usize)> = units
            .iter()
            .filter_map(|u| match u {
                ScanUnit::RowGroup { segment, rg } => Some((*segment, *rg)),
                ScanUnit::Memtable => None,
            })
            .collect();
        if groups.is_empty() {
            return Ok(total);
        }
        let picks = groups.len().min(SAMPLE_UNITS);
        let (mut seen, mut hits) = (0u64, 0u64);
        for k in 0..picks {
            let (segment, rg) = groups[k * groups.len() / picks];
            let rows =
                (self.unit_rows(ScanUnit::RowGroup { segment, rg }) as usize).min(SAMPLE_ROWS);
            if rows == 0 {
                continue;
            }
            let mut cols =
                RowGroupColumns { table: self, segment, rg, start: 0, rows, decoded: Vec::new() };
            hits += predicate::evaluate(predicate, &mut cols)?.count_set_bits() as u64;
            seen += rows as u64;
        }
        if seen == 0 {
            return Ok(total);
        }
        let share = (hits as f64).max(0.5) / seen as f64;
        Ok(((total as f64) * share).round().min(total as f64) as u64)
    }

    /// Whether the zone maps and null counts of a row group leave `predicate` possibly true
    /// (the memtable always may match). Reads no column data.
    pub fn unit_may_match(&self, unit: ScanUnit, predicate: &Predicate) -> bool {
        match unit {
            ScanUnit::Memtable => true,
            ScanUnit::RowGroup { segment, rg } => self.zone_maps_allow(segment, rg, predicate),
        }
    }

    /// The metadata of columns `cols` (full-schema positions) in `unit`, when it describes
    /// exactly the unit's rows that satisfy `predicate`: used to answer `count`, `min` and
    /// `max` without reading a row. `Some` when:
    /// 1. the unit is a row group (memtable rows have no metadata);
    /// 2. none of its rows is deleted (a deleted row's value may be a zone map's bound);
    /// 3. there is no predicate, or the zone maps prove every row satisfies it.
    ///
    /// Reads no column data.
    pub fn unit_metadata(
        &self,
        unit: ScanUnit,
        predicate: Option<&Predicate>,
        cols: &[usize],
    ) -> Option<UnitMetadata> {
        let ScanUnit::RowGroup { segment, rg } = unit else { return None };
        let ls = self.segments.get(segment)?;
        let meta = ls.segment.meta();
        let g = meta.row_groups.get(rg)?;
        if ls.deletes.as_ref().is_some_and(|d| d.any_in(meta.row_start(rg), g.rows as usize)) {
            return None;
        }
        if predicate.is_some_and(|p| !self.zone_maps_prove(segment, rg, p)) {
            return None;
        }
        let mut columns = Vec::with_capacity(cols.len());
        for &col in cols {
            if col >= self.schema.full_schema().fields().len() {
                return None;
            }
            columns.push(match meta.position_of(self.schema.column_id_at(col)) {
                Some(p) => {
                    let c = g.chunks.get(p)?;
                    ChunkMetadata {
                        null_count: u64::from(c.null_count),
                        zone_map: c.zone_map.clone(),
                    }
                }
                // Added after this segment was written: all NULL here.
                None => ChunkMetadata { null_count: u64::from(g.rows), zone_map: None },
            });
        }
        Some(UnitMetadata { rows: u64::from(g.rows), columns })
    }

    /// Scans the chosen units (from [`TableSnapshot::scan_units`]), in the order given.
    pub fn scan_units_filtered(
        self: &Arc<Self>,
        projection: &[usize],
        predicate: Option<Predicate>,
        units: Vec<ScanUnit>,
    ) -> Result<Scan> {
        self.check_projection(projection)?;
        if let Some(p) = &predicate {
            self.resolve(&p.columns())?;
        }
        Ok(Scan {
            schema: self.projected_schema(projection)?,
            table: self.clone(),
            projection: projection.to_vec(),
            predicate,
            units,
            next: 0,
            mem: 0,
            mode: DecodeMode::Values,
            limit: None,
        })
    }

    /// Whether column `col` (full-schema position) is dictionary-encoded in every row group
    /// of every segment (memtable rows aside): a scan in [`DecodeMode::Codes`] hands it out
    /// as dictionary codes.
    pub fn is_dictionary_encoded(&self, col: usize) -> bool {
        let Some(cid) =
            (col < self.schema.full_schema().fields().len()).then(|| self.schema.column_id_at(col))
        else {
            return false;
        };
        self.segments.iter().all(|ls| {
            let meta = ls.segment.meta();
            match meta.position_of(cid) {
                None => false,
                Some(pos) => meta.row_groups.iter().all(|g| {
                    matches!(
                        g.chunks.get(pos).map(|c| &c.encoding),
                        Some(crate::encoding::Encoding::Dict { .. })
                    )
                }),
            }
        })
    }

    /// The `_id`s of the rows where `predicate` is true, in scan order.
    pub fn matching_ids(self: &Arc<Self>, predicate: &Predicate) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for b in self.scan_filtered(&[0], Some(predicate.clone()))? {
            let b = b?;
            let ids = b.column(0).as_any().downcast_ref::<UInt64Array>().ok_or_else(|| {
                Error::InvalidInput {
                    table: self.name.to_string(),
                    reason: "_id column is not UInt64".into(),
                }
            })?;
            out.extend_from_slice(ids.values());
        }
        Ok(out)
    }

    pub(super) fn zone_maps_allow(&self, segment: usize, rg: usize, predicate: &Predicate) -> bool {
        self.with_chunk_stats(segment, rg, |stats| predicate::may_match(predicate, stats))
            .unwrap_or(false)
    }

    /// Whether the zone maps and null counts of a row group prove every row of it matches.
    pub(super) fn zone_maps_prove(&self, segment: usize, rg: usize, predicate: &Predicate) -> bool {
        self.with_chunk_stats(segment, rg, |stats| predicate::must_match(predicate, stats))
            .unwrap_or(false)
    }

    /// `f` over the chunk statistics of a row group (by column name); `None` if there is no
    /// such row group.
    pub(super) fn with_chunk_stats<'s, R>(
        &'s self,
        segment: usize,
        rg: usize,
        f: impl FnOnce(&dyn Fn(&str) -> Option<ChunkStats<'s>>) -> R,
    ) -> Option<R> {
        let ls = self.segments.get(segment)?;
        let meta = ls.segment.meta();
        let g = meta.row_groups.get(rg)?;
        let stats = |name: &str| {
            let i = self.schema.index_of(name)?;
            let float32 =
                self.schema.full_schema().field(i).data_type() == &arrow_schema::DataType::Float32;
            let c = meta.position_of(self.schema.column_id_at(i)).map(|p| &g.chunks[p]);
            Some(match c {
                Some(c) => ChunkStats {
                    zone_map: c.zone_map.as_ref(),
                    null_count: u64::from(c.null_count),
                    rows: u64::from(g.rows),
                    float32,
                },
                // A column added after this segment was written: all NULL here.
                None => ChunkStats {
                    zone_map: None,
                    null_count: u64::from(g.rows),
                    rows: u64::from(g.rows),
                    float32,
                },
            })
        };
        Some(f(&stats))
    }

    /// Selection for a predicate over rows `start..start + rows` of a row group (`None`
    /// for the rest of it): one bit per row of that window; `None` = no row of it matches
    /// (zone maps rule the whole row group out, or nothing in the window matched). When the
    /// zone maps prove every row matches, nothing is read.
    pub(super) fn select_in_row_group(
        &self,
        segment: usize,
        rg: usize,
        predicate: &Predicate,
        start: usize,
        rows: Option<usize>,
    ) -> Result<Option<BooleanBuffer>> {
        if !self.zone_maps_allow(segment, rg, predicate) {
            return Ok(None);
        }
        let all = self.segments[segment].segment.meta().row_groups[rg].rows as usize;
        let rows = rows.unwrap_or(all.saturating_sub(start));
        if self.zone_maps_prove(segment, rg, predicate) {
            // Every row matches: nothing to read or evaluate.
            return Ok((rows > 0).then(|| BooleanBuffer::new_set(rows)));
        }
        let mut cols =
            RowGroupColumns { table: self, segment, rg, start, rows, decoded: Vec::new() };
        let sel = predicate::evaluate(predicate, &mut cols)?;
        Ok((sel.count_set_bits() > 0).then_some(sel))
    }

    /// Finds where `id` lives.
    pub fn locate(&self, id: u64) -> Result<Option<RowLocation>> {
        if let Some((batch, row)) = self.memtable.find(id) {
            return Ok(Some(RowLocation::Memtable { batch, row }));
        }
        for (s, g) in self.index.candidates(id) {
            let ls = &self.segments[s];
            let seg = &ls.segment;
            let meta = &seg.meta().row_groups[g];
            let start = seg.meta().row_start(g);
            if meta.ids_dense {
                let row = (id - meta.id_min) as usize;
                if ls.is_deleted(start + row) {
                    continue;
                }
                return Ok(Some(RowLocation::Segment { segment: s, rg: g, row }));
            }
            let ids = seg.ids(g)?;
            let ids = ids
                .as_any()
                .downcast_ref::<UInt64Array>()
                .ok_or_else(|| Error::corrupt(seg.path(), 0, "_id column is not UInt64"))?;
            let v = ids.values();
            let found = if meta.ids_sorted {
                v.binary_search(&id).ok().filter(|&r| !ls.is_deleted(start + r))
            } else {
                let order = seg.id_order(g)?;
                let k = order.partition_point(|&r| v[r as usize] < id);
                order[k..]
                    .iter()
                    .map(|&r| r as usize)
                    .take_while(|&r| v[r] == id)
                    .find(|&r| !ls.is_deleted(start + r))
            };
            if let Some(row) = found {
                return Ok(Some(RowLocation::Segment { segment: s, rg: g, row }));
            }
        }
        Ok(None)
    }

    /// The row with `_id == id`, projected, as a one-row batch; `None` if there is none.
    pub fn get(&self, id: u64, projection: &[usize]) -> Result<Option<RecordBatch>> {
        self.check_projection(projection)?;
        match self.locate(id)? {
            Some(loc) => self.rows_at(&[loc], projection).map(Some),
            None => Ok(None),
        }
    }

    /// Hands `f` the values of the row at `loc` (from [`TableSnapshot::locate`] on this
    /// snapshot), one per projected column in projection order, as `(position in the
    /// projection, value)`. Segment values of the kinds [`encoding::reads_cells`] accepts
    /// are read in place from their encoded blocks — no array is built — which is what
    /// makes a point lookup by `_id` cheap; memtable rows and other kinds come as a row of
    /// an array. Stops at the first error `f` returns.
    pub fn visit_row(
        &self,
        loc: RowLocation,
        projection: &[usize],
        mut f: impl FnMut(usize, RowValue<'_>) -> Result<()>,
    ) -> Result<()> {
        self.check_projection(projection)?;
        match loc {
            RowLocation::Memtable { batch, row } => {
                let b = self.mem_batch(batch)?;
                for (i, &p) in projection.iter().enumerate() {
                    f(i, b.value(p, row)?)?;
                }
            }
            RowLocation::Segment { segment, rg, row } => {
                let seg = self.segment_at(segment)?;
                if seg.meta().row_groups.get(rg).is_none_or(|g| row >= g.rows as usize) {
                    return Err(Error::InvalidInput {
                        table: self.name.to_string(),
                        reason: format!("segment {segment} has no row {row} in row group {rg}"),
                    });
                }
                for (i, &p) in projection.iter().enumerate() {
                    let cid = self.schema.column_id_at(p);
                    match seg.meta().position_of(cid) {
                        Some(pos) => seg.with_value(rg, pos, row, |v| f(i, v))??,
                        // A column added after this segment was written: NULL here.
                        None => f(i, RowValue::Cell(Cell::Null))?,
                    }
                }
            }
        }
        Ok(())
    }

    /// The rows with the given ids, in the order given; ids that do not exist are skipped
    /// (include `_id` in the projection to tell which were found).
    pub fn get_many(&self, ids: &[u64], projection: &[usize]) -> Result<RecordBatch> {
        let mut locs = Vec::with_capacity(ids.len());
        for &id in ids {
            if let Some(loc) = self.locate(id)? {
                locs.push(loc);
            }
        }
        self.rows_at(&locs, projection)
    }

    /// The columns `projection` (full-schema positions) of the rows at `locs`, in that
    /// order, without a record batch around them (what an update needs of the old rows).
    /// One row is read value by value in place, each value becoming a one-value array.
    pub fn columns_at(&self, locs: &[RowLocation], projection: &[usize]) -> Result<Vec<ArrayRef>> {
        let [loc] = locs else {
            return Ok(self.rows_at(locs, projection)?.columns().to_vec());
        };
        let full = self.schema.full_schema();
        let mut columns = Vec::with_capacity(projection.len());
        self.visit_row(*loc, projection, |i, v| {
            columns.push(one_value_array(full.field(projection[i]).data_type(), v)?);
            Ok(())
        })?;
        Ok(columns)
    }

    /// The rows at these locations (from [`TableSnapshot::locate`] on this snapshot), in
    /// that order, projected.
    pub fn rows_at(&self, locs: &[RowLocation], projection: &[usize]) -> Result<RecordBatch> {
        self.check_projection(projection)?;
        let schema = self.projected_schema(projection)?;
        let batch = |columns: Vec<ArrayRef>, rows: usize| {
            RecordBatch::try_new_with_options(
                schema.clone(),
                columns,
                &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
            )
            .map_err(|e| Error::arrow("gather rows", e))
        };
        if locs.is_empty() {
            let columns = schema.fields().iter().map(|f| new_empty_array(f.data_type())).collect();
            return batch(columns, 0);
        }
        if let [_] = locs {
            return batch(self.columns_at(locs, projection)?, 1);
        }
        if locs.len() <= CELL_ROWS
            && schema.fields().iter().all(|f| encoding::reads_cells(f.data_type()))
        {
            let columns = self.gather_values(locs, projection, &schema)?;
            return batch(columns, locs.len());
        }
        // Group the wanted rows by source: a memtable batch is used as it is; of a row
        // group, the window from its first to its last wanted row is decoded once when the
        // rows are dense in it, otherwise just the wanted rows are gathered from each
        // column's encoded block (one pass over each block's metadata for all of them).
        let key_of = source_of;
        let mut wanted: BTreeMap<(usize, usize), Vec<usize>> = BTreeMap::new();
        for &loc in locs {
            let (key, row) = key_of(loc);
            wanted.entry(key).or_default().push(row);
        }
        // Per source: its columns and how a wanted row maps to an index into them.
        enum Pick {
            Direct,
            Offset(usize),
            Listed(Vec<usize>),
        }
        let mut sources: Vec<Vec<ArrayRef>> = Vec::with_capacity(wanted.len());
        let mut picks_of: BTreeMap<(usize, usize), (usize, Pick)> = BTreeMap::new();
        for (key, mut rows) in wanted {
            rows.sort_unstable();
            rows.dedup();
            let (cols, pick) = if key.0 == 0 {
                let b = self.memtable_batch(key.1)?;
                (projection.iter().map(|&p| b.column(p).clone()).collect(), Pick::Direct)
            } else {
                let (segment, rg) = (key.0 - 1, key.1);
                let (lo, hi) = (rows[0], rows[rows.len() - 1]);
                if rows.len() * 4 > hi - lo {
                    let len = Some(hi - lo + 1);
                    let mode = DecodeMode::Values;
                    let cols =
                        self.read_row_group_window(segment, rg, projection, lo, len, mode)?;
                    (cols, Pick::Offset(lo))
                } else {
                    (self.read_row_group_rows(segment, rg, projection, &rows)?, Pick::Listed(rows))
                }
            };
            sources.push(cols);
            picks_of.insert(key, (sources.len() - 1, pick));
        }
        let mut picks: Vec<(usize, usize)> = Vec::with_capacity(locs.len());
        for &loc in locs {
            let (key, row) = key_of(loc);
            // Every key and row was put in `picks_of` above.
            let pick = picks_of.get(&key).and_then(|(src, pick)| match pick {
                Pick::Direct => Some((*src, row)),
                Pick::Offset(lo) => Some((*src, row - lo)),
                Pick::Listed(rows) => rows.binary_search(&row).ok().map(|i| (*src, i)),
            });
            picks.push(pick.ok_or_else(|| Error::InvalidInput {
                table: self.name.to_string(),
                reason: "a wanted row lost its source".into(),
            })?);
        }
        let mut columns = Vec::with_capacity(projection.len());
        for c in 0..projection.len() {
            let arrays: Vec<&dyn Array> = sources.iter().map(|cols| cols[c].as_ref()).collect();
            let col = if arrays.is_empty() {
                new_null_array(schema.field(c).data_type(), 0)
            } else {
                arrow_select::interleave::interleave(&arrays, &picks)
                    .map_err(|e| Error::arrow("gather rows", e))?
            };
            columns.push(col);
        }
        batch(columns, picks.len())
    }

    /// [`TableSnapshot::rows_at`] for up to [`CELL_ROWS`] rows of kinds
    /// [`encoding::reads_cells`] accepts: the wanted rows sorted by source (memtable batch
    /// or row group) and row, each source's values appended to one builder per column —
    /// read in place, each block found once per source, no array per source and no
    /// interleaving — then put in the order asked by one `take` per column.
    pub(super) fn gather_values(
        &self,
        locs: &[RowLocation],
        projection: &[usize],
        schema: &Schema,
    ) -> Result<Vec<ArrayRef>> {
        let bad = |reason: String| Error::InvalidInput { table: self.name.to_string(), reason };
        let mut order: Vec<u32> = (0..locs.len() as u32).collect();
        order.sort_unstable_by_key(|&i| source_of(locs[i as usize]));
        let sorted: Vec<((usize, usize), usize)> =
            order.iter().map(|&i| source_of(locs[i as usize])).collect();
        let rows: Vec<usize> = sorted.iter().map(|k| k.1).collect();
        // Runs of one source: (source, memtable batch or row group, its part of `rows`).
        let mut runs = Vec::new();
        let mut start = 0;
        for i in 1..=sorted.len() {
            if i == sorted.len() || sorted[i].0 != sorted[start].0 {
                let (src, sub) = sorted[start].0;
                // Sorted: the run's last row is its largest.
                let last = rows[i - 1];
                let held = if src == 0 {
                    self.mem_batch(sub)?.num_rows()
                } else {
                    let seg = self.segment_at(src - 1)?;
                    seg.meta().row_groups.get(sub).map_or(0, |g| g.rows as usize)
                };
                if last >= held {
                    return Err(bad(format!("no row {last} in source {src}.{sub}")));
                }
                runs.push((src, sub, start..i));
                start = i;
            }
        }
        let mut columns = Vec::with_capacity(projection.len());
        for (i, &p) in projection.iter().enumerate() {
            let dt = schema.field(i).data_type();
            let mut b = arrow_array::builder::make_builder(dt, locs.len());
            let cid = self.schema.column_id_at(p);
            for (src, sub, range) in &runs {
                let rows = &rows[range.clone()];
                if *src == 0 {
                    // A tail view's rows are read in place (no arrays built for them).
                    let mb = self.mem_batch(*sub)?;
                    for &r in rows {
                        append_value(b.as_mut(), dt, mb.value(p, r)?)?;
                    }
                    continue;
                }
                let seg = self.segment_at(src - 1)?;
                match seg.meta().position_of(cid) {
                    Some(pos) => {
                        seg.visit_values(*sub, pos, rows, |v| append_value(b.as_mut(), dt, v))?
                    }
                    // A column added after this segment was written: NULL here.
                    None => {
                        for _ in rows {
                            append_value(b.as_mut(), dt, RowValue::Cell(Cell::Null))?;
                        }
                    }
                }
            }
            columns.push(b.finish());
        }
        if order.iter().enumerate().all(|(j, &o)| o as usize == j) {
            return Ok(columns);
        }
        // Loc `k` sits at position `at[k]` of the sorted order.
        let mut at = vec![0u32; order.len()];
        for (j, &o) in order.iter().enumerate() {
            at[o as usize] = j as u32;
        }
        let at = arrow_array::UInt32Array::from(at);
        columns
            .iter()
            .map(|c| {
                arrow_select::take::take(c.as_ref(), &at, None)
                    .map_err(|e| Error::arrow("gather rows", e))
            })
            .collect()
    }

    pub(super) fn segment_at(&self, segment: usize) -> Result<&Segment> {
        Ok(&self
            .segments
            .get(segment)
            .ok_or_else(|| Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("no segment {segment} (table has {})", self.segments.len()),
            })?
            .segment)
    }

    /// The rows `rows` (ascending) of the projected columns of one row group, gathered
    /// from the encoded blocks without decoding other rows.
    pub fn read_row_group_rows(
        &self,
        segment: usize,
        rg: usize,
        projection: &[usize],
        rows: &[usize],
    ) -> Result<Vec<ArrayRef>> {
        self.check_projection(projection)?;
        let seg = self.segment_at(segment)?;
        projection
            .iter()
            .map(|&p| {
                let cid = self.schema.column_id_at(p);
                match seg.meta().position_of(cid) {
                    Some(pos) => seg.read_column_rows(rg, pos, rows),
                    None => Ok(new_null_array(
                        self.schema.full_schema().field(p).data_type(),
                        rows.len(),
                    )),
                }
            })
            .collect()
    }

    pub(super) fn memtable_batch(&self, batch: usize) -> Result<&RecordBatch> {
        self.mem_batch(batch)?.batch()
    }

    pub(super) fn mem_batch(&self, batch: usize) -> Result<&crate::memtable::MemBatch> {
        self.memtable.batches().get(batch).map(|b| &**b).ok_or_else(|| Error::InvalidInput {
            table: self.name.to_string(),
            reason: format!("memtable batch {batch} does not exist in this snapshot"),
        })
    }
}

/// Up to how many rows [`TableSnapshot::rows_at`] gathers value by value into one builder
/// per column (beyond, it decodes each row group's wanted rows as arrays and interleaves
/// them). Measured below it: 100 rows in 16 row groups cost about half the instructions
/// the arrays did; where the two cross over was not measured (it depends on how densely
/// the rows sit in their row groups: a dense window decodes for a few instructions a row).
pub(super) const CELL_ROWS: usize = 1024;

/// The source of a row — `(0, memtable batch)` or `(1 + segment, row group)` — and its row
/// in it: the key a lookup of many rows groups and sorts them by.
pub(super) fn source_of(loc: RowLocation) -> ((usize, usize), usize) {
    match loc {
        RowLocation::Memtable { batch, row } => ((0, batch), row),
        RowLocation::Segment { segment, rg, row } => ((1 + segment, rg), row),
    }
}
