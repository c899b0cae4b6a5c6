//! Input conformance: what an insert or update must be before it is written — the
//! table's types (lossless casts only), NOT NULL, vector dimension and components, stored
//! vector forms rounded.
//!
//! What this module must not do: write anything; a refused batch leaves no trace.

use super::*;

impl TableSnapshot {
    /// Checks a caller's batch against the schema and returns the user columns in table
    /// order, casting only where lossless (large/view strings, dictionaries) and filling
    /// absent nullable columns with nulls.
    pub fn conform(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        let n = batch.num_rows();
        self.conform_with(batch, "_id is assigned by Basalt and cannot be inserted", |f| {
            if f.is_nullable() {
                Ok(new_null_array(f.data_type(), n))
            } else {
                Err(Error::NullViolation { table: self.name.to_string(), column: f.name().clone() })
            }
        })
    }

    /// The user columns, in table order, of rows being updated: the columns `values` gives,
    /// checked and cast as [`TableSnapshot::conform`] checks an insert's, and the others
    /// from `old` (the rows' stored values of the columns not given, in table order) as
    /// they are — no intermediate batch, no schema built per update.
    pub fn conform_update(
        &self,
        values: &RecordBatch,
        old: Vec<ArrayRef>,
    ) -> Result<Vec<ArrayRef>> {
        let mut olds = old.into_iter();
        self.conform_with(values, "_id cannot be updated", |f| {
            olds.next().ok_or_else(|| Error::InvalidInput {
                table: self.name.to_string(),
                reason: format!("the old rows lack column '{}'", f.name()),
            })
        })
    }

    /// The user columns of a write, in table order: each column `batch` gives checked and
    /// cast (lossless casts only, see `conform_column`), each column it does not give from
    /// `absent`. `_id` is refused with `id_reason`; unknown and repeated columns, columns
    /// of another length and NULLs in NOT NULL columns are errors.
    pub(super) fn conform_with(
        &self,
        batch: &RecordBatch,
        id_reason: &str,
        mut absent: impl FnMut(&Field) -> Result<ArrayRef>,
    ) -> Result<Vec<ArrayRef>> {
        let table = &*self.name;
        let bad = |reason: String| Error::InvalidInput { table: table.to_string(), reason };
        let bschema = batch.schema();
        // The batch column of each user column.
        let mut given: Vec<Option<usize>> = vec![None; self.schema.columns().len()];
        for (i, f) in bschema.fields().iter().enumerate() {
            match self.schema.index_of(f.name()) {
                Some(0) => return Err(bad(id_reason.into())),
                None => {
                    return Err(Error::ColumnNotFound {
                        table: table.to_string(),
                        column: f.name().clone(),
                    });
                }
                Some(k) => {
                    if given[k - 1].replace(i).is_some() {
                        return Err(bad(format!("column '{}' given twice", f.name())));
                    }
                }
            }
        }
        let n = batch.num_rows();
        // One slot more than the user columns: an insert puts `_id` in front.
        let mut out = Vec::with_capacity(given.len() + 1);
        for (c, at) in self.schema.columns().iter().zip(given) {
            let f = &c.field;
            let col = match at {
                Some(i) => conform_column(table, f, batch.column(i))?,
                None => absent(f)?,
            };
            if col.len() != n {
                return Err(bad(format!("column '{}' has {} rows, not {n}", f.name(), col.len())));
            }
            if !f.is_nullable() && col.null_count() > 0 {
                return Err(Error::NullViolation {
                    table: table.to_string(),
                    column: f.name().clone(),
                });
            }
            out.push(col);
        }
        Ok(out)
    }
}

pub(super) fn conform_column(table: &str, f: &Field, col: &ArrayRef) -> Result<ArrayRef> {
    let mismatch = || Error::TypeMismatch {
        table: table.to_string(),
        column: f.name().clone(),
        expected: f.data_type().clone(),
        found: col.data_type().to_string(),
    };
    let want = f.data_type();
    if col.data_type() == want {
        if let Some(fsl) = col.as_any().downcast_ref::<FixedSizeListArray>() {
            check_components(table, f, fsl)?;
        }
        return round_vectors(table, f, col);
    }
    if col.data_type() == &DataType::Null {
        // All NULL (an untyped NULL, such as a NULL parameter): NULLs of the column's type
        // (a NOT NULL column refuses them after this).
        return Ok(new_null_array(want, col.len()));
    }
    let phys = physical(f.name(), want)?;
    if let Physical::Vector { dim, .. } = phys {
        let DataType::FixedSizeList(child, n) = col.data_type() else { return Err(mismatch()) };
        if child.data_type() != &DataType::Float32 {
            return Err(mismatch());
        }
        if *n as usize != dim {
            return Err(Error::VectorDimension {
                table: table.to_string(),
                column: f.name().clone(),
                expected: dim,
                found: *n as usize,
            });
        }
        let fsl = col.as_any().downcast_ref::<FixedSizeListArray>().ok_or_else(mismatch)?;
        check_components(table, f, fsl)?;
        let DataType::FixedSizeList(want_child, _) = want else { return Err(mismatch()) };
        let a = FixedSizeListArray::try_new(
            want_child.clone(),
            *n,
            fsl.values().clone(),
            fsl.nulls().cloned(),
        )
        .map_err(|e| Error::arrow(format!("column '{}'", f.name()), e))?;
        return round_vectors(table, f, &(Arc::new(a) as ArrayRef));
    }
    let lossless = matches!(
        (col.data_type(), want),
        (DataType::LargeUtf8 | DataType::Utf8View, DataType::Utf8)
            | (DataType::LargeBinary | DataType::BinaryView, DataType::Binary)
    ) || matches!(col.data_type(), DataType::Dictionary(_, v) if v.as_ref() == want);
    if lossless {
        return arrow_cast::cast(col, want)
            .map_err(|e| Error::arrow(format!("column '{}'", f.name()), e));
    }
    Err(mismatch())
}

