//! `basalt._basalt`: the native module of the Python package. It binds the public `basalt`
//! crate only (never the crates below it): connections and SQL (`connection`), results and
//! the Arrow PyCapsule interface (`result`, `arrow`), values (`convert`), parameter markers
//! (`params`), agent memory (`memory`) and the DB-API exceptions (`errors`). The Python
//! half (`python/basalt/`) builds the DB-API and the convenience methods on top.

mod arrow;
mod connection;
mod convert;
mod errors;
mod memory;
mod params;
mod result;

use pyo3::prelude::*;

/// The extension's allocations (query memory, result buffers handed to pyarrow and freed by
/// their release callback) come from mimalloc: glibc's malloc hands the large blocks of joins
/// and aggregations back to the kernel after each query and faults them in again on the next
/// (see `cli/src/alloc.rs`). Python's own objects keep Python's allocator.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The native module.
#[pymodule]
fn _basalt(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<connection::NativeConnection>()?;
    m.add_class::<result::QueryResult>()?;
    m.add_class::<result::QueryStream>()?;
    m.add_class::<memory::NativeMemory>()?;
    m.add_class::<memory::NativeSubscription>()?;
    m.add_function(wrap_pyfunction!(connection::open, m)?)?;
    m.add_function(wrap_pyfunction!(memory::open_memory, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
