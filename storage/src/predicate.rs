//! The DataFusion-free predicate: what SQL pushdown, fused kernels, filtered vector
//! search, update/delete by predicate and memory filters all hand to storage.
//!
//! A [`Predicate`] is a tree of comparisons of one column with constants (`=`, `<>`, `<`,
//! `<=`, `>`, `>=`, `IN`, `IS [NOT] NULL`, `LIKE`) combined with AND / OR / NOT,
//! with SQL's three-valued logic: a comparison with NULL is *unknown*, NOT of unknown is
//! unknown, and only rows where the whole predicate is *true* are selected.
//!
//! Evaluation works on encoded data where the encoding allows: a dictionary-encoded chunk is
//! evaluated once per dictionary entry and the per-entry result is gathered by code, so a
//! string equality over 64Ki rows with 10 distinct values compares 10 strings. Zone maps
//! (min/max, null counts) let whole row groups be skipped without reading them.
//!
//! Not supported (callers keep such filters for themselves): comparisons between two
//! columns, arithmetic, functions, LIKE with an escape character or case-insensitive,
//! comparisons of vector or nested columns.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{UInt8Type, UInt16Type, UInt32Type};
use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Decimal128Array, Float64Array, Int64Array,
    RecordBatch, StringArray, UInt64Array,
};
use arrow_buffer::BooleanBuffer;
use arrow_schema::DataType;

use crate::encoding::{StatValue, ZoneMap};
use crate::error::{Error, Result};

/// A constant in a predicate.
#[derive(Debug, Clone, PartialEq)]
pub enum Scalar {
    /// NULL (every comparison with it is unknown).
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float.
    Float(f64),
    /// Text.
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
    /// A decimal, `unscaled × 10^-scale`: compared with decimal columns of that scale only
    /// (on the unscaled values, so exactly).
    Decimal {
        /// The value times `10^scale`.
        unscaled: i128,
        /// Digits after the point.
        scale: i8,
    },
}

/// The constants of an IN list, with the lookup structure built from them the first time
/// a long list is evaluated, shared by clones: a join's key filter is evaluated on every
/// scan unit, and sorting its keys again for each would cost more than the test.
#[derive(Clone, Default)]
pub struct InValues {
    values: Vec<Scalar>,
    lookup: Arc<std::sync::OnceLock<Lookup>>,
}

impl InValues {
    fn lookup(&self) -> &Lookup {
        self.lookup.get_or_init(|| Lookup::new(&self.values))
    }
}

impl From<Vec<Scalar>> for InValues {
    fn from(values: Vec<Scalar>) -> Self {
        InValues { values, lookup: Arc::default() }
    }
}

impl FromIterator<Scalar> for InValues {
    fn from_iter<I: IntoIterator<Item = Scalar>>(iter: I) -> Self {
        Vec::from_iter(iter).into()
    }
}

impl std::ops::Deref for InValues {
    type Target = [Scalar];
    fn deref(&self) -> &[Scalar] {
        &self.values
    }
}

/// Lists are equal by their constants (the lookup is derived from them).
impl PartialEq for InValues {
    fn eq(&self, other: &Self) -> bool {
        self.values == other.values
    }
}

impl std::fmt::Debug for InValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.values.fmt(f)
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

impl CmpOp {
    /// The operator with its operands swapped: `a < b` is `b > a`.
    pub fn flipped(self) -> CmpOp {
        match self {
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::LtEq => CmpOp::GtEq,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::GtEq => CmpOp::LtEq,
            o => o,
        }
    }
}

/// The function of a [`RowFilter`]: the filter's columns and the number of rows in, one
/// boolean per row out (NULL = unknown), or the reason it failed.
pub type RowFilterFn =
    dyn Fn(&[ArrayRef], usize) -> std::result::Result<BooleanArray, String> + Send + Sync;

/// A caller's condition over some columns that storage cannot read itself — a join's
/// hash-table lookup, an expression of the query engine. Storage fetches the columns
/// (dictionary-encoded ones may come as dictionary arrays) and hands them over; zone maps
/// cannot judge it, so it never prunes a row group and never proves one matches.
#[derive(Clone)]
pub struct RowFilter {
    columns: Vec<String>,
    label: Arc<str>,
    f: Arc<RowFilterFn>,
}

impl RowFilter {
    /// A filter over `columns` (handed to `f` in that order), shown as `label`.
    pub fn new(columns: Vec<String>, label: Arc<str>, f: Arc<RowFilterFn>) -> Self {
        RowFilter { columns, label, f }
    }
}

impl std::fmt::Debug for RowFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RowFilter")
            .field("columns", &self.columns)
            .field("label", &self.label)
            .finish_non_exhaustive()
    }
}

/// Two row filters are equal when they are the same filter (one function).
impl PartialEq for RowFilter {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.f, &other.f) && self.columns == other.columns
    }
}

/// A filter over one table's columns.
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// Every row.
    True,
    /// No row.
    False,
    /// `column op value`.
    Cmp {
        /// Column name (`_id` allowed).
        column: String,
        /// Operator.
        op: CmpOp,
        /// Constant.
        value: Scalar,
    },
    /// `column [NOT] IN (values)`.
    InList {
        /// Column name.
        column: String,
        /// Constants.
        values: InValues,
        /// NOT IN.
        negated: bool,
    },
    /// `column IS [NOT] NULL`.
    IsNull {
        /// Column name.
        column: String,
        /// IS NOT NULL.
        negated: bool,
    },
    /// `column [NOT] LIKE 'prefix%'` on text or binary.
    LikePrefix {
        /// Column name.
        column: String,
        /// The literal prefix.
        prefix: String,
        /// NOT LIKE.
        negated: bool,
    },
    /// `column [NOT] LIKE 'pattern'` on text or binary: `%` matches any run of characters
    /// (bytes, for binary), `_` exactly one; every other character stands for itself (no
    /// escape character). Pure prefixes are better said with [`Predicate::LikePrefix`].
    Like {
        /// Column name.
        column: String,
        /// The pattern.
        pattern: String,
        /// NOT LIKE.
        negated: bool,
    },
    /// `_id` is one of these ids (sorted ascending, no duplicates; see
    /// [`Predicate::id_set`]) — a large set from another index, such as full-text matches.
    IdSet(Arc<[u64]>),
    /// All of them.
    And(Vec<Predicate>),
    /// Any of them.
    Or(Vec<Predicate>),
    /// The negation.
    Not(Box<Predicate>),
    /// Rows a caller's function selects (see [`RowFilter`]).
    Rows(RowFilter),
}

impl Predicate {
    /// `column = value`.
    pub fn eq(column: &str, value: impl Into<Scalar>) -> Self {
        Predicate::Cmp { column: column.into(), op: CmpOp::Eq, value: value.into() }
    }
    /// `column op value`.
    pub fn cmp(column: &str, op: CmpOp, value: impl Into<Scalar>) -> Self {
        Predicate::Cmp { column: column.into(), op, value: value.into() }
    }
    /// `_id IN ids` for any number of ids (sorted and deduplicated here).
    pub fn id_set(mut ids: Vec<u64>) -> Self {
        ids.sort_unstable();
        ids.dedup();
        Predicate::IdSet(ids.into())
    }
    /// `left AND right`, flattened: conjunctions on either side become one list, so a
    /// chain `a AND b AND c …` of any length is one level deep, not one per term (every
    /// pass over a predicate recurses per level).
    pub fn all(left: Predicate, right: Predicate) -> Self {
        let terms = |p| match p {
            Predicate::And(v) => v,
            p => vec![p],
        };
        Predicate::And([terms(left), terms(right)].concat())
    }
    /// `left OR right`, flattened as [`Predicate::all`] is.
    pub fn any(left: Predicate, right: Predicate) -> Self {
        let terms = |p| match p {
            Predicate::Or(v) => v,
            p => vec![p],
        };
        Predicate::Or([terms(left), terms(right)].concat())
    }
    /// `column BETWEEN low AND high` (inclusive).
    pub fn between(column: &str, low: impl Into<Scalar>, high: impl Into<Scalar>) -> Self {
        Predicate::And(vec![
            Predicate::cmp(column, CmpOp::GtEq, low),
            Predicate::cmp(column, CmpOp::LtEq, high),
        ])
    }

    /// `column [NOT] LIKE pattern` with `%` and `_` as wildcards: a
    /// [`Predicate::LikePrefix`] when the only wildcards end the pattern, else a
    /// [`Predicate::Like`]; `None` for a pattern with a backslash (an escape, which these
    /// predicates do not read).
    pub fn like(column: &str, pattern: &str, negated: bool) -> Option<Self> {
        if pattern.contains('\\') {
            return None;
        }
        let stem = pattern.trim_end_matches('%');
        Some(if stem.len() < pattern.len() && !stem.contains(['%', '_']) {
            Predicate::LikePrefix { column: column.into(), prefix: stem.into(), negated }
        } else {
            Predicate::Like { column: column.into(), pattern: pattern.into(), negated }
        })
    }

    /// Every column the predicate reads.
    pub fn columns(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_columns(&mut out);
        out.sort_unstable();
        out.dedup();
        out
    }

    fn collect_columns<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Predicate::True | Predicate::False => {}
            Predicate::Cmp { column, .. }
            | Predicate::InList { column, .. }
            | Predicate::IsNull { column, .. }
            | Predicate::LikePrefix { column, .. }
            | Predicate::Like { column, .. } => out.push(column),
            Predicate::IdSet(_) => out.push(crate::types::ID_COLUMN),
            Predicate::Rows(r) => out.extend(r.columns.iter().map(String::as_str)),
            Predicate::And(v) | Predicate::Or(v) => v.iter().for_each(|p| p.collect_columns(out)),
            Predicate::Not(p) => p.collect_columns(out),
        }
    }
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Null => write!(f, "NULL"),
            Scalar::Bool(v) => write!(f, "{v}"),
            Scalar::Int(v) => write!(f, "{v}"),
            Scalar::UInt(v) => write!(f, "{v}"),
            Scalar::Float(v) => write!(f, "{v:?}"),
            Scalar::Str(v) => write!(f, "'{}'", v.replace('\'', "''")),
            Scalar::Bytes(v) => {
                write!(f, "X'")?;
                v.iter().try_for_each(|b| write!(f, "{b:02x}"))?;
                write!(f, "'")
            }
            Scalar::Decimal { unscaled, scale } => write!(f, "{}", decimal_text(*unscaled, *scale)),
        }
    }
}

/// `unscaled × 10^-scale` in decimal notation (`-0.05`, `1200`).
fn decimal_text(unscaled: i128, scale: i8) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    if scale <= 0 {
        let zeros = if unscaled == 0 { 0 } else { usize::from(scale.unsigned_abs()) };
        return format!("{sign}{digits}{}", "0".repeat(zeros));
    }
    let scale = usize::from(scale.unsigned_abs());
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

