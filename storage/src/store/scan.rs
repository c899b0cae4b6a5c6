//! Scans of a table snapshot: scan units (row groups, memtable batches), filters evaluated
//! on encoded chunks, dictionary codes on request, limits and sparse selections gathered
//! row by row.
//!
//! What this module must not do: read outside the snapshot and units it was given.

use super::*;

/// One unit of a table scan: a row group of a segment, or the memtable. Scans can be split
/// into groups of units (the SQL layer runs one group per partition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScanUnit {
    /// Row group `rg` of the `segment`-th live segment.
    RowGroup {
        /// Position in [`TableSnapshot::segments`].
        segment: usize,
        /// Row group within the segment.
        rg: usize,
    },
    /// Every memtable batch.
    Memtable,
}

/// Iterator over a table snapshot's rows as record batches.
#[derive(Debug)]
pub struct Scan {
    pub(super) table: Arc<TableSnapshot>,
    pub(super) schema: SchemaRef,
    pub(super) projection: Vec<usize>,
    pub(super) predicate: Option<Predicate>,
    pub(super) units: Vec<ScanUnit>,
    pub(super) next: usize,
    pub(super) mem: usize,
    pub(super) mode: DecodeMode,
    /// Rows still wanted (`None`: all): the scan ends once they are returned, and a row
    /// group decodes its projected columns only up to the last row it needs.
    pub(super) limit: Option<usize>,
}

/// Columns of one row group, fetched on demand (dictionary chunks as codes).
pub(super) struct RowGroupColumns<'a> {
    pub(super) table: &'a TableSnapshot,
    pub(super) segment: usize,
    pub(super) rg: usize,
    /// First row of the window the predicate is evaluated on.
    pub(super) start: usize,
    pub(super) rows: usize,
    /// Columns decoded so far (a predicate may name one column in several leaves).
    pub(super) decoded: Vec<(usize, ArrayRef)>,
}

impl predicate::Columns for RowGroupColumns<'_> {
    fn rows(&self) -> usize {
        self.rows
    }
    fn column(&mut self, name: &str) -> Result<ArrayRef> {
        let i = self.position(name)?;
        if let Some((_, a)) = self.decoded.iter().find(|(c, _)| *c == i) {
            return Ok(a.clone());
        }
        let mut cols = self.table.read_row_group_window(
            self.segment,
            self.rg,
            &[i],
            self.start,
            Some(self.rows),
            DecodeMode::Codes,
        )?;
        let a = cols.pop().ok_or_else(|| self.not_found(name))?;
        self.decoded.push((i, a.clone()));
        Ok(a)
    }
    fn int_range(
        &mut self,
        name: &str,
        lo: i128,
        hi: i128,
        scale: Option<i8>,
    ) -> Result<Option<arrow_buffer::BooleanBuffer>> {
        let Some(i) = self.table.schema.index_of(name) else { return Ok(None) };
        // A column decoded for another leaf is compared as an array. Dates, times and
        // timestamps are packed as their integers, which their constants are; decimals
        // as their unscaled values, which a constant of the column's scale is.
        let t = self.table.schema.full_schema().field(i).data_type();
        let packed = match (t, scale) {
            (DataType::Decimal128(_, s), Some(scale)) => *s == scale,
            (t, None) => t.is_integer() || t.is_temporal(),
            _ => false,
        };
        if self.decoded.iter().any(|(c, _)| *c == i) || !packed {
            return Ok(None);
        }
        self.table.int_range_window(self.segment, self.rg, i, self.start, self.rows, lo, hi)
    }
    fn column_rows(&mut self, name: &str, rows: &[usize]) -> Result<ArrayRef> {
        let i = self.position(name)?;
        // Decoded already for another leaf: those rows of it.
        if let Some((_, a)) = self.decoded.iter().find(|(c, _)| *c == i) {
            return predicate::take_rows(a, rows, name);
        }
        let at: Vec<usize> = rows.iter().map(|r| r + self.start).collect();
        let mut cols = self.table.read_row_group_rows(self.segment, self.rg, &[i], &at)?;
        cols.pop().ok_or_else(|| self.not_found(name))
    }
}

