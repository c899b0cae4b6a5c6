//! Vector search in SQL: the distance functions Basalt adds, the `vector_topk` table
//! function, and the rule that answers `ORDER BY <distance> LIMIT k` with the storage top-k.
//!
//! - `l2_distance(a, b)` and `l2sq_distance(a, b)`: Euclidean and squared Euclidean
//!   distance, with the semantics of DataFusion's `array_distance` (computed in `f64`; NULL
//!   when either side is NULL or holds a NULL; an error when the lengths differ). A
//!   `VECTOR(D)` column is read in place (no cast to a list of `f64`). DataFusion's own
//!   `array_distance`, `cosine_distance` and `inner_product` / `dot_product` are left as
//!   they are.
//! - `vector_topk('table', 'column', [query], k [, 'metric'])`: the `k` closest rows as
//!   `_id` and `distance` (closest first; metric `l2` by default, or `l2sq`, `cosine`,
//!   `dot`), computed by storage's exact top-k in `f32` arithmetic. Rows without a distance
//!   (NULL vector, zero vector under cosine) are not returned.
//! - [`VectorTopKRule`](crate::rules::vector_topk::VectorTopKRule): `ORDER BY d ASC LIMIT k` where `d` is `array_distance`,
//!   `l2_distance`, `l2sq_distance` or `cosine_distance` of a `VECTOR` column and a constant
//!   vector, or `ORDER BY inner_product(…) DESC LIMIT k`, over a Basalt scan (filters pushed
//!   into it allowed) becomes a [`VectorSearchExec`] below the original projection and a
//!   sort of its few rows. The exec selects `2k + 8` candidates with the `f32` kernels; the
//!   sort above ranks them by DataFusion's own `f64` value, so near-ties at the boundary
//!   are settled by the exact function. Where rows without a distance would sort into the
//!   result (NULLs or NaN first, or fewer ranked candidates than `k`), the exec runs the
//!   original scan instead and DataFusion sorts it: results never change.
//!
//! What this module must not do: compute distances itself for the top-k (that is
//! `basalt_vector`, through storage), or read anything but the snapshot the scan was
//! planned on.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, GenericListArray, OffsetSizeTrait,
};
use datafusion::arrow::datatypes::{DataType, Field, Float32Type, Float64Type, Schema, SchemaRef};
use datafusion::catalog::{
    Session as DfSession, TableFunctionArgs, TableFunctionImpl, TableProvider,
};
use datafusion::common::utils::{ListCoercion, coerced_type_with_base_type_only};
use datafusion::common::{DataFusionError, Result, ScalarValue, exec_err, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TableType,
    Volatility,
};
use datafusion::physical_plan::ExecutionPlan;

use basalt_storage::Metric;

use crate::binding::{Binding, storage_err};
use crate::constant::evaluate_constant;
use crate::exec::vector_search::{Mode, Search, VectorSearchExec};

/// The scalar functions of this module.
pub fn functions() -> Vec<ScalarUDF> {
    vec![
        ScalarUDF::from(L2Distance::new("l2_distance", false)),
        ScalarUDF::from(L2Distance::new("l2sq_distance", true)),
    ]
}

/// `l2_distance` / `l2sq_distance` (see the module docs).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct L2Distance {
    name: &'static str,
    squared: bool,
    signature: Signature,
}

impl L2Distance {
    fn new(name: &'static str, squared: bool) -> Self {
        L2Distance { name, squared, signature: Signature::user_defined(Volatility::Immutable) }
    }
}

/// A vector column read in place, or any other numeric list as `List<Float64>`.
fn coerce_vector_arg(name: &str, t: &DataType) -> Result<DataType> {
    match t {
        DataType::FixedSizeList(f, _) if f.data_type() == &DataType::Float32 => Ok(t.clone()),
        DataType::Null => Ok(DataType::new_list(DataType::Float64, true)),
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _)
            if f.data_type().is_numeric() || f.data_type().is_null() =>
        {
            Ok(coerced_type_with_base_type_only(
                t,
                &DataType::Float64,
                Some(&ListCoercion::FixedSizedListToList),
            ))
        }
        _ => plan_err!("{name} takes two vectors (numeric arrays), got {t}"),
    }
}