impl std::fmt::Display for CmpOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CmpOp::Eq => "=",
            CmpOp::NotEq => "<>",
            CmpOp::Lt => "<",
            CmpOp::LtEq => "<=",
            CmpOp::Gt => ">",
            CmpOp::GtEq => ">=",
        })
    }
}

/// SQL-like text, for plans and error messages.
impl std::fmt::Display for Predicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let not = |n: bool| if n { "NOT " } else { "" };
        let join = |f: &mut std::fmt::Formatter<'_>, ps: &[Predicate], sep: &str| {
            write!(f, "(")?;
            for (i, p) in ps.iter().enumerate() {
                if i > 0 {
                    write!(f, " {sep} ")?;
                }
                write!(f, "{p}")?;
            }
            write!(f, ")")
        };
        match self {
            Predicate::True => write!(f, "TRUE"),
            Predicate::False => write!(f, "FALSE"),
            Predicate::Cmp { column, op, value } => write!(f, "{column} {op} {value}"),
            Predicate::InList { column, values, negated } => {
                write!(f, "{column} {}IN (", not(*negated))?;
                for (i, v) in values.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{v}")?;
                }
                write!(f, ")")
            }
            Predicate::IsNull { column, negated } => {
                write!(f, "{column} IS {}NULL", not(*negated))
            }
            Predicate::LikePrefix { column, prefix, negated } => {
                write!(f, "{column} {}LIKE {}", not(*negated), Scalar::Str(format!("{prefix}%")))
            }
            Predicate::Like { column, pattern, negated } => {
                write!(f, "{column} {}LIKE {}", not(*negated), Scalar::Str(pattern.clone()))
            }
            Predicate::IdSet(ids) => write!(f, "_id IN <{} ids>", ids.len()),
            Predicate::And(ps) => join(f, ps, "AND"),
            Predicate::Or(ps) => join(f, ps, "OR"),
            Predicate::Not(p) => write!(f, "NOT {p}"),
            Predicate::Rows(r) => write!(f, "{}", r.label),
        }
    }
}

macro_rules! scalar_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for Scalar {
            fn from(v: $t) -> Self { Scalar::$v(v.into()) }
        }
    )*};
}
scalar_from!(bool => Bool, i8 => Int, i16 => Int, i32 => Int, i64 => Int, u8 => UInt, u16 => UInt, u32 => UInt, u64 => UInt, f32 => Float, f64 => Float, String => Str);
impl From<&str> for Scalar {
    fn from(v: &str) -> Self {
        Scalar::Str(v.to_string())
    }
}

/// Three-valued result: rows where the predicate is definitely true / definitely false
/// (neither = unknown).
struct Tri {
    t: BooleanBuffer,
    f: BooleanBuffer,
}

impl Tri {
    fn constant(n: usize, v: bool) -> Tri {
        Tri { t: BooleanBuffer::collect_bool(n, |_| v), f: BooleanBuffer::collect_bool(n, |_| !v) }
    }
}

/// What a predicate is evaluated against: a way to fetch a column by name.
pub trait Columns {
    /// Rows.
    fn rows(&self) -> usize;
    /// The column (dictionary-encoded arrays are welcome) or an error if unknown.
    fn column(&mut self, name: &str) -> Result<ArrayRef>;
    /// The rows where integer column `name` lies in `lo..=hi` (with `scale`: decimal
    /// column `name` of that scale, its unscaled values), when the source can tell without
    /// decoding the column — and only for rows that are all non-NULL, so the other rows are
    /// where the comparison is false. `Ok(None)` (the default): decode it.
    fn int_range(
        &mut self,
        _name: &str,
        _lo: i128,
        _hi: i128,
        _scale: Option<i8>,
    ) -> Result<Option<BooleanBuffer>> {
        Ok(None)
    }
    /// Column `name` at the given rows only (ascending): what a [`RowFilter`] reads when
    /// the rest of a conjunction already ruled most rows out. By default the whole column,
    /// then those rows.
    fn column_rows(&mut self, name: &str, rows: &[usize]) -> Result<ArrayRef> {
        take_rows(&self.column(name)?, rows, name)
    }
}

/// The given rows of column `name`'s array `a`.
pub(crate) fn take_rows(a: &ArrayRef, rows: &[usize], name: &str) -> Result<ArrayRef> {
    let idx = arrow_array::UInt32Array::from_iter_values(rows.iter().map(|&r| r as u32));
    arrow_select::take::take(a.as_ref(), &idx, None)
        .map_err(|e| Error::arrow(format!("rows of column '{name}'"), e))
}

/// A conjunction evaluates a [`RowFilter`], or a leaf on one column, on the rows still
/// undecided when at most one in this many is (else on every row).
const ROW_FILTER_SPARSE: usize = 4;

/// `r` on the rows of `cols` that `undecided` selects, gathered first, with the other rows
/// neither true nor false.
fn row_filter_on(r: &RowFilter, cols: &mut dyn Columns, undecided: &BooleanBuffer) -> Result<Tri> {
    let n = cols.rows();
    let picks: Vec<usize> = undecided.set_indices().collect();
    let arrays =
        r.columns.iter().map(|c| cols.column_rows(c, &picks)).collect::<Result<Vec<_>>>()?;
    let out = call_row_filter(r, &arrays, picks.len())?;
    Ok(scatter(&tri_of(&out), &picks, n))
}

/// Whether [`gathered_on`] can evaluate `p` at some rows only: it reads columns by name
/// (no `_id` set, no row filter, which have their own paths) and reads some.
fn gatherable(p: &Predicate) -> bool {
    fn plain(p: &Predicate) -> bool {
        match p {
            Predicate::IdSet(_) | Predicate::Rows(_) => false,
            Predicate::And(v) | Predicate::Or(v) => v.iter().all(plain),
            Predicate::Not(p) => plain(p),
            _ => true,
        }
    }
    plain(p) && !p.columns().is_empty()
}

/// `p` evaluated at the `undecided` rows only, from its columns gathered at those rows
/// (decoded there only); the other rows are left unknown, which a conjunction that has
/// decided them already ignores. Used when few rows are undecided.
fn gathered_on(p: &Predicate, cols: &mut dyn Columns, undecided: &BooleanBuffer) -> Result<Tri> {
    /// Columns gathered at the picked rows.
    struct Picked<'a> {
        rows: usize,
        columns: Vec<(&'a str, ArrayRef)>,
    }
    impl Columns for Picked<'_> {
        fn rows(&self) -> usize {
            self.rows
        }
        fn column(&mut self, name: &str) -> Result<ArrayRef> {
            match self.columns.iter().find(|(c, _)| *c == name) {
                Some((_, a)) => Ok(a.clone()),
                None => {
                    Err(Error::ColumnNotFound { table: String::new(), column: name.to_string() })
                }
            }
        }
    }
    let n = cols.rows();
    let picks: Vec<usize> = undecided.set_indices().collect();
    let columns = p
        .columns()
        .into_iter()
        .map(|c| Ok((c, cols.column_rows(c, &picks)?)))
        .collect::<Result<Vec<_>>>()?;
    let part = eval(p, &mut Picked { rows: picks.len(), columns })?;
    Ok(scatter(&part, &picks, n))
}

/// `part` (one entry per pick) placed at rows `picks` of `n` rows, the others unknown.
fn scatter(part: &Tri, picks: &[usize], n: usize) -> Tri {
    let place = |bits: &BooleanBuffer| {
        let mut out = arrow_buffer::MutableBuffer::from_len_zeroed(n.div_ceil(8));
        for k in bits.set_indices() {
            arrow_buffer::bit_util::set_bit(out.as_slice_mut(), picks[k]);
        }
        BooleanBuffer::new(out.into(), 0, n)
    };
    Tri { t: place(&part.t), f: place(&part.f) }
}

/// Calls `r` on its columns, checking it answers for every row.
fn call_row_filter(r: &RowFilter, arrays: &[ArrayRef], n: usize) -> Result<BooleanArray> {
    let out = (r.f)(arrays, n).map_err(|reason| Error::InvalidInput {
        table: String::new(),
        reason: format!("row filter {}: {reason}", r.label),
    })?;
    if out.len() != n {
        return Err(Error::InvalidInput {
            table: String::new(),
            reason: format!("row filter {} gave {} rows for {n}", r.label, out.len()),
        });
    }
    Ok(out)
}

/// `column op value` for an integer `value` as a range of the column's values.
struct IntRange {
    lo: i128,
    hi: i128,
    /// The comparison is the range's complement (`<>`).
    complement: bool,
    /// For a decimal constant: its scale (the range is of unscaled values).
    scale: Option<i8>,
}

/// `column op value` as an [`IntRange`] when `value` is an integer or a decimal.
fn int_range_of(op: CmpOp, value: &Scalar) -> Option<IntRange> {
    let (x, scale) = match value {
        Scalar::Int(v) => (i128::from(*v), None),
        Scalar::UInt(v) => (i128::from(*v), None),
        Scalar::Decimal { unscaled, scale } => (*unscaled, Some(*scale)),
        _ => return None,
    };
    let (lo, hi, complement) = match op {
        CmpOp::Eq => (x, x, false),
        CmpOp::NotEq => (x, x, true),
        CmpOp::Lt => (i128::MIN, x.checked_sub(1)?, false),
        CmpOp::LtEq => (i128::MIN, x, false),
        CmpOp::Gt => (x.checked_add(1)?, i128::MAX, false),
        CmpOp::GtEq => (x, i128::MAX, false),
    };
    Some(IntRange { lo, hi, complement, scale })
}

impl Columns for RecordBatch {
    fn rows(&self) -> usize {
        self.num_rows()
    }
    fn column(&mut self, name: &str) -> Result<ArrayRef> {
        self.column_by_name(name)
            .cloned()
            .ok_or_else(|| Error::ColumnNotFound { table: String::new(), column: name.to_string() })
    }
}

/// Evaluates `p`: the rows where it is true.
pub fn evaluate(p: &Predicate, cols: &mut dyn Columns) -> Result<BooleanBuffer> {
    Ok(match p {
        Predicate::And(ps) => eval_and(ps, cols, true)?.t,
        p => eval(p, cols)?.t,
    })
}

