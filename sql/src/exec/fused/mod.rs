//! Fused group-by: [`GroupByExec`] replaces a partial (or single-stage) `AggregateExec`
//! reading a Basalt scan directly and groups on **dictionary codes** instead of
//! materialised values. The rule [`FuseGroupBy`](crate::rules::dictionary::FuseGroupBy) puts
//! it in plans where [`GroupByExec::fuse`] accepts the aggregate.
//!
//! DataFusion's hash aggregation over a Basalt scan would first decode every group value
//! (a string per row for `GROUP BY city`) and then hash each one. Segments already store
//! such columns as a sorted dictionary plus 1–4-byte codes per row, so [`GroupByExec`]
//! reads the codes, maps each *dictionary entry* (not each row) to a group id once per row
//! group, and turns codes into group ids with one table lookup per row; several group
//! columns combine through dense tables. Within a batch rows are keyed by their combined
//! codes (a dense batch-local key), and only the keys present are turned into group ids.
//!
//! Aggregates: `COUNT(*)` counts rows per key (one coded group column without NULLs: counted
//! straight from its codes, [`Grouper::count_codes`]; with no aggregate at all, as for `DISTINCT`,
//! only marked until every dictionary entry has been seen); `count(CASE WHEN p THEN c END)` (`c` a
//! non-NULL constant) counts the rows per key where `p` is true ([`counts_if`]). `count` / `sum` /
//! `avg` / `min` / `max` of one Int64 or Float64 column (or of a narrower number under the cast
//! DataFusion adds) are folded per key by a tight loop that reads the column's dictionary codes
//! through a value table, or its plain values ([`Native`]); the per-key partial results are handed
//! to DataFusion's own accumulator (`merge_batch` for count / sum / avg states, `update_batch` with
//! one candidate per key for min / max), so DataFusion's rules decide and its states and values
//! come out. Every other aggregate is DataFusion's `GroupsAccumulator` fed a group id per row.
//! Results therefore equal DataFusion's, except that floating-point sums add in another order
//! (within rounding), as they do between DataFusion's own plans. Without GROUP BY (one group) the
//! rule applies only when every aggregate is counted or folded here, since DataFusion's scalar
//! accumulators are already vectorised. A partial aggregate over a union of scans (`UNION`, `UNION
//! ALL` under an aggregate) becomes the union of one fused partial aggregate per scan when every
//! scan fuses (`fuse_union` in the rule). A left semi / anti hash join without a join filter (`INTERSECT`,
//! `EXCEPT`) reads its scanned right input deduplicated by such a group-by
//! (`dedupe_semi_join_input` in the rule).
//!
//! When it applies: the aggregate's input is a Basalt scan without a limit (its filter already
//! evaluated in storage, on codes) — directly, or through projections of immutable
//! expressions, inlined into the aggregate first (see `inlined` in `exec`) — or a dictionary join ([`crate::exec::dict_join`]) probing one, without a
//! fetch, whose output it reads with the probe columns as codes (group columns must then be probe
//! columns); there is no grouping set; every group expression is a column of the scan that is
//! dictionary-encoded in every row group of the snapshot (or there is none, see above); every
//! aggregate supports groups accumulators and has no DISTINCT, ORDER BY or FILTER; the mode is
//! `Partial` or `Single`. Memtable rows (values, not codes) are grouped through the same per-value
//! map. What the groups hold counts against the memory pool; a partition whose groups outgrow
//! it is dropped and computed by the aggregate the rule replaced (which spills or emits early),
//! counted in the `over_memory_limit` metric. The rule is off when the connection's fast paths are off
//! (`Connection::set_fast_paths(false)`), which is how the tests compare the two.
//!
//! What this module must not do: change what a query returns, or read storage other than
//! through the snapshot and units the scan was planned with.
//!
//! Files: `exec` holds the exec and its memory accounting, `grouper` the group ids from
//! codes, `fold` the aggregates folded per key.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanArray, Int64Array, NullArray,
    PrimitiveArray, RecordBatch, UInt64Array, new_null_array,
};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{
    DataType, Float64Type, Int64Type, SchemaRef, UInt8Type, UInt16Type, UInt32Type,
};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::execution::memory_pool::{MemoryConsumer, MemoryReservation};
use datafusion::execution::{SendableRecordBatchStream, TaskContext};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::aggregate::AggregateFunctionExpr;
use datafusion::physical_expr::expressions::{CaseExpr, CastExpr, Column, Literal};
use datafusion::physical_expr::projection::update_expr;
use datafusion::physical_expr::{EquivalenceProperties, PhysicalExpr};
use datafusion::physical_plan::aggregates::{AggregateExec, AggregateMode, PhysicalGroupBy};
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::execution_plan::{ChildrenPropertiesMode, ReplaceChildrenOptions};
use datafusion::physical_plan::metrics::{ExecutionPlanMetricsSet, MetricBuilder, MetricsSet};
use datafusion::physical_plan::projection::ProjectionExec;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
};

use basalt_storage::{Predicate, ScanUnit, TableSnapshot};

use crate::binding::storage_err;
use crate::codes::{codes_of, dictionary_values};
use crate::exec::dict_join::DictJoinExec;
use crate::exec::scan::{ScanExec, ScanParts, deferred_stream, partition_units};

mod exec;
mod fold;
mod grouper;

pub use self::exec::GroupByExec;
use self::{fold::*, grouper::*};
