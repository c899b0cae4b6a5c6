//! # basalt-fts
//!
//! Will own the tantivy wrapper: one index per (table, column set), `_id` as a u64 fast
//! field, BM25 search, commit payloads carrying the WAL position. It is a leaf crate: it
//! must not depend on storage, SQL or the engine.
//!
//! Status: empty. Full-text search lands with the full-text issue.
