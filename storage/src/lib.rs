//! # basalt-storage
//!
//! Bytes on disk and in memory for Basalt: the segment file format and its encodings, the
//! memtable, the manifest, the I/O layer, and the database-level [`Store`] with its
//! snapshots, inserts, point lookups and scans.
//!
//! What this crate owns: every byte layout (see `docs/format.md` and the module docs of
//! [`segment`] and [`manifest`]), integrity checks, durability ordering, and the `_id` →
//! location index. What it must not do: depend on DataFusion or any SQL notion (it speaks
//! Arrow arrays and its own types only), or expose anything the engine crate does not
//! re-export as public API.

pub mod bitpack;
pub mod codec;
pub mod deletes;
pub mod encoding;
pub mod error;
pub mod frames;
pub mod io;
pub mod manifest;
pub mod memtable;
pub mod owned;
pub mod predicate;
pub mod quantized;
pub mod salvage;
pub mod segment;
pub mod session;
pub mod store;
mod tail;
pub mod txn;
pub mod types;
pub mod values;
pub mod wal;
mod writer;

pub use basalt_vector::StoredForm;
/// Rounds a vector in place to the values a column of a [`StoredForm`] stores for it.
pub use basalt_vector::stored::round_row as round_vector;
pub use encoding::{Cell, CompressionPolicy, DecodeMode, reads_cells};
pub use error::{Error, Result};
pub use io::{FaultFs, FaultKind, MemFs, OsFs, Vfs};
pub use manifest::{CheckDef, IndexDef, IndexKind};
pub use predicate::{CmpOp, InValues, Predicate, RowFilter, RowFilterFn, Scalar};
pub use quantized::machine_memory;
pub use segment::{ROW_GROUP_ROWS, SEGMENT_FORMAT_VERSION, WriteOptions};
pub use session::{ReadView, Session, WriteStatement};
pub use store::{
    AlterColumn, CheckEvaluator, ChunkMetadata, ColumnSummary, CommitEvent, CommitHook,
    CompactionReport, DbSnapshot, IdRange, NewCheck, NewIndex, OnConflict, RowLocation, RowValue,
    Scan, ScanUnit, Store, StoreOptions, TableSnapshot, UnitMetadata, VectorSearch, name_checks,
};
pub use txn::{Savepoint, Transaction};
pub use types::{ID_COLUMN, TableSchema, VECTOR_FORM_KEY, stored_form, vector_field, vector_type};
pub use wal::Durability;

/// Full-text search types, re-exported for the layers above.
pub use basalt_fts::{Hit as TextHit, Tokenizer};
/// The vector search types storage answers with ([`TableSnapshot::vector_topk`]).
pub use basalt_vector::{Metric, Neighbor, Precision};