fn eval(p: &Predicate, cols: &mut dyn Columns) -> Result<Tri> {
    let n = cols.rows();
    Ok(match p {
        Predicate::True => Tri::constant(n, true),
        Predicate::False => Tri::constant(n, false),
        Predicate::Cmp { column, op, value } => {
            let packed = match int_range_of(*op, value) {
                Some(r) => cols
                    .int_range(column, r.lo, r.hi, r.scale)?
                    .map(|t| if r.complement { !&t } else { t }),
                None => None,
            };
            match packed {
                Some(t) => Tri { f: !&t, t },
                None => {
                    let a = cols.column(column)?;
                    leaf(&a, &|v: &ArrayRef| compare(v, *op, value, column))?
                }
            }
        }
        Predicate::InList { column, values, negated } => {
            let a = cols.column(column)?;
            let tri = leaf(&a, &|v: &ArrayRef| {
                // x IN (a, b) = x = a OR x = b, with unknown when no match and a NULL listed.
                let has_null = values.contains(&Scalar::Null);
                let t = match member_lookup(v, values) {
                    Some(t) => t,
                    None => {
                        let mut t = BooleanBuffer::new_unset(v.len());
                        for s in values.iter().filter(|s| **s != Scalar::Null) {
                            let r = compare(v, CmpOp::Eq, s, column)?;
                            t = &t | &r.t;
                        }
                        t
                    }
                };
                let valid = valid_of(v.as_ref());
                let f = if has_null { BooleanBuffer::new_unset(v.len()) } else { &valid & &!&t };
                Ok(Tri { t: &t & &valid, f })
            })?;
            if *negated { Tri { t: tri.f, f: tri.t } } else { tri }
        }
        Predicate::IdSet(ids) => {
            let a = cols.column(crate::types::ID_COLUMN)?;
            let a = a.as_any().downcast_ref::<arrow_array::UInt64Array>().ok_or_else(|| {
                Error::InvalidInput {
                    table: String::new(),
                    reason: format!("_id column is {}, not UInt64", a.data_type()),
                }
            })?;
            let t =
                BooleanBuffer::collect_bool(a.len(), |i| ids.binary_search(&a.value(i)).is_ok());
            Tri { f: !&t, t }
        }
        Predicate::Rows(r) => {
            let arrays = r.columns.iter().map(|c| cols.column(c)).collect::<Result<Vec<_>>>()?;
            tri_of(&call_row_filter(r, &arrays, n)?)
        }
        Predicate::IsNull { column, negated } => {
            let a = cols.column(column)?;
            let valid = valid_of(a.as_ref());
            if *negated { Tri { f: !&valid, t: valid } } else { Tri { t: !&valid, f: valid } }
        }
        Predicate::LikePrefix { column, prefix, negated } => {
            let a = cols.column(column)?;
            let tri = leaf(&a, &|v: &ArrayRef| {
                let r = match v.data_type() {
                    DataType::Utf8 => {
                        let pat = StringArray::new_scalar(prefix.as_str());
                        arrow_string::like::starts_with(v, &pat)
                    }
                    DataType::Binary => {
                        let pat = BinaryArray::new_scalar(prefix.as_bytes());
                        arrow_string::like::starts_with(v, &pat)
                    }
                    other => {
                        return Err(Error::InvalidInput {
                            table: String::new(),
                            reason: format!("LIKE on column '{column}' of type {other}"),
                        });
                    }
                }
                .map_err(|e| Error::arrow(format!("LIKE on column '{column}'"), e))?;
                Ok(tri_of(&r))
            })?;
            if *negated { Tri { t: tri.f, f: tri.t } } else { tri }
        }
        Predicate::Like { column, pattern, negated } => {
            let a = cols.column(column)?;
            let pat = LikePattern::new(pattern);
            let tri = leaf(&a, &|v: &ArrayRef| {
                let t = match v.data_type() {
                    DataType::Utf8 => {
                        let s = v.as_string::<i32>();
                        pat.select(s.value_offsets(), s.value_data(), true)
                    }
                    DataType::Binary => {
                        let b = v.as_binary::<i32>();
                        pat.select(b.value_offsets(), b.value_data(), false)
                    }
                    other => {
                        return Err(Error::InvalidInput {
                            table: String::new(),
                            reason: format!("LIKE on column '{column}' of type {other}"),
                        });
                    }
                };
                let valid = valid_of(v.as_ref());
                Ok(Tri { f: &!&t & &valid, t: &t & &valid })
            })?;
            if *negated { Tri { t: tri.f, f: tri.t } } else { tri }
        }
        Predicate::And(ps) => eval_and(ps, cols, false)?,
        Predicate::Or(ps) => {
            let mut acc = Tri::constant(n, false);
            for p in ps {
                let r = eval(p, cols)?;
                acc = Tri { t: &acc.t | &r.t, f: &acc.f & &r.f };
            }
            acc
        }
        Predicate::Not(p) => {
            let r = eval(p, cols)?;
            Tri { t: r.f, f: r.t }
        }
    })
}

/// A conjunction. `positive`: only the rows where it is true matter (the predicate's root,
/// or conjunctions directly under it), so a row filter need not decide rows the rest left
/// unknown, and the result's false rows are not meaningful.
fn eval_and(ps: &[Predicate], cols: &mut dyn Columns, positive: bool) -> Result<Tri> {
    let n = cols.rows();
    let mut acc = Tri::constant(n, true);
    let mut done = vec![false; ps.len()];
    // Integer bounds on one column (`BETWEEN`, `a >= x AND a < y`) as one range,
    // answered in one pass over the packed values where the source can.
    for i in 0..ps.len() {
        let Predicate::Cmp { column, op, value } = &ps[i] else { continue };
        let Some(IntRange { mut lo, mut hi, complement: false, scale }) = int_range_of(*op, value)
        else {
            continue;
        };
        if done[i] {
            continue;
        }
        let mut group = vec![i];
        for (j, q) in ps.iter().enumerate().skip(i + 1) {
            if let Predicate::Cmp { column: c, op, value } = q
                && c == column
                && !done[j]
                && let Some(r) = int_range_of(*op, value)
                && !r.complement
                && r.scale == scale
            {
                (lo, hi) = (lo.max(r.lo), hi.min(r.hi));
                group.push(j);
            }
        }
        if group.len() > 1
            && let Some(t) = cols.int_range(column, lo, hi, scale)?
        {
            group.iter().for_each(|&g| done[g] = true);
            acc = Tri { f: &acc.f | &!&t, t: &acc.t & &t };
        }
    }
    // Leaves first, then row filters, then disjunctions and negations (each costs several
    // leaves): a later one runs only on the rows the earlier left undecided when few are
    // (its columns then gathered at those rows, not decoded whole).
    let rest = ps.iter().zip(&done).filter(|(_, d)| !**d).map(|(p, _)| p);
    let (filters, others): (Vec<&Predicate>, Vec<&Predicate>) =
        rest.partition(|p| matches!(p, Predicate::Rows(_)));
    let (composite, leaves): (Vec<&Predicate>, Vec<&Predicate>) =
        others.into_iter().partition(|p| matches!(p, Predicate::Or(_) | Predicate::Not(_)));
    for p in leaves.into_iter().chain(filters).chain(composite) {
        let undecided = if positive { acc.t.clone() } else { !&acc.f };
        if undecided.count_set_bits() == 0 {
            // Every row decided false already: the rest cannot change the answer.
            break;
        }
        let sparse = undecided.count_set_bits() * ROW_FILTER_SPARSE <= n;
        let r = match p {
            Predicate::Rows(r) if sparse => row_filter_on(r, cols, &undecided)?,
            Predicate::And(qs) => eval_and(qs, cols, positive)?,
            p if sparse && gatherable(p) => gathered_on(p, cols, &undecided)?,
            p => eval(p, cols)?,
        };
        acc = Tri { t: &acc.t & &r.t, f: &acc.f | &r.f };
    }
    Ok(acc)
}

/// A compiled LIKE pattern (no escape character).
#[derive(Debug)]
struct LikePattern {
    toks: Vec<LikeTok>,
    /// Set when the pattern has no `_`: literals found with substring search.
    percent: Option<Percent>,
}

/// A LIKE pattern of literals and `%` only: `prefix%m1%m2%…%suffix`, each part optional.
/// A row matches when it starts with the prefix, ends with the suffix (not overlapping it)
/// and holds the middle literals in order in between (taking each at its first occurrence
/// loses no match, as `%` absorbs anything between them).
#[derive(Debug)]
struct Percent {
    /// The pattern is one literal: the row must equal it.
    exact: bool,
    prefix: Vec<u8>,
    suffix: Vec<u8>,
    middle: Vec<memchr::memmem::Finder<'static>>,
}

impl Percent {
    fn new(toks: &[LikeTok]) -> Option<Percent> {
        let mut lits = Vec::new();
        for t in toks {
            match t {
                LikeTok::Lit(l) => lits.push(l.clone()),
                LikeTok::Many => {}
                LikeTok::One => return None,
            }
        }
        if !toks.iter().any(|t| matches!(t, LikeTok::Many)) {
            // No wildcard at all (`''` included): the row must equal the literal.
            let prefix = lits.concat();
            return Some(Percent { exact: true, prefix, suffix: Vec::new(), middle: Vec::new() });
        }
        let anchored_start = matches!(toks.first(), Some(LikeTok::Lit(_)));
        let anchored_end = matches!(toks.last(), Some(LikeTok::Lit(_)));
        let suffix = if anchored_end { lits.pop().unwrap_or_default() } else { Vec::new() };
        let prefix = if anchored_start && !lits.is_empty() { lits.remove(0) } else { Vec::new() };
        let middle =
            lits.iter().map(|l| memchr::memmem::Finder::new(l.as_slice()).into_owned()).collect();
        Some(Percent { exact: false, prefix, suffix, middle })
    }

    fn matches(&self, s: &[u8]) -> bool {
        if self.exact {
            return s == self.prefix.as_slice();
        }
        if !s.starts_with(&self.prefix) {
            return false;
        }
        let (mut lo, mut hi) = (self.prefix.len(), s.len());
        if hi - lo < self.suffix.len() || !s.ends_with(&self.suffix) {
            return false;
        }
        hi -= self.suffix.len();
        for f in &self.middle {
            match f.find(&s[lo..hi]) {
                Some(k) => lo += k + f.needle().len(),
                None => return false,
            }
        }
        true
    }

    /// The literal a matching row must hold somewhere, when the pattern has middle
    /// literals: the longest (fewest rows hold a long literal), and whether holding it is
    /// all the pattern asks (`%literal%`).
    fn required(&self) -> Option<(&memchr::memmem::Finder<'static>, bool)> {
        if self.exact {
            return None;
        }
        let f = self.middle.iter().max_by_key(|f| f.needle().len())?;
        let only = self.middle.len() == 1 && self.prefix.is_empty() && self.suffix.is_empty();
        Some((f, only))
    }
}

/// The rows (by `offsets` into `data`) that contain `f`'s needle, found by searching the
/// whole value buffer at once: a search per match instead of one per row, for needles most
/// rows do not hold.
fn rows_containing(offsets: &[i32], data: &[u8], f: &memchr::memmem::Finder<'_>) -> BooleanBuffer {
    let n = offsets.len().saturating_sub(1);
    let mut out = arrow_buffer::BooleanBufferBuilder::new(n);
    out.append_n(n, false);
    let at = |i: usize| offsets[i].max(0) as usize;
    if n == 0 {
        return out.finish();
    }
    let (start, end) = (at(0), at(n).min(data.len()));
    let len = f.needle().len();
    let (mut pos, mut row) = (start, 0usize);
    while pos < end {
        let Some(k) = f.find(&data[pos..end]) else { break };
        let hit = pos + k;
        // The row holding byte `hit`: the last row starting at or before it.
        row += offsets[row + 1..=n].partition_point(|&o| (o.max(0) as usize) <= hit);
        if row >= n {
            break;
        }
        if hit + len <= at(row + 1) {
            out.set_bit(row, true);
            pos = at(row + 1);
            row += 1;
        } else {
            // The match runs into the next row: look again from the next byte.
            pos = hit + 1;
        }
    }
    out.finish()
}

