//! # basalt-sql
//!
//! Will own the DataFusion front end: the catalog over the engine's tables, the
//! `TableProvider` and scan exec over storage snapshots, filter/projection/limit pushdown,
//! fused filter-aggregate kernels (physical optimizer rules), UDFs/UDTFs, DDL/DML dispatch,
//! and SQL over CSV/Parquet/JSON files. It must not touch files of its own (storage does),
//! and nothing outside `basalt` (the engine crate) may depend on it.
//!
//! Status: only the dependency on DataFusion 55 is in place (so the workspace's single
//! Arrow version is checked against it); the SQL front end lands with the SQL issue.
