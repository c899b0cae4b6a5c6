//! The execution plans Basalt adds to DataFusion's, one component per module. Each reads
//! a Basalt scan's storage directly (dictionary codes, row ids, the storage top-k) where
//! DataFusion's own operator would read decoded rows; the rules in [`crate::rules`] put
//! them in plans, asking each exec's constructor (`replace`, `reduce`, `fuse`) whether a
//! node qualifies. The conditions are documented on the exec.
//!
//! What this module must not do: change what a query returns — every exec answers exactly
//! what the plan it replaces would (the tests compare both, with fast paths on and off).

pub mod bucket_sort;
pub mod dict_join;
pub mod dml;
pub mod entry;
pub mod fused;
mod hints;
pub mod iterations;
pub mod metadata_aggregate;
pub mod scan;
pub mod semi_join;
pub mod shared;
pub mod vector_search;