impl RowGroupColumns<'_> {
    /// Full-schema position of column `name`.
    fn position(&self, name: &str) -> Result<usize> {
        self.table.schema.index_of(name).ok_or_else(|| self.not_found(name))
    }

    fn not_found(&self, name: &str) -> Error {
        Error::ColumnNotFound { table: self.table.name.to_string(), column: name.to_string() }
    }
}

impl Scan {
    /// Schema of the batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Hands dictionary-encoded chunks of segments out as dictionary arrays (codes plus the
    /// chunk's sorted dictionary; see [`DecodeMode::Codes`]) instead of values. Each batch
    /// then carries its own schema, whose field types say which columns came as codes;
    /// memtable batches always come as values.
    pub fn with_codes(mut self) -> Scan {
        self.mode = DecodeMode::Codes;
        self
    }

    /// Ends the scan after `limit` rows (`None`: no limit). With a predicate, a row group
    /// is still filtered whole, but its other projected columns are decoded only up to the
    /// row where the limit is met.
    pub fn with_limit(mut self, limit: Option<usize>) -> Scan {
        self.limit = limit;
        self
    }
}

/// A scan gathers the selected rows of a row group instead of decoding it whole when at
/// most one row in this many is selected.
pub(super) const SPARSE_SELECTION: usize = 8;

impl Iterator for Scan {
    type Item = Result<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.next_batch()?;
        if let (Ok(b), Some(left)) = (&b, &mut self.limit) {
            *left = left.saturating_sub(b.num_rows());
        }
        Some(b)
    }
}