#[derive(Debug)]
enum LikeTok {
    /// These bytes.
    Lit(Vec<u8>),
    /// `_`: one character (one byte in binary).
    One,
    /// `%`: any run.
    Many,
}

impl LikePattern {
    fn new(pattern: &str) -> Self {
        let mut toks: Vec<LikeTok> = Vec::new();
        for c in pattern.chars() {
            match (c, toks.last_mut()) {
                ('%', Some(LikeTok::Many)) => {}
                ('%', _) => toks.push(LikeTok::Many),
                ('_', _) => toks.push(LikeTok::One),
                (c, Some(LikeTok::Lit(l))) => {
                    l.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes())
                }
                (c, _) => toks.push(LikeTok::Lit(c.encode_utf8(&mut [0; 4]).as_bytes().to_vec())),
            }
        }
        let percent = Percent::new(&toks);
        Self { toks, percent }
    }

    /// The rows (by `offsets` into `data`) the pattern matches; `utf8`: `_` steps over one
    /// UTF-8 character.
    fn select(&self, offsets: &[i32], data: &[u8], utf8: bool) -> BooleanBuffer {
        let n = offsets.len().saturating_sub(1);
        let value = |i: usize| {
            let (lo, hi) = (offsets[i].max(0) as usize, offsets[i + 1].max(0) as usize);
            data.get(lo..hi)
        };
        match &self.percent {
            Some(p) => match p.required() {
                Some((f, true)) => rows_containing(offsets, data, f),
                Some((f, false)) => {
                    // Only the rows holding the required literal can match: check those.
                    let candidates = rows_containing(offsets, data, f);
                    let mut out = arrow_buffer::BooleanBufferBuilder::new(n);
                    out.append_n(n, false);
                    for i in candidates.set_indices() {
                        if value(i).is_some_and(|s| p.matches(s)) {
                            out.set_bit(i, true);
                        }
                    }
                    out.finish()
                }
                None => BooleanBuffer::collect_bool(n, |i| value(i).is_some_and(|s| p.matches(s))),
            },
            None => {
                BooleanBuffer::collect_bool(n, |i| value(i).is_some_and(|s| self.matches(s, utf8)))
            }
        }
    }

    /// Whether `s` matches: left to right, remembering only the last `%` to retry from
    /// one character further on a mismatch (enough, as `%` absorbs anything in between).
    fn matches(&self, s: &[u8], utf8: bool) -> bool {
        let step = |i: usize| -> usize {
            let w = if utf8 {
                match s[i] {
                    b if b < 0xE0 => 1 + usize::from(b >= 0xC0),
                    b if b < 0xF0 => 3,
                    _ => 4,
                }
            } else {
                1
            };
            (i + w).min(s.len())
        };
        let (p, mut i, mut j) = (&self.toks, 0usize, 0usize);
        // (token after the last `%`, where in `s` it was last tried)
        let mut star: Option<(usize, usize)> = None;
        loop {
            let advanced = match p.get(j) {
                Some(LikeTok::Many) => {
                    if j + 1 == p.len() {
                        return true;
                    }
                    star = Some((j + 1, i));
                    j += 1;
                    true
                }
                Some(LikeTok::One) if i < s.len() => {
                    i = step(i);
                    j += 1;
                    true
                }
                Some(LikeTok::Lit(l)) if s[i..].starts_with(l) => {
                    i += l.len();
                    j += 1;
                    true
                }
                None if i == s.len() => return true,
                _ => false,
            };
            if advanced {
                continue;
            }
            match star {
                Some((sj, si)) if si < s.len() => {
                    let ni = step(si);
                    star = Some((sj, ni));
                    (i, j) = (ni, sj);
                }
                _ => return false,
            }
        }
    }
}

/// `x IN values` by one lookup per row, for long lists over integer or text columns whose
/// listed constants are all of the column's kind: a join's key filter can list hundreds
/// of keys, and a kernel per value cost rows × keys. NULL slots and NULL constants are
/// left to the caller. `None`: not such a list.
fn member_lookup(v: &ArrayRef, values: &InValues) -> Option<BooleanBuffer> {
    let n = v.len();
    if v.data_type().is_integer() {
        let Lookup::Ints(keys) = values.lookup() else { return None };
        // A constant outside the column's type is an error, as on the value-by-value path.
        let (lo, hi) = integer_range(v.data_type())?;
        let (Some(min), Some(max)) = (keys.sorted.first(), keys.sorted.last()) else {
            return None;
        };
        if *min < lo || *max > hi {
            return None;
        }
        use arrow_array::types::*;
        macro_rules! probe {
            ($form:ident, $($t:ty),*) => {$(
                if let Some(a) = v.as_primitive_opt::<$t>() {
                    let set = keys.$form.get_or_init(|| OrderedKeys::new(&keys.sorted, $form, n));
                    return Some(set.select(a.values(), |x| $form(i128::from(x))));
                }
            )*};
        }
        probe!(signed, Int64Type, Int32Type, Int16Type, Int8Type);
        probe!(unsigned, UInt64Type, UInt32Type, UInt16Type, UInt8Type);
        return None;
    }
    if matches!(v.data_type(), DataType::Utf8) {
        let Lookup::Strs(keys) = values.lookup() else { return None };
        let strings = v.as_string::<i32>();
        return Some(BooleanBuffer::collect_bool(n, |i| {
            keys.binary_search_by(|k| k.as_str().cmp(strings.value(i))).is_ok()
        }));
    }
    None
}

/// Lists shorter than this compare value by value (one vectorised kernel per value).
const LOOKUP_FROM: usize = 8;

/// An IN list's non-NULL constants prepared for one lookup a row.
enum Lookup {
    /// Not a long list of integers only or of text only.
    None,
    Ints(IntKeys),
    /// Sorted, no duplicates.
    Strs(Vec<String>),
}

impl Lookup {
    fn new(values: &[Scalar]) -> Lookup {
        let listed = || values.iter().filter(|s| **s != Scalar::Null);
        if listed().count() < LOOKUP_FROM {
            return Lookup::None;
        }
        let ints: Option<Vec<i128>> = listed()
            .map(|s| match s {
                Scalar::Int(x) => Some(i128::from(*x)),
                Scalar::UInt(x) => Some(i128::from(*x)),
                _ => None,
            })
            .collect();
        if let Some(mut sorted) = ints {
            sorted.sort_unstable();
            sorted.dedup();
            return Lookup::Ints(IntKeys {
                sorted,
                signed: Default::default(),
                unsigned: Default::default(),
            });
        }
        let strs: Option<Vec<String>> = listed()
            .map(|s| match s {
                Scalar::Str(x) => Some(x.clone()),
                _ => None,
            })
            .collect();
        match strs {
            Some(mut keys) => {
                keys.sort_unstable();
                keys.dedup();
                Lookup::Strs(keys)
            }
            None => Lookup::None,
        }
    }
}

/// Integer keys, with the set rows are tested against built for signed and for unsigned
/// columns when first needed (rows then carry no 128-bit arithmetic).
struct IntKeys {
    /// Sorted, no duplicates, at least one.
    sorted: Vec<i128>,
    signed: std::sync::OnceLock<OrderedKeys>,
    unsigned: std::sync::OnceLock<OrderedKeys>,
}

/// `x` of a signed column as a `u64` in the same order (sign bit flipped).
fn signed(x: i128) -> u64 {
    (x as i64 as u64) ^ (1 << 63)
}

/// `x` of an unsigned column as a `u64`.
fn unsigned(x: i128) -> u64 {
    x as u64
}

/// Keys mapped to `u64` in order, as a bitmap over their range when that range is small
/// next to the keys or the rows to test ([`BITMAP_BITS_PER_KEY`], [`BITMAP_BITS_PER_ROW`];
/// one load a row, whatever the number of keys — a join's build keys are often dense),
/// else sorted and searched.
enum OrderedKeys {
    /// Bit `k - min` set for each key `k`.
    Bitmap { min: u64, bits: Vec<u64> },
    /// Sorted, no duplicates.
    Sorted(Vec<u64>),
}

/// Bits of bitmap a key, or a row tested, may cost before [`OrderedKeys`] searches a sorted
/// list instead; never more than [`BITMAP_MAX_BITS`].
const BITMAP_BITS_PER_KEY: u64 = 1024;
const BITMAP_BITS_PER_ROW: u64 = 32;
const BITMAP_MAX_BITS: u64 = 1 << 26;

impl OrderedKeys {
    /// The set of `sorted` keys (each within the column's type) mapped by `form`, to test
    /// `rows` rows against.
    fn new(sorted: &[i128], form: fn(i128) -> u64, rows: usize) -> OrderedKeys {
        let keys: Vec<u64> = sorted.iter().map(|&k| form(k)).collect();
        let (Some(&min), Some(&max)) = (keys.first(), keys.last()) else {
            return OrderedKeys::Sorted(keys);
        };
        let budget = (keys.len() as u64)
            .saturating_mul(BITMAP_BITS_PER_KEY)
            .max((rows as u64).saturating_mul(BITMAP_BITS_PER_ROW))
            .clamp(1 << 16, BITMAP_MAX_BITS);
        // max - min + 1 <= budget, without overflow at the full u64 range.
        if max - min < budget {
            let mut bits = vec![0u64; ((max - min) as usize + 1).div_ceil(64)];
            for k in &keys {
                let o = (k - min) as usize;
                bits[o / 64] |= 1 << (o % 64);
            }
            return OrderedKeys::Bitmap { min, bits };
        }
        OrderedKeys::Sorted(keys)
    }

    /// Which of `vals` are keys, each mapped by `form` (the one the set was built with).
    fn select<T: Copy>(&self, vals: &[T], form: impl Fn(T) -> u64) -> BooleanBuffer {
        match self {
            OrderedKeys::Bitmap { min, bits } => {
                // Values below `min` wrap to offsets past the bitmap's end; `form` is one to
                // one, so an offset inside it is a key's only when the value is that key.
                let end = bits.len() as u64 * 64;
                BooleanBuffer::collect_bool(vals.len(), |i| {
                    let o = form(vals[i]).wrapping_sub(*min);
                    o < end && bits[(o / 64) as usize] >> (o % 64) & 1 == 1
                })
            }
            OrderedKeys::Sorted(keys) => BooleanBuffer::collect_bool(vals.len(), |i| {
                keys.binary_search(&form(vals[i])).is_ok()
            }),
        }
    }
}