/// Refuses a vector with a NULL component (a NULL vector is a NULL row, but a vector is
/// whole or absent: a NULL component would be stored as 0.0) or one that is not a finite
/// number (NaN or infinite, as pgvector refuses them: no distance to such a vector is
/// meaningful, and a value out of FLOAT's range, such as `1e39` cast to it, arrives as
/// infinity). Only the rows of the array's window that are not NULL themselves are looked
/// at.
pub(super) fn check_components(table: &str, f: &Field, fsl: &FixedSizeListArray) -> Result<()> {
    let dim = fsl.value_length().max(0) as usize;
    let nulls = fsl.values().nulls().filter(|n| n.null_count() > 0);
    let floats = fsl.values().as_any().downcast_ref::<Float32Array>();
    let refuse = |row: usize, what: &str| Error::InvalidInput {
        table: table.to_string(),
        reason: format!("column '{}', row {}: a vector component is {what}", f.name(), row + 1),
    };
    // One pass over the window's values first (branch-free, so it vectorises): only when
    // it finds a NULL or non-finite value are the rows walked to name the first bad one.
    let first = fsl.value_offset(0).max(0) as usize;
    let window = first..first + fsl.len() * dim;
    let finite = floats
        .and_then(|v| v.values().get(window.clone()))
        .is_some_and(|v| v.iter().fold(true, |ok, x| ok & x.is_finite()));
    if finite && nulls.is_none_or(|n| n.slice(window.start, window.len()).null_count() == 0) {
        return Ok(());
    }
    for row in 0..fsl.len() {
        if fsl.is_null(row) {
            continue;
        }
        let start = fsl.value_offset(row).max(0) as usize;
        if let Some(nulls) = nulls
            && (start..start + dim).any(|i| nulls.is_null(i))
        {
            return Err(refuse(row, "NULL (vectors are whole or NULL)"));
        }
        let values = floats.and_then(|v| v.values().get(start..start + dim)).unwrap_or(&[]);
        if let Some(x) = values.iter().find(|x| !x.is_finite()) {
            let what = if x.is_nan() { "NaN" } else { "infinite (or out of FLOAT's range)" };
            return Err(refuse(row, &format!("{what}; vector components are finite numbers")));
        }
    }
    Ok(())
}

/// The values of a vector column as its stored form holds them (`float16` / `int8`
/// columns round each row on insert, so memtable and segment rows read the same; see
/// `basalt_vector::stored`); other columns as they are. A component the form cannot hold
/// is an error naming the row.
pub(super) fn round_vectors(table: &str, f: &Field, col: &ArrayRef) -> Result<ArrayRef> {
    if !matches!(f.data_type(), DataType::FixedSizeList(..)) {
        return Ok(col.clone());
    }
    let form = crate::types::stored_form(f)?;
    if form == basalt_vector::StoredForm::Float32 {
        return Ok(col.clone());
    }
    let bad = || Error::InvalidInput {
        table: table.to_string(),
        reason: format!("column '{}' is not a list of float32 vectors", f.name()),
    };
    let fsl = col.as_any().downcast_ref::<FixedSizeListArray>().ok_or_else(bad)?;
    let dim = fsl.value_length().max(0) as usize;
    let start = fsl.value_offset(0).max(0) as usize;
    let values = fsl.values().as_any().downcast_ref::<Float32Array>().ok_or_else(bad)?;
    let mut out = values.values().get(start..start + fsl.len() * dim).ok_or_else(bad)?.to_vec();
    for (i, row) in out.chunks_exact_mut(dim.max(1)).enumerate() {
        if fsl.is_null(i) {
            row.fill(0.0);
            continue;
        }
        basalt_vector::stored::round_row(form, row).map_err(|e| Error::InvalidInput {
            table: table.to_string(),
            reason: format!("column '{}' ({} vectors), row {}: {e}", f.name(), form.name(), i + 1),
        })?;
    }
    let DataType::FixedSizeList(item, n) = f.data_type() else { return Err(bad()) };
    let a = FixedSizeListArray::try_new(
        item.clone(),
        *n,
        Arc::new(Float32Array::from(out)),
        fsl.nulls().cloned(),
    )
    .map_err(|e| Error::arrow(format!("column '{}'", f.name()), e))?;
    Ok(Arc::new(a))
}
