//! The DataFusion runtime a database's connections share: the memory pool under the
//! memory limit, the spill directory, the recursion limit.
//!
//! Part of the dispatcher (see the module doc of `connection`).

use super::*;

/// DataFusion's runtime environment (memory pool, spill files) that the SQL connections of
/// one database share, built on first use: statements that never reach DataFusion (the
/// direct path) do not pay for it.
#[derive(Debug)]
pub struct SharedRuntime {
    pub(super) limit: Option<usize>,
    /// Where operators spill (`None`: the system's temporary directory).
    pub(super) spill: Option<std::path::PathBuf>,
    pub(super) env: OnceLock<Arc<RuntimeEnv>>,
    /// Iterations a recursive query may run ([`crate::rules::recursion`]).
    pub(super) max_recursion: usize,
}

impl SharedRuntime {
    /// A runtime environment whose memory pool holds `limit` bytes (`None`: unbounded).
    pub fn new(limit: Option<usize>) -> SharedRuntime {
        SharedRuntime {
            limit,
            spill: None,
            env: OnceLock::new(),
            max_recursion: crate::rules::recursion::DEFAULT_MAX_RECURSION,
        }
    }

    /// Operators spill into `dir` (made when first needed) instead of the system's
    /// temporary directory.
    pub fn with_spill_dir(mut self, dir: std::path::PathBuf) -> SharedRuntime {
        self.spill = Some(dir);
        self
    }

    /// Recursive queries of every connection stop with an error after `n` iterations.
    pub fn with_max_recursion(mut self, n: usize) -> SharedRuntime {
        self.max_recursion = n.max(1);
        self
    }

    pub(super) fn get(&self) -> Result<Arc<RuntimeEnv>> {
        if let Some(e) = self.env.get() {
            return Ok(e.clone());
        }
        let mut b = datafusion::execution::runtime_env::RuntimeEnvBuilder::new();
        if let Some(limit) = self.limit {
            // Fair with headroom: operators that can spill share what those that cannot
            // leave over, less a quarter kept for the merges that cannot spill.
            use datafusion::execution::memory_pool::TrackConsumersPool;
            let pool = TrackConsumersPool::new(
                crate::pool::HeadroomPool::new(limit),
                std::num::NonZeroUsize::new(5).unwrap_or(std::num::NonZeroUsize::MIN),
            );
            b = b.with_memory_pool(Arc::new(pool));
            // A merge of spilled runs holds a batch of each run it reads, as many as the
            // pool gives it up to this fan-in (merged in passes beyond), leaving the pool
            // to the sorts and merges running beside it: two runs at a time under 256 MiB,
            // up to eight from 512 MiB.
            b = b.with_max_spill_merge_fan_in((limit >> 26).clamp(2, 8));
        }
        if let Some(dir) = &self.spill {
            b = b.with_temp_file_path(dir.clone());
        }
        let env = b.build_arc()?;
        Ok(self.env.get_or_init(|| env).clone())
    }
}