/// The values an integer type holds.
fn integer_range(t: &DataType) -> Option<(i128, i128)> {
    Some(match t {
        DataType::Int8 => (i8::MIN.into(), i8::MAX.into()),
        DataType::Int16 => (i16::MIN.into(), i16::MAX.into()),
        DataType::Int32 => (i32::MIN.into(), i32::MAX.into()),
        DataType::Int64 => (i64::MIN.into(), i64::MAX.into()),
        DataType::UInt8 => (0, u8::MAX.into()),
        DataType::UInt16 => (0, u16::MAX.into()),
        DataType::UInt32 => (0, u32::MAX.into()),
        DataType::UInt64 => (0, u64::MAX.into()),
        _ => return None,
    })
}

fn valid_of(a: &dyn Array) -> BooleanBuffer {
    match a.logical_nulls() {
        Some(n) => n.inner().clone(),
        None => BooleanBuffer::new_set(a.len()),
    }
}

fn tri_of(r: &BooleanArray) -> Tri {
    let valid = valid_of(r);
    let v = r.values();
    Tri { t: v & &valid, f: &!v & &valid }
}

/// Evaluates a leaf on a column. Dictionary columns are evaluated once per dictionary
/// entry, and the per-entry results gathered by code.
fn leaf(a: &ArrayRef, f: &dyn Fn(&ArrayRef) -> Result<Tri>) -> Result<Tri> {
    if let Some(d) = a.as_any_dictionary_opt() {
        let per_entry = f(d.values())?;
        // Each dictionary entry's answer: bit 0 true, bit 1 false.
        let tab: Vec<u8> = per_entry
            .t
            .iter()
            .zip(per_entry.f.iter())
            .map(|(t, f)| u8::from(t) | (u8::from(f) << 1))
            .collect();
        let by_code = match a.data_type() {
            DataType::Dictionary(k, _) => match k.as_ref() {
                DataType::UInt8 => {
                    let codes = a.as_dictionary::<UInt8Type>().keys().values();
                    match few_codes(&tab) {
                        // One or two entries on one side, every other on the other: compare
                        // codes (vectorised) instead of a table lookup per row.
                        Some((side, x, y)) => {
                            let hit = codes_in(codes, x, y);
                            let miss = !&hit;
                            Some(if side {
                                Tri { t: hit, f: miss }
                            } else {
                                Tri { t: miss, f: hit }
                            })
                        }
                        None => {
                            // A full table: a u8 code indexes it without a bounds check.
                            let mut full = [0u8; 256];
                            full[..tab.len().min(256)].copy_from_slice(&tab[..tab.len().min(256)]);
                            Some(gather_by_code(codes.len(), |i| full[usize::from(codes[i])]))
                        }
                    }
                }
                DataType::UInt16 => {
                    let codes = a.as_dictionary::<UInt16Type>().keys().values();
                    let at = |i: usize| tab.get(usize::from(codes[i])).copied().unwrap_or(0);
                    Some(gather_by_code(codes.len(), at))
                }
                DataType::UInt32 => {
                    let codes = a.as_dictionary::<UInt32Type>().keys().values();
                    let at = |i: usize| tab.get(codes[i] as usize).copied().unwrap_or(0);
                    Some(gather_by_code(codes.len(), at))
                }
                _ => None,
            },
            _ => None,
        };
        if let Some(Tri { t, f }) = by_code {
            // Null keys (NULL rows) are neither true nor false.
            return Ok(match a.logical_nulls() {
                Some(n) => Tri { t: &t & n.inner(), f: &f & n.inner() },
                None => Tri { t, f },
            });
        }
        let t = BooleanArray::new(per_entry.t, None);
        let fa = BooleanArray::new(per_entry.f, None);
        let keys = d.keys();
        let gather = |x: &BooleanArray| -> Result<BooleanBuffer> {
            let g = arrow_select::take::take(x, keys, None)
                .map_err(|e| Error::arrow("gather by code", e))?;
            let g = g.as_boolean();
            // Null keys (NULL rows) are neither true nor false.
            Ok(g.values() & &valid_of(g))
        };
        return Ok(Tri { t: gather(&t)?, f: gather(&fa)? });
    }
    f(a)
}

/// When every dictionary entry's answer (`tab`: bit 0 true, bit 1 false) is decided and
/// one side holds at most two entries: that side (true: the true side) and its codes (one
/// entry: its code twice; none: a code past the dictionary, which no valid row holds).
/// `None` otherwise.
fn few_codes(tab: &[u8]) -> Option<(bool, u8, u8)> {
    if tab.is_empty() || tab.len() > 256 || tab.iter().any(|&e| e != 1 && e != 2) {
        return None;
    }
    let of = |want: u8| -> Vec<u8> {
        tab.iter().enumerate().filter(|(_, e)| **e == want).map(|(c, _)| c as u8).collect()
    };
    let (t, f) = (of(1), of(2));
    let (side, few) = if t.len() <= f.len() { (true, t) } else { (false, f) };
    match few[..] {
        // Nothing on the smaller side: compare with a code past the dictionary, which no
        // valid row holds (Arrow checks dictionary keys; Basalt's decoder proves them).
        [] if tab.len() < 256 => Some((side, tab.len() as u8, tab.len() as u8)),
        [x] => Some((side, x, x)),
        [x, y] => Some((side, x, y)),
        _ => None,
    }
}

/// The rows whose code is `x` or `y`, 64 rows to a word. Eight codes at a time in a
/// `u64` (SWAR): a byte equal to the code becomes zero under XOR, an exact zero-byte test
/// marks it with its high bit, and one multiplication gathers the eight marks into eight
/// bits. (A per-row loop compiled to byte-wise SSE2 shuffles at 3 cycles a row.)
fn codes_in(codes: &[u8], x: u8, y: u8) -> BooleanBuffer {
    const LOW: u64 = 0x0101_0101_0101_0101;
    const SEVEN: u64 = 0x7F7F_7F7F_7F7F_7F7F;
    /// 0x80 in each byte of `v` that is zero, 0 in the others (no false positives).
    fn zero_bytes(v: u64) -> u64 {
        !(((v & SEVEN).wrapping_add(SEVEN)) | v | SEVEN)
    }
    /// Bit `i` set when byte `i` of `marks` (0x80 or 0) is set.
    fn gather(marks: u64) -> u64 {
        ((marks >> 7).wrapping_mul(0x0102_0408_1020_4080)) >> 56
    }
    let (bx, by) = (LOW * u64::from(x), LOW * u64::from(y));
    let marks = |v: u64| gather(zero_bytes(v ^ bx) | zero_bytes(v ^ by));
    let n = codes.len();
    let mut words = vec![0u64; n.div_ceil(64)];
    let groups = codes.chunks_exact(8);
    let rest = groups.remainder();
    for (g, b) in groups.enumerate() {
        let Ok(b) = <[u8; 8]>::try_from(b) else { continue };
        words[g / 8] |= marks(u64::from_le_bytes(b)) << (8 * (g % 8));
    }
    if !rest.is_empty() {
        // The padding bytes are zero and may equal a code: only the rest's bits count.
        let mut b = [0u8; 8];
        b[..rest.len()].copy_from_slice(rest);
        let g = n / 8;
        let keep = (1u64 << rest.len()) - 1;
        words[g / 8] |= (marks(u64::from_le_bytes(b)) & keep) << (8 * (g % 8));
    }
    BooleanBuffer::new(arrow_buffer::Buffer::from_vec(words), 0, n)
}

/// The true and false bitmaps of `n` rows whose answers `at(row)` gives (bit 0 true,
/// bit 1 false), packed 64 rows to a word.
fn gather_by_code(n: usize, at: impl Fn(usize) -> u8) -> Tri {
    let words = n.div_ceil(64);
    let mut t = Vec::with_capacity(words);
    let mut f = Vec::with_capacity(words);
    for w in 0..words {
        let (mut wt, mut wf) = (0u64, 0u64);
        for i in 0..(n - w * 64).min(64) {
            let e = u64::from(at(w * 64 + i));
            wt |= (e & 1) << i;
            wf |= ((e >> 1) & 1) << i;
        }
        t.push(wt);
        f.push(wf);
    }
    let bits = |v: Vec<u64>| BooleanBuffer::new(arrow_buffer::Buffer::from_vec(v), 0, n);
    Tri { t: bits(t), f: bits(f) }
}

/// A one-element array of the constant, in a type comparable with `target`.
pub(crate) fn scalar_array(
    s: &Scalar,
    target: &DataType,
    column: &str,
) -> Result<Option<ArrayRef>> {
    let natural: ArrayRef = match s {
        Scalar::Null => return Ok(None),
        Scalar::Bool(v) => Arc::new(BooleanArray::from(vec![*v])),
        Scalar::Int(v) => Arc::new(Int64Array::from(vec![*v])),
        Scalar::UInt(v) => Arc::new(UInt64Array::from(vec![*v])),
        Scalar::Float(v) => Arc::new(Float64Array::from(vec![*v])),
        Scalar::Str(v) => Arc::new(StringArray::from(vec![v.as_str()])),
        Scalar::Bytes(v) => Arc::new(BinaryArray::from(vec![v.as_slice()])),
        Scalar::Decimal { unscaled, scale } => {
            return match target {
                DataType::Decimal128(p, s) if s == scale => {
                    let a = Decimal128Array::from(vec![*unscaled])
                        .with_precision_and_scale(*p, *s)
                        .map_err(|e| Error::arrow(format!("constant for column '{column}'"), e))?;
                    Ok(Some(Arc::new(a)))
                }
                _ => Err(Error::TypeMismatch {
                    table: String::new(),
                    column: column.to_string(),
                    expected: target.clone(),
                    found: format!("{s:?}"),
                }),
            };
        }
    };
    let ok = match (s, target) {
        (Scalar::Bool(_), DataType::Boolean) => true,
        (Scalar::Int(_) | Scalar::UInt(_), t) => {
            t.is_integer() || t.is_floating() || t.is_temporal()
        }
        (Scalar::Float(_), t) => t.is_floating(),
        (Scalar::Str(_), DataType::Utf8 | DataType::Binary) => true,
        (Scalar::Bytes(_), DataType::Binary) => true,
        _ => false,
    };
    if !ok {
        return Err(Error::TypeMismatch {
            table: String::new(),
            column: column.to_string(),
            expected: target.clone(),
            found: format!("{s:?}"),
        });
    }
    let opts = arrow_cast::CastOptions { safe: false, ..Default::default() };
    arrow_cast::cast_with_options(&natural, target, &opts).map(Some).map_err(|_| {
        Error::InvalidInput {
            table: String::new(),
            reason: format!(
                "constant {s:?} is out of range for column '{column}' of type {target}"
            ),
        }
    })
}

