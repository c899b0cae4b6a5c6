//! The allocator of the benchmark binaries: mimalloc, keeping the memory it frees.
//!
//! glibc's malloc hands the large blocks of joins and aggregations back to the kernel after
//! each query and faults them in again on the next (on TPC-H SF1 Q7, 360,801 page faults
//! and 0.84 s of system time in six runs; 7,887 with mimalloc). mimalloc by default purges
//! what it frees after 10 ms, which made bulk loads swing between 95 and 330 ms from one
//! run to the next; kept, they took 97 ms each time (glibc: 105–111 ms). The price: the
//! process keeps its peak memory.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `mi_option_purge_delay` (its position in the option enum of both the v2 and the v3
/// headers libmimalloc-sys 0.1.49 builds from; the bindings name no constant for it).
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Turns off purging of freed memory; called first thing in `main`.
pub fn keep_freed_memory() {
    // SAFETY: mi_option_set stores a value in mimalloc's option table (no pointers are
    // passed); -1 is the documented "never purge" value of this option.
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) }
}
