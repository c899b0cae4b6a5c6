//! # basalt-vector
//!
//! Will own the vector kernels: distance functions over `f32` (and later `f16`/`i8`) via
//! simsimd with portable fallbacks, exact top-k selection (per row group, merged), and batch
//! top-k. It is a leaf crate: it must not depend on storage, SQL or the engine.
//!
//! Status: empty. The kernels land with the vector-search issue; storage already stores
//! `VECTOR(D)` columns (`FixedSizeList<Float32, D>`, uncompressed, 64-byte aligned).