fn compare(v: &ArrayRef, op: CmpOp, s: &Scalar, column: &str) -> Result<Tri> {
    let Some(c) = scalar_array(s, v.data_type(), column)? else {
        // Comparison with NULL: unknown everywhere.
        let n = v.len();
        return Ok(Tri { t: BooleanBuffer::new_unset(n), f: BooleanBuffer::new_unset(n) });
    };
    let c = arrow_array::Scalar::new(c);
    let r = match op {
        CmpOp::Eq => arrow_ord::cmp::eq(v, &c),
        CmpOp::NotEq => arrow_ord::cmp::neq(v, &c),
        CmpOp::Lt => arrow_ord::cmp::lt(v, &c),
        CmpOp::LtEq => arrow_ord::cmp::lt_eq(v, &c),
        CmpOp::Gt => arrow_ord::cmp::gt(v, &c),
        CmpOp::GtEq => arrow_ord::cmp::gt_eq(v, &c),
    }
    .map_err(|e| Error::arrow(format!("compare column '{column}'"), e))?;
    Ok(tri_of(&r))
}

/// What is known about a chunk without reading it.
#[derive(Debug, Clone, Copy)]
pub struct ChunkStats<'a> {
    /// Min/max of the non-null values.
    pub zone_map: Option<&'a ZoneMap>,
    /// Null rows.
    pub null_count: u64,
    /// All rows.
    pub rows: u64,
    /// The column is float32: evaluation rounds a constant to `f32` before comparing
    /// (so must the zone maps).
    pub float32: bool,
}

impl ChunkStats<'_> {
    /// The constant as the chunk's values are compared with it: rounded to `f32` for a
    /// float32 column, as evaluation casts it.
    fn constant<'v>(&self, v: &'v Scalar) -> std::borrow::Cow<'v, Scalar> {
        use std::borrow::Cow;
        match (self.float32, v) {
            (true, Scalar::Float(x)) => Cow::Owned(Scalar::Float(f64::from(*x as f32))),
            (true, Scalar::Int(x)) => Cow::Owned(Scalar::Float(f64::from(*x as f32))),
            (true, Scalar::UInt(x)) => Cow::Owned(Scalar::Float(f64::from(*x as f32))),
            _ => Cow::Borrowed(v),
        }
    }
}

/// Whether any row of a row group can satisfy `p`, judging by chunk statistics
/// (`stats(column)`; `None` = unknown). False means the row group can be skipped.
pub fn may_match<'a>(p: &Predicate, stats: &dyn Fn(&str) -> Option<ChunkStats<'a>>) -> bool {
    match p {
        Predicate::False => false,
        Predicate::True => true,
        Predicate::And(ps) => ps.iter().all(|p| may_match(p, stats)),
        Predicate::Or(ps) => ps.iter().any(|p| may_match(p, stats)),
        Predicate::Not(_) => true,
        Predicate::IsNull { column, negated } => match stats(column) {
            Some(s) if !negated => s.null_count > 0,
            Some(s) => s.null_count < s.rows,
            None => true,
        },
        Predicate::Cmp { column, op, value } => match stats(column) {
            Some(s) if s.null_count == s.rows => false,
            Some(s @ ChunkStats { zone_map: Some(z), .. }) => {
                range_may_match(z, *op, &s.constant(value))
            }
            _ => *value != Scalar::Null,
        },
        Predicate::InList { column, values, negated: false } => match stats(column) {
            Some(s) if s.null_count == s.rows => false,
            Some(s @ ChunkStats { zone_map: Some(z), .. }) => {
                values.iter().any(|v| range_may_match(z, CmpOp::Eq, &s.constant(v)))
            }
            _ => true,
        },
        Predicate::IdSet(ids) => match stats(crate::types::ID_COLUMN) {
            Some(ChunkStats {
                zone_map: Some(ZoneMap { min: StatValue::UInt(lo), max: StatValue::UInt(hi) }),
                ..
            }) => {
                let first = ids.partition_point(|x| x < lo);
                ids.get(first).is_some_and(|x| x <= hi)
            }
            _ => !ids.is_empty(),
        },
        Predicate::InList { .. }
        | Predicate::LikePrefix { .. }
        | Predicate::Like { .. }
        | Predicate::Rows(_) => true,
    }
}

