//! The direct path: simple single-table statements, recognised from the *parsed* statement
//! (never from the SQL text) and run straight against storage, without DataFusion's
//! planning, optimisation and physical planning (which cost milliseconds per statement,
//! and DataFusion re-plans a prepared statement at every run).
//!
//! Shapes taken (everything else goes to DataFusion, which gives the same answer slower):
//! - `SELECT *|col [AS x], … FROM t [AS a] [WHERE p] [LIMIT n] [OFFSET m]`: `_id = v` and
//!   `_id IN (…)` (alone or ANDed with more) are point lookups through the id index; other
//!   filters are storage scans that evaluate `p` on encoded data, skip row groups by zone
//!   map, stop at the limit and decode only the window of rows the result comes from;
//! - `UPDATE t SET col = v, … [WHERE p]`, `DELETE FROM t [WHERE p]`: one write statement of
//!   the connection's session (auto-commit or inside its transaction), rows found as above;
//! - `INSERT INTO t [(cols)] VALUES (v, …), …`;
//! - `SELECT agg(col|*) [AS x], … FROM t [WHERE p]` with `count`, `sum`, `avg`, `min`,
//!   `max` and no GROUP BY: one pass over the filtered rows on both cores; `sum` / `avg` /
//!   `min` / `max` of Int64 and Float64 columns are folded here ([`Fold`]: plain values in
//!   vectorised blocks, dictionary-coded chunks once per entry with its row count), others
//!   go through DataFusion's accumulators.
//!
//! `p` is a predicate that converts *exactly* to a storage [`Predicate`] (comparisons of a
//! column with a constant, `IN`, `BETWEEN`, `IS [NOT] NULL`, `LIKE 'prefix%'`, AND / OR /
//! NOT); `v` is a literal or a `$n` parameter whose value has the column's type without a
//! lossy conversion (an integer for an integer or float column, text for text, …). Where
//! DataFusion would coerce differently (an integer column against `2.5`, text against a
//! number, dates written as text, …) the statement is not taken. `t` must be a native
//! table of the statement's view (not a view, an external table or a file).
//!
//! Files: `classify` (statement shapes, literals, the predicate), `templates` (kept forms
//! of prepared inserts and keyed statements), `run` (reads and writes on storage),
//! `aggregate` (whole-table folds).
//!
//! What this module must not do: decide anything from SQL text, run a statement whose
//! result could differ from DataFusion's (the equivalence tests in `engine/tests/it/sql.rs`
//! run every shape both ways), or write outside the session's write statement.

use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float32Array, Float64Array, Int8Array, Int16Array, Int32Array,
    Int64Array, RecordBatch, RecordBatchOptions, StringArray, UInt8Array, UInt16Array, UInt32Array,
    UInt64Array, new_null_array,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::sql::sqlparser::ast::{
    AssignmentTarget, BinaryOperator, Delete, Expr, FromTable, GroupByExpr, Ident, Insert,
    LimitClause, ObjectName, Query, Select, SelectItem, SetExpr, Statement, TableFactor,
    TableObject, TableWithJoins, UnaryOperator, Update, Value,
};

use basalt_storage::{CmpOp, ID_COLUMN, Predicate, Scalar, ScanUnit, TableSnapshot};

use crate::rewrite::ident_name;

mod aggregate;
mod classify;
mod run;
mod templates;

pub(crate) use self::aggregate::DirectAggregate;
pub(crate) use self::templates::{InsertTemplate, KeyedTemplate};
use self::{aggregate::*, classify::*, run::*, templates::*};

/// A statement the direct path runs.
#[derive(Debug)]
pub(crate) enum Direct {
    /// A projected, filtered, limited read.
    Select(DirectSelect),
    /// Aggregates over the whole (filtered) table, without GROUP BY.
    Aggregate(DirectAggregate),
    /// `UPDATE … SET … [WHERE]`.
    Update {
        /// Table.
        table: String,
        /// Rows to change.
        filter: Option<Predicate>,
        /// One row: the new values of the assigned columns.
        values: RecordBatch,
    },
    /// `DELETE FROM … [WHERE]`.
    Delete {
        /// Table.
        table: String,
        /// Rows to delete.
        filter: Option<Predicate>,
    },
    /// `INSERT INTO … VALUES`.
    Insert {
        /// Table.
        table: String,
        /// The rows, in the table's user schema.
        rows: RecordBatch,
    },
}

/// A read the direct path runs.
#[derive(Debug)]
pub(crate) struct DirectSelect {
    name: String,
    table: Arc<TableSnapshot>,
    /// Full-schema positions of the output columns.
    projection: Vec<usize>,
    /// The output schema (the table's fields under their output names).
    schema: SchemaRef,
    filter: Option<Predicate>,
    offset: usize,
    limit: Option<usize>,
}

/// What the classifier needs to know about the connection.
pub(crate) struct Env<'a> {
    /// Whether unquoted identifiers fold to lower case.
    pub lower_idents: bool,
    /// Values of `$1`, `$2`, … (empty outside prepared statements).
    pub params: &'a [ScalarValue],
    /// The native table of this name in the statement's view (`None`: not a native table).
    pub table: &'a dyn Fn(&str) -> Option<Arc<TableSnapshot>>,
}

/// The direct plan of `stmt`, or `None` when it is not one of the direct shapes.
pub(crate) fn classify(stmt: &Statement, env: &Env<'_>) -> Option<Direct> {
    match stmt {
        Statement::Query(q) => select(q, env),
        Statement::Update(u) => update(u, env),
        Statement::Delete(d) => delete(d, env),
        Statement::Insert(i) => insert(i, env),
        _ => None,
    }
}