impl Scan {
    pub(super) fn next_batch(&mut self) -> Option<Result<RecordBatch>> {
        if self.limit == Some(0) {
            return None;
        }
        loop {
            let unit = *self.units.get(self.next)?;
            let r = match unit {
                ScanUnit::RowGroup { segment, rg } => {
                    self.next += 1;
                    self.read_row_group(segment, rg)
                }
                ScanUnit::Memtable => match self.table.memtable.batches().get(self.mem) {
                    None => {
                        self.next += 1;
                        self.mem = 0;
                        continue;
                    }
                    Some(mb) => {
                        self.mem += 1;
                        if mb.live_rows() == 0 {
                            continue;
                        }
                        self.read_memtable_batch(mb).map(Some)
                    }
                },
            };
            match r {
                Ok(Some(b)) if b.num_rows() > 0 => return Some(Ok(b)),
                Ok(_) => continue,
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl Scan {
    /// The selected rows of one row group (`None`: nothing selected).
    pub(super) fn read_row_group(&self, s: usize, g: usize) -> Result<Option<RecordBatch>> {
        let t = &self.table;
        let Some(ls) = t.segments.get(s) else { return Ok(None) };
        let Some(meta) = ls.segment.meta().row_groups.get(g) else { return Ok(None) };
        let rows = meta.rows as usize;
        let mut keep = ls.keep_mask(g).map(|m| m.values().clone());
        let mut rows = rows;
        match (&self.predicate, self.limit) {
            // Under a limit the filter runs on windows of the row group until enough rows
            // matched: 4096 rows first, then as many as the selectivity seen so far says
            // are still needed plus a quarter (four times more while nothing matched).
            (Some(p), Some(left)) => {
                if !t.zone_maps_allow(s, g, p) {
                    return Ok(None);
                }
                let mut all = arrow_buffer::BooleanBufferBuilder::new(rows);
                let (mut ws, mut step, mut found) = (0usize, 4096usize, 0usize);
                while ws < rows && found < left {
                    let we = ws.saturating_add(step).min(rows);
                    let mut cols = RowGroupColumns {
                        table: t,
                        segment: s,
                        rg: g,
                        start: ws,
                        rows: we - ws,
                        decoded: Vec::new(),
                    };
                    let mut sel = predicate::evaluate(p, &mut cols)?;
                    if let Some(k) = &keep {
                        sel = &sel & &k.slice(ws, we - ws);
                    }
                    found += sel.count_set_bits();
                    all.append_buffer(&sel);
                    ws = we;
                    step = match found {
                        0 => step.saturating_mul(4),
                        _ => {
                            let expect = left.saturating_sub(found).saturating_mul(ws) / found;
                            expect.saturating_add(expect / 4).max(1024)
                        }
                    };
                }
                rows = ws;
                keep = Some(all.finish());
            }
            (Some(p), None) => match t.select_in_row_group(s, g, p, 0, None)? {
                None => return Ok(None),
                Some(sel) => keep = Some(keep.map_or(sel.clone(), |k| &k & &sel)),
            },
            (None, _) => {}
        }
        if keep.as_ref().is_some_and(|m| m.count_set_bits() == 0) {
            return Ok(None);
        }
        // Under a limit, only rows up to the one that meets it are decoded.
        if let Some(left) = self.limit {
            let end = match &keep {
                Some(m) => m.set_indices().nth(left.saturating_sub(1)).map_or(rows, |i| i + 1),
                None => left.min(rows),
            };
            if end < rows {
                rows = end;
                keep = keep.map(|m| m.slice(0, end));
            }
        }
        // Few rows selected: gather just those from the encoded blocks (late
        // materialisation) instead of decoding the row group and filtering it.
        if self.mode == DecodeMode::Values
            && let Some(m) = &keep
            && m.count_set_bits() * SPARSE_SELECTION <= rows
        {
            let picks: Vec<usize> = m.set_indices().collect();
            let cols = t.read_row_group_rows(s, g, &self.projection, &picks)?;
            return RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &arrow_array::RecordBatchOptions::new().with_row_count(Some(picks.len())),
            )
            .map(Some)
            .map_err(|e| Error::arrow("scan", e));
        }
        // Some rows dropped: dictionary chunks are read as codes, filtered, and only the
        // kept rows' values looked up (instead of every row's, then filtered).
        if self.mode == DecodeMode::Values
            && let Some(m) = keep.as_ref().filter(|m| m.count_set_bits() < rows)
        {
            let mask = arrow_array::BooleanArray::new(m.clone(), None);
            let codes =
                t.read_row_group_window(s, g, &self.projection, 0, Some(rows), DecodeMode::Codes)?;
            let cols = codes
                .iter()
                .zip(self.schema.fields())
                .map(|(c, f)| {
                    let kept = arrow_select::filter::filter(c.as_ref(), &mask)?;
                    if kept.data_type() == f.data_type() {
                        Ok(kept)
                    } else {
                        arrow_cast::cast(&kept, f.data_type())
                    }
                })
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::arrow("scan", e))?;
            let n = m.count_set_bits();
            return RecordBatch::try_new_with_options(
                self.schema.clone(),
                cols,
                &arrow_array::RecordBatchOptions::new().with_row_count(Some(n)),
            )
            .map(Some)
            .map_err(|e| Error::arrow("scan", e));
        }
        let cols = t.read_row_group_window(s, g, &self.projection, 0, Some(rows), self.mode)?;
        let schema = match self.mode {
            DecodeMode::Values => self.schema.clone(),
            DecodeMode::Codes | DecodeMode::Stored => Arc::new(Schema::new(
                self.schema
                    .fields()
                    .iter()
                    .zip(&cols)
                    .map(|(f, c)| f.as_ref().clone().with_data_type(c.data_type().clone()))
                    .collect::<Vec<_>>(),
            )),
        };
        let b = RecordBatch::try_new_with_options(
            schema,
            cols,
            &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .map_err(|e| Error::arrow("scan", e))?;
        match &keep {
            Some(m) if m.count_set_bits() < rows => {
                let m = arrow_array::BooleanArray::new(m.clone(), None);
                arrow_select::filter::filter_record_batch(&b, &m)
                    .map(Some)
                    .map_err(|e| Error::arrow("scan", e))
            }
            _ => Ok(Some(b)),
        }
    }

    pub(super) fn read_memtable_batch(
        &self,
        mb: &crate::memtable::MemBatch,
    ) -> Result<RecordBatch> {
        let b = mb.live()?;
        let b = match &self.predicate {
            Some(p) => {
                let mut named = b.clone();
                let sel = predicate::evaluate(p, &mut named)?;
                let m = arrow_array::BooleanArray::new(sel, None);
                arrow_select::filter::filter_record_batch(&b, &m)
                    .map_err(|e| Error::arrow("scan", e))?
            }
            None => b,
        };
        let b = b.project(&self.projection).map_err(|e| Error::arrow("scan", e))?;
        // Memtable batches carry the schema of their insert; present the current one.
        b.with_schema(self.schema.clone()).map_err(|e| Error::arrow("scan", e))
    }
}