impl ScalarUDFImpl for L2Distance {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let [a, b] = arg_types else {
            return plan_err!("{} takes two arguments, got {}", self.name, arg_types.len());
        };
        Ok(vec![coerce_vector_arg(self.name, a)?, coerce_vector_arg(self.name, b)?])
    }
    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [a, b] = args.args.as_slice() else {
            return plan_err!("{} takes two arguments", self.name);
        };
        let scalar = matches!((a, b), (ColumnarValue::Scalar(_), ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let (a, b) = (Side::new(a)?, Side::new(b)?);
        let mut out = Float64Array::builder(rows);
        for i in 0..rows {
            match (a.row(i), b.row(i)) {
                (Some(x), Some(y)) => {
                    let (n, m) = (x.len(), y.len());
                    if n != m {
                        return exec_err!(
                            "{}: vectors of different dimensions ({n} and {m})",
                            self.name
                        );
                    }
                    let mut sum = 0f64;
                    for j in 0..n {
                        let d = x.get(j) - y.get(j);
                        sum += d * d;
                    }
                    out.append_value(if self.squared { sum } else { sum.sqrt() });
                }
                _ => out.append_null(),
            }
        }
        let out: ArrayRef = Arc::new(out.finish());
        if scalar {
            Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?))
        } else {
            Ok(ColumnarValue::Array(out))
        }
    }
}

/// One argument of a distance function: an array, or a scalar repeated for every row.
struct Side {
    array: ArrayRef,
    broadcast: bool,
}

/// One row's vector.
enum Vals<'a> {
    F32(&'a [f32]),
    F64(&'a [f64]),
}

impl Vals<'_> {
    fn len(&self) -> usize {
        match self {
            Vals::F32(v) => v.len(),
            Vals::F64(v) => v.len(),
        }
    }
    #[inline]
    fn get(&self, j: usize) -> f64 {
        match self {
            Vals::F32(v) => f64::from(v[j]),
            Vals::F64(v) => v[j],
        }
    }
}

impl Side {
    fn new(v: &ColumnarValue) -> Result<Side> {
        Ok(match v {
            ColumnarValue::Array(a) => Side { array: a.clone(), broadcast: false },
            ColumnarValue::Scalar(s) => Side { array: s.to_array_of_size(1)?, broadcast: true },
        })
    }

    /// Row `i`'s values; `None` for a NULL vector or one holding a NULL.
    fn row(&self, i: usize) -> Option<Vals<'_>> {
        let i = if self.broadcast { 0 } else { i };
        if self.array.is_null(i) {
            return None;
        }
        match self.array.data_type() {
            DataType::FixedSizeList(..) => {
                let l = self.array.as_fixed_size_list();
                let d = l.value_length() as usize;
                let child = l.values();
                let start = l.value_offset(i) as usize;
                if child.logical_nulls().is_some_and(|n| n.slice(start, d).null_count() > 0) {
                    return None;
                }
                let c = child.as_primitive_opt::<Float32Type>()?;
                Some(Vals::F32(&c.values()[start..start + d]))
            }
            DataType::List(_) => list_row(self.array.as_list::<i32>(), i),
            DataType::LargeList(_) => list_row(self.array.as_list::<i64>(), i),
            _ => None,
        }
    }
}

fn list_row<O: OffsetSizeTrait>(l: &GenericListArray<O>, i: usize) -> Option<Vals<'_>> {
    let (start, end) = (l.value_offsets()[i].as_usize(), l.value_offsets()[i + 1].as_usize());
    let child = l.values();
    if child.logical_nulls().is_some_and(|n| n.slice(start, end - start).null_count() > 0) {
        return None;
    }
    let c = child.as_primitive_opt::<Float64Type>()?;
    Some(Vals::F64(&c.values()[start..end]))
}

/// A constant's value as a vector of `f32`, if it is a non-NULL numeric list without NULLs.
pub(crate) fn constant_vector(v: &ScalarValue) -> Option<Vec<f32>> {
    let a = v.to_array_of_size(1).ok()?;
    if a.is_null(0) {
        return None;
    }
    let inner: ArrayRef = match a.data_type() {
        DataType::List(_) => a.as_list::<i32>().value(0),
        DataType::LargeList(_) => a.as_list::<i64>().value(0),
        DataType::FixedSizeList(..) => a.as_fixed_size_list().value(0),
        _ => return None,
    };
    if inner.null_count() > 0 || !inner.data_type().is_numeric() {
        return None;
    }
    let f = datafusion::arrow::compute::cast(&inner, &DataType::Float32).ok()?;
    Some(f.as_primitive::<Float32Type>().values().to_vec())
}

