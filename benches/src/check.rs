//! Result digests for the cross-engine check: every engine's result of a metric is reduced to
//! a [`Digest`] and the digests must agree, or the run fails.
//!
//! A digest keeps, per column (columns named `_id` are left out: engines disagree on whether
//! `SELECT *` shows it), the null count, the number and sum of numeric values (integers and
//! floats alike, since engines pick different numeric types for the same expression) and
//! an order-independent hash of the text values. Float sums compare with a relative
//! tolerance, since engines add in different orders.

use std::hash::{Hash, Hasher};

/// One column's digest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ColDigest {
    /// Null values.
    pub nulls: u64,
    /// Numeric values.
    pub numbers: u64,
    /// Sum of the numeric values.
    pub sum: f64,
    /// Text (or other non-numeric) values.
    pub texts: u64,
    /// Wrapping sum of the hashes of the text values.
    pub text_hash: u64,
}

/// The digest of a whole result.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Digest {
    /// Rows.
    pub rows: u64,
    /// Columns, in result order, without `_id`.
    pub cols: Vec<ColDigest>,
}

/// A value as the digest sees it.
#[derive(Debug, Clone, Copy)]
pub enum Cell<'a> {
    /// NULL.
    Null,
    /// A number.
    Num(f64),
    /// Text.
    Text(&'a str),
    /// Bytes.
    Bytes(&'a [u8]),
}

fn text_hash(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

impl ColDigest {
    /// Adds one value.
    pub fn add(&mut self, c: Cell<'_>) {
        match c {
            Cell::Null => self.nulls += 1,
            Cell::Num(f) if f.is_nan() => self.nulls += 1,
            Cell::Num(f) => {
                self.numbers += 1;
                self.sum += f;
            }
            Cell::Text(s) => {
                self.texts += 1;
                self.text_hash = self.text_hash.wrapping_add(text_hash(s.as_bytes()));
            }
            Cell::Bytes(b) => {
                self.texts += 1;
                self.text_hash = self.text_hash.wrapping_add(text_hash(b));
            }
        }
    }
}

/// How much of two digests must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Row count and every column.
    Full,
    /// Row count only (the rows returned are not determined by the SQL, e.g. LIMIT without
    /// ORDER BY).
    Rows,
    /// Row count and these columns (0-based, `_id` not counted): ORDER BY … LIMIT with ties
    /// decides the sort keys, not the other columns.
    Cols(&'static [usize]),
    /// As `Full`, with each numeric value allowed an error of 10⁻⁶ of itself or 10⁻⁶
    /// absolute, whichever is larger: engines round decimal averages and quotients to
    /// different scales (an average of DECIMAL(15,2) has 6 decimals in DataFusion, is a
    /// double in DuckDB and SQLite) (TPC-H).
    Near,
    /// Nothing comparable (timing-only operations).
    None,
}

/// Whether two column sums agree: within `tolerance` of the larger one (at least of 1), plus
/// `per_value` for each of the `numbers` values summed.
fn close(a: f64, b: f64, numbers: u64, tolerance: f64, per_value: f64) -> bool {
    let scale = a.abs().max(b.abs()).max(1.0);
    (a - b).abs() <= tolerance * scale + per_value * numbers as f64
}

fn col_eq(a: &ColDigest, b: &ColDigest, check: Check) -> bool {
    let (tolerance, per_value) = if check == Check::Near { (1e-6, 1e-6) } else { (1e-9, 0.0) };
    a.nulls == b.nulls
        && a.numbers == b.numbers
        && a.texts == b.texts
        && a.text_hash == b.text_hash
        && close(a.sum, b.sum, a.numbers, tolerance, per_value)
}

impl Digest {
    /// A one-row, one-column numeric result.
    pub fn scalar(v: f64) -> Digest {
        let mut c = ColDigest::default();
        c.add(Cell::Num(v));
        Digest { rows: 1, cols: vec![c] }
    }

    /// A one-column text result.
    pub fn names(names: &[String]) -> Digest {
        let mut c = ColDigest::default();
        for n in names {
            c.add(Cell::Text(n));
        }
        Digest { rows: names.len() as u64, cols: vec![c] }
    }

    /// Builds a digest from rows of cells; `names` are the column names.
    pub fn from_rows<'a>(names: &[&str], rows: impl IntoIterator<Item = Vec<Cell<'a>>>) -> Digest {
        let keep: Vec<bool> = names.iter().map(|n| !n.eq_ignore_ascii_case("_id")).collect();
        let mut d = Digest {
            rows: 0,
            cols: vec![ColDigest::default(); keep.iter().filter(|k| **k).count()],
        };
        for row in rows {
            d.rows += 1;
            let mut j = 0;
            for (i, c) in row.into_iter().enumerate() {
                if keep.get(i).copied().unwrap_or(true) {
                    if let Some(col) = d.cols.get_mut(j) {
                        col.add(c);
                    }
                    j += 1;
                }
            }
        }
        d
    }

    /// Whether `other` agrees with `self` as far as `check` asks; the error says where not.
    pub fn agrees(&self, other: &Digest, check: Check) -> Result<(), String> {
        if check == Check::None {
            return Ok(());
        }
        if self.rows != other.rows {
            return Err(format!("{} rows vs {} rows", self.rows, other.rows));
        }
        if self.rows == 0 {
            // An empty result may come without any batch, hence without columns.
            return Ok(());
        }
        let cols: Vec<usize> = match check {
            Check::Full | Check::Near => {
                if self.cols.len() != other.cols.len() {
                    return Err(format!(
                        "{} columns vs {} columns",
                        self.cols.len(),
                        other.cols.len()
                    ));
                }
                (0..self.cols.len()).collect()
            }
            Check::Cols(c) => c.to_vec(),
            Check::Rows | Check::None => Vec::new(),
        };
        for i in cols {
            match (self.cols.get(i), other.cols.get(i)) {
                (Some(a), Some(b)) if col_eq(a, b, check) => {}
                (a, b) => return Err(format!("column {i} differs: {a:?} vs {b:?}")),
            }
        }
        Ok(())
    }
}

/// Defines a module `$m` with `fn digest(&[RecordBatch]) -> Digest` for the arrow crate at
/// path `$arrow` (the harness has two: its own and DuckDB's).
#[macro_export]
macro_rules! arrow_digest_mod {
    ($m:ident, $($arrow:ident)::+) => {
        /// Digests of Arrow batches of one arrow crate.
        pub mod $m {
            use $($arrow)::+ as arrow_crate;
            use arrow_crate::array::{Array, AsArray};
            use arrow_crate::datatypes::DataType;
            use $crate::check::{Cell, ColDigest, Digest};

            /// The digest of Arrow batches.
            pub fn digest(batches: &[arrow_crate::record_batch::RecordBatch]) -> Digest {
                let Some(first) = batches.first() else { return Digest::default() };
                let schema = first.schema();
                let keep: Vec<usize> = (0..schema.fields().len())
                    .filter(|&i| !schema.field(i).name().eq_ignore_ascii_case("_id"))
                    .collect();
                let mut d = Digest { rows: 0, cols: vec![ColDigest::default(); keep.len()] };
                for b in batches {
                    d.rows += b.num_rows() as u64;
                    for (j, &i) in keep.iter().enumerate() {
                        let col = b.column(i);
                        let numeric = col.data_type().is_numeric()
                            || matches!(col.data_type(), DataType::Boolean);
                        let target = if numeric { DataType::Float64 } else { DataType::Utf8 };
                        let Ok(c) = arrow_crate::compute::cast(col, &target) else {
                            d.cols[j].nulls += col.len() as u64;
                            continue;
                        };
                        for r in 0..c.len() {
                            let cell = if c.is_null(r) {
                                Cell::Null
                            } else if numeric {
                                Cell::Num(
                                    c.as_primitive::<arrow_crate::datatypes::Float64Type>()
                                        .value(r),
                                )
                            } else {
                                Cell::Text(c.as_string::<i32>().value(r))
                            };
                            d.cols[j].add(cell);
                        }
                    }
                }
                d
            }
        }
    };
}

arrow_digest_mod!(arrow59, arrow);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digests_ignore_id_order_and_numeric_type() {
        let a = Digest::from_rows(
            &["_id", "x", "s"],
            vec![
                vec![Cell::Num(1.0), Cell::Num(2.0), Cell::Text("a")],
                vec![Cell::Num(2.0), Cell::Num(3.5), Cell::Null],
            ],
        );
        let b = Digest::from_rows(
            &["x", "s"],
            vec![vec![Cell::Num(3.5), Cell::Null], vec![Cell::Num(2.0), Cell::Text("a")]],
        );
        assert_eq!(a.agrees(&b, Check::Full), Ok(()));
        let c = Digest::from_rows(&["x", "s"], vec![vec![Cell::Num(2.0), Cell::Text("b")]]);
        assert!(a.agrees(&c, Check::Full).is_err());
        assert!(a.agrees(&c, Check::Rows).is_err());
        let d = Digest::from_rows(
            &["x", "s"],
            vec![vec![Cell::Num(2.0), Cell::Text("b")], vec![Cell::Num(3.5), Cell::Text("c")]],
        );
        assert_eq!(a.agrees(&d, Check::Rows), Ok(()));
        assert_eq!(a.agrees(&d, Check::Cols(&[0])), Ok(()));
        assert!(a.agrees(&d, Check::Cols(&[1])).is_err());
        assert_eq!(a.agrees(&d, Check::None), Ok(()));
    }

    #[test]
    fn float_sums_agree_within_tolerance_only() {
        let x = Digest::scalar(1e6 + 1e-7);
        assert_eq!(Digest::scalar(1e6).agrees(&x, Check::Full), Ok(()));
        assert!(Digest::scalar(1e6).agrees(&Digest::scalar(1e6 + 1.0), Check::Full).is_err());
        let y = Digest::scalar(25.5075 + 5e-7);
        assert!(Digest::scalar(25.5075).agrees(&y, Check::Full).is_err());
        assert_eq!(Digest::scalar(25.5075).agrees(&y, Check::Near), Ok(()));
        assert!(Digest::scalar(25.5075).agrees(&Digest::scalar(25.51), Check::Near).is_err());
        // Four averages rounded to 6 decimals against the same in doubles.
        let rounded = Digest::scalar(0.197597);
        assert_eq!(rounded.agrees(&Digest::scalar(0.1975986), Check::Near), Ok(()));
        assert!(rounded.agrees(&Digest::scalar(0.19765), Check::Near).is_err());
    }
}