/// How a zone-map bound compares with a constant (`None`: not comparable).
fn stat_cmp(b: &StatValue, v: &Scalar) -> Option<std::cmp::Ordering> {
    match (b, v) {
        (StatValue::Int(x), Scalar::Int(y)) => Some(x.cmp(y)),
        (StatValue::Int(x), Scalar::UInt(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        (StatValue::UInt(x), Scalar::UInt(y)) => Some(x.cmp(y)),
        (StatValue::UInt(x), Scalar::Int(y)) => Some(i128::from(*x).cmp(&i128::from(*y))),
        // Floats in total order, as the zone maps keep them and Arrow compares them.
        (StatValue::Float(x), Scalar::Float(y)) => Some(x.total_cmp(y)),
        (StatValue::Float(x), Scalar::Int(y)) => Some(x.total_cmp(&(*y as f64))),
        (StatValue::UInt(x), Scalar::Bool(y)) => Some(x.cmp(&u64::from(*y))),
        (StatValue::Bytes(x), Scalar::Str(y)) => Some(x.as_slice().cmp(y.as_bytes())),
        (StatValue::Bytes(x), Scalar::Bytes(y)) => Some(x.as_slice().cmp(y.as_slice())),
        // A decimal column's zone map holds unscaled values at the column's scale, which a
        // decimal constant has (evaluation rejects any other).
        (StatValue::Decimal(x), Scalar::Decimal { unscaled, .. }) => Some(x.cmp(unscaled)),
        _ => None,
    }
}

fn range_may_match(z: &ZoneMap, op: CmpOp, v: &Scalar) -> bool {
    use std::cmp::Ordering::*;
    if *v == Scalar::Null {
        return false;
    }
    let (Some(lo), Some(hi)) = (stat_cmp(&z.min, v), stat_cmp(&z.max, v)) else { return true };
    match op {
        CmpOp::Eq => lo != Greater && hi != Less,
        CmpOp::NotEq => !(lo == Equal && hi == Equal),
        CmpOp::Lt => lo == Less,
        CmpOp::LtEq => lo != Greater,
        CmpOp::Gt => hi == Greater,
        CmpOp::GtEq => hi != Less,
    }
}

/// Whether every row of a row group satisfies `p` (is *true*, not unknown), judging by
/// chunk statistics as [`may_match`] does. True means the predicate need not be evaluated
/// there: every row is selected. False proves nothing.
pub fn must_match<'a>(p: &Predicate, stats: &dyn Fn(&str) -> Option<ChunkStats<'a>>) -> bool {
    // Non-null rows whose values all lie in a known range.
    let range = |column: &str| match stats(column) {
        Some(s @ ChunkStats { zone_map: Some(z), null_count: 0, .. }) => Some((z, s)),
        _ => None,
    };
    match p {
        Predicate::True => true,
        Predicate::False => false,
        Predicate::And(ps) => ps.iter().all(|p| must_match(p, stats)),
        Predicate::Or(ps) => ps.iter().any(|p| must_match(p, stats)),
        Predicate::IsNull { column, negated } => match stats(column) {
            Some(s) if !negated => s.null_count == s.rows,
            Some(s) => s.null_count == 0,
            None => false,
        },
        Predicate::Cmp { column, op, value } => {
            range(column).is_some_and(|(z, s)| range_must_match(z, *op, &s.constant(value)))
        }
        Predicate::InList { column, values, negated } => range(column).is_some_and(|(z, s)| {
            if *negated {
                values
                    .iter()
                    .all(|v| *v != Scalar::Null && !range_may_match(z, CmpOp::Eq, &s.constant(v)))
            } else {
                values.iter().any(|v| range_must_match(z, CmpOp::Eq, &s.constant(v)))
            }
        }),
        // Values sharing the prefix form one run in byte order: when the smallest and the
        // largest both start with it, every value between them does.
        Predicate::LikePrefix { column, prefix, negated: false } => {
            range(column).is_some_and(|(z, _)| match (&z.min, &z.max) {
                (StatValue::Bytes(lo), StatValue::Bytes(hi)) => {
                    lo.starts_with(prefix.as_bytes()) && hi.starts_with(prefix.as_bytes())
                }
                _ => false,
            })
        }
        Predicate::Not(_)
        | Predicate::LikePrefix { .. }
        | Predicate::Like { .. }
        | Predicate::IdSet(_)
        | Predicate::Rows(_) => false,
    }
}

/// Whether every value in `z`'s range satisfies `value op v`.
fn range_must_match(z: &ZoneMap, op: CmpOp, v: &Scalar) -> bool {
    use std::cmp::Ordering::*;
    let (Some(lo), Some(hi)) = (stat_cmp(&z.min, v), stat_cmp(&z.max, v)) else { return false };
    match op {
        CmpOp::Eq => lo == Equal && hi == Equal,
        CmpOp::NotEq => lo == Greater || hi == Less,
        CmpOp::Lt => hi == Less,
        CmpOp::LtEq => hi != Greater,
        CmpOp::Gt => lo == Greater,
        CmpOp::GtEq => lo != Less,
    }
}

#[cfg(test)]
mod tests {
    use arrow_schema::{Field, Schema};
    use proptest::prelude::*;

    use super::*;

    type Row = (Option<i64>, Option<String>);

    /// Reference three-valued evaluation on one row: Some(bool) or None (unknown).
    fn reference(p: &Predicate, r: &Row) -> Option<bool> {
        let get = |c: &str| -> Option<Scalar> {
            match c {
                "n" => r.0.map(Scalar::Int),
                _ => r.1.clone().map(Scalar::Str),
            }
        };
        let cmp = |a: &Scalar, b: &Scalar| -> Option<std::cmp::Ordering> {
            match (a, b) {
                (Scalar::Int(x), Scalar::Int(y)) => Some(x.cmp(y)),
                (Scalar::Str(x), Scalar::Str(y)) => Some(x.cmp(y)),
                _ => None,
            }
        };
        match p {
            Predicate::True => Some(true),
            Predicate::False => Some(false),
            Predicate::Cmp { column, op, value } => {
                let o = cmp(&get(column)?, value)?;
                Some(match op {
                    CmpOp::Eq => o.is_eq(),
                    CmpOp::NotEq => o.is_ne(),
                    CmpOp::Lt => o.is_lt(),
                    CmpOp::LtEq => o.is_le(),
                    CmpOp::Gt => o.is_gt(),
                    CmpOp::GtEq => o.is_ge(),
                })
            }
            Predicate::InList { column, values, negated } => {
                let v = get(column)?;
                let hit = values.iter().any(|x| cmp(&v, x).is_some_and(|o| o.is_eq()));
                let r = if hit {
                    Some(true)
                } else if values.contains(&Scalar::Null) {
                    None
                } else {
                    Some(false)
                };
                r.map(|b| b != *negated)
            }
            Predicate::IdSet(ids) => match get(crate::types::ID_COLUMN)? {
                Scalar::UInt(v) => Some(ids.binary_search(&v).is_ok()),
                _ => None,
            },
            Predicate::IsNull { column, negated } => Some(get(column).is_none() != *negated),
            Predicate::LikePrefix { column, prefix, negated } => match get(column)? {
                Scalar::Str(s) => Some(s.starts_with(prefix.as_str()) != *negated),
                _ => None,
            },
            Predicate::Like { column, pattern, negated } => match get(column)? {
                Scalar::Str(s) => {
                    let (s, p): (Vec<char>, Vec<char>) =
                        (s.chars().collect(), pattern.chars().collect());
                    Some(like_reference(&s, &p) != *negated)
                }
                _ => None,
            },
            Predicate::And(ps) => {
                let rs: Vec<_> = ps.iter().map(|p| reference(p, r)).collect();
                if rs.contains(&Some(false)) {
                    Some(false)
                } else if rs.contains(&None) {
                    None
                } else {
                    Some(true)
                }
            }
            Predicate::Or(ps) => {
                let rs: Vec<_> = ps.iter().map(|p| reference(p, r)).collect();
                if rs.contains(&Some(true)) {
                    Some(true)
                } else if rs.contains(&None) {
                    None
                } else {
                    Some(false)
                }
            }
            Predicate::Not(p) => reference(p, r).map(|b| !b),
            // The only row filter generated: `n % 3 = 0`.
            Predicate::Rows(_) => r.0.map(|n| n % 3 == 0),
        }
    }

    /// LIKE by its definition, character by character (the reference for the matcher).
    fn like_reference(s: &[char], p: &[char]) -> bool {
        match p.split_first() {
            None => s.is_empty(),
            Some(('%', rest)) => (0..=s.len()).any(|k| like_reference(&s[k..], rest)),
            Some(('_', rest)) => !s.is_empty() && like_reference(&s[1..], rest),
            Some((c, rest)) => s.first() == Some(c) && like_reference(&s[1..], rest),
        }
    }

    /// The LIKE matcher agrees with the definition on text with multi-byte characters,
    /// and steps over bytes in binary.
    #[test]
    fn like_patterns_match_characters() {
        let texts =
            ["", "a", "ab", "é", "aé", "éa", "user_12", "user_1", "usér_1x", "ab%", "日本語"];
        let pats = [
            "", "%", "_", "__", "a%", "%a", "%é%", "_é", "é_", "user_1%", "us_r%1_", "%%", "a_%",
            "%_%_%", "___", "%本%", "_本_", "a%b%", "%1",
        ];
        for t in texts {
            for p in pats {
                let (tc, pc): (Vec<char>, Vec<char>) = (t.chars().collect(), p.chars().collect());
                let want = like_reference(&tc, &pc);
                let pat = LikePattern::new(p);
                assert_eq!(pat.matches(t.as_bytes(), true), want, "{t:?} LIKE {p:?}");
                if let Some(f) = &pat.percent {
                    assert_eq!(f.matches(t.as_bytes()), want, "{t:?} LIKE {p:?} (no `_`)");
                }
            }
        }
        // Whole-column selection (substring search over the value buffer for the longest
        // middle literal, then a check of the rows holding it) agrees with the row-by-row matcher, matches across row boundaries included.
        let column: Vec<&str> =
            texts.iter().chain(&["abab", "b", "ba", "aab", "", "xab"]).copied().collect();
        let mut data = Vec::new();
        let mut offsets = vec![0i32];
        for t in &column {
            data.extend_from_slice(t.as_bytes());
            offsets.push(data.len() as i32);
        }
        for p in pats.iter().chain(&[
            "%ab%", "%b%", "%ba%", "%aa%", "%a%b", "ab", "%xab%", "%a%b%", "%b%ab%", "a%ab%",
            "%ab%b", "x%ab%", "%é%a%",
        ]) {
            let pat = LikePattern::new(p);
            let got = pat.select(&offsets, &data, true);
            for (i, t) in column.iter().enumerate() {
                let (tc, pc): (Vec<char>, Vec<char>) = (t.chars().collect(), p.chars().collect());
                assert_eq!(got.value(i), like_reference(&tc, &pc), "{t:?} LIKE {p:?} in a column");
            }
        }
        // In binary `_` is one byte: "é" is two.
        assert!(LikePattern::new("__").matches("é".as_bytes(), false));
        assert!(!LikePattern::new("_").matches("é".as_bytes(), false));
    }

    fn leaf() -> impl Strategy<Value = Predicate> {
        let op = prop_oneof![
            Just(CmpOp::Eq),
            Just(CmpOp::NotEq),
            Just(CmpOp::Lt),
            Just(CmpOp::LtEq),
            Just(CmpOp::Gt),
            Just(CmpOp::GtEq)
        ];
        // Far-off keys make a list's range too wide for the bitmap lookup.
        let far = prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(1 << 40)];
        let int = prop_oneof![
            8 => (-3i64..4).prop_map(Scalar::Int),
            2 => Just(Scalar::Null),
            1 => far.prop_map(Scalar::Int)
        ];
        let s = prop_oneof![4 => "[a-c]{0,2}".prop_map(Scalar::Str), 1 => Just(Scalar::Null)];
        prop_oneof![
            (op.clone(), int.clone()).prop_map(|(op, value)| Predicate::Cmp {
                column: "n".into(),
                op,
                value
            }),
            (op, s.clone()).prop_map(|(op, value)| Predicate::Cmp {
                column: "s".into(),
                op,
                value
            }),
            // Lists of 8 or more go through the sorted lookup (`member_lookup`).
            (proptest::collection::vec(int, 0..12), any::<bool>()).prop_map(|(values, negated)| {
                Predicate::InList { column: "n".into(), values: values.into(), negated }
            }),
            (proptest::collection::vec(s, 0..12), any::<bool>()).prop_map(|(values, negated)| {
                Predicate::InList { column: "s".into(), values: values.into(), negated }
            }),
            (prop_oneof![Just("n"), Just("s")], any::<bool>())
                .prop_map(|(c, negated)| Predicate::IsNull { column: c.into(), negated }),
            ("[a-c]{0,2}", any::<bool>()).prop_map(|(prefix, negated)| Predicate::LikePrefix {
                column: "s".into(),
                prefix,
                negated
            }),
            ("[a-c_%]{0,4}", any::<bool>()).prop_map(|(pattern, negated)| Predicate::Like {
                column: "s".into(),
                pattern,
                negated
            }),
            Just(Predicate::Rows(thirds())),
        ]
    }

    /// A row filter: `n % 3 = 0`, NULL where `n` is.
    fn thirds() -> RowFilter {
        RowFilter::new(
            vec!["n".into()],
            "n % 3 = 0".into(),
            Arc::new(|cols: &[ArrayRef], _rows| {
                let n = cols[0].as_primitive_opt::<arrow_array::types::Int64Type>();
                let n = n.ok_or_else(|| format!("n is {}", cols[0].data_type()))?;
                Ok(n.iter().map(|v| v.map(|v| v % 3 == 0)).collect())
            }),
        )
    }

    fn predicate() -> impl Strategy<Value = Predicate> {
        leaf().prop_recursive(3, 12, 3, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Predicate::And),
                proptest::collection::vec(inner.clone(), 0..3).prop_map(Predicate::Or),
                inner.prop_map(|p| Predicate::Not(Box::new(p))),
            ]
        })
    }

    fn rows() -> impl Strategy<Value = Vec<Row>> {
        proptest::collection::vec(
            (proptest::option::of(-3i64..4), proptest::option::of("[a-c]{0,2}")),
            0..200,
        )
    }

    /// The rows as a batch; `dict` 1 or 2: strings dictionary-encoded with u8 / u16 codes.
    fn batch(rows: &[Row], dict: u8) -> RecordBatch {
        let n: ArrayRef = Arc::new(Int64Array::from(rows.iter().map(|r| r.0).collect::<Vec<_>>()));
        let mut s: ArrayRef =
            Arc::new(StringArray::from(rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>()));
        if dict > 0 {
            let k = if dict == 1 { DataType::UInt8 } else { DataType::UInt16 };
            let t = DataType::Dictionary(Box::new(k), Box::new(DataType::Utf8));
            s = arrow_cast::cast(&s, &t).unwrap();
        }
        let schema = Schema::new(vec![
            Field::new("n", DataType::Int64, true),
            Field::new("s", s.data_type().clone(), true),
        ]);
        RecordBatch::try_new(Arc::new(schema), vec![n, s]).unwrap()
    }

    fn stats_of(rows: &[Row]) -> (Option<ZoneMap>, Option<ZoneMap>, u64, u64) {
        let ints: Vec<i64> = rows.iter().filter_map(|r| r.0).collect();
        let strs: Vec<&String> = rows.iter().filter_map(|r| r.1.as_ref()).collect();
        let zi = (!ints.is_empty()).then(|| ZoneMap {
            min: StatValue::Int(*ints.iter().min().unwrap()),
            max: StatValue::Int(*ints.iter().max().unwrap()),
        });
        let zs = (!strs.is_empty()).then(|| ZoneMap {
            min: StatValue::Bytes(strs.iter().min().unwrap().as_bytes().to_vec()),
            max: StatValue::Bytes(strs.iter().max().unwrap().as_bytes().to_vec()),
        });
        (zi, zs, (rows.len() - ints.len()) as u64, (rows.len() - strs.len()) as u64)
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn evaluation_matches_three_valued_reference(p in predicate(), rows in rows()) {
            let want: Vec<bool> = rows.iter().map(|r| reference(&p, r) == Some(true)).collect();
            for dict in [0, 1, 2] {
                let mut b = batch(&rows, dict);
                let got: Vec<bool> = evaluate(&p, &mut b).unwrap().iter().collect();
                prop_assert_eq!(&got, &want, "dict = {}", dict);
                // A slice (arrays with an offset) answers for its rows.
                if rows.len() > 3 {
                    let mut s = batch(&rows, dict).slice(3, rows.len() - 3);
                    let got: Vec<bool> = evaluate(&p, &mut s).unwrap().iter().collect();
                    prop_assert_eq!(&got[..], &want[3..], "sliced, dict = {}", dict);
                }
            }
            // Zone-map pruning never skips a row group that has a match.
            let (zi, zs, ni, ns) = stats_of(&rows);
            let n = rows.len() as u64;
            let stats = |c: &str| Some(match c {
                "n" => ChunkStats { zone_map: zi.as_ref(), null_count: ni, rows: n, float32: false },
                _ => ChunkStats { zone_map: zs.as_ref(), null_count: ns, rows: n, float32: false },
            });
            if want.iter().any(|w| *w) {
                prop_assert!(may_match(&p, &stats));
            }
            // Nor does it select every row of one where some row is not a match.
            if must_match(&p, &stats) {
                prop_assert!(want.iter().all(|w| *w), "{:?}", p);
            }
        }
    }

    /// Decimal constants compare with a decimal column on unscaled values (NULL rows
    /// unknown), prune by the column's decimal zone maps, and are refused for a column of
    /// another scale.
    #[test]
    fn decimal_constants_compare_exactly() {
        let vals = [Some(5i128), None, Some(-120), Some(7), Some(6)];
        let col: ArrayRef =
            Arc::new(Decimal128Array::from(vals.to_vec()).with_precision_and_scale(15, 2).unwrap());
        let mut b = RecordBatch::try_from_iter([("d", col)]).unwrap();
        let zone = ZoneMap { min: StatValue::Decimal(-120), max: StatValue::Decimal(7) };
        let stats = |_: &str| {
            Some(ChunkStats { zone_map: Some(&zone), null_count: 1, rows: 5, float32: false })
        };
        let ops = [CmpOp::Eq, CmpOp::NotEq, CmpOp::Lt, CmpOp::LtEq, CmpOp::Gt, CmpOp::GtEq];
        for c in [-121i128, -120, 0, 5, 6, 7, 8] {
            for op in ops {
                let p = Predicate::cmp("d", op, Scalar::Decimal { unscaled: c, scale: 2 });
                let want: Vec<bool> = vals
                    .iter()
                    .map(|v| {
                        v.is_some_and(|v| match op {
                            CmpOp::Eq => v == c,
                            CmpOp::NotEq => v != c,
                            CmpOp::Lt => v < c,
                            CmpOp::LtEq => v <= c,
                            CmpOp::Gt => v > c,
                            CmpOp::GtEq => v >= c,
                        })
                    })
                    .collect();
                let got: Vec<bool> = evaluate(&p, &mut b).unwrap().iter().collect();
                assert_eq!(got, want, "d {op} {c}");
                if want.contains(&true) {
                    assert!(may_match(&p, &stats), "zone map: d {op} {c}");
                }
            }
        }
        // Outside the zone map's range: pruned.
        for (op, c) in [(CmpOp::Gt, 7), (CmpOp::Lt, -120), (CmpOp::Eq, 8), (CmpOp::GtEq, 8)] {
            let p = Predicate::cmp("d", op, Scalar::Decimal { unscaled: c, scale: 2 });
            assert!(!may_match(&p, &stats), "zone map: d {op} {c}");
        }
        let other = Predicate::cmp("d", CmpOp::Eq, Scalar::Decimal { unscaled: 5, scale: 3 });
        assert!(matches!(evaluate(&other, &mut b), Err(Error::TypeMismatch { .. })));
        let shown: Vec<String> = [(5, 2), (-120, 2), (7, 0), (3, -2), (0, -2), (-5, 4)]
            .iter()
            .map(|&(unscaled, scale)| Scalar::Decimal { unscaled, scale }.to_string())
            .collect();
        assert_eq!(shown, ["0.05", "-1.20", "7", "300", "0", "-0.0005"]);
    }

    #[test]
    fn code_comparison_matches_a_per_row_loop() {
        // Every length around the 8- and 64-row boundaries, codes 0 (the padding's value)
        // and 255 among them.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..200 {
            let codes: Vec<u8> = (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    [0, 1, 2, 255, (x >> 40) as u8][(x % 5) as usize]
                })
                .collect();
            for (a, b) in [(0, 0), (1, 1), (0, 255), (2, 1), (7, 7)] {
                let got: Vec<bool> = codes_in(&codes, a, b).iter().collect();
                let want: Vec<bool> = codes.iter().map(|&c| c == a || c == b).collect();
                assert_eq!(got, want, "n = {n}, codes {a} {b}");
            }
        }
    }

    #[test]
    fn zone_maps_prove_whole_chunks_only_when_every_value_satisfies() {
        let ints = ZoneMap { min: StatValue::Int(1), max: StatValue::Int(5) };
        let names = ZoneMap {
            min: StatValue::Bytes(b"org/a0".to_vec()),
            max: StatValue::Bytes(b"org/a9".to_vec()),
        };
        // Floats holding a NaN: NaN is the max (total order).
        let floats = ZoneMap { min: StatValue::Float(-1.0), max: StatValue::Float(f64::NAN) };
        let check = |p: Predicate, nulls: u64, want: bool| {
            let stats = |c: &str| {
                let z = match c {
                    "n" => &ints,
                    "s" => &names,
                    _ => &floats,
                };
                Some(ChunkStats { zone_map: Some(z), null_count: nulls, rows: 10, float32: false })
            };
            assert_eq!(must_match(&p, &stats), want, "{p:?} with {nulls} nulls");
        };
        let n = |op, v: i64| Predicate::cmp("n", op, v);
        for (p, want) in [
            (n(CmpOp::Gt, 0), true),
            (n(CmpOp::Gt, 1), false),
            (n(CmpOp::GtEq, 1), true),
            (n(CmpOp::Lt, 6), true),
            (n(CmpOp::LtEq, 4), false),
            (n(CmpOp::NotEq, 7), true),
            (n(CmpOp::NotEq, 3), false),
            (n(CmpOp::Eq, 1), false),
            (
                Predicate::InList {
                    column: "n".into(),
                    values: vec![Scalar::Int(7)].into(),
                    negated: true,
                },
                true,
            ),
            (
                Predicate::InList {
                    column: "n".into(),
                    values: vec![Scalar::Int(7), Scalar::Null].into(),
                    negated: true,
                },
                false,
            ),
            (Predicate::IsNull { column: "n".into(), negated: true }, true),
            (Predicate::IsNull { column: "n".into(), negated: false }, false),
            (Predicate::like("s", "org/%", false).unwrap(), true),
            (Predicate::like("s", "org/a1%", false).unwrap(), false),
            (Predicate::like("s", "org/%", true).unwrap(), false),
            (
                Predicate::Or(vec![
                    Predicate::eq("s", "org"),
                    Predicate::like("s", "org/%", false).unwrap(),
                ]),
                true,
            ),
            (Predicate::And(vec![n(CmpOp::Gt, 0), n(CmpOp::Gt, 2)]), false),
            (Predicate::Not(Box::new(n(CmpOp::Gt, 9))), false),
            (Predicate::cmp("x", CmpOp::Lt, 1e9), false),
            (Predicate::cmp("x", CmpOp::GtEq, -1.0), true),
        ] {
            check(p.clone(), 0, want);
            // With a NULL row only `IS NULL` tests could still hold everywhere.
            if !matches!(p, Predicate::IsNull { .. }) {
                check(p, 3, false);
            }
        }
        let all_null = |c: &str| {
            (c == "n").then_some(ChunkStats {
                zone_map: None,
                null_count: 10,
                rows: 10,
                float32: false,
            })
        };
        assert!(must_match(&Predicate::IsNull { column: "n".into(), negated: false }, &all_null));
        assert!(!must_match(&n(CmpOp::Gt, 0), &all_null));
    }

    #[test]
    fn type_errors_are_reported() {
        let mut b = batch(&[(Some(1), Some("a".into()))], 0);
        let e = evaluate(&Predicate::eq("n", "x"), &mut b).unwrap_err();
        assert!(matches!(e, Error::TypeMismatch { .. }), "{e}");
        assert!(evaluate(&Predicate::eq("zzz", 1), &mut b).is_err());
        let mut small = RecordBatch::try_new(
            Arc::new(Schema::new(vec![Field::new("t", DataType::Int8, true)])),
            vec![Arc::new(arrow_array::Int8Array::from(vec![1]))],
        )
        .unwrap();
        let e = evaluate(&Predicate::eq("t", 300), &mut small).unwrap_err();
        assert!(e.to_string().contains("out of range"), "{e}");
    }

    /// One long list evaluated on batches of several sizes and integer types (its lookup is
    /// built on the first and reused): bitmap, sorted `i64` and sorted `i128` key sets, and
    /// values below, inside and above the keys' range.
    #[test]
    fn long_lists_reuse_their_lookup_across_batches() {
        let eval = |p: &Predicate, a: ArrayRef| -> Vec<bool> {
            let mut b = RecordBatch::try_new(
                Arc::new(Schema::new(vec![Field::new("k", a.data_type().clone(), true)])),
                vec![a],
            )
            .unwrap();
            evaluate(p, &mut b).unwrap().iter().collect()
        };
        let list = |keys: Vec<Scalar>| Predicate::InList {
            column: "k".into(),
            values: keys.into(),
            negated: false,
        };
        // Dense keys: a bitmap, first sized for 3 rows, then tested on more.
        let dense = list((10..30).step_by(2).map(Scalar::Int).collect());
        let ints = |v: Vec<i64>| -> ArrayRef { Arc::new(Int64Array::from(v)) };
        assert_eq!(eval(&dense, ints(vec![9, 10, 11])), [false, true, false]);
        let many: Vec<i64> = (-5..40).collect();
        let want: Vec<bool> = many.iter().map(|x| (10..30).contains(x) && x % 2 == 0).collect();
        assert_eq!(eval(&dense.clone(), ints(many.clone())), want);
        let small: ArrayRef = Arc::new(arrow_array::Int8Array::from(vec![-128, 12, 13, 127]));
        assert_eq!(eval(&dense, small), [false, true, false, false]);
        // Keys far apart: a sorted list of i64.
        let wide = list(
            [i64::MIN, -7, 0, 5, 1 << 40, 1 << 50, i64::MAX - 1, 3, 9].map(Scalar::Int).to_vec(),
        );
        let got = eval(&wide, ints(vec![i64::MIN, i64::MAX, 5, 6, 1 << 40, -8]));
        assert_eq!(got, [true, false, true, false, true, false]);
        // Unsigned keys beyond i64: a sorted list of i128.
        let big = list((0..8).map(|i| Scalar::UInt(u64::MAX - i * 1_000_000_007)).collect());
        let u: ArrayRef =
            Arc::new(UInt64Array::from(vec![u64::MAX, u64::MAX - 1, 0, u64::MAX - 1_000_000_007]));
        assert_eq!(eval(&big, u), [true, false, false, true]);
        // Dense keys at the top of each type's range: values far below must not wrap in.
        let top = list((0..10).map(|i| Scalar::UInt(u64::MAX - i)).collect());
        let u: ArrayRef = Arc::new(UInt64Array::from(vec![0, 5, u64::MAX, u64::MAX - 10]));
        assert_eq!(eval(&top, u), [false, false, true, false]);
        let top = list((0..10).map(|i| Scalar::Int(i64::MAX - i)).collect());
        let got = eval(&top, ints(vec![i64::MIN, i64::MIN + 3, -1, i64::MAX, i64::MAX - 10]));
        assert_eq!(got, [false, false, false, true, false]);
        let bottom = list((0..10).map(|i| Scalar::Int(i64::MIN + i)).collect());
        let got = eval(&bottom, ints(vec![i64::MAX, i64::MAX - 3, 0, i64::MIN, i64::MIN + 10]));
        assert_eq!(got, [false, false, false, true, false]);
    }
}