/// `vector_topk('table', 'column', [query], k [, 'metric'])`.
#[derive(Debug)]
pub struct VectorTopKFunction {
    binding: Arc<Binding>,
}

impl VectorTopKFunction {
    /// The table function of a connection.
    pub fn new(binding: Arc<Binding>) -> Self {
        VectorTopKFunction { binding }
    }
}

const USAGE: &str =
    "vector_topk('table', 'column', [query vector], k [, 'l2' | 'l2sq' | 'cosine' | 'dot'])";

impl TableFunctionImpl for VectorTopKFunction {
    fn call_with_args(&self, args: TableFunctionArgs<'_, '_>) -> Result<Arc<dyn TableProvider>> {
        let exprs = args.exprs();
        if !(4..=5).contains(&exprs.len()) {
            return plan_err!("{USAGE}: expected 4 or 5 arguments, got {}", exprs.len());
        }
        let values = exprs
            .iter()
            .map(|e| evaluate_constant(args.session(), e))
            .collect::<Result<Vec<_>>>()?;
        let text = |i: usize, what: &str| match &values[i] {
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => Ok(s.clone()),
            v => plan_err!("{USAGE}: the {what} must be a string, got {v}"),
        };
        let table = text(0, "table name")?;
        let column = text(1, "column name")?;
        let Some(query) = constant_vector(&values[2]) else {
            return plan_err!(
                "{USAGE}: the query must be a numeric array without NULLs, got {}",
                values[2]
            );
        };
        let k = match values[3].cast_to(&DataType::Int64)? {
            ScalarValue::Int64(Some(k)) if k >= 0 => k as usize,
            v => return plan_err!("{USAGE}: k must be a non-negative integer, got {v}"),
        };
        let metric = match values.get(4) {
            None => Metric::L2,
            Some(_) => text(4, "metric")?
                .parse::<Metric>()
                .map_err(|e| DataFusionError::Plan(format!("{USAGE}: {e}")))?,
        };
        // Fail at planning on a table or column that is not there.
        let view = self.binding.view().map_err(storage_err)?;
        let snap = view.table(&table).map_err(storage_err)?;
        match snap
            .schema()
            .index_of(&column)
            .map(|i| snap.schema().full_schema().field(i).data_type().clone())
        {
            Some(DataType::FixedSizeList(f, _)) if f.data_type() == &DataType::Float32 => {}
            Some(t) => {
                return plan_err!(
                    "vector_topk: column '{column}' of '{table}' is {t}, not a VECTOR column"
                );
            }
            None => return plan_err!("vector_topk: table '{table}' has no column '{column}'"),
        }
        let schema = Arc::new(Schema::new(vec![
            Field::new(basalt_storage::ID_COLUMN, DataType::UInt64, false),
            Field::new("distance", DataType::Float64, false),
        ]));
        Ok(Arc::new(VectorTopKTable {
            binding: self.binding.clone(),
            search: Search { column, query, k, metric, predicate: None },
            table,
            schema,
        }))
    }
}

/// The table a `vector_topk(…)` call stands for.
#[derive(Debug)]
struct VectorTopKTable {
    binding: Arc<Binding>,
    table: String,
    search: Search,
    schema: SchemaRef,
}

#[async_trait]
impl TableProvider for VectorTopKTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
    fn table_type(&self) -> TableType {
        TableType::Temporary
    }
    async fn scan(
        &self,
        _state: &dyn DfSession,
        projection: Option<&Vec<usize>>,
        _filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let view = self.binding.view().map_err(storage_err)?;
        let snapshot = view.table(&self.table).map_err(storage_err)?;
        let projection = projection.cloned().unwrap_or_else(|| vec![0, 1]);
        let schema = Arc::new(self.schema.project(&projection)?);
        Ok(Arc::new(VectorSearchExec::new(
            snapshot,
            self.search.clone(),
            Mode::Ids { projection },
            schema,
        )))
    }
}
